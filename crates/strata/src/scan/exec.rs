//! Running a scan over one key range (a partition).
//!
//! The deepest level holding the scan's columns drives: its blocks are visited in key order by
//! their index entries. A block is passed on in bulk when its index says it is *clean* (one full
//! row per key) and older than the snapshot, and no other source — memtables, Level-0, other
//! levels' runs of the needed columns — has any key in its range; the needed columns' other
//! groups at the same level must then hold exactly the same keys there (checked on the key bytes).
//! Such a block's zone maps can skip it or settle clauses, and count/min/max can come from them
//! without reading it. Every other stretch of keys is read through the per-row merge of all
//! sources ([`ScanIter`]), a batch of rows at a time, and evaluated the same way.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use arrow_buffer::BooleanBuffer;
use arrow_schema::SchemaRef;
use arrow_select::coalesce::BatchCoalescer;

use super::agg::{finish_batch, AggSpec, AggState};
use super::arrow::{block_array, prefixes, row_schema, ValuesBuilder};
use super::cnf::{Atom, Filter, Test};
use super::eval::{atom_on_array, clause_verdict, literal_bytes, text_atom_on_block, Verdict};
use super::{AggFunc, ScanRequest, ScanStats};
use crate::db::read::{record_scan, run_cover};
use crate::db::{DbInner, Projection, ReadOptions, ReadView, ScanIter, TableInfo};
use crate::error::{Error, Result};
use crate::memtable::{MemCursor, Memtable};
use crate::mvcc::chain::Resolver;
use crate::sst::block::Block;
use crate::sst::reader::SstReader;
use crate::types::key::decode_key;
use crate::types::{ColumnType, Value};
use crate::version::{FileMeta, TableVersion};

/// Counters of the scan engine (see [`ScanStats`]).
#[derive(Debug, Default)]
pub(crate) struct ScanCounters {
    pub(crate) scans: AtomicU64,
    pub(crate) passes: AtomicU64,
    blocks_read: AtomicU64,
    bulk_blocks: AtomicU64,
    blocks_skipped: AtomicU64,
    blocks_from_stats: AtomicU64,
    merged_rows: AtomicU64,
    patched_keys: AtomicU64,
}

impl ScanCounters {
    pub(crate) fn stats(&self) -> ScanStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ScanStats {
            scans: g(&self.scans),
            passes: g(&self.passes),
            blocks_read: g(&self.blocks_read),
            bulk_blocks: g(&self.bulk_blocks),
            blocks_skipped: g(&self.blocks_skipped),
            blocks_from_stats: g(&self.blocks_from_stats),
            merged_rows: g(&self.merged_rows),
            patched_keys: g(&self.patched_keys),
        }
    }

    pub(crate) fn add(a: &AtomicU64, n: u64) {
        a.fetch_add(n, Ordering::Relaxed);
    }
}

fn arrow_err(e: arrow_schema::ArrowError) -> Error {
    Error::InvalidArgument(format!("scan: {e}"))
}

/// A scan request resolved against a table.
pub(crate) struct Plan {
    pub info: Arc<TableInfo>,
    /// Output columns (schema indices) when returning rows.
    pub out_cols: Vec<usize>,
    /// The schema of the batches returned.
    pub schema: SchemaRef,
    pub filter: Filter,
    pub aggs: Vec<AggSpec>,
    /// Every column read (filter, output, aggregates), schema indices ascending.
    pub needed: Vec<usize>,
    pub limit: Option<usize>,
    pub batch_rows: usize,
    pub block_stats: bool,
}

impl Plan {
    pub(crate) fn new(info: &Arc<TableInfo>, req: &ScanRequest) -> Result<Plan> {
        let schema = &info.schema;
        let col = |name: &str| {
            schema
                .column_index(name)
                .ok_or_else(|| Error::UnknownColumn { table: info.name.clone(), column: name.to_string() })
        };
        let out_cols = match &req.columns {
            None => info.all_columns.to_vec(),
            Some(names) => names.iter().map(|n| col(n)).collect::<Result<Vec<_>>>()?,
        };
        let filter = match &req.filter {
            None => Filter::all(),
            Some(e) => Filter::new(&info.name, schema, e)?,
        };
        let mut aggs = Vec::with_capacity(req.aggregates.len());
        for a in &req.aggregates {
            let column = match &a.column {
                None if a.func == AggFunc::Count => None,
                None => {
                    return Err(Error::InvalidArgument(format!(
                        "{}(*) is not an aggregate; name a column",
                        a.func.name()
                    )))
                }
                Some(n) => {
                    let c = col(n)?;
                    let ty = schema.columns()[c].ty;
                    let numeric = !matches!(ty, ColumnType::Text | ColumnType::Bytea | ColumnType::Boolean);
                    if matches!(a.func, AggFunc::Sum | AggFunc::Avg) && !numeric {
                        return Err(Error::TypeMismatch {
                            table: info.name.clone(),
                            column: n.clone(),
                            message: format!("{} needs a numeric column, not {}", a.func.name(), ty.name()),
                        });
                    }
                    Some((c, ty))
                }
            };
            aggs.push(AggSpec { func: a.func, column, name: a.output_name() });
        }
        if req.batch_rows == 0 {
            return Err(Error::InvalidArgument("batch_rows must be at least 1".into()));
        }
        let mut needed: Vec<usize> = filter.columns().collect();
        if aggs.is_empty() {
            needed.extend(&out_cols);
        }
        needed.extend(aggs.iter().filter_map(|a| a.column.map(|(c, _)| c)));
        needed.sort_unstable();
        needed.dedup();
        let schema_ref = if aggs.is_empty() {
            row_schema(schema, &out_cols)
        } else {
            finish_batch(&aggs, &vec![AggState::default(); aggs.len()])?.schema()
        };
        Ok(Plan {
            info: info.clone(),
            out_cols,
            schema: schema_ref,
            filter,
            aggs,
            needed,
            limit: if req.aggregates.is_empty() { req.limit } else { None },
            batch_rows: req.batch_rows,
            block_stats: req.block_stats,
        })
    }

