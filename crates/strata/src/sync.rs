//! The engine's locks and per-core counters, made to show contention.
//!
//! Every lock of the engine is a [`Mutex`] of this module, named by the [`Site`]
//! it belongs to. Taking one tries it first; only when that fails is the wait timed and added to
//! its site's counters, so an uncontended lock costs what parking_lot's does and a contended one
//! shows up in [`lock_waits`] (`strata-bench ycsb --lock-waits` prints them per run).
//!
//! Counters bumped on every read or write are [`PerCore`]: one padded stripe per core (threads
//! are dealt stripes in turn), summed when read, so threads on different cores never write the
//! same cache line.
//!
//! With the `contention` feature (and in the crate's unit tests) each thread also counts the
//! locks it takes, the waits among them and the writes it makes to atomics other threads write
//! too ([`thread_counts`]): a test can then say what one point read or one write costs in shared
//! writes, which no timing on a 2-core machine can show.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, Guard};
pub(crate) use parking_lot::{Condvar, MutexGuard};

/// Where a lock belongs: its waits are added up here, over every database in the process.
pub(crate) struct Site {
    name: &'static str,
    waits: AtomicU64,
    wait_nanos: AtomicU64,
}

impl Site {
    const fn new(name: &'static str) -> Self {
        Site { name, waits: AtomicU64::new(0), wait_nanos: AtomicU64::new(0) }
    }

    fn waited(&self, d: Duration) {
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.wait_nanos.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
        count(|c| c.waits += 1);
    }
}

/// The lock sites, by what they guard.
pub(crate) mod site {
    use super::Site;

    pub(crate) static COMMIT: Site = Site::new("commit queue");
    pub(crate) static WAL: Site = Site::new("WAL writer");
    pub(crate) static CONFLICTS: Site = Site::new("conflict window");
    pub(crate) static ROW_LOCKS: Site = Site::new("row locks");
    pub(crate) static SNAPSHOTS: Site = Site::new("snapshot registry");
    pub(crate) static VERSIONS: Site = Site::new("version set");
    pub(crate) static VIEW: Site = Site::new("read view (writers)");
    pub(crate) static BACKGROUND: Site = Site::new("background jobs");
    pub(crate) static COUNTERS: Site = Site::new("I/O counters");
    pub(crate) static CLOCK: Site = Site::new("commit clock");
    pub(crate) static BATCHES: Site = Site::new("batch ranges");
    pub(crate) static LINEAGE: Site = Site::new("lineage tables");
    pub(crate) static TABLE_CACHE: Site = Site::new("table cache");
    pub(crate) static HEAT: Site = Site::new("access histograms");
    pub(crate) static SCANS: Site = Site::new("scan engine");
    pub(crate) static FS: Site = Site::new("file system");
    pub(crate) static SEQUENCES: Site = Site::new("sequences");
    pub(crate) static STORES: Site = Site::new("tables' states (writers)");
    pub(crate) static OTHER: Site = Site::new("other");

    pub(super) static ALL: [&Site; 19] = [
        &COMMIT,
        &WAL,
        &CONFLICTS,
        &ROW_LOCKS,
        &SNAPSHOTS,
        &VERSIONS,
        &VIEW,
        &BACKGROUND,
        &COUNTERS,
        &CLOCK,
        &BATCHES,
        &LINEAGE,
        &TABLE_CACHE,
        &HEAT,
        &SCANS,
        &FS,
        &SEQUENCES,
        &STORES,
        &OTHER,
    ];
}

/// Waits on one lock site since the process started, over every database in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockWaits {
    /// What the locks of this site guard.
    pub site: &'static str,
    /// Acquisitions that found the lock taken and waited.
    pub waits: u64,
    /// Time spent waiting, in total over every thread.
    pub wait: Duration,
}

