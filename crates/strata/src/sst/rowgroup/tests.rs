//! Row-group files written and read back: shapes, point reads, pages, corruption.

use std::path::Path;
use std::sync::Arc;

use super::builder::*;
use super::meta::*;
use super::reader::*;
use super::shape::*;
use super::*;
use crate::error::Result;
use crate::mvcc::chain::Resolver;
use crate::mvcc::{Kind, Stored};
use crate::sst::bloom;
use crate::sst::builder::SstOptions;
use crate::sst::cache::BlockCache;
use crate::sst::format::Compression;
use crate::types::row::RawCell;
use crate::types::row::{encode_row, RowIter};
use crate::types::ColumnType;
use crate::types::Value;
use crate::version::FileMeta;
use crate::vfs::FaultFs;
use crate::vfs::Fs;
use rand::{Rng, SeedableRng};

const TYPES: [ColumnType; 4] = [ColumnType::BigInt, ColumnType::Text, ColumnType::Int, ColumnType::Double];

fn groups() -> Vec<Vec<usize>> {
    vec![vec![0, 1], vec![2], vec![3]]
}

/// One version: key, seq, kind, cells by value column (`None`: not carried).
type Version = (Vec<u8>, u64, Kind, Vec<Option<Value>>);

/// Random versions over `keys` keys: some keys with several versions, partial rows, deletes
/// and NULLs, in (key asc, seq desc) order; `rows` versions in all.
fn versions(rng: &mut rand::rngs::StdRng, rows: usize) -> Vec<Version> {
    let mut out = Vec::new();
    let mut k = 0u64;
    while out.len() < rows {
        k += rng.gen_range(1..4);
        let n = rng.gen_range(1..4).min(rows - out.len());
        for j in 0..n {
            let kind = [Kind::Put, Kind::Put, Kind::Update, Kind::Delete][rng.gen_range(0..4)];
            let cells = (0..4)
                .map(|c| match kind {
                    Kind::Delete => None,
                    Kind::Update if rng.gen_bool(0.5) => None,
                    _ if rng.gen_bool(0.1) => Some(Value::Null),
                    _ => Some(match c {
                        0 => Value::BigInt(rng.gen()),
                        1 => Value::Text("t".repeat(rng.gen_range(0..20))),
                        2 => Value::Int(rng.gen()),
                        _ => Value::Double(rng.gen()),
                    }),
                })
                .collect();
            out.push((format!("key{k:08}").into_bytes(), 1000 - j as u64, kind, cells));
        }
    }
    out
}

fn build(fs: &FaultFs, path: &Path, vs: &[Version], shape: Option<Shape>) -> FileMeta {
    build_format(fs, path, vs, shape, ROW_GROUP_FORMAT)
}

/// [`build`] writing format `format`.
fn build_format(fs: &FaultFs, path: &Path, vs: &[Version], shape: Option<Shape>, format: u32) -> FileMeta {
    let opts = SstOptions { block_size: 1024, compression: Compression::Lz4, bloom_bits_per_key: 10 };
    let file = fs.create(path).unwrap();
    let mut b = match shape {
        Some(s) => {
            let gs = groups().iter().map(|cols| Group::of(cols, &TYPES)).collect();
            RowGroupBuilder::with_shape(file, opts, 1, gs, s)
        }
        None => RowGroupBuilder::new(file, opts, 1, &groups(), &TYPES, 11),
    };
    b.format = format;
    for (key, seq, kind, cells) in vs {
        let mut row = Vec::new();
        encode_row(&TYPES, cells, &mut row);
        let raws: Vec<RawCell<'_>> = RowIter::new(&TYPES, &row).unwrap().map(Result::unwrap).collect();
        b.add(key, *seq, *kind, |vi| raws[vi]).unwrap();
    }
    b.finish(9).unwrap()
}

