//! `strata-bench tpch --refresh`: the queries while TPC-H's refresh functions change orders and
//! lineitem, as in the specification's throughput test: one query stream beside one refresh
//! stream, which applies its functions back to back until the queries end, or until it applied
//! `--refresh-pairs` pairs (the specification's throughput test applies one pair per query
//! stream).
//!
//! Refresh function f (1-based) works on set (f - 1) / 2, counted round after round: the
//! `set_size` orders that follow the previous set's in the generator's order, with their line
//! items. The generator uses only the first 8 keys of every 32, so the keys of every order sit at
//! a *slot* of 8 keys in their group of 32. In round r (from 0), the set's rows sit at slot r mod
//! 4: an odd f (RF1) inserts a copy of each at the next slot (order key 8 higher, or 24 lower
//! from the last slot), and an even f (RF2) deletes the rows at slot r mod 4. Copies never meet
//! an existing key and keep the tables' key span (and with it strata's key cuts); rows stay as
//! many as before each pair, the data moves, and the stream never runs out of sets. Each
//! function is one atomic write, and writes a row of its number into `tpch_refresh`.
//!
//! Checking: each query runs in a read-only transaction block whose first statement counts
//! `tpch_refresh`, so the count is of the snapshot the query reads. DuckDB later applies the same
//! functions to the reference database, in order of count, and its rows for each count are the
//! answer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::ArrowError;
use strata::{Column, ColumnType, Db, Schema, Table, TableOptions, Value, WriteBatch, WriteOptions};

use super::load::{batch_rows, TABLES};

/// The table each refresh function writes its number into, in the same write.
pub(crate) const LOG_TABLE: &str = "tpch_refresh";

/// Keys in a slot: the generator uses the first slot of every 32 keys.
const SLOT: i64 = 8;

/// The offset from the generated order key of round `round`'s rows (round 0: the generated
/// rows themselves), and of the copies its RF1 inserts.
pub(crate) fn offsets(round: u64) -> (i64, i64) {
    let slot = |r: u64| (r % 4) as i64 * SLOT;
    (slot(round), slot(round + 1))
}

/// Orders per refresh function: 0.1% of the orders, as the specification's refresh functions.
pub(crate) fn set_size(sf: f64) -> u64 {
    ((sf * 1500.0).round() as u64).max(1)
}

/// The order key of the `index`-th order (from 0) the generator makes: keys run 1-7, 32-39,
/// 64-71, and so on (the first 8 of every 32, but 0).
fn order_key(index: u64) -> i64 {
    let j = index + 1;
    ((j / 8) * 32 + j % 8) as i64
}

/// The smallest and largest order key of every set at scale factor `sf`, in order.
pub(crate) fn set_bounds(sf: f64) -> Vec<(i64, i64)> {
    let n = set_size(sf);
    let sets = TABLES[1].rows(sf) / n;
    (0..sets).map(|i| (order_key(i * n), order_key((i + 1) * n - 1))).collect()
}

/// One set: its orders and line items as generated, and the round using it.
struct Set {
    orders: Vec<Vec<Value>>,
    lineitems: Vec<Vec<Value>>,
    round: u64,
}

type Batches = Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send>;

/// Rows of one generated table, read on as far as asked.
struct Rows {
    name: &'static str,
    batches: Batches,
    buffered: std::collections::VecDeque<Vec<Value>>,
}

impl Rows {
    /// The next row, if the table has one left.
    fn peek(&mut self) -> Result<Option<&Vec<Value>>, String> {
        while self.buffered.is_empty() {
            match self.batches.next() {
                None => return Ok(None),
                Some(b) => {
                    let b = b.map_err(|e| format!("tpch: generating {}: {e}", self.name))?;
                    self.buffered.extend(batch_rows(&b)?);
                }
            }
        }
        Ok(self.buffered.front())
    }
}

/// The order key (the first column) of a generated orders or lineitem row.
fn key_of(row: &[Value]) -> Result<i64, String> {
    match row.first() {
        Some(Value::BigInt(k)) => Ok(*k),
        other => Err(format!("tpch: an order key is {other:?}, not a BIGINT")),
    }
}

