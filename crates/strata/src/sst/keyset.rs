//! An exact, in-memory set of a file's key hashes ([`bloom::key_hash`](super::bloom::key_hash)).
//!
//! Flushes look every key they write up in every Level-0 file (to mark what it supersedes); with
//! several Level-0 files that is most of a flush's probing, and each bloom false positive costs a
//! block read. A flush keeps the hashes of the Level-0 files it writes (8 bytes per key, 5% of
//! a 150-byte row); the next flushes join their own key hashes with them in one sorted pass
//! (`compaction::supersede::Marker::flush`), and an absent hash is final (a false positive
//! needs a 64-bit hash collision). Nothing of it is on disk: files opened after a restart
//! are probed through their bloom filters.

/// Sorted distinct hashes, with a directory of where each range of `2^bits` top-bit values
/// starts (about 16 hashes per range).
#[derive(Debug)]
pub(crate) struct KeySet {
    hashes: Vec<u64>,
    /// `dir[i]..dir[i + 1]`: the positions of hashes whose top `bits` bits are `i`.
    dir: Vec<u32>,
    bits: u32,
}

impl KeySet {
    /// The set of `hashes` (any order, repeats allowed). `None` when too large to index
    /// (over `u32::MAX` keys).
    pub(crate) fn new(mut hashes: Vec<u64>) -> Option<KeySet> {
        hashes.sort_unstable();
        hashes.dedup();
        let n = u32::try_from(hashes.len()).ok()?;
        let bits = (n / 16).max(1).ilog2().min(24);
        let mut dir = Vec::with_capacity((1 << bits) + 1);
        let mut at = 0usize;
        for i in 0..(1u64 << bits) {
            while at < hashes.len() && Self::top(hashes[at], bits) < i {
                at += 1;
            }
            dir.push(at as u32);
        }
        dir.push(n);
        hashes.shrink_to_fit();
        Some(KeySet { hashes, dir, bits })
    }

    fn top(h: u64, bits: u32) -> u64 {
        if bits == 0 {
            0
        } else {
            h >> (64 - bits)
        }
    }

    /// Whether a key with hash `h` is in the file.
    pub(crate) fn contains(&self, h: u64) -> bool {
        let i = Self::top(h, self.bits) as usize;
        let (Some(&lo), Some(&hi)) = (self.dir.get(i), self.dir.get(i + 1)) else { return true };
        self.hashes.get(lo as usize..hi as usize).is_none_or(|r| r.binary_search(&h).is_ok())
    }

    /// The hashes, ascending.
    pub(crate) fn hashes(&self) -> &[u64] {
        &self.hashes
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.hashes.capacity() * 8 + self.dir.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sst::bloom::key_hash;

    #[test]
    fn exact_membership_at_every_size() {
        for n in [0u64, 1, 2, 15, 16, 17, 100, 5_000, 70_000] {
            let mut hashes: Vec<u64> = (0..n).map(|i| key_hash(&i.to_be_bytes())).collect();
            hashes.extend(hashes.clone().iter().take(3)); // repeats
            let set = KeySet::new(hashes).expect("small set");
            for i in 0..n {
                assert!(set.contains(key_hash(&i.to_be_bytes())), "n={n}: key {i} missing");
            }
            let false_hits = (n..n + 10_000).filter(|i| set.contains(key_hash(&i.to_be_bytes()))).count();
            assert_eq!(false_hits, 0, "n={n}");
        }
        // Hashes at the ends of the range.
        let set = KeySet::new(vec![0, u64::MAX, 1 << 63]).expect("small set");
        assert!(set.contains(0) && set.contains(u64::MAX) && set.contains(1 << 63));
        assert!(!set.contains(1) && !set.contains(u64::MAX - 1));
    }
}
