//! The version chain of one key: reading it at a sequence number, and collapsing it during flush
//! and compaction without changing what any live snapshot can see.
//!
//! Semantics (LASER §4.2 with blind updates): walking versions newest first, a full row or a
//! tombstone settles the row; partial rows above it fill in columns the newer ones did not carry.
//! A partial row with nothing settled below it — above a tombstone or above no version at all —
//! is an update of a row that did not exist, and is invisible.

use super::{Entry, Kind};
use crate::codec::DecodeResult;
use crate::types::row::{decode_row, encode_row, Cells};
use crate::types::{ColumnType, Value};

/// Fills the columns `newer` does not carry from `older`.
pub(crate) fn fill_from(newer: &mut Cells, older: &Cells) {
    for (n, o) in newer.iter_mut().zip(older) {
        if n.is_none() {
            n.clone_from(o);
        }
    }
}

// Per-column state of a read.
const NOT_NEEDED: u8 = 0;
/// Needed; no version has carried it yet.
const OPEN: u8 = 1;
/// Needed; its newest value is known (from a partial row), but nothing has settled it.
const VALUE: u8 = 2;
/// A full row or tombstone covering it was reached.
const SETTLED: u8 = 3;

/// Reads one key's versions newest first, column by column.
///
/// With column groups, the versions of one key come from several chains: the memtable and
/// Level-0 hold whole rows, deeper levels hold one file per group, and each group is compacted on
/// its own. Every value column therefore has its own chain (the versions whose [`Cover`] includes
/// it), read newest first: its value is the first carried one, and the first full row or
/// tombstone on it settles whether the row exists. Compaction preserves every chain's reading at
/// every live snapshot, so all chains agree on existence; the resolver takes it from the first
/// chain that settles and keeps reading only the chains of wanted columns still without a value.
/// A whole-row version (cover `None`) advances every chain at once, which is the row layout.
#[derive(Debug)]
pub(crate) struct Resolver {
    acc: Cells,
    /// Per value column (at least one slot, so a key-only table still has a chain).
    state: Vec<u8>,
    /// Needed columns in state `OPEN`.
    open: usize,
    /// Needed columns not `SETTLED`.
    unsettled: usize,
    exists: Option<bool>,
}

impl Resolver {
    /// A read of `nvals` value columns wanting those marked in `wanted` (all if `None`). With no
    /// column wanted, the first column's chain decides existence.
    pub(crate) fn new(nvals: usize, wanted: Option<&[bool]>) -> Self {
        let mut state = vec![NOT_NEEDED; nvals.max(1)];
        for (c, s) in state.iter_mut().enumerate() {
            if wanted.is_none_or(|w| w.get(c).copied().unwrap_or(false)) {
                *s = OPEN;
            }
        }
        if !state.contains(&OPEN) {
            state[0] = OPEN;
        }
        let n = state.iter().filter(|&&s| s == OPEN).count();
        Resolver { acc: vec![None; nvals], state, open: n, unsettled: n, exists: None }
    }

    /// True once the outcome is decided: a tombstone was reached, or every wanted column is
    /// settled, or the row is known to exist and every wanted column has its value.
    pub(crate) fn is_settled(&self) -> bool {
        self.exists == Some(false) || self.unsettled == 0 || (self.exists == Some(true) && self.open == 0)
    }

    /// Whether versions covering `cover` can still change the outcome (point reads use this to
    /// skip column groups). While existence is unknown and every wanted column has a value, one
    /// chain — the first such column's, followed since the read began — is enough.
    pub(crate) fn wants(&self, cover: Option<&[usize]>) -> bool {
        if self.is_settled() {
            return false;
        }
        let Some(cols) = cover else { return true };
        let anchor =
            if self.exists.is_none() && self.open == 0 { self.state.iter().position(|&s| s == VALUE) } else { None };
        cols.iter().any(|&c| match self.state.get(c) {
            Some(&OPEN) => true,
            Some(&VALUE) => self.exists.is_none() && (self.open > 0 || anchor == Some(c)),
            _ => false,
        })
    }

    /// Whether value column `c` still needs a value: the only columns whose cells the next
    /// version is asked for (see [`Self::push_with`]).
    pub(crate) fn is_open(&self, c: usize) -> bool {
        self.state.get(c) == Some(&OPEN)
    }

