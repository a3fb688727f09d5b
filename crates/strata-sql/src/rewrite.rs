//! Rewrites of parsed statements before DataFusion plans them, where DataFusion 55 would
//! otherwise answer wrongly.
//!
//! `x [NOT] IN (..., NULL, ...)`: DataFusion's expression simplifier merges `x IN (list1) AND
//! x NOT IN (list2)` into `x IN (list1 - list2)`, which forgets that a NULL in the second list
//! makes `NOT IN` unknown for every `x` (so the whole condition is never true). Taking the NULLs
//! out of the lists keeps the meaning and gives the simplifier nothing to get wrong:
//! `x IN (a, NULL)` is `(x IN (a) OR NULL)`, and `x NOT IN (a, NULL)` is `(x NOT IN (a) AND NULL)`.
//!
//! And one rewrite of the text before parsing: PostgreSQL's `ABORT` (a synonym of `ROLLBACK`) is
//! not in sqlparser's grammar.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, BinaryOperator, CastKind, DataType, Expr, Ident, ObjectNamePart, Statement, TableAlias,
    TableAliasColumnDef, TableFactor, UnaryOperator, Value, ValueWithSpan, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// `sql` with each `ABORT` that begins a statement spelled `ROLLBACK` (text that does not
/// tokenize is returned as it is, for the parser to report).
pub(crate) fn abort_as_rollback(sql: &str) -> std::borrow::Cow<'_, str> {
    // Most statements have no ABORT in them at all: they are not tokenized twice.
    if !sql.as_bytes().windows(5).any(|w| w.eq_ignore_ascii_case(b"abort")) {
        return sql.into();
    }
    let Ok(tokens) = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize_with_location() else {
        return sql.into();
    };
    let mut at_start = true;
    let mut aborts = Vec::new();
    for t in &tokens {
        match &t.token {
            Token::Whitespace(_) => {}
            Token::SemiColon => at_start = true,
            Token::Word(w) if at_start && w.keyword == Keyword::ABORT && w.quote_style.is_none() => {
                aborts.push(t.span.start);
                at_start = false;
            }
            _ => at_start = false,
        }
    }
    if aborts.is_empty() {
        return sql.into();
    }
    // Locations are 1-based lines and columns counted in characters.
    let mut starts = Vec::new();
    for (line, text) in sql.split_inclusive('\n').enumerate() {
        let offset = text.as_ptr() as usize - sql.as_ptr() as usize;
        for loc in aborts.iter().filter(|l| l.line as usize == line + 1) {
            if let Some((i, _)) = text.char_indices().nth(loc.column.saturating_sub(1) as usize) {
                starts.push(offset + i);
            }
        }
    }
    let mut out = String::with_capacity(sql.len() + 3 * starts.len());
    let mut last = 0;
    for s in starts {
        out.push_str(&sql[last..s]);
        out.push_str("ROLLBACK");
        last = s + "ABORT".len();
    }
    out.push_str(&sql[last..]);
    out.into()
}

/// `VACUUM ...` and `ANALYZE ...` in PostgreSQL's grammar (which sqlparser does not take), as a
/// statement that names only what it is: strata runs neither (see `Prepared::Nothing`).
pub(crate) fn maintenance(sql: &str) -> Option<Statement> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().ok()?;
    let mut words = tokens.iter().filter(|t| !matches!(t, Token::Whitespace(_)));
    let Some(Token::Word(first)) = words.next() else { return None };
    // One statement only: a semicolon may end it.
    let mut rest = words.skip_while(|t| !matches!(t, Token::SemiColon));
    if rest.next().is_some() && rest.next().is_some() {
        return None;
    }
    match first.keyword {
        Keyword::VACUUM => Some(Statement::Vacuum(datafusion::sql::sqlparser::ast::VacuumStatement {
            full: false,
            sort_only: false,
            delete_only: false,
            reindex: false,
            recluster: false,
            table_name: None,
            threshold: None,
            boost: false,
        })),
        Keyword::ANALYZE => Some(Statement::Analyze(datafusion::sql::sqlparser::ast::Analyze {
            table_name: None,
            partitions: None,
            for_columns: false,
            columns: Vec::new(),
            cache_metadata: false,
            noscan: false,
            compute_statistics: false,
            has_table_keyword: false,
        })),
        _ => None,
    }
}

fn is_null(e: &Expr) -> bool {
    matches!(e, Expr::Value(ValueWithSpan { value: Value::Null, .. }))
}

fn null_boolean() -> Expr {
    Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(Expr::Value(Value::Null.into())),
        data_type: DataType::Boolean,
        array: false,
        format: None,
    }
}

