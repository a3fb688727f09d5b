//! Distributed SQL over sharded tables, on datafusion-distributed.
//!
//! A sharded table is a [`ShardedTable`] to DataFusion. Its scan is a [`ShardScanExec`] with
//! one partition per shard, carrying what strata pushes into a scan (projection, the filters
//! strata applies exactly, limit) and the cluster's read point: a time (Unix ms) every shard
//! is read at. The distributed planner cuts the plan into stages; the leaf stage gets one task
//! per shard (as many as there are workers at most), each task a [`ShardScanExec`] holding its
//! shards, routed to a node holding a replica of them. Partial aggregates, filters and
//! projections above the scan run in that task too, on the node holding the data.
//!
//! On the worker a shard's partition reads the node's replica: it first makes sure the replica
//! holds every entry committed before the read began (at the leader, a quorum confirms its
//! leadership; at a follower, it waits to apply up to the leader's commit index), then scans
//! the replica's database as of the read point with strata-sql's table (so the pushdown is the
//! single-node one). Reads at one time on every shard make one consistent answer while no
//! transaction spans shards; re-running a query at the same read point on other replicas
//! gives the same answer, which is how a query survives the loss of a worker
//! ([`Coordinator::query`]).

use std::any::Any;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::Session;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DfResult, Statistics};
use datafusion::datasource::{TableProvider, TableType};
use datafusion::execution::{SessionStateBuilder, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::statistics::StatisticsArgs;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_distributed::{
    DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedExt, DistributedLeafExec, RouteTasksEvent,
    RouteTasksEventResponse, ScaleUpLeafNodeEvent, ScaleUpLeafNodeEventResponse, SessionStateBuilderExt,
    WorkerResolver,
};
use datafusion_proto::bytes::Serializeable;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use strata::{AsOf, Db, Schema, Snapshot};
use url::Url;

use crate::types::{GroupId, NodeId, ShardInfo, TableMap};

/// What a node offers the distributed scans: its replicas of shards, read at a read point, and
/// the cluster as it sees it.
pub trait Cluster: Send + Sync + 'static {
    /// The node's replica of shard `group`, holding every entry committed before the call, and
    /// a snapshot of it as of `at_ms` (Unix ms).
    fn read_at(&self, group: GroupId, at_ms: u64) -> BoxFuture<'_, crate::Result<(Arc<Db>, Arc<Snapshot>)>>;

    /// The sharded tables and their shards, from the node's copy of the shard map.
    fn tables(&self) -> crate::Result<(Vec<TableMap>, Vec<ShardInfo>)>;

    /// The URL of each node's worker (the gRPC service running query tasks).
    fn workers(&self) -> BTreeMap<NodeId, Url>;

    /// How long a partition waits before it reads (a testing knob: a query long enough to
    /// kill a worker under).
    fn scan_delay(&self) -> Duration {
        Duration::ZERO
    }
}

/// A boxed future of a [`Cluster`] method.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

fn df_error(e: impl fmt::Display) -> DataFusionError {
    DataFusionError::Execution(e.to_string())
}

/// What a [`ShardScanExec`] reads, as it travels to a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ScanSpec {
    table: String,
    /// [`Schema::to_bytes`].
    schema: Vec<u8>,
    /// The shard each partition reads (`None`: an empty partition, so that the tasks of a scan
    /// all have as many partitions).
    shards: Vec<Option<ShardInfo>>,
    /// Columns of the table's schema, in output order (`None`: all).
    projection: Option<Vec<usize>>,
    /// The filters DataFusion passed (those strata applies exactly, unless an optimizer rule
    /// rewrote one), each as DataFusion's serialized expression.
    filters: Vec<Vec<u8>>,
    limit: Option<usize>,
    /// The read point (Unix ms).
    read_ms: u64,
}

/// A scan of some shards of a sharded table, one partition per shard, at the read point.
pub struct ShardScanExec {
    spec: ScanSpec,
    filters: Vec<Expr>,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    /// The node it runs on, held weakly: plans outlive queries in the worker's caches, and must
    /// not keep a stopped node's databases open.
    cluster: Weak<dyn Cluster>,
}

impl fmt::Debug for ShardScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_as(DisplayFormatType::Default, f)
    }
}

