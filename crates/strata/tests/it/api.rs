//! The public API's contracts: bad input is a clear error and never changes stored data; tables
//! come and go; the directory lock; snapshots stay with their database; storage tiers.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::common::tiny_options;
use strata::vfs::{FaultFs, Fs, OsFs};
use strata::{
    AsOf, Column, ColumnType, Db, Engine, Error, KeyRange, Options, Projection, ReadOptions, Schema, TableOptions,
    Tier, TierPlacement, Value, WriteBatch,
};

fn schema() -> Schema {
    Schema::new(
        vec![
            Column::new("id", ColumnType::BigInt),
            Column::not_null("a", ColumnType::Int),
            Column::new("s", ColumnType::Text),
        ],
        &["id"],
    )
    .unwrap()
}

fn all(t: &strata::Table) -> Vec<Vec<Value>> {
    t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap().map(Result::unwrap).collect()
}

#[test]
fn bad_writes_are_errors_and_change_nothing() {
    let fs = FaultFs::new();
    let db = Db::open("/api", tiny_options(Arc::new(fs))).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    t.insert(&[Value::BigInt(1), Value::Int(1), "x".into()]).unwrap();
    let before = all(&t);

    let e = t.insert(&[Value::BigInt(2), Value::Text("no".into()), Value::Null]).unwrap_err();
    assert!(matches!(&e, Error::TypeMismatch { column, .. } if column == "a"), "{e}");
    let e = t.insert(&[Value::BigInt(2), Value::Null, Value::Null]).unwrap_err();
    assert!(e.to_string().contains("NOT NULL"), "{e}");
    let e = t.insert(&[Value::BigInt(2)]).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = t.update(&[Value::BigInt(1)], &[("nope", Value::Int(1))]).unwrap_err();
    assert!(matches!(&e, Error::UnknownColumn { column, .. } if column == "nope"), "{e}");
    let e = t.update(&[Value::BigInt(1)], &[("id", Value::BigInt(5))]).unwrap_err();
    assert!(e.to_string().contains("primary key"), "{e}");
    let e = t.update(&[Value::BigInt(1)], &[("a", Value::Int(1)), ("a", Value::Int(2))]).unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
    let e = t.delete(&[Value::Int(1)]).unwrap_err();
    assert!(matches!(e, Error::TypeMismatch { .. }), "{e}");
    let e = t.get(&[Value::BigInt(1), Value::BigInt(2)], &Projection::All, &ReadOptions::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = t.projection(&["zzz"]).unwrap_err();
    assert!(matches!(e, Error::UnknownColumn { .. }), "{e}");

    // A batch with one bad op is rejected while it is built; nothing of it is written.
    let mut b = WriteBatch::new();
    b.insert(&t, &[Value::BigInt(3), Value::Int(3), Value::Null]).unwrap();
    assert!(b.insert(&t, &[Value::BigInt(4), Value::Null, Value::Null]).is_err());
    assert_eq!(all(&t), before);
}

#[test]
fn tables_are_created_dropped_and_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options { fs: Arc::new(OsFs), ..tiny_options(Arc::new(OsFs)) };
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
        assert!(matches!(db.create_table("t", schema(), TableOptions::default()), Err(Error::TableExists(_))));
        assert!(matches!(db.create_table("", schema(), TableOptions::default()), Err(Error::InvalidArgument(_))));
        t.insert(&[Value::BigInt(1), Value::Int(1), Value::Null]).unwrap();
        db.create_table("u", schema(), TableOptions::default()).unwrap();
        db.drop_table("u").unwrap();
        assert!(matches!(db.drop_table("u"), Err(Error::UnknownTable(_))));
        assert!(matches!(db.table("u"), Err(Error::UnknownTable(_))));
        // A handle to a dropped table fails cleanly, on either engine.
        for engine in [Engine::Lineage, Engine::Lsm] {
            let old = db.create_table("v", schema(), TableOptions::engine(engine)).unwrap();
            old.insert(&[Value::BigInt(1), Value::Int(1), Value::Null]).unwrap();
            db.drop_table("v").unwrap();
            assert!(matches!(old.insert(&[Value::BigInt(1), Value::Int(1), Value::Null]), Err(Error::UnknownTable(_))));
            assert!(matches!(
                old.get(&[Value::BigInt(1)], &Projection::All, &ReadOptions::default()),
                Err(Error::UnknownTable(_))
            ));
            let scan = old.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default());
            assert!(matches!(scan, Err(Error::UnknownTable(_))), "{engine:?}");
        }
        // A new table of the same name starts empty.
        let v = db.create_table("v", schema(), TableOptions::default()).unwrap();
        assert!(all(&v).is_empty());
    }
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.table_names(), vec!["t".to_string(), "v".to_string()]);
    let t = db.table("t").unwrap();
    assert_eq!(t.schema(), &schema());
    assert_eq!(all(&t), vec![vec![Value::BigInt(1), Value::Int(1), Value::Null]]);
}

#[test]
fn the_directory_is_locked_and_missing_databases_are_not_created_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || Options { fs: Arc::new(OsFs), ..Options::default() };
    let db = Db::open(dir.path(), opts()).unwrap();
    assert!(matches!(Db::open(dir.path(), opts()), Err(Error::Locked(_))));
    drop(db);
    assert!(Db::open(dir.path(), opts()).is_ok());
    let none = dir.path().join("none");
    let e = Db::open(&none, Options { create_if_missing: false, ..opts() }).err().unwrap();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(matches!(Db::open(&none, Options { num_levels: 1, ..opts() }), Err(Error::InvalidArgument(_))));
}

#[test]
fn snapshots_read_a_fixed_past_and_belong_to_their_database() {
    let db = Db::open("/a", tiny_options(Arc::new(FaultFs::new()))).unwrap();
    let other = Db::open("/b", tiny_options(Arc::new(FaultFs::new()))).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    t.insert(&[Value::BigInt(1), Value::Int(1), Value::Null]).unwrap();
    let snap = db.snapshot();
    t.update(&[Value::BigInt(1)], &[("a", Value::Int(2))]).unwrap();
    t.delete(&[Value::BigInt(1)]).unwrap();
    db.flush().unwrap();
    db.compact_range("t", &KeyRange::all()).unwrap();
    let at = ReadOptions { snapshot: Some(&snap) };
    assert_eq!(t.get(&[Value::BigInt(1)], &Projection::All, &at).unwrap().unwrap()[1], Value::Int(1));
    assert_eq!(t.get(&[Value::BigInt(1)], &Projection::All, &ReadOptions::default()).unwrap(), None);
    let foreign = other.snapshot();
    let e = t.get(&[Value::BigInt(1)], &Projection::All, &ReadOptions { snapshot: Some(&foreign) }).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
}

#[test]
fn snapshots_at_earlier_sequence_numbers_only_where_versions_are_kept() {
    let db = Db::open("/at", tiny_options(Arc::new(FaultFs::new()))).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    t.insert(&[Value::BigInt(1), Value::Int(1), Value::Null]).unwrap();
    let first = db.snapshot().seq();
    t.update(&[Value::BigInt(1)], &[("a", Value::Int(2))]).unwrap();
    let now = db.snapshot().seq();
    // Nothing was flushed since open: the older sequence is still readable, and pinned from now on.
    let old = db.snapshot_at(first).unwrap();
    db.flush().unwrap();
    db.compact_range("t", &KeyRange::all()).unwrap();
    let at = ReadOptions { snapshot: Some(&old) };
    assert_eq!(t.get(&[Value::BigInt(1)], &Projection::All, &at).unwrap().unwrap()[1], Value::Int(1));
    // After the flush merged versions up to `now`, earlier points cannot be pinned any more.
    t.insert(&[Value::BigInt(2), Value::Int(2), Value::Null]).unwrap();
    let e = db.snapshot_at(first).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("readable")), "{e}");
    assert!(db.snapshot_at(now).is_ok());
    assert!(matches!(db.snapshot_at(now + 100), Err(Error::InvalidArgument(_))));
}

