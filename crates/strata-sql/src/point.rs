//! Statements that name one row by its whole primary key, run without DataFusion.
//!
//! `SELECT a, b FROM t WHERE k = 5` and `UPDATE t SET n = n + 1 WHERE k = $1` are most of what
//! an OLTP client sends, and planning them through DataFusion (parse, analyze, optimize, plan
//! physically, run a stream) costs many times the engine's point read. A statement of one of
//! the forms below is planned here instead, straight from its syntax tree, into a point read
//! (and, for UPDATE, one row write); every other statement, and every form this module does not
//! recognize exactly, goes through DataFusion as before, so the two paths never disagree on
//! what a statement means:
//!
//! - `SELECT items FROM t [[AS] a] WHERE k1 = v1 [AND k2 = v2 ...]`: the items are `*` or
//!   columns (bare or qualified by the table or its alias), each with an optional alias and no
//!   two with the same output name; the equalities name every primary-key column once (either
//!   side), and nothing else.
//! - `UPDATE t SET c = e [, ...] WHERE` the same key equalities: every assigned column is an
//!   integer column outside the key, and `e` is a value, a column of the row, or a column plus
//!   or minus a value (`abalance = abalance + $1`). Arithmetic is exact: a result outside the
//!   column's type fails with 22003, as in PostgreSQL.
//!
//! A value is an integer literal (optionally negated), a string literal, or a parameter `$n`;
//! key columns are integer or plain TEXT columns, and a literal must be of the key column's
//! kind. A parameter takes the type of the column it is compared with or assigned to (or the
//! integer type its client declared).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, BinaryOperator, Expr, GroupByExpr, Ident, ObjectName, ObjectNamePart, Query, Select,
    SelectFlavor, SelectItem, SetExpr, Statement, TableFactor, TableWithJoins, UnaryOperator, Update,
    Value as SqlValue,
};
use strata::{ColumnType, Db, Projection, Table, Value};

use crate::error::{ErrorKind, SqlError};
use crate::txn::Reads;
use crate::Output;

/// A point statement, planned (see the [module](self) documentation).
pub struct Point {
    table: Table,
    /// The statement and the parameter types its client declared, to plan it again when the
    /// table changed after it was planned (a prepared statement outliving a DDL).
    stmt: Box<Statement>,
    declared: Vec<Option<DataType>>,
    /// The value of each primary-key column, in key order.
    key: Vec<Operand>,
    /// The types of the parameters `$1`, `$2`, ...
    params: Vec<Option<DataType>>,
    kind: Kind,
}

impl std::fmt::Debug for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Point").field("table", &self.table.name()).field("key", &self.key).finish_non_exhaustive()
    }
}

enum Kind {
    Select {
        /// The schema columns read, in output order.
        cols: Vec<usize>,
        projection: Projection,
        /// The output: the columns' types under their output names.
        schema: SchemaRef,
    },
    Update {
        /// What the row is read for: its key columns (to know it exists) and the columns the
        /// assignments read, in this order.
        projection: Projection,
        sets: Vec<Assign>,
    },
}

/// A value in a statement: a literal or a parameter (0-based).
#[derive(Debug, Clone)]
enum Operand {
    Value(Value),
    Param(usize),
}

/// One assignment of an UPDATE: `col = [source ±] operand`, or `col = source`.
#[derive(Debug)]
struct Assign {
    col: usize,
    /// The column read (an index into the read projection) and whether the operand is
    /// subtracted from it.
    source: Option<(usize, bool)>,
    operand: Option<Operand>,
}

/// An identifier as DataFusion resolves it: unquoted names fold to lower case.
fn ident(i: &Ident) -> String {
    match i.quote_style {
        Some(_) => i.value.clone(),
        None => i.value.to_lowercase(),
    }
}

/// The one identifier `name` is, if it is a single part.
fn single(name: &ObjectName) -> Option<String> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(i)] => Some(ident(i)),
        _ => None,
    }
}

/// Whether a column of type `ty` can be a key column of a point statement.
fn key_type(ty: ColumnType) -> bool {
    matches!(ty, ColumnType::BigInt | ColumnType::Int | ColumnType::SmallInt | ColumnType::TinyInt | ColumnType::Text)
}

fn integer(ty: ColumnType) -> bool {
    matches!(ty, ColumnType::BigInt | ColumnType::Int | ColumnType::SmallInt | ColumnType::TinyInt)
}

/// The table a point statement reads, and the names its columns may be qualified with.
struct Scope {
    table: Table,
    /// The name columns may be qualified with: the alias if there is one, else the table name.
    qualifier: String,
    /// The columns SQL sees.
    visible: Vec<usize>,
    /// Parameter types so far, by position.
    params: Vec<Option<DataType>>,
    declared: Vec<Option<DataType>>,
}

