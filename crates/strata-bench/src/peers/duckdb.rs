//! DuckDB 1.5.5 from its PyPI wheel, served by a small Python helper (`duckdb_peer.py`, embedded
//! here and written next to the database) over a Unix socket: one DuckDB database file, one
//! cursor per client connection, JSON lines in both directions.
//!
//! Why the wheel and not the `duckdb` crate: the crate's bundled build compiles DuckDB from C++,
//! which on this 2-core machine took far longer than the rest of the harness together (see
//! docs/benchmarks.md for the measurement), while the wheel installs in seconds, offline, at
//! the version the project names. The price is a round trip through the socket and the helper's
//! JSON handling on every operation; the harness measures that round trip when it starts the
//! helper and states it next to DuckDB's figures, so point-operation latencies can be read with
//! it in mind. Scans are unaffected: the helper materializes a query's whole result as an Arrow
//! table inside the helper and sends back only its row count and key sum.
//!
//! The Python is [`super::python`].

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::{json, Value as Json};
use strata::Value;

use super::Pool;
use crate::tables::{sql, Answer, Kind, Output, Query, TableDef, Tables, Txn};
use crate::ycsb::Store;

const HELPER: &str = include_str!("duckdb_peer.py");

/// One client connection to the helper.
pub(crate) struct Conn {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Conn {
    fn connect(path: &Path) -> Result<Conn, String> {
        let s = UnixStream::connect(path).map_err(|e| format!("duckdb: cannot reach the helper: {e}"))?;
        let writer = s.try_clone().map_err(|e| format!("duckdb: {e}"))?;
        Ok(Conn { reader: BufReader::new(s), writer })
    }

    pub(crate) fn call(&mut self, req: &Json) -> Result<Json, String> {
        let mut line = req.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).map_err(|e| format!("duckdb: helper gone: {e}"))?;
        let mut reply = String::new();
        self.reader.read_line(&mut reply).map_err(|e| format!("duckdb: helper gone: {e}"))?;
        let mut reply: Json = serde_json::from_str(&reply).map_err(|e| format!("duckdb: bad reply {reply:?}: {e}"))?;
        if let Some(e) = reply.get("error") {
            return Err(format!("duckdb: {}", e.as_str().unwrap_or("error")));
        }
        Ok(reply.get_mut("ok").map(Json::take).unwrap_or(Json::Null))
    }
}

/// The helper process and its connections; the process is stopped on drop.
pub(crate) struct Duck {
    child: Child,
    socket: PathBuf,
    /// The first connection: when it closes, the helper exits.
    _control: Conn,
    pool: Pool<Conn>,
    /// Median round trip of an empty request, in microseconds.
    round_trip_us: f64,
    version: String,
}

impl Drop for Duck {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Duck {
    /// Starts the helper on a fresh database in `dir`; `threads` is DuckDB's thread count.
    pub(crate) fn start(dir: &Path, threads: usize) -> Result<Duck, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("duckdb: {e}"))?;
        let script = dir.join("duckdb_peer.py");
        std::fs::write(&script, HELPER).map_err(|e| format!("duckdb: {e}"))?;
        // Socket paths are limited to about 100 bytes, so the socket goes in the temp directory.
        let socket = std::env::temp_dir().join(format!("strata-bench-duckdb-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let py = super::python();
        let mut child = Command::new(&py)
            .arg(&script)
            .arg(dir.join("bench.duckdb"))
            .arg(&socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("duckdb: cannot run {}: {e}", py.display()))?;
        let mut ready = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut ready);
        }
        if ready.trim() != "ready" {
            let _ = child.kill();
            return Err(format!(
                "duckdb: the helper did not start with {} (run scripts/install-peers.sh, or point \
                 STRATA_BENCH_PYTHON at a Python with duckdb==1.5.5 and pyarrow)",
                py.display()
            ));
        }
        let mut control = Conn::connect(&socket)?;
        let version = control.call(&json!({"op": "version"}))?.as_str().unwrap_or("?").to_string();
        control.call(&json!({"op": "exec", "sql": format!("SET threads = {}", threads.max(1))}))?;
        let mut conns = Vec::new();
        for _ in 0..5 {
            conns.push(Conn::connect(&socket)?);
        }
        let mut trips = Vec::with_capacity(500);
        for _ in 0..500 {
            let t0 = Instant::now();
            control.call(&json!({"op": "ping"}))?;
            trips.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        trips.sort_by(f64::total_cmp);
        let round_trip_us = trips[trips.len() / 2];
        Ok(Duck { child, socket, _control: control, pool: Pool::new(conns), round_trip_us, version })
    }

    fn call(&self, req: &Json) -> Result<Json, String> {
        self.pool.with(|c| c.call(req))
    }

