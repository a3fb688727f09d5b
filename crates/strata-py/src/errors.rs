//! strata's errors as Python exceptions.
//!
//! Everything the engine or the SQL layer refuses is a `strata.Error` whose `kind` names the
//! cause (`unknown_table`, `type_mismatch`, `corruption`, `sql`, ...) and whose `sqlstate` is the
//! PostgreSQL code a SQL error carries (`None` otherwise). A Python value that cannot become a
//! column's type is a plain `TypeError`, `ValueError` or `OverflowError`, raised before anything
//! is written.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(strata, Error, PyException, "An error reported by strata: see `kind` and `sqlstate`.");

/// A `strata.Error` with its attributes set.
pub(crate) fn error(kind: &str, sqlstate: Option<&str>, message: String) -> PyErr {
    Python::attach(|py| {
        let err = Error::new_err(message);
        let value = err.value(py);
        // Setting attributes on a fresh exception instance cannot fail short of memory
        // exhaustion; the exception is still raised if it does.
        let _ = value.setattr("kind", kind);
        let _ = value.setattr("sqlstate", sqlstate);
        err
    })
}

/// The exception for an engine error.
pub(crate) fn engine(e: strata::Error) -> PyErr {
    error(e.kind(), None, e.to_string())
}

/// The exception for an engine error, with a note after its message.
pub(crate) fn engine_noted(e: strata::Error, note: &str) -> PyErr {
    error(e.kind(), None, format!("{e} {note}"))
}

/// The exception for a SQL error.
pub(crate) fn sql(e: strata_sql::SqlError) -> PyErr {
    let state = e.kind.sqlstate();
    error("sql", Some(state), e.message)
}

/// The exception for using a closed database.
pub(crate) fn closed() -> PyErr {
    error("closed", None, "database is closed".into())
}
