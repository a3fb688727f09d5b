//! A PostgreSQL wire-protocol server (protocol 3.0: simple and extended query) over a strata
//! database, so psql, psycopg, pgjdbc and other PostgreSQL clients can run SQL on it
//! ([`strata_sql::SqlEngine`] does the SQL).
//!
//! - It listens on a loopback address unless [`Config::allow_remote`] is set.
//! - With a password configured, a client must authenticate as [`Config::user`] by
//!   SCRAM-SHA-256 (or MD5, if chosen); without one, every connection is accepted. Any
//!   database name is accepted.
//! - Each connection is its own session ([`strata_sql::Session`]); at most
//!   [`Config::max_connections`] are served at once, and one more is refused with SQLSTATE 53300.
//! - `BEGIN` ... `COMMIT` blocks are snapshot-isolated transactions, and ReadyForQuery reports
//!   the session's status as PostgreSQL does (`I` idle, `T` in a block, `E` in a failed block),
//!   in the simple and the extended protocol: a failed `COMMIT` leaves the session idle. A
//!   connection that ends inside a block rolls it back.
//! - Commands answer with PostgreSQL's tags and row counts (`INSERT 0 3`, `UPDATE 2`,
//!   `DELETE 1`); errors carry SQLSTATE codes ([`strata_sql::ErrorKind::sqlstate`]).
//! - A statement runs to its end once started, also when its client goes away: it commits
//!   whole or not at all, never half (a statement inside a block commits with its block).
//! - Every value travels as the PostgreSQL type announced for its column or parameter, in text
//!   and binary format alike ([`types`]); a type that has no faithful PostgreSQL counterpart is
//!   refused with an error naming it.

#[doc(hidden)]
pub mod fuzz;
mod types;

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use futures::sink::{Sink, SinkExt};
use pgwire::api::auth::md5pass::{hash_md5_password, Md5PasswordAuthStartupHandler};
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramAuth};
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler};
use pgwire::api::copy::{send_copy_in_response, CopyHandler};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{
    send_execution_response, send_query_response, send_ready_for_query, ExtendedQueryHandler, SimpleQueryHandler,
};
use pgwire::api::results::{CopyResponse, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionHandle, PgWireConnectionState, PgWireServerHandlers, SessionExtensions,
    Type, DEFAULT_NAME,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::extendedquery::{Bind, BindComplete, Describe, Execute};
use pgwire::messages::response::{EmptyQueryResponse, TransactionStatus};
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::SecretKey;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage, ProtocolVersion};
use pgwire::tokio::tokio_rustls::rustls::pki_types::CertificateDer;
use strata_sql::datafusion::arrow::datatypes::Schema;
use strata_sql::datafusion::common::ParamValues;
use strata_sql::{CopyIn, Output, Prepared, SqlEngine, SqlError, TxnStatus};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use types::RowFormat;

/// How clients prove they know the password.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// SCRAM-SHA-256 (PostgreSQL's default since version 14).
    Scram,
    /// MD5 (older clients).
    Md5,
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Accept a non-loopback listen address (otherwise [`Server::bind`] refuses it).
    pub allow_remote: bool,
    /// The one user clients log in as.
    pub user: String,
    /// The user's password; `None` accepts every connection without authentication.
    pub password: Option<String>,
    /// How a password is checked.
    pub auth: AuthMethod,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Config {
    /// Loopback on `listen`, user `strata`, no password, SCRAM, 64 connections.
    pub fn new(listen: SocketAddr) -> Config {
        Config {
            listen,
            allow_remote: false,
            user: "strata".into(),
            password: None,
            auth: AuthMethod::Scram,
            max_connections: 64,
        }
    }
}

const SCRAM_ITERATIONS: usize = 4096;

/// A bound server; [`Server::run`] serves it.
pub struct Server {
    listener: TcpListener,
    engine: SqlEngine,
    config: Arc<Config>,
}

