//! Scans of lineage tables. Each update range is read column by column at the scan's sequence
//! number (base pages with the tail records they have not folded in laid over them by
//! position, `lineage::range`), and handed to the request's consumer as one chunk, with the
//! rows that exist and lie in the key range as its mask. Without aggregates on a table whose
//! rows were not inserted in key order, rows come through the primary index in key order
//! instead.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_buffer::BooleanBuffer;

use super::agg::{finish_batch, AggState};
use super::arrow::ValuesBuilder;
use super::chunk::RowsChunk;
use super::cnf::Test;
use super::consumer::{feed_rows, Consumer, Sink};
use super::eval::{atom_verdict, Verdict};
use super::plan::Plan;
use super::run::BatchIter;
use super::state::{ScanCounters, Scans};
use super::ScanRequest;
use crate::catalog::{Projection, TableInfo};
use crate::error::Result;
use crate::lineage::range::Range;
use crate::lineage::{partition, LineageRows, LineageTable, View};
use crate::sst::zone::ZoneMap;
use crate::types::key::decode_key;
use crate::types::Value;

/// Runs `req` over the keys `[lower, upper)` of lineage table `t` at `seq`.
pub(crate) fn run_lineage_scan(
    scans: &Scans,
    t: &Arc<LineageTable>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    req: &ScanRequest,
    (seq, view): (u64, Arc<View>),
) -> Result<BatchIter> {
    let plan = Arc::new(Plan::new(&t.info, req)?);
    ScanCounters::add(&scans.counters.scans, 1);
    ScanCounters::add(&scans.counters.passes, 1);
    let mut consumer = Consumer::new(plan.clone(), lower.clone(), upper.clone());
    let sorted = t.sorted_at(seq);
    if plan.aggs.is_empty() && !sorted {
        by_index(&plan, &mut consumer, t, (seq, &view), lower, upper)?;
    } else {
        let ranges = if sorted { view.ranges_between(&lower, upper.as_deref(), seq) } else { 0..view.0.len() };
        let ranges = &view.0[ranges];
        let parts = req.partitions.clamp(1, ranges.len().max(1));
        if parts > 1 {
            return partitioned(scans, &plan, t, ranges, parts, (lower, upper), seq, sorted);
        }
        by_positions(&plan, &mut consumer, t, ranges, seq, sorted, &scans.counters)?;
    }
    Ok(BatchIter::ready(plan.schema.clone(), consumer.finish()?))
}

/// The ranges `ranges`, in order, into `consumer`.
fn by_positions(
    plan: &Plan,
    consumer: &mut Consumer,
    t: &LineageTable,
    ranges: &[Arc<Range>],
    seq: u64,
    sorted: bool,
    counters: &ScanCounters,
) -> Result<()> {
    for r in ranges {
        if consumer.done {
            break;
        }
        if ruled_out(plan, t, r, seq) {
            ScanCounters::add(&counters.ranges_skipped, 1);
            continue;
        }
        by_position(plan, consumer, t, r, seq, sorted)?;
    }
    Ok(())
}

/// The ranges split into `parts` runs of neighbouring ranges, each on the scan pool with its own
/// consumer; aggregates merged, rows concatenated in order (and cut at the limit).
#[allow(clippy::too_many_arguments)]
fn partitioned(
    scans: &Scans,
    plan: &Arc<Plan>,
    t: &Arc<LineageTable>,
    ranges: &[Arc<Range>],
    parts: usize,
    (lower, upper): (Vec<u8>, Option<Vec<u8>>),
    seq: u64,
    sorted: bool,
) -> Result<BatchIter> {
    use rayon::prelude::*;
    let chunks: Vec<&[Arc<Range>]> = ranges.chunks(ranges.len().div_ceil(parts)).collect();
    let run = |chunk: &[Arc<Range>]| -> Result<Consumer> {
        let mut c = Consumer::new(plan.clone(), lower.clone(), upper.clone());
        by_positions(plan, &mut c, t, chunk, seq, sorted, &scans.counters)?;
        Ok(c)
    };
    let done: Vec<Result<Consumer>> = scans.pool()?.install(|| chunks.par_iter().map(|c| run(c)).collect());
    if !plan.aggs.is_empty() {
        let mut total = vec![AggState::default(); plan.aggs.len()];
        for c in done {
            if let Sink::Aggs(states) = c?.sink {
                for ((a, t), s) in plan.aggs.iter().zip(total.iter_mut()).zip(states) {
                    t.merge(a, s);
                }
            }
        }
        return Ok(BatchIter::ready(plan.schema.clone(), vec![finish_batch(&plan.aggs, &total)?]));
    }
    let mut batches = Vec::new();
    let mut left = plan.limit.unwrap_or(usize::MAX);
    for c in done {
        for b in c?.finish()? {
            if left == 0 {
                break;
            }
            let b = if b.num_rows() > left { b.slice(0, left) } else { b };
            left -= b.num_rows();
            batches.push(b);
        }
    }
    Ok(BatchIter::ready(plan.schema.clone(), batches))
}