    /// Whether a partial row could change the outcome, given which value columns it carries
    /// (`carries`): only if it carries a wanted column no version has given a value yet, since a
    /// partial row never settles anything. Lets readers pass over such rows without decoding.
    pub(crate) fn takes_partial(&self, carries: impl Fn(usize) -> bool) -> bool {
        !self.is_settled() && self.open > 0 && (0..self.state.len()).any(|c| self.state[c] == OPEN && carries(c))
    }

    /// Adds the next older version of the columns in `cover` (callers skip versions newer than
    /// their snapshot). `cells` is indexed by value column.
    pub(crate) fn push(&mut self, kind: Kind, mut cells: Cells, cover: Option<&[usize]>) {
        self.push_with(kind, cover, |c| cells.get_mut(c).and_then(Option::take));
    }

    /// [`push`](Self::push) with the version's cells read on demand: `cell(c)` is called only for
    /// the columns whose value the read still lacks (`None` = not carried), so a reader decodes
    /// nothing it does not need and gathers no row.
    pub(crate) fn push_with(
        &mut self,
        kind: Kind,
        cover: Option<&[usize]>,
        mut cell: impl FnMut(usize) -> Option<Value>,
    ) {
        if self.is_settled() {
            return;
        }
        match cover {
            None => {
                for c in 0..self.state.len() {
                    self.apply(c, kind, &mut cell);
                }
            }
            Some(cols) => {
                for &c in cols {
                    self.apply(c, kind, &mut cell);
                }
            }
        }
    }

    fn apply(&mut self, c: usize, kind: Kind, cell: &mut impl FnMut(usize) -> Option<Value>) {
        let Some(&st) = self.state.get(c) else { return };
        if st == NOT_NEEDED || st == SETTLED {
            return;
        }
        match kind {
            Kind::Delete => {
                self.exists.get_or_insert(false);
            }
            Kind::Put => {
                if st == OPEN {
                    if let Some(slot) = self.acc.get_mut(c) {
                        *slot = cell(c);
                    }
                }
                self.exists.get_or_insert(true);
            }
            Kind::Update => {
                if st == OPEN {
                    if let (Some(slot), Some(v)) = (self.acc.get_mut(c), cell(c)) {
                        *slot = Some(v);
                        self.state[c] = VALUE;
                        self.open -= 1;
                    }
                }
                return;
            }
        }
        if st == OPEN {
            self.open -= 1;
        }
        self.unsettled -= 1;
        self.state[c] = SETTLED;
    }

    /// Whether the row exists (`None`: no full row or tombstone was reached) and the wanted
    /// columns' values found so far.
    pub(crate) fn into_parts(self) -> (Option<bool>, Cells) {
        (self.exists, self.acc)
    }

    /// The visible row (wanted columns filled): `Some` only if a full row was reached.
    pub(crate) fn finish(self) -> Option<Cells> {
        match self.exists {
            Some(true) => Some(self.acc),
            _ => None,
        }
    }
}

/// Which versions of a key a merge must keep apart: readers at the live snapshots (sequence
/// numbers ascending, captured after every input was visible, so any reader not in the list reads
/// above every input version), and readers at any point above `history_from` (the history
/// retention window, where `as_of` reads may land: every version there is its own stripe).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stripes<'a> {
    pub snapshots: &'a [u64],
    pub history_from: u64,
}

impl<'a> Stripes<'a> {
    /// Only the live snapshots tell versions apart.
    #[cfg(test)]
    pub(crate) fn snapshots(snapshots: &'a [u64]) -> Self {
        Stripes { snapshots, history_from: u64::MAX }
    }

    /// The stripe of a version at `seq`; versions of one key with equal stripes read the same
    /// to every reader.
    pub(crate) fn of(&self, seq: u64) -> (usize, u64) {
        if seq > self.history_from {
            (usize::MAX, seq)
        } else {
            (self.snapshots.partition_point(|&s| s < seq), 0)
        }
    }
}

