//! A place in one sorted run — its files in key order — as (file, block, row), moving forward
//! only. The row merge's run sources, the scan driver's group cursors and the marking probes all
//! walk runs through it: a file is opened when the walk reaches it, a block is read when a row
//! of it is asked for, and seeking a key near the current row gallops instead of searching the
//! block again.

use std::sync::Arc;

use super::block::Block;
use super::reader::{Placed, ReadAhead, SstReader};
use super::rowgroup::HeldPages;
use super::table_cache::TableCache;
use crate::error::Result;
use crate::version::FileMeta;

/// How many blocks past the last one read a dense walk's next read may lie (see
/// [`RunCursor::read_ahead_when_dense`]).
const DENSE_GAP: usize = 2;

/// A forward cursor over a sorted run.
pub(crate) struct RunCursor {
    files: Vec<Arc<FileMeta>>,
    /// The current file (`files.len()` past the end).
    fi: usize,
    reader: Option<Arc<SstReader>>,
    /// The current block of `reader`.
    bi: usize,
    /// Block `bi`, once read.
    block: Option<Arc<Block>>,
    /// The current row of `block`.
    row: usize,
    fill_cache: bool,
    /// Files whose every version is newer than this are passed over (the snapshot filter).
    snapshot: u64,
    /// Files whose smallest key is at or above this are treated as past the end.
    upper: Option<Vec<u8>>,
    /// Blocks read so far.
    loaded: u64,
    /// Read-ahead (0: block by block), whether only once the walk reads blocks close together,
    /// its span, and the last block read from a file (file, block).
    ahead_bytes: u64,
    ahead_when_dense: bool,
    ahead: Option<ReadAhead>,
    last_read: Option<(usize, usize)>,
    /// Without `fill_cache`: the row-group pages the walk reads, kept for the blocks after.
    held: HeldPages,
    /// The value columns the walk reads (ascending), if not all: a row-group file's blocks are
    /// then assembled with those alone ([`SstReader::block_columns`]).
    columns: Option<Arc<[usize]>>,
    /// Where the current block holds each value column, when assembled with `columns`.
    placed: Option<Placed>,
}

impl RunCursor {
    /// A cursor before the first file of `files` (one run, key-ordered); `fill_cache`: blocks
    /// read go into the block cache.
    pub(crate) fn new(files: Vec<Arc<FileMeta>>, fill_cache: bool) -> Self {
        RunCursor {
            files,
            fi: 0,
            reader: None,
            bi: 0,
            block: None,
            row: 0,
            fill_cache,
            snapshot: u64::MAX,
            upper: None,
            loaded: 0,
            ahead_bytes: 0,
            ahead_when_dense: false,
            ahead: None,
            last_read: None,
            held: HeldPages::default(),
            columns: None,
            placed: None,
        }
    }

    /// Reads only value columns `columns` (ascending) where a block is assembled from a
    /// row-group file's pages (see [`Self::placed`]).
    pub(crate) fn columns(mut self, columns: Arc<[usize]>) -> Self {
        self.columns = Some(columns);
        self
    }

    /// Where the current block holds each value column, when it was assembled with the walk's
    /// columns alone (`None`: where its file says).
    pub(crate) fn placed(&self) -> Option<&[Option<usize>]> {
        self.placed.as_deref()
    }

    /// Reads blocks not in the cache up to `bytes` at a time (see [`SstReader::block_ahead`]).
    pub(crate) fn read_ahead(mut self, bytes: u64) -> Self {
        self.ahead_bytes = bytes;
        self
    }

    /// [`Self::read_ahead`] once the walk reads a block at most [`DENSE_GAP`] blocks after
    /// the one it read before from the same file (as an operating system's read-ahead starts on
    /// sequential reads): probes of keys far apart read single blocks.
    pub(crate) fn read_ahead_when_dense(mut self, bytes: u64) -> Self {
        self.ahead_bytes = bytes;
        self.ahead_when_dense = true;
        self
    }

    /// Passes over files a read at `seq` cannot see any version of.
    pub(crate) fn skip_newer_than(mut self, seq: u64) -> Self {
        self.snapshot = seq;
        self
    }

    /// Ends the run before the first file starting at or above `upper`.
    pub(crate) fn until(mut self, upper: Option<&[u8]>) -> Self {
        self.upper = upper.map(<[u8]>::to_vec);
        self
    }

    pub(crate) fn files(&self) -> &[Arc<FileMeta>] {
        &self.files
    }

    /// The open file, if any.
    pub(crate) fn file(&self) -> Option<&Arc<FileMeta>> {
        self.reader.as_ref().and(self.files.get(self.fi))
    }

    pub(crate) fn reader(&self) -> Option<&Arc<SstReader>> {
        self.reader.as_ref()
    }

