//! Fuzz targets: one per decoder of on-disk input, each a function from arbitrary bytes that
//! must return (an error inside is fine) and never panic, hang or make an allocation out of
//! proportion to its input. `fuzz/` runs them under libFuzzer (`cargo fuzz`, nightly); the test
//! suite replays their corpus (`fuzz/corpus/<target>/`) and a few thousand mutated inputs on
//! stable ([`replay`]). The crates over strata add their own targets (the CLI's `--where`
//! parser and `exec` requests, the PostgreSQL server's messages) as [`Target`]s of this kind.
//!
//! A target sees its input as the decoder does after the checksum that guards it: while it
//! runs, checksums on its thread are not checked ([`Unchecked`]), so mutated bytes reach the
//! decoders instead of stopping at the first checksum. Nothing else is changed for fuzzing.
//!
//! This module is a test harness inside the library (the crates over strata and the fuzz
//! crate use it): it reports a failed input, or a seed database that did not build, by
//! panicking, as tests do.
#![allow(clippy::panic, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::catalog::{TableInfo, TableOptions};
use crate::codec::{Reader, UNCHECKED};
use crate::lineage::LineageTable;
use crate::mvcc::chain::Resolver;
use crate::mvcc::Kind;
use crate::sst::block::{Block, BlockBuilder};
use crate::sst::bloom;
use crate::sst::cache::BlockCache;
use crate::sst::reader::{RowEncoder, SstReader};
use crate::sst::zone::{ZoneBuilder, ZoneMap, Zones};
use crate::types::key::{decode_key, encode_key};
use crate::types::row::{decode_row, encode_row, RowIter};
use crate::types::{Column, ColumnType, Schema, Value};
use crate::version::marks::{Mark, MarkChunk, Marks, WHOLE};
use crate::version::set::VersionSet;
use crate::vfs::{FaultFs, Fs};
use crate::write::batch::WriteBatch;
use crate::write::wal::{read_log, WAL_MAGIC};
use crate::{Db, Engine, Options};

/// A fuzz target: its name (the name of its corpus directory and of its `cargo fuzz` target),
/// the function that takes an input, and valid inputs to start its corpus from.
pub struct Target {
    /// Name, `[a-z_]+`.
    pub name: &'static str,
    /// Runs one input.
    pub run: fn(&[u8]),
    /// Valid encodings to start the corpus from.
    pub seeds: fn() -> Vec<Vec<u8>>,
}

/// strata's own targets, one per decoder.
pub fn targets() -> Vec<Target> {
    vec![
        Target { name: "block", run: block, seeds: block_seeds },
        Target { name: "sst_file", run: sst_file, seeds: || harvest().row_files.clone() },
        Target { name: "row_group_file", run: sst_file, seeds: || harvest().row_group_files.clone() },
        Target { name: "bloom", run: bloom_filter, seeds: bloom_seeds },
        Target { name: "zone_map", run: zone_map, seeds: zone_map_seeds },
        Target { name: "wal", run: wal, seeds: || harvest().wals.clone() },
        Target { name: "manifest", run: manifest, seeds: || harvest().manifests.clone() },
        Target { name: "checkpoint", run: checkpoint, seeds: || harvest().checkpoints.clone() },
        Target { name: "marks", run: marks, seeds: marks_seeds },
        Target { name: "row", run: row, seeds: row_seeds },
    ]
}

/// Runs `f` with checksums on this thread accepted whatever they are.
pub struct Unchecked(bool);

impl Unchecked {
    /// Turns checksum checks off on this thread until dropped.
    pub fn new() -> Unchecked {
        Unchecked(UNCHECKED.with(|u| u.replace(true)))
    }
}

impl Default for Unchecked {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Unchecked {
    fn drop(&mut self) {
        UNCHECKED.with(|u| u.set(self.0));
    }
}

// ---- the decoders' targets ----

/// The column types inputs pick from: the first byte of some inputs chooses one of these.
const TYPE_SETS: [&[ColumnType]; 4] = [
    &[ColumnType::Int, ColumnType::Text, ColumnType::Double, ColumnType::Bytea, ColumnType::Boolean],
    &[ColumnType::BigInt],
    &[ColumnType::Text, ColumnType::SmallInt, ColumnType::Real, ColumnType::Date, ColumnType::TimestampTz],
    &[ColumnType::TinyInt, ColumnType::Timestamp, ColumnType::Bytea, ColumnType::BigInt],
];

fn types_of(sel: u8) -> &'static [ColumnType] {
    TYPE_SETS[usize::from(sel) % TYPE_SETS.len()]
}