fn open(fs: &FaultFs, path: &Path) -> Result<Arc<RowGroupReader>> {
    RowGroupReader::open(fs, path, (9, 0), Arc::new(BlockCache::new(1 << 20)))
}

/// Every group holds every version at its ordinal, at 1 row, one granule less one, a
/// granule, one more, and many pages of every kind: versions and cells read back by position,
/// and each group's page row counts follow from the key pages'.
#[test]
fn every_group_holds_every_row_at_its_ordinal() {
    let seed = crate::test_seeds::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let fs = FaultFs::new();
    let shape = Shape { granule_shift: 6, key_span: 1, spans: vec![0, 2, 1] };
    for rows in [1usize, 63, 64, 65, 127, 128, 129, 1000, 3001] {
        let vs = versions(&mut rng, rows);
        let path = Path::new("/rg/000009.sst");
        for shape in [Some(shape.clone()), None] {
            let meta = build(&fs, path, &vs, shape);
            assert_eq!(meta.entries, rows as u64, "seed {seed}");
            let r = open(&fs, path).unwrap();
            let pages = r.verify().unwrap();
            let s = r.shape().clone();
            let want_pages = Shape::pages(rows as u64, s.key_shift())
                + (0..3).map(|g| Shape::pages(rows as u64, s.page_shift(g))).sum::<usize>();
            assert_eq!(pages, want_pages, "seed {seed} rows {rows}");
            for (ord, (key, seq, kind, cells)) in vs.iter().enumerate() {
                let found = r.versions(key).unwrap();
                assert!(found.contains(&(ord as u64, *seq, *kind)), "seed {seed} rows {rows} ordinal {ord}");
                for (vi, cell) in cells.iter().enumerate() {
                    let (page, row, c) = r.locate(vi, ord as u64).unwrap().unwrap();
                    assert_eq!(&page.cell(row, c), cell, "seed {seed} rows {rows} ordinal {ord} column {vi}");
                }
            }
            assert!(r.versions(b"key").unwrap().is_empty() && r.versions(b"zzz").unwrap().is_empty());
        }
    }
}

/// The file seen as whole rows: a key page assembled from the group pages holds exactly its
/// versions with every cell (or the columns asked for, in that order); its zone maps are the
/// rows' own where the column's pages nest inside the key page (merged from smaller pages)
/// and unknown where a page spans several key pages.
#[test]
fn key_pages_assemble_into_whole_rows_with_nested_zone_maps() {
    let seed = crate::test_seeds::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let fs = FaultFs::new();
    // Group 0's pages (columns 0 and 1) are half a key page, group 1's (column 2) two key
    // pages, group 2's (column 3) one.
    let shape = Shape { granule_shift: 6, key_span: 1, spans: vec![0, 2, 1] };
    for rows in [1usize, 64, 129, 1000] {
        let vs = versions(&mut rng, rows);
        let path = Path::new("/rg/000009.sst");
        build(&fs, path, &vs, Some(shape.clone()));
        let r = open(&fs, path).unwrap();
        let view = r.whole_rows();
        assert_eq!(view.meta.columns, vec![0, 1, 2, 3]);
        assert_eq!(view.index.len(), Shape::pages(rows as u64, shape.key_shift()), "seed {seed}");
        for (p, e) in view.index.iter().enumerate() {
            let b = r.assemble(p, None).unwrap();
            let ords = r.key_page_rows(p);
            assert_eq!(b.len() as u64, e.rows, "seed {seed} rows {rows} page {p}");
            assert_eq!(ords.end - ords.start, e.rows);
            let mine = &vs[ords.start as usize..ords.end as usize];
            for (i, (key, seq, kind, cells)) in mine.iter().enumerate() {
                assert_eq!((b.key(i), b.seq(i), b.kind(i)), (key.as_slice(), *seq, *kind), "seed {seed}");
                for (vi, cell) in cells.iter().enumerate() {
                    assert_eq!(&b.cell(i, vi), cell, "seed {seed} rows {rows} page {p} row {i} column {vi}");
                }
            }
            let two = r.assemble_columns(p, &[2, 0]).unwrap();
            for (i, (_, _, _, cells)) in mine.iter().enumerate() {
                assert_eq!((two.cell(i, 0), two.cell(i, 1)), (cells[2].clone(), cells[0].clone()), "seed {seed}");
            }
            for vi in 0..4 {
                let z = e.zones.get(vi);
                // Column 2 is group 1's, whose pages span two key pages.
                if vi == 2 {
                    assert!(z.is_none(), "a two-key-page page's zone map is unknown: seed {seed}");
                    continue;
                }
                let z = z.unwrap_or_else(|| panic!("column {vi}'s zone map is known: seed {seed}"));
                let carried: Vec<&Value> = mine.iter().filter_map(|v| v.3[vi].as_ref()).collect();
                let nulls = carried.iter().filter(|v| ***v == Value::Null).count() as u64;
                assert_eq!((z.carried, z.nulls), (carried.len() as u64, nulls), "seed {seed} page {p} column {vi}");
                let values: Vec<&Value> = carried.into_iter().filter(|v| **v != Value::Null).collect();
                let by = |a: &&Value, b: &&Value| crate::types::compare(a, b);
                let want = (values.iter().copied().min_by(by).cloned(), values.iter().copied().max_by(by).cloned());
                assert_eq!((z.min, z.max), want, "seed {seed} page {p} column {vi}");
            }
        }
    }
}