    /// The plan of a shared pass: reads every column `plans` need, filters nothing.
    pub(crate) fn pass(info: &Arc<TableInfo>, plans: &[Arc<Plan>]) -> Plan {
        let mut needed: Vec<usize> = plans.iter().flat_map(|p| p.needed.iter().copied()).collect();
        needed.sort_unstable();
        needed.dedup();
        Plan {
            info: info.clone(),
            out_cols: needed.clone(),
            schema: row_schema(&info.schema, &needed),
            filter: Filter::all(),
            aggs: Vec::new(),
            needed,
            limit: None,
            batch_rows: plans.iter().map(|p| p.batch_rows).max().unwrap_or(8192),
            block_stats: false,
        }
    }

    /// For each value column, whether the scan reads it.
    pub(crate) fn wanted(&self) -> Vec<bool> {
        let mut w = vec![false; self.info.value_types.len()];
        for &c in &self.needed {
            if let Some(vi) = self.info.schema.value_index(c) {
                w[vi] = true;
            }
        }
        w
    }

    fn ty(&self, col: usize) -> ColumnType {
        self.info.schema.columns()[col].ty
    }
}

/// Everything a scan reads, pinned at one sequence number.
pub(crate) struct ReadPoint {
    pub db: Arc<DbInner>,
    pub view: Arc<ReadView>,
    pub t: Arc<TableVersion>,
    pub seq: u64,
}

/// Rows (or aggregate states) produced so far.
enum Sink {
    Rows { coalescer: BatchCoalescer, emitted: usize },
    Aggs(Vec<AggState>),
}

/// The columns of one chunk of rows, decoded on demand.
trait Chunk {
    fn rows(&self) -> usize;
    /// Column `col` (schema index): every row, or only the `sel`ected ones.
    fn array(&mut self, col: usize, sel: Option<&BooleanBuffer>) -> Result<ArrayRef>;
    /// The rows where `atom` is true.
    fn atom_mask(&mut self, atom: &Atom) -> Result<BooleanBuffer>;
}

/// Rows that came through the merge: every needed column already an array.
struct RowsChunk<'p> {
    plan: &'p Plan,
    rows: usize,
    arrays: HashMap<usize, ArrayRef>,
}

impl Chunk for RowsChunk<'_> {
    fn rows(&self) -> usize {
        self.rows
    }

    fn array(&mut self, col: usize, sel: Option<&BooleanBuffer>) -> Result<ArrayRef> {
        let a =
            self.arrays.get(&col).ok_or_else(|| Error::InvalidArgument(format!("internal: column {col} not read")))?;
        match sel {
            None => Ok(a.clone()),
            Some(s) => arrow_select::filter::filter(a, &BooleanArray::new(s.clone(), None)).map_err(arrow_err),
        }
    }

    fn atom_mask(&mut self, atom: &Atom) -> Result<BooleanBuffer> {
        let a = self.array(atom.column, None)?;
        atom_on_array(atom, self.plan.ty(atom.column), &a)
    }
}

/// Consecutive rows of one block.
type Segment = (Arc<Block>, Range<usize>);

/// A bulk chunk: the same keys in every needed group of the driving level, as block segments.
struct BulkChunk<'p> {
    plan: &'p Plan,
    rows: usize,
    /// Per group (0 = the driver): its segments, in key order.
    groups: Vec<Vec<Segment>>,
    /// Schema column → (group, column within the group's files).
    at: &'p HashMap<usize, (usize, usize)>,
    full: HashMap<usize, ArrayRef>,
}

fn concat(mut parts: Vec<ArrayRef>) -> Result<ArrayRef> {
    if parts.len() == 1 {
        if let Some(a) = parts.pop() {
            return Ok(a);
        }
    }
    let refs: Vec<&dyn arrow_array::Array> = parts.iter().map(|a| a.as_ref()).collect();
    arrow_select::concat::concat(&refs).map_err(arrow_err)
}

impl BulkChunk<'_> {
    /// Key column `ki` of the chunk's rows (or the `sel`ected ones), decoded from the driver's
    /// keys. A lone BIGINT key is read straight from its 8 bytes.
    fn key_column(&self, ki: usize, sel: Option<&BooleanBuffer>) -> Result<ArrayRef> {
        let info = &self.plan.info;
        let mut rows: Vec<(&Block, usize)> = Vec::with_capacity(self.rows);
        for (b, r) in &self.groups[0] {
            rows.extend(r.clone().map(|i| (b.as_ref(), i)));
        }
        let chosen: Box<dyn Iterator<Item = &(&Block, usize)>> = match sel {
            None => Box::new(rows.iter()),
            Some(s) => Box::new(s.set_indices().filter_map(|i| rows.get(i))),
        };
        if info.key_types[..] == [ColumnType::BigInt] {
            let vals = chosen
                .map(|(b, i)| {
                    let k: [u8; 8] =
                        b.key(*i).try_into().map_err(|_| Error::corruption("<key>", 0, "BIGINT key is not 8 bytes"))?;
                    Ok((u64::from_be_bytes(k) ^ (1 << 63)) as i64)
                })
                .collect::<Result<Vec<i64>>>()?;
            return Ok(Arc::new(arrow_array::Int64Array::from(vals)));
        }
        let mut builder = ValuesBuilder::new(info.key_types[ki]);
        for (b, i) in chosen {
            let vals = decode_key(&info.key_types, b.key(*i)).map_err(|e| Error::corruption("<key>", 0, e.0))?;
            builder.push(vals.get(ki).unwrap_or(&Value::Null));
        }
        Ok(builder.finish())
    }
}

