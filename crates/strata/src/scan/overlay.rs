//! The memtables' side of a scan. Memtable versions mark nothing (marks are made by flushes), so
//! a scan resolves the memtables' keys at its read point and lays the result over what it reads
//! from the SSTs: a key the memtables delete or rewrite whole replaces the SST rows of that key;
//! a partial row replaces the columns it carries, and counts only where the SSTs hold the row
//! (updates are blind). Keys are resolved a block's range at a time, and only for blocks the
//! scan reads, except by an aggregation that reads every block of its range anyway (a sum), which
//! resolves the range's keys once and takes each block's from them; the memtables' [`bounds`]
//! tell a scan where none of their versions can matter.

use std::sync::Arc;

use crate::catalog::TableInfo;
use crate::error::{Error, Result};
use crate::iter::merge::{MergeIter, Source};
use crate::memtable::{Memtable, TableBounds};
use crate::mvcc::chain::Resolver;
use crate::mvcc::Kind;
use crate::read::{ReadPoint, ReadView};
use crate::sst::bloom;
use crate::sst::zone::ZoneMap;
use crate::types::row::{carried, decode_row, Cells};
use crate::types::ColumnType;
use crate::version::FileMeta;

/// The memtables' bounds of one table as a scan reads them, each column's zone map decoded once.
pub(super) struct MemBounds {
    /// Full rows.
    pub(super) puts: u64,
    settles_rows: bool,
    zones: Vec<ZoneMap>,
}

impl MemBounds {
    /// Whether some version is a full row or a delete.
    pub(super) fn settles_rows(&self) -> bool {
        self.settles_rows
    }

    /// Whether some version carries value column `c`.
    pub(super) fn carries(&self, c: usize) -> bool {
        self.zones.get(c).is_some_and(|z| z.carried > 0)
    }

    /// Value column `c`'s zone map over the versions carrying it.
    pub(super) fn zone(&self, c: usize) -> Option<&ZoneMap> {
        self.zones.get(c)
    }
}

/// Bounds over every version of `table` the memtables of `view` hold (empty where they hold
/// none): widened before a version becomes visible, so they cover whatever a read sees.
pub(super) fn bounds(view: &ReadView, table: u32, types: &[ColumnType]) -> MemBounds {
    let mut b = TableBounds::new(types);
    for m in std::iter::once(&view.mem).chain(view.imm.iter()) {
        if let Some(mine) = m.bounds(table) {
            b.absorb(&mine);
        }
    }
    MemBounds {
        puts: b.puts,
        settles_rows: b.settles_rows(),
        zones: (0..types.len()).filter_map(|c| b.zone(c)).collect(),
    }
}

/// The zone map of a block's rows once the memtables' versions are laid over them: `block` over
/// its `rows` rows, widened by `mem`, the memtables' bounds of the same column (`None` when no
/// memtable version carries it). `None` when nothing sound can be said.
pub(super) fn widen_zone(block: &ZoneMap, mem: Option<&ZoneMap>, rows: u64) -> Option<ZoneMap> {
    let Some(mem) = mem.filter(|m| m.carried > 0) else { return Some(block.clone()) };
    let block_values = block.nulls < rows;
    let mem_values = mem.nulls < mem.carried;
    // A verdict reads "no NULL" from `nulls == 0` and "all NULL" from `nulls >= rows`: keep
    // each only where it holds for the block and the memtables both.
    let nulls = if block.nulls == 0 && mem.nulls == 0 {
        0
    } else if !block_values && !mem_values {
        rows
    } else if rows >= 2 {
        1
    } else {
        return None;
    };
    // Bounds over both; the counts are the block's, with the NULLs above.
    let mut z = block.merge(mem);
    z.nulls = nulls;
    z.carried = block.carried;
    Some(z)
}

/// What the memtables say about one key at the read point.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    /// Deleted: the SSTs' versions of the key are gone.
    Gone,
    /// A full row: it replaces the SSTs' versions (wanted columns filled).
    Row(Cells),
    /// Partial rows only: their columns replace the SSTs' values of those columns, if the row
    /// exists there.
    Partial(Cells),
}

/// The memtables' keys in a range, ascending, with their outcomes.
#[derive(Debug, Default)]
pub(super) struct Overlay {
    keys: Vec<Vec<u8>>,
    /// The keys' bloom-filter hashes, to ask files whether they may hold them.
    hashes: Vec<u64>,
    outcomes: Vec<Outcome>,
}

impl Overlay {
    /// Resolves the memtables of `view` for `table` over `[lower, upper)` at `seq`, reading the
    /// `wanted` value columns. Partial rows that carry no wanted column change nothing the scan
    /// reads and are left out.
    pub(super) fn build(
        view: &ReadView,
        table: u32,
        lower: &[u8],
        upper: Option<&[u8]>,
        seq: u64,
        types: &[ColumnType],
        wanted: &[bool],
    ) -> Result<Overlay> {
        // One memtable holding the table, its versions folded (the usual case): each key's
        // newest version at the read point is all it says of the key.
        let holding: Vec<&Arc<Memtable>> =
            std::iter::once(&view.mem).chain(view.imm.iter()).filter(|m| m.holds(table)).collect();
        match holding.as_slice() {
            [] => return Ok(Overlay::default()),
            [m] if m.folded() => return Self::one(m, table, lower, upper, seq, types, wanted),
            _ => {}
        }
        // Memtable versions are newer than any SST's, so the floor is never met.
        let sources = view.mem_sources(table, lower, upper);
        Ok(Self::merged(sources, upper, seq, types, wanted, 0)?.unwrap_or_default())
    }

