//! One object per table, and the seam between the database and the engines that store tables.
//!
//! A [`TableState`] holds what the database keeps per table beside its definition and its
//! files (those are in the version): the table's [`Store`], its counters since open, its
//! sequences in use and a scan's wish for a staging compaction. The database keeps one per
//! table in a map swapped as a whole ([`Stores`]); a [`Table`](super::Table) handle holds its
//! table's.
//!
//! [`Store`] is the one place that knows which engine stores a table: reads, the planner's
//! statistics, where a committed write goes, what recovery replays and what an engine does not
//! support ([`Feature`]) are asked of it, never decided by the engine's name. A third engine
//! would be one more variant here.

mod lineage;
mod lsm;

pub(crate) use lineage::{LineageShared, LineageStore};
pub(crate) use lsm::LsmStore;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::sequence::Sequence;
use super::stats::{HeatBucket, LineageStats};
use super::{DbInner, Projection, ReadOptions, TableInfo, TableOptions};
use crate::catalog::Engine;
use crate::error::{Error, Result};
use crate::read::ScanIter;
use crate::sync::{site, Events, Flag, Mutex, Swap};
use crate::types::row::Cells;
use crate::types::{Schema, Value};
use crate::version::set::Counters;
use crate::write::batch::BatchOp;

/// Every table's state, by table id: swapped as a whole when a table is created or dropped,
/// read without a lock.
pub(crate) type Stores = Swap<StoreMap>;

/// The tables' states, by table id.
#[derive(Default, Clone)]
pub(crate) struct StoreMap {
    by_id: HashMap<u32, Arc<TableState>>,
    /// Tables whose writes the commit leader applies in order ([`Applies::InOrder`]); while
    /// there is none, every write goes to the memtable and the commit path looks nothing up.
    in_order: usize,
}

impl StoreMap {
    pub(crate) fn new(by_id: HashMap<u32, Arc<TableState>>) -> Self {
        let in_order = by_id.values().filter(|s| s.store.applies() == Applies::InOrder).count();
        StoreMap { by_id, in_order }
    }

    pub(crate) fn get(&self, id: &u32) -> Option<&Arc<TableState>> {
        self.by_id.get(id)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Arc<TableState>> + '_ {
        self.by_id.values()
    }

    /// Whether every table's writes go to the memtable.
    pub(crate) fn all_memtable(&self) -> bool {
        self.in_order == 0
    }

    /// Where writes of table `id` go (a table not here: to the memtable, which skips it).
    pub(crate) fn applies(&self, id: u32) -> Applies {
        match self.all_memtable() {
            true => Applies::Memtable,
            false => self.by_id.get(&id).map_or(Applies::Memtable, |s| s.store.applies()),
        }
    }

    /// The map with `state` added.
    pub(crate) fn with(&self, state: Arc<TableState>) -> StoreMap {
        let mut by_id = self.by_id.clone();
        by_id.insert(state.id, state);
        StoreMap::new(by_id)
    }

    /// The map without table `id`, and its state.
    pub(crate) fn without(&self, id: u32) -> (StoreMap, Option<Arc<TableState>>) {
        let mut by_id = self.by_id.clone();
        let gone = by_id.remove(&id);
        (StoreMap::new(by_id), gone)
    }
}

/// Bytes a table's files took in and gave out at one level since open.
#[derive(Default)]
pub(crate) struct LevelIo {
    /// Bytes flushes, compactions and ingests wrote into the level's files.
    pub written: AtomicU64,
    /// Bytes of the level's files compactions read.
    pub read: AtomicU64,
}

/// What the database keeps for one table beside its definition and files.
pub(crate) struct TableState {
    pub id: u32,
    /// The engine's side of the table.
    pub store: Store,
    /// Bytes written into the table by commits and ingests since open.
    pub ingested: AtomicU64,
    /// Bytes written and read per level since open.
    pub levels: Box<[LevelIo]>,
    /// The table's sequences in use since open, by name (see [`super::Table::sequence`]).
    pub sequences: Mutex<HashMap<String, Sequence>>,
    /// Raised by a scan that found Level-0 files whose marking was deferred: it wants the
    /// staging compaction that completes them (taken down by the compaction it gets).
    pub staging: Arc<Flag>,
}

impl TableState {
    /// The state of table `info` at open or creation: its store made for the engine it names;
    /// raising its staging wish signals `wake`.
    pub(crate) fn new(info: &Arc<TableInfo>, num_levels: usize, lineage_range: usize, wake: &Arc<Events>) -> Self {
        TableState {
            id: info.id,
            store: Store::new(info, lineage_range),
            ingested: AtomicU64::new(0),
            levels: (0..num_levels).map(|_| LevelIo::default()).collect(),
            sequences: Mutex::new(&site::SEQUENCES, HashMap::new()),
            staging: Arc::new(Flag::new(wake.clone())),
        }
    }

