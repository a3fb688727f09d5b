//! Zone maps: per block and column, the minimum and maximum non-null value and counts of NULLs
//! and of rows carrying the column. Scans use them to skip blocks.
//!
//! Encoding: `flags u8 (bit 0: min/max present) | nulls varint | carried varint | [min | max]`,
//! min and max as the column's fixed-width little-endian bytes or as varint-length bytes for TEXT
//! and BYTEA. Var-width values longer than [`MAX_VAR_BOUND`] bytes disable min/max for the block.

use std::sync::Arc;

use crate::codec::{put_bytes, put_varint, DecodeError, DecodeResult, Reader};
use crate::types::{ColumnType, Value};

/// Longest TEXT/BYTEA value kept as a zone-map bound.
pub(crate) const MAX_VAR_BOUND: usize = 64;

/// Statistics of one column in one block.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZoneMap {
    /// Smallest non-null value (`None` if no non-null value or bounds were not kept).
    pub min: Option<Value>,
    /// Largest non-null value.
    pub max: Option<Value>,
    /// Rows where the column is NULL.
    pub nulls: u64,
    /// Rows carrying the column (partial rows may not).
    pub carried: u64,
    bounded: bool,
}

/// An order-preserving integer for a fixed-width value's little-endian bytes (the value's
/// key encoding read as a big-endian number), so bounds compare without decoding.
#[inline(always)]
fn sort_key(ty: ColumnType, b: &[u8]) -> u64 {
    // Constant-size reads for each width (a variable-length copy is a call to memcpy).
    let raw = match b.len() {
        8 => u64::from_le_bytes(<[u8; 8]>::try_from(b).unwrap_or_default()),
        4 => u64::from(u32::from_le_bytes(<[u8; 4]>::try_from(b).unwrap_or_default())),
        2 => u64::from(u16::from_le_bytes(<[u8; 2]>::try_from(b).unwrap_or_default())),
        1 => u64::from(b[0]),
        _ => {
            let mut a = [0u8; 8];
            let n = b.len().min(8);
            a[..n].copy_from_slice(&b[..n]);
            u64::from_le_bytes(a)
        }
    };
    match ty {
        ColumnType::BigInt | ColumnType::Timestamp | ColumnType::TimestampTz => raw ^ (1 << 63),
        ColumnType::Int | ColumnType::Date => (raw as u32 ^ (1 << 31)) as u64,
        ColumnType::SmallInt => (raw as u16 ^ (1 << 15)) as u64,
        ColumnType::TinyInt => (raw as u8 ^ 0x80) as u64,
        ColumnType::Double => {
            if raw >> 63 == 1 {
                !raw
            } else {
                raw ^ (1 << 63)
            }
        }
        ColumnType::Real => {
            let r = raw as u32;
            (if r >> 31 == 1 { !r } else { r ^ (1 << 31) }) as u64
        }
        ColumnType::Boolean | ColumnType::Text | ColumnType::Bytea => raw,
    }
}

/// A fixed-width bound: its sort key and its stored bytes.
type FixedBound = (u64, [u8; 8]);

fn bit(bm: &[u8], i: usize) -> bool {
    bm.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
}

