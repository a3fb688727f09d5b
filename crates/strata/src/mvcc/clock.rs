//! Wall-clock time to sequence numbers: which writes had committed by a given time, for reads
//! `as of` a time and for the history horizon (the oldest point the retention window keeps).
//!
//! The commit leader records `(unix milliseconds, newest sequence number)` after every group,
//! folding groups of the same millisecond into one sample, so a time resolves exactly to the
//! newest write committed at or before it. The list is bounded: past [`MAX_SAMPLES`] every
//! second sample of the older half goes, so old times resolve to a slightly earlier state (never
//! to a later one). The manifest keeps a copy ([`EditRecord::Clock`](crate::version::edit::EditRecord::Clock)).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_queue::SegQueue;

use crate::sync::{site, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Samples kept before the older half is thinned.
pub(crate) const MAX_SAMPLES: usize = 65_536;

/// Milliseconds since the Unix epoch (0 for a time before it).
pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The time `ms` milliseconds after the Unix epoch.
pub(crate) fn time_of(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The clock the commit leader records into without a lock, and readers read under one.
///
/// The leader notes each group: a group in a later millisecond than the last one noted pushes a
/// new sample (its millisecond and last sequence number) onto a lock-free queue, and every group
/// stores its last sequence number as the tail. A reader takes the lock, loads the tail, moves
/// the queued samples into the [`Clock`] and lets the tail raise the newest sample at or below
/// it: the tail's group committed in that sample's millisecond (a group in a later one would
/// have pushed a sample first, with a larger sequence number).
pub(crate) struct SharedClock {
    samples: Mutex<Clock>,
    arrived: SegQueue<(u64, u64)>,
    tail: AtomicU64,
}

impl SharedClock {
    pub(crate) fn new(clock: Clock) -> Self {
        let tail = AtomicU64::new(clock.samples.back().map_or(0, |&(_, s)| s));
        SharedClock { samples: Mutex::new(&site::CLOCK, clock), arrived: SegQueue::new(), tail }
    }

    /// Commit leader only: the group ending at `seq` committed at `ms`. `last` is the leader's
    /// to keep: the millisecond of the last sample pushed and the last sequence number noted.
    /// A group in a new millisecond first pushes where the last one ended, so a tail no reader
    /// saw before it moved on still reaches its sample.
    pub(crate) fn note(&self, last: &mut (u64, u64), ms: u64, seq: u64) {
        if ms > last.0 {
            crate::sync::shared_write();
            if last.0 > 0 {
                self.arrived.push(*last);
            }
            self.arrived.push((ms, seq));
            last.0 = ms;
        }
        last.1 = seq;
        crate::sync::shared_write();
        self.tail.store(seq, Ordering::Release);
    }

    /// The clock, every noted group in it.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Clock> {
        let mut c = self.samples.lock();
        let tail = self.tail.load(Ordering::Acquire);
        while let Some((ms, seq)) = self.arrived.pop() {
            c.record(ms, seq);
        }
        c.settle_tail(tail);
        c
    }
}

/// Samples of (unix ms, newest sequence number committed by then), both non-decreasing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Clock {
    samples: VecDeque<(u64, u64)>,
}

impl Clock {
    /// Every write up to `seq` had committed at `ms`. A clock that stepped back counts as the
    /// newest time seen, so samples stay ordered.
    pub(crate) fn record(&mut self, ms: u64, seq: u64) {
        match self.samples.back_mut() {
            Some((t, s)) if ms <= *t => *s = (*s).max(seq),
            Some((_, s)) if seq <= *s => {}
            _ => {
                self.samples.push_back((ms, seq));
                if self.samples.len() > MAX_SAMPLES {
                    self.thin();
                }
            }
        }
    }

    /// The group ending at `seq` committed in the millisecond of the newest sample with a
    /// sequence number at or below `seq` (see [`SharedClock`]): that sample now reaches `seq`.
    fn settle_tail(&mut self, seq: u64) {
        let i = self.samples.partition_point(|&(_, s)| s <= seq);
        if let Some((_, s)) = i.checked_sub(1).and_then(|i| self.samples.get_mut(i)) {
            *s = seq;
        }
    }

    /// Drops every second sample of the older half.
    fn thin(&mut self) {
        let half = self.samples.len() / 2;
        let mut i = 0;
        self.samples.retain(|_| {
            i += 1;
            i > half || i % 2 == 1
        });
    }