    /// [`Self::build`] over the memtables and the `runs` of SST files above the driving level
    /// (Level-0 and shallower levels) that hold keys in `[lower, upper)`, so that a block of the
    /// driving level they overlap is read in bulk with their keys laid over it, as memtable keys
    /// are. `None` when some version it would lay over the block is at or below `floor` (the
    /// block's newest version): the block's row of that key might then be the newer one, and
    /// only the per-row merge orders them.
    pub(super) fn build_over_runs(
        rp: &ReadPoint,
        runs: &[Vec<Arc<FileMeta>>],
        info: &TableInfo,
        (lower, upper): (&[u8], &[u8]),
        wanted: &Arc<[bool]>,
        floor: u64,
    ) -> Result<Option<Overlay>> {
        let mut sources = rp.view.mem_sources(info.id, lower, Some(upper));
        for files in runs {
            sources.push(Box::new(rp.run_source(files.clone(), lower, Some(upper), info, Some(wanted.clone()))));
        }
        Self::merged(sources, Some(upper), rp.seq, &info.value_types, wanted, floor)
    }

    /// Resolves the versions of `sources` below `upper` at `seq`; `None` when a version it takes
    /// is at or below `floor`.
    fn merged(
        sources: Vec<Box<dyn Source>>,
        upper: Option<&[u8]>,
        seq: u64,
        types: &[ColumnType],
        wanted: &[bool],
        floor: u64,
    ) -> Result<Option<Overlay>> {
        let mut merge = MergeIter::new(sources);
        let mut out = Overlay::default();
        let mut current: Option<(Vec<u8>, Resolver, bool)> = None;
        let finish = |out: &mut Overlay, (key, res, any): (Vec<u8>, Resolver, bool)| {
            if !any {
                return;
            }
            let outcome = match res.into_parts() {
                (Some(false), _) => Outcome::Gone,
                (Some(true), cells) => Outcome::Row(cells),
                (None, cells) => {
                    if !cells.iter().zip(wanted).any(|(c, &w)| w && c.is_some()) {
                        return;
                    }
                    Outcome::Partial(cells)
                }
            };
            out.hashes.push(bloom::key_hash(&key));
            out.keys.push(key);
            out.outcomes.push(outcome);
        };
        while let Some(e) = merge.next_entry()? {
            if upper.is_some_and(|u| e.key.as_slice() >= u) {
                break;
            }
            if current.as_ref().is_none_or(|(k, _, _)| *k != e.key) {
                if let Some(c) = current.take() {
                    finish(&mut out, c);
                }
                current = Some((e.key.clone(), Resolver::new(types.len(), Some(wanted)), false));
            }
            let Some((_, res, any)) = current.as_mut() else { continue };
            if e.seq > seq || res.is_settled() {
                continue;
            }
            if e.seq <= floor {
                return Ok(None);
            }
            let cells = if e.kind == Kind::Delete {
                vec![None; types.len()]
            } else {
                decode_row(types, &e.row, Some(wanted))
                    .map_err(|d| Error::corruption("<overlay>", e.seq, format!("bad row: {}", d.0)))?
            };
            res.push(e.kind, cells, e.cover.as_deref());
            *any = true;
        }
        if let Some(c) = current.take() {
            finish(&mut out, c);
        }
        Ok(Some(out))
    }

    /// [`Self::build`] over one memtable whose versions are folded.
    fn one(
        m: &Memtable,
        table: u32,
        lower: &[u8],
        upper: Option<&[u8]>,
        seq: u64,
        types: &[ColumnType],
        wanted: &[bool],
    ) -> Result<Overlay> {
        let mut out = Overlay::default();
        let mut failed = None;
        m.newest_in(table, lower, upper, seq, |key, kind, row| {
            if failed.is_some() {
                return;
            }
            let decode = || decode_row(types, row, Some(wanted));
            let outcome = match kind {
                Kind::Delete => Ok(Outcome::Gone),
                Kind::Put => decode().map(Outcome::Row),
                // Partial rows that carry no wanted column change nothing the scan reads.
                Kind::Update if !carried(row, types.len()).any(|c| wanted.get(c).copied().unwrap_or(false)) => return,
                Kind::Update => decode().map(Outcome::Partial),
            };
            match outcome {
                Ok(o) => {
                    out.hashes.push(bloom::key_hash(key));
                    out.keys.push(key.to_vec());
                    out.outcomes.push(o);
                }
                Err(d) => failed = Some(Error::corruption("<memtable>", 0, format!("bad row: {}", d.0))),
            }
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// The keys and their outcomes, ascending.
    pub(super) fn into_entries(self) -> impl Iterator<Item = (Vec<u8>, Outcome)> {
        self.keys.into_iter().zip(self.outcomes)
    }

    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The positions of the keys in `[lo, hi)`.
    pub(super) fn within(&self, lo: &[u8], hi: &[u8]) -> std::ops::Range<usize> {
        let start = self.keys.partition_point(|k| k.as_slice() < lo);
        let end = start + self.keys[start..].partition_point(|k| k.as_slice() < hi);
        start..end
    }

    pub(super) fn key(&self, i: usize) -> &[u8] {
        &self.keys[i]
    }

    pub(super) fn hash(&self, i: usize) -> u64 {
        self.hashes[i]
    }

    pub(super) fn outcome(&self, i: usize) -> &Outcome {
        &self.outcomes[i]
    }

    /// Whether the entry replaces the SSTs' value of value column `c`.
    pub(super) fn replaces(&self, i: usize, c: usize) -> bool {
        match &self.outcomes[i] {
            Outcome::Gone | Outcome::Row(_) => true,
            Outcome::Partial(cells) => cells.get(c).is_some_and(Option::is_some),
        }
    }
}
