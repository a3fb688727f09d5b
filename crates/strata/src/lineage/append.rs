//! Append-only storage one writer fills while readers read it without locks: slots in segments
//! that double in size and are allocated on first use, so a column no record ever carries costs
//! nothing and a slot never moves once written. A writer stores into slots first and publishes
//! them afterwards (a length, an indirection pointer) with release ordering; a reader that
//! acquired that publication sees the stores.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::types::{ColumnType, Value};

/// Slots in the first segment; segment `k` holds `FIRST << k`.
const FIRST: usize = 64;
/// Enough segments for more slots than any range or table will hold (`FIRST << 26` ≈ 4 billion).
const SEGMENTS: usize = 26;

/// Slots of `T`, allocated a segment at a time.
pub(crate) struct Segments<T> {
    segs: [OnceLock<Box<[T]>>; SEGMENTS],
}

impl<T: Default> Default for Segments<T> {
    fn default() -> Self {
        Segments { segs: std::array::from_fn(|_| OnceLock::new()) }
    }
}

/// Segment and offset of slot `i`.
#[inline]
fn locate(i: usize) -> (usize, usize) {
    let j = i + FIRST;
    let k = (usize::BITS - 1 - j.leading_zeros()) as usize - FIRST.trailing_zeros() as usize;
    (k, j - (FIRST << k))
}

impl<T: Default> Segments<T> {
    /// Slot `i`, if its segment exists (every slot below a published length has one).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        let (k, off) = locate(i);
        self.segs.get(k)?.get()?.get(off)
    }

    /// Slot `i`, allocating its segment first if needed. Writer only.
    pub(crate) fn slot(&self, i: usize) -> &T {
        let (k, off) = locate(i);
        // `locate` stays below SEGMENTS for every index a u32 record count can reach.
        let seg = self.segs[k.min(SEGMENTS - 1)].get_or_init(|| (0..FIRST << k).map(|_| T::default()).collect());
        &seg[off.min(seg.len() - 1)]
    }

    /// Bytes allocated.
    pub(crate) fn bytes(&self) -> usize {
        self.segs.iter().filter_map(OnceLock::get).map(|s| s.len() * std::mem::size_of::<T>()).sum()
    }
}

impl Segments<AtomicU64> {
    #[inline]
    pub(crate) fn load(&self, i: usize) -> u64 {
        self.get(i).map_or(0, |a| a.load(Ordering::Relaxed))
    }

    #[inline]
    pub(crate) fn store(&self, i: usize, v: u64) {
        self.slot(i).store(v, Ordering::Relaxed);
    }
}

/// The value of a fixed-width type as 64 bits (`from_bits` reverses it).
pub(crate) fn to_bits(v: &Value) -> u64 {
    match v {
        Value::BigInt(x) | Value::Timestamp(x) | Value::TimestampTz(x) => *x as u64,
        Value::Int(x) | Value::Date(x) => *x as u32 as u64,
        Value::SmallInt(x) => *x as u16 as u64,
        Value::TinyInt(x) => *x as u8 as u64,
        Value::Double(x) => x.to_bits(),
        Value::Real(x) => u64::from(x.to_bits()),
        Value::Boolean(b) => u64::from(*b),
        Value::Null | Value::Text(_) | Value::Bytea(_) => 0,
    }
}

/// The value of type `ty` stored as `bits`.
pub(crate) fn from_bits(ty: ColumnType, bits: u64) -> Value {
    Value::from_fixed(ty, &bits.to_le_bytes())
}

/// One column of values, fixed-width types as 64 bits, TEXT and BYTEA as their bytes. NULL is
/// kept apart (in the record's null mask), so a slot holds only a value.
pub(crate) enum Column {
    Fixed(Segments<AtomicU64>),
    /// The slots, and the bytes of the values stored in them.
    Var(Segments<OnceLock<Box<[u8]>>>, AtomicU64),
}

impl Column {
    pub(crate) fn new(ty: ColumnType) -> Column {
        match ty.fixed_width() {
            Some(_) => Column::Fixed(Segments::default()),
            None => Column::Var(Segments::default(), AtomicU64::new(0)),
        }
    }

    /// Stores a non-NULL value into slot `i`. Writer only, each slot once.
    pub(crate) fn put(&self, i: usize, v: &Value) {
        match (self, v) {
            (Column::Fixed(s), v) => s.store(i, to_bits(v)),
            (Column::Var(s, bytes), Value::Text(t)) => {
                let _ = s.slot(i).set(t.as_bytes().into());
                bytes.fetch_add(t.len() as u64, Ordering::Relaxed);
            }
            (Column::Var(s, bytes), Value::Bytea(b)) => {
                let _ = s.slot(i).set(b.as_slice().into());
                bytes.fetch_add(b.len() as u64, Ordering::Relaxed);
            }
            (Column::Var(..), _) => {}
        }
    }

    /// The value in slot `i` (written and published before).
    pub(crate) fn value(&self, ty: ColumnType, i: usize) -> Value {
        match self {
            Column::Fixed(s) => from_bits(ty, s.load(i)),
            Column::Var(s, _) => {
                let b = s.get(i).and_then(OnceLock::get).map_or(&[][..], |b| &b[..]);
                Value::from_var(ty, b).unwrap_or(Value::Null)
            }
        }
    }

    /// Bytes allocated, values of variable width included.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Column::Fixed(s) => s.bytes(),
            Column::Var(s, bytes) => s.bytes() + bytes.load(Ordering::Relaxed) as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_map_to_distinct_places_across_segment_boundaries() {
        let s: Segments<AtomicU64> = Segments::default();
        let idx: Vec<usize> = (0..150).chain([FIRST * 3 - 1, FIRST * 3, 100_000, 1_000_003]).collect();
        for &i in &idx {
            assert!(s.get(i).is_none() || s.load(i) == 0);
            s.store(i, i as u64 * 7 + 1);
        }
        for &i in &idx {
            assert_eq!(s.load(i), i as u64 * 7 + 1, "slot {i}");
        }
        let (k, off) = locate(FIRST * 3 - 1);
        assert_eq!((k, off), (1, FIRST * 2 - 1));
        assert_eq!(locate(FIRST * 3), (2, 0));
    }

    #[test]
    fn values_round_trip_through_columns() {
        let cases = [
            (ColumnType::BigInt, Value::BigInt(-5)),
            (ColumnType::Int, Value::Int(-7)),
            (ColumnType::SmallInt, Value::SmallInt(-300)),
            (ColumnType::TinyInt, Value::TinyInt(-3)),
            (ColumnType::Double, Value::Double(-0.5)),
            (ColumnType::Real, Value::Real(2.25)),
            (ColumnType::Boolean, Value::Boolean(true)),
            (ColumnType::Text, Value::Text("héllo".into())),
            (ColumnType::Bytea, Value::Bytea(vec![0, 255, 3])),
        ];
        for (ty, v) in cases {
            let c = Column::new(ty);
            c.put(70, &v);
            assert_eq!(c.value(ty, 70), v, "{ty:?}");
        }
    }
}