impl Scope {
    fn of(db: &Db, from: &TableWithJoins) -> Option<Scope> {
        let TableWithJoins { relation, joins } = from;
        if !joins.is_empty() {
            return None;
        }
        let TableFactor::Table {
            name,
            alias,
            args,
            with_hints,
            version,
            with_ordinality,
            partitions,
            json_path,
            sample,
            index_hints,
        } = relation
        else {
            return None;
        };
        if args.is_some()
            || !with_hints.is_empty()
            || version.is_some()
            || *with_ordinality
            || !partitions.is_empty()
            || json_path.is_some()
            || sample.is_some()
            || !index_hints.is_empty()
        {
            return None;
        }
        let name = single(name)?;
        if name.starts_with(crate::catalog::OWN_PREFIX) {
            return None;
        }
        let qualifier = match alias {
            Some(a) if a.columns.is_empty() => ident(&a.name),
            Some(_) => return None,
            None => name.clone(),
        };
        let table = db.table(&name).ok()?;
        let visible = crate::meta::visible_columns(&table);
        Some(Scope { table, qualifier, visible, params: Vec::new(), declared: Vec::new() })
    }

    /// The visible schema column `e` names.
    fn column(&self, e: &Expr) -> Option<usize> {
        let name = match e {
            Expr::Identifier(i) => ident(i),
            Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                [q, c] if ident(q) == self.qualifier => ident(c),
                _ => return None,
            },
            Expr::Nested(inner) => return self.column(inner),
            _ => return None,
        };
        let c = self.table.schema().column_index(&name)?;
        self.visible.contains(&c).then_some(c)
    }

    /// `e` as a value for a column of type `ty`: a literal of its kind or a parameter, which
    /// then takes the column's type (or the integer type its client declared).
    fn operand(&mut self, e: &Expr, ty: ColumnType) -> Option<Operand> {
        self.operand_as(e, ty, ty)
    }

    /// [`Scope::operand`], an integer literal read as type `literal` (an assignment's
    /// operands are BIGINT: the result is range-checked, as PostgreSQL checks it).
    fn operand_as(&mut self, e: &Expr, ty: ColumnType, literal: ColumnType) -> Option<Operand> {
        match e {
            Expr::Nested(inner) => self.operand_as(inner, ty, literal),
            Expr::Value(v) => match &v.value {
                SqlValue::Placeholder(p) => {
                    let n: usize = p.strip_prefix('$')?.parse().ok()?;
                    let i = n.checked_sub(1)?;
                    let own = strata::scan::arrow_type(ty);
                    let t = match self.declared.get(i).cloned().flatten() {
                        None => own,
                        Some(d) if d == own => own,
                        Some(d @ (DataType::Int16 | DataType::Int32 | DataType::Int64)) if integer(ty) => d,
                        Some(_) => return None,
                    };
                    if self.params.len() <= i {
                        self.params.resize(i + 1, None);
                    }
                    match &self.params[i] {
                        Some(known) if *known != t => return None,
                        _ => self.params[i] = Some(t),
                    }
                    Some(Operand::Param(i))
                }
                SqlValue::Number(n, false) if integer(ty) => {
                    Some(Operand::Value(fit_integer(n.to_string().parse::<i64>().ok()?, literal)?))
                }
                SqlValue::SingleQuotedString(s) if ty == ColumnType::Text => {
                    Some(Operand::Value(Value::Text(s.clone())))
                }
                _ => None,
            },
            Expr::UnaryOp { op: UnaryOperator::Minus, expr } if integer(ty) => match expr.as_ref() {
                Expr::Value(v) => match &v.value {
                    SqlValue::Number(n, false) => {
                        Some(Operand::Value(fit_integer(n.to_string().parse::<i64>().ok()?.checked_neg()?, literal)?))
                    }
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        }
    }

    /// The key values a WHERE clause of key equalities gives, in key order.
    fn key(&mut self, selection: Option<&Expr>) -> Option<Vec<Operand>> {
        let mut equalities = Vec::new();
        conjuncts(selection?, &mut equalities)?;
        let pk = self.table.schema().primary_key().to_vec();
        if equalities.len() != pk.len() {
            return None;
        }
        let mut key: Vec<Option<Operand>> = vec![None; pk.len()];
        for (l, r) in equalities {
            let (c, v) = match (self.column(l), self.column(r)) {
                (Some(c), None) => (c, r),
                (None, Some(c)) => (c, l),
                _ => return None,
            };
            let at = pk.iter().position(|&k| k == c)?;
            let ty = self.table.schema().columns()[c].ty;
            if !key_type(ty) || key[at].is_some() || crate::meta::text_kind(&self.table, c).is_some() {
                return None;
            }
            key[at] = Some(self.operand(v, ty)?);
        }
        key.into_iter().collect()
    }
}

/// The operands of the equalities `e` is a conjunction of; `None` if it holds anything else.
fn conjuncts<'a>(e: &'a Expr, out: &mut Vec<(&'a Expr, &'a Expr)>) -> Option<()> {
    match e {
        Expr::Nested(inner) => conjuncts(inner, out),
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
            conjuncts(left, out)?;
            conjuncts(right, out)
        }
        Expr::BinaryOp { left, op: BinaryOperator::Eq, right } => {
            out.push((left, right));
            Some(())
        }
        _ => None,
    }
}

