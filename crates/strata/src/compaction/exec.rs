//! Executing a merge: versions from a [`MergeIter`] are grouped by key, collapsed against the live
//! snapshots ([`collapse`]) and written into new SSTs cut at a target size. Used by both flush
//! (memtable → Level-0) and compaction (level i → i+1). Runs on a background thread; touches no
//! shared state except through the file-number allocator it is given.
//!
//! Layout change (LASER §4.4): the output is one run per output column group. Each key's versions
//! are projected onto every output group — a whole row or a wider group's version covers it, a
//! partial row counts only if it carries one of the group's columns — and each projection is
//! collapsed on its own, so every column keeps the versions its chain needs.
//!
//! Into a level of row-group files (see [`TableInfo::row_groups`]) there is one output group of
//! every column, so versions are collapsed as whole or partial rows, and each file is written as
//! a row-group file of the level's groups.
//!
//! Where files are cut is a [`Cutter`]'s decision: by size, or aligned to the files of the level
//! below the output (Kim et al. §IV, Algorithm 1), so that compacting an output file later takes
//! whole files from below instead of neighbours it overlaps by a sliver.

use std::path::PathBuf;
use std::sync::Arc;

use super::supersede::Marker;
use crate::catalog::workload::{At, Op};
use crate::catalog::TableInfo;
use crate::column_group::group_id;
use crate::error::{Error, Result};
use crate::iter::merge::{MergeIter, Origin};
use crate::mvcc::chain::{collapse, newest_per_stripe, Stripes};
use crate::mvcc::{Entry, Kind};
use crate::sst::builder::{SstBuilder, SstOptions};
use crate::sst::rowgroup::RowGroupBuilder;
use crate::types::row::{carries, RawCell, RowIter};
use crate::types::ColumnType;
use crate::version::FileMeta;
use crate::vfs::Fs;

/// Which versions a merge must keep: those readers can tell apart ([`Stripes`]); with
/// `bottommost` (nothing older lies below the output) tombstones and partial rows over nothing
/// go (see [`collapse`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keep<'a> {
    pub stripes: Stripes<'a>,
    pub bottommost: bool,
    /// Every input version reads the same alone as with all older input versions of its key (a
    /// flush of one memtable that folded its partial rows, see
    /// [`Memtable::insert`](crate::memtable::Memtable::insert)): each stripe's newest version is
    /// that stripe's collapse, and nothing needs decoding.
    pub folded: bool,
}

/// Where and how output files are written.
pub(crate) struct OutputSpec<'a> {
    pub fs: &'a dyn Fs,
    pub path_of: &'a dyn Fn(u64) -> PathBuf,
    /// Hands out a fresh file number and protects it from obsolete-file cleanup.
    pub alloc: &'a dyn Fn() -> u64,
    pub table: &'a TableInfo,
    /// The level the files go to.
    pub level: usize,
    /// The output column groups (value-column indices, ascending), each with where its files
    /// are cut; they partition the columns the inputs cover.
    pub groups: Vec<(Vec<usize>, Cutter)>,
    /// Given, the output is row-group files holding these groups (the level's layout), and
    /// `groups` is one group of every column.
    pub row_groups: Option<&'a [Vec<usize>]>,
    pub sst: SstOptions,
    /// Given, it receives each finished file's key hashes (see [`crate::sst::keyset`]).
    pub key_hashes: Option<&'a dyn Fn(u64, Vec<u64>)>,
}

/// Decides, key by key, where the output files of one group end.
///
/// By size: a file is closed once it holds `target` bytes. Aligned (Kim et al. Algorithm 1):
/// given non-overlapping files below the output level by key (those of the next level, and
/// deeper ones in its gaps; see [`alignment_files`](super::policy::alignment_files)), a file is
/// closed
/// - where the keys pass the end of a file below, once it holds `target / variance` bytes;
/// - in a key gap between files below (or past the last), once it holds `target` bytes;
/// - anywhere, once it holds `target × variance` bytes.
///
/// So output files start and end where files below do, unless that would make them more than
/// `variance` times off the target. With nothing below, aligned cutting is size cutting.
#[derive(Debug, Clone)]
pub(crate) struct Cutter {
    target: u64,
    min: u64,
    max: u64,
    /// Files below the output level to align to, by smallest key (empty: cut by size).
    below: Vec<Arc<FileMeta>>,
    /// The first file of `below` whose end the keys have not passed.
    next: usize,
}

