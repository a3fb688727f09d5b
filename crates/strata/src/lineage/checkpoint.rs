//! Lineage checkpoints (L-Store §5.3): every lineage table's rows as of one sequence number,
//! written to a file so the WAL before that point can go, plus the changes within the history
//! retention window before it (so reads as of a past point work after a restart). Recovery
//! loads the checkpoint named by the manifest, rebuilding base records, tail records of the
//! history and the primary index, and replays the WAL from there. Format:
//! `docs/format/checkpoint.md`.

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
const HISTORY: u8 = 4;

/// Rows per record.
const ROWS_PER_RECORD: usize = 1024;

/// Writes the rows of `tables` as of `from`, then every change after it up to `seq`, to `file`
/// and syncs it (`from == seq`: the rows at `seq` only). Reads like any snapshot read, so
/// writers and the merge go on meanwhile; the caller holds a snapshot at `from` or older, so
/// no range is rebased past the history it reads. Returns the rows written.
pub(crate) fn write(file: &mut dyn WritableFile, tables: &[Arc<LineageTable>], from: u64, seq: u64) -> Result<u64> {
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
        put_varint(&mut payload, from);
        flush(&mut payload, &mut framed, file)?;
        let types = &t.info.value_types;
        let mut rows = Vec::new();
        let mut n = 0;
        let mut row = Vec::new();
        let view = t.view();
        for r in view.0.iter() {
            let len = r.len.load(std::sync::atomic::Ordering::Acquire) as usize;
            for o in 0..len {
                let Some(cells) = r.read_row(types, o, from, None) else { continue };
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
        if from < seq {
            let mut changes = Vec::new();
            for r in view.0.iter() {
                changes.extend(r.history(types, from, seq).into_iter().map(|(s, o, cells)| (s, r.clone(), o, cells)));
            }
            changes.sort_unstable_by_key(|c| c.0);
            for chunk in changes.chunks(ROWS_PER_RECORD) {
                payload.push(HISTORY);
                put_varint(&mut payload, u64::from(t.info.id));
                put_varint(&mut payload, chunk.len() as u64);
                for (s, r, o, cells) in chunk {
                    put_varint(&mut payload, *s);
                    put_bytes(&mut payload, r.key(*o));
                    row.clear();
                    match cells {
                        Some(cells) => {
                            payload.push(Kind::Put as u8);
                            encode_row(types, cells, &mut row);
                        }
                        None => payload.push(Kind::Delete as u8),
                    }
                    put_bytes(&mut payload, &row);
                }
                flush(&mut payload, &mut framed, file)?;
            }
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
/// there were dropped since and are skipped). Returns where its history starts: reads as of
/// earlier sequence numbers cannot be answered.
pub(crate) fn load(fs: &dyn Fs, path: &Path, tables: &HashMap<u32, Arc<LineageTable>>) -> Result<u64> {
    let (records, tail) = read_log(fs, path, CHECKPOINT_MAGIC)?;
    let corrupt = |why: String| Error::corruption(path, 0, why);
    if tail != Tail::Clean {
        return Err(corrupt("checkpoint cut short".into()));
    }
    let mut seq = None;
    let mut history_from = None;
    let mut ended = false;
    // The newest change applied per table, so history comes in order.
    let mut applied: HashMap<u32, u64> = HashMap::new();
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
                    // Format version 1 had no history: it starts at the checkpoint.
                    let from = if r.is_empty() { s } else { r.varint()? };
                    if seq.is_some_and(|x| x != s) || history_from.is_some_and(|x| x != from) {
                        return Err(DecodeError::new("tables checkpointed at different sequence numbers"));
                    }
                    if from > s {
                        return Err(DecodeError::new("history starts after the checkpoint"));
                    }
                    (seq, history_from) = (Some(s), Some(from));
                }
                HISTORY => {
                    let id = u32::try_from(r.varint()?).map_err(|_| DecodeError::new("bad table id"))?;
                    let n = r.varint()?;
                    let t = tables.get(&id);
                    let (Some(from), Some(to)) = (history_from, seq) else {
                        return Err(DecodeError::new("history before any table record"));
                    };
                    for _ in 0..n {
                        let s = r.varint()?;
                        let key = r.bytes()?;
                        let kind = match r.u8()? {
                            k if k == Kind::Put as u8 => Kind::Put,
                            k if k == Kind::Delete as u8 => Kind::Delete,
                            k => return Err(DecodeError::new(format!("bad change kind {k}"))),
                        };
                        let row = r.bytes()?;
                        let last = applied.entry(id).or_insert(from);
                        if s <= *last || s > to {
                            return Err(DecodeError::new("history out of order or outside the checkpoint"));
                        }
                        *last = s;
                        if let Some(t) = t {
                            t.apply(kind, key, row, s)?;
                        }
                    }
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
    Ok(history_from.unwrap_or(0))
}
