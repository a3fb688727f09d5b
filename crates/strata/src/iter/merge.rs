//! The sources of versions and the k-way merge over them.
//!
//! Ties: two sources can hold the same (key, seq) while a flush is being installed (the memtable
//! and its new Level-0 file); the merge yields both, source order first, and consumers skip the
//! repeat.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::error::Result;
use crate::memtable::MemCursor;
use crate::mvcc::Entry;
use crate::sst::reader::SstCursor;
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
        Ok(self.cursor.next_entry().map(|e| Entry { key: e.key, seq: e.seq, kind: e.kind, row: e.row, cover: None }))
    }
}

/// A sorted run: its files one after another, opened lazily, stopping past `upper`.
pub(crate) struct RunSource {
    files: Vec<Arc<FileMeta>>,
    next_file: usize,
    cursor: Option<SstCursor>,
    tables: Arc<TableCache>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    value_types: Arc<[ColumnType]>,
    wanted: Option<Arc<[bool]>>,
    fill_cache: bool,
    /// Files whose every version is above this sequence number are passed over.
    snapshot: u64,
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
        let next_file = files.partition_point(|f| f.largest.as_slice() < lower);
        RunSource {
            files,
            next_file,
            cursor: None,
            tables,
            lower: lower.to_vec(),
            upper: upper.map(<[u8]>::to_vec),
            value_types,
            wanted,
            fill_cache,
            snapshot: u64::MAX,
        }
    }

    /// Passes over the files a read at `seq` cannot see any version of (the snapshot filter),
    /// when seeking and when moving from file to file.
    pub(crate) fn skip_newer_than(mut self, seq: u64) -> Self {
        self.snapshot = seq;
        self
    }
}

impl Source for RunSource {
    fn origin(&self) -> Option<Origin> {
        self.cursor.as_ref().and_then(SstCursor::origin)
    }

    fn next_entry(&mut self) -> Result<Option<Entry>> {
        loop {
            if let Some(c) = &mut self.cursor {
                if let Some(e) = c.next_entry()? {
                    return Ok(Some(e));
                }
                self.cursor = None;
            }
            let Some(f) = self.files.get(self.next_file) else {
                return Ok(None);
            };
            if self.upper.as_deref().is_some_and(|u| f.smallest.as_slice() >= u) {
                return Ok(None);
            }
            self.next_file += 1;
            if f.min_seq > self.snapshot {
                self.tables.probes.add(1, 0, 0);
                continue;
            }
            let reader = self.tables.get(f.number)?;
            self.cursor = Some(SstCursor::new(
                reader,
                &self.lower,
                self.value_types.clone(),
                self.wanted.clone(),
                self.fill_cache,
            )?);
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
        let Some(Head { entry, src, origin }) = self.heap.pop() else {
            return Ok(None);
        };
        let s = &mut self.sources[src];
        if let Some(next) = s.next_entry()? {
            self.heap.push(Head { entry: next, src, origin: s.origin() });
        }
        Ok(Some((entry, origin)))
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
        Entry { key: k.as_bytes().to_vec(), seq, kind: Kind::Put, row: vec![], cover: None }
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
