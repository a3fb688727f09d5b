//! Background work as the scheduler runs it ([`Background`] for the database): flushing the
//! oldest frozen memtable to Level-0, choosing a compaction ([`pick`], from values computed
//! before the choice) and running it, and the manual compaction that runs the same code in the
//! caller's thread while background picking is paused.
//!
//! Files being compacted are marked busy in the scheduler's state so concurrent tasks never
//! share an input, and Level-0 never has two compactions at once (see the policy).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::scheduler::{Background, BgState, PickInputs, Scheduler};
use super::{DbInner, ReadView};
use crate::column_group::group_id;
use crate::compaction::exec::Keep;
use crate::compaction::job::{self, Placed};
use crate::compaction::pick::{self, PickEnv};
use crate::compaction::policy::{self, CompactionTask, PolicyOptions};
use crate::compaction::supersede::{self, Made, Marker};
use crate::compaction::tiering;
use crate::error::{Error, Result};
use crate::iter::merge::MemSource;
use crate::memtable::{MemCursor, Memtable};
use crate::mvcc::chain::Stripes;
use crate::sst::bloom::key_hash;
use crate::sst::builder::SstOptions;
use crate::sst::keyset::KeySet;
use crate::tier::TierPlacement;
use crate::version::edit::{EditRecord, VersionEdit};
use crate::version::{FileMeta, TableVersion, Version};
use crate::vfs::DeviceProfile;

/// While tiers are in play, the compaction lanes look again this often without an event: the
/// access histograms, which eviction, promotion and staging weigh, change with every read.
const HEAT_LOOK: Duration = Duration::from_millis(200);

/// What a flush wrote for one table: its Level-0 files and the marks it made.
pub(crate) struct Flushed {
    pub(super) table: u32,
    pub(super) files: Vec<u64>,
    pub(super) made: Made,
    /// The flushed keys that have versions in older files, ascending.
    pub(super) older: Vec<Vec<u8>>,
    /// The flush left the slow tier's files unmarked (deferred marking).
    pub(super) deferred: bool,
}

impl DbInner {
    pub(crate) fn policy_options(&self) -> PolicyOptions {
        PolicyOptions {
            l0_trigger: self.config.opts.l0_compaction_trigger,
            ratio: self.config.opts.level_size_ratio,
            l1_max_bytes: self.config.opts.l1_max_bytes,
            num_levels: self.config.opts.num_levels,
        }
    }

    fn sst_options(&self) -> SstOptions {
        SstOptions {
            block_size: self.config.opts.block_size,
            compression: self.config.opts.compression,
            bloom_bits_per_key: self.config.opts.bloom_bits_per_key,
        }
    }

    /// Writes one Level-0 file per table present in `mem` and returns the edit adding them, with
    /// the marks the flush made (see [`Self::install_flush`]).
    pub(crate) fn write_level0(&self, mem: &Arc<Memtable>, version: &Version) -> Result<(VersionEdit, Vec<Flushed>)> {
        // From here on versions up to the memtable's newest (or the history horizon, if older)
        // may be merged: raise the floor before capturing the snapshots, so no snapshot below it
        // can be registered in between.
        self.snapshots.raise_floor(mem.max_seq().min(self.history_horizon()));
        let snapshots = self.snapshots.capture();
        let stripes = Stripes { snapshots: &snapshots, history_from: self.snapshots.floor() };
        let mut edit = VersionEdit::default();
        let mut written = Vec::new();
        let mut flushed = Vec::new();
        for table_id in mem.tables() {
            let Some(t) = version.tables.get(&table_id) else {
                continue;
            };
            let info = &t.info;
            let src = MemSource { cursor: MemCursor::new(mem.clone(), table_id, &[], None) };
            let groups = info.runs.groups(0).iter().map(|g| (g.clone(), Vec::new())).collect();
            // Deferred marking: the slow tier's files are left to a staging compaction.
            let defer = self.defers_marking() && t.levels.iter().any(|l| l.files().any(|f| f.tier != 0));
            let mut marker = Marker::flush(&self.tables, t, mem.key_hashes(table_id), defer);
            let alloc = || self.alloc_output();
            let files = job::write_files(
                &self.job_context(&alloc),
                info,
                (0, 0),
                vec![Box::new(src)],
                groups,
                Keep { stripes, bottommost: false, folded: mem.folded() },
                &mut marker,
            )?;
            let numbers: Vec<u64> = files.iter().map(|f| f.number).collect();
            for f in files {
                written.push((table_id, f.size));
                edit.push(EditRecord::AddFile { table: table_id, level: 0, file: f });
            }
            if defer {
                for &number in &numbers {
                    edit.push(EditRecord::DeferredMarks { table: table_id, number });
                }
            }
            let older_hashes = marker.older_keys.iter().map(|k| key_hash(k)).collect();
            if let Some(o) = KeySet::new(older_hashes).map(Arc::new) {
                for &n in &numbers {
                    self.tables.set_older_keys(n, o.clone());
                }
            }
            flushed.push(Flushed {
                table: table_id,
                files: numbers,
                made: marker.made,
                older: marker.older_keys,
                deferred: defer,
            });
        }
        self.config.fs.sync_dir(self.tables.tier_dir(0))?;
        let mut io = self.io.lock();
        io.flushes += 1;
        io.written += written.iter().map(|(_, b)| b).sum::<u64>();
        drop(io);
        let stores = self.stores.pin();
        for (t, b) in written {
            if let Some(t) = stores.get(&t) {
                t.count_written(0, b);
            }
        }
        Ok((edit, flushed))
    }

