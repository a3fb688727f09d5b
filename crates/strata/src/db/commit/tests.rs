//! The commit pipeline against a fake environment: what it logs, applies and publishes, in
//! which order, for groups of plain writes and transactions, with writers on many threads.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use super::{CommitEnv, CommitOptions, Committer, Validate};
use crate::error::{Error, Result};
use crate::mvcc::batches::Batches;
use crate::mvcc::clock::Clock;
use crate::mvcc::conflict::Lost;
use crate::mvcc::Kind;
use crate::sync::Mutex;
use crate::vfs::{FaultFs, FaultKind, Fs};
use crate::write::batch::{BatchOp, WriteBatch};
use crate::write::wal::{read_log, WalWriter, WAL_MAGIC};

/// What the fake environment saw, and how it behaves.
struct Fake {
    fs: FaultFs,
    next_wal: AtomicU64,
    visible: AtomicU64,
    /// Every batch applied or inserted: its first sequence number and length, and whether the
    /// leader applied it in order.
    applied: Mutex<Vec<(u64, u64, bool)>>,
    /// Every sequence number published, in order.
    published: Mutex<Vec<u64>>,
    /// Tables whose writes apply in order.
    in_order: HashSet<u32>,
    /// The next group finds the memtable full.
    full: AtomicBool,
    /// WALs frozen memtables moved on to.
    frozen: Mutex<Vec<u64>>,
    poisoned: Mutex<Option<String>>,
}

impl Fake {
    fn new(in_order: &[u32]) -> Arc<Fake> {
        let fs = FaultFs::new();
        fs.create_dir_all(Path::new("/wal")).unwrap();
        Arc::new(Fake {
            fs,
            next_wal: AtomicU64::new(2),
            visible: AtomicU64::new(0),
            applied: Mutex::default(),
            published: Mutex::default(),
            in_order: in_order.iter().copied().collect(),
            full: AtomicBool::new(false),
            frozen: Mutex::default(),
            poisoned: Mutex::default(),
        })
    }

    fn wal_path(n: u64) -> PathBuf {
        PathBuf::from(format!("/wal/{n:06}.log"))
    }

    fn committer(&self, opts: CommitOptions) -> Committer {
        let wal = WalWriter::create(&self.fs, &Fake::wal_path(1)).unwrap();
        Committer::new((1, wal), Clock::default(), Batches::known_from(0), 0, opts)
    }

    /// Every batch logged in WAL `n`: first sequence number and operations.
    fn logged(&self, n: u64) -> Vec<(u64, Vec<BatchOp>)> {
        let (records, _) = read_log(&self.fs, &Fake::wal_path(n), WAL_MAGIC).unwrap();
        records.iter().map(|r| WriteBatch::decode(r).map(|(first, _, ops)| (first, ops)).unwrap()).collect()
    }

    fn record(&self, batch: &WriteBatch, first: u64, in_order: bool) {
        self.applied.lock().push((first, batch.len() as u64, in_order));
    }
}

impl CommitEnv for Fake {
    fn check_writable(&self) -> Result<()> {
        match self.poisoned.lock().clone() {
            Some(e) => Err(Error::Poisoned(e)),
            None => Ok(()),
        }
    }

    fn admit(&self, _: &WriteBatch) -> Result<()> {
        Ok(())
    }

    fn make_room(&self) -> Result<bool> {
        Ok(self.full.swap(false, Ordering::SeqCst))
    }

    fn new_wal(&self) -> Result<(u64, WalWriter)> {
        let n = self.next_wal.fetch_add(1, Ordering::SeqCst);
        Ok((n, WalWriter::create(&self.fs, &Fake::wal_path(n))?))
    }

    fn freeze(&self, number: u64) {
        self.frozen.lock().push(number);
    }

    fn visible(&self) -> u64 {
        self.visible.load(Ordering::SeqCst)
    }

    fn publish(&self, seq: u64) {
        // Everything up to `seq` must be applied before it is visible.
        let applied = self.applied.lock();
        let mut covered: Vec<(u64, u64)> = applied.iter().map(|&(f, n, _)| (f, f + n - 1)).collect();
        covered.sort_unstable();
        let mut next = 1;
        for (f, l) in covered {
            assert_eq!(f, next, "sequence {next} was published as part of {seq} before it was applied");
            next = l + 1;
        }
        assert_eq!(next, seq + 1, "published {seq} with sequences up to {} applied", next - 1);
        drop(applied);
        let mut published = self.published.lock();
        // A group whose every request lost publishes what was visible already.
        assert!(published.last().is_none_or(|&p| p <= seq), "published {seq} after {published:?}");
        published.push(seq);
        self.visible.store(seq, Ordering::SeqCst);
    }

    fn in_order(&self, batch: &WriteBatch) -> bool {
        batch.ops.iter().any(|op| self.in_order.contains(&op.table_id))
    }

    fn apply(&self, batch: &WriteBatch, first: u64) -> Result<()> {
        self.record(batch, first, true);
        Ok(())
    }

