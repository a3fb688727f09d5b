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
    bm[i / 8] & (1 << (i % 8)) != 0
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
    let mut r = Reader::new(b);
    let presence = r.take(nb)?;
    let nulls = r.take(nb)?;
    let mut cells = Vec::with_capacity(n);
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
    }
}
