//! The lineage engine's place in the database: the merge thread and the sequence number a
//! lineage read reads at. Writes reach lineage tables through group commit (`commit.rs`), and
//! recovery replays them from the WAL (`Db::open`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::{checkpoint_name, DbInner, ReadOptions};
use crate::error::Result;
use crate::lineage::{LineageTable, View};
use crate::mvcc::snapshot::Snapshot;
use crate::version::edit::{EditRecord, VersionEdit};

/// Adds the time since its start to a counter when dropped.
struct CountMicros<'a>(&'a std::sync::atomic::AtomicU64, std::time::Instant);

impl Drop for CountMicros<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(self.1.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
}

/// How often the merge thread measures the lineage tables' memory (see
/// [`super::Options::lineage_memory_budget`]).
const MEASURE_EVERY: Duration = Duration::from_millis(50);

/// How long an idle merge thread sleeps between looks.
const MERGE_IDLE: Duration = Duration::from_millis(20);

impl DbInner {
    /// The lineage table with id `id`, if it is one.
    pub(crate) fn lineage_table(&self, id: u32) -> Option<Arc<LineageTable>> {
        self.lineage.pin().get(&id).cloned()
    }

    /// The sequence number a read of lineage table `t` with `ropts` reads at, and the table's
    /// ranges it reads, which all answer at that sequence number: a snapshot's registration
    /// keeps its ranges from being rebased past it ([`DbInner::reclaim_history`]); without one,
    /// a list holding a range rebased past the visible sequence number read first is taken
    /// again with a newer one (a rebase's cut is never above the visible sequence number, so
    /// the second try holds).
    pub(crate) fn lineage_read_point(&self, t: &LineageTable, ropts: &ReadOptions<'_>) -> Result<(u64, Arc<View>)> {
        self.check_open()?;
        if let Some(seq) = self.snapshot_seq(ropts)? {
            return Ok((seq, t.view()));
        }
        loop {
            let seq = self.snapshots.visible();
            let view = t.view();
            if view.floor() <= seq {
                return Ok((seq, view));
            }
        }
    }

    /// The merge thread: folds committed tail records into new base pages, range by range,
    /// while readers and writers go on (they take no lock the merge holds).
    pub(crate) fn merge_loop(&self) {
        let mut idle = false;
        let mut measured = std::time::Instant::now();
        loop {
            {
                let mut bg = self.bg.lock();
                if bg.shutting_down {
                    return;
                }
                if idle {
                    self.bg_cv.wait_for(&mut bg, MERGE_IDLE);
                    if bg.shutting_down {
                        return;
                    }
                }
            }
            let tables: Vec<Arc<LineageTable>> = self.lineage.pin().values().cloned().collect();
            let visible = self.snapshots.visible();
            let threshold = self.opts.lineage_merge_threshold;
            let hold = || self.merge_hold_point();
            let merged: usize = tables.iter().map(|t| t.merge(visible, threshold, idle, &hold)).sum();
            idle = merged == 0;
            for t in &tables {
                self.reclaim_history(t);
            }
            // Measure what the tables hold now and then (writes in between are estimated).
            if measured.elapsed() >= MEASURE_EVERY {
                let held = tables.iter().map(|t| t.sizes().bytes()).sum();
                self.lineage_mem.store(held, Ordering::Relaxed);
                measured = std::time::Instant::now();
            }
            if self.lineage_wal_bytes.load(Ordering::Relaxed) >= self.opts.lineage_checkpoint_bytes
                && self.check_writable().is_ok()
            {
                // A checkpoint that fails leaves the WAL as it was: nothing is lost, and the
                // next pass tries again (a failed manifest write poisons the database).
                let _ = self.checkpoint_lineage();
            }
        }
    }