    /// Installs a flush's edit made on top of `base`, with its marks: files that compactions
    /// installed since `base` are marked by the flushed versions too (see `supersede::catch_up_flush`).
    pub(crate) fn install_flush(
        &self,
        mut edit: VersionEdit,
        mut flushed: Vec<Flushed>,
        base: &Version,
        mem: Option<&Arc<Memtable>>,
    ) -> Result<()> {
        #[cfg(test)]
        self.fire_install_hook("flush");
        // Catch up outside the version lock first (installs of others go on meanwhile), then
        // under it with whatever appeared since.
        let mut seen: Vec<std::collections::HashSet<u64>> =
            flushed.iter().map(|f| supersede::file_numbers(base, f.table)).collect();
        let early = self.view.pin().version.clone();
        for (f, before) in flushed.iter_mut().zip(seen.iter_mut()) {
            let (files, older) = (&f.files, &f.older);
            supersede::catch_up_flush(&self.tables, &early, f.table, before, (files, older, f.deferred), &mut f.made)?;
            before.extend(supersede::file_numbers(&early, f.table));
        }
        let mut vs = self.files.versions.lock();
        let current = vs.current().clone();
        for (mut f, before) in flushed.into_iter().zip(seen) {
            let flushed = (&f.files[..], &f.older[..], f.deferred);
            let res = supersede::catch_up_flush(&self.tables, &current, f.table, &before, flushed, &mut f.made);
            if let Err(e) = res {
                self.poison(&e);
                return Err(e);
            }
            let now = supersede::file_numbers(&current, f.table);
            let live = |n: u64| now.contains(&n) || f.files.contains(&n);
            edit.records.extend(supersede::records(f.table, f.made, &live));
        }
        self.install_locked(&mut vs, edit, mem)
    }

    /// What a compaction job or a flush needs of the database: the file cache, the file system,
    /// the file-number allocator and the options (see [`job::Context`]).
    pub(super) fn job_context<'a>(&'a self, alloc: &'a dyn Fn() -> u64) -> job::Context<'a> {
        job::Context {
            tables: &self.tables,
            fs: self.config.fs.as_ref(),
            alloc,
            sst: self.sst_options(),
            policy: self.policy_options(),
            target_file_size: self.config.opts.target_file_size,
            alignment_variance: self.config.opts.alignment_variance,
        }
    }

    /// Whether flushes leave marking the slow tier to staging compactions (deferred marking):
    /// with two tiers, the fast one with a budget, and [`Options::deferred_compaction`].
    ///
    /// [`Options::deferred_compaction`]: crate::Options::deferred_compaction
    pub(crate) fn defers_marking(&self) -> bool {
        self.config.opts.deferred_compaction
            && matches!(self.config.tiers.as_slice(), [fast, _, ..] if fast.budget().is_some())
    }

