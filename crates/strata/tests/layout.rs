//! Column-group layouts through the public API: bad specs are rejected naming the problem, the
//! layout is stored with the table, compaction writes each level in that level's groups (seen
//! through `stats` and checked file by file by `verify`), and reads count where they were served.

mod common;

use std::sync::Arc;

use common::tiny_options;
use strata::vfs::FaultFs;
use strata::{Column, ColumnType, Db, Error, KeyRange, ReadOptions, Schema, TableOptions, Value};

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