/// With a history retention window, every version written within it stays readable as of its
/// sequence number and its time, on both engines, after flushes, compactions and a restart; the
/// window then moves on and older points are refused with the readable range.
#[test]
fn history_retention_keeps_past_versions_on_both_engines() {
    let fs: Arc<dyn strata::vfs::Fs> = Arc::new(FaultFs::new());
    let retained = |window: Duration| Options { history_retention: Some(window), ..tiny_options(fs.clone()) };
    let db = Db::open("/history", retained(Duration::from_secs(3600))).unwrap();
    let lsm = db.create_table("l", schema(), TableOptions::default()).unwrap();
    let lin = db.create_table("g", schema(), TableOptions::default().with_engine(Engine::Lineage)).unwrap();
    let key = [Value::BigInt(1)];
    let mut points = Vec::new();
    for i in 0..30 {
        for t in [&lsm, &lin] {
            if i % 7 == 6 {
                t.delete(&key).unwrap();
            } else {
                t.insert(&[Value::BigInt(1), Value::Int(i), Value::Text(format!("v{i}"))]).unwrap();
            }
        }
        // Filler rows push the LSM table through flushes and compactions.
        for j in 0..40 {
            lsm.insert(&[Value::BigInt(1000 + j), Value::Int(i), Value::Text("x".repeat(60))]).unwrap();
        }
        let expect = (i % 7 != 6).then_some(i);
        points.push((db.snapshot().seq(), SystemTime::now(), expect));
        std::thread::sleep(Duration::from_millis(3));
    }
    db.flush().unwrap();
    db.compact_range("l", &KeyRange::all()).unwrap();
    let check = |db: &Db, lsm: &strata::Table, lin: &strata::Table| {
        for &(seq, time, expect) in &points {
            for at in [AsOf::Seq(seq), AsOf::Time(time)] {
                let snap = db.snapshot_as_of(at).unwrap_or_else(|e| panic!("{at:?}: {e}"));
                let ro = ReadOptions { snapshot: Some(&snap) };
                for t in [lsm, lin] {
                    let got = t.get(&key, &Projection::All, &ro).unwrap().map(|r| r[1].clone());
                    assert_eq!(got, expect.map(Value::Int), "{} as of {at:?}", t.name());
                }
            }
        }
    };
    check(&db, &lsm, &lin);
    drop((lsm, lin, db));
    // The window is remembered: a reopen without the option keeps it, twice over (the second
    // open loads a checkpoint written by the first).
    for _ in 0..2 {
        let db = Db::open("/history", tiny_options(fs.clone())).unwrap();
        assert_eq!(db.history().retention, Duration::from_secs(3600));
        let (lsm, lin) = (db.table("l").unwrap(), db.table("g").unwrap());
        check(&db, &lsm, &lin);
    }
    // A short window: once it has passed, merges may drop what it kept, and older points go.
    let db = Db::open("/history", retained(Duration::from_millis(200))).unwrap();
    let lsm = db.table("l").unwrap();
    std::thread::sleep(Duration::from_millis(400));
    for j in 0..200 {
        lsm.insert(&[Value::BigInt(1000 + j), Value::Int(-1), Value::Text("y".repeat(60))]).unwrap();
    }
    db.flush().unwrap();
    db.compact_range("l", &KeyRange::all()).unwrap();
    let e = db.snapshot_as_of(AsOf::Seq(points[0].0)).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("readable sequence numbers")), "{e}");
    let e = db.snapshot_as_of(AsOf::Time(points[0].1)).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument(_)), "{e}");
    let h = db.history();
    assert!(h.oldest_seq >= points[29].0 && h.oldest_seq <= h.newest_seq, "{h:?}");
    let future = SystemTime::now() + Duration::from_secs(60);
    let e = db.snapshot_as_of(AsOf::Time(future)).unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("future")), "{e}");
}

/// A replica that applies a leader's batches (`WriteBatch::payload`, `from_payload`,
/// `Db::apply_replicated`)
/// in the leader's order holds the leader's versions under the leader's sequence numbers, at
/// the commit times the leader chose: reads as of a sequence number or a time answer alike on
/// both, on both engines, across a reopen. A time earlier than one already committed is held to
/// it, and a payload that does not decode or names a table the replica lacks is refused.
#[test]
fn a_replica_applying_the_leaders_batches_reads_like_the_leader_at_every_point() {
    let fs: Arc<dyn strata::vfs::Fs> = Arc::new(FaultFs::new());
    let opts = || Options { history_retention: Some(Duration::from_secs(3600)), ..tiny_options(fs.clone()) };
    let (leader, replica) = (Db::open("/leader", opts()).unwrap(), Db::open("/replica", opts()).unwrap());
    let lineage = || TableOptions::default().with_engine(Engine::Lineage);
    for db in [&leader, &replica] {
        db.create_table("l", schema(), TableOptions::default()).unwrap();
        db.create_table("g", schema(), lineage()).unwrap();
    }
    let (l, g) = (leader.table("l").unwrap(), leader.table("g").unwrap());
    // Times after both databases began (a read as of an earlier time is refused), each batch
    // 2 ms after the one before, all past before they are read as of.
    let start = SystemTime::now();
    let ms = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as u64;
    let mut points = Vec::new();
    for i in 0..40i64 {
        let mut b = WriteBatch::new();
        for t in [&l, &g] {
            b.insert(t, &[Value::BigInt(i % 5), Value::Int(i as i32), Value::Text(format!("v{i}"))]).unwrap();
            if i % 6 == 5 {
                b.delete(t, &[Value::BigInt((i + 1) % 5)]).unwrap();
            }
        }
        for j in 0..30 {
            b.insert(&l, &[Value::BigInt(100 + j), Value::Int(i as i32), Value::Text("x".repeat(50))]).unwrap();
        }
        let payload = b.payload();
        leader.write(b, &strata::WriteOptions::default()).unwrap();
        // The leader's clock says now; the replica is given a time of the leader's choosing.
        let at = start + Duration::from_millis(2 * i as u64);
        let seq = replica
            .apply_replicated(WriteBatch::from_payload(&payload).unwrap(), ms(at), &strata::WriteOptions::default())
            .unwrap();
        assert_eq!(seq, leader.snapshot().seq(), "batch {i}: the replica's sequence numbers are the leader's");
        points.push((seq, at));
    }
    // A time before the last one commits at the last one.
    let mut b = WriteBatch::new();
    b.insert(&l, &[Value::BigInt(7), Value::Int(7), Value::Null]).unwrap();
    let back = replica
        .apply_replicated(WriteBatch::from_payload(&b.payload()).unwrap(), ms(start), &strata::WriteOptions::default())
        .unwrap();
    leader.write(b, &strata::WriteOptions::default()).unwrap();
    let last = points[points.len() - 1].1;
    std::thread::sleep(Duration::from_millis(100));
    let rows = |db: &Db, name: &str, at: AsOf| {
        let snap = db.snapshot_as_of(at).unwrap_or_else(|e| panic!("{name} as of {at:?}: {e}"));
        let t = db.table(name).unwrap();
        let got: Vec<Vec<Value>> = t
            .scan(&KeyRange::all(), &Projection::All, &ReadOptions { snapshot: Some(&snap) })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        got
    };
    assert_eq!(rows(&replica, "l", AsOf::Time(last)), rows(&replica, "l", AsOf::Seq(back)));
    replica.flush().unwrap();
    replica.compact_range("l", &KeyRange::all()).unwrap();
    let check = |replica: &Db| {
        for &(seq, at) in &points {
            for name in ["l", "g"] {
                let want = rows(&leader, name, AsOf::Seq(seq));
                assert_eq!(rows(replica, name, AsOf::Seq(seq)), want, "{name} at {seq}");
                // The last time also holds the write held to it.
                let by_time = if at == last { rows(&leader, name, AsOf::Seq(back)) } else { want };
                assert_eq!(rows(replica, name, AsOf::Time(at)), by_time, "{name} at {at:?}");
            }
        }
    };
    check(&replica);
    drop(replica);
    let replica = Db::open("/replica", opts()).unwrap();
    check(&replica);

    let e = WriteBatch::from_payload(b"not a batch").unwrap_err();
    assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("does not decode")), "{e}");
    let other = leader.create_table("only_on_the_leader", schema(), TableOptions::default()).unwrap();
    let mut b = WriteBatch::new();
    b.insert(&other, &[Value::BigInt(1), Value::Int(1), Value::Null]).unwrap();
    let b = WriteBatch::from_payload(&b.payload()).unwrap();
    let e = replica.apply_replicated(b, ms(last), &strata::WriteOptions::default()).unwrap_err();
    assert!(matches!(&e, Error::UnknownTable(_)), "{e}");
    assert_eq!(replica.snapshot().seq(), back, "the refused payloads wrote nothing");
}

/// Lineage tables stay within their memory budget: the write that would pass it is refused
/// with a clear error and leaves nothing behind, while LSM tables and reads go on; a reopen with
/// a larger budget takes writes again and has lost nothing acknowledged.
#[test]
fn lineage_memory_budget_refuses_writes_and_loses_nothing() {
    let fs: Arc<dyn strata::vfs::Fs> = Arc::new(FaultFs::new());
    let budget = |b: u64| Options { lineage_memory_budget: b, ..tiny_options(fs.clone()) };
    let db = Db::open("/budget", budget(1 << 20)).unwrap();
    let lin = db.create_table("g", schema(), TableOptions::default().with_engine(Engine::Lineage)).unwrap();
    let lsm = db.create_table("l", schema(), TableOptions::default()).unwrap();
    let row = |i: i64| vec![Value::BigInt(i), Value::Int(i as i32), Value::Text("z".repeat(200))];
    let mut acked = 0;
    let refused = loop {
        match lin.insert(&row(acked)) {
            Ok(()) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 100_000, "the budget never refused a write");
    };
    assert!(matches!(&refused, Error::OutOfMemory(m) if m.contains("lineage_memory_budget")), "{refused}");
    assert!(acked > 100, "refused after {acked} rows: {refused}");
    assert_eq!(lin.get(&[Value::BigInt(acked)], &Projection::All, &ReadOptions::default()).unwrap(), None);
    // A batch touching the lineage table is refused whole; LSM writes go on.
    let mut b = WriteBatch::new();
    b.insert(&lsm, &row(1)).unwrap();
    b.insert(&lin, &row(acked)).unwrap();
    assert!(matches!(db.write(b, &Default::default()), Err(Error::OutOfMemory(_))));
    assert_eq!(lsm.get(&[Value::BigInt(1)], &Projection::All, &ReadOptions::default()).unwrap(), None);
    lsm.insert(&row(1)).unwrap();
    let st = db.stats();
    let l = st.tables.iter().find(|t| t.name == "g").and_then(|t| t.lineage.clone()).unwrap();
    assert!(l.base_bytes + l.tail_bytes + l.history_bytes > 0 && l.rows == acked as u64, "{l:?}");
    drop((lin, lsm, db));
    let db = Db::open("/budget", budget(64 << 20)).unwrap();
    let lin = db.table("g").unwrap();
    assert_eq!(all(&lin).len(), acked as usize);
    lin.insert(&row(acked)).unwrap();
}

