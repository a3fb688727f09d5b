//! PostgreSQL 15 as a CH-benCHmark system: a private cluster, the tables with their primary keys
//! and the two indexes TPC-C's lookups need (customers by last name, orders by customer), loaded
//! with COPY; the transactions in SQL under REPEATABLE READ (PostgreSQL's snapshot isolation),
//! run again on a serialization failure or deadlock; the queries as sent. The same client runs
//! the same statements against strata's own server (`--via-server`).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls, Statement};
use strata::{Db, Value};

use super::gen::{self, Scale};
use super::schema;
use super::sql::{self, Clients, SqlConn, SqlError};
use super::tx::{Input, Outcome};
use super::ChSystem;
use crate::peers::postgres::Cluster;
use crate::pgbench::StrataServer;

pub(crate) const CONFIG: &str =
    "REPEATABLE READ, synchronous_commit=off, fsync=on, shared_buffers=64MB, indexes on customer names and orders by customer";

/// What the server said, or what went wrong on the way.
fn message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => e.to_string(),
    }
}

fn err(e: postgres::Error) -> String {
    format!("postgres: {}", message(&e))
}

/// Whether `e` is a lost serialization or a deadlock: the transaction runs again.
fn retryable(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    e.code().is_some_and(|c| *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED)
}

/// A system spoken to over PostgreSQL's protocol: PostgreSQL itself, or strata's server.
pub(crate) struct PgSystem {
    name: &'static str,
    url: String,
    clients: Clients<PgConn>,
    /// strata's database behind its server, for its write stalls.
    strata: Option<Arc<Db>>,
    // Dropped last: the server outlives the connections.
    _server: Server,
}

/// What serves the connections.
enum Server {
    Postgres(#[allow(dead_code)] Cluster),
    Strata(#[allow(dead_code)] StrataServer),
}

impl PgSystem {
    /// Starts a cluster in `dir`, creates the tables and loads the population.
    pub fn open(dir: &Path, warehouses: i32, scale: &Scale, seed: u64) -> Result<PgSystem, String> {
        let cluster = Cluster::start(dir)?;
        let url = format!("host=127.0.0.1 port={} user=postgres", cluster.port);
        let mut client = Client::connect(&url, NoTls).map_err(err)?;
        for t in schema::TABLES {
            client.batch_execute(&t.create_sql()).map_err(err)?;
        }
        let total = scale.rows(warehouses);
        crate::harness::Progress::around("postgres: load", total, |done| {
            // Each part's rows as COPY text per table, copied in once the part is generated.
            let copy = |client: &mut Client, part: &mut dyn FnMut(&mut gen::Emit<'_>) -> Result<(), String>| {
                let mut rows: HashMap<&'static str, Vec<u8>> = HashMap::new();
                part(&mut |t, row| {
                    done.fetch_add(1, Ordering::Relaxed);
                    sql::tsv_line(&row, rows.entry(t.name).or_default())
                })?;
                for (name, text) in rows {
                    let mut w = client.copy_in(&format!("COPY {name} FROM STDIN")).map_err(err)?;
                    w.write_all(&text).map_err(|e| format!("postgres: COPY {name}: {e}"))?;
                    w.finish().map_err(err)?;
                }
                Ok::<(), String>(())
            };
            copy(&mut client, &mut |emit| gen::fixed_tables(seed, scale, emit))?;
            for w in 1..=warehouses {
                copy(&mut client, &mut |emit| gen::warehouse(seed, w, scale, emit))?;
            }
            for index in sql::INDEXES {
                client.batch_execute(index).map_err(err)?;
            }
            client.batch_execute("VACUUM ANALYZE").map_err(err)
        })?;
        Ok(PgSystem {
            name: "postgres",
            url,
            clients: Clients::new(vec![PgConn { client, prepared: HashMap::new() }]),
            strata: None,
            _server: Server::Postgres(cluster),
        })
    }

    /// Serves `db` (loaded) with strata's PostgreSQL server in this process, queries running
    /// with `partitions` partitions, and creates the indexes the other SQL systems have.
    pub fn serve_strata(db: Arc<Db>, partitions: usize) -> Result<PgSystem, String> {
        let engine =
            strata_sql::SqlEngine::with_partitions(db.clone(), partitions).map_err(|e| format!("strata: {e}"))?;
        let server = StrataServer::serve(db.clone(), engine)?;
        let url = format!("host=127.0.0.1 port={} user=strata", server.addr.port());
        let mut client = Client::connect(&url, NoTls).map_err(|e| format!("strata server: {}", message(&e)))?;
        for index in sql::INDEXES {
            client.batch_execute(index).map_err(|e| format!("strata server: {index}: {}", message(&e)))?;
        }
        Ok(PgSystem {
            name: "strata server",
            url,
            clients: Clients::new(vec![PgConn { client, prepared: HashMap::new() }]),
            strata: Some(db),
            _server: Server::Strata(server),
        })
    }
}

/// A connection, with the statements prepared on it.
pub(crate) struct PgConn {
    client: Client,
    prepared: HashMap<String, Statement>,
}

impl PgConn {
    pub fn connect(url: &str) -> Result<PgConn, String> {
        Ok(PgConn { client: Client::connect(url, NoTls).map_err(err)?, prepared: HashMap::new() })
    }
}

fn sql_err(e: postgres::Error) -> SqlError {
    SqlError { retry: retryable(&e), msg: message(&e) }
}

/// A parameter as the client sends it.
fn param(v: &Value) -> Result<Box<dyn ToSql + Sync>, SqlError> {
    Ok(match v {
        Value::Int(x) => Box::new(*x),
        Value::Double(x) => Box::new(*x),
        Value::Text(s) => Box::new(s.clone()),
        Value::Timestamp(t) => Box::new(timestamp(*t)),
        other => return Err(SqlError::fatal(format!("postgres: no parameter for {other:?}"))),
    })
}

fn timestamp(micros: i64) -> SystemTime {
    let d = Duration::from_micros(micros.unsigned_abs());
    if micros >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

fn micros(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_micros() as i64,
        Err(e) => -(e.duration().as_micros() as i64),
    }
}

/// Cell `i` of `row` as a value, by the column's type.
fn cell(row: &postgres::Row, i: usize) -> Result<Value, postgres::Error> {
    let ty = row.columns()[i].type_();
    let v = match *ty {
        Type::INT2 => row.try_get::<_, Option<i16>>(i)?.map(Value::SmallInt),
        Type::INT4 => row.try_get::<_, Option<i32>>(i)?.map(Value::Int),
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Value::BigInt),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(Value::Double),
        Type::TIMESTAMP => row.try_get::<_, Option<SystemTime>>(i)?.map(|t| Value::Timestamp(micros(t))),
        // Text, and whatever else, as text (an unknown type fails here, naming itself).
        _ => row.try_get::<_, Option<String>>(i)?.map(Value::Text),
    };
    Ok(v.unwrap_or(Value::Null))
}

impl SqlConn for PgConn {
    fn begin(&mut self) -> Result<(), SqlError> {
        self.client.batch_execute("START TRANSACTION ISOLATION LEVEL REPEATABLE READ").map_err(sql_err)
    }

