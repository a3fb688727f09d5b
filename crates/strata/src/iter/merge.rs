//! The sources of versions and the k-way merge over them.
//!
//! Ties: two sources can hold the same (key, seq) while a flush is being installed (the memtable
//! and its new Level-0 file); the merge yields both, source order first, and consumers skip the
//! repeat.

use std::cmp::Ordering;
use std::collections::binary_heap::PeekMut;
use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::error::Result;
use crate::memtable::MemCursor;
use crate::mvcc::Entry;
use crate::sst::reader::RowEncoder;
use crate::sst::run::RunCursor;
use crate::sst::table_cache::TableCache;
use crate::types::ColumnType;
use crate::version::FileMeta;

/// A stream of versions in (key asc, seq desc) order.
/// Where a version is stored: (file number, position in the file).
pub(crate) type Origin = (u64, u64);

pub(crate) trait Source: Send {
    fn next_entry(&mut self) -> Result<Option<Entry>>;

    /// Where the entry last returned is stored: (file number, position in the file), for
    /// sources reading SSTs.
    fn origin(&self) -> Option<Origin> {
        None
    }
}

/// One table's entries of one memtable.
pub(crate) struct MemSource {
    pub cursor: MemCursor,
}

impl Source for MemSource {
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        Ok(self.cursor.next_entry().map(|e| Entry::new(e.key, e.seq, e.kind, e.row, None)))
    }
}

/// Bytes a merge that reads its inputs whole (compaction) reads from a file at once: on a disk,
/// one positioning per mebibyte instead of one per block when other reads interleave.
pub(crate) const COMPACTION_READ_AHEAD: u64 = 1 << 20;

/// A sorted run: its files one after another, opened lazily, stopping past `upper`.
pub(crate) struct RunSource {
    cursor: RunCursor,
    tables: Arc<TableCache>,
    /// Where the walk starts; `None` once it has.
    lower: Option<Vec<u8>>,
    value_types: Arc<[ColumnType]>,
    wanted: Option<Arc<[bool]>>,
    /// The open file's number and its row encoder.
    encoder: Option<(u64, RowEncoder)>,
    /// Full rows name their place in their block instead of being encoded (see
    /// [`Self::in_place`]).
    in_place: bool,
}

impl RunSource {
    /// Versions of `files` (one run, key-ordered) with `lower <= key < upper`. The caller
    /// filters keys at or above `upper`; the run only avoids opening files wholly beyond it.
    pub(crate) fn new(
        files: Vec<Arc<FileMeta>>,
        tables: Arc<TableCache>,
        lower: &[u8],
        upper: Option<&[u8]>,
        value_types: Arc<[ColumnType]>,
        wanted: Option<Arc<[bool]>>,
        fill_cache: bool,
    ) -> Self {
        // A scan reading some columns assembles a row-group file's blocks with those alone (one
        // reading them all keeps whole blocks, which the cache holds for the next scan).
        let mut cursor = RunCursor::new(files, fill_cache).until(upper);
        if let Some(w) = wanted.as_ref().filter(|w| w.contains(&false)) {
            cursor = cursor.columns((0..w.len()).filter(|&vi| w[vi]).collect());
        }
        RunSource { cursor, tables, lower: Some(lower.to_vec()), value_types, wanted, encoder: None, in_place: false }
    }

    /// Full rows come with their row left empty and their place in their block named
    /// ([`crate::mvcc::Entry::materialize`]), so that a merge writing them out copies their
    /// cells column by column instead of encoding each into a row and decoding it again. For
    /// merges that materialize every version whose row they read.
    /// Such merges read their runs whole, so they read ahead ([`COMPACTION_READ_AHEAD`]).
    pub(crate) fn in_place(mut self) -> Self {
        self.in_place = true;
        self.cursor = self.cursor.read_ahead(COMPACTION_READ_AHEAD);
        self
    }

    /// Passes over the files a read at `seq` cannot see any version of (the snapshot filter),
    /// when seeking and when moving from file to file.
    pub(crate) fn skip_newer_than(mut self, seq: u64) -> Self {
        self.cursor = self.cursor.skip_newer_than(seq);
        self
    }
}

impl Source for RunSource {
    fn origin(&self) -> Option<Origin> {
        let row = self.cursor.row().checked_sub(1)?;
        self.cursor.block()?;
        let r = self.cursor.reader()?;
        Some((r.number(), r.first_row(self.cursor.block_index()) + row as u64))
    }

