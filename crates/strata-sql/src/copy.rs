//! `COPY table [(columns)] FROM STDIN [[WITH] (options)]`: rows a client streams (PostgreSQL's
//! copy-in sub-protocol, or the lines after the statement in a script), in PostgreSQL's text
//! format (tab-separated, `\N` for NULL, backslash escapes) or CSV, inserted as one statement.
//!
//! Options: `FORMAT text | csv`, `DELIMITER 'c'`, `NULL 'string'`, `HEADER [boolean]` (CSV),
//! `QUOTE 'c'` and `ESCAPE 'c'` (CSV), and `FREEZE [boolean]` (accepted: strata's rows are
//! visible to every later snapshot anyway). `ON`/`OFF` spell booleans as in PostgreSQL. Fields
//! convert to each column's type as a cast from text would; a field that does not is an error
//! naming the line and column, and nothing of the COPY is inserted.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringArray};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::sql::sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Statement,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use strata::{ColumnType, Db, Value};

use crate::ddl::{normalize, table_name};
use crate::error::{ErrorKind, SqlError};

/// A `COPY ... FROM STDIN` ready to take its rows.
#[derive(Debug, Clone)]
pub struct CopyIn {
    /// The table.
    pub(crate) table: String,
    /// The columns each line holds, as indices of the table's schema.
    pub(crate) columns: Vec<usize>,
    /// How lines are written.
    pub(crate) format: CopyFormat,
    /// Rows that came with the statement (a script's lines after it), if any.
    pub(crate) inline: Option<Vec<u8>>,
}

impl CopyIn {
    /// How many columns each line holds.
    pub fn columns(&self) -> usize {
        self.columns.len()
    }

    /// The rows that came with the statement (a script's lines after it), if any: without
    /// them, the client sends them ([`crate::Session::copy_in`]).
    pub fn inline_rows(&self) -> Option<&[u8]> {
        self.inline.as_deref()
    }
}

/// The format of a COPY's lines.
#[derive(Debug, Clone)]
pub(crate) struct CopyFormat {
    csv: bool,
    delimiter: u8,
    null: String,
    header: bool,
    quote: u8,
    escape: u8,
}

impl CopyFormat {
    fn text() -> CopyFormat {
        CopyFormat { csv: false, delimiter: b'\t', null: "\\N".into(), header: false, quote: b'"', escape: b'"' }
    }

    fn csv() -> CopyFormat {
        CopyFormat { csv: true, delimiter: b',', null: String::new(), header: false, quote: b'"', escape: b'"' }
    }
}

/// Parses `sql` when DataFusion's parser does not take it because it begins with a `COPY ...
/// FROM` (DataFusion parses only `COPY ... TO`): `None` when it does not. In a script, the
/// lines after the statement up to a line `\.` are its rows (carried as the statement's one
/// `values` entry, raw), and statements may follow them; `rest` parses those.
pub(crate) fn parse(
    sql: &str,
    rest: impl FnOnce(&str) -> Result<Vec<crate::Statement>, SqlError>,
) -> Option<Result<Vec<crate::Statement>, SqlError>> {
    let dialect = PostgreSqlDialect {};
    let lead = sql.trim_start();
    if !lead.get(..4).is_some_and(|w| w.eq_ignore_ascii_case("copy")) {
        return None;
    }
    // The statement ends at the first semicolon outside quotes; the rows after it need not
    // tokenize as SQL.
    let end = sql.match_indices(';').map(|(i, _)| i).find(
        |&i| matches!(Tokenizer::new(&dialect, &sql[..=i]).tokenize(), Ok(t) if t.last() == Some(&Token::SemiColon)),
    );
    let head = Tokenizer::new(&dialect, &sql[..end.unwrap_or(sql.len())]).tokenize().ok()?;
    // PostgreSQL spells booleans ON and OFF too; sqlparser takes TRUE and FALSE.
    let mut text = String::with_capacity(sql.len());
    let mut after_option = false;
    for t in &head {
        let word = match t {
            Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_lowercase()),
            _ => None,
        };
        match word.as_deref() {
            Some("on") if after_option => text.push_str("TRUE"),
            Some("off") if after_option => text.push_str("FALSE"),
            _ => text.push_str(&t.to_string()),
        }
        if !matches!(t, Token::Whitespace(_)) {
            after_option = matches!(word.as_deref(), Some("freeze" | "header"));
        }
    }
    let parsed =
        Parser::parse_sql(&PostgreSqlDialect {}, &text).map_err(|e| SqlError::new(ErrorKind::Syntax, e.to_string()));
    let mut stmts = match parsed {
        Ok(s) if s.len() == 1 => s,
        Ok(_) => return Some(Err(SqlError::new(ErrorKind::Syntax, "COPY: expected one statement"))),
        Err(e) => return Some(Err(e)),
    };
    // What follows the semicolon: the rows (from the next line up to `\.`), then more SQL.
    let after = end.map_or("", |i| &sql[i + 1..]);
    let (data, more) = match after.split_once('\n') {
        Some((same_line, body)) if same_line.trim().is_empty() => {
            let mut at = 0;
            let mut found = None;
            for line in body.split_inclusive('\n') {
                if line.trim_end() == "\\." {
                    found = Some((at, at + line.len()));
                    break;
                }
                at += line.len();
            }
            match found {
                Some((stop, resume)) => (&body[..stop], &body[resume..]),
                None => (body, ""),
            }
        }
        _ => ("", after),
    };
    if !data.trim().is_empty() {
        if let Some(Statement::Copy { values, .. }) = stmts.first_mut() {
            *values = vec![Some(data.to_owned())];
        }
    }
    let mut out: Vec<crate::Statement> = stmts.into_iter().map(|s| crate::Statement::Statement(Box::new(s))).collect();
    if !more.trim().is_empty() {
        match rest(more) {
            Ok(m) => out.extend(m),
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(out))
}

