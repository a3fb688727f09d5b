//! Errors are values: every failure a caller can see is one variant of [`Error`], carrying enough
//! context (table, column, file, offset) to act on without reading the source.

use std::path::PathBuf;

/// The result type of every fallible strata call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in strata.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system IO error, with the file it happened on.
    #[error("io error on {path}: {source}")]
    Io {
        /// The file or directory being accessed.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Stored data failed a checksum or could not be decoded.
    #[error("corruption in {path} at offset {offset}: {reason}")]
    Corruption {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset of the damaged record or block.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// No table of that name exists.
    #[error("unknown table `{0}`")]
    UnknownTable(String),
    /// A table of that name already exists.
    #[error("table `{0}` already exists")]
    TableExists(String),
    /// A column name that the table does not have.
    #[error("table `{table}` has no column `{column}`")]
    UnknownColumn {
        /// Table name.
        table: String,
        /// The name that was not found.
        column: String,
    },
    /// A value of the wrong type, a NULL in a NOT NULL column, or a row of the wrong shape.
    #[error("type mismatch in table `{table}`, column `{column}`: {message}")]
    TypeMismatch {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
        /// What was expected and what was given.
        message: String,
    },
    /// A schema or option that cannot be used.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The database directory is locked by another process or handle.
    #[error("database at {0} is locked by another process")]
    Locked(PathBuf),
    /// An earlier background or WAL failure put the database into read-only mode.
    #[error("database is read-only after an earlier failure: {0}")]
    Poisoned(String),
    /// The database has been closed.
    #[error("database is closed")]
    Closed,
    /// A write would take lineage-engine tables past their memory budget
    /// ([`Options::lineage_memory_budget`](crate::Options::lineage_memory_budget)); nothing of
    /// it was written.
    #[error("out of memory budget: {0}")]
    OutOfMemory(String),
    /// A transaction lost to a concurrent one: another commit wrote this row after the
    /// transaction's snapshot was taken (first committer wins). Nothing of the transaction was
    /// written; running it again reads the newer row.
    #[error(
        "transaction conflict: row {key} of table `{table}` was written by another commit after this \
         transaction's snapshot; nothing of the transaction was written, retry it"
    )]
    Conflict {
        /// Table name.
        table: String,
        /// The row's key, as values.
        key: String,
    },
    /// A transaction was to wait for a row lock ([`Transaction::lock`](crate::Transaction::lock))
    /// whose holder waits, directly or through others, for a row it holds: the wait would never
    /// end, so it was refused. Roll the transaction back (releasing its locks) and run it again.
    #[error(
        "deadlock: waiting for row {key} of table `{table}` would never end, as its holder waits for a row \
         this transaction holds; roll the transaction back and retry it"
    )]
    Deadlock {
        /// Table name.
        table: String,
        /// The row's key, as values.
        key: String,
    },
    /// A transaction stayed open so long that the commits after its snapshot no longer fit the
    /// memory kept for checking them ([`Options::txn_window_bytes`](crate::Options::txn_window_bytes)),
    /// so it cannot be checked; nothing of it was written.
    #[error(
        "transaction too old: its snapshot (sequence {snapshot}) is older than the oldest commit still \
         kept for checking (sequence {horizon}; Options::txn_window_bytes); nothing of it was written, retry it"
    )]
    TxnTooOld {
        /// The transaction's snapshot.
        snapshot: u64,
        /// Commits at or below this are no longer kept.
        horizon: u64,
    },
    /// An ingest ([`Table::ingest`](crate::Table::ingest)) found, when it came to install its
    /// files, writes to its key range that arrived while it built them (or another change that
    /// leaves its files nowhere to go); nothing of it was ingested, and running it again may
    /// succeed.
    #[error("ingest into `{table}` not installed: {reason}; nothing of it was ingested, retry it")]
    IngestConflict {
        /// Table name.
        table: String,
        /// What was found.
        reason: String,
    },
    /// [`Db::replace_table`](crate::Db::replace_table) found the table written after the point
    /// its replacement was copied at; nothing was replaced, and running it again may succeed.
    #[error("table `{table}` was written after sequence {since}, while its replacement was built; nothing was replaced, retry it")]
    TableChanged {
        /// Table name.
        table: String,
        /// The sequence number the replacement was built from.
        since: u64,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    pub(crate) fn corruption(path: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption { path: path.into(), offset, reason: reason.into() }
    }

    /// A short, stable name of the error's kind (`unknown_table`, `type_mismatch`, `corruption`,
    /// ...), as the CLI's JSON protocol and the Python package report it.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::Corruption { .. } => "corruption",
            Error::UnknownTable(_) => "unknown_table",
            Error::TableExists(_) => "table_exists",
            Error::UnknownColumn { .. } => "unknown_column",
            Error::TypeMismatch { .. } => "type_mismatch",
            Error::InvalidArgument(_) => "invalid_argument",
            Error::Locked(_) => "locked",
            Error::Poisoned(_) => "read_only",
            Error::Closed => "closed",
            Error::OutOfMemory(_) => "out_of_memory",
            Error::Conflict { .. } => "conflict",
            Error::TxnTooOld { .. } => "txn_too_old",
            Error::Deadlock { .. } => "deadlock",
            Error::IngestConflict { .. } => "ingest_conflict",
            Error::TableChanged { .. } => "table_changed",
        }
    }

    /// True when running the transaction (or ingest) again may succeed: [`Error::Conflict`],
    /// [`Error::Deadlock`], [`Error::TxnTooOld`], [`Error::IngestConflict`] and
    /// [`Error::TableChanged`].
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Conflict { .. }
                | Error::Deadlock { .. }
                | Error::TxnTooOld { .. }
                | Error::IngestConflict { .. }
                | Error::TableChanged { .. }
        )
    }

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}