    /// A new connection to the helper, with a cursor of its own.
    pub(crate) fn connect(&self) -> Result<Conn, String> {
        Conn::connect(&self.socket)
    }

    pub(crate) fn exec(&self, sql: &str, params: Vec<Json>) -> Result<Vec<Vec<Json>>, String> {
        let out = self.call(&json!({"op": "exec", "sql": sql, "params": params}))?;
        let rows = out.as_array().ok_or("duckdb: rows expected")?;
        Ok(rows.iter().map(|r| r.as_array().cloned().unwrap_or_default()).collect())
    }

    pub(crate) fn config(&self, threads: usize) -> String {
        format!(
            "DuckDB {} (PyPI wheel) in a Python helper over a Unix socket, {threads} thread(s), default memory \
             limit; helper round trip {:.0} us (median), included in every latency",
            self.version, self.round_trip_us
        )
    }
}

fn to_json(v: &Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Boolean(b) => json!(b),
        Value::TinyInt(x) => json!(x),
        Value::SmallInt(x) => json!(x),
        Value::Int(x) => json!(x),
        Value::BigInt(x) => json!(x),
        Value::Double(x) => json!(x),
        Value::Real(x) => json!(x),
        Value::Text(s) => json!(s),
        // YCSB fields are ASCII letters; other bytes would not survive JSON text.
        Value::Bytea(b) => json!(String::from_utf8_lossy(b)),
        Value::Date(d) => json!(strata::types::format_date(*d)),
        Value::Timestamp(t) => json!(strata::types::format_timestamp(*t)),
        Value::TimestampTz(t) => json!(strata::types::format_timestamptz(*t)),
    }
}

fn from_json(j: &Json, kind: Kind) -> Result<Value, String> {
    let bad = || format!("duckdb: {j} is not a {kind:?}");
    Ok(match kind {
        Kind::SmallInt => Value::SmallInt(j.as_i64().ok_or_else(bad)? as i16),
        Kind::Int => Value::Int(j.as_i64().ok_or_else(bad)? as i32),
        Kind::BigInt => Value::BigInt(j.as_i64().ok_or_else(bad)?),
        Kind::Double => Value::Double(j.as_f64().ok_or_else(bad)?),
        Kind::Text => Value::Text(j.as_str().ok_or_else(bad)?.to_string()),
    })
}

fn int_json(j: &Json) -> Option<i128> {
    j.as_i64().map(i128::from).or_else(|| j.as_u64().map(i128::from))
}

/// DuckDB as a [`Tables`] store.
pub(crate) struct DuckTables {
    duck: Duck,
    def: TableDef,
    texts: sql::Texts,
    threads: usize,
}

impl DuckTables {
    pub(crate) fn open(dir: &Path, def: &TableDef, threads: usize) -> Result<Self, String> {
        let duck = Duck::start(dir, threads)?;
        duck.exec(&sql::create_table("duckdb", def), vec![])?;
        Ok(DuckTables { duck, def: def.clone(), texts: sql::Texts::new(def, |i| format!("${i}")), threads })
    }

    pub(crate) fn config(&self) -> String {
        self.duck.config(self.threads)
    }
}

impl Tables for DuckTables {
    fn load(&self, rows: &[Vec<Value>]) -> Result<(), String> {
        let columns: Vec<Json> =
            (0..self.def.columns.len()).map(|c| Json::Array(rows.iter().map(|r| to_json(&r[c])).collect())).collect();
        self.duck.call(&json!({"op": "load", "table": self.def.name, "columns": columns})).map(|_| ())
    }

    fn settle(&self, _compact: bool) -> Result<(), String> {
        self.duck.exec("CHECKPOINT", vec![]).map(|_| ())
    }

    fn insert(&self, row: &[Value]) -> Result<(), String> {
        self.duck.exec(&self.texts.insert, row.iter().map(to_json).collect()).map(|_| ())
    }

    fn update(&self, key: i64, col: usize, value: &Value) -> Result<(), String> {
        let update = self.texts.update(col).map_err(|e| format!("duckdb: {e}"))?;
        self.duck.exec(update, vec![to_json(value), json!(key)]).map(|_| ())
    }

    fn get(&self, key: i64, cols: &[usize]) -> Result<Option<Vec<Value>>, String> {
        let rows = self.duck.exec(&sql::get(&self.def, cols, "$1"), vec![json!(key)])?;
        let Some(r) = rows.first() else { return Ok(None) };
        let vals = cols.iter().zip(r).map(|(&c, j)| from_json(j, self.def.columns[c].1));
        Ok(Some(vals.collect::<Result<_, _>>()?))
    }

