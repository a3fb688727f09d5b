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
use crate::types::ColumnType;

/// Fills the columns `newer` does not carry from `older`.
pub(crate) fn fill_from(newer: &mut Cells, older: &Cells) {
    for (n, o) in newer.iter_mut().zip(older) {
        if n.is_none() {
            n.clone_from(o);
        }
    }
}

/// Outcome of reading a key's versions newest first.
#[derive(Debug, Default)]
pub(crate) struct Resolver {
    acc: Option<Cells>,
    settled: Option<bool>,
}

impl Resolver {
    /// True once a full row or tombstone has decided the outcome.
    pub(crate) fn is_settled(&self) -> bool {
        self.settled.is_some()
    }

    /// Adds the next older version (callers skip versions newer than their snapshot).
    pub(crate) fn push(&mut self, kind: Kind, cells: Cells) {
        if self.settled.is_some() {
            return;
        }
        match kind {
            Kind::Delete => {
                self.settled = Some(false);
                self.acc = None;
            }
            Kind::Put | Kind::Update => {
                match &mut self.acc {
                    None => self.acc = Some(cells),
                    Some(acc) => fill_from(acc, &cells),
                }
                if kind == Kind::Put {
                    self.settled = Some(true);
                }
            }
        }
    }

    /// The visible row: `Some` only if a full row was reached.
    pub(crate) fn finish(self) -> Option<Cells> {
        match self.settled {
            Some(true) => self.acc,
            _ => None,
        }
    }
}

/// Collapses the versions of one key (all with the same key, newest first) for flush/compaction.
///
/// `snapshots` are the live snapshot sequence numbers in ascending order, captured after every
/// input was visible: any reader not in the list reads above every input version. Versions that
/// no reader can tell apart (same visibility stripe between consecutive snapshots) merge into one;
/// partial rows over a known full row become full rows. With `bottommost` (nothing older exists
/// below the output for this key) tombstones and invisible partial rows are dropped.
pub(crate) fn collapse(
    mut versions: Vec<Entry>,
    snapshots: &[u64],
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
    Ok(collapse_decoded(decoded, snapshots, bottommost)
        .into_iter()
        .map(|v| {
            let mut row = Vec::new();
            if v.kind != Kind::Delete {
                encode_row(types, &v.cells, &mut row);
            }
            Entry { key: key.clone(), seq: v.seq, kind: v.kind, row }
        })
        .collect())
}

/// A decoded version of one key.
struct Ver {
    seq: u64,
    kind: Kind,
    cells: Cells,
}

fn collapse_decoded(versions: Vec<Ver>, snapshots: &[u64], bottommost: bool) -> Vec<Ver> {
    // 1. Merge each stripe (versions visible to exactly the same snapshots) into one version.
    let mut stripes: Vec<Ver> = Vec::new();
    let mut current: Option<(usize, Ver, bool)> = None; // (stripe, merged, settled)
    for v in versions {
        let stripe = snapshots.partition_point(|&s| s < v.seq);
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
        Entry { key: b"k".to_vec(), seq, kind, row }
    }

    fn read(versions: &[Entry], at: u64) -> Option<Cells> {
        let mut r = Resolver::default();
        for v in versions.iter().filter(|v| v.seq <= at) {
            r.push(v.kind, decode_row(&TYPES, &v.row, None).unwrap());
        }
        r.finish()
    }

    #[test]
    fn partial_over_nothing_or_tombstone_is_invisible() {
        let v =
            vec![e(3, Kind::Update, &[Some(1), None]), e(2, Kind::Delete, &[]), e(1, Kind::Put, &[Some(0), Some(0)])];
        assert_eq!(read(&v, 3), None);
        assert_eq!(read(&v, 1), Some(vec![Some(Value::Int(0)), Some(Value::Int(0))]));
        assert_eq!(read(&v[..1], 3), None);
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
                let out = collapse(v.clone(), &snaps, bottom, &TYPES).unwrap();
                for &s in snaps.iter().chain(std::iter::once(&7)) {
                    assert_eq!(read(&out, s), read(&v, s), "snaps {snaps:?} bottom {bottom} at {s}: {out:?}");
                }
            }
        }
        // Everything above a tombstone at the bottom with no snapshots disappears.
        assert!(collapse(v.clone(), &[], true, &TYPES).unwrap().is_empty());
        // A partial over a full row in one stripe becomes a full row.
        let out = collapse(v[3..].to_vec(), &[], false, &TYPES).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].kind, Kind::Put);
        // A lone partial row survives unless nothing can lie below it.
        assert_eq!(collapse(v[..1].to_vec(), &[], false, &TYPES).unwrap().len(), 1);
        assert!(collapse(v[..1].to_vec(), &[], true, &TYPES).unwrap().is_empty());
    }
}