impl ShardScanExec {
    fn new(spec: ScanSpec, filters: Vec<Expr>, cluster: Weak<dyn Cluster>) -> DfResult<ShardScanExec> {
        let schema = Schema::from_bytes(&spec.schema).map_err(df_error)?;
        let cols: Vec<usize> = spec.projection.clone().unwrap_or_else(|| (0..schema.columns().len()).collect());
        if let Some(bad) = cols.iter().find(|&&c| c >= schema.columns().len()) {
            return Err(DataFusionError::Plan(format!("column {bad} is outside table {}", spec.table)));
        }
        let out = strata::scan::row_schema(&schema, &cols);
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(out.clone()),
            Partitioning::UnknownPartitioning(spec.shards.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(ShardScanExec { spec, filters, schema: out, props, cluster })
    }

    /// The same scan over `shards` only (a task's part of it).
    fn over(&self, shards: Vec<Option<ShardInfo>>) -> DfResult<ShardScanExec> {
        let spec = ScanSpec { shards, ..self.spec.clone() };
        ShardScanExec::new(spec, self.filters.clone(), self.cluster.clone())
    }

    /// The shards it reads.
    pub fn shards(&self) -> impl Iterator<Item = &ShardInfo> {
        self.spec.shards.iter().flatten()
    }
}

impl DisplayAs for ShardScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let ids: Vec<GroupId> = self.shards().map(|s| s.id).collect();
        write!(f, "StrataShardScan: table={} shards={ids:?}", self.spec.table)?;
        if let Some(p) = &self.spec.projection {
            write!(f, " projection={p:?}")?;
        }
        if !self.filters.is_empty() {
            let shown: Vec<String> = self.filters.iter().map(ToString::to_string).collect();
            write!(f, " filters=[{}]", shown.join(", "))?;
        }
        if let Some(n) = self.spec.limit {
            write!(f, " limit={n}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for ShardScanExec {
    fn name(&self) -> &str {
        "StrataShardScan"
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
        Ok(Arc::new(Statistics::new_unknown(&self.schema)))
    }

    fn with_new_children(self: Arc<Self>, _children: Vec<Arc<dyn ExecutionPlan>>) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        let schema = self.schema.clone();
        let shard = match self.spec.shards.get(partition) {
            Some(Some(s)) => s.clone(),
            Some(None) => {
                return Ok(Box::pin(RecordBatchStreamAdapter::new(schema, futures::stream::empty())));
            }
            None => {
                return Err(DataFusionError::Internal(format!(
                    "partition {partition} of a scan of {} shards",
                    self.spec.shards.len()
                )))
            }
        };
        let cluster = self.cluster.upgrade().ok_or_else(|| df_error("the node is stopping"))?;
        let (spec, filters) = (self.spec.clone(), self.filters.clone());
        let read = async move {
            let delay = cluster.scan_delay();
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let (db, snapshot) = cluster.read_at(shard.id, spec.read_ms).await.map_err(df_error)?;
            let table = db.table(&spec.table).map_err(df_error)?;
            let provider = strata_sql::shard::table_at(db, table, snapshot);
            let state = SessionStateBuilder::new()
                .with_config(context.session_config().clone())
                .with_runtime_env(context.runtime_env())
                .build();
            let plan = provider.scan(&state, spec.projection.as_ref(), &filters, spec.limit).await?;
            let plan: Arc<dyn ExecutionPlan> = if plan.output_partitioning().partition_count() > 1 {
                Arc::new(CoalescePartitionsExec::new(plan))
            } else {
                plan
            };
            plan.execute(0, context)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, futures::stream::once(read).try_flatten())))
    }
}

/// Encodes a [`ShardScanExec`] for a worker, and decodes it there against the worker's node.
#[derive(Clone)]
pub struct ShardScanCodec {
    cluster: Weak<dyn Cluster>,
}

impl fmt::Debug for ShardScanCodec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ShardScanCodec")
    }
}

impl ShardScanCodec {
    /// The codec of a node (held weakly, as the scans it decodes hold it).
    pub fn new(cluster: &Arc<dyn Cluster>) -> Self {
        ShardScanCodec { cluster: Arc::downgrade(cluster) }
    }
}

impl PhysicalExtensionCodec for ShardScanCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        _inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let spec: ScanSpec = postcard::from_bytes(buf).map_err(|e| df_error(format!("a shard scan: {e}")))?;
        let filters =
            spec.filters.iter().map(|b| Expr::from_bytes_with_ctx(b, ctx)).collect::<DfResult<Vec<Expr>>>()?;
        Ok(Arc::new(ShardScanExec::new(spec, filters, self.cluster.clone())?))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        let Some(scan) = (node.as_ref() as &dyn Any).downcast_ref::<ShardScanExec>() else {
            return Err(DataFusionError::Internal(format!("not a shard scan: {}", node.name())));
        };
        let bytes = postcard::to_stdvec(&scan.spec).map_err(df_error)?;
        buf.extend_from_slice(&bytes);
        Ok(())
    }
}

