//! Making supersede vectors ([`marks`](crate::version::marks)): merge-on-write, done by flush
//! and compaction in the background, never by a writer.
//!
//! Rule: a version `o` of key `k` in an SST is superseded for column `c` from sequence number
//! `m` on, where `m` is the smallest sequence number of a newer version of `k` in the SSTs that
//! covers `c` — a full row or tombstone (which supersedes the whole row), or a partial row
//! carrying `c`. A read at `S` sees `o`'s `c` exactly when `o.seq <= S < m`. Versions in
//! memtables mark nothing; readers look at memtables themselves.
//!
//! Who marks what:
//! - A flush probes, for every key it writes, the older runs holding the key's columns (bloom
//!   filter, then fence keys, then the block; keys ascending, so each run is walked forward
//!   once) and marks the versions found. The same probe tells whether the row exists below the
//!   flushed versions: partial rows over no row (or over a tombstone) are invisible at every read
//!   point, so the flush drops them, and every partial row in an SST has a full row below it.
//! - A compaction marks its output versions among themselves as it writes them (it may have
//!   merged versions), and carries over the marks its inputs had from versions above the
//!   compaction (those newer than every input version of the key). Marks of versions below the
//!   output stay valid: they name sequence numbers, and compaction changes no read at any live
//!   read point.
//! - Both catch up before installing ([`catch_up_flush`], [`catch_up_compaction`]): files that
//!   appeared since they read their version (a compaction's outputs during a flush, a flush's
//!   file during a compaction) are probed, once before taking the version lock and once more
//!   under it for what appeared meanwhile, so no mark is lost to a race.
//!
//! [`check`] recomputes every mark from scratch and compares, for the tests.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

use crate::catalog::TableInfo;
use crate::error::{Error, Result};
use crate::iter::merge::Origin;
use crate::mvcc::{Entry, Kind};
use crate::sst::block::Block;
use crate::sst::bloom;
use crate::sst::keyset::KeySet;
use crate::sst::reader::SstReader;
use crate::sst::run::RunCursor;
use crate::sst::table_cache::TableCache;
use crate::types::row::{carried, carries};
use crate::version::edit::EditRecord;
use crate::version::marks::{Mark, MarkChunk, Marks, WHOLE};
use crate::version::{FileMeta, TableVersion, Version};

/// A newer version as marking sees it.
#[derive(Debug, Clone)]
struct Sup {
    seq: u64,
    kind: Kind,
    /// The value columns a partial row carries (empty otherwise).
    cols: Vec<usize>,
}

impl Sup {
    fn of_entry(e: &Entry, nvals: usize) -> Sup {
        let cols = if e.kind == Kind::Update { carried(&e.row, nvals).collect() } else { Vec::new() };
        Sup { seq: e.seq, kind: e.kind, cols }
    }

    fn of_row(b: &Block, i: usize, columns: &[usize]) -> Sup {
        let kind = b.kind(i);
        let cols = if kind == Kind::Update {
            columns.iter().enumerate().filter(|&(j, _)| b.carries(i, j)).map(|(_, &c)| c).collect()
        } else {
            Vec::new()
        };
        Sup { seq: b.seq(i), kind, cols }
    }
}

/// A version being marked: its position in its file, and the group columns it carries.
struct Target {
    row: u32,
    seq: u64,
    kind: Kind,
    /// Positions in the group.
    carried: Vec<usize>,
}

impl Target {
    fn of_row(b: &Block, i: usize, row: u64, ncols: usize) -> Result<Target> {
        let kind = b.kind(i);
        let carried = match kind {
            Kind::Delete => Vec::new(),
            Kind::Put => (0..ncols).collect(),
            Kind::Update => (0..ncols).filter(|&j| b.carries(i, j)).collect(),
        };
        let row = u32::try_from(row).map_err(|_| Error::InvalidArgument("file holds over 2^32 versions".into()))?;
        Ok(Target { row, seq: b.seq(i), kind, carried })
    }

    fn of_entry(e: &Entry, row: u32, group: &[usize], nvals: usize) -> Target {
        let carried = match e.kind {
            Kind::Delete => Vec::new(),
            Kind::Put => (0..group.len()).collect(),
            Kind::Update => (0..group.len()).filter(|&j| carries(&e.row, nvals, group[j])).collect(),
        };
        Target { row, seq: e.seq, kind: e.kind, carried }
    }
}

