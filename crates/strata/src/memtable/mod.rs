//! The memtable: a concurrent skiplist holding the newest writes of every table, keyed by
//! (table, primary key ascending, sequence number descending).
//!
//! The skiplist key is `table_id u32 BE | memcomparable key | !seq u64 BE`. Because encoded keys
//! of one table are prefix-free, plain byte order on that concatenation is exactly the order
//! above. Values are the kind byte followed by the row encoding of [`crate::types::row`].
//!
//! One thread inserts at a time (the commit leader); any number read concurrently. A memtable is
//! frozen (becomes immutable) when it fills and is then flushed to Level-0 in the background.

mod bounds;

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use crossbeam_epoch as epoch;
use crossbeam_skiplist::base::SkipList;
use smallvec::SmallVec;

use crate::codec::DecodeResult;
use crate::mvcc::Kind;
use crate::types::row::overlay_row;
use crate::types::ColumnType;

pub(crate) use self::bounds::TableBounds;

/// Bytes charged per entry on top of key and value: skiplist node, tower and allocation overhead.
const ENTRY_OVERHEAD: usize = 80;

/// How [`Memtable::insert`] folds a partial row into the versions below it.
pub(crate) struct Fold<'a> {
    /// The table's value columns.
    pub types: &'a [ColumnType],
    /// The whole row just before the update, read through this memtable and everything below
    /// it; asked for when the key already has partial rows in this memtable.
    pub before: &'a dyn Fn() -> Before,
}

impl<'a> Fold<'a> {
    /// Folding without reads of the whole row (WAL replay).
    pub(crate) fn unread(types: &'a [ColumnType]) -> Self {
        Fold { types, before: &|| Before::Unknown }
    }
}

/// What [`Fold::before`] found.
pub(crate) enum Before {
    /// The row, in the row encoding, carrying every value column.
    Row(Vec<u8>),
    /// No row.
    Missing,
    /// Not known (the read failed or was not attempted): the partial rows stay partial.
    Unknown,
}

/// The in-memory write buffer.
pub(crate) struct Memtable {
    /// Searched under an epoch pin, which writes only the pinning thread's own slot: a lookup
    /// takes no reference count on the entry it finds (nothing is removed before the memtable
    /// is dropped).
    map: SkipList<InternalKey, Vec<u8>>,
    bytes: AtomicUsize,
    /// The WAL holding this memtable's writes.
    wal_number: u64,
    max_seq: AtomicU64,
    /// A partial row was inserted without folding (see [`Memtable::folded`]).
    unfolded: AtomicBool,
    /// What each table's versions here hold ([`TableBounds`]).
    bounds: bounds::Bounds,
}

/// One entry copied out of the memtable.
#[derive(Debug, Clone)]
pub(crate) struct MemEntry {
    pub key: Vec<u8>,
    pub seq: u64,
    pub kind: Kind,
    pub row: Vec<u8>,
}

/// A skiplist key, held inline in the skiplist node when it is short (most are: 12 bytes plus the
/// primary key), so a search compares keys without following a pointer and an insert allocates
/// one buffer fewer.
type InternalKey = SmallVec<[u8; 32]>;

