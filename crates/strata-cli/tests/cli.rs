//! Drives the built `strata` binary: every `exec` op and error kind, `check` on a damaged file,
//! and a crash test that SIGKILLs `strata exec --sync` mid-stream.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use rand::{Rng, SeedableRng};
use serde_json::{json, Value as Json};

mod fuzz;

/// The allocator notes each thread's largest allocation, which the fuzz replays check.
#[global_allocator]
static ALLOC: strata::fuzz::TrackingAlloc = strata::fuzz::TrackingAlloc;

fn strata(db: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_strata"));
    c.arg("--db").arg(db);
    c
}

/// Runs `strata exec` over the requests and returns one response per request.
fn exec(db: &Path, reqs: &[Json]) -> Vec<Json> {
    let mut child = strata(db).arg("exec").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for r in reqs {
        writeln!(stdin, "{r}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "exec failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Runs one command: (success, stdout, stderr).
fn run_cli(db: &Path, args: &[&str]) -> (bool, String, String) {
    let out = strata(db).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn ok(r: &Json) -> &Json {
    assert_eq!(r["ok"], json!(true), "{r}");
    r
}

fn err_kind(r: &Json) -> &str {
    assert_eq!(r["ok"], json!(false), "{r}");
    r["error"]["kind"].as_str().unwrap()
}

/// Named transactions in `exec`: reads see the transaction's writes, others do not until the
/// commit; rollback and the end of the session discard; a conflict ends the loser with nothing
/// written; a refused batch leaves the transaction as it was.
#[test]
fn exec_transactions_commit_roll_back_and_conflict_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let r = exec(
        &db,
        &[
            json!({"op":"create_table","table":"a","schema":"id BIGINT PRIMARY KEY, n BIGINT"}),
            json!({"op":"create_table","table":"l","schema":"id BIGINT PRIMARY KEY, n BIGINT","engine":"lineage"}),
            json!({"op":"batch","ops":[
                {"op":"insert","table":"a","row":{"id":1,"n":100}},
                {"op":"insert","table":"l","row":{"id":1,"n":0}}
            ]}),
            // 3: a transfer across both engines.
            json!({"op":"begin","txn":"t"}),
            json!({"op":"update","table":"a","key":{"id":1},"set":{"n":70},"txn":"t"}),
            json!({"op":"batch","txn":"t","ops":[{"op":"update","table":"l","key":{"id":1},"set":{"n":30}}]}),
            json!({"op":"get","table":"l","key":{"id":1},"txn":"t"}),
            json!({"op":"get","table":"l","key":{"id":1}}),
            json!({"op":"scan","table":"a","agg":["sum(n)"],"txn":"t"}),
            json!({"op":"commit","txn":"t"}),
            json!({"op":"get","table":"l","key":{"id":1}}),
            // 11: rollback discards; the name is free again.
            json!({"op":"begin","txn":"t"}),
            json!({"op":"delete","table":"a","key":{"id":1},"txn":"t"}),
            json!({"op":"rollback","txn":"t"}),
            json!({"op":"get","table":"a","key":{"id":1},"txn":"t"}),
            json!({"op":"get","table":"a","key":{"id":1}}),
            // 16: first committer wins.
            json!({"op":"begin","txn":"x"}),
            json!({"op":"begin","txn":"y"}),
            json!({"op":"update","table":"a","key":{"id":1},"set":{"n":1},"txn":"x"}),
            json!({"op":"update","table":"a","key":{"id":1},"set":{"n":2},"txn":"y"}),
            json!({"op":"commit","txn":"x"}),
            json!({"op":"commit","txn":"y"}),
            json!({"op":"get","table":"a","key":{"id":1}}),
            // 23: refused requests.
            json!({"op":"begin","txn":"z","read_only":true}),
            json!({"op":"begin","txn":"z"}),
            json!({"op":"insert","table":"a","row":{"id":5,"n":5},"txn":"z"}),
            json!({"op":"get","table":"a","key":{"id":1},"txn":"z","snapshot":"s"}),
            json!({"op":"commit","txn":"nope"}),
            json!({"op":"batch","ops":[{"op":"insert","table":"a","row":{"id":6,"n":6},"txn":"z"}]}),
            // 29: left open at the end: rolled back.
            json!({"op":"begin","txn":"open"}),
            json!({"op":"insert","table":"a","row":{"id":9,"n":9},"txn":"open"}),
        ],
    );
    for i in [3, 4, 5, 9, 11, 12, 13, 16, 17, 18, 19, 20, 23, 29, 30] {
        ok(&r[i]);
    }
    assert_eq!(r[6]["row"], json!({"id":1,"n":30}));
    assert_eq!(r[7]["row"], json!({"id":1,"n":0}));
    assert_eq!(r[8]["agg"], json!({"sum(n)":70}));
    assert_eq!(r[10]["row"], json!({"id":1,"n":30}));
    assert_eq!(err_kind(&r[14]), "unknown_txn");
    assert_eq!(r[15]["row"], json!({"id":1,"n":70}));
    assert_eq!(err_kind(&r[21]), "conflict");
    assert_eq!(r[22]["row"], json!({"id":1,"n":1}));
    assert_eq!(err_kind(&r[24]), "txn_exists");
    assert_eq!(err_kind(&r[25]), "invalid_argument");
    assert_eq!(err_kind(&r[26]), "bad_request");
    assert_eq!(err_kind(&r[27]), "unknown_txn");
    assert_eq!(err_kind(&r[28]), "bad_request");
    let r =
        exec(&db, &[json!({"op":"get","table":"a","key":{"id":9}}), json!({"op":"get","table":"a","key":{"id":6}})]);
    assert_eq!(r[0]["row"], json!(null));
    assert_eq!(r[1]["row"], json!(null));
}

/// A table with SQL indexes takes writes through SQL only: `exec` and `load` refuse it (the
/// index would miss the rows), and take it again once the index is dropped.
#[test]
fn writes_outside_sql_to_a_table_with_indexes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (ok_sql, _, err) =
        run_cli(&db, &["sql", "-c", "CREATE TABLE t (id BIGINT PRIMARY KEY, a INT); CREATE INDEX t_a ON t (a)"]);
    assert!(ok_sql, "{err}");
    let r = exec(&db, &[json!({"op":"insert","table":"t","row":{"id":1,"a":1}})]);
    assert_eq!(err_kind(&r[0]), "sql_error", "{}", r[0]);
    assert!(r[0]["error"]["message"].as_str().unwrap_or_default().contains("t_a"), "{}", r[0]);
    let csv = dir.path().join("t.csv");
    std::fs::write(&csv, "id,a\n2,2\n").unwrap();
    let (loaded, _, err) = run_cli(&db, &["load", "t", csv.to_str().unwrap()]);
    assert!(!loaded && err.contains("t_a"), "{err}");
    let (_, out, _) = run_cli(&db, &["sql", "-c", "SELECT count(*) FROM t"]);
    assert!(out.contains('0'), "{out}");
    let (dropped, _, err) = run_cli(&db, &["sql", "-c", "DROP INDEX t_a"]);
    assert!(dropped, "{err}");
    ok(&exec(&db, &[json!({"op":"insert","table":"t","row":{"id":1,"a":1}})])[0]);
}

#[test]
fn exec_refuses_fields_an_op_does_not_take_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let r = exec(
        &db,
        &[
            json!({"op":"create_table","table":"t","schema":"id BIGINT PRIMARY KEY, a INT","layuot":"L1-: (a)"}),
            json!({"op":"create_table","table":"t","schema":"id BIGINT PRIMARY KEY, a INT"}),
            json!({"op":"insert","table":"t","row":{"id":1,"a":1},"sync":true}),
            json!({"op":"batch","ops":[
                {"op":"insert","table":"t","row":{"id":2,"a":2}},
                {"op":"delete","table":"t","key":{"id":1},"where":"a > 0"}
            ]}),
            json!({"op":"scan","table":"t","filter":"a > 0"}),
            json!({"op":"flush","now":true}),
            json!({"op":"scan","table":"t"}),
        ],
    );
    let refused = |i: usize, field: &str| {
        assert_eq!(err_kind(&r[i]), "bad_request", "request {i}: {}", r[i]);
        let message = r[i]["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("`{field}`")), "request {i} should name `{field}`: {message}");
    };
    refused(0, "layuot");
    // The misspelled create_table made no table: the second one is not `table_exists`.
    ok(&r[1]);
    refused(2, "sync");
    refused(3, "where");
    assert!(r[3]["error"]["message"].as_str().unwrap_or_default().starts_with("ops[1]"), "{}", r[3]);
    refused(4, "filter");
    refused(5, "now");
    // Neither the refused insert nor the refused batch wrote anything.
    assert_eq!(ok(&r[6])["rows"], json!([]));
}

/// Every op on tables of `engine` (`None`: the default), against the same expected answers.
fn every_op_on(db: &Path, engine: Option<&str>) {
    let schema = "id BIGINT PRIMARY KEY, a INT NOT NULL, s TEXT, b BYTEA, d DOUBLE";
    let create = |table: &str, schema: &str| match engine {
        Some(e) => json!({"op":"create_table","table":table,"schema":schema,"engine":e}),
        None => json!({"op":"create_table","table":table,"schema":schema}),
    };
    let r = exec(
        db,
        &[
            create("t", schema),
            create("u", "k TEXT, n INT, v BIGINT, PRIMARY KEY (k, n)"),
            json!({"op":"insert","table":"t","row":{"id":1,"a":2,"s":"x","b":"\\x00ff","d":"Infinity"}}),
            json!({"op":"insert","table":"t","row":{"id":2,"a":5}}),
            json!({"op":"insert","table":"t","row":{"id":3,"a":1,"s":"y"}}),
            json!({"op":"snapshot","name":"s1"}),
            json!({"op":"update","table":"t","key":{"id":1},"set":{"a":7,"s":null}}),
            json!({"op":"delete","table":"t","key":{"id":3}}),
            json!({"op":"batch","ops":[{"op":"insert","table":"u","row":{"k":"a","n":1,"v":10}},{"op":"update","table":"t","key":{"id":2},"set":{"a":6}}]}),
            json!({"op":"get","table":"t","key":{"id":1},"columns":["a","s"]}),
            json!({"op":"get","table":"t","key":{"id":1},"columns":["a","s"],"snapshot":"s1"}),
            json!({"op":"get","table":"t","key":{"id":3}}),
            json!({"op":"scan","table":"t","from":{"id":1},"to":{"id":3},"columns":["id","a"]}),
            json!({"op":"scan","table":"t","where":"a > 1 AND (s = 'x' OR s IS NULL)","agg":["count(*)","sum(a)","max(d)"]}),
            json!({"op":"scan","table":"t","snapshot":"s1","limit":2,"columns":["id"]}),
            json!({"op":"scan","table":"u","from":{"k":"a"}}),
            json!({"op":"multi_get","table":"t","keys":[{"id":3},{"id":1},{"id":9}],"columns":["a"]}),
            json!({"op":"multi_get","table":"t","keys":[{"id":1},{"id":3}],"columns":["id","a"],"snapshot":"s1"}),
            json!({"op":"flush"}),
            json!({"op":"compact","table":"t"}),
            json!({"op":"release","name":"s1"}),
            json!({"op":"drop_table","table":"u"}),
        ],
    );
    for x in &r {
        ok(x);
    }
    assert_eq!(r[9]["row"], json!({"a":7,"s":null}));
    assert_eq!(r[10]["row"], json!({"a":2,"s":"x"}));
    assert_eq!(r[11]["row"], Json::Null);
    assert_eq!(r[12]["rows"], json!([{"id":1,"a":7},{"id":2,"a":6}]));
    assert_eq!(r[13]["agg"], json!({"count(*)":2,"sum(a)":13,"max(d)":"Infinity"}));
    assert_eq!(r[14]["rows"], json!([{"id":1},{"id":2}]));
    assert_eq!(r[15]["rows"], json!([{"k":"a","n":1,"v":10}]));
    assert_eq!(r[16]["rows"], json!([null, {"a":7}, null]));
    assert_eq!(r[17]["rows"], json!([{"id":1,"a":2}, {"id":3,"a":1}]));
    assert!(r[5]["seq"].as_u64().is_some());
}

#[test]
fn every_exec_op_and_error_kind() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    every_op_on(&db, None);

    let e = exec(
        &db,
        &[
            json!("not an object"),
            json!({"nop":1}),
            json!({"op":"fly"}),
            json!({"op":"create_table","table":"t","schema":"id BIGINT PRIMARY KEY"}),
            json!({"op":"create_table","table":"w","schema":"id BIGINT"}),
            json!({"op":"insert","table":"nope","row":{}}),
            json!({"op":"insert","table":"t","row":{"id":9,"a":"x"}}),
            json!({"op":"insert","table":"t","row":{"id":9,"a":1,"zz":1}}),
            json!({"op":"update","table":"t","key":{"id":1},"set":{"zz":1}}),
            json!({"op":"update","table":"t","key":{"id":1},"set":{"id":5}}),
            json!({"op":"get","table":"t","key":{"id":1},"snapshot":"gone"}),
            json!({"op":"scan","table":"t","where":"a >"}),
            json!({"op":"scan","table":"t","agg":["median(a)"]}),
            json!({"op":"scan","table":"t","where":"a = 'x'"}),
            json!({"op":"batch","ops":[{"op":"insert","table":"t","row":{"id":50,"a":1}},{"op":"insert","table":"t","row":{"id":51}}]}),
            json!({"op":"get","table":"t","key":{"id":50}}),
        ],
    );
    let kinds: Vec<&str> = e[..15].iter().map(err_kind).collect();
    assert_eq!(
        kinds,
        [
            "bad_request",
            "bad_request",
            "bad_request",
            "table_exists",
            "invalid_schema",
            "unknown_table",
            "type_mismatch",
            "type_mismatch",
            "unknown_column",
            "invalid_argument",
            "unknown_snapshot",
            "invalid_where",
            "invalid_agg",
            "type_mismatch",
            "type_mismatch",
        ]
    );
    // The failed batch wrote nothing.
    assert_eq!(ok(&e[15])["row"], Json::Null);

    // A line that is not UTF-8 gets an error answer and the stream goes on.
    let mut child = strata(&db).arg("exec").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"{\"op\":\"fl\xffush\"}\n{\"op\":\"flush\"}\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let lines: Vec<Json> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(err_kind(&lines[0]), "bad_request");
    ok(&lines[1]);

    // A second process cannot open a database in use.
    let mut holder = strata(&db).arg("exec").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut hin = holder.stdin.take().unwrap();
    let mut hout = BufReader::new(holder.stdout.take().unwrap());
    writeln!(hin, "{}", json!({"op":"flush"})).unwrap();
    let mut line = String::new();
    hout.read_line(&mut line).unwrap();
    let out = strata(&db).arg("tables").output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("locked"), "{}", String::from_utf8_lossy(&out.stderr));
    drop(hin);
    holder.wait().unwrap();
}

