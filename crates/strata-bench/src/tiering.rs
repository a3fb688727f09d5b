//! `strata-bench tiering`: LogStore's experiments on two storage tiers (seed 002 §VI), strata
//! against itself under four placements of the same data:
//! - `all-slow`: one tier, on a device slowed to a hard disk (LogStore's LDB-HDD);
//! - `round-robin`: a fast tier (SSD profile) with a byte budget and the slow one, files leaving
//!   the fast tier temperature-blind, round-robin over the key space (LS-UO);
//! - `leveled`: the same tiers with informed and reverse compaction, but plain leveled writes:
//!   every flush probes the slow tier itself (LS-NH without deferred and staging compaction);
//! - `informed`: the same tiers with informed, reverse, deferred and staging compaction (LS-NH);
//! - `all-fast`: one tier on the SSD profile, the ceiling.
//!
//! Round-robin placement also writes plain leveled (LS-UO has no deferred or staging
//! compaction).
//!
//! Every run loads `--rows` records (a BIGINT key, `--fields` fields of `--field-bytes` random
//! letters) in a shuffled key order, checks a sample of answers, then runs for `--duration`
//! seconds each, with `--threads` clients:
//! 1. YCSB C (reads only) with Zipf `--zipf` keys that are not scrambled, so the hot keys form
//!    one range, as LogStore's per-file histograms need;
//! 2. YCSB C again with the hot range moved to the middle of the key space (Fig. 9 analogue:
//!    `tiering-c.png` plots throughput per second across both phases, `tiering-c.csv` lists it);
//! 3. each of `--workloads` (`a`, `b-10`, `b-90`, `write-only`) on the moved hot range.
//!
//! A phase's throughput is the mean over its second half (the first half lets placement adapt).
//! The fast tier's budget is `--fast-share` of the loaded table's bytes (measured by a load on
//! an unslowed directory first), and the block cache (`--cache`) holds a small share of it, so
//! reads reach the devices. The slowed filesystem charges its latency whatever the page cache
//! holds. `--predict` adds the hybrid model's prediction (LogStore eqs. 1-9, from the measured
//! tier sizes) beside every throughput.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde_json::json;
use strata::tier::model::{predict, DeviceRates, ModelInput};
use strata::vfs::DeviceProfile;
use strata::{
    Column, ColumnType, Db, Options, Projection, ReadOptions, Schema, Stats, Table, TableOptions, Tier, TierPlacement,
    Value,
};

use crate::harness::{Progress, Results};
use crate::ycsb::field_value;

#[derive(Parser, Debug)]
pub(crate) struct TieringArgs {
    /// Records to load.
    #[arg(long, default_value_t = 200_000)]
    rows: u64,
    /// Fields per record.
    #[arg(long, default_value_t = 2)]
    fields: usize,
    /// Bytes per field.
    #[arg(long, default_value_t = 100)]
    field_bytes: usize,
    /// Zipf exponent of the key popularity (keys not scrambled: the hot keys are one range).
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Placements to compare, comma-separated: all-slow, round-robin, leveled, informed, all-fast.
    #[arg(long, value_delimiter = ',', default_value = "all-slow,round-robin,informed")]
    placements: Vec<String>,
    /// Workloads after the two YCSB C phases, comma-separated: a, b-10, b-90, write-only (none: -).
    #[arg(long, value_delimiter = ',', default_value = "a,b-10")]
    workloads: Vec<String>,
    /// Seconds of each phase.
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Client threads.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// The fast tier's budget, as a share of the loaded table's bytes.
    #[arg(long, default_value_t = 0.5)]
    fast_share: f64,
    /// Block cache bytes.
    #[arg(long, default_value_t = 1 << 20)]
    cache: u64,
    /// Half-life of the access histograms, in seconds.
    #[arg(long, default_value_t = 10)]
    half_life: u64,
    /// Print the hybrid throughput model's prediction beside each measurement.
    #[arg(long)]
    predict: bool,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directory for results.json, the charts and the data.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
}