/// A walk reading some columns gets a row-group file's blocks assembled with those alone,
/// uncached, and the rows it encodes from them are the ones it encodes from whole blocks;
/// once a whole block is cached, it gets that one.
#[test]
fn blocks_assembled_with_the_wanted_columns_encode_the_rows_whole_blocks_do() {
    use crate::sst::reader::{RowEncoder, SstReader};
    let seed = crate::test_seeds::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let fs = FaultFs::new();
    let path = Path::new("/rg/000011.sst");
    let vs = versions(&mut rng, 700);
    build(&fs, path, &vs, Some(Shape { granule_shift: 6, key_span: 1, spans: vec![0, 2, 1] }));
    let cache = Arc::new(BlockCache::new(64 << 20));
    let r = SstReader::open(&fs, path, (11, 0, Arc::default()), cache.clone()).unwrap();
    let types: Arc<[ColumnType]> = TYPES.into();
    for cols in [vec![0, 2], vec![3], vec![1, 2, 3], vec![]] {
        let wanted: Arc<[bool]> = (0..TYPES.len()).map(|vi| cols.contains(&vi)).collect();
        let mut whole_rows = RowEncoder::new(&r, types.clone(), Some(wanted.clone()));
        let mut some_columns = RowEncoder::new(&r, types.clone(), Some(wanted));
        for i in 0..r.num_blocks() {
            let (b, placed) = r.block_columns(i, &cols).unwrap();
            let placed = placed.unwrap_or_else(|| panic!("block {i} came from the cache: seed {seed}"));
            let whole = r.block(i, false).unwrap();
            assert_eq!(b.len(), whole.len(), "seed {seed}");
            for row in 0..b.len() {
                let (a, w) = (some_columns.entry_placed(&b, row, Some(&placed)), whole_rows.entry(&whole, row));
                assert_eq!(
                    (&a.key, a.seq, a.kind, &a.row),
                    (&w.key, w.seq, w.kind, &w.row),
                    "seed {seed} {cols:?} block {i} row {row}"
                );
            }
        }
    }
    let whole = r.block(0, true).unwrap();
    let (b, placed) = r.block_columns(0, &[0]).unwrap();
    assert!(Arc::ptr_eq(&b, &whole) && placed.is_none(), "a cached whole block serves any columns");
}

