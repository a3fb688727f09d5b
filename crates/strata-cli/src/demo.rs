//! `strata demo`: the main job on an embedded default. Creates the LASER narrow table (BIGINT key +
//! 30 INT columns) with a lifecycle layout (rows in Levels 0-1, two column groups in Level 2,
//! columns below), ingests rows with uniformly spread keys (so every level overlaps every key
//! range) and partial updates of one column, with a progress bar, while one thread reads recent
//! keys and another runs analytical scans through the engine's Arrow scan path (MAX over 3
//! columns of the whole table, SUM over 10 columns of a 5% key range). Then it prints throughput
//! and latency per kind of operation, which scan path the queries took (engine counters), and
//! the tree per level with each level's layout.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use strata::scan::{batch_rows, AggFunc, Aggregate, ScanRequest};
use strata::{
    Column, ColumnType, Db, KeyRange, Options, Projection, ReadOptions, Schema, TableOptions, Value, WriteBatch,
};

use crate::exec::CliError;

const COLS: usize = 30;

/// Rows near the top, column groups and columns further down (seed 000's lifecycle): rows in
/// Levels 0-1, the two halves of the columns in Level 2, one column per group below.
fn layout() -> String {
    let group = |a: usize, b: usize| format!("({})", (a..=b).map(|c| format!("c{c}")).collect::<Vec<_>>().join(","));
    format!("L0-1: row; L2: {} {}; L3-: column", group(1, COLS / 2), group(COLS / 2 + 1, COLS))
}

/// The `i`-th key of a load of `n` keys: a permutation of `0..n` that spreads consecutive `i`
/// over the whole range (multiplication by a constant coprime with `n`).
fn spread(i: i64, n: i64, step: i64) -> i64 {
    ((i as i128 * step as i128) % n as i128) as i64
}

/// A multiplier coprime with `n`, about `n` times the golden ratio's fraction.
fn step_for(n: i64) -> i64 {
    let gcd = |mut a: i64, mut b: i64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut s = ((n as f64 * 0.618_033_988_7) as i64).max(1);
    while gcd(s, n) != 1 {
        s += 1;
    }
    s
}

