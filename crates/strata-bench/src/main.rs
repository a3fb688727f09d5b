//! `strata-bench`: benchmark harness for strata.
//!
//! strata alone:
//! - `engine` measures the core engine: single-row insert throughput with the WAL on and no
//!   fsync, insert throughput with an fsync per batch of 100 rows, point-read latency on the
//!   loaded tree, and peak RSS during the load against the configured memory budget.
//! - `laser` reproduces the shape of LASER's Fig. 7: blocks and bytes read per point read and per
//!   scan against projection size, for several column-group sizes (see `laser.rs`).
//! - `snapshot-reads` measures snapshot filters: files searched per lookup at an old snapshot
//!   (see `snapshot_reads.rs`).
//! - `write-amp` measures aligned compaction: write amplification per level and in total, off
//!   and on, with RocksDB's own figure beside it when built in (see `write_amp.rs`).
//!
//! strata beside its peers (RocksDB, PostgreSQL, DuckDB, SQLite, each behind a cargo feature; see
//! `peers/`), one table of every metric with ratios, `results.json` and `chart.png`:
//! - `laser-hw`: LASER's HTAP workload HW per strata layout (see `laser_hw.rs`);
//! - `ycsb`: the YCSB workloads (A-F and LogStore's variants), load and run phases (`ycsb.rs`);
//! - `ycsb-sharp`: TellStore's YCSB# scan queries, and strata's under a get/update load
//!   (`ycsb_sharp.rs`).

mod chart;
mod harness;
mod laser;
mod laser_hw;
mod peers;
mod snapshot_reads;
mod tables;
mod write_amp;
mod ycsb;
mod ycsb_sharp;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use strata::{
    Column, ColumnType, Db, Options, Projection, ReadOptions, Schema, TableOptions, Value, WriteBatch, WriteOptions,
};

#[derive(Parser)]
#[command(name = "strata-bench", about = "Benchmarks for the strata storage engine")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Core engine: inserts (no fsync / fsync per 100-row batch), point reads, peak memory.
    Engine(EngineArgs),
    /// LASER Fig. 7: point-read and scan cost against projection size, per column-group size.
    Laser(laser::LaserArgs),
    /// TellStore YCSB#: Q1-Q3 scan rates per thread, columnar vs row layout, idle and under load.
    YcsbSharp(ycsb_sharp::YcsbSharpArgs),
    /// YCSB A-F and LogStore's A-RMW, B-90, B-10, write-only: load and run throughput, latency.
    Ycsb(ycsb::YcsbArgs),
    /// LASER's HTAP workload HW: a steady insert/update stream with point reads and scans, per
    /// strata layout and per peer.
    LaserHw(laser_hw::LaserHwArgs),
    /// Kim et al.: point lookups and scans at an old snapshot under a writer, snapshot filter and
    /// bloom filters off/on; files searched per lookup.
    SnapshotReads(snapshot_reads::SnapshotReadsArgs),
    /// Kim et al.: write amplification of random overwrites per fanout and key skew, aligned
    /// compaction off/on (and RocksDB's, when built in).
    WriteAmp(write_amp::WriteAmpArgs),
}

#[derive(Parser)]
struct EngineArgs {
    /// Rows to load for the no-fsync insert run (shuffled keys).
    #[arg(long, default_value_t = 2_000_000)]
    rows: i64,
    /// Rows to load for the fsync-per-batch run.
    #[arg(long, default_value_t = 100_000)]
    sync_rows: i64,
    /// Point reads to time on the loaded tree.
    #[arg(long, default_value_t = 500_000)]
    gets: usize,
    /// Memtable size in MiB.
    #[arg(long, default_value_t = 4)]
    memtable_mib: usize,
    /// Block cache size in MiB.
    #[arg(long, default_value_t = 64)]
    cache_mib: usize,
    /// Data block size in KiB.
    #[arg(long, default_value_t = 16)]
    block_kib: usize,
    /// Level-1 target size in MiB.
    #[arg(long, default_value_t = 8)]
    l1_mib: u64,
    /// Directory for the databases (default: a fresh temporary directory, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

pub(crate) const COLS: usize = 30;

pub(crate) fn narrow() -> Schema {
    let mut cols = vec![Column::not_null("k", ColumnType::BigInt)];
    cols.extend((1..=COLS).map(|i| Column::not_null(format!("c{i}"), ColumnType::Int)));
    Schema::new(cols, &["k"]).expect("narrow schema is valid")
}

pub(crate) fn row(rng: &mut impl Rng, k: i64) -> Vec<Value> {
    let mut r = Vec::with_capacity(COLS + 1);
    r.push(Value::BigInt(k));
    r.extend((0..COLS).map(|_| Value::Int(rng.gen())));
    r
}

/// Resident set size of this process in bytes (Linux), 0 if unknown.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Samples RSS every few milliseconds until dropped; reports the peak.
struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss()));
        let (s, p) = (stop.clone(), peak.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        RssSampler { stop, peak, handle: Some(handle) }
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.peak.load(Ordering::Relaxed).max(rss())
    }
}

