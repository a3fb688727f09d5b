//! Carrying out a compaction outside the database: [`run`] merges a [`CompactionTask`]'s inputs
//! into new files from a [`Context`] value (the file cache, the file system, a file-number
//! allocator, the options) and the snapshots it is given, and [`edit`] turns the finished job
//! into the version edit that installs it. The database picks tasks, captures the snapshots,
//! installs the edit with the job's marks and keeps the counters; nothing here locks or reads
//! its state.
//!
//! [`write_files`] is the merge both a compaction and a flush end in.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use super::exec::{write_merged, Cutter, Keep, OutputSpec};
use super::policy::{self, CompactionTask, PolicyOptions};
use super::supersede::{Made, Marker};
use crate::catalog::TableInfo;
use crate::column_group::group_id;
use crate::error::{Error, Result};
use crate::iter::merge::{MergeIter, RunSource, Source};
use crate::mvcc::chain::Stripes;
use crate::sst::builder::SstOptions;
use crate::sst::table_cache::TableCache;
use crate::version::edit::{EditRecord, VersionEdit};
use crate::version::{FileMeta, TableVersion};
use crate::vfs::Fs;

/// What a job reads, writes and obeys besides the task and its table.
pub(crate) struct Context<'a> {
    /// Opens the inputs; receives the outputs' tiers and Level-0 key sets.
    pub tables: &'a Arc<TableCache>,
    pub fs: &'a dyn Fs,
    /// Hands out a fresh file number and protects it from obsolete-file cleanup.
    pub alloc: &'a dyn Fn() -> u64,
    pub sst: SstOptions,
    pub policy: PolicyOptions,
    /// See [`Options::target_file_size`](crate::Options::target_file_size).
    pub target_file_size: u64,
    /// See [`Options::alignment_variance`](crate::Options::alignment_variance).
    pub alignment_variance: f64,
}

/// An output file and the value columns of its group.
pub(crate) type Placed = (Arc<FileMeta>, Vec<usize>);

/// A job's result, to install.
pub(crate) struct Finished {
    /// The output files, synced, on the job's tier.
    pub files: Vec<FileMeta>,
    /// The supersede marks the job made.
    pub made: Made,
    /// A staging compaction's (output Level-0) keys that have versions below it, ascending.
    pub older: Option<Vec<Vec<u8>>>,
}

/// Merges `task`'s inputs, files of `table`, into files of its output level on `tier`, keeping
/// the versions `stripes` tells apart. Files of the level below the output level that the
/// output's key range overlaps set where output files are cut (aligned compaction).
pub(crate) fn run(
    ctx: &Context<'_>,
    task: &CompactionTask,
    table: &Arc<TableVersion>,
    tier: u8,
    stripes: Stripes<'_>,
) -> Result<Finished> {
    let info = &table.info;
    let run = |files: Vec<Arc<FileMeta>>| -> Box<dyn Source> {
        Box::new(RunSource::new(files, ctx.tables.clone(), &[], None, info.value_types.clone(), None, false).in_place())
    };
    let mut sources: Vec<Box<dyn Source>> = Vec::new();
    if task.level == 0 {
        for f in &task.inputs {
            sources.push(run(vec![f.clone()]));
        }
    } else {
        sources.push(run(task.inputs.clone()));
    }
    // The files below come from the groups inside the input group: one run each.
    let groups: Vec<Vec<usize>> =
        info.runs.descendants(task.level, task.cg, task.output_level).into_iter().map(<[usize]>::to_vec).collect();
    if let Some(f) = task.next_inputs.iter().find(|f| !groups.iter().any(|g| group_id(g) == f.cg)) {
        return Err(Error::corruption(
            ctx.tables.path(f.number),
            0,
            format!("level {} holds a file of a column group the layout does not have", task.output_level),
        ));
    }
    for g in &groups {
        let id = group_id(g);
        let files: Vec<Arc<FileMeta>> = task.next_inputs.iter().filter(|f| f.cg == id).cloned().collect();
        if !files.is_empty() {
            sources.push(run(files));
        }
    }
    // Aligned compaction: each output group's files are cut to match the files below it (a
    // staging compaction's one Level-0 file is not cut).
    let staging = task.output_level == 0;
    let range = policy::key_range(task.all_inputs());
    let groups = groups
        .into_iter()
        .map(|g| {
            let below = match &range {
                Some((lo, hi)) if info.options.aligned_compaction && !staging => {
                    policy::alignment_files(table, task.output_level, &g, lo, hi)
                }
                _ => Vec::new(),
            };
            (g, below)
        })
        .collect();
    let inputs: HashSet<u64> = task.all_inputs().map(|f| f.number).collect();
    let mut marker = if staging {
        Marker::staging(ctx.tables, table, &inputs)
    } else {
        Marker::compaction(ctx.tables, table, &inputs)
    };
    let keep = Keep { stripes, bottommost: task.bottommost, folded: false };
    let files = write_files(ctx, info, (task.output_level, tier), sources, groups, keep, &mut marker)?;
    let older = staging.then(|| std::mem::take(&mut marker.older_keys));
    Ok(Finished { files, made: marker.made, older })
}

