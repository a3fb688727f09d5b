//! Running a scan request: its read point, its partitions (on the scan pool when more than one)
//! or its shared pass, and the iterator of batches the caller reads.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::agg::{finish_batch, AggState};
use super::consumer::Consumer;
use super::driver::split;
use super::partition::Partition;
use super::plan::Plan;
use super::state::{ScanCounters, Scans};
use super::ScanRequest;
use crate::catalog::TableInfo;
use crate::error::Result;
use crate::read::{record_scan, ReadPoint};

/// Where a scan reads: its read point, taken when the scan starts reading (a shared pass takes
/// it after its members have gathered), and the snapshot the request names, if any (scans
/// naming the same snapshot, or none, may share a pass).
pub(crate) struct ReadAt<'a> {
    pub snapshot: Option<u64>,
    pub point: &'a dyn Fn() -> Result<ReadPoint>,
}

/// The batches of a scan, in key order (one batch for aggregates).
pub struct BatchIter {
    schema: SchemaRef,
    inner: Inner,
}

enum Inner {
    Serial(Box<Partition>),
    /// Partitions running on the scan pool, read in key order; `left` rows of the limit remain.
    Parallel {
        parts: std::collections::VecDeque<std::sync::mpsc::Receiver<Result<RecordBatch>>>,
        left: Option<usize>,
    },
    Ready(std::vec::IntoIter<RecordBatch>),
    Failed,
}

impl BatchIter {
    /// Batches already collected.
    pub(crate) fn ready(schema: SchemaRef, batches: Vec<RecordBatch>) -> BatchIter {
        BatchIter { schema, inner: Inner::Ready(batches.into_iter()) }
    }

    /// The schema every batch has.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

impl Iterator for BatchIter {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = match &mut self.inner {
            Inner::Serial(p) => p.next_batch().transpose(),
            Inner::Parallel { parts, left } => loop {
                if *left == Some(0) {
                    // Dropping the receivers stops the partitions still running.
                    parts.clear();
                    return None;
                }
                let rx = parts.front()?;
                match rx.recv() {
                    Ok(Ok(mut b)) => {
                        if let Some(l) = left {
                            b = b.slice(0, b.num_rows().min(*l));
                            *l -= b.num_rows();
                        }
                        break Some(Ok(b));
                    }
                    Ok(Err(e)) => break Some(Err(e)),
                    // That partition is finished.
                    Err(_) => {
                        parts.pop_front();
                    }
                }
            },
            Inner::Ready(it) => it.next().map(Ok),
            Inner::Failed => None,
        };
        if matches!(item, Some(Err(_))) {
            self.inner = Inner::Failed;
        }
        item
    }
}

/// Runs `req` over the keys `[lower, upper)` of a table.
pub(crate) fn run_scan(
    scans: &Scans,
    info: &Arc<TableInfo>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    req: &ScanRequest,
    at: &ReadAt<'_>,
) -> Result<BatchIter> {
    let plan = Arc::new(Plan::new(info, req)?);
    if req.shared {
        let schema = plan.schema.clone();
        let batches = super::shared::join(scans, info, plan, lower, upper, at)?;
        return Ok(BatchIter { schema, inner: Inner::Ready(batches.into_iter()) });
    }
    let rp = Arc::new((at.point)()?);
    record_scan(info, &rp.t, &lower, upper.as_deref(), Some(plan.wanted()));
    let counters = scans.counters.clone();
    ScanCounters::add(&counters.scans, 1);
    ScanCounters::add(&counters.passes, 1);
    let schema = plan.schema.clone();
    let cuts = split(&plan, &rp, &lower, upper.as_deref(), req.partitions)?;
    let mut ranges = Vec::with_capacity(cuts.len() + 1);
    let mut from = lower;
    for c in cuts {
        ranges.push((std::mem::replace(&mut from, c.clone()), Some(c)));
    }
    ranges.push((from, upper));
    let mut parts = ranges
        .into_iter()
        .map(|(lo, hi)| {
            let consumer = Consumer::new(plan.clone(), lo.clone(), hi.clone());
            Partition::new(plan.clone(), vec![consumer], rp.clone(), counters.clone(), lo, hi)
        })
        .collect::<Result<Vec<_>>>()?;
    let inner = if !plan.aggs.is_empty() {
        let states: Vec<Result<Vec<AggState>>> = if parts.len() == 1 {
            parts.into_iter().map(Partition::into_states).collect()
        } else {
            use rayon::prelude::*;
            scans.pool()?.install(|| parts.into_par_iter().map(Partition::into_states).collect())
        };
        let mut total = vec![AggState::default(); plan.aggs.len()];
        for st in states {
            for ((a, t), s) in plan.aggs.iter().zip(total.iter_mut()).zip(st?) {
                t.merge(a, s);
            }
        }
        Inner::Ready(vec![finish_batch(&plan.aggs, &total)?].into_iter())
    } else if parts.len() == 1 {
        match parts.pop() {
            Some(p) => Inner::Serial(Box::new(p)),
            None => Inner::Ready(Vec::new().into_iter()),
        }
    } else {
        // Each partition streams into its own small channel; partitions start in key order on
        // the pool, and the reader drains them in that order, so the oldest running partition is
        // always being read and progress is guaranteed.
        let pool = scans.pool()?;
        let mut rxs = std::collections::VecDeque::with_capacity(parts.len());
        for mut p in parts {
            let (tx, rx) = std::sync::mpsc::sync_channel(2);
            pool.spawn_fifo(move || loop {
                match p.next_batch() {
                    Ok(Some(b)) => {
                        if tx.send(Ok(b)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            });
            rxs.push_back(rx);
        }
        Inner::Parallel { parts: rxs, left: plan.limit }
    };
    Ok(BatchIter { schema, inner })
}
