//! INSERT, UPDATE and DELETE. Each runs the statement's input plan (the rows to insert, or the
//! target rows with their new values) as a query through the statement's transaction (its
//! snapshot with the block's own earlier writes), then writes every change into that
//! transaction, which the session commits: a statement applies entirely or not at all.
//!
//! Running the input plan, rather than taking the filters DataFusion hands a table provider's
//! `delete_from`/`update`, is what makes `WHERE x IN (SELECT ...)`, `EXISTS` and `WHERE false`
//! right: DataFusion 55 plans those as semi-joins or an empty relation and passes no filters at
//! all (apache/datafusion#24654), which would mean every row.
//!
//! An UPDATE writes only the assigned columns (a partial update); one that changes a primary key
//! deletes the old row and inserts the new one. INSERT refuses a key already present, as SQL's
//! primary key constraint does (`INSERT OR REPLACE INTO` overwrites instead): present as the
//! transaction sees the table. A key another transaction committed after the snapshot is not
//! seen, but writing it conflicts (40001), so two concurrent inserts of one key never both land.
//!
//! Under READ COMMITTED an UPDATE or DELETE locks the rows its input plan yields before it
//! writes them, and where another transaction committed one of them after the statement's
//! snapshot it runs the plan again at a new snapshot ([`run_locked`]); see `txn.rs`.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Column;
use datafusion::datasource::provider_as_source;
use datafusion::execution::SessionState;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{DmlStatement, Expr, LogicalPlan, LogicalPlanBuilder, TableScanBuilder, WriteOp};
use strata::scan::value_at;
use strata::{Db, Table, Value, WriteBatch};

use crate::error::{ErrorKind, SqlError};
use crate::indexes::{Maintainer, RowChange};
use crate::meta::{self, TextKind};
use crate::table::StrataTable;
use crate::txn::TxnCell;

/// What a DML statement did: its command tag and the rows it touched.
pub(crate) struct Done {
    pub tag: &'static str,
    pub rows: u64,
}

async fn run(state: &SessionState, plan: LogicalPlan) -> Result<Vec<RecordBatch>, SqlError> {
    let physical = state.create_physical_plan(&plan).await?;
    Ok(datafusion::physical_plan::collect(physical, state.task_ctx()).await?)
}

/// How many times an UPDATE or DELETE runs again at a new snapshot because rows it was to
/// change were committed by others meanwhile (READ COMMITTED), before it fails with 40001.
const RESTARTS: usize = 100;

/// Runs `plan`, whose first columns are `table`'s key, and locks the rows it yields (see
/// [`crate::txn::lock_rows`]). Where another transaction committed one of them after the
/// statement's snapshot, the statement reads again at a new snapshot, still holding the locks,
/// so that it changes the rows as they are now (READ COMMITTED), as PostgreSQL's re-check of
/// an updated row does.
async fn run_locked(
    state: &SessionState,
    plan: &LogicalPlan,
    table: &Table,
    tx: &Arc<TxnCell>,
) -> Result<Vec<RecordBatch>, SqlError> {
    let key_len = table.schema().primary_key().len();
    for _ in 0..RESTARTS {
        let batches = run(state, plan.clone()).await?;
        let keys: Vec<Vec<Value>> = batches
            .iter()
            .flat_map(|b| (0..b.num_rows()).map(move |i| (0..key_len).map(|c| value_at(b.column(c), i)).collect()))
            .collect();
        if !crate::txn::lock_rows(tx, table, keys).await? {
            return Ok(batches);
        }
        crate::txn::new_statement(tx)?;
    }
    Err(SqlError::new(
        ErrorKind::SerializationFailure,
        format!("rows of {} kept changing under the statement: it read them again {RESTARTS} times", table.name()),
    ))
}

fn rows(batches: &[RecordBatch]) -> impl Iterator<Item = Vec<Value>> + '_ {
    batches.iter().flat_map(|b| (0..b.num_rows()).map(move |i| b.columns().iter().map(|a| value_at(a, i)).collect()))
}

