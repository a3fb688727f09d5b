//! `Db::advise`: LASER's design advisor over a table's own workload statistics.

use std::sync::Arc;

use crate::common::tiny_options;
use strata::column_group::Layout;
use strata::vfs::OsFs;
use strata::{AdviseOptions, Column, ColumnType, Db, Error, KeyRange, ReadOptions, Schema, TableOptions, Value};

fn schema() -> Schema {
    let mut cols = vec![Column::new("k", ColumnType::BigInt)];
    cols.extend(["a", "b", "c", "d", "e", "f"].iter().map(|n| Column::new(*n, ColumnType::Int)));
    Schema::new(cols, &["k"]).unwrap()
}

/// A database in `dir` with table `t` of 4,000 rows flushed and compacted down the tree.
fn loaded(dir: &std::path::Path) -> (Db, strata::Table) {
    let db = Db::open(dir, tiny_options(Arc::new(OsFs))).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    for i in 0..4000i64 {
        let row: Vec<Value> =
            std::iter::once(Value::BigInt(i)).chain((1..=6).map(|c| Value::Int((i * c) as i32))).collect();
        t.insert(&row).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    (db, t)
}

/// Narrow scans of one column at every level and a few whole-row reads: the advice splits the
/// scanned column off below Level-0 and predicts a lower cost than rows; whole-row reads alone
/// leave rows.
#[test]
fn advice_splits_off_what_scans_read_and_keeps_rows_for_row_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, t) = loaded(tmp.path());
    let levels_with_data: Vec<usize> =
        db.stats().tables[0].levels.iter().filter(|l| l.files > 0).map(|l| l.level).collect();
    assert!(levels_with_data.iter().any(|&l| l >= 2), "the load should reach Level-2: {levels_with_data:?}");

    // Before any read: only inserts, which no split makes cheaper, so rows stay.
    let idle = db.advise("t", &AdviseOptions::default()).unwrap();
    assert_eq!(idle.advised, idle.current, "{idle:#?}");
    assert!(idle
        .levels
        .iter()
        .all(|l| l.advised == "row" && l.workload.inserts == 4000.0 || l.workload.inserts == 0.0));

    let f = t.projection(&["f"]).unwrap();
    let all = t.projection(&["a", "b", "c", "d", "e", "f"]).unwrap();
    for _ in 0..200 {
        assert_eq!(t.scan(&KeyRange::all(), &f, &ReadOptions::default()).unwrap().count(), 4000);
    }
    for i in (0..4000).step_by(100) {
        assert!(t.get(&[Value::BigInt(i)], &all, &ReadOptions::default()).unwrap().is_some());
    }
    let advice = db.advise("t", &AdviseOptions::default()).unwrap();
    let deep = advice.levels.iter().rfind(|l| l.workload.scans.iter().any(|s| s.entries > 0.0)).unwrap();
    assert!(deep.advised.contains("(f)") || deep.advised == "column", "{advice:#?}");
    assert!(deep.advised_cost.total() < deep.current_cost.total(), "{advice:#?}");
    assert!(advice.advised_cost().total() < advice.current_cost().total());
    // The scans were counted under their projection, with the entries they overlapped.
    let scans = &deep.workload.scans;
    assert_eq!(scans.len(), 1, "{scans:?}");
    assert_eq!(scans[0].count, 200.0);
    assert_eq!(scans[0].cols.to_vec(), vec![5]);
    assert!(scans[0].entries > 0.0);
    // Any layout can be priced against the same workload; the two the advice names price as
    // it says, and no other candidate is cheaper.
    let price = |spec: &str| advice.cost_of(&Layout::parse(spec, &schema(), 6).unwrap()).total();
    assert!((price(&advice.advised) - advice.advised_cost().total()).abs() < 1e-6);
    assert!((price(&advice.current) - advice.current_cost().total()).abs() < 1e-6);
    for other in ["L1-: column", "L1-: (a,b,c) (d,e,f)", "L2-: (a,b,c,d,e) (f)", "L1: (a,b,c,d,e) (f); L2-: column"] {
        assert!(price(other) >= advice.advised_cost().total() - 1e-6, "{other} is cheaper than the advice");
    }
    // The advice is a layout a table takes.
    db.create_table("u", schema(), TableOptions::with_layout(&advice.advised)).unwrap();
    assert!(advice.advised.starts_with("L0: row"));

    // Whole-row reads alone keep rows everywhere.
    let db2dir = tempfile::tempdir().unwrap();
    let (db2, t2) = loaded(db2dir.path());
    for i in 0..4000 {
        t2.get(&[Value::BigInt(i)], &all, &ReadOptions::default()).unwrap();
    }
    let rows = db2.advise("t", &AdviseOptions::default()).unwrap();
    assert!(rows.levels.iter().all(|l| l.advised == "row"), "{rows:#?}");
}

