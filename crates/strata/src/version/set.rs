//! [`VersionSet`]: the current version plus the manifest it is logged in. Callers hold the
//! database's version lock around [`VersionSet::log_and_apply`], so edits are applied one at a
//! time and in manifest order.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::edit::{EditRecord, VersionEdit};
use super::manifest::{current, read_edits, set_current, ManifestWriter};
use super::Version;
use crate::error::{Error, Result};
use crate::mvcc::batches::Batches;
use crate::mvcc::clock::Clock;
use crate::tier::TierRecord;
use crate::vfs::Fs;

/// A manifest larger than this is rewritten as a fresh snapshot.
const MANIFEST_ROLL_BYTES: u64 = 64 << 20;

/// Persistent counters carried in the manifest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub log_number: u64,
    pub next_file: u64,
    pub last_sequence: u64,
    pub next_table_id: u32,
    /// The oldest WAL lineage-engine tables need (0: none was ever created).
    pub lineage_log: u64,
    /// The lineage checkpoint to load: file number and sequence number ((0, 0): none).
    pub lineage_checkpoint: (u64, u64),
    /// The history retention window in milliseconds (0: none).
    pub retention_ms: u64,
    /// Reads as of sequence numbers from here up are answered (see [`EditRecord::History`]).
    pub history_floor: u64,
}

impl Counters {
    /// The oldest WAL anything still needs.
    pub(crate) fn oldest_log(&self) -> u64 {
        match self.lineage_log {
            0 => self.log_number,
            n => n.min(self.log_number),
        }
    }
}

/// The live version and its manifest.
pub(crate) struct VersionSet {
    dir: PathBuf,
    current: Arc<Version>,
    manifest: ManifestWriter,
    pub(crate) counters: Counters,
    /// The wall-clock samples logged so far, trimmed to the retention window when the
    /// manifest is rewritten.
    pub(crate) clock: Clock,
    /// The batch ranges logged so far, trimmed to the history floor when the manifest is
    /// rewritten.
    pub(crate) batches: Batches,
    /// The storage tiers recorded (empty: the database has only its own directory).
    pub(crate) tiers: Vec<TierRecord>,
    /// A manifest write failed; nothing more may be appended.
    failed: bool,
}

/// [`Version::check_invariants`], and that the counters cover the version's files: their
/// numbers were handed out and their versions' sequence numbers published.
fn check(v: &Version, c: &Counters) -> std::result::Result<(), String> {
    v.check_invariants()?;
    match v.files().find(|f| f.number >= c.next_file || f.max_seq > c.last_sequence) {
        Some(f) => Err(format!(
            "file {} (sequence numbers up to {}) is past the next file number {} or the last sequence number {}",
            f.number, f.max_seq, c.next_file, c.last_sequence
        )),
        None => Ok(()),
    }
}

/// Applies the counter records of `edit` to `c`.
fn apply_counters(edit: &VersionEdit, c: &mut Counters) {
    for r in &edit.records {
        match r {
            EditRecord::LogNumber(n) => c.log_number = c.log_number.max(*n),
            EditRecord::NextFileNumber(n) => c.next_file = c.next_file.max(*n),
            EditRecord::LastSequence(n) => c.last_sequence = c.last_sequence.max(*n),
            EditRecord::NextTableId(n) => c.next_table_id = c.next_table_id.max(*n),
            EditRecord::LineageLogNumber(n) => c.lineage_log = c.lineage_log.max(*n),
            EditRecord::LineageCheckpoint { number, seq } => {
                c.lineage_checkpoint = c.lineage_checkpoint.max((*number, *seq));
                c.next_file = c.next_file.max(number + 1);
            }
            EditRecord::AddFile { file, .. } => c.next_file = c.next_file.max(file.number + 1),
            EditRecord::SetLayout { before, .. } => c.next_file = c.next_file.max(*before),
            EditRecord::CreateTable(t) => c.next_table_id = c.next_table_id.max(t.id + 1),
            EditRecord::History { retention_ms, floor } => {
                c.retention_ms = *retention_ms;
                c.history_floor = c.history_floor.max(*floor);
            }
            EditRecord::Clock(_)
            | EditRecord::Batches { .. }
            | EditRecord::DropTable(_)
            | EditRecord::DeleteFile { .. }
            | EditRecord::Marks { .. }
            | EditRecord::DeferredMarks { .. }
            | EditRecord::Sequence { .. }
            | EditRecord::RenameTable { .. }
            | EditRecord::Tiers(_) => {}
        }
    }
}

