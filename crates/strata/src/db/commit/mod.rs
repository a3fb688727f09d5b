//! The commit pipeline ([`Committer`]): group commit. Writers queue their batches; whichever
//! writer finds no leader active becomes the leader, takes the whole queue, makes room in the
//! memtable (stalling or rotating), assigns sequence numbers, appends one buffer of WAL records,
//! syncs once if any writer asked for it, applies the group and publishes the new visible
//! sequence. Followers sleep until their result arrives.
//!
//! Only the leader touches the WAL writer, assigns sequence numbers and rotates memtables, so
//! those need no further coordination.
//!
//! A transaction's batch comes with the rows it wrote and its snapshot: the leader checks them
//! against the conflict window ([`crate::mvcc::conflict`]) before it gives out sequence numbers,
//! so a loser is left out of the group (nothing of it is logged or applied) and the others go on;
//! while a write transaction is open, the leader records every committed row there.
//!
//! The pipeline owns the queue, the leader (with the WAL writer), the WAL's number, the
//! conflict window, the row locks, the commit clock and the batch ranges. It reaches the rest
//! of the database only through [`CommitEnv`]: the write stall, new WAL files, the memtable
//! and the stores the writes go to, and the visible sequence number. `tests.rs` drives it with
//! a fake environment; `env.rs` is the database's.

mod env;
pub(crate) mod stall;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};
use crate::mvcc::batches::Batches;
use crate::mvcc::clock::{unix_ms, Clock, SharedClock};
use crate::mvcc::conflict::{ConflictWindow, Lost, RowId};
use crate::mvcc::locks::RowLocks;
use crate::sync::{site, Mutex};
use crate::write::batch::WriteBatch;
use crate::write::wal::{frame, WalWriter};

/// What the commit pipeline needs of the database.
pub(crate) trait CommitEnv: Sync {
    /// Fails when writes are refused (the database is closed, or a failure poisoned it).
    fn check_writable(&self) -> Result<()>;
    /// Checks a batch before it is queued (its tables exist, it fits the in-memory stores'
    /// budget).
    fn admit(&self, batch: &WriteBatch) -> Result<()>;
    /// Waits while writes must stall; true when the memtable is full and the pipeline must
    /// start a new WAL and [`Self::freeze`] it. Leader only.
    fn make_room(&self) -> Result<bool>;
    /// A new WAL file, durable in its directory: its number and its writer.
    fn new_wal(&self) -> Result<(u64, WalWriter)>;
    /// Freezes the memtable and starts one whose writes go to WAL `number`. Leader only.
    fn freeze(&self, number: u64);
    /// The newest visible sequence number.
    fn visible(&self) -> u64;
    /// Makes every write up to `seq` visible. Leader only, in order.
    fn publish(&self, seq: u64);
    /// Whether `batch` writes a store that applies its writes in commit order (then the
    /// group's batches are applied one after another by the leader).
    fn in_order(&self, batch: &WriteBatch) -> bool;
    /// Applies `batch`'s writes from sequence number `first` on, in order. Leader only.
    fn apply(&self, batch: &WriteBatch, first: u64) -> Result<()>;
    /// Inserts `batch`'s writes into the memtable from `first` on: any thread, several
    /// batches at once, for a group none of whose batches is [`Self::in_order`].
    fn insert(&self, batch: &WriteBatch, first: u64) -> Result<()>;
    /// Counts a committed group's batches (bytes written per table).
    fn applied(&self, won: &mut dyn Iterator<Item = &WriteBatch>);
    /// Records a failure that leaves the WAL or the memtable in doubt: writes stop.
    fn poison(&self, e: &Error);
}

/// A queued write: shared by its writer, who waits on it, and the leader that commits it.
pub(crate) type Request = Arc<Slot>;