/// The smallest and largest of the `w`-byte values in `fixed` that count (see
/// [`ZoneBuilder::bound_fixed`]), ordered by `key`.
#[inline(always)]
fn bounds(
    fixed: &[u8],
    w: usize,
    present: Option<&[u8]>,
    nulls: Option<&[u8]>,
    key: impl Fn(&[u8]) -> u64,
) -> Option<(FixedBound, FixedBound)> {
    let counts = |i: usize| present.is_none_or(|p| bit(p, i)) && nulls.is_none_or(|n| !bit(n, i));
    let mut best: Option<(u64, usize, u64, usize)> = None;
    let mut take = |i: usize, k: u64| {
        best = Some(match best {
            None => (k, i, k, i),
            Some((lo, li, hi, hj)) => {
                let (lo, li) = if k < lo { (k, i) } else { (lo, li) };
                let (hi, hj) = if k > hi { (k, i) } else { (hi, hj) };
                (lo, li, hi, hj)
            }
        });
    };
    let values = fixed.chunks_exact(w).enumerate();
    // Without bitmaps every value counts: no per-value check, and the bounds come from a fold
    // over the keys alone (branch-free, which the compiler vectorizes for the common widths);
    // a second walk finds the first value holding each bound.
    if present.is_none() && nulls.is_none() {
        let (lo, hi) = match w {
            8 => min_max(fixed.chunks_exact(8), &key),
            4 => min_max(fixed.chunks_exact(4), &key),
            _ => min_max(fixed.chunks_exact(w), &key),
        }?;
        let first = |k: u64| fixed.chunks_exact(w).position(|v| key(v) == k).unwrap_or(0);
        best = Some((lo, first(lo), hi, first(hi)));
    } else {
        values.filter(|(i, _)| counts(*i)).for_each(|(i, v)| take(i, key(v)));
    }
    let raw = |i: usize| {
        let mut r = [0u8; 8];
        let v = &fixed[i * w..(i + 1) * w];
        r[..v.len().min(8)].copy_from_slice(&v[..v.len().min(8)]);
        r
    };
    best.map(|(lo, li, hi, hj)| ((lo, raw(li)), (hi, raw(hj))))
}

/// The smallest and largest key of `values` (`None` when there are none).
#[inline(always)]
fn min_max<'a>(values: impl Iterator<Item = &'a [u8]>, key: &impl Fn(&[u8]) -> u64) -> Option<(u64, u64)> {
    let (lo, hi, n) = values.fold((u64::MAX, 0u64, 0usize), |(lo, hi, n), v| {
        let k = key(v);
        (lo.min(k), hi.max(k), n + 1)
    });
    (n > 0).then_some((lo, hi))
}

/// Accumulates one column's zone map while a block is built, from stored bytes.
#[derive(Debug, Clone)]
pub(crate) struct ZoneBuilder {
    ty: ColumnType,
    nulls: u64,
    carried: u64,
    bounded: bool,
    /// Fixed-width bounds: the minimum and the maximum.
    fixed: Option<(FixedBound, FixedBound)>,
    /// Var-width bounds.
    var: Option<(Vec<u8>, Vec<u8>)>,
}

impl ZoneBuilder {
    pub(crate) fn new(ty: ColumnType) -> Self {
        ZoneBuilder { ty, nulls: 0, carried: 0, bounded: true, fixed: None, var: None }
    }

    /// Takes a TEXT/BYTEA value into the bounds. (Counts are set per block,
    /// [`Self::set_counts`]; fixed-width bounds too, [`Self::bound_fixed`].)
    pub(crate) fn add_var(&mut self, b: &[u8]) {
        if !self.bounded {
            return;
        }
        if b.len() > MAX_VAR_BOUND {
            self.bounded = false;
            self.var = None;
            return;
        }
        match &mut self.var {
            None => self.var = Some((b.to_vec(), b.to_vec())),
            Some((lo, hi)) => {
                if b < lo.as_slice() {
                    lo.clear();
                    lo.extend_from_slice(b);
                }
                if b > hi.as_slice() {
                    hi.clear();
                    hi.extend_from_slice(b);
                }
            }
        }
    }

