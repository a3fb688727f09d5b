//! A transaction's writes laid over a scan of its snapshot: the rows a transaction sees in a
//! key range ([`Overlay`]), and a row's cells after its writes ([`fold`]).

use std::collections::VecDeque;
use std::sync::Arc;

use super::{project_with, KeyOf, ScanIter};
use crate::catalog::{Projection, TableInfo};
use crate::error::{Error, Result};
use crate::mvcc::Kind;
use crate::types::row::{decode_row, Cells};
use crate::types::{ColumnType, Value};
use crate::write::batch::BatchOp;

/// A row's value cells after `ops` (oldest first) were applied over `base`.
pub(crate) fn fold(types: &[ColumnType], base: Option<Cells>, ops: &[BatchOp]) -> Result<Option<Cells>> {
    let decode = |row: &[u8]| {
        decode_row(types, row, None).map_err(|e| Error::InvalidArgument(format!("transaction row: {}", e.0)))
    };
    let mut cells = base;
    for op in ops {
        match op.kind {
            Kind::Put => cells = Some(decode(&op.row)?),
            Kind::Delete => cells = None,
            // A partial row over no row is no row, as blind updates are.
            Kind::Update => {
                if let Some(c) = cells.as_mut() {
                    for (slot, v) in c.iter_mut().zip(decode(&op.row)?) {
                        if v.is_some() {
                            *slot = v;
                        }
                    }
                }
            }
        }
    }
    Ok(cells)
}

/// A transaction's writes to a key range over a scan of its snapshot (full rows), merged by key.
pub(crate) struct Overlay {
    base: ScanIter,
    /// The base row read ahead: its encoded key and its value cells.
    next_base: Option<(Vec<u8>, Cells)>,
    /// The transaction's written rows in the range, in key order.
    pending: VecDeque<(Vec<u8>, Vec<BatchOp>)>,
    info: Arc<TableInfo>,
    projection: Projection,
    last_key: Vec<u8>,
}

impl Overlay {
    /// The rows of `base` (read with every column) with the writes `pending` (each key's
    /// operations, oldest first, keys in order) laid over them, projected as `projection`.
    pub(crate) fn new(
        base: ScanIter,
        pending: VecDeque<(Vec<u8>, Vec<BatchOp>)>,
        info: Arc<TableInfo>,
        projection: Projection,
    ) -> Self {
        Overlay { base, next_base: None, pending, info, projection, last_key: Vec::new() }
    }

    pub(crate) fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// The next base row, if not read ahead already.
    fn peek_base(&mut self) -> Result<()> {
        if self.next_base.is_none() {
            if let Some(row) = self.base.next().transpose()? {
                let cells = self.info.schema.value_columns().iter().map(|&c| row.get(c).cloned()).collect();
                self.next_base = Some((self.base.last_key().to_vec(), cells));
            }
        }
        Ok(())
    }

    pub(crate) fn next_row(&mut self) -> Result<Option<Vec<Value>>> {
        loop {
            self.peek_base()?;
            let base_key = self.next_base.as_ref().map(|(k, _)| k.as_slice());
            let take_pending = match (base_key, self.pending.front()) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(b), Some((p, _))) => p.as_slice() <= b,
            };
            let (key, cells) = if take_pending {
                let Some((key, ops)) = self.pending.pop_front() else { return Ok(None) };
                let base = match &self.next_base {
                    Some((k, _)) if *k == key => self.next_base.take().map(|(_, c)| c),
                    _ => None,
                };
                (key, fold(&self.info.value_types, base, &ops)?)
            } else {
                match self.next_base.take() {
                    Some((key, cells)) => (key, Some(cells)),
                    None => return Ok(None),
                }
            };
            if let Some(cells) = cells {
                let row = project_with(&self.info, KeyOf::Encoded(&key), cells, &self.projection)?;
                self.last_key = key;
                return Ok(Some(row));
            }
        }
    }
}
