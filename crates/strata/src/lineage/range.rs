//! One update range (L-Store §2-§4): up to `cap` base records, their base pages (one per value
//! column plus one for existence, each stamped with the tail records merged into it), the
//! indirection column, and the range's append-only tail records.
//!
//! Tail records are numbered from 0 within the range, in commit order, so a tail record's
//! number orders it in time as its sequence number does; pointers to them (indirection, the
//! back pointer of a tail record) store the number plus one, 0 meaning "none" (the base record).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use arrow_array::{Array, ArrayRef};
use arrow_buffer::{BooleanBuffer, BooleanBufferBuilder};

use super::append::{Column, Segments};
use super::sealed::{overlay, Sealed};
use crate::scan::arrow::ValuesBuilder;
use crate::scan::cnf::compare;
use crate::types::row::Cells;
use crate::types::{ColumnType, Value};

/// Flag of a tail record holding the values its columns had before their first update.
pub(crate) const SNAPSHOT: u64 = 1;
/// Flag of a tail record deleting the row (it carries no column).
pub(crate) const DELETE: u64 = 2;

/// The values of base records not yet sealed into a page: written once by the inserting writer.
pub(crate) struct OpenBase {
    pub cols: Box<[Column]>,
    pub nulls: Segments<AtomicU64>,
}

impl OpenBase {
    fn new(types: &[ColumnType]) -> OpenBase {
        OpenBase { cols: types.iter().map(|&t| Column::new(t)).collect(), nulls: Segments::default() }
    }

    fn value(&self, ty: ColumnType, c: usize, o: usize) -> Value {
        if self.nulls.load(o) & (1 << c) != 0 {
            Value::Null
        } else {
            self.cols[c].value(ty, o)
        }
    }
}

/// One column of a range as of tail record `tps` (exclusive): base records `[0, rows)` sealed
/// into an array, later ones read from the open base. The existence page's array is a boolean
/// "deleted" per record.
pub(crate) struct Page {
    /// Tail records `[0, tps)` are folded in.
    pub tps: u32,
    /// Sequence number of tail record `tps - 1` (0 when `tps` is 0): a reader at an older
    /// sequence number may not use the folded values.
    pub tps_seq: u64,
    pub rows: u32,
    pub sealed: Option<Sealed>,
    /// The smallest and largest non-null sealed value (value pages; see [`Sealed::bounds`]).
    pub zone: Option<(Value, Value)>,
    pub open: Option<Arc<OpenBase>>,
}

impl Page {
    /// The base value of column `c` at offset `o` (a value column's page).
    pub(crate) fn value(&self, ty: ColumnType, c: usize, o: usize) -> Value {
        match (&self.sealed, &self.open) {
            (Some(a), _) if o < self.rows as usize => a.value(o),
            (_, Some(open)) => open.value(ty, c, o),
            _ => Value::Null,
        }
    }
}

/// A range's page directory: a page per value column, then the existence page.
pub(crate) struct Pages(pub Box<[Arc<Page>]>);

/// The tail records of a range, column by column.
#[derive(Default)]
pub(crate) struct Tail {
    /// Records published to readers.
    pub len: AtomicU32,
    /// Per record, its fixed fields together (one cache line holds two records).
    fixed: Segments<Fixed>,
    values: Vec<Column>,
}

/// A tail record's fixed fields as stored.
#[derive(Default)]
struct Fixed {
    /// Back pointer (low 32 bits), base offset (next 16), flags (top 16).
    meta: AtomicU64,
    /// The columns it carries.
    cols: AtomicU64,
    /// Which carried columns are NULL.
    nulls: AtomicU64,
    seq: AtomicU64,
}

/// One tail record's fixed fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    pub prev: u32,
    pub base: usize,
    pub flags: u64,
    pub cols: u64,
    pub seq: u64,
}

impl Tail {
    fn new(types: &[ColumnType]) -> Tail {
        Tail { values: types.iter().map(|&t| Column::new(t)).collect(), ..Tail::default() }
    }

    #[inline]
    pub(crate) fn seq(&self, x: usize) -> u64 {
        self.fixed.get(x).map_or(0, |f| f.seq.load(Ordering::Relaxed))
    }