#[test]
fn check_finds_a_flipped_byte() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut reqs = vec![json!({"op":"create_table","table":"t","schema":"id BIGINT PRIMARY KEY, s TEXT"})];
    reqs.extend((0..500).map(|i| json!({"op":"insert","table":"t","row":{"id":i,"s":format!("value {i}")}})));
    reqs.push(json!({"op":"flush"}));
    for r in exec(&db, &reqs) {
        ok(&r);
    }
    let out = strata(&db).arg("check").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sst = std::fs::read_dir(&db)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "sst"))
        .unwrap();
    let mut bytes = std::fs::read(&sst).unwrap();
    bytes[100] ^= 0x40;
    std::fs::write(&sst, bytes).unwrap();
    let out = strata(&db).arg("check").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("corruption") && stderr.contains(sst.file_name().unwrap().to_str().unwrap()), "{stderr}");
}

/// Streams synced writes into `strata exec --sync`, SIGKILLs it at a random point, and checks
/// that every acknowledged write survived and nothing else changed (the one unanswered request
/// may or may not have happened).
#[test]
fn sigkill_loses_no_acknowledged_write() {
    let given = std::env::var("STRATA_SEEDS").ok().and_then(|s| s.split(',').next()?.trim().parse().ok());
    let seed: u64 = given.unwrap_or_else(rand::random);
    println!("seed {seed} (replay: STRATA_SEEDS={seed})");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    // `t` on the LSM engine, `l` on the lineage engine; batches span both.
    let schema = "id BIGINT PRIMARY KEY, v BIGINT NOT NULL";
    // With a history window, so past points stay readable after every crash.
    let (okay, _, err) = run_cli(&db, &["--history-retention", "1h", "tables"]);
    assert!(okay, "{err}");
    let created = exec(
        &db,
        &[
            json!({"op":"create_table","table":"t","schema":schema}),
            json!({"op":"create_table","table":"l","schema":schema,"engine":"lineage"}),
        ],
    );
    created.iter().for_each(|r| {
        ok(r);
    });
    type Model = std::collections::BTreeMap<(&'static str, i64), i64>;
    let mut model = Model::new();
    // Acknowledged past points: (sequence number, the state then).
    let mut points: Vec<(u64, Model)> = Vec::new();
    // One random op on the state `m`: the request and what it changes there.
    let op = |rng: &mut rand::rngs::StdRng, m: &mut Model| -> Json {
        let table = if rng.gen() { "t" } else { "l" };
        let k = rng.gen_range(0..100);
        let v = rng.gen::<i64>();
        match rng.gen_range(0..3) {
            0 => {
                m.insert((table, k), v);
                json!({"op":"insert","table":table,"row":{"id":k,"v":v}})
            }
            1 => {
                // Blind update: a missing row stays missing.
                if let Some(x) = m.get_mut(&(table, k)) {
                    *x = v;
                }
                json!({"op":"update","table":table,"key":{"id":k},"set":{"v":v}})
            }
            _ => {
                m.remove(&(table, k));
                json!({"op":"delete","table":table,"key":{"id":k}})
            }
        }
    };
    for round in 0..5 {
        let mut child =
            strata(&db).args(["exec", "--sync"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let kill_after = rng.gen_range(20..400);
        // The state if the request in flight (if any) took effect.
        let mut pending: Option<Model> = None;
        for i in 0.. {
            let mut next = model.clone();
            let req = if rng.gen_ratio(1, 10) {
                json!({"op":"snapshot","name":"p"})
            } else if rng.gen_ratio(1, 4) {
                let ops: Vec<Json> = (0..rng.gen_range(2..5)).map(|_| op(&mut rng, &mut next)).collect();
                json!({"op":"batch","ops":ops})
            } else {
                op(&mut rng, &mut next)
            };
            if writeln!(stdin, "{req}").and_then(|()| stdin.flush()).is_err() {
                break;
            }
            pending = Some(next);
            if i == kill_after {
                child.kill().unwrap();
                break;
            }
            let mut line = String::new();
            if stdout.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let resp: Json = serde_json::from_str(&line).unwrap();
            assert_eq!(resp["ok"], json!(true), "seed {seed} round {round}: {resp}");
            model = pending.take().unwrap();
            if let Some(seq) = resp["seq"].as_u64() {
                points.push((seq, model.clone()));
            }
        }
        child.wait().unwrap();
        let got = exec(&db, &[json!({"op":"scan","table":"t"}), json!({"op":"scan","table":"l"})]);
        let mut rows = Model::new();
        for (g, table) in got.iter().zip(["t", "l"]) {
            for r in g["rows"].as_array().unwrap() {
                rows.insert((table, r["id"].as_i64().unwrap()), r["v"].as_i64().unwrap());
            }
        }
        if rows != model {
            let maybe =
                pending.unwrap_or_else(|| panic!("seed {seed} round {round}: state differs, nothing in flight"));
            // All of the request in flight or none of it, on both engines.
            assert_eq!(rows, maybe, "seed {seed} round {round}: lost, invented or torn writes");
            model = maybe;
        }
        let out = strata(&db).arg("check").output().unwrap();
        assert!(out.status.success(), "seed {seed} round {round}: {}", String::from_utf8_lossy(&out.stderr));
        // Every acknowledged past point reads as it was, on both engines.
        let reqs: Vec<Json> =
            points.iter().flat_map(|(seq, _)| ["t", "l"].map(|t| json!({"op":"scan","table":t,"as_of":seq}))).collect();
        let got = exec(&db, &reqs);
        for ((seq, want), pair) in points.iter().zip(got.chunks(2)) {
            let mut rows = Model::new();
            for (g, table) in pair.iter().zip(["t", "l"]) {
                for r in ok(g)["rows"].as_array().unwrap() {
                    rows.insert((table, r["id"].as_i64().unwrap()), r["v"].as_i64().unwrap());
                }
            }
            assert_eq!(&rows, want, "seed {seed} round {round}: as of {seq}");
        }
    }
    assert!(points.len() > 3, "seed {seed}: only {} past points, tested little", points.len());
    for table in ["t", "l"] {
        assert!(model.keys().any(|(t, _)| *t == table), "seed {seed}: table {table} ended empty, tested little");
    }
}

#[test]
fn load_rejects_a_bad_row_and_leaves_the_table_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    for r in exec(
        &db,
        &[
            json!({"op":"create_table","table":"t","schema":"id BIGINT PRIMARY KEY, a INT NOT NULL, s TEXT"}),
            json!({"op":"insert","table":"t","row":{"id":1,"a":1}}),
        ],
    ) {
        ok(&r);
    }
    let bad = dir.path().join("bad.csv");
    let mut text = String::from("id,a,s\n");
    for i in 2..=3000 {
        text.push_str(&format!("{i},{i},\"row, {i}\"\n"));
    }
    text.push_str("5000,notanumber,x\n");
    std::fs::write(&bad, &text).unwrap();
    let out = strata(&db).args(["load", "t"]).arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("line 3001") && stderr.contains("column `a`"), "{stderr}");
    let rows = exec(&db, &[json!({"op":"scan","table":"t","agg":["count(*)"]})]);
    assert_eq!(rows[0]["agg"]["count(*)"], json!(1), "the failed load wrote rows");

    let good = dir.path().join("good.csv");
    std::fs::write(&good, text.lines().take(3000).collect::<Vec<_>>().join("\n")).unwrap();
    let out = strata(&db).args(["load", "t"]).arg(&good).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Keys of their own: ingested into the last level, each byte written once.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let wa: f64 = stdout
        .split("write amplification ")
        .nth(1)
        .and_then(|s| s.trim_end().trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no write amplification in {stdout}"));
    assert!(wa > 0.0 && wa <= 1.2, "{stdout}");
    let r = exec(
        &db,
        &[json!({"op":"scan","table":"t","agg":["count(*)"]}), json!({"op":"get","table":"t","key":{"id":7}})],
    );
    assert_eq!(r[0]["agg"]["count(*)"], json!(3000));
    assert_eq!(r[1]["row"], json!({"id":7,"a":7,"s":"row, 7"}));
}

#[test]
fn demo_runs_and_prints_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out = strata(&dir.path().join("demo")).args(["demo", "--rows", "20000"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for want in [
        "layout: L0-1: row; L2: (c1..c15) (c16..c30); L3-: column",
        "insert (batches of 1000)",
        "update of c1",
        "point read",
        "scan MAX",
        "scan SUM",
        "scan paths",
        "0 rows through the per-row merge",
        "tree of `narrow`",
    ] {
        assert!(stdout.contains(want), "summary lacks `{want}`:\n{stdout}");
    }
}

/// Writes a Parquet file with columns id (int64), a (optional int32), s (optional UTF-8).
fn write_parquet(path: &Path, ids: &[i64], a: &[Option<i32>], s: &[Option<&str>]) {
    use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;
    use std::sync::Arc;

    let schema = Arc::new(
        parse_message_type("message t { required int64 id; optional int32 a; optional binary s (UTF8); }").unwrap(),
    );
    let props = Arc::new(WriterProperties::builder().build());
    let mut w = SerializedFileWriter::new(std::fs::File::create(path).unwrap(), schema, props).unwrap();
    let mut rg = w.next_row_group().unwrap();
    let mut col = rg.next_column().unwrap().unwrap();
    col.typed::<Int64Type>().write_batch(ids, None, None).unwrap();
    col.close().unwrap();
    let mut col = rg.next_column().unwrap().unwrap();
    let vals: Vec<i32> = a.iter().flatten().copied().collect();
    let defs: Vec<i16> = a.iter().map(|x| i16::from(x.is_some())).collect();
    col.typed::<Int32Type>().write_batch(&vals, Some(&defs), None).unwrap();
    col.close().unwrap();
    let mut col = rg.next_column().unwrap().unwrap();
    let vals: Vec<ByteArray> = s.iter().flatten().map(|x| ByteArray::from(*x)).collect();
    let defs: Vec<i16> = s.iter().map(|x| i16::from(x.is_some())).collect();
    col.typed::<ByteArrayType>().write_batch(&vals, Some(&defs), None).unwrap();
    col.close().unwrap();
    rg.close().unwrap();
    w.close().unwrap();
}

#[test]
fn load_reads_parquet_and_rejects_values_that_do_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    ok(&exec(&db, &[json!({"op":"create_table","table":"t","schema":"id BIGINT PRIMARY KEY, a SMALLINT, s TEXT"})])[0]);
    let good = dir.path().join("good.parquet");
    write_parquet(&good, &[1, 2, 3], &[Some(10), None, Some(-3)], &[Some("x"), Some("y"), None]);
    let out = strata(&db).args(["load", "t"]).arg(&good).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r = exec(&db, &[json!({"op":"scan","table":"t"})]);
    assert_eq!(r[0]["rows"], json!([{"id":1,"a":10,"s":"x"},{"id":2,"a":null,"s":"y"},{"id":3,"a":-3,"s":null}]));
    let bad = dir.path().join("bad.parquet");
    write_parquet(&bad, &[7, 8], &[Some(1), Some(100_000)], &[None, None]);
    let out = strata(&db).args(["load", "t"]).arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("row 2") && stderr.contains("SMALLINT"), "{stderr}");
    let r = exec(&db, &[json!({"op":"scan","table":"t","agg":["count(*)"]})]);
    assert_eq!(r[0]["agg"]["count(*)"], json!(3));
}

#[test]
fn one_shot_commands() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let run = |args: &[&str]| run_cli(&db, args);
    assert!(run(&["create-table", "t", "--schema", "a INT, b TEXT, v BIGINT NOT NULL, PRIMARY KEY (a, b)"]).0);
    let (okay, _, err) = run(&["create-table", "bad", "--schema", "a INT"]);
    assert!(!okay && err.contains("invalid_schema"), "{err}");
    let r = exec(
        &db,
        &[
            json!({"op":"insert","table":"t","row":{"a":1,"b":"x","v":10}}),
            json!({"op":"insert","table":"t","row":{"a":1,"b":"y","v":20}}),
            json!({"op":"insert","table":"t","row":{"a":2,"b":"x","v":30}}),
        ],
    );
    r.iter().for_each(|x| {
        ok(x);
    });
    let (_, out, _) = run(&["tables"]);
    assert!(out.contains("t: a INT, b TEXT, v BIGINT NOT NULL, PRIMARY KEY (a, b)"), "{out}");
    let (_, out, _) = run(&["get", "t", "1", "y", "--format", "json"]);
    assert_eq!(out.trim(), r#"{"a":1,"b":"y","v":20}"#);
    let (okay, _, err) = run(&["get", "t", "1", "y", "--snapshot-seq", "1"]);
    assert!(!okay && err.contains("readable sequence numbers"), "{err}");
    let (_, out, _) = run(&["scan", "t", "--from", "1", "--to", "2", "--columns", "b,v", "--format", "csv"]);
    assert_eq!(out, "b,v\nx,10\ny,20\n");
    let (_, out, _) = run(&["scan", "t", "--where", "v >= 20", "--agg", "count(*),sum(v)", "--format", "json"]);
    assert_eq!(out.trim(), r#"{"count(*)":2,"sum(v)":50}"#);
    assert!(run(&["compact", "t"]).0);
    let (_, out, _) = run(&["stats", "t", "--json"]);
    let st: Json = serde_json::from_str(&out).unwrap();
    let files: u64 = st["tables"][0]["levels"].as_array().unwrap().iter().map(|l| l["files"].as_u64().unwrap()).sum();
    assert!(files >= 1, "{out}");
    assert!(run(&["drop-table", "t"]).0);
    let (okay, _, err) = run(&["get", "t", "1", "x"]);
    assert!(!okay && err.contains("unknown_table"), "{err}");
}

#[test]
fn layouts_from_the_command_line_and_exec() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let run = |args: &[&str]| run_cli(&db, args);
    let schema = "id BIGINT PRIMARY KEY, a INT, b INT, s TEXT";
    let (okay, out, _) = run(&["create-table", "t", "--schema", schema, "--layout", "L1: (a,b) (s); L2-: column"]);
    assert!(okay && out.contains("L1: (a,b) (s); L2: column"), "{out}");
    let (okay, _, err) = run(&["create-table", "bad", "--schema", schema, "--layout", "L1: (a) (b,s); L2: (a,b) (s)"]);
    assert!(!okay && err.contains("invalid_argument") && err.contains("group (a,b) of L2"), "{err}");
    let r = exec(
        &db,
        &[
            json!({"op":"create_table","table":"u","schema":schema,"layout":"L1-: column"}),
            json!({"op":"create_table","table":"v","schema":schema,"layout":"L0: column"}),
            json!({"op":"create_table","table":"w","schema":schema,"layout":7}),
            json!({"op":"insert","table":"u","row":{"id":1,"a":2,"b":3,"s":"x"}}),
            json!({"op":"create_table","table":"x","schema":schema,"aligned_compaction":false}),
            json!({"op":"create_table","table":"y","schema":schema,"aligned_compaction":"no"}),
        ],
    );
    ok(&r[0]);
    assert_eq!(err_kind(&r[1]), "invalid_argument");
    assert_eq!(err_kind(&r[2]), "bad_request");
    ok(&r[3]);
    ok(&r[4]);
    assert_eq!(err_kind(&r[5]), "bad_request");
    // The switch is stored with the table: it reads back after reopening.
    assert!(run(&["create-table", "z", "--schema", schema, "--no-aligned-compaction"]).0);
    for (name, aligned) in [("u", true), ("x", false), ("z", false)] {
        let (_, out, _) = run(&["stats", name, "--json"]);
        let st: Json = serde_json::from_str(&out).unwrap();
        assert_eq!(st["tables"][0]["aligned_compaction"], json!(aligned), "{name}: {out}");
    }
    let (_, out, _) = run(&["stats", "z"]);
    assert!(out.contains("aligned compaction: off"), "{out}");
    assert!(run(&["compact", "u"]).0);
    let (_, out, _) = run(&["stats", "u", "--json"]);
    let st: Json = serde_json::from_str(&out).unwrap();
    let t = &st["tables"][0];
    assert!(t["layout"].as_str().unwrap().starts_with("L0: row; L1: column"), "{out}");
    // After a full compaction the row lives in the last level: one row-group file, which every
    // column group counts.
    let last = t["levels"].as_array().unwrap().last().unwrap();
    let groups: Vec<(String, u64)> = last["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["columns"][0].as_str().unwrap().to_owned(), g["files"].as_u64().unwrap()))
        .collect();
    assert_eq!(groups, [("a".to_owned(), 1), ("b".to_owned(), 1), ("s".to_owned(), 1)], "{out}");
    let (_, out, _) = run(&["stats", "u"]);
    assert!(out.contains("layout: L0: row; L1: column") && out.contains("group (s): 1 files"), "{out}");
    assert!(run(&["check"]).0);
}

#[test]
fn lineage_tables_from_exec_and_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    every_op_on(&db, Some("lineage"));
    let r = exec(
        &db,
        &[
            json!({"op":"create_table","table":"x","schema":"id BIGINT PRIMARY KEY","engine":"lineaje"}),
            json!({"op":"create_table","table":"x","schema":"id BIGINT PRIMARY KEY","engine":5}),
            json!({"op":"create_table","table":"x","schema":"id BIGINT PRIMARY KEY, a INT","engine":"lineage","layout":"L1-: column"}),
            json!({"op":"create_table","table":"x","schema":"id BIGINT PRIMARY KEY, a INT","engine":"lsm"}),
        ],
    );
    assert_eq!(err_kind(&r[0]), "bad_request");
    assert!(r[0]["error"]["message"].as_str().unwrap_or_default().contains("lineaje"), "{}", r[0]);
    assert_eq!(err_kind(&r[1]), "bad_request");
    assert_eq!(err_kind(&r[2]), "invalid_argument");
    // None of the refused requests made the table.
    ok(&r[3]);
    let run = |args: &[&str]| run_cli(&db, args);
    let (okay, out, _) = run(&["create-table", "l", "--schema", "id BIGINT PRIMARY KEY, n INT", "--engine", "lineage"]);
    assert!(okay && out.contains("engine lineage"), "{out}");
    let (okay, _, err) = run(&["create-table", "m", "--schema", "id BIGINT PRIMARY KEY", "--engine", "btree"]);
    assert!(!okay && err.contains("btree"), "{err}");
    let r = exec(
        &db,
        &[
            json!({"op":"insert","table":"l","row":{"id":1,"n":5}}),
            json!({"op":"update","table":"l","key":{"id":1},"set":{"n":6}}),
        ],
    );
    ok(&r[0]);
    ok(&r[1]);
    // Reopened by the next command: the WAL brings the rows back.
    let (okay, out, _) = run(&["get", "l", "1"]);
    assert!(okay && out.contains('6'), "{out}");
    let (_, out, _) = run(&["stats", "l", "--json"]);
    let st: Json = serde_json::from_str(&out).unwrap();
    assert_eq!(st["tables"][0]["engine"], json!("lineage"), "{out}");
    assert_eq!(st["tables"][0]["lineage"]["rows"], json!(1), "{out}");
    let (_, out, _) = run(&["stats", "t"]);
    assert!(out.contains("engine lineage"), "{out}");
    assert!(run(&["check"]).0);
}

/// With a history retention window, `get`/`scan --as-of` and exec's `as_of` read past states
/// by sequence number and by time in later processes, on both engines; points outside the
/// window, malformed points and a point given with a named snapshot are refused.
#[test]
fn as_of_reads_in_later_processes_on_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let run = |args: &[&str]| run_cli(&db, args);
    for (table, engine) in [("l", "lsm"), ("g", "lineage")] {
        let (okay, _, err) = run(&[
            "--history-retention",
            "1h",
            "create-table",
            table,
            "--schema",
            "id BIGINT PRIMARY KEY, n INT",
            "--engine",
            engine,
        ]);
        assert!(okay, "{err}");
    }
    let mut points = Vec::new();
    for n in 1..=3 {
        let r = exec(
            &db,
            &[
                json!({"op":"insert","table":"l","row":{"id":1,"n":n}}),
                json!({"op":"insert","table":"g","row":{"id":1,"n":n}}),
                json!({"op":"snapshot","name":"s"}),
            ],
        );
        let seq = ok(&r[2])["seq"].as_u64().unwrap();
        let time = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        std::thread::sleep(std::time::Duration::from_millis(5));
        points.push((n, seq.to_string(), time));
    }
    // A flush and a compaction in between keep what the window needs.
    assert!(run(&["compact"]).0);
    for (n, seq, time) in &points {
        for table in ["l", "g"] {
            for at in [seq, time] {
                let (okay, out, err) = run(&["get", table, "1", "--as-of", at, "--format", "json"]);
                assert!(okay, "{err}");
                assert_eq!(out.trim(), format!(r#"{{"id":1,"n":{n}}}"#), "{table} as of {at}");
                let (okay, out, err) = run(&["scan", table, "--agg", "sum(n)", "--as-of", at, "--format", "json"]);
                assert!(okay && out.trim() == format!(r#"{{"sum(n)":{n}}}"#), "{table} as of {at}: {out}{err}");
            }
        }
    }
    let (n, seq, _) = &points[0];
    let seq: u64 = seq.parse().unwrap();
    let r = exec(
        &db,
        &[
            json!({"op":"get","table":"g","key":{"id":1},"as_of":seq}),
            json!({"op":"snapshot","name":"old","as_of":seq}),
            json!({"op":"scan","table":"l","snapshot":"old"}),
            json!({"op":"get","table":"l","key":{"id":1},"snapshot":"old","as_of":seq}),
            json!({"op":"get","table":"l","key":{"id":1},"as_of":"yesterday"}),
            json!({"op":"get","table":"l","key":{"id":1},"as_of":"2001-01-01T00:00:00Z"}),
        ],
    );
    assert_eq!(ok(&r[0])["row"]["n"], json!(n), "{}", r[0]);
    ok(&r[1]);
    assert_eq!(ok(&r[2])["rows"][0]["n"], json!(n), "{}", r[2]);
    assert_eq!(err_kind(&r[3]), "bad_request");
    assert_eq!(err_kind(&r[4]), "bad_request");
    assert_eq!(err_kind(&r[5]), "invalid_argument");
    assert!(r[5]["error"]["message"].as_str().unwrap().contains("readable sequence numbers"), "{}", r[5]);
    let (okay, _, err) = run(&["get", "l", "1", "--as-of", "soon"]);
    assert!(!okay && err.contains("RFC 3339"), "{err}");
    let (_, out, _) = run(&["stats", "--json"]);
    let st: Json = serde_json::from_str(&out).unwrap();
    assert_eq!(st["history"]["retention_ms"], json!(3_600_000), "{out}");
    // Turning history off: after the next merge, older points are refused.
    assert!(run(&["--history-retention", "0", "compact"]).0);
    let r = exec(&db, &[json!({"op":"insert","table":"g","row":{"id":2,"n":0}})]);
    ok(&r[0]);
    let (okay, _, err) = run(&["get", "g", "1", "--as-of", &points[0].1]);
    assert!(!okay && err.contains("readable sequence numbers"), "{err}");
}

#[test]
fn sql_runs_statements_prints_formats_and_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (ok_, out, err) = run_cli(
        &db,
        &[
            "sql",
            "-c",
            "CREATE TABLE t (id BIGINT PRIMARY KEY, n INT, s TEXT) WITH (layout = 'L1-: column'); \
             INSERT INTO t VALUES (1, 10, 'a'), (2, NULL, 'b'), (3, 30, NULL); UPDATE t SET n = 20 WHERE id = 2",
        ],
    );
    assert!(ok_, "{err}");
    assert_eq!(out, "CREATE TABLE\nINSERT 0 3\nUPDATE 1\n");

    // JSON: one object per row, keyed by the result's column names in order, NULL as null.
    let (ok_, out, err) = run_cli(&db, &["sql", "--format", "json", "-c", "SELECT s, id AS k FROM t ORDER BY id"]);
    assert!(ok_, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, vec![r#"{"s":"a","k":1}"#, r#"{"s":"b","k":2}"#, r#"{"s":null,"k":3}"#]);

    let (ok_, out, _) =
        run_cli(&db, &["sql", "--format", "csv", "-c", "SELECT id, n FROM t WHERE n >= 20 ORDER BY id"]);
    assert!(ok_);
    assert_eq!(out, "id,n\n2,20\n3,30\n");

    let (ok_, out, _) = run_cli(&db, &["sql", "-c", "SELECT count(*) AS c FROM t"]);
    assert!(ok_);
    assert!(out.contains("| c |") && out.contains("| 3 |") && out.ends_with("(1 row)\n"), "{out}");

    // A failing statement: an error message with its SQLSTATE, a non-zero exit, nothing applied
    // by it; the statements before it stay applied.
    let (ok_, _, err) = run_cli(
        &db,
        &["sql", "-c", "INSERT INTO t VALUES (4, 40, 'd'); INSERT INTO t VALUES (5, 50, 'e'), (1, 0, 'dup')"],
    );
    assert!(!ok_);
    assert!(err.contains("duplicate key (1)") && err.contains("23505"), "{err}");
    let (_, out, _) = run_cli(&db, &["sql", "--format", "csv", "-c", "SELECT id FROM t ORDER BY id"]);
    assert_eq!(out, "id\n1\n2\n3\n4\n");
    let (ok_, _, err) = run_cli(&db, &["sql", "-c", "SELEC 1"]);
    assert!(!ok_ && err.contains("42601"), "{err}");

    // A script on stdin.
    let mut child = strata(&db)
        .args(["sql", "--format", "csv"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"DELETE FROM t WHERE id > 2;\nSELECT sum(n) AS total\n  FROM t;\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "total\n30\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "DELETE 2\n");

    // A script runs in one session: its transaction blocks commit or roll back as a whole, and
    // one left open at the end is rolled back.
    let (ok_, out, err) = run_cli(
        &db,
        &[
            "sql",
            "-c",
            "BEGIN; UPDATE t SET n = 0 WHERE id = 1; ROLLBACK; START TRANSACTION; UPDATE t SET n = 11 WHERE id = 1; \
             COMMIT; BEGIN; DELETE FROM t",
        ],
    );
    assert!(ok_, "{err}");
    assert_eq!(out, "BEGIN\nUPDATE 1\nROLLBACK\nSTART TRANSACTION\nUPDATE 1\nCOMMIT\nBEGIN\nDELETE 2\n");
    let (_, out, _) = run_cli(&db, &["sql", "--format", "csv", "-c", "SELECT id, n FROM t ORDER BY id"]);
    assert_eq!(out, "id,n\n1,11\n2,20\n");

    // Tables made through SQL are ordinary strata tables.
    let (ok_, out, _) = run_cli(&db, &["get", "t", "2"]);
    assert!(ok_ && out.contains("20"), "{out}");
}

/// `--tier`: tiers given once are shown by `stats` and remembered by later commands; a moved
/// tier or a bad spec is an error that names it.
#[test]
fn tiers_are_given_once_and_shown_by_stats() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (fast, slow) = (dir.path().join("fast"), dir.path().join("slow"));
    let fast_spec = format!("fast={}:64KiB", fast.display());
    let slow_spec = format!("slow={}", slow.display());
    let tiers = ["--tier", &fast_spec, "--tier", &slow_spec];
    let mut args = tiers.to_vec();
    args.extend(["create-table", "t", "--schema", "id BIGINT PRIMARY KEY, s TEXT"]);
    let (ok, _, err) = run_cli(&db, &args);
    assert!(ok, "{err}");
    let csv: String =
        std::iter::once("id,s\n".to_owned()).chain((0..20_000).map(|i| format!("{i},row number {i}\n"))).collect();
    let file = dir.path().join("rows.csv");
    std::fs::write(&file, csv).unwrap();
    for cmd in [vec!["load", "t", file.to_str().unwrap()], vec!["compact"]] {
        let (ok, _, err) = run_cli(&db, &cmd);
        assert!(ok, "{cmd:?}: {err}");
    }
    let (ok, out, err) = run_cli(&db, &["stats", "--json"]);
    assert!(ok, "{err}");
    let st: Json = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = st["tiers"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["fast", "slow"], "{st}");
    assert!(st["tiers"][1]["files"].as_u64().unwrap() > 0, "nothing reached the slow tier: {}", st["tiers"]);
    assert_eq!(st["tiers"][0]["budget"], json!(64 << 10));
    let (ok, out, _) = run_cli(&db, &["stats"]);
    assert!(ok && out.contains("tiers (fast first)") && out.contains("bytes per tier"), "{out}");
    assert!(out.contains("budget 65536 bytes"), "{out}");
    let (ok, out, _) = run_cli(&db, &["scan", "t", "--agg", "count(*)", "--format", "csv"]);
    assert!(ok && out.contains("20000"), "{out}");

    // Repeated without a size, a tier keeps its recorded one.
    let sizeless = format!("fast={}", fast.display());
    let (ok, out, err) = run_cli(&db, &["--tier", &sizeless, "--tier", &slow_spec, "stats", "--json"]);
    assert!(ok, "{err}");
    let st: Json = serde_json::from_str(&out).unwrap();
    assert_eq!(st["tiers"][0]["budget"], json!(64 << 10));
    let moved = format!("slow={}", dir.path().join("elsewhere").display());
    let (ok, _, err) = run_cli(&db, &["--tier", &fast_spec, "--tier", &moved, "tables"]);
    assert!(!ok && err.contains("tier 'slow'"), "{err}");
    // The slow tier's directory gone (an unmounted disk): refused, naming the tier.
    let away = dir.path().join("away");
    std::fs::rename(&slow, &away).unwrap();
    let (ok, _, err) = run_cli(&db, &["tables"]);
    assert!(!ok && err.contains("tier 'slow'") && err.contains("missing"), "{err}");
    std::fs::rename(&away, &slow).unwrap();
    let (ok, _, err) = run_cli(&db, &["tables"]);
    assert!(ok, "{err}");
    let (ok, _, err) = run_cli(&db, &["--tier", "fast", "tables"]);
    assert!(!ok && err.contains("NAME=DIR"), "{err}");
    let (ok, _, err) = run_cli(&db, &["--tier", "fast=/x:12parsecs", "tables"]);
    assert!(!ok && err.contains("unknown unit"), "{err}");
}

/// A workload traced across processes, advised on from the trace, applied online; then a
/// layout set by hand. Each command is its own process, so the trace goes on through reopens.
#[test]
fn trace_advise_apply_and_set_layout() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let trace = dir.path().join("t.trace");
    let trace_arg = trace.to_str().unwrap();
    let run = |args: &[&str]| run_cli(&db, args);
    assert!(run(&["create-table", "t", "--schema", "id BIGINT PRIMARY KEY, a INT, b INT, c INT, s TEXT"]).0);
    let rows: Vec<Json> = (0..3000)
        .map(|i| json!({"op":"insert","table":"t","row":{"id":i,"a":i,"b":2*i,"c":3*i,"s":format!("s{i}")}}))
        .collect();
    assert!(exec(&db, &rows).iter().all(|r| r["ok"] == json!(true)));
    assert!(run(&["compact", "t"]).0);

    let (okay, out, err) = run(&["trace", "start", "t", trace_arg]);
    assert!(okay && out.contains("tracing t"), "{out}{err}");
    for _ in 0..4 {
        let (okay, out, err) = run(&["scan", "t", "--columns", "c", "--agg", "max(c)"]);
        assert!(okay && out.contains("8997"), "{out}{err}");
    }
    assert!(run(&["get", "t", "7"]).0);
    let (okay, out, _) = run(&["trace", "stop", "t"]);
    assert!(okay && out.contains(trace_arg), "{out}");
    let lines = std::fs::read_to_string(&trace).unwrap();
    assert!(lines.starts_with("strata-trace\t1\t4\tt\n"), "{lines}");
    assert!(lines.lines().filter(|l| l.starts_with("s\t")).count() >= 4, "{lines}");

    let (okay, _, err) = run(&["advise", "t"]);
    assert!(!okay && err.contains("--trace"), "{err}");
    let (okay, out, err) = run(&["advise", "t", "--trace", trace_arg, "--calibrate"]);
    assert!(okay && out.contains("prices per 16384-byte block"), "{out}{err}");
    let (okay, out, err) = run(&["advise", "t", "--trace", trace_arg, "--json"]);
    assert!(okay, "{err}");
    let advice: Json = serde_json::from_str(&out).unwrap();
    let advised = advice["advised"].as_str().unwrap().to_owned();
    assert_ne!(advice["advised"], advice["current"], "{out}");
    assert!(advised.contains("(c)") || advised.contains("column"), "{out}");
    let (okay, out, err) = run(&["advise", "t", "--trace", trace_arg, "--apply"]);
    assert!(okay && out.contains("advised layout") && out.contains("0 files left"), "{out}{err}");
    let (_, out, _) = run(&["stats", "t", "--json"]);
    let st: Json = serde_json::from_str(&out).unwrap();
    assert_eq!(st["tables"][0]["layout"].as_str(), Some(advised.as_str()), "{out}");

    let (okay, out, err) = run(&["set-layout", "t", "row"]);
    assert!(okay && out.contains("0 files left"), "{out}{err}");
    let (_, out, _) = run(&["stats", "t", "--json"]);
    assert!(out.contains("L0: row; L1: row"), "{out}");
    let (okay, _, err) = run(&["set-layout", "t", "L1: (a,zz)"]);
    assert!(!okay && err.contains("invalid_argument"), "{err}");
    let (okay, out, _) = run(&["scan", "t", "--columns", "c", "--agg", "max(c)"]);
    assert!(okay && out.contains("8997"), "{out}");
    assert!(run(&["check"]).0);
}
