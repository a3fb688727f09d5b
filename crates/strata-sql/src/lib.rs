//! SQL over a strata database, with DataFusion as the query engine.
//!
//! [`SqlEngine`] puts a database's tables in a DataFusion catalog (`strata.public`) and runs
//! statements against them: queries go through DataFusion's planner with projections, filters
//! and limits pushed into strata's scans (and primary-key lookups turned into point reads);
//! `CREATE TABLE`, `DROP TABLE`, `INSERT`, `UPDATE` and `DELETE` change real strata tables, each
//! statement atomically; `BEGIN` ... `COMMIT` blocks run as snapshot-isolated transactions in a
//! [`Session`]. `docs/sql.md` lists what is supported.
//!
//! ```
//! # async fn demo() -> Result<(), strata_sql::SqlError> {
//! let dir = std::env::temp_dir().join(format!("strata-sql-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let db = std::sync::Arc::new(strata::Db::open(&dir, strata::Options::default())?);
//! let sql = strata_sql::SqlEngine::new(db)?;
//! sql.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, n INT)").await?;
//! sql.execute("INSERT INTO t VALUES (1, 10), (2, 20), (3, 30)").await?;
//! let out = sql.execute("SELECT sum(n) FROM t WHERE id >= 2").await?;
//! assert_eq!(out[0].rows(), Some(1));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(()) }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```

#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod catalog;
mod copy;
mod ddl;
mod decorrelate;
mod dml;
mod error;
mod filter;
pub mod indexes;
mod literals;
mod meta;
mod names;
mod pg_catalog;
mod point;
mod rewrite;
mod session;
mod stats;
mod table;
mod to_char;
mod txn;
mod views;

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{CatalogProvider, MemoryCatalogProvider};
use datafusion::common::{DFSchema, ParamValues};
use datafusion::execution::context::SessionContext;
use datafusion::execution::SessionState;
use datafusion::logical_expr::simplify::SimplifyContext;
use datafusion::logical_expr::LogicalPlan;
use datafusion::logical_expr::Statement as PlanStatement;
use datafusion::optimizer::simplify_expressions::ExprSimplifier;
use datafusion::prelude::SessionConfig;
use datafusion::sql::parser::{DFParser, DFParserBuilder, Statement};
use datafusion::sql::sqlparser::ast::{
    DataType as SqlDataType, ExactNumberInfo, Ident, ObjectNamePart, ObjectType, Statement as AstStatement,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use strata::{Db, Value};

pub use catalog::{CATALOG, SCHEMA};

/// What a planner over tables split into shards (`strata-cluster`) takes from strata's SQL: a
/// shard's table read at a fixed snapshot with strata's pushdown, which filters strata applies,
/// and the planner settings strata's scans suit.
pub mod shard {
    use std::sync::Arc;

    use datafusion::datasource::TableProvider;
    use datafusion::logical_expr::Expr;
    use datafusion::prelude::SessionConfig;

    /// `table` of `db` as a DataFusion table (without hidden columns), every scan of it reading
    /// at `snapshot`, with projection, filters, limit and key ranges pushed into strata.
    pub fn table_at(
        db: Arc<strata::Db>,
        table: strata::Table,
        snapshot: Arc<strata::Snapshot>,
    ) -> Arc<dyn TableProvider> {
        Arc::new(crate::table::StrataTable::at(db, table, snapshot))
    }

    /// Whether strata applies `filter` exactly in a scan of table `name` with `schema` (so a
    /// provider may report it `Exact`).
    pub fn applies_exactly(name: &str, schema: &strata::Schema, filter: &Expr) -> bool {
        crate::filter::exact(name, filter, schema).is_some()
    }

    /// `config` with the planner settings that suit strata's scans.
    pub fn tuned(config: SessionConfig) -> SessionConfig {
        crate::tuned(config)
    }
}
pub use copy::CopyIn;
/// The DataFusion this crate runs on (and its Arrow), for callers formatting or building batches.
pub use datafusion;
pub use error::{ErrorKind, SqlError};
pub use txn::{Session, TxnControl, TxnStatus};

use txn::Reads;

/// What one statement returned.
#[derive(Debug)]
pub enum Output {
    /// A query's result.
    Rows {
        /// Column names and types.
        schema: SchemaRef,
        /// The rows.
        batches: Vec<RecordBatch>,
    },
    /// A command's tag (`INSERT`, `UPDATE`, `DELETE`, `CREATE TABLE`, `DROP TABLE`, ...) and
    /// the rows it touched.
    Command {
        /// The command, as PostgreSQL names it in a command-complete message.
        tag: &'static str,
        /// Rows inserted, updated or deleted (0 for DDL).
        rows: u64,
    },
}

impl Output {
    /// Rows a query returned, `None` for a command.
    pub fn rows(&self) -> Option<usize> {
        match self {
            Output::Rows { batches, .. } => Some(batches.iter().map(RecordBatch::num_rows).sum()),
            Output::Command { .. } => None,
        }
    }
}

/// SQL over one database. Cheap to clone; clones share the database. Each call of
/// [`SqlEngine::execute`], [`SqlEngine::run`] or [`SqlEngine::execute_prepared`] runs in a session
/// of its own; [`SqlEngine::session`] gives one that lasts, for transaction blocks.
#[derive(Clone)]
pub struct SqlEngine {
    shared: Arc<Shared>,
}

struct Shared {
    db: Arc<Db>,
    /// Point statements planned from templates (see [`SqlEngine::point_from_text`]), by
    /// template; `None` for a template that is not a point statement.
    templates: parking_lot::Mutex<std::collections::HashMap<String, Option<Arc<Prepared>>>>,
    /// DataFusion's state with the strata catalog; each statement runs on a copy carrying its
    /// snapshot.
    base: SessionState,
    /// The database's and its owner's names as `pg_catalog` shows them.
    pg_names: parking_lot::RwLock<(String, String)>,
}

/// The PostgreSQL version strata's catalogs and `version()` answer as (the catalogs, and what
/// psql asks of them, are PostgreSQL 15's).
pub const PG_SERVER_VERSION: &str = "15.0";

/// The Arrow field metadata key naming the PostgreSQL type a column is sent as when its Arrow
/// type alone does not say (`int2vector`, `oidvector`: lists sent as PostgreSQL sends these).
pub const PG_TYPE_METADATA: &str = "strata.pg_type";

/// The name the PostgreSQL catalogs give the database (`pg_database`, `current_database()`):
/// the server accepts any database name a client asks for and serves this one.
pub const DATABASE_NAME: &str = pg_catalog::DEFAULT_NAME;

impl std::fmt::Debug for SqlEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlEngine").finish_non_exhaustive()
    }
}

