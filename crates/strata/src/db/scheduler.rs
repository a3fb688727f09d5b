//! The background scheduler: the threads that flush memtables, run compactions, merge lineage
//! tables and re-advise layouts, the state they share, the failure that stops them and their
//! shutdown. It chooses operations ([`Op`]) and says why ([`Scheduler::recent`]); the database
//! runs them through the narrow [`Background`] interface.
//!
//! Each kind of work has a lane: one flush thread, `compaction_threads` compaction threads, a
//! lineage thread (started with the first lineage table) and a self-advising thread (with
//! [`Options::self_advise`](super::Options::self_advise)). A lane looks for work, and when it
//! finds none it sleeps until an event of its kind ([`Events`]) says there may be some:
//!
//! | lane | woken by |
//! | --- | --- |
//! | flush | a memtable frozen |
//! | compaction | a version installed, a compaction or manual operation ended, a scan's staging wish, settling asked, a timer while re-layout waits for its rate or tiers make access counts matter |
//! | lineage | lineage writes enough for a merge or a checkpoint; a 20 ms timer while tail records wait for a merge |
//! | self-advise | its period |
//!
//! and waiters (stalled writers, [`Db::flush`](super::Db::flush), manual compactions, ingests)
//! sleep until a progress event: a version installed, work ended, a failure, shutdown.
//!
//! Locks: the state lock is never held with the version lock (a pick reads the version
//! through the read view); under it only `error` and the event counts' locks are taken, which
//! are leaves.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::compaction::policy::CompactionTask;
use crate::error::{Error, Result};
use crate::sync::{site, Events, Mutex, MutexGuard};

/// What the background work is doing, under the scheduler's lock.
#[derive(Debug)]
pub(crate) struct BgState {
    pub shutting_down: bool,
    pub flush_running: bool,
    /// Files being compacted: no two compactions share an input.
    pub busy: HashSet<u64>,
    pub running_compactions: usize,
    /// Manual compactions, layout changes and ingest installs in progress; background
    /// compactions are not picked meanwhile.
    pub manual: usize,
    /// Callers waiting for the tree to settle: staging compactions run for every file whose
    /// marking is deferred, not only when due.
    pub settling: usize,
    /// Sequence numbers of the ingests building their files; they install in this order.
    pub ingests: std::collections::BTreeSet<u64>,
    /// The largest sequence number an ingest was given since open.
    pub ingest_seq: u64,
    /// Where temperature-blind eviction goes on from: (table, largest key of the last file it
    /// moved to the slow tier).
    pub evict_after: (u32, Vec<u8>),
    /// When the background re-layout may rewrite its next file (it reads at most
    /// [`Options::relayout_bytes_per_sec`](super::Options::relayout_bytes_per_sec)).
    pub relayout_after: Instant,
    /// Whether the lineage thread runs.
    pub lineage_started: bool,
}

impl Default for BgState {
    fn default() -> Self {
        BgState {
            shutting_down: false,
            flush_running: false,
            busy: HashSet::new(),
            running_compactions: 0,
            manual: 0,
            settling: 0,
            ingests: Default::default(),
            ingest_seq: 0,
            evict_after: (0, Vec::new()),
            relayout_after: Instant::now(),
            lineage_started: false,
        }
    }
}

/// An operation a lane runs.
#[derive(Debug)]
pub(crate) enum Op {
    /// The oldest frozen memtable into Level-0 files.
    Flush,
    /// A compaction: size-based, staging, tier move or re-layout.
    Compact(CompactionTask),
    /// A pass of lineage merges, history reclaims and, when due, a checkpoint; `idle`: ranges
    /// whose tails stopped growing are merged however few records they hold.
    LineagePass { idle: bool },
    /// A round of self-advising over every table of row-group files.
    SelfAdvise,
}

impl Op {
    /// What the operation is, and why it was chosen.
    pub(crate) fn why(&self) -> String {
        match self {
            Op::Flush => "flush: a frozen memtable waits".into(),
            Op::Compact(t) => t.why(),
            Op::LineagePass { idle: false } => "lineage pass: tail records arrived".into(),
            Op::LineagePass { idle: true } => "lineage pass: tails waiting while writes paused".into(),
            Op::SelfAdvise => "self-advising: its period came".into(),
        }
    }
}

