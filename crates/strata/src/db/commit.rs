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

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::workload::{At, Op};
use super::{DbInner, ReadView};
use crate::error::{Error, Result};
use crate::memtable::{Before, Fold, Memtable};
use crate::mvcc::clock::unix_ms;
use crate::mvcc::conflict::{Lost, RowId};
use crate::mvcc::Kind;
use crate::read::ReadPoint;
use crate::types::row::{carried, encode_row};
use crate::version::TableVersion;
use crate::write::batch::WriteBatch;
use crate::write::wal::{frame, WalWriter};

pub(crate) struct Request {
    ticket: u64,
    batch: WriteBatch,
    sync: bool,
    validate: Option<Validate>,
}

/// What a transaction's commit is checked by: it read at `snapshot` and wrote `rows`.
pub(crate) struct Validate {
    pub snapshot: u64,
    pub rows: Vec<RowId>,
}

/// How a request in a commit group ended, when not with success.
#[derive(Debug, Clone)]
pub(crate) enum Failed {
    /// The whole group failed (the database is poisoned or read-only): the message.
    Group(String),
    /// The transaction lost first-committer-wins; nothing of it was written.
    Lost(Lost),
}

impl DbInner {
    pub(crate) fn write(&self, batch: WriteBatch, opts: &super::WriteOptions) -> Result<()> {
        match self.commit_request(batch, opts, None)? {
            Ok(()) => Ok(()),
            // Only a request with rows to check can lose.
            Err(lost) => Err(Error::InvalidArgument(format!("a plain write was refused as a transaction: {lost:?}"))),
        }
    }

    /// Commits `batch` through the group commit, checked by `validate` when given: the outer
    /// error is a failure of the write itself, the inner one a lost check (nothing written).
    pub(crate) fn commit_request(
        &self,
        batch: WriteBatch,
        opts: &super::WriteOptions,
        validate: Option<Validate>,
    ) -> Result<std::result::Result<(), Lost>> {
        self.check_writable()?;
        if batch.is_empty() {
            return Ok(Ok(()));
        }
        {
            let view = self.view.read().clone();
            if let Some(op) = batch.ops.iter().find(|op| !view.version.tables.contains_key(&op.table_id)) {
                return Err(Error::UnknownTable(format!("(dropped table id {})", op.table_id)));
            }
        }
        self.check_lineage_budget(&batch)?;
        let mut st = self.commit.lock();
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.queue.push(Request { ticket, batch, sync: opts.sync, validate });
        let finish = |r: std::result::Result<(), Failed>| match r {
            Ok(()) => Ok(Ok(())),
            Err(Failed::Lost(lost)) => Ok(Err(lost)),
            Err(Failed::Group(msg)) => Err(Error::Poisoned(msg)),
        };
        loop {
            if let Some(r) = st.results.remove(&ticket) {
                return finish(r);
            }
            if !st.leader_active {
                // Our request is still queued: a leader that took it would have left a result.
                st.leader_active = true;
                let group = std::mem::take(&mut st.queue);
                drop(st);
                let outcome = self.commit_group(&group);
                let mut st = self.commit.lock();
                st.leader_active = false;
                let mut mine = Ok(Ok(()));
                match outcome {
                    Ok(lost) => {
                        for (r, lost) in group.iter().zip(lost) {
                            let res = lost.map_or(Ok(()), |l| Err(Failed::Lost(l)));
                            if r.ticket == ticket {
                                mine = finish(res);
                            } else {
                                st.results.insert(r.ticket, res);
                            }
                        }
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        for r in group.iter().filter(|r| r.ticket != ticket) {
                            st.results.insert(r.ticket, Err(Failed::Group(msg.clone())));
                        }
                        mine = Err(e);
                    }
                }
                drop(st);
                self.commit_cv.notify_all();
                return mine;
            }
            self.commit_cv.wait(&mut st);
        }
    }