/// Rows copied from blocks of whole rows (runs of consecutive rows column by column,
/// interrupted by rows added cell by cell) make the same file as rows added cell by cell.
#[test]
fn copied_rows_make_the_file_rows_added_cell_by_cell_make() {
    let seed = crate::test_seeds::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let fs = FaultFs::new();
    let shape = Shape { granule_shift: 6, key_span: 1, spans: vec![0, 2, 1] };
    let vs = versions(&mut rng, 900);
    let src = Path::new("/rg/000001.sst");
    build(&fs, src, &vs, Some(shape.clone()));
    let r = open(&fs, src).unwrap();
    let opts = SstOptions { block_size: 1024, compression: Compression::Lz4, bloom_bits_per_key: 10 };
    let gs: Vec<Group> = r.groups().to_vec();
    let (a, b) = (Path::new("/rg/000002.sst"), Path::new("/rg/000003.sst"));
    let mut copied = RowGroupBuilder::with_shape(fs.create(a).unwrap(), opts, 1, gs.clone(), shape.clone());
    let mut by_cell = RowGroupBuilder::with_shape(fs.create(b).unwrap(), opts, 1, gs, shape.clone());
    let group_of: Arc<[Option<usize>]> = (0..4).map(Some).collect();
    for p in 0..Shape::pages(vs.len() as u64, shape.key_shift()) {
        let block = Arc::new(r.assemble(p, None).unwrap());
        for row in 0..block.len() {
            if rng.gen_bool(0.2) {
                continue;
            }
            let at = Stored { block: block.clone(), row, group_of: group_of.clone() };
            let (key, seq, kind) = (block.key(row), block.seq(row), block.kind(row));
            if rng.gen_bool(0.7) {
                copied.add_stored(key, seq, kind, &at).unwrap();
            } else {
                copied.add(key, seq, kind, |vi| at.cell(vi)).unwrap();
            }
            by_cell.add(key, seq, kind, |vi| at.cell(vi)).unwrap();
        }
    }
    copied.finish(2).unwrap();
    by_cell.finish(3).unwrap();
    let bytes = |p: &Path| {
        let f = fs.open(p).unwrap();
        f.read_at(0, f.len() as usize).unwrap()
    };
    assert!(bytes(a) == bytes(b), "seed {seed}: the copied file differs");
}

/// Page arithmetic against a linear count of rows per page.
#[test]
fn pages_nest_and_locate_by_shifts() {
    let s = Shape { granule_shift: 6, key_span: 2, spans: vec![0, 1, 3] };
    for g in 0..3 {
        let per = 64usize << s.spans[g];
        for r in [0u64, 1, 63, 64, 65, 255, 256, 511, 512, 10_000] {
            assert_eq!(s.locate(g, r), ((r as usize) / per, (r as usize) % per), "group {g} row {r}");
        }
        // A page of a narrower group starts where a page of every wider group starts.
        for p in 0..10usize {
            let start = p * per;
            assert_eq!(start % 64, 0);
        }
    }
    assert_eq!(Shape::pages(0, 6), 0);
    assert_eq!(Shape::pages(64, 6), 1);
    assert_eq!(Shape::pages(65, 6), 2);
    assert_eq!(Shape::rows_of(65, 6, 1), 1);
    assert_eq!(Shape::rows_of(65, 6, 0), 64);
    let c = Shape::choose(16 << 10, 11, &[8 * 30, 4, 16]);
    assert_eq!(c.granule_shift, 6, "16 KiB over 240-byte rows: 64-row granules");
    assert!(c.spans[0] == 0 && c.spans[1] > c.spans[2] && c.key_span > 0, "{c:?}");
    assert!(c.spans.iter().all(|&s| s <= c.key_span), "group pages nest in key pages: {c:?}");
    // Keys wider than every group: one-granule key pages, and so every group's pages.
    let c = Shape::choose(16 << 10, 11, &[4, 1]);
    assert!(c.key_span == 0 && c.spans == [0, 0] && c.granule_shift == 10, "{c:?}");
}

