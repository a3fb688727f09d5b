//! Three `strata node` processes on 127.0.0.1, a table in 3 shards × 3 replicas, list-append
//! transactions (each in one shard) through every node while the process leading a shard is
//! killed (SIGKILL): the shard elects a new leader and commits again within a few election
//! timeouts, and the history, with final reads through every node, is snapshot isolated by the
//! `adya` checker, so no acknowledged append is lost. The killed node, started again on its
//! directory and address, catches up and serves the same rows; a distributed query through it
//! survives the kill of another node running one of its scan tasks (it runs again at the same
//! read point) and answers what the final reads saw; `strata cluster insert|get` write and read
//! through it; a fourth node joins (`strata cluster add-node`) and takes the killed node's
//! replica of a shard (`strata cluster move-shard`), and serves its rows. Every process is started here and killed by pid at the end (or
//! when the test fails); every loop and wait is bounded.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adya::{check, History, Opts, Valid, Workload};
use serde_json::{json, Value as Json};
use strata::{Column, ColumnType, Schema, Value};
use strata_cluster::net::call;
use strata_cluster::types::{to_wire, ClusterStatus, NodeRequest, NodeResponse, TxnId, TxnOp, WireValue};

const TTL: Duration = Duration::from_secs(15);
/// Concurrent clients.
const CLIENTS: usize = 6;
/// Transactions tried in all.
const TXNS: usize = 420;
/// Hot keys per shard: shard s holds keys s*1000 .. s*1000 + KEYS.
const KEYS: i64 = 4;
/// How long each shard partition of a query waits before it reads (the nodes' testing knob),
/// so a node can be killed while a query runs.
const SCAN_DELAY_MS: u64 = 1500;

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
        .env("STRATA_TEST_SCAN_DELAY_MS", SCAN_DELAY_MS.to_string())
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

/// A micro-operation: a read of a key's list (what it read, once run) or an append to it.
#[derive(Clone, Debug)]
enum Mop {
    Read(i64, Option<Vec<i64>>),
    Append(i64, i64),
}

fn mop_json(m: &Mop) -> Json {
    match m {
        Mop::Read(k, v) => json!(["r", k, v]),
        Mop::Append(k, v) => json!(["append", k, v]),
    }
}

/// How a transaction ended: committed (with what it read), lost (nothing written), or
/// unknown (its commit got no answer).
enum Outcome {
    Ok(Vec<Mop>),
    Fail,
    Info,
}

fn list_of(answer: NodeResponse) -> Result<Vec<i64>, NodeResponse> {
    match answer {
        NodeResponse::Row(None) => Ok(Vec::new()),
        NodeResponse::Row(Some(r)) => match r.get(1) {
            Some(WireValue::Text(s)) => {
                Ok(s.split(',').filter(|x| !x.is_empty()).map(|x| x.parse().unwrap()).collect())
            }
            other => panic!("a list row holds {other:?}"),
        },
        other => Err(other),
    }
}

/// Runs `mops` (all in one shard) as one transaction through the node at `addr`.
async fn run(addr: &str, mops: &[Mop]) -> Outcome {
    let first = match mops[0] {
        Mop::Read(k, _) | Mop::Append(k, _) => k,
    };
    let txn: TxnId =
        match ask(addr, NodeRequest::Begin { table: "t".into(), key: to_wire(&[Value::BigInt(first)]) }).await {
            NodeResponse::Begun(id) => id,
            _ => return Outcome::Fail,
        };
    let step = |op: TxnOp| ask(addr, NodeRequest::Txn { txn, op });
    let mut done = Vec::with_capacity(mops.len());
    for m in mops {
        let k = match m {
            Mop::Read(k, _) | Mop::Append(k, _) => *k,
        };
        let Ok(mut list) = list_of(step(TxnOp::Get { key: to_wire(&[Value::BigInt(k)]) }).await) else {
            step(TxnOp::Rollback).await;
            return Outcome::Fail;
        };
        match m {
            Mop::Read(..) => done.push(Mop::Read(k, Some(list))),
            Mop::Append(_, v) => {
                list.push(*v);
                let text = list.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
                let row = to_wire(&[Value::BigInt(k), Value::Text(text)]);
                if step(TxnOp::Insert { row }).await != NodeResponse::Done {
                    step(TxnOp::Rollback).await;
                    return Outcome::Fail;
                }
                done.push(m.clone());
            }
        }
    }
    match step(TxnOp::Commit).await {
        NodeResponse::Written { .. } => Outcome::Ok(done),
        NodeResponse::Conflict(_) => Outcome::Fail,
        _ => Outcome::Info,
    }
}