impl Chunk for BulkChunk<'_> {
    fn rows(&self) -> usize {
        self.rows
    }

    fn array(&mut self, col: usize, sel: Option<&BooleanBuffer>) -> Result<ArrayRef> {
        if sel.is_none() {
            if let Some(a) = self.full.get(&col) {
                return Ok(a.clone());
            }
        }
        let schema = &self.plan.info.schema;
        let a = if let Some(ki) = schema.primary_key().iter().position(|&k| k == col) {
            self.key_column(ki, sel)?
        } else {
            let &(g, c) =
                self.at.get(&col).ok_or_else(|| Error::InvalidArgument(format!("internal: column {col} not read")))?;
            let mut parts = Vec::with_capacity(self.groups[g].len());
            let mut off = 0;
            for (b, r) in &self.groups[g] {
                let p = b.column(c).ok_or_else(|| Error::corruption("<scan>", 0, "block lacks a group column"))?;
                let sub = sel.map(|s| s.slice(off, r.len()));
                parts.push(block_array(&p, r, sub.as_ref())?);
                off += r.len();
            }
            concat(parts)?
        };
        if sel.is_none() {
            self.full.insert(col, a.clone());
        }
        Ok(a)
    }

    fn atom_mask(&mut self, atom: &Atom) -> Result<BooleanBuffer> {
        // TEXT/BYTEA comparisons: prefixes first, heap only on ties.
        if let (Test::Cmp(op, v), Some(&(g, c))) = (&atom.test, self.at.get(&atom.column)) {
            if let (Some(lit), false) = (literal_bytes(v), self.full.contains_key(&atom.column)) {
                let mut bits: Vec<BooleanBuffer> = Vec::with_capacity(self.groups[g].len());
                for (b, r) in &self.groups[g] {
                    let p = b.column(c).ok_or_else(|| Error::corruption("<scan>", 0, "block lacks a group column"))?;
                    bits.push(text_atom_on_block(*op, lit, &p, r, &prefixes(&p, r)?)?);
                }
                return Ok(match bits.len() {
                    1 => bits.pop().unwrap_or_else(|| BooleanBuffer::new_unset(0)),
                    _ => bits.iter().flat_map(|b| b.iter()).collect(),
                });
            }
        }
        let a = self.array(atom.column, None)?;
        atom_on_array(atom, self.plan.ty(atom.column), &a)
    }
}

/// A source other than the driving level's groups, checked for keys in a block's range.
enum Other {
    Mem(Arc<Memtable>),
    Run(Vec<Arc<FileMeta>>),
}

/// A cursor over one group's run at the driving level, handing out the segments of a key range.
struct GroupCursor {
    files: Vec<Arc<FileMeta>>,
    fi: usize,
    reader: Option<Arc<SstReader>>,
    bi: usize,
    block: Option<Arc<Block>>,
    row: usize,
}

impl GroupCursor {
    fn new(files: Vec<Arc<FileMeta>>) -> Self {
        GroupCursor { files, fi: 0, reader: None, bi: 0, block: None, row: 0 }
    }

    /// Moves to the first version with key `>= lo` (never backwards).
    fn seek(&mut self, rp: &ReadPoint, lo: &[u8], counters: &ScanCounters) -> Result<()> {
        if let Some(b) = &self.block {
            if self.row < b.len() && b.key(self.row) >= lo {
                return Ok(());
            }
            if b.len() > 0 && b.key(b.len() - 1) >= lo {
                self.row = self.row.max(b.seek(lo));
                return Ok(());
            }
        }
        let fi = self.files.partition_point(|f| f.largest.as_slice() < lo);
        if fi >= self.files.len() {
            self.fi = fi;
            self.block = None;
            return Ok(());
        }
        let reader = rp.db.tables.get(self.files[fi].number)?;
        let bi = reader.find_block(lo);
        self.fi = fi;
        self.bi = bi;
        self.block = if bi < reader.num_blocks() {
            ScanCounters::add(&counters.blocks_read, 1);
            Some(reader.block(bi, true)?)
        } else {
            None
        };
        self.reader = Some(reader);
        self.row = self.block.as_ref().map_or(0, |b| b.seek(lo));
        Ok(())
    }

    fn advance_block(&mut self, rp: &ReadPoint, counters: &ScanCounters) -> Result<()> {
        self.row = 0;
        self.bi += 1;
        loop {
            if let Some(r) = &self.reader {
                if self.bi < r.num_blocks() {
                    ScanCounters::add(&counters.blocks_read, 1);
                    self.block = Some(r.block(self.bi, true)?);
                    return Ok(());
                }
            }
            self.fi += 1;
            self.bi = 0;
            if self.fi >= self.files.len() {
                self.block = None;
                self.reader = None;
                return Ok(());
            }
            self.reader = Some(rp.db.tables.get(self.files[self.fi].number)?);
        }
    }

    /// The versions with `lo <= key < hi`, as segments.
    fn take(&mut self, rp: &ReadPoint, lo: &[u8], hi: &[u8], counters: &ScanCounters) -> Result<Vec<Segment>> {
        self.seek(rp, lo, counters)?;
        let mut out = Vec::new();
        while let Some(b) = self.block.clone() {
            let end = b.seek(hi);
            if self.row < end {
                out.push((b.clone(), self.row..end));
                self.row = end;
            }
            if end < b.len() {
                break;
            }
            self.advance_block(rp, counters)?;
        }
        Ok(out)
    }
}

/// A block of the driving group, by its index entry.
struct Candidate {
    reader: Arc<SstReader>,
    block: usize,
    /// The key range it stands for: from just past the previous block's last key (or the
    /// partition's lower bound) to just past its own last key (or the upper bound).
    lo: Vec<u8>,
    hi: Vec<u8>,
    /// All of the block's rows lie in `[lo, hi)`.
    whole: bool,
    /// Memtables hold keys in the range: pass the block on in bulk without those keys and
    /// resolve them one by one.
    patch: bool,
}

/// The smallest key above `k`.
fn successor(k: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(k.len() + 1);
    v.extend_from_slice(k);
    v.push(0);
    v
}

/// The driving level: its needed groups and where the walk over the driver's blocks is.
struct Driver {
    /// The driver group's files.
    files: Vec<Arc<FileMeta>>,
    fi: usize,
    reader: Option<Arc<SstReader>>,
    bi: usize,
    /// Start of the next block's range.
    next_lo: Vec<u8>,
    /// The other needed groups of the level.
    groups: Vec<GroupCursor>,
    /// Schema column → (group, column within the group).
    at: HashMap<usize, (usize, usize)>,
    /// Sources that could hold newer (or interleaved) versions of the needed columns.
    others: Vec<Other>,
}

/// One request served by a pass: its plan, key range and output so far.
pub(crate) struct Consumer {
    plan: Arc<Plan>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    sink: Sink,
    done: bool,
}

