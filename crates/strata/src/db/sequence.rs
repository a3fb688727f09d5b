//! Table sequences: named counters handing out `i64` values that no earlier call handed out in
//! the database, across restarts and crashes (SQL's hidden row ids, SERIAL and identity columns
//! take their values here).
//!
//! A sequence reserves values in blocks. Before it hands out a value at or above its high mark,
//! it logs a higher mark in the manifest ([`EditRecord::Sequence`]), so every value handed out
//! lies below a mark that is on disk. After a restart (or a crash) the sequence goes on from the
//! recorded mark: the rest of the block reserved before is skipped, never reused. Blocks double
//! from [`FIRST_BLOCK`] up to [`MAX_BLOCK`] values while a sequence is busy, so a bulk load logs
//! one manifest record per million values.

use super::store::TableState;
use super::DbInner;
use crate::catalog::TableInfo;
use crate::error::{Error, Result};
use crate::version::edit::{EditRecord, VersionEdit};

/// Values reserved by a sequence's first manifest record after an open.
const FIRST_BLOCK: i64 = 64;
/// The most values one manifest record reserves.
const MAX_BLOCK: i64 = 1 << 20;

/// A sequence in use since the open.
#[derive(Debug)]
pub(crate) struct Sequence {
    /// The next value to hand out.
    next: i64,
    /// The recorded high mark: every value below it may have been handed out.
    high: i64,
    /// Values the next reservation adds beyond what is asked.
    block: i64,
}

impl DbInner {
    /// Hands out `n` consecutive values of `table`'s sequence `name` and returns the first.
    pub(crate) fn sequence_values(&self, state: &TableState, table: &TableInfo, name: &str, n: u64) -> Result<i64> {
        self.check_writable()?;
        if n == 0 {
            return Err(Error::InvalidArgument("a sequence hands out at least one value".into()));
        }
        let mut per_table = state.sequences.lock();
        if !per_table.contains_key(name) {
            let view = self.view.load();
            let t = view.version.tables.get(&table.id).ok_or_else(|| Error::UnknownTable(table.name.clone()))?;
            // A sequence never used starts at 1.
            let high = t.sequences.get(name).copied().unwrap_or(1);
            per_table.insert(name.to_owned(), Sequence { next: high, high, block: FIRST_BLOCK });
        }
        let s = per_table.get_mut(name).ok_or_else(|| Error::InvalidArgument("internal: sequence vanished".into()))?;
        let exhausted = || Error::InvalidArgument(format!("sequence {name} of table {} is exhausted", table.name));
        let end = i64::try_from(n).ok().and_then(|n| s.next.checked_add(n)).ok_or_else(exhausted)?;
        if end > s.high {
            let high = end.saturating_add(s.block);
            let mut edit = VersionEdit::default();
            edit.push(EditRecord::Sequence { table: table.id, name: name.to_owned(), high });
            self.install(edit, None)?;
            s.high = high;
            s.block = (s.block * 2).min(MAX_BLOCK);
        }
        let first = s.next;
        s.next = end;
        Ok(first)
    }
}
