//! Correlated scalar subqueries whose correlation is not an equality:
//!
//! ```sql
//! SELECT a, (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b) FROM t1
//! ```
//!
//! DataFusion 55 turns a correlated scalar subquery into a join only when the subquery's
//! conditions on the outer row are equalities (it groups by the outer columns); others reach the
//! physical planner and fail ("Physical plan does not support logical expression
//! ScalarSubquery"). For an aggregate over one table, strata-sql rewrites the statement before
//! planning: the aggregate is computed once per distinct value of the outer columns the
//! subquery reads, and joined back on those values (NULL matching NULL):
//!
//! ```sql
//! SELECT a, __sq0.__v FROM t1
//!   LEFT JOIN (SELECT __d.b AS __c0, count(x.__m) AS __v
//!              FROM (SELECT DISTINCT b FROM t1) AS __d
//!              LEFT JOIN (SELECT 1 AS __m, * FROM t1) AS x ON x.b < __d.b
//!              GROUP BY __d.b) AS __sq0
//!     ON __sq0.__c0 IS NOT DISTINCT FROM t1.b
//! ```
//!
//! Every outer row finds exactly one row of `__sq0` (its values are among the distinct ones),
//! so the outer rows are neither lost nor repeated; `count(*)` counts the marker `__m`, which is
//! NULL where no inner row matched (0, as the subquery gives), and the other aggregates ignore
//! the NULLs of the unmatched row (NULL, as over no rows).
//!
//! Taken: a query whose FROM is one table, without GROUP BY or `*`, whose SELECT list, WHERE or
//! ORDER BY holds a subquery of the form `(SELECT agg(...) FROM table AS alias WHERE cond)`
//! with `agg` one of count, sum, avg, min, max, whose `cond` names the outer table's columns as
//! `outer.col`, at least once outside an equality. Anything else is left to DataFusion.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, Ident, Join, Query, SelectItem,
    SetExpr, Statement, TableFactor, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;

use crate::ddl::normalize;

/// The name a column or table reference ends in, as DataFusion resolves it.
fn last(parts: &[Ident]) -> Option<String> {
    parts.last().map(normalize)
}

/// A subquery taken apart: what the rewrite needs of it.
struct Correlated {
    /// The inner table as written, and its alias.
    table: String,
    alias: String,
    /// The aggregate, with `count(*)` turned into `count(alias.__m)`.
    aggregate: Expr,
    /// The function's name (the result column's name in PostgreSQL).
    function: String,
    /// The condition, with the outer table's columns renamed to `__d.col`.
    condition: Expr,
    /// The outer columns it reads.
    columns: Vec<String>,
}

