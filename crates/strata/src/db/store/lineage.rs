//! The lineage engine's side of a table ([`LineageStore`]) and its place in the database: the
//! read point a lineage read reads at, the merge pass that folds tail records into base pages
//! and reclaims history, and lineage checkpoints. Writes reach a lineage table through group
//! commit ([`super::Store::apply`], in commit order), and recovery replays them from the WAL
//! after the checkpoint.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::super::stats::LineageStats;
use super::super::{checkpoint_name, DbInner, Projection, ReadOptions, TableInfo, TableOptions};
use super::{Feature, TableState};
use crate::error::{Error, Result};
use crate::lineage::{LineageRows, LineageTable, View};
use crate::mvcc::snapshot::Snapshot;
use crate::read::ScanIter;
use crate::sync::{site, Condvar, Mutex};
use crate::types::row::Cells;
use crate::types::Schema;
use crate::version::edit::{EditRecord, VersionEdit};
use crate::write::batch::BatchOp;
use std::collections::HashMap;

/// A lineage table's store.
pub(crate) struct LineageStore {
    table: Arc<LineageTable>,
}

/// What the database keeps for its lineage tables together.
pub(crate) struct LineageShared {
    /// WAL bytes of lineage writes since the last lineage checkpoint.
    pub wal_bytes: AtomicU64,
    /// Bytes the lineage tables hold: measured by each merge pass, estimated for the writes
    /// since (see [`crate::Options::lineage_memory_budget`]).
    pub mem: AtomicU64,
    /// Tests: while set, a merge stops where it has built its pages and is about to swap them
    /// in ([`super::super::Db::hold_lineage_merges`]).
    hold: Mutex<bool>,
    hold_cv: Condvar,
    /// Merges that stopped at that point.
    holds: AtomicU64,
    /// When a merge pass last measured the tables (see [`MEASURE_EVERY`]).
    measured: Mutex<std::time::Instant>,
    /// Lineage writes since the last pass began: the lineage lane is woken when they reach
    /// the merge threshold (some range may hold that many tail records now).
    since_pass: AtomicU64,
    merge_threshold: u64,
    checkpoint_bytes: u64,
    /// The lineage lane's work.
    work: Arc<crate::sync::Events>,
}

/// How often merge passes measure the lineage tables' memory (writes in between are
/// estimated).
const MEASURE_EVERY: Duration = Duration::from_millis(50);

/// Adds the time since its start to a counter when dropped.
struct CountMicros<'a>(&'a AtomicU64, std::time::Instant);

impl Drop for CountMicros<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(self.1.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}

/// About how many bytes a lineage write adds in memory: its values in a tail record or base
/// record (and, for a first update, a snapshot record of as much), plus per-record fields,
/// index entries and key copies.
pub(crate) fn mem_estimate(op: &BatchOp) -> u64 {
    (2 * (op.key.len() + op.row.len()) + 128) as u64
}

/// What one lineage write adds to the WAL since the last checkpoint.
pub(crate) fn wal_bytes(op: &BatchOp) -> u64 {
    (op.key.len() + op.row.len() + 8) as u64
}

impl LineageStore {
    pub(crate) fn new(info: &Arc<TableInfo>, range: usize) -> Self {
        LineageStore { table: Arc::new(LineageTable::new(info.clone(), range)) }
    }

    /// A lineage table takes no layout (it has no files), and at most
    /// [`crate::lineage::MAX_COLUMNS`] value columns.
    pub(crate) fn check_new(schema: &Schema, options: TableOptions) -> Result<TableOptions> {
        if options.layout.is_some() {
            return Err(Error::InvalidArgument(
                "column-group layouts apply to the LSM engine; a lineage table takes none".into(),
            ));
        }
        if schema.value_columns().len() > crate::lineage::MAX_COLUMNS {
            return Err(Error::InvalidArgument(format!(
                "a lineage table has at most {} columns besides its key, got {}",
                crate::lineage::MAX_COLUMNS,
                schema.value_columns().len()
            )));
        }
        // Row-group files are the LSM engine's: a lineage table has no SST files.
        Ok(options.with_row_groups(false))
    }

