//! `strata-bench ycsb`: the YCSB core workloads (A-F) and LogStore's variants (A-RMW, B-90, B-10,
//! write-only) with uniform, zipfian or latest key choice, a load phase and a run phase reported
//! separately.
//!
//! Records: a BIGINT key and `--fields` fields of `--field-bytes` bytes. Field contents are a
//! function of (key, field, version), so every system's answers can be checked before any figure
//! is reported: after the load, each system must return exactly the expected record for a sample
//! of keys, or it is refused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};
use serde_json::json;

use crate::harness::{CommonArgs, Latency, Progress, Results};

#[derive(Parser, Debug)]
pub(crate) struct YcsbArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Workload: a, b, c, d, e, f, a-rmw, b-90, b-10, write-only.
    #[arg(long, default_value = "a")]
    workload: String,
    /// Key choice: uniform, zipfian, latest (workload d always uses latest).
    #[arg(long, default_value = "zipfian")]
    distribution: String,
    /// Zipfian exponent.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Fields per record.
    #[arg(long, default_value_t = 10)]
    fields: usize,
    /// Bytes per field.
    #[arg(long, default_value_t = 100)]
    field_bytes: usize,
    /// Also report, for strata's measured phase, the waits on the engine's locks: per lock site
    /// that was waited on, the waits and the milliseconds waited (summed over threads).
    #[arg(long)]
    lock_waits: bool,
}

/// One kind of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

const OPS: [Op; 5] = [Op::Read, Op::Update, Op::Insert, Op::Scan, Op::ReadModifyWrite];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Update => "update",
            Op::Insert => "insert",
            Op::Scan => "scan",
            Op::ReadModifyWrite => "read-modify-write",
        }
    }
}

/// Proportions of read, update, insert, scan, read-modify-write.
fn mix(workload: &str) -> Option<[f64; 5]> {
    Some(match workload {
        "a" => [0.5, 0.5, 0.0, 0.0, 0.0],
        "b" => [0.95, 0.05, 0.0, 0.0, 0.0],
        "c" => [1.0, 0.0, 0.0, 0.0, 0.0],
        "d" => [0.95, 0.0, 0.05, 0.0, 0.0],
        "e" => [0.0, 0.0, 0.05, 0.95, 0.0],
        "f" | "a-rmw" => [0.5, 0.0, 0.0, 0.0, 0.5],
        "b-90" => [0.9, 0.1, 0.0, 0.0, 0.0],
        "b-10" => [0.1, 0.9, 0.0, 0.0, 0.0],
        "write-only" => [0.0, 1.0, 0.0, 0.0, 0.0],
        _ => return None,
    })
}

/// What a system under test must do. Keys are dense integers from 0.
pub(crate) trait Store: Send + Sync {
    /// Inserts (or replaces) a whole record.
    fn insert(&self, key: u64, fields: &[Vec<u8>]) -> Result<(), String>;
    /// The record's fields, if it exists.
    fn read(&self, key: u64) -> Result<Option<Vec<Vec<u8>>>, String>;
    /// Sets one field.
    fn update(&self, key: u64, field: usize, value: &[u8]) -> Result<(), String>;
    /// Keys of up to `n` records from `start` on, in key order.
    fn scan(&self, start: u64, n: usize) -> Result<Vec<u64>, String>;
    /// Microseconds writers have so far waited on background work (flush, compaction), where
    /// the system counts them.
    fn stall_micros(&self) -> Option<u64> {
        None
    }
}

/// The content of a field: deterministic in (key, field, version).
pub(crate) fn field_value(key: u64, field: usize, version: u64, len: usize) -> Vec<u8> {
    let mut x =
        key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((field as u64) << 48) ^ version.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b'a' + (x % 26) as u8
        })
        .collect()
}

fn record(key: u64, fields: usize, len: usize) -> Vec<Vec<u8>> {
    (0..fields).map(|f| field_value(key, f, 0, len)).collect()
}

