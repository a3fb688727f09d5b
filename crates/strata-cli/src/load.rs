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

use arrow_array::{Array, RecordBatchReader};
use arrow_schema::DataType;
use indicatif::{ProgressBar, ProgressStyle};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use strata::{ColumnType, Db, Table, Value, WriteBatch, WriteOptions};

use crate::exec::CliError;

/// Rows per write batch (lineage-engine tables).
const BATCH: usize = 1000;

/// Rows per ingest: each is held in memory while its files are built (two at a time: one read
/// while the one before is ingested).
const INGEST_ROWS: usize = 200_000;

/// Rows between progress bar updates.
const PROGRESS_STEP: u64 = 1024;

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
        ColumnType::Timestamp => Value::Timestamp(strata::types::parse_timestamp(s).ok_or_else(bad)?),
        ColumnType::TimestampTz => Value::TimestampTz(strata::types::parse_timestamptz(s).ok_or_else(bad)?),
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
        t.check_row(&row).map_err(|e| {
            let line = rec.position().map_or(0, |p| p.line());
            CliError::new("bad_input", format!("{} line {line}: {e}", path.display()))
        })?;
        Ok(row)
    })))
}

/// One Parquet value as the Arrow reader gives it, before it is fitted to a column's type.
#[derive(Debug)]
enum Raw<'a> {
    Null,
    Int(i128),
    Float(f64),
    Bool(bool),
    Str(&'a str),
    Bytes(&'a [u8]),
    Date(i32),
    /// Microseconds since 1970; whether the Parquet type names a time zone (an instant).
    Ts(i64, bool),
}

impl std::fmt::Display for Raw<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Raw::Null => f.write_str("NULL"),
            Raw::Int(v) => write!(f, "{v}"),
            Raw::Float(v) => write!(f, "{v}"),
            Raw::Bool(v) => write!(f, "{v}"),
            Raw::Str(v) => write!(f, "{v}"),
            Raw::Bytes(v) => write!(f, "{} bytes", v.len()),
            Raw::Date(v) => write!(f, "day {v}"),
            Raw::Ts(v, false) => f.write_str(&strata::types::format_timestamp(*v)),
            Raw::Ts(v, true) => f.write_str(&strata::types::format_timestamptz(*v)),
        }
    }
}

/// Value `i` of an Arrow array read from Parquet; `Err` names a type the load does not take.
fn raw_at(a: &dyn Array, i: usize) -> Result<Raw<'_>, String> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    if a.is_null(i) {
        return Ok(Raw::Null);
    }
    Ok(match a.data_type() {
        DataType::Int8 => Raw::Int(a.as_primitive::<Int8Type>().value(i).into()),
        DataType::Int16 => Raw::Int(a.as_primitive::<Int16Type>().value(i).into()),
        DataType::Int32 => Raw::Int(a.as_primitive::<Int32Type>().value(i).into()),
        DataType::Int64 => Raw::Int(a.as_primitive::<Int64Type>().value(i).into()),
        DataType::UInt8 => Raw::Int(a.as_primitive::<UInt8Type>().value(i).into()),
        DataType::UInt16 => Raw::Int(a.as_primitive::<UInt16Type>().value(i).into()),
        DataType::UInt32 => Raw::Int(a.as_primitive::<UInt32Type>().value(i).into()),
        DataType::UInt64 => Raw::Int(a.as_primitive::<UInt64Type>().value(i).into()),
        DataType::Float32 => Raw::Float(a.as_primitive::<Float32Type>().value(i).into()),
        DataType::Float64 => Raw::Float(a.as_primitive::<Float64Type>().value(i)),
        DataType::Decimal128(_, scale) => {
            let v = a.as_primitive::<Decimal128Type>().value(i);
            match *scale {
                0 => Raw::Int(v),
                s => Raw::Float(v as f64 / 10f64.powi(i32::from(s))),
            }
        }
        DataType::Boolean => Raw::Bool(a.as_boolean().value(i)),
        DataType::Utf8 => Raw::Str(a.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Raw::Str(a.as_string::<i64>().value(i)),
        DataType::Utf8View => Raw::Str(a.as_string_view().value(i)),
        DataType::Binary => Raw::Bytes(a.as_binary::<i32>().value(i)),
        DataType::LargeBinary => Raw::Bytes(a.as_binary::<i64>().value(i)),
        DataType::BinaryView => Raw::Bytes(a.as_binary_view().value(i)),
        DataType::Date32 => Raw::Date(a.as_primitive::<Date32Type>().value(i)),
        DataType::Timestamp(unit, tz) => {
            use arrow_schema::TimeUnit;
            let micros = match unit {
                TimeUnit::Second => a.as_primitive::<TimestampSecondType>().value(i).checked_mul(1_000_000),
                TimeUnit::Millisecond => a.as_primitive::<TimestampMillisecondType>().value(i).checked_mul(1_000),
                TimeUnit::Microsecond => Some(a.as_primitive::<TimestampMicrosecondType>().value(i)),
                TimeUnit::Nanosecond => {
                    let n = a.as_primitive::<TimestampNanosecondType>().value(i);
                    // Strata keeps microseconds; a finer value would be rounded, so it is refused.
                    (n % 1_000 == 0).then_some(n / 1_000)
                }
            };
            Raw::Ts(
                micros.ok_or_else(|| format!("Parquet timestamp {unit:?} value does not fit microseconds exactly"))?,
                tz.is_some(),
            )
        }
        other => return Err(format!("Parquet type {other} is not one the load reads")),
    })
}