    fn insert(&self, batch: &WriteBatch, first: u64) -> Result<()> {
        self.record(batch, first, false);
        Ok(())
    }

    fn applied(&self, _: &mut dyn Iterator<Item = &WriteBatch>) {}

    fn poison(&self, e: &Error) {
        self.poisoned.lock().get_or_insert_with(|| e.to_string());
    }
}

const SERIAL: CommitOptions = CommitOptions { spin: false, parallel_inserts: false, window_bytes: 1 << 20 };
const PARALLEL: CommitOptions = CommitOptions { spin: true, parallel_inserts: true, window_bytes: 1 << 20 };

/// A batch of `n` puts into `table`, keys `key`, `key + 1`, ...
fn batch(table: u32, key: u32, n: u32) -> WriteBatch {
    let mut b = WriteBatch::new();
    for k in key..key + n {
        b.push(BatchOp { table_id: table, kind: Kind::Put, key: k.to_be_bytes().to_vec(), row: vec![1, 2, 3] });
    }
    b
}

/// Holds the leader's turn until `n` writers have queued behind it, on `threads` threads each
/// committing what `each` gives it; returns each writer's outcome.
fn queued_then_led<T: Send>(c: &Arc<Committer>, threads: usize, each: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let start = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let holder = s.spawn(|| {
            c.as_leader(|_| {
                start.wait();
                while c.queue.len() < threads {
                    std::thread::yield_now();
                }
            })
        });
        let writers: Vec<_> = (0..threads)
            .map(|i| {
                let (start, each) = (&start, &each);
                s.spawn(move || {
                    start.wait();
                    each(i)
                })
            })
            .collect();
        holder.join().unwrap();
        writers.into_iter().map(|w| w.join().unwrap()).collect()
    })
}

#[test]
fn writers_queued_behind_a_leader_commit_as_one_group_logged_once_and_published_once() {
    for opts in [SERIAL, PARALLEL] {
        let env = Fake::new(&[]);
        let c = Arc::new(env.committer(opts));
        let outcomes = queued_then_led(&c, 6, |i| c.commit(&*env, batch(1, 100 * i as u32, 3), false, None, None));
        assert!(outcomes.iter().all(|o| matches!(o, Ok(Ok(())))), "{opts:?}: {outcomes:?}");
        // One group: one publication of all 18 writes, and their batches in the WAL with
        // sequence numbers in turn.
        assert_eq!(*env.published.lock(), vec![18], "{opts:?}");
        let logged = env.logged(1);
        assert_eq!(logged.len(), 6);
        let mut next = 1;
        for (first, ops) in &logged {
            assert_eq!(*first, next, "{opts:?}: batches logged out of turn");
            next += ops.len() as u64;
        }
        // Each batch applied once, at the sequence numbers it was logged at; in parallel by
        // their writers when the pipeline may.
        let mut applied = env.applied.lock().clone();
        applied.sort_unstable();
        let want: Vec<(u64, u64, bool)> =
            logged.iter().map(|(f, ops)| (*f, ops.len() as u64, !opts.parallel_inserts)).collect();
        assert_eq!(applied, want, "{opts:?}");
    }
}

#[test]
fn a_transaction_that_lost_is_left_out_of_its_group_and_the_others_commit() {
    let env = Fake::new(&[]);
    let c = Arc::new(env.committer(SERIAL));
    // A write transaction is open, so the window records what commits.
    c.conflicts.lock().open(0);
    c.conflicts_open.store(true, Ordering::SeqCst);
    let row = (1u32, 7u32.to_be_bytes().to_vec());
    // Three transactions write row 7 knowing it at sequence 0, with a plain write beside them:
    // whichever is first in the group wins, the other two lose.
    let outcomes = queued_then_led(&c, 4, |i| {
        let (b, validate) = match i {
            0 => (batch(2, 1, 2), None),
            _ => (batch(1, 7, 1), Some(Validate { rows: vec![(row.clone(), 0)] })),
        };
        (i, c.commit(&*env, b, false, validate, None))
    });
    let won: Vec<usize> = outcomes.iter().filter(|(_, o)| matches!(o, Ok(Ok(())))).map(|(i, _)| *i).collect();
    let lost = outcomes.iter().filter(|(_, o)| matches!(o, Ok(Err(Lost::Row { .. })))).count();
    assert_eq!((won.len(), lost), (2, 2), "{outcomes:?}");
    assert!(won.contains(&0), "the plain write committed");
    // Only the winners were logged and applied, with sequence numbers without gaps.
    let logged = env.logged(1);
    let spans: Vec<(u64, u64)> = logged.iter().map(|(f, ops)| (*f, ops.len() as u64)).collect();
    assert_eq!(spans.len(), 2, "{logged:?}");
    assert_eq!((spans[0].0, spans[1].0), (1, 1 + spans[0].1), "{logged:?}");
    assert_eq!(spans[0].1 + spans[1].1, 3, "{logged:?}");
    let mut applied: Vec<(u64, u64)> = env.applied.lock().iter().map(|&(f, n, _)| (f, n)).collect();
    applied.sort_unstable();
    assert_eq!(applied, spans);
    assert_eq!(*env.published.lock(), vec![3]);
    // The window recorded the winner's row, so a later transaction that knew it at 0 loses.
    let late = c.commit(&*env, batch(1, 7, 1), false, Some(Validate { rows: vec![(row, 0)] }), None);
    assert!(matches!(late, Ok(Err(Lost::Row { .. }))), "{late:?}");
    assert_eq!(env.logged(1).len(), 2, "the loser was logged");
    assert_eq!(*env.published.lock(), vec![3, 3]);
}