    /// What a pick reads that is not in the version, taken outside any lock: the access
    /// histograms (only with tiers, where a choice can weigh them), the tables whose scans
    /// wish for a staging compaction, and the files the re-layout would rewrite (reading each
    /// candidate's header; only while a table's layout change is not done and its rate allows).
    pub(crate) fn pick_inputs(&self, settle: bool, relayout_after: Instant) -> PickInputs {
        let v = self.view.pin().version.clone();
        let tiered = self.config.tiers.len() >= 2 || v.tables.values().any(|t| !t.deferred.is_empty());
        let heat = if tiered { self.tables.heat.snapshot() } else { Default::default() };
        let staging_wanted = self.stores.pin().values().filter(|s| s.staging.is_raised()).map(|s| s.id).collect();
        // Settling (see `wait_idle`) runs the re-layout to its end without waiting on its rate.
        let relayout_due = settle || Instant::now() >= relayout_after;
        let stale = relayout_due.then(|| pick::stale_files(&v, |t, level, f| self.stale(t, level, f)));
        PickInputs { heat, staging_wanted, stale, settle }
    }

    /// The next compaction (see [`pick`]) of the current version, from `inputs` and the
    /// scheduler's `state`.
    pub(crate) fn pick_compaction(&self, inputs: &PickInputs, state: &BgState) -> Option<CompactionTask> {
        let v = self.view.pin().version.clone();
        let slowest = self.config.tiers.len().saturating_sub(1);
        let env = PickEnv {
            busy: &state.busy,
            policy: self.policy_options(),
            l0_slowdown_trigger: self.config.opts.l0_slowdown_trigger,
            budgets: self.config.tiers.iter().map(|t| t.budget()).collect(),
            defers_marking: self.defers_marking(),
            placement: self.config.opts.tier_placement,
            fast: self.tier_profile(0, DeviceProfile::ssd),
            slow: self.tier_profile(slowest, DeviceProfile::hard_disk),
            heat: &inputs.heat,
            staging_wanted: &inputs.staging_wanted,
            settle: inputs.settle || state.settling > 0,
            evict_after: (state.evict_after.0, &state.evict_after.1),
            stale: inputs.stale.as_ref(),
        };
        pick::pick(&v, &env)
    }

    /// Files of `t` the background re-layout has yet to rewrite.
    pub(crate) fn relayout_files(&self, t: &TableVersion) -> usize {
        t.before_relayout().filter(|(level, f)| self.stale(t, *level, f)).count()
    }

    /// Whether file `f` at `level` of `t` holds other groups than `t`'s layout gives the level
    /// (a file that cannot be opened is left to the reads that will report it).
    fn stale(&self, t: &TableVersion, level: usize, f: &FileMeta) -> bool {
        let Ok(reader) = self.tables.get(f.number) else { return false };
        match (reader.row_groups(), t.info.row_groups(level)) {
            (None, None) => false,
            (Some(r), Some(want)) => !r.groups().iter().map(|g| &g.columns[..]).eq(want.iter().map(|g| &g[..])),
            _ => true,
        }
    }

    /// The device profile given for tier `i`, or `default`.
    fn tier_profile(&self, i: usize, default: fn() -> DeviceProfile) -> DeviceProfile {
        self.config.opts.tiers.get(i).and_then(|t| t.profile).unwrap_or_else(default)
    }

    pub(super) fn release_outputs(&self, files: impl Iterator<Item = u64>) {
        let mut p = self.files.pending_outputs.lock();
        for n in files {
            p.remove(&n);
        }
    }

    fn flush_oldest(&self) -> Result<()> {
        let start = std::time::Instant::now();
        let (mem, version) = {
            let view = self.view.pin();
            let Some(mem) = view.imm.last().cloned() else {
                return Ok(());
            };
            (mem, view.version.clone())
        };
        let (edit, flushed) = self.write_level0(&mem, &version)?;
        let outputs: Vec<u64> = added(&edit).collect();
        let res = self.install_flush(edit, flushed, &version, Some(&mem));
        drop(version);
        self.release_outputs(outputs.into_iter());
        res?;
        self.io.lock().flush_micros += start.elapsed().as_micros() as u64;
        self.delete_obsolete_files();
        Ok(())
    }