/// One round of writes over rows `0..model.len()` of a lineage test table: every `every`-th row
/// (shifting with the round) deleted, the next one inserted anew (reviving it), the others' `a`
/// set to the round; `model` follows.
fn churn_rows(t: &strata::Table, round: i32, every: i64, model: &mut [Option<i32>]) {
    for (i, m) in model.iter_mut().enumerate() {
        let i = i as i64;
        let key = [Value::BigInt(i)];
        match (i + i64::from(round)) % every {
            0 => {
                t.delete(&key).unwrap();
                *m = None;
            }
            1 => {
                t.insert(&[Value::BigInt(i), Value::Int(round), Value::Null]).unwrap();
                *m = Some(round);
            }
            _ => {
                t.update(&key, &[("a", Value::Int(round))]).unwrap();
                if let Some(v) = m {
                    *v = round;
                }
            }
        }
    }
}

/// Without a history window, the merge thread rebuilds full ranges without the tail records no
/// read needs any more, so memory stays bounded under updates; rows read the same (updated,
/// deleted, revived), and a live snapshot keeps its history until it is dropped.
#[test]
fn lineage_history_is_reclaimed_when_no_read_needs_it() {
    let fs: Arc<dyn strata::vfs::Fs> = Arc::new(FaultFs::new());
    let db = Db::open("/reclaim", tiny_options(fs.clone())).unwrap();
    let t = db.create_table("g", schema(), TableOptions::default().with_engine(Engine::Lineage)).unwrap();
    let n = 256; // four ranges of 64
    for i in 0..n {
        t.insert(&[Value::BigInt(i), Value::Int(0), Value::Null]).unwrap();
    }
    let stats = |db: &Db| db.stats().tables[0].lineage.clone().unwrap();
    let held = db.snapshot();
    let mut model: Vec<Option<i32>> = vec![Some(0); n as usize];
    let mut round = 0;
    // With a snapshot held, nothing is reclaimed.
    for _ in 0..4 {
        round += 1;
        churn_rows(&t, round, 9, &mut model);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(stats(&db).reclaimed_ranges, 0);
    let at = ReadOptions { snapshot: Some(&held) };
    assert!(all(&t).len() < n as usize);
    for i in 0..n {
        let old = t.get(&[Value::BigInt(i)], &Projection::All, &at).unwrap().map(|r| r[1].clone());
        assert_eq!(old, Some(Value::Int(0)), "row {i} at the held snapshot");
    }
    drop(held);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while stats(&db).reclaimed_ranges < 4 {
        round += 1;
        churn_rows(&t, round, 9, &mut model);
        assert!(std::time::Instant::now() < deadline, "no range was reclaimed: {:?}", stats(&db));
        std::thread::sleep(Duration::from_millis(30));
    }
    let check = |t: &strata::Table, model: &[Option<i32>]| {
        for i in 0..n {
            let got =
                t.get(&[Value::BigInt(i)], &Projection::All, &ReadOptions::default()).unwrap().map(|r| r[1].clone());
            assert_eq!(got, model[i as usize].map(Value::Int), "row {i}");
        }
        let want: Vec<i64> = (0..n).filter(|&i| model[i as usize].is_some()).collect();
        let got: Vec<i64> = all(t).iter().map(|r| if let Value::BigInt(k) = r[0] { k } else { -1 }).collect();
        assert_eq!(got, want);
    };
    check(&t, &model);
    // Updates, deletes and revivals after the rebuild read right, and the history stays small.
    round += 1;
    churn_rows(&t, round, 9, &mut model);
    check(&t, &model);
    let s = stats(&db);
    assert!(s.history_bytes < 4 * (s.base_bytes + s.tail_bytes), "{s:?}");
    // Older points than the rebuilt ranges hold are refused, not answered wrongly.
    assert!(matches!(db.snapshot_at(1), Err(Error::InvalidArgument(_))));
    drop(t);
    drop(db);
    let db = Db::open("/reclaim", tiny_options(fs)).unwrap();
    check(&db.table("g").unwrap(), &model);
}

/// With a short history window and rows updated all the time, ranges are rebased past the
/// window's start: memory stays bounded, every point inside the window reads as it was, and
/// points before it are refused.
#[test]
fn lineage_history_beyond_the_window_is_reclaimed() {
    let fs: Arc<dyn strata::vfs::Fs> = Arc::new(FaultFs::new());
    let window = Duration::from_millis(400);
    let db = Db::open("/window", Options { history_retention: Some(window), ..tiny_options(fs) }).unwrap();
    let t = db.create_table("g", schema(), TableOptions::default().with_engine(Engine::Lineage)).unwrap();
    let n = 256i64;
    for i in 0..n {
        t.insert(&[Value::BigInt(i), Value::Int(0), Value::Null]).unwrap();
    }
    let mut model: Vec<Option<i32>> = vec![Some(0); n as usize];
    let held = |db: &Db| {
        let st = db.stats().tables[0].lineage.clone().unwrap();
        (st.tail_bytes + st.history_bytes, st)
    };
    // First with a snapshot pinning everything: what each change costs when nothing goes.
    let pin = db.snapshot();
    let mut round = 0;
    while round < 40 {
        round += 1;
        churn_rows(&t, round, 11, &mut model);
        std::thread::sleep(Duration::from_millis(10));
    }
    let (pinned_bytes, st) = held(&db);
    assert_eq!(st.reclaimed_ranges, 0, "{st:?}");
    let per_change = pinned_bytes as f64 / (round as f64 * n as f64);
    drop(pin);
    let mut points: Vec<(u64, SystemTime, Vec<Option<i32>>)> = Vec::new();
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        round += 1;
        churn_rows(&t, round, 11, &mut model);
        points.push((db.snapshot().seq(), SystemTime::now(), model.clone()));
        std::thread::sleep(Duration::from_millis(10));
    }
    let (bytes, st) = held(&db);
    assert!(st.reclaimed_ranges > 0, "nothing was reclaimed in {round} rounds: {st:?}");
    // The window holds a fraction of the changes (and a range up to about as many again
    // before it is rebased): far less than keeping them all.
    let all = per_change * round as f64 * n as f64;
    assert!((bytes as f64) < all / 2.0, "{bytes} bytes held, {all:.0} for every change: {st:?}");
    // Points well inside the window read as they were; the oldest ones are refused.
    let now = SystemTime::now();
    let mut inside = 0;
    for (seq, time, want) in &points {
        let age = now.duration_since(*time).unwrap_or_default();
        let snap = match db.snapshot_as_of(AsOf::Seq(*seq)) {
            Ok(s) => s,
            Err(e) => {
                assert!(age > window / 2, "a point {age:?} old was refused: {e}");
                continue;
            }
        };
        inside += 1;
        let ro = ReadOptions { snapshot: Some(&snap) };
        for i in 0..n {
            let got = t.get(&[Value::BigInt(i)], &Projection::All, &ro).unwrap().map(|r| r[1].clone());
            assert_eq!(got, want[i as usize].map(Value::Int), "row {i} as of {seq}");
        }
    }
    assert!(inside > 0, "no point inside the window");
    assert!(db.snapshot_as_of(AsOf::Seq(points[0].0)).is_err(), "the first point outlived the window");
}

/// A hot key: a long run of partial updates in the memtable, each of one or two columns, over a
/// full row. Point reads of every projection, at the newest data and at snapshots in between,
/// see each column's newest value (readers pass over partial rows that give no column they still
/// need; this checks that they pass over no other).
#[test]
fn point_reads_of_a_hot_key_see_every_columns_newest_partial_value() {
    // The key's full row in the memtable with its updates; then on disk under thousands of
    // updates, with a flush part way through them.
    hot_key_updates(false, 400, &[]);
    hot_key_updates(true, 3000, &[1800]);
}

/// Inserts one key (then flushes if `flush_insert`), updates it `updates` times — mostly one
/// column, now and then others — flushing after the updates numbered in `flush_at`, and checks
/// every projection now and at snapshots taken along the way.
fn hot_key_updates(flush_insert: bool, updates: i32, flush_at: &[i32]) {
    let tmp = tempfile::tempdir().unwrap();
    let db = Db::open(tmp.path(), Options::default()).unwrap();
    let cols =
        ["id", "a", "b", "c"].map(|n| Column::new(n, if n == "id" { ColumnType::BigInt } else { ColumnType::Int }));
    let t = db.create_table("t", Schema::new(cols.to_vec(), &["id"]).unwrap(), TableOptions::default()).unwrap();
    let key = [Value::BigInt(7)];
    t.insert(&[Value::BigInt(7), Value::Int(0), Value::Int(0), Value::Int(0)]).unwrap();
    if flush_insert {
        db.flush().unwrap();
    }
    let mut model = [0i32; 3];
    let mut snaps = Vec::new();
    for i in 1..updates {
        // Mostly column `a`; now and then `b`, or `b` and `c` together.
        let set: Vec<usize> = match i % 37 {
            0 => vec![1, 2],
            5 | 20 => vec![1],
            _ => vec![0],
        };
        let names = ["a", "b", "c"];
        let pairs: Vec<(&str, Value)> = set.iter().map(|&c| (names[c], Value::Int(i))).collect();
        t.update(&key, &pairs).unwrap();
        for &c in &set {
            model[c] = i;
        }
        // Early snapshots (between two updates) are read after thousands more.
        if i % 50 == 0 || i < 8 {
            snaps.push((db.snapshot(), model));
        }
        if flush_at.contains(&i) {
            db.flush().unwrap();
        }
    }
    let check = |snap: Option<&strata::Snapshot>, want: [i32; 3]| {
        let ro = ReadOptions { snapshot: snap };
        let at = snap.map(|s| s.seq());
        let row = t.get(&key, &Projection::All, &ro).unwrap().unwrap();
        let expect: Vec<Value> = std::iter::once(Value::BigInt(7)).chain(want.iter().map(|&v| Value::Int(v))).collect();
        assert_eq!(row, expect, "full row at {at:?} (flushed insert: {flush_insert})");
        for (c, name) in ["a", "b", "c"].iter().enumerate() {
            let one = t.get(&key, &t.projection(&[name]).unwrap(), &ro).unwrap().unwrap();
            assert_eq!(one, vec![Value::Int(want[c])], "column {name} at {at:?} (flushed insert: {flush_insert})");
        }
    };
    check(None, model);
    for (s, m) in &snaps {
        check(Some(s), *m);
    }
}