/// One range, column by column: the records inserted at or before `seq`; on a table in key
/// order only the window of them in the consumer's key range (found by binary search), else
/// all of them with the key range in the mask.
fn by_position(
    plan: &Plan,
    consumer: &mut Consumer,
    t: &LineageTable,
    r: &Range,
    seq: u64,
    sorted: bool,
) -> Result<()> {
    let n = r.visible_len(seq);
    let (a, b) = if sorted && n > 0 {
        // Most ranges lie wholly inside the key range: two comparisons tell.
        let lower = consumer.lower.as_slice();
        let a = if r.key(0) >= lower { 0 } else { partition(n, |o| r.key(o) < lower) };
        let b = match consumer.upper.as_deref() {
            Some(u) if r.key(n - 1) >= u => partition(n, |o| r.key(o) < u),
            _ => n,
        };
        (a, b.max(a))
    } else {
        (0, n)
    };
    if a == b {
        return Ok(());
    }
    let in_range = (!sorted).then(|| (a..b).map(|o| consumer.in_range(r.key(o))).collect::<BooleanBuffer>());
    if !plan.aggs.is_empty() && aggregate_window(plan, consumer, t, r, (a, b), seq, in_range.as_ref())? {
        return Ok(());
    }
    let mut mask = r.live_mask(b, seq).slice(a, b - a);
    if let Some(k) = &in_range {
        mask = &mask & k;
    }
    let live = mask.count_set_bits();
    if live == 0 {
        return Ok(());
    }
    let info = &t.info;
    let schema = &info.schema;
    let mut arrays: HashMap<usize, ArrayRef> = HashMap::with_capacity(plan.needed.len());
    let mut keys: Option<Vec<ArrayRef>> = None;
    for &col in &plan.needed {
        let a_full = match schema.value_index(col) {
            Some(vi) => r.column(info.value_types[vi], vi, b, seq),
            None => {
                let ki = schema.primary_key().iter().position(|&k| k == col).unwrap_or(0);
                let ks = match &keys {
                    Some(k) => k,
                    None => keys.insert(key_columns(t, r, b)?),
                };
                ks[ki].clone()
            }
        };
        arrays.insert(col, a_full.slice(a, b - a));
    }
    let mut chunk = RowsChunk { plan, rows: b - a, arrays };
    consumer.consume(&mut chunk, &[], (live < b - a).then_some(mask))
}

/// Whether no row of range `r` at `seq` can pass the filter: some clause whose every atom
/// compares a value column that the range's bounds there ([`Range::bounds`]) put wholly on the
/// wrong side. (Atoms on NULLs, on key columns and on floating-point columns never rule out.)
fn ruled_out(plan: &Plan, t: &LineageTable, r: &Range, seq: u64) -> bool {
    let clauses = plan.filter.clauses();
    if clauses.is_empty() {
        return false;
    }
    let n = r.visible_len(seq);
    let info = &t.info;
    let mut zones: HashMap<usize, Option<ZoneMap>> = HashMap::new();
    let mut zone = |col: usize| -> Option<ZoneMap> {
        zones
            .entry(col)
            .or_insert_with(|| {
                let vi = info.schema.value_index(col)?;
                let (min, max) = r.bounds(info.value_types[vi], vi, n, seq)?;
                // NULL rows never pass a comparison: counting none keeps the verdicts that rule
                // out right (only those are used).
                Some(ZoneMap::bounds(min, max, n as u64))
            })
            .clone()
    };
    clauses.iter().any(|clause| {
        clause.iter().all(|atom| {
            matches!(atom.test, Test::Cmp(..))
                && zone(atom.column).is_some_and(|z| atom_verdict(atom, &z, n as u64) == Verdict::Never)
        })
    })
}

