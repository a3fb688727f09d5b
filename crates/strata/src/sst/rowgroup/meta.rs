//! What a row-group file says of itself: the file-level meta block, and the index of its key
//! pages and group pages (encoded by the builder, decoded by the reader).

use std::sync::Arc;

use super::shape::{Shape, MAX_GRANULE_SHIFT, MAX_PAGE_SHIFT, MIN_GRANULE_SHIFT};
use super::ROW_GROUP_FORMAT_5;
use crate::codec::{put_bytes, put_varint, DecodeError, DecodeResult, Reader};
use crate::sst::builder::put_columns;
use crate::sst::format::BlockHandle;
use crate::sst::reader::read_columns;
use crate::sst::zone::Zones;
use crate::types::ColumnType;

/// Key page flags in the index.
pub(super) const PAGE_CLEAN: u8 = 1;
pub(super) const PAGE_CONTINUES: u8 = 2;

/// A key page's index entry.
#[derive(Debug, Clone)]
pub(crate) struct KeyPageEntry {
    /// The page's last key (its fence).
    pub last_key: Vec<u8>,
    pub handle: BlockHandle,
    pub min_seq: u64,
    pub max_seq: u64,
    /// Every row of the page is a full row and no key repeats within it.
    pub clean: bool,
    /// The page's first key is the previous page's last key: pages are cut at row counts, so a
    /// key's versions may go on into the next page, which then starts with versions the
    /// previous page's newer one supersedes. (Format 5 does not say: taken as true for every
    /// page but the first.)
    pub continues: bool,
}

/// A group page's index entry.
#[derive(Debug, Clone)]
pub(crate) struct GroupPageEntry {
    pub handle: BlockHandle,
    /// One zone map per column of the group.
    pub zones: Zones,
}

/// A group of a row-group file: its value columns (ascending) and their types.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    pub columns: Vec<usize>,
    pub types: Arc<[ColumnType]>,
}

impl Group {
    /// The group of `columns` of a table whose value columns have `value_types`.
    pub(crate) fn of(columns: &[usize], value_types: &[ColumnType]) -> Group {
        Group { columns: columns.to_vec(), types: columns.iter().map(|&c| value_types[c]).collect() }
    }
}

/// The file-level metadata of a row-group file.
#[derive(Debug, Clone)]
pub(super) struct RowGroupMeta {
    pub(super) table_id: u32,
    pub(super) groups: Vec<Group>,
    pub(super) entries: u64,
    pub(super) min_seq: u64,
    pub(super) max_seq: u64,
    pub(super) smallest: Vec<u8>,
    pub(super) largest: Vec<u8>,
    pub(super) index: BlockHandle,
    pub(super) filter: BlockHandle,
}

impl RowGroupMeta {
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, u64::from(self.table_id));
        put_varint(out, self.groups.len() as u64);
        for g in &self.groups {
            put_columns(out, &g.columns, &g.types);
        }
        put_varint(out, self.entries);
        put_varint(out, self.min_seq);
        put_varint(out, self.max_seq);
        put_bytes(out, &self.smallest);
        put_bytes(out, &self.largest);
        self.index.encode(out);
        self.filter.encode(out);
    }

    pub(super) fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let table_id = u32::try_from(r.varint()?).map_err(|_| DecodeError::new("bad table id"))?;
        let ngroups = r.len(u16::MAX as usize)?;
        let mut groups = Vec::with_capacity(ngroups);
        for _ in 0..ngroups {
            let (columns, types) = read_columns(r)?;
            if columns.windows(2).any(|w| w[0] >= w[1]) {
                return Err(DecodeError::new("group columns out of order"));
            }
            groups.push(Group { columns, types: types.into() });
        }
        Ok(RowGroupMeta {
            table_id,
            groups,
            entries: r.varint()?,
            min_seq: r.varint()?,
            max_seq: r.varint()?,
            smallest: r.bytes()?.to_vec(),
            largest: r.bytes()?.to_vec(),
            index: BlockHandle::decode(r)?,
            filter: BlockHandle::decode(r)?,
        })
    }
}