    /// Takes one cell of a row (a memtable version) into the counts and bounds.
    pub(crate) fn add_cell(&mut self, cell: crate::types::row::RawCell<'_>) {
        use crate::types::row::RawCell;
        match cell {
            RawCell::Absent => {}
            RawCell::Null => {
                self.carried += 1;
                self.nulls += 1;
            }
            RawCell::Bytes(b) => {
                self.carried += 1;
                match self.ty.fixed_width() {
                    Some(_) => {
                        // The stored bytes are copied only when the value is a new bound.
                        let k = sort_key(self.ty, b);
                        let raw = || {
                            let mut r = [0u8; 8];
                            let n = b.len().min(8);
                            r[..n].copy_from_slice(&b[..n]);
                            r
                        };
                        match &mut self.fixed {
                            None => {
                                let r = raw();
                                self.fixed = Some(((k, r), (k, r)));
                            }
                            Some((lo, hi)) => {
                                if k < lo.0 {
                                    *lo = (k, raw());
                                }
                                if k > hi.0 {
                                    *hi = (k, raw());
                                }
                            }
                        }
                    }
                    None => self.add_var(b),
                }
            }
        }
    }

    /// Takes `o`'s cells (a builder of the same column) into this one's counts and bounds.
    pub(crate) fn absorb(&mut self, o: &ZoneBuilder) {
        self.carried += o.carried;
        self.nulls += o.nulls;
        if let Some((olo, ohi)) = o.fixed {
            self.fixed = Some(match self.fixed {
                None => (olo, ohi),
                Some((lo, hi)) => (if olo.0 < lo.0 { olo } else { lo }, if ohi.0 > hi.0 { ohi } else { hi }),
            });
        }
        if !o.bounded {
            self.bounded = false;
            self.var = None;
        } else if let Some((lo, hi)) = &o.var {
            self.add_var(lo);
            self.add_var(hi);
        }
    }

    /// Sets the counts of cells carried and of NULLs.
    pub(crate) fn set_counts(&mut self, carried: u64, nulls: u64) {
        self.carried = carried;
        self.nulls = nulls;
    }

    /// The bounds of a fixed-width column's block: `fixed` holds one value per row, of which
    /// those whose bit is set in `present` (all when `None`) and clear in `nulls` (none when
    /// `None`) count. One pass per block, specialized by type, instead of a step per cell.
    pub(crate) fn bound_fixed(&mut self, fixed: &[u8], present: Option<&[u8]>, nulls: Option<&[u8]>) {
        let Some(w) = self.ty.fixed_width() else { return };
        let ty = self.ty;
        self.fixed = match ty {
            ColumnType::BigInt | ColumnType::Timestamp | ColumnType::TimestampTz => {
                bounds(fixed, w, present, nulls, |b| sort_key(ColumnType::BigInt, b))
            }
            ColumnType::Int | ColumnType::Date => bounds(fixed, w, present, nulls, |b| sort_key(ColumnType::Int, b)),
            ColumnType::Double => bounds(fixed, w, present, nulls, |b| sort_key(ColumnType::Double, b)),
            _ => bounds(fixed, w, present, nulls, |b| sort_key(ty, b)),
        };
    }

    pub(crate) fn finish(&self) -> ZoneMap {
        let (min, max) = match (&self.fixed, &self.var) {
            (Some((lo, hi)), _) => (Some(Value::from_fixed(self.ty, &lo.1)), Some(Value::from_fixed(self.ty, &hi.1))),
            (None, Some((lo, hi))) => (Value::from_var(self.ty, lo), Value::from_var(self.ty, hi)),
            (None, None) => (None, None),
        };
        ZoneMap { min, max, nulls: self.nulls, carried: self.carried, bounded: self.bounded }
    }
}

impl ZoneMap {
    /// The zone map of this one's rows and `o`'s together.
    pub(crate) fn merge(&self, o: &ZoneMap) -> ZoneMap {
        use crate::types::compare;
        use std::cmp::Ordering;
        let has_values = |z: &ZoneMap| z.carried > z.nulls;
        let (min, max) = match (has_values(self), has_values(o)) {
            (_, false) => (self.min.clone(), self.max.clone()),
            (false, true) => (o.min.clone(), o.max.clone()),
            (true, true) => match (&self.min, &self.max, &o.min, &o.max) {
                (Some(a), Some(b), Some(c), Some(d)) => (
                    Some(if compare(c, a) == Ordering::Less { c.clone() } else { a.clone() }),
                    Some(if compare(d, b) == Ordering::Greater { d.clone() } else { b.clone() }),
                ),
                _ => (None, None),
            },
        };
        let bounded = min.is_some() && max.is_some();
        // Counts read from a damaged file may be anything: they add up without overflowing.
        let (nulls, carried) = (self.nulls.saturating_add(o.nulls), self.carried.saturating_add(o.carried));
        ZoneMap { min, max, nulls, carried, bounded }
    }