/// The layout clause text, with long groups shortened to their first and last column.
fn short_layout(clause: &str) -> String {
    clause
        .split(' ')
        .map(|g| match g.strip_prefix('(').and_then(|g| g.strip_suffix(')')) {
            Some(inner) if inner.split(',').count() > 4 => {
                let names: Vec<&str> = inner.split(',').collect();
                format!("({}..{})", names[0], names[names.len() - 1])
            }
            _ => g.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn narrow() -> Result<Schema, CliError> {
    let mut cols = vec![Column::not_null("k", ColumnType::BigInt)];
    cols.extend((1..=COLS).map(|i| Column::not_null(format!("c{i}"), ColumnType::Int)));
    Ok(Schema::new(cols, &["k"])?)
}

/// Latencies of one kind of operation.
#[derive(Default)]
struct Timings {
    micros: Vec<f64>,
    rows: u64,
    paths: Paths,
}

/// Which scan paths a query's runs took, summed from the engine's scan counters.
#[derive(Default)]
struct Paths {
    run_blocks: u64,
    run_rows: u64,
    bulk_blocks: u64,
    from_stats: u64,
    skipped: u64,
    merged_rows: u64,
    patched_keys: u64,
}

impl Paths {
    fn add(&mut self, a: &strata::scan::ScanStats, b: &strata::scan::ScanStats) {
        self.run_blocks += b.run_blocks - a.run_blocks;
        self.run_rows += b.run_rows - a.run_rows;
        self.bulk_blocks += b.bulk_blocks - a.bulk_blocks;
        self.from_stats += b.blocks_from_stats - a.blocks_from_stats;
        self.skipped += b.blocks_skipped - a.blocks_skipped;
        self.merged_rows += b.merged_rows - a.merged_rows;
        self.patched_keys += b.patched_keys - a.patched_keys;
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.run_blocks > 0 {
            parts.push(format!(
                "run by run: {} blocks, {} rows selected by the supersede vectors",
                self.run_blocks, self.run_rows
            ));
        }
        if self.bulk_blocks > 0 {
            parts.push(format!("{} blocks in bulk", self.bulk_blocks));
        }
        if self.from_stats > 0 {
            parts.push(format!("{} blocks from zone maps", self.from_stats));
        }
        if self.skipped > 0 {
            parts.push(format!("{} skipped", self.skipped));
        }
        if self.patched_keys > 0 {
            parts.push(format!("{} memtable keys laid over", self.patched_keys));
        }
        parts.push(format!("{} rows through the per-row merge", self.merged_rows));
        parts.join("; ")
    }
}

impl Timings {
    fn pct(&mut self, p: f64) -> f64 {
        if self.micros.is_empty() {
            return 0.0;
        }
        self.micros.sort_by(f64::total_cmp);
        self.micros[((self.micros.len() as f64 * p) as usize).min(self.micros.len() - 1)]
    }
}

fn row(rng: &mut impl Rng, k: i64) -> Vec<Value> {
    let mut r = Vec::with_capacity(COLS + 1);
    r.push(Value::BigInt(k));
    r.extend((0..COLS).map(|_| Value::Int(rng.gen_range(0..1_000_000))));
    r
}

pub fn run(dir: &Path, rows: i64) -> Result<(), CliError> {
    let opts =
        Options { memtable_size: 4 << 20, l1_max_bytes: 8 << 20, block_cache_size: 64 << 20, ..Options::default() };
    let db = Arc::new(Db::open(dir, opts)?);
    let t = match db.table("narrow") {
        Ok(t) => t,
        Err(_) => db.create_table("narrow", narrow()?, TableOptions::with_layout(layout()))?,
    };
    println!("strata demo: {rows} rows into `narrow` (BIGINT key + {COLS} INT) in {}", dir.display());
    println!(
        "layout: {}; keys spread uniformly, so every level overlaps every key range",
        layout().split("; ").map(short_layout).collect::<Vec<_>>().join("; ")
    );
    let start_key = t.scan(&KeyRange::all(), &t.projection(&["k"])?, &ReadOptions::default())?.count() as i64;
    // Rows inserted by this run so far; the `i`-th has key `start_key + spread(i)`.
    let inserted = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let step = step_for(rows.max(1));
    let key_of = move |i: i64| start_key + spread(i, rows.max(1), step);

    // Point reads of recently inserted keys.
    let reader = {
        let (t, inserted, done) = (t.clone(), inserted.clone(), done.clone());
        std::thread::spawn(move || -> Result<Timings, CliError> {
            let mut rng = rand::rngs::StdRng::seed_from_u64(2);
            let mut tm = Timings::default();
            while !done.load(Ordering::Relaxed) {
                let hi = inserted.load(Ordering::Relaxed);
                if hi == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let k = key_of(rng.gen_range((hi - 10_000).max(0)..hi));
                let t0 = Instant::now();
                let r = t.get(&[Value::BigInt(k)], &Projection::All, &ReadOptions::default())?;
                tm.micros.push(t0.elapsed().as_secs_f64() * 1e6);
                tm.rows += u64::from(r.is_some());
            }
            Ok(tm)
        })
    };
    // Analytical scans: MAX over 3 columns of everything, SUM over 10 columns of 5% of the keys.
    let scanner = {
        let (db, t, inserted, done) = (db.clone(), t.clone(), inserted.clone(), done.clone());
        std::thread::spawn(move || -> Result<(Timings, Timings), CliError> {
            let mut rng = rand::rngs::StdRng::seed_from_u64(3);
            let (mut max_t, mut sum_t) = (Timings::default(), Timings::default());
            // Pushed into the engine: aggregates over Arrow batches, one result row each.
            let count = |req: &ScanRequest| -> Result<u64, CliError> {
                let mut n = 0;
                for b in t.scan_batches(req, &ReadOptions::default())? {
                    if let Some(Value::BigInt(c)) = batch_rows(&b?).first().and_then(|r| r.first()).cloned() {
                        n = c as u64;
                    }
                }
                Ok(n)
            };
            // Engine counters over each query's runs (this thread runs every scan).
            let timed = |tm: &mut Timings, req: &ScanRequest| -> Result<(), CliError> {
                let (s0, t0) = (db.scan_stats(), Instant::now());
                let n = count(req)?;
                tm.micros.push(t0.elapsed().as_secs_f64() * 1e6);
                tm.rows += n;
                tm.paths.add(&s0, &db.scan_stats());
                Ok(())
            };
            let mut max_q = ScanRequest::new().with_aggregate(Aggregate::count_star());
            for c in ["c1", "c2", "c3"] {
                max_q = max_q.with_aggregate(Aggregate::new(AggFunc::Max, c));
            }
            while !done.load(Ordering::Relaxed) {
                if inserted.load(Ordering::Relaxed) == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                timed(&mut max_t, &max_q)?;
                // 5% of the key space: keys are spread over all of it from the start.
                let width = (rows / 20).max(1);
                let lo = start_key + rng.gen_range(0..rows.max(1));
                let range = KeyRange::half_open(vec![Value::BigInt(lo)], vec![Value::BigInt(lo + width)]);
                let mut sum_q = ScanRequest::new().with_range(range).with_aggregate(Aggregate::count_star());
                for i in 1..=10 {
                    sum_q = sum_q.with_aggregate(Aggregate::new(AggFunc::Sum, &format!("c{i}")));
                }
                timed(&mut sum_t, &sum_q)?;
            }
            Ok((max_t, sum_t))
        })
    };

    let pb = ProgressBar::new(rows as u64);
    pb.set_style(
        ProgressStyle::with_template("ingest [{bar:30}] {pos}/{len} rows ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let started = Instant::now();
    let mut done_rows = 0i64;
    let mut updates = 0u64;
    let ingest = (|| -> Result<(), CliError> {
        while done_rows < rows {
            let mut b = WriteBatch::new();
            let n = 1000.min(rows - done_rows);
            for i in 0..n {
                b.insert(&t, &row(&mut rng, key_of(done_rows + i)))?;
            }
            // One in ten: a partial update of `c1` of a row inserted earlier (it supersedes only
            // that column of the older version).
            for _ in 0..n / 10 {
                if done_rows == 0 {
                    break;
                }
                let k = key_of(rng.gen_range(0..done_rows));
                b.update(&t, &[Value::BigInt(k)], &[("c1", Value::Int(rng.gen_range(0..1_000_000)))])?;
                updates += 1;
            }
            db.write(b, &Default::default())?;
            done_rows += n;
            inserted.store(done_rows, Ordering::Relaxed);
            pb.inc(n as u64);
        }
        Ok(())
    })();
    let ingest_secs = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    pb.finish_and_clear();
    let reads = reader.join().map_err(|_| CliError::new("internal", "reader thread panicked"))?;
    let scans = scanner.join().map_err(|_| CliError::new("internal", "scan thread panicked"))?;
    ingest?;
    let mut reads = reads?;
    let (mut max_t, mut sum_t) = scans?;

    println!();
    println!("{:<34} {:>10} {:>14} {:>12} {:>12}", "operation", "count", "throughput", "p50", "p99");
    println!(
        "{:<34} {:>10} {:>10.0} r/s {:>12} {:>12}",
        "insert (batches of 1000)",
        rows,
        rows as f64 / ingest_secs,
        "-",
        "-"
    );
    println!("{:<34} {:>10} {:>10} {:>12} {:>12}", "update of c1 (in the same batches)", updates, "-", "-", "-");
    let lat = |x: f64| if x >= 1000.0 { format!("{:.1} ms", x / 1000.0) } else { format!("{x:.1} µs") };
    let secs = ingest_secs.max(1e-9);
    for (name, tm) in [
        ("point read (recent key, full row)", &mut reads),
        ("scan MAX(c1..c3), whole table", &mut max_t),
        ("scan SUM(c1..c10), 5% key range", &mut sum_t),
    ] {
        let count = tm.micros.len();
        // Reads: operations per second of the ingest; scans: rows per second of scanning.
        let busy = tm.micros.iter().sum::<f64>() / 1e6;
        let point = name.starts_with("point");
        let thr = if point { count as f64 / secs } else { tm.rows as f64 / busy.max(1e-9) };
        let unit = if point { "op/s" } else { "r/s " };
        println!("{name:<34} {count:>10} {thr:>10.0} {unit} {:>12} {:>12}", lat(tm.pct(0.5)), lat(tm.pct(0.99)));
    }
    println!();
    println!("scan paths (engine counters over all runs of each query):");
    for (name, tm) in [("MAX(c1..c3), whole table", &max_t), ("SUM(c1..c10), 5% key range", &sum_t)] {
        println!("  {name}: {}", tm.paths.describe());
    }
    db.wait_for_compactions()?;
    let st = db.stats();
    println!();
    println!(
        "tree of `narrow` after compaction caught up (write amplification {:.2}):",
        st.tables[0].write_amplification
    );
    println!("  {:<6} {:>6} {:>10} {:>10}  layout", "level", "files", "MiB", "entries");
    // The stats' layout text has one `Lk: ...` clause per level.
    let clauses: Vec<&str> = st.tables[0].layout.split("; ").collect();
    for l in st.tables[0].levels.iter().filter(|l| l.files > 0) {
        let clause = clauses.get(l.level).and_then(|c| c.split_once(": ")).map_or("?", |(_, g)| g);
        println!(
            "  L{:<5} {:>6} {:>10.1} {:>10}  {}",
            l.level,
            l.files,
            l.bytes as f64 / (1 << 20) as f64,
            l.entries,
            short_layout(clause)
        );
    }
    println!("\ndata kept in {}; remove it when done", dir.display());
    Ok(())
}
