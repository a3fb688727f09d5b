//! Row-group files (SST format 6): every column group of a level in one file, aligned by row
//! position. A file holds one key range and one set of rows; every group holds row `r` at
//! ordinal `r`. Keys, sequence numbers and kinds are stored once, in *key pages* (blocks without
//! columns); each group's cells are in *group pages* (blocks without keys, see
//! [`BlockBuilder::keyless`]). Pages are cut at fixed row counts, never at keys:
//!
//! - the *granule* is `2^granule_shift` rows;
//! - a key page holds `2^key_span` granules, group `g`'s pages `2^span_g` granules each (the last
//!   page of each kind holds what is left), so a row's page in any group is found by a shift
//!   and page boundaries of all groups nest;
//! - spans are chosen from the groups' row widths so that every page is about a block.
//!
//! A point read finds its key's ordinals with one fence search and one binary search in one key
//! page, then reads each column it needs by position: no bloom filter, fence or key work per
//! group. A key's versions may continue into the next key page.
//!
//! Layout: pages in the order they fill (key and group pages interleaved), filter block, index
//! block, meta block, footer (see `docs/format/sst.md`).
//!
//! The database writes them at the levels of more than one group from Level-1 down, for tables
//! created with [`TableOptions::row_groups`](crate::TableOptions::row_groups). Point reads use
//! [`RowGroupReader::get`], and the scan's bulk and column-by-column paths read key pages and
//! the needed groups' pages by ordinal; the other readers (the row merge, marking, compaction)
//! see the file through [`SstReader`] as a file of whole rows whose blocks are the key pages,
//! each assembled with every column when read ([`RowGroupReader::assemble`]).
//!
//! [`SstReader`]: super::reader::SstReader

mod builder;
mod meta;
mod reader;
mod shape;
#[cfg(test)]
mod tests;

pub(crate) use builder::RowGroupBuilder;
pub(crate) use reader::{HeldPages, RowGroupReader, WholeRows};

/// The SST format version of row-group files written now.
pub(crate) const ROW_GROUP_FORMAT: u32 = 6;
/// The first version of row-group files, read still: its key pages do not say whether they go
/// on with the previous page's last key (see [`KeyPageEntry::continues`]).
pub(crate) const ROW_GROUP_FORMAT_5: u32 = 5;

/// Whether `version` is a row-group file's format.
pub(crate) fn is_row_group_format(version: u32) -> bool {
    version == ROW_GROUP_FORMAT || version == ROW_GROUP_FORMAT_5
}
