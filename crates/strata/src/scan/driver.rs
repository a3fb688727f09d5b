//! The driving level of a pass: which level and group drive it, the walk over the driver's blocks
//! by their index entries, the other groups' cursors that line up with it, the sources that could
//! overlap a block, and where to cut a range into partitions.

use std::collections::HashMap;
use std::sync::Arc;

use super::chunk::Segment;
use super::plan::Plan;
use super::state::ScanCounters;
use crate::error::Result;
use crate::memtable::Memtable;
use crate::mvcc::chain::Resolver;
use crate::read::ReadPoint;
use crate::sst::reader::SstReader;
use crate::sst::run::RunCursor;
use crate::version::FileMeta;

/// A source other than the driving level's groups, checked for keys in a block's range.
pub(super) enum Other {
    Mem(Arc<Memtable>),
    Run(Vec<Arc<FileMeta>>),
}

/// A cursor over one group's run at the driving level, handing out the segments of a key range.
pub(super) struct GroupCursor(RunCursor);

impl GroupCursor {
    pub(super) fn new(files: Vec<Arc<FileMeta>>) -> Self {
        GroupCursor(RunCursor::new(files, true))
    }

    /// The versions with `lo <= key < hi`, as segments. Ranges asked for must not go backwards.
    pub(super) fn take(
        &mut self,
        rp: &ReadPoint,
        lo: &[u8],
        hi: &[u8],
        counters: &ScanCounters,
    ) -> Result<Vec<Segment>> {
        let c = &mut self.0;
        let loaded = c.blocks_loaded();
        c.seek(&rp.tables, lo)?;
        let mut out = Vec::new();
        while let Some(b) = c.block().cloned() {
            let row = c.row();
            // The range usually runs to (or near) the block's end: a plain binary search.
            let end = b.seek(hi).max(row);
            if row < end {
                out.push((b.clone(), row..end));
                c.set_row(end);
            }
            if end < b.len() {
                break;
            }
            c.next_block(&rp.tables)?;
        }
        ScanCounters::add(&counters.blocks_read, c.blocks_loaded() - loaded);
        Ok(out)
    }
}

/// A block of the driving group, by its index entry.
pub(super) struct Candidate {
    pub(super) reader: Arc<SstReader>,
    pub(super) block: usize,
    /// The key range it stands for: from just past the previous block's last key (or the
    /// partition's lower bound) to just past its own last key (or the upper bound).
    pub(super) lo: Vec<u8>,
    pub(super) hi: Vec<u8>,
    /// All of the block's rows lie in `[lo, hi)`.
    pub(super) whole: bool,
    /// Memtables hold keys in the range: pass the block on in bulk without those keys and
    /// resolve them one by one.
    pub(super) patch: bool,
    /// The runs among the driver's [`Other`]s that hold keys in the range (by position): their
    /// keys are resolved with the memtables' and laid over the block the same way.
    pub(super) runs: Vec<usize>,
}

/// The smallest key above `k`.
pub(super) fn successor(k: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(k.len() + 1);
    v.extend_from_slice(k);
    v.push(0);
    v
}

/// The driving level: its needed groups and where the walk over the driver's blocks is.
pub(super) struct Driver {
    /// The driver group's files.
    pub(super) walk: RunCursor,
    /// Whether the walk has been positioned at the partition's start.
    pub(super) started: bool,
    /// Start of the next block's range.
    pub(super) next_lo: Vec<u8>,
    /// The other needed groups of the level.
    pub(super) groups: Vec<GroupCursor>,
    /// Schema column → (group, column within the group).
    pub(super) at: HashMap<usize, (usize, usize)>,
    /// Sources that could hold newer (or interleaved) versions of the needed columns.
    pub(super) others: Vec<Other>,
}

/// Whether source `o` has any key in `[lo, hi)` (any sequence number: a newer invisible version
/// only costs the bulk path, never correctness).
pub(super) fn overlaps(o: &Other, rp: &ReadPoint, table: u32, lo: &[u8], hi: &[u8]) -> Result<bool> {
    match o {
        Other::Mem(m) => Ok(m.has_in(table, lo, hi)),
        Other::Run(files) => {
            let fi = files.partition_point(|f| f.largest.as_slice() < lo);
            let Some(f) = files.get(fi) else { return Ok(false) };
            if f.smallest.as_slice() >= hi {
                return Ok(false);
            }
            if f.smallest.as_slice() >= lo {
                return Ok(true);
            }
            let r = rp.tables.get(f.number)?;
            let bi = r.find_block(lo);
            let Some(e) = r.index().get(bi) else { return Ok(false) };
            if e.last_key.as_slice() < hi {
                return Ok(true);
            }
            let b = r.key_block(bi)?;
            let i = b.seek(lo);
            Ok(i < b.len() && b.key(i) < hi)
        }
    }
}