    #[inline]
    pub(crate) fn meta(&self, x: usize) -> Meta {
        let Some(f) = self.fixed.get(x) else {
            return Meta { prev: 0, base: 0, flags: 0, cols: 0, seq: 0 };
        };
        let m = f.meta.load(Ordering::Relaxed);
        Meta {
            prev: m as u32,
            base: ((m >> 32) & 0xFFFF) as usize,
            flags: m >> 48,
            cols: f.cols.load(Ordering::Relaxed),
            seq: f.seq.load(Ordering::Relaxed),
        }
    }

    /// Column `c` of record `x` (which carries it).
    pub(crate) fn value(&self, ty: ColumnType, c: usize, x: usize) -> Value {
        if self.fixed.get(x).is_some_and(|f| f.nulls.load(Ordering::Relaxed) & (1 << c) != 0) {
            Value::Null
        } else {
            self.values[c].value(ty, x)
        }
    }

    /// Writes record `x` (not yet published). Writer only.
    fn write(&self, x: usize, m: Meta, cells: &[(usize, &Value)]) {
        let mut nulls = 0u64;
        for &(c, v) in cells {
            if v.is_null() {
                nulls |= 1 << c;
            } else {
                self.values[c].put(x, v);
            }
        }
        let f = self.fixed.slot(x);
        f.nulls.store(nulls, Ordering::Relaxed);
        f.cols.store(m.cols, Ordering::Relaxed);
        f.seq.store(m.seq, Ordering::Relaxed);
        f.meta.store(u64::from(m.prev) | ((m.base as u64) << 32) | (m.flags << 48), Ordering::Relaxed);
    }

    fn bytes(&self) -> usize {
        self.fixed.bytes() + self.values.iter().map(Column::bytes).sum::<usize>()
    }
}

/// One update range.
pub(crate) struct Range {
    pub cap: usize,
    /// Base records published.
    pub len: AtomicU32,
    pub keys: Segments<OnceLock<Box<[u8]>>>,
    /// Bytes of the keys.
    key_bytes: AtomicU64,
    /// Sequence number each base record was inserted at.
    pub start: Segments<AtomicU64>,
    /// Per base record: its newest tail record plus one (0: none).
    pub indirection: Box<[AtomicU32]>,
    /// Per base record: the columns ever updated (whose old values a snapshot record holds).
    /// Writer only.
    updated: Box<[AtomicU64]>,
    /// The page directory: a page per value column, then the existence page, swapped as one
    /// set (a reader takes every page it needs with one load). Pages in one set may hold
    /// different numbers of tail records: a merge replaces only the pages it changes.
    pub pages: ArcSwap<Pages>,
    pub tail: Tail,
    /// Decoded key columns, once the range is full.
    pub key_arrays: OnceLock<Vec<ArrayRef>>,
    /// The tail length the lineage thread saw last (lineage thread only).
    pub merge_seen: AtomicU32,
    /// In a rebased range ([`Range::rebased`]): the records deleted at the cut, which no tail
    /// record says any more (reads older than a later merge's pages need it).
    base_deleted: Option<BooleanBuffer>,
}

/// A base record's chain as a reader at `seq` sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At {
    /// Offset of the base record.
    pub o: usize,
    /// Its newest tail record (plus one; 0: none), read after the pages.
    pub newest: u32,
    /// Its newest tail record visible at `seq`.
    pub t: u32,
    pub seq: u64,
}

impl At {
    /// Reads base record `o`'s indirection (after the caller loaded the pages it will use).
    #[inline]
    pub(crate) fn read(r: &Range, o: usize, seq: u64) -> At {
        let newest = r.indirection[o].load(Ordering::Acquire);
        At { o, newest, t: visible_from(&r.tail, newest, seq), seq }
    }
}

/// Bounds `(lo, hi)` widened to hold `v` (a NULL changes nothing).
fn widen((lo, hi): (Value, Value), v: &Value) -> (Value, Value) {
    use std::cmp::Ordering::{Greater, Less};
    if v.is_null() {
        (lo, hi)
    } else if compare(v, &lo) == Less {
        (v.clone(), hi)
    } else if compare(v, &hi) == Greater {
        (lo, v.clone())
    } else {
        (lo, hi)
    }
}

/// The newest tail record of a chain visible at `seq`, as a pointer (0: none).
#[inline]
pub(crate) fn visible_from(tail: &Tail, mut t: u32, seq: u64) -> u32 {
    while t != 0 && tail.seq(t as usize - 1) > seq {
        t = tail.meta(t as usize - 1).prev;
    }
    t
}

