//! Aggregates column by column, without a merge (the run-by-run path for aggregating scans
//! whose filter is only the key range).
//!
//! Each aggregate reads one column's chain: every run holding the column (each Level-0 file,
//! the group run holding it at each deeper level), file by file, block by block. Of each block
//! it takes the versions live for the column ([`live`](super::live)); each live key has exactly
//! one such version across all runs, so the per-run partial results simply add up. `count(*)`
//! and aggregates of key columns read the first value column's chain, which holds one live
//! version per existing key.
//!
//! The memtables ([`Overlay`]) replace what they rewrite: a deleted or rewritten key's versions
//! are left out (a rewritten row counts once, from the memtable), and a partial row's value of
//! the column replaces the live version's value — where there is a live version, since a
//! partial row over no row changes nothing.
//!
//! A block none of whose versions is superseded, invisible or left out by the memtables is a
//! plain columnar block: its zone maps answer count, min and max without reading it, and a min
//! or max the block cannot improve skips its values. Such a block is still read for memtable
//! partial rows patching the column there with a value the min or max could take (the patch
//! counts only where a live version exists); other patches, deletes and rewrites cannot change
//! it.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_buffer::{BooleanBuffer, BooleanBufferBuilder};

use super::agg::{AggSpec, AggState};
use super::arrow::ValuesBuilder;
use super::chunk::{BulkChunk, Chunk, Segment};
use super::driver::successor;
use super::live::Rows;
use super::overlay::{self, MemBounds, Outcome, Overlay};
use super::plan::Plan;
use super::state::ScanCounters;
use super::AggFunc;
use crate::error::{Error, Result};
use crate::read::ReadPoint;
use crate::sst::block::Block;
use crate::sst::builder::IndexEntry;
use crate::sst::zone::ZoneMap;
use crate::types::key::decode_key;
use crate::types::Value;

/// Whether `plan` can run column by column: it aggregates, and filters nothing but the range.
pub(super) fn applies(plan: &Plan) -> bool {
    !plan.aggs.is_empty() && plan.filter.clauses().is_empty() && !plan.filter.is_false()
}

/// The aggregates reading one column's chain.
struct Chain {
    /// Value column (`None`: the table has none; existence alone).
    col: Option<usize>,
    /// Indices into the plan's aggregates.
    aggs: Vec<usize>,
    /// Values the memtables' partial rows give the column, for keys live below.
    patches: Vec<(Vec<u8>, Value)>,
}

