//! Statistics: the shape of every table's tree (levels, column groups, age bands), the IO spent
//! building it, and the per-level workload each table served.

use super::workload::{At, Op, Workload};
use super::{DbInner, TableInfo};
use crate::column_group::group_id;
use crate::types::Value;
use crate::version::Level;
use std::sync::atomic::Ordering;

/// One column group of one level.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupStats {
    /// The group's columns (names); key columns are stored with every group and not listed.
    pub columns: Vec<String>,
    /// Files.
    pub files: usize,
    /// Bytes on disk.
    pub bytes: u64,
    /// Versions stored.
    pub entries: u64,
    /// Smallest and largest sequence number stored, if any file.
    pub seq_range: Option<(u64, u64)>,
}

/// One column's share of a level's workload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnWorkload {
    /// Column name.
    pub column: String,
    /// Point reads that asked this level for the column.
    pub point_reads: u64,
    /// Scans that read the column at this level.
    pub scans: u64,
    /// Updates (partial rows) carrying the column that this level received.
    pub updates: u64,
}

/// What one level (or the memtable) served since open; see `catalog/workload.rs` for what counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkloadStats {
    /// Point reads that found a version of their key here.
    pub point_reads: u64,
    /// Scans that read files here (the memtable: every scan).
    pub scans: u64,
    /// Partial-row updates written here (the memtable: every committed update).
    pub updates: u64,
    /// Per column with any count, in schema order.
    pub columns: Vec<ColumnWorkload>,
}

impl WorkloadStats {
    fn of(w: &Workload, at: At, info: &TableInfo) -> Self {
        let (point_reads, pr) = w.read(at, Op::PointRead);
        let (scans, sc) = w.read(at, Op::Scan);
        let (updates, up) = w.read(at, Op::Update);
        let columns = (0..info.value_types.len())
            .filter(|&c| pr[c] + sc[c] + up[c] > 0)
            .map(|c| ColumnWorkload { column: column_name(info, c), point_reads: pr[c], scans: sc[c], updates: up[c] })
            .collect();
        WorkloadStats { point_reads, scans, updates, columns }
    }
}

fn column_name(info: &TableInfo, value_col: usize) -> String {
    info.schema.value_columns().get(value_col).map_or_else(String::new, |&c| info.schema.columns()[c].name.clone())
}

fn group_stats(info: &TableInfo, level: usize, l: &Level) -> Vec<GroupStats> {
    // A row-group level's files hold every group: each group's entry counts them all.
    let row_groups = info.row_groups(level);
    row_groups
        .unwrap_or_else(|| info.runs.groups(level))
        .iter()
        .map(|g| {
            let id = group_id(g);
            let files: Vec<_> = l.files().filter(|f| row_groups.is_some() || f.cg == id).collect();
            GroupStats {
                columns: g.iter().map(|&c| column_name(info, c)).collect(),
                files: files.len(),
                bytes: files.iter().map(|f| f.size).sum(),
                entries: files.iter().map(|f| f.entries).sum(),
                seq_range: files.iter().map(|f| (f.min_seq, f.max_seq)).reduce(|a, b| (a.0.min(b.0), a.1.max(b.1))),
            }
        })
        .collect()
}

/// One level of one table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LevelStats {
    /// Level number.
    pub level: usize,
    /// Sorted runs.
    pub runs: usize,
    /// Files.
    pub files: usize,
    /// Bytes on disk.
    pub bytes: u64,
    /// Versions stored.
    pub entries: u64,
    /// Bytes written into this level by flush or compaction since open (at Level-0, by flush).
    pub bytes_written: u64,
    /// Bytes of this level's files compactions read as input since open (a trivial move reads
    /// nothing).
    pub bytes_read: u64,
    /// Smallest and largest sequence number stored (the age band of the level), if any file.
    pub seq_range: Option<(u64, u64)>,
    /// The level's column groups, as its layout lists them (Level-0: one, the whole row), each
    /// with its run of files; at a level of row-group files, which hold every group of the
    /// level, each group's entry counts all of them.
    pub groups: Vec<GroupStats>,
    /// Operations this level served since open.
    pub workload: WorkloadStats,
    /// Bytes of the level's files on each storage tier, by tier (see [`Stats::tiers`]).
    pub tier_bytes: Vec<u64>,
}

/// One bucket of a table's access histogram: one file (see [`Table::access_histogram`](crate::Table::access_histogram)).
#[derive(Debug, Clone, PartialEq)]
pub struct HeatBucket {
    /// Level.
    pub level: usize,
    /// File number.
    pub file: u64,
    /// The storage tier holding the file.
    pub tier: u8,
    /// The file's first key (key column values).
    pub first_key: Vec<Value>,
    /// The file's last key.
    pub last_key: Vec<Value>,
    /// Point reads that found a version of their key in the file, decayed.
    pub reads: u64,
    /// Point reads that searched the file (past its bloom filter) and found nothing, decayed.
    pub empty_probes: u64,
}

