//! Where atomic writes begin and end in sequence-number space, so a read as of a sequence number
//! never sees part of one.
//!
//! A write batch (a transaction's writes are one) takes one sequence number per operation. A
//! read as of a sequence number inside a batch of several would see the batch's first operations
//! and not its last, so [`Batches::round_down`] moves such a point to just before the batch. The
//! commit leader records the range of every committed batch of more than one operation (a single
//! operation cannot be split, so workloads of single writes record nothing); recovery records
//! those the WAL holds; with a history retention window the manifest keeps the ranges the window
//! can reach ([`EditRecord::Batches`](crate::version::edit::EditRecord::Batches)).
//!
//! The list is bounded: past [`MAX_RANGES`] the older half goes, and sequence numbers before the
//! oldest range kept are refused (boundaries there are no longer known); so are those before
//! the list began (a database written by a build that kept no ranges).

use std::collections::VecDeque;

/// Ranges kept before the older half is dropped (16 bytes each).
pub(crate) const MAX_RANGES: usize = 1 << 20;

/// The sequence ranges `(first, last)` of committed batches of more than one operation, oldest
/// first, and the first sequence number from which every such batch is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Batches {
    ranges: VecDeque<(u64, u64)>,
    known_from: u64,
}

impl Default for Batches {
    /// Every batch recorded from the first sequence number on (a new database).
    fn default() -> Self {
        Batches::known_from(0)
    }
}

impl Batches {
    /// An empty list knowing every batch from `seq` on.
    pub(crate) fn known_from(seq: u64) -> Batches {
        Batches { ranges: VecDeque::new(), known_from: seq }
    }

    /// The first sequence number from which every batch is recorded.
    pub(crate) fn start(&self) -> u64 {
        self.known_from
    }

    /// A batch committed sequence numbers `first..=last`. Batches are recorded in commit order;
    /// one of a single operation is not kept.
    pub(crate) fn record(&mut self, first: u64, last: u64) {
        if last <= first || self.ranges.back().is_some_and(|&(_, l)| first <= l) {
            return;
        }
        self.ranges.push_back((first, last));
        if self.ranges.len() > MAX_RANGES {
            self.ranges.drain(..self.ranges.len() / 2);
            if let Some(&(f, _)) = self.ranges.front() {
                self.known_from = self.known_from.max(f);
            }
        }
    }

    /// The newest sequence number at or below `seq` that no batch straddles: `seq` itself, or
    /// the one just before the batch that `seq` falls inside of (short of its last operation).
    /// `None` when `seq` precedes [`Batches::start`].
    pub(crate) fn round_down(&self, seq: u64) -> Option<u64> {
        if seq < self.known_from {
            return None;
        }
        let i = self.ranges.partition_point(|&(first, _)| first <= seq);
        match i.checked_sub(1).map(|i| self.ranges[i]) {
            Some((first, last)) if seq < last => Some(first.saturating_sub(1)),
            _ => Some(seq),
        }
    }

    /// Forgets the batches wholly at or below `seq` (no read can be placed there any more).
    pub(crate) fn trim_through(&mut self, seq: u64) {
        let i = self.ranges.partition_point(|&(_, last)| last <= seq);
        self.ranges.drain(..i);
    }

    /// The batches that end after `seq`, oldest first.
    pub(crate) fn after(&self, seq: u64) -> Vec<(u64, u64)> {
        let i = self.ranges.partition_point(|&(_, last)| last <= seq);
        self.ranges.range(i..).copied().collect()
    }

    /// The last sequence number of the newest batch recorded (0 when none is).
    pub(crate) fn last(&self) -> u64 {
        self.ranges.back().map_or(0, |&(_, l)| l)
    }

    /// Every range kept, oldest first.
    pub(crate) fn ranges(&self) -> Vec<(u64, u64)> {
        self.ranges.iter().copied().collect()
    }

    /// Takes in a manifest record: where recording began and ranges (those already known are
    /// skipped).
    pub(crate) fn absorb(&mut self, known_from: u64, ranges: &[(u64, u64)]) {
        self.known_from = self.known_from.max(known_from);
        for &(first, last) in ranges {
            self.record(first, last);
        }
    }

    /// How many ranges are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_inside_a_batch_rounds_down_to_just_before_it() {
        let mut b = Batches::default();
        b.record(5, 5); // one operation: nothing to keep
        b.record(10, 14);
        b.record(20, 21);
        assert_eq!(b.len(), 2);
        for (seq, want) in [(4, 4), (9, 9), (10, 9), (13, 9), (14, 14), (15, 15), (20, 19), (21, 21), (99, 99)] {
            assert_eq!(b.round_down(seq), Some(want), "seq {seq}");
        }
        assert_eq!(b.after(14), vec![(20, 21)]);
        assert_eq!(b.after(13), vec![(10, 14), (20, 21)]);
        b.trim_through(14);
        assert_eq!(b.ranges(), vec![(20, 21)]);
        assert_eq!(b.round_down(12), Some(12), "a trimmed batch lies below every readable point");
    }

    #[test]
    fn past_the_bound_the_older_half_goes_and_points_before_it_are_refused() {
        let mut b = Batches::known_from(3);
        assert_eq!(b.round_down(2), None);
        for i in 0..=MAX_RANGES as u64 {
            b.record(10 + 3 * i, 11 + 3 * i);
        }
        assert_eq!(b.len(), MAX_RANGES / 2 + 1);
        let (first, _) = b.ranges()[0];
        assert_eq!(b.start(), first);
        assert_eq!(b.round_down(first - 1), None);
        assert_eq!(b.round_down(first), Some(first - 1));
        assert_eq!(b.round_down(first + 1), Some(first + 1));
    }

    #[test]
    fn a_record_of_ranges_already_held_adds_nothing() {
        let mut b = Batches::default();
        b.record(10, 14);
        b.absorb(0, &[(10, 14), (20, 22)]);
        assert_eq!(b.ranges(), vec![(10, 14), (20, 22)]);
        b.absorb(7, &[]);
        assert_eq!(b.start(), 7);
        assert_eq!(b.last(), 22);
    }
}