/// Runs the aggregates of `plan` over `[lower, upper)` at `rp`, returning their states.
pub(super) fn aggregate(
    plan: &Plan,
    rp: &ReadPoint,
    lower: &[u8],
    upper: Option<&[u8]>,
    counters: &ScanCounters,
) -> Result<Vec<AggState>> {
    let info = &plan.info;
    let schema = &info.schema;
    let nvals = info.value_types.len();
    let existence = (nvals > 0).then_some(0);
    let mut chains: BTreeMap<Option<usize>, Chain> = BTreeMap::new();
    for (ai, a) in plan.aggs.iter().enumerate() {
        let col = match a.column {
            Some((c, _)) => schema.value_index(c).or(existence),
            None => existence,
        };
        chains.entry(col).or_insert_with(|| Chain { col, aggs: Vec::new(), patches: Vec::new() }).aggs.push(ai);
    }
    let mut wanted = vec![false; nvals];
    for c in chains.keys().flatten() {
        wanted[*c] = true;
    }
    // What the memtables hold of the table, summed up as it was written: where they cannot
    // change a chain, its blocks are read without looking them up.
    let bounds = overlay::bounds(&rp.view, info.id, &info.value_types);
    let mem = MemSide::new(rp, info, &wanted, &bounds, (lower, upper));
    let mut states = vec![AggState::default(); plan.aggs.len()];
    for chain in chains.values_mut() {
        for (level, l) in rp.t.levels.iter().enumerate() {
            for run in &l.runs {
                let cover = run.cover(info, level);
                // The column's position in the run's group.
                let j = match (cover, chain.col) {
                    (None, c) => c,
                    (Some(cols), Some(c)) => match cols.iter().position(|&x| x == c) {
                        Some(j) => Some(j),
                        None => continue,
                    },
                    (Some(_), None) => continue,
                };
                for f in &run.files {
                    if f.largest.as_slice() < lower || upper.is_some_and(|u| f.smallest.as_slice() >= u) {
                        continue;
                    }
                    // The snapshot filter: nothing in the file is visible.
                    if f.min_seq > rp.seq {
                        continue;
                    }
                    let reader = rp.tables.get(f.number)?;
                    let marks = rp.t.marks_of(f.number).map(|m| &**m);
                    let mut scan = FileScan { plan, rp, mem: &mem, counters, chain, j, lower, upper };
                    scan.file(&reader, marks, &mut states)?;
                }
            }
        }
    }
    // The memtables' values: partial rows over live versions, and whole rows.
    for chain in chains.values() {
        if chain.patches.is_empty() {
            continue;
        }
        for &ai in &chain.aggs {
            let a = &plan.aggs[ai];
            let values = agg_values(plan, a, chain.patches.iter().map(|(k, v)| (k.as_slice(), Some(v))))?;
            states[ai].update(a, chain.patches.len(), values.as_ref());
        }
    }
    // The memtables' whole rows, looked up only where some could change an aggregate.
    let whole_rows = bounds.puts > 0
        && plan.aggs.iter().enumerate().any(|(ai, a)| {
            let own = match a.column {
                Some((c, _)) => schema.value_index(c),
                None => None,
            };
            let beaten = own
                .and_then(|c| bounds.zone(c))
                .is_some_and(|z| matches!(a.func, AggFunc::Min | AggFunc::Max) && states[ai].beats_zone(a, z));
            !beaten
        });
    let overlay = if whole_rows {
        let o = mem.into_whole()?;
        ScanCounters::add(&counters.patched_keys, o.len() as u64);
        o
    } else {
        Overlay::default()
    };
    let rows: Vec<(&[u8], &crate::types::row::Cells)> = (0..overlay.len())
        .filter_map(|i| match overlay.outcome(i) {
            Outcome::Row(cells) => Some((overlay.key(i), cells)),
            _ => None,
        })
        .collect();
    if !rows.is_empty() {
        for (ai, a) in plan.aggs.iter().enumerate() {
            let vi = a.column.and_then(|(c, _)| schema.value_index(c));
            let values = agg_values(plan, a, rows.iter().map(|(k, cells)| (*k, vi.and_then(|v| cells[v].as_ref()))))?;
            states[ai].update(a, rows.len(), values.as_ref());
        }
    }
    Ok(states)
}

/// The values aggregate `a` reads from rows given as (key, value of its column if a value
/// column): `None` for `count(*)`.
fn agg_values<'v>(
    plan: &Plan,
    a: &AggSpec,
    rows: impl Iterator<Item = (&'v [u8], Option<&'v Value>)>,
) -> Result<Option<ArrayRef>> {
    let Some((col, ty)) = a.column else { return Ok(None) };
    let info = &plan.info;
    let mut b = ValuesBuilder::new(ty);
    let key_pos = info.schema.primary_key().iter().position(|&k| k == col);
    for (key, v) in rows {
        match key_pos {
            Some(ki) => {
                let vals = decode_key(&info.key_types, key).map_err(|e| Error::corruption("<key>", 0, e.0))?;
                b.push(vals.get(ki).unwrap_or(&Value::Null));
            }
            None => b.push(v.unwrap_or(&Value::Null)),
        }
    }
    Ok(Some(b.finish()))
}

/// The memtables' side of an aggregation: their bounds, and their keys looked up per block.
struct MemSide<'a> {
    rp: &'a ReadPoint,
    table: u32,
    types: &'a [crate::types::ColumnType],
    wanted: &'a [bool],
    bounds: &'a MemBounds,
    /// The aggregation's range.
    range: (&'a [u8], Option<&'a [u8]>),
    /// The keys over the whole range, once resolved.
    whole: OnceCell<Overlay>,
}

/// The memtables' keys in one block's range: resolved for the block alone, or a slice of those
/// resolved over the aggregation's range.
enum MemKeys<'a> {
    Own(Overlay),
    Shared(&'a Overlay, std::ops::Range<usize>),
}

impl MemKeys<'_> {
    fn overlay(&self) -> &Overlay {
        match self {
            MemKeys::Own(o) => o,
            MemKeys::Shared(o, _) => o,
        }
    }

    /// The positions in [`Self::overlay`] of the block's keys.
    fn positions(&self) -> std::ops::Range<usize> {
        match self {
            MemKeys::Own(o) => 0..o.len(),
            MemKeys::Shared(_, r) => r.clone(),
        }
    }
}

