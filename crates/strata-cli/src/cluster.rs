//! `strata node` (run one node of a cluster) and `strata cluster` (ask a node about the cluster
//! or change it). docs/cluster.md describes the cluster.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use clap::Subcommand;
use serde_json::json;
use strata_cli::exec::CliError;
use strata_cli::schema_sql;
use strata_cluster::types::{to_wire, NodeRequest, NodeResponse};
use strata_cluster::{Node, NodeOptions, ReplicaOptions};

/// How long `strata cluster` waits for a node's answer.
const TTL: Duration = Duration::from_secs(30);

#[derive(Subcommand)]
pub enum ClusterCmd {
    /// Make a new cluster of the nodes given (each started with `strata node`): the node asked
    /// must be one of them. A cluster already made is left as it is.
    Init {
        /// A node of the cluster, ID=ADDR (repeat for each).
        #[arg(long = "peer", value_name = "ID=ADDR", value_parser = parse_peer, required = true)]
        peers: Vec<(u64, String)>,
    },
    /// Nodes, shards, their replicas and leaders, and what the node asked has applied (JSON).
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

/// Runs node `id` from `dir` on `listen` until interrupted (SIGINT or SIGTERM); prints
/// `listening on ADDR` once it serves.
pub fn run_node(dir: &Path, id: u64, listen: &str, peers: Vec<(u64, String)>) -> Result<(), CliError> {
    let rt = runtime()?;
    rt.block_on(async {
        let opts = NodeOptions {
            id,
            dir: dir.to_path_buf(),
            listen: listen.to_string(),
            peers: peers.into_iter().collect::<BTreeMap<_, _>>(),
            replica: ReplicaOptions::default(),
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
    };
    let answer = runtime()?.block_on(strata_cluster::net::call(addr, req, TTL)).map_err(cluster_error)?;
    match answer {
        NodeResponse::Done => println!("ok"),
        NodeResponse::Status(s) => {
            let shards: Vec<_> = s
                .shards
                .iter()
                .map(|sh| {
                    json!({
                        "shard": sh.info.id, "table": sh.info.table, "replicas": sh.info.replicas,
                        "leader": sh.leader, "applied": sh.applied,
                    })
                })
                .collect();
            let nodes: Vec<_> = s.nodes.iter().map(|(id, a)| json!({"id": id, "addr": a})).collect();
            let out = json!({"node": s.node, "nodes": nodes, "meta_leader": s.meta_leader, "shards": shards});
            println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        }
        NodeResponse::Failed(m) | NodeResponse::NotReady(m) => return Err(CliError::new("cluster_error", m)),
        other => return Err(CliError::new("cluster_error", format!("unexpected answer {other:?}"))),
    }
    Ok(())
}
