//! Row-group files (SST format 6): every column group of a level in one file, aligned by row
//! position. A file holds one key range and one set of rows; every group holds row `r` at
//! ordinal `r`. Keys, sequence numbers and kinds are stored once, in *key pages* (blocks without
//! columns); each group's cells are in *group pages* (blocks without keys, see
//! [`BlockBuilder::keyless`]). Pages are cut at fixed row counts, never at keys:
//!
//! - the *granule* is `2^granule_shift` rows;
//! - a key page holds `2^key_span` granules, group `g`'s pages `2^span_g` granules each (the last
//!   page of each kind holds what is left), so a row's page in any group is found by a shift
//!   and page boundaries of all groups nest;
//! - spans are chosen from the groups' row widths so that every page is about a block.
//!
//! A point read finds its key's ordinals with one fence search and one binary search in one key
//! page, then reads each column it needs by position: no bloom filter, fence or key work per
//! group. A key's versions may continue into the next key page.
//!
//! Layout: pages in the order they fill (key and group pages interleaved), filter block, index
//! block, meta block, footer (see `docs/format/sst.md`).
//!
//! The database writes them at the levels of more than one group from Level-1 down, for tables
//! created with [`TableOptions::row_groups`](crate::TableOptions::row_groups). Point reads use
//! [`RowGroupReader::get`], and the scan's bulk and column-by-column paths read key pages and
//! the needed groups' pages by ordinal; the other readers (the row merge, marking, compaction)
//! see the file through [`SstReader`] as a file of whole rows whose blocks are the key pages,
//! each assembled with every column when read ([`RowGroupReader::assemble`]).
//!
//! [`SstReader`]: super::reader::SstReader

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::block::{Block, BlockBuilder, ColumnRun};
use super::bloom;
use super::builder::{put_columns, IndexEntry, SstMeta, SstOptions};
use super::cache::{BlockCache, BlockRef, CachePin};
use super::format::{decode_footer, unframe_slice, BlockHandle, BlockWriter, Compression, FOOTER_LEN, TRAILER_LEN};
use super::reader::{handles_apart, read_block_raw, read_columns, read_scratch, Fences, Lookup};
use super::zone::{ZoneMap, Zones};
use crate::codec::{put_bytes, put_varint, DecodeError, DecodeResult, Reader};
use crate::error::{Error, Result};
use crate::mvcc::chain::Resolver;
use crate::mvcc::{Kind, Stored};
use crate::types::row::RawCell;
use crate::types::ColumnType;
use crate::version::FileMeta;
use crate::vfs::{Fs, ReadableFile, WritableFile};

/// The SST format version of row-group files written now.
pub(crate) const ROW_GROUP_FORMAT: u32 = 6;
/// The first version of row-group files, read still: its key pages do not say whether they go
/// on with the previous page's last key (see [`KeyPageEntry::continues`]).
pub(crate) const ROW_GROUP_FORMAT_5: u32 = 5;

/// Whether `version` is a row-group file's format.
pub(crate) fn is_row_group_format(version: u32) -> bool {
    version == ROW_GROUP_FORMAT || version == ROW_GROUP_FORMAT_5
}

/// Key page flags in the index.
const PAGE_CLEAN: u8 = 1;
const PAGE_CONTINUES: u8 = 2;

/// Smallest and largest granule, in rows (as shifts).
const MIN_GRANULE_SHIFT: u32 = 6;
const MAX_GRANULE_SHIFT: u32 = 13;
/// Most rows a page may hold (as a shift): bounds the spans of narrow groups.
const MAX_PAGE_SHIFT: u32 = 16;

/// How a file's rows are cut into pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Rows per granule, as a shift.
    pub granule_shift: u32,
    /// Granules per key page, as a shift.
    pub key_span: u32,
    /// Granules per page of each group, as shifts.
    pub spans: Vec<u32>,
}

fn floor_log2(x: usize) -> u32 {
    usize::BITS - 1 - x.max(1).leading_zeros()
}

impl Shape {
    /// The shape for pages of about `block_size` bytes, given the bytes a key page spends per
    /// row and each group's bytes per row: the widest group's (or the key pages') page is one
    /// granule (of at least 64 and at most 8,192 rows), narrower ones span as many granules as
    /// fit, but a group's page never more than a key page, so that every group's pages nest
    /// inside the key pages: a key page's rows are whole pages of every group, whose zone maps
    /// together describe exactly those rows.
    pub(crate) fn choose(block_size: usize, key_width: usize, widths: &[usize]) -> Shape {
        let widest = widths.iter().copied().chain([key_width]).max().unwrap_or(1).max(1);
        let granule_shift = floor_log2(block_size / widest).clamp(MIN_GRANULE_SHIFT, MAX_GRANULE_SHIFT);
        let span = |w: usize| floor_log2(widest / w.max(1)).min(MAX_PAGE_SHIFT.saturating_sub(granule_shift));
        let key_span = span(key_width);
        Shape { granule_shift, key_span, spans: widths.iter().map(|&w| span(w).min(key_span)).collect() }
    }

    /// Rows per key page, as a shift.
    pub(crate) fn key_shift(&self) -> u32 {
        self.granule_shift + self.key_span
    }

    /// Rows per page of group `g`, as a shift.
    pub(crate) fn page_shift(&self, g: usize) -> u32 {
        self.granule_shift + self.spans[g]
    }

    /// The page of group `g` holding ordinal `r`, and `r`'s row in it.
    #[inline]
    pub(crate) fn locate(&self, g: usize, r: u64) -> (usize, usize) {
        let s = self.page_shift(g);
        ((r >> s) as usize, (r & ((1 << s) - 1)) as usize)
    }

    /// Pages of `1 << shift` rows that `rows` rows fill.
    pub(crate) fn pages(rows: u64, shift: u32) -> usize {
        rows.div_ceil(1 << shift) as usize
    }

    /// Rows of page `p` of `1 << shift`-row pages over `rows` rows.
    pub(crate) fn rows_of(rows: u64, shift: u32, p: usize) -> usize {
        let start = (p as u64) << shift;
        (rows.saturating_sub(start)).min(1 << shift) as usize
    }
}

/// A key page's index entry.
#[derive(Debug, Clone)]
pub(crate) struct KeyPageEntry {
    /// The page's last key (its fence).
    pub last_key: Vec<u8>,
    pub handle: BlockHandle,
    pub min_seq: u64,
    pub max_seq: u64,
    /// Every row of the page is a full row and no key repeats within it.
    pub clean: bool,
    /// The page's first key is the previous page's last key: pages are cut at row counts, so a
    /// key's versions may go on into the next page, which then starts with versions the
    /// previous page's newer one supersedes. (Format 5 does not say: taken as true for every
    /// page but the first.)
    pub continues: bool,
}

/// A group page's index entry.
#[derive(Debug, Clone)]
pub(crate) struct GroupPageEntry {
    pub handle: BlockHandle,
    /// One zone map per column of the group.
    pub zones: Zones,
}

/// A group of a row-group file: its value columns (ascending) and their types.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub columns: Vec<usize>,
    pub types: Arc<[ColumnType]>,
}

impl Group {
    /// The group of `columns` of a table whose value columns have `value_types`.
    pub(crate) fn of(columns: &[usize], value_types: &[ColumnType]) -> Group {
        Group { columns: columns.to_vec(), types: columns.iter().map(|&c| value_types[c]).collect() }
    }
}

/// The file-level metadata of a row-group file.
#[derive(Debug, Clone)]
struct RowGroupMeta {
    table_id: u32,
    groups: Vec<Group>,
    entries: u64,
    min_seq: u64,
    max_seq: u64,
    smallest: Vec<u8>,
    largest: Vec<u8>,
    index: BlockHandle,
    filter: BlockHandle,
}

impl RowGroupMeta {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, u64::from(self.table_id));
        put_varint(out, self.groups.len() as u64);
        for g in &self.groups {
            put_columns(out, &g.columns, &g.types);
        }
        put_varint(out, self.entries);
        put_varint(out, self.min_seq);
        put_varint(out, self.max_seq);
        put_bytes(out, &self.smallest);
        put_bytes(out, &self.largest);
        self.index.encode(out);
        self.filter.encode(out);
    }

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let table_id = u32::try_from(r.varint()?).map_err(|_| DecodeError::new("bad table id"))?;
        let ngroups = r.len(u16::MAX as usize)?;
        let mut groups = Vec::with_capacity(ngroups);
        for _ in 0..ngroups {
            let (columns, types) = read_columns(r)?;
            if columns.windows(2).any(|w| w[0] >= w[1]) {
                return Err(DecodeError::new("group columns out of order"));
            }
            groups.push(Group { columns, types: types.into() });
        }
        Ok(RowGroupMeta {
            table_id,
            groups,
            entries: r.varint()?,
            min_seq: r.varint()?,
            max_seq: r.varint()?,
            smallest: r.bytes()?.to_vec(),
            largest: r.bytes()?.to_vec(),
            index: BlockHandle::decode(r)?,
            filter: BlockHandle::decode(r)?,
        })
    }
}

