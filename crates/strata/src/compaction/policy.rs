//! The leveled compaction policy, as a pure function: version + files already being compacted +
//! options in, at most one task out. No IO, no clock, no state, so it is tested with text
//! fixtures (`tests/testdata/compaction_policy`).
//!
//! Rules:
//! - Level-0 scores `files / l0_trigger`. A deeper level's capacity `target(i)` (with
//!   `target(1) = l1_max_bytes`, `target(i+1) = target(i) × ratio`) is split across its column
//!   groups in proportion to their width (the bytes one version of the group takes: key, sequence
//!   and kind, which every group stores, plus its columns); each group scores
//!   `bytes / share` and the level scores its most overflowing group (LASER §4.4). The last level
//!   never scores.
//! - The highest score ≥ 1 over all tables and levels wins, if a task can be formed for it
//!   without touching a busy file; otherwise the next best is tried. Within a level, groups are
//!   tried most overflowing first.
//! - A Level-0 task takes every Level-0 file (they overlap, and must move down oldest data
//!   first) plus the overlapping files of every Level-1 group; only one Level-0 task runs per
//!   table. Files whose marking is deferred (and any newer) stay: they wait for a staging
//!   compaction ([`super::tiering::stage`]), so the task takes the older ones only.
//! - A task on group g of level i ≥ 1 takes one file of g, plus the overlapping files of the
//!   groups of level i+1 that lie inside g (CG-local compaction: other groups are not touched).
//!   The file comes from the oldest quarter of g's files (by max sequence: the newest data they
//!   hold), so levels keep bands of data age; within that quarter, the file that rewrites the
//!   fewest bytes below per byte of its own goes first, oldest first on ties. Choosing by overlap
//!   is what lets aligned compaction pay off: a file cut to match the level below, which rewrites
//!   only what lies under it, goes before one that files below straddle (Kim et al. ran RocksDB's
//!   min-overlapping-ratio priority; the age window bounds how far this reorders a level).
//! - A task whose single input file has no overlap below and whose group is the same at the next
//!   level is a trivial move (the file changes level, no IO). A group that splits is rewritten.
//! - A task is bottommost when no deeper level holds a file of the task's columns overlapping its
//!   key range.
//! - Aligned compaction cuts a task's output where the files of the level below the output begin
//!   and end; [`alignment_files`] says which files those are.

use std::collections::HashSet;
use std::sync::Arc;

use crate::catalog::TableInfo;
use crate::column_group::group_id;
use crate::types::ColumnType;
use crate::version::{FileMeta, TableVersion, Version};

/// Shape of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyOptions {
    /// Level-0 file count that triggers compaction.
    pub l0_trigger: usize,
    /// Size ratio T between adjacent levels.
    pub ratio: u64,
    /// Target size of level 1 in bytes.
    pub l1_max_bytes: u64,
    /// Number of levels.
    pub num_levels: usize,
}

impl PolicyOptions {
    /// Target bytes of level `level` (≥ 1).
    pub fn target(&self, level: usize) -> u64 {
        let mut t = self.l1_max_bytes;
        for _ in 1..level {
            t = t.saturating_mul(self.ratio);
        }
        t
    }
}

/// One compaction to run.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionTask {
    /// Table id.
    pub table: u32,
    /// Input level.
    pub level: usize,
    /// Input column group (its id at `level`; 0 for Level-0's row group).
    pub cg: u32,
    /// Output level (`level + 1`).
    pub output_level: usize,
    /// Files taken from `level` (Level-0: newest first).
    pub inputs: Vec<Arc<FileMeta>>,
    /// Overlapping files taken from `output_level`.
    pub next_inputs: Vec<Arc<FileMeta>>,
    /// No overlap below: move the file instead of rewriting it.
    pub trivial_move: bool,
    /// Nothing deeper overlaps: tombstones and invisible partial rows may be dropped.
    pub bottommost: bool,
    /// The score that chose it.
    pub score: f64,
    /// A tier move within a level (see [`super::tiering`]): the output goes to this tier instead
    /// of the output level's own.
    pub to_tier: Option<u8>,
    /// A re-layout: one file rewritten in place, into the groups its table's layout now gives
    /// its level (see [`super::pick::relayout`]).
    pub relayout: bool,
}

