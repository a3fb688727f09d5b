//! SQLite (bundled through `rusqlite`) as a YCSB store: one table `usertable(k INTEGER PRIMARY
//! KEY, field0 BLOB, ...)`, WAL journal, `synchronous=NORMAL` (in WAL mode a commit does not
//! fsync; checkpoints do), which matches strata's default of a WAL write without fsync per
//! operation. One connection behind a mutex: SQLite admits one writer at a time anyway.

use std::path::Path;

use parking_lot::Mutex;
use rusqlite::{params, Connection};

use strata::Value;

use super::Pool;
use crate::tables::{sql, Answer, Kind, Output, Query, TableDef, Tables, Txn};
use crate::ycsb::Store;

/// The configuration, as reported next to the figures.
pub(crate) const CONFIG: &str = "WAL, synchronous=NORMAL, 64 MiB page cache";

pub(crate) struct SqliteStore {
    conn: Mutex<Connection>,
    fields: usize,
}

fn err(e: rusqlite::Error) -> String {
    format!("sqlite: {e}")
}

impl SqliteStore {
    pub(crate) fn open(dir: &Path, fields: usize) -> Result<Self, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("sqlite: {e}"))?;
        let conn = Connection::open(dir.join("ycsb.db")).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(err)?;
        // A 64 MiB page cache, like strata's default block cache.
        conn.pragma_update(None, "cache_size", -65536).map_err(err)?;
        let cols: Vec<String> = (0..fields).map(|f| format!("field{f} BLOB")).collect();
        conn.execute(&format!("CREATE TABLE usertable (k INTEGER PRIMARY KEY, {})", cols.join(", ")), [])
            .map_err(err)?;
        Ok(SqliteStore { conn: Mutex::new(conn), fields })
    }
}

impl Store for SqliteStore {
    fn insert(&self, key: u64, fields: &[Vec<u8>]) -> Result<(), String> {
        let marks: Vec<String> = (0..=fields.len()).map(|i| format!("?{}", i + 1)).collect();
        let sql = format!("INSERT OR REPLACE INTO usertable VALUES ({})", marks.join(", "));
        let conn = self.conn.lock();
        let mut st = conn.prepare_cached(&sql).map_err(err)?;
        let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(fields.len() + 1);
        let k = key as i64;
        values.push(&k);
        for f in fields {
            values.push(f);
        }
        st.execute(values.as_slice()).map_err(err)?;
        Ok(())
    }

    fn read(&self, key: u64) -> Result<Option<Vec<Vec<u8>>>, String> {
        let conn = self.conn.lock();
        let mut st = conn.prepare_cached("SELECT * FROM usertable WHERE k = ?1").map_err(err)?;
        let mut rows = st.query(params![key as i64]).map_err(err)?;
        match rows.next().map_err(err)? {
            None => Ok(None),
            Some(r) => {
                let mut out = Vec::with_capacity(self.fields);
                for f in 0..self.fields {
                    out.push(r.get::<_, Option<Vec<u8>>>(f + 1).map_err(err)?.unwrap_or_default());
                }
                Ok(Some(out))
            }
        }
    }

    fn update(&self, key: u64, field: usize, value: &[u8]) -> Result<(), String> {
        let conn = self.conn.lock();
        let mut st =
            conn.prepare_cached(&format!("UPDATE usertable SET field{field} = ?1 WHERE k = ?2")).map_err(err)?;
        st.execute(params![value, key as i64]).map_err(err)?;
        Ok(())
    }

    fn scan(&self, start: u64, n: usize) -> Result<Vec<u64>, String> {
        let conn = self.conn.lock();
        let mut st = conn.prepare_cached("SELECT * FROM usertable WHERE k >= ?1 ORDER BY k LIMIT ?2").map_err(err)?;
        let mut rows = st.query(params![start as i64, n as i64]).map_err(err)?;
        let mut keys = Vec::with_capacity(n);
        while let Some(r) = rows.next().map_err(err)? {
            keys.push(r.get::<_, i64>(0).map_err(err)? as u64);
        }
        Ok(keys)
    }
}

/// SQLite as a [`Tables`] store: a connection per client thread (WAL lets readers run beside
/// the writer), the same pragmas as above.
pub(crate) struct SqliteTables {
    conns: Pool<Connection>,
    def: TableDef,
    texts: sql::Texts,
}

fn connect(path: &Path) -> Result<Connection, String> {
    let conn = Connection::open(path).map_err(err)?;
    conn.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
    conn.pragma_update(None, "synchronous", "NORMAL").map_err(err)?;
    conn.pragma_update(None, "cache_size", -65536).map_err(err)?;
    conn.busy_timeout(std::time::Duration::from_secs(30)).map_err(err)?;
    Ok(conn)
}

fn param(v: &Value) -> rusqlite::types::Value {
    use rusqlite::types::Value as V;
    match v {
        Value::Null => V::Null,
        Value::Boolean(b) => V::Integer(i64::from(*b)),
        Value::TinyInt(x) => V::Integer(i64::from(*x)),
        Value::Real(x) => V::Real(f64::from(*x)),
        Value::SmallInt(x) => V::Integer(i64::from(*x)),
        Value::Int(x) => V::Integer(i64::from(*x)),
        Value::BigInt(x) => V::Integer(*x),
        Value::Double(x) => V::Real(*x),
        Value::Text(s) => V::Text(s.clone()),
        Value::Bytea(b) => V::Blob(b.clone()),
        Value::Date(d) => V::Text(strata::types::format_date(*d)),
        Value::Timestamp(t) => V::Text(strata::types::format_timestamp(*t)),
        Value::TimestampTz(t) => V::Text(strata::types::format_timestamptz(*t)),
    }
}

