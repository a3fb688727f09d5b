//! Version edits: the records of the manifest. One edit is one manifest record and is applied
//! atomically. See `docs/format/manifest.md`.

use std::sync::Arc;

use super::marks::MarkChunk;
use super::FileMeta;
use crate::catalog::{TableInfo, TableOptions};
use crate::codec::{put_bytes, put_varint, DecodeError, DecodeResult, Reader};
use crate::tier::{TierRecord, MAX_TIERS};
use crate::types::Schema;

/// One change to the set of tables and files.
#[derive(Debug, Clone, PartialEq)]
pub enum EditRecord {
    /// A table was created.
    CreateTable(TableInfo),
    /// A table was dropped (its files become obsolete).
    DropTable(u32),
    /// A file joined a level.
    AddFile {
        /// Table id.
        table: u32,
        /// Level.
        level: usize,
        /// The file.
        file: FileMeta,
    },
    /// A file left a level.
    DeleteFile {
        /// Table id.
        table: u32,
        /// Level.
        level: usize,
        /// File number.
        number: u64,
    },
    /// WAL files numbered below this hold nothing that is not in SSTs.
    LogNumber(u64),
    /// The next unused file number.
    NextFileNumber(u64),
    /// Every sequence number up to this one has been used.
    LastSequence(u64),
    /// The next unused table id.
    NextTableId(u32),
    /// WAL files numbered below this hold nothing lineage-engine tables still need (their data
    /// is in checkpoints); absent while no lineage table was ever created.
    LineageLogNumber(u64),
    /// The lineage checkpoint recovery loads: file number and the sequence number it holds the
    /// lineage tables at.
    LineageCheckpoint {
        /// File number (`NNNNNN.lck`).
        number: u64,
        /// Sequence number.
        seq: u64,
    },
    /// The history retention window in force and the history floor: reads as of any sequence
    /// number from the floor up are answered (flush and compaction kept their versions).
    History {
        /// The retention window in milliseconds (0: history is kept only for live snapshots).
        retention_ms: u64,
        /// The history floor.
        floor: u64,
    },
    /// Samples of the wall clock: (Unix milliseconds, newest sequence number committed by
    /// then), oldest first (see [`crate::mvcc::clock`]); added to those logged before.
    Clock(Vec<(u64, u64)>),
    /// Where atomic batches of more than one operation begin and end (see
    /// [`crate::mvcc::batches`]): every such batch from `known_from` on is recorded, and these
    /// `(first, last)` sequence ranges, oldest first, are added to those logged before.
    Batches {
        /// The first sequence number from which every batch is recorded.
        known_from: u64,
        /// The ranges.
        ranges: Vec<(u64, u64)>,
    },
    /// Rows of a file were superseded (supersede vectors, see [`super::marks`]).
    Marks {
        /// Table id.
        table: u32,
        /// File number.
        number: u64,
        /// The marks added.
        chunk: Arc<MarkChunk>,
    },
    /// The database's storage tiers, in order (the first is the fast one); absent while it has
    /// only its own directory. The newest record wins.
    Tiers(Vec<TierRecord>),
    /// A Level-0 file whose flush left the slow tier's files unmarked (deferred marking, see
    /// [`crate::compaction::tiering`]): its versions have not yet marked what they supersede
    /// there, and its partial rows may lie over no row. A staging compaction replaces it.
    DeferredMarks {
        /// Table id.
        table: u32,
        /// File number.
        number: u64,
    },
    /// A table's column-group layout changed (see [`crate::Db::set_layout`]): compactions from
    /// here on write `layout`, and files of Level-1 and below numbered under `before` may hold
    /// an earlier layout until the background re-layout rewrites them.
    SetLayout {
        /// Table id.
        table: u32,
        /// The layout text (`None`: whole rows at every level).
        layout: Option<String>,
        /// Every file written under an earlier layout is numbered below this.
        before: u64,
    },
    /// A table took the name of another, dropped in the same edit (see
    /// [`crate::Db::replace_table`]).
    RenameTable {
        /// Table id.
        table: u32,
        /// The new name.
        name: String,
    },
    /// A table's named sequence (see [`crate::Table::sequence`]) may have handed out every value
    /// below `high`; none of them is handed out again.
    Sequence {
        /// Table id.
        table: u32,
        /// The sequence's name.
        name: String,
        /// The first value never handed out.
        high: i64,
    },
}

/// A group of records applied together.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VersionEdit {
    /// The records, applied in order.
    pub records: Vec<EditRecord>,
}

