//! PostgreSQL's system catalogs, `pg_catalog`, over a strata database: enough of `pg_class`,
//! `pg_attribute`, `pg_index`, `pg_constraint`, `pg_namespace`, `pg_type` and `pg_database` (and
//! the catalogs strata keeps empty: policies, publications, inheritance, defaults, ...) for
//! psql's `\d` family and for ORMs' reflection (SQLAlchemy) to read strata's tables, views and
//! indexes as they would PostgreSQL's.
//!
//! The catalogs are not stored: each statement that reads one builds it from the database as it
//! is then ([`Model::load`]), so they follow every DDL at once. Object ids are derived, never
//! stored: a table's oid is `16384 + 2 * id` (strata's table ids are never reused), the index
//! of its primary key (`T_pkey`, which PostgreSQL lists as an index) is the next number, a
//! secondary index's oid is that of the table holding its entries, and a view's is a hash of its
//! name in a range of its own. A table keyed by a hidden row id has no primary key here, as in
//! PostgreSQL, and its row id column is not listed.
//!
//! [`rewrite`] turns what PostgreSQL clients send to these catalogs into what DataFusion plans
//! (`OPERATOR(pg_catalog.~)`, `COLLATE`, `::regclass` casts, catalogs that are always empty);
//! [`functions`] holds the catalog functions (`format_type`, `pg_get_indexdef`, ...).

pub(crate) mod functions;
pub(crate) mod rewrite;

use std::sync::{Arc, OnceLock, Weak};

use async_trait::async_trait;
use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::SchemaProvider;
use datafusion::common::{exec_err, Result as DfResult, ScalarValue};
use datafusion::datasource::{MemTable, TableProvider};
use strata::{ColumnType, Db};

use crate::meta::{self, TextKind};

/// The schema name the catalogs resolve in.
pub(crate) const SCHEMA: &str = "pg_catalog";
/// The oid of schema `pg_catalog`.
const NS_PG_CATALOG: i64 = 11;
/// The oid of schema `public`, where strata's tables live.
pub(crate) const NS_PUBLIC: i64 = 2200;
/// The oid of schema `information_schema`.
const NS_INFORMATION_SCHEMA: i64 = 13_000;
/// The oid of the owner of everything (PostgreSQL's bootstrap superuser).
pub(crate) const OWNER_OID: i64 = 10;
/// The oid of the role that owns schema `public`, as in PostgreSQL 15 (`pg_database_owner`:
/// whoever owns the database).
pub(crate) const DATABASE_OWNER_OID: i64 = 6171;
/// The oid of the one database.
const DATABASE_OID: i64 = 5;
/// Access methods: tables are `heap`, indexes `btree`, as PostgreSQL's defaults.
const AM_HEAP: i64 = 2;
const AM_BTREE: i64 = 403;
/// Where oids of strata's tables and indexes start (PostgreSQL's first user oid).
const OID_BASE: i64 = 16_384;
/// Where views' oids start: above every table oid strata can hand out.
const VIEW_OID_BASE: i64 = 1 << 33;

/// The name the catalogs give the database, and its owner's name, unless the engine is told
/// otherwise ([`crate::SqlEngine::set_pg_names`]).
pub(crate) const DEFAULT_NAME: &str = "strata";

/// A column as `pg_attribute` lists it.
#[derive(Debug, Clone)]
pub(crate) struct Attr {
    pub(crate) name: String,
    pub(crate) type_oid: i64,
    /// PostgreSQL's type modifier: `n + 4` for `varchar(n)` and `char(n)`, -1 for none.
    pub(crate) typmod: i32,
    pub(crate) not_null: bool,
}

/// What kind of relation a `pg_class` row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RelKind {
    Table,
    View,
    Index,
}

impl RelKind {
    fn code(self) -> &'static str {
        match self {
            RelKind::Table => "r",
            RelKind::View => "v",
            RelKind::Index => "i",
        }
    }
}