impl Range {
    pub(crate) fn new(cap: usize, types: &[ColumnType]) -> (Range, Arc<OpenBase>) {
        let open = Arc::new(OpenBase::new(types));
        let page = |with_open: bool| {
            Arc::new(Page {
                tps: 0,
                tps_seq: 0,
                rows: 0,
                sealed: None,
                zone: None,
                open: with_open.then(|| open.clone()),
            })
        };
        let pages = ArcSwap::from_pointee(Pages((0..=types.len()).map(|c| page(c < types.len())).collect()));
        let r = Range {
            cap,
            len: AtomicU32::new(0),
            keys: Segments::default(),
            key_bytes: AtomicU64::new(0),
            start: Segments::default(),
            indirection: (0..cap).map(|_| AtomicU32::new(0)).collect(),
            updated: (0..cap).map(|_| AtomicU64::new(0)).collect(),
            pages,
            tail: Tail::new(types),
            key_arrays: OnceLock::new(),
            merge_seen: AtomicU32::new(0),
            base_deleted: None,
        };
        (r, open)
    }

    /// This range rebased at `cut`: base pages holding every row as of `cut`, and tail records
    /// only for the changes after it, replayed as whole-row updates and deletes (the first
    /// update of a column writes its snapshot record again). Reads at `cut` or later see the
    /// same rows; older ones cannot be answered. `None` unless the range is full with every row
    /// inserted by `cut`. Writer only (nothing may be appended meanwhile); the caller makes sure
    /// no reader older than `cut` meets the new range.
    pub(crate) fn rebased(&self, types: &[ColumnType], cut: u64) -> Option<Range> {
        let len = self.len.load(Ordering::Acquire) as usize;
        if len != self.cap || self.start.load(len - 1) > cut {
            return None;
        }
        let live = self.live_mask(len, cut);
        let deleted = !&live;
        let page = |sealed: Sealed, zone| {
            Arc::new(Page { tps: 0, tps_seq: cut, rows: len as u32, sealed: Some(sealed), zone, open: None })
        };
        let mut pages: Vec<Arc<Page>> = (0..types.len())
            .map(|c| {
                let sealed = Sealed::new(self.column(types[c], c, len, cut));
                let zone = sealed.bounds();
                page(sealed, zone)
            })
            .collect();
        pages.push(page(Sealed::new(Arc::new(arrow_array::BooleanArray::new(deleted.clone(), None))), None));
        let keys: Segments<OnceLock<Box<[u8]>>> = Segments::default();
        let start: Segments<AtomicU64> = Segments::default();
        for o in 0..len {
            let _ = keys.slot(o).set(self.key(o).into());
            start.store(o, self.start.load(o));
        }
        let fresh = Range {
            cap: self.cap,
            len: AtomicU32::new(len as u32),
            keys,
            key_bytes: AtomicU64::new(self.key_bytes()),
            start,
            indirection: (0..self.cap).map(|_| AtomicU32::new(0)).collect(),
            updated: (0..self.cap).map(|_| AtomicU64::new(0)).collect(),
            pages: ArcSwap::from_pointee(Pages(pages.into_boxed_slice())),
            tail: Tail::new(types),
            key_arrays: self.key_arrays.clone(),
            merge_seen: AtomicU32::new(0),
            base_deleted: (deleted.count_set_bits() > 0).then_some(deleted),
        };
        for (seq, o, row) in self.history(types, cut, u64::MAX) {
            match row {
                Some(cells) => {
                    let set: Vec<(usize, &Value)> =
                        cells.iter().enumerate().map(|(c, v)| (c, v.as_ref().unwrap_or(&Value::Null))).collect();
                    fresh.update(types, o, &set, true, seq);
                }
                None => fresh.delete(o, seq),
            }
        }
        Some(fresh)
    }

    /// Tail records committed at or before `seq` (their sequence numbers grow with their
    /// position).
    pub(crate) fn records_by(&self, seq: u64) -> usize {
        let len = self.tail.len.load(Ordering::Acquire) as usize;
        super::partition(len, |x| self.tail.seq(x) <= seq)
    }

