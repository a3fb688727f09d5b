//! The PAX data block: one block holds a run of versions in (key asc, seq desc) order, stored
//! column by column. All versions of one key sit in the same block.
//!
//! Content layout (before compression; little-endian throughout):
//! ```text
//! n u32 | ncols u16 | (4 + ncols) × u32 section offsets: keys, seqs, kinds, col 0.., end
//! keys:   a key page (see [`super::keys`]): binary-searchable, prefix-compressed
//! seqs:   base u64 | width u8 | n × width bytes (seq - base)      (absent when n = 0)
//! kinds:  n × u8 (0 delete, 1 put, 2 update); empty when every row is a put
//! col i:  flags u8 (bit0 presence bitmap follows, bit1 null bitmap follows)
//!         [presence bitmap ceil(n/8)]  bit set = the row carries this column
//!         [null bitmap ceil(n/8)]      bit set = NULL
//!         fixed-width: n × width bytes (zeros where absent or NULL)
//!         var-width:   (n+1) × u32 offsets into the heap, n × u32 prefixes, then the heap
//! ```
//!
//! A var-width value's prefix is its first four bytes (zero-padded) read as a big-endian number:
//! prefixes order like the values, so comparisons settle most rows without touching the heap
//! (TellStore §5.2).

use std::sync::{Arc, OnceLock};

use smallvec::SmallVec;

use super::keys::{encode_keyless, encode_keys, encode_seqs, KeyPage, SeqPage};
use crate::codec::{DecodeError, DecodeResult, Reader};
use crate::mvcc::Kind;
use crate::sst::zone::{ZoneBuilder, ZoneMap};
use crate::types::row::RawCell;
use crate::types::{ColumnType, Value};

fn set_bit(bm: &mut Vec<u8>, i: usize) {
    if bm.len() <= i / 8 {
        bm.resize(i / 8 + 1, 0);
    }
    bm[i / 8] |= 1 << (i % 8);
}

fn get_bit(bm: &[u8], i: usize) -> bool {
    bm.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
}

struct ColBuf {
    ty: ColumnType,
    /// `ty.fixed_width()`.
    width: Option<usize>,
    presence: Vec<u8>,
    nulls: Vec<u8>,
    any_absent: bool,
    any_null: bool,
    /// Cells not carried and NULL cells, for the zone map's counts.
    absent: u64,
    null_cells: u64,
    fixed: Vec<u8>,
    offsets: Vec<u32>,
    prefixes: Vec<u32>,
    var: Vec<u8>,
    zone: ZoneBuilder,
}

/// The first four bytes of `b` (zero-padded) as a big-endian number: ordered like `b`, ties
/// broken only by the remaining bytes.
#[inline]
pub(crate) fn prefix_of(b: &[u8]) -> u32 {
    match b.first_chunk::<4>() {
        Some(p) => u32::from_be_bytes(*p),
        // Shorter values byte by byte: a copy of a length not known here calls `memcpy`.
        None => b.iter().enumerate().fold(0, |p, (i, &x)| p | u32::from(x) << (24 - 8 * i)),
    }
}

impl ColBuf {
    fn new(ty: ColumnType) -> Self {
        ColBuf {
            ty,
            width: ty.fixed_width(),
            presence: Vec::new(),
            nulls: Vec::new(),
            any_absent: false,
            any_null: false,
            absent: 0,
            null_cells: 0,
            fixed: Vec::new(),
            offsets: vec![0],
            prefixes: Vec::new(),
            var: Vec::new(),
            zone: ZoneBuilder::new(ty),
        }
    }

    /// Adds row `row`'s cell. The presence bitmap is kept only from the first row that does not
    /// carry the column on (rows before it are marked present then): most blocks hold full
    /// rows and never build one.
    fn push(&mut self, row: usize, v: RawCell<'_>) {
        match v {
            RawCell::Absent => {
                self.absent += 1;
                if !self.any_absent {
                    self.any_absent = true;
                    self.presence.clear();
                    self.presence.resize(row / 8, 0xff);
                    if !row.is_multiple_of(8) {
                        self.presence.push((1u8 << (row % 8)) - 1);
                    }
                }
            }
            RawCell::Null => {
                if self.any_absent {
                    set_bit(&mut self.presence, row);
                }
                self.null_cells += 1;
                self.any_null = true;
                set_bit(&mut self.nulls, row);
            }
            RawCell::Bytes(b) => {
                if self.any_absent {
                    set_bit(&mut self.presence, row);
                }
                if self.width.is_none() {
                    self.zone.add_var(b);
                }
            }
        }
        match self.width {
            Some(w) => match v {
                // Constant-size copies for the common widths (a call to memcpy otherwise).
                RawCell::Bytes(b) => match b.len() {
                    8 => self.fixed.extend_from_slice(&<[u8; 8]>::try_from(b).unwrap_or_default()),
                    4 => self.fixed.extend_from_slice(&<[u8; 4]>::try_from(b).unwrap_or_default()),
                    _ => self.fixed.extend_from_slice(b),
                },
                _ => self.fixed.extend(std::iter::repeat_n(0u8, w)),
            },
            None => {
                let b = if let RawCell::Bytes(b) = v { b } else { &[] };
                self.var.extend_from_slice(b);
                self.offsets.push(self.var.len() as u32);
                self.prefixes.push(prefix_of(b));
            }
        }
    }

    /// Adds rows `start..start + len` of column `c` of `block` as rows `dest..`: one copy for
    /// a fixed-width column every row of which carries a non-NULL value, cell by cell otherwise.
    fn push_run(&mut self, block: &Block, c: usize, start: usize, len: usize, dest: usize) {
        if let (Some(w), Some(parts)) = (self.width, block.column(c)) {
            if let (true, None, Some(values)) =
                (parts.carried_by_all, parts.nulls, parts.fixed.get(start * w..(start + len) * w))
            {
                self.fixed.extend_from_slice(values);
                if self.any_absent {
                    for r in dest..dest + len {
                        set_bit(&mut self.presence, r);
                    }
                }
                return;
            }
        }
        for k in 0..len {
            self.push(dest + k, block.raw_cell(start + k, c));
        }
    }

