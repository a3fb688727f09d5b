//! The HTAP IO measures of Kim et al. (seed 001). Snapshot filters (§IV): a read at an old
//! snapshot leaves out the files whose every version is newer than the snapshot, by the smallest
//! sequence number each file keeps in memory; a read at a newer snapshot still searches them.
//! Amplification accounting: bytes compaction reads and writes, per level.

use strata::{Column, ColumnType, Db, KeyRange, Options, Projection, ReadOptions, Schema, TableOptions, Value};

fn open(dir: &std::path::Path, filter: bool) -> (Db, strata::Table) {
    let opts = Options { snapshot_filter: filter, ..Options::default() };
    let db = Db::open(dir, opts).expect("open");
    let schema =
        Schema::new(vec![Column::not_null("k", ColumnType::BigInt), Column::new("v", ColumnType::Int)], &["k"])
            .expect("schema");
    let t = db.create_table("t", schema, TableOptions::default()).expect("create");
    (db, t)
}

fn row(k: i64, v: i32) -> Vec<Value> {
    vec![Value::BigInt(k), Value::Int(v)]
}

/// Loads two Level-0 files around a snapshot: the older holds keys 1-3, the newer (every version
/// after the snapshot) updates key 2 and adds key 4. Returns the filter counters the reads add.
fn run(filter: bool) -> (u64, u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let (db, t) = open(dir.path(), filter);
    for k in 1..=3 {
        t.insert(&row(k, 10 * k as i32)).expect("insert");
    }
    db.flush().expect("flush");
    let old = db.snapshot();
    t.insert(&row(2, 21)).expect("update");
    t.insert(&row(4, 40)).expect("insert");
    db.flush().expect("flush");
    assert_eq!(db.stats().tables[0].levels[0].files, 2, "two Level-0 files");

    let at_old = ReadOptions { snapshot: Some(&old) };
    let all = Projection::All;
    let before = db.stats();
    // The old snapshot sees key 2's first value and no key 4, whatever the filter does.
    assert_eq!(t.get(&[Value::BigInt(2)], &all, &at_old).expect("get"), Some(row(2, 20)));
    assert_eq!(t.get(&[Value::BigInt(4)], &all, &at_old).expect("get"), None);
    let scanned: Vec<Vec<Value>> =
        t.scan(&KeyRange::all(), &all, &at_old).expect("scan").collect::<Result<_, _>>().expect("rows");
    assert_eq!(scanned, vec![row(1, 10), row(2, 20), row(3, 30)]);
    let old_reads = db.stats();
    let skipped_old = old_reads.files_skipped_by_snapshot - before.files_skipped_by_snapshot;

    // The newest read searches the newer file and sees its versions.
    let now = ReadOptions::default();
    assert_eq!(t.get(&[Value::BigInt(2)], &all, &now).expect("get"), Some(row(2, 21)));
    assert_eq!(t.get(&[Value::BigInt(4)], &all, &now).expect("get"), Some(row(4, 40)));
    let new_reads = db.stats();
    assert_eq!(
        new_reads.files_skipped_by_snapshot, old_reads.files_skipped_by_snapshot,
        "a read at the newest snapshot skipped a file"
    );
    assert!(new_reads.files_probed >= old_reads.files_probed + 2, "the newest reads searched both keys' files");
    (skipped_old, old_reads.files_probed - before.files_probed)
}

#[test]
fn an_old_snapshot_skips_newer_files_and_a_new_read_does_not() {
    let (skipped, probed) = run(true);
    // Point reads of keys 2 and 4 and the scan each leave the newer file out.
    assert_eq!(skipped, 3, "files skipped by the snapshot filter");
    // Only key 2's lookup reaches a data block (in the older file; key 4 lies outside it).
    assert_eq!(probed, 1, "files probed");
}

#[test]
fn without_the_filter_the_same_reads_search_the_newer_file() {
    let (skipped, probed) = run(false);
    assert_eq!(skipped, 0);
    // Keys 2 and 4 are both in the newer file's range: two more files searched than with the filter.
    assert_eq!(probed, 3, "files probed");
}