impl Server {
    /// Binds the listening socket. A non-loopback address without [`Config::allow_remote`] is
    /// refused.
    pub async fn bind(engine: SqlEngine, config: Config) -> std::io::Result<Server> {
        if !config.listen.ip().is_loopback() && !config.allow_remote {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} is not a loopback address; listening on other interfaces needs --listen-any \
                     (and a password)",
                    config.listen
                ),
            ));
        }
        let listener = TcpListener::bind(config.listen).await?;
        // The catalogs (`\d`, `pg_get_userbyid`) name the user the server admits as the owner.
        engine.set_pg_names(strata_sql::DATABASE_NAME, &config.user);
        Ok(Server { listener, engine, config: Arc::new(config) })
    }

    /// The address the server listens on (with the port chosen, if 0 was asked for).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves connections until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let slots = Arc::new(Semaphore::new(self.config.max_connections));
        tokio::pin!(shutdown);
        loop {
            let (socket, _) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(a) => a,
                    // A failed accept (a client gone before it was accepted, too many open
                    // files) ends that connection, not the server; a pause keeps a lasting
                    // error from spinning the loop.
                    Err(_) => {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = &mut shutdown => return Ok(()),
            };
            let _ = socket.set_nodelay(true);
            let engine = self.engine.clone();
            let config = self.config.clone();
            let slot = slots.clone().try_acquire_owned().ok();
            tokio::spawn(async move {
                let startup = match slot {
                    Some(_) => Startup::for_config(&config),
                    None => {
                        Startup::Reject("53300", format!("too many connections (at most {})", config.max_connections))
                    }
                };
                let sql = engine.session();
                let handlers = Connection {
                    session: Arc::new(Session {
                        parser: Arc::new(Parser { session: sql.clone() }),
                        sql,
                        copy: std::sync::Mutex::new(None),
                    }),
                    startup: Arc::new(startup),
                };
                // A panic while serving the connection (pgwire's message decoder panics on
                // some malformed messages) ends that connection, not the server.
                let serve = pgwire::tokio::process_socket(socket, None, handlers);
                let _ = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(serve)).await;
                drop(slot);
            });
        }
    }
}

fn error_info(e: &SqlError) -> ErrorInfo {
    ErrorInfo::new("ERROR".into(), e.kind.sqlstate().into(), e.message.clone())
}

fn user_error(e: SqlError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(&e)))
}

/// The password check: the configured user and password, nothing else.
#[derive(Debug)]
struct Credentials {
    user: String,
    password: String,
    method: AuthMethod,
}

#[async_trait]
impl AuthSource for Credentials {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().unwrap_or_default();
        if user != self.user {
            return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".into(),
                "28P01".into(),
                format!("password authentication failed for user \"{user}\""),
            ))));
        }
        let salt: Vec<u8> = match self.method {
            AuthMethod::Scram => rand::random::<[u8; 16]>().to_vec(),
            AuthMethod::Md5 => rand::random::<[u8; 4]>().to_vec(),
        };
        let hashed = match self.method {
            AuthMethod::Scram => gen_salted_password(&self.password, &salt, SCRAM_ITERATIONS),
            AuthMethod::Md5 => hash_md5_password(user, &self.password, &salt).into_bytes(),
        };
        Ok(Password::new(Some(salt), hashed))
    }
}

/// Accepts a connection without authentication.
struct Trust;

impl NoopStartupHandler for Trust {}