    /// Bytes a cell adds to the column's data (bitmaps not counted).
    #[inline]
    fn cell_bytes(&self, v: RawCell<'_>) -> usize {
        match (self.width, v) {
            (Some(w), _) => w,
            (None, RawCell::Bytes(b)) => b.len() + 8,
            (None, _) => 8,
        }
    }

    fn reset(&mut self) {
        self.presence.clear();
        self.nulls.clear();
        self.any_absent = false;
        self.any_null = false;
        self.absent = 0;
        self.null_cells = 0;
        self.fixed.clear();
        self.offsets.clear();
        self.offsets.push(0);
        self.prefixes.clear();
        self.var.clear();
        self.zone = ZoneBuilder::new(self.ty);
    }

    /// The block's zone map of the column (`n` rows).
    fn zone(&mut self, n: usize) -> ZoneMap {
        if self.ty.fixed_width().is_some() {
            let nb = n.div_ceil(8);
            let present = self.any_absent.then_some(&self.presence[..self.presence.len().min(nb)]);
            let nulls = self.any_null.then_some(&self.nulls[..self.nulls.len().min(nb)]);
            self.zone.bound_fixed(&self.fixed, present, nulls);
        }
        self.zone.set_counts(n as u64 - self.absent, self.null_cells);
        self.zone.finish()
    }

    fn finish(&self, n: usize, out: &mut Vec<u8>) {
        let nb = n.div_ceil(8);
        out.push(u8::from(self.any_absent) | (u8::from(self.any_null) << 1));
        let mut bm = |b: &Vec<u8>| {
            out.extend_from_slice(b);
            out.extend(std::iter::repeat_n(0u8, nb - b.len().min(nb)));
        };
        if self.any_absent {
            bm(&self.presence);
        }
        if self.any_null {
            bm(&self.nulls);
        }
        match self.ty.fixed_width() {
            Some(_) => out.extend_from_slice(&self.fixed),
            None => {
                for o in self.offsets.iter().chain(&self.prefixes) {
                    out.extend_from_slice(&o.to_le_bytes());
                }
                out.extend_from_slice(&self.var);
            }
        }
    }
}

/// Accumulates one block.
pub(crate) struct BlockBuilder {
    n: usize,
    /// The keys so far, concatenated, and where each ends.
    key_data: Vec<u8>,
    key_ends: Vec<u32>,
    /// The keys' bytes past the prefix each shares with the one before (for [`Self::size`]).
    key_size: usize,
    seqs: Vec<u64>,
    kinds: Vec<u8>,
    cols: Vec<ColBuf>,
    /// Bytes of column data so far (bitmaps aside), for [`Self::size`].
    cell_bytes: usize,
    min_seq: u64,
    max_seq: u64,
    /// Every version so far is a full row of a distinct key.
    clean: bool,
    /// Rows whose cells are still only in the block they were read from (see
    /// [`Self::add_copied`]), in row order, before any row added cell by cell after them.
    pending: Vec<PendingRun>,
    /// The group's var-width columns, and the bytes a row's fixed-width cells take.
    var_cols: Vec<usize>,
    fixed_row_bytes: usize,
    /// Rows carry no keys, sequence numbers or kinds: a group page of a row-group file.
    keyless: bool,
}

/// Consecutive rows of one source block waiting to be copied: `len` rows from `start`, to
/// become rows `dest..` of the block being built.
struct PendingRun {
    block: Arc<Block>,
    /// For each column of the builder, the source block's column (`None`: the same).
    cols: Option<Arc<[usize]>>,
    start: usize,
    len: usize,
    dest: usize,
}

/// What [`BlockBuilder::finish`] returns besides the content.
pub(crate) struct BlockSummary {
    pub zones: Vec<ZoneMap>,
    pub rows: usize,
    pub min_seq: u64,
    pub max_seq: u64,
    /// Every version is a full row (`Put`) and no key repeats.
    pub clean: bool,
}

impl BlockBuilder {
    pub(crate) fn new(types: &[ColumnType]) -> Self {
        BlockBuilder {
            n: 0,
            key_data: Vec::new(),
            key_ends: Vec::new(),
            key_size: 0,
            seqs: Vec::new(),
            kinds: Vec::new(),
            cols: types.iter().map(|&t| ColBuf::new(t)).collect(),
            cell_bytes: 0,
            min_seq: u64::MAX,
            max_seq: 0,
            clean: true,
            pending: Vec::new(),
            var_cols: (0..types.len()).filter(|&c| types[c].fixed_width().is_none()).collect(),
            fixed_row_bytes: types.iter().filter_map(|t| t.fixed_width()).sum(),
            keyless: false,
        }
    }

    /// A builder of blocks whose rows carry only cells (see [`Self::add_cells`]): the group
    /// pages of a row-group file, whose key pages hold the rows' keys.
    pub(crate) fn keyless(types: &[ColumnType]) -> Self {
        BlockBuilder { keyless: true, ..Self::new(types) }
    }