/// Reads every part of a decoded block, as scans and point reads do.
fn read_block(b: &Block, ncols: usize) {
    let probes: Vec<Vec<u8>> = if b.has_keys() && b.len() > 0 {
        vec![b.key(0).to_vec(), b.key(b.len() / 2).to_vec(), b.key(b.len() - 1).to_vec(), Vec::new(), vec![0xFF; 9]]
    } else {
        Vec::new()
    };
    for indexed in [false, true] {
        if indexed {
            b.build_index();
        }
        for k in &probes {
            let (first, seqs) = b.versions_of(k);
            for i in first..first + seqs.len() {
                let _ = b.kind(i);
                for c in 0..ncols {
                    let _ = b.cell(i, c);
                }
            }
            let _ = b.seek(k);
        }
    }
    for i in 0..b.len() {
        if b.has_keys() {
            let _ = (b.key(i), b.seq(i), b.kind(i));
        }
        for c in 0..ncols {
            let _ = (b.carries(i, c), b.cell(i, c), b.raw_cell(i, c));
        }
    }
    for c in 0..ncols {
        let _ = b.column(c).is_some();
    }
    let _ = (b.max_seq(), b.is_clean(), b.charge());
}

/// A data block or key page: byte 0 picks the column types (bits 1..) and the format (bit 0:
/// 3, the oldest readable, else the newest); the rest is the block.
fn block(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else { return };
    let types = types_of(sel >> 1);
    let format = if sel & 1 == 1 { crate::sst::OLDEST_READABLE_FORMAT } else { crate::sst::FORMAT_VERSION };
    if let Ok(b) = Block::decode_format(body.to_vec(), types, format) {
        read_block(&b, types.len());
    }
}

fn block_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (sel, types) in TYPE_SETS.iter().enumerate() {
        for varied in [false, true] {
            let mut b = BlockBuilder::new(types);
            let mut keys: Vec<String> =
                (0..30u32).map(|i| if varied { format!("k{}", i * i) } else { format!("k{i:03}") }).collect();
            keys.sort();
            for (i, key) in keys.iter().enumerate() {
                let cells: Vec<Option<Value>> = types.iter().map(|&t| sample_value(t, i)).collect();
                let mut row = Vec::new();
                encode_row(types, &cells, &mut row);
                let kind = if i % 7 == 3 { Kind::Update } else { Kind::Put };
                match RowIter::new(types, &row) {
                    Ok(cells) => b.add(key.as_bytes(), 100 - i as u64, kind, cells.map_while(Result::ok)),
                    Err(_) => continue,
                }
            }
            let mut input = vec![(sel as u8) << 1];
            input.extend(b.finish().0);
            out.push(input);
        }
    }
    out
}

/// A value of type `t` for row `i` (some absent, some NULL).
fn sample_value(t: ColumnType, i: usize) -> Option<Value> {
    if i % 5 == 4 {
        return None;
    }
    if i % 6 == 5 {
        return Some(Value::Null);
    }
    let n = i as i64 * 37 - 200;
    Some(match t {
        ColumnType::BigInt => Value::BigInt(n << 20),
        ColumnType::Int => Value::Int(n as i32),
        ColumnType::SmallInt => Value::SmallInt(n as i16),
        ColumnType::TinyInt => Value::TinyInt(n as i8),
        ColumnType::Double => Value::Double(n as f64 / 3.0),
        ColumnType::Real => Value::Real(n as f32 / 7.0),
        ColumnType::Boolean => Value::Boolean(i.is_multiple_of(2)),
        ColumnType::Text => Value::Text(format!("text {i}").repeat(i % 4)),
        ColumnType::Bytea => Value::Bytea(vec![i as u8; i % 9]),
        ColumnType::Date => Value::Date(n as i32),
        ColumnType::Timestamp => Value::Timestamp(n * 1_000_003),
        ColumnType::TimestampTz => Value::TimestampTz(n * 999_983),
    })
}

