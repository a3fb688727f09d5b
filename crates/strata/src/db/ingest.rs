//! Bulk ingestion: rows written straight into files of the deepest level their key range leaves
//! free, each byte written once, instead of passing through the WAL, the memtable, a flush and
//! every compaction on the way down.
//!
//! How an ingest stays consistent with everything else:
//! - **Its sequence number.** All its rows carry one sequence number `S`, given at the start and
//!   [`GAP`] above every number handed out so far. Writes committed while the ingest builds its
//!   files take numbers below `S`, so none of them is newer than the ingest, and no read point
//!   reaches `S` until the install publishes it: the ingest becomes visible at once, to every
//!   read from then on and to no earlier one. Ingests install in the order of their numbers
//!   (a later one waits for the earlier ones to finish).
//! - **Where its files go.** Versions in memtables in the key range are flushed first. The
//!   target is the deepest level that no file of it or of any level above overlaps (Level-0
//!   when a Level-0 file does: then the ingest is Level-0's newest file). What lies below is
//!   older, so a read finding the ingested row first is right, and the files are marked against
//!   the versions below as a flush marks them.
//! - **The install** runs as commit leader (no write group in flight) with compactions paused
//!   (background ones, and no manual compaction or layout change in progress),
//!   and checks again: no memtable holds a key in the range, no file that arrived above the
//!   target holds one (Level-0 included, also when it is the target), no file arrived at the
//!   target in the range at all, and no commit reached `S`. Otherwise the ingest is refused with
//!   [`Error::IngestConflict`] and its files deleted: all of it or none.

use std::sync::Arc;

use super::background::Flushed;
use super::store::{Feature, TableState};
use super::DbInner;
use crate::catalog::TableInfo;
use crate::compaction::exec::Keep;
use crate::compaction::job;
use crate::compaction::supersede::Marker;
use crate::error::{Error, Result};
use crate::iter::merge::{RunSource, Source};
use crate::memtable::MemCursor;
use crate::mvcc::chain::Stripes;
use crate::mvcc::clock::unix_ms;
use crate::mvcc::{Entry, Kind};
use crate::sst::bloom::key_hash;
use crate::version::edit::{EditRecord, VersionEdit};
use crate::version::{TableVersion, Version};

/// How far above the last sequence number handed out an ingest's number lies: the writes that
/// may commit while it builds its files before it has to be refused.
pub(crate) const GAP: u64 = 1 << 32;

/// What an ingest wrote ([`Table::ingest`](crate::Table::ingest)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IngestStats {
    /// Rows ingested (after duplicates of a key were collapsed to the last one).
    pub rows: u64,
    /// Files written.
    pub files: usize,
    /// Bytes of those files.
    pub bytes: u64,
    /// The level the files went to.
    pub level: usize,
    /// The sequence number every ingested row carries.
    pub seq: u64,
}

/// Encoded rows in ascending key order, one version each at one sequence number.
struct Rows {
    rows: std::vec::IntoIter<(Vec<u8>, Vec<u8>)>,
    seq: u64,
}

impl Source for Rows {
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        Ok(self.rows.next().map(|(key, row)| Entry::new(key, self.seq, Kind::Put, row, None)))
    }
}

/// Sorts `rows` by key, keeping the last of each key (as a write batch would).
fn sort_rows(rows: &mut Vec<(Vec<u8>, Vec<u8>)>) {
    if rows.windows(2).all(|w| w[0].0 < w[1].0) {
        return;
    }
    // Stable: rows of one key stay in input order, and the last is kept.
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(rows.len());
    for r in rows.drain(..) {
        match out.last_mut() {
            Some(last) if last.0 == r.0 => *last = r,
            _ => out.push(r),
        }
    }
    *rows = out;
}

/// Whether a file spanning `[smallest, largest]` overlaps `[lo, hi]`.
fn overlaps(smallest: &[u8], largest: &[u8], (lo, hi): (&[u8], &[u8])) -> bool {
    smallest <= hi && largest >= lo
}

/// The deepest level of `t` that no file of it or of a level above overlaps `range`; 0 when a
/// Level-0 file or a Level-1 file does.
fn target_level(t: &TableVersion, range: (&[u8], &[u8])) -> usize {
    let hit = |l: usize| t.levels[l].files().any(|f| overlaps(&f.smallest, &f.largest, range));
    if hit(0) {
        return 0;
    }
    (1..t.levels.len()).find(|&l| hit(l)).map_or(t.levels.len() - 1, |l| l - 1)
}

