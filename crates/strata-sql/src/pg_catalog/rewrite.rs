//! What PostgreSQL clients send to the catalogs, rewritten into what DataFusion plans, before
//! planning:
//!
//! - catalogs named without a schema (`FROM pg_class`) are `pg_catalog`'s, as PostgreSQL
//!   searches `pg_catalog` first; functions named with it (`pg_catalog.format_type`) lose it;
//! - `a OPERATOR(pg_catalog.~) b` is `a ~ b`, and `COLLATE` is dropped (strata compares text
//!   byte by byte, which is collation "C");
//! - casts to PostgreSQL's own types: `oid` is BIGINT, `name` and `"char"` are TEXT, `int2`,
//!   `int4` and the like are their SQL types; `x::regclass` is the relation's name for an oid and
//!   its oid for a quoted name (`pg_strata_relname`, `pg_strata_relation_oid`), and
//!   `::regtype`/`::regnamespace`/`::regrole` likewise;
//! - `current_catalog`, `current_schema`, `current_user`, `session_user` and `current_role`
//!   without parentheses are the functions they name (the user is the server's one user);
//!   `generate_subscripts(a, 1)`, `information_schema._pg_expandarray(a)` (pgjdbc) and
//!   `(composite).field` are spelled as DataFusion has them;
//! - a query block that joins (not outer-joins) a catalog strata keeps always empty
//!   ([`ALWAYS_EMPTY`]) and aggregates nothing has no rows, whatever else it says: it becomes
//!   `SELECT NULL AS name, ... WHERE false` with the same column names, and a scalar subquery
//!   over such a block is NULL, `EXISTS` of it false. psql's `\d` asks about policies,
//!   publications and inheritance with array constructions DataFusion cannot plan; for strata
//!   their answer is known without planning them. `unnest` of a catalog column strata always
//!   leaves NULL (`reloptions`, ...) is such a block too, and `ARRAY(subquery)` of one is an
//!   empty array.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    AccessExpr, ArrayElemTypeDef, BinaryOperator, CastKind, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, GroupByExpr, Ident, JoinOperator, ObjectName, ObjectNamePart, Query,
    Select, SelectItem, SetExpr, SetOperator, Statement, TableFactor, Value, Visit, VisitMut, Visitor, VisitorMut,
};

use super::columns::ALWAYS_EMPTY;
use super::SCHEMA;

/// Rewrites `stmt` as the module comment says, if it names any catalog or PostgreSQL-only
/// construct (statements that do not are left untouched).
pub(crate) fn rewrite(stmt: &mut Statement) {
    let _ = stmt.visit(&mut Catalogs);
}

struct Catalogs;

fn ident_is(part: &ObjectNamePart, name: &str) -> bool {
    matches!(part, ObjectNamePart::Identifier(i) if i.value.eq_ignore_ascii_case(name))
}

fn last_name(name: &ObjectName) -> Option<String> {
    match name.0.last()? {
        ObjectNamePart::Identifier(i) => {
            Some(if i.quote_style.is_some() { i.value.clone() } else { i.value.to_lowercase() })
        }
        ObjectNamePart::Function(_) => None,
    }
}

/// The catalog a table factor names, if it names one of `pg_catalog`'s.
fn catalog_of(factor: &TableFactor) -> Option<String> {
    let TableFactor::Table { name, args: None, .. } = factor else { return None };
    catalog_named(name)
}

/// The catalog `name` names (`pg_class` or `pg_catalog.pg_class`), if any.
fn catalog_named(name: &ObjectName) -> Option<String> {
    let last = last_name(name)?;
    let in_catalog = match name.0.as_slice() {
        [_] => true,
        [schema, _] => ident_is(schema, SCHEMA),
        _ => false,
    };
    (in_catalog && super::columns::columns_of(&last).is_some()).then_some(last)
}

