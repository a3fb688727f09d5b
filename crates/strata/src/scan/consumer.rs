//! The requests a pass serves: each filters the chunks of rows the pass produces and collects
//! what passes (rows into batches, or aggregate states).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_buffer::BooleanBuffer;
use arrow_select::coalesce::BatchCoalescer;

use super::agg::{finish_batch, AggState};
use super::arrow::{arrow_err, ValuesBuilder};
use super::chunk::{Chunk, RowsChunk};
use super::eval::Verdict;
use super::plan::Plan;
use crate::error::Result;

/// Rows (or aggregate states) produced so far.
pub(super) enum Sink {
    Rows { coalescer: BatchCoalescer, emitted: usize },
    Aggs(Vec<AggState>),
}

/// One request served by a pass: its plan, key range and output so far.
pub(crate) struct Consumer {
    pub(super) plan: Arc<Plan>,
    pub(super) lower: Vec<u8>,
    pub(super) upper: Option<Vec<u8>>,
    pub(super) sink: Sink,
    pub(super) done: bool,
}

impl Consumer {
    pub(crate) fn new(plan: Arc<Plan>, lower: Vec<u8>, upper: Option<Vec<u8>>) -> Consumer {
        let sink = if plan.aggs.is_empty() {
            Sink::Rows { coalescer: BatchCoalescer::new(plan.schema.clone(), plan.batch_rows), emitted: 0 }
        } else {
            Sink::Aggs(vec![AggState::default(); plan.aggs.len()])
        };
        let done = plan.filter.is_false() || plan.limit == Some(0);
        Consumer { plan, lower, upper, sink, done }
    }

    /// Where `[lo, hi)` lies against this consumer's range: `Some(true)` inside, `Some(false)`
    /// outside, `None` partly.
    pub(super) fn covers(&self, lo: &[u8], hi: &[u8]) -> Option<bool> {
        let after_start = lo >= self.lower.as_slice();
        let before_end = self.upper.as_deref().is_none_or(|u| hi <= u);
        if after_start && before_end {
            Some(true)
        } else if hi <= self.lower.as_slice() || self.upper.as_deref().is_some_and(|u| lo >= u) {
            Some(false)
        } else {
            None
        }
    }

    pub(super) fn in_range(&self, key: &[u8]) -> bool {
        key >= self.lower.as_slice() && self.upper.as_deref().is_none_or(|u| key < u)
    }

    /// What the consumer produced: its batches, or its one aggregate batch.
    pub(crate) fn finish(self) -> Result<Vec<RecordBatch>> {
        match self.sink {
            Sink::Aggs(states) => Ok(vec![finish_batch(&self.plan.aggs, &states)?]),
            Sink::Rows { mut coalescer, .. } => {
                coalescer.finish_buffered_batch().map_err(arrow_err)?;
                Ok(std::iter::from_fn(|| coalescer.next_completed_batch()).collect())
            }
        }
    }

