//! Runs the sqllogictest files in `tests/slt/` against strata-sql, each on a fresh database.
//!
//! `cargo test -p strata-sql --test slt [NAME]` runs the files whose name contains NAME. Each
//! `connection` a file names is a session of its own on the file's database.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Runner};
use strata_sql::{Output, Session, SqlEngine, SqlError};

/// One connection: a session of its own (`connection NAME` in a file opens another).
struct Conn(Session);

/// An error as the .slt files match it: `SQLSTATE: message`.
#[derive(Debug)]
struct SltError(SqlError);

impl std::fmt::Display for SltError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.0.kind.sqlstate(), self.0.message)
    }
}

impl std::error::Error for SltError {}

impl From<SqlError> for SltError {
    fn from(e: SqlError) -> Self {
        SltError(e)
    }
}

fn column_type(t: &DataType) -> DefaultColumnType {
    if t.is_integer() {
        DefaultColumnType::Integer
    } else if t.is_floating() || matches!(t, DataType::Decimal128(..)) {
        DefaultColumnType::FloatingPoint
    } else {
        DefaultColumnType::Text
    }
}

fn cell(a: &dyn Array, i: usize) -> Result<String, SqlError> {
    let opts = FormatOptions::default().with_null("NULL");
    let f =
        ArrayFormatter::try_new(a, &opts).map_err(|e| SqlError::new(strata_sql::ErrorKind::Internal, e.to_string()))?;
    let s = f.value(i).to_string();
    Ok(if s.is_empty() { "(empty)".into() } else { s })
}

#[async_trait]
impl AsyncDB for Conn {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let mut outputs = self.0.execute(sql).await?;
        match outputs.pop() {
            Some(Output::Rows { schema, batches }) => {
                let types = schema.fields().iter().map(|f| column_type(f.data_type())).collect();
                let mut rows = Vec::new();
                for b in &batches {
                    for i in 0..b.num_rows() {
                        rows.push(b.columns().iter().map(|a| cell(a.as_ref(), i)).collect::<Result<_, _>>()?);
                    }
                }
                Ok(DBOutput::Rows { types, rows })
            }
            Some(Output::Command { rows, .. }) => Ok(DBOutput::StatementComplete(rows)),
            None => Ok(DBOutput::StatementComplete(0)),
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "strata"
    }

    fn error_sql_state(err: &SltError) -> Option<String> {
        Some(err.0.kind.sqlstate().to_string())
    }
}

fn files(filter: Option<&str>) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "slt"));
    if let Some(f) = filter {
        files.retain(|p| p.file_name().is_some_and(|n| n.to_string_lossy().contains(f)));
    }
    files.sort();
    files
}

fn main() -> ExitCode {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let files = files(filter.as_deref());
    if files.is_empty() {
        eprintln!("no .slt files matched");
        return ExitCode::FAILURE;
    }
    let mut failed = 0;
    for file in &files {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let dir = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{name}: no temporary directory: {e}");
                return ExitCode::FAILURE;
            }
        };
        let engine = match strata::Db::open(dir.path(), strata::Options::default())
            .map_err(SqlError::from)
            .and_then(|db| SqlEngine::new(Arc::new(db)))
        {
            Ok(e) => e,
            Err(e) => {
                eprintln!("{name}: cannot open a database: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut runner = Runner::new(move || {
            let engine = engine.clone();
            async move { Ok(Conn(engine.session())) }
        });
        match rt.block_on(runner.run_file_async(file)) {
            Ok(()) => println!("slt {name} ... ok"),
            Err(e) => {
                failed += 1;
                println!("slt {name} ... FAILED\n{}", e.display(true));
            }
        }
    }
    println!("{} files, {failed} failed", files.len());
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
