//! Which versions of a block a scan sees, column by column: instead of merging runs, a scan
//! reads every run on its own and keeps, for each column, the versions that are visible at its
//! read point, carry the column, and are not superseded (the file's supersede vector,
//! [`Marks`]). Each live key then has exactly one live version per column across all runs.

use std::ops::Range;

use arrow_buffer::{BooleanBuffer, BooleanBufferBuilder};

use crate::mvcc::Kind;
use crate::sst::block::Block;
use crate::version::marks::{Marks, WHOLE};

/// Consecutive versions of one block, with where the block starts in its file and the file's
/// marks.
pub(super) struct Rows<'a> {
    pub block: &'a Block,
    pub rows: Range<usize>,
    /// Position in the file of the block's first version.
    pub first_row: u64,
    pub marks: Option<&'a Marks>,
    /// The group column the marks name for the block's column (they differ where the block
    /// holds one column of a row-group file's key page, whose marks name value columns).
    pub marked_as: Option<usize>,
}

impl Rows<'_> {
    /// Whether every version is visible at `seq`, carries group column `col` (`None`: the table
    /// has no value column, existence alone), and none is marked at or below `seq`: then all
    /// rows are live without looking at them one by one.
    pub(super) fn all_live(&self, col: Option<usize>, seq: u64) -> bool {
        let carried = match col {
            Some(j) => self.block.column(j).is_some_and(|p| p.carried_by_all),
            None => self.block.is_clean(),
        };
        carried && self.block.max_seq() <= seq && self.marked_at(seq).next().is_none()
    }

    /// The marks of these rows with a sequence number at or below `seq`, as (row in the
    /// segment, group column or [`WHOLE`]).
    fn marked_at(&self, seq: u64) -> impl Iterator<Item = (usize, u16)> + '_ {
        let start = self.first_row + self.rows.start as u64;
        let end = self.first_row + self.rows.end as u64;
        self.marks
            .into_iter()
            .flat_map(move |m| m.in_positions(start..end))
            .filter(move |m| m.seq.saturating_sub(crate::version::marks::planted_skew()) <= seq)
            .map(move |m| ((u64::from(m.row) - start) as usize, m.col))
    }

    /// The versions live for group column `col` (`None`: existence, for tables without value
    /// columns) at `seq`, one bit per row of the segment.
    pub(super) fn live(&self, col: Option<usize>, seq: u64) -> BooleanBuffer {
        let n = self.rows.len();
        if self.all_live(col, seq) {
            return BooleanBuffer::new_set(n);
        }
        let b = self.block;
        let mut bits = BooleanBufferBuilder::new(n);
        let visible = b.max_seq() <= seq;
        for i in self.rows.clone() {
            let carried = match col {
                Some(j) => b.carries(i, j),
                None => b.kind(i) == Kind::Put,
            };
            bits.append(carried && (visible || b.seq(i) <= seq));
        }
        for (r, c) in self.marked_at(seq) {
            if c == WHOLE || self.marked_as.is_some_and(|j| usize::from(c) == j) {
                bits.set_bit(r, false);
            }
        }
        bits.finish()
    }
}
