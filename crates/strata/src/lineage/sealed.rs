//! A base page's sealed values: an Arrow array, kept downcast to its concrete type so that a
//! point read takes one value without dynamic dispatch, and rebuilt with changes laid over it
//! (by the merge, and by scans laying tail records over a page) with one copy of its buffer.

use std::sync::Arc;

use arrow_array::types::{
    Date32Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, TimestampMicrosecondType,
};
use arrow_array::{Array, ArrayRef, ArrowPrimitiveType, BinaryArray, BooleanArray, PrimitiveArray, StringArray};
use arrow_buffer::{BooleanBufferBuilder, NullBuffer};

use crate::scan::arrow::{value_at, ValuesBuilder};
use crate::types::{ColumnType, Value};

/// A sealed column, by concrete type.
#[derive(Debug, Clone)]
pub(crate) enum Sealed {
    I64(PrimitiveArray<Int64Type>),
    I32(PrimitiveArray<Int32Type>),
    I16(PrimitiveArray<Int16Type>),
    I8(PrimitiveArray<Int8Type>),
    F64(PrimitiveArray<Float64Type>),
    F32(PrimitiveArray<Float32Type>),
    Date(PrimitiveArray<Date32Type>),
    /// TIMESTAMP and TIMESTAMPTZ (the array's type carries the time zone).
    Ts(PrimitiveArray<TimestampMicrosecondType>),
    Bool(BooleanArray),
    Text(StringArray),
    Bytes(BinaryArray),
    /// Any other array (none is built): read through dynamic dispatch.
    Other(ArrayRef),
}

impl Sealed {
    /// The array as its concrete type.
    pub(crate) fn new(a: ArrayRef) -> Sealed {
        use arrow_array::cast::AsArray;
        use arrow_schema::DataType;
        match a.data_type() {
            DataType::Int64 => Sealed::I64(a.as_primitive::<Int64Type>().clone()),
            DataType::Int32 => Sealed::I32(a.as_primitive::<Int32Type>().clone()),
            DataType::Int16 => Sealed::I16(a.as_primitive::<Int16Type>().clone()),
            DataType::Int8 => Sealed::I8(a.as_primitive::<Int8Type>().clone()),
            DataType::Float64 => Sealed::F64(a.as_primitive::<Float64Type>().clone()),
            DataType::Float32 => Sealed::F32(a.as_primitive::<Float32Type>().clone()),
            DataType::Date32 => Sealed::Date(a.as_primitive::<Date32Type>().clone()),
            DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, _) => {
                Sealed::Ts(a.as_primitive::<TimestampMicrosecondType>().clone())
            }
            DataType::Boolean => Sealed::Bool(a.as_boolean().clone()),
            DataType::Utf8 => Sealed::Text(a.as_string::<i32>().clone()),
            DataType::Binary => Sealed::Bytes(a.as_binary::<i32>().clone()),
            _ => Sealed::Other(a),
        }
    }

    /// The values as an array (shares the buffers).
    pub(crate) fn array(&self) -> ArrayRef {
        match self {
            Sealed::I64(a) => Arc::new(a.clone()),
            Sealed::I32(a) => Arc::new(a.clone()),
            Sealed::I16(a) => Arc::new(a.clone()),
            Sealed::I8(a) => Arc::new(a.clone()),
            Sealed::F64(a) => Arc::new(a.clone()),
            Sealed::F32(a) => Arc::new(a.clone()),
            Sealed::Date(a) => Arc::new(a.clone()),
            Sealed::Ts(a) => Arc::new(a.clone()),
            Sealed::Bool(a) => Arc::new(a.clone()),
            Sealed::Text(a) => Arc::new(a.clone()),
            Sealed::Bytes(a) => Arc::new(a.clone()),
            Sealed::Other(a) => a.clone(),
        }
    }

    fn dyn_array(&self) -> &dyn Array {
        match self {
            Sealed::I64(a) => a,
            Sealed::I32(a) => a,
            Sealed::I16(a) => a,
            Sealed::I8(a) => a,
            Sealed::F64(a) => a,
            Sealed::F32(a) => a,
            Sealed::Date(a) => a,
            Sealed::Ts(a) => a,
            Sealed::Bool(a) => a,
            Sealed::Text(a) => a,
            Sealed::Bytes(a) => a,
            Sealed::Other(a) => a.as_ref(),
        }
    }

    /// The smallest and largest non-null value (`None` when every value is NULL, or for a
    /// floating-point or other type): the page's zone map.
    pub(crate) fn bounds(&self) -> Option<(Value, Value)> {
        use arrow_arith::aggregate::{
            max, max_binary, max_boolean, max_string, min, min_binary, min_boolean, min_string,
        };
        Some(match self {
            Sealed::I64(a) => (Value::BigInt(min(a)?), Value::BigInt(max(a)?)),
            Sealed::I32(a) => (Value::Int(min(a)?), Value::Int(max(a)?)),
            Sealed::I16(a) => (Value::SmallInt(min(a)?), Value::SmallInt(max(a)?)),
            Sealed::I8(a) => (Value::TinyInt(min(a)?), Value::TinyInt(max(a)?)),
            Sealed::Date(a) => (Value::Date(min(a)?), Value::Date(max(a)?)),
            Sealed::Ts(a) => {
                let (lo, hi) = (min(a)?, max(a)?);
                match a.timezone() {
                    None => (Value::Timestamp(lo), Value::Timestamp(hi)),
                    Some(_) => (Value::TimestampTz(lo), Value::TimestampTz(hi)),
                }
            }
            // Floats have none: filters order them totally (-0.0 below 0.0, NaN above all),
            // which the kernels' minimum need not follow.
            Sealed::F64(_) | Sealed::F32(_) => return None,
            Sealed::Bool(a) => (Value::Boolean(min_boolean(a)?), Value::Boolean(max_boolean(a)?)),
            Sealed::Text(a) => (Value::Text(min_string(a)?.to_owned()), Value::Text(max_string(a)?.to_owned())),
            Sealed::Bytes(a) => (Value::Bytea(min_binary(a)?.to_vec()), Value::Bytea(max_binary(a)?.to_vec())),
            Sealed::Other(_) => return None,
        })
    }

    /// Value `o`.
    #[inline]
    pub(crate) fn value(&self, o: usize) -> Value {
        if self.dyn_array().is_null(o) {
            return Value::Null;
        }
        match self {
            Sealed::I64(a) => Value::BigInt(a.value(o)),
            Sealed::I32(a) => Value::Int(a.value(o)),
            Sealed::I16(a) => Value::SmallInt(a.value(o)),
            Sealed::I8(a) => Value::TinyInt(a.value(o)),
            Sealed::F64(a) => Value::Double(a.value(o)),
            Sealed::F32(a) => Value::Real(a.value(o)),
            Sealed::Date(a) => Value::Date(a.value(o)),
            Sealed::Ts(a) if a.timezone().is_none() => Value::Timestamp(a.value(o)),
            Sealed::Ts(a) => Value::TimestampTz(a.value(o)),
            Sealed::Bool(a) => Value::Boolean(a.value(o)),
            Sealed::Text(a) => Value::Text(a.value(o).to_owned()),
            Sealed::Bytes(a) => Value::Bytea(a.value(o).to_vec()),
            Sealed::Other(a) => value_at(a.as_ref(), o),
        }
    }
}

