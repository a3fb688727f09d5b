//! Metamorphic test (after Pebble's): one random stream of operations is run against databases
//! opened with random options (block and memtable sizes, Level-0 triggers, size ratio, bloom
//! bits, cache size, layouts, row groups, aligned compaction, both engines, tiers with budgets,
//! deferred compaction, history retention) and against a model, and every outcome must be the
//! same. The operations cover every table API (insert, partial update, delete, atomic batches
//! across tables, gets, scans and Arrow scans, at the newest state and at snapshots),
//! snapshots, transactions, flushes, compactions, reopens and crashes (all writes are synced,
//! so a crash loses nothing acknowledged). After the stream the tree's invariants hold (checked
//! after every version install under debug assertions) and the supersede marks match a
//! recomputation.
//!
//! A mismatch prints the one-line command that repeats it and the operations shrunk to a short
//! list that still fails.
//!
//! - `STRATA_META_RUNS` (default 24) configurations per test run, `STRATA_META_OPS` (default
//!   400) operations per stream; `STRATA_SEEDS` gives the configuration seeds.
//! - `STRATA_META_SECS=3600` runs new configurations for that long instead (the README's long
//!   run).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata::scan::{batch_rows, AggFunc, Aggregate, BatchIter, ScanRequest};
use strata::vfs::FaultFs;
use strata::{
    ColumnType, Db, Engine, KeyRange, Options, Projection, ReadOptions, Schema, Snapshot, Table, TableOptions, Tier,
    Transaction, TxnOptions, Value, WriteBatch, WriteOptions,
};

/// Keys per table: small, so keys are written again and again.
const DOMAIN: i64 = 60;

/// One operation of a stream. Operations naming a snapshot or transaction that does not exist
/// (any sublist of a stream is a valid stream, for shrinking) answer `none`.
#[derive(Debug, Clone)]
enum Op {
    Insert(usize, Vec<Value>),
    Update(usize, Vec<Value>, Vec<(String, Value)>),
    Delete(usize, Vec<Value>),
    /// Writes across tables, atomically (each an `Insert`, `Update` or `Delete`).
    Batch(Vec<Op>),
    /// A point read, at the newest state or at snapshot `n`.
    Get(usize, Vec<Value>, Option<usize>),
    /// Every row, through the row iterator.
    Scan(usize, Option<usize>),
    /// Every row, through the Arrow scan.
    ScanBatches(usize, Option<usize>),
    /// Aggregates over the table's first integer value column ([`aggregates`]), which scans
    /// answer from the files' supersede marks and zone maps.
    Aggregate(usize, Option<usize>),
    Snapshot,
    Release(usize),
    Begin,
    TxnInsert(usize, Vec<Value>),
    TxnGet(usize, Vec<Value>),
    Commit,
    Rollback,
    Flush,
    Compact(usize),
    Reopen,
    Crash,
}

