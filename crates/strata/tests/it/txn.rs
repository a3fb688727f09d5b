//! Transactions: reads at the snapshot with the transaction's own writes over them, all or
//! nothing at commit, first committer wins on the rows written (plain writes included), read-only
//! transactions that never lose, both engines in one transaction, and no lost update under
//! concurrent increments while flushes and compactions run.

use crate::common;

use std::sync::Arc;

use crate::common::tiny_options;
use strata::vfs::OsFs;
use strata::{
    scan::ScanRequest, Column, ColumnType, Db, Engine, Error, Isolation, KeyRange, Locked, Options, Projection,
    ReadOptions, Schema, Table, TableOptions, TxnOptions, Value, WriteBatch, WriteOptions,
};

fn schema() -> Schema {
    Schema::new(
        vec![
            Column::new("id", ColumnType::BigInt),
            Column::new("n", ColumnType::BigInt),
            Column::new("s", ColumnType::Text),
        ],
        &["id"],
    )
    .unwrap()
}

fn open(dir: &std::path::Path, opts: Options) -> (Db, Table, Table) {
    let db = Db::open(dir, opts).unwrap();
    let lsm = db.create_table("lsm", schema(), TableOptions::default()).unwrap();
    let lin = db.create_table("lin", schema(), TableOptions::default().with_engine(Engine::Lineage)).unwrap();
    (db, lsm, lin)
}

fn row(id: i64, n: i64, s: &str) -> Vec<Value> {
    vec![Value::BigInt(id), Value::BigInt(n), Value::Text(s.into())]
}

fn get(t: &Table, id: i64) -> Option<Vec<Value>> {
    t.get(&[Value::BigInt(id)], &Projection::All, &ReadOptions::default()).unwrap()
}

fn tx_get(tx: &strata::Transaction, t: &Table, id: i64) -> Option<Vec<Value>> {
    tx.get(t, &[Value::BigInt(id)], &Projection::All).unwrap()
}

fn n_of(r: Option<Vec<Value>>) -> i64 {
    match r.as_deref() {
        Some([_, Value::BigInt(n), _]) => *n,
        other => panic!("no counter row: {other:?}"),
    }
}

const W: WriteOptions = WriteOptions { sync: false };

#[test]
fn reads_see_the_snapshot_with_the_transactions_own_writes_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, lin) = open(dir.path(), Options::default());
    for t in [&lsm, &lin] {
        t.insert(&row(1, 10, "one")).unwrap();
        t.insert(&row(2, 20, "two")).unwrap();
        let mut tx = db.begin(&TxnOptions::default()).unwrap();
        // A commit after the snapshot is not seen.
        t.update(&[Value::BigInt(1)], &[("n", Value::BigInt(11))]).unwrap();
        assert_eq!(tx_get(&tx, t, 1), Some(row(1, 10, "one")), "{}", t.name());
        // A partial update lies over the snapshot's row; an insert and a delete are seen at once.
        tx.update(t, &[Value::BigInt(2)], &[("s", Value::Text("TWO".into()))]).unwrap();
        tx.insert(t, &row(3, 30, "three")).unwrap();
        tx.delete(t, &[Value::BigInt(4)]).unwrap();
        assert_eq!(tx_get(&tx, t, 2), Some(row(2, 20, "TWO")));
        assert_eq!(tx_get(&tx, t, 3), Some(row(3, 30, "three")));
        assert_eq!(tx_get(&tx, t, 4), None);
        // Later writes to a row fold over the earlier ones, in order.
        tx.update(t, &[Value::BigInt(3)], &[("n", Value::BigInt(33))]).unwrap();
        tx.delete(t, &[Value::BigInt(2)]).unwrap();
        tx.insert(t, &row(2, 22, "again")).unwrap();
        assert_eq!(tx_get(&tx, t, 3), Some(row(3, 33, "three")));
        assert_eq!(tx_get(&tx, t, 2), Some(row(2, 22, "again")));
        let projected = tx.get(t, &[Value::BigInt(3)], &t.projection(&["s"]).unwrap()).unwrap();
        assert_eq!(projected, Some(vec![Value::Text("three".into())]));
        // A partial update of a row that does not exist stays no row.
        tx.update(t, &[Value::BigInt(9)], &[("n", Value::BigInt(9))]).unwrap();
        assert_eq!(tx_get(&tx, t, 9), None);
        // Nothing is seen outside before the commit.
        assert_eq!(get(t, 3), None);
        assert_eq!(get(t, 2), Some(row(2, 20, "two")));
        tx.commit(&W).unwrap();
        assert_eq!(get(t, 3), Some(row(3, 33, "three")));
        assert_eq!(get(t, 2), Some(row(2, 22, "again")));
        assert_eq!(get(t, 1), Some(row(1, 11, "one")), "the commit after the snapshot stays");
    }
}