#[test]
fn advice_is_refused_for_unknown_and_lineage_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Db::open(tmp.path(), tiny_options(Arc::new(OsFs))).unwrap();
    assert!(matches!(db.advise("nope", &AdviseOptions::default()), Err(Error::UnknownTable(_))));
    db.create_table("l", schema(), TableOptions::engine(strata::Engine::Lineage)).unwrap();
    assert!(matches!(db.advise("l", &AdviseOptions::default()), Err(Error::InvalidArgument(_))));
}

/// A trace records the workload across a restart and loads into the same counts the live
/// statistics kept; the advice from it is the advice from them; applied, the table re-lays
/// out and reads stay right.
#[test]
fn a_trace_across_a_restart_advises_like_the_live_statistics_and_applies() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("t.trace");
    let (db, t) = loaded(&tmp.path().join("db"));
    db.trace_start("t", &trace).unwrap();
    let work = |t: &strata::Table| {
        let f = t.projection(&["e", "f"]).unwrap();
        for _ in 0..50 {
            assert_eq!(t.scan(&KeyRange::all(), &f, &ReadOptions::default()).unwrap().count(), 4000);
        }
        let all = t.projection(&["a", "b", "c", "d", "e", "f"]).unwrap();
        for i in (0..4000).step_by(50) {
            assert!(t.get(&[Value::BigInt(i)], &all, &ReadOptions::default()).unwrap().is_some());
        }
    };
    work(&t);
    let first = db.advise("t", &AdviseOptions::default()).unwrap();
    drop(t);
    db.close().unwrap();
    // The next process goes on recording into the same trace.
    let db = Db::open(tmp.path().join("db"), tiny_options(Arc::new(OsFs))).unwrap();
    let t = db.table("t").unwrap();
    work(&t);
    assert_eq!(db.trace_stop("t").unwrap(), Some(trace.clone()));
    assert_eq!(db.trace_stop("t").unwrap(), None, "a second stop found a trace");
    work(&t);
    let traced = db.advise("t", &AdviseOptions { trace: Some(trace.clone()), ..Default::default() }).unwrap();
    // Two sessions of the same reads on the same tree: twice the first session's counts.
    for (a, b) in first.levels.iter().zip(&traced.levels) {
        let sum = |ops: &[strata::advisor::model::Ops]| ops.iter().map(|o| o.count).sum::<f64>();
        assert_eq!(sum(&b.workload.scans), 2.0 * sum(&a.workload.scans), "L{}", a.level);
        assert_eq!(sum(&b.workload.point_reads), 2.0 * sum(&a.workload.point_reads), "L{}", a.level);
    }
    assert_eq!(traced.advised, first.advised);
    assert_ne!(traced.advised, traced.current, "{traced:#?}");
    // A trace of another table is refused.
    db.create_table("u", schema(), TableOptions::default()).unwrap();
    let e = db.advise("u", &AdviseOptions { trace: Some(trace), ..Default::default() }).unwrap_err();
    assert!(e.to_string().contains("traces table t"), "{e}");

    db.set_layout("t", Some(&traced.advised)).unwrap();
    db.wait_for_compactions().unwrap();
    assert_eq!(db.stats().tables.iter().find(|s| s.name == "t").unwrap().relayout_files, 0);
    assert_eq!(db.advise("t", &AdviseOptions::default()).unwrap().current, traced.advised);
    work(&t);
    db.verify().unwrap();

    // A damaged list of traced tables never keeps the database from opening; changing what is
    // traced then reports it.
    drop(t);
    db.close().unwrap();
    std::fs::write(tmp.path().join("db").join("TRACES"), "not a trace list\n").unwrap();
    let db = Db::open(tmp.path().join("db"), tiny_options(Arc::new(OsFs))).unwrap();
    assert!(db.trace_stop("t").is_err(), "a damaged TRACES file went unreported");
    work(&db.table("t").unwrap());
}

