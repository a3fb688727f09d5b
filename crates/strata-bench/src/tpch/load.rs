//! The TPC-H tables: generated in process by tpchgen (the same rows as the specification's dbgen),
//! as Arrow batches, and written into strata (and SQLite) in parallel parts.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use arrow_array::{Array, RecordBatch};
use arrow_schema::{ArrowError, DataType, SchemaRef};
use strata::{Column, ColumnType, Db, Schema, TableOptions, Value, WriteBatch, WriteOptions};
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator, PartSuppGenerator,
    RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow, SupplierArrow,
};

/// A TPC-H table: its name, primary key and rows per unit of scale factor (for progress).
pub(crate) struct TpchTable {
    pub name: &'static str,
    pub key: &'static [&'static str],
    rows_per_sf: f64,
    /// Whether its row count grows with the scale factor (nation and region are fixed).
    scales: bool,
}

/// The eight tables, largest first, so the parallel load starts on the long ones.
pub(crate) const TABLES: [TpchTable; 8] = [
    TpchTable { name: "lineitem", key: &["l_orderkey", "l_linenumber"], rows_per_sf: 6_001_215.0, scales: true },
    TpchTable { name: "orders", key: &["o_orderkey"], rows_per_sf: 1_500_000.0, scales: true },
    TpchTable { name: "partsupp", key: &["ps_partkey", "ps_suppkey"], rows_per_sf: 800_000.0, scales: true },
    TpchTable { name: "part", key: &["p_partkey"], rows_per_sf: 200_000.0, scales: true },
    TpchTable { name: "customer", key: &["c_custkey"], rows_per_sf: 150_000.0, scales: true },
    TpchTable { name: "supplier", key: &["s_suppkey"], rows_per_sf: 10_000.0, scales: true },
    TpchTable { name: "nation", key: &["n_nationkey"], rows_per_sf: 25.0, scales: false },
    TpchTable { name: "region", key: &["r_regionkey"], rows_per_sf: 5.0, scales: false },
];

impl TpchTable {
    /// About how many rows the table has at scale factor `sf`.
    pub fn rows(&self, sf: f64) -> u64 {
        if self.scales {
            (self.rows_per_sf * sf).round() as u64
        } else {
            self.rows_per_sf as u64
        }
    }

    /// How many parts to generate the table in: enough that `threads` share the big ones.
    fn parts(&self, sf: f64, threads: usize) -> i32 {
        if self.rows(sf) >= 100_000 {
            (threads * 2) as i32
        } else {
            1
        }
    }

    /// The Arrow schema tpchgen generates the table with.
    pub fn arrow_schema(&self) -> SchemaRef {
        match self.name {
            "lineitem" => LineItemArrow::schema_ref(),
            "orders" => OrderArrow::schema_ref(),
            "partsupp" => PartSuppArrow::schema_ref(),
            "part" => PartArrow::schema_ref(),
            "customer" => CustomerArrow::schema_ref(),
            "supplier" => SupplierArrow::schema_ref(),
            "nation" => NationArrow::schema_ref(),
            _ => RegionArrow::schema_ref(),
        }
    }

    /// The batches of part `part` (1-based) of `parts`.
    pub(crate) fn batches(
        &self,
        sf: f64,
        part: i32,
        parts: i32,
    ) -> Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send> {
        match self.name {
            "lineitem" => Box::new(LineItemArrow::new(LineItemGenerator::new(sf, part, parts))),
            "orders" => Box::new(OrderArrow::new(OrderGenerator::new(sf, part, parts))),
            "partsupp" => Box::new(PartSuppArrow::new(PartSuppGenerator::new(sf, part, parts))),
            "part" => Box::new(PartArrow::new(PartGenerator::new(sf, part, parts))),
            "customer" => Box::new(CustomerArrow::new(CustomerGenerator::new(sf, part, parts))),
            "supplier" => Box::new(SupplierArrow::new(SupplierGenerator::new(sf, part, parts))),
            "nation" => Box::new(NationArrow::new(NationGenerator::new(sf, part, parts))),
            _ => Box::new(RegionArrow::new(RegionGenerator::new(sf, part, parts))),
        }
    }