/// An index: a secondary index, or the index PostgreSQL keeps for a primary key.
#[derive(Debug, Clone)]
pub(crate) struct IndexOf {
    pub(crate) table_oid: i64,
    pub(crate) table_name: String,
    /// The indexed columns as the table's attribute numbers (1-based).
    pub(crate) keys: Vec<i16>,
    pub(crate) key_names: Vec<String>,
    pub(crate) unique: bool,
    pub(crate) primary: bool,
}

/// A `pg_class` row.
#[derive(Debug, Clone)]
pub(crate) struct Relation {
    pub(crate) oid: i64,
    pub(crate) name: String,
    pub(crate) kind: RelKind,
    /// Its columns; a view's only when the model was loaded with them ([`Model::with_views`]).
    pub(crate) columns: Vec<Attr>,
    pub(crate) index: Option<IndexOf>,
    /// For a table: whether it has any index (its primary key's included).
    pub(crate) has_index: bool,
    /// For a view: its query's text.
    pub(crate) view_query: Option<String>,
}

/// The relations of a database at one moment, as the catalogs show them.
#[derive(Debug, Default)]
pub(crate) struct Model {
    pub(crate) relations: Vec<Relation>,
}

/// The PostgreSQL type (oid and modifier) of a strata column.
fn column_type(ty: ColumnType, kind: Option<TextKind>) -> (i64, i32) {
    match (ty, kind) {
        (ColumnType::Text, Some(TextKind::Char(n))) => (1042, n as i32 + 4),
        (ColumnType::Text, Some(TextKind::Varchar(n))) => (1043, n as i32 + 4),
        (ColumnType::BigInt, _) => (20, -1),
        (ColumnType::Int, _) => (23, -1),
        // PostgreSQL has no one-byte integer: TINYINT goes over the wire as int2.
        (ColumnType::SmallInt | ColumnType::TinyInt, _) => (21, -1),
        (ColumnType::Double, _) => (701, -1),
        (ColumnType::Real, _) => (700, -1),
        (ColumnType::Boolean, _) => (16, -1),
        (ColumnType::Text, None) => (25, -1),
        (ColumnType::Bytea, _) => (17, -1),
        (ColumnType::Date, _) => (1082, -1),
        (ColumnType::Timestamp, _) => (1114, -1),
        (ColumnType::TimestampTz, _) => (1184, -1),
    }
}

/// The PostgreSQL type (oid and modifier) values of Arrow type `ty` are sent as (the server's
/// mapping, docs/sql.md).
pub(crate) fn arrow_type(ty: &DataType) -> (i64, i32) {
    match ty {
        DataType::Boolean => (16, -1),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => (21, -1),
        DataType::Int32 | DataType::UInt16 => (23, -1),
        DataType::Int64 | DataType::UInt32 => (20, -1),
        DataType::UInt64 => (1700, -1),
        DataType::Decimal128(p, s) => (1700, ((i32::from(*p) << 16) | i32::from(*s)) + 4),
        DataType::Float16 | DataType::Float32 => (700, -1),
        DataType::Float64 => (701, -1),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => (17, -1),
        DataType::Date32 | DataType::Date64 => (1082, -1),
        DataType::Time32(_) | DataType::Time64(_) => (1083, -1),
        DataType::Timestamp(_, None) => (1114, -1),
        DataType::Timestamp(_, Some(_)) => (1184, -1),
        DataType::Interval(_) | DataType::Duration(_) => (1186, -1),
        _ => (25, -1),
    }
}

/// A view's oid: a hash of its name (FNV-1a) above every table oid.
fn view_oid(name: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    VIEW_OID_BASE + (h % (1 << 30)) as i64
}