fn internal_key(table_id: u32, key: &[u8], seq: u64) -> InternalKey {
    let mut k = InternalKey::with_capacity(12 + key.len());
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

/// A key's updates folded into one partial row in a memtable before [`Memtable::insert`] asks for
/// the whole row: a key updated this often is likely to be again (and read), and a key updated
/// once or twice costs no read.
const READ_WHOLE_AT: u8 = 4;

/// A skiplist value's first byte: the kind in the low two bits; for a partial row, the number of
/// updates folded into it (saturating) in the rest.
fn header(kind: Kind, folded: u8) -> u8 {
    kind as u8 | (folded.min(63) << 2)
}

/// The kind, folded-update count and row of a skiplist value. Values are written only by
/// `insert`, which always puts a valid header first.
fn value_of(v: &[u8]) -> (Kind, u8, &[u8]) {
    let h = v.first().copied().unwrap_or(0);
    let kind = Kind::from_u8(h & 3).unwrap_or(Kind::Delete);
    (kind, h >> 2, v.get(1..).unwrap_or_default())
}

fn entry_of(ik: &[u8], v: &[u8]) -> MemEntry {
    let (_, key, seq) = split(ik);
    let (kind, _, row) = value_of(v);
    MemEntry { key: key.to_vec(), seq, kind, row: row.to_vec() }
}

impl Memtable {
    pub(crate) fn new(wal_number: u64) -> Self {
        Memtable {
            map: SkipList::new(epoch::default_collector().clone()),
            bytes: AtomicUsize::new(0),
            wal_number,
            max_seq: AtomicU64::new(0),
            unfolded: AtomicBool::new(false),
            bounds: Default::default(),
        }
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

    /// Whether every partial row was folded as it was inserted, so that each version reads the
    /// same alone as with everything older of its key here. Read once the memtable is frozen.
    pub(crate) fn folded(&self) -> bool {
        !self.unfolded.load(Ordering::Relaxed)
    }

    pub(crate) fn max_seq(&self) -> u64 {
        self.max_seq.load(Ordering::Relaxed)
    }

    /// Widens the bounds of each version's table by the version (table, its value column types,
    /// kind, row), under one lock. A writer calls it with the versions it is about to insert,
    /// before it inserts them.
    pub(crate) fn widen_by<'a>(
        &self,
        versions: impl Iterator<Item = (u32, &'a [ColumnType], Kind, &'a [u8])>,
    ) -> DecodeResult<()> {
        self.bounds.widen_by(versions)
    }

    /// Bounds over every version of table `table_id` here (`None` when it has none).
    pub(crate) fn bounds(&self, table_id: u32) -> Option<TableBounds> {
        self.bounds.of(table_id)
    }

    /// Inserts version `seq` of `key`. The caller has widened the table's bounds by the version
    /// ([`Self::widen_by`]); a fold that turns it into a full row or a delete widens them here.
    /// Sequence numbers of one key arrive ascending (the commit
    /// leader and WAL replay insert in sequence order).
    ///
    /// With `fold`, a partial row (`Kind::Update`) is folded into the key's newest version here:
    /// over a full row it becomes a full row, over a tombstone a tombstone (an update of a missing
    /// row is invisible), over a partial row the partial row carrying both — or, when
    /// [`Fold::before`] can read the whole row, that row with the update laid over it, so a hot
    /// key's updates become full rows after a few of them. Every version in a memtable thus
    /// reads the same alone as with everything below it in this memtable, and a point read takes
    /// one version per memtable however many updates a key gets. An error means a memtable row
    /// does not decode, which only a bug can cause; nothing is inserted then.
    pub(crate) fn insert(
        &self,
        table_id: u32,
        key: &[u8],
        seq: u64,
        kind: Kind,
        row: &[u8],
        fold: Option<Fold<'_>>,
    ) -> DecodeResult<()> {
        let ik = internal_key(table_id, key, seq);
        let mut v = Vec::with_capacity(1 + row.len());
        match (kind, fold) {
            (Kind::Update, Some(fold)) => self.fold(table_id, key, row, fold, &mut v)?,
            (kind, _) => {
                if kind == Kind::Update {
                    self.unfolded.store(true, Ordering::Relaxed);
                }
                v.push(header(kind, u8::from(kind == Kind::Update)));
                v.extend_from_slice(row);
            }
        }
        self.bytes.fetch_add(ik.len() + v.len() + ENTRY_OVERHEAD, Ordering::Relaxed);
        self.max_seq.fetch_max(seq, Ordering::Relaxed);
        let guard = &epoch::pin();
        self.map.insert(ik, v, guard).release(guard);
        Ok(())
    }

    /// Writes into `v` the value of partial row `row` folded into the key's newest version.
    fn fold(&self, table_id: u32, key: &[u8], row: &[u8], fold: Fold<'_>, v: &mut Vec<u8>) -> DecodeResult<()> {
        let newest = internal_key(table_id, key, u64::MAX);
        let guard = &epoch::pin();
        let below = self.map.lower_bound::<[u8]>(Bound::Included(newest.as_slice()), guard);
        let below = below.as_ref().filter(|e| {
            let (t, k, _) = split(e.key());
            t == table_id && k == key
        });
        let Some(e) = below else {
            v.push(header(Kind::Update, 1));
            v.extend_from_slice(row);
            return Ok(());
        };
        let (kind, folded, older) = value_of(e.value());
        let folded = folded.saturating_add(1);
        let whole = match kind {
            Kind::Update if folded >= READ_WHOLE_AT => (fold.before)(),
            _ => Before::Unknown,
        };
        match whole {
            Before::Row(full) => {
                v.reserve(row.len() + full.len());
                v.push(header(Kind::Put, 0));
                overlay_row(fold.types, row, &full, v)?;
                // A full row now, with the values of the row below it.
                let mut b = TableBounds::new(fold.types);
                b.add(fold.types, Kind::Put, &v[1..])?;
                self.bounds.widen(table_id, &b);
                Ok(())
            }
            Before::Missing => {
                v.push(header(Kind::Delete, 0));
                let mut b = TableBounds::new(fold.types);
                b.add(fold.types, Kind::Delete, &[])?;
                self.bounds.widen(table_id, &b);
                Ok(())
            }
            Before::Unknown => {
                v.push(header(kind, folded));
                if kind == Kind::Delete {
                    return Ok(());
                }
                v.reserve(row.len() + older.len());
                overlay_row(fold.types, row, older, v)
            }
        }
    }

    /// Calls `f` with the newest version of `key` at or below `snapshot`, if any. Because
    /// [`insert`](Self::insert) folds partial rows, that version is all this memtable knows of the
    /// key at `snapshot`.
    pub(crate) fn get<R>(
        &self,
        table_id: u32,
        key: &[u8],
        snapshot: u64,
        f: impl FnOnce(Kind, &[u8]) -> R,
    ) -> Option<R> {
        let start = internal_key(table_id, key, snapshot);
        let guard = &epoch::pin();
        let e = self.map.lower_bound::<[u8]>(Bound::Included(start.as_slice()), guard)?;
        let (t, k, _) = split(e.key());
        if t != table_id || k != key {
            return None;
        }
        let (kind, _, row) = value_of(e.value());
        Some(f(kind, row))
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
        let guard = &epoch::pin();
        for e in self.map.range::<[u8], _>((from, Bound::Unbounded), guard) {
            let (t, k, _) = split(e.key());
            if t != table_id || upper.is_some_and(|u| k >= u) || out.len() >= limit {
                break;
            }
            if k >= lower {
                out.push(entry_of(e.key(), e.value()));
            }
        }
    }

    /// Whether table `table_id` has any version here.
    pub(crate) fn holds(&self, table_id: u32) -> bool {
        self.bounds.holds(table_id)
    }

    /// Calls `f` with each key of table `table_id` in `[lower, upper)` (`None`: to the table's
    /// end), ascending, and the kind and row of its newest version at or below `seq`; keys whose
    /// versions are all newer are passed over. Nothing is copied.
    pub(crate) fn newest_in(
        &self,
        table_id: u32,
        lower: &[u8],
        upper: Option<&[u8]>,
        seq: u64,
        mut f: impl FnMut(&[u8], Kind, &[u8]),
    ) {
        let mut lo = table_id.to_be_bytes().to_vec();
        lo.extend_from_slice(lower);
        let guard = &epoch::pin();
        let mut taken: Option<&[u8]> = None;
        for e in self.map.range::<[u8], _>((Bound::Included(&lo[..]), Bound::Unbounded), guard) {
            let (t, k, s) = split(e.key());
            if t != table_id || upper.is_some_and(|u| k >= u) {
                break;
            }
            // See `chunk`: a prefix of `lower` can sort after it.
            if k < lower || s > seq || taken == Some(k) {
                continue;
            }
            taken = Some(k);
            let (kind, _, row) = value_of(e.value());
            f(k, kind, row);
        }
    }

    /// Whether table `table_id` has any entry (of any sequence number) with `lower <= key < upper`.
    pub(crate) fn has_in(&self, table_id: u32, lower: &[u8], upper: &[u8]) -> bool {
        let mut lo = table_id.to_be_bytes().to_vec();
        lo.extend_from_slice(lower);
        let guard = &epoch::pin();
        for e in self.map.range::<[u8], _>((Bound::Included(&lo[..]), Bound::Unbounded), guard) {
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

    /// The [`key_hash`](crate::sst::bloom::key_hash)es of table `table_id`'s distinct keys, in key
    /// order.
    pub(crate) fn key_hashes(&self, table_id: u32) -> Vec<u64> {
        let lo = table_id.to_be_bytes();
        let mut out = Vec::new();
        let mut last: Option<Vec<u8>> = None;
        let guard = &epoch::pin();
        for e in self.map.range::<[u8], _>((Bound::Included(&lo[..]), Bound::Unbounded), guard) {
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

    /// Entries (versions) of table `table_id`, counted up to `cap`.
    pub(crate) fn count_of(&self, table_id: u32, cap: usize) -> usize {
        let lo = table_id.to_be_bytes();
        let guard = &epoch::pin();
        self.map
            .range::<[u8], _>((Bound::Included(&lo[..]), Bound::Unbounded), guard)
            .take_while(|e| split(e.key()).0 == table_id)
            .take(cap)
            .count()
    }

    /// Table ids with at least one entry, ascending.
    pub(crate) fn tables(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut from = 0u32;
        loop {
            let lo = from.to_be_bytes();
            let guard = &epoch::pin();
            let Some(e) = self.map.lower_bound::<[u8]>(Bound::Included(&lo[..]), guard) else {
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
    resume: Option<InternalKey>,
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
            m.insert(7, &(i % 300).to_be_bytes(), u64::from(i) + 1, Kind::Put, &[i as u8], None).unwrap();
        }
        m.insert(9, b"zz", 5000, Kind::Delete, &[], None).unwrap();
        assert_eq!(m.tables(), vec![7, 9]);
        // A read takes the newest version at or below its snapshot.
        let first = |snap| m.get(7, &5u32.to_be_bytes(), snap, |_, row: &[u8]| row[0]);
        assert_eq!((first(700), first(605), first(5)), (Some(605u32 as u8), Some(305u32 as u8), None));
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

    /// Random puts, partial updates and deletes of a few keys over rows below the memtable
    /// (even keys have one): the one version a memtable read returns, with the row below, reads
    /// at every snapshot exactly as all the key's versions walked newest first. Reads of the whole
    /// row before an update answer now and then, as the commit path's may fail.
    #[test]
    fn folded_versions_read_as_the_whole_chain_at_every_snapshot() {
        use crate::mvcc::chain::{newest_per_stripe, Resolver, Stripes};
        use crate::mvcc::Entry;
        use crate::types::row::{decode_row, encode_row};
        use crate::types::Value;
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        use std::cell::RefCell;

        type Log = Vec<(u8, u64, Kind, Vec<u8>)>;
        let types = [ColumnType::Int, ColumnType::Text, ColumnType::BigInt];
        let mut below_row = Vec::new();
        encode_row(&types, &[Some(Value::Int(-1)), Some(Value::Null), Some(Value::BigInt(-1))], &mut below_row);
        // Key `k` at `snap` from all its versions in `log`, then the row below.
        let read = |k: u8, newest_first: &mut dyn Iterator<Item = (Kind, Vec<u8>)>| {
            let mut r = Resolver::new(3, None);
            for (kind, row) in newest_first {
                r.push(kind, decode_row(&types, &row, None).unwrap(), None);
            }
            if k.is_multiple_of(2) {
                r.push(Kind::Put, decode_row(&types, &below_row, None).unwrap(), None);
            }
            r.finish()
        };
        let chain = |log: &Log, k: u8, snap: u64| {
            let mut versions = log.iter().rev().filter(|v| v.0 == k && v.1 <= snap).map(|v| (v.2, v.3.clone()));
            read(k, &mut versions)
        };
        for seed in [1u64, 2, 3, 4, 5] {
            let rng = RefCell::new(StdRng::seed_from_u64(seed));
            let m = Memtable::new(1);
            let log = RefCell::new(Log::new());
            for seq in 1..=400u64 {
                let mut g = rng.borrow_mut();
                let key = g.gen_range(0..4u8);
                let kind = match g.gen_range(0..10) {
                    0 => Kind::Delete,
                    1 | 2 => Kind::Put,
                    _ => Kind::Update,
                };
                let mut row = Vec::new();
                if kind != Kind::Delete {
                    let cells: Vec<Option<Value>> = (0..3)
                        .map(|c| {
                            (kind == Kind::Put || g.gen_bool(0.4)).then(|| match c {
                                0 => Value::Int(g.gen()),
                                1 if g.gen_bool(0.2) => Value::Null,
                                1 => Value::Text(format!("v{seq}")),
                                _ => Value::BigInt(seq as i64),
                            })
                        })
                        .collect();
                    encode_row(&types, &cells, &mut row);
                }
                drop(g);
                let before = || {
                    if rng.borrow_mut().gen_bool(0.3) {
                        return Before::Unknown;
                    }
                    match chain(&log.borrow(), key, seq - 1) {
                        Some(cells) => {
                            let mut full = Vec::new();
                            encode_row(&types, &cells, &mut full);
                            Before::Row(full)
                        }
                        None => Before::Missing,
                    }
                };
                m.insert(3, &[key], seq, kind, &row, Some(Fold { types: &types, before: &before })).unwrap();
                log.borrow_mut().push((key, seq, kind, row));
            }
            let log = log.into_inner();
            for snap in 0..=400u64 {
                for k in 0..4u8 {
                    let mut one = m.get(3, &[k], snap, |kind, row| (kind, row.to_vec())).into_iter();
                    assert_eq!(read(k, &mut one), chain(&log, k, snap), "seed {seed}: key {k} at {snap}");
                }
            }
            // A flush keeps each stripe's newest version: every live snapshot, and the latest
            // read, still read the same from what it keeps.
            assert!(m.folded());
            let mut snapshots: Vec<u64> = (0..5).map(|_| rng.borrow_mut().gen_range(1..400)).collect();
            snapshots.sort_unstable();
            let mut cursor = MemCursor::new(Arc::new(m), 3, &[], None);
            let all: Vec<MemEntry> = std::iter::from_fn(|| cursor.next_entry()).collect();
            for k in 0..4u8 {
                let versions: Vec<Entry> = all
                    .iter()
                    .filter(|e| e.key == [k])
                    .map(|e| Entry::new(e.key.clone(), e.seq, e.kind, e.row.clone(), None))
                    .collect();
                let kept = newest_per_stripe(versions.iter(), &Stripes::snapshots(&snapshots));
                for &snap in snapshots.iter().chain([u64::MAX].iter()) {
                    let mut one = kept.iter().find(|v| v.seq <= snap).map(|v| (v.kind, v.row.clone())).into_iter();
                    assert_eq!(read(k, &mut one), chain(&log, k, snap), "seed {seed}: flushed key {k} at {snap}");
                }
            }
        }
    }
}