/// Adds the marks `sups` (and `ext`, marks from above a compaction) put on `t` (a version of
/// the same key in a file of `group`) that `existing` does not already imply.
fn mark(t: &Target, group: &[usize], sups: &[Sup], ext: &Ext, existing: Option<&Marks>, out: &mut Vec<Mark>) {
    let newer = || sups.iter().filter(|s| s.seq > t.seq);
    let min = |a: Option<u64>, b: Option<u64>| a.into_iter().chain(b).min();
    let whole = min(newer().filter(|s| s.kind != Kind::Update).map(|s| s.seq).min(), ext.whole);
    if let Some(w) = whole {
        if existing.and_then(|m| m.whole_at(t.row)).is_none_or(|e| e > w) {
            out.push(Mark { row: t.row, col: WHOLE, seq: w });
        }
    }
    if t.kind == Kind::Delete {
        return;
    }
    for &j in &t.carried {
        let c = group[j];
        let Some(m) =
            min(newer().filter(|s| s.kind == Kind::Update && s.cols.contains(&c)).map(|s| s.seq).min(), ext.col(c))
        else {
            continue;
        };
        let Ok(col) = u16::try_from(j) else { continue };
        if whole.is_none_or(|w| m < w) && existing.and_then(|e| e.superseded_at(t.row, j)).is_none_or(|e| e > m) {
            out.push(Mark { row: t.row, col, seq: m });
        }
    }
}

/// A key's versions found in one file: rows of a block and, where they reach its end and the
/// next blocks go on with the key (a row-group file cuts its key pages at fixed row counts, so
/// a key's versions may continue on the next page), rows of those.
struct Hit {
    number: u64,
    parts: smallvec::SmallVec<[HitPart; 1]>,
}

/// Rows `rows` of a block whose first row is row `first_row` of its file.
struct HitPart {
    block: Arc<Block>,
    first_row: u64,
    rows: Range<usize>,
}

impl Hit {
    /// The key's versions, newest first: each one's block, row there and row in the file.
    fn versions(&self) -> impl Iterator<Item = (&Block, usize, u64)> + '_ {
        self.parts.iter().flat_map(|p| p.rows.clone().map(move |i| (&*p.block, i, p.first_row + i as u64)))
    }

    /// The key (the hit has at least one version).
    fn key(&self) -> &[u8] {
        let p = &self.parts[0];
        p.block.key(p.rows.start)
    }

    /// The block of the key's last version and the row after that version there.
    fn end(&self) -> (&Arc<Block>, usize) {
        let p = &self.parts[self.parts.len() - 1];
        (&p.block, p.rows.end)
    }
}

/// A forward-only probe of one sorted run by ascending keys: it keeps its place (file, block,
/// row), so probing keys that lie close together walks the run once.
pub(crate) struct RunProbe {
    cursor: RunCursor,
    /// The value columns of the run's group, ascending.
    columns: Vec<usize>,
    /// Whether [`Marker::flush`] screened the run by exact key sets.
    screened: bool,
    /// The open file's number and its exact key set, if one is kept.
    keys: Option<(u64, Option<Arc<KeySet>>)>,
}

/// Bytes a dense marking probe reads at once: on a disk it costs about two block reads, so it
/// pays once two of its sixteen 16 KiB blocks are probed.
const PROBE_READ_AHEAD: u64 = 256 << 10;

impl RunProbe {
    /// A probe of `files` (one run; `columns`: its group's). Once it probes blocks close
    /// together it reads [`PROBE_READ_AHEAD`] at a time: a flush of many updates probes most
    /// blocks of the older runs, and block by block a disk would position for each. Blocks are
    /// read around the block cache, as compaction reads its inputs: a load would otherwise fill
    /// the cache with blocks no reader asked for (a 64 MiB cache then cost a load 65-83 MiB).
    pub(crate) fn new(files: Vec<Arc<FileMeta>>, columns: Vec<usize>) -> Self {
        let cursor = RunCursor::new(files, false).read_ahead_when_dense(PROBE_READ_AHEAD);
        RunProbe { cursor, columns, screened: false, keys: None }
    }

    /// The versions of `key` in the run. Keys must not decrease from call to call. With
    /// `hash` the file's exact key set (Level-0 files a flush wrote since open) or else its bloom
    /// filter is asked before any block is read.
    fn find(&mut self, tables: &TableCache, key: &[u8], hash: Option<u64>) -> Result<Option<Hit>> {
        if !self.cursor.open_file_for(tables, key)? {
            return Ok(None);
        }
        let (Some(f), Some(r)) = (self.cursor.file(), self.cursor.reader()) else { return Ok(None) };
        if key < f.smallest.as_slice() {
            return Ok(None);
        }
        if self.keys.as_ref().is_none_or(|(n, _)| *n != f.number) {
            self.keys = Some((f.number, tables.key_set(f.number)));
        }
        let keys = self.keys.as_ref().and_then(|(_, k)| k.as_ref());
        if let (Some(h), Some(keys)) = (hash, keys) {
            if !keys.contains(h) {
                return Ok(None);
            }
        }
        // Within the block already read, the key is looked for without asking the filter.
        if !self.cursor.block_reaches(key) && keys.is_none() && hash.is_some_and(|h| !r.may_contain(h)) {
            return Ok(None);
        }
        self.cursor.seek(tables, key)?;
        let (Some(r), Some(b)) = (self.cursor.reader(), self.cursor.block()) else { return Ok(None) };
        hit_at(r, b, self.cursor.block_index(), self.cursor.row(), key)
    }
}

