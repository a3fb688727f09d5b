//! Running a pass over one key range (a partition of a scan, or a shared pass).
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
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_buffer::BooleanBuffer;

use super::agg::{AggSpec, AggState};
use super::arrow::{arrow_err, ValuesBuilder};
use super::chunk::{BulkChunk, Patch, Segment};
use super::columns;
use super::consumer::{feed_rows, Consumer, Sink};
use super::driver::{driver, overlaps, successor, Candidate, Driver, Other};
use super::eval::{clause_verdict, Verdict};
use super::overlay::{self, MemBounds, Outcome, Overlay};
use super::plan::Plan;
use super::state::ScanCounters;
use crate::catalog::TableInfo;
use crate::error::{Error, Result};
use crate::read::{project, ReadPoint, ScanIter};
use crate::sst::rowgroup::RowGroupReader;
use crate::sst::zone::ZoneMap;
use crate::types::row::Cells;

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
    /// The pass aggregates column by column, run by run ([`super::columns`]).
    columnwise: bool,
    /// Bounds over the memtables' versions of the table.
    mem_bounds: MemBounds,
    /// A block overlapped by runs above had whole rows of keys it lacks while rows go out: blocks
    /// such runs overlap are merged from then on instead of patched.
    runs_insert: bool,
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
        // Column by column needs complete supersede vectors: none while a flush's marking of
        // the slow tier is deferred (the merge below resolves versions itself, and the scan
        // asks for the staging compaction that completes them).
        let columnwise = match consumers.as_slice() {
            [c] => Arc::ptr_eq(&c.plan, &pass) && c.lower == lower && c.upper == upper && columns::applies(&pass),
            _ => false,
        };
        let columnwise = columnwise && {
            let complete = rp.t.deferred.is_empty();
            if let Some(wish) = rp.staging.as_ref().filter(|_| !complete) {
                wish.raise();
            }
            complete
        };
        let driver = if done || columnwise { None } else { driver(&pass, &rp, &lower)? };
        // Rows carry their keys when some consumer wants less than the whole pass.
        let ranged = consumers.iter().any(|c| {
            c.lower > lower
                || match (&c.upper, &upper) {
                    (None, _) => false,
                    (Some(_), None) => true,
                    (Some(cu), Some(u)) => cu < u,
                }
        });
        let mem_bounds = overlay::bounds(&rp.view, pass.info.id, &pass.info.value_types);
        Ok(Partition {
            mem_bounds,
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
            columnwise,
            runs_insert: false,
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
        if self.columnwise && !self.done {
            return columns::aggregate(&self.pass, &self.rp, &self.pos, self.upper.as_deref(), &self.counters);
        }
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
                feed_rows(&self.pass, &mut self.consumers, self.ranged, builders, n, &keys)?;
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
                if let Some((patch, runs)) = self.eligible(&c)? {
                    c.patch = patch;
                    c.runs = runs;
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
        let projection = self.pass.projection();
        let rp = &self.rp;
        let iter = rp.rows(info, lower, upper, &projection);
        let builders = self.pass.needed.iter().map(|&c| ValuesBuilder::new(self.pass.ty(c))).collect();
        self.merge = Some((iter, builders));
    }

    fn next_candidate(&mut self) -> Result<Option<Candidate>> {
        let Some(d) = &mut self.driver else { return Ok(None) };
        let tables = &self.rp.tables;
        if !d.started {
            d.walk.seek_block(tables, &d.next_lo)?;
            d.started = true;
        }
        let (Some(f), Some(reader)) = (d.walk.file().cloned(), d.walk.reader().cloned()) else { return Ok(None) };
        if self.upper.as_ref().is_some_and(|u| d.next_lo >= *u) {
            return Ok(None);
        }
        let bi = d.walk.block_index();
        let e = &reader.index()[bi];
        let last_succ = successor(&e.last_key);
        let (hi, whole_end) = match &self.upper {
            Some(u) if *u < last_succ => (u.clone(), false),
            _ => (last_succ, true),
        };
        let whole_start = match bi.checked_sub(1) {
            None => f.smallest.as_slice() >= d.next_lo.as_slice(),
            Some(p) => d.next_lo <= successor(&reader.index()[p].last_key),
        };
        let lo = std::mem::replace(&mut d.next_lo, hi.clone());
        d.walk.skip_block(tables)?;
        Ok(Some(Candidate {
            reader,
            block: bi,
            lo,
            hi,
            whole: whole_start && whole_end,
            patch: false,
            runs: Vec::new(),
        }))
    }

    /// Whether a block can be passed on in bulk, by its index entry and the other sources:
    /// `None` if not; otherwise whether other sources overlap it (their keys there are then laid
    /// over its rows), and which of the driver's runs do.
    fn eligible(&self, c: &Candidate) -> Result<Option<(bool, Vec<usize>)>> {
        let Some(d) = &self.driver else { return Ok(None) };
        let e = &c.reader.index()[c.block];
        if !e.clean || e.max_seq > self.rp.seq {
            return Ok(None);
        }
        let mut patch = false;
        let mut runs = Vec::new();
        for (i, o) in d.others.iter().enumerate() {
            if overlaps(o, &self.rp, self.pass.info.id, &c.lo, &c.hi)? {
                patch = true;
                if let Other::Run(_) = o {
                    if self.runs_insert {
                        return Ok(None);
                    }
                    runs.push(i);
                }
            }
        }
        Ok(Some((patch, runs)))
    }

    /// Feeds whole rows the memtables hold for keys no block row has (`rows`: key, value
    /// columns) to the consumers.
    fn feed_apart(&mut self, rows: Vec<(Vec<u8>, Cells)>) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let pass = self.pass.clone();
        let info = &pass.info;
        let projection = pass.projection();
        let mut builders: Vec<ValuesBuilder> = pass.needed.iter().map(|&c| ValuesBuilder::new(pass.ty(c))).collect();
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(rows.len());
        for (k, cells) in rows {
            for (b, v) in builders.iter_mut().zip(&project(info, &k, cells, &projection)?) {
                b.push(v);
            }
            keys.push(k);
        }
        feed_rows(&pass, &mut self.consumers, self.ranged, &mut builders, keys.len(), &keys)
    }

    /// Handles an eligible block for every consumer: skipped by zone maps, answered from them,
    /// or read in bulk (falling back to the merge when the groups' keys do not line up).
    fn bulk(&mut self, c: Candidate) -> Result<()> {
        let Some(d) = &mut self.driver else { return Ok(()) };
        let e = &c.reader.index()[c.block];
        let rows = e.rows;
        // Zone maps of the driver's columns: exact for a whole block, a superset otherwise. Each
        // is decoded on first use. Where the memtables hold keys in the block's range, widened
        // by their bounds, so a verdict holds for their versions too.
        let decoded: Vec<std::cell::OnceCell<Option<ZoneMap>>> = vec![std::cell::OnceCell::new(); e.zones.len()];
        let info = &self.pass.info;
        let bounds = &self.mem_bounds;
        // Runs above overlap the block: their versions are not in any bound the scan holds.
        let zones_hold = c.runs.is_empty();
        let zone_of = |col: usize| match d.at.get(&col) {
            Some(&(0, gc)) if zones_hold => decoded
                .get(gc)?
                .get_or_init(|| {
                    let z = e.zones.get(gc)?;
                    if !c.patch {
                        return Some(z);
                    }
                    let mem =
                        info.schema.value_index(col).filter(|&vi| bounds.carries(vi)).and_then(|vi| bounds.zone(vi));
                    overlay::widen_zone(&z, mem, rows)
                })
                .as_ref(),
            _ => None,
        };
        // Per consumer: nothing to do, done from the zone maps, or the verdicts to read with.
        // Zone answers are taken only once it is certain the block is not read through the merge
        // instead (which feeds every consumer).
        let mut reading: Vec<Option<Vec<Verdict>>> = Vec::with_capacity(self.consumers.len());
        let mut from_zones: Vec<(usize, Vec<Option<&ZoneMap>>)> = Vec::new();
        for (ci, con) in self.consumers.iter().enumerate() {
            let part = con.covers(&c.lo, &c.hi);
            let verdicts: Vec<Verdict> =
                con.plan.filter.clauses().iter().map(|cl| clause_verdict(cl, rows, zone_of)).collect();
            if con.done || part == Some(false) || verdicts.contains(&Verdict::Never) {
                reading.push(None);
                continue;
            }
            let all_true = verdicts.iter().all(|v| *v == Verdict::Always);
            let plan = &con.plan;
            if matches!(con.sink, Sink::Aggs(_)) {
                let zone_for = |a: &AggSpec| a.column.and_then(|(col, _)| zone_of(col));
                if plan.block_stats
                    && !c.patch
                    && c.whole
                    && part == Some(true)
                    && all_true
                    && plan.aggs.iter().all(|a| {
                        (a.column.is_none() || zone_for(a).is_some()) && AggState::zone_answers(a, zone_for(a), rows)
                    })
                {
                    from_zones.push((ci, plan.aggs.iter().map(zone_for).collect()));
                    reading.push(None);
                    continue;
                }
            }
            reading.push(Some(verdicts));
        }
        let take_zones = |consumers: &mut [Consumer], counters: &ScanCounters| {
            if from_zones.is_empty() {
                return;
            }
            ScanCounters::add(&counters.blocks_from_stats, 1);
            for (ci, zones) in &from_zones {
                let con = &mut consumers[*ci];
                if let Sink::Aggs(states) = &mut con.sink {
                    for ((a, st), z) in con.plan.aggs.iter().zip(states.iter_mut()).zip(zones) {
                        st.update_from_zone(a, *z, rows);
                    }
                }
            }
        };
        if reading.iter().all(Option::is_none) {
            if from_zones.is_empty() {
                ScanCounters::add(&self.counters.blocks_skipped, 1);
            }
            // The memtables' keys in the range too: the verdicts took their bounds in.
            take_zones(&mut self.consumers, &self.counters);
            return Ok(());
        }
        ScanCounters::add(&self.counters.blocks_read, 1);
        // A row-group file's block is a key page: its keys, with the needed groups' pages
        // gathered by ordinal (aligned by construction), and its own map of the columns.
        let rows = c.reader.row_groups().filter(|_| d.groups.is_empty()).cloned();
        let (block, range, groups, own_at, aligned) = match rows {
            Some(rows) => {
                let keys = rows.key_page(c.block)?;
                let range = keys.seek(&c.lo)..keys.seek(&c.hi);
                let (groups, at) = row_group_segments(&rows, &self.pass.info, &d.at, c.block, range.clone())?;
                (keys, range, groups, Some(at), true)
            }
            None => {
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
                (block, range, groups, None, aligned)
            }
        };
        // Clean blocks hold full rows, so every version carries every column; check anyway.
        let carried = own_at
            .as_ref()
            .unwrap_or(&d.at)
            .values()
            .all(|&(g, col)| groups[g].iter().all(|(b, _)| b.column(col).is_some_and(|p| p.carried_by_all)));
        // The memtables' keys in the range, laid over the block's rows: a delete leaves its row
        // out, a whole or partial row gives it new values; a whole row of a key the block lacks
        // goes to the consumers apart.
        let mut patch = Patch::default();
        let mut gone: Vec<usize> = Vec::new();
        let mut apart: Vec<(Vec<u8>, Cells)> = Vec::new();
        if c.patch {
            let rp = &self.rp;
            let mem = if c.runs.is_empty() {
                Overlay::build(&rp.view, info.id, &c.lo, Some(&c.hi), rp.seq, &info.value_types, self.pass.wanted())?
            } else {
                let runs: Vec<_> = c
                    .runs
                    .iter()
                    .filter_map(|&i| match d.others.get(i) {
                        Some(Other::Run(files)) => Some(files.clone()),
                        _ => None,
                    })
                    .collect();
                let floor = c.reader.index()[c.block].max_seq;
                let built = Overlay::build_over_runs(rp, &runs, info, (&c.lo, &c.hi), self.pass.wanted(), floor)?;
                let Some(mem) = built else {
                    // A version above is not newer than the block's: only the merge orders them.
                    self.start_merge(c.lo, Some(c.hi));
                    return Ok(());
                };
                ScanCounters::add(&self.counters.run_patched_blocks, 1);
                mem
            };
            ScanCounters::add(&self.counters.patched_keys, mem.len() as u64);
            let mut r = 0;
            for (k, outcome) in mem.into_entries() {
                while r < range.len() && block.key(range.start + r) < k.as_slice() {
                    r += 1;
                }
                let here = r < range.len() && block.key(range.start + r) == k.as_slice();
                match (outcome, here) {
                    (Outcome::Gone, true) => gone.push(r),
                    (Outcome::Row(cells) | Outcome::Partial(cells), true) => patch.push(r, cells),
                    (Outcome::Row(cells), false) => apart.push((k, cells)),
                    (Outcome::Gone | Outcome::Partial(_), false) => {}
                }
            }
        }
        let rows_out = self.consumers.iter().any(|c| matches!(c.sink, Sink::Rows { .. }));
        if !aligned || !carried || (!apart.is_empty() && rows_out) {
            if rows_out && !c.runs.is_empty() && !apart.is_empty() {
                // Runs above insert rows between the driver's keys (a stream of new keys, as
                // TPC-H's refresh writes): resolving their keys before every merge is work thrown
                // away, so the rest of the pass merges such blocks straight away.
                self.runs_insert = true;
            }
            // Rare: read this stretch through the merge instead (rows come out in key order).
            self.start_merge(c.lo, Some(c.hi));
            return Ok(());
        }
        take_zones(&mut self.consumers, &self.counters);
        ScanCounters::add(&self.counters.bulk_blocks, 1);
        let own = own_at.is_some();
        let at = own_at.unwrap_or_else(|| std::mem::take(&mut d.at));
        let pass = self.pass.clone();
        let mut chunk = BulkChunk { plan: &pass, rows: range.len(), groups, at: &at, full: HashMap::new(), patch };
        let mut res = Ok(());
        let kept = |i: usize| gone.binary_search(&i).is_err();
        for (con, verdicts) in self.consumers.iter_mut().zip(&reading) {
            let Some(verdicts) = verdicts else { continue };
            let mask = match (con.covers(&c.lo, &c.hi), gone.is_empty()) {
                (Some(_), true) => None,
                (Some(_), false) => Some(BooleanBuffer::collect_bool(range.len(), kept)),
                (None, _) => Some(BooleanBuffer::collect_bool(range.len(), |i| {
                    con.in_range(block.key(range.start + i)) && kept(i)
                })),
            };
            res = con.consume(&mut chunk, verdicts, mask);
            if res.is_err() {
                break;
            }
        }
        if let (Some(d), false) = (&mut self.driver, own) {
            d.at = at;
        }
        res?;
        self.feed_apart(apart)
    }
}

