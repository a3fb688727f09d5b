//! The write-ahead log: one per database, shared by all tables, a sequence of checksummed records
//! (each the payload of one write batch). See `docs/format/wal.md`.
//!
//! A log file starts with an 8-byte header, `magic (4 bytes) | format version u32 LE`, then holds
//! records framed as `len u32 LE | crc32c(len bytes) u32 LE | crc32c(payload) u32 LE | payload`.
//! The manifest uses the same framing under its own magic.
//! The header checksum tells a damaged length apart from a record cut short by a crash: only a
//! record that runs past the end of the file is treated as a torn tail.
//!
//! The writer is owned by the commit leader (one thread at a time).

use std::path::{Path, PathBuf};

use crate::codec::checksum_ok;
use crate::error::{Error, Result};
use crate::vfs::{Fs, WritableFile};

const HEADER: usize = 12;

/// Version of the log formats (WAL, manifest and lineage checkpoint) written by this build: 2
/// added commit times to WAL batches, the history records to the manifest and the history to
/// checkpoints; 3 added the tier records to the manifest, 4 the batch-range records (WAL and
/// checkpoints are unchanged by both).
pub const LOG_FORMAT_VERSION: u32 = 4;
/// Magic of WAL files.
pub(crate) const WAL_MAGIC: [u8; 4] = *b"SWAL";
/// Magic of manifest files.
pub(crate) const MANIFEST_MAGIC: [u8; 4] = *b"SMAN";
const FILE_HEADER: usize = 8;

/// The header every log file starts with.
pub(crate) fn file_header(magic: [u8; 4]) -> [u8; FILE_HEADER] {
    let mut h = [0u8; FILE_HEADER];
    h[..4].copy_from_slice(&magic);
    h[4..].copy_from_slice(&LOG_FORMAT_VERSION.to_le_bytes());
    h
}

/// Upper bound on one record, so a damaged length cannot ask for gigabytes.
pub(crate) const MAX_RECORD: usize = 1 << 30;

/// Appends one framed record to `out`.
pub(crate) fn frame(payload: &[u8], out: &mut Vec<u8>) {
    let len = (payload.len() as u32).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc32c::crc32c(&len).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// An open log being appended to.
pub(crate) struct WalWriter {
    file: Box<dyn WritableFile>,
}

impl WalWriter {
    pub(crate) fn create(fs: &dyn Fs, path: &Path) -> Result<Self> {
        let mut file = fs.create(path)?;
        file.append(&file_header(WAL_MAGIC))?;
        Ok(WalWriter { file })
    }

    /// Appends already-framed records.
    pub(crate) fn append(&mut self, framed: &[u8]) -> Result<()> {
        self.file.append(framed)
    }

    pub(crate) fn sync(&mut self) -> Result<()> {
        self.file.sync()
    }
}

/// How a log ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Every byte belonged to a whole, valid record.
    Clean,
    /// The last record was cut short at this offset (a write the crash interrupted); it and
    /// anything after it are ignored.
    Truncated(u64),
}

/// Reads every record of a log whose header carries `magic`. A record (or header) cut off by
/// the end of the file ends the log ([`Tail::Truncated`]); any other damage is
/// [`Error::Corruption`] naming the file and offset.
pub(crate) fn read_log(fs: &dyn Fs, path: &Path, magic: [u8; 4]) -> Result<(Vec<Vec<u8>>, Tail)> {
    let data = fs.read_all(path)?;
    let corrupt = |off: usize, why: &str| Error::corruption(PathBuf::from(path), off as u64, why.to_owned());
    let mut out = Vec::new();
    if data.len() < FILE_HEADER {
        return Ok((out, if data.is_empty() { Tail::Clean } else { Tail::Truncated(0) }));
    }
    if data[..4] != magic {
        return Err(corrupt(0, "bad magic in log header"));
    }
    let version = u32::from_le_bytes([data[4], data[5], data[6], data[7]]);
    // Version 1 files (no commit times in WAL batches, no history in manifests and
    // checkpoints) and version 2 files (no tiers) read as they are.
    if !(1..=LOG_FORMAT_VERSION).contains(&version) {
        return Err(corrupt(4, &format!("unsupported log format version {version}")));
    }
    let mut pos = FILE_HEADER;
    while pos < data.len() {
        if data.len() - pos < HEADER {
            return Ok((out, Tail::Truncated(pos as u64)));
        }
        let h = &data[pos..pos + HEADER];
        let len_bytes = [h[0], h[1], h[2], h[3]];
        let hcrc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        let pcrc = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        if !checksum_ok(&len_bytes, hcrc) {
            return Err(corrupt(pos, "record header checksum mismatch"));
        }
        let len = u32::from_le_bytes(len_bytes) as usize;
        if len > MAX_RECORD {
            return Err(corrupt(pos, "record length out of range"));
        }
        let start = pos + HEADER;
        if data.len() - start < len {
            return Ok((out, Tail::Truncated(pos as u64)));
        }
        let payload = &data[start..start + len];
        if !checksum_ok(payload, pcrc) {
            return Err(corrupt(pos, "record checksum mismatch"));
        }
        out.push(payload.to_vec());
        pos = start + len;
    }
    Ok((out, Tail::Clean))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::FaultFs;

    fn write(fs: &FaultFs, p: &Path, recs: &[&[u8]]) {
        let mut w = WalWriter::create(fs, p).unwrap();
        let mut buf = Vec::new();
        for r in recs {
            frame(r, &mut buf);
        }
        w.append(&buf).unwrap();
    }

    #[test]
    fn torn_tail_is_truncation_and_flips_are_corruption() {
        let fs = FaultFs::new();
        let p = Path::new("/w/000001.log");
        write(&fs, p, &[b"one", b"two", b"three"]);
        let (recs, tail) = read_log(&fs, p, WAL_MAGIC).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(tail, Tail::Clean);
        let full = fs.read_all(p).unwrap();
        for cut in 1..full.len() {
            let q = Path::new("/w/cut.log");
            let mut w = fs.create(q).unwrap();
            w.append(&full[..cut]).unwrap();
            let (recs, tail) = read_log(&fs, q, WAL_MAGIC).unwrap();
            assert!(recs.len() < 3);
            let boundary = [8, 23, 38].contains(&cut);
            assert_eq!(tail == Tail::Clean, boundary, "cut {cut}");
        }
        for off in 0..full.len() as u64 {
            let q = Path::new("/w/flip.log");
            let mut w = fs.create(q).unwrap();
            w.append(&full).unwrap();
            fs.flip_bit(q, off, 3).unwrap();
            let err = read_log(&fs, q, WAL_MAGIC).expect_err("every flipped bit is detected");
            assert!(err.is_corruption() && err.to_string().contains("flip.log"), "{err}");
        }
    }
}