/// How a connection starts: trusted, authenticated, or refused.
enum Startup {
    Trust(Trust),
    Scram(SASLAuthStartupHandler<DefaultServerParameterProvider>),
    Md5(Md5PasswordAuthStartupHandler<Credentials, DefaultServerParameterProvider>),
    Reject(&'static str, String),
}

impl Startup {
    fn for_config(config: &Config) -> Startup {
        let params = Arc::new(DefaultServerParameterProvider::default());
        let Some(password) = &config.password else { return Startup::Trust(Trust) };
        let credentials = Credentials { user: config.user.clone(), password: password.clone(), method: config.auth };
        match config.auth {
            AuthMethod::Scram => {
                let mut scram = ScramAuth::new(Arc::new(credentials));
                scram.set_iterations(SCRAM_ITERATIONS);
                Startup::Scram(SASLAuthStartupHandler::new(params).with_scram(scram))
            }
            AuthMethod::Md5 => Startup::Md5(Md5PasswordAuthStartupHandler::new(Arc::new(credentials), params)),
        }
    }
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match self {
            Startup::Trust(h) => h.on_startup(client, message).await,
            Startup::Scram(h) => h.on_startup(client, message).await,
            Startup::Md5(h) => h.on_startup(client, message).await,
            Startup::Reject(code, message) => {
                Err(PgWireError::UserError(Box::new(ErrorInfo::new("FATAL".into(), (*code).into(), message.clone()))))
            }
        }
    }
}

/// One connection's handlers.
struct Connection {
    session: Arc<Session>,
    startup: Arc<Startup>,
}

impl PgWireServerHandlers for Connection {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.session.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.session.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.session.clone()
    }
}

/// A connection's SQL session.
struct Session {
    sql: strata_sql::Session,
    parser: Arc<Parser>,
    /// The `COPY ... FROM STDIN` whose rows the client is sending, with the bytes so far.
    copy: std::sync::Mutex<Option<(CopyIn, Vec<u8>)>>,
}

/// Whether `stmt` is a `COPY ... FROM STDIN` whose rows the client sends.
fn is_copy_from_client(stmt: &strata_sql::datafusion::sql::parser::Statement) -> bool {
    use strata_sql::datafusion::sql::sqlparser::ast::{CopyTarget, Statement as Ast};
    matches!(stmt, strata_sql::datafusion::sql::parser::Statement::Statement(s)
        if matches!(s.as_ref(), Ast::Copy { to: false, target: CopyTarget::Stdin, values, .. } if values.is_empty()))
}

impl Session {
    /// Starts a `COPY ... FROM STDIN`: the response that asks the client for its rows.
    async fn start_copy(
        &self,
        stmt: &strata_sql::datafusion::sql::parser::Statement,
        last: bool,
    ) -> Result<Response, SqlError> {
        if !last {
            return Err(SqlError::new(
                strata_sql::ErrorKind::FeatureNotSupported,
                "COPY FROM STDIN must be the last statement of its query",
            ));
        }
        let Prepared::CopyIn(copy) = self.sql.engine().prepare(stmt).await? else {
            return Err(SqlError::new(strata_sql::ErrorKind::Internal, "COPY did not plan as a copy"));
        };
        self.await_copy(&copy)
    }

