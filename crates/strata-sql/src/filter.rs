//! From DataFusion's filter expressions to strata's ([`strata::scan::Expr`]), and from there to
//! what a scan can use beyond the filter itself: a key range to read and a primary-key point.
//!
//! A filter translates when it is made of column-literal comparisons, `IS [NOT] NULL`,
//! `BETWEEN`, `IN (literals)`, boolean columns, `AND`, `OR` and `NOT`, over columns whose values
//! compare the same way in strata as in DataFusion. Casts DataFusion's type coercion puts around
//! a column are looked through when they widen (an INT column compared as BIGINT), since strata
//! compares numbers by value. Everything else stays with DataFusion.

use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator};
use strata::scan::{CmpOp, Expr as SExpr, Filter};
use strata::{ColumnType, Schema, Value};

/// The strata value of a literal, if it has one (`Value::Null` for a typed NULL).
pub(crate) fn scalar_value(v: &ScalarValue) -> Option<Value> {
    if v.is_null() {
        return Some(Value::Null);
    }
    Some(match v {
        ScalarValue::Int64(Some(x)) => Value::BigInt(*x),
        ScalarValue::Int32(Some(x)) => Value::Int(*x),
        ScalarValue::Int16(Some(x)) => Value::SmallInt(*x),
        ScalarValue::Int8(Some(x)) => Value::TinyInt(*x),
        ScalarValue::UInt8(Some(x)) => Value::SmallInt(i16::from(*x)),
        ScalarValue::UInt16(Some(x)) => Value::Int(i32::from(*x)),
        ScalarValue::UInt32(Some(x)) => Value::BigInt(i64::from(*x)),
        ScalarValue::UInt64(Some(x)) => Value::BigInt(i64::try_from(*x).ok()?),
        ScalarValue::Float64(Some(x)) => Value::Double(*x),
        ScalarValue::Float32(Some(x)) => Value::Real(*x),
        ScalarValue::Boolean(Some(x)) => Value::Boolean(*x),
        ScalarValue::Date32(Some(x)) => Value::Date(*x),
        ScalarValue::TimestampMicrosecond(Some(x), None) => Value::Timestamp(*x),
        // Arrow keeps instants as UTC microseconds whatever zone the type names.
        ScalarValue::TimestampMicrosecond(Some(x), Some(_)) => Value::TimestampTz(*x),
        ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)) => {
            Value::Text(s.clone())
        }
        ScalarValue::Binary(Some(b)) | ScalarValue::LargeBinary(Some(b)) | ScalarValue::BinaryView(Some(b)) => {
            Value::Bytea(b.clone())
        }
        _ => return None,
    })
}

/// `v` as a value of column type `ty`, when it is exactly representable.
pub(crate) fn coerce(v: &Value, ty: ColumnType) -> Option<Value> {
    let int = match v {
        Value::BigInt(x) => Some(*x),
        Value::Int(x) => Some(i64::from(*x)),
        Value::SmallInt(x) => Some(i64::from(*x)),
        Value::TinyInt(x) => Some(i64::from(*x)),
        _ => None,
    };
    Some(match (ty, int) {
        (ColumnType::BigInt, Some(x)) => Value::BigInt(x),
        (ColumnType::Int, Some(x)) => Value::Int(i32::try_from(x).ok()?),
        (ColumnType::SmallInt, Some(x)) => Value::SmallInt(i16::try_from(x).ok()?),
        (ColumnType::TinyInt, Some(x)) => Value::TinyInt(i8::try_from(x).ok()?),
        _ if v.has_type(ty) => v.clone(),
        (ColumnType::Double, _) => match v {
            Value::Real(x) => Value::Double(f64::from(*x)),
            _ => return None,
        },
        _ => return None,
    })
}

