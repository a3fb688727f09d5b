//! Executing a merge: versions from a [`MergeIter`] are grouped by key, collapsed against the live
//! snapshots ([`collapse`]) and written into new SSTs cut at a target size. Used by both flush
//! (memtable → Level-0) and compaction (level i → i+1). Runs on a background thread; touches no
//! shared state except through the file-number allocator it is given.

use std::path::PathBuf;

use crate::db::TableInfo;
use crate::error::{Error, Result};
use crate::iter::merge::MergeIter;
use crate::mvcc::chain::collapse;
use crate::mvcc::Entry;
use crate::sst::builder::{SstBuilder, SstOptions};
use crate::version::FileMeta;
use crate::vfs::Fs;

/// Where and how output files are written.
pub(crate) struct OutputSpec<'a> {
    pub fs: &'a dyn Fs,
    pub path_of: &'a dyn Fn(u64) -> PathBuf,
    /// Hands out a fresh file number and protects it from obsolete-file cleanup.
    pub alloc: &'a dyn Fn() -> u64,
    pub table: &'a TableInfo,
    pub sst: SstOptions,
    /// Cut a new file once this many bytes are written (at a key boundary).
    pub target_file_size: u64,
}

struct Outputs<'a> {
    spec: &'a OutputSpec<'a>,
    current: Option<(u64, SstBuilder)>,
    done: Vec<FileMeta>,
}

impl Outputs<'_> {
    fn add(&mut self, e: &Entry) -> Result<()> {
        if self.current.is_none() {
            let number = (self.spec.alloc)();
            let path = (self.spec.path_of)(number);
            let file = self.spec.fs.create(&path)?;
            let info = self.spec.table;
            let columns: Vec<usize> = (0..info.value_types.len()).collect();
            let b = SstBuilder::new(file, path, self.spec.sst, info.id, 0, columns, info.value_types.clone());
            self.current = Some((number, b));
        }
        if let Some((_, b)) = &mut self.current {
            b.add(e)?;
        }
        Ok(())
    }

    /// Called between keys: closes the file if it reached the target size.
    fn maybe_cut(&mut self) -> Result<()> {
        if self.current.as_ref().is_some_and(|(_, b)| b.estimated_size() >= self.spec.target_file_size) {
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

/// Drains `iter` into new files. `snapshots` ascending; see [`collapse`] for `bottommost`.
/// Output files are synced; the caller syncs the directory and installs them.
pub(crate) fn write_merged(
    mut iter: MergeIter,
    snapshots: &[u64],
    bottommost: bool,
    spec: &OutputSpec<'_>,
) -> Result<Vec<FileMeta>> {
    let mut out = Outputs { spec, current: None, done: Vec::new() };
    let mut group: Vec<Entry> = Vec::new();
    let emit = |group: Vec<Entry>, out: &mut Outputs<'_>| -> Result<()> {
        out.maybe_cut()?;
        let versions = collapse(group, snapshots, bottommost, &spec.table.value_types)
            .map_err(|d| Error::corruption("<compaction merge>", 0, d.0))?;
        for e in versions {
            out.add(&e)?;
        }
        Ok(())
    };
    while let Some(e) = iter.next_entry()? {
        if let Some(last) = group.last() {
            if last.key != e.key {
                emit(std::mem::take(&mut group), &mut out)?;
            } else if last.seq == e.seq {
                continue;
            }
        }
        group.push(e);
    }
    if !group.is_empty() {
        emit(group, &mut out)?;
    }
    out.finish_current()?;
    Ok(out.done)
}
