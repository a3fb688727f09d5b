//! The block cache shared by every SST of a database: decoded data blocks keyed by
//! (file number, block offset), bounded by bytes. Also counts block reads from disk, in total
//! and per thread ([`thread_io`]).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::block::Block;
use crate::tier::MAX_TIERS;

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
    /// Those reads by the storage tier of their file.
    pub(crate) tier_reads: [AtomicU64; MAX_TIERS],
}

impl BlockCache {
    /// A cache of about `capacity` bytes; 0 disables caching.
    pub(crate) fn new(capacity: usize) -> Self {
        let cache = (capacity > 0).then(|| Cache::with_weighter((capacity / 8192).max(16), capacity as u64, ByCharge));
        let tier_reads = std::array::from_fn(|_| AtomicU64::new(0));
        BlockCache { cache, reads: AtomicU64::new(0), read_bytes: AtomicU64::new(0), tier_reads }
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

    /// Counts a data block read from a file on `tier`.
    pub(crate) fn count_read(&self, tier: u8, bytes: usize) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = self.tier_reads.get(usize::from(tier)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.read_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        THREAD_IO.with(|c| {
            let io = c.get();
            c.set(ThreadIo { block_reads: io.block_reads + 1, block_read_bytes: io.block_read_bytes + bytes as u64 });
        });
    }
}

thread_local! {
    static THREAD_IO: Cell<ThreadIo> = const { Cell::new(ThreadIo { block_reads: 0, block_read_bytes: 0 }) };
}

/// Data blocks the calling thread has read from files (block-cache misses), over every database
/// it used since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadIo {
    /// Blocks read.
    pub block_reads: u64,
    /// Bytes of those blocks as stored.
    pub block_read_bytes: u64,
}

impl ThreadIo {
    /// What was read between `earlier` and `self`.
    pub fn since(self, earlier: ThreadIo) -> ThreadIo {
        ThreadIo {
            block_reads: self.block_reads.saturating_sub(earlier.block_reads),
            block_read_bytes: self.block_read_bytes.saturating_sub(earlier.block_read_bytes),
        }
    }
}

/// The calling thread's block reads so far: the difference around a point read or a scan on
/// one thread is that query's IO, apart from background work and other threads' queries (which
/// [`crate::Stats::block_reads`] includes). Work a scan hands to the scan pool (partitioned and
/// shared analytical scans) counts on the pool's threads, not the caller's.
pub fn thread_io() -> ThreadIo {
    THREAD_IO.with(Cell::get)
}
