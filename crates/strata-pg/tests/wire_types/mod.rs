//! Every type of value over the wire, in text and binary format, against what `strata sql`
//! computes: each query runs in-process through [`strata_sql::SqlEngine`] (the expected Arrow
//! values and types) and through the server with the `postgres` crate, once with the simple
//! protocol (text) and once with the extended protocol (binary results). Binary values are
//! decoded by the type announced in RowDescription with the client's own decoders, so a type
//! announced for bytes of another (int4 for an 8-byte value) fails here instead of reading a
//! wrong number.

use std::sync::Arc;

use chrono::{NaiveDate, NaiveDateTime};
use postgres::types::Type;
use postgres::{Client, SimpleQueryMessage};
use rust_decimal::Decimal;
use strata::{Column, ColumnType, Schema, TableOptions, Value};
use strata_sql::datafusion::arrow::array::{Array, ArrayRef, AsArray};
use strata_sql::datafusion::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    TimeUnit, TimestampMicrosecondType, TimestampNanosecondType, UInt64Type,
};
use strata_sql::{Output, SqlEngine};

use super::{connect, start_on};

/// A value as compared: floats by their bits (so NaN equals NaN, and 0.0 is not -0.0).
#[derive(Debug, Clone, PartialEq)]
enum V {
    Null,
    Int(i128),
    F4(u32),
    F8(u64),
    Bool(bool),
    Text(String),
    Bytes(Vec<u8>),
    Date(NaiveDate),
    /// Value and scale.
    Numeric(Decimal, u32),
    Timestamp(NaiveDateTime),
}

fn f4(v: f32) -> V {
    V::F4(if v.is_nan() { f32::NAN.to_bits() } else { v.to_bits() })
}

fn f8(v: f64) -> V {
    V::F8(if v.is_nan() { f64::NAN.to_bits() } else { v.to_bits() })
}

/// The PostgreSQL type a column of Arrow type `t` must be announced as.
fn pg_type_for(t: &DataType) -> Type {
    match t {
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => Type::INT2,
        DataType::Int32 | DataType::UInt16 => Type::INT4,
        DataType::Int64 | DataType::UInt32 => Type::INT8,
        DataType::UInt64 | DataType::Decimal128(..) => Type::NUMERIC,
        DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Boolean => Type::BOOL,
        DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 | DataType::Null => Type::TEXT,
        DataType::Binary | DataType::BinaryView | DataType::LargeBinary => Type::BYTEA,
        DataType::Date32 => Type::DATE,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        other => panic!("no expected PostgreSQL type for {other}"),
    }
}

/// Row `i` of an in-process result column.
fn expected(a: &ArrayRef, i: usize) -> V {
    if a.is_null(i) || *a.data_type() == DataType::Null {
        return V::Null;
    }
    match a.data_type() {
        DataType::Int8 => V::Int(a.as_primitive::<Int8Type>().value(i).into()),
        DataType::Int16 => V::Int(a.as_primitive::<Int16Type>().value(i).into()),
        DataType::Int32 => V::Int(a.as_primitive::<Int32Type>().value(i).into()),
        DataType::Int64 => V::Int(a.as_primitive::<Int64Type>().value(i).into()),
        // PostgreSQL has no unsigned type: a UInt64 is a NUMERIC.
        DataType::UInt64 => V::Numeric(Decimal::from(a.as_primitive::<UInt64Type>().value(i)), 0),
        DataType::Float32 => f4(a.as_primitive::<Float32Type>().value(i)),
        DataType::Float64 => f8(a.as_primitive::<Float64Type>().value(i)),
        DataType::Boolean => V::Bool(a.as_boolean().value(i)),
        DataType::Utf8 => V::Text(a.as_string::<i32>().value(i).into()),
        DataType::Utf8View => V::Text(a.as_string_view().value(i).into()),
        DataType::Binary => V::Bytes(a.as_binary::<i32>().value(i).into()),
        DataType::BinaryView => V::Bytes(a.as_binary_view().value(i).into()),
        DataType::Date32 => V::Date(Date32Type::to_naive_date_opt(a.as_primitive::<Date32Type>().value(i)).unwrap()),
        DataType::Decimal128(_, s) => {
            let s = u32::try_from(*s).unwrap();
            V::Numeric(Decimal::from_i128_with_scale(a.as_primitive::<Decimal128Type>().value(i), s), s)
        }
        DataType::Timestamp(TimeUnit::Microsecond, None) => {
            V::Timestamp(a.as_primitive::<TimestampMicrosecondType>().value_as_datetime(i).unwrap())
        }
        DataType::Timestamp(TimeUnit::Nanosecond, None) => {
            V::Timestamp(a.as_primitive::<TimestampNanosecondType>().value_as_datetime(i).unwrap())
        }
        other => panic!("no expected value for {other}"),
    }
}

