//! Secondary indexes against their tables. Seeded random statements (inserts, point and
//! DataFusion-planned updates, key moves, deletes, truncates, blocks that commit or roll back,
//! indexes created and dropped) run on a keyed and a keyless table with plain and UNIQUE
//! indexes; after every statement, refused ones included, each index must hold exactly the
//! entries of its table's rows (`strata_sql::indexes::check`). A second test cuts the power
//! (strata's in-memory `FaultFs`, torn writes included) at random points and requires the same
//! of the recovered database.
//!
//! `STRATA_SEEDS=<n>[,<n>...]` replays seeds; the seed is in every failure message.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata::vfs::FaultFs;
use strata::{Db, Options};
use strata_sql::{Session, SqlEngine};

fn seeds(n: usize) -> Vec<u64> {
    match std::env::var("STRATA_SEEDS") {
        Ok(s) => s.split(',').map(|x| x.trim().parse().expect("STRATA_SEEDS must be numbers")).collect(),
        Err(_) => (0..n).map(|_| rand::random()).collect(),
    }
}

const SETUP: &str = "CREATE TABLE t (k INT PRIMARY KEY, a INT, b TEXT, c INT); \
                     CREATE TABLE h (a INT, b TEXT); \
                     CREATE INDEX t_a ON t (a); CREATE UNIQUE INDEX t_bc ON t (b, c); \
                     CREATE INDEX h_ab ON h (b, a); CREATE UNIQUE INDEX h_a ON h (a)";

fn int(rng: &mut StdRng) -> String {
    if rng.gen_bool(0.15) {
        "NULL".into()
    } else {
        rng.gen_range(0..12).to_string()
    }
}

fn text(rng: &mut StdRng) -> String {
    if rng.gen_bool(0.15) {
        "NULL".into()
    } else {
        format!("'{}'", ["x", "y", "z", ""][rng.gen_range(0..4)])
    }
}

/// One random statement over `t` and `h`.
fn statement(rng: &mut StdRng) -> String {
    let k = rng.gen_range(0..16);
    match rng.gen_range(0..15) {
        0..=2 => {
            let rows: Vec<String> = (0..rng.gen_range(1..4))
                .map(|i| format!("({}, {}, {}, {})", k + i, int(rng), text(rng), int(rng)))
                .collect();
            format!("INSERT INTO t VALUES {}", rows.join(", "))
        }
        3 => format!("UPDATE t SET a = {} WHERE k = {k}", int(rng)),
        4 => format!("UPDATE t SET c = {}, b = {} WHERE a < {}", int(rng), text(rng), rng.gen_range(0..12)),
        5 => format!("UPDATE t SET k = k + {} WHERE k > {k}", rng.gen_range(1..4)),
        6 => format!("DELETE FROM t WHERE a = {} OR k = {k}", int(rng)),
        7 => format!("INSERT INTO h VALUES ({}, {}), ({}, {})", int(rng), text(rng), int(rng), text(rng)),
        8 => format!("UPDATE h SET a = {} WHERE b = {}", int(rng), text(rng)),
        9 => format!("DELETE FROM h WHERE a = {}", int(rng)),
        10 => ["TRUNCATE t", "TRUNCATE h"][rng.gen_range(0..2)].into(),
        11 => ["DROP INDEX IF EXISTS t_a", "DROP INDEX IF EXISTS h_a"][rng.gen_range(0..2)].into(),
        12 => ["CREATE INDEX IF NOT EXISTS t_a ON t (a)", "CREATE UNIQUE INDEX IF NOT EXISTS h_a ON h (a)"]
            [rng.gen_range(0..2)]
        .into(),
        13 => format!("INSERT INTO t VALUES ({k}, {}, 'w', 1) ", int(rng)),
        _ => format!("INSERT OR REPLACE INTO t VALUES ({k}, {}, {}, {})", int(rng), text(rng), int(rng)),
    }
}

/// Runs `sql`; only the refusals the generator provokes are expected.
fn run(rt: &tokio::runtime::Runtime, session: &Session, sql: &str, seed: u64) {
    if let Err(e) = rt.block_on(session.execute(sql)) {
        let sqlstate = e.kind.sqlstate();
        assert!(
            ["23505", "25P02", "25001"].contains(&sqlstate),
            "seed {seed}: `{sql}` failed unexpectedly: {sqlstate} {e}"
        );
        // A statement failed in a block leaves it failed: end it.
        if session.status() == strata_sql::TxnStatus::Failed {
            rt.block_on(session.execute("ROLLBACK")).unwrap_or_else(|e| panic!("seed {seed}: ROLLBACK: {e}"));
        }
    }
}

