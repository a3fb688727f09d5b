//! `strata-bench`: benchmark harness for strata.
//!
//! strata alone:
//! - `engine` measures the core engine: single-row insert throughput with the WAL on and no
//!   fsync, batches of 1,000 rows, an fsync per batch of 100 rows, point-read latency on the
//!   loaded tree, and peak RSS during the load and the reads; beside RocksDB shaped alike when
//!   built in (see `engine.rs`).
//! - `laser` reproduces the shape of LASER's Fig. 7: blocks and bytes read per point read and per
//!   scan against projection size, for several column-group sizes (see `laser.rs`).
//! - `snapshot-reads` measures snapshot filters: files searched per lookup at an old snapshot
//!   (see `snapshot_reads.rs`).
//! - `write-amp` measures aligned compaction: write amplification per level and in total, off
//!   and on, with RocksDB's own figure beside it when built in (see `write_amp.rs`).
//!
//! strata beside its peers (RocksDB, PostgreSQL, DuckDB, SQLite, each behind a cargo feature; see
//! `peers/`), one table of every metric with ratios, `results.json` and `chart.png`:
//! - `laser-hw`: LASER's HTAP workload HW per strata layout (see `laser_hw.rs`);
//! - `ycsb`: the YCSB workloads (A-F and LogStore's variants), load and run phases (`ycsb.rs`);
//! - `ycsb-sharp`: TellStore's YCSB# scan queries, and strata's under a get/update load
//!   (`ycsb_sharp.rs`);
//! - `lstore`: L-Store's update transactions against a long-running scan, per contention level,
//!   on the lineage engine, the LSM engine and the peers (`lstore.rs`);
//! - `tpch`: the 22 TPC-H queries through strata-sql on both engines, beside DuckDB and SQLite,
//!   every system's rows checked against DuckDB's reference answers (`tpch/`).
//!
//! strata against itself:
//! - `tiering`: LogStore's hybrid-storage experiments, placements of one table on a fast and a
//!   slow tier under YCSB C (with a moving hot range), A and B-10 (see `tiering.rs`).

mod chart;
mod chbench;
mod cluster;
mod engine;
mod harness;
mod laser;
mod laser_hw;
mod lstore;
mod peers;
mod pgbench;
mod snapshot_reads;
mod tables;
mod tiering;
mod tpch;
mod write_amp;
mod ycsb;
mod ycsb_sharp;

use clap::{Parser, Subcommand};

/// mimalloc, as an application embedding strata would pick for analytic work: the system
/// allocator hands large blocks back to the kernel and faults them in zeroed again, which cost
/// TPC-H scans about a seventh of their time.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "strata-bench", about = "Benchmarks for the strata storage engine")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Core engine: inserts (single rows, batches of 1,000, fsync per 100-row batch), point reads,
    /// peak memory; beside RocksDB when built in.
    Engine(engine::EngineArgs),
    /// LASER Fig. 7: point-read and scan cost against projection size, per column-group size.
    Laser(laser::LaserArgs),
    /// TellStore YCSB#: Q1-Q3 scan rates per thread, columnar vs row layout, idle and under load.
    YcsbSharp(ycsb_sharp::YcsbSharpArgs),
    /// YCSB A-F and LogStore's A-RMW, B-90, B-10, write-only: load and run throughput, latency.
    Ycsb(ycsb::YcsbArgs),
    /// LASER's HTAP workload HW: a steady insert/update stream with point reads and scans, per
    /// strata layout and per peer.
    LaserHw(laser_hw::LaserHwArgs),
    /// Kim et al.: point lookups and scans at an old snapshot under a writer, snapshot filter and
    /// bloom filters off/on; files searched per lookup.
    SnapshotReads(snapshot_reads::SnapshotReadsArgs),
    /// Kim et al.: write amplification of random overwrites per fanout and key skew, aligned
    /// compaction off/on (and RocksDB's, when built in).
    WriteAmp(write_amp::WriteAmpArgs),
    /// L-Store: short update transactions (8 reads, 2 writes) against a long-running scan at
    /// low, medium and high contention; the lineage engine, the LSM engine and the peers.
    Lstore(lstore::LstoreArgs),
    /// TPC-H: the 22 queries through strata's SQL over tables generated in process, answers
    /// checked against DuckDB's reference answers, times beside DuckDB and SQLite.
    Tpch(tpch::TpchArgs),
    /// CH-benCHmark: TPC-C's transactions and 22 TPC-H-style queries on the same tables, together
    /// and each alone (tpmC and queries per hour).
    Chbench(chbench::ChbenchArgs),
    /// LogStore: YCSB C/A/B-10 on a fast and a slow tier (slowed to SSD and hard-disk
    /// profiles), informed and reverse compaction against all-slow and round-robin placement,
    /// with the hybrid model's prediction beside each figure.
    Tiering(tiering::TieringArgs),
    /// pgbench's TPC-B-like transaction over its three balance tables, against `strata serve`
    /// and PostgreSQL 15 at REPEATABLE READ: tps, failed and retried transactions, balance sums.
    Pgbench(pgbench::PgbenchArgs),
    /// strata's cluster: write throughput (replicated writes through every node) and query
    /// throughput (a distributed aggregate, one scan task per shard) for 1 and 3 nodes.
    Cluster(cluster::ClusterArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.cmd {
        Cmd::Engine(a) => {
            let tmp;
            let root = match &a.dir {
                Some(d) => d.clone(),
                None => {
                    tmp = std::env::temp_dir().join(format!("strata-bench-{}", std::process::id()));
                    tmp
                }
            };
            let r = engine::engine(a, &root).map_err(strata::Error::InvalidArgument);
            if a.dir.is_none() {
                let _ = std::fs::remove_dir_all(&root);
            }
            r
        }
        Cmd::Ycsb(a) => ycsb::ycsb(a).map_err(strata::Error::InvalidArgument),
        Cmd::LaserHw(a) => laser_hw::laser_hw(a).map_err(strata::Error::InvalidArgument),
        Cmd::SnapshotReads(a) => snapshot_reads::snapshot_reads(a).map_err(strata::Error::InvalidArgument),
        Cmd::WriteAmp(a) => write_amp::write_amp(a).map_err(strata::Error::InvalidArgument),
        Cmd::Lstore(a) => lstore::lstore(a).map_err(strata::Error::InvalidArgument),
        Cmd::Tpch(a) => tpch::tpch(a).map_err(strata::Error::InvalidArgument),
        Cmd::Chbench(a) => chbench::chbench(a).map_err(strata::Error::InvalidArgument),
        Cmd::Cluster(a) => cluster::cluster(a).map_err(strata::Error::InvalidArgument),
        Cmd::Tiering(a) => tiering::tiering(a).map_err(strata::Error::InvalidArgument),
        Cmd::Pgbench(a) => pgbench::pgbench(a).map_err(strata::Error::InvalidArgument),
        Cmd::YcsbSharp(a) => {
            let root = std::env::temp_dir().join(format!("strata-bench-ycsb-sharp-{}", std::process::id()));
            let r = ycsb_sharp::ycsb_sharp(a, &root).map_err(strata::Error::InvalidArgument);
            let _ = std::fs::remove_dir_all(&root);
            r
        }
        Cmd::Laser(a) => {
            let root = std::env::temp_dir().join(format!("strata-bench-laser-{}", std::process::id()));
            let r = laser::laser(a, &root);
            let _ = std::fs::remove_dir_all(&root);
            r
        }
    };
    if let Err(e) = result {
        eprintln!("strata-bench: {e}");
        std::process::exit(1);
    }
}