/// The history in elle's JSON lines.
struct Recorder {
    lines: Mutex<Vec<Json>>,
    start: Instant,
}

impl Recorder {
    fn record(&self, process: usize, kind: &str, mops: &[Mop]) {
        let mut l = self.lines.lock().unwrap();
        let index = l.len();
        let value: Vec<Json> = mops.iter().map(mop_json).collect();
        let time = self.start.elapsed().as_nanos() as u64;
        l.push(json!({"index": index, "type": kind, "f": "txn", "process": process, "time": time, "value": value}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_shard_leader_during_transactions_loses_no_acknowledged_write() {
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
    // Every shard takes a transaction before the clients start.
    for shard in 0..3i64 {
        let t0 = Instant::now();
        while !matches!(run(&addrs[&1], &[Mop::Read(shard * 1000, None)]).await, Outcome::Ok(_)) {
            assert!(t0.elapsed() < Duration::from_secs(15), "shard {shard} takes no transaction");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // Clients run transactions of 1 to 3 micro-operations over one shard's hot keys, through
    // the live nodes in turn. Each commit acknowledged is kept with its shard and time.
    let live: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(addrs.values().cloned().collect()));
    let recorder = Arc::new(Recorder { lines: Mutex::new(Vec::new()), start: Instant::now() });
    let committed: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let next_value = Arc::new(Mutex::new(BTreeMap::<i64, i64>::new()));
    let tried = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (live, recorder, committed, next_value, tried) =
                (live.clone(), recorder.clone(), committed.clone(), next_value.clone(), tried.clone());
            tokio::spawn(async move {
                // A small deterministic generator per client; the schedule varies anyway.
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (client as u64 + 1);
                let mut next = move |n: u64| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % n
                };
                // A client whose commit got no answer goes on as a new process, as elle wants.
                let mut process = client;
                let deadline = Instant::now() + Duration::from_secs(120);
                while tried.fetch_add(1, Ordering::SeqCst) < TXNS && Instant::now() < deadline {
                    let shard = next(3) as i64;
                    let mops: Vec<Mop> = (0..1 + next(3))
                        .map(|_| {
                            let k = shard * 1000 + next(KEYS as u64) as i64;
                            if next(2) == 0 {
                                let mut values = next_value.lock().unwrap();
                                let v = values.entry(k).or_insert(0);
                                *v += 1;
                                Mop::Append(k, *v)
                            } else {
                                Mop::Read(k, None)
                            }
                        })
                        .collect();
                    let addr = {
                        let l = live.lock().unwrap();
                        l[(client + next(7) as usize) % l.len()].clone()
                    };
                    recorder.record(process, "invoke", &mops);
                    match run(&addr, &mops).await {
                        Outcome::Ok(done) => {
                            recorder.record(process, "ok", &done);
                            committed.lock().unwrap().push((shard, Instant::now()));
                        }
                        Outcome::Fail => recorder.record(process, "fail", &mops),
                        Outcome::Info => {
                            recorder.record(process, "info", &mops);
                            process += CLIENTS;
                        }
                    }
                }
            })
        })
        .collect();
    let t0 = Instant::now();
    while committed.lock().unwrap().len() < 120 {
        assert!(t0.elapsed() < Duration::from_secs(60), "the clients are stuck before the kill");
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
    for c in clients {
        c.await.unwrap();
    }
    let committed: Vec<(i64, Instant)> = std::mem::take(&mut *committed.lock().unwrap());
    // Every shard committed after the kill, the first one within a few election timeouts.
    for shard in 0..3 {
        let first = committed.iter().filter(|(s, at)| *s == shard && *at > killed_at).map(|(_, at)| *at).min();
        let first = first.unwrap_or_else(|| panic!("shard {shard} committed nothing after node {victim} was killed"));
        assert!(first - killed_at < Duration::from_secs(5), "shard {shard} resumed after {:?}", first - killed_at);
        println!("shard {shard} committed again {:?} after node {victim} was killed", first - killed_at);
    }
    assert!(committed.len() >= TXNS / 3, "only {} of {TXNS} transactions committed", committed.len());

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
    // Final reads of every key, a transaction per shard through every node, the restarted one
    // too: they end the history, so an acknowledged append missing from them is an anomaly.
    let mut final_rows = BTreeMap::<i64, String>::new();
    for (i, addr) in addrs.values().enumerate() {
        for shard in 0..3i64 {
            let mops: Vec<Mop> = (0..KEYS).map(|k| Mop::Read(shard * 1000 + k, None)).collect();
            let process = 1000 + i * 3 + shard as usize;
            recorder.record(process, "invoke", &mops);
            let t0 = Instant::now();
            let done = loop {
                match run(addr, &mops).await {
                    Outcome::Ok(done) => break done,
                    _ => assert!(t0.elapsed() < Duration::from_secs(15), "final reads of shard {shard} via {addr}"),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            recorder.record(process, "ok", &done);
            for m in done {
                if let Mop::Read(k, Some(list)) = m {
                    if !list.is_empty() {
                        let text = list.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
                        final_rows.insert(k, text);
                    }
                }
            }
        }
    }
    let lines: Vec<Json> = std::mem::take(&mut *recorder.lines.lock().unwrap());
    let text = lines.iter().map(Json::to_string).collect::<Vec<_>>().join("\n");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("elle");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("cluster-kill.json"), &text).unwrap();
    let kinds = |kind: &str| lines.iter().filter(|l| l["type"] == kind).count();
    println!(
        "{} committed, {} lost, {} unknown; node {victim} killed; history in {}",
        kinds("ok"),
        kinds("fail"),
        kinds("info"),
        out.join("cluster-kill.json").display()
    );
    let h = History::from_json(&text).unwrap();
    let opts = Opts { models: vec!["snapshot-isolation".into()], timeout: Duration::from_secs(60), ..Opts::default() };
    let report = check(&h, Workload::ListAppend, &opts);
    assert_eq!(report.valid, Valid::True, "snapshot isolation: {:?}", report.anomaly_types);

    // A distributed query through the restarted node while the third node, which runs one of
    // its scan tasks, is killed (every shard partition waits SCAN_DELAY_MS before it reads):
    // the query runs again at the same read point on the surviving replicas and answers what
    // the final reads saw.
    let third = *addrs.keys().find(|id| **id != victim && *id != other).unwrap();
    let coordinator = addrs[&victim].clone();
    let query = tokio::spawn(async move {
        let t0 = Instant::now();
        let answer = ask(&coordinator, NodeRequest::Sql { query: "SELECT k, v FROM t ORDER BY k".into() }).await;
        (answer, t0.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(SCAN_DELAY_MS / 3)).await;
    {
        let (child, _) = nodes.procs.get_mut(&third).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let (answer, took) = query.await.unwrap();
    let (rows, runs) = match answer {
        NodeResponse::Rows { ipc, runs, .. } => {
            let batches = strata_cluster::sql::from_ipc(&ipc).unwrap();
            (batches.iter().flat_map(strata::scan::batch_rows).collect::<Vec<_>>(), runs)
        }
        other => panic!("the query during the kill of node {third}: {other:?}"),
    };
    let want: Vec<Vec<Value>> =
        final_rows.iter().map(|(k, v)| vec![Value::BigInt(*k), Value::Text(v.clone())]).collect();
    assert_eq!(rows, want, "the query during the kill of node {third}");
    assert_eq!(runs, 2, "the query was not run again after node {third} was killed (it took {took:?})");
    println!("the query survived the kill of node {third}: {} rows, {runs} runs, {took:?}", rows.len());

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

    // A fourth node joins, and the third shard's replica on the killed node moves to it.
    let (child, addr4) = start(dir.path(), 4, "127.0.0.1:0");
    nodes.procs.insert(4, (child, addr4.clone()));
    let (ok, out, err) = cli(&["cluster", "--node", &addrs[&victim], "add-node", "--peer", &format!("4={addr4}")]);
    assert!(ok && out.trim() == "ok", "{out}{err}");
    let shard = status(&addrs[&victim]).await.shards[2].info.id.to_string();
    let (ok, out, err) =
        cli(&["cluster", "--node", &addrs[other], "move-shard", &shard, "--from", &third.to_string(), "--to", "4"]);
    assert!(ok && out.trim() == "ok", "{out}{err}");
    let (ok, out, err) = cli(&["cluster", "--node", &addr4, "get", "t", "2500"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), r#"{"k":2500,"v":"by the CLI"}"#);
    let s = status(&addr4).await;
    assert!(s.shards[2].info.replicas.contains(&4) && !s.shards[2].info.replicas.contains(&third), "{s:?}");
    let (ok, out, err) = cli(&["cluster", "--node", &addr4, "sql", "SELECT count(*) AS n FROM t WHERE k >= 2000"]);
    assert!(ok, "{err}");
    let want = final_rows.keys().filter(|k| **k >= 2000).count() + 1;
    assert!(out.contains(&format!("| {want} ")), "{out}");
}