impl Model {
    /// The relations of `db` now: its tables (with their primary keys' indexes), secondary
    /// indexes and views (without their columns).
    pub(crate) fn load(db: &Db) -> DfResult<Model> {
        let sql_err = |e: crate::SqlError| datafusion::error::DataFusionError::External(Box::new(e));
        let mut relations = Vec::new();
        let indexes = crate::indexes::describe_all(db).map_err(sql_err)?;
        let mut names = db.table_names();
        names.retain(|n| !n.starts_with(crate::catalog::OWN_PREFIX));
        names.sort();
        for name in names {
            let Ok(table) = db.table(&name) else { continue };
            let oid = OID_BASE + 2 * i64::from(table.info().id);
            let schema = table.schema();
            let visible = meta::visible_columns(&table);
            let hidden = !meta::hidden_columns(&table).is_empty();
            let columns: Vec<Attr> = visible
                .iter()
                .map(|&c| {
                    let col = &schema.columns()[c];
                    let (type_oid, typmod) = column_type(col.ty, meta::text_kind(&table, c));
                    Attr { name: col.name.clone(), type_oid, typmod, not_null: !col.nullable }
                })
                .collect();
            let attnum = |schema_col: usize| visible.iter().position(|&v| v == schema_col).map(|p| p as i16 + 1);
            let has_secondary = indexes.iter().any(|i| i.table == name);
            if !hidden {
                let keys: Vec<i16> = schema.primary_key().iter().filter_map(|&k| attnum(k)).collect();
                let key_names = schema.primary_key().iter().map(|&k| schema.columns()[k].name.clone()).collect();
                relations.push(index_relation(
                    oid + 1,
                    format!("{name}_pkey"),
                    &columns,
                    IndexOf { table_oid: oid, table_name: name.clone(), keys, key_names, unique: true, primary: true },
                ));
            }
            for ix in indexes.iter().filter(|i| i.table == name) {
                let keys = ix.columns.iter().filter_map(|c| schema.column_index(c).and_then(attnum)).collect();
                relations.push(index_relation(
                    OID_BASE + 2 * i64::from(ix.data_id),
                    ix.name.clone(),
                    &columns,
                    IndexOf {
                        table_oid: oid,
                        table_name: name.clone(),
                        keys,
                        key_names: ix.columns.clone(),
                        unique: ix.unique,
                        primary: false,
                    },
                ));
            }
            relations.push(Relation {
                oid,
                name,
                kind: RelKind::Table,
                columns,
                index: None,
                has_index: !hidden || has_secondary,
                view_query: None,
            });
        }
        for (name, query) in crate::views::all(db).map_err(sql_err)? {
            relations.push(Relation {
                oid: view_oid(&name),
                name,
                kind: RelKind::View,
                columns: Vec::new(),
                index: None,
                has_index: false,
                view_query: Some(query),
            });
        }
        relations.sort_by_key(|r| r.oid);
        Ok(Model { relations })
    }

    /// Fills in the views' columns: the result columns of each view's query, as planned by
    /// `engine` (a view that no longer plans, over a dropped table, has none).
    pub(crate) async fn with_views(mut self, engine: &crate::SqlEngine) -> Model {
        for r in self.relations.iter_mut().filter(|r| r.kind == RelKind::View) {
            if let Some(schema) = engine.view_schema(&r.name).await {
                r.columns = schema
                    .fields()
                    .iter()
                    .map(|f| {
                        let (type_oid, typmod) = arrow_type(f.data_type());
                        Attr { name: f.name().clone(), type_oid, typmod, not_null: false }
                    })
                    .collect();
            }
        }
        self
    }

    pub(crate) fn relation(&self, oid: i64) -> Option<&Relation> {
        self.relations.iter().find(|r| r.oid == oid)
    }

    pub(crate) fn relation_named(&self, name: &str) -> Option<&Relation> {
        self.relations.iter().find(|r| r.name == name)
    }

    /// The primary-key constraint whose oid is `oid` (the same number as its index).
    pub(crate) fn primary_key(&self, oid: i64) -> Option<&Relation> {
        self.relation(oid).filter(|r| r.index.as_ref().is_some_and(|i| i.primary))
    }
}

