//! Versions: the immutable description of which files make up every table's tree.
//!
//! A [`Version`] is never changed after it is built; flush and compaction describe their result as
//! a [`VersionEdit`](edit::VersionEdit), which the [`VersionSet`](set::VersionSet) appends to the
//! manifest and applies to produce the next version. Readers hold an `Arc<Version>` for as long as
//! they read, so the files it names stay on disk.
//!
//! Shape: table → levels → sorted runs → files. Level-0 has one run per file, newest first; deeper
//! levels have one run per column group, each a key-ordered list of non-overlapping files. Read and
//! compaction code walks runs, so a level may later hold several runs per group.

pub mod edit;
pub mod manifest;
pub mod marks;
pub mod set;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::catalog::TableInfo;
use edit::{EditRecord, VersionEdit};
use marks::Marks;

/// One SST as the version knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    /// File number (the file is `<number>.sst`).
    pub number: u64,
    /// Size in bytes.
    pub size: u64,
    /// Versions stored.
    pub entries: u64,
    /// Smallest sequence number stored.
    pub min_seq: u64,
    /// Largest sequence number stored.
    pub max_seq: u64,
    /// Smallest key.
    pub smallest: Vec<u8>,
    /// Largest key.
    pub largest: Vec<u8>,
    /// Column group the file stores.
    pub cg: u32,
    /// The storage tier holding it (index into the database's tiers; 0 without tiers).
    pub tier: u8,
}

impl FileMeta {
    /// The file as the access histograms see it.
    pub(crate) fn heat_span(&self) -> crate::tier::heat::Span<'_> {
        crate::tier::heat::Span {
            number: self.number,
            smallest: &self.smallest,
            largest: &self.largest,
            entries: self.entries,
        }
    }
}

/// A sorted run: files ordered by key, non-overlapping.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// The files, by smallest key.
    pub files: Vec<Arc<FileMeta>>,
}

impl Run {
    /// The value columns of the run's group in `info`'s layout at `level` (`None`: whole
    /// rows). Level-0 always holds whole rows.
    pub(crate) fn cover<'a>(&self, info: &'a TableInfo, level: usize) -> Option<&'a [usize]> {
        if level == 0 {
            return None;
        }
        let cg = self.files.first()?.cg;
        info.runs.cover(level, cg).map(|c| &c[..])
    }

    /// The file that may hold `key`.
    pub(crate) fn file_for(&self, key: &[u8]) -> Option<&Arc<FileMeta>> {
        let i = self.files.partition_point(|f| f.largest.as_slice() < key);
        self.files.get(i).filter(|f| f.smallest.as_slice() <= key)
    }
}

impl Run {
    /// Whether some file of the run holds keys in `[lower, upper)` (`upper` `None`: unbounded).
    pub(crate) fn overlaps(&self, lower: &[u8], upper: Option<&[u8]>) -> bool {
        let i = self.files.partition_point(|f| f.largest.as_slice() < lower);
        self.files.get(i).is_some_and(|f| upper.is_none_or(|u| f.smallest.as_slice() < u))
    }

    /// Versions stored in the run's files that overlap `[lower, upper)` (whole files: an upper
    /// bound of what a scan of the range reads here).
    pub(crate) fn overlapping_entries(&self, lower: &[u8], upper: Option<&[u8]>) -> u64 {
        let i = self.files.partition_point(|f| f.largest.as_slice() < lower);
        self.files[i..].iter().take_while(|f| upper.is_none_or(|u| f.smallest.as_slice() < u)).map(|f| f.entries).sum()
    }
}

/// One level of one table's tree.
#[derive(Debug, Clone, Default)]
pub struct Level {
    /// Runs, newest first within Level-0.
    pub runs: Vec<Run>,
}

impl Level {
    /// All files of the level.
    pub fn files(&self) -> impl Iterator<Item = &Arc<FileMeta>> {
        self.runs.iter().flat_map(|r| r.files.iter())
    }