impl DbInner {
    /// Whether a memtable (the active one or a frozen one) holds a version of a key of table
    /// `table` in `[lo, hi]`.
    fn memtables_hold(&self, table: u32, (lo, hi): (&[u8], &[u8])) -> bool {
        let view = self.view.pin();
        std::iter::once(&view.mem).chain(view.imm.iter()).any(|m| {
            let mut c = MemCursor::new(m.clone(), table, lo, None);
            c.next_entry().is_some_and(|e| e.key.as_slice() <= hi)
        })
    }

    /// Whether table `t` holds a version newer than sequence number `since`, in a memtable or
    /// a file.
    pub(crate) fn written_after(&self, t: &TableVersion, since: u64) -> bool {
        if t.levels.iter().any(|l| l.files().any(|f| f.max_seq > since)) {
            return true;
        }
        let view = self.view.pin();
        std::iter::once(&view.mem).chain(view.imm.iter()).any(|m| {
            let mut c = MemCursor::new(m.clone(), t.info.id, &[], None);
            std::iter::from_fn(|| c.next_entry()).any(|e| e.seq > since)
        })
    }

    /// The first level at or above `level` of `t` whose files that `base` lacks leave the
    /// ingest's files nowhere to go: above `level`, one holding a key in `range` (a version
    /// older than the ingest that reads would find before it); at `level` (below Level-0), one
    /// overlapping `range` at all (the level's run must stay sorted and apart).
    fn arrived_in(
        &self,
        t: &TableVersion,
        base: &Version,
        level: usize,
        range: (&[u8], &[u8]),
    ) -> Result<Option<usize>> {
        let before = crate::compaction::supersede::file_numbers(base, t.info.id);
        for (l, lv) in t.levels.iter().enumerate().take(level + 1) {
            for f in lv.files().filter(|f| !before.contains(&f.number)) {
                if !overlaps(&f.smallest, &f.largest, range) {
                    continue;
                }
                if l == level && l > 0 {
                    return Ok(Some(l));
                }
                let mut src = RunSource::new(
                    vec![f.clone()],
                    self.tables.clone(),
                    range.0,
                    None,
                    t.info.value_types.clone(),
                    None,
                    false,
                );
                if src.next_entry()?.is_some_and(|e| e.key.as_slice() <= range.1) {
                    return Ok(Some(l));
                }
            }
        }
        Ok(None)
    }

    /// Ingests `rows` (encoded keys and rows, any order) into table `info`; see the module.
    pub(crate) fn ingest(
        &self,
        info: &TableInfo,
        state: &TableState,
        mut rows: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<IngestStats> {
        self.check_writable()?;
        state.store.supports(Feature::Ingest, &info.name)?;
        sort_rows(&mut rows);
        let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
            return Ok(IngestStats::default());
        };
        let (lo, hi) = (first.0.clone(), last.0.clone());
        if self.memtables_hold(info.id, (&lo, &hi)) {
            self.flush()?;
        }
        let seq = {
            let mut st = self.sched.state();
            let seq = st.ingest_seq.max(self.snapshots.visible()) + GAP;
            st.ingest_seq = seq;
            st.ingests.insert(seq);
            seq
        };
        let res = self.ingest_at(info, state, rows, seq, (&lo, &hi));
        self.sched.state().ingests.remove(&seq);
        self.sched.changed();
        res
    }

