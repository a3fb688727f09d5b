//! Table schemas: typed, nullable-or-not columns and a primary key of one or more columns.
//!
//! Columns split into key columns (stored in the order-preserving key) and value columns (stored
//! in rows and column groups). Value columns are numbered by their position among the non-key
//! columns in schema order; every layer below the API speaks in value-column indices.

use crate::codec::{put_bytes, put_varint, DecodeError, DecodeResult, Reader};
use crate::error::{Error, Result};

/// A column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// 64-bit signed integer.
    BigInt,
    /// 32-bit signed integer.
    Int,
    /// 16-bit signed integer.
    SmallInt,
    /// 8-bit signed integer.
    TinyInt,
    /// 64-bit IEEE float.
    Double,
    /// 32-bit IEEE float.
    Real,
    /// true / false.
    Boolean,
    /// UTF-8 text.
    Text,
    /// Arbitrary bytes.
    Bytea,
    /// A calendar date: days since 1970-01-01 (negative before), as Arrow's Date32.
    Date,
    /// A date and time of day without a time zone (SQL's TIMESTAMP): microseconds since
    /// 1970-01-01 00:00:00, as Arrow's `Timestamp(Microsecond, None)`.
    Timestamp,
    /// An instant (SQL's TIMESTAMPTZ): microseconds since 1970-01-01 00:00:00 UTC, as Arrow's
    /// `Timestamp(Microsecond, "+00:00")`.
    TimestampTz,
}

impl ColumnType {
    /// Width in bytes of a fixed-width type, `None` for TEXT and BYTEA.
    #[inline]
    pub fn fixed_width(self) -> Option<usize> {
        match self {
            ColumnType::BigInt | ColumnType::Double | ColumnType::Timestamp | ColumnType::TimestampTz => Some(8),
            ColumnType::Int | ColumnType::Real | ColumnType::Date => Some(4),
            ColumnType::SmallInt => Some(2),
            ColumnType::TinyInt | ColumnType::Boolean => Some(1),
            ColumnType::Text | ColumnType::Bytea => None,
        }
    }

    /// The SQL name of the type.
    pub fn name(self) -> &'static str {
        match self {
            ColumnType::BigInt => "BIGINT",
            ColumnType::Int => "INT",
            ColumnType::SmallInt => "SMALLINT",
            ColumnType::TinyInt => "TINYINT",
            ColumnType::Double => "DOUBLE",
            ColumnType::Real => "REAL",
            ColumnType::Boolean => "BOOLEAN",
            ColumnType::Text => "TEXT",
            ColumnType::Bytea => "BYTEA",
            ColumnType::Date => "DATE",
            ColumnType::Timestamp => "TIMESTAMP",
            ColumnType::TimestampTz => "TIMESTAMPTZ",
        }
    }

    pub(crate) fn code(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_code(c: u8) -> DecodeResult<Self> {
        const ALL: [ColumnType; 12] = [
            ColumnType::BigInt,
            ColumnType::Int,
            ColumnType::SmallInt,
            ColumnType::TinyInt,
            ColumnType::Double,
            ColumnType::Real,
            ColumnType::Boolean,
            ColumnType::Text,
            ColumnType::Bytea,
            ColumnType::Date,
            ColumnType::Timestamp,
            ColumnType::TimestampTz,
        ];
        ALL.get(c as usize).copied().ok_or_else(|| DecodeError::new(format!("unknown column type {c}")))
    }
}

/// The type-code bit saying a length limit follows (see [`Schema::encode`]).
const LIMITED: u8 = 0x80;

/// One column of a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Column name, unique within the table.
    pub name: String,
    /// Column type.
    pub ty: ColumnType,
    /// Whether NULL is allowed. Primary-key columns are never nullable.
    pub nullable: bool,
    /// For TEXT, the most characters a value may have (SQL's VARCHAR(n) and CHAR(n)); a longer
    /// value is refused. `None`: no limit.
    pub max_chars: Option<u32>,
}

impl Column {
    /// A nullable column.
    pub fn new(name: impl Into<String>, ty: ColumnType) -> Self {
        Column { name: name.into(), ty, nullable: true, max_chars: None }
    }