    /// The current block's index in the open file.
    pub(crate) fn block_index(&self) -> usize {
        self.bi
    }

    /// The current block, if read.
    pub(crate) fn block(&self) -> Option<&Arc<Block>> {
        self.block.as_ref()
    }

    pub(crate) fn row(&self) -> usize {
        self.row
    }

    /// Moves to row `row` of the current block.
    pub(crate) fn set_row(&mut self, row: usize) {
        self.row = row;
    }

    /// Blocks read so far.
    pub(crate) fn blocks_loaded(&self) -> u64 {
        self.loaded
    }

    /// Whether file `fi` lies past the run's end.
    fn past_end(&self, fi: usize) -> bool {
        match self.files.get(fi) {
            None => true,
            Some(f) => self.upper.as_deref().is_some_and(|u| f.smallest.as_slice() >= u),
        }
    }

    /// Opens file `fi` or the first after it the snapshot filter lets through; closes
    /// everything at the run's end.
    fn open_from(&mut self, tables: &TableCache, mut fi: usize) -> Result<()> {
        self.block = None;
        self.row = 0;
        self.bi = 0;
        while !self.past_end(fi) && self.files[fi].min_seq > self.snapshot {
            tables.probes.add(1, 0, 0);
            fi += 1;
        }
        self.fi = fi;
        self.reader = if self.past_end(fi) { None } else { Some(tables.get(self.files[fi].number)?) };
        Ok(())
    }

    /// Opens the first file (from the current one on) whose largest key is `>= key`. False when
    /// there is none.
    pub(crate) fn open_file_for(&mut self, tables: &TableCache, key: &[u8]) -> Result<bool> {
        let mut fi = self.fi;
        while self.files.get(fi).is_some_and(|f| f.largest.as_slice() < key) {
            fi += 1;
        }
        if fi != self.fi || self.reader.is_none() {
            if self.past_end(fi) {
                self.fi = fi;
                self.reader = None;
                self.block = None;
                return Ok(false);
            }
            self.open_from(tables, fi)?;
        }
        Ok(self.reader.is_some())
    }

    /// Whether the current block holds keys at or above `key` (so a seek stays in it).
    pub(crate) fn block_reaches(&self, key: &[u8]) -> bool {
        match (&self.reader, &self.block) {
            (Some(r), Some(_)) => r.index().get(self.bi).is_some_and(|e| key <= e.last_key.as_slice()),
            _ => false,
        }
    }

    /// Moves to the first version with key `>= key`, never backwards; reads its block. At the
    /// end of the run, no block is current.
    pub(crate) fn seek(&mut self, tables: &TableCache, key: &[u8]) -> Result<()> {
        if !self.block_reaches(key) {
            self.seek_block(tables, key)?;
            self.load()?;
        }
        if let Some(b) = &self.block {
            self.row = seek_from(b, self.row, key);
        }
        Ok(())
    }

    /// Moves to the block that may hold `key` (never backwards) without reading it: a walk over
    /// index entries. At the end of the run, no file is open.
    pub(crate) fn seek_block(&mut self, tables: &TableCache, key: &[u8]) -> Result<()> {
        if !self.open_file_for(tables, key)? {
            return Ok(());
        }
        let Some(r) = &self.reader else { return Ok(()) };
        let from = self.bi.min(r.num_blocks());
        let bi = from + r.index()[from..].partition_point(|e| e.last_key.as_slice() < key);
        if bi != self.bi {
            self.bi = bi;
            self.block = None;
            self.row = 0;
        }
        self.skip_empty(tables)
    }

    /// Moves to the next block without reading it (the next file's first block at a file's
    /// end). At the end of the run, no file is open.
    pub(crate) fn skip_block(&mut self, tables: &TableCache) -> Result<()> {
        self.bi += 1;
        self.block = None;
        self.row = 0;
        self.skip_empty(tables)
    }

    /// Past the open file's last block: opens the next file (at its first block).
    fn skip_empty(&mut self, tables: &TableCache) -> Result<()> {
        while self.reader.as_ref().is_some_and(|r| self.bi >= r.num_blocks()) {
            self.open_from(tables, self.fi + 1)?;
        }
        Ok(())
    }

    /// Moves to the first row of the next block (the next file's first block at a file's end);
    /// at the end of the run, no block is current.
    pub(crate) fn next_block(&mut self, tables: &TableCache) -> Result<()> {
        self.row = 0;
        self.bi += 1;
        loop {
            match &self.reader {
                Some(r) if self.bi < r.num_blocks() => return self.load(),
                Some(_) => self.open_from(tables, self.fi + 1)?,
                None => {
                    self.block = None;
                    return Ok(());
                }
            }
        }
    }