/// A key as a set member (values are not `Hash`: floats compare by bits).
fn key_id(key: &[Value]) -> String {
    format!("{key:?}")
}

fn key_of(table: &Table, row: &[Value]) -> Vec<Value> {
    table.schema().primary_key().iter().map(|&k| row[k].clone()).collect()
}

/// Whether rows exist as the transaction sees them, by key: a point read of the key columns
/// only (the projection is built once per statement).
struct Exists<'a> {
    table: &'a Table,
    tx: &'a TxnCell,
    projection: strata::Projection,
}

impl<'a> Exists<'a> {
    fn new(table: &'a Table, tx: &'a TxnCell) -> Result<Self, SqlError> {
        let schema = table.schema();
        let names: Vec<&str> = schema.primary_key().iter().map(|&k| schema.columns()[k].name.as_str()).collect();
        Ok(Exists { table, tx, projection: table.projection(&names)? })
    }

    fn check(&self, key: &[Value]) -> Result<bool, SqlError> {
        Ok(self.tx.read(|tx| tx.get(self.table, key, &self.projection))?.is_some())
    }
}

/// One row change of a statement.
pub(crate) enum Change<'a> {
    Insert(&'a [Value]),
    Update(&'a [Value], Vec<(&'a str, Value)>),
    Delete(&'a [Value]),
}

/// Writes a statement's changes into its transaction, in order and all together
/// ([`strata::Transaction::write_batch`]: one conflict check for the whole statement, and a
/// refused statement leaves nothing of it in the transaction).
///
/// The entries of the table's indexes go into the same batch (see `indexes.rs`).
pub(crate) fn apply(db: &Db, tx: &TxnCell, table: &Table, changes: Vec<Change<'_>>) -> Result<(), SqlError> {
    let mut batch = WriteBatch::new();
    let mut indexes = Maintainer::of(db, table)?;
    let schema = table.schema();
    for c in changes {
        if let Some(m) = indexes.as_mut() {
            match &c {
                Change::Insert(row) => m.change(tx, &mut batch, RowChange::Insert(row))?,
                Change::Delete(key) => m.change(tx, &mut batch, RowChange::Delete(key))?,
                Change::Update(key, set) => {
                    let set: Vec<(usize, Value)> = set
                        .iter()
                        .map(|(n, v)| {
                            schema.column_index(n).map(|c| (c, v.clone())).ok_or_else(|| {
                                SqlError::new(ErrorKind::UndefinedColumn, format!("column {n} does not exist"))
                            })
                        })
                        .collect::<Result<_, _>>()?;
                    m.change(tx, &mut batch, RowChange::Update(key, &set))?;
                }
            }
        }
        match c {
            Change::Insert(row) => batch.insert(table, row)?,
            Change::Update(key, set) => batch.update(table, key, &set)?,
            Change::Delete(key) => batch.delete(table, key)?,
        }
    }
    tx.write(|tx| tx.write_batch(batch))?;
    Ok(())
}

fn duplicate(table: &Table, key: &[Value]) -> SqlError {
    SqlError::new(
        ErrorKind::UniqueViolation,
        format!("duplicate key {} in table {}", crate::display_key(key), table.name()),
    )
}