/// Chooses keys among `0..n` (n grows with inserts).
struct KeyChooser {
    kind: String,
    zipf: Option<Zipf<f64>>,
}

impl KeyChooser {
    fn new(kind: &str, n: u64, s: f64) -> Result<Self, String> {
        let zipf = match kind {
            "uniform" => None,
            "zipfian" | "latest" => Some(Zipf::new(n.max(1), s).map_err(|e| format!("zipfian({s}): {e}"))?),
            other => return Err(format!("unknown distribution `{other}` (uniform, zipfian, latest)")),
        };
        Ok(KeyChooser { kind: kind.to_string(), zipf })
    }

    fn next(&self, rng: &mut StdRng, n: u64) -> u64 {
        let n = n.max(1);
        match (&self.zipf, self.kind.as_str()) {
            (Some(z), "latest") => n - (z.sample(rng) as u64).min(n),
            // Scrambled: hot ranks land all over the key space, as in YCSB.
            (Some(z), _) => {
                let rank = z.sample(rng) as u64;
                let mut h: u64 = 0xcbf2_9ce4_8422_2325;
                for b in rank.to_le_bytes() {
                    h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
                }
                h % n
            }
            _ => rng.gen_range(0..n),
        }
    }
}

/// strata as a YCSB store: one table, a BIGINT key and one BYTEA column per field.
pub(crate) struct StrataStore {
    db: strata::Db,
    t: strata::Table,
    fields: usize,
}

impl StrataStore {
    pub fn open(dir: &std::path::Path, fields: usize) -> Result<Self, String> {
        use strata::{Column, ColumnType, Schema, TableOptions};
        let e = |e: strata::Error| e.to_string();
        let _ = std::fs::remove_dir_all(dir);
        let db = strata::Db::open(dir, strata::Options::default()).map_err(e)?;
        let mut cols = vec![Column::not_null("k", ColumnType::BigInt)];
        cols.extend((0..fields).map(|f| Column::new(format!("field{f}"), ColumnType::Bytea)));
        let schema = Schema::new(cols, &["k"]).map_err(e)?;
        let t = db.create_table("usertable", schema, TableOptions::default()).map_err(e)?;
        Ok(StrataStore { db, t, fields })
    }
}

impl Store for StrataStore {
    fn insert(&self, key: u64, fields: &[Vec<u8>]) -> Result<(), String> {
        let mut row = Vec::with_capacity(fields.len() + 1);
        row.push(strata::Value::BigInt(key as i64));
        row.extend(fields.iter().map(|f| strata::Value::Bytea(f.clone())));
        self.t.insert(&row).map_err(|e| e.to_string())
    }

    fn read(&self, key: u64) -> Result<Option<Vec<Vec<u8>>>, String> {
        let row = self
            .t
            .get(&[strata::Value::BigInt(key as i64)], &strata::Projection::All, &strata::ReadOptions::default())
            .map_err(|e| e.to_string())?;
        Ok(row.map(|r| {
            r.into_iter()
                .skip(1)
                .map(|v| match v {
                    strata::Value::Bytea(b) => b,
                    _ => Vec::new(),
                })
                .collect()
        }))
    }

    fn update(&self, key: u64, field: usize, value: &[u8]) -> Result<(), String> {
        let name = format!("field{field}");
        self.t
            .update(&[strata::Value::BigInt(key as i64)], &[(name.as_str(), strata::Value::Bytea(value.to_vec()))])
            .map_err(|e| e.to_string())
    }

