//! `strata-bench laser-hw`: LASER's HTAP workload HW (seed 000 §7.2, Table 3), scaled to this
//! machine, on strata's layouts and on the peers.
//!
//! The narrow table has a BIGINT key and 30 INT columns (`--wide`: 100). Keys are spread
//! uniformly over a 40-bit space: the i-th inserted row gets a bijective scramble of i, so key
//! order and insertion order are unrelated, as in the paper. Values are a function of (key,
//! column, version), so the harness knows every answer without storing the table.
//!
//! After loading `--rows` rows, the steady phase runs for `--duration` seconds:
//! - one writer thread: Q1 inserts at `--insert-rate` per second, and after every hundredth a Q5
//!   update of one random column of a key among the most recent 1% of inserts;
//! - `--threads` reader threads (the paper has 4 readers and 1 writer; on 2 cores the default is
//!   1 reader and 1 writer): Q2a point reads of all columns and Q2b of the second half (16-30),
//!   their keys drawn by insertion order from normal distributions with means 0.98 and 0.85
//!   (sd 0.02), spread evenly over the phase; then, in its last fifth, `--scans` each of Q3
//!   (MAX of the last 10% of the columns, 28-30, over half of the key space) and Q4 (SUM of the
//!   last third, 21-30, over 5% of it).
//!
//! `--shift vertical|horizontal` (§7.3) runs two more steady phases after the first, both with
//! the workload shifted: vertically, Q2b, Q3 and Q4 read the first half, tenth and third of the
//! columns instead of the last; horizontally, Q2a and Q2b read older rows (means 0.5 and 0.3).
//! The `self` layout starts in rows with `Options::self_advise` on, so it re-lays itself out
//! during the phases; `advised` is then advised on a warm-up of the shifted workload. Each
//! phase after the shift reports its Q2a-Q4 total and its p99 latencies.
//!
//! Reported per system: load rate, each query's latency (median, p99, mean), the total time the
//! queries Q2a-Q4 took (the paper's Fig. 8a), the phase's wall time and the insert rate reached;
//! for strata also the blocks its Q2a and Q2b point reads read from files per get (cache misses,
//! counted on the reader threads).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use serde_json::json;
use strata::Value;

use crate::harness::{CommonArgs, Latency, Progress, Results};
use crate::tables::{Acc, Agg, Answer, Kind, Output, Query, TableDef, Tables};

#[derive(Parser, Debug)]
pub(crate) struct LaserHwArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// The wide table (100 INT columns) instead of the narrow one (30).
    #[arg(long)]
    wide: bool,
    /// strata layouts to run: lifecycle, row, column, cg3, cg6, cg15, advised, self (the first
    /// is the one peers are compared with). `advised` first runs the same load and steady phase
    /// on rows as a warm-up (with `--shift`, the shifted workload), asks LASER's design advisor
    /// (`Db::advise`, with prices measured on the warm table) for a layout from what each level
    /// served, then runs the measured phase on a fresh table of that layout; the model's
    /// predicted cost of the warm-up's workload under every listed layout is reported beside
    /// the measured times. `self` starts in rows and re-advises itself as it runs
    /// (`Options::self_advise`).
    #[arg(long, value_delimiter = ',', default_values_t = ["lifecycle", "row", "column", "cg3", "cg6", "cg15"].map(String::from).to_vec())]
    layouts: Vec<String>,
    /// Q1 inserts per second in the steady phase (the paper's 10,000 scaled to 2 cores).
    #[arg(long, default_value_t = 2000)]
    insert_rate: u64,
    /// Q3 and Q4 queries each, in the last fifth of the phase (the paper's count).
    #[arg(long, default_value_t = 12)]
    scans: usize,
    /// After the steady phase, two more with the workload shifted (LASER §7.3): `vertical`
    /// (other columns) or `horizontal` (older rows).
    #[arg(long, value_parser = ["vertical", "horizontal"])]
    shift: Option<String>,
}

/// Keys live in [0, 2^40).
const KEY_BITS: u32 = 40;
const KEY_SPACE: i64 = 1 << KEY_BITS;