    /// Why a lineage table refuses `feature`.
    pub(crate) fn refusal(feature: Feature, table: &str) -> String {
        match feature {
            Feature::Ingest => format!(
                "table `{table}` uses the lineage engine, which takes rows through writes only; ingest is for LSM tables"
            ),
            Feature::Layout => format!("table {table} is on the lineage engine, which has no layout"),
            Feature::Replace => "lineage-engine tables are not replaced".into(),
            Feature::Levels => format!("table {table} is stored by the lineage engine, which has no levels"),
        }
    }

    /// Loads the lineage checkpoint at `path` into the lineage tables among `stores`; returns
    /// the oldest sequence number it holds history from (0 when no lineage table is left).
    pub(crate) fn load_checkpoint(
        fs: &dyn crate::vfs::Fs,
        path: &std::path::Path,
        stores: &HashMap<u32, Arc<TableState>>,
    ) -> Result<u64> {
        let tables: HashMap<u32, Arc<LineageTable>> =
            stores.iter().filter_map(|(&id, s)| s.store.lineage().map(|l| (id, l.table().clone()))).collect();
        let from = crate::lineage::checkpoint::load(fs, path, &tables)?;
        Ok(if tables.is_empty() { 0 } else { from })
    }

    /// The lineage table.
    pub(crate) fn table(&self) -> &Arc<LineageTable> {
        &self.table
    }

    /// Applies a committed write (the commit leader in commit order, or recovery).
    pub(crate) fn apply(&self, op: &BatchOp, seq: u64) -> crate::codec::DecodeResult<()> {
        self.table.apply(op.kind, &op.key, &op.row, seq)
    }

    pub(crate) fn drop_table(&self) {
        self.table.dropped.store(true, Ordering::Release);
    }

    /// Fails once the table was dropped (handles to it refuse to read).
    pub(crate) fn live(&self, info: &TableInfo) -> Result<()> {
        match self.table.dropped.load(Ordering::Acquire) {
            true => Err(Error::UnknownTable(info.name.clone())),
            false => Ok(()),
        }
    }

    pub(crate) fn cells_at(
        &self,
        db: &DbInner,
        info: &TableInfo,
        k: &[u8],
        wanted: Option<&[bool]>,
        ropts: &ReadOptions<'_>,
    ) -> Result<Option<Cells>> {
        self.live(info)?;
        let (seq, view) = db.lineage_read_point(&self.table, ropts)?;
        Ok(self.table.get(&view, k, seq, wanted))
    }

    /// Each key read at a read point of its own, as single gets.
    pub(crate) fn multi_get(
        &self,
        db: &DbInner,
        info: &TableInfo,
        keys: &[Vec<u8>],
        wanted: Option<&[bool]>,
        ropts: &ReadOptions<'_>,
    ) -> Result<Vec<Option<Cells>>> {
        self.live(info)?;
        keys.iter().map(|k| self.cells_at(db, info, k, wanted, ropts)).collect()
    }

    pub(crate) fn scan_batches(
        &self,
        db: &DbInner,
        info: &TableInfo,
        (lo, hi): (Vec<u8>, Option<Vec<u8>>),
        req: &crate::scan::ScanRequest,
        ropts: &ReadOptions<'_>,
    ) -> Result<crate::scan::BatchIter> {
        self.live(info)?;
        let point = db.lineage_read_point(&self.table, ropts)?;
        crate::scan::run_lineage_scan(&db.scans, &self.table, lo, hi, req, point)
    }

    pub(crate) fn scan(
        &self,
        db: &DbInner,
        info: &TableInfo,
        (lo, hi): (Vec<u8>, Option<Vec<u8>>),
        projection: &Projection,
        ropts: &ReadOptions<'_>,
    ) -> Result<ScanIter> {
        self.live(info)?;
        let point = db.lineage_read_point(&self.table, ropts)?;
        Ok(ScanIter::lineage(LineageRows::new(self.table.clone(), point, lo, hi, projection)))
    }

