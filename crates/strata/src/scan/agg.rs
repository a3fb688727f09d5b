//! Aggregate states: updated from arrays (min and max with arrow's kernels; counts from null
//! counts; sums widened, since arrow's sum keeps the input type and a SMALLINT column's sum
//! overflows it), from zone maps where those are exact, and merged across partitions.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow_arith::aggregate;
use arrow_array::cast::AsArray;
use arrow_array::types::{Date32Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef};

use super::arrow::{arrow_type, repeat};
use super::cnf::compare;
use super::AggFunc;
use crate::error::{Error, Result};
use crate::sst::zone::ZoneMap;
use crate::types::{ColumnType, Value};

/// One aggregate of a plan, resolved to its column.
#[derive(Debug, Clone)]
pub(crate) struct AggSpec {
    pub func: AggFunc,
    /// Schema index and type of the column (`None`: `count(*)`).
    pub column: Option<(usize, ColumnType)>,
    pub name: String,
}

impl AggSpec {
    fn is_float(&self) -> bool {
        matches!(self.column, Some((_, ColumnType::Double | ColumnType::Real)))
    }

    /// The column type of the result: BIGINT for counts and integer sums, DOUBLE for averages
    /// and float sums, the column's own type for min and max.
    pub(crate) fn result_type(&self) -> ColumnType {
        match (self.func, self.column) {
            (AggFunc::Count, _) => ColumnType::BigInt,
            (AggFunc::Avg, _) => ColumnType::Double,
            (AggFunc::Sum, _) if self.is_float() => ColumnType::Double,
            (AggFunc::Sum, _) => ColumnType::BigInt,
            (AggFunc::Min | AggFunc::Max, Some((_, ty))) => ty,
            // A plan never holds min(*) or max(*).
            (AggFunc::Min | AggFunc::Max, None) => ColumnType::BigInt,
        }
    }
}

/// The running state of one aggregate.
#[derive(Debug, Clone, Default)]
pub(crate) struct AggState {
    /// Rows (count(*)) or non-NULL values seen.
    count: u64,
    int_sum: i128,
    float_sum: f64,
    /// Min or max so far.
    best: Option<Value>,
}

/// Sum of the non-NULL values of an integer array, widened.
fn int_sum(a: &dyn Array) -> i128 {
    fn add<T>(values: &[T], nulls: Option<&arrow_buffer::NullBuffer>) -> i128
    where
        T: Copy + Into<i64>,
    {
        match nulls {
            None => values.iter().map(|&v| i128::from(v.into())).sum(),
            Some(n) => n.valid_indices().map(|i| i128::from(values[i].into())).sum(),
        }
    }
    /// BIGINTs without NULLs: the low and the high 32 bits summed apart in 64-bit lanes (which
    /// vectorize, unlike 128-bit additions), 2^31 values at a time so neither sum overflows.
    fn add64(values: &[i64]) -> i128 {
        values
            .chunks(1 << 31)
            .map(|c| {
                let lo: u64 = c.iter().map(|&v| v as u64 & 0xFFFF_FFFF).sum();
                let hi: i64 = c.iter().map(|&v| v >> 32).sum();
                (i128::from(hi) << 32) + i128::from(lo)
            })
            .sum()
    }
    match (a.data_type(), a.nulls()) {
        (DataType::Int64, None) => add64(a.as_primitive::<Int64Type>().values()),
        // Few NULLs (such as rows masked out): every value, less the NULL ones.
        (DataType::Int64, Some(n)) if n.null_count() * 8 < n.len() => {
            let v = a.as_primitive::<Int64Type>().values();
            add64(v) - (!n.inner()).set_indices().map(|i| i128::from(v[i])).sum::<i128>()
        }
        (DataType::Int64, _) => add(a.as_primitive::<Int64Type>().values(), a.nulls()),
        (DataType::Int32, _) => add(a.as_primitive::<Int32Type>().values(), a.nulls()),
        (DataType::Int16, _) => add(a.as_primitive::<Int16Type>().values(), a.nulls()),
        (DataType::Int8, _) => add(a.as_primitive::<Int8Type>().values(), a.nulls()),
        _ => 0,
    }
}

/// Sum of the non-NULL values of a float array, in f64.
fn float_sum(a: &dyn Array) -> f64 {
    match a.data_type() {
        DataType::Float64 => aggregate::sum(a.as_primitive::<Float64Type>()).unwrap_or(0.0),
        DataType::Float32 => {
            let p = a.as_primitive::<Float32Type>();
            match p.nulls() {
                None => p.values().iter().map(|&v| f64::from(v)).sum(),
                Some(n) => n.valid_indices().map(|i| f64::from(p.values()[i])).sum(),
            }
        }
        _ => 0.0,
    }
}

