//! Differential test of the analytical scan engine: random filters (CNF after normalization, with
//! NULLs, strings sharing prefixes, doubles with -0.0 and NaN, values at type boundaries),
//! projections, aggregates and limits over random data with updates, deletes and snapshots,
//! across layouts and tree shapes (churning, fully compacted, compacted then updated, a layout changed under concurrent scans), and while
//! flushes and compactions mark superseded versions underneath concurrent scans at old and new
//! snapshots. Every answer must equal a plain filter/aggregate over a BTreeMap model computed
//! here.
//!
//! `STRATA_SEEDS=..` picks seeds.

use crate::common;

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::common::{layout_spec, seeds, with_seed};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata::scan::{batch_rows, AggFunc, Aggregate, CmpOp, Expr, ScanRequest};
use strata::vfs::OsFs;
use strata::*;

fn schema() -> Schema {
    Schema::new(
        vec![
            Column::not_null("id", ColumnType::BigInt),
            Column::new("i", ColumnType::Int),
            Column::new("d", ColumnType::Double),
            Column::new("s", ColumnType::Text),
            Column::not_null("small", ColumnType::SmallInt),
            Column::new("r", ColumnType::Real),
            Column::new("flag", ColumnType::Boolean),
            Column::new("blob", ColumnType::Bytea),
            Column::new("big", ColumnType::BigInt),
            Column::new("day", ColumnType::Date),
            Column::new("at", ColumnType::TimestampTz),
            Column::new("ts", ColumnType::Timestamp),
        ],
        &["id"],
    )
    .unwrap()
}

const STRINGS: &[&str] =
    &["", "a", "ab", "abc", "abcd", "abcde", "abcdf", "abce", "b", "zz", "abcd\u{e9}", "~~~~~~~~~~~~"];

fn value(rng: &mut StdRng, c: &Column) -> Value {
    if c.nullable && rng.gen_ratio(1, 7) {
        return Value::Null;
    }
    match c.ty {
        ColumnType::Int => Value::Int([i32::MIN, i32::MAX, 0, -1, 1][rng.gen_range(0..5)].max(rng.gen_range(-50..50))),
        ColumnType::Double => {
            let specials = [0.0, -0.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.5, -0.5];
            if rng.gen_ratio(1, 5) {
                Value::Double(specials[rng.gen_range(0..specials.len())])
            } else {
                Value::Double(f64::from(rng.gen_range(-400..400)) / 8.0)
            }
        }
        ColumnType::Text => Value::Text(STRINGS[rng.gen_range(0..STRINGS.len())].to_string()),
        ColumnType::SmallInt => {
            Value::SmallInt([i16::MIN, i16::MAX, 0][rng.gen_range(0..3)].max(rng.gen_range(-30..30)))
        }
        ColumnType::Real => Value::Real(rng.gen_range(-20..20) as f32 / 10.0),
        ColumnType::Boolean => Value::Boolean(rng.gen()),
        ColumnType::Bytea => Value::Bytea((0..rng.gen_range(0..6)).map(|_| rng.gen_range(0..4u8)).collect()),
        ColumnType::BigInt => Value::BigInt(rng.gen_range(-1000..1000)),
        ColumnType::TinyInt => Value::TinyInt(rng.gen()),
        ColumnType::Date => Value::Date([i32::MIN, i32::MAX, 0][rng.gen_range(0..3)].max(rng.gen_range(8000..8040))),
        ColumnType::Timestamp => {
            Value::Timestamp([i64::MIN, i64::MAX, -1][rng.gen_range(0..3)].max(rng.gen_range(-50..50)))
        }
        ColumnType::TimestampTz => Value::TimestampTz(rng.gen_range(-1_000_000..1_000_000) * 86_400),
    }
}

/// A literal for comparing with column `c`: usually its own type, sometimes another numeric type.
fn literal(rng: &mut StdRng, c: &Column) -> Value {
    match (c.ty, rng.gen_range(0..6)) {
        (ColumnType::Int | ColumnType::SmallInt | ColumnType::BigInt, 0) => {
            Value::Double(f64::from(rng.gen_range(-40..40)) / 4.0)
        }
        (ColumnType::Int | ColumnType::SmallInt | ColumnType::BigInt, 1) => {
            Value::BigInt([i64::MAX, i64::MIN, 1 << 40][rng.gen_range(0..3)])
        }
        (ColumnType::Double | ColumnType::Real, 0) => Value::Int(rng.gen_range(-5..5)),
        (ColumnType::Double | ColumnType::Real, 1) => {
            Value::Double([0.1, -0.0, f64::NAN, f64::INFINITY][rng.gen_range(0..4)])
        }
        (ColumnType::BigInt, _) if c.name == "id" => Value::BigInt(rng.gen_range(0..3000)),
        _ => match value(rng, c) {
            Value::Null if rng.gen_ratio(1, 2) => Value::Null,
            Value::Null => literal(rng, c),
            v => v,
        },
    }
}

fn random_expr(rng: &mut StdRng, s: &Schema, depth: u32) -> Expr {
    let cols = s.columns();
    if depth == 0 || rng.gen_ratio(1, 3) {
        let c = &cols[rng.gen_range(0..cols.len())];
        return match rng.gen_range(0..10) {
            0 => Expr::IsNull(c.name.clone()),
            1 => Expr::IsNotNull(c.name.clone()),
            _ => {
                let op = [CmpOp::Eq, CmpOp::NotEq, CmpOp::Lt, CmpOp::LtEq, CmpOp::Gt, CmpOp::GtEq][rng.gen_range(0..6)];
                Expr::cmp(&c.name, op, literal(rng, c))
            }
        };
    }
    let n = rng.gen_range(1..4);
    let items = (0..n).map(|_| random_expr(rng, s, depth - 1)).collect();
    match rng.gen_range(0..5) {
        0 | 1 => Expr::And(items),
        2 | 3 => Expr::Or(items),
        _ => Expr::Not(Box::new(random_expr(rng, s, depth - 1))),
    }
}

/// How a column value compares with a literal under the engine's rules: in the column's type,
/// integers exactly against any number, floats in IEEE total order, NULL unknown.
fn cmp_lit(ty: ColumnType, v: &Value, lit: &Value) -> Option<Ordering> {
    let int = |v: &Value| match *v {
        Value::BigInt(x) => Some(i128::from(x)),
        Value::Int(x) => Some(i128::from(x)),
        Value::SmallInt(x) => Some(i128::from(x)),
        Value::TinyInt(x) => Some(i128::from(x)),
        _ => None,
    };
    let float = |v: &Value| match *v {
        Value::Double(x) => Some(x),
        Value::Real(x) => Some(f64::from(x)),
        _ => None,
    };
    if v.is_null() || lit.is_null() {
        return None;
    }
    match ty {
        ColumnType::BigInt | ColumnType::Int | ColumnType::SmallInt | ColumnType::TinyInt => {
            let x = int(v)?;
            match (int(lit), float(lit)) {
                (Some(l), _) => Some(x.cmp(&l)),
                (_, Some(f)) if f.is_nan() => {
                    Some(if f.is_sign_positive() { Ordering::Less } else { Ordering::Greater })
                }
                (_, Some(f)) => (x as f64).partial_cmp(&f),
                _ => None,
            }
        }
        ColumnType::Double | ColumnType::Real => {
            let x = float(v)?;
            let l = float(lit).or_else(|| int(lit).map(|i| i as f64))?;
            Some(x.total_cmp(&l))
        }
        _ => Some(match (v, lit) {
            (Value::Text(a), Value::Text(b)) => a.as_bytes().cmp(b.as_bytes()),
            (Value::Bytea(a), Value::Bytea(b)) => a.cmp(b),
            (Value::Boolean(a), Value::Boolean(b)) => a.cmp(b),
            (Value::Date(a), Value::Date(b)) => a.cmp(b),
            (Value::Timestamp(a), Value::Timestamp(b)) | (Value::TimestampTz(a), Value::TimestampTz(b)) => a.cmp(b),
            _ => return None,
        }),
    }
}

/// Three-valued evaluation: `None` is unknown.
fn eval(e: &Expr, s: &Schema, row: &[Value]) -> Option<bool> {
    match e {
        Expr::Cmp { column, op, value } => {
            let c = s.column_index(column).unwrap();
            cmp_lit(s.columns()[c].ty, &row[c], value).map(|o| op.holds(o))
        }
        Expr::IsNull(c) => Some(row[s.column_index(c).unwrap()].is_null()),
        Expr::IsNotNull(c) => Some(!row[s.column_index(c).unwrap()].is_null()),
        Expr::Not(x) => eval(x, s, row).map(|b| !b),
        // AND is false if any operand is, else unknown if any is; OR the other way round.
        Expr::And(v) | Expr::Or(v) => {
            let decisive = matches!(e, Expr::Or(_));
            let mut unknown = false;
            for x in v {
                match eval(x, s, row) {
                    Some(b) if b == decisive => return Some(decisive),
                    None => unknown = true,
                    Some(_) => {}
                }
            }
            if unknown {
                None
            } else {
                Some(!decisive)
            }
        }
    }
}

fn total(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Double(x), Value::Double(y)) => x.total_cmp(y),
        (Value::Real(x), Value::Real(y)) => x.total_cmp(y),
        (Value::Text(x), Value::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Date(x), Value::Date(y)) => x.cmp(y),
        (Value::Timestamp(x), Value::Timestamp(y)) | (Value::TimestampTz(x), Value::TimestampTz(y)) => x.cmp(y),
        _ => {
            cmp_lit(ColumnType::BigInt, a, b).or_else(|| cmp_lit(ColumnType::Boolean, a, b)).unwrap_or(Ordering::Equal)
        }
    }
}