/// One write request, its outcome, and the writer to wake when there is something for it.
pub(crate) struct Slot {
    batch: WriteBatch,
    sync: bool,
    validate: Option<Validate>,
    /// The commit time a replicated write carries (Unix ms), in place of the clock's.
    at_ms: Option<u64>,
    /// Set by the leader when the writer is to insert its own batch into the memtable, from
    /// the given sequence number on (see [`Inserting`]).
    job: OnceLock<(u64, Arc<Inserting>)>,
    outcome: OnceLock<std::result::Result<(), Failed>>,
    writer: Thread,
}

/// A group whose writers insert their own batches into the memtable at once, after the leader
/// wrote the group to the WAL: the leader publishes the group when the last one is done.
pub(crate) struct Inserting {
    /// Batches not inserted yet.
    left: AtomicUsize,
    leader: Thread,
    /// The first insert that failed (a memtable row that does not decode: a bug).
    failed: OnceLock<String>,
}

impl Inserting {
    fn done(&self, res: Result<()>) {
        if let Err(e) = res {
            let _ = self.failed.set(e.to_string());
        }
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.leader.unpark();
        }
    }
}

/// Groups of at least this many requests insert into the memtable in parallel (see
/// [`Options::parallel_memtable_inserts`](super::Options::parallel_memtable_inserts)).
const PARALLEL_INSERT_GROUP: usize = 3;

/// What only the commit leader touches: whoever holds the leader lock is the leader.
pub(crate) struct Leader {
    wal: WalWriter,
    /// The millisecond of the last clock sample the leader pushed and the last sequence number
    /// it noted ([`SharedClock::note`](crate::mvcc::clock::SharedClock::note)).
    clock: (u64, u64),
}

/// What a transaction's commit is checked by: the rows it wrote, each with the sequence number
/// it knew the row at (no commit of the row after it may have happened).
pub(crate) struct Validate {
    pub rows: Vec<(RowId, u64)>,
}

/// How a request in a commit group ended, when not with success.
#[derive(Debug, Clone)]
pub(crate) enum Failed {
    /// The whole group failed (the database is poisoned or read-only): the message.
    Group(String),
    /// The transaction lost first-committer-wins; nothing of it was written.
    Lost(Lost),
}

/// A group a leader committed, whose writers are to be woken.
struct Led {
    group: Vec<Request>,
    /// The error that failed the leader's own request, if its group failed (the others get
    /// its message).
    own_error: Option<Error>,
}

impl Led {
    /// Wakes the group's writers (the leader's own thread is awake); returns the leader's error.
    fn wake(self) -> Option<Error> {
        let me = std::thread::current().id();
        for r in self.group.iter().filter(|r| r.writer.id() != me) {
            r.writer.unpark();
        }
        self.own_error
    }
}

/// How long a queued writer sleeps before it looks again on its own (a leader wakes it when
/// its request is done; this only bounds the wait should that wake-up be missed).
const WRITER_NAP: Duration = Duration::from_millis(1);

/// Spin hints, then yields, a waiting writer tries before it parks (see
/// [`Committer::spin_until`]): a few microseconds of spinning and up to some tens of
/// microseconds of yields, about the time a group takes to commit.
const SPINS: usize = 256;
const YIELDS: usize = 32;

/// How the pipeline runs: chosen at open.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CommitOptions {
    /// Writers wait awake a little before they park ([`Options::spin_before_park`](super::Options::spin_before_park)).
    pub spin: bool,
    /// Groups may insert into the memtable in parallel
    /// ([`Options::parallel_memtable_inserts`](super::Options::parallel_memtable_inserts)).
    pub parallel_inserts: bool,
    /// The conflict window's budget in bytes ([`Options::txn_window_bytes`](super::Options::txn_window_bytes)).
    pub window_bytes: usize,
}

