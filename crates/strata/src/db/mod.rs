//! The database: the shared state every thread works on ([`DbInner`], grouped by the lock that
//! guards each part) and the public handle over it ([`Db`]). The parts:
//!
//! - [`recover`]: what `Db::open` finds on disk (manifest, tiers, WAL replay) before the
//!   database object exists; `open` then persists what was replayed and starts the threads;
//! - [`commit`]: the commit pipeline (group commit, WAL, sequence numbers, the conflict
//!   window), reaching the rest through its environment (`commit/env.rs`);
//! - [`scheduler`]: the background threads and their state, woken by events; the operations
//!   they run are in [`background`] (flush, compaction and its pick) and the stores;
//! - [`store`]: one [`store::TableState`] per table, with the engine behind [`store::Store`];
//! - [`table`] (the per-table API), [`read`] (handing out read points), [`txn`], [`ingest`],
//!   [`advise`], [`sequence`], [`stats`].
//!
//! Lock order, outermost first (a lock is only ever taken while holding locks listed before
//! it; two locks on one line are never held together):
//!
//! 1. `sched.manual_ops` (a manual compaction, a layout change, an ingest's install, a trace
//!    change, for their whole length);
//! 2. `commit.leader` (held across a group's WAL write and apply, by `as_leader` callers:
//!    replacing a table, an ingest's install, a lineage rebase or checkpoint's WAL switch);
//! 3. a table's `sequences` lock;
//! 4. `files.versions` (held across manifest appends) | `sched.state` (pick and waits; never
//!    with the version lock);
//! 5. under the version lock: the read view's and the stores' writers, `commit.clock`,
//!    `commit.batches`, `files.live_versions`, `files.pending_outputs`, the table cache's
//!    locks; under the leader: `commit.conflicts`, then the snapshot registry;
//! 6. leaves, taken under any of the above and holding nothing: `sched.error`, `io`, the
//!    event counts' locks ([`crate::sync::Events`]), a lineage table's writer lock.
//!
//! The leader lock, which owns the WAL writer, is the only lock held across a WAL write; no
//! other lock is held across an SST write, and the version lock only across manifest appends.
//! Reads take none of them: they pin the read view and the stores' map.

mod advise;
mod background;
mod commit;
#[cfg(test)]
mod contention_tests;
mod ingest;
#[cfg(test)]
mod marks_tests;
mod options;
pub(crate) mod read;
mod recover;
mod scheduler;
mod sequence;
mod stats;
mod store;
mod table;
pub(crate) mod txn;

pub(crate) use crate::catalog::workload;
pub use crate::catalog::{Engine, KeyRange, Projection, TableInfo, TableOptions};
pub(crate) use crate::read::ReadView;
pub use crate::read::ScanIter;
pub use advise::{Advice, AdviseOptions, LevelAdvice};
pub use ingest::IngestStats;
pub use options::{Options, ReadOptions, WriteOptions};
pub use read::{AsOf, History};
pub use stats::{
    ColumnWorkload, GroupStats, HeatBucket, LevelStats, LineageStats, Stats, TableStats, TierStats, WorkloadStats,
};
pub use table::Table;

/// Keys from which a [`Table::multi_get`] splits its keys into ranges read in parallel.
pub const MULTI_GET_PARALLEL: usize = 32;
pub use txn::{Isolation, Locked, Savepoint, Transaction, TxnOptions, TXN_RETRIES};

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crate::sync::{site, Mutex};

use crate::column_group::{group_id, Layout};
use crate::error::{Error, Result};
use crate::memtable::Memtable;
use crate::mvcc::clock::unix_ms;
use crate::mvcc::snapshot::{Snapshot, SnapshotList};
use crate::sst::cache::BlockCache;
use crate::sst::table_cache::TableCache;
use crate::types::Schema;
use crate::version::edit::{EditRecord, VersionEdit};
use crate::version::marks::WHOLE;
use crate::version::set::VersionSet;
use crate::version::Version;
use crate::vfs::{DirLock, Fs};
use crate::write::batch::WriteBatch;
use crate::write::wal::WalWriter;
use read::history_horizon;

/// The database's I/O counters since open (each table's per level are in its
/// [`store::TableState`]).
#[derive(Default)]
pub(crate) struct IoCounters {
    /// Bytes flushes, compactions and ingests wrote into files, over every table.
    pub written: u64,
    pub compactions: u64,
    pub stagings: u64,
    pub flushes: u64,
    /// Wall time of flushes, from reading the memtable to installing the files.
    pub flush_micros: u64,
    /// Wall time of compactions that rewrote files, from reading the inputs to installing.
    pub compaction_micros: u64,
    pub stall_micros: u64,
    /// Files the background re-layout rewrote, and their bytes.
    pub relayouts: u64,
    pub relayout_bytes: u64,
    /// Layout changes the self-advising made ([`Options::self_advise`]).
    pub self_advised: u64,
    /// Wall time the self-advising spent pricing layouts.
    pub self_advise_micros: u64,
}

