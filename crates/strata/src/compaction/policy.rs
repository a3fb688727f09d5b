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
    t.levels.get(level).map(|l| l.files().filter(|f| f.overlaps(lo, hi)).cloned().collect()).unwrap_or_default()
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
    candidates.into_iter().find_map(|f| task_over(t, level, vec![f.clone()], busy, score))
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
    all.into_iter().find_map(|(s, id, l)| task_for_level(v.tables.get(&id)?, l, busy, s))
}

#[cfg(test)]
mod tests {
    //! Data-driven tests: `tests/testdata/compaction_policy/*.txt` hold cases of the form
    //!
    //! ```text
    //! # comment
    //! pick l0_trigger=2 ratio=10 l1=1000 levels=4
    //! table 1                       (optional; switches the table the next levels belong to)
    //! L0 6:a-b:100@50 5:c-e:100@40  (number:smallest-largest:size@max_seq)
    //! L1 1:a-c:500@10
    //! busy 1                        (optional: files already being compacted)
    //! ----
    //! expected output
    //! ```
    //!
    //! Run with `STRATA_REWRITE=1` to regenerate the expected outputs after a deliberate change.

    use super::*;
    use crate::db::{TableInfo, TableOptions};
    use crate::types::{Column, ColumnType, Schema};
    use crate::version::edit::{EditRecord, VersionEdit};
    use std::fmt::Write;

    fn parse_file(spec: &str) -> FileMeta {
        let (num, rest) = spec.split_once(':').expect("number:range:size@seq");
        let (range, rest) = rest.split_once(':').expect("range:size@seq");
        let (lo, hi) = range.split_once('-').expect("lo-hi");
        let (size, seq) = rest.split_once('@').expect("size@seq");
        FileMeta {
            number: num.parse().expect("number"),
            size: size.parse().expect("size"),
            entries: 1,
            min_seq: 0,
            max_seq: seq.parse().expect("seq"),
            smallest: lo.as_bytes().to_vec(),
            largest: hi.as_bytes().to_vec(),
            cg: 0,
        }
    }

    fn run_case(input: &[&str]) -> String {
        let mut opts = PolicyOptions { l0_trigger: 4, ratio: 10, l1_max_bytes: 1000, num_levels: 4 };
        let mut version = Version::new(4);
        let mut busy = HashSet::new();
        let mut table = 1u32;
        let schema = Arc::new(Schema::new(vec![Column::new("k", ColumnType::Text)], &["k"]).expect("schema"));
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
                Some("busy") => busy.extend(words.map(|w| w.parse::<u64>().expect("file number"))),
                Some(l) if l.starts_with('L') => {
                    let level: usize = l[1..].parse().expect("level");
                    let mut edit = VersionEdit::default();
                    if !version.tables.contains_key(&table) {
                        let info = TableInfo::new(table, format!("t{table}"), schema.clone(), TableOptions::default());
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
        match pick(&version, &busy, &opts) {
            None => out.push_str("task: none\n"),
            Some(task) => {
                let nums = |v: &[Arc<FileMeta>]| v.iter().map(|f| f.number.to_string()).collect::<Vec<_>>().join(",");
                let _ = writeln!(
                    out,
                    "task: t{} L{}->L{} inputs=[{}] next=[{}]{}{} score={:.2}",
                    task.table,
                    task.level,
                    task.output_level,
                    nums(&task.inputs),
                    nums(&task.next_inputs),
                    if task.trivial_move { " trivial-move" } else { "" },
                    if task.bottommost { " bottommost" } else { "" },
                    task.score
                );
            }
        }
        out
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
