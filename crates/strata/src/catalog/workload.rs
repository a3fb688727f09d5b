//! Per-level workload statistics (BRIEF L7): how many point reads, scans and updates each level
//! of a table served, and which columns they touched — the trace a layout advisor needs to decide
//! which column groups each level should store (LASER §6).
//!
//! What counts where:
//! - a point read counts at the memtable and at every level where it found a version of its key,
//!   with the columns it asked for;
//! - a scan counts at the memtable and at every level where it read a file, with the columns it
//!   read there;
//! - an update counts at the memtable when it commits, with the columns it sets, and at every
//!   level a flush or compaction writes its partial row into, with the columns the partial row
//!   still carries there (so the counts show how deep updates travel before they are merged).
//!
//! Counters are bumped once per level touched (plus once per column) on the counting thread's
//! own stripe ([`PerCore`]), cheap enough to stay on at any number of threads. They start at zero when the database is opened.

use crate::sync::PerCore;

/// Levels tracked separately; deeper levels are counted with the last one.
pub(crate) const TRACKED_LEVELS: usize = 16;

/// The operation types counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    PointRead = 0,
    Scan = 1,
    Update = 2,
}

/// Where an operation was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum At {
    Memtable,
    Level(usize),
}

/// The counters of one table, kept per core (a read on one core never writes a line another
/// core's reads write).
#[derive(Debug)]
pub(crate) struct Workload {
    /// Per (place, operation type): the operations, then one count per value column. Place 0 is
    /// the memtable, `1 + i` is level i.
    counts: PerCore,
    nvals: usize,
}

impl Workload {
    pub(crate) fn new(nvals: usize) -> Self {
        Workload { counts: PerCore::new((TRACKED_LEVELS + 1) * 3 * (nvals + 1)), nvals }
    }

    /// Where the counters of `op` at `at` start.
    fn base(&self, at: At, op: Op) -> usize {
        let place = match at {
            At::Memtable => 0,
            At::Level(l) => 1 + l.min(TRACKED_LEVELS - 1),
        };
        (place * 3 + op as usize) * (self.nvals + 1)
    }

    /// Counts one operation at `at` touching the value columns `cols`.
    pub(crate) fn record(&self, at: At, op: Op, cols: impl Iterator<Item = usize>) {
        let base = self.base(at, op);
        self.counts.add(base, 1);
        for c in cols.filter(|&c| c < self.nvals) {
            self.counts.add(base + 1 + c, 1);
        }
    }

    /// `(operations, per-column counts)` of `op` at `at`.
    pub(crate) fn read(&self, at: At, op: Op) -> (u64, Vec<u64>) {
        let base = self.base(at, op);
        (self.counts.get(base), (0..self.nvals).map(|c| self.counts.get(base + 1 + c)).collect())
    }
}

/// The value columns marked in `wanted` (all of `nvals` when `None`).
pub(crate) fn wanted_columns(wanted: Option<&[bool]>, nvals: usize) -> impl Iterator<Item = usize> + '_ {
    (0..nvals).filter(move |&c| wanted.is_none_or(|w| w.get(c).copied().unwrap_or(false)))
}
