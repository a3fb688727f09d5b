//! The database: opening and recovering, the catalog of tables, and the shared state every
//! thread works on. The work itself lives in submodules: [`commit`] (group commit and memtable
//! rotation), [`background`] (flush, compaction, obsolete-file cleanup), [`read`] (handing out
//! read points) and [`table`] (the per-table API).
//!
//! Lock order, outermost first: commit leader → background state → version set → read view
//! (its writers). The leader lock, which owns the WAL writer, is held across the group's WAL
//! write; no other lock is held across a WAL or SST write except the version-set lock around
//! manifest appends. Reads take none of them.

mod advise;
mod background;
mod commit;
#[cfg(test)]
mod contention_tests;
mod ingest;
mod lineage;
#[cfg(test)]
mod marks_tests;
mod options;
pub(crate) mod read;
mod sequence;
mod stats;
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

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use crate::sync::{site, Condvar, Mutex};

use crate::column_group::{group_id, Layout};
use crate::error::{Error, Result};
use crate::lineage::LineageTable;
use crate::memtable::{Fold, Memtable};
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
use crate::write::wal::{read_log, Tail, WalWriter, WAL_MAGIC};
use read::history_horizon;

#[derive(Default)]
pub(crate) struct BgState {
    pub shutting_down: bool,
    pub flush_running: bool,
    pub busy: HashSet<u64>,
    pub running_compactions: usize,
    /// Manual compactions in progress; background picking pauses meanwhile.
    pub manual: usize,
    /// Callers waiting for the tree to settle: staging compactions run for every file whose
    /// marking is deferred, not only when due.
    pub settling: usize,
    /// Sequence numbers of the ingests building their files (see [`ingest`]); they install in
    /// this order.
    pub ingests: std::collections::BTreeSet<u64>,
    /// The largest sequence number an ingest was given since open.
    pub ingest_seq: u64,
}

