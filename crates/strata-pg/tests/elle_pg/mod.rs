//! List-append histories through the server, checked by `adya` for snapshot isolation (the
//! in-process version, with the workload described, is `crates/strata/tests/it/elle.rs`).
//!
//! 8 connections (the `postgres` crate: extended protocol, prepared statements) run 5,000
//! transactions of 1 to 4 micro-operations over 12 hot keys, even keys in an LSM table and odd
//! ones in a lineage table, on a database that flushes and compacts every few kilobytes:
//! `BEGIN ISOLATION LEVEL REPEATABLE READ`; per append `SELECT` the list and `INSERT OR REPLACE` it with the value added, per
//! read `SELECT` it; `COMMIT`. SQLSTATE 40001 at any statement or at the commit is a `fail`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adya::{check, History, Opts, Valid, Workload};
use postgres::error::SqlState;
use postgres::{Client, NoTls};
use serde_json::{json, Value as Json};

use super::start_on;

const CLIENTS: usize = 8;
const TXNS: usize = 5_000;
const KEYS: i64 = 12;

fn table(k: i64) -> &'static str {
    if k % 2 == 0 {
        "lists"
    } else {
        "lineage_lists"
    }
}

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

/// Runs one transaction; `Ok(None)` when it lost a conflict (and was rolled back).
fn run(c: &mut Client, mops: &[Mop]) -> Result<Option<Vec<Mop>>, postgres::Error> {
    let attempt = |c: &mut Client| -> Result<Vec<Mop>, postgres::Error> {
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")?;
        let mut done = Vec::with_capacity(mops.len());
        for m in mops {
            let k = match m {
                Mop::Read(k, _) | Mop::Append(k, _) => *k,
            };
            let rows = c.query(&format!("SELECT v FROM {} WHERE k = $1", table(k)), &[&k])?;
            let mut list: Vec<i64> = match rows.first() {
                None => Vec::new(),
                Some(r) => {
                    let s: String = r.get(0);
                    s.split(',').filter(|x| !x.is_empty()).map(|x| x.parse().unwrap()).collect()
                }
            };
            match m {
                Mop::Read(..) => done.push(Mop::Read(k, Some(list))),
                Mop::Append(_, v) => {
                    list.push(*v);
                    let text = list.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
                    c.execute(&format!("INSERT OR REPLACE INTO {} VALUES ($1, $2)", table(k)), &[&k, &text])?;
                    done.push(m.clone());
                }
            }
        }
        c.batch_execute("COMMIT")?;
        Ok(done)
    };
    match attempt(c) {
        Ok(done) => Ok(Some(done)),
        Err(e) if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) => {
            // A failed COMMIT already ended the block; after a failed statement ROLLBACK ends it.
            c.batch_execute("ROLLBACK")?;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[test]
fn list_append_through_the_server_is_snapshot_isolated() {
    let dir = tempfile::tempdir().unwrap();
    let opts = strata::Options {
        memtable_size: 16 << 10,
        l0_compaction_trigger: 2,
        l1_max_bytes: 24 << 10,
        target_file_size: 8 << 10,
        block_size: 512,
        lineage_range: 64,
        lineage_merge_threshold: 16,
        lineage_checkpoint_bytes: 32 << 10,
        ..strata::Options::default()
    };
    let db = Arc::new(strata::Db::open(dir.path(), opts).unwrap());
    let server = start_on(strata_sql::SqlEngine::new(db.clone()).unwrap(), |_| {});
    let url = format!("host={} port={} user=strata", server.addr.ip(), server.addr.port());
    let mut setup = Client::connect(&url, NoTls).unwrap();
    setup.batch_execute("CREATE TABLE lists (k BIGINT PRIMARY KEY, v TEXT NOT NULL)").unwrap();
    setup
        .batch_execute("CREATE TABLE lineage_lists (k BIGINT PRIMARY KEY, v TEXT NOT NULL) WITH (engine = 'lineage')")
        .unwrap();

    let lines = Mutex::new(Vec::<Json>::new());
    let next_value = Mutex::new(HashMap::<i64, i64>::new());
    let start = Instant::now();
    let record = |process: usize, kind: &str, mops: &[Mop]| {
        let mut l = lines.lock().unwrap();
        let index = l.len();
        let value: Vec<Json> = mops.iter().map(mop_json).collect();
        let time = start.elapsed().as_nanos() as u64;
        l.push(json!({"index": index, "type": kind, "f": "txn", "process": process, "time": time, "value": value}));
    };
    let (mut oks, mut fails) = (0, 0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|process| {
                let (record, next_value, url) = (&record, &next_value, &url);
                s.spawn(move || {
                    let mut c = Client::connect(url, NoTls).unwrap();
                    // A small deterministic generator: no seed to print, the schedule varies anyway.
                    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ process as u64;
                    let mut next = move |n: u64| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x % n
                    };
                    let (mut oks, mut fails) = (0, 0);
                    for _ in 0..TXNS / CLIENTS {
                        let mops: Vec<Mop> = (0..1 + next(4))
                            .map(|_| {
                                let k = next(KEYS as u64) as i64;
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
                        record(process, "invoke", &mops);
                        match run(&mut c, &mops) {
                            Ok(Some(done)) => {
                                record(process, "ok", &done);
                                oks += 1;
                            }
                            Ok(None) => {
                                record(process, "fail", &mops);
                                fails += 1;
                            }
                            Err(e) => panic!("transaction failed: {e}"),
                        }
                    }
                    (oks, fails)
                })
            })
            .collect();
        for h in handles {
            let (o, f) = h.join().unwrap();
            oks += o;
            fails += f;
        }
    });
    let text = lines.into_inner().unwrap().iter().map(Json::to_string).collect::<Vec<_>>().join("\n");
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("elle");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("pg.json"), &text).unwrap();
    let stats = db.stats();
    println!("through the server: {oks} committed, {fails} lost a conflict; {} flushes", stats.flushes);
    assert!(oks > TXNS / 2 && fails > 0, "{oks} committed, {fails} lost");
    assert!(stats.flushes > 0, "no flush ran under the transactions");
    let h = History::from_json(&text).unwrap();
    for model in ["snapshot-isolation", "strong-snapshot-isolation"] {
        let opts = Opts { models: vec![model.into()], timeout: Duration::from_secs(60), ..Opts::default() };
        let report = check(&h, Workload::ListAppend, &opts);
        assert_eq!(report.valid, Valid::True, "{model}: {:?}", report.anomaly_types);
    }
}
