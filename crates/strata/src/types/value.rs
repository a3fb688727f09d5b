//! A single typed value, as users pass and receive them.

use super::ColumnType;

/// One column value. Floats compare by bit pattern, so `NaN == NaN` and `0.0 != -0.0`, which
/// matches how they are stored and ordered in keys.
#[derive(Debug, Clone)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// BIGINT.
    BigInt(i64),
    /// INT.
    Int(i32),
    /// SMALLINT.
    SmallInt(i16),
    /// TINYINT.
    TinyInt(i8),
    /// DOUBLE.
    Double(f64),
    /// REAL.
    Real(f32),
    /// BOOLEAN.
    Boolean(bool),
    /// TEXT.
    Text(String),
    /// BYTEA.
    Bytea(Vec<u8>),
    /// DATE: days since 1970-01-01.
    Date(i32),
    /// TIMESTAMP: microseconds since 1970-01-01 00:00:00 (no time zone).
    Timestamp(i64),
    /// TIMESTAMPTZ: microseconds since 1970-01-01 00:00:00 UTC.
    TimestampTz(i64),
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        use Value::*;
        match (self, other) {
            (Null, Null) => true,
            (BigInt(a), BigInt(b)) => a == b,
            (Int(a), Int(b)) => a == b,
            (SmallInt(a), SmallInt(b)) => a == b,
            (TinyInt(a), TinyInt(b)) => a == b,
            (Double(a), Double(b)) => a.to_bits() == b.to_bits(),
            (Real(a), Real(b)) => a.to_bits() == b.to_bits(),
            (Boolean(a), Boolean(b)) => a == b,
            (Text(a), Text(b)) => a == b,
            (Bytea(a), Bytea(b)) => a == b,
            (Date(a), Date(b)) => a == b,
            (Timestamp(a), Timestamp(b)) | (TimestampTz(a), TimestampTz(b)) => a == b,
            _ => false,
        }
    }
}

impl Value {
    /// True for [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Whether a non-null value has the given column type.
    pub fn has_type(&self, ty: ColumnType) -> bool {
        matches!(
            (self, ty),
            (Value::BigInt(_), ColumnType::BigInt)
                | (Value::Int(_), ColumnType::Int)
                | (Value::SmallInt(_), ColumnType::SmallInt)
                | (Value::TinyInt(_), ColumnType::TinyInt)
                | (Value::Double(_), ColumnType::Double)
                | (Value::Real(_), ColumnType::Real)
                | (Value::Boolean(_), ColumnType::Boolean)
                | (Value::Text(_), ColumnType::Text)
                | (Value::Bytea(_), ColumnType::Bytea)
                | (Value::Date(_), ColumnType::Date)
                | (Value::Timestamp(_), ColumnType::Timestamp)
                | (Value::TimestampTz(_), ColumnType::TimestampTz)
        )
    }