const CREATE: u8 = 1;
const DROP: u8 = 2;
const ADD: u8 = 3;
const DELETE: u8 = 4;
const LOG: u8 = 5;
const NEXT_FILE: u8 = 6;
const LAST_SEQ: u8 = 7;
const NEXT_TABLE: u8 = 8;
const MARKS: u8 = 9;
const LINEAGE_LOG: u8 = 10;
const LINEAGE_CHECKPOINT: u8 = 11;
const HISTORY: u8 = 12;
const CLOCK: u8 = 13;
const TIERS: u8 = 14;
const ADD_ON_TIER: u8 = 15;
const DEFERRED_MARKS: u8 = 16;
const BATCHES: u8 = 17;
const SET_LAYOUT: u8 = 18;
const SEQUENCE: u8 = 19;
const RENAME_TABLE: u8 = 20;

fn u32_of(v: u64) -> DecodeResult<u32> {
    u32::try_from(v).map_err(|_| DecodeError::new("value out of range"))
}

impl VersionEdit {
    pub(crate) fn push(&mut self, r: EditRecord) {
        self.records.push(r);
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for r in &self.records {
            match r {
                EditRecord::CreateTable(t) => {
                    out.push(CREATE);
                    put_varint(&mut out, u64::from(t.id));
                    put_bytes(&mut out, t.name.as_bytes());
                    t.schema.encode(&mut out);
                    let mut o = Vec::new();
                    t.options.encode(&mut o);
                    put_bytes(&mut out, &o);
                }
                EditRecord::DropTable(id) => {
                    out.push(DROP);
                    put_varint(&mut out, u64::from(*id));
                }
                EditRecord::AddFile { table, level, file: f } => {
                    // Files of the first tier keep the record older builds know.
                    out.push(if f.tier == 0 { ADD } else { ADD_ON_TIER });
                    put_varint(&mut out, u64::from(*table));
                    put_varint(&mut out, *level as u64);
                    for v in [f.number, f.size, f.entries, f.min_seq, f.max_seq, u64::from(f.cg)] {
                        put_varint(&mut out, v);
                    }
                    put_bytes(&mut out, &f.smallest);
                    put_bytes(&mut out, &f.largest);
                    if f.tier != 0 {
                        out.push(f.tier);
                    }
                }
                EditRecord::Tiers(tiers) => {
                    out.push(TIERS);
                    put_varint(&mut out, tiers.len() as u64);
                    for t in tiers {
                        put_bytes(&mut out, t.name.as_bytes());
                        put_bytes(&mut out, t.dir.as_bytes());
                        put_varint(&mut out, t.budget);
                        put_varint(&mut out, t.token);
                    }
                }
                EditRecord::DeleteFile { table, level, number } => {
                    out.push(DELETE);
                    put_varint(&mut out, u64::from(*table));
                    put_varint(&mut out, *level as u64);
                    put_varint(&mut out, *number);
                }
                EditRecord::LogNumber(n) => {
                    out.push(LOG);
                    put_varint(&mut out, *n);
                }
                EditRecord::NextFileNumber(n) => {
                    out.push(NEXT_FILE);
                    put_varint(&mut out, *n);
                }
                EditRecord::LastSequence(n) => {
                    out.push(LAST_SEQ);
                    put_varint(&mut out, *n);
                }
                EditRecord::NextTableId(n) => {
                    out.push(NEXT_TABLE);
                    put_varint(&mut out, u64::from(*n));
                }
                EditRecord::LineageLogNumber(n) => {
                    out.push(LINEAGE_LOG);
                    put_varint(&mut out, *n);
                }
                EditRecord::LineageCheckpoint { number, seq } => {
                    out.push(LINEAGE_CHECKPOINT);
                    put_varint(&mut out, *number);
                    put_varint(&mut out, *seq);
                }
                EditRecord::History { retention_ms, floor } => {
                    out.push(HISTORY);
                    put_varint(&mut out, *retention_ms);
                    put_varint(&mut out, *floor);
                }
                EditRecord::Clock(samples) => {
                    out.push(CLOCK);
                    put_varint(&mut out, samples.len() as u64);
                    let mut prev = (0, 0);
                    for &(ms, seq) in samples {
                        put_varint(&mut out, ms.wrapping_sub(prev.0));
                        put_varint(&mut out, seq.wrapping_sub(prev.1));
                        prev = (ms, seq);
                    }
                }
                EditRecord::Batches { known_from, ranges } => {
                    out.push(BATCHES);
                    put_varint(&mut out, *known_from);
                    put_varint(&mut out, ranges.len() as u64);
                    let mut prev = 0;
                    for &(first, last) in ranges {
                        put_varint(&mut out, first.wrapping_sub(prev));
                        put_varint(&mut out, last.wrapping_sub(first));
                        prev = last;
                    }
                }
                EditRecord::SetLayout { table, layout, before } => {
                    out.push(SET_LAYOUT);
                    put_varint(&mut out, u64::from(*table));
                    match layout {
                        Some(l) => {
                            out.push(1);
                            put_bytes(&mut out, l.as_bytes());
                        }
                        None => out.push(0),
                    }
                    put_varint(&mut out, *before);
                }
                EditRecord::RenameTable { table, name } => {
                    out.push(RENAME_TABLE);
                    put_varint(&mut out, u64::from(*table));
                    put_bytes(&mut out, name.as_bytes());
                }
                EditRecord::Sequence { table, name, high } => {
                    out.push(SEQUENCE);
                    put_varint(&mut out, u64::from(*table));
                    put_bytes(&mut out, name.as_bytes());
                    put_varint(&mut out, *high as u64);
                }
                EditRecord::DeferredMarks { table, number } => {
                    out.push(DEFERRED_MARKS);
                    put_varint(&mut out, u64::from(*table));
                    put_varint(&mut out, *number);
                }
                EditRecord::Marks { table, number, chunk } => {
                    out.push(MARKS);
                    put_varint(&mut out, u64::from(*table));
                    put_varint(&mut out, *number);
                    let mut b = Vec::new();
                    chunk.encode(&mut b);
                    put_bytes(&mut out, &b);
                }
            }
        }
        out
    }

