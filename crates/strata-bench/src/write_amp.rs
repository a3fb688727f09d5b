//! `strata-bench write-amp`: what aligned compaction (Kim et al., seed 001 §IV, Fig. 10-11)
//! saves in write amplification. One writer overwrites random keys with incompressible values;
//! then the last memtable is flushed and compactions are left to finish. Each tree shape (size
//! ratio, i.e. fanout) and key distribution (zipfian exponent; 0 is uniform) runs on a fresh
//! database with aligned compaction off and on, and on RocksDB shaped the same when it is built
//! in.
//!
//! Reported per run: bytes written into each level (flush into Level-0, compaction into the
//! others), write amplification both as the paper defines it (all bytes written ÷ bytes written
//! into Level-0) and against the bytes users wrote, bytes compactions read, writes per second
//! over the write phase, and how long writers stalled on background work. RocksDB's figures come
//! from its own statistics (flush and compaction bytes written, user bytes written), its
//! per-level split from the compaction table of `rocksdb.cfstats` (in tenths of a gigabyte,
//! Level-0-to-Level-0 merges counted into Level-0), its stalls from `rocksdb.dbstats`.

use std::time::Instant;

use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde_json::json;
use strata::{Column, ColumnType, Compression, Db, Options, Schema, TableOptions, Value};

use crate::harness::{Progress, Results};

#[derive(Parser, Debug)]
pub(crate) struct WriteAmpArgs {
    /// Distinct keys the writes choose from.
    #[arg(long, default_value_t = 500_000)]
    keys: u64,
    /// Writes per run.
    #[arg(long, default_value_t = 1_000_000)]
    writes: u64,
    /// Bytes of each value (incompressible; compression is off, as in the paper).
    #[arg(long, default_value_t = 1024)]
    value_bytes: usize,
    /// Size ratios between adjacent levels, one run each.
    #[arg(long, value_delimiter = ',', default_value = "2,6,10")]
    fanouts: Vec<u64>,
    /// Zipfian exponents of the key choice, one run each with every fanout (0 = uniform).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    zipf: Vec<f64>,
    /// Memtable size in MiB.
    #[arg(long, default_value_t = 2)]
    memtable_mib: u64,
    /// Target size of compaction output files in MiB.
    #[arg(long, default_value_t = 1)]
    file_mib: u64,
    /// Target size of Level-1 in MiB (each next level: × fanout).
    #[arg(long, default_value_t = 4)]
    l1_mib: u64,
    /// How far aligned cuts may move a file's size from the target (strata's
    /// `alignment_variance`).
    #[arg(long, default_value_t = 2.0)]
    variance: f64,
    /// Systems to run: strata, and rocksdb when built in (default: both if built).
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// Random seed (the same writes for every run).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directory for results.json and chart.png (and the databases, removed after each run).
    #[arg(long, default_value = "bench-out")]
    out: std::path::PathBuf,
}

/// The tree shape and workload of one run, shared with the RocksDB peer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub memtable: u64,
    pub file: u64,
    pub l1: u64,
    pub fanout: u64,
    pub levels: usize,
}

/// Bytes one run wrote, as the system counts them.
pub(crate) struct Written {
    /// Bytes written into each level, if the system splits them (index = level).
    pub per_level: Vec<u64>,
    /// Bytes flushes wrote (into Level-0).
    pub flushed: u64,
    /// Bytes flushes and compactions wrote.
    pub total: u64,
    /// Bytes of keys and values users wrote.
    pub user: u64,
    /// Bytes compactions read, if counted.
    pub compaction_read: Option<u64>,
    /// Microseconds writers waited on background work (stopped or slowed down), if reported.
    pub stall_micros: Option<u64>,
}

/// The key of write number `i`: a rank drawn uniformly or by Zipf, scrambled so hot ranks spread
/// over the key space.
struct Keys {
    rng: StdRng,
    zipf: Option<Zipf<f64>>,
    keys: u64,
}

