//! Views: `CREATE [OR REPLACE] VIEW name [(columns)] AS query` and `DROP VIEW [IF EXISTS]
//! names`.
//!
//! A view is kept as the text of its query (and its column names) in a table of strata-sql's
//! own, [`VIEWS`], which SQL never shows; it is written like any row, so it is durable and
//! survives crashes as rows do. A statement naming a view reads it as its query: before
//! planning, each `FROM view [AS alias]` becomes `FROM (query) AS view` ([`expand`]), so views
//! within views and the view's own columns resolve as a subquery in FROM would.
//!
//! A view's query is planned when the view is created (a view over a missing table or column is
//! refused then), but not again when the tables under it change: a view over a dropped table
//! fails when it is read. A prepared statement keeps the view text it was planned with.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    CreateView, Ident, ObjectName, Query, Statement, TableAlias, TableAliasColumnDef, TableFactor, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use strata::{ColumnType, Db, Table, Value};

use crate::catalog::{own_table, own_table_or_create, OWN_PREFIX};
use crate::ddl::{normalize, table_name};
use crate::error::{ErrorKind, SqlError};

/// The table views are kept in: `name` (the key), `columns` (the declared column names, one
/// per line; empty if none were) and `query` (the query's SQL text).
pub(crate) const VIEWS: &str = "__strata_views";

/// How many views one statement may read through (views within views count each time): a view
/// that reads itself (through `OR REPLACE`) fails instead of expanding without end.
const MAX_EXPANSIONS: usize = 256;

fn views_table(db: &Db) -> Result<Option<Table>, SqlError> {
    own_table(db, VIEWS)
}

/// A view's declared column names and query.
struct View {
    columns: Vec<String>,
    query: Query,
}

/// The view called `name`, if there is one.
fn view(views: &Table, name: &str) -> Result<Option<View>, SqlError> {
    let projection = views.projection(&["columns", "query"])?;
    let key = [Value::Text(name.into())];
    let Some(row) = views.get(&key, &projection, &Default::default())? else { return Ok(None) };
    let (Some(Value::Text(columns)), Some(Value::Text(text))) = (row.first(), row.get(1)) else {
        return Err(SqlError::new(ErrorKind::Internal, format!("view {name} is stored damaged")));
    };
    let query = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(text)
        .and_then(|mut p| p.parse_query())
        .map_err(|e| SqlError::new(ErrorKind::Internal, format!("view {name}'s stored query does not parse: {e}")))?;
    let columns = columns.lines().map(str::to_string).collect();
    Ok(Some(View { columns, query: *query }))
}

/// Every view's name and query text, in name order.
pub(crate) fn all(db: &Db) -> Result<Vec<(String, String)>, SqlError> {
    let Some(views) = views_table(db)? else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for row in views.scan(&strata::KeyRange::all(), &strata::Projection::All, &Default::default())? {
        if let [Value::Text(name), _, Value::Text(query)] = row?.as_slice() {
            out.push((name.clone(), query.clone()));
        }
    }
    Ok(out)
}

/// Whether a view called `name` exists.
pub(crate) fn exists(db: &Db, name: &str) -> Result<bool, SqlError> {
    match views_table(db)? {
        Some(views) => Ok(view(&views, name)?.is_some()),
        None => Ok(false),
    }
}

/// Stores the view `cv` creates (its query already planned by the caller). Refused with 42P07
/// if a table or (without `OR REPLACE`) a view has the name.
pub(crate) fn create_view(db: &Db, cv: &CreateView) -> Result<(), SqlError> {
    if cv.materialized || cv.temporary || cv.or_alter || cv.to.is_some() {
        return Err(SqlError::unsupported("CREATE VIEW supports OR REPLACE, IF NOT EXISTS and a column list only"));
    }
    let name = table_name(&cv.name)?;
    if name.starts_with(OWN_PREFIX) {
        return Err(SqlError::invalid(format!("names starting with {OWN_PREFIX} are strata's own")));
    }
    if db.table(&name).is_ok() {
        return Err(SqlError::new(ErrorKind::DuplicateTable, format!("relation {name} already exists (a table)")));
    }
    if exists(db, &name)? {
        if cv.if_not_exists {
            return Ok(());
        }
        if !cv.or_replace {
            return Err(SqlError::new(ErrorKind::DuplicateTable, format!("view {name} already exists")));
        }
    }
    let views = own_table_or_create(
        db,
        VIEWS,
        &[("name", ColumnType::Text), ("columns", ColumnType::Text), ("query", ColumnType::Text)],
    )?;
    let columns: Vec<String> = cv.columns.iter().map(|c| normalize(&c.name)).collect();
    // Synced: DDL is durable once done.
    let sync = strata::WriteOptions { sync: true };
    views
        .insert_with(&[Value::Text(name), Value::Text(columns.join("\n")), Value::Text(cv.query.to_string())], &sync)?;
    Ok(())
}