    /// Reads block `bi` of the open file (none past its end), at its first row.
    fn load(&mut self) -> Result<()> {
        self.block = None;
        self.placed = None;
        self.row = 0;
        if let Some(r) = &self.reader {
            if self.bi < r.num_blocks() {
                self.loaded += 1;
                let near = |(fi, bi): (usize, usize)| fi == self.fi && self.bi > bi && self.bi - bi <= DENSE_GAP;
                let ahead = self.ahead_bytes > 0
                    && (!self.ahead_when_dense
                        || self.last_read.is_some_and(near)
                        || self.ahead.as_ref().is_some_and(|a| a.covers(r.number(), self.bi)));
                self.last_read = Some((self.fi, self.bi));
                let columns = self.columns.as_deref().filter(|_| self.fill_cache && !ahead && r.row_groups().is_some());
                self.block = Some(if let Some(cols) = columns {
                    let (b, placed) = r.block_columns(self.bi, cols)?;
                    self.placed = placed;
                    b
                } else if !self.fill_cache && r.row_groups().is_some() {
                    r.block_held(self.bi, &mut self.held)?
                } else if ahead {
                    r.block_ahead(self.bi, &mut self.ahead, self.ahead_bytes, self.fill_cache)?
                } else {
                    r.block(self.bi, self.fill_cache)?
                });
            }
        }
        Ok(())
    }
}