/// The commit pipeline: see the module.
pub(crate) struct Committer {
    /// Writes waiting for a commit leader (see [`Committer::commit`]).
    queue: crossbeam_queue::SegQueue<Request>,
    /// Held by the commit leader, with what only the leader touches.
    leader: Mutex<Leader>,
    /// The number of the WAL the leader appends to.
    wal_number: AtomicU64,
    /// Whether write transactions are open, so that committed rows must be recorded in the
    /// conflict window (set and cleared under its lock; see [`Self::commit_group`]).
    pub conflicts_open: AtomicBool,
    /// Rows committed while write transactions are open (see [`crate::mvcc::conflict`]).
    pub conflicts: Mutex<ConflictWindow>,
    /// Rows locked by open transactions (see [`crate::mvcc::locks`]).
    pub row_locks: RowLocks,
    /// Wall-clock time to sequence numbers (see [`crate::mvcc::clock`]).
    pub clock: SharedClock,
    /// Where committed batches of several operations begin and end (see
    /// [`crate::mvcc::batches`]), for reads as of a sequence number.
    pub batches: Mutex<Batches>,
    opts: CommitOptions,
}

impl Committer {
    /// A pipeline appending to WAL `wal_number` through `wal`, whose commit clock and batch
    /// ranges go on from `clock` and `batches`, the newest sequence number being `last_seq`.
    pub(crate) fn new(
        (wal_number, wal): (u64, WalWriter),
        clock: Clock,
        batches: Batches,
        last_seq: u64,
        opts: CommitOptions,
    ) -> Self {
        let leader = Leader { wal, clock: (clock.last_ms(), last_seq) };
        Committer {
            queue: crossbeam_queue::SegQueue::new(),
            leader: Mutex::new(&site::COMMIT, leader),
            wal_number: AtomicU64::new(wal_number),
            conflicts_open: AtomicBool::new(false),
            conflicts: Mutex::new(&site::CONFLICTS, ConflictWindow::new(opts.window_bytes)),
            row_locks: RowLocks::default(),
            clock: SharedClock::new(clock),
            batches: Mutex::new(&site::BATCHES, batches),
            opts,
        }
    }

    /// The number of the WAL writes go to now.
    pub(crate) fn wal_number(&self) -> u64 {
        self.wal_number.load(Ordering::SeqCst)
    }

    /// Commits `batch` through the group commit, synced when `sync`, checked by `validate`
    /// when given, at the commit time `at_ms` when given (a replicated write): the outer error
    /// is a failure of the write itself, the inner one a lost check (nothing written).
    ///
    /// The writer queues its request on a lock-free queue and tries the leader lock: the one
    /// that gets it leads, taking every queued request as one group; the others sleep until a
    /// leader has left their outcome. A leader looks at the queue again after it lets the lock
    /// go and wakes a queued writer to lead the rest, so a request queued while the lock was
    /// held is never left waiting (a writer also looks again on its own after [`WRITER_NAP`]).
    /// A write alone thus takes one lock, the leader's.
    pub(crate) fn commit<E: CommitEnv>(
        &self,
        env: &E,
        batch: WriteBatch,
        sync: bool,
        validate: Option<Validate>,
        at_ms: Option<u64>,
    ) -> Result<std::result::Result<(), Lost>> {
        env.check_writable()?;
        if batch.is_empty() {
            return Ok(Ok(()));
        }
        env.admit(&batch)?;
        let slot = Arc::new(Slot {
            batch,
            sync,
            validate,
            at_ms,
            job: OnceLock::new(),
            outcome: OnceLock::new(),
            writer: std::thread::current(),
        });
        crate::sync::shared_write();
        self.queue.push(slot.clone());
        let mut inserted = false;
        loop {
            if let (Some((first, group)), false) = (slot.job.get(), inserted) {
                inserted = true;
                group.done(env.insert(&slot.batch, *first));
            }
            if let Some(outcome) = slot.outcome.get() {
                return match outcome {
                    Ok(()) => Ok(Ok(())),
                    Err(Failed::Lost(lost)) => Ok(Err(lost.clone())),
                    Err(Failed::Group(msg)) => Err(Error::Poisoned(msg.clone())),
                };
            }
            if let Some(mut leader) = self.leader.try_lock() {
                let led = self.lead(env, &mut leader);
                drop(leader);
                let failed = led.wake();
                self.lead_leftovers();
                if let Some(e) = failed {
                    return Err(e);
                }
                continue;
            }
            let ready =
                || (slot.job.get().is_some() && !inserted) || slot.outcome.get().is_some() || !self.leader.is_locked();
            if !self.spin_until(ready) {
                std::thread::park_timeout(WRITER_NAP);
            }
        }
    }