/// What the scheduler asks of the database: whether work is due, and running it.
pub(crate) trait Background: Send + Sync + 'static {
    fn scheduler(&self) -> &Scheduler;
    /// Whether a frozen memtable waits for flush.
    fn flush_due(&self) -> bool;
    /// Flushes the oldest frozen memtable.
    fn flush(&self) -> Result<()>;
    /// What the next pick needs besides the version and the state: values computed before the
    /// scheduler's lock is taken (they may read files).
    fn pick_inputs(&self, settle: bool) -> PickInputs;
    /// The next compaction, chosen under the scheduler's lock from `inputs` and `state` (busy
    /// files, the eviction cursor, the re-layout's next turn).
    fn pick(&self, inputs: &PickInputs, state: &BgState) -> Option<CompactionTask>;
    /// Notes in `state` that `task` was picked to run (the eviction cursor, the re-layout's
    /// next turn).
    fn picked(&self, task: &CompactionTask, state: &mut BgState);
    fn compact(&self, task: &CompactionTask) -> Result<()>;
    /// When the compaction lanes look again without an event (none: only on events).
    fn compaction_timer(&self, state: &BgState) -> Option<Instant>;
    /// A lineage pass; returns the ranges merged.
    fn lineage_pass(&self, idle: bool) -> usize;
    /// Whether tail records wait for a merge (the lineage lane looks again after
    /// [`LINEAGE_QUIET`]).
    fn lineage_pending(&self) -> bool;
    /// One round of self-advising.
    fn self_advise(self: &Arc<Self>, rounds: &mut crate::advisor::selfadvise::Rounds);
}

/// What a pick reads that is not in the version: computed outside the scheduler's lock.
#[derive(Default)]
pub(crate) struct PickInputs {
    /// The access histograms (empty where no choice can use them).
    pub heat: crate::compaction::tiering::Heat,
    /// Tables whose scans wish for a staging compaction.
    pub staging_wanted: HashSet<u32>,
    /// Files the re-layout would rewrite, by level and number; `None` while it waits.
    pub stale: Option<HashSet<(usize, u64)>>,
    pub settle: bool,
}

/// How long the lineage lane waits for more writes before it merges tails that stopped
/// growing.
pub(crate) const LINEAGE_QUIET: Duration = Duration::from_millis(20);

/// How many recent choices [`Scheduler::recent`] keeps.
const RECENT: usize = 32;

/// The background threads, their state, their events and the failure that stops them.
pub(crate) struct Scheduler {
    state: Mutex<BgState>,
    /// Work for the flush lane: a memtable was frozen.
    pub flush_work: Events,
    /// Work for the compaction lanes (shared with the tables' staging wishes).
    pub compaction_work: Arc<Events>,
    /// Work for the lineage lane.
    pub lineage_work: Arc<Events>,
    /// Work for the self-advising lane (only shutdown signals it).
    advise_work: Events,
    /// Progress, for waiters.
    progress: Events,
    /// The first background or write failure, after which writes are refused.
    error: Mutex<Option<String>>,
    /// Set once `error` holds a failure.
    poisoned: AtomicBool,
    /// Held by a manual compaction, a layout change, an ingest install or a change of the
    /// traced tables for its whole length, so none runs inside another.
    pub manual_ops: Mutex<()>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The last operations chosen, each with why.
    recent: Mutex<VecDeque<String>>,
}

impl Scheduler {
    /// A scheduler with no thread yet; `compaction_work` is what tables' staging wishes signal.
    pub(crate) fn new(compaction_work: Arc<Events>, lineage_work: Arc<Events>) -> Self {
        Scheduler {
            state: Mutex::new(&site::BACKGROUND, BgState::default()),
            flush_work: Events::new(&site::BACKGROUND),
            compaction_work,
            lineage_work,
            advise_work: Events::new(&site::BACKGROUND),
            progress: Events::new(&site::BACKGROUND),
            error: Mutex::new(&site::BACKGROUND, None),
            poisoned: AtomicBool::new(false),
            manual_ops: Mutex::new(&site::OTHER, ()),
            threads: Mutex::new(&site::OTHER, Vec::new()),
            recent: Mutex::new(&site::OTHER, VecDeque::new()),
        }
    }

