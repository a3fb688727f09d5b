//! The project's sqllogictest files (`crates/strata-sql/tests/slt`) through sqllogictest's
//! runner against the server, once over the simple protocol (text results, printed as the
//! server wrote them) and once over the extended protocol (each statement prepared, its results
//! in binary, decoded by the types the server announced with tokio-postgres's own decoders and
//! printed as sqllogictest's `postgres-extended` engine prints them). Each protocol runs every
//! file on a fresh server of its own, and every statement and query must give the same result
//! in both: the same rows, row counts and errors.
//!
//! (The files' own expected results are checked in-process by strata-sql's `slt` test; these
//! connections print values the PostgreSQL way, booleans as `t`/`f` for instance.)
//!
//! The connections are written here rather than taken from the sqllogictest-engines crate: that
//! crate also brings a MySQL client whose features (C zlib, tokio's `process`, ...) differ from
//! the rest of the build, so the Python package's build in `.ci/run` compiled DataFusion a second
//! time and CI went past 40 minutes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chrono::{NaiveDate, NaiveDateTime};
use futures::{pin_mut, TryStreamExt};
use rust_decimal::Decimal;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, RecordOutput, Runner};
use tokio_postgres::types::{FromSqlOwned, ToSql, Type};
use tokio_postgres::{Client, NoTls, Row, SimpleQueryMessage};

use super::start;

/// An error of either protocol: the server's, or a result column of a type not printed here.
#[derive(Debug)]
enum PgError {
    Server(tokio_postgres::Error),
    Type(String),
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // As strata-sql's own slt runner prints errors, so the files' patterns match both.
            PgError::Server(e) => match e.as_db_error() {
                Some(db) => write!(f, "{}: {}", db.code().code(), db.message()),
                None => write!(f, "{e}"),
            },
            PgError::Type(t) => write!(f, "no printer for result type {t}"),
        }
    }
}

impl std::error::Error for PgError {}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> Self {
        PgError::Server(e)
    }
}

/// One connection to the server, speaking one protocol.
struct Pg {
    client: Client,
    extended: bool,
}

impl Pg {
    async fn connect(addr: SocketAddr, extended: bool) -> Result<Pg, PgError> {
        let (client, connection) = tokio_postgres::connect(
            &format!("host={} port={} user=strata dbname=strata", addr.ip(), addr.port()),
            NoTls,
        )
        .await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Pg { client, extended })
    }

    async fn simple(&self, sql: &str) -> Result<DBOutput<DefaultColumnType>, PgError> {
        let mut rows = Vec::new();
        let mut count = 0;
        for message in self.client.simple_query(sql).await? {
            match message {
                SimpleQueryMessage::Row(row) => rows.push(
                    (0..row.len())
                        .map(|i| match row.get(i) {
                            None => "NULL".to_string(),
                            Some("") => "(empty)".to_string(),
                            Some(v) => v.to_string(),
                        })
                        .collect(),
                ),
                SimpleQueryMessage::CommandComplete(n) => count = n,
                _ => {}
            }
        }
        Ok(output(rows, count))
    }

    async fn extended(&self, sql: &str) -> Result<DBOutput<DefaultColumnType>, PgError> {
        let statement = self.client.prepare(sql).await?;
        let stream = self.client.query_raw(&statement, std::iter::empty::<&(dyn ToSql + Sync)>()).await?;
        pin_mut!(stream);
        let mut rows = Vec::new();
        while let Some(row) = stream.try_next().await? {
            rows.push((0..row.len()).map(|i| print(&row, i)).collect::<Result<Vec<_>, _>>()?);
        }
        Ok(output(rows, stream.rows_affected().unwrap_or(0)))
    }
}

fn output(rows: Vec<Vec<String>>, count: u64) -> DBOutput<DefaultColumnType> {
    if rows.is_empty() && count > 0 {
        DBOutput::StatementComplete(count)
    } else if rows.is_empty() {
        DBOutput::StatementComplete(0)
    } else {
        let types = vec![DefaultColumnType::Any; rows[0].len()];
        DBOutput::Rows { types, rows }
    }
}

