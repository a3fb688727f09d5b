//! `strata-bench chbench`: CH-benCHmark (Cole et al., DBTest 2011), the HTAP benchmark. TPC-C's
//! five transactions from transactional clients and 22 TPC-H-style queries from analytical
//! clients run on the same tables at once; then each side runs alone. The result is a pair:
//! tpmC (New-Orders committed per minute) and analytical queries per hour, each alone and with
//! the other side running.
//!
//! strata runs the transactions through its transaction API (snapshot isolation; runs lost to
//! conflicts are counted and run again) and the queries through strata-sql. PostgreSQL, DuckDB,
//! SQLite and strata's own server (`strata-server`) run the same SQL statements (`sql.rs`).
//! After the runs, TPC-C's consistency conditions 1-4 are checked on every system, and each
//! system's answers at quiescence are checked against strata's.

mod check;
#[cfg(feature = "duckdb")]
mod duckdb;
mod gen;
#[cfg(feature = "postgres")]
mod postgres;
mod schema;
// The statements of PostgreSQL, DuckDB, SQLite and strata's server; tested in every build.
#[cfg_attr(not(any(feature = "postgres", feature = "sqlite", feature = "duckdb")), allow(dead_code))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
mod tx;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use strata::{Db, Options, TableOptions, Value};

use crate::harness::{Latency, Progress, Results};
use gen::Scale;
use schema::TableSpec;
use tx::{Input, Kind, Outcome, KINDS};

const QUERIES: &str = include_str!("queries.sql");

#[derive(Args, Debug)]
pub(crate) struct ChbenchArgs {
    /// Warehouses to load (TPC-C's scale: 100,000 stock rows and 30,000 customers each).
    #[arg(long, default_value_t = 10)]
    warehouses: i32,
    /// Clients running TPC-C transactions, each at a home warehouse (client i at warehouse
    /// i mod W + 1), without keying or think times.
    #[arg(long, default_value_t = 2)]
    tx_clients: usize,
    /// Clients running the 22 queries in turn (client i starting at query 2i + 1).
    #[arg(long, default_value_t = 1)]
    olap_clients: usize,
    /// Seconds each of the three phases runs: both sides, transactions alone, queries alone.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Systems to run, comma-separated: strata, strata-server (strata through its PostgreSQL
    /// server, the statements PostgreSQL runs), postgres, duckdb, sqlite.
    #[arg(long, value_delimiter = ',', default_value = "strata")]
    systems: Vec<String>,
    /// Also run strata through its server (strata-server) right after strata, so the cost of
    /// the wire and of SQL shows beside the transaction API's.
    #[arg(long)]
    via_server: bool,
    /// Random seed of the population and of the clients' choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Partitions each strata-sql query runs with.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// strata's block cache, MiB.
    #[arg(long, default_value_t = 256)]
    block_cache_mib: usize,
    /// Column groups per level of strata's tables (as `strata create-table --layout`); `row`
    /// keeps whole rows at every level.
    #[arg(long, default_value = "L1-: column")]
    layout: String,
    /// Also write each query's physical plan on strata to `<out>/plans/chbench-qNN.txt`.
    #[arg(long)]
    explain: bool,
    /// Directory for results.json, the chart and the systems' data.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
}

impl ChbenchArgs {
    /// strata's layout, `None` for whole rows everywhere.
    fn layout(&self) -> Option<&str> {
        (self.layout != "row").then_some(self.layout.as_str())
    }
}

/// What every system answers to: a TPC-C transaction, and SQL as rows of text.
pub(crate) trait ChSystem: Sync {
    fn transaction(&self, input: &Input) -> Result<Outcome, String>;
    fn query(&self, sql: &str) -> Result<Vec<Vec<String>>, String>;
    /// Seconds writers waited on background work, where the system counts them.
    fn stall_secs(&self) -> Option<f64> {
        None
    }
}

/// The queries of the `-- Qn` file, numbered.
fn queries() -> Vec<(u32, String)> {
    crate::tpch::parse_queries(QUERIES)
}