impl CompactionTask {
    /// File `f` of `t` at `level` rewritten alone into its own level, on tier `to_tier`
    /// (a promotion, or a re-layout when `relayout`); bottommost when nothing lies below.
    pub(crate) fn in_place(
        t: &TableVersion,
        level: usize,
        f: &Arc<FileMeta>,
        (to_tier, score, relayout): (u8, f64, bool),
    ) -> CompactionTask {
        CompactionTask {
            table: t.info.id,
            level,
            cg: f.cg,
            output_level: level,
            inputs: vec![f.clone()],
            next_inputs: Vec::new(),
            trivial_move: false,
            bottommost: (level + 1..t.levels.len()).all(|l| t.levels[l].runs.is_empty()),
            score,
            to_tier: Some(to_tier),
            relayout,
        }
    }

    /// All input files.
    pub fn all_inputs(&self) -> impl Iterator<Item = &Arc<FileMeta>> {
        self.inputs.iter().chain(self.next_inputs.iter())
    }

    /// Why the pick chose it, in words (told by its shape: a staging compaction writes
    /// Level-0, a re-layout rewrites a file in place, a tier move names the tier).
    pub fn why(&self) -> String {
        let (t, n) = (self.table, self.inputs.len());
        let from_tier = self.inputs.first().map_or(0, |f| f.tier);
        match (self.relayout, self.output_level, self.to_tier) {
            (true, level, _) => {
                let file = self.inputs.first().map_or(0, |f| f.number);
                format!("re-layout of table {t}: file {file} at Level-{level} holds groups its level no longer has")
            }
            (false, 0, _) => format!("staging of table {t}: {n} Level-0 files whose marking of the slow tier waits"),
            (false, _, Some(to)) if to < from_tier => {
                format!("promotion of table {t}: Level-{} data read hot on tier {from_tier}", self.level)
            }
            (false, _, Some(to)) => format!(
                "eviction of table {t}: the fast tier is over its budget, Level-{} data goes to tier {to}",
                self.level
            ),
            (false, _, None) if self.level == 0 => {
                format!("Level-0 of table {t}: {n} files (score {:.2})", self.score)
            }
            (false, _, None) => format!("Level-{} of table {t} over its target (score {:.2})", self.level, self.score),
        }
    }
}

/// The smallest and largest key of `files`, if any.
pub(crate) fn key_range<'a>(files: impl Iterator<Item = &'a Arc<FileMeta>>) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut r: Option<(Vec<u8>, Vec<u8>)> = None;
    for f in files {
        r = Some(match r {
            None => (f.smallest.clone(), f.largest.clone()),
            Some((lo, hi)) => (lo.min(f.smallest.clone()), hi.max(f.largest.clone())),
        });
    }
    r
}

/// Files of `level` overlapping `[lo, hi]` whose group passes `keep`, run by run. Each run is
/// sorted and non-overlapping, so the overlapping files of a run are found by binary search.
pub(crate) fn overlapping(
    t: &TableVersion,
    level: usize,
    lo: &[u8],
    hi: &[u8],
    keep: impl Fn(u32) -> bool,
) -> Vec<Arc<FileMeta>> {
    let mut out = Vec::new();
    for run in t.levels.get(level).map_or(&[][..], |l| &l.runs) {
        let first = run.files.partition_point(|f| f.largest.as_slice() < lo);
        let files = run.files[first..].iter().take_while(|f| f.smallest.as_slice() <= hi);
        out.extend(files.filter(|f| keep(f.cg)).cloned());
    }
    out
}

/// Bytes one version of a group takes, roughly: key, sequence and kind, plus the columns.
fn group_width(info: &TableInfo, group: &[usize]) -> f64 {
    let w = |ty: &ColumnType| ty.fixed_width().unwrap_or(16) as f64;
    let key: f64 = info.key_types.iter().map(w).sum();
    9.0 + key + group.iter().map(|&c| info.value_types.get(c).map_or(0.0, w)).sum::<f64>()
}

/// Bytes of level `level` (≥ 1) that column group `group` may hold: the level's capacity split
/// across its groups in proportion to their width (LASER §4.4).
fn group_share(info: &TableInfo, level: usize, group: &[usize], opts: &PolicyOptions) -> f64 {
    let total: f64 = info.runs.groups(level).iter().map(|g| group_width(info, g)).sum();
    (opts.target(level) as f64 * group_width(info, group) / total.max(1.0)).max(1.0)
}

