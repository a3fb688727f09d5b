//! `SET` of session parameters that PostgreSQL drivers send when they connect (pgjdbc sets
//! `extra_float_digits` and `application_name`, others set the client encoding, date style or
//! time zone). strata's output already is what those settings ask for, so a setting that agrees
//! with it is accepted and changes nothing; one that would change behaviour is refused rather
//! than silently ignored.

use datafusion::sql::sqlparser::ast::{Expr, Set, Value as SqlValue};

use crate::SqlError;

/// Checks a `SET` statement; `Ok` means it is accepted (and has no effect).
pub(crate) fn check(set: &Set) -> Result<(), SqlError> {
    match set {
        Set::SingleAssignment { variable, values, .. } => {
            let name = variable.to_string().to_ascii_lowercase();
            let value = match values.as_slice() {
                [v] => text(v),
                _ => values.iter().map(text).collect::<Vec<_>>().join(", "),
            };
            accept(&name, &value)
        }
        Set::SetTimeZone { value, .. } => accept("timezone", &text(value)),
        Set::SetNames { charset_name, .. } => accept("client_encoding", &charset_name.value),
        other => Err(SqlError::unsupported(format!("{other}"))),
    }
}

/// A SET value as text: string literals unquoted, anything else as written.
fn text(e: &Expr) -> String {
    match e {
        Expr::Value(v) => match &v.value {
            SqlValue::SingleQuotedString(s) | SqlValue::DoubleQuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        Expr::Identifier(i) => i.value.clone(),
        other => other.to_string(),
    }
}

fn accept(name: &str, value: &str) -> Result<(), SqlError> {
    let v = value.trim().to_ascii_lowercase();
    let ok = match name {
        // Labels and verbosity: no effect on results.
        "application_name" | "client_min_messages" => true,
        // Floats are always sent in their shortest exact form, which is what 1 and above ask for.
        "extra_float_digits" => v.parse::<i32>().is_ok_and(|d| d >= 1),
        "client_encoding" => matches!(v.as_str(), "utf8" | "utf-8" | "unicode"),
        "datestyle" => v.split(',').any(|p| p.trim() == "iso"),
        "timezone" | "time zone" => matches!(v.as_str(), "utc" | "gmt" | "etc/utc" | "z" | "+00:00" | "0"),
        "standard_conforming_strings" => matches!(v.as_str(), "on" | "true"),
        "bytea_output" => v == "hex",
        "intervalstyle" => v == "postgres",
        "search_path" => v.split(',').all(|p| matches!(p.trim(), "public" | "\"$user\"" | "$user")),
        "statement_timeout" | "lock_timeout" | "idle_in_transaction_session_timeout" => v == "0",
        _ => {
            return Err(SqlError::unsupported(format!(
                "SET {name}: strata accepts only session settings that match its behaviour (application_name, \
                 extra_float_digits, client_encoding UTF8, DateStyle ISO, TimeZone UTC, ...)"
            )))
        }
    };
    if ok {
        Ok(())
    } else {
        Err(SqlError::unsupported(format!("SET {name} = {value}: strata works only with its own setting of {name}")))
    }
}