    /// Adds a row's cells to a keyless block; `cells` yields the group's columns in order.
    pub(crate) fn add_cells<'v>(&mut self, cells: impl Iterator<Item = RawCell<'v>>) {
        debug_assert!(self.keyless);
        self.copy_pending();
        let row = self.n;
        self.push_cells(row, cells);
        self.n += 1;
    }

    /// Rows added so far.
    pub(crate) fn rows(&self) -> usize {
        self.n
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Empties the builder, keeping its buffers' capacity for the next block.
    fn reset(&mut self) {
        self.n = 0;
        self.key_data.clear();
        self.key_ends.clear();
        self.key_size = 0;
        self.seqs.clear();
        self.kinds.clear();
        self.cell_bytes = 0;
        self.min_seq = u64::MAX;
        self.max_seq = 0;
        self.clean = true;
        self.pending.clear();
        for c in &mut self.cols {
            c.reset();
        }
    }

    pub(crate) fn last_key(&self) -> &[u8] {
        let start = self.key_ends.len().checked_sub(2).map_or(0, |i| self.key_ends[i] as usize);
        &self.key_data[start..]
    }

    /// Approximate encoded size so far (bitmaps counted as full from their column's first
    /// absent or NULL cell); constant time, as it is asked at every key.
    pub(crate) fn size(&self) -> usize {
        self.key_size + 4 * self.seqs.len() + self.kinds.len() + self.cell_bytes
    }

    /// Adds a version; `cells` yields the group's columns in order (exactly one per column).
    pub(crate) fn add<'v>(&mut self, key: &[u8], seq: u64, kind: Kind, cells: impl Iterator<Item = RawCell<'v>>) {
        self.copy_pending();
        let row = self.add_key(key, seq, kind);
        self.push_cells(row, cells);
        self.n += 1;
    }

    /// Adds row `row`'s cells, one per column.
    fn push_cells<'v>(&mut self, row: usize, cells: impl Iterator<Item = RawCell<'v>>) {
        let mut cells = cells;
        for c in self.cols.iter_mut() {
            let v = cells.next().unwrap_or(RawCell::Absent);
            // A bitmap's bytes: one per 8 rows from the first absent or NULL cell.
            let bitmaps =
                usize::from(c.any_absent || v == RawCell::Absent) + usize::from(c.any_null || v == RawCell::Null);
            self.cell_bytes += c.cell_bytes(v) + if row.is_multiple_of(8) { bitmaps } else { 0 };
            c.push(row, v);
        }
    }

    /// Adds version `row` of `block`, whose group has exactly this builder's columns: its cells
    /// are copied column by column later, a run of consecutive rows at a time (vertical merge),
    /// instead of one cell at a time.
    pub(crate) fn add_copied(&mut self, key: &[u8], seq: u64, kind: Kind, block: &Arc<Block>, row: usize) {
        let dest = self.add_key(key, seq, kind);
        self.copy_row(block, None, row, dest);
    }

    /// For a keyless block: row `row` of `block` becomes the next row, column `k` of this block
    /// taking the cell of the block's column `cols[k]` (copied with its run, as in
    /// [`Self::add_copied`]).
    pub(crate) fn add_cells_copied(&mut self, block: &Arc<Block>, cols: &Arc<[usize]>, row: usize) {
        debug_assert!(self.keyless);
        let dest = self.n;
        self.copy_row(block, Some(cols), row, dest);
    }

    /// Notes row `row` of `block` as this block's row `dest`, to be copied with its run.
    fn copy_row(&mut self, block: &Arc<Block>, cols: Option<&Arc<[usize]>>, row: usize, dest: usize) {
        self.cell_bytes += self.fixed_row_bytes;
        for &c in &self.var_cols {
            self.cell_bytes += match block.raw_cell(row, cols.map_or(c, |m| m[c])) {
                RawCell::Bytes(b) => b.len() + 8,
                _ => 8,
            };
        }
        let same_cols = |p: &PendingRun| match (&p.cols, cols) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        match self.pending.last_mut() {
            Some(p)
                if Arc::ptr_eq(&p.block, block) && same_cols(p) && p.start + p.len == row && p.dest + p.len == dest =>
            {
                p.len += 1
            }
            _ => self.pending.push(PendingRun { block: block.clone(), cols: cols.cloned(), start: row, len: 1, dest }),
        }
        self.n += 1;
    }

    /// Copies the pending rows' cells into the columns.
    fn copy_pending(&mut self) {
        for p in self.pending.drain(..) {
            for (c, col) in self.cols.iter_mut().enumerate() {
                let from = p.cols.as_ref().map_or(c, |m| m[c]);
                col.push_run(&p.block, from, p.start, p.len, p.dest);
            }
        }
    }

    /// Adds a version's key, sequence number and kind; returns its row.
    fn add_key(&mut self, key: &[u8], seq: u64, kind: Kind) -> usize {
        let last = self.last_key();
        let shared = key.iter().zip(last).take_while(|(a, b)| a == b).count();
        self.clean &= kind == Kind::Put && !(self.n > 0 && shared == key.len() && shared == last.len());
        self.key_size += key.len() - shared + 2;
        self.key_data.extend_from_slice(key);
        self.key_ends.push(self.key_data.len() as u32);
        self.seqs.push(seq);
        self.kinds.push(kind as u8);
        self.min_seq = self.min_seq.min(seq);
        self.max_seq = self.max_seq.max(seq);
        self.n
    }

    /// Encodes the block and resets the builder.
    pub(crate) fn finish(&mut self) -> (Vec<u8>, BlockSummary) {
        self.copy_pending();
        let n = self.n;
        let ncols = self.cols.len();
        let mut out = Vec::with_capacity(self.size() + 64);
        out.extend_from_slice(&(n as u32).to_le_bytes());
        out.extend_from_slice(&(ncols as u16).to_le_bytes());
        let table = out.len();
        out.resize(table + 4 * (4 + ncols), 0);
        let mut offs = Vec::with_capacity(4 + ncols);
        offs.push(out.len());
        if self.keyless {
            encode_keyless(&mut out);
        } else {
            encode_keys(&self.key_data, &self.key_ends, &mut out);
        }
        offs.push(out.len());
        encode_seqs(&self.seqs, &mut out);
        offs.push(out.len());
        if self.kinds.iter().any(|&k| k != Kind::Put as u8) {
            out.extend_from_slice(&self.kinds);
        }
        for c in &self.cols {
            offs.push(out.len());
            c.finish(n, &mut out);
        }
        offs.push(out.len());
        for (i, o) in offs.iter().enumerate() {
            out[table + 4 * i..table + 4 * i + 4].copy_from_slice(&(*o as u32).to_le_bytes());
        }
        let zones = self.cols.iter_mut().map(|c| c.zone(n)).collect();
        let summary = BlockSummary { zones, rows: n, min_seq: self.min_seq, max_seq: self.max_seq, clean: self.clean };
        self.reset();
        (out, summary)
    }

    /// A block of `keys`'s rows (a key page of a row-group file) with columns of `types` whose
    /// cells are stored in other blocks: `columns[c]` lists, in row order, the runs of rows
    /// holding column `c`'s cells, which together cover exactly `keys`'s rows. Cells are copied
    /// a run at a time, as in [`Self::add_copied`]. `None` when the runs do not cover the rows.
    pub(crate) fn assemble(keys: &Block, types: &[ColumnType], columns: &[Vec<ColumnRun>]) -> Option<Vec<u8>> {
        if columns.len() != types.len()
            || columns.iter().any(|runs| runs.iter().map(|r| r.len).sum::<usize>() != keys.len())
            || columns.iter().flatten().any(|r| r.start + r.len > r.block.len() || r.col >= r.block.ncols())
        {
            return None;
        }
        let mut b = BlockBuilder::new(types);
        for i in 0..keys.len() {
            b.add_key(keys.key(i), keys.seq(i), keys.kind(i));
            b.n += 1;
        }
        for (col, runs) in b.cols.iter_mut().zip(columns) {
            let mut dest = 0;
            for r in runs {
                col.push_run(&r.block, r.col, r.start, r.len, dest);
                dest += r.len;
            }
        }
        Some(b.finish().0)
    }
}

