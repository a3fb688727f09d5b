//! `strata-bench ycsb-sharp`: TellStore's YCSB# scan queries (seed 003 §7.2.1) on strata.
//!
//! Schema: key `p BIGINT`; `a, b SMALLINT`; `c, d INT`; `e, f BIGINT`; `g, h DOUBLE`; `i, j TEXT`
//! of 12-16 characters. `f` is uniform in [0, 256) so Q3 keeps about 10% of the rows; `h` is
//! uniform in [0, 1) so Q2 keeps about half.
//!
//! - Q1 `SELECT max(b)`, with block statistics allowed (the engine's default) and without (every
//!   block's `b` decoded and reduced with arrow's kernel);
//! - Q2 `SELECT max(b) WHERE h > 0 AND h < 0.5`;
//! - Q3 `SELECT * WHERE f > 0 AND f < 26`.
//!
//! Each layout (`column`: one column per group from Level-1 down, `row`: whole rows) is loaded
//! with sequential keys, fully compacted, and warmed (one run of each query) so the data is
//! cached; then each query runs `--runs` times and the median is reported as rows scanned per
//! second per thread. Finally Q1 runs again while a thread issues uniform gets and updates (half
//! each), and its latency is reported next to the idle figure.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rand::{Rng, SeedableRng};
use strata::scan::{batch_rows, AggFunc, Aggregate, CmpOp, Expr, ScanRequest};
use strata::{Column, ColumnType, Db, KeyRange, Options, ReadOptions, Schema, Table, TableOptions, Value, WriteBatch};

