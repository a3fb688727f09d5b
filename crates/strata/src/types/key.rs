//! The order-preserving ("memcomparable") primary-key encoding.
//!
//! A key is the concatenation of its columns' encodings; comparing two encoded keys byte by byte
//! gives the same order as comparing the values column by column. Every column encoding is
//! self-delimiting, so no encoded key of a table is a proper prefix of another — which lets the
//! memtable append a sequence number to the key and still compare plain bytes.
//!
//! - integers, DATE (days) and timestamps (microseconds): big-endian two's complement with the sign bit flipped;
//! - floats: big-endian IEEE bits, all bits flipped for negatives, sign bit flipped otherwise;
//! - BOOLEAN: one byte 0 or 1;
//! - TEXT / BYTEA: bytes with `00` escaped as `00 FF`, terminated by `00 01`.

use super::{ColumnType, Value};
use crate::codec::{DecodeError, DecodeResult};

/// Appends the memcomparable encoding of a non-null value of type `ty`. The caller has checked
/// the type; a mismatched value is encoded as if it were the zero of `ty`. (Public so that
/// layers above can build order-preserving keys of their own, such as SQL's index entries.)
pub fn encode_value(out: &mut Vec<u8>, ty: ColumnType, v: &Value) {
    match (ty, v) {
        (ColumnType::BigInt, Value::BigInt(x))
        | (ColumnType::Timestamp, Value::Timestamp(x))
        | (ColumnType::TimestampTz, Value::TimestampTz(x)) => {
            out.extend_from_slice(&((*x as u64) ^ (1 << 63)).to_be_bytes())
        }
        (ColumnType::Int, Value::Int(x)) | (ColumnType::Date, Value::Date(x)) => {
            out.extend_from_slice(&((*x as u32) ^ (1 << 31)).to_be_bytes())
        }
        (ColumnType::SmallInt, Value::SmallInt(x)) => out.extend_from_slice(&((*x as u16) ^ (1 << 15)).to_be_bytes()),
        (ColumnType::TinyInt, Value::TinyInt(x)) => out.push((*x as u8) ^ 0x80),
        (ColumnType::Double, Value::Double(x)) => {
            let b = x.to_bits();
            let e = if b >> 63 == 1 { !b } else { b ^ (1 << 63) };
            out.extend_from_slice(&e.to_be_bytes());
        }
        (ColumnType::Real, Value::Real(x)) => {
            let b = x.to_bits();
            let e = if b >> 31 == 1 { !b } else { b ^ (1 << 31) };
            out.extend_from_slice(&e.to_be_bytes());
        }
        (ColumnType::Boolean, Value::Boolean(x)) => out.push(u8::from(*x)),
        (ColumnType::Text, Value::Text(s)) => encode_bytes(out, s.as_bytes()),
        (ColumnType::Bytea, Value::Bytea(b)) => encode_bytes(out, b),
        (ty, _) => {
            // Unreachable for checked input; keep the encoding well-formed anyway.
            match ty.fixed_width() {
                Some(w) => out.extend(std::iter::repeat_n(0u8, w)),
                None => encode_bytes(out, &[]),
            }
        }
    }
}

fn encode_bytes(out: &mut Vec<u8>, b: &[u8]) {
    for &c in b {
        out.push(c);
        if c == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 1]);
}

/// Encodes a whole key from its column values in key order.
pub(crate) fn encode_key(types: &[ColumnType], values: &[Value]) -> Vec<u8> {
    let mut out = Vec::with_capacity(types.len() * 8);
    for (ty, v) in types.iter().zip(values) {
        encode_value(&mut out, *ty, v);
    }
    out
}

/// Decodes a whole key into its column values.
pub(crate) fn decode_key(types: &[ColumnType], mut b: &[u8]) -> DecodeResult<Vec<Value>> {
    let mut out = Vec::with_capacity(types.len());
    for &ty in types {
        let (v, used) = decode_value(ty, b)?;
        out.push(v);
        b = &b[used..];
    }
    if !b.is_empty() {
        return Err(DecodeError::new("trailing bytes after key"));
    }
    Ok(out)
}

