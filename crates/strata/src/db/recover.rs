//! Recovery: what [`Db::open`](super::Db::open) finds on disk before the database object
//! exists. In order:
//!
//! 1. [`open_manifest`]: the directory's lock, and the version set from the manifest (or a new
//!    one), never handing out the number of a file already on disk;
//! 2. [`settle_tiers`]: the storage tiers as given or as recorded, checked against their
//!    directories, recorded before anything is written to them;
//! 3. [`replay`]: every table's store made, lineage tables loaded from their checkpoint, then
//!    the WALs files and checkpoints do not cover, oldest first: LSM writes into one memtable,
//!    lineage writes into their tables, the commit clock and batch ranges rebuilt beside them.
//!
//! The database then persists what was replayed (as Level-0 files and a lineage checkpoint)
//! before `open` returns; see [`super::DbInner::persist_replayed`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::store::{Applies, LineageStore, TableState};
use super::{checkpoint_name, wal_name, DbFile, Options};
use crate::error::{Error, Result};
use crate::memtable::{Fold, Memtable};
use crate::mvcc::batches::Batches;
use crate::mvcc::clock::Clock;
use crate::sync::Events;
use crate::tier::TierRecord;
use crate::version::edit::{EditRecord, VersionEdit};
use crate::version::set::VersionSet;
use crate::vfs::{DirLock, Fs};
use crate::write::batch::WriteBatch;
use crate::write::wal::{read_log, Tail, WAL_MAGIC};

/// What recovery found and rebuilt.
pub(super) struct Recovered {
    /// The file system (slowed to the tiers' device profiles when they give any).
    pub fs: Arc<dyn Fs>,
    /// The directory's lock, held while the database is open.
    pub lock: Box<dyn DirLock>,
    pub versions: VersionSet,
    /// The tiers, the fast one first (one, the database directory, without tiers).
    pub tiers: Vec<TierRecord>,
    /// The next file number to hand out.
    pub next_file: AtomicU64,
    /// Every table's state, lineage tables holding their rows.
    pub stores: HashMap<u32, Arc<TableState>>,
    /// The LSM tables' writes the WAL holds beyond their files.
    pub replayed: Arc<Memtable>,
    /// The newest sequence number written.
    pub last_seq: u64,
    /// Wall-clock times to sequence numbers, the manifest's and the WAL's.
    pub clock: Clock,
    /// Where committed batches begin and end, the manifest's and the WAL's.
    pub batches: Batches,
    /// The oldest sequence number the lineage checkpoint holds history from (0: none loaded).
    pub lineage_history_from: u64,
}

/// Runs recovery for the database in `dir`; `wake` is what tables' staging wishes signal.
pub(super) fn recover(dir: &Path, opts: &Options, wake: &Arc<Events>) -> Result<Recovered> {
    let (fs, lock, mut versions, names) = open_manifest(dir, opts)?;
    let (tiers, next_file) = settle_tiers(fs.as_ref(), dir, opts, &mut versions)?;
    let replayed = replay(fs.as_ref(), dir, opts, &versions, &names, wake)?;
    Ok(Recovered {
        fs,
        lock,
        versions,
        tiers,
        next_file,
        stores: replayed.stores,
        replayed: replayed.mem,
        last_seq: replayed.last_seq,
        clock: replayed.clock,
        batches: replayed.batches,
        lineage_history_from: replayed.history_from,
    })
}

/// What [`open_manifest`] found: the file system, the directory's lock, the version set and
/// the names in the directory.
type Opened = (Arc<dyn Fs>, Box<dyn DirLock>, VersionSet, Vec<String>);

/// Locks the directory and reads the manifest (or creates a database there).
fn open_manifest(dir: &Path, opts: &Options) -> Result<Opened> {
    // Tiers given with device profiles run on a filesystem slowed to them.
    let profiles: Vec<(PathBuf, crate::vfs::DeviceProfile)> =
        opts.tiers.iter().filter_map(|t| Some((t.dir.clone(), t.profile?))).collect();
    let fs: Arc<dyn Fs> = match profiles.is_empty() {
        true => opts.fs.clone(),
        false => Arc::new(crate::vfs::SlowFs::new(opts.fs.clone(), profiles)),
    };
    fs.create_dir_all(dir)?;
    let lock = fs.lock(&dir.join("LOCK"))?;
    // Files numbered after the manifest last recorded its counter (WALs from rotations,
    // unfinished outputs) may exist: never hand their numbers out again.
    let names = fs.list(dir)?;
    let highest = names.iter().filter_map(|n| DbFile::parse(n)).map(DbFile::number).max().unwrap_or(0);
    let vs = if fs.exists(&dir.join("CURRENT")) {
        VersionSet::recover(fs.as_ref(), dir, opts.num_levels, highest + 1)?
    } else if opts.create_if_missing {
        VersionSet::create(fs.as_ref(), dir, opts.num_levels)?
    } else {
        return Err(Error::InvalidArgument(format!("no database at {}", dir.display())));
    };
    Ok((fs, lock, vs, names))
}