const PLACEMENTS: [&str; 5] = ["all-slow", "round-robin", "leveled", "informed", "all-fast"];

/// Share of reads of a workload, or `None` if unknown.
fn read_share(workload: &str) -> Option<f64> {
    Some(match workload {
        "c" => 1.0,
        "b-90" => 0.9,
        "a" => 0.5,
        "b-10" => 0.1,
        "write-only" => 0.0,
        _ => return None,
    })
}

fn fast_device() -> DeviceProfile {
    DeviceProfile::ssd()
}

fn slow_device() -> DeviceProfile {
    DeviceProfile::hard_disk()
}

/// The engine's shape for every placement: a small tree, so the data spans several levels.
fn options(a: &TieringArgs) -> Options {
    Options {
        memtable_size: 4 << 20,
        l1_max_bytes: 8 << 20,
        target_file_size: 2 << 20,
        block_cache_size: a.cache as usize,
        heat_half_life: Duration::from_secs(a.half_life),
        ..Options::default()
    }
}

/// The tiers of `placement` under `dir` (the database directory is `dir/db`).
fn tiers(placement: &str, dir: &Path, budget: u64) -> Vec<Tier> {
    let db = dir.join("db");
    match placement {
        "size" => Vec::new(),
        "all-slow" => vec![Tier::new("slow", db).with_profile(slow_device())],
        "all-fast" => vec![Tier::new("fast", db).with_profile(fast_device())],
        _ => vec![
            Tier::new("fast", db).with_profile(fast_device()).with_budget(budget),
            Tier::new("slow", dir.join("slow")).with_profile(slow_device()),
        ],
    }
}

fn schema(fields: usize) -> Result<Schema, String> {
    let mut cols = vec![Column::not_null("k", ColumnType::BigInt)];
    cols.extend((0..fields).map(|f| Column::new(format!("field{f}"), ColumnType::Bytea)));
    Schema::new(cols, &["k"]).map_err(|e| e.to_string())
}

fn row(key: u64, a: &TieringArgs) -> Vec<Value> {
    let mut r = vec![Value::BigInt(key as i64)];
    r.extend((0..a.fields).map(|f| Value::Bytea(field_value(key, f, 0, a.field_bytes))));
    r
}

/// The `i`-th key of the load: a fixed permutation of `0..rows`, so no placement starts with
/// its hot range where the load order happened to leave it.
fn load_key(i: u64, rows: u64) -> u64 {
    const STRIDE: u64 = 2_654_435_761;
    let stride = if rows.is_multiple_of(STRIDE) { 1 } else { STRIDE % rows.max(1) };
    (u128::from(i) * u128::from(stride) % u128::from(rows.max(1))) as u64
}