/// A sharded table as DataFusion sees it, read at one read point.
pub struct ShardedTable {
    name: String,
    schema: Schema,
    arrow: SchemaRef,
    shards: Vec<ShardInfo>,
    read_ms: u64,
    cluster: Weak<dyn Cluster>,
}

impl fmt::Debug for ShardedTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedTable").field("name", &self.name).finish_non_exhaustive()
    }
}

impl ShardedTable {
    /// Table `map` with its `shards` (in key order), read at `read_ms`.
    pub fn new(
        map: &TableMap,
        shards: Vec<ShardInfo>,
        read_ms: u64,
        cluster: &Arc<dyn Cluster>,
    ) -> crate::Result<Self> {
        let schema = Schema::from_bytes(&map.schema)?;
        let all: Vec<usize> = (0..schema.columns().len()).collect();
        let arrow = strata::scan::row_schema(&schema, &all);
        Ok(ShardedTable { name: map.name.clone(), schema, arrow, shards, read_ms, cluster: Arc::downgrade(cluster) })
    }
}

#[async_trait]
impl TableProvider for ShardedTable {
    fn schema(&self) -> SchemaRef {
        self.arrow.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if strata_sql::shard::applies_exactly(&self.name, &self.schema, f) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        // Every filter goes to the shards: strata-sql's scan there applies the ones strata takes
        // exactly inside strata and any other (an optimizer rule may pass one after rewriting an
        // accepted filter) above its scan, never dropping one.
        let pushed: Vec<Expr> = filters.to_vec();
        let encoded = pushed.iter().map(|f| Ok(f.to_bytes()?.to_vec())).collect::<DfResult<Vec<Vec<u8>>>>()?;
        let spec = ScanSpec {
            table: self.name.clone(),
            schema: self.schema.to_bytes(),
            shards: self.shards.iter().cloned().map(Some).collect(),
            projection: projection.cloned(),
            filters: encoded,
            limit,
            read_ms: self.read_ms,
        };
        Ok(Arc::new(ShardScanExec::new(spec, pushed, self.cluster.clone())?))
    }
}

/// One task per shard (the planner caps it at the number of workers).
fn task_count(ev: DesiredTaskCountEvent<'_>) -> Option<DfResult<DesiredTaskCountEventResponse>> {
    let scan = (ev.plan.as_ref() as &dyn Any).downcast_ref::<ShardScanExec>()?;
    Some(Ok(DesiredTaskCountEventResponse::desired(scan.shards().count().max(1))))
}

/// Splits a scan's shards among `task_count` tasks (shard i to task i mod n), each task's part
/// padded with empty partitions to as many as the largest.
fn scale_up(ev: ScaleUpLeafNodeEvent<'_>) -> Option<DfResult<ScaleUpLeafNodeEventResponse>> {
    let scan = (ev.plan.as_ref() as &dyn Any).downcast_ref::<ShardScanExec>()?;
    let tasks = ev.task_count.max(1);
    let mut parts: Vec<Vec<Option<ShardInfo>>> = vec![Vec::new(); tasks];
    for (i, s) in scan.shards().enumerate() {
        parts[i % tasks].push(Some(s.clone()));
    }
    let width = parts.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let variants = parts
        .into_iter()
        .map(|mut p| {
            p.resize(width, None);
            Ok(Arc::new(scan.over(p)?) as Arc<dyn ExecutionPlan>)
        })
        .collect::<DfResult<Vec<_>>>();
    Some(
        variants
            .and_then(|v| DistributedLeafExec::try_new(ev.plan.clone(), v))
            .map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))),
    )
}

/// The shard scans of a stage's tasks, found below its head: task i's scan.
fn stage_scans(plan: &Arc<dyn ExecutionPlan>) -> Option<Vec<Arc<dyn ExecutionPlan>>> {
    if let Some(leaf) = (plan.as_ref() as &dyn Any).downcast_ref::<DistributedLeafExec>() {
        if (leaf.original().as_ref() as &dyn Any).is::<ShardScanExec>() {
            return Some(leaf.variants().to_vec());
        }
    }
    plan.children().into_iter().find_map(stage_scans)
}

/// Where tasks go: each task of a stage reading shards to a live node holding a replica of
/// all of them (the first such in the shard map's order).
struct Router {
    workers: BTreeMap<NodeId, Url>,
    down: HashSet<NodeId>,
}

