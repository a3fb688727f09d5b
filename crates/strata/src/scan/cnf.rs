//! Normalizing an [`Expr`] into a [`Filter`]: negations pushed down to the comparisons (De Morgan;
//! `NOT a < 5` is `a >= 5`, both unknown for NULL), literals coerced to the column's type, then
//! OR distributed over AND. Every step preserves SQL's three-valued logic, and the result has no
//! negation left, so a row passes exactly when each clause has an atom that is true on it.

use std::cmp::Ordering;

use super::{CmpOp, Expr};
use crate::error::{Error, Result};
use crate::types::{Column, ColumnType, Schema, Value};

/// Distribution can multiply clauses; beyond this many the filter is refused.
const MAX_CLAUSES: usize = 1024;

/// The test an [`Atom`] applies to its column.
#[derive(Debug, Clone, PartialEq)]
pub enum Test {
    /// `column op literal`, the literal of the column's own type (never NULL).
    Cmp(CmpOp, Value),
    /// `column IS NULL`.
    IsNull,
    /// `column IS NOT NULL`.
    IsNotNull,
}

/// One test on one column.
#[derive(Debug, Clone, PartialEq)]
pub struct Atom {
    /// Schema index of the column.
    pub column: usize,
    /// The test.
    pub test: Test,
}

/// A filter in conjunctive normal form: a row passes when every clause has a true atom.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Filter {
    clauses: Vec<Vec<Atom>>,
}

/// A leaf after negation push-down: an atom, or a constant.
#[derive(Debug, Clone, PartialEq)]
enum Leaf {
    Atom(Atom),
    True,
    /// False or unknown on every row.
    False,
}

impl Filter {
    /// Normalizes `expr` over `schema`. Errors name an unknown column, a literal that cannot be
    /// compared with its column, or a filter too large in CNF.
    pub fn new(table: &str, schema: &Schema, expr: &Expr) -> Result<Filter> {
        let clauses = to_cnf(table, schema, expr, false)?;
        Ok(Filter { clauses }.simplified())
    }

    /// The filter that every row passes.
    pub fn all() -> Filter {
        Filter::default()
    }

    /// The clauses (AND of ORs). Empty: every row passes.
    pub fn clauses(&self) -> &[Vec<Atom>] {
        &self.clauses
    }

    /// No row can pass (some clause has no atom).
    pub fn is_false(&self) -> bool {
        self.clauses.iter().any(Vec::is_empty)
    }

    /// Schema indices of the columns the filter reads.
    pub fn columns(&self) -> impl Iterator<Item = usize> + '_ {
        self.clauses.iter().flatten().map(|a| a.column)
    }

    fn simplified(mut self) -> Filter {
        if self.is_false() {
            return Filter { clauses: vec![Vec::new()] };
        }
        for c in &mut self.clauses {
            let mut seen: Vec<Atom> = Vec::with_capacity(c.len());
            for a in c.drain(..) {
                if !seen.contains(&a) {
                    seen.push(a);
                }
            }
            *c = seen;
        }
        let mut out: Vec<Vec<Atom>> = Vec::with_capacity(self.clauses.len());
        for c in self.clauses {
            if !out.contains(&c) {
                out.push(c);
            }
        }
        Filter { clauses: out }
    }
}

fn to_cnf(table: &str, schema: &Schema, e: &Expr, negate: bool) -> Result<Vec<Vec<Atom>>> {
    let (conj, items) = match e {
        Expr::Not(inner) => return to_cnf(table, schema, inner, !negate),
        Expr::And(v) => (!negate, v),
        Expr::Or(v) => (negate, v),
        leaf => {
            return Ok(match to_leaf(table, schema, leaf, negate)? {
                Leaf::True => Vec::new(),
                Leaf::False => vec![Vec::new()],
                Leaf::Atom(a) => vec![vec![a]],
            })
        }
    };
    let mut out: Vec<Vec<Atom>> = if conj { Vec::new() } else { vec![Vec::new()] };
    for item in items {
        let sub = to_cnf(table, schema, item, negate)?;
        if conj {
            out.extend(sub);
        } else {
            // (c1 AND c2) OR (d1 AND d2) = (c1 OR d1) AND (c1 OR d2) AND ...
            if out.len().saturating_mul(sub.len()) > MAX_CLAUSES {
                return Err(Error::InvalidArgument(format!(
                    "filter has more than {MAX_CLAUSES} clauses in conjunctive normal form"
                )));
            }
            let mut next = Vec::with_capacity(out.len() * sub.len());
            for a in &out {
                for b in &sub {
                    next.push(a.iter().chain(b).cloned().collect());
                }
            }
            out = next;
        }
        if out.len() > MAX_CLAUSES {
            return Err(Error::InvalidArgument(format!(
                "filter has more than {MAX_CLAUSES} clauses in conjunctive normal form"
            )));
        }
    }
    Ok(out)
}

