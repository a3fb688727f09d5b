//! `strata-bench lstore`: L-Store's evaluation (seed 004 §6) scaled to this machine: short
//! update transactions against a long-running analytical scan, at three degrees of contention,
//! on strata's lineage engine, on strata's LSM engine (row and column layouts) and on the peers.
//!
//! The table has a BIGINT key and 10 BIGINT columns, `--rows` rows (the 2,000,000)
//! loaded in key order. An *update transaction* is the paper's short transaction, run through
//! each system's own transactions: 8 point reads of whole rows and 2 writes, each setting 4 of
//! the 10 columns (40%) of a row it read: 3 columns drawn at random get random values and the
//! last column, a counter, gets the value read plus 1. All rows are drawn uniformly from the
//! *active set* (the two written rows distinct). The active set is `--active` percent of the rows
//! spread evenly over the key space: 100% (low contention), 5% (medium), 0.5% (high). A
//! transaction the system aborts on a conflict is counted and run again with the same rows until
//! it commits. The scan thread sums one column over a random 10% of the key range, in a loop.
//!
//! The counters make lost or doubled transactions visible: after each contention level the
//! counter column must sum to its loaded sum plus 2 for every transaction committed so far (a
//! lost update, a commit that was acknowledged but not applied, or one applied twice, breaks it).
//! strata runs each transaction in a [`strata::Transaction`] (snapshot isolation, first committer
//! wins); RocksDB in a pessimistic `TransactionDB` transaction with a snapshot, the written rows
//! read with `get_for_update`; PostgreSQL at REPEATABLE READ; SQLite in `BEGIN IMMEDIATE`
//! (one writer at a time, so it never aborts); DuckDB in its own optimistic transactions.
//!
//! Per system and contention level: first the scan alone for half of `--duration` (its latency
//! without updates), then `--threads` update threads with the scan thread for `--duration`
//! seconds: committed update transactions per second, aborts, the scan's latency under updates
//! and, on the lineage engine, the merge lag (tail records not yet merged) sampled every 100 ms. Levels run one after
//! the other on the same loaded table; after the load each system gets a guard check of point
//! reads and one scan against the generator.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use serde_json::json;
use strata::Value;

use crate::harness::{CommonArgs, Latency, Progress, Results};
use crate::tables::{Acc, Agg, Answer, Kind, Output, Query, RowWrite, TableDef, Tables, Txn};

#[derive(Parser, Debug)]
pub(crate) struct LstoreArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// strata variants to run: `lineage` (the lineage engine), `row` and `column` (the LSM engine
    /// with rows everywhere, or one column per group from Level-1 on).
    #[arg(long, value_delimiter = ',', default_values_t = ["lineage", "row", "column"].map(String::from).to_vec())]
    variants: Vec<String>,
    /// Active sets as percent of the rows (contention levels: 100 low, 5 medium, 0.5 high).
    #[arg(long, value_delimiter = ',', default_values_t = vec![100.0, 5.0, 0.5])]
    active: Vec<f64>,
    /// Lineage engine: committed tail records a range gathers before it is merged (the
    /// paper's M, Fig. 6; default the engine's).
    #[arg(long)]
    merge_threshold: Option<usize>,
}

/// Value columns.
const COLS: usize = 10;
/// Columns each write sets (40%).
const WRITE_COLS: usize = 4;
const READS_PER_OP: usize = 8;
const WRITES_PER_OP: usize = 2;
/// The column the scan sums.
const SCAN_COL: usize = 1;
/// The column each write adds 1 to.
const COUNTER: usize = COLS;

fn table() -> TableDef {
    let mut columns = vec![("k".to_string(), Kind::BigInt)];
    columns.extend((1..=COLS).map(|c| (format!("c{c}"), Kind::BigInt)));
    TableDef { name: "lstore".into(), columns }
}

/// The loaded value of column `c` of row `k`.
fn value(k: i64, c: usize) -> i64 {
    k.wrapping_mul(31).wrapping_add(c as i64 * 1_000_003) % 1_000_000
}

fn row(k: i64) -> Vec<Value> {
    std::iter::once(Value::BigInt(k)).chain((1..=COLS).map(|c| Value::BigInt(value(k, c)))).collect()
}

/// The scan of `[lo, lo + rows/10)`.
fn scan_query(lo: i64, rows: u64) -> Query {
    let hi = lo + (rows / 10).max(1) as i64 - 1;
    Query { keys: Some((lo, hi)), preds: Vec::new(), out: Output::Aggs(vec![Agg::Sum(SCAN_COL)]) }
}