/// `v` as a value of integer type `ty`, if it is in its range.
fn fit_integer(v: i64, ty: ColumnType) -> Option<Value> {
    Some(match ty {
        ColumnType::BigInt => Value::BigInt(v),
        ColumnType::Int => Value::Int(i32::try_from(v).ok()?),
        ColumnType::SmallInt => Value::SmallInt(i16::try_from(v).ok()?),
        ColumnType::TinyInt => Value::TinyInt(i8::try_from(v).ok()?),
        _ => return None,
    })
}

fn as_i64(v: &Value) -> Option<i64> {
    Some(match v {
        Value::BigInt(x) => *x,
        Value::Int(x) => i64::from(*x),
        Value::SmallInt(x) => i64::from(*x),
        Value::TinyInt(x) => i64::from(*x),
        _ => return None,
    })
}

/// `v` as a value of column type `ty` (a parameter's value as the column compares or stores
/// it): `Ok(None)` when no value of the type equals it (an integer out of range).
fn to_column(v: Value, ty: ColumnType) -> Result<Option<Value>, SqlError> {
    if v == Value::Null {
        return Ok(Some(Value::Null));
    }
    if integer(ty) {
        let x = as_i64(&v).ok_or_else(|| mismatch(&v, ty))?;
        return Ok(fit_integer(x, ty));
    }
    match (ty, v) {
        (ColumnType::Text, v @ Value::Text(_)) => Ok(Some(v)),
        (_, v) => Err(mismatch(&v, ty)),
    }
}

fn mismatch(v: &Value, ty: ColumnType) -> SqlError {
    SqlError::new(ErrorKind::Internal, format!("a parameter {v:?} for a {ty:?} column"))
}

fn out_of_range(ty: ColumnType) -> SqlError {
    let name = match ty {
        ColumnType::BigInt => "bigint",
        ColumnType::SmallInt => "smallint",
        ColumnType::TinyInt => "tinyint",
        _ => "integer",
    };
    SqlError::new(ErrorKind::NumericOutOfRange, format!("{name} out of range"))
}

/// Plans `stmt` as a point statement if it is one (see the [module](self) documentation);
/// `declared` holds the parameter types a client declared.
pub(crate) fn plan(db: &Db, stmt: &Statement, declared: &[Option<DataType>]) -> Option<Point> {
    let (table, key, params, kind) = match stmt {
        Statement::Query(q) => select(db, q, declared)?,
        Statement::Update(u) => update(db, u, declared)?,
        _ => return None,
    };
    // Every parameter must be one the statement uses (a declared one it does not, or a gap in
    // the numbering, is DataFusion's to type).
    if declared.len() > params.len() || params.iter().any(Option::is_none) {
        return None;
    }
    Some(Point { table, stmt: Box::new(stmt.clone()), declared: declared.to_vec(), key, params, kind })
}

/// What planning a statement gives: its table, key, parameter types and what it does.
type Planned = (Table, Vec<Operand>, Vec<Option<DataType>>, Kind);