/// A value of a binary result, decoded as the type the server announced.
fn from_binary(row: &postgres::Row, i: usize) -> V {
    let ty = row.columns()[i].type_().clone();
    macro_rules! get {
        ($t:ty, $f:expr) => {
            match row.try_get::<_, Option<$t>>(i) {
                Ok(Some(v)) => $f(v),
                Ok(None) => V::Null,
                Err(e) => panic!("column {i} announced as {ty} does not decode as one: {e}"),
            }
        };
    }
    match ty {
        Type::INT2 => get!(i16, |v: i16| V::Int(v.into())),
        Type::INT4 => get!(i32, |v: i32| V::Int(v.into())),
        Type::INT8 => get!(i64, |v: i64| V::Int(v.into())),
        Type::FLOAT4 => get!(f32, f4),
        Type::FLOAT8 => get!(f64, f8),
        Type::BOOL => get!(bool, V::Bool),
        Type::TEXT => get!(String, V::Text),
        Type::BYTEA => get!(Vec<u8>, V::Bytes),
        Type::DATE => get!(NaiveDate, V::Date),
        Type::NUMERIC => get!(Decimal, |d: Decimal| V::Numeric(d, d.scale())),
        Type::TIMESTAMP => get!(NaiveDateTime, V::Timestamp),
        other => panic!("unexpected column type {other}"),
    }
}

/// A value of a text result, read as the type the in-process result has.
fn from_text(text: Option<&str>, t: &DataType) -> V {
    let Some(s) = text else { return V::Null };
    let float = |s: &str| -> f64 {
        match s {
            "NaN" => f64::NAN,
            "Infinity" => f64::INFINITY,
            "-Infinity" => f64::NEG_INFINITY,
            s => s.parse().unwrap_or_else(|e| panic!("float text {s:?}: {e}")),
        }
    };
    match t {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            V::Int(s.parse().unwrap_or_else(|e| panic!("integer text {s:?}: {e}")))
        }
        DataType::Float32 => f4(match s {
            "NaN" | "Infinity" | "-Infinity" => float(s) as f32,
            s => s.parse().unwrap_or_else(|e| panic!("float text {s:?}: {e}")),
        }),
        DataType::Float64 => f8(float(s)),
        DataType::Boolean => V::Bool(match s {
            "t" => true,
            "f" => false,
            other => panic!("boolean text {other:?}"),
        }),
        DataType::Utf8 | DataType::Utf8View | DataType::Null => V::Text(s.into()),
        DataType::Binary | DataType::BinaryView => {
            let hex = s.strip_prefix("\\x").unwrap_or_else(|| panic!("bytea text {s:?}"));
            V::Bytes((0..hex.len()).step_by(2).map(|k| u8::from_str_radix(&hex[k..k + 2], 16).unwrap()).collect())
        }
        DataType::Date32 => V::Date(NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap_or_else(|e| panic!("{s:?}: {e}"))),
        DataType::Decimal128(..) | DataType::UInt64 => {
            let d: Decimal = s.parse().unwrap_or_else(|e| panic!("numeric text {s:?}: {e}"));
            V::Numeric(d, d.scale())
        }
        DataType::Timestamp(_, None) => V::Timestamp(
            NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").unwrap_or_else(|e| panic!("{s:?}: {e}")),
        ),
        other => panic!("no text reader for {other}"),
    }
}

