//! What the cluster's in-process tests share: node options, starting three nodes, creating a
//! (k, v) table, asking until an answer settles, a node's view of the cluster.

// Each test file uses its own part of these.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use strata::{Column, ColumnType, Schema};
use strata_cluster::types::{ClusterStatus, NodeRequest, NodeResponse, WireValue};
use strata_cluster::{Node, NodeOptions, ReplicaOptions};

/// Node `id` in `dir/node{id}` on `listen`: quick elections, small memtables (so flushes run),
/// the default ten minutes of history.
pub fn options(dir: &Path, id: u64, listen: &str) -> NodeOptions {
    let defaults = ReplicaOptions::default();
    let db = strata::Options { memtable_size: 64 << 10, ..defaults.db };
    NodeOptions {
        replica: ReplicaOptions { db, election_timeout_ms: (300, 600), heartbeat_ms: 50, ..defaults },
        ..NodeOptions::new(id, dir.join(format!("node{id}")), listen)
    }
}

/// Nodes 1 to 3 on free ports, made a cluster.
pub async fn start_three(dir: &Path) -> Vec<Node> {
    start_cluster((1..=3).map(|id| options(dir, id, "127.0.0.1:0")).collect()).await
}

/// Nodes started with `all`, made a cluster.
pub async fn start_cluster(all: Vec<NodeOptions>) -> Vec<Node> {
    let mut nodes = Vec::new();
    for opts in all {
        nodes.push(Node::start(opts).await.unwrap());
    }
    let peers: BTreeMap<u64, String> = nodes.iter().map(|n| (n.id(), n.addr())).collect();
    nodes[0].initialize(&peers).await.unwrap();
    nodes
}

/// Creating table `name (k BIGINT PRIMARY KEY, v TEXT)`, split at `splits`, 3 replicas a shard.
pub fn create_kv(name: &str, splits: &[i64]) -> NodeRequest {
    let columns = vec![Column::new("k", ColumnType::BigInt), Column::new("v", ColumnType::Text)];
    NodeRequest::CreateTable {
        name: name.into(),
        schema: Schema::new(columns, &["k"]).unwrap().to_bytes(),
        splits: splits.iter().map(|k| WireValue::BigInt(*k)).collect(),
        replicas: 3,
    }
}

/// Asks until the answer is neither a failure nor "not ready" (a shard starting, a leader being
/// elected), for at most 30 s; then the last answer.
pub async fn settled(node: &Node, req: NodeRequest) -> NodeResponse {
    let start = Instant::now();
    loop {
        let r = node.request(req.clone()).await;
        if !matches!(r, NodeResponse::Failed(_) | NodeResponse::NotReady(_))
            || start.elapsed() > Duration::from_secs(30)
        {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The cluster as `node` sees it.
pub async fn status(node: &Node) -> ClusterStatus {
    match node.request(NodeRequest::Status).await {
        NodeResponse::Status(s) => s,
        other => panic!("status of node {}: {other:?}", node.id()),
    }
}