/// Schema column → (group of a bulk chunk, column within the group's blocks).
type ColumnsAt = HashMap<usize, (usize, usize)>;

/// The segments of a bulk chunk over rows `range` of key page `p` of a row-group file: the key
/// page's, then each group holding a column of `driver_at` (the driver's map of the needed
/// columns), its pages over the same ordinals; with the chunk's map of those columns.
fn row_group_segments(
    rows: &RowGroupReader,
    info: &TableInfo,
    driver_at: &HashMap<usize, (usize, usize)>,
    p: usize,
    range: std::ops::Range<usize>,
) -> Result<(Vec<Vec<Segment>>, ColumnsAt)> {
    let first = rows.key_page_rows(p).start;
    let ordinals = first + range.start as u64..first + range.end as u64;
    let mut groups: Vec<Vec<Segment>> = vec![vec![(rows.key_page(p)?, range)]];
    let mut chunk_group: HashMap<usize, usize> = HashMap::new();
    let mut at = HashMap::with_capacity(driver_at.len());
    for &col in driver_at.keys() {
        let placed = info.schema.value_index(col).and_then(|vi| rows.place(vi));
        let Some((g, c)) = placed else {
            return Err(Error::corruption("<scan>", 0, format!("a row-group file lacks value column {col}")));
        };
        let i = match chunk_group.get(&g) {
            Some(&i) => i,
            None => {
                groups.push(rows.group_rows(g, ordinals.clone())?);
                chunk_group.insert(g, groups.len() - 1);
                groups.len() - 1
            }
        };
        at.insert(col, (i, c));
    }
    Ok((groups, at))
}
