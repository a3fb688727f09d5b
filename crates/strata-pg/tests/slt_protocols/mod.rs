//! The project's sqllogictest files (`crates/strata-sql/tests/slt`) through the standard
//! runner's PostgreSQL engines, the ones `sqllogictest -e postgres` and `-e postgres-extended`
//! use: the simple protocol (text results) and the extended protocol (prepared statements,
//! binary results decoded by the announced types). Each engine runs every file on a fresh
//! server of its own, and every statement and query must give the same result in both:
//! the same rows, row counts and errors.
//!
//! (The files' own expected results are checked in-process by strata-sql's `slt` test; these
//! engines print values their own way, booleans as `t`/`f` for instance.)

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use sqllogictest::{DefaultColumnType, RecordOutput, Runner};
use sqllogictest_engines::postgres::{PostgresConfig, PostgresExtended, PostgresSimple};

use super::start;

fn config(addr: SocketAddr) -> PostgresConfig {
    let mut c = PostgresConfig::new();
    c.host(addr.ip().to_string()).port(addr.port()).user("strata").dbname("strata");
    c
}

/// A record's result, comparable across engines: rows (sorted: order is the query's business,
/// not the protocol's), a row count, or an error.
fn outcome(out: RecordOutput<DefaultColumnType>) -> Option<String> {
    match out {
        RecordOutput::Query { error: Some(e), .. } | RecordOutput::Statement { error: Some(e), .. } => {
            Some(format!("error: {e}"))
        }
        RecordOutput::Query { mut rows, .. } => {
            rows.sort();
            Some(format!("rows: {rows:?}"))
        }
        RecordOutput::Statement { count, .. } => Some(format!("ok: {count}")),
        _ => None,
    }
}

fn slt_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../strata-sql/tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    files
}

#[test]
fn slt_files_give_the_same_results_in_the_extended_protocol_as_in_the_simple_one() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let files = slt_files();
    assert!(files.len() >= 8, "found only {files:?}");
    let mut compared = 0;
    let mut differences = Vec::new();
    for file in &files {
        let records = sqllogictest::parse_file::<DefaultColumnType>(file).unwrap();
        let (simple_server, extended_server) = (start(|_| {}), start(|_| {}));
        let (a, b) = (simple_server.addr, extended_server.addr);
        let mut simple = Runner::new(move || PostgresSimple::connect(config(a)));
        let mut extended = Runner::new(move || PostgresExtended::connect(config(b)));
        for record in records {
            let location = format!("{record}").lines().next().unwrap_or_default().to_string();
            let s = outcome(rt.block_on(simple.apply_record(record.clone())));
            let e = outcome(rt.block_on(extended.apply_record(record)));
            if s.is_some() {
                compared += 1;
            }
            if s != e {
                differences.push(format!("{}: {location}\n  simple:   {s:?}\n  extended: {e:?}", file.display()));
            }
        }
        rt.block_on(simple.shutdown_async());
        rt.block_on(extended.shutdown_async());
    }
    println!("{compared} records of {} files compared", files.len());
    assert!(compared > 100, "only {compared} records compared");
    assert!(differences.is_empty(), "{} records differ:\n{}", differences.len(), differences.join("\n"));
}
