//! Single-shard transactions on three nodes in one process: reads at the snapshot with the
//! transaction's own writes, first committer wins (against transactions and plain writes),
//! decided alike on every replica, steps through any node, a key outside the shard refused,
//! rollback, and a step of a transaction that is not open.

use common::{create_kv, settled, start_three};
use strata::Value;
use strata_cluster::types::{to_wire, NodeRequest, NodeResponse, TxnId, TxnOp, WireValue};
use strata_cluster::Node;

mod common;

fn key(k: i64) -> Vec<WireValue> {
    to_wire(&[Value::BigInt(k)])
}

fn row(k: i64, v: &str) -> Vec<WireValue> {
    to_wire(&[Value::BigInt(k), Value::Text(v.into())])
}

async fn begin(node: &Node, k: i64) -> TxnId {
    match settled(node, NodeRequest::Begin { table: "t".into(), key: key(k) }).await {
        NodeResponse::Begun(id) => id,
        other => panic!("begin at key {k} through node {}: {other:?}", node.id()),
    }
}

async fn step(node: &Node, txn: TxnId, op: TxnOp) -> NodeResponse {
    node.request(NodeRequest::Txn { txn, op }).await
}

async fn get(node: &Node, k: i64) -> Option<Vec<WireValue>> {
    match settled(node, NodeRequest::Get { table: "t".into(), key: key(k) }).await {
        NodeResponse::Row(r) => r,
        other => panic!("get {k} through node {}: {other:?}", node.id()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_shard_transactions_are_snapshot_isolated_on_every_replica() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Option<Node>> = start_three(dir.path()).await.into_iter().map(Some).collect();
    assert_eq!(settled(nodes[0].as_ref().unwrap(), create_kv("t", &[100])).await, NodeResponse::Done);
    let [a, b, c] = [0, 1, 2].map(|i| nodes[i].as_ref().unwrap());

    // Two transactions over one shard, begun and stepped through different nodes.
    let t1 = begin(a, 1).await;
    let t2 = begin(b, 2).await;
    assert_eq!(step(c, t1, TxnOp::Get { key: key(1) }).await, NodeResponse::Row(None));
    assert_eq!(step(a, t1, TxnOp::Insert { row: row(1, "t1") }).await, NodeResponse::Done);
    assert_eq!(step(b, t1, TxnOp::Get { key: key(1) }).await, NodeResponse::Row(Some(row(1, "t1"))));
    assert_eq!(step(a, t1, TxnOp::Insert { row: row(2, "t1") }).await, NodeResponse::Done);
    assert_eq!(step(c, t2, TxnOp::Insert { row: row(2, "t2") }).await, NodeResponse::Done);
    assert_eq!(step(c, t2, TxnOp::Get { key: key(1) }).await, NodeResponse::Row(None), "t1 is not committed");
    assert!(matches!(step(b, t2, TxnOp::Commit).await, NodeResponse::Written { .. }));
    // t1 wrote row 2 too, and t2 committed it first: t1 loses, nothing of it is written.
    match step(a, t1, TxnOp::Commit).await {
        NodeResponse::Conflict(m) => assert!(m.contains("after its snapshot"), "{m}"),
        other => panic!("the second committer of row 2: {other:?}"),
    }
    assert_eq!(get(c, 1).await, None);
    assert_eq!(get(c, 2).await, Some(row(2, "t2")));
    match step(a, t1, TxnOp::Get { key: key(1) }).await {
        NodeResponse::Failed(m) => assert!(m.contains("not open"), "{m}"),
        other => panic!("a step after the commit: {other:?}"),
    }

    // A plain write committed after the snapshot also wins.
    let t3 = begin(c, 3).await;
    assert_eq!(step(c, t3, TxnOp::Insert { row: row(3, "t3") }).await, NodeResponse::Done);
    let plain = NodeRequest::Insert { table: "t".into(), rows: vec![row(3, "plain")] };
    assert!(matches!(a.request(plain).await, NodeResponse::Written { .. }));
    assert!(matches!(step(b, t3, TxnOp::Commit).await, NodeResponse::Conflict(_)));
    assert_eq!(get(a, 3).await, Some(row(3, "plain")));

    // A key outside the shard is refused and the transaction goes on; a rollback writes nothing.
    let t4 = begin(a, 4).await;
    match step(a, t4, TxnOp::Insert { row: row(150, "x") }).await {
        NodeResponse::Failed(m) => assert!(m.contains("spanning shards"), "{m}"),
        other => panic!("a write outside the shard: {other:?}"),
    }
    assert_eq!(step(a, t4, TxnOp::Insert { row: row(4, "t4") }).await, NodeResponse::Done);
    assert_eq!(step(b, t4, TxnOp::Delete { key: key(2) }).await, NodeResponse::Done);
    assert!(matches!(step(a, t4, TxnOp::Commit).await, NodeResponse::Written { .. }));
    let t5 = begin(b, 5).await;
    assert_eq!(step(b, t5, TxnOp::Insert { row: row(5, "t5") }).await, NodeResponse::Done);
    assert_eq!(step(b, t5, TxnOp::Rollback).await, NodeResponse::Done);
    assert_eq!(get(a, 5).await, None);
    let bogus = TxnId { node: 2, epoch: 1, id: 77 };
    assert!(matches!(step(a, bogus, TxnOp::Commit).await, NodeResponse::Failed(m) if m.contains("not open")));

    // Every replica decided alike: with the shard's leader stopped, another replica leads and
    // holds the same rows.
    let want = [(1, None), (2, None), (3, Some(row(3, "plain"))), (4, Some(row(4, "t4"))), (5, None)];
    let leader = match a.request(NodeRequest::Status).await {
        NodeResponse::Status(s) => s.shards[0].leader.unwrap(),
        other => panic!("status: {other:?}"),
    };
    let at = nodes.iter().position(|n| n.as_ref().is_some_and(|n| n.id() == leader)).unwrap();
    nodes[at].take().unwrap().shutdown().await.unwrap();
    for n in nodes.iter().flatten() {
        for (k, row) in &want {
            assert_eq!(&get(n, *k).await, row, "key {k} through node {} after node {leader} stopped", n.id());
        }
    }
    for n in nodes.into_iter().flatten() {
        n.shutdown().await.unwrap();
    }
}
