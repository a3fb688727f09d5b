//! `strata-bench tpch`: the 22 TPC-H queries through strata-sql over tables generated in process
//! (tpchgen, which writes the rows of the specification's dbgen), beside DuckDB and SQLite loaded
//! with the same rows, in one run. DuckDB's rows are the reference answers: strata's and SQLite's
//! are checked against them, and the run fails if any of strata's differ or fail (a peer's are
//! reported).
//!
//! Why DuckDB's results on the same rows, and not the answer tables its tpch extension ships:
//! those are for the extension's own generator, whose text columns (addresses, comments) differ
//! from dbgen's and tpchgen's, so queries returning or filtering on them (Q2, Q10, Q13, Q15, Q20)
//! could never match. DuckDB runs even when not asked for, as the reference (then untimed).
//!
//! Per query the figure is the fastest of `--runs` runs (SQLite: of `--sqlite-runs`), in
//! milliseconds, planning included; the first run's rows are the ones checked.
//!
//! With `--refresh`, strata and DuckDB then run the queries again while a refresh stream changes
//! orders and lineitem (`refresh.rs`); every run's rows are checked against DuckDB's answer for
//! the refresh functions that run's snapshot saw.

mod check;
mod cluster;
mod load;
mod refresh;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::RecordBatch;
use clap::Args;
use serde_json::{json, Value as Json};
use strata::{Db, Engine, KeyRange, Options, TableOptions};

use crate::harness::{Progress, Results};

/// The queries, each after a `-- Qn` line.
const QUERIES: &str = include_str!("queries.sql");
const DUCKDB_HELPER: &str = include_str!("../peers/tpch_duckdb.py");

#[derive(Args, Debug, Clone)]
pub(crate) struct TpchArgs {
    /// Scale factor: 1 is 6 million line items (answers are checked at 0.01, 0.1 and 1).
    #[arg(long, default_value_t = 1.0)]
    pub sf: f64,
    /// Systems, comma-separated: strata, cluster (strata's cluster: `--cluster-nodes` nodes in
    /// this process, queries through one of them), duckdb, sqlite (default: strata and those of
    /// duckdb and sqlite this binary was built with).
    #[arg(long, value_delimiter = ',')]
    pub systems: Vec<String>,
    /// strata engines to load and query, comma-separated: lsm, lineage (the lineage engine holds
    /// its tables in memory).
    #[arg(long, value_delimiter = ',', default_value = "lsm,lineage")]
    pub engines: Vec<String>,
    /// Column groups per level of the LSM engine's tables (as `strata create-table --layout`).
    #[arg(long, default_value = "L1-: column")]
    pub layout: String,
    /// strata's block cache in MiB (decoded blocks; DuckDB keeps its tables in a buffer pool of up
    /// to 80% of memory by default).
    #[arg(long, default_value_t = 4096)]
    pub block_cache_mib: usize,
    /// strata's data block size in KiB (uncompressed; each column group's file has blocks of
    /// this size). Larger than the engine's default of 16, which suits point reads: scans of
    /// one-column groups pay per block, and at SF1 64 took 3.3 s in total against 4.2 s with 16.
    #[arg(long, default_value_t = 64)]
    pub block_size_kib: usize,
    /// Queries to run, comma-separated numbers (default: all 22).
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<u32>,
    /// Runs per query for strata and DuckDB; the figure is the fastest.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Runs per query for SQLite, which takes far longer.
    #[arg(long, default_value_t = 1)]
    pub sqlite_runs: usize,
    /// Seconds after which a SQLite query is stopped and reported as timed out.
    #[arg(long, default_value_t = 600)]
    pub sqlite_timeout: u64,
    /// Threads one query may use: DataFusion's partitions over strata, DuckDB's threads (SQLite
    /// uses one); also the threads that load the tables.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Directory for results.json, the chart and the systems' data (removed after the run).
    #[arg(long, default_value = "bench-out")]
    pub out: PathBuf,
    /// Keep strata's loaded databases in this directory (one per engine) and reuse them in later
    /// runs of the same scale factor, layout and block size instead of loading again; a reused
    /// database has no load figure. For repeated query runs while tuning.
    #[arg(long)]
    pub strata_data: Option<PathBuf>,
    /// Write the physical plan DataFusion makes over strata for each query to
    /// `<out>/plans/<engine>-qNN.txt` before running it
    #[arg(long)]
    pub explain: bool,
    /// After the quiet runs, run the queries again (`--runs` times each) while a refresh stream
    /// applies TPC-H's refresh functions back to back: RF1 inserts 0.1% new orders with their
    /// line items, RF2 deletes as many. Every run's rows are checked against DuckDB's answer for
    /// the database its snapshot saw; query times and the refresh rate are reported beside
    /// DuckDB doing the same. A database kept with `--strata-data` is loaded again next time.
    #[arg(long)]
    pub refresh: bool,
    /// With `--refresh`: stop the refresh stream after this many RF1/RF2 pairs (TPC-H's
    /// throughput test applies one pair per query stream) instead of running it until the
    /// queries end
    #[arg(long, value_name = "N", requires = "refresh")]
    pub refresh_pairs: Option<u64>,
    /// Load the LSM engine's tables through write batches (the WAL, memtables, flushes and
    /// compactions, then a full compaction) instead of ingesting each part's rows straight into
    /// the last level (`Table::ingest`). The lineage engine always loads through writes.
    #[arg(long)]
    pub load_by_writes: bool,
    /// Nodes of the `cluster` system (started in this process; every table gets one shard per
    /// node, each replicated on every node).
    #[arg(long, default_value_t = 3)]
    pub cluster_nodes: usize,
}