impl Keys {
    fn new(a: &WriteAmpArgs, exponent: f64) -> Result<Self, String> {
        let zipf = if exponent > 0.0 {
            Some(Zipf::new(a.keys, exponent).map_err(|e| format!("zipf exponent {exponent}: {e}"))?)
        } else {
            None
        };
        Ok(Keys { rng: StdRng::seed_from_u64(a.seed), zipf, keys: a.keys })
    }

    fn next(&mut self) -> (i64, usize) {
        let rank = match &self.zipf {
            Some(z) => z.sample(&mut self.rng) as u64 - 1,
            None => self.rng.gen_range(0..self.keys),
        };
        (scramble(rank) as i64, self.rng.gen())
    }
}

/// A bijection on u64 (splitmix64's finalizer).
fn scramble(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Bytes written into each level, from the `Write(GB)` column of the `Compaction Stats` table
/// in RocksDB's `rocksdb.cfstats` text (flushes count into Level-0). RocksDB prints gigabytes
/// with one decimal, so each figure is good to about 100 MiB. Empty if the table is missing.
#[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
pub(crate) fn level_writes(stats: &str) -> Vec<u64> {
    let mut lines = stats.lines();
    let Some(header) = lines.find(|l| l.trim_start().starts_with("Level") && l.contains("Write(GB)")) else {
        return Vec::new();
    };
    let columns: Vec<&str> = header.split_whitespace().collect();
    let Some(write) = columns.iter().position(|&c| c == "Write(GB)") else { return Vec::new() };
    let mut out = Vec::new();
    for line in lines {
        let mut cells: Vec<&str> = line.split_whitespace().collect();
        let Some(level) = cells.first().and_then(|c| c.strip_prefix('L')).and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        // Newer versions print the size with its unit ("4.00 MB"): one cell more than the header.
        if cells.len() == columns.len() + 1 {
            cells.remove(3);
        }
        let Some(gb) = cells.get(write).and_then(|c| c.parse::<f64>().ok()) else { continue };
        if out.len() <= level {
            out.resize(level + 1, 0);
        }
        out[level] = (gb * (1u64 << 30) as f64) as u64;
    }
    out
}

/// Incompressible bytes that values are cut from at random offsets.
fn value_pool(seed: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x7a1e);
    (0..4 << 20).map(|_| rng.gen()).collect()
}

/// Performs the run's writes through `put(key, value)` with a progress line; returns writes per
/// second.
fn drive(
    a: &WriteAmpArgs,
    exponent: f64,
    label: &str,
    mut put: impl FnMut(i64, &[u8]) -> Result<(), String>,
) -> Result<f64, String> {
    let pool = value_pool(a.seed);
    let mut keys = Keys::new(a, exponent)?;
    let progress = Progress::new(label, a.writes);
    let t0 = Instant::now();
    for i in 0..a.writes {
        let (k, off) = keys.next();
        let off = off % (pool.len() - a.value_bytes);
        put(k, &pool[off..off + a.value_bytes])?;
        if i % 1024 == 0 {
            progress.set(i);
        }
    }
    let rate = a.writes as f64 / t0.elapsed().as_secs_f64();
    progress.finish();
    Ok(rate)
}

fn run_strata(a: &WriteAmpArgs, shape: &Shape, exponent: f64, aligned: bool) -> Result<(Written, f64), String> {
    let e = |e: strata::Error| e.to_string();
    let dir = a.out.join("data").join(format!("strata-{}-{exponent}-{aligned}", shape.fanout));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = Options {
        memtable_size: shape.memtable as usize,
        level_size_ratio: shape.fanout,
        l1_max_bytes: shape.l1,
        target_file_size: shape.file,
        num_levels: shape.levels,
        compression: Compression::None,
        alignment_variance: a.variance,
        ..Options::default()
    };
    let db = Db::open(&dir, opts).map_err(e)?;
    let schema =
        Schema::new(vec![Column::not_null("k", ColumnType::BigInt), Column::new("v", ColumnType::Bytea)], &["k"])
            .map_err(e)?;
    let t = db.create_table("t", schema, TableOptions::default().aligned(aligned)).map_err(e)?;
    let label = format!("strata, fanout {}, zipf {exponent}, aligned {}", shape.fanout, on_off(aligned));
    let rate = drive(a, exponent, &label, |k, v| t.insert(&[Value::BigInt(k), Value::Bytea(v.to_vec())]).map_err(e))?;
    db.flush().map_err(e)?;
    db.wait_for_compactions().map_err(e)?;
    let stats = db.stats();
    let ts = stats.tables.first().ok_or("strata: the table is missing from the statistics")?;
    let per_level: Vec<u64> = ts.levels.iter().map(|l| l.bytes_written).collect();
    let written = Written {
        flushed: per_level.first().copied().unwrap_or(0),
        total: per_level.iter().sum(),
        per_level,
        user: ts.ingested_bytes,
        compaction_read: Some(ts.levels.iter().map(|l| l.bytes_read).sum()),
        stall_micros: Some(stats.write_stall_micros),
    };
    drop(t);
    db.close().map_err(e)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok((written, rate))
}