    fn scan(&self, start: u64, n: usize) -> Result<Vec<u64>, String> {
        use strata::scan::{batch_rows, ScanRequest};
        let range = strata::KeyRange {
            start: std::ops::Bound::Included(vec![strata::Value::BigInt(start as i64)]),
            end: std::ops::Bound::Unbounded,
        };
        let mut req = ScanRequest::new().with_range(range).with_limit(n);
        req.columns =
            Some((0..=self.fields).map(|f| if f == 0 { "k".into() } else { format!("field{}", f - 1) }).collect());
        let mut keys = Vec::with_capacity(n);
        for b in self.t.scan_batches(&req, &strata::ReadOptions::default()).map_err(|e| e.to_string())? {
            for r in batch_rows(&b.map_err(|e| e.to_string())?) {
                if let Some(strata::Value::BigInt(k)) = r.first() {
                    keys.push(*k as u64);
                }
            }
        }
        Ok(keys)
    }

    fn stall_micros(&self) -> Option<u64> {
        Some(self.db.stats().write_stall_micros)
    }
}

/// Opens the named system under `out` and says how it is configured, or says why it cannot.
fn open(system: &str, a: &YcsbArgs) -> Result<(Box<dyn Store>, String), String> {
    let dir = a.common.out.join("data").join(system);
    match system {
        "strata" => {
            Ok((Box::new(StrataStore::open(&dir, a.fields)?), "WAL, no fsync per write, 64 MiB block cache".into()))
        }
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok((
            Box::new(crate::peers::sqlite::SqliteStore::open(&dir, a.fields)?),
            crate::peers::sqlite::CONFIG.into(),
        )),
        #[cfg(feature = "postgres")]
        "postgres" => Ok((
            Box::new(crate::peers::postgres::PostgresStore::open(&dir, a.fields)?),
            crate::peers::postgres::CONFIG.into(),
        )),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => {
            Ok((Box::new(crate::peers::rocksdb::RocksStore::open(&dir)?), crate::peers::rocksdb::CONFIG.into()))
        }
        #[cfg(feature = "duckdb")]
        "duckdb" => {
            let s = crate::peers::duckdb::DuckStore::open(&dir, a.fields)?;
            let config = s.config();
            Ok((Box::new(s), config))
        }
        other => Err(crate::peers::not_built(other)),
    }
}

/// Each store must return exactly the loaded record for a sample of keys.
fn check_answers(store: &dyn Store, a: &YcsbArgs, rng: &mut StdRng) -> Result<(), String> {
    for _ in 0..200 {
        let k = rng.gen_range(0..a.common.rows.max(1));
        let got = store.read(k)?;
        if got.as_deref() != Some(&record(k, a.fields, a.field_bytes)[..]) {
            return Err(format!("key {k}: wrong record after load"));
        }
    }
    let keys = store.scan(a.common.rows / 2, 10)?;
    let want: Vec<u64> = (a.common.rows / 2..(a.common.rows / 2 + 10).min(a.common.rows)).collect();
    if keys != want {
        return Err(format!("scan from {}: got keys {keys:?}, want {want:?}", a.common.rows / 2));
    }
    Ok(())
}

/// Per-thread latencies, one histogram per operation kind, and the blocks strata read from files
/// (block-cache misses) during the measured operations.
#[derive(Default)]
struct Lat([Latency; 5], u64);

