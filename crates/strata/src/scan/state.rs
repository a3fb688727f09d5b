//! What the scan engine owns for the database's lifetime: its counters, the scans gathering for
//! a shared pass, and the thread pool partitions and shared passes run on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::shared::SharedScans;
use super::ScanStats;
use crate::error::Result;

/// The scan engine's state.
pub(crate) struct Scans {
    pub(crate) counters: Arc<ScanCounters>,
    pub(super) shared: SharedScans,
    /// Started on first use.
    pool: OnceLock<Arc<rayon::ThreadPool>>,
    threads: usize,
    /// How long the first scan of a shared pass waits for others to join.
    pub(super) window: Duration,
}

impl Scans {
    /// A scan engine running partitions on `threads` threads and gathering shared passes for
    /// `window`.
    pub(crate) fn new(threads: usize, window: Duration) -> Scans {
        Scans { counters: Default::default(), shared: Default::default(), pool: OnceLock::new(), threads, window }
    }

    /// The scan pool, started on first use.
    pub(super) fn pool(&self) -> Result<&Arc<rayon::ThreadPool>> {
        if let Some(p) = self.pool.get() {
            return Ok(p);
        }
        let p = crate::sync::start_pool(self.threads, "strata-scan", "scan threads")?;
        Ok(self.pool.get_or_init(|| Arc::new(p)))
    }
}

/// Counters of the scan engine (see [`ScanStats`]).
#[derive(Debug, Default)]
pub(crate) struct ScanCounters {
    pub(crate) scans: AtomicU64,
    pub(crate) passes: AtomicU64,
    pub(super) blocks_read: AtomicU64,
    pub(super) bulk_blocks: AtomicU64,
    pub(super) blocks_skipped: AtomicU64,
    pub(super) ranges_skipped: AtomicU64,
    pub(super) blocks_from_stats: AtomicU64,
    pub(super) merged_rows: AtomicU64,
    pub(super) patched_keys: AtomicU64,
    pub(super) run_patched_blocks: AtomicU64,
    pub(super) run_blocks: AtomicU64,
    pub(super) run_rows: AtomicU64,
}

impl ScanCounters {
    pub(crate) fn stats(&self) -> ScanStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ScanStats {
            scans: g(&self.scans),
            passes: g(&self.passes),
            blocks_read: g(&self.blocks_read),
            bulk_blocks: g(&self.bulk_blocks),
            blocks_skipped: g(&self.blocks_skipped),
            ranges_skipped: g(&self.ranges_skipped),
            blocks_from_stats: g(&self.blocks_from_stats),
            merged_rows: g(&self.merged_rows),
            patched_keys: g(&self.patched_keys),
            run_patched_blocks: g(&self.run_patched_blocks),
            run_blocks: g(&self.run_blocks),
            run_rows: g(&self.run_rows),
        }
    }

    pub(crate) fn add(a: &AtomicU64, n: u64) {
        a.fetch_add(n, Ordering::Relaxed);
    }
}
