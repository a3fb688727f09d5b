//! `strata load`: CSV files with a header row naming the columns, or Parquet files (by extension;
//! uncompressed, Snappy, Zstd or LZ4). The file is read twice: the first pass checks every value
//! (so a bad value leaves the table untouched, and the error names its line or row and column);
//! the second ingests the rows in chunks of [`INGEST_ROWS`], each chunk atomic and written
//! straight into the deepest level its key range leaves free (`Table::ingest`; a file sorted by
//! key lands in the last level, each byte written once). Lineage-engine tables take write
//! batches instead. In CSV, empty fields are NULL;
//! DOUBLE/REAL accept `NaN`, `Infinity`, `-Infinity`; BOOLEAN accepts true/false/t/f/1/0; BYTEA
//! is `\x` hex.

use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use strata::{ColumnType, Db, Table, Value, WriteBatch, WriteOptions};

use crate::exec::CliError;

/// Rows per write batch (lineage-engine tables).
const BATCH: usize = 1000;

/// Rows per ingest: each is held in memory while its files are built.
const INGEST_ROWS: usize = 200_000;

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
        ColumnType::Date => Value::Date(strata::types::parse_date(s).ok_or_else(bad)?),
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

/// A stream of checked rows (schema order) from one input file.
type RowStream<'a> = Box<dyn Iterator<Item = Result<Vec<Value>, CliError>> + 'a>;

fn csv_rows<'a>(t: &'a Table, path: &'a Path) -> Result<RowStream<'a>, CliError> {
    let mut rdr = reader(path)?;
    let map = mapping(t, path, &mut rdr)?;
    Ok(Box::new(rdr.into_records().map(move |rec| {
        let rec = rec.map_err(|e| CliError::new("bad_input", format!("{}: {e}", path.display())))?;
        let row = row_of(t, &map, &rec, path)?;
        // The engine's own type and NOT NULL checks, without writing.
        WriteBatch::new().insert(t, &row).map_err(|e| {
            let line = rec.position().map_or(0, |p| p.line());
            CliError::new("bad_input", format!("{} line {line}: {e}", path.display()))
        })?;
        Ok(row)
    })))
}

/// Converts a Parquet field to a value of column type `ty`.
fn from_parquet(ty: ColumnType, f: &Field) -> Result<Value, String> {
    let int: Option<i128> = match f {
        Field::Byte(x) => Some(i128::from(*x)),
        Field::Short(x) => Some(i128::from(*x)),
        Field::Int(x) => Some(i128::from(*x)),
        Field::Long(x) => Some(i128::from(*x)),
        Field::UByte(x) => Some(i128::from(*x)),
        Field::UShort(x) => Some(i128::from(*x)),
        Field::UInt(x) => Some(i128::from(*x)),
        Field::ULong(x) => Some(i128::from(*x)),
        _ => None,
    };
    let float: Option<f64> = match f {
        Field::Float(x) => Some(f64::from(*x)),
        Field::Double(x) => Some(*x),
        _ => int.map(|i| i as f64),
    };
    let bad = || format!("Parquet value `{f}` does not fit {}", ty.name());
    let fit = |lo: i128, hi: i128| int.filter(|v| (lo..=hi).contains(v)).ok_or_else(bad);
    Ok(match (ty, f) {
        (_, Field::Null) => Value::Null,
        (ColumnType::BigInt, _) => Value::BigInt(fit(i64::MIN.into(), i64::MAX.into())? as i64),
        (ColumnType::Int, _) => Value::Int(fit(i32::MIN.into(), i32::MAX.into())? as i32),
        (ColumnType::SmallInt, _) => Value::SmallInt(fit(i16::MIN.into(), i16::MAX.into())? as i16),
        (ColumnType::TinyInt, _) => Value::TinyInt(fit(i8::MIN.into(), i8::MAX.into())? as i8),
        (ColumnType::Double, _) => Value::Double(float.ok_or_else(bad)?),
        (ColumnType::Real, _) => Value::Real(float.ok_or_else(bad)? as f32),
        (ColumnType::Boolean, Field::Bool(b)) => Value::Boolean(*b),
        (ColumnType::Text, Field::Str(s)) => Value::Text(s.clone()),
        (ColumnType::Bytea, Field::Bytes(b)) => Value::Bytea(b.data().to_vec()),
        (ColumnType::Bytea, Field::Str(s)) => Value::Bytea(s.as_bytes().to_vec()),
        (ColumnType::Date, Field::Date(d)) => Value::Date(*d),
        (ColumnType::Date, Field::Str(s)) => Value::Date(strata::types::parse_date(s).ok_or_else(bad)?),
        _ => return Err(bad()),
    })
}

