//! Runs sqllogictest files (SQLite's corpus: `select1.test` ... and the `random/` and `index/`
//! files) through `strata serve`, record by record, and counts what passes.
//!
//! sqllogictest's own CLI stops a file at its first failing record, which says nothing about the
//! share of records that pass. This tool uses the same runner library and the same PostgreSQL
//! engines (`sqllogictest-engines`, simple or extended protocol) but runs every record, and
//! prints one line per file and a summary. Each file gets a fresh server over an empty database.
//! Every failure is written to `--failures` (one block per record) for sorting by cause.
//!
//! Usage: `slt-corpus --strata target/release/strata --protocol simple --label postgresql
//! --failures /tmp/fail.txt FILE...`

use std::error::Error;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use sqllogictest::{default_validator, Normalizer, Record, RecordOutput, Runner, TestErrorKind};
use sqllogictest_engines::postgres::{Extended, Postgres, PostgresConfig, Simple};

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq)]
enum Protocol {
    Simple,
    Extended,
}

#[derive(Parser, Debug)]
struct Opt {
    /// The strata binary (`cargo build --release -p strata-cli`).
    #[clap(long, default_value = "target/release/strata")]
    strata: PathBuf,
    /// The protocol the runner speaks.
    #[clap(long, value_enum, default_value = "simple")]
    protocol: Protocol,
    /// Labels for `skipif`/`onlyif` (the engine's name is one already).
    #[clap(long = "label")]
    labels: Vec<String>,
    /// Where to write every failing record.
    #[clap(long)]
    failures: Option<PathBuf>,
    /// Results of more values than this are compared by their hash, as the corpus was written
    /// (files may set their own with `hash-threshold`).
    #[clap(long, default_value = "8")]
    hash_threshold: usize,
    /// The port the servers listen on (one at a time).
    #[clap(long, default_value = "54329")]
    port: u16,
    files: Vec<PathBuf>,
}

/// Counts of one file or of the whole run.
#[derive(Default, Clone, Copy)]
struct Count {
    passed: u64,
    failed: u64,
    skipped: u64,
}

impl Count {
    fn add(&mut self, other: Count) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
    }
    fn ran(&self) -> u64 {
        self.passed + self.failed
    }
    fn percent(&self) -> f64 {
        if self.ran() == 0 {
            100.0
        } else {
            100.0 * self.passed as f64 / self.ran() as f64
        }
    }
}

/// A `strata serve` over a temporary database, killed when dropped.
struct Server {
    child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(strata: &Path, port: u16) -> Result<Server, String> {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Err(format!("port {port} is taken (a server left from an earlier run?)"));
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let child = tokio::process::Command::new(strata)
            .arg("serve")
            .arg("--db")
            .arg(dir.path().join("db"))
            .arg("--pg")
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", strata.display()))?;
        let begin = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            if begin.elapsed() > Duration::from_secs(30) {
                return Err("the server did not start listening in 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Server { child, _dir: dir })
    }
}

impl Server {
    /// Kills the server and waits for it to exit, so the next one can take its port.
    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// `text` with the comments after `skipif`/`onlyif` conditions taken off (`onlyif mysql # DIV
/// for integer division`): SQLite's runner allows them, sqllogictest-rs's parser does not.
fn without_condition_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let condition = line.starts_with("skipif ") || line.starts_with("onlyif ");
        match line.find(" #") {
            Some(at) if condition => out.push_str(line[..at].trim_end()),
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// sqllogictest-rs's comparison (a row per line) or SQLite's (a value per line, as the corpus is
/// written): results match if either does.
fn row_or_value_wise(normalizer: Normalizer, actual: &[Vec<String>], expected: &[String]) -> bool {
    if default_validator(normalizer, actual, expected) {
        return true;
    }
    let values = actual.iter().flatten();
    values.clone().count() == expected.len() && values.zip(expected).all(|(a, e)| normalizer(a) == normalizer(e))
}

/// The server's own message for a failed statement (the engines' errors print as "db error").
fn cause(kind: &TestErrorKind) -> String {
    let err = match kind {
        TestErrorKind::Fail { err, .. } | TestErrorKind::ErrorMismatch { err, .. } => err,
        _ => return String::new(),
    };
    let mut out = String::new();
    let mut source = err.source();
    while let Some(s) = source {
        out.push_str(&format!("\n[cause] {s}"));
        source = s.source();
    }
    out
}

fn config(port: u16) -> PostgresConfig {
    let mut config = PostgresConfig::new();
    config.host("127.0.0.1").port(port).user("strata").dbname("strata");
    config
}

async fn run_file(opt: &Opt, file: &Path, failures: &mut Option<std::fs::File>) -> Result<Count, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let records = sqllogictest::parse_with_name(&without_condition_comments(&text), file.display().to_string())
        .map_err(|e| format!("parse: {e}"))?;
    let server = Server::start(&opt.strata, opt.port).await?;
    let mut count = Count::default();
    let port = opt.port;
    macro_rules! run_records {
        ($runner:expr) => {{
            let mut runner = $runner;
            runner.with_hash_threshold(opt.hash_threshold);
            runner.with_validator(row_or_value_wise);
            for label in &opt.labels {
                runner.add_label(label);
            }
            for record in records {
                let is_test = matches!(record, Record::Statement { .. } | Record::Query { .. });
                let loc = match &record {
                    Record::Statement { loc, .. } | Record::Query { loc, .. } => loc.to_string(),
                    _ => String::new(),
                };
                if let Record::Halt { .. } = record {
                    break;
                }
                match runner.run_async(record).await {
                    Ok(RecordOutput::Nothing) if is_test => count.skipped += 1,
                    Ok(_) if is_test => count.passed += 1,
                    Ok(_) => {}
                    Err(e) => {
                        count.failed += 1;
                        if let Some(f) = failures.as_mut() {
                            let _ = writeln!(f, "=== {loc}\n{}{}\n", e.display(false), cause(&e.kind()));
                        }
                    }
                }
            }
            runner.shutdown_async().await;
        }};
    }
    match opt.protocol {
        Protocol::Simple => {
            run_records!(Runner::new(move || Postgres::<Simple>::connect(config(port))))
        }
        Protocol::Extended => {
            run_records!(Runner::new(move || Postgres::<Extended>::connect(config(port))))
        }
    }
    server.stop().await;
    Ok(count)
}

#[tokio::main]
async fn main() {
    let opt = Opt::parse();
    let mut failures = opt.failures.as_ref().map(|p| match std::fs::File::create(p) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{}: {e}", p.display());
            std::process::exit(2);
        }
    });
    let mut total = Count::default();
    let mut broken = 0;
    let begin = Instant::now();
    for file in &opt.files {
        let started = Instant::now();
        match run_file(&opt, file, &mut failures).await {
            Ok(count) => {
                println!(
                    "{:<60} {:>7} passed {:>6} failed {:>6} skipped {:>8.3}% {:>6.1} s",
                    file.display(),
                    count.passed,
                    count.failed,
                    count.skipped,
                    count.percent(),
                    started.elapsed().as_secs_f64()
                );
                total.add(count);
            }
            Err(e) => {
                broken += 1;
                println!("{:<60} not run: {e}", file.display());
            }
        }
    }
    println!(
        "total: {} records ran, {} passed, {} failed ({:.3}% passed), {} skipped by condition, {} files not run, {:.0} s",
        total.ran(),
        total.passed,
        total.failed,
        total.percent(),
        total.skipped,
        broken,
        begin.elapsed().as_secs_f64()
    );
    if total.failed > 0 || broken > 0 {
        std::process::exit(1);
    }
}