    /// The zone map of `rows` rows with no NULL whose values lie in `[min, max]`.
    pub(crate) fn bounds(min: Value, max: Value, rows: u64) -> ZoneMap {
        ZoneMap { min: Some(min), max: Some(max), nulls: 0, carried: rows, bounded: true }
    }

    pub(crate) fn encode(&self, ty: ColumnType, out: &mut Vec<u8>) {
        let has = self.min.is_some() && self.max.is_some();
        out.push(u8::from(has));
        put_varint(out, self.nulls);
        put_varint(out, self.carried);
        if let (Some(a), Some(b)) = (&self.min, &self.max) {
            for v in [a, b] {
                match ty.fixed_width() {
                    Some(_) => v.put_fixed(out),
                    None => put_bytes(out, v.var_bytes().unwrap_or_default()),
                }
            }
        }
    }

    /// Passes over one encoded zone map without decoding its bounds.
    fn skip(ty: ColumnType, r: &mut Reader<'_>) -> DecodeResult<()> {
        let flags = r.u8()?;
        r.varint()?;
        r.varint()?;
        if flags & 1 != 0 {
            for _ in 0..2 {
                match ty.fixed_width() {
                    Some(w) => r.take(w)?,
                    None => r.bytes()?,
                };
            }
        }
        Ok(())
    }

    pub(crate) fn decode(ty: ColumnType, r: &mut Reader<'_>) -> DecodeResult<Self> {
        let flags = r.u8()?;
        let nulls = r.varint()?;
        let carried = r.varint()?;
        if nulls > carried {
            return Err(DecodeError::new("zone map counts more NULLs than values"));
        }
        let mut z = ZoneMap { nulls, carried, bounded: flags & 1 != 0, ..Default::default() };
        if flags & 1 != 0 {
            let mut read = || -> DecodeResult<Value> {
                match ty.fixed_width() {
                    Some(w) => Ok(Value::from_fixed(ty, r.take(w)?)),
                    None => Value::from_var(ty, r.bytes()?).ok_or_else(|| DecodeError::new("bad utf-8 in zone map")),
                }
            };
            z.min = Some(read()?);
            z.max = Some(read()?);
        }
        Ok(z)
    }
}

/// One block's zone maps, one per column of its group, held as encoded in the index block and
/// decoded when asked: an open file keeps a few bytes per column and block in memory instead of
/// two decoded values each.
#[derive(Debug, Clone)]
pub(crate) struct Zones {
    bytes: Box<[u8]>,
    types: Arc<[ColumnType]>,
    /// Columns whose zone map is not known (empty: all are known); see [`Self::partial`].
    unknown: Box<[bool]>,
}

impl Zones {
    /// The encoding of `zones` (columns of `types`).
    pub(crate) fn new(zones: &[ZoneMap], types: Arc<[ColumnType]>) -> Zones {
        let mut bytes = Vec::new();
        for (z, &ty) in zones.iter().zip(types.iter()) {
            z.encode(ty, &mut bytes);
        }
        Zones { bytes: bytes.into(), types, unknown: Box::new([]) }
    }

