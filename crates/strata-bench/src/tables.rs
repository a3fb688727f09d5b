//! The table interface the analytical workloads (`laser-hw`, `ycsb-sharp`) drive every system
//! through: one table with a BIGINT primary key and typed columns, bulk loads, single-row
//! inserts, one-column updates, point reads with a projection, and queries that aggregate (MAX,
//! SUM) or return whole rows over a key range with a conjunction of comparisons.
//!
//! Answers are reduced to something every system can be checked on: aggregates as integers, and
//! returned rows as their count and the sum of their keys. [`Acc`] computes the same answers in
//! the harness, from the generator's rows, so each system is checked against the truth rather
//! than against another system.

use std::cmp::Ordering;

use strata::scan::CmpOp;
use strata::Value;

/// A column type every system has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    SmallInt,
    Int,
    BigInt,
    Double,
    Text,
}

/// The table: column 0 is the BIGINT primary key.
#[derive(Clone, Debug)]
pub(crate) struct TableDef {
    pub name: String,
    pub columns: Vec<(String, Kind)>,
}

impl TableDef {
    pub fn col(&self, i: usize) -> &str {
        &self.columns[i].0
    }
}

/// `column op literal`.
#[derive(Clone, Debug)]
pub(crate) struct Pred {
    pub col: usize,
    pub op: CmpOp,
    pub value: Value,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Agg {
    Max(usize),
    Sum(usize),
}

#[derive(Clone, Debug)]
pub(crate) enum Output {
    /// One value per aggregate.
    Aggs(Vec<Agg>),
    /// Every column of every matching row, delivered to the client.
    Rows,
}

/// `SELECT <output> FROM t WHERE k BETWEEN lo AND hi AND <preds>`.
#[derive(Clone, Debug)]
pub(crate) struct Query {
    /// Inclusive key bounds; `None` is the whole table.
    pub keys: Option<(i64, i64)>,
    pub preds: Vec<Pred>,
    pub out: Output,
}

/// What a query answered, in a form every system can be compared on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Aggs(Vec<Option<i128>>),
    Rows { count: u64, key_sum: i128 },
}

impl std::fmt::Display for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Aggs(v) => {
                let parts: Vec<String> =
                    v.iter().map(|x| x.map_or_else(|| "NULL".to_string(), |x| x.to_string())).collect();
                write!(f, "[{}]", parts.join(", "))
            }
            Answer::Rows { count, key_sum } => write!(f, "{count} rows, key sum {key_sum}"),
        }
    }
}

/// One row a transaction writes: its key and the columns it sets.
pub(crate) type RowWrite = (i64, Vec<(usize, Value)>);

/// How an [`Tables::update_txn`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Txn {
    Committed,
    /// The system refused it on a conflict; nothing of it was applied.
    Aborted,
}

/// The counter column of row `key` among the rows a transaction read, plus 1 (for
/// [`Tables::update_txn`]).
pub(crate) fn next_count(read: &[(i64, Vec<Value>)], key: i64, counter: usize) -> Result<i64, String> {
    let (_, row) =
        read.iter().find(|(k, _)| *k == key).ok_or_else(|| format!("row {key} is written but was not read"))?;
    let v = row.get(counter).and_then(int_of).ok_or_else(|| format!("row {key}: column {counter} holds no integer"))?;
    Ok(v as i64 + 1)
}

