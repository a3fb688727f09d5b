//! PostgreSQL's `to_char(timestamp, pattern)` on DataFusion's `to_char`, which takes chrono's
//! `strftime` patterns: `to_char(now(), 'YYYY')` would print `YYYY`. Before planning, a literal
//! PostgreSQL pattern is translated into chrono's (`YYYY-MM-DD HH24:MI` into
//! `%Y-%m-%d %H:%M`); a pattern with a field this translation does not know, or a pattern that
//! is not a literal, is refused (0A000) rather than printed wrong.
//!
//! Fields taken: `YYYY`, `YY`, `MM`, `DD`, `DDD`, `HH24`, `HH12`, `HH`, `MI`, `SS`, `MS`, `US`
//! (also in lower case), `AM`/`PM` (`am`/`pm` in lower case), `Mon` and `Dy` (English
//! abbreviations), and with the `FM` prefix (no padding) `FMMonth` and `FMDay` and every numeric
//! field. Text in double quotes is copied; other characters that are not letters are copied.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, ObjectNamePart, Statement,
    Value as SqlValue,
};

use crate::error::SqlError;

/// A field: its PostgreSQL spelling, chrono's, and chrono's without padding (`None` where
/// the field is not padded, or takes no `FM`).
const FIELDS: &[(&str, &str, Option<&str>)] = &[
    ("HH24", "%H", Some("%-H")),
    ("hh24", "%H", Some("%-H")),
    ("HH12", "%I", Some("%-I")),
    ("hh12", "%I", Some("%-I")),
    ("YYYY", "%Y", None),
    ("yyyy", "%Y", None),
    ("DDD", "%j", Some("%-j")),
    ("ddd", "%j", Some("%-j")),
    ("Mon", "%b", None),
    ("Dy", "%a", None),
    ("YY", "%y", None),
    ("yy", "%y", None),
    ("MM", "%m", Some("%-m")),
    ("mm", "%m", Some("%-m")),
    ("DD", "%d", Some("%-d")),
    ("dd", "%d", Some("%-d")),
    ("HH", "%I", Some("%-I")),
    ("hh", "%I", Some("%-I")),
    ("MI", "%M", Some("%-M")),
    ("mi", "%M", Some("%-M")),
    ("SS", "%S", Some("%-S")),
    ("ss", "%S", Some("%-S")),
    ("MS", "%3f", None),
    ("ms", "%3f", None),
    ("US", "%6f", None),
    ("us", "%6f", None),
    ("AM", "%p", None),
    ("PM", "%p", None),
    ("am", "%P", None),
    ("pm", "%P", None),
];

/// Fields PostgreSQL pads to a width chrono cannot (so only taken with `FM`).
const FILL_ONLY: &[(&str, &str)] = &[("Month", "%B"), ("Day", "%A")];

fn refused(pattern: &str, why: &str) -> SqlError {
    SqlError::unsupported(format!(
        "to_char pattern '{pattern}': {why}; strata takes YYYY, YY, MM, DD, DDD, HH24, HH12, HH, MI, SS, MS, US, \
         AM/PM, Mon, Dy, FMMonth, FMDay, the FM prefix, and text in double quotes"
    ))
}