impl<'a> MemSide<'a> {
    fn new(
        rp: &'a ReadPoint,
        info: &'a crate::catalog::TableInfo,
        wanted: &'a [bool],
        bounds: &'a MemBounds,
        range: (&'a [u8], Option<&'a [u8]>),
    ) -> Self {
        MemSide { rp, table: info.id, types: &info.value_types, wanted, bounds, range, whole: OnceCell::new() }
    }

    /// Whether some memtable version could replace the SSTs' value of value column `col`
    /// (`None`: existence): a full row or a delete, or a partial row carrying the column.
    fn may_replace(&self, col: Option<usize>) -> bool {
        self.bounds.settles_rows() || col.is_some_and(|c| self.bounds.carries(c))
    }

    /// The memtables' keys in `[lo, hi)` (within the aggregation's range) at the read point,
    /// resolved. A chain that reads every block of the range (`every_block`: a sum, a count)
    /// takes them from the keys resolved over the whole range once, which the other chains and
    /// the whole rows then share: resolving them block by block for each chain walked the
    /// memtables and decoded their rows once per summed column (`laser-hw` Q4, ten columns:
    /// 17 ms against 5.4 ms). A chain of maxes or mins, which its first blocks may settle,
    /// resolves them per block until then.
    fn keys_in(&self, lo: &[u8], hi: &[u8], every_block: bool) -> Result<MemKeys<'_>> {
        if self.whole.get().is_none() && !every_block {
            return Ok(MemKeys::Own(self.build(lo, Some(hi))?));
        }
        let whole = self.whole()?;
        Ok(MemKeys::Shared(whole, whole.within(lo, hi)))
    }

    /// The memtables' keys over the whole range.
    fn whole(&self) -> Result<&Overlay> {
        if let Some(o) = self.whole.get() {
            return Ok(o);
        }
        let o = self.build(self.range.0, self.range.1)?;
        Ok(self.whole.get_or_init(|| o))
    }

    /// [`Self::whole`], taken.
    fn into_whole(mut self) -> Result<Overlay> {
        match self.whole.take() {
            Some(o) => Ok(o),
            None => self.build(self.range.0, self.range.1),
        }
    }

    fn build(&self, lo: &[u8], hi: Option<&[u8]>) -> Result<Overlay> {
        Overlay::build(&self.rp.view, self.table, lo, hi, self.rp.seq, self.types, self.wanted)
    }
}

/// One file of one chain's run.
struct FileScan<'a> {
    plan: &'a Plan,
    rp: &'a ReadPoint,
    mem: &'a MemSide<'a>,
    counters: &'a ScanCounters,
    chain: &'a mut Chain,
    /// The chain's column in the file's group (`None`: existence).
    j: Option<usize>,
    lower: &'a [u8],
    upper: Option<&'a [u8]>,
}