    /// The keys in the primary index (deleted rows count until a merge drops them).
    pub(crate) fn estimated_rows(&self, info: &TableInfo) -> Result<u64> {
        self.live(info)?;
        Ok(self.table.keys())
    }

    pub(crate) fn stats(&self) -> LineageStats {
        let l = &self.table;
        let sizes = l.sizes();
        LineageStats {
            rows: sizes.rows,
            base_bytes: sizes.base,
            tail_bytes: sizes.tail,
            history_bytes: sizes.history,
            merge_lag: l.merge_lag(),
            merges: l.counters.merges.load(Ordering::Relaxed),
            merged_records: l.counters.merged_records.load(Ordering::Relaxed),
            reclaimed_ranges: l.counters.reclaims.load(Ordering::Relaxed),
            reclaim_wait_micros: l.counters.reclaim_micros.load(Ordering::Relaxed),
        }
    }
}

impl LineageShared {
    /// `mem`: what the lineage tables hold at open; `work`: what wakes the lineage lane.
    pub(crate) fn new(mem: u64, work: Arc<crate::sync::Events>, opts: &crate::Options) -> Self {
        LineageShared {
            wal_bytes: AtomicU64::new(0),
            mem: AtomicU64::new(mem),
            hold: Mutex::new(&site::LINEAGE, false),
            hold_cv: Condvar::new(),
            holds: AtomicU64::new(0),
            measured: Mutex::new(&site::LINEAGE, std::time::Instant::now()),
            since_pass: AtomicU64::new(0),
            merge_threshold: opts.lineage_merge_threshold.max(1) as u64,
            checkpoint_bytes: opts.lineage_checkpoint_bytes,
            work,
        }
    }

    /// Counts `ops` committed lineage writes: `wal` bytes in the WAL, about `mem` bytes in
    /// memory. Wakes the lineage lane when a merge or a checkpoint may be due.
    pub(crate) fn applied(&self, ops: u64, wal: u64, mem: u64) {
        let before = self.wal_bytes.fetch_add(wal, Ordering::Relaxed);
        self.mem.fetch_add(mem, Ordering::Relaxed);
        let since = self.since_pass.fetch_add(ops, Ordering::Relaxed);
        let merge = since < self.merge_threshold && since + ops >= self.merge_threshold;
        let checkpoint = before < self.checkpoint_bytes && before + wal >= self.checkpoint_bytes;
        if merge || checkpoint {
            self.work.signal();
        }
    }

    /// See [`super::super::Db::hold_lineage_merges`].
    pub(crate) fn hold_merges(&self, hold: bool) -> u64 {
        *self.hold.lock() = hold;
        self.hold_cv.notify_all();
        self.holds.load(Ordering::SeqCst)
    }

    /// Where a merge waits while a test holds merges, until it lets go or `closed` says the
    /// database is closing.
    fn hold_point(&self, closed: &dyn Fn() -> bool) {
        let mut held = self.hold.lock();
        if *held {
            self.holds.fetch_add(1, Ordering::SeqCst);
            while *held && !closed() {
                self.hold_cv.wait_for(&mut held, Duration::from_millis(10));
            }
        }
    }
}

impl DbInner {
    /// The lineage tables, by id order.
    pub(crate) fn lineage_tables(&self) -> Vec<Arc<LineageTable>> {
        let stores = self.stores.pin();
        let mut tables: Vec<Arc<LineageTable>> =
            stores.values().filter_map(|s| s.store.lineage()).map(|l| l.table().clone()).collect();
        tables.sort_by_key(|t| t.info.id);
        tables
    }