    /// Filters a chunk (only the rows of `range_mask` when given) and feeds what passes to the
    /// sink. `verdicts` (per clause, from zone maps; empty when unknown) lets clauses true on
    /// every row go unevaluated.
    pub(super) fn consume(
        &mut self,
        chunk: &mut dyn Chunk,
        verdicts: &[Verdict],
        range_mask: Option<BooleanBuffer>,
    ) -> Result<()> {
        let rows = chunk.rows();
        if rows == 0 || self.done {
            return Ok(());
        }
        let mut mask = range_mask;
        for (i, clause) in self.plan.filter.clauses().iter().enumerate() {
            if verdicts.get(i) == Some(&Verdict::Always) {
                continue;
            }
            let mut any: Option<BooleanBuffer> = None;
            for atom in clause {
                let m = chunk.atom_mask(atom)?;
                any = Some(match any {
                    None => m,
                    Some(a) => &a | &m,
                });
            }
            let m = any.unwrap_or_else(|| BooleanBuffer::new_unset(rows));
            let m = match mask {
                None => m,
                Some(prev) => &prev & &m,
            };
            if m.count_set_bits() == 0 {
                return Ok(());
            }
            mask = Some(m);
        }
        let passing = mask.as_ref().map_or(rows, BooleanBuffer::count_set_bits);
        if passing == 0 {
            return Ok(());
        }
        let sel = mask.filter(|_| passing < rows);
        match &mut self.sink {
            Sink::Aggs(states) => {
                for (a, st) in self.plan.aggs.iter().zip(states.iter_mut()) {
                    let values = match (a.column, &sel) {
                        (Some((col, _)), None) => Some(chunk.array(col, None)?),
                        // Most rows pass: mask the others out as NULLs (aggregates skip NULLs)
                        // instead of copying the rest.
                        (Some((col, _)), Some(s)) if passing * 4 > rows => {
                            let all = chunk.array(col, None)?;
                            match masked(&all, s) {
                                Some(m) => Some(m),
                                None => Some(chunk.array(col, Some(s))?),
                            }
                        }
                        (Some((col, _)), Some(s)) => Some(chunk.array(col, Some(s))?),
                        (None, _) => None,
                    };
                    st.update(a, passing, values.as_ref());
                }
            }
            Sink::Rows { coalescer, emitted } => {
                let arrays =
                    self.plan.out_cols.iter().map(|&c| chunk.array(c, sel.as_ref())).collect::<Result<Vec<_>>>()?;
                let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(passing));
                let mut batch =
                    RecordBatch::try_new_with_options(self.plan.schema.clone(), arrays, &options).map_err(arrow_err)?;
                if let Some(limit) = self.plan.limit {
                    let left = limit.saturating_sub(*emitted);
                    if batch.num_rows() >= left {
                        batch = batch.slice(0, left);
                        self.done = true;
                    }
                }
                *emitted += batch.num_rows();
                coalescer.push_batch(batch).map_err(arrow_err)?;
            }
        }
        Ok(())
    }
}

/// Feeds the `n` rows pushed into `builders` (one per column `pass` needs) to every consumer;
/// when the pass is `ranged`, each consumer sees only the rows whose `keys` lie in its range.
pub(super) fn feed_rows<K: AsRef<[u8]>>(
    pass: &Plan,
    consumers: &mut [Consumer],
    ranged: bool,
    builders: &mut [ValuesBuilder],
    n: usize,
    keys: &[K],
) -> Result<()> {
    let arrays: HashMap<usize, ArrayRef> =
        pass.needed.iter().copied().zip(builders.iter_mut().map(ValuesBuilder::finish)).collect();
    let mut chunk = RowsChunk { plan: pass, rows: n, arrays };
    for c in consumers {
        let mask = ranged.then(|| keys.iter().map(|k| c.in_range(k.as_ref())).collect::<BooleanBuffer>());
        c.consume(&mut chunk, &[], mask)?;
    }
    Ok(())
}

/// `a` with the rows not in `sel` turned into NULLs, sharing `a`'s values (numeric arrays;
/// `None` for others).
fn masked(a: &ArrayRef, sel: &BooleanBuffer) -> Option<ArrayRef> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type};
    use arrow_array::{Array, PrimitiveArray};
    use arrow_buffer::NullBuffer;
    use arrow_schema::DataType;
    let nulls = NullBuffer::new(match a.nulls() {
        Some(n) => n.inner() & sel,
        None => sel.clone(),
    });
    macro_rules! with_nulls {
        ($t:ty) => {
            Arc::new(PrimitiveArray::<$t>::new(a.as_primitive::<$t>().values().clone(), Some(nulls))) as ArrayRef
        };
    }
    Some(match a.data_type() {
        DataType::Int64 => with_nulls!(Int64Type),
        DataType::Int32 => with_nulls!(Int32Type),
        DataType::Int16 => with_nulls!(Int16Type),
        DataType::Int8 => with_nulls!(Int8Type),
        DataType::Float64 => with_nulls!(Float64Type),
        DataType::Float32 => with_nulls!(Float32Type),
        _ => return None,
    })
}