fn column(r: &rusqlite::Row<'_>, i: usize, kind: Kind) -> Result<Value, String> {
    Ok(match kind {
        Kind::SmallInt => Value::SmallInt(r.get::<_, i64>(i).map_err(err)? as i16),
        Kind::Int => Value::Int(r.get::<_, i64>(i).map_err(err)? as i32),
        Kind::BigInt => Value::BigInt(r.get(i).map_err(err)?),
        Kind::Double => Value::Double(r.get(i).map_err(err)?),
        Kind::Text => Value::Text(r.get(i).map_err(err)?),
    })
}

impl SqliteTables {
    pub(crate) fn open(dir: &Path, def: &TableDef) -> Result<Self, String> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("sqlite: {e}"))?;
        let path = dir.join("bench.db");
        let first = connect(&path)?;
        first.execute(&sql::create_table("sqlite", def), []).map_err(err)?;
        let mut conns = vec![first];
        for _ in 0..4 {
            conns.push(connect(&path)?);
        }
        let texts = sql::Texts::new(def, |i| format!("?{i}"));
        Ok(SqliteTables { conns: Pool::new(conns), def: def.clone(), texts })
    }
}

impl Tables for SqliteTables {
    fn load(&self, rows: &[Vec<Value>]) -> Result<(), String> {
        self.conns.with(|c| {
            let tx = c.transaction().map_err(err)?;
            {
                let mut st = tx.prepare_cached(&self.texts.insert).map_err(err)?;
                for r in rows {
                    st.execute(rusqlite::params_from_iter(r.iter().map(param))).map_err(err)?;
                }
            }
            tx.commit().map_err(err)
        })
    }

    fn settle(&self, _compact: bool) -> Result<(), String> {
        self.conns.with(|c| c.execute_batch("ANALYZE; PRAGMA wal_checkpoint(TRUNCATE);").map_err(err))
    }

    fn insert(&self, row: &[Value]) -> Result<(), String> {
        self.conns.with(|c| {
            let mut st = c.prepare_cached(&self.texts.insert).map_err(err)?;
            st.execute(rusqlite::params_from_iter(row.iter().map(param))).map_err(err)?;
            Ok(())
        })
    }

    fn update(&self, key: i64, col: usize, value: &Value) -> Result<(), String> {
        let update = self.texts.update(col).map_err(|e| format!("sqlite: {e}"))?;
        self.conns.with(|c| {
            let mut st = c.prepare_cached(update).map_err(err)?;
            st.execute(params![param(value), key]).map_err(err)?;
            Ok(())
        })
    }

    fn get(&self, key: i64, cols: &[usize]) -> Result<Option<Vec<Value>>, String> {
        let get = sql::get(&self.def, cols, "?1");
        self.conns.with(|c| {
            let mut st = c.prepare_cached(&get).map_err(err)?;
            let mut rows = st.query(params![key]).map_err(err)?;
            let Some(r) = rows.next().map_err(err)? else { return Ok(None) };
            let vals = cols.iter().enumerate().map(|(i, &c)| column(r, i, self.def.columns[c].1));
            Ok(Some(vals.collect::<Result<_, _>>()?))
        })
    }

    /// In `BEGIN IMMEDIATE`: SQLite admits one writer at a time, so a transaction that will
    /// write takes the write lock first and waits for it rather than fail at its first write.
    fn update_txn(&self, reads: &[i64], writes: &[(i64, Vec<(usize, Value)>)], counter: usize) -> Result<Txn, String> {
        let all: Vec<usize> = (0..self.def.columns.len()).collect();
        let get = sql::get(&self.def, &all, "?1");
        self.conns.with(|c| {
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(err)?;
            let mut read = Vec::with_capacity(reads.len());
            {
                let mut st = tx.prepare_cached(&get).map_err(err)?;
                for &k in reads {
                    let mut rows = st.query(params![k]).map_err(err)?;
                    let r = rows.next().map_err(err)?.ok_or_else(|| format!("sqlite: row {k} is missing"))?;
                    let vals = all.iter().map(|&i| column(r, i, self.def.columns[i].1));
                    read.push((k, vals.collect::<Result<Vec<_>, _>>()?));
                }
            }
            for (text, params) in sql::txn_updates(&self.def, &read, writes, counter, |i| format!("?{i}"))? {
                let mut st = tx.prepare_cached(&text).map_err(err)?;
                st.execute(rusqlite::params_from_iter(params.iter().map(param))).map_err(err)?;
            }
            tx.commit().map_err(err)?;
            Ok(Txn::Committed)
        })
    }

    fn query(&self, q: &Query) -> Result<Answer, String> {
        let text = sql::select(&self.def, q);
        self.conns.with(|c| {
            let mut st = c.prepare(&text).map_err(err)?;
            let mut rows = st.query([]).map_err(err)?;
            match &q.out {
                Output::Aggs(aggs) => {
                    let r = rows.next().map_err(err)?.ok_or("sqlite: no aggregate row")?;
                    let v = (0..aggs.len())
                        .map(|i| r.get::<_, Option<i64>>(i).map(|x| x.map(i128::from)).map_err(err))
                        .collect::<Result<_, _>>()?;
                    Ok(Answer::Aggs(v))
                }
                Output::Rows => {
                    let (mut count, mut key_sum) = (0u64, 0i128);
                    while let Some(r) = rows.next().map_err(err)? {
                        count += 1;
                        key_sum += i128::from(r.get::<_, i64>(0).map_err(err)?);
                    }
                    Ok(Answer::Rows { count, key_sum })
                }
            }
        })
    }
}