/// Encodes the index block: the row count and shape, then each key page's fence, handle,
/// sequence range and flags, then each group's span and its pages' handles and zone maps
/// (the inverse of [`decode_index`]).
pub(super) fn encode_index(
    rows: u64,
    shape: &Shape,
    key_pages: &[KeyPageEntry],
    group_pages: &[Vec<GroupPageEntry>],
    format: u32,
) -> Vec<u8> {
    let mut idx = Vec::new();
    put_varint(&mut idx, rows);
    idx.push(shape.granule_shift as u8);
    idx.push(shape.key_span as u8);
    for e in key_pages {
        put_bytes(&mut idx, &e.last_key);
        e.handle.encode(&mut idx);
        put_varint(&mut idx, e.min_seq);
        put_varint(&mut idx, e.max_seq);
        let continues = e.continues && format != ROW_GROUP_FORMAT_5;
        idx.push(if e.clean { PAGE_CLEAN } else { 0 } | if continues { PAGE_CONTINUES } else { 0 });
    }
    for (g, pages) in group_pages.iter().enumerate() {
        idx.push(shape.spans[g] as u8);
        for p in pages {
            p.handle.encode(&mut idx);
            p.zones.encode(&mut idx);
        }
    }
    idx
}

/// Decodes the index block against the meta: one entry per page the row count calls for.
pub(super) fn decode_index(
    b: &[u8],
    meta: &RowGroupMeta,
    version: u32,
) -> DecodeResult<(Shape, Vec<KeyPageEntry>, Vec<Vec<GroupPageEntry>>)> {
    let mut r = Reader::new(b);
    let rows = r.varint()?;
    if rows != meta.entries {
        return Err(DecodeError::new("index row count disagrees with meta"));
    }
    let granule_shift = u32::from(r.u8()?);
    let key_span = u32::from(r.u8()?);
    if !(MIN_GRANULE_SHIFT..=MAX_GRANULE_SHIFT).contains(&granule_shift) || granule_shift + key_span > MAX_PAGE_SHIFT {
        return Err(DecodeError::new("bad row-group shape"));
    }
    let nkeys = Shape::pages(rows, granule_shift + key_span);
    let mut key_pages = Vec::with_capacity(nkeys.min(b.len()));
    let known = if version == ROW_GROUP_FORMAT_5 { PAGE_CLEAN } else { PAGE_CLEAN | PAGE_CONTINUES };
    for p in 0..nkeys {
        let last_key = r.bytes()?.to_vec();
        let handle = BlockHandle::decode(&mut r)?;
        let (min_seq, max_seq) = (r.varint()?, r.varint()?);
        let flags = r.u8()?;
        if flags & !known != 0 || (p == 0 && flags & PAGE_CONTINUES != 0) {
            return Err(DecodeError::new("unknown key page flags"));
        }
        let clean = flags & PAGE_CLEAN != 0;
        let continues = if version == ROW_GROUP_FORMAT_5 { p > 0 } else { flags & PAGE_CONTINUES != 0 };
        key_pages.push(KeyPageEntry { last_key, handle, min_seq, max_seq, clean, continues });
    }
    if key_pages.windows(2).any(|w| w[0].last_key > w[1].last_key) {
        return Err(DecodeError::new("key page fences out of order"));
    }
    let mut spans = Vec::with_capacity(meta.groups.len());
    let mut group_pages = Vec::with_capacity(meta.groups.len());
    for g in &meta.groups {
        let span = u32::from(r.u8()?);
        if granule_shift + span > MAX_PAGE_SHIFT {
            return Err(DecodeError::new("bad group page span"));
        }
        let n = Shape::pages(rows, granule_shift + span);
        let mut pages = Vec::with_capacity(n.min(b.len()));
        for _ in 0..n {
            let handle = BlockHandle::decode(&mut r)?;
            let zones = Zones::decode(g.types.clone(), &mut r)?;
            pages.push(GroupPageEntry { handle, zones });
        }
        spans.push(span);
        group_pages.push(pages);
    }
    if !r.is_empty() {
        return Err(DecodeError::new("trailing bytes in index"));
    }
    Ok((Shape { granule_shift, key_span, spans }, key_pages, group_pages))
}
