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
//! Counters are relaxed atomics bumped once per level touched (plus once per column), cheap
//! enough to stay on. They start at zero when the database is opened.

use std::sync::atomic::{AtomicU64, Ordering};

/// Levels tracked separately; deeper levels are counted with the last one.
pub(crate) const TRACKED_LEVELS: usize = 16;

/// One operation type's counters at one level.
#[derive(Debug)]
struct OpCounters {
    ops: AtomicU64,
    /// Per value column.
    columns: Box<[AtomicU64]>,
}

impl OpCounters {
    fn new(nvals: usize) -> Self {
        OpCounters { ops: AtomicU64::new(0), columns: (0..nvals).map(|_| AtomicU64::new(0)).collect() }
    }

    fn record(&self, cols: impl Iterator<Item = usize>) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        for c in cols {
            if let Some(n) = self.columns.get(c) {
                n.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn read(&self) -> (u64, Vec<u64>) {
        (self.ops.load(Ordering::Relaxed), self.columns.iter().map(|c| c.load(Ordering::Relaxed)).collect())
    }
}

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

/// The counters of one table.
#[derive(Debug)]
pub(crate) struct Workload {
    /// Index 0 is the memtable, `1 + i` is level i.
    slots: Vec<[OpCounters; 3]>,
}

impl Workload {
    pub(crate) fn new(nvals: usize) -> Self {
        let slots = (0..=TRACKED_LEVELS)
            .map(|_| [OpCounters::new(nvals), OpCounters::new(nvals), OpCounters::new(nvals)])
            .collect();
        Workload { slots }
    }

    fn slot(&self, at: At) -> &[OpCounters; 3] {
        let i = match at {
            At::Memtable => 0,
            At::Level(l) => 1 + l.min(TRACKED_LEVELS - 1),
        };
        &self.slots[i]
    }

    /// Counts one operation at `at` touching the value columns `cols`.
    pub(crate) fn record(&self, at: At, op: Op, cols: impl Iterator<Item = usize>) {
        self.slot(at)[op as usize].record(cols);
    }

    /// `(operations, per-column counts)` of `op` at `at`.
    pub(crate) fn read(&self, at: At, op: Op) -> (u64, Vec<u64>) {
        self.slot(at)[op as usize].read()
    }
}

/// The value columns marked in `wanted` (all of `nvals` when `None`).
pub(crate) fn wanted_columns(wanted: Option<&[bool]>, nvals: usize) -> impl Iterator<Item = usize> + '_ {
    (0..nvals).filter(move |&c| wanted.is_none_or(|w| w.get(c).copied().unwrap_or(false)))
}
