//! Which data lives on which tier (LogStore §V-A, §V-B), as pure functions of the version, the
//! files already being compacted and the access histograms, like [`super::policy`].
//!
//! With two tiers every level but the last lives on the fast tier and the last level on the slow
//! one, except for what these tasks move:
//! - **Eviction** (informed compaction): while the fast tier holds more than its budget, its
//!   coldest file moves to the slow tier: a file above the last level merges into the last level
//!   (when no level between holds an overlapping file), a last-level file is rewritten in place
//!   on the slow tier. Temperature-blind placement walks the key space round-robin instead, as
//!   LevelDB picks compaction inputs; it is the baseline informed compaction is measured against.
//! - **Promotion** (reverse compaction): the hottest slow-tier file is rewritten in place on
//!   the fast tier when the reads it saves pay for the move (eqs. 10-11, see
//!   [`crate::tier::model::reverse_compaction_pays`]) and the fast tier has room for it; without
//!   room, when it is also hotter than the coldest tenth of the fast tier's files, the coldest
//!   fast file is evicted first if it is less than half as hot. A promoted file stays in the
//!   last level, so levels keep their order by age and the slow tier keeps one disjoint level: a
//!   read probes at most one slow-tier file.
//!
//! Heat is a file's histogram count (reads served plus probes that found nothing) per byte.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::policy::{inside, overlapping, CompactionTask, PolicyOptions};
use crate::version::{FileMeta, TableVersion, Version};

/// How many times hotter (per byte) a slow-tier file must be than the fast-tier file it
/// displaces: files of about equal heat would otherwise trade places over and over as their
/// counts drift.
const EXCHANGE_MARGIN: f64 = 2.0;

/// Access counts by file number: (reads served, probes that found nothing).
pub type Heat = HashMap<u64, (u64, u64)>;

/// How eviction chooses among the fast tier's files.
#[derive(Debug, Clone, Copy)]
pub enum Choice<'a> {
    /// The coldest first (informed compaction); ties go to deeper levels, then older files.
    Coldest(&'a Heat),
    /// Round-robin over the key space (temperature-blind): the first file that starts after
    /// this table's key (`(0, b"")`: from the start), wrapping around.
    After(u32, &'a [u8]),
}

fn count(heat: &Heat, f: &FileMeta) -> u64 {
    heat.get(&f.number).map_or(0, |&(reads, misses)| reads + misses)
}

/// The probes of `files` that found nothing.
pub fn empty_probes<'a>(heat: &Heat, files: impl IntoIterator<Item = &'a Arc<FileMeta>>) -> u64 {
    files.into_iter().map(|f| heat.get(&f.number).map_or(0, |&(_, misses)| misses)).sum()
}

fn per_byte(heat: &Heat, f: &FileMeta) -> f64 {
    count(heat, f) as f64 / f.size.max(1) as f64
}

/// The task moving file `f` of `level` to the slow tier `slow`, or `None` when a level between
/// holds an overlapping file of its columns (its older versions would end up above `f`'s) or a
/// file the task needs is busy.
fn eviction_of(
    t: &TableVersion,
    level: usize,
    f: &Arc<FileMeta>,
    last: usize,
    slow: u8,
    busy: &HashSet<u64>,
    score: f64,
) -> Option<CompactionTask> {
    let (lo, hi) = (&f.smallest, &f.largest);
    let mine = |c: u32| inside(t, level, f.cg, c);
    if (level + 1..last).any(|l| !overlapping(t, l, lo, hi, mine).is_empty()) {
        return None;
    }
    let next_inputs = if level == last { Vec::new() } else { overlapping(t, last, lo, hi, mine) };
    if next_inputs.iter().any(|n| busy.contains(&n.number)) {
        return None;
    }
    Some(CompactionTask {
        table: t.info.id,
        level,
        cg: f.cg,
        output_level: last,
        inputs: vec![f.clone()],
        next_inputs,
        trivial_move: false,
        bottommost: true,
        score,
        to_tier: Some(slow),
        relayout: false,
    })
}

