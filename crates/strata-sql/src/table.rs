//! A strata table as a DataFusion [`TableProvider`], and the execution plan of its scans.
//!
//! Projection, filters and limit map onto a [`ScanRequest`]: a filter strata applies exactly
//! (see [`crate::filter`]) is reported `Exact`, so DataFusion drops its own copy and may push a
//! LIMIT too; conditions on the primary key narrow the key range read; and equality on the whole
//! key with no other condition becomes a point read (`Table::get`). Every scan of a statement reads
//! at the statement's snapshot, or through its transaction with the transaction's own writes
//! ([`Reads`]).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, DataFusionError, Result as DfResult, Statistics};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::expressions::Column as PhysicalColumn;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::limit::GlobalLimitExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties, SendableRecordBatchStream,
};
use strata::scan::{Expr as SExpr, ScanRequest};
use strata::{ReadOptions, Value};

use crate::error::external;
use crate::filter::{exact, KeyBounds};
use crate::txn::Reads;

/// What every read of the running statement reads at, carried in the session's configuration
/// (none: the newest data).
fn reads_of(ctx: &TaskContext) -> Option<Arc<Reads>> {
    ctx.session_config().get_extension::<Reads>()
}

/// One strata table.
pub(crate) struct StrataTable {
    table: strata::Table,
    schema: SchemaRef,
}

impl fmt::Debug for StrataTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StrataTable").field("name", &self.table.name()).finish_non_exhaustive()
    }
}

impl StrataTable {
    pub(crate) fn new(table: strata::Table) -> Self {
        let all: Vec<usize> = (0..table.schema().columns().len()).collect();
        let schema = strata::scan::row_schema(table.schema(), &all);
        StrataTable { table, schema }
    }

    /// The translated filters and what they say about the key.
    fn conditions(&self, filters: &[&Expr]) -> (Vec<Option<SExpr>>, KeyBounds) {
        let schema = self.table.schema();
        let translated: Vec<Option<SExpr>> = filters.iter().map(|f| exact(self.table.name(), f, schema)).collect();
        let pushed: Vec<SExpr> = translated.iter().flatten().cloned().collect();
        let bounds = KeyBounds::of(&pushed, schema);
        (translated, bounds)
    }

    /// About how many rows a scan returns (a point read: one; 0 when the table cannot say).
    fn estimated_rows(&self, point: bool, pushed: &[SExpr], limit: Option<usize>) -> u64 {
        if point {
            return 1;
        }
        let rows = self.table.estimated_rows().unwrap_or(0);
        let kept: f64 = pushed.iter().map(|e| crate::stats::selectivity(e, self.table.schema(), rows)).product();
        let kept = (rows as f64 * kept).ceil() as u64;
        limit.map_or(kept, |n| kept.min(n as u64))
    }
}

/// Whether `e` is an equality on a primary-key column (what a point read settles by itself).
fn is_key_equality(e: &SExpr, schema: &strata::Schema) -> bool {
    matches!(e, SExpr::Cmp { column, op: strata::scan::CmpOp::Eq, .. }
        if schema.primary_key().iter().any(|&k| schema.columns()[k].name == *column))
}