impl VisitorMut for Catalogs {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table { name, args: None, .. } = factor {
            if name.0.len() == 1 && catalog_named(name).is_some() {
                name.0.insert(0, ObjectNamePart::Identifier(Ident::new(SCHEMA)));
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        empty_blocks(&mut query.body);
        if is_known_empty(&query.body) {
            query.order_by = None;
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        match expr {
            Expr::Function(f) if f.name.0.len() == 2 && ident_is(&f.name.0[0], SCHEMA) => {
                f.name.0.remove(0);
            }
            Expr::BinaryOp { op: BinaryOperator::PGCustomBinaryOperator(parts), .. } => {
                let op = match parts.as_slice() {
                    [schema, op] if schema.eq_ignore_ascii_case(SCHEMA) => Some(op.as_str()),
                    [op] => Some(op.as_str()),
                    _ => None,
                };
                if let Some(op) = op.and_then(operator) {
                    if let Expr::BinaryOp { op: o, .. } = expr {
                        *o = op;
                    }
                }
            }
            // SQL's niladic functions, which PostgreSQL takes without parentheses.
            Expr::Identifier(i) if i.quote_style.is_none() => {
                if let Some(f) = niladic(&i.value) {
                    *expr = call(f, Vec::new());
                }
            }
            Expr::Function(f) if matches!(f.args, FunctionArguments::None) && f.name.0.len() == 1 => {
                if let Some(name) = last_name(&f.name).as_deref().and_then(niladic) {
                    *expr = call(name, Vec::new());
                }
            }
            // `(composite).field`, which DataFusion takes as `get_field(composite, 'field')`.
            Expr::CompoundFieldAccess { root, access_chain } if matches!(root.as_ref(), Expr::Nested(_)) => {
                if let [AccessExpr::Dot(Expr::Identifier(field))] = access_chain.as_slice() {
                    let name = Expr::Value(Value::SingleQuotedString(field.value.to_lowercase()).into());
                    *expr = call("get_field", vec![std::mem::replace(root.as_mut(), null()), name]);
                }
            }
            Expr::Collate { expr: inner, .. } => {
                *expr = std::mem::replace(inner.as_mut(), null());
            }
            Expr::Cast { expr: inner, data_type, kind, .. } => {
                if let Some(replacement) = cast(inner, data_type, kind) {
                    *expr = replacement;
                }
            }
            Expr::Subquery(q) if is_known_empty(&q.body) => *expr = null(),
            Expr::Subquery(q) => one_row_of_catalogs(q),
            Expr::Function(f) if last_name(&f.name).as_deref() == Some("array") => {
                if matches!(&f.args, FunctionArguments::Subquery(q) if is_known_empty(&q.body)) {
                    *expr = empty_text_array();
                }
            }
            Expr::Function(f) if last_name(&f.name).as_deref() == Some("_pg_expandarray") => {
                if let FunctionArguments::List(list) = &f.args {
                    if let [FunctionArg::Unnamed(FunctionArgExpr::Expr(array))] = list.args.as_slice() {
                        *expr = call("unnest", vec![call("pg_strata_expandarray", vec![array.clone()])]);
                    }
                }
            }
            Expr::Function(f) if last_name(&f.name).as_deref() == Some("generate_subscripts") => {
                if let Some(replacement) = subscripts(f) {
                    *expr = replacement;
                }
            }
            Expr::Exists { subquery, negated } if is_known_empty(&subquery.body) => {
                *expr = Expr::Value(Value::Boolean(*negated).into());
            }
            Expr::InSubquery { subquery, negated, .. } if is_known_empty(&subquery.body) => {
                *expr = Expr::Value(Value::Boolean(*negated).into());
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// The function a niladic SQL function (`current_catalog`, `current_user`, ...) is.
fn niladic(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_lowercase().as_str() {
        "current_catalog" => "current_database",
        "current_schema" => "current_schema",
        "current_user" | "session_user" | "current_role" | "user" => "pg_strata_user",
        _ => return None,
    })
}

fn operator(op: &str) -> Option<BinaryOperator> {
    Some(match op {
        "~" => BinaryOperator::PGRegexMatch,
        "~*" => BinaryOperator::PGRegexIMatch,
        "!~" => BinaryOperator::PGRegexNotMatch,
        "!~*" => BinaryOperator::PGRegexNotIMatch,
        "=" => BinaryOperator::Eq,
        "<>" | "!=" => BinaryOperator::NotEq,
        "<" => BinaryOperator::Lt,
        "<=" => BinaryOperator::LtEq,
        ">" => BinaryOperator::Gt,
        ">=" => BinaryOperator::GtEq,
        "~~" => return None,
        _ => return None,
    })
}

fn null() -> Expr {
    Expr::Value(Value::Null.into())
}

fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args.into_iter().map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e))).collect(),
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    })
}