/// Eviction (see the module rules): while `fast_bytes` exceeds `budget`, the fast-tier file
/// `choice` names moves to tier `slow`. The task's score is `fast_bytes / budget`.
pub fn evict(
    v: &Version,
    busy: &HashSet<u64>,
    opts: &PolicyOptions,
    (fast_bytes, budget): (u64, u64),
    slow: u8,
    choice: Choice<'_>,
) -> Option<CompactionTask> {
    if fast_bytes <= budget {
        return None;
    }
    let last = opts.num_levels.checked_sub(1)?;
    let mut candidates: Vec<(&Arc<TableVersion>, usize, &Arc<FileMeta>)> = Vec::new();
    for t in v.tables.values() {
        for level in 1..=last.min(t.levels.len().saturating_sub(1)) {
            candidates.extend(
                t.levels[level].files().filter(|f| f.tier == 0 && !busy.contains(&f.number)).map(|f| (t, level, f)),
            );
        }
    }
    match choice {
        Choice::Coldest(heat) => candidates.sort_by(|a, b| {
            per_byte(heat, a.2)
                .total_cmp(&per_byte(heat, b.2))
                .then(b.1.cmp(&a.1))
                .then(a.2.max_seq.cmp(&b.2.max_seq))
                .then(a.2.number.cmp(&b.2.number))
        }),
        Choice::After(table, key) => {
            candidates.sort_by(|a, b| (a.0.info.id, &a.2.smallest, b.1).cmp(&(b.0.info.id, &b.2.smallest, a.1)));
            let wrap = candidates.partition_point(|c| (c.0.info.id, c.2.smallest.as_slice()) <= (table, key));
            candidates.rotate_left(wrap);
        }
    }
    let score = fast_bytes as f64 / budget.max(1) as f64;
    candidates.into_iter().find_map(|(t, level, f)| eviction_of(t, level, f, last, slow, busy, score))
}

/// Promotion (see the module rules): the hottest slow-tier file moves to the fast tier when
/// `pays(bytes, count)` says the reads saved pay for the move and the fast tier (`fast_bytes`)
/// has room for it within `budget`. Without room, it must also be hotter than the coldest tenth
/// of the fast tier's files below Level 0, and the task is then the eviction of the coldest
/// fast-tier file (to tier `slow`), if that is less than half as hot as the candidate: each
/// exchange puts much hotter data on the fast tier, so promotions and evictions settle instead
/// of moving the same data back and forth. The task's score is the candidate's heat over that
/// tenth's (1 when it is zero).
pub fn promote(
    v: &Version,
    busy: &HashSet<u64>,
    opts: &PolicyOptions,
    (fast_bytes, budget): (u64, u64),
    slow: u8,
    heat: &Heat,
    pays: &dyn Fn(u64, u64) -> bool,
) -> Option<CompactionTask> {
    let mut fast: Vec<f64> = Vec::new();
    let mut candidates: Vec<(f64, &Arc<TableVersion>, usize, &Arc<FileMeta>)> = Vec::new();
    for t in v.tables.values() {
        for (level, l) in t.levels.iter().enumerate().skip(1) {
            for f in l.files() {
                match f.tier {
                    0 => fast.push(per_byte(heat, f)),
                    _ if !busy.contains(&f.number) => candidates.push((per_byte(heat, f), t, level, f)),
                    _ => {}
                }
            }
        }
    }
    fast.sort_by(f64::total_cmp);
    let coldest_tenth = fast.get(fast.len() / 10).copied().unwrap_or(0.0);
    let (hot, t, level, f) =
        candidates.into_iter().max_by(|a, b| a.0.total_cmp(&b.0).then(b.3.number.cmp(&a.3.number)))?;
    if !pays(f.size, count(heat, f)) {
        return None;
    }
    let score = if coldest_tenth > 0.0 { hot / coldest_tenth } else { 1.0 };
    if fast_bytes.saturating_add(f.size) > budget {
        if hot <= coldest_tenth {
            return None;
        }
        let room = evict(v, busy, opts, (u64::MAX, 0), slow, Choice::Coldest(heat))?;
        let colder = room.inputs.iter().all(|c| per_byte(heat, c) * EXCHANGE_MARGIN < hot);
        return colder.then_some(CompactionTask { score, ..room });
    }
    Some(CompactionTask::in_place(t, level, f, (0, score, false)))
}

