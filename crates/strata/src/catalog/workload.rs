//! Per-level workload statistics (BRIEF L7): how many point reads, scans and updates each level
//! of a table served, and which columns they touched — the trace a layout advisor needs to decide
//! which column groups each level should store (LASER §6).
//!
//! What counts where:
//! - a put (a whole row written) counts once for the table, as an insert;
//! - a point read counts at the memtable and at every level where it found a version of its key,
//!   with the columns it asked for;
//! - a scan counts at the memtable and at every level where it read a file, with the columns it
//!   read there;
//! - an update counts at the memtable when it commits, with the columns it sets, and at every
//!   level a flush or compaction writes its partial row into, with the columns the partial row
//!   still carries there (so the counts show how deep updates travel before they are merged).
//!
//! Besides the per-column counts, each operation is counted under its *projection* (the exact set
//! of value columns it read or wrote), so the design advisor sees which columns are accessed
//! together (LASER §6.3 splits column groups by projections, not by columns). Per type of
//! operation, the first [`SHAPES`] distinct projections of a table get their own counters (so
//! updates of many single columns cannot take the slots scans need); operations with any later
//! one are counted together as "other". A scan also counts the entries of the files it overlaps
//! at each level, from which the advisor takes its selectivity there.
//!
//! Counters are bumped once per level touched (plus once per column) on the counting thread's
//! own stripe ([`PerCore`]), cheap enough to stay on at any number of threads. A new projection
//! is registered once, lock-free, in a slot of a fixed table. They start at zero when the
//! database is opened.
//!
//! While a table is traced ([`super::trace`]), every event counted is also appended to its
//! trace, under a lock; untraced tables pay one relaxed load per event for that.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use super::trace::TraceWriter;
use crate::sync::{site, Mutex, PerCore};

