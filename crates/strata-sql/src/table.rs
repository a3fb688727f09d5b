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
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, DataFusionError, Result as DfResult, ScalarValue, SplitPoint, Statistics};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::expressions::Column as PhysicalColumn;
use datafusion::physical_expr::{
    EquivalenceProperties, LexOrdering, PhysicalExpr, PhysicalSortExpr, RangePartitioning,
};
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
    db: Arc<strata::Db>,
    table: strata::Table,
    /// The columns SQL sees, as indices of the table's schema (all but the hidden ones, unless
    /// built [`StrataTable::with_hidden`]); DataFusion's column indices index this.
    visible: Vec<usize>,
    schema: SchemaRef,
    /// The snapshot every scan reads at, when fixed ([`StrataTable::at`]); else the statement's.
    at: Option<Arc<strata::Snapshot>>,
}

impl fmt::Debug for StrataTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StrataTable").field("name", &self.table.name()).finish_non_exhaustive()
    }
}

impl StrataTable {
    /// The table as queries see it: without its hidden columns (see [`crate::meta`]).
    pub(crate) fn new(db: Arc<strata::Db>, table: strata::Table) -> Self {
        let visible = crate::meta::visible_columns(&table);
        Self::of_columns(db, table, visible)
    }

    /// The table with its hidden columns too (the hidden row id last), as the statements
    /// changing it read it.
    pub(crate) fn with_hidden(db: Arc<strata::Db>, table: strata::Table) -> Self {
        let mut all = crate::meta::visible_columns(&table);
        all.extend(crate::meta::hidden_columns(&table));
        Self::of_columns(db, table, all)
    }

    fn of_columns(db: Arc<strata::Db>, table: strata::Table, visible: Vec<usize>) -> Self {
        let schema = strata::scan::row_schema(table.schema(), &visible);
        StrataTable { db, table, visible, schema, at: None }
    }

    /// The table as queries see it, every scan reading at `snapshot` (a shard's replica read
    /// at a cluster's read point).
    pub(crate) fn at(db: Arc<strata::Db>, table: strata::Table, snapshot: Arc<strata::Snapshot>) -> Self {
        StrataTable { at: Some(snapshot), ..Self::new(db, table) }
    }

    /// The translated filters and what they say about the key. Each filter strata can apply is
    /// taken as long as all taken together still can be (their conjunctive normal form has a
    /// bounded number of clauses); the others are left to DataFusion.
    fn conditions(&self, filters: &[&Expr]) -> (Vec<Option<SExpr>>, KeyBounds) {
        let schema = self.table.schema();
        let mut translated: Vec<Option<SExpr>> = filters.iter().map(|f| exact(self.table.name(), f, schema)).collect();
        let fits = |pushed: &[SExpr]| {
            strata::scan::Filter::new(self.table.name(), schema, &SExpr::And(pushed.to_vec())).is_ok()
        };
        let mut pushed: Vec<SExpr> = translated.iter().flatten().cloned().collect();
        if pushed.len() > 1 && !fits(&pushed) {
            // Together too large: taken one by one while they still fit.
            pushed.clear();
            for t in translated.iter_mut() {
                if let Some(e) = t.take() {
                    pushed.push(e.clone());
                    if fits(&pushed) {
                        *t = Some(e);
                    } else {
                        pushed.pop();
                    }
                }
            }
        }
        let bounds = KeyBounds::of(&pushed, schema);
        (translated, bounds)
    }

    /// About how many of the table's `rows` a scan returns (a point read: one).
    fn estimated_rows(&self, point: bool, rows: u64, pushed: &[SExpr], limit: Option<usize>) -> u64 {
        if point {
            return 1;
        }
        let kept: f64 = pushed.iter().map(|e| crate::stats::selectivity(e, self.table.schema(), rows)).product();
        let kept = (rows as f64 * kept).ceil() as u64;
        limit.map_or(kept, |n| kept.min(n as u64))
    }
}