fn expected_agg(a: &Aggregate, s: &Schema, rows: &[&Vec<Value>]) -> Value {
    let Some(name) = &a.column else { return Value::BigInt(rows.len() as i64) };
    let c = s.column_index(name).unwrap();
    let vals: Vec<&Value> = rows.iter().map(|r| &r[c]).filter(|v| !v.is_null()).collect();
    let float = matches!(s.columns()[c].ty, ColumnType::Double | ColumnType::Real);
    let as_f = |v: &Value| match *v {
        Value::Double(x) => x,
        Value::Real(x) => f64::from(x),
        Value::BigInt(x) => x as f64,
        Value::Int(x) => f64::from(x),
        Value::SmallInt(x) => f64::from(x),
        _ => f64::NAN,
    };
    let as_i = |v: &Value| match *v {
        Value::BigInt(x) => i128::from(x),
        Value::Int(x) => i128::from(x),
        Value::SmallInt(x) => i128::from(x),
        Value::TinyInt(x) => i128::from(x),
        _ => 0,
    };
    match a.func {
        AggFunc::Count => Value::BigInt(vals.len() as i64),
        _ if vals.is_empty() => Value::Null,
        AggFunc::Sum if float => Value::Double(vals.iter().map(|v| as_f(v)).sum()),
        AggFunc::Sum => Value::BigInt(vals.iter().map(|v| as_i(v)).sum::<i128>() as i64),
        AggFunc::Avg if float => Value::Double(vals.iter().map(|v| as_f(v)).sum::<f64>() / vals.len() as f64),
        AggFunc::Avg => Value::Double(vals.iter().map(|v| as_i(v)).sum::<i128>() as f64 / vals.len() as f64),
        AggFunc::Min => vals.iter().min_by(|x, y| total(x, y)).map(|v| (*v).clone()).unwrap(),
        AggFunc::Max => vals.iter().max_by(|x, y| total(x, y)).map(|v| (*v).clone()).unwrap(),
    }
}

/// Doubles from sums may differ in the last bits with summation order.
fn close(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Double(x), Value::Double(y)) => {
            x.to_bits() == y.to_bits()
                || (x.is_nan() && y.is_nan())
                || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
        }
        _ => a == b,
    }
}

type Model = BTreeMap<i64, Vec<Value>>;

fn random_request(rng: &mut StdRng, s: &Schema) -> ScanRequest {
    let mut req = ScanRequest::new();
    if rng.gen_ratio(1, 3) {
        let a = rng.gen_range(0..3000i64);
        let b = a + rng.gen_range(0..1500);
        req = req.with_range(KeyRange::half_open(vec![Value::BigInt(a)], vec![Value::BigInt(b)]));
    }
    if rng.gen_ratio(3, 4) {
        req = req.with_filter(random_expr(rng, s, 3));
    }
    let names: Vec<&str> = s.columns().iter().map(|c| c.name.as_str()).collect();
    if rng.gen_ratio(1, 3) {
        let funcs = [AggFunc::Count, AggFunc::Sum, AggFunc::Min, AggFunc::Max, AggFunc::Avg];
        for _ in 0..rng.gen_range(1..4) {
            let f = funcs[rng.gen_range(0..funcs.len())];
            let pool: Vec<&str> = match f {
                AggFunc::Sum | AggFunc::Avg => vec!["id", "i", "d", "small", "r", "big"],
                _ => names.clone(),
            };
            req = req.with_aggregate(if f == AggFunc::Count && rng.gen_ratio(1, 3) {
                Aggregate::count_star()
            } else {
                Aggregate::new(f, pool[rng.gen_range(0..pool.len())])
            });
        }
    } else {
        if rng.gen_ratio(1, 2) {
            let k = rng.gen_range(1..names.len());
            let cols: Vec<&str> = (0..k).map(|_| names[rng.gen_range(0..names.len())]).collect();
            req = req.with_columns(&cols);
        }
        if rng.gen_ratio(1, 4) {
            req = req.with_limit(rng.gen_range(0..50));
        }
    }
    req.with_batch_rows(rng.gen_range(1..3000))
        .with_block_stats(rng.gen_ratio(3, 4))
        .with_partitions(if rng.gen_ratio(1, 2) { 1 } else { rng.gen_range(2..6) })
}

/// The model's answer to `req`: rows (projected, limited) or one row of aggregates.
fn expected(req: &ScanRequest, s: &Schema, model: &Model) -> Vec<Vec<Value>> {
    let (lo, hi) = match (&req.range.start, &req.range.end) {
        (std::ops::Bound::Included(a), std::ops::Bound::Excluded(b)) => match (&a[0], &b[0]) {
            (Value::BigInt(a), Value::BigInt(b)) => (*a, *b),
            _ => unreachable!(),
        },
        _ => (i64::MIN, i64::MAX),
    };
    let rows: Vec<&Vec<Value>> = model
        .range(lo..hi)
        .map(|(_, r)| r)
        .filter(|r| req.filter.as_ref().is_none_or(|f| eval(f, s, r) == Some(true)))
        .collect();
    if !req.aggregates.is_empty() {
        return vec![req.aggregates.iter().map(|a| expected_agg(a, s, &rows)).collect()];
    }
    let cols: Vec<usize> = match &req.columns {
        None => (0..s.columns().len()).collect(),
        Some(c) => c.iter().map(|n| s.column_index(n).unwrap()).collect(),
    };
    rows.iter().take(req.limit.unwrap_or(usize::MAX)).map(|r| cols.iter().map(|&c| r[c].clone()).collect()).collect()
}

fn answer(t: &Table, req: &ScanRequest, snap: Option<&Snapshot>) -> Result<Vec<Vec<Value>>> {
    let mut out = Vec::new();
    for b in t.scan_batches(req, &ReadOptions { snapshot: snap })? {
        out.extend(batch_rows(&b?));
    }
    Ok(out)
}