/// The in-process result of `sql`: column types and rows, or the SQLSTATE of its error.
fn run_in_process(
    rt: &tokio::runtime::Runtime,
    engine: &SqlEngine,
    sql: &str,
) -> Result<(Vec<DataType>, Vec<Vec<V>>), String> {
    match rt.block_on(engine.execute(sql)) {
        Err(e) => Err(e.kind.sqlstate().to_string()),
        Ok(mut outputs) => match outputs.pop() {
            Some(Output::Rows { schema, batches }) => {
                let types = schema.fields().iter().map(|f| f.data_type().clone()).collect();
                let mut rows = Vec::new();
                for b in &batches {
                    for i in 0..b.num_rows() {
                        rows.push(b.columns().iter().map(|a| expected(a, i)).collect());
                    }
                }
                Ok((types, rows))
            }
            other => panic!("{sql}: not a query ({other:?})"),
        },
    }
}

fn sqlstate(e: &postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

/// The expressions compared: every column type alone, and expressions whose result type
/// DataFusion widens or changes.
const EXPRESSIONS: &[&str] = &[
    "i8",
    "i16",
    "i32",
    "i64",
    "f32",
    "f64",
    "b",
    "t",
    "by",
    "d",
    "CASE WHEN id = 1 THEN i32 ELSE 1000 END",
    "CASE WHEN id = 1 THEN i16 ELSE i8 END",
    "CASE WHEN b THEN f32 ELSE f64 END",
    "CASE WHEN id = 2 THEN t END",
    "COALESCE(i32, i64)",
    "COALESCE(i16, 0)",
    "COALESCE(i8, i16)",
    "COALESCE(f32, 0.5)",
    "COALESCE(t, 'none')",
    "COALESCE(by, X'ff')",
    "NULLIF(i32, 100000)",
    "NULLIF(t, '')",
    "NULLIF(i8, 0)",
    "i8 + i16",
    "i16 * 2",
    "i32 + i64",
    "i32 - 1",
    "i8 * i8",
    "f32 + f64",
    "f32 * 2",
    "i32 / 2",
    "i64 % 7",
    "-i16",
    "i32 + 0.5",
    "i16 / 4.0",
    "CAST(i64 AS INT)",
    "CAST(i32 AS SMALLINT)",
    "CAST(i32 AS DOUBLE)",
    "CAST(f64 AS REAL)",
    "CAST(i8 AS BIGINT)",
    "CAST(d AS TEXT)",
    "CAST(i32 AS TEXT)",
    "CAST(f32 AS TEXT)",
    "CAST(b AS INT)",
    "CAST(i16 AS DECIMAL(10, 2))",
    "CAST(i64 AS DECIMAL(38, 0))",
    "CAST(t AS BYTEA)",
    "CAST(i32 AS BOOLEAN)",
    "1",
    "2147483648",
    "1.5",
    "'x'",
    "NULL",
    "true",
    "DATE '2026-11-26'",
    "X'00ff'",
    "CAST(-1.25 AS DECIMAL(5, 3))",
    "CAST('2026-11-26 10:00:00.5' AS TIMESTAMP)",
    "i32 > 0 AND b",
    "t || '!'",
    "length(t)",
    "upper(t)",
    "d < DATE '2000-01-01'",
    "i32 IS NULL",
];

/// Aggregates over the whole table: one row each.
const AGGREGATES: &[&str] = &[
    "count(*)",
    "count(t)",
    "sum(i8)",
    "sum(i16)",
    "sum(i32)",
    "sum(i64)",
    "sum(f32)",
    "sum(f64)",
    "avg(i16)",
    "avg(i64)",
    "min(i8)",
    "max(i16)",
    "min(i32)",
    "max(i64)",
    "min(f32)",
    "max(f64)",
    "min(t)",
    "max(by)",
    "min(d)",
    "max(b)",
    "sum(CAST(i16 AS DECIMAL(10, 2)))",
    "avg(CAST(i32 AS DECIMAL(12, 1)))",
    "approx_distinct(i32)",
    "count(DISTINCT i8)",
    "bool_and(b)",
];

fn create_table(engine: &SqlEngine) {
    let schema = Schema::new(
        vec![
            Column::new("id", ColumnType::BigInt),
            Column::new("i8", ColumnType::TinyInt),
            Column::new("i16", ColumnType::SmallInt),
            Column::new("i32", ColumnType::Int),
            Column::new("i64", ColumnType::BigInt),
            Column::new("f32", ColumnType::Real),
            Column::new("f64", ColumnType::Double),
            Column::new("b", ColumnType::Boolean),
            Column::new("t", ColumnType::Text),
            Column::new("by", ColumnType::Bytea),
            Column::new("d", ColumnType::Date),
        ],
        &["id"],
    )
    .unwrap();
    let db = engine.db();
    let table = db.create_table("typed", schema, TableOptions::default()).unwrap();
    let date = |y, m, d| Value::Date(Date32Type::from_naive_date(NaiveDate::from_ymd_opt(y, m, d).unwrap()));
    let rows = vec![
        // The issue's case: 100000 in an INT column, sent as int8 by a widened CASE.
        vec![
            Value::BigInt(1),
            Value::TinyInt(3),
            Value::SmallInt(7),
            Value::Int(100_000),
            Value::BigInt(-5),
            Value::Real(0.1),
            Value::Double(2.5),
            Value::Boolean(true),
            "héllo ✓ 日本".into(),
            Value::Bytea(vec![0, 0xff, 0x10]),
            date(2026, 11, 26),
        ],
        // Largest values.
        vec![
            Value::BigInt(2),
            Value::TinyInt(i8::MAX),
            Value::SmallInt(i16::MAX),
            Value::Int(i32::MAX),
            Value::BigInt(i64::MAX),
            Value::Real(f32::MAX),
            Value::Double(f64::MAX),
            Value::Boolean(false),
            "".into(),
            Value::Bytea(vec![]),
            date(9999, 12, 31),
        ],
        // Smallest values, NaN and infinities.
        vec![
            Value::BigInt(3),
            Value::TinyInt(i8::MIN),
            Value::SmallInt(i16::MIN),
            Value::Int(i32::MIN),
            Value::BigInt(i64::MIN),
            Value::Real(f32::NEG_INFINITY),
            Value::Double(f64::NAN),
            Value::Boolean(true),
            "\u{1F600} \"quoted\" \\ back,slash".into(),
            Value::Bytea(vec![b'\\', 0, b'x']),
            date(1, 1, 1),
        ],
        vec![
            Value::BigInt(4),
            Value::TinyInt(0),
            Value::SmallInt(-1),
            Value::Int(0),
            Value::BigInt(0),
            Value::Real(f32::INFINITY),
            Value::Double(f64::NEG_INFINITY),
            Value::Boolean(false),
            "x".into(),
            Value::Bytea(vec![1]),
            date(1970, 1, 1),
        ],
        // NULL everywhere.
        vec![
            Value::BigInt(5),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
        ],
        vec![
            Value::BigInt(6),
            Value::TinyInt(-7),
            Value::SmallInt(300),
            Value::Int(-123_456),
            Value::BigInt(1 << 40),
            Value::Real(-0.0),
            Value::Double(1e-300),
            Value::Boolean(true),
            "tab\there\nnewline".into(),
            Value::Bytea((0..=255).collect()),
            date(2000, 2, 29),
        ],
    ];
    for row in rows {
        table.insert(&row).unwrap();
    }
}

/// Compares `sql` in-process with the wire in text and binary format; returns a line per
/// difference.
fn compare(rt: &tokio::runtime::Runtime, engine: &SqlEngine, client: &mut Client, sql: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let expected = run_in_process(rt, engine, sql);
    // Binary: the extended protocol, as the postgres crate always asks.
    match (&expected, client.query(sql, &[])) {
        (Ok((types, rows)), Ok(got)) => {
            if let Some(first) = got.first() {
                for (i, (c, t)) in first.columns().iter().zip(types).enumerate() {
                    if *c.type_() != pg_type_for(t) {
                        problems.push(format!("{sql}: column {i} of {t} announced as {}", c.type_()));
                    }
                }
            }
            let got: Vec<Vec<V>> = got.iter().map(|r| (0..r.len()).map(|i| from_binary(r, i)).collect()).collect();
            if got != *rows {
                problems.push(format!("{sql}: binary {got:?}, strata sql {rows:?}"));
            }
        }
        (Err(state), Err(e)) if *state == sqlstate(&e) => {}
        (want, got) => problems.push(format!("{sql}: binary {:?}, strata sql {want:?}", got.map(|r| r.len()))),
    }
    // Text: the simple protocol.
    match (&expected, client.simple_query(sql)) {
        (Ok((types, rows)), Ok(messages)) => {
            let got: Vec<Vec<V>> = messages
                .iter()
                .filter_map(|m| match m {
                    SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| from_text(r.get(i), &types[i])).collect()),
                    _ => None,
                })
                .collect();
            if got != *rows {
                problems.push(format!("{sql}: text {got:?}, strata sql {rows:?}"));
            }
        }
        (Err(state), Err(e)) if *state == sqlstate(&e) => {}
        (want, got) => problems.push(format!("{sql}: text {:?}, strata sql {want:?}", got.map(|m| m.len()))),
    }
    problems
}