impl Consumer {
    pub(crate) fn new(plan: Arc<Plan>, lower: Vec<u8>, upper: Option<Vec<u8>>) -> Consumer {
        let sink = if plan.aggs.is_empty() {
            Sink::Rows { coalescer: BatchCoalescer::new(plan.schema.clone(), plan.batch_rows), emitted: 0 }
        } else {
            Sink::Aggs(vec![AggState::default(); plan.aggs.len()])
        };
        let done = plan.filter.is_false() || plan.limit == Some(0);
        Consumer { plan, lower, upper, sink, done }
    }

    /// Where `[lo, hi)` lies against this consumer's range: `Some(true)` inside, `Some(false)`
    /// outside, `None` partly.
    fn covers(&self, lo: &[u8], hi: &[u8]) -> Option<bool> {
        let after_start = lo >= self.lower.as_slice();
        let before_end = self.upper.as_deref().is_none_or(|u| hi <= u);
        if after_start && before_end {
            Some(true)
        } else if hi <= self.lower.as_slice() || self.upper.as_deref().is_some_and(|u| lo >= u) {
            Some(false)
        } else {
            None
        }
    }

    fn in_range(&self, key: &[u8]) -> bool {
        key >= self.lower.as_slice() && self.upper.as_deref().is_none_or(|u| key < u)
    }

    /// What the consumer produced: its batches, or its one aggregate batch.
    pub(crate) fn finish(self) -> Result<Vec<RecordBatch>> {
        match self.sink {
            Sink::Aggs(states) => Ok(vec![finish_batch(&self.plan.aggs, &states)?]),
            Sink::Rows { mut coalescer, .. } => {
                coalescer.finish_buffered_batch().map_err(arrow_err)?;
                Ok(std::iter::from_fn(|| coalescer.next_completed_batch()).collect())
            }
        }
    }

    /// Filters a chunk (only the rows of `range_mask` when given) and feeds what passes to the
    /// sink. `verdicts` (per clause, from zone maps; empty when unknown) lets clauses true on
    /// every row go unevaluated.
    fn consume(
        &mut self,
        chunk: &mut dyn Chunk,
        verdicts: &[Verdict],
        range_mask: Option<BooleanBuffer>,
    ) -> Result<()> {
        let rows = chunk.rows();
        if rows == 0 || self.done {
            return Ok(());
        }
        let mut mask = range_mask;
        for (i, clause) in self.plan.filter.clauses().iter().enumerate() {
            if verdicts.get(i) == Some(&Verdict::Always) {
                continue;
            }
            let mut any: Option<BooleanBuffer> = None;
            for atom in clause {
                let m = chunk.atom_mask(atom)?;
                any = Some(match any {
                    None => m,
                    Some(a) => &a | &m,
                });
            }
            let m = any.unwrap_or_else(|| BooleanBuffer::new_unset(rows));
            let m = match mask {
                None => m,
                Some(prev) => &prev & &m,
            };
            if m.count_set_bits() == 0 {
                return Ok(());
            }
            mask = Some(m);
        }
        let passing = mask.as_ref().map_or(rows, BooleanBuffer::count_set_bits);
        if passing == 0 {
            return Ok(());
        }
        let sel = mask.filter(|_| passing < rows);
        match &mut self.sink {
            Sink::Aggs(states) => {
                for (a, st) in self.plan.aggs.iter().zip(states.iter_mut()) {
                    let values = match a.column {
                        Some((col, _)) => Some(chunk.array(col, sel.as_ref())?),
                        None => None,
                    };
                    st.update(a, passing, values.as_ref());
                }
            }
            Sink::Rows { coalescer, emitted } => {
                let arrays =
                    self.plan.out_cols.iter().map(|&c| chunk.array(c, sel.as_ref())).collect::<Result<Vec<_>>>()?;
                let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(passing));
                let mut batch =
                    RecordBatch::try_new_with_options(self.plan.schema.clone(), arrays, &options).map_err(arrow_err)?;
                if let Some(limit) = self.plan.limit {
                    let left = limit.saturating_sub(*emitted);
                    if batch.num_rows() >= left {
                        batch = batch.slice(0, left);
                        self.done = true;
                    }
                }
                *emitted += batch.num_rows();
                coalescer.push_batch(batch).map_err(arrow_err)?;
            }
        }
        Ok(())
    }
}

/// One pass over a key range (a partition of a scan, or a shared pass serving several scans).
pub(crate) struct Partition {
    /// What the pass reads: the union of its consumers' columns and ranges.
    pass: Arc<Plan>,
    consumers: Vec<Consumer>,
    /// Some consumer's range is narrower than the pass's: rows carry their keys.
    ranged: bool,
    rp: Arc<ReadPoint>,
    counters: Arc<ScanCounters>,
    upper: Option<Vec<u8>>,
    driver: Option<Driver>,
    /// Start of the keys not yet handed to the merge or the bulk path.
    pos: Vec<u8>,
    /// Start of a stretch of blocks waiting for the merge.
    pending: Option<Vec<u8>>,
    stash: Option<Candidate>,
    merge: Option<(ScanIter, Vec<ValuesBuilder>)>,
    driver_done: bool,
    done: bool,
}

impl Partition {
    /// A pass over `[lower, upper)` feeding `consumers`; `pass` reads every column they need.
    pub(crate) fn new(
        pass: Arc<Plan>,
        consumers: Vec<Consumer>,
        rp: Arc<ReadPoint>,
        counters: Arc<ScanCounters>,
        lower: Vec<u8>,
        upper: Option<Vec<u8>>,
    ) -> Result<Partition> {
        let done = consumers.iter().all(|c| c.done);
        let driver = if done { None } else { driver(&pass, &rp, &lower)? };
        // Rows carry their keys when some consumer wants less than the whole pass.
        let ranged = consumers.iter().any(|c| {
            c.lower > lower
                || match (&c.upper, &upper) {
                    (None, _) => false,
                    (Some(_), None) => true,
                    (Some(cu), Some(u)) => cu < u,
                }
        });
        Ok(Partition {
            pass,
            consumers,
            ranged,
            rp,
            counters,
            upper,
            driver,
            pos: lower,
            pending: None,
            stash: None,
            merge: None,
            driver_done: false,
            done,
        })
    }

