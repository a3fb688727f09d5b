//! A fourth node added to a running cluster and a shard moved to it under a write load: nothing
//! acknowledged is lost, the moved shard's replicas (the new one included) hold the same rows
//! once they applied the same entries (a differential check of their contents), the node the
//! shard left drops its replica, and queries through the new node answer as the rows say. A move
//! that cannot finish is undone and can be tried again; a node holding no replica can be removed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{create_kv, options, settled, start_cluster, start_three, status};
use strata::Value;
use strata_cluster::types::{to_wire, NodeRequest, NodeResponse, WireValue};
use strata_cluster::Node;

mod common;

fn row(k: i64) -> Vec<WireValue> {
    to_wire(&[Value::BigInt(k), Value::Text(format!("v{k}"))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shard_moved_to_a_new_node_under_writes_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<Arc<Node>> = start_three(dir.path()).await.into_iter().map(Arc::new).collect();
    assert_eq!(settled(&nodes[0], create_kv("t", &[1000, 2000])).await, NodeResponse::Done);
    assert!(matches!(
        settled(&nodes[0], NodeRequest::Insert { table: "t".into(), rows: vec![row(0)] }).await,
        NodeResponse::Written { .. }
    ));

    // A writer through the three first nodes in turn, every shard in turn, until told to stop.
    let acked: Arc<Mutex<Vec<i64>>> = Arc::new(Mutex::new(vec![0]));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (nodes, acked, stop) = (nodes.clone(), acked.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 1i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 20_000 {
                let k = (i % 3) * 1000 + i / 3;
                let req = NodeRequest::Insert { table: "t".into(), rows: vec![row(k)] };
                match nodes[i as usize % 3].request(req).await {
                    NodeResponse::Written { .. } => acked.lock().unwrap().push(k),
                    other => panic!("write of key {k}: {other:?}"),
                }
                i += 1;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    // A fourth node joins, and the first shard moves from its first node to it.
    let fourth = Arc::new(Node::start(options(dir.path(), 4, "127.0.0.1:0")).await.unwrap());
    let add = NodeRequest::AddNode { id: 4, addr: fourth.addr() };
    assert_eq!(nodes[1].request(add.clone()).await, NodeResponse::Done);
    match nodes[2].request(add).await {
        NodeResponse::Failed(m) => assert!(m.contains("already"), "{m}"),
        other => panic!("adding node 4 again: {other:?}"),
    }
    let before = status(&nodes[0]).await;
    let moved = &before.shards[0].info;
    let from = moved.replicas[0];
    let t0 = Instant::now();
    let answer = nodes[2].request(NodeRequest::MoveShard { shard: moved.id, from, to: 4 }).await;
    assert_eq!(answer, NodeResponse::Done, "moving shard {} from node {from} to node 4", moved.id);
    println!("shard {} moved from node {from} to node 4 in {:?} under writes", moved.id, t0.elapsed());
    let again = nodes[0].request(NodeRequest::MoveShard { shard: moved.id, from, to: 4 }).await;
    assert!(matches!(again, NodeResponse::Failed(_)), "moving it again: {again:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    let acked: Vec<i64> = std::mem::take(&mut *acked.lock().unwrap());
    let on_moved = acked.iter().filter(|k| **k < 1000).count();
    assert!(on_moved > 10, "only {on_moved} writes reached the moved shard");

    // The map and the nodes agree: node 4 holds the shard, its old node none.
    let start = Instant::now();
    let all: Vec<Arc<Node>> = nodes.iter().cloned().chain([fourth.clone()]).collect();
    loop {
        let s = status(&fourth).await;
        let shard = s.shards.iter().find(|sh| sh.info.id == moved.id).unwrap();
        let mut want: Vec<u64> = moved.replicas.iter().copied().filter(|n| *n != from).chain([4]).collect();
        want.sort_unstable();
        let mut got = shard.info.replicas.clone();
        got.sort_unstable();
        let gone = !dir.path().join(format!("node{from}/shards/{}", moved.id)).exists();
        if got == want && gone && s.nodes.len() == 4 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "the map: {s:?}; replica directory gone: {gone}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Every acknowledged row through every node, the new one included.
    for n in &all {
        for k in &acked {
            let req = NodeRequest::Get { table: "t".into(), key: to_wire(&[Value::BigInt(*k)]) };
            match settled(n, req).await {
                NodeResponse::Row(Some(r)) => assert_eq!(r, row(*k), "key {k} through node {}", n.id()),
                other => panic!("acknowledged key {k} through node {}: {other:?}", n.id()),
            }
        }
    }
    // The differential check: the moved shard's replicas, once they applied the same entries,
    // hold the same rows (their digests agree), and as many as were acknowledged there.
    let holders: Vec<&Arc<Node>> = all.iter().filter(|n| n.id() != from).collect();
    let start = Instant::now();
    let digests = loop {
        let mut d = Vec::new();
        for n in &holders {
            match n.request(NodeRequest::ShardDigest { group: moved.id }).await {
                NodeResponse::Digest { applied, rows, hash } => d.push((applied, rows, hash)),
                other => panic!("digest of shard {} on node {}: {other:?}", moved.id, n.id()),
            }
        }
        if d.windows(2).all(|w| w[0].0 == w[1].0) {
            break d;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "the replicas did not reach one entry: {d:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(digests.windows(2).all(|w| w[0] == w[1]), "the replicas differ: {digests:?}");
    let distinct: std::collections::BTreeSet<i64> = acked.iter().copied().filter(|k| *k < 1000).collect();
    // The shard's rows plus one `__written` row per row written.
    assert_eq!(digests[0].1, 2 * distinct.len() as u64, "{digests:?}");
    let gone = fourth.request(NodeRequest::ShardDigest { group: moved.id }).await;
    assert!(matches!(gone, NodeResponse::Digest { .. }));
    let old = all.iter().find(|n| n.id() == from).unwrap();
    assert!(matches!(old.request(NodeRequest::ShardDigest { group: moved.id }).await, NodeResponse::NotReady(_)));

    // A query through the new node counts every row.
    let distinct_all: std::collections::BTreeSet<i64> = acked.iter().copied().collect();
    match settled(&fourth, NodeRequest::Sql { query: "SELECT count(*) FROM t".into() }).await {
        NodeResponse::Rows { ipc, .. } => {
            let rows: Vec<Vec<Value>> =
                strata_cluster::sql::from_ipc(&ipc).unwrap().iter().flat_map(strata::scan::batch_rows).collect();
            assert_eq!(rows, vec![vec![Value::BigInt(distinct_all.len() as i64)]]);
        }
        other => panic!("count through node 4: {other:?}"),
    }
    drop(all);
    for n in nodes.into_iter().chain([fourth]) {
        Arc::try_unwrap(n).ok().unwrap().shutdown().await.unwrap();
    }
}

/// A move whose new replica cannot catch up (its node is down) gives up after
/// `ReplicaOptions::catch_up` and is undone: the map lists the shard's replicas as before and the
/// same move succeeds once the node is back (it would be refused if the map still listed it).
/// Then the node the shard left, holding nothing, is removed, and the other three go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_move_that_cannot_finish_is_undone_and_can_be_tried_again() {
    let dir = tempfile::tempdir().unwrap();
    let quick = |id: u64, listen: &str| {
        let mut opts = options(dir.path(), id, listen);
        opts.replica.catch_up = Duration::from_secs(2);
        opts
    };
    let nodes = start_cluster((1..=3).map(|id| quick(id, "127.0.0.1:0")).collect()).await;
    assert_eq!(settled(&nodes[0], create_kv("t", &[])).await, NodeResponse::Done);
    let rows: Vec<_> = (0..50).map(row).collect();
    let written = settled(&nodes[0], NodeRequest::Insert { table: "t".into(), rows }).await;
    assert!(matches!(written, NodeResponse::Written { .. }), "{written:?}");

    // Node 4 joins, then stops.
    let fourth = Node::start(quick(4, "127.0.0.1:0")).await.unwrap();
    let addr = fourth.addr();
    assert_eq!(nodes[1].request(NodeRequest::AddNode { id: 4, addr: addr.clone() }).await, NodeResponse::Done);
    fourth.shutdown().await.unwrap();

    let shard = status(&nodes[0]).await.shards[0].info.clone();
    let from = shard.replicas[0];
    let t0 = Instant::now();
    match nodes[2].request(NodeRequest::MoveShard { shard: shard.id, from, to: 4 }).await {
        NodeResponse::Failed(m) => assert!(m.contains("did not catch up") && m.contains("undone"), "{m}"),
        other => panic!("moving shard {} to a stopped node: {other:?}", shard.id),
    }
    println!("the move to a stopped node failed after {:?}", t0.elapsed());
    for n in &nodes {
        replicas_become(n, shard.id, shard.replicas.clone()).await;
    }

    // Back on its address, node 4 takes the shard.
    let fourth = Node::start(quick(4, &addr)).await.unwrap();
    let answer = settled(&nodes[0], NodeRequest::MoveShard { shard: shard.id, from, to: 4 }).await;
    assert_eq!(answer, NodeResponse::Done, "moving shard {} again once node 4 is back", shard.id);
    let after: Vec<u64> = shard.replicas.iter().copied().filter(|n| *n != from).chain([4]).collect();
    replicas_become(&fourth, shard.id, after).await;
    for k in [0, 49] {
        let req = NodeRequest::Get { table: "t".into(), key: to_wire(&[Value::BigInt(k)]) };
        assert_eq!(settled(&fourth, req).await, NodeResponse::Row(Some(row(k))), "key {k} through node 4");
    }

    // Node 4 holds the shard and cannot be removed; node `from` holds nothing now and can.
    match nodes[0].request(NodeRequest::RemoveNode { id: 4 }).await {
        NodeResponse::Failed(m) => assert!(m.contains("holds replicas of shards"), "{m}"),
        other => panic!("removing node 4, which holds shard {}: {other:?}", shard.id),
    }
    let ask = nodes.iter().find(|n| n.id() != from).unwrap();
    assert_eq!(ask.request(NodeRequest::RemoveNode { id: from }).await, NodeResponse::Done);
    // (If node `from` led the metadata group, the others elect a leader first.)
    let start = Instant::now();
    loop {
        match ask.request(NodeRequest::RemoveNode { id: from }).await {
            NodeResponse::Failed(m) if m.contains("no leader") && start.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            NodeResponse::Failed(m) => break assert!(m.contains("not in the cluster"), "{m}"),
            other => panic!("removing node {from} again: {other:?}"),
        }
    }
    let mut rest: Vec<Node> = Vec::new();
    for n in nodes.into_iter().chain([fourth]) {
        if n.id() == from {
            n.shutdown().await.unwrap();
        } else {
            rest.push(n);
        }
    }
    let want: Vec<u64> = (1..=4).filter(|n| *n != from).collect();
    let start = Instant::now();
    loop {
        let s = status(&rest[0]).await;
        let members: Vec<u64> = s.nodes.iter().map(|(n, _)| *n).collect();
        if members == want && s.meta_lag.len() == 3 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the members after removing node {from}: {s:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The remaining three make a new table's three replicas, and serve the first one's rows.
    assert_eq!(settled(&rest[1], create_kv("u", &[])).await, NodeResponse::Done);
    let start = Instant::now();
    let u = loop {
        match status(&rest[1]).await.shards.into_iter().find(|s| s.info.table == "u") {
            Some(s) => break s.info,
            None => assert!(start.elapsed() < Duration::from_secs(10), "table u is not in node {}'s map", rest[1].id()),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut placed = u.replicas.clone();
    placed.sort_unstable();
    assert_eq!(placed, want, "the new table's replicas");
    let written = settled(&rest[2], NodeRequest::Insert { table: "u".into(), rows: vec![row(7)] }).await;
    assert!(matches!(written, NodeResponse::Written { .. }), "{written:?}");
    for n in &rest {
        let req = NodeRequest::Get { table: "u".into(), key: to_wire(&[Value::BigInt(7)]) };
        assert_eq!(settled(n, req).await, NodeResponse::Row(Some(row(7))), "key 7 through node {}", n.id());
    }
    for n in rest {
        n.shutdown().await.unwrap();
    }
}

/// Waits, at most 10 s, until `node`'s shard map lists `want` as the replicas of `shard`.
async fn replicas_become(node: &Node, shard: u64, want: Vec<u64>) {
    let start = Instant::now();
    loop {
        let now = status(node).await;
        let got = now.shards.iter().find(|s| s.info.id == shard).map(|s| s.info.replicas.clone());
        if got.as_ref() == Some(&want) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "shard {shard} through node {}: {got:?}, not {want:?}",
            node.id()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