/// Whether `e` is a name to look up (a string literal, or a parameter, which clients send as
/// text) rather than an oid.
fn is_string(e: &Expr) -> bool {
    matches!(e, Expr::Value(v) if matches!(v.value,
        Value::SingleQuotedString(_) | Value::EscapedStringLiteral(_) | Value::Placeholder(_)))
}

/// The SQL type PostgreSQL's own type `name` is read as, if it has one.
fn plain_type(name: &str) -> Option<DataType> {
    Some(match name {
        "oid" | "xid" | "cid" | "tid" | "regconfig" | "regproc" | "regprocedure" | "regoper" => DataType::BigInt(None),
        "text" | "name" | "char" | "bpchar" | "varchar" | "unknown" => DataType::Text,
        "int2" => DataType::SmallInt(None),
        "int4" => DataType::Int(None),
        "int8" => DataType::BigInt(None),
        "float4" => DataType::Real,
        "float8" => DataType::DoublePrecision,
        "bool" => DataType::Boolean,
        _ => return None,
    })
}

/// `data_type` with PostgreSQL's own type names replaced (in arrays too), if it has any.
fn translated(data_type: &DataType) -> Option<DataType> {
    match data_type {
        DataType::Custom(name, modifiers) if modifiers.is_empty() => plain_type(&last_name(name)?),
        DataType::Array(ArrayElemTypeDef::SquareBracket(inner, size)) => {
            Some(DataType::Array(ArrayElemTypeDef::SquareBracket(Box::new(translated(inner)?), *size)))
        }
        _ => None,
    }
}

/// The expression a cast to a PostgreSQL-only type becomes.
fn cast(inner: &mut Box<Expr>, data_type: &DataType, kind: &CastKind) -> Option<Expr> {
    let name = match data_type {
        DataType::Regclass => "regclass".to_string(),
        DataType::Custom(name, modifiers) if modifiers.is_empty() => last_name(name)?,
        DataType::Array(_) => {
            let t = translated(data_type)?;
            return Some(Expr::Cast {
                kind: kind.clone(),
                expr: Box::new(std::mem::replace(inner.as_mut(), null())),
                data_type: t,
                array: false,
                format: None,
            });
        }
        _ => return None,
    };
    let take = |inner: &mut Box<Expr>| std::mem::replace(inner.as_mut(), null());
    let literal = is_string(inner);
    Some(match name.as_str() {
        "regclass" if literal => call("pg_strata_relation_oid", vec![take(inner)]),
        "regclass" => call("pg_strata_relname", vec![take(inner)]),
        "regtype" if literal => call("pg_strata_type_oid", vec![take(inner)]),
        "regtype" => call("format_type", vec![take(inner), null()]),
        "regnamespace" => call("pg_strata_nspname", vec![take(inner)]),
        "regrole" => call("pg_get_userbyid", vec![take(inner)]),
        other => Expr::Cast {
            kind: kind.clone(),
            expr: Box::new(take(inner)),
            data_type: plain_type(other)?,
            array: false,
            format: None,
        },
    })
}