/// Whether every strata table `plan` reads (subqueries included) is still the one it was
/// planned with: not dropped, nor dropped and created again, nor rebuilt.
pub(crate) fn plan_is_current(plan: &datafusion::logical_expr::LogicalPlan, db: &strata::Db) -> bool {
    use datafusion::common::tree_node::TreeNodeRecursion;
    use datafusion::datasource::DefaultTableSource;
    use datafusion::logical_expr::LogicalPlan;
    let mut current = true;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            let provider = scan.source.as_ref().downcast_ref::<DefaultTableSource>();
            if let Some(t) = provider.and_then(|p| p.table_provider.as_ref().downcast_ref::<StrataTable>()) {
                if !crate::meta::is_current(db, &t.table) {
                    current = false;
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    current
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
        // Columns as indices of the table's schema from here on.
        let mut cols: Vec<usize> = match projection {
            Some(p) => p.iter().map(|&i| self.visible.get(i).copied()).collect::<Option<_>>().ok_or_else(|| {
                DataFusionError::Plan(format!("projection {p:?} is outside table {}", self.table.name()))
            })?,
            None => self.visible.clone(),
        };
        let refs: Vec<&Expr> = filters.iter().collect();
        let (translated, bounds) = self.conditions(&refs);
        let schema = self.table.schema();
        // With no condition on the key, an index may name the rows: an equality on its first
        // column, or bounds expected to keep under a quarter of the rows.
        let unbounded = bounds.point().is_none() && {
            let r = bounds.range();
            matches!((&r.start, &r.end), (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded))
        };
        let lookup = if unbounded && !translated.iter().all(Option::is_none) {
            let conjuncts: Vec<SExpr> = translated.iter().flatten().cloned().collect();
            let rows = self.table.estimated_rows().unwrap_or(0);
            let kept: f64 = conjuncts.iter().map(|e| crate::stats::selectivity(e, schema, rows)).product();
            crate::indexes::lookup(&self.db, &self.table, &conjuncts, kept < 0.25)
        } else {
            None
        };
        // Filters strata cannot apply, should DataFusion pass any (an optimizer rule may rewrite
        // a filter after it was accepted), are applied above the scan, never dropped; so are all
        // of them over rows an index names.
        let residual: Vec<Expr> = match lookup {
            Some(_) => filters.to_vec(),
            None => filters.iter().zip(&translated).filter(|(_, t)| t.is_none()).map(|(f, _)| f.clone()).collect(),
        };
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
        let out_schema = strata::scan::row_schema(schema, &cols);
        // A scan needs at least one column to count rows by; an empty projection reads the first
        // key column and drops it.
        let read_cols: Vec<usize> = if cols.is_empty() { vec![schema.primary_key()[0]] } else { cols.clone() };
        let names: Vec<&str> = read_cols.iter().map(|&c| schema.columns()[c].name.as_str()).collect();
        let pushed: Vec<SExpr> = translated.into_iter().flatten().collect();
        // Equality on the whole key alone (one per key column) is a point read; with other
        // conditions too, a scan of that one key applies them.
        let point =
            bounds.point().filter(|key| pushed.len() == key.len() && pushed.iter().all(|e| is_key_equality(e, schema)));
        // About how many rows the table holds (0 when it cannot say).
        let table_rows = if point.is_some() { 1 } else { self.table.estimated_rows().unwrap_or(0) };
        let rows = self.estimated_rows(point.is_some(), table_rows, &pushed, limit);
        let config = state.config();
        // Every partition reads at the statement's snapshot or in its transaction; a plan made
        // outside a statement reads at a snapshot taken now, the same for all its partitions.
        let snapshot = match (&self.at, config.get_extension::<Reads>()) {
            (Some(at), _) => Some(at.clone()),
            (None, Some(_)) => None,
            (None, None) => Some(Arc::new(self.db.snapshot())),
        };
        let mut cuts = Vec::new();
        let mode = match (point, lookup) {
            (Some(key), _) => Mode::Point { key, projection: self.table.projection(&names).map_err(external)? },
            (None, Some(lookup)) => {
                Mode::Index { lookup, projection: self.table.projection(&names).map_err(external)? }
            }
            (None, None) => {
                // A table of a batch or less (TPC-H's nation and region) is not worth a thread
                // per partition.
                let small = table_rows <= config.batch_size() as u64;
                let partitions = if limit.is_some() || small { 1 } else { config.target_partitions().max(1) };
                cuts = self.table.key_splits(partitions).map_err(external)?;
                let mut base = ScanRequest::new().with_columns(&names).with_batch_rows(config.batch_size());
                if !pushed.is_empty() {
                    base = base.with_filter(SExpr::And(pushed));
                }
                if let Some(n) = limit {
                    base = base.with_limit(n);
                }
                let range = bounds.range();
                let reqs = if cuts.is_empty() {
                    // One partition in key order, which strata may still read in parallel parts.
                    vec![base.with_range(range).with_partitions(partitions)]
                } else {
                    key_ranges(&cuts)
                        .map(|part| Ok(base.clone().with_range(self.table.intersect(&range, &part)?)))
                        .collect::<strata::Result<Vec<_>>>()
                        .map_err(external)?
                };
                Mode::Scan(reqs)
            }
        };
        let ordered = !matches!(mode, Mode::Index { .. });
        let props = Arc::new(properties(schema, &cols, &out_schema, &cuts, mode.partitions(), ordered));
        let columns = match &mode {
            Mode::Point { .. } | Mode::Index { .. } => Vec::new(),
            Mode::Scan(_) => {
                let bounds = self.table.column_bounds().map_err(external)?;
                cols.iter()
                    .map(|&c| crate::stats::column(schema, c, bounds.get(c).and_then(Option::as_ref), rows))
                    .collect()
            }
        };
        let stats = Arc::new(crate::stats::estimate(&out_schema, rows, columns));
        let scan: Arc<dyn ExecutionPlan> = Arc::new(ScanExec {
            table: self.table.clone(),
            read_cols,
            mode,
            snapshot,
            fixed: self.at.is_some(),
            schema: out_schema.clone(),
            props,
            stats,
        });
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

/// The key ranges `cuts` divide a table into: below the first, between neighbours, and from
/// the last on (the cuts are values of the first key column; see [`strata::Table::key_splits`]).
fn key_ranges(cuts: &[Value]) -> impl Iterator<Item = strata::KeyRange> + '_ {
    use std::ops::Bound;
    (0..=cuts.len()).map(move |i| strata::KeyRange {
        start: if i == 0 { Bound::Unbounded } else { Bound::Included(vec![cuts[i - 1].clone()]) },
        end: cuts.get(i).map_or(Bound::Unbounded, |c| Bound::Excluded(vec![c.clone()])),
    })
}

/// What a scan tells the planner about its output: each partition is in primary-key order (on
/// the key columns the output holds, up to the first it lacks), and with `cuts`, partition `i`
/// holds the `i`-th of [`key_ranges`] — declared as range partitioning on the first key column,
/// so an aggregate or join on it needs no repartitioning, and two tables cut at the same values
/// join partition by partition.
fn properties(
    schema: &strata::Schema,
    cols: &[usize],
    out_schema: &SchemaRef,
    cuts: &[Value],
    partitions: usize,
    ordered: bool,
) -> PlanProperties {
    if !ordered {
        return PlanProperties::new(
            EquivalenceProperties::new(out_schema.clone()),
            Partitioning::UnknownPartitioning(partitions),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
    }
    let asc = SortOptions { descending: false, nulls_first: false };
    let sort_keys: Vec<PhysicalSortExpr> = schema
        .primary_key()
        .iter()
        .map_while(|k| cols.iter().position(|c| c == k))
        .map(|i| PhysicalSortExpr::new(Arc::new(PhysicalColumn::new(out_schema.field(i).name(), i)), asc))
        .collect();
    let range = sort_keys.first().and_then(|first| {
        let split: Option<Vec<SplitPoint>> = cuts.iter().map(|c| Some(SplitPoint::new(vec![scalar(c)?]))).collect();
        RangePartitioning::try_new(LexOrdering::new([first.clone()])?, split?).ok()
    });
    let partitioning = match range {
        Some(r) if !cuts.is_empty() && r.partition_count() == partitions => Partitioning::Range(r),
        _ => Partitioning::UnknownPartitioning(partitions),
    };
    PlanProperties::new(
        EquivalenceProperties::new_with_orderings(out_schema.clone(), [sort_keys]),
        partitioning,
        EmissionType::Incremental,
        Boundedness::Bounded,
    )
}

/// `v` as a DataFusion literal of the Arrow type strata returns its column in.
pub(crate) fn scalar(v: &Value) -> Option<ScalarValue> {
    Some(match v {
        Value::BigInt(x) => ScalarValue::Int64(Some(*x)),
        Value::Int(x) => ScalarValue::Int32(Some(*x)),
        Value::SmallInt(x) => ScalarValue::Int16(Some(*x)),
        Value::TinyInt(x) => ScalarValue::Int8(Some(*x)),
        Value::Date(x) => ScalarValue::Date32(Some(*x)),
        Value::Timestamp(x) => ScalarValue::TimestampMicrosecond(Some(*x), None),
        Value::TimestampTz(x) => ScalarValue::TimestampMicrosecond(Some(*x), Some(strata::scan::UTC.into())),
        Value::Double(x) => ScalarValue::Float64(Some(*x)),
        Value::Real(x) => ScalarValue::Float32(Some(*x)),
        Value::Boolean(x) => ScalarValue::Boolean(Some(*x)),
        Value::Text(x) => ScalarValue::Utf8(Some(x.clone())),
        Value::Bytea(x) => ScalarValue::Binary(Some(x.clone())),
        Value::Null => return None,
    })
}

#[derive(Debug, Clone)]
enum Mode {
    /// `Table::get` of one key.
    Point { key: Vec<Value>, projection: strata::Projection },
    /// `Table::scan_batches`, one request per partition.
    Scan(Vec<ScanRequest>),
    /// The keys an index's entries in a range name, each read with `Table::get` (one
    /// partition; rows in entry order, not key order).
    Index { lookup: crate::indexes::Lookup, projection: strata::Projection },
}

impl Mode {
    fn partitions(&self) -> usize {
        match self {
            Mode::Point { .. } | Mode::Index { .. } => 1,
            Mode::Scan(reqs) => reqs.len(),
        }
    }
}

/// Rows read through an index go out in batches of this many.
const INDEX_BATCH_ROWS: usize = 1024;

/// The leaf of a plan reading one strata table.
pub(crate) struct ScanExec {
    table: strata::Table,
    /// Schema columns read (the output's, or one key column for an empty projection).
    read_cols: Vec<usize>,
    mode: Mode,
    /// Where the plan was made outside a statement: the snapshot every partition reads at.
    snapshot: Option<Arc<strata::Snapshot>>,
    /// Whether `snapshot` was fixed by the table ([`StrataTable::at`]).
    fixed: bool,
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
            Mode::Index { lookup, .. } => write!(
                f,
                "StrataIndexRead: table={} index={} range={:?}",
                self.table.name(),
                lookup.index,
                lookup.range
            ),
            Mode::Scan(reqs) => {
                write!(f, "StrataScan: table={}", self.table.name())?;
                if reqs.len() > 1 {
                    write!(f, " partitions={}", reqs.len())?;
                }
                let Some(req) = reqs.first() else { return Ok(()) };
                // The range the conditions allow, before the partitions cut it.
                if let (Some(first), Some(last)) = (reqs.first(), reqs.last()) {
                    if !matches!(
                        (&first.range.start, &last.range.end),
                        (std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
                    ) {
                        write!(f, " range={:?}..{:?}", first.range.start, last.range.end)?;
                    }
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

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        // A scan fixed at a snapshot reads there whatever the statement reads at.
        let reads = if self.fixed { None } else { reads_of(&context) };
        let snapshot = self.snapshot.clone();
        let table = self.table.clone();
        let mode = match &self.mode {
            Mode::Scan(reqs) => Mode::Scan(vec![reqs.get(partition).cloned().ok_or_else(|| {
                DataFusionError::Internal(format!("partition {partition} of a {}-partition scan", reqs.len()))
            })?]),
            point => point.clone(),
        };
        let schema = self.schema.clone();
        let read_cols = self.read_cols.clone();
        let mut builder = RecordBatchReceiverStreamBuilder::new(schema.clone(), 2);
        let tx = builder.tx();
        builder.spawn_blocking(move || {
            let ropts = ReadOptions {
                snapshot: match reads.as_deref() {
                    Some(Reads::Snapshot(s)) => Some(s),
                    _ => snapshot.as_deref(),
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
                Mode::Index { lookup, projection } => {
                    let names: Vec<&str> = lookup.key_columns.iter().map(String::as_str).collect();
                    let req = ScanRequest::new().with_columns(&names).with_range(lookup.range.clone());
                    let entries = match txn {
                        Some(cell) => cell.read(|tx| tx.scan_batches(&lookup.data, &req)),
                        None => lookup.data.scan_batches(&req, &ropts),
                    }
                    .map_err(external)?;
                    let mut rows: Vec<Vec<Value>> = Vec::new();
                    let send = |rows: &[Vec<Value>]| -> bool {
                        let batch = strata::scan::rows_batch(table.schema(), &read_cols, rows).map_err(external);
                        let b = batch.and_then(&shape);
                        let failed = b.is_err();
                        tx.blocking_send(b).is_err() || failed
                    };
                    for entries in entries {
                        for key in strata::scan::batch_rows(&entries.map_err(external)?) {
                            let row = match txn {
                                Some(cell) => cell.read(|tx| tx.get(&table, &key, &projection)),
                                None => table.get(&key, &projection, &ropts),
                            }
                            .map_err(external)?;
                            rows.extend(row);
                            if rows.len() >= INDEX_BATCH_ROWS {
                                if send(&rows) {
                                    return Ok(());
                                }
                                rows.clear();
                            }
                        }
                    }
                    if !rows.is_empty() {
                        send(&rows);
                    }
                }
                Mode::Scan(reqs) => {
                    let Some(req) = reqs.first() else { return Ok(()) };
                    let batches = match txn {
                        Some(cell) => cell.read(|tx| tx.scan_batches(&table, req)),
                        None => table.scan_batches(req, &ropts),
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
#[allow(clippy::unwrap_used, clippy::panic)]
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
        let provider = StrataTable::new(Arc::new(db), t);
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

    /// The text of `EXPLAIN sql`'s physical plan.
    async fn physical_plan(engine: &crate::SqlEngine, sql: &str) -> String {
        let out = engine.execute(&format!("EXPLAIN {sql}")).await.unwrap();
        let Some(crate::Output::Rows { batches, .. }) = out.last() else { panic!("EXPLAIN returned no rows") };
        let text: Vec<String> = batches
            .iter()
            .flat_map(strata::scan::batch_rows)
            .map(|row| row.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(" "))
            .collect();
        // Debug prints the plan's line breaks as `\n`.
        let text = text.join("\n").replace("\\n", "\n");
        text[text.find("physical_plan").unwrap_or_else(|| panic!("no physical plan in {text}"))..].to_string()
    }

    /// The rows of a query's answer, as text.
    async fn answer(engine: &crate::SqlEngine, sql: &str) -> Vec<String> {
        let out = engine.execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        let Some(crate::Output::Rows { batches, .. }) = out.last() else { panic!("{sql} returned no rows") };
        batches.iter().flat_map(strata::scan::batch_rows).map(|r| format!("{r:?}")).collect()
    }

    /// Plan lines that sort or hash-repartition on one of `keys`.
    fn reshuffles<'a>(plan: &'a str, keys: &[&str]) -> Vec<&'a str> {
        plan.lines()
            .filter(|l| l.contains("SortExec") || (l.contains("RepartitionExec") && l.contains("Hash(")))
            .filter(|l| keys.iter().any(|k| l.contains(&format!("{k}@"))))
            .collect()
    }

    /// Scans declare key order and key-range partitions: a TPC-H Q18-shaped query (an aggregate
    /// grouped by lineitem's leading key column, joined to orders on it) and a join of two tables
    /// on their keys plan with no sort and no hash repartitioning on those keys, and still answer
    /// as they do on one partition and as the data says; so does a key range narrower than a
    /// partition, read in key order without a sort.
    #[tokio::test]
    async fn key_order_and_ranges_spare_sorts_and_repartitions() {
        use rand::{Rng, SeedableRng};
        let seed = 41;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Db::open(dir.path(), Options::default()).unwrap());
        // Planned as for tables a thousand times larger (small batches, a small limit for one hash
        // table): only customer is small enough to build one hash table from.
        let mut config =
            crate::tuned(datafusion::prelude::SessionConfig::new().with_target_partitions(4).with_batch_size(256));
        config.options_mut().optimizer.hash_join_single_partition_threshold_rows = 500;
        config.options_mut().optimizer.hash_join_single_partition_threshold = 500 * 32;
        let four = crate::SqlEngine::build(db.clone(), config).unwrap();
        let one = crate::SqlEngine::with_partitions(db.clone(), 1).unwrap();
        four.execute(
            "CREATE TABLE customer (c_custkey BIGINT PRIMARY KEY, c_name TEXT);
             CREATE TABLE orders (o_orderkey BIGINT PRIMARY KEY, o_custkey BIGINT, o_orderdate DATE, \
                o_totalprice DOUBLE);
             CREATE TABLE lineitem (l_orderkey BIGINT, l_linenumber INT, l_quantity DOUBLE, \
                PRIMARY KEY (l_orderkey, l_linenumber))",
        )
        .await
        .unwrap();
        let (customer, orders, lineitem) =
            (db.table("customer").unwrap(), db.table("orders").unwrap(), db.table("lineitem").unwrap());
        for c in 1..=50i64 {
            customer.insert(&[Value::BigInt(c), Value::Text(format!("c{c}"))]).unwrap();
        }
        // The model: each order's price, lines and total quantity.
        let mut model = std::collections::BTreeMap::new();
        for o in 1..=2000i64 {
            let lines = rng.gen_range(1..=7);
            let price = f64::from(rng.gen_range(1..100_000));
            orders
                .insert(&[
                    Value::BigInt(o),
                    Value::BigInt(rng.gen_range(1..=50)),
                    Value::Date(9000 + (o % 700) as i32),
                    Value::Double(price),
                ])
                .unwrap();
            let mut total = 0.0;
            for l in 1..=lines {
                let q = f64::from(rng.gen_range(1..=50));
                total += q;
                lineitem.insert(&[Value::BigInt(o), Value::Int(l), Value::Double(q)]).unwrap();
            }
            model.insert(o, (price, lines, total));
        }
        db.flush().unwrap();
        assert_eq!(lineitem.key_splits(4).unwrap(), orders.key_splits(4).unwrap(), "seed {seed}");
        assert_eq!(lineitem.key_splits(4).unwrap().len(), 3, "seed {seed}");

        let q18 = "SELECT c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice, sum(l_quantity) \
            FROM customer, orders, lineitem \
            WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem GROUP BY l_orderkey HAVING sum(l_quantity) > 300) \
              AND c_custkey = o_custkey AND o_orderkey = l_orderkey \
            GROUP BY c_name, c_custkey, o_orderkey, o_orderdate, o_totalprice \
            ORDER BY o_totalprice DESC, o_orderdate LIMIT 100";
        let join = "SELECT o_orderkey, count(*), sum(l_quantity) FROM orders JOIN lineitem ON o_orderkey = l_orderkey \
            WHERE o_totalprice > 50000 GROUP BY o_orderkey ORDER BY o_orderkey";
        let narrow = "SELECT l_orderkey, l_linenumber, l_quantity FROM lineitem \
            WHERE l_orderkey BETWEEN 700 AND 705 ORDER BY l_orderkey, l_linenumber";
        let keys = ["l_orderkey", "o_orderkey", "l_linenumber"];
        for sql in [q18, join, narrow] {
            let plan = physical_plan(&four, sql).await;
            assert!(plan.contains("partitions=4"), "the scans are not partitioned:\n{plan}");
            let bad = reshuffles(&plan, &keys);
            assert!(bad.is_empty(), "sorts or repartitions on keys: {bad:?}\n{plan}");
            assert_eq!(answer(&four, sql).await, answer(&one, sql).await, "{sql}");
        }
        // The join's answer against the model.
        let expected: Vec<String> = model
            .iter()
            .filter(|(_, (price, ..))| *price > 50000.0)
            .map(|(o, (_, lines, total))| {
                format!("{:?}", vec![Value::BigInt(*o), Value::BigInt(i64::from(*lines)), Value::Double(*total)])
            })
            .collect();
        assert_eq!(answer(&four, join).await, expected, "seed {seed}");
        // Q18's heavy orders against the model.
        let heavy = model.values().filter(|(_, _, t)| *t > 300.0).count().min(100);
        assert_eq!(answer(&four, q18).await.len(), heavy, "seed {seed}");
    }
}
