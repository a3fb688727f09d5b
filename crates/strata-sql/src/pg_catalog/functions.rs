//! PostgreSQL's catalog functions, as DataFusion scalar functions over [`super::Model`]:
//! `format_type`, `pg_get_indexdef`, `pg_get_constraintdef`, `pg_get_viewdef`,
//! `pg_get_userbyid`, `pg_table_is_visible`, `current_schema`, `version`, and the functions
//! of things strata does not have (`pg_get_expr` of a default, `obj_description` of a
//! comment), which answer NULL or false as PostgreSQL does for an object without them.
//! [`super::rewrite`] turns `::regclass`, `::regtype` and `::regnamespace` casts into calls of
//! the `pg_strata_*` functions here.
//!
//! Each function is evaluated row by row: catalog queries return tens of rows, not millions.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::{exec_err, Result as DfResult, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature, Volatility,
};

use super::{IndexOf, Model, PgCatalog, Relation, NS_PUBLIC, TYPES};

/// What a function reads: the catalog, and the model of the database and its statistics, each
/// loaded on first use by one evaluation (not once per row).
struct Call<'a> {
    catalog: &'a PgCatalog,
    model: Option<Model>,
    stats: Option<strata::Stats>,
}

impl Call<'_> {
    fn model(&mut self) -> DfResult<&Model> {
        if self.model.is_none() {
            self.model = Some(Model::load(&self.catalog.db)?);
        }
        self.model.as_ref().map_or_else(|| exec_err!("pg_catalog model not loaded"), Ok)
    }

    /// The model and the database's statistics (for the size functions).
    fn model_and_stats(&mut self) -> DfResult<(&Model, &strata::Stats)> {
        self.model()?;
        if self.stats.is_none() {
            self.stats = Some(self.catalog.db.stats());
        }
        match (&self.model, &self.stats) {
            (Some(m), Some(s)) => Ok((m, s)),
            _ => exec_err!("pg_catalog statistics not loaded"),
        }
    }
}

type RowFn = fn(&mut Call<'_>, &[ScalarValue]) -> DfResult<ScalarValue>;

/// One catalog function: `f` maps one row's arguments to its result.
struct PgFunction {
    name: &'static str,
    signature: Signature,
    returns: DataType,
    f: RowFn,
    catalog: Arc<PgCatalog>,
}

impl std::fmt::Debug for PgFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgFunction").field("name", &self.name).finish()
    }
}

impl PartialEq for PgFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for PgFunction {}
impl Hash for PgFunction {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl ScalarUDFImpl for PgFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(self.returns.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let mut call = Call { catalog: &self.catalog, model: None, stats: None };
        let scalars = args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let row = |i: usize| -> DfResult<Vec<ScalarValue>> {
            args.args
                .iter()
                .map(|a| match a {
                    ColumnarValue::Scalar(s) => Ok(s.clone()),
                    ColumnarValue::Array(arr) => ScalarValue::try_from_array(arr, i),
                })
                .collect()
        };
        if scalars {
            let out = (self.f)(&mut call, &row(0)?)?;
            return Ok(ColumnarValue::Scalar(out.cast_to(&self.returns)?));
        }
        let mut out = Vec::with_capacity(args.number_rows);
        for i in 0..args.number_rows {
            out.push((self.f)(&mut call, &row(i)?)?.cast_to(&self.returns)?);
        }
        Ok(ColumnarValue::Array(ScalarValue::iter_to_array(out)?))
    }
}

/// An integer argument (oids arrive as integers, or as text such as `'16384'`).
fn int(v: Option<&ScalarValue>) -> Option<i64> {
    match v? {
        ScalarValue::Int8(Some(x)) => Some(i64::from(*x)),
        ScalarValue::Int16(Some(x)) => Some(i64::from(*x)),
        ScalarValue::Int32(Some(x)) => Some(i64::from(*x)),
        ScalarValue::Int64(Some(x)) => Some(*x),
        ScalarValue::UInt32(Some(x)) => Some(i64::from(*x)),
        ScalarValue::UInt64(Some(x)) => i64::try_from(*x).ok(),
        ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)) | ScalarValue::LargeUtf8(Some(s)) => {
            s.trim().parse().ok()
        }
        _ => None,
    }
}

