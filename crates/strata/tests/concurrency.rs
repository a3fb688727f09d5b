//! Writers, readers at snapshots, flushes and background compactions all at once, for a bounded
//! time (`STRATA_STRESS_MS`, default 4000). Readers check that what a snapshot shows never
//! changes, that gets and scans agree at one snapshot, and that every row they see satisfies the
//! invariant every write keeps (`b = 2a`), which catches torn or mixed-up partial rows.

mod common;

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata::vfs::OsFs;
use strata::{
    Column, ColumnType, Db, KeyRange, Options, Projection, ReadOptions, Schema, Table, TableOptions, Value, WriteBatch,
};

const KEYS: i64 = 2000;

fn schema() -> Schema {
    Schema::new(
        vec![
            Column::new("id", ColumnType::BigInt),
            Column::not_null("a", ColumnType::BigInt),
            Column::not_null("b", ColumnType::BigInt),
            Column::new("c", ColumnType::Int),
        ],
        &["id"],
    )
    .unwrap()
}

fn check_row(r: &[Value]) {
    match (&r[1], &r[2]) {
        (Value::BigInt(a), Value::BigInt(b)) => assert_eq!(*b, 2 * *a, "row {r:?} breaks b = 2a"),
        _ => panic!("row {r:?} has wrong types"),
    }
}

fn writer(db: Arc<Db>, t: Table, seed: u64, stop: Arc<AtomicBool>, ops: Arc<AtomicU64>) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Relaxed) {
        let k = rng.gen_range(0..KEYS);
        let v: i64 = rng.gen_range(-1_000_000..1_000_000);
        match rng.gen_range(0..10) {
            0..=3 => {
                t.insert(&[Value::BigInt(k), Value::BigInt(v), Value::BigInt(2 * v), Value::Int(rng.gen())]).unwrap()
            }
            4..=5 => t.update(&[Value::BigInt(k)], &[("a", Value::BigInt(v)), ("b", Value::BigInt(2 * v))]).unwrap(),
            6 => t.update(&[Value::BigInt(k)], &[("c", Value::Int(rng.gen()))]).unwrap(),
            7 => t.delete(&[Value::BigInt(k)]).unwrap(),
            _ => {
                let mut b = WriteBatch::new();
                for _ in 0..rng.gen_range(2..8) {
                    let k = rng.gen_range(0..KEYS);
                    b.insert(&t, &[Value::BigInt(k), Value::BigInt(v), Value::BigInt(2 * v), Value::Null]).unwrap();
                }
                db.write(b, &Default::default()).unwrap();
            }
        }
        ops.fetch_add(1, Ordering::Relaxed);
    }
}

type Observation = (Vec<Option<Vec<Value>>>, Vec<Vec<Value>>);

fn observe(t: &Table, snap: &strata::Snapshot, keys: &[i64], range: &KeyRange) -> Observation {
    let ro = ReadOptions { snapshot: Some(snap) };
    let gets: Vec<Option<Vec<Value>>> =
        keys.iter().map(|&k| t.get(&[Value::BigInt(k)], &Projection::All, &ro).unwrap()).collect();
    let rows: Vec<Vec<Value>> = t.scan(range, &Projection::All, &ro).unwrap().map(Result::unwrap).collect();
    (gets, rows)
}

fn reader(db: Arc<Db>, t: Table, seed: u64, stop: Arc<AtomicBool>, checks: Arc<AtomicU64>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let proj = t.projection(&["a", "b", "id"]).unwrap();
    while !stop.load(Ordering::Relaxed) {
        let snap = db.snapshot();
        let keys: Vec<i64> = (0..20).map(|_| rng.gen_range(0..KEYS)).collect();
        let lo = rng.gen_range(0..KEYS);
        let range = KeyRange::half_open(vec![Value::BigInt(lo)], vec![Value::BigInt(lo + rng.gen_range(1..300))]);
        let first = observe(&t, &snap, &keys, &range);
        for r in first.0.iter().flatten().chain(first.1.iter()) {
            check_row(r);
        }
        // Gets and the scan agree at the same snapshot.
        for (k, g) in keys.iter().zip(&first.0) {
            if let (Bound::Included(lo), Bound::Excluded(hi)) = (&range.start, &range.end) {
                let (Value::BigInt(lo), Value::BigInt(hi)) = (&lo[0], &hi[0]) else { unreachable!() };
                if k >= lo && k < hi {
                    let in_scan = first.1.iter().find(|r| r[0] == Value::BigInt(*k));
                    assert_eq!(in_scan, g.as_ref(), "get and scan disagree on key {k} at seq {}", snap.seq());
                }
            }
        }
        // Meanwhile, reads of the newest data keep the invariant too.
        for _ in 0..10 {
            let k = rng.gen_range(0..KEYS);
            if let Some(r) = t.get(&[Value::BigInt(k)], &proj, &ReadOptions::default()).unwrap() {
                assert_eq!(
                    r[1],
                    match r[0] {
                        Value::BigInt(a) => Value::BigInt(2 * a),
                        _ => unreachable!(),
                    }
                );
            }
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..20)));
        let second = observe(&t, &snap, &keys, &range);
        assert_eq!(first, second, "a snapshot at seq {} changed under compaction", snap.seq());
        checks.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn writers_readers_and_compaction_together() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options { memtable_size: 64 << 10, l1_max_bytes: 128 << 10, ..tiny_options(Arc::new(OsFs)) };
    let db = Arc::new(Db::open(tmp.path(), opts).unwrap());
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let ms: u64 = std::env::var("STRATA_STRESS_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(4000);
    let stop = Arc::new(AtomicBool::new(false));
    let (ops, checks) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut hs = Vec::new();
    for i in 0..4 {
        let (db, t, stop, ops) = (db.clone(), t.clone(), stop.clone(), ops.clone());
        hs.push(std::thread::spawn(move || writer(db, t, 100 + i, stop, ops)));
    }
    for i in 0..4 {
        let (db, t, stop, checks) = (db.clone(), t.clone(), stop.clone(), checks.clone());
        hs.push(std::thread::spawn(move || reader(db, t, 200 + i, stop, checks)));
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(ms) {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    let all: Vec<Vec<Value>> =
        t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap().map(Result::unwrap).collect();
    for r in &all {
        check_row(r);
        let Value::BigInt(k) = r[0] else { unreachable!() };
        assert_eq!(t.get(&[Value::BigInt(k)], &Projection::All, &ReadOptions::default()).unwrap().as_ref(), Some(r));
    }
    let st = db.stats();
    eprintln!(
        "{} writes, {} snapshot checks, {} flushes, {} compactions, levels {:?}",
        ops.load(Ordering::Relaxed),
        checks.load(Ordering::Relaxed),
        st.flushes,
        st.compactions,
        st.tables[0].levels.iter().map(|l| l.files).collect::<Vec<_>>()
    );
    assert!(st.compactions > 0 && checks.load(Ordering::Relaxed) > 20, "the run did too little to mean anything");
    db.verify().unwrap();
}
