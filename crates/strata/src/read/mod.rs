//! Reading at a read point: the layer between the database, which hands out read points, and
//! the readers (point reads here, the row merge here, the scan engine in [`crate::scan`]).
//!
//! A [`ReadPoint`] is a value: a sequence number, the memtables and version that hold
//! everything at or below it, the table's version, and the open files. Whoever holds one reads
//! exactly the data at its sequence number, and holds the memtables and files alive meanwhile.

mod get;
pub(crate) mod overlay;
mod rows;

pub(crate) use get::PointAt;
pub use rows::ScanIter;
pub(crate) use rows::{project, project_with, record_scan, KeyOf};

use std::sync::Arc;

use crate::memtable::Memtable;
use crate::sst::table_cache::TableCache;
use crate::sync::Swap;
use crate::version::{TableVersion, Version};

/// What readers read: the memtables and the version, swapped as one.
pub(crate) struct ReadView {
    pub mem: Arc<Memtable>,
    /// Frozen memtables, newest first.
    pub imm: Vec<Arc<Memtable>>,
    pub version: Arc<Version>,
}

/// The current read view: readers pin it without a lock; writers (memtable rotation,
/// installs) replace it one at a time.
pub(crate) type ViewCell = Swap<ReadView>;

/// One table's data at one sequence number.
pub(crate) struct ReadPoint {
    /// Open SST readers.
    pub tables: Arc<TableCache>,
    /// Whether files whose every version is newer than `seq` are left out before their bloom
    /// filters are asked (Kim et al. §IV).
    pub snapshot_filter: bool,
    /// Memtables and version holding everything at or below `seq`.
    pub view: Arc<ReadView>,
    /// The table's version in `view`.
    pub t: Arc<TableVersion>,
    pub seq: u64,
    /// Raised by a scan that cannot read run by run because Level-0 files wait for their
    /// marking (deferred marking): reads suffer, and a staging compaction is due (LogStore
    /// §V-D).
    pub staging: Option<Arc<crate::sync::Flag>>,
}
