//! RocksDB (the `rocksdb` crate with its bundled RocksDB) as a YCSB store, configured like
//! strata's defaults: WAL on without fsync per write, 64 MiB memtable, 16 KiB blocks, LZ4, bloom
//! filters of 10 bits per key, 64 MiB block cache. A record is one value per key (a row store, as
//! LASER's baseline): the fields, each prefixed by its length. An update reads the record,
//! replaces one field and writes it back, as YCSB's RocksDB binding does.

use std::path::Path;

use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Direction, IteratorMode, Options, WriteOptions, DB};

use strata::Value;

use super::Tuning;
use crate::tables::{next_count, Acc, Answer, Kind, Query, TableDef, Tables, Txn};
use crate::ycsb::Store;

/// The configuration, as reported next to the figures.
pub(crate) const CONFIG: &str =
    "WAL without fsync, 64 MiB memtable, L1 64 MiB, size ratio 10, 16 KiB blocks, LZ4, bloom 10, 64 MiB block cache";

pub(crate) struct RocksStore {
    db: DB,
    write: WriteOptions,
}

fn err(e: rocksdb::Error) -> String {
    format!("rocksdb: {e}")
}

fn encode(fields: &[Vec<u8>]) -> Vec<u8> {
    let mut v = Vec::with_capacity(fields.iter().map(|f| f.len() + 4).sum());
    for f in fields {
        v.extend_from_slice(&(f.len() as u32).to_le_bytes());
        v.extend_from_slice(f);
    }
    v
}

fn decode(mut b: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let (len, rest) = b.split_at_checked(4).ok_or("rocksdb: truncated record")?;
        let n = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let (f, rest) = rest.split_at_checked(n).ok_or("rocksdb: truncated record")?;
        out.push(f.to_vec());
        b = rest;
    }
    Ok(out)
}

/// The options for a tree shape: strata's defaults (64 MiB memtable, Level-1 64 MiB, size ratio
/// 10, 8 MiB files) or the deep tree (4 MiB memtable, Level-1 8 MiB, ratio 2, 2 MiB files); in
/// both, 16 KiB blocks, LZ4, bloom filters of 10 bits per key and a 64 MiB block cache.
fn options(tuning: Tuning) -> Options {
    let (memtable, l1, ratio, file) = match tuning {
        Tuning::Default => (64 << 20, 64 << 20, 10.0, 8 << 20),
        Tuning::DeepTree => (4 << 20, 8 << 20, 2.0, 2 << 20),
    };
    shaped(&EngineShape { memtable, l1, block: 16 << 10, cache: 64 << 20 }, ratio, file)
}

/// The shape `strata-bench engine` gives both systems.
pub(crate) struct EngineShape {
    pub memtable: usize,
    pub l1: u64,
    pub block: usize,
    pub cache: usize,
}

/// Options for a tree of that shape, size ratio `ratio` and files of `file` bytes; LZ4, bloom
/// filters of 10 bits per key.
fn shaped(shape: &EngineShape, ratio: f64, file: u64) -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_write_buffer_size(shape.memtable);
    opts.set_max_bytes_for_level_base(shape.l1);
    opts.set_max_bytes_for_level_multiplier(ratio);
    opts.set_target_file_size_base(file);
    opts.set_num_levels(7);
    opts.set_compression_type(DBCompressionType::Lz4);
    let mut table = BlockBasedOptions::default();
    table.set_block_size(shape.block);
    table.set_bloom_filter(10.0, false);
    table.set_block_cache(&Cache::new_lru_cache(shape.cache));
    opts.set_block_based_table_factory(&table);
    opts.set_max_background_jobs(3);
    opts
}

pub(crate) fn config(tuning: Tuning) -> String {
    match tuning {
        Tuning::Default => CONFIG.into(),
        Tuning::DeepTree => "WAL without fsync, 4 MiB memtable, L1 8 MiB, size ratio 2, 16 KiB blocks, LZ4, bloom 10, \
                             64 MiB block cache; one value per row"
            .into(),
    }
}

fn open_db(dir: &Path, tuning: Tuning) -> Result<(DB, WriteOptions), String> {
    open_with(dir, &options(tuning))
}