/// The tiers of `edit`, if it records them (the last record wins).
fn recorded_tiers(edit: &VersionEdit) -> Option<&Vec<TierRecord>> {
    edit.records.iter().rev().find_map(|r| match r {
        EditRecord::Tiers(t) => Some(t),
        _ => None,
    })
}

/// Adds the clock samples of `edit` to `clock`.
fn record_samples(edit: &VersionEdit, clock: &mut Clock) {
    for r in &edit.records {
        if let EditRecord::Clock(samples) = r {
            for &(ms, seq) in samples {
                clock.record(ms, seq);
            }
        }
    }
}

/// Adds the batch ranges of `edit` to `batches`; true if it logs any.
fn record_batches(edit: &VersionEdit, batches: &mut Batches) -> bool {
    let mut logged = false;
    for r in &edit.records {
        if let EditRecord::Batches { known_from, ranges } = r {
            batches.absorb(*known_from, ranges);
            logged = true;
        }
    }
    logged
}

fn snapshot_edit(v: &Version, c: &Counters, clock: &Clock, batches: &Batches, tiers: &[TierRecord]) -> VersionEdit {
    let mut e = VersionEdit::default();
    if !tiers.is_empty() {
        e.push(EditRecord::Tiers(tiers.to_vec()));
    }
    for t in v.tables.values() {
        e.push(EditRecord::CreateTable((*t.info).clone()));
        if t.relayout_below > 0 {
            let layout = t.info.options.layout.clone();
            e.push(EditRecord::SetLayout { table: t.info.id, layout, before: t.relayout_below });
        }
        for (li, l) in t.levels.iter().enumerate() {
            for f in l.files() {
                e.push(EditRecord::AddFile { table: t.info.id, level: li, file: (**f).clone() });
            }
        }
        for (&number, marks) in &t.marks {
            let chunk = Arc::new(marks.merged());
            e.push(EditRecord::Marks { table: t.info.id, number, chunk });
        }
        for &number in &t.deferred {
            e.push(EditRecord::DeferredMarks { table: t.info.id, number });
        }
        for (name, &high) in &t.sequences {
            e.push(EditRecord::Sequence { table: t.info.id, name: name.clone(), high });
        }
    }
    e.push(EditRecord::LogNumber(c.log_number));
    e.push(EditRecord::NextFileNumber(c.next_file));
    e.push(EditRecord::LastSequence(c.last_sequence));
    e.push(EditRecord::NextTableId(c.next_table_id));
    if c.lineage_log != 0 {
        e.push(EditRecord::LineageLogNumber(c.lineage_log));
    }
    if c.lineage_checkpoint.0 != 0 {
        let (number, seq) = c.lineage_checkpoint;
        e.push(EditRecord::LineageCheckpoint { number, seq });
    }
    e.push(EditRecord::History { retention_ms: c.retention_ms, floor: c.history_floor });
    e.push(EditRecord::Clock(clock.samples()));
    e.push(EditRecord::Batches { known_from: batches.start(), ranges: batches.ranges() });
    e
}

impl VersionSet {
    /// Starts a brand-new database.
    pub(crate) fn create(fs: &dyn Fs, dir: &Path, num_levels: usize) -> Result<Self> {
        let counters = Counters {
            log_number: 0,
            next_file: 2,
            last_sequence: 0,
            next_table_id: 1,
            lineage_log: 0,
            lineage_checkpoint: (0, 0),
            retention_ms: 0,
            history_floor: 0,
        };
        let v = Version::new(num_levels);
        let clock = Clock::default();
        let batches = Batches::default();
        let manifest =
            ManifestWriter::create(fs, dir, 1, &snapshot_edit(&v, &counters, &clock, &batches, &[]).encode())?;
        fs.sync_dir(dir)?;
        set_current(fs, dir, 1)?;
        let current = Arc::new(v);
        Ok(VersionSet {
            dir: dir.to_owned(),
            current,
            manifest,
            counters,
            clock,
            batches,
            tiers: Vec::new(),
            failed: false,
        })
    }

