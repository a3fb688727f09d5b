//! `strata-bench pgbench`: PostgreSQL's own load driver, `pgbench`, against `strata serve` (run
//! in process, on a database under `--out`) and against a private PostgreSQL 15 cluster, with the
//! same tables, the same data and the same transaction script.
//!
//! The tables are pgbench's three balance tables, created and filled by SQL through `psql` (its
//! `-i` needs types and keyless tables strata does not have yet): `--scale` branches, 10 tellers
//! and 100,000 accounts per branch, every balance 0, each account's filler 84 spaces (pgbench's
//! `char(84)`, as TEXT here, in both systems). The script is TPC-B-like without the history
//! insert: `BEGIN ISOLATION LEVEL REPEATABLE READ`; add a random delta to an account's balance;
//! read it back; add the delta to a teller's and a branch's balance; `END`. pgbench runs it with
//! `--clients` connections on `--jobs` threads for `--duration` seconds, retrying a transaction
//! that fails with a serialization error (40001) up to `--max-tries` times.
//!
//! Per system: tps (without connection time), transactions processed, failed, retried and the
//! total number of retries, from pgbench's own report; then the check that every transaction
//! was whole: the account, teller and branch balances each sum to the same total. A system
//! whose sums disagree, or with a failed transaction, makes the run fail.
//!
//! PostgreSQL runs with `synchronous_commit=off` (strata's WAL is written without an fsync per
//! commit by default) and needs the `postgres` feature; pgbench and psql come from Debian's
//! PostgreSQL packages (`--pg-bin` names their directory when they are not on the PATH).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use clap::Parser;
use serde_json::json;

use crate::harness::Results;

#[derive(Parser, Debug)]
pub(crate) struct PgbenchArgs {
    /// pgbench's scale: branches; 10 tellers and 100,000 accounts per branch.
    #[arg(long, default_value_t = 8)]
    scale: u32,
    /// Client connections (pgbench `-c`).
    #[arg(long, default_value_t = 8)]
    clients: u32,
    /// pgbench threads (`-j`).
    #[arg(long, default_value_t = 2)]
    jobs: u32,
    /// Seconds each system runs (`-T`).
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Tries per transaction before pgbench counts it failed (`--max-tries`).
    #[arg(long, default_value_t = 50)]
    max_tries: u32,
    /// Systems to run, comma-separated: strata, postgres.
    #[arg(long, value_delimiter = ',', default_values_t = ["strata", "postgres"].map(String::from).to_vec())]
    systems: Vec<String>,
    /// Directory holding `pgbench` and `psql` (default: the PATH).
    #[arg(long)]
    pg_bin: Option<PathBuf>,
    /// Directory for results.json, the script and the systems' data.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
}

/// Accounts per branch and tellers per branch, as pgbench's `-i` makes them.
const ACCOUNTS: u64 = 100_000;
const TELLERS: u64 = 10;
/// Account rows per INSERT statement while filling.
const FILL_CHUNK: u64 = 1_000;

/// The transaction script, with the table sizes written in.
fn script(scale: u32) -> String {
    let scale = u64::from(scale);
    format!(
        "\\set aid random(1, {accounts})\n\
         \\set bid random(1, {scale})\n\
         \\set tid random(1, {tellers})\n\
         \\set delta random(-5000, 5000)\n\
         BEGIN ISOLATION LEVEL REPEATABLE READ;\n\
         UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n\
         SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n\
         UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;\n\
         UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;\n\
         END;\n",
        accounts = ACCOUNTS * scale,
        tellers = TELLERS * scale,
    )
}