fn strata_options(a: &LstoreArgs) -> strata::Options {
    let d = strata::Options::default();
    strata::Options { lineage_merge_threshold: a.merge_threshold.unwrap_or(d.lineage_merge_threshold), ..d }
}

/// Opens a system (strata with a variant, or a peer) with the table created.
fn open(system: &str, variant: &str, a: &LstoreArgs, def: &TableDef) -> Result<(Box<dyn Tables>, String), String> {
    let dir = a.common.out.join("data").join(if system == "strata" { variant } else { system });
    match system {
        "strata" => {
            let (topts, what) = match variant {
                "lineage" => (strata::TableOptions::engine(strata::Engine::Lineage), "lineage engine"),
                "row" => (strata::TableOptions::default(), "LSM engine, rows everywhere"),
                "column" => {
                    (strata::TableOptions::with_layout("L0: row; L1-: column"), "LSM engine, column per group from L1")
                }
                other => return Err(format!("unknown strata variant `{other}` (lineage, row, column)")),
            };
            let o = strata_options(a);
            let config = format!(
                "{what}; WAL without fsync, {} MiB memtable, {} MiB block cache, ranges of {} records, merge at {}",
                o.memtable_size >> 20,
                o.block_cache_size >> 20,
                o.lineage_range,
                o.lineage_merge_threshold
            );
            Ok((Box::new(crate::tables::StrataTables::open_with(&dir, def, o, topts)?), config))
        }
        other => crate::peers::open_txn_tables(other, &dir, def),
    }
}

/// Point reads and one scan against the generator, before anything is updated.
fn check(store: &dyn Tables, rows: u64, seed: u64) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x15f0);
    let all: Vec<usize> = (0..=COLS).collect();
    for _ in 0..200 {
        let k = rng.gen_range(0..rows) as i64;
        let got = store.get(k, &all)?;
        if got.as_ref() != Some(&row(k)) {
            return Err(format!("row {k}: got {got:?}"));
        }
    }
    let q = scan_query(rng.gen_range(0..rows - rows / 10) as i64, rows);
    let mut acc = Acc::new(&q);
    let (lo, hi) = q.keys.unwrap_or((0, -1));
    for k in lo..=hi {
        acc.add(&row(k));
    }
    let want = acc.finish();
    let got = store.query(&q)?;
    if got != want {
        return Err(format!("{q:?}: got {got}, want {want}"));
    }
    Ok(())
}

/// What one contention level measured.
struct Level {
    scan_alone: Latency,
    scan_loaded: Latency,
    /// Committed update transactions.
    ops: u64,
    /// Transactions the system aborted (each was run again).
    aborts: u64,
    secs: f64,
    lag: Vec<u64>,
}

/// The counter column's sum over the whole table.
fn counter_sum(store: &dyn Tables) -> Result<i128, String> {
    let q = Query { keys: None, preds: Vec::new(), out: Output::Aggs(vec![Agg::Sum(COUNTER)]) };
    match store.query(&q)? {
        Answer::Aggs(v) => v.first().copied().flatten().ok_or_else(|| "the counter sum is NULL".to_string()),
        other => Err(format!("the counter sum answered {other}")),
    }
}

/// The counter column's sum as loaded.
fn loaded_counter_sum(rows: u64) -> i128 {
    (0..rows as i64).map(|k| i128::from(value(k, COUNTER))).sum()
}

/// One update transaction's rows: 8 reads, the first 2 of them the (distinct) written rows, and
/// the writes.
fn draw_txn(rng: &mut StdRng, active: u64, stride: i64) -> (Vec<i64>, Vec<RowWrite>) {
    let written: Vec<i64> = sample(rng, active as usize, WRITES_PER_OP).iter().map(|i| i as i64 * stride).collect();
    let mut reads = written.clone();
    reads.extend((WRITES_PER_OP..READS_PER_OP).map(|_| rng.gen_range(0..active) as i64 * stride));
    let writes = written
        .into_iter()
        .map(|k| {
            // Columns 1..COUNTER-1 drawn; the counter is the fourth.
            let set: Vec<(usize, Value)> = sample(rng, COUNTER - 1, WRITE_COLS - 1)
                .iter()
                .map(|i| (i + 1, Value::BigInt(rng.gen_range(0..1_000_000))))
                .collect();
            (k, set)
        })
        .collect();
    (reads, writes)
}

