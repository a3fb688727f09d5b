//! Reading a row-group file: opening and validating it, point reads by ordinal, pages for the
//! scans, and the file seen as whole rows for the other readers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::meta::{decode_index, Group, GroupPageEntry, KeyPageEntry, RowGroupMeta};
use super::shape::Shape;
use super::{is_row_group_format, ROW_GROUP_FORMAT, ROW_GROUP_FORMAT_5};
use crate::codec::{DecodeError, Reader};
use crate::error::{Error, Result};
use crate::mvcc::chain::Resolver;
use crate::mvcc::Kind;
use crate::sst::block::{Block, BlockBuilder, ColumnRun};
use crate::sst::bloom;
use crate::sst::builder::{IndexEntry, SstMeta};
use crate::sst::cache::{BlockCache, BlockRef, CachePin};
use crate::sst::format::{decode_footer, unframe_slice, BlockHandle, FOOTER_LEN, TRAILER_LEN};
use crate::sst::reader::{handles_apart, read_block_raw, read_scratch, Fences, Lookup};
use crate::sst::zone::{ZoneMap, Zones};
use crate::types::ColumnType;
use crate::vfs::{Fs, ReadableFile};

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
    pub(super) key_pages: Vec<KeyPageEntry>,
    /// The key pages' fences, searched by prefix first.
    fences: Fences,
    pub(super) group_pages: Vec<Vec<GroupPageEntry>>,
    /// For each value column of the table: its group and its column there.
    place: Vec<Option<(usize, usize)>>,
    /// The type of each value column.
    value_types: Arc<[ColumnType]>,
    filter: Vec<u8>,
    pub(super) cache: Arc<BlockCache>,
    tier: u8,
    /// The file's format version.
    pub(super) version: u32,
}

/// A row-group file seen as a file of whole rows whose blocks are its key pages (what
/// [`SstReader`](super::reader::SstReader) serves its readers from).
pub(crate) struct WholeRows {
    pub meta: SstMeta,
    pub index: Vec<IndexEntry>,
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
    pub(super) fn pages_of_row<'g>(
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