/// Merges `sources` into files of `level` on `tier`, one run per group of `groups`, each given
/// with the files below `level` its output aligns to (see [`policy::alignment_files`]; empty:
/// cut by size). Level-0 outputs leave their key sets in the file cache.
pub(crate) fn write_files(
    ctx: &Context<'_>,
    info: &TableInfo,
    (level, tier): (usize, u8),
    sources: Vec<Box<dyn Source>>,
    groups: Vec<(Vec<usize>, Vec<Arc<FileMeta>>)>,
    keep: Keep<'_>,
    marker: &mut Marker<'_>,
) -> Result<Vec<FileMeta>> {
    let groups = groups
        .into_iter()
        .map(|(g, below)| {
            let size = policy::output_file_size(info, level, &g, &ctx.policy, ctx.target_file_size);
            let cutter = if below.is_empty() {
                Cutter::by_size(size)
            } else {
                Cutter::aligned(size, ctx.alignment_variance, below)
            };
            (g, cutter)
        })
        .collect();
    let path_of = |n: u64| -> PathBuf { ctx.tables.path(n) };
    let alloc = || {
        let n = (ctx.alloc)();
        ctx.tables.place(n, tier);
        n
    };
    let keep_hashes = |number: u64, hashes: Vec<u64>| ctx.tables.set_key_set(number, hashes);
    let spec = OutputSpec {
        fs: ctx.fs,
        path_of: &path_of,
        alloc: &alloc,
        table: info,
        level,
        groups,
        row_groups: info.row_groups(level),
        sst: ctx.sst,
        // Flushes probe every Level-0 file for each key they write.
        key_hashes: (level == 0).then_some(&keep_hashes as &dyn Fn(u64, Vec<u64>)),
    };
    let mut files = write_merged(MergeIter::new(sources), keep, &spec, marker)?;
    for f in &mut files {
        f.tier = tier;
    }
    Ok(files)
}

/// The tier a task writes its output to, with `tiers` tiers and `num_levels` levels: the task's
/// own for a tier move, else the output level's (see [`crate::tier::output_tier`]), except that
/// output into the last level stays on the fast tier when most of what it rewrites there is on
/// the fast tier (a promoted hot range stays where reverse compaction put it).
pub(crate) fn output_tier(task: &CompactionTask, tiers: usize, num_levels: usize) -> u8 {
    if let Some(t) = task.to_tier {
        return t;
    }
    let tier = crate::tier::output_tier(tiers, task.output_level, num_levels);
    let bytes_on = |fast: bool| task.next_inputs.iter().filter(|f| (f.tier == 0) == fast).map(|f| f.size).sum::<u64>();
    if tier != 0 && bytes_on(true) > bytes_on(false) {
        0
    } else {
        tier
    }
}

/// Whether `task` is carried out by moving its inputs to the output level unchanged: the policy
/// found nothing below to merge with, and no input changes tier.
pub(crate) fn moves(task: &CompactionTask, tier: u8) -> bool {
    task.trivial_move && task.inputs.iter().all(|f| f.tier == tier)
}