/// Per (table, level) IO counters, since open.
#[derive(Default)]
pub(crate) struct IoCounters {
    pub written: HashMap<(u32, usize), u64>,
    /// Bytes of input files compaction read, by (table, level the files were in).
    pub read: HashMap<(u32, usize), u64>,
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

pub(crate) struct DbInner {
    pub dir: PathBuf,
    pub fs: Arc<dyn Fs>,
    pub opts: Options,
    /// The storage tiers, first the fast one (one, the database directory, without tiers).
    pub tiers: Vec<crate::tier::TierRecord>,
    pub lock: Mutex<Option<Box<dyn DirLock>>>,
    pub snapshots: Arc<SnapshotList>,
    pub view: crate::read::ViewCell,
    pub versions: Mutex<VersionSet>,
    pub next_file: AtomicU64,
    /// Writes waiting for a commit leader (see [`DbInner::commit_request`]).
    pub commit_queue: crossbeam_queue::SegQueue<commit::Request>,
    /// Held by the commit leader, with what only the leader touches.
    pub leader: Mutex<commit::Leader>,
    /// The number of the WAL the leader appends to.
    pub wal_number: AtomicU64,
    /// Whether write transactions are open, so that committed rows must be recorded in the
    /// conflict window (set and cleared under its lock; see `commit_group`).
    pub conflicts_open: AtomicBool,
    /// Writers wait awake a little before they park ([`Options::spin_before_park`]).
    pub spin: bool,
    /// Groups may insert into the memtable in parallel ([`Options::parallel_memtable_inserts`]).
    pub parallel_inserts: bool,
    /// Bytes written into each table by commits since open.
    pub ingested: papaya::HashMap<u32, AtomicU64>,
    /// Rows committed while write transactions are open (see [`crate::mvcc::conflict`]).
    pub conflicts: Mutex<crate::mvcc::conflict::ConflictWindow>,
    /// Rows locked by open transactions (see [`crate::mvcc::locks`]).
    pub row_locks: crate::mvcc::locks::RowLocks,
    pub tables: Arc<TableCache>,
    pub bg: Mutex<BgState>,
    pub bg_cv: Condvar,
    pub bg_error: Mutex<Option<String>>,
    /// Set once `bg_error` holds a failure.
    pub poisoned: AtomicBool,
    pub pending_outputs: Mutex<HashSet<u64>>,
    /// Where temperature-blind eviction goes on from: (table, largest key of the last file it
    /// moved to the slow tier).
    pub evict_cursor: Mutex<(u32, Vec<u8>)>,
    /// When the background re-layout may rewrite its next file (it reads at most
    /// [`Options::relayout_bytes_per_sec`]).
    pub relayout_after: Mutex<std::time::Instant>,
    /// Held by a manual compaction, a layout change or a change of the traced tables for its
    /// whole length, so none runs inside another.
    pub manual_ops: Mutex<()>,
    pub live_versions: Mutex<Vec<Weak<Version>>>,
    pub io: Mutex<IoCounters>,
    pub closed: AtomicBool,
    /// The scan engine's counters, shared-pass registry and thread pool.
    pub scans: crate::scan::Scans,
    /// The pool a large `multi_get` reads its key ranges on, started on first use.
    pub point_pool: std::sync::OnceLock<rayon::ThreadPool>,
    /// The lineage-engine tables, by id.
    pub lineage: crate::sync::Swap<HashMap<u32, Arc<LineageTable>>>,
    /// WAL bytes of lineage writes since the last lineage checkpoint.
    pub lineage_wal_bytes: AtomicU64,
    /// Bytes the lineage tables hold: measured by the merge thread, estimated for the writes
    /// since (see [`Options::lineage_memory_budget`]).
    pub lineage_mem: AtomicU64,
    /// Tests: while set, the merge thread stops at the point where a merge has built its pages
    /// and is about to swap them in ([`Db::hold_lineage_merges`]).
    pub merge_hold: Mutex<bool>,
    pub merge_hold_cv: Condvar,
    /// Merges that stopped at that point.
    pub merge_holds: AtomicU64,
    /// Wall-clock time to sequence numbers (see [`crate::mvcc::clock`]).
    pub clock: crate::mvcc::clock::SharedClock,
    /// Where committed batches of several operations begin and end (see
    /// [`crate::mvcc::batches`]), for reads as of a sequence number.
    pub batches: Mutex<crate::mvcc::batches::Batches>,
    /// The history retention window in milliseconds (0: none), as recorded in the manifest.
    pub retention_ms: u64,
    /// The tables' sequences in use since the open, by table id and name (see
    /// [`Table::sequence`]).
    pub sequences: Mutex<HashMap<u32, HashMap<String, sequence::Sequence>>>,
    /// Tests: runs once, on the thread of the first flush or compaction (as named) about to
    /// take the version lock to install.
    #[cfg(test)]
    pub install_hook: Mutex<Option<InstallHook>>,
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
    threads: Vec<JoinHandle<()>>,
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
        // Tiers given with device profiles run on a filesystem slowed to them.
        let profiles: Vec<(PathBuf, crate::vfs::DeviceProfile)> =
            opts.tiers.iter().filter_map(|t| Some((t.dir.clone(), t.profile?))).collect();
        let fs: Arc<dyn Fs> = match profiles.is_empty() {
            true => opts.fs.clone(),
            false => Arc::new(crate::vfs::SlowFs::new(opts.fs.clone(), profiles)),
        };
        fs.create_dir_all(&dir)?;
        let lock = fs.lock(&dir.join("LOCK"))?;
        // Files numbered after the manifest last recorded its counter (WALs from rotations,
        // unfinished outputs) may exist: never hand their numbers out again.
        let names = fs.list(&dir)?;
        let highest = names.iter().filter_map(|n| DbFile::parse(n)).map(DbFile::number).max().unwrap_or(0);
        let mut vs = if fs.exists(&dir.join("CURRENT")) {
            VersionSet::recover(fs.as_ref(), &dir, opts.num_levels, highest + 1)?
        } else if opts.create_if_missing {
            VersionSet::create(fs.as_ref(), &dir, opts.num_levels)?
        } else {
            return Err(Error::InvalidArgument(format!("no database at {}", dir.display())));
        };
        // The tiers: as given, or as recorded; their directories hold SSTs (and numbers) too.
        let (tiers, record_tiers) =
            crate::tier::settle(&dir, &opts.tiers, &vs.tiers, vs.current().files().next().is_some())?;
        if record_tiers && vs.tiers.is_empty() {
            crate::tier::check_new_dirs(fs.as_ref(), &dir, &tiers)?;
        }
        let tier_dirs: Vec<PathBuf> = tiers.iter().map(|t| PathBuf::from(&t.dir)).collect();
        if let Some(f) = vs.current().files().find(|f| usize::from(f.tier) >= tiers.len()) {
            let (n, t) = (f.number, f.tier);
            return Err(Error::corruption(
                vs.manifest_path(),
                0,
                format!("file {n} on tier {t}, which is not recorded"),
            ));
        }
        let mut highest_on_tiers = 0;
        for d in tier_dirs.iter().filter(|d| **d != dir) {
            // A missing directory is reported by the marker check below, naming its tier.
            let on_tier = match fs.list(d) {
                Err(_) if !fs.exists(d) => Vec::new(),
                listed => listed?,
            };
            let top = on_tier.iter().filter_map(|n| DbFile::parse(n)).map(DbFile::number).max();
            highest_on_tiers = highest_on_tiers.max(top.unwrap_or(0));
        }
        let next_file = AtomicU64::new(vs.counters.next_file.max(highest_on_tiers + 1));
        // Tiers are recorded before anything is written to them (markers included), so a crash
        // in between leaves tiers without files, whose markers the next open writes.
        if record_tiers {
            let mut edit = VersionEdit::default();
            edit.push(EditRecord::Tiers(tiers.clone()));
            vs.log_and_apply(fs.as_ref(), edit, &next_file)?;
        }
        let has_files: Vec<bool> = vs.current().tier_bytes(tiers.len()).iter().map(|&b| b > 0).collect();
        crate::tier::check_dirs(fs.as_ref(), &dir, &tiers, &has_files)?;
        let mut last_seq = vs.counters.last_sequence;