/// A stream of `n` operations over the tables of `schemas`.
fn stream(seed: u64, n: usize, schemas: &[(&str, Schema)]) -> Vec<Op> {
    let mut rng = StdRng::seed_from_u64(seed);
    let key = |rng: &mut StdRng, t: usize| -> Vec<Value> {
        let s = &schemas[t].1;
        s.primary_key().iter().map(|&c| random_key_value(rng, &s.columns()[c], DOMAIN)).collect()
    };
    let row = |rng: &mut StdRng, t: usize| -> Vec<Value> {
        let s = &schemas[t].1;
        let k = key(rng, t);
        let mut ki = 0;
        (0..s.columns().len())
            .map(|c| {
                if s.primary_key().contains(&c) {
                    ki += 1;
                    k[ki - 1].clone()
                } else {
                    random_value(rng, &s.columns()[c])
                }
            })
            .collect()
    };
    let set = |rng: &mut StdRng, t: usize| -> Vec<(String, Value)> {
        let s = &schemas[t].1;
        let vals = s.value_columns();
        let n = rng.gen_range(1..=vals.len().min(3));
        let mut cols: Vec<usize> = (0..n).map(|_| vals[rng.gen_range(0..vals.len())]).collect();
        cols.sort_unstable();
        cols.dedup();
        cols.into_iter().map(|c| (s.columns()[c].name.clone(), random_value(rng, &s.columns()[c]))).collect()
    };
    let write = |rng: &mut StdRng| -> Op {
        let t = rng.gen_range(0..schemas.len());
        match rng.gen_range(0..10) {
            0..=4 => Op::Insert(t, row(rng, t)),
            5..=7 => Op::Update(t, key(rng, t), set(rng, t)),
            _ => Op::Delete(t, key(rng, t)),
        }
    };
    let mut snapshots = 0;
    let mut ops = Vec::with_capacity(n);
    while ops.len() < n {
        let t = rng.gen_range(0..schemas.len());
        // Reads at a snapshot favour the newest one.
        let at = |rng: &mut StdRng| {
            (snapshots > 0 && rng.gen_ratio(2, 5)).then(|| {
                if rng.gen() {
                    snapshots - 1
                } else {
                    rng.gen_range(0..snapshots)
                }
            })
        };
        let op = match rng.gen_range(0..100) {
            0..=39 => write(&mut rng),
            40..=44 => Op::Batch((0..rng.gen_range(1..6)).map(|_| write(&mut rng)).collect()),
            45..=59 => Op::Get(t, key(&mut rng, t), at(&mut rng)),
            60..=62 => Op::Scan(t, at(&mut rng)),
            63..=65 => Op::ScanBatches(t, at(&mut rng)),
            66..=69 => Op::Aggregate(t, at(&mut rng)),
            70..=73 => {
                snapshots += 1;
                Op::Snapshot
            }
            74 if snapshots > 0 => Op::Release(rng.gen_range(0..snapshots)),
            75..=76 => Op::Begin,
            77..=80 => Op::TxnInsert(t, row(&mut rng, t)),
            81..=82 => Op::TxnGet(t, key(&mut rng, t)),
            83..=84 => Op::Commit,
            85 => Op::Rollback,
            86..=91 => Op::Flush,
            92..=95 => Op::Compact(t),
            96..=97 => Op::Reopen,
            98..=99 => Op::Crash,
            _ => continue,
        };
        ops.push(op);
    }
    ops
}

/// Options drawn from a seed: the database's and each table's.
#[derive(Debug, Clone)]
struct Config {
    seed: u64,
    memtable_size: usize,
    block_size: usize,
    l0_compaction_trigger: usize,
    level_size_ratio: u64,
    target_file_size: u64,
    bloom_bits_per_key: usize,
    block_cache_size: usize,
    compaction_threads: usize,
    deferred_compaction: bool,
    history: bool,
    /// A fast tier with this budget in front of a slow one.
    tier_budget: Option<u64>,
    lineage_range: usize,
    /// Per table: engine, layout (one of [`LAYOUTS`]), aligned compaction, row groups.
    tables: Vec<(Engine, &'static str, bool, bool)>,
}

impl Config {
    fn new(seed: u64, tables: usize) -> Config {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x6D65_7461);
        Config {
            seed,
            memtable_size: [4 << 10, 16 << 10, 64 << 10, 1 << 20][rng.gen_range(0..4)],
            block_size: [256, 512, 4096, 16 << 10][rng.gen_range(0..4)],
            l0_compaction_trigger: rng.gen_range(1..6),
            level_size_ratio: rng.gen_range(2..8),
            target_file_size: [4 << 10, 8 << 10, 64 << 10][rng.gen_range(0..3)],
            bloom_bits_per_key: [0, 1, 10, 20][rng.gen_range(0..4)],
            block_cache_size: [0, 64 << 10, 8 << 20][rng.gen_range(0..3)],
            compaction_threads: rng.gen_range(1..3),
            deferred_compaction: rng.gen(),
            history: rng.gen(),
            tier_budget: rng.gen_bool(0.3).then(|| [4 << 10, 16 << 10, 256 << 10][rng.gen_range(0..3)]),
            lineage_range: [64, 256][rng.gen_range(0..2)],
            tables: (0..tables)
                .map(|_| {
                    let engine = if rng.gen_ratio(1, 4) { Engine::Lineage } else { Engine::Lsm };
                    (engine, LAYOUTS[rng.gen_range(0..LAYOUTS.len())], rng.gen(), rng.gen_ratio(4, 5))
                })
                .collect(),
        }
    }