fn open_with(dir: &Path, opts: &Options) -> Result<(DB, WriteOptions), String> {
    let _ = std::fs::remove_dir_all(dir);
    // The default column family opened by name, so its handle is there for batched MultiGet,
    // with these options: `DB::open_cf` would open it with RocksDB's defaults instead (4 KiB
    // blocks, no bloom filter, no compression, a 32 MiB cache), as every run from 14b570b to
    // this fix did, though its table stated the options above.
    let db = DB::open_cf_with_opts(opts, dir, [(rocksdb::DEFAULT_COLUMN_FAMILY_NAME, opts.clone())]).map_err(err)?;
    let mut write = WriteOptions::default();
    write.set_sync(false);
    Ok((db, write))
}

impl RocksStore {
    pub(crate) fn open(dir: &Path) -> Result<Self, String> {
        let (db, write) = open_db(dir, Tuning::Default)?;
        Ok(RocksStore { db, write })
    }
}

/// Microseconds writers have waited on RocksDB's background work so far: the `Cumulative
/// stall: H:M:S` line of its `rocksdb.dbstats` property (`None` if the line is missing).
fn stall_micros(db: &DB) -> Option<u64> {
    let stats = db.property_value("rocksdb.dbstats").ok()??;
    let line = stats.lines().find_map(|l| l.trim().strip_prefix("Cumulative stall:"))?;
    let hms = line.split_whitespace().next()?;
    let mut parts = hms.split(':');
    let (h, m, s) = (parts.next()?, parts.next()?, parts.next()?);
    let secs = h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?;
    Some((secs * 1e6) as u64)
}

impl Store for RocksStore {
    fn stall_micros(&self) -> Option<u64> {
        stall_micros(&self.db)
    }

    fn insert(&self, key: u64, fields: &[Vec<u8>]) -> Result<(), String> {
        self.db.put_opt(key.to_be_bytes(), encode(fields), &self.write).map_err(err)
    }

    fn read(&self, key: u64) -> Result<Option<Vec<Vec<u8>>>, String> {
        self.db.get_pinned(key.to_be_bytes()).map_err(err)?.map(|v| decode(&v)).transpose()
    }

    fn update(&self, key: u64, field: usize, value: &[u8]) -> Result<(), String> {
        let Some(mut fields) = self.read(key)? else { return Ok(()) };
        if let Some(f) = fields.get_mut(field) {
            *f = value.to_vec();
        }
        self.db.put_opt(key.to_be_bytes(), encode(&fields), &self.write).map_err(err)
    }

    fn scan(&self, start: u64, n: usize) -> Result<Vec<u64>, String> {
        let mut keys = Vec::with_capacity(n);
        let from = start.to_be_bytes();
        for item in self.db.iterator(IteratorMode::From(&from, Direction::Forward)).take(n) {
            let (k, v) = item.map_err(err)?;
            decode(&v)?;
            let k: [u8; 8] = k.as_ref().try_into().map_err(|_| "rocksdb: bad key".to_string())?;
            keys.push(u64::from_be_bytes(k));
        }
        Ok(keys)
    }
}

/// RocksDB as a [`Tables`] store: one value per row (the columns after the key, fixed-width
/// little-endian, text length-prefixed), keys big-endian with the sign bit flipped so they sort
/// as integers. Queries run in the client over an iterator, as LASER's row-store baseline does;
/// an update reads the row and writes it back.
pub(crate) struct RocksTables {
    db: DB,
    write: WriteOptions,
    def: TableDef,
}

fn row_key(k: i64) -> [u8; 8] {
    ((k as u64) ^ (1 << 63)).to_be_bytes()
}

