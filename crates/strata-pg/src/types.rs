//! The PostgreSQL type of every value the server sends or receives, each derived from one Arrow
//! type, and the encoding of values in that type.
//!
//! A client learns a result column's type from RowDescription before any row arrives (in the
//! extended protocol, at Describe, before the statement runs) and decodes every value by it:
//! the bytes must be that type's, or a binary client reads a wrong value without an error. So
//! here one function, [`WireType::of`], maps an Arrow type to the PostgreSQL type announced for
//! it; the values are cast to that wire type's own Arrow type ([`WireType::arrow_type`]) and
//! encoded by [`Cell`], which refuses to write a value as any type but its own. An Arrow type
//! with no faithful PostgreSQL counterpart (lists, structs, maps, ...) is refused with an error
//! naming it, never sent as something else.
//!
//! Parameters go the other way ([`parameters`]): a value is decoded as the type the client sent
//! it in, then converted to the type the statement expects, and a conversion that would change
//! the value (a fraction into an integer, a number out of range) is refused.
//!
//! Text output follows PostgreSQL's: `t`/`f`, `NaN`/`Infinity`/`-Infinity`, `\x`-hex BYTEA,
//! ISO dates and times (the session time zone is UTC), NUMERIC with its scale. Floats are
//! written in the shortest form that reads back to the same value.

use std::error::Error;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, Timelike};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::results::{DataRowEncoder, FieldInfo};
use pgwire::api::Type;
use pgwire::messages::data::DataRow;
use pgwire::types::format::FormatOptions;
use pgwire::types::ToSqlText;
use postgres_types::{to_sql_checked, IsNull, ToSql};
use rust_decimal::Decimal;
use strata_sql::datafusion::arrow::array::{Array, ArrayRef, AsArray};
use strata_sql::datafusion::arrow::compute::{cast_with_options, CastOptions};
use strata_sql::datafusion::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Field, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type,
    IntervalMonthDayNanoType, IntervalUnit, Schema, Time64MicrosecondType, TimeUnit, TimestampMicrosecondType,
};
use strata_sql::datafusion::arrow::record_batch::RecordBatch;
use strata_sql::datafusion::common::{ParamValues, ScalarValue};
use strata_sql::{ErrorKind, SqlError};

/// Days from 1970-01-01 (Arrow's epoch) to 2000-01-01 (PostgreSQL's).
const EPOCH_DAYS: i32 = 10_957;
/// Microseconds from 1970-01-01 to 2000-01-01.
const EPOCH_MICROS: i64 = 946_684_800_000_000;
/// The time zone TIMESTAMPTZ values are sent in (the session's, which strata keeps at UTC).
const UTC: &str = "+00:00";

/// The PostgreSQL type a column or parameter travels as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireType {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    /// NUMERIC of an Arrow Decimal128 with this precision and scale.
    Numeric(u8, i8),
    Text,
    Bytea,
    Date,
    Time,
    Timestamp,
    TimestampTz,
    Interval,
    /// A one-dimensional array (an Arrow list) of one of these (the catalogs' `int2vector`,
    /// `oid[]` and `text[]` columns, `array_agg`'s results).
    Array(Element),
    /// `int2vector` (of Int2) or `oidvector` (of Int8): an array PostgreSQL writes as `1 2` in
    /// text, for columns whose field metadata names the type ([`strata_sql::PG_TYPE_METADATA`]).
    Vector(Element),
}

/// The element types arrays are sent with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Element {
    Bool,
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Text,
}

impl Element {
    /// The element type of arrays of `w`, if arrays of it are sent.
    fn of(w: WireType) -> Option<Element> {
        Some(match w {
            WireType::Bool => Element::Bool,
            WireType::Int2 => Element::Int2,
            WireType::Int4 => Element::Int4,
            WireType::Int8 => Element::Int8,
            WireType::Float4 => Element::Float4,
            WireType::Float8 => Element::Float8,
            WireType::Text => Element::Text,
            _ => return None,
        })
    }

    fn wire(self) -> WireType {
        match self {
            Element::Bool => WireType::Bool,
            Element::Int2 => WireType::Int2,
            Element::Int4 => WireType::Int4,
            Element::Int8 => WireType::Int8,
            Element::Float4 => WireType::Float4,
            Element::Float8 => WireType::Float8,
            Element::Text => WireType::Text,
        }
    }
}

impl WireType {
    /// The wire type of field `f`: its metadata's type if it names one, else its Arrow type's.
    pub(crate) fn of_field(f: &Field) -> Result<WireType, SqlError> {
        let t = WireType::of(f.name(), f.data_type())?;
        Ok(match (f.metadata().get(strata_sql::PG_TYPE_METADATA).map(String::as_str), t) {
            (Some("int2vector"), WireType::Array(Element::Int2)) => WireType::Vector(Element::Int2),
            (Some("oidvector"), WireType::Array(Element::Int8)) => WireType::Vector(Element::Int8),
            _ => t,
        })
    }

