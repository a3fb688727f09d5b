//! The memtable: a concurrent skiplist holding the newest writes of every table, keyed by
//! (table, primary key ascending, sequence number descending).
//!
//! The skiplist key is `table_id u32 BE | memcomparable key | !seq u64 BE`. Because encoded keys
//! of one table are prefix-free, plain byte order on that concatenation is exactly the order
//! above. Values are the kind byte followed by the row encoding of [`crate::types::row`].
//!
//! One thread inserts at a time (the commit leader); any number read concurrently. A memtable is
//! frozen (becomes immutable) when it fills and is then flushed to Level-0 in the background.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_skiplist::SkipMap;

use crate::mvcc::Kind;

/// Bytes charged per entry on top of key and value: skiplist node, tower and allocation overhead.
const ENTRY_OVERHEAD: usize = 80;

/// The in-memory write buffer.
pub(crate) struct Memtable {
    map: SkipMap<Vec<u8>, Vec<u8>>,
    bytes: AtomicUsize,
    /// The WAL holding this memtable's writes.
    wal_number: u64,
    max_seq: AtomicU64,
}

/// One entry copied out of the memtable.
#[derive(Debug, Clone)]
pub(crate) struct MemEntry {
    pub key: Vec<u8>,
    pub seq: u64,
    pub kind: Kind,
    pub row: Vec<u8>,
}

fn internal_key(table_id: u32, key: &[u8], seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(12 + key.len());
    k.extend_from_slice(&table_id.to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&(!seq).to_be_bytes());
    k
}

fn split(ik: &[u8]) -> (u32, &[u8], u64) {
    let n = ik.len();
    let table = u32::from_be_bytes([ik[0], ik[1], ik[2], ik[3]]);
    let mut s = [0u8; 8];
    s.copy_from_slice(&ik[n - 8..]);
    (table, &ik[4..n - 8], !u64::from_be_bytes(s))
}

fn entry_of(ik: &[u8], v: &[u8]) -> MemEntry {
    let (_, key, seq) = split(ik);
    // Values are written only by `insert`, which always puts a valid kind byte first.
    let kind = v.first().and_then(|&b| Kind::from_u8(b)).unwrap_or(Kind::Delete);
    MemEntry { key: key.to_vec(), seq, kind, row: v.get(1..).unwrap_or_default().to_vec() }
}

impl Memtable {
    pub(crate) fn new(wal_number: u64) -> Self {
        Memtable { map: SkipMap::new(), bytes: AtomicUsize::new(0), wal_number, max_seq: AtomicU64::new(0) }
    }

    pub(crate) fn wal_number(&self) -> u64 {
        self.wal_number
    }

    /// Approximate memory used.
    pub(crate) fn approximate_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(crate) fn max_seq(&self) -> u64 {
        self.max_seq.load(Ordering::Relaxed)
    }

    pub(crate) fn insert(&self, table_id: u32, key: &[u8], seq: u64, kind: Kind, row: &[u8]) {
        let ik = internal_key(table_id, key, seq);
        let mut v = Vec::with_capacity(1 + row.len());
        v.push(kind as u8);
        v.extend_from_slice(row);
        self.bytes.fetch_add(ik.len() + v.len() + ENTRY_OVERHEAD, Ordering::Relaxed);
        self.max_seq.fetch_max(seq, Ordering::Relaxed);
        self.map.insert(ik, v);
    }

    /// Calls `f` with the versions of `key` at or below `snapshot`, newest first, until it
    /// returns false.
    pub(crate) fn get(&self, table_id: u32, key: &[u8], snapshot: u64, mut f: impl FnMut(Kind, &[u8]) -> bool) {
        let start = internal_key(table_id, key, snapshot);
        for e in self.map.range::<[u8], _>((Bound::Included(start.as_slice()), Bound::Unbounded)) {
            let (t, k, _) = split(e.key());
            if t != table_id || k != key {
                break;
            }
            let v = e.value();
            let kind = v.first().and_then(|&b| Kind::from_u8(b)).unwrap_or(Kind::Delete);
            if !f(kind, v.get(1..).unwrap_or_default()) {
                break;
            }
        }
    }

    /// Copies up to `limit` entries of `table_id` starting at internal-key bound `from` (see
    /// [`MemCursor`]), with user keys in `[lower, upper)`. A user key below `lower` can still sort after it internally when it is a
    /// prefix of `lower` (its sequence bytes follow), so those are skipped here.
    fn chunk(
        &self,
        table_id: u32,
        from: Bound<&[u8]>,
        lower: &[u8],
        upper: Option<&[u8]>,
        limit: usize,
        out: &mut Vec<MemEntry>,
    ) {
        for e in self.map.range::<[u8], _>((from, Bound::Unbounded)) {
            let (t, k, _) = split(e.key());
            if t != table_id || upper.is_some_and(|u| k >= u) || out.len() >= limit {
                break;
            }
            if k >= lower {
                out.push(entry_of(e.key(), e.value()));
            }
        }
    }

    /// Whether table `table_id` has any entry (of any sequence number) with `lower <= key < upper`.
    pub(crate) fn has_in(&self, table_id: u32, lower: &[u8], upper: &[u8]) -> bool {
        let mut lo = table_id.to_be_bytes().to_vec();
        lo.extend_from_slice(lower);
        for e in self.map.range::<[u8], _>((Bound::Included(&lo[..]), Bound::Unbounded)) {
            let (t, k, _) = split(e.key());
            if t != table_id || k >= upper {
                return false;
            }
            // See `chunk`: a prefix of `lower` can sort after it.
            if k >= lower {
                return true;
            }
        }
        false
    }

