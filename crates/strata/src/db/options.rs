//! Options for opening a database, creating a table, writing and reading.

use std::sync::Arc;

use crate::mvcc::snapshot::Snapshot;
use crate::sst::format::Compression;
use crate::tier::Tier;
use crate::vfs::{Fs, OsFs};

/// How a database is opened and shaped. The defaults suit a server; tests shrink the sizes.
#[derive(Clone)]
pub struct Options {
    /// Create the database if the directory holds none (default true).
    pub create_if_missing: bool,
    /// Bytes a memtable may hold before it is frozen and flushed (default 64 MiB).
    pub memtable_size: usize,
    /// Frozen memtables allowed to wait for flush before writers stall (default 1). Memtable
    /// memory is bounded by `memtable_size × (1 + max_immutable_memtables)`.
    pub max_immutable_memtables: usize,
    /// Level-0 files (per table) that trigger a compaction (default 4).
    pub l0_compaction_trigger: usize,
    /// Level-0 files at which each write group is delayed by 1 ms (default 12).
    pub l0_slowdown_trigger: usize,
    /// Level-0 files at which writers wait for compaction (default 20).
    pub l0_stop_trigger: usize,
    /// Size ratio T between adjacent levels (default 10).
    pub level_size_ratio: u64,
    /// Target size of level 1 (default 64 MiB); level i holds `l1_max_bytes × T^(i-1)`.
    pub l1_max_bytes: u64,
    /// Number of levels, Level-0 included (default 7).
    pub num_levels: usize,
    /// Compaction output files are cut at about this size (default 8 MiB), or smaller where a
    /// column group's share of a level would otherwise hold fewer than four files (never below
    /// 64 KiB for that reason).
    pub target_file_size: u64,
    /// Uncompressed data block size (default 16 KiB).
    pub block_size: usize,
    /// Block compression (default LZ4).
    pub compression: Compression,
    /// Bloom filter bits per key; 0 disables filters (default 14: a flush probes the older
    /// runs for every key it writes, to mark what it supersedes, and each false positive costs
    /// a block read; 14 bits make them about 0.1%, against about 0.8% at 10).
    pub bloom_bits_per_key: usize,
    /// Bytes of decoded blocks to cache (default 64 MiB).
    pub block_cache_size: usize,
    /// Background compaction threads (default 2); one more thread flushes memtables.
    pub compaction_threads: usize,
    /// Threads of the pool that runs partitioned and shared scans (default: the machine's
    /// cores), apart from the threads that serve point operations. Started on first use.
    pub scan_threads: usize,
    /// Threads of the pool that reads the keys of a large [`Table::multi_get`] in parallel, one
    /// key range each (default: the machine's cores), apart from the scan pool. Started on
    /// first use.
    ///
    /// [`Table::multi_get`]: crate::Table::multi_get
    pub point_threads: usize,
    /// How long the first of several shared scans of a table waits for others to join its pass
    /// (default 2 ms).
    pub shared_scan_window: std::time::Duration,
    /// Snapshot filters (Kim et al.): point reads and scans leave out files whose every version
    /// is newer than the read's snapshot, by the file's smallest sequence number kept in memory.
    /// On by default; off only to measure what they save.
    pub snapshot_filter: bool,
    /// How far aligned compaction (Kim et al.; [`TableOptions::aligned_compaction`](crate::TableOptions::aligned_compaction)) may move a
    /// file cut to meet a boundary of the level below: an output file is never cut below
    /// `target / factor` to meet one, and always cut at `target × factor` (default 2; 1 turns
    /// alignment into plain size cutting).
    pub alignment_variance: f64,
    /// Lineage-engine tables: base records per update range, each with its own tail pages
    /// (L-Store §4.3; default 4,096; a power of two from 64 to 65,536).
    pub lineage_range: usize,
    /// Lineage-engine tables: committed tail records a range gathers before the lineage thread
    /// folds them into new base pages (default 8). Fewer unmerged records make scans under
    /// updates cheaper and merges more frequent: on `strata-bench lstore` (2 cores, medium
    /// contention) 8 kept the scan within 1.5x of its time without updates at about 70% of the
    /// update rate of 64, and the paper's half a range (2048) made it 2.5-3x slower. At most
    /// every 20 ms a pass also folds the ranges whose tails stopped growing, whatever their count.
    pub lineage_merge_threshold: usize,
    /// Lineage-engine tables: bytes of lineage writes in the WAL after which the lineage thread
    /// writes a checkpoint of every lineage table, so recovery replays less and older WAL files
    /// can go (default 256 MiB).
    pub lineage_checkpoint_bytes: u64,
    /// Lineage-engine tables: bytes they may hold in memory together (base pages, tail records,
    /// history, keys and indexes; default 8 GiB). A write that would go past it is refused
    /// with [`Error::OutOfMemory`](crate::Error::OutOfMemory) before anything of it is written;
    /// LSM tables and reads go on. `stats` shows the bytes per table.
    pub lineage_memory_budget: u64,
    /// How far back in time reads as of a past point may reach ([`Db::snapshot_as_of`](crate::Db::snapshot_as_of)):
    /// flush and compaction keep every version written within this window, and lineage tables
    /// keep their tail records for it. `None` (the default) keeps the window the database
    /// recorded when it was last set (none for a new database); `Some(ZERO)` turns history
    /// off (versions are kept only for live snapshots). The window is recorded in the manifest.
    pub history_retention: Option<std::time::Duration>,
    /// Storage tiers, the fast one first (default none: every SST lives in the database
    /// directory); every tier but the last needs a budget. Given once, they are recorded in the
    /// manifest: later opens may leave them out, or give them again with new budgets (a tier
    /// given without one keeps its recorded budget); see [`Tier`] and [`crate::tier`].
    pub tiers: Vec<Tier>,
    /// How fast the access histograms forget (LogStore §V-A): every file's counts of reads
    /// served and of probes that found nothing halve once per this period (default 60 s; zero
    /// never forgets). Shorter follows a shifting hot range sooner; longer is steadier.
    pub heat_half_life: std::time::Duration,
    /// How compaction places data across two tiers (default [`TierPlacement::Informed`]).
    pub tier_placement: crate::tier::TierPlacement,
    /// Deferred and staging compaction (LogStore §V-C, §V-D; default on; only with two tiers):
    /// a flush leaves marking what it supersedes on the slow tier to a later *staging
    /// compaction*, which merges several such Level-0 files into one on the fast tier and marks
    /// the slow tier once for all of them, so bursts of writes do not wait on the slow device.
    /// Off, every flush probes the slow tier itself (plain leveled).
    pub deferred_compaction: bool,
    /// Memory for the rows committed while write transactions are open, by which their commits
    /// are checked (default 64 MiB). Past it the oldest are forgotten, and a transaction whose
    /// snapshot is older than what is left cannot commit ([`Error::TxnTooOld`](crate::Error::TxnTooOld)).
    pub txn_window_bytes: usize,
    /// The most bytes of writes one transaction may hold before it commits (default 64 MiB;
    /// the whole transaction enters the memtable and one WAL record at once).
    pub txn_max_bytes: usize,
    /// Whether the writers of a commit group of three or more insert their own batches into
    /// the memtable at once, after the leader wrote the group to the WAL (groups in which two
    /// writes touch one key, or that write a lineage table, are inserted in order by the
    /// leader). `None`, the default, does so on machines of four cores or more.
    pub parallel_memtable_inserts: Option<bool>,
    /// Whether a writer waiting in the group commit (for its outcome, for its turn to insert, for
    /// the leader lock) first waits awake for some microseconds, spinning and then yielding,
    /// before it sleeps. On many cores this spares each group's hand-offs a wake-up; where
    /// cores are few the spinning takes CPU the leader needs. `None`, the default, spins on
    /// machines of four cores or more.
    pub spin_before_park: Option<bool>,
    /// The most bytes per second the background re-layout reads after a table's layout
    /// changed ([`Db::set_layout`](crate::Db::set_layout); default 64 MiB/s, 0: unbounded). It
    /// runs only when no compaction is due, one file at a time.
    pub relayout_bytes_per_sec: u64,
    /// Every this often, re-advise every table of row-group files on the workload it served
    /// since the last time, earlier rounds' workloads counting less and less (LASER §7.3: the
    /// workload drifts), and change its layout online
    /// ([`Db::set_layout`](crate::Db::set_layout)) when two rounds in a row advise the same
    /// layout and it is predicted to cost at least a fifth less than the current one. Layouts
    /// are priced at prices measured on the table ([`Db::calibrate`](crate::Db::calibrate)) once
    /// it holds data below Level-0, measured again each time the table has doubled. Rounds that
    /// saw fewer than 100 operations are left alone. `None` (the default): layouts change only
    /// when asked.
    pub self_advise: Option<std::time::Duration>,
    /// The filesystem (default: the operating system's).
    pub fs: Arc<dyn Fs>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            memtable_size: 64 << 20,
            max_immutable_memtables: 1,
            l0_compaction_trigger: 4,
            l0_slowdown_trigger: 12,
            l0_stop_trigger: 20,
            level_size_ratio: 10,
            l1_max_bytes: 64 << 20,
            num_levels: 7,
            target_file_size: 8 << 20,
            block_size: 16 << 10,
            compression: Compression::Lz4,
            bloom_bits_per_key: 14,
            block_cache_size: 64 << 20,
            compaction_threads: 2,
            scan_threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            point_threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            shared_scan_window: std::time::Duration::from_millis(2),
            snapshot_filter: true,
            alignment_variance: 2.0,
            lineage_range: 4096,
            lineage_merge_threshold: 8,
            lineage_checkpoint_bytes: 256 << 20,
            lineage_memory_budget: 8 << 30,
            history_retention: None,
            tiers: Vec::new(),
            heat_half_life: std::time::Duration::from_secs(60),
            tier_placement: crate::tier::TierPlacement::Informed,
            deferred_compaction: true,
            txn_window_bytes: 64 << 20,
            txn_max_bytes: 64 << 20,
            parallel_memtable_inserts: None,
            spin_before_park: None,
            relayout_bytes_per_sec: 64 << 20,
            self_advise: None,
            fs: Arc::new(OsFs),
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("memtable_size", &self.memtable_size)
            .field("max_immutable_memtables", &self.max_immutable_memtables)
            .field("l0_compaction_trigger", &self.l0_compaction_trigger)
            .field("level_size_ratio", &self.level_size_ratio)
            .field("l1_max_bytes", &self.l1_max_bytes)
            .field("num_levels", &self.num_levels)
            .field("target_file_size", &self.target_file_size)
            .field("block_size", &self.block_size)
            .field("compression", &self.compression)
            .field("block_cache_size", &self.block_cache_size)
            .field("compaction_threads", &self.compaction_threads)
            .field("scan_threads", &self.scan_threads)
            .field("point_threads", &self.point_threads)
            .field("shared_scan_window", &self.shared_scan_window)
            .field("snapshot_filter", &self.snapshot_filter)
            .field("alignment_variance", &self.alignment_variance)
            .field("lineage_range", &self.lineage_range)
            .field("lineage_merge_threshold", &self.lineage_merge_threshold)
            .field("lineage_checkpoint_bytes", &self.lineage_checkpoint_bytes)
            .field("lineage_memory_budget", &self.lineage_memory_budget)
            .field("history_retention", &self.history_retention)
            .field("tiers", &self.tiers)
            .field("heat_half_life", &self.heat_half_life)
            .field("tier_placement", &self.tier_placement)
            .field("deferred_compaction", &self.deferred_compaction)
            .field("txn_window_bytes", &self.txn_window_bytes)
            .field("txn_max_bytes", &self.txn_max_bytes)
            .field("parallel_memtable_inserts", &self.parallel_memtable_inserts)
            .field("spin_before_park", &self.spin_before_park)
            .finish_non_exhaustive()
    }
}