/// Runs `reqs` at once, one thread each, released together (so shared ones join one pass).
fn answer_together(t: &Table, reqs: &[ScanRequest], snap: Option<&Snapshot>) -> Vec<Result<Vec<Vec<Value>>>> {
    let barrier = std::sync::Barrier::new(reqs.len());
    std::thread::scope(|sc| {
        let hs: Vec<_> = reqs
            .iter()
            .map(|r| {
                let b = &barrier;
                sc.spawn(move || {
                    b.wait();
                    answer(t, r, snap)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn compare(got: &[Vec<Value>], want: &[Vec<Value>], ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}: row count");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.len(), w.len(), "{ctx}");
        for (a, b) in g.iter().zip(w) {
            assert!(close(a, b), "{ctx}: got {g:?} want {w:?}");
        }
    }
}

/// Runs random requests, some of them as groups of concurrent shared scans.
fn check(db: &Db, t: &Table, model: &Model, snap: Option<&Snapshot>, rng: &mut StdRng, what: &str) {
    let s = t.schema().clone();
    for round in 0..10 {
        let shared = rng.gen_ratio(1, 3);
        let reqs: Vec<ScanRequest> = (0..4).map(|_| random_request(rng, &s).with_shared(shared)).collect();
        let got: Vec<Result<Vec<Vec<Value>>>> =
            if shared { answer_together(t, &reqs, snap) } else { reqs.iter().map(|r| answer(t, r, snap)).collect() };
        for (i, (req, got)) in reqs.iter().zip(got).enumerate() {
            let ctx = format!("{what}, round {round}, query {i}: {req:?}");
            let got = got.unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let want = expected(req, &s, model);
            if std::panic::catch_unwind(|| compare(&got, &want, &ctx)).is_err() {
                // What the supersede vectors say at the moment of the wrong answer.
                panic!("{ctx}: got {got:?} want {want:?}; marks check: {:?}", db.check_supersede_marks());
            }
        }
    }
}

/// Aggregates over key ranges only: they must run column by column, run by run, with no row
/// through the merge, and match the model. Where flushes left marking the slow tier to a
/// staging compaction (two tiers), they match the model through the merge first, then the tree
/// settles.
fn check_columnwise(db: &Db, t: &Table, model: &Model, snap: Option<&Snapshot>, rng: &mut StdRng, what: &str) {
    let s = t.schema().clone();
    if db.stats().tables[0].deferred_files > 0 {
        let req = ScanRequest::new()
            .with_aggregate(Aggregate::count_star())
            .with_aggregate(Aggregate::new(AggFunc::Max, "d"));
        let ctx = format!("{what}, with deferred marking: {req:?}");
        let got = answer(t, &req, snap).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        compare(&got, &expected(&req, &s, model), &ctx);
        db.wait_for_compactions().unwrap();
        assert_eq!(db.stats().tables[0].deferred_files, 0, "{ctx}: settling left deferred files");
    }
    for round in 0..8 {
        let mut req = random_request(rng, &s).with_shared(false);
        req.filter = None;
        if req.aggregates.is_empty() {
            req = req.with_aggregate(Aggregate::count_star()).with_aggregate(Aggregate::new(AggFunc::Max, "d"));
        }
        req.limit = None;
        // Partitions of earlier row scans whose reader stopped early may still be finishing a
        // batch on the scan pool: wait until they are done.
        let mut before = db.scan_stats();
        loop {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let now = db.scan_stats();
            if now.merged_rows == before.merged_rows && now.blocks_read == before.blocks_read {
                break;
            }
            before = now;
        }
        let ctx = format!("{what}, column-wise round {round}: {req:?}");
        let got = answer(t, &req, snap).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let after = db.scan_stats();
        compare(&got, &expected(&req, &s, model), &ctx);
        assert_eq!(after.merged_rows, before.merged_rows, "{ctx}: rows went through the merge");
        let took = (after.run_blocks + after.blocks_from_stats + after.blocks_skipped)
            - (before.run_blocks + before.blocks_from_stats + before.blocks_skipped);
        let empty = model.is_empty() || req.range.start != std::ops::Bound::Unbounded;
        assert!(took > 0 || empty, "{ctx}: the run-by-run path read nothing: {before:?} -> {after:?}");
    }
}

/// Inserts a row of random values with key `k` into `t` and the model.
fn insert_random(rng: &mut StdRng, t: &Table, s: &Schema, model: &mut Model, k: i64) {
    let row: Vec<Value> =
        s.columns().iter().map(|c| if c.name == "id" { Value::BigInt(k) } else { value(rng, c) }).collect();
    t.insert(&row).unwrap();
    model.insert(k, row);
}

/// A partial update of random columns of key `k` (a row or not) in `t` and the model.
fn update_random(rng: &mut StdRng, t: &Table, s: &Schema, model: &mut Model, k: i64) {
    let mut set = Vec::new();
    for c in s.columns().iter().skip(1) {
        if rng.gen_ratio(1, 3) {
            set.push((c.name.clone(), value(rng, c)));
        }
    }
    let pairs: Vec<(&str, Value)> = set.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    t.update(&[Value::BigInt(k)], &pairs).unwrap();
    if let Some(row) = model.get_mut(&k) {
        for (n, v) in set {
            row[s.column_index(&n).unwrap()] = v;
        }
    }
}

/// One random write over 3000 uniform keys: a full row, a partial update of random columns or
/// a delete, applied to `t` and `model` alike.
fn random_op(rng: &mut StdRng, t: &Table, s: &Schema, model: &mut Model) {
    let k = rng.gen_range(0..3000i64);
    match rng.gen_range(0..10) {
        0..=4 => insert_random(rng, t, s, model, k),
        5..=7 => update_random(rng, t, s, model, k),
        _ => {
            t.delete(&[Value::BigInt(k)]).unwrap();
            model.remove(&k);
        }
    }
}

/// `n` random writes (see [`random_op`]).
fn churn(rng: &mut StdRng, t: &Table, s: &Schema, model: &mut Model, n: usize) {
    for _ in 0..n {
        random_op(rng, t, s, model);
    }
}

/// The options of a table of layout `layout` (`<layout>+runs`: one run per group at every
/// level, as tables of builds before row-group files, instead of row-group files).
fn table_options(layout: &str, s: &Schema) -> TableOptions {
    let (layout, row_groups) = match layout.strip_suffix("+runs") {
        Some(l) => (l, false),
        None => (layout, true),
    };
    match layout_spec(layout, s) {
        Some(spec) => TableOptions::with_layout(&spec),
        None => TableOptions::default(),
    }
    .with_row_groups(row_groups)
}

/// `tiers`: the files on two tiers, the fast one with room for a fraction of them.
fn run(seed: u64, layout: &str, tiers: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let tiers = match tiers {
        true => vec![
            Tier::new("fast", tmp.path().join("fast")).with_budget(32 << 10),
            Tier::new("slow", tmp.path().join("slow")).with_profile(common::slow_device()),
        ],
        false => Vec::new(),
    };
    let opts = Options { block_size: 1024, tiers, ..common::tiny_options(Arc::new(OsFs)) };
    let db = Db::open(tmp.path(), opts.clone()).unwrap();
    let s = schema();
    let topts = table_options(layout, &s);
    let t = db.create_table("t", s.clone(), topts).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::new();
    let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
    churn(&mut rng, &t, &s, &mut model, 3000);
    snaps.push((db.snapshot(), model.clone()));
    churn(&mut rng, &t, &s, &mut model, 3000);
    snaps.push((db.snapshot(), model.clone()));
    churn(&mut rng, &t, &s, &mut model, 3000);
    check(&db, &t, &model, None, &mut rng, "churning");
    check_columnwise(&db, &t, &model, None, &mut rng, "churning");
    for (snap, m) in &snaps {
        check(&db, &t, m, Some(snap), &mut rng, "old snapshot while churning");
        check_columnwise(&db, &t, m, Some(snap), &mut rng, "old snapshot while churning");
    }
    snaps.clear();
    // A restart in the middle: the tree and its marks come back from the manifest (the Level-0
    // key sets do not: later flushes probe those files through their bloom filters).
    drop(t);
    db.close().unwrap();
    let db = Db::open(tmp.path(), opts.clone()).unwrap();
    let t = db.table("t").unwrap();
    check_columnwise(&db, &t, &model, None, &mut rng, "reopened");
    churn(&mut rng, &t, &s, &mut model, 2000);
    snaps.push((db.snapshot(), model.clone()));
    churn(&mut rng, &t, &s, &mut model, 2000);
    check(&db, &t, &model, None, &mut rng, "churning after a restart");
    check_columnwise(&db, &t, &model, None, &mut rng, "churning after a restart");
    for (snap, m) in &snaps {
        check(&db, &t, m, Some(snap), &mut rng, "snapshot taken after a restart");
        check_columnwise(&db, &t, m, Some(snap), &mut rng, "snapshot taken after a restart");
    }
    db.check_supersede_marks().unwrap_or_else(|e| panic!("{layout}: after a restart: {e}"));
    if !opts.tiers.is_empty() {
        // The answers above read the slow tier.
        let tiers = db.stats().tiers;
        assert!(tiers.len() == 2 && tiers[1].files > 0 && tiers[1].block_reads > 0, "{layout}: {tiers:?}");
    }
    snaps.clear();
    db.compact_range("t", &KeyRange::all()).unwrap();
    let before = db.scan_stats();
    check(&db, &t, &model, None, &mut rng, "fully compacted");
    let after = db.scan_stats();
    assert!(
        after.bulk_blocks + after.blocks_from_stats + after.blocks_skipped
            > before.bulk_blocks + before.blocks_from_stats + before.blocks_skipped,
        "the compacted tree is scanned in bulk: {before:?} -> {after:?}"
    );
    snaps.push((db.snapshot(), model.clone()));
    // Few enough to stay in the memtable (16 KiB): those keys are patched into bulk blocks.
    churn(&mut rng, &t, &s, &mut model, 60);
    let before = db.scan_stats();
    check(&db, &t, &model, None, &mut rng, "compacted, then updated");
    check_columnwise(&db, &t, &model, None, &mut rng, "compacted, then updated");
    let after = db.scan_stats();
    assert!(after.patched_keys > before.patched_keys, "memtable keys inside bulk blocks are resolved apart");
    for (snap, m) in &snaps {
        check(&db, &t, m, Some(snap), &mut rng, "snapshot of the compacted tree");
        check_columnwise(&db, &t, m, Some(snap), &mut rng, "snapshot of the compacted tree");
    }
}

/// A writer churns uniform keys through tiny memtables, so flushes and compactions (and the
/// supersede marks they make, including the catch-ups when one installs during the other) run
/// all the time; it publishes a snapshot with a copy of the model every few hundred writes.
/// Readers meanwhile scan at the newest and at old published snapshots, row-returning and
/// aggregating, partitioned and shared, and every answer must equal the model at its snapshot.
fn run_concurrent(seed: u64, layout: &str) {
    let tmp = tempfile::tempdir().unwrap();
    // A history window, so readers also scan as of past points no snapshot pinned.
    let history = Some(std::time::Duration::from_secs(3600));
    let opts = Options { block_size: 1024, history_retention: history, ..common::tiny_options(Arc::new(OsFs)) };
    let db = Db::open(tmp.path(), opts).unwrap();
    let s = schema();
    // `relayout`: rows at first, then a new layout after every round of writes.
    let relayout = layout == "relayout";
    let topts = table_options(if relayout { "row" } else { layout }, &s);
    let t = db.create_table("t", s.clone(), topts).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::new();
    churn(&mut rng, &t, &s, &mut model, 3000);
    let (stats0, scans0) = (db.stats(), db.scan_stats());
    let checked = scan_while_churning(&db, &t, (&s, relayout), rng, model, seed);
    let (stats1, scans1) = (db.stats(), db.scan_stats());
    println!(
        "{layout}: {} answers checked; {} flushes, {} compactions meanwhile",
        checked,
        stats1.flushes - stats0.flushes,
        stats1.compactions - stats0.compactions
    );
    assert!(stats1.flushes - stats0.flushes >= 10, "{layout}: too few flushes ran during the scans");
    assert!(stats1.compactions > stats0.compactions, "{layout}: no compaction ran during the scans");
    assert!(scans1.run_blocks > scans0.run_blocks, "{layout}: no scan took the run-by-run path");
    if relayout {
        assert!(stats1.relayouts > stats0.relayouts, "no file was rewritten into a new layout during the scans");
    }
    db.check_supersede_marks().unwrap_or_else(|e| panic!("{layout}: {e}"));
}

/// A writer churns (see [`churn`]) and publishes a snapshot with a copy of the model every 400
/// writes; two readers meanwhile scan at the newest and at older published snapshots,
/// row-returning and aggregating, with and without filters, and every answer must equal the
/// model at its snapshot. With `relayout`, the writer changes the table's layout after every
/// round (cg3, column, lifecycle, row in turn), so scans meet files half rewritten. Returns the
/// answers checked.
fn scan_while_churning(
    db: &Db,
    t: &Table,
    (s, relayout): (&Schema, bool),
    mut rng: StdRng,
    mut model: Model,
    seed: u64,
) -> u64 {
    type Published = Arc<(Snapshot, Model)>;
    let published: std::sync::Mutex<Vec<Published>> =
        std::sync::Mutex::new(vec![Arc::new((db.snapshot(), model.clone()))]);
    // Every point published, pinned or not: with a history window, readers scan as of them.
    let history = db.history().retention > std::time::Duration::ZERO;
    let past: std::sync::Mutex<Vec<Arc<(u64, Model)>>> = std::sync::Mutex::new(Vec::new());
    let done = std::sync::atomic::AtomicBool::new(false);
    let checked = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|sc| {
        let (published, past, done) = (&published, &past, &done);
        sc.spawn(move || {
            for round in 0..12 {
                churn(&mut rng, t, s, &mut model, 400);
                if relayout {
                    let spec = layout_spec(["cg3", "column", "lifecycle", "row"][round % 4], s);
                    db.set_layout("t", spec.as_deref()).unwrap();
                }
                let snap = db.snapshot();
                past.lock().unwrap().push(Arc::new((snap.seq(), model.clone())));
                let mut p = published.lock().unwrap();
                p.push(Arc::new((snap, model.clone())));
                if p.len() > 4 {
                    p.remove(0);
                }
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        for r in 0..2u64 {
            let checked = &checked;
            sc.spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ ((r + 1) * 0x9e37_79b9));
                let mut round = 0;
                while !done.load(std::sync::atomic::Ordering::SeqCst) || round < 4 {
                    round += 1;
                    let mut req = random_request(&mut rng, s);
                    if rng.gen_ratio(1, 2) {
                        req.filter = None;
                    }
                    let old = past.lock().unwrap().first().cloned().filter(|_| history && rng.gen_ratio(1, 3));
                    let (as_of, oldest, pinned);
                    let (snap, m, what) = match old {
                        // The oldest point published (long unpinned), as of its sequence number.
                        Some(o) => {
                            as_of = db.snapshot_as_of(AsOf::Seq(o.0)).unwrap();
                            oldest = o;
                            (&as_of, &oldest.1, "as of")
                        }
                        None => {
                            let p = published.lock().unwrap();
                            // The newest, or any older one.
                            pinned = if rng.gen_ratio(1, 2) {
                                p[p.len() - 1].clone()
                            } else {
                                p[rng.gen_range(0..p.len())].clone()
                            };
                            (&pinned.0, &pinned.1, "snapshot")
                        }
                    };
                    let ctx = format!("reader {r}, round {round}, {what} {}: {req:?}", snap.seq());
                    let got = answer(t, &req, Some(snap)).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                    compare(&got, &expected(&req, s, m), &ctx);
                    checked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    published.lock().unwrap().clear();
    checked.load(std::sync::atomic::Ordering::Relaxed)
}

#[test]
fn scans_during_flushes_and_compactions_match_the_model() {
    for layout in ["row", "column", "cg3", "relayout", "lifecycle+runs"] {
        for seed in seeds(&[31]) {
            println!("layout {layout}, seed {seed}");
            with_seed(seed, |s| run_concurrent(s, layout));
        }
    }
}

#[test]
fn pushdown_matches_a_plain_filter_and_aggregate() {
    for layout in ["row", "column", "cg3", "lifecycle", "column+runs", "lifecycle+runs"] {
        for seed in seeds(&[11, 12]) {
            println!("layout {layout}, seed {seed}");
            with_seed(seed, |s| run(s, layout, false));
        }
    }
}

/// The same with the files on two tiers, most of them on the slow one.
#[test]
fn pushdown_matches_with_two_tiers() {
    for layout in ["row", "cg3", "cg3+runs"] {
        for seed in seeds(&[13]) {
            println!("layout {layout}, seed {seed}, two tiers");
            with_seed(seed, |s| run(s, layout, true));
        }
    }
}

#[test]
fn concurrent_shared_scans_read_the_data_once() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        block_cache_size: 64 << 20,
        shared_scan_window: std::time::Duration::from_millis(300),
        ..Options::default()
    };
    let db = Db::open(tmp.path(), opts).unwrap();
    let s = schema();
    let t = db.create_table("t", s.clone(), TableOptions::default()).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut model = Model::new();
    for k in 0..20_000i64 {
        let row: Vec<Value> =
            s.columns().iter().map(|c| if c.name == "id" { Value::BigInt(k) } else { value(&mut rng, c) }).collect();
        t.insert(&row).unwrap();
        model.insert(k, row);
    }
    db.compact_range("t", &KeyRange::all()).unwrap();
    let reqs = [
        ScanRequest::new().with_aggregate(Aggregate::new(AggFunc::Max, "small")),
        ScanRequest::new()
            .with_filter(Expr::cmp("i", CmpOp::Gt, Value::Int(0)))
            .with_aggregate(Aggregate::count_star()),
        ScanRequest::new().with_columns(&["id", "s"]).with_filter(Expr::cmp("small", CmpOp::Lt, Value::Int(-10))),
        ScanRequest::new()
            .with_range(KeyRange::half_open(vec![Value::BigInt(5000)], vec![Value::BigInt(9000)]))
            .with_filter(Expr::cmp("flag", CmpOp::Eq, Value::Boolean(true)))
            .with_aggregate(Aggregate::new(AggFunc::Sum, "d")),
    ]
    .map(|r| r.with_block_stats(false));
    let before = db.scan_stats();
    for r in &reqs {
        compare(&answer(&t, r, None).unwrap(), &expected(r, &s, &model), &format!("solo {r:?}"));
    }
    let solo = db.scan_stats();
    let shared_reqs: Vec<ScanRequest> = reqs.iter().map(|r| r.clone().with_shared(true)).collect();
    let got: Vec<_> = answer_together(&t, &shared_reqs, None).into_iter().map(Result::unwrap).collect();
    let shared = db.scan_stats();
    for (r, g) in reqs.iter().zip(&got) {
        compare(g, &expected(r, &s, &model), &format!("shared {r:?}"));
    }
    let solo_blocks = solo.blocks_read - before.blocks_read;
    let shared_blocks = shared.blocks_read - solo.blocks_read;
    println!("blocks read: 4 solo scans {solo_blocks}, 4 shared scans {shared_blocks}");
    assert_eq!((shared.scans - solo.scans, shared.passes - solo.passes), (4, 1), "{solo:?} -> {shared:?}");
    assert!(shared_blocks > 0 && shared_blocks * 3 < solo_blocks, "solo {solo_blocks}, shared {shared_blocks}");
}

#[test]
fn composite_keys_come_back_from_bulk_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Db::open(tmp.path(), common::tiny_options(Arc::new(OsFs))).unwrap();
    let s = Schema::new(
        vec![
            Column::new("name", ColumnType::Text),
            Column::new("n", ColumnType::Int),
            Column::new("v", ColumnType::BigInt),
        ],
        &["name", "n"],
    )
    .unwrap();
    let t = db.create_table("c", s, TableOptions::with_layout("L1-: column")).unwrap();
    let mut want = Vec::new();
    for i in 0..3000i64 {
        let row = vec![Value::Text(format!("k{:04}", i / 10)), Value::Int((i % 10) as i32), Value::BigInt(i * 3)];
        t.insert(&row).unwrap();
        if i % 7 == 0 {
            want.push(row);
        }
    }
    db.compact_range("c", &KeyRange::all()).unwrap();
    let before = db.scan_stats();
    let req = ScanRequest::new()
        .with_filter(Expr::cmp("v", CmpOp::NotEq, Value::Int(-1)))
        .with_columns(&["name", "n", "v"])
        .with_partitions(2);
    let mut got: Vec<Vec<Value>> = answer(&t, &req, None).unwrap();
    got.retain(|r| matches!(r[2], Value::BigInt(v) if (v / 3) % 7 == 0));
    assert_eq!(got, want);
    assert!(db.scan_stats().bulk_blocks > before.bulk_blocks);
}

/// A database in `dir` with tiny options and a table `t (k BIGINT, a INT, b INT)` of columns
/// in row-group files from Level 1 down (512-byte blocks and an 8-byte key: key pages of 64 rows).
fn key_page_table(dir: &std::path::Path) -> (Db, Table) {
    let db = Db::open(dir, common::tiny_options(Arc::new(OsFs))).unwrap();
    let s = Schema::new(
        vec![
            Column::new("k", ColumnType::BigInt),
            Column::new("a", ColumnType::Int),
            Column::new("b", ColumnType::Int),
        ],
        &["k"],
    )
    .unwrap();
    let t = db.create_table("t", s, TableOptions::with_layout("L1-: column")).unwrap();
    (db, t)
}

/// A row-group file cuts key pages at fixed row counts, so a key's versions may go on from one
/// key page into the next, which then starts with an older version superseded within the file:
/// every path (column by column, bulk, merge; one partition or several; filtered or not) reads
/// the key once, now and at a snapshot between the versions.
#[test]
fn a_keys_versions_across_key_pages_are_read_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, t) = key_page_table(tmp.path());
    let row = |k: i64, v: i32| vec![Value::BigInt(k), Value::Int(v), Value::Int(-v)];
    for k in 0..200 {
        t.insert(&row(k, 1)).unwrap();
    }
    let old = db.snapshot();
    // Key 63's two versions land at ordinals 63 and 64: the end of the first key page and the
    // start of the second.
    t.insert(&row(63, 2)).unwrap();
    db.compact_range("t", &KeyRange::all()).unwrap();
    let filters = [None, Some(Expr::cmp("b", CmpOp::Lt, Value::Int(0)))];
    for (snap, a63) in [(None, 2i32), (Some(&old), 1)] {
        let variants = filters.iter().flat_map(|f| [(f, 1, false), (f, 3, false), (f, 1, true), (f, 3, true)]);
        for (filter, partitions, stats) in variants {
            let at = format!(
                "{}, filter {filter:?}, {partitions} partitions, block stats {stats}",
                if snap.is_some() { "old snapshot" } else { "now" }
            );
            let mut count = ScanRequest::new()
                .with_aggregate(Aggregate::count_star())
                .with_aggregate(Aggregate::new(AggFunc::Max, "a"))
                .with_partitions(partitions)
                .with_block_stats(stats);
            let mut all = ScanRequest::new().with_columns(&["k", "a"]).with_partitions(partitions);
            if let Some(f) = filter {
                count = count.with_filter(f.clone());
                all = all.with_filter(f.clone());
            }
            let got = answer(&t, &count, snap).unwrap();
            assert_eq!(got, vec![vec![Value::BigInt(200), Value::Int(a63)]], "count and max, {at}");
            let rows = answer(&t, &all, snap).unwrap();
            let want: Vec<Vec<Value>> =
                (0..200).map(|k| vec![Value::BigInt(k), Value::Int(if k == 63 { a63 } else { 1 })]).collect();
            assert_eq!(rows, want, "rows, {at}");
        }
    }
    assert!(db.scan_stats().bulk_blocks > 0, "the bulk path was taken");
}

/// A flush marks every version of a key it supersedes in a row-group file, also those on the
/// next key page when the key's versions go on there: keys with two partial rows each (kept
/// apart by a snapshot) in a Level-1 file over their full rows at the bottom, some split across
/// key pages, are deleted, and the deletes mark both partial rows and the full row, so the
/// column-by-column aggregates count no deleted key.
#[test]
fn a_flush_marks_a_keys_versions_on_the_next_key_page() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, t) = key_page_table(tmp.path());
    for k in 0..300 {
        t.insert(&[Value::BigInt(k), Value::Int(1), Value::Int(1)]).unwrap();
    }
    db.compact_range("t", &KeyRange::all()).unwrap();
    // Key 0 gets one partial row and keys 1..=128 two each, a snapshot between: in the Level-1
    // file their compaction writes, key k's lie at ordinals 2k - 1 and 2k, so pages cut at any
    // multiple of 64 rows up to 256 split one key's partial rows.
    let updated = 1..=128i64;
    t.update(&[Value::BigInt(0)], &[("a", Value::Int(2))]).unwrap();
    for k in updated.clone() {
        t.update(&[Value::BigInt(k)], &[("a", Value::Int(2))]).unwrap();
    }
    db.flush().unwrap();
    let old = db.snapshot();
    for k in updated.clone() {
        t.update(&[Value::BigInt(k)], &[("a", Value::Int(3))]).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    assert!(db.stats().tables[0].levels[1..5].iter().any(|l| l.entries == 257), "{:?}", db.stats().tables[0].levels);
    for k in updated.clone() {
        t.delete(&[Value::BigInt(k)]).unwrap();
    }
    db.flush().unwrap();
    db.check_supersede_marks().unwrap();
    let n = updated.count() as i64;
    let aggs = ScanRequest::new()
        .with_aggregate(Aggregate::count_star())
        .with_aggregate(Aggregate::new(AggFunc::Sum, "a"))
        .with_aggregate(Aggregate::new(AggFunc::Sum, "b"));
    let live = 300 - n;
    assert_eq!(
        answer(&t, &aggs, None).unwrap(),
        vec![vec![Value::BigInt(live), Value::BigInt(live + 1), Value::BigInt(live)]]
    );
    assert_eq!(
        answer(&t, &aggs, Some(&old)).unwrap(),
        vec![vec![Value::BigInt(300), Value::BigInt(300 + n + 1), Value::BigInt(300)]]
    );
}

/// A min or max that a block's bounds cannot improve passes over the block, but not over a
/// memtable partial row patching a live version there with a value the aggregate takes.
#[test]
fn min_and_max_pass_over_blocks_but_not_over_patches_that_beat_them() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options { block_size: 512, ..common::tiny_options(Arc::new(OsFs)) };
    let db = Db::open(tmp.path(), opts).unwrap();
    let s = Schema::new(vec![Column::new("id", ColumnType::BigInt), Column::new("v", ColumnType::BigInt)], &["id"])
        .unwrap();
    let t = db.create_table("m", s, TableOptions::with_layout("L1-: column")).unwrap();
    // The extremes sit in the first block (key 0), so every later block cannot improve them.
    for i in 0..2000i64 {
        t.insert(&[Value::BigInt(i), Value::BigInt(if i == 0 { 5000 } else { 1000 + i % 100 })]).unwrap();
    }
    t.insert(&[Value::BigInt(1), Value::BigInt(-5000)]).unwrap();
    db.compact_range("m", &KeyRange::all()).unwrap();
    let req = || {
        ScanRequest::new()
            .with_aggregate(Aggregate::new(AggFunc::Max, "v"))
            .with_aggregate(Aggregate::new(AggFunc::Min, "v"))
    };
    let run = |want: [i64; 2], what: &str| {
        let before = db.scan_stats();
        let got = answer(&t, &req(), None).unwrap();
        assert_eq!(got, vec![vec![Value::BigInt(want[0]), Value::BigInt(want[1])]], "{what}");
        let after = db.scan_stats();
        assert_eq!(after.merged_rows, before.merged_rows, "{what}: rows went through the merge");
        after.blocks_read - before.blocks_read
    };
    // Nothing newer: later blocks are answered from their zone maps.
    run([5000, -5000], "compacted");
    // Patches inside later blocks that cannot beat the extremes: those blocks are still passed
    // over.
    t.update(&[Value::BigInt(1500)], &[("v", Value::BigInt(1200))]).unwrap();
    t.update(&[Value::BigInt(1700)], &[("v", Value::BigInt(900))]).unwrap();
    let looked_up = db.scan_stats().patched_keys;
    assert_eq!(run([5000, -5000], "patches that change nothing"), 0, "blocks were read");
    // The memtables' bounds said so: their keys were not even looked up.
    assert_eq!(db.scan_stats().patched_keys, looked_up, "memtable keys were resolved");
    // Patches that beat them must be read (their keys have live versions there).
    t.update(&[Value::BigInt(1600)], &[("v", Value::BigInt(9000))]).unwrap();
    assert!(run([9000, -5000], "a patch beating the max") > 0, "the patched block was not read");
    t.update(&[Value::BigInt(1800)], &[("v", Value::BigInt(-9000))]).unwrap();
    run([9000, -9000], "a patch beating the min");
    // A partial row over a key with no row changes nothing, even with a value that would win.
    t.update(&[Value::BigInt(5000)], &[("v", Value::BigInt(99_999))]).unwrap();
    run([9000, -9000], "a patch over no row");
}

/// Sums of several columns over a range whose blocks nearly all hold memtable keys: the first
/// blocks' keys are resolved block by block, the rest taken from the keys resolved over the whole
/// range once, shared by every column's chain. Partial rows, deletes, whole rows over existing
/// keys and new keys between the blocks' rows all count, and only inside the range.
#[test]
fn sums_over_blocks_that_all_hold_memtable_keys() {
    for seed in seeds(&[31, 32]) {
        with_seed(seed, sums_with_memtable_keys_everywhere);
    }
}

fn sums_with_memtable_keys_everywhere(seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options { block_size: 512, memtable_size: 64 << 20, ..common::tiny_options(Arc::new(OsFs)) };
    let db = Db::open(tmp.path(), opts).unwrap();
    let names = ["a", "b", "c"];
    let mut cols = vec![Column::not_null("id", ColumnType::BigInt)];
    cols.extend(names.iter().map(|n| Column::new(*n, ColumnType::BigInt)));
    let t =
        db.create_table("s", Schema::new(cols, &["id"]).unwrap(), TableOptions::with_layout("L1-: column")).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model: BTreeMap<i64, [i64; 3]> = BTreeMap::new();
    let row = |k: i64, v: [i64; 3]| [Value::BigInt(k), Value::BigInt(v[0]), Value::BigInt(v[1]), Value::BigInt(v[2])];
    // Even keys, so new rows fall between a block's rows.
    for k in (0..8000i64).step_by(2) {
        let v = [rng.gen_range(-1000..1000), rng.gen_range(0..10), rng.gen_range(-5..5)];
        t.insert(&row(k, v)).unwrap();
        model.insert(k, v);
    }
    db.compact_range("s", &KeyRange::all()).unwrap();
    // About one memtable key per 8 stored rows: every block of the range holds some.
    for _ in 0..600 {
        let k = rng.gen_range(0..8000i64);
        match rng.gen_range(0..8) {
            0 => {
                t.delete(&[Value::BigInt(k)]).unwrap();
                model.remove(&k);
            }
            1 => {
                let v = [rng.gen_range(-1000..1000), rng.gen_range(0..10), rng.gen_range(-5..5)];
                t.insert(&row(k, v)).unwrap();
                model.insert(k, v);
            }
            _ => {
                let c = rng.gen_range(0..3);
                let x = rng.gen_range(-3000..3000);
                t.update(&[Value::BigInt(k)], &[(names[c], Value::BigInt(x))]).unwrap();
                if let Some(v) = model.get_mut(&k) {
                    v[c] = x;
                }
            }
        }
    }
    for (lo, hi) in [(0, 8000), (1001, 6999), (3000, 3100)] {
        let mut req = ScanRequest::new()
            .with_range(KeyRange::half_open(vec![Value::BigInt(lo)], vec![Value::BigInt(hi)]))
            .with_aggregate(Aggregate::count_star());
        for n in names {
            req = req.with_aggregate(Aggregate::new(AggFunc::Sum, n));
        }
        let inside: Vec<&[i64; 3]> = model.range(lo..hi).map(|(_, v)| v).collect();
        let mut want = vec![Value::BigInt(inside.len() as i64)];
        want.extend((0..3).map(|c| Value::BigInt(inside.iter().map(|v| v[c]).sum())));
        let before = db.scan_stats();
        assert_eq!(answer(&t, &req, None).unwrap(), vec![want], "seed {seed}, keys [{lo}, {hi})");
        let after = db.scan_stats();
        assert_eq!(after.merged_rows, before.merged_rows, "seed {seed}: rows went through the merge");
    }
}

/// A compacted table with writes in the memtables only: partial updates (with NULLs), deletes,
/// rewrites, and whole rows of keys the blocks lack. Filtered aggregates and row scans read the
/// blocks in bulk with the memtables' versions laid over their rows, match the model, and —
/// while the memtables hold only partial rows and deletes — send no row through the merge. After
/// a restart (which flushes the log's writes to Level-0) the answers still match.
#[test]
fn scans_lay_memtable_versions_over_bulk_blocks() {
    for layout in ["row", "column", "cg3", "column+runs"] {
        for seed in seeds(&[21, 22]) {
            println!("layout {layout}, seed {seed}");
            with_seed(seed, |seed| memtable_over_bulk_blocks(seed, layout));
        }
    }
}

fn memtable_over_bulk_blocks(seed: u64, layout: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let opts = || Options { block_size: 1024, memtable_size: 64 << 20, ..common::tiny_options(Arc::new(OsFs)) };
    let mut db = Db::open(tmp.path(), opts()).unwrap();
    let s = schema();
    let mut t = db.create_table("t", s.clone(), table_options(layout, &s)).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::new();
    // Even keys only, so whole rows of odd keys fall between a block's rows.
    for k in 0..3000i64 {
        insert_random(&mut rng, &t, &s, &mut model, 2 * k);
    }
    db.compact_range("t", &KeyRange::all()).unwrap();
    let check_all = |db: &Db, t: &Table, model: &Model, rng: &mut StdRng, what: &str, merge_free: bool| {
        check_bulk(db, t, &s, model, rng, &format!("{layout}, seed {seed}, {what}"), merge_free)
    };
    // Partial rows (some over keys with no row) and deletes.
    for _ in 0..600 {
        let k = rng.gen_range(0..6000i64);
        if rng.gen_ratio(1, 8) {
            t.delete(&[Value::BigInt(k)]).unwrap();
            model.remove(&k);
        } else {
            update_random(&mut rng, &t, &s, &mut model, k);
        }
    }
    let before = db.scan_stats();
    check_all(&db, &t, &model, &mut rng, "partial rows and deletes", true);
    let after = db.scan_stats();
    assert!(after.bulk_blocks > before.bulk_blocks, "no block was read in bulk: {before:?} -> {after:?}");
    assert!(after.patched_keys > before.patched_keys, "no memtable key was laid over a block: {after:?}");
    // Whole rows: rewrites of keys the blocks hold, and new odd keys between their rows.
    for _ in 0..200 {
        let k = rng.gen_range(0..6000i64);
        insert_random(&mut rng, &t, &s, &mut model, k);
        let u = rng.gen_range(0..6000i64);
        update_random(&mut rng, &t, &s, &mut model, u);
    }
    check_all(&db, &t, &model, &mut rng, "whole rows too", false);
    // A restart flushes the log's writes to Level-0; then new writes fill a fresh memtable.
    drop(t);
    db.close().unwrap();
    db = Db::open(tmp.path(), opts()).unwrap();
    t = db.table("t").unwrap();
    check_all(&db, &t, &model, &mut rng, "after a restart", false);
    for _ in 0..300 {
        let k = rng.gen_range(0..6000i64);
        update_random(&mut rng, &t, &s, &mut model, k);
    }
    check_all(&db, &t, &model, &mut rng, "after a restart, with new partial rows", false);
}

/// Requests the bulk-path tests ask: a max over the whole table, a filtered max and count, rows
/// by a filter on one column and on another with a projection, and a text equality.
fn bulk_requests() -> Vec<ScanRequest> {
    vec![
        ScanRequest::new().with_aggregate(Aggregate::new(AggFunc::Max, "small")),
        ScanRequest::new()
            .with_filter(Expr::cmp("d", CmpOp::Gt, Value::Double(0.0)).and(Expr::cmp(
                "d",
                CmpOp::Lt,
                Value::Double(20.0),
            )))
            .with_aggregate(Aggregate::new(AggFunc::Max, "small"))
            .with_aggregate(Aggregate::count_star()),
        ScanRequest::new().with_filter(Expr::cmp("big", CmpOp::Gt, Value::BigInt(0))),
        ScanRequest::new().with_filter(Expr::cmp("i", CmpOp::LtEq, Value::Int(-10))).with_columns(&["id", "s", "i"]),
        ScanRequest::new().with_filter(Expr::cmp("s", CmpOp::Eq, Value::Text("abc".into()))),
    ]
}

/// Runs [`bulk_requests`] and 12 random requests against the model; with `merge_free`, checks
/// that no row of them went through the per-row merge.
fn check_bulk(db: &Db, t: &Table, s: &Schema, model: &Model, rng: &mut StdRng, what: &str, merge_free: bool) {
    let random: Vec<ScanRequest> = (0..12).map(|_| random_request(rng, s)).collect();
    for (i, req) in bulk_requests().into_iter().chain(random).enumerate() {
        let req = req.with_shared(false);
        let before = db.scan_stats();
        let ctx = format!("{what}, query {i}: {req:?}");
        let got = answer(t, &req, None).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        compare(&got, &expected(&req, s, model), &ctx);
        let after = db.scan_stats();
        if merge_free && req.limit.is_none() {
            assert_eq!(after.merged_rows, before.merged_rows, "{ctx}: rows went through the merge");
        }
    }
}

#[test]
fn scans_lay_level0_and_upper_level_versions_over_bulk_blocks() {
    for layout in ["row", "column", "cg3", "column+runs"] {
        for seed in seeds(&[31, 32]) {
            println!("layout {layout}, seed {seed}");
            with_seed(seed, |seed| upper_runs_over_bulk_blocks(seed, layout));
        }
    }
}

/// Blocks of the deepest level overlapped by Level-0 files (and, after their compaction, by a
/// shallower level) are read in bulk with those files' keys laid over them, like memtable keys:
/// partial rows and deletes flushed to Level-0 leave no row to the per-row merge, and answers
/// match the model with memtable versions on top, at a snapshot, and with whole rows between a
/// block's keys.
fn upper_runs_over_bulk_blocks(seed: u64, layout: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options { block_size: 1024, memtable_size: 64 << 20, ..common::tiny_options(Arc::new(OsFs)) };
    let db = Db::open(tmp.path(), opts).unwrap();
    let s = schema();
    let t = db.create_table("t", s.clone(), table_options(layout, &s)).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::new();
    // Even keys only, so whole rows of odd keys fall between a block's rows.
    for k in 0..3000i64 {
        insert_random(&mut rng, &t, &s, &mut model, 2 * k);
    }
    db.compact_range("t", &KeyRange::all()).unwrap();
    let ctx = |what: &str| format!("{layout}, seed {seed}, {what}");
    let partial_rows_and_deletes = |rng: &mut StdRng, model: &mut Model, n: usize| {
        for _ in 0..n {
            let k = rng.gen_range(0..6000i64);
            if rng.gen_ratio(1, 8) {
                t.delete(&[Value::BigInt(k)]).unwrap();
                model.remove(&k);
            } else {
                update_random(rng, &t, &s, model, k);
            }
        }
    };
    partial_rows_and_deletes(&mut rng, &mut model, 600);
    db.flush().unwrap();
    let before = db.scan_stats();
    check_bulk(&db, &t, &s, &model, &mut rng, &ctx("Level-0 partial rows and deletes"), true);
    let after = db.scan_stats();
    assert!(after.run_patched_blocks > before.run_patched_blocks, "no block took Level-0's keys: {after:?}");
    // Memtable versions over Level-0's over the blocks; a snapshot taken here.
    partial_rows_and_deletes(&mut rng, &mut model, 300);
    check_bulk(&db, &t, &s, &model, &mut rng, &ctx("memtable over Level-0"), true);
    let snap = db.snapshot();
    let at_snap = model.clone();
    // Whole rows: rewrites of keys the blocks hold and new odd keys between their rows; a second
    // flush, which lets Level-0 compact into a shallower level.
    for _ in 0..200 {
        let k = rng.gen_range(0..6000i64);
        insert_random(&mut rng, &t, &s, &mut model, k);
    }
    partial_rows_and_deletes(&mut rng, &mut model, 200);
    db.flush().unwrap();
    check_bulk(&db, &t, &s, &model, &mut rng, &ctx("whole rows, two flushes"), false);
    // Rows out, with new keys between nearly every block's rows: once a block's runs above held
    // such a row, the pass merges the blocks they overlap instead of resolving their keys first.
    let before = db.scan_stats();
    let all = ScanRequest::new().with_shared(false);
    compare(&answer(&t, &all, None).unwrap(), &expected(&all, &s, &model), &ctx("every row"));
    let after = db.scan_stats();
    let patched = after.run_patched_blocks - before.run_patched_blocks;
    assert!(patched <= 10, "{}: {patched} blocks resolved the runs' keys, then merged", ctx("every row"));
    assert!(after.merged_rows > before.merged_rows, "{}: nothing was merged", ctx("every row"));
    for (i, req) in bulk_requests().into_iter().map(|r| r.with_shared(false)).enumerate() {
        let what = ctx(&format!("at the snapshot, query {i}: {req:?}"));
        let got = answer(&t, &req, Some(&snap)).unwrap_or_else(|e| panic!("{what}: {e}"));
        compare(&got, &expected(&req, &s, &at_snap), &what);
    }
}

/// A shared pass can answer one member's aggregate from a block's zone maps while another
/// member needs the block's rows, and then find that the driving level's groups do not line up
/// there (one group holds two versions of some keys): the stretch goes through the merge, which
/// feeds every member, so the zone answer must not have been taken as well.
#[test]
fn a_shared_pass_reading_a_block_through_the_merge_takes_no_zone_answer_for_it() {
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options { shared_scan_window: std::time::Duration::from_millis(300), ..Options::default() };
    let db = Db::open(tmp.path(), opts).unwrap();
    let cols = ["id", "a", "b", "c", "d"]
        .map(|n| Column::new(n, if n == "id" { ColumnType::BigInt } else { ColumnType::Int }));
    let s = Schema::new(cols.to_vec(), &["id"]).unwrap();
    let t = db.create_table("t", s, TableOptions::with_layout("L1-: (a,b) (c,d)")).unwrap();
    let n = 5000i64;
    for k in 0..n {
        t.insert(&[Value::BigInt(k), Value::Int(1), Value::Int(2), Value::Int(3), Value::Int(4)]).unwrap();
    }
    db.compact_range("t", &KeyRange::all()).unwrap();
    // A snapshot keeps the old value of `d` under every fifth key's update, so after compacting,
    // the (c, d) group holds two versions of those keys where (a, b) holds one.
    let snap = db.snapshot();
    for k in (0..n).step_by(5) {
        t.update(&[Value::BigInt(k)], &[("d", Value::Int(40))]).unwrap();
    }
    db.compact_range("t", &KeyRange::all()).unwrap();
    let count = ScanRequest::new().with_aggregate(Aggregate::count_star());
    // Reads `a` (the driving group, zone maps say every row passes) and `d` (the other group).
    let sum = ScanRequest::new()
        .with_filter(Expr::cmp("a", CmpOp::GtEq, Value::Int(0)))
        .with_aggregate(Aggregate::new(AggFunc::Sum, "d"));
    let reqs = [count.with_shared(true), sum.with_shared(true)];
    let before = db.scan_stats();
    let got: Vec<Vec<Vec<Value>>> = answer_together(&t, &reqs, None).into_iter().map(Result::unwrap).collect();
    let after = db.scan_stats();
    assert_eq!(after.passes - before.passes, 1, "one shared pass: {before:?} -> {after:?}");
    assert!(after.merged_rows > before.merged_rows, "the unaligned blocks went through the merge: {after:?}");
    let updated = (n + 4) / 5;
    assert_eq!(got[0], vec![vec![Value::BigInt(n)]], "count(*)");
    assert_eq!(got[1], vec![vec![Value::BigInt(4 * (n - updated) + 40 * updated)]], "sum(d)");
    drop(snap);
}

/// The same requests on a lineage table: rows inserted in key order (read range by range, by
/// position) or not (rows in key order through the primary index; aggregates by position),
/// at old snapshots and the newest state, across merges and a restart.
fn run_lineage(seed: u64, sorted: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options { block_size: 1024, ..common::tiny_options(Arc::new(OsFs)) };
    let db = Db::open(tmp.path(), opts.clone()).unwrap();
    let s = schema();
    let t = db.create_table("t", s.clone(), TableOptions::engine(Engine::Lineage)).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::new();
    if sorted {
        for k in 0..3000i64 {
            insert_random(&mut rng, &t, &s, &mut model, k);
        }
    }
    let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
    for i in 0..3 {
        churn(&mut rng, &t, &s, &mut model, 3000);
        snaps.push((db.snapshot(), model.clone()));
        if sorted && i == 1 {
            // Keys below every loaded one: from here on RID order is not key order, but reads
            // at the snapshots taken before still find it is.
            for k in [-5i64, -3, -4] {
                insert_random(&mut rng, &t, &s, &mut model, k);
            }
        }
    }
    check(&db, &t, &model, None, &mut rng, "churning");
    for (snap, m) in &snaps {
        check(&db, &t, m, Some(snap), &mut rng, "old snapshot while churning");
    }
    snaps.clear();
    drop(t);
    db.close().unwrap();
    let db = Db::open(tmp.path(), opts).unwrap();
    let t = db.table("t").unwrap();
    check(&db, &t, &model, None, &mut rng, "reopened");
    churn(&mut rng, &t, &s, &mut model, 2000);
    snaps.push((db.snapshot(), model.clone()));
    churn(&mut rng, &t, &s, &mut model, 2000);
    check(&db, &t, &model, None, &mut rng, "churning after a restart");
    for (snap, m) in &snaps {
        check(&db, &t, m, Some(snap), &mut rng, "snapshot taken after a restart");
    }
    let st = db.stats();
    let l = st.tables[0].lineage.as_ref().unwrap();
    assert!(l.merges > 0, "no merge ran: {l:?}");
}

#[test]
fn lineage_scans_match_the_model() {
    for sorted in [true, false] {
        for seed in seeds(&[41, 42]) {
            println!("sorted {sorted}, seed {seed}");
            with_seed(seed, |s| run_lineage(s, sorted));
        }
    }
}

/// A writer updates a lineage table while the merge thread folds its tail records and readers
/// scan at the newest and at old published snapshots: every answer equals the model there.
/// With a history window, readers also scan as of long-unpinned points.
#[test]
fn lineage_scans_during_merges_match_the_model() {
    let seed = seeds(&[43])[0];
    for history in [None, Some(std::time::Duration::from_secs(3600))] {
        let tmp = tempfile::tempdir().unwrap();
        let opts = Options { history_retention: history, ..common::tiny_options(Arc::new(OsFs)) };
        let db = Db::open(tmp.path(), opts).unwrap();
        let s = schema();
        let t = db.create_table("t", s.clone(), TableOptions::engine(Engine::Lineage)).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut model = Model::new();
        churn(&mut rng, &t, &s, &mut model, 3000);
        let before = db.stats().tables[0].lineage.clone().unwrap();
        let checked = scan_while_churning(&db, &t, (&s, false), rng, model, seed);
        let after = db.stats().tables[0].lineage.clone().unwrap();
        let (merges, reclaims) = (after.merges - before.merges, after.reclaimed_ranges);
        println!("history {history:?}: {checked} answers checked; {merges} merges, {reclaims} ranges reclaimed");
        assert!(merges >= 10, "too few merges ran during the scans");
    }
}

/// Zone maps of lineage base pages: a selective filter skips the ranges whose pages (widened by
/// the values of tail records not merged yet) rule it out, and answers stay right as updates
/// move values into and out of the filter, at the newest state and at an older snapshot.
#[test]
fn lineage_zone_maps_skip_ranges_and_stay_right() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Db::open(tmp.path(), common::tiny_options(Arc::new(OsFs))).unwrap();
    let s = Schema::new(vec![Column::not_null("id", ColumnType::BigInt), Column::new("a", ColumnType::Int)], &["id"])
        .unwrap();
    let t = db.create_table("z", s, TableOptions::engine(Engine::Lineage)).unwrap();
    let n = 2048; // 32 ranges of 64
    for i in 0..n {
        t.insert(&[Value::BigInt(i), Value::Int(i as i32)]).unwrap();
    }
    let count = |db: &Db, ro: &ReadOptions<'_>| -> (i64, u64) {
        let skipped = db.scan_stats().ranges_skipped;
        let req = ScanRequest::new()
            .with_filter(Expr::cmp("a", CmpOp::GtEq, Value::Int(1900)))
            .with_aggregate(Aggregate::count_star());
        let rows: Vec<Vec<Value>> = t.scan_batches(&req, ro).unwrap().flat_map(|b| batch_rows(&b.unwrap())).collect();
        let Value::BigInt(c) = rows[0][0] else { panic!("{rows:?}") };
        (c, db.scan_stats().ranges_skipped - skipped)
    };
    // Wait for the merge thread to seal every full range.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while db.stats().tables[0].lineage.as_ref().unwrap().merge_lag > 0 || count(&db, &Default::default()).1 < 25 {
        assert!(std::time::Instant::now() < deadline, "ranges never sealed: {:?}", db.stats().tables[0].lineage);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (c, skipped) = count(&db, &Default::default());
    assert_eq!(c, 148);
    assert!(skipped >= 25, "only {skipped} ranges skipped");
    // Updates move rows of early ranges into the filter and late rows out of it; whether merged
    // yet or not, the answer follows.
    let before = db.snapshot();
    db.hold_lineage_merges(true);
    for i in (0..n).step_by(100) {
        t.update(&[Value::BigInt(i)], &[("a", Value::Int(5000))]).unwrap();
    }
    t.update(&[Value::BigInt(1999)], &[("a", Value::Int(-1))]).unwrap();
    t.delete(&[Value::BigInt(2000)]).unwrap();
    let moved_in = (0..n).step_by(100).filter(|&i| i < 1900).count() as i64;
    let want = 148 + moved_in - 2;
    assert_eq!(count(&db, &Default::default()).0, want, "unmerged");
    assert_eq!(count(&db, &ReadOptions { snapshot: Some(&before) }).0, 148, "at the old snapshot, unmerged");
    db.hold_lineage_merges(false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while db.stats().tables[0].lineage.as_ref().unwrap().merge_lag > 0 {
        assert!(std::time::Instant::now() < deadline, "merges never caught up");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(count(&db, &Default::default()).0, want, "merged");
    assert_eq!(count(&db, &ReadOptions { snapshot: Some(&before) }).0, 148, "at the old snapshot, merged");
}

/// The scan pool serves every scan of the database, and a reader may leave one partitioned scan
/// undrained until another has finished (a hash join reads its probe side only after its build
/// side). Partitions waiting for their reader must give their pool threads back, or the second
/// scan never runs: with both pool threads held by the first scan's partitions, this deadlocked.
#[test]
fn an_undrained_partitioned_scan_does_not_starve_another() {
    const ROWS: i64 = 20_000;
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options { scan_threads: 2, ..common::tiny_options(Arc::new(OsFs)) };
    let db = Db::open(tmp.path(), opts).unwrap();
    let s = Schema::new(vec![Column::new("id", ColumnType::BigInt), Column::new("v", ColumnType::BigInt)], &["id"])
        .unwrap();
    let t = db.create_table("p", s, TableOptions::with_layout("L1-: column")).unwrap();
    for chunk in (0..ROWS).collect::<Vec<_>>().chunks(1000) {
        let mut wb = WriteBatch::new();
        for &i in chunk {
            wb.insert(&t, &[Value::BigInt(i), Value::BigInt(i * 7)]).unwrap();
        }
        db.write(wb, &WriteOptions::default()).unwrap();
    }
    db.compact_range("p", &KeyRange::all()).unwrap();
    let req = ScanRequest::new().with_columns(&["id", "v"]).with_batch_rows(64).with_partitions(4);
    let mut first = t.scan_batches(&req, &ReadOptions::default()).unwrap();
    let first_batch = first.next().unwrap().unwrap().num_rows();
    // Its partitions now fill their channels and wait for this reader.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (done, finished) = std::sync::mpsc::channel();
    let t2 = t.clone();
    let req2 = req.clone();
    std::thread::spawn(move || {
        let rows: usize = t2.scan_batches(&req2, &ReadOptions::default()).unwrap().map(|b| b.unwrap().num_rows()).sum();
        let _ = done.send(rows);
    });
    let second = finished
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the second scan made no progress while the first waited for its reader");
    assert_eq!(second, ROWS as usize);
    let rest: usize = first.map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(first_batch + rest, ROWS as usize);
}

/// An unordered partitioned scan returns every row of its range once, rows in key order within
/// each batch; with a limit, that many of them.
#[test]
fn unordered_partitions_return_every_row_once() {
    let tmp = tempfile::tempdir().unwrap();
    let db = Db::open(tmp.path(), common::tiny_options(Arc::new(OsFs))).unwrap();
    let s = Schema::new(vec![Column::new("id", ColumnType::BigInt), Column::new("v", ColumnType::BigInt)], &["id"])
        .unwrap();
    let t = db.create_table("u", s, TableOptions::with_layout("L1-: column")).unwrap();
    let mut wb = WriteBatch::new();
    for i in 0..5000i64 {
        wb.insert(&t, &[Value::BigInt(i), Value::BigInt(i % 13)]).unwrap();
    }
    db.write(wb, &WriteOptions::default()).unwrap();
    db.compact_range("u", &KeyRange::all()).unwrap();
    // Newer versions over the compacted ones: the merge path too.
    for i in (0..5000i64).step_by(7) {
        t.update(&[Value::BigInt(i)], &[("v", Value::BigInt(-1))]).unwrap();
    }
    let req = ScanRequest::new()
        .with_range(KeyRange::half_open(vec![Value::BigInt(100)], vec![Value::BigInt(4900)]))
        .with_filter(Expr::cmp("v", CmpOp::NotEq, Value::BigInt(3)))
        .with_batch_rows(50)
        .with_partitions(4)
        .with_unordered(true);
    let mut got = Vec::new();
    for b in t.scan_batches(&req, &ReadOptions::default()).unwrap() {
        let rows = batch_rows(&b.unwrap());
        assert!(rows.windows(2).all(|w| total(&w[0][0], &w[1][0]) == Ordering::Less), "a batch out of key order");
        got.extend(rows);
    }
    got.sort_by(|a, b| total(&a[0], &b[0]));
    let want: Vec<Vec<Value>> = (100..4900i64)
        .map(|i| vec![Value::BigInt(i), Value::BigInt(if i % 7 == 0 { -1 } else { i % 13 })])
        .filter(|r| r[1] != Value::BigInt(3))
        .collect();
    assert_eq!(got, want);
    let limited: usize = t
        .scan_batches(&req.clone().with_limit(120), &ReadOptions::default())
        .unwrap()
        .map(|b| b.unwrap().num_rows())
        .sum();
    assert_eq!(limited, 120);
}

/// Key columns of a composite key come back right from blocks passed in bulk: integer and DATE
/// columns after fixed-width ones are read from the key bytes (negative values included), the
/// TEXT column after them is decoded; selected rows (a filter) and all rows alike.
#[test]
fn composite_key_columns_read_from_bulk_blocks() {
    for seed in seeds(&[1, 2, 3]) {
        with_seed(seed, |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            let tmp = tempfile::tempdir().unwrap();
            let db = Db::open(tmp.path(), common::tiny_options(Arc::new(OsFs))).unwrap();
            let s = Schema::new(
                vec![
                    Column::new("k1", ColumnType::SmallInt),
                    Column::new("k2", ColumnType::Date),
                    Column::new("k3", ColumnType::BigInt),
                    Column::new("k4", ColumnType::Text),
                    Column::new("k5", ColumnType::TinyInt),
                    Column::new("v", ColumnType::Int),
                    Column::new("k6", ColumnType::TimestampTz),
                ],
                &["k1", "k2", "k3", "k6", "k4", "k5"],
            )
            .unwrap();
            let t = db.create_table("c", s, TableOptions::with_layout("L1-: column")).unwrap();
            let mut model: BTreeMap<Vec<u8>, Vec<Value>> = BTreeMap::new();
            for _ in 0..3000 {
                let row = vec![
                    Value::SmallInt(rng.gen_range(-3..3)),
                    Value::Date(rng.gen_range(-20_000..20_000)),
                    Value::BigInt(rng.gen_range(-1_000_000_000_000..1_000_000_000_000)),
                    Value::Text(STRINGS[rng.gen_range(0..STRINGS.len())].to_string()),
                    Value::TinyInt(rng.gen_range(-128..=127)),
                    Value::Int(rng.gen_range(-100..100)),
                    Value::TimestampTz(rng.gen_range(-3..3) * 1_000_000_007),
                ];
                t.insert(&row).unwrap();
                // The model orders rows by their key values, as the engine's encoding does.
                let key = format!("{:?}", [&row[..5], &row[6..]].concat());
                model.insert(key.into_bytes(), row);
            }
            db.compact_range("c", &KeyRange::all()).unwrap();
            let mut want: Vec<Vec<Value>> = model.into_values().collect();
            want.sort_by(|a, b| {
                [0, 1, 2, 6, 3, 4].iter().map(|&i| total(&a[i], &b[i])).find(|o| o.is_ne()).unwrap_or(Ordering::Equal)
            });
            let cols = ["k1", "k2", "k3", "k4", "k5", "v", "k6"];
            for filter in [None, Some(Expr::cmp("v", CmpOp::Lt, Value::Int(-80)))] {
                let mut req = ScanRequest::new().with_columns(&cols);
                if let Some(f) = &filter {
                    req = req.with_filter(f.clone());
                }
                let got: Vec<Vec<Value>> = t
                    .scan_batches(&req, &ReadOptions::default())
                    .unwrap()
                    .flat_map(|b| batch_rows(&b.unwrap()))
                    .collect();
                let expected: Vec<&Vec<Value>> =
                    want.iter().filter(|r| filter.is_none() || matches!(r[5], Value::Int(v) if v < -80)).collect();
                assert_eq!(got.len(), expected.len(), "filter {filter:?}");
                for (g, w) in got.iter().zip(expected) {
                    assert_eq!(g, w, "filter {filter:?}");
                }
            }
            assert!(db.scan_stats().bulk_blocks > 0, "no block was passed in bulk");
        });
    }
}