#[test]
fn a_write_to_a_row_committed_after_the_snapshot_fails_at_once_and_the_transaction_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, lin) = open(dir.path(), Options::default());
    for t in [&lsm, &lin] {
        t.insert(&row(1, 10, "one")).unwrap();
        let mut tx = db.begin(&TxnOptions::default()).unwrap();
        tx.insert(t, &row(5, 5, "five")).unwrap();
        t.update(&[Value::BigInt(1)], &[("n", Value::BigInt(11))]).unwrap();
        let e = tx.delete(t, &[Value::BigInt(1)]).unwrap_err();
        assert!(matches!(&e, Error::Conflict { table, key } if table == t.name() && key.contains('1')), "{e}");
        assert!(e.is_retryable());
        // Lost: later writes and the commit report it; reads go on at the snapshot.
        assert!(matches!(tx.insert(t, &row(6, 6, "six")), Err(Error::Conflict { .. })));
        assert_eq!(tx_get(&tx, t, 1), Some(row(1, 10, "one")));
        assert!(matches!(tx.commit(&W), Err(Error::Conflict { .. })));
        assert_eq!(get(t, 5), None, "nothing of a lost transaction is written");
        assert_eq!(get(t, 1), Some(row(1, 11, "one")));
    }
}

/// A savepoint puts the writes held when it was taken back: later writes (and a write that lost
/// a conflict, with the loss) are undone, earlier ones and the snapshot stay, and the
/// transaction commits what is left.
#[test]
fn rollback_to_a_savepoint_undoes_later_writes_and_a_lost_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, lin) = open(dir.path(), Options::default());
    for t in [&lsm, &lin] {
        t.insert(&row(1, 10, "one")).unwrap();
        let mut tx = db.begin(&TxnOptions::default()).unwrap();
        let empty = tx.savepoint();
        tx.insert(t, &row(2, 2, "two")).unwrap();
        let point = tx.savepoint();
        tx.insert(t, &row(3, 3, "three")).unwrap();
        tx.update(t, &[Value::BigInt(2)], &[("n", Value::BigInt(22))]).unwrap();
        t.update(&[Value::BigInt(1)], &[("n", Value::BigInt(11))]).unwrap();
        assert!(matches!(tx.delete(t, &[Value::BigInt(1)]), Err(Error::Conflict { .. })));
        tx.rollback_to(&point);
        assert_eq!(tx_get(&tx, t, 3), None);
        assert_eq!(tx_get(&tx, t, 2), Some(row(2, 2, "two")));
        assert_eq!(tx_get(&tx, t, 1), Some(row(1, 10, "one")), "the snapshot stays");
        // The point stays usable, and the one before any write empties the transaction.
        tx.insert(t, &row(4, 4, "four")).unwrap();
        tx.rollback_to(&point);
        assert_eq!(tx.rows_written(), 1);
        tx.rollback_to(&empty);
        assert_eq!(tx.rows_written(), 0);
        tx.rollback_to(&point);
        tx.commit(&W).unwrap();
        assert_eq!(get(t, 2), Some(row(2, 2, "two")));
        assert_eq!((get(t, 3), get(t, 4)), (None, None));
        assert_eq!(get(t, 1), Some(row(1, 11, "one")));
    }
}

fn scan(tx: &strata::Transaction, t: &Table, range: &KeyRange, projection: &Projection) -> Vec<Vec<Value>> {
    tx.scan(t, range, projection).unwrap().map(Result::unwrap).collect()
}

