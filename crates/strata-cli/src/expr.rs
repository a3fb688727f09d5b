//! `--where` predicates and `--agg` aggregates, evaluated row by row over a core scan.
//!
//! Grammar (keywords case-insensitive):
//! ```text
//! expr    := and (OR and)*
//! and     := unary (AND unary)*
//! unary   := NOT unary | '(' expr ')' | column cmp literal | column IS [NOT] NULL
//!          | column [NOT] BETWEEN literal AND literal
//! cmp     := = | != | <> | < | <= | > | >=
//! literal := number | 'text' ('' escapes a quote) | TRUE | FALSE
//! ```
//! Comparisons follow SQL: a NULL operand makes the comparison unknown, and only rows where the
//! whole predicate is true pass.

use std::cmp::Ordering;

use strata::{Schema, Value};

use crate::json::{parse_hex, to_json};

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Num(String),
    Str(String),
    Op(String),
    LParen,
    RParen,
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let c: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '(' {
            out.push(Tok::LParen);
            i += 1;
        } else if ch == ')' {
            out.push(Tok::RParen);
            i += 1;
        } else if ch == '\'' {
            let mut t = String::new();
            i += 1;
            loop {
                match c.get(i) {
                    None => return Err("unterminated string literal".into()),
                    Some('\'') if c.get(i + 1) == Some(&'\'') => {
                        t.push('\'');
                        i += 2;
                    }
                    Some('\'') => {
                        i += 1;
                        break;
                    }
                    Some(&x) => {
                        t.push(x);
                        i += 1;
                    }
                }
            }
            out.push(Tok::Str(t));
        } else if "=!<>".contains(ch) {
            let two: String = c[i..(i + 2).min(c.len())].iter().collect();
            let op = if ["!=", "<>", "<=", ">="].contains(&two.as_str()) { two } else { ch.to_string() };
            if op == "!" {
                return Err("unexpected `!`".into());
            }
            i += op.len();
            out.push(Tok::Op(op));
        } else if ch.is_ascii_digit() || ((ch == '-' || ch == '.') && c.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            let start = i;
            i += 1;
            while c.get(i).is_some_and(|d| d.is_ascii_alphanumeric() || *d == '.' || *d == '+' || *d == '-') {
                if (c[i] == '+' || c[i] == '-') && !matches!(c[i - 1], 'e' | 'E') {
                    break;
                }
                i += 1;
            }
            out.push(Tok::Num(c[start..i].iter().collect()));
        } else if ch.is_alphanumeric() || ch == '_' || ch == '"' {
            let quoted = ch == '"';
            let start = if quoted { i + 1 } else { i };
            i = start;
            while c.get(i).is_some_and(|d| if quoted { *d != '"' } else { d.is_alphanumeric() || *d == '_' }) {
                i += 1;
            }
            let name: String = c[start..i.min(c.len())].iter().collect();
            if quoted {
                if c.get(i) != Some(&'"') {
                    return Err("unterminated quoted name".into());
                }
                i += 1;
            }
            out.push(Tok::Ident(name));
        } else {
            return Err(format!("unexpected character `{ch}`"));
        }
    }
    Ok(out)
}

/// A literal in a predicate.
#[derive(Debug, Clone, PartialEq)]
pub enum Lit {
    Int(i128),
    Float(f64),
    Str(String),
    Bool(bool),
}

/// A parsed, column-bound predicate.
#[derive(Debug, Clone, PartialEq)]
pub enum Pred {
    /// All of them.
    And(Vec<Pred>),
    /// Any of them.
    Or(Vec<Pred>),
    /// Negation.
    Not(Box<Pred>),
    /// `column op literal`: true when comparing the column with the literal gives the ordering
    /// (or, with the flag set, does not give it).
    Cmp(usize, Ordering, bool, Lit),
    /// `column IS NULL` (false: IS NOT NULL).
    IsNull(usize, bool),
}

struct Parser<'a> {
    t: Vec<Tok>,
    i: usize,
    schema: &'a Schema,
}

