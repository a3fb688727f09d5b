//! The block cache shared by every SST of a database: decoded data blocks keyed by
//! (file number, block offset), bounded by bytes. Also counts block reads from disk, in total
//! and per thread ([`thread_io`]).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3Builder;

use super::block::Block;
use crossbeam_queue::SegQueue;

use crate::sync::shared_write;
use crate::tier::MAX_TIERS;

/// A pin of the block cache: blocks found under it stay alive until it is dropped, without a
/// reference count taken on each (pinning writes only the pinning thread's own slot).
pub(crate) type CachePin<'a> = papaya::LocalGuard<'a>;

/// A block read under a [`CachePin`]: borrowed from the cache, or read from the file.
pub(crate) enum BlockRef<'g> {
    Cached(&'g Arc<Block>),
    Read(Arc<Block>),
}

impl std::ops::Deref for BlockRef<'_> {
    type Target = Block;

    fn deref(&self) -> &Block {
        match self {
            BlockRef::Cached(b) => b,
            BlockRef::Read(b) => b,
        }
    }
}

/// A cached block and its reference bit.
struct Cached {
    block: Arc<Block>,
    charge: u64,
    /// Set by a hit (only when clear), cleared when eviction passes the entry over.
    referenced: AtomicBool,
}

/// One shard's eviction order, lock-free: a small FIFO that new blocks enter and a main one
/// that blocks hit while in the small one move to (S3-FIFO, without its ghost queue).
struct Shard {
    small: SegQueue<(u64, u64)>,
    main: SegQueue<(u64, u64)>,
    small_bytes: AtomicU64,
    main_bytes: AtomicU64,
    capacity: u64,
}

/// Bytes per shard below which the cache has fewer shards (a shard holds some blocks at least).
const SHARD_BYTES: usize = 1 << 20;

/// The small queue's share of a shard: a tenth.
const SMALL_SHARE: u64 = 10;

/// Entries one insert looks at when making room, at most (others make the rest).
const EVICTION_STEPS: usize = 64;

/// Decoded blocks, bounded by their approximate memory.
///
/// Lookups are lock-free: a concurrent hash map read under a pin, and a hit sets the entry's
/// reference bit only if it is clear (a block hit again and again is not written again).
/// Inserts are lock-free too: the block goes into the map and its key into its shard's small
/// FIFO, and the inserter makes room. A block leaving the small FIFO goes to the main one if
/// it was hit meanwhile and out of the cache if not, so blocks read once and never again (most
/// of a skewed workload's misses) leave soon without pushing out the blocks read again and
/// again; the main FIFO gives each block hit since it last came round another turn.
pub(crate) struct BlockCache {
    map: papaya::HashMap<(u64, u64), Cached, Xxh3Builder>,
    /// Empty when caching is disabled.
    shards: Box<[Shard]>,
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
        let n = if capacity == 0 { 0 } else { (capacity / SHARD_BYTES).clamp(1, 64).next_power_of_two().min(64) };
        let per = (capacity / n.max(1)) as u64;
        let shards = (0..n)
            .map(|_| Shard {
                small: SegQueue::new(),
                main: SegQueue::new(),
                small_bytes: AtomicU64::new(0),
                main_bytes: AtomicU64::new(0),
                capacity: per,
            })
            .collect();
        let tier_reads = std::array::from_fn(|_| AtomicU64::new(0));
        BlockCache {
            map: papaya::HashMap::builder().hasher(Xxh3Builder::new()).build(),
            shards,
            reads: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            tier_reads,
        }
    }

    /// A pin for [`Self::get_pinned`].
    pub(crate) fn pin(&self) -> CachePin<'_> {
        self.map.guard()
    }

    /// The cached block at (`file`, `offset`), borrowed for as long as `pin` lives.
    pub(crate) fn get_pinned<'g>(&self, file: u64, offset: u64, pin: &'g CachePin<'_>) -> Option<&'g Arc<Block>> {
        let c = self.map.get(&(file, offset), pin)?;
        if !c.referenced.load(Ordering::Relaxed) {
            shared_write();
            c.referenced.store(true, Ordering::Relaxed);
        }
        Some(&c.block)
    }

    /// The cached block at (`file`, `offset`), owned.
    pub(crate) fn get(&self, file: u64, offset: u64) -> Option<Arc<Block>> {
        let pin = self.pin();
        let b = self.get_pinned(file, offset, &pin)?;
        shared_write();
        Some(b.clone())
    }

    fn shard(&self, file: u64, offset: u64) -> Option<&Shard> {
        let h = (file.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ offset).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let n = self.shards.len();
        (n > 0).then(|| &self.shards[(h >> 32) as usize & (n - 1)])
    }

    /// Caches `b` at (`file`, `offset`) unless a block is there already, then makes room.
    pub(crate) fn insert(&self, file: u64, offset: u64, b: Arc<Block>) {
        let Some(shard) = self.shard(file, offset) else { return };
        let pin = self.pin();
        let charge = b.charge() as u64;
        let cached = Cached { block: b, charge, referenced: AtomicBool::new(false) };
        // The entry is in the map before its key is queued, so whoever takes the key off a
        // queue finds it; only that one removes it.
        if self.map.try_insert((file, offset), cached, &pin).is_err() {
            return;
        }
        shared_write();
        shard.small_bytes.fetch_add(charge, Ordering::Relaxed);
        shard.small.push((file, offset));
        self.make_room(shard, &pin);
    }

    /// Takes entries off the shard's queues while it holds more than its capacity (for at most
    /// [`EVICTION_STEPS`] entries).
    fn make_room(&self, shard: &Shard, pin: &CachePin<'_>) {
        for _ in 0..EVICTION_STEPS {
            let (small, main) = (shard.small_bytes.load(Ordering::Relaxed), shard.main_bytes.load(Ordering::Relaxed));
            if small + main <= shard.capacity {
                return;
            }
            let from_small = small > shard.capacity / SMALL_SHARE || main == 0;
            let queue = if from_small { &shard.small } else { &shard.main };
            let Some(k) = queue.pop() else { return };
            let Some(c) = self.map.get(&k, pin) else { continue };
            let hit = c.referenced.swap(false, Ordering::Relaxed);
            match (from_small, hit) {
                (true, true) => {
                    shard.small_bytes.fetch_sub(c.charge, Ordering::Relaxed);
                    shard.main_bytes.fetch_add(c.charge, Ordering::Relaxed);
                    shard.main.push(k);
                }
                (false, true) => shard.main.push(k),
                (true, false) | (false, false) => {
                    let bytes = if from_small { &shard.small_bytes } else { &shard.main_bytes };
                    bytes.fetch_sub(c.charge, Ordering::Relaxed);
                    self.map.remove(&k, pin);
                }
            }
        }
    }

    /// Bytes currently charged to the cache.
    pub(crate) fn charged(&self) -> u64 {
        self.shards.iter().map(|s| s.small_bytes.load(Ordering::Relaxed) + s.main_bytes.load(Ordering::Relaxed)).sum()
    }

    /// Counts a data block read from a file on `tier`.
    pub(crate) fn count_read(&self, tier: u8, bytes: usize) {
        shared_write();
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
