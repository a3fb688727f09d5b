//! SQLite (bundled through `rusqlite`) as a CH-benCHmark system: one database file in WAL mode
//! with `synchronous=NORMAL`, a connection per client, each transaction under `BEGIN IMMEDIATE`
//! (SQLite's one writer at a time: a second waits for the first, so nothing is lost to
//! conflicts), the queries in read transactions beside the writer. Timestamps are ISO text,
//! which compares as the times do; `LIKE` is made case-sensitive, as it is elsewhere.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use rusqlite::types::{Value as Lite, ValueRef};
use rusqlite::{Connection, ErrorCode};
use strata::Value;

use super::gen::{self, Scale};
use super::schema;
use super::sql::{self, Clients, SqlConn, SqlError};
use super::tx::{Input, Outcome};
use super::ChSystem;

pub(crate) const CONFIG: &str =
    "WAL, synchronous=NORMAL, 64 MiB page cache per connection, BEGIN IMMEDIATE, indexes on customer names and \
     orders by customer";

fn err(e: rusqlite::Error) -> String {
    format!("sqlite: {e}")
}

/// Whether `e` is a busy or locked database: the transaction runs again.
fn sql_err(e: rusqlite::Error) -> SqlError {
    let retry = matches!(e.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked));
    SqlError { retry, msg: err(e) }
}

/// `sql` in SQLite's dialect: timestamp literals as text, the year through `strftime`, `ascii`
/// as `unicode`.
pub(crate) fn dialect(sql: &str) -> String {
    let out = sql.replace("TIMESTAMP '", "'").replace("ascii(", "unicode(");
    crate::tpch::rewrite_calls(&out, "extract(year FROM ", |arg| format!("CAST(strftime('%Y', {arg}) AS INTEGER)"))
}

fn lite(v: &Value) -> Result<Lite, String> {
    Ok(match v {
        Value::Null => Lite::Null,
        Value::Int(x) => Lite::Integer(i64::from(*x)),
        Value::BigInt(x) => Lite::Integer(*x),
        Value::Double(x) => Lite::Real(*x),
        Value::Text(s) => Lite::Text(s.clone()),
        Value::Timestamp(t) => Lite::Text(sql::timestamp_text(*t)),
        other => return Err(format!("sqlite: no value for {other:?}")),
    })
}

fn value(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(x) => Value::BigInt(x),
        ValueRef::Real(x) => Value::Double(x),
        ValueRef::Text(t) | ValueRef::Blob(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
    }
}

fn text(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Null => String::new(),
        ValueRef::Integer(x) => x.to_string(),
        ValueRef::Real(x) => x.to_string(),
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned(),
    }
}

pub(crate) struct SqliteSystem {
    path: PathBuf,
    clients: Clients<Conn>,
}

/// A connection: `rusqlite` keeps its prepared statements.
pub(crate) struct Conn(Connection);

impl Conn {
    fn open(path: &Path) -> Result<Conn, String> {
        let c = Connection::open(path).map_err(err)?;
        c.pragma_update(None, "synchronous", "NORMAL").map_err(err)?;
        c.pragma_update(None, "cache_size", -65536).map_err(err)?;
        c.pragma_update(None, "case_sensitive_like", true).map_err(err)?;
        c.busy_timeout(std::time::Duration::from_secs(60)).map_err(err)?;
        c.set_prepared_statement_cache_capacity(64);
        Ok(Conn(c))
    }
}