/// Values `0..n` of type `ty`: `base`'s first `m` values, then `fill(o)` for `o` in `m..n`,
/// with `over` (offset, value; later ones win) laid over them.
pub(crate) fn overlay(
    ty: ColumnType,
    base: Option<&Sealed>,
    m: usize,
    n: usize,
    fill: &dyn Fn(usize) -> Value,
    over: &[(usize, Value)],
) -> ArrayRef {
    macro_rules! primitive {
        ($t:ty, $variant:ident, $value:ident) => {{
            let b = match base {
                Some(Sealed::$variant(a)) => Some(a),
                _ => None,
            };
            let m = if b.is_some() { m } else { 0 };
            prim::<$t>(
                b,
                m,
                n,
                |o| match fill(o) {
                    Value::$value(v) => Some(v),
                    _ => None,
                },
                over.iter().map(|(o, v)| {
                    (
                        *o,
                        match v {
                            Value::$value(v) => Some(*v),
                            _ => None,
                        },
                    )
                }),
            )
        }};
    }
    match ty {
        ColumnType::BigInt => primitive!(Int64Type, I64, BigInt),
        ColumnType::Int => primitive!(Int32Type, I32, Int),
        ColumnType::SmallInt => primitive!(Int16Type, I16, SmallInt),
        ColumnType::TinyInt => primitive!(Int8Type, I8, TinyInt),
        ColumnType::Double => primitive!(Float64Type, F64, Double),
        ColumnType::Real => primitive!(Float32Type, F32, Real),
        ColumnType::Date => primitive!(Date32Type, Date, Date),
        ColumnType::Timestamp => primitive!(TimestampMicrosecondType, Ts, Timestamp),
        ColumnType::TimestampTz => {
            let a = primitive!(TimestampMicrosecondType, Ts, TimestampTz);
            let a = arrow_array::cast::AsArray::as_primitive::<TimestampMicrosecondType>(&a).clone();
            Arc::new(a.with_timezone(crate::scan::arrow::UTC))
        }
        ColumnType::Boolean | ColumnType::Text | ColumnType::Bytea => {
            let mut latest: Vec<Option<&Value>> = vec![None; n];
            for (o, v) in over {
                if let Some(slot) = latest.get_mut(*o) {
                    *slot = Some(v);
                }
            }
            let mut b = ValuesBuilder::new(ty);
            for (o, newer) in latest.iter().enumerate() {
                match newer {
                    Some(v) => b.push(v),
                    None if o < m => b.push(&base.map_or(Value::Null, |s| s.value(o))),
                    None => b.push(&fill(o)),
                }
            }
            b.finish()
        }
    }
}

