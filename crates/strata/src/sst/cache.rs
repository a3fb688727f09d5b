//! The block cache shared by every SST of a database: decoded data blocks keyed by
//! (file number, block offset), bounded by bytes. Also counts block reads from disk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::block::Block;

#[derive(Clone)]
struct ByCharge;

impl Weighter<(u64, u64), Arc<Block>> for ByCharge {
    fn weight(&self, _k: &(u64, u64), v: &Arc<Block>) -> u64 {
        v.charge() as u64
    }
}

/// Decoded blocks, bounded by their approximate memory.
pub(crate) struct BlockCache {
    cache: Option<Cache<(u64, u64), Arc<Block>, ByCharge>>,
    /// Data blocks read from files (cache misses).
    pub(crate) reads: AtomicU64,
    /// Bytes of those reads.
    pub(crate) read_bytes: AtomicU64,
}

impl BlockCache {
    /// A cache of about `capacity` bytes; 0 disables caching.
    pub(crate) fn new(capacity: usize) -> Self {
        let cache = (capacity > 0).then(|| Cache::with_weighter((capacity / 8192).max(16), capacity as u64, ByCharge));
        BlockCache { cache, reads: AtomicU64::new(0), read_bytes: AtomicU64::new(0) }
    }

    pub(crate) fn get(&self, file: u64, offset: u64) -> Option<Arc<Block>> {
        self.cache.as_ref()?.get(&(file, offset))
    }

    pub(crate) fn insert(&self, file: u64, offset: u64, b: Arc<Block>) {
        if let Some(c) = &self.cache {
            c.insert((file, offset), b);
        }
    }

    /// Bytes currently charged to the cache.
    pub(crate) fn charged(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.weight())
    }

    pub(crate) fn count_read(&self, bytes: usize) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.read_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}
