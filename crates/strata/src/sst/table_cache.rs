//! Open SST readers by file number. Every reader stays open until its file is deleted; index and
//! filter blocks live with the reader, data blocks in the shared block cache.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::sync::{site, Mutex, PerCore};

use xxhash_rust::xxh3::Xxh3Builder;

use crate::error::Result;
use crate::sst::cache::BlockCache;
use crate::sst::keyset::KeySet;
use crate::sst::reader::SstReader;
use crate::tier::heat::HeatMap;
use crate::vfs::Fs;

/// File name of SST number `n`.
pub(crate) fn sst_name(n: u64) -> String {
    format!("{n:06}.sst")
}

/// How point lookups went, file by file, since open, kept per core: (files left out because
/// every version in them is newer than the read's snapshot, by point lookups and the runs of
/// scans; files a bloom filter ruled out; files whose data blocks a lookup searched).
#[derive(Debug)]
pub(crate) struct ProbeCounters(PerCore);

impl Default for ProbeCounters {
    fn default() -> Self {
        ProbeCounters(PerCore::new(3))
    }
}

impl ProbeCounters {
    /// Adds one read's counts.
    pub(crate) fn add(&self, snapshot: u64, bloom: u64, probed: u64) {
        for (i, n) in [snapshot, bloom, probed].into_iter().enumerate() {
            if n > 0 {
                self.0.add(i, n);
            }
        }
    }

    /// (left out by the snapshot filter, ruled out by bloom filters, searched).
    pub(crate) fn get(&self) -> (u64, u64, u64) {
        (self.0.get(0), self.0.get(1), self.0.get(2))
    }
}

/// A pin of the open readers: readers found under it stay alive until it is dropped.
pub(crate) type ReaderPin<'a> = papaya::LocalGuard<'a>;

/// Open readers, shared by all threads.
pub(crate) struct TableCache {
    fs: Arc<dyn Fs>,
    /// Each tier's directory, by tier (see [`crate::tier`]); one without tiers.
    dirs: Vec<PathBuf>,
    /// The tier of every file placed off the first tier, by number.
    placed: Mutex<HashMap<u64, u8>>,
    /// Every file's access-histogram bucket.
    pub(crate) heat: HeatMap,
    pub(crate) blocks: Arc<BlockCache>,
    pub(crate) probes: ProbeCounters,
    /// Read lock-free under a pin ([`Self::reader`]): a point read finds its files' readers
    /// without a lock or a reference count.
    open: papaya::HashMap<u64, Arc<SstReader>, Xxh3Builder>,
    /// Exact key sets of the Level-0 files written since open.
    key_sets: Mutex<HashMap<u64, Arc<KeySet>>>,
    /// For Level-0 files flushed since open: the hashes of their keys that had versions in
    /// older files when flushed (see `compaction::supersede::catch_up_compaction`).
    older_keys: Mutex<HashMap<u64, Arc<KeySet>>>,
}

impl TableCache {
    /// A cache over the files of tiers in `dirs` (at least one), whose access histograms
    /// halve every `half_life`.
    pub(crate) fn new(fs: Arc<dyn Fs>, dirs: Vec<PathBuf>, blocks: Arc<BlockCache>, half_life: Duration) -> Self {
        TableCache {
            fs,
            dirs,
            placed: Mutex::new(&site::TABLE_CACHE, HashMap::new()),
            heat: HeatMap::new(half_life),
            blocks,
            probes: ProbeCounters::default(),
            open: papaya::HashMap::builder().hasher(Xxh3Builder::new()).build(),
            key_sets: Mutex::new(&site::TABLE_CACHE, HashMap::new()),
            older_keys: Mutex::new(&site::TABLE_CACHE, HashMap::new()),
        }
    }

    /// The path of file `number`, on the tier it was placed on.
    pub(crate) fn path(&self, number: u64) -> PathBuf {
        self.tier_dir(self.tier_of(number)).join(sst_name(number))
    }

