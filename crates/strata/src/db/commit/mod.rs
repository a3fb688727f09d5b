//! Group commit. Writers queue their batches; whichever writer finds no leader active becomes
//! the leader, takes the whole queue, makes room in the memtable (stalling or rotating), assigns
//! sequence numbers, appends one buffer of WAL records, syncs once if any writer asked for it,
//! inserts into the memtable and publishes the new visible sequence. Followers sleep until their
//! result arrives.
//!
//! Only the leader touches the WAL writer, assigns sequence numbers and rotates memtables, so
//! those need no further coordination.
//!
//! A transaction's batch comes with the rows it wrote and its snapshot: the leader checks them
//! against the conflict window ([`crate::mvcc::conflict`]) before it gives out sequence numbers,
//! so a loser is left out of the group (nothing of it is logged or applied) and the others go on;
//! while a write transaction is open, the leader records every committed row there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::{Duration, Instant, SystemTime};

use super::workload::{At, Op};
use super::{DbInner, ReadView};
use crate::error::{Error, Result};
use crate::memtable::{Before, Fold, Memtable};
use crate::mvcc::clock::unix_ms;
use crate::mvcc::conflict::{Lost, RowId};
use crate::mvcc::Kind;
use crate::read::PointAt;
use crate::types::row::{carried, encode_row};
use crate::version::TableVersion;
use crate::write::batch::WriteBatch;
use crate::write::wal::{frame, WalWriter};

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
    pub wal: WalWriter,
    /// The millisecond of the last clock sample the leader pushed and the last sequence number
    /// it noted ([`SharedClock::note`](crate::mvcc::clock::SharedClock::note)).
    pub(super) clock: (u64, u64),
}

impl Leader {
    pub(crate) fn new(wal: WalWriter, clock: (u64, u64)) -> Self {
        Leader { wal, clock }
    }
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

/// Spin hints, then yields, a waiting writer tries before it parks (see `DbInner::spin_until`):
/// a few microseconds of spinning and up to some tens of microseconds of yields, about the time
/// a group takes to commit.
const SPINS: usize = 256;
const YIELDS: usize = 32;

impl DbInner {
    pub(crate) fn write(&self, batch: WriteBatch, opts: &super::WriteOptions) -> Result<()> {
        match self.commit_request(batch, opts, None, None)? {
            Ok(()) => Ok(()),
            // Only a request with rows to check can lose.
            Err(lost) => Err(Error::InvalidArgument(format!("a plain write was refused as a transaction: {lost:?}"))),
        }
    }