impl Router {
    fn route(&self, ev: RouteTasksEvent<'_>) -> Option<DfResult<RouteTasksEventResponse>> {
        let scans = stage_scans(ev.plan)?;
        let urls = scans
            .iter()
            .map(|plan| {
                let Some(scan) = (plan.as_ref() as &dyn Any).downcast_ref::<ShardScanExec>() else {
                    return Err(DataFusionError::Internal("a shard scan's variant is not a shard scan".into()));
                };
                let shards: Vec<&ShardInfo> = scan.shards().collect();
                let Some(first) = shards.first() else {
                    // No shard: any worker.
                    return self.live().next().cloned().ok_or_else(|| df_error("no worker is live"));
                };
                first
                    .replicas
                    .iter()
                    .filter(|n| !self.down.contains(n) && shards.iter().all(|s| s.replicas.contains(n)))
                    .find_map(|n| self.workers.get(n).cloned())
                    .ok_or_else(|| {
                        let ids: Vec<GroupId> = shards.iter().map(|s| s.id).collect();
                        df_error(format!("no live node holds a replica of shards {ids:?} (down: {:?})", self.down))
                    })
            })
            .collect::<DfResult<Vec<Url>>>();
        Some(urls.map(RouteTasksEventResponse::new))
    }

    fn live(&self) -> impl Iterator<Item = &Url> {
        self.workers.iter().filter(|(n, _)| !self.down.contains(n)).map(|(_, u)| u)
    }
}

/// The live workers, for the planner.
struct Workers(Vec<Url>);

impl WorkerResolver for Workers {
    fn get_urls(&self) -> DfResult<Vec<Url>> {
        Ok(self.0.clone())
    }
}

/// A query's answer.
#[derive(Debug)]
pub struct Answer {
    /// Its rows.
    pub batches: Vec<RecordBatch>,
    /// The read point it was read at (Unix ms).
    pub read_ms: u64,
    /// How many times it ran (2 when a worker failed the first run).
    pub runs: usize,
}

/// Runs SQL over the cluster's sharded tables from one node.
pub struct Coordinator {
    cluster: Arc<dyn Cluster>,
}

impl Coordinator {
    /// A coordinator on a node.
    pub fn new(cluster: Arc<dyn Cluster>) -> Self {
        Coordinator { cluster }
    }

