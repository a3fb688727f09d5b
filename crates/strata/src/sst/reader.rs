//! Reading one SST: open (footer → meta → index → filter, all checked), point lookups through
//! the bloom filter and fence keys, and a cursor for scans and compaction.
//!
//! A reader is immutable after open and shared (`Arc`) by every thread; data blocks go through the
//! shared [`BlockCache`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::block::{Block, Versions};
use super::bloom;
use super::builder::{IndexEntry, SstMeta, BLOCK_CLEAN};
use super::cache::{BlockCache, BlockRef, CachePin};
use super::format::{decode_footer, unframe_slice, BlockHandle, FOOTER_LEN, TRAILER_LEN};
use super::rowgroup::{is_row_group_format, HeldPages, RowGroupReader, WholeRows};
use super::zone::{ZoneMap, Zones};
use crate::codec::{DecodeError, DecodeResult, Reader};
use crate::error::{Error, Result};
use crate::mvcc::chain::Resolver;
use crate::mvcc::{Cover, Entry, Kind, Stored};
use crate::tier::heat::Heat;
use crate::types::row::{encode_raw_row, RawCell};
use crate::types::ColumnType;
use crate::vfs::{Fs, ReadableFile};

impl SstMeta {
    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let table_id = u32::try_from(r.varint()?).map_err(|_| DecodeError::new("bad table id"))?;
        let cg = u32::try_from(r.varint()?).map_err(|_| DecodeError::new("bad group id"))?;
        let (columns, types) = read_columns(r)?;
        Ok(SstMeta {
            table_id,
            cg,
            columns,
            types,
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

/// Reads a group's columns from a meta block (see [`super::builder::put_columns`]).
pub(crate) fn read_columns(r: &mut Reader<'_>) -> DecodeResult<(Vec<usize>, Vec<ColumnType>)> {
    let n = r.len(u16::MAX as usize)?;
    let (mut columns, mut types) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        columns.push(r.len(u16::MAX as usize)?);
        types.push(ColumnType::from_code(r.u8()?)?);
    }
    Ok((columns, types))
}

/// What a point lookup in one file came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The key lies outside the file's key range.
    Outside,
    /// The bloom filter rules the key out.
    Filtered,
    /// A data block was searched; whether it held a version visible to the read.
    Probed(bool),
}

/// An open SST.
pub(crate) struct SstReader {
    file: Arc<dyn ReadableFile>,
    path: PathBuf,
    number: u64,
    /// The file's format version (older formats' blocks are re-encoded as they are read).
    version: u32,
    meta: SstMeta,
    index: Vec<IndexEntry>,
    /// Position in the file of each block's first version, and the file's version count last.
    starts: Vec<u64>,
    /// Each block's last key's first eight bytes (see [`key_prefix`]), so the block search runs
    /// over one compact array and reads whole keys only among blocks whose prefixes tie.
    fences: Fences,
    /// For each value column of the table, its position in this file's group.
    group_of: Vec<Option<usize>>,
    filter: Vec<u8>,
    cache: Arc<BlockCache>,
    /// The storage tier the file lives on (counted with its block reads).
    tier: u8,
    /// The file's access-histogram bucket.
    heat: Arc<Heat>,
    /// A row-group file: its reader, which serves point reads and assembles the blocks (its
    /// key pages with every column, see [`RowGroupReader::whole_rows`]).
    rows: Option<Arc<RowGroupReader>>,
    /// Each value column's zone map over the whole file, merged from the index on first use.
    column_zones: std::sync::OnceLock<Vec<Option<ZoneMap>>>,
}

/// Cache keys of assembled key pages: the key page's offset with the top bit set, so they never
/// meet the pages' own entries.
const ASSEMBLED: u64 = 1 << 63;

/// The first eight bytes of `key`, zero-padded, as a big-endian number. Prefixes order as the
/// keys do whenever they differ: two keys whose prefixes differ compare the same way as those.
fn key_prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// Fence keys searched by their first eight bytes: one compact array of prefixes, and whole
/// keys compared only among entries whose prefixes tie. The prefixes are searched in two steps,
/// first the last prefix of every segment of [`FENCE_SEGMENT`], then the one segment that holds
/// the answer: a search touches a few cache lines instead of one per halving (a point read
/// searches a file it has not touched for a while, so each is a miss).
pub(super) struct Fences {
    all: Vec<u64>,
    /// The last prefix of each segment.
    tops: Vec<u64>,
}

/// Prefixes per segment of [`Fences`]: two cache lines.
const FENCE_SEGMENT: usize = 16;

impl Fences {
    /// The fences of entries whose last keys are `last_keys`, in order.
    pub(super) fn new<'k>(last_keys: impl Iterator<Item = &'k [u8]>) -> Fences {
        let all: Vec<u64> = last_keys.map(key_prefix).collect();
        let tops = all.chunks(FENCE_SEGMENT).filter_map(|c| c.last().copied()).collect();
        Fences { all, tops }
    }