impl Options {
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.num_levels < 2 || self.num_levels > 64 {
            return Err(format!("num_levels must be 2..=64, got {}", self.num_levels));
        }
        if self.level_size_ratio < 2 {
            return Err("level_size_ratio must be at least 2".into());
        }
        if self.l0_compaction_trigger == 0 || self.l0_stop_trigger < self.l0_compaction_trigger {
            return Err("l0_stop_trigger must be >= l0_compaction_trigger >= 1".into());
        }
        if self.memtable_size < 4096 || self.block_size < 256 || self.target_file_size < 4096 || self.l1_max_bytes == 0
        {
            return Err("memtable_size, block_size, target_file_size and l1_max_bytes are too small".into());
        }
        if !(1.0..f64::INFINITY).contains(&self.alignment_variance) {
            return Err(format!("alignment_variance must be a number >= 1, got {}", self.alignment_variance));
        }
        if self.scan_threads == 0 {
            return Err("scan_threads must be at least 1".into());
        }
        if self.point_threads == 0 {
            return Err("point_threads must be at least 1".into());
        }
        if self.compaction_threads == 0 {
            return Err("compaction_threads must be at least 1".into());
        }
        if !self.lineage_range.is_power_of_two() || !(64..=65536).contains(&self.lineage_range) {
            return Err(format!("lineage_range must be a power of two from 64 to 65536, got {}", self.lineage_range));
        }
        if self.lineage_merge_threshold == 0 {
            return Err("lineage_merge_threshold must be at least 1".into());
        }
        crate::tier::validate(&self.tiers)
    }
}

/// Durability of one write.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Sync the WAL before the write returns (default false: the write reaches the OS, and
    /// survives a process crash but not a power loss).
    pub sync: bool,
}

/// Where a read reads.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOptions<'a> {
    /// Read at this snapshot; `None` reads the newest data.
    pub snapshot: Option<&'a Snapshot>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_variance_below_one_is_refused() {
        for v in [0.5, f64::NAN, f64::INFINITY] {
            let o = Options { alignment_variance: v, ..Options::default() };
            assert!(o.validate().is_err(), "{v} accepted");
        }
        assert!(Options { alignment_variance: 1.0, ..Options::default() }.validate().is_ok());
    }
}