/// A group's share of a level holds at least this many files, so that compacting its oldest
/// file moves part of the share down instead of emptying the level for that group.
const FILES_PER_SHARE: f64 = 4.0;

/// Output files are never cut smaller than this (unless `target_file_size` is smaller).
const MIN_FILE_SIZE: u64 = 64 << 10;

/// Size at which compaction output of `group` at `level` is cut: `target_file_size`, lowered
/// for narrow groups until their share of the level fits [`FILES_PER_SHARE`] files. Level-0
/// files are never cut (one file per flush).
pub fn output_file_size(
    info: &TableInfo,
    level: usize,
    group: &[usize],
    opts: &PolicyOptions,
    target_file_size: u64,
) -> u64 {
    if level == 0 {
        return u64::MAX;
    }
    let per_file = (group_share(info, level, group, opts) / FILES_PER_SHARE) as u64;
    target_file_size.min(per_file.max(MIN_FILE_SIZE))
}

/// Scores of the column groups of level `level` ≥ 1: `(group id, bytes / share of capacity)`.
pub fn group_scores(t: &TableVersion, level: usize, opts: &PolicyOptions) -> Vec<(u32, f64)> {
    let Some(lvl) = t.levels.get(level) else { return Vec::new() };
    t.info
        .runs
        .groups(level)
        .iter()
        .map(|g| {
            let id = group_id(g);
            let bytes: u64 = lvl.files().filter(|f| f.cg == id).map(|f| f.size).sum();
            (id, bytes as f64 / group_share(&t.info, level, g, opts))
        })
        .collect()
}

/// Level scores of one table: `(level, score)` for every level that may compact down.
pub fn scores(t: &TableVersion, opts: &PolicyOptions) -> Vec<(usize, f64)> {
    let last = opts.num_levels.min(t.levels.len()).saturating_sub(1);
    (0..last)
        .map(|l| {
            let s = if l == 0 {
                t.levels[0].runs.len() as f64 / opts.l0_trigger.max(1) as f64
            } else {
                group_scores(t, l, opts).into_iter().map(|(_, s)| s).fold(0.0, f64::max)
            };
            (l, s)
        })
        .collect()
}

/// Whether a file of group `file_cg` (at any level below `level`) holds columns of group `cg`
/// of `level`. By containment a deeper group lies inside one group above, so its first column
/// decides.
pub(crate) fn inside(t: &TableVersion, level: usize, cg: u32, file_cg: u32) -> bool {
    match t.info.runs.groups(level).iter().find(|g| group_id(g) == cg) {
        Some(g) if g.len() < t.info.value_types.len() => g.contains(&(file_cg as usize)),
        _ => true,
    }
}

/// Forms the task moving `inputs` (files of group `cg` of `level`) into `level + 1`, or `None`
/// if an overlapping file below is busy.
pub fn task_over(
    t: &TableVersion,
    level: usize,
    cg: u32,
    inputs: Vec<Arc<FileMeta>>,
    busy: &HashSet<u64>,
    score: f64,
) -> Option<CompactionTask> {
    let (lo, hi) = key_range(inputs.iter())?;
    let next_inputs = overlapping(t, level + 1, &lo, &hi, |f| inside(t, level, cg, f));
    if next_inputs.iter().any(|f| busy.contains(&f.number)) {
        return None;
    }
    let (lo, hi) = key_range(inputs.iter().chain(next_inputs.iter()))?;
    let bottommost =
        (level + 2..t.levels.len()).all(|l| overlapping(t, l, &lo, &hi, |f| inside(t, level, cg, f)).is_empty());
    let layout = &t.info.runs;
    let group = layout.groups(level).iter().find(|g| group_id(g) == cg);
    let same_group = matches!((layout.children(level, cg).as_slice(), group), ([c], Some(g)) if *c == g.as_slice());
    // A row-group file moves down unchanged only to a level of the same groups (a Level-0 file
    // is never one).
    let same_group = same_group
        && match t.info.row_groups(level + 1) {
            Some(below) => t.info.row_groups(level).is_some_and(|above| above == below),
            None => true,
        };
    let trivial_move = next_inputs.is_empty() && inputs.len() == 1 && same_group;
    Some(CompactionTask {
        table: t.info.id,
        level,
        cg,
        output_level: level + 1,
        inputs,
        next_inputs,
        trivial_move,
        bottommost,
        score,
        to_tier: None,
        relayout: false,
    })
}

