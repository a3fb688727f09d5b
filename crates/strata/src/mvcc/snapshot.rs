//! Live snapshots and the visible sequence number.
//!
//! The visible sequence is the newest sequence number whose write is fully in the memtable; it
//! only grows. Snapshots are registered and compaction reads the list under the same lock, so a
//! snapshot is either in the list compaction sees or was taken after every compaction input was
//! visible (see [`chain::collapse`](super::chain::collapse)).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::sync::{site, Mutex};

/// The registry of live snapshots plus the visible sequence number.
#[derive(Debug)]
pub(crate) struct SnapshotList {
    visible: AtomicU64,
    /// Versions at or below this sequence number may have been merged by flush or compaction
    /// (only registered snapshots pin older ones), so a new snapshot cannot read below it.
    floor: AtomicU64,
    live: Mutex<BTreeMap<u64, usize>>,
}

impl Default for SnapshotList {
    fn default() -> Self {
        SnapshotList {
            visible: AtomicU64::new(0),
            floor: AtomicU64::new(0),
            live: Mutex::new(&site::SNAPSHOTS, BTreeMap::new()),
        }
    }
}

impl SnapshotList {
    pub(crate) fn visible(&self) -> u64 {
        self.visible.load(Ordering::Acquire)
    }

    /// Publishes writes up to `seq` to readers.
    pub(crate) fn publish(&self, seq: u64) {
        self.visible.store(seq, Ordering::Release);
    }

    /// The oldest sequence number a new snapshot may read at.
    pub(crate) fn floor(&self) -> u64 {
        self.floor.load(Ordering::Acquire)
    }

    /// Versions up to `seq` may now be merged (a flush or compaction is about to).
    pub(crate) fn raise_floor(&self, seq: u64) {
        self.floor.fetch_max(seq, Ordering::AcqRel);
    }

    /// Registers a snapshot at `seq` if every version it needs is still kept (`seq` between the
    /// floor and the visible sequence number).
    fn acquire_at(&self, seq: u64) -> bool {
        let mut live = self.live.lock();
        if seq < self.floor() || seq > self.visible() {
            return false;
        }
        *live.entry(seq).or_insert(0) += 1;
        true
    }

    fn acquire(&self) -> u64 {
        let mut live = self.live.lock();
        let seq = self.visible();
        *live.entry(seq).or_insert(0) += 1;
        seq
    }

    fn release(&self, seq: u64) {
        let mut live = self.live.lock();
        if let Some(n) = live.get_mut(&seq) {
            *n -= 1;
            if *n == 0 {
                live.remove(&seq);
            }
        }
    }

    /// Runs `f` with the visible sequence number and the oldest live snapshot, atomically with
    /// respect to registering snapshots.
    pub(crate) fn with_oldest<T>(&self, f: impl FnOnce(u64, Option<u64>) -> T) -> T {
        let live = self.live.lock();
        f(self.visible(), live.keys().next().copied())
    }

    /// The live snapshot sequence numbers, ascending.
    pub(crate) fn capture(&self) -> Vec<u64> {
        self.live.lock().keys().copied().collect()
    }
}

/// A consistent read point. Reads through it see exactly the writes with a sequence number at or
/// below [`Snapshot::seq`]. Compaction keeps the versions it needs until it is dropped.
#[derive(Debug)]
pub struct Snapshot {
    seq: u64,
    list: Arc<SnapshotList>,
}

impl Snapshot {
    pub(crate) fn new(list: Arc<SnapshotList>) -> Self {
        let seq = list.acquire();
        Snapshot { seq, list }
    }

    /// A snapshot at an earlier sequence number, if the versions it needs are still kept.
    pub(crate) fn at(list: Arc<SnapshotList>, seq: u64) -> Option<Self> {
        list.acquire_at(seq).then_some(Snapshot { seq, list })
    }

    /// The sequence number this snapshot reads at.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether the snapshot was taken on the database owning `list`.
    pub(crate) fn belongs_to(&self, list: &Arc<SnapshotList>) -> bool {
        Arc::ptr_eq(&self.list, list)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.list.release(self.seq);
    }
}