    /// Zone maps some of which are not known: [`Self::get`] gives `None` for those. (Not
    /// encoded: only views of row-group files' pages are built so.)
    pub(crate) fn partial(zones: &[Option<ZoneMap>], types: Arc<[ColumnType]>) -> Zones {
        let known: Vec<ZoneMap> = zones.iter().map(|z| z.clone().unwrap_or_default()).collect();
        let unknown: Box<[bool]> = zones.iter().map(Option::is_none).collect();
        let unknown = if unknown.iter().any(|&u| u) { unknown } else { Box::new([]) };
        Zones { unknown, ..Zones::new(&known, types) }
    }

    /// Reads and checks one zone map per column of `types`.
    pub(crate) fn decode(types: Arc<[ColumnType]>, r: &mut Reader<'_>) -> DecodeResult<Zones> {
        let mut whole = Reader::new(r.rest());
        for &ty in types.iter() {
            ZoneMap::decode(ty, &mut whole)?;
        }
        let bytes = r.take(whole.pos())?;
        Ok(Zones { bytes: bytes.into(), types, unknown: Box::new([]) })
    }

    /// Column `j`'s zone map (`None` past the group's columns, or when not known).
    pub(crate) fn get(&self, j: usize) -> Option<ZoneMap> {
        let ty = *self.types.get(j)?;
        if self.unknown.get(j).copied().unwrap_or(false) {
            return None;
        }
        let mut r = Reader::new(&self.bytes);
        for &t in &self.types[..j] {
            ZoneMap::skip(t, &mut r).ok()?;
        }
        // Checked when the index was read.
        ZoneMap::decode(ty, &mut r).ok()
    }