/// `generate_subscripts(a, 1)` as `unnest(range(1, array_length(a) + 1))`: the subscripts of
/// a one-dimensional array, which beside an `unnest(a)` in the same select list pair with its
/// elements, as in PostgreSQL.
fn subscripts(f: &Function) -> Option<Expr> {
    let FunctionArguments::List(list) = &f.args else { return None };
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(array)), FunctionArg::Unnamed(FunctionArgExpr::Expr(_dim))] =
        list.args.as_slice()
    else {
        return None;
    };
    let one = || Expr::Value(Value::Number("1".into(), false).into());
    let length = Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(call("array_length", vec![array.clone()])),
        data_type: DataType::BigInt(None),
        array: false,
        format: None,
    };
    let stop = Expr::BinaryOp { left: Box::new(length), op: BinaryOperator::Plus, right: Box::new(one()) };
    Some(call("unnest", vec![call("range", vec![one(), stop])]))
}

/// A scalar subquery over catalogs only (`(SELECT typcollation FROM pg_type WHERE oid =
/// a.atttypid)`) reads its one value as `first_value(...)`: the catalogs' keys give it one row at
/// most, and DataFusion plans a correlated scalar subquery only when it aggregates.
fn one_row_of_catalogs(q: &mut Query) {
    let SetExpr::Select(select) = q.body.as_mut() else { return };
    let only_catalogs = !select.from.is_empty()
        && select.from.iter().all(|twj| {
            catalog_of(&twj.relation).is_some() && twj.joins.iter().all(|j| catalog_of(&j.relation).is_some())
        });
    let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
    if !only_catalogs || grouped || select.having.is_some() || aggregates(select) || q.limit_clause.is_some() {
        return;
    }
    if let [SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }] = select.projection.as_mut_slice() {
        *e = call("first_value", vec![std::mem::replace(e, null())]);
    }
}

/// Functions whose presence makes a query block return a row even over no rows.
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "min",
    "max",
    "avg",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "every",
    "json_agg",
    "jsonb_agg",
];

/// Whether `select`'s own items aggregate (not those of subqueries within them).
fn aggregates(select: &Select) -> bool {
    struct Aggregates {
        depth: usize,
        found: bool,
    }
    impl Visitor for Aggregates {
        type Break = ();
        fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
            self.depth += 1;
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if let Expr::Function(f) = e {
                if self.depth == 0 && last_name(&f.name).is_some_and(|n| AGGREGATES.contains(&n.as_str())) {
                    self.found = true;
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut v = Aggregates { depth: 0, found: false };
    let _ = select.projection.visit(&mut v);
    v.found
}

/// `ARRAY[]::TEXT[]`, what `ARRAY(subquery)` is over a subquery with no rows.
fn empty_text_array() -> Expr {
    Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(call("make_array", Vec::new())),
        data_type: DataType::Array(ArrayElemTypeDef::SquareBracket(Box::new(DataType::Text), None)),
        array: false,
        format: None,
    }
}

/// Catalog columns strata always leaves NULL (options and access lists): `unnest` of one has
/// no rows.
const NULL_COLUMNS: &[&str] = &["reloptions", "relacl", "attoptions", "attacl", "nspacl", "datacl", "spcoptions"];

/// Whether `factor` is `unnest(c)` of a column in [`NULL_COLUMNS`].
fn unnests_null(factor: &TableFactor) -> bool {
    let TableFactor::Table { name, args: Some(args), .. } = factor else { return false };
    if last_name(name).as_deref() != Some("unnest") {
        return false;
    }
    let column = match args.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::CompoundIdentifier(parts)))] => parts.last(),
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(i)))] => Some(i),
        _ => None,
    };
    column.is_some_and(|c| NULL_COLUMNS.contains(&c.value.to_lowercase().as_str()))
}

fn is_empty_factor(factor: &TableFactor) -> bool {
    match factor {
        TableFactor::Derived { subquery, .. } => is_known_empty(&subquery.body),
        other if unnests_null(other) => true,
        other => catalog_of(other).is_some_and(|c| ALWAYS_EMPTY.contains(&c.as_str())),
    }
}