impl Parser<'_> {
    fn peek_kw(&self, kw: &str) -> bool {
        matches!(self.t.get(self.i), Some(Tok::Ident(w)) if w.eq_ignore_ascii_case(kw))
    }

    fn expr(&mut self) -> Result<Pred, String> {
        let mut v = vec![self.and()?];
        while self.peek_kw("OR") {
            self.i += 1;
            v.push(self.and()?);
        }
        Ok(if v.len() == 1 { v.remove(0) } else { Pred::Or(v) })
    }

    fn and(&mut self) -> Result<Pred, String> {
        let mut v = vec![self.unary()?];
        while self.peek_kw("AND") {
            self.i += 1;
            v.push(self.unary()?);
        }
        Ok(if v.len() == 1 { v.remove(0) } else { Pred::And(v) })
    }

    fn literal(&mut self) -> Result<Lit, String> {
        let t = self.t.get(self.i).cloned().ok_or("expected a literal at the end")?;
        self.i += 1;
        match t {
            Tok::Num(n) => match n.parse::<i128>() {
                Ok(v) => Ok(Lit::Int(v)),
                Err(_) => n.parse::<f64>().map(Lit::Float).map_err(|_| format!("bad number `{n}`")),
            },
            Tok::Str(s) => Ok(Lit::Str(s)),
            Tok::Ident(w) if w.eq_ignore_ascii_case("TRUE") => Ok(Lit::Bool(true)),
            Tok::Ident(w) if w.eq_ignore_ascii_case("FALSE") => Ok(Lit::Bool(false)),
            other => Err(format!("expected a literal, found {other:?}")),
        }
    }

    fn unary(&mut self) -> Result<Pred, String> {
        if self.peek_kw("NOT") {
            self.i += 1;
            return Ok(Pred::Not(Box::new(self.unary()?)));
        }
        match self.t.get(self.i).cloned() {
            Some(Tok::LParen) => {
                self.i += 1;
                let e = self.expr()?;
                if self.t.get(self.i) != Some(&Tok::RParen) {
                    return Err("expected `)`".into());
                }
                self.i += 1;
                Ok(e)
            }
            Some(Tok::Ident(name)) => {
                self.i += 1;
                let col = self.schema.column_index(&name).ok_or_else(|| format!("unknown column `{name}`"))?;
                if self.peek_kw("IS") {
                    self.i += 1;
                    let not = self.peek_kw("NOT");
                    if not {
                        self.i += 1;
                    }
                    if !self.peek_kw("NULL") {
                        return Err("expected NULL after IS".into());
                    }
                    self.i += 1;
                    return Ok(Pred::IsNull(col, !not));
                }
                let negated = self.peek_kw("NOT");
                if negated {
                    self.i += 1;
                }
                if self.peek_kw("BETWEEN") {
                    self.i += 1;
                    let lo = self.literal()?;
                    if !self.peek_kw("AND") {
                        return Err("expected AND in BETWEEN".into());
                    }
                    self.i += 1;
                    let hi = self.literal()?;
                    let p = Pred::And(vec![
                        Pred::Cmp(col, Ordering::Less, true, lo),
                        Pred::Cmp(col, Ordering::Greater, true, hi),
                    ]);
                    return Ok(if negated { Pred::Not(Box::new(p)) } else { p });
                }
                if negated {
                    return Err("expected BETWEEN after NOT".into());
                }
                let op = match self.t.get(self.i) {
                    Some(Tok::Op(o)) => o.clone(),
                    other => return Err(format!("expected a comparison after `{name}`, found {other:?}")),
                };
                self.i += 1;
                let lit = self.literal()?;
                let p = match op.as_str() {
                    "=" => Pred::Cmp(col, Ordering::Equal, false, lit),
                    "!=" | "<>" => Pred::Cmp(col, Ordering::Equal, true, lit),
                    "<" => Pred::Cmp(col, Ordering::Less, false, lit),
                    ">=" => Pred::Cmp(col, Ordering::Less, true, lit),
                    ">" => Pred::Cmp(col, Ordering::Greater, false, lit),
                    "<=" => Pred::Cmp(col, Ordering::Greater, true, lit),
                    o => return Err(format!("unknown operator `{o}`")),
                };
                Ok(p)
            }
            other => Err(format!("expected a condition, found {other:?}")),
        }
    }
}

/// Parses a predicate against a schema.
pub fn parse_where(text: &str, schema: &Schema) -> Result<Pred, String> {
    let mut p = Parser { t: lex(text)?, i: 0, schema };
    let e = p.expr()?;
    if p.i != p.t.len() {
        return Err(format!("unexpected {:?} after the condition", p.t[p.i]));
    }
    Ok(e)
}

fn compare(v: &Value, lit: &Lit) -> Option<Ordering> {
    let int = |x: i128| match lit {
        Lit::Int(y) => Some(x.cmp(y)),
        Lit::Float(y) => (x as f64).partial_cmp(y),
        _ => None,
    };
    let float = |x: f64| match lit {
        Lit::Int(y) => x.partial_cmp(&(*y as f64)),
        Lit::Float(y) => x.partial_cmp(y),
        _ => None,
    };
    match v {
        Value::Null => None,
        Value::BigInt(x) => int(i128::from(*x)),
        Value::Int(x) => int(i128::from(*x)),
        Value::SmallInt(x) => int(i128::from(*x)),
        Value::TinyInt(x) => int(i128::from(*x)),
        Value::Double(x) => float(*x),
        Value::Real(x) => float(f64::from(*x)),
        Value::Boolean(x) => match lit {
            Lit::Bool(y) => Some(x.cmp(y)),
            _ => None,
        },
        Value::Text(x) => match lit {
            Lit::Str(y) => Some(x.as_str().cmp(y.as_str())),
            _ => None,
        },
        Value::Bytea(x) => match lit {
            Lit::Str(y) => parse_hex(y).map(|b| x.as_slice().cmp(&b)),
            _ => None,
        },
    }
}