/// A test's code to run before a flush or a compaction (as named) installs.
#[cfg(test)]
pub(crate) type InstallHook = (&'static str, Box<dyn FnOnce() + Send>);

/// The shared state of an open database, in groups each guarded as its doc says (see the
/// lock order at the top of the module).
pub(crate) struct DbInner {
    /// Fixed at open; read without a lock.
    pub config: Config,
    /// The manifest and file numbers, under the version lock.
    pub files: Files,
    /// What readers read (memtables and version), swapped whole by its writers' lock.
    pub view: crate::read::ViewCell,
    /// Live snapshots and the visible sequence number (its own lock; reads take none).
    pub snapshots: Arc<SnapshotList>,
    /// The commit pipeline: the queue, the leader and its WAL, the conflict window, row locks,
    /// the commit clock and batch ranges (each under its own lock; see [`commit`]).
    pub commit: commit::Committer,
    /// The background threads, their state and events, the failure that stops writes (see
    /// [`scheduler`]).
    pub sched: scheduler::Scheduler,
    /// Every table's state (its store, counters, sequences), by id: swapped whole, read without
    /// a lock.
    pub stores: store::Stores,
    /// What the lineage tables share (their memory, WAL bytes since their checkpoint).
    pub lineage: store::LineageShared,
    /// Open SST readers, the block cache and the access histograms (lock-free or their own
    /// locks).
    pub tables: Arc<TableCache>,
    /// The scan engine's counters, shared-pass registry and thread pool.
    pub scans: crate::scan::Scans,
    /// The pool a large `multi_get` reads its key ranges on, started on first use.
    pub point_pool: std::sync::OnceLock<rayon::ThreadPool>,
    /// The database's counters of background I/O and stalls (a leaf lock).
    pub io: Mutex<IoCounters>,
    /// Set by [`Db::close`]: reads and writes refuse from then on.
    pub closed: AtomicBool,
    /// Tests: runs once, on the thread of the first flush or compaction (as named) about to
    /// take the version lock to install.
    #[cfg(test)]
    pub install_hook: Mutex<Option<InstallHook>>,
}

/// What is fixed when a database opens.
pub(crate) struct Config {
    pub dir: PathBuf,
    /// The file system (slowed to the tiers' device profiles when they give any).
    pub fs: Arc<dyn Fs>,
    pub opts: Options,
    /// The storage tiers, first the fast one (one, the database directory, without tiers).
    pub tiers: Vec<crate::tier::TierRecord>,
    /// The history retention window in milliseconds (0: none), as recorded in the manifest.
    pub retention_ms: u64,
}

/// The database's files: the manifest's version set and what keeps files from being deleted.
/// `versions` is the version lock; the others are leaves taken under it or alone.
pub(crate) struct Files {
    pub versions: Mutex<VersionSet>,
    /// The next file number to hand out.
    pub next_file: AtomicU64,
    /// File numbers handed out for outputs not installed yet: cleanup leaves them.
    pub pending_outputs: Mutex<HashSet<u64>>,
    /// Versions some reader may still hold: cleanup keeps their files.
    pub live_versions: Mutex<Vec<Weak<Version>>>,
    /// The directory's lock, released at close.
    pub dir_lock: Mutex<Option<Box<dyn DirLock>>>,
}

/// An open database. Dropping it stops background work; everything written stays in the WAL.
///
/// ```
/// use strata::*;
/// let dir = std::env::temp_dir().join(format!("strata-doc-db-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// let db = Db::open(&dir, Options::default())?;
/// let schema = Schema::new(
///     vec![Column::new("id", ColumnType::BigInt), Column::new("name", ColumnType::Text), Column::new("n", ColumnType::Int)],
///     &["id"],
/// )?;
/// let people = db.create_table("people", schema, TableOptions::default())?;
/// people.insert(&[Value::BigInt(1), "ada".into(), Value::Int(36)])?;
/// people.update(&[Value::BigInt(1)], &[("n", Value::Int(37))])?;
/// let row = people.get(&[Value::BigInt(1)], &people.projection(&["name", "n"])?, &ReadOptions::default())?;
/// assert_eq!(row, Some(vec![Value::Text("ada".into()), Value::Int(37)]));
/// # drop(db); std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), strata::Error>(())
/// ```
pub struct Db {
    inner: Arc<DbInner>,
}

/// File name of WAL number `n`.
pub(crate) fn wal_name(n: u64) -> String {
    format!("{n:06}.log")
}

/// File name of lineage checkpoint number `n`.
pub(crate) fn checkpoint_name(n: u64) -> String {
    format!("{n:06}.lck")
}

/// The numbered files of a database directory, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DbFile {
    Wal(u64),
    Sst(u64),
    Manifest(u64),
    Checkpoint(u64),
}