impl SqlEngine {
    /// SQL over `db`'s tables; a query runs on as many partitions as the machine has cores.
    pub fn new(db: Arc<Db>) -> Result<SqlEngine, SqlError> {
        Self::build(db, tuned(SessionConfig::new()))
    }

    /// SQL over `db`'s tables, a query running on `partitions` partitions (each table scan is
    /// cut into up to that many key ranges, read side by side; at least 1).
    pub fn with_partitions(db: Arc<Db>, partitions: usize) -> Result<SqlEngine, SqlError> {
        Self::build(db, tuned(SessionConfig::new().with_target_partitions(partitions.max(1))))
    }

    /// SQL over `db`'s tables with DataFusion configured as `config` says.
    pub(crate) fn build(db: Arc<Db>, config: SessionConfig) -> Result<SqlEngine, SqlError> {
        let config = config
            .with_default_catalog_and_schema(CATALOG, SCHEMA)
            .with_create_default_catalog_and_schema(false)
            .with_information_schema(true)
            .set_str("datafusion.sql_parser.dialect", "PostgreSQL");
        let ctx = SessionContext::new_with_config(config);
        let catalog = MemoryCatalogProvider::new();
        catalog.register_schema(SCHEMA, Arc::new(catalog::StrataSchema::new(db.clone())))?;
        let pg = Arc::new(pg_catalog::PgCatalog::new(db.clone()));
        catalog.register_schema(pg_catalog::SCHEMA, pg.clone())?;
        ctx.register_catalog(CATALOG, Arc::new(catalog));
        for f in pg_catalog::functions::all(&pg) {
            ctx.register_udf(f);
        }
        let templates = parking_lot::Mutex::new(std::collections::HashMap::new());
        let default = pg_catalog::DEFAULT_NAME.to_string();
        let pg_names = parking_lot::RwLock::new((default.clone(), default));
        let shared = Arc::new(Shared { db, templates, base: ctx.state(), pg_names });
        let _ = pg.engine.set(Arc::downgrade(&shared));
        Ok(SqlEngine { shared })
    }

    /// Names the database and its owner as the PostgreSQL catalogs show them (`pg_database`,
    /// `pg_get_userbyid`, `current_database()`); both are `strata` unless set. The server sets
    /// the owner to the user it admits.
    pub fn set_pg_names(&self, database: &str, owner: &str) {
        *self.shared.pg_names.write() = (database.to_string(), owner.to_string());
    }

    /// The database's and its owner's names (see [`SqlEngine::set_pg_names`]).
    pub(crate) fn pg_names(&self) -> (String, String) {
        self.shared.pg_names.read().clone()
    }

    /// The result columns of view `name`'s query, if it plans.
    pub(crate) async fn view_schema(&self, name: &str) -> Option<SchemaRef> {
        let sql = format!("SELECT * FROM \"{}\"", name.replace('"', "\"\""));
        let stmt = self.parse(&sql).ok()?.into_iter().next()?;
        Box::pin(self.prepare(&stmt)).await.ok()?.output_schema()
    }

    /// The database.
    pub fn db(&self) -> &Arc<Db> {
        &self.shared.db
    }

    /// A session: statements run one after another, in transaction blocks where `BEGIN` opens
    /// one (see [`Session`]).
    pub fn session(&self) -> Session {
        Session::new(self.clone())
    }

