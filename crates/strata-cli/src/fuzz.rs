//! The CLI's fuzz targets (see [`strata::fuzz`]): the `--where` and `--agg` parsers, and
//! `exec` sessions fed arbitrary request lines.

use std::path::Path;
use std::sync::Arc;

use strata::fuzz::Target;
use strata::vfs::FaultFs;
use strata::{Column, ColumnType, Db, Options, Schema};

use crate::exec::Session;
use crate::expr::{parse_agg, parse_where};

/// The CLI's targets.
pub fn targets() -> Vec<Target> {
    vec![
        Target { name: "where_clause", run: where_clause, seeds: where_seeds },
        Target { name: "exec", run: exec, seeds: exec_seeds },
    ]
}

/// A table of every column type, which predicates name.
fn schema() -> Schema {
    let cols = [
        ("id", ColumnType::BigInt),
        ("i", ColumnType::Int),
        ("small", ColumnType::SmallInt),
        ("tiny", ColumnType::TinyInt),
        ("d", ColumnType::Double),
        ("r", ColumnType::Real),
        ("s", ColumnType::Text),
        ("b", ColumnType::Bytea),
        ("f", ColumnType::Boolean),
        ("day", ColumnType::Date),
        ("at", ColumnType::Timestamp),
        ("tz", ColumnType::TimestampTz),
    ];
    Schema::new(cols.iter().map(|&(n, t)| Column::new(n, t)).collect(), &["id"]).expect("a fixed schema is valid")
}

/// Text parsed as a `--where` predicate and as an `--agg` aggregate over [`schema`].
fn where_clause(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let schema = schema();
    let _ = parse_where(text, &schema);
    let _ = parse_agg(text, &schema);
}

fn where_seeds() -> Vec<Vec<u8>> {
    [
        "id = 5",
        "i > 3 AND (s = 'it''s' OR s IS NULL)",
        "NOT d BETWEEN -1.5 AND 2e10",
        "b = '\\x0a1b' OR f = TRUE",
        "day >= '2024-02-29' AND at < '2024-01-01 12:00:00' AND tz <> '2024-01-01 00:00:00+02'",
        "r != 0.5 AND small <= -3 AND tiny IS NOT NULL",
        "s NOT BETWEEN 'a' AND 'z'",
        "count(*)",
        "sum(i)",
        "avg(d)",
        "min(s)",
        "max(at)",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// Each line a request to one `exec` session over a new database in memory.
fn exec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let opts = Options { fs: Arc::new(FaultFs::new()), ..Options::default() };
    let Ok(db) = Db::open(Path::new("/fuzz"), opts) else { return };
    let mut session = Session::new(db, false);
    for line in text.lines().take(64) {
        let _ = session.handle_line(line);
    }
}

fn exec_seeds() -> Vec<Vec<u8>> {
    let create =
        r#"{"op":"create_table","table":"t","schema":"id BIGINT PRIMARY KEY, v TEXT, n INT, d DOUBLE, b BYTEA"}"#;
    let sessions = [
        vec![
            create,
            r#"{"op":"insert","table":"t","row":{"id":1,"v":"one","n":1,"d":"NaN","b":"\\x00ff"}}"#,
            r#"{"op":"update","table":"t","key":{"id":1},"set":{"v":"uno"}}"#,
            r#"{"op":"get","table":"t","key":{"id":1},"columns":["v","n"]}"#,
            r#"{"op":"scan","table":"t","where":"n > 0 AND v IS NOT NULL","agg":["count(*)","max(d)"]}"#,
            r#"{"op":"delete","table":"t","key":{"id":1}}"#,
            r#"{"op":"flush"}"#,
            r#"{"op":"compact","table":"t"}"#,
        ],
        vec![
            create,
            r#"{"op":"begin","txn":"a"}"#,
            r#"{"op":"insert","table":"t","row":{"id":2,"v":"two"},"txn":"a"}"#,
            r#"{"op":"snapshot","name":"s"}"#,
            r#"{"op":"commit","txn":"a"}"#,
            r#"{"op":"get","table":"t","key":{"id":2},"snapshot":"s"}"#,
            r#"{"op":"multi_get","table":"t","keys":[{"id":2},{"id":3}]}"#,
            r#"{"op":"release","name":"s"}"#,
            r#"{"op":"scan","table":"t","from":{"id":0},"to":{"id":9},"limit":1,"as_of":"1"}"#,
        ],
        vec![
            r#"{"op":"create_table","table":"l","schema":"k TEXT, x INT, PRIMARY KEY (k)","engine":"lineage"}"#,
            r#"{"op":"batch","ops":[{"op":"insert","table":"l","row":{"k":"a","x":1}},{"op":"delete","table":"l","key":{"k":"b"}}]}"#,
            r#"{"op":"scan","table":"l","columns":["x"]}"#,
            r#"{"op":"drop_table","table":"l"}"#,
            r#"not json"#,
        ],
    ];
    sessions.iter().map(|lines| lines.join("\n").into_bytes()).collect()
}