impl Cutter {
    /// Cuts at `target` bytes.
    pub(crate) fn by_size(target: u64) -> Self {
        Cutter { target, min: target, max: target, below: Vec::new(), next: 0 }
    }

    /// Cuts aligned to `below` (files by smallest key), `variance` ≥ 1 times off `target` at most.
    pub(crate) fn aligned(target: u64, variance: f64, below: Vec<Arc<FileMeta>>) -> Self {
        let min = (target as f64 / variance) as u64;
        let max = (target as f64 * variance).min(u64::MAX as f64) as u64;
        Cutter { target, min, max, below, next: 0 }
    }

    /// Whether to close the current file, holding `size` bytes, before writing `key` (each key
    /// once, ascending).
    pub(crate) fn cut_before(&mut self, size: u64, key: &[u8]) -> bool {
        let start = self.next;
        while self.below.get(self.next).is_some_and(|f| key > f.largest.as_slice()) {
            self.next += 1;
        }
        if size == 0 {
            return false;
        }
        if size >= self.max {
            return true;
        }
        if self.next > start {
            return size >= self.min;
        }
        let in_gap = self.below.get(self.next).is_none_or(|f| key <= f.smallest.as_slice());
        in_gap && size >= self.target
    }
}

/// An output file being written: one group's, or a row-group file.
enum Builder {
    Group(SstBuilder),
    Rows(RowGroupBuilder, PathBuf),
}

impl Builder {
    fn entries(&self) -> u64 {
        match self {
            Builder::Group(b) => b.entries(),
            Builder::Rows(b, _) => b.entries(),
        }
    }

    fn estimated_size(&self) -> u64 {
        match self {
            Builder::Group(b) => b.estimated_size(),
            Builder::Rows(b, _) => b.estimated_size(),
        }
    }

    fn path(&self) -> &PathBuf {
        match self {
            Builder::Group(b) => b.path(),
            Builder::Rows(_, path) => path,
        }
    }

    fn key_hashes(&self) -> &[u64] {
        match self {
            Builder::Group(b) => b.key_hashes(),
            Builder::Rows(b, _) => b.key_hashes(),
        }
    }

    fn finish(self, number: u64) -> Result<FileMeta> {
        match self {
            Builder::Group(b) => b.finish(number),
            Builder::Rows(b, _) => b.finish(number),
        }
    }

    /// Writes `e` (its row over every value column of `value_types`).
    fn add(&mut self, e: &Entry, value_types: &[ColumnType]) -> Result<()> {
        let b = match self {
            Builder::Group(b) => return b.add(e),
            Builder::Rows(b, _) => b,
        };
        if let Some(at) = &e.stored {
            return b.add_stored(&e.key, e.seq, e.kind, at);
        }
        let bad = |why: String| Error::corruption("<compaction output>", e.seq, format!("bad row to write: {why}"));
        let cells: Vec<RawCell<'_>> =
            RowIter::new(value_types, &e.row).map_err(|d| bad(d.0))?.collect::<Result<_, _>>().map_err(|d| bad(d.0))?;
        b.add(&e.key, e.seq, e.kind, |vi| cells.get(vi).copied().unwrap_or(RawCell::Absent))
    }
}

