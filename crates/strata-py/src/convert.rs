//! Python values to strata values and back, checked against each column's type.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};
use strata::{Column, ColumnType, Schema, Value};

/// `obj` as a value of `column`'s type (`None` is NULL; the engine refuses it in a NOT NULL
/// column). Integers must fit the column's width; a float column takes ints too; an int column
/// does not take floats or bools.
pub(crate) fn value(obj: &Bound<'_, PyAny>, column: &Column) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    let wrong = || {
        PyTypeError::new_err(format!(
            "column `{}` is {}: cannot store a Python {}",
            column.name,
            column.ty.name(),
            obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "object".into())
        ))
    };
    let is_bool = obj.is_instance_of::<PyBool>();
    let int = |lo: i64, hi: i64| -> PyResult<i64> {
        if is_bool || !obj.is_instance_of::<PyInt>() {
            return Err(wrong());
        }
        let v: i64 = obj.extract().map_err(|_| out_of_range(column))?;
        if v < lo || v > hi {
            return Err(out_of_range(column));
        }
        Ok(v)
    };
    let v = match column.ty {
        ColumnType::BigInt => Value::BigInt(int(i64::MIN, i64::MAX)?),
        ColumnType::Int => Value::Int(int(i32::MIN.into(), i32::MAX.into())? as i32),
        ColumnType::SmallInt => Value::SmallInt(int(i16::MIN.into(), i16::MAX.into())? as i16),
        ColumnType::TinyInt => Value::TinyInt(int(i8::MIN.into(), i8::MAX.into())? as i8),
        ColumnType::Double | ColumnType::Real => {
            if is_bool || !(obj.is_instance_of::<PyFloat>() || obj.is_instance_of::<PyInt>()) {
                return Err(wrong());
            }
            let f: f64 = obj.extract()?;
            if column.ty == ColumnType::Double {
                Value::Double(f)
            } else if f.is_finite() && !(f as f32).is_finite() {
                return Err(out_of_range(column));
            } else {
                Value::Real(f as f32)
            }
        }
        ColumnType::Boolean => {
            if !is_bool {
                return Err(wrong());
            }
            Value::Boolean(obj.extract()?)
        }
        ColumnType::Text => {
            if !obj.is_instance_of::<PyString>() {
                return Err(wrong());
            }
            Value::Text(obj.extract()?)
        }
        ColumnType::Date => Value::Date(date_days(obj)?.ok_or_else(wrong)?),
        ColumnType::Timestamp => Value::Timestamp(datetime_micros(obj, false)?.ok_or_else(wrong)?),
        ColumnType::TimestampTz => Value::TimestampTz(datetime_micros(obj, true)?.ok_or_else(wrong)?),
        ColumnType::Bytea => {
            if let Ok(b) = obj.cast::<PyBytes>() {
                Value::Bytea(b.as_bytes().to_vec())
            } else if let Ok(b) = obj.cast::<PyByteArray>() {
                Value::Bytea(b.to_vec())
            } else {
                return Err(wrong());
            }
        }
    };
    Ok(v)
}

/// `date.toordinal()` of 1970-01-01, where DATE days start.
const EPOCH_ORDINAL: i64 = 719_163;

/// Python's `datetime.date` and `datetime.datetime` types, looked up once per process (every
/// DATE value converted needs them).
fn date_types(py: Python<'_>) -> PyResult<(&Bound<'_, PyType>, &Bound<'_, PyType>)> {
    static DATE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    static DATETIME: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    Ok((DATE.import(py, "datetime", "date")?, DATETIME.import(py, "datetime", "datetime")?))
}

/// The DATE days of a `datetime.date` (not a `datetime.datetime`, whose time would be lost);
/// `None` for any other object.
fn date_days(obj: &Bound<'_, PyAny>) -> PyResult<Option<i32>> {
    let (date, datetime) = date_types(obj.py())?;
    if !obj.is_instance(date)? || obj.is_instance(datetime)? {
        return Ok(None);
    }
    let ordinal: i64 = obj.call_method0("toordinal")?.extract()?;
    // Python's dates span years 1-9999, well inside i32 days.
    Ok(i32::try_from(ordinal - EPOCH_ORDINAL).ok())
}

