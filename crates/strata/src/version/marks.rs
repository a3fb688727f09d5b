//! Supersede vectors: for each SST, which of its rows newer versions have superseded, and from
//! which sequence number on (merge-on-write, done by flush and compaction in the background;
//! see `docs/architecture.md` and `docs/format/manifest.md`).
//!
//! A [`Mark`] says that row `row` of a file (its position among the file's versions, counting
//! from 0 across blocks) is dead for reads at sequence numbers `>= seq`: either the whole row
//! ([`WHOLE`]: a newer full row or tombstone of its key) or one column of the file's group (`col`,
//! the column's position in the group: a newer partial row carrying it). A read at `S` ignores
//! a row's column when some mark covering it has `seq <= S`, so snapshots keep working.
//!
//! Marks only accumulate while a file lives (compaction writes new files with marks of their
//! own); each flush or compaction adds one [`MarkChunk`] per file it marks, and a file's
//! [`Marks`] is the list of its chunks, merged into one when it grows long. Versions share
//! chunks by `Arc`, so adding marks costs the new marks, not the old ones.

use std::ops::Range;
use std::sync::Arc;

use crate::codec::{put_varint, DecodeError, DecodeResult, Reader};

/// The `col` of a mark on the whole row.
pub const WHOLE: u16 = u16::MAX;

/// Chunks a file's marks may have before they are merged into one.
const MAX_CHUNKS: usize = 8;

/// One supersession: row `row` of the file (column `col` of its group, or [`WHOLE`]) is dead
/// for reads at `seq` and later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mark {
    /// Position of the version in the file.
    pub row: u32,
    /// Column within the file's group, or [`WHOLE`].
    pub col: u16,
    /// Sequence number of the superseding version.
    pub seq: u64,
}

impl Mark {
    /// Whether the mark covers column `col` (position in the group) of its row.
    pub fn covers(&self, col: usize) -> bool {
        self.col == WHOLE || usize::from(self.col) == col
    }
}

/// Marks added to one file at once, sorted by (row, col), at most one per (row, col).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarkChunk {
    marks: Vec<Mark>,
}

impl MarkChunk {
    /// Sorts `marks`, keeping the smallest sequence number per (row, col) and leaving out column
    /// marks that a whole-row mark of the same row already covers.
    pub fn new(mut marks: Vec<Mark>) -> Self {
        marks.sort_unstable();
        marks.dedup_by(|later, first| later.row == first.row && later.col == first.col);
        let mut out: Vec<Mark> = Vec::with_capacity(marks.len());
        let mut i = 0;
        while i < marks.len() {
            let row = marks[i].row;
            let end = i + marks[i..].partition_point(|m| m.row == row);
            let whole = marks[i..end].iter().find(|m| m.col == WHOLE).map(|m| m.seq);
            out.extend(marks[i..end].iter().filter(|m| m.col == WHOLE || whole.is_none_or(|w| m.seq < w)));
            i = end;
        }
        MarkChunk { marks: out }
    }

    /// The marks, by (row, col).
    pub fn marks(&self) -> &[Mark] {
        &self.marks
    }

    /// Number of marks.
    pub fn len(&self) -> usize {
        self.marks.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    /// The marks of rows in `rows`.
    fn in_rows(&self, rows: Range<u32>) -> &[Mark] {
        let lo = self.marks.partition_point(|m| m.row < rows.start);
        let hi = lo + self.marks[lo..].partition_point(|m| m.row < rows.end);
        &self.marks[lo..hi]
    }

    /// `count | count × (row delta | col | seq)`, varints; col is 0 for the whole row and the
    /// group column + 1 otherwise; the row delta is from the previous mark's row (the first
    /// from 0).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.marks.len() as u64);
        let mut prev = 0u32;
        for m in &self.marks {
            put_varint(out, u64::from(m.row - prev));
            put_varint(out, if m.col == WHOLE { 0 } else { u64::from(m.col) + 1 });
            put_varint(out, m.seq);
            prev = m.row;
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let n = r.len(r.remaining())?;
        let mut marks = Vec::with_capacity(n);
        let mut prev: Option<Mark> = None;
        for _ in 0..n {
            let delta = r.varint()?;
            let row = u64::from(prev.map_or(0, |p| p.row))
                .checked_add(delta)
                .and_then(|r| u32::try_from(r).ok())
                .ok_or_else(|| DecodeError::new("mark row out of range"))?;
            let col = match r.varint()? {
                0 => WHOLE,
                c => u16::try_from(c - 1)
                    .ok()
                    .filter(|&c| c != WHOLE)
                    .ok_or_else(|| DecodeError::new("mark column out of range"))?,
            };
            // The last row number is none (a file's rows are numbered below 2^32 - 1).
            if row == u32::MAX {
                return Err(DecodeError::new("mark row out of range"));
            }
            let m = Mark { row, col, seq: r.varint()? };
            if prev.is_some_and(|p| (p.row, p.col) >= (m.row, m.col)) {
                return Err(DecodeError::new("marks out of order"));
            }
            marks.push(m);
            prev = Some(m);
        }
        Ok(MarkChunk { marks })
    }
}

/// A bug planted for the metamorphic test to catch (`tests/it/metamorphic.rs`): in a build with
/// debug assertions whose environment has `STRATA_PLANTED_BUG=mark-early`, scans take every mark
/// to apply from one sequence number before its own. 0 (no bug) otherwise.
pub(crate) fn planted_skew() -> u64 {
    if !cfg!(debug_assertions) {
        return 0;
    }
    static SKEW: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SKEW.get_or_init(|| u64::from(std::env::var("STRATA_PLANTED_BUG").is_ok_and(|v| v == "mark-early")))
}

/// Every mark of one file: the chunks added so far.
#[derive(Debug, Clone, Default)]
pub struct Marks {
    chunks: Vec<Arc<MarkChunk>>,
}

impl Marks {
    /// The file's marks with `chunk` added; merges the chunks when there are many.
    pub(crate) fn with(&self, chunk: Arc<MarkChunk>) -> Marks {
        let mut chunks = self.chunks.clone();
        chunks.push(chunk);
        let m = Marks { chunks };
        if m.chunks.len() > MAX_CHUNKS {
            Marks { chunks: vec![Arc::new(m.merged())] }
        } else {
            m
        }
    }

