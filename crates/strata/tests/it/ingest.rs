//! Bulk ingestion (`Table::ingest`): where the files land, what reads and snapshots see, that an
//! ingest is all or nothing under concurrent writes, failed writes and power loss, and that it
//! survives a reopen. The model test (`model.rs`) mixes ingests into its random operations too.
//!
//! `STRATA_SEEDS=..` picks the seeds of the randomized tests here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use strata::vfs::{FaultFs, FaultKind, Fs, OsFs};
use strata::{Column, ColumnType, Db, Error, KeyRange, Projection, ReadOptions, Schema, Table, TableOptions, Value};

fn schema() -> Schema {
    Schema::new(
        vec![
            Column::new("k", ColumnType::BigInt),
            Column::new("gen", ColumnType::BigInt),
            Column::new("a", ColumnType::Int),
            Column::new("s", ColumnType::Text),
        ],
        &["k"],
    )
    .unwrap()
}

fn row(k: i64, gen: i64) -> Vec<Value> {
    vec![Value::BigInt(k), Value::BigInt(gen), Value::Int((k * 31 + gen) as i32), Value::Text(format!("r{k}-{gen}"))]
}

/// Every row of `t` at `snapshot` (or the latest).
fn rows_of(t: &Table, ropts: &ReadOptions<'_>) -> Vec<Vec<Value>> {
    t.scan(&KeyRange::all(), &Projection::All, ropts).unwrap().map(Result::unwrap).collect()
}

fn open(fs: Arc<dyn Fs>, dir: &std::path::Path) -> Db {
    Db::open(dir, tiny_options(fs)).unwrap()
}

fn lifecycle() -> TableOptions {
    TableOptions::with_layout(layout_spec("lifecycle", &schema()).unwrap())
}

#[test]
fn an_ingest_into_an_empty_table_goes_to_the_last_level_written_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let db = open(Arc::new(OsFs), &dir);
    let t = db.create_table("t", schema(), lifecycle()).unwrap();
    let mut rows: Vec<Vec<Value>> = (0..3000).map(|k| row(k, 1)).collect();
    rows.shuffle(&mut StdRng::seed_from_u64(7));
    let st = t.ingest(&rows).unwrap();
    let levels = tiny_options(Arc::new(OsFs)).num_levels;
    assert_eq!((st.rows, st.level), (3000, levels - 1), "{st:?}");
    assert!(st.files > 1 && st.bytes > 0, "{st:?}");
    rows.sort_by_key(|r| part_of(&r[0]));
    assert_eq!(rows_of(&t, &ReadOptions::default()), rows);
    let stats = db.stats();
    assert_eq!((stats.flushes, stats.compactions), (0, 0), "an ingest neither flushes nor compacts");
    let ts = &stats.tables[0];
    let last = &ts.levels[levels - 1];
    assert_eq!((last.files, last.bytes_written), (st.files, st.bytes), "{ts:?}");
    assert!(ts.write_amplification > 0.0 && ts.write_amplification <= 1.2, "{ts:?}");
    // Writes after it are newer, also after a reopen.
    t.update(&[Value::BigInt(5)], &[("a", Value::Int(-1))]).unwrap();
    drop(t);
    db.close().unwrap();
    let db = open(Arc::new(OsFs), &dir);
    let t = db.table("t").unwrap();
    let got = t.get(&[Value::BigInt(5)], &Projection::All, &ReadOptions::default()).unwrap().unwrap();
    assert_eq!(got, vec![Value::BigInt(5), Value::BigInt(1), Value::Int(-1), Value::Text("r5-1".into())]);
    t.insert(&row(6, 2)).unwrap();
    assert_eq!(t.get(&[Value::BigInt(6)], &Projection::All, &ReadOptions::default()).unwrap(), Some(row(6, 2)));
    assert!(db.history().newest_seq > st.seq, "the sequence numbers after a reopen start above the ingest's");
    assert_eq!(rows_of(&t, &ReadOptions::default()).len(), 3000);
    db.verify().unwrap();
    db.check_supersede_marks().unwrap();
}

