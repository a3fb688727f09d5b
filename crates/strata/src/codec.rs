//! Little helpers shared by every on-disk encoding: varints, fixed-width integers and a bounds-checked
//! reader whose failures become [`Error::Corruption`](crate::Error::Corruption) at the file boundary.

/// Appends `v` as an unsigned LEB128 varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a varint length followed by the bytes.
pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A decoding failure inside a buffer; the caller adds the file and offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError(pub String);

impl DecodeError {
    pub(crate) fn new(msg: impl Into<String>) -> Self {
        DecodeError(msg.into())
    }
}

pub(crate) type DecodeResult<T> = std::result::Result<T, DecodeError>;

/// Whether `data`'s CRC-32C is `stored`. Every checksum of strata's files is checked here, so
/// that fuzzing ([`crate::fuzz`]) can accept any checksum on its own thread and reach the decoders
/// behind them with mutated input.
pub(crate) fn checksum_ok(data: &[u8], stored: u32) -> bool {
    crc32c::crc32c(data) == stored || UNCHECKED.with(std::cell::Cell::get)
}

thread_local! {
    /// Set while a fuzz target runs on this thread ([`crate::fuzz::Unchecked`]).
    pub(crate) static UNCHECKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A cursor over a byte slice where every read is bounds-checked.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos.min(self.buf.len())..]
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: usize) -> DecodeResult<&'a [u8]> {
        if self.remaining() < n {
            return Err(DecodeError::new(format!("need {n} bytes at {}, only {} left", self.pos, self.remaining())));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn u8(&mut self) -> DecodeResult<u8> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> DecodeResult<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> DecodeResult<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> DecodeResult<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    #[inline]
    pub(crate) fn varint(&mut self) -> DecodeResult<u64> {
        // Most varints in blocks (key lengths, sequence-number offsets) are one byte.
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        self.varint_slow()
    }

    fn varint_slow(&mut self) -> DecodeResult<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(DecodeError::new("varint longer than 10 bytes"))
    }

    /// A varint that must fit a `usize` no larger than `limit` (guards allocations on bad input).
    pub(crate) fn len(&mut self, limit: usize) -> DecodeResult<usize> {
        let v = self.varint()?;
        if v > limit as u64 {
            return Err(DecodeError::new(format!("length {v} exceeds limit {limit}")));
        }
        Ok(v as usize)
    }

    pub(crate) fn bytes(&mut self) -> DecodeResult<&'a [u8]> {
        let n = self.len(self.remaining())?;
        self.take(n)
    }

    pub(crate) fn string(&mut self) -> DecodeResult<String> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| DecodeError::new("invalid utf-8 in string"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_roundtrip_and_truncation() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(Reader::new(&b).varint().unwrap(), v);
            assert!(Reader::new(&b[..b.len() - 1]).varint().is_err());
        }
    }
}