/// Every lock site's waits so far (sites that never waited included, with zeros). Differences
/// between two calls are the waits in between.
pub fn lock_waits() -> Vec<LockWaits> {
    site::ALL
        .iter()
        .map(|s| LockWaits {
            site: s.name,
            waits: s.waits.load(Ordering::Relaxed),
            wait: Duration::from_nanos(s.wait_nanos.load(Ordering::Relaxed)),
        })
        .collect()
}

/// A mutex whose contended acquisitions are timed into its site.
pub(crate) struct Mutex<T> {
    site: &'static Site,
    inner: parking_lot::Mutex<T>,
}

impl<T> Mutex<T> {
    pub(crate) const fn new(site: &'static Site, v: T) -> Self {
        Mutex { site, inner: parking_lot::Mutex::new(v) }
    }

    /// The lock if it is free now (counted as taken only then).
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let g = self.inner.try_lock()?;
        count(|c| c.locks += 1);
        Some(g)
    }

    /// True while some thread holds the lock (a hint: it may change at once).
    pub(crate) fn is_locked(&self) -> bool {
        self.inner.is_locked()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        count(|c| c.locks += 1);
        if let Some(g) = self.inner.try_lock() {
            return g;
        }
        let t = Instant::now();
        let g = self.inner.lock();
        self.site.waited(t.elapsed());
        g
    }
}

/// A mutex of the scan engine: the site of the locks that derive their `Default`.
impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(&site::SCANS, T::default())
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

/// A value readers load without a lock (a pin of an [`ArcSwap`] writes only a slot of the
/// reading thread's own) and writers replace one at a time.
pub(crate) struct Swap<T> {
    current: ArcSwap<T>,
    writers: Mutex<()>,
}

impl<T> Swap<T> {
    pub(crate) fn new(site: &'static Site, v: T) -> Self {
        Swap { current: ArcSwap::from_pointee(v), writers: Mutex::new(site, ()) }
    }

    /// The current value, borrowed for a short while: no reference count is taken.
    pub(crate) fn pin(&self) -> Guard<Arc<T>> {
        self.current.load()
    }

    /// The current value, held for as long as the caller keeps it (one reference count).
    pub(crate) fn load(&self) -> Arc<T> {
        shared_write();
        self.current.load_full()
    }

    /// Whether `v` is still the current value.
    pub(crate) fn is_current(&self, v: &Arc<T>) -> bool {
        Arc::ptr_eq(v, &self.current.load())
    }

    /// Replaces the value with `f` of the current one; returns what `f` gave beside it.
    pub(crate) fn update<R>(&self, f: impl FnOnce(&T) -> (T, R)) -> R {
        let _w = self.writers.lock();
        let (next, out) = f(&self.current.load());
        self.current.store(Arc::new(next));
        out
    }
}

