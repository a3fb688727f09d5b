//! Between strata's storage and Arrow: the Arrow type of each column type, arrays built straight
//! from a block's column bytes (fixed-width values are little-endian in both, so a column is one
//! copy), and arrays built from decoded values for rows that came through the merge.

use std::ops::Range;
use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Date32Builder, Float32Builder, Float64Builder, Int16Builder, Int32Builder,
    Int64Builder, Int8Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::types::{
    ArrowPrimitiveType, Date32Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    TimestampMicrosecondType, UInt32Type,
};
use arrow_array::{ArrayRef, BinaryArray, BooleanArray, PrimitiveArray, StringArray, UInt32Array};
use arrow_buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef, TimeUnit};

use crate::error::{Error, Result};
use crate::sst::block::ColumnParts;
use crate::types::{ColumnType, Schema, Value};

#[cfg(target_endian = "big")]
compile_error!(
    "strata's block format and Arrow share little-endian value layouts; big-endian targets are not supported"
);

/// The Arrow type a column of `ty` is returned as.
pub fn arrow_type(ty: ColumnType) -> DataType {
    match ty {
        ColumnType::BigInt => DataType::Int64,
        ColumnType::Int => DataType::Int32,
        ColumnType::SmallInt => DataType::Int16,
        ColumnType::TinyInt => DataType::Int8,
        ColumnType::Double => DataType::Float64,
        ColumnType::Real => DataType::Float32,
        ColumnType::Boolean => DataType::Boolean,
        ColumnType::Text => DataType::Utf8,
        ColumnType::Bytea => DataType::Binary,
        ColumnType::Date => DataType::Date32,
        ColumnType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
        ColumnType::TimestampTz => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
    }
}

/// The time zone of TIMESTAMPTZ columns' Arrow type (the one DataFusion gives `now()`).
pub const UTC: &str = "+00:00";

/// The Arrow schema of rows made of schema columns `cols` (by schema index), as scans return
/// them.
pub fn row_schema(schema: &Schema, cols: &[usize]) -> SchemaRef {
    let fields: Vec<Field> = cols
        .iter()
        .map(|&c| {
            let col = &schema.columns()[c];
            Field::new(col.name.clone(), arrow_type(col.ty), col.nullable)
        })
        .collect();
    Arc::new(ArrowSchema::new(fields))
}

fn bad(reason: impl std::fmt::Display) -> Error {
    Error::corruption("<scan>", 0, reason.to_string())
}

/// Copies `bytes` into a buffer aligned for any Arrow native type.
fn aligned(bytes: &[u8]) -> Buffer {
    let mut b = MutableBuffer::with_capacity(bytes.len());
    b.extend_from_slice(bytes);
    b.into()
}

/// Validity (Arrow: bit set = valid) of `rows` from a null bitmap (bit set = NULL), keeping only
/// the `sel`ected rows when given.
pub(crate) fn validity(nulls: Option<&[u8]>, rows: &Range<usize>, sel: Option<&BooleanBuffer>) -> Option<NullBuffer> {
    let nulls = nulls?;
    let is_null = |i: usize| nulls.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0);
    let valid = match sel {
        None => BooleanBuffer::collect_bool(rows.len(), |i| !is_null(rows.start + i)),
        Some(s) => s.set_indices().map(|i| !is_null(rows.start + i)).collect(),
    };
    Some(NullBuffer::new(valid)).filter(|n| n.null_count() > 0)
}

/// Fixed-width values of `rows` (or the `sel`ected ones) as a primitive array.
fn primitive<T: ArrowPrimitiveType>(
    p: &ColumnParts<'_>,
    rows: &Range<usize>,
    sel: Option<&BooleanBuffer>,
) -> Result<PrimitiveArray<T>> {
    let w = std::mem::size_of::<T::Native>();
    let all = p.fixed.get(rows.start * w..rows.end * w).ok_or_else(|| bad("column shorter than its rows"))?;
    let (values, len) = match sel {
        None => (aligned(all), rows.len()),
        Some(s) => {
            let mut b = MutableBuffer::with_capacity(s.count_set_bits() * w);
            for i in s.set_indices() {
                b.extend_from_slice(&all[i * w..(i + 1) * w]);
            }
            let len = b.len() / w;
            (b.into(), len)
        }
    };
    Ok(PrimitiveArray::new(ScalarBuffer::new(values, 0, len), validity(p.nulls, rows, sel)))
}