/// The tiers: as given, or as recorded; their directories hold SSTs (and numbers) too. New
/// tiers are recorded before anything is written to them (markers included), so a crash in
/// between leaves tiers without files, whose markers the next open writes. Returns the tiers
/// and the next file number, above every number in any tier's directory.
fn settle_tiers(fs: &dyn Fs, dir: &Path, opts: &Options, vs: &mut VersionSet) -> Result<(Vec<TierRecord>, AtomicU64)> {
    let (tiers, record_tiers) =
        crate::tier::settle(dir, &opts.tiers, &vs.tiers, vs.current().files().next().is_some())?;
    if record_tiers && vs.tiers.is_empty() {
        crate::tier::check_new_dirs(fs, dir, &tiers)?;
    }
    if let Some(f) = vs.current().files().find(|f| usize::from(f.tier) >= tiers.len()) {
        let (n, t) = (f.number, f.tier);
        return Err(Error::corruption(vs.manifest_path(), 0, format!("file {n} on tier {t}, which is not recorded")));
    }
    let mut highest_on_tiers = 0;
    for d in tiers.iter().map(|t| PathBuf::from(&t.dir)).filter(|d| d != dir) {
        // A missing directory is reported by the marker check below, naming its tier.
        let on_tier = match fs.list(&d) {
            Err(_) if !fs.exists(&d) => Vec::new(),
            listed => listed?,
        };
        let top = on_tier.iter().filter_map(|n| DbFile::parse(n)).map(DbFile::number).max();
        highest_on_tiers = highest_on_tiers.max(top.unwrap_or(0));
    }
    let next_file = AtomicU64::new(vs.counters.next_file.max(highest_on_tiers + 1));
    if record_tiers {
        let mut edit = VersionEdit::default();
        edit.push(EditRecord::Tiers(tiers.clone()));
        vs.log_and_apply(fs, edit, &next_file)?;
    }
    let has_files: Vec<bool> = vs.current().tier_bytes(tiers.len()).iter().map(|&b| b > 0).collect();
    crate::tier::check_dirs(fs, dir, &tiers, &has_files)?;
    Ok((tiers, next_file))
}

/// What the WAL replay rebuilt.
struct Replayed {
    stores: HashMap<u32, Arc<TableState>>,
    mem: Arc<Memtable>,
    last_seq: u64,
    clock: Clock,
    batches: Batches,
    history_from: u64,
}

/// Makes every table's store, loads the lineage checkpoint, and replays the WALs not yet
/// covered by files (LSM tables) or the checkpoint (lineage tables), oldest first.
fn replay(
    fs: &dyn Fs,
    dir: &Path,
    opts: &Options,
    vs: &VersionSet,
    names: &[String],
    wake: &Arc<Events>,
) -> Result<Replayed> {
    let current = vs.current().clone();
    let stores: HashMap<u32, Arc<TableState>> = current
        .tables
        .values()
        .map(|t| (t.info.id, Arc::new(TableState::new(&t.info, opts.num_levels, opts.lineage_range, wake))))
        .collect();
    // Lineage tables start from their checkpoint; the WAL brings what came after it.
    let (checkpoint, _) = vs.counters.lineage_checkpoint;
    let history_from = match checkpoint {
        0 => 0,
        n => LineageStore::load_checkpoint(fs, &dir.join(checkpoint_name(n)), &stores)?,
    };
    let oldest = vs.counters.oldest_log();
    let mut wals: Vec<u64> = names
        .iter()
        .filter_map(|n| match DbFile::parse(n) {
            Some(DbFile::Wal(w)) if w >= oldest => Some(w),
            _ => None,
        })
        .collect();
    wals.sort_unstable();
    let mem = Arc::new(Memtable::new(0));
    // The manifest's clock samples, then the commit times the WAL holds.
    let mut clock = vs.clock.clone();
    let mut batches = vs.batches.clone();
    let mut last_seq = vs.counters.last_sequence;
    for (i, &n) in wals.iter().enumerate() {
        let path = dir.join(wal_name(n));
        let (records, tail) = read_log(fs, &path, WAL_MAGIC)?;
        let bad_row = |e: crate::codec::DecodeError| Error::corruption(&path, 0, format!("bad WAL row: {}", e.0));
        for rec in records {
            let (first, commit_ms, ops) =
                WriteBatch::decode(&rec).map_err(|e| Error::corruption(&path, 0, format!("bad WAL batch: {}", e.0)))?;
            if let (Some(ms), Some(n)) = (commit_ms, ops.len().checked_sub(1)) {
                clock.record(ms, first + n as u64);
            }
            if let Some(n) = ops.len().checked_sub(1) {
                batches.record(first, first + n as u64);
            }
            for (j, op) in ops.iter().enumerate() {
                let seq = first + j as u64;
                let (Some(t), Some(s)) = (current.tables.get(&op.table_id), stores.get(&op.table_id)) else {
                    continue;
                };
                // What the table's files or checkpoint hold already is not replayed.
                let (from_wal, after_seq) = s.store.replay_from(&vs.counters);
                if n < from_wal || seq <= after_seq {
                    continue;
                }
                match s.store.applies() {
                    Applies::Memtable => mem
                        .insert(op.table_id, &op.key, seq, op.kind, &op.row, Some(Fold::unread(&t.info.value_types)))
                        .map_err(bad_row)?,
                    Applies::InOrder => s.store.apply(op, seq).map_err(bad_row)?,
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
    Ok(Replayed { stores, mem, last_seq, clock, batches, history_from })
}