/// What a system under an analytical workload must do, on the table it was opened with.
pub(crate) trait Tables: Send + Sync {
    /// Inserts rows in one transaction (or batch).
    fn load(&self, rows: &[Vec<Value>]) -> Result<(), String>;
    /// After the load: `compact` asks for the fully compacted / vacuumed, analyzed state a scan
    /// benchmark starts from; otherwise only statistics or checkpoints the system needs.
    fn settle(&self, compact: bool) -> Result<(), String>;
    /// Inserts one row on its own.
    fn insert(&self, row: &[Value]) -> Result<(), String>;
    /// Sets one column of one row.
    fn update(&self, key: i64, col: usize, value: &Value) -> Result<(), String>;
    /// The row's values at `cols`, if it exists.
    fn get(&self, key: i64, cols: &[usize]) -> Result<Option<Vec<Value>>, String>;
    fn query(&self, q: &Query) -> Result<Answer, String>;
    /// One short update transaction through the system's own transactions, all or nothing: reads
    /// the whole rows at `reads` (the rows it writes among them), then for each `(key, set)` of
    /// `writes` sets the columns of `set` and column `counter` to the value it read there plus 1.
    /// [`Txn::Aborted`] when the system aborted it on a conflict (nothing of it applied).
    fn update_txn(&self, reads: &[i64], writes: &[(i64, Vec<(usize, Value)>)], counter: usize) -> Result<Txn, String> {
        let _ = (reads, writes, counter);
        Err("this system runs no transactions in strata-bench".into())
    }
    /// Counters the system keeps about its own work so far, as (name, value, unit), reported
    /// next to the timings to explain them.
    fn counters(&self) -> Vec<(&'static str, f64, &'static str)> {
        Vec::new()
    }
    /// The table's layout as its engine describes it now, for systems that have one (strata's
    /// layout spec, which self-advising may change as it runs).
    fn layout(&self) -> Option<String> {
        None
    }
    /// Updates written but not yet merged into the read-optimized form, for systems that keep
    /// such a backlog (strata's lineage engine: tail records not yet merged).
    fn merge_lag(&self) -> Option<u64> {
        None
    }
}

/// An integer view of a value (for answers); `None` for NULL and non-integers.
pub(crate) fn int_of(v: &Value) -> Option<i128> {
    match v {
        Value::TinyInt(x) => Some(i128::from(*x)),
        Value::SmallInt(x) => Some(i128::from(*x)),
        Value::Int(x) => Some(i128::from(*x)),
        Value::BigInt(x) => Some(i128::from(*x)),
        _ => None,
    }
}

/// Compares two non-NULL values of compatible kinds.
fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Real(x), y) => compare(&Value::Double(f64::from(*x)), y),
        (x, Value::Real(y)) => compare(x, &Value::Double(f64::from(*y))),
        (Value::Double(x), Value::Double(y)) => x.partial_cmp(y),
        (Value::Double(x), y) => x.partial_cmp(&(int_of(y)? as f64)),
        (x, Value::Double(y)) => (int_of(x)? as f64).partial_cmp(y),
        (Value::Text(x), Value::Text(y)) => Some(x.cmp(y)),
        (Value::Date(x), Value::Date(y)) => Some(x.cmp(y)),
        (x, y) => Some(int_of(x)?.cmp(&int_of(y)?)),
    }
}

impl Pred {
    pub fn holds(&self, row: &[Value]) -> bool {
        row.get(self.col).and_then(|v| compare(v, &self.value)).is_some_and(|o| self.op.holds(o))
    }
}

impl Query {
    /// Whether a whole row (column 0 the key) is selected.
    pub fn selects(&self, row: &[Value]) -> bool {
        let key = row.first().and_then(int_of);
        let in_range = match (self.keys, key) {
            (None, _) => true,
            (Some((lo, hi)), Some(k)) => (i128::from(lo)..=i128::from(hi)).contains(&k),
            (Some(_), None) => false,
        };
        in_range && self.preds.iter().all(|p| p.holds(row))
    }
}

/// Computes a query's answer row by row: the harness's truth, and the client-side evaluation
/// for stores without a query language.
pub(crate) struct Acc<'q> {
    q: &'q Query,
    aggs: Vec<Option<i128>>,
    count: u64,
    key_sum: i128,
}

impl<'q> Acc<'q> {
    pub fn new(q: &'q Query) -> Self {
        let n = match &q.out {
            Output::Aggs(a) => a.len(),
            Output::Rows => 0,
        };
        Acc { q, aggs: vec![None; n], count: 0, key_sum: 0 }
    }

    /// Adds a whole row if the query selects it.
    pub fn add(&mut self, row: &[Value]) {
        if !self.q.selects(row) {
            return;
        }
        match &self.q.out {
            Output::Rows => {
                self.count += 1;
                self.key_sum += row.first().and_then(int_of).unwrap_or(0);
            }
            Output::Aggs(aggs) => {
                for (acc, a) in self.aggs.iter_mut().zip(aggs) {
                    let (col, max) = match *a {
                        Agg::Max(c) => (c, true),
                        Agg::Sum(c) => (c, false),
                    };
                    let Some(v) = row.get(col).and_then(int_of) else { continue };
                    *acc = Some(match (*acc, max) {
                        (None, _) => v,
                        (Some(x), true) => x.max(v),
                        (Some(x), false) => x + v,
                    });
                }
            }
        }
    }