/// `open_file_bytes` counts what open files hold outside the block cache: nothing before any file
/// is read, then at least each file's bloom filter and one index entry per block, per column
/// a zone map; it grows with the data.
#[test]
fn stats_count_the_memory_of_open_files() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Db::open(tmp.path(), Options::default()).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    assert_eq!(db.stats().open_file_bytes, 0);
    let mut sizes = Vec::new();
    for round in 0..2i64 {
        for i in 0..5000i64 {
            let k = round * 5000 + i;
            t.insert(&[Value::BigInt(k), Value::Int(k as i32), Value::Text(format!("name{k}"))]).unwrap();
        }
        db.flush().unwrap();
        t.get(&[Value::BigInt(round * 5000)], &Projection::All, &ReadOptions::default()).unwrap().unwrap();
        sizes.push(db.stats().open_file_bytes);
    }
    // 5,000 keys at 14 bloom bits each is about 8.5 KiB of filter per file.
    assert!(sizes[0] > 8_000, "{sizes:?}");
    assert!(sizes[1] > sizes[0] + 8_000, "{sizes:?}");
}

/// The planner's row estimate counts rows in the memtables, in flushed files and, for column
/// groups, each key once per level; on both engines.
#[test]
fn estimated_rows_follow_the_table_through_flushes_and_compaction() {
    for engine in [Engine::Lsm, Engine::Lineage] {
        let fs = FaultFs::new();
        let db = Db::open("/est", tiny_options(Arc::new(fs))).unwrap();
        let opts = match engine {
            Engine::Lsm => TableOptions::with_layout("L1-: (a) (s)"),
            Engine::Lineage => TableOptions::engine(Engine::Lineage),
        };
        let t = db.create_table("t", schema(), opts).unwrap();
        let other = db.create_table("other", schema(), TableOptions::default()).unwrap();
        assert_eq!(t.estimated_rows().unwrap(), 0, "{engine:?}");
        for i in 0..500i64 {
            t.insert(&[Value::BigInt(i), Value::Int(i as i32), "x".into()]).unwrap();
            other.insert(&[Value::BigInt(i), Value::Int(0), Value::Null]).unwrap();
        }
        assert_eq!(t.estimated_rows().unwrap(), 500, "{engine:?} in memory");
        db.flush().unwrap();
        assert_eq!(t.estimated_rows().unwrap(), 500, "{engine:?} flushed");
        if engine == Engine::Lsm {
            db.compact_range("t", &KeyRange::all()).unwrap();
            db.wait_for_compactions().unwrap();
            assert_eq!(t.estimated_rows().unwrap(), 500, "compacted into two groups");
        }
        for i in 500..600i64 {
            t.insert(&[Value::BigInt(i), Value::Int(0), Value::Null]).unwrap();
        }
        assert_eq!(t.estimated_rows().unwrap(), 600, "{engine:?} with newer rows in memory");
    }
}

/// Key splits cut an integer key evenly between its smallest and largest stored value (the same
/// cuts for two tables spanning the same keys), a text key where files start, and nothing in a
/// lineage table, one without files or for one partition; `intersect` keeps the tighter bounds,
/// and the cut ranges, intersected with a condition's range, read every row exactly once. Column
/// bounds cover the files and the memtables.
#[test]
fn key_splits_cut_tables_into_ranges_that_partition_scans() {
    let fs: Arc<dyn Fs> = Arc::new(FaultFs::new());
    let db = Db::open("/splits", tiny_options(fs)).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let wide = Schema::new(vec![Column::new("k", ColumnType::BigInt), Column::new("n", ColumnType::Int)], &["k", "n"]);
    let u = db.create_table("u", wide.unwrap(), TableOptions::default()).unwrap();
    let text = Schema::new(vec![Column::new("name", ColumnType::Text), Column::new("n", ColumnType::Int)], &["name"]);
    let s = db.create_table("s", text.unwrap(), TableOptions::default()).unwrap();
    let lineage = db.create_table("l", schema(), TableOptions::engine(Engine::Lineage)).unwrap();
    for i in 1..=1000i64 {
        t.insert(&[Value::BigInt(i), Value::Int(i as i32), "x".into()]).unwrap();
        lineage.insert(&[Value::BigInt(i), Value::Int(i as i32), "x".into()]).unwrap();
        s.insert(&[Value::Text(format!("name{i:05}")), Value::Int(0)]).unwrap();
        if i % 10 == 0 {
            for n in 0..3 {
                u.insert(&[Value::BigInt(i), Value::Int(n)]).unwrap();
            }
        }
    }
    u.insert(&[Value::BigInt(1), Value::Int(0)]).unwrap();
    let empty = db.create_table("e", schema(), TableOptions::default()).unwrap();
    assert!(empty.key_splits(4).unwrap().is_empty(), "no files");
    db.flush().unwrap();
    let cuts = t.key_splits(4).unwrap();
    assert_eq!(cuts, vec![Value::BigInt(251), Value::BigInt(501), Value::BigInt(751)]);
    assert_eq!(u.key_splits(4).unwrap(), cuts, "the same key span is cut at the same values");
    assert!(t.key_splits(1).unwrap().is_empty());
    assert!(lineage.key_splits(4).unwrap().is_empty());
    let names = s.key_splits(4).unwrap();
    assert!(!names.is_empty() && names.len() <= 3, "{names:?}");
    assert!(names.windows(2).all(|w| matches!(w, [Value::Text(a), Value::Text(b)] if a < b)), "{names:?}");

    // Column bounds: the first key column and every value column, memtables included.
    let bounds = t.column_bounds().unwrap();
    assert_eq!(bounds[0], Some((Value::BigInt(1), Value::BigInt(1000))));
    assert_eq!(bounds[2], Some(("x".into(), "x".into())));
    t.update(&[Value::BigInt(7)], &[("a", Value::Int(-5))]).unwrap();
    assert_eq!(t.column_bounds().unwrap()[1], Some((Value::Int(-5), Value::Int(1000))), "with the memtable");
    assert_eq!(u.column_bounds().unwrap()[1], None, "a key column after the first");
    assert!(lineage.column_bounds().unwrap().iter().all(Option::is_none));

    // Cut ranges intersected with a condition's range read each row once.
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let parts = |cuts: &[Value]| -> Vec<KeyRange> {
        (0..=cuts.len())
            .map(|i| KeyRange {
                start: if i == 0 { Unbounded } else { Included(vec![cuts[i - 1].clone()]) },
                end: cuts.get(i).map_or(Unbounded, |c| Excluded(vec![c.clone()])),
            })
            .collect()
    };
    let conditions = [
        KeyRange::all(),
        KeyRange { start: Included(vec![Value::BigInt(300)]), end: Included(vec![Value::BigInt(320)]) },
        KeyRange { start: Excluded(vec![Value::BigInt(251)]), end: Excluded(vec![Value::BigInt(751)]) },
        KeyRange { start: Excluded(vec![Value::BigInt(i64::MAX)]), end: Unbounded },
        KeyRange { start: Included(vec![Value::BigInt(900)]), end: Excluded(vec![Value::BigInt(100)]) },
    ];
    for (table, n) in [(&t, 1000), (&u, 301)] {
        for cond in &conditions {
            let expected: Vec<Vec<Value>> =
                table.scan(cond, &Projection::All, &ReadOptions::default()).unwrap().map(Result::unwrap).collect();
            let mut got = Vec::new();
            for part in parts(&cuts) {
                let r = table.intersect(cond, &part).unwrap();
                got.extend(table.scan(&r, &Projection::All, &ReadOptions::default()).unwrap().map(Result::unwrap));
                assert_eq!(table.intersect(&part, cond).unwrap().start, r.start, "{cond:?} {part:?}");
            }
            assert_eq!(got, expected, "{cond:?}");
            if matches!(cond.start, Unbounded) {
                assert_eq!(got.len(), n);
            }
        }
    }
}