    /// Bytes of the keys of the range's base records.
    pub(crate) fn key_bytes(&self) -> u64 {
        self.key_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn key(&self, o: usize) -> &[u8] {
        self.keys.get(o).and_then(OnceLock::get).map_or(&[][..], |k| &k[..])
    }

    /// Appends a base record at offset `o` (the next one). Writer only.
    pub(crate) fn insert(&self, open: &OpenBase, o: usize, key: &[u8], cells: &Cells, seq: u64) {
        let _ = self.keys.slot(o).set(key.into());
        self.key_bytes.fetch_add(key.len() as u64, Ordering::Relaxed);
        self.start.store(o, seq);
        let mut nulls = 0u64;
        for (c, v) in cells.iter().enumerate() {
            match v {
                Some(v) if !v.is_null() => open.cols[c].put(o, v),
                _ => nulls |= 1 << c,
            }
        }
        open.nulls.store(o, nulls);
        self.len.store(o as u32 + 1, Ordering::Release);
    }

    /// The newest tail record of base record `o` (plus one; 0: none), and whether the row
    /// exists now. Writer only (it sees every record).
    pub(crate) fn newest(&self, o: usize) -> (u32, bool) {
        let t = self.indirection[o].load(Ordering::Acquire);
        let exists = match t {
            0 => !self.deleted_at_base(o),
            t => self.tail.meta(t as usize - 1).flags & DELETE == 0,
        };
        (t, exists)
    }

    /// Appends the tail records of an update of base record `o` at `seq`: first, if some
    /// columns in `set` were never updated, a snapshot record of their current values; then
    /// the update, carrying `set` and (cumulatively) every column the previous tail record
    /// carried since the oldest page's merge point. A full row (`revive`) also brings a
    /// deleted row back. Writer only.
    pub(crate) fn update(&self, types: &[ColumnType], o: usize, set: &[(usize, &Value)], revive: bool, seq: u64) {
        let (prev, _) = self.newest(o);
        let pages = self.pages.load();
        let mut x = self.tail.len.load(Ordering::Relaxed) as usize;
        let mut back = prev;
        let set_mask = set.iter().fold(0u64, |m, &(c, _)| m | 1 << c);
        let first_time = set_mask & !self.updated[o].load(Ordering::Relaxed);
        if first_time != 0 {
            // Never updated before: the base pages of every version still hold the original.
            let old: Vec<(usize, Value)> = (0..types.len())
                .filter(|c| first_time & (1 << c) != 0)
                .map(|c| (c, pages.0[c].value(types[c], c, o)))
                .collect();
            let cells: Vec<(usize, &Value)> = old.iter().map(|(c, v)| (*c, v)).collect();
            let m = Meta { prev: back, base: o, flags: SNAPSHOT, cols: first_time, seq };
            self.tail.write(x, m, &cells);
            back = x as u32 + 1;
            x += 1;
            self.updated[o].fetch_or(first_time, Ordering::Relaxed);
        }
        // Cumulative: carry the previous record's columns unless every page has merged it.
        let mut carried: Vec<(usize, Value)> = Vec::new();
        if prev != 0 && !revive {
            let reset = pages.0[..types.len()].iter().map(|p| p.tps).min().unwrap_or(0);
            let pm = self.tail.meta(prev as usize - 1);
            if prev > reset && pm.flags & DELETE == 0 {
                for c in (0..types.len()).filter(|&c| pm.cols & (1 << c) != 0 && set_mask & (1 << c) == 0) {
                    carried.push((c, self.tail.value(types[c], c, prev as usize - 1)));
                }
            }
        }
        let mut cells: Vec<(usize, &Value)> = set.to_vec();
        cells.extend(carried.iter().map(|(c, v)| (*c, v)));
        let cols = cells.iter().fold(0u64, |m, &(c, _)| m | 1 << c);
        self.tail.write(x, Meta { prev: back, base: o, flags: 0, cols, seq }, &cells);
        self.tail.len.store(x as u32 + 1, Ordering::Release);
        self.indirection[o].store(x as u32 + 1, Ordering::Release);
    }

    /// Appends a delete record for base record `o`. Writer only.
    pub(crate) fn delete(&self, o: usize, seq: u64) {
        let (prev, _) = self.newest(o);
        let x = self.tail.len.load(Ordering::Relaxed) as usize;
        self.tail.write(x, Meta { prev, base: o, flags: DELETE, cols: 0, seq }, &[]);
        self.tail.len.store(x as u32 + 1, Ordering::Release);
        self.indirection[o].store(x as u32 + 1, Ordering::Release);
    }

    /// Whether base record `o` exists at `seq`: its newest visible tail record, `t`, decides;
    /// without one, whether it was deleted at the cut the range was rebased at.
    #[inline]
    pub(crate) fn exists_at(&self, o: usize, t: u32, seq: u64) -> bool {
        self.start.load(o) <= seq
            && match t {
                0 => !self.deleted_at_base(o),
                t => self.tail.meta(t as usize - 1).flags & DELETE == 0,
            }
    }

    /// Whether base record `o` was deleted before every tail record: only in a rebased range
    /// ([`Range::rebased`]), which keeps the deletes at its cut.
    #[inline]
    fn deleted_at_base(&self, o: usize) -> bool {
        self.base_deleted.as_ref().is_some_and(|d| d.value(o))
    }

    /// The bounds of value column `c` over the first `n` base records as a reader at `seq` sees
    /// them: the page's zone map widened by the values tail records it has not folded in carry.
    /// `None` when unknown (the page is newer than `seq`, or does not seal all `n` records, or
    /// keeps no bounds). Deleted rows' values may be inside; the bounds only ever rule out.
    pub(crate) fn bounds(&self, ty: ColumnType, c: usize, n: usize, seq: u64) -> Option<(Value, Value)> {
        let pages = self.pages.load();
        let page = &pages.0[c];
        if page.tps_seq > seq || (page.rows as usize) < n {
            return None;
        }
        let (mut lo, mut hi) = page.zone.clone()?;
        let len = self.tail.len.load(Ordering::Acquire) as usize;
        for x in page.tps as usize..len {
            let m = self.tail.meta(x);
            if m.seq > seq {
                break;
            }
            if m.flags & SNAPSHOT != 0 || m.cols & (1 << c) == 0 {
                continue;
            }
            (lo, hi) = widen((lo, hi), &self.tail.value(ty, c, x));
        }
        Some((lo, hi))
    }

    /// Column `c` of a base record as `at` sees it, given the page loaded before the
    /// indirection. With a page no newer than the read, the walk stops at the page's merge
    /// point: at most the newest record and the page when updates are cumulative. With a newer
    /// page the chain alone answers, the snapshot record standing in for the base value folded
    /// away.
    pub(crate) fn cell(&self, ty: ColumnType, c: usize, page: &Page, at: &At) -> Value {
        let At { o, newest, t, seq } = *at;
        let bit = 1u64 << c;
        if page.tps_seq <= seq {
            let mut x = t;
            while x > page.tps {
                let m = self.tail.meta(x as usize - 1);
                if m.flags & SNAPSHOT == 0 && m.cols & bit != 0 {
                    return self.tail.value(ty, c, x as usize - 1);
                }
                x = m.prev;
            }
            return page.value(ty, c, o);
        }
        let mut x = newest;
        let mut original = None;
        while x != 0 {
            let m = self.tail.meta(x as usize - 1);
            if m.cols & bit != 0 {
                if m.flags & SNAPSHOT != 0 {
                    original = Some(self.tail.value(ty, c, x as usize - 1));
                } else if m.seq <= seq {
                    return self.tail.value(ty, c, x as usize - 1);
                }
            }
            x = m.prev;
        }
        // Never updated in the chain: every page holds the original.
        original.unwrap_or_else(|| page.value(ty, c, o))
    }

    /// The row at offset `o` at `seq`, its `wanted` value columns decoded (others `None`).
    pub(crate) fn read_row(&self, types: &[ColumnType], o: usize, seq: u64, wanted: Option<&[bool]>) -> Option<Cells> {
        if o >= self.len.load(Ordering::Acquire) as usize {
            return None;
        }
        // Pages before the indirection: whatever a page folded in is in the chain read after.
        let pages = self.pages.load();
        let at = At::read(self, o, seq);
        if !self.exists_at(o, at.t, seq) {
            return None;
        }
        let wants = |c: usize| wanted.is_none_or(|w| w.get(c).copied().unwrap_or(false));
        Some((0..types.len()).map(|c| wants(c).then(|| self.cell(types[c], c, &pages.0[c], &at))).collect())
    }

    /// The changes to rows of this range after `from` up to `to`, oldest first: (sequence
    /// number, offset, the whole row then or `None` for a delete). An insert of a new row and
    /// each update or delete is one change; snapshot records are not changes.
    pub(crate) fn history(&self, types: &[ColumnType], from: u64, to: u64) -> Vec<(u64, usize, Option<Cells>)> {
        let mut out = Vec::new();
        let within = |s: u64| s > from && s <= to;
        for o in 0..self.len.load(Ordering::Acquire) as usize {
            let s = self.start.load(o);
            if within(s) {
                out.push((s, o, self.read_row(types, o, s, None)));
            }
        }
        // One pass forward over the tail records: each row's state is read once, just before
        // its first change here, and then follows its records (a walk back per change would
        // cost the square of a hot row's changes).
        let mut rows: std::collections::HashMap<usize, Option<Cells>> = std::collections::HashMap::new();
        let len = self.tail.len.load(Ordering::Acquire) as usize;
        for x in self.records_by(from)..len {
            let m = self.tail.meta(x);
            if m.seq > to {
                break;
            }
            if m.flags & SNAPSHOT != 0 {
                continue;
            }
            let row = rows.entry(m.base).or_insert_with(|| self.read_row(types, m.base, m.seq - 1, None));
            if m.flags & DELETE != 0 {
                *row = None;
            } else {
                let cells = row.get_or_insert_with(|| vec![None; types.len()]);
                for c in (0..types.len()).filter(|&c| m.cols & (1 << c) != 0) {
                    cells[c] = Some(self.tail.value(types[c], c, x));
                }
            }
            out.push((m.seq, m.base, row.clone()));
        }
        out.sort_unstable_by_key(|&(s, ..)| s);
        out
    }

    /// Bytes held: base (open base values, sealed pages, keys, per-record fields), tail records
    /// not yet merged, and merged tail records (kept only for reads at older points: the
    /// history), the last two split in proportion to their record counts.
    pub(crate) fn bytes(&self) -> (usize, usize, usize) {
        let mut base = self.keys.bytes() + self.start.bytes() + self.cap * 12;
        base += self.key_bytes.load(Ordering::Relaxed) as usize;
        let mut open_counted = false;
        let pages = self.pages.load();
        for p in pages.0.iter() {
            base += p.sealed.as_ref().map_or(0, |a| a.array().get_array_memory_size());
            if let (Some(open), false) = (&p.open, open_counted) {
                base += open.cols.iter().map(Column::bytes).sum::<usize>() + open.nulls.bytes();
                open_counted = true;
            }
        }
        let tail = self.tail.bytes();
        let records = self.tail.len.load(Ordering::Acquire) as usize;
        let merged = pages.0.iter().map(|p| p.tps as usize).min().unwrap_or(0).min(records);
        let history = if records == 0 { 0 } else { (tail as u128 * merged as u128 / records as u128) as usize };
        (base, tail - history, history)
    }

    /// Folds committed tail records (those at or below `visible`) into new pages for every
    /// column with any to fold, and seals base records inserted since the last merge. Returns
    /// the tail records folded (0: nothing to do). Readers and the writer go on meanwhile: the
    /// new page set replaces the old one in one swap (`before_swap` runs just before it).
    pub(crate) fn merge(&self, types: &[ColumnType], visible: u64, before_swap: &dyn Fn()) -> usize {
        let mut n = self.tail.len.load(Ordering::Acquire) as usize;
        while n > 0 && self.tail.seq(n - 1) > visible {
            n -= 1;
        }
        let rows = self.len.load(Ordering::Acquire) as usize;
        let current = self.pages.load_full();
        let tps = current.0.iter().map(|p| p.tps as usize).min().unwrap_or(0);
        let sealed = current.0.iter().map(|p| p.rows as usize).min().unwrap_or(0);
        if tps >= n && sealed >= rows {
            return 0;
        }
        // Algorithm 1 in one pass over the committed tail records: each base record takes its
        // newest change of every column (and of its existence).
        let cols: Vec<usize> = (0..types.len()).collect();
        let Some(ch) = self.changes(&current, &cols, rows, visible) else { return 0 };
        let tps_seq = if n > 0 { self.tail.seq(n - 1) } else { 0 };
        let mut built: Vec<(usize, Page)> = Vec::new();
        for (c, old) in current.0.iter().enumerate() {
            let grown = (old.rows as usize) < rows;
            let (sealed, zone) = match ch.newest.get(c) {
                Some(newest) if !newest.is_empty() || grown => {
                    let ty = types[c];
                    let over: Vec<(usize, Value)> =
                        newest.iter().map(|&(o, x)| (o as usize, self.tail.value(ty, c, x as usize))).collect();
                    let fill = |o: usize| old.value(ty, c, o);
                    let sealed = Sealed::new(overlay(ty, old.sealed.as_ref(), old.rows as usize, rows, &fill, &over));
                    // Bounds only ever need to hold every value: widen the old ones by the
                    // changes (values replaced may leave them loose) unless records were sealed.
                    let zone = match &old.zone {
                        Some(z) if !grown => Some(over.iter().fold(z.clone(), |z, (_, v)| widen(z, v))),
                        _ => sealed.bounds(),
                    };
                    (Some(sealed), zone)
                }
                // A value column nothing changed: its values stay, its merge point moves on.
                Some(_) => (old.sealed.clone(), old.zone.clone()),
                // The existence page: deleted = not live.
                None => (Some(Sealed::new(Arc::new(arrow_array::BooleanArray::new(!&ch.live, None)))), None),
            };
            let tps_new = (old.tps as usize).max(n) as u32;
            built.push((
                c,
                Page {
                    tps: tps_new,
                    tps_seq: if tps_new == old.tps { old.tps_seq } else { tps_seq },
                    rows: rows as u32,
                    sealed,
                    zone,
                    open: if rows < self.cap { old.open.clone() } else { None },
                },
            ));
        }
        let folded = n.saturating_sub(tps);
        if built.is_empty() {
            return 0;
        }
        let mut next: Vec<Arc<Page>> = current.0.to_vec();
        for (c, page) in built {
            next[c] = Arc::new(page);
        }
        before_swap();
        // The old pages are freed when the last reader holding them lets go. Only this thread
        // stores page sets, so nothing was swapped in since `current` was loaded.
        self.pages.store(Arc::new(Pages(next.into())));
        folded.max(1)
    }

    /// Committed tail records not folded into every page yet.
    pub(crate) fn unmerged(&self) -> usize {
        let len = self.tail.len.load(Ordering::Acquire);
        let tps = self.pages.load().0.iter().map(|p| p.tps).min().unwrap_or(0);
        (len - tps.min(len)) as usize
    }

    /// Whether base records wait to be sealed into pages.
    pub(crate) fn unsealed(&self) -> usize {
        let rows = self.len.load(Ordering::Acquire);
        let sealed = self.pages.load().0.first().map_or(rows, |p| p.rows);
        (rows - sealed.min(rows)) as usize
    }
}

/// Column-wise reads of a whole range at one sequence number, for scans: base pages as they
/// are, with the tail records they have not folded in laid over them by position.
impl Range {
    /// Base records inserted at or before `seq` (inserts come in sequence order, so they are
    /// a prefix of the range).
    pub(crate) fn visible_len(&self, seq: u64) -> usize {
        let n = self.len.load(Ordering::Acquire) as usize;
        if n == 0 || self.start.load(n - 1) <= seq {
            return n;
        }
        super::partition(n, |o| self.start.load(o) <= seq)
    }