/// The `COPY ... FROM STDIN` a parsed `COPY` statement asks for (`COPY ... TO` and copies from
/// files are refused).
pub(crate) fn prepare(db: &Db, stmt: &Statement) -> Result<CopyIn, SqlError> {
    let Statement::Copy { source, to, target, options, legacy_options, values } = stmt else {
        return Err(SqlError::new(ErrorKind::Internal, "not a COPY statement"));
    };
    if *to || !matches!(target, CopyTarget::Stdin) {
        return Err(SqlError::unsupported(
            "COPY: strata takes COPY table FROM STDIN (the client sends the rows); COPY TO and files on the server are not supported",
        ));
    }
    let CopySource::Table { table_name: name, columns } = source else {
        return Err(SqlError::unsupported("COPY (query) FROM"));
    };
    let name = table_name(name)?;
    let table = db
        .table(&name)
        .map_err(|_| SqlError::new(ErrorKind::UndefinedTable, format!("table {name} does not exist")))?;
    let visible = crate::meta::visible_columns(&table);
    let columns = if columns.is_empty() {
        visible
    } else {
        let mut out = Vec::with_capacity(columns.len());
        for c in columns {
            let n = normalize(c);
            let i = table.schema().column_index(&n).filter(|i| visible.contains(i)).ok_or_else(|| {
                SqlError::new(ErrorKind::UndefinedColumn, format!("column {n} of table {name} does not exist"))
            })?;
            if out.contains(&i) {
                return Err(SqlError::invalid(format!("column {n} is listed twice")));
            }
            out.push(i);
        }
        out
    };
    let mut format = CopyFormat::text();
    for o in options {
        if let CopyOption::Format(f) = o {
            format = match f.value.to_lowercase().as_str() {
                "text" => CopyFormat::text(),
                "csv" => CopyFormat::csv(),
                other => return Err(SqlError::unsupported(format!("COPY format {other} (strata reads text and csv)"))),
            };
        }
    }
    if legacy_options.iter().any(|o| matches!(o, CopyLegacyOption::Csv(_))) {
        format = CopyFormat::csv();
    }
    let byte = |c: char, what: &str| -> Result<u8, SqlError> {
        u8::try_from(c)
            .ok()
            .filter(u8::is_ascii)
            .ok_or_else(|| SqlError::invalid(format!("COPY {what} must be one ASCII character")))
    };
    for o in options {
        match o {
            CopyOption::Format(_) | CopyOption::Freeze(_) => {}
            CopyOption::Delimiter(c) => format.delimiter = byte(*c, "delimiter")?,
            CopyOption::Null(s) => format.null = s.clone(),
            CopyOption::Header(h) => format.header = *h,
            CopyOption::Quote(c) => format.quote = byte(*c, "quote")?,
            CopyOption::Escape(c) => format.escape = byte(*c, "escape")?,
            CopyOption::Encoding(e) if e.eq_ignore_ascii_case("utf8") || e.eq_ignore_ascii_case("utf-8") => {}
            other => return Err(SqlError::unsupported(format!("COPY option {other}"))),
        }
    }
    for o in legacy_options {
        match o {
            CopyLegacyOption::Delimiter(c) => format.delimiter = byte(*c, "delimiter")?,
            CopyLegacyOption::Null(s) => format.null = s.clone(),
            CopyLegacyOption::Csv(csv) => {
                for c in csv {
                    match c {
                        CopyLegacyCsvOption::Header => format.header = true,
                        CopyLegacyCsvOption::Quote(q) => format.quote = byte(*q, "quote")?,
                        CopyLegacyCsvOption::Escape(e) => format.escape = byte(*e, "escape")?,
                        other => return Err(SqlError::unsupported(format!("COPY option {other}"))),
                    }
                }
            }
            other => return Err(SqlError::unsupported(format!("COPY option {other}"))),
        }
    }
    if format.header && !format.csv {
        return Err(SqlError::unsupported("COPY HEADER is available only in CSV mode"));
    }
    // A script's rows, raw, as `parse` left them.
    let inline = match values.as_slice() {
        [] => None,
        [Some(raw)] => Some(raw.clone().into_bytes()),
        _ => return Err(SqlError::new(ErrorKind::Internal, "COPY rows in an unexpected form")),
    };
    Ok(CopyIn { table: name, columns, format, inline })
}