    fn options(&self, fs: Arc<FaultFs>) -> Options {
        let tiers = match self.tier_budget {
            Some(b) => vec![Tier::new("fast", "/meta-fast").with_budget(b), Tier::new("slow", "/meta-slow")],
            None => Vec::new(),
        };
        Options {
            memtable_size: self.memtable_size,
            block_size: self.block_size,
            l0_compaction_trigger: self.l0_compaction_trigger,
            l0_slowdown_trigger: self.l0_compaction_trigger + 4,
            l0_stop_trigger: self.l0_compaction_trigger + 8,
            level_size_ratio: self.level_size_ratio,
            l1_max_bytes: self.target_file_size * 3,
            target_file_size: self.target_file_size,
            bloom_bits_per_key: self.bloom_bits_per_key,
            block_cache_size: self.block_cache_size,
            compaction_threads: self.compaction_threads,
            deferred_compaction: self.deferred_compaction,
            history_retention: self.history.then(|| Duration::from_secs(3600)),
            lineage_range: self.lineage_range,
            lineage_merge_threshold: 8,
            lineage_checkpoint_bytes: 16 << 10,
            tiers,
            fs,
            ..Options::default()
        }
    }

    fn table_options(&self, t: usize, schema: &Schema) -> TableOptions {
        let (engine, layout, aligned, row_groups) = self.tables[t];
        if engine == Engine::Lineage {
            return TableOptions::engine(Engine::Lineage);
        }
        match layout_spec(layout, schema) {
            Some(spec) => TableOptions::with_layout(spec),
            None => TableOptions::default(),
        }
        .aligned(aligned)
        .with_row_groups(row_groups)
    }
}

/// The aggregates [`Op::Aggregate`] asks of a table: `count(*)`, then `count`, `min`, `max`
/// and `sum` of its first BIGINT or INT value column (whose position is returned too).
fn aggregates(schema: &Schema) -> (usize, Vec<Aggregate>) {
    let c = schema
        .value_columns()
        .iter()
        .copied()
        .find(|&c| matches!(schema.columns()[c].ty, ColumnType::BigInt | ColumnType::Int))
        .expect("an integer value column");
    let name = &schema.columns()[c].name;
    let mut aggs = vec![Aggregate { func: AggFunc::Count, column: None }];
    aggs.extend([AggFunc::Count, AggFunc::Min, AggFunc::Max, AggFunc::Sum].map(|f| Aggregate::new(f, name)));
    (c, aggs)
}

const SYNC: WriteOptions = WriteOptions { sync: true };

/// The rows of an Arrow scan's batches, as text.
fn batch_text(batches: BatchIter) -> strata::Result<String> {
    let mut rows = Vec::new();
    for b in batches {
        rows.extend(batch_rows(&b?));
    }
    Ok(format!("{rows:?}"))
}

fn show(r: strata::Result<String>) -> String {
    r.unwrap_or_else(|e| format!("error {}", e.kind()))
}

/// One run of a stream against a database with `config`'s options.
struct Subject<'a> {
    config: &'a Config,
    schemas: &'a [(&'static str, Schema)],
    fs: Arc<FaultFs>,
    db: Option<Db>,
    tables: Vec<Table>,
    snapshots: Vec<Option<Snapshot>>,
    txn: Option<Transaction>,
    /// Flushes and compactions of the database's earlier opens.
    work: Work,
}

/// What a run did, so a run that never flushed, compacted or found a row shows.
#[derive(Debug, Default, Clone, Copy)]
struct Work {
    flushes: u64,
    compactions: u64,
    /// Reads that found rows.
    found: u64,
}

impl Work {
    fn add(&mut self, o: Work) {
        self.flushes += o.flushes;
        self.compactions += o.compactions;
        self.found += o.found;
    }
}