/// Runs a `DROP VIEW`; returns how many views were dropped. A name that is no view fails the
/// whole statement (unless `IF EXISTS`) before anything is dropped.
pub(crate) fn drop_views(db: &Db, names: &[ObjectName], if_exists: bool) -> Result<usize, SqlError> {
    let names: Vec<String> = names.iter().map(table_name).collect::<Result<_, _>>()?;
    let views = views_table(db)?;
    let mut present = Vec::new();
    for n in &names {
        let is_view = match &views {
            Some(v) => view(v, n)?.is_some(),
            None => false,
        };
        match (is_view, db.table(n).is_ok()) {
            (true, _) => present.push(n),
            (false, true) => {
                return Err(SqlError::new(ErrorKind::WrongObjectType, format!("{n} is not a view (it is a table)")));
            }
            (false, false) if if_exists => {}
            (false, false) => return Err(SqlError::new(ErrorKind::UndefinedTable, format!("view {n} does not exist"))),
        }
    }
    if let Some(views) = views {
        for n in &present {
            views.delete_with(&[Value::Text((*n).clone())], &strata::WriteOptions { sync: true })?;
        }
    }
    Ok(present.len())
}

/// Replaces each view `stmt` reads by its query, as a subquery in FROM named after the view
/// (or the alias it was given). Names a WITH clause of the statement defines are left alone.
pub(crate) fn expand(db: &Db, stmt: &mut Statement) -> Result<(), SqlError> {
    let Some(views) = views_table(db)? else { return Ok(()) };
    struct Expand<'a> {
        db: &'a Db,
        views: Table,
        ctes: HashSet<String>,
        expansions: usize,
    }
    impl Expand<'_> {
        fn replacement(
            &mut self,
            name: &ObjectName,
            alias: &Option<TableAlias>,
        ) -> Result<Option<TableFactor>, SqlError> {
            let Ok(view_name) = table_name(name) else { return Ok(None) };
            let single = name.0.len() == 1;
            if (single && self.ctes.contains(&view_name)) || self.db.table(&view_name).is_ok() {
                return Ok(None);
            }
            let Some(v) = view(&self.views, &view_name)? else { return Ok(None) };
            self.expansions += 1;
            if self.expansions > MAX_EXPANSIONS {
                return Err(SqlError::invalid(format!(
                    "more than {MAX_EXPANSIONS} views read by one statement (does view {view_name} read itself?)"
                )));
            }
            let mut alias = alias.clone().unwrap_or(TableAlias {
                explicit: true,
                name: Ident::with_quote('"', view_name),
                columns: Vec::new(),
                at: None,
            });
            if alias.columns.is_empty() {
                alias.columns = v.columns.iter().map(|c| TableAliasColumnDef::from_name(c.as_str())).collect();
            }
            // Its correlated subqueries are taken apart as a statement's own are
            // (decorrelate.rs looks at a statement's outermost query only).
            let mut query = Statement::Query(Box::new(v.query));
            crate::decorrelate::rewrite(&mut query);
            let Statement::Query(query) = query else { return Ok(None) };
            Ok(Some(TableFactor::Derived { lateral: false, subquery: query, alias: Some(alias), sample: None }))
        }
    }
    impl VisitorMut for Expand<'_> {
        type Break = SqlError;
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<SqlError> {
            if let TableFactor::Table { name, alias, args: None, with_hints, version: None, partitions, .. } = factor {
                if with_hints.is_empty() && partitions.is_empty() {
                    match self.replacement(name, alias) {
                        Ok(Some(derived)) => *factor = derived,
                        Ok(None) => {}
                        Err(e) => return ControlFlow::Break(e),
                    }
                }
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<SqlError> {
            if let Some(with) = &query.with {
                self.ctes.extend(with.cte_tables.iter().map(|c| normalize(&c.alias.name)));
            }
            ControlFlow::Continue(())
        }
    }
    let mut visitor = Expand { db, views, ctes: HashSet::new(), expansions: 0 };
    match stmt.visit(&mut visitor) {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use std::sync::Arc;

    use crate::{Output, SqlEngine};

    fn engine(dir: &std::path::Path) -> SqlEngine {
        SqlEngine::new(Arc::new(strata::Db::open(dir, strata::Options::default()).unwrap())).unwrap()
    }

    #[test]
    fn views_outlive_the_process_that_made_them() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        {
            let engine = engine(dir.path());
            rt.block_on(engine.execute(
                "CREATE TABLE t (k INT PRIMARY KEY, a INT); INSERT INTO t VALUES (1, 5), (2, 50); \
                 CREATE VIEW v (key) AS SELECT k FROM t WHERE a > 10; CREATE VIEW gone AS SELECT 1; DROP VIEW gone",
            ))
            .unwrap();
        }
        let engine = engine(dir.path());
        let out = rt.block_on(engine.execute("SELECT key FROM v")).unwrap();
        let Some(Output::Rows { batches, .. }) = out.last() else { panic!("no rows") };
        let rows: Vec<_> = batches.iter().flat_map(strata::scan::batch_rows).collect();
        assert_eq!(rows, vec![vec![strata::Value::Int(2)]]);
        assert!(rt.block_on(engine.execute("SELECT * FROM gone")).is_err());
    }
}