fn select(db: &Db, query: &Query, declared: &[Option<DataType>]) -> Option<Planned> {
    let Query { with, body, order_by, limit_clause, fetch, locks, for_clause, settings, format_clause, pipe_operators } =
        query;
    if with.is_some()
        || order_by.is_some()
        || limit_clause.is_some()
        || fetch.is_some()
        || !locks.is_empty()
        || for_clause.is_some()
        || settings.is_some()
        || format_clause.is_some()
        || !pipe_operators.is_empty()
    {
        return None;
    }
    let SetExpr::Select(select) = body.as_ref() else { return None };
    let Select {
        select_token: _,
        optimizer_hints,
        distinct,
        select_modifiers,
        top,
        top_before_distinct: _,
        projection,
        exclude,
        into,
        from,
        lateral_views,
        prewhere,
        selection,
        connect_by,
        group_by,
        cluster_by,
        distribute_by,
        sort_by,
        having,
        named_window,
        qualify,
        window_before_qualify: _,
        value_table_mode,
        flavor,
    } = select.as_ref();
    let no_grouping = match group_by {
        GroupByExpr::Expressions(e, m) => e.is_empty() && m.is_empty(),
        GroupByExpr::All(_) => false,
    };
    if !optimizer_hints.is_empty()
        || distinct.is_some()
        || select_modifiers.is_some()
        || top.is_some()
        || exclude.is_some()
        || into.is_some()
        || !lateral_views.is_empty()
        || prewhere.is_some()
        || !connect_by.is_empty()
        || !no_grouping
        || !cluster_by.is_empty()
        || !distribute_by.is_empty()
        || !sort_by.is_empty()
        || having.is_some()
        || !named_window.is_empty()
        || qualify.is_some()
        || value_table_mode.is_some()
        || *flavor != SelectFlavor::Standard
    {
        return None;
    }
    let [from] = from.as_slice() else { return None };
    let mut scope = Scope::of(db, from)?;
    scope.declared = declared.to_vec();
    let mut cols = Vec::new();
    let mut names = Vec::new();
    for item in projection {
        match item {
            SelectItem::Wildcard(options) if *options == Default::default() => {
                for &c in &scope.visible {
                    cols.push(c);
                    names.push(scope.table.schema().columns()[c].name.clone());
                }
            }
            SelectItem::UnnamedExpr(e) => {
                let c = scope.column(e)?;
                cols.push(c);
                names.push(scope.table.schema().columns()[c].name.clone());
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                cols.push(scope.column(expr)?);
                names.push(ident(alias));
            }
            _ => return None,
        }
    }
    // DataFusion refuses duplicate output names; let it say so.
    if cols.is_empty() || names.iter().enumerate().any(|(i, n)| names[..i].contains(n)) {
        return None;
    }
    let key = scope.key(selection.as_ref())?;
    let columns = scope.table.schema().columns();
    let fields: Vec<Field> = cols
        .iter()
        .zip(&names)
        .map(|(&c, n)| Field::new(n.clone(), strata::scan::arrow_type(columns[c].ty), columns[c].nullable))
        .collect();
    let read: Vec<&str> = cols.iter().map(|&c| columns[c].name.as_str()).collect();
    let projection = scope.table.projection(&read).ok()?;
    let schema = Arc::new(Schema::new(fields));
    Some((scope.table, key, scope.params, Kind::Select { cols, projection, schema }))
}

fn update(db: &Db, update: &Update, declared: &[Option<DataType>]) -> Option<Planned> {
    let Update {
        update_token: _,
        optimizer_hints,
        table,
        assignments,
        from,
        selection,
        returning,
        output,
        or,
        order_by,
        limit,
    } = update;
    if !optimizer_hints.is_empty()
        || from.is_some()
        || returning.is_some()
        || output.is_some()
        || or.is_some()
        || !order_by.is_empty()
        || limit.is_some()
        || assignments.is_empty()
    {
        return None;
    }
    let mut scope = Scope::of(db, table)?;
    scope.declared = declared.to_vec();
    let schema = scope.table.schema().clone();
    let columns = schema.columns();
    let pk = schema.primary_key().to_vec();
    let mut read: Vec<usize> = pk.clone();
    let mut sets: Vec<Assign> = Vec::new();
    for a in assignments {
        let AssignmentTarget::ColumnName(target) = &a.target else { return None };
        let col = schema.column_index(&single(target)?)?;
        let ty = columns[col].ty;
        if !scope.visible.contains(&col) || pk.contains(&col) || !integer(ty) || sets.iter().any(|s| s.col == col) {
            return None;
        }
        let set = match &a.value {
            Expr::BinaryOp { left, op: op @ (BinaryOperator::Plus | BinaryOperator::Minus), right } => {
                let minus = *op == BinaryOperator::Minus;
                match (source(&scope, &mut read, left), minus) {
                    (Some(s), _) => Assign {
                        col,
                        source: Some((s, minus)),
                        operand: Some(scope.operand_as(right, ty, ColumnType::BigInt)?),
                    },
                    (None, false) => {
                        let s = source(&scope, &mut read, right)?;
                        Assign {
                            col,
                            source: Some((s, false)),
                            operand: Some(scope.operand_as(left, ty, ColumnType::BigInt)?),
                        }
                    }
                    (None, true) => return None,
                }
            }
            e => match source(&scope, &mut read, e) {
                Some(s) => Assign { col, source: Some((s, false)), operand: None },
                None => Assign { col, source: None, operand: Some(scope.operand_as(e, ty, ColumnType::BigInt)?) },
            },
        };
        sets.push(set);
    }
    let key = scope.key(selection.as_ref())?;
    let names: Vec<&str> = read.iter().map(|&c| columns[c].name.as_str()).collect();
    let projection = scope.table.projection(&names).ok()?;
    Some((scope.table, key, scope.params, Kind::Update { projection, sets }))
}

/// The integer column `e` names, as an index into `read` (the columns an UPDATE reads; added
/// if it is not there yet).
fn source(scope: &Scope, read: &mut Vec<usize>, e: &Expr) -> Option<usize> {
    let c = scope.column(e)?;
    if !integer(scope.table.schema().columns()[c].ty) {
        return None;
    }
    Some(match read.iter().position(|&r| r == c) {
        Some(i) => i,
        None => {
            read.push(c);
            read.len() - 1
        }
    })
}