    /// Parses `sql` into statements (PostgreSQL dialect; `ABORT` is read as `ROLLBACK`).
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>, SqlError> {
        let sql = rewrite::abort_as_rollback(sql);
        let parsed = DFParserBuilder::new(sql.as_ref())
            .with_dialect(&PostgreSqlDialect {})
            .with_recursion_limit(PARSER_DEPTH)
            .build()
            .and_then(|mut p| p.parse_statements());
        match parsed {
            Ok(stmts) => Ok(stmts.into_iter().collect()),
            // DataFusion's parser takes only COPY ... TO; sqlparser's takes COPY ... FROM.
            Err(e) => match copy::parse(&sql, |more| self.parse(more)) {
                Some(parsed) => parsed,
                None => match rewrite::maintenance(&sql) {
                    Some(stmt) => Ok(vec![Statement::Statement(Box::new(stmt))]),
                    None => Err(e.into()),
                },
            },
        }
    }

    /// `sql` as a point statement ([`Prepared::Point`]) with its values as parameters, if it
    /// is one: its literals are taken out (`WHERE aid = 40213` becomes `WHERE aid = $1`), and
    /// the template is planned once and kept (up to [`TEMPLATES`] of them), so statements that
    /// differ only in their values are not parsed again. `None` for other statements, and for
    /// values the template's parameters do not take as written (an integer for a TEXT key, an
    /// integer out of the column's range): those are planned from their text as they are.
    pub fn point_from_text(&self, sql: &str) -> Option<(Arc<Prepared>, ParamValues)> {
        let (template, literals) = literals::template(sql)?;
        let cached = self.shared.templates.lock().get(&template).cloned();
        let prepared = match cached {
            Some(None) => return None,
            Some(Some(p)) if p.is_current(&self.shared.db) => p,
            _ => {
                let planned = self.plan_template(&template, literals.len());
                let mut templates = self.shared.templates.lock();
                if templates.len() >= TEMPLATES {
                    templates.clear();
                }
                templates.insert(template, planned.clone());
                planned?
            }
        };
        let types = prepared.parameter_types().ok()?;
        let mut values = Vec::with_capacity(literals.len());
        for (literal, ty) in literals.into_iter().zip(types) {
            values.push(literals::bind(literal, ty.as_ref()?)?.into());
        }
        Some((prepared, ParamValues::List(values)))
    }

    /// A template (from [`literals::template`], `n` parameters) planned as a point statement
    /// taking every parameter, if it is one.
    fn plan_template(&self, template: &str, n: usize) -> Option<Arc<Prepared>> {
        let mut statements = DFParser::parse_sql_with_dialect(template, &PostgreSqlDialect {}).ok()?;
        if statements.len() != 1 {
            return None;
        }
        let Statement::Statement(ast) = statements.pop_front()? else { return None };
        let point = point::plan(&self.shared.db, &ast, &[])?;
        let types = point.parameter_types();
        (types.len() == n && types.iter().all(Option::is_some)).then(|| Arc::new(Prepared::Point(Arc::new(point))))
    }

    /// Runs every statement of `sql` in order, in a session of its own, and returns their
    /// outputs. It stops at the first statement that fails; the statements before it stay
    /// applied (those of a block left open are rolled back), the failed one changed nothing.
    pub async fn execute(&self, sql: &str) -> Result<Vec<Output>, SqlError> {
        self.session().execute(sql).await
    }

    /// Runs one parsed statement in a session of its own.
    pub async fn run(&self, stmt: &Statement) -> Result<Output, SqlError> {
        self.session().run(stmt).await
    }

    /// Plans a statement for running, possibly many times with different parameters (`$1`,
    /// `$2`, ...): the extended query protocol's prepared statements. Parameter types are
    /// inferred from where the parameters stand (`id = $1` takes `id`'s type).
    pub async fn prepare(&self, stmt: &Statement) -> Result<Prepared, SqlError> {
        self.prepare_typed(stmt, &[]).await
    }

    /// [`SqlEngine::prepare`] with the types a client declared for its parameters (`$1` is
    /// `declared[0]`, and so on; `None` leaves a type to inference). A declared type is what
    /// the parameter is, as in `PREPARE p (INT) AS ...`: `SELECT $1` declared BIGINT returns a
    /// BIGINT. Text types are left to inference, as PostgreSQL treats an untyped literal: `id
    /// = $1` with `$1` sent as text compares with `id`'s type, not as strings.
    pub async fn prepare_typed(&self, stmt: &Statement, declared: &[Option<DataType>]) -> Result<Prepared, SqlError> {
        self.prepare_inner(stmt, declared, true).await
    }