/// strata: the database, its transactions and strata-sql.
pub(crate) struct StrataSystem {
    db: Arc<Db>,
    tpcc: tx::StrataTpcc,
    sql: strata_sql::SqlEngine,
    rt: tokio::runtime::Runtime,
}

impl StrataSystem {
    /// Makes a new database in `dir` (removing what was there) and loads the population.
    fn open(
        dir: &Path,
        warehouses: i32,
        scale: &Scale,
        seed: u64,
        threads: usize,
        cache_mib: usize,
        layout: Option<&str>,
    ) -> Result<Self, String> {
        let _ = std::fs::remove_dir_all(dir);
        let opts = Options { block_cache_size: cache_mib << 20, ..Options::default() };
        let db = Arc::new(Db::open(dir, opts).map_err(|e| format!("strata: {e}"))?);
        load_strata(&db, warehouses, scale, seed, layout)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .enable_all()
            .build()
            .map_err(|e| format!("strata: {e}"))?;
        let sql = strata_sql::SqlEngine::with_partitions(db.clone(), threads).map_err(|e| format!("strata: {e}"))?;
        Ok(StrataSystem { tpcc: tx::StrataTpcc::open(db.clone(), warehouses)?, db, sql, rt })
    }
}

impl ChSystem for StrataSystem {
    fn transaction(&self, input: &Input) -> Result<Outcome, String> {
        self.tpcc.run(input)
    }

    fn stall_secs(&self) -> Option<f64> {
        Some(self.db.stats().write_stall_micros as f64 / 1e6)
    }

    fn query(&self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        let out = self.rt.block_on(self.sql.execute(sql)).map_err(|e| format!("strata: {e}"))?;
        match out.last() {
            Some(strata_sql::Output::Rows { batches, .. }) => crate::tpch::batches_text(batches),
            _ => Ok(Vec::new()),
        }
    }
}

/// Creates the tables (and strata's two index tables) and ingests the population, warehouses
/// shared between two threads; returns the rows loaded.
fn load_strata(db: &Db, warehouses: i32, scale: &Scale, seed: u64, layout: Option<&str>) -> Result<u64, String> {
    let err = |e: strata::Error| format!("strata: {e}");
    for t in schema::TABLES {
        let options = layout.map(TableOptions::with_layout).unwrap_or_default();
        db.create_table(t.name, t.strata_schema()?, options).map_err(err)?;
    }
    // The index tables are read by key prefix only: whole rows.
    for t in [&schema::CUSTOMER_BY_NAME, &schema::ORDERS_BY_CUSTOMER] {
        db.create_table(t.name, t.strata_schema()?, TableOptions::default()).map_err(err)?;
    }
    let ingest = |rows: BTreeMap<&'static str, Vec<Vec<Value>>>| -> Result<(), String> {
        for (name, rows) in rows {
            db.table(name).map_err(err)?.ingest(&rows).map_err(|e| format!("strata: loading {name}: {e}"))?;
        }
        Ok(())
    };
    // Gathers generated rows per table, with the index rows strata keeps beside them.
    let gather = |rows: &mut BTreeMap<&'static str, Vec<Vec<Value>>>, t: &'static TableSpec, row: Vec<Value>| {
        if t.name == schema::CUSTOMER.name {
            let by_name = [0, 1, 5, 3, 2].map(|i| row[i].clone()).to_vec();
            rows.entry(schema::CUSTOMER_BY_NAME.name).or_default().push(by_name);
        } else if t.name == schema::ORDERS.name {
            let by_customer = [0, 1, 3, 2].map(|i| row[i].clone()).to_vec();
            rows.entry(schema::ORDERS_BY_CUSTOMER.name).or_default().push(by_customer);
        }
        rows.entry(t.name).or_default().push(row);
    };
    let total = scale.rows(warehouses);
    let next = std::sync::atomic::AtomicI32::new(1);
    Progress::around("strata: load", total, |done: &AtomicU64| {
        let mut fixed = BTreeMap::new();
        gen::fixed_tables(seed, scale, &mut |t, row| {
            gather(&mut fixed, t, row);
            done.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })?;
        ingest(fixed)?;
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| -> Result<(), String> {
                        loop {
                            let w = next.fetch_add(1, Ordering::Relaxed);
                            if w > warehouses {
                                return Ok(());
                            }
                            let mut rows = BTreeMap::new();
                            gen::warehouse(seed, w, scale, &mut |t, row| {
                                gather(&mut rows, t, row);
                                done.fetch_add(1, Ordering::Relaxed);
                                Ok(())
                            })?;
                            ingest(rows)?;
                        }
                    })
                })
                .collect();
            workers.into_iter().try_for_each(|h| h.join().map_err(|_| "chbench: a load thread panicked".to_string())?)
        })?;
        db.flush().map_err(err)?;
        db.wait_for_compactions().map_err(err)?;
        Ok(done.load(Ordering::Relaxed))
    })
}

