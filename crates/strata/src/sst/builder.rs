//! Writes one SST file from versions given in (key asc, seq desc) order.
//!
//! Blocks are cut only between keys, so every version of a key lands in one block. The file is
//! synced by [`SstBuilder::finish`]; making its name durable (directory sync) and recording it in
//! the manifest is the caller's job.

use std::path::PathBuf;
use std::sync::Arc;

use super::block::{BlockBuilder, StoredBlocks};
use super::bloom;
use super::format::{BlockHandle, BlockWriter, Compression};
use super::zone::Zones;
use crate::codec::{put_bytes, put_varint};
use crate::error::{Error, Result};
use crate::mvcc::{Entry, Stored};
use crate::types::row::{RawCell, RowIter};
use crate::types::ColumnType;
use crate::version::FileMeta;
use crate::vfs::WritableFile;

/// Knobs for building SSTs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SstOptions {
    pub block_size: usize,
    pub compression: Compression,
    pub bloom_bits_per_key: usize,
}

/// One block's index entry: its last key (fence), where it is, and its statistics.
#[derive(Debug, Clone)]
pub(crate) struct IndexEntry {
    pub last_key: Vec<u8>,
    pub handle: BlockHandle,
    pub rows: u64,
    pub min_seq: u64,
    pub max_seq: u64,
    /// Every version in the block is a full row and no key repeats.
    pub clean: bool,
    /// The block's first key may be the previous block's last key (a key page of a row-group
    /// file going on with it, see [`KeyPageEntry::continues`]): its keys lie in [previous
    /// fence, its fence] instead of (previous fence, its fence].
    ///
    /// [`KeyPageEntry::continues`]: super::rowgroup::KeyPageEntry::continues
    pub continues: bool,
    /// One zone map per column of the group.
    pub zones: Zones,
}

/// Index entry flag: the block is clean (see [`IndexEntry::clean`]).
pub(crate) const BLOCK_CLEAN: u8 = 1;

/// The file-level metadata block.
#[derive(Debug, Clone)]
pub(crate) struct SstMeta {
    pub table_id: u32,
    pub cg: u32,
    pub columns: Vec<usize>,
    pub types: Vec<ColumnType>,
    pub entries: u64,
    pub min_seq: u64,
    pub max_seq: u64,
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    pub index: BlockHandle,
    pub filter: BlockHandle,
}

/// Builds one file.
pub(crate) struct SstBuilder {
    out: BlockWriter,
    path: PathBuf,
    opts: SstOptions,
    table_id: u32,
    cg: u32,
    columns: Vec<usize>,
    types: Arc<[ColumnType]>,
    /// Types of all the table's value columns (rows arrive encoded over all of them).
    value_types: Arc<[ColumnType]>,
    /// For each value column, whether the group stores it.
    in_group: Vec<bool>,
    block: BlockBuilder,
    /// Index entries with their encoded zone maps.
    index: Vec<IndexEntry>,
    hashes: Vec<u64>,
    entries: u64,
    min_seq: u64,
    max_seq: u64,
    smallest: Option<Vec<u8>>,
    largest: Vec<u8>,
    /// The column map of the last source of versions stored elsewhere, and whether it is this
    /// file's group (see [`Self::same_group`]).
    last_source: Option<(Arc<[Option<usize>]>, bool)>,
    /// The block the last stored version copied came from.
    stored: StoredBlocks,
}

impl SstBuilder {
    /// `columns` are the value-column indices of the group, ascending; `value_types` the types
    /// of all the table's value columns.
    pub(crate) fn new(
        file: Box<dyn WritableFile>,
        path: PathBuf,
        opts: SstOptions,
        table_id: u32,
        cg: u32,
        columns: Vec<usize>,
        value_types: Arc<[ColumnType]>,
    ) -> Self {
        let types: Arc<[ColumnType]> = columns.iter().map(|&c| value_types[c]).collect();
        let mut in_group = vec![false; value_types.len()];
        for &c in &columns {
            in_group[c] = true;
        }
        let block = BlockBuilder::new(&types);
        SstBuilder {
            out: BlockWriter::new(file),
            path,
            opts,
            table_id,
            cg,
            columns,
            types,
            value_types,
            in_group,
            block,
            index: Vec::new(),
            hashes: Vec::new(),
            entries: 0,
            min_seq: u64::MAX,
            max_seq: 0,
            smallest: None,
            largest: Vec::new(),
            last_source: None,
            stored: StoredBlocks::default(),
        }
    }

    pub(crate) fn path(&self) -> &PathBuf {
        &self.path
    }

    /// Bytes written plus the open block: what the file would weigh if finished now.
    pub(crate) fn estimated_size(&self) -> u64 {
        self.out.offset() + self.block.size() as u64
    }

    /// Versions added so far.
    pub(crate) fn entries(&self) -> u64 {
        self.entries
    }

    /// Whether a version stored at `at` comes from a block of this file's group (its columns
    /// in the same order). Asked for each version, answered once per source file.
    fn same_group(&mut self, at: &Stored) -> bool {
        if let Some((map, same)) = &self.last_source {
            if Arc::ptr_eq(map, &at.group_of) {
                return *same;
            }
        }
        let same = at.block.columns() == self.columns.len()
            && self.columns.iter().enumerate().all(|(j, &vi)| at.group_of.get(vi).copied().flatten() == Some(j));
        self.last_source = Some((at.group_of.clone(), same));
        same
    }