/// The files of one output group.
struct Outputs<'a> {
    spec: &'a OutputSpec<'a>,
    group: &'a [usize],
    cutter: Cutter,
    /// The group is every value column: every version belongs to it unchanged.
    whole_row: bool,
    current: Option<(u64, Builder)>,
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

    /// Writes `e`; returns the file number and the version's position in the file.
    fn add(&mut self, e: &Entry) -> Result<(u64, u32)> {
        if self.current.is_none() {
            let number = (self.spec.alloc)();
            let path = (self.spec.path_of)(number);
            let file = self.spec.fs.create(&path)?;
            let info = self.spec.table;
            let b = match self.spec.row_groups {
                Some(groups) => {
                    let key_width = info.key_types.iter().map(|t| t.fixed_width().unwrap_or(16)).sum();
                    let b = RowGroupBuilder::new(file, self.spec.sst, info.id, groups, &info.value_types, key_width);
                    Builder::Rows(b, path)
                }
                None => Builder::Group(SstBuilder::new(
                    file,
                    path,
                    self.spec.sst,
                    info.id,
                    group_id(self.group),
                    self.group.to_vec(),
                    info.value_types.clone(),
                )),
            };
            self.current = Some((number, b));
        }
        let mut at = (0, 0);
        if let Some((number, b)) = &mut self.current {
            let row = u32::try_from(b.entries())
                .map_err(|_| Error::InvalidArgument("an output file would hold over 2^32 versions".into()))?;
            at = (*number, row);
            b.add(e, &self.spec.table.value_types)?;
        }
        if e.kind == Kind::Update {
            let nvals = self.spec.table.value_types.len();
            let cols = self.group.iter().copied().filter(|&c| carries(&e.row, nvals, c));
            self.spec.table.workload.record(At::Level(self.spec.level), Op::Update, cols, 0);
        }
        Ok(at)
    }

    /// Writes one key's versions (newest first) and marks them.
    fn add_key(&mut self, versions: &[Entry], marker: &mut Marker<'_>) -> Result<()> {
        let mut first = None;
        for e in versions {
            let at = self.add(e)?;
            first.get_or_insert(at);
        }
        if let Some((number, row)) = first {
            marker.written(self.group, versions, number, row)?;
        }
        Ok(())
    }

    /// Called before each key: closes the file if the cutter says so.
    fn maybe_cut(&mut self, key: &[u8]) -> Result<()> {
        let size = self.current.as_ref().map_or(0, |(_, b)| b.estimated_size());
        if self.cutter.cut_before(size, key) {
            self.finish_current()?;
        }
        Ok(())
    }

    fn finish_current(&mut self) -> Result<()> {
        if let Some((number, b)) = self.current.take() {
            if b.entries() == 0 {
                let path = b.path().clone();
                drop(b);
                self.spec.fs.remove(&path)?;
                return Ok(());
            }
            let hashes = self.spec.key_hashes.map(|_| b.key_hashes().to_vec());
            self.done.push(b.finish(number)?);
            if let (Some(keep), Some(hashes)) = (self.spec.key_hashes, hashes) {
                keep(number, hashes);
            }
        }
        Ok(())
    }
}