    /// Builds the files of `rows` (sorted, spanning `range`) at sequence number `seq` and
    /// installs them.
    fn ingest_at(
        &self,
        info: &TableInfo,
        state: &TableState,
        rows: Vec<(Vec<u8>, Vec<u8>)>,
        seq: u64,
        range: (&[u8], &[u8]),
    ) -> Result<IngestStats> {
        let base: Arc<Version> = self.view.pin().version.clone();
        let t = base.tables.get(&info.id).cloned().ok_or_else(|| Error::UnknownTable(info.name.clone()))?;
        let level = target_level(&t, range);
        let tier = crate::tier::output_tier(self.config.tiers.len(), level, self.config.opts.num_levels);
        let n = rows.len() as u64;
        let user_bytes: u64 = rows.iter().map(|(k, r)| (k.len() + r.len()) as u64).sum();
        let mut marker = Marker::flush(&self.tables, &t, rows.iter().map(|(k, _)| key_hash(k)).collect(), false);
        // The numbers handed out, so a failed ingest can let the cleanup delete its files.
        let allocated = std::cell::RefCell::new(Vec::new());
        let alloc = || {
            let n = self.alloc_output();
            allocated.borrow_mut().push(n);
            n
        };
        let groups = t.info.runs.groups(level).iter().map(|g| (g.clone(), Vec::new())).collect();
        let stripes = Stripes { snapshots: &[], history_from: self.snapshots.floor() };
        let src = Rows { rows: rows.into_iter(), seq };
        let written = job::write_files(
            &self.job_context(&alloc),
            &t.info,
            (level, tier),
            vec![Box::new(src)],
            groups,
            Keep { stripes, bottommost: false, folded: false },
            &mut marker,
        );
        let files = match written {
            Ok(files) => files,
            Err(e) => {
                self.release_outputs(allocated.into_inner().into_iter());
                self.delete_obsolete_files();
                return Err(e);
            }
        };
        let numbers: Vec<u64> = files.iter().map(|f| f.number).collect();
        let stats = IngestStats { rows: n, files: files.len(), bytes: files.iter().map(|f| f.size).sum(), level, seq };
        let res = self.config.fs.sync_dir(self.tables.tier_dir(tier)).and_then(|()| {
            let mut edit = VersionEdit::default();
            for file in files {
                edit.push(EditRecord::AddFile { table: info.id, level, file });
            }
            edit.push(EditRecord::LastSequence(seq));
            let flushed = Flushed {
                table: info.id,
                files: numbers.clone(),
                made: marker.made,
                older: marker.older_keys,
                deferred: false,
            };
            self.install_ingest(info, (level, range, seq), edit, flushed, &base)
        });
        self.release_outputs(allocated.into_inner().into_iter());
        if res.is_err() {
            // The files were never installed: the cleanup deletes them.
            self.delete_obsolete_files();
            return res.map(|()| stats);
        }
        self.io.lock().written += stats.bytes;
        state.count_written(level, stats.bytes);
        state.count_ingested(user_bytes);
        Ok(stats)
    }