/// The SQL that creates and fills the three tables.
fn setup_sql(scale: u32) -> String {
    let scale = u64::from(scale);
    let mut s = String::from(
        "CREATE TABLE pgbench_branches (bid INT PRIMARY KEY, bbalance INT, filler TEXT);\n\
         CREATE TABLE pgbench_tellers (tid INT PRIMARY KEY, bid INT, tbalance INT, filler TEXT);\n\
         CREATE TABLE pgbench_accounts (aid INT PRIMARY KEY, bid INT, abalance INT, filler TEXT);\n",
    );
    let values = |n: u64, row: &dyn Fn(u64) -> String| (1..=n).map(row).collect::<Vec<_>>().join(", ");
    s.push_str(&format!("INSERT INTO pgbench_branches VALUES {};\n", values(scale, &|b| format!("({b}, 0, NULL)"))));
    s.push_str(&format!(
        "INSERT INTO pgbench_tellers VALUES {};\n",
        values(TELLERS * scale, &|t| format!("({t}, {}, 0, NULL)", (t - 1) / TELLERS + 1))
    ));
    let filler = " ".repeat(84);
    let accounts = ACCOUNTS * scale;
    let mut first = 1;
    while first <= accounts {
        let last = (first + FILL_CHUNK - 1).min(accounts);
        let rows: Vec<String> =
            (first..=last).map(|a| format!("({a}, {}, 0, '{filler}')", (a - 1) / ACCOUNTS + 1)).collect();
        s.push_str(&format!("INSERT INTO pgbench_accounts VALUES {};\n", rows.join(", ")));
        first = last + 1;
    }
    s
}

/// How to reach a server: host, port, user, database.
struct Target {
    port: u16,
    user: &'static str,
    db: &'static str,
}

impl Target {
    fn conn_args(&self) -> Vec<String> {
        vec![
            "-h".into(),
            "127.0.0.1".into(),
            "-p".into(),
            self.port.to_string(),
            "-U".into(),
            self.user.into(),
            "-d".into(),
            self.db.into(),
        ]
    }
}

fn tool(args: &PgbenchArgs, name: &str) -> PathBuf {
    args.pg_bin.as_ref().map_or_else(|| PathBuf::from(name), |d| d.join(name))
}