/// A whole SST file of any readable format (footer, meta, index with its zone maps, bloom
/// filter, blocks; for row-group files the page index and every group's pages): opened, every
/// block read and every version decoded, point reads of keys in and around it, verified.
fn sst_file(data: &[u8]) {
    let fs = FaultFs::new();
    let path = Path::new("/fuzz/000001.sst");
    if write_file(&fs, path, data).is_err() {
        return;
    }
    let cache = Arc::new(BlockCache::new(1 << 20));
    let Ok(r) = SstReader::open(&fs, path, (1, 0, Arc::default()), cache.clone()) else { return };
    // The table's value columns as far as this file tells: its group's, at their places.
    let nvals = r.columns().iter().max().map_or(0, |&m| m + 1);
    let mut value_types = vec![ColumnType::Boolean; nvals];
    for (&vi, &t) in r.columns().iter().zip(r.group_types()) {
        value_types[vi] = t;
    }
    let value_types: Arc<[ColumnType]> = value_types.into();
    let mut enc = RowEncoder::new(&r, value_types.clone(), None);
    let mut keys = vec![r.smallest().to_vec()];
    for i in 0..r.num_blocks() {
        let _ = r.first_row(i);
        if let Ok(b) = r.block(i, true) {
            for j in 0..b.len() {
                let e = enc.entry(&b, j);
                let _ = decode_row(&value_types, &e.row, None);
            }
            if b.has_keys() && b.len() > 0 {
                keys.push(b.key(0).to_vec());
                keys.push(b.key(b.len() - 1).to_vec());
            }
        }
        let _ = r.block_columns(i, &[0]);
    }
    let pin = cache.pin();
    for key in keys.iter().chain([&Vec::new(), &vec![0xFF; 12]]) {
        for snapshot in [u64::MAX, 1] {
            let mut res = Resolver::new(nvals, None);
            let _ = r.get(key, bloom::key_hash(key), snapshot, nvals, None, &mut res, &pin);
            let _ = res.finish();
        }
        let _ = r.find_block(key);
    }
    for vi in 0..nvals {
        let _ = r.column_zone(vi);
    }
    if let Some(rg) = r.row_groups() {
        for g in 0..rg.groups().len() {
            let _ = rg.group_rows(g, 0..r.entries());
        }
        for p in 0..r.num_blocks() {
            let _ = (rg.key_page(p), rg.key_page_rows(p), rg.assemble_columns(p, &[0]));
        }
    }
    let _ = r.verify();
}

fn write_file(fs: &FaultFs, path: &Path, data: &[u8]) -> crate::Result<()> {
    if let Some(dir) = path.parent() {
        fs.create_dir_all(dir)?;
    }
    let mut f = fs.create(path)?;
    f.append(data)?;
    f.sync()
}

/// A bloom filter: probed for hashes of keys, and for hashes drawn from the input itself.
fn bloom_filter(data: &[u8]) {
    for i in 0u32..64 {
        let _ = bloom::may_contain(data, bloom::key_hash(&i.to_be_bytes()));
    }
    for w in data.chunks(8) {
        let mut h = [0u8; 8];
        h[..w.len()].copy_from_slice(w);
        let _ = bloom::may_contain(data, u64::from_le_bytes(h));
    }
}

fn bloom_seeds() -> Vec<Vec<u8>> {
    [(10usize, 1usize), (100, 10), (40, 3), (1, 30)]
        .iter()
        .map(|&(n, bits)| {
            let hashes: Vec<u64> = (0..n as u32).map(|i| bloom::key_hash(&i.to_be_bytes())).collect();
            bloom::build(&hashes, bits)
        })
        .collect()
}

/// One block's zone maps as an index holds them: byte 0 picks the column types; each map is
/// decoded, merged with the others and asked for its bounds.
fn zone_map(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else { return };
    let types: Arc<[ColumnType]> = types_of(sel).into();
    let Ok(zones) = Zones::decode(types.clone(), &mut Reader::new(body)) else { return };
    let maps: Vec<ZoneMap> = (0..zones.len()).filter_map(|j| zones.get(j)).collect();
    for (a, b) in maps.iter().zip(maps.iter().skip(1)) {
        let _ = a.merge(b);
    }
    for (j, &t) in types.iter().enumerate() {
        let _ = ZoneMap::decode(t, &mut Reader::new(&body[j.min(body.len())..]));
    }
}