fn column<'s>(table: &str, schema: &'s Schema, name: &str) -> Result<(usize, &'s Column)> {
    let i = schema
        .column_index(name)
        .ok_or_else(|| Error::UnknownColumn { table: table.to_string(), column: name.to_string() })?;
    Ok((i, &schema.columns()[i]))
}

fn to_leaf(table: &str, schema: &Schema, e: &Expr, negate: bool) -> Result<Leaf> {
    let atom = |column, test| Leaf::Atom(Atom { column, test });
    match e {
        Expr::IsNull(c) | Expr::IsNotNull(c) => {
            let (i, col) = column(table, schema, c)?;
            let is_null = matches!(e, Expr::IsNull(_)) != negate;
            Ok(match (is_null, col.nullable) {
                (true, false) => Leaf::False,
                (false, false) => Leaf::True,
                (true, true) => atom(i, Test::IsNull),
                (false, true) => atom(i, Test::IsNotNull),
            })
        }
        Expr::Cmp { column: c, op, value } => {
            let (i, col) = column(table, schema, c)?;
            let op = if negate { op.negate() } else { *op };
            if value.is_null() {
                return Ok(Leaf::False);
            }
            let mismatch = || Error::TypeMismatch {
                table: table.to_string(),
                column: col.name.clone(),
                message: format!(
                    "cannot compare a {} column with {} literal {value:?}",
                    col.ty.name(),
                    value.type_name()
                ),
            };
            let leaf = coerce(col.ty, op, value).ok_or_else(mismatch)?;
            Ok(match leaf {
                Coerced::Cmp(op, v) => atom(i, Test::Cmp(op, v)),
                // True for every non-NULL value.
                Coerced::NotNull if col.nullable => atom(i, Test::IsNotNull),
                Coerced::NotNull => Leaf::True,
                Coerced::Never => Leaf::False,
            })
        }
        Expr::And(_) | Expr::Or(_) | Expr::Not(_) => Err(Error::InvalidArgument("internal: not a leaf".into())),
    }
}

/// A comparison rewritten for the column's type.
#[derive(Debug, Clone, PartialEq)]
enum Coerced {
    Cmp(CmpOp, Value),
    /// True for every non-NULL value.
    NotNull,
    /// Never true.
    Never,
}

/// A numeric literal.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i128),
    Float(f64),
}

fn num(v: &Value) -> Option<Num> {
    Some(match *v {
        Value::BigInt(x) => Num::Int(x.into()),
        Value::Int(x) => Num::Int(x.into()),
        Value::SmallInt(x) => Num::Int(x.into()),
        Value::TinyInt(x) => Num::Int(x.into()),
        Value::Double(x) => Num::Float(x),
        Value::Real(x) => Num::Float(x.into()),
        _ => return None,
    })
}

/// `col op v` for a literal `v` that lies strictly between two adjacent values `lo < v < hi` of
/// the column's domain (or beyond one end when `lo`/`hi` is `None`).
fn between(op: CmpOp, lo: Option<Value>, hi: Option<Value>) -> Coerced {
    match op {
        CmpOp::Eq => Coerced::Never,
        CmpOp::NotEq => Coerced::NotNull,
        CmpOp::Lt | CmpOp::LtEq => match (lo, hi) {
            (Some(lo), _) => Coerced::Cmp(CmpOp::LtEq, lo),
            (None, _) => Coerced::Never,
        },
        CmpOp::Gt | CmpOp::GtEq => match (lo, hi) {
            (_, Some(hi)) => Coerced::Cmp(CmpOp::GtEq, hi),
            (_, None) => Coerced::Never,
        },
    }
}

fn int_value(ty: ColumnType, x: i128) -> Option<Value> {
    Some(match ty {
        ColumnType::BigInt => Value::BigInt(i64::try_from(x).ok()?),
        ColumnType::Int => Value::Int(i32::try_from(x).ok()?),
        ColumnType::SmallInt => Value::SmallInt(i16::try_from(x).ok()?),
        ColumnType::TinyInt => Value::TinyInt(i8::try_from(x).ok()?),
        _ => return None,
    })
}

fn int_range(ty: ColumnType) -> (i128, i128) {
    match ty {
        ColumnType::BigInt => (i64::MIN.into(), i64::MAX.into()),
        ColumnType::Int => (i32::MIN.into(), i32::MAX.into()),
        ColumnType::SmallInt => (i16::MIN.into(), i16::MAX.into()),
        _ => (i8::MIN.into(), i8::MAX.into()),
    }
}