/// A level's oldest files, one in `AGE_WINDOW` of a group's files, compete on their overlap below
/// (see the module rules).
const AGE_WINDOW: usize = 4;

/// Bytes of the files below `f` (of group `cg` of `level`) that compacting it would rewrite, per
/// byte of `f`, scaled by 2^16 to compare as an integer.
fn overlap_per_byte(t: &TableVersion, level: usize, cg: u32, f: &FileMeta) -> u128 {
    let below: u64 =
        overlapping(t, level + 1, &f.smallest, &f.largest, |c| inside(t, level, cg, c)).iter().map(|g| g.size).sum();
    (u128::from(below) << 16) / u128::from(f.size.max(1))
}

/// Forms the task for `level` of `t`, or `None` if every candidate touches a busy file.
pub fn task_for_level(
    t: &TableVersion,
    level: usize,
    busy: &HashSet<u64>,
    score: f64,
    opts: &PolicyOptions,
) -> Option<CompactionTask> {
    let lvl = t.levels.get(level)?;
    if level == 0 {
        if lvl.files().any(|f| busy.contains(&f.number)) {
            return None;
        }
        let inputs = level0_settled(t);
        if inputs.is_empty() {
            return None;
        }
        let cg = t.info.runs.groups(0).first().map_or(0, |g| group_id(g));
        return task_over(t, 0, cg, inputs, busy, score);
    }
    let mut groups = group_scores(t, level, opts);
    groups.retain(|&(_, s)| s >= 1.0);
    groups.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    groups.into_iter().find_map(|(cg, _)| {
        let files: Vec<&Arc<FileMeta>> = lvl.files().filter(|f| f.cg == cg).collect();
        let window = files.len().div_ceil(AGE_WINDOW);
        let mut candidates: Vec<&Arc<FileMeta>> = files.into_iter().filter(|f| !busy.contains(&f.number)).collect();
        candidates.sort_by_key(|f| (f.max_seq, f.number));
        let window = window.min(candidates.len());
        candidates[..window].sort_by_cached_key(|f| (overlap_per_byte(t, level, cg, f), f.max_seq, f.number));
        candidates.into_iter().find_map(|f| task_over(t, level, cg, vec![f.clone()], busy, score))
    })
}

/// The Level-0 files older than every file whose marking is deferred (all of them when none
/// is): what may move down. Deferred files, and the newer ones, wait for a staging compaction
/// ([`super::tiering::stage`]), as their versions have not yet marked everything below them.
pub fn level0_settled(t: &TableVersion) -> Vec<Arc<FileMeta>> {
    let l0 = &t.levels[0];
    let oldest_deferred = l0.files().filter(|f| t.deferred.contains(&f.number)).map(|f| f.max_seq).min();
    l0.files().filter(|f| oldest_deferred.is_none_or(|s| f.max_seq < s)).cloned().collect()
}

/// The files that compaction output of `group` (a group of `level`) covering `[lo, hi]` should
/// be cut to match (aligned compaction, Kim et al. §IV), by smallest key, none overlapping
/// another:
/// - the overlapping files of level `level + 1`, of the group there inside `group` that holds
///   the most of their bytes (groups below are cut independently of each other, so the output
///   aligns to one of them, the one whose rewrites cost most);
/// - where level `level + 1` has no file, the files of the next deeper level that has one there,
///   and so on. Output written into such a gap would otherwise be cut by size alone and, once
///   moved down unchanged (a trivial move), straddle the files it lands on.
///
/// Empty when nothing below overlaps.
pub fn alignment_files(t: &TableVersion, level: usize, group: &[usize], lo: &[u8], hi: &[u8]) -> Vec<Arc<FileMeta>> {
    let mut chosen: Vec<Arc<FileMeta>> = Vec::new();
    let mut add = |f: &Arc<FileMeta>| {
        let i = chosen.partition_point(|c| c.largest < f.smallest);
        if chosen.get(i).is_none_or(|c| c.smallest > f.largest) {
            chosen.insert(i, f.clone());
        }
    };
    let cg = group_id(group);
    let mut best: (u64, Vec<Arc<FileMeta>>) = (0, Vec::new());
    for child in t.info.runs.children(level, cg) {
        let id = group_id(child);
        let files = overlapping(t, level + 1, lo, hi, |f| f == id);
        let bytes = files.iter().map(|f| f.size).sum();
        if bytes > best.0 {
            best = (bytes, files);
        }
    }
    best.1.iter().for_each(&mut add);
    for deeper in level + 2..t.levels.len() {
        overlapping(t, deeper, lo, hi, |f| inside(t, level, cg, f)).iter().for_each(&mut add);
    }
    chosen
}