#[test]
fn an_ingest_over_older_rows_replaces_them_for_later_reads_only() {
    let db = open(Arc::new(FaultFs::new()), std::path::Path::new("/db"));
    let t = db.create_table("t", schema(), lifecycle()).unwrap();
    for k in 0..2000 {
        t.insert(&row(k, 1)).unwrap();
    }
    db.compact_range("t", &KeyRange::all()).unwrap();
    // Some newer versions in Level-0, outside the ingest's range.
    for k in 1500..1600 {
        t.insert(&row(k, 2)).unwrap();
    }
    db.flush().unwrap();
    let before = db.snapshot();
    let ingested: Vec<Vec<Value>> = (100..900).step_by(2).map(|k| row(k, 3)).collect();
    let st = t.ingest(&ingested).unwrap();
    assert!(st.level >= 1, "{st:?}");
    let old = rows_of(&t, &ReadOptions { snapshot: Some(&before) });
    assert!(old.iter().all(|r| r[1] != Value::BigInt(3)), "the snapshot taken before the ingest sees it");
    assert_eq!(old.len(), 2000);
    let check = |t: &Table| {
        let now = rows_of(t, &ReadOptions::default());
        assert_eq!(now.len(), 2000);
        for r in &now {
            let Value::BigInt(k) = r[0] else { panic!("{r:?}") };
            let gen = if (100..900).contains(&k) && k % 2 == 0 {
                3
            } else if (1500..1600).contains(&k) {
                2
            } else {
                1
            };
            assert_eq!(*r, row(k, gen));
        }
    };
    check(&t);
    db.check_supersede_marks().unwrap();
    // Compactions carry it down correctly.
    db.compact_range("t", &KeyRange::all()).unwrap();
    check(&t);
    db.check_supersede_marks().unwrap();
    db.verify().unwrap();
}

#[test]
fn an_ingest_over_rows_in_memory_flushes_them_and_lands_above() {
    let db = open(Arc::new(FaultFs::new()), std::path::Path::new("/db"));
    let t = db.create_table("t", schema(), lifecycle()).unwrap();
    for k in 0..50 {
        t.insert(&row(k, 1)).unwrap();
    }
    let st = t.ingest((10..20).map(|k| row(k, 2))).unwrap();
    assert_eq!(st.level, 0, "{st:?}");
    for k in 0..50 {
        let want = row(k, if (10..20).contains(&k) { 2 } else { 1 });
        assert_eq!(t.get(&[Value::BigInt(k)], &Projection::All, &ReadOptions::default()).unwrap(), Some(want));
    }
    // Later Level-0 files sort above it.
    t.insert(&row(12, 4)).unwrap();
    db.flush().unwrap();
    assert_eq!(t.get(&[Value::BigInt(12)], &Projection::All, &ReadOptions::default()).unwrap(), Some(row(12, 4)));
    db.compact_range("t", &KeyRange::all()).unwrap();
    assert_eq!(t.get(&[Value::BigInt(12)], &Projection::All, &ReadOptions::default()).unwrap(), Some(row(12, 4)));
    assert_eq!(t.get(&[Value::BigInt(13)], &Projection::All, &ReadOptions::default()).unwrap(), Some(row(13, 2)));
    db.check_supersede_marks().unwrap();
}

#[test]
fn bad_rows_and_lineage_tables_are_refused_and_nothing_is_ingested() {
    let db = open(Arc::new(FaultFs::new()), std::path::Path::new("/db"));
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let mut rows: Vec<Vec<Value>> = (0..10).map(|k| row(k, 1)).collect();
    rows[7][2] = Value::Text("not an int".into());
    let e = t.ingest(&rows).unwrap_err();
    assert_eq!(e.kind(), "type_mismatch", "{e}");
    assert!(rows_of(&t, &ReadOptions::default()).is_empty());
    let none: Vec<Vec<Value>> = Vec::new();
    assert_eq!(t.ingest(&none).unwrap().rows, 0);
    let l = db.create_table("l", schema(), TableOptions::engine(strata::Engine::Lineage)).unwrap();
    let e = l.ingest([row(1, 1)]).unwrap_err();
    assert_eq!(e.kind(), "invalid_argument", "{e}");
}