/// The smallest (`max` false) or largest value of an array.
fn extreme(a: &dyn Array, max: bool) -> Option<Value> {
    macro_rules! prim {
        ($t:ty, $v:path) => {{
            let p = a.as_primitive::<$t>();
            (if max { aggregate::max(p) } else { aggregate::min(p) }).map($v)
        }};
    }
    match a.data_type() {
        DataType::Int64 => prim!(Int64Type, Value::BigInt),
        DataType::Int32 => prim!(Int32Type, Value::Int),
        DataType::Int16 => prim!(Int16Type, Value::SmallInt),
        DataType::Int8 => prim!(Int8Type, Value::TinyInt),
        DataType::Float64 => prim!(Float64Type, Value::Double),
        DataType::Float32 => prim!(Float32Type, Value::Real),
        DataType::Date32 => prim!(Date32Type, Value::Date),
        DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None) => {
            prim!(arrow_array::types::TimestampMicrosecondType, Value::Timestamp)
        }
        DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some(_)) => {
            prim!(arrow_array::types::TimestampMicrosecondType, Value::TimestampTz)
        }
        DataType::Boolean => {
            let b = a.as_boolean();
            (if max { aggregate::max_boolean(b) } else { aggregate::min_boolean(b) }).map(Value::Boolean)
        }
        DataType::Utf8 => {
            let s = a.as_string::<i32>();
            (if max { aggregate::max_string(s) } else { aggregate::min_string(s) }).map(|v| Value::Text(v.to_string()))
        }
        DataType::Binary => {
            let b = a.as_binary::<i32>();
            (if max { aggregate::max_binary(b) } else { aggregate::min_binary(b) }).map(|v| Value::Bytea(v.to_vec()))
        }
        _ => None,
    }
}

impl AggState {
    fn offer(&mut self, v: Option<Value>, max: bool) {
        let Some(v) = v else { return };
        let better = match &self.best {
            None => true,
            Some(b) => compare(&v, b) == if max { Ordering::Greater } else { Ordering::Less },
        };
        if better {
            self.best = Some(v);
        }
    }

    /// Adds `rows` rows whose column values (already filtered) are `values` (`None` for
    /// `count(*)`).
    pub(crate) fn update(&mut self, spec: &AggSpec, rows: usize, values: Option<&ArrayRef>) {
        let Some(a) = values else {
            self.count += rows as u64;
            return;
        };
        self.count += (a.len() - a.null_count()) as u64;
        match spec.func {
            AggFunc::Count => {}
            AggFunc::Sum | AggFunc::Avg if spec.is_float() => self.float_sum += float_sum(a.as_ref()),
            AggFunc::Sum | AggFunc::Avg => self.int_sum += int_sum(a.as_ref()),
            AggFunc::Min => self.offer(extreme(a.as_ref(), false), false),
            AggFunc::Max => self.offer(extreme(a.as_ref(), true), true),
        }
    }

    /// Whether `spec` can be updated from a zone map alone (exact count, min and max).
    pub(crate) fn zone_answers(spec: &AggSpec, zone: Option<&ZoneMap>, rows: u64) -> bool {
        match (spec.func, spec.column, zone) {
            (AggFunc::Count, None, _) => true,
            (AggFunc::Count, Some(_), Some(_)) => true,
            // Bounds are exact unless the block holds only NULLs or they were not kept.
            (AggFunc::Min | AggFunc::Max, Some(_), Some(z)) => z.nulls >= rows || (z.min.is_some() && z.max.is_some()),
            _ => false,
        }
    }

    /// Adds a block of `rows` rows, all passing, from its zone map (see [`Self::zone_answers`]).
    pub(crate) fn update_from_zone(&mut self, spec: &AggSpec, zone: Option<&ZoneMap>, rows: u64) {
        let Some(z) = zone else {
            self.count += rows;
            return;
        };
        self.count += rows.saturating_sub(z.nulls);
        match spec.func {
            AggFunc::Min => self.offer(z.min.clone(), false),
            AggFunc::Max => self.offer(z.max.clone(), true),
            _ => {}
        }
    }

