//! Evaluating a [`Filter`] on a chunk of rows: zone maps first (a clause false on every row of a
//! block skips it, one true on every row is not evaluated), then each remaining atom with arrow's
//! comparison kernels, clauses OR-ed and AND-ed as bitmaps. TEXT/BYTEA comparisons on blocks go
//! through the 4-byte prefixes first and read the heap only for rows whose prefix ties.

use std::cmp::Ordering;

use arrow_array::{Array, ArrayRef, BooleanArray, Scalar, UInt32Array};
use arrow_buffer::BooleanBuffer;
use arrow_ord::cmp;

use super::arrow::{repeat, validity, var_range};
use super::cnf::{compare, Atom, Test};
use super::CmpOp;
use crate::error::{Error, Result};
use crate::sst::block::{prefix_of, ColumnParts};
use crate::sst::zone::ZoneMap;
use crate::types::{ColumnType, Value};

/// What a zone map says about an atom or clause over a block's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// False (or unknown) on every row.
    Never,
    /// True on every row.
    Always,
    /// Cannot tell.
    Maybe,
}

/// An atom's verdict from its column's zone map over `rows` rows that all carry the column.
pub(crate) fn atom_verdict(atom: &Atom, z: &ZoneMap, rows: u64) -> Verdict {
    let all_null = z.nulls >= rows;
    let no_null = z.nulls == 0;
    match &atom.test {
        Test::IsNull if no_null => Verdict::Never,
        Test::IsNull if all_null => Verdict::Always,
        Test::IsNotNull if all_null => Verdict::Never,
        Test::IsNotNull if no_null => Verdict::Always,
        Test::IsNull | Test::IsNotNull => Verdict::Maybe,
        Test::Cmp(..) if all_null => Verdict::Never,
        Test::Cmp(op, v) => {
            let (Some(min), Some(max)) = (&z.min, &z.max) else { return Verdict::Maybe };
            let (lo, hi) = (compare(min, v), compare(max, v));
            // Over [min, max]: the atom holds everywhere (and no NULL) or nowhere.
            let (all, none) = match op {
                CmpOp::Eq => {
                    (lo == Ordering::Equal && hi == Ordering::Equal, lo == Ordering::Greater || hi == Ordering::Less)
                }
                CmpOp::NotEq => {
                    (lo == Ordering::Greater || hi == Ordering::Less, lo == Ordering::Equal && hi == Ordering::Equal)
                }
                CmpOp::Lt => (hi == Ordering::Less, lo != Ordering::Less),
                CmpOp::LtEq => (hi != Ordering::Greater, lo == Ordering::Greater),
                CmpOp::Gt => (lo == Ordering::Greater, hi != Ordering::Greater),
                CmpOp::GtEq => (lo != Ordering::Less, hi == Ordering::Less),
            };
            if none {
                Verdict::Never
            } else if all && no_null {
                Verdict::Always
            } else {
                Verdict::Maybe
            }
        }
    }
}

/// A clause's verdict: `zone(column)` gives the zone map of a column over the same rows, if known.
pub(crate) fn clause_verdict<'z>(clause: &[Atom], rows: u64, zone: impl Fn(usize) -> Option<&'z ZoneMap>) -> Verdict {
    let mut all_never = true;
    for a in clause {
        match zone(a.column).map_or(Verdict::Maybe, |z| atom_verdict(a, z, rows)) {
            Verdict::Always => return Verdict::Always,
            Verdict::Maybe => all_never = false,
            Verdict::Never => {}
        }
    }
    if all_never {
        Verdict::Never
    } else {
        Verdict::Maybe
    }
}

fn arrow_err(e: arrow_schema::ArrowError) -> Error {
    Error::InvalidArgument(format!("filter evaluation: {e}"))
}

/// True where a kernel's result is true (NULL counts as false).
fn true_bits(b: &BooleanArray) -> BooleanBuffer {
    match b.nulls() {
        Some(n) => b.values() & n.inner(),
        None => b.values().clone(),
    }
}

fn compare_kernel(op: CmpOp, l: &dyn arrow_array::Datum, r: &dyn arrow_array::Datum) -> Result<BooleanArray> {
    match op {
        CmpOp::Eq => cmp::eq(l, r),
        CmpOp::NotEq => cmp::neq(l, r),
        CmpOp::Lt => cmp::lt(l, r),
        CmpOp::LtEq => cmp::lt_eq(l, r),
        CmpOp::Gt => cmp::gt(l, r),
        CmpOp::GtEq => cmp::gt_eq(l, r),
    }
    .map_err(arrow_err)
}

/// Rows of `array` (a column of type `ty`) where `atom` is true.
pub(crate) fn atom_on_array(atom: &Atom, ty: ColumnType, array: &ArrayRef) -> Result<BooleanBuffer> {
    Ok(match &atom.test {
        Test::IsNull => match array.logical_nulls() {
            Some(n) => !n.inner(),
            None => BooleanBuffer::new_unset(array.len()),
        },
        Test::IsNotNull => match array.logical_nulls() {
            Some(n) => n.inner().clone(),
            None => BooleanBuffer::new_set(array.len()),
        },
        Test::Cmp(op, v) => {
            let lit = Scalar::new(repeat(ty, v, 1));
            true_bits(&compare_kernel(*op, array, &lit)?)
        }
    })
}

/// Rows of a block's TEXT/BYTEA column (`rows` of `p`, with `prefixes` of those rows) where
/// `column op literal` holds: decided by the prefixes, the heap read only where they tie.
pub(crate) fn text_atom_on_block(
    op: CmpOp,
    literal: &[u8],
    p: &ColumnParts<'_>,
    rows: &std::ops::Range<usize>,
    prefixes: &UInt32Array,
) -> Result<BooleanBuffer> {
    let lit = Scalar::new(UInt32Array::from(vec![prefix_of(literal)]));
    // Strictly ordered prefixes order the values; ties need the bytes.
    let strict = match op {
        CmpOp::Lt | CmpOp::LtEq => Some(CmpOp::Lt),
        CmpOp::Gt | CmpOp::GtEq => Some(CmpOp::Gt),
        CmpOp::NotEq => Some(CmpOp::NotEq),
        CmpOp::Eq => None,
    };
    let mut out = match strict {
        Some(s) => true_bits(&compare_kernel(s, prefixes, &lit)?),
        None => BooleanBuffer::new_unset(rows.len()),
    };
    let ties = true_bits(&compare_kernel(CmpOp::Eq, prefixes, &lit)?);
    if ties.count_set_bits() > 0 {
        let mut settled = Vec::with_capacity(rows.len());
        settled.resize(rows.len(), false);
        for i in ties.set_indices() {
            let v = var_range(p, rows.start + i)
                .and_then(|r| p.heap.get(r))
                .ok_or_else(|| Error::corruption("<scan>", 0, "var-width offsets out of range"))?;
            settled[i] = op.holds(v.cmp(literal));
        }
        out = &out | &BooleanBuffer::from(settled);
    }
    // NULL rows have an empty value and prefix 0; they never pass.
    if let Some(valid) = validity(p.nulls, rows, None) {
        out = &out & valid.inner();
    }
    Ok(out)
}

/// The bytes of a TEXT/BYTEA literal.
pub(crate) fn literal_bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::Text(s) => Some(s.as_bytes()),
        Value::Bytea(b) => Some(b),
        _ => None,
    }
}