    /// Appends the distinct keys of table `table_id` in `[lower, upper)`, ascending, without
    /// copying their rows.
    pub(crate) fn keys_in(&self, table_id: u32, lower: &[u8], upper: &[u8], out: &mut Vec<Vec<u8>>) {
        let mut lo = table_id.to_be_bytes().to_vec();
        lo.extend_from_slice(lower);
        for e in self.map.range::<[u8], _>((Bound::Included(&lo[..]), Bound::Unbounded)) {
            let (t, k, _) = split(e.key());
            if t != table_id || k >= upper {
                break;
            }
            // See `chunk`: a prefix of `lower` can sort after it.
            if k >= lower && out.last().map(Vec::as_slice) != Some(k) {
                out.push(k.to_vec());
            }
        }
    }

    /// The [`key_hash`](crate::sst::bloom::key_hash)es of table `table_id`'s distinct keys, in key
    /// order.
    pub(crate) fn key_hashes(&self, table_id: u32) -> Vec<u64> {
        let lo = table_id.to_be_bytes();
        let mut out = Vec::new();
        let mut last: Option<Vec<u8>> = None;
        for e in self.map.range::<[u8], _>((Bound::Included(&lo[..]), Bound::Unbounded)) {
            let (t, k, _) = split(e.key());
            if t != table_id {
                break;
            }
            if last.as_deref() != Some(k) {
                out.push(crate::sst::bloom::key_hash(k));
                let l = last.get_or_insert_with(Vec::new);
                l.clear();
                l.extend_from_slice(k);
            }
        }
        out
    }

    /// Table ids with at least one entry, ascending.
    pub(crate) fn tables(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut from = 0u32;
        loop {
            let lo = from.to_be_bytes();
            let Some(e) = self.map.lower_bound::<[u8]>(Bound::Included(&lo[..])) else {
                break;
            };
            let (t, _, _) = split(e.key());
            out.push(t);
            match t.checked_add(1) {
                Some(n) => from = n,
                None => break,
            }
        }
        out
    }
}

/// An owning cursor over one table's entries in a key range, in (key asc, seq desc) order.
/// It copies entries out in chunks, so it holds no borrow of the skiplist between calls.
pub(crate) struct MemCursor {
    mem: std::sync::Arc<Memtable>,
    table_id: u32,
    /// Internal key to resume after; `None` before the first chunk.
    resume: Option<Vec<u8>>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    buf: std::collections::VecDeque<MemEntry>,
    done: bool,
}

const CHUNK: usize = 256;

impl MemCursor {
    /// Entries with `lower <= key < upper` (upper `None` = to the end of the table).
    pub(crate) fn new(mem: std::sync::Arc<Memtable>, table_id: u32, lower: &[u8], upper: Option<&[u8]>) -> Self {
        let mut lo = table_id.to_be_bytes().to_vec();
        lo.extend_from_slice(lower);
        MemCursor {
            mem,
            table_id,
            resume: None,
            lower: lo,
            upper: upper.map(<[u8]>::to_vec),
            buf: Default::default(),
            done: false,
        }
    }

    fn refill(&mut self) {
        let mut v = Vec::with_capacity(CHUNK);
        let from = match &self.resume {
            None => Bound::Included(self.lower.as_slice()),
            Some(k) => Bound::Excluded(k.as_slice()),
        };
        self.mem.chunk(self.table_id, from, &self.lower[4..], self.upper.as_deref(), CHUNK, &mut v);
        if v.len() < CHUNK {
            self.done = true;
        }
        if let Some(last) = v.last() {
            self.resume = Some(internal_key(self.table_id, &last.key, last.seq));
        }
        self.buf.extend(v);
    }

    pub(crate) fn next_entry(&mut self) -> Option<MemEntry> {
        if self.buf.is_empty() && !self.done {
            self.refill();
        }
        self.buf.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn orders_by_key_then_newest_first_and_cursor_resumes() {
        let m = Arc::new(Memtable::new(1));
        for i in 0..1000u32 {
            m.insert(7, &(i % 300).to_be_bytes(), u64::from(i) + 1, Kind::Put, &[i as u8]);
        }
        m.insert(9, b"zz", 5000, Kind::Delete, &[]);
        assert_eq!(m.tables(), vec![7, 9]);
        let mut seen = Vec::new();
        m.get(7, &5u32.to_be_bytes(), 700, |_, row| {
            seen.push(row[0]);
            true
        });
        assert_eq!(seen, vec![605u32 as u8, 305u32 as u8, 5]);
        let mut c = MemCursor::new(m.clone(), 7, &10u32.to_be_bytes(), Some(&20u32.to_be_bytes()));
        let mut prev: Option<(Vec<u8>, u64)> = None;
        let mut n = 0;
        while let Some(e) = c.next_entry() {
            if let Some((k, s)) = &prev {
                assert!(*k < e.key || (*k == e.key && *s > e.seq));
            }
            prev = Some((e.key.clone(), e.seq));
            n += 1;
        }
        assert_eq!(n, 40);
        // A bound just above a key (the key and a zero byte) excludes that key's versions, though
        // their internal keys (key, then sequence bytes) sort after the bound.
        let mut just_above = 10u32.to_be_bytes().to_vec();
        just_above.push(0);
        let mut c = MemCursor::new(m.clone(), 7, &just_above, Some(&12u32.to_be_bytes()));
        let keys: Vec<Vec<u8>> = std::iter::from_fn(|| c.next_entry()).map(|e| e.key).collect();
        assert!(keys.iter().all(|k| k.as_slice() == 11u32.to_be_bytes()), "{keys:?}");
        assert!(!keys.is_empty());
        assert!(!m.has_in(7, &just_above, &11u32.to_be_bytes()));
        assert!(m.has_in(7, &just_above, &12u32.to_be_bytes()));
    }
}
