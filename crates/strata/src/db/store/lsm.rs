//! The LSM engine's side of a table: its rows live in the shared memtables and in the table's
//! files, found through the read view, so the store itself holds nothing. What is particular
//! to it here is what it answers from file metadata: the planner's statistics and the access
//! histograms.

use std::sync::Arc;

use super::super::stats::HeatBucket;
use super::super::{DbInner, ReadOptions, TableInfo};
use crate::error::Result;
use crate::read::ReadPoint;
use crate::sst::zone::ZoneMap;
use crate::types::key::{decode_key, decode_value};
use crate::types::{ColumnType, Value};

/// An LSM table's store (stateless: the version holds the table's files).
pub(crate) struct LsmStore;

/// One key column's value: its encoding and the value.
type KeyColumn = (Vec<u8>, Value);

/// An integer or DATE value as an `i64`.
fn integer_of(v: &Value) -> Option<i64> {
    match v {
        Value::BigInt(x) | Value::Timestamp(x) | Value::TimestampTz(x) => Some(*x),
        Value::Int(x) | Value::Date(x) => Some(i64::from(*x)),
        Value::SmallInt(x) => Some(i64::from(*x)),
        Value::TinyInt(x) => Some(i64::from(*x)),
        _ => None,
    }
}

/// `x` as a value of integer or DATE type `ty`, if it fits.
fn integer_as(ty: ColumnType, x: i64) -> Option<Value> {
    Some(match ty {
        ColumnType::BigInt => Value::BigInt(x),
        ColumnType::Timestamp => Value::Timestamp(x),
        ColumnType::TimestampTz => Value::TimestampTz(x),
        ColumnType::Int => Value::Int(i32::try_from(x).ok()?),
        ColumnType::Date => Value::Date(i32::try_from(x).ok()?),
        ColumnType::SmallInt => Value::SmallInt(i16::try_from(x).ok()?),
        ColumnType::TinyInt => Value::TinyInt(i8::try_from(x).ok()?),
        _ => return None,
    })
}

/// A key's first column: its encoding (memcomparable, so byte order is value order) and value.
fn first_key_column(info: &TableInfo, key: &[u8]) -> Option<KeyColumn> {
    let (v, used) = decode_value(info.key_types[0], key).ok()?;
    Some((key.get(..used)?.to_vec(), v))
}

/// The smallest and largest first key column in the files at `rp` (the memtables are not
/// read); `None` without files.
fn first_key_span(info: &TableInfo, rp: &ReadPoint) -> Option<(KeyColumn, KeyColumn)> {
    let files = || rp.t.levels.iter().flat_map(|l| l.files());
    let lo = files().map(|f| f.smallest.as_slice()).min()?;
    let hi = files().map(|f| f.largest.as_slice()).max()?;
    Some((first_key_column(info, lo)?, first_key_column(info, hi)?))
}

impl LsmStore {
    /// An analytical scan of `[lo, hi)` by the scan engine, reading at the point `ropts` gives
    /// (taken when the scan starts).
    pub(crate) fn scan_batches(
        db: &DbInner,
        info: &Arc<TableInfo>,
        (lo, hi): (Vec<u8>, Option<Vec<u8>>),
        req: &crate::scan::ScanRequest,
        ropts: &ReadOptions<'_>,
    ) -> Result<crate::scan::BatchIter> {
        let point = || db.read_point_of(info, ropts);
        let at = crate::scan::ReadAt { snapshot: ropts.snapshot.map(|s| s.seq()), point: &point };
        crate::scan::run_scan(&db.scans, info, lo, hi, req, &at)
    }

    /// Counted without reading data, from the versions each level's files store and the
    /// memtables' entries (up to 65,536 per memtable).
    pub(crate) fn estimated_rows(db: &DbInner, info: &TableInfo) -> Result<u64> {
        let rp = db.read_point_of(info, &ReadOptions::default())?;
        let mut rows = 0u64;
        for (level, l) in rp.t.levels.iter().enumerate() {
            let run_rows = l.runs.iter().map(|r| r.files.iter().map(|f| f.entries).sum::<u64>());
            // Level 0's runs each hold whole rows of their own keys; a deeper level's runs are its
            // column groups, each holding every key of the level.
            rows += if level == 0 { run_rows.sum() } else { run_rows.max().unwrap_or(0) };
        }
        // Counting walks the memtable: a bound keeps planning cheap on a table taking writes.
        const MEMTABLE_CAP: usize = 1 << 16;
        for m in std::iter::once(&rp.view.mem).chain(rp.view.imm.iter()) {
            rows += m.count_of(info.id, MEMTABLE_CAP) as u64;
        }
        Ok(rows)
    }

