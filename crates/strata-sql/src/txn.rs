//! Sessions and their transaction blocks, as PostgreSQL runs them.
//!
//! A [`Session`] is one client's sequence of statements. Outside a block every statement is a
//! transaction of its own: a query reads one snapshot, and INSERT, UPDATE and DELETE run as a
//! one-statement [`strata::Transaction`] that is committed at the statement's end (run again,
//! invisibly to the client, when it loses a conflict: nothing of it was seen). `BEGIN` opens a
//! block: its first statement takes the snapshot every later statement of the block reads, with
//! the block's own writes laid over it; `COMMIT` applies them all or, losing a conflict, none
//! (SQLSTATE 40001). A statement that fails inside a block fails the block: later statements get
//! 25P02 until `COMMIT` or `ROLLBACK` ends it (a `COMMIT` then rolls back, as PostgreSQL's does).
//!
//! READ COMMITTED is the default, as in PostgreSQL: each statement of a block reads a new
//! snapshot. REPEATABLE READ is strata's snapshot isolation, as it is PostgreSQL's: every
//! statement reads the block's first snapshot. READ UNCOMMITTED runs as READ COMMITTED, as in
//! PostgreSQL; SERIALIZABLE is refused rather than silently weakened.
//!
//! Under READ COMMITTED, UPDATE and DELETE lock the rows they change until the block ends
//! ([`strata::Transaction::lock`]), so a second writer of a row waits for the first, as in
//! PostgreSQL; when the first commits, the statement runs again at a new snapshot (keeping the
//! locks it holds) and changes the row as committed, so no update is lost and none fails. A wait
//! that would never end fails with 40P01. Under REPEATABLE READ strata never waits, where
//! PostgreSQL waits and then fails if the holder committed: the write fails at once with 40001
//! when the row was committed after the block's snapshot, and of two blocks still open the first
//! to commit wins. INSERT takes no lock: of two blocks inserting one key, the second to commit
//! fails with 40001 (PostgreSQL's would wait, then fail with 23505).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::sqlparser::ast::{
    Set, Statement as AstStatement, TransactionAccessMode, TransactionIsolationLevel, TransactionMode,
};
use strata::{Isolation, Locked, Table, Transaction, TxnOptions, Value, WriteOptions};

use crate::error::{ErrorKind, SqlError};
use crate::{CopyIn, Named, Output, Prepared, SqlEngine};

/// Where a session stands, as PostgreSQL reports it in ReadyForQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnStatus {
    /// No block open: each statement commits on its own (`I`).
    Idle,
    /// In a block (`T`).
    InBlock,
    /// In a block that a failed statement ended: only `COMMIT`/`ROLLBACK` are taken (`E`).
    Failed,
}

impl TxnStatus {
    fn code(self) -> u8 {
        match self {
            TxnStatus::Idle => 0,
            TxnStatus::InBlock => 1,
            TxnStatus::Failed => 2,
        }
    }

    fn of_code(c: u8) -> TxnStatus {
        match c {
            1 => TxnStatus::InBlock,
            2 => TxnStatus::Failed,
            _ => TxnStatus::Idle,
        }
    }
}

/// A transaction-control statement, as planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnControl {
    kind: ControlKind,
    /// The command tag PostgreSQL answers it with.
    tag: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ControlKind {
    /// `BEGIN` / `START TRANSACTION`, with an access mode and an isolation level if given.
    Begin { read_only: Option<bool>, isolation: Option<Isolation> },
    /// `COMMIT` / `END`.
    Commit,
    /// `ROLLBACK` / `ABORT`.
    Rollback,
    /// `SET TRANSACTION` (this block) or `SET SESSION CHARACTERISTICS AS TRANSACTION` (later
    /// blocks and statements).
    Set { read_only: Option<bool>, isolation: Option<Isolation>, session: bool },
    /// `SAVEPOINT name`: remembers the block's writes so far under `name`.
    Savepoint(String),
    /// `RELEASE [SAVEPOINT] name`: forgets `name` and the savepoints set after it.
    Release(String),
    /// `ROLLBACK TO [SAVEPOINT] name`: undoes the writes made since `name` was set (keeping
    /// it), also in a failed block, which it makes a block again.
    RollbackTo(String),
}

