//! [`WriteBatch`]: row operations on one or more tables, applied atomically with consecutive
//! sequence numbers, and their encoding inside a WAL record.
//!
//! WAL payload of one batch:
//! ```text
//! first_seq u64 LE | count u32 LE | count × op
//! op := kind u8 | table_id varint | key (varint len + bytes) | row (varint len + bytes; empty for Delete)
//! ```

use crate::codec::{put_bytes, put_varint, DecodeError, DecodeResult, Reader};
use crate::error::Result;
use crate::mvcc::Kind;

/// Set in a WAL batch's operation count when the commit time follows it (a batch never holds
/// 2^31 operations).
const TIMED: u32 = 1 << 31;

/// One encoded operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchOp {
    pub table_id: u32,
    pub kind: Kind,
    pub key: Vec<u8>,
    pub row: Vec<u8>,
}

/// Writes to apply atomically: all or none survive a crash, and readers see all or none.
///
/// ```
/// # use strata::*;
/// # let dir = std::env::temp_dir().join(format!("strata-doc-batch-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// let db = Db::open(&dir, Options::default())?;
/// let schema = Schema::new(vec![Column::new("id", ColumnType::BigInt), Column::new("v", ColumnType::Int)], &["id"])?;
/// let t = db.create_table("t", schema, TableOptions::default())?;
/// let mut b = WriteBatch::new();
/// b.insert(&t, &[Value::BigInt(1), Value::Int(10)])?;
/// b.delete(&t, &[Value::BigInt(2)])?;
/// db.write(b, &WriteOptions::default())?;
/// # drop(db); std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), strata::Error>(())
/// ```
#[derive(Debug, Default, Clone)]
pub struct WriteBatch {
    pub(crate) ops: Vec<BatchOp>,
    pub(crate) bytes: usize,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The rows the batch writes, in its order: each as the id of its table
    /// ([`TableInfo::id`](crate::TableInfo::id)) and its encoded primary key. A replicated log checks
    /// them against the rows written since a transaction's snapshot (see
    /// [`Transaction::into_batch`](crate::Transaction::into_batch)).
    pub fn rows(&self) -> impl Iterator<Item = (u32, &[u8])> + '_ {
        self.ops.iter().map(|op| (op.table_id, op.key.as_slice()))
    }

    pub(crate) fn push(&mut self, op: BatchOp) {
        self.bytes += op.key.len() + op.row.len() + 16;
        self.ops.push(op);
    }

    /// The batch as a WAL payload, for a replica to rebuild with [`WriteBatch::from_payload`] and
    /// apply with [`Db::apply_replicated`](crate::Db::apply_replicated) (the sequence numbers and
    /// commit time in it are left zero: the applying database gives them).
    pub fn payload(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes + 16);
        self.encode(0, 0, &mut out);
        out
    }

    /// The batch a [`WriteBatch::payload`] holds, for a database whose tables have the ids of the
    /// one it was made on (a replica's: see [`Db::apply_replicated`](crate::Db::apply_replicated)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when the bytes do not decode.
    pub fn from_payload(payload: &[u8]) -> Result<WriteBatch> {
        let (_, _, ops) = Self::decode(payload)
            .map_err(|e| crate::Error::InvalidArgument(format!("a replicated write batch does not decode: {}", e.0)))?;
        let mut batch = WriteBatch::new();
        for op in ops {
            batch.push(op);
        }
        Ok(batch)
    }

    /// Encodes the batch, committed at `commit_ms` (Unix milliseconds), as a WAL payload whose
    /// operations get `first_seq`, `first_seq + 1`, ….
    pub(crate) fn encode(&self, first_seq: u64, commit_ms: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&first_seq.to_le_bytes());
        out.extend_from_slice(&(self.ops.len() as u32 | TIMED).to_le_bytes());
        out.extend_from_slice(&commit_ms.to_le_bytes());
        for op in &self.ops {
            out.push(op.kind as u8);
            put_varint(out, u64::from(op.table_id));
            put_bytes(out, &op.key);
            put_bytes(out, &op.row);
        }
    }

    /// Decodes a WAL payload into its first sequence number, its commit time (Unix
    /// milliseconds; absent in batches written before times were logged) and operations.
    pub(crate) fn decode(payload: &[u8]) -> DecodeResult<(u64, Option<u64>, Vec<BatchOp>)> {
        let mut r = Reader::new(payload);
        let first_seq = r.u64()?;
        let count = r.u32()?;
        let commit_ms = if count & TIMED != 0 { Some(r.u64()?) } else { None };
        let count = (count & !TIMED) as usize;
        let mut ops = Vec::with_capacity(count.min(payload.len()));
        for _ in 0..count {
            let kind = Kind::from_u8(r.u8()?).ok_or_else(|| DecodeError::new("bad op kind"))?;
            let table_id = u32::try_from(r.varint()?).map_err(|_| DecodeError::new("bad table id"))?;
            let key = r.bytes()?.to_vec();
            let row = r.bytes()?.to_vec();
            ops.push(BatchOp { table_id, kind, key, row });
        }
        if !r.is_empty() {
            return Err(DecodeError::new("trailing bytes after batch"));
        }
        Ok((first_seq, commit_ms, ops))
    }
}
