//! `strata.Table`: one table's rows by key, scans into pyarrow, and bulk loads from Arrow data.

use std::ops::Bound as KeyBound;
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, RecordBatchReader};
use arrow_pyarrow::{FromPyArrow, ToPyArrow};
use arrow_schema::{ArrowError, SchemaRef};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use strata::scan::ScanRequest;
use strata::{KeyRange, ReadOptions, Value, WriteBatch, WriteOptions};

use crate::convert;
use crate::database::Database;
use crate::errors;
use crate::txn::TxnCell;

/// Rows per write batch of `insert_arrow` into a lineage-engine table: each such chunk commits
/// atomically.
const LOAD_CHUNK_ROWS: usize = 65_536;

/// Rows per ingest of `insert_arrow` into an LSM table (held in memory while its files are
/// built); each is atomic.
const INGEST_CHUNK_ROWS: usize = 200_000;

/// A table of an open database (from `Database.table` or `Database.create_table`).
#[pyclass(module = "strata._strata", frozen)]
pub struct Table {
    table: strata::Table,
    db: Py<Database>,
}

impl Table {
    pub(crate) fn new(table: strata::Table, db: Py<Database>) -> Table {
        Table { table, db }
    }

    /// The database, or the error for a closed one.
    fn db(&self, py: Python<'_>) -> PyResult<Arc<strata::Db>> {
        Ok(self.db.bind(py).get().handles()?.0)
    }

    /// Refuses writes outside SQL to a table with SQL indexes (only SQL's writes keep them).
    pub(crate) fn writable(&self, py: Python<'_>) -> PyResult<()> {
        let db = self.db(py)?;
        strata_sql::indexes::refuse_writes_outside_sql(&db, &self.table).map_err(errors::sql)
    }

    /// The engine's table.
    pub(crate) fn inner(&self) -> &strata::Table {
        &self.table
    }
}

/// A key bound of `table` from an optional Python key.
fn key_bound(table: &strata::Table, obj: Option<&Bound<'_, PyAny>>, inclusive: bool) -> PyResult<KeyBound<Vec<Value>>> {
    Ok(match obj {
        None => KeyBound::Unbounded,
        Some(o) if inclusive => KeyBound::Included(convert::key(o, table.schema())?),
        Some(o) => KeyBound::Excluded(convert::key(o, table.schema())?),
    })
}

/// The row of `table` with key `key` as a dict of `columns` (all by default), read in `tx`
/// when given.
pub(crate) fn get_row<'py>(
    py: Python<'py>,
    table: &strata::Table,
    key: &Bound<'py, PyAny>,
    columns: Option<Vec<String>>,
    tx: Option<&TxnCell>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let key = convert::key(key, table.schema())?;
    let names: Vec<String> = match columns {
        Some(c) => c,
        None => table.schema().columns().iter().map(|c| c.name.clone()).collect(),
    };
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let projection = table.projection(&refs).map_err(errors::engine)?;
    let row = py
        .detach(|| match tx {
            None => table.get(&key, &projection, &ReadOptions::default()),
            Some(cell) => cell.run(|tx| tx.get(table, &key, &projection)),
        })
        .map_err(errors::engine)?;
    let Some(row) = row else { return Ok(None) };
    let dict = PyDict::new(py);
    for (name, v) in names.iter().zip(&row) {
        dict.set_item(name, convert::to_py(py, v)?)?;
    }
    Ok(Some(dict))
}

/// Writes a row into `table` (in `tx` when given).
pub(crate) fn insert_row(
    py: Python<'_>,
    table: &strata::Table,
    row: &Bound<'_, PyAny>,
    tx: Option<&TxnCell>,
) -> PyResult<()> {
    let row = convert::row(row, table.name(), table.schema())?;
    py.detach(|| match tx {
        None => table.insert(&row),
        Some(cell) => cell.run(|tx| tx.insert(table, &row)),
    })
    .map_err(errors::engine)
}