/// An index's `pg_class` row; its columns are the indexed columns of the table.
fn index_relation(oid: i64, name: String, table_columns: &[Attr], index: IndexOf) -> Relation {
    let columns = index
        .keys
        .iter()
        .filter_map(|&k| usize::try_from(k).ok()?.checked_sub(1).and_then(|i| table_columns.get(i)).cloned())
        .collect();
    Relation { oid, name, kind: RelKind::Index, columns, index: Some(index), has_index: false, view_query: None }
}

/// The type a catalog column is declared with.
#[derive(Clone, Copy)]
enum Ty {
    /// `oid` (and the other 32-bit ids): BIGINT, as Arrow has no unsigned type the server sends.
    Oid,
    Int2,
    Int4,
    Float4,
    Bool,
    /// `name`, `text` and `"char"`.
    Text,
    /// `int2[]`.
    Int2s,
    /// `int2vector`: an `int2[]` sent as PostgreSQL sends this type (`1 2` in text).
    Int2Vector,
    /// `oid[]`.
    Oids,
    /// `oidvector`, likewise.
    OidVector,
    /// `text[]` and `aclitem[]` (always NULL here).
    Texts,
    Timestamp,
}

impl Ty {
    fn arrow(self) -> DataType {
        let list = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
        match self {
            Ty::Oid => DataType::Int64,
            Ty::Int2 => DataType::Int16,
            Ty::Int4 => DataType::Int32,
            Ty::Float4 => DataType::Float32,
            Ty::Bool => DataType::Boolean,
            Ty::Text => DataType::Utf8,
            Ty::Int2s | Ty::Int2Vector => list(DataType::Int16),
            Ty::Oids | Ty::OidVector => list(DataType::Int64),
            Ty::Texts => list(DataType::Utf8),
            Ty::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
        }
    }
}

/// One value of a catalog row; `Null` fits any column.
#[derive(Clone)]
enum Cell {
    Null,
    Int(i64),
    Float(f32),
    Bool(bool),
    Text(String),
    Ints(Vec<i64>),
}

impl From<i64> for Cell {
    fn from(v: i64) -> Self {
        Cell::Int(v)
    }
}
impl From<bool> for Cell {
    fn from(v: bool) -> Self {
        Cell::Bool(v)
    }
}
impl From<&str> for Cell {
    fn from(v: &str) -> Self {
        Cell::Text(v.to_string())
    }
}
impl From<String> for Cell {
    fn from(v: String) -> Self {
        Cell::Text(v)
    }
}

/// A catalog's columns.
type Columns = &'static [(&'static str, Ty)];

/// A column of `rows`' `i`th values, of type `ty`.
fn column(rows: &[Vec<Cell>], i: usize, ty: Ty) -> DfResult<ArrayRef> {
    let cells = rows.iter().map(|r| r.get(i).cloned().unwrap_or(Cell::Null));
    let scalar = |c: Cell| -> DfResult<ScalarValue> {
        Ok(match (ty, c) {
            (Ty::Oid, Cell::Int(v)) => ScalarValue::Int64(Some(v)),
            (Ty::Int2, Cell::Int(v)) => ScalarValue::Int16(Some(v as i16)),
            (Ty::Int4, Cell::Int(v)) => ScalarValue::Int32(Some(v as i32)),
            (Ty::Float4, Cell::Float(v)) => ScalarValue::Float32(Some(v)),
            (Ty::Bool, Cell::Bool(v)) => ScalarValue::Boolean(Some(v)),
            (Ty::Text, Cell::Text(v)) => ScalarValue::Utf8(Some(v)),
            (Ty::Int2s | Ty::Int2Vector, Cell::Ints(v)) => {
                let values: Vec<ScalarValue> = v.into_iter().map(|x| ScalarValue::Int16(Some(x as i16))).collect();
                ScalarValue::List(ScalarValue::new_list_nullable(&values, &DataType::Int16))
            }
            (Ty::Oids | Ty::OidVector, Cell::Ints(v)) => {
                let values: Vec<ScalarValue> = v.into_iter().map(|x| ScalarValue::Int64(Some(x))).collect();
                ScalarValue::List(ScalarValue::new_list_nullable(&values, &DataType::Int64))
            }
            (_, Cell::Null) => ScalarValue::try_from(ty.arrow())?,
            _ => return exec_err!("a pg_catalog value does not fit its column"),
        })
    };
    if rows.is_empty() {
        return Ok(datafusion::arrow::array::new_empty_array(&ty.arrow()));
    }
    ScalarValue::iter_to_array(cells.map(scalar).collect::<DfResult<Vec<_>>>()?)
}

