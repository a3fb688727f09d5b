//! `engine`: the core engine's OLTP figures on LASER's narrow table (a BIGINT key and 30 INT
//! columns) — single-row inserts with the WAL on and no fsync, batches of 1,000 rows, batches of
//! 100 rows with an fsync each, full-row point reads on the loaded tree, and peak RSS during the
//! load and during the reads — for strata and, when built in, RocksDB shaped alike (memtable,
//! Level-1 size, size ratio 10, block size, block cache, bloom filters), one row per value.
//!
//! Every system gets the same keys, rows and read sequence (one seed). With more than one
//! system, each runs in a child process of its own, one after the other, so that memory one
//! freed cannot hide the other's growth; RSS growth is measured from just before each database
//! opens.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;
use strata::{
    Column, ColumnType, Db, Options, Projection, ReadOptions, Schema, Table, TableOptions, Value, WriteBatch,
    WriteOptions,
};

use crate::harness::Results;

#[derive(Args, Debug, Clone)]
pub(crate) struct EngineArgs {
    /// Rows to load, one insert per write (shuffled keys); the batched load writes as many.
    #[arg(long, default_value_t = 2_000_000)]
    pub rows: i64,
    /// Rows to load for the fsync-per-batch run.
    #[arg(long, default_value_t = 100_000)]
    pub sync_rows: i64,
    /// Point reads to time on the loaded tree.
    #[arg(long, default_value_t = 500_000)]
    pub gets: usize,
    /// Memtable size in MiB.
    #[arg(long, default_value_t = 4)]
    pub memtable_mib: usize,
    /// Block cache size in MiB.
    #[arg(long, default_value_t = 64)]
    pub cache_mib: usize,
    /// Data block size in KiB.
    #[arg(long, default_value_t = 16)]
    pub block_kib: usize,
    /// Level-1 target size in MiB.
    #[arg(long, default_value_t = 8)]
    pub l1_mib: u64,
    /// Directory for the databases (default: a fresh temporary directory, removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Systems to run, comma-separated: strata, rocksdb (default: strata, and RocksDB when this
    /// binary was built with it).
    #[arg(long, value_delimiter = ',')]
    pub systems: Vec<String>,
    /// Directory for results.json and the chart.
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Keys per batched read.
const MULTI_GET: usize = 100;

/// Value columns of the narrow table.
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

/// Samples RSS every few milliseconds until finished; reports the peak growth over the RSS at
/// the start.
struct RssSampler {
    base: u64,
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    fn start() -> Self {
        let base = rss();
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(base));
        let (s, p) = (stop.clone(), peak.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        RssSampler { base, stop, peak, handle: Some(handle) }
    }

