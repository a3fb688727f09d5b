//! Writers, readers at snapshots, flushes and background compactions all at once, for a bounded
//! time (`STRATA_STRESS_MS`, default 4000). Readers check that what a snapshot shows never
//! changes, that gets and scans agree at one snapshot, and that every row they see satisfies the
//! invariant every write keeps (`b = 2a`), which catches torn or mixed-up partial rows. Last,
//! sixteen threads each check every answer about their own keys against a model.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata::vfs::OsFs;
use strata::{
    Column, ColumnType, Db, KeyRange, Options, Projection, ReadOptions, Schema, Snapshot, Table, TableOptions, Value,
    WriteBatch, WriteOptions,
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

/// How long the stress tests run (`STRATA_STRESS_MS`, default 4000).
fn stress_ms() -> u64 {
    std::env::var("STRATA_STRESS_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(4000)
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
    let ms = stress_ms();
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

/// The merge never makes a reader or writer wait: with every merge held at the point where it
/// has built its new pages and not yet swapped them in (holding whatever a merge holds), two
/// update threads and a reader go on, and every answer at every snapshot equals the model; once
/// released, the held merges finish and the answers stay the same.
#[test]
fn lineage_readers_and_writers_never_wait_for_the_merge() {
    let seed = seeds(&[61])[0];
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options { lineage_merge_threshold: 8, ..tiny_options(Arc::new(OsFs)) };
    let db = Arc::new(Db::open(tmp.path(), opts).unwrap());
    let t = db.create_table("l", schema(), TableOptions::engine(strata::Engine::Lineage)).unwrap();
    for k in 0..KEYS {
        t.insert(&[Value::BigInt(k), Value::BigInt(k), Value::BigInt(2 * k), Value::Null]).unwrap();
    }
    // Let the merge seal what was loaded, then hold every later merge.
    std::thread::sleep(Duration::from_millis(200));
    let held_before = db.hold_lineage_merges(true);
    let model: Arc<parking_lot::Mutex<std::collections::BTreeMap<i64, i64>>> =
        Arc::new(parking_lot::Mutex::new((0..KEYS).map(|k| (k, k)).collect()));
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for w in 0..2i64 {
        let (t, model, stop, writes) = (t.clone(), model.clone(), stop.clone(), writes.clone());
        writers.push(std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed + w as u64);
            while !stop.load(Ordering::Relaxed) {
                // Each writer owns the keys of its parity, so the model order is the write order.
                let k = rng.gen_range(0..KEYS / 2) * 2 + w;
                let a: i64 = rng.gen_range(0..1_000_000);
                let mut m = model.lock();
                t.update(&[Value::BigInt(k)], &[("a", Value::BigInt(a)), ("b", Value::BigInt(2 * a))]).unwrap();
                m.insert(k, a);
                drop(m);
                writes.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Readers: snapshots with the model at their point, gets and scans at them.
    let deadline = Instant::now() + Duration::from_millis(1500);
    let mut checked = 0u64;
    let mut rng = StdRng::seed_from_u64(seed ^ 0xabc);
    while Instant::now() < deadline {
        let (snap, want) = {
            // A writer holds the model while it writes: if writing waited on the held merge,
            // this would wait forever.
            let m = model
                .try_lock_for(Duration::from_secs(5))
                .unwrap_or_else(|| panic!("seed {seed}: a write has waited 5 s while a merge was held"));
            (db.snapshot(), m.clone())
        };
        let ro = ReadOptions { snapshot: Some(&snap) };
        let k = rng.gen_range(0..KEYS);
        let got = t.get(&[Value::BigInt(k)], &Projection::All, &ro).unwrap().unwrap();
        assert_eq!(got[1], Value::BigInt(want[&k]), "seed {seed}: get {k}");
        let rows: Vec<Vec<Value>> =
            t.scan(&KeyRange::all(), &Projection::All, &ro).unwrap().map(Result::unwrap).collect();
        assert_eq!(rows.len() as i64, KEYS);
        for r in &rows {
            let (Value::BigInt(k), Value::BigInt(a), Value::BigInt(b)) = (&r[0], &r[1], &r[2]) else { panic!("{r:?}") };
            assert_eq!((*a, *b), (want[k], 2 * want[k]), "seed {seed}: scan row {k}");
        }
        let sum = strata::scan::ScanRequest::new()
            .with_aggregate(strata::scan::Aggregate::new(strata::scan::AggFunc::Sum, "a"));
        let got: Vec<Vec<Value>> =
            t.scan_batches(&sum, &ro).unwrap().flat_map(|b| strata::scan::batch_rows(&b.unwrap())).collect();
        assert_eq!(got, vec![vec![Value::BigInt(want.values().sum())]], "seed {seed}: sum");
        checked += 1;
    }
    let held = db.hold_lineage_merges(false) - held_before;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let done = writes.load(Ordering::Relaxed);
    println!("{checked} snapshots checked, {done} updates, while {held} merges were held");
    assert!(held >= 1, "no merge reached the hold point, so nothing showed the merge does not block");
    assert!(done > 1000 && checked > 10, "too little happened while merges were held: {done} updates, {checked} reads");
    // Released, the held merges finish; answers stay the same.
    std::thread::sleep(Duration::from_millis(300));
    let want = model.lock().clone();
    let rows: Vec<Vec<Value>> =
        t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap().map(Result::unwrap).collect();
    let got: std::collections::BTreeMap<i64, i64> = rows
        .iter()
        .map(|r| match (&r[0], &r[1]) {
            (Value::BigInt(k), Value::BigInt(a)) => (*k, *a),
            _ => panic!("{r:?}"),
        })
        .collect();
    assert_eq!(got, want);
    let l = db.stats().tables[0].lineage.clone().unwrap();
    assert!(l.merges > 0 && l.merged_records > 0, "{l:?}");
}

/// Reads without a snapshot while the merge thread rebases ranges under them: a writer sets
/// `a` of every row to the round number, in key order, round after round; every scan must see
/// one point in time, so `a` in key order is a run of the newer round followed by a run of the
/// one before (a range rebased past the scan's point would show a later round out of place).
#[test]
fn lineage_reads_without_snapshots_during_rebases_see_one_point() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(tmp.path(), tiny_options(Arc::new(OsFs))).unwrap());
    let t = db.create_table("t", schema(), TableOptions::engine(strata::Engine::Lineage)).unwrap();
    let rows = 512i64;
    for i in 0..rows {
        t.insert(&[Value::BigInt(i), Value::BigInt(0), Value::BigInt(0), Value::Null]).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let scans = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (t, stop, scans) = (db.table("t").unwrap(), stop.clone(), scans.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let got: Vec<i64> = t
                        .scan(&KeyRange::all(), &Projection::All, &ReadOptions::default())
                        .unwrap()
                        .map(|r| {
                            let r = r.unwrap();
                            check_row(&r);
                            if let Value::BigInt(a) = r[1] {
                                a
                            } else {
                                -1
                            }
                        })
                        .collect();
                    assert_eq!(got.len(), rows as usize);
                    let (first, last) = (got[0], got[got.len() - 1]);
                    assert!(first == last || first == last + 1, "rounds {first} and {last} in one scan");
                    let cut = got.iter().position(|&a| a != first).unwrap_or(got.len());
                    assert!(got[cut..].iter().all(|&a| a == last), "a scan mixes points in time: {got:?}");
                    scans.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_millis(stress_ms().min(3000));
    let mut round = 0;
    while Instant::now() < deadline || db.stats().tables[0].lineage.as_ref().unwrap().reclaimed_ranges < 8 {
        round += 1;
        for i in 0..rows {
            t.update(&[Value::BigInt(i)], &[("a", Value::BigInt(round)), ("b", Value::BigInt(2 * round))]).unwrap();
        }
        assert!(round < 100_000, "no range was rebased");
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(scans.load(Ordering::Relaxed) > 10);
}

// Sixteen threads at once, each checking every answer against a model: point reads, writes
// (single rows, partial updates, deletes, batches), scans and reads at snapshots, while
// memtables fill and flush and compactions run underneath.
//
// Each thread owns the keys `k` with `k % THREADS == its index` and keeps the model of those
// keys: nothing else writes them, so every answer about them is exact, whatever the others do
// meanwhile — at the newest data (the thread's own writes are all visible to it) and at each
// snapshot it took (the model as of the snapshot, kept beside it). Scans cover every thread's
// keys and are filtered to the thread's own. Runs `STRATA_STRESS_MS` (default 4000) ms;
// `STRATA_SEEDS` picks the seeds; a failure names its seed.

/// Threads of the many-threads test.
const THREADS: i64 = 16;
/// Keys per thread of the many-threads test.
const KEYS_EACH: i64 = 300;

type Model = BTreeMap<i64, Vec<Value>>;

fn model_schema() -> Schema {
    Schema::new(
        vec![
            Column::new("id", ColumnType::BigInt),
            Column::new("a", ColumnType::BigInt),
            Column::new("b", ColumnType::Text),
            Column::new("c", ColumnType::Int),
        ],
        &["id"],
    )
    .unwrap()
}

/// Thread `me`'s rows in `rows` (every thread's, in key order), by key.
fn own(rows: impl Iterator<Item = Vec<Value>>, me: i64) -> Model {
    rows.filter_map(|r| match r[0] {
        Value::BigInt(k) if k.rem_euclid(THREADS) == me => Some((k, r)),
        _ => None,
    })
    .collect()
}

fn scan_from(t: &Table, from: i64, ro: &ReadOptions<'_>) -> Vec<Vec<Value>> {
    let range = KeyRange { start: Bound::Included(vec![Value::BigInt(from)]), end: Bound::Unbounded };
    t.scan(&range, &Projection::All, ro).unwrap().map(Result::unwrap).collect()
}

/// Counts of what the threads checked.
#[derive(Default)]
struct Checked {
    writes: AtomicU64,
    reads: AtomicU64,
    scans: AtomicU64,
    snapshot_reads: AtomicU64,
}

fn model_worker(db: &Db, t: &Table, me: i64, seed: u64, stop: &AtomicBool, checked: &Checked) {
    let mut rng = StdRng::seed_from_u64(seed ^ (me as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut model = Model::new();
    // Snapshots taken, each with the model as it was then.
    let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
    let key = |rng: &mut StdRng| rng.gen_range(0..KEYS_EACH) * THREADS + me;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let k = key(&mut rng);
        // Some writes wait for their group's fsync: the others queue up meanwhile, and the next
        // groups are large enough for their writers to insert their own batches at once.
        let wo = WriteOptions { sync: rng.gen_bool(0.05) };
        match rng.gen_range(0..100) {
            0..=24 => {
                let row =
                    vec![Value::BigInt(k), Value::BigInt(rng.gen()), Value::Text(format!("{me}:{n}")), Value::Null];
                t.insert_with(&row, &wo).unwrap();
                model.insert(k, row);
                checked.writes.fetch_add(1, Ordering::Relaxed);
            }
            25..=39 => {
                let a = rng.gen::<i64>();
                t.update_with(&[Value::BigInt(k)], &[("a", Value::BigInt(a))], &wo).unwrap();
                if let Some(r) = model.get_mut(&k) {
                    r[1] = Value::BigInt(a);
                }
                checked.writes.fetch_add(1, Ordering::Relaxed);
            }
            40..=44 => {
                t.delete_with(&[Value::BigInt(k)], &wo).unwrap();
                model.remove(&k);
                checked.writes.fetch_add(1, Ordering::Relaxed);
            }
            45..=49 => {
                let mut b = WriteBatch::new();
                let mut rows = Vec::new();
                for _ in 0..rng.gen_range(2..6) {
                    let k = key(&mut rng);
                    let row =
                        vec![Value::BigInt(k), Value::BigInt(-1), Value::Text(String::new()), Value::Int(me as i32)];
                    b.insert(t, &row).unwrap();
                    rows.push(row);
                }
                db.write(b, &wo).unwrap();
                for row in rows {
                    let Value::BigInt(k) = row[0] else { unreachable!() };
                    model.insert(k, row);
                }
                checked.writes.fetch_add(1, Ordering::Relaxed);
            }
            50..=79 => {
                let got = t.get(&[Value::BigInt(k)], &Projection::All, &ReadOptions::default()).unwrap();
                assert_eq!(got.as_ref(), model.get(&k), "thread {me}: read of key {k}");
                checked.reads.fetch_add(1, Ordering::Relaxed);
            }
            80..=84 => {
                let from = rng.gen_range(0..KEYS_EACH * THREADS);
                let rows = scan_from(t, from, &ReadOptions::default());
                let want: Model = model.range(from..).map(|(k, r)| (*k, r.clone())).collect();
                assert_eq!(own(rows.into_iter(), me), want, "thread {me}: scan from {from}");
                checked.scans.fetch_add(1, Ordering::Relaxed);
            }
            85..=89 => {
                if snaps.len() >= 4 {
                    snaps.remove(rng.gen_range(0..snaps.len()));
                }
                snaps.push((db.snapshot(), model.clone()));
            }
            _ => {
                let Some((snap, then)) = snaps.get(rng.gen_range(0..snaps.len().max(1))) else { continue };
                let ro = ReadOptions { snapshot: Some(snap) };
                if rng.gen_bool(0.8) {
                    let got = t.get(&[Value::BigInt(k)], &Projection::All, &ro).unwrap();
                    assert_eq!(got.as_ref(), then.get(&k), "thread {me}: read of key {k} at snapshot {}", snap.seq());
                } else {
                    assert_eq!(own(scan_from(t, 0, &ro).into_iter(), me), *then, "thread {me}: scan at {}", snap.seq());
                }
                checked.snapshot_reads.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    // Every own key, once more, after the others stopped too.
    let got = own(scan_from(t, 0, &ReadOptions::default()).into_iter(), me);
    assert_eq!(got, model, "thread {me}: final scan");
}

#[test]
fn sixteen_threads_of_reads_writes_scans_and_snapshots_match_the_model() {
    for seed in seeds(&[41]) {
        with_seed(seed, |seed| {
            let tmp = tempfile::tempdir().unwrap();
            // Small memtables and levels: flushes and compactions run all along.
            let opts = Options {
                memtable_size: 128 << 10,
                l1_max_bytes: 256 << 10,
                // Whatever the cores here: the writers of a group insert their own batches, and
                // wait awake before they park, as on many cores.
                parallel_memtable_inserts: Some(true),
                spin_before_park: Some(true),
                ..tiny_options(Arc::new(OsFs))
            };
            let db = Db::open(tmp.path(), opts).unwrap();
            // Rows near the top, column groups further down: point reads take both paths.
            let layout = layout_spec("lifecycle", &model_schema()).unwrap();
            let t = db.create_table("t", model_schema(), TableOptions::with_layout(&layout)).unwrap();
            let stop = AtomicBool::new(false);
            let checked = Checked::default();
            std::thread::scope(|s| {
                let hs: Vec<_> = (0..THREADS)
                    .map(|me| {
                        let (db, t, stop, checked) = (&db, &t, &stop, &checked);
                        s.spawn(move || model_worker(db, t, me, seed, stop, checked))
                    })
                    .collect();
                let start = Instant::now();
                while start.elapsed() < Duration::from_millis(stress_ms()) && !hs.iter().any(|h| h.is_finished()) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                stop.store(true, Ordering::Relaxed);
                for h in hs {
                    if let Err(p) = h.join() {
                        std::panic::resume_unwind(p);
                    }
                }
            });
            let st = db.stats();
            let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
            eprintln!(
                "seed {seed}: {} writes, {} reads, {} scans, {} snapshot reads; {} flushes, {} compactions",
                c(&checked.writes),
                c(&checked.reads),
                c(&checked.scans),
                c(&checked.snapshot_reads),
                st.flushes,
                st.compactions
            );
            assert!(
                st.flushes > 2 && c(&checked.reads) > 1000 && c(&checked.snapshot_reads) > 50,
                "the run did too little to mean anything"
            );
            db.verify().unwrap();
        });
    }
}