/// The values in both ascending slices.
fn sorted_common<'s>(a: &'s [u64], b: &'s [u64]) -> impl Iterator<Item = u64> + 's {
    let (mut i, mut j) = (0, 0);
    std::iter::from_fn(move || {
        while i < a.len() && j < b.len() {
            match a[i].cmp(&b[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                    return Some(a[i - 1]);
                }
            }
        }
        None
    })
}

/// The versions of `key` in `r` from row `start` of block `bi` (`b`) on, going on into the next
/// blocks while the key's versions fill a block to its end and the next one continues it.
fn hit_at(r: &SstReader, b: &Arc<Block>, bi: usize, start: usize, key: &[u8]) -> Result<Option<Hit>> {
    let run_end = |b: &Block, from: usize| (from..b.len()).find(|&i| b.key(i) != key).unwrap_or(b.len());
    let end = run_end(b, start);
    if end == start {
        return Ok(None);
    }
    let mut parts = smallvec::SmallVec::new();
    parts.push(HitPart { block: b.clone(), first_row: r.first_row(bi), rows: start..end });
    let (mut bi, mut end, mut len) = (bi, end, b.len());
    while end == len && r.index().get(bi + 1).is_some_and(|e| e.continues) {
        bi += 1;
        let next = r.block(bi, false)?;
        end = run_end(&next, 0);
        len = next.len();
        if end == 0 {
            break;
        }
        parts.push(HitPart { block: next, first_row: r.first_row(bi), rows: 0..end });
    }
    Ok(Some(Hit { number: r.number(), parts }))
}

/// The value columns of a run at `level` (all of them for whole rows).
fn run_columns(info: &TableInfo, level: usize, run: &crate::version::Run) -> Vec<usize> {
    run.cover(info, level).map_or_else(|| (0..info.value_types.len()).collect(), <[usize]>::to_vec)
}

/// Marks made by one flush or compaction, by file number.
pub(crate) type Made = BTreeMap<u64, Vec<Mark>>;

/// Marks versions while a flush or compaction writes one table's files (see the module doc).
pub(crate) struct Marker<'a> {
    tables: &'a TableCache,
    nvals: usize,
    /// Flush: the runs below the new file.
    older: Vec<RunProbe>,
    /// Flush: some runs below were left out (deferred marking), so a row not found may exist.
    partial_probe: bool,
    /// Flush: for the flushed keys' hashes that runs with exact key sets hold, which of those
    /// runs (bit `i`: `older[i]`); such runs are probed for no other key.
    screen: HashMap<u64, u64>,
    /// Compaction: each input file's marks and the value columns of its group, by number.
    inputs: HashMap<u64, (Option<Arc<Marks>>, Vec<usize>)>,
    /// The marks of the key being written that newer versions above the compaction made.
    ext: Ext,
    /// The version the runs come from, for the marks files have already.
    base: Option<Arc<TableVersion>>,
    /// Marks made so far.
    pub(crate) made: Made,
    /// Flush: the keys written that have versions in the older runs (every key whose versions
    /// a compaction's output can hold; see [`catch_up_flush`]), ascending.
    pub(crate) older_keys: Vec<Vec<u8>>,
    /// Scratch: value columns (flush: touched by the key's versions; settled by a full row or
    /// tombstone found below).
    touched: Vec<bool>,
    settled: Vec<bool>,
    sups: Vec<Sup>,
}

impl<'a> Marker<'a> {
    /// A flush of `info`'s versions on top of `t` (every run of `t` is older); `flushed`: the
    /// hashes of the keys it writes. Runs whose files all have exact key sets (Level-0 files
    /// flushed since open) are screened here, in one sorted pass each, instead of per key.
    ///
    /// With `defer_slow`, files on slower tiers than the first are not probed (deferred
    /// marking): their marks are left to a staging compaction, and partial rows whose row the
    /// probe could not find are kept, since it may be there.
    pub(crate) fn flush(tables: &'a TableCache, t: &Arc<TableVersion>, flushed: Vec<u64>, defer_slow: bool) -> Self {
        let info = &t.info;
        let mut older = Vec::new();
        for (level, l) in t.levels.iter().enumerate() {
            for r in &l.runs {
                let files: Vec<Arc<FileMeta>> =
                    r.files.iter().filter(|f| !defer_slow || f.tier == 0).cloned().collect();
                if !files.is_empty() {
                    older.push(RunProbe::new(files, run_columns(info, level, r)));
                }
            }
        }
        let mut m = Marker::probing(tables, t, older, Some(flushed));
        m.partial_probe = defer_slow;
        m
    }

