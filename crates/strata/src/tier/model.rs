//! The hybrid throughput model (LogStore §IV, eqs. 1-9): what a fast/slow tier configuration
//! should sustain, from the devices' speeds, how much of the data each tier and the memory
//! cache hold, the key skew and the read/write mix.
//!
//! - Reads: the share of reads each device serves follows from the data it holds, hottest data
//!   fastest (memory, then the fast tier, then the slow one) under a Zipfian skew, or in
//!   proportion to size without skew. Memory costs nothing; the device whose read rate, divided
//!   by the levels a read probes there and by its share, is lower limits the throughput.
//! - Writes: each record is read and written `2 (M + 1)` times per level it descends through,
//!   at sequential speed, on the device of that level; the slower side limits.
//! - Mixed: one client alternating reads and writes, each costing its own time.
//!
//! The model is a pure function, so benchmarks can print its prediction beside each measurement
//! and the gap can be explained.

use crate::vfs::DeviceProfile;

/// What a device sustains.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceRates {
    /// Random reads of one block per second.
    pub random_reads: f64,
    /// Bytes per second of sequential reading and writing.
    pub sequential_bytes: f64,
}

impl DeviceRates {
    /// The rates of a device of `profile` reading blocks of `block_bytes`.
    pub fn of(profile: &DeviceProfile, block_bytes: usize) -> DeviceRates {
        let per_read = profile.cost(true, block_bytes).as_secs_f64();
        let random_reads = match per_read {
            t if t > 0.0 => profile.channels.max(1) as f64 / t,
            _ => f64::INFINITY,
        };
        let sequential_bytes = match profile.bandwidth {
            0 => f64::INFINITY,
            b => b as f64,
        };
        DeviceRates { random_reads, sequential_bytes }
    }
}

/// A tier configuration and workload to predict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelInput {
    /// The fast tier's device.
    pub fast: DeviceRates,
    /// The slow tier's device.
    pub slow: DeviceRates,
    /// Records in the data set (N).
    pub records: u64,
    /// Share of the records the fast tier holds, 0 to 1 (|SSD|).
    pub fast_share: f64,
    /// Share of the records the memory caches, 0 to 1 (|RAM|; the hottest ones, on the fast tier).
    pub ram_share: f64,
    /// Zipf exponent of the key popularity (s); 0 for uniform.
    pub skew: f64,
    /// Levels on the fast tier a write descends through and a read may probe (L_SSD).
    pub fast_levels: u32,
    /// Levels on the slow tier (L_HDD; 1 when the slow tier is one disjoint level).
    pub slow_levels: u32,
    /// Size ratio between adjacent levels (M).
    pub growth: f64,
    /// Bytes per record (e).
    pub record_bytes: f64,
    /// Share of operations that are reads, 0 to 1 (r; writes are `1 - r`).
    pub read_share: f64,
    /// Whether the fast tier holds the hottest records (informed placement, the paper's
    /// assumption) or records chosen without regard to temperature, so that it serves its
    /// share of the reads memory misses and no more.
    pub hottest_fast: bool,
}

/// The model's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// Shares of reads served by memory, the fast tier and the slow tier (they sum to 1).
    pub ram_reads: f64,
    /// See `ram_reads`.
    pub fast_reads: f64,
    /// See `ram_reads`.
    pub slow_reads: f64,
    /// Read-only operations per second (eq. 3).
    pub read: f64,
    /// Write-only operations per second (eq. 8).
    pub write: f64,
    /// Operations per second of the given mix (eq. 9).
    pub mixed: f64,
}

/// `sum_{i=1..n} i^-s`: exact for the first terms, the midpoint integral for the rest.
fn harmonic(n: f64, s: f64) -> f64 {
    if n <= 0.0 {
        return 0.0;
    }
    const EXACT: f64 = 1024.0;
    let k = n.min(EXACT).floor();
    let mut sum: f64 = (1..=k as u64).map(|i| (i as f64).powf(-s)).sum();
    if n > k {
        // ∫ x^-s dx over [k + 1/2, n + 1/2].
        let (a, b) = (k + 0.5, n + 0.5);
        sum += if (s - 1.0).abs() < 1e-9 { (b / a).ln() } else { (b.powf(1.0 - s) - a.powf(1.0 - s)) / (1.0 - s) };
    }
    sum
}

/// Shares of reads that memory, the fast tier and the slow tier serve (eqs. 1, 4-6).
fn read_shares(m: &ModelInput) -> (f64, f64, f64) {
    let ram = m.ram_share.clamp(0.0, 1.0);
    let fast = m.fast_share.clamp(0.0, 1.0);
    if m.skew <= 0.0 {
        // Uniform: every record as likely; memory caches a share of each tier alike.
        return (ram, (1.0 - ram) * fast, (1.0 - ram) * (1.0 - fast));
    }
    let n = m.records.max(1) as f64;
    let total = harmonic(n, m.skew);
    let top = |share: f64| harmonic((share * n).floor(), m.skew) / total;
    let r_ram = top(ram);
    if !m.hottest_fast {
        return (r_ram, (1.0 - r_ram) * fast, (1.0 - r_ram) * (1.0 - fast));
    }
    let r_fast = if fast > ram { top(fast) - r_ram } else { 0.0 };
    (r_ram, r_fast, (1.0 - r_ram - r_fast).max(0.0))
}