    /// Refuses a batch that would take the lineage tables past their memory budget.
    pub(crate) fn check_lineage_budget(&self, batch: &crate::write::batch::WriteBatch) -> Result<()> {
        let stores = self.stores.pin();
        if stores.all_memtable() {
            return Ok(());
        }
        let adds: u64 =
            batch.ops.iter().filter_map(|op| Some(stores.get(&op.table_id)?.store.memory_estimate(op))).sum();
        let held = self.lineage.mem.load(Ordering::Relaxed);
        let budget = self.config.opts.lineage_memory_budget;
        if adds == 0 || held.saturating_add(adds) <= budget {
            return Ok(());
        }
        Err(Error::OutOfMemory(format!(
            "lineage tables hold {held} bytes of their {budget}-byte budget (Options::lineage_memory_budget), \
             too little for this write of about {adds} bytes: nothing of it was written. Raise the budget, \
             drop rows or tables, or shorten the history retention window and release old \
             snapshots (history no read can reach any more is reclaimed as the merge goes)"
        )))
    }

    /// The sequence number a read of lineage table `t` with `ropts` reads at, and the table's
    /// ranges it reads, which all answer at that sequence number: a snapshot's registration
    /// keeps its ranges from being rebased past it ([`DbInner::reclaim_history`]); without one,
    /// a list holding a range rebased past the visible sequence number read first is taken
    /// again with a newer one (a rebase's cut is never above the visible sequence number, so
    /// the second try holds).
    pub(crate) fn lineage_read_point(&self, t: &LineageTable, ropts: &ReadOptions<'_>) -> Result<(u64, Arc<View>)> {
        self.check_open()?;
        if let Some(seq) = self.snapshot_seq(ropts)? {
            return Ok((seq, t.view()));
        }
        loop {
            let seq = self.snapshots.visible();
            let view = t.view();
            if view.floor() <= seq {
                return Ok((seq, view));
            }
        }
    }

    /// One pass of the lineage work over every lineage table: folds committed tail records
    /// into new base pages, range by range, while readers and writers go on (they take no lock
    /// the merge holds); reclaims history no read can reach; measures what the tables hold;
    /// writes a checkpoint once enough lineage writes arrived since the last. `idle`: also
    /// merges ranges with fewer tail records than the threshold whose tail stopped growing.
    /// Returns the ranges merged.
    pub(crate) fn lineage_pass(&self, idle: bool) -> usize {
        self.lineage.since_pass.store(0, Ordering::Relaxed);
        let tables = self.lineage_tables();
        let visible = self.snapshots.visible();
        let threshold = self.config.opts.lineage_merge_threshold;
        let closed = || self.closed.load(Ordering::SeqCst);
        let hold = || self.lineage.hold_point(&closed);
        let merged: usize = tables.iter().map(|t| t.merge(visible, threshold, idle, &hold)).sum();
        for t in &tables {
            self.reclaim_history(t);
        }
        let mut measured = self.lineage.measured.lock();
        if measured.elapsed() >= MEASURE_EVERY {
            let held = tables.iter().map(|t| t.sizes().bytes()).sum();
            self.lineage.mem.store(held, Ordering::Relaxed);
            *measured = std::time::Instant::now();
        }
        drop(measured);
        if self.lineage_checkpoint_due() && self.check_writable().is_ok() {
            // A checkpoint that fails leaves the WAL as it was: nothing is lost, and the
            // next pass tries again (a failed manifest write poisons the database).
            let _ = self.checkpoint_lineage();
        }
        merged
    }

    /// Whether enough lineage writes arrived since the last checkpoint to write another.
    pub(crate) fn lineage_checkpoint_due(&self) -> bool {
        self.lineage.wal_bytes.load(Ordering::Relaxed) >= self.config.opts.lineage_checkpoint_bytes
    }