    /// A staging compaction of `inputs`, Level-0 files of `t` of consecutive age: marks what
    /// their versions supersede in every run below them (older Level-0 files and every deeper
    /// level), as their flushes did or, for deferred ones, left undone; drops partial rows over
    /// no row; and passes on the marks the inputs had from newer Level-0 files.
    pub(crate) fn staging(tables: &'a TableCache, t: &Arc<TableVersion>, inputs: &HashSet<u64>) -> Self {
        let info = &t.info;
        let oldest_input = t.levels[0].files().filter(|f| inputs.contains(&f.number)).map(|f| f.max_seq).min();
        let mut older = Vec::new();
        for (level, l) in t.levels.iter().enumerate() {
            for r in &l.runs {
                let below = level > 0 || oldest_input.is_some_and(|s| r.files.iter().all(|f| f.max_seq < s));
                if below && r.files.iter().all(|f| !inputs.contains(&f.number)) {
                    older.push(RunProbe::new(r.files.clone(), run_columns(info, level, r)));
                }
            }
        }
        // The inputs' keys, where every input keeps its exact key set, screen the Level-0 runs.
        let sets: Option<Vec<Arc<KeySet>>> = inputs.iter().map(|&n| tables.key_set(n)).collect();
        let hashes = sets.map(|s| s.iter().flat_map(|k| k.hashes().iter().copied()).collect());
        let mut m = Marker::probing(tables, t, older, hashes);
        m.inputs = Marker::compaction(tables, t, inputs).inputs;
        m
    }

    /// A marker probing `older` (runs, newest first) for the keys written; `written`, the
    /// hashes of every key written if known, screens the runs that keep exact key sets.
    fn probing(
        tables: &'a TableCache,
        t: &Arc<TableVersion>,
        mut older: Vec<RunProbe>,
        written: Option<Vec<u64>>,
    ) -> Self {
        let info = &t.info;
        let mut screen: HashMap<u64, u64> = HashMap::new();
        let Some(mut flushed) = written else {
            return Marker { base: Some(t.clone()), older, screen, ..Marker::empty(tables, info.value_types.len()) };
        };
        flushed.sort_unstable();
        flushed.dedup();
        for (i, p) in older.iter_mut().enumerate().take(64) {
            let sets: Option<Vec<_>> = p.cursor.files().iter().map(|f| tables.key_set(f.number)).collect();
            let Some(sets) = sets else { continue };
            p.screened = true;
            for set in sets {
                for h in sorted_common(&flushed, set.hashes()) {
                    *screen.entry(h).or_default() |= 1 << i;
                }
            }
        }
        Marker { base: Some(t.clone()), older, screen, ..Marker::empty(tables, info.value_types.len()) }
    }

    /// A compaction of `t` reading `inputs`. Its output versions carry the marks the inputs had
    /// from versions above the compaction (see [`Self::read`]); those among themselves are
    /// made as they are written.
    pub(crate) fn compaction(tables: &'a TableCache, t: &TableVersion, inputs: &HashSet<u64>) -> Self {
        let info = &t.info;
        let mut m = Marker::empty(tables, info.value_types.len());
        for (level, l) in t.levels.iter().enumerate() {
            for r in &l.runs {
                for f in r.files.iter().filter(|f| inputs.contains(&f.number)) {
                    m.inputs.insert(f.number, (t.marks_of(f.number).cloned(), run_columns(info, level, r)));
                }
            }
        }
        m
    }

    fn empty(tables: &'a TableCache, nvals: usize) -> Self {
        Marker {
            tables,
            nvals,
            older: Vec::new(),
            partial_probe: false,
            screen: HashMap::new(),
            inputs: HashMap::new(),
            ext: Ext::default(),
            base: None,
            made: Made::new(),
            older_keys: Vec::new(),
            touched: vec![false; nvals],
            settled: vec![false; nvals],
            sups: Vec::new(),
        }
    }