    /// Replays the live manifest, then starts a new one holding a snapshot of the result. File
    /// numbers below `min_next_file` are taken (files with those numbers exist).
    pub(crate) fn recover(fs: &dyn Fs, dir: &Path, num_levels: usize, min_next_file: u64) -> Result<Self> {
        let (path, _) = current(fs, dir)?;
        let mut v = Version::new(num_levels);
        let mut c = Counters::default();
        let mut clock = Clock::default();
        let mut batches = Batches::default();
        let mut batches_logged = false;
        let mut history_logged = false;
        let mut tiers = Vec::new();
        for rec in read_edits(fs, &path)? {
            let edit = VersionEdit::decode(&rec, num_levels)
                .map_err(|e| Error::corruption(&path, 0, format!("bad version edit: {}", e.0)))?;
            history_logged |= edit.records.iter().any(|r| matches!(r, EditRecord::History { .. }));
            apply_counters(&edit, &mut c);
            record_samples(&edit, &mut clock);
            batches_logged |= record_batches(&edit, &mut batches);
            if let Some(t) = recorded_tiers(&edit) {
                tiers.clone_from(t);
            }
            v = v.apply(&edit);
        }
        if !batches_logged {
            // Written by a build that logged no batch ranges: where its batches began and ended
            // is not known, so reads as of its sequence numbers are refused.
            batches = Batches::known_from(c.last_sequence + 1);
        }
        batches.trim_through(c.history_floor);
        if !history_logged {
            // Written before history was logged: anything up to the last sequence number may
            // have been merged.
            c.history_floor = c.last_sequence;
        }
        check(&v, &c).map_err(|e| Error::corruption(&path, 0, format!("the manifest describes a broken tree: {e}")))?;
        c.next_file = c.next_file.max(min_next_file);
        let number = c.next_file;
        c.next_file += 1;
        let manifest =
            ManifestWriter::create(fs, dir, number, &snapshot_edit(&v, &c, &clock, &batches, &tiers).encode())?;
        fs.sync_dir(dir)?;
        set_current(fs, dir, number)?;
        let current = Arc::new(v);
        Ok(VersionSet { dir: dir.to_owned(), current, manifest, counters: c, clock, batches, tiers, failed: false })
    }

    pub(crate) fn current(&self) -> &Arc<Version> {
        &self.current
    }

    pub(crate) fn manifest_number(&self) -> u64 {
        self.manifest.number
    }

    /// The live manifest's path.
    pub(crate) fn manifest_path(&self) -> PathBuf {
        self.dir.join(super::manifest::manifest_name(self.manifest.number))
    }