/// Self-advising (LASER §7.3): a table opened with `Options::self_advise` follows its workload,
/// narrow scans of one column split it off, and after a shift to whole-row point reads it goes
/// back to rows (each once two rounds agreed); reads stay right through both changes.
#[test]
fn a_self_advising_table_follows_a_shift_in_its_workload() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, _) = loaded(tmp.path());
    db.close().unwrap();
    let every = std::time::Duration::from_millis(1000);
    let db =
        Db::open(tmp.path(), strata::Options { self_advise: Some(every), ..tiny_options(Arc::new(OsFs)) }).unwrap();
    let t = db.table("t").unwrap();
    let layout = |db: &Db| db.stats().tables[0].layout.clone();
    let start = layout(&db);
    // Until the layout changes (or a generous deadline): scans of `f` alone.
    let f = t.projection(&["f"]).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while layout(&db) == start && std::time::Instant::now() < deadline {
        assert_eq!(t.scan(&KeyRange::all(), &f, &ReadOptions::default()).unwrap().count(), 4000);
    }
    let split = layout(&db);
    assert!(split.contains("(f)") || split.contains("column"), "scans of f did not split it off: {split}");
    // The counter follows the change it counts.
    let changes = |db: &Db, n: u64| {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while db.stats().self_advised < n && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        db.stats().self_advised
    };
    assert_eq!(changes(&db, 1), 1);
    // The shift: whole rows by key, nothing scanned.
    let all = t.projection(&["a", "b", "c", "d", "e", "f"]).unwrap();
    let mut i = 0i64;
    while layout(&db) == split && std::time::Instant::now() < deadline + std::time::Duration::from_secs(60) {
        let row = t.get(&[Value::BigInt(i % 4000)], &all, &ReadOptions::default()).unwrap().unwrap();
        assert_eq!(row[5], Value::Int((i % 4000 * 6) as i32));
        i += 37;
    }
    let back = layout(&db);
    assert!(!back.contains("(f)"), "whole-row reads kept f apart: {back}");
    assert_eq!(changes(&db, 2), 2);
    db.wait_for_compactions().unwrap();
    assert_eq!(db.stats().tables[0].relayout_files, 0);
    assert_eq!(t.scan(&KeyRange::all(), &f, &ReadOptions::default()).unwrap().count(), 4000);
    db.verify().unwrap();
}

/// Calibration measures every price on the table (none is left at the hand-set default), each
/// positive and finite; an empty table keeps the defaults for reads.
#[test]
fn calibration_measures_the_prices_on_the_table() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, _) = loaded(tmp.path());
    let served = |db: &Db| -> Vec<(u64, u64)> {
        db.stats().tables[0].levels.iter().map(|l| (l.workload.point_reads, l.workload.scans)).collect()
    };
    let before = served(&db);
    let cal = db.calibrate("t").unwrap();
    println!("measured prices: {cal:?}");
    assert_eq!(served(&db), before, "calibration's reads were counted as the table's workload");
    let default = strata::advisor::model::Calibration::default();
    for (what, got, def) in [
        ("point", cal.point_block_us, default.point_block_us),
        ("scan", cal.scan_block_us, default.scan_block_us),
        ("write", cal.write_block_us, default.write_block_us),
    ] {
        assert!(got.is_finite() && got > 0.0, "{what}: {cal:?}");
        assert_ne!(got, def, "{what} kept the default: {cal:?}");
    }
    assert_eq!(cal.block_bytes, tiny_options(Arc::new(OsFs)).block_size as f64);
    let advice = db.advise("t", &AdviseOptions { calibration: cal, ..Default::default() }).unwrap();
    assert_eq!(advice.calibration, cal);
    db.create_table("empty", schema(), TableOptions::default()).unwrap();
    let e = db.calibrate("empty").unwrap();
    assert_eq!((e.point_block_us, e.scan_block_us), (default.point_block_us, default.scan_block_us));
    assert!(matches!(db.calibrate("nope"), Err(Error::UnknownTable(_))));
}