/// Two tiers: compaction output that does not fit the fast tier's budget lands on the slow
/// one; each SST sits in its tier's directory only; the tiers are remembered, their budgets
/// may change, and a moved, missing or renamed tier directory is an error that changes nothing.
#[test]
fn tiers_hold_their_files_and_are_remembered() {
    let fs = Arc::new(FaultFs::new());
    let (db_dir, fast, slow) = (Path::new("/db"), Path::new("/fast"), Path::new("/slow"));
    let tiers = |budget: u64| vec![Tier::new("fast", fast).with_budget(budget), Tier::new("slow", slow)];
    let opts = |tiers: Vec<Tier>| Options { tiers, ..tiny_options(fs.clone()) };
    let ssts = |d: &Path| fs.list(d).unwrap().iter().filter(|f| f.ends_with(".sst")).count();
    let db = Db::open(db_dir, opts(tiers(32 << 10))).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    for i in 0..6000i64 {
        t.insert(&[Value::BigInt(i * 7 % 6000), Value::Int(i as i32), Value::Text(format!("row {i}"))]).unwrap();
    }
    db.compact_range("t", &KeyRange::all()).unwrap();
    db.wait_for_compactions().unwrap();
    let before = all(&t);
    assert_eq!(before.len(), 6000);
    let stats = db.stats();
    let [f, s] = &stats.tiers[..] else { panic!("{:?}", stats.tiers) };
    assert!(s.files > 0 && s.bytes > f.bytes, "the slow tier should hold most: {:?}", stats.tiers);
    assert!(f.bytes <= 32 << 10, "compaction went past the fast budget: {:?}", stats.tiers);
    assert_eq!((ssts(fast), ssts(slow), ssts(db_dir)), (f.files, s.files, 0));
    let bottom = stats.tables[0].levels.iter().rev().find(|l| l.files > 0).unwrap();
    assert_eq!(bottom.tier_bytes.iter().sum::<u64>(), bottom.bytes);
    drop((t, db));

    // Reopened without tiers: the manifest has them. The scan's block reads (nothing is cached
    // yet) are counted on the tiers of their files.
    let db = Db::open(db_dir, opts(Vec::new())).unwrap();
    assert_eq!(all(&db.table("t").unwrap()), before);
    let st = db.stats();
    assert_eq!(st.tiers.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["fast", "slow"]);
    assert!(st.tiers[1].block_reads > 0, "{:?}", st.tiers);
    assert_eq!(st.tiers.iter().map(|t| t.block_reads).sum::<u64>(), st.block_reads);
    drop(db);
    // A new budget is taken and remembered.
    drop(Db::open(db_dir, opts(tiers(64 << 10))).unwrap());
    let db = Db::open(db_dir, opts(Vec::new())).unwrap();
    assert_eq!(db.stats().tiers[0].budget, Some(64 << 10));
    drop(db);

    // Moved or renamed tiers, a tier dropped from the list: refused, naming the tier.
    let moved = vec![Tier::new("fast", fast).with_budget(1 << 20), Tier::new("slow", "/elsewhere")];
    let renamed = vec![Tier::new("fast", fast).with_budget(1 << 20), Tier::new("cold", slow)];
    for bad in [moved, renamed, vec![Tier::new("fast", fast)]] {
        let e = Db::open(db_dir, opts(bad)).err().unwrap();
        assert!(matches!(e, Error::InvalidArgument(_)) && e.to_string().contains("tier"), "{e}");
    }
    // Another database may not take this one's tier directory, nor one holding its files.
    let shared = vec![Tier::new("fast", "/fast2").with_budget(1 << 20), Tier::new("slow", slow)];
    let e = Db::open("/db2", opts(shared)).err().unwrap();
    assert!(e.to_string().contains("already holds database files"), "{e}");
    let onto_db = vec![Tier::new("fast", "/fast3").with_budget(1 << 20), Tier::new("slow", db_dir)];
    let e = Db::open("/db3", opts(onto_db)).err().unwrap();
    assert!(e.to_string().contains("already holds database files"), "{e}");
    // A tier directory that lost its marker (say, an empty disk mounted in its place).
    let marker_text = fs.read_all(&slow.join("TIER")).unwrap();
    fs.remove(&slow.join("TIER")).unwrap();
    let e = Db::open(db_dir, opts(Vec::new())).err().unwrap();
    assert!(e.to_string().contains("slow") && e.to_string().contains("missing"), "{e}");
    let mut marker = fs.create(&slow.join("TIER")).unwrap();
    marker.append(&marker_text).unwrap();
    marker.sync().unwrap();
    drop(marker);
    assert_eq!(all(&Db::open(db_dir, opts(Vec::new())).unwrap().table("t").unwrap()), before);
}

/// A database made without tiers takes them later only with its own directory as the first
/// tier (its files stay where they are); anything else is refused.
#[test]
fn tiers_are_added_to_a_database_only_around_its_own_directory() {
    let fs = Arc::new(FaultFs::new());
    let opts = |tiers: Vec<Tier>| Options { tiers, ..tiny_options(fs.clone()) };
    let db = Db::open("/db", opts(Vec::new())).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    for i in 0..3000i64 {
        t.insert(&[Value::BigInt(i), Value::Int(1), Value::Text("x".repeat(20))]).unwrap();
    }
    db.flush().unwrap();
    let before = all(&t);
    drop((t, db));
    let elsewhere = vec![Tier::new("fast", "/fast").with_budget(1 << 20), Tier::new("slow", "/slow")];
    let e = Db::open("/db", opts(elsewhere)).err().unwrap();
    assert!(e.to_string().contains("first tier"), "{e}");
    let around = vec![Tier::new("fast", "/db").with_budget(16 << 10), Tier::new("slow", "/slow")];
    let db = Db::open("/db", opts(around)).unwrap();
    let t = db.table("t").unwrap();
    db.compact_range("t", &KeyRange::all()).unwrap();
    assert_eq!(all(&t), before);
    assert!(db.stats().tiers[1].files > 0, "{:?}", db.stats().tiers);
}

/// Access histograms: point reads count on the files that served them, probes that found
/// nothing count apart, and compaction passes a range's heat to the files that now hold it.
#[test]
fn access_histograms_count_reads_per_file_and_survive_compaction() {
    let fs = Arc::new(FaultFs::new());
    // No bloom filters: a read of a missing key inside a file's range searches the file.
    let db = Db::open("/heat", Options { bloom_bits_per_key: 0, ..tiny_options(fs) }).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    for i in 0..4000i64 {
        t.insert(&[Value::BigInt(i * 2), Value::Int(1), Value::Text(format!("{i:>40}"))]).unwrap();
    }
    db.compact_range("t", &KeyRange::all()).unwrap();
    let get = |k: i64| t.get(&[Value::BigInt(k)], &Projection::All, &ReadOptions::default()).unwrap();
    // Hot: even keys 1000..1200 (present) and odd ones between them (absent).
    for round in 0..5 {
        for k in 1000..1200 {
            assert_eq!(get(k).is_some(), k % 2 == 0, "round {round}, key {k}");
        }
    }
    let key_of = |v: &[Value]| match v.first() {
        Some(Value::BigInt(k)) => *k,
        other => panic!("{other:?}"),
    };
    let hist = t.access_histogram().unwrap();
    assert!(hist.len() > 3, "too few files to tell hot from cold: {hist:?}");
    let hot = |b: &strata::HeatBucket| key_of(&b.first_key) < 1200 && key_of(&b.last_key) >= 1000;
    assert_eq!(hist.iter().filter(|b| hot(b)).map(|b| b.reads).sum::<u64>(), 500, "{hist:?}");
    assert_eq!(hist.iter().filter(|b| hot(b)).map(|b| b.empty_probes).sum::<u64>(), 500, "{hist:?}");
    assert!(hist.iter().filter(|b| !hot(b)).all(|b| b.reads + b.empty_probes == 0), "{hist:?}");

    // Rewrite everything: the new files holding 1000..1200 inherit the heat.
    for i in 0..4000i64 {
        t.update(&[Value::BigInt(i * 2)], &[("a", Value::Int(2))]).unwrap();
    }
    db.compact_range("t", &KeyRange::all()).unwrap();
    let after = t.access_histogram().unwrap();
    assert!(after.iter().all(|b| hist.iter().all(|o| o.file != b.file)), "files were not rewritten");
    let carried: u64 = after.iter().filter(|b| hot(b)).map(|b| b.reads).sum();
    assert!(carried >= 400, "heat lost in compaction: {carried} of 500: {after:?}");
    let cold: u64 = after.iter().filter(|b| !hot(b)).map(|b| b.reads).sum();
    assert!(cold < carried / 4, "heat spread over cold files: {cold} vs {carried}: {after:?}");
}

/// Informed compaction: with the fast tier over its budget, the coldest ranges go to the slow
/// tier and the range being read stays on the fast one.
#[test]
fn informed_compaction_keeps_the_hot_range_on_the_fast_tier() {
    let fs = Arc::new(FaultFs::new());
    let tiers = vec![Tier::new("fast", "/hot/fast").with_budget(320 << 10), Tier::new("slow", "/hot/slow")];
    let opts = Options { tiers, heat_half_life: Duration::ZERO, ..tiny_options(fs) };
    let db = Db::open("/hot/db", opts).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let insert = |from: i64, to: i64| {
        for i in from..to {
            t.insert(&[Value::BigInt(i), Value::Int(1), Value::Text(format!("{i:>40}"))]).unwrap();
        }
    };
    let read_hot = || {
        for k in 0..400 {
            assert!(t.get(&[Value::BigInt(k)], &Projection::All, &ReadOptions::default()).unwrap().is_some());
        }
    };
    insert(0, 3000);
    db.wait_for_compactions().unwrap();
    assert_eq!(db.stats().tiers[1].files, 0, "the first rows fit the fast tier: {:?}", db.stats().tiers);
    for chunk in 0..10 {
        read_hot();
        insert(3000 + chunk * 1500, 4500 + chunk * 1500);
    }
    read_hot();
    db.wait_for_compactions().unwrap();
    let st = db.stats();
    assert!(st.tiers[1].files > 0, "nothing was evicted: {:?}", st.tiers);
    assert!(st.tiers[0].bytes <= 320 << 10, "the fast tier is over its budget: {:?}", st.tiers);
    let hist = t.access_histogram().unwrap();
    let hot: Vec<_> = hist.iter().filter(|b| bucket_key(b) < 400 && b.reads > 0).collect();
    assert!(!hot.is_empty() && hot.iter().all(|b| b.tier == 0), "hot files left the fast tier: {hist:?}");
    let slow_reads: u64 = hist.iter().filter(|b| b.tier == 1).map(|b| b.reads).sum();
    assert_eq!(slow_reads, 0, "the slow tier served reads: {hist:?}");
}