    /// Total bytes.
    pub fn bytes(&self) -> u64 {
        self.files().map(|f| f.size).sum()
    }
}

/// The tree of one table.
#[derive(Debug, Clone)]
pub struct TableVersion {
    /// The table's definition.
    pub info: Arc<TableInfo>,
    /// Levels 0..num_levels.
    pub levels: Vec<Level>,
    /// Supersede vectors of the files that have any, by file number.
    pub marks: BTreeMap<u64, Arc<Marks>>,
    /// Level-0 files whose marking of the slow tier is deferred (see
    /// [`EditRecord::DeferredMarks`](edit::EditRecord::DeferredMarks)); always the newest.
    pub deferred: BTreeSet<u64>,
    /// Files of Level-1 and below numbered under this may hold a layout other than the
    /// table's (see [`EditRecord::SetLayout`]); 0 while the layout never changed.
    pub relayout_below: u64,
    /// The table's sequences: for each, the first value never handed out (see
    /// [`EditRecord::Sequence`]).
    pub sequences: BTreeMap<String, i64>,
}

impl TableVersion {
    /// The files from Level-1 down written before the table's last layout change (each with
    /// its level), which may hold an earlier layout's groups.
    pub(crate) fn before_relayout(&self) -> impl Iterator<Item = (usize, &Arc<FileMeta>)> + '_ {
        let below = self.relayout_below;
        self.levels
            .iter()
            .enumerate()
            .skip(1)
            .flat_map(move |(i, l)| l.files().filter(move |f| f.number < below).map(move |f| (i, f)))
    }

    /// The marks of file `number` (empty when it has none).
    pub fn marks_of(&self, number: u64) -> Option<&Arc<Marks>> {
        self.marks.get(&number)
    }
}

/// The files of every table at one point in time.
#[derive(Debug, Clone, Default)]
pub struct Version {
    /// Tables by id.
    pub tables: BTreeMap<u32, Arc<TableVersion>>,
    pub(crate) num_levels: usize,
}

impl Version {
    pub(crate) fn new(num_levels: usize) -> Self {
        Version { tables: BTreeMap::new(), num_levels }
    }

    /// Table by name.
    pub(crate) fn table_by_name(&self, name: &str) -> Option<&Arc<TableVersion>> {
        self.tables.values().find(|t| t.info.name == name)
    }