/// The key of the i-th inserted row: a bijection on 40 bits (xorshifts and odd multiplications
/// modulo 2^40 are each invertible), so keys never collide.
pub(crate) fn key_of(i: u64) -> i64 {
    let m = (1u64 << KEY_BITS) - 1;
    let mut x = i & m;
    x ^= x >> 17;
    x = x.wrapping_mul(0xED5A_D4BB) & m;
    x ^= x >> 11;
    x = x.wrapping_mul(0xAC4C_1B51) & m;
    x ^= x >> 15;
    x = x.wrapping_mul(0x3184_8BAB) & m;
    x ^= x >> 14;
    x as i64
}

/// Column `col`'s value in `key`'s row at `version` (0: as loaded).
fn value(key: i64, col: usize, version: u64) -> i32 {
    let mut x = (key as u64) ^ ((col as u64) << 44) ^ version.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (x ^ (x >> 31)) as i32
}

fn row(cols: usize, i: u64) -> Vec<Value> {
    let k = key_of(i);
    let mut r = Vec::with_capacity(cols + 1);
    r.push(Value::BigInt(k));
    r.extend((1..=cols).map(|c| Value::Int(value(k, c, 0))));
    r
}

pub(crate) fn table(cols: usize) -> TableDef {
    let mut columns = vec![("k".to_string(), Kind::BigInt)];
    columns.extend((1..=cols).map(|c| (format!("c{c}"), Kind::Int)));
    TableDef { name: "r".into(), columns }
}

/// The column sets of the queries: Q2b, Q3 and Q4 take the last half, tenth and third of the
/// columns (16-30, 28-30 and 21-30 on the narrow table, as in the paper); shifted vertically,
/// the first ones; shifted horizontally, the point reads go to older rows.
#[derive(Clone, Copy)]
struct Shape {
    cols: usize,
    vertical: bool,
    horizontal: bool,
}

impl Shape {
    fn new(cols: usize) -> Shape {
        Shape { cols, vertical: false, horizontal: false }
    }

    /// This shape shifted as `--shift` says (`None`: unchanged).
    fn shifted(self, shift: Option<&str>) -> Shape {
        Shape { vertical: shift == Some("vertical"), horizontal: shift == Some("horizontal"), ..self }
    }

    /// Means of the insertion-order positions Q2a and Q2b read.
    fn means(&self) -> (f64, f64) {
        if self.horizontal {
            (0.5, 0.3)
        } else {
            (0.98, 0.85)
        }
    }

    fn all(&self) -> Vec<usize> {
        (1..=self.cols).collect()
    }
    fn last(&self, n: usize) -> Vec<usize> {
        if self.vertical {
            (1..=n).collect()
        } else {
            (self.cols - n + 1..=self.cols).collect()
        }
    }
    fn q2b(&self) -> Vec<usize> {
        self.last(self.cols / 2)
    }
    fn q3(&self, lo: i64) -> Query {
        let aggs = self.last(self.cols / 10).into_iter().map(Agg::Max).collect();
        Query { keys: Some((lo, lo + KEY_SPACE / 2 - 1)), preds: vec![], out: Output::Aggs(aggs) }
    }
    fn q4(&self, lo: i64) -> Query {
        let aggs = self.last(self.cols / 3).into_iter().map(Agg::Sum).collect();
        Query { keys: Some((lo, lo + KEY_SPACE / 20 - 1)), preds: vec![], out: Output::Aggs(aggs) }
    }
}