/// The sets, generated one after another, round after round.
struct Sets {
    sf: f64,
    size: u64,
    bounds: Vec<(i64, i64)>,
    next: usize,
    round: u64,
    orders: Rows,
    lineitems: Rows,
}

/// The generated rows of table `TABLES[i]` at scale factor `sf`, from the first.
fn generated(sf: f64, i: usize) -> Rows {
    Rows { name: TABLES[i].name, batches: TABLES[i].batches(sf, 1, 1), buffered: Default::default() }
}

impl Sets {
    fn new(sf: f64) -> Sets {
        let (orders, lineitems) = (generated(sf, 1), generated(sf, 0));
        Sets { sf, size: set_size(sf), bounds: set_bounds(sf), next: 0, round: 0, orders, lineitems }
    }

    /// The next set; after the last, the first one again, in the next round.
    fn next_set(&mut self) -> Result<Set, String> {
        if self.next == self.bounds.len() {
            if self.bounds.is_empty() {
                return Err("tpch: too few orders for a refresh set".into());
            }
            *self = Sets { round: self.round + 1, ..Sets::new(self.sf) };
        }
        let (lo, hi) = self.bounds[self.next];
        self.next += 1;
        let mut set = Set { orders: Vec::new(), lineitems: Vec::new(), round: self.round };
        for _ in 0..self.size {
            self.orders.peek()?;
            set.orders.extend(self.orders.buffered.pop_front());
        }
        let keys: Vec<i64> = set.orders.iter().map(|r| key_of(r)).collect::<Result<_, _>>()?;
        // DuckDB finds a set by these bounds: the generated keys must be where they are expected.
        if keys.len() as u64 != self.size || keys.first() != Some(&lo) || keys.last() != Some(&hi) {
            return Err(format!(
                "tpch: refresh set {} has order keys {:?}..{:?}, expected {lo}..{hi}",
                self.next - 1,
                keys.first(),
                keys.last()
            ));
        }
        if let Some(k) = keys.iter().find(|k| k.rem_euclid(32) >= SLOT) {
            return Err(format!("tpch: order key {k} is not in the first {SLOT} of its 32"));
        }
        while let Some(row) = self.lineitems.peek()? {
            if key_of(row)? > hi {
                break;
            }
            set.lineitems.extend(self.lineitems.buffered.pop_front());
        }
        Ok(set)
    }
}

/// The tables a refresh writes.
struct Tables {
    orders: Table,
    lineitem: Table,
    log: Table,
    /// Where `l_linenumber`, lineitem's second key column, is in a row.
    linenumber: usize,
}

/// The refresh stream: applies functions 1, 2, ... to `db` until `stop` or the sets run out.
struct Stream {
    db: Arc<Db>,
    tables: Tables,
    sets: Sets,
    /// The set the last RF1 inserted, for its RF2.
    current: Option<Set>,
    applied: u64,
}

impl Stream {
    /// Creates the log table in `db` (which must not have one yet).
    fn new(db: Arc<Db>, sf: f64) -> Result<Stream, String> {
        let table = |name: &str| db.table(name).map_err(|e| format!("tpch: refresh: {e}"));
        let schema = Schema::new(vec![Column::not_null("rf_function", ColumnType::BigInt)], &["rf_function"])
            .map_err(|e| format!("tpch: {e}"))?;
        let log = db
            .create_table(LOG_TABLE, schema, TableOptions::default())
            .map_err(|e| format!("tpch: creating {LOG_TABLE}: {e}"))?;
        let lineitem = table("lineitem")?;
        let linenumber = lineitem
            .schema()
            .columns()
            .iter()
            .position(|c| c.name == "l_linenumber")
            .ok_or("tpch: lineitem has no l_linenumber")?;
        let tables = Tables { orders: table("orders")?, lineitem, log, linenumber };
        Ok(Stream { db, tables, sets: Sets::new(sf), current: None, applied: 0 })
    }