    pub(crate) fn run_compaction(&self, task: &CompactionTask) -> Result<()> {
        // A file moving to another tier is rewritten there, never moved in place.
        let tier = job::output_tier(task, self.config.tiers.len(), self.config.opts.num_levels);
        if job::moves(task, tier) {
            let moved = task.inputs.iter().map(|f| (**f).clone()).collect();
            return self.install(job::edit(task, moved), None);
        }
        let start = std::time::Instant::now();
        // The current version holds the inputs; keep it only while they are read, so the
        // cleanup after install can delete them.
        let version = self.view.pin().version.clone();
        let Some(table) = version.tables.get(&task.table) else {
            return Ok(());
        };
        let info = table.info.clone();
        // Versions the history window no longer needs may go: raise the floor to the horizon
        // (never above what the inputs hold) before capturing the snapshots.
        let newest_input = task.all_inputs().map(|f| f.max_seq).max().unwrap_or(0);
        self.snapshots.raise_floor(newest_input.min(self.history_horizon()));
        let snapshots = self.snapshots.capture();
        let stripes = Stripes { snapshots: &snapshots, history_from: self.snapshots.floor() };
        let alloc = || self.alloc_output();
        let done = job::run(&self.job_context(&alloc), task, table, tier, stripes)?;
        // The outputs inherit the access histogram of the ranges they now hold.
        let outputs: Vec<_> = done.files.iter().map(FileMeta::heat_span).collect();
        self.tables.heat.carry(task.all_inputs().map(|f| f.heat_span()), &outputs);
        let before = supersede::file_numbers(&version, task.table);
        drop(version);
        self.config.fs.sync_dir(self.tables.tier_dir(tier))?;
        let outputs: Vec<u64> = done.files.iter().map(|f| f.number).collect();
        let bytes: u64 = done.files.iter().map(|f| f.size).sum();
        let placed = job::placed(&info, task.output_level, &done.files);
        // A staging output, like a flush's file, remembers which keys have versions below it.
        if let Some(o) = done.older.as_ref().and_then(|o| KeySet::new(o.iter().map(|k| key_hash(k)).collect())) {
            let o = Arc::new(o);
            for &n in &outputs {
                self.tables.set_older_keys(n, o.clone());
            }
        }
        let edit = job::edit(task, done.files);
        let res = self.install_compaction(edit, task, &before, (&placed, done.older.as_deref()), done.made);
        self.release_outputs(outputs.into_iter());
        res?;
        {
            let mut io = self.io.lock();
            io.compactions += 1;
            io.stagings += u64::from(task.output_level == 0);
            io.compaction_micros += start.elapsed().as_micros() as u64;
            if task.relayout {
                io.relayouts += 1;
                io.relayout_bytes += bytes;
            }
            io.written += bytes;
        }
        if let Some(t) = self.stores.pin().get(&task.table) {
            t.count_written(task.output_level, bytes);
            t.count_read(task.level, task.inputs.iter().map(|f| f.size).sum::<u64>());
            t.count_read(task.output_level, task.next_inputs.iter().map(|f| f.size).sum::<u64>());
        }
        self.delete_obsolete_files();
        Ok(())
    }

    /// Installs a compaction's edit with the marks of its outputs: files
    /// that appeared above the output level since the compaction read `before` (the file numbers
    /// of its version) mark the outputs too (see `supersede::catch_up_compaction`). A staging
    /// compaction (`older`: the keys it found below) also marks, like a flush, the files that
    /// appeared below it (see `supersede::catch_up_flush`).
    fn install_compaction(
        &self,
        mut edit: VersionEdit,
        task: &CompactionTask,
        before: &std::collections::HashSet<u64>,
        (outputs, older): (&[Placed], Option<&[Vec<u8>]>),
        mut made: Made,
    ) -> Result<()> {
        let numbers: Vec<u64> = outputs.iter().map(|(f, _)| f.number).collect();
        let below = |v: &Version, seen: &std::collections::HashSet<u64>, made: &mut Made| match older {
            Some(older) => supersede::catch_up_flush(&self.tables, v, task.table, seen, (&numbers, older, false), made),
            None => Ok(()),
        };
        #[cfg(test)]
        self.fire_install_hook("compaction");
        // Catch up outside the version lock first, then under it with whatever appeared since.
        let early = self.view.pin().version.clone();
        supersede::catch_up_compaction(
            &self.tables,
            &early,
            task.table,
            before,
            task.output_level,
            outputs,
            &mut made,
        )?;
        below(&early, before, &mut made)?;
        let mut seen = before.clone();
        seen.extend(supersede::file_numbers(&early, task.table));
        drop(early);
        let mut vs = self.files.versions.lock();
        let current = vs.current().clone();
        let res = supersede::catch_up_compaction(
            &self.tables,
            &current,
            task.table,
            &seen,
            task.output_level,
            outputs,
            &mut made,
        )
        .and_then(|()| below(&current, &seen, &mut made));
        if let Err(e) = res {
            self.poison(&e);
            return Err(e);
        }
        // A staging compaction marks files below; marks on files deleted meanwhile go.
        let now = supersede::file_numbers(&current, task.table);
        let live = |n: u64| numbers.contains(&n) || now.contains(&n);
        edit.records.extend(supersede::records(task.table, made, &live));
        self.install_locked(&mut vs, edit, None)
    }