thread_local! {
    /// Set while the thread's reads are not the table's workload (see [`uncounted`]).
    static UNCOUNTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` without counting the reads and writes it makes on this thread (the database's own
/// measurements, such as calibration, are not the workload).
pub(crate) fn uncounted<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            UNCOUNTED.with(|u| u.set(self.0));
        }
    }
    let _reset = Reset(UNCOUNTED.with(|u| u.replace(true)));
    f()
}

/// Distinct projections per table and type of operation with counters of their own.
pub(crate) const SHAPES: usize = 32;

/// Registered projections by slot, each set once.
type Slots = Box<[OnceLock<Box<[usize]>>]>;

/// Places counted: the memtable and the tracked levels.
const PLACES: usize = TRACKED_LEVELS + 1;

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
    /// The registered projections (value-column indices, ascending), per type of operation by
    /// slot.
    shapes: [Slots; 3],
    /// Per (place, operation type, projection slot or "other"): operations; then per (place,
    /// slot): entries scanned.
    by_shape: PerCore,
    nvals: usize,
    /// Whether `trace` holds a writer.
    tracing: AtomicBool,
    /// The trace events are appended to, and the error that stopped the last one, if any.
    trace: Mutex<(Option<TraceWriter>, Option<String>)>,
}

/// A copy of a table's counters at one moment (see [`Workload::mark`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Mark {
    counts: Vec<u64>,
    by_shape: Vec<u64>,
}

/// Operations of one projection at one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShapeCount {
    /// The value columns; `None` for the operations whose projection had no slot left.
    pub cols: Option<Vec<usize>>,
    /// Operations.
    pub ops: u64,
    /// Scans: entries of the files they overlapped at the place.
    pub entries: u64,
}

impl Workload {
    pub(crate) fn new(nvals: usize) -> Self {
        Workload {
            counts: PerCore::new(PLACES * 3 * (nvals + 1)),
            shapes: std::array::from_fn(|_| (0..SHAPES).map(|_| OnceLock::new()).collect()),
            by_shape: PerCore::new(PLACES * 4 * (SHAPES + 1) + 1),
            nvals,
            tracing: AtomicBool::new(false),
            trace: Mutex::new(&site::OTHER, (None, None)),
        }
    }

    /// The counters as they are now, to take a window of later events from ([`Self::since`]).
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            counts: (0..self.counts.width()).map(|i| self.counts.get(i)).collect(),
            by_shape: (0..self.by_shape.width()).map(|i| self.by_shape.get(i)).collect(),
        }
    }

    /// [`Self::since`] plus `decay` times each count of `earlier` (counters an earlier call
    /// made from this table's): a window that remembers the windows before it less and less.
    pub(crate) fn since_decayed(&self, mark: Option<&Mark>, earlier: Option<&Workload>, decay: f64) -> Workload {
        let w = self.since(mark);
        if let Some(e) = earlier {
            for i in 0..w.counts.width() {
                w.counts.add(i, (e.counts.get(i) as f64 * decay) as u64);
            }
            for i in 0..w.by_shape.width() {
                w.by_shape.add(i, (e.by_shape.get(i) as f64 * decay) as u64);
            }
        }
        w
    }

    /// Fresh counters holding what was counted after `mark` (the whole since open with
    /// `None`), with the same projections in the same slots.
    pub(crate) fn since(&self, mark: Option<&Mark>) -> Workload {
        let w = Workload::new(self.nvals);
        for (slots, into) in self.shapes.iter().zip(&w.shapes) {
            for (slot, to) in slots.iter().zip(into.iter()) {
                if let Some(cols) = slot.get() {
                    let _ = to.set(cols.clone());
                }
            }
        }
        let before = |m: &[u64], i: usize| m.get(i).copied().unwrap_or(0);
        for i in 0..self.counts.width() {
            w.counts.add(i, self.counts.get(i).saturating_sub(mark.map_or(0, |m| before(&m.counts, i))));
        }
        for i in 0..self.by_shape.width() {
            w.by_shape.add(i, self.by_shape.get(i).saturating_sub(mark.map_or(0, |m| before(&m.by_shape, i))));
        }
        w
    }

    /// Operations counted (point reads, scans and updates at every place, and inserts).
    pub(crate) fn total_ops(&self) -> u64 {
        let places = (0..PLACES).map(|p| if p == 0 { At::Memtable } else { At::Level(p - 1) });
        let ops: u64 = places.flat_map(|at| [Op::PointRead, Op::Scan, Op::Update].map(|op| self.read(at, op).0)).sum();
        ops + self.inserts()
    }

    /// Starts appending every event to `w` (replacing the trace before, which is flushed).
    pub(crate) fn start_trace(&self, w: TraceWriter) {
        let mut t = self.trace.lock();
        if let Some(mut old) = t.0.take() {
            let _ = old.flush();
        }
        *t = (Some(w), None);
        self.tracing.store(true, Ordering::Release);
    }

    /// Stops tracing, flushing the trace; fails with the error that stopped it early, if one
    /// did. Returns the trace's path (`None`: the table was not traced).
    pub(crate) fn stop_trace(&self) -> crate::error::Result<Option<std::path::PathBuf>> {
        let mut t = self.trace.lock();
        self.tracing.store(false, Ordering::Release);
        let (w, err) = (t.0.take(), t.1.take());
        if let Some(e) = err {
            return Err(crate::error::Error::InvalidArgument(format!("the trace stopped early: {e}")));
        }
        match w {
            Some(mut w) => {
                w.flush()?;
                Ok(Some(w.path))
            }
            None => Ok(None),
        }
    }

    /// Records that the trace could not be (re)opened, for [`Self::stop_trace`] to report.
    pub(crate) fn trace_failed(&self, e: String) {
        self.trace.lock().1 = Some(e);
    }

    /// Flushes the trace, if any.
    pub(crate) fn flush_trace(&self) {
        if let Some(w) = self.trace.lock().0.as_mut() {
            let _ = w.flush();
        }
    }

    /// Appends one event to the trace; a failed write stops tracing and is kept for
    /// [`Self::stop_trace`].
    fn trace_event(&self, write: impl FnOnce(&mut TraceWriter) -> std::io::Result<()>) {
        let mut t = self.trace.lock();
        let res = match t.0.as_mut() {
            Some(w) => write(w),
            None => return,
        };
        if let Err(e) = res {
            let path = t.0.take().map(|w| w.path.display().to_string()).unwrap_or_default();
            t.1 = Some(format!("{path}: {e}"));
            self.tracing.store(false, Ordering::Release);
        }
    }

    fn place(at: At) -> usize {
        match at {
            At::Memtable => 0,
            At::Level(l) => 1 + l.min(TRACKED_LEVELS - 1),
        }
    }

    /// The slot of projection `cols` (ascending value-column indices) among `op`'s, registering
    /// it if new; [`SHAPES`] when every slot holds another projection.
    pub(crate) fn shape(&self, op: Op, cols: impl Iterator<Item = usize> + Clone) -> usize {
        let cols = cols.filter(|&c| c < self.nvals);
        let slots = &self.shapes[op as usize];
        // FNV-1a over the indices: a start slot, then linear probing. Slots are only ever
        // filled, so a projection always ends at the same slot.
        let start =
            cols.clone().fold(0xcbf2_9ce4_8422_2325_u64, |h, c| (h ^ c as u64).wrapping_mul(0x0100_0000_01b3)) as usize;
        for i in 0..SHAPES {
            let slot = &slots[(start + i) % SHAPES];
            let held = slot.get_or_init(|| cols.clone().collect());
            if held.iter().copied().eq(cols.clone()) {
                return (start + i) % SHAPES;
            }
        }
        SHAPES
    }

    /// Where the counters of `op` at `at` start.
    fn base(&self, at: At, op: Op) -> usize {
        (Self::place(at) * 3 + op as usize) * (self.nvals + 1)
    }

    /// Counts one operation at `at` touching the value columns `cols` (ascending); a scan
    /// passes the entries of the files it overlaps there (others 0).
    pub(crate) fn record(&self, at: At, op: Op, cols: impl Iterator<Item = usize> + Clone, entries: u64) {
        let shape = self.shape(op, cols.clone());
        self.record_shaped(at, op, cols, shape, entries);
    }

    /// [`Self::record`] with the projection's slot already found by [`Self::shape`] (an
    /// operation counted at several places looks its projection up once).
    pub(crate) fn record_shaped(&self, at: At, op: Op, cols: impl Iterator<Item = usize>, shape: usize, entries: u64) {
        if UNCOUNTED.with(std::cell::Cell::get) {
            return;
        }
        if self.tracing.load(Ordering::Relaxed) {
            let cols: Vec<usize> = cols.filter(|&c| c < self.nvals).collect();
            self.trace_event(|w| w.op(at, op, &cols, entries));
            return self.count(at, op, cols.into_iter(), shape, entries);
        }
        self.count(at, op, cols, shape, entries)
    }

    fn count(&self, at: At, op: Op, cols: impl Iterator<Item = usize>, shape: usize, entries: u64) {
        let base = self.base(at, op);
        self.counts.add(base, 1);
        for c in cols.filter(|&c| c < self.nvals) {
            self.counts.add(base + 1 + c, 1);
        }
        let place = Self::place(at);
        self.by_shape.add((place * 4 + op as usize) * (SHAPES + 1) + shape, 1);
        if entries > 0 {
            self.by_shape.add((place * 4 + 3) * (SHAPES + 1) + shape, entries);
        }
    }

    /// Counts `n` rows written whole (puts) into the memtable.
    pub(crate) fn record_inserts(&self, n: u64) {
        if UNCOUNTED.with(std::cell::Cell::get) {
            return;
        }
        if self.tracing.load(Ordering::Relaxed) {
            self.trace_event(|w| w.inserts(n));
        }
        self.by_shape.add(PLACES * 4 * (SHAPES + 1), n);
    }

    /// Rows written whole since open.
    pub(crate) fn inserts(&self) -> u64 {
        self.by_shape.get(PLACES * 4 * (SHAPES + 1))
    }

    /// The operations of type `op` at `at` by projection, those of projections without a slot
    /// last.
    pub(crate) fn shapes(&self, at: At, op: Op) -> Vec<ShapeCount> {
        let place = Self::place(at);
        (0..=SHAPES)
            .filter_map(|s| {
                let ops = self.by_shape.get((place * 4 + op as usize) * (SHAPES + 1) + s);
                let entries = self.by_shape.get((place * 4 + 3) * (SHAPES + 1) + s);
                let cols = if s < SHAPES { Some(self.shapes[op as usize][s].get()?.to_vec()) } else { None };
                (ops > 0).then_some(ShapeCount { cols, ops, entries: if op == Op::Scan { entries } else { 0 } })
            })
            .collect()
    }

    /// `(operations, per-column counts)` of `op` at `at`.
    pub(crate) fn read(&self, at: At, op: Op) -> (u64, Vec<u64>) {
        let base = self.base(at, op);
        (self.counts.get(base), (0..self.nvals).map(|c| self.counts.get(base + 1 + c)).collect())
    }
}

/// The value columns marked in `wanted` (all of `nvals` when `None`).
pub(crate) fn wanted_columns(wanted: Option<&[bool]>, nvals: usize) -> impl Iterator<Item = usize> + Clone + '_ {
    (0..nvals).filter(move |&c| wanted.is_none_or(|w| w.get(c).copied().unwrap_or(false)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_counted_by_projection_until_the_slots_run_out() {
        let w = Workload::new(8);
        for _ in 0..3 {
            w.record(At::Level(2), Op::Scan, [1, 2].into_iter(), 100);
        }
        w.record(At::Level(2), Op::Scan, [5].into_iter(), 7);
        w.record(At::Level(2), Op::PointRead, 0..8, 0);
        let mut scans = w.shapes(At::Level(2), Op::Scan);
        scans.sort_by_key(|s| s.ops);
        assert_eq!(
            scans,
            vec![
                ShapeCount { cols: Some(vec![5]), ops: 1, entries: 7 },
                ShapeCount { cols: Some(vec![1, 2]), ops: 3, entries: 300 },
            ]
        );
        assert_eq!(
            w.shapes(At::Level(2), Op::PointRead),
            vec![ShapeCount { cols: Some((0..8).collect()), ops: 1, entries: 0 }]
        );
        assert!(w.shapes(At::Level(1), Op::Scan).is_empty());
        // Every non-empty subset of the 8 columns as updates: the first SHAPES get the update
        // slots, the others are counted together, none lost; the scans keep theirs.
        for mask in 1u32..256 {
            w.record(At::Memtable, Op::Update, (0..8).filter(|c| mask >> c & 1 == 1), 0);
        }
        let ups = w.shapes(At::Memtable, Op::Update);
        let named = ups.iter().filter(|s| s.cols.is_some()).count();
        assert_eq!(named, SHAPES);
        assert_eq!(ups.iter().map(|s| s.ops).sum::<u64>(), 255);
        assert_eq!(ups.last().map(|s| (s.cols.is_none(), s.ops)), Some((true, 255 - named as u64)));
        w.record(At::Level(2), Op::Scan, [6, 7].into_iter(), 1);
        assert!(w.shapes(At::Level(2), Op::Scan).iter().any(|s| s.cols == Some(vec![6, 7])));
        w.record_inserts(5);
        assert_eq!(w.inserts(), 5);

        // A window: what was counted after a mark, in the same projection slots.
        let mark = w.mark();
        w.record(At::Level(2), Op::Scan, [1, 2].into_iter(), 40);
        w.record(At::Level(3), Op::PointRead, [4].into_iter(), 0);
        w.record_inserts(2);
        let window = w.since(Some(&mark));
        assert_eq!(
            window.shapes(At::Level(2), Op::Scan),
            vec![ShapeCount { cols: Some(vec![1, 2]), ops: 1, entries: 40 }]
        );
        assert_eq!(window.read(At::Level(3), Op::PointRead), (1, vec![0, 0, 0, 0, 1, 0, 0, 0]));
        assert!(window.shapes(At::Memtable, Op::Update).is_empty());
        assert_eq!((window.inserts(), window.total_ops()), (2, 4));
        assert_eq!(w.since(None).total_ops(), w.total_ops());
        // Decayed: the earlier window's counts at a fraction, in the same slots.
        let mark = w.mark();
        w.record(At::Level(2), Op::Scan, [1, 2].into_iter(), 10);
        let next = w.since_decayed(Some(&mark), Some(&window), 0.5);
        assert_eq!(
            next.shapes(At::Level(2), Op::Scan),
            vec![ShapeCount { cols: Some(vec![1, 2]), ops: 1, entries: 30 }]
        );
        assert_eq!(next.inserts(), 1);
    }
}
