//! Zone maps: per block and column, the minimum and maximum non-null value and counts of NULLs
//! and of rows carrying the column. Scans use them to skip blocks.
//!
//! Encoding: `flags u8 (bit 0: min/max present) | nulls varint | carried varint | [min | max]`,
//! min and max as the column's fixed-width little-endian bytes or as varint-length bytes for TEXT
//! and BYTEA. Var-width values longer than [`MAX_VAR_BOUND`] bytes disable min/max for the block.

use std::cmp::Ordering;

use crate::codec::{put_bytes, put_varint, DecodeError, DecodeResult, Reader};
use crate::types::{ColumnType, Value};

/// Longest TEXT/BYTEA value kept as a zone-map bound.
pub(crate) const MAX_VAR_BOUND: usize = 64;

/// Orders two non-null values of the same type (floats by total order).
pub(crate) fn cmp_values(a: &Value, b: &Value) -> Ordering {
    use Value::*;
    match (a, b) {
        (BigInt(x), BigInt(y)) => x.cmp(y),
        (Int(x), Int(y)) => x.cmp(y),
        (SmallInt(x), SmallInt(y)) => x.cmp(y),
        (TinyInt(x), TinyInt(y)) => x.cmp(y),
        (Double(x), Double(y)) => x.total_cmp(y),
        (Real(x), Real(y)) => x.total_cmp(y),
        (Boolean(x), Boolean(y)) => x.cmp(y),
        (Text(x), Text(y)) => x.cmp(y),
        (Bytea(x), Bytea(y)) => x.cmp(y),
        _ => Ordering::Equal,
    }
}

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

impl ZoneMap {
    pub(crate) fn new() -> Self {
        ZoneMap { bounded: true, ..Default::default() }
    }

    pub(crate) fn add(&mut self, v: &Value) {
        self.carried += 1;
        if v.is_null() {
            self.nulls += 1;
            return;
        }
        if !self.bounded {
            return;
        }
        if v.var_bytes().is_some_and(|b| b.len() > MAX_VAR_BOUND) {
            self.bounded = false;
            self.min = None;
            self.max = None;
            return;
        }
        if self.min.as_ref().is_none_or(|m| cmp_values(v, m) == Ordering::Less) {
            self.min = Some(v.clone());
        }
        if self.max.as_ref().is_none_or(|m| cmp_values(v, m) == Ordering::Greater) {
            self.max = Some(v.clone());
        }
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

    pub(crate) fn decode(ty: ColumnType, r: &mut Reader<'_>) -> DecodeResult<Self> {
        let flags = r.u8()?;
        let nulls = r.varint()?;
        let carried = r.varint()?;
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