/// The fields of a COPY's lines: one `Vec` per line, `None` for NULL.
fn fields(copy: &CopyIn, data: &[u8]) -> Result<Vec<Vec<Option<String>>>, SqlError> {
    let bad = |line: usize, what: String| {
        SqlError::new(ErrorKind::BadCopyData, format!("COPY {}, line {line}: {what}", copy.table))
    };
    let f = &copy.format;
    let mut out = Vec::new();
    if f.csv {
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(f.header)
            .delimiter(f.delimiter)
            .quote(f.quote)
            .escape((f.escape != f.quote).then_some(f.escape))
            .double_quote(f.escape == f.quote)
            .flexible(true)
            .from_reader(data);
        let mut rec = csv::ByteRecord::new();
        loop {
            match rdr.read_byte_record(&mut rec) {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => return Err(bad(out.len() + 1, e.to_string())),
            }
            let line = rec.position().map_or(out.len() + 1, |p| p.line() as usize);
            if rec.len() == 1 && &rec[0] == b"\\." {
                break;
            }
            // A field equal to the NULL string is NULL (the reader does not say which fields
            // were quoted, so a quoted one is NULL too, unlike in PostgreSQL).
            let mut row = Vec::with_capacity(rec.len());
            for field in rec.iter() {
                let text = std::str::from_utf8(field).map_err(|_| bad(line, "not UTF-8".into()))?;
                row.push((text != f.null).then(|| text.to_owned()));
            }
            out.push(row);
        }
        return Ok(out);
    }
    let text = std::str::from_utf8(data).map_err(|_| bad(1, "not UTF-8".into()))?;
    // Every line ends with a newline; the last may lack it. (An empty line is a row: one
    // empty field.)
    let text = text.strip_suffix('\n').unwrap_or(text);
    if text.is_empty() {
        return Ok(out);
    }
    for (i, line) in text.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line == "\\." {
            break;
        }
        let mut row = Vec::new();
        for raw in line.split(char::from(f.delimiter)) {
            row.push(if raw == f.null { None } else { Some(unescape(raw).map_err(|e| bad(i + 1, e))?) });
        }
        out.push(row);
    }
    Ok(out)
}

/// A text-format field with its backslash escapes resolved.
fn unescape(raw: &str) -> Result<String, String> {
    if !raw.contains('\\') {
        return Ok(raw.to_owned());
    }
    let b = raw.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' || i + 1 == b.len() {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let c = b[i + 1];
        i += 2;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut v = u32::from(c - b'0');
                let mut n = 1;
                while n < 3 && i < b.len() && (b'0'..=b'7').contains(&b[i]) {
                    v = v * 8 + u32::from(b[i] - b'0');
                    i += 1;
                    n += 1;
                }
                out.push((v & 0xff) as u8);
            }
            b'x' if i < b.len() && b[i].is_ascii_hexdigit() => {
                let mut v = 0u8;
                let mut n = 0;
                while n < 2 && i < b.len() && b[i].is_ascii_hexdigit() {
                    v = v * 16 + (b[i] as char).to_digit(16).map_or(0, |d| d as u8);
                    i += 1;
                    n += 1;
                }
                out.push(v);
            }
            other => out.push(other),
        }
    }
    String::from_utf8(out).map_err(|_| "an escape makes the field invalid UTF-8".to_string())
}

