//! Statistics: the shape of every table's tree and the IO spent building it.

use super::DbInner;
use std::sync::atomic::Ordering;

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
    /// Bytes written into this level by flush or compaction since open.
    pub bytes_written: u64,
    /// Smallest and largest sequence number stored (the age band of the level), if any file.
    pub seq_range: Option<(u64, u64)>,
}

/// One table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableStats {
    /// Table name.
    pub name: String,
    /// Levels 0..num_levels.
    pub levels: Vec<LevelStats>,
    /// Bytes of keys and rows written by users since open.
    pub ingested_bytes: u64,
    /// Bytes written to SSTs since open divided by bytes ingested (0 when nothing was ingested).
    pub write_amplification: f64,
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
    /// Data blocks read from files (block cache misses) since open.
    pub block_reads: u64,
    /// Bytes of those reads.
    pub block_read_bytes: u64,
    /// Flushes since open.
    pub flushes: u64,
    /// Compactions (not counting trivial moves) since open.
    pub compactions: u64,
    /// Last sequence number visible to readers.
    pub last_sequence: u64,
    /// Microseconds writers spent stalled or slowed down waiting for flush or compaction.
    pub write_stall_micros: u64,
}

impl DbInner {
    pub(crate) fn stats(&self) -> Stats {
        let view = self.view.read().clone();
        let io = self.io.lock();
        let mut tables = Vec::new();
        for t in view.version.tables.values() {
            let mut levels = Vec::new();
            for (i, l) in t.levels.iter().enumerate() {
                let files: Vec<_> = l.files().collect();
                let seq_range =
                    files.iter().map(|f| (f.min_seq, f.max_seq)).reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
                levels.push(LevelStats {
                    level: i,
                    runs: l.runs.len(),
                    files: files.len(),
                    bytes: l.bytes(),
                    entries: files.iter().map(|f| f.entries).sum(),
                    bytes_written: io.written.get(&(t.info.id, i)).copied().unwrap_or(0),
                    seq_range,
                });
            }
            let ingested = io.ingested.get(&t.info.id).copied().unwrap_or(0);
            let written: u64 = levels.iter().map(|l| l.bytes_written).sum();
            let write_amplification = if ingested == 0 { 0.0 } else { written as f64 / ingested as f64 };
            tables.push(TableStats {
                name: t.info.name.clone(),
                levels,
                ingested_bytes: ingested,
                write_amplification,
            });
        }
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        Stats {
            tables,
            memtable_bytes: view.mem.approximate_bytes()
                + view.imm.iter().map(|m| m.approximate_bytes()).sum::<usize>(),
            immutable_memtables: view.imm.len(),
            block_cache_bytes: self.tables.blocks.charged(),
            block_reads: self.tables.blocks.reads.load(Ordering::Relaxed),
            block_read_bytes: self.tables.blocks.read_bytes.load(Ordering::Relaxed),
            flushes: io.flushes,
            compactions: io.compactions,
            last_sequence: self.snapshots.visible(),
            write_stall_micros: io.stall_micros,
        }
    }
}