/// The outer columns `e` reads (`outer.col`), in order of first appearance.
fn outer_columns(e: &Expr, outer: &str, out: &mut Vec<String>) {
    let _ = datafusion::sql::sqlparser::ast::visit_expressions(e, |x| {
        if let Expr::CompoundIdentifier(parts) = x {
            if parts.len() == 2 && normalize(&parts[0]) == outer {
                let c = normalize(&parts[1]);
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
}

/// Whether every conjunct of `cond` that reads the outer row is an equality, which DataFusion
/// decorrelates itself.
fn only_equalities(cond: &Expr, outer: &str) -> bool {
    match cond {
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
            only_equalities(left, outer) && only_equalities(right, outer)
        }
        Expr::Nested(inner) => only_equalities(inner, outer),
        other => {
            let mut cols = Vec::new();
            outer_columns(other, outer, &mut cols);
            cols.is_empty() || matches!(other, Expr::BinaryOp { op: BinaryOperator::Eq, .. })
        }
    }
}

fn correlated(query: &Query, outer: &str) -> Option<Correlated> {
    if query.with.is_some() || query.order_by.is_some() || query.limit_clause.is_some() || query.fetch.is_some() {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_ref() else { return None };
    let plain_group = matches!(&select.group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
    if select.distinct.is_some() || !plain_group || select.having.is_some() || select.from.len() != 1 {
        return None;
    }
    let from = &select.from[0];
    let TableFactor::Table { name, alias: Some(alias), args: None, .. } = &from.relation else { return None };
    if !from.joins.is_empty() || !alias.columns.is_empty() {
        return None;
    }
    let alias_name = normalize(&alias.name);
    let condition = select.selection.as_ref()?;
    if alias_name == outer || only_equalities(condition, outer) {
        return None;
    }
    let [item] = select.projection.as_slice() else { return None };
    let (SelectItem::UnnamedExpr(Expr::Function(f)) | SelectItem::ExprWithAlias { expr: Expr::Function(f), .. }) = item
    else {
        return None;
    };
    let function = last(&f.name.0.iter().filter_map(|p| p.as_ident().cloned()).collect::<Vec<_>>())?;
    if !["count", "sum", "avg", "min", "max"].contains(&function.as_str()) || f.filter.is_some() || f.over.is_some() {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else { return None };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() || list.args.len() != 1 {
        return None;
    }
    // The outer row may only be read in the condition.
    let mut in_aggregate = Vec::new();
    outer_columns(&Expr::Function(f.clone()), outer, &mut in_aggregate);
    if !in_aggregate.is_empty() {
        return None;
    }
    let mut aggregate = Expr::Function(f.clone());
    if let FunctionArg::Unnamed(FunctionArgExpr::Wildcard) = &list.args[0] {
        if function != "count" {
            return None;
        }
        let marker = format!("count({}.__m)", alias.name);
        aggregate = Parser::new(&PostgreSqlDialect {}).try_with_sql(&marker).ok()?.parse_expr().ok()?;
    }
    let mut columns = Vec::new();
    outer_columns(condition, outer, &mut columns);
    let mut condition = condition.clone();
    let _ = datafusion::sql::sqlparser::ast::visit_expressions_mut(&mut condition, |x| {
        if let Expr::CompoundIdentifier(parts) = x {
            if parts.len() == 2 && normalize(&parts[0]) == outer {
                parts[0] = Ident::new("__d");
            }
        }
        ControlFlow::<()>::Continue(())
    });
    Some(Correlated { table: name.to_string(), alias: alias.name.to_string(), aggregate, function, condition, columns })
}

/// The join that computes subquery `n` for the outer table `outer_table` (named `outer` in
/// the statement).
fn join(c: &Correlated, n: usize, outer_table: &str, outer: &Ident) -> Option<Join> {
    let quoted = |col: &str| Ident::with_quote('"', col).to_string();
    let cols: Vec<String> = c.columns.iter().map(|col| quoted(col)).collect();
    let picked: Vec<String> = cols.iter().enumerate().map(|(i, col)| format!("__d.{col} AS __c{i}")).collect();
    let grouped: Vec<String> = cols.iter().map(|col| format!("__d.{col}")).collect();
    let on: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, col)| format!("(__sq{n}.__c{i} IS NOT DISTINCT FROM {outer}.{col})"))
        .collect();
    let sql = format!(
        "SELECT 1 FROM {outer_table} LEFT JOIN (SELECT {picked}, {aggregate} AS __v \
         FROM (SELECT DISTINCT {cols} FROM {outer_table}) AS __d \
         LEFT JOIN (SELECT 1 AS __m, * FROM {table}) AS {alias} ON ({condition}) \
         GROUP BY {grouped}) AS __sq{n} ON {on}",
        picked = picked.join(", "),
        aggregate = c.aggregate,
        cols = cols.join(", "),
        table = c.table,
        alias = c.alias,
        condition = c.condition,
        grouped = grouped.join(", "),
        on = on.join(" AND "),
    );
    let mut parsed = Parser::new(&PostgreSqlDialect {}).try_with_sql(&sql).ok()?.parse_query().ok()?;
    let SetExpr::Select(select) = parsed.body.as_mut() else { return None };
    let mut from = select.from.pop()?;
    from.joins.pop()
}

/// Rewrites the correlated scalar subqueries of `stmt` that DataFusion cannot plan (see the
/// module comment).
pub(crate) fn rewrite(stmt: &mut Statement) {
    let Statement::Query(query) = stmt else { return };
    let order_by = &mut query.order_by;
    let SetExpr::Select(select) = query.body.as_mut() else { return };
    let plain_group = matches!(&select.group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
    if select.from.len() != 1 || !select.from[0].joins.is_empty() || !plain_group || select.having.is_some() {
        return;
    }
    if select.projection.iter().any(|i| matches!(i, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..))) {
        return;
    }
    let TableFactor::Table { name, alias, args: None, .. } = &select.from[0].relation else { return };
    let outer_ident = match alias {
        Some(a) if a.columns.is_empty() => a.name.clone(),
        Some(_) => return,
        None => match name.0.last().and_then(|p| p.as_ident()) {
            Some(id) => id.clone(),
            None => return,
        },
    };
    let outer = normalize(&outer_ident);
    let outer_table = match alias {
        Some(a) => format!("{name} AS {}", a.name),
        None => name.to_string(),
    };

    /// Replaces the subqueries of the outer level (not those nested in other subqueries).
    struct Replace<'a> {
        outer: &'a str,
        outer_ident: &'a Ident,
        outer_table: &'a str,
        depth: usize,
        joins: Vec<Join>,
        functions: Vec<String>,
    }
    impl VisitorMut for Replace<'_> {
        type Break = ();
        fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
            self.depth += 1;
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if self.depth != 0 {
                return ControlFlow::Continue(());
            }
            if let Expr::Subquery(q) = expr {
                let n = self.joins.len();
                if let Some(c) = correlated(q, self.outer) {
                    if let Some(j) = join(&c, n, self.outer_table, self.outer_ident) {
                        self.joins.push(j);
                        self.functions.push(c.function);
                        *expr = Expr::CompoundIdentifier(vec![Ident::new(format!("__sq{n}")), Ident::new("__v")]);
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut replace = Replace {
        outer: &outer,
        outer_ident: &outer_ident,
        outer_table: &outer_table,
        depth: 0,
        joins: Vec::new(),
        functions: Vec::new(),
    };
    for item in select.projection.iter_mut() {
        let _ = item.visit(&mut replace);
    }
    if let Some(selection) = select.selection.as_mut() {
        let _ = selection.visit(&mut replace);
    }
    if let Some(order_by) = order_by.as_mut() {
        let _ = order_by.visit(&mut replace);
    }
    if replace.joins.is_empty() {
        return;
    }
    // A subquery standing alone in the SELECT list is named after its function, as in
    // PostgreSQL (DataFusion would say "(<subquery>)").
    for item in select.projection.iter_mut() {
        if let SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) = item {
            let n = match parts.as_slice() {
                [sq, v] if v.value == "__v" => sq.value.strip_prefix("__sq").and_then(|n| n.parse::<usize>().ok()),
                _ => None,
            };
            if let Some(function) = n.and_then(|n| replace.functions.get(n)) {
                *item = SelectItem::ExprWithAlias {
                    expr: Expr::CompoundIdentifier(parts.clone()),
                    alias: Ident::with_quote('"', function.clone()),
                };
            }
        }
    }
    select.from[0].joins.extend(replace.joins);
}