impl<'a> Subject<'a> {
    fn new(config: &'a Config, schemas: &'a [(&'static str, Schema)]) -> Self {
        let fs = Arc::new(FaultFs::new());
        let db = Db::open("/meta", config.options(fs.clone())).expect("open");
        for (t, (name, schema)) in schemas.iter().enumerate() {
            db.create_table(name, schema.clone(), config.table_options(t, schema)).expect("create table");
        }
        let mut e = Subject {
            config,
            schemas,
            fs,
            db: None,
            tables: Vec::new(),
            snapshots: Vec::new(),
            txn: None,
            work: Work::default(),
        };
        e.attach(db);
        e
    }

    fn attach(&mut self, db: Db) {
        self.tables = self.schemas.iter().map(|(n, _)| db.table(n).expect("table")).collect();
        self.db = Some(db);
    }

    fn db(&self) -> &Db {
        self.db.as_ref().expect("open")
    }

    fn reopen(&mut self, crash: bool) {
        self.txn = None;
        for s in &mut self.snapshots {
            *s = None;
        }
        self.tables.clear();
        self.count_work();
        let db = self.db.take().expect("open");
        if crash {
            self.fs.crash(Some(self.config.seed));
            drop(db);
            self.fs.restart();
        } else {
            db.close().expect("close");
        }
        let db = Db::open("/meta", self.config.options(self.fs.clone())).expect("reopen");
        self.attach(db);
    }

    /// Adds the open database's flushes and compactions to [`Self::work`] (its statistics
    /// start again at every open).
    fn count_work(&mut self) {
        let st = self.db().stats();
        self.work.add(Work { flushes: st.flushes, compactions: st.compactions, found: 0 });
    }

    fn snapshot(&self, at: Option<usize>) -> Result<ReadOptions<'_>, String> {
        match at {
            None => Ok(ReadOptions::default()),
            Some(i) => match self.snapshots.get(i) {
                Some(Some(s)) => Ok(ReadOptions { snapshot: Some(s) }),
                _ => Err("none".into()),
            },
        }
    }

    fn write(&self, batch: &mut WriteBatch, op: &Op) -> strata::Result<()> {
        match op {
            Op::Insert(t, row) => batch.insert(&self.tables[*t], row),
            Op::Update(t, key, set) => {
                let set: Vec<(&str, Value)> = set.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
                batch.update(&self.tables[*t], key, &set)
            }
            Op::Delete(t, key) => batch.delete(&self.tables[*t], key),
            other => panic!("not a write: {other:?}"),
        }
    }

    fn apply(&mut self, op: &Op) -> String {
        match op {
            Op::Insert(..) | Op::Update(..) | Op::Delete(..) | Op::Batch(..) => {
                let mut batch = WriteBatch::new();
                let ops = match op {
                    Op::Batch(ops) => ops.as_slice(),
                    single => std::slice::from_ref(single),
                };
                let r = ops.iter().try_for_each(|o| self.write(&mut batch, o));
                show(r.and_then(|()| self.db().write(batch, &SYNC)).map(|()| "ok".into()))
            }
            Op::Get(t, key, at) => match self.snapshot(*at) {
                Ok(ro) => show(self.tables[*t].get(key, &Projection::All, &ro).map(|r| format!("{r:?}"))),
                Err(e) => e,
            },
            Op::Scan(t, at) => match self.snapshot(*at) {
                Ok(ro) => show(
                    self.tables[*t]
                        .scan(&KeyRange::all(), &Projection::All, &ro)
                        .and_then(|it| it.collect::<strata::Result<Vec<_>>>())
                        .map(|rows| format!("{rows:?}")),
                ),
                Err(e) => e,
            },
            Op::ScanBatches(t, at) => match self.snapshot(*at) {
                Ok(ro) => show(self.tables[*t].scan_batches(&ScanRequest::new(), &ro).and_then(batch_text)),
                Err(e) => e,
            },
            Op::Aggregate(t, at) => match self.snapshot(*at) {
                Ok(ro) => {
                    let (_, aggs) = aggregates(&self.schemas[*t].1);
                    let req = aggs.into_iter().fold(ScanRequest::new(), ScanRequest::with_aggregate);
                    show(self.tables[*t].scan_batches(&req, &ro).and_then(batch_text))
                }
                Err(e) => e,
            },
            Op::Snapshot => {
                let s = self.db().snapshot();
                self.snapshots.push(Some(s));
                "ok".into()
            }
            Op::Release(i) => match self.snapshots.get_mut(*i).and_then(Option::take) {
                Some(_) => "ok".into(),
                None => "none".into(),
            },
            Op::Begin => {
                self.txn = None;
                match self.db().begin(&TxnOptions::default()) {
                    Ok(txn) => {
                        self.txn = Some(txn);
                        "ok".into()
                    }
                    Err(e) => format!("error {}", e.kind()),
                }
            }
            Op::TxnInsert(t, row) => match self.txn.as_mut() {
                Some(txn) => show(txn.insert(&self.tables[*t], row).map(|()| "ok".into())),
                None => "none".into(),
            },
            Op::TxnGet(t, key) => match self.txn.as_ref() {
                Some(txn) => show(txn.get(&self.tables[*t], key, &Projection::All).map(|r| format!("{r:?}"))),
                None => "none".into(),
            },
            Op::Commit => match self.txn.take() {
                Some(txn) => show(txn.commit(&SYNC).map(|()| "ok".into())),
                None => "none".into(),
            },
            Op::Rollback => match self.txn.take() {
                Some(_) => "ok".into(),
                None => "none".into(),
            },
            // Maintenance answers nothing comparable (a lineage table compacts differently),
            // but must not fail.
            Op::Flush => {
                self.db().flush().expect("flush");
                String::new()
            }
            Op::Compact(t) => {
                self.db().compact_range(self.schemas[*t].0, &KeyRange::all()).expect("compact");
                String::new()
            }
            Op::Reopen => {
                self.reopen(false);
                String::new()
            }
            Op::Crash => {
                self.reopen(true);
                String::new()
            }
        }
    }

    /// The outcome of every operation, then every table's rows and the check of the marks.
    fn run(mut self, ops: &[Op]) -> (Vec<String>, Work) {
        let mut out: Vec<String> = ops.iter().map(|op| self.apply(op)).collect();
        self.txn = None;
        self.db().wait_for_compactions().expect("compactions");
        for t in 0..self.tables.len() {
            out.push(self.apply(&Op::Scan(t, None)));
        }
        out.push(show(self.db().check_supersede_marks().map(|()| "marks ok".into())));
        self.snapshots.clear();
        self.tables.clear();
        self.count_work();
        self.db.take().expect("open").close().expect("close");
        self.work.found = out.iter().filter(|o| o.starts_with("Some(") || o.starts_with("[[")).count() as u64;
        (out, self.work)
    }
}

/// An open transaction of the model: the tables at its start, its writes, when it began, and
/// whether it lost already (a write found its row written by another commit since it began:
/// that write, every later one and the commit fail).
struct Txn {
    base: Vec<TableModel>,
    writes: Vec<(usize, Vec<Value>)>,
    began: u64,
    lost: bool,
}

/// The model: the tables as maps, snapshots as copies, and what first-committer-wins needs.
struct Model<'a> {
    schemas: &'a [(&'static str, Schema)],
    tables: Vec<TableModel>,
    snapshots: Vec<Option<Vec<TableModel>>>,
    /// An open transaction.
    txn: Option<Txn>,
    /// For each key written, when it was last written (a counter of writes).
    written: HashMap<(usize, MKey), u64>,
    clock: u64,
}

