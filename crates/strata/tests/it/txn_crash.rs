//! Transactions and crashes: bank transfers between accounts in an LSM table and a lineage
//! table, each transaction also inserting a marker row that names its transfer, run by several
//! threads with synced commits on the fault-injecting filesystem; then power is lost (unsynced
//! bytes vanish, tails may survive torn), sometimes after injected torn or failed log writes,
//! full disks or failed syncs, and the database is reopened. After every crash:
//!
//! - every acknowledged commit's marker is there;
//! - every account's balance is its opening balance plus exactly the transfers whose markers
//!   survived, so each transaction is there whole or not at all, and the total is conserved;
//! - the same holds read as of past times within the history window (never part of a commit).

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::common::{seeds, tiny_options, with_seed};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata::vfs::{FaultFs, FaultKind};
use strata::{
    AsOf, Column, ColumnType, Db, Engine, KeyRange, Options, Projection, ReadOptions, Schema, Snapshot, Table,
    TableOptions, TxnOptions, Value, WriteOptions,
};

const ACCOUNTS: i64 = 8;
const OPENING: i64 = 1_000;
const WORKERS: u64 = 3;

fn accounts_schema() -> Schema {
    Schema::new(vec![Column::new("id", ColumnType::BigInt), Column::new("balance", ColumnType::BigInt)], &["id"])
        .unwrap()
}

fn marks_schema() -> Schema {
    let cols = ["id", "from_table", "from_id", "to_table", "to_id", "amount"]
        .into_iter()
        .map(|c| Column::new(c, ColumnType::BigInt))
        .collect();
    Schema::new(cols, &["id"]).unwrap()
}

fn options(fs: &FaultFs) -> Options {
    Options { history_retention: Some(Duration::from_secs(3600)), ..tiny_options(Arc::new(fs.clone())) }
}

/// The two account tables (0: LSM, 1: lineage) and the markers.
fn tables(db: &Db) -> ([Table; 2], Table) {
    ([db.table("lsm").unwrap(), db.table("lineage").unwrap()], db.table("marks").unwrap())
}

fn setup(fs: &FaultFs, dir: &Path) {
    let db = Db::open(dir, options(fs)).unwrap();
    let lsm = db.create_table("lsm", accounts_schema(), TableOptions::default()).unwrap();
    let lin = db.create_table("lineage", accounts_schema(), TableOptions::engine(Engine::Lineage)).unwrap();
    db.create_table("marks", marks_schema(), TableOptions::default()).unwrap();
    let mut b = strata::WriteBatch::new();
    for id in 0..ACCOUNTS {
        b.insert(&lsm, &[Value::BigInt(id), Value::BigInt(OPENING)]).unwrap();
        b.insert(&lin, &[Value::BigInt(id), Value::BigInt(OPENING)]).unwrap();
    }
    db.write(b, &WriteOptions { sync: true }).unwrap();
    db.close().unwrap();
}

fn int(v: &Value) -> i64 {
    match v {
        Value::BigInt(x) => *x,
        other => panic!("not a BIGINT: {other:?}"),
    }
}

/// One transfer as a transaction; `Ok(false)` when it lost a conflict.
fn transfer(db: &Db, accts: &[Table; 2], marks: &Table, mark: i64, rng: &mut StdRng) -> strata::Result<bool> {
    let (ft, fi, ti) = (rng.gen_range(0..2usize), rng.gen_range(0..ACCOUNTS), rng.gen_range(0..ACCOUNTS));
    // Two different accounts; half the transfers cross engines.
    let tt = if fi == ti || rng.gen_bool(0.5) { 1 - ft } else { ft };
    let amount = rng.gen_range(1..50);
    let run = || -> strata::Result<()> {
        let mut tx = db.begin(&TxnOptions::default())?;
        let balance = |tx: &strata::Transaction, t: &Table, id: i64| -> strata::Result<i64> {
            let row = tx.get(t, &[Value::BigInt(id)], &Projection::All)?;
            Ok(int(&row.expect("accounts are never deleted")[1]))
        };
        let from = balance(&tx, &accts[ft], fi)?;
        let to = balance(&tx, &accts[tt], ti)?;
        tx.update(&accts[ft], &[Value::BigInt(fi)], &[("balance", Value::BigInt(from - amount))])?;
        tx.update(&accts[tt], &[Value::BigInt(ti)], &[("balance", Value::BigInt(to + amount))])?;
        let row = [mark, ft as i64, fi, tt as i64, ti, amount].map(Value::BigInt);
        tx.insert(marks, &row)?;
        tx.commit(&WriteOptions { sync: true })
    };
    match run() {
        Ok(()) => Ok(true),
        Err(e) if e.is_retryable() => Ok(false),
        Err(e) => Err(e),
    }
}

