//! The database's tables as DataFusion's schema `strata.public`. Tables are looked up in the
//! database on every statement, so tables created or dropped by other sessions (or through the
//! Rust API) are seen at once; DDL goes through [`crate::ddl`], not through this provider.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::SchemaProvider;
use datafusion::common::{exec_err, Result as DfResult};
use datafusion::datasource::TableProvider;
use strata::{Column, ColumnType, Db, Schema, Table, TableOptions};

use crate::error::SqlError;

use crate::table::StrataTable;

/// The catalog and schema names tables resolve in (`strata.public.t`, or plain `t`).
pub const CATALOG: &str = "strata";
/// See [`CATALOG`].
pub const SCHEMA: &str = "public";

/// The prefix of strata-sql's own tables (tables being rebuilt, the views' definitions), which
/// SQL never shows.
pub(crate) const OWN_PREFIX: &str = "__strata_";

fn is_own(name: &str) -> bool {
    name.starts_with(OWN_PREFIX)
}

/// One of strata-sql's own tables (`__strata_views`, `__strata_indexes`), if it exists yet.
pub(crate) fn own_table(db: &Db, name: &str) -> Result<Option<Table>, SqlError> {
    match db.table(name) {
        Ok(t) => Ok(Some(t)),
        Err(strata::Error::UnknownTable(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// One of strata-sql's own tables, created on first use: NOT NULL `columns`, keyed by the
/// first. Another session creating it meanwhile is no error.
pub(crate) fn own_table_or_create(db: &Db, name: &str, columns: &[(&str, ColumnType)]) -> Result<Table, SqlError> {
    if let Some(t) = own_table(db, name)? {
        return Ok(t);
    }
    let key = columns.first().map(|(n, _)| *n).unwrap_or_default();
    let schema = Schema::new(columns.iter().map(|&(n, ty)| Column::not_null(n, ty)).collect(), &[key])?;
    match db.create_table(name, schema, TableOptions::default()) {
        Ok(t) => Ok(t),
        Err(strata::Error::TableExists(_)) => Ok(db.table(name)?),
        Err(e) => Err(e.into()),
    }
}

pub(crate) struct StrataSchema {
    db: Arc<Db>,
}

impl std::fmt::Debug for StrataSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StrataSchema").finish_non_exhaustive()
    }
}

impl StrataSchema {
    pub(crate) fn new(db: Arc<Db>) -> Self {
        StrataSchema { db }
    }
}

#[async_trait]
impl SchemaProvider for StrataSchema {
    fn table_names(&self) -> Vec<String> {
        self.db.table_names().into_iter().filter(|n| !is_own(n)).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if is_own(name) {
            return Ok(None);
        }
        match self.db.table(name) {
            Ok(t) => Ok(Some(Arc::new(StrataTable::new(self.db.clone(), t)))),
            Err(strata::Error::UnknownTable(_)) => Ok(None),
            Err(e) => Err(crate::error::external(e)),
        }
    }

    fn register_table(&self, name: String, _table: Arc<dyn TableProvider>) -> DfResult<Option<Arc<dyn TableProvider>>> {
        exec_err!("cannot register `{name}`: strata tables are created with CREATE TABLE")
    }

    fn deregister_table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        exec_err!("cannot deregister `{name}`: strata tables are dropped with DROP TABLE")
    }

    fn table_exist(&self, name: &str) -> bool {
        !is_own(name) && self.db.table(name).is_ok()
    }
}