fn check(db: &Db, seed: u64, after: &str) {
    let snapshot = db.snapshot();
    for name in ["t", "h"] {
        let table = db.table(name).unwrap_or_else(|e| panic!("seed {seed}: table {name}: {e}"));
        let problem = strata_sql::indexes::check(db, &table, &snapshot)
            .unwrap_or_else(|e| panic!("seed {seed}: checking {name} after `{after}`: {e}"));
        if let Some(p) = problem {
            panic!("seed {seed}: after `{after}`: {p}");
        }
    }
}

/// Random statements and blocks of them; `each` runs after every statement.
fn workload(
    rng: &mut StdRng,
    rt: &tokio::runtime::Runtime,
    session: &Session,
    n: usize,
    seed: u64,
    mut each: impl FnMut(&str),
) {
    let mut done = 0;
    while done < n {
        if rng.gen_bool(0.15) {
            run(rt, session, "BEGIN", seed);
            for _ in 0..rng.gen_range(1..4) {
                let sql = statement(rng);
                run(rt, session, &sql, seed);
                done += 1;
            }
            let end = if rng.gen_bool(0.5) { "COMMIT" } else { "ROLLBACK" };
            run(rt, session, end, seed);
            each(end);
        } else {
            let sql = statement(rng);
            run(rt, session, &sql, seed);
            done += 1;
            each(&sql);
        }
    }
}

#[test]
fn indexes_hold_exactly_their_tables_rows_after_every_statement() {
    let statements: usize = std::env::var("STRATA_INDEX_STATEMENTS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    for seed in seeds(2) {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Db::open(dir.path(), Options::default()).unwrap());
        let engine = SqlEngine::new(db.clone()).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(engine.execute(SETUP)).unwrap();
        let session = engine.session();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut n = 0;
        workload(&mut rng, &rt, &session, statements, seed, |sql| {
            n += 1;
            if n % 50 == 0 {
                db.flush().unwrap();
            }
            // Inside a block the check would see only committed data, which is consistent too.
            check(&db, seed, sql);
        });
    }
}

#[test]
fn indexes_agree_with_their_tables_after_power_loss() {
    for seed in seeds(2) {
        let fs = FaultFs::new();
        let opts = || Options { fs: Arc::new(fs.clone()), ..Options::default() };
        let rt = tokio::runtime::Runtime::new().unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        {
            let db = Arc::new(Db::open("/db", opts()).unwrap());
            rt.block_on(SqlEngine::new(db).unwrap().execute(SETUP)).unwrap();
        }
        for round in 0..6 {
            let db = Arc::new(Db::open("/db", opts()).unwrap_or_else(|e| panic!("seed {seed}: round {round}: {e}")));
            check(&db, seed, &format!("recovery before round {round}"));
            let engine = SqlEngine::new(db.clone()).unwrap();
            let session = engine.session();
            let n = rng.gen_range(5..60);
            workload(&mut rng, &rt, &session, n, seed, |_| {});
            if rng.gen_bool(0.3) {
                db.flush().unwrap();
            }
            // Power goes at once: unsynced bytes are lost or torn.
            fs.crash(Some(rng.gen()));
            drop(session);
            drop(engine);
            drop(db);
            fs.restart();
        }
        let db = Db::open("/db", opts()).unwrap();
        check(&db, seed, "the last recovery");
    }
}

/// Two transactions writing equal values into a UNIQUE index: neither sees the other's row, but
/// both write the same entry, so the second to commit fails (40001) and the index keeps one.
#[test]
fn concurrent_duplicates_of_a_unique_index_do_not_both_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), Options::default()).unwrap());
    let engine = SqlEngine::new(db.clone()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(engine.execute(SETUP)).unwrap();
    let (one, two) = (engine.session(), engine.session());
    for (s, sql) in [
        (&one, "BEGIN"),
        (&two, "BEGIN"),
        (&one, "INSERT INTO t VALUES (1, 1, 'q', 7)"),
        (&two, "INSERT INTO t VALUES (2, 2, 'q', 7)"),
        (&one, "COMMIT"),
    ] {
        rt.block_on(s.execute(sql)).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let e = rt.block_on(two.execute("COMMIT")).unwrap_err();
    assert_eq!(e.kind.sqlstate(), "40001", "{e}");
    check(&db, 0, "the refused commit");
    let out = rt.block_on(engine.execute("SELECT k FROM t WHERE b = 'q'")).unwrap();
    assert_eq!(out.last().and_then(strata_sql::Output::rows), Some(1));
}

/// A table dropped outside SQL (the Rust API, `strata drop-table`) leaves its index listed, but
/// the listing never applies to a new table of the same name, and its name can be taken again.
#[test]
fn an_index_of_a_table_dropped_outside_sql_does_not_apply_to_its_successor() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), Options::default()).unwrap());
    let engine = SqlEngine::new(db.clone()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(engine.execute(SETUP)).unwrap();
    db.drop_table("t").unwrap();
    rt.block_on(engine.execute(
        "CREATE TABLE t (k INT PRIMARY KEY, a INT, b TEXT, c INT); \
         INSERT INTO t VALUES (1, 1, 'q', 7), (2, 1, 'q', 7)",
    ))
    .unwrap_or_else(|e| panic!("the old unique index t_bc applied to the new table: {e}"));
    let e = rt.block_on(engine.execute("CREATE UNIQUE INDEX t_bc ON t (b, c)")).unwrap_err();
    assert_eq!(e.kind.sqlstate(), "23505", "{e}");
    rt.block_on(engine.execute("CREATE INDEX t_a ON t (a)")).unwrap();
    check(&db, 0, "CREATE INDEX t_a again");
}