fn text_arg(v: Option<&ScalarValue>) -> Option<String> {
    match v? {
        ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)) | ScalarValue::LargeUtf8(Some(s)) => {
            Some(s.clone())
        }
        _ => None,
    }
}

fn text(s: impl Into<String>) -> ScalarValue {
    ScalarValue::Utf8(Some(s.into()))
}

const NULL_TEXT: ScalarValue = ScalarValue::Utf8(None);

/// `name` quoted as PostgreSQL's `quote_ident` quotes it: left alone if it is a lower-case
/// identifier, else in double quotes with quotes doubled.
pub(crate) fn quote_ident(name: &str) -> String {
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    let reserved = datafusion::sql::sqlparser::keywords::RESERVED_FOR_COLUMN_ALIAS
        .iter()
        .any(|k| format!("{k:?}").eq_ignore_ascii_case(name));
    if plain && !reserved {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// PostgreSQL's name of type `oid` with modifier `typmod` (`format_type`).
pub(crate) fn format_type(oid: i64, typmod: Option<i64>) -> String {
    let len = typmod.filter(|&m| m >= 4).map(|m| m - 4);
    match oid {
        16 => "boolean".into(),
        18 => "\"char\"".into(),
        20 => "bigint".into(),
        21 => "smallint".into(),
        23 => "integer".into(),
        700 => "real".into(),
        701 => "double precision".into(),
        1042 => len.map_or("character".into(), |n| format!("character({n})")),
        1043 => len.map_or("character varying".into(), |n| format!("character varying({n})")),
        1083 => "time without time zone".into(),
        1114 => "timestamp without time zone".into(),
        1184 => "timestamp with time zone".into(),
        1700 => match typmod.filter(|&m| m >= 4).map(|m| m - 4) {
            Some(m) => format!("numeric({},{})", m >> 16, m & 0xffff),
            None => "numeric".into(),
        },
        _ => {
            if let Some(&(_, name, _)) = TYPES.iter().find(|t| t.0 == oid) {
                return name.into();
            }
            match TYPES.iter().find(|t| t.2 == oid) {
                Some(&(elem, _, _)) => format!("{}[]", format_type(elem, None)),
                None => "???".into(),
            }
        }
    }
}

/// The `CREATE INDEX` statement that makes index `r` (`pg_get_indexdef`).
pub(crate) fn index_definition(r: &Relation, ix: &IndexOf) -> String {
    let columns: Vec<String> = ix.key_names.iter().map(|c| quote_ident(c)).collect();
    format!(
        "CREATE {}INDEX {} ON public.{} USING btree ({})",
        if ix.unique { "UNIQUE " } else { "" },
        quote_ident(&r.name),
        quote_ident(&ix.table_name),
        columns.join(", ")
    )
}

fn pg_get_indexdef(call: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let Some(oid) = int(args.first()) else { return Ok(NULL_TEXT) };
    let column = int(args.get(1)).unwrap_or(0);
    let model = call.model()?;
    let Some((r, ix)) = model.relation(oid).and_then(|r| Some((r, r.index.as_ref()?))) else {
        return Ok(NULL_TEXT);
    };
    if column > 0 {
        return Ok(ix.key_names.get(column as usize - 1).map_or(NULL_TEXT, |c| text(quote_ident(c))));
    }
    Ok(text(index_definition(r, ix)))
}

fn pg_get_constraintdef(call: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let Some(oid) = int(args.first()) else { return Ok(NULL_TEXT) };
    let model = call.model()?;
    Ok(match model.primary_key(oid).and_then(|r| r.index.as_ref()) {
        Some(ix) => {
            let columns: Vec<String> = ix.key_names.iter().map(|c| quote_ident(c)).collect();
            text(format!("PRIMARY KEY ({})", columns.join(", ")))
        }
        None => NULL_TEXT,
    })
}

fn pg_get_viewdef(call: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let model = call.model()?;
    let found = match args.first() {
        Some(ScalarValue::Utf8(Some(name))) if int(args.first()).is_none() => model.relation_named(name),
        other => int(other).and_then(|oid| model.relation(oid)),
    };
    Ok(found.and_then(|r| r.view_query.clone()).map_or(NULL_TEXT, |q| text(format!(" {q};"))))
}

fn pg_get_userbyid(call: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(match int(args.first()) {
        Some(super::OWNER_OID) => text(call.catalog.names().1),
        Some(super::DATABASE_OWNER_OID) => text("pg_database_owner"),
        Some(oid) => text(format!("unknown (OID={oid})")),
        None => NULL_TEXT,
    })
}

fn format_type_fn(_: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(match int(args.first()) {
        Some(oid) => text(format_type(oid, int(args.get(1)))),
        None => NULL_TEXT,
    })
}

/// `x::regclass` of an oid: the relation's name, or the number if there is none.
fn relname(call: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let Some(oid) = int(args.first()) else { return Ok(NULL_TEXT) };
    Ok(text(call.model()?.relation(oid).map_or(oid.to_string(), |r| quote_ident(&r.name))))
}

/// A name as a `regclass` literal reads it (`'orders'`, `'public.orders'`, `'"Mixed"'`).
fn unqualified(name: &str) -> String {
    let last = name.rsplit_once('.').map_or(
        name,
        |(schema, rel)| {
            if schema.trim_matches('"') == "public" {
                rel
            } else {
                name
            }
        },
    );
    match last.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => last.to_lowercase(),
    }
}

/// The oid of a catalog (`'pg_catalog.pg_class'::regclass`), as PostgreSQL numbers the ones
/// clients name (in `pg_description.classoid` conditions), with or without the schema; other
/// catalogs get 1.
fn catalog_oid(name: &str) -> Option<i64> {
    let qualified = name.strip_prefix("pg_catalog.");
    let bare = qualified.unwrap_or(name);
    Some(match bare {
        "pg_class" => 1259,
        "pg_attribute" => 1249,
        "pg_type" => 1247,
        "pg_namespace" => 2615,
        "pg_constraint" => 2606,
        "pg_index" => 2610,
        "pg_description" => 2609,
        "pg_proc" => 1255,
        "pg_database" => 1262,
        _ if qualified.is_some() || super::columns::columns_of(bare).is_some() => 1,
        _ => return None,
    })
}

/// `'name'::regclass`: the oid of the relation so named; an unknown name fails (42P01).
fn relation_oid(call: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    if let Some(oid) = int(args.first()) {
        return Ok(ScalarValue::Int64(Some(oid)));
    }
    let Some(name) = text_arg(args.first()) else { return Ok(ScalarValue::Int64(None)) };
    if let Some(oid) = catalog_oid(&name) {
        return Ok(ScalarValue::Int64(Some(oid)));
    }
    match call.model()?.relation_named(&unqualified(&name)) {
        Some(r) => Ok(ScalarValue::Int64(Some(r.oid))),
        None => Err(datafusion::error::DataFusionError::External(Box::new(crate::SqlError::new(
            crate::ErrorKind::UndefinedTable,
            format!("relation \"{name}\" does not exist"),
        )))),
    }
}

/// `'int4'::regtype`: the oid of the type so named (PostgreSQL's names or SQL's).
fn type_oid(_: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    if let Some(oid) = int(args.first()) {
        return Ok(ScalarValue::Int64(Some(oid)));
    }
    let Some(name) = text_arg(args.first()) else { return Ok(ScalarValue::Int64(None)) };
    let name = name.trim().trim_start_matches("pg_catalog.").to_lowercase();
    let found = TYPES.iter().find(|t| t.1 == name || format_type(t.0, None) == name).map(|t| t.0);
    match found {
        Some(oid) => Ok(ScalarValue::Int64(Some(oid))),
        None => exec_err!("type \"{name}\" does not exist"),
    }
}

/// `to_regtype('name')`: the type's oid, NULL for a name that is no type.
fn to_regtype(call: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(type_oid(call, args).unwrap_or(ScalarValue::Int64(None)))
}

/// `to_regclass('name')`: the relation's oid, NULL for a name that is no relation.
fn to_regclass(call: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(relation_oid(call, args).unwrap_or(ScalarValue::Int64(None)))
}

fn nspname(_: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(match int(args.first()) {
        Some(11) => text("pg_catalog"),
        Some(NS_PUBLIC) => text("public"),
        Some(13_000) => text("information_schema"),
        Some(oid) => text(oid.to_string()),
        None => NULL_TEXT,
    })
}

fn quote_ident_fn(_: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(text_arg(args.first()).map_or(NULL_TEXT, |s| text(quote_ident(&s))))
}

fn yes(_: &mut Call<'_>, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(ScalarValue::Boolean(Some(true)))
}

fn no(_: &mut Call<'_>, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(ScalarValue::Boolean(Some(false)))
}

fn none(_: &mut Call<'_>, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(NULL_TEXT)
}

fn utf8(_: &mut Call<'_>, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(text("UTF8"))
}

fn public(_: &mut Call<'_>, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(text("public"))
}

fn search_path(_: &mut Call<'_>, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    let items = [text("pg_catalog"), text("public")];
    Ok(ScalarValue::List(ScalarValue::new_list_nullable(&items, &DataType::Utf8)))
}

/// The element type of `pg_strata_expandarray`'s result: an element and its 1-based position.
fn expanded_element() -> DataType {
    DataType::Struct(vec![Field::new("x", DataType::Int64, true), Field::new("n", DataType::Int64, true)].into())
}

/// `information_schema._pg_expandarray(a)` before its `unnest`: the list of (element,
/// position) pairs of `a` (pgjdbc reads primary keys through it).
fn expandarray(_: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array, StructArray};
    let element = expanded_element();
    let DataType::Struct(fields) = &element else { return exec_err!("expandarray's element is a struct") };
    let values: Vec<Option<i64>> = match args.first() {
        Some(ScalarValue::List(list)) if !list.is_null(0) => {
            let items = datafusion::arrow::compute::cast(&list.value(0), &DataType::Int64)?;
            let items = items.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            (0..items.len()).map(|i| (!items.is_null(i)).then(|| items.value(i))).collect()
        }
        _ => return ScalarValue::try_from(DataType::List(Arc::new(Field::new("item", element, true)))),
    };
    let items: Vec<ScalarValue> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let x: ArrayRef = Arc::new(Int64Array::from(vec![*v]));
            let n: ArrayRef = Arc::new(Int64Array::from(vec![i as i64 + 1]));
            ScalarValue::Struct(Arc::new(StructArray::new(fields.clone(), vec![x, n], None)))
        })
        .collect();
    Ok(ScalarValue::List(ScalarValue::new_list_nullable(&items, &element)))
}