    /// Plans `stmt`; `describe` works out the result schema ([`Prepared::output_schema`]).
    async fn prepare_inner(
        &self,
        stmt: &Statement,
        declared: &[Option<DataType>],
        describe: bool,
    ) -> Result<Prepared, SqlError> {
        if let Statement::Statement(ast) = stmt {
            if let Some(p) = point::plan(&self.shared.db, ast, declared) {
                return Ok(Prepared::Point(Arc::new(p)));
            }
            match ast.as_ref() {
                AstStatement::CreateTable(_)
                | AstStatement::AlterTable(_)
                | AstStatement::CreateIndex(_)
                | AstStatement::Drop {
                    object_type: ObjectType::Table | ObjectType::View | ObjectType::Index, ..
                } => {
                    return Ok(Prepared::Ddl(ast.clone()));
                }
                AstStatement::CreateView(cv) => {
                    // The query must plan now, as PostgreSQL checks a view's query at CREATE.
                    let mut query = AstStatement::Query(cv.query.clone());
                    self.rewrite_for_planning(&mut query)?;
                    self.plan_with_parameter_types(&Statement::Statement(Box::new(query)), &[]).await?;
                    return Ok(Prepared::Ddl(ast.clone()));
                }
                AstStatement::Truncate(t) if t.table_names.len() > 1 => {
                    // Several tables: one TRUNCATE each, run as one statement.
                    let mut plans = Vec::with_capacity(t.table_names.len());
                    for target in &t.table_names {
                        let one = datafusion::sql::sqlparser::ast::Truncate {
                            table_names: vec![target.clone()],
                            ..t.clone()
                        };
                        let stmt = Statement::Statement(Box::new(AstStatement::Truncate(one)));
                        plans.push(self.plan_with_parameter_types(&stmt, &[]).await?);
                    }
                    return Ok(Prepared::Writes { plans, tag: "TRUNCATE TABLE" });
                }
                AstStatement::ShowVariable { variable } => {
                    if let Some(show) = session::show_of_session(variable) {
                        return Ok(show);
                    }
                    if let Some((name, value)) = session::show(variable) {
                        let sql = format!("SELECT '{}' AS \"{name}\"", value.replace('\'', "''"));
                        let parsed = self.parse(&sql)?;
                        if let Some(stmt) = parsed.first() {
                            return Box::pin(self.prepare_inner(stmt, declared, describe)).await;
                        }
                    }
                }
                // PostgreSQL's upkeep: strata compacts and keeps statistics by itself.
                AstStatement::Vacuum(_) => return Ok(Prepared::Nothing("VACUUM")),
                AstStatement::Analyze(_) => return Ok(Prepared::Nothing("ANALYZE")),
                AstStatement::Prepare { name, data_types, statement } => {
                    let declared: Vec<Option<DataType>> = data_types.iter().map(arrow_type_of_sql).collect();
                    let inner = Statement::Statement(statement.clone());
                    let planned = Box::pin(self.prepare_inner(&inner, &declared, true)).await?;
                    if matches!(planned, Prepared::Named(_) | Prepared::Control(_) | Prepared::Bound(_)) {
                        return Err(SqlError::unsupported(format!("PREPARE of {}", first_words_of(statement))));
                    }
                    return Ok(Prepared::Named(Named::Prepare {
                        name: name.value.clone(),
                        statement: Arc::new(planned),
                    }));
                }
                AstStatement::Execute {
                    name: Some(name),
                    parameters,
                    immediate: false,
                    into,
                    using,
                    output: false,
                    default: false,
                    ..
                } if into.is_empty() && using.is_empty() => {
                    let [ObjectNamePart::Identifier(name)] = name.0.as_slice() else {
                        return Err(SqlError::unsupported(format!("EXECUTE {name}")));
                    };
                    return Ok(Prepared::Named(Named::Execute { name: name.value.clone(), args: parameters.clone() }));
                }
                AstStatement::Deallocate { name, .. } => {
                    let all = name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all");
                    return Ok(Prepared::Named(Named::Deallocate { name: (!all).then(|| name.value.clone()) }));
                }
                AstStatement::Copy { .. } => {
                    return Ok(Prepared::CopyIn(Box::new(copy::prepare(&self.shared.db, ast)?)));
                }
                AstStatement::Set(set)
                    if !matches!(set, datafusion::sql::sqlparser::ast::Set::SetTransaction { .. }) =>
                {
                    session::check(set)?;
                    return Ok(Prepared::Set);
                }
                _ => {}
            }
            if let Some(c) = txn::control(ast)? {
                return Ok(Prepared::Control(c));
            }
        }
        if matches!(stmt, Statement::CreateExternalTable(_) | Statement::CopyTo(_)) {
            return Err(SqlError::unsupported("CREATE EXTERNAL TABLE and COPY"));
        }
        // A statement prepared to run later keeps what it was planned from, to be planned
        // again if a table it reads is replaced meanwhile.
        let source = describe.then(|| Arc::new(Source { stmt: stmt.clone(), declared: declared.to_vec() }));
        let mut stmt = stmt.clone();
        let mut names = None;
        if let Statement::Statement(ast) = &mut stmt {
            names = self.rewrite_for_planning(ast)?.map(Arc::new);
        }
        let plan = self.plan_with_parameter_types(&stmt, declared).await?;
        match &plan {
            LogicalPlan::Ddl(_) | LogicalPlan::Copy(_) | LogicalPlan::Statement(_) => {
                Err(SqlError::unsupported(format!("statement {}", first_words(&stmt))))
            }
            LogicalPlan::Dml(_) => Ok(Prepared::Plan { plan, schema: None, source, names: None }),
            _ if !describe => Ok(Prepared::Plan { plan, schema: None, source, names }),
            _ => {
                let schema = self.result_schema(&plan);
                let schema = Some(names.as_ref().map_or(schema.clone(), |n| n.apply(&schema)));
                Ok(Prepared::Plan { plan, schema, source, names })
            }
        }
    }