#[test]
fn scans_see_the_transactions_own_writes_in_key_order() {
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, lin) = open(dir.path(), tiny_options(Arc::new(OsFs)));
    for t in [&lsm, &lin] {
        for i in (0..40).step_by(2) {
            t.insert(&row(i, i, "base")).unwrap();
        }
        db.flush().unwrap();
        let mut tx = db.begin(&TxnOptions::default()).unwrap();
        // After the snapshot: not seen by the transaction.
        t.insert(&row(1, 1, "later")).unwrap();
        tx.insert(t, &row(3, 3, "new")).unwrap(); // between base rows
        tx.update(t, &[Value::BigInt(4)], &[("s", Value::Text("upd".into()))]).unwrap(); // over a base row
        tx.delete(t, &[Value::BigInt(6)]).unwrap();
        tx.update(t, &[Value::BigInt(7)], &[("n", Value::BigInt(7))]).unwrap(); // no row: stays none
        tx.insert(t, &row(100, 100, "last")).unwrap(); // after every base row
        tx.insert(t, &row(-1, -1, "first")).unwrap(); // before every base row
        let mut want: Vec<Vec<Value>> = (0..40).step_by(2).map(|i| row(i, i, "base")).collect();
        want.retain(|r| r[0] != Value::BigInt(6));
        want[2] = row(4, 4, "upd");
        want.insert(0, row(-1, -1, "first"));
        want.insert(3, row(3, 3, "new"));
        want.push(row(100, 100, "last"));
        assert_eq!(scan(&tx, t, &KeyRange::all(), &Projection::All), want, "{}", t.name());
        // A range and a projection.
        let range = KeyRange::half_open(vec![Value::BigInt(3)], vec![Value::BigInt(8)]);
        let s = t.projection(&["s", "id"]).unwrap();
        let got = scan(&tx, t, &range, &s);
        let text = |x: &str| Value::Text(x.into());
        assert_eq!(got, vec![vec![text("new"), Value::BigInt(3)], vec![text("upd"), Value::BigInt(4)]], "{}", t.name());
        // A range the transaction did not write reads the snapshot alone.
        let untouched = KeyRange::half_open(vec![Value::BigInt(10)], vec![Value::BigInt(40)]);
        assert_eq!(scan(&tx, t, &untouched, &Projection::All).len(), 15);
        tx.rollback();
    }
}

fn batches(tx: &strata::Transaction, t: &Table, req: &ScanRequest) -> Vec<Vec<Value>> {
    tx.scan_batches(t, req).unwrap().flat_map(|b| strata::scan::batch_rows(&b.unwrap())).collect()
}

#[test]
fn analytical_scans_see_the_transactions_own_writes() {
    use strata::scan::{AggFunc, Aggregate, CmpOp, Expr};
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, lin) = open(dir.path(), tiny_options(Arc::new(OsFs)));
    for t in [&lsm, &lin] {
        for i in 0..300 {
            t.insert(&row(i, i % 10, "base")).unwrap();
        }
        db.flush().unwrap();
        let mut tx = db.begin(&TxnOptions::default()).unwrap();
        // After the snapshot: not seen.
        t.insert(&row(1000, 5, "later")).unwrap();
        // Row 500 with n = 5 is new, row 7 gets n = 5, row 15 (n = 5) goes.
        tx.insert(t, &row(500, 5, "new")).unwrap();
        tx.update(t, &[Value::BigInt(7)], &[("n", Value::BigInt(5))]).unwrap();
        tx.delete(t, &[Value::BigInt(15)]).unwrap();
        // Rows with n = 5, their ids, as the transaction's row scan sees them.
        let want: Vec<Vec<Value>> = scan(&tx, t, &KeyRange::all(), &Projection::All)
            .into_iter()
            .filter(|r| r[1] == Value::BigInt(5))
            .map(|r| vec![r[0].clone()])
            .collect();
        assert_eq!(want.len(), 30 - 1 + 1 + 1, "{}", t.name());
        let five = Expr::cmp("n", CmpOp::Eq, Value::BigInt(5));
        let req = ScanRequest::new().with_columns(&["id"]).with_filter(five.clone());
        assert_eq!(batches(&tx, t, &req), want, "{}: filtered rows", t.name());
        let agg = ScanRequest::new()
            .with_filter(five)
            .with_aggregate(Aggregate::count_star())
            .with_aggregate(Aggregate::new(AggFunc::Max, "id"));
        assert_eq!(
            batches(&tx, t, &agg),
            vec![vec![Value::BigInt(31), Value::BigInt(500)]],
            "{}: aggregates",
            t.name()
        );
        let limited = ScanRequest::new()
            .with_columns(&["id", "s"])
            .with_range(KeyRange::half_open(vec![Value::BigInt(490)], vec![Value::BigInt(2000)]))
            .with_limit(1);
        assert_eq!(
            batches(&tx, t, &limited),
            vec![vec![Value::BigInt(500), Value::Text("new".into())]],
            "{}: range and limit",
            t.name()
        );
        // Outside the transaction nothing of it shows.
        let outside: Vec<Vec<Value>> = t
            .scan_batches(&req, &ReadOptions::default())
            .unwrap()
            .flat_map(|b| strata::scan::batch_rows(&b.unwrap()))
            .collect();
        assert!(!outside.contains(&vec![Value::BigInt(500)]));
        tx.rollback();
    }
}

