//! Bloom filter over a file's distinct primary keys (double hashing on one 64-bit xxh3 hash).
//! Encoded as the bit array followed by one byte: the number of probes.

use xxhash_rust::xxh3::xxh3_64;

/// Hash used for filter probes.
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// Builds the encoded filter for the given key hashes.
pub(crate) fn build(hashes: &[u64], bits_per_key: usize) -> Vec<u8> {
    if bits_per_key == 0 || hashes.is_empty() {
        return Vec::new();
    }
    let k = ((bits_per_key as f64) * 0.69).round().clamp(1.0, 30.0) as u8;
    let nbits = (hashes.len() * bits_per_key).max(64);
    let nbytes = nbits.div_ceil(8);
    let nbits = nbytes * 8;
    let mut bits = vec![0u8; nbytes + 1];
    for &h in hashes {
        let (mut a, b) = ((h as u32), ((h >> 32) as u32) | 1);
        for _ in 0..k {
            let p = a as usize % nbits;
            bits[p / 8] |= 1 << (p % 8);
            a = a.wrapping_add(b);
        }
    }
    bits[nbytes] = k;
    bits
}

/// Whether the key with hash `h` may be in the set. An empty filter (disabled) says yes.
pub(crate) fn may_contain(filter: &[u8], h: u64) -> bool {
    let Some((&k, bits)) = filter.split_last() else {
        return true;
    };
    if bits.is_empty() || k == 0 || k > 30 {
        return true;
    }
    let nbits = bits.len() * 8;
    let (mut a, b) = ((h as u32), ((h >> 32) as u32) | 1);
    for _ in 0..k {
        let p = a as usize % nbits;
        if bits[p / 8] & (1 << (p % 8)) == 0 {
            return false;
        }
        a = a.wrapping_add(b);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_low_false_positive_rate() {
        let keys: Vec<u64> = (0..10_000u64).map(|i| key_hash(&i.to_be_bytes())).collect();
        let f = build(&keys, 10);
        assert!(keys.iter().all(|&h| may_contain(&f, h)));
        let fp = (10_000..110_000u64).filter(|i| may_contain(&f, key_hash(&i.to_be_bytes()))).count();
        assert!(fp < 2_000, "false positive rate too high: {fp}/100000");
        assert!(may_contain(&[], 1));
    }
}