    /// Whether offering `v` to a min or max (`spec`) could change it (states only get better,
    /// so a value it cannot take now it never takes).
    pub(crate) fn could_take(&self, spec: &AggSpec, v: &Value) -> bool {
        if v.is_null() {
            return false;
        }
        match (&self.best, spec.func) {
            (Some(b), AggFunc::Max) => compare(v, b) == Ordering::Greater,
            (Some(b), AggFunc::Min) => compare(v, b) == Ordering::Less,
            _ => true,
        }
    }

    /// Whether a min or max (`spec`) already holds a value no value of a block with zone map
    /// `z` can beat.
    pub(crate) fn beats_zone(&self, spec: &AggSpec, z: &ZoneMap) -> bool {
        let bound = match spec.func {
            AggFunc::Max => &z.max,
            AggFunc::Min => &z.min,
            _ => return false,
        };
        match (bound, &self.best) {
            (Some(b), Some(best)) => {
                let ord = compare(best, b);
                if spec.func == AggFunc::Max {
                    ord != Ordering::Less
                } else {
                    ord != Ordering::Greater
                }
            }
            // Without bounds only a block of NULLs is known to add nothing.
            (None, _) => z.min.is_none() && z.max.is_none() && z.nulls >= z.carried,
            (Some(_), None) => false,
        }
    }

    /// Folds in another partition's state.
    pub(crate) fn merge(&mut self, spec: &AggSpec, other: AggState) {
        self.count += other.count;
        self.int_sum += other.int_sum;
        self.float_sum += other.float_sum;
        match spec.func {
            AggFunc::Min => self.offer(other.best, false),
            AggFunc::Max => self.offer(other.best, true),
            _ => {}
        }
    }

    fn finish(&self, spec: &AggSpec) -> Result<Value> {
        Ok(match spec.func {
            AggFunc::Count => Value::BigInt(i64::try_from(self.count).unwrap_or(i64::MAX)),
            _ if self.count == 0 => Value::Null,
            AggFunc::Sum if spec.is_float() => Value::Double(self.float_sum),
            AggFunc::Sum => Value::BigInt(
                i64::try_from(self.int_sum)
                    .map_err(|_| Error::InvalidArgument(format!("{} overflows BIGINT", spec.name)))?,
            ),
            AggFunc::Avg if spec.is_float() => Value::Double(self.float_sum / self.count as f64),
            AggFunc::Avg => Value::Double(self.int_sum as f64 / self.count as f64),
            AggFunc::Min | AggFunc::Max => self.best.clone().unwrap_or(Value::Null),
        })
    }
}

/// The schema of the aggregate batch: one nullable column per aggregate.
pub(crate) fn schema(specs: &[AggSpec]) -> SchemaRef {
    Arc::new(ArrowSchema::new(
        specs.iter().map(|s| Field::new(s.name.clone(), arrow_type(s.result_type()), true)).collect::<Vec<_>>(),
    ))
}

/// The one-row batch of finished aggregates.
pub(crate) fn finish_batch(specs: &[AggSpec], states: &[AggState]) -> Result<RecordBatch> {
    let columns = specs
        .iter()
        .zip(states)
        .map(|(spec, st)| Ok(repeat(spec.result_type(), &st.finish(spec)?, 1)))
        .collect::<Result<Vec<ArrayRef>>>()?;
    RecordBatch::try_new(schema(specs), columns).map_err(|e| Error::InvalidArgument(format!("aggregate batch: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bigint_sums_are_exact_at_the_extremes() {
        let vals: Vec<i64> = vec![i64::MAX, i64::MAX, i64::MIN, -1, 0, 1, i64::MIN + 1, 0x1_0000_0000, -0x1_0000_0001];
        let want: i128 = vals.iter().map(|&v| i128::from(v)).sum();
        let a = arrow_array::Int64Array::from(vals.clone());
        assert_eq!(int_sum(&a), want);
        let with_null = arrow_array::Int64Array::from(vals.iter().map(|&v| Some(v)).chain([None]).collect::<Vec<_>>());
        assert_eq!(int_sum(&with_null), want);
        // Few NULLs among many values (the subtracting path), and many NULLs.
        for every in [3, 20] {
            let opt: Vec<Option<i64>> =
                (0..1000i64).map(|i| (i % every != 0).then_some(i64::MAX - i * 1_000_003)).collect();
            let want: i128 = opt.iter().flatten().map(|&v| i128::from(v)).sum();
            assert_eq!(int_sum(&arrow_array::Int64Array::from(opt)), want, "one NULL in {every}");
        }
        let many = arrow_array::Int64Array::from(vec![i64::MAX; 10_000]);
        assert_eq!(int_sum(&many), i128::from(i64::MAX) * 10_000);
    }
}