/// `rate / (levels × share)`: what a device allows when it serves `share` of the reads, each
/// probing `levels` levels there; unlimited when it serves none.
fn limit(rate: f64, levels: u32, share: f64) -> f64 {
    let load = f64::from(levels.max(1)) * share;
    if load <= 0.0 {
        f64::INFINITY
    } else {
        rate / load
    }
}

/// Predicts read, write and mixed throughput (operations per second) for `m`.
pub fn predict(m: &ModelInput) -> Prediction {
    let (ram_reads, fast_reads, slow_reads) = read_shares(m);
    let read = limit(m.fast.random_reads, m.fast_levels, fast_reads).min(limit(
        m.slow.random_reads,
        m.slow_levels,
        slow_reads,
    ));
    // Eq. 8: a record is read and written 2 (M + 1) times per level it passes through.
    let per_level = 2.0 * (m.growth + 1.0) * m.record_bytes.max(1.0);
    let fast_passes = f64::from(m.fast_levels.saturating_sub(1));
    let slow_passes = f64::from(m.slow_levels);
    let side =
        |bytes_per_s: f64, passes: f64| if passes <= 0.0 { f64::INFINITY } else { bytes_per_s / (per_level * passes) };
    let write = side(m.fast.sequential_bytes, fast_passes).min(side(m.slow.sequential_bytes, slow_passes));
    let r = m.read_share.clamp(0.0, 1.0);
    let cost = r / read + (1.0 - r) / write;
    let mixed = if cost > 0.0 { 1.0 / cost } else { f64::INFINITY };
    Prediction { ram_reads, fast_reads, slow_reads, read, write, mixed }
}

/// Whether reverse compaction pays for a slow-tier file of `bytes` read `reads` times (LogStore
/// §V-B, eqs. 10-11, for one input file: it moves alone, into its own level on the fast tier):
/// the move costs one positioning on the slow device and the file's bytes read there and written
/// on the fast one; the reads it would have saved each cost two positionings (index, then data
/// block) on the slow device.
pub fn reverse_compaction_pays(bytes: u64, reads: u64, fast: &DeviceProfile, slow: &DeviceProfile) -> bool {
    let secs = |p: &DeviceProfile| p.cost(false, bytes as usize).as_secs_f64();
    let seek = slow.read_latency.as_secs_f64();
    let compaction = seek + secs(slow) + secs(fast);
    compaction < 2.0 * reads as f64 * seek
}