/// Whether a value of `from` converts to `to` without changing how it compares.
fn widens(from: ColumnType, to: &datafusion::arrow::datatypes::DataType) -> bool {
    use datafusion::arrow::datatypes::DataType as D;
    let rank = |t: &D| match t {
        D::Int8 => Some(1),
        D::Int16 => Some(2),
        D::Int32 => Some(3),
        D::Int64 => Some(4),
        _ => None,
    };
    let from_arrow = strata::scan::arrow_type(from);
    match (rank(&from_arrow), rank(to)) {
        (Some(a), Some(b)) => a <= b,
        // Integers up to 32 bits and REAL are exact as DOUBLE.
        (Some(a), None) => *to == D::Float64 && a <= 3,
        (None, _) => from_arrow == *to || (from == ColumnType::Real && *to == D::Float64),
    }
}

/// The table column an expression reads, looking through widening casts.
fn column<'a>(e: &'a Expr, schema: &Schema) -> Option<&'a str> {
    match e {
        Expr::Column(c) => schema.column_index(&c.name).map(|_| c.name.as_str()),
        Expr::Cast(c) => {
            let name = column(&c.expr, schema)?;
            let ty = schema.columns()[schema.column_index(name)?].ty;
            widens(ty, c.field.data_type()).then_some(name)
        }
        _ => None,
    }
}

fn literal(e: &Expr) -> Option<Value> {
    match e {
        Expr::Literal(v, _) => scalar_value(v),
        _ => None,
    }
}

fn cmp_op(op: Operator) -> Option<CmpOp> {
    Some(match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::NotEq,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::LtEq,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::GtEq,
        _ => return None,
    })
}

fn flipped(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::LtEq => CmpOp::GtEq,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::GtEq => CmpOp::LtEq,
        o => o,
    }
}

/// The strata expression of a DataFusion filter over `schema`, if it has one.
pub(crate) fn translate(e: &Expr, schema: &Schema) -> Option<SExpr> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
            Some(translate(left, schema)?.and(translate(right, schema)?))
        }
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Or, right }) => {
            Some(translate(left, schema)?.or(translate(right, schema)?))
        }
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let op = cmp_op(*op)?;
            if let (Some(c), Some(v)) = (column(left, schema), literal(right)) {
                Some(SExpr::cmp(c, op, v))
            } else if let (Some(v), Some(c)) = (literal(left), column(right, schema)) {
                Some(SExpr::cmp(c, flipped(op), v))
            } else {
                None
            }
        }
        Expr::Not(inner) => Some(translate(inner, schema)?.not()),
        Expr::IsNull(inner) => Some(SExpr::IsNull(column(inner, schema)?.to_string())),
        Expr::IsNotNull(inner) => Some(SExpr::IsNotNull(column(inner, schema)?.to_string())),
        Expr::Between(Between { expr, negated, low, high }) => {
            let c = column(expr, schema)?;
            let range =
                SExpr::And(vec![SExpr::cmp(c, CmpOp::GtEq, literal(low)?), SExpr::cmp(c, CmpOp::LtEq, literal(high)?)]);
            Some(if *negated { range.not() } else { range })
        }
        Expr::InList(l) => {
            let c = column(&l.expr, schema)?;
            let any =
                SExpr::Or(l.list.iter().map(|v| Some(SExpr::cmp(c, CmpOp::Eq, literal(v)?))).collect::<Option<_>>()?);
            Some(if l.negated { any.not() } else { any })
        }
        // Constants, which the simplifier leaves behind (`a IN (NULL, 1)` becomes `NULL OR a = 1`),
        // as conditions on the first key column, which is never NULL: TRUE is `IS NOT NULL`,
        // FALSE `IS NULL`, and unknown a comparison with NULL, which strata never takes as
        // true, negated or not (three-valued logic).
        Expr::Literal(v, _) => {
            let key = &schema.columns()[*schema.primary_key().first()?].name;
            match v {
                ScalarValue::Boolean(Some(true)) => Some(SExpr::IsNotNull(key.clone())),
                ScalarValue::Boolean(Some(false)) => Some(SExpr::IsNull(key.clone())),
                ScalarValue::Boolean(None) | ScalarValue::Null => Some(SExpr::cmp(key, CmpOp::Eq, Value::Null)),
                _ => None,
            }
        }
        Expr::Column(_) => {
            let c = column(e, schema)?;
            let ty = schema.columns()[schema.column_index(c)?].ty;
            (ty == ColumnType::Boolean).then(|| SExpr::cmp(c, CmpOp::Eq, Value::Boolean(true)))
        }
        _ => None,
    }
}