    /// The statement as DataFusion is to plan it: views expanded first (so what follows applies
    /// to their queries too), then the rewrites that keep DataFusion from failing or answering
    /// wrongly; the names its result columns are to be sent under, where they repeat.
    fn rewrite_for_planning(&self, ast: &mut AstStatement) -> Result<Option<names::Renames>, SqlError> {
        pg_catalog::rewrite::rewrite(ast);
        views::expand(&self.shared.db, ast)?;
        rewrite::in_lists_without_nulls(ast);
        rewrite::function_columns(ast);
        to_char::translate(ast)?;
        decorrelate::rewrite(ast);
        Ok(names::dedupe(ast))
    }

    /// `prepared` as it must run now: planned again if a table it reads was dropped and
    /// created again (or rebuilt) since it was planned, as PostgreSQL plans a prepared
    /// statement again. A statement whose parameter or result types that changes is refused
    /// (0A000); one whose table is gone fails as a statement naming a missing table does.
    pub(crate) async fn current(&self, prepared: &Prepared) -> Result<Option<Prepared>, SqlError> {
        let Prepared::Plan { plan, schema, source: Some(source), .. } = prepared else { return Ok(None) };
        if table::plan_is_current(plan, &self.shared.db) {
            return Ok(None);
        }
        let fresh = Box::pin(self.prepare_inner(&source.stmt, &source.declared, true)).await?;
        let same_parameters = fresh.parameter_types()? == prepared.parameter_types()?;
        let same_result = schema.is_none() || fresh.output_schema() == *schema;
        if !same_parameters || !same_result {
            return Err(SqlError::unsupported(
                "cached plan must not change result type (a table it reads was replaced)",
            ));
        }
        Ok(Some(fresh))
    }

    /// Plans `stmt` with the leading run of `declared` parameter types that SQL can name, as
    /// `PREPARE _ (types) AS stmt` would.
    async fn plan_with_parameter_types(
        &self,
        stmt: &Statement,
        declared: &[Option<DataType>],
    ) -> Result<LogicalPlan, SqlError> {
        let types: Vec<SqlDataType> = declared.iter().map_while(|t| t.as_ref().and_then(sql_type)).collect();
        let state = &self.shared.base;
        match stmt {
            Statement::Statement(ast) if !types.is_empty() => {
                let wrapped =
                    AstStatement::Prepare { name: Ident::new("strata"), data_types: types, statement: ast.clone() };
                match state.statement_to_plan(Statement::Statement(Box::new(wrapped))).await? {
                    LogicalPlan::Statement(PlanStatement::Prepare(p)) => Ok(Arc::unwrap_or_clone(p.input)),
                    other => Ok(other),
                }
            }
            _ => Ok(state.statement_to_plan(stmt.clone()).await?),
        }
    }

    /// The columns `plan` returns once run: its schema after type coercion, which is what the
    /// physical plan produces (before coercion, `CASE WHEN .. THEN int_col ELSE 1000 END` says
    /// INT where the result is BIGINT). A plan that cannot be coerced before its parameters are
    /// bound keeps its planned schema; running it checks the types it produced against it.
    fn result_schema(&self, plan: &LogicalPlan) -> SchemaRef {
        let state = &self.shared.base;
        match state.analyzer().execute_and_check(plan.clone(), state.config_options(), |_, _| {}) {
            Ok(analyzed) => Arc::new(analyzed.schema().as_arrow().clone()),
            Err(_) => Arc::new(plan.schema().as_arrow().clone()),
        }
    }

    /// A SQL boolean expression over `table`'s columns (`a > 5 AND b IS NOT NULL`) as a filter
    /// strata's own scans apply ([`strata::scan::ScanRequest::filter`]): comparisons of a column
    /// with a literal, `IS [NOT] NULL`, `BETWEEN`, `IN` lists, boolean columns, `AND`, `OR` and
    /// `NOT`. Anything else is refused (run such queries through SQL instead).
    pub fn scan_filter(&self, table: &strata::Table, sql: &str) -> Result<strata::scan::Expr, SqlError> {
        let schema = table.schema();
        let all: Vec<usize> = (0..schema.columns().len()).collect();
        let arrow = strata::scan::row_schema(schema, &all);
        let qualified = Arc::new(DFSchema::try_from_qualified_schema(table.name(), &arrow)?);
        let expr = self.shared.base.create_logical_expr(sql, &qualified)?;
        if let Some(e) = filter::translate(&expr, schema) {
            return Ok(e);
        }
        // Typed literals (`DATE '2026-11-25'`) and constant arithmetic arrive as casts and
        // expressions: coerce and fold them, then try again.
        let simplifier = ExprSimplifier::new(SimplifyContext::builder().with_schema(qualified.clone()).build());
        let folded = simplifier.simplify(simplifier.coerce(expr, &qualified)?)?;
        filter::translate(&folded, schema).ok_or_else(|| {
            SqlError::unsupported(format!(
                "filter `{sql}`: a scan applies comparisons of a column with a literal, IS [NOT] NULL, \
                 BETWEEN, IN lists, AND, OR and NOT; run other filters through SQL"
            ))
        })
    }

    /// Runs a prepared statement, with values for its parameters if it has any, in a session of
    /// its own.
    pub async fn execute_prepared(&self, prepared: &Prepared, params: Option<ParamValues>) -> Result<Output, SqlError> {
        self.session().execute_prepared(prepared, params).await
    }