    fn rows(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, SqlError> {
        let stmt = match self.prepared.get(sql) {
            Some(s) => s.clone(),
            None => {
                let s = self.client.prepare(sql).map_err(sql_err)?;
                self.prepared.insert(sql.to_owned(), s.clone());
                s
            }
        };
        let boxed = params.iter().map(param).collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| b.as_ref()).collect();
        let rows = self.client.query(&stmt, &refs).map_err(sql_err)?;
        rows.iter().map(|r| (0..r.len()).map(|i| cell(r, i)).collect::<Result<Vec<_>, _>>().map_err(sql_err)).collect()
    }

    fn commit(&mut self) -> Result<(), SqlError> {
        self.client.batch_execute("COMMIT").map_err(sql_err)
    }

    fn rollback(&mut self) -> Result<(), SqlError> {
        self.client.batch_execute("ROLLBACK").map_err(sql_err)
    }
}

/// Answers `sql` on `client` as rows of text, as the server printed them.
fn text_rows(client: &mut Client, sql: &str) -> Result<Vec<Vec<String>>, String> {
    let msgs = client.simple_query(sql).map_err(|e| message(&e))?;
    Ok(msgs
        .iter()
        .filter_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).unwrap_or("").to_owned()).collect())
            }
            _ => None,
        })
        .collect())
}

impl ChSystem for PgSystem {
    fn transaction(&self, input: &Input) -> Result<Outcome, String> {
        self.clients.transaction(self.name, || PgConn::connect(&self.url), input)
    }

    fn query(&self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        self.clients.with(|| PgConn::connect(&self.url), |c| text_rows(&mut c.client, sql))
    }

    fn stall_secs(&self) -> Option<f64> {
        self.strata.as_ref().map(|db| db.stats().write_stall_micros as f64 / 1e6)
    }
}
