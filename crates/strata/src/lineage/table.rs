//! A lineage table: the primary index from key to base RID, the update ranges, and the writer's
//! state. Writes arrive from the commit leader one at a time, in sequence order, so the writer
//! needs no synchronization with itself; readers and the lineage thread read without locks.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::sync::{site, Mutex};
use crossbeam_skiplist::SkipMap;
use xxhash_rust::xxh3::Xxh3Builder;

use arc_swap::ArcSwap;

use super::partition;
use super::range::{OpenBase, Range};
use crate::catalog::TableInfo;
use crate::codec::DecodeResult;
use crate::mvcc::Kind;
use crate::types::row::{decode_row, Cells};
use crate::types::Value;

/// What only the writer touches.
#[derive(Default)]
struct Writer {
    /// The open base of the range being filled.
    open: Option<Arc<OpenBase>>,
    /// Base records so far (the next RID).
    next_rid: u64,
    last_key: Option<Box<[u8]>>,
}

/// A table's ranges as a reader sees them ([`LineageTable::view`]).
pub(crate) struct View(pub Vec<Arc<Range>>, u64);

impl View {
    /// The oldest sequence number every range here answers: the newest cut any of them was
    /// rebased at ([`LineageTable::replace`]).
    pub(crate) fn floor(&self) -> u64 {
        self.1
    }

    /// The range and offset of a RID.
    pub(crate) fn locate(&self, rid: u64, cap: usize) -> Option<(&Arc<Range>, usize)> {
        let cap = cap as u64;
        self.0.get((rid / cap) as usize).map(|r| (r, (rid % cap) as usize))
    }

    /// For a table whose RID order is key order at `seq`: the ranges holding keys in
    /// `[lower, upper)` at `seq`, as a range of range indexes.
    pub(crate) fn ranges_between(&self, lower: &[u8], upper: Option<&[u8]>, seq: u64) -> std::ops::Range<usize> {
        // Rows inserted after `seq` are a suffix of the RIDs (and may be out of order): look
        // only at the ranges holding rows inserted before.
        let n = partition(self.0.len(), |i| self.0[i].visible_len(seq) > 0);
        // The first range whose last key is at or above `lower`, the first whose first key is
        // at or above `upper`.
        let first = partition(n, |i| {
            let r = &self.0[i];
            r.key(r.visible_len(seq) - 1) < lower
        });
        let end = match upper {
            Some(u) => partition(n, |i| self.0[i].key(0) < u),
            None => n,
        };
        first..end.max(first)
    }
}

/// A lineage table's size ([`LineageTable::sizes`]).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LineageSizes {
    pub rows: u64,
    pub base: u64,
    pub tail: u64,
    pub history: u64,
}

impl LineageSizes {
    pub(crate) fn bytes(&self) -> u64 {
        self.base + self.tail + self.history
    }
}

/// Counters of one table since open.
#[derive(Default)]
pub(crate) struct Counters {
    pub merges: AtomicU64,
    pub merged_records: AtomicU64,
    /// Ranges rebased past history no read can reach.
    pub reclaims: AtomicU64,
    /// Microseconds writers were held back by rebases (they take the commit leader's turn).
    pub reclaim_micros: AtomicU64,
}

pub(crate) struct LineageTable {
    pub info: Arc<TableInfo>,
    range_cap: usize,
    /// The primary index, in key order (scans through it).
    index: SkipMap<Box<[u8]>, u64>,
    /// The same entries hashed, for point reads and writes (a lookup costs a hash and a probe
    /// or two, not a skiplist walk of key comparisons).
    by_key: papaya::HashMap<Box<[u8]>, u64, Xxh3Builder>,
    /// The ranges, swapped as one list when the writer adds one or a range is rebased without
    /// its history ([`LineageTable::replace`]); a reader takes the list with its sequence
    /// number ([`View`]).
    view: ArcSwap<View>,
    writer: Mutex<Writer>,
    /// The sequence number of the first insert that came out of key order (`u64::MAX`: none),
    /// so that below it RID order is key order.
    unsorted_since: AtomicU64,
    pub counters: Counters,
    /// Set when the table is dropped: handles still holding it refuse to read.
    pub dropped: std::sync::atomic::AtomicBool,
}