    /// Peak growth in MiB.
    fn finish(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        mib(self.peak.load(Ordering::Relaxed).max(rss()).saturating_sub(self.base))
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn progress(label: &str, done: usize, total: usize, started: Instant, last: &mut Instant) {
    if last.elapsed() >= Duration::from_secs(2) || done == total {
        *last = Instant::now();
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9);
        eprintln!("  {label}: {done}/{total} ({:.0}%), {rate:.0}/s", 100.0 * done as f64 / total.max(1) as f64);
    }
}

/// What the workload needs from a system.
trait Engine {
    fn insert(&self, row: &[Value]) -> Result<(), String>;
    /// One atomic write of `rows`, synced when `sync`.
    fn write(&self, rows: &[Vec<Value>], sync: bool) -> Result<(), String>;
    /// Reads the full row of `key`; whether it exists.
    fn get(&self, key: i64) -> Result<bool, String>;
    /// Reads the full rows of `keys` in one batched call; how many exist.
    fn multi_get(&self, keys: &[i64]) -> Result<usize, String>;
    /// Waits until background flushes and compactions are done.
    fn settle(&self) -> Result<(), String>;
    /// Lines to print after the table (the tree, write amplification, ...).
    fn notes(&self) -> Vec<String> {
        Vec::new()
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

struct StrataEngine {
    db: Db,
    t: Table,
    budget: f64,
}

impl StrataEngine {
    fn open(dir: &Path, a: &EngineArgs) -> Result<Self, String> {
        let e = |e: strata::Error| e.to_string();
        let opts = options(a);
        let budget = mib((opts.memtable_size * (1 + opts.max_immutable_memtables) + opts.block_cache_size) as u64);
        let db = Db::open(dir, opts).map_err(e)?;
        let t = db.create_table("narrow", narrow(), TableOptions::default()).map_err(e)?;
        Ok(StrataEngine { db, t, budget })
    }
}

impl Engine for StrataEngine {
    fn insert(&self, row: &[Value]) -> Result<(), String> {
        self.t.insert(row).map_err(|e| e.to_string())
    }

    fn write(&self, rows: &[Vec<Value>], sync: bool) -> Result<(), String> {
        let mut b = WriteBatch::new();
        for r in rows {
            b.insert(&self.t, r).map_err(|e| e.to_string())?;
        }
        self.db.write(b, &WriteOptions { sync }).map_err(|e| e.to_string())
    }

    fn get(&self, key: i64) -> Result<bool, String> {
        let r = self.t.get(&[Value::BigInt(key)], &Projection::All, &ReadOptions::default());
        r.map(|r| r.is_some()).map_err(|e| e.to_string())
    }

    fn multi_get(&self, keys: &[i64]) -> Result<usize, String> {
        let keys: Vec<[Value; 1]> = keys.iter().map(|&k| [Value::BigInt(k)]).collect();
        let r = self.t.multi_get(&keys, &Projection::All, &ReadOptions::default()).map_err(|e| e.to_string())?;
        Ok(r.iter().filter(|r| r.is_some()).count())
    }

    fn settle(&self) -> Result<(), String> {
        self.db.wait_for_compactions().map_err(|e| e.to_string())
    }

    fn notes(&self) -> Vec<String> {
        let s = self.db.stats();
        let mut out = vec![
            format!("strata: memory budget (memtables + block cache) {:.1} MiB", self.budget),
            format!("strata: writes stalled by background work {:.1} s", s.write_stall_micros as f64 / 1e6),
            format!("strata: block cache charge after reads {:.1} MiB", mib(s.block_cache_bytes)),
            format!(
                "strata: open files' indexes and filters {:.1} MiB, Level-0 key sets {:.1} MiB (outside the cache)",
                mib(s.open_file_bytes as u64),
                mib(s.key_set_bytes as u64)
            ),
        ];
        if let Some(t) = s.tables.first() {
            out.push(format!("strata: write amplification (SST bytes / ingested) {:.2}", t.write_amplification));
            let levels: Vec<String> = t
                .levels
                .iter()
                .filter(|l| l.files > 0)
                .map(|l| format!("L{} {} files {:.1} MiB", l.level, l.files, mib(l.bytes)))
                .collect();
            out.push(format!("strata: tree after load and catch-up: {}", levels.join(", ")));
        }
        out
    }
}

#[cfg(feature = "rocksdb")]
impl Engine for crate::peers::rocksdb::RocksTables {
    fn insert(&self, row: &[Value]) -> Result<(), String> {
        crate::tables::Tables::insert(self, row)
    }

    fn write(&self, rows: &[Vec<Value>], sync: bool) -> Result<(), String> {
        self.write_rows(rows, sync)
    }

    fn get(&self, key: i64) -> Result<bool, String> {
        self.read_row(key).map(|r| r.is_some())
    }

    fn multi_get(&self, keys: &[i64]) -> Result<usize, String> {
        self.read_rows(keys)
    }

    fn settle(&self) -> Result<(), String> {
        crate::tables::Tables::settle(self, false)
    }

    fn notes(&self) -> Vec<String> {
        let stalled = self.stall_micros().map_or("not reported".into(), |m| format!("{:.1} s", m as f64 / 1e6));
        vec![format!("rocksdb: writes stalled by background work {stalled}")]
    }
}

/// Opens `system` in `dir`; its configuration as reported.
fn open(system: &str, dir: &Path, a: &EngineArgs) -> Result<(Box<dyn Engine>, String), String> {
    let _ = std::fs::remove_dir_all(dir);
    match system {
        "strata" => Ok((
            Box::new(StrataEngine::open(dir, a)?),
            format!(
                "WAL without fsync, {} MiB memtable, L1 {} MiB, size ratio 10, {} KiB blocks, {} MiB block cache",
                a.memtable_mib, a.l1_mib, a.block_kib, a.cache_mib
            ),
        )),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => {
            let shape = crate::peers::rocksdb::EngineShape {
                memtable: a.memtable_mib << 20,
                l1: a.l1_mib << 20,
                block: a.block_kib << 10,
                cache: a.cache_mib << 20,
            };
            let def = crate::laser_hw::table(COLS);
            let (db, config) = crate::peers::rocksdb::RocksTables::open_shaped(dir, &def, &shape)?;
            Ok((Box::new(db), config))
        }
        other => Err(crate::peers::not_built(other)),
    }
}

/// Runs the workload on one system and adds its figures to `results`.
fn measure(system: &str, a: &EngineArgs, root: &Path, results: &mut Results) -> Result<Vec<String>, String> {
    let mut rng = StdRng::seed_from_u64(a.seed);
    let mut keys: Vec<i64> = (0..a.rows).collect();
    keys.shuffle(&mut rng);
    let n = keys.len();

    // 1. Single-row inserts, then point reads on the tree they built.
    eprintln!("{system}: loading {} rows, one insert per write, WAL without fsync", a.rows);
    let sampler = RssSampler::start();
    let (db, config) = open(system, &root.join(system).join("single"), a)?;
    let started = Instant::now();
    let mut last = Instant::now();
    for (i, &k) in keys.iter().enumerate() {
        db.insert(&row(&mut rng, k))?;
        if i % 65536 == 0 || i + 1 == n {
            progress("insert", i + 1, n, started, &mut last);
        }
    }
    let load_secs = started.elapsed().as_secs_f64();
    let load_rss = sampler.finish();
    eprintln!("{system}: waiting for background work to catch up");
    let settle = Instant::now();
    db.settle()?;
    let settle_secs = settle.elapsed().as_secs_f64();

    eprintln!("{system}: timing {} point reads (full row)", a.gets);
    let sampler = RssSampler::start();
    let mut reads = StdRng::seed_from_u64(a.seed ^ 0x5eed);
    let mut lat = Vec::with_capacity(a.gets);
    let io0 = strata::thread_io();
    for _ in 0..a.gets {
        let k = keys[reads.gen_range(0..n.max(1))];
        let t0 = Instant::now();
        let found = db.get(k)?;
        lat.push(t0.elapsed());
        if !found {
            return Err(format!("{system}: row {k} did not read back"));
        }
    }
    let read_rss = sampler.finish();
    let io = strata::thread_io().since(io0);
    lat.sort_unstable();

    // Batches of MULTI_GET random keys: one batched call against as many single gets, the same
    // keys, alternating which goes first.
    let batches = (a.gets / MULTI_GET).max(1);
    eprintln!("{system}: timing {batches} batches of {MULTI_GET} keys: multi_get against single gets");
    let (mut single, mut multi) = (Duration::ZERO, Duration::ZERO);
    for b in 0..batches {
        let batch: Vec<i64> = (0..MULTI_GET).map(|_| keys[reads.gen_range(0..n.max(1))]).collect();
        for turn in 0..2 {
            let t0 = Instant::now();
            let found = if (b + turn) % 2 == 0 {
                let mut found = 0;
                for &k in &batch {
                    found += usize::from(db.get(k)?);
                }
                single += t0.elapsed();
                found
            } else {
                let found = db.multi_get(&batch)?;
                multi += t0.elapsed();
                found
            };
            if found != batch.len() {
                return Err(format!("{system}: {found} of {} rows of a batch read back", batch.len()));
            }
        }
    }
    let per_batch = |d: Duration| d.as_secs_f64() * 1e6 / batches as f64;
    let mut notes = db.notes();
    if system == "strata" {
        notes.push(format!(
            "strata: data blocks read from files per point read {:.2} (block-cache misses)",
            io.block_reads as f64 / a.gets.max(1) as f64
        ));
    }
    drop(db);

    // 2. Batches of 1,000 rows, WAL without fsync.
    eprintln!("{system}: loading {} rows in batches of 1,000", a.rows);
    let (db, _) = open(system, &root.join(system).join("batch"), a)?;
    let started = Instant::now();
    let mut last = Instant::now();
    let mut done = 0;
    for chunk in keys.chunks(1000) {
        let rows: Vec<Vec<Value>> = chunk.iter().map(|&k| row(&mut rng, k)).collect();
        db.write(&rows, false)?;
        done += chunk.len();
        progress("batch insert", done, n, started, &mut last);
    }
    let batch_secs = started.elapsed().as_secs_f64();
    drop(db);

    // 3. Batches of 100 rows, fsync each.
    eprintln!("{system}: loading {} rows in batches of 100, fsync per batch", a.sync_rows);
    let (db, _) = open(system, &root.join(system).join("sync"), a)?;
    let started = Instant::now();
    let mut last = Instant::now();
    let total = a.sync_rows.max(0) as usize;
    let mut done = 0;
    while done < total {
        let rows: Vec<Vec<Value>> = (0..100.min(total - done))
            .map(|_| {
                let k = rng.gen();
                row(&mut rng, k)
            })
            .collect();
        db.write(&rows, true)?;
        done += rows.len();
        progress("insert+fsync", done, total, started, &mut last);
    }
    let sync_secs = started.elapsed().as_secs_f64();
    drop(db);

    let rate = |rows: usize, secs: f64| rows as f64 / secs.max(1e-9);
    results.add(system, &config, "insert (single rows)", rate(n, load_secs), "rows/s");
    results.add(system, &config, "insert (batches of 1000)", rate(n, batch_secs), "rows/s");
    results.add(system, &config, "insert (100 + fsync)", rate(total, sync_secs), "rows/s");
    for (name, q) in [("point read p50", 0.5), ("point read p99", 0.99), ("point read p99.9", 0.999)] {
        if let Some(d) = lat.get(((lat.len() as f64 * q) as usize).min(lat.len().saturating_sub(1))) {
            results.add(system, &config, name, d.as_secs_f64() * 1e6, "us");
        }
    }
    results.add(system, &config, "100 single gets", per_batch(single), "us");
    results.add(system, &config, "multi_get of 100", per_batch(multi), "us");
    results.add(
        system,
        &config,
        "multi_get speedup over single gets",
        single.as_secs_f64() / multi.as_secs_f64().max(1e-9),
        "x",
    );
    results.add(system, &config, "catch-up after load", settle_secs, "s");
    results.add(system, &config, "peak RSS growth, load", load_rss, "MiB");
    results.add(system, &config, "peak RSS growth, reads", read_rss, "MiB");
    Ok(notes)
}

pub(crate) fn engine(a: &EngineArgs, root: &Path) -> Result<(), String> {
    let systems: Vec<String> = if a.systems.is_empty() {
        std::iter::once("strata")
            .chain(crate::peers::built().into_iter().filter(|s| *s == "rocksdb"))
            .map(String::from)
            .collect()
    } else {
        a.systems.clone()
    };
    if let Some(bad) = systems.iter().find(|s| !["strata", "rocksdb"].contains(&s.as_str())) {
        return Err(format!("engine compares strata with RocksDB only; {bad} is not one of them"));
    }
    if let Some(bad) = systems.iter().find(|s| *s != "strata" && !crate::peers::built().contains(&s.as_str())) {
        return Err(crate::peers::not_built(bad));
    }
    let mut results = Results::new(
        "engine",
        [
            ("rows", json!(a.rows)),
            ("sync_rows", json!(a.sync_rows)),
            ("gets", json!(a.gets)),
            ("memtable_mib", json!(a.memtable_mib)),
            ("cache_mib", json!(a.cache_mib)),
            ("block_kib", json!(a.block_kib)),
            ("l1_mib", json!(a.l1_mib)),
            ("seed", json!(a.seed)),
        ],
    );
    let mut notes = Vec::new();
    if let [only] = &systems[..] {
        notes = measure(only, a, root, &mut results)?;
        std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
        std::fs::write(a.out.join("notes.txt"), notes.join("\n")).map_err(|e| format!("writing notes: {e}"))?;
    } else {
        // One process per system, so that one's freed memory does not hide the other's growth.
        for s in &systems {
            notes.extend(measure_apart(s, a, root, &mut results)?);
        }
    }
    results.finish(&a.out)?;
    for n in notes {
        println!("{n}");
    }
    Ok(())
}

/// Runs `engine` for `system` alone in a child process, writing into `out/<system>`, and adds
/// its figures to `results`; its notes.
fn measure_apart(system: &str, a: &EngineArgs, root: &Path, results: &mut Results) -> Result<Vec<String>, String> {
    let out = a.out.join(system);
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let status = std::process::Command::new(exe)
        .arg("engine")
        .args(["--rows", &a.rows.to_string(), "--sync-rows", &a.sync_rows.to_string()])
        .args(["--gets", &a.gets.to_string(), "--memtable-mib", &a.memtable_mib.to_string()])
        .args(["--cache-mib", &a.cache_mib.to_string(), "--block-kib", &a.block_kib.to_string()])
        .args(["--l1-mib", &a.l1_mib.to_string(), "--seed", &a.seed.to_string(), "--systems", system])
        .arg("--dir")
        .arg(root.join(system))
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run engine for {system}: {e}"))?;
    if !status.success() {
        return Err(format!("engine for {system} failed ({status})"));
    }
    let read =
        |name: &str| std::fs::read_to_string(out.join(name)).map_err(|e| format!("{}: {e}", out.join(name).display()));
    let doc: serde_json::Value = serde_json::from_str(&read("results.json")?).map_err(|e| e.to_string())?;
    for r in doc["results"].as_array().into_iter().flatten() {
        let text = |k: &str| r[k].as_str().unwrap_or_default().to_string();
        let value = r["value"].as_f64().ok_or_else(|| format!("{system}: a result without a value"))?;
        results.add(&text("system"), &text("config"), &text("metric"), value, &text("unit"));
    }
    Ok(read("notes.txt")?.lines().map(String::from).collect())
}