impl<'a> Model<'a> {
    fn new(schemas: &'a [(&'static str, Schema)]) -> Self {
        Model {
            schemas,
            tables: vec![TableModel::default(); schemas.len()],
            snapshots: Vec::new(),
            txn: None,
            written: HashMap::new(),
            clock: 0,
        }
    }

    fn key_of(key: &[Value]) -> MKey {
        key.iter().map(part_of).collect()
    }

    fn touch(&mut self, t: usize, key: MKey) {
        self.clock += 1;
        self.written.insert((t, key), self.clock);
    }

    fn write(&mut self, op: &Op) {
        match op {
            Op::Insert(t, row) => {
                let s = &self.schemas[*t].1;
                self.touch(*t, TableModel::key_of(s, row));
                self.tables[*t].insert(s, row.clone());
            }
            Op::Update(t, key, set) => {
                let k = Self::key_of(key);
                self.touch(*t, k);
                self.tables[*t].update(&self.schemas[*t].1, key, set);
            }
            Op::Delete(t, key) => {
                let k = Self::key_of(key);
                self.touch(*t, k);
                self.tables[*t].delete(key);
            }
            other => panic!("not a write: {other:?}"),
        }
    }

    /// Whether row `k` of table `t` was written after the time given.
    fn changed_since(&self, t: usize, k: &MKey) -> impl Fn(u64) -> bool {
        let last = self.written.get(&(t, k.clone())).copied();
        move |since| last.is_some_and(|w| w > since)
    }

    fn tables_at(&self, at: Option<usize>) -> Option<&Vec<TableModel>> {
        match at {
            None => Some(&self.tables),
            Some(i) => self.snapshots.get(i).and_then(Option::as_ref),
        }
    }

    fn rows(tables: &[TableModel], t: usize) -> String {
        let rows: Vec<&Vec<Value>> = tables[t].rows.values().collect();
        format!("{rows:?}")
    }

    fn apply(&mut self, op: &Op) -> String {
        match op {
            Op::Insert(..) | Op::Update(..) | Op::Delete(..) => {
                self.write(op);
                "ok".into()
            }
            Op::Batch(ops) => {
                ops.iter().for_each(|o| self.write(o));
                "ok".into()
            }
            Op::Get(t, key, at) => match self.tables_at(*at) {
                Some(tables) => format!("{:?}", tables[*t].get(key)),
                None => "none".into(),
            },
            Op::Scan(t, at) | Op::ScanBatches(t, at) => match self.tables_at(*at) {
                Some(tables) => Self::rows(tables, *t),
                None => "none".into(),
            },
            Op::Aggregate(t, at) => match self.tables_at(*at) {
                Some(tables) => {
                    let (c, _) = aggregates(&self.schemas[*t].1);
                    let vals: Vec<&Value> =
                        tables[*t].rows.values().map(|r| &r[c]).filter(|v| **v != Value::Null).collect();
                    let int = |v: &Value| match v {
                        Value::BigInt(x) => *x,
                        Value::Int(x) => i64::from(*x),
                        other => panic!("not an integer: {other:?}"),
                    };
                    let min = vals.iter().min_by_key(|v| int(v)).map_or(Value::Null, |v| (*v).clone());
                    let max = vals.iter().max_by_key(|v| int(v)).map_or(Value::Null, |v| (*v).clone());
                    let sum =
                        if vals.is_empty() { Value::Null } else { Value::BigInt(vals.iter().map(|v| int(v)).sum()) };
                    let n = tables[*t].rows.len() as i64;
                    format!("{:?}", vec![vec![Value::BigInt(n), Value::BigInt(vals.len() as i64), min, max, sum]])
                }
                None => "none".into(),
            },
            Op::Snapshot => {
                self.snapshots.push(Some(self.tables.clone()));
                "ok".into()
            }
            Op::Release(i) => match self.snapshots.get_mut(*i).and_then(Option::take) {
                Some(_) => "ok".into(),
                None => "none".into(),
            },
            Op::Begin => {
                self.txn = Some(Txn { base: self.tables.clone(), writes: Vec::new(), began: self.clock, lost: false });
                "ok".into()
            }
            Op::TxnInsert(t, row) => {
                let k = TableModel::key_of(&self.schemas[*t].1, row);
                let changed = self.changed_since(*t, &k);
                match self.txn.as_mut() {
                    Some(txn) => {
                        txn.lost |= changed(txn.began);
                        if txn.lost {
                            return "error conflict".into();
                        }
                        txn.writes.push((*t, row.clone()));
                        "ok".into()
                    }
                    None => "none".into(),
                }
            }
            Op::TxnGet(t, key) => match &self.txn {
                Some(txn) => {
                    let s = &self.schemas[*t].1;
                    let k = Self::key_of(key);
                    let own = txn.writes.iter().rev().find(|(wt, row)| wt == t && TableModel::key_of(s, row) == k);
                    match own {
                        Some((_, row)) => format!("{:?}", Some(row)),
                        None => format!("{:?}", txn.base[*t].get(key)),
                    }
                }
                None => "none".into(),
            },
            Op::Commit => match self.txn.take() {
                Some(txn) => {
                    let conflict = txn.lost
                        || txn.writes.iter().any(|(t, row)| {
                            self.changed_since(*t, &TableModel::key_of(&self.schemas[*t].1, row))(txn.began)
                        });
                    if conflict {
                        return "error conflict".into();
                    }
                    for (t, row) in txn.writes {
                        self.write(&Op::Insert(t, row));
                    }
                    "ok".into()
                }
                None => "none".into(),
            },
            Op::Rollback => match self.txn.take() {
                Some(_) => "ok".into(),
                None => "none".into(),
            },
            Op::Flush | Op::Compact(_) => String::new(),
            Op::Reopen | Op::Crash => {
                self.txn = None;
                for s in &mut self.snapshots {
                    *s = None;
                }
                String::new()
            }
        }
    }

    fn run(mut self, ops: &[Op]) -> Vec<String> {
        let mut out: Vec<String> = ops.iter().map(|op| self.apply(op)).collect();
        for t in 0..self.tables.len() {
            out.push(Self::rows(&self.tables, t));
        }
        out.push("marks ok".into());
        out
    }
}