    /// Index of the first entry whose last key (`last_key(i)`) is `>= key`.
    pub(super) fn find<'k>(&self, key: &[u8], last_key: impl Fn(usize) -> &'k [u8]) -> usize {
        let p = key_prefix(key);
        // The first segment whose last prefix is not below `p` holds the first such prefix.
        let seg = self.tops.partition_point(|&f| f < p);
        let start = (seg * FENCE_SEGMENT).min(self.all.len());
        let end = (start + FENCE_SEGMENT).min(self.all.len());
        let lo = start + self.all[start..end].partition_point(|&f| f < p);
        let ties = self.all[lo..].partition_point(|&f| f == p);
        let (mut a, mut b) = (lo, lo + ties);
        while a < b {
            let m = a + (b - a) / 2;
            if last_key(m) < key {
                a = m + 1;
            } else {
                b = m;
            }
        }
        a
    }

    pub(super) fn memory(&self) -> usize {
        (self.all.capacity() + self.tops.capacity()) * 8
    }
}

#[cfg(test)]
mod fence_tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The two-step search finds what a search over every whole key finds, for fences with
    /// long ties of prefixes and keys of every length.
    #[test]
    fn fences_find_the_first_last_key_not_below_the_key() {
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for round in 0..300 {
            let n = rng.gen_range(0..100);
            let mut keys: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    let head = rng.gen_range(0..3u8);
                    let mut k = vec![head; rng.gen_range(0..10)];
                    k.extend((0..rng.gen_range(0..4)).map(|_| rng.gen_range(0..3u8)));
                    k
                })
                .collect();
            keys.sort();
            let fences = Fences::new(keys.iter().map(|k| k.as_slice()));
            for _ in 0..50 {
                let probe: Vec<u8> = (0..rng.gen_range(0..12)).map(|_| rng.gen_range(0..4u8)).collect();
                let want = keys.partition_point(|k| k.as_slice() < probe.as_slice());
                let got = fences.find(&probe, |i| &keys[i]);
                assert_eq!(got, want, "seed {seed} round {round}: probe {probe:?} in {keys:?}");
            }
        }
    }
}

/// Whether `handles` (ordered by offset) name framed blocks that lie inside a file of `len`
/// bytes without overlapping.
pub(crate) fn handles_apart(handles: &[BlockHandle], len: u64) -> bool {
    let mut free_from = 0;
    handles.iter().all(|h| {
        let fits = h.offset >= free_from && h.within(len);
        free_from = h.end().unwrap_or(u64::MAX);
        fits
    })
}

pub(crate) fn read_block_raw(file: &dyn ReadableFile, path: &Path, h: BlockHandle) -> Result<Vec<u8>> {
    let len = usize::try_from(h.size).map_err(|_| Error::corruption(path, h.offset, "block size out of range"))?;
    if !h.within(file.len()) {
        return Err(Error::corruption(path, h.offset, "block handle past end of file"));
    }
    read_scratch(file, h.offset, len + TRAILER_LEN, |raw| unframe_slice(path, h.offset, raw))
}

/// Calls `f` with the `len` bytes of `file` at `offset`, read into the calling thread's buffer,
/// which every read uses again: the blocks made of them allocate their own memory once (in the
/// decompression or the copy out) and never clear it first. Reads over [`SCRATCH_MAX`] bytes, and
/// a read that `f` itself makes, get a buffer of their own.
pub(crate) fn read_scratch<T>(
    file: &dyn ReadableFile,
    offset: u64,
    len: usize,
    f: impl FnOnce(&[u8]) -> Result<T>,
) -> Result<T> {
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut buf) if len <= SCRATCH_MAX => {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            let raw = &mut buf[..len];
            file.read_exact_at(offset, raw)?;
            f(raw)
        }
        _ => f(&file.read_at(offset, len)?),
    })
}

/// The most bytes a read takes through a thread's [`SCRATCH`] buffer.
const SCRATCH_MAX: usize = 1 << 20;

