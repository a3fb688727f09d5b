//! Key pages: a block's keys and sequence numbers stored so that row `i`'s key and sequence
//! number are found by arithmetic, and a key by binary search, without walking the rows before
//! it (format 4; format 3 prefix-coded every key against the previous one and stored sequence
//! numbers as varints, so every lookup walked the block).
//!
//! Key section (little-endian):
//! ```text
//! mode u8 | prefix len varint | prefix bytes          the prefix every key of the block shares
//! mode 0 (fixed):   width varint | n × width bytes      every key is prefix ‖ its width bytes
//! mode 1 (bundled): shift u8 | offset width u8 (2 or 4) | (items + 1) × offset | heap
//! mode 2 (keyless): nothing more; the rows' keys live elsewhere (a group page of a row-group
//!                   file, whose key pages hold them)
//! ```
//! In bundled mode keys come in bundles of `1 << shift` rows; each bundle stores the prefix its
//! keys share beyond the block's, then each key's remaining bytes. The items are, bundle by
//! bundle, the bundle's prefix followed by its keys' suffixes; offset `j` is where item `j`
//! starts in the heap and the last one is the heap's length. Key `i` is the block prefix ‖ its
//! bundle's prefix ‖ its suffix (Pebble's `PrefixBytes` in spirit).
//!
//! Sequence section: `base u64 | width u8 | n × width bytes` (empty when `n == 0`): row `i`'s
//! sequence number is `base` plus its `width`-byte little-endian offset (width 0, 1, 2, 4 or 8).

use std::cmp::Ordering;

use crate::codec::{put_varint, DecodeError, DecodeResult, Reader};

/// Rows per bundle in bundled mode (as a shift).
const BUNDLE_SHIFT: u8 = 4;

/// Key section modes.
const FIXED: u8 = 0;
const BUNDLED: u8 = 1;
const KEYLESS: u8 = 2;