    /// Cuts from file metadata alone: an integer or DATE first key column evenly between its
    /// smallest and largest stored value, other types where the files of the fullest level
    /// start.
    pub(crate) fn key_splits(db: &DbInner, info: &TableInfo, n: usize) -> Result<Vec<Value>> {
        if n <= 1 {
            return Ok(Vec::new());
        }
        let rp = db.read_point_of(info, &ReadOptions::default())?;
        let Some(((lo_key, lo), (_, hi))) = first_key_span(info, &rp) else {
            return Ok(Vec::new());
        };
        if let (Some(lo), Some(hi)) = (integer_of(&lo), integer_of(&hi)) {
            let span = i128::from(hi) - i128::from(lo) + 1;
            let mut cuts: Vec<i64> = Vec::with_capacity(n - 1);
            for i in 1..n as i128 {
                let at = i64::try_from(i128::from(lo) + span * i / n as i128).unwrap_or(hi);
                if at > lo && cuts.last().is_none_or(|&c| c < at) {
                    cuts.push(at);
                }
            }
            return Ok(cuts.into_iter().filter_map(|x| integer_as(info.key_types[0], x)).collect());
        }
        // Where the files of the fullest level start, thinned to `n - 1` cuts.
        let fullest = rp.t.levels.iter().max_by_key(|l| l.files().map(|f| f.entries).sum::<u64>());
        let mut starts: Vec<KeyColumn> = Vec::new();
        for f in fullest.and_then(|l| l.runs.first()).map_or(&[][..], |r| &r.files[..]) {
            if let Some((k, v)) = first_key_column(info, &f.smallest) {
                if k > lo_key && starts.last().is_none_or(|(s, _)| *s < k) {
                    starts.push((k, v));
                }
            }
        }
        let per = (starts.len() + 1).div_ceil(n).max(1);
        Ok(starts.into_iter().skip(per - 1).step_by(per).take(n - 1).map(|(_, v)| v).collect())
    }

    /// From the zone maps of every block of every file and the memtables' bounds; reads no
    /// data (each open file merges its index's zone maps once and keeps the result).
    pub(crate) fn column_bounds(db: &DbInner, info: &TableInfo) -> Result<Vec<Option<(Value, Value)>>> {
        let schema = &info.schema;
        let mut out = vec![None; schema.columns().len()];
        let rp = db.read_point_of(info, &ReadOptions::default())?;
        let values = info.value_types.len();
        let mut zones: Vec<Option<ZoneMap>> = vec![None; values];
        let mut widen = |vi: usize, z: ZoneMap| {
            zones[vi] = Some(match zones[vi].take() {
                Some(a) => a.merge(&z),
                None => z,
            });
        };
        for f in rp.t.levels.iter().flat_map(|l| l.files()) {
            let r = rp.tables.get(f.number)?;
            for vi in 0..values {
                if let Some(z) = r.column_zone(vi) {
                    widen(vi, z.clone());
                }
            }
        }
        for m in std::iter::once(&rp.view.mem).chain(rp.view.imm.iter()) {
            if let Some(b) = m.bounds(info.id) {
                for vi in 0..values {
                    if let Some(z) = b.zone(vi) {
                        widen(vi, z);
                    }
                }
            }
        }
        for (&c, z) in schema.value_columns().iter().zip(zones) {
            if let Some(ZoneMap { min: Some(min), max: Some(max), .. }) = z {
                out[c] = Some((min, max));
            }
        }
        if let Some(((_, lo), (_, hi))) = first_key_span(info, &rp) {
            out[schema.primary_key()[0]] = Some((lo, hi));
        }
        Ok(out)
    }

    /// Per level, one bucket per file in key order, with the point reads it served and the
    /// probes that found nothing in it.
    pub(crate) fn access_histogram(db: &DbInner, info: &TableInfo) -> Result<Vec<HeatBucket>> {
        let rp = db.read_point_of(info, &ReadOptions::default())?;
        let heat = db.tables.heat.snapshot();
        let key = |k: &[u8]| decode_key(&info.key_types, k).unwrap_or_default();
        let mut buckets = Vec::new();
        for (level, l) in rp.t.levels.iter().enumerate() {
            for f in l.files() {
                let (reads, empty_probes) = heat.get(&f.number).copied().unwrap_or((0, 0));
                buckets.push(HeatBucket {
                    level,
                    file: f.number,
                    tier: f.tier,
                    first_key: key(&f.smallest),
                    last_key: key(&f.largest),
                    reads,
                    empty_probes,
                });
            }
        }
        Ok(buckets)
    }
}