/// `datetime.datetime(1970, 1, 1)`, `datetime.datetime(1970, 1, 1, tzinfo=timezone.utc)` and
/// `datetime.timedelta(microseconds=1)`, built once per process.
fn epochs(py: Python<'_>) -> PyResult<[Bound<'_, PyAny>; 3]> {
    static EPOCHS: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();
    let t = EPOCHS.get_or_try_init(py, || -> PyResult<Py<PyTuple>> {
        let m = py.import("datetime")?;
        let datetime = m.getattr("datetime")?;
        let utc = m.getattr("timezone")?.getattr("utc")?;
        let naive = datetime.call1((1970, 1, 1))?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("tzinfo", utc)?;
        let aware = datetime.call((1970, 1, 1), Some(&kwargs))?;
        let micro = PyDict::new(py);
        micro.set_item("microseconds", 1)?;
        let one = m.getattr("timedelta")?.call((), Some(&micro))?;
        Ok(PyTuple::new(py, [naive, aware, one])?.unbind())
    })?;
    let t = t.bind(py);
    Ok([t.get_item(0)?, t.get_item(1)?, t.get_item(2)?])
}

/// The microseconds since 1970 of a `datetime.datetime`: for TIMESTAMP (`tz` false) a naive one,
/// for TIMESTAMPTZ an aware one (converted to UTC) or a naive one read as UTC; `None` for any
/// other object.
fn datetime_micros(obj: &Bound<'_, PyAny>, tz: bool) -> PyResult<Option<i64>> {
    let (_, datetime) = date_types(obj.py())?;
    if !obj.is_instance(datetime)? {
        return Ok(None);
    }
    let aware = !obj.getattr("tzinfo")?.is_none();
    if aware && !tz {
        return Err(PyValueError::new_err(
            "a TIMESTAMP column takes a naive datetime (no tzinfo); use TIMESTAMPTZ for instants",
        ));
    }
    let [naive_epoch, utc_epoch, micro] = epochs(obj.py())?;
    let since = obj.call_method1("__sub__", (if aware { utc_epoch } else { naive_epoch },))?;
    Ok(Some(since.call_method1("__floordiv__", (micro,))?.extract()?))
}

/// A `datetime.datetime` of TIMESTAMP (naive) or TIMESTAMPTZ (in UTC) microseconds
/// (`OverflowError` beyond Python's years 1-9999).
fn py_datetime<'py>(py: Python<'py>, micros: i64, tz: bool) -> PyResult<Bound<'py, PyAny>> {
    let [naive_epoch, utc_epoch, micro] = epochs(py)?;
    let delta = micro.call_method1("__mul__", (micros,))?;
    (if tz { utc_epoch } else { naive_epoch }).call_method1("__add__", (delta,))
}

/// A `datetime.date` of DATE days (`OverflowError` beyond Python's years 1-9999).
fn py_date<'py>(py: Python<'py>, days: i32) -> PyResult<Bound<'py, PyAny>> {
    let (date, _) = date_types(py)?;
    date.call_method1("fromordinal", (i64::from(days) + EPOCH_ORDINAL,))
}

fn out_of_range(column: &Column) -> PyErr {
    PyOverflowError::new_err(format!("value out of range for column `{}` ({})", column.name, column.ty.name()))
}

/// A strata value as a Python object.
pub(crate) fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::BigInt(x) => x.into_pyobject(py)?.into_any(),
        Value::Int(x) => x.into_pyobject(py)?.into_any(),
        Value::SmallInt(x) => x.into_pyobject(py)?.into_any(),
        Value::TinyInt(x) => x.into_pyobject(py)?.into_any(),
        Value::Double(x) => x.into_pyobject(py)?.into_any(),
        Value::Real(x) => f64::from(*x).into_pyobject(py)?.into_any(),
        Value::Boolean(x) => PyBool::new(py, *x).to_owned().into_any(),
        Value::Text(s) => PyString::new(py, s).into_any(),
        Value::Bytea(b) => PyBytes::new(py, b).into_any(),
        Value::Date(d) => py_date(py, *d)?,
        Value::Timestamp(t) => py_datetime(py, *t, false)?,
        Value::TimestampTz(t) => py_datetime(py, *t, true)?,
    })
}