    /// The wire type of values of Arrow type `t`, in a column named `name` (for the error);
    /// refused when PostgreSQL has no type that holds them faithfully.
    pub(crate) fn of(name: &str, t: &DataType) -> Result<WireType, SqlError> {
        Ok(match t {
            DataType::Boolean => WireType::Bool,
            DataType::Int8 | DataType::Int16 | DataType::UInt8 => WireType::Int2,
            DataType::Int32 | DataType::UInt16 => WireType::Int4,
            DataType::Int64 | DataType::UInt32 => WireType::Int8,
            DataType::UInt64 => WireType::Numeric(20, 0),
            DataType::Float16 | DataType::Float32 => WireType::Float4,
            DataType::Float64 => WireType::Float8,
            DataType::Decimal32(p, s) | DataType::Decimal64(p, s) | DataType::Decimal128(p, s) => {
                WireType::Numeric(*p, *s)
            }
            DataType::Decimal256(p, s) if *p <= 38 => WireType::Numeric(*p, *s),
            // An untyped NULL is `text`, as PostgreSQL resolves an unknown-typed literal.
            DataType::Null | DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => WireType::Text,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => {
                WireType::Bytea
            }
            DataType::Date32 | DataType::Date64 => WireType::Date,
            DataType::Time32(_) | DataType::Time64(_) => WireType::Time,
            DataType::Timestamp(_, None) => WireType::Timestamp,
            DataType::Timestamp(_, Some(_)) => WireType::TimestampTz,
            DataType::Interval(_) | DataType::Duration(_) => WireType::Interval,
            DataType::Dictionary(_, values) => WireType::of(name, values)?,
            DataType::List(item) | DataType::LargeList(item) => {
                let Some(element) = Element::of(WireType::of(name, item.data_type())?) else {
                    return Err(SqlError::new(
                        ErrorKind::FeatureNotSupported,
                        format!(
                            "column \"{name}\" is a list of {}, which strata's PostgreSQL server cannot send; \
                             cast it to text",
                            item.data_type()
                        ),
                    ));
                };
                WireType::Array(element)
            }
            other => {
                return Err(SqlError::new(
                    ErrorKind::FeatureNotSupported,
                    format!(
                        "column \"{name}\" is of type {other}, which strata's PostgreSQL server cannot send; \
                         cast it to a scalar type (text, for instance)"
                    ),
                ))
            }
        })
    }

    /// The PostgreSQL type announced for it.
    pub(crate) fn pg_type(self) -> Type {
        match self {
            WireType::Bool => Type::BOOL,
            WireType::Int2 => Type::INT2,
            WireType::Int4 => Type::INT4,
            WireType::Int8 => Type::INT8,
            WireType::Float4 => Type::FLOAT4,
            WireType::Float8 => Type::FLOAT8,
            WireType::Numeric(..) => Type::NUMERIC,
            WireType::Text => Type::TEXT,
            WireType::Bytea => Type::BYTEA,
            WireType::Date => Type::DATE,
            WireType::Time => Type::TIME,
            WireType::Timestamp => Type::TIMESTAMP,
            WireType::TimestampTz => Type::TIMESTAMPTZ,
            WireType::Interval => Type::INTERVAL,
            WireType::Array(Element::Bool) => Type::BOOL_ARRAY,
            WireType::Array(Element::Int2) => Type::INT2_ARRAY,
            WireType::Array(Element::Int4) => Type::INT4_ARRAY,
            WireType::Array(Element::Int8) => Type::INT8_ARRAY,
            WireType::Array(Element::Float4) => Type::FLOAT4_ARRAY,
            WireType::Array(Element::Float8) => Type::FLOAT8_ARRAY,
            WireType::Array(Element::Text) => Type::TEXT_ARRAY,
            WireType::Vector(Element::Int2) => Type::INT2_VECTOR,
            WireType::Vector(_) => Type::OID_VECTOR,
        }
    }

    /// The Arrow type whose values it encodes: a column is cast to it first.
    fn arrow_type(self) -> DataType {
        match self {
            WireType::Bool => DataType::Boolean,
            WireType::Int2 => DataType::Int16,
            WireType::Int4 => DataType::Int32,
            WireType::Int8 => DataType::Int64,
            WireType::Float4 => DataType::Float32,
            WireType::Float8 => DataType::Float64,
            WireType::Numeric(p, s) => DataType::Decimal128(p, s),
            WireType::Text => DataType::Utf8,
            WireType::Bytea => DataType::Binary,
            WireType::Date => DataType::Date32,
            WireType::Time => DataType::Time64(TimeUnit::Microsecond),
            WireType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            WireType::TimestampTz => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
            WireType::Interval => DataType::Interval(IntervalUnit::MonthDayNano),
            WireType::Array(e) | WireType::Vector(e) => {
                DataType::List(Arc::new(Field::new("item", e.wire().arrow_type(), true)))
            }
        }
    }
}

fn data_error(message: String) -> SqlError {
    SqlError::new(ErrorKind::DataException, message)
}

/// How a query's rows go on the wire: each column's wire type and the fields announced.
pub(crate) struct RowFormat {
    types: Vec<WireType>,
    fields: Arc<Vec<FieldInfo>>,
}

impl RowFormat {
    /// The row format of `schema`'s columns, each in the format (text or binary) `format` asks.
    pub(crate) fn new(schema: &Schema, format: &Format) -> Result<RowFormat, SqlError> {
        let mut types = Vec::with_capacity(schema.fields().len());
        let mut fields = Vec::with_capacity(schema.fields().len());
        for (i, f) in schema.fields().iter().enumerate() {
            let t = WireType::of_field(f)?;
            types.push(t);
            fields.push(FieldInfo::new(f.name().clone(), None, None, t.pg_type(), format.format_for(i)));
        }
        Ok(RowFormat { types, fields: Arc::new(fields) })
    }

    /// The fields of RowDescription.
    pub(crate) fn fields(&self) -> Arc<Vec<FieldInfo>> {
        self.fields.clone()
    }