    /// Runs CREATE TABLE, ALTER TABLE, DROP TABLE, CREATE VIEW or DROP VIEW.
    fn run_ddl(&self, ast: &AstStatement) -> Result<Output, SqlError> {
        let db = &self.shared.db;
        match ast {
            AstStatement::CreateTable(ct) => {
                ddl::create_table(db, ct)?;
                Ok(Output::Command { tag: "CREATE TABLE", rows: 0 })
            }
            AstStatement::Drop { object_type: ObjectType::View, names, if_exists, .. } => {
                views::drop_views(db, names, *if_exists)?;
                Ok(Output::Command { tag: "DROP VIEW", rows: 0 })
            }
            AstStatement::Drop { object_type: ObjectType::Index, names, if_exists, .. } => {
                indexes::drop_indexes(db, names, *if_exists)?;
                Ok(Output::Command { tag: "DROP INDEX", rows: 0 })
            }
            AstStatement::Drop { names, if_exists, .. } => {
                ddl::drop_tables(db, names, *if_exists)?;
                Ok(Output::Command { tag: "DROP TABLE", rows: 0 })
            }
            AstStatement::CreateIndex(ci) => {
                indexes::create_index(db, ci)?;
                Ok(Output::Command { tag: "CREATE INDEX", rows: 0 })
            }
            AstStatement::CreateView(cv) => {
                views::create_view(db, cv)?;
                Ok(Output::Command { tag: "CREATE VIEW", rows: 0 })
            }
            AstStatement::AlterTable(at) => {
                ddl::alter_table(db, at)?;
                Ok(Output::Command { tag: "ALTER TABLE", rows: 0 })
            }
            other => Err(SqlError::unsupported(format!("statement {other}"))),
        }
    }

    /// Runs a bound plan, its scans reading at `reads`; a DML statement writes into the
    /// transaction `reads` holds (the caller commits it).
    async fn run_plan(
        &self,
        plan: &LogicalPlan,
        names: Option<&names::Renames>,
        reads: Reads,
    ) -> Result<Output, SqlError> {
        let mut state = self.shared.base.clone();
        let txn = match &reads {
            Reads::Txn(cell) => Some(cell.clone()),
            Reads::Snapshot(_) => None,
        };
        state.config_mut().set_extension(Arc::new(reads));
        match (plan, txn) {
            (LogicalPlan::Dml(dml), Some(tx)) => {
                let done = dml::execute(&self.shared.db, &state, dml, &tx).await?;
                Ok(Output::Command { tag: done.tag, rows: done.rows })
            }
            (LogicalPlan::Dml(_), None) => Err(SqlError::new(ErrorKind::Internal, "a write outside a transaction")),
            _ => {
                let physical = state.create_physical_plan(plan).await?;
                let batches = datafusion::physical_plan::collect(physical.clone(), state.task_ctx()).await?;
                let Some(names) = names else { return Ok(Output::Rows { schema: physical.schema(), batches }) };
                let schema = names.apply(&physical.schema());
                let batches = batches
                    .into_iter()
                    .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| SqlError::new(ErrorKind::Internal, e.to_string()))?;
                Ok(Output::Rows { schema, batches })
            }
        }
    }
}

/// How deeply expressions and subqueries may nest (DataFusion's parser stops at 50, which
/// SQLite's sqllogictest corpus exceeds with its parenthesized conditions). Deeper statements
/// are refused with a syntax error rather than risking the stack.
pub const PARSER_DEPTH: usize = 200;

/// How many statement templates [`SqlEngine::point_from_text`] keeps planned (all are dropped
/// when there are more).
pub const TEMPLATES: usize = 4096;

/// `config` with the planner settings that suit strata's scans.
pub(crate) fn tuned(mut config: SessionConfig) -> SessionConfig {
    // Scans come cut into key ranges (`table::properties`): an aggregate or join on columns
    // that include a table's leading key column takes its partitions as they are, unless
    // repartitioning would raise the number of partitions.
    let partitions = config.target_partitions();
    let optimizer = &mut config.options_mut().optimizer;
    optimizer.subset_repartition_threshold = partitions;
    // A join builds one hash table from a side of up to 8 MiB (as estimated: TPC-H's customer
    // with its names, part, supplier) and probes it from every partition of the other side,
    // which keeps that side's key ranges: repartitioning both sides by hash instead would
    // scatter orders and lineitem, which otherwise join range by range. Larger sides (orders,
    // partsupp) are built in parallel, one hash table per partition.
    optimizer.hash_join_single_partition_threshold = 8 << 20;
    config
}