#[test]
fn a_committed_transaction_is_applied_whole_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (db, lsm, lin) = open(dir.path(), Options::default());
        let mut tx = db.begin(&TxnOptions::default()).unwrap();
        for i in 0..50 {
            tx.insert(&lsm, &row(i, i, "l")).unwrap();
            tx.insert(&lin, &row(i, -i, "g")).unwrap();
        }
        assert_eq!(tx.rows_written(), 100);
        tx.commit(&WriteOptions { sync: true }).unwrap();
        assert_eq!(get(&lsm, 49), Some(row(49, 49, "l")));
        assert_eq!(get(&lin, 49), Some(row(49, -49, "g")));
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let (lsm, lin) = (db.table("lsm").unwrap(), db.table("lin").unwrap());
    for i in 0..50 {
        assert_eq!(get(&lsm, i), Some(row(i, i, "l")));
        assert_eq!(get(&lin, i), Some(row(i, -i, "g")));
    }
}

#[test]
fn the_first_committer_wins_and_the_loser_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, lin) = open(dir.path(), Options::default());
    for t in [&lsm, &lin] {
        t.insert(&row(1, 0, "a")).unwrap();
        let mut a = db.begin(&TxnOptions::default()).unwrap();
        let mut b = db.begin(&TxnOptions::default()).unwrap();
        a.update(t, &[Value::BigInt(1)], &[("n", Value::BigInt(1))]).unwrap();
        b.update(t, &[Value::BigInt(1)], &[("s", Value::Text("b".into()))]).unwrap();
        b.insert(t, &row(2, 2, "b")).unwrap();
        a.commit(&W).unwrap();
        let e = b.commit(&W).unwrap_err();
        assert!(matches!(&e, Error::Conflict { table, .. } if table == t.name()), "{e}");
        assert_eq!(get(t, 1), Some(row(1, 1, "a")));
        assert_eq!(get(t, 2), None);
    }
    // Across engines: a transaction writing both loses on either.
    let mut a = db.begin(&TxnOptions::default()).unwrap();
    a.update(&lsm, &[Value::BigInt(1)], &[("n", Value::BigInt(5))]).unwrap();
    a.update(&lin, &[Value::BigInt(1)], &[("n", Value::BigInt(5))]).unwrap();
    lin.update(&[Value::BigInt(1)], &[("n", Value::BigInt(7))]).unwrap();
    assert!(matches!(a.commit(&W), Err(Error::Conflict { table, .. }) if table == "lin"));
    assert_eq!(n_of(get(&lsm, 1)), 1, "the LSM half of a lost transaction is not written");
}

#[test]
fn disjoint_rows_commit_and_write_skew_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (db, t, _) = open(dir.path(), Options::default());
    t.insert(&row(1, 10, "")).unwrap();
    t.insert(&row(2, 20, "")).unwrap();
    // Each reads both rows and writes only one (G2-item): snapshot isolation lets both commit.
    let mut a = db.begin(&TxnOptions::default()).unwrap();
    let mut b = db.begin(&TxnOptions::default()).unwrap();
    let sum = |tx: &strata::Transaction| n_of(tx_get(tx, &t, 1)) + n_of(tx_get(tx, &t, 2));
    let (sa, sb) = (sum(&a), sum(&b));
    a.update(&t, &[Value::BigInt(1)], &[("n", Value::BigInt(10 - sa))]).unwrap();
    b.update(&t, &[Value::BigInt(2)], &[("n", Value::BigInt(20 - sb))]).unwrap();
    a.commit(&W).unwrap();
    b.commit(&W).unwrap();
    assert_eq!(n_of(get(&t, 1)) + n_of(get(&t, 2)), 30 - 60);
}

#[test]
fn rollback_writes_nothing_and_read_only_transactions_never_lose() {
    let dir = tempfile::tempdir().unwrap();
    let (db, t, _) = open(dir.path(), Options::default());
    t.insert(&row(1, 1, "")).unwrap();
    let mut tx = db.begin(&TxnOptions::default()).unwrap();
    tx.insert(&t, &row(2, 2, "")).unwrap();
    tx.rollback();
    let mut dropped = db.begin(&TxnOptions::default()).unwrap();
    dropped.delete(&t, &[Value::BigInt(1)]).unwrap();
    drop(dropped);
    assert_eq!(get(&t, 2), None);
    assert_eq!(get(&t, 1), Some(row(1, 1, "")));

    let mut ro = db.begin(&TxnOptions { read_only: true, ..Default::default() }).unwrap();
    t.update(&[Value::BigInt(1)], &[("n", Value::BigInt(5))]).unwrap();
    assert_eq!(n_of(tx_get(&ro, &t, 1)), 1);
    assert!(matches!(ro.insert(&t, &row(3, 3, "")), Err(Error::InvalidArgument(_))));
    ro.commit(&W).unwrap();
    // A write transaction that wrote nothing commits too, whatever changed under it.
    let empty = db.begin(&TxnOptions::default()).unwrap();
    t.update(&[Value::BigInt(1)], &[("n", Value::BigInt(6))]).unwrap();
    empty.commit(&W).unwrap();
}