/// What one system did with one query.
#[derive(Default)]
struct QueryRun {
    /// Milliseconds of each run.
    times: Vec<f64>,
    /// The first run's rows, as text.
    rows: Vec<Vec<String>>,
    /// Why it has no figure (an error, a timeout).
    error: Option<String>,
}

impl QueryRun {
    fn best(&self) -> Option<f64> {
        self.times.iter().copied().reduce(f64::min)
    }

    /// Reports query `n` of `system` on stderr as it finishes.
    fn log(&self, system: &str, n: u32) {
        match self.best() {
            Some(ms) => eprintln!("{system}: Q{n} {ms:.1} ms"),
            None => eprintln!("{system}: Q{n} failed: {}", self.error.as_deref().unwrap_or("?")),
        }
    }
}

/// The name strata's engines go by in flags and columns.
fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Lsm => "lsm",
        Engine::Lineage => "lineage",
    }
}

/// The queries of the `-- Qn` file, numbered, without their comment lines.
pub(crate) fn parse_queries(text: &str) -> Vec<(u32, String)> {
    let mut out: Vec<(u32, String)> = Vec::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("-- Q").and_then(|r| r.split(':').next()).and_then(|n| n.parse().ok()) {
            out.push((n, String::new()));
        } else if line.trim_start().starts_with("--") {
            continue;
        } else if let Some((_, sql)) = out.last_mut() {
            sql.push_str(line);
            sql.push('\n');
        }
    }
    for (_, sql) in &mut out {
        *sql = sql.trim().trim_end_matches(';').to_string();
    }
    out
}

/// `sql` in SQLite's dialect: date literals as ISO text (SQLite keeps dates as text), `extract`
/// of the year through `strftime` and `substring ... FROM ... FOR` as `substr`.
// Used by the SQLite peer only; its test runs in every build.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
fn sqlite_dialect(sql: &str) -> String {
    let mut out = sql.replace("DATE '", "'");
    out = rewrite_calls(&out, "extract(year FROM ", |arg| format!("CAST(strftime('%Y', {arg}) AS INTEGER)"));
    rewrite_calls(&out, "substring(", |arg| {
        match arg.split_once(" FROM ").and_then(|(s, r)| Some((s, r.split_once(" FOR ")?))) {
            Some((s, (from, len))) => format!("substr({s}, {from}, {len})"),
            None => format!("substring({arg})"),
        }
    })
}