    /// Every file number in the version.
    pub(crate) fn file_numbers(&self) -> impl Iterator<Item = u64> + '_ {
        self.files().map(|f| f.number)
    }

    /// Every file in the version.
    pub(crate) fn files(&self) -> impl Iterator<Item = &Arc<FileMeta>> + '_ {
        self.tables.values().flat_map(|t| t.levels.iter().flat_map(Level::files))
    }

    /// Bytes of SSTs on each of `tiers` tiers (files on a tier beyond count toward the last).
    pub(crate) fn tier_bytes(&self, tiers: usize) -> Vec<u64> {
        let mut used = vec![0; tiers.max(1)];
        let last = used.len() - 1;
        for f in self.files() {
            used[usize::from(f.tier).min(last)] += f.size;
        }
        used
    }

    /// Checks the shape every version must have, naming the first thing found broken:
    /// - each table has `num_levels` levels; a file appears once in the whole version;
    /// - a file's key bounds and sequence bounds are ordered, and it holds versions;
    /// - Level-0 has one file per run, newest first (by largest sequence number, then number);
    /// - deeper levels have at most one run per column group, ordered by group, and each run's
    ///   files are ordered by key and do not overlap;
    /// - marks belong to files of their table, name rows inside their file and sequence
    ///   numbers newer than the file's oldest version; deferred marking names Level-0 files.
    ///
    /// Runs after every version installed under debug assertions (see
    /// [`set::VersionSet::log_and_apply`]) and on every recovery.
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        let mut seen = BTreeSet::new();
        for (&id, t) in &self.tables {
            let at =
                |level: usize, f: &FileMeta| format!("table {id} ({}), level {level}, file {}", t.info.name, f.number);
            if t.info.id != id {
                return Err(format!("table {id} is filed under the id of table {}", t.info.id));
            }
            if t.levels.len() != self.num_levels {
                return Err(format!("table {id} has {} levels, not {}", t.levels.len(), self.num_levels));
            }
            for (li, l) in t.levels.iter().enumerate() {
                for f in l.files() {
                    if !seen.insert(f.number) {
                        return Err(format!("{}: the file appears twice", at(li, f)));
                    }
                    if f.smallest > f.largest || f.min_seq > f.max_seq || f.entries == 0 {
                        return Err(format!("{}: bounds out of order or no versions: {f:?}", at(li, f)));
                    }
                }
                if li == 0 {
                    if let Some(r) = l.runs.iter().find(|r| r.files.len() != 1) {
                        return Err(format!("table {id}: a Level-0 run of {} files", r.files.len()));
                    }
                    let newest_first = l.runs.windows(2).all(|w| {
                        let (a, b) = (&w[0].files[0], &w[1].files[0]);
                        (a.max_seq, a.number) >= (b.max_seq, b.number)
                    });
                    if !newest_first {
                        return Err(format!("table {id}: Level-0 files are not newest first"));
                    }
                    continue;
                }
                for w in l.runs.windows(2) {
                    if w[0].files[0].cg >= w[1].files[0].cg {
                        return Err(format!("table {id}, level {li}: runs not one per group in group order"));
                    }
                }
                for r in &l.runs {
                    if let Some(f) = r.files.iter().find(|f| f.cg != r.files[0].cg) {
                        return Err(format!("{}: group {} in a run of group {}", at(li, f), f.cg, r.files[0].cg));
                    }
                    if let Some(w) = r.files.windows(2).find(|w| w[0].largest >= w[1].smallest) {
                        return Err(format!("{}: overlaps or precedes file {} in its run", at(li, &w[1]), w[0].number));
                    }
                }
            }
            let files: BTreeMap<u64, (usize, &Arc<FileMeta>)> =
                t.levels.iter().enumerate().flat_map(|(li, l)| l.files().map(move |f| (f.number, (li, f)))).collect();
            for (number, marks) in &t.marks {
                let Some(&(li, f)) = files.get(number) else {
                    return Err(format!("table {id}: marks of file {number}, which it does not hold"));
                };
                let merged = marks.merged();
                if let Some(m) = merged.marks().iter().find(|m| u64::from(m.row) >= f.entries || m.seq <= f.min_seq) {
                    return Err(format!(
                        "{}: mark {m:?} outside the file's {} rows or sequence numbers",
                        at(li, f),
                        f.entries
                    ));
                }
            }
            if let Some(n) = t.deferred.iter().find(|n| !t.levels[0].files().any(|f| f.number == **n)) {
                return Err(format!("table {id}: deferred marking of file {n}, not a Level-0 file"));
            }
        }
        Ok(())
    }

    /// Applies an edit, producing the next version. Records about tables that no longer exist
    /// are ignored (a compaction may finish after its table was dropped).
    pub(crate) fn apply(&self, edit: &VersionEdit) -> Version {
        let mut tables = self.tables.clone();
        let mut changed = BTreeSet::new();
        for r in &edit.records {
            match r {
                EditRecord::CreateTable(info) => {
                    let levels = vec![Level::default(); self.num_levels];
                    let info = Arc::new(info.clone());
                    tables.insert(
                        info.id,
                        Arc::new(TableVersion {
                            info,
                            levels,
                            marks: BTreeMap::new(),
                            deferred: BTreeSet::new(),
                            relayout_below: 0,
                            sequences: BTreeMap::new(),
                        }),
                    );
                }
                EditRecord::DropTable(id) => {
                    tables.remove(id);
                }
                EditRecord::DeleteFile { table, level, number } => {
                    // Copy-on-write: the first change to a table copies it out of the old version.
                    if let Some(l) = tables.get_mut(table).and_then(|t| Arc::make_mut(t).levels.get_mut(*level)) {
                        for run in &mut l.runs {
                            run.files.retain(|f| f.number != *number);
                        }
                        l.runs.retain(|r| !r.files.is_empty());
                        changed.insert(*table);
                    }
                }
                EditRecord::AddFile { table, level, file } => {
                    if let Some(l) = tables.get_mut(table).and_then(|t| Arc::make_mut(t).levels.get_mut(*level)) {
                        let f = Arc::new(file.clone());
                        match l.runs.iter_mut().find(|r| *level > 0 && r.files.first().is_some_and(|x| x.cg == f.cg)) {
                            Some(run) => run.files.push(f),
                            None => l.runs.push(Run { files: vec![f] }),
                        }
                        changed.insert(*table);
                    }
                }
                EditRecord::Marks { table, number, chunk } => {
                    if let Some(t) = tables.get_mut(table) {
                        let t = Arc::make_mut(t);
                        let next =
                            t.marks.get(number).map_or_else(Marks::default, |m| (**m).clone()).with(chunk.clone());
                        t.marks.insert(*number, Arc::new(next));
                        changed.insert(*table);
                    }
                }
                EditRecord::DeferredMarks { table, number } => {
                    if let Some(t) = tables.get_mut(table) {
                        Arc::make_mut(t).deferred.insert(*number);
                        changed.insert(*table);
                    }
                }
                EditRecord::SetLayout { table, layout, before } => {
                    if let Some(t) = tables.get_mut(table) {
                        let t = Arc::make_mut(t);
                        // The layout was checked before it was logged; one that no longer
                        // parses (a newer build's text) leaves the table as it was.
                        if let Ok(info) = t.info.with_layout(layout.clone()) {
                            t.info = Arc::new(info);
                        }
                        t.relayout_below = t.relayout_below.max(*before);
                    }
                }
                EditRecord::RenameTable { table, name } => {
                    if let Some(t) = tables.get_mut(table) {
                        let t = Arc::make_mut(t);
                        let mut info = (*t.info).clone();
                        info.name = name.clone();
                        t.info = Arc::new(info);
                    }
                }
                EditRecord::Sequence { table, name, high } => {
                    if let Some(t) = tables.get_mut(table) {
                        let t = Arc::make_mut(t);
                        let h = t.sequences.entry(name.clone()).or_insert(*high);
                        *h = (*h).max(*high);
                    }
                }
                EditRecord::LogNumber(_)
                | EditRecord::LineageLogNumber(_)
                | EditRecord::LineageCheckpoint { .. }
                | EditRecord::History { .. }
                | EditRecord::Clock(_)
                | EditRecord::Batches { .. }
                | EditRecord::NextFileNumber(_)
                | EditRecord::LastSequence(_)
                | EditRecord::NextTableId(_)
                | EditRecord::Tiers(_) => {}
            }
        }
        for id in changed {
            let Some(t) = tables.get_mut(&id) else { continue };
            let t = Arc::make_mut(t);
            // Marks go with their file: a file moved to another level keeps them, a deleted one
            // takes them along.
            let live: BTreeSet<u64> = t.levels.iter().flat_map(|l| l.files().map(|f| f.number)).collect();
            t.marks.retain(|n, _| live.contains(n));
            let level0: BTreeSet<u64> = t.levels[0].files().map(|f| f.number).collect();
            t.deferred.retain(|n| level0.contains(n));
            for (li, l) in t.levels.iter_mut().enumerate() {
                if li == 0 {
                    l.runs.sort_by(|a, b| {
                        let (x, y) = (&a.files[0], &b.files[0]);
                        (y.max_seq, y.number).cmp(&(x.max_seq, x.number))
                    });
                } else {
                    for run in &mut l.runs {
                        run.files.sort_by(|a, b| a.smallest.cmp(&b.smallest));
                    }
                    l.runs.sort_by_key(|r| r.files[0].cg);
                }
            }
        }
        Version { tables, num_levels: self.num_levels }
    }
}