fn run_phase(
    store: &dyn Store,
    a: &YcsbArgs,
    mix: [f64; 5],
    next_key: &AtomicU64,
    label: &str,
) -> Result<(Lat, u64, f64), String> {
    let common = &a.common;
    let dist = if a.workload == "d" { "latest" } else { a.distribution.as_str() };
    let chooser = KeyChooser::new(dist, common.rows, a.zipf)?;
    let stop = AtomicBool::new(false);
    let measuring = AtomicBool::new(false);
    let done_ops = AtomicU64::new(0);
    let per_thread = if common.ops > 0 { common.ops.div_ceil(common.threads as u64) } else { u64::MAX };
    // Warm-up: a fifth of the duration (at most 5 s) or a tenth of the operations, not measured.
    let warm = Duration::from_secs((common.duration / 5).min(5));
    let warm_ops = per_thread / 10;
    let started = Instant::now();
    // With --ops, the measured window starts when the last thread finishes its warm-up.
    let measure_from = AtomicU64::new(0);
    let results: Vec<Result<Lat, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..common.threads)
            .map(|ti| {
                let (stop, measuring, done_ops, chooser, measure_from) =
                    (&stop, &measuring, &done_ops, &chooser, &measure_from);
                s.spawn(move || -> Result<Lat, String> {
                    let mut rng = StdRng::seed_from_u64(common.seed ^ ((ti as u64 + 1) * 0x1234_5678));
                    let mut lat = Lat::default();
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) && i < per_thread + warm_ops {
                        if common.ops > 0 && i == warm_ops {
                            measure_from.fetch_max(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        }
                        let measured = if common.ops > 0 { i >= warm_ops } else { measuring.load(Ordering::Relaxed) };
                        let n = next_key.load(Ordering::Relaxed);
                        let x: f64 = rng.gen();
                        let mut acc = 0.0;
                        let op = OPS.iter().zip(mix).find(|(_, p)| {
                            acc += p;
                            x < acc
                        });
                        let op = op.map_or(Op::Read, |(o, _)| *o);
                        let (t0, io) = (Instant::now(), strata::thread_io());
                        match op {
                            Op::Read => {
                                store.read(chooser.next(&mut rng, n))?;
                            }
                            Op::Update => {
                                let k = chooser.next(&mut rng, n);
                                let f = rng.gen_range(0..a.fields);
                                store.update(k, f, &field_value(k, f, i + 1, a.field_bytes))?;
                            }
                            Op::Insert => {
                                let k = next_key.fetch_add(1, Ordering::Relaxed);
                                store.insert(k, &record(k, a.fields, a.field_bytes))?;
                            }
                            Op::Scan => {
                                store.scan(chooser.next(&mut rng, n), rng.gen_range(1..=100))?;
                            }
                            Op::ReadModifyWrite => {
                                let k = chooser.next(&mut rng, n);
                                let f = rng.gen_range(0..a.fields);
                                if store.read(k)?.is_some() {
                                    store.update(k, f, &field_value(k, f, i + 1, a.field_bytes))?;
                                }
                            }
                        }
                        if measured {
                            lat.0[OPS.iter().position(|o| *o == op).unwrap_or(0)].record(t0.elapsed());
                            lat.1 += strata::thread_io().since(io).block_reads;
                            done_ops.fetch_add(1, Ordering::Relaxed);
                        }
                        i += 1;
                    }
                    Ok(lat)
                })
            })
            .collect();
        if common.ops == 0 {
            std::thread::sleep(warm);
            measuring.store(true, Ordering::Relaxed);
            let progress = Progress::new(&format!("{label}: run (seconds)"), common.duration);
            let (total, window) = (Duration::from_secs(common.duration), Instant::now());
            while let Some(left) = total.checked_sub(window.elapsed()).filter(|d| !d.is_zero()) {
                progress.set(window.elapsed().as_secs());
                std::thread::sleep(left.min(Duration::from_millis(250)));
            }
            stop.store(true, Ordering::Relaxed);
            progress.finish();
        } else {
            let progress = Progress::new(&format!("{label}: run"), common.ops);
            while !handles.iter().all(|h| h.is_finished()) {
                progress.set(done_ops.load(Ordering::Relaxed));
                std::thread::sleep(Duration::from_millis(250));
            }
            progress.finish();
        }
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("client thread panicked".into()))).collect()
    });
    let elapsed = if common.ops == 0 {
        common.duration as f64
    } else {
        started.elapsed().as_secs_f64() - measure_from.load(Ordering::Relaxed) as f64 / 1e9
    };
    let mut total = Lat::default();
    for r in results {
        let l = r?;
        for (t, x) in total.0.iter_mut().zip(&l.0) {
            t.merge(x);
        }
        total.1 += l.1;
    }
    Ok((total, done_ops.load(Ordering::Relaxed), elapsed))
}