/// Sorted rows of a query, as text.
fn answer(rt: &tokio::runtime::Runtime, session: &Session, sql: &str) -> Vec<String> {
    let out = rt.block_on(session.execute(sql)).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let Some(strata_sql::Output::Rows { batches, .. }) = out.last() else { panic!("{sql}: no rows") };
    let mut rows: Vec<String> = batches.iter().flat_map(strata::scan::batch_rows).map(|r| format!("{r:?}")).collect();
    rows.sort();
    rows
}

/// Queries whose conditions an index answers give what a scan of the table gives: the same
/// queries run before the indexes exist and after, on committed rows and inside a block that
/// wrote more, and EXPLAIN shows the index read.
#[test]
fn queries_through_an_index_answer_as_a_scan_does() {
    for seed in seeds(1) {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Db::open(dir.path(), Options::default()).unwrap());
        let engine = SqlEngine::new(db.clone()).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let session = engine.session();
        let mut rng = StdRng::seed_from_u64(seed);
        run(&rt, &session, "CREATE TABLE q (k INT PRIMARY KEY, a INT, b TEXT, c BIGINT)", seed);
        for chunk in 0..10 {
            let rows: Vec<String> = (0..40)
                .map(|i| format!("({}, {}, {}, {})", chunk * 40 + i, int(&mut rng), text(&mut rng), int(&mut rng)))
                .collect();
            run(&rt, &session, &format!("INSERT INTO q VALUES {}", rows.join(", ")), seed);
        }
        let queries: Vec<String> = (0..60)
            .map(|_| {
                let v = rng.gen_range(-1..13);
                let cond = match rng.gen_range(0..7) {
                    0 => format!("a = {v}"),
                    1 => format!("a < {v}"),
                    2 => format!("a >= {v} AND a <= {}", v + 1),
                    3 => format!("a BETWEEN {v} AND {} AND c > 3", v + 2),
                    4 => format!("b = {}", text(&mut rng).replace("NULL", "'x'")),
                    5 => format!("b > 'x' AND a = {v}"),
                    _ => format!("c = {v} AND a IS NOT NULL"),
                };
                format!("SELECT k, a, b FROM q WHERE {cond}")
            })
            .collect();
        let scanned: Vec<Vec<String>> = queries.iter().map(|q| answer(&rt, &session, q)).collect();
        run(&rt, &session, "CREATE INDEX q_a ON q (a); CREATE INDEX q_bc ON q (b, c)", seed);
        for (q, want) in queries.iter().zip(&scanned) {
            assert_eq!(&answer(&rt, &session, q), want, "seed {seed}: {q}");
        }
        let plan = answer(&rt, &session, "EXPLAIN SELECT k FROM q WHERE a = 3").join("\n");
        assert!(plan.contains("StrataIndexRead") && plan.contains("q_a"), "seed {seed}: {plan}");
        // In a block, the index read sees the block's own writes. (`a + 0 = 3` is no condition
        // an index answers: a scan.)
        run(&rt, &session, "BEGIN", seed);
        run(
            &rt,
            &session,
            "INSERT INTO q VALUES (1000, 3, 'new', 1); DELETE FROM q WHERE k = 0; UPDATE q SET a = 3 WHERE k = 1",
            seed,
        );
        let through_index = answer(&rt, &session, "SELECT k FROM q WHERE a = 3");
        let scanned = answer(&rt, &session, "SELECT k FROM q WHERE a + 0 = 3");
        run(&rt, &session, "ROLLBACK", seed);
        assert_eq!(through_index, scanned, "seed {seed}");
        assert!(through_index.contains(&"[Int(1000)]".to_string()), "seed {seed}: {through_index:?}");
        assert!(!through_index.contains(&"[Int(0)]".to_string()), "seed {seed}: {through_index:?}");
    }
}
