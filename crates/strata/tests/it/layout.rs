//! Column-group layouts through the public API: bad specs are rejected naming the problem, the
//! layout is stored with the table, compaction writes each level in that level's groups (seen
//! through `stats` and checked file by file by `verify`), and reads count where they were served.
//! A layout changed on a live table (`Db::set_layout`) is carried out by background rewrites
//! that readers, writers, restarts and crashes never notice.

use std::sync::Arc;

use crate::common::tiny_options;
use strata::vfs::FaultFs;
use strata::{
    Column, ColumnType, Db, Error, KeyRange, Options, Projection, ReadOptions, Schema, Table, TableOptions, Value,
};

fn schema() -> Schema {
    let cols = ["id", "a", "b", "c", "d"].iter().map(|n| Column::new(*n, ColumnType::Int)).collect();
    Schema::new(cols, &["id"]).unwrap()
}

#[test]
fn bad_layouts_are_rejected_naming_level_and_group() {
    let db = Db::open("/layout", tiny_options(Arc::new(FaultFs::new()))).unwrap();
    for (spec, want) in [
        // (b,c) straddles the two groups of L1: containment is broken at L2.
        ("L1: (a,b) (c,d); L2: (b,c) (a) (d)", "group (b,c) of L2"),
        ("L1: (a,b) (c,d); L3: (a,b,c,d)", "group (a,b,c,d) of L3"),
        ("L0: column", "Level-0 must be `row`"),
        ("L1: (a,b) (c)", "column `d` is in no group"),
        ("L1: (a,b) (b,c,d)", "column `b` is in more than one group"),
        ("L1: (id,a) (b,c,d)", "key column `id`"),
        ("L1: (a,b,c,x)", "unknown column `x`"),
        // tiny_options has six levels: L0..L5.
        ("L6: column", "level 6"),
        ("L1 column", "has no `:`"),
    ] {
        let Err(e) = db.create_table("t", schema(), TableOptions::with_layout(spec)) else {
            panic!("{spec} was accepted")
        };
        assert!(matches!(e, Error::InvalidArgument(_)), "{spec}: {e}");
        assert!(e.to_string().contains(want), "{spec}: {e}");
    }
    assert!(db.table_names().is_empty(), "a rejected layout creates nothing");
}

/// In row-group files (every group of a level in one run of files), and one run per group (as
/// tables of builds before row-group files keep).
#[test]
fn compaction_writes_each_level_in_its_groups() {
    for row_groups in [true, false] {
        println!("row groups: {row_groups}");
        writes_each_level_in_its_groups(row_groups);
    }
}