    /// A NOT NULL column.
    pub fn not_null(name: impl Into<String>, ty: ColumnType) -> Self {
        Column { name: name.into(), ty, nullable: false, max_chars: None }
    }

    /// This TEXT column limited to `n` characters per value (see [`Column::max_chars`]).
    pub fn with_max_chars(self, n: u32) -> Self {
        Column { max_chars: Some(n), ..self }
    }
}

/// Columns plus a primary key. Immutable once built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    columns: Vec<Column>,
    primary_key: Vec<usize>,
    value_columns: Vec<usize>,
    /// For each schema column, its value-column index (`None` for key columns).
    value_index: Vec<Option<usize>>,
}

impl Schema {
    /// Builds a schema. `primary_key` names one or more columns, in key order; they become NOT NULL.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no columns, duplicate names, an empty or unknown key, or a
    /// key column listed twice.
    ///
    /// ```
    /// use strata::{Column, ColumnType, Schema};
    /// let s = Schema::new(
    ///     vec![Column::new("id", ColumnType::BigInt), Column::new("name", ColumnType::Text)],
    ///     &["id"],
    /// ).unwrap();
    /// assert_eq!(s.value_columns().len(), 1);
    /// ```
    pub fn new(mut columns: Vec<Column>, primary_key: &[&str]) -> Result<Self> {
        if columns.is_empty() {
            return Err(Error::InvalidArgument("a schema needs at least one column".into()));
        }
        if columns.len() > u16::MAX as usize {
            return Err(Error::InvalidArgument("too many columns".into()));
        }
        for (i, c) in columns.iter().enumerate() {
            if c.name.is_empty() {
                return Err(Error::InvalidArgument(format!("column {i} has an empty name")));
            }
            if columns[..i].iter().any(|o| o.name == c.name) {
                return Err(Error::InvalidArgument(format!("duplicate column name `{}`", c.name)));
            }
            if c.max_chars.is_some() && c.ty != ColumnType::Text {
                return Err(Error::InvalidArgument(format!("column `{}`: only TEXT takes a length limit", c.name)));
            }
        }
        if primary_key.is_empty() {
            return Err(Error::InvalidArgument("a primary key of at least one column is required".into()));
        }
        let mut pk = Vec::with_capacity(primary_key.len());
        for name in primary_key {
            let idx = columns
                .iter()
                .position(|c| c.name == *name)
                .ok_or_else(|| Error::InvalidArgument(format!("primary key column `{name}` is not in the schema")))?;
            if pk.contains(&idx) {
                return Err(Error::InvalidArgument(format!("primary key lists `{name}` twice")));
            }
            pk.push(idx);
        }
        for &k in &pk {
            columns[k].nullable = false;
        }
        Ok(Self::from_parts(columns, pk))
    }

    fn from_parts(columns: Vec<Column>, primary_key: Vec<usize>) -> Self {
        let value_columns: Vec<usize> = (0..columns.len()).filter(|i| !primary_key.contains(i)).collect();
        let mut value_index = vec![None; columns.len()];
        for (vi, &ci) in value_columns.iter().enumerate() {
            value_index[ci] = Some(vi);
        }
        Schema { columns, primary_key, value_columns, value_index }
    }

    /// All columns in schema order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Schema indices of the primary-key columns, in key order.
    pub fn primary_key(&self) -> &[usize] {
        &self.primary_key
    }

    /// Schema indices of the non-key columns, in schema order.
    pub fn value_columns(&self) -> &[usize] {
        &self.value_columns
    }

    /// Value-column index of a schema column, `None` for key columns.
    pub fn value_index(&self, column: usize) -> Option<usize> {
        self.value_index.get(column).copied().flatten()
    }

    /// Schema index of a column by name.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// Types of all value columns, in value-column order.
    pub(crate) fn value_types(&self) -> Vec<ColumnType> {
        self.value_columns.iter().map(|&c| self.columns[c].ty).collect()
    }