/// AND (`decisive` false) or OR (`decisive` true) in three-valued logic: any operand equal to
/// `decisive` decides; otherwise an unknown operand makes the result unknown.
fn connective(v: &[Pred], row: &[Value], decisive: bool) -> Option<bool> {
    let mut unknown = false;
    for p in v {
        match p.eval(row) {
            Some(b) if b == decisive => return Some(decisive),
            None => unknown = true,
            Some(_) => {}
        }
    }
    if unknown {
        None
    } else {
        Some(!decisive)
    }
}

impl Pred {
    /// Three-valued evaluation over a full row in schema order (`None` = unknown).
    pub fn eval(&self, row: &[Value]) -> Option<bool> {
        match self {
            Pred::And(v) => connective(v, row, false),
            Pred::Or(v) => connective(v, row, true),
            Pred::Not(p) => p.eval(row).map(|b| !b),
            Pred::IsNull(c, want_null) => Some(row[*c].is_null() == *want_null),
            Pred::Cmp(c, ord, negate, lit) => compare(&row[*c], lit).map(|o| (o == *ord) != *negate),
        }
    }

    /// Appends the columns the predicate reads.
    pub fn columns(&self, out: &mut Vec<usize>) {
        match self {
            Pred::And(v) | Pred::Or(v) => v.iter().for_each(|p| p.columns(out)),
            Pred::Not(p) => p.columns(out),
            Pred::IsNull(c, _) | Pred::Cmp(c, ..) => out.push(*c),
        }
    }
}