/// Column `col` of `len` rows of `block` from row `start` (see [`BlockBuilder::assemble`]).
pub(crate) struct ColumnRun {
    pub block: Arc<Block>,
    pub col: usize,
    pub start: usize,
    pub len: usize,
}

/// One column of a block, as stored (see the module comment).
pub(crate) struct ColumnParts<'a> {
    pub ty: ColumnType,
    /// Every version carries the column (no presence bitmap).
    pub carried_by_all: bool,
    /// Null bitmap (bit set = NULL), if any value is NULL.
    pub nulls: Option<&'a [u8]>,
    /// Fixed-width values (empty for TEXT/BYTEA).
    pub fixed: &'a [u8],
    /// TEXT/BYTEA: `n + 1` u32 offsets into `heap`.
    pub offsets: &'a [u8],
    /// TEXT/BYTEA: `n` u32 prefixes.
    pub prefixes: &'a [u8],
    /// TEXT/BYTEA: the values' bytes.
    pub heap: &'a [u8],
}

#[derive(Debug)]
struct ColView {
    section_start: usize,
    ty: ColumnType,
    presence: Option<usize>,
    nulls: Option<usize>,
    data: usize,
}

/// A decoded, validated data block. Column values are read from the raw content on demand.
#[derive(Debug)]
pub(crate) struct Block {
    n: usize,
    /// The key and sequence-number sections in `body`, checked.
    keys: KeyPage,
    seqs: SeqPage,
    /// Bytes of the keys decoded (the key index's size).
    key_bytes: usize,
    /// Each row's kind; empty when every row is a put.
    kinds: Vec<Kind>,
    body: Vec<u8>,
    cols: Vec<ColView>,
    max_seq: u64,
    clean: bool,
    index: OnceLock<KeyIndex>,
}

/// A block's keys decoded into one array, for readers that take keys as contiguous slices
/// (scans and compaction walking versions in order). Point lookups and seeks search the key
/// page as stored ([`Block::versions_of`]): a block that only they read never builds it.
#[derive(Debug)]
struct KeyIndex {
    keys: Vec<u8>,
    key_ends: Vec<u32>,
}

/// What a point lookup found in a block: the first row whose key is not below the key looked
/// up, and the sequence numbers of the key's versions, newest first (none when absent).
pub(crate) type Versions = (usize, SmallVec<[u64; 4]>);

/// A block's row count and section offsets (keys, seqs, kinds, each column, end), checked to
/// lie in order within the block; the block must have `ncols` columns.
fn sections(body: &[u8], ncols: usize) -> DecodeResult<(usize, Vec<usize>)> {
    let mut r = Reader::new(body);
    let n = r.u32()? as usize;
    let stored = r.u16()? as usize;
    if stored != ncols {
        return Err(DecodeError::new(format!("block has {stored} columns, group has {ncols}")));
    }
    if n > body.len() {
        return Err(DecodeError::new("row count larger than block"));
    }
    let mut offs = Vec::with_capacity(4 + ncols);
    for _ in 0..4 + ncols {
        offs.push(r.u32()? as usize);
    }
    if offs.windows(2).any(|w| w[0] > w[1]) || offs[0] != r.pos() || offs[offs.len() - 1] != body.len() {
        return Err(DecodeError::new("bad section offsets"));
    }
    Ok((n, offs))
}

/// Format 3's key and sequence-number sections, rewritten as format 4's when a block of a
/// format-3 file is read (so everything past decoding sees one format; compaction rewrites
/// such files in format 4).
mod format3 {
    use super::*;