    /// Types of the key columns, in key order.
    pub(crate) fn key_types(&self) -> Vec<ColumnType> {
        self.primary_key.iter().map(|&c| self.columns[c].ty).collect()
    }

    /// The schema in the encoding the manifest keeps it in, for a process that sends it to
    /// another ([`Schema::from_bytes`] reads it back).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// A schema [`Schema::to_bytes`] wrote.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](Error::InvalidArgument) when the bytes are not one.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes);
        let schema =
            Self::decode(&mut r).map_err(|e| Error::InvalidArgument(format!("a schema does not decode: {}", e.0)))?;
        if !r.is_empty() {
            return Err(Error::InvalidArgument("a schema does not decode: trailing bytes".into()));
        }
        Ok(schema)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.columns.len() as u64);
        for c in &self.columns {
            put_bytes(out, c.name.as_bytes());
            // A length limit sets the type code's high bit and follows the nullable flag: older
            // builds refuse the code instead of dropping the limit.
            out.push(c.ty.code() | if c.max_chars.is_some() { LIMITED } else { 0 });
            out.push(u8::from(c.nullable));
            if let Some(n) = c.max_chars {
                put_varint(out, u64::from(n));
            }
        }
        put_varint(out, self.primary_key.len() as u64);
        for &k in &self.primary_key {
            put_varint(out, k as u64);
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let n = r.len(u16::MAX as usize)?;
        let mut columns = Vec::with_capacity(n);
        for _ in 0..n {
            let name = r.string()?;
            let code = r.u8()?;
            let ty = ColumnType::from_code(code & !LIMITED)?;
            let nullable = r.u8()? != 0;
            let max_chars = if code & LIMITED != 0 {
                if ty != ColumnType::Text {
                    return Err(DecodeError::new("a length limit on a column that is not TEXT"));
                }
                Some(u32::try_from(r.varint()?).map_err(|_| DecodeError::new("length limit out of range"))?)
            } else {
                None
            };
            columns.push(Column { name, ty, nullable, max_chars });
        }
        let nk = r.len(n)?;
        let mut pk = Vec::with_capacity(nk);
        for _ in 0..nk {
            let k = r.len(n.saturating_sub(1))?;
            if pk.contains(&k) {
                return Err(DecodeError::new("duplicate primary key column"));
            }
            pk.push(k);
        }
        if nk == 0 {
            return Err(DecodeError::new("schema without primary key"));
        }
        Ok(Self::from_parts(columns, pk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_schemas() {
        let c = || vec![Column::new("a", ColumnType::Int), Column::new("b", ColumnType::Text)];
        assert!(Schema::new(vec![], &["a"]).is_err());
        assert!(Schema::new(c(), &[]).is_err());
        assert!(Schema::new(c(), &["z"]).is_err());
        assert!(Schema::new(c(), &["a", "a"]).is_err());
        let mut dup = c();
        dup.push(Column::new("a", ColumnType::Int));
        assert!(Schema::new(dup, &["a"]).is_err());
    }

    #[test]
    fn key_columns_become_not_null_and_roundtrip() {
        let s = Schema::new(
            vec![
                Column::new("a", ColumnType::Int),
                Column::new("b", ColumnType::Text),
                Column::new("c", ColumnType::Double),
                Column::new("d", ColumnType::Text).with_max_chars(20),
            ],
            &["c", "a"],
        )
        .unwrap();
        assert!(!s.columns()[0].nullable && !s.columns()[2].nullable);
        assert_eq!(s.value_columns(), &[1, 3]);
        assert_eq!(s.value_index(1), Some(0));
        let mut buf = Vec::new();
        s.encode(&mut buf);
        assert_eq!(Schema::decode(&mut Reader::new(&buf)).unwrap(), s);
        assert_eq!(Schema::from_bytes(&s.to_bytes()).unwrap(), s);
        let mut longer = s.to_bytes();
        longer.push(0);
        for bad in [&longer[..], &buf[..buf.len() - 1]] {
            assert!(matches!(Schema::from_bytes(bad), Err(Error::InvalidArgument(_))));
        }
    }
}