/// Opens a fresh database for `placement` under `dir`, loads it and waits for compactions.
fn load(a: &TieringArgs, placement: &str, dir: &Path, budget: u64) -> Result<(Db, Table, f64), String> {
    let e = |e: strata::Error| e.to_string();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let placement_policy = if placement == "round-robin" { TierPlacement::RoundRobin } else { TierPlacement::Informed };
    let opts = Options {
        tiers: tiers(placement, dir, budget),
        tier_placement: placement_policy,
        deferred_compaction: placement == "informed",
        ..options(a)
    };
    let db = Db::open(dir.join("db"), opts).map_err(e)?;
    let t = db.create_table("usertable", schema(a.fields)?, TableOptions::default()).map_err(e)?;
    let progress = Progress::new(&format!("{placement}: load"), a.rows);
    let loaded = AtomicU64::new(0);
    let start = Instant::now();
    let threads = a.threads.max(1) as u64;
    std::thread::scope(|s| -> Result<(), String> {
        let handles: Vec<_> = (0..threads)
            .map(|ti| {
                let (t, loaded, progress) = (&t, &loaded, &progress);
                s.spawn(move || -> Result<(), String> {
                    for i in (ti * a.rows / threads)..((ti + 1) * a.rows / threads) {
                        t.insert(&row(load_key(i, a.rows), a)).map_err(|e| e.to_string())?;
                        progress.set(loaded.fetch_add(1, Ordering::Relaxed) + 1);
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|_| Err("loader thread panicked".into())))
    })?;
    db.flush().map_err(e)?;
    db.wait_for_compactions().map_err(e)?;
    progress.finish();
    let secs = start.elapsed().as_secs_f64();
    let mut rng = StdRng::seed_from_u64(a.seed);
    for _ in 0..200 {
        let k = rng.gen_range(0..a.rows);
        let got = t.get(&[Value::BigInt(k as i64)], &Projection::All, &ReadOptions::default()).map_err(e)?;
        if got.as_deref() != Some(&row(k, a)[..]) {
            return Err(format!("{placement}: key {k}: wrong record after the load"));
        }
    }
    Ok((db, t, a.rows as f64 / secs))
}

/// Runs one phase of `workload` with the hot range starting at key `offset`: operations per
/// second, one figure per elapsed second.
fn phase(a: &TieringArgs, t: &Table, workload: &str, offset: u64, label: &str) -> Result<Vec<f64>, String> {
    let reads =
        read_share(workload).ok_or_else(|| format!("unknown workload `{workload}` (a, b-10, b-90, write-only)"))?;
    let zipf = Zipf::new(a.rows.max(1), a.zipf).map_err(|e| format!("zipfian({}): {e}", a.zipf))?;
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let version = AtomicU64::new(1);
    let mut per_second = Vec::new();
    std::thread::scope(|s| -> Result<(), String> {
        let handles: Vec<_> = (0..a.threads.max(1))
            .map(|ti| {
                let (stop, ops, version, zipf) = (&stop, &ops, &version, &zipf);
                s.spawn(move || -> Result<(), String> {
                    let mut rng = StdRng::seed_from_u64(a.seed ^ ((ti as u64 + 1) << 20) ^ offset);
                    while !stop.load(Ordering::Relaxed) {
                        let rank = zipf.sample(&mut rng) as u64 - 1;
                        let k = (rank + offset) % a.rows;
                        let key = [Value::BigInt(k as i64)];
                        if rng.gen::<f64>() < reads {
                            t.get(&key, &Projection::All, &ReadOptions::default()).map_err(|e| e.to_string())?;
                        } else {
                            let f = rng.gen_range(0..a.fields);
                            let v = field_value(k, f, version.fetch_add(1, Ordering::Relaxed), a.field_bytes);
                            t.update(&key, &[(format!("field{f}").as_str(), Value::Bytea(v))])
                                .map_err(|e| e.to_string())?;
                        }
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        let progress = Progress::new(&format!("{label} (seconds)"), a.duration);
        let start = Instant::now();
        let mut last = 0;
        for second in 1..=a.duration {
            let wake = start + Duration::from_secs(second);
            std::thread::sleep(wake.saturating_duration_since(Instant::now()));
            let now = ops.load(Ordering::Relaxed);
            per_second.push((now - last) as f64);
            last = now;
            progress.set(second);
            if handles.iter().any(|h| h.is_finished()) {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        progress.finish();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|_| Err("client thread panicked".into())))
    })?;
    Ok(per_second)
}

/// The mean of the second half of a phase's figures.
fn settled(per_second: &[f64]) -> f64 {
    let tail = &per_second[per_second.len() / 2..];
    tail.iter().sum::<f64>() / tail.len().max(1) as f64
}

/// The hybrid model's prediction for `placement` with the tree as `st` shows it.
fn model(a: &TieringArgs, placement: &str, st: &Stats, workload: &str) -> f64 {
    let total = st.tiers.iter().map(|t| t.bytes).sum::<u64>().max(1);
    let levels_on = |tier: usize| {
        st.tables.iter().flat_map(|t| &t.levels).filter(|l| l.tier_bytes.get(tier).is_some_and(|b| *b > 0)).count()
            as u32
    };
    let block = Options::default().block_size;
    let (fast, slow) = (DeviceRates::of(&fast_device(), block), DeviceRates::of(&slow_device(), block));
    let (fast_share, fast_levels, slow_levels, fast, slow) = match placement {
        "all-slow" => (0.0, 0, levels_on(0), slow, slow),
        "all-fast" => (1.0, levels_on(0), 0, fast, slow),
        _ => (st.tiers[0].bytes as f64 / total as f64, levels_on(0), levels_on(1).max(1), fast, slow),
    };
    let m = ModelInput {
        fast,
        slow,
        records: a.rows,
        fast_share,
        ram_share: (a.cache as f64 / total as f64).min(1.0),
        skew: a.zipf,
        fast_levels,
        slow_levels,
        growth: Options::default().level_size_ratio as f64,
        record_bytes: total as f64 / a.rows.max(1) as f64,
        read_share: read_share(workload).unwrap_or(1.0),
        hottest_fast: placement != "round-robin",
    };
    predict(&m).mixed
}

pub(crate) fn tiering(a: &TieringArgs) -> Result<(), String> {
    if let Some(p) = a.placements.iter().find(|p| !PLACEMENTS.contains(&p.as_str())) {
        return Err(format!("unknown placement `{p}` ({})", PLACEMENTS.join(", ")));
    }
    let workloads: Vec<&str> = a.workloads.iter().map(String::as_str).filter(|w| *w != "-").collect();
    if let Some(w) = workloads.iter().find(|w| read_share(w).is_none()) {
        return Err(format!("unknown workload `{w}` (a, b-10, b-90, write-only)"));
    }
    if a.rows < 1000 || a.duration < 2 || !(0.01..1.0).contains(&a.fast_share) {
        return Err("need --rows >= 1000, --duration >= 2 and 0.01 <= --fast-share < 1".into());
    }
    let data = a.out.join("data");
    // The table's size decides the fast tier's budget: load it once without slowing or tiers.
    let (bytes, budget) = {
        let dir = data.join("size");
        let (db, table, _) = load(a, "size", &dir, 0)?;
        let bytes: u64 = db.stats().tiers.iter().map(|t| t.bytes).sum();
        drop((table, db));
        let _ = std::fs::remove_dir_all(&dir);
        (bytes, (bytes as f64 * a.fast_share) as u64)
    };
    let mut results = Results::new(
        "tiering",
        [
            ("rows", json!(a.rows)),
            ("table_bytes", json!(bytes)),
            ("fast_budget_bytes", json!(budget)),
            ("block_cache_bytes", json!(a.cache)),
            ("zipf", json!(a.zipf)),
            ("duration_s", json!(a.duration)),
            ("threads", json!(a.threads)),
            ("half_life_s", json!(a.half_life)),
            ("fast_device", json!(format!("{:?}", fast_device()))),
            ("slow_device", json!(format!("{:?}", slow_device()))),
            ("seed", json!(a.seed)),
        ],
    );
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for placement in &a.placements {
        let dir = data.join(placement);
        let (db, t, load_rate) = load(a, placement, &dir, budget)?;
        // strata's informed placement is the column the others are compared with.
        let (system, variant) = if placement == "informed" { ("strata", "informed") } else { (placement.as_str(), "") };
        let config = match placement.as_str() {
            "all-slow" => "one tier, hard-disk profile".to_string(),
            "all-fast" => "one tier, SSD profile".to_string(),
            p => {
                let how = match p {
                    "informed" => "informed placement, deferred and staging compaction",
                    "leveled" => "informed placement, plain leveled writes",
                    _ => "round-robin placement, plain leveled writes",
                };
                format!("fast tier (SSD profile) {} MiB + slow tier (hard-disk profile), {how}", budget >> 20)
            }
        };
        let mut add =
            |metric: &str, value: f64, unit: &str| results.add_variant(system, variant, &config, metric, value, unit);
        add("load", load_rate, "ops/s");
        let mut line = Vec::new();
        let mut clock = 0.0;
        for (name, offset) in [("C", 0), ("C after shift", a.rows / 2)] {
            let before = db.stats();
            let per = phase(a, &t, "c", offset, &format!("{placement}: {name}"))?;
            let st = db.stats();
            line.extend(per.iter().enumerate().map(|(i, v)| (clock + i as f64 + 1.0, *v)));
            clock += per.len() as f64;
            add(&format!("{name} throughput"), settled(&per), "ops/s");
            if a.predict {
                add(&format!("{name} predicted"), model(a, placement, &st, "c"), "ops/s");
            }
            let reads: Vec<u64> =
                st.tiers.iter().zip(&before.tiers).map(|(x, y)| x.block_reads.saturating_sub(y.block_reads)).collect();
            let slow_reads = if placement == "all-fast" { 0 } else { *reads.last().unwrap_or(&0) };
            add(&format!("{name} slow-tier blocks/op"), slow_reads as f64 / per.iter().sum::<f64>().max(1.0), "blocks");
        }
        series.push((placement.clone(), line));
        for w in &workloads {
            let before = db.stats();
            let per = phase(a, &t, w, a.rows / 2, &format!("{placement}: {w}"))?;
            let after = db.stats();
            let name = w.to_uppercase();
            add(&format!("{name} throughput"), settled(&per), "ops/s");
            let client_micros = per.len() as f64 * a.threads.max(1) as f64 * 1e6;
            let stall = after.write_stall_micros.saturating_sub(before.write_stall_micros) as f64;
            add(&format!("{name} writers stalled"), 100.0 * stall / client_micros, "%");
            // Where the writes' time went: each flush's duration (marking included), and the
            // slow tier's block reads per operation (flush probes, compactions, reads).
            let flushes = after.flushes.saturating_sub(before.flushes);
            let flush_ms = after.flush_micros.saturating_sub(before.flush_micros) as f64 / 1e3;
            add(&format!("{name} ms per flush"), flush_ms / flushes.max(1) as f64, "ms");
            let slow_reads = match (after.tiers.last(), before.tiers.last()) {
                (Some(x), Some(y)) if placement != "all-fast" => x.block_reads.saturating_sub(y.block_reads),
                _ => 0,
            };
            add(&format!("{name} slow-tier blocks/op"), slow_reads as f64 / per.iter().sum::<f64>().max(1.0), "blocks");
            let staged = after.staging_compactions.saturating_sub(before.staging_compactions);
            add(&format!("{name} staging compactions"), staged as f64, "");
            if a.predict {
                add(&format!("{name} predicted"), model(a, placement, &db.stats(), w), "ops/s");
            }
        }
        let st = db.stats();
        add("fast tier", st.tiers.first().filter(|_| st.tiers.len() > 1).map_or(0.0, |t| t.bytes as f64) / 1e6, "MB");
        drop((t, db));
        let _ = std::fs::remove_dir_all(&dir);
    }
    results.finish(&a.out)?;
    let mut csv = String::from("placement,second,ops\n");
    for (name, points) in &series {
        for (t, v) in points {
            csv.push_str(&format!("{name},{t},{v}\n"));
        }
    }
    let path = a.out.join("tiering-c.csv");
    std::fs::write(&path, csv).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("wrote {}", path.display());
    let marks = [a.duration as f64];
    match crate::chart::lines(
        &a.out.join("tiering-c.png"),
        "tiering: YCSB C, hot range moved",
        "ops/s",
        &series,
        &marks,
    ) {
        Ok(p) => eprintln!("wrote {}", p.display()),
        Err(e) => eprintln!("no time-series chart: {e}"),
    }
    Ok(())
}