/// Checks the state `ro` reads against the markers it reads; returns the markers.
fn check_state(accts: &[Table; 2], marks: &Table, ro: &ReadOptions<'_>, what: &str) -> HashSet<i64> {
    let mut expected = [[OPENING; ACCOUNTS as usize]; 2];
    let mut seen = HashSet::new();
    for row in marks.scan(&KeyRange::all(), &Projection::All, ro).unwrap() {
        let r: Vec<i64> = row.unwrap().iter().map(int).collect();
        seen.insert(r[0]);
        expected[r[1] as usize][r[2] as usize] -= r[5];
        expected[r[3] as usize][r[4] as usize] += r[5];
    }
    for (t, table) in accts.iter().enumerate() {
        let got: Vec<i64> =
            table.scan(&KeyRange::all(), &Projection::All, ro).unwrap().map(|r| int(&r.unwrap()[1])).collect();
        assert_eq!(
            got,
            expected[t].to_vec(),
            "{what}: table {} balances are not the opening ones plus the {} surviving transfers",
            table.name(),
            seen.len()
        );
    }
    let total: i64 = expected.iter().flatten().sum();
    assert_eq!(total, 2 * ACCOUNTS * OPENING);
    seen
}

type Fault<'a> = (Option<(&'a str, FaultKind, u64)>, Option<u64>);

/// Runs transfers until a timed crash, then reopens and checks. Returns the acknowledged
/// markers of this round.
fn round(fs: &FaultFs, dir: &Path, seed: u64, next_mark: &AtomicI64, fault: Fault<'_>) -> usize {
    let db = Arc::new(Db::open(dir, options(fs)).unwrap());
    if let Some((path, kind, after)) = fault.0 {
        fs.fail_writes(path, after, kind);
    }
    if let Some(after) = fault.1 {
        fs.fail_syncs(".log", after);
    }
    let acked = Mutex::new(Vec::<i64>::new());
    let times = Mutex::new(Vec::<SystemTime>::new());
    let stop = AtomicBool::new(false);
    let mut rng = StdRng::seed_from_u64(seed);
    std::thread::scope(|s| {
        for w in 0..WORKERS {
            let (db, acked, stop, times) = (&db, &acked, &stop, &times);
            s.spawn(move || {
                let (accts, marks) = tables(db);
                let mut rng = StdRng::seed_from_u64(seed * 10 + w);
                while !stop.load(Ordering::Relaxed) {
                    let mark = next_mark.fetch_add(1, Ordering::Relaxed);
                    match transfer(db, &accts, &marks, mark, &mut rng) {
                        Ok(true) => {
                            acked.lock().unwrap().push(mark);
                            if rng.gen_bool(0.1) {
                                times.lock().unwrap().push(SystemTime::now());
                            }
                        }
                        Ok(false) => {}
                        // An injected fault poisons writes: the rest of this round is the crash.
                        Err(_) => break,
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..150)));
        fs.crash(Some(seed));
        stop.store(true, Ordering::Relaxed);
    });
    drop(Arc::try_unwrap(db).ok().expect("workers released the db"));
    fs.restart();

    let db = Db::open(dir, options(fs)).unwrap();
    let (accts, marks) = tables(&db);
    let seen = check_state(&accts, &marks, &ReadOptions::default(), &format!("seed {seed}, after the crash"));
    let acked = acked.into_inner().unwrap();
    let missing: Vec<&i64> = acked.iter().filter(|m| !seen.contains(m)).collect();
    assert!(missing.is_empty(), "seed {seed}: acknowledged commits lost in the crash: {missing:?}");
    let times = times.into_inner().unwrap();
    println!(
        "seed {seed}: {} acknowledged, {} surviving transfers, {} past points checked",
        acked.len(),
        seen.len(),
        times.len()
    );
    for t in times {
        let snap: Snapshot = match db.snapshot_as_of(AsOf::Time(t)) {
            Ok(s) => s,
            Err(e) => panic!("seed {seed}: as of {t:?}: {e}"),
        };
        check_state(&accts, &marks, &ReadOptions { snapshot: Some(&snap) }, &format!("seed {seed}, as of {t:?}"));
    }
    db.verify().unwrap();
    db.close().unwrap();
    acked.len()
}

#[test]
fn transfers_across_engines_survive_power_loss_and_faults_whole_or_not_at_all() {
    for seed in seeds(&[41, 42]) {
        with_seed(seed, |seed| {
            let fs = FaultFs::new();
            let dir = Path::new("/bank");
            setup(&fs, dir);
            let next_mark = AtomicI64::new(0);
            let mut rng = StdRng::seed_from_u64(seed);
            let mut acked = 0;
            for r in 0..8u64 {
                let fault: Fault<'_> = match r % 4 {
                    0 => (None, None),
                    1 => (Some((".log", FaultKind::Torn, rng.gen_range(5..100))), None),
                    2 => (Some((".log", FaultKind::NoSpace, rng.gen_range(5..100))), None),
                    _ => (None, Some(rng.gen_range(5..100))),
                };
                acked += round(&fs, dir, seed * 100 + r, &next_mark, fault);
            }
            assert!(acked > 50, "seed {seed}: only {acked} transfers were acknowledged");
        });
    }
}