/// `col op x` on an integer column.
fn int_cmp(ty: ColumnType, op: CmpOp, x: i128) -> Coerced {
    let (min, max) = int_range(ty);
    // Beyond the type's range every value lies on one side of the literal.
    let beyond = |below: bool| match (op, below) {
        (CmpOp::NotEq, _) | (CmpOp::Lt | CmpOp::LtEq, true) | (CmpOp::Gt | CmpOp::GtEq, false) => Coerced::NotNull,
        _ => Coerced::Never,
    };
    if x > max {
        beyond(true)
    } else if x < min {
        beyond(false)
    } else {
        int_value(ty, x).map_or(Coerced::Never, |v| Coerced::Cmp(op, v))
    }
}

fn coerce(ty: ColumnType, op: CmpOp, v: &Value) -> Option<Coerced> {
    match ty {
        ColumnType::BigInt | ColumnType::Int | ColumnType::SmallInt | ColumnType::TinyInt => Some(match num(v)? {
            Num::Int(x) => int_cmp(ty, op, x),
            Num::Float(f) if f.is_nan() || f.is_infinite() => {
                // In total order +NaN and +inf lie above every integer, -NaN and -inf below.
                let (min, max) = int_range(ty);
                int_cmp(ty, op, if f.is_sign_positive() { max + 1 } else { min - 1 })
            }
            Num::Float(f) if f.fract() == 0.0 => int_cmp(ty, op, f as i128),
            Num::Float(f) => {
                let (lo, hi) = (f.floor() as i128, f.ceil() as i128);
                match op {
                    CmpOp::Eq => Coerced::Never,
                    CmpOp::NotEq => Coerced::NotNull,
                    CmpOp::Lt | CmpOp::LtEq => int_cmp(ty, CmpOp::LtEq, lo),
                    CmpOp::Gt | CmpOp::GtEq => int_cmp(ty, CmpOp::GtEq, hi),
                }
            }
        }),
        ColumnType::Double => Some(match num(v)? {
            Num::Float(f) => Coerced::Cmp(op, Value::Double(f)),
            Num::Int(x) => {
                let d = x as f64;
                match (d as i128).cmp(&x) {
                    Ordering::Equal => Coerced::Cmp(op, Value::Double(d)),
                    Ordering::Less => between(op, Some(Value::Double(d)), Some(Value::Double(d.next_up()))),
                    Ordering::Greater => between(op, Some(Value::Double(d.next_down())), Some(Value::Double(d))),
                }
            }
        }),
        ColumnType::Real => {
            let wide = match num(v)? {
                Num::Float(f) => f,
                Num::Int(x) => x as f64,
            };
            let r = wide as f32;
            if wide.is_nan() {
                return Some(Coerced::Cmp(op, Value::Real(r)));
            }
            let exact = match num(v)? {
                Num::Float(f) => f64::from(r).total_cmp(&f),
                Num::Int(x) => (f64::from(r) as i128).cmp(&x),
            };
            Some(match exact {
                Ordering::Equal => Coerced::Cmp(op, Value::Real(r)),
                Ordering::Less => between(op, Some(Value::Real(r)), Some(Value::Real(r.next_up()))),
                Ordering::Greater => between(op, Some(Value::Real(r.next_down())), Some(Value::Real(r))),
            })
        }
        ColumnType::Boolean => matches!(v, Value::Boolean(_)).then(|| Coerced::Cmp(op, v.clone())),
        ColumnType::Text => matches!(v, Value::Text(_)).then(|| Coerced::Cmp(op, v.clone())),
        ColumnType::Bytea => matches!(v, Value::Bytea(_)).then(|| Coerced::Cmp(op, v.clone())),
        ColumnType::Date => matches!(v, Value::Date(_)).then(|| Coerced::Cmp(op, v.clone())),
        ColumnType::Timestamp => matches!(v, Value::Timestamp(_)).then(|| Coerced::Cmp(op, v.clone())),
        ColumnType::TimestampTz => matches!(v, Value::TimestampTz(_)).then(|| Coerced::Cmp(op, v.clone())),
    }
}

