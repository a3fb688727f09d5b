//! A strata cluster for the benchmarks: nodes started in this process, each on its own
//! 127.0.0.1 ports (Raft and requests over TCP, query tasks over gRPC, as separate processes
//! would talk); and `strata-bench cluster`, write and query throughput for 1 and 3 nodes.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use arrow_array::RecordBatch;
use strata::Value;
use strata_cluster::types::{NodeRequest, NodeResponse};
use strata_cluster::{Node, NodeOptions};

/// A cluster of nodes in this process.
pub(crate) struct Cluster {
    rt: tokio::runtime::Runtime,
    nodes: Vec<Node>,
}

impl Cluster {
    /// Starts `n` nodes with their directories under `dir` and makes them a cluster.
    pub(crate) fn start(dir: &Path, n: usize, threads: usize) -> Result<Cluster, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(2))
            .enable_all()
            .build()
            .map_err(|e| format!("cluster: {e}"))?;
        let nodes = rt.block_on(async {
            let mut nodes = Vec::new();
            for id in 1..=n as u64 {
                let opts = NodeOptions::new(id, dir.join(format!("node{id}")), "127.0.0.1:0");
                nodes.push(Node::start(opts).await.map_err(|e| format!("cluster: node {id}: {e}"))?);
            }
            let peers: BTreeMap<u64, String> = nodes.iter().map(|n| (n.id(), n.addr())).collect();
            nodes[0].initialize(&peers).await.map_err(|e| format!("cluster: {e}"))?;
            Ok::<_, String>(nodes)
        })?;
        Ok(Cluster { rt, nodes })
    }

    /// Asks node `i` until it answers other than "failed" or "not ready" (a shard starting, a
    /// leader being elected), for up to 30 s.
    pub(crate) fn ask(&self, i: usize, req: NodeRequest) -> NodeResponse {
        let node = &self.nodes[i % self.nodes.len()];
        self.rt.block_on(async {
            let start = std::time::Instant::now();
            loop {
                let r = node.request(req.clone()).await;
                let retry = matches!(r, NodeResponse::Failed(_) | NodeResponse::NotReady(_));
                if !retry || start.elapsed() > Duration::from_secs(30) {
                    return r;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }

    /// How many nodes it has.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Runs `sql` with the first node coordinating.
    pub(crate) fn query(&self, sql: &str) -> Result<Vec<RecordBatch>, String> {
        self.query_at(0, sql)
    }

    /// Runs `sql` with node `i` coordinating.
    pub(crate) fn query_at(&self, i: usize, sql: &str) -> Result<Vec<RecordBatch>, String> {
        let node = &self.nodes[i % self.nodes.len()];
        match self.rt.block_on(node.request(NodeRequest::Sql { query: sql.into() })) {
            NodeResponse::Rows { ipc, .. } => strata_cluster::sql::from_ipc(&ipc).map_err(|e| e.to_string()),
            NodeResponse::Failed(m) => Err(m),
            other => Err(format!("an unexpected answer {other:?}")),
        }
    }

    /// The distributed plan of `sql` (stages, tasks, each task's shards and pushdown).
    pub(crate) fn explain(&self, sql: &str) -> Result<String, String> {
        let batches = self.query(&format!("EXPLAIN {sql}"))?;
        let rows: Vec<Vec<Value>> = batches.iter().flat_map(strata::scan::batch_rows).collect();
        match rows.first().and_then(|r| r.first()) {
            Some(Value::Text(plan)) => Ok(plan.clone()),
            _ => Err("EXPLAIN answered no plan".into()),
        }
    }

    /// Stops the nodes (their directories are left to the caller).
    pub(crate) fn stop(self) -> Result<(), String> {
        let Cluster { rt, nodes } = self;
        rt.block_on(async {
            for n in nodes {
                n.shutdown().await.map_err(|e| format!("cluster: {e}"))?;
            }
            Ok(())
        })
    }
}

/// `strata-bench cluster`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ClusterArgs {
    /// Cluster sizes to measure, comma-separated (each a fresh cluster: a table in one shard per
    /// node, each shard on up to 3 nodes).
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    pub nodes: Vec<usize>,
    /// Threads writing, each sending writes of `--rows-per-write` rows to one shard through the
    /// nodes in turn.
    #[arg(long, default_value_t = 4)]
    pub writers: usize,
    /// Rows per write (one Raft entry, one sync on each replica).
    #[arg(long, default_value_t = 100)]
    pub rows_per_write: usize,
    /// Threads querying, each running the aggregate query through the nodes in turn.
    #[arg(long, default_value_t = 2)]
    pub queriers: usize,
    /// Seconds of each phase (writes, then queries).
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Threads of the nodes' runtime (all nodes run in this process).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Directory for results.json, the chart and the nodes' data (removed after the run).
    #[arg(long, default_value = "bench-out")]
    pub out: std::path::PathBuf,
}

/// The keys a table of the benchmark spans (its shards split this range evenly).
const KEY_SPAN: i64 = 1 << 40;

/// The query each querier repeats: a full scan with a filter and a grouped aggregate, its
/// partial aggregation running on the shards.
const QUERY: &str = "SELECT g, count(*), sum(n) FROM bench WHERE n >= 0 GROUP BY g ORDER BY g";

/// Runs `work(i)` for i in 0..`threads` (at least one), each on a thread of its own, and waits
/// for all of them; the first error (or a panic of a `what`) is the answer.
fn on_threads(threads: usize, what: &str, work: impl Fn(usize) -> Result<(), String> + Sync) -> Result<(), String> {
    std::thread::scope(|s| {
        let work = &work;
        let handles: Vec<_> = (0..threads.max(1)).map(|i| s.spawn(move || work(i))).collect();
        handles.into_iter().try_for_each(|h| h.join().map_err(|_| format!("a {what} panicked"))?)
    })
}

/// One cluster size: writes for `--seconds`, then queries for `--seconds`; adds the figures.
fn measure(a: &ClusterArgs, n: usize, results: &mut crate::harness::Results) -> Result<(), String> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Instant;

    use strata::{Column, ColumnType, Schema};
    use strata_cluster::types::{to_wire, WireValue};

    let dir = a.out.join("data").join(format!("cluster-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    let cluster = Cluster::start(&dir, n, a.threads)?;
    let schema = Schema::new(
        vec![
            Column::new("k", ColumnType::BigInt),
            Column::new("g", ColumnType::Int),
            Column::new("n", ColumnType::BigInt),
        ],
        &["k"],
    )
    .map_err(|e| e.to_string())?;
    let shards = n as i64;
    let splits: Vec<WireValue> = (1..shards).map(|i| WireValue::BigInt(KEY_SPAN / shards * i)).collect();
    let replicas = n.min(3);
    let create = NodeRequest::CreateTable { name: "bench".into(), schema: schema.to_bytes(), splits, replicas };
    match cluster.ask(0, create) {
        NodeResponse::Done => {}
        other => return Err(format!("cluster: creating the table: {other:?}")),
    }
    let label = if n == 1 { "1 node".to_string() } else { format!("{n} nodes") };
    let config = format!(
        "{label} in one process over 127.0.0.1, {shards} shard(s) x {replicas} replica(s), {} writers x {} rows per write, {} queriers",
        a.writers, a.rows_per_write, a.queriers
    );
    let phase = Duration::from_secs(a.seconds.max(1));

    // Writes: each writer its own keys, shard after shard.
    let rows = AtomicU64::new(0);
    let writes = AtomicU64::new(0);
    let latency = parking_lot::Mutex::new(crate::harness::Latency::new());
    let t0 = Instant::now();
    on_threads(a.writers, "writer", |w| {
        let mut i = 0i64;
        while t0.elapsed() < phase {
            let shard = i % shards;
            let base = KEY_SPAN / shards * shard + ((w as i64) << 32) + i * a.rows_per_write as i64;
            let batch: Vec<Vec<WireValue>> = (0..a.rows_per_write as i64)
                .map(|j| {
                    let k = base + j;
                    to_wire(&[Value::BigInt(k), Value::Int((k % 16) as i32), Value::BigInt(k % 1000)])
                })
                .collect();
            let t = Instant::now();
            match cluster.ask(w + i as usize, NodeRequest::Insert { table: "bench".into(), rows: batch }) {
                NodeResponse::Written { .. } => {}
                other => return Err(format!("cluster: a write: {other:?}")),
            }
            latency.lock().record(t.elapsed());
            rows.fetch_add(a.rows_per_write as u64, Ordering::Relaxed);
            writes.fetch_add(1, Ordering::Relaxed);
            i += 1;
        }
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let (rows, writes) = (rows.into_inner(), writes.into_inner());
    results.add_variant("strata", &label, &config, "write rows/s", rows as f64 / secs, "rows/s");
    results.add_variant("strata", &label, &config, "writes/s", writes as f64 / secs, "writes/s");
    results.add_variant("strata", &label, &config, "write p50", latency.lock().quantile(0.5), "us");

    // Queries: each querier through the nodes in turn, every answer checked for the row count.
    let queries = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    on_threads(a.queriers, "querier", |q| {
        let mut i = q;
        while t0.elapsed() < phase && !stop.load(Ordering::Relaxed) {
            let batches = cluster.query_at(i, QUERY)?;
            let counted: i64 = batches
                .iter()
                .flat_map(strata::scan::batch_rows)
                .map(|r| match r.get(1) {
                    Some(Value::BigInt(c)) => *c,
                    _ => 0,
                })
                .sum();
            if counted != rows as i64 {
                stop.store(true, Ordering::Relaxed);
                return Err(format!("cluster: the query counted {counted} rows of {rows} written"));
            }
            queries.fetch_add(1, Ordering::Relaxed);
            i += 1;
        }
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let queries = queries.into_inner();
    results.add_variant("strata", &label, &config, "queries/s", queries as f64 / secs, "queries/s");
    results.add_variant("strata", &label, &config, "rows scanned/s", (queries * rows) as f64 / secs, "rows/s");
    eprintln!("cluster: {label}: {rows} rows in {writes} writes, {queries} queries of {rows} rows each",);
    cluster.stop()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// `strata-bench cluster`: per cluster size, write throughput (rows and writes per second, each
/// write one Raft entry replicated and synced), then query throughput (an aggregate over every
/// row, one scan task per shard).
pub(crate) fn cluster(a: &ClusterArgs) -> Result<(), String> {
    use serde_json::json;
    if a.nodes.is_empty() || a.nodes.contains(&0) {
        return Err("cluster: --nodes needs sizes of at least 1".into());
    }
    if a.rows_per_write == 0 {
        return Err("cluster: --rows-per-write must be at least 1".into());
    }
    let mut results = crate::harness::Results::new(
        "cluster",
        [
            ("writers", json!(a.writers)),
            ("rows_per_write", json!(a.rows_per_write)),
            ("queriers", json!(a.queriers)),
            ("seconds", json!(a.seconds)),
            ("threads", json!(a.threads)),
        ],
    );
    for &n in &a.nodes {
        measure(a, n, &mut results)?;
    }
    let _ = std::fs::remove_dir_all(a.out.join("data"));
    results.finish(&a.out)
}