#[test]
fn every_type_and_expression_reads_the_same_in_text_and_binary_as_in_strata_sql() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(strata::Db::open(dir.path(), strata::Options::default()).unwrap());
    let engine = SqlEngine::new(db).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    create_table(&engine);
    let server = start_on(engine.clone(), |_| {});
    let mut client = connect(server.addr, "strata", "").unwrap();

    let mut problems = Vec::new();
    let mut compared = 0;
    for e in EXPRESSIONS {
        problems.extend(compare(&rt, &engine, &mut client, &format!("SELECT {e} FROM typed ORDER BY id")));
        compared += 1;
    }
    for a in AGGREGATES {
        problems.extend(compare(&rt, &engine, &mut client, &format!("SELECT {a} FROM typed")));
        compared += 1;
    }
    // Several columns at once, and no rows at all.
    problems.extend(compare(
        &rt,
        &engine,
        &mut client,
        "SELECT id, i8, t, f64, by FROM typed WHERE id > 2 ORDER BY id",
    ));
    problems.extend(compare(&rt, &engine, &mut client, "SELECT i16 + 1, t FROM typed WHERE id > 100"));
    assert!(problems.is_empty(), "{} of {compared} queries differ:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn the_issue_case_reads_100000_and_1000_in_binary() {
    let server = super::start(|_| {});
    let mut client = connect(server.addr, "strata", "").unwrap();
    client
        .batch_execute(
            "CREATE TABLE eb (id INT PRIMARY KEY, n INT, s SMALLINT); INSERT INTO eb VALUES (1, 100000, 7), (2, -5, 8)",
        )
        .unwrap();
    let rows = client.query("SELECT CASE WHEN id = 1 THEN n ELSE 1000 END FROM eb ORDER BY id", &[]).unwrap();
    assert_eq!(*rows[0].columns()[0].type_(), Type::INT8);
    let got: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(got, [100_000, 1000]);
}