    /// All marks in one chunk.
    pub fn merged(&self) -> MarkChunk {
        match self.chunks.as_slice() {
            [one] => (**one).clone(),
            many => MarkChunk::new(many.iter().flat_map(|c| c.marks.iter().copied()).collect()),
        }
    }

    /// Number of marks (a row and column marked by two chunks counts twice).
    pub fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum()
    }

    /// Whether the file has no marks.
    pub fn is_empty(&self) -> bool {
        self.chunks.iter().all(|c| c.is_empty())
    }

    /// The marks of rows in `rows`, chunk by chunk (not in one order).
    pub fn in_rows(&self, rows: Range<u32>) -> impl Iterator<Item = &Mark> + '_ {
        self.chunks.iter().flat_map(move |c| c.in_rows(rows.clone()).iter())
    }

    /// The marks of the versions at file positions `rows` (positions beyond `u32` hold none).
    pub fn in_positions(&self, rows: Range<u64>) -> impl Iterator<Item = &Mark> + '_ {
        let clamp = |p: u64| u32::try_from(p).unwrap_or(u32::MAX);
        self.in_rows(clamp(rows.start)..clamp(rows.end))
    }

    /// Whether some version at file positions `rows` has a mark at or below `seq`.
    pub fn any_at_or_below(&self, rows: Range<u64>, seq: u64) -> bool {
        self.in_positions(rows).any(|m| m.seq.saturating_sub(planted_skew()) <= seq)
    }

    /// From which sequence number on column `col` of row `row` is superseded (by a mark on the
    /// column or on the whole row), if it is.
    pub fn superseded_at(&self, row: u32, col: usize) -> Option<u64> {
        self.in_rows(row..row.saturating_add(1)).filter(|m| m.covers(col)).map(|m| m.seq).min()
    }

    /// From which sequence number on row `row` is superseded as a whole, if it is.
    pub fn whole_at(&self, row: u32) -> Option<u64> {
        self.in_rows(row..row.saturating_add(1)).filter(|m| m.col == WHOLE).map(|m| m.seq).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(row: u32, col: u16, seq: u64) -> Mark {
        Mark { row, col, seq }
    }

    /// Found by the `marks` fuzz target: a mark on row `u32::MAX` overflowed the row range the
    /// queries look in. Such a row is refused when decoded, and queries on it answer none.
    #[test]
    fn a_mark_on_the_last_row_number_is_refused_and_asking_about_it_does_not_overflow() {
        let mut enc = Vec::new();
        MarkChunk::new(vec![m(u32::MAX, 0, 7)]).encode(&mut enc);
        assert!(MarkChunk::decode(&mut Reader::new(&enc)).is_err());
        let marks = Marks::default().with(Arc::new(MarkChunk::new(vec![m(u32::MAX - 1, WHOLE, 7)])));
        assert_eq!(marks.whole_at(u32::MAX - 1), Some(7));
        assert_eq!((marks.whole_at(u32::MAX), marks.superseded_at(u32::MAX, 0)), (None, None));
    }

    #[test]
    fn chunks_keep_the_first_supersession_and_drop_what_the_whole_row_covers() {
        let c = MarkChunk::new(vec![m(5, 1, 30), m(2, WHOLE, 20), m(5, 1, 25), m(2, 0, 10), m(2, 3, 40), m(0, 2, 7)]);
        // Row 2: column 0 died before the row did and stays; column 3 died after and goes.
        assert_eq!(c.marks(), &[m(0, 2, 7), m(2, 0, 10), m(2, WHOLE, 20), m(5, 1, 25)]);
        let mut b = Vec::new();
        c.encode(&mut b);
        assert_eq!(MarkChunk::decode(&mut Reader::new(&b)).unwrap(), c);
        // Damage is caught: a truncated chunk, and marks out of order.
        assert!(MarkChunk::decode(&mut Reader::new(&b[..b.len() - 1])).is_err());
        let mut bad = Vec::new();
        put_varint(&mut bad, 2);
        for (d, col, seq) in [(3u64, 1u64, 9u64), (0, 1, 9)] {
            put_varint(&mut bad, d);
            put_varint(&mut bad, col);
            put_varint(&mut bad, seq);
        }
        assert!(MarkChunk::decode(&mut Reader::new(&bad)).is_err());
    }

    #[test]
    fn a_files_marks_answer_per_row_and_column_across_chunks() {
        let mut ms = Marks::default();
        for i in 0..20u32 {
            ms = ms.with(Arc::new(MarkChunk::new(vec![m(i, 0, 100 + u64::from(i)), m(i + 1, WHOLE, 200)])));
        }
        assert!(ms.chunks.len() <= MAX_CHUNKS);
        assert_eq!(ms.superseded_at(3, 0), Some(103));
        assert_eq!(ms.superseded_at(3, 1), Some(200));
        assert_eq!(ms.whole_at(0), None);
        assert_eq!(ms.superseded_at(0, 0), Some(100));
        assert_eq!(ms.superseded_at(0, 1), None);
        assert_eq!(ms.in_rows(20..22).count(), 1);
        let merged = ms.merged();
        assert!(merged.marks().windows(2).all(|w| (w[0].row, w[0].col) < (w[1].row, w[1].col)));
    }
}