    /// Rebases the full ranges of `t` that gathered at least a range's worth of tail records no
    /// read can reach any more (older than the history window's start and than every live
    /// snapshot), and at least as many as they keep: new base pages as of that point, tail
    /// records only for the changes after it. The memory of updates nothing can read goes (the
    /// paper moves such history to colder storage; strata has no use for it). Each rebase takes
    /// the commit leader's turn (writers wait for one range's copy; readers never wait) and
    /// raises the snapshot floor to the point.
    fn reclaim_history(&self, t: &LineageTable) {
        let horizon = self.history_horizon();
        let types = &t.info.value_types;
        let cut_now =
            || self.snapshots.with_oldest(|visible, oldest| horizon.min(oldest.unwrap_or(visible)).min(visible));
        // A first look with one cut for the whole pass (cuts only grow); each rebase takes its own.
        let cut = cut_now();
        let view = t.view();
        for (i, r) in view.0.iter().enumerate() {
            let records = r.tail.len.load(Ordering::Acquire) as usize;
            let old = r.records_by(cut);
            let full = r.len.load(Ordering::Acquire) as usize == r.cap;
            if !full || old < r.cap || old < records - old {
                continue;
            }
            let reclaimed = self.as_leader(|_| {
                let _waited = CountMicros(&t.counters.reclaim_micros, std::time::Instant::now());
                let Some(r) = t.view().0.get(i).cloned() else { return false };
                let cut = cut_now();
                let Some(fresh) = r.rebased(types, cut) else { return false };
                self.snapshots.with_oldest(|_, oldest| {
                    let allowed = oldest.is_none_or(|o| o >= cut);
                    if allowed {
                        // No snapshot older than the new range can be taken from now on, and
                        // a read without one checks the list's floor against its sequence
                        // number: it reads at `cut` or later, or the old range.
                        self.snapshots.raise_floor(cut);
                        t.replace(i, fresh, cut);
                    }
                    allowed
                })
            });
            if reclaimed {
                t.counters.reclaims.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Where a merge waits while a test holds merges ([`super::Db::hold_lineage_merges`]).
    fn merge_hold_point(&self) {
        let mut held = self.merge_hold.lock();
        if *held {
            self.merge_holds.fetch_add(1, Ordering::SeqCst);
            while *held && !self.closed.load(Ordering::SeqCst) {
                self.merge_hold_cv.wait_for(&mut held, Duration::from_millis(10));
            }
        }
    }

    /// Writes a lineage checkpoint: every lineage table's rows as of one sequence number, then
    /// the manifest edit naming it and the WAL from which recovery must replay them.
    pub(crate) fn checkpoint_lineage(&self) -> Result<()> {
        // Fix the point with no write group in flight, and start a new WAL there: every write
        // after the point is in that WAL or a later one.
        let (seq, from, pin, wal, lsm_idle) = self.as_leader(|leader| -> Result<(u64, u64, Snapshot, u64, bool)> {
            let wal = self.rotate_wal(leader)?;
            // With no LSM write in any memtable, the LSM tables need no log before the new one.
            let view = self.view.load();
            let lsm_idle = view.mem.is_empty() && view.imm.is_empty();
            let seq = self.snapshots.visible();
            // Within a history window, the changes it covers go along (from no earlier than
            // what reads may still ask for). Pinned there, so no range loses history the
            // checkpoint reads.
            let from = match self.retention_ms {
                0 => seq,
                _ => self.history_horizon().max(self.snapshots.floor()).min(seq),
            };
            let (from, pin) = match Snapshot::at(self.snapshots.clone(), from) {
                Some(pin) => (from, pin),
                // Cannot happen (the floor never passes the visible sequence number); without
                // the pin the checkpoint goes without history.
                None => (seq, Snapshot::new(self.snapshots.clone())),
            };
            Ok((seq, from, pin, wal, lsm_idle))
        })?;
        let bytes_before = self.lineage_wal_bytes.swap(0, Ordering::Relaxed);
        let res = (|| {
            let mut tables: Vec<Arc<LineageTable>> = self.lineage.pin().values().cloned().collect();
            tables.sort_by_key(|t| t.info.id);
            let number = self.alloc_output();
            let path = self.dir.join(checkpoint_name(number));
            let mut file = self.fs.create(&path)?;
            crate::lineage::checkpoint::write(file.as_mut(), &tables, from, seq)?;
            drop(file);
            self.fs.sync_dir(&self.dir)?;
            let mut edit = VersionEdit::default();
            edit.push(EditRecord::LineageCheckpoint { number, seq });
            edit.push(EditRecord::LineageLogNumber(wal));
            if lsm_idle {
                edit.push(EditRecord::LogNumber(wal));
            }
            edit.push(EditRecord::LastSequence(seq));
            let installed = self.install(edit, None);
            self.pending_outputs.lock().remove(&number);
            installed
        })();
        drop(pin);
        match res {
            Ok(()) => self.delete_obsolete_files(),
            Err(_) => {
                self.lineage_wal_bytes.fetch_add(bytes_before, Ordering::Relaxed);
            }
        }
        res
    }
}