/// A primary key: a scalar for a one-column key, a tuple or list of one value per key column
/// otherwise (a one-element tuple is accepted for a one-column key too).
pub(crate) fn key(obj: &Bound<'_, PyAny>, schema: &Schema) -> PyResult<Vec<Value>> {
    let pk = schema.primary_key();
    let columns = schema.columns();
    let parts: Vec<Bound<'_, PyAny>> = if obj.is_instance_of::<PyTuple>() || obj.is_instance_of::<PyList>() {
        obj.try_iter()?.collect::<PyResult<_>>()?
    } else {
        vec![obj.clone()]
    };
    if parts.len() != pk.len() {
        let names: Vec<&str> = pk.iter().map(|&c| columns[c].name.as_str()).collect();
        return Err(PyValueError::new_err(format!(
            "the primary key is ({}): expected {} value{}, got {}",
            names.join(", "),
            pk.len(),
            if pk.len() == 1 { "" } else { "s" },
            parts.len()
        )));
    }
    parts.iter().zip(pk).map(|(p, &c)| value(p, &columns[c])).collect()
}

/// A whole row: a dict by column name (absent columns are NULL) or a sequence in schema order.
pub(crate) fn row(obj: &Bound<'_, PyAny>, table: &str, schema: &Schema) -> PyResult<Vec<Value>> {
    let columns = schema.columns();
    if let Ok(dict) = obj.cast::<PyDict>() {
        let mut row = vec![Value::Null; columns.len()];
        for (k, v) in dict.iter() {
            let name: String = k.extract().map_err(|_| PyTypeError::new_err("row keys must be column names (str)"))?;
            let Some(i) = schema.column_index(&name) else {
                return Err(crate::errors::engine(strata::Error::UnknownColumn {
                    table: table.to_string(),
                    column: name,
                }));
            };
            row[i] = value(&v, &columns[i])?;
        }
        return Ok(row);
    }
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(PyTypeError::new_err("a row is a dict or a sequence of values"));
    }
    let parts: Vec<Bound<'_, PyAny>> = obj
        .try_iter()
        .map_err(|_| PyTypeError::new_err("a row is a dict or a sequence of values"))?
        .collect::<PyResult<_>>()?;
    if parts.len() != columns.len() {
        return Err(PyValueError::new_err(format!(
            "table `{table}` has {} columns, the row has {} values",
            columns.len(),
            parts.len()
        )));
    }
    parts.iter().zip(columns).map(|(p, c)| value(p, c)).collect()
}

/// Column assignments of an update, by name.
pub(crate) fn assignments(dict: &Bound<'_, PyDict>, table: &str, schema: &Schema) -> PyResult<Vec<(String, Value)>> {
    let mut set = Vec::with_capacity(dict.len());
    for (k, v) in dict.iter() {
        let name: String = k.extract().map_err(|_| PyTypeError::new_err("update keys must be column names (str)"))?;
        let Some(i) = schema.column_index(&name) else {
            return Err(crate::errors::engine(strata::Error::UnknownColumn { table: table.to_string(), column: name }));
        };
        set.push((name, value(&v, &schema.columns()[i])?));
    }
    Ok(set)
}

/// A query parameter as a DataFusion literal (types are refined against what the statement
/// expects by the caller).
pub(crate) fn param(obj: &Bound<'_, PyAny>) -> PyResult<strata_sql::datafusion::scalar::ScalarValue> {
    use strata_sql::datafusion::scalar::ScalarValue;
    Ok(if obj.is_none() {
        ScalarValue::Null
    } else if obj.is_instance_of::<PyBool>() {
        ScalarValue::Boolean(Some(obj.extract()?))
    } else if obj.is_instance_of::<PyInt>() {
        ScalarValue::Int64(Some(
            obj.extract().map_err(|_| PyOverflowError::new_err("integer parameter does not fit in 64 bits"))?,
        ))
    } else if obj.is_instance_of::<PyFloat>() {
        ScalarValue::Float64(Some(obj.extract()?))
    } else if obj.is_instance_of::<PyString>() {
        ScalarValue::Utf8(Some(obj.extract()?))
    } else if let Ok(b) = obj.cast::<PyBytes>() {
        ScalarValue::Binary(Some(b.as_bytes().to_vec()))
    } else if let Some(days) = date_days(obj)? {
        ScalarValue::Date32(Some(days))
    } else {
        return Err(PyTypeError::new_err(format!(
            "parameters are None, bool, int, float, str, bytes or datetime.date; got {}",
            obj.get_type().name()?
        )));
    })
}