/// Fits a Parquet value to column type `ty` (integers must be in range; strings load into TEXT,
/// BYTEA and, as `YYYY-MM-DD`, DATE, and as ISO date-times into timestamps; a Parquet timestamp
/// with a time zone loads into TIMESTAMPTZ, one without into TIMESTAMP).
fn from_parquet(ty: ColumnType, f: &Raw<'_>) -> Result<Value, String> {
    let int = match f {
        Raw::Int(i) => Some(*i),
        _ => None,
    };
    let float = match f {
        Raw::Float(x) => Some(*x),
        _ => int.map(|i| i as f64),
    };
    let bad = || format!("Parquet value `{f}` does not fit {}", ty.name());
    let fit = |lo: i128, hi: i128| int.filter(|v| (lo..=hi).contains(v)).ok_or_else(bad);
    Ok(match (ty, f) {
        (_, Raw::Null) => Value::Null,
        (ColumnType::BigInt, _) => Value::BigInt(fit(i64::MIN.into(), i64::MAX.into())? as i64),
        (ColumnType::Int, _) => Value::Int(fit(i32::MIN.into(), i32::MAX.into())? as i32),
        (ColumnType::SmallInt, _) => Value::SmallInt(fit(i16::MIN.into(), i16::MAX.into())? as i16),
        (ColumnType::TinyInt, _) => Value::TinyInt(fit(i8::MIN.into(), i8::MAX.into())? as i8),
        (ColumnType::Double, _) => Value::Double(float.ok_or_else(bad)?),
        (ColumnType::Real, _) => Value::Real(float.ok_or_else(bad)? as f32),
        (ColumnType::Boolean, Raw::Bool(b)) => Value::Boolean(*b),
        (ColumnType::Text, Raw::Str(s)) => Value::Text((*s).to_owned()),
        (ColumnType::Bytea, Raw::Bytes(b)) => Value::Bytea(b.to_vec()),
        (ColumnType::Bytea, Raw::Str(s)) => Value::Bytea(s.as_bytes().to_vec()),
        (ColumnType::Date, Raw::Date(d)) => Value::Date(*d),
        (ColumnType::Date, Raw::Str(s)) => Value::Date(strata::types::parse_date(s).ok_or_else(bad)?),
        (ColumnType::Timestamp, Raw::Ts(t, false)) => Value::Timestamp(*t),
        (ColumnType::TimestampTz, Raw::Ts(t, true)) => Value::TimestampTz(*t),
        (ColumnType::Timestamp, Raw::Str(s)) => Value::Timestamp(strata::types::parse_timestamp(s).ok_or_else(bad)?),
        (ColumnType::TimestampTz, Raw::Str(s)) => {
            Value::TimestampTz(strata::types::parse_timestamptz(s).ok_or_else(bad)?)
        }
        _ => return Err(bad()),
    })
}

/// Rows per batch the Parquet reader decodes at once.
const PARQUET_BATCH: usize = 8192;