impl FileScan<'_> {
    fn file(
        &mut self,
        reader: &crate::sst::reader::SstReader,
        marks: Option<&crate::version::marks::Marks>,
        states: &mut [AggState],
    ) -> Result<()> {
        let index = reader.index();
        let overlay_col = self.chain.col.unwrap_or(usize::MAX);
        let mem_replaces = self.mem.may_replace(self.chain.col);
        let every_block = !self.may_pass_over_blocks();
        let first = reader.find_block(self.lower);
        let mut end = first;
        while end < index.len() {
            if let (Some(p), Some(u)) = (end.checked_sub(1).map(|p| index[p].last_key.as_slice()), self.upper) {
                if p >= u {
                    break;
                }
            }
            end += 1;
        }
        for bi in self.visit_order(index, first..end, mem_replaces) {
            let e = &index[bi];
            // The block's keys lie in (previous fence, its fence], or from the previous fence on
            // where a row-group file's key page goes on with it; the first block's from the
            // file's smallest key.
            let prev = bi.checked_sub(1).map(|p| index[p].last_key.as_slice());
            let after_prev = |k: &[u8]| prev.is_none_or(|p| k > p || (e.continues && k == p));
            let first_inside = match prev {
                Some(p) => p >= self.lower,
                None => reader.smallest() >= self.lower,
            };
            let whole = first_inside && self.upper.is_none_or(|u| e.last_key.as_slice() < u);
            // A min or max the block cannot improve, where the memtables change the column but
            // hold no value of it that could improve it either: passed over without looking
            // them up (deletes and rewrites only take values away).
            if mem_replaces
                && self.plan.block_stats
                && self.cannot_improve(e, states)
                && !self.mem_values_matter(states)
            {
                ScanCounters::add(&self.counters.blocks_skipped, 1);
                continue;
            }
            // Memtable keys in the block's range that change this column, resolved now.
            let lo = match prev {
                Some(p) if p > self.lower => p,
                _ => self.lower,
            };
            let keys = if mem_replaces {
                let last = successor(&e.last_key);
                let hi = match self.upper {
                    Some(u) if u < last.as_slice() => u,
                    _ => last.as_slice(),
                };
                self.mem.keys_in(lo, hi, every_block)?
            } else {
                MemKeys::Own(Overlay::default())
            };
            let overlay = keys.overlay();
            ScanCounters::add(&self.counters.patched_keys, keys.positions().len() as u64);
            let candidates: Vec<usize> =
                keys.positions().filter(|&i| after_prev(overlay.key(i)) && overlay.replaces(i, overlay_col)).collect();
            // A min or max the block cannot improve, with memtable keys in its range none of
            // whose values it could take either: passed over before any bloom probe.
            if !candidates.is_empty()
                && self.plan.block_stats
                && self.cannot_improve(e, states)
                && !self.patches_matter(overlay, &candidates, states)
            {
                ScanCounters::add(&self.counters.blocks_skipped, 1);
                continue;
            }
            // Most memtable keys are not in a given file (fresh inserts, or kept in another
            // level): its bloom filter says so without reading the block.
            let touched: Vec<usize> = candidates.into_iter().filter(|&i| reader.may_contain(overlay.hash(i))).collect();
            let first_row = reader.first_row(bi);
            let unmarked = marks.is_none_or(|m| !m.any_at_or_below(first_row..reader.first_row(bi + 1), self.rp.seq));
            let plain = whole && touched.is_empty() && unmarked && e.max_seq <= self.rp.seq && self.all_carry(e);
            if plain && self.plan.block_stats && self.answer_from_stats(e, states) {
                ScanCounters::add(&self.counters.blocks_from_stats, 1);
                continue;
            }
            let skip_values = self.plan.block_stats && self.cannot_improve(e, states);
            // A block whose values cannot change a min or max is still read for the memtable
            // keys that patch the column there (whether a live version exists decides whether a
            // patch counts), unless no patch can change it either.
            if skip_values && !self.patches_matter(overlay, &touched, states) {
                ScanCounters::add(&self.counters.blocks_skipped, 1);
                continue;
            }
            // Of a row-group file, the key page: alone when it holds full rows (every version
            // carries the column, whose cells then come from the group's pages), else with the
            // chain's column copied in (its column 0).
            let (block, j, pages) = match (reader.row_groups(), self.chain.col) {
                (Some(rows), Some(vi)) => {
                    let keys = rows.key_page(bi)?;
                    if keys.is_clean() {
                        (keys, None, Some((rows, vi)))
                    } else {
                        (Arc::new(rows.assemble_columns(bi, &[vi])?), Some(0), None)
                    }
                }
                (Some(rows), None) => (rows.key_page(bi)?, None, None),
                (None, _) => (reader.block(bi, true)?, self.j, None),
            };
            ScanCounters::add(&self.counters.blocks_read, 1);
            let start = if first_inside { 0 } else { block.seek(self.lower) };
            let end = match self.upper {
                Some(u) if !whole => block.seek(u),
                _ => block.len(),
            };
            if start < end {
                let rows = Rows { block: &block, rows: start..end, first_row, marks, marked_as: self.j };
                let live = rows.live(j, self.rp.seq);
                let live = self.apply_overlay(overlay, &block, start, live, &touched);
                if skip_values {
                    ScanCounters::add(&self.counters.blocks_skipped, 1);
                } else {
                    let segments = vec![(block.clone(), start..end)];
                    let (groups, at) = match pages {
                        Some((rows, vi)) => {
                            let (g, c) = rows.place(vi).ok_or_else(|| {
                                Error::corruption("<scan>", 0, format!("a row-group file lacks value column {vi}"))
                            })?;
                            let ordinals = first_row + start as u64..first_row + end as u64;
                            (vec![segments, rows.group_rows(g, ordinals)?], Some((1, c)))
                        }
                        None => (vec![segments], j.map(|j| (0, j))),
                    };
                    self.consume(groups, at, live, states)?;
                }
            }
        }
        Ok(())
    }

    /// The order to visit blocks `range` of a file in: key order, except for a chain of maxes
    /// (or of mins) alone where the memtables change the column: the blocks with the largest
    /// (smallest) bounds first, so the first blocks read settle a value that lets the rest be
    /// passed over without looking the memtables up.
    fn visit_order(&self, index: &[IndexEntry], range: std::ops::Range<usize>, mem_replaces: bool) -> Vec<usize> {
        let aggs = &self.plan.aggs;
        let func = self.chain.aggs.first().map(|&ai| aggs[ai].func);
        let extreme = self.chain.aggs.iter().all(|&ai| {
            let a = &aggs[ai];
            let own = a.column.is_some_and(|(c, _)| self.plan.info.schema.value_index(c) == self.chain.col);
            own && Some(a.func) == func
        });
        let (Some(j), true, true, Some(func @ (AggFunc::Max | AggFunc::Min))) =
            (self.j, mem_replaces && self.plan.block_stats, extreme, func)
        else {
            return range.collect();
        };
        let mut keyed: Vec<(Option<Value>, usize)> = range
            .map(|bi| {
                let z = index[bi].zones.get(j);
                (z.and_then(|z| if func == AggFunc::Max { z.max } else { z.min }), bi)
            })
            .collect();
        // Blocks without bounds last, in key order.
        keyed.sort_by(|(a, ai), (b, bi)| match (a, b) {
            (Some(a), Some(b)) => {
                let ord = crate::scan::cnf::compare(a, b);
                let ord = if func == AggFunc::Max { ord.reverse() } else { ord };
                ord.then(ai.cmp(bi))
            }
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => ai.cmp(bi),
        });
        keyed.into_iter().map(|(_, bi)| bi).collect()
    }

    /// Whether a partial row among the memtable entries `touched` carries a value of the
    /// chain's column that one of its aggregates could take (see [`AggState::could_take`]);
    /// deletes and rewrites only take values away, which a min or max the block cannot improve
    /// does not notice.
    fn patches_matter(&self, overlay: &Overlay, touched: &[usize], states: &[AggState]) -> bool {
        let Some(c) = self.chain.col else { return !touched.is_empty() };
        touched.iter().any(|&i| match overlay.outcome(i) {
            Outcome::Partial(cells) => match cells.get(c) {
                Some(Some(v)) => self.chain.aggs.iter().any(|&ai| states[ai].could_take(&self.plan.aggs[ai], v)),
                _ => false,
            },
            Outcome::Gone | Outcome::Row(_) => false,
        })
    }

    /// Whether a value of the chain's column some memtable version holds (by the memtables'
    /// bounds) could change one of its aggregates: false only for mins and maxes no such value
    /// can beat.
    fn mem_values_matter(&self, states: &[AggState]) -> bool {
        let Some(c) = self.chain.col else { return true };
        let Some(z) = self.mem.bounds.zone(c) else { return true };
        if z.carried == 0 {
            return false;
        }
        let aggs = &self.plan.aggs;
        !self.chain.aggs.iter().all(|&ai| {
            let a = &aggs[ai];
            let own = a.column.is_some_and(|(col, _)| self.plan.info.schema.value_index(col) == Some(c));
            own && matches!(a.func, AggFunc::Min | AggFunc::Max) && states[ai].beats_zone(a, z)
        })
    }

    /// Whether every version of the block carries the chain's column.
    fn all_carry(&self, e: &IndexEntry) -> bool {
        match self.j {
            Some(j) => e.zones.get(j).is_some_and(|z| z.carried == e.rows),
            None => e.clean,
        }
    }

    /// Answers the chain's aggregates from the zone maps of a plain block, if they can.
    fn answer_from_stats(&self, e: &IndexEntry, states: &mut [AggState]) -> bool {
        let zone_of = |a: &AggSpec| match (a.column, self.j) {
            (Some((c, _)), Some(j)) if self.plan.info.schema.value_index(c).is_some() => e.zones.get(j),
            _ => None,
        };
        let aggs = &self.plan.aggs;
        let zones: Vec<Option<ZoneMap>> = self.chain.aggs.iter().map(|&ai| zone_of(&aggs[ai])).collect();
        if !self.chain.aggs.iter().zip(&zones).all(|(&ai, z)| AggState::zone_answers(&aggs[ai], z.as_ref(), e.rows)) {
            return false;
        }
        for (&ai, z) in self.chain.aggs.iter().zip(&zones) {
            states[ai].update_from_zone(&aggs[ai], z.as_ref(), e.rows);
        }
        true
    }

    /// Whether no value of the block can change the chain's aggregates: all are min or max of
    /// the column, which the block's bounds cannot beat.
    fn cannot_improve(&self, e: &IndexEntry, states: &[AggState]) -> bool {
        let Some(z) = self.j.and_then(|j| e.zones.get(j)) else { return false };
        let aggs = &self.plan.aggs;
        self.chain.aggs.iter().all(|&ai| {
            let a = &aggs[ai];
            self.extreme_of_own_column(a) && states[ai].beats_zone(a, &z)
        })
    }

    /// Whether [`Self::cannot_improve`] may ever hold, letting the chain pass over blocks
    /// without reading them or their memtable keys: only a chain of mins and maxes of its own
    /// column, with block statistics and bounds to compare against.
    fn may_pass_over_blocks(&self) -> bool {
        self.plan.block_stats
            && self.j.is_some()
            && self.chain.aggs.iter().all(|&ai| self.extreme_of_own_column(&self.plan.aggs[ai]))
    }

    /// Whether `a` is a min or max of the chain's column.
    fn extreme_of_own_column(&self, a: &AggSpec) -> bool {
        let own = a.column.is_some_and(|(c, _)| self.plan.info.schema.value_index(c) == self.chain.col);
        own && matches!(a.func, AggFunc::Min | AggFunc::Max)
    }

    /// Leaves the memtables' keys out of `live` (rows from `start` of the block); where a
    /// partial row replaces the value of a live version, keeps its value for later.
    fn apply_overlay(
        &mut self,
        overlay: &Overlay,
        block: &Block,
        start: usize,
        live: BooleanBuffer,
        touched: &[usize],
    ) -> BooleanBuffer {
        if touched.is_empty() {
            return live;
        }
        let n = live.len();
        let mut bits = BooleanBufferBuilder::new(n);
        bits.append_buffer(&live);
        let mut r = 0;
        for &i in touched {
            let key = overlay.key(i);
            while r < n && block.key(start + r) < key {
                r += 1;
            }
            while r < n && block.key(start + r) == key {
                if live.value(r) {
                    bits.set_bit(r, false);
                    if let (Outcome::Partial(cells), Some(c)) = (overlay.outcome(i), self.chain.col) {
                        if let Some(Some(v)) = cells.get(c) {
                            self.chain.patches.push((key.to_vec(), v.clone()));
                        }
                    }
                }
                r += 1;
            }
        }
        bits.finish()
    }

    /// Feeds the live rows of a stretch of versions to the chain's aggregates: `groups[0]` the
    /// versions (with their keys), `at` where the chain's column is among `groups`.
    fn consume(
        &mut self,
        groups: Vec<Vec<Segment>>,
        at: Option<(usize, usize)>,
        live: BooleanBuffer,
        states: &mut [AggState],
    ) -> Result<()> {
        let n = live.count_set_bits();
        if n == 0 {
            return Ok(());
        }
        ScanCounters::add(&self.counters.run_blocks, 1);
        ScanCounters::add(&self.counters.run_rows, n as u64);
        let info = &self.plan.info;
        let mut columns = std::collections::HashMap::new();
        if let (Some(c), Some(at)) = (self.chain.col, at) {
            columns.insert(info.schema.value_columns()[c], at);
        }
        let rows = live.len();
        let mut chunk = BulkChunk {
            plan: self.plan,
            rows,
            groups,
            at: &columns,
            full: Default::default(),
            patch: Default::default(),
        };
        let sel = (n < rows).then_some(live);
        for &ai in &self.chain.aggs {
            let a = &self.plan.aggs[ai];
            let values = match a.column {
                Some((col, _)) => Some(chunk.array(col, sel.as_ref())?),
                None => None,
            };
            states[ai].update(a, n, values.as_ref());
        }
        Ok(())
    }
}