    /// Before a flush writes `versions` (one key's, newest first, whole rows): marks what they
    /// supersede in the older runs, and returns how many of them to write — partial rows at the
    /// bottom are left out when no row exists below them (also when nothing is below: the first
    /// flush of a table). A compaction's marker writes every version.
    pub(crate) fn before_write(&mut self, key: &[u8], versions: &[Entry]) -> Result<usize> {
        if self.base.is_none() {
            // A compaction: what lies below its output is not probed (see `collapse`).
            return Ok(versions.len());
        }
        let hash = bloom::key_hash(key);
        let whole = versions.iter().any(|v| v.kind != Kind::Update);
        self.touched.fill(whole);
        for v in versions {
            for c in carried(&v.row, self.nvals) {
                self.touched[c] = true;
            }
        }
        // Runs are newest first. Below a full row or tombstone of the key, every older version
        // of its columns is marked already (by that version): stop probing those chains there.
        //
        // The first value column's chain goes first. Where it holds no version of the key, no
        // version of it is live anywhere: every chain holds the key's full rows and tombstones,
        // and a chain loses them only when compaction drops a tombstone with everything below
        // it, so what other chains keep then is that tombstone and versions it superseded (and
        // marked), and partial rows are never written over no row. Most flushed keys are new,
        // and this spares probing the other groups' runs for them.
        self.settled.fill(false);
        let mut all_settled = false;
        let mut found: Vec<(usize, Hit)> = Vec::new();
        let anchored = |p: &RunProbe| p.columns.first() == Some(&0) || p.columns.is_empty();
        let screen = if self.screen.is_empty() { 0 } else { self.screen.get(&hash).copied().unwrap_or(0) };
        for anchor_pass in [true, false] {
            for (pi, p) in self.older.iter_mut().enumerate() {
                if anchored(p) != anchor_pass || p.screened && (screen >> pi) & 1 == 0 {
                    continue;
                }
                let open = |c: &usize| (self.touched[*c] || anchor_pass && *c == 0) && !self.settled[*c];
                if all_settled || !(p.columns.iter().any(open) || whole && p.columns.is_empty()) {
                    continue;
                }
                let Some(h) = p.find(self.tables, key, Some(hash))? else { continue };
                if h.versions().any(|(b, i, _)| b.kind(i) != Kind::Update) {
                    for &c in &p.columns {
                        self.settled[c] = true;
                    }
                    all_settled |= p.columns.is_empty();
                }
                found.push((pi, h));
            }
            if found.is_empty() {
                break;
            }
        }
        // The newest full row or tombstone below settles whether the row exists there (every
        // chain probed agrees; a partial row's own columns' chains were all probed).
        let settled = found
            .iter()
            .flat_map(|(_, h)| h.versions().map(|(b, i, _)| (b.seq(i), b.kind(i))))
            .filter(|(_, k)| *k != Kind::Update)
            .max_by_key(|(s, _)| *s);
        if !found.is_empty() && self.older_keys.last().is_none_or(|k| k.as_slice() != key) {
            self.older_keys.push(key.to_vec());
        }
        let mut keep = versions.len();
        let unknown = settled.is_none() && self.partial_probe;
        if !matches!(settled, Some((_, Kind::Put))) && !unknown {
            while keep > 0 && versions[keep - 1].kind == Kind::Update {
                keep -= 1;
            }
        }
        if found.is_empty() || keep == 0 {
            return Ok(keep);
        }
        let sups: Vec<Sup> = versions[..keep].iter().map(|v| Sup::of_entry(v, self.nvals)).collect();
        for (pi, h) in found {
            let columns = &self.older[pi].columns;
            let existing = self.base.as_ref().and_then(|t| t.marks_of(h.number)).map(|m| &**m);
            let out = self.made.entry(h.number).or_default();
            for (b, i, row) in h.versions() {
                let t = Target::of_row(b, i, row, columns.len())?;
                mark(&t, columns, &sups, &Ext::default(), existing, out);
            }
        }
        Ok(keep)
    }

    /// Before a compaction writes a key: its input `versions` (newest first) and where each is
    /// stored. Marks on them by versions newer than every input version came from above the
    /// compaction; the output versions inherit them. (Marks among the inputs are made again
    /// among the outputs, which may have merged versions.)
    pub(crate) fn read(&mut self, versions: &[Entry], origins: &[Option<Origin>]) {
        self.ext = Ext::default();
        if self.inputs.is_empty() {
            return;
        }
        let newest = versions.iter().map(|v| v.seq).max().unwrap_or(0);
        for &(number, row) in origins.iter().flatten() {
            let Some((Some(marks), columns)) = self.inputs.get(&number) else { continue };
            for m in marks.in_positions(row..row + 1).filter(|m| m.seq > newest) {
                if m.col == WHOLE {
                    self.ext.whole = Some(self.ext.whole.map_or(m.seq, |w| w.min(m.seq)));
                } else if let Some(&c) = columns.get(usize::from(m.col)) {
                    match self.ext.cols.iter_mut().find(|(x, _)| *x == c) {
                        Some((_, s)) => *s = (*s).min(m.seq),
                        None => self.ext.cols.push((c, m.seq)),
                    }
                }
            }
        }
    }

    /// After `versions` (one key's, newest first) were written to rows `first_row..` of file
    /// `number` of output `group`: marks them by each other and with the marks the inputs had
    /// from above (see [`Self::read`]).
    pub(crate) fn written(&mut self, group: &[usize], versions: &[Entry], number: u64, first_row: u32) -> Result<()> {
        if self.ext.is_empty() && versions.len() < 2 {
            return Ok(());
        }
        self.sups.clear();
        let out = self.made.entry(number).or_default();
        for (i, v) in versions.iter().enumerate() {
            if i > 0 {
                self.sups.push(Sup::of_entry(&versions[i - 1], self.nvals));
            }
            let t = Target::of_entry(v, first_row + i as u32, group, self.nvals);
            mark(&t, group, &self.sups, &self.ext, None, out);
        }
        Ok(())
    }
}

/// Marks a key's versions got from versions above a compaction: whole row, and per value
/// column, the smallest sequence number.
#[derive(Debug, Default)]
struct Ext {
    whole: Option<u64>,
    cols: Vec<(usize, u64)>,
}