fn writes_each_level_in_its_groups(row_groups: bool) {
    let fs = Arc::new(FaultFs::new());
    let spec = "L0: row; L1: (a,b) (c,d); L2-: column";
    let db = Db::open("/layout", tiny_options(fs.clone())).unwrap();
    let t = db.create_table("t", schema(), TableOptions::with_layout(spec).with_row_groups(row_groups)).unwrap();
    let n = 6000;
    for i in 0..n {
        t.insert(&[Value::Int(i), Value::Int(i), Value::Int(2 * i), Value::Int(3 * i), Value::Int(4 * i)]).unwrap();
    }
    // Updates of `c` only: its newest values sit above the rows they update.
    for i in (0..n).step_by(3) {
        t.update(&[Value::Int(i)], &[("c", Value::Int(-i))]).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();

    let st = db.stats();
    let ts = &st.tables[0];
    assert_eq!(ts.layout, "L0: row; L1: (a,b) (c,d); L2: column; L3: column; L4: column; L5: column");
    let names = |l: &strata::LevelStats| l.groups.iter().map(|g| g.columns.join(",")).collect::<Vec<_>>();
    assert_eq!(names(&ts.levels[0]), ["a,b,c,d"]);
    assert_eq!(names(&ts.levels[1]), ["a,b", "c,d"]);
    for l in &ts.levels[2..] {
        assert_eq!(names(l), ["a", "b", "c", "d"]);
    }
    // Data reached the columnar levels, in every group, and each group's files add up.
    let deep: Vec<_> = ts.levels[2..].iter().filter(|l| l.files > 0).collect();
    assert!(!deep.is_empty(), "nothing below L1: {ts:?}");
    for l in ts.levels.iter().filter(|l| l.files > 0) {
        if row_groups && l.level > 0 {
            // Each file holds every group: each group counts them all.
            assert!(l.groups.iter().all(|g| g.files == l.files && g.bytes == l.bytes), "L{}: {l:?}", l.level);
        } else {
            assert_eq!(l.groups.iter().map(|g| g.files).sum::<usize>(), l.files, "L{}", l.level);
            assert_eq!(l.groups.iter().map(|g| g.bytes).sum::<u64>(), l.bytes, "L{}", l.level);
        }
        let (lo, hi) = l.seq_range.unwrap();
        for g in l.groups.iter().filter(|g| g.files > 0) {
            let (glo, ghi) = g.seq_range.unwrap();
            assert!(lo <= glo && ghi <= hi, "L{} group age band inside the level's", l.level);
        }
    }
    // Every file stores exactly a group of its level.
    assert!(db.verify().unwrap() >= 4);

    // Reads see the updates, whichever groups and levels hold them.
    let proj = t.projection(&["c", "d"]).unwrap();
    for i in (0..n).step_by(97) {
        let c = if i % 3 == 0 { -i } else { 3 * i };
        let got = t.get(&[Value::Int(i)], &proj, &ReadOptions::default()).unwrap();
        assert_eq!(got, Some(vec![Value::Int(c), Value::Int(4 * i)]), "key {i}");
    }
    let sum: i64 = t
        .scan(&KeyRange::all(), &t.projection(&["a"]).unwrap(), &ReadOptions::default())
        .unwrap()
        .map(|r| match r.unwrap()[0] {
            Value::Int(v) => i64::from(v),
            ref other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(sum, i64::from(n) * i64::from(n - 1) / 2);

    // Workload counters: point reads of (c,d) touched c and d only; the scan of `a` only `a`.
    let st = db.stats();
    let ts = &st.tables[0];
    let served: u64 = ts.levels.iter().map(|l| l.workload.point_reads).sum();
    assert!(served >= (n as u64).div_ceil(97), "point reads served: {served}");
    for l in &ts.levels {
        for c in &l.workload.columns {
            match c.column.as_str() {
                "c" | "d" => assert_eq!(c.scans, 0, "L{}: {c:?}", l.level),
                "a" => assert_eq!(c.point_reads, 0, "L{}: {c:?}", l.level),
                _ => assert_eq!((c.point_reads, c.scans), (0, 0), "L{}: {c:?}", l.level),
            }
        }
    }
    assert_eq!(ts.memtable_workload.updates, (n as u64).div_ceil(3));
    assert!(ts.levels.iter().any(|l| l.workload.scans > 0));

    // The layout is stored with the table.
    db.close().unwrap();
    let db = Db::open("/layout", tiny_options(fs)).unwrap();
    assert_eq!(db.stats().tables[0].layout, ts.layout);
    db.verify().unwrap();
}

/// The rows a relayout test writes: `n` keys, `c` updated on every third.
fn load(t: &Table, n: i32) {
    for i in 0..n {
        t.insert(&[Value::Int(i), Value::Int(i), Value::Int(2 * i), Value::Int(3 * i), Value::Int(4 * i)]).unwrap();
    }
    for i in (0..n).step_by(3) {
        t.update(&[Value::Int(i)], &[("c", Value::Int(-i))]).unwrap();
    }
}

/// Checks every row of [`load`] by full scan and some by point reads of two columns.
fn check_rows(t: &Table, n: i32, when: &str) {
    let row = |i: i32| {
        let c = if i % 3 == 0 { -i } else { 3 * i };
        vec![Value::Int(i), Value::Int(i), Value::Int(2 * i), Value::Int(c), Value::Int(4 * i)]
    };
    let got: Vec<Vec<Value>> =
        t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap().map(Result::unwrap).collect();
    assert_eq!(got.len(), n as usize, "{when}: row count");
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r, &row(i as i32), "{when}: scanned row {i}");
    }
    let proj = t.projection(&["c", "a"]).unwrap();
    for i in (0..n).step_by(89) {
        let got = t.get(&[Value::Int(i)], &proj, &ReadOptions::default()).unwrap();
        assert_eq!(got, Some(vec![row(i)[3].clone(), Value::Int(i)]), "{when}: get {i}");
    }
}

/// A layout change on a live table: the new layout is in force at once, old files are rewritten
/// at the rate given, reads are right before, during and after, the change survives a restart
/// half-way, and a change back to rows converts everything again.
#[test]
fn set_layout_rewrites_old_files_in_the_background() {
    let fs = Arc::new(FaultFs::new());
    // One byte per second: after the first file, the re-layout waits (for this test's life).
    let slow = || Options { relayout_bytes_per_sec: 1, ..tiny_options(fs.clone()) };
    let db = Db::open("/relayout", slow()).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let n = 6000;
    load(&t, n);
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let files = |db: &Db| db.stats().tables[0].levels[1..].iter().map(|l| l.files).sum::<usize>();
    assert!(files(&db) >= 4, "too few files below Level-0 to test with: {}", files(&db));
    assert_eq!(db.stats().tables[0].relayout_files, 0);

    let spec = "L1: (a,b) (c,d); L2-: column";
    db.set_layout("t", Some(spec)).unwrap();
    let st = db.stats();
    assert_eq!(st.tables[0].layout, "L0: row; L1: (a,b) (c,d); L2: column; L3: column; L4: column; L5: column");
    let pending = st.tables[0].relayout_files;
    assert!(pending > 0, "no file waits for the re-layout right after the change");
    check_rows(&t, n, "right after the change");
    // Writes go on, and what compacts from now on is in the new layout.
    for i in n..n + 2000 {
        t.insert(&[Value::Int(i), Value::Int(i), Value::Int(2 * i), Value::Int(3 * i), Value::Int(4 * i)]).unwrap();
    }
    for i in n..n + 2000 {
        t.delete(&[Value::Int(i)]).unwrap();
    }
    db.flush().unwrap();
    check_rows(&t, n, "while files wait");
    db.verify().unwrap();
    let waiting = db.stats().tables[0].relayout_files;
    assert!(waiting > 0, "the rate of one byte a second let every file through");

    // A restart half-way keeps the layout and the files still to rewrite.
    drop(t);
    db.close().unwrap();
    let db = Db::open("/relayout", tiny_options(fs.clone())).unwrap();
    let t = db.table("t").unwrap();
    assert!(db.stats().tables[0].layout.starts_with("L0: row; L1: (a,b) (c,d); L2: column"));
    check_rows(&t, n, "after the restart");
    db.wait_for_compactions().unwrap();
    let st = db.stats();
    assert_eq!(st.tables[0].relayout_files, 0, "files left in the old layout");
    assert!(st.relayouts > 0 && st.relayout_bytes > 0, "no re-layout ran after the restart: {st:?}");
    check_rows(&t, n, "after the re-layout");
    db.verify().unwrap();
    db.check_supersede_marks().unwrap();

    // And back to rows: every file was written in groups, so every one is rewritten.
    db.set_layout("t", None).unwrap();
    assert!(db.stats().tables[0].relayout_files > 0);
    db.wait_for_compactions().unwrap();
    assert_eq!(db.stats().tables[0].relayout_files, 0);
    assert!(db.stats().tables[0].layout.starts_with("L0: row; L1: row"));
    check_rows(&t, n, "back in rows");
    db.verify().unwrap();

    // What cannot change in place is refused, naming why.
    let e = db.set_layout("t", Some("L1-: (a,b,z)")).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(matches!(db.set_layout("nope", None), Err(Error::UnknownTable(_))));
    db.create_table("runs", schema(), TableOptions::default().with_row_groups(false)).unwrap();
    let e = db.set_layout("runs", Some(spec)).unwrap_err();
    assert!(e.to_string().contains("one run per column group"), "{e}");
}

/// A crash while files are being rewritten into a new layout, with a writer committing
/// synced writes meanwhile: after the restart every acknowledged write is there, every file
/// checks, and the re-layout finishes.
#[test]
fn a_crash_during_a_relayout_loses_nothing() {
    for seed in [1u64, 2, 3] {
        println!("seed {seed}");
        let fs = Arc::new(FaultFs::new());
        let db = Arc::new(Db::open("/crash", tiny_options(fs.clone())).unwrap());
        let t = db.create_table("t", schema(), TableOptions::with_layout("L1-: (a,b) (c,d)")).unwrap();
        let n = 6000;
        load(&t, n);
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        db.set_layout("t", Some("L1: (a) (b) (c,d); L2-: column")).unwrap();
        // A writer appends synced rows past `n` while the re-layout runs; the crash stops it.
        let acked = Arc::new(std::sync::atomic::AtomicI32::new(n));
        let writer = {
            let (db, t, acked) = (db.clone(), t.clone(), acked.clone());
            std::thread::spawn(move || {
                for i in n.. {
                    let mut b = strata::WriteBatch::new();
                    let row = [Value::Int(i), Value::Int(i), Value::Int(2 * i), Value::Int(3 * i), Value::Int(4 * i)];
                    if b.insert(&t, &row).is_err() || db.write(b, &strata::WriteOptions { sync: true }).is_err() {
                        return;
                    }
                    acked.store(i + 1, std::sync::atomic::Ordering::SeqCst);
                }
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20 + 15 * seed));
        let before = db.stats();
        fs.crash(Some(seed));
        println!("crash after {} files rewritten, {} left", before.relayouts, before.tables[0].relayout_files);
        writer.join().unwrap();
        let acked = acked.load(std::sync::atomic::Ordering::SeqCst);
        drop(t);
        drop(Arc::try_unwrap(db).ok().expect("the writer released the db"));
        fs.restart();

        let db = Db::open("/crash", tiny_options(fs.clone())).unwrap();
        let t = db.table("t").unwrap();
        db.verify().unwrap();
        let got = t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap().count();
        assert!(got >= acked as usize, "seed {seed}: {got} rows after the crash, {acked} acknowledged");
        db.wait_for_compactions().unwrap();
        assert_eq!(db.stats().tables[0].relayout_files, 0, "seed {seed}: files left in the old layout");
        let rows: Vec<Vec<Value>> =
            t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap().map(Result::unwrap).collect();
        assert_eq!(rows.len(), got, "seed {seed}: the re-layout changed the row count");
        let first: Vec<Vec<Value>> = rows[..n as usize].to_vec();
        let c = |i: i32| if i % 3 == 0 { -i } else { 3 * i };
        for (i, r) in first.iter().enumerate() {
            let i = i as i32;
            assert_eq!(r, &[Value::Int(i), Value::Int(i), Value::Int(2 * i), Value::Int(c(i)), Value::Int(4 * i)]);
        }
        db.verify().unwrap();
        db.check_supersede_marks().unwrap();
        db.close().unwrap();
    }
}