/// `+x` as `x`, whatever the type of `x`: DataFusion takes unary plus on numbers only, and
/// SQLite (whose sqllogictest corpus writes `+ col` for any column) on anything. PostgreSQL
/// refuses it on text; strata reads it as the identity everywhere.
fn plus_is_identity(e: &mut Expr) {
    if let Expr::UnaryOp { op: UnaryOperator::Plus, expr } = e {
        let inner = std::mem::replace(expr.as_mut(), Expr::Value(Value::Null.into()));
        *e = Expr::Nested(Box::new(inner));
    }
}

/// Takes NULL literals out of IN lists (see the module comment), and unary plus signs off
/// their operands (see [`plus_is_identity`]).
pub(crate) fn in_lists_without_nulls(stmt: &mut Statement) {
    let _ = visit_expressions_mut(stmt, |e| {
        plus_is_identity(e);
        if let Expr::InList { expr, list, negated } = e {
            if list.iter().any(is_null) {
                let rest: Vec<Expr> = list.iter().filter(|x| !is_null(x)).cloned().collect();
                let replacement = if rest.is_empty() {
                    null_boolean()
                } else {
                    let op = if *negated { BinaryOperator::And } else { BinaryOperator::Or };
                    let inner = Expr::InList { expr: expr.clone(), list: rest, negated: *negated };
                    Expr::Nested(Box::new(Expr::BinaryOp {
                        left: Box::new(Expr::Nested(Box::new(inner))),
                        op,
                        right: Box::new(null_boolean()),
                    }))
                };
                *e = replacement;
            }
        }
        ControlFlow::<()>::Continue(())
    });
}

/// Names the column of `generate_series(...)` in FROM as PostgreSQL does: after the function's
/// alias (`FROM generate_series(1, 10) AS aid` has a column `aid`, as pgbench's server-side data
/// generation reads it), or `generate_series` without one. (DataFusion calls it `value`.)
pub(crate) fn function_columns(stmt: &mut Statement) {
    struct Columns;
    impl VisitorMut for Columns {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table { name, alias, args: Some(_), .. } = factor {
                let is_series = matches!(name.0.as_slice(),
                    [ObjectNamePart::Identifier(n)] if n.value.eq_ignore_ascii_case("generate_series"));
                match alias {
                    Some(a) if is_series && a.columns.is_empty() => {
                        a.columns = vec![TableAliasColumnDef::from_name(a.name.value.clone())];
                    }
                    None if is_series => {
                        *alias = Some(TableAlias {
                            explicit: true,
                            name: Ident::new("generate_series"),
                            columns: vec![TableAliasColumnDef::from_name("generate_series")],
                            at: None,
                        });
                    }
                    _ => {}
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = stmt.visit(&mut Columns);
}

#[cfg(test)]
mod tests {
    use super::abort_as_rollback;

    #[test]
    fn abort_at_a_statement_start_reads_as_rollback() {
        assert_eq!(abort_as_rollback("abort"), "ROLLBACK");
        assert_eq!(
            abort_as_rollback("SELECT 1;\n  ABORT WORK; select 'abort'"),
            "SELECT 1;\n  ROLLBACK WORK; select 'abort'"
        );
        assert_eq!(abort_as_rollback("select abort from t"), "select abort from t");
        assert_eq!(abort_as_rollback("select 'é'; abort"), "select 'é'; ROLLBACK");
    }

    /// Statements nesting up to `PARSER_DEPTH` deep plan and run on a thread with the stack size a
    /// server's runtime threads have (2 MiB); deeper ones are refused, never overflow the stack.
    #[test]
    #[allow(clippy::unwrap_used, clippy::panic)]
    fn deep_nesting_runs_or_is_refused_on_a_small_stack() {
        let handle = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let dir = tempfile::tempdir().unwrap();
                let db = std::sync::Arc::new(strata::Db::open(dir.path(), strata::Options::default()).unwrap());
                let engine = crate::SqlEngine::new(db).unwrap();
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                rt.block_on(engine.execute("CREATE TABLE t (k INT PRIMARY KEY, a INT); INSERT INTO t VALUES (1, 5)"))
                    .unwrap();
                for depth in [60, 120, 180] {
                    let cond = format!("{}a = 5{}", "(".repeat(depth), ")".repeat(depth));
                    let sql = format!("SELECT k FROM t WHERE {cond} AND {}", cond.replace("a = 5", "a > 1"));
                    let out = rt.block_on(engine.execute(&sql)).unwrap_or_else(|e| panic!("depth {depth}: {e}"));
                    assert_eq!(out.last().and_then(crate::Output::rows), Some(1), "depth {depth}");
                }
                let deep = format!("SELECT {}1{}", "(".repeat(5000), ")".repeat(5000));
                let e = rt.block_on(engine.execute(&deep)).unwrap_err();
                assert_eq!(e.kind.sqlstate(), "42601", "{e}");
            })
            .unwrap();
        handle.join().unwrap();
    }
}
