//! Writing a row-group file from versions in key order: key pages and each group's pages cut
//! at the shape's row counts, then the filter, index, meta block and footer.

use std::sync::Arc;

use super::meta::{encode_index, Group, GroupPageEntry, KeyPageEntry, RowGroupMeta};
use super::shape::Shape;
use super::ROW_GROUP_FORMAT;
use crate::error::Result;
use crate::mvcc::{Kind, Stored};
use crate::sst::block::{BlockBuilder, StoredBlocks};
use crate::sst::bloom;
use crate::sst::builder::SstOptions;
use crate::sst::format::{BlockWriter, Compression};
use crate::sst::zone::Zones;
use crate::types::row::RawCell;
use crate::types::ColumnType;
use crate::version::FileMeta;
use crate::vfs::WritableFile;

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
    /// The block the last stored version copied came from.
    stored: StoredBlocks,
    /// The open key page's first key goes on with the previous page's last key.
    continues: bool,
    /// The format version to write ([`ROW_GROUP_FORMAT`]; tests write format 5 too).
    pub(super) format: u32,
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

    pub(super) fn with_shape(
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
            stored: StoredBlocks::default(),
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
        let from = self.stored.of(at);
        if let Some(Source { maps: Some(maps), .. }) = &self.source {
            for (g, (page, cols)) in self.pages.iter_mut().zip(maps).enumerate() {
                match from {
                    Some(b) => page.add_cells_copied(b, cols, at.row),
                    None => page.add_cells(self.groups[g].columns.iter().map(|&vi| at.cell(vi))),
                }
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
        let idx = encode_index(self.rows, &self.shape, &self.key_pages, &self.group_pages, self.format);
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
