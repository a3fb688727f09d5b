//! Running a scan request: its read point, its partitions (on the scan pool when more than one)
//! or its shared pass, and the iterator of batches the caller reads.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::agg::{finish_batch, AggState};
use super::driver::split;
use super::exec::{Consumer, Partition, Plan, ReadPoint, ScanCounters};
use super::ScanRequest;
use crate::catalog::TableInfo;
use crate::db::read::record_scan;
use crate::db::{DbInner, ReadOptions};
use crate::error::{Error, Result};

/// The scan pool (`scan_threads` threads), started on first use.
pub(crate) fn pool(db: &DbInner) -> Result<&rayon::ThreadPool> {
    if let Some(p) = db.scan_pool.get() {
        return Ok(p);
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(db.opts.scan_threads)
        .thread_name(|i| format!("strata-scan-{i}"))
        .build()
        .map_err(|e| Error::io(&db.dir, std::io::Error::other(format!("cannot start scan threads: {e}"))))?;
    Ok(db.scan_pool.get_or_init(|| p))
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
    db: &Arc<DbInner>,
    info: &Arc<TableInfo>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    req: &ScanRequest,
    ropts: &ReadOptions<'_>,
) -> Result<BatchIter> {
    db.check_open()?;
    let plan = Arc::new(Plan::new(info, req)?);
    if req.shared {
        let schema = plan.schema.clone();
        let batches = super::shared::join(db, info, plan, lower, upper, ropts)?;
        return Ok(BatchIter { schema, inner: Inner::Ready(batches.into_iter()) });
    }
    let (seq, view) = db.read_point(ropts)?;
    let t = db.table_at(&view, info)?;
    let wanted = plan.wanted();
    record_scan(info, &t, &lower, upper.as_deref(), Some(wanted));
    let rp = Arc::new(ReadPoint { db: db.clone(), view, t, seq });
    let counters = db.scan_counters.clone();
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
            pool(db)?.install(|| parts.into_par_iter().map(Partition::into_states).collect())
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
        let pool = pool(db)?;
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
