//! Block framing and the footer.
//!
//! Every block on disk is `body | compression u8 | crc32c(body ‖ compression) u32 LE`, where
//! `body` is the (possibly compressed) block content. The footer is the last 32 bytes:
//! `meta offset u64 | meta size u64 | format version u32 | magic u64 | crc32c(previous 28) u32`.

use std::path::Path;

use crate::codec::{checksum_ok, put_varint, DecodeResult, Reader};
use crate::error::{Error, Result};
use crate::vfs::WritableFile;

/// Identifies strata SST files.
pub(crate) const MAGIC: u64 = 0x5354_5241_5441_5353; // "STRATASS"
pub(crate) const FOOTER_LEN: usize = 32;
pub(crate) const TRAILER_LEN: usize = 5;
/// Decompressed blocks larger than this are rejected as corrupt.
pub(crate) const MAX_BLOCK: usize = 256 << 20;

/// Block compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Stored as is.
    None,
    /// LZ4 block format with the uncompressed size in front (default).
    #[default]
    Lz4,
    /// Zstandard at level 3.
    Zstd,
}

impl Compression {
    pub(crate) fn code(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 1,
            Compression::Zstd => 2,
        }
    }
}

/// Where a block lives in its file: offset and size of the body (without trailer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BlockHandle {
    pub offset: u64,
    pub size: u64,
}

impl BlockHandle {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.offset);
        put_varint(out, self.size);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        Ok(BlockHandle { offset: r.varint()?, size: r.varint()? })
    }

    /// The end of the framed block (body and trailer), unless that is past `u64::MAX`.
    pub(crate) fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.size)?.checked_add(TRAILER_LEN as u64)
    }

    /// Whether the framed block lies within the first `len` bytes of its file.
    pub(crate) fn within(&self, len: u64) -> bool {
        self.end().is_some_and(|end| end <= len)
    }
}

/// Frames `content` for disk: compresses (falling back to none if it does not shrink) and adds
/// the trailer.
/// A block is stored compressed only when that saves at least `1 / MIN_SAVING` of its bytes:
/// below that, every read would pay the decompression for little room. Blocks of nearly random
/// bytes (YCSB's fields, random integers) otherwise came out a few percent smaller and LZ4 took a
/// tenth of a point read's time on a cache miss. RocksDB keeps the same bound.
const MIN_SAVING: usize = 8;

pub(crate) fn frame_block(content: &[u8], compression: Compression, out: &mut Vec<u8>) {
    let start = out.len();
    let compressed = match compression {
        Compression::None => None,
        Compression::Lz4 => Some(lz4_flex::block::compress_prepend_size(content)),
        Compression::Zstd => zstd::bulk::compress(content, 3).ok(),
    };
    let code = match compressed {
        Some(c) if c.len() <= content.len() - content.len() / MIN_SAVING => {
            out.extend_from_slice(&c);
            compression.code()
        }
        _ => {
            out.extend_from_slice(content);
            Compression::None.code()
        }
    };
    out.push(code);
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// The most bytes [`frame_block`] adds for `content_len` bytes of content: compressed output is
/// kept only when smaller.
fn max_framed_len(content_len: usize) -> usize {
    content_len + TRAILER_LEN
}

/// Checks a block read from disk (`raw` = body + trailer) against its checksum: its body and
/// compression code.
fn check_frame<'a>(path: &Path, offset: u64, raw: &'a [u8]) -> Result<(&'a [u8], u8)> {
    let bad = |why: &str| Error::corruption(path, offset, why.to_owned());
    if raw.len() < TRAILER_LEN {
        return Err(bad("block shorter than its trailer"));
    }
    let (body_code, crc) = raw.split_at(raw.len() - 4);
    let want = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if !checksum_ok(body_code, want) {
        return Err(bad("block checksum mismatch"));
    }
    let (body, code) = body_code.split_at(body_code.len() - 1);
    Ok((body, code[0]))
}

