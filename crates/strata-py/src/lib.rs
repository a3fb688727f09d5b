//! Python bindings for strata (`import strata`): open a database, run SQL, read and write rows,
//! and move data in and out as pyarrow tables without copying it.
//!
//! The classes here are the `strata._strata` extension module; `python/strata/__init__.py`
//! re-exports them and `python/strata/_strata.pyi` types them. Every call that touches the
//! database releases the GIL while it runs.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod convert;
mod database;
mod errors;
mod table;
mod txn;

use pyo3::prelude::*;

/// The runtime SQL statements run on (DataFusion is async): one per process, made on first use.
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: std::sync::OnceLock<std::io::Result<tokio::runtime::Runtime>> = std::sync::OnceLock::new();
    let rt = RUNTIME
        .get_or_init(|| tokio::runtime::Builder::new_multi_thread().thread_name("strata-sql").enable_all().build());
    rt.as_ref().map_err(|e| errors::Error::new_err(format!("cannot start the SQL runtime: {e}")))
}

/// Opens the database in directory `path`, creating it unless `create` is false.
#[pyfunction]
#[pyo3(signature = (path, *, create = true))]
fn open(py: Python<'_>, path: std::path::PathBuf, create: bool) -> PyResult<database::Database> {
    database::Database::open(py, path, create)
}

#[pymodule]
fn _strata(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_class::<database::Database>()?;
    m.add_class::<table::Table>()?;
    m.add_class::<txn::Transaction>()?;
    m.add("Error", m.py().get_type::<errors::Error>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