/// A catalog as a table of `rows`.
fn table(columns: Columns, rows: Vec<Vec<Cell>>) -> DfResult<Arc<dyn TableProvider>> {
    let field = |(name, ty): &(&str, Ty)| {
        let f = Field::new(*name, ty.arrow(), true);
        match ty {
            Ty::Int2Vector => f.with_metadata([(crate::PG_TYPE_METADATA.into(), "int2vector".into())].into()),
            Ty::OidVector => f.with_metadata([(crate::PG_TYPE_METADATA.into(), "oidvector".into())].into()),
            _ => f,
        }
    };
    let schema: SchemaRef = Arc::new(Schema::new(columns.iter().map(field).collect::<Vec<_>>()));
    let arrays = columns.iter().enumerate().map(|(i, (_, t))| column(&rows, i, *t)).collect::<DfResult<Vec<_>>>()?;
    let batch = RecordBatch::try_new(schema.clone(), arrays)?;
    Ok(Arc::new(MemTable::try_new(schema, vec![vec![batch]])?))
}

mod columns;
use columns::*;

/// The schema `pg_catalog`: each catalog built when a statement names it.
pub(crate) struct PgCatalog {
    db: Arc<Db>,
    /// The engine, to plan views for their columns (set once the engine exists).
    pub(crate) engine: OnceLock<Weak<crate::Shared>>,
}

impl std::fmt::Debug for PgCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCatalog").finish_non_exhaustive()
    }
}

impl PgCatalog {
    pub(crate) fn new(db: Arc<Db>) -> Self {
        PgCatalog { db, engine: OnceLock::new() }
    }

    fn engine(&self) -> Option<crate::SqlEngine> {
        self.engine.get().and_then(Weak::upgrade).map(|shared| crate::SqlEngine { shared })
    }

    /// The database's and its owner's names.
    fn names(&self) -> (String, String) {
        match self.engine() {
            Some(e) => e.pg_names(),
            None => (DEFAULT_NAME.to_string(), DEFAULT_NAME.to_string()),
        }
    }

