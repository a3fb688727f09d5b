//! The compact row encoding shared by the WAL and the memtable.
//!
//! A row image holds the value columns of one version of a row; a partial row (an update) carries
//! only some of them. Layout, for `n` value columns:
//!
//! ```text
//! presence bitmap  ceil(n/8) bytes   bit i set = column i is carried
//! null bitmap      ceil(n/8) bytes   bit i set = column i is NULL (only meaningful if carried)
//! values           for each carried, non-null column in order:
//!                  fixed-width types: little-endian bytes of the type's width
//!                  TEXT / BYTEA:      varint length + bytes
//! ```

use super::{ColumnType, Value};
use crate::codec::{put_bytes, DecodeError, DecodeResult, Reader};

/// The value columns of one row version, by value-column index. `None` = not carried (a
/// partial row leaves it to older versions); `Some(Value::Null)` = carried and NULL.
pub type Cells = Vec<Option<Value>>;

fn bit(bm: &[u8], i: usize) -> bool {
    bm.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0)
}

/// Whether an encoded row carries value column `c` (reads only the presence bitmap; a tombstone's
/// empty row carries nothing).
pub(crate) fn carries(row: &[u8], nvals: usize, c: usize) -> bool {
    c < nvals && bit(row.get(..nvals.div_ceil(8)).unwrap_or_default(), c)
}

/// The value columns an encoded row carries, ascending.
pub(crate) fn carried(row: &[u8], nvals: usize) -> impl Iterator<Item = usize> + Clone + '_ {
    (0..nvals).filter(move |&c| carries(row, nvals, c))
}

/// One value column of an encoded row (or of a block), not decoded: fixed-width types as their
/// little-endian bytes, TEXT / BYTEA as their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawCell<'a> {
    /// Not carried by this version.
    Absent,
    /// NULL.
    Null,
    /// A value.
    Bytes(&'a [u8]),
}

impl RawCell<'_> {
    /// Decodes into a value of type `ty` (`None` when absent or for TEXT that is not UTF-8,
    /// which validated input never holds).
    #[inline]
    pub(crate) fn to_value(self, ty: ColumnType) -> Option<Value> {
        match self {
            RawCell::Absent => None,
            RawCell::Null => Some(Value::Null),
            RawCell::Bytes(b) => match ty.fixed_width() {
                Some(_) => Some(Value::from_fixed(ty, b)),
                None => Value::from_var(ty, b),
            },
        }
    }
}

/// Walks the value columns of an encoded row in order without decoding values. An empty row
/// (a tombstone's) carries nothing.
pub(crate) struct RowIter<'a> {
    types: &'a [ColumnType],
    presence: &'a [u8],
    nulls: &'a [u8],
    r: Reader<'a>,
    i: usize,
}

impl<'a> RowIter<'a> {
    pub(crate) fn new(types: &'a [ColumnType], row: &'a [u8]) -> DecodeResult<Self> {
        let nb = types.len().div_ceil(8);
        let mut r = Reader::new(row);
        let (presence, nulls) = if row.is_empty() { (&row[..0], &row[..0]) } else { (r.take(nb)?, r.take(nb)?) };
        Ok(RowIter { types, presence, nulls, r, i: 0 })
    }
}

impl<'a> Iterator for RowIter<'a> {
    type Item = DecodeResult<RawCell<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let ty = *self.types.get(self.i)?;
        let i = self.i;
        self.i += 1;
        if !bit(self.presence, i) {
            return Some(Ok(RawCell::Absent));
        }
        if bit(self.nulls, i) {
            return Some(Ok(RawCell::Null));
        }
        Some(match ty.fixed_width() {
            Some(w) => self.r.take(w).map(RawCell::Bytes),
            None => self.r.bytes().map(RawCell::Bytes),
        })
    }
}

/// Encodes a row from raw cells, one per value column in order (`types.len()` of them).
pub(crate) fn encode_raw_row<'v>(
    types: &[ColumnType],
    cells: impl IntoIterator<Item = RawCell<'v>>,
    out: &mut Vec<u8>,
) {
    let n = types.len();
    let nb = n.div_ceil(8);
    let start = out.len();
    out.resize(start + 2 * nb, 0);
    for ((i, ty), cell) in types.iter().enumerate().zip(cells) {
        match cell {
            RawCell::Absent => {}
            RawCell::Null => {
                out[start + i / 8] |= 1 << (i % 8);
                out[start + nb + i / 8] |= 1 << (i % 8);
            }
            RawCell::Bytes(b) => {
                out[start + i / 8] |= 1 << (i % 8);
                match ty.fixed_width() {
                    Some(_) => out.extend_from_slice(b),
                    None => put_bytes(out, b),
                }
            }
        }
    }
}