        // Replay WALs not yet covered by SSTs (LSM tables) or checkpoints (lineage tables),
        // oldest first: LSM writes into one memtable, lineage writes into their tables.
        let log_number = vs.counters.log_number;
        let lineage_log = vs.counters.lineage_log;
        let oldest = vs.counters.oldest_log();
        let mut wals: Vec<u64> = names
            .iter()
            .filter_map(|n| match DbFile::parse(n) {
                Some(DbFile::Wal(w)) if w >= oldest => Some(w),
                _ => None,
            })
            .collect();
        wals.sort_unstable();
        let replay = Arc::new(Memtable::new(0));
        // The manifest's clock samples, then the commit times the WAL holds.
        let mut clock = vs.clock.clone();
        let mut batches = vs.batches.clone();
        let current = vs.current().clone();
        let lineage: HashMap<u32, Arc<LineageTable>> = current
            .tables
            .values()
            .filter(|t| t.info.options.engine == Engine::Lineage)
            .map(|t| (t.info.id, Arc::new(LineageTable::new(t.info.clone(), opts.lineage_range))))
            .collect();
        // Lineage tables start from their checkpoint; the WAL brings what came after it.
        let (checkpoint, checkpoint_seq) = vs.counters.lineage_checkpoint;
        let mut lineage_history_from = 0;
        if checkpoint != 0 {
            let path = dir.join(checkpoint_name(checkpoint));
            lineage_history_from = crate::lineage::checkpoint::load(fs.as_ref(), &path, &lineage)?;
        }
        for (i, &n) in wals.iter().enumerate() {
            let path = dir.join(wal_name(n));
            let (records, tail) = read_log(fs.as_ref(), &path, WAL_MAGIC)?;
            for rec in records {
                let (first, commit_ms, ops) = WriteBatch::decode(&rec)
                    .map_err(|e| Error::corruption(&path, 0, format!("bad WAL batch: {}", e.0)))?;
                if let (Some(ms), Some(n)) = (commit_ms, ops.len().checked_sub(1)) {
                    clock.record(ms, first + n as u64);
                }
                if let Some(n) = ops.len().checked_sub(1) {
                    batches.record(first, first + n as u64);
                }
                for (j, op) in ops.iter().enumerate() {
                    if let Some(t) = lineage.get(&op.table_id) {
                        if n >= lineage_log && first + j as u64 > checkpoint_seq {
                            t.apply(op.kind, &op.key, &op.row, first + j as u64)
                                .map_err(|e| Error::corruption(&path, 0, format!("bad WAL row: {}", e.0)))?;
                        }
                    } else if let (Some(t), true) = (current.tables.get(&op.table_id), n >= log_number) {
                        replay
                            .insert(
                                op.table_id,
                                &op.key,
                                first + j as u64,
                                op.kind,
                                &op.row,
                                Some(Fold::unread(&t.info.value_types)),
                            )
                            .map_err(|e| Error::corruption(&path, 0, format!("bad WAL row: {}", e.0)))?;
                    }
                }
                if !ops.is_empty() {
                    last_seq = last_seq.max(first + ops.len() as u64 - 1);
                }
            }
            if matches!(tail, Tail::Truncated(_)) && i + 1 < wals.len() {
                // A torn record in an older log means the later logs were never acknowledged
                // under sync (rotation syncs the old log first): stop at the tear.
                break;
            }
        }
        let wal_number = next_file.fetch_add(1, Ordering::SeqCst);
        let wal = WalWriter::create(fs.as_ref(), &dir.join(wal_name(wal_number)))?;
        fs.sync_dir(&dir)?;