#[test]
fn a_transaction_older_than_the_window_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (db, t, _) = open(dir.path(), Options { txn_window_bytes: 4096, ..Options::default() });
    let mut old = db.begin(&TxnOptions::default()).unwrap();
    let mut wrote_early = db.begin(&TxnOptions::default()).unwrap();
    wrote_early.insert(&t, &row(6000, 0, "")).unwrap();
    for i in 0..1000 {
        t.insert(&row(i, i, "")).unwrap();
    }
    // Refused at its write, and then at its commit.
    let e = old.insert(&t, &row(5000, 0, "")).unwrap_err();
    assert!(matches!(e, Error::TxnTooOld { .. }), "{e}");
    let e = old.commit(&W).unwrap_err();
    assert!(matches!(e, Error::TxnTooOld { .. }), "{e}");
    // Its write was checked while the window still reached back: refused at the commit.
    let e = wrote_early.commit(&W).unwrap_err();
    assert!(matches!(e, Error::TxnTooOld { .. }), "{e}");
    assert_eq!(get(&t, 5000), None);
    assert_eq!(get(&t, 6000), None);
    // A transaction begun now is checked exactly again.
    let mut young = db.begin(&TxnOptions::default()).unwrap();
    young.insert(&t, &row(5000, 0, "")).unwrap();
    young.commit(&W).unwrap();
}

#[test]
fn writes_past_the_transaction_size_limit_are_refused_and_the_rest_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (db, t, _) = open(dir.path(), Options { txn_max_bytes: 2000, ..Options::default() });
    let mut tx = db.begin(&TxnOptions::default()).unwrap();
    let mut added = 0;
    let refused = loop {
        match tx.insert(&t, &row(added, 0, &"x".repeat(100))) {
            Ok(()) => added += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(refused, Error::OutOfMemory(_)), "{refused}");
    assert!(added > 5);
    tx.commit(&W).unwrap();
    assert!(get(&t, added - 1).is_some());
    assert_eq!(get(&t, added), None);
}

/// `write_batch` adds a batch's operations across tables and engines together: a batch the size
/// limit refuses adds none of them, one that fits adds all, and reads see them.
#[test]
fn a_batch_joins_a_transaction_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, lin) = open(dir.path(), Options { txn_max_bytes: 2000, ..Options::default() });
    let mut tx = db.begin(&TxnOptions::default()).unwrap();
    let mut small = WriteBatch::new();
    small.insert(&lsm, &row(1, 1, "a")).unwrap();
    small.insert(&lin, &row(1, 2, "b")).unwrap();
    tx.write_batch(small).unwrap();
    let mut big = WriteBatch::new();
    for i in 10..40 {
        big.insert(&lsm, &row(i, 0, &"x".repeat(100))).unwrap();
    }
    big.delete(&lin, &[Value::BigInt(1)]).unwrap();
    let refused = tx.write_batch(big).unwrap_err();
    assert!(matches!(refused, Error::OutOfMemory(_)), "{refused}");
    assert_eq!(tx.rows_written(), 2);
    assert_eq!(n_of(tx_get(&tx, &lin, 1)), 2);
    tx.commit(&W).unwrap();
    assert_eq!(n_of(get(&lsm, 1)), 1);
    assert_eq!(n_of(get(&lin, 1)), 2);
    assert_eq!(get(&lsm, 10), None);
}

#[test]
fn a_table_of_another_database_is_refused() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (db1, _, _) = open(d1.path(), Options::default());
    let (_db2, t2, _) = open(d2.path(), Options::default());
    let mut tx = db1.begin(&TxnOptions::default()).unwrap();
    assert!(matches!(tx.insert(&t2, &row(1, 1, "")), Err(Error::InvalidArgument(_))));
    assert!(matches!(tx.get(&t2, &[Value::BigInt(1)], &Projection::All), Err(Error::InvalidArgument(_))));
}

