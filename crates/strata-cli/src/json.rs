//! Values in JSON: numbers for numeric columns, strings for TEXT, `"\\x..."` hex strings for
//! BYTEA, `null` for NULL, `true`/`false` for BOOLEAN. DOUBLE and REAL also accept and produce the
//! strings `"NaN"`, `"Infinity"` and `"-Infinity"`, which JSON numbers cannot express.

use serde_json::{Map, Number, Value as Json};
use strata::{ColumnType, Schema, Value};

/// Converts a stored value to JSON.
pub fn to_json(v: &Value) -> Json {
    fn float(f: f64) -> Json {
        if f.is_nan() {
            Json::from("NaN")
        } else if f.is_infinite() {
            Json::from(if f > 0.0 { "Infinity" } else { "-Infinity" })
        } else {
            Number::from_f64(f).map_or(Json::Null, Json::Number)
        }
    }
    match v {
        Value::Null => Json::Null,
        Value::BigInt(x) => Json::from(*x),
        Value::Int(x) => Json::from(*x),
        Value::SmallInt(x) => Json::from(*x),
        Value::TinyInt(x) => Json::from(*x),
        Value::Double(x) => float(*x),
        Value::Real(x) => float(f64::from(*x)),
        Value::Boolean(b) => Json::from(*b),
        Value::Text(s) => Json::from(s.as_str()),
        Value::Date(d) => Json::from(strata::types::format_date(*d)),
        Value::Timestamp(t) => Json::from(strata::types::format_timestamp(*t)),
        Value::TimestampTz(t) => Json::from(strata::types::format_timestamptz(*t)),
        Value::Bytea(b) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            Json::from(format!("\\x{hex}"))
        }
    }
}

fn parse_float(j: &Json) -> Option<f64> {
    match j {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// Parses `\x0a1b` hex text.
pub fn parse_hex(s: &str) -> Option<Vec<u8>> {
    let h = s.strip_prefix("\\x")?;
    if h.len() % 2 != 0 {
        return None;
    }
    (0..h.len()).step_by(2).map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok()).collect()
}

/// Converts JSON to a value of column type `ty`; the error says what was expected.
pub fn from_json(ty: ColumnType, j: &Json) -> Result<Value, String> {
    if j.is_null() {
        return Ok(Value::Null);
    }
    let bad = || format!("expected {}, got {j}", ty.name());
    let int = |lo: i64, hi: i64| -> Result<i64, String> {
        let v = j.as_i64().ok_or_else(bad)?;
        if v < lo || v > hi {
            return Err(format!("{v} is out of range for {}", ty.name()));
        }
        Ok(v)
    };
    Ok(match ty {
        ColumnType::BigInt => Value::BigInt(int(i64::MIN, i64::MAX)?),
        ColumnType::Int => Value::Int(int(i32::MIN.into(), i32::MAX.into())? as i32),
        ColumnType::SmallInt => Value::SmallInt(int(i16::MIN.into(), i16::MAX.into())? as i16),
        ColumnType::TinyInt => Value::TinyInt(int(i8::MIN.into(), i8::MAX.into())? as i8),
        ColumnType::Double => Value::Double(parse_float(j).ok_or_else(bad)?),
        ColumnType::Real => Value::Real(parse_float(j).ok_or_else(bad)? as f32),
        ColumnType::Boolean => Value::Boolean(j.as_bool().ok_or_else(bad)?),
        ColumnType::Text => Value::Text(j.as_str().ok_or_else(bad)?.to_owned()),
        ColumnType::Date => Value::Date(
            j.as_str()
                .and_then(strata::types::parse_date)
                .ok_or_else(|| format!("expected DATE as a \"YYYY-MM-DD\" string, got {j}"))?,
        ),
        ColumnType::Timestamp => Value::Timestamp(
            j.as_str()
                .and_then(strata::types::parse_timestamp)
                .ok_or_else(|| format!("expected TIMESTAMP as a \"YYYY-MM-DD HH:MM:SS[.ffffff]\" string, got {j}"))?,
        ),
        ColumnType::TimestampTz => {
            Value::TimestampTz(j.as_str().and_then(strata::types::parse_timestamptz).ok_or_else(|| {
                format!("expected TIMESTAMPTZ as a \"YYYY-MM-DD HH:MM:SS[.ffffff][+HH[:MM]]\" string, got {j}")
            })?)
        }
        ColumnType::Bytea => Value::Bytea(
            j.as_str()
                .and_then(parse_hex)
                .ok_or_else(|| format!("expected BYTEA as a \"\\\\x\" hex string, got {j}"))?,
        ),
    })
}

/// A full row from a JSON object; absent nullable columns are NULL.
pub fn row_from_json(schema: &Schema, obj: &Map<String, Json>) -> Result<Vec<Value>, String> {
    for k in obj.keys() {
        if schema.column_index(k).is_none() {
            return Err(format!("unknown column `{k}`"));
        }
    }
    schema
        .columns()
        .iter()
        .map(|c| match obj.get(&c.name) {
            Some(j) => from_json(c.ty, j).map_err(|e| format!("column `{}`: {e}", c.name)),
            None => Ok(Value::Null),
        })
        .collect()
}

/// Key values (in key order) from a JSON object naming key columns. With `prefix`, a leading
/// subset of the key columns may be given.
pub fn key_from_json(schema: &Schema, obj: &Map<String, Json>, prefix: bool) -> Result<Vec<Value>, String> {
    let pk = schema.primary_key();
    for k in obj.keys() {
        match schema.column_index(k) {
            None => return Err(format!("unknown column `{k}`")),
            Some(c) if !pk.contains(&c) => return Err(format!("`{k}` is not a primary key column")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for &c in pk {
        let col = &schema.columns()[c];
        match obj.get(&col.name) {
            Some(j) => out.push(from_json(col.ty, j).map_err(|e| format!("key column `{}`: {e}", col.name))?),
            None if prefix => break,
            None => return Err(format!("key column `{}` is missing", col.name)),
        }
    }
    if out.len() != obj.len() {
        return Err("key columns must be given in key order without gaps".into());
    }
    Ok(out)
}

/// A JSON object of named values.
pub fn object(names: &[&str], values: &[Value]) -> Json {
    Json::Object(names.iter().zip(values).map(|(n, v)| ((*n).to_owned(), to_json(v))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_roundtrip_and_bad_values_are_errors() {
        let cases = [
            (ColumnType::BigInt, Value::BigInt(-9)),
            (ColumnType::Int, Value::Int(7)),
            (ColumnType::Double, Value::Double(f64::NAN)),
            (ColumnType::Double, Value::Double(f64::NEG_INFINITY)),
            (ColumnType::Real, Value::Real(1.5)),
            (ColumnType::Boolean, Value::Boolean(true)),
            (ColumnType::Text, Value::Text("héllo".into())),
            (ColumnType::Bytea, Value::Bytea(vec![0, 255, 16])),
            (ColumnType::Int, Value::Null),
        ];
        for (ty, v) in cases {
            assert_eq!(from_json(ty, &to_json(&v)).unwrap(), v);
        }
        assert!(from_json(ColumnType::TinyInt, &Json::from(300)).unwrap_err().contains("out of range"));
        assert!(from_json(ColumnType::Int, &Json::from(1.5)).is_err());
        assert!(from_json(ColumnType::Text, &Json::from(1)).is_err());
        assert!(from_json(ColumnType::Bytea, &Json::from("\\xabc")).is_err());
    }
}