/// The first key of a histogram bucket of the `schema()` tables.
fn bucket_key(b: &strata::HeatBucket) -> i64 {
    match b.first_key.first() {
        Some(Value::BigInt(k)) => *k,
        other => panic!("{other:?}"),
    }
}

/// Reverse compaction: a range on the slow tier that turns hot comes back to the fast tier
/// (making room by evicting colder files), and later reads of it are served there. With
/// temperature-blind placement nothing comes back.
#[test]
fn reverse_compaction_brings_a_range_that_turns_hot_back_to_the_fast_tier() {
    for placement in [TierPlacement::Informed, TierPlacement::RoundRobin] {
        let fs = Arc::new(FaultFs::new());
        let tiers = vec![Tier::new("fast", "/rev/fast").with_budget(320 << 10), Tier::new("slow", "/rev/slow")];
        let opts =
            Options { tiers, heat_half_life: Duration::ZERO, tier_placement: placement, ..tiny_options(fs.clone()) };
        let db = Db::open("/rev/db", opts).unwrap();
        let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
        for i in 0..12_000 {
            t.insert(&[Value::BigInt(i), Value::Int(1), Value::Text(format!("{i:>40}"))]).unwrap();
        }
        db.wait_for_compactions().unwrap();
        // The range of one slow-tier file (none of it has been read yet) turns hot.
        let hist = t.access_histogram().unwrap();
        let slow = hist.iter().filter(|b| b.tier == 1).nth(1).expect("a file on the slow tier");
        let (lo, hi) = match (slow.first_key.first(), slow.last_key.first()) {
            (Some(Value::BigInt(lo)), Some(Value::BigInt(hi))) => (*lo, *hi),
            other => panic!("{other:?}"),
        };
        for _ in 0..3 {
            for k in lo..=hi {
                assert!(t.get(&[Value::BigInt(k)], &Projection::All, &ReadOptions::default()).unwrap().is_some());
            }
        }
        db.wait_for_compactions().unwrap();
        let st = db.stats();
        assert!(st.tiers[0].bytes <= 320 << 10, "{placement:?}: the fast tier is over its budget: {:?}", st.tiers);
        let hist = t.access_histogram().unwrap();
        let hot: Vec<_> = hist.iter().filter(|b| b.reads > 0).collect();
        assert!(!hot.is_empty());
        match placement {
            TierPlacement::Informed => {
                assert!(hot.iter().all(|b| b.tier == 0), "the hot range stayed on the slow tier: {hist:?}")
            }
            TierPlacement::RoundRobin => {
                assert!(hot.iter().all(|b| b.tier == 1), "temperature-blind placement moved it: {hist:?}")
            }
        }
        // After a reopen (a cold block cache), reads of the range leave the slow tier alone,
        // with informed placement only.
        drop((t, db));
        let db = Db::open("/rev/db", Options { tier_placement: placement, ..tiny_options(fs.clone()) }).unwrap();
        let t = db.table("t").unwrap();
        for k in (lo..=hi).step_by(7) {
            assert!(t.get(&[Value::BigInt(k)], &Projection::All, &ReadOptions::default()).unwrap().is_some());
        }
        let slow_reads = db.stats().tiers[1].block_reads;
        assert_eq!(slow_reads == 0, placement == TierPlacement::Informed, "{placement:?}: {slow_reads} slow reads");
    }
}

/// A first open with tiers records them before writing their markers: cut short in between
/// (modelled by removing the markers of tiers that hold no file yet), the next open writes
/// them and goes on.
#[test]
fn tier_markers_lost_before_any_file_are_written_again() {
    let fs = Arc::new(FaultFs::new());
    let tiers = vec![Tier::new("fast", "/m/fast").with_budget(1 << 20), Tier::new("slow", "/m/slow")];
    drop(Db::open("/m/db", Options { tiers, ..tiny_options(fs.clone()) }).unwrap());
    for d in ["/m/fast/TIER", "/m/slow/TIER"] {
        fs.remove(Path::new(d)).unwrap();
    }
    let db = Db::open("/m/db", tiny_options(fs.clone())).unwrap();
    assert_eq!(db.stats().tiers.len(), 2);
    assert!(fs.exists(Path::new("/m/fast/TIER")) && fs.exists(Path::new("/m/slow/TIER")));
}

/// `count(*)` and `sum(a)` of `t`, and whether the scan read run by run (no merged rows).
fn count_and_sum(db: &Db, t: &strata::Table) -> (Vec<Value>, bool) {
    use strata::scan::{batch_rows, AggFunc, Aggregate, ScanRequest};
    let before = db.scan_stats();
    let req =
        ScanRequest::new().with_aggregate(Aggregate::count_star()).with_aggregate(Aggregate::new(AggFunc::Sum, "a"));
    let rows: Vec<Vec<Value>> =
        t.scan_batches(&req, &ReadOptions::default()).unwrap().flat_map(|b| batch_rows(&b.unwrap())).collect();
    let after = db.scan_stats();
    (rows.concat(), after.merged_rows == before.merged_rows && after.run_blocks > before.run_blocks)
}