impl LineageTable {
    pub(crate) fn new(info: Arc<TableInfo>, range_cap: usize) -> LineageTable {
        LineageTable {
            info,
            range_cap,
            index: SkipMap::new(),
            by_key: papaya::HashMap::with_hasher(Xxh3Builder::new()),
            view: ArcSwap::from_pointee(View(Vec::new(), 0)),
            writer: Mutex::new(&site::LINEAGE, Writer::default()),
            unsorted_since: AtomicU64::new(u64::MAX),
            counters: Counters::default(),
            dropped: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The ranges now. A reader takes it together with its sequence number (see
    /// [`crate::db`]'s lineage read point), so it never meets a range rebased past it.
    pub(crate) fn view(&self) -> Arc<View> {
        self.view.load_full()
    }

    /// Range `i` now (writer and lineage thread).
    fn range(&self, i: usize) -> Option<Arc<Range>> {
        self.view.load().0.get(i).cloned()
    }

    /// Puts `fresh`, rebased at `cut`, in place of range `i`: readers that took the list before
    /// keep the old range. Writer only (the commit leader's turn, so nothing is appended
    /// meanwhile).
    pub(crate) fn replace(&self, i: usize, fresh: Range, cut: u64) {
        let old = self.view.load();
        let mut next = old.0.clone();
        if let Some(slot) = next.get_mut(i) {
            *slot = Arc::new(fresh);
        }
        self.view.store(Arc::new(View(next, old.1.max(cut))));
    }

    /// Whether RID order is key order among the rows inserted at or before `seq`.
    pub(crate) fn sorted_at(&self, seq: u64) -> bool {
        seq < self.unsorted_since.load(Ordering::Acquire)
    }

    /// The range and offset of a RID, in the writer's current list.
    fn locate(&self, rid: u64) -> Option<(Arc<Range>, usize)> {
        let cap = self.range_cap as u64;
        self.range((rid / cap) as usize).map(|r| (r, (rid % cap) as usize))
    }

    /// Applies one operation at `seq`. Writer only (the commit leader, or recovery).
    pub(crate) fn apply(&self, kind: Kind, key: &[u8], row: &[u8], seq: u64) -> DecodeResult<()> {
        let types = &self.info.value_types;
        let found = self.by_key.pin().get(key).copied();
        match (kind, found) {
            (Kind::Put, None) => {
                let cells = decode_row(types, row, None)?;
                self.insert(key, &cells, seq);
            }
            (Kind::Put, Some(rid)) => {
                let cells = decode_row(types, row, None)?;
                let set: Vec<(usize, &Value)> =
                    cells.iter().enumerate().map(|(c, v)| (c, v.as_ref().unwrap_or(&Value::Null))).collect();
                if let Some((r, o)) = self.locate(rid) {
                    r.update(types, o, &set, true, seq);
                }
            }
            (Kind::Update, Some(rid)) => {
                let cells = decode_row(types, row, None)?;
                let set: Vec<(usize, &Value)> =
                    cells.iter().enumerate().filter_map(|(c, v)| v.as_ref().map(|v| (c, v))).collect();
                if let Some((r, o)) = self.locate(rid) {
                    // Blind: an update of a deleted row has no effect.
                    if r.newest(o).1 && !set.is_empty() {
                        r.update(types, o, &set, false, seq);
                    }
                }
            }
            (Kind::Delete, Some(rid)) => {
                if let Some((r, o)) = self.locate(rid) {
                    if r.newest(o).1 {
                        r.delete(o, seq);
                    }
                }
            }
            (Kind::Update | Kind::Delete, None) => {}
        }
        Ok(())
    }

    fn insert(&self, key: &[u8], cells: &Cells, seq: u64) {
        let mut w = self.writer.lock();
        let rid = w.next_rid;
        let cap = self.range_cap as u64;
        let o = (rid % cap) as usize;
        let open = match (&w.open, o) {
            (Some(open), o) if o != 0 => open.clone(),
            _ => {
                let (r, open) = Range::new(self.range_cap, &self.info.value_types);
                let old = self.view.load();
                let mut next = old.0.clone();
                next.push(Arc::new(r));
                self.view.store(Arc::new(View(next, old.1)));
                w.open = Some(open.clone());
                open
            }
        };
        if let Some((r, _)) = self.locate(rid) {
            r.insert(&open, o, key, cells, seq);
        }
        if o + 1 == self.range_cap {
            // Full: the merge seals it, and the open values go with their last page.
            w.open = None;
        }
        if w.last_key.as_deref().is_some_and(|k| k >= key) {
            let _ = self.unsorted_since.compare_exchange(u64::MAX, seq, Ordering::AcqRel, Ordering::Relaxed);
        }
        w.last_key = Some(key.into());
        w.next_rid = rid + 1;
        self.by_key.pin().insert(key.into(), rid);
        self.index.insert(key.into(), rid);
    }

    /// Whether `key` has a base record (deleted or not).
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        self.by_key.pin().contains_key(key)
    }

    /// The row with `key` at `seq`, read in `view`.
    pub(crate) fn get(&self, view: &View, key: &[u8], seq: u64, wanted: Option<&[bool]>) -> Option<Cells> {
        let rid = self.by_key.pin().get(key).copied()?;
        self.row_of(view, rid, seq, wanted)
    }

    /// Up to `n` (key, RID) pairs of the index from `lower` on, below `upper`.
    pub(crate) fn index_range(&self, lower: Bound<&[u8]>, upper: Option<&[u8]>, n: usize) -> Vec<(Box<[u8]>, u64)> {
        let hi = match upper {
            Some(u) => Bound::Excluded(u),
            None => Bound::Unbounded,
        };
        self.index.range::<[u8], _>((lower, hi)).take(n).map(|e| (e.key().clone(), *e.value())).collect()
    }

    /// The row of RID `rid` at `seq`, read in `view`.
    pub(crate) fn row_of(&self, view: &View, rid: u64, seq: u64, wanted: Option<&[bool]>) -> Option<Cells> {
        let (r, o) = view.locate(rid, self.range_cap)?;
        r.read_row(&self.info.value_types, o, seq, wanted)
    }

    /// Folds committed tail records into base pages in every range that has at least
    /// `threshold` of them, and seals full ranges. `idle`: also ranges with fewer whose tail did
    /// not grow since the last look. Returns the ranges merged. Lineage thread only.
    pub(crate) fn merge(&self, visible: u64, threshold: usize, idle: bool, before_swap: &dyn Fn()) -> usize {
        let mut merged = 0;
        for r in self.view().0.iter() {
            let full = r.len.load(Ordering::Acquire) as usize == self.range_cap;
            let len = r.tail.len.load(Ordering::Acquire);
            let quiet = r.merge_seen.swap(len, Ordering::Relaxed) == len;
            let unmerged = r.unmerged();
            if unmerged >= threshold || (full && r.unsealed() > 0) || (idle && quiet && unmerged > 0) {
                let n = r.merge(&self.info.value_types, visible, before_swap);
                if n > 0 {
                    merged += 1;
                    self.counters.merges.fetch_add(1, Ordering::Relaxed);
                    self.counters.merged_records.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        }
        merged
    }

    /// Keys in the primary index (rows, counting deleted ones until a merge drops them).
    pub(crate) fn keys(&self) -> u64 {
        self.index.len() as u64
    }

    /// Committed tail records waiting for a merge, over all ranges.
    pub(crate) fn merge_lag(&self) -> u64 {
        self.view().0.iter().map(|r| r.unmerged() as u64).sum()
    }

    /// Rows (base records), and bytes of base storage, unmerged tail records and merged ones
    /// (the history).
    pub(crate) fn sizes(&self) -> LineageSizes {
        let mut s = LineageSizes::default();
        let mut key_bytes = 0;
        for r in self.view().0.iter() {
            let (b, t, h) = r.bytes();
            s.base += b as u64;
            s.tail += t as u64;
            s.history += h as u64;
            key_bytes += r.key_bytes();
        }
        // Per key: a skiplist node and a hash entry, each with its own copy of the key (the
        // ranges' copies are counted with them).
        s.rows = self.index.len() as u64;
        s.base += s.rows * 96 + 2 * key_bytes;
        s
    }
}