fn encode_row(def: &TableDef, row: &[Value]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(row.len() * 4);
    for (v, (name, kind)) in row.iter().zip(&def.columns).skip(1) {
        match (kind, v) {
            (Kind::SmallInt, Value::SmallInt(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Kind::Int, Value::Int(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Kind::BigInt, Value::BigInt(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Kind::Double, Value::Double(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Kind::Text, Value::Text(s)) => {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            (_, v) => return Err(format!("rocksdb: column {name} cannot hold {v:?}")),
        }
    }
    Ok(out)
}

/// The whole row back (key first).
fn decode_row(def: &TableDef, key: &[u8], mut b: &[u8]) -> Result<Vec<Value>, String> {
    let bad = || "rocksdb: truncated row".to_string();
    let k: [u8; 8] = key.try_into().map_err(|_| "rocksdb: bad key".to_string())?;
    let mut row = Vec::with_capacity(def.columns.len());
    row.push(Value::BigInt((u64::from_be_bytes(k) ^ (1 << 63)) as i64));
    let mut take = |n: usize| -> Result<&[u8], String> {
        let (head, rest) = b.split_at_checked(n).ok_or_else(bad)?;
        b = rest;
        Ok(head)
    };
    for (_, kind) in &def.columns[1..] {
        row.push(match kind {
            Kind::SmallInt => Value::SmallInt(i16::from_le_bytes(take(2)?.try_into().map_err(|_| bad())?)),
            Kind::Int => Value::Int(i32::from_le_bytes(take(4)?.try_into().map_err(|_| bad())?)),
            Kind::BigInt => Value::BigInt(i64::from_le_bytes(take(8)?.try_into().map_err(|_| bad())?)),
            Kind::Double => Value::Double(f64::from_le_bytes(take(8)?.try_into().map_err(|_| bad())?)),
            Kind::Text => {
                let n = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad())?) as usize;
                Value::Text(String::from_utf8_lossy(take(n)?).into_owned())
            }
        });
    }
    Ok(row)
}

impl RocksTables {
    /// Microseconds writers have waited on background work so far (see [`stall_micros`]).
    pub(crate) fn stall_micros(&self) -> Option<u64> {
        stall_micros(&self.db)
    }

    pub(crate) fn open(dir: &Path, def: &TableDef, tuning: Tuning) -> Result<Self, String> {
        let (db, write) = open_db(dir, tuning)?;
        Ok(RocksTables { db, write, def: def.clone() })
    }

    /// Opened shaped like `strata-bench engine`'s strata (8 MiB files, size ratio 10); its
    /// configuration as reported.
    pub(crate) fn open_shaped(dir: &Path, def: &TableDef, shape: &EngineShape) -> Result<(Self, String), String> {
        let (db, write) = open_with(dir, &shaped(shape, 10.0, 8 << 20))?;
        let config = format!(
            "WAL without fsync, {} MiB memtable, L1 {} MiB, size ratio 10, {} KiB blocks, LZ4, bloom 10, {} MiB block \
             cache; one value per row",
            shape.memtable >> 20,
            shape.l1 >> 20,
            shape.block >> 10,
            shape.cache >> 20
        );
        Ok((RocksTables { db, write, def: def.clone() }, config))
    }

    /// One write of `rows`, synced when `sync`.
    pub(crate) fn write_rows(&self, rows: &[Vec<Value>], sync: bool) -> Result<(), String> {
        let mut batch = rocksdb::WriteBatch::default();
        for r in rows {
            let k = r.first().and_then(crate::tables::int_of).ok_or("rocksdb: row without a key")? as i64;
            batch.put(row_key(k), encode_row(&self.def, r)?);
        }
        if !sync {
            return self.db.write_opt(batch, &self.write).map_err(err);
        }
        let mut synced = WriteOptions::default();
        synced.set_sync(true);
        self.db.write_opt(batch, &synced).map_err(err)
    }

    pub(crate) fn read_row(&self, key: i64) -> Result<Option<Vec<Value>>, String> {
        let k = row_key(key);
        self.db.get_pinned(k).map_err(err)?.map(|v| decode_row(&self.def, &k, &v)).transpose()
    }

    /// Reads the rows of `keys` with RocksDB's batched MultiGet, decoding each as
    /// [`Self::read_row`] does; how many exist.
    pub(crate) fn read_rows(&self, keys: &[i64]) -> Result<usize, String> {
        let cf = self.db.cf_handle("default").ok_or("rocksdb: no default column family")?;
        let ks: Vec<[u8; 8]> = keys.iter().map(|&k| row_key(k)).collect();
        let mut found = 0;
        for (k, v) in ks.iter().zip(self.db.batched_multi_get_cf(cf, &ks, false)) {
            if let Some(v) = v.map_err(err)? {
                decode_row(&self.def, k, &v)?;
                found += 1;
            }
        }
        Ok(found)
    }
}

/// Where a scan for `q` starts.
fn first_key(q: &Query) -> [u8; 8] {
    row_key(q.keys.map_or(i64::MIN, |(lo, _)| lo))
}

/// Answers `q` in the client from an iterator started at [`first_key`].
fn answer(
    def: &TableDef,
    q: &Query,
    rows: impl Iterator<Item = Result<(Box<[u8]>, Box<[u8]>), rocksdb::Error>>,
) -> Result<Answer, String> {
    let mut acc = Acc::new(q);
    let to = q.keys.map(|(_, hi)| row_key(hi));
    for item in rows {
        let (k, v) = item.map_err(err)?;
        if to.is_some_and(|to| k.as_ref() > to.as_slice()) {
            break;
        }
        acc.add(&decode_row(def, &k, &v)?);
    }
    Ok(acc.finish())
}

impl Tables for RocksTables {
    fn load(&self, rows: &[Vec<Value>]) -> Result<(), String> {
        self.write_rows(rows, false)
    }

    fn counters(&self) -> Vec<(&'static str, f64, &'static str)> {
        self.stall_micros().map(|m| ("write stalls", m as f64 / 1e6, "s")).into_iter().collect()
    }

    fn settle(&self, compact: bool) -> Result<(), String> {
        if compact {
            self.db.compact_range(None::<&[u8]>, None::<&[u8]>);
        }
        self.db.wait_for_compact(&rocksdb::WaitForCompactOptions::default()).map_err(err)
    }

    fn insert(&self, row: &[Value]) -> Result<(), String> {
        let k = row.first().and_then(crate::tables::int_of).ok_or("rocksdb: row without a key")? as i64;
        self.db.put_opt(row_key(k), encode_row(&self.def, row)?, &self.write).map_err(err)
    }

    fn update(&self, key: i64, col: usize, value: &Value) -> Result<(), String> {
        let Some(mut row) = self.read_row(key)? else { return Ok(()) };
        if let Some(v) = row.get_mut(col) {
            *v = value.clone();
        }
        self.db.put_opt(row_key(key), encode_row(&self.def, &row)?, &self.write).map_err(err)
    }

    fn get(&self, key: i64, cols: &[usize]) -> Result<Option<Vec<Value>>, String> {
        Ok(self.read_row(key)?.map(|r| cols.iter().map(|&c| r[c].clone()).collect()))
    }

    fn query(&self, q: &Query) -> Result<Answer, String> {
        answer(&self.def, q, self.db.iterator(IteratorMode::From(&first_key(q), Direction::Forward)))
    }
}

/// RocksDB as a [`Tables`] store through its transaction API, for `lstore`'s update
/// transactions: a pessimistic `TransactionDB` (RocksDB's default kind) with the same options and
/// row encoding as [`RocksTables`]. A transaction takes a snapshot when it begins, reads the rows
/// it will write with `get_for_update` (locking them, in key order so two transactions cannot
/// deadlock, and failing with `Busy` when one changed after the snapshot: snapshot isolation's
/// first updater wins) and the others at its snapshot, then writes and commits.
pub(crate) struct RocksTxnTables {
    db: rocksdb::TransactionDB,
    write: WriteOptions,
    def: TableDef,
}

/// The configuration, as reported next to the figures.
pub(crate) const TXN_CONFIG: &str = "TransactionDB (pessimistic, snapshot per transaction, 1 s lock timeout), WAL \
                                     without fsync, 64 MiB memtable, L1 64 MiB, size ratio 10, 16 KiB blocks, LZ4, \
                                     bloom 10, 64 MiB block cache; one value per row";

impl RocksTxnTables {
    pub(crate) fn open(dir: &Path, def: &TableDef) -> Result<Self, String> {
        let _ = std::fs::remove_dir_all(dir);
        let db =
            rocksdb::TransactionDB::open(&options(Tuning::Default), &rocksdb::TransactionDBOptions::default(), dir)
                .map_err(err)?;
        let mut write = WriteOptions::default();
        write.set_sync(false);
        Ok(RocksTxnTables { db, write, def: def.clone() })
    }
}

/// Why a transaction stopped short of its commit.
enum Stop {
    /// RocksDB aborted it: a write conflict, a lock it waited for too long, a deadlock.
    Abort,
    Fail(String),
}

impl From<rocksdb::Error> for Stop {
    fn from(e: rocksdb::Error) -> Stop {
        match e.kind() {
            rocksdb::ErrorKind::Busy | rocksdb::ErrorKind::TimedOut | rocksdb::ErrorKind::TryAgain => Stop::Abort,
            _ => Stop::Fail(err(e)),
        }
    }
}

impl From<String> for Stop {
    fn from(e: String) -> Stop {
        Stop::Fail(e)
    }
}

impl Tables for RocksTxnTables {
    fn load(&self, rows: &[Vec<Value>]) -> Result<(), String> {
        let mut batch = rocksdb::WriteBatchWithTransaction::<true>::default();
        for r in rows {
            let k = r.first().and_then(crate::tables::int_of).ok_or("rocksdb: row without a key")? as i64;
            batch.put(row_key(k), encode_row(&self.def, r)?);
        }
        self.db.write_opt(batch, &self.write).map_err(err)
    }

    fn settle(&self, _compact: bool) -> Result<(), String> {
        Ok(())
    }

    fn insert(&self, row: &[Value]) -> Result<(), String> {
        self.load(&[row.to_vec()])
    }

    fn update(&self, key: i64, col: usize, value: &Value) -> Result<(), String> {
        let Some(mut row) = self.get(key, &(0..self.def.columns.len()).collect::<Vec<_>>())? else { return Ok(()) };
        if let Some(v) = row.get_mut(col) {
            *v = value.clone();
        }
        self.db.put_opt(row_key(key), encode_row(&self.def, &row)?, &self.write).map_err(err)
    }

    fn get(&self, key: i64, cols: &[usize]) -> Result<Option<Vec<Value>>, String> {
        let k = row_key(key);
        let row = self.db.get_pinned(k).map_err(err)?.map(|v| decode_row(&self.def, &k, &v)).transpose()?;
        Ok(row.map(|r| cols.iter().map(|&c| r[c].clone()).collect()))
    }

    fn update_txn(&self, reads: &[i64], writes: &[(i64, Vec<(usize, Value)>)], counter: usize) -> Result<Txn, String> {
        let mut topts = rocksdb::TransactionOptions::default();
        topts.set_snapshot(true);
        let tx = self.db.transaction_opt(&self.write, &topts);
        let run = || -> Result<(), Stop> {
            let row = |k: i64, got: Option<rocksdb::DBPinnableSlice<'_>>| -> Result<(i64, Vec<Value>), Stop> {
                let v = got.ok_or_else(|| format!("rocksdb: row {k} is missing"))?;
                Ok((k, decode_row(&self.def, &row_key(k), &v)?))
            };
            let mut locked: Vec<i64> = writes.iter().map(|(k, _)| *k).collect();
            locked.sort_unstable();
            locked.dedup();
            let mut read = Vec::with_capacity(reads.len());
            for &k in &locked {
                read.push(row(k, tx.get_pinned_for_update(row_key(k), true)?)?);
            }
            let snapshot = tx.snapshot();
            let mut ropts = rocksdb::ReadOptions::default();
            ropts.set_snapshot(&snapshot);
            for &k in reads.iter().filter(|k| !locked.contains(k)) {
                read.push(row(k, tx.get_pinned_opt(row_key(k), &ropts)?)?);
            }
            for (k, set) in writes {
                let count = next_count(&read, *k, counter)?;
                // next_count found the row among those read.
                let mut row = read.iter().find(|(r, _)| r == k).map(|(_, row)| row.clone()).unwrap_or_default();
                for (c, v) in set.iter().chain(std::iter::once(&(counter, Value::BigInt(count)))) {
                    if let Some(x) = row.get_mut(*c) {
                        *x = v.clone();
                    }
                }
                tx.put(row_key(*k), encode_row(&self.def, &row)?)?;
            }
            Ok(())
        };
        match run().and_then(|()| tx.commit().map_err(Stop::from)) {
            Ok(()) => Ok(Txn::Committed),
            Err(Stop::Abort) => Ok(Txn::Aborted),
            Err(Stop::Fail(e)) => Err(e),
        }
    }

    fn query(&self, q: &Query) -> Result<Answer, String> {
        answer(&self.def, q, self.db.iterator(IteratorMode::From(&first_key(q), Direction::Forward)))
    }
}

/// RocksDB for `write-amp`: shaped like strata's run ([`Shape`](crate::write_amp::Shape)), no
/// compression, statistics on, levels sized statically (not RocksDB's dynamic level sizing, so
/// level i holds `l1 × fanout^(i-1)` as in strata); compaction priority is RocksDB's default.
pub(crate) struct WriteAmpDb {
    db: DB,
    opts: Options,
    write: WriteOptions,
}

impl WriteAmpDb {
    pub(crate) fn open(dir: &Path, shape: &crate::write_amp::Shape) -> Result<Self, String> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.enable_statistics();
        opts.set_write_buffer_size(shape.memtable as usize);
        opts.set_max_bytes_for_level_base(shape.l1);
        opts.set_max_bytes_for_level_multiplier(shape.fanout as f64);
        opts.set_target_file_size_base(shape.file);
        opts.set_num_levels(shape.levels as i32);
        opts.set_level_compaction_dynamic_level_bytes(false);
        opts.set_compression_type(DBCompressionType::None);
        opts.set_max_background_jobs(3);
        let _ = std::fs::remove_dir_all(dir);
        let db = DB::open(&opts, dir).map_err(err)?;
        let mut write = WriteOptions::default();
        write.set_sync(false);
        Ok(WriteAmpDb { db, opts, write })
    }

    pub(crate) fn put(&self, key: i64, value: &[u8]) -> Result<(), String> {
        self.db.put_opt(row_key(key), value, &self.write).map_err(err)
    }

    /// Flushes, waits for compactions to finish, and reads the byte counters.
    pub(crate) fn finish(&self) -> Result<crate::write_amp::Written, String> {
        use rocksdb::properties::{COMPACTION_PENDING, NUM_RUNNING_COMPACTIONS, NUM_RUNNING_FLUSHES};
        use rocksdb::statistics::Ticker;
        self.db.flush().map_err(err)?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1800);
        loop {
            let busy = [COMPACTION_PENDING, NUM_RUNNING_COMPACTIONS, NUM_RUNNING_FLUSHES]
                .into_iter()
                .map(|p| self.db.property_int_value(p).map(|v| v.unwrap_or(0)))
                .collect::<Result<Vec<u64>, _>>()
                .map_err(err)?;
            if busy.iter().all(|&n| n == 0) {
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err("rocksdb: compactions still pending after 30 minutes".into());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let flushed = self.opts.get_ticker_count(Ticker::FlushWriteBytes);
        let per_level = self
            .db
            .property_value("rocksdb.cfstats")
            .map_err(err)?
            .map(|stats| crate::write_amp::level_writes(&stats))
            .unwrap_or_default();
        Ok(crate::write_amp::Written {
            stall_micros: stall_micros(&self.db),
            per_level,
            flushed,
            total: flushed + self.opts.get_ticker_count(Ticker::CompactWriteBytes),
            user: self.opts.get_ticker_count(Ticker::BytesWritten),
            compaction_read: Some(self.opts.get_ticker_count(Ticker::CompactReadBytes)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The database the peer opens has the options its table states, in the column family the
    /// reads go to (found when `DB::open_cf` gave it RocksDB's defaults).
    #[test]
    fn the_default_column_family_has_the_stated_options() {
        let dir = tempfile::tempdir().unwrap();
        let store = RocksStore::open(&dir.path().join("db")).unwrap();
        let cf = store.db.cf_handle(rocksdb::DEFAULT_COLUMN_FAMILY_NAME).unwrap();
        let cache = store.db.property_int_value_cf(cf, "rocksdb.block-cache-capacity").unwrap();
        assert_eq!(cache, Some(64 << 20));
        let options = std::fs::read_dir(dir.path().join("db"))
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.file_name().to_string_lossy().starts_with("OPTIONS-"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .unwrap();
        for want in ["block_size=16384", "compression=kLZ4Compression", "write_buffer_size=67108864"] {
            assert!(options.contains(want), "the options file lacks {want}");
        }
    }
}
