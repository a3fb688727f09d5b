//! `strata demo`: the main job on an embedded default. Creates the LASER narrow table (BIGINT key +
//! 30 INT columns), ingests rows with a progress bar while one thread reads recent keys and another
//! runs analytical scans through the engine's Arrow scan path (MAX over 3 columns of the whole
//! table, SUM over 10 columns of a 5% key range), then prints throughput and latency per kind of
//! operation and the tree per level.

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
        Err(_) => db.create_table("narrow", narrow()?, TableOptions::default())?,
    };
    println!("strata demo: {rows} rows into `narrow` (BIGINT key + {COLS} INT) in {}", dir.display());
    let start_key = t.scan(&KeyRange::all(), &t.projection(&["k"])?, &ReadOptions::default())?.count() as i64;
    let inserted = Arc::new(AtomicI64::new(start_key));
    let done = Arc::new(AtomicBool::new(false));

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
                let k = rng.gen_range((hi - 10_000).max(0)..hi);
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
        let (t, inserted, done) = (t.clone(), inserted.clone(), done.clone());
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
            let mut max_q = ScanRequest::new().with_aggregate(Aggregate::count_star());
            for c in ["c1", "c2", "c3"] {
                max_q = max_q.with_aggregate(Aggregate::new(AggFunc::Max, c));
            }
            while !done.load(Ordering::Relaxed) {
                if inserted.load(Ordering::Relaxed) == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                let t0 = Instant::now();
                let n = count(&max_q)?;
                max_t.micros.push(t0.elapsed().as_secs_f64() * 1e6);
                max_t.rows += n;
                let hi = inserted.load(Ordering::Relaxed).max(1);
                let width = (hi / 20).max(1);
                let lo = rng.gen_range(0..hi);
                let range = KeyRange::half_open(vec![Value::BigInt(lo)], vec![Value::BigInt(lo + width)]);
                let mut sum_q = ScanRequest::new().with_range(range).with_aggregate(Aggregate::count_star());
                for i in 1..=10 {
                    sum_q = sum_q.with_aggregate(Aggregate::new(AggFunc::Sum, &format!("c{i}")));
                }
                let t0 = Instant::now();
                let n = count(&sum_q)?;
                sum_t.micros.push(t0.elapsed().as_secs_f64() * 1e6);
                sum_t.rows += n;
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
    let mut k = start_key;
    let end = start_key + rows;
    let ingest = (|| -> Result<(), CliError> {
        while k < end {
            let mut b = WriteBatch::new();
            let n = 1000.min(end - k);
            for i in 0..n {
                b.insert(&t, &row(&mut rng, k + i))?;
            }
            db.write(b, &Default::default())?;
            k += n;
            inserted.store(k, Ordering::Relaxed);
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
    db.wait_for_compactions()?;
    let st = db.stats();
    println!();
    println!(
        "tree of `narrow` after compaction caught up (write amplification {:.2}):",
        st.tables[0].write_amplification
    );
    println!("  {:<6} {:>6} {:>10} {:>10}  layout", "level", "files", "MiB", "entries");
    for l in st.tables[0].levels.iter().filter(|l| l.files > 0) {
        println!("  L{:<5} {:>6} {:>10.1} {:>10}  row", l.level, l.files, l.bytes as f64 / (1 << 20) as f64, l.entries);
    }
    println!("\ndata kept in {}; remove it when done", dir.display());
    Ok(())
}
