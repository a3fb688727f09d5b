//! PostgreSQL (Debian's 15) as a YCSB store, on a private cluster: `initdb --auth=trust` in a
//! directory under `--out` (as the `postgres` user when running as root, which initdb refuses;
//! then under the system's temporary directory if that user cannot reach `--out`),
//! started with `pg_ctl` listening on 127.0.0.1 at a free port and stopped when the store is
//! dropped. `synchronous_commit=off` matches strata's default (a WAL write without fsync per
//! operation). Driven through the `postgres` crate, one connection behind a mutex.

use std::path::{Path, PathBuf};
use std::process::Command;

use parking_lot::Mutex;
use postgres::{Client, NoTls, Statement};

use std::collections::HashMap;

use postgres::types::ToSql;
use strata::Value;

use super::Pool;
use crate::tables::{sql, Answer, Kind, Output, Query, TableDef, Tables, Txn};
use crate::ycsb::Store;

/// The configuration, as reported next to the figures.
pub(crate) const CONFIG: &str = "synchronous_commit=off, fsync=on, shared_buffers=64MB";

/// Where Debian puts the server binaries (override with `PG_BIN`).
fn bin(name: &str) -> PathBuf {
    let dir = std::env::var("PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into());
    Path::new(&dir).join(name)
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// Runs a server binary, as the `postgres` user when we are root.
fn run(name: &str, args: &[&str]) -> Result<(), String> {
    let program = bin(name);
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&program);
        c
    } else {
        Command::new(&program)
    };
    let out = cmd.args(args).output().map_err(|e| format!("postgres: cannot run {}: {e}", program.display()))?;
    if !out.status.success() {
        return Err(format!(
            "postgres: {} {} failed: {}{}",
            program.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// A private cluster, stopped on drop (and its directory removed when it had to be placed
/// outside `--out`).
pub(crate) struct Cluster {
    dir: PathBuf,
    pub(crate) port: u16,
    /// The cluster lives in a directory of its own outside `--out`, removed on drop.
    own_dir: bool,
}

/// Whether the `postgres` user can enter and write `dir` (always, when we are not root: the
/// server then runs as us).
fn reachable_by_postgres(dir: &Path) -> bool {
    !is_root()
        || Command::new("runuser")
            .args(["-u", "postgres", "--", "test", "-w"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success())
}

/// Makes `dir` (emptied first) the postgres user's when we are root; false if it cannot reach it.
fn prepare(dir: &Path) -> Result<bool, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("postgres: cannot create {}: {e}", dir.display()))?;
    if is_root() {
        let owned = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir).status();
        if !owned.is_ok_and(|s| s.success()) {
            return Err("postgres: cannot give the cluster directory to the postgres user".into());
        }
    }
    Ok(reachable_by_postgres(dir))
}

impl Cluster {
    /// Starts a cluster in `dir`; when we are root and the postgres user cannot reach `dir` (an
    /// `--out` inside a private directory, as `mktemp -d` makes), in a directory of its own under
    /// the system's temporary directory instead.
    pub(crate) fn start(dir: &Path) -> Result<Cluster, String> {
        let mut own_dir = false;
        let mut dir = dir.to_path_buf();
        if !prepare(&dir)? {
            let _ = std::fs::remove_dir_all(&dir);
            let elsewhere = std::env::temp_dir().join(format!("strata-bench-pg-{}", std::process::id()));
            if !prepare(&elsewhere)? {
                let _ = std::fs::remove_dir_all(&elsewhere);
                return Err(format!(
                    "postgres: the postgres user can reach neither {} nor {}; run with --out in a directory it can \
                     enter",
                    dir.display(),
                    elsewhere.display()
                ));
            }
            eprintln!("  postgres: {} is private to root; the cluster lives in {}", dir.display(), elsewhere.display());
            (dir, own_dir) = (elsewhere, true);
        }
        let dir = dir.canonicalize().map_err(|e| format!("postgres: {e}"))?;
        let data = dir.join("data");
        let data_s = data.to_string_lossy().into_owned();
        run("initdb", &["-D", &data_s, "--auth=trust", "-U", "postgres", "-E", "UTF8"])?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("postgres: no free port: {e}"))?;
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={} -c synchronous_commit=off -c fsync=on \
             -c shared_buffers=64MB",
            dir.display()
        );
        let log = dir.join("server.log").to_string_lossy().into_owned();
        run("pg_ctl", &["-D", &data_s, "-o", &opts, "-l", &log, "-w", "start"])?;
        Ok(Cluster { dir, port, own_dir })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.join("data").to_string_lossy().into_owned();
        let _ = run("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"]);
        if self.own_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

struct Conn {
    client: Client,
    insert: Statement,
    read: Statement,
    updates: Vec<Statement>,
    scan: Statement,
}

pub(crate) struct PostgresStore {
    conn: Mutex<Conn>,
    fields: usize,
    // Dropped last: the server outlives the connection.
    _cluster: Cluster,
}

fn err(e: postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("postgres: {}", db.message()),
        None => format!("postgres: {e}"),
    }
}