impl Ext {
    fn is_empty(&self) -> bool {
        self.whole.is_none() && self.cols.is_empty()
    }

    fn col(&self, c: usize) -> Option<u64> {
        self.cols.iter().find(|(x, _)| *x == c).map(|(_, s)| *s)
    }
}

/// Runs marked, after the fact, by versions of files they did not see (see the catch-ups).
struct CatchUp<'c> {
    tables: &'c TableCache,
    /// The runs, each with its value columns; forward-only, so one source file per `CatchUp`.
    targets: Vec<RunProbe>,
    /// The marks the targets' files already have.
    existing: &'c dyn Fn(u64) -> Option<Arc<Marks>>,
}

impl CatchUp<'_> {
    /// Marks by one key's versions `source`, of a file holding value `columns`.
    fn key(&mut self, source: &Hit, columns: &[usize], made: &mut Made) -> Result<()> {
        let key = source.key();
        let hash = bloom::key_hash(key);
        let sups: Vec<Sup> = source.versions().map(|(b, j, _)| Sup::of_row(b, j, columns)).collect();
        let shares = |t: &RunProbe| columns.is_empty() || t.columns.iter().any(|c| columns.contains(c));
        for t in self.targets.iter_mut().filter(|t| shares(t)) {
            let Some(h) = t.find(self.tables, key, Some(hash))? else { continue };
            let ex = (self.existing)(h.number);
            let out = made.entry(h.number).or_default();
            for (b, r, row) in h.versions() {
                let tg = Target::of_row(b, r, row, t.columns.len())?;
                mark(&tg, &t.columns, &sups, &Ext::default(), ex.as_deref(), out);
            }
        }
        Ok(())
    }

    /// Marks by `source`'s versions with keys in `range`; with `only`, keys whose hashes it
    /// lacks are passed over.
    fn file(
        &mut self,
        source: &SstReader,
        range: Option<(&[u8], &[u8])>,
        only: Option<&KeySet>,
        made: &mut Made,
    ) -> Result<()> {
        let columns = source.columns().to_vec();
        let mut bi = range.map_or(0, |(lo, _)| source.find_block(lo));
        let mut at: Option<(Arc<Block>, usize)> = None;
        while bi < source.num_blocks() {
            let (b, i) = match at.take() {
                Some(place) => place,
                None => {
                    let b = source.block(bi, false)?;
                    let i = range.map_or(0, |(lo, _)| b.seek(lo));
                    (b, i)
                }
            };
            if i >= b.len() {
                bi += 1;
                continue;
            }
            let key = b.key(i);
            if range.is_some_and(|(_, hi)| key > hi) {
                return Ok(());
            }
            // A key's versions may go on into the next blocks: the walk resumes past them.
            let Some(h) = hit_at(source, &b, bi, i, key)? else { return Ok(()) };
            if only.is_none_or(|o| o.contains(bloom::key_hash(key))) {
                self.key(&h, &columns, made)?;
            }
            bi += h.parts.len() - 1;
            let (last, end) = h.end();
            at = Some((last.clone(), end));
        }
        Ok(())
    }

    /// Marks by `source`'s versions of `keys` (ascending), looked up one by one.
    fn keys(&mut self, source: &Arc<SstReader>, keys: &[Vec<u8>], made: &mut Made) -> Result<()> {
        let columns = source.columns().to_vec();
        let mut block: Option<(usize, Arc<Block>)> = None;
        for key in keys {
            let bi = source.find_block(key);
            if bi >= source.num_blocks() {
                break;
            }
            let b = match &block {
                Some((i, b)) if *i == bi => b.clone(),
                _ => {
                    let b = source.block(bi, false)?;
                    block = Some((bi, b.clone()));
                    b
                }
            };
            if let Some(h) = hit_at(source, &b, bi, b.seek(key), key)? {
                self.key(&h, &columns, made)?;
            }
        }
        Ok(())
    }
}

/// Turns marks into version-edit records, leaving out files not in `live` and empty lists.
pub(crate) fn records(table: u32, made: Made, live: &dyn Fn(u64) -> bool) -> Vec<EditRecord> {
    made.into_iter()
        .filter(|(n, m)| !m.is_empty() && live(*n))
        .map(|(number, m)| EditRecord::Marks { table, number, chunk: Arc::new(MarkChunk::new(m)) })
        .collect()
}

/// The files of table `table` in `v`, by number.
pub(crate) fn file_numbers(v: &Version, table: u32) -> HashSet<u64> {
    v.tables
        .get(&table)
        .map(|t| t.levels.iter().flat_map(|l| l.files().map(|f| f.number)).collect())
        .unwrap_or_default()
}