fn options(a: &EngineArgs) -> Options {
    Options {
        memtable_size: a.memtable_mib << 20,
        block_cache_size: a.cache_mib << 20,
        l1_max_bytes: a.l1_mib << 20,
        block_size: a.block_kib << 10,
        level_size_ratio: 10,
        ..Options::default()
    }
}

fn progress(label: &str, done: i64, total: i64, started: Instant, last: &mut Instant) {
    if last.elapsed() >= Duration::from_secs(2) || done == total {
        *last = Instant::now();
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9);
        eprintln!("  {label}: {done}/{total} rows ({:.0}%), {rate:.0} rows/s", 100.0 * done as f64 / total as f64);
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn engine(a: &EngineArgs, root: &Path) -> strata::Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
    let base_rss = rss();

    // 1. Single-row inserts, WAL on, no fsync.
    eprintln!("loading {} rows, one insert per write, WAL without fsync", a.rows);
    let sampler = RssSampler::start();
    let db = Db::open(root.join("nosync"), options(a))?;
    let t = db.create_table("narrow", narrow(), TableOptions::default())?;
    let mut keys: Vec<i64> = (0..a.rows).collect();
    keys.shuffle(&mut rng);
    let started = Instant::now();
    let mut last = Instant::now();
    for (i, &k) in keys.iter().enumerate() {
        t.insert(&row(&mut rng, k))?;
        if i % 65536 == 0 {
            progress("insert", i as i64, a.rows, started, &mut last);
        }
    }
    let load_secs = started.elapsed().as_secs_f64();
    let peak_rss = sampler.finish();
    eprintln!("waiting for background compaction to catch up");
    let settle = Instant::now();
    db.wait_for_compactions()?;
    let settle_secs = settle.elapsed().as_secs_f64();
    let stats = db.stats();

    // 2. Point reads on the loaded tree.
    eprintln!("timing {} point reads (full row)", a.gets);
    let sampler = RssSampler::start();
    let proj = Projection::All;
    let ro = ReadOptions::default();
    let mut lat = Vec::with_capacity(a.gets);
    for _ in 0..a.gets {
        let k = keys[rng.gen_range(0..keys.len())];
        let t0 = Instant::now();
        let r = t.get(&[Value::BigInt(k)], &proj, &ro)?;
        lat.push(t0.elapsed().as_nanos() as u64);
        if r.is_none() {
            return Err(strata::Error::InvalidArgument(format!("row {k} did not read back")));
        }
    }
    let peak_read_rss = sampler.finish();
    let cache_bytes = db.stats().block_cache_bytes;
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)] as f64 / 1000.0;
    drop(t);
    db.close()?;

    // 3. Batches of 100 rows, fsync per batch.
    eprintln!("loading {} rows in batches of 100, fsync per batch", a.sync_rows);
    let db = Db::open(root.join("sync"), options(a))?;
    let t = db.create_table("narrow", narrow(), TableOptions::default())?;
    let started = Instant::now();
    let mut last = Instant::now();
    let sync = WriteOptions { sync: true };
    let mut k = 0;
    while k < a.sync_rows {
        let mut b = WriteBatch::new();
        for _ in 0..100.min(a.sync_rows - k) {
            let key = rng.gen();
            b.insert(&t, &row(&mut rng, key))?;
            k += 1;
        }
        db.write(b, &sync)?;
        progress("insert+fsync", k, a.sync_rows, started, &mut last);
    }
    let sync_secs = started.elapsed().as_secs_f64();
    db.close()?;

    let budget = (a.memtable_mib as u64 * 2 + a.cache_mib as u64) << 20;
    println!();
    println!("strata-bench engine: LASER narrow table (BIGINT key + {COLS} INT), {} rows", a.rows);
    println!("{:<44} {:>14}", "measure", "value");
    println!("{:<44} {:>14.0}", "insert rows/s (single puts, WAL, no fsync)", a.rows as f64 / load_secs);
    println!("{:<44} {:>14.0}", "insert rows/s (batch of 100, fsync each)", a.sync_rows as f64 / sync_secs);
    println!("{:<44} {:>14.1}", "writes stalled by background work (s)", stats.write_stall_micros as f64 / 1e6);
    println!("{:<44} {:>14.1}", "load time (s)", load_secs);
    println!("{:<44} {:>14.1}", "compaction catch-up after load (s)", settle_secs);
    println!("{:<44} {:>14.2}", "point read p50 (µs)", pct(0.50));
    println!("{:<44} {:>14.2}", "point read p99 (µs)", pct(0.99));
    println!("{:<44} {:>14.2}", "point read p99.9 (µs)", pct(0.999));
    println!("{:<44} {:>14.1}", "RSS before open (MiB)", mib(base_rss));
    println!("{:<44} {:>14.1}", "peak RSS during load (MiB)", mib(peak_rss));
    println!("{:<44} {:>14.1}", "peak RSS growth during load (MiB)", mib(peak_rss.saturating_sub(base_rss)));
    println!("{:<44} {:>14.1}", "budget: 2 memtables + block cache (MiB)", mib(budget));
    println!("{:<44} {:>14.1}", "growth above budget (MiB)", mib(peak_rss.saturating_sub(base_rss)) - mib(budget));
    println!("{:<44} {:>14.1}", "peak RSS growth during reads (MiB)", mib(peak_read_rss.saturating_sub(base_rss)));
    println!("{:<44} {:>14.1}", "block cache charge after reads (MiB)", mib(cache_bytes));
    println!("{:<44} {:>14.2}", "write amplification (SST bytes / ingested)", stats.tables[0].write_amplification);
    println!("tree after load and catch-up (level: files, MiB):");
    for l in stats.tables[0].levels.iter().filter(|l| l.files > 0) {
        println!("  L{}: {} files, {:.1} MiB", l.level, l.files, mib(l.bytes));
    }
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.cmd {
        Cmd::Engine(a) => {
            let tmp;
            let root = match &a.dir {
                Some(d) => d.clone(),
                None => {
                    tmp = std::env::temp_dir().join(format!("strata-bench-{}", std::process::id()));
                    tmp
                }
            };
            let r = engine(a, &root);
            if a.dir.is_none() {
                let _ = std::fs::remove_dir_all(&root);
            }
            r
        }
        Cmd::Ycsb(a) => ycsb::ycsb(a).map_err(strata::Error::InvalidArgument),
        Cmd::LaserHw(a) => laser_hw::laser_hw(a).map_err(strata::Error::InvalidArgument),
        Cmd::SnapshotReads(a) => snapshot_reads::snapshot_reads(a).map_err(strata::Error::InvalidArgument),
        Cmd::WriteAmp(a) => write_amp::write_amp(a).map_err(strata::Error::InvalidArgument),
        Cmd::YcsbSharp(a) => {
            let root = std::env::temp_dir().join(format!("strata-bench-ycsb-sharp-{}", std::process::id()));
            let r = ycsb_sharp::ycsb_sharp(a, &root).map_err(strata::Error::InvalidArgument);
            let _ = std::fs::remove_dir_all(&root);
            r
        }
        Cmd::Laser(a) => {
            let root = std::env::temp_dir().join(format!("strata-bench-laser-{}", std::process::id()));
            let r = laser::laser(a, &root);
            let _ = std::fs::remove_dir_all(&root);
            r
        }
    };
    if let Err(e) = result {
        eprintln!("strata-bench: {e}");
        std::process::exit(1);
    }
}