    /// Refuses a batch that would take the lineage tables past their memory budget.
    fn check_lineage_budget(&self, batch: &WriteBatch) -> Result<()> {
        let lineage = self.lineage.read();
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
    fn commit_group(&self, group: &[Request]) -> Result<Vec<Option<Lost>>> {
        self.check_writable()?;
        self.make_room()?;
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
        let now = unix_ms(SystemTime::now());
        for r in won() {
            payload.clear();
            r.batch.encode(seq + 1, now, &mut payload);
            frame(&payload, &mut buf);
            seq += r.batch.len() as u64;
            sync |= r.sync;
        }
        {
            let mut wal = self.wal.lock();
            let res = wal.append(&buf).and_then(|()| if sync { wal.sync() } else { Ok(()) });
            if let Err(e) = res {
                // The log may now hold part of this group: nothing more can be appended safely.
                self.poison(&e);
                return Err(e);
            }
        }
        let view = self.view.read().clone();
        let lineage = self.lineage.read();
        let mut lineage_bytes = 0u64;
        let mut lineage_mem = 0u64;
        let mut s = first;
        // Bytes ingested per table, summed here so the counters are locked once per group.
        let mut ingested: Vec<(u32, u64)> = Vec::new();
        for r in won() {
            for op in &r.batch.ops {
                if let Some(t) = lineage.get(&op.table_id) {
                    if let Err(e) = t.apply(op.kind, &op.key, &op.row, s) {
                        let e = Error::corruption("<lineage>", 0, e.0);
                        self.poison(&e);
                        return Err(e);
                    }
                    lineage_bytes += (op.key.len() + op.row.len() + 8) as u64;
                    lineage_mem += lineage_mem_estimate(op);
                    s += 1;
                    continue;
                }
                let t = view.version.tables.get(&op.table_id);
                let info = t.map(|t| &t.info);
                // The whole row just before this write, for folding a hot key's updates into it.
                let before = || match t {
                    Some(t) => self.row_before(&view, t, &op.key, s - 1),
                    None => Before::Unknown,
                };
                let fold = info.map(|info| Fold { types: &info.value_types, before: &before });
                if let Err(e) = view.mem.insert(op.table_id, &op.key, s, op.kind, &op.row, fold) {
                    // The WAL holds the group but the memtable cannot: stop taking writes.
                    let e = Error::corruption("<memtable>", 0, e.0);
                    self.poison(&e);
                    return Err(e);
                }
                if let (Kind::Update, Some(info)) = (op.kind, info) {
                    let cols = carried(&op.row, info.value_types.len());
                    info.workload.record(At::Memtable, Op::Update, cols);
                }
                let n = (op.key.len() + op.row.len()) as u64;
                match ingested.iter_mut().find(|(t, _)| *t == op.table_id) {
                    Some((_, b)) => *b += n,
                    None => ingested.push((op.table_id, n)),
                }
                s += 1;
            }
        }
        drop(lineage);
        if lineage_bytes > 0 {
            self.lineage_wal_bytes.fetch_add(lineage_bytes, Ordering::Relaxed);
            self.lineage_mem.fetch_add(lineage_mem, Ordering::Relaxed);
        }
        let mut io = self.io.lock();
        for (t, n) in ingested {
            *io.ingested.entry(t).or_default() += n;
        }
        drop(io);
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
        {
            // Recorded and published under the window's lock, so a transaction opening now
            // either reads at a snapshot that holds this group or finds it recorded.
            let mut window = self.conflicts.lock();
            if window.is_recording() {
                let mut s = first;
                for r in won() {
                    for op in &r.batch.ops {
                        window.record(s, op.table_id, &op.key);
                        s += 1;
                    }
                }
                window.trim();
            }
            self.snapshots.publish(seq);
        }
        self.clock.lock().record(now, seq);
        Ok(lost)
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
            let lost = r.validate.as_ref().and_then(|v| window.check(v.snapshot, &v.rows, &ahead).err());
            if lost.is_none() {
                ahead.extend(r.batch.ops.iter().map(|op| (op.table_id, op.key.clone())));
            }
            out.push(lost);
        }
        out
    }