/// Appends the key section of a block whose rows' keys live elsewhere.
pub(crate) fn encode_keyless(out: &mut Vec<u8>) {
    out.push(KEYLESS);
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Encodes `n` sorted keys (repeats allowed), key `i` being `data[ends[i - 1]..ends[i]]`
/// (`ends[-1]` = 0), as a key section appended to `out`.
pub(crate) fn encode_keys(data: &[u8], ends: &[u32], out: &mut Vec<u8>) {
    let n = ends.len();
    let key = |i: usize| &data[if i == 0 { 0 } else { ends[i - 1] as usize }..ends[i] as usize];
    let plen = if n == 0 { 0 } else { common_prefix(key(0), key(n - 1)) };
    // Fixed mode when every key has one length (an empty block too).
    let width = if n == 0 { Some(0) } else { Some(key(0).len()).filter(|&w| (1..n).all(|i| key(i).len() == w)) };
    out.push(if width.is_some() { FIXED } else { BUNDLED });
    put_varint(out, plen as u64);
    if n > 0 {
        out.extend_from_slice(&key(0)[..plen]);
    }
    if let Some(w) = width {
        put_varint(out, (w - plen) as u64);
        for i in 0..n {
            out.extend_from_slice(&key(i)[plen..]);
        }
        return;
    }
    let per = 1usize << BUNDLE_SHIFT;
    let nbundles = n.div_ceil(per);
    let mut heap = Vec::with_capacity(data.len());
    let mut starts = Vec::with_capacity(nbundles + n + 1);
    for b in 0..nbundles {
        let (first, last) = (b * per, ((b + 1) * per).min(n) - 1);
        let blen = plen + common_prefix(&key(first)[plen..], &key(last)[plen..]);
        starts.push(heap.len());
        heap.extend_from_slice(&key(first)[plen..blen]);
        for i in first..=last {
            starts.push(heap.len());
            heap.extend_from_slice(&key(i)[blen..]);
        }
    }
    starts.push(heap.len());
    out.push(BUNDLE_SHIFT);
    let ow = if heap.len() <= usize::from(u16::MAX) { 2 } else { 4 };
    out.push(ow as u8);
    for s in starts {
        out.extend_from_slice(&(s as u32).to_le_bytes()[..ow]);
    }
    out.extend_from_slice(&heap);
}

/// Encodes sequence numbers as a sequence section appended to `out`.
pub(crate) fn encode_seqs(seqs: &[u64], out: &mut Vec<u8>) {
    let Some(&base) = seqs.iter().min() else { return };
    let span = seqs.iter().max().map_or(0, |&m| m - base);
    let width: usize = match span {
        0 => 0,
        1..=0xff => 1,
        0x100..=0xffff => 2,
        0x1_0000..=0xffff_ffff => 4,
        _ => 8,
    };
    out.extend_from_slice(&base.to_le_bytes());
    out.push(width as u8);
    for &s in seqs {
        out.extend_from_slice(&(s - base).to_le_bytes()[..width]);
    }
}

/// Reads a little-endian unsigned integer of `width` bytes (at most 8).
#[inline]
fn read_uint(b: &[u8], width: usize) -> u64 {
    let mut a = [0u8; 8];
    a[..width].copy_from_slice(&b[..width]);
    u64::from_le_bytes(a)
}

/// The first `width` bytes of `b` (at most 8) as a big-endian number.
#[inline]
fn word(b: &[u8], width: usize) -> u64 {
    b[..width].iter().fold(0, |w, &x| (w << 8) | u64::from(x))
}

/// The first of `0..n` for which `below` is false, where it is true on a prefix of the range: a
/// binary search.
#[inline]
fn first_not(n: usize, below: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The first of `from..n` for which `past` holds (`n` if none), walking.
#[inline]
fn first_from(from: usize, n: usize, past: impl Fn(usize) -> bool) -> usize {
    (from..n).find(|&i| past(i)).unwrap_or(n)
}

/// Compares `key` with the concatenation `a ‖ b`.
#[inline]
fn cmp_concat(key: &[u8], a: &[u8], b: &[u8]) -> Ordering {
    let n = key.len().min(a.len());
    match key[..n].cmp(a) {
        Ordering::Equal if n == a.len() => key[n..].cmp(b),
        // `key` is a proper prefix of `a` (so below it), or they differ within `key[..n]`.
        Ordering::Equal => Ordering::Less,
        o => o,
    }
}

/// A validated key section, as positions in the block's content (so a block can hold it
/// beside the bytes it describes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyPage {
    n: usize,
    prefix: (usize, usize),
    layout: KeyLayout,
}

#[derive(Debug, Clone, Copy)]
enum KeyLayout {
    /// Suffixes of `width` bytes from `at`.
    Fixed { width: usize, at: usize },
    /// Offsets of `ow` bytes from `offsets`, the heap from `heap`.
    Bundled { shift: u32, ow: usize, offsets: usize, heap: usize },
    /// No keys stored (see [`encode_keyless`]): every row reads as the empty key.
    Keyless,
}

/// What checking a key section found out.
pub(crate) struct KeyFacts {
    /// Some key occurs more than once (several versions).
    pub repeats: bool,
    /// Bytes of all keys, decoded.
    pub key_bytes: usize,
}

impl KeyFacts {
    /// Notes how a key compares with the next one: out of order is an error.
    fn note(&mut self, order: Ordering) -> DecodeResult<()> {
        match order {
            Ordering::Greater => return Err(DecodeError::new("keys out of order")),
            Ordering::Equal => self.repeats = true,
            Ordering::Less => {}
        }
        Ok(())
    }
}

impl KeyPage {
    /// Checks the key section `body[start..end]` of `n` rows: its structure, and that keys do not
    /// decrease. After this every key access is in bounds.
    pub(crate) fn parse(body: &[u8], (start, end): (usize, usize), n: usize) -> DecodeResult<(KeyPage, KeyFacts)> {
        let section = &body[start..end];
        let mut r = Reader::new(section);
        let mode = r.u8()?;
        if mode == KEYLESS {
            if section.len() != 1 {
                return Err(DecodeError::new("trailing bytes in keyless key section"));
            }
            let page = KeyPage { n, prefix: (start + 1, start + 1), layout: KeyLayout::Keyless };
            return Ok((page, KeyFacts { repeats: false, key_bytes: 0 }));
        }
        let plen = r.len(section.len())?;
        let prefix = (start + r.pos(), start + r.pos() + plen);
        r.take(plen)?;
        let layout = match mode {
            FIXED => {
                let width = r.len(section.len())?;
                if n.checked_mul(width) != Some(r.remaining()) {
                    return Err(DecodeError::new("fixed-width key section size mismatch"));
                }
                KeyLayout::Fixed { width, at: start + r.pos() }
            }
            BUNDLED => {
                let shift = u32::from(r.u8()?);
                let ow = usize::from(r.u8()?);
                if shift > 15 || !(ow == 2 || ow == 4) || n == 0 {
                    return Err(DecodeError::new("bad bundled key section header"));
                }
                let items = n + n.div_ceil(1 << shift);
                let offsets = start + r.pos();
                r.take((items + 1) * ow)?;
                let heap = start + r.pos();
                let page = KeyPage { n, prefix, layout: KeyLayout::Bundled { shift, ow, offsets, heap } };
                let off = |j: usize| read_uint(&body[offsets + j * ow..], ow) as usize;
                if off(0) != 0 || off(items) != end - heap || (0..items).any(|j| off(j) > off(j + 1)) {
                    return Err(DecodeError::new("bad key offsets"));
                }
                page.layout
            }
            _ => return Err(DecodeError::new("unknown key section mode")),
        };
        let page = KeyPage { n, prefix, layout };
        let mut facts = KeyFacts { repeats: false, key_bytes: n * plen };
        if let KeyLayout::Fixed { width, at } = layout {
            // Keys side by side: each against the next, with no bundle to look up.
            facts.key_bytes += n * width;
            if width == 0 {
                facts.repeats = n > 1;
            } else {
                let keys = &body[at..at + n * width];
                for (a, b) in keys.chunks_exact(width).zip(keys.chunks_exact(width).skip(1)) {
                    facts.note(a.cmp(b))?;
                }
            }
            return Ok((page, facts));
        }
        for i in 0..n {
            let (q, s) = page.parts(body, i);
            facts.key_bytes += q.len() + s.len();
            if i > 0 {
                // Key i - 1 against key i, both past the block prefix; within a bundle their
                // bundle prefixes are the same bytes.
                let (pq, ps) = page.parts(body, i - 1);
                let order = if std::ptr::eq(pq, q) || (pq.is_empty() && q.is_empty()) {
                    ps.cmp(s)
                } else {
                    pq.iter().chain(ps).cmp(q.iter().chain(s))
                };
                facts.note(order)?;
            }
        }
        Ok((page, facts))
    }

    /// Row `i`'s key past the block prefix, as its bundle's prefix and its own bytes (empty
    /// bundle prefix in fixed mode).
    #[inline]
    fn parts<'a>(&self, body: &'a [u8], i: usize) -> (&'a [u8], &'a [u8]) {
        match self.layout {
            KeyLayout::Keyless => (&[], &[]),
            KeyLayout::Fixed { width, at } => (&[], &body[at + i * width..at + (i + 1) * width]),
            KeyLayout::Bundled { shift, ow, offsets, heap } => {
                let off = |j: usize| heap + read_uint(&body[offsets + j * ow..], ow) as usize;
                let b = i >> shift;
                let bundle = b << shift;
                // Item of bundle b's prefix, then its keys.
                let head = bundle + b;
                let item = head + 1 + (i - bundle);
                (&body[off(head)..off(head + 1)], &body[off(item)..off(item + 1)])
            }
        }
    }

    /// Whether the rows' keys are stored here (not a keyless section).
    pub(crate) fn has_keys(&self) -> bool {
        !matches!(self.layout, KeyLayout::Keyless)
    }

    fn prefix<'a>(&self, body: &'a [u8]) -> &'a [u8] {
        &body[self.prefix.0..self.prefix.1]
    }

    /// Appends row `i`'s key to `out`.
    pub(crate) fn push_key(&self, body: &[u8], i: usize, out: &mut Vec<u8>) {
        let (q, s) = self.parts(body, i);
        out.extend_from_slice(self.prefix(body));
        out.extend_from_slice(q);
        out.extend_from_slice(s);
    }

    /// How `key` compares with row `i`'s key.
    #[inline]
    fn cmp_rest(&self, body: &[u8], rest: &[u8], i: usize) -> Ordering {
        let (q, s) = self.parts(body, i);
        cmp_concat(rest, q, s)
    }

    /// The first row whose key is not below `key` (`n` if none): a binary search, no walk.
    pub(crate) fn lower_bound(&self, body: &[u8], key: &[u8]) -> usize {
        self.search(body, key).0
    }

    /// [`Self::lower_bound`], and the row past the last one equal to `key` (the same row when
    /// none is).
    pub(crate) fn equal_range(&self, body: &[u8], key: &[u8]) -> (usize, usize) {
        let (lo, rest) = self.search(body, key);
        let Some(rest) = rest else { return (lo, lo) };
        // Equal keys follow the lower bound side by side, mostly one or none: walked.
        let end = match self.fixed_word(rest) {
            Some((width, at, k)) => first_from(lo, self.n, |i| word(&body[at + i * width..], width) != k),
            None => first_from(lo, self.n, |i| self.cmp_rest(body, rest, i) != Ordering::Equal),
        };
        (lo, end)
    }

    /// For fixed-width suffixes of at most eight bytes and a key past the prefix of that width
    /// (every point read of a fixed-width key), the suffixes' width and place and the key as a
    /// number: equal-width byte strings order as their big-endian values, so a search compares
    /// integers instead of calling `memcmp`.
    #[inline]
    fn fixed_word(&self, rest: &[u8]) -> Option<(usize, usize, u64)> {
        match self.layout {
            KeyLayout::Fixed { width, at } if width <= 8 && rest.len() == width => Some((width, at, word(rest, width))),
            _ => None,
        }
    }

    /// The lower bound of `key`, and `key` past the block prefix when it starts with it.
    fn search<'k>(&self, body: &[u8], key: &'k [u8]) -> (usize, Option<&'k [u8]>) {
        let p = self.prefix(body);
        let n = key.len().min(p.len());
        match key[..n].cmp(p) {
            Ordering::Less => return (0, None),
            Ordering::Greater => return (self.n, None),
            // A key that is a proper prefix of the block prefix is below every key.
            Ordering::Equal if n < p.len() => return (0, None),
            Ordering::Equal => {}
        }
        let rest = &key[p.len()..];
        let lo = match self.fixed_word(rest) {
            Some((width, at, k)) => first_not(self.n, |i| word(&body[at + i * width..], width) < k),
            None => first_not(self.n, |i| self.cmp_rest(body, rest, i) == Ordering::Greater),
        };
        (lo, Some(rest))
    }
}