/// Sets columns of a row of `table` from dicts (in `tx` when given).
pub(crate) fn update_row(
    py: Python<'_>,
    table: &strata::Table,
    key: &Bound<'_, PyAny>,
    dicts: [Option<&Bound<'_, PyDict>>; 2],
    tx: Option<&TxnCell>,
) -> PyResult<()> {
    let key = convert::key(key, table.schema())?;
    let mut set = Vec::new();
    for d in dicts.into_iter().flatten() {
        set.extend(convert::assignments(d, table.name(), table.schema())?);
    }
    if set.is_empty() {
        return Err(PyValueError::new_err("update sets no columns"));
    }
    let refs: Vec<(&str, Value)> = set.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
    py.detach(|| match tx {
        None => table.update(&key, &refs),
        Some(cell) => cell.run(|tx| tx.update(table, &key, &refs)),
    })
    .map_err(errors::engine)
}

/// Deletes a row of `table` (in `tx` when given).
pub(crate) fn delete_row(
    py: Python<'_>,
    table: &strata::Table,
    key: &Bound<'_, PyAny>,
    tx: Option<&TxnCell>,
) -> PyResult<()> {
    let key = convert::key(key, table.schema())?;
    py.detach(|| match tx {
        None => table.delete(&key),
        Some(cell) => cell.run(|tx| tx.delete(table, &key)),
    })
    .map_err(errors::engine)
}

/// What `scan` was asked for.
pub(crate) struct ScanArgs<'a, 'py> {
    pub columns: Option<Vec<String>>,
    pub r#where: Option<&'a str>,
    pub start: Option<&'a Bound<'py, PyAny>>,
    pub end: Option<&'a Bound<'py, PyAny>>,
    pub limit: Option<usize>,
}

/// Scans `table` into a `pyarrow.Table` (in `tx` when given).
pub(crate) fn scan_table<'py>(
    py: Python<'py>,
    table: &strata::Table,
    engine: &strata_sql::SqlEngine,
    a: ScanArgs<'_, 'py>,
    tx: Option<&TxnCell>,
) -> PyResult<Bound<'py, PyAny>> {
    let range = KeyRange { start: key_bound(table, a.start, true)?, end: key_bound(table, a.end, false)? };
    let filter = match a.r#where {
        Some(w) => Some(engine.scan_filter(table, w).map_err(errors::sql)?),
        None => None,
    };
    let mut req = ScanRequest::new().with_range(range);
    if let Some(c) = &a.columns {
        req = req.with_columns(c);
    }
    if let Some(f) = filter {
        req = req.with_filter(f);
    }
    if let Some(n) = a.limit {
        req = req.with_limit(n);
    }
    let (schema, batches) = py
        .detach(|| -> strata::Result<(SchemaRef, Vec<RecordBatch>)> {
            let iter = match tx {
                None => table.scan_batches(&req, &ReadOptions::default())?,
                Some(cell) => cell.run(|tx| tx.scan_batches(table, &req))?,
            };
            let schema = iter.schema();
            let batches = iter.collect::<strata::Result<Vec<_>>>()?;
            Ok((schema, batches))
        })
        .map_err(errors::engine)?;
    crate::database::to_pyarrow(py, schema, batches)
}

#[pymethods]
impl Table {
    /// The table's name.
    #[getter]
    fn name(&self) -> &str {
        self.table.name()
    }

    /// The primary-key columns, in key order.
    #[getter]
    fn primary_key(&self) -> Vec<String> {
        let s = self.table.schema();
        s.primary_key().iter().map(|&c| s.columns()[c].name.clone()).collect()
    }

