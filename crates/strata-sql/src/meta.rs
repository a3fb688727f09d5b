//! What SQL keeps about a table beyond the engine's schema, in the table's annotations
//! ([`strata::TableOptions::annotations`]):
//!
//! - `sql.hidden`: the hidden row id column of a table created without a primary key. The
//!   column ([`ROWID`], BIGINT) is the table's key; its values come from the table's sequence
//!   [`ROWID_SEQUENCE`], so a row id is never reused. Queries do not see it (`SELECT *`, the
//!   catalog); the statements changing the table find rows by it.
//! - `sql.type.COLUMN`: a TEXT column's declared type when it has a length, `character(N)`
//!   (blank-padded: trailing blanks are not significant and are not kept) or `character
//!   varying(N)`; the engine enforces the length itself ([`strata::Column::max_chars`]).

use strata::{Table, Value};

use crate::error::{ErrorKind, SqlError};

/// The annotation naming a table's hidden row id column.
pub(crate) const HIDDEN: &str = "sql.hidden";
/// The name of the hidden row id column.
pub(crate) const ROWID: &str = "_strata_rowid";
/// The sequence hidden row ids come from.
pub(crate) const ROWID_SEQUENCE: &str = "rowid";
/// The prefix of a column's declared-type annotation.
pub(crate) const TYPE_PREFIX: &str = "sql.type.";

/// The table's hidden columns, as indices of its schema.
pub(crate) fn hidden_columns(table: &Table) -> Vec<usize> {
    table.options().annotations.get(HIDDEN).and_then(|name| table.schema().column_index(name)).into_iter().collect()
}

/// The columns SQL sees, in schema order.
pub(crate) fn visible_columns(table: &Table) -> Vec<usize> {
    let hidden = hidden_columns(table);
    (0..table.schema().columns().len()).filter(|c| !hidden.contains(c)).collect()
}

/// Whether `table`, a handle taken when a statement was planned, is still the table of its
/// name: not dropped, nor dropped and created again, nor rebuilt by `ALTER TABLE` since.
pub(crate) fn is_current(db: &strata::Db, table: &Table) -> bool {
    db.table(table.name()).is_ok_and(|now| std::ptr::eq(now.info(), table.info()))
}

/// How a TEXT column with a declared length takes values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextKind {
    /// `CHAR(n)`: trailing blanks are dropped, then at most `n` characters.
    Char(u32),
    /// `VARCHAR(n)`: at most `n` characters; blanks beyond `n` are cut off.
    Varchar(u32),
}

impl TextKind {
    /// The declared type as PostgreSQL names it.
    pub(crate) fn type_name(self) -> String {
        match self {
            TextKind::Char(n) => format!("character({n})"),
            TextKind::Varchar(n) => format!("character varying({n})"),
        }
    }

    fn parse(text: &str) -> Option<TextKind> {
        let num = |s: &str| s.strip_suffix(')')?.parse::<u32>().ok();
        if let Some(rest) = text.strip_prefix("character varying(") {
            return num(rest).map(TextKind::Varchar);
        }
        text.strip_prefix("character(").and_then(num).map(TextKind::Char)
    }
}

/// The declared text kind of schema column `col`, if it has one.
pub(crate) fn text_kind(table: &Table, col: usize) -> Option<TextKind> {
    let name = &table.schema().columns().get(col)?.name;
    TextKind::parse(table.options().annotations.get(&format!("{TYPE_PREFIX}{name}"))?)
}

/// The text kinds of the table's columns by schema index (`None` for the others); empty when
/// no column has one.
pub(crate) fn text_kinds(table: &Table) -> Vec<Option<TextKind>> {
    let n = table.schema().columns().len();
    let kinds: Vec<Option<TextKind>> = (0..n).map(|c| text_kind(table, c)).collect();
    if kinds.iter().all(Option::is_none) {
        Vec::new()
    } else {
        kinds
    }
}

/// `v` as column `col` (of kind `kind`) stores it, as PostgreSQL assigns text to CHAR(n) and
/// VARCHAR(n): CHAR drops trailing blanks; text longer than `n` characters is refused (22001),
/// unless everything past `n` is blanks, which are cut off.
pub(crate) fn fit_text(kind: TextKind, column: &str, v: Value) -> Result<Value, SqlError> {
    let Value::Text(s) = v else { return Ok(v) };
    let (n, s) = match kind {
        TextKind::Char(n) => (n as usize, s.trim_end_matches(' ').to_owned()),
        TextKind::Varchar(n) => (n as usize, s),
    };
    if s.len() <= n {
        return Ok(Value::Text(s));
    }
    match s.char_indices().nth(n) {
        None => Ok(Value::Text(s)),
        Some((cut, _)) if s[cut..].bytes().all(|b| b == b' ') => Ok(Value::Text(s[..cut].to_owned())),
        Some(_) => Err(SqlError::new(
            ErrorKind::StringTooLong,
            format!("value too long for type {} (column {column})", kind.type_name()),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn text_fits_char_and_varchar_as_in_postgresql() {
        let t = |s: &str| Value::Text(s.into());
        let c3 = TextKind::Char(3);
        let v3 = TextKind::Varchar(3);
        assert_eq!(fit_text(c3, "c", t("ab  ")).unwrap(), t("ab"));
        assert_eq!(fit_text(c3, "c", t("abc    ")).unwrap(), t("abc"));
        assert_eq!(fit_text(c3, "c", t("  a")).unwrap(), t("  a"));
        assert_eq!(fit_text(v3, "c", t("ab ")).unwrap(), t("ab "));
        assert_eq!(fit_text(v3, "c", t("abc  ")).unwrap(), t("abc"));
        assert_eq!(fit_text(v3, "c", t("ééé")).unwrap(), t("ééé"));
        assert_eq!(fit_text(v3, "c", Value::Null).unwrap(), Value::Null);
        for (kind, s) in [(c3, "abcd"), (v3, "abcd"), (v3, "éééé"), (v3, "abc d")] {
            let e = fit_text(kind, "c", t(s)).unwrap_err();
            assert_eq!(e.kind.sqlstate(), "22001", "{s}");
            assert!(e.message.contains(&kind.type_name()), "{}", e.message);
        }
        assert_eq!(TextKind::parse("character(84)"), Some(TextKind::Char(84)));
        assert_eq!(TextKind::parse("character varying(20)"), Some(TextKind::Varchar(20)));
        assert_eq!(TextKind::parse("text"), None);
    }
}