    pub fn finish(self) -> Answer {
        match self.q.out {
            Output::Rows => Answer::Rows { count: self.count, key_sum: self.key_sum },
            Output::Aggs(_) => Answer::Aggs(self.aggs),
        }
    }
}

/// SQL for the systems that speak it.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "duckdb"))]
pub(crate) mod sql {
    use super::{Agg, Kind, Output, Query, TableDef};
    use strata::Value;

    /// Type names per dialect (`postgres`, `sqlite`, `duckdb`).
    pub fn type_name(dialect: &str, k: Kind) -> &'static str {
        match (dialect, k) {
            ("sqlite", Kind::SmallInt | Kind::Int | Kind::BigInt) => "INTEGER",
            ("sqlite", Kind::Double) => "REAL",
            (_, Kind::SmallInt) => "SMALLINT",
            (_, Kind::Int) => "INTEGER",
            (_, Kind::BigInt) => "BIGINT",
            ("postgres", Kind::Double) => "DOUBLE PRECISION",
            (_, Kind::Double) => "DOUBLE",
            (_, Kind::Text) => "TEXT",
        }
    }

    pub fn create_table(dialect: &str, def: &TableDef) -> String {
        let cols: Vec<String> = def
            .columns
            .iter()
            .enumerate()
            .map(|(i, (n, k))| {
                let key = if i == 0 { " PRIMARY KEY" } else { " NOT NULL" };
                format!("{n} {}{key}", type_name(dialect, *k))
            })
            .collect();
        format!("CREATE TABLE {} ({})", def.name, cols.join(", "))
    }

    /// A literal as SQL text.
    pub fn literal(v: &Value) -> String {
        match v {
            Value::Null => "NULL".into(),
            Value::Boolean(b) => b.to_string(),
            Value::TinyInt(x) => x.to_string(),
            Value::SmallInt(x) => x.to_string(),
            Value::Int(x) => x.to_string(),
            Value::BigInt(x) => x.to_string(),
            // `{:?}` prints the shortest text that reads back as the same double.
            Value::Double(x) => format!("{x:?}"),
            Value::Real(x) => format!("{x:?}"),
            Value::Text(s) => format!("'{}'", s.replace('\'', "''")),
            Value::Bytea(b) => format!("'\\x{}'", b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
            Value::Date(d) => format!("DATE '{}'", strata::types::format_date(*d)),
            Value::Timestamp(t) => format!("TIMESTAMP '{}'", strata::types::format_timestamp(*t)),
            Value::TimestampTz(t) => format!("TIMESTAMPTZ '{}'", strata::types::format_timestamptz(*t)),
        }
    }

    /// The query as one SELECT with its literals inline.
    pub fn select(def: &TableDef, q: &Query) -> String {
        select_in("", def, q)
    }

    /// [`select`] in one dialect: PostgreSQL sums a BIGINT column as NUMERIC, cast back to
    /// BIGINT here so every system's answer reads as an integer.
    pub fn select_in(dialect: &str, def: &TableDef, q: &Query) -> String {
        let what = match &q.out {
            Output::Rows => "*".to_string(),
            Output::Aggs(aggs) => aggs
                .iter()
                .map(|a| match *a {
                    Agg::Max(c) => format!("MAX({})", def.col(c)),
                    Agg::Sum(c) if dialect == "postgres" && def.columns[c].1 == Kind::BigInt => {
                        format!("SUM({})::bigint", def.col(c))
                    }
                    Agg::Sum(c) => format!("SUM({})", def.col(c)),
                })
                .collect::<Vec<_>>()
                .join(", "),
        };
        let mut conds = Vec::new();
        if let Some((lo, hi)) = q.keys {
            conds.push(format!("{} BETWEEN {lo} AND {hi}", def.col(0)));
        }
        conds.extend(q.preds.iter().map(|p| format!("{} {} {}", def.col(p.col), p.op.symbol(), literal(&p.value))));
        let mut s = format!("SELECT {what} FROM {}", def.name);
        if !conds.is_empty() {
            s.push_str(" WHERE ");
            s.push_str(&conds.join(" AND "));
        }
        s
    }

    /// `UPDATE t SET <cols> = <ph(1)>, ... WHERE k = <ph(cols + 1)>`.
    pub fn update_set(def: &TableDef, cols: &[usize], ph: impl Fn(usize) -> String) -> String {
        let sets: Vec<String> =
            cols.iter().enumerate().map(|(i, &c)| format!("{} = {}", def.col(c), ph(i + 1))).collect();
        format!("UPDATE {} SET {} WHERE {} = {}", def.name, sets.join(", "), def.col(0), ph(cols.len() + 1))
    }

    /// A transaction's writes as statements: per written row the UPDATE text
    /// ([`update_set`]) and its parameters, the key last (the counter computed from `read`, see
    /// [`Tables::update_txn`](super::Tables::update_txn)). Only the peers driven from Rust
    /// (SQLite, PostgreSQL) run transactions through it.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub fn txn_updates(
        def: &TableDef,
        read: &[(i64, Vec<Value>)],
        writes: &[(i64, Vec<(usize, Value)>)],
        counter: usize,
        ph: impl Fn(usize) -> String,
    ) -> Result<Vec<(String, Vec<Value>)>, String> {
        writes
            .iter()
            .map(|(k, set)| {
                let count = super::next_count(read, *k, counter)?;
                let mut cols: Vec<usize> = set.iter().map(|(c, _)| *c).collect();
                cols.push(counter);
                let mut params: Vec<Value> = set.iter().map(|(_, v)| v.clone()).collect();
                params.push(Value::BigInt(count));
                params.push(Value::BigInt(*k));
                Ok((update_set(def, &cols, &ph), params))
            })
            .collect()
    }

    /// `SELECT cols FROM t WHERE k = <placeholder>`.
    pub fn get(def: &TableDef, cols: &[usize], placeholder: &str) -> String {
        let names: Vec<&str> = cols.iter().map(|&c| def.col(c)).collect();
        format!("SELECT {} FROM {} WHERE {} = {placeholder}", names.join(", "), def.name, def.col(0))
    }

    /// A table's INSERT and per-column UPDATE texts in one dialect's placeholders (`ph(1)` is the
    /// first), made once when a store opens rather than on every write.
    pub struct Texts {
        /// `INSERT INTO t VALUES (<placeholders>)`.
        pub insert: String,
        /// Per column: `UPDATE t SET col = <ph(1)> WHERE k = <ph(2)>`.
        pub updates: Vec<String>,
    }

    impl Texts {
        pub fn new(def: &TableDef, ph: impl Fn(usize) -> String) -> Self {
            let marks: Vec<String> = (1..=def.columns.len()).map(&ph).collect();
            let insert = format!("INSERT INTO {} VALUES ({})", def.name, marks.join(", "));
            let updates = (0..def.columns.len())
                .map(|c| format!("UPDATE {} SET {} = {} WHERE {} = {}", def.name, def.col(c), ph(1), def.col(0), ph(2)))
                .collect();
            Texts { insert, updates }
        }

        pub fn update(&self, col: usize) -> Result<&str, String> {
            self.updates.get(col).map(String::as_str).ok_or_else(|| format!("no column {col}"))
        }
    }
}