    /// Decodes an edit; levels must be below `num_levels`.
    pub(crate) fn decode(b: &[u8], num_levels: usize) -> DecodeResult<Self> {
        let mut r = Reader::new(b);
        let mut records = Vec::new();
        let level = |r: &mut Reader<'_>| -> DecodeResult<usize> {
            let l = r.varint()?;
            if l >= num_levels as u64 {
                return Err(DecodeError::new(format!("level {l} beyond the configured {num_levels} levels")));
            }
            Ok(l as usize)
        };
        while !r.is_empty() {
            let rec = match r.u8()? {
                CREATE => {
                    let id = u32_of(r.varint()?)?;
                    let name = r.string()?;
                    let schema = Schema::decode(&mut r)?;
                    let options = TableOptions::decode(r.bytes()?)?;
                    let info = TableInfo::new(id, name, Arc::new(schema), options)
                        .map_err(|e| DecodeError::new(format!("bad table definition: {e}")))?;
                    EditRecord::CreateTable(info)
                }
                DROP => EditRecord::DropTable(u32_of(r.varint()?)?),
                tag @ (ADD | ADD_ON_TIER) => {
                    let table = u32_of(r.varint()?)?;
                    let level = level(&mut r)?;
                    let (number, size, entries, min_seq, max_seq) =
                        (r.varint()?, r.varint()?, r.varint()?, r.varint()?, r.varint()?);
                    let cg = u32_of(r.varint()?)?;
                    let smallest = r.bytes()?.to_vec();
                    let largest = r.bytes()?.to_vec();
                    let tier = if tag == ADD_ON_TIER { r.u8()? } else { 0 };
                    if usize::from(tier) >= MAX_TIERS {
                        return Err(DecodeError::new(format!("file on tier {tier}, beyond the {MAX_TIERS} allowed")));
                    }
                    EditRecord::AddFile {
                        table,
                        level,
                        file: FileMeta { number, size, entries, min_seq, max_seq, smallest, largest, cg, tier },
                    }
                }
                TIERS => {
                    let n = r.varint()?;
                    if n == 0 || n > MAX_TIERS as u64 {
                        return Err(DecodeError::new(format!("{n} tiers recorded")));
                    }
                    let mut tiers = Vec::new();
                    for _ in 0..n {
                        let (name, dir) = (r.string()?, r.string()?);
                        tiers.push(TierRecord { name, dir, budget: r.varint()?, token: r.varint()? });
                    }
                    EditRecord::Tiers(tiers)
                }
                DELETE => {
                    let table = u32_of(r.varint()?)?;
                    let level = level(&mut r)?;
                    EditRecord::DeleteFile { table, level, number: r.varint()? }
                }
                LOG => EditRecord::LogNumber(r.varint()?),
                NEXT_FILE => EditRecord::NextFileNumber(r.varint()?),
                LAST_SEQ => EditRecord::LastSequence(r.varint()?),
                NEXT_TABLE => EditRecord::NextTableId(u32_of(r.varint()?)?),
                LINEAGE_LOG => EditRecord::LineageLogNumber(r.varint()?),
                LINEAGE_CHECKPOINT => EditRecord::LineageCheckpoint { number: r.varint()?, seq: r.varint()? },
                HISTORY => EditRecord::History { retention_ms: r.varint()?, floor: r.varint()? },
                CLOCK => {
                    let n = r.varint()?;
                    let mut samples = Vec::new();
                    let mut prev = (0u64, 0u64);
                    for _ in 0..n {
                        let (dt, ds) = (r.varint()?, r.varint()?);
                        let next = (prev.0.checked_add(dt), prev.1.checked_add(ds));
                        let (Some(ms), Some(seq)) = next else {
                            return Err(DecodeError::new("clock sample out of range"));
                        };
                        prev = (ms, seq);
                        samples.push(prev);
                    }
                    EditRecord::Clock(samples)
                }
                BATCHES => {
                    let known_from = r.varint()?;
                    let n = r.varint()?;
                    let mut ranges = Vec::new();
                    let mut prev = 0u64;
                    for _ in 0..n {
                        let (gap, len) = (r.varint()?, r.varint()?);
                        let first = prev.checked_add(gap);
                        let (Some(first), Some(last)) = (first, first.and_then(|f| f.checked_add(len))) else {
                            return Err(DecodeError::new("batch range out of range"));
                        };
                        ranges.push((first, last));
                        prev = last;
                    }
                    EditRecord::Batches { known_from, ranges }
                }
                MARKS => {
                    let table = u32_of(r.varint()?)?;
                    let number = r.varint()?;
                    let mut body = Reader::new(r.bytes()?);
                    let chunk = MarkChunk::decode(&mut body)?;
                    if !body.is_empty() {
                        return Err(DecodeError::new("trailing bytes in marks"));
                    }
                    EditRecord::Marks { table, number, chunk: Arc::new(chunk) }
                }
                DEFERRED_MARKS => EditRecord::DeferredMarks { table: u32_of(r.varint()?)?, number: r.varint()? },
                SET_LAYOUT => {
                    let table = u32_of(r.varint()?)?;
                    let layout = match r.u8()? {
                        0 => None,
                        1 => Some(r.string()?),
                        _ => return Err(DecodeError::new("bad layout flag")),
                    };
                    EditRecord::SetLayout { table, layout, before: r.varint()? }
                }
                RENAME_TABLE => {
                    let table = u32_of(r.varint()?)?;
                    EditRecord::RenameTable { table, name: r.string()? }
                }
                SEQUENCE => {
                    let table = u32_of(r.varint()?)?;
                    let name = r.string()?;
                    EditRecord::Sequence { table, name, high: r.varint()? as i64 }
                }
                t => return Err(DecodeError::new(format!("unknown edit record type {t}"))),
            };
            records.push(rec);
        }
        Ok(VersionEdit { records })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(number: u64, tier: u8) -> FileMeta {
        let (smallest, largest) = (b"a".to_vec(), b"q".to_vec());
        FileMeta { number, size: 10, entries: 2, min_seq: 1, max_seq: 2, smallest, largest, cg: 5, tier }
    }

