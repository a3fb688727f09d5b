//! `strata-bench snapshot-reads`: what snapshot filters (Kim et al., seed 001 §IV) save. One
//! writer updates random keys continuously; a reader takes a snapshot, waits a think time while
//! the writer's updates are flushed into newer files, then performs point lookups (uniform and
//! zipfian keys) and range scans at that snapshot. Each of four configurations — snapshot filter
//! off/on × bloom filters off/on — runs on a fresh database; reported per configuration: files
//! searched per lookup, files left out by the snapshot filter and by bloom filters per lookup,
//! bytes of blocks read from files per lookup and per scan (the reading thread's own, see
//! `strata::thread_io`), lookup latency and scan latency.
//!
//! The defaults make the snapshot older than many flushes relative to the table: 50,000 keys of
//! about 110 bytes under a writer whose 1 MiB memtables each update about a sixth of them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde_json::json;
use strata::{Column, ColumnType, Db, KeyRange, Options, Projection, ReadOptions, Schema, TableOptions, Value};

use crate::harness::{Latency, Progress, Results};

#[derive(Parser, Debug)]
pub(crate) struct SnapshotReadsArgs {
    /// Keys in the table.
    #[arg(long, default_value_t = 50_000)]
    keys: i64,
    /// Point lookups per key distribution and configuration.
    #[arg(long, default_value_t = 1_000_000)]
    lookups: u64,
    /// Milliseconds between taking the snapshot and reading at it.
    #[arg(long, default_value_t = 2000)]
    think_ms: u64,
    /// Bytes of the value column.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Memtable size in KiB (small, so the think time sees several flushes).
    #[arg(long, default_value_t = 1024)]
    memtable_kib: usize,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directory for results.json and chart.png.
    #[arg(long, default_value = "bench-out")]
    out: std::path::PathBuf,
}

fn value(rng: &mut StdRng, n: usize) -> Value {
    Value::Bytea((0..n).map(|_| rng.gen()).collect())
}