thread_local! {
    /// A thread's buffer for the blocks it reads.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Consecutive blocks of one file read at once (see [`SstReader::block_ahead`]).
pub(crate) struct ReadAhead {
    file: u64,
    blocks: std::ops::Range<usize>,
    offset: u64,
    bytes: Vec<u8>,
}

impl ReadAhead {
    /// Whether it holds block `i` of file `file`.
    pub(crate) fn covers(&self, file: u64, i: usize) -> bool {
        self.file == file && self.blocks.contains(&i)
    }
}

impl SstReader {
    /// Opens and validates a file's footer, meta, index and filter.
    pub(crate) fn open(
        fs: &dyn Fs,
        path: &Path,
        (number, tier, heat): (u64, u8, Arc<Heat>),
        cache: Arc<BlockCache>,
    ) -> Result<Arc<SstReader>> {
        let file = fs.open(path)?;
        let len = file.len();
        if len < FOOTER_LEN as u64 {
            return Err(Error::corruption(path, 0, "file too short to be an SST"));
        }
        let footer = file.read_at(len - FOOTER_LEN as u64, FOOTER_LEN)?;
        let (meta_h, version) = decode_footer(path, len, &footer)?;
        if is_row_group_format(version) {
            let rows = RowGroupReader::open(fs, path, (number, tier), cache.clone())?;
            // The bloom filter stays with the row-group reader (see `may_contain`).
            let WholeRows { meta, index } = rows.whole_rows();
            let parts = (meta, index, Vec::new());
            return Ok(Self::build((file, path, number, version), parts, cache, (tier, heat), Some(rows)));
        }
        if version > super::FORMAT_VERSION {
            return Err(Error::corruption(path, len - FOOTER_LEN as u64, format!("unknown SST format {version}")));
        }
        let bad = |off: u64| move |e: DecodeError| Error::corruption(path, off, e.0);
        let meta_raw = read_block_raw(file.as_ref(), path, meta_h)?;
        let meta = SstMeta::decode(&mut Reader::new(&meta_raw)).map_err(bad(meta_h.offset))?;
        let idx_raw = read_block_raw(file.as_ref(), path, meta.index)?;
        let index = decode_index(&idx_raw, &meta.types).map_err(bad(meta.index.offset))?;
        let filter = read_block_raw(file.as_ref(), path, meta.filter)?;
        if index.iter().map(|e| e.rows).sum::<u64>() != meta.entries {
            return Err(Error::corruption(path, meta.index.offset, "index row counts disagree with meta"));
        }
        // Blocks lie in the file apart and in index order (read-ahead spans rely on the order,
        // the block cache on distinct offsets).
        let handles: Vec<BlockHandle> = index.iter().map(|e| e.handle).collect();
        if !handles_apart(&handles, len) {
            return Err(Error::corruption(
                path,
                meta.index.offset,
                "block handles out of order or past the end of file",
            ));
        }
        Ok(Self::build((file, path, number, version), (meta, index, filter), cache, (tier, heat), None))
    }

    /// The reader of an opened file, given its meta, index and filter.
    fn build(
        (file, path, number, version): (Arc<dyn ReadableFile>, &Path, u64, u32),
        (meta, index, filter): (SstMeta, Vec<IndexEntry>, Vec<u8>),
        cache: Arc<BlockCache>,
        (tier, heat): (u8, Arc<Heat>),
        rows: Option<Arc<RowGroupReader>>,
    ) -> Arc<SstReader> {
        let starts = std::iter::once(0)
            .chain(index.iter().scan(0u64, |n, e| {
                *n += e.rows;
                Some(*n)
            }))
            .collect();
        let fences = Fences::new(index.iter().map(|e| e.last_key.as_slice()));
        let mut group_of = vec![None; meta.columns.iter().max().map_or(0, |&m| m + 1)];
        for (c, &vi) in meta.columns.iter().enumerate() {
            group_of[vi] = Some(c);
        }
        Arc::new(SstReader {
            file,
            path: path.to_owned(),
            number,
            version,
            meta,
            index,
            starts,
            fences,
            group_of,
            filter,
            cache,
            tier,
            heat,
            rows,
            column_zones: std::sync::OnceLock::new(),
        })
    }

    /// The types of the file's group's columns (those of [`Self::columns`]).
    pub(crate) fn group_types(&self) -> &[ColumnType] {
        &self.meta.types
    }

    /// The row-group reader of a row-group file.
    pub(crate) fn row_groups(&self) -> Option<&Arc<RowGroupReader>> {
        self.rows.as_ref()
    }

    /// Approximate bytes this open file holds in memory outside the block cache: its index (with
    /// one zone map per column per block), bloom filter and per-block arrays.
    pub(crate) fn memory(&self) -> usize {
        use std::mem::size_of;
        let index: usize =
            self.index.iter().map(|e| size_of::<IndexEntry>() + e.last_key.capacity() + e.zones.memory()).sum();
        index
            + self.rows.as_ref().map_or(0, |r| r.memory())
            + self.filter.capacity()
            + self.starts.capacity() * 8
            + self.fences.memory()
            + self.group_of.capacity() * size_of::<Option<usize>>()
    }

    /// The position of value column `vi` in this file's group, if the group holds it.
    pub(crate) fn group_column(&self, vi: usize) -> Option<usize> {
        self.group_of.get(vi).copied().flatten()
    }

    /// Value column `vi`'s zone map over the whole file (`None` when the file's group lacks the
    /// column), merged from the blocks' zone maps when first asked for and kept.
    pub(crate) fn column_zone(&self, vi: usize) -> Option<&ZoneMap> {
        let zones = self.column_zones.get_or_init(|| {
            (0..self.group_of.len())
                .map(|vi| {
                    let j = self.group_column(vi)?;
                    let mut zones = self.index.iter().filter_map(|e| e.zones.get(j));
                    let first = zones.next()?;
                    Some(zones.fold(first, |acc, z| acc.merge(&z)))
                })
                .collect()
        });
        zones.get(vi)?.as_ref()
    }

    /// The index: one entry per data block, in key order.
    pub(crate) fn index(&self) -> &[IndexEntry] {
        &self.index
    }

    pub(crate) fn num_blocks(&self) -> usize {
        self.index.len()
    }

    /// Position in the file of block `i`'s first version (versions count from 0 across blocks;
    /// `i == num_blocks()` gives the file's version count).
    pub(crate) fn first_row(&self, i: usize) -> u64 {
        self.starts.get(i).copied().unwrap_or(self.meta.entries)
    }

    /// Whether the bloom filter allows a key with hash `hash` (see [`bloom::key_hash`]).
    pub(crate) fn may_contain(&self, hash: u64) -> bool {
        if let Some(rows) = &self.rows {
            return rows.may_contain(hash);
        }
        bloom::may_contain(&self.filter, hash)
    }

    /// The file's smallest key.
    pub(crate) fn smallest(&self) -> &[u8] {
        &self.meta.smallest
    }

    /// The file number.
    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    /// The versions stored.
    pub(crate) fn entries(&self) -> u64 {
        self.meta.entries
    }

    /// Index of the first block whose last key is `>= key`.
    pub(crate) fn find_block(&self, key: &[u8]) -> usize {
        self.fences.find(key, |i| &self.index[i].last_key)
    }

    /// The file's access-histogram bucket.
    pub(crate) fn heat(&self) -> &Heat {
        &self.heat
    }

    /// Reads (through the cache) and decodes block `i`, with its key index built.
    pub(crate) fn block(&self, i: usize, fill_cache: bool) -> Result<Arc<Block>> {
        let b = self.load(i, fill_cache)?;
        // Cached by a point lookup, which builds no key index (the cache charged for it).
        b.build_index();
        Ok(b)
    }

    /// Block `i`'s keys, sequence numbers and kinds, as a block: block `i` itself, or a row-group
    /// file's key page alone (no columns assembled).
    pub(crate) fn key_block(&self, i: usize) -> Result<Arc<Block>> {
        match &self.rows {
            Some(rows) => rows.key_page(i),
            None => self.block(i, true),
        }
    }

    /// Block `i` and the versions of `key` in it (see [`Block::versions_of`]): borrowed from
    /// the cache under `pin`, else read from the file and cached without its key index.
    fn lookup<'g>(&self, i: usize, key: &[u8], pin: &'g CachePin<'_>) -> Result<(BlockRef<'g>, Versions)> {
        let cached = self.index.get(i).and_then(|e| self.cache.get_pinned(self.number, e.handle.offset, pin));
        let b = match cached {
            Some(b) => BlockRef::Cached(b),
            None => BlockRef::Read(self.load(i, true)?),
        };
        let versions = b.versions_of(key);
        Ok((b, versions))
    }

    /// Block `i` for a walk reading the file in order: from the cache, else from `ahead`, which
    /// is refilled with the blocks from `i` on, up to `ahead_bytes` of them (at least one), in
    /// one read. Compaction reads its inputs so: one positioning per span instead of one per
    /// block when reads of other files interleave on the device.
    pub(crate) fn block_ahead(
        &self,
        i: usize,
        ahead: &mut Option<ReadAhead>,
        ahead_bytes: u64,
        fill_cache: bool,
    ) -> Result<Arc<Block>> {
        if self.rows.is_some() {
            return self.block(i, fill_cache);
        }
        let from_span = |h: BlockHandle| -> Result<Vec<u8>> {
            if !ahead.as_ref().is_some_and(|a| a.covers(self.number, i)) {
                let end_of = |j: usize| self.index[j].handle.offset + self.index[j].handle.size + TRAILER_LEN as u64;
                let mut end = i + 1;
                while end < self.index.len() && end_of(end) - h.offset <= ahead_bytes {
                    end += 1;
                }
                if end_of(end - 1) > self.file.len() {
                    return Err(Error::corruption(&self.path, h.offset, "block handle past end of file"));
                }
                let len = usize::try_from(end_of(end - 1) - h.offset)
                    .map_err(|_| Error::corruption(&self.path, h.offset, "span out of range"))?;
                // The last span's buffer is read into again: a fresh one each mebibyte would be
                // allocated, zeroed and faulted in anew.
                let mut bytes = ahead.take().map(|a| a.bytes).unwrap_or_default();
                let want = len.max(usize::try_from(ahead_bytes.min(self.file.len())).unwrap_or(len));
                if bytes.capacity() < want {
                    bytes.reserve_exact(want - bytes.len());
                }
                bytes.resize(len, 0);
                self.file.read_exact_at(h.offset, &mut bytes)?;
                *ahead = Some(ReadAhead { file: self.number, blocks: i..end, offset: h.offset, bytes });
            }
            let raw = ahead.as_ref().and_then(|a| {
                let from = usize::try_from(h.offset.checked_sub(a.offset)?).ok()?;
                a.bytes.get(from..from.checked_add(usize::try_from(h.size).ok()?.checked_add(TRAILER_LEN)?)?)
            });
            let raw =
                raw.ok_or_else(|| Error::corruption(&self.path, h.offset, "block outside its read-ahead span"))?;
            unframe_slice(&self.path, h.offset, raw)
        };
        let b = self.load_from(i, fill_cache, from_span)?;
        b.build_index();
        Ok(b)
    }

    /// Block `i` from the cache, or read, checked (once: lookups in a cached block trust it)
    /// and, with `fill_cache`, cached without its key index.
    fn load(&self, i: usize, fill_cache: bool) -> Result<Arc<Block>> {
        self.load_from(i, fill_cache, |h| read_block_raw(self.file.as_ref(), &self.path, h))
    }

    /// [`Self::load`], the block's unframed bytes on a cache miss coming from `read`.
    fn load_from(
        &self,
        i: usize,
        fill_cache: bool,
        read: impl FnOnce(BlockHandle) -> Result<Vec<u8>>,
    ) -> Result<Arc<Block>> {
        let h = self.index[i].handle;
        if let Some(rows) = &self.rows {
            return self.assembled(rows, i, fill_cache, None);
        }
        if let Some(b) = self.cache.get(self.number, h.offset) {
            return Ok(b);
        }
        let content = read(h)?;
        self.cache.count_read(self.tier, h.size as usize + TRAILER_LEN);
        let block = self.decode_block(i, content)?;
        let block = Arc::new(block);
        if fill_cache {
            self.cache.insert(self.number, h.offset, block.clone());
        }
        Ok(block)
    }

    /// Block `i` of a row-group file, its key page assembled with every column (cached so with
    /// `fill_cache`); the pages it is made of read on a miss are kept in `held` if given, else
    /// cached.
    fn assembled(
        &self,
        rows: &RowGroupReader,
        i: usize,
        fill_cache: bool,
        held: Option<&mut HeldPages>,
    ) -> Result<Arc<Block>> {
        let h = self.index[i].handle;
        if let Some(b) = self.cache.get(self.number, h.offset | ASSEMBLED) {
            return Ok(b);
        }
        let block = rows.assemble(i, held)?;
        // Its key page was checked against the file's own index; a page going on with the
        // previous one's key is clean within itself but not as a whole-row block.
        check_against_index(&block, &self.index[i], false).map_err(|e| Error::corruption(&self.path, h.offset, e))?;
        let block = Arc::new(block);
        if fill_cache {
            self.cache.insert(self.number, h.offset | ASSEMBLED, block.clone());
        }
        Ok(block)
    }

    /// Block `i` for a walk that reads only value columns `cols` (ascending): the cached whole
    /// block if there is one, else a row-group file's key page assembled with just those of
    /// them the file holds, not cached (it serves this walk alone; the pages it is made of
    /// are), with where each value column sits in it (`None`: as in [`Self::group_column`]).
    pub(crate) fn block_columns(&self, i: usize, cols: &[usize]) -> Result<(Arc<Block>, Option<Placed>)> {
        let Some(rows) = &self.rows else { return Ok((self.block(i, true)?, None)) };
        let h = self.index[i].handle;
        if let Some(b) = self.cache.get(self.number, h.offset | ASSEMBLED) {
            b.build_index();
            return Ok((b, None));
        }
        let cols: Vec<usize> = cols.iter().copied().filter(|&vi| self.group_column(vi).is_some()).collect();
        let block = rows.assemble_columns(i, &cols)?;
        check_against_index(&block, &self.index[i], false).map_err(|e| Error::corruption(&self.path, h.offset, e))?;
        let block = Arc::new(block);
        block.build_index();
        let mut placed = vec![None; self.group_of.len()];
        for (j, &vi) in cols.iter().enumerate() {
            placed[vi] = Some(j);
        }
        Ok((block, Some(placed.into())))
    }

    /// Block `i` for a walk in order that leaves the cache as it is (compaction): as
    /// [`Self::block`] without filling the cache, the pages of a row-group file it reads kept in
    /// `held` for the blocks after it.
    pub(crate) fn block_held(&self, i: usize, held: &mut HeldPages) -> Result<Arc<Block>> {
        let Some(rows) = &self.rows else { return self.block(i, false) };
        let b = self.assembled(rows, i, false, Some(held))?;
        b.build_index();
        Ok(b)
    }

    /// Decodes block `i`'s unframed content and checks it against the index.
    fn decode_block(&self, i: usize, content: Vec<u8>) -> Result<Block> {
        let h = self.index[i].handle;
        let block = Block::decode_format(content, &self.meta.types, self.version)
            .map_err(|e| Error::corruption(&self.path, h.offset, e.0))?;
        if !block.has_keys() {
            return Err(Error::corruption(&self.path, h.offset, "a data block without keys"));
        }
        check_against_index(&block, &self.index[i], true).map_err(|e| Error::corruption(&self.path, h.offset, e))?;
        Ok(block)
    }

    /// The value columns this file's group stores.
    pub(crate) fn columns(&self) -> &[usize] {
        &self.meta.columns
    }

    /// The cover of this file's versions in a table of `nvals` value columns: `None` when it
    /// stores whole rows.
    pub(crate) fn cover(&self, nvals: usize) -> Option<&[usize]> {
        (self.meta.columns.len() < nvals).then_some(&self.meta.columns[..])
    }

    /// Feeds the versions of `key` at or below `snapshot` (newest first) to `res`. Returns early
    /// (without IO) when the key is outside the file or the bloom filter excludes it. Returns
    /// whether the file held a version of the key. Cached blocks are borrowed under `pin`.
    // The read's inputs, what it resolved so far and the pin: one more than clippy likes.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get(
        &self,
        key: &[u8],
        hash: u64,
        snapshot: u64,
        nvals: usize,
        wanted: Option<&[bool]>,
        res: &mut Resolver,
        pin: &CachePin<'_>,
    ) -> Result<Lookup> {
        if let Some(rows) = &self.rows {
            return rows.get(key, hash, snapshot, wanted, res, pin);
        }
        if key < self.meta.smallest.as_slice() || key > self.meta.largest.as_slice() {
            return Ok(Lookup::Outside);
        }
        if !bloom::may_contain(&self.filter, hash) {
            return Ok(Lookup::Filtered);
        }
        let bi = self.find_block(key);
        if bi >= self.index.len() {
            return Ok(Lookup::Probed(false));
        }
        let (b, (first, seqs)) = self.lookup(bi, key, pin)?;
        let cover = self.cover(nvals);
        let mut found = false;
        for (i, &seq) in (first..).zip(&seqs) {
            if res.is_settled() {
                break;
            }
            if seq <= snapshot {
                // Only the columns the read still lacks are decoded.
                let wants = |vi: usize| wanted.is_none_or(|w| w.get(vi).copied().unwrap_or(false));
                let cell = |vi: usize| self.group_column(vi).filter(|_| wants(vi)).and_then(|c| b.cell(i, c));
                res.push_with(b.kind(i), cover, cell);
                found = true;
            }
        }
        Ok(Lookup::Probed(found))
    }

    /// Reads every block, checking checksums and structure. Returns the number of blocks.
    pub(crate) fn verify(&self) -> Result<usize> {
        if let Some(rows) = &self.rows {
            return rows.verify();
        }
        for i in 0..self.index.len() {
            let h = self.index[i].handle;
            let content = read_block_raw(self.file.as_ref(), &self.path, h)?;
            self.decode_block(i, content)?;
        }
        Ok(self.index.len())
    }
}