#[test]
fn a_full_memtable_is_frozen_on_a_new_wal_before_the_group_is_logged() {
    let env = Fake::new(&[]);
    let c = env.committer(SERIAL);
    c.commit(&*env, batch(1, 0, 2), false, None, None).unwrap().unwrap();
    env.full.store(true, Ordering::SeqCst);
    c.commit(&*env, batch(1, 10, 1), true, None, None).unwrap().unwrap();
    assert_eq!(*env.frozen.lock(), vec![2]);
    assert_eq!(c.wal_number(), 2);
    // The first group stays in the first WAL, the second goes to the new one.
    assert_eq!(env.logged(1).iter().map(|(f, _)| *f).collect::<Vec<_>>(), vec![1]);
    assert_eq!(env.logged(2).iter().map(|(f, _)| *f).collect::<Vec<_>>(), vec![3]);
    assert_eq!(*env.published.lock(), vec![2, 3]);
}

#[test]
fn a_store_applying_in_order_keeps_its_group_serial_and_in_commit_order() {
    // Table 5's writes apply in order: a group holding one is applied by the leader, batch
    // after batch in sequence order, even with parallel inserts allowed.
    let env = Fake::new(&[5]);
    let c = Arc::new(env.committer(PARALLEL));
    let outcomes = queued_then_led(&c, 5, |i| {
        let table = if i == 2 { 5 } else { 1 };
        c.commit(&*env, batch(table, 10 * i as u32, 2), false, None, None)
    });
    assert!(outcomes.iter().all(|o| matches!(o, Ok(Ok(())))), "{outcomes:?}");
    let applied = env.applied.lock().clone();
    assert!(applied.iter().all(|&(_, _, in_order)| in_order), "{applied:?}");
    let firsts: Vec<u64> = applied.iter().map(|&(f, _, _)| f).collect();
    assert_eq!(firsts, vec![1, 3, 5, 7, 9], "applied out of commit order");
    assert_eq!(*env.published.lock(), vec![10]);
}

#[test]
fn groups_from_many_writers_publish_every_sequence_number_once_and_in_order() {
    for opts in [SERIAL, PARALLEL] {
        let env = Fake::new(&[]);
        let c = Arc::new(env.committer(opts));
        let (threads, per) = (8u32, 200u32);
        std::thread::scope(|s| {
            for t in 0..threads {
                let (c, env) = (&c, &env);
                s.spawn(move || {
                    for i in 0..per {
                        c.commit(&**env, batch(1, t * 10_000 + 2 * i, 1 + i % 2), false, None, None).unwrap().unwrap();
                    }
                });
            }
        });
        let total: u64 = (0..per).map(|i| u64::from(1 + i % 2)).sum::<u64>() * u64::from(threads);
        let published = env.published.lock().clone();
        assert_eq!(published.last(), Some(&total), "{opts:?}");
        // Every batch logged once, at the sequence numbers it was applied at.
        let mut logged: BTreeMap<u64, u64> = BTreeMap::new();
        for (f, ops) in env.logged(1) {
            assert!(logged.insert(f, ops.len() as u64).is_none(), "{opts:?}: {f} logged twice");
        }
        let applied: BTreeMap<u64, u64> = env.applied.lock().iter().map(|&(f, n, _)| (f, n)).collect();
        assert_eq!(logged, applied, "{opts:?}");
        assert_eq!(logged.len() as u32, threads * per, "{opts:?}");
    }
}

#[test]
fn a_failed_wal_write_fails_its_group_stops_writes_and_applies_nothing() {
    let env = Fake::new(&[]);
    let c = Arc::new(env.committer(SERIAL));
    env.fs.fail_writes(".log", 0, FaultKind::Fail);
    let outcomes = queued_then_led(&c, 3, |i| c.commit(&*env, batch(1, i as u32, 1), true, None, None));
    assert!(outcomes.iter().all(|o| o.is_err()), "{outcomes:?}");
    assert!(env.poisoned.lock().is_some());
    assert!(env.applied.lock().is_empty());
    assert!(env.published.lock().is_empty());
    env.fs.clear_faults();
    let after = c.commit(&*env, batch(1, 9, 1), false, None, None);
    assert!(matches!(after, Err(Error::Poisoned(_))), "{after:?}");
}