    async fn build(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let Some(columns) = columns_of(name) else { return Ok(None) };
        let rows = match name {
            "pg_namespace" => namespaces(),
            "pg_class" => classes(&Model::load(&self.db)?),
            "pg_attribute" => {
                let mut model = Model::load(&self.db)?;
                if let Some(engine) = self.engine() {
                    model = model.with_views(&engine).await;
                }
                attributes(&model)
            }
            "pg_index" => index_rows(&Model::load(&self.db)?),
            "pg_constraint" => constraints(&Model::load(&self.db)?),
            "pg_type" => types(),
            "pg_am" => vec![
                vec![AM_HEAP.into(), "heap".into(), "heap_tableam_handler".into(), "t".into()],
                vec![AM_BTREE.into(), "btree".into(), "bthandler".into(), "i".into()],
            ],
            "pg_database" => {
                let (db, _) = self.names();
                vec![vec![
                    DATABASE_OID.into(),
                    db.into(),
                    OWNER_OID.into(),
                    Cell::Int(6),
                    "c".into(),
                    false.into(),
                    true.into(),
                    Cell::Int(-1),
                    Cell::Int(0),
                    Cell::Int(1),
                    Cell::Int(1663),
                    "C".into(),
                    "C".into(),
                    Cell::Null,
                    Cell::Null,
                    Cell::Null,
                ]]
            }
            "pg_roles" => {
                let (_, owner) = self.names();
                let role = |name: String, oid: i64, powers: bool| {
                    let p = Cell::Bool(powers);
                    vec![
                        name.into(),
                        p.clone(),
                        true.into(),
                        p.clone(),
                        p.clone(),
                        p.clone(),
                        p.clone(),
                        Cell::Int(-1),
                        "********".into(),
                        Cell::Null,
                        p,
                        Cell::Null,
                        oid.into(),
                    ]
                };
                vec![role(owner, OWNER_OID, true), role("pg_database_owner".into(), DATABASE_OWNER_OID, false)]
            }
            "pg_user" => {
                let (_, owner) = self.names();
                vec![vec![
                    owner.into(),
                    OWNER_OID.into(),
                    true.into(),
                    true.into(),
                    true.into(),
                    true.into(),
                    "********".into(),
                    Cell::Null,
                    Cell::Null,
                ]]
            }
            "pg_tablespace" => vec![
                vec![Cell::Int(1663), "pg_default".into(), OWNER_OID.into(), Cell::Null, Cell::Null],
                vec![Cell::Int(1664), "pg_global".into(), OWNER_OID.into(), Cell::Null, Cell::Null],
            ],
            "pg_tables" | "pg_views" | "pg_indexes" => {
                let model = Model::load(&self.db)?;
                let (_, owner) = self.names();
                views_of_catalog(name, &model, &owner)
            }
            _ => Vec::new(),
        };
        table(columns, rows).map(Some)
    }
}