fn user(call: &mut Call<'_>, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(text(call.catalog.names().1))
}

fn database(call: &mut Call<'_>, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(text(call.catalog.names().0))
}

/// `current_setting('name')`: what `SHOW name` answers; an unknown setting fails.
fn current_setting(_: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let Some(name) = text_arg(args.first()) else { return Ok(NULL_TEXT) };
    let words: Vec<_> = name.split_whitespace().map(datafusion::sql::sqlparser::ast::Ident::new).collect();
    match crate::session::show(&words) {
        Some((_, value)) => Ok(text(value)),
        None => exec_err!("unrecognized configuration parameter \"{name}\""),
    }
}

/// The bytes of strata table `name`'s files (0 for a table not found).
fn table_bytes(stats: &strata::Stats, name: &str) -> i64 {
    let t = stats.tables.iter().find(|t| t.name == name);
    t.map_or(0, |t| t.levels.iter().map(|l| l.bytes).sum::<u64>()) as i64
}

/// The bytes a relation's files take: a table's own files (`pg_table_size`,
/// `pg_relation_size`), with its secondary indexes' (`pg_total_relation_size`), or its
/// indexes' alone (`pg_indexes_size`). A primary key's index is part of its table's files (0).
fn relation_bytes(
    call: &mut Call<'_>,
    oid: Option<i64>,
    with_table: bool,
    with_indexes: bool,
) -> DfResult<ScalarValue> {
    let Some(oid) = oid else { return Ok(ScalarValue::Int64(None)) };
    let (model, stats) = call.model_and_stats()?;
    let Some(r) = model.relation(oid) else { return Ok(ScalarValue::Int64(None)) };
    let own = |r: &super::Relation| match (&r.kind, &r.index) {
        (super::RelKind::Table, _) => table_bytes(stats, &r.name),
        (super::RelKind::Index, Some(ix)) if !ix.primary => {
            table_bytes(stats, &format!("{}{}", crate::indexes::DATA_PREFIX, r.name))
        }
        _ => 0,
    };
    let mut bytes = if with_table { own(r) } else { 0 };
    if with_indexes && r.kind == super::RelKind::Table {
        bytes += model
            .relations
            .iter()
            .filter(|i| i.index.as_ref().is_some_and(|ix| ix.table_oid == r.oid))
            .map(own)
            .sum::<i64>();
    }
    Ok(ScalarValue::Int64(Some(bytes)))
}