/// The Level-0 files of `t` a staging compaction takes: from its oldest file whose marking is
/// deferred to its newest (files of consecutive age, so the output's versions are older than
/// every file left above it), newest first; empty when none is deferred.
pub fn staging_span(t: &TableVersion) -> Vec<Arc<FileMeta>> {
    let l0 = &t.levels[0];
    let deferred: Vec<u64> = l0.files().filter(|f| t.deferred.contains(&f.number)).map(|f| f.max_seq).collect();
    let (Some(&oldest), Some(&newest)) = (deferred.iter().min(), deferred.iter().max()) else {
        return Vec::new();
    };
    l0.files().filter(|f| (oldest..=newest).contains(&f.max_seq)).cloned().collect()
}

/// Staging compaction (LogStore §V-C, §V-D; see the module rules): the [`staging_span`] of a
/// table merges into one Level-0 file on the fast tier, which marks what the span's versions
/// supersede everywhere below (the deferred flushes left the slow tier unmarked), drops partial
/// rows over no row, and makes the span one run again. Due when the span holds `l0_trigger`
/// files (score: files over the trigger), when Level-0 holds that many and none is older than
/// the span (no Level-0 task can start before it; score: Level-0 files over the trigger),
/// when the probes of its files that found nothing
/// (`misses`) pay for merging them (`pays(bytes, files, misses)`), or whenever a span exists in
/// a table `settle` names (reads that need complete marks wait, or the caller asked the tree to
/// settle). Never with a busy Level-0 file: one Level-0 task runs per table.
pub fn stage(
    v: &Version,
    busy: &HashSet<u64>,
    opts: &PolicyOptions,
    heat: &Heat,
    pays: &dyn Fn(u64, usize, u64) -> bool,
    settle: &dyn Fn(u32) -> bool,
) -> Option<CompactionTask> {
    let mut best: Option<CompactionTask> = None;
    for t in v.tables.values() {
        let span = staging_span(t);
        if span.is_empty() || t.levels[0].files().any(|f| busy.contains(&f.number)) {
            continue;
        }
        let trigger = opts.l0_trigger.max(1) as f64;
        // With no file older than the span, Level-0 cannot move down until it is staged.
        let runs = t.levels[0].runs.len();
        let blocked = runs >= opts.l0_trigger && super::policy::level0_settled(t).is_empty();
        let score = if blocked { runs as f64 / trigger } else { span.len() as f64 / trigger };
        let bytes = span.iter().map(|f| f.size).sum();
        let misses = empty_probes(heat, &span);
        if score < 1.0 && !settle(t.info.id) && !pays(bytes, span.len(), misses) {
            continue;
        }
        if best.as_ref().is_some_and(|b| b.score >= score) {
            continue;
        }
        best = stage_task(t, span, score).or(best);
    }
    best
}