    /// Number of columns.
    pub(crate) fn len(&self) -> usize {
        self.types.len()
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bytes);
    }

    /// Bytes held (the column types are shared by the file).
    pub(crate) fn memory(&self) -> usize {
        self.bytes.len() + self.unknown.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::row::RawCell;
    use rand::{Rng, SeedableRng};

    /// Found by the `zone_map` fuzz target: counts near `u64::MAX` in two zone maps overflowed
    /// when merged. More NULLs than values is now corrupt, and merged counts saturate.
    #[test]
    fn zone_map_counts_from_a_damaged_index_neither_overflow_nor_pass() {
        let mut enc = Vec::new();
        ZoneMap { nulls: 5, carried: 4, ..Default::default() }.encode(ColumnType::Int, &mut enc);
        assert!(ZoneMap::decode(ColumnType::Int, &mut Reader::new(&enc)).is_err());
        let huge = ZoneMap { nulls: u64::MAX - 1, carried: u64::MAX, ..Default::default() };
        let mut enc = Vec::new();
        huge.encode(ColumnType::Int, &mut enc);
        let z = ZoneMap::decode(ColumnType::Int, &mut Reader::new(&enc)).expect("ordered counts");
        let merged = z.merge(&z);
        assert_eq!((merged.nulls, merged.carried), (u64::MAX, u64::MAX));
    }

    fn raw(v: &Value) -> Vec<u8> {
        let mut b = Vec::new();
        v.put_fixed(&mut b);
        if let Some(x) = v.var_bytes() {
            b.extend_from_slice(x);
        }
        b
    }

    #[test]
    fn bounds_match_a_naive_min_max_for_every_type() {
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        type Gen = Box<dyn Fn(&mut rand::rngs::StdRng) -> Value>;
        let gens: Vec<(ColumnType, Gen)> = vec![
            (ColumnType::BigInt, Box::new(|r| Value::BigInt(r.gen()))),
            (ColumnType::Int, Box::new(|r| Value::Int(r.gen()))),
            (ColumnType::SmallInt, Box::new(|r| Value::SmallInt(r.gen()))),
            (ColumnType::TinyInt, Box::new(|r| Value::TinyInt(r.gen()))),
            (ColumnType::Double, Box::new(|r| Value::Double((r.gen::<f64>() - 0.5) * 1e6))),
            (ColumnType::Real, Box::new(|r| Value::Real(r.gen::<f32>() - 0.5))),
            (ColumnType::Boolean, Box::new(|r| Value::Boolean(r.gen()))),
            (ColumnType::Text, Box::new(|r| Value::Text(format!("{:x}", r.gen::<u32>())))),
        ];
        for ((ty, gen), gaps) in gens.iter().flat_map(|g| [(g, false), (g, true)]) {
            // Through the block builder, which bounds fixed-width columns per block: values,
            // and with `gaps` a NULL and a row not carrying the column, in random places.
            let vals: Vec<Value> = (0..200).map(|_| gen(&mut rng)).collect();
            let mut cells: Vec<RawCell<'_>> = Vec::new();
            let raws: Vec<Vec<u8>> = vals.iter().map(raw).collect();
            cells.extend(raws.iter().map(|r| RawCell::Bytes(r)));
            if gaps {
                cells.insert(rng.gen_range(0..cells.len()), RawCell::Null);
                cells.insert(rng.gen_range(0..cells.len()), RawCell::Absent);
            }
            let mut b = crate::sst::block::BlockBuilder::new(&[*ty]);
            for (i, c) in cells.iter().enumerate() {
                b.add(&(i as u32).to_be_bytes(), 1, crate::mvcc::Kind::Put, std::iter::once(*c));
            }
            let zm = b.finish().1.zones.remove(0);
            let key = |v: &Value| crate::types::key::encode_key(&[*ty], std::slice::from_ref(v));
            let min = vals.iter().min_by_key(|v| key(v)).cloned();
            let max = vals.iter().max_by_key(|v| key(v)).cloned();
            assert_eq!((zm.min, zm.max), (min, max), "seed {seed} type {ty:?} gaps {gaps}");
            assert_eq!((zm.nulls, zm.carried), if gaps { (1, 201) } else { (0, 200) }, "seed {seed} type {ty:?}");
        }
    }

    #[test]
    fn a_blocks_zone_maps_read_back_column_by_column_from_their_encoding() {
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let all = [ColumnType::Int, ColumnType::Text, ColumnType::Double, ColumnType::Bytea, ColumnType::Boolean];
        for round in 0..50 {
            let types: Arc<[ColumnType]> = (0..rng.gen_range(1..8)).map(|_| all[rng.gen_range(0..all.len())]).collect();
            let zones: Vec<ZoneMap> = types
                .iter()
                .map(|&ty| {
                    let v = |r: &mut rand::rngs::StdRng| match ty {
                        ColumnType::Int => Value::Int(r.gen()),
                        ColumnType::Double => Value::Double(r.gen()),
                        ColumnType::Boolean => Value::Boolean(r.gen()),
                        ColumnType::Text => Value::Text("t".repeat(r.gen_range(0..70))),
                        _ => Value::Bytea(vec![r.gen(); r.gen_range(0..9)]),
                    };
                    let bounded = rng.gen_bool(0.7);
                    let nulls = rng.gen_range(0..300);
                    ZoneMap {
                        min: bounded.then(|| v(&mut rng)),
                        max: bounded.then(|| v(&mut rng)),
                        nulls,
                        carried: nulls + rng.gen_range(0..300),
                        bounded,
                    }
                })
                .collect();
            let z = Zones::new(&zones, types.clone());
            let mut bytes = Vec::new();
            z.encode(&mut bytes);
            bytes.push(0xAB);
            let mut r = Reader::new(&bytes);
            let back = Zones::decode(types.clone(), &mut r).unwrap();
            assert_eq!(r.rest(), &[0xAB], "seed {seed} round {round}: zone maps end where they end");
            for (j, want) in zones.iter().enumerate() {
                assert_eq!(back.get(j).as_ref(), Some(want), "seed {seed} round {round} column {j}");
            }
            assert_eq!(back.get(zones.len()), None);
            assert!(Zones::decode(types, &mut Reader::new(&bytes[..bytes.len() / 2])).is_err(), "seed {seed}");
        }
    }
}