/// Aggregates over a window `[a, b)` of a range without copying its columns: the rows no tail
/// record changed come straight from the pages (zero-copy slices, masked), the few changed ones
/// as a second, small chunk built from their newest tail records. Order does not matter to
/// aggregates. Returns false when a page is newer than `seq` (then the caller reads the window
/// the general way).
fn aggregate_window(
    plan: &Plan,
    consumer: &mut Consumer,
    t: &LineageTable,
    r: &Range,
    (a, b): (usize, usize),
    seq: u64,
    in_range: Option<&BooleanBuffer>,
) -> Result<bool> {
    let info = &t.info;
    let schema = &info.schema;
    let vcols: Vec<(usize, usize)> =
        plan.needed.iter().filter_map(|&col| schema.value_index(col).map(|vi| (col, vi))).collect();
    let pages = r.pages.load();
    let value_cols: Vec<usize> = vcols.iter().map(|&(_, vi)| vi).collect();
    let Some(ch) = r.changes(&pages, &value_cols, b, seq) else { return Ok(false) };
    let mut live = ch.live.slice(a, b - a);
    if let Some(k) = in_range {
        live = &live & k;
    }
    let (untouched, touched) = match &ch.changed {
        Some(changed) => {
            let changed = changed.slice(a, b - a);
            (&live & &!&changed, Some(&live & &changed))
        }
        None => (live, None),
    };
    let keys = || key_columns(t, r, b).map(|ks| ks.into_iter().map(|k| k.slice(a, b - a)).collect::<Vec<_>>());
    // Rows no tail record changed.
    let n_untouched = untouched.count_set_bits();
    if n_untouched > 0 {
        let mut arrays: HashMap<usize, ArrayRef> = HashMap::with_capacity(plan.needed.len());
        let mut key_arrays: Option<Vec<ArrayRef>> = None;
        for &col in &plan.needed {
            let arr = match schema.value_index(col) {
                Some(vi) => r.base_column(&pages.0[vi], info.value_types[vi], vi, a, b),
                None => {
                    let ki = schema.primary_key().iter().position(|&k| k == col).unwrap_or(0);
                    let ks = match &key_arrays {
                        Some(k) => k,
                        None => key_arrays.insert(keys()?),
                    };
                    ks[ki].clone()
                }
            };
            arrays.insert(col, arr);
        }
        let mut chunk = RowsChunk { plan, rows: b - a, arrays };
        consumer.consume(&mut chunk, &[], (n_untouched < b - a).then_some(untouched))?;
    }
    // The changed rows, one by one.
    let rows: Vec<usize> = touched.map_or_else(Vec::new, |t| t.set_indices().map(|i| a + i).collect());
    if !rows.is_empty() {
        let mut arrays: HashMap<usize, ArrayRef> = HashMap::with_capacity(plan.needed.len());
        let mut key_arrays: Option<Vec<ArrayRef>> = None;
        for &col in &plan.needed {
            let arr = match vcols.iter().position(|&(c, _)| c == col) {
                Some(i) => {
                    let vi = vcols[i].1;
                    let ty = info.value_types[vi];
                    let mut bld = ValuesBuilder::new(ty);
                    for &o in &rows {
                        bld.push(&r.value_of(&pages.0[vi], ty, vi, o, &ch.newest[i]));
                    }
                    bld.finish()
                }
                None => {
                    let ki = schema.primary_key().iter().position(|&k| k == col).unwrap_or(0);
                    let ks = match &key_arrays {
                        Some(k) => k,
                        None => key_arrays.insert(keys()?),
                    };
                    let idx = arrow_array::UInt32Array::from_iter_values(rows.iter().map(|&o| (o - a) as u32));
                    arrow_select::take::take(ks[ki].as_ref(), &idx, None)
                        .map_err(|e| crate::error::Error::InvalidArgument(format!("scan: {e}")))?
                }
            };
            arrays.insert(col, arr);
        }
        let mut chunk = RowsChunk { plan, rows: rows.len(), arrays };
        consumer.consume(&mut chunk, &[], None)?;
    }
    Ok(true)
}