/// Before a flush installs `flushed` (its new Level-0 files of
/// `table`), made on top of `base`: the files `current` has that `base` did not (outputs of
/// compactions that installed meanwhile) are marked by the flushed versions.
///
/// Only the keys in `older` (ascending: those the flush found versions of in `base`) are
/// probed: flushes run
/// one at a time, so every version in a compaction's output comes from files in `base`, and
/// a key found nowhere there has none (or only dead ones, as in [`Marker::before_write`]).
/// A deferred flush (`skip_slow`) leaves files on slower tiers alone, as it did in `base`.
///
/// A staging compaction catches up the same way for the files below it (its outputs as
/// `flushed`, the keys it found below as `older`): no newer versions can reach them while it
/// runs, as it holds Level-0. Newer Level-0 files are passed over by the marks themselves.
pub(crate) fn catch_up_flush(
    tables: &TableCache,
    current: &Version,
    table: u32,
    base: &HashSet<u64>,
    (flushed, older, skip_slow): (&[u64], &[Vec<u8>], bool),
    made: &mut Made,
) -> Result<()> {
    let Some(t) = current.tables.get(&table) else { return Ok(()) };
    let mut targets = Vec::new();
    for (level, l) in t.levels.iter().enumerate() {
        for r in &l.runs {
            let columns = run_columns(&t.info, level, r);
            let skipped = |f: &Arc<FileMeta>| base.contains(&f.number) || skip_slow && f.tier != 0;
            let new = |f: &&Arc<FileMeta>| !skipped(f);
            for f in r.files.iter().filter(new) {
                targets.push(RunProbe::new(vec![f.clone()], columns.clone()));
            }
        }
    }
    if targets.is_empty() || older.is_empty() {
        return Ok(());
    }
    let existing = |n: u64| t.marks_of(n).cloned();
    for &n in flushed {
        let source = tables.get(n)?;
        let targets = targets.iter().map(|p| RunProbe::new(p.cursor.files().to_vec(), p.columns.clone())).collect();
        CatchUp { tables, targets, existing: &existing }.keys(&source, older, made)?;
    }
    Ok(())
}

/// Before a compaction of `table` installs `outputs` (files of
/// `output_level`, with the value columns of their groups): versions in files that appeared
/// above the output level since the compaction read `base` (flushes, other compactions) mark
/// the outputs.
///
/// Of a Level-0 file flushed since open, only the keys that had versions in older files when
/// it was flushed are probed ([`TableCache::older_keys`]): the compaction's inputs existed
/// while that flush ran, and their versions come from files the flush saw (see
/// [`catch_up_flush`]).
pub(crate) fn catch_up_compaction(
    tables: &TableCache,
    current: &Version,
    table: u32,
    base: &HashSet<u64>,
    output_level: usize,
    outputs: &[(Arc<FileMeta>, Vec<usize>)],
    made: &mut Made,
) -> Result<()> {
    let Some(t) = current.tables.get(&table) else { return Ok(()) };
    let (Some(lo), Some(hi)) = (
        outputs.iter().map(|(f, _)| f.smallest.as_slice()).min(),
        outputs.iter().map(|(f, _)| f.largest.as_slice()).max(),
    ) else {
        return Ok(());
    };
    // Above a Level-0 output (a staging compaction's): the Level-0 files flushed meanwhile.
    let fresh: Vec<Arc<FileMeta>> = t
        .levels
        .iter()
        .take(output_level.max(1))
        .flat_map(|l| l.files())
        .filter(|f| !base.contains(&f.number) && f.smallest.as_slice() <= hi && f.largest.as_slice() >= lo)
        .cloned()
        .collect();
    if fresh.is_empty() {
        return Ok(());
    }
    // One run per output group, files by key.
    let mut groups: BTreeMap<Vec<usize>, Vec<Arc<FileMeta>>> = BTreeMap::new();
    for (f, cols) in outputs {
        groups.entry(cols.clone()).or_default().push(f.clone());
    }
    let none = |_: u64| None;
    for f in fresh {
        let source = tables.get(f.number)?;
        let targets: Vec<RunProbe> = groups
            .iter()
            .map(|(cols, files)| {
                let mut files = files.clone();
                files.sort_by(|a, b| a.smallest.cmp(&b.smallest));
                RunProbe::new(files, cols.clone())
            })
            .collect();
        let older = tables.older_keys(f.number);
        CatchUp { tables, targets, existing: &none }.file(&source, Some((lo, hi)), older.as_deref(), made)?;
    }
    Ok(())
}