    /// The state, locked.
    pub(crate) fn state(&self) -> MutexGuard<'_, BgState> {
        self.state.lock()
    }

    /// Starts the flush lane, `compactions` compaction lanes, the lineage lane when
    /// `lineage`, and a self-advising lane every `advise` when given.
    pub(crate) fn start<B: Background>(
        db: &Arc<B>,
        compactions: usize,
        lineage: bool,
        advise: Option<Duration>,
    ) -> Result<()> {
        let sched = db.scheduler();
        let d = db.clone();
        sched.spawn("strata-flush".into(), move || flush_lane(&*d))?;
        for i in 1..=compactions {
            let d = db.clone();
            sched.spawn(format!("strata-compact-{i}"), move || compaction_lane(&*d))?;
        }
        if lineage {
            Scheduler::start_lineage(db)?;
        }
        if let Some(every) = advise {
            let d = db.clone();
            sched.spawn("strata-advise".into(), move || advise_lane(&d, every))?;
        }
        Ok(())
    }

    /// Starts the lineage lane if it does not run yet (a lineage table was created).
    pub(crate) fn start_lineage<B: Background>(db: &Arc<B>) -> Result<()> {
        let sched = db.scheduler();
        {
            let mut st = sched.state.lock();
            if st.lineage_started || st.shutting_down {
                return Ok(());
            }
            st.lineage_started = true;
        }
        let d = db.clone();
        sched.spawn("strata-lineage".into(), move || lineage_lane(&*d))
    }

    fn spawn(&self, name: String, f: impl FnOnce() + Send + 'static) -> Result<()> {
        let t = std::thread::Builder::new().name(name).spawn(f).map_err(|e| Error::io("<threads>", e))?;
        self.threads.lock().push(t);
        Ok(())
    }

    /// Stops every lane and waits for them.
    pub(crate) fn shutdown(&self) {
        self.state.lock().shutting_down = true;
        self.wake_all();
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *self.threads.lock());
        for t in threads {
            let _ = t.join();
        }
    }

    fn wake_all(&self) {
        self.flush_work.signal();
        self.compaction_work.signal();
        self.lineage_work.signal();
        self.advise_work.signal();
        self.progress.signal();
    }

    /// A memtable was frozen.
    pub(crate) fn frozen(&self) {
        self.flush_work.signal();
    }

    /// A version was installed: compactions may be due, and waiters may go on.
    pub(crate) fn installed(&self) {
        self.compaction_work.signal();
        self.progress.signal();
    }

    /// Something waiters wait for changed (and compactions may be due): an operation ended,
    /// a manual operation ended, an ingest installed or gave up.
    pub(crate) fn changed(&self) {
        self.compaction_work.signal();
        self.progress.signal();
    }

    /// Fails once a failure left the files in doubt.
    pub(crate) fn check(&self) -> Result<()> {
        // The flag is set after the message, so the lock is taken only once there is one.
        if self.poisoned.load(Ordering::Acquire) {
            if let Some(e) = self.error.lock().clone() {
                return Err(Error::Poisoned(e));
            }
        }
        Ok(())
    }

    /// The failure, if any.
    pub(crate) fn failure(&self) -> Option<String> {
        self.error.lock().clone()
    }

    /// Records a failure that leaves the on-disk state uncertain; all later writes fail.
    pub(crate) fn poison(&self, e: &Error) {
        let mut g = self.error.lock();
        if g.is_none() {
            *g = Some(e.to_string());
            self.poisoned.store(true, Ordering::Release);
        }
        drop(g);
        self.progress.signal();
    }

    /// Waits until `done` holds for the state (it may look at anything a progress event
    /// announces: the read view, the version). Fails if the database fails or closes first.
    pub(crate) fn wait_for(&self, done: impl Fn(&BgState) -> bool) -> Result<()> {
        self.wait_for_with(|| (), |st, ()| done(st))
    }

    /// [`Self::wait_for`], with `prepare` run before each look, outside the state lock (for
    /// what may read files), and its value handed to `done`.
    pub(crate) fn wait_for_with<T>(&self, prepare: impl Fn() -> T, done: impl Fn(&BgState, &T) -> bool) -> Result<()> {
        loop {
            let seen = self.progress.seen();
            let prepared = prepare();
            {
                let st = self.state.lock();
                if let Some(e) = self.failure() {
                    return Err(Error::Poisoned(e));
                }
                if st.shutting_down {
                    return Err(Error::Closed);
                }
                if done(&st, &prepared) {
                    return Ok(());
                }
            }
            self.progress.wait(seen, None);
        }
    }

    /// Waits until `done` holds for the state, whatever failed; `Err(Closed)` on shutdown.
    pub(crate) fn wait_state(&self, done: impl Fn(&BgState) -> bool) -> Result<MutexGuard<'_, BgState>> {
        loop {
            let seen = self.progress.seen();
            {
                let st = self.state.lock();
                if st.shutting_down {
                    return Err(Error::Closed);
                }
                if done(&st) {
                    return Ok(st);
                }
            }
            self.progress.wait(seen, None);
        }
    }

    /// Pauses background compactions: returns once the running ones are done; they are not
    /// picked again until [`Self::resume`].
    pub(crate) fn pause(&self) -> Result<()> {
        self.state.lock().manual += 1;
        match self.wait_state(|st| st.running_compactions == 0) {
            Ok(_) => Ok(()),
            Err(e) => {
                self.resume();
                Err(e)
            }
        }
    }

    /// Ends a [`Self::pause`].
    pub(crate) fn resume(&self) {
        self.state.lock().manual -= 1;
        self.changed();
    }

    /// Waits while `stop` holds for writers (a write stall), taking `stalled` for the time
    /// waited. Fails once the database fails or closes.
    pub(crate) fn stall_while(&self, stop: impl Fn() -> bool, stalled: impl FnOnce(Duration)) -> Result<()> {
        let t = Instant::now();
        let mut nudged = false;
        let res = loop {
            let seen = self.progress.seen();
            if self.state.lock().shutting_down {
                break Err(Error::Closed);
            }
            if let Err(e) = self.check() {
                break Err(e);
            }
            if !stop() {
                break Ok(());
            }
            if !nudged {
                // What stalls writers is work the lanes were told of; a look more is cheap.
                nudged = true;
                self.flush_work.signal();
                self.compaction_work.signal();
            }
            self.progress.wait(seen, None);
        };
        stalled(t.elapsed());
        res
    }

    /// Notes a choice.
    fn chose(&self, op: &Op) {
        let mut r = self.recent.lock();
        if r.len() == RECENT {
            r.pop_front();
        }
        r.push_back(op.why());
    }

    /// The last operations the lanes chose, oldest first, each with why.
    pub(crate) fn recent(&self) -> Vec<String> {
        self.recent.lock().iter().cloned().collect()
    }
}