/// Decompresses a checked block body stored with compression `code` (not 0).
fn decompress(path: &Path, offset: u64, body: &[u8], code: u8) -> Result<Vec<u8>> {
    let bad = |why: &str| Error::corruption(path, offset, why.to_owned());
    match code {
        1 => {
            // The size in front is allocated at once, so it must be one the body can expand
            // to: LZ4 expands a byte to at most 255.
            if body.len() >= 4 {
                let n = u32::from_le_bytes([body[0], body[1], body[2], body[3]]) as usize;
                if n > MAX_BLOCK || n > body.len() * 255 {
                    return Err(bad("block too large"));
                }
            }
            lz4_flex::block::decompress_size_prepended(body).map_err(|e| bad(&format!("lz4: {e}")))
        }
        2 => {
            // strata writes single zstd frames that carry their content size; the buffer is
            // allocated at that size (not at the largest a block may have).
            let n = match zstd::zstd_safe::get_frame_content_size(body) {
                Ok(Some(n)) if n <= MAX_BLOCK as u64 => n as usize,
                Ok(Some(_)) => return Err(bad("block too large")),
                _ => return Err(bad("zstd: no frame content size")),
            };
            let out = zstd::bulk::decompress(body, n).map_err(|e| bad(&format!("zstd: {e}")))?;
            if out.len() != n {
                return Err(bad("zstd: frame shorter than its content size"));
            }
            Ok(out)
        }
        c => Err(bad(&format!("unknown compression {c}"))),
    }
}

/// Checks and unframes a block read from disk (`raw` = body + trailer): its body, decompressed
/// or copied out.
pub(crate) fn unframe_slice(path: &Path, offset: u64, raw: &[u8]) -> Result<Vec<u8>> {
    match check_frame(path, offset, raw)? {
        (body, 0) => Ok(body.to_vec()),
        (body, c) => decompress(path, offset, body, c),
    }
}

/// Bytes of framed blocks gathered before they are appended to the file: on a disk, one
/// positioning per mebibyte written instead of one per block when reads interleave.
const WRITE_BUFFER: usize = 1 << 20;

/// Appends framed blocks to a new SST file, [`WRITE_BUFFER`] bytes at a time, and ends it with
/// the footer (the file builders of every format write through it).
pub(crate) struct BlockWriter {
    file: Box<dyn WritableFile>,
    offset: u64,
    buf: Vec<u8>,
}

impl BlockWriter {
    pub(crate) fn new(file: Box<dyn WritableFile>) -> Self {
        BlockWriter { file, offset: 0, buf: Vec::with_capacity(WRITE_BUFFER) }
    }

    /// Bytes written so far (buffered ones included).
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Frames `content` into the buffer, which goes to the file once it holds
    /// [`WRITE_BUFFER`] bytes; returns where the block lives.
    pub(crate) fn write_block(&mut self, content: &[u8], compression: Compression) -> Result<BlockHandle> {
        // A block that would not fit sends the buffer first, so the buffer is allocated once, at
        // its full size, and never grows (growing copies it and takes fresh pages each time).
        if !self.buf.is_empty() && self.buf.len() + max_framed_len(content.len()) > self.buf.capacity() {
            self.file.append(&self.buf)?;
            self.buf.clear();
        }
        let start = self.buf.len();
        frame_block(content, compression, &mut self.buf);
        let framed = self.buf.len() - start;
        let handle = BlockHandle { offset: self.offset, size: (framed - TRAILER_LEN) as u64 };
        self.offset += framed as u64;
        if self.buf.len() >= WRITE_BUFFER {
            self.file.append(&self.buf)?;
            self.buf.clear();
        }
        Ok(handle)
    }

    /// Writes the footer of a file of format `version` pointing at the meta block, then syncs
    /// the file. Returns the file's size.
    pub(crate) fn finish(mut self, meta: BlockHandle, version: u32) -> Result<u64> {
        encode_footer(meta, version, &mut self.buf);
        self.offset += FOOTER_LEN as u64;
        self.file.append(&self.buf)?;
        self.file.sync()?;
        Ok(self.offset)
    }
}