/// Runs a planned DML statement, its reads and writes going through `tx` (which the session's
/// configuration in `state` also reads through).
pub(crate) async fn execute(
    db: &Arc<Db>,
    state: &SessionState,
    dml: &DmlStatement,
    tx: &Arc<TxnCell>,
) -> Result<Done, SqlError> {
    let table = db.table(dml.table_name.table())?;
    let target = Target::new(db, table);
    match &dml.op {
        WriteOp::Insert(op @ (InsertOp::Append | InsertOp::Replace)) => {
            insert(state, &target, dml, *op == InsertOp::Replace, tx).await
        }
        WriteOp::Insert(InsertOp::Overwrite) => Err(SqlError::unsupported("INSERT OVERWRITE")),
        WriteOp::Delete => {
            let input = with_hidden_scans(db, &target.table, dml.input.as_ref().clone())?;
            let n = delete(db, state, &target.table, dml, input, tx, true).await?;
            Ok(Done { tag: "DELETE", rows: n })
        }
        WriteOp::Truncate => {
            let source = provider_as_source(Arc::new(StrataTable::with_hidden(db.clone(), target.table.clone())));
            let all = LogicalPlanBuilder::scan(dml.table_name.clone(), source, None)?.build()?;
            // Every row, unlocked: a lock per row would cost memory for nothing the commit's
            // check does not already give (a concurrent writer of a row makes one of them fail).
            let n = delete(db, state, &target.table, dml, all, tx, false).await?;
            Ok(Done { tag: "TRUNCATE TABLE", rows: n })
        }
        WriteOp::Update => update(db, state, &target, dml, tx).await,
        other => Err(SqlError::unsupported(format!("{other}"))),
    }
}

/// The table a statement changes, with what SQL keeps about it.
struct Target {
    db: Arc<Db>,
    table: Table,
    /// The columns SQL sees, as schema indices (the statement's rows hold these, in order).
    visible: Vec<usize>,
    /// The declared text kinds of the columns, by schema index (empty: none has one).
    kinds: Vec<Option<TextKind>>,
}

impl Target {
    fn new(db: &Arc<Db>, table: Table) -> Target {
        Target { db: db.clone(), kinds: meta::text_kinds(&table), visible: meta::visible_columns(&table), table }
    }

    /// `v` as schema column `col` stores it (see [`meta::fit_text`]).
    fn fit(&self, col: usize, v: Value) -> Result<Value, SqlError> {
        match self.kinds.get(col).copied().flatten() {
            Some(kind) => meta::fit_text(kind, &self.table.schema().columns()[col].name, v),
            None => Ok(v),
        }
    }
}

/// `plan` with every scan of `table` reading its hidden columns too, so the statement can name
/// the rows it changes by their hidden row ids (the scans' other columns keep their positions).
fn with_hidden_scans(db: &Arc<Db>, table: &Table, plan: LogicalPlan) -> Result<LogicalPlan, SqlError> {
    let hidden = meta::hidden_columns(table);
    if hidden.is_empty() {
        return Ok(plan);
    }
    let visible = meta::visible_columns(table).len();
    let source = provider_as_source(Arc::new(StrataTable::with_hidden(db.clone(), table.clone())));
    let plan = plan.transform_up(|node| {
        let node = match node {
            LogicalPlan::TableScan(scan) if scan.table_name.table() == table.name() => {
                let mut projection = scan.projection.clone().unwrap_or_else(|| (0..visible).collect());
                projection.extend(visible..visible + hidden.len());
                let rebuilt = TableScanBuilder::new(scan.table_name.clone(), source.clone())
                    .with_projection(Some(projection))
                    .with_filters(scan.filters.clone())
                    .with_fetch(scan.fetch)
                    .build()?;
                LogicalPlan::TableScan(rebuilt)
            }
            // The columns below may have grown: nodes that keep their input's columns show them.
            other => other.recompute_schema()?,
        };
        Ok(Transformed::yes(node))
    })?;
    Ok(plan.data)
}

async fn insert(
    state: &SessionState,
    target: &Target,
    dml: &DmlStatement,
    replace: bool,
    tx: &TxnCell,
) -> Result<Done, SqlError> {
    let batches = run(state, dml.input.as_ref().clone()).await?;
    insert_rows(target, &target.visible, rows(&batches), replace, tx)
}

