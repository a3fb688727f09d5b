//! Multi-version concurrency control: what a version of a row is ([`Entry`], [`Kind`]), how the
//! versions of one key are read at a sequence number and collapsed by compaction ([`chain`]), and
//! which sequence numbers readers still pin ([`snapshot`]).

pub(crate) mod batches;
pub mod chain;
pub(crate) mod clock;
pub(crate) mod conflict;
pub(crate) mod locks;
pub mod snapshot;

/// What a version of a row says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// The row does not exist (a tombstone).
    Delete = 0,
    /// A full row: every value column is carried. Replaces whatever was there.
    Put = 1,
    /// A partial row: only some value columns are carried; the rest come from older versions.
    /// Meaningless (invisible) unless an older full row exists below it.
    Update = 2,
}

impl Kind {
    pub(crate) fn from_u8(b: u8) -> Option<Kind> {
        match b {
            0 => Some(Kind::Delete),
            1 => Some(Kind::Put),
            2 => Some(Kind::Update),
            _ => None,
        }
    }
}

/// The value columns a version speaks for: `None` for a whole-row version (memtable, row-layout
/// files), else the columns of the column group whose file it came from. A `Put` or `Delete`
/// settles exactly the columns it covers.
pub type Cover = Option<std::sync::Arc<[usize]>>;

/// One version of one row: encoded primary key, sequence number, kind and (for Put/Update) the
/// carried value columns in the row encoding of [`crate::types::row`]. Tombstones carry an empty
/// row. Flush and compaction move rows without decoding them.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Memcomparable primary key.
    pub key: Vec<u8>,
    /// Global sequence number of the write.
    pub seq: u64,
    /// What the version says.
    pub kind: Kind,
    /// The row encoding of the carried value columns (empty for a tombstone).
    pub row: Vec<u8>,
    /// The columns the version covers (see [`Cover`]).
    pub cover: Cover,
    /// Where a full row read from an SST by compaction is stored, when `row` was left empty for
    /// the output to copy the cells straight from there (see [`Entry::materialize`]).
    pub(crate) stored: Option<Stored>,
}

/// Decoded rows a version can stay in for a compaction to copy its cells from: a decoded block
/// of an SST (the file format implements it, and takes its blocks back with
/// [`StoredRows::into_any`]).
pub(crate) trait StoredRows: std::any::Any + Send + Sync + std::fmt::Debug {
    /// Row `row`'s cell of column `col`, as stored.
    fn raw_cell(&self, row: usize, col: usize) -> crate::types::row::RawCell<'_>;
    /// How many columns each row holds.
    fn columns(&self) -> usize;
    /// The rows as `Any`, for the file format that made them to take them back.
    fn into_any(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn std::any::Any + Send + Sync>;
}

/// A version's place in decoded rows, and where the table's value columns are in them.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub block: std::sync::Arc<dyn StoredRows>,
    pub row: usize,
    /// For each value column of the table, its column in the block's group.
    pub group_of: std::sync::Arc<[Option<usize>]>,
}

impl PartialEq for Stored {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::addr_eq(std::sync::Arc::as_ptr(&self.block), std::sync::Arc::as_ptr(&other.block))
            && self.row == other.row
    }
}

impl Stored {
    /// Value column `vi`'s cell, as stored.
    #[inline]
    pub(crate) fn cell(&self, vi: usize) -> crate::types::row::RawCell<'_> {
        match self.group_of.get(vi).copied().flatten() {
            Some(c) => self.block.raw_cell(self.row, c),
            None => crate::types::row::RawCell::Absent,
        }
    }
}

impl Entry {
    /// A version with its row encoded (nothing stored elsewhere).
    pub(crate) fn new(key: Vec<u8>, seq: u64, kind: Kind, row: Vec<u8>, cover: Cover) -> Entry {
        Entry { key, seq, kind, row, cover, stored: None }
    }

    /// Encodes `row` from where the version is stored, if it was left empty; everything that
    /// reads rows (collapsing, marking partial rows) needs this first.
    pub(crate) fn materialize(&mut self, value_types: &[crate::types::ColumnType]) {
        if let Some(s) = self.stored.take() {
            crate::types::row::encode_raw_row(value_types, (0..value_types.len()).map(|vi| s.cell(vi)), &mut self.row);
        }
    }
}
