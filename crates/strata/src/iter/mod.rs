//! Iteration over many sorted sources at once: the memtables and the runs of every level are each
//! a [`Source`](merge::Source) of versions in (key asc, seq desc) order, and
//! [`MergeIter`](merge::MergeIter) interleaves them into one such stream. Scans and compaction
//! build on it; which versions survive is decided by [`crate::mvcc::chain`].

pub mod merge;