/// Bytes a row of `types` takes in a page, roughly (bitmaps aside; 16 per var-width value).
fn row_width(types: &[ColumnType]) -> usize {
    types.iter().map(|t| t.fixed_width().unwrap_or(16)).sum::<usize>().max(1)
}

/// Writes one row-group file from versions in (key asc, seq desc) order.
pub(crate) struct RowGroupBuilder {
    out: BlockWriter,
    opts: SstOptions,
    table_id: u32,
    groups: Vec<Group>,
    shape: Shape,
    keys: BlockBuilder,
    key_pages: Vec<KeyPageEntry>,
    pages: Vec<BlockBuilder>,
    group_pages: Vec<Vec<GroupPageEntry>>,
    hashes: Vec<u64>,
    rows: u64,
    min_seq: u64,
    max_seq: u64,
    smallest: Option<Vec<u8>>,
    largest: Vec<u8>,
    /// The last source of [`Self::add_stored`].
    source: Option<Source>,
    /// The open key page's first key goes on with the previous page's last key.
    continues: bool,
    /// The format version to write ([`ROW_GROUP_FORMAT`]; tests write format 5 too).
    format: u32,
}

/// A column map of blocks versions come from (see [`Stored::group_of`]), and for each group of
/// the file being written its columns there (`None`: such blocks lack some).
struct Source {
    of: Arc<[Option<usize>]>,
    maps: Option<Vec<Arc<[usize]>>>,
}

impl RowGroupBuilder {
    /// A builder of a file holding `groups` (each a list of value columns, ascending) of a table
    /// whose value columns have `value_types`; `key_width` is about the bytes of a key.
    pub(crate) fn new(
        file: Box<dyn WritableFile>,
        opts: SstOptions,
        table_id: u32,
        groups: &[Vec<usize>],
        value_types: &[ColumnType],
        key_width: usize,
    ) -> Self {
        let groups: Vec<Group> = groups.iter().map(|cols| Group::of(cols, value_types)).collect();
        let widths: Vec<usize> = groups.iter().map(|g| row_width(&g.types)).collect();
        // A key page spends the key, about two bytes of sequence number and a kind per row.
        let shape = Shape::choose(opts.block_size, key_width + 3, &widths);
        Self::with_shape(file, opts, table_id, groups, shape)
    }

    fn with_shape(
        file: Box<dyn WritableFile>,
        opts: SstOptions,
        table_id: u32,
        groups: Vec<Group>,
        shape: Shape,
    ) -> Self {
        RowGroupBuilder {
            out: BlockWriter::new(file),
            opts,
            table_id,
            pages: groups.iter().map(|g| BlockBuilder::keyless(&g.types)).collect(),
            group_pages: vec![Vec::new(); groups.len()],
            groups,
            shape,
            keys: BlockBuilder::new(&[]),
            key_pages: Vec::new(),
            hashes: Vec::new(),
            rows: 0,
            min_seq: u64::MAX,
            max_seq: 0,
            smallest: None,
            largest: Vec::new(),
            source: None,
            continues: false,
            format: ROW_GROUP_FORMAT,
        }
    }

    /// Versions added so far.
    pub(crate) fn entries(&self) -> u64 {
        self.rows
    }

    /// The hashes of the distinct keys added so far (see [`bloom::key_hash`]).
    pub(crate) fn key_hashes(&self) -> &[u64] {
        &self.hashes
    }

    /// Bytes written plus the open pages: what the file would weigh if finished now.
    pub(crate) fn estimated_size(&self) -> u64 {
        self.out.offset() + self.keys.size() as u64 + self.pages.iter().map(|p| p.size() as u64).sum::<u64>()
    }

    /// Adds the next version; `cell(vi)` gives its cell of value column `vi`.
    pub(crate) fn add<'v>(
        &mut self,
        key: &[u8],
        seq: u64,
        kind: Kind,
        cell: impl Fn(usize) -> RawCell<'v>,
    ) -> Result<()> {
        self.add_key(key, seq, kind);
        for (g, page) in self.pages.iter_mut().enumerate() {
            page.add_cells(self.groups[g].columns.iter().map(|&vi| cell(vi)));
        }
        self.end_row()
    }

    /// Adds the next version, whose cells are `at` (a row of a block read from another file):
    /// where that block holds every column of this file's groups, runs of consecutive rows are
    /// copied column by column (vertical merge), not cell by cell.
    pub(crate) fn add_stored(&mut self, key: &[u8], seq: u64, kind: Kind, at: &Stored) -> Result<()> {
        if !self.source.as_ref().is_some_and(|s| Arc::ptr_eq(&s.of, &at.group_of)) {
            let maps: Option<Vec<Arc<[usize]>>> = self
                .groups
                .iter()
                .map(|g| g.columns.iter().map(|&vi| at.group_of.get(vi).copied().flatten()).collect())
                .collect();
            self.source = Some(Source { of: at.group_of.clone(), maps });
        }
        if self.source.as_ref().is_none_or(|s| s.maps.is_none()) {
            return self.add(key, seq, kind, |vi| at.cell(vi));
        }
        self.add_key(key, seq, kind);
        if let Some(Source { maps: Some(maps), .. }) = &self.source {
            for (page, cols) in self.pages.iter_mut().zip(maps) {
                page.add_cells_copied(&at.block, cols, at.row);
            }
        }
        self.end_row()
    }

    fn add_key(&mut self, key: &[u8], seq: u64, kind: Kind) {
        if self.keys.rows() == 0 {
            self.continues = self.rows > 0 && self.largest == key;
        }
        if self.rows == 0 || self.largest != key {
            self.hashes.push(bloom::key_hash(key));
        }
        if self.smallest.is_none() {
            self.smallest = Some(key.to_vec());
        }
        self.largest.clear();
        self.largest.extend_from_slice(key);
        self.keys.add(key, seq, kind, std::iter::empty());
        self.rows += 1;
        self.min_seq = self.min_seq.min(seq);
        self.max_seq = self.max_seq.max(seq);
    }

    /// Closes the pages the row just added filled.
    fn end_row(&mut self) -> Result<()> {
        if self.keys.rows() == 1 << self.shape.key_shift() {
            self.finish_key_page()?;
        }
        for g in 0..self.pages.len() {
            if self.pages[g].rows() == 1 << self.shape.page_shift(g) {
                self.finish_group_page(g)?;
            }
        }
        Ok(())
    }

    fn finish_key_page(&mut self) -> Result<()> {
        let last_key = self.keys.last_key().to_vec();
        let (content, s) = self.keys.finish();
        let handle = self.out.write_block(&content, self.opts.compression)?;
        let (min_seq, max_seq, continues) = (s.min_seq, s.max_seq, self.continues);
        self.key_pages.push(KeyPageEntry { last_key, handle, min_seq, max_seq, clean: s.clean, continues });
        Ok(())
    }

    fn finish_group_page(&mut self, g: usize) -> Result<()> {
        let (content, s) = self.pages[g].finish();
        let handle = self.out.write_block(&content, self.opts.compression)?;
        let zones = Zones::new(&s.zones, self.groups[g].types.clone());
        self.group_pages[g].push(GroupPageEntry { handle, zones });
        Ok(())
    }

    /// Writes the last pages, filter, index, meta and footer, then syncs the file. Returns the
    /// file's manifest entry under file number `number` (group id 0: the file holds them all).
    pub(crate) fn finish(mut self, number: u64) -> Result<FileMeta> {
        if !self.keys.is_empty() {
            self.finish_key_page()?;
        }
        for g in 0..self.pages.len() {
            if self.pages[g].rows() > 0 {
                self.finish_group_page(g)?;
            }
        }
        // Every group holds every row, at its ordinal: as many pages as the shape gives its
        // rows, as for the key pages (which readers derive from the row count alone).
        debug_assert_eq!(self.key_pages.len(), Shape::pages(self.rows, self.shape.key_shift()), "key pages");
        for (g, pages) in self.group_pages.iter().enumerate() {
            debug_assert_eq!(pages.len(), Shape::pages(self.rows, self.shape.page_shift(g)), "pages of group {g}");
        }
        let filter = bloom::build(&self.hashes, self.opts.bloom_bits_per_key);
        let filter = self.out.write_block(&filter, Compression::None)?;
        let mut idx = Vec::new();
        put_varint(&mut idx, self.rows);
        idx.push(self.shape.granule_shift as u8);
        idx.push(self.shape.key_span as u8);
        for e in &self.key_pages {
            put_bytes(&mut idx, &e.last_key);
            e.handle.encode(&mut idx);
            put_varint(&mut idx, e.min_seq);
            put_varint(&mut idx, e.max_seq);
            let continues = e.continues && self.format != ROW_GROUP_FORMAT_5;
            idx.push(if e.clean { PAGE_CLEAN } else { 0 } | if continues { PAGE_CONTINUES } else { 0 });
        }
        for (g, pages) in self.group_pages.iter().enumerate() {
            idx.push(self.shape.spans[g] as u8);
            for p in pages {
                p.handle.encode(&mut idx);
                p.zones.encode(&mut idx);
            }
        }
        let index = self.out.write_block(&idx, Compression::None)?;
        let (smallest, largest) = (self.smallest.take().unwrap_or_default(), std::mem::take(&mut self.largest));
        let meta = RowGroupMeta {
            table_id: self.table_id,
            groups: self.groups.clone(),
            entries: self.rows,
            min_seq: if self.rows == 0 { 0 } else { self.min_seq },
            max_seq: self.max_seq,
            smallest: smallest.clone(),
            largest: largest.clone(),
            index,
            filter,
        };
        let mut m = Vec::new();
        meta.encode(&mut m);
        let meta_handle = self.out.write_block(&m, Compression::None)?;
        let size = self.out.finish(meta_handle, self.format)?;
        Ok(FileMeta {
            number,
            size,
            entries: self.rows,
            min_seq: meta.min_seq,
            max_seq: meta.max_seq,
            smallest,
            largest,
            cg: 0,
            tier: 0,
        })
    }
}