fn zone_map_seeds() -> Vec<Vec<u8>> {
    (0..TYPE_SETS.len())
        .map(|sel| {
            let types = types_of(sel as u8);
            let maps: Vec<ZoneMap> = types
                .iter()
                .map(|&t| {
                    let mut z = ZoneBuilder::new(t);
                    for i in 0..12 {
                        let mut row = Vec::new();
                        encode_row(&[t], &[sample_value(t, i)], &mut row);
                        if let Some(Ok(cell)) = RowIter::new(&[t], &row).ok().and_then(|mut c| c.next()) {
                            z.add_cell(cell);
                        }
                    }
                    z.finish()
                })
                .collect();
            let mut out = vec![sel as u8];
            Zones::new(&maps, types.into()).encode(&mut out);
            out
        })
        .collect()
}

/// The value types of the tables of [`harvest`]'s database, which WAL records are decoded as.
fn harvest_schema() -> Schema {
    let cols = vec![
        Column::new("id", ColumnType::BigInt),
        Column::new("i", ColumnType::Int),
        Column::new("d", ColumnType::Double),
        Column::new("s", ColumnType::Text),
        Column::new("b", ColumnType::Bytea),
        Column::new("f", ColumnType::Boolean),
    ];
    Schema::new(cols, &["id"]).expect("a fixed schema is valid")
}

/// A WAL file: every record read, decoded as a write batch, and each operation's key and row
/// decoded as the tables of [`harvest`] hold them.
fn wal(data: &[u8]) {
    let fs = FaultFs::new();
    let path = Path::new("/fuzz/000001.log");
    if write_file(&fs, path, data).is_err() {
        return;
    }
    let schema = harvest_schema();
    let key_types = schema.key_types();
    let value_types = schema.value_types();
    let Ok((records, _)) = read_log(&fs, path, WAL_MAGIC) else { return };
    for rec in records {
        let Ok((_, _, ops)) = WriteBatch::decode(&rec) else { continue };
        for op in ops {
            let _ = decode_key(&key_types, &op.key);
            let _ = decode_row(&value_types, &op.row, None);
        }
    }
}

/// A manifest: recovered as a database opening does (every edit decoded and applied, the
/// resulting version checked and written as a new manifest).
fn manifest(data: &[u8]) {
    let fs = FaultFs::new();
    let dir = Path::new("/fuzz");
    if write_file(&fs, &dir.join("MANIFEST-000001"), data).is_err()
        || write_file(&fs, &dir.join("CURRENT"), b"MANIFEST-000001\n").is_err()
    {
        return;
    }
    let Ok(set) = VersionSet::recover(&fs, dir, 7, 2) else { return };
    for t in set.current().tables.values() {
        for (number, marks) in &t.marks {
            let _ = (number, marks.merged().len());
        }
    }
}

/// A lineage checkpoint, loaded into tables 1 and 2 (the ids [`harvest`]'s lineage tables get),
/// whose rows are then read.
fn checkpoint(data: &[u8]) {
    let fs = FaultFs::new();
    let path = Path::new("/fuzz/000001.lck");
    if write_file(&fs, path, data).is_err() {
        return;
    }
    let schema = Arc::new(harvest_schema());
    let mut tables = HashMap::new();
    for id in 1..=3 {
        let opts = TableOptions::engine(Engine::Lineage);
        let Ok(info) = TableInfo::new(id, format!("t{id}"), schema.clone(), opts) else { return };
        tables.insert(id, Arc::new(LineageTable::new(Arc::new(info), 64)));
    }
    if crate::lineage::checkpoint::load(&fs, path, &tables).is_err() {
        return;
    }
    for t in tables.values() {
        let view = t.view();
        for (key, _) in t.index_range(std::ops::Bound::Unbounded, None, 1000) {
            let _ = t.get(&view, &key, u64::MAX, None);
        }
    }
}

