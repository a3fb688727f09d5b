//! `strata.Database`: one open database, its tables and SQL over them.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use arrow_pyarrow::{FromPyArrow, IntoPyArrow};
use arrow_schema::{DataType, Schema as ArrowSchema};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use strata::{Column, ColumnType, Db, Engine, KeyRange, Options, Schema, TableOptions};
use strata_sql::datafusion::common::ParamValues;
use strata_sql::{Output, Prepared, SqlEngine};

use crate::errors;

/// An open database and the SQL engine over it.
pub(crate) struct Open {
    pub(crate) db: Arc<Db>,
    pub(crate) sql: SqlEngine,
}

/// An open strata database. Use it as a context manager (`with strata.open(path) as db:`) or
/// call `close()`; the directory stays locked against other processes until then.
#[pyclass(module = "strata._strata", frozen)]
pub struct Database {
    path: PathBuf,
    open: Mutex<Option<Open>>,
}

impl Database {
    pub(crate) fn open(py: Python<'_>, path: PathBuf, create: bool) -> PyResult<Database> {
        let opts = Options { create_if_missing: create, ..Options::default() };
        let dir = path.clone();
        let db = py.detach(move || Db::open(&dir, opts)).map_err(errors::engine)?;
        let db = Arc::new(db);
        let sql = SqlEngine::new(db.clone()).map_err(errors::sql)?;
        Ok(Database { path, open: Mutex::new(Some(Open { db, sql })) })
    }

    fn state(&self) -> MutexGuard<'_, Option<Open>> {
        // A panic while the lock was held cannot leave the Option half-written.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The database and SQL engine, or the error for a closed database.
    pub(crate) fn handles(&self) -> PyResult<(Arc<Db>, SqlEngine)> {
        match self.state().as_ref() {
            Some(o) => Ok((o.db.clone(), o.sql.clone())),
            None => Err(errors::closed()),
        }
    }
}

/// A pyarrow table of a query's batches.
pub(crate) fn to_pyarrow<'py>(
    py: Python<'py>,
    schema: arrow_schema::SchemaRef,
    batches: Vec<arrow_array::RecordBatch>,
) -> PyResult<Bound<'py, PyAny>> {
    // Batches may carry a schema that differs from the plan's in field metadata or
    // nullability only; pyarrow wants one schema, so take the batches' where they agree.
    let schema = match batches.first() {
        Some(b) if batches.iter().all(|x| x.schema() == b.schema()) => b.schema(),
        _ => schema,
    };
    let batches = batches
        .into_iter()
        .map(|b| if b.schema() == schema { Ok(b) } else { b.with_schema(schema.clone()) })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let table = arrow_pyarrow::Table::try_new(batches, schema).map_err(|e| PyValueError::new_err(e.to_string()))?;
    table.into_pyarrow(py)
}

/// The strata type of an Arrow type, for `create_table` from a pyarrow schema.
fn column_type(name: &str, t: &DataType) -> PyResult<ColumnType> {
    Ok(match t {
        DataType::Int64 => ColumnType::BigInt,
        DataType::Int32 => ColumnType::Int,
        DataType::Int16 => ColumnType::SmallInt,
        DataType::Int8 => ColumnType::TinyInt,
        DataType::Float64 => ColumnType::Double,
        DataType::Float32 => ColumnType::Real,
        DataType::Boolean => ColumnType::Boolean,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => ColumnType::Text,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => ColumnType::Bytea,
        DataType::Date32 => ColumnType::Date,
        DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None) => ColumnType::Timestamp,
        DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some(_)) => ColumnType::TimestampTz,
        other => {
            return Err(PyTypeError::new_err(format!(
                "column `{name}` has type {other}; strata stores int8/16/32/64, float32/64, bool, string, binary, \
                 date32 and timestamp[us] (with or without a time zone)"
            )))
        }
    })
}

#[pymethods]
impl Database {
    /// The database directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Whether `close()` has been called.
    #[getter]
    fn closed(&self) -> bool {
        self.state().is_none()
    }