/// The transaction-control statement `ast` is, if it is one: `Ok(None)` for other statements.
pub(crate) fn control(ast: &AstStatement) -> Result<Option<TxnControl>, SqlError> {
    let c = match ast {
        AstStatement::StartTransaction { modes, begin, statements, exception, modifier, .. } => {
            if !statements.is_empty() || exception.is_some() || modifier.is_some() {
                return Err(SqlError::unsupported(format!(
                    "{ast}: strata takes BEGIN [ISOLATION LEVEL ...] [READ ONLY]"
                )));
            }
            let (read_only, isolation) = modes_of(modes)?;
            TxnControl {
                kind: ControlKind::Begin { read_only, isolation },
                tag: if *begin { "BEGIN" } else { "START TRANSACTION" },
            }
        }
        AstStatement::Commit { chain, modifier, .. } => {
            if *chain || modifier.is_some() {
                return Err(SqlError::unsupported(format!("{ast}")));
            }
            TxnControl { kind: ControlKind::Commit, tag: "COMMIT" }
        }
        AstStatement::Rollback { chain, savepoint } => {
            if *chain {
                return Err(SqlError::unsupported(format!("{ast}")));
            }
            match savepoint {
                Some(name) => {
                    TxnControl { kind: ControlKind::RollbackTo(crate::ddl::normalize(name)), tag: "ROLLBACK" }
                }
                None => TxnControl { kind: ControlKind::Rollback, tag: "ROLLBACK" },
            }
        }
        AstStatement::Savepoint { name } => {
            TxnControl { kind: ControlKind::Savepoint(crate::ddl::normalize(name)), tag: "SAVEPOINT" }
        }
        AstStatement::ReleaseSavepoint { name } => {
            TxnControl { kind: ControlKind::Release(crate::ddl::normalize(name)), tag: "RELEASE" }
        }
        AstStatement::Set(Set::SetTransaction { modes, snapshot, session }) => {
            if snapshot.is_some() {
                return Err(SqlError::unsupported("SET TRANSACTION SNAPSHOT"));
            }
            let (read_only, isolation) = modes_of(modes)?;
            TxnControl { kind: ControlKind::Set { read_only, isolation, session: *session }, tag: "SET" }
        }
        _ => return Ok(None),
    };
    Ok(Some(c))
}

/// A mode list's access mode and isolation level (SERIALIZABLE is refused).
fn modes_of(modes: &[TransactionMode]) -> Result<(Option<bool>, Option<Isolation>), SqlError> {
    let mut read_only = None;
    let mut isolation = None;
    for m in modes {
        match m {
            TransactionMode::AccessMode(a) => read_only = Some(*a == TransactionAccessMode::ReadOnly),
            TransactionMode::IsolationLevel(TransactionIsolationLevel::Serializable) => {
                return Err(SqlError::unsupported(
                    "isolation level SERIALIZABLE: strata gives snapshot isolation (REPEATABLE READ), which \
                     allows write skew; it refuses SERIALIZABLE rather than run it weaker than asked",
                ))
            }
            TransactionMode::IsolationLevel(
                TransactionIsolationLevel::RepeatableRead | TransactionIsolationLevel::Snapshot,
            ) => isolation = Some(Isolation::Snapshot),
            TransactionMode::IsolationLevel(
                TransactionIsolationLevel::ReadCommitted | TransactionIsolationLevel::ReadUncommitted,
            ) => isolation = Some(Isolation::ReadCommitted),
        }
    }
    Ok((read_only, isolation))
}

/// A block's transaction, shared by the scans of the statement running in it.
pub(crate) struct TxnCell(parking_lot::RwLock<Option<Transaction>>);

impl TxnCell {
    fn new(tx: Transaction) -> Arc<TxnCell> {
        Arc::new(TxnCell(parking_lot::RwLock::new(Some(tx))))
    }

    fn ended() -> strata::Error {
        strata::Error::InvalidArgument("the transaction has ended".into())
    }

    /// Runs `f` on the transaction (reads).
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Transaction) -> strata::Result<T>) -> strata::Result<T> {
        f(self.0.read().as_ref().ok_or_else(TxnCell::ended)?)
    }

    /// Runs `f` on the transaction (writes).
    pub(crate) fn write<T>(&self, f: impl FnOnce(&mut Transaction) -> strata::Result<T>) -> strata::Result<T> {
        f(self.0.write().as_mut().ok_or_else(TxnCell::ended)?)
    }

    fn take(&self) -> Option<Transaction> {
        self.0.write().take()
    }
}