    /// The columns as a `pyarrow.Schema` (the types scans return).
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.table.schema();
        let all: Vec<usize> = (0..s.columns().len()).collect();
        strata::scan::row_schema(s, &all).as_ref().to_pyarrow(py)
    }

    /// The row with primary key `key` as a dict (only `columns` if given), or None.
    #[pyo3(signature = (key, columns = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        columns: Option<Vec<String>>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let _db = self.db(py)?;
        get_row(py, &self.table, key, columns, None)
    }

    /// The rows with primary keys `keys` (a sequence of keys), each a dict (only `columns` if
    /// given) or None, in the order of `keys`; all read at one read point, in key order, and in
    /// parallel key ranges for large batches.
    #[pyo3(signature = (keys, columns = None))]
    fn multi_get<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<Bound<'py, PyAny>>,
        columns: Option<Vec<String>>,
    ) -> PyResult<Vec<Option<Bound<'py, PyDict>>>> {
        let _db = self.db(py)?;
        let keys = keys.iter().map(|k| convert::key(k, self.table.schema())).collect::<PyResult<Vec<_>>>()?;
        let names: Vec<String> = match columns {
            Some(c) => c,
            None => self.table.schema().columns().iter().map(|c| c.name.clone()).collect(),
        };
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let projection = self.table.projection(&refs).map_err(errors::engine)?;
        let rows =
            py.detach(|| self.table.multi_get(&keys, &projection, &ReadOptions::default())).map_err(errors::engine)?;
        rows.into_iter()
            .map(|row| {
                let Some(row) = row else { return Ok(None) };
                let dict = PyDict::new(py);
                for (name, v) in names.iter().zip(&row) {
                    dict.set_item(name, convert::to_py(py, v)?)?;
                }
                Ok(Some(dict))
            })
            .collect()
    }

    /// Writes a row (a dict by column name, absent columns NULL, or a sequence in column
    /// order), replacing any row with the same key.
    fn insert(&self, py: Python<'_>, row: &Bound<'_, PyAny>) -> PyResult<()> {
        self.writable(py)?;
        insert_row(py, &self.table, row, None)
    }

    /// Sets the given columns of the row with key `key` (a dict, keyword arguments, or both);
    /// only those columns are written. A key with no row is left alone.
    #[pyo3(signature = (key, values = None, **kwargs))]
    fn update(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        values: Option<&Bound<'_, PyDict>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        self.writable(py)?;
        update_row(py, &self.table, key, [values, kwargs], None)
    }

    /// Deletes the row with key `key` (nothing happens if there is none).
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        self.writable(py)?;
        delete_row(py, &self.table, key, None)
    }

    /// Reads rows in key order as a `pyarrow.Table`: the `columns` named (all by default), keys
    /// from `start` (inclusive) to `end` (exclusive), rows satisfying `where` (a SQL condition
    /// strata applies inside the scan, such as `"qty > 5 AND region = 'EU'"`), at most `limit`.
    #[pyo3(signature = (columns = None, *, r#where = None, start = None, end = None, limit = None))]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        columns: Option<Vec<String>>,
        r#where: Option<&str>,
        start: Option<&Bound<'py, PyAny>>,
        end: Option<&Bound<'py, PyAny>>,
        limit: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (_db, engine) = self.db.bind(py).get().handles()?;
        let args = ScanArgs { columns, r#where, start, end, limit };
        scan_table(py, &self.table, &engine, args, None)
    }

    /// Bulk-loads Arrow data: a `pyarrow.Table`, `RecordBatch` or `RecordBatchReader`, a pandas
    /// DataFrame, or anything exporting an Arrow stream. Columns are matched by name and cast
    /// to the table's types (a value that does not fit is an error, never silently NULL);
    /// columns the data lacks are NULL. Rows replace rows with the same key. The rows are
    /// ingested in atomic chunks of 200,000, each written straight into the deepest level its
    /// key range leaves free (data sorted by key is written once, into the last level); tables
    /// of the lineage engine take atomic write batches of 65,536 rows instead. Returns the
    /// number of rows written.
    fn insert_arrow(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        self.writable(py)?;
        let data = as_stream(py, data)?;
        let reader = arrow_array::ffi_stream::ArrowArrayStreamReader::from_pyarrow_bound(&data)?;
        let plan = LoadPlan::new(&self.table, &reader.schema())?;
        let db = self.db(py)?;
        let ingest = self.table.info().options.engine == strata::Engine::Lsm;
        let chunk_rows = if ingest { INGEST_CHUNK_ROWS } else { LOAD_CHUNK_ROWS };
        let mut written = 0u64;
        let result = py.detach(|| -> Result<(), LoadError> {
            let mut rows: Vec<Vec<Value>> = Vec::new();
            let put = |rows: &mut Vec<Vec<Value>>, written: &mut u64| -> Result<(), LoadError> {
                if ingest {
                    self.table.ingest(rows.iter()).map_err(LoadError::Engine)?;
                    *written += rows.len() as u64;
                } else {
                    let mut wb = WriteBatch::new();
                    for row in rows.iter() {
                        wb.insert(&self.table, row).map_err(LoadError::Engine)?;
                    }
                    db.write(wb, &WriteOptions::default()).map_err(LoadError::Engine)?;
                    *written += rows.len() as u64;
                }
                rows.clear();
                Ok(())
            };
            for batch in reader {
                let batch = batch.map_err(LoadError::Arrow)?;
                let columns = plan.cast(&batch).map_err(LoadError::Arrow)?;
                for i in 0..batch.num_rows() {
                    let mut row = vec![Value::Null; plan.width];
                    for (slot, array) in &columns {
                        row[*slot] = strata::scan::value_at(array.as_ref(), i);
                    }
                    rows.push(row);
                    if rows.len() >= chunk_rows {
                        put(&mut rows, &mut written)?;
                    }
                }
            }
            if !rows.is_empty() {
                put(&mut rows, &mut written)?;
            }
            Ok(())
        });
        result.map_err(|e| e.into_py(written))?;
        Ok(written)
    }

    fn __repr__(&self) -> String {
        format!("<strata.Table {}>", self.table.name())
    }
}

