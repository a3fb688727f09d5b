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

use super::arrow::ValuesBuilder;
use super::chunk::RowsChunk;
use super::consumer::{feed_rows, Consumer};
use super::plan::Plan;
use super::run::BatchIter;
use super::state::{ScanCounters, Scans};
use super::ScanRequest;
use crate::catalog::Projection;
use crate::error::Result;
use crate::lineage::range::Range;
use crate::lineage::{LineageRows, LineageTable};
use crate::types::key::decode_key;
use crate::types::Value;

/// Runs `req` over the keys `[lower, upper)` of lineage table `t` at `seq`.
pub(crate) fn run_lineage_scan(
    scans: &Scans,
    t: &Arc<LineageTable>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    req: &ScanRequest,
    seq: u64,
) -> Result<BatchIter> {
    let plan = Arc::new(Plan::new(&t.info, req)?);
    ScanCounters::add(&scans.counters.scans, 1);
    ScanCounters::add(&scans.counters.passes, 1);
    let mut consumer = Consumer::new(plan.clone(), lower.clone(), upper.clone());
    if plan.aggs.is_empty() && !t.sorted() {
        by_index(&plan, &mut consumer, t, lower, upper, seq)?;
    } else {
        for i in 0..t.ranges() {
            if consumer.done {
                break;
            }
            if let Some(r) = t.range(i) {
                by_position(&plan, &mut consumer, t, r, seq)?;
            }
        }
    }
    Ok(BatchIter::ready(plan.schema.clone(), consumer.finish()?))
}

/// One range, column by column.
fn by_position(plan: &Plan, consumer: &mut Consumer, t: &LineageTable, r: &Range, seq: u64) -> Result<()> {
    let n = r.len.load(std::sync::atomic::Ordering::Acquire) as usize;
    if n == 0 {
        return Ok(());
    }
    let live = r.live_mask(n, seq);
    let mask: BooleanBuffer = (0..n).map(|o| live[o] && consumer.in_range(r.key(o))).collect();
    if mask.count_set_bits() == 0 {
        return Ok(());
    }
    let info = &t.info;
    let schema = &info.schema;
    let mut arrays: HashMap<usize, ArrayRef> = HashMap::with_capacity(plan.needed.len());
    let mut keys: Option<Vec<ArrayRef>> = None;
    for &col in &plan.needed {
        let a = match schema.value_index(col) {
            Some(vi) => r.column(info.value_types[vi], vi, n, seq),
            None => {
                let ki = schema.primary_key().iter().position(|&k| k == col).unwrap_or(0);
                let ks = match &keys {
                    Some(k) => k,
                    None => keys.insert(key_columns(t, r, n)?),
                };
                ks[ki].clone()
            }
        };
        arrays.insert(col, a);
    }
    let mut chunk = RowsChunk { plan, rows: n, arrays };
    consumer.consume(&mut chunk, &[], Some(mask))
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
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    seq: u64,
) -> Result<()> {
    let info = &t.info;
    let projection = {
        let mut wanted = vec![false; info.value_types.len()];
        for &c in &plan.needed {
            if let Some(vi) = info.schema.value_index(c) {
                wanted[vi] = true;
            }
        }
        Projection::Columns { cols: plan.needed.clone().into(), wanted: wanted.into() }
    };
    let mut rows = LineageRows::new(t.clone(), seq, lower, upper, &projection);
    let mut builders: Vec<ValuesBuilder> = plan.needed.iter().map(|&c| ValuesBuilder::new(plan.ty(c))).collect();
    let mut n = 0;
    let no_keys: [&[u8]; 0] = [];
    while let Some(row) = rows.next_row()? {
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