/// The key columns of the first `n` base records of `r`, decoded (kept once the range is full).
fn key_columns(t: &LineageTable, r: &Range, n: usize) -> Result<Vec<ArrayRef>> {
    if let Some(k) = r.key_arrays.get() {
        return Ok(k.iter().map(|a| a.slice(0, n.min(a.len()))).collect());
    }
    let types = &t.info.key_types;
    let mut b: Vec<ValuesBuilder> = types.iter().map(|&ty| ValuesBuilder::new(ty)).collect();
    for o in 0..n {
        let vals = decode_key(types, r.key(o)).map_err(|e| crate::error::Error::corruption("<key>", 0, e.0))?;
        for (bi, v) in b.iter_mut().zip(vals.iter().chain(std::iter::repeat(&Value::Null))) {
            bi.push(v);
        }
    }
    let arrays: Vec<ArrayRef> = b.iter_mut().map(ValuesBuilder::finish).collect();
    if n == r.cap {
        let _ = r.key_arrays.set(arrays.clone());
    }
    Ok(arrays)
}

/// Rows in key order through the primary index.
fn by_index(
    plan: &Plan,
    consumer: &mut Consumer,
    t: &Arc<LineageTable>,
    (seq, view): (u64, &Arc<View>),
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
) -> Result<()> {
    let mut rows = LineageRows::new(t.clone(), (seq, view.clone()), lower, upper, &plan.projection());
    by_rows(plan, consumer, || rows.next_row())
}

/// Feeds rows of `plan.needed` (in key order, from `next`) to `consumer` in chunks of the
/// plan's batch size.
fn by_rows(plan: &Plan, consumer: &mut Consumer, mut next: impl FnMut() -> Result<Option<Vec<Value>>>) -> Result<()> {
    let mut builders: Vec<ValuesBuilder> = plan.needed.iter().map(|&c| ValuesBuilder::new(plan.ty(c))).collect();
    let mut n = 0;
    let no_keys: [&[u8]; 0] = [];
    while let Some(row) = next()? {
        for (b, v) in builders.iter_mut().zip(&row) {
            b.push(v);
        }
        n += 1;
        if n == plan.batch_rows {
            feed_rows(plan, std::slice::from_mut(consumer), false, &mut builders, n, &no_keys)?;
            n = 0;
            if consumer.done {
                return Ok(());
            }
        }
    }
    if n > 0 {
        feed_rows(plan, std::slice::from_mut(consumer), false, &mut builders, n, &no_keys)?;
    }
    Ok(())
}

/// Runs `req` over the rows `rows` returns for a projection, in key order, on the caller's
/// thread (a transaction's writes laid over its snapshot, `db/txn.rs`).
pub(crate) fn run_row_scan(
    scans: &Scans,
    info: &Arc<TableInfo>,
    req: &ScanRequest,
    rows: impl FnOnce(&Projection) -> Result<crate::read::ScanIter>,
) -> Result<BatchIter> {
    let plan = Arc::new(Plan::new(info, req)?);
    ScanCounters::add(&scans.counters.scans, 1);
    ScanCounters::add(&scans.counters.passes, 1);
    // The rows come from the range already: the consumer's own range check lets all through.
    let mut consumer = Consumer::new(plan.clone(), Vec::new(), None);
    if !consumer.done {
        let mut rows = rows(&plan.projection())?;
        by_rows(&plan, &mut consumer, || rows.next().transpose())?;
    }
    Ok(BatchIter::ready(plan.schema.clone(), consumer.finish()?))
}
