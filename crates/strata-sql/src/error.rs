//! Errors of SQL statements, each with the class a client needs to react to it (the PostgreSQL
//! wire server sends it as the SQLSTATE code).

use datafusion::arrow::error::ArrowError;
use datafusion::error::DataFusionError;

/// What went wrong, coarsely: enough to pick a SQLSTATE code and an exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The statement does not parse.
    Syntax,
    /// A table that does not exist.
    UndefinedTable,
    /// `CREATE TABLE` of a name already taken.
    DuplicateTable,
    /// A column that does not exist.
    UndefinedColumn,
    /// An INSERT of a key already present (or twice in one statement).
    UniqueViolation,
    /// NULL for a NOT NULL column.
    NotNullViolation,
    /// A value of the wrong type or out of range.
    DataException,
    /// Text longer than its column's declared length (`VARCHAR(n)`, `CHAR(n)`).
    StringTooLong,
    /// Text that does not read as a value of its column's type (a COPY field).
    InvalidText,
    /// COPY data of the wrong shape (a line with too few or too many fields).
    BadCopyData,
    /// Division by zero.
    DivisionByZero,
    /// A number outside its type's range (22003).
    NumericOutOfRange,
    /// `PREPARE` of a name already prepared in the session (42P05).
    DuplicatePreparedStatement,
    /// `EXECUTE` or `DEALLOCATE` of a name not prepared in the session (26000).
    UndefinedPreparedStatement,
    /// SQL that parses but strata or DataFusion does not support.
    FeatureNotSupported,
    /// A statement that is wrong for another reason (ambiguous names, bad options, ...).
    InvalidStatement,
    /// A table definition that cannot be (a second primary key).
    InvalidTableDefinition,
    /// 42809: the object is of another kind than the statement names (`DROP VIEW` of a table).
    WrongObjectType,
    /// A memory budget was exhausted.
    OutOfMemory,
    /// A transaction lost to a concurrent one (or was open too long to be checked): running it
    /// again may succeed.
    SerializationFailure,
    /// 40P01: a row lock's wait would never end (its holder waits for the waiter): running the
    /// transaction again may succeed.
    DeadlockDetected,
    /// A statement in a transaction block that an earlier failed statement ended.
    InFailedTransaction,
    /// A statement that cannot run inside a transaction block (DDL), or a setting that must come
    /// before the block's first query.
    ActiveTransaction,
    /// A write in a read-only transaction.
    ReadOnlyTransaction,
    /// 25P01: a statement that needs a transaction block (`SAVEPOINT`) outside one.
    NoActiveTransaction,
    /// 3B001: `RELEASE` or `ROLLBACK TO` of a savepoint the block has not set.
    UndefinedSavepoint,
    /// The database could not read or write its files.
    Io,
    /// A bug or corrupted data.
    Internal,
}

impl ErrorKind {
    /// The SQLSTATE code PostgreSQL gives this class of error.
    pub fn sqlstate(self) -> &'static str {
        match self {
            ErrorKind::Syntax => "42601",
            ErrorKind::UndefinedTable => "42P01",
            ErrorKind::DuplicateTable => "42P07",
            ErrorKind::UndefinedColumn => "42703",
            ErrorKind::UniqueViolation => "23505",
            ErrorKind::NotNullViolation => "23502",
            ErrorKind::DataException => "22000",
            ErrorKind::StringTooLong => "22001",
            ErrorKind::InvalidText => "22P02",
            ErrorKind::BadCopyData => "22P04",
            ErrorKind::DivisionByZero => "22012",
            ErrorKind::NumericOutOfRange => "22003",
            ErrorKind::DuplicatePreparedStatement => "42P05",
            ErrorKind::UndefinedPreparedStatement => "26000",
            ErrorKind::FeatureNotSupported => "0A000",
            ErrorKind::InvalidStatement => "42000",
            ErrorKind::InvalidTableDefinition => "42P16",
            ErrorKind::WrongObjectType => "42809",
            ErrorKind::OutOfMemory => "53200",
            ErrorKind::SerializationFailure => "40001",
            ErrorKind::DeadlockDetected => "40P01",
            ErrorKind::InFailedTransaction => "25P02",
            ErrorKind::ActiveTransaction => "25001",
            ErrorKind::ReadOnlyTransaction => "25006",
            ErrorKind::NoActiveTransaction => "25P01",
            ErrorKind::UndefinedSavepoint => "3B001",
            ErrorKind::Io => "58030",
            ErrorKind::Internal => "XX000",
        }
    }
}