/// A page and some of its rows.
pub(crate) type PageRows = (Arc<Block>, std::ops::Range<usize>);

/// The pages a walk over row-group files keeps for itself when it reads them without filling
/// the block cache (compaction): the last page read of each group, so that a group page under
/// several key pages is read once, and the pages of a file merged away do not push the pages
/// readers need out of the cache.
#[derive(Default)]
pub(crate) struct HeldPages {
    /// The file the pages are of.
    file: u64,
    /// For each group, its page held and that page's number.
    groups: Vec<Option<(usize, Arc<Block>)>>,
}

impl HeldPages {
    /// Group `g`'s page `p` of file `file`, if held.
    fn get(&self, file: u64, g: usize, p: usize) -> Option<Arc<Block>> {
        match self.groups.get(g)? {
            Some((q, b)) if self.file == file && *q == p => Some(b.clone()),
            _ => None,
        }
    }

    /// Holds `b` as group `g`'s page `p` of file `file` (dropping the pages of another file).
    fn hold(&mut self, file: u64, g: usize, p: usize, b: Arc<Block>) {
        if self.file != file {
            self.file = file;
            self.groups.clear();
        }
        if self.groups.len() <= g {
            self.groups.resize(g + 1, None);
        }
        self.groups[g] = Some((p, b));
    }
}

/// A page and one of its rows.
type PageRow<'g> = (BlockRef<'g>, usize);

/// A page of a row-group file: key page `p`, or page `p` of group `g`.
#[derive(Debug, Clone, Copy)]
enum Page {
    Key(usize),
    Group(usize, usize),
}

/// An open row-group file.
pub(crate) struct RowGroupReader {
    file: Arc<dyn ReadableFile>,
    path: PathBuf,
    number: u64,
    meta: RowGroupMeta,
    shape: Shape,
    key_pages: Vec<KeyPageEntry>,
    /// The key pages' fences, searched by prefix first.
    fences: Fences,
    group_pages: Vec<Vec<GroupPageEntry>>,
    /// For each value column of the table: its group and its column there.
    place: Vec<Option<(usize, usize)>>,
    /// The type of each value column.
    value_types: Arc<[ColumnType]>,
    filter: Vec<u8>,
    cache: Arc<BlockCache>,
    tier: u8,
    /// The file's format version.
    version: u32,
}

/// A row-group file seen as a file of whole rows whose blocks are its key pages (what
/// [`SstReader`](super::reader::SstReader) serves its readers from).
pub(crate) struct WholeRows {
    pub meta: SstMeta,
    pub index: Vec<IndexEntry>,
}

/// Decodes the index block against the meta: one entry per page the row count calls for.
fn decode_index(
    b: &[u8],
    meta: &RowGroupMeta,
    version: u32,
) -> DecodeResult<(Shape, Vec<KeyPageEntry>, Vec<Vec<GroupPageEntry>>)> {
    let mut r = Reader::new(b);
    let rows = r.varint()?;
    if rows != meta.entries {
        return Err(DecodeError::new("index row count disagrees with meta"));
    }
    let granule_shift = u32::from(r.u8()?);
    let key_span = u32::from(r.u8()?);
    if !(MIN_GRANULE_SHIFT..=MAX_GRANULE_SHIFT).contains(&granule_shift) || granule_shift + key_span > MAX_PAGE_SHIFT {
        return Err(DecodeError::new("bad row-group shape"));
    }
    let nkeys = Shape::pages(rows, granule_shift + key_span);
    let mut key_pages = Vec::with_capacity(nkeys.min(b.len()));
    let known = if version == ROW_GROUP_FORMAT_5 { PAGE_CLEAN } else { PAGE_CLEAN | PAGE_CONTINUES };
    for p in 0..nkeys {
        let last_key = r.bytes()?.to_vec();
        let handle = BlockHandle::decode(&mut r)?;
        let (min_seq, max_seq) = (r.varint()?, r.varint()?);
        let flags = r.u8()?;
        if flags & !known != 0 || (p == 0 && flags & PAGE_CONTINUES != 0) {
            return Err(DecodeError::new("unknown key page flags"));
        }
        let clean = flags & PAGE_CLEAN != 0;
        let continues = if version == ROW_GROUP_FORMAT_5 { p > 0 } else { flags & PAGE_CONTINUES != 0 };
        key_pages.push(KeyPageEntry { last_key, handle, min_seq, max_seq, clean, continues });
    }
    if key_pages.windows(2).any(|w| w[0].last_key > w[1].last_key) {
        return Err(DecodeError::new("key page fences out of order"));
    }
    let mut spans = Vec::with_capacity(meta.groups.len());
    let mut group_pages = Vec::with_capacity(meta.groups.len());
    for g in &meta.groups {
        let span = u32::from(r.u8()?);
        if granule_shift + span > MAX_PAGE_SHIFT {
            return Err(DecodeError::new("bad group page span"));
        }
        let n = Shape::pages(rows, granule_shift + span);
        let mut pages = Vec::with_capacity(n.min(b.len()));
        for _ in 0..n {
            let handle = BlockHandle::decode(&mut r)?;
            let zones = Zones::decode(g.types.clone(), &mut r)?;
            pages.push(GroupPageEntry { handle, zones });
        }
        spans.push(span);
        group_pages.push(pages);
    }
    if !r.is_empty() {
        return Err(DecodeError::new("trailing bytes in index"));
    }
    Ok((Shape { granule_shift, key_span, spans }, key_pages, group_pages))
}

