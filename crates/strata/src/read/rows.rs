//! The per-row merge: every source (memtables, Level-0 files, each level's runs, a level's
//! column groups stitched together) merged in key order, each key's versions resolved at the
//! read point. The reference every faster scan path is tested against, and the path for what
//! they cannot express.

use std::sync::Arc;

use super::{ReadPoint, ReadView};
use crate::catalog::workload::{wanted_columns, At, Op};
use crate::catalog::{Projection, TableInfo};
use crate::error::{Error, Result};
use crate::iter::merge::{ColumnMerge, MemSource, MergeIter, RunSource, Source};
use crate::lineage::LineageRows;
use crate::memtable::MemCursor;
use crate::mvcc::chain::Resolver;
use crate::mvcc::Entry;
use crate::types::key::decode_key;
use crate::types::row::{decode_row, Cells};
use crate::types::Value;
use crate::version::{FileMeta, TableVersion};

impl ReadView {
    /// One source per memtable (active first) over table `table`'s keys in `[lower, upper)`.
    pub(crate) fn mem_sources(&self, table: u32, lower: &[u8], upper: Option<&[u8]>) -> Vec<Box<dyn Source>> {
        std::iter::once(&self.mem)
            .chain(self.imm.iter())
            .map(|m| Box::new(MemSource { cursor: MemCursor::new(m.clone(), table, lower, upper) }) as Box<dyn Source>)
            .collect()
    }
}

impl ReadPoint {
    /// A source over one run's `files` from `lower` (the caller stops at `upper`), reading the
    /// `wanted` value columns of `info`, filling the cache, and passing over files the read
    /// point cannot see when the snapshot filter is on.
    pub(crate) fn run_source(
        &self,
        files: Vec<Arc<FileMeta>>,
        lower: &[u8],
        upper: Option<&[u8]>,
        info: &TableInfo,
        wanted: Option<Arc<[bool]>>,
    ) -> RunSource {
        let src = RunSource::new(files, self.tables.clone(), lower, upper, info.value_types.clone(), wanted, true);
        if self.snapshot_filter {
            src.skip_newer_than(self.seq)
        } else {
            src
        }
    }

    /// The rows of `[lower, upper)`, merged; counts nothing in the workload statistics.
    pub(crate) fn rows(
        &self,
        info: &Arc<TableInfo>,
        lower: Vec<u8>,
        upper: Option<Vec<u8>>,
        projection: &Projection,
    ) -> ScanIter {
        let (t, view, seq) = (&self.t, self.view.clone(), self.seq);
        let wanted: Option<Arc<[bool]>> = projection.wanted().cloned();
        // A fresh resolver wants exactly the groups whose chains the scan must read (with only key
        // columns projected, the first value column's chain tells whether a row exists).
        let nvals = info.value_types.len();
        let fresh = Resolver::new(nvals, wanted.as_deref());
        let mut sources = view.mem_sources(info.id, &lower, upper.as_deref());
        for (li, level) in t.levels.iter().enumerate() {
            // Level-0 runs overlap in key and are merged like levels; a deeper level's runs are
            // its column groups, stitched by one column-merging source per level (LASER Fig. 5).
            let mut groups: Vec<Box<dyn Source>> = Vec::new();
            for run in &level.runs {
                if !fresh.wants(run.cover(info, li)) {
                    continue;
                }
                // The run source skips the files below `lower` itself.
                let src = Box::new(self.run_source(run.files.clone(), &lower, upper.as_deref(), info, wanted.clone()));
                if li == 0 {
                    sources.push(src);
                } else {
                    groups.push(src);
                }
            }
            match groups.len() {
                0 => {}
                1 => sources.extend(groups),
                _ => sources.push(Box::new(ColumnMerge::new(groups))),
            }
        }
        ScanIter {
            rows: Rows::Merge(Box::new(MergeRows {
                merge: MergeIter::new(sources),
                seq,
                upper,
                info: info.clone(),
                projection: projection.clone(),
                wanted,
                pending: None,
                done: false,
                last_key: Vec::new(),
                _view: view,
            })),
        }
    }
}

/// Counts a scan of `[lower, upper)` reading the `wanted` value columns in the workload statistics
/// of the memtable and of every level it overlaps, with the entries of the files it overlaps
/// there (Level-0's runs summed; a deeper level's runs, one per column group over the same keys,
/// counted once).
pub(crate) fn record_scan(
    info: &TableInfo,
    t: &TableVersion,
    lower: &[u8],
    upper: Option<&[u8]>,
    wanted: Option<&[bool]>,
) {
    let cols = || wanted_columns(wanted, info.value_types.len());
    let shape = info.workload.shape(Op::Scan, cols());
    info.workload.record_shaped(At::Memtable, Op::Scan, cols(), shape, 0);
    for (li, level) in t.levels.iter().enumerate() {
        if level.runs.iter().any(|r| r.overlaps(lower, upper)) {
            let entries = level.runs.iter().map(|r| r.overlapping_entries(lower, upper));
            let entries = if li == 0 { entries.sum() } else { entries.max().unwrap_or(0) };
            info.workload.record_shaped(At::Level(li), Op::Scan, cols(), shape, entries);
        }
    }
}

/// Rows of a scan, in key order, as `Result<Vec<Value>>` in projection order. Holds the files and
/// memtables it reads alive until dropped; sees exactly the data at its sequence number.
pub struct ScanIter {
    rows: Rows,
}