#[test]
fn write_transactions_open_across_an_ingest_cannot_commit() {
    let db = open(Arc::new(FaultFs::new()), std::path::Path::new("/db"));
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let mut before = db.begin(&strata::TxnOptions::default()).unwrap();
    t.ingest((0..10).map(|k| row(k, 1))).unwrap();
    let mut after = db.begin(&strata::TxnOptions::default()).unwrap();
    // The older transaction would overwrite an ingested row it never saw: refused, retryable.
    let e = match before.insert(&t, &row(3, 2)) {
        Err(e) => e,
        Ok(()) => before.commit(&strata::WriteOptions::default()).unwrap_err(),
    };
    assert!(matches!(e, Error::TxnTooOld { .. }) && e.is_retryable(), "{e}");
    // One begun after the ingest sees it and commits.
    assert_eq!(after.get(&t, &[Value::BigInt(3)], &Projection::All).unwrap(), Some(row(3, 1)));
    after.insert(&t, &row(3, 3)).unwrap();
    after.commit(&strata::WriteOptions::default()).unwrap();
    assert_eq!(t.get(&[Value::BigInt(3)], &Projection::All, &ReadOptions::default()).unwrap(), Some(row(3, 3)));
}

/// Ingests of whole generations of keys `[0, n)` run while a writer writes other keys (and, in
/// a second phase, the same ones) and readers take snapshots: every snapshot sees one
/// generation across the ingested keys, an ingest refused for a conflict leaves no trace, and
/// the writer's rows are all there at the end.
#[test]
fn ingests_under_concurrent_writes_and_snapshots_are_all_or_nothing() {
    for seed in seeds(&[1, 2]) {
        with_seed(seed, |seed| {
            let db = Arc::new(open(Arc::new(FaultFs::new()), std::path::Path::new("/db")));
            let t = db.create_table("t", schema(), lifecycle()).unwrap();
            const N: i64 = 400;
            let stop = Arc::new(AtomicBool::new(false));
            // Phase 0: the writer keeps to keys of its own; phase 1: it writes into the ingested range.
            let phase = Arc::new(AtomicU64::new(0));
            let written = Arc::new(AtomicU64::new(0));
            let writer = {
                let (t, stop, phase, written) = (t.clone(), stop.clone(), phase.clone(), written.clone());
                std::thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed);
                    let mut k = N;
                    while !stop.load(Ordering::Relaxed) {
                        if phase.load(Ordering::Relaxed) == 0 {
                            t.insert(&row(k, -1)).unwrap();
                            k += 1;
                            written.store((k - N) as u64, Ordering::Relaxed);
                        } else {
                            t.insert(&row(rng.gen_range(0..N), -2)).unwrap();
                        }
                    }
                })
            };
            let reader = {
                let (db, t, stop) = (db.clone(), t.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut checked = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let s = db.snapshot();
                        let range = KeyRange::half_open(vec![Value::BigInt(0)], vec![Value::BigInt(N)]);
                        let rows: Vec<Vec<Value>> = t
                            .scan(&range, &Projection::All, &ReadOptions { snapshot: Some(&s) })
                            .unwrap()
                            .map(Result::unwrap)
                            .collect();
                        let gens: std::collections::BTreeSet<Part> =
                            rows.iter().map(|r| part_of(&r[1])).filter(|g| *g != part_of(&Value::BigInt(-2))).collect();
                        assert!(gens.len() <= 1, "a snapshot sees parts of two ingests: {gens:?}");
                        assert!(rows.is_empty() || rows.len() == N as usize, "a snapshot sees part of an ingest");
                        checked += 1;
                    }
                    checked
                })
            };
            let mut rng = StdRng::seed_from_u64(seed ^ 0x55);
            let (mut ok, mut refused) = (0, 0);
            for gen in 1..=40i64 {
                if gen == 25 {
                    phase.store(1, Ordering::Relaxed);
                }
                let mut rows: Vec<Vec<Value>> = (0..N).map(|k| row(k, gen)).collect();
                rows.shuffle(&mut rng);
                match t.ingest(&rows) {
                    Ok(_) => ok += 1,
                    Err(e @ Error::IngestConflict { .. }) => {
                        assert!(e.is_retryable());
                        refused += 1;
                        // Nothing of it is visible.
                        let now = rows_of(&t, &ReadOptions::default());
                        assert!(now.iter().all(|r| r[1] != Value::BigInt(gen)), "a refused ingest left rows");
                    }
                    Err(e) => panic!("ingest {gen}: {e}"),
                }
            }
            stop.store(true, Ordering::Relaxed);
            writer.join().unwrap();
            let checked = reader.join().unwrap();
            assert!(ok >= 20 && checked > 0, "{ok} ingests, {refused} refused, {checked} snapshots checked");
            let n = written.load(Ordering::Relaxed) as i64;
            let all = rows_of(&t, &ReadOptions::default());
            let mine = all.iter().filter(|r| r[1] == Value::BigInt(-1)).count() as i64;
            assert!(mine >= n, "the writer's rows: {mine} of {n}");
            db.check_supersede_marks().unwrap();
            db.verify().unwrap();
        });
    }
}