pub(crate) fn decode_value(ty: ColumnType, b: &[u8]) -> DecodeResult<(Value, usize)> {
    let fixed = |w: usize| -> DecodeResult<&[u8]> { b.get(..w).ok_or_else(|| DecodeError::new("key too short")) };
    let v = match ty {
        ColumnType::BigInt => {
            let mut a = [0u8; 8];
            a.copy_from_slice(fixed(8)?);
            (Value::BigInt((u64::from_be_bytes(a) ^ (1 << 63)) as i64), 8)
        }
        ColumnType::Timestamp | ColumnType::TimestampTz => {
            let mut a = [0u8; 8];
            a.copy_from_slice(fixed(8)?);
            let micros = (u64::from_be_bytes(a) ^ (1 << 63)) as i64;
            let v = if ty == ColumnType::Timestamp { Value::Timestamp(micros) } else { Value::TimestampTz(micros) };
            (v, 8)
        }
        ColumnType::Int => {
            let mut a = [0u8; 4];
            a.copy_from_slice(fixed(4)?);
            (Value::Int((u32::from_be_bytes(a) ^ (1 << 31)) as i32), 4)
        }
        ColumnType::Date => {
            let mut a = [0u8; 4];
            a.copy_from_slice(fixed(4)?);
            (Value::Date((u32::from_be_bytes(a) ^ (1 << 31)) as i32), 4)
        }
        ColumnType::SmallInt => {
            let mut a = [0u8; 2];
            a.copy_from_slice(fixed(2)?);
            (Value::SmallInt((u16::from_be_bytes(a) ^ (1 << 15)) as i16), 2)
        }
        ColumnType::TinyInt => (Value::TinyInt((fixed(1)?[0] ^ 0x80) as i8), 1),
        ColumnType::Boolean => (Value::Boolean(fixed(1)?[0] != 0), 1),
        ColumnType::Double => {
            let mut a = [0u8; 8];
            a.copy_from_slice(fixed(8)?);
            let e = u64::from_be_bytes(a);
            let bits = if e >> 63 == 1 { e ^ (1 << 63) } else { !e };
            (Value::Double(f64::from_bits(bits)), 8)
        }
        ColumnType::Real => {
            let mut a = [0u8; 4];
            a.copy_from_slice(fixed(4)?);
            let e = u32::from_be_bytes(a);
            let bits = if e >> 31 == 1 { e ^ (1 << 31) } else { !e };
            (Value::Real(f32::from_bits(bits)), 4)
        }
        ColumnType::Text | ColumnType::Bytea => {
            let mut raw = Vec::new();
            let mut i = 0;
            loop {
                let c = *b.get(i).ok_or_else(|| DecodeError::new("unterminated key string"))?;
                if c == 0 {
                    match b.get(i + 1) {
                        Some(0xFF) => raw.push(0),
                        Some(1) => break,
                        _ => return Err(DecodeError::new("bad escape in key string")),
                    }
                    i += 2;
                } else {
                    raw.push(c);
                    i += 1;
                }
            }
            let v = Value::from_var(ty, &raw).ok_or_else(|| DecodeError::new("invalid utf-8 in key"))?;
            (v, i + 2)
        }
    };
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn enc(types: &[ColumnType], v: &[Value]) -> Vec<u8> {
        encode_key(types, v)
    }

    #[test]
    fn integer_and_float_order_is_preserved() {
        let ints = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for w in ints.windows(2) {
            assert!(enc(&[ColumnType::BigInt], &[w[0].into()]) < enc(&[ColumnType::BigInt], &[w[1].into()]));
        }
        let fl = [f64::NEG_INFINITY, -2.5, -0.0, 0.0, 1e-300, 3.0, f64::INFINITY];
        for w in fl.windows(2) {
            assert!(enc(&[ColumnType::Double], &[w[0].into()]) < enc(&[ColumnType::Double], &[w[1].into()]));
        }
    }

    #[test]
    fn composite_keys_sort_like_tuples_and_roundtrip() {
        let seed = crate::test_seeds::seed();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let types = [ColumnType::Text, ColumnType::Int, ColumnType::Bytea];
        let mut keys = Vec::new();
        for _ in 0..2000 {
            let s: String = (0..rng.gen_range(0..4)).map(|_| ['a', 'b', '\0'][rng.gen_range(0..3)]).collect();
            let b: Vec<u8> = (0..rng.gen_range(0..3)).map(|_| [0u8, 1, 255][rng.gen_range(0..3)]).collect();
            keys.push((s, rng.gen_range(-3..3), b));
        }
        for w in keys.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            let ea = enc(&types, &[a.0.clone().into(), Value::Int(a.1), a.2.clone().into()]);
            let eb = enc(&types, &[b.0.clone().into(), Value::Int(b.1), b.2.clone().into()]);
            assert_eq!(a.cmp(b), ea.cmp(&eb), "seed {seed}: {a:?} vs {b:?}");
            let back = decode_key(&types, &ea).unwrap();
            assert_eq!(back, vec![Value::Text(a.0.clone()), Value::Int(a.1), Value::Bytea(a.2.clone())], "seed {seed}");
        }
    }

    #[test]
    fn bad_keys_are_errors() {
        assert!(decode_key(&[ColumnType::BigInt], &[1, 2]).is_err());
        assert!(decode_key(&[ColumnType::Text], &[b'a', 0, 7]).is_err());
        assert!(decode_key(&[ColumnType::TinyInt], &[1, 2]).is_err());
    }
}
