//! First-committer-wins for transactions: which rows were committed after an open transaction's
//! snapshot, so its commit can be refused when it wrote one of them too (snapshot isolation).
//!
//! Every commit is recorded here while at least one write transaction is open, whether it comes
//! from a transaction or a plain [`WriteBatch`](crate::WriteBatch): a row is recorded with the
//! sequence number of its newest write. A transaction conflicts when a row it wrote has a
//! recorded commit newer than its snapshot. Only the commit leader records and checks, one group
//! at a time, so checking and sequence numbers are one step. Entries no open transaction can
//! conflict with (at or below the oldest open snapshot) are dropped; with no transaction open
//! nothing is kept. Past the byte budget the oldest entries go too and the *horizon* rises: a
//! transaction whose snapshot is below it can no longer be checked and is refused at commit.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

/// A row: table id and encoded key.
pub(crate) type RowId = (u32, Vec<u8>);

/// Why a transaction may not commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lost {
    /// This row was committed by someone else after the transaction's snapshot.
    Row { table: u32, key: Vec<u8>, seq: u64 },
    /// The window no longer reaches back to the snapshot (it was trimmed to its budget).
    TooOld { horizon: u64 },
}

/// Bytes a recorded commit is charged: its key in the queue and (at most once per row) in the
/// map, and the bookkeeping around them.
fn charge(key: &[u8]) -> usize {
    2 * key.len() + 64
}

/// Recent commits of rows, kept while write transactions are open.
#[derive(Debug, Default)]
pub(crate) struct ConflictWindow {
    /// Each recorded row's newest commit.
    newest: HashMap<RowId, u64>,
    /// Recorded commits in sequence order, for trimming: (sequence number, row).
    order: VecDeque<(u64, RowId)>,
    /// Snapshots of the open write transactions (sequence number → how many).
    open: BTreeMap<u64, usize>,
    /// Commits at or below this may be missing from the window.
    horizon: u64,
    bytes: usize,
    budget: usize,
}

impl ConflictWindow {
    /// A window of at most about `budget` bytes.
    pub(crate) fn new(budget: usize) -> Self {
        ConflictWindow { budget, ..Default::default() }
    }

    /// Whether commits must be recorded now (a write transaction is open).
    pub(crate) fn is_recording(&self) -> bool {
        !self.open.is_empty()
    }

    /// A write transaction reading at `snapshot` opens. The caller holds the window's lock while
    /// it takes the snapshot, so every commit after it is recorded.
    pub(crate) fn open(&mut self, snapshot: u64) {
        *self.open.entry(snapshot).or_insert(0) += 1;
    }

    /// The transaction opened at `snapshot` ended (committed, lost or rolled back).
    pub(crate) fn close(&mut self, snapshot: u64) {
        if let Some(n) = self.open.get_mut(&snapshot) {
            *n -= 1;
            if *n == 0 {
                self.open.remove(&snapshot);
            }
        }
        self.trim();
    }