    /// Takes `copy` as the COPY whose rows the client sends next: the response asking for them.
    fn await_copy(&self, copy: &CopyIn) -> Result<Response, SqlError> {
        if self.sql.status() == TxnStatus::Failed {
            return Err(SqlError::new(
                strata_sql::ErrorKind::InFailedTransaction,
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        let columns = copy.columns();
        // Text and CSV are both textual to the protocol (format 0).
        *self.copy.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((copy.clone(), Vec::new()));
        Ok(Response::CopyIn(CopyResponse::new(0, columns, futures::stream::empty())))
    }
}

#[async_trait]
impl CopyHandler for Session {
    async fn on_copy_data<C>(&self, _client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Some((_, data)) = self.copy.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_mut() {
            data.extend_from_slice(&copy_data.data);
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let pending = self.copy.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let Some((copy, data)) = pending else {
            return Err(user_error(SqlError::new(strata_sql::ErrorKind::Internal, "CopyDone without a COPY")));
        };
        let sql = self.sql.clone();
        let out = detached(async move { sql.copy_in(&copy, data).await }).await;
        client.set_transaction_status(wire_status(self.sql.status()));
        match out {
            Ok(Output::Command { rows, .. }) => {
                let tag = Tag::new("COPY").with_rows(usize::try_from(rows).unwrap_or(usize::MAX));
                client.send(PgWireBackendMessage::CommandComplete(tag.into())).await?;
                Ok(())
            }
            Ok(Output::Rows { .. }) => {
                Err(user_error(SqlError::new(strata_sql::ErrorKind::Internal, "COPY returned rows")))
            }
            Err(e) => Err(user_error(e)),
        }
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.copy.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        // The COPY fails as a statement: inside a block, the block fails.
        self.sql.fail_block();
        client.set_transaction_status(wire_status(self.sql.status()));
        user_error(SqlError::new(
            strata_sql::ErrorKind::BadCopyData,
            format!("COPY from stdin failed: {}", fail.message),
        ))
    }
}

/// The status ReadyForQuery reports for `status`.
/// The most rows one Execute returns before the portal is suspended (the client asks again for
/// the rest, as for any limit it set).
const MAX_FETCH: i32 = 1 << 16;

/// The row limit an Execute runs with: no limit where the client asked for none (0, or a
/// negative number, as PostgreSQL reads it), else the client's, held to [`MAX_FETCH`]: pgwire
/// sets aside room for as many rows as asked, so a limit of two billion made the server try to
/// allocate tens of gigabytes and abort (found by the `pg_messages` fuzz target).
fn fetch_limit(max_rows: i32) -> i32 {
    max_rows.clamp(0, MAX_FETCH)
}

fn wire_status(status: TxnStatus) -> TransactionStatus {
    match status {
        TxnStatus::Idle => TransactionStatus::Idle,
        TxnStatus::InBlock => TransactionStatus::Transaction,
        TxnStatus::Failed => TransactionStatus::Error,
    }
}

impl Session {
    /// Takes in a failure pgwire reported itself (a Parse, Bind or Describe that failed marks
    /// the connection `E`): inside a block, it fails the block as PostgreSQL does.
    fn note_client_failure<C: ClientInfo>(&self, client: &C) {
        if client.transaction_status() == TransactionStatus::Error {
            self.sql.fail_block();
        }
    }
}

/// Turns a statement's output into a wire response, rows encoded in `format`. `described` is
/// the schema the client was told of at Describe (extended protocol): the rows must be sent as
/// those types, so a statement that produced others is refused instead.
fn response(out: Output, format: &Format, described: Option<&Schema>) -> Result<Response, SqlError> {
    match out {
        Output::Command { tag, rows } => {
            let rows = usize::try_from(rows).unwrap_or(usize::MAX);
            Ok(Response::Execution(match tag {
                "INSERT" => Tag::new(tag).with_oid(0).with_rows(rows),
                "UPDATE" | "DELETE" | "COPY" => Tag::new(tag).with_rows(rows),
                _ => Tag::new(tag),
            }))
        }
        Output::Rows { schema, batches } => {
            let rows = RowFormat::new(described.unwrap_or(&schema), format)?;
            if described.is_some() {
                rows.check(&schema)?;
            }
            let fields = rows.fields();
            let data = batches.into_iter().flat_map(move |b| match rows.encode(&b) {
                Ok(encoded) => encoded.into_iter().map(Ok).collect::<Vec<_>>(),
                Err(e) => vec![Err(user_error(e))],
            });
            Ok(Response::Query(QueryResponse::new(fields, futures::stream::iter(data))))
        }
    }
}

/// Runs a statement to its end even if the client disconnects meanwhile (the task is not
/// cancelled with the connection), so a write is never cut between planning and commit.
async fn detached<T: Send + 'static>(
    f: impl Future<Output = Result<T, SqlError>> + Send + 'static,
) -> Result<T, SqlError> {
    tokio::spawn(f).await.map_err(|e| SqlError::new(strata_sql::ErrorKind::Internal, format!("statement task: {e}")))?
}

/// Runs a planned statement in `session`: a point read in place, anything else [`detached`],
/// so that a write runs to its end even if its client goes away.
async fn run(
    session: &strata_sql::Session,
    prepared: Arc<Prepared>,
    params: Option<ParamValues>,
) -> Result<Output, SqlError> {
    if prepared.is_point_read() {
        return session.execute_prepared(&prepared, params).await;
    }
    let sql = session.clone();
    detached(async move { sql.execute_prepared(&prepared, params).await }).await
}

#[async_trait]
impl SimpleQueryHandler for Session {
    /// pgwire's own handling, except that ReadyForQuery reports the session's status: pgwire
    /// derives it from the responses, which cannot say that a failed COMMIT ends the block.
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        self.note_client_failure(client);
        client.set_state(PgWireConnectionState::QueryInProgress);
        let cancel = match client.session_extensions().get::<Arc<ConnectionHandle>>() {
            Some(handle) => Some(handle.start_query().await),
            None => None,
        };
        let responses = match cancel {
            Some(cancel) => match futures::future::select(
                Box::pin(SimpleQueryHandler::do_query(self, client, &query.query)),
                cancel,
            )
            .await
            {
                futures::future::Either::Left((r, _)) => r,
                futures::future::Either::Right(_) => {
                    // The statement runs on to its end (see `detached`); the block it ran in
                    // fails, as PostgreSQL's does.
                    self.sql.fail_block();
                    Err(PgWireError::QueryCanceled)
                }
            },
            None => SimpleQueryHandler::do_query(self, client, &query.query).await,
        };
        let status = wire_status(self.sql.status());
        client.set_transaction_status(status);
        for r in responses? {
            match r {
                Response::EmptyQuery => {
                    client.feed(PgWireBackendMessage::EmptyQueryResponse(EmptyQueryResponse::new())).await?
                }
                Response::Query(results) => send_query_response(client, results, true).await?,
                Response::Execution(tag) | Response::TransactionStart(tag) | Response::TransactionEnd(tag) => {
                    send_execution_response(client, tag).await?
                }
                Response::Error(e) => client.feed(PgWireBackendMessage::ErrorResponse((*e).into())).await?,
                Response::CopyIn(resp) => {
                    // The rows follow as CopyData; CopyDone runs the COPY (`on_copy_done`),
                    // and pgwire sends ReadyForQuery after it.
                    send_copy_in_response(client, resp).await?;
                    client.set_state(PgWireConnectionState::CopyInProgress(false));
                    return Ok(client.flush().await?);
                }
                Response::CopyOut(_) | Response::CopyBoth(_) => {
                    return Err(user_error(SqlError::new(strata_sql::ErrorKind::FeatureNotSupported, "COPY TO")))
                }
            }
        }
        client.set_state(PgWireConnectionState::ReadyForQuery);
        send_ready_for_query(client, status).await
    }

    async fn do_query<C>(&self, _client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Some((prepared, params)) = self.sql.engine().point_from_text(query) {
            let out = run(&self.sql, prepared, Some(params)).await;
            return Ok(vec![match out.and_then(|o| response(o, &Format::UnifiedText, None)) {
                Ok(r) => r,
                Err(e) => Response::Error(Box::new(error_info(&e))),
            }]);
        }
        let statements = match self.sql.engine().parse(query) {
            Ok(s) => s,
            Err(e) => {
                // A query that does not parse fails the block it was sent in.
                self.sql.fail_block();
                return Ok(vec![Response::Error(Box::new(error_info(&e)))]);
            }
        };
        let mut out = Vec::with_capacity(statements.len());
        let count = statements.len();
        for (i, stmt) in statements.into_iter().enumerate() {
            if is_copy_from_client(&stmt) {
                match self.start_copy(&stmt, i + 1 == count).await {
                    Ok(r) => out.push(r),
                    Err(e) => {
                        self.sql.fail_block();
                        out.push(Response::Error(Box::new(error_info(&e))));
                    }
                }
                break;
            }
            let result = match self.sql.plan(&stmt).await {
                Ok(prepared) => run(&self.sql, Arc::new(prepared), None).await,
                Err(e) => Err(e),
            };
            match result.and_then(|o| response(o, &Format::UnifiedText, None)) {
                Ok(r) => out.push(r),
                Err(e) => {
                    // Later statements of the query are not run, as in PostgreSQL.
                    out.push(Response::Error(Box::new(error_info(&e))));
                    break;
                }
            }
        }
        if out.is_empty() {
            out.push(Response::EmptyQuery);
        }
        Ok(out)
    }
}

/// A connection's outgoing messages held until the client asks for them: the extended
/// protocol's replies (BindComplete, rows, CommandComplete) go out together at the Sync (or
/// Flush) that ends the client's batch, in one write, as PostgreSQL sends them, instead of one
/// write each. Large results still stream: the buffer is written out whenever it fills.
struct Held<'a, C>(&'a mut C);

impl<C: Sink<PgWireBackendMessage> + Unpin> Sink<PgWireBackendMessage> for Held<'_, C> {
    type Error = C::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut *self.0).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: PgWireBackendMessage) -> Result<(), Self::Error> {
        Pin::new(&mut *self.0).start_send(item)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut *self.0).poll_close(cx)
    }
}