/// A validated sequence section, as positions in the block's content.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeqPage {
    base: u64,
    width: usize,
    at: usize,
}

impl SeqPage {
    /// Checks the sequence section `body[start..end]` of `n` rows; returns it with the largest
    /// sequence number (0 when `n == 0`).
    pub(crate) fn parse(body: &[u8], (start, end): (usize, usize), n: usize) -> DecodeResult<(SeqPage, u64)> {
        if n == 0 {
            if start != end {
                return Err(DecodeError::new("trailing bytes in seq section"));
            }
            return Ok((SeqPage { base: 0, width: 0, at: start }, 0));
        }
        let mut r = Reader::new(&body[start..end]);
        let base = r.u64()?;
        let width = usize::from(r.u8()?);
        if ![0, 1, 2, 4, 8].contains(&width) || r.remaining() != n * width {
            return Err(DecodeError::new("bad seq section"));
        }
        let page = SeqPage { base, width, at: start + r.pos() };
        let stored = &body[page.at..page.at + n * width];
        let largest: u64 = match width {
            0 => 0,
            1 => stored.iter().copied().max().map_or(0, u64::from),
            2 => stored.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).max().map_or(0, u64::from),
            4 => {
                stored.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).max().map_or(0, u64::from)
            }
            _ => stored.chunks_exact(8).map(|c| read_uint(c, 8)).max().unwrap_or(0),
        };
        let max = base.checked_add(largest).ok_or_else(|| DecodeError::new("sequence number overflows"))?;
        Ok((page, max))
    }

    /// The sequence section of a keyless block (empty; every row reads as 0).
    pub(crate) fn none(at: usize) -> SeqPage {
        SeqPage { base: 0, width: 0, at }
    }

    /// Row `i`'s sequence number.
    #[inline]
    pub(crate) fn get(&self, body: &[u8], i: usize) -> u64 {
        self.base + read_uint(&body[self.at + i * self.width..], self.width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn encode(keys: &[Vec<u8>]) -> Vec<u8> {
        let mut data = Vec::new();
        let mut ends = Vec::new();
        for k in keys {
            data.extend_from_slice(k);
            ends.push(data.len() as u32);
        }
        let mut out = Vec::new();
        encode_keys(&data, &ends, &mut out);
        out
    }

    /// The search a walk over every key does: first row not below `key`, and past its run.
    fn linear(keys: &[Vec<u8>], key: &[u8]) -> (usize, usize) {
        let lo = keys.iter().position(|k| k.as_slice() >= key).unwrap_or(keys.len());
        let hi = lo + keys[lo..].iter().take_while(|k| k.as_slice() == key).count();
        (lo, hi)
    }

    fn check(keys: &[Vec<u8>], probes: &[Vec<u8>], what: &str) {
        let body = encode(keys);
        let (page, facts) = KeyPage::parse(&body, (0, body.len()), keys.len()).unwrap();
        assert_eq!(facts.key_bytes, keys.iter().map(Vec::len).sum::<usize>(), "{what}");
        assert_eq!(facts.repeats, keys.windows(2).any(|w| w[0] == w[1]), "{what}");
        for (i, k) in keys.iter().enumerate() {
            let mut out = Vec::new();
            page.push_key(&body, i, &mut out);
            assert_eq!(&out, k, "{what}: key {i}");
        }
        for p in keys.iter().chain(probes) {
            assert_eq!(page.equal_range(&body, p), linear(keys, p), "{what}: probe {p:?}");
        }
    }

    /// Random sorted keys with shared prefixes, repeats (versions) and keys that are prefixes of
    /// others, fixed or varied in length: the walk-free search agrees with a linear walk.
    #[test]
    fn search_agrees_with_a_linear_walk() {
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for round in 0..400 {
            let fixed = rng.gen_bool(0.4);
            let len = rng.gen_range(0..12);
            let head: Vec<u8> = (0..rng.gen_range(0..6)).map(|_| rng.gen_range(b'a'..b'c')).collect();
            let mut keys: Vec<Vec<u8>> = (0..rng.gen_range(0..300))
                .map(|_| {
                    let l = if fixed { len } else { rng.gen_range(0..12) };
                    let mut k = head.clone();
                    k.extend((0..l).map(|_| rng.gen_range(b'a'..b'd')));
                    k
                })
                .collect();
            keys.sort();
            let mut versions = Vec::new();
            for k in keys {
                for _ in 0..rng.gen_range(1..4) {
                    versions.push(k.clone());
                }
            }
            let probes: Vec<Vec<u8>> = (0..40)
                .map(|_| (0..rng.gen_range(0..16)).map(|_| rng.gen_range(b'a'..b'e')).collect())
                .chain([vec![], head.clone(), vec![0xff; 3]])
                .collect();
            check(&versions, &probes, &format!("seed {seed} round {round}"));
        }
    }

    /// Bundle edges: one row, a bundle exactly full, one row over, one under.
    #[test]
    fn bundle_edges() {
        let per = 1usize << BUNDLE_SHIFT;
        for n in [1, per - 1, per, per + 1, 3 * per, 3 * per + 1] {
            let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("k{}", i * 7).into_bytes()).collect();
            let mut keys = keys;
            keys.sort();
            check(&keys, &[b"k".to_vec(), b"k8".to_vec(), b"z".to_vec()], &format!("{n} rows"));
        }
        check(&[], &[b"a".to_vec(), vec![]], "no rows");
        check(&[vec![], vec![]], &[b"a".to_vec(), vec![]], "two empty keys");
    }

    #[test]
    fn large_heaps_take_four_byte_offsets() {
        let keys: Vec<Vec<u8>> =
            (0..200u32).map(|i| [i.to_be_bytes().to_vec(), vec![7; 400 + i as usize]].concat()).collect();
        let body = encode(&keys);
        assert_eq!(body[body[1] as usize + 3], 4, "offset width");
        check(&keys, &[vec![0, 0, 0, 5], vec![1]], "large");
    }

    #[test]
    fn seqs_round_trip_at_every_width() {
        for span in [0u64, 1, 255, 256, 65_535, 65_536, u32::MAX as u64 + 1, u64::MAX - 10] {
            let seqs = [10u64, 10 + span / 2, 10u64.saturating_add(span)];
            let mut out = Vec::new();
            encode_seqs(&seqs, &mut out);
            let (page, max) = SeqPage::parse(&out, (0, out.len()), 3).unwrap();
            assert_eq!(max, seqs[2], "span {span}");
            for (i, &s) in seqs.iter().enumerate() {
                assert_eq!(page.get(&out, i), s, "span {span}");
            }
            assert!(SeqPage::parse(&out, (0, out.len() - 1), 3).is_err() || span == 0);
        }
    }

    #[test]
    fn damaged_sections_are_refused() {
        let keys: Vec<Vec<u8>> = (0..40).map(|i: u32| format!("key{}", i * i).into_bytes()).collect();
        let mut keys = keys;
        keys.sort();
        let body = encode(&keys);
        // Out of order.
        let mut swapped = keys.clone();
        swapped.swap(3, 9);
        let bad = encode(&swapped);
        assert!(KeyPage::parse(&bad, (0, bad.len()), 40).is_err());
        // A wrong row count, a truncated section, an unknown mode.
        assert!(KeyPage::parse(&body, (0, body.len()), 41).is_err());
        assert!(KeyPage::parse(&body, (0, body.len() - 1), 40).is_err());
        let mut mode = body.clone();
        mode[0] = 7;
        assert!(KeyPage::parse(&mode, (0, mode.len()), 40).is_err());
    }
}