/// Where a configuration's outcomes first differ from the model's: position, expected, got. A
/// panic inside the run counts as a difference at the end.
type Difference = (usize, String, String);

/// Runs `ops` under `config` and the model: what the run did, or where it first differed.
fn compare(config: &Config, schemas: &[(&'static str, Schema)], ops: &[Op]) -> Result<Work, Difference> {
    let want = Model::new(schemas).run(ops);
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Subject::new(config, schemas).run(ops)));
    let (got, work) = match got {
        Ok(got) => got,
        Err(p) => {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            return Err((ops.len(), "no panic".into(), format!("panic: {}", msg.unwrap_or_default())));
        }
    };
    match want.into_iter().zip(got).enumerate().find(|(_, (w, g))| w != g) {
        Some((i, (w, g))) => Err((i, w, g)),
        None => Ok(work),
    }
}

fn first_difference(config: &Config, schemas: &[(&'static str, Schema)], ops: &[Op]) -> Option<Difference> {
    compare(config, schemas, ops).err()
}

/// The shortest sublist of `ops` found that still differs: chunks removed while the difference
/// stays, halving the chunk down to single operations (then once more at single operations).
fn shrink(config: &Config, schemas: &[(&'static str, Schema)], original: &[Op]) -> Vec<Op> {
    let mut ops = original.to_vec();
    let fails = |ops: &[Op]| first_difference(config, schemas, ops).is_some();
    // Operations past the first difference do not matter.
    if let Some((i, _, _)) = first_difference(config, schemas, &ops) {
        let before = ops.len();
        ops.truncate((i + 1).min(before));
        if ops.len() < before && !fails(&ops) {
            ops = original.to_vec();
        }
    }
    let mut chunk = ops.len().div_ceil(2).max(1);
    loop {
        let mut i = 0;
        let mut removed = false;
        while i < ops.len() {
            let mut fewer = ops.clone();
            fewer.drain(i..(i + chunk).min(ops.len()));
            if fails(&fewer) {
                ops = fewer;
                removed = true;
            } else {
                i += chunk;
            }
        }
        if chunk == 1 && !removed {
            return ops;
        }
        chunk = (chunk / 2).max(1);
    }
}

/// Runs one configuration over one stream; on a difference, panics with the replay command
/// and the shrunk operations.
fn check(config_seed: u64, ops_seed: u64, n: usize) -> Work {
    let schemas = schemas();
    let config = Config::new(config_seed, schemas.len());
    let ops = stream(ops_seed, n, &schemas);
    let difference = match compare(&config, &schemas, &ops) {
        Ok(work) => return work,
        Err(d) => d,
    };
    {
        let (i, want, got) = difference;
        let short = shrink(&config, &schemas, &ops);
        let (j, want_short, got_short) = first_difference(&config, &schemas, &short).unwrap_or_default();
        panic!(
            "metamorphic mismatch at outcome {i} of {n} operations: expected {want}, got {got}\n\
             replay: STRATA_SEEDS={config_seed} STRATA_META_OPS={n} cargo test -p strata --test it metamorphic::\n\
             config: {config:?}\n\
             shrunk to {} operations (outcome {j}: expected {want_short}, got {got_short}):\n{short:#?}",
            short.len()
        );
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Random configurations, each running its own stream (the same stream for every run of the
/// same seed): `STRATA_META_RUNS` of them, or as many as `STRATA_META_SECS` allows.
#[test]
fn random_options_agree_with_the_model() {
    let n = env("STRATA_META_OPS", 400) as usize;
    let secs = env("STRATA_META_SECS", 0);
    let runs = env("STRATA_META_RUNS", 24);
    let fresh = || std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), 0u8);
    let mut seeds = seeds(&(0..runs).map(|_| fresh()).collect::<Vec<_>>());
    let start = Instant::now();
    let mut done = 0;
    let mut work = Work::default();
    while let Some(seed) = seeds.pop() {
        println!("configuration {seed} (replay: STRATA_SEEDS={seed} STRATA_META_OPS={n})");
        work.add(check(seed, seed.rotate_left(17), n));
        done += 1;
        if secs > 0 && start.elapsed() < Duration::from_secs(secs) && seeds.is_empty() {
            seeds.push(fresh());
        }
    }
    println!("{done} configurations agreed with the model in {:?}: {work:?}", start.elapsed());
    assert!(work.flushes > 0 && work.compactions > 0 && work.found > 0, "the runs did too little: {work:?}");
}

/// The same stream run under several configurations: every one agrees with the model, so with
/// each other (a stream long enough to flush, compact, reopen and crash many times over).
#[test]
fn one_stream_across_configurations() {
    let schemas = schemas();
    let seed = seeds(&[std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), 1u8)])[0];
    println!("stream {seed} (replay: STRATA_SEEDS={seed})");
    let ops = stream(seed, 300, &schemas);
    let want = Model::new(&schemas).run(&ops);
    let mut seen = BTreeMap::new();
    for c in 0..4u64 {
        let config = Config::new(seed.wrapping_add(c), schemas.len());
        let (got, _) = Subject::new(&config, &schemas).run(&ops);
        if let Some(i) = want.iter().zip(&got).position(|(w, g)| w != g) {
            panic!(
                "stream {seed}, configuration {}: outcome {i} expected {} got {}\nconfig: {config:?}",
                config.seed, want[i], got[i]
            );
        }
        seen.insert(config.seed, got.len());
    }
    assert_eq!(seen.len(), 4);
}

/// A bug planted in the engine (reads take a supersede mark to apply from one sequence number
/// before its own: `STRATA_PLANTED_BUG=mark-early`, honoured by builds with debug assertions)
/// is caught by some of a few configurations and shrunk to at most 20 operations. The bug runs
/// in a child process (this test alone, in this test binary), so no other test meets it. A build
/// without debug assertions ignores the variable: there the same search must find nothing.
#[test]
fn a_planted_bug_is_caught_and_shrunk() {
    if std::env::var_os("STRATA_PLANTED_BUG").is_some() {
        planted_bug_search();
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args(["--exact", "metamorphic::a_planted_bug_is_caught_and_shrunk", "--nocapture", "--test-threads=1"])
        .env("STRATA_PLANTED_BUG", "mark-early")
        .output()
        .expect("run the test binary");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    println!("{text}");
    assert!(out.status.success(), "the child run failed:\n{text}");
    assert!(text.contains(if PLANTED { "caught the planted bug" } else { "no planted bug" }), "{text}");
}

/// Whether this build honours `STRATA_PLANTED_BUG` (debug assertions on).
const PLANTED: bool = cfg!(debug_assertions);

/// The child's side of [`a_planted_bug_is_caught_and_shrunk`].
fn planted_bug_search() {
    let schemas = schemas();
    for seed in 1..=40u64 {
        let config = Config::new(seed, schemas.len());
        let ops = stream(seed.rotate_left(17), 300, &schemas);
        if let Some((i, want, got)) = first_difference(&config, &schemas, &ops) {
            if !PLANTED {
                panic!("a build without debug assertions differs: outcome {i}: {want} vs {got}");
            }
            let short = shrink(&config, &schemas, &ops);
            println!("configuration {seed}: outcome {i} differs; shrunk to {} operations:\n{short:#?}", short.len());
            assert!(short.len() <= 20, "shrunk to {} operations, more than 20", short.len());
            assert!(first_difference(&config, &schemas, &short).is_some(), "the shrunk list no longer fails");
            println!("caught the planted bug");
            return;
        }
    }
    if PLANTED {
        panic!("40 configurations missed the planted bug");
    }
    println!("no planted bug in a build without debug assertions: every configuration agreed");
}