    /// A session over the sharded tables as the shard map has them, read at `read_ms`, planning
    /// distributed across the live workers.
    fn session(&self, read_ms: u64, down: &HashSet<NodeId>) -> crate::Result<SessionContext> {
        let workers = self.cluster.workers();
        let live: Vec<Url> = workers.iter().filter(|(n, _)| !down.contains(n)).map(|(_, u)| u.clone()).collect();
        let router = Router { workers, down: down.clone() };
        let config = strata_sql::shard::tuned(SessionConfig::new())
            .with_information_schema(true)
            .set_str("datafusion.sql_parser.dialect", "PostgreSQL");
        let state = SessionStateBuilder::new()
            .with_default_features()
            .with_config(config)
            .with_distributed_planner()
            .with_distributed_worker_resolver(Workers(live))
            .with_distributed_user_codec(ShardScanCodec::new(&self.cluster))
            .with_distributed_desired_task_count_handler(task_count)
            .with_distributed_scale_up_leaf_node_handler(scale_up)
            .with_distributed_route_tasks_handler(move |ev: RouteTasksEvent<'_>| router.route(ev))
            .build();
        let ctx = SessionContext::from(state);
        let (tables, shards) = self.cluster.tables()?;
        for t in &tables {
            let mine: Vec<ShardInfo> =
                t.shards.iter().filter_map(|id| shards.iter().find(|s| s.id == *id).cloned()).collect();
            let table = ShardedTable::new(t, mine, read_ms, &self.cluster)?;
            ctx.register_table(t.name.as_str(), Arc::new(table)).map_err(|e| crate::Error::Sql(e.to_string()))?;
        }
        Ok(ctx)
    }

    /// The distributed plan of a query: its stages, their tasks and what each runs.
    pub async fn explain(&self, sql: &str) -> crate::Result<String> {
        let ctx = self.session(crate::group::now_ms(), &HashSet::new())?;
        let sql_error = |e: DataFusionError| crate::Error::Sql(e.to_string());
        let plan = ctx.sql(sql).await.map_err(sql_error)?.create_physical_plan().await.map_err(sql_error)?;
        Ok(datafusion_distributed::display_plan_ascii(plan.as_ref(), false))
    }

    /// Runs one query at a read point taken now. When a run fails and a worker it may have
    /// used does not answer, the query runs once more at the same read point without that
    /// worker, on the other replicas. `EXPLAIN query` answers the distributed plan (one text
    /// column, `plan`), as [`Coordinator::explain`] gives it.
    pub async fn query(&self, sql: &str) -> crate::Result<Answer> {
        let read_ms = crate::group::now_ms();
        if let Some(rest) = explained(sql) {
            let text = self.explain(rest).await?;
            let schema =
                Arc::new(datafusion::arrow::datatypes::Schema::new(vec![datafusion::arrow::datatypes::Field::new(
                    "plan",
                    datafusion::arrow::datatypes::DataType::Utf8,
                    false,
                )]));
            let column = Arc::new(datafusion::arrow::array::StringArray::from(vec![text]));
            let batch = RecordBatch::try_new(schema, vec![column]).map_err(|e| crate::Error::Sql(e.to_string()))?;
            return Ok(Answer { batches: vec![batch], read_ms, runs: 1 });
        }
        let mut down = HashSet::new();
        let mut runs = 0;
        loop {
            runs += 1;
            let ctx = self.session(read_ms, &down)?;
            let run = async { ctx.sql(sql).await?.collect().await };
            match run.await {
                Ok(batches) => return Ok(Answer { batches, read_ms, runs }),
                Err(e) => {
                    let lost = self.unreachable_workers().await;
                    if runs > 1 || lost.is_empty() || lost.is_subset(&down) {
                        return Err(crate::Error::Sql(e.to_string()));
                    }
                    down.extend(lost);
                }
            }
        }
    }

    /// The workers that do not accept a connection now.
    async fn unreachable_workers(&self) -> HashSet<NodeId> {
        let mut out = HashSet::new();
        for (node, url) in self.cluster.workers() {
            let addr = format!("{}:{}", url.host_str().unwrap_or("127.0.0.1"), url.port().unwrap_or(0));
            let reached = tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(&addr)).await;
            if !matches!(reached, Ok(Ok(_))) {
                out.insert(node);
            }
        }
        out
    }
}

/// Whether `sql` is `EXPLAIN query`, which [`Coordinator::query`] answers with the distributed
/// plan (one row, one text column `plan`).
pub fn is_explain(sql: &str) -> bool {
    explained(sql).is_some()
}

/// The query of `EXPLAIN query` (not `EXPLAIN ANALYZE`, which runs the query).
fn explained(sql: &str) -> Option<&str> {
    let trimmed = sql.trim_start();
    let word = trimmed.get(..7)?;
    if !word.eq_ignore_ascii_case("explain") || !trimmed[7..].starts_with(char::is_whitespace) {
        return None;
    }
    let rest = trimmed[7..].trim_start();
    let analyze = rest.get(..7).is_some_and(|w| w.eq_ignore_ascii_case("analyze"));
    (!analyze).then_some(rest)
}

/// `batches` as an Arrow IPC stream (an empty answer: no bytes).
pub fn ipc_bytes(batches: &[RecordBatch]) -> crate::Result<Vec<u8>> {
    let Some(first) = batches.first() else { return Ok(Vec::new()) };
    let fail = |e: datafusion::arrow::error::ArrowError| crate::Error::Sql(format!("an answer does not encode: {e}"));
    let mut out = Vec::new();
    let mut w = datafusion::arrow::ipc::writer::StreamWriter::try_new(&mut out, &first.schema()).map_err(fail)?;
    for b in batches {
        w.write(b).map_err(fail)?;
    }
    w.finish().map_err(fail)?;
    drop(w);
    Ok(out)
}

/// The batches of an Arrow IPC stream made by [`ipc_bytes`].
pub fn from_ipc(bytes: &[u8]) -> crate::Result<Vec<RecordBatch>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let fail = |e: datafusion::arrow::error::ArrowError| crate::Error::Sql(format!("an answer does not decode: {e}"));
    let r = datafusion::arrow::ipc::reader::StreamReader::try_new(bytes, None).map_err(fail)?;
    r.map(|b| b.map_err(fail)).collect()
}

/// A snapshot of `db` as of `at_ms` (Unix ms).
pub fn snapshot_at_ms(db: &Db, at_ms: u64) -> strata::Result<Snapshot> {
    db.snapshot_as_of(AsOf::Time(UNIX_EPOCH + Duration::from_millis(at_ms)))
}