/// The first version at or after `from` whose key is `>= key` (galloping: close keys are found
/// in a few steps, far ones by binary search).
pub(crate) fn seek_from(b: &Block, from: usize, key: &[u8]) -> usize {
    let n = b.len();
    if from >= n || b.key(from) >= key {
        return from.min(n);
    }
    let (mut lo, mut step) = (from, 1);
    while lo + step < n && b.key(lo + step) < key {
        lo += step;
        step *= 2;
    }
    // key(lo) < key <= key(hi) (or hi = n).
    let mut hi = (lo + step).min(n);
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        if b.key(mid) < key {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::mvcc::{Entry, Kind};
    use crate::sst::builder::{SstBuilder, SstOptions};
    use crate::sst::cache::BlockCache;
    use crate::sst::format::Compression;
    use crate::vfs::{FaultFs, Fs};

    /// Every version of a run: (key, sequence number), in order.
    type Versions = Vec<(Vec<u8>, u64)>;

    /// A run of `files` files of ascending keys (4-byte, even), each file's versions at one
    /// sequence number (file i at i + 1). Returns the run and its versions.
    fn build_run(fs: &Arc<FaultFs>, rng: &mut StdRng, files: u32) -> (Vec<Arc<FileMeta>>, Versions) {
        let mut metas = Vec::new();
        let mut all = Vec::new();
        let mut k = 0u32;
        for n in 1..=u64::from(files) {
            let path = format!("/d/{n:06}.sst");
            let opts = SstOptions { block_size: 256, compression: Compression::None, bloom_bits_per_key: 10 };
            let f = fs.create(Path::new(&path)).unwrap();
            let mut b = SstBuilder::new(f, path.clone().into(), opts, 1, 0, Vec::new(), Arc::from(Vec::new()));
            for _ in 0..rng.gen_range(1..200) {
                k += rng.gen_range(1..4) * 2;
                let key = k.to_be_bytes().to_vec();
                b.add(&Entry::new(key.clone(), n, Kind::Put, vec![], None)).unwrap();
                all.push((key, n));
            }
            metas.push(Arc::new(b.finish(n).unwrap()));
        }
        (metas, all)
    }

    #[test]
    fn seeks_and_walks_a_run_like_a_sorted_list() {
        for seed in [1u64, 2, 3, 4] {
            let mut rng = StdRng::seed_from_u64(seed);
            let fs = Arc::new(FaultFs::new());
            let (files, all) = build_run(&fs, &mut rng, 6);
            let tables = TableCache::new(
                fs.clone(),
                vec![Path::new("/d").to_path_buf()],
                Arc::new(BlockCache::new(1 << 20)),
                std::time::Duration::ZERO,
            );
            // Files at sequence numbers above `snapshot` are passed over.
            let snapshot = rng.gen_range(1..=6u64);
            let visible: Vec<&(Vec<u8>, u64)> = all.iter().filter(|(_, s)| *s <= snapshot).collect();
            let mut c = RunCursor::new(files.clone(), false).skip_newer_than(snapshot);
            let max = u32::from_be_bytes(all[all.len() - 1].0[..4].try_into().unwrap());
            let mut at = 0u32;
            while at <= max + 2 {
                at += rng.gen_range(0..40);
                let key = at.to_be_bytes();
                c.seek(&tables, &key).unwrap();
                let want = visible.iter().find(|(k, _)| k.as_slice() >= &key[..]);
                let got = c.block().filter(|b| c.row() < b.len()).map(|b| b.key(c.row()).to_vec());
                assert_eq!(got.as_ref(), want.map(|(k, _)| k), "seed {seed}: seek {at}");
                // Walking on from there by blocks visits the rest in order.
                if rng.gen_bool(0.2) {
                    let mut walk = RunCursor::new(files.clone(), false).skip_newer_than(snapshot);
                    walk.seek(&tables, &key).unwrap();
                    let mut seen = Vec::new();
                    while let Some(b) = walk.block() {
                        seen.extend((walk.row()..b.len()).map(|i| b.key(i).to_vec()));
                        walk.next_block(&tables).unwrap();
                    }
                    let rest: Vec<Vec<u8>> =
                        visible.iter().filter(|(k, _)| k.as_slice() >= &key[..]).map(|(k, _)| k.clone()).collect();
                    assert_eq!(seen, rest, "seed {seed}: walk from {at}");
                }
            }
            // The index walk meets every block of the run once, in order, without reading one.
            let mut walk = RunCursor::new(files.clone(), false);
            walk.seek_block(&tables, &[]).unwrap();
            let mut fences = Vec::new();
            while let Some(r) = walk.reader() {
                fences.push(r.index()[walk.block_index()].last_key.clone());
                walk.skip_block(&tables).unwrap();
            }
            let want: usize = files.iter().map(|f| tables.get(f.number).unwrap().num_blocks()).sum();
            assert_eq!(fences.len(), want, "seed {seed}");
            assert!(fences.windows(2).all(|w| w[0] < w[1]), "seed {seed}");
            assert_eq!(fences.last(), all.last().map(|(k, _)| k), "seed {seed}");
            assert_eq!(walk.blocks_loaded(), 0);
            // A run ending before the third file's smallest key stops there.
            let upper = files[2].smallest.clone();
            let mut c = RunCursor::new(files.clone(), false).until(Some(&upper));
            c.seek(&tables, &[]).unwrap();
            let mut last = None;
            while let Some(b) = c.block() {
                last = b.len().checked_sub(1).map(|i| b.key(i).to_vec());
                c.next_block(&tables).unwrap();
            }
            assert_eq!(last.as_ref(), Some(&files[1].largest), "seed {seed}");
        }
    }

    /// Read-ahead changes how many reads reach the file, never what a walk sees: a whole walk
    /// reads spans; a dense one reads spans once its blocks come close together and single
    /// blocks for probes far apart.
    #[test]
    fn read_ahead_reads_spans_only_where_the_walk_is_dense() {
        use crate::vfs::{DeviceProfile, SlowFs};
        let mut rng = StdRng::seed_from_u64(7);
        let fault = Arc::new(FaultFs::new());
        let (files, all) = build_run(&fault, &mut rng, 12);
        let profile = DeviceProfile { read_latency: Duration::from_micros(1), bandwidth: 1 << 30, channels: 64 };
        let fs = Arc::new(SlowFs::new(fault.clone(), [(Path::new("/d").to_path_buf(), profile)]));
        let device = fs.device(Path::new("/d")).expect("slowed").clone();
        let tables =
            TableCache::new(fs, vec![Path::new("/d").to_path_buf()], Arc::new(BlockCache::new(0)), Duration::ZERO);
        let blocks: usize = files.iter().map(|f| tables.get(f.number).unwrap().num_blocks()).sum();
        let reads = |c: RunCursor, keys: &[Vec<u8>]| {
            let (mut c, before) = (c, device.ops());
            let mut seen = Vec::new();
            for k in keys {
                c.seek(&tables, k).unwrap();
                seen.push(c.block().filter(|b| c.row() < b.len()).map(|b| b.key(c.row()).to_vec()));
            }
            (seen, device.ops() - before)
        };
        let every: Vec<Vec<u8>> = all.iter().map(|(k, _)| k.clone()).collect();
        let plain = reads(RunCursor::new(files.clone(), false), &every);
        assert_eq!(plain.1 as usize, blocks, "block by block: one read per block");
        let whole = reads(RunCursor::new(files.clone(), false).read_ahead(1024), &every);
        let dense = reads(RunCursor::new(files.clone(), false).read_ahead_when_dense(1024), &every);
        assert_eq!((&whole.0, &dense.0), (&plain.0, &plain.0));
        assert!(whole.1 * 2 < plain.1 && dense.1 * 3 < plain.1 * 2, "{} {} {}", plain.1, whole.1, dense.1);
        // Keys more than a span apart: one read each when dense-only.
        let sparse: Vec<Vec<u8>> = every.iter().step_by(150).cloned().collect();
        let plain = reads(RunCursor::new(files.clone(), false), &sparse);
        let dense = reads(RunCursor::new(files.clone(), false).read_ahead_when_dense(1024), &sparse);
        assert!(plain.1 >= 4, "{}", plain.1);
        assert_eq!(dense, plain);
    }
}
