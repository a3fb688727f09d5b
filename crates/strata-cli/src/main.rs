//! `strata`: command-line access to a strata database.

mod cluster;
mod demo;
mod load;
mod sql;

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// mimalloc: with the system allocator, SQL scans and joins spent about a seventh of their time
/// having freed large buffers zeroed and faulted in again by the kernel.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
use serde_json::{json, Map, Value as Json};
use strata::{
    AsOf, ColumnType, Db, Engine, KeyRange, Options, ReadOptions, TableOptions, TableStats, Tier, TierStats, Value,
    WorkloadStats,
};

use strata_cli::exec::{self, projection, scan, CliError, ScanArgs, ScanOut, Session};
use strata_cli::{json, schema_sql};

#[derive(Parser)]
#[command(name = "strata", version, about = "Command-line tool for the strata storage engine")]
struct Cli {
    /// Database directory, created on first use [default: ./strata-data; for `demo`, a fresh
    /// ./strata-demo-<time> directory].
    #[arg(long, global = true)]
    db: Option<PathBuf>,
    /// How far back `--as-of` reads may reach, e.g. 90s, 15m, 12h, 7d (0 turns history off).
    /// The database remembers it: later commands without the flag keep it.
    #[arg(long, global = true, value_parser = exec::parse_duration)]
    history_retention: Option<std::time::Duration>,
    /// A storage tier, NAME=DIR[:SIZE] (SIZE like 256KiB, 512MiB, 8GiB); repeat the flag for
    /// each tier, the fast one first. Every tier but the last needs a SIZE; a tier without one
    /// takes what the others do not. The database remembers its tiers: later commands may leave
    /// the flags out, and may change sizes but not names or directories.
    #[arg(long = "tier", global = true, value_name = "NAME=DIR[:SIZE]", value_parser = Tier::parse)]
    tiers: Vec<Tier>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    /// Aligned columns.
    Table,
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON object per row.
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a table: --schema "id BIGINT PRIMARY KEY, a INT NOT NULL, s TEXT"
    /// (composite keys as "a INT, b TEXT, PRIMARY KEY (a, b)").
    CreateTable {
        /// Table name.
        name: String,
        /// Column list with the primary key.
        #[arg(long)]
        schema: String,
        /// Column-group layout per level, e.g. "L0: row; L1: (a,b) (c,d); L2-: column"
        /// (default: row at every level). Unnamed levels inherit the level above.
        #[arg(long)]
        layout: Option<String>,
        /// Cut compaction output by size alone instead of aligning it to the files of the level
        /// below (aligned compaction, on by default); for comparing write amplification.
        #[arg(long)]
        no_aligned_compaction: bool,
        /// The engine storing the table: `lsm` (default; an LSM tree on disk, any size) or
        /// `lineage` (in memory, for tables updated in place at high rates while scanned).
        #[arg(long, default_value = "lsm", value_parser = ["lsm", "lineage"])]
        engine: String,
    },
    /// Run SQL: `-c "SELECT ..."` runs statements and exits, SQL on stdin runs as a script, and
    /// with neither an interactive shell starts (history, multi-line statements, timing). A
    /// failed statement prints its error and exits non-zero; statements before it stay applied,
    /// except those of a transaction block (BEGIN ... COMMIT) still open, which is rolled back.
    Sql {
        /// Statements to run (separated by `;`).
        #[arg(short = 'c', long = "command")]
        command: Option<String>,
        /// Output format: aligned table, CSV with a header, or one JSON object per row.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Serve the database over PostgreSQL's wire protocol (psql, psycopg, pgjdbc, ...) until
    /// interrupted (Ctrl-C / SIGINT). Loopback only unless --listen-any is given.
    Serve {
        /// Address for the PostgreSQL protocol, e.g. 127.0.0.1:5433.
        #[arg(long, value_name = "ADDR")]
        pg: std::net::SocketAddr,
        /// File holding the password (its first line); clients must then authenticate. Without
        /// it every local connection is accepted.
        #[arg(long, value_name = "FILE")]
        password_file: Option<PathBuf>,
        /// The user clients log in as.
        #[arg(long, default_value = "strata")]
        user: String,
        /// Password check: scram (SCRAM-SHA-256) or md5.
        #[arg(long, default_value = "scram", value_parser = ["scram", "md5"])]
        auth: String,
        /// Listen on a non-loopback address (requires --password-file).
        #[arg(long)]
        listen_any: bool,
        /// Connections served at once; more are refused.
        #[arg(long, default_value_t = 64)]
        max_connections: usize,
    },
    /// Run one node of a cluster (docs/cluster.md) from the --db directory until interrupted:
    /// it prints `node ID listening on ADDR` once it serves.
    Node {
        /// The node's id, unique in the cluster (the directory remembers it).
        #[arg(long)]
        id: u64,
        /// Address to listen on for the cluster's messages and clients (port 0 picks one).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// A node of a new cluster, ID=ADDR, this one included (repeat): the node with the
        /// smallest id makes the cluster. Or leave them out and run `strata cluster init`.
        #[arg(long = "peer", value_name = "ID=ADDR", value_parser = cluster::peer)]
        peers: Vec<(u64, String)>,
        /// Address the node's query worker (gRPC) listens on; by default the host of --listen
        /// with a port picked (nodes find each other's workers in the shard map).
        #[arg(long, value_name = "ADDR")]
        worker_listen: Option<String>,
    },
    /// Ask a node about its cluster, or change the cluster (see `strata cluster --help`).
    Cluster {
        /// Address of any node.
        #[arg(long, value_name = "ADDR")]
        node: String,
        #[command(subcommand)]
        cmd: cluster::ClusterCmd,
    },
    /// Drop a table and its data.
    DropTable {
        /// Table name.
        name: String,
    },
    /// List tables with their schemas.
    Tables,
    /// Read one row by its key (key column values in key order).
    Get {
        /// Table name.
        name: String,
        /// Key column values, in key order.
        #[arg(required = true)]
        key: Vec<String>,
        /// Comma-separated columns to return (default: all).
        #[arg(long, value_delimiter = ',')]
        columns: Option<Vec<String>>,
        /// Read as of a past point: a sequence number or an RFC 3339 time
        /// (2026-11-24T20:00:00Z), within the history retention window (--history-retention);
        /// a point outside it is refused with the readable range.
        #[arg(long, alias = "snapshot-seq", value_parser = exec::parse_as_of)]
        as_of: Option<AsOf>,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Read rows in key order, optionally filtered and aggregated.
    Scan {
        /// Table name.
        name: String,
        /// First key (inclusive); key column values in key order, a prefix is allowed.
        #[arg(long, num_args = 1..)]
        from: Option<Vec<String>>,
        /// Last key (exclusive); key column values in key order, a prefix is allowed.
        #[arg(long, num_args = 1..)]
        to: Option<Vec<String>>,
        /// Comma-separated columns to return (default: all).
        #[arg(long, value_delimiter = ',')]
        columns: Option<Vec<String>>,
        /// Filter, e.g. "a > 1 AND (s = 'x' OR s IS NULL)".
        #[arg(long = "where")]
        filter: Option<String>,
        /// Aggregates instead of rows, e.g. "count(*),max(b)".
        #[arg(long, value_delimiter = ',')]
        agg: Vec<String>,
        /// Read as of a past point, as for `get`.
        #[arg(long, value_parser = exec::parse_as_of)]
        as_of: Option<AsOf>,
        /// Return at most this many rows.
        #[arg(long)]
        limit: Option<usize>,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
    },
    /// Load a CSV file with a header row naming the columns, or a Parquet file (`.parquet`).
    /// Every value is checked before anything is written, so a bad value (reported with its
    /// line or row and its column) leaves the table unchanged. Empty CSV fields are NULL. Rows
    /// are ingested straight into the deepest level their key range leaves free, 200,000 at a
    /// time, each chunk atomic: a file sorted by key is written once, into the last level.
    Load {
        /// Table name.
        name: String,
        /// CSV file.
        file: PathBuf,
    },
    /// Per table: layout, and per level files, bytes, entries, bytes written, age range
    /// (sequence numbers), column groups and the workload served since open.
    Stats {
        /// Only this table.
        name: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Compact a table (or every table) down through all levels.
    Compact {
        /// Only this table.
        name: Option<String>,
    },
    /// Read every block of every file and verify its checksum; exits non-zero naming a damaged file.
    Check,
    /// Record a table's workload, event by event at the level that served it, into a trace
    /// file (docs/format/trace.md) for `advise --trace`. Tracing stays on, in every process
    /// that opens the database, until `trace stop`.
    Trace {
        #[command(subcommand)]
        action: TraceCmd,
    },
    /// Run LASER's design advisor on a table: the column groups per level that minimise the
    /// cost model's prediction for a workload (a trace, or what this process served since the
    /// database opened), with the predicted cost per operation class of the current and the
    /// advised layout.
    Advise {
        /// Table name.
        name: String,
        /// The workload: a trace recorded with `strata trace start`.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Change the table's layout to the advised one (online: compactions write it from now
        /// on, and the files written before are rewritten in the background, here until done).
        #[arg(long)]
        apply: bool,
        /// Price blocks as measured on this table now (point reads, scans, and this process's
        /// flushes and compactions) instead of the built-in defaults; the prices are printed.
        #[arg(long)]
        calibrate: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Change a table's column-group layout online, e.g. "L1: (a,b) (c,d); L2-: column" or
    /// `row`; files written before are rewritten in the background (here until done, with
    /// progress).
    SetLayout {
        /// Table name.
        name: String,
        /// The layout.
        layout: String,
    },
    /// Load the LASER narrow table while point reads and scans run, then print a summary.
    Demo {
        /// Rows to ingest.
        #[arg(long, default_value_t = 1_000_000)]
        rows: i64,
    },
    /// Read JSON requests, one per line, from stdin; write one JSON response per line to stdout,
    /// each flushed only after its operation completed (durably, with --sync).
    Exec {
        /// Sync the WAL before answering each write.
        #[arg(long)]
        sync: bool,
    },
}

#[derive(Subcommand)]
enum TraceCmd {
    /// Start appending the table's workload to FILE (created, or appended to if it traces this
    /// table).
    Start {
        /// Table name.
        name: String,
        /// Trace file.
        file: PathBuf,
    },
    /// Stop tracing the table.
    Stop {
        /// Table name.
        name: String,
    },
}

/// Parses a key value typed on the command line.
fn parse_text(ty: ColumnType, s: &str) -> Result<Value, String> {
    let bad = || format!("`{s}` is not a valid {}", ty.name());
    Ok(match ty {
        ColumnType::BigInt => Value::BigInt(s.parse().map_err(|_| bad())?),
        ColumnType::Int => Value::Int(s.parse().map_err(|_| bad())?),
        ColumnType::SmallInt => Value::SmallInt(s.parse().map_err(|_| bad())?),
        ColumnType::TinyInt => Value::TinyInt(s.parse().map_err(|_| bad())?),
        ColumnType::Double => Value::Double(s.parse().map_err(|_| bad())?),
        ColumnType::Real => Value::Real(s.parse().map_err(|_| bad())?),
        ColumnType::Boolean => Value::Boolean(s.parse().map_err(|_| bad())?),
        ColumnType::Text => Value::Text(s.to_owned()),
        ColumnType::Bytea => Value::Bytea(json::parse_hex(s).ok_or_else(bad)?),
        ColumnType::Date => Value::Date(strata::types::parse_date(s).ok_or_else(bad)?),
        ColumnType::Timestamp => Value::Timestamp(strata::types::parse_timestamp(s).ok_or_else(bad)?),
        ColumnType::TimestampTz => Value::TimestampTz(strata::types::parse_timestamptz(s).ok_or_else(bad)?),
    })
}

/// Key values (a prefix of the key columns, in key order) typed on the command line.
fn key_values(t: &strata::Table, vals: &[String]) -> Result<Vec<Value>, CliError> {
    let schema = t.schema();
    let pk = schema.primary_key();
    if vals.len() > pk.len() {
        return Err(CliError::new("invalid_argument", format!("table `{}` has {} key column(s)", t.name(), pk.len())));
    }
    pk.iter()
        .zip(vals)
        .map(|(&c, v)| {
            let col = &schema.columns()[c];
            parse_text(col.ty, v).map_err(|e| CliError::new("type_mismatch", format!("key column `{}`: {e}", col.name)))
        })
        .collect()
}

/// The same as a key object (column name → JSON value), as `exec` scans take them.
fn key_object(t: &strata::Table, vals: &[String]) -> Result<Map<String, Json>, CliError> {
    let schema = t.schema();
    let names = schema.primary_key().iter().map(|&c| schema.columns()[c].name.clone());
    Ok(names.zip(key_values(t, vals)?.iter().map(json::to_json)).collect())
}

/// `t` as an RFC 3339 UTC time.
fn rfc3339(t: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn text_of(v: &Value) -> String {
    match json::to_json(v) {
        Json::Null => "NULL".into(),
        Json::String(s) => s,
        other => other.to_string(),
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn print_rows(names: &[String], rows: &[Vec<Value>], format: Format) {
    match format {
        Format::Json => {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            for r in rows {
                println!("{}", json::object(&refs, r));
            }
        }
        Format::Csv => {
            println!("{}", names.iter().map(|n| csv_field(n)).collect::<Vec<_>>().join(","));
            for r in rows {
                let cells: Vec<String> =
                    r.iter().map(|v| if v.is_null() { String::new() } else { csv_field(&text_of(v)) }).collect();
                println!("{}", cells.join(","));
            }
        }
        Format::Table => {
            let cells: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(text_of).collect()).collect();
            let widths: Vec<usize> = (0..names.len())
                .map(|i| {
                    cells.iter().map(|r| r[i].chars().count()).chain([names[i].chars().count()]).max().unwrap_or(0)
                })
                .collect();
            let line = |vals: &[String]| {
                vals.iter()
                    .zip(&widths)
                    .map(|(v, w)| format!("{v:<w$}"))
                    .collect::<Vec<_>>()
                    .join("  ")
                    .trim_end()
                    .to_owned()
            };
            println!("{}", line(names));
            println!("{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
            for r in &cells {
                println!("{}", line(r));
            }
            println!("({} row{})", rows.len(), if rows.len() == 1 { "" } else { "s" });
        }
    }
}

fn run(cli: Cli) -> Result<(), CliError> {
    if let Cmd::Demo { rows } = cli.cmd {
        let dir = cli.db.unwrap_or_else(|| {
            let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            PathBuf::from(format!("./strata-demo-{secs}"))
        });
        return demo::run(&dir, rows);
    }
    match cli.cmd {
        Cmd::Node { id, listen, peers, worker_listen } => {
            let dir = cli.db.unwrap_or_else(|| PathBuf::from("./strata-node"));
            return cluster::run_node(&dir, id, &listen, peers, worker_listen);
        }
        Cmd::Cluster { node, cmd } => return cluster::run_cluster(&node, cmd),
        _ => {}
    }
    let opts = Options { history_retention: cli.history_retention, tiers: cli.tiers, ..Options::default() };
    let db = Db::open(cli.db.unwrap_or_else(|| PathBuf::from("./strata-data")), opts)?;
    match cli.cmd {
        Cmd::CreateTable { name, schema, layout, no_aligned_compaction, engine } => {
            let schema = schema_sql::parse_schema(&schema).map_err(|m| CliError::new("invalid_schema", m))?;
            let engine = Engine::from_name(&engine).unwrap_or_default();
            let options = layout
                .map_or_else(TableOptions::default, TableOptions::with_layout)
                .aligned(!no_aligned_compaction)
                .with_engine(engine);
            let t = db.create_table(&name, schema, options)?;
            if engine == Engine::Lineage {
                println!("created table {name}; engine lineage");
            } else {
                let layout = t.info().layout().spec(t.schema(), Options::default().num_levels);
                println!("created table {name}; layout {layout}");
            }
        }
        Cmd::Sql { command, format } => return sql::run(db, command, format),
        Cmd::Serve { pg, password_file, user, auth, listen_any, max_connections } => {
            let password = match password_file {
                None => None,
                Some(f) => Some(sql::read_password(&f)?),
            };
            if listen_any && password.is_none() {
                return Err(CliError::new(
                    "bad_request",
                    "--listen-any needs --password-file: other hosts must not reach the database unauthenticated",
                ));
            }
            let mut config = strata_pg::Config::new(pg);
            config.allow_remote = listen_any;
            config.user = user;
            config.password = password;
            config.auth = if auth == "md5" { strata_pg::AuthMethod::Md5 } else { strata_pg::AuthMethod::Scram };
            config.max_connections = max_connections.max(1);
            return sql::serve(db, config);
        }
        Cmd::DropTable { name } => {
            db.drop_table(&name)?;
            println!("dropped table {name}");
        }
        Cmd::Tables => {
            for n in db.table_names() {
                let t = db.table(&n)?;
                println!("{n}: {}", schema_sql::schema_text(t.schema()));
            }
        }
        Cmd::Get { name, key, columns, as_of, format } => {
            let t = db.table(&name)?;
            let k = key_values(&t, &key)?;
            let (names, proj) = projection(&t, columns)?;
            let snap = as_of.map(|a| db.snapshot_as_of(a)).transpose()?;
            let ro = ReadOptions { snapshot: snap.as_ref() };
            let rows: Vec<Vec<Value>> = t.get(&k, &proj, &ro)?.into_iter().collect();
            print_rows(&names, &rows, format);
        }
        Cmd::Scan { name, from, to, columns, filter, agg, as_of, limit, format } => {
            let t = db.table(&name)?;
            let from = from.map(|f| key_object(&t, &f)).transpose()?;
            let to = to.map(|f| key_object(&t, &f)).transpose()?;
            let args =
                ScanArgs { from: from.as_ref(), to: to.as_ref(), columns, filter: filter.as_deref(), aggs: agg, limit };
            let snap = as_of.map(|a| db.snapshot_as_of(a)).transpose()?;
            match scan(&t, &args, &ReadOptions { snapshot: snap.as_ref() })? {
                ScanOut::Rows(names, rows) => print_rows(&names, &rows, format),
                ScanOut::Aggs(a) => {
                    if matches!(format, Format::Json) {
                        println!("{}", Json::Object(a.into_iter().collect()));
                    } else {
                        let names: Vec<String> = a.iter().map(|(n, _)| n.clone()).collect();
                        let vals: Vec<Value> = a
                            .iter()
                            .map(|(_, j)| match j {
                                Json::Null => Value::Null,
                                Json::String(s) => Value::Text(s.clone()),
                                other => Value::Text(other.to_string()),
                            })
                            .collect();
                        print_rows(&names, &[vals], format);
                    }
                }
            }
        }
        Cmd::Load { name, file } => {
            let started = std::time::Instant::now();
            let n = load::load_file(&db, &name, &file)?;
            let secs = started.elapsed().as_secs_f64();
            println!("loaded {n} rows into {name} in {secs:.1} s ({:.0} rows/s)", n as f64 / secs.max(1e-9));
            // What the load wrote to disk against what it was given (compactions it set off
            // included, once they are done).
            db.wait_for_compactions()?;
            if let Some(t) = db.stats().tables.iter().find(|t| t.name == name) {
                let written: u64 = t.levels.iter().map(|l| l.bytes_written).sum();
                println!(
                    "wrote {:.1} MiB of files for {:.1} MiB of keys and rows (write amplification {:.2})",
                    written as f64 / f64::from(1 << 20),
                    t.ingested_bytes as f64 / f64::from(1 << 20),
                    t.write_amplification
                );
            }
        }
        Cmd::Stats { name, json: as_json } => {
            let st = db.stats();
            let tables: Vec<_> = st.tables.iter().filter(|t| name.as_ref().is_none_or(|n| *n == t.name)).collect();
            if let Some(n) = &name {
                if tables.is_empty() {
                    return Err(strata::Error::UnknownTable(n.clone()).into());
                }
            }
            if as_json {
                let tj: Vec<Json> = tables.iter().map(|t| stats_json(t)).collect();
                let tiers: Vec<Json> = st
                    .tiers
                    .iter()
                    .map(|t| {
                        json!({"name": t.name, "dir": t.dir, "budget": t.budget, "bytes": t.bytes, "files": t.files,
                            "block_reads": t.block_reads})
                    })
                    .collect();
                let out = json!({
                    "tables": tj,
                    "tiers": tiers,
                    "memtable_bytes": st.memtable_bytes,
                    "block_cache_bytes": st.block_cache_bytes,
                    "key_set_bytes": st.key_set_bytes,
                    "open_file_bytes": st.open_file_bytes,
                    "block_reads": st.block_reads,
                    "block_read_bytes": st.block_read_bytes,
                    "flushes": st.flushes,
                    "flush_micros": st.flush_micros,
                    "compactions": st.compactions,
                    "staging_compactions": st.staging_compactions,
                    "last_sequence": st.last_sequence,
                    "write_stall_micros": st.write_stall_micros,
                    "files_probed": st.files_probed,
                    "files_skipped_by_bloom": st.files_skipped_by_bloom,
                    "files_skipped_by_snapshot": st.files_skipped_by_snapshot,
                    "history": {
                        "retention_ms": st.history.retention.as_millis() as u64,
                        "oldest_seq": st.history.oldest_seq,
                        "newest_seq": st.history.newest_seq,
                        "oldest_time": st.history.oldest_time.map(rfc3339),
                    },
                    "background": st.background,
                });
                println!("{out}");
            } else {
                let h = &st.history;
                let since = h.oldest_time.map_or(String::new(), |t| format!(", since {}", rfc3339(t)));
                println!(
                    "history: retention {:?}; readable sequence numbers {}..={}{since}",
                    h.retention, h.oldest_seq, h.newest_seq
                );
                if st.tiers.len() > 1 {
                    print_tiers(&st.tiers);
                }
                for t in tables {
                    print_stats(t, &st.tiers);
                }
            }
        }
        Cmd::Compact { name } => {
            let names = match name {
                Some(n) => vec![n],
                None => db.table_names(),
            };
            for n in names {
                db.compact_range(&n, &KeyRange::all())?;
                println!("compacted {n}");
            }
        }
        Cmd::Check => {
            let n = db.verify()?;
            println!("ok: {n} files verified");
        }
        Cmd::Trace { action: TraceCmd::Start { name, file } } => {
            db.trace_start(&name, &file)?;
            println!("tracing {name} into {}", file.display());
        }
        Cmd::Trace { action: TraceCmd::Stop { name } } => match db.trace_stop(&name)? {
            Some(path) => println!("stopped tracing {name}; the trace is {}", path.display()),
            None => println!("{name} was not being traced"),
        },
        Cmd::Advise { name, trace, apply, calibrate, json: as_json } => {
            if trace.is_none() {
                // A fresh process has served nothing yet: its statistics would advise on no reads.
                return Err(CliError::new(
                    "usage",
                    "give the workload with --trace FILE (record one with `strata trace start TABLE FILE`)",
                ));
            }
            let calibration = if calibrate { db.calibrate(&name)? } else { Default::default() };
            let advice = db.advise(&name, &strata::AdviseOptions { trace, calibration })?;
            if as_json {
                println!("{}", advice_json(&advice));
            } else {
                print_advice(&advice);
            }
            if apply && advice.advised != advice.current {
                db.set_layout(&name, Some(&advice.advised))?;
                relayout(&db, &name, &advice.advised)?;
            } else if apply {
                println!("the table already has the advised layout");
            }
        }
        Cmd::SetLayout { name, layout } => {
            let spec = if layout.trim() == "row" { None } else { Some(layout.as_str()) };
            db.set_layout(&name, spec)?;
            relayout(&db, &name, &layout)?;
        }
        // Run before the database opens.
        Cmd::Demo { .. } | Cmd::Node { .. } | Cmd::Cluster { .. } => {}
        Cmd::Exec { sync } => {
            let mut session = Session::new(db, sync);
            let mut stdin = std::io::stdin().lock();
            let mut out = std::io::stdout().lock();
            let mut buf = Vec::new();
            loop {
                buf.clear();
                if stdin.read_until(b'\n', &mut buf).map_err(|e| CliError::new("io", e.to_string()))? == 0 {
                    break;
                }
                // A line that is not UTF-8 is answered like any other bad request.
                let line = String::from_utf8_lossy(&buf);
                if line.trim().is_empty() {
                    continue;
                }
                let resp = session.handle_line(&line);
                writeln!(out, "{resp}").and_then(|()| out.flush()).map_err(|e| CliError::new("io", e.to_string()))?;
            }
            session.db.close()?;
        }
    }
    Ok(())
}

fn seq_text(r: Option<(u64, u64)>) -> String {
    r.map_or_else(|| "-".to_owned(), |(a, b)| format!("{a}..{b}"))
}

fn workload_json(w: &WorkloadStats) -> Json {
    json!({
        "point_reads": w.point_reads, "scans": w.scans, "updates": w.updates,
        "columns": w.columns.iter().map(|c| json!({
            "column": c.column, "point_reads": c.point_reads, "scans": c.scans, "updates": c.updates,
        })).collect::<Vec<_>>(),
    })
}

fn stats_json(t: &TableStats) -> Json {
    json!({
        "name": t.name,
        "engine": t.engine.name(),
        "lineage": t.lineage.as_ref().map(|l| json!({
            "rows": l.rows, "base_bytes": l.base_bytes, "tail_bytes": l.tail_bytes,
            "history_bytes": l.history_bytes, "merge_lag": l.merge_lag, "merges": l.merges, "merged_records": l.merged_records,
            "reclaimed_ranges": l.reclaimed_ranges, "reclaim_wait_micros": l.reclaim_wait_micros,
        })),
        "layout": t.layout,
        "aligned_compaction": t.aligned_compaction,
        "ingested_bytes": t.ingested_bytes,
        "write_amplification": t.write_amplification,
        "deferred_files": t.deferred_files,
        "relayout_files": t.relayout_files,
        "memtable_workload": workload_json(&t.memtable_workload),
        "levels": t.levels.iter().map(|l| json!({
            "level": l.level, "runs": l.runs, "files": l.files, "bytes": l.bytes,
            "entries": l.entries, "bytes_written": l.bytes_written, "bytes_read": l.bytes_read,
            "min_seq": l.seq_range.map(|r| r.0), "max_seq": l.seq_range.map(|r| r.1),
            "groups": l.groups.iter().map(|g| json!({
                "columns": g.columns, "files": g.files, "bytes": g.bytes, "entries": g.entries,
                "min_seq": g.seq_range.map(|r| r.0), "max_seq": g.seq_range.map(|r| r.1),
            })).collect::<Vec<_>>(),
            "workload": workload_json(&l.workload),
            "tier_bytes": l.tier_bytes,
        })).collect::<Vec<_>>(),
    })
}

fn print_tiers(tiers: &[TierStats]) {
    println!("tiers (fast first):");
    let reads: u64 = tiers.iter().map(|t| t.block_reads).sum();
    for t in tiers {
        let budget = t.budget.map_or_else(|| "no budget".to_owned(), |b| format!("budget {b} bytes"));
        let share = if reads == 0 { 0.0 } else { 100.0 * t.block_reads as f64 / reads as f64 };
        println!(
            "  {:<10} {} files, {} bytes ({budget}) in {}; {} block reads since open ({share:.1}%)",
            t.name, t.files, t.bytes, t.dir, t.block_reads
        );
    }
}

fn print_stats(t: &TableStats, tiers: &[TierStats]) {
    if let Some(l) = &t.lineage {
        println!("table {} (engine lineage)", t.name);
        println!(
            "  rows {}; base {} bytes, tail {} bytes, history {} bytes; merge lag {} tail records; {} merges folded {} records, {} ranges reclaimed since open",
            l.rows, l.base_bytes, l.tail_bytes, l.history_bytes, l.merge_lag, l.merges, l.merged_records, l.reclaimed_ranges
        );
        return;
    }
    println!("table {} (write amplification {:.2} since open)", t.name, t.write_amplification);
    println!("  layout: {}", t.layout);
    if !t.aligned_compaction {
        println!("  aligned compaction: off");
    }
    if t.relayout_files > 0 {
        println!("  {} files wait to be rewritten in the new layout (re-layout)", t.relayout_files);
    }
    if t.deferred_files > 0 {
        println!("  {} Level-0 files wait for a staging compaction (deferred marking)", t.deferred_files);
    }
    println!(
        "  {:<6} {:>6} {:>12} {:>10} {:>14} {:>14} {:>17}  groups",
        "level", "files", "bytes", "entries", "bytes written", "bytes read", "seq range"
    );
    for l in &t.levels {
        let groups = if l.groups.len() == 1 { "row".to_owned() } else { format!("{} groups", l.groups.len()) };
        println!(
            "  L{:<5} {:>6} {:>12} {:>10} {:>14} {:>14} {:>17}  {groups}",
            l.level,
            l.files,
            l.bytes,
            l.entries,
            l.bytes_written,
            l.bytes_read,
            seq_text(l.seq_range)
        );
        if l.groups.len() > 1 && l.files > 0 {
            for g in &l.groups {
                println!(
                    "    group ({}): {} files, {} bytes, {} entries, seq {}",
                    g.columns.join(","),
                    g.files,
                    g.bytes,
                    g.entries,
                    seq_text(g.seq_range)
                );
            }
        }
    }
    if tiers.len() > 1 {
        // Levels × tiers: where each level's bytes are.
        let names: Vec<String> = tiers.iter().map(|t| format!("{:>12}", t.name)).collect();
        println!("  {:<6} {}  (bytes per tier)", "level", names.join(" "));
        for l in t.levels.iter().filter(|l| l.files > 0) {
            let cells: Vec<String> = l.tier_bytes.iter().map(|b| format!("{b:>12}")).collect();
            println!("  L{:<5} {}", l.level, cells.join(" "));
        }
    }
    let rows: Vec<(String, &WorkloadStats)> = std::iter::once(("memtable".to_owned(), &t.memtable_workload))
        .chain(t.levels.iter().map(|l| (format!("L{}", l.level), &l.workload)))
        .filter(|(_, w)| w.point_reads + w.scans + w.updates > 0)
        .collect();
    if !rows.is_empty() {
        println!("  workload since open (per column: point reads/scans/updates):");
    }
    for (at, w) in rows {
        let cols: Vec<String> =
            w.columns.iter().map(|c| format!("{}:{}/{}/{}", c.column, c.point_reads, c.scans, c.updates)).collect();
        println!(
            "    {at:<8} {} point reads, {} scans, {} updates; {}",
            w.point_reads,
            w.scans,
            w.updates,
            cols.join(" ")
        );
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints an advice: the layouts, then per level the groups and the predicted cost per
/// operation class (milliseconds), then the totals and the prices used.
fn print_advice(a: &strata::Advice) {
    println!("table {}", a.table);
    println!("current layout: {}", a.current);
    println!("advised layout: {}", a.advised);
    println!(
        "{:<6} {:<28} {:<28} {:>34} {:>34}",
        "level", "current groups", "advised groups", "current ms (ins/get/scan/upd)", "advised ms (ins/get/scan/upd)"
    );
    let ms = |c: &strata::advisor::model::Cost| {
        format!("{:.1}/{:.1}/{:.1}/{:.1}", c.inserts / 1e3, c.point_reads / 1e3, c.scans / 1e3, c.updates / 1e3)
    };
    for l in &a.levels {
        println!(
            "L{:<5} {:<28} {:<28} {:>34} {:>34}",
            l.level,
            l.current,
            l.advised,
            ms(&l.current_cost),
            ms(&l.advised_cost)
        );
    }
    let (cur, adv) = (a.current_cost(), a.advised_cost());
    println!("predicted total: current {:.1} ms, advised {:.1} ms", cur.total() / 1e3, adv.total() / 1e3);
    let c = &a.calibration;
    println!(
        "prices per {:.0}-byte block: point read {:.2} us, scan {:.2} us, write {:.2} us",
        c.block_bytes, c.point_block_us, c.scan_block_us, c.write_block_us
    );
}

fn advice_json(a: &strata::Advice) -> Json {
    let cost = |c: &strata::advisor::model::Cost| json!({"inserts_us": c.inserts, "point_reads_us": c.point_reads, "scans_us": c.scans, "updates_us": c.updates});
    let levels: Vec<Json> = a
        .levels
        .iter()
        .map(|l| {
            json!({"level": l.level, "current": l.current, "advised": l.advised,
                "current_cost": cost(&l.current_cost), "advised_cost": cost(&l.advised_cost)})
        })
        .collect();
    let c = &a.calibration;
    let prices = json!({"point_block_us": c.point_block_us, "scan_block_us": c.scan_block_us,
        "write_block_us": c.write_block_us, "block_bytes": c.block_bytes});
    json!({"table": a.table, "current": a.current, "advised": a.advised, "levels": levels, "calibration": prices,
        "current_cost": cost(&a.current_cost()), "advised_cost": cost(&a.advised_cost())})
}

/// Waits for the background re-layout of table `name` to `layout` (already set) to finish,
/// printing progress.
fn relayout(db: &Db, name: &str, layout: &str) -> Result<(), CliError> {
    let left = |db: &Db| db.stats().tables.iter().find(|t| t.name == name).map_or(0, |t| t.relayout_files);
    let total = left(db);
    println!("layout of {name} set to {layout}; rewriting {total} files written before");
    let bar = indicatif::ProgressBar::new(total as u64);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                bar.set_position(total.saturating_sub(left(db)) as u64);
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        });
        let res = db.wait_for_compactions();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        res
    })?;
    bar.finish_and_clear();
    println!("re-layout done: {} files left in an earlier layout", left(db));
    Ok(())
}