    /// Logs `edit` (with the current counters appended) durably, then makes it current.
    /// `next_file` is the database's file-number allocator.
    pub(crate) fn log_and_apply(
        &mut self,
        fs: &dyn Fs,
        mut edit: VersionEdit,
        next_file: &AtomicU64,
    ) -> Result<Arc<Version>> {
        if self.failed {
            // An earlier append may have left part of a record behind; appending after it
            // would make the manifest unreadable.
            return Err(Error::Poisoned("an earlier manifest write failed".into()));
        }
        // Counters change only once the edit is durable: a failed edit must not, say, advance
        // the log number and let cleanup delete a WAL whose data no SST holds.
        let mut counters = self.counters;
        apply_counters(&edit, &mut counters);
        let roll = self.manifest.size() > MANIFEST_ROLL_BYTES;
        let roll_number = roll.then(|| next_file.fetch_add(1, Ordering::SeqCst));
        counters.next_file = counters.next_file.max(next_file.load(Ordering::SeqCst));
        edit.push(EditRecord::NextFileNumber(counters.next_file));
        let next = Arc::new(self.current.apply(&edit));
        if cfg!(debug_assertions) {
            if let Err(e) = check(&next, &counters) {
                // A bug, stopped where it happened (the tests run with debug assertions).
                #[allow(clippy::panic)]
                {
                    panic!("a version edit broke the tree: {e}\nedit: {edit:?}");
                }
            }
        }
        let written = match roll_number {
            Some(number) => (|| {
                let mut clock = self.clock.clone();
                record_samples(&edit, &mut clock);
                clock.trim_before(clock.last_ms().saturating_sub(counters.retention_ms));
                let mut batches = self.batches.clone();
                record_batches(&edit, &mut batches);
                batches.trim_through(counters.history_floor);
                let tiers = recorded_tiers(&edit).unwrap_or(&self.tiers);
                let snapshot = snapshot_edit(&next, &counters, &clock, &batches, tiers);
                let m = ManifestWriter::create(fs, &self.dir, number, &snapshot.encode())?;
                fs.sync_dir(&self.dir)?;
                set_current(fs, &self.dir, number)?;
                self.manifest = m;
                Ok(())
            })(),
            None => self.manifest.append(&edit.encode()),
        };
        if let Err(e) = written {
            self.failed = true;
            return Err(e);
        }
        self.counters = counters;
        record_samples(&edit, &mut self.clock);
        record_batches(&edit, &mut self.batches);
        if let Some(t) = recorded_tiers(&edit) {
            self.tiers.clone_from(t);
        }
        if roll {
            self.clock.trim_before(self.clock.last_ms().saturating_sub(counters.retention_ms));
            self.batches.trim_through(counters.history_floor);
        }
        self.current = next.clone();
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{TableInfo, TableOptions};
    use crate::types::{Column, ColumnType, Schema};
    use crate::version::FileMeta;
    use crate::vfs::FaultFs;

    fn table() -> EditRecord {
        let schema =
            Schema::new(vec![Column::new("k", ColumnType::BigInt), Column::new("v", ColumnType::Text)], &["k"])
                .expect("valid schema");
        let info = TableInfo::new(1, "t".into(), Arc::new(schema), TableOptions::default()).expect("valid table");
        EditRecord::CreateTable(info)
    }

    fn file(number: u64, smallest: &[u8], largest: &[u8]) -> FileMeta {
        FileMeta {
            number,
            size: 100,
            entries: 10,
            min_seq: 1,
            max_seq: 5,
            smallest: smallest.to_vec(),
            largest: largest.to_vec(),
            cg: 0,
            tier: 0,
        }
    }

    /// An edit putting two overlapping files in one run of Level-1.
    fn overlapping() -> VersionEdit {
        let mut e = VersionEdit::default();
        e.push(EditRecord::AddFile { table: 1, level: 1, file: file(10, b"a", b"m") });
        e.push(EditRecord::AddFile { table: 1, level: 1, file: file(11, b"k", b"z") });
        e.push(EditRecord::LastSequence(5));
        e
    }

    /// A planted violation: an edit that makes a run's files overlap is stopped when it is
    /// installed (under debug assertions, as in the `ci` profile) and refused at recovery.
    #[test]
    fn an_edit_breaking_the_tree_panics_under_debug_assertions_and_fails_recovery() {
        let fs = FaultFs::new();
        let dir = Path::new("/v");
        fs.create_dir_all(dir).expect("dir");
        let mut set = VersionSet::create(&fs, dir, 4).expect("create");
        let next = AtomicU64::new(20);
        let mut create = VersionEdit::default();
        create.push(table());
        set.log_and_apply(&fs, create, &next).expect("a table");
        let mut fine = VersionEdit::default();
        fine.push(EditRecord::AddFile { table: 1, level: 1, file: file(10, b"a", b"m") });
        fine.push(EditRecord::AddFile { table: 1, level: 1, file: file(11, b"n", b"z") });
        fine.push(EditRecord::LastSequence(5));
        set.log_and_apply(&fs, fine, &next).expect("two files side by side");
        let installed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut bad = VersionEdit::default();
            bad.push(EditRecord::AddFile { table: 1, level: 1, file: file(12, b"c", b"p") });
            set.log_and_apply(&fs, bad, &next)
        }));
        let checked = cfg!(debug_assertions);
        match installed {
            Err(panic) => {
                let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
                assert!(checked && msg.contains("overlaps"), "only debug assertions check an installed edit: {msg}");
            }
            Ok(r) => {
                assert!(!checked, "under debug assertions the edit must panic");
                r.expect("logged without the check");
            }
        }

        // Recovery checks always: a manifest holding the overlap is refused.
        let mut snapshot = VersionEdit::default();
        snapshot.push(table());
        snapshot.push(EditRecord::NextFileNumber(20));
        let dir = Path::new("/w");
        fs.create_dir_all(dir).expect("dir");
        let mut m = ManifestWriter::create(&fs, dir, 1, &snapshot.encode()).expect("manifest");
        m.append(&overlapping().encode()).expect("edit");
        set_current(&fs, dir, 1).expect("current");
        let err = VersionSet::recover(&fs, dir, 4, 0).err().expect("recovery refuses the overlap");
        assert!(err.is_corruption() && err.to_string().contains("overlaps"), "{err}");
    }
}