/// What a running statement reads at, carried in the session's configuration for its scans.
pub(crate) enum Reads {
    /// A snapshot (a query outside a block).
    Snapshot(strata::Snapshot),
    /// A transaction, with its own writes (inside a block, and every INSERT, UPDATE and DELETE).
    Txn(Arc<TxnCell>),
}

impl std::fmt::Debug for Reads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reads::Snapshot(s) => write!(f, "Snapshot({})", s.seq()),
            Reads::Txn(_) => f.write_str("Txn"),
        }
    }
}

enum State {
    Idle,
    /// A block; its transaction begins at its first statement.
    Block {
        read_only: bool,
        isolation: Isolation,
        tx: Option<Arc<TxnCell>>,
        /// Its savepoints, oldest first, with the writes held when each was set.
        savepoints: Vec<(String, strata::Savepoint)>,
    },
    /// A block that a failed statement ended, with the block it was (kept for a `ROLLBACK TO`
    /// a savepoint set before the failure).
    Failed(Option<Box<State>>),
}

/// The session's status, readable while a statement runs, and a failure reported from outside
/// (a client's message that failed before it reached the session).
#[derive(Default)]
struct Mirror {
    status: AtomicU8,
    fail: AtomicBool,
}

/// One client's session: see the [module](self) documentation. Cheap to clone; clones are the
/// same session, and statements run one at a time. Dropping the last clone rolls back an open
/// block.
#[derive(Clone)]
pub struct Session {
    engine: SqlEngine,
    state: Arc<tokio::sync::Mutex<State>>,
    mirror: Arc<Mirror>,
    /// Blocks and autocommit writes are read-only (`SET SESSION CHARACTERISTICS AS TRANSACTION
    /// READ ONLY`).
    default_read_only: Arc<AtomicBool>,
    /// Blocks and autocommit writes run under REPEATABLE READ (`SET SESSION CHARACTERISTICS AS
    /// TRANSACTION ISOLATION LEVEL REPEATABLE READ`) rather than READ COMMITTED.
    default_repeatable_read: Arc<AtomicBool>,
    /// The statements SQL's `PREPARE` named, by name.
    named: Arc<parking_lot::Mutex<HashMap<String, Arc<Prepared>>>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("status", &self.status()).finish_non_exhaustive()
    }
}

fn no_such_statement(name: &str) -> SqlError {
    SqlError::new(ErrorKind::UndefinedPreparedStatement, format!("prepared statement \"{name}\" does not exist"))
}

fn outside_block(what: &str) -> SqlError {
    SqlError::new(ErrorKind::NoActiveTransaction, format!("{what} can only be used in transaction blocks"))
}

fn no_savepoint(name: &str) -> SqlError {
    SqlError::new(ErrorKind::UndefinedSavepoint, format!("savepoint \"{name}\" does not exist"))
}

fn in_failed_block() -> SqlError {
    SqlError::new(
        ErrorKind::InFailedTransaction,
        "current transaction is aborted, commands ignored until end of transaction block",
    )
}

fn read_only_block(what: &str) -> SqlError {
    SqlError::new(ErrorKind::ReadOnlyTransaction, format!("cannot execute {what} in a read-only transaction"))
}

impl Session {
    pub(crate) fn new(engine: SqlEngine) -> Session {
        Session {
            engine,
            state: Arc::new(tokio::sync::Mutex::new(State::Idle)),
            mirror: Arc::new(Mirror::default()),
            default_read_only: Arc::new(AtomicBool::new(false)),
            default_repeatable_read: Arc::new(AtomicBool::new(false)),
            named: Arc::default(),
        }
    }

    /// The engine the session runs on.
    pub fn engine(&self) -> &SqlEngine {
        &self.engine
    }

    /// Where the session stands (while a statement runs: where it stood before it, unless a
    /// failure was reported meanwhile).
    pub fn status(&self) -> TxnStatus {
        let s = TxnStatus::of_code(self.mirror.status.load(Ordering::Acquire));
        if s == TxnStatus::InBlock && self.mirror.fail.load(Ordering::Acquire) {
            TxnStatus::Failed
        } else {
            s
        }
    }

    /// Fails an open block as a failed statement would: a statement of the block failed before
    /// it reached the session (a client's Parse or Bind), or was cancelled. Outside a block it
    /// does nothing.
    pub fn fail_block(&self) {
        if TxnStatus::of_code(self.mirror.status.load(Ordering::Acquire)) == TxnStatus::InBlock {
            self.mirror.fail.store(true, Ordering::Release);
        }
    }

