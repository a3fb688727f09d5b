//! `strata-bench laser`: the shape of LASER's Fig. 7 (seed 000 §7.1) on the narrow table.
//!
//! For each column-group size (equal-width groups of that many columns from Level-1 down, row at
//! Level-0), the same shuffled rows are loaded and compacted into a tree of five or more levels.
//! Then, with the block cache off so every data block a read touches is read from its file, point
//! reads (Q2) and range scans (Q3's access path) run for growing projection sizes, and the
//! engine's own counters give blocks and bytes read per operation. Expected: with one column per
//! group a point read's block reads grow with the projection; with one group of all columns they
//! stay flat; a narrow scan reads far fewer bytes from narrow groups than from whole rows.

use std::path::Path;
use std::time::Instant;

use clap::Parser;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use strata::{Db, KeyRange, Options, ReadOptions, TableOptions, Value, WriteBatch, WriteOptions};

use crate::engine::{narrow, row, COLS};

#[derive(Parser)]
pub(crate) struct LaserArgs {
    /// Rows to load per layout.
    #[arg(long, default_value_t = 2_000_000)]
    rows: i64,
    /// Column-group sizes to compare (each divides 30).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 3, 6, 15, 30])]
    cg_sizes: Vec<usize>,
    /// Projection sizes (number of columns read).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1, 3, 6, 10, 15, 20, 30])]
    projections: Vec<usize>,
    /// Point reads per projection size.
    #[arg(long, default_value_t = 2000)]
    gets: usize,
    /// Range scans per projection size.
    #[arg(long, default_value_t = 10)]
    scans: usize,
    /// Rows each range scan covers.
    #[arg(long, default_value_t = 20_000)]
    scan_rows: i64,
    /// Size ratio T between levels (the paper's narrow-table runs use 2).
    #[arg(long, default_value_t = 2)]
    ratio: u64,
    /// Level-1 target size in MiB.
    #[arg(long, default_value_t = 8)]
    l1_mib: u64,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Layout text: row at Level-0, groups of `size` neighbouring columns from Level-1 down.
fn layout(size: usize) -> String {
    let groups: Vec<String> = (0..COLS / size)
        .map(|g| {
            let cols: Vec<String> = (1..=size).map(|i| format!("c{}", g * size + i)).collect();
            format!("({})", cols.join(","))
        })
        .collect();
    format!("L0: row; L1-: {}", groups.join(" "))
}

/// Per-operation cost at one projection size.
struct Cost {
    blocks: f64,
    bytes: f64,
    micros: f64,
}

fn measure(db: &Db, n: usize, mut op: impl FnMut() -> strata::Result<()>) -> strata::Result<Cost> {
    let before = db.stats();
    let started = Instant::now();
    for _ in 0..n {
        op()?;
    }
    let micros = started.elapsed().as_secs_f64() * 1e6 / n as f64;
    let after = db.stats();
    Ok(Cost {
        blocks: (after.block_reads - before.block_reads) as f64 / n as f64,
        bytes: (after.block_read_bytes - before.block_read_bytes) as f64 / n as f64,
        micros,
    })
}

struct Run {
    cg_size: usize,
    levels: usize,
    gets: Vec<Cost>,
    scans: Vec<Cost>,
}

fn run_layout(a: &LaserArgs, size: usize, dir: &Path) -> strata::Result<Run> {
    let opts = Options {
        memtable_size: 4 << 20,
        l1_max_bytes: a.l1_mib << 20,
        level_size_ratio: a.ratio,
        target_file_size: 2 << 20,
        block_cache_size: 0,
        ..Options::default()
    };
    let db = Db::open(dir, opts)?;
    let spec = layout(size);
    let options = if size == COLS { TableOptions::default() } else { TableOptions::with_layout(spec) };
    let t = db.create_table("narrow", narrow(), options)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
    let mut keys: Vec<i64> = (0..a.rows).collect();
    keys.shuffle(&mut rng);
    let started = Instant::now();
    for (i, chunk) in keys.chunks(1000).enumerate() {
        let mut b = WriteBatch::new();
        for &k in chunk {
            b.insert(&t, &row(&mut rng, k))?;
        }
        db.write(b, &WriteOptions::default())?;
        if i % 200 == 199 {
            eprintln!("  cg_size {size}: loaded {} of {} rows", (i + 1) * 1000, a.rows);
        }
    }
    db.flush()?;
    db.wait_for_compactions()?;
    let st = db.stats();
    let levels = st.tables[0].levels.iter().filter(|l| l.files > 0).count();
    eprintln!(
        "  cg_size {size}: loaded and compacted in {:.1} s; populated levels {levels}; layout {}",
        started.elapsed().as_secs_f64(),
        st.tables[0].layout
    );
    let ro = ReadOptions::default();
    let mut gets = Vec::new();
    let mut scans = Vec::new();
    for &k in &a.projections {
        let names: Vec<String> = (1..=k).map(|i| format!("c{i}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let proj = t.projection(&refs)?;
        gets.push(measure(&db, a.gets, || {
            let key = rng.gen_range(0..a.rows);
            t.get(&[Value::BigInt(key)], &proj, &ro).map(drop)
        })?);
        scans.push(measure(&db, a.scans, || {
            let lo = rng.gen_range(0..(a.rows - a.scan_rows).max(1));
            let range = KeyRange::half_open(vec![Value::BigInt(lo)], vec![Value::BigInt(lo + a.scan_rows)]);
            for r in t.scan(&range, &proj, &ro)? {
                r?;
            }
            Ok(())
        })?);
    }
    db.close()?;
    Ok(Run { cg_size: size, levels, gets, scans })
}

pub(crate) fn laser(a: &LaserArgs, root: &Path) -> strata::Result<()> {
    if let Some(bad) = a.cg_sizes.iter().find(|&&s| s == 0 || !COLS.is_multiple_of(s)) {
        return Err(strata::Error::InvalidArgument(format!("cg size {bad} does not divide {COLS}")));
    }
    if let Some(bad) = a.projections.iter().find(|&&k| k == 0 || k > COLS) {
        return Err(strata::Error::InvalidArgument(format!("projection size {bad} is not 1..={COLS}")));
    }
    eprintln!(
        "laser: narrow table ({COLS} INT columns), {} rows, T={}, L1 {} MiB, block cache off",
        a.rows, a.ratio, a.l1_mib
    );
    let mut runs = Vec::new();
    for &size in &a.cg_sizes {
        let dir = root.join(format!("cg{size}"));
        let _ = std::fs::remove_dir_all(&dir);
        runs.push(run_layout(a, size, &dir)?);
        let _ = std::fs::remove_dir_all(&dir);
    }
    for (title, pick) in [("point reads (Q2)", 0), ("range scans (Q3 path)", 1)] {
        println!("\n{title}: blocks read / KiB read / µs per operation, by projection size");
        print!("{:<10} {:>6}", "cg_size", "levels");
        for k in &a.projections {
            print!(" {:>22}", format!("k={k}"));
        }
        println!();
        for r in &runs {
            print!("{:<10} {:>6}", r.cg_size, r.levels);
            for c in if pick == 0 { &r.gets } else { &r.scans } {
                print!(" {:>22}", format!("{:.1} / {:.1} / {:.0}", c.blocks, c.bytes / 1024.0, c.micros));
            }
            println!();
        }
    }
    // The expected shape, checked on the engine's counters.
    fn at<'r>(a: &LaserArgs, r: &'r Run, k: usize) -> Option<(&'r Cost, &'r Cost)> {
        a.projections.iter().position(|&p| p == k).map(|i| (&r.gets[i], &r.scans[i]))
    }
    println!();
    let (lo_k, hi_k) = (a.projections[0], a.projections[a.projections.len() - 1]);
    for r in &runs {
        if let (Some((g1, _)), Some((g2, _))) = (at(a, r, lo_k), at(a, r, hi_k)) {
            println!(
                "cg_size {:>2}: point-read blocks grow {:.2}x from k={lo_k} to k={hi_k}",
                r.cg_size,
                g2.blocks / g1.blocks.max(1e-9)
            );
        }
    }
    if let Some(wide) = runs.iter().find(|r| r.cg_size == COLS) {
        if let Some((_, s30)) = at(a, wide, 3) {
            for r in runs.iter().filter(|r| r.cg_size < COLS) {
                if let Some((_, s)) = at(a, r, 3) {
                    println!(
                        "3-column scan: cg_size {:>2} reads {:.1}x fewer bytes than cg_size {COLS}",
                        r.cg_size,
                        s30.bytes / s.bytes.max(1e-9)
                    );
                }
            }
        }
    }
    Ok(())
}