/// Deferred marking (LogStore's deferred and staging compaction): with two tiers, a flush over
/// data on the slow tier reads nothing there — it leaves marking what it supersedes to a
/// staging compaction — and every answer is the same meanwhile (scans merge instead of reading
/// run by run, which asks for the staging), across a reopen, and after the staging, whose marks
/// are those a flush probing everything would have made. Without deferral the flush reads
/// the slow tier itself.
#[test]
fn deferred_marking_leaves_the_slow_tier_to_a_staging_compaction() {
    for deferred in [true, false] {
        let fs = Arc::new(FaultFs::new());
        // Loaded with small memtables and a small fast tier, then reopened with room for the
        // updates in one memtable and on the fast tier (nothing to evict).
        let opts = |budget: u64| Options {
            tiers: vec![Tier::new("fast", "/defer/fast").with_budget(budget), Tier::new("slow", "/defer/slow")],
            deferred_compaction: deferred,
            l0_compaction_trigger: 4,
            memtable_size: if budget > 1 << 20 { 1 << 20 } else { 16 << 10 },
            ..tiny_options(fs.clone())
        };
        let db = Db::open("/defer/db", opts(32 << 10)).unwrap();
        let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
        for i in 0..4000 {
            t.insert(&[Value::BigInt(i), Value::Int(1), Value::Text(format!("{i:>30}"))]).unwrap();
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        assert!(db.stats().tiers[1].files > 0, "nothing reached the slow tier");
        // A cold block cache.
        drop((t, db));
        let db = Db::open("/defer/db", opts(16 << 20)).unwrap();
        let t = db.table("t").unwrap();
        // Partial updates all over the key space, and updates of rows that do not exist.
        for i in (0..4000).step_by(5) {
            t.update(&[Value::BigInt(i)], &[("a", Value::Int(2))]).unwrap();
        }
        for i in 5000..5010 {
            t.update(&[Value::BigInt(i)], &[("a", Value::Int(7))]).unwrap();
        }
        let slow_reads = db.stats().tiers[1].block_reads;
        db.flush().unwrap();
        let st = db.stats();
        let read_slow = st.tiers[1].block_reads > slow_reads;
        assert_eq!(read_slow, !deferred, "deferred {deferred}: the flush read the slow tier: {read_slow}");
        assert_eq!(st.tables[0].deferred_files, usize::from(deferred), "{:?}", st.tables[0]);
        let want = vec![Value::BigInt(4000), Value::BigInt(4000 + 800)];
        let check = |db: &Db, t: &strata::Table, what: &str| {
            for i in [0, 1, 5, 3995, 3999] {
                let a = if i % 5 == 0 { 2 } else { 1 };
                let row = t.get(&[Value::BigInt(i)], &Projection::All, &ReadOptions::default()).unwrap();
                assert_eq!(row.map(|r| r[1].clone()), Some(Value::Int(a)), "{what}: key {i}");
            }
            assert_eq!(t.get(&[Value::BigInt(5003)], &Projection::All, &ReadOptions::default()).unwrap(), None);
            let rows = all(t);
            assert_eq!(rows.len(), 4000, "{what}");
            for r in rows {
                let Value::BigInt(i) = r[0] else { panic!("{r:?}") };
                assert_eq!(r[1], Value::Int(if i % 5 == 0 { 2 } else { 1 }), "{what}: {r:?}");
            }
            db.check_supersede_marks().unwrap_or_else(|e| panic!("{what}: {e}"));
        };
        check(&db, &t, "after the flush");
        if deferred {
            // Across a reopen the file is still known to be deferred.
            drop((t, db));
            let db = Db::open("/defer/db", opts(16 << 20)).unwrap();
            let t = db.table("t").unwrap();
            assert_eq!(db.stats().tables[0].deferred_files, 1);
            check(&db, &t, "reopened");
            // A scan that would read run by run merges instead, and asks for the staging.
            let (answer, run_by_run) = count_and_sum(&db, &t);
            assert_eq!((answer, run_by_run), (want.clone(), false));
            let staged = || db.stats().staging_compactions > 0;
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while !staged() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(staged(), "the scan did not bring a staging compaction");
            db.wait_for_compactions().unwrap();
            let st = db.stats();
            assert_eq!(st.tables[0].deferred_files, 0);
            assert!(st.tiers[1].block_reads > 0, "the staging compaction marked nothing on the slow tier");
            check(&db, &t, "staged");
            assert_eq!(count_and_sum(&db, &t), (want.clone(), true));
        } else {
            assert_eq!(count_and_sum(&db, &t), (want.clone(), true));
        }
    }
}

/// Deferred compaction while the fast tier has room: Level-0 files wait past the trigger
/// (halfway to the slowdown trigger) instead of moving down; without deferral, or once the
/// fast tier is over its budget, they move down at the trigger.
#[test]
fn level_0_waits_on_the_fast_tier_while_it_has_room() {
    for (deferred, budget) in [(true, 16 << 20), (false, 16 << 20), (true, 1 << 10)] {
        let fs = Arc::new(FaultFs::new());
        let opts = Options {
            tiers: vec![Tier::new("fast", "/wait/fast").with_budget(budget), Tier::new("slow", "/wait/slow")],
            deferred_compaction: deferred,
            // Level-0 moves down at 2 files, or at 4 while it may wait.
            l0_compaction_trigger: 2,
            l0_slowdown_trigger: 6,
            ..tiny_options(fs.clone())
        };
        let db = Db::open("/wait/db", opts).unwrap();
        let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
        for round in 0..3 {
            for i in 0..50 {
                t.insert(&[Value::BigInt(round * 100 + i), Value::Int(1), "x".into()]).unwrap();
            }
            db.flush().unwrap();
            db.wait_for_compactions().unwrap();
        }
        let runs = db.stats().tables[0].levels[0].runs;
        let waits = deferred && budget > 1 << 20;
        assert_eq!(runs == 3, waits, "deferred {deferred}, budget {budget}: {runs} Level-0 files");
        assert!(waits || runs < 2, "deferred {deferred}, budget {budget}: {runs} Level-0 files");
        assert_eq!(all(&t).len(), 150);
    }
}

/// The rows the format-3 fixture (`testdata/format3`, written by the build before SST format 4)
/// holds in each of its tables, by key: 600 keys inserted, every third updated (`a = -k`),
/// every fifth deleted.
fn format3_fixture_rows(text: bool) -> Vec<Vec<Value>> {
    let mut rows: Vec<Option<Vec<Value>>> = vec![None; 600];
    for i in 0..600i64 {
        let k = i * 7 % 600;
        let key = if text { Value::Text(format!("user{k:06}")) } else { Value::BigInt(k) };
        let a = if k % 3 == 0 { -k } else { i };
        rows[k as usize] = (k % 5 != 0)
            .then(|| vec![key, Value::Int(a as i32), Value::Text(format!("v{i}")), Value::Double(i as f64 / 4.0)]);
    }
    rows.into_iter().flatten().collect()
}

/// The SST format versions of the files in `dir`, read from their footers.
fn sst_versions(dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "sst") {
            let b = std::fs::read(&p).unwrap();
            let f = &b[b.len() - 32..];
            out.push(u32::from_le_bytes([f[16], f[17], f[18], f[19]]));
        }
    }
    out
}

/// A database written by the build before SST format 4 (row, two-group and column layouts,
/// rows at several levels with updates and deletes over them) opens, reads the same through
/// point reads and scans, and is rewritten in format 4 by compaction.
#[test]
fn a_database_of_format_3_files_is_read_and_rewritten_by_compaction() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/format3");
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    let before = sst_versions(dir.path());
    assert!(!before.is_empty() && before.iter().all(|&v| v == 3), "{before:?}");
    let check = |db: &Db| {
        for (name, text) in [("ints", false), ("texts", true), ("cols", false)] {
            let t = db.table(name).unwrap();
            let want = format3_fixture_rows(text);
            assert_eq!(all(&t), want, "{name}: scan");
            for row in &want {
                assert_eq!(t.get(&row[..1], &Projection::All, &ReadOptions::default()).unwrap().as_ref(), Some(row));
            }
            let gone = if text { Value::Text("user000005".into()) } else { Value::BigInt(5) };
            assert_eq!(t.get(&[gone], &Projection::All, &ReadOptions::default()).unwrap(), None, "{name}");
        }
        db.verify().unwrap();
    };
    let db = Db::open(dir.path(), Options::default()).unwrap();
    check(&db);
    for name in ["ints", "texts", "cols"] {
        db.compact_range(name, &KeyRange::all()).unwrap();
    }
    db.wait_for_compactions().unwrap();
    check(&db);
    db.close().unwrap();
    let after = sst_versions(dir.path());
    assert!(!after.is_empty() && after.iter().all(|&v| v == strata::sst::FORMAT_VERSION), "{after:?}");
    let db = Db::open(dir.path(), Options::default()).unwrap();
    check(&db);
}

/// A read as of a sequence number inside a write batch or a transaction of several writes reads
/// as of just before it: on both engines, before and after a flush, and after a restart (from
/// the WAL without a retention window, from the manifest with one).
#[test]
fn reads_as_of_a_point_inside_a_batch_never_see_part_of_it() {
    for retention in [None, Some(Duration::from_secs(3600))] {
        let fs: Arc<dyn strata::vfs::Fs> = Arc::new(FaultFs::new());
        let opts = || Options { history_retention: retention, ..tiny_options(fs.clone()) };
        let db = Db::open("/batches", opts()).unwrap();
        let lsm = db.create_table("l", schema(), TableOptions::default()).unwrap();
        let lin = db.create_table("g", schema(), TableOptions::default().with_engine(Engine::Lineage)).unwrap();
        let row = |k: i64, a: i32| [Value::BigInt(k), Value::Int(a), Value::Null];
        let start = db.snapshot().seq();
        // Singles, a batch of 6 over both tables, singles, a transaction of 4, a single.
        lsm.insert(&row(1, 0)).unwrap();
        lin.insert(&row(1, 0)).unwrap();
        let mut b = WriteBatch::new();
        for k in 2..5 {
            b.insert(&lsm, &row(k, 1)).unwrap();
            b.insert(&lin, &row(k, 1)).unwrap();
        }
        db.write(b, &strata::WriteOptions::default()).unwrap();
        let after_batch = db.snapshot().seq();
        lsm.insert(&row(9, 2)).unwrap();
        let mut tx = db.begin(&strata::TxnOptions::default()).unwrap();
        tx.update(&lsm, &[Value::BigInt(2)], &[("a", Value::Int(3))]).unwrap();
        tx.update(&lin, &[Value::BigInt(2)], &[("a", Value::Int(3))]).unwrap();
        tx.insert(&lsm, &row(5, 3)).unwrap();
        tx.insert(&lin, &row(5, 3)).unwrap();
        tx.commit(&strata::WriteOptions::default()).unwrap();
        let after_txn = db.snapshot().seq();
        lin.insert(&row(9, 4)).unwrap();
        let end = db.snapshot().seq();
        assert_eq!((after_batch - start, after_txn - after_batch, end - after_txn), (8, 5, 1));
        // Where each point must land: inside the batch or the transaction, just before it.
        let batch = (start + 3)..after_batch;
        let txn = (after_batch + 2)..after_txn;
        let expect = |seq: u64| match seq {
            s if batch.contains(&s) => batch.start - 1,
            s if txn.contains(&s) => txn.start - 1,
            s => s,
        };
        // Without a window a reopened database reads only from its floor up (the floor may lie
        // inside a batch: a flush of the replayed LSM rows ends at the batch's last LSM row), so
        // points placed below it are refused, but any it answers must be placed the same way.
        let check = |db: &Db, when: &str| {
            let (lsm, lin) = (db.table("l").unwrap(), db.table("g").unwrap());
            for seq in start + 1..=end {
                let snap = match db.snapshot_at(seq) {
                    Ok(snap) => snap,
                    Err(Error::InvalidArgument(m))
                        if retention.is_none() && when != "open" && m.contains("readable sequence numbers") =>
                    {
                        continue
                    }
                    Err(e) => panic!("{when}, {retention:?}: seq {seq}: {e}"),
                };
                assert_eq!(snap.seq(), expect(seq), "{when}, {retention:?}: seq {seq}");
                let ro = ReadOptions { snapshot: Some(&snap) };
                let seen = |t: &strata::Table, k: i64| t.get(&[Value::BigInt(k)], &Projection::All, &ro).unwrap();
                // The batch's rows and the transaction's rows are there all together or not at all.
                let batch_rows: Vec<bool> =
                    (2..5).flat_map(|k| [seen(&lsm, k).is_some(), seen(&lin, k).is_some()]).collect();
                assert!(batch_rows.iter().all(|&x| x == batch_rows[0]), "{when}: seq {seq} sees part of the batch");
                let a2 = |t: &strata::Table| seen(t, 2).map(|r| r[1].clone());
                let txn_parts = [
                    a2(&lsm) == Some(Value::Int(3)),
                    a2(&lin) == Some(Value::Int(3)),
                    seen(&lsm, 5).is_some(),
                    seen(&lin, 5).is_some(),
                ];
                assert!(txn_parts.iter().all(|&x| x == txn_parts[0]), "{when}: seq {seq} sees part of the transaction");
            }
        };
        check(&db, "open");
        drop((lsm, lin, db));
        let db = Db::open("/batches", opts()).unwrap();
        check(&db, "replayed from the WAL");
        db.flush().unwrap();
        check(&db, "flushed");
        drop(db);
        check(&Db::open("/batches", opts()).unwrap(), "reopened after the flush");
    }
}