    fn set(&self, state: &mut State, new: State) {
        let status = match &new {
            State::Idle => TxnStatus::Idle,
            State::Block { .. } => TxnStatus::InBlock,
            State::Failed(_) => TxnStatus::Failed,
        };
        if status != TxnStatus::InBlock {
            self.mirror.fail.store(false, Ordering::Release);
        }
        self.mirror.status.store(status.code(), Ordering::Release);
        *state = new;
    }

    /// Fails the block `state` is (keeping it for `ROLLBACK TO`).
    fn fail(&self, state: &mut State) {
        let kept = match std::mem::replace(state, State::Idle) {
            block @ State::Block { .. } => Some(Box::new(block)),
            State::Failed(kept) => kept,
            State::Idle => None,
        };
        self.set(state, State::Failed(kept));
    }

    /// Runs every statement of `sql` in order and returns their outputs, stopping at the first
    /// that fails (see [`SqlEngine::execute`]).
    pub async fn execute(&self, sql: &str) -> Result<Vec<Output>, SqlError> {
        if let Some((prepared, params)) = self.engine.point_from_text(sql) {
            return Ok(vec![self.execute_prepared(&prepared, Some(params)).await?]);
        }
        let mut out = Vec::new();
        for stmt in self.engine.parse(sql)? {
            out.push(self.run(&stmt).await?);
        }
        Ok(out)
    }

    /// Runs one parsed statement.
    pub async fn run(&self, stmt: &datafusion::sql::parser::Statement) -> Result<Output, SqlError> {
        let prepared = self.plan(stmt).await?;
        self.execute_prepared(&prepared, None).await
    }

    /// Plans one parsed statement to run once, at once ([`Session::execute_prepared`] without
    /// parameters): what [`Session::run`] does first. A statement that does not plan fails the
    /// block it was sent in.
    pub async fn plan(&self, stmt: &datafusion::sql::parser::Statement) -> Result<Prepared, SqlError> {
        match self.engine.prepare_inner(stmt, &[], false).await.and_then(|p| self.resolve(p)) {
            Ok(p) => Ok(p),
            Err(e) => Err(self.failed_before_running(e).await),
        }
    }

    /// The error to report for a statement that failed before it ran (it did not plan, named
    /// no prepared statement, or could not be planned again): it fails the block it was sent
    /// in, and in a block already failed the block's failure is what is reported.
    async fn failed_before_running(&self, e: SqlError) -> SqlError {
        let mut state = self.state.lock().await;
        if matches!(*state, State::Failed(_)) {
            return in_failed_block();
        }
        if matches!(*state, State::Block { .. }) {
            self.fail(&mut state);
        }
        e
    }

    /// [`SqlEngine::prepare_typed`] in this session: an `EXECUTE` of a statement the session
    /// prepared with SQL's `PREPARE` becomes that statement with its arguments bound.
    pub async fn prepare_typed(
        &self,
        stmt: &datafusion::sql::parser::Statement,
        declared: &[Option<datafusion::arrow::datatypes::DataType>],
    ) -> Result<Prepared, SqlError> {
        self.resolve(self.engine.prepare_typed(stmt, declared).await?)
    }

    /// `prepared`, an `EXECUTE name (args)` made the named statement with its arguments bound.
    fn resolve(&self, prepared: Prepared) -> Result<Prepared, SqlError> {
        let Prepared::Named(Named::Execute { name, args }) = &prepared else { return Ok(prepared) };
        let statement = self.named.lock().get(name).cloned().ok_or_else(|| no_such_statement(name))?;
        self.engine.bind_arguments(name, statement, args)
    }