    /// Tier records and files on tiers round-trip; files of the first tier keep the record
    /// older builds read (tag 3), so a database without tiers writes what it wrote before.
    #[test]
    fn tiers_and_files_on_tiers_round_trip() {
        let tiers = vec![
            TierRecord { name: "fast".into(), dir: "/mnt/ssd/db".into(), budget: 8 << 30, token: 1 },
            TierRecord { name: "slow".into(), dir: "/mnt/hdd/db".into(), budget: 0, token: u64::MAX },
        ];
        let mut e = VersionEdit::default();
        e.push(EditRecord::Tiers(tiers));
        e.push(EditRecord::AddFile { table: 1, level: 3, file: file(7, 1) });
        e.push(EditRecord::AddFile { table: 1, level: 2, file: file(8, 0) });
        assert_eq!(VersionEdit::decode(&e.encode(), 7).unwrap(), e);
        let mut first = VersionEdit::default();
        first.push(EditRecord::AddFile { table: 1, level: 2, file: file(8, 0) });
        assert_eq!(first.encode()[0], ADD);
        let mut beyond = VersionEdit::default();
        beyond.push(EditRecord::AddFile { table: 1, level: 2, file: file(8, MAX_TIERS as u8) });
        assert!(VersionEdit::decode(&beyond.encode(), 7).is_err(), "a file beyond the tiers allowed decoded");
    }

