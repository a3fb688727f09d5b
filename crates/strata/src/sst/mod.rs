//! Sorted string tables: immutable files holding one sorted run's worth of versions for one
//! (table, column group). See `docs/format/sst.md` for the byte layout.
//!
//! - [`format`]: block framing (compression + CRC32C), block handles, the footer.
//! - [`block`]: the PAX data block (keys, seqs, kinds, then one section per column).
//! - [`keys`]: key pages: keys and sequence numbers found by arithmetic and binary search.
//! - [`bloom`]: the key filter.
//! - [`keyset`]: exact key-hash sets kept in memory for Level-0 files.
//! - [`builder`]: writes a file from entries in (key asc, seq desc) order.
//! - [`reader`]: opens a file, answers point lookups and iterates it.
//! - [`rowgroup`]: row-group files: every column group of a level in one file, by row position.
//! - [`run`]: a forward cursor over a sorted run (file, block, row).
//! - [`cache`]: the shared block cache.
//! - [`table_cache`]: open readers by file number.

pub mod block;
pub mod bloom;
pub mod builder;
pub mod cache;
pub mod format;
pub(crate) mod keys;
pub mod keyset;
pub mod reader;
pub(crate) mod rowgroup;
pub(crate) mod run;
pub(crate) mod table_cache;
pub mod zone;

/// Version of the SST file format written by this build (stored in every footer).
pub const FORMAT_VERSION: u32 = 4;

/// The oldest SST format this build reads (format-3 blocks are re-encoded as they are read;
/// compaction writes their rows in the current format).
pub const OLDEST_READABLE_FORMAT: u32 = 3;