    /// Commits what is queued as one group and leaves each request's outcome in its slot; the
    /// writers are woken once the leader lock is let go ([`Led::wake`]).
    fn lead<E: CommitEnv>(&self, env: &E, leader: &mut Leader) -> Led {
        let mut group = Vec::new();
        while let Some(r) = self.queue.pop() {
            group.push(r);
        }
        if group.is_empty() {
            return Led { group, own_error: None };
        }
        let me = std::thread::current().id();
        let mut own_error = None;
        let outcomes: Vec<std::result::Result<(), Failed>> = match self.commit_group(env, leader, &group) {
            Ok(lost) => lost.into_iter().map(|l| l.map_or(Ok(()), |l| Err(Failed::Lost(l)))).collect(),
            Err(e) => {
                let msg = e.to_string();
                if group.iter().any(|r| r.writer.id() == me) {
                    own_error = Some(e);
                }
                group.iter().map(|_| Err(Failed::Group(msg.clone()))).collect()
            }
        };
        for (r, outcome) in group.iter().zip(outcomes) {
            let _ = r.outcome.set(outcome);
        }
        Led { group, own_error }
    }

    /// After letting the leader lock go: a writer that queued while it was held found it taken
    /// and sleeps, so while requests are queued one of their writers is woken to lead (it
    /// takes the lock and commits them, or finds it taken again by a leader that does the same
    /// when it lets go). Handing over, rather than leading again, keeps a writer from leading
    /// group after group under a steady load while its own write is long done.
    fn lead_leftovers(&self) {
        if let Some(r) = self.queue.pop() {
            let writer = r.writer.clone();
            self.queue.push(r);
            crate::sync::shared_write();
            writer.unpark();
        }
    }

    /// Commits the requests of `group` that pass their checks; returns, per request, why it
    /// lost (`None`: committed).
    fn commit_group<E: CommitEnv>(&self, env: &E, leader: &mut Leader, group: &[Request]) -> Result<Vec<Option<Lost>>> {
        env.check_writable()?;
        if env.make_room()? {
            self.rotate(env, leader)?;
        }
        let lost = self.validate(group);
        let won = || group.iter().zip(&lost).filter(|(_, l)| l.is_none()).map(|(r, _)| r);
        // Only the leader assigns sequence numbers, and it publishes each group before the
        // next leader runs: the visible sequence is the last one handed out.
        let mut seq = env.visible();
        let first = seq + 1;
        let bytes: usize = won().map(|r| r.batch.bytes + 32).sum();
        let mut buf = Vec::with_capacity(bytes + 16 * group.len());
        let mut payload = Vec::with_capacity(won().map(|r| r.batch.bytes + 32).max().unwrap_or(0));
        let mut sync = false;
        // A replicated write keeps the time its Raft entry carries, held to the newest time
        // already committed so commit times never go back (on every replica alike: they apply
        // the same entries in the same order).
        let now = match group.iter().filter_map(|r| r.at_ms).max() {
            Some(at) => at.max(leader.clock.0),
            None => unix_ms(SystemTime::now()),
        };
        for r in won() {
            payload.clear();
            r.batch.encode(seq + 1, now, &mut payload);
            frame(&payload, &mut buf);
            seq += r.batch.len() as u64;
            sync |= r.sync;
        }
        {
            let wal = &mut leader.wal;
            let res = wal.append(&buf).and_then(|()| if sync { wal.sync() } else { Ok(()) });
            if let Err(e) = res {
                // The log may now hold part of this group: nothing more can be appended safely.
                env.poison(&e);
                return Err(e);
            }
        }
        let res = if self.parallel_insert(env, won()) {
            self.insert_in_parallel(env, won(), first)
        } else {
            let mut s = first;
            won().try_for_each(|r| {
                let res = env.apply(&r.batch, s);
                s += r.batch.len() as u64;
                res
            })
        };
        if let Err(e) = res {
            // The WAL holds the group but the memtable cannot: stop taking writes.
            env.poison(&e);
            return Err(e);
        }
        env.applied(&mut won().map(|r| &r.batch));
        if won().any(|r| r.batch.len() > 1) {
            // Where each batch of several operations begins and ends, before it is published,
            // so a read as of a sequence number inside one can be moved to just before it.
            let mut batches = self.batches.lock();
            let mut s = first;
            for r in won() {
                let n = r.batch.len() as u64;
                batches.record(s, s + n - 1);
                s += n;
            }
        }
        self.publish_noting_conflicts(env, seq, || self.record_conflicts(group, &lost, first));
        self.clock.note(&mut leader.clock, now, seq);
        Ok(lost)
    }