    /// Installs an ingest's `edit` once the ingests before it are done: as commit leader, with
    /// compactions paused, after checking that nothing arrived in its range since `base`.
    fn install_ingest(
        &self,
        info: &TableInfo,
        (level, range, seq): (usize, (&[u8], &[u8]), u64),
        edit: VersionEdit,
        flushed: Flushed,
        base: &Version,
    ) -> Result<()> {
        #[cfg(test)]
        self.fire_install_hook("ingest");
        // The ingests before this one first; then no manual compaction or layout change may
        // run meanwhile (taken after the turn, so two ingests never wait on each other), and
        // background compactions pause once the running ones are done.
        drop(self.sched.wait_state(|st| st.ingests.first() == Some(&seq))?);
        let _manual = self.sched.manual_ops.lock();
        self.sched.pause()?;
        let res = self.as_leader(|leader| {
            let conflict = |reason: String| Error::IngestConflict { table: info.name.clone(), reason };
            let visible = self.snapshots.visible();
            if visible >= seq {
                return Err(conflict(format!(
                    "more writes committed while it built its files than the {GAP} sequence numbers it leaves room for"
                )));
            }
            if self.memtables_hold(info.id, range) {
                return Err(conflict("writes to its key range arrived while it built its files".into()));
            }
            let current = self.view.pin().version.clone();
            let t = current.tables.get(&info.id).ok_or_else(|| Error::UnknownTable(info.name.clone()))?;
            if let Some(l) = self.arrived_in(t, base, level, range)? {
                return Err(conflict(format!("level {l} took versions in its key range while it built its files")));
            }
            self.install_flush(edit, vec![flushed], base, None)?;
            // Open write transactions that read below the ingest can no longer commit (the
            // window does not hold its rows).
            self.commit.publish_noting_conflicts(self, seq, || self.commit.conflicts.lock().raise_horizon(seq));
            self.commit.note_clock(leader, unix_ms(std::time::SystemTime::now()), seq);
            Ok(())
        });
        self.sched.resume();
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::{FaultFs, Fs};
    use crate::{
        Column, ColumnType, Db, KeyRange, Options, Projection, ReadOptions, Schema, Table, TableOptions, Value,
    };

    fn setup() -> (Db, Table) {
        let fs: Arc<dyn Fs> = Arc::new(FaultFs::new());
        let db = Db::open("/db", Options { fs, ..Options::default() }).unwrap();
        let schema =
            Schema::new(vec![Column::new("id", ColumnType::BigInt), Column::new("a", ColumnType::Int)], &["id"])
                .unwrap();
        let t = db.create_table("t", schema, TableOptions::default()).unwrap();
        (db, t)
    }

    fn rows(t: &Table) -> Vec<Vec<Value>> {
        t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap().map(|r| r.unwrap()).collect()
    }

    /// Runs an ingest of keys 0..100 (a = 1) with `during` run while its files are built.
    fn ingest_with(db: &Db, t: &Table, during: impl FnOnce() + Send + 'static) -> Result<IngestStats> {
        *db.inner.install_hook.lock() = Some(("ingest", Box::new(during)));
        let res = t.ingest((0..100).map(|k| vec![Value::BigInt(k), Value::Int(1)]));
        assert!(db.inner.install_hook.lock().is_none(), "the hook did not run");
        res
    }

    #[test]
    fn a_write_into_the_range_while_the_files_are_built_refuses_the_ingest() {
        let (db, t) = setup();
        let t2 = t.clone();
        let e = ingest_with(&db, &t, move || t2.insert(&[Value::BigInt(50), Value::Int(2)]).unwrap()).unwrap_err();
        assert!(matches!(e, Error::IngestConflict { .. }) && e.is_retryable(), "{e}");
        assert_eq!(rows(&t), vec![vec![Value::BigInt(50), Value::Int(2)]]);
        // Flushed to Level-0 meanwhile: refused too.
        let (t2, db2) = (t.clone(), db.inner.clone());
        let e = ingest_with(&db, &t, move || {
            t2.insert(&[Value::BigInt(60), Value::Int(2)]).unwrap();
            db2.flush().unwrap();
        })
        .unwrap_err();
        assert!(matches!(e, Error::IngestConflict { .. }), "{e}");
        assert_eq!(rows(&t).len(), 2);
        // The refused ingests' files are gone: the two Level-0 files are all there is.
        let ssts =
            db.inner.config.fs.list(std::path::Path::new("/db")).unwrap().into_iter().filter(|n| n.ends_with(".sst"));
        assert_eq!(ssts.count(), 2);
        assert_eq!(db.stats().tables[0].levels[0].files, 2);
        // Run again, it goes in above them.
        let st = t.ingest((0..100).map(|k| vec![Value::BigInt(k), Value::Int(1)])).unwrap();
        assert_eq!(st.level, 0);
        assert_eq!(rows(&t), (0..100).map(|k| vec![Value::BigInt(k), Value::Int(1)]).collect::<Vec<_>>());
    }

    #[test]
    fn writes_outside_the_range_while_the_files_are_built_do_not() {
        let (db, t) = setup();
        let t2 = t.clone();
        let st = ingest_with(&db, &t, move || t2.insert(&[Value::BigInt(500), Value::Int(2)]).unwrap()).unwrap();
        assert_eq!(st.rows, 100);
        let all = rows(&t);
        assert_eq!(all.len(), 101);
        assert_eq!(all[100], vec![Value::BigInt(500), Value::Int(2)]);
        // The write took a sequence number below the ingest's.
        let s = db.snapshot();
        assert!(s.seq() >= st.seq);
    }

    fn kv(k: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
        (k.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    #[test]
    fn rows_are_sorted_and_the_last_of_a_key_kept() {
        let mut rows = vec![kv("b", "1"), kv("a", "2"), kv("b", "3"), kv("c", "4"), kv("a", "5")];
        sort_rows(&mut rows);
        assert_eq!(rows, vec![kv("a", "5"), kv("b", "3"), kv("c", "4")]);
        let mut sorted = vec![kv("a", "1"), kv("b", "2")];
        sort_rows(&mut sorted);
        assert_eq!(sorted, vec![kv("a", "1"), kv("b", "2")]);
    }

    #[test]
    fn ranges_overlap_when_they_share_a_key() {
        assert!(overlaps(b"b", b"d", (b"a", b"b")));
        assert!(overlaps(b"b", b"d", (b"c", b"c")));
        assert!(!overlaps(b"b", b"d", (b"e", b"f")));
        assert!(!overlaps(b"b", b"d", (b"a", b"az")));
    }
}