    /// Checks that rows of `produced` can be sent as this format announced them: the statement
    /// was described with one type and produced another (PostgreSQL's "cached plan must not
    /// change result type").
    pub(crate) fn check(&self, produced: &Schema) -> Result<(), SqlError> {
        let mismatch = || {
            SqlError::new(
                ErrorKind::FeatureNotSupported,
                format!(
                    "cached plan must not change result type: described as ({}), produced ({})",
                    self.fields.iter().map(|f| f.datatype().name().to_string()).collect::<Vec<_>>().join(", "),
                    produced.fields().iter().map(|f| f.data_type().to_string()).collect::<Vec<_>>().join(", ")
                ),
            )
        };
        if produced.fields().len() != self.types.len() {
            return Err(mismatch());
        }
        for (f, described) in produced.fields().iter().zip(&self.types) {
            // Only the PostgreSQL type matters (NUMERIC's scale travels with each value).
            // A vector's metadata may be lost on the way; its values are an array's.
            let produced = match (WireType::of_field(f)?, described) {
                (WireType::Array(e), WireType::Vector(d)) if e == *d => *described,
                (p, _) => p,
            };
            if produced.pg_type() != described.pg_type() {
                return Err(mismatch());
            }
        }
        Ok(())
    }

    /// Encodes `batch`'s rows.
    pub(crate) fn encode(&self, batch: &RecordBatch) -> Result<Vec<DataRow>, SqlError> {
        if batch.num_columns() != self.types.len() {
            return Err(SqlError::new(
                ErrorKind::Internal,
                format!("a batch of {} columns for {} announced", batch.num_columns(), self.types.len()),
            ));
        }
        let options = CastOptions { safe: false, ..Default::default() };
        let mut columns = Vec::with_capacity(self.types.len());
        for ((t, field), column) in self.types.iter().zip(self.fields.iter()).zip(batch.columns()) {
            let target = match (t, column.data_type()) {
                // The described scale may differ from the produced one; each value carries its own.
                (WireType::Numeric(..), DataType::Decimal128(p, s)) => DataType::Decimal128(*p, *s),
                _ => t.arrow_type(),
            };
            let cast = cast_with_options(column, &target, &options)
                .map_err(|e| data_error(format!("column \"{}\": {e}", field.name())))?;
            columns.push(cast);
        }
        let format = FormatOptions::default();
        let mut encoder = DataRowEncoder::new(self.fields.clone());
        let mut rows = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            for ((field, column), t) in self.fields.iter().zip(&columns).zip(&self.types) {
                let cell = match (Cell::at(column, row)?, t) {
                    (Cell::Array(values, e, _), WireType::Vector(_)) => Cell::Array(values, e, true),
                    (cell, _) => cell,
                };
                encoder
                    .encode_field_with_type_and_format(&cell, field.datatype(), field.format(), &format)
                    .map_err(|e| data_error(format!("column \"{}\": {e}", field.name())))?;
            }
            rows.push(encoder.take_row());
        }
        Ok(rows)
    }
}

