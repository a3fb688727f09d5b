//! The races of supersede vectors, made to happen on purpose: a flush that marks files a
//! compaction is rewriting, and a compaction that rewrites files a flush is marking. Either way
//! the marks must reach the compaction's outputs (`compaction::supersede`, the catch-up under
//! the version lock).

use std::sync::Arc;

use super::*;
use crate::column_group::group_id;
use crate::compaction::policy;
use crate::vfs::FaultFs;
use crate::{Column, ColumnType, Value};

fn options(fs: Arc<dyn Fs>) -> Options {
    Options {
        memtable_size: 1 << 20,
        // Background compaction never starts on its own: the tests run the one they need.
        l0_compaction_trigger: 100,
        l0_slowdown_trigger: 200,
        l0_stop_trigger: 300,
        l1_max_bytes: 1 << 30,
        block_size: 1024,
        compaction_threads: 1,
        fs,
        ..Options::default()
    }
}

const ROWS: i64 = 600;

/// A table `t (id, a, b, c)` with `layout`, rows `0..ROWS` flushed into one Level-0 file.
fn setup(layout: &str) -> (Db, Table) {
    let fs: Arc<dyn Fs> = Arc::new(FaultFs::new());
    let db = Db::open("/db", options(fs)).unwrap();
    let schema = Schema::new(
        vec![
            Column::new("id", ColumnType::BigInt),
            Column::new("a", ColumnType::Int),
            Column::new("b", ColumnType::Int),
            Column::new("c", ColumnType::Text),
        ],
        &["id"],
    )
    .unwrap();
    let t = db.create_table("t", schema, TableOptions::with_layout(layout)).unwrap();
    for i in 0..ROWS {
        t.insert(&[Value::BigInt(i), Value::Int(i as i32), Value::Int(-(i as i32)), Value::Text(format!("r{i}"))])
            .unwrap();
    }
    db.flush().unwrap();
    (db, t)
}

/// Newer versions of about half the rows: partial updates of one and of two columns, deletes,
/// full rows.
fn supersede_some(t: &Table) {
    for i in (0..ROWS).step_by(2) {
        let k = [Value::BigInt(i)];
        match i % 8 {
            0 => t.update(&k, &[("a", Value::Int(1))]).unwrap(),
            2 => t.update(&k, &[("b", Value::Int(2)), ("c", Value::Text("x".into()))]).unwrap(),
            4 => t.delete(&k).unwrap(),
            _ => t.insert(&[Value::BigInt(i), Value::Int(3), Value::Int(3), Value::Null]).unwrap(),
        }
    }
}

/// Compacts every Level-0 file of `t` into Level-1, on this thread.
fn compact_level0(inner: &DbInner, t: &Table) {
    let v = inner.view.pin().version.clone();
    let tv = v.tables.get(&t.info().id).unwrap();
    let inputs: Vec<_> = tv.levels[0].files().cloned().collect();
    assert!(!inputs.is_empty());
    let cg = group_id(&tv.info.runs.groups(0)[0]);
    let mut task = policy::task_over(tv, 0, cg, inputs, &Default::default(), 0.0).unwrap();
    task.trivial_move = false;
    inner.run_compaction(&task).unwrap();
}

/// Marks on the files of Level-1 (the compaction's outputs).
fn level1_marks(db: &Db, t: &Table) -> usize {
    let v = db.inner.view.pin().version.clone();
    let tv = v.tables.get(&t.info().id).unwrap();
    tv.levels[1].files().filter_map(|f| tv.marks_of(f.number)).map(|m| m.len()).sum()
}

#[test]
fn marks_made_by_a_flush_while_a_compaction_of_the_marked_files_runs_are_not_lost() {
    for layout in ["L1-: row", "L1-: column", "L1: (a) (b,c)"] {
        let (db, t) = setup(layout);
        // The compaction has written its outputs; before it installs them, a flush marks the
        // Level-0 file it is replacing.
        let (t2, inner) = (t.clone(), db.inner.clone());
        *db.inner.install_hook.lock() = Some((
            "compaction",
            Box::new(move || {
                supersede_some(&t2);
                inner.flush().unwrap();
            }),
        ));
        compact_level0(&db.inner, &t);
        assert!(db.inner.install_hook.lock().is_none(), "{layout}: the flush did not run during the compaction");
        assert!(level1_marks(&db, &t) >= ROWS as usize / 2, "{layout}: the flush's marks did not reach Level-1");
        db.check_supersede_marks().unwrap_or_else(|e| panic!("{layout}: {e}"));
    }
}

#[test]
fn a_compaction_while_a_flush_marks_its_inputs_gets_the_flushs_marks() {
    for layout in ["L1-: row", "L1-: column", "L1: (a) (b,c)"] {
        let (db, t) = setup(layout);
        supersede_some(&t);
        // The flush has marked the Level-0 file below it; before it installs, a compaction
        // rewrites that file into Level-1.
        let (t2, inner) = (t.clone(), db.inner.clone());
        *db.inner.install_hook.lock() = Some(("flush", Box::new(move || compact_level0(&inner, &t2))));
        db.flush().unwrap();
        assert!(db.inner.install_hook.lock().is_none(), "{layout}: the compaction did not run during the flush");
        assert!(level1_marks(&db, &t) >= ROWS as usize / 2, "{layout}: the flush's marks did not reach Level-1");
        db.check_supersede_marks().unwrap_or_else(|e| panic!("{layout}: {e}"));
        // They survive a restart (the manifest is replayed and rewritten).
        let marks = level1_marks(&db, &t);
        drop(t);
        let fs = db.inner.config.fs.clone();
        drop(db);
        let db = Db::open("/db", options(fs)).unwrap();
        let t = db.table("t").unwrap();
        assert_eq!(level1_marks(&db, &t), marks, "{layout}: marks after reopening");
        db.check_supersede_marks().unwrap_or_else(|e| panic!("{layout} after reopening: {e}"));
    }
}

/// Updates of keys that were never inserted change nothing (updates are blind); the first flush
/// of a table, with no run below it, must leave them out like every later flush does.
#[test]
fn a_first_flush_drops_partial_rows_over_no_row() {
    let fs: Arc<dyn Fs> = Arc::new(FaultFs::new());
    let db = Db::open("/db", options(fs)).unwrap();
    let schema =
        Schema::new(vec![Column::new("id", ColumnType::BigInt), Column::new("a", ColumnType::Int)], &["id"]).unwrap();
    let t = db.create_table("t", schema, TableOptions::default()).unwrap();
    t.update(&[Value::BigInt(7)], &[("a", Value::Int(1))]).unwrap();
    t.insert(&[Value::BigInt(8), Value::Int(2)]).unwrap();
    db.flush().unwrap();
    db.check_supersede_marks().unwrap();
    let rows: Vec<Vec<Value>> =
        t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap().map(Result::unwrap).collect();
    assert_eq!(rows, vec![vec![Value::BigInt(8), Value::Int(2)]]);
    assert_eq!(db.stats().tables[0].levels[0].entries, 1, "the partial row of key 7 was written");
}