/// One storage tier (see [`crate::tier`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierStats {
    /// Name.
    pub name: String,
    /// Directory.
    pub dir: String,
    /// Byte budget, if any.
    pub budget: Option<u64>,
    /// Bytes of SSTs it holds.
    pub bytes: u64,
    /// SSTs it holds.
    pub files: usize,
    /// Data blocks read from its files (block cache misses) since open: the reads the device
    /// served.
    pub block_reads: u64,
}

/// What the lineage engine holds for one table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineageStats {
    /// Base records (rows ever inserted, deleted ones included).
    pub rows: u64,
    /// Bytes of base pages, keys and per-record metadata.
    pub base_bytes: u64,
    /// Bytes of tail records not yet merged into base pages (recent updates).
    pub tail_bytes: u64,
    /// Bytes of merged tail records, kept only for reads at older points (snapshots, the
    /// history retention window). A full range's go once it gathered a range's worth of them
    /// and no snapshot or window reaches back to them ([`LineageStats::reclaimed_ranges`]).
    pub history_bytes: u64,
    /// Committed tail records not yet folded into base pages (merge lag).
    pub merge_lag: u64,
    /// Range merges since open.
    pub merges: u64,
    /// Tail records folded into base pages since open.
    pub merged_records: u64,
    /// Ranges rebased since open (their tail records no read can reach any more dropped).
    pub reclaimed_ranges: u64,
    /// Microseconds writers waited for those rebases since open (a rebase takes the commit
    /// leader's turn; merges never do).
    pub reclaim_wait_micros: u64,
}

/// One table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableStats {
    /// Table name.
    pub name: String,
    /// The engine storing it.
    pub engine: crate::Engine,
    /// The lineage engine's figures (lineage tables only).
    pub lineage: Option<LineageStats>,
    /// The column-group layout, one clause per level.
    pub layout: String,
    /// Whether compaction output is aligned to the files below ([`crate::TableOptions`]).
    pub aligned_compaction: bool,
    /// Operations the memtable served since open.
    pub memtable_workload: WorkloadStats,
    /// Levels 0..num_levels.
    pub levels: Vec<LevelStats>,
    /// Bytes of keys and rows written by users since open.
    pub ingested_bytes: u64,
    /// Bytes written to SSTs since open divided by bytes ingested (0 when nothing was ingested).
    pub write_amplification: f64,
    /// Level-0 files whose marking of the slow tier is deferred, waiting for a staging
    /// compaction ([`Options::deferred_compaction`](crate::Options::deferred_compaction)).
    pub deferred_files: usize,
    /// Files of Level-1 and below still in a layout other than the table's, waiting for the
    /// background re-layout ([`Db::set_layout`](crate::Db::set_layout)).
    pub relayout_files: usize,
}

/// The whole database.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Tables by name.
    pub tables: Vec<TableStats>,
    /// Memtable bytes (active + frozen).
    pub memtable_bytes: usize,
    /// Frozen memtables waiting for flush.
    pub immutable_memtables: usize,
    /// Bytes of decoded blocks held by the block cache.
    pub block_cache_bytes: u64,
    /// Bytes of the exact key sets kept in memory for Level-0 files (8 per key), which flushes
    /// probe instead of those files' bloom filters.
    pub key_set_bytes: usize,
    /// Approximate bytes the open files hold in memory outside the block cache: their indexes
    /// (with one zone map per column per block) and bloom filters.
    pub open_file_bytes: usize,
    /// Data blocks read from files (block cache misses) since open.
    pub block_reads: u64,
    /// Bytes of those reads.
    pub block_read_bytes: u64,
    /// Flushes since open.
    pub flushes: u64,
    /// Microseconds flushes took, from reading the memtable to installing the files (marking
    /// included), since open.
    pub flush_micros: u64,
    /// Compactions (not counting trivial moves) since open, staging compactions included.
    pub compactions: u64,
    /// Microseconds compactions took (re-layouts included), from picking their inputs to
    /// installing their output, since open.
    pub compaction_micros: u64,
    /// Staging compactions (Level-0 files merged into one on the fast tier, marking what
    /// deferred flushes left) since open.
    pub staging_compactions: u64,
    /// Files the background re-layout rewrote since open, and their bytes.
    pub relayouts: u64,
    /// See [`Self::relayouts`].
    pub relayout_bytes: u64,
    /// Layout changes the self-advising made since open
    /// ([`Options::self_advise`](crate::Options::self_advise)).
    pub self_advised: u64,
    /// Microseconds the self-advising spent pricing layouts since open.
    pub self_advise_micros: u64,
    /// Last sequence number visible to readers.
    pub last_sequence: u64,
    /// Microseconds writers spent stalled or slowed down waiting for flush or compaction.
    pub write_stall_micros: u64,
    /// Files whose data blocks point reads searched, since open.
    pub files_probed: u64,
    /// Files point reads left out because their bloom filter ruled the key out.
    pub files_skipped_by_bloom: u64,
    /// Files point reads and scans left out because every version in them is newer than the
    /// read's snapshot (snapshot filter).
    pub files_skipped_by_snapshot: u64,
    /// How far back reads as of a past point reach.
    pub history: super::History,
    /// The storage tiers, the fast one first (one, the database directory, without tiers).
    pub tiers: Vec<TierStats>,
    /// The last background operations chosen (up to 32), oldest first, each with why it was
    /// chosen: flushes, compactions (size-based, staging, tier moves, re-layouts), lineage
    /// passes that merged, self-advising rounds.
    pub background: Vec<String>,
}