/// A decoded block must agree with what the index says about it (`exact_clean`: also whether
/// it is clean, else only that the index calls it clean no more often than it is).
fn check_against_index(b: &Block, e: &IndexEntry, exact_clean: bool) -> std::result::Result<(), &'static str> {
    if b.len() as u64 != e.rows {
        return Err("block row count disagrees with index");
    }
    let clean_agrees = if exact_clean { b.is_clean() == e.clean } else { b.is_clean() || !e.clean };
    if !clean_agrees || b.max_seq() != e.max_seq {
        return Err("block contents disagree with index");
    }
    Ok(())
}

fn decode_index(b: &[u8], types: &[ColumnType]) -> DecodeResult<Vec<IndexEntry>> {
    let shared: Arc<[ColumnType]> = types.into();
    let mut r = Reader::new(b);
    let n = r.len(b.len())?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let last_key = r.bytes()?.to_vec();
        let handle = BlockHandle::decode(&mut r)?;
        let rows = r.varint()?;
        let min_seq = r.varint()?;
        let max_seq = r.varint()?;
        let flags = r.u8()?;
        if flags & !BLOCK_CLEAN != 0 {
            return Err(DecodeError::new("unknown block flags"));
        }
        let zones = Zones::decode(shared.clone(), &mut r)?;
        let clean = flags & BLOCK_CLEAN != 0;
        out.push(IndexEntry { last_key, handle, rows, min_seq, max_seq, clean, continues: false, zones });
    }
    if !r.is_empty() {
        return Err(DecodeError::new("trailing bytes in index"));
    }
    if out.windows(2).any(|w| w[0].last_key >= w[1].last_key) {
        return Err(DecodeError::new("index fence keys out of order"));
    }
    Ok(out)
}