    /// A state for a handle whose table was dropped before its state could be found: an LSM
    /// store with nothing in it, whose reads find the table gone.
    pub(crate) fn detached(info: &Arc<TableInfo>, num_levels: usize) -> Self {
        TableState {
            id: info.id,
            store: Store::Lsm(LsmStore),
            ingested: AtomicU64::new(0),
            levels: (0..num_levels).map(|_| LevelIo::default()).collect(),
            sequences: Mutex::new(&site::SEQUENCES, HashMap::new()),
            staging: Arc::new(Flag::new(Arc::new(Events::new(&site::BACKGROUND)))),
        }
    }

    /// Adds `n` bytes to what was written into the table.
    pub(crate) fn count_ingested(&self, n: u64) {
        crate::sync::shared_write();
        self.ingested.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds `n` bytes written into files of `level`.
    pub(crate) fn count_written(&self, level: usize, n: u64) {
        if let Some(l) = self.levels.get(level) {
            l.written.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Adds `n` bytes read from files of `level` by a compaction.
    pub(crate) fn count_read(&self, level: usize, n: u64) {
        if let Some(l) = self.levels.get(level) {
            l.read.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// What an engine may not do; [`Store::supports`] says which it refuses, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Feature {
    /// Bulk loads written straight into files ([`super::Table::ingest`]).
    Ingest,
    /// Column-group layouts and changing them ([`super::Db::set_layout`]).
    Layout,
    /// Replacing a table or being replaced ([`super::Db::replace_table`]).
    Replace,
    /// Levels of files: the design advisor's model and calibration.
    Levels,
}

/// Where a committed write of a table goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applies {
    /// Into the shared memtable: inserted by whichever thread inserts its batch (several
    /// batches at once when the group allows), flushed to the table's files later.
    Memtable,
    /// Into the store itself, by the commit leader in commit order ([`Store::apply`]).
    InOrder,
}

/// The engine's side of one table.
pub(crate) enum Store {
    /// The LSM tree: rows in the shared memtables and the table's files, read through the
    /// version.
    Lsm(LsmStore),
    /// The lineage engine (L-Store): base and tail pages in memory, durable through the WAL
    /// and checkpoints.
    Lineage(LineageStore),
}

impl Store {
    /// The store of the engine `info` names.
    pub(crate) fn new(info: &Arc<TableInfo>, lineage_range: usize) -> Store {
        match info.options.engine {
            Engine::Lsm => Store::Lsm(LsmStore),
            Engine::Lineage => Store::Lineage(LineageStore::new(info, lineage_range)),
        }
    }

    /// Checks a new table's definition against what its engine takes, and settles its options
    /// (a lineage table has no files, so no row-group files).
    pub(crate) fn check_new(schema: &Schema, options: TableOptions, num_levels: usize) -> Result<TableOptions> {
        match options.engine {
            Engine::Lsm => {
                if let Some(spec) = &options.layout {
                    crate::column_group::Layout::parse(spec, schema, num_levels)?;
                }
                Ok(options)
            }
            Engine::Lineage => LineageStore::check_new(schema, options),
        }
    }

    /// Whether the store does `feature`; the error says why not, naming the table.
    pub(crate) fn supports(&self, feature: Feature, table: &str) -> Result<()> {
        match self {
            Store::Lsm(_) => Ok(()),
            Store::Lineage(_) => Err(Error::InvalidArgument(LineageStore::refusal(feature, table))),
        }
    }

    /// Where its committed writes go.
    pub(crate) fn applies(&self) -> Applies {
        match self {
            Store::Lsm(_) => Applies::Memtable,
            Store::Lineage(_) => Applies::InOrder,
        }
    }

    /// Applies a committed write at sequence number `seq` ([`Applies::InOrder`] stores; the
    /// commit leader, in commit order, or recovery).
    pub(crate) fn apply(&self, op: &BatchOp, seq: u64) -> crate::codec::DecodeResult<()> {
        match self {
            Store::Lsm(_) => Ok(()),
            Store::Lineage(l) => l.apply(op, seq),
        }
    }

    /// The bytes a write adds to what the store's next checkpoint saves recovery from reading
    /// in the WAL (0 for a store whose writes are flushed to files).
    pub(crate) fn checkpoint_bytes(&self, op: &BatchOp) -> u64 {
        match self {
            Store::Lsm(_) => 0,
            Store::Lineage(_) => lineage::wal_bytes(op),
        }
    }

    /// About how many bytes of memory a write adds to the store (0 for a store on disk), for
    /// the in-memory stores' budget.
    pub(crate) fn memory_estimate(&self, op: &BatchOp) -> u64 {
        match self {
            Store::Lsm(_) => 0,
            Store::Lineage(_) => lineage::mem_estimate(op),
        }
    }

    /// The oldest WAL, and the sequence number after which, recovery replays the table's
    /// writes from (what the files or checkpoints hold is older).
    pub(crate) fn replay_from(&self, c: &Counters) -> (u64, u64) {
        match self {
            Store::Lsm(_) => (c.log_number, 0),
            Store::Lineage(_) => (c.lineage_log, c.lineage_checkpoint.1),
        }
    }

    /// Whether the WAL is the store's only durable copy of its writes until a checkpoint (the
    /// manifest must then keep the WAL from the table's creation on).
    pub(crate) fn keeps_wal(&self) -> bool {
        matches!(self, Store::Lineage(_))
    }

    /// Whether the store has background work of its own (the lineage lane's merges).
    pub(crate) fn merges_in_background(&self) -> bool {
        matches!(self, Store::Lineage(_))
    }

    /// The lineage table, for the database's lineage work (merges, checkpoints, the memory
    /// budget); `None` for other stores.
    pub(crate) fn lineage(&self) -> Option<&LineageStore> {
        match self {
            Store::Lineage(l) => Some(l),
            Store::Lsm(_) => None,
        }
    }

    /// Marks the store's table dropped: handles still holding it find it gone.
    pub(crate) fn drop_table(&self) {
        if let Store::Lineage(l) = self {
            l.drop_table();
        }
    }

    /// The value cells (the `wanted` ones; all with `None`) of the row with encoded key `k`
    /// at the read point `ropts` gives.
    pub(crate) fn cells_at(
        &self,
        db: &DbInner,
        info: &TableInfo,
        k: &[u8],
        wanted: Option<&[bool]>,
        ropts: &ReadOptions<'_>,
    ) -> Result<Option<Cells>> {
        match self {
            Store::Lsm(_) => db.get_cells(info, k, wanted, ropts),
            Store::Lineage(l) => l.cells_at(db, info, k, wanted, ropts),
        }
    }

    /// The cells of each of `keys` (encoded), at one read point, in the order given.
    pub(crate) fn multi_get(
        &self,
        db: &DbInner,
        info: &TableInfo,
        keys: &[Vec<u8>],
        wanted: Option<&[bool]>,
        ropts: &ReadOptions<'_>,
    ) -> Result<Vec<Option<Cells>>> {
        match self {
            Store::Lsm(_) => db.multi_get_cells(info, keys, wanted, ropts),
            Store::Lineage(l) => l.multi_get(db, info, keys, wanted, ropts),
        }
    }

    /// An analytical scan of the keys `[lo, hi)`.
    pub(crate) fn scan_batches(
        &self,
        db: &DbInner,
        info: &Arc<TableInfo>,
        (lo, hi): (Vec<u8>, Option<Vec<u8>>),
        req: &crate::scan::ScanRequest,
        ropts: &ReadOptions<'_>,
    ) -> Result<crate::scan::BatchIter> {
        match self {
            Store::Lsm(_) => LsmStore::scan_batches(db, info, (lo, hi), req, ropts),
            Store::Lineage(l) => l.scan_batches(db, info, (lo, hi), req, ropts),
        }
    }

    /// The rows of the keys `[lo, hi)`, in key order, projected.
    pub(crate) fn scan(
        &self,
        db: &DbInner,
        info: &Arc<TableInfo>,
        (lo, hi): (Vec<u8>, Option<Vec<u8>>),
        projection: &Projection,
        ropts: &ReadOptions<'_>,
    ) -> Result<ScanIter> {
        match self {
            Store::Lsm(_) => db.scan(info, lo, hi, projection, ropts),
            Store::Lineage(l) => l.scan(db, info, (lo, hi), projection, ropts),
        }
    }

    /// About how many rows the table holds (see [`super::Table::estimated_rows`]).
    pub(crate) fn estimated_rows(&self, db: &DbInner, info: &TableInfo) -> Result<u64> {
        match self {
            Store::Lsm(_) => LsmStore::estimated_rows(db, info),
            Store::Lineage(l) => l.estimated_rows(info),
        }
    }

    /// Where to cut the table into at most `n` key ranges (see [`super::Table::key_splits`]);
    /// empty for a store that is not cut.
    pub(crate) fn key_splits(&self, db: &DbInner, info: &TableInfo, n: usize) -> Result<Vec<Value>> {
        match self {
            Store::Lsm(_) => LsmStore::key_splits(db, info, n),
            Store::Lineage(_) if n <= 1 => Ok(Vec::new()),
            Store::Lineage(l) => l.live(info).map(|()| Vec::new()),
        }
    }

    /// The smallest and largest value of each column (see [`super::Table::column_bounds`]);
    /// `None` for every column of a store that keeps no bounds.
    pub(crate) fn column_bounds(&self, db: &DbInner, info: &TableInfo) -> Result<Vec<Option<(Value, Value)>>> {
        match self {
            Store::Lsm(_) => LsmStore::column_bounds(db, info),
            Store::Lineage(l) => l.live(info).map(|()| vec![None; info.schema.columns().len()]),
        }
    }

    /// The table's access histograms (see [`super::Table::access_histogram`]); empty for a
    /// store without files.
    pub(crate) fn access_histogram(&self, db: &DbInner, info: &TableInfo) -> Result<Vec<HeatBucket>> {
        match self {
            Store::Lsm(_) => LsmStore::access_histogram(db, info),
            Store::Lineage(l) => l.live(info).map(|()| Vec::new()),
        }
    }

    /// The lineage engine's figures, for a lineage table.
    pub(crate) fn lineage_stats(&self) -> Option<LineageStats> {
        self.lineage().map(LineageStore::stats)
    }
}