/// A chunk of supersede marks, as a manifest's mark records hold them: decoded, added to a
/// file's marks and asked about every row and column it names.
fn marks(data: &[u8]) {
    let Ok(chunk) = MarkChunk::decode(&mut Reader::new(data)) else { return };
    let chunk = Arc::new(chunk);
    let marks = Marks::default().with(chunk.clone()).with(chunk.clone());
    let merged = marks.merged();
    for m in chunk.marks() {
        let _ = (marks.superseded_at(m.row, usize::from(m.col)), marks.whole_at(m.row));
        let _ = marks.any_at_or_below(u64::from(m.row)..u64::from(m.row) + 2, m.seq);
        let _ = marks.in_rows(m.row..m.row.saturating_add(3)).count();
    }
    let _ = (merged.len(), marks.in_positions(0..u64::MAX).count());
}

fn marks_seeds() -> Vec<Vec<u8>> {
    let m = |row, col, seq| Mark { row, col, seq };
    let mut chunks = vec![
        MarkChunk::new(vec![m(0, WHOLE, 5), m(3, 1, 9), m(3, 2, 9)]),
        MarkChunk::new((0..50).map(|i| m(i * 3, (i % 4) as u16, u64::from(i) + 100)).collect()),
    ];
    chunks.push(MarkChunk::new(Vec::new()));
    chunks
        .iter()
        .map(|c| {
            let mut out = Vec::new();
            c.encode(&mut out);
            out
        })
        .collect()
}

/// A row, a key and a schema: byte 0 picks the column types; the rest is decoded as each.
fn row(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else { return };
    let types = types_of(sel);
    let _ = decode_row(types, body, None);
    if let Ok(cells) = RowIter::new(types, body) {
        let _ = cells.count();
    }
    let _ = decode_key(types, body);
    let _ = Schema::decode(&mut Reader::new(body));
}

fn row_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for sel in 0..TYPE_SETS.len() {
        let types = types_of(sel as u8);
        let cells: Vec<Option<Value>> = types.iter().map(|&t| sample_value(t, sel + 1)).collect();
        let mut input = vec![sel as u8];
        encode_row(types, &cells, &mut input);
        out.push(input);
        let values: Vec<Value> = types.iter().map(|&t| sample_value(t, sel + 2).unwrap_or(Value::Null)).collect();
        let mut input = vec![sel as u8];
        input.extend(encode_key(types, &values));
        out.push(input);
    }
    let mut input = vec![0];
    harvest_schema().encode(&mut input);
    out.push(input);
    out
}

// ---- seeds from a database's files ----

/// The files of a small database that went through flushes, compactions, a layout change, a
/// lineage checkpoint and a reopen, sorted by kind.
#[derive(Default)]
struct Harvest {
    row_files: Vec<Vec<u8>>,
    row_group_files: Vec<Vec<u8>>,
    wals: Vec<Vec<u8>>,
    manifests: Vec<Vec<u8>>,
    checkpoints: Vec<Vec<u8>>,
}

/// The seed database's files, made once per process.
fn harvest() -> &'static Harvest {
    static HARVEST: std::sync::OnceLock<Harvest> = std::sync::OnceLock::new();
    HARVEST.get_or_init(|| {
        let fs = Arc::new(FaultFs::new());
        let mut h = Harvest::default();
        if let Err(e) = fill(&fs, &mut h) {
            panic!("the seed database failed: {e}");
        }
        h
    })
}