    /// Batch ranges round-trip (delta-encoded), and a range past `u64::MAX` is refused.
    #[test]
    fn batch_ranges_round_trip() {
        let mut e = VersionEdit::default();
        e.push(EditRecord::Batches { known_from: 3, ranges: vec![(5, 9), (10, 11), (1 << 40, (1 << 40) + 7)] });
        e.push(EditRecord::Batches { known_from: 0, ranges: Vec::new() });
        assert_eq!(VersionEdit::decode(&e.encode(), 7).unwrap(), e);
        let mut bad = vec![BATCHES];
        for v in [0, 1, u64::MAX, 5] {
            put_varint(&mut bad, v);
        }
        assert!(VersionEdit::decode(&bad, 7).is_err(), "a range past the largest sequence number decoded");
    }

    /// A deferred-marking record round-trips, and applied after its file it names the file as
    /// deferred until the file leaves Level-0.
    #[test]
    fn deferred_marks_round_trip_and_go_with_their_file() {
        use crate::catalog::{TableInfo, TableOptions};
        use crate::types::{Column, ColumnType};
        let mut e = VersionEdit::default();
        let schema = Schema::new(vec![Column::new("k", ColumnType::Int), Column::new("v", ColumnType::Int)], &["k"]);
        let info = TableInfo::new(1, "t".into(), Arc::new(schema.unwrap()), TableOptions::default()).unwrap();
        e.push(EditRecord::CreateTable(info));
        e.push(EditRecord::AddFile { table: 1, level: 0, file: file(7, 0) });
        e.push(EditRecord::DeferredMarks { table: 1, number: 7 });
        assert_eq!(VersionEdit::decode(&e.encode(), 7).unwrap(), e);
        assert_eq!(e.encode()[e.encode().len() - 3], DEFERRED_MARKS);
        let v = super::super::Version::new(7).apply(&e);
        assert!(v.tables[&1].deferred.contains(&7));
        let mut moved = VersionEdit::default();
        moved.push(EditRecord::DeleteFile { table: 1, level: 0, number: 7 });
        moved.push(EditRecord::AddFile { table: 1, level: 1, file: file(7, 0) });
        assert!(v.apply(&moved).tables[&1].deferred.is_empty(), "a file out of Level-0 stayed deferred");
    }

    /// A layout change round-trips (with a layout and without), replaces the table's layout
    /// when applied, and raises the file number below which files may hold an earlier one.
    #[test]
    fn set_layout_round_trips_and_replaces_the_layout() {
        use crate::catalog::{TableInfo, TableOptions};
        use crate::types::{Column, ColumnType};
        let cols = ["k", "a", "b"].iter().map(|n| Column::new(*n, ColumnType::Int)).collect();
        let info = TableInfo::new(1, "t".into(), Arc::new(Schema::new(cols, &["k"]).unwrap()), TableOptions::default());
        let mut e = VersionEdit::default();
        e.push(EditRecord::CreateTable(info.unwrap()));
        e.push(EditRecord::SetLayout { table: 1, layout: Some("L1-: column".into()), before: 40 });
        e.push(EditRecord::SetLayout { table: 1, layout: None, before: 30 });
        assert_eq!(VersionEdit::decode(&e.encode(), 7).unwrap(), e);
        let mut s = VersionEdit::default();
        s.push(EditRecord::Sequence { table: 1, name: "rowid".into(), high: 1 << 40 });
        s.push(EditRecord::Sequence { table: 1, name: "rowid".into(), high: 64 });
        s.push(EditRecord::Sequence { table: 1, name: "n".into(), high: -5 });
        s.push(EditRecord::RenameTable { table: 1, name: "renamed".into() });
        assert_eq!(VersionEdit::decode(&s.encode(), 7).unwrap(), s);
        let with_seq = super::super::Version::new(7).apply(&VersionEdit { records: e.records[..1].to_vec() }).apply(&s);
        let seqs = &with_seq.tables[&1].sequences;
        assert_eq!((seqs["rowid"], seqs["n"]), (1 << 40, -5), "a lower high lowered a sequence");
        assert_eq!(with_seq.tables[&1].info.name, "renamed");
        let v = super::super::Version::new(7).apply(&VersionEdit { records: e.records[..2].to_vec() });
        let t = &v.tables[&1];
        assert_eq!(t.info.layout().groups(2), [vec![0], vec![1]]);
        assert_eq!((t.info.options.layout.as_deref(), t.relayout_below), (Some("L1-: column"), 40));
        let v = v.apply(&VersionEdit { records: e.records[2..].to_vec() });
        assert_eq!(v.tables[&1].info.layout().groups(2), [vec![0, 1]]);
        assert_eq!(v.tables[&1].relayout_below, 40, "an older boundary lowered the newer one");
        let mut bad = e.encode();
        let flag = bad.len() - 2;
        bad[flag] = 7;
        assert!(VersionEdit::decode(&bad, 7).is_err(), "a bad layout flag decoded");
    }
}