/// One value as it goes on the wire; it encodes itself only as its own PostgreSQL type.
#[derive(Debug)]
enum Cell<'a> {
    Null,
    Bool(bool),
    Int2(i16),
    Int4(i32),
    Int8(i64),
    Float4(f32),
    Float8(f64),
    Numeric(i128, i8),
    Text(&'a str),
    Bytea(&'a [u8]),
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since midnight.
    Time(i64),
    /// Microseconds since 1970-01-01 00:00 (UTC for TIMESTAMPTZ).
    Timestamp(i64),
    TimestampTz(i64),
    Interval {
        months: i32,
        days: i32,
        micros: i64,
    },
    /// An array's elements (of its element type's Arrow type); `true` for a vector.
    Array(ArrayRef, Element, bool),
}

impl<'a> Cell<'a> {
    /// Row `i` of `a`, an array of one wire type's Arrow type.
    fn at(a: &'a ArrayRef, i: usize) -> Result<Cell<'a>, SqlError> {
        if a.is_null(i) {
            return Ok(Cell::Null);
        }
        Ok(match a.data_type() {
            DataType::Boolean => Cell::Bool(a.as_boolean().value(i)),
            DataType::Int16 => Cell::Int2(a.as_primitive::<Int16Type>().value(i)),
            DataType::Int32 => Cell::Int4(a.as_primitive::<Int32Type>().value(i)),
            DataType::Int64 => Cell::Int8(a.as_primitive::<Int64Type>().value(i)),
            DataType::Float32 => Cell::Float4(a.as_primitive::<Float32Type>().value(i)),
            DataType::Float64 => Cell::Float8(a.as_primitive::<Float64Type>().value(i)),
            DataType::Decimal128(_, s) => Cell::Numeric(a.as_primitive::<Decimal128Type>().value(i), *s),
            DataType::Utf8 => Cell::Text(a.as_string::<i32>().value(i)),
            DataType::Binary => Cell::Bytea(a.as_binary::<i32>().value(i)),
            DataType::Date32 => Cell::Date(a.as_primitive::<Date32Type>().value(i)),
            DataType::Time64(TimeUnit::Microsecond) => Cell::Time(a.as_primitive::<Time64MicrosecondType>().value(i)),
            DataType::Timestamp(TimeUnit::Microsecond, None) => {
                Cell::Timestamp(a.as_primitive::<TimestampMicrosecondType>().value(i))
            }
            DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => {
                Cell::TimestampTz(a.as_primitive::<TimestampMicrosecondType>().value(i))
            }
            DataType::Interval(IntervalUnit::MonthDayNano) => {
                let v = a.as_primitive::<IntervalMonthDayNanoType>().value(i);
                Cell::Interval { months: v.months, days: v.days, micros: v.nanoseconds / 1000 }
            }
            DataType::List(item) => {
                let element = Element::of(WireType::of("", item.data_type())?)
                    .ok_or_else(|| SqlError::new(ErrorKind::Internal, format!("no wire encoding for {item}")))?;
                Cell::Array(a.as_list::<i32>().value(i), element, false)
            }
            // `RowFormat::encode` casts every column to a wire type's Arrow type first.
            other => return Err(SqlError::new(ErrorKind::Internal, format!("no wire encoding for {other}"))),
        })
    }

    /// The PostgreSQL type this value is (`None` for NULL, which is every type).
    fn pg_type(&self) -> Option<Type> {
        Some(match self {
            Cell::Null => return None,
            Cell::Bool(_) => Type::BOOL,
            Cell::Int2(_) => Type::INT2,
            Cell::Int4(_) => Type::INT4,
            Cell::Int8(_) => Type::INT8,
            Cell::Float4(_) => Type::FLOAT4,
            Cell::Float8(_) => Type::FLOAT8,
            Cell::Numeric(..) => Type::NUMERIC,
            Cell::Text(_) => Type::TEXT,
            Cell::Bytea(_) => Type::BYTEA,
            Cell::Date(_) => Type::DATE,
            Cell::Time(_) => Type::TIME,
            Cell::Timestamp(_) => Type::TIMESTAMP,
            Cell::TimestampTz(_) => Type::TIMESTAMPTZ,
            Cell::Interval { .. } => Type::INTERVAL,
            Cell::Array(_, e, false) => WireType::Array(*e).pg_type(),
            Cell::Array(_, e, true) => WireType::Vector(*e).pg_type(),
        })
    }

    fn check_type(&self, ty: &Type) -> Result<(), Box<dyn Error + Sync + Send>> {
        match self.pg_type() {
            Some(own) if own != *ty => Err(format!("a {own} value cannot be sent as {ty}").into()),
            _ => Ok(()),
        }
    }
}

type EncodeResult = Result<IsNull, Box<dyn Error + Sync + Send>>;

impl ToSql for Cell<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> EncodeResult {
        self.check_type(ty)?;
        match *self {
            Cell::Null => return Ok(IsNull::Yes),
            Cell::Bool(b) => out.put_u8(u8::from(b)),
            Cell::Int2(v) => out.put_i16(v),
            Cell::Int4(v) => out.put_i32(v),
            Cell::Int8(v) => out.put_i64(v),
            Cell::Float4(v) => out.put_f32(v),
            Cell::Float8(v) => out.put_f64(v),
            Cell::Numeric(v, scale) => numeric_binary(v, scale, out)?,
            Cell::Text(s) => out.put_slice(s.as_bytes()),
            Cell::Bytea(b) => out.put_slice(b),
            Cell::Date(days) => out.put_i32(days.checked_sub(EPOCH_DAYS).ok_or("date out of range")?),
            Cell::Time(micros) => out.put_i64(micros),
            Cell::Timestamp(micros) | Cell::TimestampTz(micros) => {
                out.put_i64(micros.checked_sub(EPOCH_MICROS).ok_or("timestamp out of range")?)
            }
            Cell::Interval { months, days, micros } => {
                out.put_i64(micros);
                out.put_i32(days);
                out.put_i32(months);
            }
            Cell::Array(ref values, e, vector) => {
                // PostgreSQL's array_send: dimensions, a has-NULL flag, the element type, each
                // dimension's length and lower bound, then each element as length and bytes.
                let elem_type = if vector && e == Element::Int8 { Type::OID } else { e.wire().pg_type() };
                let n = i32::try_from(values.len()).map_err(|_| "array too long")?;
                out.put_i32(i32::from(n > 0));
                out.put_i32(i32::from(values.null_count() > 0));
                out.put_u32(elem_type.oid());
                if n > 0 {
                    out.put_i32(n);
                    out.put_i32(1);
                }
                for j in 0..values.len() {
                    let cell = Cell::at(values, j).map_err(|e| e.message)?;
                    let mut buf = BytesMut::new();
                    let written = match cell {
                        // An oid is four bytes.
                        Cell::Int8(v) if elem_type == Type::OID => {
                            buf.put_u32(u32::try_from(v).map_err(|_| "oid out of range")?);
                            IsNull::No
                        }
                        cell => cell.to_sql(&e.wire().pg_type(), &mut buf)?,
                    };
                    match written {
                        IsNull::Yes => out.put_i32(-1),
                        IsNull::No => {
                            out.put_i32(i32::try_from(buf.len()).map_err(|_| "array element too long")?);
                            out.put_slice(&buf);
                        }
                    }
                }
            }
        }
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        // Which type a value may be sent as depends on the value: `to_sql` checks it.
        true
    }

    to_sql_checked!();
}

impl ToSqlText for Cell<'_> {
    fn to_sql_text(&self, ty: &Type, out: &mut BytesMut, _: &FormatOptions) -> EncodeResult {
        use std::fmt::Write;
        self.check_type(ty)?;
        match *self {
            Cell::Null => return Ok(IsNull::Yes),
            Cell::Bool(b) => out.put_u8(if b { b't' } else { b'f' }),
            Cell::Int2(v) => write!(out, "{v}")?,
            Cell::Int4(v) => write!(out, "{v}")?,
            Cell::Int8(v) => write!(out, "{v}")?,
            Cell::Float4(v) => float_text(f64::from(v), &v.to_string(), out),
            Cell::Float8(v) => float_text(v, &v.to_string(), out),
            Cell::Numeric(v, scale) => out.put_slice(numeric_text(v, scale).as_bytes()),
            Cell::Text(s) => out.put_slice(s.as_bytes()),
            Cell::Bytea(b) => {
                out.put_slice(b"\\x");
                for byte in b {
                    write!(out, "{byte:02x}")?;
                }
            }
            Cell::Date(days) => out.put_slice(date_text(days)?.as_bytes()),
            Cell::Time(micros) => out.put_slice(time_text(micros)?.as_bytes()),
            Cell::Timestamp(micros) => out.put_slice(timestamp_text(micros)?.as_bytes()),
            Cell::TimestampTz(micros) => {
                out.put_slice(timestamp_text(micros)?.as_bytes());
                out.put_slice(b"+00");
            }
            Cell::Interval { months, days, micros } => out.put_slice(interval_text(months, days, micros).as_bytes()),
            Cell::Array(ref values, e, true) => {
                // int2vector_out / oidvector_out: the elements, blank-separated.
                for j in 0..values.len() {
                    if j > 0 {
                        out.put_u8(b' ');
                    }
                    let cell = Cell::at(values, j).map_err(|e| e.message)?;
                    cell.to_sql_text(&e.wire().pg_type(), out, &FormatOptions::default())?;
                }
            }
            Cell::Array(ref values, e, false) => {
                // PostgreSQL's array_out: `{a,b,NULL}`, an element quoted when it is empty, holds
                // a delimiter, brace, quote, backslash or blank, or reads as NULL.
                let elem_type = e.wire().pg_type();
                out.put_u8(b'{');
                for j in 0..values.len() {
                    if j > 0 {
                        out.put_u8(b',');
                    }
                    let cell = Cell::at(values, j).map_err(|e| e.message)?;
                    let mut buf = BytesMut::new();
                    if let IsNull::Yes = cell.to_sql_text(&elem_type, &mut buf, &FormatOptions::default())? {
                        out.put_slice(b"NULL");
                        continue;
                    }
                    let text = String::from_utf8_lossy(&buf);
                    let quote = text.is_empty()
                        || text.eq_ignore_ascii_case("null")
                        || text.chars().any(|c| matches!(c, '{' | '}' | ',' | '"' | '\\') || c.is_whitespace());
                    if quote {
                        out.put_u8(b'"');
                        for c in text.chars() {
                            if c == '"' || c == '\\' {
                                out.put_u8(b'\\');
                            }
                            write!(out, "{c}")?;
                        }
                        out.put_u8(b'"');
                    } else {
                        out.put_slice(text.as_bytes());
                    }
                }
                out.put_u8(b'}');
            }
        }
        Ok(IsNull::No)
    }
}