    /// Which of the first `n` base records (all inserted at or before `seq`, see
    /// [`Range::visible_len`]) exist at `seq`.
    pub(crate) fn live_mask(&self, n: usize, seq: u64) -> BooleanBuffer {
        let pages = self.pages.load();
        match self.changes(&pages, &[], n, seq) {
            Some(ch) => ch.live,
            None => (0..n).map(|o| self.exists_at(o, At::read(self, o, seq).t, seq)).collect(),
        }
    }

    /// Column `c` of the first `n` base records at `seq` (any value where a record does not
    /// exist at `seq`).
    pub(crate) fn column(&self, ty: ColumnType, c: usize, n: usize, seq: u64) -> ArrayRef {
        let pages = self.pages.load();
        let page = &pages.0[c];
        match self.changes(&pages, &[c], n, seq) {
            Some(ch) => {
                let over: Vec<(usize, Value)> =
                    ch.newest[0].iter().map(|&(o, x)| (o as usize, self.tail.value(ty, c, x as usize))).collect();
                let rows = (page.rows as usize).min(n);
                match &page.sealed {
                    Some(a) if over.is_empty() && rows == n => a.array().slice(0, n),
                    sealed => overlay(ty, sealed.as_ref(), rows, n, &|o| page.value(ty, c, o), &over),
                }
            }
            None => {
                let mut b = ValuesBuilder::new(ty);
                for o in 0..n {
                    b.push(&self.cell(ty, c, page, &At::read(self, o, seq)));
                }
                b.finish()
            }
        }
    }
}

/// What the tail records of a range change in its first `n` base records at one sequence
/// number, against one set of pages (see [`Range::changes`]).
pub(crate) struct Changes {
    /// Which records exist.
    pub live: BooleanBuffer,
    /// Which records some tail record changes a requested column of (`None`: none).
    pub changed: Option<BooleanBuffer>,
    /// Per requested column: (offset, tail record) of the records changing it past its page,
    /// sorted by offset, the newest record only.
    pub newest: Vec<Vec<(u32, u32)>>,
}

impl Range {
    /// One pass over the tail records the pages of `cols` (value columns) and the existence
    /// page have not folded in, at or below `seq`: which of the first `n` records exist, and
    /// per column the newest record changing it. `None` when a page is newer than `seq` (the
    /// caller reads record by record instead).
    pub(crate) fn changes(&self, pages: &Pages, cols: &[usize], n: usize, seq: u64) -> Option<Changes> {
        let exist = pages.0.last()?;
        if exist.tps_seq > seq || cols.iter().any(|&c| pages.0[c].tps_seq > seq) {
            return None;
        }
        let sealed = (exist.rows as usize).min(n);
        let deleted = match &exist.sealed {
            Some(Sealed::Bool(d)) if sealed > 0 => Some(d.values().slice(0, sealed)),
            _ => None,
        };
        let mut live: Option<BooleanBufferBuilder> = None;
        let live_builder = || {
            let mut b = BooleanBufferBuilder::new(n);
            match &deleted {
                Some(d) => b.append_buffer(&!d),
                None => b.append_n(sealed, true),
            }
            b.append_n(n - sealed, true);
            b
        };
        let mut changed: Option<BooleanBufferBuilder> = None;
        let mut newest: Vec<Vec<(u32, u32)>> = vec![Vec::new(); cols.len()];
        let from = cols.iter().map(|&c| pages.0[c].tps).chain([exist.tps]).min().unwrap_or(0) as usize;
        let len = self.tail.len.load(Ordering::Acquire) as usize;
        for x in from..len {
            let m = self.tail.meta(x);
            if m.seq > seq {
                break;
            }
            if m.flags & SNAPSHOT != 0 || m.base >= n {
                continue;
            }
            if x >= exist.tps as usize {
                live.get_or_insert_with(live_builder).set_bit(m.base, m.flags & DELETE == 0);
            }
            for (i, &c) in cols.iter().enumerate() {
                if m.cols & (1 << c) != 0 && x >= pages.0[c].tps as usize {
                    newest[i].push((m.base as u32, x as u32));
                    changed
                        .get_or_insert_with(|| {
                            let mut b = BooleanBufferBuilder::new(n);
                            b.append_n(n, false);
                            b
                        })
                        .set_bit(m.base, true);
                }
            }
        }
        let live = match live {
            Some(mut b) => b.finish(),
            None => match &deleted {
                Some(d) if n == sealed => !d,
                _ => live_builder().finish(),
            },
        };
        for list in &mut newest {
            // Stable: of one offset's records, the newest (last) stays last; keep only it.
            list.sort_by_key(|&(o, _)| o);
            list.reverse();
            list.dedup_by_key(|&mut (o, _)| o);
            list.reverse();
        }
        Some(Changes { live, changed: changed.map(|mut b| b.finish()), newest })
    }

    /// The base values of column `c` for offsets `a..b`, as the page holds them.
    pub(crate) fn base_column(&self, page: &Page, ty: ColumnType, c: usize, a: usize, b: usize) -> ArrayRef {
        match &page.sealed {
            Some(s) if page.rows as usize >= b => s.array().slice(a, b - a),
            sealed => overlay(ty, sealed.as_ref(), (page.rows as usize).min(b), b, &|o| page.value(ty, c, o), &[])
                .slice(a, b - a),
        }
    }

    /// Column `c` of record `o`: from the newest tail record changing it (`newest`, as
    /// [`Changes::newest`] lists them), else from the page.
    pub(crate) fn value_of(&self, page: &Page, ty: ColumnType, c: usize, o: usize, newest: &[(u32, u32)]) -> Value {
        match newest.binary_search_by_key(&(o as u32), |&(o, _)| o) {
            Ok(i) => self.tail.value(ty, c, newest[i].1 as usize),
            Err(_) => page.value(ty, c, o),
        }
    }
}
