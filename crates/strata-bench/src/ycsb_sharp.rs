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
//! second per thread. Finally Q1, Q2 and Q3 run again (the median of `--runs` each) while a
//! thread issues uniform gets and updates of `b` and `h` (half each), and their latencies are
//! reported next to the idle figures, with the load's own throughput.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rand::{Rng, SeedableRng};
use serde_json::json;
use strata::scan::{AggFunc, Aggregate, CmpOp, Expr, ScanRequest};
use strata::{Column, ColumnType, Db, KeyRange, Options, ReadOptions, Schema, Table, TableOptions, Value, WriteBatch};

use crate::harness::{CommonArgs, Progress, Results};
use crate::tables::{strata_answer, Acc, Answer, Kind, TableDef};

#[derive(Parser)]
pub(crate) struct YcsbSharpArgs {
    /// `--rows` per system and layout; `--threads` scan threads per query (strata's partitions,
    /// DuckDB's threads, PostgreSQL's leader plus parallel workers); `--ops` and `--duration` are
    /// not used.
    #[command(flatten)]
    common: CommonArgs,
    /// strata layouts to compare: `column`, `row` (the first is the one peers are compared with).
    #[arg(long, value_delimiter = ',', default_values_t = vec!["column".to_string(), "row".to_string()])]
    layouts: Vec<String>,
    /// Timed runs per query (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Block cache in MiB (large enough to hold the table keeps the runs in memory).
    #[arg(long, default_value_t = 8192)]
    cache_mib: usize,
    /// Seconds the concurrent get/update load runs before Q1, Q2 and Q3 run under it.
    #[arg(long, default_value_t = 2)]
    load_warmup_secs: u64,
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

/// Runs a query; returns the seconds it took and its answer (aggregates, or the rows' count and
/// key sum), which every system must agree on.
fn run(t: &Table, req: &ScanRequest) -> strata::Result<(f64, Answer)> {
    let started = Instant::now();
    let answer = strata_answer(t.scan_batches(req, &ReadOptions::default())?, req.aggregates.len())?;
    Ok((started.elapsed().as_secs_f64(), answer))
}

fn def() -> TableDef {
    let k = |n: &str, kind| (n.to_string(), kind);
    TableDef {
        name: "main_table".into(),
        columns: vec![
            k("p", Kind::BigInt),
            k("a", Kind::SmallInt),
            k("b", Kind::SmallInt),
            k("c", Kind::Int),
            k("d", Kind::Int),
            k("e", Kind::BigInt),
            k("f", Kind::BigInt),
            k("g", Kind::Double),
            k("h", Kind::Double),
            k("i", Kind::Text),
            k("j", Kind::Text),
        ],
    }
}

/// The queries for the peers, in the order of [`queries`] (`None` where only strata has it).
fn peer_queries() -> Vec<Option<crate::tables::Query>> {
    use crate::tables::{Agg, Output, Pred, Query as Q};
    let (b, f, h) = (2, 6, 8);
    let q1 = Q { keys: None, preds: vec![], out: Output::Aggs(vec![Agg::Max(b)]) };
    let q2 = Q {
        preds: vec![
            Pred { col: h, op: CmpOp::Gt, value: Value::Double(0.0) },
            Pred { col: h, op: CmpOp::Lt, value: Value::Double(0.5) },
        ],
        ..q1.clone()
    };
    let q3 = Q {
        keys: None,
        preds: vec![
            Pred { col: f, op: CmpOp::Gt, value: Value::BigInt(0) },
            Pred { col: f, op: CmpOp::Lt, value: Value::BigInt(26) },
        ],
        out: Output::Rows,
    };
    vec![Some(q1), None, Some(q2), Some(q3)]
}

/// Each query's answer, computed from the generator.
fn truth(a: &YcsbSharpArgs) -> Vec<Answer> {
    let qs: Vec<crate::tables::Query> = peer_queries().into_iter().flatten().collect();
    let mut accs: Vec<Acc> = qs.iter().map(Acc::new).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.common.seed);
    for p in 0..a.common.rows as i64 {
        let r = row(&mut rng, p);
        for acc in &mut accs {
            acc.add(&r);
        }
    }
    let mut answers: Vec<Answer> = accs.into_iter().map(Acc::finish).collect();
    // Q1 without block statistics has Q1's answer.
    answers.insert(1, answers[0].clone());
    answers
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The queries run again under the get/update load (indices into [`queries`]).
const LOADED: [usize; 3] = [0, 2, 3];

/// One query under the get/update load.
struct Loaded {
    query: usize,
    /// Median seconds.
    secs: f64,
    /// The load's operations per second while the query's runs ran.
    load_ops_per_sec: f64,
    /// Over the query's runs: blocks read in bulk, memtable keys laid over blocks, rows merged.
    paths: (u64, u64, u64),
}

struct LayoutResult {
    layout: String,
    /// Per query: median seconds, answer.
    times: Vec<(f64, Answer)>,
    loaded: Vec<Loaded>,
    scan: strata::scan::ScanStats,
}

fn load(db: &Db, t: &Table, rows: i64, seed: u64, label: &str) -> strata::Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let progress = Progress::new(&format!("{label}: load"), rows as u64);
    let mut p = 0;
    while p < rows {
        let mut b = WriteBatch::new();
        for _ in 0..1000.min(rows - p) {
            b.insert(t, &row(&mut rng, p))?;
            p += 1;
        }
        db.write(b, &Default::default())?;
        progress.set(p as u64);
    }
    progress.finish();
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
    load(&db, &t, a.common.rows as i64, a.common.seed, &format!("strata:{layout}"))?;
    eprintln!("{layout}: compacting fully");
    let started = Instant::now();
    db.compact_range("main_table", &KeyRange::all())?;
    eprintln!("{layout}: compacted in {:.1} s; warming the cache", started.elapsed().as_secs_f64());
    let qs = queries(a.common.threads);
    for q in &qs {
        run(&t, &q.req)?;
    }
    let before = db.scan_stats();
    let mut times = Vec::new();
    for q in &qs {
        let mut secs = Vec::with_capacity(a.runs);
        let mut answer = Answer::Aggs(vec![]);
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
    // Q1, Q2 and Q3 under a concurrent uniform get/update load.
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let loader = {
        let (t, stop, ops, rows, seed) = (t.clone(), stop.clone(), ops.clone(), a.common.rows as i64, a.common.seed);
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
    eprintln!("{layout}: queries under a get/update load ({} ops so far)", ops.load(Ordering::Relaxed));
    let mut loaded = Vec::new();
    let mut failed = None;
    for &qi in &LOADED {
        let ops_before = ops.load(Ordering::Relaxed);
        let stats_before = db.scan_stats();
        let started = Instant::now();
        let mut secs = Vec::with_capacity(a.runs);
        for _ in 0..a.runs.max(1) {
            match run(&t, &qs[qi].req) {
                Ok((s, _)) => secs.push(s),
                Err(e) => failed = Some(e),
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        let stats_after = db.scan_stats();
        let paths = (
            stats_after.bulk_blocks - stats_before.bulk_blocks,
            stats_after.patched_keys - stats_before.patched_keys,
            stats_after.merged_rows - stats_before.merged_rows,
        );
        let load_ops_per_sec = (ops.load(Ordering::Relaxed) - ops_before) as f64 / elapsed;
        let secs = median(secs);
        eprintln!(
            "{layout}: {:<28} {:>10.2} ms under load ({load_ops_per_sec:.0} load ops/s)",
            qs[qi].name,
            secs * 1e3
        );
        loaded.push(Loaded { query: qi, secs, load_ops_per_sec, paths });
    }
    stop.store(true, Ordering::Relaxed);
    loader.join().map_err(|_| strata::Error::InvalidArgument("load thread panicked".into()))??;
    if let Some(e) = failed {
        return Err(e);
    }
    db.close()?;
    Ok(LayoutResult { layout: layout.to_string(), times, loaded, scan })
}

/// A peer's configuration and median seconds per query (`None` where it has no such query).
type PeerRun = (String, Vec<Option<f64>>);

/// Loads and runs one peer; `None` if its answers disagree with the data's.
fn one_peer(a: &YcsbSharpArgs, system: &str, truth: &[Answer]) -> Result<Option<PeerRun>, String> {
    let dir = a.common.out.join("data").join(system);
    let (store, config) =
        crate::peers::open_tables(system, &dir, &def(), crate::peers::Tuning::Default, a.common.threads)?;
    let progress = Progress::new(&format!("{system}: load"), a.common.rows);
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.common.seed);
    let n = a.common.rows as i64;
    let mut p = 0;
    while p < n {
        let end = (p + 10_000).min(n);
        let rows: Vec<Vec<Value>> = (p..end).map(|k| row(&mut rng, k)).collect();
        store.load(&rows)?;
        p = end;
        progress.set(p as u64);
    }
    progress.finish();
    eprintln!("{system}: compacting / vacuuming and analyzing");
    store.settle(true)?;
    let mut times = Vec::new();
    for (i, q) in peer_queries().iter().enumerate() {
        let Some(q) = q else {
            times.push(None);
            continue;
        };
        // Warm-up run, which is also the correctness guard.
        let got = store.query(q)?;
        if got != truth[i] {
            eprintln!("{system}: refused, query {} answered {got} but the data holds {}", i + 1, truth[i]);
            return Ok(None);
        }
        let mut secs = Vec::with_capacity(a.runs);
        for _ in 0..a.runs.max(1) {
            let t0 = Instant::now();
            store.query(q)?;
            secs.push(t0.elapsed().as_secs_f64());
        }
        let m = median(secs);
        eprintln!("{system}: query {} {:>10.2} ms  {got}", i + 1, m * 1e3);
        times.push(Some(m));
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Some((config, times)))
}

pub(crate) fn ycsb_sharp(a: &YcsbSharpArgs, root: &Path) -> Result<(), String> {
    let e = |e: strata::Error| e.to_string();
    let systems = a.common.systems()?;
    eprintln!("computing the answers from the generator");
    let truth = truth(a);
    let qs = queries(a.common.threads);
    let mut results = Vec::new();
    if systems.iter().any(|s| s == "strata") {
        for layout in &a.layouts {
            let r = one_layout(a, root, layout).map_err(e)?;
            let _ = std::fs::remove_dir_all(root.join(layout));
            // Every layout must give the data's answers before any figure is reported.
            for (i, q) in qs.iter().enumerate() {
                if r.times[i].1 != truth[i] {
                    return Err(format!(
                        "{}: strata:{layout} answered {} but the data holds {}",
                        q.name, r.times[i].1, truth[i]
                    ));
                }
            }
            results.push(r);
        }
    }
    let mut table = Results::new(
        "ycsb-sharp",
        [
            ("rows", json!(a.common.rows)),
            ("threads", json!(a.common.threads)),
            ("runs", json!(a.runs)),
            ("seed", json!(a.common.seed)),
        ],
    );
    let rate = |secs: f64| a.common.rows as f64 / secs / a.common.threads.max(1) as f64 / 1e6;
    let strata_config = format!(
        "rows loaded in key order, fully compacted, {} MiB block cache (data cached), warmed; median of {} runs",
        a.cache_mib, a.runs
    );
    for r in &results {
        let config = format!(
            "{strata_config}; layout {}",
            if r.layout == "column" { "L1-: one column per group" } else { "row everywhere" }
        );
        for (i, q) in qs.iter().enumerate() {
            table.add_variant("strata", &r.layout, &config, q.name, rate(r.times[i].0), "Mrows/s");
        }
        for l in &r.loaded {
            let name = qs[l.query].name;
            let idle = r.times[l.query].0;
            table.add_variant("strata", &r.layout, &config, &format!("{name} idle"), idle * 1e3, "ms");
            table.add_variant("strata", &r.layout, &config, &format!("{name} under load"), l.secs * 1e3, "ms");
            table.add_variant("strata", &r.layout, &config, &format!("{name} load/idle"), l.secs / idle, "x");
            table.add_variant(
                "strata",
                &r.layout,
                &config,
                &format!("load ops/s during {name}"),
                l.load_ops_per_sec,
                "ops/s",
            );
        }
    }
    for system in systems.iter().filter(|s| *s != "strata") {
        let Some((config, times)) = one_peer(a, system, &truth)? else { continue };
        let config = format!("{config}; loaded in key order, settled, warmed; median of {} runs", a.runs);
        for (q, t) in qs.iter().zip(&times) {
            if let Some(t) = t {
                table.add(system, &config, q.name, rate(*t), "Mrows/s");
            }
        }
    }
    table.finish(&a.common.out)?;
    if !results.is_empty() {
        println!();
        println!(
            "{:<8} {:<28} {:>10} {:>12} {:>9} {:>11} {:>9} {:>11} {:>9}",
            "strata",
            "under a get/update load",
            "idle (ms)",
            "loaded (ms)",
            "slowdown",
            "load ops/s",
            "bulk",
            "mem keys",
            "merged"
        );
    }
    for r in &results {
        for l in &r.loaded {
            let idle = r.times[l.query].0;
            let (bulk, patched, merged) = l.paths;
            println!(
                "{:<8} {:<28} {:>10.2} {:>12.2} {:>8.2}x {:>11.0} {:>9} {:>11} {:>9}",
                r.layout,
                qs[l.query].name,
                idle * 1e3,
                l.secs * 1e3,
                l.secs / idle,
                l.load_ops_per_sec,
                bulk,
                patched,
                merged
            );
        }
    }
    if !results.is_empty() {
        println!("(bulk: blocks read in bulk; mem keys: memtable keys laid over blocks; merged: rows through the per-row merge; over all runs of the query)");
    }
    if !results.is_empty() {
        println!("where strata's blocks went (timed runs): bulk-decoded / answered from statistics / skipped by zone maps / rows merged");
    }
    for r in &results {
        println!(
            "  {:<8} {} / {} / {} / {}",
            r.layout, r.scan.bulk_blocks, r.scan.blocks_from_stats, r.scan.blocks_skipped, r.scan.merged_rows
        );
    }
    Ok(())
}
