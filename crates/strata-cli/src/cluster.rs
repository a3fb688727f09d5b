//! `strata node` (run one node of a cluster) and `strata cluster` (ask a node about the cluster
//! or change it). docs/cluster.md describes the cluster.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use clap::Subcommand;
use serde_json::json;
use strata::{Schema, Value};
use strata_cli::exec::CliError;
use strata_cli::{json, schema_sql};
use strata_cluster::types::{from_wire, to_wire, NodeRequest, NodeResponse};
use strata_cluster::{Node, NodeOptions};

/// How long `strata cluster` waits for a node's answer.
const TTL: Duration = Duration::from_secs(30);

/// How long it waits for a change of membership (a node added, a shard moved), which lasts as
/// long as a new replica takes to catch up (the node gives up after 120 s).
const ADMIN_TTL: Duration = Duration::from_secs(150);

#[derive(Subcommand)]
pub enum ClusterCmd {
    /// Make a new cluster of the nodes given (each started with `strata node`): the node asked
    /// must be one of them. A cluster already made is left as it is.
    Init {
        /// A node of the cluster, ID=ADDR (repeat for each).
        #[arg(long = "peer", value_name = "ID=ADDR", value_parser = parse_peer, required = true)]
        peers: Vec<(u64, String)>,
    },
    /// Nodes, shards, their replicas and leaders, what the node asked has applied, and how many
    /// log entries each replica lags its leader (JSON).
    Status,
    /// Create a table split into shards by its first key column.
    CreateTable {
        /// Table name.
        name: String,
        /// Columns, as for `strata create-table`: "id BIGINT PRIMARY KEY, v TEXT".
        #[arg(long)]
        schema: String,
        /// A split point (a value of the first key column); N points make N+1 shards. Repeat.
        #[arg(long = "split", value_name = "VALUE")]
        splits: Vec<String>,
        /// Replicas per shard.
        #[arg(long, default_value_t = 3)]
        replicas: usize,
    },
    /// Insert rows, given as JSON objects by column name, as one write; all must fall in one
    /// shard (a write spanning shards is refused).
    Insert {
        /// Table name.
        table: String,
        /// A row, e.g. '{"k": 1, "v": "a"}' (repeat for more).
        #[arg(long = "row", value_name = "JSON", required = true)]
        rows: Vec<String>,
    },
    /// Read one row by its key at its shard's leader; prints it as a JSON object, or nothing.
    Get {
        /// Table name.
        table: String,
        /// The key's values, in key order.
        #[arg(required = true)]
        key: Vec<String>,
    },
    /// Add a node, started with `strata node --id ID` and not yet in the cluster, as a member:
    /// it learns the shard map and holds no shard until one is moved to it.
    AddNode {
        /// The new node, ID=ADDR.
        #[arg(long = "peer", value_name = "ID=ADDR", value_parser = parse_peer)]
        peer: (u64, String),
    },
    /// Remove a node that holds no shard replica (move its shards off it first) from the
    /// cluster; then stop its process (`strata node` goes on running until stopped).
    RemoveNode {
        /// The node's id.
        id: u64,
    },
    /// Move a shard's replica from one node to another (a member holding none of it) while
    /// the shard takes writes: the new replica catches up from the shard's log and takes the
    /// old one's place; the old node drops its replica. A move whose new replica does not
    /// catch up within 120 s is undone (the shard as before) and can be tried again.
    MoveShard {
        /// The shard's id (`status` lists them).
        shard: u64,
        /// The node giving its replica up.
        #[arg(long)]
        from: u64,
        /// The node taking it.
        #[arg(long)]
        to: u64,
    },
    /// Run a SQL query over the sharded tables, the node asked coordinating: one scan task per
    /// shard on a node holding it, every shard read at one read point; prints the rows as a
    /// table. `EXPLAIN query` prints the distributed plan.
    Sql {
        /// The query.
        query: String,
    },
}