/// The flush lane: the oldest frozen memtable, one at a time.
fn flush_lane<B: Background>(db: &B) {
    let s = db.scheduler();
    loop {
        let seen = s.flush_work.seen();
        {
            let mut st = s.state.lock();
            if st.shutting_down {
                return;
            }
            if s.check().is_err() || st.flush_running || !db.flush_due() {
                drop(st);
                s.flush_work.wait(seen, None);
                continue;
            }
            st.flush_running = true;
        }
        s.chose(&Op::Flush);
        let res = db.flush();
        finish(s, res, |st| st.flush_running = false);
    }
}

/// A compaction lane: picks under the state lock, from inputs taken before it.
fn compaction_lane<B: Background>(db: &B) {
    let s = db.scheduler();
    loop {
        let seen = s.compaction_work.seen();
        let settle = {
            let st = s.state.lock();
            if st.shutting_down {
                return;
            }
            st.settling > 0
        };
        let inputs = db.pick_inputs(settle);
        let (task, timer) = {
            let mut st = s.state.lock();
            if st.shutting_down {
                return;
            }
            let task = match s.check().is_ok() && st.manual == 0 {
                true => db.pick(&inputs, &st),
                false => None,
            };
            match task {
                Some(t) => {
                    db.picked(&t, &mut st);
                    st.busy.extend(t.all_inputs().map(|f| f.number));
                    st.running_compactions += 1;
                    (Some(t), None)
                }
                None => (None, db.compaction_timer(&st)),
            }
        };
        let Some(task) = task else {
            s.compaction_work.wait(seen, timer);
            continue;
        };
        let op = Op::Compact(task);
        s.chose(&op);
        let Op::Compact(task) = op else { continue };
        let res = db.compact(&task);
        finish(s, res, |st| {
            for f in task.all_inputs() {
                st.busy.remove(&f.number);
            }
            st.running_compactions -= 1;
        });
    }
}