    /// One helper call runs the whole transaction (its `txn` op), so its reads and writes share
    /// a cursor and the round trip is paid once.
    fn update_txn(&self, reads: &[i64], writes: &[(i64, Vec<(usize, Value)>)], counter: usize) -> Result<Txn, String> {
        let all: Vec<usize> = (0..self.def.columns.len()).collect();
        let writes: Vec<Json> = writes
            .iter()
            .map(|(k, set)| {
                let mut cols: Vec<usize> = set.iter().map(|(c, _)| *c).collect();
                cols.push(counter);
                let text = sql::update_set(&self.def, &cols, |i| format!("${i}"));
                json!({"key": k, "sql": text, "params": set.iter().map(|(_, v)| to_json(v)).collect::<Vec<_>>()})
            })
            .collect();
        let req = json!({
            "op": "txn",
            "get": sql::get(&self.def, &all, "$1"),
            "reads": reads,
            "writes": writes,
            "counter": counter,
        });
        match self.duck.call(&req)?.as_bool() {
            Some(true) => Ok(Txn::Committed),
            Some(false) => Ok(Txn::Aborted),
            None => Err("duckdb: the helper's txn answered no outcome".into()),
        }
    }

    fn query(&self, q: &Query) -> Result<Answer, String> {
        let text = sql::select(&self.def, q);
        match &q.out {
            Output::Aggs(_) => {
                let rows = self.duck.exec(&text, vec![])?;
                let r = rows.first().ok_or("duckdb: no aggregate row")?;
                Ok(Answer::Aggs(r.iter().map(int_json).collect()))
            }
            Output::Rows => {
                let out = self.duck.call(&json!({"op": "rows", "sql": text}))?;
                let count = out.get(0).and_then(Json::as_u64).ok_or("duckdb: bad row count")?;
                let key_sum = out.get(1).and_then(int_json).ok_or("duckdb: bad key sum")?;
                Ok(Answer::Rows { count, key_sum })
            }
        }
    }
}

/// DuckDB as a YCSB store: `usertable(k BIGINT PRIMARY KEY, field0 VARCHAR, ...)`.
pub(crate) struct DuckStore {
    duck: Duck,
    fields: usize,
    insert: String,
    read: String,
    /// Per field: its UPDATE text.
    updates: Vec<String>,
    /// Serializes writers: DuckDB's optimistic concurrency aborts concurrent updates of one row.
    write: Mutex<()>,
}

impl DuckStore {
    pub(crate) fn open(dir: &Path, fields: usize) -> Result<Self, String> {
        let duck = Duck::start(dir, 1)?;
        let cols: Vec<String> = (0..fields).map(|f| format!("field{f} VARCHAR")).collect();
        duck.exec(&format!("CREATE TABLE usertable (k BIGINT PRIMARY KEY, {})", cols.join(", ")), vec![])?;
        let marks: Vec<String> = (1..=fields + 1).map(|i| format!("${i}")).collect();
        let insert = format!("INSERT OR REPLACE INTO usertable VALUES ({})", marks.join(", "));
        let updates = (0..fields).map(|f| format!("UPDATE usertable SET field{f} = $1 WHERE k = $2")).collect();
        let read = "SELECT * FROM usertable WHERE k = $1".into();
        Ok(DuckStore { duck, fields, insert, read, updates, write: Mutex::new(()) })
    }

    pub(crate) fn config(&self) -> String {
        self.duck.config(1)
    }
}

impl Store for DuckStore {
    fn insert(&self, key: u64, fields: &[Vec<u8>]) -> Result<(), String> {
        let mut params = vec![json!(key)];
        params.extend(fields.iter().map(|f| json!(String::from_utf8_lossy(f))));
        let _w = self.write.lock();
        self.duck.exec(&self.insert, params).map(|_| ())
    }

    fn read(&self, key: u64) -> Result<Option<Vec<Vec<u8>>>, String> {
        let rows = self.duck.exec(&self.read, vec![json!(key)])?;
        Ok(rows.first().map(|r| {
            r.iter().skip(1).take(self.fields).map(|j| j.as_str().unwrap_or_default().as_bytes().to_vec()).collect()
        }))
    }

    fn update(&self, key: u64, field: usize, value: &[u8]) -> Result<(), String> {
        let text = self.updates.get(field).ok_or_else(|| format!("duckdb: no field {field}"))?;
        let _w = self.write.lock();
        self.duck.exec(text, vec![json!(String::from_utf8_lossy(value)), json!(key)]).map(|_| ())
    }

    fn scan(&self, start: u64, n: usize) -> Result<Vec<u64>, String> {
        let rows = self
            .duck
            .exec("SELECT k FROM usertable WHERE k >= $1 ORDER BY k LIMIT $2", vec![json!(start), json!(n)])?;
        Ok(rows.iter().filter_map(|r| r.first().and_then(Json::as_u64)).collect())
    }
}