/// A group's lag ([`strata_cluster::types::ShardStatus::lag`]) as a JSON object: node id →
/// entries behind its leader, or null when the leader has not heard from it.
fn lag_json(lag: &[(u64, Option<u64>)]) -> serde_json::Value {
    serde_json::Value::Object(lag.iter().map(|(n, l)| (n.to_string(), json!(l))).collect())
}

fn parse_peer(s: &str) -> Result<(u64, String), String> {
    let (id, addr) = s.split_once('=').ok_or_else(|| format!("`{s}` is not ID=ADDR"))?;
    let id = id.trim().parse().map_err(|_| format!("`{id}` is not a node id"))?;
    Ok((id, addr.trim().to_string()))
}

/// The peer list parser, for `strata node --peer`.
pub fn peer(s: &str) -> Result<(u64, String), String> {
    parse_peer(s)
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new("io_error", format!("starting the runtime: {e}")))
}

fn cluster_error(e: strata_cluster::Error) -> CliError {
    CliError::new("cluster_error", e.to_string())
}

/// The environment variable that makes each shard partition of a query wait this many
/// milliseconds before it reads (for tests that kill a worker during a query).
pub const SCAN_DELAY_ENV: &str = "STRATA_TEST_SCAN_DELAY_MS";

/// Runs node `id` from `dir` on `listen` until interrupted (SIGINT or SIGTERM); prints
/// `listening on ADDR` once it serves.
pub fn run_node(
    dir: &Path,
    id: u64,
    listen: &str,
    peers: Vec<(u64, String)>,
    worker_listen: Option<String>,
) -> Result<(), CliError> {
    let rt = runtime()?;
    rt.block_on(async {
        let delay_ms = std::env::var(SCAN_DELAY_ENV).ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let opts = NodeOptions {
            peers: peers.into_iter().collect::<BTreeMap<_, _>>(),
            worker_listen,
            scan_delay: std::time::Duration::from_millis(delay_ms),
            ..NodeOptions::new(id, dir, listen)
        };
        let node = Node::start(opts).await.map_err(cluster_error)?;
        println!("node {id} listening on {}", node.addr());
        let _ = std::io::stdout().flush();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| CliError::new("io_error", e.to_string()))?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        node.shutdown().await.map_err(cluster_error)?;
        println!("node {id} stopped");
        Ok(())
    })
}