    /// Adds the next version. `e.row` covers every value column; only the group's are stored.
    pub(crate) fn add(&mut self, e: &Entry) -> Result<()> {
        let new_key = self.entries == 0 || self.block.last_key() != e.key.as_slice();
        if new_key && !self.block.is_empty() && self.block.size() >= self.opts.block_size {
            self.flush_block()?;
        }
        if new_key {
            self.hashes.push(bloom::key_hash(&e.key));
            self.largest.clone_from(&e.key);
        }
        if self.smallest.is_none() {
            self.smallest = Some(e.key.clone());
        }
        if let Some(at) = &e.stored {
            let from = match self.same_group(at) {
                true => self.stored.of(at),
                false => None,
            };
            if let Some(from) = from {
                // Copied from the block the version was read from, column by column.
                self.block.add_copied(&e.key, e.seq, e.kind, from, at.row);
            } else {
                let cells = self.in_group.iter().enumerate().filter(|(_, &keep)| keep).map(|(vi, _)| at.cell(vi));
                self.block.add(&e.key, e.seq, e.kind, cells);
            }
        } else {
            let mut bad = None;
            let cells = RowIter::new(&self.value_types, &e.row)
                .map_err(|d| Error::corruption(&self.path, e.seq, format!("bad row to write: {}", d.0)))?
                .zip(self.in_group.iter())
                .filter(|(_, &keep)| keep)
                .map(|(c, _)| {
                    c.unwrap_or_else(|d| {
                        bad = Some(d);
                        RawCell::Absent
                    })
                });
            self.block.add(&e.key, e.seq, e.kind, cells);
            if let Some(d) = bad {
                return Err(Error::corruption(&self.path, e.seq, format!("bad row to write: {}", d.0)));
            }
        }
        self.entries += 1;
        self.min_seq = self.min_seq.min(e.seq);
        self.max_seq = self.max_seq.max(e.seq);
        Ok(())
    }

    fn flush_block(&mut self) -> Result<()> {
        let last_key = self.block.last_key().to_vec();
        let (content, s) = self.block.finish();
        let handle = self.out.write_block(&content, self.opts.compression)?;
        self.index.push(IndexEntry {
            last_key,
            handle,
            rows: s.rows as u64,
            min_seq: s.min_seq,
            max_seq: s.max_seq,
            clean: s.clean,
            continues: false,
            zones: Zones::new(&s.zones, self.types.clone()),
        });
        Ok(())
    }

    /// The hashes of the distinct keys added so far (see [`bloom::key_hash`]).
    pub(crate) fn key_hashes(&self) -> &[u64] {
        &self.hashes
    }

    /// Writes filter, index, meta and footer, then syncs the file. Returns the file's manifest
    /// entry under file number `number`.
    pub(crate) fn finish(mut self, number: u64) -> Result<FileMeta> {
        if !self.block.is_empty() {
            self.flush_block()?;
        }
        let filter = bloom::build(&self.hashes, self.opts.bloom_bits_per_key);
        let filter = self.out.write_block(&filter, Compression::None)?;
        let mut idx = Vec::new();
        put_varint(&mut idx, self.index.len() as u64);
        for e in &self.index {
            put_bytes(&mut idx, &e.last_key);
            e.handle.encode(&mut idx);
            put_varint(&mut idx, e.rows);
            put_varint(&mut idx, e.min_seq);
            put_varint(&mut idx, e.max_seq);
            idx.push(if e.clean { BLOCK_CLEAN } else { 0 });
            e.zones.encode(&mut idx);
        }
        let index = self.out.write_block(&idx, Compression::None)?;
        let largest = std::mem::take(&mut self.largest);
        let smallest = self.smallest.clone().unwrap_or_default();
        let meta = SstMeta {
            table_id: self.table_id,
            cg: self.cg,
            columns: self.columns.clone(),
            types: self.types.to_vec(),
            entries: self.entries,
            min_seq: if self.entries == 0 { 0 } else { self.min_seq },
            max_seq: self.max_seq,
            smallest: smallest.clone(),
            largest: largest.clone(),
            index,
            filter,
        };
        let mut m = Vec::new();
        meta.encode(&mut m);
        let meta_handle = self.out.write_block(&m, Compression::None)?;
        let size = self.out.finish(meta_handle, super::FORMAT_VERSION)?;
        Ok(FileMeta {
            number,
            size,
            entries: self.entries,
            min_seq: meta.min_seq,
            max_seq: meta.max_seq,
            smallest,
            largest,
            cg: self.cg,
            tier: 0,
        })
    }
}

impl SstMeta {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, u64::from(self.table_id));
        put_varint(out, u64::from(self.cg));
        put_columns(out, &self.columns, &self.types);
        put_varint(out, self.entries);
        put_varint(out, self.min_seq);
        put_varint(out, self.max_seq);
        put_bytes(out, &self.smallest);
        put_bytes(out, &self.largest);
        self.index.encode(out);
        self.filter.encode(out);
    }
}

/// Appends a group's columns to a meta block: `ncols varint | ncols × (value-column index varint
/// | column type u8)`.
pub(crate) fn put_columns(out: &mut Vec<u8>, columns: &[usize], types: &[ColumnType]) {
    put_varint(out, columns.len() as u64);
    for (c, t) in columns.iter().zip(types) {
        put_varint(out, *c as u64);
        out.push(t.code());
    }
}