/// One aggregate.
#[derive(Debug, Clone, PartialEq)]
pub struct Agg {
    /// The text it was given as (the output key).
    pub label: String,
    func: Func,
    col: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Func {
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

/// Parses `count(*)`, `count(c)`, `sum(c)`, `min(c)`, `max(c)`, `avg(c)`.
pub fn parse_agg(text: &str, schema: &Schema) -> Result<Agg, String> {
    let t = text.trim();
    let open = t.find('(').ok_or_else(|| format!("bad aggregate `{t}`"))?;
    let inner = t[open + 1..].strip_suffix(')').ok_or_else(|| format!("bad aggregate `{t}`"))?.trim();
    let func = match t[..open].trim().to_ascii_lowercase().as_str() {
        "count" => Func::Count,
        "sum" => Func::Sum,
        "min" => Func::Min,
        "max" => Func::Max,
        "avg" => Func::Avg,
        f => return Err(format!("unknown aggregate `{f}`")),
    };
    let col = if inner == "*" {
        if func != Func::Count {
            return Err(format!("only count takes `*`, not `{t}`"));
        }
        None
    } else {
        let c = schema.column_index(inner).ok_or_else(|| format!("unknown column `{inner}`"))?;
        if matches!(func, Func::Sum | Func::Avg)
            && !schema.columns()[c]
                .ty
                .fixed_width()
                .is_some_and(|_| !matches!(schema.columns()[c].ty, strata::ColumnType::Boolean))
        {
            return Err(format!("{} needs a numeric column, `{inner}` is not", t[..open].trim()));
        }
        Some(c)
    };
    Ok(Agg { label: t.to_owned(), func, col })
}

/// Running state of one aggregate.
#[derive(Debug, Default)]
pub struct AggState {
    count: u64,
    isum: i128,
    fsum: f64,
    float: bool,
    best: Option<Value>,
}

fn num(v: &Value) -> Option<(i128, f64, bool)> {
    Some(match v {
        Value::BigInt(x) => (i128::from(*x), *x as f64, false),
        Value::Int(x) => (i128::from(*x), f64::from(*x), false),
        Value::SmallInt(x) => (i128::from(*x), f64::from(*x), false),
        Value::TinyInt(x) => (i128::from(*x), f64::from(*x), false),
        Value::Double(x) => (0, *x, true),
        Value::Real(x) => (0, f64::from(*x), true),
        _ => return None,
    })
}

fn order(a: &Value, b: &Value) -> Ordering {
    match (num(a), num(b)) {
        (Some((ai, af, afl)), Some((bi, bf, bfl))) => {
            if afl || bfl {
                af.total_cmp(&bf)
            } else {
                ai.cmp(&bi)
            }
        }
        _ => match (a, b) {
            (Value::Text(x), Value::Text(y)) => x.cmp(y),
            (Value::Bytea(x), Value::Bytea(y)) => x.cmp(y),
            (Value::Boolean(x), Value::Boolean(y)) => x.cmp(y),
            _ => Ordering::Equal,
        },
    }
}

impl Agg {
    /// Folds one row (full, schema order) into the state.
    pub fn add(&self, st: &mut AggState, row: &[Value]) {
        let v = match self.col {
            None => {
                st.count += 1;
                return;
            }
            Some(c) => &row[c],
        };
        if v.is_null() {
            return;
        }
        st.count += 1;
        match self.func {
            Func::Count => {}
            Func::Sum | Func::Avg => {
                if let Some((i, f, fl)) = num(v) {
                    st.isum += i;
                    st.fsum += f;
                    st.float |= fl;
                }
            }
            Func::Min | Func::Max => {
                let better = st.best.as_ref().is_none_or(|b| {
                    let o = order(v, b);
                    if self.func == Func::Min {
                        o == Ordering::Less
                    } else {
                        o == Ordering::Greater
                    }
                });
                if better {
                    st.best = Some(v.clone());
                }
            }
        }
    }

    /// The column it reads (`None` for `count(*)`).
    pub fn column(&self) -> Option<usize> {
        self.col
    }

    /// The result as JSON (`null` for sum/min/max/avg over no values).
    pub fn result(&self, st: &AggState) -> serde_json::Value {
        match self.func {
            Func::Count => serde_json::Value::from(st.count),
            _ if st.count == 0 => serde_json::Value::Null,
            Func::Sum if st.float => to_json(&Value::Double(st.fsum)),
            Func::Sum => {
                i64::try_from(st.isum).map_or_else(|_| to_json(&Value::Double(st.isum as f64)), serde_json::Value::from)
            }
            Func::Avg => {
                let total = if st.float { st.fsum } else { st.isum as f64 };
                to_json(&Value::Double(total / st.count as f64))
            }
            Func::Min | Func::Max => st.best.as_ref().map_or(serde_json::Value::Null, to_json),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema_sql::parse_schema;

    fn row(id: i64, a: Option<i32>, s: Option<&str>) -> Vec<Value> {
        vec![Value::BigInt(id), a.map_or(Value::Null, Value::Int), s.map_or(Value::Null, |x| Value::Text(x.into()))]
    }

    #[test]
    fn predicates_follow_sql_semantics() {
        let schema = parse_schema("id BIGINT PRIMARY KEY, a INT, s TEXT").unwrap();
        let p = parse_where("a > 1 AND (s = 'x' OR s IS NULL)", &schema).unwrap();
        assert_eq!(p.eval(&row(1, Some(2), Some("x"))), Some(true));
        assert_eq!(p.eval(&row(1, Some(2), None)), Some(true));
        assert_eq!(p.eval(&row(1, Some(2), Some("y"))), Some(false));
        assert_eq!(p.eval(&row(1, None, Some("x"))), None);
        let b = parse_where("NOT a BETWEEN 2 AND 4 OR s <> 'it''s'", &schema).unwrap();
        assert_eq!(b.eval(&row(1, Some(3), Some("it's"))), Some(false));
        assert_eq!(b.eval(&row(1, Some(5), Some("it's"))), Some(true));
        assert_eq!(parse_where("a >= -1.5", &schema).unwrap().eval(&row(1, Some(-1), None)), Some(true));
        for bad in ["a >", "zz = 1", "a = 1 AND", "(a = 1", "a IS 3", "a ! 3", "s = 'x"] {
            assert!(parse_where(bad, &schema).is_err(), "{bad}");
        }
    }

    #[test]
    fn aggregates_skip_nulls() {
        let schema = parse_schema("id BIGINT PRIMARY KEY, a INT, s TEXT").unwrap();
        let rows = [row(1, Some(2), Some("b")), row(2, None, Some("a")), row(3, Some(5), None)];
        let want = [
            ("count(*)", "3"),
            ("count(a)", "2"),
            ("sum(a)", "7"),
            ("min(s)", "\"a\""),
            ("max(a)", "5"),
            ("avg(a)", "3.5"),
        ];
        for (text, out) in want {
            let a = parse_agg(text, &schema).unwrap();
            let mut st = AggState::default();
            for r in &rows {
                a.add(&mut st, r);
            }
            assert_eq!(a.result(&st).to_string(), out, "{text}");
        }
        assert!(parse_agg("sum(s)", &schema).is_err());
        assert!(parse_agg("median(a)", &schema).is_err());
        assert!(parse_agg("sum(*)", &schema).is_err());
    }
}