    /// The next finished batch of the first consumer's rows, or `None` when the pass is over.
    pub(crate) fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            let Some(c) = self.consumers.first_mut() else { return Ok(None) };
            if let Sink::Rows { coalescer, .. } = &mut c.sink {
                if let Some(b) = coalescer.next_completed_batch() {
                    return Ok(Some(b));
                }
                if self.done {
                    coalescer.finish_buffered_batch().map_err(arrow_err)?;
                    return Ok(coalescer.next_completed_batch());
                }
            } else if self.done {
                return Ok(None);
            }
            self.step()?;
        }
    }

    /// Runs the pass to the end and returns its consumers.
    pub(crate) fn run(mut self) -> Result<Vec<Consumer>> {
        while !self.done {
            self.step()?;
        }
        Ok(self.consumers)
    }

    /// Runs to the end and returns the first consumer's aggregate states.
    pub(crate) fn into_states(self) -> Result<Vec<AggState>> {
        match self.run()?.into_iter().next().map(|c| c.sink) {
            Some(Sink::Aggs(s)) => Ok(s),
            _ => Ok(Vec::new()),
        }
    }

    /// One unit of work: a merge batch, a bulk block, or a decision about the next block.
    fn step(&mut self) -> Result<()> {
        if self.consumers.iter().all(|c| c.done) {
            self.done = true;
            return Ok(());
        }
        if let Some((iter, builders)) = &mut self.merge {
            let batch_rows = self.pass.batch_rows;
            let mut keys: Vec<Vec<u8>> = Vec::new();
            let mut n = 0;
            while n < batch_rows {
                match iter.next() {
                    Some(row) => {
                        for (b, v) in builders.iter_mut().zip(&row?) {
                            b.push(v);
                        }
                        if self.ranged {
                            keys.push(iter.last_key().to_vec());
                        }
                        n += 1;
                    }
                    None => break,
                }
            }
            let exhausted = n < batch_rows;
            if n > 0 {
                ScanCounters::add(&self.counters.merged_rows, n as u64);
                let arrays: HashMap<usize, ArrayRef> =
                    self.pass.needed.iter().copied().zip(builders.iter_mut().map(ValuesBuilder::finish)).collect();
                let pass = self.pass.clone();
                let mut chunk = RowsChunk { plan: &pass, rows: n, arrays };
                for c in &mut self.consumers {
                    let mask = self.ranged.then(|| keys.iter().map(|k| c.in_range(k)).collect::<BooleanBuffer>());
                    c.consume(&mut chunk, &[], mask)?;
                }
            }
            if exhausted {
                self.merge = None;
                if self.driver_done {
                    self.done = true;
                }
            }
            return Ok(());
        }
        if let Some(c) = self.stash.take() {
            return self.bulk(c);
        }
        if self.driver_done {
            self.done = true;
            return Ok(());
        }
        match self.next_candidate()? {
            None => {
                // Whatever lies past the driver's last block (or everything, without a driver).
                self.driver_done = true;
                let from = self.pending.take().unwrap_or_else(|| self.pos.clone());
                if self.upper.as_ref().is_none_or(|u| from < *u) {
                    self.start_merge(from, self.upper.clone());
                } else {
                    self.done = true;
                }
            }
            Some(mut c) => {
                if let Some(patch) = self.eligible(&c)? {
                    c.patch = patch;
                    if let Some(from) = self.pending.take() {
                        self.start_merge(from, Some(c.lo.clone()));
                    }
                    self.pos.clone_from(&c.hi);
                    self.stash = Some(c);
                } else {
                    if self.pending.is_none() {
                        self.pending = Some(c.lo.clone());
                    }
                    self.pos.clone_from(&c.hi);
                }
            }
        }
        Ok(())
    }

    fn start_merge(&mut self, lower: Vec<u8>, upper: Option<Vec<u8>>) {
        let info = &self.pass.info;
        let wanted: Arc<[bool]> = self.pass.wanted().into();
        let projection = Projection::Columns { cols: self.pass.needed.clone().into(), wanted };
        let rp = &self.rp;
        let iter = rp.db.scan_at(info, &rp.t, rp.view.clone(), rp.seq, lower, upper, &projection);
        let builders = self.pass.needed.iter().map(|&c| ValuesBuilder::new(self.pass.ty(c))).collect();
        self.merge = Some((iter, builders));
    }

    fn next_candidate(&mut self) -> Result<Option<Candidate>> {
        let Some(d) = &mut self.driver else { return Ok(None) };
        loop {
            let Some(reader) = d.reader.clone() else {
                if d.fi >= d.files.len() {
                    return Ok(None);
                }
                let r = self.rp.db.tables.get(d.files[d.fi].number)?;
                d.bi = r.find_block(&d.next_lo);
                d.reader = Some(r);
                continue;
            };
            if d.bi >= reader.num_blocks() {
                d.fi += 1;
                d.reader = None;
                continue;
            }
            if self.upper.as_ref().is_some_and(|u| d.next_lo >= *u) {
                return Ok(None);
            }
            let e = &reader.index()[d.bi];
            let last_succ = successor(&e.last_key);
            let (hi, whole_end) = match &self.upper {
                Some(u) if *u < last_succ => (u.clone(), false),
                _ => (last_succ, true),
            };
            let whole_start = match d.bi.checked_sub(1) {
                None => d.files[d.fi].smallest.as_slice() >= d.next_lo.as_slice(),
                Some(p) => d.next_lo <= successor(&reader.index()[p].last_key),
            };
            let lo = std::mem::replace(&mut d.next_lo, hi.clone());
            let c = Candidate {
                reader: reader.clone(),
                block: d.bi,
                lo,
                hi,
                whole: whole_start && whole_end,
                patch: false,
            };
            d.bi += 1;
            return Ok(Some(c));
        }
    }

    /// Whether a block can be passed on in bulk, by its index entry and the other sources:
    /// `None` if not, `Some(true)` if only memtables overlap it and every consumer aggregates
    /// (so the memtables' keys can be resolved apart, in any order).
    fn eligible(&self, c: &Candidate) -> Result<Option<bool>> {
        let Some(d) = &self.driver else { return Ok(None) };
        let e = &c.reader.index()[c.block];
        if !e.clean || e.max_seq > self.rp.seq {
            return Ok(None);
        }
        let aggregating = self.consumers.iter().all(|c| matches!(c.sink, Sink::Aggs(_)));
        let mut patch = false;
        for o in &d.others {
            if overlaps(o, &self.rp, self.pass.info.id, &c.lo, &c.hi)? {
                match o {
                    Other::Mem(_) if aggregating => patch = true,
                    _ => return Ok(None),
                }
            }
        }
        Ok(Some(patch))
    }

    /// The memtables' keys in `[lo, hi)`, ascending, without repeats.
    fn memtable_keys(&self, lo: &[u8], hi: &[u8]) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let view = &self.rp.view;
        for m in std::iter::once(&view.mem).chain(view.imm.iter()) {
            let mut cur = MemCursor::new(m.clone(), self.pass.info.id, lo, Some(hi));
            while let Some(e) = cur.next_entry() {
                if keys.last() != Some(&e.key) {
                    keys.push(e.key);
                }
            }
        }
        keys.sort_unstable();
        keys.dedup();
        keys
    }

    /// Resolves `keys` one by one (point reads at the pass's read point) and feeds the rows that
    /// exist to the consumers.
    fn resolve_keys(&mut self, keys: &[Vec<u8>]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        ScanCounters::add(&self.counters.patched_keys, keys.len() as u64);
        let pass = self.pass.clone();
        let info = &pass.info;
        let wanted = pass.wanted();
        let schema = &info.schema;
        let mut builders: Vec<ValuesBuilder> = pass.needed.iter().map(|&c| ValuesBuilder::new(pass.ty(c))).collect();
        let mut present: Vec<&[u8]> = Vec::with_capacity(keys.len());
        let rp = &self.rp;
        for k in keys {
            let Some(cells) = rp.db.get_cells_at(info, &rp.t, &rp.view, rp.seq, k, Some(&wanted), false)? else {
                continue;
            };
            let key_vals = decode_key(&info.key_types, k).map_err(|e| Error::corruption("<key>", 0, e.0))?;
            for (b, &c) in builders.iter_mut().zip(&pass.needed) {
                let v = match schema.value_index(c) {
                    Some(vi) => cells.get(vi).cloned().flatten().unwrap_or(Value::Null),
                    None => {
                        let ki = schema.primary_key().iter().position(|&p| p == c).unwrap_or(0);
                        key_vals.get(ki).cloned().unwrap_or(Value::Null)
                    }
                };
                b.push(&v);
            }
            present.push(k);
        }
        if present.is_empty() {
            return Ok(());
        }
        let arrays: HashMap<usize, ArrayRef> =
            pass.needed.iter().copied().zip(builders.iter_mut().map(ValuesBuilder::finish)).collect();
        let mut chunk = RowsChunk { plan: &pass, rows: present.len(), arrays };
        for c in &mut self.consumers {
            let mask = self.ranged.then(|| present.iter().map(|k| c.in_range(k)).collect::<BooleanBuffer>());
            c.consume(&mut chunk, &[], mask)?;
        }
        Ok(())
    }

    /// Handles an eligible block for every consumer: skipped by zone maps, answered from them,
    /// or read in bulk (falling back to the merge when the groups' keys do not line up).
    fn bulk(&mut self, c: Candidate) -> Result<()> {
        // Keys the memtables hold in this block's range are resolved apart; the block's rows
        // for them are left out, and its statistics no longer describe the answer.
        let patched = if c.patch { self.memtable_keys(&c.lo, &c.hi) } else { Vec::new() };
        let Some(d) = &mut self.driver else { return Ok(()) };
        let e = &c.reader.index()[c.block];
        let rows = e.rows;
        // Zone maps of the driver's columns: exact for a whole block, a superset otherwise.
        let zone_of = |col: usize| match d.at.get(&col) {
            Some(&(0, gc)) => e.zones.get(gc),
            _ => None,
        };
        // Per consumer: nothing to do, done from the zone maps, or the verdicts to read with.
        let mut reading: Vec<Option<Vec<Verdict>>> = Vec::with_capacity(self.consumers.len());
        let mut from_stats = false;
        for con in &mut self.consumers {
            let part = con.covers(&c.lo, &c.hi);
            let verdicts: Vec<Verdict> =
                con.plan.filter.clauses().iter().map(|cl| clause_verdict(cl, rows, zone_of)).collect();
            if con.done || part == Some(false) || verdicts.contains(&Verdict::Never) {
                reading.push(None);
                continue;
            }
            let all_true = verdicts.iter().all(|v| *v == Verdict::Always);
            let plan = con.plan.clone();
            if let Sink::Aggs(states) = &mut con.sink {
                let zone_for = |a: &AggSpec| a.column.and_then(|(col, _)| zone_of(col));
                if plan.block_stats
                    && patched.is_empty()
                    && c.whole
                    && part == Some(true)
                    && all_true
                    && plan.aggs.iter().all(|a| {
                        (a.column.is_none() || zone_for(a).is_some()) && AggState::zone_answers(a, zone_for(a), rows)
                    })
                {
                    for (a, st) in plan.aggs.iter().zip(states.iter_mut()) {
                        st.update_from_zone(a, zone_for(a), rows);
                    }
                    reading.push(None);
                    from_stats = true;
                    continue;
                }
            }
            reading.push(Some(verdicts));
        }
        if from_stats {
            ScanCounters::add(&self.counters.blocks_from_stats, 1);
        }
        if reading.iter().all(Option::is_none) {
            if !from_stats {
                ScanCounters::add(&self.counters.blocks_skipped, 1);
            }
            return self.resolve_keys(&patched);
        }
        ScanCounters::add(&self.counters.blocks_read, 1);
        let block = c.reader.block(c.block, true)?;
        let range = block.seek(&c.lo)..block.seek(&c.hi);
        let mut groups = vec![vec![(block.clone(), range.clone())]];
        let mut aligned = true;
        for g in &mut d.groups {
            let segs = g.take(&self.rp, &c.lo, &c.hi, &self.counters)?;
            let mut off = range.start;
            for (b, r) in &segs {
                let n = r.len();
                aligned &= b.is_clean()
                    && b.max_seq() <= self.rp.seq
                    && off + n <= range.end
                    && b.key_bytes(r.clone()) == block.key_bytes(off..off + n);
                off += n;
            }
            aligned &= off == range.end;
            groups.push(segs);
        }
        // Clean blocks hold full rows, so every version carries every column; check anyway.
        let carried =
            d.at.values()
                .all(|&(g, col)| groups[g].iter().all(|(b, _)| b.column(col).is_some_and(|p| p.carried_by_all)));
        if !aligned || !carried {
            // Rare: read this stretch through the merge instead.
            self.start_merge(c.lo, Some(c.hi));
            return Ok(());
        }
        ScanCounters::add(&self.counters.bulk_blocks, 1);
        let at = std::mem::take(&mut d.at);
        let resolved = self.resolve_keys(&patched);
        if resolved.is_err() {
            if let Some(d) = &mut self.driver {
                d.at = at;
            }
            return resolved;
        }
        let pass = self.pass.clone();
        let mut chunk = BulkChunk { plan: &pass, rows: range.len(), groups, at: &at, full: HashMap::new() };
        let mut res = Ok(());
        let unpatched = |i: usize| patched.binary_search_by(|k| k.as_slice().cmp(block.key(range.start + i))).is_err();
        for (con, verdicts) in self.consumers.iter_mut().zip(&reading) {
            let Some(verdicts) = verdicts else { continue };
            let mask = match (con.covers(&c.lo, &c.hi), patched.is_empty()) {
                (Some(_), true) => None,
                (Some(_), false) => Some(BooleanBuffer::collect_bool(range.len(), unpatched)),
                (None, _) => Some(BooleanBuffer::collect_bool(range.len(), |i| {
                    con.in_range(block.key(range.start + i)) && unpatched(i)
                })),
            };
            res = con.consume(&mut chunk, verdicts, mask);
            if res.is_err() {
                break;
            }
        }
        if let Some(d) = &mut self.driver {
            d.at = at;
        }
        res
    }
}