    /// Applies the next function; returns the rows it wrote.
    fn apply_next(&mut self) -> Result<u64, String> {
        let f = self.applied + 1;
        let t = &self.tables;
        let mut wb = WriteBatch::new();
        let err = |e: strata::Error| format!("tpch: refresh function {f}: {e}");
        let at = |row: &[Value], offset: i64| Ok::<_, String>(Value::BigInt(key_of(row)? + offset));
        if f % 2 == 1 {
            let set = self.sets.next_set()?;
            let (_, to) = offsets(set.round);
            for (table, rows) in [(&t.orders, &set.orders), (&t.lineitem, &set.lineitems)] {
                for row in rows {
                    let mut copy = row.clone();
                    copy[0] = at(row, to)?;
                    wb.insert(table, &copy).map_err(err)?;
                }
            }
            self.current = Some(set);
        } else {
            let set = self.current.take().ok_or("tpch: RF2 without its RF1")?;
            let (from, _) = offsets(set.round);
            for row in &set.orders {
                wb.delete(&t.orders, &[at(row, from)?]).map_err(err)?;
            }
            for row in &set.lineitems {
                let linenumber = row.get(t.linenumber).ok_or("tpch: short lineitem row")?;
                wb.delete(&t.lineitem, &[at(row, from)?, linenumber.clone()]).map_err(err)?;
            }
        }
        let rows = wb.len() as u64;
        wb.insert(&t.log, &[Value::BigInt(f as i64)]).map_err(err)?;
        self.db.write(wb, &WriteOptions::default()).map_err(err)?;
        self.applied = f;
        Ok(rows)
    }
}

/// What the refresh stream did while the queries ran.
pub(crate) struct Refreshed {
    pub functions: u64,
    pub rows: u64,
    /// Seconds the stream ran: until the queries ended, or until it applied its pairs.
    pub seconds: f64,
}

/// Runs `queries` (a closure running the query stream) while a refresh stream applies
/// functions to `db` back to back, `pairs` pairs of them if given; returns the closure's result
/// and what the stream did.
pub(crate) fn beside<T>(
    db: &Arc<Db>,
    sf: f64,
    pairs: Option<u64>,
    queries: impl FnOnce() -> Result<T, String>,
) -> Result<(T, Refreshed), String> {
    let mut stream = Stream::new(db.clone(), sf)?;
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let last = pairs.map_or(u64::MAX, |p| p.saturating_mul(2));
    let (out, done) = std::thread::scope(|s| {
        let writer = s.spawn(|| -> Result<(u64, f64), String> {
            let mut rows = 0;
            while !stop.load(Ordering::Relaxed) && stream.applied < last {
                rows += stream.apply_next()?;
            }
            Ok((rows, t0.elapsed().as_secs_f64()))
        });
        let out = queries();
        stop.store(true, Ordering::Relaxed);
        let done = writer.join().map_err(|_| "tpch: the refresh stream panicked".to_string());
        (out, done)
    });
    let (rows, seconds) = done??;
    Ok((out?, Refreshed { functions: stream.applied, rows, seconds }))
}

