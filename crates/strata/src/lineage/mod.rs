//! The lineage engine (L-Store, seed 004 §2-§5): a second table engine for tables whose working
//! set fits in memory and whose rows are updated in place at high rates while analytical scans
//! run.
//!
//! A table's rows live in update ranges of base records (`range.rs`). A base record's values
//! stay in read-only base pages; an update appends a tail record to its range carrying the
//! columns it sets (and, cumulatively, those the previous tail record carried), preceded by a
//! snapshot record of old values the first time a column changes; the base record's
//! indirection entry then points at the new tail record. A delete is a tail record carrying
//! nothing, flagged. Every tail record holds its sequence number, so any snapshot reads its
//! version by walking back the chain. The lineage thread folds committed tail records into new
//! base pages (Algorithm 1), each page stamped with how many tail records it holds (its TPS),
//! and swaps them into the page directory; readers holding an old page keep it until they let
//! go. Neither readers nor the writer ever wait for it.
//!
//! The commit leader applies writes in sequence order (the shared WAL has them first), so there
//! is one writer per table; the primary index is a concurrent skiplist from key to base RID.

mod append;
pub(crate) mod checkpoint;
pub(crate) mod range;
mod sealed;
mod table;

pub(crate) use table::{LineageTable, View};

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use crate::catalog::{Projection, TableInfo};
use crate::error::Result;
use crate::read::project;
use crate::types::Value;

/// The first `i` in `0..n` where `before(i)` is false (`before` holds on a prefix).
pub(crate) fn partition(n: usize, before: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Value columns a lineage table may have (a record's column sets are 64-bit masks).
pub(crate) const MAX_COLUMNS: usize = 64;

/// Rows of a key range of a lineage table at one sequence number, in key order.
pub(crate) struct LineageRows {
    table: Arc<LineageTable>,
    view: Arc<View>,
    info: Arc<TableInfo>,
    seq: u64,
    /// Keys at or after this bound are still to come.
    next: Bound<Box<[u8]>>,
    upper: Option<Vec<u8>>,
    projection: Projection,
    wanted: Option<Arc<[bool]>>,
    buf: VecDeque<(Box<[u8]>, u64)>,
    done: bool,
    last_key: Vec<u8>,
}

/// Index entries fetched at a time.
const INDEX_CHUNK: usize = 256;

impl LineageRows {
    pub(crate) fn new(
        table: Arc<LineageTable>,
        (seq, view): (u64, Arc<View>),
        lower: Vec<u8>,
        upper: Option<Vec<u8>>,
        projection: &Projection,
    ) -> Self {
        let info = table.info.clone();
        LineageRows {
            table,
            view,
            info,
            seq,
            next: Bound::Included(lower.into()),
            upper,
            projection: projection.clone(),
            wanted: projection.wanted().cloned(),
            buf: VecDeque::new(),
            done: false,
            last_key: Vec::new(),
        }
    }

    pub(crate) fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    pub(crate) fn next_row(&mut self) -> Result<Option<Vec<Value>>> {
        while !self.done {
            let Some((key, rid)) = self.buf.pop_front() else {
                let lower = match &self.next {
                    Bound::Included(k) => Bound::Included(&k[..]),
                    Bound::Excluded(k) => Bound::Excluded(&k[..]),
                    Bound::Unbounded => Bound::Unbounded,
                };
                let got = self.table.index_range(lower, self.upper.as_deref(), INDEX_CHUNK);
                match got.last() {
                    Some((k, _)) => self.next = Bound::Excluded(k.clone()),
                    None => self.done = true,
                }
                self.buf.extend(got);
                continue;
            };
            if let Some(cells) = self.table.row_of(&self.view, rid, self.seq, self.wanted.as_deref()) {
                let row = project(&self.info, &key, cells, &self.projection)?;
                self.last_key = key.into();
                return Ok(Some(row));
            }
        }
        Ok(None)
    }
}