    /// Rewrites a format-3 block content as format 4: same header, columns and kinds; keys and
    /// sequence numbers re-encoded.
    pub(super) fn upgrade(body: &[u8], ncols: usize) -> DecodeResult<Vec<u8>> {
        let (n, offs) = sections(body, ncols)?;
        // Keys: n × (shared varint | unshared varint | unshared bytes), prefix-coded.
        let mut kr = Reader::new(&body[offs[0]..offs[1]]);
        let (mut data, mut ends) = (Vec::new(), Vec::with_capacity(n));
        let mut key: Vec<u8> = Vec::new();
        for _ in 0..n {
            let shared = kr.varint()? as usize;
            let unshared = kr.len(kr.remaining())?;
            if shared > key.len() {
                return Err(DecodeError::new("bad key prefix length"));
            }
            key.truncate(shared);
            key.extend_from_slice(kr.take(unshared)?);
            data.extend_from_slice(&key);
            ends.push(data.len() as u32);
        }
        if !kr.is_empty() {
            return Err(DecodeError::new("trailing bytes in key section"));
        }
        // Sequence numbers: base u64 | n × varint(seq - base).
        let mut sr = Reader::new(&body[offs[1]..offs[2]]);
        let mut seqs = Vec::with_capacity(n);
        if n > 0 {
            let base = sr.u64()?;
            for _ in 0..n {
                seqs.push(base.checked_add(sr.varint()?).ok_or_else(|| DecodeError::new("sequence number overflows"))?);
            }
        }
        if !sr.is_empty() {
            return Err(DecodeError::new("trailing bytes in seq section"));
        }
        let mut out = Vec::with_capacity(body.len() + n);
        out.extend_from_slice(&body[..6]);
        let table = out.len();
        out.resize(table + 4 * (4 + ncols), 0);
        let mut new_offs = vec![out.len()];
        encode_keys(&data, &ends, &mut out);
        new_offs.push(out.len());
        encode_seqs(&seqs, &mut out);
        new_offs.push(out.len());
        // Kinds as stored (a format-3 kind section always has n bytes), then the columns.
        let delta = out.len() as isize - offs[2] as isize;
        out.extend_from_slice(&body[offs[2]..]);
        new_offs.extend(offs[3..].iter().map(|&o| (o as isize + delta) as usize));
        for (i, o) in new_offs.iter().enumerate() {
            out[table + 4 * i..table + 4 * i + 4].copy_from_slice(&(*o as u32).to_le_bytes());
        }
        Ok(out)
    }
}

impl Block {
    /// Decodes and validates a block of the current format for a group whose columns have
    /// `types`.
    pub(crate) fn decode(body: Vec<u8>, types: &[ColumnType]) -> DecodeResult<Block> {
        Self::parse(body, types)
    }

    /// Decodes and validates a block of a file of format `version` (3 or 4).
    pub(crate) fn decode_format(body: Vec<u8>, types: &[ColumnType], version: u32) -> DecodeResult<Block> {
        match version {
            3 => Self::parse(format3::upgrade(&body, types.len())?, types),
            _ => Self::parse(body, types),
        }
    }

    /// Validates `body`: every section's structure, keys in order, values where the format
    /// constrains them. Done once, when the block is read; lookups then trust it.
    fn parse(body: Vec<u8>, types: &[ColumnType]) -> DecodeResult<Block> {
        let ncols = types.len();
        let (n, offs) = sections(&body, ncols)?;
        let section = |i: usize| &body[offs[i]..offs[i + 1]];
        let (keys, facts) = KeyPage::parse(&body, (offs[0], offs[1]), n)?;
        let (seqs, max_seq) = if keys.has_keys() {
            SeqPage::parse(&body, (offs[1], offs[2]), n)?
        } else if offs[1] == offs[2] && offs[2] == offs[3] {
            (SeqPage::none(offs[1]), 0)
        } else {
            return Err(DecodeError::new("a keyless block with sequence numbers or kinds"));
        };
        // Empty: every row is a put (the section's own convention, kept in memory too).
        let kinds = match section(2).len() {
            0 => Vec::new(),
            len if len == n => section(2)
                .iter()
                .map(|&k| Kind::from_u8(k).ok_or_else(|| DecodeError::new("bad kind")))
                .collect::<DecodeResult<Vec<_>>>()?,
            _ => return Err(DecodeError::new("bad kind section size")),
        };
        // Columns.
        let nb = n.div_ceil(8);
        let mut cols = Vec::with_capacity(ncols);
        for (i, &ty) in types.iter().enumerate() {
            let (start, end) = (offs[3 + i], offs[4 + i]);
            let sec = &body[start..end];
            let flags = *sec.first().ok_or_else(|| DecodeError::new("empty column section"))?;
            let mut p = start + 1;
            let presence = (flags & 1 != 0).then(|| {
                p += nb;
                p - nb
            });
            let nulls = (flags & 2 != 0).then(|| {
                p += nb;
                p - nb
            });
            if p > end {
                return Err(DecodeError::new("column bitmaps overrun section"));
            }
            let data = p;
            match ty.fixed_width() {
                Some(w) => {
                    if end - data != n * w {
                        return Err(DecodeError::new("fixed-width column size mismatch"));
                    }
                }
                None => {
                    let ob = 4 * (n + 1) + 4 * n;
                    if end - data < ob {
                        return Err(DecodeError::new("var-width offsets overrun section"));
                    }
                    let heap = end - data - ob;
                    let o = |j: usize| {
                        let b = &body[data + 4 * j..data + 4 * j + 4];
                        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
                    };
                    if o(0) != 0 || o(n) != heap || (0..n).any(|j| o(j) > o(j + 1)) {
                        return Err(DecodeError::new("bad var-width offsets"));
                    }
                    for j in 0..n {
                        let s = &body[data + ob + o(j)..data + ob + o(j + 1)];
                        if ty == ColumnType::Text && std::str::from_utf8(s).is_err() {
                            return Err(DecodeError::new("invalid utf-8 in TEXT column"));
                        }
                        if prefix_of(s) != o(n + 1 + j) as u32 {
                            return Err(DecodeError::new("var-width prefix disagrees with its value"));
                        }
                    }
                }
            }
            cols.push(ColView { section_start: start, ty, presence, nulls, data });
        }
        let clean = kinds.iter().all(|&k| k == Kind::Put) && !facts.repeats;
        Ok(Block {
            n,
            keys,
            seqs,
            key_bytes: facts.key_bytes,
            kinds,
            body,
            cols,
            max_seq,
            clean,
            index: OnceLock::new(),
        })
    }

    /// The keys decoded, built on first use.
    fn index(&self) -> &KeyIndex {
        self.index.get_or_init(|| {
            let mut keys = Vec::with_capacity(self.key_bytes);
            let mut key_ends = Vec::with_capacity(self.n + 1);
            key_ends.push(0);
            for i in 0..self.n {
                self.keys.push_key(&self.body, i, &mut keys);
                key_ends.push(keys.len() as u32);
            }
            KeyIndex { keys, key_ends }
        })
    }