impl RowGroupReader {
    /// Opens and validates a file's footer, meta, index and filter.
    pub(crate) fn open(
        fs: &dyn Fs,
        path: &Path,
        (number, tier): (u64, u8),
        cache: Arc<BlockCache>,
    ) -> Result<Arc<RowGroupReader>> {
        let file = fs.open(path)?;
        let len = file.len();
        if len < FOOTER_LEN as u64 {
            return Err(Error::corruption(path, 0, "file too short to be an SST"));
        }
        let footer = file.read_at(len - FOOTER_LEN as u64, FOOTER_LEN)?;
        let (meta_h, version) = decode_footer(path, len, &footer)?;
        if !is_row_group_format(version) {
            return Err(Error::corruption(
                path,
                len - FOOTER_LEN as u64,
                format!("format {version} is not a row-group file"),
            ));
        }
        let bad = |off: u64| move |e: DecodeError| Error::corruption(path, off, e.0);
        let meta_raw = read_block_raw(file.as_ref(), path, meta_h)?;
        let meta = RowGroupMeta::decode(&mut Reader::new(&meta_raw)).map_err(bad(meta_h.offset))?;
        let idx_raw = read_block_raw(file.as_ref(), path, meta.index)?;
        let (shape, key_pages, group_pages) = decode_index(&idx_raw, &meta, version).map_err(bad(meta.index.offset))?;
        // Pages lie inside the file and apart: the block cache knows a page by its offset, so
        // two index entries naming one page would take each other's cached pages.
        let mut handles: Vec<BlockHandle> =
            key_pages.iter().map(|e| e.handle).chain(group_pages.iter().flatten().map(|e| e.handle)).collect();
        handles.sort_unstable_by_key(|h| h.offset);
        if !handles_apart(&handles, len) {
            return Err(Error::corruption(path, meta.index.offset, "page handles overlap or pass the end of file"));
        }
        let filter = read_block_raw(file.as_ref(), path, meta.filter)?;
        let mut place = vec![None; meta.groups.iter().flat_map(|g| g.columns.iter()).max().map_or(0, |&m| m + 1)];
        for (g, group) in meta.groups.iter().enumerate() {
            for (c, &vi) in group.columns.iter().enumerate() {
                if place[vi].replace((g, c)).is_some() {
                    return Err(Error::corruption(path, meta_h.offset, "a column stored in two groups"));
                }
            }
        }
        let value_types = place
            .iter()
            .map(|at| at.map(|(g, c)| meta.groups[g].types[c]))
            .collect::<Option<Arc<[ColumnType]>>>()
            .ok_or_else(|| Error::corruption(path, meta_h.offset, "a value column stored in no group"))?;
        Ok(Arc::new(RowGroupReader {
            file,
            path: path.to_owned(),
            number,
            meta,
            shape,
            fences: Fences::new(key_pages.iter().map(|e| e.last_key.as_slice())),
            key_pages,
            group_pages,
            place,
            value_types,
            filter,
            cache,
            tier,
            version,
        }))
    }

    /// The file as a file of whole rows whose blocks are the key pages: meta, and one index
    /// entry per key page. A column's zone map of a key page is known where the
    /// column's pages nest inside the key page (merged from theirs), unknown where one page of
    /// the column spans several key pages.
    pub(crate) fn whole_rows(&self) -> WholeRows {
        let m = &self.meta;
        let meta = SstMeta {
            table_id: m.table_id,
            cg: 0,
            columns: (0..self.value_types.len()).collect(),
            types: self.value_types.to_vec(),
            entries: m.entries,
            min_seq: m.min_seq,
            max_seq: m.max_seq,
            smallest: m.smallest.clone(),
            largest: m.largest.clone(),
            index: m.index,
            filter: m.filter,
        };
        let ks = self.shape.key_shift();
        let index = self
            .key_pages
            .iter()
            .enumerate()
            .map(|(p, e)| {
                let zones: Vec<Option<ZoneMap>> = self
                    .place
                    .iter()
                    .flatten()
                    .map(|&(g, c)| {
                        let gs = self.shape.page_shift(g);
                        let pages = self.group_pages[g].get(p << (ks.checked_sub(gs)?)..)?;
                        let mut nested = pages.iter().take(1 << (ks - gs)).map(|q| q.zones.get(c));
                        let first = nested.next()??;
                        nested.try_fold(first, |acc, z| Some(acc.merge(&z?)))
                    })
                    .collect();
                IndexEntry {
                    last_key: e.last_key.clone(),
                    handle: e.handle,
                    rows: Shape::rows_of(m.entries, ks, p) as u64,
                    min_seq: e.min_seq,
                    max_seq: e.max_seq,
                    // A page going on with the previous page's key holds versions that key's
                    // newer one supersedes: not one version per key for the readers of
                    // whole-row blocks, whose blocks are cut between keys.
                    clean: e.clean && !e.continues,
                    continues: e.continues,
                    zones: Zones::partial(&zones, self.value_types.clone()),
                }
            })
            .collect();
        WholeRows { meta, index }
    }

    /// Whether the bloom filter allows a key with hash `hash` (see [`bloom::key_hash`]).
    pub(crate) fn may_contain(&self, hash: u64) -> bool {
        bloom::may_contain(&self.filter, hash)
    }

    /// Approximate bytes held in memory outside the block cache: the page index (with a zone
    /// map per column per page), fences and bloom filter.
    pub(crate) fn memory(&self) -> usize {
        use std::mem::size_of;
        let keys: usize = self.key_pages.iter().map(|e| size_of::<KeyPageEntry>() + e.last_key.capacity()).sum();
        let groups: usize =
            self.group_pages.iter().flatten().map(|e| size_of::<GroupPageEntry>() + e.zones.memory()).sum();
        keys + groups + self.fences.memory() + self.filter.capacity()
    }

    /// Where value column `vi` is stored: its group and its column there.
    pub(crate) fn place(&self, vi: usize) -> Option<(usize, usize)> {
        self.place.get(vi).copied().flatten()
    }

    /// The ordinals of key page `p`'s rows.
    pub(crate) fn key_page_rows(&self, p: usize) -> std::ops::Range<u64> {
        let start = (p as u64) << self.shape.key_shift();
        start..start + Shape::rows_of(self.meta.entries, self.shape.key_shift(), p) as u64
    }

    /// Group `g`'s cells of ordinals `rows`: the pages holding them, each with its rows there.
    pub(crate) fn group_rows(&self, g: usize, rows: std::ops::Range<u64>) -> Result<Vec<PageRows>> {
        self.group_rows_in(g, rows, None)
    }

    /// [`Self::group_rows`], pages read on a miss kept in `held` if given, else cached.
    fn group_rows_in(
        &self,
        g: usize,
        rows: std::ops::Range<u64>,
        mut held: Option<&mut HeldPages>,
    ) -> Result<Vec<PageRows>> {
        let gs = self.shape.page_shift(g);
        let mut out = Vec::new();
        let mut r = rows.start;
        while r < rows.end {
            let q = (r >> gs) as usize;
            let page_start = (q as u64) << gs;
            let end = rows.end.min(page_start + (1 << gs));
            let page = self.page(Page::Group(g, q), held.as_deref_mut())?;
            out.push((page, (r - page_start) as usize..(end - page_start) as usize));
            r = end;
        }
        Ok(out)
    }

    /// Key page `p`'s rows with the cells of every value column (in the table's order), copied
    /// from the group pages holding them: a block of whole rows, as a file of one group would
    /// store them. Pages read on a miss are kept in `held` if given, else cached.
    pub(crate) fn assemble(&self, p: usize, held: Option<&mut HeldPages>) -> Result<Block> {
        let all: Vec<usize> = (0..self.value_types.len()).collect();
        self.assemble_in(p, &all, held)
    }

    /// [`Self::assemble`] with only value columns `cols`, in that order.
    pub(crate) fn assemble_columns(&self, p: usize, cols: &[usize]) -> Result<Block> {
        self.assemble_in(p, cols, None)
    }

    fn assemble_in(&self, p: usize, cols: &[usize], mut held: Option<&mut HeldPages>) -> Result<Block> {
        let h = self.key_pages.get(p).ok_or_else(|| self.past_end(p))?.handle;
        let bad = |why: String| Error::corruption(&self.path, h.offset, why);
        let keys = self.page(Page::Key(p), held.as_deref_mut())?;
        let rows = self.key_page_rows(p);
        let mut spans: Vec<Option<Vec<PageRows>>> = vec![None; self.meta.groups.len()];
        let mut columns: Vec<Vec<ColumnRun>> = Vec::with_capacity(cols.len());
        let mut types = Vec::with_capacity(cols.len());
        for &vi in cols {
            let (g, col) = self.place(vi).ok_or_else(|| bad(format!("no value column {vi}")))?;
            let pages = match &mut spans[g] {
                Some(pages) => pages,
                slot => slot.insert(self.group_rows_in(g, rows.clone(), held.as_deref_mut())?),
            };
            columns.push(
                pages
                    .iter()
                    .map(|(block, r)| ColumnRun { block: block.clone(), col, start: r.start, len: r.len() })
                    .collect(),
            );
            types.push(self.value_types[vi]);
        }
        let bytes = BlockBuilder::assemble(&keys, &types, &columns)
            .ok_or_else(|| bad("group pages do not cover their key page's rows".into()))?;
        Block::decode(bytes, &types).map_err(|e| bad(e.0))
    }