/// Values compare as the types module says (scans, zone maps and aggregates agree on it).
pub(crate) use crate::types::compare;

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::new(
            vec![
                Column::not_null("k", ColumnType::BigInt),
                Column::new("i", ColumnType::SmallInt),
                Column::new("d", ColumnType::Double),
                Column::new("r", ColumnType::Real),
                Column::new("s", ColumnType::Text),
                Column::not_null("n", ColumnType::Int),
            ],
            &["k"],
        )
        .unwrap()
    }

    fn f(e: Expr) -> Result<Filter> {
        Filter::new("t", &schema(), &e)
    }

    fn atom(column: usize, op: CmpOp, v: Value) -> Atom {
        Atom { column, test: Test::Cmp(op, v) }
    }

    #[test]
    fn negation_is_pushed_to_the_comparisons_and_or_is_distributed() {
        let e = Expr::cmp("i", CmpOp::Lt, Value::Int(5))
            .or(Expr::cmp("d", CmpOp::Gt, Value::Double(1.5)).and(Expr::IsNull("s".into())))
            .not();
        // NOT (i<5 OR (d>1.5 AND s IS NULL)) = i>=5 AND (d<=1.5 OR s IS NOT NULL)
        let got = f(e).unwrap();
        assert_eq!(
            got.clauses(),
            &[
                vec![atom(1, CmpOp::GtEq, Value::SmallInt(5))],
                vec![atom(2, CmpOp::LtEq, Value::Double(1.5)), Atom { column: 4, test: Test::IsNotNull }],
            ]
        );
        let e = Expr::cmp("i", CmpOp::Eq, Value::Int(1)).and(Expr::cmp("i", CmpOp::Eq, Value::Int(2))).or(Expr::cmp(
            "d",
            CmpOp::Eq,
            Value::Int(3),
        ));
        assert_eq!(f(e).unwrap().clauses().len(), 2);
    }

    #[test]
    fn literals_are_coerced_to_the_column_type() {
        let one = |e| f(e).unwrap().clauses().to_vec();
        // Fractions on an integer column round to the side that keeps the meaning.
        assert_eq!(
            one(Expr::cmp("i", CmpOp::Lt, Value::Double(2.5))),
            vec![vec![atom(1, CmpOp::LtEq, Value::SmallInt(2))]]
        );
        assert_eq!(
            one(Expr::cmp("i", CmpOp::Gt, Value::Double(-2.5))),
            vec![vec![atom(1, CmpOp::GtEq, Value::SmallInt(-2))]]
        );
        assert!(f(Expr::cmp("i", CmpOp::Eq, Value::Double(2.5))).unwrap().is_false());
        // Beyond the type's range: always or never true for non-NULL values.
        assert_eq!(
            one(Expr::cmp("i", CmpOp::Lt, Value::BigInt(1 << 40))),
            vec![vec![Atom { column: 1, test: Test::IsNotNull }]]
        );
        assert!(f(Expr::cmp("i", CmpOp::Gt, Value::BigInt(1 << 40))).unwrap().is_false());
        assert_eq!(one(Expr::cmp("n", CmpOp::NotEq, Value::BigInt(1 << 40))), Vec::<Vec<Atom>>::new());
        // Integers on a DOUBLE column; doubles on a REAL column that no f32 equals.
        assert_eq!(
            one(Expr::cmp("d", CmpOp::GtEq, Value::Int(0))),
            vec![vec![atom(2, CmpOp::GtEq, Value::Double(0.0))]]
        );
        let r = 0.1f64 as f32;
        assert!(f64::from(r) > 0.1);
        assert_eq!(
            one(Expr::cmp("r", CmpOp::Lt, Value::Double(0.1))),
            vec![vec![atom(3, CmpOp::LtEq, Value::Real(r.next_down()))]]
        );
        assert_eq!(
            one(Expr::cmp("r", CmpOp::Gt, Value::Double(0.1))),
            vec![vec![atom(3, CmpOp::GtEq, Value::Real(r))]]
        );
        // NULL literals are never true, even negated; NOT NULL columns settle IS [NOT] NULL.
        assert!(f(Expr::cmp("i", CmpOp::Eq, Value::Null).not()).unwrap().is_false());
        assert!(f(Expr::IsNull("n".into())).unwrap().is_false());
        assert_eq!(one(Expr::IsNotNull("n".into()).or(Expr::IsNull("s".into()))), Vec::<Vec<Atom>>::new());
    }

    #[test]
    fn bad_filters_are_refused_with_the_column_named() {
        let e = f(Expr::cmp("s", CmpOp::Eq, Value::Int(1))).unwrap_err();
        assert!(e.to_string().contains("column `s`"), "{e}");
        let e = f(Expr::cmp("nope", CmpOp::Eq, Value::Int(1))).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
        // (a1 AND a2 ... a12) OR (b1 ... b12) OR ... blows up past the limit.
        let conj = |c: &str| Expr::And((0..12).map(|i| Expr::cmp(c, CmpOp::Eq, Value::Int(i))).collect());
        let e = f(Expr::Or(vec![conj("i"), conj("n"), conj("d")])).unwrap_err();
        assert!(e.to_string().contains("conjunctive normal form"), "{e}");
    }
}
