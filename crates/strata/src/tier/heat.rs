//! Access histograms (LogStore §V): one bucket per SST, counting the point reads it served and
//! the probes that searched it and found nothing. The counters live beside each open file and
//! are bumped on the read path in the reading core's own stripe ([`PerCore`]); they halve every half-life, so old heat
//! fades; and when compaction replaces files, the heat of each input passes to the outputs that
//! cover its key range, so a range keeps its history while its files change.
//!
//! A level's histogram is its files, in key order, each with its bucket: the version already
//! keeps files sorted, so buckets need no structure of their own.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{site, Mutex, PerCore};

/// One file's bucket: (reads served, probes that found nothing), kept per core.
#[derive(Debug)]
pub(crate) struct Heat(PerCore);

impl Default for Heat {
    fn default() -> Self {
        Heat(PerCore::new(2))
    }
}

impl Heat {
    /// Counts a probe of the file: `found` when it held a version of the key.
    pub(crate) fn record(&self, found: bool) {
        self.0.add(usize::from(!found), 1);
    }

    /// (reads served, probes that found nothing).
    pub(crate) fn get(&self) -> (u64, u64) {
        (self.0.get(0), self.0.get(1))
    }

    fn add(&self, reads: u64, misses: u64) {
        self.0.add(0, reads);
        self.0.add(1, misses);
    }

    /// Divides both counts by 2^`halvings` (a concurrent increment may be lost; it is heat).
    fn decay(&self, halvings: u32) {
        self.0.update(|v| v.checked_shr(halvings).unwrap_or(0));
    }
}

/// The buckets of every file, by number.
pub(crate) struct HeatMap {
    files: Mutex<HashMap<u64, Arc<Heat>>>,
    half_life: Duration,
    /// When the counts were last halved.
    decayed: Mutex<Instant>,
}

impl HeatMap {
    /// Buckets whose counts halve every `half_life` (zero: never).
    pub(crate) fn new(half_life: Duration) -> HeatMap {
        HeatMap {
            files: Mutex::new(&site::HEAT, HashMap::new()),
            half_life,
            decayed: Mutex::new(&site::HEAT, Instant::now()),
        }
    }

    /// File `number`'s bucket, made empty on first use.
    pub(crate) fn of(&self, number: u64) -> Arc<Heat> {
        self.files.lock().entry(number).or_default().clone()
    }

    /// Forgets a deleted file's bucket.
    pub(crate) fn forget(&self, number: u64) {
        self.files.lock().remove(&number);
    }

    /// Halves every bucket once per half-life passed since the last time.
    pub(crate) fn decay(&self, now: Instant) {
        if self.half_life.is_zero() {
            return;
        }
        let mut last = self.decayed.lock();
        let passed = now.saturating_duration_since(*last).as_secs_f64() / self.half_life.as_secs_f64();
        let halvings = passed.floor() as u32;
        if halvings == 0 {
            return;
        }
        *last += self.half_life.mul_f64(f64::from(halvings));
        for h in self.files.lock().values() {
            h.decay(halvings);
        }
    }

    /// (reads served, probes that found nothing) of file `number`, decayed.
    #[cfg(test)]
    fn counts(&self, number: u64) -> (u64, u64) {
        self.decay(Instant::now());
        self.files.lock().get(&number).map_or((0, 0), |h| h.get())
    }

    /// Every bucket's counts, decayed.
    pub(crate) fn snapshot(&self) -> HashMap<u64, (u64, u64)> {
        self.decay(Instant::now());
        self.files.lock().iter().map(|(&n, h)| (n, h.get())).collect()
    }