impl<C: ClientPortalStore> ClientPortalStore for Held<'_, C> {
    type PortalStore = C::PortalStore;

    fn portal_store(&self) -> &Self::PortalStore {
        self.0.portal_store()
    }
}

impl<C: ClientInfo> ClientInfo for Held<'_, C> {
    fn socket_addr(&self) -> SocketAddr {
        self.0.socket_addr()
    }

    fn is_secure(&self) -> bool {
        self.0.is_secure()
    }

    fn protocol_version(&self) -> ProtocolVersion {
        self.0.protocol_version()
    }

    fn set_protocol_version(&mut self, version: ProtocolVersion) {
        self.0.set_protocol_version(version);
    }

    fn pid_and_secret_key(&self) -> (i32, SecretKey) {
        self.0.pid_and_secret_key()
    }

    fn set_pid_and_secret_key(&mut self, pid: i32, secret_key: SecretKey) {
        self.0.set_pid_and_secret_key(pid, secret_key);
    }

    fn state(&self) -> PgWireConnectionState {
        self.0.state()
    }

    fn set_state(&mut self, new_state: PgWireConnectionState) {
        self.0.set_state(new_state);
    }

    fn transaction_status(&self) -> TransactionStatus {
        self.0.transaction_status()
    }

    fn set_transaction_status(&mut self, new_status: TransactionStatus) {
        self.0.set_transaction_status(new_status);
    }

    fn metadata(&self) -> &HashMap<String, String> {
        self.0.metadata()
    }

    fn metadata_mut(&mut self) -> &mut HashMap<String, String> {
        self.0.metadata_mut()
    }

    fn session_extensions(&self) -> &SessionExtensions {
        self.0.session_extensions()
    }

    fn sni_server_name(&self) -> Option<&str> {
        self.0.sni_server_name()
    }

    fn client_certificates<'a>(&self) -> Option<&[CertificateDer<'a>]> {
        self.0.client_certificates()
    }
}

