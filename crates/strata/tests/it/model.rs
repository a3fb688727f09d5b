//! Randomized differential test: every operation is applied to strata and to a BTreeMap model,
//! and every read is compared. Covers inserts, partial updates, deletes, atomic batches across
//! tables, gets, batched gets and range scans with projections, snapshots taken and released, flushes,
//! compactions, ingests and close/reopen, on the in-memory and the real filesystem. A second test runs
//! with aligned compaction off and on, holding a long-lived snapshot through thousands of
//! operations (many flushes and compactions) and reading at it.
//!
//! `STRATA_SEEDS=..` picks seeds, `STRATA_MODEL_OPS=N` the operations per seed.

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::common::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use strata::vfs::{FaultFs, Fs, OsFs};
use strata::{
    AsOf, Db, Engine, KeyRange, Options, Projection, ReadOptions, Schema, Snapshot, Table, TableOptions, Tier, Value,
    WriteBatch, WriteOptions,
};

/// A model mutation recorded while a batch is built, applied once the batch commits.
type Pending = Box<dyn FnOnce(&mut Vec<TableModel>, &[(Table, Schema)])>;

struct World {
    rng: StdRng,
    db: Option<Db>,
    tables: Vec<(Table, Schema)>,
    model: Vec<TableModel>,
    snaps: Vec<(Snapshot, Vec<TableModel>)>,
    dir: std::path::PathBuf,
    fs: Arc<dyn Fs>,
    deepest_level: usize,
    op: usize,
    /// Keep `snaps[0]` alive for this many operations at least (0: no long-lived snapshot).
    long_snapshot_ops: usize,
    /// Operation at which `snaps[0]` became the long-lived snapshot, if it is one.
    long_since: Option<usize>,
    /// Files the snapshot filter passed over in earlier opens (statistics restart on open).
    skipped_before: u64,
    /// Staging compactions in the database's earlier opens.
    staged_before: u64,
    /// With a history retention window: past points (sequence number, time, model then) that
    /// reads as of a sequence number or a time may name, across reopens.
    past: Option<Vec<(u64, SystemTime, Vec<TableModel>)>>,
    /// Lineage ranges rebuilt without their history in earlier opens.
    reclaimed_before: u64,
    /// Reads as of a past point made after a reopen.
    past_reads_after_reopen: usize,
    reopened: bool,
    /// The storage tiers every open gives (none: the database directory alone).
    tiers: Vec<Tier>,
    /// Change the layout of the LSM tables now and then (see [`Mode::relayout`]); how many
    /// changes were made.
    relayout: Option<usize>,
}

/// Where a read reads.
#[derive(Debug, Clone, Copy)]
enum ReadAt {
    Latest,
    /// A live snapshot, by index.
    Snapshot(usize),
    /// A past point, by index, as of its sequence number or its time.
    Past(usize, bool),
}

const DOMAIN: i64 = 300;

impl World {
    fn open(&mut self) {
        let retention = self.past.as_ref().map(|_| Duration::from_secs(3600));
        // The tiers are remembered; they are given again for the slow tier's device profile.
        let tiers = self.tiers.clone();
        let opts = Options { history_retention: retention, tiers, ..tiny_options(self.fs.clone()) };
        let db = Db::open(&self.dir, opts).unwrap();
        self.tables = schemas().into_iter().map(|(n, s)| (db.table(n).unwrap(), s)).collect();
        self.db = Some(db);
    }

    fn db(&self) -> &Db {
        self.db.as_ref().unwrap()
    }

    fn random_key(&mut self, t: usize) -> Vec<Value> {
        let schema = &self.tables[t].1;
        let cols: Vec<_> = schema.primary_key().iter().map(|&c| schema.columns()[c].clone()).collect();
        cols.iter().map(|c| random_key_value(&mut self.rng, c, DOMAIN)).collect()
    }

    fn random_row(&mut self, t: usize) -> Vec<Value> {
        let key = self.random_key(t);
        let schema = self.tables[t].1.clone();
        let mut row: Vec<Value> = schema.columns().iter().map(|c| random_value(&mut self.rng, c)).collect();
        for (&c, v) in schema.primary_key().iter().zip(key) {
            row[c] = v;
        }
        row
    }