    /// Whether the block stores its rows' keys, sequence numbers and kinds (not a group page of a
    /// row-group file).
    pub(crate) fn has_keys(&self) -> bool {
        self.keys.has_keys()
    }

    /// Builds the key index if it is not built yet.
    pub(crate) fn build_index(&self) {
        self.index();
    }

    /// Whether the key index is built.
    #[cfg(test)]
    pub(crate) fn is_indexed(&self) -> bool {
        self.index.get().is_some()
    }

    /// The versions of `key`: the first row whose key is not below it (its newest version's, if
    /// any) and the sequence numbers of all of them (newest first; none when the block does not
    /// hold the key). A binary search over the key page as stored: no walk, nothing built.
    pub(crate) fn versions_of(&self, key: &[u8]) -> Versions {
        let (start, end) = self.keys.equal_range(&self.body, key);
        (start, (start..end).map(|i| self.seqs.get(&self.body, i)).collect())
    }
    /// Number of columns in the block's group.
    pub(crate) fn ncols(&self) -> usize {
        self.cols.len()
    }

    /// Number of versions in the block.
    pub(crate) fn len(&self) -> usize {
        self.n
    }

    /// Approximate memory held once the key index is built, for the cache.
    pub(crate) fn charge(&self) -> usize {
        // The key index counts whether built or not: an entry's charge must not change while it
        // is cached.
        self.body.capacity()
            + self.key_bytes
            + (self.n + 1) * 4
            + self.kinds.capacity()
            + self.cols.capacity() * std::mem::size_of::<ColView>()
            + std::mem::size_of::<Self>()
            + 64
    }

    /// The newest sequence number in the block (0 when empty).
    pub(crate) fn max_seq(&self) -> u64 {
        self.max_seq
    }

    /// Whether every version is a full row and no key repeats: then each row is a key's only
    /// version in this block.
    pub(crate) fn is_clean(&self) -> bool {
        self.clean
    }

    pub(crate) fn key(&self, i: usize) -> &[u8] {
        let ix = self.index();
        &ix.keys[ix.key_ends[i] as usize..ix.key_ends[i + 1] as usize]
    }

    pub(crate) fn seq(&self, i: usize) -> u64 {
        self.seqs.get(&self.body, i)
    }

    pub(crate) fn kind(&self, i: usize) -> Kind {
        self.kinds.get(i).copied().unwrap_or(Kind::Put)
    }

    /// Index of the first version whose key is `>= key` (`len()` if none).
    pub(crate) fn seek(&self, key: &[u8]) -> usize {
        self.keys.lower_bound(&self.body, key)
    }