/// Encodes `newer` laid over `older` onto `out`: each value column from `newer` where it carries
/// one, else from `older` (the memtable folds a partial row into the version below it this way).
pub(crate) fn overlay_row(types: &[ColumnType], newer: &[u8], older: &[u8], out: &mut Vec<u8>) -> DecodeResult<()> {
    let mut bad = None;
    let cells = RowIter::new(types, newer)?.zip(RowIter::new(types, older)?).map(|pair| match pair {
        (Ok(RawCell::Absent), Ok(o)) => o,
        (Ok(n), Ok(_)) => n,
        (Err(e), _) | (_, Err(e)) => {
            bad = Some(e);
            RawCell::Absent
        }
    });
    encode_raw_row(types, cells, out);
    bad.map_or(Ok(()), Err)
}

/// Encodes `cells` (one per value column; values already type-checked) onto `out`.
pub(crate) fn encode_row(types: &[ColumnType], cells: &[Option<Value>], out: &mut Vec<u8>) {
    encode_row_with(types, |i| cells.get(i).and_then(Option::as_ref), out);
}

/// Encodes the row whose value column `i` is `cell(i)` (`None` = not carried).
pub(crate) fn encode_row_with<'v>(types: &[ColumnType], cell: impl Fn(usize) -> Option<&'v Value>, out: &mut Vec<u8>) {
    let n = types.len();
    let nb = n.div_ceil(8);
    let start = out.len();
    out.resize(start + 2 * nb, 0);
    for i in 0..n {
        if let Some(v) = cell(i) {
            out[start + i / 8] |= 1 << (i % 8);
            if v.is_null() {
                out[start + nb + i / 8] |= 1 << (i % 8);
            }
        }
    }
    for (i, ty) in types.iter().enumerate() {
        match cell(i) {
            Some(v) if !v.is_null() => match v.var_bytes() {
                Some(b) if ty.fixed_width().is_none() => put_bytes(out, b),
                _ => v.put_fixed(out),
            },
            _ => {}
        }
    }
}

/// Decodes a row image. Columns not set in `wanted` (when given) are skipped and come back `None`.
pub(crate) fn decode_row(types: &[ColumnType], b: &[u8], wanted: Option<&[bool]>) -> DecodeResult<Cells> {
    let n = types.len();
    let nb = n.div_ceil(8);
    let mut cells = Vec::with_capacity(n);
    if b.is_empty() {
        cells.resize(n, None);
        return Ok(cells);
    }
    let mut r = Reader::new(b);
    let presence = r.take(nb)?;
    let nulls = r.take(nb)?;
    for (i, &ty) in types.iter().enumerate() {
        if !bit(presence, i) {
            cells.push(None);
            continue;
        }
        let want = wanted.is_none_or(|w| w.get(i).copied().unwrap_or(false));
        if bit(nulls, i) {
            cells.push(if want { Some(Value::Null) } else { None });
            continue;
        }
        let v = match ty.fixed_width() {
            Some(w) => {
                let raw = r.take(w)?;
                want.then(|| Value::from_fixed(ty, raw))
            }
            None => {
                let raw = r.bytes()?;
                if want {
                    Some(Value::from_var(ty, raw).ok_or_else(|| DecodeError::new("invalid utf-8 in TEXT value"))?)
                } else {
                    None
                }
            }
        };
        cells.push(v);
    }
    if !r.is_empty() {
        return Err(DecodeError::new("trailing bytes after row"));
    }
    Ok(cells)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_partial_rows_and_projection() {
        let types = [ColumnType::Int, ColumnType::Text, ColumnType::Double, ColumnType::Boolean, ColumnType::Bytea];
        let cells: Cells = vec![
            Some(Value::Int(-3)),
            None,
            Some(Value::Null),
            Some(Value::Boolean(true)),
            Some(Value::Bytea(vec![0, 1, 2])),
        ];
        let mut b = Vec::new();
        encode_row(&types, &cells, &mut b);
        assert_eq!(decode_row(&types, &b, None).unwrap(), cells);
        let w = [false, true, false, true, false];
        assert_eq!(decode_row(&types, &b, Some(&w)).unwrap(), vec![None, None, None, Some(Value::Boolean(true)), None]);
        assert!(decode_row(&types, &b[..b.len() - 1], None).is_err());
        // Raw cells walk the same encoding and re-encode to the same bytes.
        let raw: Vec<RawCell<'_>> = RowIter::new(&types, &b).unwrap().map(Result::unwrap).collect();
        assert_eq!(raw[0], RawCell::Bytes(&(-3i32).to_le_bytes()));
        assert_eq!((raw[1], raw[2]), (RawCell::Absent, RawCell::Null));
        let mut again = Vec::new();
        encode_raw_row(&types, raw.iter().copied(), &mut again);
        assert_eq!(again, b);
        assert_eq!(decode_row(&types, &[], None).unwrap(), vec![None; 5]);
    }
}