/// A format-5 file does not say which key pages go on with the previous page's key: every
/// page but the first is taken as going on, so none of them passes as clean.
#[test]
fn format_5_files_read_every_page_but_the_first_as_going_on() {
    let fs = FaultFs::new();
    let path = Path::new("/rg/000010.sst");
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let vs = versions(&mut rng, 300);
    let shape = Shape { granule_shift: 6, key_span: 0, spans: vec![0, 0, 0] };
    build_format(&fs, path, &vs, Some(shape), ROW_GROUP_FORMAT_5);
    let r = open(&fs, path).unwrap();
    assert_eq!(r.version, ROW_GROUP_FORMAT_5);
    assert!(r.key_pages.iter().enumerate().all(|(p, e)| e.continues == (p > 0)));
    // Only the first page may be taken for one version per key; every page still decodes.
    assert!(r.whole_rows().index.iter().skip(1).all(|e| !e.clean));
    assert_eq!(r.verify().unwrap(), r.key_pages.len() + r.group_pages.iter().map(Vec::len).sum::<usize>());
}

/// A key with more versions than a key page holds: its versions are found across pages.
#[test]
fn a_keys_versions_continue_into_the_next_key_page() {
    let fs = FaultFs::new();
    let path = Path::new("/rg/000009.sst");
    let mut vs: Vec<Version> = Vec::new();
    for (k, n) in [("a", 50u64), ("b", 150), ("c", 3)] {
        for j in 0..n {
            vs.push((
                k.as_bytes().to_vec(),
                1000 - j,
                Kind::Put,
                vec![Some(Value::BigInt(j as i64)), None, None, None],
            ));
        }
    }
    build(&fs, path, &vs, Some(Shape { granule_shift: 6, key_span: 0, spans: vec![0, 0, 0] }));
    let r = open(&fs, path).unwrap();
    // Pages of 64 rows: `b` fills rows 50 to 199, so the second, third and fourth pages
    // start with it, as the previous page ends; each page's own decode agrees.
    assert_eq!(r.key_pages.iter().map(|e| e.continues).collect::<Vec<_>>(), [false, true, true, true]);
    assert_eq!(r.verify().unwrap(), 4 + 4 * 3);
    let b = r.versions(b"b").unwrap();
    assert_eq!(b.len(), 150);
    assert!(b.iter().enumerate().all(|(i, &(ord, seq, _))| ord == 50 + i as u64 && seq == 1000 - i as u64));
    assert_eq!(r.versions(b"c").unwrap().len(), 3);
    // A point read at a snapshot between the versions sees the right one.
    let mut res = Resolver::new(4, None);
    r.get(b"b", bloom::key_hash(b"b"), 1000 - 120, None, &mut res, &r.cache.pin()).unwrap();
    assert_eq!(res.finish().map(|c| c[0].clone()), Some(Some(Value::BigInt(120))));
}