    /// Waits until no memtable waits for flush and the policy has no compaction to run, with
    /// every file whose marking was deferred staged meanwhile.
    pub(crate) fn wait_idle(&self) -> Result<()> {
        self.sched.state().settling += 1;
        self.sched.changed();
        let res = self.sched.wait_for_with(
            || self.pick_inputs(true, Instant::now()),
            |st, inputs| {
                self.view.pin().imm.is_empty()
                    && !st.flush_running
                    && st.running_compactions == 0
                    && self.pick_compaction(inputs, st).is_none()
            },
        );
        self.sched.state().settling -= 1;
        res
    }

    /// Waits until `done` holds for the background state and read view. Fails if the database
    /// is closed or poisoned first.
    pub(crate) fn wait_background(&self, done: impl Fn(&BgState, &ReadView) -> bool) -> Result<()> {
        self.sched.wait_for(|st| done(st, &self.view.pin()))
    }

    /// Flushes, pauses background compaction, then compacts every level of `table` overlapping
    /// `[lo, hi)` into the next, top to bottom.
    pub(crate) fn compact_range(&self, table: u32, lo: &[u8], hi: Option<&[u8]>) -> Result<()> {
        let _manual = self.sched.manual_ops.lock();
        self.flush()?;
        self.sched.pause()?;
        let res = (|| {
            let in_range =
                |f: &&Arc<FileMeta>| hi.is_none_or(|h| f.smallest.as_slice() < h) && f.largest.as_slice() >= lo;
            for level in 0..self.config.opts.num_levels - 1 {
                let current = || {
                    let t = self.view.pin().version.tables.get(&table).cloned();
                    t.ok_or_else(|| Error::UnknownTable(format!("(dropped table id {table})")))
                };
                let layout = current()?.info.runs.clone();
                for group in layout.groups(level) {
                    let cg = group_id(group);
                    let mut t = current()?;
                    if level == 0 && !t.deferred.is_empty() {
                        // Files whose marking was deferred are staged before anything moves down.
                        let span = tiering::staging_span(&t);
                        if let Some(task) = tiering::stage_task(&t, span, 0.0) {
                            self.run_compaction(&task)?;
                        }
                        t = current()?;
                    }
                    let inputs: Vec<Arc<FileMeta>> = if level == 0 {
                        if t.levels[0].files().any(|f| in_range(&f)) {
                            policy::level0_settled(&t)
                        } else {
                            Vec::new()
                        }
                    } else {
                        t.levels[level].files().filter(|f| f.cg == cg).filter(in_range).cloned().collect()
                    };
                    if inputs.is_empty() {
                        continue;
                    }
                    // Background compaction is paused, so nothing is busy. Always rewrite: a
                    // manual compaction is asked for to drop garbage, which a move would keep.
                    if let Some(mut task) = policy::task_over(&t, level, cg, inputs, &Default::default(), 0.0) {
                        task.trivial_move = false;
                        self.run_compaction(&task)?;
                    }
                }
            }
            Ok(())
        })();
        self.sched.resume();
        res
    }
}

impl Background for DbInner {
    fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    fn flush_due(&self) -> bool {
        !self.view.pin().imm.is_empty()
    }

    fn flush(&self) -> Result<()> {
        self.flush_oldest()
    }

    fn pick_inputs(&self, settle: bool) -> PickInputs {
        let after = self.sched.state().relayout_after;
        DbInner::pick_inputs(self, settle, after)
    }

    fn pick(&self, inputs: &PickInputs, state: &BgState) -> Option<CompactionTask> {
        self.pick_compaction(inputs, state)
    }