/// Runs a `COPY ... FROM STDIN` of `data` into its table, through `tx`.
pub(crate) fn copy(db: &Arc<Db>, copy: &crate::copy::CopyIn, data: &[u8], tx: &TxnCell) -> Result<Done, SqlError> {
    let table = db.table(&copy.table)?;
    let target = Target::new(db, table);
    let rows = crate::copy::rows(&target.table, copy, data)?;
    let done = insert_rows(&target, &copy.columns, rows.into_iter(), false, tx)?;
    Ok(Done { tag: "COPY", rows: done.rows })
}

/// Inserts `given` rows, each holding the values of schema columns `columns` in order (the
/// others are NULL, the hidden row id fresh).
fn insert_rows(
    target: &Target,
    columns: &[usize],
    given: impl Iterator<Item = Vec<Value>>,
    replace: bool,
    tx: &TxnCell,
) -> Result<Done, SqlError> {
    let table = &target.table;
    let width = table.schema().columns().len();
    let mut all: Vec<Vec<Value>> = Vec::new();
    for given in given {
        // The statement's rows hold the visible columns; the hidden ones are filled below.
        let mut row = vec![Value::Null; width];
        for (&c, v) in columns.iter().zip(given) {
            row[c] = target.fit(c, v)?;
        }
        all.push(row);
    }
    if let [rowid] = meta::hidden_columns(table)[..] {
        // Fresh row ids: no key can be present already.
        if !all.is_empty() {
            let first = table.sequence(meta::ROWID_SEQUENCE, all.len() as u64)?;
            for (i, row) in all.iter_mut().enumerate() {
                row[rowid] = Value::BigInt(first + i as i64);
            }
        }
        apply(&target.db, tx, table, all.iter().map(|r| Change::Insert(r)).collect())?;
        return Ok(Done { tag: "INSERT", rows: all.len() as u64 });
    }
    let mut seen = HashSet::new();
    let exists = Exists::new(table, tx)?;
    for row in &all {
        if !replace {
            let key = key_of(table, row);
            if !seen.insert(key_id(&key)) || exists.check(&key)? {
                return Err(duplicate(table, &key));
            }
        }
    }
    apply(&target.db, tx, table, all.iter().map(|r| Change::Insert(r)).collect())?;
    Ok(Done { tag: "INSERT", rows: all.len() as u64 })
}

/// Deletes the rows `input` produces (rows of the target table, possibly narrowed by joins),
/// locking them first when `lock` (see [`run_locked`]).
async fn delete(
    db: &Db,
    state: &SessionState,
    table: &Table,
    dml: &DmlStatement,
    input: LogicalPlan,
    tx: &Arc<TxnCell>,
    lock: bool,
) -> Result<u64, SqlError> {
    let keys: Vec<Expr> = table
        .schema()
        .primary_key()
        .iter()
        .map(|&k| Expr::Column(Column::new(Some(dml.table_name.clone()), &table.schema().columns()[k].name)))
        .collect();
    let plan = LogicalPlanBuilder::from(input).project(keys)?.build()?;
    let batches = if lock { run_locked(state, &plan, table, tx).await? } else { run(state, plan).await? };
    let keys: Vec<Vec<Value>> = rows(&batches).collect();
    let mut seen = HashSet::new();
    let changes: Vec<Change> = keys.iter().filter(|k| seen.insert(key_id(k))).map(|k| Change::Delete(k)).collect();
    let n = changes.len() as u64;
    apply(db, tx, table, changes)?;
    Ok(n)
}