fn parquet_rows<'a>(t: &'a Table, path: &'a Path) -> Result<RowStream<'a>, CliError> {
    let io = |e: String| CliError::new("bad_input", format!("{}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| CliError::new("io", format!("{}: {e}", path.display())))?;
    let reader = SerializedFileReader::new(file).map_err(|e| io(e.to_string()))?;
    let schema = t.schema();
    let fields = reader.metadata().file_metadata().schema_descr().root_schema().get_fields().to_vec();
    let mut map = Vec::with_capacity(fields.len());
    for f in &fields {
        let c =
            schema.column_index(f.name()).ok_or_else(|| io(format!("column `{}` is not in the table", f.name())))?;
        map.push(c);
    }
    for &k in schema.primary_key() {
        if !map.contains(&k) {
            return Err(io(format!("key column `{}` is missing from the file", schema.columns()[k].name)));
        }
    }
    let mut n = 0u64;
    Ok(Box::new(reader.into_iter().map(move |row| {
        n += 1;
        let row = row.map_err(|e| io(e.to_string()))?;
        let mut out = vec![Value::Null; schema.columns().len()];
        for ((_, f), &c) in row.get_column_iter().zip(&map) {
            let col = &schema.columns()[c];
            out[c] = from_parquet(col.ty, f).map_err(|e| io(format!("row {n}, column `{}`: {e}", col.name)))?;
        }
        WriteBatch::new().insert(t, &out).map_err(|e| io(format!("row {n}: {e}")))?;
        Ok(out)
    })))
}

/// Loads a CSV file, or a Parquet file (by its `.parquet` extension), into `table`: every row is
/// checked before anything is written, then rows go in as atomic ingests of [`INGEST_ROWS`]
/// (batches of [`BATCH`] for lineage-engine tables). Returns rows written.
pub fn load_file(db: &Db, table: &str, path: &Path) -> Result<u64, CliError> {
    let t = db.table(table)?;
    let parquet = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("parquet"));
    let open = || if parquet { parquet_rows(&t, path) } else { csv_rows(&t, path) };
    let check = bar(0, "checking");
    let mut rows = 0u64;
    for r in open()? {
        r?;
        rows += 1;
        check.inc(1);
    }
    check.finish_and_clear();
    let pb = bar(rows, "loading");
    if t.info().options.engine == strata::Engine::Lsm {
        let mut chunk: Vec<Vec<Value>> = Vec::with_capacity(INGEST_ROWS.min(rows as usize));
        let mut written = 0u64;
        let mut rows = open()?;
        loop {
            let r = rows.next().transpose()?;
            let end = r.is_none();
            if let Some(r) = r {
                chunk.push(r);
                pb.inc(1);
            }
            if chunk.len() >= INGEST_ROWS || (end && !chunk.is_empty()) {
                pb.set_message("ingesting");
                t.ingest(&chunk)?;
                written += chunk.len() as u64;
                chunk.clear();
                pb.set_message("loading");
            }
            if end {
                break;
            }
        }
        pb.finish_and_clear();
        return Ok(written);
    }
    let mut b = WriteBatch::new();
    let mut written = 0u64;
    for r in open()? {
        b.insert(&t, &r?)?;
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
