//! strata: an embedded HTAP storage engine.
//!
//! One copy of the data serves inserts, partial-row updates and point reads on recent data and
//! scans over all of it, at consistent snapshots. Data lives in an LSM tree per table: a write
//! goes to the write-ahead log and the memtable, is flushed to Level-0 and compacted down.
//! `docs/architecture.md` walks the data path; `docs/format/` documents every file.
//!
//! Start with [`Db::open`], [`Db::create_table`] and the [`Table`] handle.

#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod advisor;
mod catalog;
mod codec;
pub mod column_group;
pub mod compaction;
mod db;
#[cfg(test)]
mod decode_tests;
mod error;
#[doc(hidden)]
pub mod fuzz;
mod iter;
mod lineage;
mod memtable;
pub mod mvcc;
mod read;
pub mod scan;
pub mod sst;
pub mod sync;
#[cfg(test)]
mod test_seeds;
pub mod tier;
pub mod types;
pub mod version;
pub mod vfs;
mod write;

pub use db::{
    Advice, AdviseOptions, AsOf, ColumnWorkload, Db, Engine, GroupStats, HeatBucket, History, IngestStats, Isolation,
    KeyRange, LevelAdvice, LevelStats, LineageStats, Locked, Options, Projection, ReadOptions, Savepoint, ScanIter,
    Stats, Table, TableInfo, TableOptions, TableStats, TierStats, Transaction, TxnOptions, WorkloadStats, WriteOptions,
    MULTI_GET_PARALLEL, TXN_RETRIES,
};
pub use error::{Error, Result};
pub use mvcc::snapshot::Snapshot;
pub use sst::cache::{thread_io, ThreadIo};
pub use sst::format::Compression;
pub use tier::{Tier, TierPlacement};
pub use types::{Column, ColumnType, Schema, Value};
pub use write::batch::WriteBatch;