    /// Runs a prepared statement (see [`SqlEngine::prepare`]) in this session.
    pub async fn execute_prepared(&self, prepared: &Prepared, params: Option<ParamValues>) -> Result<Output, SqlError> {
        let resolved;
        let (prepared, params) = match prepared {
            Prepared::Named(Named::Execute { .. }) => {
                resolved = match self.resolve(prepared.clone()) {
                    Ok(r) => r,
                    Err(e) => return Err(self.failed_before_running(e).await),
                };
                match &resolved {
                    Prepared::Bound(b) => (b.statement.as_ref(), Some(b.params.clone())),
                    other => (other, params),
                }
            }
            Prepared::Bound(b) => (b.statement.as_ref(), Some(b.params.clone())),
            other => (other, params),
        };
        let replanned = match self.engine.current(prepared).await {
            Ok(r) => r,
            Err(e) => return Err(self.failed_before_running(e).await),
        };
        let prepared = replanned.as_ref().unwrap_or(prepared);
        let mut state = self.state.lock().await;
        if self.mirror.fail.swap(false, Ordering::AcqRel) && matches!(*state, State::Block { .. }) {
            self.fail(&mut state);
        }
        if let Prepared::Control(c) = prepared {
            return self.control(&mut state, c).await;
        }
        if let Prepared::Named(named) = prepared {
            if matches!(*state, State::Failed(_)) {
                return Err(in_failed_block());
            }
            return self.name(named);
        }
        if let Prepared::Show { column, default } = prepared {
            if matches!(*state, State::Failed(_)) {
                return Err(in_failed_block());
            }
            let schema = crate::session::show_schema(column);
            let value = datafusion::arrow::array::StringArray::from(vec![self.isolation_shown(&state, *default)]);
            let batch = datafusion::arrow::record_batch::RecordBatch::try_new(schema.clone(), vec![Arc::new(value)])
                .map_err(|e| SqlError::new(ErrorKind::Internal, e.to_string()))?;
            return Ok(Output::Rows { schema, batches: vec![batch] });
        }
        match &*state {
            State::Failed(_) => Err(in_failed_block()),
            State::Idle => self.autocommit(prepared, params).await,
            State::Block { .. } => {
                let out = self.in_block(&mut state, prepared, params).await;
                if out.is_err() {
                    self.fail(&mut state);
                }
                out
            }
        }
    }

    /// `PREPARE` and `DEALLOCATE`: the session's named statements. (Like PostgreSQL's, they are
    /// not part of a transaction block: a rollback keeps them.)
    fn name(&self, named: &Named) -> Result<Output, SqlError> {
        let mut statements = self.named.lock();
        match named {
            Named::Prepare { name, statement } => {
                if statements.contains_key(name) {
                    return Err(SqlError::new(
                        ErrorKind::DuplicatePreparedStatement,
                        format!("prepared statement \"{name}\" already exists"),
                    ));
                }
                statements.insert(name.clone(), statement.clone());
                Ok(Output::Command { tag: "PREPARE", rows: 0 })
            }
            Named::Deallocate { name: Some(name) } => {
                statements.remove(name).ok_or_else(|| no_such_statement(name))?;
                Ok(Output::Command { tag: "DEALLOCATE", rows: 0 })
            }
            Named::Deallocate { name: None } => {
                statements.clear();
                Ok(Output::Command { tag: "DEALLOCATE ALL", rows: 0 })
            }
            Named::Execute { name, .. } => Err(no_such_statement(name)),
        }
    }