/// A layout's text for strata (`None`: rows everywhere).
fn layout(name: &str, cols: usize) -> Result<Option<String>, String> {
    let groups = |size: usize| -> String {
        (0..cols.div_ceil(size))
            .map(|g| {
                let names: Vec<String> = (g * size + 1..=((g + 1) * size).min(cols)).map(|c| format!("c{c}")).collect();
                format!("({})", names.join(","))
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let range = |a: usize, b: usize| -> String {
        format!("({})", (a..=b).map(|c| format!("c{c}")).collect::<Vec<_>>().join(","))
    };
    Ok(match name {
        "row" => None,
        "column" => Some(format!("L0: row; L1-: {}", groups(1))),
        "cg3" => Some(format!("L0: row; L1-: {}", groups(3))),
        "cg6" => Some(format!("L0: row; L1-: {}", groups(6))),
        "cg15" => Some(format!("L0: row; L1-: {}", groups(15))),
        // The lifecycle (LASER's D-opt shape): rows where Q2a reads, the two halves (Q2b reads the
        // second) further down, and at the bottom the second half split so Q4 reads only its
        // columns and Q3 only its own (each group inside one of the level above).
        "lifecycle" => {
            let (half, q4, q3) = (cols / 2, cols - cols / 3 + 1, cols - cols / 10 + 1);
            Some(format!(
                "L0-1: row; L2-3: {} {}; L4-: {} {} {} {}",
                range(1, half),
                range(half + 1, cols),
                range(1, half),
                range(half + 1, q4 - 1),
                range(q4, q3 - 1),
                range(q3, cols)
            ))
        }
        other => {
            return Err(format!("unknown layout `{other}` (lifecycle, row, column, cg3, cg6, cg15, advised, self)"))
        }
    })
}

/// strata's options for this workload: the paper's size ratio 2 and a deep tree.
fn strata_options() -> strata::Options {
    strata::Options {
        memtable_size: 4 << 20,
        l1_max_bytes: 8 << 20,
        level_size_ratio: 2,
        target_file_size: 2 << 20,
        ..strata::Options::default()
    }
}

const STRATA_CONFIG: &str = "WAL without fsync, 4 MiB memtable, L1 8 MiB, size ratio 2, 16 KiB blocks, LZ4, 64 MiB \
                             block cache";

/// Opens a system (strata with a layout, or a peer) with the table created.
fn open(
    system: &str,
    layout_name: &str,
    a: &LaserHwArgs,
    def: &TableDef,
    advised: Option<&Advised>,
) -> Result<(Box<dyn Tables>, String), String> {
    let dir = a.common.out.join("data").join(if system == "strata" { layout_name } else { system });
    match system {
        "strata" => {
            let l = match (layout_name, advised) {
                ("advised", Some(adv)) => Some(adv.spec.clone()),
                ("advised", None) => return Err("the advised layout needs its warm-up first".into()),
                ("self", _) => None,
                _ => layout(layout_name, def.columns.len() - 1)?,
            };
            let bloom = strata::Options::default().bloom_bits_per_key;
            let mut config =
                format!("{STRATA_CONFIG}, bloom {bloom} bits/key; layout {}", l.as_deref().unwrap_or("row everywhere"));
            let mut options = strata_options();
            if layout_name == "self" {
                // Re-advised five times a phase.
                let every = Duration::from_secs_f64((a.common.duration.max(1) as f64 / 5.0).max(1.0));
                options.self_advise = Some(every);
                config.push_str(&format!(" at first, self-advising every {:.0} s", every.as_secs_f64()));
            }
            Ok((Box::new(crate::tables::StrataTables::open(&dir, def, options, l.as_deref())?), config))
        }
        other => crate::peers::open_tables(other, &dir, def, crate::peers::Tuning::DeepTree, 1),
    }
}

/// What the `advised` variant's warm-up found: the advised layout and the model's predicted cost
/// of the warm-up's workload under each strata layout run.
struct Advised {
    spec: String,
    predicted: Vec<(String, strata::advisor::model::Cost)>,
}

/// The `advised` variant's warm-up: the same load and steady phase on a table of rows, then the
/// advisor over what each level served, and the model's price of that workload under every
/// strata layout of the run.
fn warm_up(a: &LaserHwArgs, def: &TableDef, shape: &Shape) -> Result<Advised, String> {
    let c = &a.common;
    let label = "strata:advised warm-up (rows)";
    let dir = c.out.join("data").join("advised-warm-up");
    let store = crate::tables::StrataTables::open(&dir, def, strata_options(), None)?;
    crate::harness::load_rows(&store, c.rows, label, |j| row(shape.cols, j))?;
    // The advice and the predictions are for the steady phase's workload alone (the load's
    // inserts are not part of what the measured phase runs), recorded in a trace.
    let trace = c.out.join("data").join("advised-warm-up.trace");
    let _ = std::fs::remove_file(&trace);
    store.trace_start(&trace)?;
    // With a shift, advise for the workload after it.
    steady(&store, a, &shape.shifted(a.shift.as_deref()), label)?;
    store.trace_stop()?;
    let advice = store.advise(Some(&trace));
    let _ = std::fs::remove_file(&trace);
    let advice = advice?;
    let levels = strata_options().num_levels;
    let schema = store.schema().clone();
    eprintln!("advisor: {}", advice.advised);
    let cal = &advice.calibration;
    eprintln!(
        "  prices measured on the warm table, per {:.0}-byte block: point read {:.2} us, scan {:.2} us, write {:.2} us",
        cal.block_bytes, cal.point_block_us, cal.scan_block_us, cal.write_block_us
    );
    eprintln!("  level  current -> advised   predicted ms now / advised (inserts, reads, scans, updates)");
    for l in &advice.levels {
        let ms = |c: &strata::advisor::model::Cost| {
            format!("{:.0}/{:.0}/{:.0}/{:.0}", c.inserts / 1e3, c.point_reads / 1e3, c.scans / 1e3, c.updates / 1e3)
        };
        eprintln!("  L{}  {} -> {}   {} / {}", l.level, l.current, l.advised, ms(&l.current_cost), ms(&l.advised_cost));
        // The model's input at the level: each class of operation by the columns it touched
        // (c1 is value column 0).
        let classes =
            [("reads", &l.workload.point_reads), ("scans", &l.workload.scans), ("updates", &l.workload.updates)];
        for (what, ops) in classes {
            for op in ops.iter() {
                let cols = op.cols.to_vec();
                let cols = match (cols.first(), cols.last()) {
                    (Some(a), Some(b)) if b - a + 1 == cols.len() => format!("c{}-c{}", a + 1, b + 1),
                    _ => cols.iter().map(|c| format!("c{}", c + 1)).collect::<Vec<_>>().join(","),
                };
                eprintln!("      {what} of {cols}: {:.0} (entries each {:.0})", op.count, op.entries);
            }
        }
    }
    let mut predicted = Vec::new();
    for name in a.layouts.iter().filter(|n| *n != "self") {
        let spec = if name == "advised" { Some(advice.advised.clone()) } else { layout(name, shape.cols)? };
        let parsed = match spec {
            Some(s) => strata::column_group::Layout::parse(&s, &schema, levels).map_err(|e| e.to_string())?,
            None => strata::column_group::Layout::row(&schema, levels),
        };
        let cost = advice.cost_of(&parsed);
        eprintln!("  predicted under {name}: {:.1} s", cost.total() / 1e6);
        predicted.push((name.clone(), cost));
    }
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Advised { spec: advice.advised, predicted })
}

/// Answers the guard checks each system on, computed from the generator.
struct Truth {
    gets: Vec<(i64, Vec<Value>)>,
    queries: Vec<(Query, Answer)>,
}

fn truth(a: &LaserHwArgs, shape: &Shape) -> Truth {
    let mut rng = StdRng::seed_from_u64(a.common.seed ^ 0x7107);
    let n = a.common.rows;
    let gets = (0..200)
        .map(|_| {
            let i = rng.gen_range(0..n.max(1));
            let r = row(shape.cols, i);
            let want = shape.all().iter().map(|&c| r[c].clone()).collect();
            (key_of(i), want)
        })
        .collect();
    let qs = [shape.q3(rng.gen_range(0..KEY_SPACE / 2)), shape.q4(rng.gen_range(0..KEY_SPACE / 20 * 19))];
    let mut accs: Vec<Acc> = qs.iter().map(Acc::new).collect();
    for i in 0..n {
        let r = row(shape.cols, i);
        for acc in &mut accs {
            acc.add(&r);
        }
    }
    let answers: Vec<Answer> = accs.into_iter().map(Acc::finish).collect();
    Truth { gets, queries: qs.into_iter().zip(answers).collect() }
}

fn check(store: &dyn Tables, truth: &Truth, shape: &Shape) -> Result<(), String> {
    for (k, want) in &truth.gets {
        let got = store.get(*k, &shape.all())?;
        if got.as_ref() != Some(want) {
            return Err(format!("row {k}: got {got:?}, want {want:?}"));
        }
    }
    for (q, want) in &truth.queries {
        let got = store.query(q)?;
        if &got != want {
            return Err(format!("{q:?}: got {got}, want {want}"));
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Event {
    Q2a,
    Q2b,
    Q3,
    Q4,
}

/// The figures of one steady phase.
struct Phase {
    lat: [Latency; 6],
    /// Blocks strata's Q2a and Q2b point reads read from files (cache misses; 0 for the peers).
    get_reads: [u64; 2],
    secs: f64,
    /// Inserts per second over the writer's own run.
    insert_rate: f64,
    /// Seconds the system's flushes and compactions took during the phase (strata's; 0 for the
    /// peers): the background side of the inserts' and updates' cost.
    background_secs: f64,
}

impl Phase {
    /// Total time of the queries with latency slots `slots` (0 Q1 ... 5 Q5), in seconds.
    fn total(&self, slots: std::ops::RangeInclusive<usize>) -> f64 {
        slots.map(|i| self.lat[i].mean() * self.lat[i].count() as f64 / 1e6).sum()
    }
}

/// Seconds `store`'s flushes and compactions have taken so far (0 for systems that do not say).
fn background_secs(store: &dyn Tables) -> f64 {
    store.counters().iter().filter(|(name, ..)| *name == "flush time" || *name == "compaction time").map(|c| c.1).sum()
}

/// Runs `f`; if it fails, tells the other threads to stop.
fn guarded<T>(failed: &AtomicBool, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let r = f();
    if r.is_err() {
        failed.store(true, Ordering::Relaxed);
    }
    r
}

const NAMES: [&str; 6] = ["Q1 insert", "Q2a get 1-30", "Q2b get 16-30", "Q3 max", "Q4 sum", "Q5 update"];

fn steady(store: &dyn Tables, a: &LaserHwArgs, shape: &Shape, label: &str) -> Result<Phase, String> {
    let c = &a.common;
    let secs = c.duration.max(1) as f64;
    let inserts = a.insert_rate * c.duration.max(1);
    let point = if c.ops > 0 { c.ops } else { 500 * c.duration.max(1) };
    let readers = c.threads.max(1);
    let inserted = AtomicU64::new(c.rows);
    let failed = AtomicBool::new(false);
    // Each reader's events in time order: point reads spread over the phase, alternating Q2a and
    // Q2b; scans spread over its last fifth, alternating Q3 and Q4.
    let mut plans: Vec<Vec<(f64, Event)>> = vec![Vec::new(); readers];
    for q in 0..2 * point {
        let ev = if q % 2 == 0 { Event::Q2a } else { Event::Q2b };
        plans[(q % readers as u64) as usize].push((secs * q as f64 / (2 * point) as f64, ev));
    }
    for s in 0..2 * a.scans {
        let ev = if s % 2 == 0 { Event::Q3 } else { Event::Q4 };
        plans[s % readers].push((secs * (0.8 + 0.2 * s as f64 / (2 * a.scans) as f64), ev));
    }
    for p in &mut plans {
        p.sort_by(|x, y| x.0.total_cmp(&y.0));
    }
    let progress = Progress::new(&format!("{label}: steady phase"), inserts);
    let background_before = background_secs(store);
    let started = Instant::now();
    let wait_until = |t: f64| {
        let ahead = t - started.elapsed().as_secs_f64();
        if ahead > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(ahead));
        }
    };
    #[allow(clippy::type_complexity)]
    let (writer, readers): (Result<([Latency; 2], f64), String>, Vec<Result<([Latency; 4], [u64; 2]), String>>) =
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                guarded(&failed, || -> Result<([Latency; 2], f64), String> {
                    let mut rng = StdRng::seed_from_u64(c.seed ^ 0x3171);
                    let (mut q1, mut q5) = (Latency::new(), Latency::new());
                    for j in 0..inserts {
                        if failed.load(Ordering::Relaxed) {
                            break;
                        }
                        wait_until(j as f64 / a.insert_rate as f64);
                        let i = c.rows + j;
                        let t0 = Instant::now();
                        store.insert(&row(shape.cols, i))?;
                        q1.record(t0.elapsed());
                        inserted.store(i + 1, Ordering::Release);
                        if j % 100 == 99 {
                            let recent = ((i + 1) / 100).max(1);
                            let k = key_of(rng.gen_range(i + 1 - recent..=i));
                            let col = rng.gen_range(1..=shape.cols);
                            let t0 = Instant::now();
                            store.update(k, col, &Value::Int(value(k, col, j + 1)))?;
                            q5.record(t0.elapsed());
                        }
                        progress.set(j + 1);
                    }
                    Ok(([q1, q5], started.elapsed().as_secs_f64()))
                })
            });
            let handles: Vec<_> = plans
                .iter()
                .enumerate()
                .map(|(ri, plan)| {
                    let (inserted, failed, wait_until) = (&inserted, &failed, &wait_until);
                    s.spawn(move || {
                        guarded(failed, || -> Result<([Latency; 4], [u64; 2]), String> {
                            let mut rng = StdRng::seed_from_u64(c.seed ^ (0x5ead + ri as u64));
                            let (m2a, m2b) = shape.means();
                            let recent = Normal::new(m2a, 0.02).map_err(|e| e.to_string())?;
                            let older = Normal::new(m2b, 0.02).map_err(|e| e.to_string())?;
                            let mut lat: [Latency; 4] = Default::default();
                            let mut get_reads = [0u64; 2];
                            let (all, q2b) = (shape.all(), shape.q2b());
                            for &(t, ev) in plan {
                                if failed.load(Ordering::Relaxed) {
                                    break;
                                }
                                wait_until(t);
                                let n = inserted.load(Ordering::Acquire);
                                let pick = |rng: &mut StdRng, d: &Normal<f64>| {
                                    let pos: f64 = d.sample(rng).clamp(0.0, 1.0);
                                    key_of(((pos * n as f64) as u64).min(n - 1))
                                };
                                let t0 = Instant::now();
                                let slot = match ev {
                                    Event::Q2a | Event::Q2b => {
                                        let (d, cols, slot) = match ev {
                                            Event::Q2a => (&recent, &all, 0),
                                            _ => (&older, &q2b, 1),
                                        };
                                        let k = pick(&mut rng, d);
                                        let io = strata::thread_io();
                                        if store.get(k, cols)?.is_none() {
                                            return Err(format!("row {k} is missing"));
                                        }
                                        get_reads[slot] += strata::thread_io().since(io).block_reads;
                                        slot
                                    }
                                    Event::Q3 => {
                                        store.query(&shape.q3(rng.gen_range(0..KEY_SPACE / 2)))?;
                                        2
                                    }
                                    Event::Q4 => {
                                        store.query(&shape.q4(rng.gen_range(0..KEY_SPACE / 20 * 19)))?;
                                        3
                                    }
                                };
                                lat[slot].record(t0.elapsed());
                            }
                            Ok((lat, get_reads))
                        })
                    })
                })
                .collect();
            let readers = handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("reader thread panicked".into())))
                .collect();
            let writer = writer.join().unwrap_or_else(|_| Err("writer thread panicked".into()));
            (writer, readers)
        });
    let secs = started.elapsed().as_secs_f64();
    progress.finish();
    let ([q1, q5], writer_secs) = writer?;
    let mut lat: [Latency; 6] = Default::default();
    let mut get_reads = [0u64; 2];
    lat[0] = q1;
    lat[5] = q5;
    for r in readers {
        let (l, reads) = r?;
        for (i, l) in l.iter().enumerate() {
            lat[i + 1].merge(l);
        }
        get_reads[0] += reads[0];
        get_reads[1] += reads[1];
    }
    if let Some(layout) = store.layout() {
        eprintln!("{label}: layout at the end of the phase: {layout}");
    }
    Ok(Phase {
        lat,
        get_reads,
        secs,
        insert_rate: (inserted.load(Ordering::Acquire) - c.rows) as f64 / writer_secs,
        background_secs: background_secs(store) - background_before,
    })
}