/// The answer in a strata scan's batches: the aggregate row when the request has `aggregates`,
/// else the rows' count and the sum of their keys (column 0, a BIGINT).
pub(crate) fn strata_answer(batches: strata::scan::BatchIter, aggregates: usize) -> strata::Result<Answer> {
    use arrow_array::{cast::AsArray, types::Int64Type};
    let (mut count, mut key_sum) = (0u64, 0i128);
    let mut aggs = None;
    for b in batches {
        let b = b?;
        if aggregates == 0 {
            count += b.num_rows() as u64;
            let keys = b.column(0).as_primitive_opt::<Int64Type>().ok_or_else(|| {
                strata::Error::InvalidArgument("the first column of the rows is not a BIGINT key".into())
            })?;
            key_sum += keys.iter().flatten().map(i128::from).sum::<i128>();
        } else if aggs.is_none() {
            aggs = strata::scan::batch_rows(&b).first().map(|r| r.iter().map(int_of).collect());
        }
    }
    Ok(match aggs {
        Some(a) => Answer::Aggs(a),
        None if aggregates > 0 => Answer::Aggs(vec![None; aggregates]),
        None => Answer::Rows { count, key_sum },
    })
}

/// strata as a [`Tables`] store, with a layout per table.
pub(crate) struct StrataTables {
    db: strata::Db,
    t: strata::Table,
    def: TableDef,
    /// Projections already resolved, by column list.
    projections: parking_lot::RwLock<std::collections::HashMap<Vec<usize>, strata::Projection>>,
}

