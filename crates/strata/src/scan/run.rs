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
    /// Partitions running on the scan pool, read from `rxs` front first (one channel per
    /// partition in key order, or one shared by all when unordered); `left` rows of the limit
    /// remain.
    Parallel {
        rxs: std::collections::VecDeque<std::sync::mpsc::Receiver<Fed>>,
        feeds: Vec<Arc<Feed>>,
        pool: Arc<rayon::ThreadPool>,
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
            Inner::Parallel { rxs, feeds, pool, left } => loop {
                if *left == Some(0) {
                    // Dropping the receivers stops the partitions still running, and dropping
                    // the feeds the parked ones.
                    rxs.clear();
                    feeds.clear();
                    return None;
                }
                let rx = rxs.front()?;
                match rx.recv() {
                    Ok((i, Ok(mut b))) => {
                        if let Some(f) = feeds.get(i) {
                            taken(f, pool);
                        }
                        if let Some(l) = left {
                            b = b.slice(0, b.num_rows().min(*l));
                            *l -= b.num_rows();
                        }
                        break Some(Ok(b));
                    }
                    Ok((_, Err(e))) => break Some(Err(e)),
                    // That partition is finished (unordered: every partition).
                    Err(_) => {
                        rxs.pop_front();
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

/// Batches a partition on the scan pool may have sent and its reader not yet taken.
const FEED_DEPTH: usize = 2;

/// What a partition sends its reader: its index and a batch or the error that ended it.
type Fed = (usize, Result<RecordBatch>);

/// What a partition on the pool and its reader share.
#[derive(Default)]
struct Feed {
    state: crate::sync::Mutex<FeedState>,
}

#[derive(Default)]
struct FeedState {
    /// Batches sent and not yet taken.
    queued: usize,
    /// The partition while its reader has `FEED_DEPTH` batches to take.
    parked: Option<Parked>,
}

/// A partition off the pool: it resumes by sending `batch` if it has one.
struct Parked {
    index: usize,
    part: Box<Partition>,
    batch: Option<RecordBatch>,
    tx: std::sync::mpsc::Sender<Fed>,
}

/// The reader took a batch of the partition fed through `feed`: if it was parked for want of
/// room, it resumes.
fn taken(feed: &Arc<Feed>, pool: &Arc<rayon::ThreadPool>) {
    let parked = {
        let mut st = feed.state.lock();
        st.queued = st.queued.saturating_sub(1);
        st.parked.take()
    };
    if let Some(p) = parked {
        let feed = feed.clone();
        pool.spawn_fifo(move || produce(p, feed));
    }
}

/// Runs a partition on a pool thread until it ends, its reader goes away, or `FEED_DEPTH`
/// batches wait to be taken: then it parks in `feed` and gives the thread back.
fn produce(mut p: Parked, feed: Arc<Feed>) {
    loop {
        let batch = match p.batch.take() {
            Some(b) => b,
            None => match p.part.next_batch() {
                Ok(Some(b)) => b,
                Ok(None) => return,
                Err(e) => {
                    let _ = p.tx.send((p.index, Err(e)));
                    return;
                }
            },
        };
        {
            let mut st = feed.state.lock();
            if st.queued >= FEED_DEPTH {
                p.batch = Some(batch);
                st.parked = Some(p);
                return;
            }
            st.queued += 1;
        }
        if p.tx.send((p.index, Ok(batch))).is_err() {
            return;
        }
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
        // Each partition streams into its own channel (unordered: one channel for all), holding
        // at most `FEED_DEPTH` batches of it; partitions start in key order on the pool, and the
        // reader drains them in that order (unordered: as they come).
        // A partition whose channel is full parks instead of blocking its pool thread, and the
        // reader restarts it when it takes a batch: the pool is shared by every scan of the
        // database, and a reader may not drain one scan until another has finished (a hash
        // join reads its probe side only after its build side), so a worker blocked on a full
        // channel could hold the very thread the other scan needs.
        let pool = scans.pool()?;
        let mut rxs = std::collections::VecDeque::with_capacity(parts.len());
        let mut feeds = Vec::with_capacity(parts.len());
        let mut shared_tx = None;
        if req.unordered {
            let (tx, rx) = std::sync::mpsc::channel();
            shared_tx = Some(tx);
            rxs.push_back(rx);
        }
        for (index, p) in parts.into_iter().enumerate() {
            let tx = match &shared_tx {
                Some(tx) => tx.clone(),
                None => {
                    let (tx, rx) = std::sync::mpsc::channel();
                    rxs.push_back(rx);
                    tx
                }
            };
            let feed = Arc::new(Feed::default());
            feeds.push(feed.clone());
            pool.spawn_fifo(move || produce(Parked { index, part: Box::new(p), batch: None, tx }, feed));
        }
        Inner::Parallel { rxs, feeds, pool: pool.clone(), left: plan.limit }
    };
    Ok(BatchIter { schema, inner })
}
