//! What one point read and one write cost in locks and shared writes, counted per thread by
//! [`crate::sync`] (the crate's unit tests always count). A 2-core machine cannot show a
//! convoy in timings; these counts show whether the paths are free of one.

use std::sync::Arc;

use super::*;
use crate::sync::{thread_counts, ThreadCounts};
use crate::vfs::FaultFs;
use crate::{Column, ColumnType, Value};

const ROWS: i64 = 2_000;

fn options() -> Options {
    let fs: Arc<dyn Fs> = Arc::new(FaultFs::new());
    Options { memtable_size: 256 << 10, block_size: 2048, block_cache_size: 64 << 20, fs, ..Options::default() }
}

/// A table `t (id, a, b, c)` with `opts`, rows `0..ROWS` spread over levels by flushes and
/// compactions, then the newest tenth updated in the memtable.
fn setup(opts: TableOptions) -> (Db, Table) {
    let db = Db::open("/db", options()).unwrap();
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
    let t = db.create_table("t", schema, opts).unwrap();
    for i in 0..ROWS {
        t.insert(&[
            Value::BigInt(i),
            Value::Int(i as i32),
            Value::Int(-(i as i32)),
            Value::Text(format!("row {i:05}")),
        ])
        .unwrap();
        if i % 500 == 499 {
            db.flush().unwrap();
        }
    }
    db.wait_for_compactions().unwrap();
    for i in (0..ROWS).step_by(10) {
        t.update(&[Value::BigInt(i)], &[("a", Value::Int(-1))]).unwrap();
    }
    (db, t)
}

/// The counts of `f` on this thread.
fn counted<T>(f: impl FnOnce() -> T) -> (T, ThreadCounts) {
    let before = thread_counts();
    let out = f();
    (out, thread_counts().since(before))
}

fn point_reads_take_no_lock(opts: TableOptions) {
    let (db, t) = setup(opts);
    // The rows are in the memtable, Level-0 and deeper levels.
    let (stats, c) = counted(|| db.stats());
    assert!(c.locks > 0, "counting is off: Db::stats took no lock");
    let files: Vec<usize> = stats.tables[0].levels.iter().map(|l| l.files).collect();
    assert!(files.iter().skip(1).any(|&n| n > 0), "nothing below Level-0: {files:?}");
    let read = |i: i64| t.get(&[Value::BigInt(i)], &Projection::All, &ReadOptions::default()).unwrap();
    // Every block a read needs is cached by a first pass.
    for i in 0..ROWS {
        assert!(read(i).is_some());
    }
    let io = crate::thread_io();
    for i in 0..ROWS {
        let (row, c) = counted(|| read(i));
        let row = row.unwrap();
        let a = if i % 10 == 0 { -1 } else { i as i32 };
        assert_eq!(row[1], Value::Int(a), "row {i}");
        // The first pass set every cached block's CLOCK bit: nothing is left to write.
        assert_eq!((c.locks, c.shared_writes), (0, 0), "a point read of key {i} took {c:?}");
    }
    assert_eq!(crate::thread_io().since(io).block_reads, 0, "the second pass read blocks from files");
    // Reads at a snapshot too.
    let snap = db.snapshot();
    let ropts = ReadOptions { snapshot: Some(&snap) };
    let (row, c) = counted(|| t.get(&[Value::BigInt(7)], &Projection::All, &ropts).unwrap());
    assert!(row.is_some());
    assert_eq!((c.locks, c.shared_writes), (0, 0), "a point read at a snapshot took {c:?}");
}

#[test]
fn point_reads_from_the_block_cache_take_no_lock() {
    point_reads_take_no_lock(TableOptions::default());
}

#[test]
fn point_reads_of_column_groups_take_no_lock() {
    point_reads_take_no_lock(TableOptions::with_layout("L1-: (a) (b,c)"));
    point_reads_take_no_lock(TableOptions::with_layout("L1-: column").with_row_groups(false));
}

#[test]
fn a_write_takes_one_lock() {
    // A memtable that does not fill: a write that rotates it takes the view's and the
    // background's locks as well (once per memtable).
    let db = Db::open("/db", Options { memtable_size: 64 << 20, ..options() }).unwrap();
    let schema =
        Schema::new(vec![Column::new("id", ColumnType::BigInt), Column::new("a", ColumnType::Int)], &["id"]).unwrap();
    let t = db.create_table("t", schema, TableOptions::default()).unwrap();
    let mut most = ThreadCounts::default();
    for i in 0..3_000i64 {
        let k = [Value::BigInt(i % 1_000)];
        let (r, c) = counted(|| match i / 1_000 {
            0 => t.insert(&[Value::BigInt(i), Value::Int(0)]),
            // Updates of the same keys again and again: their partial rows fold into full rows,
            // which reads the row before (a point read, lock-free).
            1 => t.update(&k, &[("a", Value::Int(i as i32))]),
            _ => t.delete(&k),
        });
        r.unwrap();
        assert!(c.locks <= 1 && c.waits == 0, "write {i} took {c:?}");
        most.locks = most.locks.max(c.locks);
        most.shared_writes = most.shared_writes.max(c.shared_writes);
    }
    assert_eq!(most.locks, 1, "a write took no lock: counting is off");
    assert!(t.get(&[Value::BigInt(5)], &Projection::All, &ReadOptions::default()).unwrap().is_none());
    // While a write transaction is open, the leader also records the rows it commits (one more
    // lock, the conflict window's), and a transaction's commit takes the batch ranges' too.
    let txn = db.begin(&TxnOptions::default()).unwrap();
    let (r, c) = counted(|| t.insert(&[Value::BigInt(1), Value::Int(1)]));
    r.unwrap();
    assert_eq!(c.locks, 2, "{c:?}");
    drop(txn);
    let (r, c) = counted(|| t.insert(&[Value::BigInt(2), Value::Int(2)]));
    r.unwrap();
    assert_eq!(c.locks, 1, "{c:?}");
}
