//! `CREATE TABLE` and `DROP TABLE`, straight from the parsed statement to the database: strata
//! tables need a primary key and take a layout and an engine, which DataFusion's own DDL has no
//! place for.
//!
//! ```sql
//! CREATE TABLE t (id BIGINT PRIMARY KEY, a INT NOT NULL, s TEXT)
//!     WITH (layout = 'L0-1: row; L2-: column', engine = 'lsm', aligned_compaction = true)
//! ```

use datafusion::sql::sqlparser::ast::{
    ColumnOption, CreateTable, CreateTableOptions, DataType, Expr as AstExpr, Ident, ObjectName, ObjectNamePart,
    SqlOption, TableConstraint, Value as AstValue,
};
use strata::{Column, ColumnType, Db, Engine, Schema, TableOptions};

use crate::catalog::{CATALOG, SCHEMA};
use crate::error::{ErrorKind, SqlError};

/// An identifier as DataFusion resolves it: unquoted names fold to lower case.
pub(crate) fn normalize(ident: &Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// The table an object name names (`t`, `public.t` or `strata.public.t`).
pub(crate) fn table_name(name: &ObjectName) -> Result<String, SqlError> {
    let parts: Vec<String> = name
        .0
        .iter()
        .map(|p| match p {
            ObjectNamePart::Identifier(i) => Ok(normalize(i)),
            ObjectNamePart::Function(_) => Err(SqlError::unsupported(format!("table name {name}"))),
        })
        .collect::<Result<_, _>>()?;
    match parts.as_slice() {
        [t] => Ok(t.clone()),
        [s, t] if s == SCHEMA => Ok(t.clone()),
        [c, s, t] if c == CATALOG && s == SCHEMA => Ok(t.clone()),
        _ => Err(SqlError::new(
            ErrorKind::UndefinedTable,
            format!("{name}: strata tables live in schema {CATALOG}.{SCHEMA}"),
        )),
    }
}

/// The strata type of a SQL type name.
fn column_type(t: &DataType) -> Result<ColumnType, SqlError> {
    Ok(match t {
        DataType::BigInt(_) | DataType::Int8(_) | DataType::Int64 => ColumnType::BigInt,
        DataType::Int(_) | DataType::Integer(_) | DataType::Int4(_) | DataType::Int32 => ColumnType::Int,
        DataType::SmallInt(_) | DataType::Int2(_) | DataType::Int16 => ColumnType::SmallInt,
        DataType::TinyInt(_) => ColumnType::TinyInt,
        DataType::Double(_) | DataType::DoublePrecision | DataType::Float8 | DataType::Float64 => ColumnType::Double,
        DataType::Float(info) => match info {
            // FLOAT(p) is REAL up to 24 bits of precision, DOUBLE above (as in PostgreSQL).
            datafusion::sql::sqlparser::ast::ExactNumberInfo::Precision(p) if *p <= 24 => ColumnType::Real,
            _ => ColumnType::Double,
        },
        DataType::Real | DataType::Float4 | DataType::Float32 => ColumnType::Real,
        DataType::Boolean | DataType::Bool => ColumnType::Boolean,
        DataType::Text
        | DataType::String(_)
        | DataType::Varchar(_)
        | DataType::CharacterVarying(_)
        | DataType::CharVarying(_)
        | DataType::Nvarchar(_) => ColumnType::Text,
        DataType::Bytea | DataType::Blob(_) | DataType::Varbinary(_) | DataType::Binary(_) => ColumnType::Bytea,
        DataType::Date => ColumnType::Date,
        other => {
            return Err(SqlError::unsupported(format!(
            "column type {other} (strata has BIGINT, INT, SMALLINT, TINYINT, DOUBLE, REAL, BOOLEAN, TEXT, BYTEA, DATE)"
        )))
        }
    })
}

fn option_text(key: &str, v: &AstExpr) -> Result<String, SqlError> {
    match v {
        AstExpr::Value(v) => match &v.value {
            AstValue::SingleQuotedString(s) | AstValue::DoubleQuotedString(s) => Ok(s.clone()),
            AstValue::Boolean(b) => Ok(b.to_string()),
            other => Ok(other.to_string()),
        },
        AstExpr::Identifier(i) => Ok(i.value.clone()),
        other => Err(SqlError::invalid(format!("table option {key} = {other}: expected a string"))),
    }
}

/// Runs a `CREATE TABLE`; returns whether a table was created (false: `IF NOT EXISTS` found one).
pub(crate) fn create_table(db: &Db, ct: &CreateTable) -> Result<bool, SqlError> {
    if ct.query.is_some() {
        return Err(SqlError::unsupported(
            "CREATE TABLE ... AS SELECT: strata tables need a primary key; create the table, then INSERT ... SELECT",
        ));
    }
    if ct.or_replace || ct.temporary || ct.external || ct.like.is_some() || ct.clone.is_some() {
        return Err(SqlError::unsupported(
            "CREATE TABLE supports a column list, a PRIMARY KEY and WITH (layout, engine, aligned_compaction) only",
        ));
    }
    let name = table_name(&ct.name)?;
    if ct.if_not_exists && db.table(&name).is_ok() {
        return Ok(false);
    }
    let mut columns = Vec::with_capacity(ct.columns.len());
    let mut key: Vec<String> = Vec::new();
    for def in &ct.columns {
        let col_name = normalize(&def.name);
        let mut col = Column::new(col_name.clone(), column_type(&def.data_type)?);
        for opt in &def.options {
            match &opt.option {
                ColumnOption::NotNull => col.nullable = false,
                ColumnOption::Null => col.nullable = true,
                ColumnOption::PrimaryKey(_) => {
                    if !key.is_empty() {
                        return Err(SqlError::invalid(format!(
                            "table {name}: more than one PRIMARY KEY (use PRIMARY KEY (a, b) for a composite key)"
                        )));
                    }
                    key.push(col_name.clone());
                }
                other => {
                    return Err(SqlError::unsupported(format!("column option {other} (column {col_name})")));
                }
            }
        }
        columns.push(col);
    }
    for c in &ct.constraints {
        match c {
            TableConstraint::PrimaryKey(pk) => {
                if !key.is_empty() {
                    return Err(SqlError::invalid(format!("table {name}: more than one PRIMARY KEY")));
                }
                for ic in &pk.columns {
                    match &ic.column.expr {
                        AstExpr::Identifier(i) => key.push(normalize(i)),
                        other => return Err(SqlError::invalid(format!("PRIMARY KEY ({other}): expected a column"))),
                    }
                }
            }
            other => return Err(SqlError::unsupported(format!("table constraint {other}"))),
        }
    }
    if key.is_empty() {
        return Err(SqlError::invalid(format!(
            "table {name} has no PRIMARY KEY: every strata table is keyed (e.g. id BIGINT PRIMARY KEY)"
        )));
    }
    let mut options = TableOptions::default();
    let with: &[SqlOption] = match &ct.table_options {
        CreateTableOptions::None => &[],
        CreateTableOptions::With(o) => o,
        other => return Err(SqlError::unsupported(format!("table options {other}: use WITH (key = 'value', ...)"))),
    };
    for o in with {
        let SqlOption::KeyValue { key: k, value } = o else {
            return Err(SqlError::invalid(format!("table option {o}: expected key = 'value'")));
        };
        let k = normalize(k);
        let v = option_text(&k, value)?;
        match k.as_str() {
            "layout" => {
                options = TableOptions::with_layout(v).with_engine(options.engine).aligned(options.aligned_compaction)
            }
            "engine" => {
                let e = Engine::from_name(&v)
                    .ok_or_else(|| SqlError::invalid(format!("engine = '{v}': expected 'lsm' or 'lineage'")))?;
                options = options.with_engine(e);
            }
            "aligned_compaction" => {
                let on = match v.to_lowercase().as_str() {
                    "true" | "on" => true,
                    "false" | "off" => false,
                    _ => return Err(SqlError::invalid(format!("aligned_compaction = '{v}': expected true or false"))),
                };
                options = options.aligned(on);
            }
            _ => {
                return Err(SqlError::invalid(format!(
                    "unknown table option {k} (known: layout, engine, aligned_compaction)"
                )))
            }
        }
    }
    let key_refs: Vec<&str> = key.iter().map(String::as_str).collect();
    let schema = Schema::new(columns, &key_refs)?;
    db.create_table(&name, schema, options)?;
    Ok(true)
}

/// Runs a `DROP TABLE`; returns how many tables were dropped.
pub(crate) fn drop_tables(db: &Db, names: &[ObjectName], if_exists: bool) -> Result<usize, SqlError> {
    let names: Vec<String> = names.iter().map(table_name).collect::<Result<_, _>>()?;
    // Check every name first, so that a statement naming a missing table drops nothing.
    if !if_exists {
        if let Some(missing) = names.iter().find(|n| db.table(n).is_err()) {
            return Err(SqlError::new(ErrorKind::UndefinedTable, format!("table {missing} does not exist")));
        }
    }
    let mut dropped = 0;
    for n in &names {
        match db.drop_table(n) {
            Ok(()) => dropped += 1,
            Err(strata::Error::UnknownTable(_)) if if_exists => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(dropped)
}