/// The strata expression of `e` when strata applies it exactly: it translates and strata
/// accepts the translation.
pub(crate) fn exact(table: &str, e: &Expr, schema: &Schema) -> Option<SExpr> {
    translate(e, schema).filter(|s| Filter::new(table, schema, s).is_ok())
}

/// What the conjuncts of a filter say about the primary key.
#[derive(Debug, Default)]
pub(crate) struct KeyBounds {
    /// Equalities on key columns, by key position.
    eq: Vec<Option<Value>>,
    /// Bounds on the first key column not fixed by an equality: (value, inclusive).
    lower: Option<Value>,
    upper: Option<Value>,
}

impl KeyBounds {
    /// Collects the key conditions among `conjuncts` (each already known to translate).
    pub(crate) fn of(conjuncts: &[SExpr], schema: &Schema) -> KeyBounds {
        let key = schema.primary_key();
        let mut b = KeyBounds { eq: vec![None; key.len()], ..Default::default() };
        for c in conjuncts {
            if let SExpr::Cmp { column, op: CmpOp::Eq, value } = c {
                if let Some(pos) = key.iter().position(|&k| schema.columns()[k].name == *column) {
                    if let Some(v) = coerce(value, schema.columns()[key[pos]].ty) {
                        b.eq[pos] = Some(v);
                    }
                }
            }
        }
        // The first key column without an equality may be bounded by range comparisons. Bounds
        // are kept inclusive: the range read is a superset, the filter does the rest.
        let prefix = b.eq.iter().take_while(|v| v.is_some()).count();
        if prefix < key.len() {
            let col = &schema.columns()[key[prefix]];
            for c in conjuncts {
                if let SExpr::Cmp { column, op, value } = c {
                    if *column != col.name {
                        continue;
                    }
                    let Some(v) = coerce(value, col.ty) else { continue };
                    if col.ty == ColumnType::Double || col.ty == ColumnType::Real {
                        continue;
                    }
                    match op {
                        CmpOp::Gt | CmpOp::GtEq => b.lower = Some(v),
                        CmpOp::Lt | CmpOp::LtEq => b.upper = Some(v),
                        _ => {}
                    }
                }
            }
        }
        b
    }

    /// The whole key, when every key column is fixed by an equality.
    pub(crate) fn point(&self) -> Option<Vec<Value>> {
        self.eq.iter().cloned().collect()
    }

    /// The key range the conditions allow (every key when they say nothing).
    pub(crate) fn range(&self) -> strata::KeyRange {
        use std::ops::Bound;
        let prefix: Vec<Value> = self.eq.iter().map_while(|v| v.clone()).collect();
        let with = |v: &Option<Value>| {
            v.as_ref().map(|v| {
                let mut k = prefix.clone();
                k.push(v.clone());
                k
            })
        };
        let start = match (with(&self.lower), prefix.is_empty()) {
            (Some(k), _) => Bound::Included(k),
            (None, false) => Bound::Included(prefix.clone()),
            (None, true) => Bound::Unbounded,
        };
        let end = match (with(&self.upper), prefix.is_empty()) {
            (Some(k), _) => Bound::Included(k),
            (None, false) => Bound::Included(prefix.clone()),
            (None, true) => Bound::Unbounded,
        };
        strata::KeyRange { start, end }
    }
}