/// Runs the seed database, gathering its files at several points.
fn fill(fs: &Arc<FaultFs>, h: &mut Harvest) -> crate::Result<()> {
    let dir = Path::new("/seed");
    let opts = Options {
        memtable_size: 8 << 10,
        l0_compaction_trigger: 2,
        level_size_ratio: 3,
        l1_max_bytes: 16 << 10,
        target_file_size: 6 << 10,
        block_size: 512,
        lineage_range: 64,
        lineage_merge_threshold: 8,
        fs: fs.clone(),
        ..Options::default()
    };
    let db = Db::open(dir, opts.clone())?;
    let tables = [
        ("lineage", TableOptions::engine(Engine::Lineage)),
        ("rows", TableOptions::default()),
        ("groups", TableOptions::with_layout("L1: (i, d) (s, b, f); L2-: column")),
        ("runs", TableOptions::with_layout("L1-: column").with_row_groups(false)),
    ];
    for (name, topts) in &tables {
        db.create_table(name, harvest_schema(), topts.clone())?;
    }
    for round in 0..4i64 {
        for (name, _) in &tables {
            let t = db.table(name)?;
            for i in 0..120i64 {
                let id = (i * 7 + round * 3) % 200;
                let row = [
                    Value::BigInt(id),
                    if i % 9 == 0 { Value::Null } else { Value::Int((i * round) as i32) },
                    Value::Double(i as f64 / 4.0),
                    Value::Text(format!("row {i} of round {round}")),
                    Value::Bytea(vec![i as u8; (i % 5) as usize]),
                    Value::Boolean(i % 3 == 0),
                ];
                t.insert(&row)?;
                if i % 11 == 0 {
                    t.update(&[Value::BigInt(id)], &[("s", Value::Text("updated".into()))])?;
                }
                if i % 13 == 0 {
                    t.delete(&[Value::BigInt((id + 1) % 200)])?;
                }
            }
        }
        gather(fs, dir, h, round == 0)?;
        db.flush()?;
        db.wait_for_compactions()?;
        if round == 1 {
            db.checkpoint()?;
            db.set_layout("rows", Some("L2-: (i) (d, s, b, f)"))?;
        }
    }
    db.compact_range("groups", &crate::KeyRange::all())?;
    db.wait_for_compactions()?;
    gather(fs, dir, h, false)?;
    db.close()?;
    let db = Db::open(dir, opts)?;
    db.close()?;
    gather(fs, dir, h, true)?;
    Ok(())
}