/// Runs `psql` with a file of statements, stopping at the first error.
fn psql_file(args: &PgbenchArgs, t: &Target, file: &Path) -> Result<(), String> {
    let out = Command::new(tool(args, "psql"))
        .args(t.conn_args())
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(file)
        .output()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    if !out.status.success() {
        return Err(format!("psql -f {} failed: {}", file.display(), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

/// One integer a query answers, through `psql`.
fn psql_int(args: &PgbenchArgs, t: &Target, sql: &str) -> Result<i64, String> {
    let out = Command::new(tool(args, "psql"))
        .args(t.conn_args())
        .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("psql -c {sql:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    text.trim().parse().map_err(|_| format!("{sql}: expected an integer, got {:?}", text.trim()))
}

/// What pgbench reported.
#[derive(Debug, Default, PartialEq)]
struct Report {
    tps: f64,
    processed: u64,
    failed: u64,
    retried: u64,
    retries: u64,
}

/// The first number after `prefix` on the line that starts with it.
fn number_after(text: &str, prefix: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.trim_start().starts_with(prefix))?;
    let rest = line.trim_start()[prefix.len()..].trim_start();
    let num: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    num.parse().ok()
}

fn parse_report(text: &str) -> Result<Report, String> {
    let need = |prefix: &str| number_after(text, prefix).ok_or_else(|| format!("pgbench printed no `{prefix}`"));
    Ok(Report {
        tps: need("tps =")?,
        processed: need("number of transactions actually processed:")? as u64,
        // pgbench leaves out the lines it has nothing to say on.
        failed: number_after(text, "number of failed transactions:").unwrap_or(0.0) as u64,
        retried: number_after(text, "number of transactions retried:").unwrap_or(0.0) as u64,
        retries: number_after(text, "total number of retries:").unwrap_or(0.0) as u64,
    })
}

/// Creates and fills the tables, runs pgbench, checks the sums.
fn bench(args: &PgbenchArgs, t: &Target, label: &str, results: &mut Results, config: &str) -> Result<(), String> {
    let setup = args.out.join(format!("setup-{label}.sql"));
    std::fs::write(&setup, setup_sql(args.scale)).map_err(|e| format!("{}: {e}", setup.display()))?;
    eprintln!("{label}: creating and filling the tables (scale {})", args.scale);
    let t0 = std::time::Instant::now();
    psql_file(args, t, &setup)?;
    eprintln!("{label}: filled in {:.1} s; pgbench for {} s", t0.elapsed().as_secs_f64(), args.duration);
    let script_path = args.out.join("tpcb-like.sql");
    std::fs::write(&script_path, script(args.scale)).map_err(|e| format!("{}: {e}", script_path.display()))?;
    let out = Command::new(tool(args, "pgbench"))
        .args(t.conn_args())
        .args(["-n", "-f"])
        .arg(&script_path)
        .args(["-c", &args.clients.to_string(), "-j", &args.jobs.to_string()])
        .args(["-T", &args.duration.to_string(), "--max-tries", &args.max_tries.to_string()])
        .args(["-P", &(args.duration / 6).max(1).to_string()])
        .output()
        .map_err(|e| format!("cannot run pgbench: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let log = args.out.join(format!("pgbench-{label}.log"));
    let _ = std::fs::write(&log, format!("{stdout}\n--- stderr ---\n{stderr}"));
    if !out.status.success() && !stdout.contains("tps =") {
        return Err(format!("{label}: pgbench failed ({}): {}", out.status, stderr.trim()));
    }
    let r = parse_report(&stdout)?;
    let sums = [
        psql_int(args, t, "SELECT sum(abalance) FROM pgbench_accounts")?,
        psql_int(args, t, "SELECT sum(tbalance) FROM pgbench_tellers")?,
        psql_int(args, t, "SELECT sum(bbalance) FROM pgbench_branches")?,
    ];
    eprintln!(
        "{label}: {:.0} tps, {} transactions, {} failed, {} retried ({} retries); balance sums {:?} (log: {})",
        r.tps,
        r.processed,
        r.failed,
        r.retried,
        r.retries,
        sums,
        log.display()
    );
    let mut add = |metric: &str, value: f64, unit: &str| results.add(label, config, metric, value, unit);
    add("tps", r.tps, "txn/s");
    add("transactions", r.processed as f64, "txns");
    add("failed", r.failed as f64, "txns");
    add("retried", r.retried as f64, "txns");
    add("retries", r.retries as f64, "tries");
    add("balance sum", sums[0] as f64, "");
    if sums[0] != sums[1] || sums[1] != sums[2] {
        return Err(format!(
            "{label}: the balances disagree: accounts {}, tellers {}, branches {}",
            sums[0], sums[1], sums[2]
        ));
    }
    if r.failed > 0 {
        return Err(format!("{label}: {} transactions failed (see {})", r.failed, log.display()));
    }
    Ok(())
}

/// strata serving the PostgreSQL protocol in this process until dropped.
pub(crate) struct StrataServer {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl StrataServer {
    fn start(dir: &Path) -> Result<StrataServer, String> {
        let _ = std::fs::remove_dir_all(dir);
        let db = Arc::new(strata::Db::open(dir, strata::Options::default()).map_err(|e| format!("strata: {e}"))?);
        let engine = strata_sql::SqlEngine::new(db.clone()).map_err(|e| format!("strata: {e}"))?;
        Self::serve(db, engine)
    }

    /// Serves `engine` (over `db`) on a free port of 127.0.0.1; the database is closed when
    /// the server stops, if nothing else holds it.
    pub(crate) fn serve(db: Arc<strata::Db>, engine: strata_sql::SqlEngine) -> Result<StrataServer, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the server runtime: {e}"))?;
        let config = strata_pg::Config::new(SocketAddr::from(([127, 0, 0, 1], 0)));
        let server = rt.block_on(strata_pg::Server::bind(engine, config)).map_err(|e| format!("cannot listen: {e}"))?;
        let addr = server.local_addr().map_err(|e| e.to_string())?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            rt.block_on(server.run(async {
                let _ = stopped.await;
            }))
            .map_err(|e| e.to_string())?;
            drop(rt);
            match Arc::try_unwrap(db) {
                Ok(db) => db.close().map_err(|e| format!("strata: {e}")),
                Err(_) => Ok(()),
            }
        });
        Ok(StrataServer { addr, stop: Some(stop), thread: Some(thread) })
    }

    /// Stops serving and closes the database.
    fn stop(mut self) -> Result<(), String> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), String> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(h) => h.join().unwrap_or_else(|_| Err("the server thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for StrataServer {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

pub(crate) fn pgbench(args: &PgbenchArgs) -> Result<(), String> {
    if args.scale == 0 || args.clients == 0 || args.jobs == 0 || args.max_tries == 0 {
        return Err("--scale, --clients, --jobs and --max-tries must be at least 1".into());
    }
    for s in &args.systems {
        match s.as_str() {
            "strata" => {}
            "postgres" if cfg!(feature = "postgres") => {}
            "postgres" => return Err(crate::peers::not_built("postgres")),
            other => return Err(format!("pgbench runs `strata` and `postgres`, not `{other}`")),
        }
    }
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let mut results = Results::new(
        "pgbench",
        [
            ("script", json!("TPC-B-like without the history insert, BEGIN ISOLATION LEVEL REPEATABLE READ ... END")),
            ("scale", json!(args.scale)),
            ("clients", json!(args.clients)),
            ("jobs", json!(args.jobs)),
            ("duration_s", json!(args.duration)),
            ("max_tries", json!(args.max_tries)),
        ],
    );
    let mut failures = Vec::new();
    for system in &args.systems {
        let outcome = match system.as_str() {
            "strata" => {
                let server = StrataServer::start(&args.out.join("data").join("strata"))?;
                let t = Target { port: server.addr.port(), user: "strata", db: "strata" };
                let config = "strata serve, default options (WAL without fsync per commit)";
                let r = bench(args, &t, "strata", &mut results, config);
                server.stop()?;
                r
            }
            _ => run_postgres(args, &mut results),
        };
        if let Err(e) = outcome {
            eprintln!("{e}");
            failures.push(e);
        }
        let _ = std::fs::remove_dir_all(args.out.join("data"));
    }
    results.finish(&args.out)?;
    match failures.is_empty() {
        true => Ok(()),
        false => Err(failures.join("; ")),
    }
}

#[cfg(feature = "postgres")]
fn run_postgres(args: &PgbenchArgs, results: &mut Results) -> Result<(), String> {
    let cluster = crate::peers::postgres::Cluster::start(&args.out.join("data").join("postgres"))?;
    let t = Target { port: cluster.port, user: "postgres", db: "postgres" };
    let config = format!("PostgreSQL 15, {}", crate::peers::postgres::CONFIG);
    bench(args, &t, "postgres", results, &config)
}

#[cfg(not(feature = "postgres"))]
fn run_postgres(_: &PgbenchArgs, _: &mut Results) -> Result<(), String> {
    Err(crate::peers::not_built("postgres"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_is_read_from_pgbench_output() {
        let text = "transaction type: tpcb-like.sql\n\
                    number of transactions actually processed: 12345\n\
                    number of failed transactions: 3 (0.024%)\n\
                    number of transactions retried: 120 (0.972%)\n\
                    total number of retries: 150\n\
                    latency average = 5.1 ms\n\
                    tps = 1567.25 (without initial connection time)\n";
        let r = parse_report(text).unwrap_or_default();
        assert_eq!(r, Report { tps: 1567.25, processed: 12345, failed: 3, retried: 120, retries: 150 });
        assert!(parse_report("pgbench: error: connection refused").is_err());
    }

    #[test]
    fn setup_fills_every_account_once_across_chunks() {
        let sql = setup_sql(2);
        let accounts: usize = sql
            .lines()
            .filter(|l| l.starts_with("INSERT INTO pgbench_accounts"))
            .map(|l| l.matches("), (").count() + 1)
            .sum();
        assert_eq!(accounts as u64, 2 * ACCOUNTS);
        assert!(sql.contains("(200000, 2, 0, '"));
        assert!(sql.contains("(20, 2, 0, NULL)"));
        assert!(script(2).contains("random(1, 200000)"));
    }
}