/// A float as PostgreSQL writes it: `NaN`, `Infinity`, `-Infinity`, or `shortest`, Rust's
/// shortest text that reads back as the same value.
fn float_text(v: f64, shortest: &str, out: &mut BytesMut) {
    if v.is_nan() {
        out.put_slice(b"NaN");
    } else if v.is_infinite() {
        out.put_slice(if v > 0.0 { b"Infinity" as &[u8] } else { b"-Infinity" });
    } else {
        out.put_slice(shortest.as_bytes());
    }
}

/// The decimal digits of `v` scaled by `10^-scale`, with a negative scale applied: (sign,
/// digits, scale >= 0).
fn decimal_digits(v: i128, scale: i8) -> Result<(bool, String, usize), Box<dyn Error + Sync + Send>> {
    let negative = v < 0;
    let mut digits = v.unsigned_abs().to_string();
    if scale < 0 {
        digits.extend(std::iter::repeat_n('0', usize::from(scale.unsigned_abs())));
    }
    if digits.len() > 1000 {
        return Err("numeric value too long".into());
    }
    Ok((negative, digits, usize::try_from(scale.max(0)).unwrap_or(0)))
}

/// NUMERIC text: the value with exactly `scale` digits after the point.
fn numeric_text(v: i128, scale: i8) -> String {
    let Ok((negative, digits, scale)) = decimal_digits(v, scale) else { return String::from("NaN") };
    let padded =
        if digits.len() <= scale { format!("{}{digits}", "0".repeat(scale + 1 - digits.len())) } else { digits };
    let (int, frac) = padded.split_at(padded.len() - scale);
    let sign = if negative { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

/// NUMERIC binary: digit count, weight, sign, display scale, then base-10000 digits.
fn numeric_binary(v: i128, scale: i8, out: &mut BytesMut) -> Result<(), Box<dyn Error + Sync + Send>> {
    let (negative, digits, dscale) = decimal_digits(v, scale)?;
    let int_len = digits.len().saturating_sub(dscale);
    let (int, frac) = if digits.len() > dscale { digits.split_at(int_len) } else { ("", digits.as_str()) };
    let frac = format!("{}{frac}", "0".repeat(dscale - frac.len()));
    // Integer digits grouped by four from the point leftwards, fraction digits rightwards.
    let int = format!("{}{int}", "0".repeat((4 - int.len() % 4) % 4));
    let frac = format!("{frac}{}", "0".repeat((4 - frac.len() % 4) % 4));
    let group = |s: &str| -> Vec<i16> {
        s.as_bytes().chunks(4).map(|c| c.iter().fold(0i16, |a, d| a * 10 + i16::from(d - b'0'))).collect()
    };
    let mut groups = group(&int);
    let mut weight = i16::try_from(groups.len()).map_err(|_| "numeric value too long")? - 1;
    groups.extend(group(&frac));
    let leading = groups.iter().take_while(|g| **g == 0).count();
    groups.drain(..leading);
    weight -= i16::try_from(leading).map_err(|_| "numeric value too long")?;
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    out.put_i16(i16::try_from(groups.len()).map_err(|_| "numeric value too long")?);
    out.put_i16(weight);
    out.put_u16(if negative && !groups.is_empty() { 0x4000 } else { 0 });
    out.put_i16(i16::try_from(dscale).map_err(|_| "numeric scale too large")?);
    for g in groups {
        out.put_i16(g);
    }
    Ok(())
}

fn date_of(days: i32) -> Result<NaiveDate, Box<dyn Error + Sync + Send>> {
    NaiveDate::from_num_days_from_ce_opt(days.checked_add(719_163).ok_or("date out of range")?)
        .ok_or_else(|| "date out of range".into())
}

/// A date as PostgreSQL's ISO style writes it, years before 1 as `... BC`.
fn date_text(days: i32) -> Result<String, Box<dyn Error + Sync + Send>> {
    use chrono::Datelike;
    let d = date_of(days)?;
    Ok(if d.year() <= 0 {
        format!("{:04}-{:02}-{:02} BC", 1 - d.year(), d.month(), d.day())
    } else {
        format!("{:04}-{:02}-{:02}", d.year(), d.month(), d.day())
    })
}

/// `HH:MM:SS` with the fraction of a second, trailing zeros dropped, as PostgreSQL writes it.
fn clock_text(hours: i64, minutes: i64, seconds: i64, micros: i64) -> String {
    let mut s = format!("{hours:02}:{minutes:02}:{seconds:02}");
    if micros != 0 {
        s.push_str(format!(".{micros:06}").trim_end_matches('0'));
    }
    s
}

fn time_text(micros: i64) -> Result<String, Box<dyn Error + Sync + Send>> {
    if !(0..=86_400_000_000).contains(&micros) {
        return Err("time out of range".into());
    }
    let secs = micros / 1_000_000;
    Ok(clock_text(secs / 3600, secs / 60 % 60, secs % 60, micros % 1_000_000))
}

fn timestamp_text(micros: i64) -> Result<String, Box<dyn Error + Sync + Send>> {
    let days = micros.div_euclid(86_400_000_000);
    let in_day = micros.rem_euclid(86_400_000_000);
    let days = i32::try_from(days).map_err(|_| "timestamp out of range")?;
    let date = date_text(days)?;
    let (date, era) = match date.strip_suffix(" BC") {
        Some(d) => (d.to_string(), " BC"),
        None => (date, ""),
    };
    Ok(format!("{date} {}{era}", time_text(in_day)?))
}

/// An interval in PostgreSQL's default style: `1 year 2 mons 3 days 04:05:06.5`.
fn interval_text(months: i32, days: i32, micros: i64) -> String {
    let plural = |n: i64, unit: &str| if n.abs() == 1 { format!("{n} {unit}") } else { format!("{n} {unit}s") };
    let mut parts = Vec::new();
    let (years, months) = (i64::from(months) / 12, i64::from(months) % 12);
    if years != 0 {
        parts.push(plural(years, "year"));
    }
    if months != 0 {
        parts.push(plural(months, "mon"));
    }
    if days != 0 {
        parts.push(plural(i64::from(days), "day"));
    }
    if micros != 0 || parts.is_empty() {
        let sign = if micros < 0 { "-" } else { "" };
        let abs = micros.unsigned_abs();
        let secs = i64::try_from(abs / 1_000_000).unwrap_or(i64::MAX);
        let frac = i64::try_from(abs % 1_000_000).unwrap_or(0);
        parts.push(format!("{sign}{}", clock_text(secs / 3600, secs / 60 % 60, secs % 60, frac)));
    }
    parts.join(" ")
}

/// The wire type a parameter of Arrow type `t` is described as: the type its values decode
/// from, or text (parsed into `t`) for a type with no binary decoder here or an unknown type,
/// as PostgreSQL resolves an untyped parameter.
pub(crate) fn parameter_type(t: Option<&DataType>) -> Type {
    match t.and_then(|t| WireType::of("", t).ok()) {
        Some(
            w @ (WireType::Bool
            | WireType::Int2
            | WireType::Int4
            | WireType::Int8
            | WireType::Float4
            | WireType::Float8
            | WireType::Numeric(..)
            | WireType::Bytea
            | WireType::Date
            | WireType::Time
            | WireType::Timestamp
            | WireType::TimestampTz),
        ) => w.pg_type(),
        _ => Type::TEXT,
    }
}

fn parameter_error(i: usize, message: impl std::fmt::Display) -> SqlError {
    SqlError::new(ErrorKind::DataException, format!("parameter ${}: {message}", i + 1))
}

/// Parameter `i` of `portal` decoded as `ty` (binary or text, as the client sent it).
fn decode<S: Clone>(portal: &Portal<S>, i: usize, ty: &Type) -> Result<ScalarValue, SqlError> {
    let err = |e: pgwire::error::PgWireError| parameter_error(i, e);
    Ok(match *ty {
        Type::BOOL => ScalarValue::Boolean(portal.parameter::<bool>(i, ty).map_err(err)?),
        Type::INT2 => ScalarValue::Int16(portal.parameter::<i16>(i, ty).map_err(err)?),
        Type::INT4 => ScalarValue::Int32(portal.parameter::<i32>(i, ty).map_err(err)?),
        Type::INT8 => ScalarValue::Int64(portal.parameter::<i64>(i, ty).map_err(err)?),
        Type::FLOAT4 => ScalarValue::Float32(portal.parameter::<f32>(i, ty).map_err(err)?),
        Type::FLOAT8 => ScalarValue::Float64(portal.parameter::<f64>(i, ty).map_err(err)?),
        Type::NUMERIC => match portal.parameter::<Decimal>(i, ty).map_err(err)? {
            None => ScalarValue::Decimal128(None, 38, 0),
            Some(d) => {
                let scale = i8::try_from(d.scale()).map_err(|_| parameter_error(i, "numeric scale too large"))?;
                ScalarValue::Decimal128(Some(d.mantissa()), 38, scale)
            }
        },
        Type::BYTEA => ScalarValue::Binary(portal.parameter::<Vec<u8>>(i, ty).map_err(err)?),
        Type::DATE => {
            ScalarValue::Date32(portal.parameter::<NaiveDate>(i, ty).map_err(err)?.map(Date32Type::from_naive_date))
        }
        Type::TIME => ScalarValue::Time64Microsecond(
            portal
                .parameter::<NaiveTime>(i, ty)
                .map_err(err)?
                .map(|t| i64::from(t.num_seconds_from_midnight()) * 1_000_000 + i64::from(t.nanosecond() / 1000)),
        ),
        Type::TIMESTAMP => ScalarValue::TimestampMicrosecond(
            portal.parameter::<NaiveDateTime>(i, ty).map_err(err)?.map(|t| t.and_utc().timestamp_micros()),
            None,
        ),
        Type::TIMESTAMPTZ => ScalarValue::TimestampMicrosecond(
            portal.parameter::<DateTime<FixedOffset>>(i, ty).map_err(err)?.map(|t| t.timestamp_micros()),
            Some(UTC.into()),
        ),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
            ScalarValue::Utf8(portal.parameter::<String>(i, ty).map_err(err)?)
        }
        _ => {
            return Err(SqlError::new(
                ErrorKind::FeatureNotSupported,
                format!("parameter ${} is of type {ty}, which strata does not accept; send it as text", i + 1),
            ))
        }
    })
}

/// `v` as a value of type `target`, refused when that changes it: parsed when `v` is text,
/// otherwise converted only if converting back gives `v` again.
fn convert(i: usize, v: ScalarValue, target: &DataType) -> Result<ScalarValue, SqlError> {
    if v.data_type() == *target {
        return Ok(v);
    }
    let options = CastOptions { safe: false, ..Default::default() };
    let converted = v
        .cast_to_with_options(target, &options)
        .map_err(|e| parameter_error(i, format!("{v} is not a valid {target}: {e}")))?;
    if !matches!(v, ScalarValue::Utf8(_)) {
        let back = converted.cast_to_with_options(&v.data_type(), &options).ok();
        if back.as_ref() != Some(&v) {
            return Err(SqlError::new(
                ErrorKind::DataException,
                format!("parameter ${}: {v} does not fit the expected {target} (it would become {converted})", i + 1),
            ));
        }
    }
    Ok(converted)
}

/// The values of `portal`'s parameters: each decoded as the type the client declared for it
/// (else as `described[i]`, what the server described it as), then converted to `expected[i]`,
/// the type the statement takes, where that is known.
pub(crate) fn parameters<S: Clone>(portal: &Portal<S>, expected: &[Option<DataType>]) -> Result<ParamValues, SqlError> {
    let mut values = Vec::with_capacity(portal.parameter_len());
    for i in 0..portal.parameter_len() {
        let target = expected.get(i).and_then(Option::as_ref);
        let declared = portal.statement.parameter_types.get(i).cloned().flatten();
        let ty = declared.unwrap_or_else(|| parameter_type(target));
        let value = decode(portal, i, &ty)?;
        values.push(match target {
            Some(t) => convert(i, value, t)?,
            None => value,
        });
    }
    Ok(ParamValues::List(values.into_iter().map(Into::into).collect()))
}

/// The Arrow type a parameter of PostgreSQL type `ty` is, when a client declares it; `None`
/// for types left to inference (text) or not accepted.
pub(crate) fn declared_arrow_type(ty: Option<&Type>) -> Option<DataType> {
    Some(match ty? {
        t if *t == Type::BOOL => DataType::Boolean,
        t if *t == Type::INT2 => DataType::Int16,
        t if *t == Type::INT4 => DataType::Int32,
        t if *t == Type::INT8 => DataType::Int64,
        t if *t == Type::FLOAT4 => DataType::Float32,
        t if *t == Type::FLOAT8 => DataType::Float64,
        t if *t == Type::BYTEA => DataType::Binary,
        t if *t == Type::DATE => DataType::Date32,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary(cell: &Cell<'_>, ty: &Type) -> Vec<u8> {
        let mut out = BytesMut::new();
        cell.to_sql(ty, &mut out).unwrap();
        out.to_vec()
    }

    fn text(cell: &Cell<'_>, ty: &Type) -> String {
        let mut out = BytesMut::new();
        cell.to_sql_text(ty, &mut out, &FormatOptions::default()).unwrap();
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn a_value_is_written_only_as_its_own_type() {
        let mut out = BytesMut::new();
        assert!(Cell::Int8(100_000).to_sql(&Type::INT4, &mut out).is_err());
        assert!(Cell::Int2(7).to_sql_text(&Type::INT8, &mut out, &FormatOptions::default()).is_err());
        assert!(out.is_empty());
        assert!(matches!(Cell::Null.to_sql(&Type::INT4, &mut out), Ok(IsNull::Yes)));
    }

    #[test]
    fn every_scalar_arrow_type_has_one_wire_type_lists_are_arrays_and_nested_ones_are_refused() {
        use strata_sql::datafusion::arrow::datatypes::Field;
        assert_eq!(WireType::of("c", &DataType::Int8).unwrap(), WireType::Int2);
        assert_eq!(WireType::of("c", &DataType::UInt32).unwrap(), WireType::Int8);
        assert_eq!(WireType::of("c", &DataType::Utf8View).unwrap(), WireType::Text);
        let list = DataType::List(Arc::new(Field::new("item", DataType::Int64, true)));
        assert_eq!(WireType::of("xs", &list).unwrap(), WireType::Array(Element::Int8));
        assert_eq!(WireType::of("xs", &list).unwrap().pg_type(), Type::INT8_ARRAY);
        let nested = DataType::List(Arc::new(Field::new("item", list, true)));
        let e = WireType::of("xs", &nested).unwrap_err();
        assert_eq!(e.kind, ErrorKind::FeatureNotSupported);
        assert!(e.message.contains("\"xs\"") && e.message.contains("List"), "{}", e.message);
    }

    #[test]
    fn numeric_binary_matches_postgresql_layout() {
        // 12345.678: groups 1 2345 6780, weight 1, dscale 3.
        assert_eq!(
            binary(&Cell::Numeric(12_345_678, 3), &Type::NUMERIC),
            [0, 3, 0, 1, 0, 0, 0, 3, 0, 1, 0x09, 0x29, 0x1a, 0x7c]
        );
        // -0.0001: one group 1 at weight -1, dscale 4.
        assert_eq!(binary(&Cell::Numeric(-1, 4), &Type::NUMERIC), [0, 1, 0xff, 0xff, 0x40, 0, 0, 4, 0, 1]);
        // Zero keeps its scale and has no digits.
        assert_eq!(binary(&Cell::Numeric(0, 2), &Type::NUMERIC), [0, 0, 0, 0, 0, 0, 0, 2]);
        // 1200 as 12 with scale -2.
        assert_eq!(binary(&Cell::Numeric(12, -2), &Type::NUMERIC), [0, 1, 0, 0, 0, 0, 0, 0, 0x04, 0xb0]);
        assert_eq!(text(&Cell::Numeric(-1, 4), &Type::NUMERIC), "-0.0001");
        assert_eq!(text(&Cell::Numeric(12, -2), &Type::NUMERIC), "1200");
        assert_eq!(text(&Cell::Numeric(i128::MAX, 0), &Type::NUMERIC), i128::MAX.to_string());
    }

    #[test]
    fn text_follows_postgresql_output() {
        assert_eq!(text(&Cell::Float8(f64::INFINITY), &Type::FLOAT8), "Infinity");
        assert_eq!(text(&Cell::Float4(f32::NEG_INFINITY), &Type::FLOAT4), "-Infinity");
        assert_eq!(text(&Cell::Float8(f64::NAN), &Type::FLOAT8), "NaN");
        assert_eq!(text(&Cell::Float4(0.1), &Type::FLOAT4), "0.1");
        assert_eq!(text(&Cell::Bool(true), &Type::BOOL), "t");
        assert_eq!(text(&Cell::Bytea(&[0, 0xab]), &Type::BYTEA), "\\x00ab");
        assert_eq!(text(&Cell::Date(0), &Type::DATE), "1970-01-01");
        assert_eq!(text(&Cell::Date(-719_163), &Type::DATE), "0001-12-31 BC");
        assert_eq!(text(&Cell::Timestamp(1_500_000), &Type::TIMESTAMP), "1970-01-01 00:00:01.5");
        assert_eq!(text(&Cell::TimestampTz(-1), &Type::TIMESTAMPTZ), "1969-12-31 23:59:59.999999+00");
        assert_eq!(
            text(&Cell::Interval { months: 14, days: 3, micros: 4 * 3_600_000_000 + 5_000_000 }, &Type::INTERVAL),
            "1 year 2 mons 3 days 04:00:05"
        );
        assert_eq!(text(&Cell::Interval { months: 0, days: 0, micros: 0 }, &Type::INTERVAL), "00:00:00");
        assert_eq!(binary(&Cell::Date(EPOCH_DAYS), &Type::DATE), [0, 0, 0, 0]);
    }

    #[test]
    fn parameters_convert_only_without_loss() {
        assert_eq!(convert(0, ScalarValue::Int64(Some(7)), &DataType::Int32).unwrap(), ScalarValue::Int32(Some(7)));
        assert!(convert(0, ScalarValue::Int64(Some(1 << 40)), &DataType::Int32).is_err());
        assert!(convert(0, ScalarValue::Float64(Some(1.5)), &DataType::Int64).is_err());
        assert!(convert(0, ScalarValue::Int64(Some((1 << 53) + 1)), &DataType::Float64).is_err());
        assert_eq!(
            convert(0, ScalarValue::Utf8(Some("42".into())), &DataType::Int16).unwrap(),
            ScalarValue::Int16(Some(42))
        );
        let e = convert(1, ScalarValue::Utf8(Some("4x".into())), &DataType::Int16).unwrap_err();
        assert!(e.message.starts_with("parameter $2"), "{}", e.message);
        assert_eq!(convert(0, ScalarValue::Int32(None), &DataType::Int64).unwrap(), ScalarValue::Int64(None));
    }
}