/// Collapses the versions of one key (all with the same key, newest first) for flush/compaction.
///
/// `stripes` says which versions readers can tell apart (see [`Stripes`]). Versions that no
/// reader can tell apart (the same stripe) merge into one;
/// partial rows over a known full row become full rows. With `bottommost` (nothing older exists
/// below the output for this key) tombstones and invisible partial rows are dropped.
pub(crate) fn collapse(
    mut versions: Vec<Entry>,
    stripes: &Stripes<'_>,
    bottommost: bool,
    types: &[ColumnType],
) -> DecodeResult<Vec<Entry>> {
    // Most keys have one version: decide it without decoding the row.
    if versions.len() == 1 {
        let keep = !bottommost || versions[0].kind == Kind::Put;
        if !keep {
            versions.clear();
        }
        return Ok(versions);
    }
    let Some(key) = versions.first().map(|v| v.key.clone()) else { return Ok(versions) };
    let decoded = versions
        .into_iter()
        .map(|v| {
            let cells = if v.kind == Kind::Delete { Vec::new() } else { decode_row(types, &v.row, None)? };
            Ok(Ver { seq: v.seq, kind: v.kind, cells })
        })
        .collect::<DecodeResult<Vec<Ver>>>()?;
    Ok(collapse_decoded(decoded, stripes, bottommost)
        .into_iter()
        .map(|v| {
            let mut row = Vec::new();
            if v.kind != Kind::Delete {
                encode_row(types, &v.cells, &mut row);
            }
            Entry::new(key.clone(), v.seq, v.kind, row, None)
        })
        .collect())
}

/// The newest version of each stripe (versions visible to exactly the same live snapshots) of
/// one key's versions, given newest first: the collapse of versions that each read the same
/// alone as with everything older (see [`Keep::folded`](crate::compaction::exec::Keep::folded)).
/// A tombstone over another tombstone is kept, which [`collapse`] would drop; reads are the same.
pub(crate) fn newest_per_stripe<'e>(versions: impl Iterator<Item = &'e Entry>, stripes: &Stripes<'_>) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let mut last_stripe = None;
    for v in versions {
        let stripe = stripes.of(v.seq);
        if last_stripe != Some(stripe) {
            last_stripe = Some(stripe);
            out.push(v.clone());
        }
    }
    out
}

/// A decoded version of one key.
struct Ver {
    seq: u64,
    kind: Kind,
    cells: Cells,
}