fn column_type(k: Kind) -> strata::ColumnType {
    match k {
        Kind::SmallInt => strata::ColumnType::SmallInt,
        Kind::Int => strata::ColumnType::Int,
        Kind::BigInt => strata::ColumnType::BigInt,
        Kind::Double => strata::ColumnType::Double,
        Kind::Text => strata::ColumnType::Text,
    }
}

fn serr(e: strata::Error) -> String {
    format!("strata: {e}")
}

impl StrataTables {
    pub fn open(
        dir: &std::path::Path,
        def: &TableDef,
        options: strata::Options,
        layout: Option<&str>,
    ) -> Result<Self, String> {
        let topts = match layout {
            Some(l) => strata::TableOptions::with_layout(l),
            None => strata::TableOptions::default(),
        };
        Self::open_with(dir, def, options, topts)
    }

    /// [`StrataTables::open`] with any table options (such as another engine).
    pub fn open_with(
        dir: &std::path::Path,
        def: &TableDef,
        options: strata::Options,
        topts: strata::TableOptions,
    ) -> Result<Self, String> {
        let _ = std::fs::remove_dir_all(dir);
        let db = strata::Db::open(dir, options).map_err(serr)?;
        let cols = def.columns.iter().map(|(n, k)| strata::Column::not_null(n.clone(), column_type(*k))).collect();
        let schema = strata::Schema::new(cols, &[def.col(0)]).map_err(serr)?;
        let t = db.create_table(&def.name, schema, topts).map_err(serr)?;
        Ok(StrataTables { db, t, def: def.clone(), projections: Default::default() })
    }

    /// LASER's design advisor over what the table served since it was opened (or, with
    /// `trace`, over the workload recorded there), with block prices measured on the table
    /// first.
    pub fn advise(&self, trace: Option<&std::path::Path>) -> Result<strata::Advice, String> {
        let calibration = self.db.calibrate(&self.def.name).map_err(serr)?;
        let opts = strata::AdviseOptions { calibration, trace: trace.map(|p| p.to_path_buf()) };
        self.db.advise(&self.def.name, &opts).map_err(serr)
    }

    /// Starts recording the table's workload into the trace file at `path`
    /// ([`strata::Db::trace_start`]).
    pub fn trace_start(&self, path: &std::path::Path) -> Result<(), String> {
        self.db.trace_start(&self.def.name, path).map_err(serr)
    }

    /// Stops the recording [`Self::trace_start`] began.
    pub fn trace_stop(&self) -> Result<(), String> {
        self.db.trace_stop(&self.def.name).map(|_| ()).map_err(serr)
    }

    /// The table's schema.
    pub fn schema(&self) -> &strata::Schema {
        self.t.schema()
    }

    /// The projection of `cols`: readers share the resolved projections; only a new column list
    /// takes the write lock.
    fn projection(&self, cols: &[usize]) -> Result<strata::Projection, String> {
        if let Some(p) = self.projections.read().get(cols) {
            return Ok(p.clone());
        }
        let names: Vec<&str> = cols.iter().map(|&c| self.def.col(c)).collect();
        let p = self.t.projection(&names).map_err(serr)?;
        self.projections.write().insert(cols.to_vec(), p.clone());
        Ok(p)
    }

