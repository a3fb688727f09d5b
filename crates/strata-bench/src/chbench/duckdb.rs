//! DuckDB as a CH-benCHmark system, in the Python helper the other workloads use (see
//! `peers/duckdb.rs`): one database file, a helper connection (and DuckDB cursor) per client.
//! The population is written as tab-separated files and loaded with `COPY`; the transactions
//! run statement by statement in DuckDB transactions (its optimistic concurrency aborts the
//! loser of a write-write conflict, which runs again); the queries as sent. Each statement pays
//! the helper's round trip, stated with the figures.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::Ordering;

use serde_json::{json, Value as Json};
use strata::Value;

use super::gen::{self, Scale};
use super::schema;
use super::sql::{self, Clients, SqlConn, SqlError};
use super::tx::{Input, Outcome};
use super::ChSystem;
use crate::peers::duckdb::{Conn, Duck};

pub(crate) struct DuckSystem {
    duck: Duck,
    clients: Clients<Conn>,
    config: String,
}

fn param(v: &Value) -> Result<Json, SqlError> {
    Ok(match v {
        Value::Null => Json::Null,
        Value::Int(x) => json!(x),
        Value::BigInt(x) => json!(x),
        Value::Double(x) => json!(x),
        Value::Text(s) => json!(s),
        // DuckDB casts the text to the TIMESTAMP column it is written to.
        Value::Timestamp(t) => json!(sql::timestamp_text(*t)),
        other => return Err(SqlError::fatal(format!("duckdb: no parameter for {other:?}"))),
    })
}

fn value(j: &Json) -> Value {
    match j {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Boolean(*b),
        Json::Number(n) => match n.as_i64() {
            Some(x) => Value::BigInt(x),
            None => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::Text(s.clone()),
        other => Value::Text(other.to_string()),
    }
}

/// A helper error: a lost write-write conflict runs again.
fn sql_err(msg: String) -> SqlError {
    SqlError { retry: msg.to_lowercase().contains("conflict"), msg }
}

impl SqlConn for Conn {
    fn begin(&mut self) -> Result<(), SqlError> {
        self.call(&json!({"op": "exec", "sql": "BEGIN TRANSACTION"})).map(|_| ()).map_err(sql_err)
    }

    fn rows(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
        let params = params.iter().map(param).collect::<Result<Vec<_>, _>>()?;
        let out = self.call(&json!({"op": "exec", "sql": sql, "params": params})).map_err(sql_err)?;
        let rows = out.as_array().ok_or_else(|| SqlError::fatal("duckdb: rows expected"))?;
        Ok(rows.iter().map(|r| r.as_array().map(|r| r.iter().map(value).collect()).unwrap_or_default()).collect())
    }

    fn commit(&mut self) -> Result<(), SqlError> {
        self.call(&json!({"op": "exec", "sql": "COMMIT"})).map(|_| ()).map_err(sql_err)
    }

    fn rollback(&mut self) -> Result<(), SqlError> {
        self.call(&json!({"op": "exec", "sql": "ROLLBACK"})).map(|_| ()).map_err(sql_err)
    }
}

impl DuckSystem {
    /// Starts the helper on a new database in `dir` and loads the population; `threads` is
    /// DuckDB's thread count.
    pub fn open(dir: &Path, warehouses: i32, scale: &Scale, seed: u64, threads: usize) -> Result<DuckSystem, String> {
        let duck = Duck::start(dir, threads)?;
        for t in schema::TABLES {
            duck.exec(&t.create_sql(), vec![])?;
        }
        let files = dir.join("load");
        std::fs::create_dir_all(&files).map_err(|e| format!("duckdb: {e}"))?;
        crate::harness::Progress::around("duckdb: load", scale.rows(warehouses), |done| {
            // Every table's rows as one tab-separated file, then one COPY each.
            let mut out: HashMap<&'static str, BufWriter<std::fs::File>> = HashMap::new();
            let mut line = Vec::new();
            let mut emit = |t: &'static schema::TableSpec, row: Vec<Value>| -> Result<(), String> {
                done.fetch_add(1, Ordering::Relaxed);
                let w = match out.entry(t.name) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        let f = std::fs::File::create(files.join(format!("{}.tsv", t.name)))
                            .map_err(|e| format!("duckdb: {e}"))?;
                        e.insert(BufWriter::with_capacity(1 << 20, f))
                    }
                };
                line.clear();
                sql::tsv_line(&row, &mut line)?;
                w.write_all(&line).map_err(|e| format!("duckdb: {e}"))
            };
            gen::fixed_tables(seed, scale, &mut emit)?;
            for w in 1..=warehouses {
                gen::warehouse(seed, w, scale, &mut emit)?;
            }
            for (name, mut w) in out {
                w.flush().map_err(|e| format!("duckdb: {e}"))?;
                let path = files.join(format!("{name}.tsv"));
                duck.exec(
                    &format!(
                        "COPY {name} FROM '{}' (DELIMITER '\t', NULL '\\N', HEADER false, QUOTE '')",
                        // A quote in the path is doubled, as SQL's string literals ask.
                        path.display().to_string().replace('\'', "''")
                    ),
                    vec![],
                )?;
            }
            for index in sql::INDEXES {
                duck.exec(index, vec![])?;
            }
            duck.exec("CHECKPOINT", vec![])?;
            Ok(())
        })?;
        let _ = std::fs::remove_dir_all(&files);
        let config = format!("{}, indexes on customer names and orders by customer", duck.config(threads));
        Ok(DuckSystem { duck, clients: Clients::new(Vec::new()), config })
    }

    pub fn config(&self) -> &str {
        &self.config
    }
}

impl ChSystem for DuckSystem {
    fn transaction(&self, input: &Input) -> Result<Outcome, String> {
        self.clients.transaction("duckdb", || self.duck.connect(), input)
    }

    fn query(&self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        self.clients.with(
            || self.duck.connect(),
            |c| {
                let out = c.call(&json!({"op": "text", "sql": sql}))?;
                let rows = out.as_array().ok_or("duckdb: rows expected")?;
                Ok(rows
                    .iter()
                    .map(|r| {
                        r.as_array()
                            .map(|r| r.iter().map(|v| v.as_str().unwrap_or_default().to_owned()).collect())
                            .unwrap_or_default()
                    })
                    .collect())
            },
        )
    }
}
