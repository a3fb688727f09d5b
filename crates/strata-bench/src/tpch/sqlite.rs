//! TPC-H on SQLite (bundled through rusqlite): the same generated rows as strata's, each table
//! with its primary key and no other index (as in strata), dates as ISO text, money as REAL.
//! SQLite runs a query on one thread and builds the indexes a join needs on the fly (automatic
//! indexes).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::Connection;
use strata::{ColumnType, Value};

use super::load::{generate, TABLES};
use super::{sqlite_dialect, QueryRun, TpchArgs};
use crate::harness::Progress;

fn err(e: rusqlite::Error) -> String {
    format!("sqlite: {e}")
}

fn sql_type(ty: ColumnType) -> &'static str {
    match ty {
        ColumnType::Double | ColumnType::Real => "REAL",
        ColumnType::Text | ColumnType::Date | ColumnType::Timestamp | ColumnType::TimestampTz => "TEXT",
        _ => "INTEGER",
    }
}

fn to_sql(v: Value) -> SqlValue {
    match v {
        Value::Null => SqlValue::Null,
        Value::BigInt(x) => SqlValue::Integer(x),
        Value::Int(x) => SqlValue::Integer(x.into()),
        Value::SmallInt(x) => SqlValue::Integer(x.into()),
        Value::TinyInt(x) => SqlValue::Integer(x.into()),
        Value::Boolean(x) => SqlValue::Integer(x.into()),
        Value::Double(x) => SqlValue::Real(x),
        Value::Real(x) => SqlValue::Real(x.into()),
        Value::Text(s) => SqlValue::Text(s),
        Value::Bytea(b) => SqlValue::Blob(b),
        Value::Date(d) => SqlValue::Text(strata::types::format_date(d)),
        Value::Timestamp(t) => SqlValue::Text(strata::types::format_timestamp(t)),
        Value::TimestampTz(t) => SqlValue::Text(strata::types::format_timestamptz(t)),
    }
}

fn text(v: ValueRef<'_>) -> String {
    match v {
        // As the reference answers write NULL.
        ValueRef::Null => String::new(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Blob(b) => format!("{b:?}"),
    }
}

/// Loads the tables into a new SQLite database in `dir` and runs the queries; returns the
/// configuration, the load's seconds and the runs.
pub(super) fn run(
    a: &TpchArgs,
    dir: &Path,
    queries: &[(u32, String)],
) -> Result<(String, f64, BTreeMap<u32, QueryRun>), String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("sqlite: {e}"))?;
    let conn = Connection::open(dir.join("tpch.db")).map_err(err)?;
    conn.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
    conn.pragma_update(None, "synchronous", "NORMAL").map_err(err)?;
    // A 1 GiB page cache, and temporary indexes and sorts in memory.
    conn.pragma_update(None, "cache_size", -(1 << 20)).map_err(err)?;
    conn.pragma_update(None, "temp_store", "MEMORY").map_err(err)?;
    for t in &TABLES {
        let schema = t.strata_schema()?;
        let cols: Vec<String> =
            schema.columns().iter().map(|c| format!("{} {} NOT NULL", c.name, sql_type(c.ty))).collect();
        conn.execute(&format!("CREATE TABLE {} ({}, PRIMARY KEY ({}))", t.name, cols.join(", "), t.key.join(", ")), [])
            .map_err(err)?;
    }

    let total: u64 = TABLES.iter().map(|t| t.rows(a.sf)).sum();
    let progress = Progress::new("sqlite: load", total);
    let done = AtomicU64::new(0);
    let t0 = Instant::now();
    // SQLite has one writer: the generator threads hand their rows to it in turn.
    let conn = Mutex::new(conn);
    generate(a.sf, a.threads, &done, &|t, rows| {
        let c = conn.lock();
        let marks: Vec<String> = (1..=rows.first().map_or(0, Vec::len)).map(|i| format!("?{i}")).collect();
        let tx = c.unchecked_transaction().map_err(err)?;
        {
            let mut st =
                tx.prepare_cached(&format!("INSERT INTO {} VALUES ({})", t.name, marks.join(", "))).map_err(err)?;
            for row in rows {
                st.execute(rusqlite::params_from_iter(row.into_iter().map(to_sql))).map_err(err)?;
            }
        }
        tx.commit().map_err(err)?;
        progress.set(done.load(std::sync::atomic::Ordering::Relaxed));
        Ok(())
    })?;
    let conn = conn.into_inner();
    conn.execute_batch("ANALYZE").map_err(err)?;
    progress.finish();
    let load_s = t0.elapsed().as_secs_f64();
    eprintln!("sqlite: loaded in {load_s:.1} s");

    let mut runs = BTreeMap::new();
    for (n, q) in queries {
        let q = sqlite_dialect(q);
        let mut run = QueryRun::default();
        for i in 0..a.sqlite_runs {
            // A watchdog interrupts the query at the deadline unless told it has ended.
            let (ended, watch) = std::sync::mpsc::channel::<()>();
            let interrupt = conn.get_interrupt_handle();
            let timeout = Duration::from_secs(a.sqlite_timeout);
            let watchdog = std::thread::spawn(move || {
                if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = watch.recv_timeout(timeout) {
                    interrupt.interrupt();
                }
            });
            let t = Instant::now();
            let result = (|| -> rusqlite::Result<Vec<Vec<String>>> {
                let mut st = conn.prepare(&q)?;
                let width = st.column_count();
                let mut rows = st.query([])?;
                let mut out = Vec::new();
                while let Some(r) = rows.next()? {
                    out.push((0..width).map(|c| r.get_ref(c).map(text)).collect::<rusqlite::Result<_>>()?);
                }
                Ok(out)
            })();
            let elapsed = t.elapsed();
            let _ = ended.send(());
            let _ = watchdog.join();
            match result {
                Ok(rows) => {
                    run.times.push(elapsed.as_secs_f64() * 1000.0);
                    if i == 0 {
                        run.rows = rows;
                    }
                }
                Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::OperationInterrupted => {
                    run.error = Some(format!("timed out after {} s", a.sqlite_timeout));
                    run.times.clear();
                    break;
                }
                Err(e) => {
                    run.error = Some(err(e));
                    run.times.clear();
                    break;
                }
            }
        }
        run.log("sqlite", *n);
        runs.insert(*n, run);
    }
    let version = rusqlite::version();
    let config = format!("SQLite {version}, one thread, primary keys only, 1 GiB page cache, REAL money, TEXT dates");
    Ok((config, load_s, runs))
}