fn pg_relation_size(call: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    relation_bytes(call, int(args.first()), true, false)
}

fn pg_total_relation_size(call: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    relation_bytes(call, int(args.first()), true, true)
}

fn pg_indexes_size(call: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    relation_bytes(call, int(args.first()), false, true)
}

/// A byte count as PostgreSQL's `pg_size_pretty` writes it: bytes below 10 kB, then kB, MB, GB
/// and TB, each rounded half away from zero, past 10,240 of the unit before.
pub(crate) fn size_pretty(bytes: i64) -> String {
    const LIMIT: i64 = 10 * 1024;
    const LIMIT2: i64 = LIMIT * 2 - 1;
    let half_rounded = |x: i64| (x + if x < 0 { -1 } else { 1 }) / 2;
    if bytes.abs() < LIMIT {
        return format!("{bytes} bytes");
    }
    // One extra bit is kept for rounding.
    let mut size = bytes >> 9;
    for unit in ["kB", "MB", "GB"] {
        if size.abs() < LIMIT2 {
            return format!("{} {unit}", half_rounded(size));
        }
        size >>= 10;
    }
    format!("{} TB", half_rounded(size))
}

fn pg_size_pretty(_: &mut Call<'_>, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(int(args.first()).map_or(NULL_TEXT, |b| text(size_pretty(b))))
}