enum Rows {
    /// An LSM table's rows, merged from every source.
    Merge(Box<MergeRows>),
    /// A lineage table's rows, through its primary index.
    Lineage(Box<LineageRows>),
    /// A transaction's writes over a scan of its snapshot.
    Overlay(Box<super::overlay::Overlay>),
    Failed,
}

impl ScanIter {
    pub(crate) fn lineage(rows: LineageRows) -> Self {
        ScanIter { rows: Rows::Lineage(Box::new(rows)) }
    }

    pub(crate) fn overlay(rows: super::overlay::Overlay) -> Self {
        ScanIter { rows: Rows::Overlay(Box::new(rows)) }
    }

    /// The encoded key of the row [`Iterator::next`] returned last.
    pub(crate) fn last_key(&self) -> &[u8] {
        match &self.rows {
            Rows::Merge(m) => &m.last_key,
            Rows::Lineage(l) => l.last_key(),
            Rows::Overlay(o) => o.last_key(),
            Rows::Failed => &[],
        }
    }

    fn next_row(&mut self) -> Result<Option<Vec<Value>>> {
        match &mut self.rows {
            Rows::Merge(m) => m.next_row(),
            Rows::Lineage(l) => l.next_row(),
            Rows::Overlay(o) => o.next_row(),
            Rows::Failed => Ok(None),
        }
    }

    fn finish(&mut self) {
        self.rows = Rows::Failed;
    }
}

/// The per-row merge behind an LSM table's [`ScanIter`].
struct MergeRows {
    merge: MergeIter,
    seq: u64,
    upper: Option<Vec<u8>>,
    info: Arc<TableInfo>,
    projection: Projection,
    wanted: Option<Arc<[bool]>>,
    pending: Option<Entry>,
    done: bool,
    /// The key of the row returned last.
    last_key: Vec<u8>,
    _view: Arc<ReadView>,
}

impl MergeRows {
    /// The projected columns of a version.
    fn cells(&self, e: &Entry) -> Result<Cells> {
        decode_row(&self.info.value_types, &e.row, self.wanted.as_deref())
            .map_err(|d| Error::corruption("<scan>", e.seq, format!("bad row: {}", d.0)))
    }

    fn next_row(&mut self) -> Result<Option<Vec<Value>>> {
        while !self.done {
            let first = match self.pending.take() {
                Some(e) => e,
                None => match self.merge.next_entry()? {
                    Some(e) => e,
                    None => {
                        self.done = true;
                        return Ok(None);
                    }
                },
            };
            if self.upper.as_ref().is_some_and(|u| first.key >= *u) {
                self.done = true;
                return Ok(None);
            }
            let key = first.key.clone();
            let mut res = Resolver::new(self.info.value_types.len(), self.wanted.as_deref());
            if first.seq <= self.seq {
                res.push(first.kind, self.cells(&first)?, first.cover.as_deref());
            }
            // Versions of one key arrive newest first per chain; a repeat (a memtable and the
            // Level-0 file it is being flushed to) changes nothing the resolver already holds.
            while let Some(e) = self.merge.next_entry()? {
                if e.key != key {
                    self.pending = Some(e);
                    break;
                }
                if e.seq <= self.seq && !res.is_settled() {
                    res.push(e.kind, self.cells(&e)?, e.cover.as_deref());
                }
            }
            if let Some(cells) = res.finish() {
                let row = project(&self.info, &key, cells, &self.projection)?;
                self.last_key = key;
                return Ok(Some(row));
            }
        }
        Ok(None)
    }
}

impl Iterator for ScanIter {
    type Item = Result<Vec<Value>>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_row() {
            Ok(r) => r.map(Ok),
            Err(e) => {
                self.finish();
                Some(Err(e))
            }
        }
    }
}

/// Builds the output row: the projected columns, key columns decoded from the key.
pub(crate) fn project(info: &TableInfo, key: &[u8], cells: Cells, projection: &Projection) -> Result<Vec<Value>> {
    project_with(info, KeyOf::Encoded(key), cells, projection)
}

/// Where an output row's key columns come from.
pub(crate) enum KeyOf<'a> {
    /// Decoded from the encoded key when a key column is projected.
    Encoded(&'a [u8]),
    /// Already known (a point read's own key, in key-column order).
    Values(&'a [Value]),
}

/// [`project`] with the key columns from `key`.
pub(crate) fn project_with(
    info: &TableInfo,
    key: KeyOf<'_>,
    mut cells: Cells,
    projection: &Projection,
) -> Result<Vec<Value>> {
    let schema = &info.schema;
    let cols = projection.columns(info);
    let mut decoded: Option<Vec<Value>> = None;
    let mut out = Vec::with_capacity(cols.len());
    for (i, &c) in cols.iter().enumerate() {
        match schema.value_index(c) {
            Some(vi) => {
                // Moved out at the column's last place in the projection, cloned before that.
                let cell = cells.get_mut(vi);
                let v =
                    if cols[i + 1..].contains(&c) { cell.and_then(|v| v.clone()) } else { cell.and_then(Option::take) };
                out.push(v.unwrap_or(Value::Null));
            }
            None => {
                let ki = schema.primary_key().iter().position(|&k| k == c).unwrap_or(0);
                let vals = match key {
                    KeyOf::Values(v) => v,
                    KeyOf::Encoded(k) => match &decoded {
                        Some(d) => d,
                        None => decoded
                            .insert(decode_key(&info.key_types, k).map_err(|e| Error::corruption("<key>", 0, e.0))?),
                    },
                };
                out.push(vals.get(ki).cloned().unwrap_or(Value::Null));
            }
        }
    }
    Ok(out)
}