impl PostgresStore {
    pub(crate) fn open(dir: &Path, fields: usize) -> Result<Self, String> {
        let cluster = Cluster::start(dir)?;
        let mut client =
            Client::connect(&format!("host=127.0.0.1 port={} user=postgres", cluster.port), NoTls).map_err(err)?;
        let cols: Vec<String> = (0..fields).map(|f| format!("field{f} BYTEA")).collect();
        client
            .batch_execute(&format!("CREATE TABLE usertable (k BIGINT PRIMARY KEY, {})", cols.join(", ")))
            .map_err(err)?;
        let marks: Vec<String> = (1..=fields + 1).map(|i| format!("${i}")).collect();
        let sets: Vec<String> = (0..fields).map(|f| format!("field{f} = EXCLUDED.field{f}")).collect();
        let insert = client
            .prepare(&format!(
                "INSERT INTO usertable VALUES ({}) ON CONFLICT (k) DO UPDATE SET {}",
                marks.join(", "),
                sets.join(", ")
            ))
            .map_err(err)?;
        let read = client.prepare("SELECT * FROM usertable WHERE k = $1").map_err(err)?;
        let updates = (0..fields)
            .map(|f| client.prepare(&format!("UPDATE usertable SET field{f} = $1 WHERE k = $2")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        let scan = client.prepare("SELECT k FROM usertable WHERE k >= $1 ORDER BY k LIMIT $2").map_err(err)?;
        Ok(PostgresStore { conn: Mutex::new(Conn { client, insert, read, updates, scan }), fields, _cluster: cluster })
    }
}

impl Store for PostgresStore {
    fn insert(&self, key: u64, fields: &[Vec<u8>]) -> Result<(), String> {
        let k = key as i64;
        let mut values: Vec<&(dyn postgres::types::ToSql + Sync)> = Vec::with_capacity(fields.len() + 1);
        values.push(&k);
        for f in fields {
            values.push(f);
        }
        let c = &mut *self.conn.lock();
        c.client.execute(&c.insert, &values).map_err(err)?;
        Ok(())
    }

    fn read(&self, key: u64) -> Result<Option<Vec<Vec<u8>>>, String> {
        let c = &mut *self.conn.lock();
        let rows = c.client.query(&c.read, &[&(key as i64)]).map_err(err)?;
        Ok(rows
            .first()
            .map(|r| (0..self.fields).map(|f| r.get::<_, Option<Vec<u8>>>(f + 1).unwrap_or_default()).collect()))
    }

    fn update(&self, key: u64, field: usize, value: &[u8]) -> Result<(), String> {
        let c = &mut *self.conn.lock();
        let st = c.updates.get(field).ok_or_else(|| format!("postgres: no field {field}"))?.clone();
        c.client.execute(&st, &[&value, &(key as i64)]).map_err(err)?;
        Ok(())
    }

    fn scan(&self, start: u64, n: usize) -> Result<Vec<u64>, String> {
        let c = &mut *self.conn.lock();
        let rows = c.client.query(&c.scan, &[&(start as i64), &(n as i64)]).map_err(err)?;
        Ok(rows.iter().map(|r| r.get::<_, i64>(0) as u64).collect())
    }
}

/// PostgreSQL as a [`Tables`] store: the same private cluster, a connection per client thread,
/// prepared statements cached per connection, bulk loads through `COPY`.
pub(crate) struct PostgresTables {
    conns: Pool<(Client, HashMap<String, Statement>)>,
    def: TableDef,
    texts: sql::Texts,
    threads: usize,
    _cluster: Cluster,
}

fn param(v: &Value) -> Box<dyn ToSql + Sync> {
    match v {
        Value::Null => Box::new(Option::<i64>::None),
        Value::Boolean(b) => Box::new(*b),
        Value::TinyInt(x) => Box::new(i16::from(*x)),
        Value::Real(x) => Box::new(*x),
        Value::SmallInt(x) => Box::new(*x),
        Value::Int(x) => Box::new(*x),
        Value::BigInt(x) => Box::new(*x),
        Value::Double(x) => Box::new(*x),
        Value::Text(s) => Box::new(s.clone()),
        Value::Bytea(b) => Box::new(b.clone()),
        Value::Date(d) => Box::new(strata::types::format_date(*d)),
        Value::Timestamp(t) => Box::new(strata::types::format_timestamp(*t)),
        Value::TimestampTz(t) => Box::new(strata::types::format_timestamptz(*t)),
    }
}

fn column(r: &postgres::Row, i: usize, kind: Kind) -> Result<Value, String> {
    Ok(match kind {
        Kind::SmallInt => Value::SmallInt(r.try_get(i).map_err(err)?),
        Kind::Int => Value::Int(r.try_get(i).map_err(err)?),
        Kind::BigInt => Value::BigInt(r.try_get(i).map_err(err)?),
        Kind::Double => Value::Double(r.try_get(i).map_err(err)?),
        Kind::Text => Value::Text(r.try_get(i).map_err(err)?),
    })
}

/// An aggregate's value: MAX keeps the column's type, SUM of integers is BIGINT.
fn int_column(r: &postgres::Row, i: usize) -> Result<Option<i128>, String> {
    if let Ok(v) = r.try_get::<_, Option<i64>>(i) {
        return Ok(v.map(i128::from));
    }
    if let Ok(v) = r.try_get::<_, Option<i32>>(i) {
        return Ok(v.map(i128::from));
    }
    r.try_get::<_, Option<i16>>(i).map(|v| v.map(i128::from)).map_err(err)
}

impl PostgresTables {
    /// A cluster with `def` created; a query may use `threads` processes (the leader and
    /// `threads - 1` parallel workers).
    pub(crate) fn open(dir: &Path, def: &TableDef, threads: usize) -> Result<Self, String> {
        let cluster = Cluster::start(dir)?;
        let url = format!("host=127.0.0.1 port={} user=postgres", cluster.port);
        let mut conns = Vec::new();
        let workers = format!("SET max_parallel_workers_per_gather = {}", threads.max(1) - 1);
        for _ in 0..5 {
            let mut c = Client::connect(&url, NoTls).map_err(err)?;
            c.batch_execute(&workers).map_err(err)?;
            conns.push((c, HashMap::new()));
        }
        conns[0].0.batch_execute(&sql::create_table("postgres", def)).map_err(err)?;
        let texts = sql::Texts::new(def, |i| format!("${i}"));
        Ok(PostgresTables { conns: Pool::new(conns), def: def.clone(), texts, threads, _cluster: cluster })
    }

    pub(crate) fn config(&self) -> String {
        format!("{CONFIG}, max_parallel_workers_per_gather={}", self.threads.max(1) - 1)
    }

    /// Runs a cached prepared statement.
    fn run(&self, text: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<postgres::Row>, String> {
        self.conns.with(|(client, cache)| {
            let st = match cache.get(text) {
                Some(st) => st.clone(),
                None => {
                    let st = client.prepare(text).map_err(err)?;
                    cache.insert(text.to_string(), st.clone());
                    st
                }
            };
            client.query(&st, params).map_err(err)
        })
    }
}

impl Tables for PostgresTables {
    fn load(&self, rows: &[Vec<Value>]) -> Result<(), String> {
        use std::io::Write;
        let mut text = String::new();
        for r in rows {
            let cells: Vec<String> = r
                .iter()
                .map(|v| match v {
                    Value::Text(s) => s.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n"),
                    other => sql::literal(other),
                })
                .collect();
            text.push_str(&cells.join("\t"));
            text.push('\n');
        }
        let copy = format!("COPY {} FROM STDIN", self.def.name);
        self.conns.with(|(client, _)| {
            let mut w = client.copy_in(&copy).map_err(err)?;
            w.write_all(text.as_bytes()).map_err(|e| format!("postgres: {e}"))?;
            w.finish().map_err(err)?;
            Ok(())
        })
    }

    fn settle(&self, _compact: bool) -> Result<(), String> {
        let vacuum = format!("VACUUM ANALYZE {}", self.def.name);
        self.conns.with(|(client, _)| {
            client.batch_execute(&vacuum).map_err(err)?;
            client.batch_execute("CHECKPOINT").map_err(err)
        })
    }

    fn insert(&self, row: &[Value]) -> Result<(), String> {
        let params: Vec<Box<dyn ToSql + Sync>> = row.iter().map(param).collect();
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
        self.run(&self.texts.insert, &refs).map(|_| ())
    }

    fn update(&self, key: i64, col: usize, value: &Value) -> Result<(), String> {
        let v = param(value);
        let update = self.texts.update(col).map_err(|e| format!("postgres: {e}"))?;
        self.run(update, &[v.as_ref(), &key]).map(|_| ())
    }

    fn get(&self, key: i64, cols: &[usize]) -> Result<Option<Vec<Value>>, String> {
        let rows = self.run(&sql::get(&self.def, cols, "$1"), &[&key])?;
        let Some(r) = rows.first() else { return Ok(None) };
        let vals = cols.iter().enumerate().map(|(i, &c)| column(r, i, self.def.columns[c].1));
        Ok(Some(vals.collect::<Result<_, _>>()?))
    }

    fn update_txn(&self, reads: &[i64], writes: &[(i64, Vec<(usize, Value)>)], counter: usize) -> Result<Txn, String> {
        let all: Vec<usize> = (0..self.def.columns.len()).collect();
        let get = sql::get(&self.def, &all, "$1");
        self.conns.with(|(client, cache)| {
            let mut tx =
                match client.build_transaction().isolation_level(postgres::IsolationLevel::RepeatableRead).start() {
                    Ok(tx) => tx,
                    Err(e) => return Err(err(e)),
                };
            let mut prepared = |tx: &mut postgres::Transaction<'_>, text: &str| -> Result<Statement, postgres::Error> {
                if let Some(st) = cache.get(text) {
                    return Ok(st.clone());
                }
                let st = tx.prepare(text)?;
                cache.insert(text.to_string(), st.clone());
                Ok(st)
            };
            // A serialization failure or deadlock aborts the transaction (rolled back on drop).
            let aborted = |e: &postgres::Error| {
                e.code().is_some_and(|c| {
                    *c == postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
                        || *c == postgres::error::SqlState::T_R_DEADLOCK_DETECTED
                })
            };
            let mut read = Vec::with_capacity(reads.len());
            for &k in reads {
                let rows = match prepared(&mut tx, &get).and_then(|st| tx.query(&st, &[&k])) {
                    Ok(rows) => rows,
                    Err(e) if aborted(&e) => return Ok(Txn::Aborted),
                    Err(e) => return Err(err(e)),
                };
                let r = rows.first().ok_or_else(|| format!("postgres: row {k} is missing"))?;
                let vals = all.iter().map(|&c| column(r, c, self.def.columns[c].1));
                read.push((k, vals.collect::<Result<Vec<_>, _>>()?));
            }
            for (text, params) in sql::txn_updates(&self.def, &read, writes, counter, |i| format!("${i}"))? {
                let params: Vec<Box<dyn ToSql + Sync>> = params.iter().map(param).collect();
                let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
                match prepared(&mut tx, &text).and_then(|st| tx.execute(&st, &refs)) {
                    Ok(_) => {}
                    Err(e) if aborted(&e) => return Ok(Txn::Aborted),
                    Err(e) => return Err(err(e)),
                }
            }
            match tx.commit() {
                Ok(()) => Ok(Txn::Committed),
                Err(e) if aborted(&e) => Ok(Txn::Aborted),
                Err(e) => Err(err(e)),
            }
        })
    }

    fn query(&self, q: &Query) -> Result<Answer, String> {
        let text = sql::select_in("postgres", &self.def, q);
        let rows = self.conns.with(|(client, _)| client.query(&text, &[]).map_err(err))?;
        match &q.out {
            Output::Aggs(aggs) => {
                let r = rows.first().ok_or("postgres: no aggregate row")?;
                Ok(Answer::Aggs((0..aggs.len()).map(|i| int_column(r, i)).collect::<Result<_, _>>()?))
            }
            Output::Rows => {
                let mut key_sum = 0i128;
                for r in &rows {
                    key_sum += i128::from(r.try_get::<_, i64>(0).map_err(err)?);
                }
                Ok(Answer::Rows { count: rows.len() as u64, key_sum })
            }
        }
    }
}
