//! Result columns that share a name: `SELECT 52 AS col0, 13 AS col0`, `SELECT a, a FROM t`,
//! `SELECT col4, col1 + col4 AS col4 FROM t AS cor0`, two scalar subqueries side by side.
//! PostgreSQL returns such columns as they are named; DataFusion 55 refuses to plan them
//! ("Projections require unique expression names"). So before planning, each such column after
//! the first is given a name of its own (`col0__strata_2`), and the result is sent under the
//! names the statement gave ([`Renames::apply`]).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr, Ident, Select, SelectItem, SetExpr, Statement, Value,
};

use crate::ddl::normalize;

/// What a renamed column is called in the result.
#[derive(Debug, Clone)]
enum Wanted {
    /// The name the statement gave it (an alias, or the column it names).
    Name(String),
    /// The name DataFusion gives the column at this position, which it repeats.
    SameAs(usize),
}

/// The result columns a statement's planning had to name apart, and the names to send them
/// under.
#[derive(Debug, Clone, Default)]
pub struct Renames(Vec<(usize, Wanted)>);

/// The name a select item's column gets, as far as the syntax says; `None` for an expression
/// DataFusion names after its own rendering (which differs from the SQL text).
fn item_name(item: &SelectItem) -> Option<Result<String, ()>> {
    match item {
        SelectItem::ExprWithAlias { alias, .. } => Some(Ok(normalize(alias))),
        SelectItem::UnnamedExpr(e) => {
            // DataFusion names `(a)` and `- (a)` as it names `a` and `- a`.
            let mut e = e.clone();
            let _ = visit_expressions_mut(&mut e, |x| {
                if let Expr::Nested(inner) = x {
                    *x = std::mem::replace(inner.as_mut(), Expr::Value(Value::Null.into()));
                }
                ControlFlow::<()>::Continue(())
            });
            match e {
                Expr::Identifier(id) => Some(Ok(normalize(&id))),
                Expr::CompoundIdentifier(parts) => parts.last().map(|id| Ok(normalize(id))),
                Expr::Subquery(_) => Some(Err(())),
                e => Some(Ok(format!("\u{0}{e}"))),
            }
        }
        SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) | SelectItem::ExprWithAliases { .. } => None,
    }
}

/// Gives the repeated result column names of `stmt`'s query names of their own, in every SELECT
/// of its body (the branches of a UNION too); `None` when the result's names (the first
/// SELECT's) need no renaming.
pub(crate) fn dedupe(stmt: &mut Statement) -> Option<Renames> {
    let Statement::Query(query) = stmt else { return None };
    let mut selects = Vec::new();
    collect_selects(query.body.as_mut(), &mut selects);
    let mut result = None;
    for (n, select) in selects.into_iter().enumerate() {
        let renames = dedupe_select(select);
        if n == 0 && !renames.is_empty() {
            result = Some(Renames(renames));
        }
    }
    result
}

/// Names apart the repeated result columns of one SELECT; the renamed columns and their wanted
/// names. None if a `*` makes its columns unknown here: `SELECT *, a FROM t` is still refused.
fn dedupe_select(select: &mut Select) -> Vec<(usize, Wanted)> {
    let mut keys = Vec::with_capacity(select.projection.len());
    for item in &select.projection {
        // Scalar subqueries are all named "(<subquery>)".
        keys.push(match item_name(item) {
            None => return Vec::new(),
            Some(Ok(k)) => k,
            Some(Err(())) => "\u{0}subquery".into(),
        });
    }
    let mut first: HashMap<&str, usize> = HashMap::new();
    let mut renames = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        match first.get(key.as_str()) {
            None => {
                first.insert(key, i);
            }
            Some(&at) => {
                let wanted = match key.strip_prefix('\u{0}') {
                    Some(_) => Wanted::SameAs(at),
                    None => Wanted::Name(key.clone()),
                };
                renames.push((i, wanted));
            }
        }
    }
    for (i, _) in &renames {
        let item = &mut select.projection[*i];
        let alias = Ident::with_quote('"', format!("__strata_column_{i}"));
        *item = match std::mem::replace(item, SelectItem::Wildcard(Default::default())) {
            SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => {
                SelectItem::ExprWithAlias { expr, alias }
            }
            other => other,
        };
    }
    renames
}