    fn picked(&self, task: &CompactionTask, state: &mut BgState) {
        if task.output_level == 0 {
            // A staging compaction answers the scans that asked for it.
            if let Some(s) = self.stores.pin().get(&task.table) {
                s.staging.take();
            }
        }
        if task.relayout && self.config.opts.relayout_bytes_per_sec > 0 {
            // The next re-layout waits until this file's bytes fit the rate (set at the pick,
            // so two threads never take two).
            let read: u64 = task.inputs.iter().map(|f| f.size).sum();
            let pause = Duration::from_secs_f64(read as f64 / self.config.opts.relayout_bytes_per_sec as f64);
            state.relayout_after = Instant::now() + pause;
        }
        if task.to_tier.is_some() && !task.relayout && self.config.opts.tier_placement == TierPlacement::RoundRobin {
            // Round-robin eviction goes on after this file next time.
            if let Some(f) = task.inputs.first() {
                state.evict_after = (task.table, f.largest.clone());
            }
        }
    }

    fn compact(&self, task: &CompactionTask) -> Result<()> {
        self.run_compaction(task)
    }

    fn compaction_timer(&self, state: &BgState) -> Option<Instant> {
        let v = self.view.pin().version.clone();
        let relayout = v.tables.values().any(|t| t.before_relayout().next().is_some());
        let rate = (relayout && state.relayout_after > Instant::now()).then_some(state.relayout_after);
        let heat = (self.config.tiers.len() >= 2).then(|| Instant::now() + HEAT_LOOK);
        rate.into_iter().chain(heat).min()
    }

    fn lineage_pass(&self, idle: bool) -> usize {
        DbInner::lineage_pass(self, idle)
    }

    fn lineage_pending(&self) -> bool {
        self.lineage_tables().iter().any(|t| t.merge_lag() > 0)
    }

    fn self_advise(self: &Arc<Self>, rounds: &mut crate::advisor::selfadvise::Rounds) {
        self.self_advise_round(rounds);
    }
}

fn added(edit: &VersionEdit) -> impl Iterator<Item = u64> + '_ {
    edit.records.iter().filter_map(|r| match r {
        EditRecord::AddFile { file, .. } => Some(file.number),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::{FaultFs, Fs};
    use crate::{Column, ColumnType, Db, Options, Schema, TableOptions, Value};

    /// The pick reads no file: what it needs of files (which hold groups a layout change left
    /// behind) is read before it, and with every reader closed and the file system failing any
    /// open, the pick still finds the re-layout due.
    #[test]
    fn a_pick_opens_no_file() {
        let fs = FaultFs::new();
        let opts = Options {
            memtable_size: 16 << 10,
            l0_compaction_trigger: 2,
            level_size_ratio: 3,
            l1_max_bytes: 24 << 10,
            num_levels: 5,
            target_file_size: 8 << 10,
            block_size: 512,
            // After its first file, the re-layout waits (for the test's life).
            relayout_bytes_per_sec: 1,
            fs: Arc::new(fs.clone()) as Arc<dyn Fs>,
            ..Options::default()
        };
        let db = Db::open("/pick", opts).unwrap();
        let cols = ["id", "a", "b", "c"].map(|n| Column::new(n, ColumnType::Int)).to_vec();
        let t = db.create_table("t", Schema::new(cols, &["id"]).unwrap(), TableOptions::default()).unwrap();
        for i in 0..4000 {
            t.insert(&[Value::Int(i), Value::Int(i), Value::Int(2 * i), Value::Int(3 * i)]).unwrap();
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        db.set_layout("t", Some("L1-: column")).unwrap();
        let inner = &db.inner;
        inner.sched.pause().unwrap();
        let inputs = inner.pick_inputs(false, Instant::now());
        let stale = inputs.stale.as_ref().map_or(0, |s| s.len());
        assert!(stale > 0, "no file waits for the re-layout");
        for f in inner.view.pin().version.files() {
            inner.tables.evict(f.number);
        }
        fs.fail_opens(true);
        let task = inner.pick_compaction(&inputs, &inner.sched.state());
        fs.fail_opens(false);
        assert_eq!(fs.failed_opens(), 0, "the pick opened a file");
        assert!(task.as_ref().is_some_and(|t| t.relayout), "the pick missed the re-layout: {task:?}");
        inner.sched.resume();
    }
}