    /// Publishes `seq` (as commit leader), calling `note` to tell the conflict window what it
    /// makes visible while write transactions are open. `note` runs before publishing when the
    /// flag is set then. A transaction opening meanwhile sets the flag, then takes its
    /// snapshot: either that snapshot holds what `seq` publishes, or the look at the flag after
    /// publishing sees it set and `note` runs then (still by this leader, so before any commit
    /// checks the window).
    pub(crate) fn publish_noting_conflicts<E: CommitEnv>(&self, env: &E, seq: u64, note: impl FnOnce()) {
        // `note` runs now, or is kept for the look after publishing.
        let later = if self.conflicts_open.load(Ordering::SeqCst) {
            note();
            None
        } else {
            Some(note)
        };
        crate::sync::shared_write();
        env.publish(seq);
        // Paired with the fence in `Db::begin` between setting the flag and reading the visible
        // sequence number: of the two threads, at least one sees the other's store.
        std::sync::atomic::fence(Ordering::SeqCst);
        if let Some(note) = later.filter(|_| self.conflicts_open.load(Ordering::SeqCst)) {
            note();
        }
    }

    /// Records the rows of the requests of `group` that won, from sequence number `first` on,
    /// in the conflict window (if it is recording).
    fn record_conflicts(&self, group: &[Request], lost: &[Option<Lost>], first: u64) {
        let mut window = self.conflicts.lock();
        if !window.is_recording() {
            return;
        }
        let mut s = first;
        for (r, _) in group.iter().zip(lost).filter(|(_, l)| l.is_none()) {
            for op in &r.batch.ops {
                window.record(s, op.table_id, &op.key);
                s += 1;
            }
        }
        window.trim();
    }