/// Write failures while the files are built or the manifest is written, and power lost at a
/// random moment during an ingest: after a reopen the ingest is there whole or not at all (and
/// whole if it was acknowledged).
#[test]
fn a_failure_or_crash_during_an_ingest_leaves_all_or_none_of_it() {
    for seed in seeds(&[3, 4, 5]) {
        with_seed(seed, |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            let faults: [Option<(&str, FaultKind, u64)>; 5] = [
                Some((".sst", FaultKind::Fail, 0)),
                Some((".sst", FaultKind::Torn, 0)),
                Some((".sst", FaultKind::NoSpace, 0)),
                Some(("MANIFEST", FaultKind::Torn, 0)),
                None,
            ];
            for (round, fault) in faults.into_iter().enumerate() {
                let fs = FaultFs::new();
                let dir = std::path::Path::new("/db");
                let db = Arc::new(open(Arc::new(fs.clone()), dir));
                let t = db.create_table("t", schema(), lifecycle()).unwrap();
                for k in 0..300 {
                    t.insert(&row(k * 3, 1)).unwrap();
                }
                db.flush().unwrap();
                if let Some((path, kind, after)) = fault {
                    fs.fail_writes(path, after, kind);
                }
                let rows: Vec<Vec<Value>> = (0..1500).map(|k| row(k, 2)).collect();
                let acked = if fault.is_some() {
                    let res = t.ingest(&rows);
                    assert!(res.is_err(), "round {round}: the fault {fault:?} did not fail the ingest");
                    fs.crash(Some(seed));
                    false
                } else {
                    // Power goes at a random moment of the ingest.
                    let t2 = t.clone();
                    let h = std::thread::spawn(move || t2.ingest(&rows).is_ok());
                    std::thread::sleep(Duration::from_micros(rng.gen_range(0..40_000)));
                    fs.crash(Some(seed));
                    h.join().unwrap()
                };
                drop(t);
                drop(Arc::try_unwrap(db).ok().expect("no other handle"));
                fs.restart();
                let db = open(Arc::new(fs.clone()), dir);
                let t = db.table("t").unwrap();
                let all = rows_of(&t, &ReadOptions::default());
                let new = all.iter().filter(|r| r[1] == Value::BigInt(2)).count();
                assert!(
                    new == 0 || new == 1500,
                    "round {round} ({fault:?}): {new} of 1500 ingested rows after the crash"
                );
                if acked {
                    assert_eq!(new, 1500, "round {round}: an acknowledged ingest was lost");
                }
                let old = all.iter().filter(|r| r[1] == Value::BigInt(1)).count();
                assert_eq!(old + new, if new == 0 { 300 } else { 1500 }, "round {round}");
                db.verify().unwrap();
                db.check_supersede_marks().unwrap();
                // The database takes writes and ingests again.
                t.ingest([row(5000, 3)]).unwrap();
                t.insert(&row(5001, 3)).unwrap();
            }
        });
    }
}