/// An event count: a waiter notes [`Events::seen`], checks its condition, and if it does not
/// hold, waits until the count has moved past what it noted. An event signalled between the
/// check and the wait is never missed, and neither side holds a lock while it checks.
/// Signalling costs an atomic add while nobody waits, and a lock and a wake-up while someone
/// does.
pub(crate) struct Events {
    count: AtomicU64,
    waiters: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Events {
    pub(crate) fn new(site: &'static Site) -> Self {
        Events {
            count: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(site, ()),
            cv: Condvar::new(),
        }
    }

    /// The events so far: what a waiter notes before it checks its condition.
    pub(crate) fn seen(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    /// One more event: wakes every waiter.
    pub(crate) fn signal(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        // Paired with the waiter's increment of `waiters` before it reads the count: of the
        // two, at least one sees the other's write (both are sequentially consistent).
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }

    /// Waits until an event comes after `seen` (returns at once if one came already), or until
    /// `deadline`. True when an event came.
    pub(crate) fn wait(&self, seen: u64, deadline: Option<Instant>) -> bool {
        let mut g = self.lock.lock();
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let came = loop {
            if self.count.load(Ordering::SeqCst) != seen {
                break true;
            }
            match deadline {
                None => self.cv.wait(&mut g),
                Some(d) => {
                    if Instant::now() >= d || self.cv.wait_until(&mut g, d).timed_out() {
                        break self.count.load(Ordering::SeqCst) != seen;
                    }
                }
            }
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        came
    }
}

/// A wish raised by one thread and taken down by another, raising it signals `events`.
pub(crate) struct Flag {
    raised: std::sync::atomic::AtomicBool,
    events: Arc<Events>,
}

impl Flag {
    /// A flag down, whose raising signals `events`.
    pub(crate) fn new(events: Arc<Events>) -> Self {
        Flag { raised: std::sync::atomic::AtomicBool::new(false), events }
    }

    /// Raises the flag (signalling only when it was down).
    pub(crate) fn raise(&self) {
        if !self.raised.swap(true, Ordering::AcqRel) {
            self.events.signal();
        }
    }

    pub(crate) fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    /// Takes the flag down; true when it was raised.
    pub(crate) fn take(&self) -> bool {
        self.raised.swap(false, Ordering::AcqRel)
    }
}

/// The number of stripes of a [`PerCore`]: the cores, rounded up to a power of two (at most 64).
fn stripes() -> usize {
    static STRIPES: AtomicUsize = AtomicUsize::new(0);
    match STRIPES.load(Ordering::Relaxed) {
        0 => {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get()).next_power_of_two().min(64);
            STRIPES.store(n, Ordering::Relaxed);
            n
        }
        n => n,
    }
}

/// The calling thread's stripe: threads are dealt stripes in the order they first count.
fn my_stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    STRIPE.with(|s| *s) & (stripes() - 1)
}

/// `width` counters, each kept per core: adding writes the calling thread's stripe only; reading
/// sums the stripes. Stripes are a cache line apart.
pub(crate) struct PerCore {
    width: usize,
    /// Words from one stripe to the next.
    stride: usize,
    cells: Box<[AtomicU64]>,
}

/// Words of padding between stripes: two cache lines, so neighbouring stripes never share one
/// (nor the line the hardware fetches in pairs with it).
const STRIPE_GAP: usize = 16;

impl PerCore {
    pub(crate) fn new(width: usize) -> Self {
        let stride = width.div_ceil(8) * 8 + STRIPE_GAP;
        let cells = (0..stride * stripes()).map(|_| AtomicU64::new(0)).collect();
        PerCore { width, stride, cells }
    }

    /// Counters held.
    pub(crate) fn width(&self) -> usize {
        self.width
    }

