//! Corruption: flip bits in SST, WAL, manifest and CURRENT files and check that strata reports a
//! corruption naming the file, and never returns wrong data.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata::vfs::FaultFs;
use strata::{
    Column, ColumnType, Db, Engine, KeyRange, Options, Projection, ReadOptions, Schema, Table, TableOptions, Value,
};

fn schema() -> Schema {
    Schema::new(
        vec![
            Column::new("id", ColumnType::BigInt),
            Column::new("a", ColumnType::Int),
            Column::new("s", ColumnType::Text),
        ],
        &["id"],
    )
    .unwrap()
}

fn row(i: i64) -> Vec<Value> {
    vec![
        Value::BigInt(i),
        Value::Int((i * 7) as i32),
        Value::Text(format!("row-{i}-{}", "z".repeat((i % 13) as usize))),
    ]
}

fn opts(fs: &FaultFs) -> Options {
    Options { memtable_size: 1 << 20, ..tiny_options(Arc::new(fs.clone())) }
}

fn files(fs: &FaultFs, pattern: &str) -> Vec<PathBuf> {
    fs.paths().into_iter().filter(|p| p.to_string_lossy().contains(pattern)).collect()
}

fn assert_names(err: &strata::Error, file: &Path) {
    let name = file.file_name().unwrap().to_string_lossy().to_string();
    assert!(err.is_corruption(), "expected corruption, got {err}");
    assert!(err.to_string().contains(&name), "error does not name {name}: {err}");
}

/// In files of whole rows, and in row-group files (a column layout: key pages, group pages and
/// their index).
#[test]
fn flipped_sst_bits_are_reported_never_wrong_data() {
    flip_sst_bits(TableOptions::default(), false);
    flip_sst_bits(TableOptions::with_layout("L1-: column"), false);
}

/// The same for files an ingest wrote straight into the last level.
#[test]
fn flipped_bits_in_ingested_files_are_reported_never_wrong_data() {
    flip_sst_bits(TableOptions::default(), true);
    flip_sst_bits(TableOptions::with_layout("L1-: column"), true);
}

/// Rows `0..3000` written (or, with `ingest`, ingested), then bits flipped one at a time.
fn flip_sst_bits(options: TableOptions, ingest: bool) {
    let fs = FaultFs::new();
    let dir = Path::new("/sst");
    let n = 3000;
    {
        let db = Db::open(dir, opts(&fs)).unwrap();
        let t = db.create_table("t", schema(), options).unwrap();
        if ingest {
            let st = t.ingest((0..n).map(row)).unwrap();
            assert!(st.level > 0 && st.files >= 3, "{st:?}");
        } else {
            for i in 0..n {
                t.insert(&row(i)).unwrap();
            }
            db.flush().unwrap();
            db.compact_range("t", &KeyRange::all()).unwrap();
        }
        db.close().unwrap();
    }
    let ssts = files(&fs, ".sst");
    assert!(ssts.len() >= 3, "want several SSTs, got {}", ssts.len());
    let seed = 7;
    let mut rng = StdRng::seed_from_u64(seed);
    for round in 0..60 {
        let file = &ssts[rng.gen_range(0..ssts.len())];
        let off = rng.gen_range(0..fs.file_len(file).unwrap());
        let bit = rng.gen_range(0..8);
        fs.flip_bit(file, off, bit).unwrap();
        let ctx = format!("seed {seed} round {round}: {} offset {off} bit {bit}", file.display());
        let db = Db::open(dir, opts(&fs)).unwrap();
        let t = db.table("t").unwrap();
        // A full scan: every row it yields is right; an error names the damaged file.
        let mut expect = 0;
        for r in t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap() {
            match r {
                Ok(r) => {
                    assert_eq!(r, row(expect), "{ctx}: scan returned wrong data");
                    expect += 1;
                }
                Err(e) => {
                    assert_names(&e, file);
                    break;
                }
            }
        }
        for _ in 0..50 {
            let k = rng.gen_range(0..n);
            match t.get(&[Value::BigInt(k)], &Projection::All, &ReadOptions::default()) {
                Ok(r) => assert_eq!(r, Some(row(k)), "{ctx}: get returned wrong data"),
                Err(e) => assert_names(&e, file),
            }
        }
        let err = db.verify().expect_err(&format!("{ctx}: verify missed the flip"));
        assert_names(&err, file);
        db.close().unwrap();
        fs.flip_bit(file, off, bit).unwrap();
    }
}

/// A fresh database on `fs` with table `t` holding rows `0..200`, flushed.
fn flushed_db(fs: &FaultFs) -> (Db, Table) {
    let db = Db::open("/db", opts(fs)).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    for i in 0..200 {
        t.insert(&row(i)).unwrap();
    }
    db.flush().unwrap();
    (db, t)
}

/// A fresh database whose last 300 rows live only in the WAL (dropped without flush).
fn unflushed_db() -> FaultFs {
    let fs = FaultFs::new();
    let (db, t) = flushed_db(&fs);
    for i in 200..500 {
        t.insert(&row(i)).unwrap();
    }
    drop(db);
    fs
}

fn check_flips(suffix: &str, rounds: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for round in 0..rounds {
        let fs = unflushed_db();
        let targets: Vec<PathBuf> = files(&fs, suffix).into_iter().filter(|p| fs.file_len(p).unwrap() > 0).collect();
        assert_eq!(targets.len(), 1, "{suffix}: {targets:?}");
        let file = &targets[0];
        let off = rng.gen_range(0..fs.file_len(file).unwrap());
        let bit = rng.gen_range(0..8);
        fs.flip_bit(file, off, bit).unwrap();
        match Db::open("/db", opts(&fs)) {
            Err(e) => assert_names(&e, file),
            Ok(_) => panic!("seed {seed} round {round}: open accepted {} flipped at {off} bit {bit}", file.display()),
        }
    }
}