/// Writes alone leave the block cache empty: flushes read older files' blocks to mark the
/// versions they supersede, and compactions read their inputs, both around the cache, so a load
/// does not fill it with blocks no reader asked for. The first point reads then fill it.
#[test]
fn flush_marking_and_compaction_read_around_the_block_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Db::open(tmp.path(), tiny_options(Arc::new(OsFs))).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    // Every round overwrites the same keys, so each flush finds their older versions in files.
    for round in 0..6 {
        let mut b = WriteBatch::new();
        for id in 0..400 {
            b.insert(&t, &[Value::BigInt(id), Value::Int(round), Value::Text(format!("value {id} of round {round}"))])
                .unwrap();
        }
        db.write(b, &Default::default()).unwrap();
        db.flush().unwrap();
    }
    db.wait_for_compactions().unwrap();
    let s = db.stats();
    assert!(s.flushes >= 6 && s.block_reads > 0, "flushes {} and block reads {}", s.flushes, s.block_reads);
    assert_eq!(s.block_cache_bytes, 0, "blocks cached by writes alone");
    let got = t.get(&[Value::BigInt(7)], &Projection::All, &ReadOptions::default()).unwrap();
    assert_eq!(got, Some(vec![Value::BigInt(7), Value::Int(5), Value::Text("value 7 of round 5".into())]));
    assert!(db.stats().block_cache_bytes > 0, "a point read caches the block it read");
}

/// A TEXT column's length limit refuses longer values (counted in characters, not bytes) in
/// every write, key columns included, and survives reopening, as do the table's annotations.
#[test]
fn text_length_limits_and_annotations_persist_and_are_enforced() {
    let fs = FaultFs::new();
    let dir = Path::new("/limits");
    let s = Schema::new(
        vec![
            Column::new("code", ColumnType::Text).with_max_chars(3),
            Column::new("note", ColumnType::Text).with_max_chars(5),
            Column::new("free", ColumnType::Text),
        ],
        &["code"],
    )
    .unwrap();
    assert!(Schema::new(vec![Column::new("n", ColumnType::Int).with_max_chars(3)], &["n"]).is_err());
    let options = TableOptions::default().annotate("sql.type.note", "character varying(5)");
    {
        let db = Db::open(dir, tiny_options(Arc::new(fs.clone()))).unwrap();
        db.create_table("t", s.clone(), options.clone()).unwrap();
        db.close().unwrap();
    }
    let db = Db::open(dir, tiny_options(Arc::new(fs))).unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(t.schema(), &s);
    assert_eq!(t.options().annotations, options.annotations);
    // Five two-byte characters fit a limit of five; six characters do not.
    t.insert(&["abc".into(), "ééééé".into(), "x".repeat(1000).into()]).unwrap();
    let too_long = t.insert(&["abd".into(), "éééééé".into(), Value::Null]).unwrap_err();
    assert!(matches!(&too_long, Error::TypeMismatch { column, .. } if column == "note"), "{too_long}");
    let key_too_long = t.insert(&["abcd".into(), Value::Null, Value::Null]).unwrap_err();
    assert!(matches!(&key_too_long, Error::TypeMismatch { column, .. } if column == "code"), "{key_too_long}");
    let update = t.update(&["abc".into()], &[("note", "123456".into())]).unwrap_err();
    assert!(matches!(&update, Error::TypeMismatch { column, .. } if column == "note"), "{update}");
    assert_eq!(all(&t), vec![vec![Value::from("abc"), "ééééé".into(), "x".repeat(1000).into()]]);
}

/// `Db::replace_table` swaps a table for another in one durable step, and refuses (changing
/// nothing) when the replaced table was written after the point the caller copied it at.
#[test]
fn replace_table_swaps_durably_and_refuses_after_a_newer_write() {
    let fs = FaultFs::new();
    let dir = Path::new("/replace");
    let db = Db::open(dir, tiny_options(Arc::new(fs.clone()))).unwrap();
    let old = db.create_table("t", schema(), TableOptions::default()).unwrap();
    old.insert(&[Value::BigInt(1), Value::Int(1), "old".into()]).unwrap();
    db.flush().unwrap();
    old.insert(&[Value::BigInt(2), Value::Int(2), "old".into()]).unwrap();
    let copied_at = db.snapshot().seq();
    let new = db.create_table("t_new", schema(), TableOptions::default()).unwrap();
    new.insert(&[Value::BigInt(9), Value::Int(9), "new".into()]).unwrap();
    // A write to the old table after the copy point, in a memtable, then in a file.
    old.insert(&[Value::BigInt(3), Value::Int(3), "late".into()]).unwrap();
    let e = db.replace_table("t", "t_new", Some(copied_at)).unwrap_err();
    assert!(matches!(e, Error::TableChanged { .. }) && e.is_retryable(), "{e}");
    db.flush().unwrap();
    let e = db.replace_table("t", "t_new", Some(copied_at)).unwrap_err();
    assert!(matches!(e, Error::TableChanged { .. }), "{e}");
    assert_eq!(all(&db.table("t").unwrap()).len(), 3, "a refused replace changed the table");
    assert!(db.replace_table("t", "t", None).is_err());
    assert!(db.replace_table("t", "missing", None).is_err());
    db.replace_table("t", "t_new", Some(db.snapshot().seq())).unwrap();
    assert_eq!(db.table_names(), vec!["t".to_string()]);
    let rows = vec![vec![Value::BigInt(9), Value::Int(9), "new".into()]];
    assert_eq!(all(&db.table("t").unwrap()), rows);
    db.close().unwrap();
    let db = Db::open(dir, tiny_options(Arc::new(fs))).unwrap();
    assert_eq!(db.table_names(), vec!["t".to_string()]);
    assert_eq!(all(&db.table("t").unwrap()), rows);
}

/// A transaction's writes as a batch (`Transaction::into_batch`) for another database to apply:
/// reads overlaid with its own writes, the batch holding the last write of each row once (listed
/// by `WriteBatch::rows`, in key order), nothing written where it ran; and a transaction
/// that already lost its row to a later commit gives the conflict instead of a batch.
#[test]
fn a_transactions_writes_leave_as_one_batch_for_a_replicated_log() {
    let fs: Arc<dyn strata::vfs::Fs> = Arc::new(FaultFs::new());
    let (here, there) =
        (Db::open("/here", tiny_options(fs.clone())).unwrap(), Db::open("/there", tiny_options(fs)).unwrap());
    for db in [&here, &there] {
        db.create_table("t", schema(), TableOptions::default()).unwrap();
    }
    let t = here.table("t").unwrap();
    let row = |id: i64, a: i32| vec![Value::BigInt(id), Value::Int(a), Value::Null];
    t.insert(&row(1, 1)).unwrap();
    let before = here.snapshot().seq();
    let mut tx = here.begin(&strata::TxnOptions::default()).unwrap();
    tx.insert(&t, &row(2, 20)).unwrap();
    tx.insert(&t, &row(2, 21)).unwrap();
    tx.update(&t, &[Value::BigInt(1)], &[("a", Value::Int(10))]).unwrap();
    assert_eq!(tx.get(&t, &[Value::BigInt(2)], &Projection::All).unwrap(), Some(row(2, 21)));
    let batch = tx.into_batch().unwrap();
    assert_eq!(here.snapshot().seq(), before, "nothing was written where the transaction ran");
    let id = t.info().id;
    let mut rows: Vec<(u32, Vec<u8>)> = batch.rows().map(|(table, key)| (table, key.to_vec())).collect();
    rows.dedup();
    let key = |k: i64| {
        let mut out = Vec::new();
        strata::types::key::encode_value(&mut out, ColumnType::BigInt, &Value::BigInt(k));
        out
    };
    assert_eq!(rows, vec![(id, key(1)), (id, key(2))], "the rows in key order");
    let there_t = there.table("t").unwrap();
    there_t.insert(&row(1, 1)).unwrap();
    let at = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis() as u64;
    there.apply_replicated(WriteBatch::from_payload(&batch.payload()).unwrap(), at, &Default::default()).unwrap();
    let all = |t: &strata::Table| -> Vec<Vec<Value>> {
        t.scan(&KeyRange::all(), &Projection::All, &ReadOptions::default()).unwrap().map(Result::unwrap).collect()
    };
    assert_eq!(all(&there_t), vec![row(1, 10), row(2, 21)]);

    let mut tx = here.begin(&strata::TxnOptions::default()).unwrap();
    t.insert(&row(1, 5)).unwrap();
    let e = tx.insert(&t, &row(1, 6)).unwrap_err();
    assert!(matches!(e, Error::Conflict { .. }), "{e}");
    let e = tx.into_batch().unwrap_err();
    assert!(matches!(e, Error::Conflict { .. }), "{e}");
}
