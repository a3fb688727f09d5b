//! Loads the LASER narrow table (BIGINT key + 30 INT columns) — 2,000,000 rows in shuffled key
//! order by default, `STRATA_LOAD_ROWS` to change — through the API with a 4 MiB memtable, T=10
//! and a 1 MiB level-1 target, waits for compaction to catch up, then checks the tree has at least
//! three populated levels and that every row reads back by scan (and a tenth of them by point
//! reads).

use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use strata::vfs::OsFs;
use strata::{
    Column, ColumnType, Db, KeyRange, Options, Projection, ReadOptions, Schema, TableOptions, Value, WriteBatch,
};

const COLS: usize = 30;

fn narrow() -> Schema {
    let mut cols = vec![Column::not_null("k", ColumnType::BigInt)];
    cols.extend((1..=COLS).map(|i| Column::not_null(format!("c{i}"), ColumnType::Int)));
    Schema::new(cols, &["k"]).unwrap()
}

/// Column values are a function of the key, so rows can be checked without keeping them.
fn row(k: i64) -> Vec<Value> {
    let mut r = Vec::with_capacity(COLS + 1);
    r.push(Value::BigInt(k));
    let mut x = (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for _ in 0..COLS {
        x ^= x >> 29;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        r.push(Value::Int(x as i32));
    }
    r
}

#[test]
fn two_million_narrow_rows_build_a_multi_level_tree_and_read_back() {
    let n: i64 = std::env::var("STRATA_LOAD_ROWS").ok().and_then(|s| s.parse().ok()).unwrap_or(2_000_000);
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        memtable_size: 4 << 20,
        level_size_ratio: 10,
        l1_max_bytes: 1 << 20,
        target_file_size: 4 << 20,
        block_cache_size: 16 << 20,
        fs: Arc::new(OsFs),
        ..Options::default()
    };
    let db = Db::open(tmp.path(), opts).unwrap();
    let t = db.create_table("narrow", narrow(), TableOptions::default()).unwrap();
    let mut keys: Vec<i64> = (0..n).collect();
    keys.shuffle(&mut rand::rngs::StdRng::seed_from_u64(42));
    let started = std::time::Instant::now();
    for chunk in keys.chunks(1000) {
        let mut b = WriteBatch::new();
        for &k in chunk {
            b.insert(&t, &row(k)).unwrap();
        }
        db.write(b, &Default::default()).unwrap();
    }
    eprintln!("load: {:?}", started.elapsed());
    let settle = std::time::Instant::now();
    db.wait_for_compactions().unwrap();
    eprintln!("compaction caught up in {:?}", settle.elapsed());
    let stats = db.stats();
    let populated: Vec<usize> = stats.tables[0].levels.iter().filter(|l| l.files > 0).map(|l| l.level).collect();
    eprintln!("levels: {:?}", stats.tables[0].levels.iter().map(|l| (l.level, l.files, l.bytes)).collect::<Vec<_>>());
    // Once compaction has caught up, levels 2 and 3 hold between one file and their targets of
    // 10 and 100 MB, and the rest of the ~270 MB sits in level 4.
    assert!(populated.len() >= 3, "expected at least three populated levels, got {populated:?}");

    let started = std::time::Instant::now();
    let mut next = 0i64;
    for r in t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap() {
        assert_eq!(r.unwrap(), row(next), "scan row {next}");
        next += 1;
    }
    assert_eq!(next, n, "scan returned {next} of {n} rows");
    eprintln!("scan: {:?}", started.elapsed());
    let started = std::time::Instant::now();
    // The scan read back every row; point reads check a tenth of them through the get path.
    for &k in keys.iter().step_by(10) {
        let got = t.get(&[Value::BigInt(k)], &Projection::All, &ReadOptions::default()).unwrap();
        assert_eq!(got, Some(row(k)), "get {k}");
    }
    eprintln!("gets: {:?}", started.elapsed());
}