/// A statement ready to run: see [`SqlEngine::prepare`].
#[derive(Debug, Clone)]
pub enum Prepared {
    /// BEGIN, COMMIT, ROLLBACK or SET TRANSACTION: see [`Session`].
    Control(TxnControl),
    /// CREATE TABLE or DROP TABLE, run by strata itself.
    Ddl(Box<AstStatement>),
    /// A `SET` of a session parameter to the value strata already works with (drivers send
    /// these when they connect); it changes nothing.
    Set,
    /// A statement strata takes and has nothing to do for (`VACUUM`, `ANALYZE`): it answers
    /// with this command tag.
    Nothing(&'static str),
    /// `SHOW` of a setting the session answers (the isolation level): one text column of this
    /// name.
    Show {
        /// The result column's name.
        column: &'static str,
        /// The session's default (`default_transaction_isolation`) rather than its block's.
        default: bool,
    },
    /// Several writes run as one statement, all or none (`TRUNCATE a, b`).
    Writes {
        /// The DML plans, run in order.
        plans: Vec<LogicalPlan>,
        /// The statement's command tag.
        tag: &'static str,
    },
    /// `COPY table FROM STDIN`: it runs when the client has sent its rows
    /// ([`Session::copy_in`]), or at once with the rows a script gave after it.
    CopyIn(Box<CopyIn>),
    /// A statement naming one row by its primary key, planned by strata itself (see
    /// `point.rs`): `SELECT cols FROM t WHERE k = $1`, `UPDATE t SET n = n + $2 WHERE k = $1`.
    Point(Arc<point::Point>),
    /// SQL's `PREPARE`, `EXECUTE` or `DEALLOCATE`: see [`Named`].
    Named(Named),
    /// A named statement with the arguments an `EXECUTE` gave it, ready to run: what a
    /// [`Session`] makes of `EXECUTE name (args)`.
    Bound(Box<Bound>),
    /// A query or DML statement as DataFusion planned it.
    Plan {
        /// The plan, with its parameters as placeholders.
        plan: LogicalPlan,
        /// The columns a query returns (see [`Prepared::output_schema`]); `None` for DML and for
        /// a statement [`SqlEngine::run`] plans to run at once.
        schema: Option<SchemaRef>,
        /// What it was planned from, for a statement prepared to run later (see
        /// [`SqlEngine::prepare`]); `None` for one planned to run at once.
        source: Option<Arc<Source>>,
        /// The names its result columns are sent under where they differ from the plan's
        /// (columns that share a name, which the plan cannot have: see `names.rs`).
        names: Option<Arc<names::Renames>>,
    },
}

/// The statement a prepared plan was planned from, and its declared parameter types.
#[derive(Debug)]
pub struct Source {
    stmt: Statement,
    declared: Vec<Option<DataType>>,
}

impl Prepared {
    /// The types of the parameters `$1`, `$2`, ... where DataFusion could infer them.
    pub fn parameter_types(&self) -> Result<Vec<Option<DataType>>, SqlError> {
        match self {
            Prepared::Control(_)
            | Prepared::Ddl(_)
            | Prepared::Set
            | Prepared::Nothing(_)
            | Prepared::Show { .. }
            | Prepared::CopyIn(_)
            | Prepared::Named(_)
            | Prepared::Bound(_)
            | Prepared::Writes { .. } => Ok(Vec::new()),
            Prepared::Point(p) => Ok(p.parameter_types().to_vec()),
            Prepared::Plan { plan, .. } => {
                let types = plan.get_parameter_types()?;
                let mut named: Vec<(usize, Option<DataType>)> = types
                    .into_iter()
                    .filter_map(|(name, t)| Some((name.trim_start_matches('$').parse::<usize>().ok()?, t)))
                    .collect();
                named.sort_by_key(|(i, _)| *i);
                let n = named.last().map_or(0, |(i, _)| *i);
                let mut out = vec![None; n];
                for (i, t) in named {
                    if i >= 1 {
                        out[i - 1] = t;
                    }
                }
                Ok(out)
            }
        }
    }

    /// Whether it was planned for the tables as they are now (a point statement whose table
    /// was dropped or replaced since is not; other statements always are).
    fn is_current(&self, db: &Db) -> bool {
        match self {
            Prepared::Point(p) => p.is_current(db),
            _ => true,
        }
    }

    /// Whether it reads one row by its primary key and nothing else: it runs in a few
    /// microseconds, without awaiting anything but the session, and changes nothing, so a
    /// server may run it in place rather than as a task of its own.
    pub fn is_point_read(&self) -> bool {
        matches!(self, Prepared::Point(p) if !p.writes())
    }