        let blocks = Arc::new(BlockCache::new(opts.block_cache_size));
        let tables = Arc::new(TableCache::new(fs.clone(), tier_dirs, blocks, opts.heat_half_life));
        for f in current.files() {
            tables.place(f.number, f.tier);
        }
        let snapshots = Arc::new(SnapshotList::default());
        snapshots.publish(last_seq);
        let retention_ms = match opts.history_retention {
            Some(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
            None => vs.counters.retention_ms,
        };
        clock.record(unix_ms(std::time::SystemTime::now()), last_seq);
        // What an earlier process merged cannot be read any more; nor can what lies outside the
        // retention window, nor lineage history from before what the checkpoint holds.
        let mut floor = vs.counters.history_floor;
        if retention_ms > 0 {
            floor = floor.max(history_horizon(&clock, retention_ms));
        }
        if !lineage.is_empty() {
            floor = floor.max(lineage_history_from);
        }
        snapshots.raise_floor(floor.min(last_seq));
        let view = ReadView { mem: Arc::new(Memtable::new(wal_number)), imm: Vec::new(), version: current.clone() };
        let lineage_mem = lineage.values().map(|t| t.sizes().bytes()).sum();
        // Spinning writers and parallel memtable inserts pay off only with cores to spare.
        let many_cores = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 4;
        let inner = Arc::new(DbInner {
            dir: dir.clone(),
            fs: fs.clone(),
            opts: opts.clone(),
            tiers: tiers.clone(),
            lock: Mutex::new(&site::OTHER, Some(lock)),
            snapshots,
            view: crate::read::ViewCell::new(&site::VIEW, view),
            versions: Mutex::new(&site::VERSIONS, vs),
            next_file,
            commit_queue: crossbeam_queue::SegQueue::new(),
            leader: Mutex::new(&site::COMMIT, commit::Leader::new(wal, (clock.last_ms(), last_seq))),
            wal_number: AtomicU64::new(wal_number),
            conflicts_open: AtomicBool::new(false),
            spin: opts.spin_before_park.unwrap_or(many_cores),
            parallel_inserts: opts.parallel_memtable_inserts.unwrap_or(many_cores),
            ingested: papaya::HashMap::new(),
            conflicts: Mutex::new(&site::CONFLICTS, crate::mvcc::conflict::ConflictWindow::new(opts.txn_window_bytes)),
            row_locks: crate::mvcc::locks::RowLocks::default(),
            tables,
            bg: Mutex::new(&site::BACKGROUND, BgState::default()),
            bg_cv: Condvar::new(),
            bg_error: Mutex::new(&site::BACKGROUND, None),
            poisoned: AtomicBool::new(false),
            pending_outputs: Mutex::new(&site::BACKGROUND, HashSet::new()),
            evict_cursor: Mutex::new(&site::BACKGROUND, (0, Vec::new())),
            relayout_after: Mutex::new(&site::BACKGROUND, std::time::Instant::now()),
            manual_ops: Mutex::new(&site::OTHER, ()),
            live_versions: Mutex::new(&site::VERSIONS, vec![Arc::downgrade(&current)]),
            io: Mutex::new(&site::COUNTERS, IoCounters::default()),
            closed: AtomicBool::new(false),
            scans: crate::scan::Scans::new(opts.scan_threads, opts.shared_scan_window),
            point_pool: std::sync::OnceLock::new(),
            lineage: crate::sync::Swap::new(&site::LINEAGE, lineage),
            lineage_mem: AtomicU64::new(lineage_mem),
            lineage_wal_bytes: AtomicU64::new(0),
            merge_hold: Mutex::new(&site::LINEAGE, false),
            merge_hold_cv: Condvar::new(),
            merge_holds: AtomicU64::new(0),
            clock: crate::mvcc::clock::SharedClock::new(clock),
            batches: Mutex::new(&site::BATCHES, batches),
            retention_ms,
            sequences: Mutex::new(&site::SEQUENCES, HashMap::new()),
            #[cfg(test)]
            install_hook: Mutex::new(&site::OTHER, None),
        });

        // Persist what was replayed as Level-0 files, then retire the old logs.
        let (mut edit, flushed) = if replay.is_empty() {
            (VersionEdit::default(), Vec::new())
        } else {
            inner.write_level0(&replay, &current)?
        };
        edit.push(EditRecord::LogNumber(wal_number));
        edit.push(EditRecord::LastSequence(last_seq));
        inner.install_flush(edit, flushed, &current, None)?;
        inner.pending_outputs.lock().clear();
        if lineage_log != 0 {
            // Likewise for lineage tables: checkpoint what was replayed, so no WAL written
            // before this open (whose unsynced tail a power loss may yet tear) is read again.
            inner.checkpoint_lineage()?;
        }
        inner.delete_obsolete_files();
        inner.resume_traces();

        let mut db = Db { inner, threads: Vec::new() };
        for i in 0..=opts.compaction_threads + 1 {
            let inner = db.inner.clone();
            let spawned = match i {
                0 => std::thread::Builder::new().name("strata-flush".into()).spawn(move || inner.background_loop(true)),
                1 => std::thread::Builder::new().name("strata-merge".into()).spawn(move || inner.merge_loop()),
                _ => std::thread::Builder::new()
                    .name(format!("strata-compact-{}", i - 1))
                    .spawn(move || inner.background_loop(false)),
            };
            match spawned {
                Ok(t) => db.threads.push(t),
                // Dropping `db` stops and joins the threads already started.
                Err(e) => return Err(Error::io(&dir, e)),
            }
        }
        if let Some(every) = opts.self_advise {
            let inner = db.inner.clone();
            let spawned =
                std::thread::Builder::new().name("strata-advise".into()).spawn(move || inner.self_advise_loop(every));
            db.threads.push(spawned.map_err(|e| Error::io(&dir, e))?);
        }
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
        let info = {
            let mut vs = self.inner.versions.lock();
            if vs.current().table_by_name(name).is_some() {
                return Err(Error::TableExists(name.to_owned()));
            }
            let id = vs.counters.next_table_id;
            let lineage = options.engine == Engine::Lineage;
            // Row-group files are the LSM engine's: a lineage table has no SST files.
            let options = if lineage { options.with_row_groups(false) } else { options };
            match &options.layout {
                Some(_) if lineage => {
                    return Err(Error::InvalidArgument(
                        "column-group layouts apply to the LSM engine; a lineage table takes none".into(),
                    ))
                }
                Some(spec) => {
                    Layout::parse(spec, &schema, self.inner.opts.num_levels)?;
                }
                None => {}
            }
            if lineage && schema.value_columns().len() > crate::lineage::MAX_COLUMNS {
                return Err(Error::InvalidArgument(format!(
                    "a lineage table has at most {} columns besides its key, got {}",
                    crate::lineage::MAX_COLUMNS,
                    schema.value_columns().len()
                )));
            }
            let info = Arc::new(TableInfo::new(id, name.to_owned(), Arc::new(schema), options)?);
            let mut edit = VersionEdit::default();
            edit.push(EditRecord::CreateTable((*info).clone()));
            edit.push(EditRecord::NextTableId(id + 1));
            if lineage && vs.counters.lineage_log == 0 {
                // From now on the WAL is this table's only durable copy: keep it.
                edit.push(EditRecord::LineageLogNumber(self.inner.wal_number.load(Ordering::SeqCst)));
            }
            if lineage {
                let t = Arc::new(LineageTable::new(info.clone(), self.inner.opts.lineage_range));
                self.inner.lineage.update(|m| {
                    let mut m = m.clone();
                    m.insert(id, t);
                    (m, ())
                });
            }
            if let Err(e) = self.inner.install_locked(&mut vs, edit, None) {
                self.inner.lineage.update(|m| {
                    let mut m = m.clone();
                    m.remove(&id);
                    (m, ())
                });
                return Err(e);
            }
            info
        };
        Ok(Table::new(self.inner.clone(), info))
    }