impl Point {
    /// Whether it was planned for its table as it is now (not dropped or replaced since).
    pub(crate) fn is_current(&self, db: &Db) -> bool {
        crate::meta::is_current(db, &self.table)
    }

    /// The types of the parameters `$1`, `$2`, ...
    pub(crate) fn parameter_types(&self) -> &[Option<DataType>] {
        &self.params
    }

    /// The columns a SELECT returns; `None` for an UPDATE.
    pub(crate) fn output_schema(&self) -> Option<SchemaRef> {
        match &self.kind {
            Kind::Select { schema, .. } => Some(schema.clone()),
            Kind::Update { .. } => None,
        }
    }

    /// Whether it writes (an UPDATE).
    pub(crate) fn writes(&self) -> bool {
        matches!(self.kind, Kind::Update { .. })
    }

    /// The value of `op` with `params` bound, as column type `ty` takes it; `Ok(None)` when no
    /// value of the type equals it.
    fn value(&self, op: &Operand, params: Option<&ParamValues>, ty: ColumnType) -> Result<Option<Value>, SqlError> {
        match op {
            Operand::Value(v) => Ok(Some(v.clone())),
            Operand::Param(i) => {
                let given = match params {
                    Some(ParamValues::List(list)) => list.get(*i).map(|p| &p.value),
                    _ => None,
                };
                let given = given.ok_or_else(|| {
                    SqlError::new(ErrorKind::InvalidStatement, format!("no value for parameter ${}", i + 1))
                })?;
                let v = if given.is_null() {
                    Value::Null
                } else {
                    crate::filter::scalar_value(given).ok_or_else(|| {
                        SqlError::new(
                            ErrorKind::Internal,
                            format!("parameter ${} of type {}", i + 1, given.data_type()),
                        )
                    })?
                };
                to_column(v, ty)
            }
        }
    }

    /// The key with `params` bound; `None` when no row can have it (a NULL or out-of-range
    /// value).
    fn bound_key(&self, params: Option<&ParamValues>) -> Result<Option<Vec<Value>>, SqlError> {
        let schema = self.table.schema();
        let mut key = Vec::with_capacity(self.key.len());
        for (op, &c) in self.key.iter().zip(schema.primary_key()) {
            match self.value(op, params, schema.columns()[c].ty)? {
                Some(Value::Null) | None => return Ok(None),
                Some(v) => key.push(v),
            }
        }
        Ok(Some(key))
    }

    /// The table it reads or writes.
    pub(crate) fn table(&self) -> &Table {
        &self.table
    }

    /// For an UPDATE, the key of the row it writes with `params` bound (`None` for a query, and
    /// when no row can have the key).
    pub(crate) fn update_key(&self, params: Option<&ParamValues>) -> Result<Option<Vec<Value>>, SqlError> {
        match self.kind {
            Kind::Update { .. } => self.bound_key(params),
            Kind::Select { .. } => Ok(None),
        }
    }

    /// Runs the statement with `params` bound, reading at `reads` (`None`: the newest data,
    /// for a query outside a block). An UPDATE writes into the transaction `reads` holds.
    ///
    /// If the table was dropped since, this fails as a statement naming a missing table does;
    /// if it was replaced (dropped and created again, rebuilt by `ALTER TABLE`), the statement
    /// is planned again for the new table, and refused if that changes its parameters or its
    /// result columns, or is no longer a point statement.
    pub(crate) fn run(&self, db: &Db, params: Option<&ParamValues>, reads: Option<&Reads>) -> Result<Output, SqlError> {
        if self.is_current(db) {
            return self.run_current(db, params, reads);
        }
        // A table gone fails as a statement naming a missing table does.
        db.table(self.table.name())?;
        match plan(db, &self.stmt, &self.declared) {
            Some(p) if p.params == self.params && p.output_schema() == self.output_schema() => {
                p.run_current(db, params, reads)
            }
            _ => Err(SqlError::new(
                ErrorKind::FeatureNotSupported,
                format!(
                    "table {} changed since the statement was prepared, and the statement no longer reads or \
                     writes it the same way: prepare it again",
                    self.table.name()
                ),
            )),
        }
    }

