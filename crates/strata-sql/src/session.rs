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

/// `SHOW` of a setting the session itself answers: the isolation level of its block, or its
/// default (see [`crate::Session`]).
pub(crate) fn show_of_session(variable: &[datafusion::sql::sqlparser::ast::Ident]) -> Option<crate::Prepared> {
    let words: Vec<String> = variable.iter().map(|i| i.value.to_ascii_lowercase()).collect();
    let (column, default) = match words.join(" ").as_str() {
        "transaction isolation level" | "transaction_isolation" => ("transaction_isolation", false),
        "default_transaction_isolation" => ("default_transaction_isolation", true),
        _ => return None,
    };
    Some(crate::Prepared::Show { column, default })
}

/// The result of a session's `SHOW`: one text column.
pub(crate) fn show_schema(column: &str) -> datafusion::arrow::datatypes::SchemaRef {
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    std::sync::Arc::new(Schema::new(vec![Field::new(column, DataType::Utf8, false)]))
}

/// What `SHOW variable` answers (the result column's name and the value), for the settings
/// drivers ask about when they connect (SQLAlchemy asks for the isolation level and
/// `standard_conforming_strings`); `None` for any other. (Not the server's version, which
/// pgwire announces at startup as its own, nor the read-only mode, which depends on the block.)
pub(crate) fn show(variable: &[datafusion::sql::sqlparser::ast::Ident]) -> Option<(&'static str, String)> {
    let words: Vec<String> = variable.iter().map(|i| i.value.to_ascii_lowercase()).collect();
    Some(match words.join(" ").as_str() {
        "standard_conforming_strings" => ("standard_conforming_strings", "on".into()),
        "server_encoding" => ("server_encoding", "UTF8".into()),
        "client_encoding" => ("client_encoding", "UTF8".into()),
        "datestyle" => ("DateStyle", "ISO, MDY".into()),
        "timezone" | "time zone" => ("TimeZone", "UTC".into()),
        "intervalstyle" => ("IntervalStyle", "postgres".into()),
        "search_path" => ("search_path", "\"$user\", public".into()),
        "integer_datetimes" => ("integer_datetimes", "on".into()),
        "bytea_output" => ("bytea_output", "hex".into()),
        "max_identifier_length" => ("max_identifier_length", "63".into()),
        "lock_timeout" => ("lock_timeout", "0".into()),
        "statement_timeout" => ("statement_timeout", "0".into()),
        "default_table_access_method" => ("default_table_access_method", "heap".into()),
        _ => return None,
    })
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