    /// Drops a table; its files are deleted once no reader uses them.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        self.inner.check_writable()?;
        {
            let mut vs = self.inner.versions.lock();
            let id = vs.current().table_by_name(name).ok_or_else(|| Error::UnknownTable(name.to_owned()))?.info.id;
            let mut edit = VersionEdit::default();
            edit.push(EditRecord::DropTable(id));
            self.inner.install_locked(&mut vs, edit, None)?;
            let removed = self.inner.lineage.update(|m| {
                let mut m = m.clone();
                let t = m.remove(&id);
                (m, t)
            });
            if let Some(t) = removed {
                t.dropped.store(true, Ordering::Release);
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
            let mut vs = self.inner.versions.lock();
            let current = vs.current().clone();
            let find = |n: &str| current.table_by_name(n).ok_or_else(|| Error::UnknownTable(n.to_owned()));
            let (old, new) = (find(name)?, find(with)?);
            if old.info.id == new.info.id {
                return Err(Error::InvalidArgument(format!("table `{name}` cannot replace itself")));
            }
            if old.info.options.engine == Engine::Lineage || new.info.options.engine == Engine::Lineage {
                return Err(Error::InvalidArgument("lineage-engine tables are not replaced".into()));
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
        let current = self.inner.versions.lock().current().clone();
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
    /// the LSM tables no longer need them either). The merge thread does this by itself every
    /// [`Options::lineage_checkpoint_bytes`] of lineage writes. Nothing to do without lineage
    /// tables.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.check_writable()?;
        self.inner.checkpoint_lineage()
    }

    /// Tests and instrumentation: while `hold` is set, the merge thread stops each lineage merge
    /// after it built the new pages and before it swaps them in, holding whatever a merge holds,
    /// so a test can show that readers and writers go on meanwhile. Returns how many merges
    /// have stopped there since open.
    #[doc(hidden)]
    pub fn hold_lineage_merges(&self, hold: bool) -> u64 {
        *self.inner.merge_hold.lock() = hold;
        self.inner.merge_hold_cv.notify_all();
        self.inner.merge_holds.load(Ordering::SeqCst)
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
                                self.inner.versions.lock().manifest_path(),
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
        match self.inner.bg_error.lock().clone() {
            Some(e) => Err(Error::Poisoned(e)),
            None => Ok(()),
        }
    }

    fn shutdown(&mut self) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner.bg.lock().shutting_down = true;
        self.inner.bg_cv.notify_all();
        *self.inner.merge_hold.lock() = false;
        self.inner.merge_hold_cv.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if self.inner.bg_error.lock().is_none() {
            self.inner.delete_obsolete_files();
        }
        for t in self.inner.view.load().version.tables.values() {
            t.info.workload.flush_trace();
        }
        self.inner.lock.lock().take();
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl DbInner {
    /// See [`Db::set_layout`].
    pub(crate) fn set_layout(&self, name: &str, spec: Option<&str>) -> Result<()> {
        self.check_writable()?;
        let inner = self;
        let _manual = inner.manual_ops.lock();
        let t = inner.view.pin().version.table_by_name(name).cloned();
        let t = t.ok_or_else(|| Error::UnknownTable(name.to_owned()))?;
        if t.info.options.engine != Engine::Lsm {
            return Err(Error::InvalidArgument(format!("table {name} is on the lineage engine, which has no layout")));
        }
        if !t.info.options.row_groups {
            return Err(Error::InvalidArgument(format!(
                "table {name} keeps one run per column group, so its layout cannot change in place; \
                 create a table with the new layout and copy the rows"
            )));
        }
        let num_levels = inner.opts.num_levels;
        if let Some(spec) = spec {
            Layout::parse(spec, &t.info.schema, num_levels)?;
        }
        let next = t.info.with_layout(spec.map(str::to_owned))?;
        if next.layout.spec(&t.info.schema, num_levels) == t.info.layout.spec(&t.info.schema, num_levels) {
            return Ok(());
        }
        // No compaction may be running: every file numbered from here on holds the new layout.
        {
            let mut bg = inner.bg.lock();
            bg.manual += 1;
            while bg.running_compactions > 0 {
                inner.bg_cv.wait_for(&mut bg, std::time::Duration::from_millis(20));
            }
        }
        let mut edit = VersionEdit::default();
        let before = inner.next_file.load(Ordering::SeqCst);
        edit.push(EditRecord::SetLayout { table: t.info.id, layout: spec.map(str::to_owned), before });
        let res = inner.install(edit, None);
        inner.bg.lock().manual -= 1;
        inner.bg_cv.notify_all();
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
        // The flag is set after the message, so the lock is taken only once there is one.
        if self.poisoned.load(Ordering::Acquire) {
            if let Some(e) = self.bg_error.lock().clone() {
                return Err(Error::Poisoned(e));
            }
        }
        Ok(())
    }

    /// Records a failure that leaves the on-disk state uncertain; all later writes fail.
    pub(crate) fn poison(&self, e: &Error) {
        let mut g = self.bg_error.lock();
        if g.is_none() {
            *g = Some(e.to_string());
            self.poisoned.store(true, Ordering::Release);
        }
        drop(g);
        self.bg_cv.notify_all();
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
        let n = self.next_file.fetch_add(1, Ordering::SeqCst);
        self.pending_outputs.lock().insert(n);
        n
    }

    /// Logs and applies an edit, then publishes the new version (and drops `flushed` from the
    /// frozen memtables) in one swap of the read view.
    pub(crate) fn install(&self, edit: VersionEdit, flushed: Option<&Arc<Memtable>>) -> Result<()> {
        let mut vs = self.versions.lock();
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
        edit.push(EditRecord::History { retention_ms: self.retention_ms, floor: self.snapshots.floor() });
        if self.retention_ms > 0 {
            // The clock samples taken since the last edit, so times stay resolvable after a restart.
            edit.push(EditRecord::Clock(self.clock.lock().since(vs.clock.last_ms())));
            // And the batch ranges committed since, so reads as of a sequence number stay
            // whole-batch after a restart.
            let batches = self.batches.lock();
            let ranges = batches.after(vs.batches.last());
            if !ranges.is_empty() || batches.start() != vs.batches.start() {
                edit.push(EditRecord::Batches { known_from: batches.start(), ranges });
            }
        }
        let v = match vs.log_and_apply(self.fs.as_ref(), edit, &self.next_file) {
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
        self.batches.lock().trim_through(self.snapshots.floor());
        let mut live = self.live_versions.lock();
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&v));
        Ok(())
    }

    /// Deletes SSTs no live version names, WALs below the log number and old manifests.
    pub(crate) fn delete_obsolete_files(&self) {
        if self.bg_error.lock().is_some() {
            // After a failure the in-memory state may be ahead of the disk: delete nothing.
            return;
        }
        let vs = self.versions.lock();
        // List first: any file in the listing was created after its number became pending, and
        // stays pending until it is installed, which cannot happen while we hold the version lock.
        let mut listed: Vec<(&Path, Vec<String>)> = Vec::new();
        for d in std::iter::once(self.dir.as_path()).chain(self.tables.tier_dirs().iter().map(PathBuf::as_path)) {
            if listed.iter().any(|(l, _)| *l == d) {
                continue;
            }
            let Ok(names) = self.fs.list(d) else {
                return;
            };
            listed.push((d, names));
        }
        let mut live: HashSet<u64> = self.pending_outputs.lock().clone();
        {
            let mut versions = self.live_versions.lock();
            versions.retain(|w| w.strong_count() > 0);
            for v in versions.iter().filter_map(Weak::upgrade) {
                live.extend(v.file_numbers());
            }
        }
        for (d, names) in listed {
            let home = d == self.dir;
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
                    let _ = self.fs.remove(&d.join(&name));
                }
            }
        }
    }
}