/// The rows of `data` as values of the copy's columns (in the copy's column order).
pub(crate) fn rows(table: &strata::Table, copy: &CopyIn, data: &[u8]) -> Result<Vec<Vec<Value>>, SqlError> {
    let lines = fields(copy, data)?;
    let n = copy.columns.len();
    if let Some((i, l)) = lines.iter().enumerate().find(|(_, l)| l.len() != n) {
        let what = if l.len() < n { "missing data for a column" } else { "extra data after the last expected column" };
        return Err(SqlError::new(ErrorKind::BadCopyData, format!("COPY {}, line {}: {what}", copy.table, i + 1)));
    }
    let mut out: Vec<Vec<Value>> = vec![Vec::with_capacity(n); lines.len()];
    for (k, &c) in copy.columns.iter().enumerate() {
        let col = &table.schema().columns()[c];
        let texts: StringArray = lines.iter().map(|l| l[k].as_deref()).collect();
        let array: ArrayRef = match col.ty {
            ColumnType::Text => Arc::new(texts),
            ColumnType::Bytea => {
                let mut vals = Vec::with_capacity(texts.len());
                for (i, t) in texts.iter().enumerate() {
                    vals.push(match t {
                        None => Value::Null,
                        Some(s) => Value::Bytea(hex(s).ok_or_else(|| {
                            SqlError::new(
                                ErrorKind::InvalidText,
                                format!(
                                    "COPY {}, line {}, column {}: expected \\x hex bytes",
                                    copy.table,
                                    i + 1,
                                    col.name
                                ),
                            )
                        })?),
                    });
                }
                for (row, v) in out.iter_mut().zip(vals) {
                    row.push(v);
                }
                continue;
            }
            ty => {
                let opts = CastOptions { safe: false, ..CastOptions::default() };
                cast_with_options(&texts, &strata::scan::arrow_type(ty), &opts).map_err(|e| {
                    let line = first_bad(&texts, ty).map_or(String::new(), |i| format!(", line {}", i + 1));
                    SqlError::new(
                        ErrorKind::InvalidText,
                        format!(
                            "COPY {}{line}, column {}: invalid input for type {}: {e}",
                            copy.table,
                            col.name,
                            ty.name()
                        ),
                    )
                })?
            }
        };
        for (i, row) in out.iter_mut().enumerate() {
            row.push(strata::scan::value_at(array.as_ref(), i));
        }
    }
    Ok(out)
}

/// The first field of `texts` that does not convert to `ty`, to name its line.
fn first_bad(texts: &StringArray, ty: ColumnType) -> Option<usize> {
    let opts = CastOptions { safe: false, ..CastOptions::default() };
    (0..texts.len()).find(|&i| cast_with_options(&texts.slice(i, 1), &strata::scan::arrow_type(ty), &opts).is_err())
}

fn hex(s: &str) -> Option<Vec<u8>> {
    let h = s.strip_prefix("\\x")?;
    if h.len() % 2 != 0 {
        return None;
    }
    (0..h.len()).step_by(2).map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    /// A script's COPY: the rows after the statement up to `\.`, then more statements, which
    /// `rest` parses; booleans spelled ON/OFF; a semicolon inside quotes does not end the
    /// statement; rows that do not tokenize as SQL are fine.
    #[test]
    fn a_script_copy_takes_its_rows_and_leaves_the_statements_after_them() {
        let sql =
            "COPY t (a, b) FROM STDIN WITH (FREEZE ON, DELIMITER ';');\n1;it's\n2;\\N\n\\.\nDELETE FROM t; SELECT 1";
        let mut rest_seen = String::new();
        let stmts = parse(sql, |more| {
            rest_seen = more.to_string();
            Ok(Vec::new())
        })
        .unwrap()
        .unwrap();
        assert_eq!(rest_seen, "DELETE FROM t; SELECT 1");
        let [crate::Statement::Statement(s)] = stmts.as_slice() else { panic!("{stmts:?}") };
        let Statement::Copy { options, values, .. } = s.as_ref() else { panic!("{s}") };
        assert!(options.contains(&CopyOption::Freeze(true)), "{options:?}");
        assert!(options.contains(&CopyOption::Delimiter(';')), "{options:?}");
        assert_eq!(values, &vec![Some("1;it's\n2;\\N\n".to_string())]);
        // Without rows, and not a COPY at all.
        let bare = parse("copy t from stdin", |_| Ok(Vec::new())).unwrap().unwrap();
        assert!(
            matches!(&bare[0], crate::Statement::Statement(s) if matches!(s.as_ref(), Statement::Copy { values, .. } if values.is_empty()))
        );
        assert!(parse("SELECT 1", |_| Ok(Vec::new())).is_none());
    }

    #[test]
    fn text_fields_unescape_as_postgresql_writes_them() {
        assert_eq!(unescape("a\\tb\\\\c\\nd").unwrap(), "a\tb\\c\nd");
        assert_eq!(unescape("\\101\\x42\\q").unwrap(), "ABq");
        assert_eq!(unescape("plain").unwrap(), "plain");
        assert!(unescape("\\xff").is_err(), "a lone 0xff byte is not UTF-8");
    }
}
