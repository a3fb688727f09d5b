//! Three nodes on 127.0.0.1 in one process: a table in 3 shards × 3 replicas, writes and reads
//! through any node, a write spanning shards refused, the loss of a shard leader (its node
//! stopped) survived with nothing acknowledged lost, the stopped node reported behind, and the
//! node started again catching up.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{create_kv, options, settled, status};
use strata::Value;
use strata_cluster::types::{to_wire, NodeRequest, NodeResponse, WireValue};
use strata_cluster::Node;

mod common;

fn row(k: i64, round: i64) -> Vec<WireValue> {
    to_wire(&[Value::BigInt(k), Value::Text(format!("v{k}-{round}"))])
}

/// Writes the rows of keys `keys` (one batch per shard, all keys in one shard) through the nodes
/// in turn; returns the rows acknowledged.
async fn write(nodes: &[Option<Node>], keys: std::ops::Range<i64>, round: i64) -> Vec<(i64, Vec<WireValue>)> {
    let live: Vec<&Node> = nodes.iter().flatten().collect();
    let mut acked = Vec::new();
    for (i, k) in keys.enumerate() {
        let r = row(k, round);
        let req = NodeRequest::Insert { table: "t".into(), rows: vec![r.clone()] };
        match live[i % live.len()].request(req).await {
            NodeResponse::Written { .. } => acked.push((k, r)),
            other => panic!("insert of key {k} through node {}: {other:?}", live[i % live.len()].id()),
        }
    }
    acked
}

/// Reads every acknowledged row back through each live node.
async fn check(nodes: &[Option<Node>], acked: &BTreeMap<i64, Vec<WireValue>>) {
    for n in nodes.iter().flatten() {
        for (k, want) in acked {
            let req = NodeRequest::Get { table: "t".into(), key: to_wire(&[Value::BigInt(*k)]) };
            match n.request(req).await {
                NodeResponse::Row(Some(got)) => assert_eq!(&got, want, "key {k} through node {}", n.id()),
                other => panic!("key {k} through node {}: {other:?}", n.id()),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sharded_table_survives_the_loss_of_a_shard_leader_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(Some(Node::start(options(dir.path(), id, "127.0.0.1:0")).await.unwrap()));
    }
    let peers: BTreeMap<u64, String> = nodes.iter().flatten().map(|n| (n.id(), n.addr())).collect();
    nodes[0].as_ref().unwrap().initialize(&peers).await.unwrap();

    let create = create_kv("t", &[100, 200]);
    let created = settled(nodes[1].as_ref().unwrap(), create.clone()).await;
    assert_eq!(created, NodeResponse::Done);
    match nodes[2].as_ref().unwrap().request(create).await {
        NodeResponse::Failed(m) => assert!(m.contains("exists"), "{m}"),
        other => panic!("a second create: {other:?}"),
    }
    let mut acked: BTreeMap<i64, Vec<WireValue>> = write(&nodes, 0..300, 0).await.into_iter().collect();
    // Rows in two shards in one request are refused, and nothing of them is written.
    let spanning = NodeRequest::Insert { table: "t".into(), rows: vec![row(50, 9), row(150, 9)] };
    match nodes[0].as_ref().unwrap().request(spanning).await {
        NodeResponse::Failed(m) => assert!(m.contains("spanning shards"), "{m}"),
        other => panic!("a write spanning shards: {other:?}"),
    }
    check(&nodes, &acked).await;

    let s = status(nodes[0].as_ref().unwrap()).await;
    assert_eq!(s.shards.len(), 3);
    assert!(s.shards.iter().all(|sh| sh.info.replicas.len() == 3 && sh.leader.is_some()), "{s:?}");
    // Stop the node leading the first shard.
    let victim = s.shards[0].leader.unwrap();
    let at = nodes.iter().position(|n| n.as_ref().is_some_and(|n| n.id() == victim)).unwrap();
    let addr = nodes[at].as_ref().unwrap().addr();
    nodes[at].take().unwrap().shutdown().await.unwrap();
    // The stopped node led the first shard: its first write waits out the election (bounded
    // here by a few election timeouts), then writes to every shard go on through the others.
    let t0 = Instant::now();
    acked.extend(write(&nodes, 0..1, 1).await);
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(5), "the first shard took {took:?} to take a write again");
    acked.extend(write(&nodes, 1..300, 1).await);
    let live = (at + 1) % 3;
    let s = status(nodes[live].as_ref().unwrap()).await;
    assert!(s.shards[0].leader.is_some_and(|l| l != victim), "{s:?}");
    // Every shard's leader reports the stopped node behind (or not heard from) and itself not.
    for sh in &s.shards {
        let lag: BTreeMap<u64, Option<u64>> = sh.lag.iter().copied().collect();
        assert_eq!(lag.len(), 3, "{sh:?}");
        assert_eq!(lag[&sh.leader.unwrap()], Some(0), "{sh:?}");
        assert!(lag[&victim].is_none_or(|behind| behind > 0), "the stopped node's lag: {sh:?}");
    }
    check(&nodes, &acked).await;

    // The node starts again on its address and directory and catches up.
    nodes[at] = Some(Node::start(options(dir.path(), victim, &addr)).await.unwrap());
    acked.extend(write(&nodes, 0..300, 2).await);
    let back = nodes[at].as_ref().unwrap();
    let start = Instant::now();
    loop {
        let mine = status(back).await;
        let theirs = status(nodes[live].as_ref().unwrap()).await;
        let caught_up =
            mine.shards.iter().zip(&theirs.shards).all(|(a, b)| a.applied.is_some() && a.applied >= b.applied);
        // With the writes over, every leader hears every replica hold its whole log.
        let level = |lag: &[(u64, Option<u64>)]| lag.len() == 3 && lag.iter().all(|(_, l)| *l == Some(0));
        if caught_up && mine.shards.iter().all(|sh| level(&sh.lag)) && level(&mine.meta_lag) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "node {victim} did not catch up: {mine:?} vs {theirs:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check(&nodes, &acked).await;
    for n in nodes.into_iter().flatten() {
        n.shutdown().await.unwrap();
    }
}