/// The version edit that installs a job of `task` with output `files` (for a move, see
/// [`moves`], the inputs themselves): its inputs leave their levels and the outputs join the
/// output level. The job's marks are added by the installer, which knows what else changed
/// meanwhile.
pub(crate) fn edit(task: &CompactionTask, files: Vec<FileMeta>) -> VersionEdit {
    let mut edit = VersionEdit::default();
    let table = task.table;
    for f in &task.inputs {
        edit.push(EditRecord::DeleteFile { table, level: task.level, number: f.number });
    }
    for f in &task.next_inputs {
        edit.push(EditRecord::DeleteFile { table, level: task.output_level, number: f.number });
    }
    for file in files {
        edit.push(EditRecord::AddFile { table, level: task.output_level, file });
    }
    edit
}

/// Each output file with the value columns of its group at `level` (none if the layout has no
/// such group: a row-group file, which holds every column).
pub(crate) fn placed(info: &TableInfo, level: usize, files: &[FileMeta]) -> Vec<Placed> {
    files
        .iter()
        .map(|f| {
            let cols = info.runs.groups(level).iter().find(|g| group_id(g) == f.cg).cloned();
            (Arc::new(f.clone()), cols.unwrap_or_default())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(number: u64, tier: u8, size: u64) -> Arc<FileMeta> {
        Arc::new(FileMeta {
            number,
            size,
            entries: 1,
            min_seq: 0,
            max_seq: 0,
            smallest: b"a".to_vec(),
            largest: b"z".to_vec(),
            cg: 0,
            tier,
        })
    }

    fn task(inputs: Vec<Arc<FileMeta>>, next_inputs: Vec<Arc<FileMeta>>) -> CompactionTask {
        CompactionTask {
            table: 7,
            level: 1,
            cg: 0,
            output_level: 2,
            inputs,
            next_inputs,
            trivial_move: false,
            bottommost: false,
            score: 1.0,
            to_tier: None,
            relayout: false,
        }
    }

    fn records(edit: &VersionEdit) -> Vec<String> {
        edit.records
            .iter()
            .map(|r| match r {
                EditRecord::DeleteFile { table, level, number } => format!("del {table}/L{level}/{number}"),
                EditRecord::AddFile { table, level, file } => format!("add {table}/L{level}/{}", file.number),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn the_edit_replaces_both_levels_inputs_with_the_outputs() {
        let t = task(vec![file(1, 0, 10), file(2, 0, 10)], vec![file(3, 0, 10)]);
        let edit = edit(&t, vec![(*file(8, 0, 10)).clone(), (*file(9, 0, 10)).clone()]);
        assert_eq!(records(&edit), ["del 7/L1/1", "del 7/L1/2", "del 7/L2/3", "add 7/L2/8", "add 7/L2/9"]);
    }

    #[test]
    fn a_move_is_the_inputs_added_one_level_down() {
        let mut t = task(vec![file(4, 0, 10)], Vec::new());
        t.trivial_move = true;
        assert!(moves(&t, 0));
        // Onto another tier the file is rewritten, never moved.
        assert!(!moves(&t, 1));
        let moved = t.inputs.iter().map(|f| (**f).clone()).collect();
        assert_eq!(records(&edit(&t, moved)), ["del 7/L1/4", "add 7/L2/4"]);
    }

    #[test]
    fn output_into_the_last_level_stays_where_most_of_its_bytes_are() {
        // Two tiers, three levels: Level 2 is the slow tier's.
        let mut t = task(Vec::new(), vec![file(1, 1, 10), file(2, 0, 30)]);
        assert_eq!(output_tier(&t, 2, 3), 0);
        t.next_inputs = vec![file(1, 1, 30), file(2, 0, 10)];
        assert_eq!(output_tier(&t, 2, 3), 1);
        t.to_tier = Some(0);
        assert_eq!(output_tier(&t, 2, 3), 0);
        // One tier: everything is on it.
        t.to_tier = None;
        assert_eq!(output_tier(&t, 1, 3), 0);
    }
}
