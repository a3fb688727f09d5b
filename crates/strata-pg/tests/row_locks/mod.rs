//! READ COMMITTED through the server: a second writer of a row waits for the first and then
//! updates the row as committed. pgbench's TPC-B transaction from 8 connections over a few hot
//! rows commits every time and keeps its totals; a cycle of waits fails one block with 40P01.

use std::time::Duration;

use postgres::error::SqlState;
use postgres::{Client, NoTls};

use super::start;

const CLIENTS: usize = 8;
const TXNS: usize = 100;
const BRANCHES: i64 = 2;
const TELLERS: i64 = 4;
const ACCOUNTS: i64 = 50;

fn url(server: &super::Running) -> String {
    format!("host={} port={} user=strata", server.addr.ip(), server.addr.port())
}

fn total(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

#[test]
fn tpcb_under_read_committed_commits_every_transaction_and_keeps_the_totals() {
    let server = start(|_| {});
    let url = url(&server);
    let mut setup = Client::connect(&url, NoTls).unwrap();
    setup
        .batch_execute(
            "CREATE TABLE branches (bid INT PRIMARY KEY, bbalance BIGINT NOT NULL);
             CREATE TABLE tellers (tid INT PRIMARY KEY, bid INT, tbalance BIGINT NOT NULL);
             CREATE TABLE accounts (aid INT PRIMARY KEY, bid INT, abalance BIGINT NOT NULL);
             CREATE TABLE history (tid INT, bid INT, aid INT, delta BIGINT, mtime TIMESTAMP);",
        )
        .unwrap();
    setup.batch_execute(&format!("INSERT INTO branches SELECT g, 0 FROM generate_series(1, {BRANCHES}) AS g")).unwrap();
    setup
        .batch_execute(&format!("INSERT INTO tellers SELECT g, 1, 0 FROM generate_series(1, {TELLERS}) AS g"))
        .unwrap();
    setup
        .batch_execute(&format!("INSERT INTO accounts SELECT g, 1, 0 FROM generate_series(1, {ACCOUNTS}) AS g"))
        .unwrap();

    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let url = &url;
                s.spawn(move || {
                    let mut c = Client::connect(url, NoTls).unwrap();
                    let update_account = c.prepare("UPDATE accounts SET abalance = abalance + $1 WHERE aid = $2").unwrap();
                    let select_account = c.prepare("SELECT abalance FROM accounts WHERE aid = $1").unwrap();
                    let update_teller = c.prepare("UPDATE tellers SET tbalance = tbalance + $1 WHERE tid = $2").unwrap();
                    let update_branch = c.prepare("UPDATE branches SET bbalance = bbalance + $1 WHERE bid = $2").unwrap();
                    let insert_history = c
                        .prepare("INSERT INTO history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)")
                        .unwrap();
                    // A small deterministic generator: the interleaving varies from run to run anyway.
                    let mut x = 0x2545_f491_4f6c_dd1du64 ^ (client as u64 + 1);
                    let mut next = move |n: i64| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (x % n as u64) as i64
                    };
                    let mut failures = Vec::new();
                    for i in 0..TXNS {
                        let (aid, tid, bid) = (1 + next(ACCOUNTS), 1 + next(TELLERS), 1 + next(BRANCHES));
                        let (aid, tid, bid) = (aid as i32, tid as i32, bid as i32);
                        let delta = next(10_001) - 5_000;
                        let run = |c: &mut Client| -> Result<(), postgres::Error> {
                            c.batch_execute("BEGIN")?;
                            c.execute(&update_account, &[&delta, &aid])?;
                            c.query_one(&select_account, &[&aid])?;
                            c.execute(&update_teller, &[&delta, &tid])?;
                            c.execute(&update_branch, &[&delta, &bid])?;
                            c.execute(&insert_history, &[&tid, &bid, &aid, &delta])?;
                            c.batch_execute("END")
                        };
                        if let Err(e) = run(&mut c) {
                            failures.push(format!("client {client} transaction {i}: {e:?}"));
                            let _ = c.batch_execute("ROLLBACK");
                        }
                    }
                    failures
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(failures.is_empty(), "{} of {} transactions failed: {failures:#?}", failures.len(), CLIENTS * TXNS);
    let n = total(&mut setup, "SELECT count(*) FROM history");
    assert_eq!(n, (CLIENTS * TXNS) as i64);
    let deltas = total(&mut setup, "SELECT sum(delta) FROM history");
    assert_eq!(total(&mut setup, "SELECT sum(abalance) FROM accounts"), deltas, "accounts lost an update");
    assert_eq!(total(&mut setup, "SELECT sum(tbalance) FROM tellers"), deltas, "tellers lost an update");
    assert_eq!(total(&mut setup, "SELECT sum(bbalance) FROM branches"), deltas, "branches lost an update");
}

#[test]
fn a_cycle_of_row_waits_fails_the_block_that_closes_it_with_40p01() {
    let server = start(|_| {});
    let url = url(&server);
    let mut a = Client::connect(&url, NoTls).unwrap();
    let mut b = Client::connect(&url, NoTls).unwrap();
    a.batch_execute("CREATE TABLE t (id INT PRIMARY KEY, n INT); INSERT INTO t VALUES (1, 0), (2, 0)").unwrap();
    a.batch_execute("BEGIN; UPDATE t SET n = n + 1 WHERE id = 1").unwrap();
    b.batch_execute("BEGIN; UPDATE t SET n = n + 10 WHERE id = 2").unwrap();
    // a waits for b's row (the planned path: not a point statement); a block that fails rolls
    // back, releasing its rows, and a block that gets through commits.
    let finish = |c: &mut Client, r: Result<(), postgres::Error>| -> bool {
        match r {
            Ok(()) => {
                c.batch_execute("COMMIT").unwrap();
                true
            }
            Err(e) => {
                assert_eq!(e.code(), Some(&SqlState::T_R_DEADLOCK_DETECTED), "{e:?}");
                c.batch_execute("ROLLBACK").unwrap();
                false
            }
        }
    };
    let waiter = std::thread::spawn(move || {
        let r = a.batch_execute("UPDATE t SET n = n + 1 WHERE id IN (2)");
        let committed = finish(&mut a, r);
        (a, committed)
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished(), "the second writer of row 2 did not wait");
    // b waiting for a's row closes the cycle: one of the two (b, unless the machine was too slow
    // for a to be waiting yet) fails with 40P01, and the other then gets its row and commits.
    let r = b.batch_execute("UPDATE t SET n = n + 10 WHERE id = 1");
    let b_committed = finish(&mut b, r);
    let (mut a, a_committed) = waiter.join().unwrap();
    assert!(a_committed != b_committed, "exactly one block fails: a {a_committed}, b {b_committed}");
    let rows: Vec<(i32, i32)> =
        a.query("SELECT id, n FROM t ORDER BY id", &[]).unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
    let want = if a_committed { [(1, 1), (2, 1)] } else { [(1, 10), (2, 10)] };
    assert_eq!(rows, want);
}
