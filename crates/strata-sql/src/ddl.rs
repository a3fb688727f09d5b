//! `CREATE TABLE` and `DROP TABLE`, straight from the parsed statement to the database: strata
//! tables need a primary key and take a layout and an engine, which DataFusion's own DDL has no
//! place for.
//!
//! ```sql
//! CREATE TABLE t (id BIGINT PRIMARY KEY, a INT NOT NULL, s TEXT)
//!     WITH (layout = 'L0-1: row; L2-: column', engine = 'lsm', aligned_compaction = true)
//! ```

use datafusion::sql::sqlparser::ast::{
    AlterTable, AlterTableOperation, CharacterLength, ColumnOption, CreateTable, CreateTableOptions, DataType,
    Expr as AstExpr, Ident, ObjectName, ObjectNamePart, SqlOption, TableConstraint, TimezoneInfo, Value as AstValue,
};
use strata::{Column, ColumnType, Db, Engine, Schema, TableOptions, Value};

use crate::catalog::{CATALOG, OWN_PREFIX, SCHEMA};
use crate::error::{ErrorKind, SqlError};
use crate::meta::{TextKind, HIDDEN, ROWID, TYPE_PREFIX};

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

/// The length of `CHAR(n)` / `VARCHAR(n)` (`None`: no length given).
fn text_length(t: &DataType, len: &Option<CharacterLength>) -> Result<Option<u32>, SqlError> {
    match len {
        None => Ok(None),
        Some(CharacterLength::IntegerLength { length, .. }) => match u32::try_from(*length) {
            Ok(n) if n >= 1 => Ok(Some(n)),
            _ => Err(SqlError::invalid(format!("column type {t}: the length must be 1 to {}", u32::MAX))),
        },
        Some(CharacterLength::Max) => Ok(None),
    }
}

/// The strata type of a SQL type name, with its declared length for `CHAR(n)` and
/// `VARCHAR(n)`.
fn column_type(t: &DataType) -> Result<(ColumnType, Option<TextKind>), SqlError> {
    let text = match t {
        // CHAR without a length is CHAR(1), as in PostgreSQL.
        DataType::Char(len) | DataType::Character(len) => Some(TextKind::Char(text_length(t, len)?.unwrap_or(1))),
        DataType::Varchar(len) | DataType::CharacterVarying(len) | DataType::CharVarying(len) => {
            text_length(t, len)?.map(TextKind::Varchar)
        }
        _ => None,
    };
    if let Some(kind) = text {
        return Ok((ColumnType::Text, Some(kind)));
    }
    Ok((column_type_of(t)?, None))
}

