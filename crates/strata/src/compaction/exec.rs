//! Executing a merge: versions from a [`MergeIter`] are grouped by key, collapsed against the live
//! snapshots ([`collapse`]) and written into new SSTs cut at a target size. Used by both flush
//! (memtable → Level-0) and compaction (level i → i+1). Runs on a background thread; touches no
//! shared state except through the file-number allocator it is given.
//!
//! Layout change (LASER §4.4): the output is one run per output column group. Each key's versions
//! are projected onto every output group — a whole row or a wider group's version covers it, a
//! partial row counts only if it carries one of the group's columns — and each projection is
//! collapsed on its own, so every column keeps the versions its chain needs.

use std::path::PathBuf;

use crate::column_group::group_id;
use crate::db::workload::{At, Op};
use crate::db::TableInfo;
use crate::error::{Error, Result};
use crate::iter::merge::MergeIter;
use crate::mvcc::chain::collapse;
use crate::mvcc::{Entry, Kind};
use crate::sst::builder::{SstBuilder, SstOptions};
use crate::types::row::carries;
use crate::version::FileMeta;
use crate::vfs::Fs;

/// Where and how output files are written.
pub(crate) struct OutputSpec<'a> {
    pub fs: &'a dyn Fs,
    pub path_of: &'a dyn Fn(u64) -> PathBuf,
    /// Hands out a fresh file number and protects it from obsolete-file cleanup.
    pub alloc: &'a dyn Fn() -> u64,
    pub table: &'a TableInfo,
    /// The level the files go to.
    pub level: usize,
    /// The output column groups (value-column indices, ascending), each with the size at which
    /// its files are cut (at a key boundary); they partition the columns the inputs cover.
    pub groups: Vec<(Vec<usize>, u64)>,
    pub sst: SstOptions,
}

/// The files of one output group.
struct Outputs<'a> {
    spec: &'a OutputSpec<'a>,
    group: &'a [usize],
    /// Cut a new file once this many bytes are written.
    target_file_size: u64,
    /// The group is every value column: every version belongs to it unchanged.
    whole_row: bool,
    current: Option<(u64, SstBuilder)>,
    done: Vec<FileMeta>,
}

impl Outputs<'_> {
    /// Whether version `e` says anything about this group's columns.
    fn covers(&self, e: &Entry) -> bool {
        if self.whole_row {
            return true;
        }
        let in_cover = match &e.cover {
            None => true,
            // Containment: an input group either contains the output group or misses it.
            Some(cols) => self.group.first().is_none_or(|c| cols.contains(c)),
        };
        let nvals = self.spec.table.value_types.len();
        in_cover && (e.kind != Kind::Update || self.group.iter().any(|&c| carries(&e.row, nvals, c)))
    }

    fn add(&mut self, e: &Entry) -> Result<()> {
        if self.current.is_none() {
            let number = (self.spec.alloc)();
            let path = (self.spec.path_of)(number);
            let file = self.spec.fs.create(&path)?;
            let info = self.spec.table;
            let b = SstBuilder::new(
                file,
                path,
                self.spec.sst,
                info.id,
                group_id(self.group),
                self.group.to_vec(),
                info.value_types.clone(),
            );
            self.current = Some((number, b));
        }
        if let Some((_, b)) = &mut self.current {
            b.add(e)?;
        }
        if e.kind == Kind::Update {
            let nvals = self.spec.table.value_types.len();
            let cols = self.group.iter().copied().filter(|&c| carries(&e.row, nvals, c));
            self.spec.table.workload.record(At::Level(self.spec.level), Op::Update, cols);
        }
        Ok(())
    }

    /// Called between keys: closes the file if it reached the target size.
    fn maybe_cut(&mut self) -> Result<()> {
        if self.current.as_ref().is_some_and(|(_, b)| b.estimated_size() >= self.target_file_size) {
            self.finish_current()?;
        }
        Ok(())
    }

    fn finish_current(&mut self) -> Result<()> {
        if let Some((number, b)) = self.current.take() {
            if b.is_empty() {
                let path = b.path().clone();
                drop(b);
                self.spec.fs.remove(&path)?;
                return Ok(());
            }
            self.done.push(b.finish(number)?);
        }
        Ok(())
    }
}

/// Drains `iter` into new files, one run per output group. `snapshots` ascending; see
/// [`collapse`] for `bottommost`. Output files are synced; the caller syncs the directory and
/// installs them.
pub(crate) fn write_merged(
    mut iter: MergeIter,
    snapshots: &[u64],
    bottommost: bool,
    spec: &OutputSpec<'_>,
) -> Result<Vec<FileMeta>> {
    let nvals = spec.table.value_types.len();
    let mut outs: Vec<Outputs<'_>> = spec
        .groups
        .iter()
        .map(|(g, size)| Outputs {
            spec,
            group: g,
            target_file_size: *size,
            whole_row: g.len() == nvals,
            current: None,
            done: Vec::new(),
        })
        .collect();
    let mut group: Vec<Entry> = Vec::new();
    let emit = |group: &[Entry], outs: &mut [Outputs<'_>]| -> Result<()> {
        for out in outs.iter_mut() {
            out.maybe_cut()?;
            // Most keys have one version: write it through without decoding.
            if let [e] = group {
                let keep = !bottommost || e.kind == Kind::Put;
                if keep && out.covers(e) {
                    out.add(e)?;
                }
                continue;
            }
            let mine: Vec<Entry> = group.iter().filter(|e| out.covers(e)).cloned().collect();
            let versions = collapse(mine, snapshots, bottommost, &spec.table.value_types)
                .map_err(|d| Error::corruption("<compaction merge>", 0, d.0))?;
            for e in versions {
                out.add(&e)?;
            }
        }
        Ok(())
    };
    while let Some(e) = iter.next_entry()? {
        if let Some(last) = group.last() {
            if last.key != e.key {
                emit(&group, &mut outs)?;
                group.clear();
            } else if last.seq == e.seq && last.cover == e.cover {
                // The same version twice (a memtable and the Level-0 file it was flushed to).
                continue;
            }
        }
        group.push(e);
    }
    if !group.is_empty() {
        emit(&group, &mut outs)?;
    }
    let mut done = Vec::new();
    for mut out in outs {
        out.finish_current()?;
        done.append(&mut out.done);
    }
    Ok(done)
}
