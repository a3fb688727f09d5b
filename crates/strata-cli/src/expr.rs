//! `--where` predicates and `--agg` aggregates, parsed into the engine's scan request
//! ([`strata::scan::Expr`], [`strata::scan::Aggregate`]); the engine evaluates them.
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
//! whole predicate is true pass. BYTEA literals are written as `'\x0a1b'`.

use strata::scan::{AggFunc, Aggregate, CmpOp, Expr};
use strata::{ColumnType, Schema, Value};

use crate::json::parse_hex;

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

/// A literal in a predicate, before it meets its column.
#[derive(Debug, Clone, PartialEq)]
enum Lit {
    Int(i128),
    Float(f64),
    Str(String),
    Bool(bool),
}

struct Parser<'a> {
    t: Vec<Tok>,
    i: usize,
    schema: &'a Schema,
    /// `NOT`s and parentheses open around the current token.
    depth: usize,
}

/// The deepest a predicate may nest (`NOT` and parentheses): the parser recurses once per
/// level, and thousands of levels overflowed its stack.
const MAX_NESTING: usize = 200;

impl Parser<'_> {
    fn peek_kw(&self, kw: &str) -> bool {
        matches!(self.t.get(self.i), Some(Tok::Ident(w)) if w.eq_ignore_ascii_case(kw))
    }

    fn expr(&mut self) -> Result<Expr, String> {
        let mut v = vec![self.and()?];
        while self.peek_kw("OR") {
            self.i += 1;
            v.push(self.and()?);
        }
        Ok(if v.len() == 1 { v.remove(0) } else { Expr::Or(v) })
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut v = vec![self.unary()?];
        while self.peek_kw("AND") {
            self.i += 1;
            v.push(self.unary()?);
        }
        Ok(if v.len() == 1 { v.remove(0) } else { Expr::And(v) })
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

    /// The literal as a value for comparing with column `name` of type `ty`.
    fn value(name: &str, ty: ColumnType, lit: Lit) -> Result<Value, String> {
        Ok(match lit {
            Lit::Int(i) => i64::try_from(i).map_or(Value::Double(i as f64), Value::BigInt),
            Lit::Float(f) => Value::Double(f),
            Lit::Bool(b) => Value::Boolean(b),
            Lit::Str(s) if ty == ColumnType::Bytea => Value::Bytea(
                parse_hex(&s).ok_or_else(|| format!("`{name}` is BYTEA: write its literals as '\\x0a1b'"))?,
            ),
            Lit::Str(s) if ty == ColumnType::Date => Value::Date(
                strata::types::parse_date(&s)
                    .ok_or_else(|| format!("`{name}` is DATE: write its literals as '2026-11-25'"))?,
            ),
            Lit::Str(s) if ty == ColumnType::Timestamp => Value::Timestamp(
                strata::types::parse_timestamp(&s)
                    .ok_or_else(|| format!("`{name}` is TIMESTAMP: write its literals as '2026-11-25 13:45:00'"))?,
            ),
            Lit::Str(s) if ty == ColumnType::TimestampTz => {
                Value::TimestampTz(strata::types::parse_timestamptz(&s).ok_or_else(|| {
                    format!("`{name}` is TIMESTAMPTZ: write its literals as '2026-11-25 13:45:00+00'")
                })?)
            }
            Lit::Str(s) => Value::Text(s),
        })
    }

    /// Runs `f` one nesting level deeper, refusing a predicate nested past [`MAX_NESTING`].
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, String>) -> Result<T, String> {
        if self.depth == MAX_NESTING {
            return Err(format!("the predicate nests deeper than {MAX_NESTING} levels"));
        }
        self.depth += 1;
        let out = f(self);
        self.depth -= 1;
        out
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.peek_kw("NOT") {
            self.i += 1;
            return Ok(Expr::Not(Box::new(self.nested(Self::unary)?)));
        }
        match self.t.get(self.i).cloned() {
            Some(Tok::LParen) => {
                self.i += 1;
                let e = self.nested(Self::expr)?;
                if self.t.get(self.i) != Some(&Tok::RParen) {
                    return Err("expected `)`".into());
                }
                self.i += 1;
                Ok(e)
            }
            Some(Tok::Ident(name)) => {
                self.i += 1;
                let col = self.schema.column_index(&name).ok_or_else(|| format!("unknown column `{name}`"))?;
                let ty = self.schema.columns()[col].ty;
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
                    return Ok(if not { Expr::IsNotNull(name) } else { Expr::IsNull(name) });
                }
                let negated = self.peek_kw("NOT");
                if negated {
                    self.i += 1;
                }
                if self.peek_kw("BETWEEN") {
                    self.i += 1;
                    let lo = Self::value(&name, ty, self.literal()?)?;
                    if !self.peek_kw("AND") {
                        return Err("expected AND in BETWEEN".into());
                    }
                    self.i += 1;
                    let hi = Self::value(&name, ty, self.literal()?)?;
                    let e = Expr::And(vec![Expr::cmp(&name, CmpOp::GtEq, lo), Expr::cmp(&name, CmpOp::LtEq, hi)]);
                    return Ok(if negated { e.not() } else { e });
                }
                if negated {
                    return Err("expected BETWEEN after NOT".into());
                }
                let op = match self.t.get(self.i) {
                    Some(Tok::Op(o)) => o.clone(),
                    other => return Err(format!("expected a comparison after `{name}`, found {other:?}")),
                };
                self.i += 1;
                let op = match op.as_str() {
                    "=" => CmpOp::Eq,
                    "!=" | "<>" => CmpOp::NotEq,
                    "<" => CmpOp::Lt,
                    "<=" => CmpOp::LtEq,
                    ">" => CmpOp::Gt,
                    ">=" => CmpOp::GtEq,
                    o => return Err(format!("unknown operator `{o}`")),
                };
                let v = Self::value(&name, ty, self.literal()?)?;
                Ok(Expr::cmp(&name, op, v))
            }
            other => Err(format!("expected a condition, found {other:?}")),
        }
    }
}