/// Threads add to a few hot counters in transactions (retried on conflict) while plain writes,
/// flushes and compactions go on; no increment may be lost or applied twice.
#[test]
fn concurrent_increments_lose_no_update() {
    let seed = common::seeds(&[7])[0];
    println!("seed {seed} (replay: STRATA_SEEDS={seed})");
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, lin) = open(dir.path(), tiny_options(Arc::new(OsFs)));
    let db = Arc::new(db);
    const COUNTERS: i64 = 4;
    const THREADS: u64 = 4;
    const PER_THREAD: i64 = 150;
    for t in [&lsm, &lin] {
        for c in 0..COUNTERS {
            t.insert(&row(c, 0, "")).unwrap();
        }
    }
    let conflicts = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for ti in 0..THREADS {
            let (db, lsm, lin, conflicts) = (&db, &lsm, &lin, &conflicts);
            s.spawn(move || {
                use rand::{Rng, SeedableRng};
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (ti + 1));
                for i in 0..PER_THREAD {
                    let c = rng.gen_range(0..COUNTERS);
                    let mut tries = 0;
                    // One increment on each engine, in one transaction.
                    db.transaction(&TxnOptions::default(), &W, |tx| {
                        tries += 1;
                        for t in [lsm, lin] {
                            let n = n_of(tx.get(t, &[Value::BigInt(c)], &Projection::All)?);
                            tx.update(t, &[Value::BigInt(c)], &[("n", Value::BigInt(n + 1))])?;
                        }
                        Ok(())
                    })
                    .unwrap_or_else(|e| panic!("seed {seed}: thread {ti} increment {i}: {e}"));
                    conflicts.fetch_add(tries - 1, std::sync::atomic::Ordering::Relaxed);
                    // Filler rows keep flushes and compactions going under the transactions.
                    let filler = 1000 + (ti as i64) * 10_000 + i;
                    lsm.insert(&row(filler, i, &"f".repeat(200))).unwrap();
                }
            });
        }
    });
    for t in [&lsm, &lin] {
        let total: i64 = (0..COUNTERS).map(|c| n_of(get(t, c))).sum();
        assert_eq!(total, THREADS as i64 * PER_THREAD, "seed {seed}: table {}", t.name());
    }
    println!("{} conflicts retried", conflicts.into_inner());
}

const RC: TxnOptions = TxnOptions { read_only: false, isolation: Isolation::ReadCommitted };

#[test]
fn a_second_locker_waits_for_the_first_and_under_read_committed_reads_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, lin) = open(dir.path(), Options::default());
    let db = Arc::new(db);
    for t in [&lsm, &lin] {
        t.insert(&row(1, 10, "")).unwrap();
        let key = [Value::BigInt(1)];
        let mut a = db.begin(&RC).unwrap();
        let mut b = db.begin(&RC).unwrap();
        assert_eq!(a.lock(t, &key).unwrap(), Locked::Current);
        a.update(t, &key, &[("n", Value::BigInt(11))]).unwrap();
        assert_eq!(b.try_lock(t, &key).unwrap(), None, "{}: the row is held", t.name());
        let waiter = {
            let t = t.clone();
            std::thread::spawn(move || {
                let locked = b.lock(&t, &[Value::BigInt(1)]).unwrap();
                (b, locked)
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished(), "{}: the second locker did not wait", t.name());
        a.commit(&W).unwrap();
        let (mut b, locked) = waiter.join().unwrap();
        assert_eq!(locked, Locked::Changed, "{}", t.name());
        // Still at its old snapshot until the next statement.
        assert_eq!(n_of(tx_get(&b, t, 1)), 10);
        b.new_statement();
        assert_eq!(b.lock(t, &key).unwrap(), Locked::Current);
        let n = n_of(tx_get(&b, t, 1));
        assert_eq!(n, 11);
        b.update(t, &key, &[("n", Value::BigInt(n + 1))]).unwrap();
        b.commit(&W).unwrap();
        assert_eq!(n_of(get(t, 1)), 12, "{}", t.name());
    }
}

#[test]
fn under_snapshot_isolation_a_row_locked_after_another_commit_loses() {
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, _) = open(dir.path(), Options::default());
    lsm.insert(&row(1, 10, "")).unwrap();
    let key = [Value::BigInt(1)];
    let mut b = db.begin(&TxnOptions::default()).unwrap();
    let mut a = db.begin(&TxnOptions::default()).unwrap();
    a.lock(&lsm, &key).unwrap();
    a.update(&lsm, &key, &[("n", Value::BigInt(11))]).unwrap();
    a.commit(&W).unwrap();
    assert!(matches!(b.lock(&lsm, &key), Err(Error::Conflict { .. })));
    // The transaction is lost, as after a losing write.
    assert!(matches!(b.update(&lsm, &[Value::BigInt(2)], &[("n", Value::BigInt(1))]), Err(Error::Conflict { .. })));
    // Under snapshot isolation new_statement keeps the snapshot.
    let mut c = db.begin(&TxnOptions::default()).unwrap();
    lsm.insert(&row(1, 20, "")).unwrap();
    c.new_statement();
    assert_eq!(n_of(tx_get(&c, &lsm, 1)), 11);
}