/// The 4-byte prefixes of a TEXT/BYTEA column's `rows`.
pub(crate) fn prefixes(p: &ColumnParts<'_>, rows: &Range<usize>) -> Result<UInt32Array> {
    let all = p.prefixes.get(rows.start * 4..rows.end * 4).ok_or_else(|| bad("prefixes shorter than rows"))?;
    Ok(PrimitiveArray::<UInt32Type>::new(ScalarBuffer::new(aligned(all), 0, rows.len()), None))
}

/// Heap range of var-width value `i` of a block column.
#[inline]
pub(crate) fn var_range(p: &ColumnParts<'_>, i: usize) -> Option<Range<usize>> {
    let o = |j: usize| -> Option<usize> {
        let b = p.offsets.get(4 * j..4 * j + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    Some(o(i)?..o(i + 1)?)
}

fn var_width(p: &ColumnParts<'_>, rows: &Range<usize>, sel: Option<&BooleanBuffer>) -> Result<ArrayRef> {
    let nulls = validity(p.nulls, rows, sel);
    let value = |i: usize| -> Result<&[u8]> {
        var_range(p, rows.start + i).and_then(|r| p.heap.get(r)).ok_or_else(|| bad("var-width offsets out of range"))
    };
    let text = p.ty == ColumnType::Text;
    // Offsets and bytes of the chosen rows, then one validating constructor.
    let mut offsets: Vec<i32> = Vec::with_capacity(rows.len() + 1);
    let mut bytes = MutableBuffer::new(0);
    offsets.push(0);
    let mut push = |b: &[u8]| -> Result<()> {
        bytes.extend_from_slice(b);
        offsets.push(i32::try_from(bytes.len()).map_err(|_| bad("var-width column larger than 2 GiB"))?);
        Ok(())
    };
    match sel {
        None => {
            for i in 0..rows.len() {
                push(value(i)?)?;
            }
        }
        Some(s) => {
            for i in s.set_indices() {
                push(value(i)?)?;
            }
        }
    }
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    Ok(if text {
        Arc::new(StringArray::try_new(offsets, bytes.into(), nulls).map_err(bad)?)
    } else {
        Arc::new(BinaryArray::try_new(offsets, bytes.into(), nulls).map_err(bad)?)
    })
}

/// Column `p` of a block, rows `rows` (or the `sel`ected ones among them, `sel` indexed from
/// `rows.start`), as an Arrow array.
pub(crate) fn block_array(p: &ColumnParts<'_>, rows: &Range<usize>, sel: Option<&BooleanBuffer>) -> Result<ArrayRef> {
    Ok(match p.ty {
        ColumnType::BigInt => Arc::new(primitive::<Int64Type>(p, rows, sel)?),
        ColumnType::Int => Arc::new(primitive::<Int32Type>(p, rows, sel)?),
        ColumnType::SmallInt => Arc::new(primitive::<Int16Type>(p, rows, sel)?),
        ColumnType::TinyInt => Arc::new(primitive::<Int8Type>(p, rows, sel)?),
        ColumnType::Double => Arc::new(primitive::<Float64Type>(p, rows, sel)?),
        ColumnType::Real => Arc::new(primitive::<Float32Type>(p, rows, sel)?),
        ColumnType::Date => Arc::new(primitive::<Date32Type>(p, rows, sel)?),
        ColumnType::Timestamp => Arc::new(primitive::<TimestampMicrosecondType>(p, rows, sel)?),
        ColumnType::TimestampTz => Arc::new(primitive::<TimestampMicrosecondType>(p, rows, sel)?.with_timezone(UTC)),
        ColumnType::Boolean => {
            let all = p.fixed.get(rows.clone()).ok_or_else(|| bad("column shorter than its rows"))?;
            let values = match sel {
                None => BooleanBuffer::collect_bool(all.len(), |i| all[i] != 0),
                Some(s) => s.set_indices().map(|i| all[i] != 0).collect(),
            };
            Arc::new(BooleanArray::new(values, validity(p.nulls, rows, sel)))
        }
        ColumnType::Text | ColumnType::Bytea => var_width(p, rows, sel)?,
    })
}

/// Builds one column from values (rows that came through the merge, or decoded keys).
pub(crate) enum ValuesBuilder {
    BigInt(Int64Builder),
    Int(Int32Builder),
    SmallInt(Int16Builder),
    TinyInt(Int8Builder),
    Double(Float64Builder),
    Real(Float32Builder),
    Boolean(BooleanBuilder),
    Text(StringBuilder),
    Bytea(BinaryBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder),
    TimestampTz(TimestampMicrosecondBuilder),
}

impl ValuesBuilder {
    pub(crate) fn new(ty: ColumnType) -> Self {
        match ty {
            ColumnType::BigInt => ValuesBuilder::BigInt(Int64Builder::new()),
            ColumnType::Int => ValuesBuilder::Int(Int32Builder::new()),
            ColumnType::SmallInt => ValuesBuilder::SmallInt(Int16Builder::new()),
            ColumnType::TinyInt => ValuesBuilder::TinyInt(Int8Builder::new()),
            ColumnType::Double => ValuesBuilder::Double(Float64Builder::new()),
            ColumnType::Real => ValuesBuilder::Real(Float32Builder::new()),
            ColumnType::Boolean => ValuesBuilder::Boolean(BooleanBuilder::new()),
            ColumnType::Text => ValuesBuilder::Text(StringBuilder::new()),
            ColumnType::Bytea => ValuesBuilder::Bytea(BinaryBuilder::new()),
            ColumnType::Date => ValuesBuilder::Date(Date32Builder::new()),
            ColumnType::Timestamp => ValuesBuilder::Timestamp(TimestampMicrosecondBuilder::new()),
            ColumnType::TimestampTz => {
                ValuesBuilder::TimestampTz(TimestampMicrosecondBuilder::new().with_timezone(UTC))
            }
        }
    }

    /// Appends `v`; a value of another type than the column's is appended as NULL (the engine
    /// checks types on the way in, so only a decoding bug could produce one).
    pub(crate) fn push(&mut self, v: &Value) {
        match (self, v) {
            (ValuesBuilder::BigInt(b), Value::BigInt(x)) => b.append_value(*x),
            (ValuesBuilder::Int(b), Value::Int(x)) => b.append_value(*x),
            (ValuesBuilder::SmallInt(b), Value::SmallInt(x)) => b.append_value(*x),
            (ValuesBuilder::TinyInt(b), Value::TinyInt(x)) => b.append_value(*x),
            (ValuesBuilder::Double(b), Value::Double(x)) => b.append_value(*x),
            (ValuesBuilder::Real(b), Value::Real(x)) => b.append_value(*x),
            (ValuesBuilder::Boolean(b), Value::Boolean(x)) => b.append_value(*x),
            (ValuesBuilder::Text(b), Value::Text(x)) => b.append_value(x),
            (ValuesBuilder::Bytea(b), Value::Bytea(x)) => b.append_value(x),
            (ValuesBuilder::Date(b), Value::Date(x)) => b.append_value(*x),
            (ValuesBuilder::Timestamp(b), Value::Timestamp(x)) => b.append_value(*x),
            (ValuesBuilder::TimestampTz(b), Value::TimestampTz(x)) => b.append_value(*x),
            (ValuesBuilder::BigInt(b), _) => b.append_null(),
            (ValuesBuilder::Int(b), _) => b.append_null(),
            (ValuesBuilder::SmallInt(b), _) => b.append_null(),
            (ValuesBuilder::TinyInt(b), _) => b.append_null(),
            (ValuesBuilder::Double(b), _) => b.append_null(),
            (ValuesBuilder::Real(b), _) => b.append_null(),
            (ValuesBuilder::Boolean(b), _) => b.append_null(),
            (ValuesBuilder::Text(b), _) => b.append_null(),
            (ValuesBuilder::Bytea(b), _) => b.append_null(),
            (ValuesBuilder::Date(b), _) => b.append_null(),
            (ValuesBuilder::Timestamp(b) | ValuesBuilder::TimestampTz(b), _) => b.append_null(),
        }
    }

    /// The array of everything pushed so far; the builder starts over empty.
    pub(crate) fn finish(&mut self) -> ArrayRef {
        match self {
            ValuesBuilder::BigInt(b) => Arc::new(b.finish()),
            ValuesBuilder::Int(b) => Arc::new(b.finish()),
            ValuesBuilder::SmallInt(b) => Arc::new(b.finish()),
            ValuesBuilder::TinyInt(b) => Arc::new(b.finish()),
            ValuesBuilder::Double(b) => Arc::new(b.finish()),
            ValuesBuilder::Real(b) => Arc::new(b.finish()),
            ValuesBuilder::Boolean(b) => Arc::new(b.finish()),
            ValuesBuilder::Text(b) => Arc::new(b.finish()),
            ValuesBuilder::Bytea(b) => Arc::new(b.finish()),
            ValuesBuilder::Date(b) => Arc::new(b.finish()),
            ValuesBuilder::Timestamp(b) | ValuesBuilder::TimestampTz(b) => Arc::new(b.finish()),
        }
    }
}

/// The rows of a batch as values (column types as [`arrow_type`] maps them; other Arrow types
/// read as NULL). Convenient for printing and tests; not for bulk processing.
pub fn batch_rows(batch: &arrow_array::RecordBatch) -> Vec<Vec<Value>> {
    (0..batch.num_rows()).map(|i| batch.columns().iter().map(|a| value_at(a.as_ref(), i)).collect()).collect()
}

/// One value of an array as a [`Value`] (`Value::Null` where NULL).
pub fn value_at(a: &dyn arrow_array::Array, i: usize) -> Value {
    use arrow_array::cast::AsArray;
    if a.is_null(i) {
        return Value::Null;
    }
    match a.data_type() {
        DataType::Int64 => Value::BigInt(a.as_primitive::<Int64Type>().value(i)),
        DataType::Int32 => Value::Int(a.as_primitive::<Int32Type>().value(i)),
        DataType::Int16 => Value::SmallInt(a.as_primitive::<Int16Type>().value(i)),
        DataType::Int8 => Value::TinyInt(a.as_primitive::<Int8Type>().value(i)),
        DataType::Float64 => Value::Double(a.as_primitive::<Float64Type>().value(i)),
        DataType::Float32 => Value::Real(a.as_primitive::<Float32Type>().value(i)),
        DataType::Boolean => Value::Boolean(a.as_boolean().value(i)),
        DataType::Utf8 => Value::Text(a.as_string::<i32>().value(i).to_string()),
        DataType::Binary => Value::Bytea(a.as_binary::<i32>().value(i).to_vec()),
        DataType::Date32 => Value::Date(a.as_primitive::<Date32Type>().value(i)),
        DataType::Timestamp(TimeUnit::Microsecond, None) => {
            Value::Timestamp(a.as_primitive::<TimestampMicrosecondType>().value(i))
        }
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => {
            Value::TimestampTz(a.as_primitive::<TimestampMicrosecondType>().value(i))
        }
        _ => Value::Null,
    }
}

/// A record batch of `rows`, each holding the values of schema columns `cols` (by schema index),
/// as a scan returning those columns would; a value of another type than its column's is an
/// error.
pub fn rows_batch(schema: &Schema, cols: &[usize], rows: &[Vec<Value>]) -> Result<arrow_array::RecordBatch> {
    let arrow_schema = row_schema(schema, cols);
    let mut builders: Vec<ValuesBuilder> = cols.iter().map(|&c| ValuesBuilder::new(schema.columns()[c].ty)).collect();
    for row in rows {
        if row.len() != cols.len() {
            return Err(Error::InvalidArgument(format!("a row of {} values for {} columns", row.len(), cols.len())));
        }
        for ((b, v), &c) in builders.iter_mut().zip(row).zip(cols) {
            let col = &schema.columns()[c];
            if !v.is_null() && !v.has_type(col.ty) {
                return Err(Error::InvalidArgument(format!(
                    "column {} is {}, not {}",
                    col.name,
                    col.ty.name(),
                    v.type_name()
                )));
            }
            b.push(v);
        }
    }
    let arrays = builders.iter_mut().map(ValuesBuilder::finish).collect();
    let opts = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows.len()));
    arrow_array::RecordBatch::try_new_with_options(arrow_schema, arrays, &opts).map_err(arrow_err)
}

/// An array of `n` copies of `v` (a literal for the comparison kernels, or an aggregate result).
pub(crate) fn repeat(ty: ColumnType, v: &Value, n: usize) -> ArrayRef {
    let mut b = ValuesBuilder::new(ty);
    for _ in 0..n {
        b.push(v);
    }
    b.finish()
}

/// A scan error from an arrow error.
pub(super) fn arrow_err(e: arrow_schema::ArrowError) -> Error {
    Error::InvalidArgument(format!("scan: {e}"))
}