/// A failed statement: its class and a message for people.
#[derive(Debug, Clone)]
pub struct SqlError {
    /// The class of error.
    pub kind: ErrorKind,
    /// What happened.
    pub message: String,
}

impl SqlError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        SqlError { kind, message: message.into() }
    }

    pub(crate) fn unsupported(message: impl Into<String>) -> Self {
        SqlError::new(ErrorKind::FeatureNotSupported, message)
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        SqlError::new(ErrorKind::InvalidStatement, message)
    }
}

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SqlError {}

impl From<strata::Error> for SqlError {
    fn from(e: strata::Error) -> Self {
        SqlError::of_strata(&e)
    }
}

impl SqlError {
    fn of_strata(e: &strata::Error) -> Self {
        use strata::Error as E;
        let kind = match e {
            E::UnknownTable(_) => ErrorKind::UndefinedTable,
            E::TableExists(_) => ErrorKind::DuplicateTable,
            E::UnknownColumn { .. } => ErrorKind::UndefinedColumn,
            E::TypeMismatch { message, .. } if message.contains("NOT NULL") => ErrorKind::NotNullViolation,
            E::TypeMismatch { .. } => ErrorKind::DataException,
            E::InvalidArgument(_) => ErrorKind::InvalidStatement,
            E::OutOfMemory(_) => ErrorKind::OutOfMemory,
            E::Conflict { .. } | E::TxnTooOld { .. } | E::TableChanged { .. } => ErrorKind::SerializationFailure,
            E::Deadlock { .. } => ErrorKind::DeadlockDetected,
            E::Io { .. } => ErrorKind::Io,
            _ => ErrorKind::Internal,
        };
        SqlError::new(kind, e.to_string())
    }
}

impl From<DataFusionError> for SqlError {
    fn from(e: DataFusionError) -> Self {
        // A strata error raised inside a scan travels through DataFusion as an external error.
        let e = e.find_root();
        if let DataFusionError::External(inner) = &e {
            if let Some(s) = inner.downcast_ref::<strata::Error>() {
                return SqlError::of_strata(s);
            }
            if let Some(s) = inner.downcast_ref::<SqlError>() {
                return s.clone();
            }
        }
        let text = e.to_string();
        if text.contains("non-nullable but contains null") {
            let message = format!("NULL in a NOT NULL column ({text})");
            return SqlError::new(ErrorKind::NotNullViolation, message);
        }
        let kind = match &e {
            DataFusionError::SQL(..) => ErrorKind::Syntax,
            DataFusionError::NotImplemented(_) => ErrorKind::FeatureNotSupported,
            DataFusionError::ResourcesExhausted(_) => ErrorKind::OutOfMemory,
            DataFusionError::ArrowError(a, _) if a.to_string().contains("Divide by zero") => ErrorKind::DivisionByZero,
            // An integer cast that does not fit (an assignment out of the column's range).
            DataFusionError::ArrowError(a, _) if matches!(a.as_ref(), ArrowError::CastError(m) if m.starts_with("Can't cast value")) => {
                ErrorKind::NumericOutOfRange
            }
            DataFusionError::ArrowError(a, _) if matches!(a.as_ref(), ArrowError::ArithmeticOverflow(_)) => {
                ErrorKind::NumericOutOfRange
            }
            DataFusionError::ArrowError(..) | DataFusionError::Execution(_) => ErrorKind::DataException,
            DataFusionError::SchemaError(s, _) => match s.as_ref() {
                datafusion::common::SchemaError::FieldNotFound { .. } => ErrorKind::UndefinedColumn,
                _ => ErrorKind::InvalidStatement,
            },
            DataFusionError::Plan(m) if m.contains("table") && m.contains("not found") => ErrorKind::UndefinedTable,
            DataFusionError::Plan(_) => ErrorKind::InvalidStatement,
            DataFusionError::IoError(_) => ErrorKind::Io,
            _ => ErrorKind::Internal,
        };
        let message = match &e {
            DataFusionError::SQL(p, _) => p.to_string(),
            DataFusionError::Plan(m) | DataFusionError::Execution(m) | DataFusionError::NotImplemented(m) => m.clone(),
            _ => text,
        };
        SqlError::new(kind, message)
    }
}

/// A strata error carried through DataFusion.
pub(crate) fn external(e: strata::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}