#[test]
fn parameters_take_declared_and_inferred_types_and_refuse_lossy_conversions() {
    let server = super::start(|_| {});
    let mut client = connect(server.addr, "strata", "").unwrap();
    client.batch_execute("CREATE TABLE p (id BIGINT PRIMARY KEY, s SMALLINT, x DOUBLE, t TEXT, d DATE)").unwrap();
    // Inferred from the columns: the client is told the column types and sends those.
    let insert = client.prepare("INSERT INTO p VALUES ($1, $2, $3, $4, $5)").unwrap();
    assert_eq!(insert.params(), [Type::INT8, Type::INT2, Type::FLOAT8, Type::TEXT, Type::DATE]);
    let day = NaiveDate::from_ymd_opt(2026, 11, 26).unwrap();
    client.execute(&insert, &[&1i64, &7i16, &0.5f64, &"a", &day]).unwrap();
    // Declared by the client: a parameter is the type it was declared as.
    let wide = client.prepare_typed("INSERT INTO p VALUES ($1, $2, $3, $4, $5)", &[Type::INT8, Type::INT8]).unwrap();
    client.execute(&wide, &[&2i64, &300i64, &1.0f64, &"b", &day]).unwrap();
    let e = client.execute(&wide, &[&3i64, &(1i64 << 40), &1.0f64, &"c", &day]).unwrap_err();
    assert!(e.code().is_some(), "an out-of-range SMALLINT is refused with an error: {e}");
    let echo = client.prepare_typed("SELECT $1", &[Type::INT8]).unwrap();
    assert_eq!(echo.columns()[0].type_(), &Type::INT8);
    assert_eq!(client.query_one(&echo, &[&5_000_000_000i64]).unwrap().get::<_, i64>(0), 5_000_000_000);
    // A parameter nothing gives a type is text, as in PostgreSQL.
    let untyped = client.prepare("SELECT $1 AS v").unwrap();
    assert_eq!(untyped.params(), [Type::TEXT]);
    assert_eq!(untyped.columns()[0].type_(), &Type::TEXT);
    assert_eq!(client.query_one(&untyped, &[&"hi"]).unwrap().get::<_, String>(0), "hi");
    // A float sent for an integer column is converted only when nothing is lost.
    let by_s = client.prepare_typed("SELECT id FROM p WHERE s = $1", &[Type::FLOAT8]).unwrap();
    assert_eq!(client.query(&by_s, &[&300.0f64]).unwrap().len(), 1);
    let exact = client.prepare_typed("SELECT count(*) FROM p WHERE id = $1", &[Type::TEXT]).unwrap();
    assert_eq!(client.query_one(&exact, &[&"2"]).unwrap().get::<_, i64>(0), 1);
    let e = client.query(&exact, &[&"2.5"]).unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("22000"), "{e}");
    let rows = client.query("SELECT id, s, t, d FROM p ORDER BY id", &[]).unwrap();
    let got: Vec<(i64, i16, String, NaiveDate)> =
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
    assert_eq!(got, [(1, 7, "a".to_string(), day), (2, 300, "b".to_string(), day)]);
}