    /// Passes the heat of `inputs` (files a compaction replaces) to `outputs`: each input's
    /// counts are shared among the outputs whose key ranges overlap its own, in proportion to
    /// how much of the input's key range each covers (keys read as numbers, see [`key_point`]),
    /// or to their entries where that cannot tell them apart. An output that shares one edge
    /// key with a hot input thus gets next to nothing, instead of a share as large as if it
    /// covered the input. Inputs no output overlaps (all their versions dropped) pass nothing.
    pub(crate) fn carry<'a>(&self, inputs: impl Iterator<Item = Span<'a>>, outputs: &[Span<'_>]) {
        let mut add: Vec<(f64, f64)> = vec![(0.0, 0.0); outputs.len()];
        let files = self.files.lock();
        for i in inputs {
            let Some((reads, misses)) = files.get(&i.number).map(|h| h.get()) else { continue };
            if reads + misses == 0 {
                continue;
            }
            let covering: Vec<usize> = (0..outputs.len())
                .filter(|&o| outputs[o].smallest <= i.largest && i.smallest <= outputs[o].largest)
                .collect();
            let skip = common_prefix(i.smallest, i.largest);
            let (lo, hi) = (key_point(i.smallest, skip), key_point(i.largest, skip));
            let covered = |o: usize| {
                let (a, b) = (key_point(outputs[o].smallest, skip), key_point(outputs[o].largest, skip));
                (b.min(hi) - a.max(lo)).max(0.0)
            };
            let by_range = hi > lo && covering.iter().any(|&o| covered(o) > 0.0);
            let weight = |o: usize| if by_range { covered(o) } else { outputs[o].entries.max(1) as f64 };
            let total: f64 = covering.iter().map(|&o| weight(o)).sum();
            for &o in &covering {
                let share = weight(o) / total;
                add[o].0 += reads as f64 * share;
                add[o].1 += misses as f64 * share;
            }
        }
        drop(files);
        for (o, (reads, misses)) in outputs.iter().zip(add) {
            if reads + misses > 0.0 {
                self.of(o.number).add(reads.round() as u64, misses.round() as u64);
            }
        }
    }
}

/// A file as the access histograms see it: its number, its key range and its entries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span<'a> {
    pub number: u64,
    pub smallest: &'a [u8],
    pub largest: &'a [u8],
    pub entries: u64,
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Where `key` lies on a number line: its eight bytes after the first `skip` (zero-padded) as a
/// big-endian number. Keys order as their points do, ties aside; between two keys sharing
/// `skip` bytes, points spread the way evenly spread keys would.
fn key_point(key: &[u8], skip: usize) -> f64 {
    let mut b = [0u8; 8];
    let rest = key.get(skip..).unwrap_or(&[]);
    let n = rest.len().min(8);
    b[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(b) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(number: u64, lo: &'static str, hi: &'static str, entries: u64) -> Span<'static> {
        Span { number, smallest: lo.as_bytes(), largest: hi.as_bytes(), entries }
    }

    #[test]
    fn heat_follows_key_ranges_into_compaction_outputs() {
        let m = HeatMap::new(Duration::ZERO);
        // Input 1 (a-f) is hot, input 2 (g-z) cold.
        for _ in 0..90 {
            m.of(1).record(true);
        }
        for _ in 0..10 {
            m.of(1).record(false);
        }
        m.of(2).record(true);
        let inputs = [file(1, "a", "f", 100), file(2, "g", "z", 100)];
        // Output 10 covers a-c, 11 covers d-h (both inputs), 12 covers i-z: input 1's range is
        // split evenly between 10 and 11, input 2's goes mostly to 12.
        let outputs = [file(10, "a", "c", 100), file(11, "d", "h", 200), file(12, "i", "z", 100)];
        m.carry(inputs.into_iter(), &outputs);
        assert_eq!(m.counts(10), (45, 5));
        assert_eq!(m.counts(11), (45, 5));
        assert_eq!(m.counts(12), (1, 0));
        // An output sharing only the input's last key gets next to nothing.
        m.of(3).add(100, 0);
        let edge = [file(30, "a", "m", 10), file(31, "m", "z", 1000)];
        m.carry([file(3, "m", "t", 50)].into_iter(), &edge);
        assert_eq!((m.counts(30), m.counts(31)), ((0, 0), (100, 0)));
        // Nothing overlapping: nothing passed.
        m.carry([file(1, "a", "f", 1)].into_iter(), &[file(20, "x", "y", 5)]);
        assert_eq!(m.counts(20), (0, 0));
        m.forget(10);
        assert_eq!(m.counts(10), (0, 0));
    }

    #[test]
    fn counts_halve_every_half_life() {
        let m = HeatMap::new(Duration::from_secs(10));
        for _ in 0..64 {
            m.of(1).record(true);
        }
        let start = *m.decayed.lock();
        m.decay(start + Duration::from_secs(9));
        assert_eq!(m.of(1).get(), (64, 0));
        m.decay(start + Duration::from_secs(25));
        assert_eq!(m.of(1).get(), (16, 0), "two half-lives passed");
        m.decay(start + Duration::from_secs(29));
        assert_eq!(m.of(1).get(), (16, 0), "the remainder of the second interval carries over");
        m.decay(start + Duration::from_secs(30));
        assert_eq!(m.of(1).get(), (8, 0));
        m.decay(start + Duration::from_secs(10_000));
        assert_eq!(m.of(1).get(), (0, 0));
    }
}