pub(crate) fn laser_hw(a: &LaserHwArgs) -> Result<(), String> {
    let cols = if a.wide { 100 } else { 30 };
    let shape = Shape::new(cols);
    let def = table(cols);
    let c = &a.common;
    let systems = c.systems()?;
    for l in a.layouts.iter().filter(|l| *l != "advised" && *l != "self") {
        layout(l, cols)?;
    }
    let mut results = Results::new(
        "laser-hw",
        [
            ("rows", json!(c.rows)),
            ("columns", json!(cols)),
            ("duration_s", json!(c.duration)),
            ("insert_rate", json!(a.insert_rate)),
            ("point_reads_per_variant", json!(if c.ops > 0 { c.ops } else { 500 * c.duration.max(1) })),
            ("scans_per_query", json!(a.scans)),
            ("reader_threads", json!(c.threads.max(1))),
            ("writer_threads", json!(1)),
            ("seed", json!(c.seed)),
            ("shift", json!(a.shift)),
        ],
    );
    eprintln!("computing the guard's answers from the generator");
    let truth = truth(a, &shape);
    let advised = if systems.iter().any(|s| s == "strata") && a.layouts.iter().any(|l| l == "advised") {
        Some(warm_up(a, &def, &shape)?)
    } else {
        None
    };
    for (system, variant) in &crate::harness::runs(&systems, &a.layouts) {
        let label = if variant.is_empty() { system.clone() } else { format!("{system}:{variant}") };
        let (store, config) = open(system, variant, a, &def, advised.as_ref())?;
        let load_rate = crate::harness::load_rows(store.as_ref(), c.rows, &label, |j| row(cols, j))?;
        if let Err(e) = check(store.as_ref(), &truth, &shape) {
            eprintln!("{label}: refused, its answers disagree with the generator's: {e}");
            continue;
        }
        let phase = steady(store.as_ref(), a, &shape, &label)?;
        let add = |r: &mut Results, metric: &str, value: f64, unit: &str| {
            r.add_variant(system, variant, &config, metric, value, unit)
        };
        add(&mut results, "load", load_rate, "rows/s");
        add(&mut results, "Q1 insert rate reached", phase.insert_rate, "ops/s");
        for (i, l) in phase.lat.iter().enumerate() {
            if l.count() == 0 {
                continue;
            }
            add(&mut results, &format!("{} p50", NAMES[i]), l.quantile(0.5), "us");
            add(&mut results, &format!("{} p99", NAMES[i]), l.quantile(0.99), "us");
            add(&mut results, &format!("{} mean", NAMES[i]), l.mean(), "us");
        }
        add(&mut results, "Q2a-Q4 total time", phase.total(1..=4), "s");
        add(&mut results, "Q1-Q5 total time", phase.total(0..=5), "s");
        if system == "strata" {
            // The measured side of the model's classes: point reads, scans, and the writes'
            // foreground latency plus what flushes and compactions took meanwhile.
            add(&mut results, "measured point reads (Q2a, Q2b)", phase.total(1..=2), "s");
            add(&mut results, "measured scans (Q3, Q4)", phase.total(3..=4), "s");
            let writes = phase.total(0..=0) + phase.total(5..=5) + phase.background_secs;
            add(&mut results, "measured inserts+updates (Q1, Q5, flushes, compactions)", writes, "s");
        }
        if system == "strata" {
            // Cache misses per point read, counted on the reader threads.
            for (i, name) in [(0, "Q2a"), (1, "Q2b")] {
                let gets = phase.lat[i + 1].count().max(1) as f64;
                add(&mut results, &format!("{name} blocks read per get"), phase.get_reads[i] as f64 / gets, "blocks");
            }
        }
        add(&mut results, "phase wall time", phase.secs, "s");
        if a.shift.is_some() {
            // Two phases of the shifted workload: the first is where a self-advising table
            // re-lays itself out, the second shows where it settled.
            let shifted = shape.shifted(a.shift.as_deref());
            for n in 1..=2 {
                let p = steady(store.as_ref(), a, &shifted, &format!("{label}: after the shift ({n})"))?;
                add(&mut results, &format!("after the shift ({n}): Q2a-Q4 total time"), p.total(1..=4), "s");
                add(&mut results, &format!("after the shift ({n}): Q1-Q5 total time"), p.total(0..=5), "s");
                for (i, name) in [(0, "Q1 insert"), (1, "Q2a get"), (2, "Q2b get"), (5, "Q5 update")] {
                    if p.lat[i].count() > 0 {
                        add(&mut results, &format!("after the shift ({n}): {name} p99"), p.lat[i].quantile(0.99), "us");
                    }
                }
            }
        }
        if let Some(cost) = advised.as_ref().and_then(|adv| adv.predicted.iter().find(|(n, _)| n == variant)) {
            let cost = cost.1;
            add(&mut results, "predicted total (model)", cost.total() / 1e6, "s");
            add(&mut results, "predicted point reads (model)", cost.point_reads / 1e6, "s");
            add(&mut results, "predicted scans (model)", cost.scans / 1e6, "s");
            add(&mut results, "predicted inserts+updates (model)", (cost.inserts + cost.updates) / 1e6, "s");
        }
        // Counted since the store opened: the guard's two scans and the phase's.
        crate::harness::finish_run(&mut results, (system, variant, &config), store, &c.out);
    }
    results.finish(&c.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_never_collide_and_stay_in_the_key_space() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..200_000 {
            let k = key_of(i);
            assert!((0..KEY_SPACE).contains(&k), "key {k} of row {i} is outside the key space");
            assert!(seen.insert(k), "row {i} repeats key {k}");
        }
    }

    #[test]
    fn query_columns_match_the_paper_on_the_narrow_table() {
        let s = Shape::new(30);
        assert_eq!(s.q2b(), (16..=30).collect::<Vec<_>>());
        let Output::Aggs(q3) = s.q3(0).out else { panic!("Q3 aggregates") };
        assert_eq!(q3.iter().map(|a| if let Agg::Max(c) = a { *c } else { 0 }).collect::<Vec<_>>(), vec![28, 29, 30]);
        let Output::Aggs(q4) = s.q4(0).out else { panic!("Q4 aggregates") };
        assert_eq!(q4.len(), 10);
        assert!(matches!(q4[0], Agg::Sum(21)));
        // Shifted vertically the queries read the first columns; horizontally, older rows.
        let v = s.shifted(Some("vertical"));
        assert_eq!(v.q2b(), (1..=15).collect::<Vec<_>>());
        let Output::Aggs(q3) = v.q3(0).out else { panic!("Q3 aggregates") };
        assert!(matches!(q3[..], [Agg::Max(1), Agg::Max(2), Agg::Max(3)]));
        assert_eq!(s.shifted(Some("horizontal")).means(), (0.5, 0.3));
        assert_eq!(s.shifted(None).means(), (0.98, 0.85));
    }

    #[test]
    fn every_layout_is_accepted_by_strata() {
        let dir = tempfile::tempdir().expect("temp dir");
        for (i, name) in ["lifecycle", "row", "column", "cg3", "cg6", "cg15"].iter().enumerate() {
            for cols in [30, 100] {
                let l = layout(name, cols).expect("known layout");
                let path = dir.path().join(format!("{i}-{cols}"));
                crate::tables::StrataTables::open(&path, &table(cols), strata_options(), l.as_deref())
                    .unwrap_or_else(|e| panic!("layout {name} on {cols} columns: {e}"));
            }
        }
        assert!(layout("cg4", 30).is_err());
    }
}
