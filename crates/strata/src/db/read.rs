//! Handing out read points: a sequence number and the read view holding everything at or below
//! it, taken together (see [`DbInner::read_point`]), and the history reads as of a past point
//! reach into. The reading itself lives in [`crate::read`] and [`crate::scan`].

use std::sync::Arc;

use arc_swap::Guard;
use std::time::{Duration, SystemTime};

use super::{DbInner, ReadOptions, ReadView, TableInfo};
use crate::catalog::Projection;
use crate::error::{Error, Result};
use crate::mvcc::clock::{time_of, unix_ms, Clock};
use crate::mvcc::snapshot::Snapshot;
use crate::read::{record_scan, PointAt, ReadPoint, ScanIter};
use crate::types::row::Cells;

/// A point in the past to read at: [`Db::snapshot_as_of`](super::Db::snapshot_as_of).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsOf {
    /// The writes with sequence numbers up to this one, whole batches only: a point inside a
    /// batch or transaction of several writes (short of its last) reads as of just before it.
    Seq(u64),
    /// The writes committed at or before this time (to the millisecond).
    Time(SystemTime),
}

/// How far back reads as of a past point can reach ([`Db::history`](super::Db::history)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct History {
    /// The history retention window ([`Options::history_retention`](super::Options::history_retention));
    /// zero when versions are kept only for live snapshots.
    pub retention: Duration,
    /// The oldest sequence number a new snapshot can read at.
    pub oldest_seq: u64,
    /// The newest sequence number.
    pub newest_seq: u64,
    /// The oldest time a read as of a time can name, when the clock reaches back that far.
    pub oldest_time: Option<SystemTime>,
}

/// The oldest sequence number a window of `retention_ms` still covers (`u64::MAX` without a
/// window): the newest write committed at or before the window's start; 0 when the clock does
/// not reach back that far (then everything it knows is in the window).
pub(crate) fn history_horizon(clock: &Clock, retention_ms: u64) -> u64 {
    if retention_ms == 0 {
        return u64::MAX;
    }
    let start = unix_ms(SystemTime::now()).saturating_sub(retention_ms);
    clock.seq_at(start).unwrap_or(0)
}