    fn run_current(&self, db: &Db, params: Option<&ParamValues>, reads: Option<&Reads>) -> Result<Output, SqlError> {
        let key = self.bound_key(params)?;
        match &self.kind {
            Kind::Select { cols, projection, schema } => {
                let row = match key {
                    None => None,
                    Some(key) => match reads {
                        Some(Reads::Txn(cell)) => cell.read(|tx| tx.get(&self.table, &key, projection))?,
                        Some(Reads::Snapshot(s)) => {
                            self.table.get(&key, projection, &strata::ReadOptions { snapshot: Some(s) })?
                        }
                        None => self.table.get(&key, projection, &strata::ReadOptions::default())?,
                    },
                };
                let batches = match row {
                    None => Vec::new(),
                    Some(row) => {
                        let batch = strata::scan::rows_batch(self.table.schema(), cols, &[row])?;
                        let batch = RecordBatch::try_new(schema.clone(), batch.columns().to_vec())
                            .map_err(|e| SqlError::new(ErrorKind::Internal, e.to_string()))?;
                        vec![batch]
                    }
                };
                Ok(Output::Rows { schema: schema.clone(), batches })
            }
            Kind::Update { projection, sets } => {
                let Some(Reads::Txn(cell)) = reads else {
                    return Err(SqlError::new(ErrorKind::Internal, "a write outside a transaction"));
                };
                let Some(key) = key else { return Ok(Output::Command { tag: "UPDATE", rows: 0 }) };
                let Some(row) = cell.read(|tx| tx.get(&self.table, &key, projection))? else {
                    return Ok(Output::Command { tag: "UPDATE", rows: 0 });
                };
                let columns = self.table.schema().columns();
                let mut values = Vec::with_capacity(sets.len());
                for s in sets {
                    let ty = columns[s.col].ty;
                    let operand = match &s.operand {
                        Some(op) => Some(self.value(op, params, ty)?.ok_or_else(|| out_of_range(ty))?),
                        None => None,
                    };
                    let v = match (s.source, operand) {
                        (None, Some(Value::Null)) => Value::Null,
                        (None, Some(v)) => {
                            as_i64(&v).and_then(|x| fit_integer(x, ty)).ok_or_else(|| out_of_range(ty))?
                        }
                        (Some((i, _)), None) => to_column(row[i].clone(), ty)?.ok_or_else(|| out_of_range(ty))?,
                        (Some((i, minus)), Some(v)) => match (as_i64(&row[i]), as_i64(&v)) {
                            (Some(a), Some(b)) => {
                                let r = if minus { a.checked_sub(b) } else { a.checked_add(b) };
                                r.and_then(|r| fit_integer(r, ty)).ok_or_else(|| out_of_range(ty))?
                            }
                            _ => Value::Null,
                        },
                        (None, None) => return Err(SqlError::new(ErrorKind::Internal, "an empty assignment")),
                    };
                    values.push((columns[s.col].name.as_str(), v));
                }
                crate::dml::apply(db, cell, &self.table, vec![crate::dml::Change::Update(&key, values)])?;
                Ok(Output::Command { tag: "UPDATE", rows: 1 })
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use datafusion::sql::parser::Statement as DfStatement;

    use super::*;

    fn engine(dir: &std::path::Path) -> crate::SqlEngine {
        let db = Arc::new(Db::open(dir, strata::Options::default()).unwrap());
        crate::SqlEngine::new(db).unwrap()
    }

    fn planned(engine: &crate::SqlEngine, sql: &str, declared: &[Option<DataType>]) -> Option<Point> {
        let mut stmts = engine.parse(sql).unwrap();
        let DfStatement::Statement(ast) = stmts.remove(0) else { panic!("{sql}") };
        plan(engine.db(), &ast, declared)
    }

    /// Which statements take the point path: a change that quietly sends them back through
    /// DataFusion (or takes in one it should not) fails here.
    #[test]
    fn point_forms_are_recognized_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(engine.execute(
            "CREATE TABLE t (id INT PRIMARY KEY, n INT, s SMALLINT, c TEXT); \
             CREATE TABLE p (k TEXT, n BIGINT, v INT, PRIMARY KEY (k, n)); \
             CREATE TABLE h (a INT, b INT); \
             CREATE TABLE ch (k CHAR(3) PRIMARY KEY, v INT)",
        ))
        .unwrap();
        let point = [
            "SELECT n FROM t WHERE id = 1",
            "select N, \"c\" from T where ID = -1",
            "SELECT * FROM t WHERE 5 = id",
            "SELECT x.n AS m FROM t x WHERE (x.id = $1)",
            "SELECT t.c FROM t WHERE t.id = $1",
            "SELECT v FROM p WHERE n = 1 AND k = 'a'",
            "SELECT v FROM p WHERE (k = $2) AND (n = $1)",
            "UPDATE t SET n = n + 1 WHERE id = 1",
            "UPDATE t SET n = $2 + n, s = s - $3 WHERE id = $1",
            "UPDATE t SET n = 7, s = n WHERE id = 1",
            "UPDATE p SET v = v + -5 WHERE k = 'x' AND n = 2",
        ];
        for sql in point {
            assert!(planned(&engine, sql, &[]).is_some(), "{sql}");
        }
        let planned_by_datafusion = [
            "SELECT n FROM t WHERE id = 1 AND n = 2",
            "SELECT n FROM t WHERE id = 1 OR id = 2",
            "SELECT n FROM t WHERE id > 1",
            "SELECT n FROM t WHERE id = 1.5",
            "SELECT n FROM t WHERE id = '1'",
            "SELECT n FROM t WHERE id = 99999999999",
            "SELECT n, n FROM t WHERE id = 1",
            "SELECT n + 1 FROM t WHERE id = 1",
            "SELECT count(*) FROM t WHERE id = 1",
            "SELECT n FROM t WHERE id = 1 ORDER BY n",
            "SELECT n FROM t WHERE id = 1 LIMIT 1",
            "SELECT DISTINCT n FROM t WHERE id = 1",
            "SELECT n FROM t WHERE id = 1 FOR UPDATE",
            "SELECT n FROM public.t WHERE id = 1",
            "SELECT n FROM t, p WHERE id = 1",
            "SELECT n FROM t x WHERE t.id = 1",
            "SELECT v FROM p WHERE k = 'a'",
            "SELECT v FROM p WHERE k = 'a' AND k = 'b'",
            "SELECT b FROM h WHERE a = 1",
            "SELECT v FROM ch WHERE k = 'ab'",
            "SELECT n FROM nope WHERE id = 1",
            "WITH w AS (SELECT 1) SELECT n FROM t WHERE id = 1",
            "UPDATE t SET id = 2 WHERE id = 1",
            "UPDATE t SET c = 'x' WHERE id = 1",
            "UPDATE t SET n = n * 2 WHERE id = 1",
            "UPDATE t SET n = 1 - n WHERE id = 1",
            "UPDATE t SET n = 1, n = 2 WHERE id = 1",
            "UPDATE t SET n = 1 WHERE id = 1 RETURNING n",
            "UPDATE t SET n = 1 WHERE id >= 1",
            "UPDATE h SET b = 1 WHERE a = 1",
            "DELETE FROM t WHERE id = 1",
        ];
        for sql in planned_by_datafusion {
            assert!(planned(&engine, sql, &[]).is_none(), "{sql}");
        }
    }

    #[test]
    fn parameters_take_their_columns_types_or_a_declared_integer_type() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(engine.execute("CREATE TABLE p (k TEXT, n BIGINT, v INT, PRIMARY KEY (k, n))")).unwrap();
        let p = planned(&engine, "UPDATE p SET v = v + $3 WHERE n = $2 AND k = $1", &[]).unwrap();
        assert_eq!(p.parameter_types(), [Some(DataType::Utf8), Some(DataType::Int64), Some(DataType::Int32)]);
        let p = planned(&engine, "SELECT v FROM p WHERE n = $1 AND k = 'a'", &[Some(DataType::Int32)]).unwrap();
        assert_eq!(p.parameter_types(), [Some(DataType::Int32)]);
        let schema = p.output_schema().unwrap();
        assert_eq!(schema.field(0).name(), "v");
        assert!(planned(&engine, "SELECT v FROM p WHERE n = $1 AND k = 'a'", &[Some(DataType::Float64)]).is_none());
        assert!(planned(&engine, "SELECT v FROM p WHERE n = $1 AND k = $1", &[]).is_none());
        assert!(planned(&engine, "SELECT v FROM p WHERE n = $2 AND k = 'a'", &[]).is_none());
        let two = [Some(DataType::Int64), Some(DataType::Int64)];
        assert!(planned(&engine, "SELECT v FROM p WHERE n = $1 AND k = 'a'", &two).is_none());
    }

    /// A prepared point statement follows its table through DROP and CREATE (as PostgreSQL
    /// plans a prepared statement again), and is refused once it would mean something else.
    #[test]
    fn a_prepared_point_statement_follows_its_table_through_ddl() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        let rt = tokio::runtime::Runtime::new().unwrap();
        let run = |sql: &str| rt.block_on(engine.execute(sql)).unwrap();
        run("CREATE TABLE t (id INT PRIMARY KEY, n INT); INSERT INTO t VALUES (1, 10)");
        let stmt = engine.parse("SELECT n FROM t WHERE id = $1").unwrap().remove(0);
        let prepared = rt.block_on(engine.prepare(&stmt)).unwrap();
        assert!(prepared.is_point_read());
        let params = || Some(ParamValues::List(vec![datafusion::common::ScalarValue::Int32(Some(1)).into()]));
        let read = |p: &crate::Prepared| rt.block_on(engine.execute_prepared(p, params()));
        let value = |out: Output| match out {
            Output::Rows { batches, .. } => strata::scan::batch_rows(&batches[0]).remove(0).remove(0),
            other => panic!("{other:?}"),
        };
        assert_eq!(value(read(&prepared).unwrap()), Value::Int(10));
        run("DROP TABLE t; CREATE TABLE t (id INT PRIMARY KEY, n INT); INSERT INTO t VALUES (1, 20)");
        assert_eq!(value(read(&prepared).unwrap()), Value::Int(20));
        run("DROP TABLE t");
        assert_eq!(read(&prepared).unwrap_err().kind.sqlstate(), "42P01");
        run("CREATE TABLE t (id INT PRIMARY KEY, n TEXT); INSERT INTO t VALUES (1, 'x')");
        let e = read(&prepared).unwrap_err();
        assert_eq!(e.kind.sqlstate(), "0A000", "{e}");
    }