    /// A short name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::BigInt(_) => "BIGINT",
            Value::Int(_) => "INT",
            Value::SmallInt(_) => "SMALLINT",
            Value::TinyInt(_) => "TINYINT",
            Value::Double(_) => "DOUBLE",
            Value::Real(_) => "REAL",
            Value::Boolean(_) => "BOOLEAN",
            Value::Text(_) => "TEXT",
            Value::Bytea(_) => "BYTEA",
            Value::Date(_) => "DATE",
            Value::Timestamp(_) => "TIMESTAMP",
            Value::TimestampTz(_) => "TIMESTAMPTZ",
        }
    }

    /// Appends the little-endian bytes of a fixed-width value (nothing for NULL or var-width).
    pub(crate) fn put_fixed(&self, out: &mut Vec<u8>) {
        match self {
            Value::BigInt(v) | Value::Timestamp(v) | Value::TimestampTz(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::Int(v) | Value::Date(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::SmallInt(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::TinyInt(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::Double(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::Real(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::Boolean(v) => out.push(u8::from(*v)),
            Value::Null | Value::Text(_) | Value::Bytea(_) => {}
        }
    }

    /// Reads a fixed-width value of type `ty` from exactly `ty.fixed_width()` bytes.
    #[inline]
    pub(crate) fn from_fixed(ty: ColumnType, b: &[u8]) -> Value {
        fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
            let mut a = [0u8; N];
            a.copy_from_slice(&b[..N]);
            a
        }
        match ty {
            ColumnType::BigInt => Value::BigInt(i64::from_le_bytes(arr(b))),
            ColumnType::Int => Value::Int(i32::from_le_bytes(arr(b))),
            ColumnType::SmallInt => Value::SmallInt(i16::from_le_bytes(arr(b))),
            ColumnType::TinyInt => Value::TinyInt(i8::from_le_bytes(arr(b))),
            ColumnType::Double => Value::Double(f64::from_le_bytes(arr(b))),
            ColumnType::Real => Value::Real(f32::from_le_bytes(arr(b))),
            ColumnType::Boolean => Value::Boolean(b[0] != 0),
            ColumnType::Date => Value::Date(i32::from_le_bytes(arr(b))),
            ColumnType::Timestamp => Value::Timestamp(i64::from_le_bytes(arr(b))),
            ColumnType::TimestampTz => Value::TimestampTz(i64::from_le_bytes(arr(b))),
            ColumnType::Text | ColumnType::Bytea => Value::Null,
        }
    }

    /// The bytes of a TEXT or BYTEA value.
    pub(crate) fn var_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Text(s) => Some(s.as_bytes()),
            Value::Bytea(b) => Some(b),
            _ => None,
        }
    }

    /// Builds a TEXT or BYTEA value from stored bytes; `None` if TEXT bytes are not UTF-8.
    pub(crate) fn from_var(ty: ColumnType, b: &[u8]) -> Option<Value> {
        match ty {
            ColumnType::Text => std::str::from_utf8(b).ok().map(|s| Value::Text(s.to_owned())),
            _ => Some(Value::Bytea(b.to_vec())),
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::BigInt(v)
    }
}
impl From<i32> for Value {
    fn from(v: i32) -> Self {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Double(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Boolean(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_owned())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytea(v)
    }
}

/// The first day DATE counts from.
fn epoch() -> chrono::NaiveDate {
    chrono::NaiveDate::default()
}

/// The DATE days of an ISO calendar date (`2026-11-25`); `None` if it is not one.
pub fn parse_date(text: &str) -> Option<i32> {
    let d = chrono::NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d").ok()?;
    i32::try_from(d.signed_duration_since(epoch()).num_days()).ok()
}

/// The TIMESTAMP microseconds of an ISO date and time (`2026-11-25 13:45:00`, `T` or a space
/// between them, up to six fractional digits, or a date alone for midnight); `None` if it is not
/// one. A time zone suffix is not accepted here (see [`parse_timestamptz`]).
pub fn parse_timestamp(text: &str) -> Option<i64> {
    let t = text.trim();
    let dt = ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|f| chrono::NaiveDateTime::parse_from_str(t, f).ok())
        .or_else(|| chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d").ok()?.and_hms_opt(0, 0, 0))?;
    micros_of(dt)
}

/// The TIMESTAMPTZ microseconds (UTC) of an ISO date and time with an offset (`+02`, `+05:30`,
/// `Z`), read as UTC when it has none; `None` if it is not one.
pub fn parse_timestamptz(text: &str) -> Option<i64> {
    let t = text.trim();
    let with_offset =
        ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z", "%Y-%m-%d %H:%M:%S%.fZ", "%Y-%m-%dT%H:%M:%S%.fZ"]
            .iter()
            .find_map(|f| {
                if f.ends_with('Z') {
                    chrono::NaiveDateTime::parse_from_str(t, f).ok().and_then(micros_of)
                } else {
                    chrono::DateTime::parse_from_str(t, f).ok().map(|d| d.timestamp_micros())
                }
            });
    with_offset.or_else(|| parse_timestamp(t))
}

fn micros_of(dt: chrono::NaiveDateTime) -> Option<i64> {
    let d = dt.signed_duration_since(chrono::NaiveDateTime::default());
    d.num_microseconds()
}

/// A TIMESTAMP as PostgreSQL prints it (`2026-11-25 13:45:00`, `.123456` with the fraction's
/// trailing zeros dropped); microseconds beyond the calendar's range print as a count.
pub fn format_timestamp(micros: i64) -> String {
    match chrono::DateTime::from_timestamp_micros(micros) {
        Some(d) => {
            let d = d.naive_utc();
            let mut s = d.format("%Y-%m-%d %H:%M:%S").to_string();
            let frac = micros.rem_euclid(1_000_000);
            if frac != 0 {
                s.push_str(format!(".{frac:06}").trim_end_matches('0'));
            }
            s
        }
        None => format!("{micros} microseconds"),
    }
}

/// A TIMESTAMPTZ as PostgreSQL prints it in time zone UTC (`2026-11-25 13:45:00+00`).
pub fn format_timestamptz(micros: i64) -> String {
    format!("{}+00", format_timestamp(micros))
}

/// The ISO calendar date (`2026-11-25`) of DATE days; days beyond the calendar's range (about
/// ±262,000 years) print as a day count.
pub fn format_date(days: i32) -> String {
    match epoch().checked_add_signed(chrono::TimeDelta::days(days.into())) {
        Some(d) => d.format("%Y-%m-%d").to_string(),
        None => format!("{days} days"),
    }
}

/// Compares two non-NULL values of the same column type: integers by value, floats in IEEE
/// total order, TEXT and BYTEA bytewise, `false < true`. Values of different types compare by
/// type only (callers never mix them).
pub(crate) fn compare(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a, b) {
        (Value::BigInt(x), Value::BigInt(y)) => x.cmp(y),
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::SmallInt(x), Value::SmallInt(y)) => x.cmp(y),
        (Value::TinyInt(x), Value::TinyInt(y)) => x.cmp(y),
        (Value::Double(x), Value::Double(y)) => x.total_cmp(y),
        (Value::Real(x), Value::Real(y)) => x.total_cmp(y),
        (Value::Boolean(x), Value::Boolean(y)) => x.cmp(y),
        (Value::Text(x), Value::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Bytea(x), Value::Bytea(y)) => x.cmp(y),
        (Value::Date(x), Value::Date(y)) => x.cmp(y),
        (Value::Timestamp(x), Value::Timestamp(y)) | (Value::TimestampTz(x), Value::TimestampTz(y)) => x.cmp(y),
        _ => a.type_name().cmp(b.type_name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_parse_and_print_as_days_since_1970() {
        assert_eq!(parse_date("1970-01-01"), Some(0));
        assert_eq!(parse_date("1969-12-31"), Some(-1));
        assert_eq!(parse_date("1992-01-01"), Some(8035));
        assert_eq!(parse_date(" 2000-02-29 "), Some(11016));
        for bad in ["2001-02-29", "1992-13-01", "1992-1-1x", "", "yesterday"] {
            assert_eq!(parse_date(bad), None, "{bad}");
        }
        for days in [-700_000, -1, 0, 1, 8035, 10_591, 2_000_000] {
            let text = format_date(days);
            assert_eq!(parse_date(&text), Some(days), "{text}");
        }
        assert_eq!(format_date(10_591), "1998-12-31");
        assert_eq!(format_date(i32::MAX), format!("{} days", i32::MAX));
    }

    #[test]
    fn timestamps_parse_and_print_as_microseconds_since_1970() {
        assert_eq!(parse_timestamp("1970-01-01 00:00:00"), Some(0));
        assert_eq!(parse_timestamp("1970-01-01"), Some(0));
        assert_eq!(parse_timestamp("1969-12-31 23:59:59.999999"), Some(-1));
        assert_eq!(parse_timestamp("2026-11-25T13:45:00.5"), Some(1_795_614_300_500_000));
        assert_eq!(parse_timestamp("2026-11-25 13:45"), Some(1_795_614_300_000_000));
        for bad in ["2026-11-25 25:00:00", "2026-11-25 13:45:00+02", "", "now"] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
        assert_eq!(parse_timestamptz("2026-11-25 15:45:00+02"), Some(1_795_614_300_000_000));
        assert_eq!(parse_timestamptz("2026-11-25 13:45:00Z"), Some(1_795_614_300_000_000));
        assert_eq!(parse_timestamptz("2026-11-25 08:15:00-05:30"), Some(1_795_614_300_000_000));
        assert_eq!(parse_timestamptz("2026-11-25 13:45:00"), Some(1_795_614_300_000_000));
        for micros in [i64::from(i32::MIN) * 1_000_000, -1, 0, 1, 1_795_614_300_500_000, 253_402_300_799_999_999] {
            let text = format_timestamp(micros);
            assert_eq!(parse_timestamp(&text), Some(micros), "{text}");
            assert_eq!(parse_timestamptz(&format_timestamptz(micros)), Some(micros), "{text}");
        }
        assert_eq!(format_timestamp(1_795_614_300_500_000), "2026-11-25 13:45:00.5");
        assert_eq!(format_timestamptz(0), "1970-01-01 00:00:00+00");
        assert_eq!(format_timestamp(i64::MAX), format!("{} microseconds", i64::MAX));
    }
}