    fn request(&self, q: &Query) -> strata::scan::ScanRequest {
        use std::ops::Bound::{Included, Unbounded};
        use strata::scan::{AggFunc, Aggregate, Expr, ScanRequest};
        let mut req = ScanRequest::new();
        if let Some((lo, hi)) = q.keys {
            req = req.with_range(strata::KeyRange {
                start: Included(vec![Value::BigInt(lo)]),
                end: Included(vec![Value::BigInt(hi)]),
            });
        } else {
            req = req.with_range(strata::KeyRange { start: Unbounded, end: Unbounded });
        }
        let filter =
            q.preds.iter().map(|p| Expr::cmp(self.def.col(p.col), p.op, p.value.clone())).reduce(|a, b| a.and(b));
        if let Some(f) = filter {
            req = req.with_filter(f);
        }
        if let Output::Aggs(aggs) = &q.out {
            for a in aggs {
                req = req.with_aggregate(match *a {
                    Agg::Max(c) => Aggregate::new(AggFunc::Max, self.def.col(c)),
                    Agg::Sum(c) => Aggregate::new(AggFunc::Sum, self.def.col(c)),
                });
            }
        }
        req
    }
}

impl Tables for StrataTables {
    fn load(&self, rows: &[Vec<Value>]) -> Result<(), String> {
        let mut b = strata::WriteBatch::new();
        for r in rows {
            b.insert(&self.t, r).map_err(serr)?;
        }
        self.db.write(b, &Default::default()).map_err(serr)
    }

    fn settle(&self, compact: bool) -> Result<(), String> {
        if compact {
            self.db.compact_range(&self.def.name, &strata::KeyRange::all()).map_err(serr)
        } else {
            self.db.wait_for_compactions().map_err(serr)
        }
    }

    fn insert(&self, row: &[Value]) -> Result<(), String> {
        self.t.insert(row).map_err(serr)
    }

    fn update(&self, key: i64, col: usize, value: &Value) -> Result<(), String> {
        self.t.update(&[Value::BigInt(key)], &[(self.def.col(col), value.clone())]).map_err(serr)
    }

    fn merge_lag(&self) -> Option<u64> {
        let st = self.db.stats();
        st.tables.iter().find(|t| t.name == self.def.name).and_then(|t| t.lineage.as_ref()).map(|l| l.merge_lag)
    }

    fn get(&self, key: i64, cols: &[usize]) -> Result<Option<Vec<Value>>, String> {
        let proj = self.projection(cols)?;
        self.t.get(&[Value::BigInt(key)], &proj, &strata::ReadOptions::default()).map_err(serr)
    }

    fn update_txn(&self, reads: &[i64], writes: &[(i64, Vec<(usize, Value)>)], counter: usize) -> Result<Txn, String> {
        let run = || -> Result<(), strata::Error> {
            let mut tx = self.db.begin(&strata::TxnOptions::default())?;
            let mut read = Vec::with_capacity(reads.len());
            for &k in reads {
                match tx.get(&self.t, &[Value::BigInt(k)], &strata::Projection::All)? {
                    Some(row) => read.push((k, row)),
                    None => return Err(strata::Error::InvalidArgument(format!("row {k} is missing"))),
                }
            }
            for (k, set) in writes {
                let count = next_count(&read, *k, counter).map_err(strata::Error::InvalidArgument)?;
                let mut cols: Vec<(&str, Value)> = set.iter().map(|(c, v)| (self.def.col(*c), v.clone())).collect();
                cols.push((self.def.col(counter), Value::BigInt(count)));
                tx.update(&self.t, &[Value::BigInt(*k)], &cols)?;
            }
            tx.commit(&strata::WriteOptions::default())
        };
        match run() {
            Ok(()) => Ok(Txn::Committed),
            Err(e) if e.is_retryable() => Ok(Txn::Aborted),
            Err(e) => Err(serr(e)),
        }
    }

    fn query(&self, q: &Query) -> Result<Answer, String> {
        let req = self.request(q);
        let batches = self.t.scan_batches(&req, &strata::ReadOptions::default()).map_err(serr)?;
        strata_answer(batches, req.aggregates.len()).map_err(serr)
    }

    fn layout(&self) -> Option<String> {
        self.db.stats().tables.into_iter().find(|t| t.name == self.def.name).map(|t| t.layout)
    }

