//! Wall-clock time to sequence numbers: which writes had committed by a given time, for reads
//! `as of` a time and for the history horizon (the oldest point the retention window keeps).
//!
//! The commit leader records `(unix milliseconds, newest sequence number)` after every group,
//! folding groups of the same millisecond into one sample, so a time resolves exactly to the
//! newest write committed at or before it. The list is bounded: past [`MAX_SAMPLES`] every
//! second sample of the older half goes, so old times resolve to a slightly earlier state (never
//! to a later one). The manifest keeps a copy ([`EditRecord::Clock`](crate::version::edit::EditRecord::Clock)).

use std::collections::VecDeque;
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