/// Plans statements of the extended protocol (Parse), in the connection's session (which
/// resolves SQL's `EXECUTE` of a statement it prepared).
struct Parser {
    session: strata_sql::Session,
}

#[async_trait]
impl QueryParser for Parser {
    type Statement = Arc<Prepared>;

    async fn parse_sql<C>(&self, _client: &C, sql: &str, types: &[Option<Type>]) -> PgWireResult<Option<Arc<Prepared>>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut statements = self.session.engine().parse(sql).map_err(user_error)?;
        let stmt = match statements.len() {
            0 => return Ok(None),
            1 => statements.remove(0),
            _ => {
                return Err(user_error(SqlError::new(
                    strata_sql::ErrorKind::Syntax,
                    "cannot insert multiple commands into a prepared statement",
                )))
            }
        };
        // Parameters the client declared a type for are of that type (`SELECT $1` sent as
        // int8 returns int8), as in PostgreSQL.
        let declared: Vec<_> = types.iter().map(|t| types::declared_arrow_type(t.as_ref())).collect();
        Ok(Some(Arc::new(self.session.prepare_typed(&stmt, &declared).await.map_err(user_error)?)))
    }

    fn get_parameter_types(&self, stmt: &Arc<Prepared>) -> PgWireResult<Vec<Type>> {
        let types = stmt.parameter_types().map_err(user_error)?;
        Ok(types.iter().map(|t| types::parameter_type(t.as_ref())).collect())
    }

    fn get_result_schema(&self, stmt: &Arc<Prepared>, format: Option<&Format>) -> PgWireResult<Vec<FieldInfo>> {
        match stmt.output_schema() {
            Some(schema) => {
                let rows = RowFormat::new(&schema, format.unwrap_or(&Format::UnifiedText)).map_err(user_error)?;
                Ok(rows.fields().as_ref().clone())
            }
            None => Ok(Vec::new()),
        }
    }
}