/// Whether source `o` has any key in `[lo, hi)` (any sequence number: a newer invisible version
/// only costs the bulk path, never correctness).
fn overlaps(o: &Other, rp: &ReadPoint, table: u32, lo: &[u8], hi: &[u8]) -> Result<bool> {
    match o {
        Other::Mem(m) => Ok(m.has_in(table, lo, hi)),
        Other::Run(files) => {
            let fi = files.partition_point(|f| f.largest.as_slice() < lo);
            let Some(f) = files.get(fi) else { return Ok(false) };
            if f.smallest.as_slice() >= hi {
                return Ok(false);
            }
            if f.smallest.as_slice() >= lo {
                return Ok(true);
            }
            let r = rp.db.tables.get(f.number)?;
            let bi = r.find_block(lo);
            let Some(e) = r.index().get(bi) else { return Ok(false) };
            if e.last_key.as_slice() < hi {
                return Ok(true);
            }
            let b = r.block(bi, true)?;
            let i = b.seek(lo);
            Ok(i < b.len() && b.key(i) < hi)
        }
    }
}

/// Sets up the driving level for a partition starting at `lower`, or `None` when every key must
/// go through the merge (no level below 0 holds all the needed columns).
fn driver(plan: &Plan, rp: &ReadPoint, lower: &[u8]) -> Result<Option<Driver>> {
    let info = &plan.info;
    let wanted = plan.wanted();
    let fresh = Resolver::new(info.value_types.len(), Some(&wanted));
    let levels = &rp.t.levels;
    let Some(dl) = (1..levels.len()).rev().find(|&l| levels[l].runs.iter().any(|r| fresh.wants(run_cover(info, l, r))))
    else {
        return Ok(None);
    };
    // The driving level's runs of needed groups; the driver is the one holding the first filter
    // column (or the first needed column).
    let runs: Vec<_> = levels[dl].runs.iter().filter(|r| fresh.wants(run_cover(info, dl, r))).collect();
    let cover_of = |r: &&crate::version::Run| {
        run_cover(info, dl, r).map(|c| c.to_vec()).unwrap_or_else(|| (0..info.value_types.len()).collect())
    };
    let first = plan.filter.columns().chain(plan.needed.iter().copied()).find_map(|c| info.schema.value_index(c));
    let driver_idx = match first {
        Some(vi) => runs.iter().position(|r| cover_of(r).contains(&vi)),
        None => Some(0),
    };
    let Some(driver_idx) = driver_idx else { return Ok(None) };
    let mut ordered = vec![runs[driver_idx]];
    ordered.extend(runs.iter().enumerate().filter(|(i, _)| *i != driver_idx).map(|(_, r)| *r));
    let mut at = HashMap::new();
    for (g, r) in ordered.iter().enumerate() {
        for (c, &vi) in cover_of(r).iter().enumerate() {
            if wanted.get(vi).copied().unwrap_or(false) {
                at.insert(info.schema.value_columns()[vi], (g, c));
            }
        }
    }
    // Every needed value column must come from the driving level.
    if plan.needed.iter().any(|&c| info.schema.value_index(c).is_some() && !at.contains_key(&c)) {
        return Ok(None);
    }
    let mut others: Vec<Other> =
        std::iter::once(&rp.view.mem).chain(rp.view.imm.iter()).map(|m| Other::Mem(m.clone())).collect();
    for (l, level) in levels.iter().enumerate() {
        if l == dl {
            continue;
        }
        for r in &level.runs {
            if !r.files.is_empty() && fresh.wants(run_cover(info, l, r)) {
                others.push(Other::Run(r.files.clone()));
            }
        }
    }
    let files = ordered[0].files.clone();
    let fi = files.partition_point(|f| f.largest.as_slice() < lower);
    Ok(Some(Driver {
        files,
        fi,
        reader: None,
        bi: 0,
        next_lo: lower.to_vec(),
        groups: ordered[1..].iter().map(|r| GroupCursor::new(r.files.clone())).collect(),
        at,
        others,
    }))
}

