//! Parses the SQL-like column lists users type for `create-table`:
//! `id BIGINT PRIMARY KEY, a INT NOT NULL, s TEXT` or `a INT, b TEXT, PRIMARY KEY (a, b)`.

use strata::{Column, ColumnType, Schema};

fn tokens(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for ch in s.chars() {
        match ch {
            '(' | ')' | ',' => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                out.push(ch.to_string());
            }
            c if c.is_whitespace() => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c if c.is_alphanumeric() || c == '_' => cur.push(c),
            c => return Err(format!("unexpected character `{c}` in schema")),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

/// A column type by its SQL name (case-insensitive).
pub fn column_type(name: &str) -> Option<ColumnType> {
    Some(match name.to_ascii_uppercase().as_str() {
        "BIGINT" | "INT8" => ColumnType::BigInt,
        "INT" | "INTEGER" | "INT4" => ColumnType::Int,
        "SMALLINT" | "INT2" => ColumnType::SmallInt,
        "TINYINT" => ColumnType::TinyInt,
        "DOUBLE" | "FLOAT8" | "FLOAT" => ColumnType::Double,
        "REAL" | "FLOAT4" => ColumnType::Real,
        "BOOLEAN" | "BOOL" => ColumnType::Boolean,
        "TEXT" | "VARCHAR" => ColumnType::Text,
        "BYTEA" | "BLOB" => ColumnType::Bytea,
        "DATE" => ColumnType::Date,
        "TIMESTAMP" => ColumnType::Timestamp,
        "TIMESTAMPTZ" => ColumnType::TimestampTz,
        _ => return None,
    })
}

fn is(tok: Option<&String>, word: &str) -> bool {
    tok.is_some_and(|t| t.eq_ignore_ascii_case(word))
}

/// Parses a column list with its primary key into a schema.
pub fn parse_schema(text: &str) -> Result<Schema, String> {
    let toks = tokens(text)?;
    let mut i = 0;
    let mut columns: Vec<Column> = Vec::new();
    let mut key: Vec<String> = Vec::new();
    let mut table_key = false;
    while i < toks.len() {
        if is(toks.get(i), "PRIMARY") && is(toks.get(i + 1), "KEY") {
            if table_key {
                return Err("PRIMARY KEY (...) is given twice".into());
            }
            table_key = true;
            i += 2;
            if toks.get(i).map(String::as_str) != Some("(") {
                return Err("expected `(` after PRIMARY KEY".into());
            }
            i += 1;
            loop {
                let name = toks.get(i).ok_or("unterminated PRIMARY KEY (...)")?;
                if name == ")" || name == "," || name == "(" {
                    return Err("expected a column name in PRIMARY KEY (...)".into());
                }
                key.push(name.clone());
                i += 1;
                match toks.get(i).map(String::as_str) {
                    Some(",") => i += 1,
                    Some(")") => {
                        i += 1;
                        break;
                    }
                    _ => return Err("expected `,` or `)` in PRIMARY KEY (...)".into()),
                }
            }
        } else {
            let name = toks[i].clone();
            if name == "," || name == "(" || name == ")" {
                return Err(format!("expected a column name, found `{name}`"));
            }
            let ty_name = toks.get(i + 1).ok_or_else(|| format!("column `{name}` has no type"))?;
            let ty = column_type(ty_name).ok_or_else(|| format!("column `{name}`: unknown type `{ty_name}`"))?;
            i += 2;
            if ty == ColumnType::Double && is(toks.get(i), "PRECISION") {
                i += 1;
            }
            let mut col = Column::new(name.clone(), ty);
            loop {
                if is(toks.get(i), "NOT") && is(toks.get(i + 1), "NULL") {
                    col.nullable = false;
                    i += 2;
                } else if is(toks.get(i), "NULL") {
                    i += 1;
                } else if is(toks.get(i), "PRIMARY") && is(toks.get(i + 1), "KEY") {
                    key.push(name.clone());
                    i += 2;
                } else {
                    break;
                }
            }
            columns.push(col);
        }
        match toks.get(i).map(String::as_str) {
            None => break,
            Some(",") if i + 1 < toks.len() => i += 1,
            Some(",") => return Err("expected a column after the last `,`".into()),
            Some(t) => return Err(format!("unexpected `{t}` in schema")),
        }
    }
    if table_key && key.len() != key.iter().collect::<std::collections::HashSet<_>>().len() {
        return Err("a column appears twice in the primary key".into());
    }
    let key_refs: Vec<&str> = key.iter().map(String::as_str).collect();
    Schema::new(columns, &key_refs).map_err(|e| e.to_string())
}

/// Renders a schema back into the same text form.
pub fn schema_text(s: &Schema) -> String {
    let mut parts: Vec<String> = s
        .columns()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut t = format!("{} {}", c.name, c.ty.name());
            if !c.nullable && !s.primary_key().contains(&i) {
                t.push_str(" NOT NULL");
            }
            t
        })
        .collect();
    let key: Vec<&str> = s.primary_key().iter().map(|&k| s.columns()[k].name.as_str()).collect();
    parts.push(format!("PRIMARY KEY ({})", key.join(", ")));
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_inline_and_table_keys() {
        let s = parse_schema("id BIGINT PRIMARY KEY, a INT NOT NULL, s text, d DOUBLE PRECISION").unwrap();
        assert_eq!(s.primary_key(), &[0]);
        assert!(!s.columns()[1].nullable && s.columns()[2].nullable);
        assert_eq!(s.columns()[3].ty, ColumnType::Double);
        let c = parse_schema("a INT, b TEXT, v BYTEA, PRIMARY KEY (b, a)").unwrap();
        assert_eq!(c.primary_key(), &[1, 0]);
        assert_eq!(parse_schema(&schema_text(&c)).unwrap(), c);
    }

    #[test]
    fn rejects_bad_text_with_a_reason() {
        for (bad, why) in [
            ("id BIGINT", "primary key"),
            ("id BIGNUM PRIMARY KEY", "unknown type"),
            ("id BIGINT PRIMARY KEY,", "expected"),
            ("a INT, PRIMARY KEY (a", "PRIMARY KEY"),
            ("a INT; drop", "unexpected character"),
            ("a INT PRIMARY KEY, a TEXT", "duplicate"),
        ] {
            let e = parse_schema(bad).unwrap_err();
            assert!(e.to_lowercase().contains(&why.to_lowercase()), "{bad}: {e}");
        }
    }
}