/// Adds the database's current files to `h` (SSTs only with `ssts`, so each is taken once or
/// twice, not at every point); a file deleted between the listing and its read is skipped.
fn gather(fs: &FaultFs, dir: &Path, h: &mut Harvest, ssts: bool) -> crate::Result<()> {
    for name in fs.list(dir)? {
        // Background compactions run on while this reads: a file listed may be gone by now.
        let data = match fs.read_all(&dir.join(&name)) {
            Ok(data) => data,
            Err(crate::Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let list = if name.ends_with(".sst") {
            if !ssts {
                continue;
            }
            let rg = data.len() >= crate::sst::format::FOOTER_LEN && {
                let v = &data[data.len() - 16..data.len() - 12];
                crate::sst::rowgroup::is_row_group_format(u32::from_le_bytes([v[0], v[1], v[2], v[3]]))
            };
            if rg {
                &mut h.row_group_files
            } else {
                &mut h.row_files
            }
        } else if name.ends_with(".log") {
            &mut h.wals
        } else if name.starts_with("MANIFEST-") {
            &mut h.manifests
        } else if name.ends_with(".lck") {
            &mut h.checkpoints
        } else {
            continue;
        };
        if !list.contains(&data) {
            list.push(data);
        }
    }
    Ok(())
}

// ---- replaying on stable ----

/// The largest single allocation an input may make: a block's largest size (a compressed block
/// declares how large it is; LZ4 is held to what its bytes can expand to, zstd is not).
pub const ALLOCATION_LIMIT: usize = crate::sst::format::MAX_BLOCK + (1 << 20);

thread_local! {
    /// The largest allocation this thread asked for since [`TrackingAlloc::reset`].
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, noting the largest allocation each thread asks for, so a replay can
/// tell an input that makes a decoder allocate out of proportion. A test binary that replays
/// targets installs it (`#[global_allocator]`).
pub struct TrackingAlloc;

impl TrackingAlloc {
    fn note(size: usize) {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    }

    /// Starts a new count on this thread.
    pub fn reset() {
        LARGEST.with(|l| l.set(0));
    }

    /// The largest allocation this thread asked for since [`Self::reset`].
    pub fn largest() -> usize {
        LARGEST.with(Cell::get)
    }
}

// SAFETY: every call goes to `System` unchanged; only a thread-local number is noted.
unsafe impl GlobalAlloc for TrackingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::note(layout.size());
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::note(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `alloc`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::note(new_size);
        // SAFETY: as for `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// The repository's `fuzz/corpus` directory, from a crate directory of the workspace.
fn corpus_root(manifest_dir: &str) -> PathBuf {
    Path::new(manifest_dir).join("../../fuzz/corpus")
}

/// Replays target `name` of `targets` as the test suites do (see [`replay`]): its corpus in the
/// repository's `fuzz/corpus/<name>/` (`manifest_dir` is the calling crate's directory), and
/// `STRATA_FUZZ_INPUTS` (default 3000) mutated inputs from the first seed of `STRATA_SEEDS`, or
/// from a new seed, printed. With `STRATA_FUZZ_WRITE_SEEDS=1` the target's generated seeds are
/// first written into its corpus directory (a new target's first corpus, or fresh seeds after
/// a format changed).
pub fn replay_test(targets: &[Target], name: &str, manifest_dir: &str) {
    use std::hash::{BuildHasher, Hasher};
    let target = find(targets, name);
    if std::env::var("STRATA_FUZZ_WRITE_SEEDS").is_ok_and(|v| v == "1") {
        let root = corpus_root(manifest_dir);
        if let Err(e) = write_seeds(std::slice::from_ref(target), &root) {
            panic!("writing the seeds of {name} into {}: {e}", root.display());
        }
    }
    let given = std::env::var("STRATA_SEEDS").ok().and_then(|s| s.split(',').next()?.trim().parse().ok());
    let seed = given.unwrap_or_else(|| std::hash::RandomState::new().build_hasher().finish());
    println!("seed {seed} (replay: STRATA_SEEDS={seed})");
    let inputs = std::env::var("STRATA_FUZZ_INPUTS").ok().and_then(|n| n.parse().ok()).unwrap_or(3000);
    replay(target, &corpus_root(manifest_dir), 1, inputs, seed);
}

/// Target `name` of `targets`.
fn find<'t>(targets: &'t [Target], name: &str) -> &'t Target {
    targets.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no fuzz target {name}"))
}

/// Runs target `name` on every input saved in the repository's `fuzz/regressions/<name>/`
/// (inputs that once crashed it, named after what went wrong), or on the one named `only`;
/// panics naming an input that still panics. Returns how many ran.
pub fn regressions(targets: &[Target], name: &str, only: Option<&str>, manifest_dir: &str) -> usize {
    let target = find(targets, name);
    let inputs: Vec<Input> = corpus(&Path::new(manifest_dir).join("../../fuzz/regressions"), name)
        .into_iter()
        .filter(|i| only.is_none_or(|o| Path::new(&i.origin).file_name().is_some_and(|f| f == o)))
        .collect();
    for input in &inputs {
        let outcome = std::panic::catch_unwind(|| {
            let _unchecked = Unchecked::new();
            (target.run)(&input.bytes);
        });
        assert!(outcome.is_ok(), "fuzz target {name} panics on {} again", input.origin);
    }
    inputs.len()
}

/// One input of a replay: where it came from and its bytes.
struct Input {
    origin: String,
    bytes: Vec<u8>,
}

/// Reads target `name`'s corpus: the files of `root/<name>/`, sorted by name.
fn corpus(root: &Path, name: &str) -> Vec<Input> {
    let dir = root.join(name);
    let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| std::fs::read(&p).ok().map(|bytes| Input { origin: p.display().to_string(), bytes }))
        .collect()
}

/// How long one input may run before the replay calls it a hang.
const HANG: std::time::Duration = std::time::Duration::from_secs(20);

/// Replays `target` on its seeds, its corpus under `root` (at least `min_corpus` files, so a
/// corpus that went missing fails) and `random` inputs mutated from those with `seed`. Panics
/// naming the input if one panics, runs longer than a while or allocates more than
/// [`ALLOCATION_LIMIT`] at once (the latter only where [`TrackingAlloc`] is installed, which
/// the replay checks). A failing input is written to the system's temporary directory, from
/// where `cargo fuzz run <target> <file>` runs it too.
pub fn replay(target: &Target, root: &Path, min_corpus: usize, random: usize, seed: u64) {
    TrackingAlloc::reset();
    drop(std::hint::black_box(Vec::<u8>::with_capacity(12345)));
    assert!(TrackingAlloc::largest() >= 12345, "replay needs TrackingAlloc as the global allocator");
    let found = corpus(root, target.name);
    assert!(
        found.len() >= min_corpus,
        "{} holds {} inputs for target {}, fewer than {min_corpus}",
        root.display(),
        found.len(),
        target.name
    );
    let mut pool: Vec<Input> =
        (target.seeds)().into_iter().map(|bytes| Input { origin: "a generated seed".into(), bytes }).collect();
    pool.extend(found);
    let mut rng = Rng(seed);
    let mutated: Vec<Input> = (0..random)
        .map(|n| {
            let base = &pool[rng.below(pool.len())].bytes;
            let other = &pool[rng.below(pool.len())].bytes;
            Input { origin: format!("mutated input {n} of seed {seed}"), bytes: mutate(&mut rng, base, other) }
        })
        .collect();
    pool.extend(mutated);

    let run = target.run;
    let (tx, rx) = std::sync::mpsc::channel();
    let inputs: Arc<Vec<Input>> = Arc::new(pool);
    let worker_inputs = inputs.clone();
    std::thread::spawn(move || {
        for (i, input) in worker_inputs.iter().enumerate() {
            TrackingAlloc::reset();
            let outcome = std::panic::catch_unwind(|| {
                let _unchecked = Unchecked::new();
                run(&input.bytes);
            });
            let largest = TrackingAlloc::largest();
            if tx.send((i, outcome.is_err(), largest)).is_err() {
                return;
            }
        }
    });
    let fail = |i: usize, why: String| -> ! {
        let input = &inputs[i];
        let file = std::env::temp_dir().join(format!("strata-fuzz-{}-{i}", target.name));
        let saved = match std::fs::write(&file, &input.bytes) {
            Ok(()) => format!("saved to {}", file.display()),
            Err(e) => format!("not saved: {e}"),
        };
        panic!(
            "fuzz target {}: {} ({}, {} bytes, {saved}) {why}; replay with STRATA_SEEDS={seed}",
            target.name,
            input.origin,
            i,
            input.bytes.len()
        );
    };
    for i in 0..inputs.len() {
        match rx.recv_timeout(HANG) {
            Ok((j, panicked, largest)) => {
                if panicked {
                    fail(j, "panicked".into());
                }
                if largest > ALLOCATION_LIMIT {
                    fail(j, format!("made an allocation of {largest} bytes"));
                }
            }
            Err(_) => fail(i, format!("ran longer than {HANG:?}")),
        }
    }
}

/// SplitMix64: the replay's random numbers (a fixed sequence per seed).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `good` changed a little, as libFuzzer's mutators do: bits flipped, bytes inserted, set to
/// edge values or cut off, runs copied in from `other`, length fields set huge or zero.
fn mutate(rng: &mut Rng, good: &[u8], other: &[u8]) -> Vec<u8> {
    let mut b = good.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 => b.truncate(rng.below(b.len() + 1)),
            2 => {
                let i = rng.below(b.len() + 1);
                b.insert(i, rng.next() as u8);
            }
            3 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] = [0, 0xFF, 0x80, 0x7F, rng.next() as u8][rng.below(5)];
            }
            4 if !other.is_empty() && !b.is_empty() => {
                let from = rng.below(other.len());
                let len = 1 + rng.below((other.len() - from).min(64));
                let at = rng.below(b.len());
                let end = (at + len).min(b.len());
                b.splice(at..end, other[from..from + len].iter().copied());
            }
            _ if b.len() >= 4 => {
                // A length or count field: a run of 0xFF (a huge varint) or of zeros.
                let i = rng.below(b.len() - 3);
                b[i..i + 4].fill(if rng.next() & 1 == 0 { 0xFF } else { 0 });
            }
            _ => {}
        }
    }
    b
}

/// Writes each target's generated seeds into `root/<target>/` (file names are the inputs'
/// hashes), for a first corpus.
fn write_seeds(targets: &[Target], root: &Path) -> std::io::Result<()> {
    for t in targets {
        let dir = root.join(t.name);
        std::fs::create_dir_all(&dir)?;
        for s in (t.seeds)() {
            let name = format!("seed-{:016x}", xxhash_rust::xxh3::xxh3_64(&s));
            std::fs::write(dir.join(name), s)?;
        }
    }
    Ok(())
}