/// The staging compaction of `span` (see [`staging_span`]) of table `t`, if it is not empty.
pub fn stage_task(t: &TableVersion, span: Vec<Arc<FileMeta>>, score: f64) -> Option<CompactionTask> {
    if span.is_empty() {
        return None;
    }
    Some(CompactionTask {
        table: t.info.id,
        level: 0,
        cg: t.info.runs.groups(0).first().map_or(0, |g| crate::column_group::group_id(g)),
        output_level: 0,
        inputs: span,
        next_inputs: Vec::new(),
        trivial_move: false,
        // Tombstones stay: older files lie below.
        bottommost: false,
        score,
        to_tier: Some(0),
        relayout: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{TableInfo, TableOptions};
    use crate::compaction::policy;
    use crate::types::{Column, ColumnType, Schema};
    use crate::version::edit::{EditRecord, VersionEdit};

    const OPTS: PolicyOptions = PolicyOptions { l0_trigger: 4, ratio: 10, l1_max_bytes: 1000, num_levels: 4 };

    /// A version of one table from `(level, number, smallest-largest, size, max_seq, tier)`.
    fn version(files: &[(usize, u64, &str, u64, u64, u8)]) -> Version {
        let cols = ["k", "a"].iter().map(|n| Column::new(*n, ColumnType::Int)).collect();
        let schema = Arc::new(Schema::new(cols, &["k"]).expect("schema"));
        let info = TableInfo::new(1, "t".into(), schema, TableOptions::default()).expect("table");
        let mut edit = VersionEdit::default();
        edit.push(EditRecord::CreateTable(info));
        for &(level, number, range, size, max_seq, tier) in files {
            let (lo, hi) = range.split_once('-').expect("lo-hi");
            let file = FileMeta {
                number,
                size,
                entries: 1,
                min_seq: 0,
                max_seq,
                smallest: lo.as_bytes().to_vec(),
                largest: hi.as_bytes().to_vec(),
                cg: 0,
                tier,
            };
            edit.push(EditRecord::AddFile { table: 1, level, file });
        }
        Version::new(4).apply(&edit)
    }

    fn nums(v: &[Arc<FileMeta>]) -> Vec<u64> {
        v.iter().map(|f| f.number).collect()
    }

    /// Informed compaction takes the coldest fast-tier file whose range has nothing between
    /// its level and the last, straight into the last level, only while the fast tier is over
    /// its budget, and never with a busy file.
    #[test]
    fn eviction_moves_the_coldest_clear_range_to_the_last_level() {
        let v = version(&[
            (1, 1, "a-c", 100, 9, 0),
            (1, 2, "d-f", 100, 8, 0),
            (2, 3, "a-b", 100, 5, 0),
            (3, 4, "a-z", 900, 1, 1),
        ]);
        // File 1 is the coldest but file 3 lies under it; file 3 (nearly as cold) goes first.
        let heat: Heat = [(2, (40, 10)), (3, (1, 0)), (4, (0, 0))].into_iter().collect();
        let none = HashSet::new();
        let t = evict(&v, &none, &OPTS, (300, 200), 1, Choice::Coldest(&heat)).expect("a task over budget");
        assert_eq!((t.level, nums(&t.inputs), t.output_level, nums(&t.next_inputs)), (2, vec![3], 3, vec![4]));
        assert!(t.bottommost && !t.trivial_move && (t.score - 1.5).abs() < 1e-9, "{t:?}");
        assert_eq!(t.to_tier, Some(1));
        // Within budget: nothing to evict.
        assert_eq!(evict(&v, &none, &OPTS, (200, 200), 1, Choice::Coldest(&heat)), None);
        // The last level's file busy: every candidate needs it.
        assert_eq!(evict(&v, &[4].into_iter().collect(), &OPTS, (300, 200), 1, Choice::Coldest(&heat)), None);
        // File 3 busy: file 1 is still blocked by it, so the hot file 2 is the one left.
        let t = evict(&v, &[3].into_iter().collect(), &OPTS, (300, 200), 1, Choice::Coldest(&heat)).expect("file 2");
        assert_eq!(nums(&t.inputs), vec![2]);
    }

    /// A last-level file on the fast tier (one promoted earlier) is evicted in place: a task
    /// within the last level, no other input, output on the slow tier.
    #[test]
    fn a_cold_last_level_file_on_the_fast_tier_is_evicted_in_place() {
        let v = version(&[(1, 1, "a-c", 100, 9, 0), (3, 4, "a-m", 500, 1, 0), (3, 5, "n-z", 500, 1, 1)]);
        let heat: Heat = [(1, (50, 0)), (4, (10, 0))].into_iter().collect();
        let t = evict(&v, &HashSet::new(), &OPTS, (600, 500), 1, Choice::Coldest(&heat)).expect("a task");
        assert_eq!((t.level, nums(&t.inputs), t.output_level, t.next_inputs.len()), (3, vec![4], 3, 0));
        assert_eq!(t.to_tier, Some(1));
    }

    /// Temperature-blind eviction walks the key space from the cursor, wrapping around, and
    /// ignores the histograms.
    #[test]
    fn round_robin_eviction_walks_the_key_space() {
        let v = version(&[
            (2, 1, "a-c", 100, 9, 0),
            (2, 2, "d-f", 100, 8, 0),
            (2, 3, "g-i", 100, 7, 0),
            (3, 4, "a-z", 900, 1, 1),
        ]);
        let pick = |cursor: &[u8]| {
            let t = evict(&v, &HashSet::new(), &OPTS, (300, 200), 1, Choice::After(1, cursor)).expect("a task");
            nums(&t.inputs)
        };
        assert_eq!(pick(b""), vec![1]);
        assert_eq!(pick(b"c"), vec![2]);
        assert_eq!(pick(b"f"), vec![3]);
        assert_eq!(pick(b"i"), vec![1]);
    }

    /// Reverse compaction promotes the hottest slow file when it beats the coldest tenth of the
    /// fast tier and the cost model agrees; without room on the fast tier it first evicts the
    /// coldest fast file, if that is colder.
    #[test]
    fn promotion_takes_the_hottest_slow_file_when_it_pays() {
        let v = version(&[
            (1, 1, "a-c", 100, 9, 0),
            (2, 2, "d-f", 100, 8, 0),
            (3, 4, "a-m", 100, 1, 1),
            (3, 5, "n-z", 100, 1, 1),
        ]);
        let heat: Heat = [(1, (5, 0)), (2, (20, 0)), (4, (8, 2)), (5, (30, 0))].into_iter().collect();
        let always = |_: u64, _: u64| true;
        let up = |busy: &[u64], fast: u64, heat: &Heat, pays: &dyn Fn(u64, u64) -> bool| {
            promote(&v, &busy.iter().copied().collect(), &OPTS, (fast, 400), 1, heat, pays)
        };
        let t = up(&[], 200, &heat, &always).expect("file 5");
        assert_eq!((t.level, nums(&t.inputs), t.output_level, t.next_inputs.len()), (3, vec![5], 3, 0));
        assert_eq!(t.to_tier, Some(0));
        assert!((t.score - 6.0).abs() < 1e-9, "30 reads against the coldest fast file's 5: {t:?}");
        // Busy: the next hottest, file 4 (10 per 100 bytes), still beats file 1's 5.
        assert_eq!(nums(&up(&[5], 200, &heat, &always).expect("file 4").inputs), vec![4]);
        // No room: the coldest fast file, file 1, makes room first (it has nothing below it but
        // file 4 in the last level).
        let t = up(&[], 350, &heat, &always).expect("room");
        assert_eq!((nums(&t.inputs), t.output_level, nums(&t.next_inputs), t.to_tier), (vec![1], 3, vec![4], Some(1)));
        // The cost model says no: the count is what it weighs.
        let counted = |bytes: u64, reads: u64| bytes == 100 && reads >= 31;
        assert_eq!(up(&[], 200, &heat, &counted), None);
        // No slow file hotter than the fast tier's coldest: it moves only into room.
        let cool: Heat = [(1, (50, 0)), (2, (50, 0)), (4, (8, 0)), (5, (30, 0))].into_iter().collect();
        assert_eq!(nums(&up(&[], 200, &cool, &always).expect("room").inputs), vec![5]);
        assert_eq!(up(&[], 350, &cool, &always), None);
        // Hotter than the coldest fast file, but not twice as hot: no exchange.
        let close: Heat = [(1, (20, 0)), (2, (50, 0)), (4, (8, 0)), (5, (30, 0))].into_iter().collect();
        assert_eq!(up(&[], 350, &close, &always), None);
    }

    /// `version` with the Level-0 files `numbers` marked as deferred.
    fn with_deferred(v: Version, numbers: &[u64]) -> Version {
        let mut edit = VersionEdit::default();
        for &number in numbers {
            edit.push(EditRecord::DeferredMarks { table: 1, number });
        }
        v.apply(&edit)
    }

    /// Staging takes the Level-0 files from the oldest deferred one to the newest (a settled
    /// file between them too, so the output's age stays in one piece), when the span reaches the
    /// trigger, when its empty probes pay, or when asked to settle; never with a busy Level-0
    /// file. The size-based Level-0 task takes only the files older than the span.
    #[test]
    fn staging_takes_the_deferred_span_of_level_0() {
        // Level-0 files 9 (newest) down to 5, each over the whole key space.
        let level0: Vec<_> = (5..=9).rev().map(|n| (0, n, "a-z", 100, n * 10, 0)).collect();
        let v = version(&[level0.as_slice(), &[(3, 4, "a-z", 900, 1, 1)]].concat());
        let none = HashSet::new();
        let heat = Heat::new();
        let never = |_: u64, _: usize, _: u64| false;
        let no = |_: u32| false;
        // Nothing deferred: no staging, and the Level-0 task takes every file.
        assert_eq!(stage(&v, &none, &OPTS, &heat, &never, &|_| true), None);
        let t = &v.tables[&1];
        assert_eq!(nums(&policy::level0_settled(t)), vec![9, 8, 7, 6, 5]);
        // Deferred 8 and 6 (7 between them was flushed without deferral).
        let d = with_deferred(v, &[8, 6]);
        let t = &d.tables[&1];
        assert_eq!(nums(&staging_span(t)), vec![8, 7, 6]);
        assert_eq!(nums(&policy::level0_settled(t)), vec![5]);
        // Three files, the trigger is 4: not due unless reads pay or the tree settles.
        assert_eq!(stage(&d, &none, &OPTS, &heat, &never, &no), None);
        let task = stage(&d, &none, &OPTS, &heat, &never, &|_| true).expect("settling stages");
        assert_eq!((task.level, task.output_level, nums(&task.inputs), task.to_tier), (0, 0, vec![8, 7, 6], Some(0)));
        assert!(!task.bottommost && !task.trivial_move && task.next_inputs.is_empty());
        let misses: Heat = [(8, (0, 30)), (6, (1, 20))].into_iter().collect();
        let pays = |bytes: u64, files: usize, misses: u64| (bytes, files, misses) == (300, 3, 50);
        assert!(stage(&d, &none, &OPTS, &misses, &pays, &no).is_some(), "empty probes that pay stage the span");
        // Four files in the span: due.
        let d = with_deferred(d, &[9]);
        let task = stage(&d, &none, &OPTS, &heat, &never, &no).expect("a full span");
        assert_eq!(nums(&task.inputs), vec![9, 8, 7, 6]);
        assert!((task.score - 1.0).abs() < 1e-9, "{task:?}");
        // A busy Level-0 file (the Level-0 task on file 5): none.
        assert_eq!(stage(&d, &[5].into_iter().collect(), &OPTS, &heat, &never, &|_| true), None);
        // The oldest file deferred alone, four newer ones flushed without deferral: no Level-0
        // task can start, so staging its one-file span is due.
        let d = with_deferred(version(&level0), &[5]);
        assert!(policy::level0_settled(&d.tables[&1]).is_empty());
        let task = stage(&d, &none, &OPTS, &heat, &never, &no).expect("Level-0 is blocked");
        assert_eq!(nums(&task.inputs), vec![5]);
        assert!((task.score - 1.25).abs() < 1e-9, "{task:?}");
    }
}