    /// The raw parts of column `c` (index within the group), for bulk decoding.
    pub(crate) fn column(&self, c: usize) -> Option<ColumnParts<'_>> {
        let col = self.cols.get(c)?;
        let nb = self.n.div_ceil(8);
        let end = self.cols.get(c + 1).map_or(self.body.len(), |next| next.section_start);
        let data = &self.body[col.data..end];
        let (fixed, offsets, prefixes, heap) = match col.ty.fixed_width() {
            Some(_) => (data, &[][..], &[][..], &[][..]),
            None => {
                let (offsets, rest) = data.split_at(4 * (self.n + 1));
                let (prefixes, heap) = rest.split_at(4 * self.n);
                (&[][..], offsets, prefixes, heap)
            }
        };
        Some(ColumnParts {
            ty: col.ty,
            carried_by_all: col.presence.is_none(),
            nulls: col.nulls.map(|p| &self.body[p..p + nb]),
            fixed,
            offsets,
            prefixes,
            heap,
        })
    }

    /// The keys of versions `range`, concatenated. Keys are self-delimiting, so two ranges hold
    /// the same keys exactly when these bytes are equal.
    pub(crate) fn key_bytes(&self, range: std::ops::Range<usize>) -> &[u8] {
        let ix = self.index();
        &ix.keys[ix.key_ends[range.start] as usize..ix.key_ends[range.end] as usize]
    }

    /// Whether version `i` carries column `c` (index within the group).
    #[inline]
    pub(crate) fn carries(&self, i: usize, c: usize) -> bool {
        match self.cols.get(c) {
            Some(ColView { presence: Some(p), .. }) => get_bit(&self.body[*p..*p + self.n.div_ceil(8)], i),
            Some(_) => true,
            None => false,
        }
    }

    /// Column `c` (index within the group) of version `i`: `None` when not carried.
    #[inline]
    pub(crate) fn cell(&self, i: usize, c: usize) -> Option<Value> {
        self.raw_cell(i, c).to_value(self.cols[c].ty)
    }

    /// Column `c` of version `i` without decoding it.
    #[inline]
    pub(crate) fn raw_cell(&self, i: usize, c: usize) -> RawCell<'_> {
        let col = &self.cols[c];
        let nb = self.n.div_ceil(8);
        if let Some(p) = col.presence {
            if !get_bit(&self.body[p..p + nb], i) {
                return RawCell::Absent;
            }
        }
        if let Some(p) = col.nulls {
            if get_bit(&self.body[p..p + nb], i) {
                return RawCell::Null;
            }
        }
        match col.ty.fixed_width() {
            Some(w) => RawCell::Bytes(&self.body[col.data + i * w..col.data + (i + 1) * w]),
            None => {
                let o = |j: usize| {
                    let b = &self.body[col.data + 4 * j..col.data + 4 * j + 4];
                    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
                };
                let heap = col.data + 4 * (2 * self.n + 1);
                RawCell::Bytes(&self.body[heap + o(i)..heap + o(i + 1)])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::types::row::{encode_row, RowIter};

    /// A value's prefix is its first four bytes, zero-padded, big-endian, so prefixes order as
    /// the values do wherever they differ.
    #[test]
    fn prefixes_are_the_first_four_bytes_zero_padded() {
        let values: [&[u8]; 8] = [b"", b"\x01", b"a", b"ab", b"abc", b"abcd", b"abcde", b"\xff\xff\xff\xff\xff"];
        for v in values {
            let mut p = [0u8; 4];
            p[..v.len().min(4)].copy_from_slice(&v[..v.len().min(4)]);
            assert_eq!(prefix_of(v), u32::from_be_bytes(p), "{v:?}");
        }
        for w in values.windows(2) {
            assert!(prefix_of(w[0]) <= prefix_of(w[1]), "{:?} {:?}", w[0], w[1]);
        }
    }

    #[test]
    fn build_decode_roundtrip_with_partials_nulls_and_strings() {
        let types = [ColumnType::Int, ColumnType::Text, ColumnType::Double];
        let mut b = BlockBuilder::new(&types);
        type Row = (Vec<u8>, u64, Kind, Vec<Option<Value>>);
        let rows: Vec<Row> = (0..300u32)
            .map(|i| {
                let kind = [Kind::Put, Kind::Update, Kind::Delete][i as usize % 3];
                let cells = match kind {
                    Kind::Delete => vec![None, None, None],
                    Kind::Update => vec![None, Some(Value::Text(format!("s{i}"))), None],
                    Kind::Put => {
                        vec![Some(Value::Int(i as i32)), Some(Value::Null), Some(Value::Double(f64::from(i) / 3.0))]
                    }
                };
                (format!("key{:05}", i / 2).into_bytes(), 1000 - u64::from(i), kind, cells)
            })
            .collect();
        for (k, s, kind, cells) in &rows {
            let mut row = Vec::new();
            encode_row(&types, cells, &mut row);
            b.add(k, *s, *kind, RowIter::new(&types, &row).unwrap().map(Result::unwrap));
        }
        let (body, summary) = b.finish();
        let zones = summary.zones;
        assert_eq!((summary.rows, summary.min_seq, summary.max_seq, summary.clean), (300, 701, 1000, false));
        assert_eq!(zones[0].min, Some(Value::Int(0)));
        assert_eq!(zones[0].max, Some(Value::Int(297)));
        let blk = Block::decode(body.clone(), &types).unwrap();
        for (i, (k, s, kind, cells)) in rows.iter().enumerate() {
            assert_eq!(blk.key(i), k.as_slice());
            assert_eq!((blk.seq(i), blk.kind(i)), (*s, *kind));
            for (c, cell) in cells.iter().enumerate() {
                assert_eq!(&blk.cell(i, c), cell, "row {i} col {c}");
            }
        }
        assert_eq!(blk.seek(b"key00010"), 20);
        assert_eq!(blk.seek(b"zzz"), 300);
        for cut in [0, 5, body.len() / 2, body.len() - 1] {
            assert!(Block::decode(body[..cut].to_vec(), &types).is_err());
        }
    }

    #[test]
    fn point_lookups_without_the_key_index_find_what_the_index_finds() {
        use rand::{Rng, SeedableRng};
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let types = [ColumnType::BigInt];
        for _ in 0..50 {
            // Keys of varied lengths sharing prefixes, some with several versions.
            let mut keys: Vec<Vec<u8>> = (0..rng.gen_range(1..120))
                .map(|_| {
                    let len = rng.gen_range(0..12);
                    (0..len).map(|_| rng.gen_range(b'a'..b'd')).collect()
                })
                .collect();
            keys.sort();
            keys.dedup();
            let mut b = BlockBuilder::new(&types);
            let mut seq = 1_000_000u64;
            let mut want = Vec::new();
            for k in &keys {
                let seqs: Vec<u64> = (0..rng.gen_range(1..4))
                    .map(|_| {
                        seq -= rng.gen_range(1..1000);
                        seq
                    })
                    .collect();
                for &s in &seqs {
                    let mut row = Vec::new();
                    encode_row(&types, &[Some(Value::BigInt(s as i64))], &mut row);
                    b.add(k, s, Kind::Put, RowIter::new(&types, &row).unwrap().map(Result::unwrap));
                }
                want.push(seqs);
            }
            let (body, _) = b.finish();
            let lazy = Block::decode(body.clone(), &types).unwrap();
            let indexed = Block::decode(body.clone(), &types).unwrap();
            indexed.build_index();
            assert!(!lazy.is_indexed() && indexed.is_indexed());
            let mut probes: Vec<Vec<u8>> = keys.clone();
            probes.extend((0..20).map(|_| (0..rng.gen_range(0..12)).map(|_| rng.gen_range(b'a'..b'e')).collect()));
            for p in &probes {
                let (first, seqs) = lazy.versions_of(p);
                assert_eq!(
                    (first, &seqs),
                    (indexed.versions_of(p).0, &indexed.versions_of(p).1),
                    "seed {seed} key {p:?}"
                );
                assert_eq!(indexed.seek(p), first, "seed {seed} key {p:?}");
                assert_eq!(first, (0..indexed.len()).find(|&i| indexed.key(i) >= &p[..]).unwrap_or(indexed.len()));
                let expect = keys.iter().position(|k| k == p).map_or(&[][..], |i| &want[i][..]);
                assert_eq!(&seqs[..], expect, "seed {seed} key {p:?}");
                if !seqs.is_empty() {
                    assert_eq!((indexed.key(first), indexed.seq(first)), (&p[..], seqs[0]), "seed {seed}");
                    assert_eq!(lazy.cell(first, 0), Some(Value::BigInt(seqs[0] as i64)), "seed {seed}");
                }
            }
            assert!(!lazy.is_indexed(), "a point lookup built the key index");
            let before = lazy.charge();
            lazy.build_index();
            assert_eq!(lazy.charge(), before, "seed {seed}: the cache charge changes as the key index is built");
            assert_eq!(lazy.charge(), indexed.charge(), "seed {seed}");
        }
    }

    #[test]
    fn rows_copied_column_by_column_encode_as_rows_added_cell_by_cell() {
        use rand::{Rng, SeedableRng};
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let types = [ColumnType::BigInt, ColumnType::Text, ColumnType::Int];
        for round in 0..40 {
            // Source blocks: some only full non-NULL rows (copied in one piece), others with NULLs
            // and partial rows (copied cell by cell).
            let messy = rng.gen_bool(0.5);
            let sources: Vec<Arc<Block>> = (0..3)
                .map(|s| {
                    let mut b = BlockBuilder::new(&types);
                    for i in 0..rng.gen_range(1..60) {
                        let partial = messy && rng.gen_bool(0.3);
                        let cells: Vec<Option<Value>> = (0..3)
                            .map(|c| match (c, messy && rng.gen_bool(0.2), partial && rng.gen_bool(0.5)) {
                                (_, _, true) => None,
                                (_, true, _) => Some(Value::Null),
                                (0, ..) => Some(Value::BigInt(rng.gen())),
                                (1, ..) => Some(Value::Text(format!("v{}", rng.gen::<u16>()))),
                                _ => Some(Value::Int(rng.gen())),
                            })
                            .collect();
                        let kind = if cells.iter().all(Option::is_some) { Kind::Put } else { Kind::Update };
                        let mut row = Vec::new();
                        encode_row(&types, &cells, &mut row);
                        let key = format!("s{s}k{i:03}");
                        b.add(key.as_bytes(), 10 + i, kind, RowIter::new(&types, &row).unwrap().map(Result::unwrap));
                    }
                    Arc::new(Block::decode(b.finish().0, &types).unwrap())
                })
                .collect();
            // The same versions into two builders: one copies some of them (runs of consecutive
            // rows, interrupted by rows added cell by cell), the other adds every cell itself.
            let (mut copied, mut by_cell) = (BlockBuilder::new(&types), BlockBuilder::new(&types));
            for src in &sources {
                for i in 0..src.len() {
                    if rng.gen_bool(0.2) {
                        continue;
                    }
                    let cells = || (0..3).map(|c| src.raw_cell(i, c));
                    if rng.gen_bool(0.7) {
                        copied.add_copied(src.key(i), src.seq(i), src.kind(i), src, i);
                    } else {
                        copied.add(src.key(i), src.seq(i), src.kind(i), cells());
                    }
                    by_cell.add(src.key(i), src.seq(i), src.kind(i), cells());
                }
            }
            let ((a, sa), (b, sb)) = (copied.finish(), by_cell.finish());
            assert!(a == b, "seed {seed} round {round}: copied block differs");
            assert_eq!((sa.rows, sa.clean, sa.min_seq, sa.max_seq), (sb.rows, sb.clean, sb.min_seq, sb.max_seq));
            assert_eq!(format!("{:?}", sa.zones), format!("{:?}", sb.zones), "seed {seed} round {round}");
        }
    }

    #[test]
    fn cells_round_trip_wherever_the_first_absent_cell_falls() {
        use rand::{Rng, SeedableRng};
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let types = [ColumnType::BigInt, ColumnType::Text];
        for first_absent in [None, Some(0), Some(1), Some(7), Some(8), Some(9), Some(63), Some(64), Some(99)] {
            let n = 100;
            let rows: Vec<Vec<Option<Value>>> = (0..n)
                .map(|i| {
                    let absent_ok = first_absent.is_some_and(|f| i >= f);
                    (0..2)
                        .map(|c| {
                            let pick =
                                if Some(i) == first_absent { 0 } else { rng.gen_range(u32::from(!absent_ok)..4) };
                            match (pick, c) {
                                (0, _) => None,
                                (1, _) => Some(Value::Null),
                                (_, 0) => Some(Value::BigInt(rng.gen())),
                                _ => Some(Value::Text(format!("{:x}", rng.gen::<u16>()))),
                            }
                        })
                        .collect()
                })
                .collect();
            let mut b = BlockBuilder::new(&types);
            for (i, cells) in rows.iter().enumerate() {
                let mut row = Vec::new();
                encode_row(&types, cells, &mut row);
                let kind = if cells.iter().all(Option::is_some) { Kind::Put } else { Kind::Update };
                b.add(format!("k{i:04}").as_bytes(), 5, kind, RowIter::new(&types, &row).unwrap().map(Result::unwrap));
            }
            let (body, summary) = b.finish();
            let blk = Block::decode(body, &types).unwrap();
            for (i, cells) in rows.iter().enumerate() {
                for (c, cell) in cells.iter().enumerate() {
                    assert_eq!(&blk.cell(i, c), cell, "seed {seed} first absent {first_absent:?} row {i} col {c}");
                    assert_eq!(blk.carries(i, c), cell.is_some(), "seed {seed} row {i} col {c}");
                }
            }
            for (c, z) in summary.zones.iter().enumerate() {
                let carried = rows.iter().filter(|r| r[c].is_some()).count() as u64;
                let nulls = rows.iter().filter(|r| r[c] == Some(Value::Null)).count() as u64;
                assert_eq!((z.carried, z.nulls), (carried, nulls), "seed {seed} col {c}");
            }
        }
    }
}

impl crate::mvcc::StoredRows for Block {
    fn raw_cell(&self, row: usize, col: usize) -> RawCell<'_> {
        Block::raw_cell(self, row, col)
    }

    fn columns(&self) -> usize {
        self.ncols()
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// Takes decoded blocks back from the versions stored in them ([`crate::mvcc::Stored`]),
/// keeping the last one, so a run of versions of one block costs a pointer compare each.
#[derive(Default)]
pub(crate) struct StoredBlocks {
    last: Option<Arc<Block>>,
}

impl StoredBlocks {
    /// The block `at` is stored in (`None` if not a block of this module's, which does not
    /// happen: the caller then copies cell by cell).
    pub(crate) fn of(&mut self, at: &crate::mvcc::Stored) -> Option<&Arc<Block>> {
        let same = self.last.as_ref().is_some_and(|b| std::ptr::addr_eq(Arc::as_ptr(b), Arc::as_ptr(&at.block)));
        if !same {
            self.last = at.block.clone().into_any().downcast::<Block>().ok();
        }
        self.last.as_ref()
    }
}
