//! Shared scans (TellStore §6.2): scans of one table that arrive within a short window are served
//! by one pass over the data. The first to arrive leads: it waits the window, takes everyone who
//! joined, reads the union of their columns over the union of their ranges once, and hands each
//! its own filtered, projected or aggregated result.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::Arc;

use crate::sync::Mutex;
use arrow_array::RecordBatch;

use super::consumer::Consumer;
use super::partition::Partition;
use super::plan::Plan;
use super::run::ReadAt;
use super::state::{ScanCounters, Scans};
use crate::catalog::TableInfo;
use crate::error::{Error, Result};
use crate::read::record_scan;

/// A scan waiting for its shared pass.
struct Member {
    plan: Arc<Plan>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    reply: mpsc::Sender<Result<Vec<RecordBatch>>>,
}

/// Which scans may share a pass: same table, same snapshot (`None`: the newest data).
type PassKey = (u32, Option<u64>);

/// Scans gathering for a pass.
#[derive(Default)]
pub(crate) struct SharedScans {
    gathering: Mutex<HashMap<PassKey, Vec<Member>>>,
}

/// The same error for another member of a failed pass.
fn copy_error(e: &Error) -> Error {
    match e {
        Error::Corruption { path, offset, reason } => Error::corruption(path.clone(), *offset, reason.clone()),
        Error::Io { path, source } => Error::io(path.clone(), std::io::Error::new(source.kind(), source.to_string())),
        Error::Closed => Error::Closed,
        other => Error::InvalidArgument(format!("shared scan failed: {other}")),
    }
}

/// Joins (or leads) the shared pass for `plan` over `[lower, upper)` and returns its result.
pub(crate) fn join(
    scans: &Scans,
    info: &Arc<TableInfo>,
    plan: Arc<Plan>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    at: &ReadAt<'_>,
) -> Result<Vec<RecordBatch>> {
    let key = (info.id, at.snapshot);
    let (tx, rx) = mpsc::channel();
    let leader = {
        let mut g = scans.shared.gathering.lock();
        let list = g.entry(key).or_default();
        list.push(Member { plan, lower, upper, reply: tx });
        list.len() == 1
    };
    if leader {
        std::thread::sleep(scans.window);
        let members = scans.shared.gathering.lock().remove(&key).unwrap_or_default();
        let replies: Vec<_> = members.iter().map(|m| m.reply.clone()).collect();
        match pass(scans, info, members, at) {
            Ok(results) => {
                for (r, res) in replies.iter().zip(results) {
                    let _ = r.send(Ok(res));
                }
            }
            Err(e) => {
                for r in &replies {
                    let _ = r.send(Err(copy_error(&e)));
                }
            }
        }
    }
    rx.recv().map_err(|_| Error::InvalidArgument("shared scan: the pass ended without an answer".into()))?
}

/// One pass serving `members`, on the scan pool. Results in member order.
fn pass(scans: &Scans, info: &Arc<TableInfo>, members: Vec<Member>, at: &ReadAt<'_>) -> Result<Vec<Vec<RecordBatch>>> {
    let plans: Vec<Arc<Plan>> = members.iter().map(|m| m.plan.clone()).collect();
    let pass_plan = Arc::new(Plan::pass(info, &plans));
    let lower = members.iter().map(|m| m.lower.clone()).min().unwrap_or_default();
    let upper = if members.iter().any(|m| m.upper.is_none()) {
        None
    } else {
        members.iter().filter_map(|m| m.upper.clone()).max()
    };
    let rp = Arc::new((at.point)()?);
    for m in &members {
        record_scan(info, &rp.t, &m.lower, m.upper.as_deref(), Some(m.plan.wanted()));
    }
    let counters = scans.counters.clone();
    ScanCounters::add(&counters.scans, members.len() as u64);
    ScanCounters::add(&counters.passes, 1);
    let consumers = members.into_iter().map(|m| Consumer::new(m.plan, m.lower, m.upper)).collect();
    let part = Partition::new(pass_plan, consumers, rp, counters, lower, upper)?;
    let done = scans.pool()?.install(|| part.run())?;
    done.into_iter().map(Consumer::finish).collect()
}