    /// Whether the writers of the requests `won` insert their own batches at once: enough of
    /// them and cores to run them, no store written that applies in order, and no key written
    /// by two requests (a partial row folds over the version before it, which must be there
    /// first).
    fn parallel_insert<'a, E: CommitEnv>(&self, env: &E, won: impl Iterator<Item = &'a Request> + Clone) -> bool {
        if !self.opts.parallel_inserts || won.clone().count() < PARALLEL_INSERT_GROUP {
            return false;
        }
        let mut keys: HashMap<(u32, &[u8]), usize> = HashMap::new();
        for (i, r) in won.enumerate() {
            if env.in_order(&r.batch) {
                return false;
            }
            for op in &r.batch.ops {
                if *keys.entry((op.table_id, &op.key[..])).or_insert(i) != i {
                    return false;
                }
            }
        }
        true
    }

    /// Has each writer of `won` (the leader too, when its own request is among them) insert its
    /// batch, from its first sequence number on (the group's starts at `first`), and waits
    /// until all are in.
    fn insert_in_parallel<'a, E: CommitEnv>(
        &self,
        env: &E,
        won: impl Iterator<Item = &'a Request>,
        first: u64,
    ) -> Result<()> {
        let me = std::thread::current();
        let won: Vec<&Request> = won.collect();
        let job =
            Arc::new(Inserting { left: AtomicUsize::new(won.len()), leader: me.clone(), failed: OnceLock::new() });
        let (mut s, mut mine) = (first, None);
        for r in &won {
            if r.writer.id() == me.id() {
                mine = Some((*r, s));
            } else {
                let _ = r.job.set((s, job.clone()));
                r.writer.unpark();
            }
            s += r.batch.len() as u64;
        }
        if let Some((r, s)) = mine {
            job.done(env.insert(&r.batch, s));
        }
        let all_in = || job.left.load(Ordering::Acquire) == 0;
        while !all_in() {
            if !self.spin_until(all_in) {
                std::thread::park_timeout(Duration::from_micros(200));
            }
        }
        match job.failed.get() {
            Some(msg) => Err(Error::corruption("<memtable>", 0, msg.clone())),
            None => Ok(()),
        }
    }

    /// Where cores are plenty (see [`CommitOptions::spin`]), waits for `ready` a little while
    /// awake before a writer parks: first with spin hints, then yielding. A group commit's
    /// hand-offs (to the next leader, to the followers inserting in parallel, back to the
    /// leader) then cost a look at memory instead of a sleep and a wake-up each, which on many
    /// cores is what bounds how many groups commit per second. True when `ready` held.
    fn spin_until(&self, ready: impl Fn() -> bool) -> bool {
        if !self.opts.spin {
            return false;
        }
        for i in 0..SPINS + YIELDS {
            if ready() {
                return true;
            }
            if i < SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        ready()
    }

    /// Checks the transactions of `group` in order: each against the commits recorded after its
    /// snapshot and the rows the requests ahead of it in the group write.
    fn validate(&self, group: &[Request]) -> Vec<Option<Lost>> {
        if group.iter().all(|r| r.validate.is_none()) {
            return vec![None; group.len()];
        }
        let window = self.conflicts.lock();
        let mut ahead: HashSet<RowId> = HashSet::new();
        let mut out = Vec::with_capacity(group.len());
        for r in group {
            let lost = r
                .validate
                .as_ref()
                .and_then(|v| window.check_each(v.rows.iter().map(|(r, base)| (r, *base)), &ahead).err());
            if lost.is_none() {
                ahead.extend(r.batch.ops.iter().map(|op| (op.table_id, op.key.clone())));
            }
            out.push(lost);
        }
        out
    }

    /// Starts a new WAL file, returning its number. Alone (not from [`Self::rotate`]) it leaves
    /// the memtable as it is, whose data then spans both logs while its log number stays the
    /// older one. Leader only.
    pub(crate) fn rotate_wal<E: CommitEnv>(&self, env: &E, leader: &mut Leader) -> Result<u64> {
        let res = (|| {
            let (number, new_wal) = env.new_wal()?;
            // Sync the old log first so a crash can never keep a later log but lose an earlier one.
            leader.wal.sync()?;
            leader.wal = new_wal;
            self.wal_number.store(number, Ordering::SeqCst);
            Ok(number)
        })();
        if let Err(e) = &res {
            env.poison(e);
        }
        res
    }

    /// Freezes the memtable and starts a new one with a new WAL. Leader only.
    pub(crate) fn rotate<E: CommitEnv>(&self, env: &E, leader: &mut Leader) -> Result<()> {
        let number = self.rotate_wal(env, leader)?;
        env.freeze(number);
        Ok(())
    }

    /// Runs `f` as the commit leader (no write group in flight meanwhile), then has what
    /// writers queued meanwhile committed.
    pub(crate) fn as_leader<T>(&self, f: impl FnOnce(&mut Leader) -> T) -> T {
        let mut leader = self.leader.lock();
        let out = f(&mut leader);
        drop(leader);
        self.lead_leftovers();
        out
    }

    /// Notes, as leader, that `seq` was published at `ms` (see [`SharedClock::note`]).
    pub(crate) fn note_clock(&self, leader: &mut Leader, ms: u64, seq: u64) {
        self.clock.note(&mut leader.clock, ms, seq);
    }
}