    async fn control(&self, state: &mut State, c: &TxnControl) -> Result<Output, SqlError> {
        let done = |tag| Ok(Output::Command { tag, rows: 0 });
        match c.kind.clone() {
            ControlKind::Begin { read_only, isolation } => match state {
                // PostgreSQL warns and goes on; the block stays as it is.
                State::Block { .. } => done(c.tag),
                State::Failed(_) => Err(in_failed_block()),
                State::Idle => {
                    let read_only = read_only.unwrap_or(self.default_read_only.load(Ordering::Acquire));
                    let isolation = isolation.unwrap_or_else(|| self.default_isolation());
                    self.set(state, State::Block { read_only, isolation, tx: None, savepoints: Vec::new() });
                    done(c.tag)
                }
            },
            ControlKind::Rollback => {
                self.set(state, State::Idle);
                done(c.tag)
            }
            ControlKind::Savepoint(ref name) => match state {
                State::Block { tx, savepoints, .. } => {
                    let point = match tx {
                        Some(cell) => cell.read(|t| Ok(t.savepoint()))?,
                        None => strata::Savepoint::default(),
                    };
                    savepoints.push((name.clone(), point));
                    done(c.tag)
                }
                State::Failed(_) => Err(in_failed_block()),
                State::Idle => Err(outside_block("SAVEPOINT")),
            },
            ControlKind::Release(ref name) => match state {
                State::Block { savepoints, .. } => match savepoints.iter().rposition(|(n, _)| n == name) {
                    Some(i) => {
                        savepoints.truncate(i);
                        done(c.tag)
                    }
                    None => {
                        self.fail(state);
                        Err(no_savepoint(name))
                    }
                },
                State::Failed(_) => Err(in_failed_block()),
                State::Idle => Err(outside_block("RELEASE SAVEPOINT")),
            },
            ControlKind::RollbackTo(ref name) => {
                let block = match std::mem::replace(state, State::Idle) {
                    State::Failed(Some(block)) => *block,
                    State::Idle => return Err(outside_block("ROLLBACK TO SAVEPOINT")),
                    other => other,
                };
                let State::Block { read_only, isolation, tx, mut savepoints } = block else {
                    self.set(state, State::Failed(None));
                    return Err(no_savepoint(name));
                };
                let Some(i) = savepoints.iter().rposition(|(n, _)| n == name) else {
                    let block = State::Block { read_only, isolation, tx, savepoints };
                    self.set(state, State::Failed(Some(Box::new(block))));
                    return Err(no_savepoint(name));
                };
                savepoints.truncate(i + 1);
                let rolled = match &tx {
                    Some(cell) => cell.write(|t| {
                        t.rollback_to(&savepoints[i].1);
                        Ok(())
                    }),
                    None => Ok(()),
                };
                let block = State::Block { read_only, isolation, tx, savepoints };
                match rolled {
                    Ok(()) => {
                        self.set(state, block);
                        done(c.tag)
                    }
                    // The block is not lost with the error: it fails, as after any failed statement.
                    Err(e) => {
                        self.set(state, State::Failed(Some(Box::new(block))));
                        Err(e.into())
                    }
                }
            }
            ControlKind::Commit => {
                let old = std::mem::replace(state, State::Idle);
                self.set(state, State::Idle);
                match old {
                    State::Idle => done(c.tag),
                    State::Failed(_) => done("ROLLBACK"),
                    State::Block { tx: None, .. } => done(c.tag),
                    State::Block { tx: Some(cell), .. } => {
                        let tx = cell.take().ok_or_else(|| SqlError::from(TxnCell::ended()))?;
                        commit(tx).await?;
                        done(c.tag)
                    }
                }
            }
            ControlKind::Set { read_only, isolation, session: true } => {
                if let Some(r) = read_only {
                    self.default_read_only.store(r, Ordering::Release);
                }
                if let Some(i) = isolation {
                    self.default_repeatable_read.store(i == Isolation::Snapshot, Ordering::Release);
                }
                done(c.tag)
            }
            ControlKind::Set { read_only, isolation, session: false } => match state {
                // Outside a block it has no effect (PostgreSQL warns).
                State::Idle => done(c.tag),
                State::Failed(_) => Err(in_failed_block()),
                State::Block { read_only: ro, isolation: level, tx, .. } => {
                    if tx.is_some() && isolation.is_some() {
                        let e = SqlError::new(
                            ErrorKind::ActiveTransaction,
                            "SET TRANSACTION ISOLATION LEVEL must be called before any query",
                        );
                        self.fail(state);
                        return Err(e);
                    }
                    if let Some(r) = read_only {
                        if tx.is_some() && *ro && !r {
                            let e = SqlError::new(
                                ErrorKind::ActiveTransaction,
                                "transaction read-write mode must be set before any query",
                            );
                            self.fail(state);
                            return Err(e);
                        }
                        *ro = r;
                    }
                    if let Some(i) = isolation {
                        *level = i;
                    }
                    done(c.tag)
                }
            },
        }
    }

    /// A statement inside a block.
    async fn in_block(
        &self,
        state: &mut State,
        prepared: &Prepared,
        params: Option<ParamValues>,
    ) -> Result<Output, SqlError> {
        let State::Block { read_only, isolation, tx, .. } = state else {
            return Err(SqlError::new(ErrorKind::Internal, "not in a transaction block"));
        };
        let plan = match prepared {
            Prepared::Control(_) | Prepared::Named(_) | Prepared::Bound(_) | Prepared::Show { .. } => {
                return Err(SqlError::new(ErrorKind::Internal, "a session statement as a plan"))
            }
            Prepared::Set => return Ok(Output::Command { tag: "SET", rows: 0 }),
            Prepared::Nothing(tag) => return Ok(Output::Command { tag, rows: 0 }),
            Prepared::Ddl(ast) => {
                return Err(SqlError::new(
                    ErrorKind::ActiveTransaction,
                    format!(
                        "{} cannot run inside a transaction block: strata changes tables outside transactions",
                        crate::first_words_of(ast)
                    ),
                ))
            }
            Prepared::Plan { plan, names, .. } => Work::Plan(bind(plan, params)?, names.as_deref()),
            Prepared::Point(p) => Work::Point(p, params),
            Prepared::CopyIn(copy) => Work::Copy(copy, copy_data(copy)?),
            Prepared::Writes { plans, tag } => Work::Plans(plans, tag),
        };
        let cell = match tx {
            Some(cell) => {
                // READ COMMITTED: this statement sees every commit before it.
                new_statement(cell)?;
                cell.clone()
            }
            None => {
                let opts = TxnOptions { read_only: *read_only, isolation: *isolation };
                let cell = TxnCell::new(self.engine.db().begin(&opts)?);
                *tx = Some(cell.clone());
                cell
            }
        };
        if let Some(what) = plan.write() {
            if *read_only {
                return Err(read_only_block(&what));
            }
        }
        plan.run(&self.engine, Reads::Txn(cell)).await
    }