fn prim<T: ArrowPrimitiveType>(
    base: Option<&PrimitiveArray<T>>,
    m: usize,
    n: usize,
    fill: impl Fn(usize) -> Option<T::Native>,
    over: impl Iterator<Item = (usize, Option<T::Native>)>,
) -> ArrayRef {
    let mut vals: Vec<T::Native> = Vec::with_capacity(n);
    let mut valid = BooleanBufferBuilder::new(n);
    if let Some(b) = base {
        vals.extend_from_slice(&b.values()[..m]);
        match b.nulls() {
            Some(nb) => valid.append_buffer(&nb.inner().slice(0, m)),
            None => valid.append_n(m, true),
        }
    }
    for o in vals.len()..n {
        let v = fill(o);
        vals.push(v.unwrap_or_default());
        valid.append(v.is_some());
    }
    for (o, v) in over {
        if o < n {
            vals[o] = v.unwrap_or_default();
            valid.set_bit(o, v.is_some());
        }
    }
    let valid = valid.finish();
    let nulls = (valid.count_set_bits() < n).then(|| NullBuffer::new(valid));
    Arc::new(PrimitiveArray::<T>::new(vals.into(), nulls))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_extends_and_overrides_every_type_like_a_plain_rebuild() {
        let cases: Vec<(ColumnType, Vec<Value>)> = vec![
            (ColumnType::BigInt, vec![Value::BigInt(1), Value::Null, Value::BigInt(-3)]),
            (ColumnType::Int, vec![Value::Int(1), Value::Int(2), Value::Null]),
            (ColumnType::SmallInt, vec![Value::SmallInt(1), Value::Null, Value::SmallInt(3)]),
            (ColumnType::TinyInt, vec![Value::TinyInt(1), Value::TinyInt(2), Value::TinyInt(3)]),
            (ColumnType::Double, vec![Value::Double(0.5), Value::Null, Value::Double(-0.0)]),
            (ColumnType::Real, vec![Value::Real(1.5), Value::Real(2.5), Value::Null]),
            (ColumnType::Boolean, vec![Value::Boolean(true), Value::Null, Value::Boolean(false)]),
            (ColumnType::Text, vec![Value::Text("a".into()), Value::Null, Value::Text("ccc".into())]),
            (ColumnType::Bytea, vec![Value::Bytea(vec![1]), Value::Bytea(vec![]), Value::Null]),
            (ColumnType::Timestamp, vec![Value::Timestamp(-1), Value::Null, Value::Timestamp(1 << 50)]),
            (ColumnType::TimestampTz, vec![Value::TimestampTz(7), Value::TimestampTz(0), Value::Null]),
        ];
        for (ty, vals) in cases {
            let mut b = ValuesBuilder::new(ty);
            vals.iter().for_each(|v| b.push(v));
            let base = Sealed::new(b.finish());
            // Two base values kept, the third replaced by the open part, then two more filled;
            // offsets 0 and 3 overridden (0 twice: the later one wins).
            let fill = |o: usize| vals[o % vals.len()].clone();
            let over = vec![(0, vals[2].clone()), (3, Value::Null), (0, vals[1].clone())];
            let got = overlay(ty, Some(&base), 2, 5, &fill, &over);
            let want = vec![vals[1].clone(), vals[1].clone(), vals[2].clone(), Value::Null, vals[1].clone()];
            let got: Vec<Value> = (0..got.len()).map(|i| value_at(got.as_ref(), i)).collect();
            assert_eq!(got, want, "{ty:?}");
            let s = Sealed::new(base.array());
            assert_eq!((0..3).map(|o| s.value(o)).collect::<Vec<_>>(), vals, "{ty:?}");
        }
    }
}