/// Runs the scan thread alone, then with the update threads, on `active` rows spread over the
/// table.
fn level(store: &dyn Tables, a: &LstoreArgs, active: u64, label: &str) -> Result<Level, String> {
    let c = &a.common;
    let rows = c.rows;
    let stride = (rows / active.max(1)).max(1) as i64;
    let phase = Duration::from_secs(c.duration.max(2));
    let failed = AtomicBool::new(false);
    let scan_loop = |stop: &AtomicBool, seed: u64| -> Result<Latency, String> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut lat = Latency::new();
        while !stop.load(Ordering::Relaxed) && !failed.load(Ordering::Relaxed) {
            let q = scan_query(rng.gen_range(0..rows - rows / 10) as i64, rows);
            let t0 = Instant::now();
            match store.query(&q) {
                Ok(Answer::Aggs(_)) => lat.record(t0.elapsed()),
                Ok(other) => return Err(format!("scan answered {other}")),
                Err(e) => {
                    failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(lat)
    };
    eprintln!("{label}: scan alone for {} s", phase.as_secs() / 2);
    let stop = AtomicBool::new(false);
    let scan_alone = std::thread::scope(|s| {
        let h = s.spawn(|| scan_loop(&stop, c.seed ^ 0x5ca1));
        std::thread::sleep(phase / 2);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap_or_else(|_| Err("scan thread panicked".into()))
    })?;

    let progress = Progress::new(&format!("{label}: updates with the scan"), phase.as_secs());
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let aborts = AtomicU64::new(0);
    let started = Instant::now();
    let (scan_loaded, writers, lag) = std::thread::scope(|s| {
        let scan = s.spawn(|| scan_loop(&stop, c.seed ^ 0x5ca2));
        let writers: Vec<_> = (0..c.threads.max(1))
            .map(|w| {
                let (stop, ops, aborts, failed) = (&stop, &ops, &aborts, &failed);
                s.spawn(move || -> Result<(), String> {
                    let mut rng = StdRng::seed_from_u64(c.seed ^ (0x0b7 + w as u64));
                    while !stop.load(Ordering::Relaxed) && !failed.load(Ordering::Relaxed) {
                        let (reads, writes) = draw_txn(&mut rng, active, stride);
                        // Run again until it commits; the counters count only commits.
                        loop {
                            match store.update_txn(&reads, &writes, COUNTER) {
                                Ok(Txn::Committed) => break,
                                Ok(Txn::Aborted) => {
                                    aborts.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => {
                                    failed.store(true, Ordering::Relaxed);
                                    return Err(e);
                                }
                            }
                        }
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        let mut lag = Vec::new();
        while started.elapsed() < phase && !failed.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            if let Some(l) = store.merge_lag() {
                lag.push(l);
            }
            progress.set(started.elapsed().as_secs());
        }
        stop.store(true, Ordering::Relaxed);
        let writers: Vec<Result<(), String>> =
            writers.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("update thread panicked".into()))).collect();
        (scan.join().unwrap_or_else(|_| Err("scan thread panicked".into())), writers, lag)
    });
    let secs = started.elapsed().as_secs_f64();
    progress.finish();
    for w in writers {
        w?;
    }
    Ok(Level {
        scan_alone,
        scan_loaded: scan_loaded?,
        ops: ops.load(Ordering::Relaxed),
        aborts: aborts.load(Ordering::Relaxed),
        secs,
        lag,
    })
}

/// The contention level's name.
fn contention(pct: f64) -> String {
    let name = if pct >= 50.0 {
        "low"
    } else if pct >= 1.0 {
        "medium"
    } else {
        "high"
    };
    format!("{name} ({pct}%)")
}

pub(crate) fn lstore(a: &LstoreArgs) -> Result<(), String> {
    let c = &a.common;
    if c.rows < 1000 {
        return Err("--rows must be at least 1000".into());
    }
    if let Some(p) = a.active.iter().find(|p| !(**p > 0.0 && **p <= 100.0)) {
        return Err(format!("--active takes percentages in (0, 100], got {p}"));
    }
    let def = table();
    let systems = c.systems()?;
    let mut results = Results::new(
        "lstore",
        [
            ("rows", json!(c.rows)),
            ("value_columns", json!(COLS)),
            (
                "op",
                json!(format!(
                    "one transaction: {READS_PER_OP} reads + {WRITES_PER_OP} writes of {WRITE_COLS} columns (one a counter)"
                )),
            ),
            ("active_percent", json!(a.active)),
            ("update_threads", json!(c.threads.max(1))),
            ("scan_threads", json!(1)),
            ("duration_s", json!(c.duration)),
            ("merge_threshold", json!(strata_options(a).lineage_merge_threshold)),
            ("seed", json!(c.seed)),
        ],
    );
    for (system, variant) in &crate::harness::runs(&systems, &a.variants) {
        let label = if variant.is_empty() { system.clone() } else { format!("{system}:{variant}") };
        let (store, config) = open(system, variant, a, &def)?;
        let load_rate = crate::harness::load_rows(store.as_ref(), c.rows, &label, |k| row(k as i64))?;
        if let Err(e) = check(store.as_ref(), c.rows, c.seed) {
            eprintln!("{label}: refused, its answers disagree with the generator's: {e}");
            continue;
        }
        let add = |r: &mut Results, metric: &str, value: f64, unit: &str| {
            r.add_variant(system, variant, &config, metric, value, unit)
        };
        add(&mut results, "load", load_rate, "rows/s");
        let mut counters = loaded_counter_sum(c.rows);
        for &pct in &a.active {
            let active = ((c.rows as f64 * pct / 100.0) as u64).max(WRITES_PER_OP as u64);
            let name = contention(pct);
            let l = level(store.as_ref(), a, active, &format!("{label}, {name}"))?;
            counters += i128::from(l.ops) * WRITES_PER_OP as i128;
            let got = counter_sum(store.as_ref())?;
            if got != counters {
                return Err(format!(
                    "{label}, {name}: the counters sum to {got}, but {} committed transactions make {counters}: a \
                     transaction was lost or applied twice",
                    l.ops
                ));
            }
            add(&mut results, &format!("{name}: update txns"), l.ops as f64 / l.secs, "txn/s");
            add(&mut results, &format!("{name}: aborts"), l.aborts as f64, "txns");
            add(
                &mut results,
                &format!("{name}: aborted share"),
                100.0 * l.aborts as f64 / (l.ops + l.aborts).max(1) as f64,
                "%",
            );
            add(&mut results, &format!("{name}: scan alone p50"), l.scan_alone.quantile(0.5), "us");
            add(&mut results, &format!("{name}: scan under updates p50"), l.scan_loaded.quantile(0.5), "us");
            add(&mut results, &format!("{name}: scan under updates p99"), l.scan_loaded.quantile(0.99), "us");
            add(&mut results, &format!("{name}: scans under updates"), l.scan_loaded.count() as f64, "scans");
            if !l.lag.is_empty() {
                let mean = l.lag.iter().sum::<u64>() as f64 / l.lag.len() as f64;
                add(&mut results, &format!("{name}: merge lag mean"), mean, "records");
                add(
                    &mut results,
                    &format!("{name}: merge lag max"),
                    l.lag.iter().copied().max().unwrap_or(0) as f64,
                    "records",
                );
            }
        }
        crate::harness::finish_run(&mut results, (system, variant, &config), store, &c.out);
    }
    results.finish(&c.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_covers_a_tenth_of_the_rows_and_values_stay_in_range() {
        let q = scan_query(100, 1000);
        assert_eq!(q.keys, Some((100, 199)));
        for k in [0, 1, 999_999, 1 << 40] {
            for c in 1..=COLS {
                assert!((0..1_000_000).contains(&value(k, c)));
            }
        }
        assert_eq!(row(5).len(), COLS + 1);
        assert_eq!(contention(0.5), "high (0.5%)");
        assert_eq!(contention(5.0), "medium (5%)");
        assert_eq!(contention(100.0), "low (100%)");
    }

    #[test]
    fn a_transaction_writes_two_distinct_rows_it_read_and_never_sets_the_counter_itself() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..1000 {
            let (reads, writes) = draw_txn(&mut rng, 2, 500);
            assert_eq!(reads.len(), READS_PER_OP);
            assert_eq!(writes.len(), WRITES_PER_OP);
            assert_ne!(writes[0].0, writes[1].0);
            for (k, set) in &writes {
                assert!(reads.contains(k) && k % 500 == 0 && *k < 1000);
                assert_eq!(set.len(), WRITE_COLS - 1);
                assert!(set.iter().all(|(c, _)| (1..COUNTER).contains(c)));
            }
        }
        assert_eq!(loaded_counter_sum(3), (0..3).map(|k| i128::from(value(k, COUNTER))).sum::<i128>());
    }
}