    /// Runs a `COPY ... FROM STDIN` (see [`SqlEngine::prepare`]) with the rows its client sent
    /// (`data`: the copy-in stream's bytes), as one statement of this session.
    pub async fn copy_in(&self, copy: &CopyIn, data: Vec<u8>) -> Result<Output, SqlError> {
        let mut with_rows = copy.clone();
        with_rows.inline = Some(data);
        self.execute_prepared(&Prepared::CopyIn(Box::new(with_rows)), None).await
    }

    /// The isolation level of blocks that name none, and of statements outside blocks.
    fn default_isolation(&self) -> Isolation {
        if self.default_repeatable_read.load(Ordering::Acquire) {
            Isolation::Snapshot
        } else {
            Isolation::ReadCommitted
        }
    }

    /// What `SHOW transaction_isolation` (or, with `default`, `default_transaction_isolation`)
    /// answers now, as PostgreSQL names the levels.
    fn isolation_shown(&self, state: &State, default: bool) -> &'static str {
        let level = match state {
            State::Block { isolation, .. } if !default => *isolation,
            _ => self.default_isolation(),
        };
        match level {
            Isolation::Snapshot => "repeatable read",
            Isolation::ReadCommitted => "read committed",
        }
    }

    /// A statement outside a block: its own transaction.
    async fn autocommit(&self, prepared: &Prepared, params: Option<ParamValues>) -> Result<Output, SqlError> {
        let plan = match prepared {
            Prepared::Control(_) | Prepared::Named(_) | Prepared::Bound(_) | Prepared::Show { .. } => {
                return Err(SqlError::new(ErrorKind::Internal, "a session statement as a plan"))
            }
            Prepared::Set => return Ok(Output::Command { tag: "SET", rows: 0 }),
            Prepared::Nothing(tag) => return Ok(Output::Command { tag, rows: 0 }),
            Prepared::Ddl(ast) => return self.engine.run_ddl(ast),
            Prepared::Plan { plan, names, .. } => Work::Plan(bind(plan, params)?, names.as_deref()),
            // A point query reads the newest data: one row read is a snapshot by itself.
            Prepared::Point(p) if !p.writes() => return p.run(self.engine.db(), params.as_ref(), None),
            Prepared::Point(p) => Work::Point(p, params),
            Prepared::CopyIn(copy) => Work::Copy(copy, copy_data(copy)?),
            Prepared::Writes { plans, tag } => Work::Plans(plans, tag),
        };
        let Some(what) = plan.write() else {
            return plan.run(&self.engine, Reads::Snapshot(self.engine.db().snapshot())).await;
        };
        if self.default_read_only.load(Ordering::Acquire) {
            return Err(read_only_block(&what));
        }
        // Nothing of the statement was seen before its commit: a conflict runs it again.
        let mut tries = 0;
        loop {
            let opts = TxnOptions { read_only: false, isolation: self.default_isolation() };
            let cell = TxnCell::new(self.engine.db().begin(&opts)?);
            let out = match plan.run(&self.engine, Reads::Txn(cell.clone())).await {
                Err(e) if e.kind == ErrorKind::SerializationFailure && tries < strata::TXN_RETRIES => {
                    tries += 1;
                    continue;
                }
                r => r?,
            };
            let tx = cell.take().ok_or_else(|| SqlError::from(TxnCell::ended()))?;
            match commit(tx).await {
                Err(e) if e.kind == ErrorKind::SerializationFailure && tries < strata::TXN_RETRIES => tries += 1,
                r => return r.map(|()| out),
            }
        }
    }
}

