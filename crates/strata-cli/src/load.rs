//! `strata load`: CSV files with a header row naming the columns. The file is read twice: the
//! first pass checks every value (so a bad value leaves the table untouched, and the error names
//! its line and column); the second writes batches of rows, each batch atomic. Empty fields are
//! NULL; DOUBLE/REAL accept `NaN`, `Infinity`, `-Infinity`; BOOLEAN accepts true/false/t/f/1/0;
//! BYTEA is `\x` hex.

use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use strata::{ColumnType, Db, Table, Value, WriteBatch, WriteOptions};

use crate::exec::CliError;

/// Rows per write batch.
const BATCH: usize = 1000;

/// Parses one CSV field of column type `ty` (`nullable` decides what an empty field means).
pub fn parse_field(ty: ColumnType, nullable: bool, s: &str) -> Result<Value, String> {
    if s.is_empty() && ty != ColumnType::Text {
        return if nullable { Ok(Value::Null) } else { Err("empty value in a NOT NULL column".into()) };
    }
    if s.is_empty() && nullable {
        return Ok(Value::Null);
    }
    let bad = || format!("`{s}` is not a valid {}", ty.name());
    let float = |s: &str| -> Result<f64, String> {
        match s {
            "NaN" => Ok(f64::NAN),
            "Infinity" | "inf" => Ok(f64::INFINITY),
            "-Infinity" | "-inf" => Ok(f64::NEG_INFINITY),
            _ => s.trim().parse::<f64>().map_err(|_| bad()),
        }
    };
    Ok(match ty {
        ColumnType::BigInt => Value::BigInt(s.trim().parse().map_err(|_| bad())?),
        ColumnType::Int => Value::Int(s.trim().parse().map_err(|_| bad())?),
        ColumnType::SmallInt => Value::SmallInt(s.trim().parse().map_err(|_| bad())?),
        ColumnType::TinyInt => Value::TinyInt(s.trim().parse().map_err(|_| bad())?),
        ColumnType::Double => Value::Double(float(s)?),
        ColumnType::Real => Value::Real(float(s)? as f32),
        ColumnType::Boolean => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "t" | "1" => Value::Boolean(true),
            "false" | "f" | "0" => Value::Boolean(false),
            _ => return Err(bad()),
        },
        ColumnType::Text => Value::Text(s.to_owned()),
        ColumnType::Bytea => Value::Bytea(crate::json::parse_hex(s).ok_or_else(bad)?),
    })
}

fn reader(path: &Path) -> Result<csv::Reader<std::fs::File>, CliError> {
    csv::ReaderBuilder::new()
        .has_headers(true)
        .from_path(path)
        .map_err(|e| CliError::new("io", format!("{}: {e}", path.display())))
}

/// Maps header names to schema columns: for each schema column, its CSV field index.
fn mapping(t: &Table, path: &Path, rdr: &mut csv::Reader<std::fs::File>) -> Result<Vec<Option<usize>>, CliError> {
    let headers = rdr.headers().map_err(|e| CliError::new("bad_input", format!("{}: {e}", path.display())))?.clone();
    let schema = t.schema();
    let mut map = vec![None; schema.columns().len()];
    for (i, h) in headers.iter().enumerate() {
        let c = schema.column_index(h.trim()).ok_or_else(|| {
            CliError::new("bad_input", format!("{}: header names unknown column `{h}`", path.display()))
        })?;
        if map[c].replace(i).is_some() {
            return Err(CliError::new(
                "bad_input",
                format!("{}: column `{h}` appears twice in the header", path.display()),
            ));
        }
    }
    for &k in schema.primary_key() {
        if map[k].is_none() {
            let name = &schema.columns()[k].name;
            return Err(CliError::new(
                "bad_input",
                format!("{}: key column `{name}` is missing from the header", path.display()),
            ));
        }
    }
    Ok(map)
}

fn row_of(t: &Table, map: &[Option<usize>], rec: &csv::StringRecord, path: &Path) -> Result<Vec<Value>, CliError> {
    let line = rec.position().map_or(0, |p| p.line());
    t.schema()
        .columns()
        .iter()
        .zip(map)
        .map(|(c, m)| {
            let field = m.and_then(|i| rec.get(i)).unwrap_or("");
            parse_field(c.ty, c.nullable, field).map_err(|e| {
                CliError::new("bad_input", format!("{} line {line}, column `{}`: {e}", path.display(), c.name))
            })
        })
        .collect()
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} rows ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_owned());
    pb
}

/// Loads `path` into `table`. Returns the number of rows written.
pub fn load_csv(db: &Db, table: &str, path: &Path) -> Result<u64, CliError> {
    let t = db.table(table)?;
    // Pass 1: every value must parse; count rows for the progress bar.
    let mut rdr = reader(path)?;
    let map = mapping(&t, path, &mut rdr)?;
    let check = bar(0, "checking");
    let mut rows = 0u64;
    for rec in rdr.records() {
        let rec = rec.map_err(|e| CliError::new("bad_input", format!("{}: {e}", path.display())))?;
        let row = row_of(&t, &map, &rec, path)?;
        // Type and NOT NULL checks of the engine itself, without writing.
        WriteBatch::new().insert(&t, &row).map_err(|e| {
            let line = rec.position().map_or(0, |p| p.line());
            CliError::new("bad_input", format!("{} line {line}: {e}", path.display()))
        })?;
        rows += 1;
        check.inc(1);
    }
    check.finish_and_clear();
    // Pass 2: write in atomic batches.
    let mut rdr = reader(path)?;
    let map = mapping(&t, path, &mut rdr)?;
    let pb = bar(rows, "loading");
    let mut b = WriteBatch::new();
    let mut written = 0u64;
    for rec in rdr.records() {
        let rec = rec.map_err(|e| CliError::new("bad_input", format!("{}: {e}", path.display())))?;
        b.insert(&t, &row_of(&t, &map, &rec, path)?)?;
        if b.len() >= BATCH {
            written += b.len() as u64;
            pb.inc(b.len() as u64);
            db.write(std::mem::take(&mut b), &WriteOptions::default())?;
        }
    }
    if !b.is_empty() {
        written += b.len() as u64;
        pb.inc(b.len() as u64);
        db.write(b, &WriteOptions::default())?;
    }
    pb.finish_and_clear();
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_parse_by_type() {
        assert_eq!(parse_field(ColumnType::Int, true, "").unwrap(), Value::Null);
        assert!(parse_field(ColumnType::Int, false, "").is_err());
        assert_eq!(parse_field(ColumnType::Text, false, "").unwrap(), Value::Text(String::new()));
        assert_eq!(parse_field(ColumnType::Boolean, true, "T").unwrap(), Value::Boolean(true));
        assert!(matches!(parse_field(ColumnType::Double, true, "NaN").unwrap(), Value::Double(x) if x.is_nan()));
        assert!(parse_field(ColumnType::TinyInt, true, "300").unwrap_err().contains("TINYINT"));
        assert_eq!(parse_field(ColumnType::Bytea, true, "\\x0102").unwrap(), Value::Bytea(vec![1, 2]));
    }
}