fn parquet_rows<'a>(t: &'a Table, path: &'a Path) -> Result<RowStream<'a>, CliError> {
    let io = |e: String| CliError::new("bad_input", format!("{}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| CliError::new("io", format!("{}: {e}", path.display())))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.with_batch_size(PARQUET_BATCH).build())
        .map_err(|e| io(e.to_string()))?;
    let schema = t.schema();
    let mut map = Vec::new();
    for f in reader.schema().fields() {
        let c =
            schema.column_index(f.name()).ok_or_else(|| io(format!("column `{}` is not in the table", f.name())))?;
        map.push(c);
    }
    for &k in schema.primary_key() {
        if !map.contains(&k) {
            return Err(io(format!("key column `{}` is missing from the file", schema.columns()[k].name)));
        }
    }
    let width = schema.columns().len();
    let mut n = 0u64;
    let rows = reader.flat_map(move |batch| -> Box<dyn Iterator<Item = Result<Vec<Value>, CliError>>> {
        let batch = match batch {
            Ok(b) => b,
            Err(e) => return Box::new(std::iter::once(Err(io(e.to_string())))),
        };
        let first = n;
        n += batch.num_rows() as u64;
        let map = map.clone();
        Box::new((0..batch.num_rows()).map(move |i| {
            let row_no = first + i as u64 + 1;
            let mut out = vec![Value::Null; width];
            for (a, &c) in batch.columns().iter().zip(&map) {
                let col = &schema.columns()[c];
                let raw = raw_at(a.as_ref(), i).map_err(|e| io(format!("row {row_no}, column `{}`: {e}", col.name)))?;
                out[c] =
                    from_parquet(col.ty, &raw).map_err(|e| io(format!("row {row_no}, column `{}`: {e}", col.name)))?;
            }
            t.check_row(&out).map_err(|e| io(format!("row {row_no}: {e}")))?;
            Ok(out)
        }))
    });
    Ok(Box::new(rows))
}

/// Loads a CSV file, or a Parquet file (by its `.parquet` extension), into `table`: every row is
/// checked before anything is written, then rows go in as atomic ingests of [`INGEST_ROWS`]
/// (batches of [`BATCH`] for lineage-engine tables). Returns rows written.
pub fn load_file(db: &Db, table: &str, path: &Path) -> Result<u64, CliError> {
    let t = db.table(table)?;
    strata_sql::indexes::refuse_writes_outside_sql(db, &t).map_err(crate::exec::sql_error)?;
    let parquet = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("parquet"));
    let open = || if parquet { parquet_rows(&t, path) } else { csv_rows(&t, path) };
    let check = bar(0, "checking");
    let mut rows = 0u64;
    for r in open()? {
        r?;
        rows += 1;
        if rows.is_multiple_of(PROGRESS_STEP) {
            check.inc(PROGRESS_STEP);
        }
    }
    check.finish_and_clear();
    let pb = bar(rows, "loading");
    if t.info().options.engine == strata::Engine::Lsm {
        // The file is read on this thread while the chunk before is ingested on another.
        let written = std::thread::scope(|s| -> Result<u64, CliError> {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Vec<Value>>>(1);
            let t = &t;
            let ingester = s.spawn(move || -> Result<u64, CliError> {
                let mut written = 0u64;
                for chunk in rx {
                    t.ingest(&chunk)?;
                    written += chunk.len() as u64;
                }
                Ok(written)
            });
            let mut chunk: Vec<Vec<Value>> = Vec::with_capacity(INGEST_ROWS.min(rows as usize));
            let mut read = Ok(());
            for r in open()? {
                match r {
                    Ok(r) => chunk.push(r),
                    Err(e) => {
                        read = Err(e);
                        break;
                    }
                }
                if chunk.len().is_multiple_of(PROGRESS_STEP as usize) {
                    pb.inc(PROGRESS_STEP);
                }
                if chunk.len() >= INGEST_ROWS {
                    let full = std::mem::replace(&mut chunk, Vec::with_capacity(INGEST_ROWS));
                    if tx.send(full).is_err() {
                        // The ingester stopped on an error, reported below.
                        break;
                    }
                }
            }
            if read.is_ok() && !chunk.is_empty() {
                let _ = tx.send(chunk);
            }
            drop(tx);
            let written = ingester.join().map_err(|_| CliError::new("internal", "the ingest thread panicked"))??;
            read.map(|()| written)
        })?;
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