#[async_trait]
impl TableProvider for StrataTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        let (translated, _) = self.conditions(filters);
        Ok(translated
            .iter()
            .map(|t| match t {
                Some(_) => TableProviderFilterPushDown::Exact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let mut cols: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let refs: Vec<&Expr> = filters.iter().collect();
        let (translated, bounds) = self.conditions(&refs);
        let schema = self.table.schema();
        // Filters strata cannot apply, should DataFusion pass any (an optimizer rule may rewrite
        // a filter after it was accepted), are applied above the scan, never dropped.
        let residual: Vec<Expr> =
            filters.iter().zip(&translated).filter(|(_, t)| t.is_none()).map(|(f, _)| f.clone()).collect();
        let wanted = cols.len();
        for f in &residual {
            for c in f.column_refs() {
                let i = schema.column_index(&c.name).ok_or_else(|| {
                    DataFusionError::Plan(format!("column {} is not in table {}", c.name, self.table.name()))
                })?;
                if !cols.contains(&i) {
                    cols.push(i);
                }
            }
        }
        let limit_hint = limit;
        let limit = if residual.is_empty() { limit } else { None };
        let out_schema = Arc::new(self.schema.project(&cols)?);
        // A scan needs at least one column to count rows by; an empty projection reads the first
        // key column and drops it.
        let read_cols: Vec<usize> = if cols.is_empty() { vec![schema.primary_key()[0]] } else { cols.clone() };
        let names: Vec<&str> = read_cols.iter().map(|&c| schema.columns()[c].name.as_str()).collect();
        let pushed: Vec<SExpr> = translated.into_iter().flatten().collect();
        // Equality on the whole key alone (one per key column) is a point read; with other
        // conditions too, a scan of that one key applies them.
        let point =
            bounds.point().filter(|key| pushed.len() == key.len() && pushed.iter().all(|e| is_key_equality(e, schema)));
        let rows = self.estimated_rows(point.is_some(), &pushed, limit);
        let mode = match point {
            Some(key) => Mode::Point { key, projection: self.table.projection(&names).map_err(external)? },
            None => {
                let config = state.config();
                let mut req = ScanRequest::new()
                    .with_range(bounds.range())
                    .with_columns(&names)
                    .with_batch_rows(config.batch_size())
                    .with_partitions(if limit.is_some() { 1 } else { config.target_partitions().max(1) })
                    // The plan promises no order, so partitions feed it side by side.
                    .with_unordered(true);
                if !pushed.is_empty() {
                    req = req.with_filter(SExpr::And(pushed));
                }
                if let Some(n) = limit {
                    req = req.with_limit(n);
                }
                Mode::Scan(Box::new(req))
            }
        };
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(out_schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        let stats = Arc::new(crate::stats::estimate(&out_schema, rows));
        let scan: Arc<dyn ExecutionPlan> =
            Arc::new(ScanExec { table: self.table.clone(), read_cols, mode, schema: out_schema.clone(), props, stats });
        if residual.is_empty() {
            return Ok(scan);
        }
        let unqualified = |e: Expr| {
            e.transform(|e| {
                Ok(match e {
                    Expr::Column(c) => Transformed::yes(Expr::Column(Column::new_unqualified(c.name))),
                    e => Transformed::no(e),
                })
            })
            .data()
        };
        let predicate = residual.into_iter().map(unqualified).collect::<DfResult<Vec<_>>>()?;
        let predicate = conjunction(predicate).unwrap_or_else(|| datafusion::prelude::lit(true));
        let df_schema = DFSchema::try_from(out_schema.as_ref().clone())?;
        let predicate = state.create_physical_expr(predicate, &df_schema)?;
        let mut plan: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(predicate, scan)?);
        if cols.len() > wanted {
            let exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = out_schema.fields()[..wanted]
                .iter()
                .enumerate()
                .map(|(i, f)| (Arc::new(PhysicalColumn::new(f.name(), i)) as Arc<dyn PhysicalExpr>, f.name().clone()))
                .collect();
            plan = Arc::new(ProjectionExec::try_new(exprs, plan)?);
        }
        if let Some(n) = limit_hint {
            plan = Arc::new(GlobalLimitExec::new(plan, 0, Some(n)));
        }
        Ok(plan)
    }
}

#[derive(Debug, Clone)]
enum Mode {
    /// `Table::get` of one key.
    Point { key: Vec<Value>, projection: strata::Projection },
    /// `Table::scan_batches`.
    Scan(Box<ScanRequest>),
}

/// The leaf of a plan reading one strata table.
pub(crate) struct ScanExec {
    table: strata::Table,
    /// Schema columns read (the output's, or one key column for an empty projection).
    read_cols: Vec<usize>,
    mode: Mode,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    /// What the planner is told about the rows returned.
    stats: Arc<Statistics>,
}

impl fmt::Debug for ScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_as(DisplayFormatType::Default, f)
    }
}

impl DisplayAs for ScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match &self.mode {
            Mode::Point { key, .. } => write!(f, "StrataPointRead: table={} key={key:?}", self.table.name()),
            Mode::Scan(req) => {
                write!(f, "StrataScan: table={}", self.table.name())?;
                if !matches!(
                    (&req.range.start, &req.range.end),
                    (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
                ) {
                    write!(f, " range={:?}..{:?}", req.range.start, req.range.end)?;
                }
                if let Some(filter) = &req.filter {
                    write!(f, " filter={filter:?}")?;
                }
                if let Some(n) = req.limit {
                    write!(f, " limit={n}")?;
                }
                Ok(())
            }
        }
    }
}

