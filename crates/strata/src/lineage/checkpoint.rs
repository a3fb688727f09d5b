//! Lineage checkpoints (L-Store §5.3): every lineage table's rows as of one sequence number,
//! written to a file so the WAL before that point can go. Recovery loads the checkpoint named
//! by the manifest, rebuilding base records and the primary index, and replays the WAL from
//! there. Format: `docs/format/checkpoint.md`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::LineageTable;
use crate::codec::{put_bytes, put_varint, DecodeError, DecodeResult, Reader};
use crate::error::{Error, Result};
use crate::mvcc::Kind;
use crate::types::row::encode_row;
use crate::vfs::{Fs, WritableFile};
use crate::write::wal::{file_header, frame, read_log, Tail};

/// File magic of a checkpoint.
pub(crate) const CHECKPOINT_MAGIC: [u8; 4] = *b"SLCK";

const TABLE: u8 = 1;
const ROWS: u8 = 2;
const END: u8 = 3;

/// Rows per record.
const ROWS_PER_RECORD: usize = 1024;

/// Writes the rows of `tables` as of `seq` to `file` and syncs it. Reads at `seq` like any
/// snapshot read, so writers and the merge go on meanwhile. Returns the rows written.
pub(crate) fn write(file: &mut dyn WritableFile, tables: &[Arc<LineageTable>], seq: u64) -> Result<u64> {
    file.append(&file_header(CHECKPOINT_MAGIC))?;
    let mut framed = Vec::new();
    let mut payload = Vec::new();
    let mut total = 0u64;
    let flush = |payload: &mut Vec<u8>, framed: &mut Vec<u8>, file: &mut dyn WritableFile| -> Result<()> {
        framed.clear();
        frame(payload, framed);
        payload.clear();
        file.append(framed)
    };
    for t in tables {
        payload.push(TABLE);
        put_varint(&mut payload, u64::from(t.info.id));
        put_varint(&mut payload, seq);
        flush(&mut payload, &mut framed, file)?;
        let types = &t.info.value_types;
        let mut rows = Vec::new();
        let mut n = 0;
        let mut row = Vec::new();
        for i in 0..t.ranges() {
            let Some(r) = t.range(i) else { continue };
            let len = r.len.load(std::sync::atomic::Ordering::Acquire) as usize;
            for o in 0..len {
                let Some(cells) = r.read_row(types, o, seq, None) else { continue };
                put_bytes(&mut rows, r.key(o));
                put_varint(&mut rows, r.start.load(o));
                row.clear();
                encode_row(types, &cells, &mut row);
                put_bytes(&mut rows, &row);
                n += 1;
                if n == ROWS_PER_RECORD {
                    rows_record(&mut payload, t.info.id, n, &rows);
                    flush(&mut payload, &mut framed, file)?;
                    total += n as u64;
                    (n, rows) = (0, Vec::new());
                }
            }
        }
        if n > 0 {
            rows_record(&mut payload, t.info.id, n, &rows);
            flush(&mut payload, &mut framed, file)?;
            total += n as u64;
        }
    }
    payload.push(END);
    put_varint(&mut payload, tables.len() as u64);
    flush(&mut payload, &mut framed, file)?;
    file.sync()?;
    Ok(total)
}

fn rows_record(payload: &mut Vec<u8>, table: u32, n: usize, rows: &[u8]) {
    payload.push(ROWS);
    put_varint(payload, u64::from(table));
    put_varint(payload, n as u64);
    payload.extend_from_slice(rows);
}

/// Loads the checkpoint at `path` into `tables` (empty ones; tables the file names that are not
/// there were dropped since and are skipped). Returns the checkpoint's sequence number.
pub(crate) fn load(fs: &dyn Fs, path: &Path, tables: &HashMap<u32, Arc<LineageTable>>) -> Result<u64> {
    let (records, tail) = read_log(fs, path, CHECKPOINT_MAGIC)?;
    let corrupt = |why: String| Error::corruption(path, 0, why);
    if tail != Tail::Clean {
        return Err(corrupt("checkpoint cut short".into()));
    }
    let mut seq = None;
    let mut ended = false;
    for (i, rec) in records.iter().enumerate() {
        if ended {
            return Err(corrupt(format!("record {i} after the end record")));
        }
        let res: DecodeResult<()> = (|| {
            let mut r = Reader::new(rec);
            match r.u8()? {
                TABLE => {
                    let _id = r.varint()?;
                    let s = r.varint()?;
                    if seq.is_some_and(|x| x != s) {
                        return Err(DecodeError::new("tables checkpointed at different sequence numbers"));
                    }
                    seq = Some(s);
                }
                ROWS => {
                    let id = u32::try_from(r.varint()?).map_err(|_| DecodeError::new("bad table id"))?;
                    let n = r.varint()?;
                    let t = tables.get(&id);
                    for _ in 0..n {
                        let key = r.bytes()?;
                        let start = r.varint()?;
                        let row = r.bytes()?;
                        if let Some(t) = t {
                            if t.contains(key) {
                                return Err(DecodeError::new("a key appears twice"));
                            }
                            t.apply(Kind::Put, key, row, start)?;
                        }
                    }
                }
                END => {
                    let _tables = r.varint()?;
                    ended = true;
                }
                k => return Err(DecodeError::new(format!("unknown checkpoint record kind {k}"))),
            }
            if !r.is_empty() {
                return Err(DecodeError::new("trailing bytes in a record"));
            }
            Ok(())
        })();
        res.map_err(|e| corrupt(format!("record {i}: {}", e.0)))?;
    }
    if !ended {
        return Err(corrupt("checkpoint has no end record".into()));
    }
    Ok(seq.unwrap_or(0))
}