#[test]
fn flipped_wal_bits_fail_open_naming_the_log() {
    check_flips(".log", 60, 9);
}

#[test]
fn flipped_manifest_bits_fail_open_naming_the_manifest() {
    check_flips("MANIFEST-", 60, 10);
}

#[test]
fn unflushed_rows_survive_a_clean_reopen() {
    let fs = unflushed_db();
    let db = Db::open("/db", opts(&fs)).unwrap();
    let t = db.table("t").unwrap();
    let rows: Vec<Vec<Value>> =
        t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap().map(Result::unwrap).collect();
    assert_eq!(rows, (0..500).map(row).collect::<Vec<_>>());
}

#[test]
fn damaged_current_fails_open() {
    let fs = unflushed_db();
    fs.flip_bit(Path::new("/db/CURRENT"), 3, 2).unwrap();
    let err = Db::open("/db", opts(&fs)).err().expect("open must fail");
    assert!(err.to_string().contains("CURRENT") || err.to_string().contains("MANIFEST"), "{err}");
}

/// Supersede marks live in the manifest, in the version edit of the flush that made them: flip
/// bits inside that edit and open must fail naming the manifest (never drop the marks and let
/// superseded versions come back).
#[test]
fn flipped_bits_in_supersede_marks_fail_open_naming_the_manifest() {
    let seed = 11;
    let mut rng = StdRng::seed_from_u64(seed);
    for round in 0..40 {
        let fs = FaultFs::new();
        let (db, t) = flushed_db(&fs);
        let manifest = files(&fs, "MANIFEST-");
        assert_eq!(manifest.len(), 1, "{manifest:?}");
        let manifest = &manifest[0];
        let before = fs.file_len(manifest).unwrap();
        for i in (0..200).step_by(2) {
            t.update(&[Value::BigInt(i)], &[("a", Value::Int(-1))]).unwrap();
        }
        db.flush().unwrap();
        let after = fs.file_len(manifest).unwrap();
        // The second flush's edit: its new files and the marks on the first flush's files.
        assert!(after - before > 200, "the marks of 100 updates take more room: {before}..{after}");
        drop(t);
        db.close().unwrap();
        let off = rng.gen_range(before..after);
        let bit = rng.gen_range(0..8);
        fs.flip_bit(manifest, off, bit).unwrap();
        match Db::open("/db", opts(&fs)) {
            Err(e) => assert_names(&e, manifest),
            Ok(_) => panic!("seed {seed} round {round}: open accepted the manifest flipped at {off} bit {bit}"),
        }
    }
}

/// A lineage table checkpointed, then dropped with more rows only in the WAL: any flipped bit
/// of the checkpoint fails open with a corruption error naming it.
#[test]
fn flipped_lineage_checkpoint_bits_fail_open_naming_the_checkpoint() {
    let mut rng = StdRng::seed_from_u64(11);
    for round in 0..60 {
        let fs = FaultFs::new();
        let db = Db::open("/db", opts(&fs)).unwrap();
        let t = db.create_table("l", schema(), TableOptions::engine(Engine::Lineage)).unwrap();
        for i in 0..200 {
            t.insert(&row(i)).unwrap();
        }
        t.update(&[Value::BigInt(7)], &[("a", Value::Int(-1))]).unwrap();
        db.checkpoint().unwrap();
        for i in 200..300 {
            t.insert(&row(i)).unwrap();
        }
        drop(db);
        let targets = files(&fs, ".lck");
        assert_eq!(targets.len(), 1, "{targets:?}");
        let file = &targets[0];
        let off = rng.gen_range(0..fs.file_len(file).unwrap());
        let bit = rng.gen_range(0..8);
        fs.flip_bit(file, off, bit).unwrap();
        match Db::open("/db", opts(&fs)) {
            Err(e) => assert_names(&e, file),
            Ok(_) => panic!("round {round}: open accepted {} flipped at {off} bit {bit}", file.display()),
        }
    }
}

/// Without damage the same database reopens from its checkpoint and the WAL after it.
#[test]
fn a_lineage_table_reopens_from_its_checkpoint_and_the_wal() {
    let fs = FaultFs::new();
    let db = Db::open("/db", opts(&fs)).unwrap();
    let t = db.create_table("l", schema(), TableOptions::engine(Engine::Lineage)).unwrap();
    for i in 0..200 {
        t.insert(&row(i)).unwrap();
    }
    t.update(&[Value::BigInt(7)], &[("a", Value::Int(-1))]).unwrap();
    t.delete(&[Value::BigInt(8)]).unwrap();
    db.checkpoint().unwrap();
    let logs_before = files(&fs, ".log").len();
    for i in 200..300 {
        t.insert(&row(i)).unwrap();
    }
    t.update(&[Value::BigInt(9)], &[("a", Value::Int(-2))]).unwrap();
    drop(db);
    let db = Db::open("/db", opts(&fs)).unwrap();
    let t = db.table("l").unwrap();
    let rows: Vec<Vec<Value>> =
        t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap().map(Result::unwrap).collect();
    let mut want: Vec<Vec<Value>> = (0..300).filter(|&i| i != 8).map(row).collect();
    want[7][1] = Value::Int(-1);
    want[8][1] = Value::Int(-2);
    assert_eq!(rows, want);
    // The checkpoint let the WAL before it go (no LSM table needs it either).
    assert_eq!(logs_before, 1, "WAL files kept after a checkpoint: {:?}", files(&fs, ".log"));
}