#[cfg(feature = "rocksdb")]
fn run_rocksdb(a: &WriteAmpArgs, shape: &Shape, exponent: f64) -> Result<(Written, f64), String> {
    let dir = a.out.join("data").join(format!("rocksdb-{}-{exponent}", shape.fanout));
    let _ = std::fs::remove_dir_all(&dir);
    let db = crate::peers::rocksdb::WriteAmpDb::open(&dir, shape)?;
    let rate = drive(a, exponent, &format!("rocksdb, fanout {}, zipf {exponent}", shape.fanout), |k, v| db.put(k, v))?;
    let written = db.finish()?;
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
    Ok((written, rate))
}

#[cfg(not(feature = "rocksdb"))]
fn run_rocksdb(_: &WriteAmpArgs, _: &Shape, _: f64) -> Result<(Written, f64), String> {
    Err(crate::peers::not_built("rocksdb"))
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// Adds one run's figures under metrics prefixed with `p`.
fn report(r: &mut Results, system: &str, variant: &str, config: &str, p: &str, w: &Written, rate: f64) {
    let mut add = |m: String, v: f64, u: &str| {
        if variant.is_empty() {
            r.add(system, config, &m, v, u);
        } else {
            r.add_variant(system, variant, config, &m, v, u);
        }
    };
    add(format!("{p}: write amplification (÷ L0 writes)"), w.amplification(), "x");
    add(format!("{p}: write amplification (÷ user bytes)"), div(w.total, w.user), "x");
    add(format!("{p}: bytes written"), mib(w.total), "MiB");
    for (level, &b) in w.per_level.iter().enumerate().filter(|(_, &b)| b > 0) {
        add(format!("{p}: L{level} written"), mib(b), "MiB");
    }
    if let Some(read) = w.compaction_read {
        add(format!("{p}: compaction bytes read"), mib(read), "MiB");
    }
    add(format!("{p}: writes/s"), rate, "ops/s");
    if let Some(stalled) = w.stall_micros {
        add(format!("{p}: write stalls"), stalled as f64 / 1e6, "s");
    }
}

pub(crate) fn write_amp(a: &WriteAmpArgs) -> Result<(), String> {
    let built = crate::peers::built();
    let systems: Vec<String> = if a.systems.is_empty() {
        std::iter::once("strata").chain(built.iter().copied().filter(|&s| s == "rocksdb")).map(String::from).collect()
    } else {
        a.systems.clone()
    };
    for s in &systems {
        match s.as_str() {
            "strata" => {}
            "rocksdb" if built.contains(&"rocksdb") => {}
            "rocksdb" => return Err(crate::peers::not_built("rocksdb")),
            other => return Err(format!("write-amp runs on strata and rocksdb only, not `{other}`")),
        }
    }
    if a.value_bytes == 0 || a.value_bytes > 1 << 20 {
        return Err("--value-bytes must be 1..=1048576".into());
    }
    if a.keys == 0 || a.writes == 0 || a.fanouts.iter().any(|&f| f < 2) || a.zipf.iter().any(|z| z.is_nan() || *z < 0.0)
    {
        return Err("--keys and --writes must be positive, fanouts at least 2, zipf exponents at least 0".into());
    }
    let mut results = Results::new(
        "write-amp",
        [
            ("keys", json!(a.keys)),
            ("writes", json!(a.writes)),
            ("value_bytes", json!(a.value_bytes)),
            ("fanouts", json!(a.fanouts)),
            ("zipf", json!(a.zipf)),
            ("memtable_mib", json!(a.memtable_mib)),
            ("file_mib", json!(a.file_mib)),
            ("l1_mib", json!(a.l1_mib)),
            ("variance", json!(a.variance)),
            ("seed", json!(a.seed)),
        ],
    );
    let config = format!(
        "{} MiB memtable, {} MiB files, L1 {} MiB, no compression, levels enough for the data plus one",
        a.memtable_mib, a.file_mib, a.l1_mib
    );
    let rocks_config = format!("{config}; static level sizes, RocksDB's default compaction priority");
    let mut summary = Vec::new();
    for &exponent in &a.zipf {
        for &fanout in &a.fanouts {
            // Enough levels for the data at this fanout, plus one.
            let data = a.keys.min(a.writes) * (a.value_bytes as u64 + 8);
            let mut levels = 2;
            let mut cap = a.l1_mib << 20;
            while cap < data && levels < 40 {
                cap = cap.saturating_mul(fanout);
                levels += 1;
            }
            let shape = Shape {
                memtable: a.memtable_mib << 20,
                file: a.file_mib << 20,
                l1: a.l1_mib << 20,
                fanout,
                levels: levels + 1,
            };
            let p = format!("fanout {fanout}, zipf {exponent}");
            let mut amps = Vec::new();
            for s in &systems {
                if s == "strata" {
                    for aligned in [false, true] {
                        let (w, rate) = run_strata(a, &shape, exponent, aligned)?;
                        amps.push(w.amplification());
                        let variant = format!("aligned {}", on_off(aligned));
                        report(&mut results, "strata", &variant, &config, &p, &w, rate);
                    }
                } else {
                    let (w, rate) = run_rocksdb(a, &shape, exponent)?;
                    report(&mut results, "rocksdb", "", &rocks_config, &p, &w, rate);
                    summary.push(format!("{p}: RocksDB write amplification {:.2}", w.amplification()));
                }
            }
            if let [off, on, ..] = amps[..] {
                summary.push(format!(
                    "{p}: strata write amplification {off:.2} (aligned off) -> {on:.2} (on), {:+.1}%",
                    (on / off - 1.0) * 100.0
                ));
            }
        }
    }
    results.finish(&a.out)?;
    for line in summary {
        println!("{line}");
    }
    Ok(())
}

fn div(x: u64, y: u64) -> f64 {
    if y == 0 {
        0.0
    } else {
        x as f64 / y as f64
    }
}

impl Written {
    /// Write amplification as the paper defines it: all bytes written ÷ bytes written into
    /// Level-0.
    fn amplification(&self) -> f64 {
        div(self.total, self.flushed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrambled_keys_are_distinct() {
        let keys: std::collections::HashSet<u64> = (0..100_000).map(scramble).collect();
        assert_eq!(keys.len(), 100_000);
    }

    #[test]
    fn level_writes_come_from_the_write_column() {
        let stats = "\n** Compaction Stats [default] **\n\
            Level    Files   Size     Score Read(GB)  Rn(GB) Rnp1(GB) Write(GB) Wnew(GB) Moved(GB) W-Amp\n\
            -------------------------------------------------------------------------------------------\n  \
              L0      0/0    0.00 KB   0.0      0.0     0.0      0.0       1.0      1.0       0.0   1.0\n  \
              L2     40/0   39.50 MB   1.0      3.2     1.1      2.1       2.5      0.4       0.1   2.3\n \
             Sum     40/0   39.50 MB   0.0      3.2     1.1      2.1       3.5      1.4       0.1   3.3\n";
        let gib = 1u64 << 30;
        assert_eq!(level_writes(stats), vec![gib, 0, (2.5 * gib as f64) as u64]);
        assert!(level_writes("no table here").is_empty());
    }
}
