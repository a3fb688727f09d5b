//! The leveled compaction policy, as a pure function: version + files already being compacted +
//! options in, at most one task out. No IO, no clock, no state, so it is tested with text
//! fixtures (`tests/testdata/compaction_policy`).
//!
//! Rules:
//! - Level-0 scores `files / l0_trigger`; level i ≥ 1 scores `bytes / target(i)` with
//!   `target(1) = l1_max_bytes`, `target(i+1) = target(i) × ratio`. The last level never scores.
//! - The highest score ≥ 1 over all tables and levels wins, if a task can be formed for it
//!   without touching a busy file; otherwise the next best is tried.
//! - A Level-0 task takes every Level-0 file (they overlap, and must move down oldest data
//!   first) plus the overlapping Level-1 files; only one Level-0 task runs per table.
//! - A level-i task takes the file whose newest data is oldest (smallest max sequence), so levels
//!   keep bands of data age, plus the overlapping files of level i+1.
//! - A task with no overlapping files below is a trivial move (the file changes level, no IO).
//! - A task is bottommost when no deeper level holds a file overlapping its key range.

use std::collections::HashSet;
use std::sync::Arc;

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
}

impl CompactionTask {
    /// All input files.
    pub fn all_inputs(&self) -> impl Iterator<Item = &Arc<FileMeta>> {
        self.inputs.iter().chain(self.next_inputs.iter())
    }
}

fn key_range<'a>(files: impl Iterator<Item = &'a Arc<FileMeta>>) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut r: Option<(Vec<u8>, Vec<u8>)> = None;
    for f in files {
        r = Some(match r {
            None => (f.smallest.clone(), f.largest.clone()),
            Some((lo, hi)) => (lo.min(f.smallest.clone()), hi.max(f.largest.clone())),
        });
    }
    r
}

fn overlapping(t: &TableVersion, level: usize, lo: &[u8], hi: &[u8]) -> Vec<Arc<FileMeta>> {
    t.levels
        .get(level)
        .map(|l| l.files().filter(|f| f.overlaps(lo, hi)).cloned().collect())
        .unwrap_or_default()
}

/// Level scores of one table: `(level, score)` for every level that may compact down.
pub fn scores(t: &TableVersion, opts: &PolicyOptions) -> Vec<(usize, f64)> {
    let last = opts.num_levels.min(t.levels.len()).saturating_sub(1);
    (0..last)
        .map(|l| {
            let s = if l == 0 {
                t.levels[0].runs.len() as f64 / opts.l0_trigger.max(1) as f64
            } else {
                t.levels[l].bytes() as f64 / opts.target(l).max(1) as f64
            };
            (l, s)
        })
        .collect()
}

/// Forms the task moving `inputs` (files of `level`) into `level + 1`, or `None` if an
/// overlapping file below is busy.
pub fn task_over(
    t: &TableVersion,
    level: usize,
    inputs: Vec<Arc<FileMeta>>,
    busy: &HashSet<u64>,
    score: f64,
) -> Option<CompactionTask> {
    let (lo, hi) = key_range(inputs.iter())?;
    let next_inputs = overlapping(t, level + 1, &lo, &hi);
    if next_inputs.iter().any(|f| busy.contains(&f.number)) {
        return None;
    }
    let (lo, hi) = key_range(inputs.iter().chain(next_inputs.iter()))?;
    let bottommost = (level + 2..t.levels.len()).all(|l| overlapping(t, l, &lo, &hi).is_empty());
    let trivial_move = next_inputs.is_empty() && inputs.len() == 1;
    Some(CompactionTask {
        table: t.info.id,
        level,
        output_level: level + 1,
        inputs,
        next_inputs,
        trivial_move,
        bottommost,
        score,
    })
}

/// Forms the task for `level` of `t`, or `None` if every candidate touches a busy file.
pub fn task_for_level(t: &TableVersion, level: usize, busy: &HashSet<u64>, score: f64) -> Option<CompactionTask> {
    let lvl = t.levels.get(level)?;
    if level == 0 {
        if lvl.files().any(|f| busy.contains(&f.number)) {
            return None;
        }
        let inputs: Vec<_> = lvl.files().cloned().collect();
        return task_over(t, 0, inputs, busy, score);
    }
    let mut candidates: Vec<&Arc<FileMeta>> = lvl.files().filter(|f| !busy.contains(&f.number)).collect();
    candidates.sort_by_key(|f| (f.max_seq, f.number));
    candidates
        .into_iter()
        .find_map(|f| task_over(t, level, vec![f.clone()], busy, score))
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
    all.into_iter()
        .find_map(|(s, id, l)| task_for_level(v.tables.get(&id)?, l, busy, s))
}