    /// Rebases the full ranges of `t` that gathered at least a range's worth of tail records no
    /// read can reach any more (older than the history window's start and than every live
    /// snapshot), and at least as many as they keep: new base pages as of that point, tail
    /// records only for the changes after it. The memory of updates nothing can read goes (the
    /// paper moves such history to colder storage; strata has no use for it). Each rebase takes
    /// the commit leader's turn (writers wait for one range's copy; readers never wait) and
    /// raises the snapshot floor to the point.
    fn reclaim_history(&self, t: &LineageTable) {
        let horizon = self.history_horizon();
        let types = &t.info.value_types;
        let cut_now =
            || self.snapshots.with_oldest(|visible, oldest| horizon.min(oldest.unwrap_or(visible)).min(visible));
        // A first look with one cut for the whole pass (cuts only grow); each rebase takes its own.
        let cut = cut_now();
        let view = t.view();
        for (i, r) in view.0.iter().enumerate() {
            let records = r.tail.len.load(Ordering::Acquire) as usize;
            let old = r.records_by(cut);
            let full = r.len.load(Ordering::Acquire) as usize == r.cap;
            if !full || old < r.cap || old < records - old {
                continue;
            }
            let reclaimed = self.as_leader(|_| {
                let _waited = CountMicros(&t.counters.reclaim_micros, std::time::Instant::now());
                let Some(r) = t.view().0.get(i).cloned() else { return false };
                let cut = cut_now();
                let Some(fresh) = r.rebased(types, cut) else { return false };
                self.snapshots.with_oldest(|_, oldest| {
                    let allowed = oldest.is_none_or(|o| o >= cut);
                    if allowed {
                        // No snapshot older than the new range can be taken from now on, and
                        // a read without one checks the list's floor against its sequence
                        // number: it reads at `cut` or later, or the old range.
                        self.snapshots.raise_floor(cut);
                        t.replace(i, fresh, cut);
                    }
                    allowed
                })
            });
            if reclaimed {
                t.counters.reclaims.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Writes a lineage checkpoint: every lineage table's rows as of one sequence number, then
    /// the manifest edit naming it and the WAL from which recovery must replay them.
    pub(crate) fn checkpoint_lineage(&self) -> Result<()> {
        // Fix the point with no write group in flight, and start a new WAL there: every write
        // after the point is in that WAL or a later one.
        let (seq, from, pin, wal, lsm_idle) = self.as_leader(|leader| -> Result<(u64, u64, Snapshot, u64, bool)> {
            let wal = self.commit.rotate_wal(self, leader)?;
            // With no LSM write in any memtable, the LSM tables need no log before the new one.
            let view = self.view.load();
            let lsm_idle = view.mem.is_empty() && view.imm.is_empty();
            let seq = self.snapshots.visible();
            // Within a history window, the changes it covers go along (from no earlier than
            // what reads may still ask for). Pinned there, so no range loses history the
            // checkpoint reads.
            let from = match self.config.retention_ms {
                0 => seq,
                _ => self.history_horizon().max(self.snapshots.floor()).min(seq),
            };
            let (from, pin) = match Snapshot::at(self.snapshots.clone(), from) {
                Some(pin) => (from, pin),
                // Cannot happen (the floor never passes the visible sequence number); without
                // the pin the checkpoint goes without history.
                None => (seq, Snapshot::new(self.snapshots.clone())),
            };
            Ok((seq, from, pin, wal, lsm_idle))
        })?;
        let bytes_before = self.lineage.wal_bytes.swap(0, Ordering::Relaxed);
        let res = (|| {
            let tables = self.lineage_tables();
            let number = self.alloc_output();
            let path = self.config.dir.join(checkpoint_name(number));
            let mut file = self.config.fs.create(&path)?;
            crate::lineage::checkpoint::write(file.as_mut(), &tables, from, seq)?;
            drop(file);
            self.config.fs.sync_dir(&self.config.dir)?;
            let mut edit = VersionEdit::default();
            edit.push(EditRecord::LineageCheckpoint { number, seq });
            edit.push(EditRecord::LineageLogNumber(wal));
            if lsm_idle {
                edit.push(EditRecord::LogNumber(wal));
            }
            edit.push(EditRecord::LastSequence(seq));
            let installed = self.install(edit, None);
            self.files.pending_outputs.lock().remove(&number);
            installed
        })();
        drop(pin);
        match res {
            Ok(()) => self.delete_obsolete_files(),
            Err(_) => {
                self.lineage.wal_bytes.fetch_add(bytes_before, Ordering::Relaxed);
            }
        }
        res
    }
}