/// The count of `tpch_refresh` in a `SELECT count(*)` result: the functions a snapshot saw.
pub(crate) fn count_of(batches: &[RecordBatch]) -> Result<u64, String> {
    batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .and_then(|b| b.column(0).as_any().downcast_ref::<Int64Array>().filter(|c| !c.is_null(0)).map(|c| c.value(0)))
        .map(|n| n as u64)
        .ok_or_else(|| format!("tpch: counting {LOG_TABLE} returned no count"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn rounds_move_rows_slot_by_slot_and_back() {
        assert_eq!(offsets(0), (0, 8));
        assert_eq!(offsets(1), (8, 16));
        assert_eq!(offsets(2), (16, 24));
        assert_eq!(offsets(3), (24, 0), "the fourth round's copies go back to the generated keys");
        assert_eq!(offsets(4), offsets(0));
    }

    #[test]
    fn sets_hold_the_generated_keys_their_bounds_name() {
        let sf = 0.01;
        let bounds = set_bounds(sf);
        assert_eq!(bounds.len(), 1000, "15,000 orders in sets of 15");
        assert_eq!(bounds[0], (1, 39), "keys 1-7, 32-39: 15 orders");
        let mut sets = Sets::new(sf);
        let mut last_line_key = 0;
        for (i, &(lo, hi)) in bounds.iter().enumerate().take(5) {
            let set = sets.next_set().unwrap();
            assert_eq!(key_of(&set.orders[0]).unwrap(), lo, "set {i}");
            assert_eq!(key_of(set.orders.last().unwrap()).unwrap(), hi, "set {i}");
            // Every line item of the set's orders, and no other.
            let keys: Vec<i64> = set.orders.iter().map(|r| key_of(r).unwrap()).collect();
            assert!(!set.lineitems.is_empty());
            for l in &set.lineitems {
                let k = key_of(l).unwrap();
                assert!(keys.contains(&k), "set {i}: line item of order {k}");
                assert!(k >= last_line_key);
                last_line_key = k;
            }
            let with_items: std::collections::BTreeSet<i64> =
                set.lineitems.iter().map(|l| key_of(l).unwrap()).collect();
            assert_eq!(with_items.len(), keys.len(), "set {i}: every order has line items");
        }
    }

    #[test]
    fn functions_insert_copies_then_delete_the_originals_atomically_logged() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Db::open(dir.path(), strata::Options::default()).unwrap());
        let sf = 0.001;
        let progress = std::sync::atomic::AtomicU64::new(0);
        super::super::load::load_strata(&db, sf, 1, &TableOptions::default(), &progress, true).unwrap();
        let rows = |t: &str| {
            let t = db.table(t).unwrap();
            let names: Vec<&str> = t.schema().columns().iter().map(|c| c.name.as_str()).collect();
            let all = t.projection(&names).unwrap();
            t.scan(&strata::KeyRange::all(), &all, &strata::ReadOptions::default())
                .unwrap()
                .map(|r| r.unwrap())
                .collect::<Vec<_>>()
        };
        let count = |t: &str| rows(t).len();
        let (orders, lineitems) = (count("orders"), count("lineitem"));
        let mut stream = Stream::new(db.clone(), sf).unwrap();
        let n = set_size(sf) as usize;
        let rf1 = stream.apply_next().unwrap();
        assert_eq!(count("orders"), orders + n);
        let added = count("lineitem") - lineitems;
        assert_eq!(rf1 as usize, n + added);
        // The copy of order 1 is order 9, with order 1's values.
        let get = |k: i64| rows("orders").into_iter().find(|r| r[0] == Value::BigInt(k));
        let (one, nine) = (get(1).unwrap(), get(9).unwrap());
        assert_eq!(one[1..], nine[1..]);
        let rf2 = stream.apply_next().unwrap();
        assert_eq!(rf2, rf1);
        assert_eq!((count("orders"), count("lineitem")), (orders, lineitems));
        assert!(get(1).is_none() && get(9).is_some());
        assert_eq!(count(LOG_TABLE), 2);
        // After the last set of a round, the next round moves the copies on by 8 keys.
        let pairs = set_bounds(sf).len() as u64;
        let slots = |t: &str| rows(t).iter().map(|r| key_of(r).unwrap().rem_euclid(32) / SLOT).collect::<BTreeSet<_>>();
        while stream.applied < 2 * pairs {
            stream.apply_next().unwrap();
        }
        assert_eq!((count("orders"), count("lineitem")), (orders, lineitems));
        assert_eq!((slots("orders"), slots("lineitem")), ([1].into(), [1].into()), "every row is a copy");
        stream.apply_next().unwrap();
        assert_eq!(get(9).unwrap()[1..], one[1..]);
        assert_eq!(get(17).unwrap()[1..], one[1..], "order 1's row moves to 17 in the second round");
        stream.apply_next().unwrap();
        assert!(get(9).is_none());
        assert_eq!((count("orders"), count("lineitem")), (orders, lineitems));
    }
}
