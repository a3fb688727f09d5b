//! The memtables' side of a scan. Memtable versions mark nothing (marks are made by flushes), so
//! a scan resolves the memtables' keys in its range at its read point once, up front, and lays
//! the result over what it reads from the SSTs: a key the memtables delete or rewrite whole
//! replaces the SST rows of that key; a partial row replaces the columns it carries, and counts
//! only where the SSTs hold the row (updates are blind).

use std::ops::Range;

use crate::error::{Error, Result};
use crate::iter::merge::{MemSource, MergeIter, Source};
use crate::memtable::MemCursor;
use crate::mvcc::chain::Resolver;
use crate::mvcc::Kind;
use crate::read::ReadView;
use crate::sst::bloom;
use crate::types::row::{decode_row, Cells};
use crate::types::ColumnType;

/// What the memtables say about one key at the read point.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    /// Deleted: the SSTs' versions of the key are gone.
    Gone,
    /// A full row: it replaces the SSTs' versions (wanted columns filled).
    Row(Cells),
    /// Partial rows only: their columns replace the SSTs' values of those columns, if the row
    /// exists there.
    Partial(Cells),
}

/// The memtables' keys in a range, ascending, with their outcomes.
#[derive(Debug, Default)]
pub(super) struct Overlay {
    keys: Vec<Vec<u8>>,
    /// The keys' bloom-filter hashes, to ask files whether they may hold them.
    hashes: Vec<u64>,
    outcomes: Vec<Outcome>,
}

impl Overlay {
    /// Resolves the memtables of `view` for `table` over `[lower, upper)` at `seq`, reading the
    /// `wanted` value columns. Partial rows that carry no wanted column change nothing the scan
    /// reads and are left out.
    pub(super) fn build(
        view: &ReadView,
        table: u32,
        lower: &[u8],
        upper: Option<&[u8]>,
        seq: u64,
        types: &[ColumnType],
        wanted: &[bool],
    ) -> Result<Overlay> {
        let sources: Vec<Box<dyn Source>> = std::iter::once(&view.mem)
            .chain(view.imm.iter())
            .map(|m| Box::new(MemSource { cursor: MemCursor::new(m.clone(), table, lower, upper) }) as Box<dyn Source>)
            .collect();
        let mut merge = MergeIter::new(sources);
        let mut out = Overlay::default();
        let mut current: Option<(Vec<u8>, Resolver, bool)> = None;
        let finish = |out: &mut Overlay, (key, res, any): (Vec<u8>, Resolver, bool)| {
            if !any {
                return;
            }
            let outcome = match res.into_parts() {
                (Some(false), _) => Outcome::Gone,
                (Some(true), cells) => Outcome::Row(cells),
                (None, cells) => {
                    if !cells.iter().zip(wanted).any(|(c, &w)| w && c.is_some()) {
                        return;
                    }
                    Outcome::Partial(cells)
                }
            };
            out.hashes.push(bloom::key_hash(&key));
            out.keys.push(key);
            out.outcomes.push(outcome);
        };
        while let Some(e) = merge.next_entry()? {
            if current.as_ref().is_none_or(|(k, _, _)| *k != e.key) {
                if let Some(c) = current.take() {
                    finish(&mut out, c);
                }
                current = Some((e.key.clone(), Resolver::new(types.len(), Some(wanted)), false));
            }
            let Some((_, res, any)) = current.as_mut() else { continue };
            if e.seq > seq || res.is_settled() {
                continue;
            }
            let cells = if e.kind == Kind::Delete {
                vec![None; types.len()]
            } else {
                decode_row(types, &e.row, Some(wanted))
                    .map_err(|d| Error::corruption("<memtable>", e.seq, format!("bad row: {}", d.0)))?
            };
            res.push(e.kind, cells, None);
            *any = true;
        }
        if let Some(c) = current.take() {
            finish(&mut out, c);
        }
        Ok(out)
    }

    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(super) fn key(&self, i: usize) -> &[u8] {
        &self.keys[i]
    }

    pub(super) fn hash(&self, i: usize) -> u64 {
        self.hashes[i]
    }

    pub(super) fn outcome(&self, i: usize) -> &Outcome {
        &self.outcomes[i]
    }

    /// The entries with `lo <= key <= hi`.
    pub(super) fn between(&self, lo: &[u8], hi: &[u8]) -> Range<usize> {
        let a = self.keys.partition_point(|k| k.as_slice() < lo);
        let b = a + self.keys[a..].partition_point(|k| k.as_slice() <= hi);
        a..b
    }

    /// Whether the entry replaces the SSTs' value of value column `c`.
    pub(super) fn replaces(&self, i: usize, c: usize) -> bool {
        match &self.outcomes[i] {
            Outcome::Gone | Outcome::Row(_) => true,
            Outcome::Partial(cells) => cells.get(c).is_some_and(Option::is_some),
        }
    }
}
