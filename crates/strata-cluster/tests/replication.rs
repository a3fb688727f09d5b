//! Three replicas of one group on 127.0.0.1, each behind its own server, in one process: they
//! agree on every row and every sequence number, elect a new leader when theirs stops, take
//! writes again, and a replica started again from its directory catches up.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use strata::{Column, ColumnType, KeyRange, Projection, ReadOptions, Schema, Value};
use strata_cluster::group::applied;
use strata_cluster::net::Proposed;
use strata_cluster::{Command, Hosted, Replica, ReplicaOptions, Server};

const GROUP: u64 = 7;

struct Node {
    id: u64,
    server: Server,
    replica: Option<Replica>,
}

async fn start(dir: &Path, id: u64, listen: &str) -> Node {
    let hosted = Hosted::default();
    let server = Server::start(listen, hosted.clone()).await.unwrap();
    let replica = Replica::start(&dir.join(format!("node{id}")), GROUP, id, &options(), &hosted).await.unwrap();
    Node { id, server, replica: Some(replica) }
}

fn options() -> ReplicaOptions {
    let db = strata::Options { memtable_size: 64 << 10, ..strata::Options::default() };
    ReplicaOptions { db, election_timeout_ms: (300, 600), heartbeat_ms: 50, ..ReplicaOptions::default() }
}

fn replica(n: &Node) -> &Replica {
    n.replica.as_ref().unwrap()
}

/// The node whose replica leads, once the live ones agree on one (bounded wait).
async fn leader(nodes: &[Node], within: Duration) -> usize {
    let start = Instant::now();
    while start.elapsed() < within {
        let live: Vec<&Node> = nodes.iter().filter(|n| n.replica.is_some()).collect();
        let seen: Vec<Option<u64>> = live.iter().map(|n| replica(n).leader()).collect();
        if let Some(Some(l)) = seen.first() {
            if seen.iter().all(|s| *s == Some(*l)) {
                if let Some(i) = nodes.iter().position(|n| n.id == *l && n.replica.is_some()) {
                    return i;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no leader within {within:?}");
}

fn schema() -> Vec<u8> {
    Schema::new(vec![Column::new("k", ColumnType::BigInt), Column::new("v", ColumnType::Text)], &["k"])
        .unwrap()
        .to_bytes()
}

fn rows(from: i64, n: i64) -> Vec<Vec<Value>> {
    (from..from + n).map(|k| vec![Value::BigInt(k), Value::Text(format!("v{k}"))]).collect()
}

/// Every live replica's rows of `t` and newest sequence number, once all have applied the
/// leader's whole log (bounded wait).
async fn converged(nodes: &[Node], lead: usize) -> Vec<(Vec<Vec<Value>>, u64)> {
    // (The leader's metrics may show an entry applied after its writer was answered.)
    let last = replica(&nodes[lead]).raft().metrics().borrow().last_log_index.unwrap_or(0);
    let mut out = Vec::new();
    for n in nodes.iter().filter(|n| n.replica.is_some()) {
        let r = replica(n);
        r.wait_applied(last, Duration::from_secs(10)).await.unwrap_or_else(|e| panic!("node {}: {e}", n.id));
        let t = r.db().table("t").unwrap();
        let got: Vec<Vec<Value>> =
            t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap().map(Result::unwrap).collect();
        out.push((got, r.db().snapshot().seq()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_agree_elect_a_new_leader_and_catch_up_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(start(dir.path(), id, "127.0.0.1:0").await);
    }
    let members: BTreeMap<u64, String> = nodes.iter().map(|n| (n.id, n.server.addr().to_string())).collect();
    replica(&nodes[0]).initialize(&members).await.unwrap();
    let lead = leader(&nodes, Duration::from_secs(10)).await;
    let create = Command::CreateTable { name: "t".into(), schema: schema(), layout: None, lineage: false };
    applied(replica(&nodes[lead]).propose(create).await.unwrap()).unwrap();
    // A follower is not the leader and names it.
    let follower = (lead + 1) % 3;
    match replica(&nodes[follower]).insert("t", &rows(0, 1)).await.unwrap() {
        Proposed::NotLeader(Some((id, addr))) => {
            assert_eq!((id, addr), (nodes[lead].id, nodes[lead].server.addr().to_string()));
        }
        other => panic!("a follower took a write: {other:?}"),
    }
    for i in 0..20 {
        applied(replica(&nodes[lead]).insert("t", &rows(i * 10, 10)).await.unwrap()).unwrap();
    }
    let states = converged(&nodes, lead).await;
    assert_eq!(states[0].0.len(), 200);
    for (i, s) in states.iter().enumerate() {
        assert_eq!(s.1, states[0].1, "replica {i}'s newest sequence number");
        assert!(s.0 == states[0].0, "replica {i}'s rows differ");
    }

    // The leader stops: the others elect one of themselves and take writes again.
    let stopped = lead;
    let addr = nodes[stopped].server.addr().to_string();
    nodes[stopped].server.stop();
    nodes[stopped].replica.take().unwrap().shutdown().await.unwrap();
    let t0 = Instant::now();
    let lead = leader(&nodes, Duration::from_secs(10)).await;
    let took = t0.elapsed();
    assert_ne!(lead, stopped);
    assert!(took < Duration::from_secs(5), "a new leader took {took:?}");
    for i in 20..30 {
        applied(replica(&nodes[lead]).insert("t", &rows(i * 10, 10)).await.unwrap()).unwrap();
    }

    // The stopped node starts again from its directory, on its address, and catches up.
    let id = nodes[stopped].id;
    nodes[stopped] = start(dir.path(), id, &addr).await;
    let states = converged(&nodes, lead).await;
    assert_eq!(states.len(), 3);
    assert_eq!(states[0].0.len(), 300);
    assert!(states.iter().all(|s| s == &states[0]), "the replicas differ after the restart");
    for n in nodes {
        if let Some(r) = n.replica {
            r.shutdown().await.unwrap();
        }
    }
}