#[async_trait]
impl SchemaProvider for PgCatalog {
    fn table_names(&self) -> Vec<String> {
        CATALOGS.iter().map(|(n, _)| n.to_string()).collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        self.build(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        columns_of(name).is_some()
    }
}

/// `pg_namespace`'s rows.
fn namespaces() -> Vec<Vec<Cell>> {
    [
        (NS_PG_CATALOG, "pg_catalog", OWNER_OID),
        (NS_PUBLIC, "public", DATABASE_OWNER_OID),
        (NS_INFORMATION_SCHEMA, "information_schema", OWNER_OID),
    ]
    .into_iter()
    .map(|(oid, name, owner)| vec![oid.into(), name.into(), owner.into(), Cell::Null])
    .collect()
}

/// `pg_class`'s rows.
fn classes(model: &Model) -> Vec<Vec<Cell>> {
    model
        .relations
        .iter()
        .map(|r| {
            let am = match r.kind {
                RelKind::Table => AM_HEAP,
                RelKind::Index => AM_BTREE,
                RelKind::View => 0,
            };
            let f = false;
            vec![
                r.oid.into(),
                r.name.clone().into(),
                NS_PUBLIC.into(),
                Cell::Int(0),
                Cell::Int(0),
                OWNER_OID.into(),
                am.into(),
                r.oid.into(),
                Cell::Int(0),
                Cell::Int(0),
                Cell::Float(-1.0),
                Cell::Int(0),
                Cell::Int(0),
                r.has_index.into(),
                f.into(),
                "p".into(),
                r.kind.code().into(),
                Cell::Int(r.columns.len() as i64),
                Cell::Int(0),
                (r.kind == RelKind::View).into(),
                f.into(),
                f.into(),
                f.into(),
                f.into(),
                true.into(),
                if r.kind == RelKind::Index { "n" } else { "d" }.into(),
                f.into(),
                Cell::Int(0),
                Cell::Int(0),
                Cell::Int(0),
                Cell::Null,
                Cell::Null,
                Cell::Null,
            ]
        })
        .collect()
}

/// The length and alignment PostgreSQL stores a type's values with.
fn storage(type_oid: i64) -> (i64, bool, &'static str, &'static str) {
    match type_oid {
        16 => (1, true, "c", "p"),
        21 => (2, true, "s", "p"),
        23 | 700 | 1082 => (4, true, "i", "p"),
        20 | 701 | 1114 | 1184 | 1083 => (8, true, "d", "p"),
        1186 => (16, false, "d", "p"),
        _ => (-1, false, "i", "x"),
    }
}

/// The collation of values of type `type_oid`: text types have the default one (100).
fn collation(type_oid: i64) -> i64 {
    if matches!(type_oid, 19 | 25 | 1042 | 1043) {
        100
    } else {
        0
    }
}

/// `pg_attribute`'s rows: every relation's columns, numbered from 1.
fn attributes(model: &Model) -> Vec<Vec<Cell>> {
    let mut rows = Vec::new();
    for r in &model.relations {
        for (i, a) in r.columns.iter().enumerate() {
            let (len, byval, align, storage) = storage(a.type_oid);
            let f = false;
            rows.push(vec![
                r.oid.into(),
                a.name.clone().into(),
                a.type_oid.into(),
                Cell::Int(-1),
                len.into(),
                Cell::Int(i as i64 + 1),
                Cell::Int(0),
                Cell::Int(-1),
                Cell::Int(i64::from(a.typmod)),
                byval.into(),
                align.into(),
                storage.into(),
                "".into(),
                a.not_null.into(),
                f.into(),
                f.into(),
                "".into(),
                "".into(),
                f.into(),
                true.into(),
                Cell::Int(0),
                Cell::Int(collation(a.type_oid)),
                Cell::Null,
                Cell::Null,
                Cell::Null,
                Cell::Null,
            ]);
        }
    }
    rows
}

/// `pg_index`'s rows.
fn index_rows(model: &Model) -> Vec<Vec<Cell>> {
    let mut rows = Vec::new();
    for r in &model.relations {
        let Some(ix) = &r.index else { continue };
        let n = ix.keys.len() as i64;
        let keys: Vec<i64> = ix.keys.iter().map(|&k| i64::from(k)).collect();
        let t = true;
        let f = false;
        rows.push(vec![
            r.oid.into(),
            ix.table_oid.into(),
            n.into(),
            n.into(),
            ix.unique.into(),
            f.into(),
            ix.primary.into(),
            f.into(),
            t.into(),
            f.into(),
            t.into(),
            f.into(),
            t.into(),
            t.into(),
            f.into(),
            Cell::Ints(keys),
            Cell::Ints(r.columns.iter().map(|a| collation(a.type_oid)).collect()),
            Cell::Ints(vec![0; ix.keys.len()]),
            Cell::Ints(vec![0; ix.keys.len()]),
            Cell::Null,
            Cell::Null,
        ]);
    }
    rows
}

/// `pg_constraint`'s rows: one per primary key (a UNIQUE index is no constraint, as in
/// PostgreSQL, where `CREATE UNIQUE INDEX` makes none).
fn constraints(model: &Model) -> Vec<Vec<Cell>> {
    let mut rows = Vec::new();
    for r in &model.relations {
        let Some(ix) = r.index.as_ref().filter(|i| i.primary) else { continue };
        let f = false;
        rows.push(vec![
            r.oid.into(),
            r.name.clone().into(),
            NS_PUBLIC.into(),
            "p".into(),
            f.into(),
            f.into(),
            true.into(),
            ix.table_oid.into(),
            Cell::Int(0),
            r.oid.into(),
            Cell::Int(0),
            Cell::Int(0),
            " ".into(),
            " ".into(),
            " ".into(),
            true.into(),
            Cell::Int(0),
            true.into(),
            Cell::Ints(ix.keys.iter().map(|&k| i64::from(k)).collect()),
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::Null,
        ]);
    }
    rows
}

/// The types strata's values have on the wire, with their names and array types.
pub(crate) const TYPES: &[(i64, &str, i64)] = &[
    (16, "bool", 1000),
    (17, "bytea", 1001),
    (18, "char", 1002),
    (19, "name", 1003),
    (20, "int8", 1016),
    (21, "int2", 1005),
    (22, "int2vector", 1006),
    (23, "int4", 1007),
    (25, "text", 1009),
    (26, "oid", 1028),
    (700, "float4", 1021),
    (701, "float8", 1022),
    (1042, "bpchar", 1014),
    (1043, "varchar", 1015),
    (1082, "date", 1182),
    (1083, "time", 1183),
    (1114, "timestamp", 1115),
    (1184, "timestamptz", 1185),
    (1186, "interval", 1187),
    (1700, "numeric", 1231),
];

/// `pg_type`'s rows: the base types, then their array types.
fn types() -> Vec<Vec<Cell>> {
    let mut rows = Vec::new();
    for &(oid, name, array) in TYPES {
        let (len, byval, align, storage) = storage(oid);
        let category = match oid {
            16 => "B",
            20 | 21 | 23 | 26 | 700 | 701 | 1700 => "N",
            25 | 19 | 1042 | 1043 | 18 => "S",
            1082 | 1083 | 1114 | 1184 => "D",
            1186 => "T",
            _ => "U",
        };
        rows.push(type_row(oid, name, len, byval, "b", category, 0, array, align, storage, collation(oid)));
        rows.push(type_row(array, &format!("_{name}"), -1, false, "b", "A", oid, 0, align, "x", collation(oid)));
    }
    rows
}

#[allow(clippy::too_many_arguments)]
fn type_row(
    oid: i64,
    name: &str,
    len: i64,
    byval: bool,
    typtype: &str,
    category: &str,
    elem: i64,
    array: i64,
    align: &str,
    storage: &str,
    collation: i64,
) -> Vec<Cell> {
    let f = false;
    vec![
        oid.into(),
        name.into(),
        NS_PG_CATALOG.into(),
        OWNER_OID.into(),
        len.into(),
        byval.into(),
        typtype.into(),
        category.into(),
        f.into(),
        true.into(),
        ",".into(),
        Cell::Int(0),
        Cell::Int(0),
        elem.into(),
        array.into(),
        format!("{name}in").into(),
        format!("{name}out").into(),
        format!("{name}recv").into(),
        format!("{name}send").into(),
        "-".into(),
        "-".into(),
        "-".into(),
        align.into(),
        storage.into(),
        f.into(),
        Cell::Int(0),
        Cell::Int(-1),
        Cell::Int(0),
        collation.into(),
        Cell::Null,
        Cell::Null,
        Cell::Null,
    ]
}

/// The rows of the catalog views `pg_tables`, `pg_views` and `pg_indexes`.
fn views_of_catalog(name: &str, model: &Model, owner: &str) -> Vec<Vec<Cell>> {
    let rels = model.relations.iter();
    match name {
        "pg_tables" => rels
            .filter(|r| r.kind == RelKind::Table)
            .map(|r| {
                let f = false;
                vec![
                    "public".into(),
                    r.name.clone().into(),
                    owner.into(),
                    Cell::Null,
                    r.has_index.into(),
                    f.into(),
                    f.into(),
                    f.into(),
                ]
            })
            .collect(),
        "pg_views" => rels
            .filter(|r| r.kind == RelKind::View)
            .map(|r| {
                vec![
                    "public".into(),
                    r.name.clone().into(),
                    owner.into(),
                    r.view_query.clone().map_or(Cell::Null, Cell::Text),
                ]
            })
            .collect(),
        _ => rels
            .filter_map(|r| Some((r, r.index.as_ref()?)))
            .map(|(r, ix)| {
                vec![
                    "public".into(),
                    ix.table_name.clone().into(),
                    r.name.clone().into(),
                    Cell::Null,
                    functions::index_definition(r, ix).into(),
                ]
            })
            .collect(),
    }
}