/// Picks the most urgent compaction over all tables, avoiding files in `busy`.
pub fn pick(v: &Version, busy: &HashSet<u64>, opts: &PolicyOptions) -> Option<CompactionTask> {
    let mut all: Vec<(f64, u32, usize)> = Vec::new();
    for t in v.tables.values() {
        for (l, s) in scores(t, opts) {
            if s >= 1.0 {
                all.push((s, t.info.id, l));
            }
        }
    }
    all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    all.into_iter().find_map(|(s, id, l)| task_for_level(v.tables.get(&id)?, l, busy, s, opts))
}

#[cfg(test)]
mod tests {
    //! Data-driven tests: `tests/testdata/compaction_policy/*.txt` hold cases of the form
    //!
    //! ```text
    //! # comment
    //! pick l0_trigger=2 ratio=10 l1=1000 levels=4
    //! table 1                       (optional; switches the table the next levels belong to)
    //! layout L1: (a,b) (c,d)       (optional; the layout of tables created after it; the table
    //!                               has value columns a, b, c, d)
    //! L0 6:a-b:100@50 5:c-e:100@40  (number:smallest-largest:size@max_seq)
    //! L1 1:a-c:500@10 2:a-c:90@10/2 (`/g`: the file stores the group whose first column is g;
    //!                               `~t` after it: the file is on tier t)
    //! busy 1                        (optional: files already being compacted)
    //! tiers 400,none                (optional: two tiers, the fast one with a 400-byte budget)
    //! env defers=1 placement=round-robin slowdown=8 settle=1 evict_after=1:m
    //!                               (optional: the rest of the pick's environment, see `PickEnv`)
    //! deferred 7 8                  (optional: Level-0 files of the table whose marking is deferred)
    //! heat 5=10/2                   (optional: file 5 served 10 reads, 2 probes found nothing)
    //! ----
    //! expected output
    //! ```
    //!
    //! Run with `STRATA_REWRITE=1` to regenerate the expected outputs after a deliberate change.

    use super::*;
    use crate::catalog::{TableInfo, TableOptions};
    use crate::types::{Column, ColumnType, Schema};
    use crate::version::edit::{EditRecord, VersionEdit};
    use std::fmt::Write;

    fn parse_file(spec: &str) -> FileMeta {
        let (num, rest) = spec.split_once(':').expect("number:range:size@seq");
        let (range, rest) = rest.split_once(':').expect("range:size@seq");
        let (lo, hi) = range.split_once('-').expect("lo-hi");
        let (size, rest) = rest.split_once('@').expect("size@seq");
        let (rest, tier) = rest.split_once('~').unwrap_or((rest, "0"));
        let (seq, cg) = rest.split_once('/').unwrap_or((rest, "0"));
        FileMeta {
            number: num.parse().expect("number"),
            size: size.parse().expect("size"),
            entries: 1,
            min_seq: 0,
            max_seq: seq.parse().expect("seq"),
            smallest: lo.as_bytes().to_vec(),
            largest: hi.as_bytes().to_vec(),
            cg: cg.parse().expect("group"),
            tier: tier.parse().expect("tier"),
        }
    }