/// Ends an operation: `release` what it held in the state, record its failure, and tell the
/// waiters and the compaction lanes.
fn finish(s: &Scheduler, res: Result<()>, release: impl FnOnce(&mut BgState)) {
    {
        let mut st = s.state.lock();
        release(&mut st);
        if let Err(e) = &res {
            if !st.shutting_down {
                s.poison(e);
            }
        }
    }
    s.changed();
}

/// The lineage lane: passes while they merge; then it sleeps until enough writes arrive, or
/// [`LINEAGE_QUIET`] while tails wait (the next pass merges those that stopped growing).
fn lineage_lane<B: Background>(db: &B) {
    let s = db.scheduler();
    let mut quiet_look = Instant::now();
    loop {
        let seen = s.lineage_work.seen();
        if s.state.lock().shutting_down {
            return;
        }
        // Every LINEAGE_QUIET at most, a pass also merges ranges whose tails did not grow
        // since the last such look, however few records they hold.
        let idle = quiet_look.elapsed() >= LINEAGE_QUIET;
        if idle {
            quiet_look = Instant::now();
        }
        let op = Op::LineagePass { idle };
        if db.lineage_pass(idle) > 0 {
            s.chose(&op);
            continue;
        }
        let deadline = db.lineage_pending().then(|| quiet_look + LINEAGE_QUIET);
        s.lineage_work.wait(seen, deadline);
    }
}

