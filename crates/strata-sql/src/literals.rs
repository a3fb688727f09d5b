//! A statement's text with its literals taken out, so that statements differing only in their
//! values share one plan: `SELECT abalance FROM pgbench_accounts WHERE aid = 40213` becomes the
//! template `... WHERE aid = $1` and the value 40213. The engine keeps the templates of point
//! statements ([`crate::point`]) planned, so a client sending values inside its SQL text (the
//! simple query protocol, a script) does not pay for parsing each statement.
//!
//! Only plain text is taken apart: integer literals (with a unary minus where one stands
//! before them) and standard string literals. Text with anything this scan does not follow
//! (comments, dollar quotes, parameters of its own, escape strings, several statements,
//! numbers with a fraction or an exponent) is left alone, and is parsed as it is.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;

/// The longest text [`template`] takes apart, in bytes.
pub(crate) const MAX_LEN: usize = 1024;

/// A literal taken out of a statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Literal {
    /// An integer, as written (the sign included).
    Integer(String),
    /// A string literal's value (its doubled quotes undone).
    Text(String),
}

/// `sql` as a template with `$1`, `$2`, ... where its literals stood, and the literals in
/// order; `None` if the text holds something the scan does not follow (see the module
/// documentation) or no literal at all.
pub(crate) fn template(sql: &str) -> Option<(String, Vec<Literal>)> {
    // A point statement is short; a long text (a many-row INSERT) is not templated, so the
    // engine never keeps large templates.
    if sql.len() > MAX_LEN {
        return None;
    }
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut literals = Vec::new();
    // The end of what was copied to `out` so far.
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'$' | b'\\' => return None,
            b'-' if b.get(i + 1) == Some(&b'-') => return None,
            b'/' if b.get(i + 1) == Some(&b'*') => return None,
            b';' => {
                // A statement ends here: only blanks may follow.
                if !b[i + 1..].iter().all(u8::is_ascii_whitespace) {
                    return None;
                }
                i += 1;
            }
            b'"' => {
                // A quoted identifier, copied as it is.
                i += 1;
                loop {
                    match b.get(i) {
                        None => return None,
                        Some(b'"') if b.get(i + 1) == Some(&b'"') => i += 2,
                        Some(b'"') => break,
                        Some(_) => i += 1,
                    }
                }
                i += 1;
            }
            b'\'' => {
                // A typed or escape string (`E'..'`, `B'..'`, `DATE'..'`) is left alone.
                if i > 0 && identifier_byte(b[i - 1]) {
                    return None;
                }
                let start = i;
                let mut value = Vec::new();
                i += 1;
                loop {
                    match b.get(i) {
                        None => return None,
                        Some(b'\'') if b.get(i + 1) == Some(&b'\'') => {
                            value.push(b'\'');
                            i += 2;
                        }
                        Some(b'\'') => break,
                        Some(&x) => {
                            value.push(x);
                            i += 1;
                        }
                    }
                }
                i += 1;
                // Adjacent literals (`'a' 'b'`, continued over lines) are one string in SQL.
                if b[i..].iter().take_while(|x| x.is_ascii_whitespace()).count() > 0
                    && b[i..].iter().find(|x| !x.is_ascii_whitespace()) == Some(&b'\'')
                {
                    return None;
                }
                out.push_str(&sql[copied..start]);
                literals.push(Literal::Text(String::from_utf8(value).ok()?));
                out.push('$');
                out.push_str(&literals.len().to_string());
                copied = i;
            }
            b'0'..=b'9' if i == 0 || !(identifier_byte(b[i - 1]) || b[i - 1] == b'.') => {
                let mut end = i;
                while end < b.len() && b[end].is_ascii_digit() {
                    end += 1;
                }
                if end < b.len() && (identifier_byte(b[end]) || b[end] == b'.') {
                    return None;
                }
                let start = unary_minus(b, i).unwrap_or(i);
                if start < copied {
                    return None;
                }
                let digits = &sql[i..end];
                let text = if start < i { format!("-{digits}") } else { digits.to_owned() };
                out.push_str(&sql[copied..start]);
                literals.push(Literal::Integer(text));
                out.push('$');
                out.push_str(&literals.len().to_string());
                copied = end;
                i = end;
            }
            _ => i += 1,
        }
    }
    if literals.is_empty() {
        return None;
    }
    out.push_str(&sql[copied..]);
    Some((out, literals))
}