    /// Adds `n` to counter `i` (ignored past the width).
    pub(crate) fn add(&self, i: usize, n: u64) {
        if i < self.width {
            if let Some(c) = self.cells.get(my_stripe() * self.stride + i) {
                c.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Counter `i`, summed over the stripes.
    pub(crate) fn get(&self, i: usize) -> u64 {
        if i >= self.width {
            return 0;
        }
        self.cells.iter().skip(i).step_by(self.stride).map(|c| c.load(Ordering::Relaxed)).fold(0, u64::wrapping_add)
    }

    /// Replaces every counter with `f` of its sum (a concurrent add may be lost).
    pub(crate) fn update(&self, f: impl Fn(u64) -> u64) {
        for i in 0..self.width {
            let v = f(self.get(i));
            for (s, c) in self.cells.iter().skip(i).step_by(self.stride).enumerate() {
                c.store(if s == 0 { v } else { 0 }, Ordering::Relaxed);
            }
        }
    }
}

impl std::fmt::Debug for PerCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries((0..self.width).map(|i| self.get(i))).finish()
    }
}

/// What the calling thread did to memory other threads share, counted with the `contention`
/// feature (all zero without it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadCounts {
    /// Locks taken.
    pub locks: u64,
    /// Of those, the ones that found the lock taken and waited.
    pub waits: u64,
    /// Writes (read-modify-writes included) to atomics other threads write too: reference
    /// counts of shared objects, shared counters, pins of shared structures. Writes to a
    /// [`PerCore`] stripe or to thread-owned epoch slots are not counted.
    pub shared_writes: u64,
}

impl ThreadCounts {
    /// What was counted between `earlier` and `self`.
    pub fn since(self, earlier: ThreadCounts) -> ThreadCounts {
        ThreadCounts {
            locks: self.locks - earlier.locks,
            waits: self.waits - earlier.waits,
            shared_writes: self.shared_writes - earlier.shared_writes,
        }
    }
}

#[cfg(any(test, feature = "contention"))]
thread_local! {
    static COUNTS: std::cell::Cell<ThreadCounts> = const {
        std::cell::Cell::new(ThreadCounts { locks: 0, waits: 0, shared_writes: 0 })
    };
}

#[inline]
fn count(f: impl FnOnce(&mut ThreadCounts)) {
    #[cfg(any(test, feature = "contention"))]
    COUNTS.with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
    #[cfg(not(any(test, feature = "contention")))]
    let _ = f;
}

/// Notes a write to an atomic other threads also write (see [`ThreadCounts::shared_writes`]);
/// called beside every such write on the read and write paths.
#[inline]
pub(crate) fn shared_write() {
    count(|c| c.shared_writes += 1);
}

/// The calling thread's counts so far (all zero without the `contention` feature).
pub fn thread_counts() -> ThreadCounts {
    #[cfg(any(test, feature = "contention"))]
    return COUNTS.with(std::cell::Cell::get);
    #[cfg(not(any(test, feature = "contention")))]
    ThreadCounts::default()
}

/// A rayon pool of `threads` threads named `<name>-<i>`; `what` names them in the error when
/// they cannot start.
pub(crate) fn start_pool(threads: usize, name: &'static str, what: &str) -> crate::Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(move |i| format!("{name}-{i}"))
        .build()
        .map_err(|e| crate::Error::io(format!("<{what}>"), std::io::Error::other(format!("cannot start {what}: {e}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_core_counters_sum_every_thread() {
        let c = PerCore::new(3);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let c = &c;
                s.spawn(move || {
                    for _ in 0..1000 {
                        c.add(1, t + 1);
                    }
                    c.add(2, 1);
                    c.add(3, 1);
                });
            }
        });
        assert_eq!((c.get(0), c.get(1), c.get(2), c.get(3)), (0, 36_000, 8, 0));
        c.update(|v| v / 2);
        assert_eq!((c.get(1), c.get(2)), (18_000, 4));
    }

    #[test]
    fn contended_lock_counts_a_wait() {
        static S: Site = Site::new("test");
        let m = Mutex::new(&S, 0u32);
        let before = thread_counts();
        // The other thread waits only if it reaches the lock while this one holds it: try until
        // it does (a loaded machine may not run it within the first sleeps).
        let mut waited = 0;
        for attempt in 1..=50u64 {
            let g = m.lock();
            let theirs = std::thread::scope(|s| {
                let h = s.spawn(|| {
                    let t = thread_counts();
                    *m.lock() += 1;
                    thread_counts().since(t)
                });
                std::thread::sleep(Duration::from_millis(5 * attempt));
                drop(g);
                h.join().unwrap()
            });
            assert_eq!(theirs.locks, 1);
            waited += theirs.waits;
            if waited > 0 {
                break;
            }
        }
        assert_eq!(waited, 1, "the other thread never found the lock taken");
        assert_eq!(S.waits.load(Ordering::Relaxed), 1);
        assert!(S.wait_nanos.load(Ordering::Relaxed) > 0);
        let mine = thread_counts().since(before);
        assert_eq!((mine.waits, mine.shared_writes), (0, 0));
        assert_eq!(mine.locks, u64::from(*m.lock()));
    }
}