    /// Whether a transaction reading at `snapshot` may commit writes to `rows`: no recorded
    /// commit of one of them is newer than the snapshot, and none in `group` (rows this commit
    /// group writes ahead of it, all newer than any snapshot).
    #[cfg(test)]
    pub(crate) fn check<'a>(
        &self,
        snapshot: u64,
        rows: impl IntoIterator<Item = &'a RowId>,
        group: &HashSet<RowId>,
    ) -> Result<(), Lost> {
        self.check_each(rows.into_iter().map(|r| (r, snapshot)), group)
    }

    /// As [`Self::check`], each row against its own base: the sequence number its writer last
    /// knew it at (a READ COMMITTED transaction reads each row at the snapshot of the statement
    /// that locked or wrote it, not at the transaction's first).
    pub(crate) fn check_each<'a>(
        &self,
        rows: impl IntoIterator<Item = (&'a RowId, u64)>,
        group: &HashSet<RowId>,
    ) -> Result<(), Lost> {
        for (row, base) in rows {
            if base < self.horizon {
                return Err(Lost::TooOld { horizon: self.horizon });
            }
            let newer = match self.newest.get(row) {
                Some(&seq) if seq > base => Some(seq),
                _ => group.contains(row).then_some(u64::MAX),
            };
            if let Some(seq) = newer {
                return Err(Lost::Row { table: row.0, key: row.1.clone(), seq });
            }
        }
        Ok(())
    }

    /// `row` was committed at `seq` (newer than everything recorded before). Only while
    /// [`Self::is_recording`].
    pub(crate) fn record(&mut self, seq: u64, table: u32, key: &[u8]) {
        let row = (table, key.to_vec());
        self.bytes += charge(key);
        match self.newest.get_mut(&row) {
            Some(newest) => *newest = seq,
            None => {
                self.newest.insert(row.clone(), seq);
            }
        }
        self.order.push_back((seq, row));
    }

    /// Commits at or below `seq` can no longer be checked (an ingest at `seq` wrote rows the
    /// window does not hold): transactions with older snapshots are refused at commit.
    pub(crate) fn raise_horizon(&mut self, seq: u64) {
        self.horizon = self.horizon.max(seq);
    }

    /// Drops what no open transaction can conflict with, then the oldest entries past the
    /// budget (raising the horizon).
    pub(crate) fn trim(&mut self) {
        let Some(&oldest) = self.open.keys().next() else {
            self.newest.clear();
            self.order.clear();
            self.bytes = 0;
            return;
        };
        while let Some((seq, _)) = self.order.front() {
            let over = self.bytes > self.budget;
            if *seq > oldest && !over {
                break;
            }
            let Some((seq, row)) = self.order.pop_front() else { break };
            if over && seq > oldest {
                self.horizon = self.horizon.max(seq);
            }
            self.bytes = self.bytes.saturating_sub(charge(&row.1));
            // The row's entry goes only with its newest commit.
            if self.newest.get(&row) == Some(&seq) {
                self.newest.remove(&row);
            }
        }
    }

    /// Rows recorded now.
    #[cfg(test)]
    pub(crate) fn rows(&self) -> usize {
        self.newest.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(k: u8) -> RowId {
        (1, vec![k])
    }

    #[test]
    fn a_row_committed_after_the_snapshot_conflicts_and_one_before_does_not() {
        let mut w = ConflictWindow::new(1 << 20);
        w.open(10);
        w.record(11, 1, &[1]);
        let none = HashSet::new();
        assert_eq!(w.check(10, [&row(1)], &none), Err(Lost::Row { table: 1, key: vec![1], seq: 11 }));
        assert_eq!(w.check(11, [&row(1)], &none), Ok(()));
        assert_eq!(w.check(10, [&row(2)], &none), Ok(()));
        // A row written earlier in the same commit group always conflicts.
        let group: HashSet<RowId> = [row(2)].into_iter().collect();
        assert!(matches!(w.check(10, [&row(2)], &group), Err(Lost::Row { seq: u64::MAX, .. })));
    }

    #[test]
    fn entries_go_once_no_open_transaction_needs_them() {
        let mut w = ConflictWindow::new(1 << 20);
        w.open(10);
        w.open(20);
        w.record(15, 1, &[1]);
        w.record(25, 1, &[2]);
        w.close(10);
        // Only snapshot 20 is open: the commit at 15 cannot conflict with it.
        assert_eq!(w.rows(), 1);
        assert_eq!(w.check(20, [&row(2)], &HashSet::new()).map_err(|_| ()), Err(()));
        w.close(20);
        assert!(!w.is_recording());
        assert_eq!(w.rows(), 0);
    }

    #[test]
    fn a_row_recommitted_keeps_its_newest_commit_through_trimming() {
        let mut w = ConflictWindow::new(1 << 20);
        w.open(10);
        w.record(11, 1, &[1]);
        w.open(12);
        w.record(13, 1, &[1]);
        w.close(10);
        // The commit at 11 is trimmed; the row's entry (13) stays for snapshot 12.
        assert_eq!(w.check(12, [&row(1)], &HashSet::new()), Err(Lost::Row { table: 1, key: vec![1], seq: 13 }));
    }

    #[test]
    fn past_the_budget_the_horizon_rises_and_older_snapshots_are_refused() {
        let mut w = ConflictWindow::new(10 * charge(&[0]));
        w.open(0);
        for i in 1..=50u8 {
            w.record(u64::from(i), 1, &[i]);
            w.trim();
        }
        assert!(w.rows() <= 10);
        assert!(matches!(w.check(0, [&row(200)], &HashSet::new()), Err(Lost::TooOld { horizon }) if horizon >= 40));
        // A snapshot at the horizon or later is still checked exactly.
        w.open(50);
        assert_eq!(w.check(50, [&row(50)], &HashSet::new()), Ok(()));
    }
}
