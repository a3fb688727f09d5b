//! `strata serve` killed (SIGKILL) while clients run transactions through it: bank transfers
//! between an LSM and a lineage table, each transaction also inserting a marker row, from four
//! connections. After each kill the database is reopened in process and checked: every
//! acknowledged COMMIT's marker is there, and every balance is its opening balance plus exactly
//! the transfers whose markers survived (each transaction whole or not at all, the total
//! conserved). Three rounds on the same database, so later rounds also reopen what a kill left.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use postgres::error::SqlState;
use postgres::{Client, NoTls};
use strata::{Db, KeyRange, Options, Projection, ReadOptions, Value};

const ACCOUNTS: i64 = 8;
const OPENING: i64 = 1_000;
const CLIENTS: u64 = 4;

fn strata(db: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_strata"));
    c.arg("--db").arg(db);
    c
}

fn int(v: &Value) -> i64 {
    match v {
        Value::BigInt(x) => *x,
        other => panic!("not a BIGINT: {other:?}"),
    }
}

/// Reopens the database and checks balances against the surviving markers; returns them.
fn check(db_path: &Path, what: &str) -> HashSet<i64> {
    let db = Db::open(db_path, Options::default()).unwrap();
    let ro = ReadOptions::default();
    let mut expected = [[OPENING; ACCOUNTS as usize]; 2];
    let mut seen = HashSet::new();
    let marks = db.table("marks").unwrap();
    for row in marks.scan(&KeyRange::all(), &Projection::All, &ro).unwrap() {
        let r: Vec<i64> = row.unwrap().iter().map(int).collect();
        seen.insert(r[0]);
        expected[r[1] as usize][r[2] as usize] -= r[5];
        expected[r[3] as usize][r[4] as usize] += r[5];
    }
    for (t, name) in ["acct_lsm", "acct_lineage"].into_iter().enumerate() {
        let table = db.table(name).unwrap();
        let got: Vec<i64> =
            table.scan(&KeyRange::all(), &Projection::All, &ro).unwrap().map(|r| int(&r.unwrap()[1])).collect();
        assert_eq!(
            got,
            expected[t].to_vec(),
            "{what}: {name} is not the opening balances plus the surviving transfers"
        );
    }
    db.verify().unwrap();
    db.close().unwrap();
    seen
}

/// One transfer; `Ok(true)` when its COMMIT was acknowledged, `Ok(false)` when it lost a
/// conflict, `Err` when the connection went (the server was killed).
fn transfer(c: &mut Client, mark: i64, x: &mut u64) -> Result<bool, postgres::Error> {
    let mut next = |n: u64| {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        (*x % n) as i64
    };
    let tables = ["acct_lsm", "acct_lineage"];
    let (ft, fi, ti) = (next(2) as usize, next(ACCOUNTS as u64), next(ACCOUNTS as u64));
    let tt = if fi == ti || next(2) == 0 { 1 - ft } else { ft };
    let amount = 1 + next(50);
    let attempt = |c: &mut Client| -> Result<(), postgres::Error> {
        // REPEATABLE READ: the new balances are computed here from values read by earlier
        // statements, which READ COMMITTED (the default) would let a concurrent transfer
        // overwrite (a lost update, as in PostgreSQL).
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")?;
        let from: i64 = c.query_one(&format!("SELECT balance FROM {} WHERE id = $1", tables[ft]), &[&fi])?.get(0);
        let to: i64 = c.query_one(&format!("SELECT balance FROM {} WHERE id = $1", tables[tt]), &[&ti])?.get(0);
        c.execute(&format!("UPDATE {} SET balance = $1 WHERE id = $2", tables[ft]), &[&(from - amount), &fi])?;
        c.execute(&format!("UPDATE {} SET balance = $1 WHERE id = $2", tables[tt]), &[&(to + amount), &ti])?;
        let (ft, tt) = (ft as i64, tt as i64);
        c.execute("INSERT INTO marks VALUES ($1, $2, $3, $4, $5, $6)", &[&mark, &ft, &fi, &tt, &ti, &amount])?;
        c.batch_execute("COMMIT")
    };
    match attempt(c) {
        Ok(()) => Ok(true),
        Err(e) if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) => {
            c.batch_execute("ROLLBACK")?;
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

#[test]
fn a_killed_server_keeps_every_acknowledged_transaction_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut setup = String::from(
        "CREATE TABLE acct_lsm (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL); \
         CREATE TABLE acct_lineage (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL) WITH (engine = 'lineage'); \
         CREATE TABLE marks (id BIGINT PRIMARY KEY, ft BIGINT, fi BIGINT, tt BIGINT, ti BIGINT, amount BIGINT);",
    );
    for t in ["acct_lsm", "acct_lineage"] {
        let rows: Vec<String> = (0..ACCOUNTS).map(|i| format!("({i}, {OPENING})")).collect();
        setup.push_str(&format!(" INSERT INTO {t} VALUES {};", rows.join(", ")));
    }
    let out = strata(&db).args(["sql", "-c", &setup]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let next_mark = AtomicI64::new(0);
    let mut total_acked = 0;
    for round in 0..3u64 {
        let mut server = strata(&db)
            .args(["serve", "--pg", "127.0.0.1:0"])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
        let addr = loop {
            let line = lines.next().expect("the server said where it listens").unwrap();
            if let Some(rest) = line.split("protocol on ").nth(1) {
                break rest.split_whitespace().next().unwrap().to_string();
            }
        };
        let (host, port) = addr.rsplit_once(':').unwrap();
        let url = format!("host={host} port={port} user=strata");
        let acked = Mutex::new(Vec::<i64>::new());
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for c in 0..CLIENTS {
                let (url, acked, stop, next_mark) = (&url, &acked, &stop, &next_mark);
                s.spawn(move || {
                    let mut client = Client::connect(url, NoTls).unwrap();
                    let mut x = 0x2545_f491_4f6c_dd1du64 ^ (round * 16 + c + 1);
                    while !stop.load(Ordering::Relaxed) {
                        let mark = next_mark.fetch_add(1, Ordering::Relaxed);
                        match transfer(&mut client, mark, &mut x) {
                            Ok(true) => acked.lock().unwrap().push(mark),
                            Ok(false) => {}
                            Err(_) => break,
                        }
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(300 + 200 * round));
            server.kill().unwrap();
            server.wait().unwrap();
            stop.store(true, Ordering::Relaxed);
        });
        let acked = acked.into_inner().unwrap();
        let seen = check(&db, &format!("round {round}"));
        let missing: Vec<&i64> = acked.iter().filter(|m| !seen.contains(m)).collect();
        assert!(missing.is_empty(), "round {round}: acknowledged commits lost when the server was killed: {missing:?}");
        total_acked += acked.len();
    }
    assert!(total_acked > 30, "only {total_acked} transfers were acknowledged");
}
