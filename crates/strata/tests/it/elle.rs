//! Transactions checked by a checker strata did not write: concurrent list-append histories in
//! Elle's format (elle-cli's JSON, one operation per line), checked by `adya` (a Rust
//! reimplementation of Elle's list-append checker) for snapshot isolation.
//!
//! 8 clients run 5,000 transactions of 1 to 4 micro-operations over 12 hot keys: `append k v`
//! reads key k's list in the transaction and writes it back with `v` (unique per key) added, `r
//! k` reads it. Keys live in an LSM table, a lineage table, or both (even keys in one, odd in the
//! other, so a transaction spans both engines), on options that flush and compact every few
//! kilobytes, so flushes, compactions and lineage merges run under the transactions. A commit
//! that loses a conflict is a `fail` (it certainly did not happen).
//!
//! The negative control runs the same workload with the commit's validation switched off: each
//! transaction reads at its snapshot and applies its writes as one atomic batch, but nothing
//! checks them against commits after its snapshot. The checker must flag it (lost updates), so a
//! checker that accepts everything cannot pass this file.
//!
//! The histories are left in `$CARGO_TARGET_TMPDIR/elle/*.json` for other checkers (elle-cli:
//! `--model list-append --consistency-models snapshot-isolation`).

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adya::{check, History, Opts, Valid, Workload};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value as Json};
use strata::vfs::OsFs;
use strata::{
    Column, ColumnType, Db, Engine, Error, Projection, Schema, Table, TableOptions, Transaction, TxnOptions, Value,
    WriteBatch, WriteOptions,
};

const CLIENTS: usize = 8;
const TXNS: usize = 5_000;
const KEYS: i64 = 12;
const W: WriteOptions = WriteOptions { sync: false };

/// Which tables hold the keys.
#[derive(Clone, Copy, Debug)]
enum Placement {
    Lsm,
    Lineage,
    Both,
}

#[derive(Clone, Debug)]
enum Mop {
    Read(i64, Option<Vec<i64>>),
    Append(i64, i64),
}

impl Mop {
    fn json(&self) -> Json {
        match self {
            Mop::Read(k, v) => json!(["r", k, v]),
            Mop::Append(k, v) => json!(["append", k, v]),
        }
    }
}

struct Store {
    db: Db,
    lsm: Table,
    lineage: Table,
    placement: Placement,
}

impl Store {
    fn open(dir: &std::path::Path, placement: Placement) -> Store {
        let db = Db::open(dir, common::tiny_options(Arc::new(OsFs))).unwrap();
        let schema = || {
            Schema::new(vec![Column::new("k", ColumnType::BigInt), Column::new("v", ColumnType::Text)], &["k"]).unwrap()
        };
        let lsm = db.create_table("lists", schema(), TableOptions::default()).unwrap();
        let lineage =
            db.create_table("lineage_lists", schema(), TableOptions::default().with_engine(Engine::Lineage)).unwrap();
        Store { db, lsm, lineage, placement }
    }

    fn table(&self, k: i64) -> &Table {
        match self.placement {
            Placement::Lsm => &self.lsm,
            Placement::Lineage => &self.lineage,
            Placement::Both if k % 2 == 0 => &self.lsm,
            Placement::Both => &self.lineage,
        }
    }

    fn read(&self, tx: &Transaction, k: i64) -> Vec<i64> {
        match tx.get(self.table(k), &[Value::BigInt(k)], &Projection::All).unwrap().as_deref() {
            None => Vec::new(),
            Some([_, Value::Text(s)]) if s.is_empty() => Vec::new(),
            Some([_, Value::Text(s)]) => s.split(',').map(|x| x.parse().unwrap()).collect(),
            other => panic!("list row of key {k}: {other:?}"),
        }
    }

    /// Runs one transaction; `Err` when its commit (or a write) lost a conflict.
    fn run(&self, mops: &[Mop], validate: bool) -> Result<Vec<Mop>, Error> {
        let mut tx = self.db.begin(&TxnOptions::default())?;
        let mut own: HashMap<i64, Vec<i64>> = HashMap::new();
        let mut batch = WriteBatch::new();
        let mut done = Vec::with_capacity(mops.len());
        for m in mops {
            let k = match m {
                Mop::Read(k, _) | Mop::Append(k, _) => *k,
            };
            // With validation the transaction's own reads show its writes; without, the control
            // keeps them itself (its writes go to a batch, not the transaction).
            let current = match own.get(&k) {
                Some(list) if !validate => list.clone(),
                _ => self.read(&tx, k),
            };
            match m {
                Mop::Read(..) => done.push(Mop::Read(k, Some(current))),
                Mop::Append(_, v) => {
                    let mut list = current;
                    list.push(*v);
                    let text = list.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
                    let row = [Value::BigInt(k), Value::Text(text)];
                    if validate {
                        tx.insert(self.table(k), &row)?;
                    } else {
                        batch.insert(self.table(k), &row)?;
                    }
                    own.insert(k, list);
                    done.push(m.clone());
                }
            }
        }
        if validate {
            tx.commit(&W)?;
        } else {
            drop(tx);
            self.db.write(batch, &W)?;
        }
        Ok(done)
    }
}

