//! SQLite (bundled through `rusqlite`) as a YCSB store: one table `usertable(k INTEGER PRIMARY
//! KEY, field0 BLOB, ...)`, WAL journal, `synchronous=NORMAL` (in WAL mode a commit does not
//! fsync; checkpoints do), which matches strata's default of a WAL write without fsync per
//! operation. One connection behind a mutex: SQLite admits one writer at a time anyway.

use std::path::Path;

use parking_lot::Mutex;
use rusqlite::{params, Connection};

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