/// `pattern` (PostgreSQL's `to_char` template) as chrono's format.
pub(crate) fn chrono_pattern(pattern: &str) -> Result<String, SqlError> {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut rest = pattern;
    while let Some(c) = rest.chars().next() {
        if c == '"' {
            let Some(end) = rest[1..].find('"') else { return Err(refused(pattern, "an unterminated quote")) };
            let text = &rest[1..1 + end];
            if text.contains('\\') {
                return Err(refused(pattern, "a backslash in quoted text"));
            }
            out.push_str(&text.replace('%', "%%"));
            rest = &rest[end + 2..];
            continue;
        }
        let (fill, field) = match rest.strip_prefix("FM").or_else(|| rest.strip_prefix("fm")) {
            Some(after) => (true, after),
            None => (false, rest),
        };
        if field.starts_with("SSSS") || field.starts_with("ssss") {
            return Err(refused(pattern, "the field SSSS is not supported"));
        }
        if let Some(&(name, chrono)) = FILL_ONLY.iter().find(|(name, _)| field.starts_with(name)) {
            if !fill {
                return Err(refused(pattern, &format!("{name} pads to 9 characters (write FM{name})")));
            }
            out.push_str(chrono);
            rest = &field[name.len()..];
            continue;
        }
        if let Some(&(name, chrono, unpadded)) = FIELDS.iter().find(|(name, ..)| field.starts_with(name)) {
            out.push_str(if fill { unpadded.unwrap_or(chrono) } else { chrono });
            rest = &field[name.len()..];
            continue;
        }
        if fill || c.is_alphabetic() || c == '\\' {
            let word: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
            return Err(refused(pattern, &format!("the field {word} is not supported")));
        }
        if c == '%' {
            out.push_str("%%");
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    Ok(out)
}

/// Translates the pattern of every `to_char` call in `stmt` (see the module documentation).
pub(crate) fn translate(stmt: &mut Statement) -> Result<(), SqlError> {
    let mut failed = None;
    let _ = visit_expressions_mut(stmt, |e| {
        let Expr::Function(f) = e else { return ControlFlow::Continue(()) };
        let is_to_char = match f.name.0.as_slice() {
            [ObjectNamePart::Identifier(n)] => n.value.eq_ignore_ascii_case("to_char"),
            [ObjectNamePart::Identifier(s), ObjectNamePart::Identifier(n)] => {
                s.value.eq_ignore_ascii_case("pg_catalog") && n.value.eq_ignore_ascii_case("to_char")
            }
            _ => false,
        };
        if !is_to_char {
            return ControlFlow::Continue(());
        }
        let FunctionArguments::List(list) = &mut f.args else { return ControlFlow::Continue(()) };
        let pattern = match list.args.get_mut(1) {
            Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(v)))) => match &mut v.value {
                SqlValue::SingleQuotedString(s) => s,
                _ => {
                    failed = Some(SqlError::unsupported("to_char takes its pattern as a string literal"));
                    return ControlFlow::Break(());
                }
            },
            _ => {
                failed = Some(SqlError::unsupported("to_char takes a value and a pattern given as a string literal"));
                return ControlFlow::Break(());
            }
        };
        match chrono_pattern(pattern) {
            Ok(p) => *pattern = p,
            Err(e) => {
                failed = Some(e);
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    failed.map_or(Ok(()), Err)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn postgresql_patterns_become_chrono_patterns_or_are_refused() {
        for (pg, chrono) in [
            ("YYYY-MM-DD HH24:MI:SS.MS", "%Y-%m-%d %H:%M:%S.%3f"),
            ("yyyy/mm/dd hh12:mi am", "%Y/%m/%d %I:%M %P"),
            ("FMDD FMMonth YYYY, Dy", "%-d %B %Y, %a"),
            ("Mon DDD US PM", "%b %j %6f %p"),
            ("YYYY\"T\"HH24 \"100%\"", "%YT%H 100%%"),
            ("FMHH:FMMI 50% -", "%-I:%-M 50%% -"),
            ("", ""),
        ] {
            assert_eq!(chrono_pattern(pg).unwrap(), chrono, "{pg}");
        }
        for pg in
            ["Q", "Month", "Day", "MON", "WW", "YYYY-Q", "\"open", "FM", "FMX", "TZ", "Y", "HH24\\", "D", "SSSS", "YYY"]
        {
            let e = chrono_pattern(pg).unwrap_err();
            assert_eq!(e.kind.sqlstate(), "0A000", "{pg}: {e}");
            assert!(e.message.contains("to_char pattern"), "{pg}: {e}");
        }
    }
}