impl DbFile {
    fn parse(name: &str) -> Option<DbFile> {
        let num = |s: &str| s.parse::<u64>().ok();
        if let Some(n) = name.strip_suffix(".log") {
            num(n).map(DbFile::Wal)
        } else if let Some(n) = name.strip_suffix(".sst") {
            num(n).map(DbFile::Sst)
        } else if let Some(n) = name.strip_suffix(".lck") {
            num(n).map(DbFile::Checkpoint)
        } else {
            name.strip_prefix("MANIFEST-").and_then(num).map(DbFile::Manifest)
        }
    }

    fn number(self) -> u64 {
        match self {
            DbFile::Wal(n) | DbFile::Sst(n) | DbFile::Manifest(n) | DbFile::Checkpoint(n) => n,
        }
    }
}

/// What recovery replayed, for the open to persist ([`DbInner::persist_replayed`]).
struct Replayed {
    /// The LSM tables' writes from the WAL.
    mem: Arc<Memtable>,
    /// The version they were replayed over.
    version: Arc<Version>,
    /// The WAL this process writes to: the older ones are retired.
    wal_number: u64,
    last_seq: u64,
    /// The oldest WAL the lineage tables need (0: no lineage table was ever made).
    lineage_log: u64,
}

impl Db {
    /// Opens (or creates) the database in `dir`, replaying the manifest and any WAL left by the
    /// previous process. The replayed writes are flushed to Level-0 before `open` returns.
    ///
    /// # Errors
    /// [`Error::Locked`] if another handle has it open, [`Error::Corruption`] naming the damaged
    /// file, [`Error::InvalidArgument`] for bad options or a missing database without
    /// `create_if_missing`.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate().map_err(Error::InvalidArgument)?;
        let dir = dir.as_ref().to_path_buf();
        let compaction_work = Arc::new(crate::sync::Events::new(&site::BACKGROUND));
        let recovered = recover::recover(&dir, &opts, &compaction_work)?;
        let (inner, replayed) = DbInner::new(dir, opts, recovered, compaction_work)?;
        let db = Db { inner: Arc::new(inner) };
        db.inner.persist_replayed(&replayed)?;
        db.inner.resume_traces();
        let lineage = db.inner.stores.pin().values().any(|s| s.store.merges_in_background());
        let o = &db.inner.config.opts;
        scheduler::Scheduler::start(&db.inner, o.compaction_threads, lineage, o.self_advise)?;
        Ok(db)
    }

    /// Creates a table. Durable when this returns.
    ///
    /// # Errors
    /// [`Error::TableExists`], or [`Error::InvalidArgument`] for an empty name.
    pub fn create_table(&self, name: &str, schema: Schema, options: TableOptions) -> Result<Table> {
        self.inner.check_writable()?;
        if name.is_empty() || name.len() > 255 {
            return Err(Error::InvalidArgument("table names must be 1 to 255 bytes".into()));
        }
        let num_levels = self.inner.config.opts.num_levels;
        let (info, state) = {
            let mut vs = self.inner.files.versions.lock();
            if vs.current().table_by_name(name).is_some() {
                return Err(Error::TableExists(name.to_owned()));
            }
            let options = store::Store::check_new(&schema, options, num_levels)?;
            let id = vs.counters.next_table_id;
            let info = Arc::new(TableInfo::new(id, name.to_owned(), Arc::new(schema), options)?);
            let state = Arc::new(store::TableState::new(
                &info,
                num_levels,
                self.inner.config.opts.lineage_range,
                &self.inner.sched.compaction_work,
            ));
            let mut edit = VersionEdit::default();
            edit.push(EditRecord::CreateTable((*info).clone()));
            edit.push(EditRecord::NextTableId(id + 1));
            if state.store.keeps_wal() && vs.counters.lineage_log == 0 {
                // From now on the WAL is this table's only durable copy: keep it.
                edit.push(EditRecord::LineageLogNumber(self.inner.commit.wal_number()));
            }
            // The state first: a write to the table may come as soon as the version holds it.
            self.inner.stores.update(|m| (m.with(state.clone()), ()));
            if let Err(e) = self.inner.install_locked(&mut vs, edit, None) {
                self.inner.stores.update(|m| (m.without(id).0, ()));
                return Err(e);
            }
            (info, state)
        };
        if state.store.merges_in_background() {
            scheduler::Scheduler::start_lineage(&self.inner)?;
        }
        Ok(Table::with_state(self.inner.clone(), info, state))
    }

    /// Drops a table; its files are deleted once no reader uses them.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        self.inner.check_writable()?;
        {
            let mut vs = self.inner.files.versions.lock();
            let id = vs.current().table_by_name(name).ok_or_else(|| Error::UnknownTable(name.to_owned()))?.info.id;
            let mut edit = VersionEdit::default();
            edit.push(EditRecord::DropTable(id));
            self.inner.install_locked(&mut vs, edit, None)?;
            if let Some(state) = self.inner.stores.update(|m| m.without(id)) {
                state.store.drop_table();
            }
        }
        self.inner.delete_obsolete_files();
        Ok(())
    }

    /// Replaces table `name` with table `with`, which takes its name, in one durable step:
    /// `name`'s rows are dropped with it, and handles to `name` taken before go on reaching the
    /// dropped table. With `unchanged_since`, refused with [`Error::TableChanged`] (nothing
    /// changed) if `name` holds a version newer than that sequence number, so a replacement
    /// copied from a snapshot at that point loses no write: commits wait while this checks and
    /// installs. SQL's `ALTER TABLE` rebuilds a table this way.
    ///
    /// # Errors
    /// [`Error::UnknownTable`]; [`Error::InvalidArgument`] for a table replacing itself or a
    /// lineage-engine table.
    pub fn replace_table(&self, name: &str, with: &str, unchanged_since: Option<u64>) -> Result<()> {
        self.inner.check_writable()?;
        self.inner.as_leader(|_| -> Result<()> {
            let mut vs = self.inner.files.versions.lock();
            let current = vs.current().clone();
            let find = |n: &str| current.table_by_name(n).ok_or_else(|| Error::UnknownTable(n.to_owned()));
            let (old, new) = (find(name)?, find(with)?);
            if old.info.id == new.info.id {
                return Err(Error::InvalidArgument(format!("table `{name}` cannot replace itself")));
            }
            for t in [old, new] {
                if let Some(state) = self.inner.stores.pin().get(&t.info.id) {
                    state.store.supports(store::Feature::Replace, &t.info.name)?;
                }
            }
            if let Some(since) = unchanged_since {
                if self.inner.written_after(old, since) {
                    return Err(Error::TableChanged { table: name.to_owned(), since });
                }
            }
            let mut edit = VersionEdit::default();
            edit.push(EditRecord::DropTable(old.info.id));
            edit.push(EditRecord::RenameTable { table: new.info.id, name: name.to_owned() });
            self.inner.install_locked(&mut vs, edit, None)
        })?;
        self.inner.delete_obsolete_files();
        Ok(())
    }

    /// Changes the column-group layout of table `name` while it is read and written (`spec`:
    /// layout text as [`TableOptions::with_layout`] takes it; `None`: whole rows at every
    /// level). Compactions from here on write the new layout; files written before are
    /// rewritten in the background, one at a time when no compaction is due, at most
    /// [`Options::relayout_bytes_per_sec`]. Every read sees the same rows throughout: each
    /// file says which groups it holds. The change is durable when this returns; a restart
    /// goes on with the files left. [`Db::stats`] counts the files still in an earlier layout.
    ///
    /// # Errors
    /// [`Error::UnknownTable`]; [`Error::InvalidArgument`] when the layout does not parse for
    /// the table's schema, for a lineage table, and for a table that keeps one run per column
    /// group (made without [`TableOptions::row_groups`]), whose files do not say their groups.
    pub fn set_layout(&self, name: &str, spec: Option<&str>) -> Result<()> {
        self.inner.set_layout(name, spec)
    }

    /// Whether table `name` holds a version written after sequence number `seq` (a snapshot's
    /// [`Snapshot::seq`]): what a copy of the table made at that snapshot would lack.
    ///
    /// # Errors
    /// [`Error::UnknownTable`].
    pub fn written_after(&self, name: &str, seq: u64) -> Result<bool> {
        let current = self.inner.files.versions.lock().current().clone();
        let t = current.table_by_name(name).ok_or_else(|| Error::UnknownTable(name.to_owned()))?;
        Ok(self.inner.written_after(t, seq))
    }

    /// A handle to an existing table.
    pub fn table(&self, name: &str) -> Result<Table> {
        let view = self.inner.view.load();
        let t = view.version.table_by_name(name).ok_or_else(|| Error::UnknownTable(name.to_owned()))?;
        Ok(Table::new(self.inner.clone(), t.info.clone()))
    }

    /// Names of all tables, sorted.
    pub fn table_names(&self) -> Vec<String> {
        let view = self.inner.view.load();
        let mut v: Vec<String> = view.version.tables.values().map(|t| t.info.name.clone()).collect();
        v.sort();
        v
    }

    /// Applies a batch atomically.
    pub fn write(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        self.inner.write(batch, opts)
    }

    /// Applies `batch` as a replica applies what its leader logged: at the commit time
    /// `commit_ms` the leader chose (Unix ms; held to the newest commit time here, so times never
    /// go back), its operations numbered from the next sequence number here. Replicas that
    /// start alike and apply the same batches in the same order (built by
    /// [`WriteBatch::from_payload`] from the leader's [`WriteBatch::payload`], perhaps with rows
    /// of their own added) hold the same versions under the same sequence numbers and times.
    /// Returns the newest sequence number after the write: the write's last one while nothing
    /// else writes to this database.
    ///
    /// # Errors
    /// [`Error::UnknownTable`] when the batch names a table id this database does not have, else
    /// as [`Db::write`].
    pub fn apply_replicated(&self, batch: WriteBatch, commit_ms: u64, opts: &WriteOptions) -> Result<u64> {
        match self.inner.commit_request(batch, opts, None, Some(commit_ms))? {
            Ok(()) => Ok(self.inner.snapshots.visible()),
            Err(lost) => {
                Err(Error::InvalidArgument(format!("a replicated write was refused as a transaction: {lost:?}")))
            }
        }
    }

    /// Pins the current state for consistent reads until the snapshot is dropped.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(self.inner.snapshots.clone())
    }

    /// A snapshot at an earlier sequence number: `snapshot_as_of(AsOf::Seq(seq))`.
    ///
    /// # Errors
    /// As [`Db::snapshot_as_of`].
    pub fn snapshot_at(&self, seq: u64) -> Result<Snapshot> {
        self.snapshot_as_of(AsOf::Seq(seq))
    }

    /// A snapshot at a past point, a sequence number or a wall-clock time, pinned until it is
    /// dropped; reads through it see the tables of both engines as they were then. The history
    /// reaches back over [`Options::history_retention`] (kept across restarts); without a
    /// window, only to the newest flushed sequence number, or to the last restart on lineage
    /// tables. [`Db::history`] tells how far back reads reach now.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the readable range when the point is outside it, or
    /// when the time is in the future.
    pub fn snapshot_as_of(&self, at: AsOf) -> Result<Snapshot> {
        self.inner.snapshot_as_of(at)
    }

    /// How far back reads as of a past point can reach now.
    pub fn history(&self) -> History {
        self.inner.history()
    }

    /// Writes a lineage checkpoint now: every lineage table's rows as of the newest sequence
    /// number, so recovery needs the WAL only from here on (older WAL files are deleted once
    /// the LSM tables no longer need them either). The lineage thread does this by itself every
    /// [`Options::lineage_checkpoint_bytes`] of lineage writes. Nothing to do without lineage
    /// tables.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.check_writable()?;
        self.inner.checkpoint_lineage()
    }

    /// Tests and instrumentation: while `hold` is set, the lineage thread stops each lineage merge
    /// after it built the new pages and before it swaps them in, holding whatever a merge holds,
    /// so a test can show that readers and writers go on meanwhile. Returns how many merges
    /// have stopped there since open.
    #[doc(hidden)]
    pub fn hold_lineage_merges(&self, hold: bool) -> u64 {
        self.inner.lineage.hold_merges(hold)
    }

    /// Freezes the memtable and waits until every frozen memtable is in Level-0.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// Compacts the files of `table` overlapping `range` down through every level, waiting for
    /// background compactions to pause first. Flushes the memtable before starting.
    pub fn compact_range(&self, table: &str, range: &KeyRange) -> Result<()> {
        let t = self.table(table)?;
        let (lo, hi) = t.encode_range(range)?;
        self.inner.compact_range(t.info().id, &lo, hi.as_deref())
    }

    /// Waits until background work has caught up: no frozen memtable waits for flush, no
    /// level is over its target and no file waits for a re-layout ([`Db::set_layout`]; the
    /// re-layout's rate does not hold while this waits). Writes made meanwhile may create more
    /// work; this returns once it saw none.
    pub fn wait_for_compactions(&self) -> Result<()> {
        self.inner.wait_idle()
    }

    /// Counters of the analytical scan engine since open (blocks read, skipped, passed in bulk).
    pub fn scan_stats(&self) -> crate::scan::ScanStats {
        self.inner.scans.counters.stats()
    }

    /// Per table and level: files, bytes, entries, bytes written, write amplification.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Reads every block of every live file and checks its checksum and structure, and that
    /// each file stores the column group its level's layout says. Returns the number of files
    /// checked.
    pub fn verify(&self) -> Result<usize> {
        let view = self.inner.view.load();
        let mut n = 0;
        for t in view.version.tables.values() {
            for (li, l) in t.levels.iter().enumerate() {
                for f in l.files() {
                    let reader = self.inner.tables.get(f.number)?;
                    let layout = &t.info.runs;
                    let expected = layout.groups(li).iter().find(|g| group_id(g) == f.cg);
                    if expected.is_none_or(|g| g.as_slice() != reader.columns()) {
                        return Err(Error::corruption(
                            self.inner.tables.path(f.number),
                            0,
                            format!("file stores columns {:?}, not a column group of level {li}", reader.columns()),
                        ));
                    }
                    // A row-group table's files below Level-0 hold the groups of their level
                    // (those written before a layout change may still hold earlier groups).
                    let relaid = f.number >= t.relayout_below;
                    if let Some(groups) = t.info.row_groups(li).filter(|_| relaid) {
                        let stored = reader.row_groups().map(|r| r.groups().iter().map(|g| &g.columns));
                        if !stored.is_some_and(|s| s.eq(groups.iter())) {
                            return Err(Error::corruption(
                                self.inner.tables.path(f.number),
                                0,
                                format!("file is not a row-group file of level {li}'s column groups"),
                            ));
                        }
                    }
                    reader.verify()?;
                    if let Some(marks) = t.marks_of(f.number) {
                        let ncols = reader.columns().len();
                        let merged = marks.merged();
                        let stray = merged.marks().iter().find(|m| {
                            u64::from(m.row) >= reader.entries() || (m.col != WHOLE && usize::from(m.col) >= ncols)
                        });
                        if let Some(m) = stray {
                            return Err(Error::corruption(
                                self.inner.files.versions.lock().manifest_path(),
                                0,
                                format!("supersede mark {m:?} of file {} names no version of it", f.number),
                            ));
                        }
                    }
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// Recomputes the supersede vectors of every table from all its versions and compares them
    /// with the stored ones at every live read point (the snapshots and the newest state).
    /// Reads every version into memory: meant for tests.
    #[doc(hidden)]
    pub fn check_supersede_marks(&self) -> Result<()> {
        let mut points = self.inner.snapshots.capture();
        points.push(self.inner.snapshots.visible());
        let version = self.inner.view.pin().version.clone();
        points.sort_unstable();
        points.dedup();
        for t in version.tables.values() {
            crate::compaction::supersede::check(&self.inner.tables, t, &points)?;
        }
        Ok(())
    }

    /// Stops background work and releases the directory lock. Reports an earlier background
    /// failure, if any.
    pub fn close(mut self) -> Result<()> {
        self.shutdown();
        match self.inner.sched.failure() {
            Some(e) => Err(Error::Poisoned(e)),
            None => Ok(()),
        }
    }

    fn shutdown(&mut self) {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.inner.lineage.hold_merges(false);
        self.inner.sched.shutdown();
        if self.inner.sched.failure().is_none() {
            self.inner.delete_obsolete_files();
        }
        for t in self.inner.view.load().version.tables.values() {
            t.info.workload.flush_trace();
        }
        self.inner.files.dir_lock.lock().take();
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl DbInner {
    /// The database object over what recovery found, with a new WAL to write to; also returns
    /// the memtable of replayed LSM writes, for [`Self::persist_replayed`].
    fn new(
        dir: PathBuf,
        opts: Options,
        r: recover::Recovered,
        compaction_work: Arc<crate::sync::Events>,
    ) -> Result<(DbInner, Replayed)> {
        let fs = r.fs;
        let vs = r.versions;
        let wal_number = r.next_file.fetch_add(1, Ordering::SeqCst);
        let wal = WalWriter::create(fs.as_ref(), &dir.join(wal_name(wal_number)))?;
        fs.sync_dir(&dir)?;
        let current = vs.current().clone();
        let blocks = Arc::new(BlockCache::new(opts.block_cache_size));
        let tier_dirs = r.tiers.iter().map(|t| PathBuf::from(&t.dir)).collect();
        let tables = Arc::new(TableCache::new(fs.clone(), tier_dirs, blocks, opts.heat_half_life));
        for f in current.files() {
            tables.place(f.number, f.tier);
        }
        let (last_seq, mut clock) = (r.last_seq, r.clock);
        let snapshots = Arc::new(SnapshotList::default());
        snapshots.publish(last_seq);
        let retention_ms = match opts.history_retention {
            Some(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            None => vs.counters.retention_ms,
        };
        clock.record(unix_ms(std::time::SystemTime::now()), last_seq);
        // What an earlier process merged cannot be read any more; nor can what lies outside the
        // retention window, nor lineage history from before what the checkpoint holds.
        let mut floor = vs.counters.history_floor.max(r.lineage_history_from);
        if retention_ms > 0 {
            floor = floor.max(history_horizon(&clock, retention_ms));
        }
        snapshots.raise_floor(floor.min(last_seq));
        let view = ReadView { mem: Arc::new(Memtable::new(wal_number)), imm: Vec::new(), version: current.clone() };
        let stores = store::StoreMap::new(r.stores);
        let lineage_mem = stores.values().filter_map(|s| s.store.lineage()).map(|l| l.table().sizes().bytes()).sum();
        let lineage_work = Arc::new(crate::sync::Events::new(&site::BACKGROUND));
        let replayed = Replayed {
            mem: r.replayed,
            version: current.clone(),
            wal_number,
            last_seq,
            lineage_log: vs.counters.lineage_log,
        };
        let many_cores = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 4;
        let inner = DbInner {
            files: Files {
                versions: Mutex::new(&site::VERSIONS, vs),
                next_file: r.next_file,
                pending_outputs: Mutex::new(&site::BACKGROUND, HashSet::new()),
                live_versions: Mutex::new(&site::VERSIONS, vec![Arc::downgrade(&current)]),
                dir_lock: Mutex::new(&site::OTHER, Some(r.lock)),
            },
            view: crate::read::ViewCell::new(&site::VIEW, view),
            snapshots,
            commit: commit::Committer::new(
                (wal_number, wal),
                clock,
                r.batches,
                last_seq,
                commit::CommitOptions {
                    // Spinning writers and parallel memtable inserts pay off only with cores to
                    // spare.
                    spin: opts.spin_before_park.unwrap_or(many_cores),
                    parallel_inserts: opts.parallel_memtable_inserts.unwrap_or(many_cores),
                    window_bytes: opts.txn_window_bytes,
                },
            ),
            sched: scheduler::Scheduler::new(compaction_work, lineage_work.clone()),
            stores: crate::sync::Swap::new(&site::STORES, stores),
            lineage: store::LineageShared::new(lineage_mem, lineage_work, &opts),
            tables,
            scans: crate::scan::Scans::new(opts.scan_threads, opts.shared_scan_window),
            point_pool: std::sync::OnceLock::new(),
            io: Mutex::new(&site::COUNTERS, IoCounters::default()),
            closed: AtomicBool::new(false),
            #[cfg(test)]
            install_hook: Mutex::new(&site::OTHER, None),
            config: Config { dir, fs, opts, tiers: r.tiers, retention_ms },
        };
        Ok((inner, replayed))
    }

    /// Persists what recovery replayed: the LSM writes as Level-0 files, then a lineage
    /// checkpoint, so no WAL written before this open (whose unsynced tail a power loss may yet
    /// tear) is read again; the old logs are then deleted.
    fn persist_replayed(&self, r: &Replayed) -> Result<()> {
        let (mut edit, flushed) = match r.mem.is_empty() {
            true => (VersionEdit::default(), Vec::new()),
            false => self.write_level0(&r.mem, &r.version)?,
        };
        edit.push(EditRecord::LogNumber(r.wal_number));
        edit.push(EditRecord::LastSequence(r.last_seq));
        self.install_flush(edit, flushed, &r.version, None)?;
        self.files.pending_outputs.lock().clear();
        if r.lineage_log != 0 {
            self.checkpoint_lineage()?;
        }
        self.delete_obsolete_files();
        Ok(())
    }

    /// See [`Db::set_layout`].
    pub(crate) fn set_layout(&self, name: &str, spec: Option<&str>) -> Result<()> {
        self.check_writable()?;
        let inner = self;
        let _manual = inner.sched.manual_ops.lock();
        let t = inner.view.pin().version.table_by_name(name).cloned();
        let t = t.ok_or_else(|| Error::UnknownTable(name.to_owned()))?;
        if let Some(state) = inner.stores.pin().get(&t.info.id) {
            state.store.supports(store::Feature::Layout, name)?;
        }
        if !t.info.options.row_groups {
            return Err(Error::InvalidArgument(format!(
                "table {name} keeps one run per column group, so its layout cannot change in place; \
                 create a table with the new layout and copy the rows"
            )));
        }
        let num_levels = inner.config.opts.num_levels;
        if let Some(spec) = spec {
            Layout::parse(spec, &t.info.schema, num_levels)?;
        }
        let next = t.info.with_layout(spec.map(str::to_owned))?;
        if next.layout.spec(&t.info.schema, num_levels) == t.info.layout.spec(&t.info.schema, num_levels) {
            return Ok(());
        }
        // No compaction may be running: every file numbered from here on holds the new layout.
        inner.sched.pause()?;
        let mut edit = VersionEdit::default();
        let before = inner.files.next_file.load(Ordering::SeqCst);
        edit.push(EditRecord::SetLayout { table: t.info.id, layout: spec.map(str::to_owned), before });
        let res = inner.install(edit, None);
        inner.sched.resume();
        res
    }

    /// Fails once the database is closed. Reads only need this.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Fails once closed or after a failure left the files in doubt (writes and DDL).
    pub(crate) fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        self.sched.check()
    }

    /// Records a failure that leaves the on-disk state uncertain; all later writes fail.
    pub(crate) fn poison(&self, e: &Error) {
        self.sched.poison(e);
    }

    /// Runs the install hook if it waits for `what` (tests only).
    #[cfg(test)]
    pub(crate) fn fire_install_hook(&self, what: &str) {
        let hook = {
            let mut h = self.install_hook.lock();
            if h.as_ref().is_some_and(|(w, _)| *w == what) {
                h.take()
            } else {
                None
            }
        };
        if let Some((_, f)) = hook {
            f();
        }
    }

    /// Allocates a file number protected from cleanup until the output is installed.
    pub(crate) fn alloc_output(&self) -> u64 {
        let n = self.files.next_file.fetch_add(1, Ordering::SeqCst);
        self.files.pending_outputs.lock().insert(n);
        n
    }

    /// Logs and applies an edit, then publishes the new version (and drops `flushed` from the
    /// frozen memtables) in one swap of the read view.
    pub(crate) fn install(&self, edit: VersionEdit, flushed: Option<&Arc<Memtable>>) -> Result<()> {
        let mut vs = self.files.versions.lock();
        self.install_locked(&mut vs, edit, flushed)
    }

    pub(crate) fn install_locked(
        &self,
        vs: &mut VersionSet,
        mut edit: VersionEdit,
        flushed: Option<&Arc<Memtable>>,
    ) -> Result<()> {
        if let Some(m) = flushed {
            let view = self.view.load();
            let oldest_left = view
                .imm
                .iter()
                .filter(|x| !Arc::ptr_eq(x, m))
                .map(|x| x.wal_number())
                .chain([view.mem.wal_number()])
                .min();
            if let Some(n) = oldest_left {
                edit.push(EditRecord::LogNumber(n));
            }
            edit.push(EditRecord::LastSequence(m.max_seq()));
        }
        edit.push(EditRecord::History { retention_ms: self.config.retention_ms, floor: self.snapshots.floor() });
        if self.config.retention_ms > 0 {
            // The clock samples taken since the last edit, so times stay resolvable after a restart.
            edit.push(EditRecord::Clock(self.commit.clock.lock().since(vs.clock.last_ms())));
            // And the batch ranges committed since, so reads as of a sequence number stay
            // whole-batch after a restart.
            let batches = self.commit.batches.lock();
            let ranges = batches.after(vs.batches.last());
            if !ranges.is_empty() || batches.start() != vs.batches.start() {
                edit.push(EditRecord::Batches { known_from: batches.start(), ranges });
            }
        }
        let v = match vs.log_and_apply(self.config.fs.as_ref(), edit, &self.files.next_file) {
            Ok(v) => v,
            Err(e) => {
                self.poison(&e);
                return Err(e);
            }
        };
        self.view.update(|view| {
            let imm = view.imm.iter().filter(|x| flushed.is_none_or(|m| !Arc::ptr_eq(x, m))).cloned().collect();
            (ReadView { mem: view.mem.clone(), imm, version: v.clone() }, ())
        });
        // Batches wholly below the history floor bound no read any more.
        self.commit.batches.lock().trim_through(self.snapshots.floor());
        let mut live = self.files.live_versions.lock();
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&v));
        drop(live);
        self.sched.installed();
        Ok(())
    }

    /// Deletes SSTs no live version names, WALs below the log number and old manifests.
    pub(crate) fn delete_obsolete_files(&self) {
        if self.sched.failure().is_some() {
            // After a failure the in-memory state may be ahead of the disk: delete nothing.
            return;
        }
        let vs = self.files.versions.lock();
        // List first: any file in the listing was created after its number became pending, and
        // stays pending until it is installed, which cannot happen while we hold the version lock.
        let mut listed: Vec<(&Path, Vec<String>)> = Vec::new();
        for d in std::iter::once(self.config.dir.as_path()).chain(self.tables.tier_dirs().iter().map(PathBuf::as_path))
        {
            if listed.iter().any(|(l, _)| *l == d) {
                continue;
            }
            let Ok(names) = self.config.fs.list(d) else {
                return;
            };
            listed.push((d, names));
        }
        let mut live: HashSet<u64> = self.files.pending_outputs.lock().clone();
        {
            let mut versions = self.files.live_versions.lock();
            versions.retain(|w| w.strong_count() > 0);
            for v in versions.iter().filter_map(Weak::upgrade) {
                live.extend(v.file_numbers());
            }
        }
        for (d, names) in listed {
            let home = d == self.config.dir;
            for name in names {
                let obsolete = match DbFile::parse(&name) {
                    Some(DbFile::Sst(n)) => {
                        let dead = !live.contains(&n);
                        if dead {
                            self.tables.evict(n);
                        }
                        // A live number in another tier's directory is not this file.
                        dead || self.tables.tier_dir(self.tables.tier_of(n)) != d
                    }
                    Some(DbFile::Wal(n)) if home => n < vs.counters.oldest_log(),
                    Some(DbFile::Manifest(n)) if home => n != vs.manifest_number(),
                    Some(DbFile::Checkpoint(n)) if home => n != vs.counters.lineage_checkpoint.0 && !live.contains(&n),
                    _ => false,
                };
                if obsolete {
                    // A file we fail to delete now is retried at the next cleanup.
                    let _ = self.config.fs.remove(&d.join(&name));
                }
            }
        }
    }
}