#[test]
fn a_lock_that_would_close_a_cycle_of_waits_is_refused_as_a_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, _) = open(dir.path(), Options::default());
    let db = Arc::new(db);
    let (one, two) = ([Value::BigInt(1)], [Value::BigInt(2)]);
    let mut a = db.begin(&RC).unwrap();
    let mut b = db.begin(&RC).unwrap();
    a.lock(&lsm, &one).unwrap();
    b.lock(&lsm, &two).unwrap();
    let waiter = {
        let lsm = lsm.clone();
        std::thread::spawn(move || {
            let r = a.lock(&lsm, &[Value::BigInt(2)]);
            (a, r)
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(matches!(b.lock(&lsm, &one), Err(Error::Deadlock { .. })));
    // Rolling the refused transaction back releases its row: the waiter gets it.
    b.rollback();
    let (a, r) = waiter.join().unwrap();
    assert_eq!(r.unwrap(), Locked::Current);
    drop(a);
    // Every lock went with its transaction.
    let mut c = db.begin(&RC).unwrap();
    assert_eq!(c.try_lock(&lsm, &one).unwrap(), Some(Locked::Current));
    assert_eq!(c.try_lock(&lsm, &two).unwrap(), Some(Locked::Current));
}

#[test]
fn a_read_committed_commit_still_loses_to_a_plain_write_after_the_row_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, _) = open(dir.path(), Options::default());
    lsm.insert(&row(1, 10, "")).unwrap();
    let key = [Value::BigInt(1)];
    let mut a = db.begin(&RC).unwrap();
    lsm.insert(&row(1, 20, "")).unwrap();
    a.new_statement();
    // Locked and read at the new statement's snapshot: current.
    assert_eq!(a.lock(&lsm, &key).unwrap(), Locked::Current);
    assert_eq!(n_of(tx_get(&a, &lsm, 1)), 20);
    a.update(&lsm, &key, &[("n", Value::BigInt(21))]).unwrap();
    // A plain write takes no lock; the commit finds it.
    lsm.insert(&row(1, 30, "")).unwrap();
    assert!(matches!(a.commit(&W), Err(Error::Conflict { .. })));
    assert_eq!(n_of(get(&lsm, 1)), 30);
}

/// Increments under READ COMMITTED with row locks: every transaction commits the first time
/// (the second writer of a counter waits, then reads it again), and no update is lost.
#[test]
fn read_committed_increments_under_locks_never_lose_and_never_retry() {
    let seed = common::seeds(&[11])[0];
    println!("seed {seed} (replay: STRATA_SEEDS={seed})");
    let dir = tempfile::tempdir().unwrap();
    let (db, lsm, lin) = open(dir.path(), tiny_options(Arc::new(OsFs)));
    const COUNTERS: i64 = 3;
    const THREADS: u64 = 4;
    const PER_THREAD: i64 = 100;
    for t in [&lsm, &lin] {
        for c in 0..COUNTERS {
            t.insert(&row(c, 0, "")).unwrap();
        }
    }
    std::thread::scope(|s| {
        for ti in 0..THREADS {
            let (db, lsm, lin) = (&db, &lsm, &lin);
            s.spawn(move || {
                use rand::{Rng, SeedableRng};
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ (ti + 1));
                for i in 0..PER_THREAD {
                    // Counters in one order (by table, then key), so no cycle of waits forms.
                    let c = rng.gen_range(0..COUNTERS);
                    let mut tx = db.begin(&RC).unwrap();
                    for t in [lsm, lin] {
                        tx.new_statement();
                        let key = [Value::BigInt(c)];
                        if tx.lock(t, &key).unwrap() == Locked::Changed {
                            tx.new_statement();
                        }
                        let n = n_of(tx.get(t, &key, &Projection::All).unwrap());
                        tx.update(t, &key, &[("n", Value::BigInt(n + 1))]).unwrap();
                    }
                    tx.commit(&W).unwrap_or_else(|e| panic!("seed {seed}: thread {ti} increment {i}: {e}"));
                }
            });
        }
    });
    for t in [&lsm, &lin] {
        let total: i64 = (0..COUNTERS).map(|c| n_of(get(t, c))).sum();
        assert_eq!(total, THREADS as i64 * PER_THREAD, "seed {seed}: table {}", t.name());
    }
}