    /// Runs SQL. A query returns a `pyarrow.Table`; INSERT, UPDATE and DELETE return the number
    /// of rows they touched; CREATE TABLE and DROP TABLE return None. With several statements
    /// separated by `;`, each runs in order (each atomically) and the last one's result is
    /// returned. `params` fill `$1`, `$2`, ... of a single statement.
    #[pyo3(signature = (query, params = None))]
    fn sql<'py>(
        &self,
        py: Python<'py>,
        query: &str,
        params: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let (_, engine) = self.handles()?;
        let rt = crate::runtime()?;
        let output = match params {
            None => {
                let query = query.to_string();
                let outputs = py.detach(|| rt.block_on(engine.execute(&query))).map_err(errors::sql)?;
                match outputs.into_iter().last() {
                    Some(o) => o,
                    None => return Ok(None),
                }
            }
            Some(params) => {
                let values: Vec<_> = params.try_iter()?.map(|p| crate::convert::param(&p?)).collect::<PyResult<_>>()?;
                let mut stmts = engine.parse(query).map_err(errors::sql)?;
                if stmts.len() != 1 {
                    return Err(PyValueError::new_err(format!(
                        "parameters go with exactly one statement; the query has {}",
                        stmts.len()
                    )));
                }
                let stmt = stmts.remove(0);
                py.detach(|| {
                    rt.block_on(async {
                        let prepared = engine.prepare(&stmt).await?;
                        let values = typed_params(&prepared, values)?;
                        engine.execute_prepared(&prepared, Some(ParamValues::from(values))).await
                    })
                })
                .map_err(errors::sql)?
            }
        };
        match output {
            Output::Rows { schema, batches } => Ok(Some(to_pyarrow(py, schema, batches)?)),
            Output::Command { tag: "INSERT" | "UPDATE" | "DELETE", rows } => {
                Ok(Some(rows.into_pyobject(py)?.into_any()))
            }
            Output::Command { .. } => Ok(None),
        }
    }

    /// The table called `name`.
    fn table(slf: &Bound<'_, Self>, name: &str) -> PyResult<crate::table::Table> {
        let (db, _) = slf.get().handles()?;
        let table = db.table(name).map_err(errors::engine)?;
        Ok(crate::table::Table::new(table, slf.clone().unbind()))
    }

    /// Begins a transaction: reads see the database as it was now plus the transaction's own
    /// writes, and its writes are applied together at `commit()` or not at all (snapshot
    /// isolation; the first of two transactions writing one row to commit wins). Use it as a
    /// context manager: `with db.transaction() as tx:` commits at the end of the block and
    /// rolls back if the block raises. `read_only` transactions refuse writes and never conflict.
    #[pyo3(signature = (*, read_only = false))]
    fn transaction(slf: &Bound<'_, Self>, read_only: bool) -> PyResult<crate::txn::Transaction> {
        let (db, _) = slf.get().handles()?;
        let tx = db.begin(&strata::TxnOptions { read_only, ..Default::default() }).map_err(errors::engine)?;
        Ok(crate::txn::Transaction::new(tx, slf.clone().unbind()))
    }

    /// The names of the tables, sorted.
    fn tables(&self) -> PyResult<Vec<String>> {
        let (db, _) = self.handles()?;
        let mut names = db.table_names();
        names.sort();
        Ok(names)
    }

    /// Creates a table from a pyarrow schema (field nullability becomes NOT NULL), with the
    /// named primary-key columns, an optional column-group `layout` (as in `strata create`) and
    /// the storage `engine` (`"lsm"` or `"lineage"`).
    #[pyo3(signature = (name, schema, primary_key, *, layout = None, engine = "lsm"))]
    fn create_table(
        slf: &Bound<'_, Self>,
        name: &str,
        schema: &Bound<'_, PyAny>,
        primary_key: Vec<String>,
        layout: Option<String>,
        engine: &str,
    ) -> PyResult<crate::table::Table> {
        let arrow = ArrowSchema::from_pyarrow_bound(schema)?;
        let columns = arrow
            .fields()
            .iter()
            .map(|f| {
                let ty = column_type(f.name(), f.data_type())?;
                Ok(if f.is_nullable() { Column::new(f.name(), ty) } else { Column::not_null(f.name(), ty) })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let pk: Vec<&str> = primary_key.iter().map(String::as_str).collect();
        let schema = Schema::new(columns, &pk).map_err(errors::engine)?;
        let engine = match engine {
            "lsm" => Engine::Lsm,
            "lineage" => Engine::Lineage,
            other => return Err(PyValueError::new_err(format!("engine is 'lsm' or 'lineage', not {other:?}"))),
        };
        let options = match layout {
            Some(l) => TableOptions::with_layout(l),
            None => TableOptions::default(),
        }
        .with_engine(engine);
        let (db, _) = slf.get().handles()?;
        let table = db.create_table(name, schema, options).map_err(errors::engine)?;
        Ok(crate::table::Table::new(table, slf.clone().unbind()))
    }

    /// Drops the table called `name` and its data.
    fn drop_table(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let (db, _) = self.handles()?;
        py.detach(|| db.drop_table(name)).map_err(errors::engine)
    }

    /// Writes the in-memory tables to disk (the WAL already makes every write durable).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let (db, _) = self.handles()?;
        py.detach(|| db.flush()).map_err(errors::engine)
    }

    /// Compacts `table` (every table if None) fully and waits for it.
    #[pyo3(signature = (table = None))]
    fn compact(&self, py: Python<'_>, table: Option<String>) -> PyResult<()> {
        let (db, _) = self.handles()?;
        py.detach(|| {
            let names = match table {
                Some(t) => vec![t],
                None => db.table_names(),
            };
            for name in names {
                db.compact_range(&name, &KeyRange::all())?;
            }
            db.wait_for_compactions()
        })
        .map_err(errors::engine)
    }

    /// Closes the database: stops background work and releases the directory. Calling it
    /// again does nothing; any use afterwards raises `strata.Error` (kind `closed`).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let Some(open) = self.state().take() else {
            return Ok(());
        };
        let Open { db, sql } = open;
        drop(sql);
        match Arc::try_unwrap(db) {
            Ok(db) => py.detach(|| db.close()).map_err(errors::engine),
            Err(db) => {
                // A statement still running on another thread holds the database: keep it
                // open for that thread, and let the caller retry.
                let sql = SqlEngine::new(db.clone()).map_err(errors::sql)?;
                *self.state() = Some(Open { db, sql });
                Err(errors::error(
                    "busy",
                    None,
                    "database is in use by a running statement; close it when that ends".into(),
                ))
            }
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!("<strata.Database {} ({state})>", self.path.display())
    }
}

/// Parameters cast to the types the statement expects where DataFusion inferred them (`$1`
/// compared with an INT column is an INT), so Python's int and float fit any numeric column.
fn typed_params(
    prepared: &Prepared,
    values: Vec<strata_sql::datafusion::scalar::ScalarValue>,
) -> Result<Vec<strata_sql::datafusion::scalar::ScalarValue>, strata_sql::SqlError> {
    let types = prepared.parameter_types()?;
    if values.len() != types.len() {
        return Err(strata_sql::SqlError::new(
            strata_sql::ErrorKind::DataException,
            format!("the statement has {} parameters, {} were given", types.len(), values.len()),
        ));
    }
    values
        .into_iter()
        .zip(types)
        .map(|(v, t)| match t {
            Some(t) if !v.is_null() && v.data_type() != t => v.cast_to(&t).map_err(|e| {
                strata_sql::SqlError::new(strata_sql::ErrorKind::DataException, format!("parameter of type {t}: {e}"))
            }),
            Some(t) if v.is_null() => strata_sql::datafusion::scalar::ScalarValue::try_from(&t).map_err(Into::into),
            _ => Ok(v),
        })
        .collect()
}