/// The self-advising lane: a round every `every`.
fn advise_lane<B: Background>(db: &Arc<B>, every: Duration) {
    let s = db.scheduler();
    let mut rounds = crate::advisor::selfadvise::Rounds::default();
    loop {
        let deadline = Instant::now() + every;
        loop {
            let seen = s.advise_work.seen();
            if s.state.lock().shutting_down {
                return;
            }
            if Instant::now() >= deadline {
                break;
            }
            s.advise_work.wait(seen, Some(deadline));
        }
        if s.check().is_err() {
            continue;
        }
        s.chose(&Op::SelfAdvise);
        db.self_advise(&mut rounds);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::sync::site;

    /// A database that counts how often the lanes look for work, and has the work it is given.
    struct Fake {
        sched: Scheduler,
        flush_looks: AtomicUsize,
        compaction_looks: AtomicUsize,
        lineage_passes: AtomicUsize,
        frozen: AtomicUsize,
        flushed: AtomicUsize,
        tasks: Mutex<Vec<CompactionTask>>,
        compacted: AtomicUsize,
    }

    impl Fake {
        fn new() -> Arc<Fake> {
            Arc::new(Fake {
                sched: Scheduler::new(
                    Arc::new(Events::new(&site::BACKGROUND)),
                    Arc::new(Events::new(&site::BACKGROUND)),
                ),
                flush_looks: AtomicUsize::new(0),
                compaction_looks: AtomicUsize::new(0),
                lineage_passes: AtomicUsize::new(0),
                frozen: AtomicUsize::new(0),
                flushed: AtomicUsize::new(0),
                tasks: Mutex::new(&site::OTHER, Vec::new()),
                compacted: AtomicUsize::new(0),
            })
        }

        fn looks(&self) -> (usize, usize, usize) {
            let get = |a: &AtomicUsize| a.load(Ordering::SeqCst);
            (get(&self.flush_looks), get(&self.compaction_looks), get(&self.lineage_passes))
        }
    }

    impl Background for Fake {
        fn scheduler(&self) -> &Scheduler {
            &self.sched
        }
        fn flush_due(&self) -> bool {
            self.flush_looks.fetch_add(1, Ordering::SeqCst);
            self.frozen.load(Ordering::SeqCst) > self.flushed.load(Ordering::SeqCst)
        }
        fn flush(&self) -> Result<()> {
            self.flushed.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn pick_inputs(&self, settle: bool) -> PickInputs {
            self.compaction_looks.fetch_add(1, Ordering::SeqCst);
            PickInputs { settle, ..PickInputs::default() }
        }
        fn pick(&self, _: &PickInputs, _: &BgState) -> Option<CompactionTask> {
            self.tasks.lock().pop()
        }
        fn picked(&self, _: &CompactionTask, _: &mut BgState) {}
        fn compact(&self, _: &CompactionTask) -> Result<()> {
            self.compacted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn compaction_timer(&self, _: &BgState) -> Option<Instant> {
            None
        }
        fn lineage_pass(&self, _: bool) -> usize {
            self.lineage_passes.fetch_add(1, Ordering::SeqCst);
            0
        }
        fn lineage_pending(&self) -> bool {
            false
        }
        fn self_advise(self: &Arc<Self>, _: &mut crate::advisor::selfadvise::Rounds) {}
    }

    /// Waits up to a few seconds for `f`.
    fn eventually(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !f() {
            assert!(Instant::now() < deadline, "{what} did not happen");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn task(table: u32) -> CompactionTask {
        CompactionTask {
            table,
            level: 1,
            cg: 0,
            output_level: 2,
            inputs: Vec::new(),
            next_inputs: Vec::new(),
            trivial_move: false,
            bottommost: false,
            score: 1.5,
            to_tier: None,
            relayout: false,
        }
    }

    #[test]
    fn idle_lanes_sleep_until_an_event_of_their_kind() {
        let db = Fake::new();
        Scheduler::start(&db, 2, true, None).unwrap();
        // Each lane looks once at start, then sleeps.
        eventually("the first looks", || {
            let (f, c, l) = db.looks();
            f >= 1 && c >= 2 && l >= 1
        });
        std::thread::sleep(Duration::from_millis(50));
        let idle = db.looks();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(db.looks(), idle, "a lane looked for work with no event");

        // A frozen memtable wakes the flush lane alone, which flushes it.
        db.frozen.fetch_add(1, Ordering::SeqCst);
        db.sched.frozen();
        eventually("the flush", || db.flushed.load(Ordering::SeqCst) == 1);
        // (The flush's end is news to the compaction lanes: a flush adds Level-0 files.)
        eventually("the compaction lanes' look after the flush", || db.looks().1 > idle.1);
        std::thread::sleep(Duration::from_millis(50));
        let after_flush = db.looks();
        assert_eq!(after_flush.2, idle.2, "the lineage lane woke for a flush");

        // An installed version wakes the compaction lanes, which run what they pick.
        db.tasks.lock().push(task(7));
        db.sched.installed();
        eventually("the compaction", || db.compacted.load(Ordering::SeqCst) == 1);
        assert!(db.sched.recent().iter().any(|w| w.contains("Level-1 of table 7")), "{:?}", db.sched.recent());

        // Lineage writes wake the lineage lane.
        db.sched.lineage_work.signal();
        eventually("the lineage pass", || db.looks().2 > idle.2);
        db.sched.shutdown();
    }

    #[test]
    fn a_failure_stops_picking_and_wakes_waiters_with_it() {
        let db = Fake::new();
        Scheduler::start(&db, 1, false, None).unwrap();
        let waiter = {
            let db = db.clone();
            std::thread::spawn(move || db.sched.wait_for(|_| false))
        };
        std::thread::sleep(Duration::from_millis(20));
        db.sched.poison(&Error::io("/x", std::io::Error::other("disk gone")));
        let res = waiter.join().unwrap();
        assert!(matches!(&res, Err(Error::Poisoned(m)) if m.contains("disk gone")), "{res:?}");
        // Poisoned: work is no longer picked.
        db.tasks.lock().push(task(1));
        db.sched.installed();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(db.compacted.load(Ordering::SeqCst), 0);
        assert!(db.sched.check().is_err());
        db.sched.shutdown();
    }

    #[test]
    fn shutdown_stops_every_lane_and_fails_waiters() {
        let db = Fake::new();
        Scheduler::start(&db, 3, true, Some(Duration::from_secs(3600))).unwrap();
        let waiter = {
            let db = db.clone();
            std::thread::spawn(move || db.sched.wait_for(|_| false))
        };
        std::thread::sleep(Duration::from_millis(20));
        let t = Instant::now();
        db.sched.shutdown();
        assert!(t.elapsed() < Duration::from_secs(2), "shutdown waited on a lane");
        assert!(matches!(waiter.join().unwrap(), Err(Error::Closed)));
    }
}