    /// Commits `batch` through the group commit, checked by `validate` when given, at the
    /// commit time `at_ms` when given (a replicated write): the outer error is a failure of the
    /// write itself, the inner one a lost check (nothing written).
    ///
    /// The writer queues its request on a lock-free queue and tries the leader lock: the one
    /// that gets it leads, taking every queued request as one group; the others sleep until a
    /// leader has left their outcome. A leader looks at the queue again after it lets the lock
    /// go and wakes a queued writer to lead the rest, so a request queued while the lock was
    /// held is never left waiting (a writer also looks again on its own after [`WRITER_NAP`]).
    /// A write alone thus takes one lock, the leader's.
    pub(crate) fn commit_request(
        &self,
        batch: WriteBatch,
        opts: &super::WriteOptions,
        validate: Option<Validate>,
        at_ms: Option<u64>,
    ) -> Result<std::result::Result<(), Lost>> {
        self.check_writable()?;
        if batch.is_empty() {
            return Ok(Ok(()));
        }
        {
            let view = self.view.pin();
            if let Some(op) = batch.ops.iter().find(|op| !view.version.tables.contains_key(&op.table_id)) {
                return Err(Error::UnknownTable(format!("(dropped table id {})", op.table_id)));
            }
        }
        self.check_lineage_budget(&batch)?;
        let slot = Arc::new(Slot {
            batch,
            sync: opts.sync,
            validate,
            at_ms,
            job: OnceLock::new(),
            outcome: OnceLock::new(),
            writer: std::thread::current(),
        });
        crate::sync::shared_write();
        self.commit_queue.push(slot.clone());
        let mut inserted = false;
        loop {
            if let (Some((first, group)), false) = (slot.job.get(), inserted) {
                inserted = true;
                group.done(self.insert_batch(&self.view.pin(), &slot.batch, *first));
            }
            if let Some(outcome) = slot.outcome.get() {
                return match outcome {
                    Ok(()) => Ok(Ok(())),
                    Err(Failed::Lost(lost)) => Ok(Err(lost.clone())),
                    Err(Failed::Group(msg)) => Err(Error::Poisoned(msg.clone())),
                };
            }
            if let Some(mut leader) = self.leader.try_lock() {
                let led = self.lead(&mut leader);
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
    fn lead(&self, leader: &mut Leader) -> Led {
        let mut group = Vec::new();
        while let Some(r) = self.commit_queue.pop() {
            group.push(r);
        }
        if group.is_empty() {
            return Led { group, own_error: None };
        }
        let me = std::thread::current().id();
        let mut own_error = None;
        let outcomes: Vec<std::result::Result<(), Failed>> = match self.commit_group(leader, &group) {
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
        if let Some(r) = self.commit_queue.pop() {
            let writer = r.writer.clone();
            self.commit_queue.push(r);
            crate::sync::shared_write();
            writer.unpark();
        }
    }

    /// Adds `n` bytes to what commits wrote into table `table`.
    pub(super) fn count_ingested(&self, table: u32, n: u64) {
        let pin = self.ingested.pin();
        crate::sync::shared_write();
        pin.get_or_insert_with(table, || AtomicU64::new(0)).fetch_add(n, Ordering::Relaxed);
    }

    /// Refuses a batch that would take the lineage tables past their memory budget.
    fn check_lineage_budget(&self, batch: &WriteBatch) -> Result<()> {
        let lineage = self.lineage.pin();
        if lineage.is_empty() {
            return Ok(());
        }
        let adds: u64 =
            batch.ops.iter().filter(|op| lineage.contains_key(&op.table_id)).map(lineage_mem_estimate).sum();
        let held = self.lineage_mem.load(Ordering::Relaxed);
        let budget = self.opts.lineage_memory_budget;
        if adds == 0 || held.saturating_add(adds) <= budget {
            return Ok(());
        }
        Err(Error::OutOfMemory(format!(
            "lineage tables hold {held} bytes of their {budget}-byte budget (Options::lineage_memory_budget), \
             too little for this write of about {adds} bytes: nothing of it was written. Raise the budget, \
             drop rows or tables, or shorten the history retention window and release old \
             snapshots (history no read can reach any more is reclaimed as the merge goes)"
        )))
    }

    /// Commits the requests of `group` that pass their checks; returns, per request, why it
    /// lost (`None`: committed).
    fn commit_group(&self, leader: &mut Leader, group: &[Request]) -> Result<Vec<Option<Lost>>> {
        self.check_writable()?;
        self.make_room(leader)?;
        let lost = self.validate(group);
        let won = || group.iter().zip(&lost).filter(|(_, l)| l.is_none()).map(|(r, _)| r);
        // Only the leader assigns sequence numbers, and it publishes each group before the
        // next leader runs: the visible sequence is the last one handed out.
        let mut seq = self.snapshots.visible();
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
                self.poison(&e);
                return Err(e);
            }
        }
        let view = self.view.pin();
        let lineage = self.lineage.pin();
        let mut lineage_bytes = 0u64;
        let mut lineage_mem = 0u64;
        // Bytes ingested per table, summed here so each table's counter is written once per group.
        let mut ingested: Vec<(u32, u64)> = Vec::new();
        for op in won().flat_map(|r| &r.batch.ops) {
            let n = (op.key.len() + op.row.len()) as u64;
            match ingested.iter_mut().find(|(t, _)| *t == op.table_id) {
                Some((_, b)) => *b += n,
                None => ingested.push((op.table_id, n)),
            }
        }
        let res = if self.parallel_insert(won(), &lineage) {
            self.insert_in_parallel(&view, won(), first)
        } else {
            let mut s = first;
            won().try_for_each(|r| {
                for (j, op) in r.batch.ops.iter().enumerate() {
                    let Some(t) = lineage.get(&op.table_id) else { continue };
                    t.apply(op.kind, &op.key, &op.row, s + j as u64)
                        .map_err(|e| Error::corruption("<lineage>", 0, e.0))?;
                    lineage_bytes += (op.key.len() + op.row.len() + 8) as u64;
                    lineage_mem += lineage_mem_estimate(op);
                }
                let res = self.insert_batch(&view, &r.batch, s);
                s += r.batch.len() as u64;
                res
            })
        };
        if let Err(e) = res {
            // The WAL holds the group but the memtable cannot: stop taking writes.
            self.poison(&e);
            return Err(e);
        }
        drop(lineage);
        if lineage_bytes > 0 {
            self.lineage_wal_bytes.fetch_add(lineage_bytes, Ordering::Relaxed);
            self.lineage_mem.fetch_add(lineage_mem, Ordering::Relaxed);
        }
        for (t, n) in ingested {
            self.count_ingested(t, n);
        }
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
        self.publish_noting_conflicts(seq, || self.record_conflicts(group, &lost, first));
        self.clock.note(&mut leader.clock, now, seq);
        Ok(lost)
    }

    /// Publishes `seq` (as commit leader), calling `note` to tell the conflict window what it
    /// makes visible while write transactions are open. `note` runs before publishing when the
    /// flag is set then. A transaction opening meanwhile sets the flag, then takes its
    /// snapshot: either that snapshot holds what `seq` publishes, or the look at the flag after
    /// publishing sees it set and `note` runs then (still by this leader, so before any commit
    /// checks the window).
    pub(super) fn publish_noting_conflicts(&self, seq: u64, note: impl FnOnce()) {
        // `note` runs now, or is kept for the look after publishing.
        let later = if self.conflicts_open.load(Ordering::SeqCst) {
            note();
            None
        } else {
            Some(note)
        };
        crate::sync::shared_write();
        self.snapshots.publish(seq);
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
    /// them and cores to run them, no lineage table written (its writes apply in order), and no
    /// key written by two requests (a partial row folds over the version before it, which
    /// must be there first).
    fn parallel_insert<'a>(
        &self,
        won: impl Iterator<Item = &'a Request> + Clone,
        lineage: &HashMap<u32, Arc<crate::lineage::LineageTable>>,
    ) -> bool {
        if !self.parallel_inserts || won.clone().count() < PARALLEL_INSERT_GROUP {
            return false;
        }
        let mut keys: HashMap<(u32, &[u8]), usize> = HashMap::new();
        for (i, r) in won.enumerate() {
            for op in &r.batch.ops {
                if lineage.contains_key(&op.table_id) || *keys.entry((op.table_id, &op.key[..])).or_insert(i) != i {
                    return false;
                }
            }
        }
        true
    }

    /// Has each writer of `won` (the leader too, when its own request is among them) insert its
    /// batch, from its first sequence number on (the group's starts at `first`), and waits
    /// until all are in.
    fn insert_in_parallel<'a>(
        &self,
        view: &ReadView,
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
            job.done(self.insert_batch(view, &r.batch, s));
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

    /// Where cores are plenty (see [`super::Options::spin_before_park`]), waits for `ready` a
    /// little while awake before a writer parks: first with spin hints, then yielding. A group
    /// commit's hand-offs (to the next leader, to the followers inserting in parallel, back to
    /// the leader) then cost a look at memory instead of a sleep and a wake-up each, which on
    /// many cores is what bounds how many groups commit per second. True when `ready` held.
    fn spin_until(&self, ready: impl Fn() -> bool) -> bool {
        if !self.spin {
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

    /// Inserts the LSM tables' writes of `batch` into the memtable, from sequence number
    /// `first` on (a lineage table's writes are applied by the leader).
    fn insert_batch(&self, view: &ReadView, batch: &WriteBatch, first: u64) -> Result<()> {
        // The memtable's bounds first: a reader that sees a version finds it inside them.
        let versions = batch.ops.iter().filter_map(|op| {
            let t = view.version.tables.get(&op.table_id)?;
            (t.info.options.engine != crate::Engine::Lineage).then_some((
                op.table_id,
                &t.info.value_types[..],
                op.kind,
                &op.row[..],
            ))
        });
        view.mem.widen_by(versions).map_err(|e| Error::corruption("<memtable>", 0, e.0))?;
        for (j, op) in batch.ops.iter().enumerate() {
            let s = first + j as u64;
            let Some(t) = view.version.tables.get(&op.table_id) else { continue };
            if t.info.options.engine == crate::Engine::Lineage {
                continue;
            }
            // The whole row just before this write, for folding a hot key's updates into it.
            let before = || self.row_before(view, t, &op.key, s - 1);
            let fold = Fold { types: &t.info.value_types, before: &before };
            view.mem
                .insert(op.table_id, &op.key, s, op.kind, &op.row, Some(fold))
                .map_err(|e| Error::corruption("<memtable>", 0, e.0))?;
            match op.kind {
                Kind::Update => {
                    let cols = carried(&op.row, t.info.value_types.len());
                    t.info.workload.record(At::Memtable, Op::Update, cols, 0);
                }
                Kind::Put => t.info.workload.record_inserts(1),
                _ => {}
            }
        }
        Ok(())
    }

    /// Checks the transactions of `group` in order: each against the commits recorded after its
    /// snapshot and the rows the requests ahead of it in the group write.
    fn validate(&self, group: &[Request]) -> Vec<Option<Lost>> {
        if group.iter().all(|r| r.validate.is_none()) {
            return vec![None; group.len()];
        }
        let window = self.conflicts.lock();
        let mut ahead: std::collections::HashSet<RowId> = std::collections::HashSet::new();
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

    /// Table `t`'s row `key` at `seq` (read through `view`), for [`Fold::before`]. Leader only:
    /// the memtable holds every write up to `seq`.
    fn row_before(&self, view: &ReadView, t: &TableVersion, key: &[u8], seq: u64) -> Before {
        let point = PointAt { tables: &self.tables, snapshot_filter: self.opts.snapshot_filter, view, t, seq };
        match point.get_cells(&t.info, key, None, false) {
            Ok(Some(cells)) => {
                let mut row = Vec::new();
                encode_row(&t.info.value_types, &cells, &mut row);
                Before::Row(row)
            }
            Ok(None) => Before::Missing,
            Err(_) => Before::Unknown,
        }
    }

    /// Waits while Level-0 is over its stop trigger or too many memtables wait for flush, and
    /// rotates the memtable when it is full. Leader only.
    fn make_room(&self, leader: &mut Leader) -> Result<()> {
        let mut slowed = false;
        loop {
            self.check_writable()?;
            let must_wait = |view: &ReadView| {
                let l0 = view.version.tables.values().map(|t| t.levels[0].runs.len()).max().unwrap_or(0);
                let full = view.mem.approximate_bytes() >= self.opts.memtable_size;
                let stop =
                    l0 >= self.opts.l0_stop_trigger || (full && view.imm.len() >= self.opts.max_immutable_memtables);
                (stop, l0, full)
            };
            // The common case, room in the memtable and Level-0 under its triggers, takes no lock.
            let (stop, l0, full) = must_wait(&self.view.pin());
            if !stop && !full && l0 < self.opts.l0_slowdown_trigger {
                return Ok(());
            }
            // Checked again under the background lock: a background job takes that lock after
            // installing its result and before notifying, so a wake-up cannot slip in between
            // the check and the wait.
            let mut bg = self.bg.lock();
            if bg.shutting_down {
                return Err(Error::Closed);
            }
            let (stop, l0, full) = must_wait(&self.view.pin());
            if stop {
                self.bg_cv.notify_all();
                let t = Instant::now();
                self.bg_cv.wait_for(&mut bg, Duration::from_millis(100));
                self.io.lock().stall_micros += t.elapsed().as_micros() as u64;
                continue;
            }
            drop(bg);
            if l0 >= self.opts.l0_slowdown_trigger && !slowed {
                slowed = true;
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                self.io.lock().stall_micros += t.elapsed().as_micros() as u64;
                continue;
            }
            if full {
                self.rotate(leader)?;
            }
            return Ok(());
        }
    }

    /// Freezes the memtable and starts a new one with a new WAL. Leader only.
    fn rotate(&self, leader: &mut Leader) -> Result<()> {
        let number = self.rotate_wal(leader)?;
        self.view.update(|v| {
            let mut imm = vec![v.mem.clone()];
            imm.extend(v.imm.iter().cloned());
            (ReadView { mem: Arc::new(Memtable::new(number)), imm, version: v.version.clone() }, ())
        });
        // Pass through the background lock so the flusher is either waiting (and gets the
        // notification) or has not yet looked at the frozen memtables.
        drop(self.bg.lock());
        self.bg_cv.notify_all();
        Ok(())
    }

    /// Starts a new WAL file, returning its number. Alone (not from [`Self::rotate`]) it leaves
    /// the memtable as it is, whose data then spans both logs while its log number stays the
    /// older one. Leader only.
    pub(super) fn rotate_wal(&self, leader: &mut Leader) -> Result<u64> {
        let number = self.next_file.fetch_add(1, Ordering::SeqCst);
        let res = (|| {
            let new_wal = WalWriter::create(self.fs.as_ref(), &self.dir.join(super::wal_name(number)))?;
            self.fs.sync_dir(&self.dir)?;
            // Sync the old log first so a crash can never keep a later log but lose an earlier one.
            leader.wal.sync()?;
            leader.wal = new_wal;
            self.wal_number.store(number, Ordering::SeqCst);
            Ok(number)
        })();
        if let Err(e) = &res {
            self.poison(e);
        }
        res
    }

    /// Runs `f` as the commit leader (no write group in flight meanwhile), then commits what
    /// writers queued meanwhile.
    pub(super) fn as_leader<T>(&self, f: impl FnOnce(&mut Leader) -> T) -> T {
        let mut leader = self.leader.lock();
        let out = f(&mut leader);
        drop(leader);
        self.lead_leftovers();
        out
    }

    pub(crate) fn flush(&self) -> Result<()> {
        self.check_writable()?;
        self.as_leader(|leader| if self.view.pin().mem.is_empty() { Ok(()) } else { self.rotate(leader) })?;
        self.wait_background(|_, view| view.imm.is_empty())
    }
}

/// About how many bytes a lineage write adds in memory: its values in a tail record or base
/// record (and, for a first update, a snapshot record of as much), plus per-record fields,
/// index entries and key copies.
fn lineage_mem_estimate(op: &crate::write::batch::BatchOp) -> u64 {
    (2 * (op.key.len() + op.row.len()) + 128) as u64
}