    /// How the rows are cut into pages.
    #[cfg(test)]
    pub(crate) fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The file's groups.
    pub(crate) fn groups(&self) -> &[Group] {
        &self.meta.groups
    }

    /// Where page `which` lives.
    fn handle(&self, which: Page) -> Result<BlockHandle> {
        let h = match which {
            Page::Key(p) => self.key_pages.get(p).map(|e| e.handle),
            Page::Group(g, p) => self.group_pages.get(g).and_then(|pages| pages.get(p)).map(|e| e.handle),
        };
        h.ok_or_else(|| match which {
            Page::Key(p) | Page::Group(_, p) => self.past_end(p),
        })
    }

    /// Decodes page `which` from its unframed content and checks it against the index: its row
    /// count, keys present (key pages) or not (group pages), and a key page's newest sequence
    /// number, clean flag and whether it goes on with the previous page's last key.
    fn decode_page(&self, which: Page, h: BlockHandle, content: Vec<u8>) -> Result<Block> {
        let bad = |why: &str| Error::corruption(&self.path, h.offset, why.to_owned());
        let (types, shift): (&[ColumnType], u32) = match which {
            Page::Key(_) => (&[], self.shape.key_shift()),
            Page::Group(g, _) => (&self.meta.groups[g].types, self.shape.page_shift(g)),
        };
        let (Page::Key(p) | Page::Group(_, p)) = which;
        let b = Block::decode_format(content, types, ROW_GROUP_FORMAT).map_err(|e| bad(&e.0))?;
        let agrees = b.len() == Shape::rows_of(self.meta.entries, shift, p)
            && match which {
                Page::Key(p) => {
                    let e = &self.key_pages[p];
                    let goes_on = || match p.checked_sub(1).map(|q| &self.key_pages[q].last_key) {
                        Some(last) => matches!(b.versions_of(last), (0, seqs) if !seqs.is_empty()),
                        None => false,
                    };
                    b.has_keys()
                        && b.max_seq() == e.max_seq
                        && b.is_clean() == e.clean
                        && (self.version == ROW_GROUP_FORMAT_5 || e.continues == goes_on())
                }
                Page::Group(..) => !b.has_keys(),
            };
        if !agrees {
            return Err(bad("page disagrees with the index"));
        }
        Ok(b)
    }

    /// Page `which` through the cache: read and checked once ([`Self::decode_page`]) on a
    /// miss, then cached, or with `held` kept there instead (group pages; key pages are not
    /// kept).
    fn page(&self, which: Page, held: Option<&mut HeldPages>) -> Result<Arc<Block>> {
        let h = self.handle(which)?;
        if let Some(b) = self.cache.get(self.number, h.offset) {
            return Ok(b);
        }
        if let (Some(held), Page::Group(g, p)) = (held.as_deref(), which) {
            if let Some(b) = held.get(self.number, g, p) {
                return Ok(b);
            }
        }
        self.admit(which, h, read_block_raw(self.file.as_ref(), &self.path, h)?, held)
    }

    /// Page `which` read from the file (its unframed `content`): counted, checked and cached, or
    /// kept in `held` instead (group pages).
    fn admit(&self, which: Page, h: BlockHandle, content: Vec<u8>, held: Option<&mut HeldPages>) -> Result<Arc<Block>> {
        self.cache.count_read(self.tier, h.size as usize + TRAILER_LEN);
        let b = Arc::new(self.decode_page(which, h, content)?);
        match (held, which) {
            (None, _) => self.cache.insert(self.number, h.offset, b.clone()),
            (Some(held), Page::Group(g, p)) => held.hold(self.number, g, p, b.clone()),
            (Some(_), Page::Key(_)) => {}
        }
        Ok(b)
    }

    /// Key page `p`.
    pub(crate) fn key_page(&self, p: usize) -> Result<Arc<Block>> {
        self.page(Page::Key(p), None)
    }

    /// Page `p` of group `g`.
    #[cfg(test)]
    pub(crate) fn group_page(&self, g: usize, p: usize) -> Result<Arc<Block>> {
        self.page(Page::Group(g, p), None)
    }

    fn past_end(&self, p: usize) -> Error {
        Error::corruption(&self.path, 0, format!("page {p} past the file's rows"))
    }

    /// Calls `f` with each version of `key`, newest first: its ordinal, sequence number and
    /// kind, until `f` says stop (`Ok(false)`). One fence search, one binary search in a key page
    /// (and the next ones while the key's versions continue there).
    fn each_version(
        &self,
        key: &[u8],
        pin: &CachePin<'_>,
        mut f: impl FnMut(u64, u64, Kind) -> Result<bool>,
    ) -> Result<()> {
        let mut p = self.fences.find(key, |i| &self.key_pages[i].last_key);
        while p < self.key_pages.len() {
            let h = self.handle(Page::Key(p))?;
            let page = match self.cache.get_pinned(self.number, h.offset, pin) {
                Some(b) => BlockRef::Cached(b),
                None => BlockRef::Read(self.key_page(p)?),
            };
            let (first, seqs) = page.versions_of(key);
            let base = (p as u64) << self.shape.key_shift();
            for (i, &seq) in (first..).zip(seqs.iter()) {
                if !f(base + i as u64, seq, page.kind(i))? {
                    return Ok(());
                }
            }
            // The key's versions may go on in the next page only if they reach this one's end.
            if seqs.is_empty() || first + seqs.len() < page.len() {
                break;
            }
            p += 1;
        }
        Ok(())
    }

    /// The versions of `key`, newest first: ordinal, sequence number and kind of each (none
    /// when the file does not hold the key).
    #[cfg(test)]
    pub(crate) fn versions(&self, key: &[u8]) -> Result<Vec<(u64, u64, Kind)>> {
        let mut out = Vec::new();
        let pin = self.cache.pin();
        self.each_version(key, &pin, |r, seq, kind| {
            out.push((r, seq, kind));
            Ok(true)
        })?;
        Ok(out)
    }

    /// Value column `vi` of the row at ordinal `r`: the page holding it, its row there and its
    /// column (`None` when the file does not store the column).
    #[cfg(test)]
    pub(crate) fn locate(&self, vi: usize, r: u64) -> Result<Option<(Arc<Block>, usize, usize)>> {
        let Some((g, c)) = self.place.get(vi).copied().flatten() else { return Ok(None) };
        let (p, row) = self.shape.locate(g, r);
        Ok(Some((self.group_page(g, p)?, row, c)))
    }

