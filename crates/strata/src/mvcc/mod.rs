//! Multi-version concurrency control: what a version of a row is ([`Entry`], [`Kind`]), how the
//! versions of one key are read at a sequence number and collapsed by compaction ([`chain`]), and
//! which sequence numbers readers still pin ([`snapshot`]).

pub mod chain;
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
}