#[derive(Parser)]
pub(crate) struct YcsbSharpArgs {
    /// Rows to load per layout.
    #[arg(long, default_value_t = 10_000_000)]
    rows: i64,
    /// Layouts to compare: `column`, `row`.
    #[arg(long, value_delimiter = ',', default_values_t = vec!["column".to_string(), "row".to_string()])]
    layouts: Vec<String>,
    /// Partitions (scan threads) per query; rates are reported per thread.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Timed runs per query (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Block cache in MiB (large enough to hold the table keeps the runs in memory).
    #[arg(long, default_value_t = 8192)]
    cache_mib: usize,
    /// Seconds the concurrent get/update load runs before Q1 starts under it.
    #[arg(long, default_value_t = 2)]
    load_warmup_secs: u64,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn schema() -> Schema {
    let c = |n: &str, t| Column::not_null(n, t);
    Schema::new(
        vec![
            c("p", ColumnType::BigInt),
            c("a", ColumnType::SmallInt),
            c("b", ColumnType::SmallInt),
            c("c", ColumnType::Int),
            c("d", ColumnType::Int),
            c("e", ColumnType::BigInt),
            c("f", ColumnType::BigInt),
            c("g", ColumnType::Double),
            c("h", ColumnType::Double),
            c("i", ColumnType::Text),
            c("j", ColumnType::Text),
        ],
        &["p"],
    )
    .expect("YCSB# schema is valid")
}

fn text(rng: &mut impl Rng) -> Value {
    let n = rng.gen_range(12..=16);
    Value::Text((0..n).map(|_| char::from(b'a' + rng.gen_range(0..26u8))).collect())
}

fn row(rng: &mut impl Rng, p: i64) -> Vec<Value> {
    vec![
        Value::BigInt(p),
        Value::SmallInt(rng.gen()),
        Value::SmallInt(rng.gen()),
        Value::Int(rng.gen()),
        Value::Int(rng.gen()),
        Value::BigInt(rng.gen()),
        Value::BigInt(rng.gen_range(0..256)),
        Value::Double(rng.gen()),
        Value::Double(rng.gen()),
        text(rng),
        text(rng),
    ]
}

struct Query {
    name: &'static str,
    req: ScanRequest,
}

fn queries(threads: usize) -> Vec<Query> {
    let q1 = ScanRequest::new().with_aggregate(Aggregate::new(AggFunc::Max, "b"));
    let q2 = q1.clone().with_filter(Expr::cmp("h", CmpOp::Gt, Value::Double(0.0)).and(Expr::cmp(
        "h",
        CmpOp::Lt,
        Value::Double(0.5),
    )));
    let q3 = ScanRequest::new().with_filter(Expr::cmp("f", CmpOp::Gt, Value::BigInt(0)).and(Expr::cmp(
        "f",
        CmpOp::Lt,
        Value::BigInt(26),
    )));
    vec![
        Query { name: "Q1 max(b)", req: q1.clone() },
        Query { name: "Q1 max(b), no block stats", req: q1.with_block_stats(false) },
        Query { name: "Q2 max(b) where 0<h<0.5", req: q2 },
        Query { name: "Q3 * where 0<f<26", req: q3 },
    ]
    .into_iter()
    .map(|q| Query { name: q.name, req: q.req.with_partitions(threads) })
    .collect()
}

/// Runs a query; returns (seconds, a fingerprint of the answer: aggregate text or row count).
fn run(t: &Table, req: &ScanRequest) -> strata::Result<(f64, String)> {
    let started = Instant::now();
    let mut rows = 0usize;
    let mut first = None;
    for b in t.scan_batches(req, &ReadOptions::default())? {
        let b = b?;
        rows += b.num_rows();
        if first.is_none() && !req.aggregates.is_empty() {
            first = Some(format!("{:?}", batch_rows(&b)));
        }
    }
    let secs = started.elapsed().as_secs_f64();
    Ok((secs, first.unwrap_or_else(|| format!("{rows} rows"))))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

struct LayoutResult {
    layout: String,
    /// Per query: median seconds, answer.
    times: Vec<(f64, String)>,
    q1_idle: f64,
    q1_loaded: f64,
    load_ops: u64,
    scan: strata::scan::ScanStats,
    /// Q1 under load: blocks read in bulk, memtable keys resolved apart, rows merged.
    loaded_paths: (u64, u64, u64),
}

fn load(db: &Db, t: &Table, rows: i64, seed: u64) -> strata::Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let mut last = Instant::now();
    let mut p = 0;
    while p < rows {
        let mut b = WriteBatch::new();
        for _ in 0..1000.min(rows - p) {
            b.insert(t, &row(&mut rng, p))?;
            p += 1;
        }
        db.write(b, &Default::default())?;
        if last.elapsed() >= Duration::from_secs(5) || p == rows {
            last = Instant::now();
            eprintln!("  loaded {p}/{rows} rows, {:.0} rows/s", p as f64 / started.elapsed().as_secs_f64());
        }
    }
    Ok(())
}

fn one_layout(a: &YcsbSharpArgs, root: &Path, layout: &str) -> strata::Result<LayoutResult> {
    let opts = Options { block_cache_size: a.cache_mib << 20, ..Options::default() };
    let db = Db::open(root.join(layout), opts)?;
    let topts = match layout {
        "row" => TableOptions::default(),
        "column" => TableOptions::with_layout("L1-: column"),
        other => return Err(strata::Error::InvalidArgument(format!("unknown layout `{other}` (column or row)"))),
    };
    let t = db.create_table("main_table", schema(), topts)?;
    eprintln!("{layout}: loading {} rows", a.rows);
    load(&db, &t, a.rows, a.seed)?;
    eprintln!("{layout}: compacting fully");
    let started = Instant::now();
    db.compact_range("main_table", &KeyRange::all())?;
    eprintln!("{layout}: compacted in {:.1} s; warming the cache", started.elapsed().as_secs_f64());
    let qs = queries(a.threads);
    for q in &qs {
        run(&t, &q.req)?;
    }
    let before = db.scan_stats();
    let mut times = Vec::new();
    for q in &qs {
        let mut secs = Vec::with_capacity(a.runs);
        let mut answer = String::new();
        for _ in 0..a.runs.max(1) {
            let (s, ans) = run(&t, &q.req)?;
            secs.push(s);
            answer = ans;
        }
        let m = median(secs);
        eprintln!("{layout}: {:<28} {:>10.2} ms  {answer}", q.name, m * 1e3);
        times.push((m, answer));
    }
    let mut scan = db.scan_stats();
    scan.bulk_blocks -= before.bulk_blocks;
    scan.blocks_from_stats -= before.blocks_from_stats;
    scan.blocks_skipped -= before.blocks_skipped;
    scan.merged_rows -= before.merged_rows;
    // Q1 under a concurrent uniform get/update load.
    let q1 = &qs[0].req;
    let q1_idle = times[0].0;
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let loader = {
        let (t, stop, ops, rows, seed) = (t.clone(), stop.clone(), ops.clone(), a.rows, a.seed);
        std::thread::spawn(move || -> strata::Result<()> {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed);
            let proj = strata::Projection::All;
            while !stop.load(Ordering::Relaxed) {
                let p = rng.gen_range(0..rows);
                if rng.gen_bool(0.5) {
                    t.get(&[Value::BigInt(p)], &proj, &ReadOptions::default())?;
                } else {
                    t.update(
                        &[Value::BigInt(p)],
                        &[("b", Value::SmallInt(rng.gen())), ("h", Value::Double(rng.gen()))],
                    )?;
                }
                ops.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
    };
    std::thread::sleep(Duration::from_secs(a.load_warmup_secs));
    eprintln!("{layout}: Q1 under a get/update load ({} ops so far)", ops.load(Ordering::Relaxed));
    let ops_before = ops.load(Ordering::Relaxed);
    let stats_before = db.scan_stats();
    let (q1_loaded, _) = run(&t, q1)?;
    let stats_after = db.scan_stats();
    let loaded_paths = (
        stats_after.bulk_blocks - stats_before.bulk_blocks,
        stats_after.patched_keys - stats_before.patched_keys,
        stats_after.merged_rows - stats_before.merged_rows,
    );
    let load_ops = ops.load(Ordering::Relaxed) - ops_before;
    stop.store(true, Ordering::Relaxed);
    loader.join().map_err(|_| strata::Error::InvalidArgument("load thread panicked".into()))??;
    db.close()?;
    Ok(LayoutResult { layout: layout.to_string(), times, q1_idle, q1_loaded, load_ops, scan, loaded_paths })
}

pub(crate) fn ycsb_sharp(a: &YcsbSharpArgs, root: &Path) -> strata::Result<()> {
    let mut results = Vec::new();
    for layout in &a.layouts {
        results.push(one_layout(a, root, layout)?);
        let _ = std::fs::remove_dir_all(root.join(layout));
    }
    // The layouts must agree on every answer before any figure is reported.
    if let Some(first) = results.first() {
        for r in &results[1..] {
            for (i, q) in queries(1).iter().enumerate() {
                if r.times[i].1 != first.times[i].1 {
                    return Err(strata::Error::InvalidArgument(format!(
                        "{}: {} answered {} but {} answered {}",
                        q.name, r.layout, r.times[i].1, first.layout, first.times[i].1
                    )));
                }
            }
        }
    }
    let qs = queries(a.threads);
    println!();
    println!(
        "strata-bench ycsb-sharp: {} rows, {} scan thread(s), median of {} runs, data cached",
        a.rows, a.threads, a.runs
    );
    print!("{:<30}", "query (M rows/s per thread)");
    for r in &results {
        print!(" {:>12}", r.layout);
    }
    if results.len() == 2 {
        print!(" {:>14}", format!("{}/{}", results[0].layout, results[1].layout));
    }
    println!();
    for (i, q) in qs.iter().enumerate() {
        print!("{:<30}", q.name);
        let rate = |r: &LayoutResult| a.rows as f64 / r.times[i].0 / a.threads as f64 / 1e6;
        for r in &results {
            print!(" {:>12.1}", rate(r));
        }
        if results.len() == 2 {
            print!(" {:>13.1}x", rate(&results[0]) / rate(&results[1]));
        }
        println!();
    }
    println!(
        "answers: {}",
        results.first().map_or(String::new(), |r| r.times.iter().map(|t| t.1.clone()).collect::<Vec<_>>().join("; "))
    );
    println!();
    println!(
        "{:<30} {:>14} {:>14} {:>14} {:>12}",
        "Q1 under get/update load", "idle (ms)", "loaded (ms)", "slowdown", "load ops/s"
    );
    for r in &results {
        println!(
            "{:<30} {:>14.2} {:>14.2} {:>13.1}x {:>12.0}",
            r.layout,
            r.q1_idle * 1e3,
            r.q1_loaded * 1e3,
            r.q1_loaded / r.q1_idle,
            r.load_ops as f64 / r.q1_loaded
        );
    }
    for r in &results {
        let (bulk, patched, merged) = r.loaded_paths;
        println!(
            "  {:<8} under load: {bulk} blocks in bulk, {patched} memtable keys resolved apart, {merged} rows merged",
            r.layout
        );
    }
    println!();
    println!("where the blocks went (timed runs): bulk-decoded / answered from statistics / skipped by zone maps / rows merged");
    for r in &results {
        println!(
            "  {:<8} {} / {} / {} / {}",
            r.layout, r.scan.bulk_blocks, r.scan.blocks_from_stats, r.scan.blocks_skipped, r.scan.merged_rows
        );
    }
    Ok(())
}