fn float_text(v: f64, shortest: String) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        shortest
    }
}

/// A timestamp as PostgreSQL prints it: the fraction without its trailing zeros.
fn timestamp_text(v: NaiveDateTime) -> String {
    let mut s = v.format("%Y-%m-%d %H:%M:%S").to_string();
    let micros = v.and_utc().timestamp_subsec_micros();
    if micros != 0 {
        s.push_str(format!(".{micros:06}").trim_end_matches('0'));
    }
    s
}

/// Column `i` of a binary row, decoded as its announced type and printed.
fn print(row: &Row, i: usize) -> Result<String, PgError> {
    fn get<T: FromSqlOwned>(row: &Row, i: usize, show: impl Fn(T) -> String) -> Result<String, PgError> {
        Ok(match row.try_get::<_, Option<T>>(i)? {
            None => "NULL".into(),
            Some(v) => show(v),
        })
    }
    let ty = row.columns()[i].type_().clone();
    match ty {
        Type::INT2 => get(row, i, |v: i16| v.to_string()),
        Type::INT4 => get(row, i, |v: i32| v.to_string()),
        Type::INT8 => get(row, i, |v: i64| v.to_string()),
        Type::FLOAT4 => get(row, i, |v: f32| float_text(f64::from(v), v.to_string())),
        Type::FLOAT8 => get(row, i, |v: f64| float_text(v, v.to_string())),
        Type::BOOL => get(row, i, |v: bool| if v { "t" } else { "f" }.to_string()),
        Type::TEXT | Type::VARCHAR => get(row, i, |v: String| if v.is_empty() { "(empty)".into() } else { v }),
        Type::BYTEA => {
            get(row, i, |v: Vec<u8>| format!("\\x{}", v.iter().map(|b| format!("{b:02x}")).collect::<String>()))
        }
        Type::DATE => get(row, i, |v: NaiveDate| v.to_string()),
        Type::TIMESTAMP => get(row, i, |v: NaiveDateTime| timestamp_text(v)),
        Type::TIMESTAMPTZ => {
            get(row, i, |v: chrono::DateTime<chrono::Utc>| format!("{}+00", timestamp_text(v.naive_utc())))
        }
        Type::NUMERIC => get(row, i, |v: Decimal| v.to_string()),
        other => Err(PgError::Type(other.to_string())),
    }
}

#[async_trait]
impl AsyncDB for Pg {
    type Error = PgError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, PgError> {
        if self.extended {
            self.extended(sql).await
        } else {
            self.simple(sql).await
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        if self.extended {
            "postgres-extended"
        } else {
            "postgres"
        }
    }

    fn error_sql_state(err: &PgError) -> Option<String> {
        match err {
            PgError::Server(e) => e.code().map(|c| c.code().to_string()),
            PgError::Type(_) => None,
        }
    }
}

/// A record's result, comparable across protocols: rows (sorted: order is the query's business,
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
        let mut simple = Runner::new(move || Pg::connect(a, false));
        let mut extended = Runner::new(move || Pg::connect(b, true));
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

/// The transaction files, whose records run on several connections, hold through the server
/// with their expected results (row counts, rows and SQLSTATEs), in each protocol.
#[test]
fn transaction_files_hold_through_the_server_in_both_protocols() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let files: Vec<PathBuf> = slt_files()
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "txn.slt" || n == "hermitage.slt"))
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for file in &files {
        for extended in [false, true] {
            let server = start(|_| {});
            let addr = server.addr;
            let mut runner = Runner::new(move || Pg::connect(addr, extended));
            if let Err(e) = rt.block_on(runner.run_file_async(file)) {
                panic!("{} ({}): {}", file.display(), if extended { "extended" } else { "simple" }, e.display(false));
            }
            rt.block_on(runner.shutdown_async());
        }
    }
}