    /// The newest sequence number committed at or before `ms`; `None` when `ms` precedes every
    /// sample (the clock knows nothing that early).
    pub(crate) fn seq_at(&self, ms: u64) -> Option<u64> {
        let i = self.samples.partition_point(|&(t, _)| t <= ms);
        i.checked_sub(1).map(|i| self.samples[i].1)
    }

    /// The earliest sampled time by which `seq` had committed.
    pub(crate) fn time_of_seq(&self, seq: u64) -> Option<u64> {
        let i = self.samples.partition_point(|&(_, s)| s < seq);
        self.samples.get(i).map(|&(t, _)| t)
    }

    /// Forgets what no time at or after `ms` needs (keeps the newest sample at or before it).
    pub(crate) fn trim_before(&mut self, ms: u64) {
        let i = self.samples.partition_point(|&(t, _)| t <= ms);
        self.samples.drain(..i.saturating_sub(1));
    }

    /// The samples at or after `ms`, oldest first (what changed since a copy was taken at `ms`:
    /// the sample at `ms` itself may have been raised since).
    pub(crate) fn since(&self, ms: u64) -> Vec<(u64, u64)> {
        let i = self.samples.partition_point(|&(t, _)| t < ms);
        self.samples.range(i..).copied().collect()
    }

    /// The newest sample's time (0 when empty).
    pub(crate) fn last_ms(&self) -> u64 {
        self.samples.back().map_or(0, |&(t, _)| t)
    }

    /// Every sample, oldest first.
    pub(crate) fn samples(&self) -> Vec<(u64, u64)> {
        self.samples.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The shared clock, read at any point, holds what recording every group under a lock
    /// would: milliseconds that repeat, step back and jump, reads in between or not.
    #[test]
    fn the_shared_clock_agrees_with_recording_every_group() {
        for seed in 0..200u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut reference = Clock::default();
            reference.record(1_000, 10);
            let shared = SharedClock::new(reference.clone());
            let (mut last, mut ms, mut seq) = ((1_000, 10), 1_000u64, 10u64);
            for _ in 0..rng.gen_range(1..60) {
                ms = match rng.gen_range(0..10) {
                    0..=4 => ms,
                    5 => ms.saturating_sub(rng.gen_range(1..3)),
                    _ => ms + rng.gen_range(1..4),
                };
                seq += rng.gen_range(1..5);
                reference.record(ms, seq);
                shared.note(&mut last, ms, seq);
                if rng.gen_bool(0.2) {
                    assert_eq!(shared.lock().samples(), reference.samples(), "seed {seed}");
                }
            }
            assert_eq!(shared.lock().samples(), reference.samples(), "seed {seed}");
        }
    }

    #[test]
    fn times_resolve_to_the_newest_write_committed_by_then() {
        let mut c = Clock::default();
        c.record(100, 5);
        c.record(100, 7); // same millisecond: folded
        c.record(103, 7); // nothing new: no sample
        c.record(105, 9);
        c.record(104, 12); // the clock stepped back: counts as 105
        assert_eq!(c.samples(), vec![(100, 7), (105, 12)]);
        assert_eq!(c.seq_at(99), None);
        assert_eq!(c.seq_at(100), Some(7));
        assert_eq!(c.seq_at(104), Some(7));
        assert_eq!(c.seq_at(105), Some(12));
        assert_eq!(c.seq_at(u64::MAX), Some(12));
        assert_eq!(c.since(105), vec![(105, 12)]);
        c.trim_before(200);
        assert_eq!(c.samples(), vec![(105, 12)]);
    }

    #[test]
    fn thinning_keeps_the_list_bounded_and_never_resolves_later() {
        let mut c = Clock::default();
        for i in 0..(3 * MAX_SAMPLES as u64) {
            c.record(i * 10, i + 1);
        }
        assert!(c.samples().len() <= MAX_SAMPLES);
        for ms in (0..3 * MAX_SAMPLES as u64 * 10).step_by(977) {
            let exact = ms / 10 + 1;
            let got = c.seq_at(ms).unwrap();
            assert!(got <= exact, "{ms}: {got} > {exact}");
        }
        // Recent times stay exact.
        let last = 3 * MAX_SAMPLES as u64 - 1;
        assert_eq!(c.seq_at(last * 10 + 3), Some(last + 1));
    }
}
