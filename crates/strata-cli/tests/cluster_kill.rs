//! Three `strata node` processes on 127.0.0.1, a table in 3 shards × 3 replicas, writes through
//! every node while the process leading a shard is killed (SIGKILL): the shard elects a new
//! leader, writes to it resume within a few election timeouts, every acknowledged write is read
//! back through every surviving node, and the killed node, started again on its directory and
//! address, catches up and serves the same rows; `strata cluster insert|get` write and read
//! through it. Every process is started here and killed by pid at the end (or when the test
//! fails); every wait is bounded.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use strata::{Column, ColumnType, Schema, Value};
use strata_cluster::net::call;
use strata_cluster::types::{to_wire, ClusterStatus, NodeRequest, NodeResponse, WireValue};

const TTL: Duration = Duration::from_secs(15);

/// A write acknowledged: its key, its row, when the answer came.
type Acked = (i64, Vec<WireValue>, Instant);

/// The node processes, killed when dropped.
struct Nodes {
    procs: BTreeMap<u64, (Child, String)>,
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for (child, _) in self.procs.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts node `id` on `listen` and returns it with the address it printed.
fn start(dir: &Path, id: u64, listen: &str) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("--db")
        .arg(dir.join(format!("node{id}")))
        .args(["node", "--id", &id.to_string(), "--listen", listen])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    assert!(line.starts_with(&format!("node {id} listening on ")), "node {id} printed {line:?}");
    (child, addr)
}

async fn ask(addr: &str, req: NodeRequest) -> NodeResponse {
    call(addr, req, TTL).await.unwrap_or_else(|e| NodeResponse::Failed(e.to_string()))
}

async fn status(addr: &str) -> ClusterStatus {
    match ask(addr, NodeRequest::Status).await {
        NodeResponse::Status(s) => s,
        other => panic!("status of {addr}: {other:?}"),
    }
}

fn row(k: i64, round: i64) -> Vec<WireValue> {
    to_wire(&[Value::BigInt(k), Value::Text(format!("v{k}-{round}"))])
}

/// Reads every acknowledged row through the node at `addr`.
async fn check(addr: &str, acked: &BTreeMap<i64, Vec<WireValue>>) {
    for (k, want) in acked {
        let req = NodeRequest::Get { table: "t".into(), key: to_wire(&[Value::BigInt(*k)]) };
        match ask(addr, req).await {
            NodeResponse::Row(Some(got)) => assert_eq!(&got, want, "key {k} through {addr}"),
            other => panic!("acknowledged key {k} through {addr}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_shard_leader_during_writes_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = Nodes { procs: BTreeMap::new() };
    for id in 1..=3 {
        nodes.procs.insert(id, start(dir.path(), id, "127.0.0.1:0"));
    }
    let addrs: BTreeMap<u64, String> = nodes.procs.iter().map(|(id, (_, a))| (*id, a.clone())).collect();
    let init = NodeRequest::Initialize { peers: addrs.clone().into_iter().collect() };
    assert_eq!(ask(&addrs[&1], init).await, NodeResponse::Done);
    let schema =
        Schema::new(vec![Column::new("k", ColumnType::BigInt), Column::new("v", ColumnType::Text)], &["k"]).unwrap();
    let create = NodeRequest::CreateTable {
        name: "t".into(),
        schema: schema.to_bytes(),
        splits: vec![WireValue::BigInt(1000), WireValue::BigInt(2000)],
        replicas: 3,
    };
    let start_at = Instant::now();
    loop {
        match ask(&addrs[&2], create.clone()).await {
            NodeResponse::Done => break,
            other => assert!(start_at.elapsed() < Duration::from_secs(15), "create: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A writer cycles through the shards and the live nodes; what it is told is written, and
    // when, is kept.
    let live: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(addrs.values().cloned().collect()));
    let acked: Arc<Mutex<Vec<Acked>>> = Arc::default();
    let writer = {
        let (live, acked) = (live.clone(), acked.clone());
        tokio::spawn(async move {
            for i in 0..600i64 {
                let k = (i % 3) * 1000 + i / 3;
                let addr = {
                    let l = live.lock().unwrap();
                    l[i as usize % l.len()].clone()
                };
                let r = row(k, 0);
                if let NodeResponse::Written { .. } =
                    ask(&addr, NodeRequest::Insert { table: "t".into(), rows: vec![r.clone()] }).await
                {
                    acked.lock().unwrap().push((k, r, Instant::now()));
                }
            }
        })
    };
    let t0 = Instant::now();
    while acked.lock().unwrap().len() < 150 {
        assert!(t0.elapsed() < Duration::from_secs(60), "the writer is stuck before the kill");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Kill the process leading the first shard.
    let s = status(&addrs[&1]).await;
    let victim = s.shards[0].leader.unwrap();
    live.lock().unwrap().retain(|a| a != &addrs[&victim]);
    let killed_at = Instant::now();
    {
        let (child, _) = nodes.procs.get_mut(&victim).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
    writer.await.unwrap();
    let acked: Vec<Acked> = std::mem::take(&mut *acked.lock().unwrap());
    // Every shard took writes after the kill, the first one within a few election timeouts.
    for shard in 0..3 {
        let first = acked.iter().filter(|(k, _, at)| k / 1000 == shard && *at > killed_at).map(|(_, _, at)| *at).min();
        let first = first.unwrap_or_else(|| panic!("shard {shard} took no write after node {victim} was killed"));
        assert!(first - killed_at < Duration::from_secs(5), "shard {shard} resumed after {:?}", first - killed_at);
    }
    assert!(acked.len() >= 500, "only {} of 600 writes acknowledged", acked.len());
    let acked: BTreeMap<i64, Vec<WireValue>> = acked.into_iter().map(|(k, r, _)| (k, r)).collect();
    for (id, addr) in &addrs {
        if *id != victim {
            check(addr, &acked).await;
        }
    }

    // The killed node starts again on its directory and address and catches up.
    let restarted = start(dir.path(), victim, &addrs[&victim]);
    assert_eq!(restarted.1, addrs[&victim]);
    nodes.procs.insert(victim, restarted);
    let other = addrs.keys().find(|id| **id != victim).unwrap();
    let t0 = Instant::now();
    loop {
        let (mine, theirs) = (status(&addrs[&victim]).await, status(&addrs[other]).await);
        let caught_up = mine.shards.len() == 3
            && mine.shards.iter().zip(&theirs.shards).all(|(a, b)| a.applied.is_some() && a.applied >= b.applied);
        if caught_up {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "node {victim} did not catch up: {mine:?} vs {theirs:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    check(&addrs[&victim], &acked).await;

    // The same through `strata cluster`: a row written and read back through two nodes, and a
    // write spanning shards refused with a non-zero exit.
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_strata")).args(args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) =
        cli(&["cluster", "--node", &addrs[&victim], "insert", "t", "--row", r#"{"k": 2500, "v": "by the CLI"}"#]);
    assert!(ok && out.starts_with("ok"), "{out}{err}");
    let (ok, out, err) = cli(&["cluster", "--node", &addrs[other], "get", "t", "2500"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), r#"{"k":2500,"v":"by the CLI"}"#);
    let spanning = [
        "cluster",
        "--node",
        &addrs[other],
        "insert",
        "t",
        "--row",
        r#"{"k": 1, "v": "a"}"#,
        "--row",
        r#"{"k": 2501, "v": "b"}"#,
    ];
    let (ok, _, err) = cli(&spanning);
    assert!(!ok && err.contains("spanning shards"), "{err}");
}