/// An analytical scan at a snapshot taken before a flush: with the filter, the newer Level-0 file
/// is not even looked at; without it, its keys are resolved over each block it overlaps (none is
/// visible at the snapshot). Returns blocks passed on whole, rows merged, and blocks over which
/// runs above were resolved.
fn bulk_scan_at_old_snapshot(filter: bool) -> (u64, u64, u64) {
    use strata::scan::{batch_rows, ScanRequest};
    let dir = tempfile::tempdir().expect("temp dir");
    let db = Db::open(dir.path(), Options { snapshot_filter: filter, ..Options::default() }).expect("open");
    let schema =
        Schema::new(vec![Column::not_null("k", ColumnType::BigInt), Column::new("v", ColumnType::Int)], &["k"])
            .expect("schema");
    let t = db.create_table("t", schema, TableOptions::with_layout("L1-: column")).expect("create");
    for k in 0..20_000 {
        t.insert(&row(k, 1)).expect("insert");
    }
    db.compact_range("t", &KeyRange::all()).expect("compact");
    let old = db.snapshot();
    for k in (0..20_000).step_by(100) {
        t.insert(&row(k, 2)).expect("update");
    }
    db.flush().expect("flush");
    let before = db.scan_stats();
    let req = ScanRequest::new();
    let mut rows = 0;
    for b in t.scan_batches(&req, &ReadOptions { snapshot: Some(&old) }).expect("scan") {
        for r in batch_rows(&b.expect("batch")) {
            assert_eq!(r[1], Value::Int(1), "the old snapshot sees only the first values: {r:?}");
            rows += 1;
        }
    }
    assert_eq!(rows, 20_000);
    let after = db.scan_stats();
    (
        after.bulk_blocks - before.bulk_blocks,
        after.merged_rows - before.merged_rows,
        after.run_patched_blocks - before.run_patched_blocks,
    )
}

#[test]
fn analytical_scans_at_an_old_snapshot_pass_blocks_on_whole() {
    let (bulk, merged, resolved) = bulk_scan_at_old_snapshot(true);
    assert!(
        bulk > 0 && merged == 0 && resolved == 0,
        "with the filter: {bulk} blocks whole, {merged} rows merged, {resolved} blocks resolved the newer file"
    );
    let (bulk, merged, resolved) = bulk_scan_at_old_snapshot(false);
    assert!(
        bulk > 0 && merged == 0 && resolved > 0,
        "without the filter the newer file's keys are resolved over the blocks: {bulk} blocks whole, \
         {merged} rows merged, {resolved} blocks resolved it"
    );
}

/// Amplification accounting: a compaction's input bytes are counted as read from the levels they
/// were in, and its output as written into the level below.
#[test]
fn compaction_reads_are_counted_per_level() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (db, t) = open(dir.path(), true);
    for round in 0..3 {
        for k in 0..2_000 {
            t.insert(&row(k, round)).expect("insert");
        }
        db.flush().expect("flush");
    }
    let before = db.stats();
    let l0_bytes = before.tables[0].levels[0].bytes;
    assert_eq!(before.tables[0].levels[0].bytes_read, 0, "nothing compacted yet");
    assert!(before.tables[0].levels[0].bytes_written >= l0_bytes, "flushes count as Level-0 writes");
    db.compact_range("t", &KeyRange::all()).expect("compact");
    let after = db.stats();
    let read: u64 = after.tables[0].levels.iter().map(|l| l.bytes_read).sum();
    assert!(after.tables[0].levels[0].bytes_read >= l0_bytes, "Level-0 inputs read: {read}");
    let written_below: u64 = after.tables[0].levels[1..].iter().map(|l| l.bytes_written).sum();
    assert!(written_below > 0, "compaction output counted");
}

/// Per-query IO for callers: the block reads a point read or scan makes show in the calling
/// thread's counters, and another thread's reads do not.
#[test]
fn thread_io_counts_the_calling_threads_block_reads() {
    let dir = tempfile::tempdir().expect("temp dir");
    let opts = Options { block_cache_size: 0, ..Options::default() };
    let db = Db::open(dir.path(), opts).expect("open");
    let schema =
        Schema::new(vec![Column::not_null("k", ColumnType::BigInt), Column::new("v", ColumnType::Int)], &["k"])
            .expect("schema");
    let t = db.create_table("t", schema, TableOptions::default()).expect("create");
    for k in 0..5_000 {
        t.insert(&row(k, k as i32)).expect("insert");
    }
    db.flush().expect("flush");
    db.wait_for_compactions().expect("settle");
    let all = Projection::All;
    let ro = ReadOptions::default();

    let (stats0, io0) = (db.stats(), strata::thread_io());
    assert_eq!(t.get(&[Value::BigInt(1234)], &all, &ro).expect("get"), Some(row(1234, 1234)));
    let (stats1, io1) = (db.stats(), strata::thread_io());
    let get = io1.since(io0);
    assert_eq!(get.block_reads, 1, "an uncached point read reads one data block");
    assert_eq!(get.block_reads, stats1.block_reads - stats0.block_reads);
    assert_eq!(get.block_read_bytes, stats1.block_read_bytes - stats0.block_read_bytes);
    assert!(get.block_read_bytes > 0);

    let rows = t.scan(&KeyRange::all(), &all, &ro).expect("scan").count();
    assert_eq!(rows, 5_000);
    let scan = strata::thread_io().since(io1);
    assert!(scan.block_reads > 1, "a full scan reads every block: {scan:?}");

    let mine = strata::thread_io();
    std::thread::scope(|s| {
        s.spawn(|| t.get(&[Value::BigInt(7)], &all, &ro).expect("get"));
    });
    assert_eq!(strata::thread_io(), mine, "another thread's read counted on this one");
    assert!(db.stats().block_reads > stats1.block_reads + scan.block_reads, "the other thread read a block");
}