    /// The table as strata stores it: decimals as DOUBLE (strata has no DECIMAL), strings as
    /// TEXT, dates as DATE, keys as generated.
    pub fn strata_schema(&self) -> Result<Schema, String> {
        let columns = self
            .arrow_schema()
            .fields()
            .iter()
            .map(|f| {
                let ty = match f.data_type() {
                    DataType::Int64 => ColumnType::BigInt,
                    DataType::Int32 => ColumnType::Int,
                    DataType::Decimal128(..) | DataType::Float64 => ColumnType::Double,
                    DataType::Date32 => ColumnType::Date,
                    DataType::Utf8View | DataType::Utf8 => ColumnType::Text,
                    other => {
                        return Err(format!("tpch: column {} has type {other}, which the load does not map", f.name()))
                    }
                };
                Ok(Column::not_null(f.name(), ty))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Schema::new(columns, self.key).map_err(|e| format!("tpch: table {}: {e}", self.name))
    }
}

/// Writes the table's rows at scale factor `sf` in the specification's text format (`|` after
/// every value) to `dir/<table>.<part>.tbl`, one file per part; returns the rows written.
fn write_tbl(table: &TpchTable, sf: f64, part: i32, parts: i32, dir: &std::path::Path) -> Result<u64, String> {
    use std::io::Write;
    let path = dir.join(format!("{}.{part}.tbl", table.name));
    let file = std::fs::File::create(&path).map_err(|e| format!("tpch: {}: {e}", path.display()))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut n = 0u64;
    let mut put = |row: &dyn std::fmt::Display| -> std::io::Result<()> {
        n += 1;
        writeln!(w, "{row}")
    };
    let r: std::io::Result<()> = match table.name {
        "lineitem" => LineItemGenerator::new(sf, part, parts).iter().try_for_each(|r| put(&r)),
        "orders" => OrderGenerator::new(sf, part, parts).iter().try_for_each(|r| put(&r)),
        "partsupp" => PartSuppGenerator::new(sf, part, parts).iter().try_for_each(|r| put(&r)),
        "part" => PartGenerator::new(sf, part, parts).iter().try_for_each(|r| put(&r)),
        "customer" => CustomerGenerator::new(sf, part, parts).iter().try_for_each(|r| put(&r)),
        "supplier" => SupplierGenerator::new(sf, part, parts).iter().try_for_each(|r| put(&r)),
        "nation" => NationGenerator::new(sf, part, parts).iter().try_for_each(|r| put(&r)),
        _ => RegionGenerator::new(sf, part, parts).iter().try_for_each(|r| put(&r)),
    };
    r.and_then(|()| w.flush()).map_err(|e| format!("tpch: {}: {e}", path.display()))?;
    Ok(n)
}

/// Writes every table at scale factor `sf` as text files into `dir` on `threads` threads (for
/// systems that load text, such as DuckDB); returns the rows written.
pub(crate) fn write_tbl_files(sf: f64, threads: usize, dir: &std::path::Path) -> Result<u64, String> {
    let jobs = jobs(sf, threads);
    let next = AtomicUsize::new(0);
    let rows = AtomicU64::new(0);
    run_jobs(threads, || {
        while let Some(&(table, part, parts)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
            rows.fetch_add(write_tbl(table, sf, part, parts, dir)?, Ordering::Relaxed);
        }
        Ok(())
    })?;
    Ok(rows.into_inner())
}

/// The (table, part, parts) pieces the tables are generated in, largest tables first.
fn jobs(sf: f64, threads: usize) -> Vec<(&'static TpchTable, i32, i32)> {
    TABLES
        .iter()
        .flat_map(|t| {
            let parts = t.parts(sf, threads);
            (1..=parts).map(move |p| (t, p, parts))
        })
        .collect()
}

/// Runs `work` on `threads` threads and returns the first error.
fn run_jobs(threads: usize, work: impl Fn() -> Result<(), String> + Sync) -> Result<(), String> {
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads.max(1)).map(|_| s.spawn(&work)).collect();
        workers.into_iter().try_for_each(|w| w.join().map_err(|_| "tpch: a load thread panicked".to_string())?)
    })
}