/// A row's pages of every group, read on a cold cache (together when they lie close in the
/// file), hold what each group's page holds on its own; each is read once, then cached.
#[test]
fn a_rows_pages_read_together_hold_each_groups_cells() {
    let seed = crate::test_seeds::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let fs = FaultFs::new();
    let vs = versions(&mut rng, 1500);
    let path = Path::new("/rg/000009.sst");
    for shape in [Some(Shape { granule_shift: 6, key_span: 1, spans: vec![0, 2, 1] }), None] {
        build(&fs, path, &vs, shape);
        let plain = open(&fs, path).unwrap();
        for _ in 0..50 {
            let r = open(&fs, path).unwrap();
            let ord = rng.gen_range(0..vs.len() as u64);
            let only: Option<usize> = rng.gen_bool(0.3).then(|| rng.gen_range(0..3));
            let needed = |g: usize| only.is_none_or(|o| o == g);
            let pin = r.cache.pin();
            let mut out = [None, None, None];
            r.pages_of_row(ord, needed, &mut out, &pin).unwrap();
            let want = (0..3).filter(|&g| needed(g)).count() as u64;
            assert_eq!(r.cache.reads.load(std::sync::atomic::Ordering::Relaxed), want, "seed {seed}");
            for (vi, cell) in vs[ord as usize].3.iter().enumerate() {
                let (g, c) = r.place(vi).unwrap();
                let Some((page, row)) = &out[g] else {
                    assert!(!needed(g), "seed {seed} ordinal {ord} group {g}");
                    continue;
                };
                let (alone, at, _) = plain.locate(vi, ord).unwrap().unwrap();
                assert_eq!(*row, at, "seed {seed} ordinal {ord} column {vi}");
                assert_eq!(page.cell(*row, c), alone.cell(at, c), "seed {seed} ordinal {ord} column {vi}");
                assert_eq!(&page.cell(*row, c), cell, "seed {seed} ordinal {ord} column {vi}");
            }
            r.pages_of_row(ord, needed, &mut out, &pin).unwrap();
            assert_eq!(r.cache.reads.load(std::sync::atomic::Ordering::Relaxed), want, "cached: seed {seed}");
        }
    }
}

/// Pages read for a walk with pages held are not cached, and a group page under several key
/// pages is read once: as many page reads as the file has pages, and blocks as assembled
/// through the cache.
#[test]
fn held_pages_are_read_once_and_leave_the_cache_empty() {
    let seed = crate::test_seeds::seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let fs = FaultFs::new();
    let vs = versions(&mut rng, 1000);
    let path = Path::new("/rg/000009.sst");
    build(&fs, path, &vs, Some(Shape { granule_shift: 6, key_span: 1, spans: vec![0, 2, 1] }));
    let (r, cached) = (open(&fs, path).unwrap(), open(&fs, path).unwrap());
    let mut held = HeldPages::default();
    for p in 0..r.key_pages.len() {
        let b = r.assemble(p, Some(&mut held)).unwrap();
        let want = cached.assemble(p, None).unwrap();
        assert_eq!(b.len(), want.len(), "seed {seed} page {p}");
        for i in 0..b.len() {
            assert_eq!((b.key(i), b.seq(i), b.kind(i)), (want.key(i), want.seq(i), want.kind(i)), "seed {seed}");
            for vi in 0..4 {
                assert_eq!(b.cell(i, vi), want.cell(i, vi), "seed {seed} page {p} row {i} column {vi}");
            }
        }
    }
    assert_eq!(r.cache.charged(), 0, "seed {seed}");
    let pages = r.verify().unwrap() as u64;
    assert_eq!(r.cache.reads.load(std::sync::atomic::Ordering::Relaxed), pages, "seed {seed}");
}

/// A flipped bit anywhere is reported as corruption naming the file, at open or by verify.
#[test]
fn flipped_bits_are_corruption_naming_the_file() {
    let fs = FaultFs::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let vs = versions(&mut rng, 700);
    let path = Path::new("/rg/000009.sst");
    build(&fs, path, &vs, None);
    let len = fs.file_len(path).unwrap();
    for off in (0..len).step_by(37) {
        build(&fs, path, &vs, None);
        fs.flip_bit(path, off, 3).unwrap();
        let err = open(&fs, path).and_then(|r| r.verify()).unwrap_err();
        assert!(err.is_corruption() && err.to_string().contains("000009.sst"), "offset {off}: {err}");
        // A point read's pages, read together, are checked one by one as well.
        let Ok(r) = open(&fs, path) else { continue };
        let pin = r.cache.pin();
        let mut out = [None, None, None];
        let read = (0..vs.len() as u64).step_by(50).try_for_each(|ord| r.pages_of_row(ord, |_| true, &mut out, &pin));
        if let Err(err) = read {
            assert!(err.is_corruption() && err.to_string().contains("000009.sst"), "offset {off}: {err}");
        }
    }
}