    /// Statements that differ only in their values are planned once, as one template.
    #[test]
    fn statements_differing_in_values_share_one_planned_template() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(
            engine.execute("CREATE TABLE t (id INT PRIMARY KEY, n INT); INSERT INTO t VALUES (1, 10), (-2, 20)"),
        )
        .unwrap();
        let templates = || engine.shared.templates.lock().len();
        for (sql, n) in [("SELECT n FROM t WHERE id = 1", 10), ("SELECT n FROM t WHERE id = -2;", 20)] {
            let (prepared, params) = engine.point_from_text(sql).unwrap();
            assert!(prepared.is_point_read());
            match rt.block_on(engine.execute_prepared(&prepared, Some(params))).unwrap() {
                Output::Rows { batches, .. } => {
                    assert_eq!(strata::scan::batch_rows(&batches[0]), vec![vec![Value::Int(n)]], "{sql}")
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(templates(), 2, "one template with `;`, one without");
        assert!(engine.point_from_text("SELECT n FROM t WHERE id = 7").is_some());
        assert_eq!(templates(), 2);
        // Out of INT's range: planned from the text (no row), the template stays.
        assert!(engine.point_from_text("SELECT n FROM t WHERE id = 99999999999").is_none());
        // Not a point statement: remembered as such.
        assert!(engine.point_from_text("SELECT 5 FROM t WHERE id = 1").is_none());
        assert!(engine.point_from_text("SELECT 6 FROM t WHERE id = 1").is_none());
        assert_eq!(templates(), 3);
    }

    /// A NULL parameter for a NOT NULL column is refused as the planned path refuses it, and
    /// writes nothing.
    #[test]
    fn a_null_for_a_not_null_column_is_refused() {
        use datafusion::common::ScalarValue;
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(
            engine.execute("CREATE TABLE t (id INT PRIMARY KEY, n INT NOT NULL); INSERT INTO t VALUES (1, 10)"),
        )
        .unwrap();
        let stmt = engine.parse("UPDATE t SET n = $2 WHERE id = $1").unwrap().remove(0);
        let prepared = rt.block_on(engine.prepare(&stmt)).unwrap();
        assert!(matches!(prepared, crate::Prepared::Point(_)));
        let params = ParamValues::List(vec![ScalarValue::Int32(Some(1)).into(), ScalarValue::Int32(None).into()]);
        let e = rt.block_on(engine.execute_prepared(&prepared, Some(params))).unwrap_err();
        assert_eq!(e.kind.sqlstate(), "23502", "{e}");
        let out = rt.block_on(engine.execute("SELECT n FROM t WHERE id = 1")).unwrap();
        match &out[0] {
            Output::Rows { batches, .. } => {
                assert_eq!(strata::scan::batch_rows(&batches[0]), vec![vec![Value::Int(10)]])
            }
            other => panic!("{other:?}"),
        }
    }

    /// A prepared statement DataFusion planned (not a point statement) is planned again once
    /// a table it reads is replaced, as a point statement is.
    #[test]
    fn a_prepared_planned_statement_follows_its_tables_through_ddl() {
        use datafusion::common::ScalarValue;
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        let rt = tokio::runtime::Runtime::new().unwrap();
        let run = |sql: &str| rt.block_on(engine.execute(sql)).unwrap();
        run("CREATE TABLE t (id INT PRIMARY KEY, n INT); INSERT INTO t VALUES (1, 10), (2, 20)");
        let stmt = engine.parse("SELECT count(*) FROM t WHERE n > $1 AND id IN (SELECT id FROM t)").unwrap().remove(0);
        let prepared = rt.block_on(engine.prepare(&stmt)).unwrap();
        assert!(matches!(prepared, crate::Prepared::Plan { .. }));
        let count = || {
            let params = ParamValues::List(vec![ScalarValue::Int32(Some(5)).into()]);
            rt.block_on(engine.execute_prepared(&prepared, Some(params))).map(|out| match out {
                Output::Rows { batches, .. } => strata::scan::batch_rows(&batches[0]).remove(0).remove(0),
                other => panic!("{other:?}"),
            })
        };
        assert_eq!(count().unwrap(), Value::BigInt(2));
        run("DROP TABLE t; CREATE TABLE t (id INT PRIMARY KEY, n INT); INSERT INTO t VALUES (1, 10), (2, 20), (3, 30)");
        assert_eq!(count().unwrap(), Value::BigInt(3));
        run("DROP TABLE t");
        assert_eq!(count().unwrap_err().kind.sqlstate(), "42P01");
        run("CREATE TABLE t (id INT PRIMARY KEY, n BIGINT); INSERT INTO t VALUES (1, 10)");
        let e = count().unwrap_err();
        assert_eq!(e.kind.sqlstate(), "0A000", "{e}");
    }
}