    /// Feeds the versions of `key` at or below `snapshot` (newest first) to `res`, reading only
    /// the columns it still lacks. Returns early (without IO) when the key is outside the file
    /// or the bloom filter excludes it.
    pub(crate) fn get(
        &self,
        key: &[u8],
        hash: u64,
        snapshot: u64,
        wanted: Option<&[bool]>,
        res: &mut Resolver,
        pin: &CachePin<'_>,
    ) -> Result<Lookup> {
        if key < self.meta.smallest.as_slice() || key > self.meta.largest.as_slice() {
            return Ok(Lookup::Outside);
        }
        if !bloom::may_contain(&self.filter, hash) {
            return Ok(Lookup::Filtered);
        }
        let mut found = false;
        // Each group's page holding the current version: loaded once per version for the groups
        // with a column the read still needs, so cells are then read by position alone.
        let mut pages: smallvec::SmallVec<[Option<PageRow<'_>>; 8]> =
            (0..self.meta.groups.len()).map(|_| None).collect();
        let wants = |vi: usize| wanted.is_none_or(|w| w.get(vi).copied().unwrap_or(false));
        self.each_version(key, pin, |r, seq, kind| {
            if res.is_settled() {
                return Ok(false);
            }
            if seq > snapshot {
                return Ok(true);
            }
            found = true;
            let needed =
                |g: usize| kind != Kind::Delete && self.meta.groups[g].columns.iter().any(|&vi| res.is_open(vi));
            self.pages_of_row(r, needed, &mut pages, pin)?;
            res.push_with(kind, None, |vi| {
                let (g, c) = self.place.get(vi).copied().flatten().filter(|_| wants(vi))?;
                let (page, row) = pages[g].as_ref()?;
                page.cell(*row, c)
            });
            Ok(true)
        })?;
        Ok(Lookup::Probed(found))
    }

    /// Into `out` (by group), the page holding row `r` of each group `needed` names and the
    /// row's place there (`None` for the others). The pages the cache lacks are read with one
    /// read when they lie close together in the file, as a row's pages of groups of like widths
    /// do (pages are written as they fill), then checked and cached one by one.
    fn pages_of_row<'g>(
        &self,
        r: u64,
        needed: impl Fn(usize) -> bool,
        out: &mut [Option<PageRow<'g>>],
        pin: &'g CachePin<'_>,
    ) -> Result<()> {
        let mut missing: smallvec::SmallVec<[(usize, usize, usize, BlockHandle); 32]> = smallvec::SmallVec::new();
        for (g, slot) in out.iter_mut().enumerate() {
            *slot = None;
            if !needed(g) {
                continue;
            }
            let (q, row) = self.shape.locate(g, r);
            let h = self.handle(Page::Group(g, q))?;
            match self.cache.get_pinned(self.number, h.offset, pin) {
                Some(b) => *slot = Some((BlockRef::Cached(b), row)),
                None => missing.push((g, q, row, h)),
            }
        }
        let framed = |h: &BlockHandle| (h.size as usize) + TRAILER_LEN;
        let mut add = |(g, q, row, h): (usize, usize, usize, BlockHandle), content: Vec<u8>| -> Result<()> {
            out[g] = Some((BlockRef::Read(self.admit(Page::Group(g, q), h, content, None)?), row));
            Ok(())
        };
        let start = missing.iter().map(|m| m.3.offset).min().unwrap_or(0);
        let end = missing.iter().map(|m| m.3.offset + framed(&m.3) as u64).max().unwrap_or(0);
        let wanted: usize = missing.iter().map(|m| framed(&m.3)).sum();
        // One read when the pages make up at least half of the span between them.
        if missing.len() < 2 || end - start > 2 * wanted as u64 || end > self.file.len() {
            for m in missing {
                add(m, read_block_raw(self.file.as_ref(), &self.path, m.3)?)?;
            }
            return Ok(());
        }
        read_scratch(self.file.as_ref(), start, (end - start) as usize, |span| {
            for m in missing {
                let h = m.3;
                let from = (h.offset - start) as usize;
                let raw = span
                    .get(from..from + framed(&h))
                    .ok_or_else(|| Error::corruption(&self.path, h.offset, "page outside its read span"))?;
                add(m, unframe_slice(&self.path, h.offset, raw)?)?;
            }
            Ok(())
        })
    }

    /// Reads every page from the file, checking checksums, structure and row counts. Returns
    /// the pages read.
    pub(crate) fn verify(&self) -> Result<usize> {
        let keys = (0..self.key_pages.len()).map(Page::Key);
        let groups =
            self.group_pages.iter().enumerate().flat_map(|(g, pages)| (0..pages.len()).map(move |p| Page::Group(g, p)));
        let mut n = 0;
        for which in keys.chain(groups) {
            let h = self.handle(which)?;
            self.decode_page(which, h, read_block_raw(self.file.as_ref(), &self.path, h)?)?;
            n += 1;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mvcc::chain::Resolver;
    use crate::types::row::{encode_row, RowIter};
    use crate::types::Value;
    use crate::vfs::FaultFs;
    use rand::{Rng, SeedableRng};

    const TYPES: [ColumnType; 4] = [ColumnType::BigInt, ColumnType::Text, ColumnType::Int, ColumnType::Double];

    fn groups() -> Vec<Vec<usize>> {
        vec![vec![0, 1], vec![2], vec![3]]
    }

    /// One version: key, seq, kind, cells by value column (`None`: not carried).
    type Version = (Vec<u8>, u64, Kind, Vec<Option<Value>>);

    /// Random versions over `keys` keys: some keys with several versions, partial rows, deletes
    /// and NULLs, in (key asc, seq desc) order; `rows` versions in all.
    fn versions(rng: &mut rand::rngs::StdRng, rows: usize) -> Vec<Version> {
        let mut out = Vec::new();
        let mut k = 0u64;
        while out.len() < rows {
            k += rng.gen_range(1..4);
            let n = rng.gen_range(1..4).min(rows - out.len());
            for j in 0..n {
                let kind = [Kind::Put, Kind::Put, Kind::Update, Kind::Delete][rng.gen_range(0..4)];
                let cells = (0..4)
                    .map(|c| match kind {
                        Kind::Delete => None,
                        Kind::Update if rng.gen_bool(0.5) => None,
                        _ if rng.gen_bool(0.1) => Some(Value::Null),
                        _ => Some(match c {
                            0 => Value::BigInt(rng.gen()),
                            1 => Value::Text("t".repeat(rng.gen_range(0..20))),
                            2 => Value::Int(rng.gen()),
                            _ => Value::Double(rng.gen()),
                        }),
                    })
                    .collect();
                out.push((format!("key{k:08}").into_bytes(), 1000 - j as u64, kind, cells));
            }
        }
        out
    }

    fn build(fs: &FaultFs, path: &Path, vs: &[Version], shape: Option<Shape>) -> FileMeta {
        build_format(fs, path, vs, shape, ROW_GROUP_FORMAT)
    }

    /// [`build`] writing format `format`.
    fn build_format(fs: &FaultFs, path: &Path, vs: &[Version], shape: Option<Shape>, format: u32) -> FileMeta {
        let opts = SstOptions { block_size: 1024, compression: Compression::Lz4, bloom_bits_per_key: 10 };
        let file = fs.create(path).unwrap();
        let mut b = match shape {
            Some(s) => {
                let gs = groups().iter().map(|cols| Group::of(cols, &TYPES)).collect();
                RowGroupBuilder::with_shape(file, opts, 1, gs, s)
            }
            None => RowGroupBuilder::new(file, opts, 1, &groups(), &TYPES, 11),
        };
        b.format = format;
        for (key, seq, kind, cells) in vs {
            let mut row = Vec::new();
            encode_row(&TYPES, cells, &mut row);
            let raws: Vec<RawCell<'_>> = RowIter::new(&TYPES, &row).unwrap().map(Result::unwrap).collect();
            b.add(key, *seq, *kind, |vi| raws[vi]).unwrap();
        }
        b.finish(9).unwrap()
    }

    fn open(fs: &FaultFs, path: &Path) -> Result<Arc<RowGroupReader>> {
        RowGroupReader::open(fs, path, (9, 0), Arc::new(BlockCache::new(1 << 20)))
    }

    /// Every group holds every version at its ordinal, at 1 row, one granule less one, a
    /// granule, one more, and many pages of every kind: versions and cells read back by position,
    /// and each group's page row counts follow from the key pages'.
    #[test]
    fn every_group_holds_every_row_at_its_ordinal() {
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let fs = FaultFs::new();
        let shape = Shape { granule_shift: 6, key_span: 1, spans: vec![0, 2, 1] };
        for rows in [1usize, 63, 64, 65, 127, 128, 129, 1000, 3001] {
            let vs = versions(&mut rng, rows);
            let path = Path::new("/rg/000009.sst");
            for shape in [Some(shape.clone()), None] {
                let meta = build(&fs, path, &vs, shape);
                assert_eq!(meta.entries, rows as u64, "seed {seed}");
                let r = open(&fs, path).unwrap();
                let pages = r.verify().unwrap();
                let s = r.shape().clone();
                let want_pages = Shape::pages(rows as u64, s.key_shift())
                    + (0..3).map(|g| Shape::pages(rows as u64, s.page_shift(g))).sum::<usize>();
                assert_eq!(pages, want_pages, "seed {seed} rows {rows}");
                for (ord, (key, seq, kind, cells)) in vs.iter().enumerate() {
                    let found = r.versions(key).unwrap();
                    assert!(found.contains(&(ord as u64, *seq, *kind)), "seed {seed} rows {rows} ordinal {ord}");
                    for (vi, cell) in cells.iter().enumerate() {
                        let (page, row, c) = r.locate(vi, ord as u64).unwrap().unwrap();
                        assert_eq!(&page.cell(row, c), cell, "seed {seed} rows {rows} ordinal {ord} column {vi}");
                    }
                }
                assert!(r.versions(b"key").unwrap().is_empty() && r.versions(b"zzz").unwrap().is_empty());
            }
        }
    }

    /// The file seen as whole rows: a key page assembled from the group pages holds exactly its
    /// versions with every cell (or the columns asked for, in that order); its zone maps are the
    /// rows' own where the column's pages nest inside the key page (merged from smaller pages)
    /// and unknown where a page spans several key pages.
    #[test]
    fn key_pages_assemble_into_whole_rows_with_nested_zone_maps() {
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let fs = FaultFs::new();
        // Group 0's pages (columns 0 and 1) are half a key page, group 1's (column 2) two key
        // pages, group 2's (column 3) one.
        let shape = Shape { granule_shift: 6, key_span: 1, spans: vec![0, 2, 1] };
        for rows in [1usize, 64, 129, 1000] {
            let vs = versions(&mut rng, rows);
            let path = Path::new("/rg/000009.sst");
            build(&fs, path, &vs, Some(shape.clone()));
            let r = open(&fs, path).unwrap();
            let view = r.whole_rows();
            assert_eq!(view.meta.columns, vec![0, 1, 2, 3]);
            assert_eq!(view.index.len(), Shape::pages(rows as u64, shape.key_shift()), "seed {seed}");
            for (p, e) in view.index.iter().enumerate() {
                let b = r.assemble(p, None).unwrap();
                let ords = r.key_page_rows(p);
                assert_eq!(b.len() as u64, e.rows, "seed {seed} rows {rows} page {p}");
                assert_eq!(ords.end - ords.start, e.rows);
                let mine = &vs[ords.start as usize..ords.end as usize];
                for (i, (key, seq, kind, cells)) in mine.iter().enumerate() {
                    assert_eq!((b.key(i), b.seq(i), b.kind(i)), (key.as_slice(), *seq, *kind), "seed {seed}");
                    for (vi, cell) in cells.iter().enumerate() {
                        assert_eq!(&b.cell(i, vi), cell, "seed {seed} rows {rows} page {p} row {i} column {vi}");
                    }
                }
                let two = r.assemble_columns(p, &[2, 0]).unwrap();
                for (i, (_, _, _, cells)) in mine.iter().enumerate() {
                    assert_eq!((two.cell(i, 0), two.cell(i, 1)), (cells[2].clone(), cells[0].clone()), "seed {seed}");
                }
                for vi in 0..4 {
                    let z = e.zones.get(vi);
                    // Column 2 is group 1's, whose pages span two key pages.
                    if vi == 2 {
                        assert!(z.is_none(), "a two-key-page page's zone map is unknown: seed {seed}");
                        continue;
                    }
                    let z = z.unwrap_or_else(|| panic!("column {vi}'s zone map is known: seed {seed}"));
                    let carried: Vec<&Value> = mine.iter().filter_map(|v| v.3[vi].as_ref()).collect();
                    let nulls = carried.iter().filter(|v| ***v == Value::Null).count() as u64;
                    assert_eq!((z.carried, z.nulls), (carried.len() as u64, nulls), "seed {seed} page {p} column {vi}");
                    let values: Vec<&Value> = carried.into_iter().filter(|v| **v != Value::Null).collect();
                    let by = |a: &&Value, b: &&Value| crate::scan::cnf::compare(a, b);
                    let want = (values.iter().copied().min_by(by).cloned(), values.iter().copied().max_by(by).cloned());
                    assert_eq!((z.min, z.max), want, "seed {seed} page {p} column {vi}");
                }
            }
        }
    }

    /// A walk reading some columns gets a row-group file's blocks assembled with those alone,
    /// uncached, and the rows it encodes from them are the ones it encodes from whole blocks;
    /// once a whole block is cached, it gets that one.
    #[test]
    fn blocks_assembled_with_the_wanted_columns_encode_the_rows_whole_blocks_do() {
        use crate::sst::reader::{RowEncoder, SstReader};
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let fs = FaultFs::new();
        let path = Path::new("/rg/000011.sst");
        let vs = versions(&mut rng, 700);
        build(&fs, path, &vs, Some(Shape { granule_shift: 6, key_span: 1, spans: vec![0, 2, 1] }));
        let cache = Arc::new(BlockCache::new(64 << 20));
        let r = SstReader::open(&fs, path, (11, 0, Arc::default()), cache.clone()).unwrap();
        let types: Arc<[ColumnType]> = TYPES.into();
        for cols in [vec![0, 2], vec![3], vec![1, 2, 3], vec![]] {
            let wanted: Arc<[bool]> = (0..TYPES.len()).map(|vi| cols.contains(&vi)).collect();
            let mut whole_rows = RowEncoder::new(&r, types.clone(), Some(wanted.clone()));
            let mut some_columns = RowEncoder::new(&r, types.clone(), Some(wanted));
            for i in 0..r.num_blocks() {
                let (b, placed) = r.block_columns(i, &cols).unwrap();
                let placed = placed.unwrap_or_else(|| panic!("block {i} came from the cache: seed {seed}"));
                let whole = r.block(i, false).unwrap();
                assert_eq!(b.len(), whole.len(), "seed {seed}");
                for row in 0..b.len() {
                    let (a, w) = (some_columns.entry_placed(&b, row, Some(&placed)), whole_rows.entry(&whole, row));
                    assert_eq!(
                        (&a.key, a.seq, a.kind, &a.row),
                        (&w.key, w.seq, w.kind, &w.row),
                        "seed {seed} {cols:?} block {i} row {row}"
                    );
                }
            }
        }
        let whole = r.block(0, true).unwrap();
        let (b, placed) = r.block_columns(0, &[0]).unwrap();
        assert!(Arc::ptr_eq(&b, &whole) && placed.is_none(), "a cached whole block serves any columns");
    }

    /// Rows copied from blocks of whole rows (runs of consecutive rows column by column,
    /// interrupted by rows added cell by cell) make the same file as rows added cell by cell.
    #[test]
    fn copied_rows_make_the_file_rows_added_cell_by_cell_make() {
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let fs = FaultFs::new();
        let shape = Shape { granule_shift: 6, key_span: 1, spans: vec![0, 2, 1] };
        let vs = versions(&mut rng, 900);
        let src = Path::new("/rg/000001.sst");
        build(&fs, src, &vs, Some(shape.clone()));
        let r = open(&fs, src).unwrap();
        let opts = SstOptions { block_size: 1024, compression: Compression::Lz4, bloom_bits_per_key: 10 };
        let gs: Vec<Group> = r.groups().to_vec();
        let (a, b) = (Path::new("/rg/000002.sst"), Path::new("/rg/000003.sst"));
        let mut copied = RowGroupBuilder::with_shape(fs.create(a).unwrap(), opts, 1, gs.clone(), shape.clone());
        let mut by_cell = RowGroupBuilder::with_shape(fs.create(b).unwrap(), opts, 1, gs, shape.clone());
        let group_of: Arc<[Option<usize>]> = (0..4).map(Some).collect();
        for p in 0..Shape::pages(vs.len() as u64, shape.key_shift()) {
            let block = Arc::new(r.assemble(p, None).unwrap());
            for row in 0..block.len() {
                if rng.gen_bool(0.2) {
                    continue;
                }
                let at = Stored { block: block.clone(), row, group_of: group_of.clone() };
                let (key, seq, kind) = (block.key(row), block.seq(row), block.kind(row));
                if rng.gen_bool(0.7) {
                    copied.add_stored(key, seq, kind, &at).unwrap();
                } else {
                    copied.add(key, seq, kind, |vi| at.cell(vi)).unwrap();
                }
                by_cell.add(key, seq, kind, |vi| at.cell(vi)).unwrap();
            }
        }
        copied.finish(2).unwrap();
        by_cell.finish(3).unwrap();
        let bytes = |p: &Path| {
            let f = fs.open(p).unwrap();
            f.read_at(0, f.len() as usize).unwrap()
        };
        assert!(bytes(a) == bytes(b), "seed {seed}: the copied file differs");
    }

    /// Page arithmetic against a linear count of rows per page.
    #[test]
    fn pages_nest_and_locate_by_shifts() {
        let s = Shape { granule_shift: 6, key_span: 2, spans: vec![0, 1, 3] };
        for g in 0..3 {
            let per = 64usize << s.spans[g];
            for r in [0u64, 1, 63, 64, 65, 255, 256, 511, 512, 10_000] {
                assert_eq!(s.locate(g, r), ((r as usize) / per, (r as usize) % per), "group {g} row {r}");
            }
            // A page of a narrower group starts where a page of every wider group starts.
            for p in 0..10usize {
                let start = p * per;
                assert_eq!(start % 64, 0);
            }
        }
        assert_eq!(Shape::pages(0, 6), 0);
        assert_eq!(Shape::pages(64, 6), 1);
        assert_eq!(Shape::pages(65, 6), 2);
        assert_eq!(Shape::rows_of(65, 6, 1), 1);
        assert_eq!(Shape::rows_of(65, 6, 0), 64);
        let c = Shape::choose(16 << 10, 11, &[8 * 30, 4, 16]);
        assert_eq!(c.granule_shift, 6, "16 KiB over 240-byte rows: 64-row granules");
        assert!(c.spans[0] == 0 && c.spans[1] > c.spans[2] && c.key_span > 0, "{c:?}");
        assert!(c.spans.iter().all(|&s| s <= c.key_span), "group pages nest in key pages: {c:?}");
        // Keys wider than every group: one-granule key pages, and so every group's pages.
        let c = Shape::choose(16 << 10, 11, &[4, 1]);
        assert!(c.key_span == 0 && c.spans == [0, 0] && c.granule_shift == 10, "{c:?}");
    }

    /// A format-5 file does not say which key pages go on with the previous page's key: every
    /// page but the first is taken as going on, so none of them passes as clean.
    #[test]
    fn format_5_files_read_every_page_but_the_first_as_going_on() {
        let fs = FaultFs::new();
        let path = Path::new("/rg/000010.sst");
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let vs = versions(&mut rng, 300);
        let shape = Shape { granule_shift: 6, key_span: 0, spans: vec![0, 0, 0] };
        build_format(&fs, path, &vs, Some(shape), ROW_GROUP_FORMAT_5);
        let r = open(&fs, path).unwrap();
        assert_eq!(r.version, ROW_GROUP_FORMAT_5);
        assert!(r.key_pages.iter().enumerate().all(|(p, e)| e.continues == (p > 0)));
        // Only the first page may be taken for one version per key; every page still decodes.
        assert!(r.whole_rows().index.iter().skip(1).all(|e| !e.clean));
        assert_eq!(r.verify().unwrap(), r.key_pages.len() + r.group_pages.iter().map(Vec::len).sum::<usize>());
    }

    /// A key with more versions than a key page holds: its versions are found across pages.
    #[test]
    fn a_keys_versions_continue_into_the_next_key_page() {
        let fs = FaultFs::new();
        let path = Path::new("/rg/000009.sst");
        let mut vs: Vec<Version> = Vec::new();
        for (k, n) in [("a", 50u64), ("b", 150), ("c", 3)] {
            for j in 0..n {
                vs.push((
                    k.as_bytes().to_vec(),
                    1000 - j,
                    Kind::Put,
                    vec![Some(Value::BigInt(j as i64)), None, None, None],
                ));
            }
        }
        build(&fs, path, &vs, Some(Shape { granule_shift: 6, key_span: 0, spans: vec![0, 0, 0] }));
        let r = open(&fs, path).unwrap();
        // Pages of 64 rows: `b` fills rows 50 to 199, so the second, third and fourth pages
        // start with it, as the previous page ends; each page's own decode agrees.
        assert_eq!(r.key_pages.iter().map(|e| e.continues).collect::<Vec<_>>(), [false, true, true, true]);
        assert_eq!(r.verify().unwrap(), 4 + 4 * 3);
        let b = r.versions(b"b").unwrap();
        assert_eq!(b.len(), 150);
        assert!(b.iter().enumerate().all(|(i, &(ord, seq, _))| ord == 50 + i as u64 && seq == 1000 - i as u64));
        assert_eq!(r.versions(b"c").unwrap().len(), 3);
        // A point read at a snapshot between the versions sees the right one.
        let mut res = Resolver::new(4, None);
        r.get(b"b", bloom::key_hash(b"b"), 1000 - 120, None, &mut res, &r.cache.pin()).unwrap();
        assert_eq!(res.finish().map(|c| c[0].clone()), Some(Some(Value::BigInt(120))));
    }

    /// A row's pages of every group, read on a cold cache (together when they lie close in the
    /// file), hold what each group's page holds on its own; each is read once, then cached.
    #[test]
    fn a_rows_pages_read_together_hold_each_groups_cells() {
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let fs = FaultFs::new();
        let vs = versions(&mut rng, 1500);
        let path = Path::new("/rg/000009.sst");
        for shape in [Some(Shape { granule_shift: 6, key_span: 1, spans: vec![0, 2, 1] }), None] {
            build(&fs, path, &vs, shape);
            let plain = open(&fs, path).unwrap();
            for _ in 0..50 {
                let r = open(&fs, path).unwrap();
                let ord = rng.gen_range(0..vs.len() as u64);
                let only: Option<usize> = rng.gen_bool(0.3).then(|| rng.gen_range(0..3));
                let needed = |g: usize| only.is_none_or(|o| o == g);
                let pin = r.cache.pin();
                let mut out = [None, None, None];
                r.pages_of_row(ord, needed, &mut out, &pin).unwrap();
                let want = (0..3).filter(|&g| needed(g)).count() as u64;
                assert_eq!(r.cache.reads.load(std::sync::atomic::Ordering::Relaxed), want, "seed {seed}");
                for (vi, cell) in vs[ord as usize].3.iter().enumerate() {
                    let (g, c) = r.place(vi).unwrap();
                    let Some((page, row)) = &out[g] else {
                        assert!(!needed(g), "seed {seed} ordinal {ord} group {g}");
                        continue;
                    };
                    let (alone, at, _) = plain.locate(vi, ord).unwrap().unwrap();
                    assert_eq!(*row, at, "seed {seed} ordinal {ord} column {vi}");
                    assert_eq!(page.cell(*row, c), alone.cell(at, c), "seed {seed} ordinal {ord} column {vi}");
                    assert_eq!(&page.cell(*row, c), cell, "seed {seed} ordinal {ord} column {vi}");
                }
                r.pages_of_row(ord, needed, &mut out, &pin).unwrap();
                assert_eq!(r.cache.reads.load(std::sync::atomic::Ordering::Relaxed), want, "cached: seed {seed}");
            }
        }
    }

    /// Pages read for a walk with pages held are not cached, and a group page under several key
    /// pages is read once: as many page reads as the file has pages, and blocks as assembled
    /// through the cache.
    #[test]
    fn held_pages_are_read_once_and_leave_the_cache_empty() {
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let fs = FaultFs::new();
        let vs = versions(&mut rng, 1000);
        let path = Path::new("/rg/000009.sst");
        build(&fs, path, &vs, Some(Shape { granule_shift: 6, key_span: 1, spans: vec![0, 2, 1] }));
        let (r, cached) = (open(&fs, path).unwrap(), open(&fs, path).unwrap());
        let mut held = HeldPages::default();
        for p in 0..r.key_pages.len() {
            let b = r.assemble(p, Some(&mut held)).unwrap();
            let want = cached.assemble(p, None).unwrap();
            assert_eq!(b.len(), want.len(), "seed {seed} page {p}");
            for i in 0..b.len() {
                assert_eq!((b.key(i), b.seq(i), b.kind(i)), (want.key(i), want.seq(i), want.kind(i)), "seed {seed}");
                for vi in 0..4 {
                    assert_eq!(b.cell(i, vi), want.cell(i, vi), "seed {seed} page {p} row {i} column {vi}");
                }
            }
        }
        assert_eq!(r.cache.charged(), 0, "seed {seed}");
        let pages = r.verify().unwrap() as u64;
        assert_eq!(r.cache.reads.load(std::sync::atomic::Ordering::Relaxed), pages, "seed {seed}");
    }

    /// A flipped bit anywhere is reported as corruption naming the file, at open or by verify.
    #[test]
    fn flipped_bits_are_corruption_naming_the_file() {
        let fs = FaultFs::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let vs = versions(&mut rng, 700);
        let path = Path::new("/rg/000009.sst");
        build(&fs, path, &vs, None);
        let len = fs.file_len(path).unwrap();
        for off in (0..len).step_by(37) {
            build(&fs, path, &vs, None);
            fs.flip_bit(path, off, 3).unwrap();
            let err = open(&fs, path).and_then(|r| r.verify()).unwrap_err();
            assert!(err.is_corruption() && err.to_string().contains("000009.sst"), "offset {off}: {err}");
            // A point read's pages, read together, are checked one by one as well.
            let Ok(r) = open(&fs, path) else { continue };
            let pin = r.cache.pin();
            let mut out = [None, None, None];
            let read =
                (0..vs.len() as u64).step_by(50).try_for_each(|ord| r.pages_of_row(ord, |_| true, &mut out, &pin));
            if let Err(err) = read {
                assert!(err.is_corruption() && err.to_string().contains("000009.sst"), "offset {off}: {err}");
            }
        }
    }
}