/// Replaces each `prefix ... )` in `sql` by `f(...)`; the argument holds no parentheses.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn rewrite_calls(sql: &str, prefix: &str, f: impl Fn(&str) -> String) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(at) = rest.find(prefix) {
        out.push_str(&rest[..at]);
        let after = &rest[at + prefix.len()..];
        match after.find(')') {
            Some(close) => {
                out.push_str(&f(&after[..close]));
                rest = &after[close + 1..];
            }
            None => {
                out.push_str(&rest[at..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

pub(crate) fn tpch(a: &TpchArgs) -> Result<(), String> {
    let systems = systems(a)?;
    let all = parse_queries(QUERIES);
    let queries: Vec<(u32, String)> = if a.queries.is_empty() {
        all
    } else {
        for q in &a.queries {
            if !all.iter().any(|(n, _)| n == q) {
                return Err(format!("tpch: there is no query {q} (1 to 22)"));
            }
        }
        all.into_iter().filter(|(n, _)| a.queries.contains(n)).collect()
    };
    let mut engines = Vec::new();
    for e in &a.engines {
        engines.push(match e.as_str() {
            "lsm" => Engine::Lsm,
            "lineage" => Engine::Lineage,
            other => return Err(format!("tpch: unknown engine `{other}` (lsm, lineage)")),
        });
    }
    if a.runs == 0 || a.sqlite_runs == 0 {
        return Err("tpch: --runs and --sqlite-runs must be at least 1".into());
    }
    if !(a.sf > 0.0 && a.sf <= 1000.0) {
        return Err(format!("tpch: scale factor {} is not between 0 and 1000", a.sf));
    }
    let data = a.out.join("data");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).map_err(|e| format!("tpch: {}: {e}", data.display()))?;

    let mut results = Results::new(
        "tpch",
        [
            ("scale_factor", json!(a.sf)),
            ("threads", json!(a.threads)),
            ("runs", json!(a.runs)),
            ("sqlite_runs", json!(a.sqlite_runs)),
            ("layout", json!(a.layout)),
            ("block_cache_mib", json!(a.block_cache_mib)),
            ("block_size_kib", json!(a.block_size_kib)),
        ],
    );
    // DuckDB first: its rows are the reference answers.
    let duck = run_duckdb(a, &queries, &data, systems.iter().any(|s| s == "duckdb"));
    let answers: Option<BTreeMap<u32, Vec<Vec<String>>>> = match &duck {
        Ok(d) => Some(d.runs.iter().filter(|(_, r)| r.error.is_none()).map(|(n, r)| (*n, r.rows.clone())).collect()),
        Err(e) => {
            eprintln!("tpch: answers are not checked: {e}");
            None
        }
    };
    let mut verdicts: Vec<(String, Vec<(u32, Verdict)>)> = Vec::new();
    let mut failed = false;
    let mut report =
        |results: &mut Results, system: &str, variant: &str, config: &str, runs: &BTreeMap<u32, QueryRun>| {
            // DuckDB's rows are the reference: only its failures count.
            let reference = system == "duckdb";
            let label = if variant.is_empty() { system.to_string() } else { format!("{system}:{variant}") };
            let mut total = 0.0;
            let mut complete = true;
            let mut list = Vec::new();
            for (n, _) in &queries {
                let run = runs.get(n);
                match run.and_then(QueryRun::best) {
                    Some(ms) => {
                        results.add_variant(system, variant, config, &format!("Q{n}"), ms, "ms");
                        total += ms;
                    }
                    None => complete = false,
                }
                let v = match verdict(run, answers.as_ref().map(|a| a.get(n))) {
                    Verdict::Match | Verdict::Differs(_) if reference => Verdict::Reference,
                    v => v,
                };
                // The run fails on strata's wrong or failed queries; a peer's (SQLite timing out) are
                // reported only.
                failed |=
                    matches!(system, "strata" | "cluster") && matches!(v, Verdict::Differs(_) | Verdict::Failed(_));
                list.push((*n, v));
            }
            if complete {
                results.add_variant(system, variant, config, "total", total, "ms");
            }
            verdicts.push((label, list));
        };

    if let Ok(d) = &duck {
        if d.measured {
            results.add("duckdb", &d.config, "load", d.load_seconds, "s");
            report(&mut results, "duckdb", "", &d.config, &d.runs);
        }
    }
    // Per strata engine run with --refresh: its variant, configuration, runs and quiet total.
    let mut refreshes: Vec<(&str, String, UnderRefresh, Option<f64>)> = Vec::new();
    if systems.iter().any(|s| s == "strata") {
        for engine in &engines {
            let variant = engine_name(*engine);
            let dir = match &a.strata_data {
                Some(keep) => keep.join(format!("strata-{variant}")),
                None => data.join(format!("strata-{variant}")),
            };
            let StrataRun { config, load_s, runs, refresh } = run_strata(a, *engine, &dir, &queries)?;
            if let Some(s) = load_s {
                results.add_variant("strata", variant, &config, "load", s, "s");
            }
            report(&mut results, "strata", variant, &config, &runs);
            if let Some(under) = refresh {
                let quiet = queries.iter().map(|(n, _)| runs.get(n).and_then(QueryRun::best)).sum::<Option<f64>>();
                refreshes.push((variant, config, under, quiet));
            }
            if a.strata_data.is_none() {
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
    if systems.iter().any(|s| s == "cluster") {
        let dir = data.join("cluster");
        let (config, load_s, runs) = run_cluster(a, &dir, &queries)?;
        results.add("cluster", &config, "load", load_s, "s");
        report(&mut results, "cluster", "", &config, &runs);
        let _ = std::fs::remove_dir_all(&dir);
    }
    #[cfg(feature = "sqlite")]
    if systems.iter().any(|s| s == "sqlite") {
        let dir = data.join("sqlite");
        let (config, load_s, runs) = sqlite::run(a, &dir, &queries)?;
        results.add("sqlite", &config, "load", load_s, "s");
        report(&mut results, "sqlite", "", &config, &runs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    if a.refresh {
        let duck = duck.as_ref().ok();
        let checked = report_refresh(a, &queries, &data, duck, &refreshes, &mut results, &mut verdicts);
        failed |= checked;
    }

    // One line per system: how many queries matched (or, for DuckDB, that it is the reference).
    let lines: Vec<(&String, String)> = verdicts
        .iter()
        .map(|(label, list)| {
            let count = |f: fn(&Verdict) -> bool| list.iter().filter(|(_, v)| f(v)).count();
            let line = if count(|v| matches!(v, Verdict::Reference)) > 0 {
                "the reference answers".to_string()
            } else if list.iter().all(|(_, v)| matches!(v, Verdict::Unchecked)) {
                "answers not checked".to_string()
            } else if answers.is_some() {
                format!("{}/{} queries return the reference answer", count(|v| matches!(v, Verdict::Match)), list.len())
            } else {
                "answers not checked".to_string()
            };
            (label, line)
        })
        .collect();
    let summary = lines.iter().map(|(label, line)| ((*label).clone(), json!(line))).collect();
    results.params.insert("answers".into(), Json::Object(summary));
    results.finish(&a.out)?;
    let _ = std::fs::remove_dir_all(&data);
    println!();
    for ((label, line), (_, list)) in lines.iter().zip(&verdicts) {
        println!("{label}: {line}");
        for (n, v) in list {
            match v {
                Verdict::Differs(why) => println!("  Q{n}: differs from the answer: {why}"),
                Verdict::Failed(why) => println!("  Q{n}: failed: {why}"),
                Verdict::Match | Verdict::Unchecked | Verdict::Reference => {}
            }
        }
    }
    if failed {
        return Err("tpch: strata failed queries or returned rows other than the reference answer".into());
    }
    Ok(())
}

/// The `--refresh` part after strata's runs: DuckDB's answers for every snapshot strata's runs
/// saw, then its own runs under refresh; adds the figures to `results` and a verdict list per
/// strata engine. Returns whether any of strata's runs failed or differed from its answer.
fn report_refresh(
    a: &TpchArgs,
    queries: &[(u32, String)],
    data: &Path,
    duck: Option<&DuckRun>,
    refreshes: &[(&str, String, UnderRefresh, Option<f64>)],
    results: &mut Results,
    verdicts: &mut Vec<(String, Vec<(u32, Verdict)>)>,
) -> bool {
    let sql_of = |n: u32| queries.iter().find(|(m, _)| *m == n).map(|(_, q)| q.as_str()).unwrap_or("");
    // Every strata run, numbered across engines.
    let replay: Vec<(usize, u64, &str)> = refreshes
        .iter()
        .flat_map(|(_, _, u, _)| &u.runs)
        .enumerate()
        .map(|(id, r)| (id, r.seen, sql_of(r.n)))
        .collect();
    let duck_refresh = match duck {
        Some(d) => run_duckdb_refresh(a, queries, data, &replay, d.measured)
            .map_err(|e| eprintln!("tpch: answers under refresh are not checked: {e}"))
            .ok(),
        None => None,
    };
    let mut failed = false;
    let mut id = 0;
    for (variant, config, under, quiet) in refreshes {
        let mut per_query: BTreeMap<u32, (f64, Verdict)> = BTreeMap::new();
        for r in &under.runs {
            let answer = duck_refresh.as_ref().and_then(|d| d.answers.get(&id));
            id += 1;
            let v = match (&r.rows, answer) {
                (Err(e), _) => Verdict::Failed(e.clone()),
                (Ok(_), None | Some(Err(_))) => Verdict::Unchecked,
                (Ok(rows), Some(Ok(want))) => match check::compare(rows, want) {
                    None => Verdict::Match,
                    Some(why) => Verdict::Differs(format!("with {} refresh functions seen: {why}", r.seen)),
                },
            };
            let entry = per_query.entry(r.n).or_insert((f64::INFINITY, Verdict::Match));
            entry.0 = entry.0.min(r.ms);
            // The worst verdict of the query's runs stands.
            let rank = |v: &Verdict| match v {
                Verdict::Differs(_) | Verdict::Failed(_) => 2,
                Verdict::Unchecked => 1,
                Verdict::Match | Verdict::Reference => 0,
            };
            if rank(&v) > rank(&entry.1) {
                entry.1 = v;
            }
        }
        let mut total = 0.0;
        for (n, (ms, _)) in &per_query {
            results.add_variant("strata", variant, config, &format!("refresh Q{n}"), *ms, "ms");
            total += ms;
        }
        add_refresh_totals(results, ("strata", variant, config), total, *quiet, &under.refreshed);
        let list: Vec<(u32, Verdict)> = per_query.into_iter().map(|(n, (_, v))| (n, v)).collect();
        failed |= list.iter().any(|(_, v)| matches!(v, Verdict::Differs(_) | Verdict::Failed(_)));
        verdicts.push((format!("strata:{variant} under refresh"), list));
    }
    if let (Some(d), Some(r)) = (duck.filter(|d| d.measured), &duck_refresh) {
        let mut total = 0.0;
        for (n, run) in &r.runs {
            if let Some(ms) = run.best() {
                results.add("duckdb", &d.config, &format!("refresh Q{n}"), ms, "ms");
                total += ms;
            }
        }
        let quiet = queries.iter().map(|(n, _)| d.runs.get(n).and_then(QueryRun::best)).sum::<Option<f64>>();
        add_refresh_totals(results, ("duckdb", "", &d.config), total, quiet, &r.refreshed);
    }
    failed
}

/// The totals of a run under refresh: the queries' time, its ratio to the quiet run's (`quiet`)
/// and the refresh stream's rate.
fn add_refresh_totals(
    results: &mut Results,
    (system, variant, config): (&str, &str, &str),
    total: f64,
    quiet: Option<f64>,
    refreshed: &refresh::Refreshed,
) {
    results.add_variant(system, variant, config, "refresh total", total, "ms");
    if let Some(q) = quiet.filter(|q| *q > 0.0) {
        results.add_variant(system, variant, config, "refresh slowdown", total / q, "x");
    }
    if refreshed.seconds > 0.0 && refreshed.functions > 0 {
        let s = refreshed.seconds;
        results.add_variant(system, variant, config, "refresh functions/s", refreshed.functions as f64 / s, "/s");
        results.add_variant(system, variant, config, "refresh rows/s", refreshed.rows as f64 / s, "/s");
    }
}

/// How one system's rows for one query compare with the reference answer.
enum Verdict {
    /// DuckDB's own rows.
    Reference,
    Match,
    Differs(String),
    Failed(String),
    Unchecked,
}

/// `run`'s verdict against `answer` (`None`: no answers at all; `Some(None)`: none for this
/// query, because the reference failed on it, which is reported as DuckDB's failure).
fn verdict(run: Option<&QueryRun>, answer: Option<Option<&Vec<Vec<String>>>>) -> Verdict {
    let Some(run) = run else {
        return Verdict::Failed("not run".into());
    };
    if let Some(e) = &run.error {
        return Verdict::Failed(e.clone());
    }
    match answer {
        None | Some(None) => Verdict::Unchecked,
        Some(Some(want)) => match check::compare(&run.rows, want) {
            None => Verdict::Match,
            Some(why) => Verdict::Differs(why),
        },
    }
}

/// The systems to run; strata, duckdb and sqlite only, and peers only when built in.
fn systems(a: &TpchArgs) -> Result<Vec<String>, String> {
    let built = crate::peers::built();
    if a.systems.is_empty() {
        let mut s = vec!["strata".to_string()];
        s.extend(["duckdb", "sqlite"].iter().filter(|p| built.contains(p)).map(|p| p.to_string()));
        return Ok(s);
    }
    for s in &a.systems {
        match s.as_str() {
            "strata" | "cluster" => {}
            "duckdb" | "sqlite" if built.contains(&s.as_str()) => {}
            "duckdb" | "sqlite" => return Err(crate::peers::not_built(s)),
            other => {
                return Err(format!("tpch: system `{other}` does not run TPC-H here (strata, cluster, duckdb, sqlite)"))
            }
        }
    }
    Ok(a.systems.clone())
}

/// What the DuckDB helper brought back.
struct DuckRun {
    /// Whether the run is reported (else DuckDB ran once per query as the reference only).
    measured: bool,
    config: String,
    load_seconds: f64,
    runs: BTreeMap<u32, QueryRun>,
}

/// Writes the tables as text files, loads them into DuckDB with its helper and runs `queries`
/// (`--runs` times when `measured`, else once for the reference rows).
fn run_duckdb(a: &TpchArgs, queries: &[(u32, String)], data: &Path, measured: bool) -> Result<DuckRun, String> {
    let dir = data.join("duckdb");
    let tbl = dir.join("tbl");
    std::fs::create_dir_all(&tbl).map_err(|e| format!("duckdb: {e}"))?;
    let script = dir.join("tpch_duckdb.py");
    std::fs::write(&script, DUCKDB_HELPER).map_err(|e| format!("duckdb: {e}"))?;
    let qfile = dir.join("queries.json");
    let list: Vec<Json> = queries.iter().map(|(n, q)| json!([n, q])).collect();
    std::fs::write(&qfile, Json::Array(list).to_string()).map_err(|e| format!("duckdb: {e}"))?;
    let py = crate::peers::python();
    let missing = || {
        format!(
            "the DuckDB helper failed with {} (it needs duckdb==1.5.5 and duckdb-extension-tpch==1.5.5: \
             scripts/install-peers.sh, or STRATA_BENCH_PYTHON)",
            py.display()
        )
    };
    // Before writing the tables out for it: can the helper run at all?
    let probe = std::process::Command::new(&py).args(["-c", "import duckdb, duckdb_extension_tpch"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(missing());
    }
    let t0 = Instant::now();
    let rows = load::write_tbl_files(a.sf, a.threads, &tbl)?;
    eprintln!(
        "duckdb: {rows} rows written as text for DuckDB in {:.1} s; loading and querying",
        t0.elapsed().as_secs_f64()
    );
    let runs = if measured { a.runs } else { 1 };
    let doc = duckdb_helper(a, &dir, runs, &[]).map_err(|e| {
        let _ = std::fs::remove_dir_all(&dir);
        e.unwrap_or_else(missing)
    })?;
    // `--refresh` goes on with the database later (`run_duckdb_refresh`).
    let _ = std::fs::remove_dir_all(if a.refresh { &tbl } else { &dir });
    let runs = duckdb_runs(&doc, queries);
    let version = doc["version"].as_str().unwrap_or("?");
    Ok(DuckRun {
        measured,
        config: format!(
            "DuckDB {version}, {} threads, DECIMAL money, loaded from text files of the same rows",
            a.threads
        ),
        load_seconds: doc["load_seconds"].as_f64().unwrap_or(0.0),
        runs,
    })
}

/// Runs the DuckDB helper written into `dir` on the database there, its queries `runs` times,
/// with `extra` arguments; returns its result document. The error is `None` when the helper
/// failed without saying why (DuckDB missing, most likely).
fn duckdb_helper(a: &TpchArgs, dir: &Path, runs: usize, extra: &[&std::ffi::OsStr]) -> Result<Json, Option<String>> {
    let py = crate::peers::python();
    let out = dir.join("result.json");
    let status = std::process::Command::new(&py)
        .arg(dir.join("tpch_duckdb.py"))
        .arg("--db")
        .arg(dir.join("tpch.duckdb"))
        .arg("--tbl")
        .arg(dir.join("tbl"))
        .arg("--threads")
        .arg(a.threads.to_string())
        .arg("--runs")
        .arg(runs.to_string())
        .arg("--queries")
        .arg(dir.join("queries.json"))
        .arg("--out")
        .arg(&out)
        .args(extra)
        .status()
        .map_err(|e| Some(format!("cannot run {}: {e}", py.display())))?;
    if !status.success() {
        return Err(None);
    }
    std::fs::read_to_string(&out)
        .map_err(|e| format!("duckdb: {e}"))
        .and_then(|t| serde_json::from_str(&t).map_err(|e| format!("duckdb: bad result: {e}")))
        .map_err(Some)
}

/// Rows as the helper writes them: arrays of texts.
fn json_rows(rows: &Json) -> Option<Vec<Vec<String>>> {
    rows.as_array().map(|rows| {
        rows.iter()
            .map(|r| {
                r.as_array()
                    .map(|c| c.iter().map(|v| v.as_str().unwrap_or("").to_string()).collect())
                    .unwrap_or_default()
            })
            .collect()
    })
}

/// Each query's times, first rows and error in a helper's result document.
fn duckdb_runs(doc: &Json, queries: &[(u32, String)]) -> BTreeMap<u32, QueryRun> {
    let mut runs = BTreeMap::new();
    for (n, _) in queries {
        let key = n.to_string();
        let times =
            doc["times"][&key].as_array().map(|t| t.iter().filter_map(Json::as_f64).collect()).unwrap_or_default();
        let rows = json_rows(&doc["results"][&key]).unwrap_or_default();
        let error = doc["errors"][&key].as_str().map(str::to_string);
        runs.insert(*n, QueryRun { times, rows, error });
    }
    runs
}

/// What DuckDB did in the `--refresh` part.
struct DuckRefresh {
    /// The answer for each replayed entry, by its id (an error's text when the query failed).
    answers: BTreeMap<usize, Result<Vec<Vec<String>>, String>>,
    /// The queries' times under its own refresh stream.
    runs: BTreeMap<u32, QueryRun>,
    refreshed: refresh::Refreshed,
}

/// DuckDB's side of `--refresh`, on the database [`run_duckdb`] left under `data`: the answer
/// for each `(id, functions, query)` of `replay` (the query's rows once that many refresh
/// functions are applied), then, when `measured`, the queries `--runs` times each while it
/// applies the following functions back to back. The database is removed afterwards.
fn run_duckdb_refresh(
    a: &TpchArgs,
    queries: &[(u32, String)],
    data: &Path,
    replay: &[(usize, u64, &str)],
    measured: bool,
) -> Result<DuckRefresh, String> {
    let dir = data.join("duckdb");
    let mut ordered = replay.to_vec();
    ordered.sort_by_key(|(_, count, _)| *count);
    let plan = json!({
        "bounds": refresh::set_bounds(a.sf),
        "replay": ordered.iter().map(|(id, count, sql)| json!([id, count, sql])).collect::<Vec<_>>(),
        "throughput": measured,
        "pairs": a.refresh_pairs,
    });
    let path = dir.join("refresh.json");
    let doc = std::fs::write(&path, plan.to_string()).map_err(|e| format!("duckdb: {e}")).and_then(|()| {
        duckdb_helper(a, &dir, a.runs, &[std::ffi::OsStr::new("--refresh"), path.as_os_str()])
            .map_err(|e| e.unwrap_or_else(|| "duckdb: the helper failed in the refresh run".into()))
    });
    let _ = std::fs::remove_dir_all(&dir);
    let doc = doc?;
    let mut answers = BTreeMap::new();
    for (id, _, _) in replay {
        let got = &doc["replay"][id.to_string()];
        let answer = match (json_rows(got), got.as_str()) {
            (Some(rows), _) => Ok(rows),
            (None, Some(e)) => Err(format!("DuckDB failed: {e}")),
            (None, None) => Err("DuckDB gave no answer".into()),
        };
        answers.insert(*id, answer);
    }
    if let Some(e) = doc["refresh_error"].as_str() {
        return Err(format!("duckdb: its refresh stream failed: {e}"));
    }
    Ok(DuckRefresh {
        answers,
        runs: duckdb_runs(&doc, queries),
        refreshed: refresh::Refreshed {
            functions: doc["refresh_functions"].as_u64().unwrap_or(0),
            rows: doc["refresh_rows"].as_u64().unwrap_or(0),
            seconds: doc["refresh_seconds"].as_f64().unwrap_or(0.0),
        },
    })
}

/// What a kept database was loaded with (`--strata-data`), in the file [`STAMP`] beside it.
fn stamp(a: &TpchArgs, engine: Engine) -> String {
    let layout = if engine == Engine::Lsm { a.layout.as_str() } else { "-" };
    format!("tpch sf={} engine={} layout={layout} block_size_kib={}\n", a.sf, engine_name(engine), a.block_size_kib)
}

const STAMP: &str = "tpch-stamp";

/// Loads the tables into a new strata database at `dir` on `engine` (or, with `--strata-data`,
/// opens the one a run with the same stamp left there), compacts them and runs the queries through
/// strata-sql; returns the configuration, the load's seconds (`None`: reused) and the runs.
fn run_strata(a: &TpchArgs, engine: Engine, dir: &Path, queries: &[(u32, String)]) -> Result<StrataRun, String> {
    let name = engine_name(engine);
    let stamp_path = dir.with_file_name(format!("{name}.{STAMP}"));
    let reuse = a.strata_data.is_some() && std::fs::read_to_string(&stamp_path).ok() == Some(stamp(a, engine));
    if !reuse {
        let _ = std::fs::remove_file(&stamp_path);
        let _ = std::fs::remove_dir_all(dir);
    }
    let opts =
        Options { block_cache_size: a.block_cache_mib << 20, block_size: a.block_size_kib << 10, ..Options::default() };
    let cache_mib = a.block_cache_mib;
    let db = Arc::new(Db::open(dir, opts).map_err(|e| format!("strata: {e}"))?);
    let load_s = if reuse {
        eprintln!("strata:{name}: reusing the tables loaded in {}", dir.display());
        None
    } else {
        let s = load_into(a, engine, &db)?;
        if a.strata_data.is_some() {
            std::fs::write(&stamp_path, stamp(a, engine))
                .map_err(|e| format!("strata: {}: {e}", stamp_path.display()))?;
        }
        Some(s)
    };
    let runs = run_queries(a, name, &db, queries)?;
    let refresh = if a.refresh {
        // The refresh stream changes the tables: a kept database is loaded again next time.
        let _ = std::fs::remove_file(&stamp_path);
        Some(run_under_refresh(a, name, &db, queries)?)
    } else {
        None
    };
    let config = match engine {
        Engine::Lsm => format!(
            "LSM engine, layout `{}`, {}, {} KiB blocks, {cache_mib} MiB block cache, DataFusion {} partitions, DOUBLE money",
            a.layout,
            if a.load_by_writes { "loaded by writes and compacted" } else { "loaded by ingests" },
            a.block_size_kib,
            a.threads
        ),
        Engine::Lineage => format!("lineage engine (in memory), DataFusion {} partitions, DOUBLE money", a.threads),
    };
    Ok(StrataRun { config, load_s, runs, refresh })
}

/// What [`run_strata`] measured.
struct StrataRun {
    config: String,
    /// Seconds the load took (`None`: a kept database was reused).
    load_s: Option<f64>,
    runs: BTreeMap<u32, QueryRun>,
    /// The runs under the refresh stream (`--refresh`).
    refresh: Option<UnderRefresh>,
}

/// One run of a query under the refresh stream.
struct SnapshotRun {
    n: u32,
    /// How many refresh functions the query's snapshot saw.
    seen: u64,
    ms: f64,
    /// The rows as text, or why the query failed.
    rows: Result<Vec<Vec<String>>, String>,
}

/// The query stream's runs under the refresh stream, and what the refresh stream did.
struct UnderRefresh {
    runs: Vec<SnapshotRun>,
    refreshed: refresh::Refreshed,
}

/// Loads the tables into `db` on `engine` and compacts them; returns the seconds it took.
fn load_into(a: &TpchArgs, engine: Engine, db: &Db) -> Result<f64, String> {
    let name = engine_name(engine);
    let options = match engine {
        Engine::Lsm => TableOptions::with_layout(a.layout.clone()),
        Engine::Lineage => TableOptions::engine(Engine::Lineage),
    };
    let total: u64 = load::TABLES.iter().map(|t| t.rows(a.sf)).sum();
    let t0 = Instant::now();
    let ingest = engine == Engine::Lsm && !a.load_by_writes;
    let loaded = Progress::around(&format!("strata:{name}: load"), total, |done| {
        load::load_strata(db, a.sf, a.threads, &options, done, ingest).and_then(|rows| {
            db.flush().map_err(|e| format!("strata: flush: {e}"))?;
            // Ingested rows are in the last level already: nothing to compact.
            if engine == Engine::Lsm && !ingest {
                for t in &load::TABLES {
                    db.compact_range(t.name, &KeyRange::all())
                        .map_err(|e| format!("strata: compacting {}: {e}", t.name))?;
                }
            }
            db.wait_for_compactions().map_err(|e| format!("strata: {e}"))?;
            Ok(rows)
        })
    })?;
    let load_s = t0.elapsed().as_secs_f64();
    let how = match engine {
        Engine::Lsm if !a.load_by_writes => "ingested",
        Engine::Lsm => "written and compacted",
        Engine::Lineage => "written",
    };
    eprintln!("strata:{name}: {loaded} rows {how} in {load_s:.1} s");
    Ok(load_s)
}

/// The runtime queries run on: `--threads` workers.
fn runtime(a: &TpchArgs) -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.threads.max(1))
        .enable_all()
        .build()
        .map_err(|e| format!("strata: {e}"))
}

/// Runs each query `--runs` times while the refresh stream changes `db`, each run in a read-only
/// transaction block that first counts the refresh functions its snapshot holds.
fn run_under_refresh(
    a: &TpchArgs,
    name: &str,
    db: &Arc<Db>,
    queries: &[(u32, String)],
) -> Result<UnderRefresh, String> {
    let rt = runtime(a)?;
    let sql = strata_sql::SqlEngine::with_partitions(db.clone(), a.threads).map_err(|e| format!("strata: {e}"))?;
    let (runs, refreshed) = refresh::beside(db, a.sf, a.refresh_pairs, || {
        let mut runs: Vec<SnapshotRun> = Vec::new();
        for (n, q) in queries {
            let first = runs.len();
            for _ in 0..a.runs {
                runs.push(rt.block_on(snapshot_query(&sql, *n, q))?);
            }
            let mine = &runs[first..];
            let best = mine.iter().map(|r| r.ms).fold(f64::INFINITY, f64::min);
            let seen: Vec<String> = mine.iter().map(|r| r.seen.to_string()).collect();
            match mine.iter().find_map(|r| r.rows.as_ref().err()) {
                Some(e) => eprintln!("strata:{name}: Q{n} failed under refresh: {e}"),
                None => {
                    eprintln!("strata:{name}: Q{n} {best:.1} ms under refresh (functions seen: {})", seen.join(", "))
                }
            }
        }
        Ok(runs)
    })?;
    eprintln!(
        "strata:{name}: {} refresh functions ({} rows) in {:.1} s",
        refreshed.functions, refreshed.rows, refreshed.seconds
    );
    Ok(UnderRefresh { runs, refreshed })
}

/// Runs query `n` in a read-only block: the count of refresh functions its snapshot holds, then
/// the query, timed. Only failing to count is an error; the query's failure is in the result.
async fn snapshot_query(sql: &strata_sql::SqlEngine, n: u32, q: &str) -> Result<SnapshotRun, String> {
    let session = sql.session();
    let fail = |e: strata_sql::SqlError| format!("strata: Q{n} under refresh: {e}");
    session.execute("START TRANSACTION READ ONLY").await.map_err(fail)?;
    let counted = session.execute(&format!("SELECT count(*) FROM {}", refresh::LOG_TABLE)).await.map_err(fail)?;
    let seen = match counted.last() {
        Some(strata_sql::Output::Rows { batches, .. }) => refresh::count_of(batches)?,
        _ => return Err(format!("strata: counting {} returned no rows", refresh::LOG_TABLE)),
    };
    let t = Instant::now();
    let rows = match session.execute(q).await {
        Ok(out) => match out.last() {
            Some(strata_sql::Output::Rows { batches, .. }) => batches_text(batches),
            _ => Ok(Vec::new()),
        },
        Err(e) => Err(e.to_string()),
    };
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    // A failed block answers COMMIT with a rollback; either way the block ends.
    session.execute("COMMIT").await.map_err(fail)?;
    Ok(SnapshotRun { n, seen, ms, rows })
}

/// Starts `--cluster-nodes` nodes in this process, loads the tables through them (one shard per
/// node, each replicated on every node) and runs the queries with the first node coordinating;
/// returns the configuration, the load's seconds and the runs.
fn run_cluster(
    a: &TpchArgs,
    dir: &Path,
    queries: &[(u32, String)],
) -> Result<(String, f64, BTreeMap<u32, QueryRun>), String> {
    let _ = std::fs::remove_dir_all(dir);
    let n = a.cluster_nodes;
    if n == 0 {
        return Err("tpch: --cluster-nodes must be at least 1".into());
    }
    let cluster = crate::cluster::Cluster::start(dir, n, a.threads)?;
    let total: u64 = load::TABLES.iter().map(|t| t.rows(a.sf)).sum();
    let t0 = Instant::now();
    let loaded = Progress::around("cluster: load", total, |done| cluster::load(&cluster, a.sf, a.threads, done))?;
    let load_s = t0.elapsed().as_secs_f64();
    eprintln!("cluster: {loaded} rows written through {n} nodes in {load_s:.1} s");
    let mut runs = BTreeMap::new();
    for (q, sql) in queries {
        if a.explain {
            let plan = cluster.explain(sql).map_err(|e| format!("cluster: EXPLAIN Q{q}: {e}"))?;
            let plans = a.out.join("plans");
            std::fs::create_dir_all(&plans).map_err(|e| format!("{}: {e}", plans.display()))?;
            let path = plans.join(format!("cluster-q{q:02}.txt"));
            std::fs::write(&path, plan).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let mut run = QueryRun::default();
        for i in 0..a.runs {
            let t = Instant::now();
            match cluster.query(sql) {
                Ok(batches) => {
                    run.times.push(t.elapsed().as_secs_f64() * 1000.0);
                    if i == 0 {
                        run.rows = batches_text(&batches)?;
                    }
                }
                Err(e) => {
                    run.error = Some(e);
                    run.times.clear();
                    break;
                }
            }
        }
        run.log("cluster", *q);
        runs.insert(*q, run);
    }
    cluster.stop()?;
    let config = format!(
        "{n} nodes in one process over 127.0.0.1, every table in {n} shards × {n} replicas (LSM, row layout), \
         one scan task per shard"
    );
    Ok((config, load_s, runs))
}

/// Runs the queries through strata-sql over `db`.
fn run_queries(
    a: &TpchArgs,
    name: &str,
    db: &Arc<Db>,
    queries: &[(u32, String)],
) -> Result<BTreeMap<u32, QueryRun>, String> {
    let rt = runtime(a)?;
    let sql = strata_sql::SqlEngine::with_partitions(db.clone(), a.threads).map_err(|e| format!("strata: {e}"))?;
    let mut runs = BTreeMap::new();
    for (n, q) in queries {
        if a.explain {
            write_plan(a, name, &sql, &rt, *n, q)?;
        }
        let mut run = QueryRun::default();
        for i in 0..a.runs {
            let t = Instant::now();
            match rt.block_on(sql.execute(q)) {
                Ok(out) => {
                    run.times.push(t.elapsed().as_secs_f64() * 1000.0);
                    if i == 0 {
                        if let Some(strata_sql::Output::Rows { batches, .. }) = out.last() {
                            run.rows = batches_text(batches)?;
                        }
                    }
                }
                Err(e) => {
                    run.error = Some(e.to_string());
                    run.times.clear();
                    break;
                }
            }
        }
        run.log(&format!("strata:{name}"), *n);
        runs.insert(*n, run);
    }
    Ok(runs)
}

/// Writes the physical plan of query `n` to `<out>/plans/<engine>-qNN.txt`.
fn write_plan(
    a: &TpchArgs,
    name: &str,
    sql: &strata_sql::SqlEngine,
    rt: &tokio::runtime::Runtime,
    n: u32,
    q: &str,
) -> Result<(), String> {
    let out = rt.block_on(sql.execute(&format!("EXPLAIN {q}"))).map_err(|e| format!("strata: EXPLAIN Q{n}: {e}"))?;
    let mut text = String::new();
    if let Some(strata_sql::Output::Rows { batches, .. }) = out.last() {
        for row in batches_text(batches)? {
            text.push_str(&row.join("\n"));
            text.push('\n');
        }
    }
    let dir = a.out.join("plans");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("{name}-q{n:02}.txt"));
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The rows of `batches` as text: dates as `YYYY-MM-DD`, numbers as Arrow prints them, NULL as
/// an empty value (as the answers write it).
pub(crate) fn batches_text(batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, String> {
    let mut rows = Vec::new();
    for b in batches {
        let formatters: Vec<_> = b
            .columns()
            .iter()
            .map(|c| arrow_cast::display::ArrayFormatter::try_new(c.as_ref(), &Default::default()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("strata: {e}"))?;
        for i in 0..b.num_rows() {
            rows.push(formatters.iter().map(|f| f.value(i).to_string()).collect());
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_holds_the_22_queries_in_order() {
        let q = parse_queries(QUERIES);
        assert_eq!(q.iter().map(|(n, _)| *n).collect::<Vec<_>>(), (1..=22).collect::<Vec<_>>());
        assert!(q.iter().all(|(_, sql)| sql.starts_with("SELECT") || sql.starts_with("WITH")), "{q:?}");
        assert!(q.iter().all(|(_, sql)| !sql.ends_with(';') && !sql.contains("-- Q")));
    }

    #[test]
    fn sqlite_dialect_rewrites_dates_years_and_substrings() {
        let sql = "SELECT extract(year FROM o_orderdate) AS y, substring(c_phone FROM 1 FOR 2) FROM t \
                   WHERE d >= DATE '1994-01-01' AND substring(x, 1)";
        assert_eq!(
            sqlite_dialect(sql),
            "SELECT CAST(strftime('%Y', o_orderdate) AS INTEGER) AS y, substr(c_phone, 1, 2) FROM t \
                   WHERE d >= '1994-01-01' AND substring(x, 1)"
        );
        for (_, q) in parse_queries(QUERIES) {
            let s = sqlite_dialect(&q);
            assert!(!s.contains("DATE '") && !s.contains("extract(") && !s.contains(" FOR "), "{s}");
        }
    }
}