/// The SELECTs of a query body, the first (leftmost) one first.
fn collect_selects<'a>(body: &'a mut SetExpr, out: &mut Vec<&'a mut Select>) {
    match body {
        SetExpr::Select(select) => out.push(select),
        SetExpr::SetOperation { left, right, .. } => {
            collect_selects(left, out);
            collect_selects(right, out);
        }
        SetExpr::Query(q) => collect_selects(q.body.as_mut(), out),
        _ => {}
    }
}

impl Renames {
    /// `schema` (a planned result's) with the renamed columns under their wanted names.
    pub(crate) fn apply(&self, schema: &SchemaRef) -> SchemaRef {
        let fields = schema.fields();
        let mut out: Vec<Field> = fields.iter().map(|f| f.as_ref().clone()).collect();
        for (i, wanted) in &self.0 {
            let name = match wanted {
                Wanted::Name(n) => n.clone(),
                Wanted::SameAs(at) => match fields.get(*at) {
                    Some(f) => f.name().clone(),
                    None => continue,
                },
            };
            if let Some(f) = out.get_mut(*i) {
                *f = f.clone().with_name(name);
            }
        }
        Arc::new(Schema::new_with_metadata(out, schema.metadata().clone()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use std::sync::Arc;

    use crate::{Output, SqlEngine};

    /// The names and rows (as text) of `sql`'s last result, run directly and prepared.
    fn result(engine: &SqlEngine, rt: &tokio::runtime::Runtime, sql: &str) -> (Vec<String>, Vec<Vec<String>>) {
        let out = rt.block_on(engine.execute(sql)).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let Some(Output::Rows { schema, batches }) = out.last() else { panic!("{sql} returned no rows") };
        let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let rows = batches
            .iter()
            .flat_map(strata::scan::batch_rows)
            .map(|r| r.iter().map(|v| format!("{v:?}")).collect())
            .collect();
        let stmts = engine.parse(sql).unwrap();
        let prepared = rt.block_on(engine.prepare(stmts.last().unwrap())).unwrap();
        let described: Vec<String> =
            prepared.output_schema().unwrap().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(described, names, "{sql}: described and sent names differ");
        (names, rows)
    }

    #[test]
    fn repeated_result_names_are_sent_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(strata::Db::open(dir.path(), strata::Options::default()).unwrap());
        let engine = SqlEngine::new(db).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(
            engine.execute("CREATE TABLE t (k INT PRIMARY KEY, a INT, s TEXT); INSERT INTO t VALUES (1, 10, 'x')"),
        )
        .unwrap();
        let cases: &[(&str, &[&str])] = &[
            ("SELECT 52 AS col0, 13 AS col0", &["col0", "col0"]),
            ("SELECT a, a, k FROM t", &["a", "a", "k"]),
            ("SELECT a, a + 1 AS a FROM t AS cor0", &["a", "a"]),
            // Unary plus is taken off (`(a)`), and parentheses do not change a name.
            ("SELECT + a, a AS a FROM t", &["a", "a"]),
            ("SELECT - + a, - a FROM t", &["(- t.a)", "(- t.a)"]),
            ("SELECT count(*), + count(*) FROM t", &["count(*)", "count(*)"]),
            ("SELECT t.a, cor1.a FROM t, t AS cor1", &["a", "a"]),
            ("SELECT a AS x, k AS x FROM t UNION ALL SELECT 1 AS y, 2 AS y", &["x", "x"]),
        ];
        for (sql, names) in cases {
            let (got, rows) = result(&engine, &rt, sql);
            assert_eq!(got, *names, "{sql}");
            assert_eq!(rows.len(), if sql.contains("UNION") { 2 } else { 1 }, "{sql}");
        }
        // Scalar subqueries are all named alike (DataFusion names the first).
        let (names, rows) = result(&engine, &rt, "SELECT (SELECT max(a) FROM t), (SELECT min(k) FROM t)");
        assert_eq!(names[0], names[1]);
        assert_eq!(rows, vec![vec!["Int(10)".to_string(), "Int(1)".into()]]);
        // The values stay with their columns.
        let (_, rows) = result(&engine, &rt, "SELECT a, a + 1 AS a, + s FROM t");
        assert_eq!(rows, vec![vec!["Int(10)".to_string(), "BigInt(11)".into(), "Text(\"x\")".into()]]);
        // Names that do not repeat are left to DataFusion.
        assert_eq!(result(&engine, &rt, "SELECT a AS b, k FROM t ORDER BY b").0, ["b", "k"]);
    }
}