/// `literal` as a parameter of type `ty`, if the type takes it as written: an integer for an
/// integer type it fits, a string for text.
pub(crate) fn bind(literal: Literal, ty: &DataType) -> Option<ScalarValue> {
    Some(match (literal, ty) {
        (Literal::Integer(n), DataType::Int64) => ScalarValue::Int64(Some(n.parse().ok()?)),
        (Literal::Integer(n), DataType::Int32) => ScalarValue::Int32(Some(n.parse().ok()?)),
        (Literal::Integer(n), DataType::Int16) => ScalarValue::Int16(Some(n.parse().ok()?)),
        (Literal::Integer(n), DataType::Int8) => ScalarValue::Int8(Some(n.parse().ok()?)),
        (Literal::Text(s), DataType::Utf8) => ScalarValue::Utf8(Some(s)),
        _ => return None,
    })
}

/// Whether `c` may be part of a word (a keyword or an unquoted identifier).
fn identifier_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// Where the unary minus before the number at `i` stands, if one does: a `-` that follows an
/// operator, an opening parenthesis or a comma (not an operand, which would make it a binary
/// minus).
fn unary_minus(b: &[u8], i: usize) -> Option<usize> {
    let minus = before_blanks(b, i)?;
    if b[minus] != b'-' {
        return None;
    }
    let prev = before_blanks(b, minus)?;
    matches!(b[prev], b'=' | b'<' | b'>' | b'(' | b',' | b'+' | b'-' | b'*' | b'/').then_some(minus)
}

/// The position of the last non-blank byte before `i`.
fn before_blanks(b: &[u8], i: usize) -> Option<usize> {
    b[..i].iter().rposition(|x| !x.is_ascii_whitespace())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn int(s: &str) -> Literal {
        Literal::Integer(s.into())
    }

    fn text(s: &str) -> Literal {
        Literal::Text(s.into())
    }

    #[test]
    fn literals_come_out_and_everything_else_stays() {
        let t = |sql: &str| template(sql);
        assert_eq!(
            t("SELECT abalance FROM pgbench_accounts WHERE aid = 40213;"),
            Some(("SELECT abalance FROM pgbench_accounts WHERE aid = $1;".into(), vec![int("40213")]))
        );
        assert_eq!(
            t("UPDATE a SET b = b + -2345 WHERE aid = 7"),
            Some(("UPDATE a SET b = b + $1 WHERE aid = $2".into(), vec![int("-2345"), int("7")]))
        );
        assert_eq!(
            t("select x from t1 where k = 'it''s' and n=-3 and m = 4-1"),
            Some((
                "select x from t1 where k = $1 and n=$2 and m = $3-$4".into(),
                vec![text("it's"), int("-3"), int("4"), int("1")]
            ))
        );
        assert_eq!(
            t("SELECT \"col 1\", c2 FROM \"t\"\"9\" WHERE id IN (1, -2)"),
            Some(("SELECT \"col 1\", c2 FROM \"t\"\"9\" WHERE id IN ($1, $2)".into(), vec![int("1"), int("-2")]))
        );
        assert_eq!(t("SELECT 'é', 5"), Some(("SELECT $1, $2".into(), vec![text("é"), int("5")])));
        // Left alone: nothing to take out, or text the scan does not follow.
        let long = format!("INSERT INTO t VALUES {}", vec!["(1, 'a')"; 200].join(", "));
        for sql in [
            "SELECT a FROM t",
            "SELECT a FROM t WHERE k = $1 AND n = 2",
            "SELECT 1 -- comment",
            "SELECT /* 1 */ 2",
            "SELECT 1.5",
            "SELECT 1e3",
            "SELECT .5",
            "SELECT E'a\\nb'",
            "SELECT DATE'2020-01-01'",
            "SELECT $$x$$",
            "SELECT 1; SELECT 2",
            "SELECT 'a' 'b'",
            "SELECT 'unterminated",
            "SELECT \"unterminated",
            "SELECT 0x1F",
            long.as_str(),
        ] {
            assert_eq!(t(sql), None, "{sql}");
        }
    }
}
