//! RocksDB (the `rocksdb` crate with its bundled RocksDB) as a YCSB store, configured like
//! strata's defaults: WAL on without fsync per write, 64 MiB memtable, 16 KiB blocks, LZ4, bloom
//! filters of 10 bits per key, 64 MiB block cache. A record is one value per key (a row store, as
//! LASER's baseline): the fields, each prefixed by its length. An update reads the record,
//! replaces one field and writes it back, as YCSB's RocksDB binding does.

use std::path::Path;

use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Direction, IteratorMode, Options, WriteOptions, DB};

use crate::ycsb::Store;

/// The configuration, as reported next to the figures.
pub(crate) const CONFIG: &str = "WAL without fsync, 64 MiB memtable and block cache, 16 KiB blocks, LZ4, bloom 10";

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

impl RocksStore {
    pub(crate) fn open(dir: &Path) -> Result<Self, String> {
        let _ = std::fs::remove_dir_all(dir);
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_write_buffer_size(64 << 20);
        opts.set_compression_type(DBCompressionType::Lz4);
        let mut table = BlockBasedOptions::default();
        table.set_block_size(16 << 10);
        table.set_bloom_filter(10.0, false);
        table.set_block_cache(&Cache::new_lru_cache(64 << 20));
        opts.set_block_based_table_factory(&table);
        opts.set_max_background_jobs(3);
        let db = DB::open(&opts, dir).map_err(err)?;
        let mut write = WriteOptions::default();
        write.set_sync(false);
        Ok(RocksStore { db, write })
    }
}

impl Store for RocksStore {
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