/// `t` as an RFC 3339 UTC time, for messages.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl DbInner {
    /// The oldest sequence number the history retention window still covers: flush and
    /// compaction keep every version newer than it.
    pub(crate) fn history_horizon(&self) -> u64 {
        history_horizon(&self.commit.clock.lock(), self.config.retention_ms)
    }

    /// How far back reads can reach now.
    pub(crate) fn history(&self) -> History {
        let oldest_seq = self.snapshots.floor().min(self.snapshots.visible());
        // The oldest time that resolves to a readable sequence number.
        let oldest_time = self.commit.clock.lock().time_of_seq(oldest_seq).map(time_of);
        History {
            retention: Duration::from_millis(self.config.retention_ms),
            oldest_seq,
            newest_seq: self.snapshots.visible(),
            oldest_time,
        }
    }

    /// A snapshot at a past point, pinned until it is dropped.
    pub(crate) fn snapshot_as_of(&self, at: AsOf) -> Result<Snapshot> {
        self.check_open()?;
        let seq = match at {
            AsOf::Seq(seq) => {
                let batches = self.commit.batches.lock();
                batches.round_down(seq).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "cannot read as of sequence {seq}: where atomic batches begin and end is known only from \
                         sequence {} on (the database was written by an older build, or more batches committed \
                         since than are kept); read as of a time instead",
                        batches.start()
                    ))
                })?
            }
            AsOf::Time(t) => {
                let now = SystemTime::now();
                if t > now {
                    return Err(Error::InvalidArgument(format!(
                        "cannot read as of {}: it is in the future (now is {})",
                        rfc3339(t),
                        rfc3339(now)
                    )));
                }
                let resolved = self.commit.clock.lock().seq_at(unix_ms(t));
                resolved.ok_or_else(|| self.outside_history(&rfc3339(t)))?
            }
        };
        let what = match at {
            AsOf::Seq(asked) if asked != seq => format!("sequence {asked} (before its batch: sequence {seq})"),
            AsOf::Seq(seq) => format!("sequence {seq}"),
            AsOf::Time(t) => format!("{} (sequence {seq})", rfc3339(t)),
        };
        Snapshot::at(self.snapshots.clone(), seq).ok_or_else(|| self.outside_history(&what))
    }

    fn outside_history(&self, what: &str) -> Error {
        let h = self.history();
        let since = h.oldest_time.map_or(String::new(), |t| format!(", since {}", rfc3339(t)));
        let window = if h.retention.is_zero() {
            "no history retention window is set, so older versions are kept only for snapshots taken \
             while they were current"
                .to_string()
        } else {
            format!("the history retention window is {} s", h.retention.as_secs_f64())
        };
        Error::InvalidArgument(format!(
            "cannot read as of {what}: readable sequence numbers are {}..={}{since} ({window})",
            h.oldest_seq, h.newest_seq
        ))
    }

    /// The sequence number to read at and a view holding everything at or below it.
    pub(crate) fn read_point(&self, ropts: &ReadOptions<'_>) -> Result<(u64, Arc<ReadView>)> {
        match self.snapshot_seq(ropts)? {
            Some(seq) => Ok((seq, self.view.load())),
            None => {
                let (seq, view) = self.newest_point();
                crate::sync::shared_write();
                Ok((seq, Guard::into_inner(view)))
            }
        }
    }

    /// The visible sequence number and a pinned view holding every write at or below it, taken
    /// without a lock: the view first, then the sequence number, then the view again.
    ///
    /// - Versions the read needs are all in the view: flush and compaction install a view only
    ///   after capturing the visible sequence number their outputs keep every version above, and
    ///   the sequence number is read after the view, so it is at least that.
    /// - Writes at or below the sequence number are all in the view's memtables: a write goes
    ///   into the memtable of the current view before it is published, so one published into a
    ///   memtable this view lacks was preceded by a new view, and the second look sees it (then
    ///   the pair is taken again).
    pub(crate) fn newest_point(&self) -> (u64, Guard<Arc<ReadView>>) {
        loop {
            let view = self.view.pin();
            let seq = self.snapshots.visible();
            if self.view.is_current(&view) {
                return (seq, view);
            }
        }
    }

    /// The sequence number of the snapshot `ropts` names, if any (refused when it belongs to
    /// another database).
    pub(crate) fn snapshot_seq(&self, ropts: &ReadOptions<'_>) -> Result<Option<u64>> {
        match ropts.snapshot {
            Some(s) if !s.belongs_to(&self.snapshots) => {
                Err(Error::InvalidArgument("the snapshot belongs to another database".into()))
            }
            s => Ok(s.map(|s| s.seq())),
        }
    }

    /// A read point of table `info` (the database must be open).
    pub(crate) fn read_point_of(&self, info: &TableInfo, ropts: &ReadOptions<'_>) -> Result<ReadPoint> {
        self.check_open()?;
        let (seq, view) = self.read_point(ropts)?;
        let t = view.version.tables.get(&info.id).cloned().ok_or_else(|| Error::UnknownTable(info.name.clone()))?;
        let staging = self.stores.pin().get(&info.id).map(|s| s.staging.clone());
        Ok(ReadPoint {
            tables: self.tables.clone(),
            snapshot_filter: self.config.opts.snapshot_filter,
            view,
            t,
            seq,
            staging,
        })
    }

    /// The cells of each of `keys` (encoded) at one read point, in the order given; see
    /// [`Table::multi_get`](crate::Table::multi_get).
    pub(crate) fn multi_get_cells(
        &self,
        info: &TableInfo,
        keys: &[Vec<u8>],
        wanted: Option<&[bool]>,
        ropts: &ReadOptions<'_>,
    ) -> Result<Vec<Option<Cells>>> {
        self.check_open()?;
        let (seq, view) = self.read_point(ropts)?;
        let t = view.version.tables.get(&info.id).ok_or_else(|| Error::UnknownTable(info.name.clone()))?;
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_unstable_by(|&a, &b| keys[a].cmp(&keys[b]));
        // One key range, in key order: consecutive keys meet the same files and blocks.
        let read = |range: &[usize]| -> Result<Vec<Option<Cells>>> {
            let at = PointAt {
                tables: &self.tables,
                snapshot_filter: self.config.opts.snapshot_filter,
                view: &view,
                t,
                seq,
            };
            range.iter().map(|&i| at.get_cells(info, &keys[i], wanted, true)).collect()
        };
        let threads = self.config.opts.point_threads.max(1);
        let parts: Vec<Vec<Option<Cells>>> = if keys.len() >= super::MULTI_GET_PARALLEL && threads > 1 {
            // The caller reads the first key range itself and the pool the others, so a batch
            // wakes one thread fewer and the caller never sleeps waiting on work it could do.
            let chunks: Vec<&[usize]> = order.chunks(order.len().div_ceil(threads)).collect();
            let done: Vec<std::sync::OnceLock<Result<Vec<Option<Cells>>>>> =
                chunks.iter().map(|_| std::sync::OnceLock::new()).collect();
            self.point_pool()?.in_place_scope(|s| {
                for (c, slot) in chunks.iter().zip(&done).skip(1) {
                    let read = &read;
                    s.spawn(move |_| {
                        let _ = slot.set(read(c));
                    });
                }
                let _ = done[0].set(read(chunks[0]));
            });
            done.into_iter()
                .map(|d| {
                    d.into_inner().unwrap_or_else(|| {
                        Err(Error::io("<point threads>", std::io::Error::other("a point-read task did not finish")))
                    })
                })
                .collect::<Result<Vec<_>>>()?
        } else {
            vec![read(&order)?]
        };
        let mut out: Vec<Option<Cells>> = vec![None; keys.len()];
        for (&i, cells) in order.iter().zip(parts.into_iter().flatten()) {
            out[i] = cells;
        }
        Ok(out)
    }

    /// The threads batched point reads run on, started on first use.
    fn point_pool(&self) -> Result<&rayon::ThreadPool> {
        if let Some(p) = self.point_pool.get() {
            return Ok(p);
        }
        let p = crate::sync::start_pool(self.config.opts.point_threads, "strata-point", "point-read threads")?;
        Ok(self.point_pool.get_or_init(|| p))
    }

    /// A point read: the view is pinned, not reference-counted, and the table's version, its
    /// files' readers and the blocks read are borrowed (see [`PointAt`]).
    pub(crate) fn get_cells(
        &self,
        info: &TableInfo,
        key: &[u8],
        wanted: Option<&[bool]>,
        ropts: &ReadOptions<'_>,
    ) -> Result<Option<Cells>> {
        self.check_open()?;
        let (seq, view) = match self.snapshot_seq(ropts)? {
            Some(seq) => (seq, self.view.pin()),
            None => self.newest_point(),
        };
        let t = view.version.tables.get(&info.id).ok_or_else(|| Error::UnknownTable(info.name.clone()))?;
        let at =
            PointAt { tables: &self.tables, snapshot_filter: self.config.opts.snapshot_filter, view: &view, t, seq };
        at.get_cells(info, key, wanted, true)
    }

    pub(crate) fn scan(
        &self,
        info: &Arc<TableInfo>,
        lower: Vec<u8>,
        upper: Option<Vec<u8>>,
        projection: &Projection,
        ropts: &ReadOptions<'_>,
    ) -> Result<ScanIter> {
        let rp = self.read_point_of(info, ropts)?;
        record_scan(info, &rp.t, &lower, upper.as_deref(), projection.wanted().map(|w| &w[..]));
        Ok(rp.rows(info, lower, upper, projection))
    }
}