/// Encodes the footer of a file of format `version` pointing at the meta block.
fn encode_footer(meta: BlockHandle, version: u32, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&meta.offset.to_le_bytes());
    out.extend_from_slice(&meta.size.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Decodes and checks the footer, returning the meta block handle and the file's format version.
pub(crate) fn decode_footer(path: &Path, file_len: u64, b: &[u8]) -> Result<(BlockHandle, u32)> {
    let off = file_len.saturating_sub(FOOTER_LEN as u64);
    let bad = |why: String| Error::corruption(path, off, why);
    if b.len() != FOOTER_LEN {
        return Err(bad("file too short for a footer".into()));
    }
    let crc = u32::from_le_bytes([b[28], b[29], b[30], b[31]]);
    if !checksum_ok(&b[..28], crc) {
        return Err(bad("footer checksum mismatch".into()));
    }
    let mut r = Reader::new(b);
    let (offset, size, version, magic) =
        (|| -> DecodeResult<_> { Ok((r.u64()?, r.u64()?, r.u32()?, r.u64()?)) })().map_err(|e| bad(e.0))?;
    if magic != MAGIC {
        return Err(bad("not a strata SST (bad magic)".into()));
    }
    let newest = super::FORMAT_VERSION.max(super::rowgroup::ROW_GROUP_FORMAT);
    if !(super::OLDEST_READABLE_FORMAT..=newest).contains(&version) {
        return Err(bad(format!(
            "unsupported SST format version {version} (this build reads versions {} to {newest})",
            super::OLDEST_READABLE_FORMAT,
        )));
    }
    let meta = BlockHandle { offset, size };
    if !meta.within(file_len.saturating_sub(FOOTER_LEN as u64)) {
        return Err(bad("meta block handle out of range".into()));
    }
    Ok((meta, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `row_group_file` fuzz target: a footer (with a valid checksum) whose meta
    /// block handle ends past `u64::MAX` overflowed the range check instead of being corrupt.
    #[test]
    fn a_meta_handle_ending_past_u64_max_is_corruption() {
        for (offset, size) in [(u64::MAX - 40, 33), (0, u64::MAX), (u64::MAX, 0), (10, 100)] {
            let mut footer = Vec::new();
            encode_footer(BlockHandle { offset, size }, super::super::FORMAT_VERSION, &mut footer);
            let err = decode_footer(Path::new("f.sst"), 64, &footer).expect_err("out of range");
            assert!(err.is_corruption() && err.to_string().contains("out of range"), "{err}");
        }
    }

    /// Compressed sizes the body cannot reach are refused before anything is allocated: LZ4's
    /// size in front beyond 255 times the body, a zstd frame without its content size.
    #[test]
    fn declared_sizes_out_of_proportion_are_corruption() {
        let mut lz4 = (64u32 << 20).to_le_bytes().to_vec();
        lz4.extend([0x1F, 0, 1, 0]);
        let err = decompress(Path::new("f.sst"), 0, &lz4, 1).expect_err("too large");
        assert!(err.to_string().contains("too large"), "{err}");
        let zstd = zstd::bulk::compress(&[7u8; 1000], 3).expect("compress");
        assert_eq!(decompress(Path::new("f.sst"), 0, &zstd, 2).expect("a valid frame"), vec![7u8; 1000]);
        let err = decompress(Path::new("f.sst"), 0, &zstd[..3], 2).expect_err("no frame header");
        assert!(err.to_string().contains("zstd"), "{err}");
    }

    /// A block is stored compressed only when that saves an eighth of it: records of random
    /// letters (which LZ4 finds no repeats in) behind a few zero bytes each, as YCSB's fields
    /// are, shrink by less and stay raw; repeated content does not.
    #[test]
    fn blocks_compress_only_when_it_saves_an_eighth() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut letters = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b'a' + (x % 26) as u8
        };
        let records: Vec<u8> = (0..160)
            .flat_map(|_| [0u8; 8].into_iter().chain((0..92).map(|_| letters())).collect::<Vec<u8>>())
            .collect();
        let repeated: Vec<u8> = records[..100].repeat(160);
        // LZ4 does shrink the records, by less than an eighth.
        let lz4 = lz4_flex::block::compress_prepend_size(&records).len();
        assert!(lz4 < records.len() && lz4 > records.len() - records.len() / 8, "{lz4} of {}", records.len());
        for (content, code) in [(&records, 0u8), (&repeated, Compression::Lz4.code())] {
            let mut out = Vec::new();
            frame_block(content, Compression::Lz4, &mut out);
            assert_eq!(out[out.len() - TRAILER_LEN], code);
            assert_eq!(&unframe_slice(Path::new("f"), 0, &out).unwrap(), content);
        }
    }

    #[test]
    fn frame_roundtrip_all_compressions_and_detects_flips() {
        let content: Vec<u8> = (0..4000u32).flat_map(|i| (i % 17).to_le_bytes()).collect();
        for c in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let mut out = Vec::new();
            frame_block(&content, c, &mut out);
            assert_eq!(unframe_slice(Path::new("f"), 0, &out).unwrap(), content);
            for i in (0..out.len()).step_by(7) {
                let mut bad = out.clone();
                bad[i] ^= 0x10;
                assert!(unframe_slice(Path::new("f"), 0, &bad).is_err());
            }
        }
    }
}