/// What a statement does once bound: run a plan, or copy rows in.
enum Work<'a> {
    Plan(LogicalPlan, Option<&'a crate::names::Renames>),
    Point(&'a crate::point::Point, Option<ParamValues>),
    Plans(&'a [LogicalPlan], &'static str),
    Copy(&'a CopyIn, &'a [u8]),
}

impl Work<'_> {
    /// The kind of write it is (for a read-only refusal), `None` for a query.
    fn write(&self) -> Option<String> {
        match self {
            Work::Plan(LogicalPlan::Dml(dml), _) => Some(dml.op.to_string()),
            Work::Plan(..) => None,
            Work::Point(p, _) => p.writes().then(|| "UPDATE".into()),
            Work::Plans(_, tag) => Some((*tag).into()),
            Work::Copy(..) => Some("COPY".into()),
        }
    }

    async fn run(&self, engine: &SqlEngine, reads: Reads) -> Result<Output, SqlError> {
        match (self, reads) {
            (Work::Plan(plan, names), reads) => engine.run_plan(plan, *names, reads).await,
            (Work::Point(p, params), reads) => {
                // An UPDATE locks its row before it reads it.
                if let (Reads::Txn(cell), Some(key)) = (&reads, p.update_key(params.as_ref())?) {
                    if lock_rows(cell, p.table(), vec![key]).await? {
                        new_statement(cell)?;
                    }
                }
                p.run(engine.db(), params.as_ref(), Some(&reads))
            }
            (Work::Plans(plans, tag), Reads::Txn(cell)) => {
                for plan in plans.iter() {
                    engine.run_plan(plan, None, Reads::Txn(cell.clone())).await?;
                }
                Ok(Output::Command { tag, rows: 0 })
            }
            (Work::Copy(copy, data), Reads::Txn(cell)) => {
                let done = crate::dml::copy(engine.db(), copy, data, &cell)?;
                Ok(Output::Command { tag: done.tag, rows: done.rows })
            }
            (Work::Copy(..) | Work::Plans(..), Reads::Snapshot(_)) => {
                Err(SqlError::new(ErrorKind::Internal, "a write outside a transaction"))
            }
        }
    }
}

/// The rows a `COPY ... FROM STDIN` came with.
fn copy_data(copy: &CopyIn) -> Result<&[u8], SqlError> {
    copy.inline.as_deref().ok_or_else(|| {
        SqlError::unsupported(
            "COPY FROM STDIN takes its rows from the client: run it through a PostgreSQL client (psql, a driver's copy API) or follow it with the rows in a script",
        )
    })
}

fn bind(plan: &LogicalPlan, params: Option<ParamValues>) -> Result<LogicalPlan, SqlError> {
    Ok(match params {
        None => plan.clone(),
        Some(params) => plan.clone().with_param_values(params)?,
    })
}

/// Under READ COMMITTED, locks the rows of `table` with `keys` for the statement's transaction
/// (see [`strata::Transaction::lock`]), waiting for another holder off the async threads, and
/// returns whether another transaction committed one of them after the statement's snapshot:
/// the statement then reads again at a new snapshot. Under REPEATABLE READ it does nothing.
pub(crate) async fn lock_rows(cell: &Arc<TxnCell>, table: &Table, keys: Vec<Vec<Value>>) -> Result<bool, SqlError> {
    if cell.read(|tx| Ok(tx.isolation()))? != Isolation::ReadCommitted {
        return Ok(false);
    }
    let mut changed = false;
    for key in keys {
        let locked = match cell.write(|tx| tx.try_lock(table, &key))? {
            Some(locked) => locked,
            None => {
                let (cell, table) = (cell.clone(), table.clone());
                tokio::task::spawn_blocking(move || cell.write(|tx| tx.lock(&table, &key)))
                    .await
                    .map_err(|e| SqlError::new(ErrorKind::Internal, format!("row lock task failed: {e}")))??
            }
        };
        changed |= locked == Locked::Changed;
    }
    Ok(changed)
}

/// Moves the transaction to a new snapshot (READ COMMITTED): before each statement of a block
/// after its first, and to run a statement again after [`lock_rows`] found a row changed.
pub(crate) fn new_statement(cell: &TxnCell) -> Result<(), SqlError> {
    cell.write(|tx| {
        tx.new_statement();
        Ok(())
    })?;
    Ok(())
}

/// Commits `tx` off the async threads (a commit may wait for a sync to disk).
async fn commit(tx: Transaction) -> Result<(), SqlError> {
    tokio::task::spawn_blocking(move || tx.commit(&WriteOptions::default()))
        .await
        .map_err(|e| SqlError::new(ErrorKind::Internal, format!("commit task failed: {e}")))??;
    Ok(())
}