/// Reads at an old snapshot with one configuration; adds its figures to `results`.
fn one(a: &SnapshotReadsArgs, filter: bool, bloom: bool, results: &mut Results) -> Result<(), String> {
    let e = |e: strata::Error| e.to_string();
    let variant = format!("filter {}, bloom {}", if filter { "on" } else { "off" }, if bloom { "on" } else { "off" });
    let dir = a.out.join("data").join(variant.replace([' ', ','], ""));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = Options {
        memtable_size: a.memtable_kib << 10,
        snapshot_filter: filter,
        bloom_bits_per_key: if bloom { 10 } else { 0 },
        ..Options::default()
    };
    let config = format!("{} KiB memtable, think time {} ms, {} keys", a.memtable_kib, a.think_ms, a.keys);
    let db = Db::open(&dir, opts).map_err(e)?;
    let schema =
        Schema::new(vec![Column::not_null("k", ColumnType::BigInt), Column::new("v", ColumnType::Bytea)], &["k"])
            .map_err(e)?;
    let t = db.create_table("t", schema, TableOptions::default()).map_err(e)?;
    let mut rng = StdRng::seed_from_u64(a.seed);
    let progress = Progress::new(&format!("{variant}: load"), a.keys as u64);
    for k in 0..a.keys {
        t.insert(&[Value::BigInt(k), value(&mut rng, a.value_bytes)]).map_err(e)?;
        progress.set(k as u64 + 1);
    }
    progress.finish();
    db.flush().map_err(e)?;
    db.wait_for_compactions().map_err(e)?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<(), String> {
        let writer = s.spawn(|| -> Result<(), String> {
            let mut rng = StdRng::seed_from_u64(a.seed ^ 0x5eed);
            while !stop.load(Ordering::Relaxed) {
                let k = rng.gen_range(0..a.keys);
                t.insert(&[Value::BigInt(k), value(&mut rng, a.value_bytes)]).map_err(e)?;
            }
            Ok(())
        });
        let mut read = || -> Result<(), String> {
            let add =
                |r: &mut Results, m: String, v: f64, u: &str| r.add_variant("strata", &variant, &config, &m, v, u);
            let snap = db.snapshot();
            std::thread::sleep(Duration::from_millis(a.think_ms));
            let ro = ReadOptions { snapshot: Some(&snap) };
            let zipf = Zipf::new(a.keys as u64, 0.99).map_err(|x| x.to_string())?;
            let mut rng = StdRng::seed_from_u64(a.seed ^ 0x1007);
            for dist in ["uniform", "zipfian"] {
                let before = db.stats();
                let io = strata::thread_io();
                let mut lat = Latency::new();
                for _ in 0..a.lookups {
                    let k = match dist {
                        "uniform" => rng.gen_range(0..a.keys),
                        _ => zipf.sample(&mut rng) as i64 - 1,
                    };
                    let t0 = Instant::now();
                    let got = t.get(&[Value::BigInt(k)], &Projection::All, &ro).map_err(e)?;
                    lat.record(t0.elapsed());
                    if got.is_none() {
                        return Err(format!("key {k} is missing at the snapshot"));
                    }
                }
                let after = db.stats();
                let io = strata::thread_io().since(io);
                let per = |x: u64, y: u64| (x - y) as f64 / a.lookups as f64;
                add(
                    results,
                    format!("{dist}: files searched per lookup"),
                    per(after.files_probed, before.files_probed),
                    "files",
                );
                add(
                    results,
                    format!("{dist}: files skipped by snapshot per lookup"),
                    per(after.files_skipped_by_snapshot, before.files_skipped_by_snapshot),
                    "files",
                );
                add(
                    results,
                    format!("{dist}: files skipped by bloom per lookup"),
                    per(after.files_skipped_by_bloom, before.files_skipped_by_bloom),
                    "files",
                );
                add(results, format!("{dist}: bytes read per lookup"), per(io.block_read_bytes, 0), "B");
                add(results, format!("{dist}: lookup p50"), lat.quantile(0.5), "us");
                add(results, format!("{dist}: lookup p99"), lat.quantile(0.99), "us");
            }
            for n in [100i64, 10_000, a.keys] {
                let mut lat = Latency::new();
                let runs = if n >= a.keys { 3 } else { 50 };
                let io = strata::thread_io();
                for _ in 0..runs {
                    let lo = rng.gen_range(0..=(a.keys - n));
                    let range = KeyRange::half_open(vec![Value::BigInt(lo)], vec![Value::BigInt(lo + n)]);
                    let t0 = Instant::now();
                    let rows = t.scan(&range, &Projection::All, &ro).map_err(e)?.count();
                    lat.record(t0.elapsed());
                    if rows as i64 != n {
                        return Err(format!("scan of {n} keys from {lo} returned {rows} rows"));
                    }
                }
                let io = strata::thread_io().since(io);
                add(results, format!("scan {n} keys p50"), lat.quantile(0.5), "us");
                add(
                    results,
                    format!("scan {n} keys: KiB read per scan"),
                    io.block_read_bytes as f64 / 1024.0 / runs as f64,
                    "KiB",
                );
            }
            Ok(())
        };
        let r = read();
        stop.store(true, Ordering::Relaxed);
        writer.join().map_err(|_| "writer panicked".to_string())??;
        r
    })?;
    drop(t);
    db.close().map_err(e)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

pub(crate) fn snapshot_reads(a: &SnapshotReadsArgs) -> Result<(), String> {
    let mut results = Results::new(
        "snapshot-reads",
        [
            ("keys", json!(a.keys)),
            ("lookups", json!(a.lookups)),
            ("think_ms", json!(a.think_ms)),
            ("value_bytes", json!(a.value_bytes)),
            ("memtable_kib", json!(a.memtable_kib)),
            ("seed", json!(a.seed)),
        ],
    );
    for (filter, bloom) in [(true, true), (false, true), (true, false), (false, false)] {
        one(a, filter, bloom, &mut results)?;
    }
    results.finish(&a.out)
}