/// Parses a predicate against a schema.
pub fn parse_where(text: &str, schema: &Schema) -> Result<Expr, String> {
    let mut p = Parser { t: lex(text)?, i: 0, schema, depth: 0 };
    let e = p.expr()?;
    if p.i != p.t.len() {
        return Err(format!("unexpected {:?} after the condition", p.t[p.i]));
    }
    Ok(e)
}

/// Parses `count(*)`, `count(c)`, `sum(c)`, `min(c)`, `max(c)`, `avg(c)`; returns the text it was
/// given (the output key) and the aggregate.
pub fn parse_agg(text: &str, schema: &Schema) -> Result<(String, Aggregate), String> {
    let t = text.trim();
    let open = t.find('(').ok_or_else(|| format!("bad aggregate `{t}`"))?;
    let inner = t[open + 1..].strip_suffix(')').ok_or_else(|| format!("bad aggregate `{t}`"))?.trim();
    let func = match t[..open].trim().to_ascii_lowercase().as_str() {
        "count" => AggFunc::Count,
        "sum" => AggFunc::Sum,
        "min" => AggFunc::Min,
        "max" => AggFunc::Max,
        "avg" => AggFunc::Avg,
        f => return Err(format!("unknown aggregate `{f}`")),
    };
    let agg = if inner == "*" {
        if func != AggFunc::Count {
            return Err(format!("only count takes `*`, not `{t}`"));
        }
        Aggregate::count_star()
    } else {
        let c = schema.column_index(inner).ok_or_else(|| format!("unknown column `{inner}`"))?;
        let ty = schema.columns()[c].ty;
        let numeric = ty.fixed_width().is_some() && ty != ColumnType::Boolean;
        if matches!(func, AggFunc::Sum | AggFunc::Avg) && !numeric {
            return Err(format!("{} needs a numeric column, `{inner}` is not", t[..open].trim()));
        }
        Aggregate::new(func, inner)
    };
    Ok((t.to_owned(), agg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema_sql::parse_schema;

    /// Found by replaying the `where_clause` corpus: thousands of nested parentheses (or NOTs)
    /// overflowed the parser's stack and aborted the process. Nesting is held to 200 levels,
    /// refused with an error past them, on a thread with the default stack of spawned threads.
    #[test]
    fn deeply_nested_predicates_are_refused_not_a_stack_overflow() {
        let schema = parse_schema("id BIGINT PRIMARY KEY, a INT").unwrap();
        let parse = move |text: String| {
            let schema = schema.clone();
            std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || parse_where(&text, &schema))
                .unwrap()
                .join()
                .unwrap()
        };
        let deep = |n: usize| format!("{}a = 1{}", "(".repeat(n), ")".repeat(n));
        assert!(parse(deep(MAX_NESTING)).is_ok());
        let err = parse(deep(5000)).unwrap_err();
        assert!(err.contains("nests deeper than 200"), "{err}");
        assert!(parse(format!("{}a = 1", "NOT ".repeat(5000))).unwrap_err().contains("nests deeper"));
    }

    #[test]
    fn predicates_parse_into_engine_expressions() {
        let schema = parse_schema("id BIGINT PRIMARY KEY, a INT, s TEXT, b BYTEA").unwrap();
        let p = parse_where("a > 1 AND (s = 'x' OR s IS NULL)", &schema).unwrap();
        assert_eq!(
            p,
            Expr::And(vec![
                Expr::cmp("a", CmpOp::Gt, Value::BigInt(1)),
                Expr::Or(vec![Expr::cmp("s", CmpOp::Eq, Value::Text("x".into())), Expr::IsNull("s".into())]),
            ])
        );
        let b = parse_where("NOT a BETWEEN 2 AND 4.5 OR s <> 'it''s'", &schema).unwrap();
        assert_eq!(
            b,
            Expr::Or(vec![
                Expr::And(vec![
                    Expr::cmp("a", CmpOp::GtEq, Value::BigInt(2)),
                    Expr::cmp("a", CmpOp::LtEq, Value::Double(4.5))
                ])
                .not(),
                Expr::cmp("s", CmpOp::NotEq, Value::Text("it's".into())),
            ])
        );
        assert_eq!(
            parse_where("b = '\\x0aff'", &schema).unwrap(),
            Expr::cmp("b", CmpOp::Eq, Value::Bytea(vec![10, 255]))
        );
        for bad in ["a >", "zz = 1", "a = 1 AND", "(a = 1", "a IS 3", "a ! 3", "s = 'x", "b = 'zz'"] {
            assert!(parse_where(bad, &schema).is_err(), "{bad}");
        }
    }

    #[test]
    fn aggregates_parse_and_check_their_column() {
        let schema = parse_schema("id BIGINT PRIMARY KEY, a INT, s TEXT").unwrap();
        assert_eq!(parse_agg("count(*)", &schema).unwrap(), ("count(*)".into(), Aggregate::count_star()));
        assert_eq!(parse_agg(" AVG( a ) ", &schema).unwrap(), ("AVG( a )".into(), Aggregate::new(AggFunc::Avg, "a")));
        assert!(parse_agg("sum(s)", &schema).is_err());
        assert!(parse_agg("median(a)", &schema).is_err());
        assert!(parse_agg("sum(*)", &schema).is_err());
        assert!(parse_agg("max(zz)", &schema).is_err());
    }
}