impl SqliteSystem {
    /// Makes a new database in `dir` (removing what was there) and loads the population.
    pub fn open(dir: &Path, warehouses: i32, scale: &Scale, seed: u64) -> Result<SqliteSystem, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("sqlite: {e}"))?;
        let path = dir.join("chbench.db");
        let mut conn = Conn::open(&path)?;
        conn.0.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
        for t in schema::TABLES {
            conn.0.execute(&t.create_sql(), []).map_err(err)?;
        }
        crate::harness::Progress::around("sqlite: load", scale.rows(warehouses), |done| {
            let tx = conn.0.transaction().map_err(err)?;
            let mut emit = |t: &'static schema::TableSpec, row: Vec<Value>| -> Result<(), String> {
                done.fetch_add(1, Ordering::Relaxed);
                let marks: Vec<String> = (1..=row.len()).map(|i| format!("?{i}")).collect();
                let sql = format!("INSERT INTO {} VALUES ({})", t.name, marks.join(", "));
                let mut st = tx.prepare_cached(&sql).map_err(err)?;
                let values = row.iter().map(lite).collect::<Result<Vec<_>, _>>()?;
                st.execute(rusqlite::params_from_iter(values)).map_err(err)?;
                Ok(())
            };
            gen::fixed_tables(seed, scale, &mut emit)?;
            for w in 1..=warehouses {
                gen::warehouse(seed, w, scale, &mut emit)?;
            }
            tx.commit().map_err(err)?;
            for index in sql::INDEXES {
                conn.0.execute(index, []).map_err(err)?;
            }
            conn.0.execute_batch("ANALYZE").map_err(err)?;
            Ok(done.load(Ordering::Relaxed))
        })?;
        Ok(SqliteSystem { path, clients: Clients::new(vec![conn]) })
    }
}

impl SqlConn for Conn {
    fn begin(&mut self) -> Result<(), SqlError> {
        self.0.execute_batch("BEGIN IMMEDIATE").map_err(sql_err)
    }

    fn rows(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
        // `$n` is a named parameter to SQLite; `?n` is the n-th.
        let mut st = self.0.prepare_cached(&sql.replace('$', "?")).map_err(sql_err)?;
        let values = params.iter().map(lite).collect::<Result<Vec<_>, _>>().map_err(SqlError::fatal)?;
        let n = st.column_count();
        let mut rows = st.query(rusqlite::params_from_iter(values)).map_err(sql_err)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(sql_err)? {
            out.push((0..n).map(|i| r.get_ref(i).map(value)).collect::<Result<Vec<_>, _>>().map_err(sql_err)?);
        }
        Ok(out)
    }

    fn commit(&mut self) -> Result<(), SqlError> {
        self.0.execute_batch("COMMIT").map_err(sql_err)
    }

    fn rollback(&mut self) -> Result<(), SqlError> {
        if self.0.is_autocommit() {
            return Ok(());
        }
        self.0.execute_batch("ROLLBACK").map_err(sql_err)
    }
}

impl ChSystem for SqliteSystem {
    fn transaction(&self, input: &Input) -> Result<Outcome, String> {
        self.clients.transaction("sqlite", || Conn::open(&self.path), input)
    }

    fn query(&self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        self.clients.with(
            || Conn::open(&self.path),
            |c| {
                let mut st = c.0.prepare(&dialect(sql)).map_err(err)?;
                let n = st.column_count();
                let mut rows = st.query([]).map_err(err)?;
                let mut out = Vec::new();
                while let Some(r) = rows.next().map_err(err)? {
                    out.push((0..n).map(|i| r.get_ref(i).map(text)).collect::<Result<Vec<_>, _>>().map_err(err)?);
                }
                Ok(out)
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queries_in_sqlite_dialect_keep_no_timestamp_literal_extract_or_ascii() {
        assert_eq!(
            dialect(
                "SELECT extract(year FROM o_entry_d), ascii(substr(c_state, 1, 1)) WHERE x > TIMESTAMP '2025-01-01'"
            ),
            "SELECT CAST(strftime('%Y', o_entry_d) AS INTEGER), unicode(substr(c_state, 1, 1)) WHERE x > '2025-01-01'"
        );
        for (n, q) in super::super::queries() {
            let s = dialect(&q);
            assert!(!s.contains("TIMESTAMP '") && !s.contains("extract(") && !s.contains("ascii("), "Q{n}: {s}");
        }
    }
}