/// The strata type of a SQL type name.
fn column_type_of(t: &DataType) -> Result<ColumnType, SqlError> {
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
        DataType::Timestamp(precision, tz) => {
            if precision.is_some_and(|p| p != 6) {
                return Err(SqlError::unsupported(format!(
                    "column type {t}: strata keeps timestamps to the microsecond; declare TIMESTAMP or TIMESTAMP(6)"
                )));
            }
            match tz {
                TimezoneInfo::None | TimezoneInfo::WithoutTimeZone => ColumnType::Timestamp,
                TimezoneInfo::WithTimeZone | TimezoneInfo::Tz => ColumnType::TimestampTz,
            }
        }
        DataType::Datetime(None) => ColumnType::Timestamp,
        other => {
            return Err(SqlError::unsupported(format!(
                "column type {other} (strata has BIGINT, INT, SMALLINT, TINYINT, DOUBLE, REAL, BOOLEAN, TEXT, BYTEA, \
                 DATE, TIMESTAMP, TIMESTAMPTZ)"
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
    if name.starts_with(OWN_PREFIX) {
        return Err(SqlError::invalid(format!("table names starting with {OWN_PREFIX} are strata's own")));
    }
    if crate::views::exists(db, &name)? {
        return Err(SqlError::new(ErrorKind::DuplicateTable, format!("relation {name} already exists (a view)")));
    }
    let mut columns = Vec::with_capacity(ct.columns.len() + 1);
    let mut key: Vec<String> = Vec::new();
    let mut declared: Vec<(String, TextKind)> = Vec::new();
    for def in &ct.columns {
        let col_name = normalize(&def.name);
        if col_name == ROWID {
            return Err(SqlError::invalid(format!("column name {ROWID} is strata's own (the hidden row id)")));
        }
        let (ty, text) = column_type(&def.data_type)?;
        let mut col = Column::new(col_name.clone(), ty);
        if let Some(kind) = text {
            let (TextKind::Char(n) | TextKind::Varchar(n)) = kind;
            col = col.with_max_chars(n);
            declared.push((col_name.clone(), kind));
        }
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
    let mut options = TableOptions::default();
    for (col, kind) in declared {
        options = options.annotate(format!("{TYPE_PREFIX}{col}"), kind.type_name());
    }
    if key.is_empty() {
        // Keyed by a hidden row id, never reused (see `crate::meta`).
        columns.push(Column::not_null(ROWID, ColumnType::BigInt));
        key.push(ROWID.to_owned());
        options = options.annotate(HIDDEN, ROWID);
    }
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
            "layout" => options.layout = Some(v),
            // PostgreSQL's free space per page, for in-place updates; strata writes its files
            // full and updates out of place, so it takes the option and has no use for it.
            "fillfactor" => match v.parse::<u32>() {
                Ok(10..=100) => {}
                _ => return Err(SqlError::invalid(format!("fillfactor = {v}: expected an integer from 10 to 100"))),
            },
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
                    "unknown table option {k} (known: layout, engine, aligned_compaction, fillfactor)"
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
            if crate::views::exists(db, missing)? {
                return Err(SqlError::new(
                    ErrorKind::WrongObjectType,
                    format!("{missing} is not a table (it is a view)"),
                ));
            }
            return Err(SqlError::new(ErrorKind::UndefinedTable, format!("table {missing} does not exist")));
        }
    }
    let mut dropped = 0;
    for n in &names {
        // Its indexes first: a power loss in between leaves the table without them, never
        // indexes listed for a table that is gone (or for another of its name created later).
        crate::indexes::drop_of_table(db, n)?;
        match db.drop_table(n) {
            Ok(()) => dropped += 1,
            Err(strata::Error::UnknownTable(_)) if if_exists => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(dropped)
}

/// The prefix of tables strata-sql builds to replace others (`ALTER TABLE`); SQL never shows
/// them, and a new one first drops what a crash may have left.
pub(crate) const REBUILD_PREFIX: &str = "__strata_rebuild_";

/// Runs an `ALTER TABLE`: `ADD [CONSTRAINT name] PRIMARY KEY (columns)` on a table created
/// without a primary key, which rebuilds it keyed by those columns.
pub(crate) fn alter_table(db: &Db, at: &AlterTable) -> Result<(), SqlError> {
    let name = table_name(&at.name)?;
    let table = match db.table(&name) {
        Ok(t) => t,
        Err(strata::Error::UnknownTable(_)) if at.if_exists => return Ok(()),
        Err(_) => return Err(SqlError::new(ErrorKind::UndefinedTable, format!("table {name} does not exist"))),
    };
    match at.operations.as_slice() {
        [AlterTableOperation::AddConstraint { constraint: TableConstraint::PrimaryKey(pk), .. }] => {
            let mut key = Vec::with_capacity(pk.columns.len());
            for ic in &pk.columns {
                match &ic.column.expr {
                    AstExpr::Identifier(i) => key.push(normalize(i)),
                    other => return Err(SqlError::invalid(format!("PRIMARY KEY ({other}): expected a column"))),
                }
            }
            add_primary_key(db, &table, &key)
        }
        _ => Err(SqlError::unsupported(format!(
            "{at}: ALTER TABLE supports ADD PRIMARY KEY (columns) on a table created without one"
        ))),
    }
}

/// Rebuilds `table` (keyed by its hidden row id) keyed by `key`: its rows are copied at a
/// snapshot into a new table, which then replaces it in one step, refused if the table was
/// written meanwhile (see [`Db::replace_table`]).
fn add_primary_key(db: &Db, table: &strata::Table, key: &[String]) -> Result<(), SqlError> {
    let name = table.name().to_owned();
    if crate::indexes::any(db, &name)? {
        return Err(SqlError::unsupported(format!(
            "ADD PRIMARY KEY on table {name}, which has indexes: drop them first, then create them again"
        )));
    }
    if crate::meta::hidden_columns(table).is_empty() {
        return Err(SqlError::new(
            ErrorKind::InvalidTableDefinition,
            format!("multiple primary keys for table {name} are not allowed"),
        ));
    }
    let visible = crate::meta::visible_columns(table);
    let schema = table.schema();
    let mut columns: Vec<Column> = visible.iter().map(|&c| schema.columns()[c].clone()).collect();
    let mut key_idx = Vec::with_capacity(key.len());
    for k in key {
        let i = columns.iter().position(|c| c.name == *k).ok_or_else(|| {
            SqlError::new(ErrorKind::UndefinedColumn, format!("column {k} of table {name} does not exist"))
        })?;
        if key_idx.contains(&i) {
            return Err(SqlError::invalid(format!("column {k} appears twice in the primary key")));
        }
        key_idx.push(i);
        columns[i].nullable = false;
    }
    let mut options = table.options().clone();
    options.annotations.remove(HIDDEN);
    let key_refs: Vec<&str> = key.iter().map(String::as_str).collect();
    let new_schema = Schema::new(columns, &key_refs)?;

    let snapshot = db.snapshot();
    let read = strata::ReadOptions { snapshot: Some(&snapshot) };
    let mut rows: Vec<Vec<Value>> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for row in table.scan(&strata::KeyRange::all(), &strata::Projection::All, &read)? {
        let row = row?;
        let kept: Vec<Value> = visible.iter().map(|&c| row[c].clone()).collect();
        let key_vals: Vec<Value> = key_idx.iter().map(|&i| kept[i].clone()).collect();
        if let Some(i) = key_vals.iter().position(Value::is_null) {
            return Err(SqlError::new(
                ErrorKind::NotNullViolation,
                format!("column {} of relation {name} contains null values", key[i]),
            ));
        }
        if !seen.insert(format!("{key_vals:?}")) {
            return Err(SqlError::new(
                ErrorKind::UniqueViolation,
                format!(
                    "could not create unique index \"{name}_pkey\": key ({})={} is duplicated",
                    key.join(", "),
                    crate::display_key(&key_vals)
                ),
            ));
        }
        rows.push(kept);
    }
    let temp = format!("{REBUILD_PREFIX}{name}");
    match db.drop_table(&temp) {
        Ok(()) | Err(strata::Error::UnknownTable(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let new = db.create_table(&temp, new_schema, options)?;
    let built = (|| -> Result<(), SqlError> {
        if !rows.is_empty() {
            new.ingest(&rows)?;
        }
        db.replace_table(&name, &temp, Some(snapshot.seq()))?;
        Ok(())
    })();
    if built.is_err() {
        let _ = db.drop_table(&temp);
    }
    built
}