/// Whether staging compaction pays for `files` overlapping Level-0 files of `bytes` on the fast
/// device, whose probes found nothing `misses` times (LogStore §V-C, §V-D: eqs. 10-11 adjusted
/// for overlap, everything on one device): merging them costs one positioning per file and
/// their bytes read and written; each probe that found nothing cost a positioned block read
/// that one disjoint run would have spared.
pub fn staging_compaction_pays(bytes: u64, files: usize, misses: u64, fast: &DeviceProfile) -> bool {
    let seek = fast.read_latency.as_secs_f64();
    let compaction = files as f64 * seek + 2.0 * fast.cost(false, bytes as usize).as_secs_f64();
    compaction < misses as f64 * seek
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> ModelInput {
        ModelInput {
            fast: DeviceRates { random_reads: 60_000.0, sequential_bytes: 500e6 },
            slow: DeviceRates { random_reads: 1_000.0, sequential_bytes: 150e6 },
            records: 10_000,
            fast_share: 0.5,
            ram_share: 0.01,
            skew: 1.0,
            fast_levels: 1,
            slow_levels: 1,
            growth: 10.0,
            record_bytes: 1000.0,
            read_share: 1.0,
            hottest_fast: true,
        }
    }

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance * b.abs().max(1e-12)
    }

    /// The worked example of §III-C: 10,000 records, Zipf 1, 1% in memory, half on the fast
    /// tier. Memory serves about 53%, the fast tier 40%, the slow one 7%; against the same
    /// memory over the slow device alone that is about 6.5 times the reads.
    #[test]
    fn the_papers_zipfian_example() {
        let p = predict(&input());
        assert!(close(p.ram_reads, 0.53, 0.03), "{p:?}");
        assert!(close(p.fast_reads, 0.40, 0.03), "{p:?}");
        assert!(close(p.slow_reads, 0.07, 0.1), "{p:?}");
        let slow_only = predict(&ModelInput { fast_share: 0.0, ..input() });
        assert!(close(p.read / slow_only.read, 6.5, 0.1), "{} / {}", p.read, slow_only.read);
        // Uniform keys: half the data fast gives about twice the reads of the slow device alone.
        let uniform = predict(&ModelInput { skew: 0.0, ..input() });
        let uniform_slow = predict(&ModelInput { skew: 0.0, fast_share: 0.0, ..input() });
        assert!(close(uniform.read / uniform_slow.read, 2.0, 0.01), "{uniform:?} {uniform_slow:?}");
        // Skewed keys, temperature-blind placement: the fast tier serves half of what memory
        // misses, so the slow tier serves about 23%.
        let blind = predict(&ModelInput { hottest_fast: false, ..input() });
        assert!(close(blind.slow_reads, (1.0 - p.ram_reads) / 2.0, 1e-9), "{blind:?}");
        assert!(blind.read < p.read / 3.0, "{blind:?} {p:?}");
    }

    #[test]
    fn the_harmonic_sums_match_exact_ones() {
        for (n, s) in [(10.0, 1.0), (5000.0, 0.99), (1e5, 1.2), (3000.0, 0.5)] {
            let exact: f64 = (1..=n as u64).map(|i| (i as f64).powf(-s)).sum();
            assert!(close(harmonic(n, s), exact, 1e-6), "n {n}, s {s}: {} vs {exact}", harmonic(n, s));
        }
        assert_eq!(harmonic(0.0, 1.0), 0.0);
    }

    /// Writes: the slower side of eq. 8 limits; a mix weighs each operation's cost (eq. 9).
    #[test]
    fn writes_are_limited_by_the_slower_side_and_mixes_by_both() {
        let m = ModelInput { fast_levels: 3, slow_levels: 1, read_share: 0.0, ..input() };
        let p = predict(&m);
        // Fast: 500e6 / (22,000 × 2 passes); slow: 150e6 / (22,000 × 1).
        assert!(close(p.write, (500e6 / 44_000.0f64).min(150e6 / 22_000.0), 1e-9), "{p:?}");
        assert!(close(p.mixed, p.write, 1e-9));
        let half = predict(&ModelInput { read_share: 0.5, ..m });
        assert!(close(half.mixed, 1.0 / (0.5 / half.read + 0.5 / half.write), 1e-9), "{half:?}");
        // Everything on the fast tier: the slow side does not limit.
        let all_fast = predict(&ModelInput { slow_levels: 0, fast_share: 1.0, ..m });
        assert!(close(all_fast.write, 500e6 / 44_000.0, 1e-9), "{all_fast:?}");
        assert_eq!(all_fast.slow_reads, 0.0);
    }

    #[test]
    fn rates_follow_the_device_profile() {
        let r = DeviceRates::of(&DeviceProfile::hard_disk(), 16 << 10);
        // 8 ms + 16 KiB at 150 MB/s ≈ 8.1 ms: about 123 reads per second on one arm.
        assert!(close(r.random_reads, 1.0 / (0.008 + 16384.0 / 150e6), 1e-6), "{r:?}");
        assert_eq!(r.sequential_bytes, 150e6);
        let ssd = DeviceRates::of(&DeviceProfile::ssd(), 16 << 10);
        assert!(ssd.random_reads > 100.0 * r.random_reads, "{ssd:?}");
    }

    /// Eqs. 10-11: a 2 MB file on a hard disk costs 8 ms + 13.3 ms + 4 ms ≈ 25 ms to move to an
    /// SSD, so it pays from two reads (2 × 2 × 8 ms = 32 ms), not from one (16 ms).
    #[test]
    fn reverse_compaction_pays_once_enough_slow_reads_are_saved() {
        let (fast, slow) = (DeviceProfile::ssd(), DeviceProfile::hard_disk());
        assert!(!reverse_compaction_pays(2_000_000, 1, &fast, &slow));
        assert!(reverse_compaction_pays(2_000_000, 2, &fast, &slow));
        assert!(!reverse_compaction_pays(2_000_000, 0, &fast, &slow));
        // A bigger file needs more reads: 20 MB costs 8 + 133 + 40 ms, so 11 reads (176 ms) do
        // not pay and 12 (192 ms) do.
        assert!(!reverse_compaction_pays(20_000_000, 11, &fast, &slow));
        assert!(reverse_compaction_pays(20_000_000, 12, &fast, &slow));
    }

    /// Staging pays when the empty probes of overlapping fast-tier files cost more than
    /// merging them: at 80 µs a positioning and 500 MB/s, three files of 1 MB cost 3 × 80 µs
    /// plus 2 × 6 ms of transfer, 12.24 ms, which 154 empty probes (12.32 ms) pass and 152
    /// (12.16 ms) do not.
    #[test]
    fn staging_pays_once_empty_probes_cost_more_than_the_merge() {
        let ssd = DeviceProfile::ssd();
        assert!(!staging_compaction_pays(3_000_000, 3, 152, &ssd));
        assert!(staging_compaction_pays(3_000_000, 3, 154, &ssd));
        assert!(!staging_compaction_pays(3_000_000, 3, 0, &ssd));
    }
}