/// Where each value column sits in a block assembled with some columns alone, if there.
pub(crate) type Placed = Arc<[Option<usize>]>;

/// Encodes the versions of one file's blocks as rows over all of a table's value columns,
/// carrying the file's columns that are wanted.
pub(crate) struct RowEncoder {
    value_types: Arc<[ColumnType]>,
    /// For each value column, its column in the file's group.
    group_of: Arc<[Option<usize>]>,
    wanted: Option<Arc<[bool]>>,
    cover: Cover,
    /// The length of the row last encoded: the next one is allocated that large up front.
    row_hint: usize,
}

impl RowEncoder {
    /// An encoder for the blocks of `reader` over `value_types`, carrying the `wanted` ones
    /// (all by default).
    pub(crate) fn new(reader: &SstReader, value_types: Arc<[ColumnType]>, wanted: Option<Arc<[bool]>>) -> Self {
        let group_of = (0..value_types.len()).map(|vi| reader.group_column(vi)).collect();
        let cover = reader.cover(value_types.len()).map(Arc::from);
        RowEncoder { value_types, group_of, wanted, cover, row_hint: 0 }
    }

    /// Version `i` of block `b`.
    pub(crate) fn entry(&mut self, b: &Block, i: usize) -> Entry {
        self.entry_placed(b, i, None)
    }

