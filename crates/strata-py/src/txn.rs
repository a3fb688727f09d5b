//! `strata.Transaction`: reads and writes of one snapshot-isolated transaction (from
//! `Database.transaction()`), committed as a whole or not at all. As a context manager it
//! commits when the block ends normally and rolls back when it raises.

use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use strata::WriteOptions;

use crate::database::Database;
use crate::errors;
use crate::table::{self, ScanArgs, Table};

/// The engine's transaction while it is open; `None` once committed or rolled back.
pub(crate) struct TxnCell(Mutex<Option<strata::Transaction>>);

impl TxnCell {
    fn lock(&self) -> MutexGuard<'_, Option<strata::Transaction>> {
        // A panic while the lock was held cannot leave the Option half-written.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the open transaction.
    pub(crate) fn run<R>(&self, f: impl FnOnce(&mut strata::Transaction) -> strata::Result<R>) -> strata::Result<R> {
        match self.lock().as_mut() {
            Some(tx) => f(tx),
            None => Err(strata::Error::InvalidArgument(
                "the transaction has ended (it was committed or rolled back); begin a new one".into(),
            )),
        }
    }

    fn take(&self) -> Option<strata::Transaction> {
        self.lock().take()
    }
}

/// A transaction: see `Database.transaction`.
#[pyclass(module = "strata._strata", frozen)]
pub struct Transaction {
    cell: TxnCell,
    db: Py<Database>,
}

impl Transaction {
    pub(crate) fn new(tx: strata::Transaction, db: Py<Database>) -> Transaction {
        Transaction { cell: TxnCell(Mutex::new(Some(tx))), db }
    }

    /// The table's engine handle, refused when it belongs to another database.
    fn table<'a>(&self, py: Python<'_>, t: &'a Bound<'_, Table>) -> PyResult<&'a strata::Table> {
        let _ = self.db.bind(py).get().handles()?;
        Ok(t.get().inner())
    }
}

#[pymethods]
impl Transaction {
    /// The row of `table` with primary key `key` as the transaction sees it (its own writes
    /// over its snapshot), as a dict (only `columns` if given), or None.
    #[pyo3(signature = (table, key, columns = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        table: &Bound<'py, Table>,
        key: &Bound<'py, PyAny>,
        columns: Option<Vec<String>>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        table::get_row(py, self.table(py, table)?, key, columns, Some(&self.cell))
    }

    /// Writes a row (as `Table.insert`) when the transaction commits.
    fn insert(&self, py: Python<'_>, table: &Bound<'_, Table>, row: &Bound<'_, PyAny>) -> PyResult<()> {
        table.get().writable(py)?;
        table::insert_row(py, self.table(py, table)?, row, Some(&self.cell))
    }

    /// Sets columns of a row (as `Table.update`) when the transaction commits.
    #[pyo3(signature = (table, key, values = None, **kwargs))]
    fn update(
        &self,
        py: Python<'_>,
        table: &Bound<'_, Table>,
        key: &Bound<'_, PyAny>,
        values: Option<&Bound<'_, PyDict>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        table.get().writable(py)?;
        table::update_row(py, self.table(py, table)?, key, [values, kwargs], Some(&self.cell))
    }

    /// Deletes a row (as `Table.delete`) when the transaction commits.
    fn delete(&self, py: Python<'_>, table: &Bound<'_, Table>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        table.get().writable(py)?;
        table::delete_row(py, self.table(py, table)?, key, Some(&self.cell))
    }

    /// Reads rows as `Table.scan` does, as the transaction sees them.
    #[pyo3(signature = (table, columns = None, *, r#where = None, start = None, end = None, limit = None))]
    #[allow(clippy::too_many_arguments)]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        table: &Bound<'py, Table>,
        columns: Option<Vec<String>>,
        r#where: Option<&str>,
        start: Option<&Bound<'py, PyAny>>,
        end: Option<&Bound<'py, PyAny>>,
        limit: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (_db, engine) = self.db.bind(py).get().handles()?;
        let args = ScanArgs { columns, r#where, start, end, limit };
        table::scan_table(py, table.get().inner(), &engine, args, Some(&self.cell))
    }

    /// Applies every write of the transaction, or none. Raises `strata.Error` with kind
    /// `"conflict"` when another commit wrote one of its rows after it began (a write to such a
    /// row raises it at once); nothing of it is written then, and running it again may succeed.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let tx = self.cell.take().ok_or_else(|| {
            errors::engine(strata::Error::InvalidArgument("the transaction has already ended".into()))
        })?;
        py.detach(|| tx.commit(&WriteOptions::default())).map_err(errors::engine)
    }

    /// Discards the transaction's writes. Nothing happens if it has already ended.
    fn rollback(&self) {
        drop(self.cell.take());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Commits when the block ended normally, rolls back when it raised (the exception goes on).
    #[pyo3(signature = (*exc))]
    fn __exit__(&self, py: Python<'_>, exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        let raised = exc.get_item(0).is_ok_and(|e| !e.is_none());
        if raised {
            self.rollback();
        } else if self.cell.lock().is_some() {
            self.commit(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match self.cell.lock().as_ref() {
            Some(tx) => format!("<strata.Transaction at sequence {}>", tx.snapshot_seq()),
            None => "<strata.Transaction (ended)>".into(),
        }
    }
}