fn version(_: &mut Call<'_>, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(text(format!(
        "PostgreSQL {} (strata {}, DataFusion 55), compiled by rustc, 64-bit",
        crate::PG_SERVER_VERSION,
        env!("CARGO_PKG_VERSION")
    )))
}

/// The catalog functions, reading `catalog`.
pub(crate) fn all(catalog: &Arc<PgCatalog>) -> Vec<ScalarUDF> {
    let list = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
    let specs: Vec<(&'static str, &[usize], DataType, RowFn)> = vec![
        ("format_type", &[2], DataType::Utf8, format_type_fn),
        ("pg_get_indexdef", &[1, 3], DataType::Utf8, pg_get_indexdef),
        ("pg_get_constraintdef", &[1, 2], DataType::Utf8, pg_get_constraintdef),
        ("pg_get_viewdef", &[1, 2], DataType::Utf8, pg_get_viewdef),
        ("pg_get_userbyid", &[1], DataType::Utf8, pg_get_userbyid),
        ("pg_get_expr", &[2, 3], DataType::Utf8, none),
        ("pg_get_partkeydef", &[1], DataType::Utf8, none),
        ("pg_get_statisticsobjdef_columns", &[1], DataType::Utf8, none),
        ("pg_get_serial_sequence", &[2], DataType::Utf8, none),
        ("obj_description", &[1, 2], DataType::Utf8, none),
        ("col_description", &[2], DataType::Utf8, none),
        ("shobj_description", &[2], DataType::Utf8, none),
        ("pg_table_is_visible", &[1], DataType::Boolean, yes),
        ("pg_type_is_visible", &[1], DataType::Boolean, yes),
        ("pg_collation_is_visible", &[1], DataType::Boolean, yes),
        ("pg_relation_is_publishable", &[1], DataType::Boolean, no),
        ("has_table_privilege", &[2, 3], DataType::Boolean, yes),
        ("has_schema_privilege", &[2, 3], DataType::Boolean, yes),
        ("has_database_privilege", &[2, 3], DataType::Boolean, yes),
        ("pg_encoding_to_char", &[1], DataType::Utf8, utf8),
        ("quote_ident", &[1], DataType::Utf8, quote_ident_fn),
        ("current_schema", &[0], DataType::Utf8, public),
        ("current_schemas", &[1], list(DataType::Utf8), search_path),
        ("current_database", &[0], DataType::Utf8, database),
        ("pg_strata_user", &[0], DataType::Utf8, user),
        ("pg_strata_expandarray", &[1], list(expanded_element()), expandarray),
        ("version", &[0], DataType::Utf8, version),
        ("current_setting", &[1, 2], DataType::Utf8, current_setting),
        ("pg_table_size", &[1], DataType::Int64, pg_relation_size),
        ("pg_relation_size", &[1, 2], DataType::Int64, pg_relation_size),
        ("pg_total_relation_size", &[1], DataType::Int64, pg_total_relation_size),
        ("pg_indexes_size", &[1], DataType::Int64, pg_indexes_size),
        ("pg_size_pretty", &[1], DataType::Utf8, pg_size_pretty),
        ("pg_strata_relname", &[1], DataType::Utf8, relname),
        ("pg_strata_relation_oid", &[1], DataType::Int64, relation_oid),
        ("pg_strata_type_oid", &[1], DataType::Int64, type_oid),
        ("pg_strata_nspname", &[1], DataType::Utf8, nspname),
        ("to_regtype", &[1], DataType::Int64, to_regtype),
        ("to_regclass", &[1], DataType::Int64, to_regclass),
    ];
    specs
        .into_iter()
        .map(|(name, arities, returns, f)| {
            let forms = arities.iter().map(|&n| if n == 0 { TypeSignature::Nullary } else { TypeSignature::Any(n) });
            let signature = Signature::one_of(forms.collect(), Volatility::Stable);
            ScalarUDF::new_from_impl(PgFunction { name, signature, returns, f, catalog: catalog.clone() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_named_as_postgresql_names_them() {
        assert_eq!(format_type(20, Some(-1)), "bigint");
        assert_eq!(format_type(1043, Some(24)), "character varying(20)");
        assert_eq!(format_type(1042, Some(7)), "character(3)");
        assert_eq!(format_type(1114, None), "timestamp without time zone");
        assert_eq!(format_type(1700, Some((10 << 16 | 2) + 4)), "numeric(10,2)");
        assert_eq!(format_type(1007, None), "integer[]");
        assert_eq!(format_type(99_999, None), "???");
    }

    #[test]
    fn sizes_are_written_as_pg_size_pretty_writes_them() {
        assert_eq!(size_pretty(0), "0 bytes");
        assert_eq!(size_pretty(10_239), "10239 bytes");
        assert_eq!(size_pretty(10_240), "10 kB");
        assert_eq!(size_pretty(16_384), "16 kB");
        assert_eq!(size_pretty(1_000_000), "977 kB");
        assert_eq!(size_pretty(20_971_520), "20 MB");
        assert_eq!(size_pretty(10_737_418_240), "10 GB");
        assert_eq!(size_pretty(-20_000), "-20 kB");
    }

    #[test]
    fn identifiers_are_quoted_only_when_they_must_be() {
        assert_eq!(quote_ident("orders"), "orders");
        assert_eq!(quote_ident("Mixed"), "\"Mixed\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_ident("select"), "\"select\"");
        assert_eq!(unqualified("public.\"Mixed\""), "Mixed");
        assert_eq!(unqualified("Orders"), "orders");
    }
}