impl ExecutionPlan for ScanExec {
    fn name(&self) -> &str {
        "StrataScan"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn statistics_from_inputs(&self, _inputs: &[Arc<Statistics>], _args: &StatisticsArgs) -> DfResult<Arc<Statistics>> {
        Ok(self.stats.clone())
    }

    fn with_new_children(self: Arc<Self>, _children: Vec<Arc<dyn ExecutionPlan>>) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(&self, _partition: usize, context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        let reads = reads_of(&context);
        let table = self.table.clone();
        let mode = self.mode.clone();
        let schema = self.schema.clone();
        let read_cols = self.read_cols.clone();
        let mut builder = RecordBatchReceiverStreamBuilder::new(schema.clone(), 2);
        let tx = builder.tx();
        builder.spawn_blocking(move || {
            let ropts = ReadOptions {
                snapshot: match reads.as_deref() {
                    Some(Reads::Snapshot(s)) => Some(s),
                    _ => None,
                },
            };
            let txn = match reads.as_deref() {
                Some(Reads::Txn(cell)) => Some(cell),
                _ => None,
            };
            let shape = |b: RecordBatch| -> DfResult<RecordBatch> {
                let columns = if schema.fields().is_empty() { Vec::new() } else { b.columns().to_vec() };
                let opts = RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
                Ok(RecordBatch::try_new_with_options(schema.clone(), columns, &opts)?)
            };
            match mode {
                Mode::Point { key, projection } => {
                    let row = match txn {
                        Some(cell) => cell.read(|tx| tx.get(&table, &key, &projection)),
                        None => table.get(&key, &projection, &ropts),
                    }
                    .map_err(external)?;
                    let rows: Vec<Vec<Value>> = row.into_iter().collect();
                    let batch = strata::scan::rows_batch(table.schema(), &read_cols, &rows).map_err(external)?;
                    let _ = tx.blocking_send(shape(batch));
                }
                Mode::Scan(req) => {
                    let batches = match txn {
                        Some(cell) => cell.read(|tx| tx.scan_batches(&table, &req)),
                        None => table.scan_batches(&req, &ropts),
                    }
                    .map_err(external)?;
                    for b in batches {
                        let b = b.map_err(external).and_then(&shape);
                        let failed = b.is_err();
                        if tx.blocking_send(b).is_err() || failed {
                            break;
                        }
                    }
                }
            }
            Ok(())
        });
        Ok(builder.build())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit, SessionContext};
    use strata::{Column, ColumnType, Db, Options, Schema, TableOptions};

    /// A filter strata cannot apply, passed to `scan` anyway (as an optimizer rule may, after
    /// rewriting an accepted filter), is applied above the scan together with the limit, and the
    /// columns it reads are dropped again.
    #[tokio::test]
    async fn filters_strata_cannot_apply_are_applied_above_the_scan() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::default()).unwrap();
        let schema = Schema::new(
            vec![
                Column::new("id", ColumnType::BigInt),
                Column::new("s", ColumnType::Text),
                Column::new("n", ColumnType::Int),
            ],
            &["id"],
        )
        .unwrap();
        let t = db.create_table("t", schema, TableOptions::default()).unwrap();
        for i in 0..20i64 {
            t.insert(&[Value::BigInt(i), Value::Text(format!("s{}", i % 4)), Value::Int(i as i32)]).unwrap();
        }
        let provider = StrataTable::new(t);
        let ctx = SessionContext::new();
        let state = ctx.state();
        // `s || 'x' = 's1x'` does not translate; `n >= 10` does.
        let untranslatable = datafusion::functions::string::expr_fn::concat(vec![col("s"), lit("x")]).eq(lit("s1x"));
        let filters = vec![untranslatable, col("n").gt_eq(lit(10))];
        let plan = provider.scan(&state, Some(&vec![0]), &filters, Some(2)).await.unwrap();
        assert_eq!(plan.schema().fields().len(), 1);
        let batches = datafusion::physical_plan::collect(plan, ctx.task_ctx()).await.unwrap();
        let ids: Vec<Value> = batches.iter().flat_map(strata::scan::batch_rows).flatten().collect();
        assert_eq!(ids, vec![Value::BigInt(13), Value::BigInt(17)]);
    }
}