/// Whether `select` has no rows because it joins an always-empty catalog.
fn select_is_empty(select: &Select) -> bool {
    let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
    if grouped || select.having.is_some() || aggregates(select) {
        return false;
    }
    if select.projection.iter().any(|i| matches!(i, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..))) {
        return false;
    }
    select.from.iter().any(|twj| {
        let mut required = vec![&twj.relation];
        for j in &twj.joins {
            match &j.join_operator {
                JoinOperator::Join(_) | JoinOperator::Inner(_) | JoinOperator::CrossJoin(_) => {
                    required.push(&j.relation)
                }
                JoinOperator::Left(_)
                | JoinOperator::LeftOuter(_)
                | JoinOperator::LeftSemi(_)
                | JoinOperator::LeftAnti(_)
                | JoinOperator::Semi(_)
                | JoinOperator::Anti(_)
                | JoinOperator::OuterApply => {}
                _ => return false,
            }
        }
        required.into_iter().any(is_empty_factor)
    })
}

/// The name PostgreSQL gives a result column computed by `e`.
fn column_name(e: &Expr) -> Ident {
    let name = |i: &Ident| {
        Ident::with_quote('"', if i.quote_style.is_some() { i.value.clone() } else { i.value.to_lowercase() })
    };
    match e {
        Expr::Identifier(i) => name(i),
        Expr::CompoundIdentifier(parts) => parts.last().map_or_else(|| Ident::with_quote('"', "?column?"), name),
        Expr::Function(f) => Ident::with_quote('"', last_name(&f.name).unwrap_or_else(|| "?column?".into())),
        Expr::Cast { expr, .. } | Expr::Nested(expr) => column_name(expr),
        Expr::Case { .. } => Ident::with_quote('"', "case"),
        _ => Ident::with_quote('"', "?column?"),
    }
}

/// `SELECT NULL AS name, ... WHERE false`, named as `select`'s columns are.
fn empty_select(select: &Select) -> Select {
    let mut out = select.clone();
    out.projection = select
        .projection
        .iter()
        .map(|item| {
            let alias = match item {
                SelectItem::ExprWithAlias { alias, .. } => alias.clone(),
                SelectItem::UnnamedExpr(e) => column_name(e),
                _ => Ident::with_quote('"', "?column?"),
            };
            let expr = Expr::Cast {
                kind: CastKind::Cast,
                expr: Box::new(null()),
                data_type: DataType::Text,
                array: false,
                format: None,
            };
            SelectItem::ExprWithAlias { expr, alias }
        })
        .collect();
    out.from = Vec::new();
    out.selection = Some(Expr::Value(Value::Boolean(false).into()));
    out.distinct = None;
    out.sort_by = Vec::new();
    out
}

fn is_empty_marker(select: &Select) -> bool {
    select.from.is_empty() && matches!(&select.selection, Some(Expr::Value(v)) if v.value == Value::Boolean(false))
}

/// Replaces each block of `body` that has no rows by [`empty_select`].
fn empty_blocks(body: &mut SetExpr) {
    match body {
        SetExpr::Select(s) if !is_empty_marker(s) && select_is_empty(s) => **s = empty_select(s),
        SetExpr::SetOperation { left, right, .. } => {
            empty_blocks(left);
            empty_blocks(right);
        }
        _ => {}
    }
}

/// Whether `body` is known to have no rows (after [`empty_blocks`]).
fn is_known_empty(body: &SetExpr) -> bool {
    match body {
        SetExpr::Select(s) => is_empty_marker(s),
        SetExpr::Query(q) => is_known_empty(&q.body),
        SetExpr::SetOperation { op, left, right, .. } => match op {
            SetOperator::Union => is_known_empty(left) && is_known_empty(right),
            SetOperator::Intersect => is_known_empty(left) || is_known_empty(right),
            SetOperator::Except | SetOperator::Minus => is_known_empty(left),
        },
        _ => false,
    }
}