fn collapse_decoded(versions: Vec<Ver>, keep: &Stripes<'_>, bottommost: bool) -> Vec<Ver> {
    // 1. Merge each stripe (versions visible to exactly the same snapshots) into one version.
    let mut stripes: Vec<Ver> = Vec::new();
    let mut current: Option<((usize, u64), Ver, bool)> = None; // (stripe, merged, settled)
    for v in versions {
        let stripe = keep.of(v.seq);
        match &mut current {
            Some((s, merged, settled)) if *s == stripe => {
                if *settled {
                    continue;
                }
                match v.kind {
                    Kind::Delete => {
                        merged.kind = Kind::Delete;
                        merged.cells = Vec::new();
                        *settled = true;
                    }
                    Kind::Put => {
                        fill_from(&mut merged.cells, &v.cells);
                        merged.kind = Kind::Put;
                        *settled = true;
                    }
                    Kind::Update => fill_from(&mut merged.cells, &v.cells),
                }
            }
            _ => {
                if let Some((_, m, _)) = current.take() {
                    stripes.push(m);
                }
                let settled = v.kind != Kind::Update;
                current = Some((stripe, v, settled));
            }
        }
    }
    if let Some((_, m, _)) = current {
        stripes.push(m);
    }

    // 2. Oldest to newest, resolve each stripe against what lies below it. `Row(i)` points at
    // the full row already emitted at `out[i]`.
    enum Below {
        Unknown,
        Absent,
        Row(usize),
    }
    let mut below = if bottommost { Below::Absent } else { Below::Unknown };
    let mut out: Vec<Ver> = Vec::with_capacity(stripes.len());
    for mut e in stripes.into_iter().rev() {
        match e.kind {
            Kind::Put => {
                below = Below::Row(out.len());
                out.push(e);
            }
            Kind::Delete => {
                // Over nothing the tombstone says nothing; otherwise an older reader needs it.
                if !matches!(below, Below::Absent) {
                    out.push(e);
                }
                below = Below::Absent;
            }
            Kind::Update => match below {
                Below::Absent => {}
                Below::Row(i) => {
                    fill_from(&mut e.cells, &out[i].cells);
                    e.kind = Kind::Put;
                    below = Below::Row(out.len());
                    out.push(e);
                }
                Below::Unknown => out.push(e),
            },
        }
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Value;

    const TYPES: [ColumnType; 2] = [ColumnType::Int, ColumnType::Int];

    fn e(seq: u64, kind: Kind, cells: &[Option<i32>]) -> Entry {
        let cells: Cells = cells.iter().map(|c| c.map(Value::Int)).collect();
        let mut row = Vec::new();
        if kind != Kind::Delete {
            encode_row(&TYPES, &cells, &mut row);
        }
        Entry::new(b"k".to_vec(), seq, kind, row, None)
    }

    fn read(versions: &[Entry], at: u64) -> Option<Cells> {
        let mut r = Resolver::new(TYPES.len(), None);
        for v in versions.iter().filter(|v| v.seq <= at) {
            r.push(v.kind, decode_row(&TYPES, &v.row, None).unwrap(), v.cover.as_deref());
        }
        r.finish()
    }

    #[test]
    fn only_partial_rows_carrying_an_open_column_are_taken() {
        let mut r = Resolver::new(2, None);
        let carries = |cols: &'static [usize]| move |c: usize| cols.contains(&c);
        assert!(r.takes_partial(carries(&[0])) && r.takes_partial(carries(&[1])));
        assert!(!r.takes_partial(carries(&[])));
        r.push(Kind::Update, vec![Some(Value::Int(5)), None], None);
        // Column 0 has its value: another partial row of it alone changes nothing.
        assert!(!r.takes_partial(carries(&[0])));
        assert!(r.takes_partial(carries(&[0, 1])));
        r.push(Kind::Update, vec![Some(Value::Int(4)), Some(Value::Int(6))], None);
        assert!(!r.takes_partial(carries(&[0, 1])), "every wanted column has its value");
        assert!(!r.is_settled(), "but the row's existence is still unknown");
        r.push(Kind::Put, vec![Some(Value::Int(1)), Some(Value::Int(2))], None);
        assert_eq!(r.finish(), Some(vec![Some(Value::Int(5)), Some(Value::Int(6))]));
        // A read wanting only column 1 never takes a partial row of column 0.
        let r = Resolver::new(2, Some(&[false, true]));
        assert!(!r.takes_partial(carries(&[0])) && r.takes_partial(carries(&[1])));
    }

    #[test]
    fn partial_over_nothing_or_tombstone_is_invisible() {
        let v =
            vec![e(3, Kind::Update, &[Some(1), None]), e(2, Kind::Delete, &[]), e(1, Kind::Put, &[Some(0), Some(0)])];
        assert_eq!(read(&v, 3), None);
        assert_eq!(read(&v, 1), Some(vec![Some(Value::Int(0)), Some(Value::Int(0))]));
        assert_eq!(read(&v[..1], 3), None);
    }

    /// Levels of column-group runs: `(cover, versions newest first)` per run.
    type Levels<'a> = Vec<Vec<(&'a [usize], Vec<Entry>)>>;

    /// Reads like a point read: runs the resolver no longer wants are skipped.
    fn read_levels(levels: &Levels<'_>, wanted: &[bool], skip: bool) -> Option<Cells> {
        let mut r = Resolver::new(TYPES.len(), Some(wanted));
        for level in levels {
            for (cover, versions) in level {
                if skip && !r.wants(Some(cover)) {
                    continue;
                }
                for v in versions {
                    r.push(v.kind, decode_row(&TYPES, &v.row, None).unwrap(), Some(cover));
                }
            }
        }
        r.finish()
    }

    #[test]
    fn columns_resolve_on_their_own_chains() {
        let (a, b): (&[usize], &[usize]) = (&[0], &[1]);
        // Column a's chain settles two levels above column b's; both carry newer partial values.
        let levels: Levels<'_> = vec![
            vec![(a, vec![e(9, Kind::Update, &[Some(9), None])])],
            vec![(a, vec![e(5, Kind::Put, &[Some(5), Some(5)])]), (b, vec![e(8, Kind::Update, &[None, Some(8)])])],
            vec![(b, vec![e(5, Kind::Put, &[Some(5), Some(5)])])],
        ];
        let both = vec![Some(Value::Int(9)), Some(Value::Int(8))];
        assert_eq!(read_levels(&levels, &[true, true], false), Some(both.clone()));
        assert_eq!(read_levels(&levels, &[true, true], true), Some(both));
        // Existence follows a chain read from the top: here b's values are known before any chain
        // settles, and only a's chain (read at every level) settles.
        let levels: Levels<'_> = vec![
            vec![(a, vec![e(9, Kind::Update, &[Some(9), None])])],
            vec![(b, vec![e(8, Kind::Update, &[None, Some(8)])]), (a, vec![e(5, Kind::Put, &[Some(5), Some(5)])])],
            vec![(b, vec![e(5, Kind::Put, &[Some(5), Some(5)])])],
        ];
        assert_eq!(read_levels(&levels, &[true, true], true), read_levels(&levels, &[true, true], false));
        // A tombstone on one chain does not hide values another chain settled above it.
        let levels: Levels<'_> = vec![
            vec![(a, vec![e(9, Kind::Put, &[Some(9), Some(9)]), e(4, Kind::Delete, &[])])],
            vec![(b, vec![e(9, Kind::Put, &[Some(9), Some(9)]), e(4, Kind::Delete, &[])])],
        ];
        assert_eq!(read_levels(&levels, &[true, true], true), Some(vec![Some(Value::Int(9)), Some(Value::Int(9))]));
        // Wanting only b skips a's runs entirely.
        let mut r = Resolver::new(2, Some(&[false, true]));
        assert!(!r.wants(Some(a)) && r.wants(Some(b)));
        r.push(Kind::Delete, Vec::new(), Some(b));
        assert!(r.is_settled());
        assert_eq!(r.finish(), None);
    }

    #[test]
    fn collapse_keeps_what_snapshots_see() {
        let v = vec![
            e(6, Kind::Update, &[None, Some(6)]),
            e(5, Kind::Update, &[Some(5), None]),
            e(4, Kind::Delete, &[]),
            e(3, Kind::Put, &[Some(3), Some(3)]),
            e(2, Kind::Update, &[Some(2), None]),
            e(1, Kind::Put, &[Some(1), Some(1)]),
        ];
        for snaps in [vec![], vec![1], vec![2, 4], vec![3, 5], vec![1, 2, 3, 4, 5], vec![4]] {
            for bottom in [false, true] {
                let out = collapse(v.clone(), &Stripes::snapshots(&snaps), bottom, &TYPES).unwrap();
                for &s in snaps.iter().chain(std::iter::once(&7)) {
                    assert_eq!(read(&out, s), read(&v, s), "snaps {snaps:?} bottom {bottom} at {s}: {out:?}");
                }
            }
        }
        // Everything above a tombstone at the bottom with no snapshots disappears.
        assert!(collapse(v.clone(), &Stripes::snapshots(&[]), true, &TYPES).unwrap().is_empty());
        // A partial over a full row in one stripe becomes a full row.
        let out = collapse(v[3..].to_vec(), &Stripes::snapshots(&[]), false, &TYPES).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].kind, Kind::Put);
        // A lone partial row survives unless nothing can lie below it.
        assert_eq!(collapse(v[..1].to_vec(), &Stripes::snapshots(&[]), false, &TYPES).unwrap().len(), 1);
        assert!(collapse(v[..1].to_vec(), &Stripes::snapshots(&[]), true, &TYPES).unwrap().is_empty());
        // Within a history window every point above `history_from` reads as before, whatever
        // the snapshots; below it only the snapshots' points do.
        for history_from in 0..=6 {
            for snaps in [vec![], vec![1], vec![2]] {
                for bottom in [false, true] {
                    let stripes = Stripes { snapshots: &snaps, history_from };
                    let out = collapse(v.clone(), &stripes, bottom, &TYPES).unwrap();
                    let points = (history_from..=7).chain(snaps.iter().copied());
                    for s in points {
                        assert_eq!(
                            read(&out, s),
                            read(&v, s),
                            "from {history_from} {snaps:?} {bottom} at {s}: {out:?}"
                        );
                    }
                    let kept = newest_per_stripe(v.iter(), &stripes);
                    assert_eq!(
                        kept.iter().filter(|k| k.seq > history_from).count(),
                        v.iter().filter(|k| k.seq > history_from).count()
                    );
                }
            }
        }
    }
}