/// `data` as an object exporting an Arrow stream (pandas DataFrames and record batches are
/// wrapped in a `pyarrow.Table`).
fn as_stream<'py>(py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let pa = py.import("pyarrow")?;
    if data.is_instance(&pa.getattr("RecordBatch")?)? {
        return pa.getattr("Table")?.call_method1("from_batches", (vec![data.clone()],));
    }
    let module = data.get_type().module()?.to_string();
    if module.starts_with("pandas") {
        let kwargs = PyDict::new(py);
        kwargs.set_item("preserve_index", false)?;
        return pa.getattr("Table")?.call_method("from_pandas", (data,), Some(&kwargs));
    }
    if data.hasattr("__arrow_c_stream__")? || data.is_instance(&pa.getattr("RecordBatchReader")?)? {
        return Ok(data.clone());
    }
    Err(PyTypeError::new_err(format!(
        "insert_arrow takes a pyarrow Table, RecordBatch or RecordBatchReader, a pandas DataFrame, or an Arrow \
         stream; got {}",
        data.get_type().name()?
    )))
}

/// Which input column fills which table column, and the Arrow type it is cast to.
struct LoadPlan {
    /// (input column, table column, target type).
    columns: Vec<(usize, usize, arrow_schema::DataType)>,
    width: usize,
}

impl LoadPlan {
    fn new(table: &strata::Table, input: &arrow_schema::Schema) -> PyResult<LoadPlan> {
        let schema = table.schema();
        let mut columns = Vec::new();
        for (i, f) in input.fields().iter().enumerate() {
            let Some(c) = schema.column_index(f.name()) else {
                return Err(errors::engine(strata::Error::UnknownColumn {
                    table: table.name().to_string(),
                    column: f.name().clone(),
                }));
            };
            if columns.iter().any(|&(_, t, _)| t == c) {
                return Err(PyValueError::new_err(format!("the data has column `{}` twice", f.name())));
            }
            columns.push((i, c, strata::scan::arrow_type(schema.columns()[c].ty)));
        }
        for (c, col) in schema.columns().iter().enumerate() {
            if !col.nullable && !columns.iter().any(|&(_, t, _)| t == c) {
                return Err(errors::engine(strata::Error::TypeMismatch {
                    table: table.name().to_string(),
                    column: col.name.clone(),
                    message: "the data has no such column and it is NOT NULL".into(),
                }));
            }
        }
        Ok(LoadPlan { columns, width: schema.columns().len() })
    }

    /// The batch's columns cast to the table's types, each with the table column it fills.
    fn cast(&self, batch: &RecordBatch) -> Result<Vec<(usize, arrow_array::ArrayRef)>, ArrowError> {
        let options = arrow_cast::CastOptions { safe: false, ..Default::default() };
        self.columns
            .iter()
            .map(|(i, c, ty)| {
                let a = batch.column(*i);
                let a = if a.data_type() == ty { a.clone() } else { arrow_cast::cast_with_options(a, ty, &options)? };
                Ok((*c, a))
            })
            .collect()
    }
}

/// Why a bulk load stopped.
enum LoadError {
    Arrow(ArrowError),
    Engine(strata::Error),
}

impl LoadError {
    fn into_py(self, written: u64) -> PyErr {
        let done = format!("({written} rows were written before this error)");
        match self {
            LoadError::Arrow(e) => PyValueError::new_err(format!("{e} {done}")),
            LoadError::Engine(e) => errors::engine_noted(e, &done),
        }
    }
}