/// Checks every file's marks of `t` against marks recomputed from all its versions, at each of
/// `read_points`: a version's column is superseded at `S` by its marks exactly when a newer
/// version at or below `S` covers it. Also checks that every partial row has a full row below.
/// Below a version in a file whose marking is deferred, marks may be missing (newer flushes
/// stop probing at that version's full row, leaving what lies below to the staging
/// compaction), but are still never early; and such a file's partial rows may lie over no row.
/// Loads every version of the table: for tests.
pub(crate) fn check(tables: &TableCache, t: &TableVersion, read_points: &[u64]) -> Result<()> {
    struct V {
        seq: u64,
        kind: Kind,
        /// Value columns carried (all of the group's for a full row).
        cols: BTreeSet<usize>,
        /// File, position, and the value columns of the file's group.
        at: (u64, u32, Vec<usize>),
        level: usize,
    }
    let info = &t.info;
    let mut keys: BTreeMap<Vec<u8>, Vec<V>> = BTreeMap::new();
    for (level, l) in t.levels.iter().enumerate() {
        for r in &l.runs {
            let columns = run_columns(info, level, r);
            for f in &r.files {
                let reader = tables.get(f.number)?;
                for bi in 0..reader.num_blocks() {
                    let b = reader.block(bi, false)?;
                    for i in 0..b.len() {
                        let kind = b.kind(i);
                        let cols = match kind {
                            Kind::Put => columns.iter().copied().collect(),
                            _ => Sup::of_row(&b, i, &columns).cols.into_iter().collect(),
                        };
                        let row = u32::try_from(reader.first_row(bi) + i as u64).unwrap_or(u32::MAX);
                        let at = (f.number, row, columns.clone());
                        keys.entry(b.key(i).to_vec()).or_default().push(V { seq: b.seq(i), kind, cols, at, level });
                    }
                }
            }
        }
    }
    let bad = |n: u64, msg: String| Err(Error::corruption(tables.path(n), 0, msg));
    for (key, mut vs) in keys {
        vs.sort_by_key(|v| std::cmp::Reverse(v.seq));
        // Every version of the key with its marks, for the reports below.
        let history = || -> String {
            let all: Vec<String> = vs
                .iter()
                .map(|o| {
                    let m = t.marks_of(o.at.0);
                    let whole = m.and_then(|m| m.whole_at(o.at.1));
                    let cols: Vec<_> = (0..o.at.2.len())
                        .filter_map(|j| m.and_then(|m| m.superseded_at(o.at.1, j)).map(|s| (o.at.2[j], s)))
                        .collect();
                    format!(
                        "{:?}@{} in {:06} (level {}, group {:?}) row {} carries {:?}, marks whole {whole:?} cols {cols:?}",
                        o.kind, o.seq, o.at.0, o.level, o.at.2, o.at.1, o.cols
                    )
                })
                .collect();
            all.join("; ")
        };
        for (i, v) in vs.iter().enumerate() {
            let (number, row, columns) = &v.at;
            let deferred = |o: &V| t.deferred.contains(&o.at.0);
            if v.kind == Kind::Update && !deferred(v) {
                let below = vs[i + 1..].iter().find(|o| o.kind != Kind::Update).map(|o| o.kind);
                if below != Some(Kind::Put) {
                    let all: Vec<String> =
                        vs.iter().map(|o| format!("{:?}@{} in {:06}", o.kind, o.seq, o.at.0)).collect();
                    return bad(
                        *number,
                        format!("partial row {key:?}@{} has no full row below (versions: {all:?})", v.seq),
                    );
                }
            }
            let marks = t.marks_of(*number);
            for &s in read_points.iter().filter(|&&s| s >= v.seq) {
                // Versions on the same chains: files whose groups share a column with this one's
                // (groups of upper levels contain those below, so sharing one means covering all).
                let newer = || {
                    vs[..i].iter().filter(|o| {
                        o.seq <= s
                            && o.seq > v.seq
                            && (columns.is_empty() || o.at.2.iter().any(|c| columns.contains(c)))
                    })
                };
                // Under a newer version whose marking is deferred, marks may be missing.
                let loose = vs[..i].iter().any(deferred);
                // A tombstone is never read, so whether it is marked does not matter: flushes
                // skip chains where the key has no live version, and compaction drops a newer
                // tombstone over an older one as redundant, leaving its marks on the older one's
                // copies in other files behind.
                if v.kind == Kind::Delete {
                    continue;
                }
                let whole = newer().any(|o| o.kind != Kind::Update);
                let stored_whole = marks.and_then(|m| m.whole_at(*row)).is_some_and(|m| m <= s);
                if stored_whole != whole && (stored_whole || !loose) {
                    return bad(
                        *number,
                        format!(
                            "row {row} ({key:?}@{}) whole-row mark at {s}: want {whole}, have {stored_whole} (read points {read_points:?}; versions: {})",
                            v.seq,
                            history()
                        ),
                    );
                }
                for (j, c) in columns.iter().enumerate().filter(|(_, c)| v.cols.contains(c)) {
                    let want = whole || newer().any(|o| o.cols.contains(c));
                    let have = marks.and_then(|m| m.superseded_at(*row, j)).is_some_and(|m| m <= s);
                    if have != want && (have || !loose) {
                        return bad(
                            *number,
                            format!(
                                "row {row} ({key:?}@{}) column {c} at {s}: want superseded {want}, have {have} (versions: {})",
                                v.seq,
                                history()
                            ),
                        );
                    }
                }
            }
        }
    }
    Ok(())
}