impl DbInner {
    pub(crate) fn stats(&self) -> Stats {
        let (by_snapshot, by_bloom, probed) = self.tables.probes.get();
        let view = self.view.load();
        let io = self.io.lock();
        let mut tables = Vec::new();
        let stores = self.stores.load();
        let ntiers = self.config.tiers.len().max(1);
        let mut tiers: Vec<TierStats> = self
            .config
            .tiers
            .iter()
            .zip(&self.tables.blocks.tier_reads)
            .map(|(t, reads)| TierStats {
                name: t.name.clone(),
                dir: t.dir.clone(),
                budget: t.budget(),
                bytes: 0,
                files: 0,
                block_reads: reads.load(Ordering::Relaxed),
            })
            .collect();
        for t in view.version.tables.values() {
            let state = stores.get(&t.info.id);
            let level_io = |i: usize, f: fn(&super::store::LevelIo) -> &std::sync::atomic::AtomicU64| {
                state.and_then(|s| s.levels.get(i)).map_or(0, |l| f(l).load(Ordering::Relaxed))
            };
            let mut levels = Vec::new();
            for (i, l) in t.levels.iter().enumerate() {
                let files: Vec<_> = l.files().collect();
                let seq_range =
                    files.iter().map(|f| (f.min_seq, f.max_seq)).reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
                let mut tier_bytes = vec![0; ntiers];
                for f in &files {
                    let at = usize::from(f.tier).min(ntiers - 1);
                    tier_bytes[at] += f.size;
                    if let Some(ts) = tiers.get_mut(at) {
                        ts.bytes += f.size;
                        ts.files += 1;
                    }
                }
                levels.push(LevelStats {
                    level: i,
                    runs: l.runs.len(),
                    files: files.len(),
                    bytes: l.bytes(),
                    entries: files.iter().map(|f| f.entries).sum(),
                    bytes_written: level_io(i, |l| &l.written),
                    bytes_read: level_io(i, |l| &l.read),
                    seq_range,
                    groups: group_stats(&t.info, i, l),
                    workload: WorkloadStats::of(&t.info.workload, At::Level(i), &t.info),
                    tier_bytes,
                });
            }
            let ingested = state.map_or(0, |s| s.ingested.load(Ordering::Relaxed));
            let written: u64 = levels.iter().map(|l| l.bytes_written).sum();
            let write_amplification = if ingested == 0 { 0.0 } else { written as f64 / ingested as f64 };
            let lineage = state.and_then(|s| s.store.lineage_stats());
            tables.push(TableStats {
                name: t.info.name.clone(),
                engine: t.info.options.engine,
                lineage,
                layout: t.info.layout.spec(&t.info.schema, t.levels.len()),
                aligned_compaction: t.info.options.aligned_compaction,
                memtable_workload: WorkloadStats::of(&t.info.workload, At::Memtable, &t.info),
                levels,
                ingested_bytes: ingested,
                write_amplification,
                deferred_files: t.deferred.len(),
                relayout_files: self.relayout_files(t),
            });
        }
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        Stats {
            tables,
            memtable_bytes: view.mem.approximate_bytes()
                + view.imm.iter().map(|m| m.approximate_bytes()).sum::<usize>(),
            immutable_memtables: view.imm.len(),
            block_cache_bytes: self.tables.blocks.charged(),
            key_set_bytes: self.tables.key_set_bytes(),
            open_file_bytes: self.tables.reader_bytes(),
            block_reads: self.tables.blocks.reads.load(Ordering::Relaxed),
            block_read_bytes: self.tables.blocks.read_bytes.load(Ordering::Relaxed),
            flushes: io.flushes,
            flush_micros: io.flush_micros,
            compactions: io.compactions,
            compaction_micros: io.compaction_micros,
            staging_compactions: io.stagings,
            relayouts: io.relayouts,
            relayout_bytes: io.relayout_bytes,
            self_advised: io.self_advised,
            self_advise_micros: io.self_advise_micros,
            last_sequence: self.snapshots.visible(),
            write_stall_micros: io.stall_micros,
            files_probed: probed,
            files_skipped_by_bloom: by_bloom,
            files_skipped_by_snapshot: by_snapshot,
            history: self.history(),
            tiers,
            background: self.sched.recent(),
        }
    }
}