/// Runs the workload and returns its history as elle-cli JSON lines.
fn history(store: &Store, seed: u64, validate: bool) -> (String, usize, usize) {
    let lines = Mutex::new(Vec::<Json>::new());
    let next_value = Mutex::new(HashMap::<i64, i64>::new());
    let start = Instant::now();
    let (mut oks, mut fails) = (0, 0);
    let record = |process: usize, kind: &str, mops: &[Mop]| {
        let mut l = lines.lock().unwrap();
        let index = l.len();
        let value: Vec<Json> = mops.iter().map(Mop::json).collect();
        let time = start.elapsed().as_nanos() as u64;
        l.push(json!({"index": index, "type": kind, "f": "txn", "process": process, "time": time, "value": value}));
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|process| {
                let (record, next_value) = (&record, &next_value);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed * 1000 + process as u64);
                    let (mut oks, mut fails) = (0, 0);
                    for _ in 0..TXNS / CLIENTS {
                        let n = rng.gen_range(1..=4);
                        let mops: Vec<Mop> = (0..n)
                            .map(|_| {
                                let k = rng.gen_range(0..KEYS);
                                if rng.gen_bool(0.5) {
                                    let mut next = next_value.lock().unwrap();
                                    let v = next.entry(k).or_insert(0);
                                    *v += 1;
                                    Mop::Append(k, *v)
                                } else {
                                    Mop::Read(k, None)
                                }
                            })
                            .collect();
                        record(process, "invoke", &mops);
                        match store.run(&mops, validate) {
                            Ok(done) => {
                                record(process, "ok", &done);
                                oks += 1;
                            }
                            Err(e) if e.is_retryable() => {
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
    (text, oks, fails)
}

fn checked(text: &str, model: &str) -> adya::Report {
    let h = History::from_json(text).unwrap();
    let opts = Opts { models: vec![model.into()], timeout: Duration::from_secs(60), ..Opts::default() };
    check(&h, Workload::ListAppend, &opts)
}

fn save(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("elle");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, text).unwrap();
    path
}

fn run_checked(placement: Placement) {
    for seed in common::seeds(&[1]) {
        common::with_seed(seed, |seed| {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(dir.path(), placement);
            let (text, oks, fails) = history(&store, seed, true);
            let path = save(&format!("{placement:?}-{seed}").to_lowercase(), &text);
            println!("{placement:?}: {oks} committed, {fails} lost a conflict; history in {}", path.display());
            assert!(oks > TXNS / 2, "only {oks} of {TXNS} transactions committed");
            assert!(fails > 0, "no transaction conflicted: the keys are not hot enough to test anything");
            let stats = store.db.stats();
            let merges: u64 = stats.tables.iter().filter_map(|t| t.lineage.as_ref()).map(|l| l.merges).sum();
            println!(
                "{placement:?}: {} flushes, {} compactions, {merges} lineage merges",
                stats.flushes, stats.compactions
            );
            match placement {
                Placement::Lineage => assert!(merges > 0, "no lineage merge ran under the transactions"),
                _ => assert!(stats.flushes > 0 && stats.compactions > 0, "no flush or compaction ran"),
            }
            for model in ["snapshot-isolation", "strong-snapshot-isolation"] {
                let report = checked(&text, model);
                assert_eq!(
                    report.valid,
                    Valid::True,
                    "{model}: {:?}\n{}",
                    report.anomaly_types,
                    serde_json::to_string_pretty(&report.anomalies).unwrap_or_default()
                );
            }
        });
    }
}

#[test]
fn list_append_on_an_lsm_table_is_snapshot_isolated() {
    run_checked(Placement::Lsm);
}

#[test]
fn list_append_on_a_lineage_table_is_snapshot_isolated() {
    run_checked(Placement::Lineage);
}

#[test]
fn list_append_across_both_engines_in_one_transaction_is_snapshot_isolated() {
    run_checked(Placement::Both);
}

/// The negative control: without validation the same workload loses updates, and the checker
/// says so.
#[test]
fn without_validation_the_checker_flags_lost_updates() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Placement::Both);
    let (text, _, fails) = history(&store, 7, false);
    save("control-no-validation", &text);
    assert_eq!(fails, 0, "nothing validates, so nothing conflicts");
    let report = checked(&text, "snapshot-isolation");
    assert_eq!(report.valid, Valid::False, "the checker accepted a history written without validation");
    assert!(
        report.anomaly_types.iter().any(|a| a == "lost-update" || a.starts_with("G0") || a.starts_with("G-single")),
        "{:?}",
        report.anomaly_types
    );
}