async fn update(
    db: &Arc<Db>,
    state: &SessionState,
    target: &Target,
    dml: &DmlStatement,
    tx: &Arc<TxnCell>,
) -> Result<Done, SqlError> {
    let table = &target.table;
    // DataFusion plans an UPDATE as a projection with one expression per column: the column
    // itself where it is not assigned, the assigned value (cast to the column type) where it is.
    let LogicalPlan::Projection(p) = dml.input.as_ref() else {
        return Err(SqlError::unsupported("this form of UPDATE"));
    };
    let schema = table.schema();
    let columns = schema.columns();
    if p.expr.len() != target.visible.len() {
        return Err(SqlError::unsupported("this form of UPDATE"));
    }
    let mut qualifier = None;
    // The expression assigned to each schema column (hidden ones are never assigned).
    let mut exprs_of: Vec<Option<&Expr>> = vec![None; columns.len()];
    for (e, &c) in p.expr.iter().zip(&target.visible) {
        exprs_of[c] = Some(e);
    }
    let assigned: Vec<bool> = exprs_of
        .iter()
        .zip(columns)
        .map(|(e, col)| match e.map(|e| e.clone().unalias()) {
            None => false,
            Some(Expr::Column(c)) if c.name == col.name => {
                qualifier = qualifier.take().or(c.relation.clone());
                false
            }
            Some(_) => true,
        })
        .collect();
    let key = schema.primary_key();
    let moves_keys = key.iter().any(|&k| assigned[k]);
    let qualifier = qualifier.or_else(|| Some(dml.table_name.clone()));
    // Output: the old key, then the columns written (all of them when the key may change).
    let written: Vec<usize> = (0..columns.len()).filter(|&c| moves_keys || assigned[c]).collect();
    let mut exprs: Vec<Expr> = key
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            Expr::Column(Column::new(qualifier.clone(), &columns[k].name)).alias(format!("__strata_key_{i}"))
        })
        .collect();
    for &c in &written {
        exprs.push(exprs_of[c].cloned().ok_or_else(|| SqlError::unsupported("an UPDATE of a hidden column"))?);
    }
    let input = with_hidden_scans(db, table, p.input.as_ref().clone())?;
    let plan = LogicalPlanBuilder::from(input).project(exprs)?.build()?;
    let batches = run_locked(state, &plan, table, tx).await?;

    let mut targets = HashSet::new();
    let mut changes: Vec<(Vec<Value>, Vec<Value>)> = Vec::new();
    for mut row in rows(&batches) {
        for (v, &c) in row[key.len()..].iter_mut().zip(&written) {
            *v = target.fit(c, std::mem::replace(v, Value::Null))?;
        }
        let (old, new) = row.split_at(key.len());
        if !targets.insert(key_id(old)) {
            return Err(SqlError::invalid(format!(
                "UPDATE matched row {} of {} more than once",
                crate::display_key(old),
                table.name()
            )));
        }
        changes.push((old.to_vec(), new.to_vec()));
    }
    let mut out: Vec<Change> = Vec::with_capacity(changes.len());
    if moves_keys {
        // Rows whose key changes are deleted first and inserted after, so that keys may move
        // onto keys other rows of the statement vacate.
        let mut moved = Vec::new();
        let mut vacated = HashSet::new();
        for (old, new) in &changes {
            let new_key = key_of(table, new);
            if key_id(&new_key) == key_id(old) {
                let set: Vec<(&str, Value)> = (0..columns.len())
                    .filter(|&c| assigned[c])
                    .map(|c| (columns[c].name.as_str(), new[c].clone()))
                    .collect();
                out.push(Change::Update(old, set));
            } else {
                out.push(Change::Delete(old));
                vacated.insert(key_id(old));
                moved.push((new_key, new));
            }
        }
        let mut taken = HashSet::new();
        let exists = Exists::new(table, tx)?;
        for (new_key, new) in moved {
            let id = key_id(&new_key);
            if !taken.insert(id.clone()) || (!vacated.contains(&id) && exists.check(&new_key)?) {
                return Err(duplicate(table, &new_key));
            }
            out.push(Change::Insert(new));
        }
    } else {
        for (old, new) in &changes {
            let set: Vec<(&str, Value)> =
                written.iter().zip(new).map(|(&c, v)| (columns[c].name.as_str(), v.clone())).collect();
            out.push(Change::Update(old, set));
        }
    }
    apply(db, tx, table, out)?;
    Ok(Done { tag: "UPDATE", rows: changes.len() as u64 })
}