/// What one phase measured.
#[derive(Default)]
pub(crate) struct PhaseOut {
    pub secs: f64,
    /// Transactions committed (or rolled back as asked), per kind.
    pub done: [u64; 5],
    pub latency: Vec<Latency>,
    pub retries: u64,
    pub rolled_back: u64,
    /// Each query's run times, ms.
    pub queries: BTreeMap<u32, Vec<f64>>,
}

impl PhaseOut {
    /// New-Orders committed per minute (rolled-back ones are not counted).
    pub fn tpmc(&self) -> f64 {
        self.done[0] as f64 * 60.0 / self.secs.max(1e-9)
    }

    /// Queries finished per hour.
    pub fn qph(&self) -> f64 {
        self.queries.values().map(Vec::len).sum::<usize>() as f64 * 3600.0 / self.secs.max(1e-9)
    }

    pub fn transactions(&self) -> u64 {
        self.done.iter().sum()
    }
}

/// Runs `tx_clients` transactional and `olap_clients` analytical clients on `sys` for
/// `duration`; a client starts nothing once the time is up, and the phase lasts until the last
/// one has finished.
pub(crate) fn run_phase(
    sys: &dyn ChSystem,
    label: &str,
    setup: (i32, Scale, u64),
    tx_clients: usize,
    olap_clients: usize,
    duration: Duration,
) -> Result<PhaseOut, String> {
    let (warehouses, scale, seed) = setup;
    // Each phase's clients draw their own choices, the same for a seed in every run.
    let phase = label.bytes().fold(0xC11E_u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let queries = queries();
    let start = Instant::now();
    let deadline = start + duration;
    let progress = Progress::new(label, duration.as_secs());
    let outs: Vec<Result<PhaseOut, String>> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for c in 0..tx_clients {
            let w = (c as i32 % warehouses) + 1;
            handles.push(s.spawn(move || -> Result<PhaseOut, String> {
                let mut r = gen::Rand::new(seed ^ phase ^ ((c as u64) << 20));
                let mut out =
                    PhaseOut { latency: KINDS.iter().map(|_| Latency::new()).collect(), ..Default::default() };
                while Instant::now() < deadline {
                    let kind = Kind::draw(&mut r);
                    let input = Input::draw(kind, &mut r, &scale, w, warehouses);
                    let t = Instant::now();
                    let o = sys.transaction(&input)?;
                    let k = KINDS.iter().position(|&x| x == kind).unwrap_or(0);
                    out.latency[k].record(t.elapsed());
                    out.retries += u64::from(o.retries);
                    if o.rolled_back {
                        out.rolled_back += 1;
                    } else {
                        out.done[k] += 1;
                    }
                }
                Ok(out)
            }));
        }
        for c in 0..olap_clients {
            let queries = &queries;
            let progress = &progress;
            handles.push(s.spawn(move || -> Result<PhaseOut, String> {
                let mut out = PhaseOut::default();
                let mut i = (2 * c) % queries.len();
                while Instant::now() < deadline {
                    let (n, sql) = &queries[i];
                    let t = Instant::now();
                    sys.query(sql).map_err(|e| format!("Q{n}: {e}"))?;
                    out.queries.entry(*n).or_default().push(t.elapsed().as_secs_f64() * 1000.0);
                    progress.set(start.elapsed().as_secs().min(duration.as_secs()));
                    i = (i + 1) % queries.len();
                }
                Ok(out)
            }));
        }
        while Instant::now() < deadline {
            progress.set(start.elapsed().as_secs());
            std::thread::sleep(Duration::from_millis(200));
        }
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("chbench: a client panicked".into()))).collect()
    });
    progress.finish();
    let mut total = PhaseOut { latency: KINDS.iter().map(|_| Latency::new()).collect(), ..Default::default() };
    for out in outs {
        let out = out?;
        for k in 0..KINDS.len() {
            total.done[k] += out.done[k];
            if let Some(l) = out.latency.get(k) {
                total.latency[k].merge(l);
            }
        }
        total.retries += out.retries;
        total.rolled_back += out.rolled_back;
        for (n, times) in out.queries {
            total.queries.entry(n).or_default().extend(times);
        }
    }
    total.secs = start.elapsed().as_secs_f64();
    Ok(total)
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn p95(times: &[f64]) -> f64 {
    let mut t = times.to_vec();
    t.sort_by(f64::total_cmp);
    t.get(((t.len() as f64 * 0.95).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0)
}

/// Opens `system` in `dir` with the population loaded; says how it is configured.
fn open_system(
    system: &str,
    dir: &Path,
    a: &ChbenchArgs,
    scale: &Scale,
) -> Result<(Box<dyn ChSystem>, String), String> {
    match system {
        "strata" => Ok((
            Box::new(StrataSystem::open(dir, a.warehouses, scale, a.seed, a.threads, a.block_cache_mib, a.layout())?),
            format!(
                "LSM engine, layout `{}`, {} MiB block cache, snapshot isolation, strata-sql {} partitions, DOUBLE \
                 money",
                a.layout, a.block_cache_mib, a.threads
            ),
        )),
        #[cfg(feature = "postgres")]
        "strata-server" => {
            let loaded =
                StrataSystem::open(dir, a.warehouses, scale, a.seed, a.threads, a.block_cache_mib, a.layout())?;
            Ok((
                Box::new(postgres::PgSystem::serve_strata(loaded.db.clone(), a.threads)?),
                format!(
                    "strata's PostgreSQL server in this process, the SQL PostgreSQL runs (REPEATABLE READ), indexes \
                     on customer names and orders by customer, layout `{}`, {} MiB block cache, {} partitions per \
                     query",
                    a.layout, a.block_cache_mib, a.threads
                ),
            ))
        }
        #[cfg(not(feature = "postgres"))]
        "strata-server" => Err("chbench: strata-server speaks to strata's server with the PostgreSQL client, which \
                                this binary lacks (build with --features postgres)"
            .into()),
        #[cfg(feature = "postgres")]
        "postgres" => {
            Ok((Box::new(postgres::PgSystem::open(dir, a.warehouses, scale, a.seed)?), postgres::CONFIG.into()))
        }
        #[cfg(feature = "duckdb")]
        "duckdb" => {
            let duck = duckdb::DuckSystem::open(dir, a.warehouses, scale, a.seed, a.threads)?;
            let config = duck.config().to_owned();
            Ok((Box::new(duck), config))
        }
        #[cfg(feature = "sqlite")]
        "sqlite" => {
            Ok((Box::new(sqlite::SqliteSystem::open(dir, a.warehouses, scale, a.seed)?), sqlite::CONFIG.into()))
        }
        "rocksdb" => Err("chbench: rocksdb has no SQL to run the queries in; the systems are strata, strata-server, \
                          postgres, duckdb and sqlite"
            .into()),
        other => Err(crate::peers::not_built(other)),
    }
}

/// A query's answer, each cell as text.
type Rows = Vec<Vec<String>>;

/// A cell as compared between systems: a number, or text with a timestamp's `T` as a space.
fn cell_key(c: &str) -> Result<f64, String> {
    c.parse::<f64>().map_err(|_| c.replacen('T', " ", 1).trim_end_matches(".000000").to_owned())
}

/// Whether two systems' rows are the same answer: the same rows in some order, numbers equal to
/// a millionth (sums of DOUBLEs depend on their order).
fn same_answer(x: &[Vec<String>], y: &[Vec<String>]) -> bool {
    let sorted = |rows: &[Vec<String>]| {
        let mut keyed: Vec<(String, Vec<Result<f64, String>>)> = rows
            .iter()
            .map(|r| {
                let cells: Vec<Result<f64, String>> = r.iter().map(|c| cell_key(c)).collect();
                let key = cells
                    .iter()
                    .map(|c| match c {
                        Ok(v) => format!("{v:.4e}"),
                        Err(t) => t.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join("\u{1}");
                (key, cells)
            })
            .collect();
        keyed.sort_by(|p, q| p.0.cmp(&q.0));
        keyed.into_iter().map(|k| k.1).collect::<Vec<_>>()
    };
    let (x, y) = (sorted(x), sorted(y));
    x.len() == y.len()
        && x.iter().zip(&y).all(|(r, s)| {
            r.len() == s.len()
                && r.iter().zip(s).all(|(p, q)| match (p, q) {
                    (Ok(p), Ok(q)) => (p - q).abs() <= 1e-6 * p.abs().max(q.abs()).max(1.0),
                    (Err(p), Err(q)) => p == q,
                    _ => false,
                })
        })
}

pub(crate) fn chbench(a: &ChbenchArgs) -> Result<(), String> {
    if a.warehouses < 1 {
        return Err("chbench: --warehouses must be at least 1".into());
    }
    let scale = Scale::SPEC;
    let mut results = Results::new(
        "chbench",
        [
            ("warehouses", json!(a.warehouses)),
            ("tx_clients", json!(a.tx_clients)),
            ("olap_clients", json!(a.olap_clients)),
            ("duration_s", json!(a.duration)),
            ("seed", json!(a.seed)),
        ],
    );
    let mut systems = a.systems.clone();
    if a.via_server && !systems.iter().any(|s| s == "strata-server") {
        let at = systems.iter().position(|s| s == "strata").map_or(0, |i| i + 1);
        systems.insert(at, "strata-server".into());
    }
    // Each system's answers at quiescence, checked against strata's once all ran.
    let mut answers: BTreeMap<String, Vec<(u32, Rows)>> = BTreeMap::new();
    for s in &systems {
        let s = s.as_str();
        let dir = a.out.join("data").join(s);
        let t0 = Instant::now();
        let (sys, config) = open_system(s, &dir, a, &scale)?;
        results.add(s, &config, "load", t0.elapsed().as_secs_f64(), "s");
        let mut quiet = Vec::new();
        // The queries once at quiescence: each must run before anything is measured.
        for (n, q) in queries() {
            if a.explain && s == "strata" {
                let plan: Vec<String> = sys.query(&format!("EXPLAIN {q}"))?.into_iter().map(|r| r.join("\n")).collect();
                let dir = a.out.join("plans");
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let path = dir.join(format!("chbench-q{n:02}.txt"));
                std::fs::write(&path, plan.join("\n")).map_err(|e| format!("{}: {e}", path.display()))?;
            }
            let t = Instant::now();
            let rows = sys.query(&q).map_err(|e| format!("{s}: Q{n} at quiescence: {e}"))?;
            eprintln!("  {s}: Q{n} at quiescence: {} rows in {:.0} ms", rows.len(), t.elapsed().as_secs_f64() * 1000.0);
            quiet.push((n, rows));
        }
        answers.insert(s.to_owned(), quiet);
        let d = Duration::from_secs(a.duration);
        let setup = (a.warehouses, scale, a.seed);
        let both = run_phase(&*sys, &format!("{s}: both sides"), setup, a.tx_clients, a.olap_clients, d)?;
        let tx_alone = run_phase(&*sys, &format!("{s}: transactions alone"), setup, a.tx_clients, 0, d)?;
        let olap_alone = run_phase(&*sys, &format!("{s}: queries alone"), setup, 0, a.olap_clients, d)?;
        let broken = check::consistency(s, |q| sys.query(q))?;
        if !broken.is_empty() {
            return Err(broken.join("\n"));
        }
        eprintln!("{s}: consistency conditions 1-4 hold");
        if a.tx_clients > 0 {
            results.add(s, &config, "tpmC, transactions alone", tx_alone.tpmc(), "new-orders/min");
            results.add(s, &config, "tpmC, with queries", both.tpmc(), "new-orders/min");
            for (k, kind) in KINDS.iter().enumerate() {
                results.add_latency(s, &config, &format!("{} alone", kind.name()), &tx_alone.latency[k]);
            }
            let ran = tx_alone.transactions().max(1) as f64;
            let lost = tx_alone.retries as f64 * 100.0 / ran;
            results.add(s, &config, "runs lost to conflicts per 100 transactions, alone", lost, "runs");
            results.add(s, &config, "rolled back (unused item), alone", tx_alone.rolled_back as f64, "transactions");
        }
        if a.olap_clients > 0 {
            results.add(s, &config, "queries per hour, alone", olap_alone.qph(), "queries/h");
            results.add(s, &config, "queries per hour, with transactions", both.qph(), "queries/h");
            for (n, times) in &olap_alone.queries {
                let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
                results.add(s, &config, &format!("Q{n} mean, alone"), mean, "ms");
                results.add(s, &config, &format!("Q{n} p95, alone"), p95(times), "ms");
            }
        }
        if let Some(stalls) = sys.stall_secs() {
            results.add(s, &config, "write stalls", stalls, "s");
        }
        drop(sys);
        results.add(s, &config, "database size", dir_bytes(&dir) as f64 / (1 << 20) as f64, "MiB");
    }
    results.finish(&a.out)?;
    if let Some(truth) = answers.get("strata") {
        for (s, theirs) in answers.iter().filter(|(s, _)| s.as_str() != "strata") {
            let differ: Vec<String> = truth
                .iter()
                .zip(theirs)
                .filter(|((_, x), (_, y))| !same_answer(x, y))
                .map(|((n, _), _)| format!("Q{n}"))
                .collect();
            if !differ.is_empty() {
                return Err(format!("chbench: at quiescence {s} answers {} unlike strata", differ.join(", ")));
            }
            eprintln!("{s}: the 22 queries at quiescence answer as strata's do");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first of `STRATA_SEEDS` when set (a replay), else a new seed; printed either way.
    fn test_seed() -> u64 {
        let given = std::env::var("STRATA_SEEDS").ok().and_then(|s| s.split(',').next()?.trim().parse().ok());
        let seed = given.unwrap_or_else(rand::random);
        println!("seed {seed} (replay: STRATA_SEEDS={seed})");
        seed
    }

    /// The CI-sized run: one warehouse of 1,000 items and 30 customers per district.
    const SMALL: Scale = Scale { items: 1_000, customers: 30 };

    /// Runs every query on `sys`, then both sides for two seconds, and more of them (a loaded
    /// machine runs few transactions) until every kind of transaction has committed; checks the
    /// consistency conditions afterwards.
    fn small_run(name: &str, sys: &dyn ChSystem, seed: u64) {
        for (n, q) in queries() {
            sys.query(&q).unwrap_or_else(|e| panic!("seed {seed}: Q{n}: {e}"));
        }
        let (mut done, mut queried) = ([0u64; 5], 0);
        for round in 0..20 {
            let label = format!("{name}: test round {round}");
            let out = run_phase(sys, &label, (1, SMALL, seed), 2, 1, Duration::from_secs(2)).unwrap();
            done.iter_mut().zip(out.done).for_each(|(d, n)| *d += n);
            queried += out.queries.values().map(Vec::len).sum::<usize>();
            if done.iter().all(|&n| n > 0) && queried > 0 {
                break;
            }
        }
        for (k, kind) in KINDS.iter().enumerate() {
            assert!(done[k] > 0, "seed {seed}: no {} committed in {done:?}", kind.name());
        }
        assert!(queried > 0, "seed {seed}: no query finished");
        let broken = check::consistency(name, |q| sys.query(q)).unwrap();
        assert!(broken.is_empty(), "seed {seed}: {broken:?}");
        // New-Orders advanced the districts past the loaded orders.
        let next = sys.query("SELECT sum(d_next_o_id) FROM district").unwrap();
        assert!(next[0][0].parse::<i64>().unwrap() > 10 * 31, "seed {seed}: {next:?}");
    }

    /// strata's small run; then a district whose d_ytd no longer adds up is caught by the
    /// consistency conditions.
    #[test]
    fn a_small_run_of_both_sides_stays_consistent() {
        let seed = test_seed();
        let dir = tempfile::tempdir().unwrap();
        let sys = StrataSystem::open(&dir.path().join("db"), 1, &SMALL, seed, 2, 16, Some("L1-: column")).unwrap();
        small_run("strata", &sys, seed);
        sys.db
            .table("district")
            .unwrap()
            .update(&[Value::Int(1), Value::Int(3)], &[("d_ytd", Value::Double(1.0))])
            .unwrap();
        let broken = check::consistency("strata", |q| sys.query(q)).unwrap();
        assert_eq!(broken.len(), 1, "seed {seed}: {broken:?}");
        assert!(broken[0].contains("condition 1"), "{broken:?}");
    }

    /// The SQL transactions, on SQLite (the peer that needs nothing installed), keep the
    /// database consistent, and SQLite answers the queries at quiescence as strata does.
    #[cfg(feature = "sqlite")]
    #[test]
    fn a_small_sqlite_run_stays_consistent_and_answers_as_strata() {
        let seed = test_seed();
        let dir = tempfile::tempdir().unwrap();
        let lite = sqlite::SqliteSystem::open(&dir.path().join("sqlite"), 1, &SMALL, seed).unwrap();
        let strata = StrataSystem::open(&dir.path().join("strata"), 1, &SMALL, seed, 2, 16, None).unwrap();
        for (n, q) in queries() {
            let (x, y) = (strata.query(&q).unwrap(), lite.query(&q).unwrap());
            assert!(same_answer(&x, &y), "seed {seed}: Q{n}: strata {x:?}, sqlite {y:?}");
        }
        small_run("sqlite", &lite, seed);
    }

    #[test]
    fn answers_agree_in_any_row_order_and_to_a_millionth_only() {
        let rows =
            |r: &[&[&str]]| r.iter().map(|r| r.iter().map(|c| c.to_string()).collect()).collect::<Vec<Vec<String>>>();
        let strata = rows(&[&["GERMANY", "12.5", "2026-01-01T00:00:00"], &["CHINA", "3", ""]]);
        // Rows in another order, a number printed otherwise, a timestamp as PostgreSQL prints it.
        assert!(same_answer(
            &strata,
            &rows(&[&["CHINA", "3.0", ""], &["GERMANY", "12.5000001", "2026-01-01 00:00:00"]])
        ));
        assert!(!same_answer(&strata, &rows(&[&["CHINA", "3", ""], &["GERMANY", "12.6", "2026-01-01 00:00:00"]])));
        assert!(!same_answer(&strata, &rows(&[&["CHINA", "3", ""], &["JAPAN", "12.5", "2026-01-01 00:00:00"]])));
        assert!(!same_answer(&strata, &rows(&[&["CHINA", "3", ""]])));
        assert!(!same_answer(&strata, &rows(&[&["CHINA", "3", "x"], &["GERMANY", "12.5", "2026-01-01 00:00:00"]])));
    }

    #[test]
    fn the_file_holds_the_22_queries_in_order() {
        let q = queries();
        assert_eq!(q.iter().map(|(n, _)| *n).collect::<Vec<_>>(), (1..=22).collect::<Vec<_>>());
        assert!(q.iter().all(|(_, sql)| sql.starts_with("SELECT") || sql.starts_with("WITH")), "{q:?}");
    }
}