/// Sends one `strata cluster` command to the node at `addr` and prints its answer.
pub fn run_cluster(addr: &str, cmd: ClusterCmd) -> Result<(), CliError> {
    let rt = runtime()?;
    let ask = |req: NodeRequest| {
        let ttl = match req {
            NodeRequest::AddNode { .. } | NodeRequest::RemoveNode { .. } | NodeRequest::MoveShard { .. } => ADMIN_TTL,
            _ => TTL,
        };
        rt.block_on(strata_cluster::net::call(addr, req, ttl)).map_err(cluster_error)
    };
    let schema_of = |table: &str| match ask(NodeRequest::Schema { table: table.to_string() })? {
        NodeResponse::Schema(b) => Schema::from_bytes(&b).map_err(CliError::from),
        NodeResponse::Failed(m) => Err(CliError::new("cluster_error", m)),
        other => Err(CliError::new("cluster_error", format!("unexpected answer {other:?}"))),
    };
    // The schema a row read is printed by.
    let mut printed_row = None;
    let mut explain = false;
    let req = match cmd {
        ClusterCmd::Init { peers } => NodeRequest::Initialize { peers },
        ClusterCmd::Status => NodeRequest::Status,
        ClusterCmd::CreateTable { name, schema, splits, replicas } => {
            let schema = schema_sql::parse_schema(&schema).map_err(|m| CliError::new("invalid_schema", m))?;
            let key_ty = schema.columns()[schema.primary_key()[0]].ty;
            let splits = splits
                .iter()
                .map(|s| {
                    crate::parse_text(key_ty, s).map_err(|m| CliError::new("bad_request", format!("split `{s}`: {m}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            NodeRequest::CreateTable { name, schema: schema.to_bytes(), splits: to_wire(&splits), replicas }
        }
        ClusterCmd::Insert { table, rows } => {
            let schema = schema_of(&table)?;
            let mut out = Vec::new();
            for text in rows {
                let j: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| CliError::new("bad_request", format!("row `{text}`: {e}")))?;
                let obj = j
                    .as_object()
                    .ok_or_else(|| CliError::new("bad_request", format!("row `{text}` is not a JSON object")))?;
                let row = json::row_from_json(&schema, obj).map_err(|m| CliError::new("bad_request", m))?;
                out.push(to_wire(&row));
            }
            NodeRequest::Insert { table, rows: out }
        }
        ClusterCmd::Get { table, key } => {
            let schema = schema_of(&table)?;
            let pk = schema.primary_key();
            if key.len() != pk.len() {
                return Err(CliError::new("bad_request", format!("table `{table}` has {} key column(s)", pk.len())));
            }
            let values = pk
                .iter()
                .zip(&key)
                .map(|(&c, v)| {
                    crate::parse_text(schema.columns()[c].ty, v).map_err(|m| CliError::new("type_mismatch", m))
                })
                .collect::<Result<Vec<_>, _>>()?;
            printed_row = Some(schema);
            NodeRequest::Get { table, key: to_wire(&values) }
        }
        ClusterCmd::AddNode { peer: (id, addr) } => NodeRequest::AddNode { id, addr },
        ClusterCmd::RemoveNode { id } => NodeRequest::RemoveNode { id },
        ClusterCmd::MoveShard { shard, from, to } => NodeRequest::MoveShard { shard, from, to },
        ClusterCmd::Sql { query } => {
            explain = strata_cluster::sql::is_explain(&query);
            NodeRequest::Sql { query }
        }
    };
    let answer = ask(req)?;
    match answer {
        NodeResponse::Done => println!("ok"),
        NodeResponse::Written { seq } => println!("ok (shard sequence number {seq})"),
        NodeResponse::Row(row) => {
            if let (Some(row), Some(schema)) = (row, printed_row) {
                let names: Vec<&str> = schema.columns().iter().map(|c| c.name.as_str()).collect();
                println!("{}", json::object(&names, &from_wire(row)));
            }
        }
        NodeResponse::Status(s) => {
            let shards: Vec<_> = s
                .shards
                .iter()
                .map(|sh| {
                    json!({
                        "shard": sh.info.id, "table": sh.info.table, "replicas": sh.info.replicas,
                        "leader": sh.leader, "applied": sh.applied, "lag": lag_json(&sh.lag),
                    })
                })
                .collect();
            let nodes: Vec<_> = s.nodes.iter().map(|(id, a)| json!({"id": id, "addr": a})).collect();
            let out = json!({
                "node": s.node, "nodes": nodes, "meta_leader": s.meta_leader, "meta_lag": lag_json(&s.meta_lag),
                "shards": shards,
            });
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        }
        NodeResponse::Rows { ipc, .. } => {
            let batches = strata_cluster::sql::from_ipc(&ipc).map_err(cluster_error)?;
            if explain {
                for row in batches.iter().flat_map(strata::scan::batch_rows) {
                    if let Some(Value::Text(plan)) = row.first() {
                        println!("{plan}");
                    }
                }
            } else if !batches.is_empty() {
                let table = strata_sql::datafusion::arrow::util::pretty::pretty_format_batches(&batches)
                    .map_err(|e| CliError::new("cluster_error", e.to_string()))?;
                println!("{table}");
            }
        }
        NodeResponse::Failed(m) | NodeResponse::NotReady(m) => return Err(CliError::new("cluster_error", m)),
        other => return Err(CliError::new("cluster_error", format!("unexpected answer {other:?}"))),
    }
    Ok(())
}