/// Sets up the driving level for a partition starting at `lower`, or `None` when every key must
/// go through the merge (no level below 0 holds all the needed columns).
pub(super) fn driver(plan: &Plan, rp: &ReadPoint, lower: &[u8]) -> Result<Option<Driver>> {
    let info = &plan.info;
    let wanted = plan.wanted();
    let fresh = Resolver::new(info.value_types.len(), Some(wanted));
    let levels = &rp.t.levels;
    let Some(dl) = (1..levels.len()).rev().find(|&l| levels[l].runs.iter().any(|r| fresh.wants(r.cover(info, l))))
    else {
        return Ok(None);
    };
    // The driving level's runs of needed groups; the driver is the one holding the first filter
    // column (or the first needed column).
    let runs: Vec<_> = levels[dl].runs.iter().filter(|r| fresh.wants(r.cover(info, dl))).collect();
    let cover_of = |r: &&crate::version::Run| {
        r.cover(info, dl).map(|c| c.to_vec()).unwrap_or_else(|| (0..info.value_types.len()).collect())
    };
    let first = plan.filter.columns().chain(plan.needed.iter().copied()).find_map(|c| info.schema.value_index(c));
    let driver_idx = match first {
        Some(vi) => runs.iter().position(|r| cover_of(r).contains(&vi)),
        None => Some(0),
    };
    let Some(driver_idx) = driver_idx else { return Ok(None) };
    let mut ordered = vec![runs[driver_idx]];
    ordered.extend(runs.iter().enumerate().filter(|(i, _)| *i != driver_idx).map(|(_, r)| *r));
    let mut at = HashMap::new();
    for (g, r) in ordered.iter().enumerate() {
        for (c, &vi) in cover_of(r).iter().enumerate() {
            if wanted.get(vi).copied().unwrap_or(false) {
                at.insert(info.schema.value_columns()[vi], (g, c));
            }
        }
    }
    // Every needed value column must come from the driving level.
    if plan.needed.iter().any(|&c| info.schema.value_index(c).is_some() && !at.contains_key(&c)) {
        return Ok(None);
    }
    let mut others: Vec<Other> =
        std::iter::once(&rp.view.mem).chain(rp.view.imm.iter()).map(|m| Other::Mem(m.clone())).collect();
    for (l, level) in levels.iter().enumerate() {
        if l == dl {
            continue;
        }
        for r in &level.runs {
            if r.files.is_empty() || !fresh.wants(r.cover(info, l)) {
                continue;
            }
            // The snapshot filter: files the read cannot see a version of do not stand in the
            // way of the bulk path.
            let files: Vec<Arc<FileMeta>> = if rp.snapshot_filter {
                r.files.iter().filter(|f| f.min_seq <= rp.seq).cloned().collect()
            } else {
                r.files.clone()
            };
            if !files.is_empty() {
                others.push(Other::Run(files));
            }
        }
    }
    Ok(Some(Driver {
        walk: RunCursor::new(ordered[0].files.clone(), true),
        started: false,
        next_lo: lower.to_vec(),
        groups: ordered[1..].iter().map(|r| GroupCursor::new(r.files.clone())).collect(),
        at,
        others,
    }))
}

/// Splits `[lower, upper)` into at most `n` ranges at block boundaries of the driving group, so
/// partitions cover similar amounts of data. One range when there is no driving level.
pub(super) fn split(plan: &Plan, rp: &ReadPoint, lower: &[u8], upper: Option<&[u8]>, n: usize) -> Result<Vec<Vec<u8>>> {
    let mut cuts = Vec::new();
    if n > 1 {
        if let Some(d) = driver(plan, rp, lower)? {
            let mut fences: Vec<Vec<u8>> = Vec::new();
            let files = d.walk.files();
            let fi = files.partition_point(|f| f.largest.as_slice() < lower);
            for f in &files[fi..] {
                if upper.is_some_and(|u| f.smallest.as_slice() >= u) {
                    break;
                }
                let r = rp.tables.get(f.number)?;
                fences.extend(
                    r.index()
                        .iter()
                        .map(|e| successor(&e.last_key))
                        .filter(|k| k.as_slice() > lower && upper.is_none_or(|u| k.as_slice() < u)),
                );
            }
            let per = fences.len().div_ceil(n).max(1);
            cuts.extend(fences.into_iter().skip(per - 1).step_by(per).take(n - 1));
        }
    }
    Ok(cuts)
}
