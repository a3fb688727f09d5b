//! Rewrites of parsed statements before DataFusion plans them, where DataFusion 55 would
//! otherwise answer wrongly.
//!
//! `x [NOT] IN (..., NULL, ...)`: DataFusion's expression simplifier merges `x IN (list1) AND
//! x NOT IN (list2)` into `x IN (list1 - list2)`, which forgets that a NULL in the second list
//! makes `NOT IN` unknown for every `x` (so the whole condition is never true). Taking the NULLs
//! out of the lists keeps the meaning and gives the simplifier nothing to get wrong:
//! `x IN (a, NULL)` is `(x IN (a) OR NULL)`, and `x NOT IN (a, NULL)` is `(x NOT IN (a) AND NULL)`.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, BinaryOperator, CastKind, DataType, Expr, Statement, Value, ValueWithSpan,
};

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

/// Takes NULL literals out of IN lists (see the module comment).
pub(crate) fn in_lists_without_nulls(stmt: &mut Statement) {
    let _ = visit_expressions_mut(stmt, |e| {
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