    /// Table `t`'s row `key` at `seq` (read through `view`), for [`Fold::before`]. Leader only:
    /// the memtable holds every write up to `seq`.
    fn row_before(&self, view: &Arc<ReadView>, t: &Arc<TableVersion>, key: &[u8], seq: u64) -> Before {
        let point = ReadPoint {
            tables: self.tables.clone(),
            snapshot_filter: self.opts.snapshot_filter,
            view: view.clone(),
            t: t.clone(),
            seq,
        };
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
    fn make_room(&self) -> Result<()> {
        let mut slowed = false;
        loop {
            self.check_writable()?;
            // Checked under the background lock: a background job takes that lock after
            // installing its result and before notifying, so a wake-up cannot slip in between
            // the check and the wait.
            let mut bg = self.bg.lock();
            if bg.shutting_down {
                return Err(Error::Closed);
            }
            let view = self.view.read().clone();
            let l0 = view.version.tables.values().map(|t| t.levels[0].runs.len()).max().unwrap_or(0);
            let full = view.mem.approximate_bytes() >= self.opts.memtable_size;
            if l0 >= self.opts.l0_stop_trigger || (full && view.imm.len() >= self.opts.max_immutable_memtables) {
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
                self.rotate()?;
            }
            return Ok(());
        }
    }

    /// Freezes the memtable and starts a new one with a new WAL. Leader only.
    fn rotate(&self) -> Result<()> {
        let number = self.rotate_wal()?;
        let mut v = self.view.write();
        let mut imm = vec![v.mem.clone()];
        imm.extend(v.imm.iter().cloned());
        *v = Arc::new(ReadView { mem: Arc::new(Memtable::new(number)), imm, version: v.version.clone() });
        drop(v);
        // Pass through the background lock so the flusher is either waiting (and gets the
        // notification) or has not yet looked at the frozen memtables.
        drop(self.bg.lock());
        self.bg_cv.notify_all();
        Ok(())
    }

    /// Starts a new WAL file, returning its number. Alone (not from [`Self::rotate`]) it leaves
    /// the memtable as it is, whose data then spans both logs while its log number stays the
    /// older one. Leader only.
    pub(super) fn rotate_wal(&self) -> Result<u64> {
        let number = self.next_file.fetch_add(1, Ordering::SeqCst);
        let res = (|| {
            let new_wal = WalWriter::create(self.fs.as_ref(), &self.dir.join(super::wal_name(number)), number)?;
            self.fs.sync_dir(&self.dir)?;
            let mut wal = self.wal.lock();
            // Sync the old log first so a crash can never keep a later log but lose an earlier one.
            wal.sync()?;
            *wal = new_wal;
            Ok(number)
        })();
        if let Err(e) = &res {
            self.poison(e);
        }
        res
    }

    /// Runs `f` as the commit leader (no write group in flight meanwhile).
    pub(super) fn as_leader<T>(&self, f: impl FnOnce() -> T) -> T {
        let mut st = self.commit.lock();
        while st.leader_active {
            self.commit_cv.wait(&mut st);
        }
        st.leader_active = true;
        drop(st);
        let out = f();
        self.commit.lock().leader_active = false;
        self.commit_cv.notify_all();
        out
    }

    pub(crate) fn flush(&self) -> Result<()> {
        self.check_writable()?;
        self.as_leader(|| {
            let view = self.view.read().clone();
            if view.mem.is_empty() {
                Ok(())
            } else {
                self.rotate()
            }
        })?;
        self.wait_background(|_, view| view.imm.is_empty())
    }
}

/// About how many bytes a lineage write adds in memory: its values in a tail record or base
/// record (and, for a first update, a snapshot record of as much), plus per-record fields,
/// index entries and key copies.
fn lineage_mem_estimate(op: &crate::write::batch::BatchOp) -> u64 {
    (2 * (op.key.len() + op.row.len()) + 128) as u64
}