    /// The columns a query returns (none for a command), with the types running it produces:
    /// a client is told these before it runs the statement, and the values sent must be of
    /// these types.
    pub fn output_schema(&self) -> Option<SchemaRef> {
        match self {
            Prepared::Control(_)
            | Prepared::Ddl(_)
            | Prepared::Set
            | Prepared::Nothing(_)
            | Prepared::CopyIn(_)
            | Prepared::Named(_)
            | Prepared::Writes { .. } => None,
            Prepared::Bound(b) => b.statement.output_schema(),
            Prepared::Show { column, .. } => Some(session::show_schema(column)),
            Prepared::Point(p) => p.output_schema(),
            Prepared::Plan { schema, .. } => schema.clone(),
        }
    }
}

/// SQL's statements on named prepared statements, which a [`Session`] keeps.
#[derive(Debug, Clone)]
pub enum Named {
    /// `PREPARE name [(types)] AS statement`: the statement, planned.
    Prepare {
        /// The name it is kept under.
        name: String,
        /// The statement.
        statement: Arc<Prepared>,
    },
    /// `EXECUTE name [(args)]`, before the session looks the name up.
    Execute {
        /// The name.
        name: String,
        /// The arguments, constant expressions.
        args: Vec<datafusion::sql::sqlparser::ast::Expr>,
    },
    /// `DEALLOCATE [PREPARE] name` (`None`: `ALL`).
    Deallocate {
        /// The name, `None` for all.
        name: Option<String>,
    },
}

/// A named prepared statement and the values an `EXECUTE` gave its parameters.
#[derive(Debug, Clone)]
pub struct Bound {
    statement: Arc<Prepared>,
    params: ParamValues,
}

impl SqlEngine {
    /// The values of an `EXECUTE`'s arguments as `statement`'s parameters take them: each a
    /// constant expression, folded and cast to the parameter's type.
    fn bind_arguments(
        &self,
        name: &str,
        statement: Arc<Prepared>,
        args: &[datafusion::sql::sqlparser::ast::Expr],
    ) -> Result<Prepared, SqlError> {
        let types = statement.parameter_types()?;
        if types.len() != args.len() {
            return Err(SqlError::new(
                ErrorKind::InvalidStatement,
                format!(
                    "wrong number of parameters for prepared statement \"{name}\": expected {}, got {}",
                    types.len(),
                    args.len()
                ),
            ));
        }
        let empty = Arc::new(DFSchema::empty());
        let simplifier = ExprSimplifier::new(SimplifyContext::builder().with_schema(empty.clone()).build());
        let mut values = Vec::with_capacity(args.len());
        for (arg, ty) in args.iter().zip(&types) {
            let expr = self.shared.base.create_logical_expr(&arg.to_string(), &empty)?;
            let folded = simplifier.simplify(simplifier.coerce(expr, &empty)?)?;
            let datafusion::logical_expr::Expr::Literal(v, _) = folded else {
                return Err(SqlError::unsupported(format!("EXECUTE argument {arg}: strata takes constant arguments")));
            };
            let v = match ty {
                Some(t) if v.data_type() != *t => v.cast_to(t)?,
                _ => v,
            };
            values.push(v.into());
        }
        Ok(Prepared::Bound(Box::new(Bound { statement, params: ParamValues::List(values) })))
    }
}

/// The Arrow type a parameter declared as SQL type `t` (`PREPARE p (INT) AS ...`) takes; `None`
/// for text and types left to inference.
fn arrow_type_of_sql(t: &SqlDataType) -> Option<DataType> {
    Some(match t {
        SqlDataType::Boolean | SqlDataType::Bool => DataType::Boolean,
        SqlDataType::SmallInt(_) | SqlDataType::Int2(_) => DataType::Int16,
        SqlDataType::Int(_) | SqlDataType::Integer(_) | SqlDataType::Int4(_) => DataType::Int32,
        SqlDataType::BigInt(_) | SqlDataType::Int8(_) => DataType::Int64,
        SqlDataType::Real | SqlDataType::Float4 => DataType::Float32,
        SqlDataType::Double(_) | SqlDataType::DoublePrecision | SqlDataType::Float8 => DataType::Float64,
        SqlDataType::Date => DataType::Date32,
        SqlDataType::Bytea => DataType::Binary,
        _ => return None,
    })
}

/// The SQL type naming an Arrow type a parameter can be declared as; `None` for text (left to
/// inference) and types SQL has no plain name for.
fn sql_type(t: &DataType) -> Option<SqlDataType> {
    Some(match t {
        DataType::Boolean => SqlDataType::Boolean,
        DataType::Int16 => SqlDataType::SmallInt(None),
        DataType::Int32 => SqlDataType::Int(None),
        DataType::Int64 => SqlDataType::BigInt(None),
        DataType::Float32 => SqlDataType::Real,
        DataType::Float64 => SqlDataType::Double(ExactNumberInfo::None),
        DataType::Binary => SqlDataType::Bytea,
        DataType::Date32 => SqlDataType::Date,
        _ => return None,
    })
}

/// The first words of a statement, to name it in an error.
fn first_words(stmt: &Statement) -> String {
    stmt.to_string().split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// The first two words of a statement (`CREATE TABLE`), to name it in an error.
pub(crate) fn first_words_of(stmt: &AstStatement) -> String {
    stmt.to_string().split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

/// A key as SQL shows it: `(1, 'a')`.
pub(crate) fn display_key(key: &[Value]) -> String {
    let parts: Vec<String> = key
        .iter()
        .map(|v| match v {
            Value::Text(s) => format!("'{s}'"),
            Value::Null => "NULL".into(),
            Value::BigInt(x) => x.to_string(),
            Value::Int(x) => x.to_string(),
            Value::SmallInt(x) => x.to_string(),
            Value::TinyInt(x) => x.to_string(),
            Value::Double(x) => x.to_string(),
            Value::Real(x) => x.to_string(),
            Value::Boolean(x) => x.to_string(),
            Value::Date(d) => format!("'{}'", strata::types::format_date(*d)),
            Value::Timestamp(t) => format!("'{}'", strata::types::format_timestamp(*t)),
            Value::TimestampTz(t) => format!("'{}'", strata::types::format_timestamptz(*t)),
            Value::Bytea(b) => format!("'\\x{}'", b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        })
        .collect();
    format!("({})", parts.join(", "))
}