/// Splits `[lower, upper)` into at most `n` ranges at block boundaries of the driving group, so
/// partitions cover similar amounts of data. One range when there is no driving level.
fn split(plan: &Plan, rp: &ReadPoint, lower: &[u8], upper: Option<&[u8]>, n: usize) -> Result<Vec<Vec<u8>>> {
    let mut cuts = Vec::new();
    if n > 1 {
        if let Some(d) = driver(plan, rp, lower)? {
            let mut fences: Vec<Vec<u8>> = Vec::new();
            for f in &d.files[d.fi..] {
                if upper.is_some_and(|u| f.smallest.as_slice() >= u) {
                    break;
                }
                let r = rp.db.tables.get(f.number)?;
                fences.extend(
                    r.index()
                        .iter()
                        .map(|e| successor(&e.last_key))
                        .filter(|k| k.as_slice() > lower && upper.is_none_or(|u| k.as_slice() < u)),
                );
            }
            let per = fences.len().div_ceil(n).max(1);
            cuts.extend(fences.into_iter().skip(per - 1).step_by(per).take(n - 1));
        }
    }
    Ok(cuts)
}

pub(crate) fn pool(db: &DbInner) -> Result<&rayon::ThreadPool> {
    if let Some(p) = db.scan_pool.get() {
        return Ok(p);
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(db.opts.scan_threads)
        .thread_name(|i| format!("strata-scan-{i}"))
        .build()
        .map_err(|e| Error::io(&db.dir, std::io::Error::other(format!("cannot start scan threads: {e}"))))?;
    Ok(db.scan_pool.get_or_init(|| p))
}

/// The batches of a scan, in key order (one batch for aggregates).
pub struct BatchIter {
    schema: SchemaRef,
    inner: Inner,
}

enum Inner {
    Serial(Box<Partition>),
    /// Partitions running on the scan pool, read in key order; `left` rows of the limit remain.
    Parallel {
        parts: std::collections::VecDeque<std::sync::mpsc::Receiver<Result<RecordBatch>>>,
        left: Option<usize>,
    },
    Ready(std::vec::IntoIter<RecordBatch>),
    Failed,
}

impl BatchIter {
    /// The schema every batch has.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

impl Iterator for BatchIter {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = match &mut self.inner {
            Inner::Serial(p) => p.next_batch().transpose(),
            Inner::Parallel { parts, left } => loop {
                if *left == Some(0) {
                    // Dropping the receivers stops the partitions still running.
                    parts.clear();
                    return None;
                }
                let rx = parts.front()?;
                match rx.recv() {
                    Ok(Ok(mut b)) => {
                        if let Some(l) = left {
                            b = b.slice(0, b.num_rows().min(*l));
                            *l -= b.num_rows();
                        }
                        break Some(Ok(b));
                    }
                    Ok(Err(e)) => break Some(Err(e)),
                    // That partition is finished.
                    Err(_) => {
                        parts.pop_front();
                    }
                }
            },
            Inner::Ready(it) => it.next().map(Ok),
            Inner::Failed => None,
        };
        if matches!(item, Some(Err(_))) {
            self.inner = Inner::Failed;
        }
        item
    }
}

/// Runs `req` over the keys `[lower, upper)` of a table.
pub(crate) fn run_scan(
    db: &Arc<DbInner>,
    info: &Arc<TableInfo>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    req: &ScanRequest,
    ropts: &ReadOptions<'_>,
) -> Result<BatchIter> {
    db.check_open()?;
    let plan = Arc::new(Plan::new(info, req)?);
    if req.shared {
        let schema = plan.schema.clone();
        let batches = super::shared::join(db, info, plan, lower, upper, ropts)?;
        return Ok(BatchIter { schema, inner: Inner::Ready(batches.into_iter()) });
    }
    let (seq, view) = db.read_point(ropts)?;
    let t = db.table_at(&view, info)?;
    let wanted = plan.wanted();
    record_scan(info, &t, &lower, upper.as_deref(), Some(&wanted));
    let rp = Arc::new(ReadPoint { db: db.clone(), view, t, seq });
    let counters = db.scan_counters.clone();
    ScanCounters::add(&counters.scans, 1);
    ScanCounters::add(&counters.passes, 1);
    let schema = plan.schema.clone();
    let cuts = split(&plan, &rp, &lower, upper.as_deref(), req.partitions)?;
    let mut ranges = Vec::with_capacity(cuts.len() + 1);
    let mut from = lower;
    for c in cuts {
        ranges.push((std::mem::replace(&mut from, c.clone()), Some(c)));
    }
    ranges.push((from, upper));
    let mut parts = ranges
        .into_iter()
        .map(|(lo, hi)| {
            let consumer = Consumer::new(plan.clone(), lo.clone(), hi.clone());
            Partition::new(plan.clone(), vec![consumer], rp.clone(), counters.clone(), lo, hi)
        })
        .collect::<Result<Vec<_>>>()?;
    let inner = if !plan.aggs.is_empty() {
        let states: Vec<Result<Vec<AggState>>> = if parts.len() == 1 {
            parts.into_iter().map(Partition::into_states).collect()
        } else {
            use rayon::prelude::*;
            pool(db)?.install(|| parts.into_par_iter().map(Partition::into_states).collect())
        };
        let mut total = vec![AggState::default(); plan.aggs.len()];
        for st in states {
            for ((a, t), s) in plan.aggs.iter().zip(total.iter_mut()).zip(st?) {
                t.merge(a, s);
            }
        }
        Inner::Ready(vec![finish_batch(&plan.aggs, &total)?].into_iter())
    } else if parts.len() == 1 {
        match parts.pop() {
            Some(p) => Inner::Serial(Box::new(p)),
            None => Inner::Ready(Vec::new().into_iter()),
        }
    } else {
        // Each partition streams into its own small channel; partitions start in key order on
        // the pool, and the reader drains them in that order, so the oldest running partition is
        // always being read and progress is guaranteed.
        let pool = pool(db)?;
        let mut rxs = std::collections::VecDeque::with_capacity(parts.len());
        for mut p in parts {
            let (tx, rx) = std::sync::mpsc::sync_channel(2);
            pool.spawn_fifo(move || loop {
                match p.next_batch() {
                    Ok(Some(b)) => {
                        if tx.send(Ok(b)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            });
            rxs.push_back(rx);
        }
        Inner::Parallel { parts: rxs, left: plan.limit }
    };
    Ok(BatchIter { schema, inner })
}