    fn counters(&self) -> Vec<(&'static str, f64, &'static str)> {
        let s = self.db.scan_stats();
        let st = self.db.stats();
        if let Some(l) = st.tables.iter().find(|t| t.name == self.def.name).and_then(|t| t.lineage.as_ref()) {
            return vec![
                ("lineage: base bytes", l.base_bytes as f64 / 1e6, "MB"),
                ("lineage: tail bytes", l.tail_bytes as f64 / 1e6, "MB"),
                ("lineage: history bytes", l.history_bytes as f64 / 1e6, "MB"),
                ("lineage: ranges rebased", l.reclaimed_ranges as f64, "ranges"),
                ("lineage: writers held by rebases", l.reclaim_wait_micros as f64 / 1e3, "ms"),
                ("lineage: range merges", l.merges as f64, "merges"),
                ("lineage: tail records merged", l.merged_records as f64, "records"),
            ];
        }
        let mut out = vec![
            ("scans: rows through the per-row merge", s.merged_rows as f64, "rows"),
            ("scans: blocks passed on whole", s.bulk_blocks as f64, "blocks"),
            ("scans: blocks answered from statistics", s.blocks_from_stats as f64, "blocks"),
            ("write amplification", st.tables.iter().map(|t| t.write_amplification).fold(0.0, f64::max), "x"),
            ("flushes", st.flushes as f64, "flushes"),
            ("flush time", st.flush_micros as f64 / 1e6, "s"),
            ("compactions", st.compactions as f64, "compactions"),
            ("compaction time", st.compaction_micros as f64 / 1e6, "s"),
            ("write stalls", st.write_stall_micros as f64 / 1e6, "s"),
            ("layout changes by self-advising", st.self_advised as f64, "changes"),
            ("time self-advising spent pricing", st.self_advise_micros as f64 / 1e6, "s"),
            ("files rewritten by re-layouts", st.relayouts as f64, "files"),
        ];
        const LEVELS: [&str; 5] = [
            "bytes written into level 0",
            "bytes written into level 1",
            "bytes written into level 2",
            "bytes written into level 3",
            "bytes written into level 4",
        ];
        for (name, i) in LEVELS.iter().zip(0..) {
            let bytes: u64 = st.tables.iter().filter_map(|t| t.levels.get(i)).map(|l| l.bytes_written).sum();
            out.push((name, bytes as f64 / 1e6, "MB"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Vec<Value>> {
        (0..10i64)
            .map(|k| vec![Value::BigInt(k), Value::Int((k * 7 % 10) as i32), Value::Double(k as f64 / 10.0)])
            .collect()
    }

    #[test]
    fn acc_applies_the_range_the_predicates_and_the_aggregates() {
        let q = Query {
            keys: Some((2, 8)),
            preds: vec![Pred { col: 2, op: CmpOp::Lt, value: Value::Double(0.65) }],
            out: Output::Aggs(vec![Agg::Max(1), Agg::Sum(1)]),
        };
        let mut acc = Acc::new(&q);
        for r in rows() {
            acc.add(&r);
        }
        // Keys 2..=6 pass; column 1 holds 4, 1, 8, 5, 2.
        assert_eq!(acc.finish(), Answer::Aggs(vec![Some(8), Some(20)]));
        let q = Query {
            keys: None,
            preds: vec![Pred { col: 1, op: CmpOp::GtEq, value: Value::Int(5) }],
            out: Output::Rows,
        };
        let mut acc = Acc::new(&q);
        for r in rows() {
            acc.add(&r);
        }
        // The model, written out independently of the query.
        let want: Vec<i64> = (0..10).filter(|k| k * 7 % 10 >= 5).collect();
        assert_eq!(
            acc.finish(),
            Answer::Rows { count: want.len() as u64, key_sum: want.iter().map(|&k| i128::from(k)).sum() }
        );
    }

    #[test]
    fn an_empty_selection_has_null_aggregates() {
        let q = Query { keys: Some((100, 200)), preds: vec![], out: Output::Aggs(vec![Agg::Max(1)]) };
        let mut acc = Acc::new(&q);
        for r in rows() {
            acc.add(&r);
        }
        assert_eq!(acc.finish(), Answer::Aggs(vec![None]));
    }
}