    /// Version `i` of block `b`, whose value columns sit where `placed` says if given (a block
    /// assembled with some columns alone, see [`SstReader::block_columns`]).
    pub(crate) fn entry_placed(&mut self, b: &Block, i: usize, placed: Option<&[Option<usize>]>) -> Entry {
        let kind = b.kind(i);
        let mut row = Vec::new();
        if kind != Kind::Delete {
            row.reserve(self.row_hint);
            let wanted = self.wanted.as_deref();
            let group_of = placed.unwrap_or(&self.group_of);
            let cell = |vi: usize| match group_of.get(vi).copied().flatten() {
                Some(c) if wanted.is_none_or(|w| w.get(vi).copied().unwrap_or(false)) => b.raw_cell(i, c),
                _ => RawCell::Absent,
            };
            encode_raw_row(&self.value_types, (0..self.value_types.len()).map(cell), &mut row);
            self.row_hint = row.len();
        }
        Entry::new(b.key(i).to_vec(), b.seq(i), kind, row, self.cover.clone())
    }

    /// Version `i` of block `b` like [`Self::entry`], but a full row is not encoded: it names
    /// its place in the block instead (see [`Entry::materialize`]). Only without a `wanted` set.
    pub(crate) fn entry_in_place(&mut self, b: &Arc<Block>, i: usize) -> Entry {
        if b.kind(i) != Kind::Put || self.wanted.is_some() {
            return self.entry(b, i);
        }
        let mut e = Entry::new(b.key(i).to_vec(), b.seq(i), Kind::Put, Vec::new(), self.cover.clone());
        e.stored = Some(Stored { block: b.clone(), row: i, group_of: self.group_of.clone() });
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sst::builder::{SstBuilder, SstOptions};
    use crate::sst::format::Compression;
    use crate::types::row::{decode_row, encode_row, Cells};
    use crate::types::Value;
    use crate::vfs::FaultFs;

    const TYPES: [ColumnType; 2] = [ColumnType::BigInt, ColumnType::Text];

    /// A read through the thread's buffer made while another holds it, or larger than the
    /// buffer takes, gets a buffer of its own: both see their own bytes.
    #[test]
    fn reads_within_reads_get_their_own_buffers() {
        let fs = FaultFs::new();
        let path = Path::new("/r/x");
        let data: Vec<u8> = (0..(SCRATCH_MAX + 64) as u32).map(|i| (i % 251) as u8).collect();
        let mut w = fs.create(path).unwrap();
        w.append(&data).unwrap();
        w.sync().unwrap();
        let file = fs.open(path).unwrap();
        let got = read_scratch(file.as_ref(), 3, 100, |outer| {
            let inner = read_scratch(file.as_ref(), 1000, 50, |b| Ok(b.to_vec()))?;
            let big = read_scratch(file.as_ref(), 0, SCRATCH_MAX + 64, |b| Ok(b.to_vec()))?;
            Ok((outer.to_vec(), inner, big))
        })
        .unwrap();
        assert_eq!(got, (data[3..103].to_vec(), data[1000..1050].to_vec(), data));
        assert!(read_scratch(file.as_ref(), SCRATCH_MAX as u64, 100, |_| Ok(())).unwrap_err().is_corruption());
    }

    fn entry(key: Vec<u8>, seq: u64, kind: Kind, cells: Cells) -> Entry {
        let mut row = Vec::new();
        encode_row(&TYPES, &cells, &mut row);
        Entry::new(key, seq, kind, row, None)
    }

    fn build(fs: &FaultFs, path: &Path, n: u32) {
        let opts = SstOptions { block_size: 512, compression: Compression::Lz4, bloom_bits_per_key: 10 };
        let f = fs.create(path).unwrap();
        let mut b = SstBuilder::new(f, path.to_owned(), opts, 3, 0, vec![0, 1], TYPES.into());
        for i in 0..n {
            let key = (i * 2).to_be_bytes().to_vec();
            let new = vec![None, Some(Value::Text(format!("new{i}")))];
            b.add(&entry(key.clone(), 100 + u64::from(i), Kind::Update, new)).unwrap();
            let old = vec![Some(Value::BigInt(i64::from(i))), Some(Value::Text("old".into()))];
            b.add(&entry(key, u64::from(i), Kind::Put, old)).unwrap();
        }
        b.finish(7).unwrap();
    }

    #[test]
    fn point_lookups_cursor_and_corruption() {
        let fs = FaultFs::new();
        let p = Path::new("/d/000007.sst");
        build(&fs, p, 2000);
        let cache = Arc::new(BlockCache::new(1 << 20));
        let r = SstReader::open(&fs, p, (7, 0, Arc::default()), cache.clone()).unwrap();
        assert!(r.num_blocks() > 10);
        let pin = cache.pin();
        for i in [0u32, 1, 999, 1999] {
            let key = (i * 2).to_be_bytes();
            let mut res = Resolver::new(2, None);
            r.get(&key, bloom::key_hash(&key), u64::MAX, 2, None, &mut res, &pin).unwrap();
            assert_eq!(
                res.finish(),
                Some(vec![Some(Value::BigInt(i64::from(i))), Some(Value::Text(format!("new{i}")))])
            );
            let mut res = Resolver::new(2, None);
            r.get(&key, bloom::key_hash(&key), u64::from(i), 2, None, &mut res, &pin).unwrap();
            assert_eq!(res.finish(), Some(vec![Some(Value::BigInt(i64::from(i))), Some(Value::Text("old".into()))]));
            let odd = (i * 2 + 1).to_be_bytes();
            let mut res = Resolver::new(2, None);
            r.get(&odd, bloom::key_hash(&odd), u64::MAX, 2, None, &mut res, &pin).unwrap();
            assert_eq!(res.finish(), None);
        }
        let mut enc = RowEncoder::new(&r, TYPES.into(), None);
        let lower = 100u32.to_be_bytes();
        let mut entries = Vec::new();
        for bi in r.find_block(&lower)..r.num_blocks() {
            let b = r.block(bi, false).unwrap();
            entries.extend((b.seek(&lower)..b.len()).map(|i| enc.entry(&b, i)));
        }
        let mut n = 0;
        for e in entries {
            assert!(e.key.as_slice() >= &100u32.to_be_bytes()[..]);
            let cells = decode_row(&TYPES, &e.row, None).unwrap();
            let i = u32::from_be_bytes(e.key[..4].try_into().unwrap()) / 2;
            let want = match e.kind {
                Kind::Update => vec![None, Some(Value::Text(format!("new{i}")))],
                _ => vec![Some(Value::BigInt(i64::from(i))), Some(Value::Text("old".into()))],
            };
            assert_eq!(cells, want);
            n += 1;
        }
        assert_eq!(n, 2 * (2000 - 50));
        assert_eq!(r.verify().unwrap(), r.num_blocks());

        // Flip a byte anywhere: open or verify reports corruption naming the file.
        let len = fs.file_len(p).unwrap();
        for off in (0..len).step_by(97) {
            let q = Path::new("/d/000008.sst");
            build(&fs, q, 2000);
            fs.flip_bit(q, off, 5).unwrap();
            let err = SstReader::open(&fs, q, (8, 0, Arc::default()), Arc::new(BlockCache::new(0)))
                .and_then(|r| r.verify())
                .unwrap_err();
            assert!(err.is_corruption() && err.to_string().contains("000008.sst"), "offset {off}: {err}");
        }
    }

    /// Keys of many lengths sharing long prefixes (so block fences tie on their first eight
    /// bytes, and some keys are prefixes of others): the block search agrees with a search over
    /// whole keys for every probe.
    #[test]
    fn block_search_agrees_with_whole_keys_when_prefixes_tie() {
        let fs = FaultFs::new();
        let p = Path::new("/d/000009.sst");
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for i in 0..600u32 {
            let mut k = b"prefix".to_vec();
            k.extend(std::iter::repeat_n(0u8, (i % 5) as usize));
            k.extend_from_slice(&(i / 3).to_be_bytes()[2..]);
            keys.push(k);
        }
        keys.extend((0..40u8).map(|i| vec![i; 1 + (i % 9) as usize]));
        keys.sort();
        keys.dedup();
        let opts = SstOptions { block_size: 256, compression: Compression::None, bloom_bits_per_key: 10 };
        let mut b = SstBuilder::new(fs.create(p).unwrap(), p.to_owned(), opts, 3, 0, vec![0, 1], TYPES.into());
        for (i, k) in keys.iter().enumerate() {
            b.add(&entry(k.clone(), i as u64 + 1, Kind::Put, vec![Some(Value::BigInt(1)), Some(Value::Null)])).unwrap();
        }
        b.finish(9).unwrap();
        let r = SstReader::open(&fs, p, (9, 0, Arc::default()), Arc::new(BlockCache::new(0))).unwrap();
        assert!(r.num_blocks() > 20);
        let mut probes = keys.clone();
        for k in &keys {
            let mut longer = k.clone();
            longer.push(0);
            probes.push(longer);
            probes.push(k[..k.len() - 1].to_vec());
        }
        for k in &probes {
            let want = r.index().partition_point(|e| e.last_key.as_slice() < k.as_slice());
            assert_eq!(r.find_block(k), want, "{k:?}");
        }
    }
}