    fn run_case(input: &[&str]) -> String {
        let mut opts = PolicyOptions { l0_trigger: 4, ratio: 10, l1_max_bytes: 1000, num_levels: 4 };
        let mut version = Version::new(4);
        let mut busy = HashSet::new();
        let mut table = 1u32;
        let cols = ["k", "a", "b", "c", "d"].iter().map(|n| Column::new(*n, ColumnType::Int)).collect();
        let schema = Arc::new(Schema::new(cols, &["k"]).expect("schema"));
        let mut options = TableOptions::default();
        let (mut budgets, mut heat) = (Vec::new(), super::super::tiering::Heat::new());
        let (mut defers, mut placement, mut slowdown, mut settle) =
            (false, crate::tier::TierPlacement::Informed, 8, false);
        let mut evict_after = (0u32, Vec::new());
        for line in input {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("pick") => {
                    for kv in words {
                        let (k, v) = kv.split_once('=').expect("key=value");
                        let v: u64 = v.parse().expect("number");
                        match k {
                            "l0_trigger" => opts.l0_trigger = v as usize,
                            "ratio" => opts.ratio = v,
                            "l1" => opts.l1_max_bytes = v,
                            "levels" => opts.num_levels = v as usize,
                            other => panic!("unknown option {other}"),
                        }
                    }
                    version = Version::new(opts.num_levels);
                }
                Some("table") => table = words.next().and_then(|w| w.parse().ok()).expect("table id"),
                // The per-group policy: tables of one run per group (see `TableOptions::row_groups`).
                Some("layout") => {
                    options =
                        TableOptions::with_layout(line.trim_start().trim_start_matches("layout")).with_row_groups(false)
                }
                Some("busy") => busy.extend(words.map(|w| w.parse::<u64>().expect("file number"))),
                Some("tiers") => {
                    let list = words.next().expect("budgets");
                    budgets = list.split(',').map(|b| b.parse().ok()).collect();
                }
                Some("env") => {
                    for kv in words {
                        match kv.split_once('=').expect("key=value") {
                            ("defers", v) => defers = v == "1",
                            ("settle", v) => settle = v == "1",
                            ("slowdown", v) => slowdown = v.parse().expect("number"),
                            ("placement", "round-robin") => placement = crate::tier::TierPlacement::RoundRobin,
                            ("placement", "informed") => placement = crate::tier::TierPlacement::Informed,
                            ("evict_after", v) => {
                                let (t, k) = v.split_once(':').expect("table:key");
                                evict_after = (t.parse().expect("table"), k.as_bytes().to_vec());
                            }
                            (other, _) => panic!("unknown environment setting {other}"),
                        }
                    }
                }
                Some("deferred") => {
                    let mut edit = VersionEdit::default();
                    for w in words {
                        edit.push(EditRecord::DeferredMarks { table, number: w.parse().expect("file number") });
                    }
                    version = version.apply(&edit);
                }
                Some("heat") => {
                    for w in words {
                        let (n, counts) = w.split_once('=').expect("file=reads/misses");
                        let (r, m) = counts.split_once('/').expect("reads/misses");
                        heat.insert(n.parse().expect("file"), (r.parse().expect("reads"), m.parse().expect("misses")));
                    }
                }
                Some(l) if l.starts_with('L') => {
                    let level: usize = l[1..].parse().expect("level");
                    let mut edit = VersionEdit::default();
                    if !version.tables.contains_key(&table) {
                        let info = TableInfo::new(table, format!("t{table}"), schema.clone(), options.clone()).unwrap();
                        edit.push(EditRecord::CreateTable(info));
                    }
                    for w in words {
                        edit.push(EditRecord::AddFile { table, level, file: parse_file(w) });
                    }
                    version = version.apply(&edit);
                }
                _ => panic!("bad line `{line}`"),
            }
        }
        let mut out = String::new();
        for t in version.tables.values() {
            let s: Vec<String> = scores(t, &opts).iter().map(|(l, s)| format!("L{l}={s:.2}")).collect();
            let _ = writeln!(out, "scores t{}: {}", t.info.id, s.join(" "));
        }
        let env = super::super::pick::PickEnv {
            busy: &busy,
            policy: opts,
            l0_slowdown_trigger: slowdown,
            budgets,
            defers_marking: defers,
            placement,
            fast: crate::vfs::DeviceProfile::ssd(),
            slow: crate::vfs::DeviceProfile::hard_disk(),
            heat: &heat,
            staging_wanted: &HashSet::new(),
            settle,
            evict_after: (evict_after.0, &evict_after.1),
            stale: None,
        };
        match super::super::pick::pick(&version, &env) {
            None => out.push_str("task: none\n"),
            Some(task) => {
                let nums = |v: &[Arc<FileMeta>]| v.iter().map(|f| f.number.to_string()).collect::<Vec<_>>().join(",");
                let _ = writeln!(
                    out,
                    "task: t{} L{}->L{}{} inputs=[{}] next=[{}]{}{}{} score={:.2}",
                    task.table,
                    task.level,
                    task.output_level,
                    if options.layout.is_some() { format!(" cg={}", task.cg) } else { String::new() },
                    nums(&task.inputs),
                    nums(&task.next_inputs),
                    if task.trivial_move { " trivial-move" } else { "" },
                    if task.bottommost { " bottommost" } else { "" },
                    task.to_tier.map(|t| format!(" to_tier={t}")).unwrap_or_default(),
                    task.score
                );
            }
        }
        out
    }

    #[test]
    fn narrow_groups_get_files_small_enough_to_fill_their_share() {
        let opts = PolicyOptions { l0_trigger: 4, ratio: 10, l1_max_bytes: 4 << 20, num_levels: 4 };
        let cols = ["k", "a", "b", "c", "d"].iter().map(|n| Column::new(*n, ColumnType::Int)).collect();
        let schema = Arc::new(Schema::new(cols, &["k"]).expect("schema"));
        let row = TableInfo::new(1, "r".into(), schema.clone(), TableOptions::default()).unwrap();
        let column = TableOptions::with_layout("L1-: column").with_row_groups(false);
        let column = TableInfo::new(2, "c".into(), schema, column).unwrap();
        let size = |info: &TableInfo, level, group: &[usize]| output_file_size(info, level, group, &opts, 2 << 20);
        assert_eq!(size(&row, 0, &[0, 1, 2, 3]), u64::MAX, "Level-0 files are never cut");
        // Row: a quarter of L1 (1 MiB) is below the 2 MiB target; L2 is wide enough.
        assert_eq!(size(&row, 1, &[0, 1, 2, 3]), 1 << 20);
        assert_eq!(size(&row, 2, &[0, 1, 2, 3]), 2 << 20);
        // Four equal groups share L1 equally: 1 MiB each, so 256 KiB files.
        assert_eq!(size(&column, 1, &[2]), 256 << 10);
        assert_eq!(size(&column, 2, &[2]), 2 << 20);
        // Tiny levels stop at the floor; a smaller configured target still wins.
        let tiny = PolicyOptions { l1_max_bytes: 64 << 10, ..opts };
        assert_eq!(output_file_size(&column, 1, &[2], &tiny, 2 << 20), MIN_FILE_SIZE);
        assert_eq!(output_file_size(&column, 1, &[2], &tiny, 8 << 10), 8 << 10);
    }

    #[test]
    fn overlapping_finds_every_file_a_full_scan_finds() {
        use rand::{Rng, SeedableRng};
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let cols = ["k", "a", "b", "c", "d"].iter().map(|n| Column::new(*n, ColumnType::Int)).collect();
        let schema = Arc::new(Schema::new(cols, &["k"]).expect("schema"));
        let info = TableInfo::new(1, "t".into(), schema, TableOptions::default()).unwrap();
        let mut edit = VersionEdit::default();
        edit.push(EditRecord::CreateTable(info));
        // Level 1: two groups' runs over the same keys, each of non-overlapping files with gaps.
        let mut number = 0;
        for cg in [0u32, 2] {
            let mut key = 0u32;
            while key < 900 {
                let lo = key + rng.gen_range(0..20);
                let hi = lo + rng.gen_range(0..40);
                number += 1;
                let file = parse_file(&format!("{number}:{lo:04}-{hi:04}:10@1/{cg}"));
                edit.push(EditRecord::AddFile { table: 1, level: 1, file });
                key = hi + 1;
            }
        }
        let version = Version::new(4).apply(&edit);
        let t = &version.tables[&1];
        for _ in 0..500 {
            let a = format!("{:04}", rng.gen_range(0..1000));
            let b = format!("{:04}", rng.gen_range(0..1000));
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let keep = |cg: u32| cg == 2 || keeps_group_0(&lo);
            let found: Vec<u64> =
                overlapping(t, 1, lo.as_bytes(), hi.as_bytes(), keep).iter().map(|f| f.number).collect();
            let scanned: Vec<u64> = t.levels[1]
                .files()
                .filter(|f| {
                    keep(f.cg) && f.smallest.as_slice() <= hi.as_bytes() && f.largest.as_slice() >= lo.as_bytes()
                })
                .map(|f| f.number)
                .collect();
            assert_eq!(found, scanned, "seed {seed}: [{lo}, {hi}]");
        }
    }

    /// Keeps group 0 for about half the ranges, so the group filter is exercised too.
    fn keeps_group_0(lo: &str) -> bool {
        lo.ends_with(['0', '2', '4', '6', '8'])
    }

    #[test]
    fn alignment_follows_the_next_level_and_deeper_levels_in_its_gaps() {
        let cols = ["k", "a", "b", "c", "d"].iter().map(|n| Column::new(*n, ColumnType::Int)).collect();
        let schema = Arc::new(Schema::new(cols, &["k"]).expect("schema"));
        let info = TableInfo::new(1, "t".into(), schema, TableOptions::default()).unwrap();
        let mut edit = VersionEdit::default();
        edit.push(EditRecord::CreateTable(info));
        let files =
            [(2, "20:b-d:1@1 21:h-j:1@1"), (3, "30:a-c:1@1 31:e-f:1@1 32:i-k:1@1 33:m-n:1@1"), (4, "40:p-q:1@1")];
        for (level, spec) in files {
            for f in spec.split_whitespace() {
                edit.push(EditRecord::AddFile { table: 1, level, file: parse_file(f) });
            }
        }
        let v = Version::new(5).apply(&edit);
        let t = v.tables.get(&1).unwrap();
        let numbers = |lo: &str, hi: &str| -> Vec<u64> {
            alignment_files(t, 1, &[0, 1, 2, 3], lo.as_bytes(), hi.as_bytes()).iter().map(|f| f.number).collect()
        };
        // Level 2's files, and level 3's where level 2 has none (31 and 33; 30 and 32 overlap
        // level-2 files); level 4's file lies outside the range.
        assert_eq!(numbers("a", "n"), vec![20, 31, 21, 33]);
        assert_eq!(numbers("p", "z"), vec![40]);
        assert_eq!(numbers("r", "z"), Vec::<u64>::new());
    }

    #[test]
    fn alignment_picks_the_group_below_holding_most_bytes() {
        let cols = ["k", "a", "b", "c", "d"].iter().map(|n| Column::new(*n, ColumnType::Int)).collect();
        let schema = Arc::new(Schema::new(cols, &["k"]).expect("schema"));
        let options = TableOptions::with_layout("L2-: (a,b) (c,d)").with_row_groups(false);
        let info = TableInfo::new(1, "t".into(), schema, options).unwrap();
        let mut edit = VersionEdit::default();
        edit.push(EditRecord::CreateTable(info));
        for f in ["20:a-m:100@1/0", "22:a-f:80@1/2", "23:g-m:80@1/2"] {
            edit.push(EditRecord::AddFile { table: 1, level: 2, file: parse_file(f) });
        }
        let v = Version::new(4).apply(&edit);
        let t = v.tables.get(&1).unwrap();
        let numbers: Vec<u64> = alignment_files(t, 1, &[0, 1, 2, 3], b"a", b"z").iter().map(|f| f.number).collect();
        assert_eq!(numbers, vec![22, 23], "group (c,d) holds 160 bytes there, (a,b) 100");
    }

    #[test]
    fn data_driven_policy_cases() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/compaction_policy");
        let rewrite = std::env::var("STRATA_REWRITE").is_ok();
        let mut cases = 0;
        let mut entries: Vec<_> =
            std::fs::read_dir(&dir).expect("testdata dir").map(|e| e.expect("entry").path()).collect();
        entries.sort();
        for path in entries {
            let text = std::fs::read_to_string(&path).expect("read testdata");
            let mut rewritten = String::new();
            let mut lines = text.lines().peekable();
            while let Some(line) = lines.next() {
                if line.starts_with('#') || line.trim().is_empty() {
                    rewritten.push_str(line);
                    rewritten.push('\n');
                    continue;
                }
                let mut input = vec![line];
                for l in lines.by_ref() {
                    if l == "----" {
                        break;
                    }
                    input.push(l);
                }
                let mut expected = String::new();
                while let Some(l) = lines.peek() {
                    if l.trim().is_empty() {
                        break;
                    }
                    expected.push_str(l);
                    expected.push('\n');
                    lines.next();
                }
                let got = run_case(&input);
                cases += 1;
                if rewrite {
                    for l in &input {
                        rewritten.push_str(l);
                        rewritten.push('\n');
                    }
                    rewritten.push_str("----\n");
                    rewritten.push_str(&got);
                } else {
                    assert_eq!(got, expected, "{}: case starting `{}`", path.display(), input[0]);
                }
            }
            if rewrite {
                std::fs::write(&path, rewritten).expect("rewrite testdata");
            }
        }
        assert!(cases >= 8, "only {cases} policy cases found");
    }
}