pub(crate) fn ycsb(a: &YcsbArgs) -> Result<(), String> {
    let mix = mix(&a.workload).ok_or_else(|| format!("unknown workload `{}`", a.workload))?;
    let c = &a.common;
    let mut results = Results::new(
        "ycsb",
        [
            ("workload", json!(a.workload)),
            ("distribution", json!(if a.workload == "d" { "latest" } else { a.distribution.as_str() })),
            ("zipf", json!(a.zipf)),
            ("rows", json!(c.rows)),
            ("ops", json!(c.ops)),
            ("duration_s", json!(c.duration)),
            ("threads", json!(c.threads)),
            ("fields", json!(a.fields)),
            ("field_bytes", json!(a.field_bytes)),
            ("seed", json!(c.seed)),
        ],
    );
    for system in &c.systems()? {
        let (store, config) = open(system, a)?;
        // `--threads` loaders, each inserting its share of the keys in order, one per operation.
        let progress = Progress::new(&format!("{system}: load"), c.rows);
        let t0 = Instant::now();
        let loaded = AtomicU64::new(0);
        let parts: Vec<Result<Latency, String>> = std::thread::scope(|s| {
            let threads = c.threads.max(1) as u64;
            let handles: Vec<_> = (0..threads)
                .map(|ti| {
                    let (store, loaded, progress) = (store.as_ref(), &loaded, &progress);
                    s.spawn(move || -> Result<Latency, String> {
                        let mut lat = Latency::new();
                        for k in (ti * c.rows / threads)..((ti + 1) * c.rows / threads) {
                            let s = Instant::now();
                            store.insert(k, &record(k, a.fields, a.field_bytes))?;
                            lat.record(s.elapsed());
                            progress.set(loaded.fetch_add(1, Ordering::Relaxed) + 1);
                        }
                        Ok(lat)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("loader thread panicked".into()))).collect()
        });
        let load_secs = t0.elapsed().as_secs_f64();
        progress.finish();
        let stalled_load = store.stall_micros();
        let mut load = Latency::new();
        for p in parts {
            load.merge(&p?);
        }
        let mut rng = StdRng::seed_from_u64(c.seed);
        if let Err(e) = check_answers(store.as_ref(), a, &mut rng) {
            eprintln!("{system}: refused, its answers disagree: {e}");
            continue;
        }
        results.add(system, &config, "load throughput", c.rows as f64 / load_secs, "ops/s");
        results.add_latency(system, &config, "load insert", &load);
        let next_key = AtomicU64::new(c.rows);
        let waits_before = strata::sync::lock_waits();
        let (lat, ops, secs) = run_phase(store.as_ref(), a, mix, &next_key, system)?;
        if system == "strata" && a.lock_waits {
            for (w, before) in strata::sync::lock_waits().iter().zip(&waits_before) {
                let waits = w.waits - before.waits;
                if waits > 0 {
                    let ms = (w.wait - before.wait).as_secs_f64() * 1e3;
                    results.add(system, &config, &format!("lock waits: {}", w.site), waits as f64, "waits");
                    results.add(system, &config, &format!("lock wait time: {}", w.site), ms, "ms");
                }
            }
        }
        results.add(system, &config, "run throughput", ops as f64 / secs, "ops/s");
        // Writers' waits on background work, summed over threads (as each system counts them).
        if let (Some(load), Some(total)) = (stalled_load, store.stall_micros()) {
            results.add(system, &config, "write stalls, load", load as f64 / 1e6, "s");
            results.add(system, &config, "write stalls, run", total.saturating_sub(load) as f64 / 1e6, "s");
        }
        for (op, l) in OPS.iter().zip(&lat.0) {
            results.add_latency(system, &config, op.name(), l);
        }
        if system == "strata" && ops > 0 {
            // Block-cache misses on the client threads (strata counts them per thread).
            results.add(system, &config, "blocks read per op", lat.1 as f64 / ops as f64, "blocks");
        }
        drop(store);
        let _ = std::fs::remove_dir_all(c.out.join("data").join(system));
    }
    results.finish(&c.out)
}