    fn random_set(&mut self, t: usize) -> Vec<(String, Value)> {
        let schema = self.tables[t].1.clone();
        let mut cols: Vec<usize> = schema.value_columns().to_vec();
        cols.shuffle(&mut self.rng);
        let n = self.rng.gen_range(1..=cols.len());
        cols[..n]
            .iter()
            .map(|&c| (schema.columns()[c].name.clone(), random_value(&mut self.rng, &schema.columns()[c])))
            .collect()
    }

    fn random_projection(&mut self, t: usize) -> (Projection, Vec<usize>) {
        let schema = self.tables[t].1.clone();
        let n = schema.columns().len();
        if self.rng.gen_ratio(1, 4) {
            return (Projection::All, (0..n).collect());
        }
        let mut cols: Vec<usize> = (0..n).collect();
        cols.shuffle(&mut self.rng);
        cols.truncate(self.rng.gen_range(1..=n));
        let names: Vec<&str> = cols.iter().map(|&c| schema.columns()[c].name.as_str()).collect();
        (self.tables[t].0.projection(&names).unwrap(), cols)
    }

    fn ctx(&self) -> String {
        format!("op {}", self.op)
    }

    fn step(&mut self) {
        if self.long_snapshot_ops > 0 && self.long_since.is_none() {
            let s = self.db().snapshot();
            self.snaps.insert(0, (s, self.model.clone()));
            self.long_since = Some(self.op);
        }
        let t = self.rng.gen_range(0..self.tables.len());
        let dice = self.rng.gen_range(0..1000);
        match dice {
            0..=299 => {
                let row = self.random_row(t);
                self.tables[t].0.insert(&row).unwrap();
                self.model[t].insert(&self.tables[t].1, row);
            }
            300..=449 => {
                let key = self.random_key(t);
                let set = self.random_set(t);
                let pairs: Vec<(&str, Value)> = set.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
                self.tables[t].0.update(&key, &pairs).unwrap();
                self.model[t].update(&self.tables[t].1, &key, &set);
            }
            450..=529 => {
                let key = self.random_key(t);
                self.tables[t].0.delete(&key).unwrap();
                self.model[t].delete(&key);
            }
            530..=579 => self.batch(),
            580..=779 => self.check_get(t),
            780..=839 => self.check_scan(t),
            840..=869 => {
                if self.snaps.len() < 4 + usize::from(self.long_since.is_some()) {
                    let s = self.db().snapshot();
                    self.snaps.push((s, self.model.clone()));
                }
                let point = self.past.is_some().then(|| (self.db().history().newest_seq, SystemTime::now()));
                if let (Some((seq, time)), Some(past)) = (point, self.past.as_mut()) {
                    if past.len() == 32 {
                        past.remove(self.rng.gen_range(0..32));
                    }
                    past.push((seq, time, self.model.clone()));
                    // The next write lands in a later millisecond, so the time names this point.
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            870..=899 => {
                // The long-lived snapshot, first, is not released here.
                let first = usize::from(self.long_since.is_some());
                if self.snaps.len() > first {
                    let i = self.rng.gen_range(first..self.snaps.len());
                    self.snaps.remove(i);
                }
            }
            900..=909 => self.db().flush().unwrap(),
            910..=914 => {
                let name = self.tables[t].0.name().to_owned();
                let range = if self.rng.gen() {
                    KeyRange::all()
                } else {
                    KeyRange { start: Bound::Included(self.random_key(t)), end: Bound::Unbounded }
                };
                self.db().compact_range(&name, &range).unwrap();
            }
            917..=919 if self.relayout.is_some() => self.relayout(t),
            920..=924 => self.ingest(t),
            915..=916 => {
                // A reopen ends every snapshot: the long-lived one must have lived long enough.
                if self.long_since.is_none_or(|since| self.op - since >= self.long_snapshot_ops) {
                    self.reopen();
                }
            }
            _ => self.check_get(t),
        }
        if self.op.is_multiple_of(1000) {
            self.db().check_supersede_marks().unwrap_or_else(|e| panic!("{}: supersede marks: {e}", self.ctx()));
        }
        if self.op.is_multiple_of(500) {
            let st = self.db().stats();
            for ts in &st.tables {
                for l in &ts.levels {
                    if l.files > 0 {
                        self.deepest_level = self.deepest_level.max(l.level);
                    }
                }
            }
        }
    }

    /// Ingests a few random rows into table `t` (some with repeated keys: the last one counts),
    /// often in a narrow key range so the deepest free level varies.
    fn ingest(&mut self, t: usize) {
        let n = self.rng.gen_range(1..40);
        let mut rows: Vec<Vec<Value>> = (0..n).map(|_| self.random_row(t)).collect();
        if self.rng.gen() {
            // A narrow range: keys near the first row's (the same text, BIGINTs a few apart).
            let pk = self.tables[t].1.primary_key().to_vec();
            let first = rows[0].clone();
            for r in rows.iter_mut().skip(1) {
                for &c in &pk {
                    r[c] = match &first[c] {
                        Value::BigInt(k) => Value::BigInt(k + 7 * self.rng.gen_range(0..6)),
                        Value::Text(k) => Value::Text(k.clone()),
                        other => other.clone(),
                    };
                }
                if let Some(&last) = pk.last() {
                    if matches!(r[last], Value::Int(_)) {
                        r[last] = Value::Int(self.rng.gen_range(0..4));
                    }
                }
            }
        }
        let table = &self.tables[t].0;
        match table.ingest(&rows) {
            Ok(st) => {
                let distinct: std::collections::BTreeSet<MKey> =
                    rows.iter().map(|r| TableModel::key_of(&self.tables[t].1, r)).collect();
                assert_eq!(st.rows, distinct.len() as u64, "{}: ingest {st:?}", self.ctx());
                for row in rows {
                    self.model[t].insert(&self.tables[t].1, row);
                }
            }
            // A staging compaction (two tiers) may rewrite Level-0 files in the range while the
            // ingest builds: it is refused whole, and the model stays as it was.
            Err(e) if e.kind() == "ingest_conflict" && !self.tiers.is_empty() => {}
            Err(e) => {
                assert_eq!(table.info().options.engine, Engine::Lineage, "{}: ingest: {e}", self.ctx());
                assert_eq!(e.kind(), "invalid_argument", "{}: {e}", self.ctx());
            }
        }
    }

    /// Changes table `t`'s layout to the next of row, cg3, column, lifecycle (after its
    /// current one), while the files of the last change may still be being rewritten.
    fn relayout(&mut self, t: usize) {
        const CYCLE: [&str; 4] = ["row", "cg3", "column", "lifecycle"];
        let (table, schema) = &self.tables[t];
        if table.info().options.engine != Engine::Lsm {
            return;
        }
        let n = self.relayout.unwrap_or(0);
        let spec = layout_spec(CYCLE[n % CYCLE.len()], schema);
        let name = table.name().to_owned();
        self.db().set_layout(&name, spec.as_deref()).unwrap_or_else(|e| panic!("{}: set_layout: {e}", self.ctx()));
        self.relayout = Some(n + 1);
    }

    fn batch(&mut self) {
        let mut b = WriteBatch::new();
        let mut applied: Vec<Pending> = Vec::new();
        for _ in 0..self.rng.gen_range(1..6) {
            let t = self.rng.gen_range(0..self.tables.len());
            match self.rng.gen_range(0..3) {
                0 => {
                    let row = self.random_row(t);
                    b.insert(&self.tables[t].0, &row).unwrap();
                    applied.push(Box::new(move |m, ts| m[t].insert(&ts[t].1, row)));
                }
                1 => {
                    let key = self.random_key(t);
                    let set = self.random_set(t);
                    let pairs: Vec<(&str, Value)> = set.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
                    b.update(&self.tables[t].0, &key, &pairs).unwrap();
                    applied.push(Box::new(move |m, ts| m[t].update(&ts[t].1, &key, &set)));
                }
                _ => {
                    let key = self.random_key(t);
                    b.delete(&self.tables[t].0, &key).unwrap();
                    applied.push(Box::new(move |m, _| m[t].delete(&key)));
                }
            }
        }
        let sync = self.rng.gen_ratio(1, 10);
        self.db().write(b, &WriteOptions { sync }).unwrap();
        for f in applied {
            f(&mut self.model, &self.tables);
        }
    }

    /// Picks the latest state, a live snapshot or a past point; for a past point, also the
    /// snapshot as of it.
    fn read_point(&mut self) -> (ReadAt, Option<Snapshot>) {
        let past = self.past.as_ref().map_or(0, Vec::len);
        let at = match self.rng.gen_range(0..6) {
            0 | 1 if !self.snaps.is_empty() => ReadAt::Snapshot(self.rng.gen_range(0..self.snaps.len())),
            2 if past > 0 => ReadAt::Past(self.rng.gen_range(0..past), self.rng.gen()),
            _ => ReadAt::Latest,
        };
        let snap = match at {
            ReadAt::Past(i, by_time) => {
                let (seq, time, _) = self.past.as_ref().unwrap()[i];
                let as_of = if by_time { AsOf::Time(time) } else { AsOf::Seq(seq) };
                self.past_reads_after_reopen += usize::from(self.reopened);
                Some(self.db().snapshot_as_of(as_of).unwrap_or_else(|e| panic!("{}: {as_of:?}: {e}", self.ctx())))
            }
            _ => None,
        };
        (at, snap)
    }

    /// The snapshot and the model a read at `at` compares against.
    fn model_at<'a>(&'a self, at: ReadAt, past: &'a Option<Snapshot>) -> (Option<&'a Snapshot>, &'a [TableModel]) {
        match at {
            ReadAt::Latest => (None, &self.model),
            ReadAt::Snapshot(i) => (Some(&self.snaps[i].0), &self.snaps[i].1),
            ReadAt::Past(i, _) => (past.as_ref(), &self.past.as_ref().unwrap()[i].2),
        }
    }

    fn check_get(&mut self, t: usize) {
        if self.rng.gen_ratio(1, 5) {
            return self.check_multi_get(t);
        }
        let key = self.random_key(t);
        let (proj, cols) = self.random_projection(t);
        let (at, past) = self.read_point();
        let (snapshot, model) = self.model_at(at, &past);
        let got = self.tables[t].0.get(&key, &proj, &ReadOptions { snapshot }).unwrap();
        let want = model[t].get(&key).map(|r| project(r, &cols));
        assert_eq!(got, want, "{}: get {key:?} at {at:?} {:?}", self.ctx(), snapshot.map(Snapshot::seq));
    }

    /// A batch of keys (repeats possible; past [`strata::MULTI_GET_PARALLEL`] read in parallel)
    /// read by `multi_get` at one read point.
    fn check_multi_get(&mut self, t: usize) {
        let n = self.rng.gen_range(1..2 * strata::MULTI_GET_PARALLEL);
        let keys: Vec<Vec<Value>> = (0..n).map(|_| self.random_key(t)).collect();
        let (proj, cols) = self.random_projection(t);
        let (at, past) = self.read_point();
        let (snapshot, model) = self.model_at(at, &past);
        let got = self.tables[t].0.multi_get(&keys, &proj, &ReadOptions { snapshot }).unwrap();
        let want: Vec<Option<Vec<Value>>> = keys.iter().map(|k| model[t].get(k).map(|r| project(r, &cols))).collect();
        assert_eq!(got, want, "{}: multi_get {keys:?} at {at:?}", self.ctx());
    }

    fn check_scan(&mut self, t: usize) {
        let (proj, cols) = self.random_projection(t);
        let mut a = self.random_key(t);
        let mut b = self.random_key(t);
        let ma: MKey = a.iter().map(part_of).collect();
        let mb: MKey = b.iter().map(part_of).collect();
        if ma > mb {
            std::mem::swap(&mut a, &mut b);
        }
        let (ma, mb): (MKey, MKey) = (a.iter().map(part_of).collect(), b.iter().map(part_of).collect());
        let (range, lo, hi) = match self.rng.gen_range(0..4) {
            0 => (KeyRange::all(), Bound::Unbounded, Bound::Unbounded),
            1 => (KeyRange::half_open(a, b), Bound::Included(ma), Bound::Excluded(mb)),
            2 => (
                KeyRange { start: Bound::Excluded(a), end: Bound::Included(b) },
                Bound::Excluded(ma),
                Bound::Included(mb),
            ),
            _ => (KeyRange { start: Bound::Included(a), end: Bound::Unbounded }, Bound::Included(ma), Bound::Unbounded),
        };
        let (at, past) = self.read_point();
        let (snapshot, model) = self.model_at(at, &past);
        let got: Vec<Vec<Value>> =
            self.tables[t].0.scan(&range, &proj, &ReadOptions { snapshot }).unwrap().map(Result::unwrap).collect();
        let want: Vec<Vec<Value>> = model[t].rows.range::<MKey, _>((lo, hi)).map(|(_, r)| project(r, &cols)).collect();
        assert_eq!(got.len(), want.len(), "{}: scan {range:?} at {at:?} row count", self.ctx());
        assert_eq!(got, want, "{}: scan {range:?} at {at:?}", self.ctx());
    }

    fn reclaimed_now(&self) -> u64 {
        self.db().stats().tables.iter().filter_map(|t| t.lineage.as_ref()).map(|l| l.reclaimed_ranges).sum()
    }

    fn reopen(&mut self) {
        self.snaps.clear();
        self.long_since = None;
        self.skipped_before += self.db().stats().files_skipped_by_snapshot;
        self.staged_before += self.db().stats().staging_compactions;
        self.reclaimed_before += self.reclaimed_now();
        self.tables.clear();
        self.db.take().unwrap().close().unwrap();
        self.open();
        self.reopened = true;
    }
}

/// How a run is set up beyond its seed and layout.
#[derive(Clone, Copy)]
struct Mode {
    aligned: bool,
    long_snapshot_ops: usize,
    /// Open with a history retention window and read as of past points.
    history: bool,
    /// Keep the SSTs on two tiers, the first with a small budget (given on the first open
    /// only: later opens find them in the manifest).
    tiers: bool,
    /// Change the LSM tables' layouts every few hundred operations (row, cg3, column,
    /// lifecycle in turn), so reads, snapshots, reopens and past reads meet trees whose
    /// files are half rewritten.
    relayout: bool,
}

fn run(seed: u64, ops: usize, layout: &str, mode: Mode) {
    // `<layout>+runs`: one run per group at every level (tables of builds before row-group
    // files), instead of row-group files.
    let (layout, row_groups) = match layout.strip_suffix("+runs") {
        Some(l) => (l, false),
        None => (layout, true),
    };
    let tmp = tempfile::tempdir().unwrap();
    let fs: Arc<dyn Fs> = if seed.is_multiple_of(2) { Arc::new(FaultFs::new()) } else { Arc::new(OsFs) };
    let dir = if seed.is_multiple_of(2) { std::path::PathBuf::from("/model") } else { tmp.path().join("db") };
    let tier_dirs = [dir.with_file_name("fast"), dir.with_file_name("slow")];
    let tiers = match mode.tiers {
        true => vec![
            Tier::new("fast", &tier_dirs[0]).with_budget(24 << 10),
            Tier::new("slow", &tier_dirs[1]).with_profile(slow_device()),
        ],
        false => Vec::new(),
    };
    let db = Db::open(&dir, Options { tiers: tiers.clone(), ..tiny_options(fs.clone()) }).unwrap();
    let mut lsm_tables = 0;
    for (i, (name, schema)) in schemas().into_iter().enumerate() {
        // `lineage`: every table on the lineage engine; `mixed`: the first one, the other in
        // column groups of three.
        let options = match layout {
            "lineage" => TableOptions::engine(Engine::Lineage),
            "mixed" if i == 0 => TableOptions::engine(Engine::Lineage),
            "mixed" => TableOptions::with_layout(layout_spec("cg3", &schema).unwrap()),
            _ => match layout_spec(layout, &schema) {
                Some(spec) => TableOptions::with_layout(spec),
                None => TableOptions::default(),
            },
        }
        .aligned(mode.aligned);
        let options = if options.engine == Engine::Lsm { options.with_row_groups(row_groups) } else { options };
        lsm_tables += usize::from(options.engine == Engine::Lsm);
        db.create_table(name, schema, options).unwrap();
    }
    drop(db);
    let mut w = World {
        rng: StdRng::seed_from_u64(seed),
        db: None,
        tables: Vec::new(),
        model: vec![TableModel::default(); 2],
        snaps: Vec::new(),
        dir,
        fs,
        deepest_level: 0,
        op: 0,
        long_snapshot_ops: mode.long_snapshot_ops,
        long_since: None,
        skipped_before: 0,
        staged_before: 0,
        past: mode.history.then(Vec::new),
        past_reads_after_reopen: 0,
        reclaimed_before: 0,
        reopened: false,
        tiers,
        relayout: mode.relayout.then_some(0),
    };
    w.open();
    for i in 0..ops {
        w.op = i;
        w.step();
    }
    if mode.long_snapshot_ops > 0 && lsm_tables > 0 {
        let skipped = w.skipped_before + w.db().stats().files_skipped_by_snapshot;
        assert!(skipped > 0, "reads at the long-lived snapshot never passed over a newer file");
    }
    if mode.history {
        assert!(w.past_reads_after_reopen > 0, "no read as of a past point after a reopen");
    }
    if let Some(changes) = w.relayout {
        assert!(changes >= 8, "only {changes} layout changes");
        w.db().wait_for_compactions().unwrap();
        let st = w.db().stats();
        assert!(st.tables.iter().all(|t| t.relayout_files == 0), "files left in an earlier layout: {st:?}");
    }
    w.snaps.clear();
    for t in 0..w.tables.len() {
        let got: Vec<Vec<Value>> = w.tables[t]
            .0
            .scan(&KeyRange::all(), &Projection::All, &ReadOptions::default())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let want: Vec<Vec<Value>> = w.model[t].rows.values().cloned().collect();
        assert_eq!(got, want, "final full scan of table {t}");
    }
    w.db().verify().unwrap();
    w.db().check_supersede_marks().unwrap();
    if mode.tiers {
        // The slow tier holds files (the data is several times the fast one's budget), each
        // tier's files are in its own directory, and none in the database's. (Files
        // of versions a read still held may wait for the next cleanup: `api.rs` checks
        // the directories exactly.)
        let stats = w.db().stats();
        let ssts = |d: &std::path::Path| w.fs.list(d).unwrap().iter().filter(|f| f.ends_with(".sst")).count();
        assert_eq!(stats.tiers.len(), 2, "{:?}", stats.tiers);
        for (t, d) in stats.tiers.iter().zip(&tier_dirs) {
            assert!(ssts(d) >= t.files, "files in {}: {:?}", d.display(), stats.tiers);
        }
        assert!(stats.tiers[1].files > 0, "the slow tier holds no file: {:?}", stats.tiers);
        assert!(stats.tiers[1].block_reads > 0, "nothing was read from the slow tier: {:?}", stats.tiers);
        // Flushes deferred marking the slow tier, and staging compactions completed it (the
        // marks were checked all along, deferred files or not).
        assert!(w.staged_before + stats.staging_compactions > 0, "no staging compaction ran");
        assert_eq!(ssts(&w.dir), 0, "SSTs left in the database directory");
    }
    for ts in w.db().stats().tables.iter().filter(|t| t.engine == Engine::Lineage) {
        let l = ts.lineage.as_ref().expect("lineage figures of a lineage table");
        let tails = l.tail_bytes + l.history_bytes > 0 || l.reclaimed_ranges > 0;
        assert!(l.rows > 0 && tails, "table {}: {l:?}", ts.name);
    }
    if lsm_tables < 2 && !mode.history && mode.long_snapshot_ops == 0 {
        // Ranges lost their history once no snapshot needed it (a long-lived snapshot may
        // keep all of it), and reads stayed right.
        let reclaimed = w.reclaimed_before + w.reclaimed_now();
        assert!(reclaimed > 0, "no lineage range was ever rebuilt without its history");
    }
    if lsm_tables < 2 {
        // Checkpoints ran, and restarts loaded them (a reopen replays only the WAL after one).
        let files = w.fs.list(&w.dir).unwrap();
        assert!(files.iter().any(|f| f.ends_with(".lck")), "no lineage checkpoint was written: {files:?}");
    }
    assert!(
        lsm_tables == 0 || w.deepest_level >= 2,
        "the run never reached level 2 (deepest {}), so it tested too little",
        w.deepest_level
    );
}

#[test]
fn differential_against_btreemap_model() {
    let ops: usize = std::env::var("STRATA_MODEL_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(40_000);
    for layout in LAYOUTS {
        for seed in seeds(&[1, 2, 3, 4]) {
            println!("layout {layout}, seed {seed}");
            with_seed(seed, |s| {
                run(
                    s,
                    ops,
                    layout,
                    Mode { aligned: true, long_snapshot_ops: 0, history: false, tiers: false, relayout: false },
                )
            });
        }
    }
}

/// Tables of one run per group at every level (as builds before row-group files made them,
/// which keep that): the same answers for every layout, on one tier and two, with snapshots held
/// across rewrites.
#[test]
fn differential_with_one_run_per_group() {
    let ops: usize = std::env::var("STRATA_MODEL_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(30_000);
    for layout in ["column+runs", "cg3+runs", "lifecycle+runs"] {
        for seed in seeds(&[14]) {
            println!("layout {layout}, seed {seed}");
            with_seed(seed, |s| {
                run(
                    s,
                    ops,
                    layout,
                    Mode { aligned: true, long_snapshot_ops: 0, history: false, tiers: false, relayout: false },
                )
            });
        }
    }
    println!("layout cg3+runs, seed 16, two tiers and a long-lived snapshot");
    with_seed(16, |s| {
        run(
            s,
            ops,
            "cg3+runs",
            Mode { aligned: true, long_snapshot_ops: 5_000, history: false, tiers: true, relayout: false },
        )
    });
}

/// Aligned compaction changes only where files are cut: answers with it off and on must both
/// match the model, also at a snapshot held while the tree is rewritten many times over.
#[test]
fn differential_with_aligned_compaction_off_and_on_and_long_lived_snapshots() {
    let ops: usize = std::env::var("STRATA_MODEL_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(30_000);
    for layout in LAYOUTS {
        for seed in seeds(&[5, 6]) {
            for aligned in [false, true] {
                println!("layout {layout}, seed {seed}, aligned {aligned}");
                with_seed(seed, |s| {
                    run(
                        s,
                        ops,
                        layout,
                        Mode { aligned, long_snapshot_ops: 5_000, history: false, tiers: false, relayout: false },
                    )
                });
            }
        }
    }
}

/// Lineage tables against the same model: alone, and beside an LSM table with batches spanning
/// both engines, through snapshots, merges (small ranges merge often) and reopens (WAL replay).
#[test]
fn differential_with_lineage_tables() {
    let ops: usize = std::env::var("STRATA_MODEL_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(30_000);
    for layout in ["lineage", "mixed"] {
        for seed in seeds(&[7, 8]) {
            println!("layout {layout}, seed {seed}");
            with_seed(seed, |s| {
                run(
                    s,
                    ops,
                    layout,
                    Mode { aligned: true, long_snapshot_ops: 0, history: false, tiers: false, relayout: false },
                )
            });
        }
        println!("layout {layout}, seed 9, long-lived snapshot");
        with_seed(9, |s| {
            run(
                s,
                ops,
                layout,
                Mode { aligned: true, long_snapshot_ops: 5_000, history: false, tiers: false, relayout: false },
            )
        });
    }
}

/// Two storage tiers, the fast one far smaller than the data: compaction output spills to the
/// slow tier, the tiers are remembered across reopens, and every answer stays the model's.
#[test]
fn differential_with_two_tiers() {
    let ops: usize = std::env::var("STRATA_MODEL_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(30_000);
    for layout in ["row", "cg3", "lifecycle"] {
        for seed in seeds(&[12, 13]) {
            println!("layout {layout}, seed {seed}, two tiers");
            with_seed(seed, |s| {
                run(
                    s,
                    ops,
                    layout,
                    Mode { aligned: true, long_snapshot_ops: 0, history: false, tiers: true, relayout: false },
                )
            });
        }
    }
}

/// A history retention window on both engines (layouts: every table on the LSM engine in
/// column groups, every table on the lineage engine, one of each): reads as of past sequence
/// numbers and times match the model then, through flushes, compactions, merges, checkpoints
/// and reopens.
#[test]
fn differential_with_history_reads() {
    let ops: usize = std::env::var("STRATA_MODEL_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(30_000) * 2 / 3;
    for layout in ["cg3", "lineage", "mixed"] {
        for seed in seeds(&[10, 11]) {
            // The LSM tables change layout as they go.
            let relayout = layout != "lineage";
            println!("layout {layout}, seed {seed}, history, relayout {relayout}");
            with_seed(seed, |s| {
                run(s, ops, layout, Mode { aligned: true, long_snapshot_ops: 0, history: true, tiers: false, relayout })
            });
        }
    }
}
