//! psql's `\d`, `\dt`, `\di`, `\dv`, `\d TABLE`, `\d+ TABLE`, `\dn`, `\du` and `\l` against strata
//! and against a real PostgreSQL 15 with the same schema: what psql prints must be the same,
//! character for character (`\l` compares its columns and the row of the database both serve, since
//! PostgreSQL also lists its template databases). psql builds these from `pg_catalog` queries
//! (`pg_class`, `pg_attribute`, `pg_index`, `pg_constraint`, policies, publications,
//! inheritance, ...), so this checks strata's catalogs through the client that reads them most.
//!
//! The PostgreSQL server is `STRATA_POSTGRES_URL` (a database URL; `.ci/run` starts one); without
//! it the test is skipped, unless `STRATA_REQUIRE_CLIENTS` is set.

use std::process::Command;

use super::{client_env, start};

/// The schema both servers get: every column type strata has a PostgreSQL name for, a
/// composite key, a table without a key (a hidden row id in strata), plain and UNIQUE
/// indexes, a quoted mixed-case name and a view.
const SCHEMA: &[&str] = &[
    "CREATE TABLE orders (id BIGINT PRIMARY KEY, cust INT NOT NULL, total DOUBLE PRECISION, note TEXT, \
     code VARCHAR(20), d DATE, ts TIMESTAMP, tz TIMESTAMPTZ, flag BOOLEAN, b BYTEA, s SMALLINT, r REAL, c CHAR(3))",
    "CREATE TABLE pairs (a INT, b TEXT, v BIGINT, PRIMARY KEY (a, b))",
    "CREATE TABLE nokey (x INT, y TEXT)",
    "CREATE TABLE \"Mixed Case\" (\"Id\" INT PRIMARY KEY, \"select\" TEXT NOT NULL)",
    "CREATE INDEX orders_cust ON orders (cust)",
    "CREATE INDEX orders_cust_total ON orders (cust, total)",
    "CREATE UNIQUE INDEX pairs_v ON pairs (v, b)",
    "CREATE INDEX nokey_y ON nokey (y)",
    "CREATE VIEW big AS SELECT id, cust, note FROM orders WHERE cust > 5",
];

/// The psql commands compared, each as its own psql run.
const COMMANDS: &[&str] = &[
    "\\d",
    "\\dt",
    "\\di",
    "\\dv",
    "\\d orders",
    "\\d pairs",
    "\\d nokey",
    "\\d \"Mixed Case\"",
    "\\d big",
    "\\dt orders",
    "\\d+ orders",
    "\\d+ nokey",
    "\\dn",
    "\\du",
];

/// psql's output for `args` against `url` (psql's own settings ignored, errors on stderr).
fn psql(url: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("psql")
        .arg(url)
        .args(["-X", "-v", "ON_ERROR_STOP=1"])
        .args(args)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .unwrap_or_else(|e| panic!("psql did not run: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `\l` in unaligned form: its column names, and the row of `database`.
fn databases(url: &str, database: &str) -> (String, String) {
    let (ok, out, err) = psql(url, &["-A", "-c", "\\l"]);
    assert!(ok, "\\l failed on {url}: {err}");
    let mut lines = out.lines().skip(1);
    let header = lines.next().unwrap_or_default().to_string();
    let row = lines.find(|l| l.starts_with(&format!("{database}|"))).unwrap_or_default().to_string();
    (header, row)
}

#[test]
fn psql_describes_tables_views_and_indexes_as_postgresql_does() {
    let Some(postgres) = client_env("STRATA_POSTGRES_URL") else { return };
    let postgres = postgres.to_string_lossy().into_owned();
    let server = start(|_| {});
    let strata = format!("postgresql://strata@{}:{}/strata", server.addr.ip(), server.addr.port());

    // PostgreSQL's database may hold the objects of an earlier run.
    let reset = ["DROP VIEW IF EXISTS big", "DROP TABLE IF EXISTS orders, pairs, nokey, \"Mixed Case\""];
    for url in [&postgres, &strata] {
        let mut args = Vec::new();
        for stmt in reset.iter().chain(SCHEMA) {
            args.extend(["-q", "-c", stmt]);
        }
        let (ok, _, err) = psql(url, &args);
        assert!(ok, "the schema did not load on {url}: {err}");
    }

    for command in COMMANDS {
        let expected = psql(&postgres, &["-c", command]);
        let got = psql(&strata, &["-c", command]);
        assert!(expected.0, "PostgreSQL failed {command}: {}", expected.2);
        assert!(got.0, "strata failed {command}: {}", got.2);
        assert_eq!(
            got.1, expected.1,
            "psql's {command} differs: strata printed\n{}\nPostgreSQL printed\n{}",
            got.1, expected.1
        );
    }

    // The same database name on both sides: PostgreSQL's URL names it.
    let name = postgres.rsplit('/').next().unwrap_or_default().split('?').next().unwrap_or_default().to_string();
    let (pg_header, pg_row) = databases(&postgres, &name);
    let (header, row) = databases(&strata, "strata");
    assert_eq!(header, pg_header, "\\l's columns differ");
    assert_eq!(
        row.split_once('|').map(|r| r.1),
        pg_row.split_once('|').map(|r| r.1),
        "\\l's row differs: {row} / {pg_row}"
    );

    // Catalogs follow DDL at once: a dropped index and view are gone from the next \d.
    let (ok, _, err) = psql(&strata, &["-q", "-c", "DROP INDEX orders_cust", "-c", "DROP VIEW big"]);
    assert!(ok, "{err}");
    let (_, out, _) = psql(&strata, &["-c", "\\d orders"]);
    assert!(!out.contains("orders_cust\"") && out.contains("orders_cust_total"), "{out}");
    let (_, out, err) = psql(&strata, &["-c", "\\dv"]);
    assert!(err.contains("Did not find any relations") || out.contains("Did not find any relations"), "{out}{err}");
}