    /// The directory of tier `tier` (the last one for a tier beyond the list).
    pub(crate) fn tier_dir(&self, tier: u8) -> &Path {
        let i = usize::from(tier).min(self.dirs.len().saturating_sub(1));
        self.dirs.get(i).map_or(Path::new("."), PathBuf::as_path)
    }

    /// Every tier's directory, by tier.
    pub(crate) fn tier_dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Records that file `number` lives (or is being written) on `tier`.
    pub(crate) fn place(&self, number: u64, tier: u8) {
        let mut placed = self.placed.lock();
        if tier == 0 {
            placed.remove(&number);
        } else {
            placed.insert(number, tier);
        }
    }

    /// The tier file `number` was placed on (0 when never placed elsewhere).
    pub(crate) fn tier_of(&self, number: u64) -> u8 {
        self.placed.lock().get(&number).copied().unwrap_or(0)
    }

    /// The reader of file `number`, opening it on first use.
    pub(crate) fn get(&self, number: u64) -> Result<Arc<SstReader>> {
        let pin = self.pin();
        let r = self.reader(number, &pin)?;
        crate::sync::shared_write();
        Ok(r.clone())
    }

    /// A pin for [`Self::reader`].
    pub(crate) fn pin(&self) -> ReaderPin<'_> {
        self.open.guard()
    }

    /// The reader of file `number`, opening it on first use, borrowed for as long as `pin` lives.
    pub(crate) fn reader<'g>(&self, number: u64, pin: &'g ReaderPin<'_>) -> Result<&'g Arc<SstReader>> {
        if let Some(r) = self.open.get(&number, pin) {
            return Ok(r);
        }
        let file = (number, self.tier_of(number), self.heat.of(number));
        let r = SstReader::open(self.fs.as_ref(), &self.path(number), file, self.blocks.clone())?;
        Ok(self.open.get_or_insert(number, r, pin))
    }

    /// Keeps the exact key set of file `number`, made from its key `hashes`.
    pub(crate) fn set_key_set(&self, number: u64, hashes: Vec<u64>) {
        if let Some(set) = KeySet::new(hashes) {
            self.key_sets.lock().insert(number, Arc::new(set));
        }
    }

    /// The exact key set of file `number`, if one is kept.
    pub(crate) fn key_set(&self, number: u64) -> Option<Arc<KeySet>> {
        self.key_sets.lock().get(&number).cloned()
    }

    /// Keeps, for Level-0 file `number`, which of its keys had versions in older files.
    pub(crate) fn set_older_keys(&self, number: u64, set: Arc<KeySet>) {
        self.older_keys.lock().insert(number, set);
    }

    /// Which keys of file `number` had versions in older files when it was flushed, if kept.
    pub(crate) fn older_keys(&self, number: u64) -> Option<Arc<KeySet>> {
        self.older_keys.lock().get(&number).cloned()
    }

    /// Bytes held by key sets (each shared set counted once).
    pub(crate) fn key_set_bytes(&self) -> usize {
        let older = self.older_keys.lock();
        let mut shared: Vec<&Arc<KeySet>> = older.values().collect();
        shared.sort_by_key(|s| Arc::as_ptr(s));
        shared.dedup_by_key(|s| Arc::as_ptr(s));
        self.key_sets.lock().values().map(|s| s.bytes()).sum::<usize>()
            + shared.iter().map(|s| s.bytes()).sum::<usize>()
    }

    /// Approximate bytes the open files hold outside the block cache (indexes with their zone
    /// maps, bloom filters).
    pub(crate) fn reader_bytes(&self) -> usize {
        self.open.pin().values().map(|r| r.memory()).sum()
    }

    /// Forgets a deleted file.
    pub(crate) fn evict(&self, number: u64) {
        self.placed.lock().remove(&number);
        self.heat.forget(number);
        self.key_sets.lock().remove(&number);
        self.older_keys.lock().remove(&number);
        self.open.pin().remove(&number);
    }
}