    fn next_entry(&mut self) -> Result<Option<Entry>> {
        if let Some(lower) = self.lower.take() {
            self.cursor.seek(&self.tables, &lower)?;
        }
        loop {
            let (Some(r), Some(b)) = (self.cursor.reader(), self.cursor.block()) else { return Ok(None) };
            let i = self.cursor.row();
            if i < b.len() {
                if self.encoder.as_ref().is_none_or(|(n, _)| *n != r.number()) {
                    self.encoder =
                        Some((r.number(), RowEncoder::new(r, self.value_types.clone(), self.wanted.clone())));
                }
                let Some((_, enc)) = &mut self.encoder else { return Ok(None) };
                let e =
                    if self.in_place { enc.entry_in_place(b, i) } else { enc.entry_placed(b, i, self.cursor.placed()) };
                self.cursor.set_row(i + 1);
                return Ok(Some(e));
            }
            self.cursor.next_block(&self.tables)?;
        }
    }
}

struct Head {
    entry: Entry,
    src: usize,
    origin: Option<Origin>,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    /// Max-heap order: the smallest key, then the highest seq, then the first source, is greatest.
    fn cmp(&self, other: &Self) -> Ordering {
        other.entry.key.cmp(&self.entry.key).then(self.entry.seq.cmp(&other.entry.seq)).then(other.src.cmp(&self.src))
    }
}

/// Merges sources into one (key asc, seq desc) stream. Sources listed first win ties.
pub(crate) struct MergeIter {
    sources: Vec<Box<dyn Source>>,
    heap: BinaryHeap<Head>,
    started: bool,
}

impl MergeIter {
    pub(crate) fn new(sources: Vec<Box<dyn Source>>) -> Self {
        MergeIter { heap: BinaryHeap::with_capacity(sources.len()), sources, started: false }
    }

    fn start(&mut self) -> Result<()> {
        self.started = true;
        for (src, s) in self.sources.iter_mut().enumerate() {
            if let Some(entry) = s.next_entry()? {
                self.heap.push(Head { entry, src, origin: s.origin() });
            }
        }
        Ok(())
    }

    /// The next version overall.
    pub(crate) fn next_entry(&mut self) -> Result<Option<Entry>> {
        Ok(self.next_with_origin()?.map(|(e, _)| e))
    }

    /// The next version overall and where it is stored (see [`Source::origin`]).
    pub(crate) fn next_with_origin(&mut self) -> Result<Option<(Entry, Option<Origin>)>> {
        if !self.started {
            self.start()?;
        }
        // The source of the head refills the head in place: one sift down instead of a pop and
        // a push (most of a merge's steps take the next version from the same source).
        let Some(mut top) = self.heap.peek_mut() else {
            return Ok(None);
        };
        let s = &mut self.sources[top.src];
        match s.next_entry()? {
            Some(next) => {
                let origin = s.origin();
                let entry = std::mem::replace(&mut top.entry, next);
                Ok(Some((entry, std::mem::replace(&mut top.origin, origin))))
            }
            None => {
                let Head { entry, origin, .. } = PeekMut::pop(top);
                Ok(Some((entry, origin)))
            }
        }
    }
}

/// The column-merging iterator of one level (LASER Fig. 5): the level's column-group runs read
/// side by side in key order. Every version keeps the cover of the group it came from, so the
/// resolver above stitches a key's columns from several groups (and several levels).
pub(crate) struct ColumnMerge(MergeIter);

impl ColumnMerge {
    pub(crate) fn new(groups: Vec<Box<dyn Source>>) -> Self {
        ColumnMerge(MergeIter::new(groups))
    }
}

impl Source for ColumnMerge {
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        self.0.next_entry()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mvcc::Kind;

    struct VecSource(std::vec::IntoIter<Entry>);
    impl Source for VecSource {
        fn next_entry(&mut self) -> Result<Option<Entry>> {
            Ok(self.0.next())
        }
    }

    fn e(k: &str, seq: u64) -> Entry {
        Entry::new(k.as_bytes().to_vec(), seq, Kind::Put, vec![], None)
    }

    #[test]
    fn merges_key_ascending_seq_descending() {
        let a = vec![e("a", 5), e("c", 9), e("c", 2)];
        let b = vec![e("a", 7), e("b", 1), e("c", 4)];
        let mut m = MergeIter::new(vec![Box::new(VecSource(a.into_iter())), Box::new(VecSource(b.into_iter()))]);
        let mut got = Vec::new();
        while let Some(x) = m.next_entry().unwrap() {
            got.push((String::from_utf8(x.key).unwrap(), x.seq));
        }
        let want: Vec<(String, u64)> = [("a", 7), ("a", 5), ("b", 1), ("c", 9), ("c", 4), ("c", 2)]
            .iter()
            .map(|(k, s)| (k.to_string(), *s))
            .collect();
        assert_eq!(got, want);
    }
}