/// The rows of `batch` as strata values, decimals cast to doubles and string views to strings.
pub(crate) fn batch_rows(batch: &RecordBatch) -> Result<Vec<Vec<Value>>, String> {
    let columns: Vec<std::sync::Arc<dyn Array>> = batch
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Decimal128(..) => arrow_cast::cast(c, &DataType::Float64),
            DataType::Utf8View => arrow_cast::cast(c, &DataType::Utf8),
            _ => Ok(c.clone()),
        })
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tpch: converting a batch: {e}"))?;
    Ok((0..batch.num_rows()).map(|i| columns.iter().map(|c| strata::scan::value_at(c.as_ref(), i)).collect()).collect())
}

/// Where generated rows go: a table's rows, one batch at a time.
pub(crate) type WriteRows<'a> = dyn Fn(&TpchTable, Vec<Vec<Value>>) -> Result<(), String> + Sync + 'a;

/// Generates every table at scale factor `sf` on `threads` threads and hands each batch's rows
/// to `write(table, rows)`; `progress` counts the rows written.
pub(crate) fn generate(sf: f64, threads: usize, progress: &AtomicU64, write: &WriteRows<'_>) -> Result<(), String> {
    let jobs = jobs(sf, threads);
    let next = AtomicUsize::new(0);
    run_jobs(threads, || {
        while let Some(&(table, part, parts)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
            for batch in table.batches(sf, part, parts) {
                let batch = batch.map_err(|e| format!("tpch: generating {}: {e}", table.name))?;
                let rows = batch_rows(&batch)?;
                let n = rows.len() as u64;
                write(table, rows)?;
                progress.fetch_add(n, Ordering::Relaxed);
            }
        }
        Ok(())
    })
}

/// Rows an ingesting load gathers from one part before it ingests them (about 100-300 MiB of
/// values per load thread at SF 1's widest table).
const INGEST_ROWS: usize = 250_000;

/// Creates the eight tables in `db` (`options` for each) and loads them; returns the rows
/// written. With `ingest`, each part's rows go in as ingests of up to [`INGEST_ROWS`] rows
/// (straight into the last level); otherwise as write batches, one per generated batch.
pub(crate) fn load_strata(
    db: &Db,
    sf: f64,
    threads: usize,
    options: &TableOptions,
    progress: &AtomicU64,
    ingest: bool,
) -> Result<u64, String> {
    let mut tables = Vec::new();
    for t in &TABLES {
        tables.push(db.create_table(t.name, t.strata_schema()?, options.clone()).map_err(|e| format!("tpch: {e}"))?);
    }
    if ingest {
        return ingest_parts(&tables, sf, threads, progress);
    }
    let written = AtomicU64::new(0);
    generate(sf, threads, progress, &|t, rows| {
        let table = tables.iter().find(|x| x.name() == t.name).ok_or("tpch: table missing")?;
        let mut wb = WriteBatch::new();
        for row in &rows {
            wb.insert(table, row).map_err(|e| format!("tpch: {}: {e}", t.name))?;
        }
        db.write(wb, &WriteOptions::default()).map_err(|e| format!("tpch: {}: {e}", t.name))?;
        written.fetch_add(rows.len() as u64, Ordering::Relaxed);
        Ok(())
    })?;
    Ok(written.into_inner())
}