/// Drains `iter` into new files, one run per output group, keeping what `keep` says. `marker` makes the supersede vectors on the way (and may leave
/// out partial rows of rows that do not exist). Output files are synced; the caller syncs the
/// directory and installs them.
pub(crate) fn write_merged(
    mut iter: MergeIter,
    Keep { stripes, bottommost, folded }: Keep<'_>,
    spec: &OutputSpec<'_>,
    marker: &mut Marker<'_>,
) -> Result<Vec<FileMeta>> {
    let nvals = spec.table.value_types.len();
    let mut outs: Vec<Outputs<'_>> = spec
        .groups
        .iter()
        .map(|(g, cutter)| Outputs {
            spec,
            group: g,
            cutter: cutter.clone(),
            whole_row: g.len() == nvals,
            current: None,
            done: Vec::new(),
        })
        .collect();
    let mut group: Vec<Entry> = Vec::new();
    let mut emit = |group: &[Entry], origins: &[Option<Origin>], outs: &mut [Outputs<'_>]| -> Result<()> {
        let Some(key) = group.first().map(|e| e.key.as_slice()) else { return Ok(()) };
        marker.read(group, origins);
        for out in outs.iter_mut() {
            out.maybe_cut(key)?;
            // Most keys have one version: write it through without decoding.
            let collapsed;
            let versions: &[Entry] = if let [e] = group {
                let keep = !bottommost || e.kind == Kind::Put;
                if keep && out.covers(e) {
                    std::slice::from_ref(e)
                } else {
                    &[]
                }
            } else if folded && !bottommost {
                collapsed = newest_per_stripe(group.iter().filter(|e| out.covers(e)), &stripes);
                &collapsed
            } else {
                let mine: Vec<Entry> = group.iter().filter(|e| out.covers(e)).cloned().collect();
                collapsed = collapse(mine, &stripes, bottommost, &spec.table.value_types)
                    .map_err(|d| Error::corruption("<compaction merge>", 0, d.0))?;
                &collapsed
            };
            let keep = marker.before_write(key, versions)?;
            out.add_key(&versions[..keep], marker)?;
        }
        Ok(())
    };
    let mut origins: Vec<Option<Origin>> = Vec::new();
    while let Some((e, origin)) = iter.next_with_origin()? {
        if let Some(last) = group.last() {
            if last.key != e.key {
                emit(&group, &origins, &mut outs)?;
                group.clear();
                origins.clear();
            } else if last.seq == e.seq && last.cover == e.cover {
                // The same version twice (a memtable and the Level-0 file it was flushed to).
                continue;
            }
        }
        group.push(e);
        origins.push(origin);
        if group.len() > 1 {
            // Collapsing reads rows: a key with several versions has them encoded.
            for v in &mut group {
                v.materialize(&spec.table.value_types);
            }
        }
    }
    if !group.is_empty() {
        emit(&group, &origins, &mut outs)?;
    }
    let mut done = Vec::new();
    for mut out in outs {
        out.finish_current()?;
        done.append(&mut out.done);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(lo: &str, hi: &str) -> Arc<FileMeta> {
        Arc::new(FileMeta {
            number: 1,
            size: 1,
            entries: 1,
            min_seq: 0,
            max_seq: 0,
            smallest: lo.as_bytes().to_vec(),
            largest: hi.as_bytes().to_vec(),
            cg: 0,
            tier: 0,
        })
    }

    /// Feeds one-letter keys of `bytes` each through `cutter`; returns each file's first key.
    fn starts(mut cutter: Cutter, keys: &str, bytes: u64) -> String {
        let mut size = 0;
        let mut out = String::new();
        for k in keys.chars() {
            if cutter.cut_before(size, k.to_string().as_bytes()) || out.is_empty() {
                out.push(k);
                size = 0;
            }
            size += bytes;
        }
        out
    }

    #[test]
    fn size_cutting_closes_files_at_the_target() {
        assert_eq!(starts(Cutter::by_size(100), "abcdefghijklmn", 40), "adgjm");
        // Aligned with nothing below is the same.
        assert_eq!(starts(Cutter::aligned(100, 2.0, Vec::new()), "abcdefghijklmn", 40), "adgjm");
    }

    #[test]
    fn aligned_cutting_follows_the_files_below() {
        let below = vec![file("b", "d"), file("e", "h"), file("k", "m")];
        // Files end where `d`, `h` and `m` end; in the gap i..j the target applies again (120
        // bytes at `k` would be over it, but `k` is only reached with 80).
        assert_eq!(starts(Cutter::aligned(100, 2.0, below), "abcdefghijklmn", 40), "aein");
    }

    #[test]
    fn aligned_cutting_stays_within_the_variance() {
        // One file below spans everything: cut at target × 2 anyway.
        assert_eq!(starts(Cutter::aligned(100, 2.0, vec![file("a", "z")]), "abcdefghijklmn", 40), "afk");
        // A boundary after every key: never cut below target / 2.
        let tiny: Vec<_> = "abcdefgh".chars().map(|c| file(&c.to_string(), &c.to_string())).collect();
        assert_eq!(starts(Cutter::aligned(100, 2.0, tiny.clone()), "abcdefgh", 40), "aceg");
        // Variance 1 is size cutting.
        assert_eq!(starts(Cutter::aligned(100, 1.0, tiny), "abcdefgh", 40), "adg");
    }
}