#[test]
fn a_type_with_no_postgresql_counterpart_is_refused_with_its_name() {
    let server = super::start(|_| {});
    let mut client = connect(server.addr, "strata", "").unwrap();
    client.batch_execute("CREATE TABLE l (id INT PRIMARY KEY, v INT); INSERT INTO l VALUES (1, 2)").unwrap();
    // A list of scalars is a PostgreSQL array, in binary and in text.
    let vs: Vec<i32> = client.query_one("SELECT array_agg(v) AS vs FROM l", &[]).unwrap().get(0);
    assert_eq!(vs, [2]);
    let text = client.simple_query("SELECT make_array('a b', NULL, 'c') AS vs").unwrap();
    let row = text.iter().find_map(|m| match m {
        postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(row.as_deref(), Some("{\"a b\",NULL,c}"));
    // REAL elements stay REAL (0.1 is not widened to 0.10000000149011612).
    let reals = "SELECT make_array(CAST(0.1 AS REAL), CAST(2.5 AS REAL)) AS fs";
    let fs: Vec<f32> = client.query_one(reals, &[]).unwrap().get(0);
    assert_eq!(fs, [0.1f32, 2.5]);
    let text = client.simple_query(reals).unwrap();
    let row = text.iter().find_map(|m| match m {
        postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(row.as_deref(), Some("{0.1,2.5}"));
    // A list of lists is not.
    let nested = "SELECT make_array(array_agg(v)) AS vs FROM l";
    for e in [client.query(nested, &[]).unwrap_err(), client.simple_query(nested).unwrap_err()] {
        assert_eq!(e.code().map(|c| c.code()), Some("0A000"), "{e}");
        let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(message.contains("\"vs\"") && message.contains("List"), "{message}");
    }
    // In a multi-statement query the statements before it stay applied and answered.
    let messages =
        client.simple_query("INSERT INTO l VALUES (2, 3); SELECT make_array(array_agg(v)) FROM l").unwrap_err();
    assert_eq!(messages.code().map(|c| c.code()), Some("0A000"), "{messages}");
    assert_eq!(client.query_one("SELECT count(*) FROM l", &[]).unwrap().get::<_, i64>(0), 2);
    // The connection stays usable.
    assert_eq!(client.query_one("SELECT v FROM l WHERE id = 1", &[]).unwrap().get::<_, i32>(0), 2);
}