#[async_trait]
impl ExtendedQueryHandler for Session {
    type Statement = Arc<Prepared>;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Parser> {
        self.parser.clone()
    }

    /// pgwire's own handling, its reply held for the next Sync (see [`Held`]).
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self._on_describe(&mut Held(client), message).await
    }

    /// pgwire's own handling, with BindComplete held for the next Sync (see [`Held`]).
    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.statement_name.as_deref().unwrap_or(DEFAULT_NAME);
        match client.portal_store().get_statement(name) {
            Some(Entry::Value(statement)) => {
                let portal = Portal::try_new(&message, statement)?;
                client.portal_store().put_portal(Arc::new(portal));
            }
            Some(Entry::Empty) => {
                if !message.parameters.is_empty() {
                    return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                        "ERROR".into(),
                        "08P01".into(),
                        format!(
                            "bind message supplies {} parameters, but prepared statement \"{name}\" requires 0",
                            message.parameters.len()
                        ),
                    ))));
                }
                client.portal_store().put_empty_portal(message.portal_name.as_deref().unwrap_or(DEFAULT_NAME));
            }
            None => return Err(PgWireError::StatementNotFound(name.to_owned())),
        }
        client.feed(PgWireBackendMessage::BindComplete(BindComplete::new())).await?;
        Ok(())
    }

    /// pgwire's own handling, its messages held for the next Sync (see [`Held`]), then the
    /// session's status as the connection's: ReadyForQuery at the next Sync reports it (a
    /// failed COMMIT leaves the session idle, not failed).
    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        self.note_client_failure(client);
        let mut message = message;
        message.max_rows = fetch_limit(message.max_rows);
        let result = self._on_execute(&mut Held(client), message).await;
        if matches!(result, Err(PgWireError::QueryCanceled)) {
            self.sql.fail_block();
        }
        if matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
            // The client waits for CopyInResponse before it sends rows (a Sync it sent
            // meanwhile is ignored during the copy, and flushes nothing).
            client.flush().await?;
        }
        client.set_transaction_status(wire_status(self.sql.status()));
        result
    }

    async fn do_query<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Arc<Prepared>>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Arc<Prepared>>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let prepared = portal.statement.statement.clone();
        if let Prepared::CopyIn(copy) = prepared.as_ref() {
            if copy.inline_rows().is_none() {
                // The rows follow as CopyData (`on_copy_done` runs the COPY).
                return self.await_copy(copy).map_err(user_error);
            }
        }
        let params = if portal.parameter_len() == 0 {
            None
        } else {
            let expected = prepared.parameter_types().map_err(user_error)?;
            Some(types::parameters(portal, &expected).map_err(user_error)?)
        };
        let described = prepared.output_schema();
        let out = run(&self.sql, prepared, params).await.map_err(user_error)?;
        response(out, &portal.result_column_format, described.as_deref()).map_err(user_error)
    }
}