/// A transaction's reads (gets, full and ranged scans) against a model of its snapshot with its
/// writes laid over, while plain writes change the table under it; a write to a row written
/// outside loses it at once; then the commit: lost exactly when a plain write touched a row it
/// wrote (before or after), and the table afterwards as the model says.
#[test]
fn random_transactions_read_and_commit_as_the_model_says() {
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;
    type Model = BTreeMap<i64, (i64, String)>;
    let rows_of = |m: &Model, lo: i64, hi: i64| -> Vec<Vec<Value>> {
        m.range(lo..hi).map(|(&k, (n, s))| row(k, *n, s)).collect()
    };
    for seed in common::seeds(&[1, 2, 3, 4]) {
        common::with_seed(seed, |seed| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let dir = tempfile::tempdir().unwrap();
            let (db, lsm, lin) = open(dir.path(), tiny_options(Arc::new(OsFs)));
            for t in [&lsm, &lin] {
                let mut now = Model::new();
                for _ in 0..60 {
                    let k = rng.gen_range(0..80);
                    let n = rng.gen_range(0..1000);
                    t.insert(&row(k, n, "base")).unwrap();
                    now.insert(k, (n, "base".to_string()));
                }
                let mut tx = db.begin(&TxnOptions::default()).unwrap();
                let mut mine = now.clone();
                let (mut wrote, mut outside) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
                let mut lost = false;
                for step in 0..200 {
                    let k = rng.gen_range(0..80);
                    match rng.gen_range(0..10) {
                        0..=4 => {
                            let n = rng.gen_range(0..1000);
                            let what = rng.gen_range(0..5);
                            let done = match what {
                                0..=1 => tx.insert(t, &row(k, n, "tx")),
                                2..=3 => tx.update(t, &[Value::BigInt(k)], &[("n", Value::BigInt(n))]),
                                _ => tx.delete(t, &[Value::BigInt(k)]),
                            };
                            // A row written outside after the snapshot loses the transaction at
                            // once; a lost transaction refuses every write.
                            if lost || outside.contains(&k) {
                                assert!(
                                    matches!(done, Err(Error::Conflict { .. })),
                                    "{} step {step}: {done:?}",
                                    t.name()
                                );
                                lost = true;
                                continue;
                            }
                            done.unwrap();
                            match what {
                                0..=1 => {
                                    mine.insert(k, (n, "tx".into()));
                                }
                                2..=3 => {
                                    if let Some(r) = mine.get_mut(&k) {
                                        r.0 = n;
                                    }
                                }
                                _ => {
                                    mine.remove(&k);
                                }
                            }
                            wrote.insert(k);
                        }
                        5 => {
                            // Outside the transaction, which never sees it: on even seeds
                            // anywhere (the commit likely loses), on odd seeds only on rows the
                            // transaction never writes (it must commit).
                            let k = if seed % 2 == 0 { rng.gen_range(0..100) } else { rng.gen_range(80..100) };
                            let n = rng.gen_range(0..1000);
                            t.insert(&row(k, n, "out")).unwrap();
                            now.insert(k, (n, "out".into()));
                            outside.insert(k);
                        }
                        6..=7 => {
                            let want = mine.get(&k).map(|(n, s)| row(k, *n, s));
                            assert_eq!(tx_get(&tx, t, k), want, "{} step {step}: get {k}", t.name());
                        }
                        _ => {
                            let lo = rng.gen_range(0..80);
                            let hi = rng.gen_range(lo..=90);
                            let range = KeyRange::half_open(vec![Value::BigInt(lo)], vec![Value::BigInt(hi)]);
                            let got = scan(&tx, t, &range, &Projection::All);
                            assert_eq!(got, rows_of(&mine, lo, hi), "{} step {step}: scan {lo}..{hi}", t.name());
                            let req = ScanRequest::new().with_range(range);
                            assert_eq!(batches(&tx, t, &req), got, "{} step {step}: scan_batches {lo}..{hi}", t.name());
                        }
                    }
                }
                assert_eq!(scan(&tx, t, &KeyRange::all(), &Projection::All), rows_of(&mine, i64::MIN, i64::MAX));
                let clash = wrote.intersection(&outside).next().copied();
                println!(
                    "seed {seed}, {}: {} rows written, {} outside, clash {clash:?}, lost at a write {lost}",
                    t.name(),
                    wrote.len(),
                    outside.len()
                );
                match (tx.commit(&W), lost || clash.is_some()) {
                    (Ok(()), false) => {
                        for &k in &wrote {
                            match mine.get(&k) {
                                Some(r) => now.insert(k, r.clone()),
                                None => now.remove(&k),
                            };
                        }
                    }
                    (Err(Error::Conflict { .. }), true) => {}
                    (r, expect_loss) => panic!("{}: commit {r:?}, expected to lose: {expect_loss}", t.name()),
                }
                let all: Vec<Vec<Value>> = t
                    .scan(&KeyRange::all(), &Projection::All, &ReadOptions::default())
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                assert_eq!(all, rows_of(&now, i64::MIN, i64::MAX), "{} after the commit", t.name());
            }
        });
    }
}