/// Generates every table's parts on `threads` threads and ingests each part's rows into its
/// table of `tables`, [`INGEST_ROWS`] at a time; returns the rows ingested.
fn ingest_parts(tables: &[strata::Table], sf: f64, threads: usize, progress: &AtomicU64) -> Result<u64, String> {
    let jobs = jobs(sf, threads);
    let next = AtomicUsize::new(0);
    let ingested = AtomicU64::new(0);
    run_jobs(threads, || {
        while let Some(&(table, part, parts)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
            let t = tables.iter().find(|x| x.name() == table.name).ok_or("tpch: table missing")?;
            let mut rows: Vec<Vec<Value>> = Vec::new();
            let flush = |rows: &mut Vec<Vec<Value>>| -> Result<(), String> {
                let st = t.ingest(rows.iter()).map_err(|e| format!("tpch: ingesting into {}: {e}", table.name))?;
                ingested.fetch_add(st.rows, Ordering::Relaxed);
                progress.fetch_add(rows.len() as u64, Ordering::Relaxed);
                rows.clear();
                Ok(())
            };
            for batch in table.batches(sf, part, parts) {
                let batch = batch.map_err(|e| format!("tpch: generating {}: {e}", table.name))?;
                rows.extend(batch_rows(&batch)?);
                if rows.len() >= INGEST_ROWS {
                    flush(&mut rows)?;
                }
            }
            if !rows.is_empty() {
                flush(&mut rows)?;
            }
        }
        Ok(())
    })?;
    Ok(ingested.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_maps_to_a_strata_schema_with_its_key() {
        for t in &TABLES {
            let s = t.strata_schema().unwrap();
            assert_eq!(s.columns().len(), t.arrow_schema().fields().len(), "{}", t.name);
            for k in t.key {
                assert!(s.columns().iter().any(|c| c.name == *k), "{}: key {k}", t.name);
            }
        }
    }

    #[test]
    fn generated_rows_convert_to_values_of_their_columns() {
        let t = &TABLES[0];
        let batch = t.batches(0.001, 1, 1).next().unwrap().unwrap();
        let rows = batch_rows(&batch).unwrap();
        assert_eq!(rows.len(), batch.num_rows());
        let s = t.strata_schema().unwrap();
        for row in rows.iter().take(50) {
            for (v, c) in row.iter().zip(s.columns()) {
                assert!(v.has_type(c.ty), "{}: {v:?} is not {:?}", c.name, c.ty);
            }
        }
        // The first line item of the specification's data: order 1, line 1, quantity 17,
        // shipped 1996-03-13 (its part, and so its price, depend on the scale factor).
        assert_eq!(rows[0][0], Value::BigInt(1));
        assert_eq!(rows[0][3], Value::Int(1));
        assert_eq!(rows[0][4], Value::Double(17.0));
        assert_eq!(rows[0][10], Value::Date(strata::types::parse_date("1996-03-13").unwrap()));
    }

    #[test]
    fn text_files_hold_the_same_rows_as_the_batches() {
        let dir = tempfile::tempdir().unwrap();
        let rows = write_tbl_files(0.001, 2, dir.path()).unwrap();
        let expected: u64 = TABLES.iter().map(|t| t.rows(0.001)).sum();
        assert!(rows.abs_diff(expected) <= expected / 100, "{rows} rows written, about {expected} expected");
        let lineitem = std::fs::read_to_string(dir.path().join("lineitem.1.tbl")).unwrap();
        let batch = TABLES[0].batches(0.001, 1, 1).next().unwrap().unwrap();
        for (line, row) in lineitem.lines().zip(batch_rows(&batch).unwrap()).take(100) {
            let fields: Vec<&str> = line.strip_suffix('|').unwrap().split('|').collect();
            assert_eq!(fields.len(), row.len(), "{line}");
            for (f, v) in fields.iter().zip(&row) {
                let same = match v {
                    Value::BigInt(x) => f.parse() == Ok(*x),
                    Value::Int(x) => f.parse() == Ok(*x),
                    Value::Double(x) => f.parse() == Ok(*x),
                    Value::Text(t) => f == t,
                    Value::Date(d) => *f == strata::types::format_date(*d),
                    other => panic!("unexpected {other:?}"),
                };
                assert!(same, "{f:?} in the text, {v:?} in the batch: {line}");
            }
        }
        let region = std::fs::read_to_string(dir.path().join("region.1.tbl")).unwrap();
        assert_eq!(region.lines().count(), 5);
    }
}
