//! Statistics a scan gives DataFusion's planner: about how many rows and bytes it returns, so the
//! join selection can put the smaller input on a hash join's build side and broadcast small
//! inputs instead of repartitioning both sides.
//!
//! The row count is the table's estimate ([`strata::Table::estimated_rows`]) times the pushed
//! filter's selectivity, guessed from the shape of its conditions the way classic planners do
//! without histograms: an equality keeps a tenth of the rows (one row when it names the whole
//! single-column primary key), a range comparison a third, `IS NULL` a hundredth; `AND`
//! multiplies, `OR` adds as independent events, `NOT` complements.

use datafusion::arrow::datatypes::{DataType, Schema as ArrowSchema};
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, Statistics};
use strata::scan::{CmpOp, Expr};

/// The fraction of rows `filter` keeps.
pub(crate) fn selectivity(filter: &Expr, schema: &strata::Schema, rows: u64) -> f64 {
    match filter {
        Expr::Cmp { column, op, .. } => match op {
            CmpOp::Eq => {
                let key = schema.primary_key();
                if key.len() == 1 && schema.columns()[key[0]].name == *column {
                    1.0 / rows.max(1) as f64
                } else {
                    0.1
                }
            }
            CmpOp::NotEq => 0.9,
            CmpOp::Lt | CmpOp::LtEq | CmpOp::Gt | CmpOp::GtEq => 1.0 / 3.0,
        },
        Expr::IsNull(_) => 0.01,
        Expr::IsNotNull(_) => 0.99,
        Expr::And(all) => all.iter().map(|e| selectivity(e, schema, rows)).product(),
        Expr::Or(any) => 1.0 - any.iter().map(|e| 1.0 - selectivity(e, schema, rows)).product::<f64>(),
        Expr::Not(e) => 1.0 - selectivity(e, schema, rows),
    }
}

/// Bytes a row of `schema` takes in Arrow arrays, guessing 24 for a variable-width value.
fn row_width(schema: &ArrowSchema) -> usize {
    schema
        .fields()
        .iter()
        .map(|f| f.data_type().primitive_width().unwrap_or(if *f.data_type() == DataType::Boolean { 1 } else { 24 }))
        .sum()
}

/// Inexact statistics of `rows` rows of `schema`, with what is known of each column (`columns`:
/// one per field of `schema`, or none).
pub(crate) fn estimate(schema: &ArrowSchema, rows: u64, columns: Vec<ColumnStatistics>) -> Statistics {
    let rows = usize::try_from(rows).unwrap_or(usize::MAX);
    let mut s = Statistics::new_unknown(schema);
    s.num_rows = Precision::Inexact(rows);
    s.total_byte_size = Precision::Inexact(rows.saturating_mul(row_width(schema).max(1)));
    if columns.len() == schema.fields().len() {
        s.column_statistics = columns;
    }
    s
}

/// What the planner is told about schema column `c` of a table returning about `rows` rows:
/// its smallest and largest value, from `bounds` (see [`strata::Table::column_bounds`]), and,
/// for a primary key of that one column, one distinct value per row. These let DataFusion
/// estimate how many rows a join returns (`o_custkey` between 1 and 150,000 has at most that
/// many distinct values), and so which side of a join is small enough to build one hash table.
pub(crate) fn column(
    schema: &strata::Schema,
    c: usize,
    bounds: Option<&(strata::Value, strata::Value)>,
    rows: u64,
) -> ColumnStatistics {
    let mut s = ColumnStatistics::new_unknown();
    if let Some((Some(min), Some(max))) = bounds.map(|(a, b)| (crate::table::scalar(a), crate::table::scalar(b))) {
        s.min_value = Precision::Inexact(min);
        s.max_value = Precision::Inexact(max);
    }
    if schema.primary_key() == [c] {
        s.distinct_count = Precision::Inexact(usize::try_from(rows).unwrap_or(usize::MAX));
        s.null_count = Precision::Exact(0);
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use strata::{Column, ColumnType, Schema, Value};

    fn schema() -> Schema {
        Schema::new(vec![Column::new("id", ColumnType::BigInt), Column::new("n", ColumnType::Int)], &["id"]).unwrap()
    }

    #[test]
    fn equality_on_the_whole_key_keeps_one_row_and_conditions_combine() {
        let s = schema();
        let key = Expr::cmp("id", CmpOp::Eq, Value::BigInt(7));
        assert!((selectivity(&key, &s, 1000) - 0.001).abs() < 1e-12);
        let n_eq = Expr::cmp("n", CmpOp::Eq, Value::Int(1));
        let n_lt = Expr::cmp("n", CmpOp::Lt, Value::Int(1));
        assert!((selectivity(&n_eq.clone().and(n_lt.clone()), &s, 1000) - 0.1 / 3.0).abs() < 1e-12);
        assert!((selectivity(&n_eq.clone().or(n_lt), &s, 1000) - (1.0 - 0.9 * (2.0 / 3.0))).abs() < 1e-12);
        assert!((selectivity(&Expr::Not(Box::new(n_eq)), &s, 1000) - 0.9).abs() < 1e-12);
    }

    /// With row counts, the planner builds the hash table on the small input, whichever side of
    /// the join it is written on (without them it keeps the written order).
    #[tokio::test]
    async fn joins_build_on_the_smaller_table() {
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(strata::Db::open(dir.path(), strata::Options::default()).unwrap());
        let engine = crate::SqlEngine::new(db.clone()).unwrap();
        let run = |sql: &'static str| {
            let engine = &engine;
            async move { engine.execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")) }
        };
        run("CREATE TABLE big (id BIGINT PRIMARY KEY, k INT)").await;
        run("CREATE TABLE small (k INT PRIMARY KEY, name TEXT)").await;
        let big = db.table("big").unwrap();
        for i in 0..5000i64 {
            big.insert(&[Value::BigInt(i), Value::Int((i % 10) as i32)]).unwrap();
        }
        let small = db.table("small").unwrap();
        for k in 0..10 {
            small.insert(&[Value::Int(k), Value::Text(format!("k{k}"))]).unwrap();
        }
        let out = run("EXPLAIN SELECT count(*) FROM big JOIN small ON big.k = small.k").await;
        let Some(crate::Output::Rows { batches, .. }) = out.last() else { panic!("EXPLAIN returned no rows") };
        let text: String = batches
            .iter()
            .flat_map(strata::scan::batch_rows)
            .map(|row| row.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join("\n");
        let physical = &text[text.find("physical_plan").unwrap_or_else(|| panic!("no physical plan in {text}"))..];
        let (s, b) = (physical.find("table=small"), physical.find("table=big"));
        assert!(s.is_some() && b.is_some() && s < b, "the small table is not the build side:\n{physical}");
    }

    #[test]
    fn byte_size_counts_fixed_widths_and_a_guess_per_text_value() {
        use datafusion::arrow::datatypes::Field;
        let schema =
            ArrowSchema::new(vec![Field::new("a", DataType::Int64, false), Field::new("t", DataType::Utf8, true)]);
        let s = estimate(&schema, 10, Vec::new());
        assert_eq!(s.num_rows, Precision::Inexact(10));
        assert_eq!(s.total_byte_size, Precision::Inexact(10 * (8 + 24)));
    }
}
