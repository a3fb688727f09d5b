//! [`Table`]: the per-table API. Turns typed values into encoded operations (checking types and
//! NOT NULL on the way in) and decoded rows back out. Cheap to clone; usable from any thread.

use std::ops::Bound;
use std::sync::Arc;

use super::stats::HeatBucket;
use super::{DbInner, KeyRange, Projection, ReadOptions, TableInfo, WriteOptions};
use crate::error::{Error, Result};
use crate::lineage::{LineageRows, LineageTable};
use crate::mvcc::Kind;
use crate::read::{project_with, KeyOf, ReadPoint, ScanIter};
use crate::sst::zone::ZoneMap;
use crate::types::key::{decode_key, decode_value, encode_key};
use crate::types::row::encode_row_with;
use crate::types::{ColumnType, Schema, Value};
use crate::write::batch::{BatchOp, WriteBatch};

/// The smallest byte string greater than every string that starts with `p`; `None` if none.
fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut v = p.to_vec();
    while let Some(last) = v.pop() {
        if last < 0xFF {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}

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

/// One key column's value: its encoding and the value.
type KeyColumn = (Vec<u8>, Value);

/// A handle to one table.
#[derive(Clone)]
pub struct Table {
    db: Arc<DbInner>,
    info: Arc<TableInfo>,
    /// The table's data, when the lineage engine stores it.
    lineage: Option<Arc<LineageTable>>,
}

impl Table {
    pub(crate) fn new(db: Arc<DbInner>, info: Arc<TableInfo>) -> Self {
        let lineage = db.lineage_table(info.id);
        Table { db, info, lineage }
    }

    /// The table's definition.
    pub fn info(&self) -> &TableInfo {
        &self.info
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// The table's schema.
    pub fn schema(&self) -> &Schema {
        &self.info.schema
    }

    /// The table's options as created (or as a layout change left them).
    pub fn options(&self) -> &crate::catalog::TableOptions {
        &self.info.options
    }

    /// Hands out `n` consecutive values of the table's sequence `name` and returns the first.
    /// A sequence starts at 1 on first use and lives as long as its table; no value is handed
    /// out twice in the database's life, across restarts and crashes (values reserved but not
    /// handed out before a crash are skipped, so the values seen may have gaps). SQL's hidden
    /// row ids and SERIAL columns take their values here.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `n` of 0 or a sequence past `i64::MAX`; an error writing
    /// the manifest (the database is then read-only, as after any manifest failure).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use strata::{Column, ColumnType, Db, Options, Schema, TableOptions};
    /// let db = Db::open(dir.path(), Options::default()).unwrap();
    /// let s = Schema::new(vec![Column::new("id", ColumnType::BigInt)], &["id"]).unwrap();
    /// let t = db.create_table("t", s, TableOptions::default()).unwrap();
    /// assert_eq!(t.sequence("ids", 10).unwrap(), 1);
    /// assert_eq!(t.sequence("ids", 1).unwrap(), 11);
    /// ```
    pub fn sequence(&self, name: &str, n: u64) -> Result<i64> {
        self.db.sequence_values(&self.info, name, n)
    }

    fn column_error(&self, col: usize, message: String) -> Error {
        Error::TypeMismatch {
            table: self.info.name.clone(),
            column: self.info.schema.columns()[col].name.clone(),
            message,
        }
    }

    fn check(&self, col: usize, v: &Value) -> Result<()> {
        let c = &self.info.schema.columns()[col];
        if v.is_null() {
            if !c.nullable {
                return Err(self.column_error(col, "NULL in a NOT NULL column".into()));
            }
        } else if !v.has_type(c.ty) {
            return Err(self.column_error(col, format!("expected {}, got {}", c.ty.name(), v.type_name())));
        } else if let (Some(n), Value::Text(s)) = (c.max_chars, v) {
            // Counting characters only when the bytes could exceed the limit.
            if s.len() > n as usize && s.chars().count() > n as usize {
                return Err(self.column_error(col, format!("value too long: more than {n} characters")));
            }
        }
        Ok(())
    }

    /// Encodes a full key given in key-column order.
    pub(crate) fn encode_key(&self, key: &[Value]) -> Result<Vec<u8>> {
        self.encode_key_prefix(key, false)
    }

    fn encode_key_prefix(&self, key: &[Value], allow_prefix: bool) -> Result<Vec<u8>> {
        let pk = self.info.schema.primary_key();
        if key.len() > pk.len() || (!allow_prefix && key.len() != pk.len()) || key.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "table `{}` has a key of {} column(s), got {}",
                self.info.name,
                pk.len(),
                key.len()
            )));
        }
        for (&c, v) in pk.iter().zip(key) {
            self.check(c, v)?;
        }
        Ok(encode_key(&self.info.key_types[..key.len()], key))
    }

    /// Byte bounds `[lo, hi)` of a key range.
    pub(crate) fn encode_range(&self, r: &KeyRange) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
        let lo = match &r.start {
            Bound::Unbounded => Vec::new(),
            Bound::Included(k) => self.encode_key_prefix(k, true)?,
            Bound::Excluded(k) => match prefix_successor(&self.encode_key_prefix(k, true)?) {
                Some(s) => s,
                None => return Ok((vec![0xFF], Some(vec![0xFF]))),
            },
        };
        let hi = match &r.end {
            Bound::Unbounded => None,
            Bound::Excluded(k) => Some(self.encode_key_prefix(k, true)?),
            Bound::Included(k) => prefix_successor(&self.encode_key_prefix(k, true)?),
        };
        Ok((lo, hi))
    }

    /// The keys in both `a` and `b`: each bound is the tighter of the two, compared in key order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a bound is not a key prefix of the table's types.
    pub fn intersect(&self, a: &KeyRange, b: &KeyRange) -> Result<KeyRange> {
        let (a_lo, a_hi) = self.encode_range(a)?;
        let (b_lo, b_hi) = self.encode_range(b)?;
        // An empty range stays empty (a bound past the largest key encodes as one).
        if a_hi.as_ref().is_some_and(|h| *h <= a_lo) {
            return Ok(a.clone());
        }
        if b_hi.as_ref().is_some_and(|h| *h <= b_lo) {
            return Ok(b.clone());
        }
        let start = if a_lo >= b_lo { a.start.clone() } else { b.start.clone() };
        let end = match (a_hi, b_hi) {
            (None, _) => b.end.clone(),
            (Some(x), Some(y)) if y < x => b.end.clone(),
            _ => a.end.clone(),
        };
        Ok(KeyRange { start, end })
    }

    /// Checks that `row` is a row of the table as [`Table::insert`] would (its width, each
    /// value's type, NOT NULL), without writing or encoding it.
    pub fn check_row(&self, row: &[Value]) -> Result<()> {
        let schema = &self.info.schema;
        if row.len() != schema.columns().len() {
            return Err(Error::InvalidArgument(format!(
                "table `{}` has {} columns, the row has {}",
                self.info.name,
                schema.columns().len(),
                row.len()
            )));
        }
        for (c, v) in row.iter().enumerate() {
            self.check(c, v)?;
        }
        Ok(())
    }

    pub(crate) fn encode_insert(&self, row: &[Value]) -> Result<BatchOp> {
        let schema = &self.info.schema;
        self.check_row(row)?;
        let key_vals: Vec<Value> = schema.primary_key().iter().map(|&c| row[c].clone()).collect();
        let key = encode_key(&self.info.key_types, &key_vals);
        let vcols = schema.value_columns();
        let mut enc = Vec::with_capacity(16 + 8 * vcols.len());
        encode_row_with(&self.info.value_types, |i| vcols.get(i).map(|&c| &row[c]), &mut enc);
        Ok(BatchOp { table_id: self.info.id, kind: Kind::Put, key, row: enc })
    }

    pub(crate) fn encode_update(&self, key: &[Value], set: &[(&str, Value)]) -> Result<BatchOp> {
        let schema = &self.info.schema;
        let key = self.encode_key(key)?;
        let mut cells: Vec<Option<&Value>> = vec![None; self.info.value_types.len()];
        for (name, v) in set {
            let c = schema
                .column_index(name)
                .ok_or_else(|| Error::UnknownColumn { table: self.info.name.clone(), column: (*name).to_owned() })?;
            let vi = schema.value_index(c).ok_or_else(|| {
                Error::InvalidArgument(format!("cannot update primary key column `{name}`; delete and insert instead"))
            })?;
            self.check(c, v)?;
            if cells[vi].is_some() {
                return Err(Error::InvalidArgument(format!("column `{name}` is set twice")));
            }
            cells[vi] = Some(v);
        }
        let mut enc = Vec::new();
        encode_row_with(&self.info.value_types, |i| cells.get(i).copied().flatten(), &mut enc);
        Ok(BatchOp { table_id: self.info.id, kind: Kind::Update, key, row: enc })
    }

    pub(crate) fn encode_delete(&self, key: &[Value]) -> Result<BatchOp> {
        Ok(BatchOp { table_id: self.info.id, kind: Kind::Delete, key: self.encode_key(key)?, row: Vec::new() })
    }

    fn write_one(&self, op: BatchOp, opts: &WriteOptions) -> Result<()> {
        let mut b = WriteBatch::new();
        b.push(op);
        self.db.write(b, opts)
    }

    /// Inserts a full row (values in schema order). A row with the same key is replaced.
    pub fn insert(&self, row: &[Value]) -> Result<()> {
        self.insert_with(row, &WriteOptions::default())
    }

    /// [`Table::insert`] with explicit write options.
    pub fn insert_with(&self, row: &[Value], opts: &WriteOptions) -> Result<()> {
        let op = self.encode_insert(row)?;
        self.write_one(op, opts)
    }

    /// Bulk-loads `rows` (full rows, in any order; of rows with one key the last is kept):
    /// they are written straight into files of the deepest level their key range leaves free,
    /// without the WAL, the memtable or compactions, so a load into an empty table or a key
    /// range of its own writes each byte once. The rows replace any older rows with their keys
    /// and become visible at once, all together, to reads from then on (an earlier snapshot
    /// does not see them); they are durable when this returns.
    ///
    /// Refused with [`Error::IngestConflict`](crate::Error::IngestConflict), ingesting nothing,
    /// when writes to the same key range arrive while the files are built (retry it); open
    /// write transactions that began before the ingest can no longer commit
    /// ([`Error::TxnTooOld`](crate::Error::TxnTooOld)). Lineage-engine tables refuse it. The
    /// rows are held in memory while the files are built.
    pub fn ingest<R: AsRef<[Value]>>(&self, rows: impl IntoIterator<Item = R>) -> Result<crate::IngestStats> {
        let mut encoded = Vec::new();
        for row in rows {
            let op = self.encode_insert(row.as_ref())?;
            encoded.push((op.key, op.row));
        }
        self.db.ingest(&self.info, encoded)
    }

    /// Sets the named columns of the row with `key` (key columns in key order), writing only
    /// those columns. Blind: if no such row exists, nothing visible happens.
    pub fn update(&self, key: &[Value], set: &[(&str, Value)]) -> Result<()> {
        self.update_with(key, set, &WriteOptions::default())
    }

    /// [`Table::update`] with explicit write options.
    pub fn update_with(&self, key: &[Value], set: &[(&str, Value)], opts: &WriteOptions) -> Result<()> {
        let op = self.encode_update(key, set)?;
        self.write_one(op, opts)
    }

    /// Deletes the row with `key`, if any.
    pub fn delete(&self, key: &[Value]) -> Result<()> {
        self.delete_with(key, &WriteOptions::default())
    }

    /// [`Table::delete`] with explicit write options.
    pub fn delete_with(&self, key: &[Value], opts: &WriteOptions) -> Result<()> {
        let op = self.encode_delete(key)?;
        self.write_one(op, opts)
    }

    /// Resolves column names into a projection.
    pub fn projection(&self, names: &[&str]) -> Result<Projection> {
        let schema = &self.info.schema;
        let mut cols = Vec::with_capacity(names.len());
        let mut wanted = vec![false; self.info.value_types.len()];
        for n in names {
            let c = schema
                .column_index(n)
                .ok_or_else(|| Error::UnknownColumn { table: self.info.name.clone(), column: (*n).to_owned() })?;
            if let Some(vi) = schema.value_index(c) {
                wanted[vi] = true;
            }
            cols.push(c);
        }
        Ok(Projection::Columns { cols: cols.into(), wanted: wanted.into() })
    }

    /// The lineage table behind this handle, if the lineage engine stores it; an error once the
    /// table was dropped.
    fn lineage(&self) -> Result<Option<&Arc<LineageTable>>> {
        match &self.lineage {
            Some(t) if t.dropped.load(std::sync::atomic::Ordering::Acquire) => {
                Err(Error::UnknownTable(self.info.name.clone()))
            }
            t => Ok(t.as_ref()),
        }
    }

    /// The value cells (the `wanted` ones; all with `None`) of the row with encoded key `k` at
    /// the read point, from whichever engine holds the table.
    pub(crate) fn cells_at(
        &self,
        k: &[u8],
        wanted: Option<&[bool]>,
        ropts: &ReadOptions<'_>,
    ) -> Result<Option<crate::types::row::Cells>> {
        match self.lineage()? {
            Some(t) => {
                let (seq, view) = self.db.lineage_read_point(t, ropts)?;
                Ok(t.get(&view, k, seq, wanted))
            }
            None => self.db.get_cells(&self.info, k, wanted, ropts),
        }
    }

    /// The table's definition, shared.
    pub(crate) fn info_arc(&self) -> Arc<TableInfo> {
        self.info.clone()
    }

    /// The database the table belongs to.
    pub(crate) fn db(&self) -> &Arc<DbInner> {
        &self.db
    }

    /// The row with `key`, projected, or `None` if there is none at the read point.
    pub fn get(&self, key: &[Value], projection: &Projection, ropts: &ReadOptions<'_>) -> Result<Option<Vec<Value>>> {
        let k = self.encode_key(key)?;
        let cells = self.cells_at(&k, projection.wanted().map(|w| &w[..]), ropts)?;
        match cells {
            Some(cells) => project_with(&self.info, KeyOf::Values(key), cells, projection).map(Some),
            None => Ok(None),
        }
    }

    /// The rows with `keys`, projected, in the order of `keys` (`None` where there is none), all
    /// read at one read point. The keys are looked up in key order, each file's keys one after
    /// another, and a batch of [`MULTI_GET_PARALLEL`](crate::MULTI_GET_PARALLEL) keys or more
    /// is split into key ranges read at once on the database's point-read threads
    /// ([`Options::point_threads`](crate::Options::point_threads)).
    pub fn multi_get<K: AsRef<[Value]> + Sync>(
        &self,
        keys: &[K],
        projection: &Projection,
        ropts: &ReadOptions<'_>,
    ) -> Result<Vec<Option<Vec<Value>>>> {
        if self.lineage()?.is_some() {
            return keys.iter().map(|k| self.get(k.as_ref(), projection, ropts)).collect();
        }
        let encoded = keys.iter().map(|k| self.encode_key(k.as_ref())).collect::<Result<Vec<_>>>()?;
        let wanted = projection.wanted().map(|w| &w[..]);
        let cells = self.db.multi_get_cells(&self.info, &encoded, wanted, ropts)?;
        keys.iter()
            .zip(cells)
            .map(|(k, c)| c.map(|c| project_with(&self.info, KeyOf::Values(k.as_ref()), c, projection)).transpose())
            .collect()
    }

    /// Answers an analytical scan (filter, projection, aggregates, limit) with Arrow record
    /// batches; see [`ScanRequest`](crate::scan::ScanRequest).
    pub fn scan_batches(
        &self,
        req: &crate::scan::ScanRequest,
        ropts: &ReadOptions<'_>,
    ) -> Result<crate::scan::BatchIter> {
        let (lo, hi) = self.encode_range(&req.range)?;
        self.db.check_open()?;
        if let Some(t) = self.lineage()? {
            let point = self.db.lineage_read_point(t, ropts)?;
            return crate::scan::run_lineage_scan(&self.db.scans, t, lo, hi, req, point);
        }
        let point = || self.db.read_point_of(&self.info, ropts);
        let at = crate::scan::ReadAt { snapshot: ropts.snapshot.map(|s| s.seq()), point: &point };
        crate::scan::run_scan(&self.db.scans, &self.info, lo, hi, req, &at)
    }

    /// About how many rows the table holds, for a query planner: counted without reading data,
    /// from the versions each level's files store and the memtables' entries (up to 65,536 per
    /// memtable), so overwritten and deleted rows still count until compaction drops them.
    pub fn estimated_rows(&self) -> Result<u64> {
        self.db.check_open()?;
        if let Some(t) = self.lineage()? {
            return Ok(t.keys());
        }
        let rp = self.db.read_point_of(&self.info, &ReadOptions::default())?;
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
            rows += m.count_of(self.info.id, MEMTABLE_CAP) as u64;
        }
        Ok(rows)
    }

    /// Values of the first primary-key column at which to cut the table into at most `n` key
    /// ranges of similar size, in increasing order (none: one range), for a query engine that
    /// runs a scan as several partitions. Range `i` holds the keys whose first column is at least
    /// cut `i - 1` and below cut `i`; the first and last ranges are open, so the cuts are a
    /// matter of balance, never of which rows a scan returns.
    ///
    /// The cuts come from file metadata alone (the memtables are not read). An integer or DATE
    /// first column is cut evenly between its smallest and largest stored value, so two tables
    /// whose keys span the same values (a foreign key and the key it names, as TPC-H's
    /// `l_orderkey` and `o_orderkey`) are cut at the same values and can be joined partition by
    /// partition. Other types are cut where the files of the level holding most versions start.
    /// A lineage-engine table is not cut.
    pub fn key_splits(&self, n: usize) -> Result<Vec<Value>> {
        self.db.check_open()?;
        if n <= 1 || self.lineage()?.is_some() {
            return Ok(Vec::new());
        }
        let rp = self.db.read_point_of(&self.info, &ReadOptions::default())?;
        let Some(((lo_key, lo), (_, hi))) = self.first_key_span(&rp) else {
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
            return Ok(cuts.into_iter().filter_map(|x| integer_as(self.info.key_types[0], x)).collect());
        }
        // Where the files of the fullest level start, thinned to `n - 1` cuts.
        let fullest = rp.t.levels.iter().max_by_key(|l| l.files().map(|f| f.entries).sum::<u64>());
        let mut starts: Vec<KeyColumn> = Vec::new();
        for f in fullest.and_then(|l| l.runs.first()).map_or(&[][..], |r| &r.files[..]) {
            if let Some((k, v)) = self.first_key_column(&f.smallest) {
                if k > lo_key && starts.last().is_none_or(|(s, _)| *s < k) {
                    starts.push((k, v));
                }
            }
        }
        let per = (starts.len() + 1).div_ceil(n).max(1);
        Ok(starts.into_iter().skip(per - 1).step_by(per).take(n - 1).map(|(_, v)| v).collect())
    }

    /// A key's first column: its encoding (memcomparable, so byte order is value order) and value.
    fn first_key_column(&self, key: &[u8]) -> Option<KeyColumn> {
        let (v, used) = decode_value(self.info.key_types[0], key).ok()?;
        Some((key.get(..used)?.to_vec(), v))
    }

    /// The smallest and largest first key column in the files at `rp` (the memtables are not
    /// read); `None` without files.
    fn first_key_span(&self, rp: &ReadPoint) -> Option<(KeyColumn, KeyColumn)> {
        let files = || rp.t.levels.iter().flat_map(|l| l.files());
        let lo = files().map(|f| f.smallest.as_slice()).min()?;
        let hi = files().map(|f| f.largest.as_slice()).max()?;
        Some((self.first_key_column(lo)?, self.first_key_column(hi)?))
    }

    /// About the smallest and largest value of each column (by schema position), for a query
    /// planner: from the zone maps of every block of every file and the memtables' bounds, so
    /// values since overwritten or deleted still count until compaction drops them. `None` for
    /// a column with no non-null value, a column whose values are not bounded (very long text),
    /// a key column after the first, and every column of a lineage-engine table. Reads no data: each open file merges its index's zone maps once and
    /// keeps the result.
    pub fn column_bounds(&self) -> Result<Vec<Option<(Value, Value)>>> {
        self.db.check_open()?;
        let schema = &self.info.schema;
        let mut out = vec![None; schema.columns().len()];
        if self.lineage()?.is_some() {
            return Ok(out);
        }
        let rp = self.db.read_point_of(&self.info, &ReadOptions::default())?;
        let values = self.info.value_types.len();
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
            if let Some(b) = m.bounds(self.info.id) {
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
        if let Some(((_, lo), (_, hi))) = self.first_key_span(&rp) {
            out[schema.primary_key()[0]] = Some((lo, hi));
        }
        Ok(out)
    }

    /// The table's access histograms (LogStore §V-A): per level, one bucket per file in key
    /// order, with the point reads it served and the probes that searched it and found nothing,
    /// decayed by [`Options::heat_half_life`](crate::Options::heat_half_life) and carried to
    /// new files by compaction. Empty for a lineage-engine table.
    pub fn access_histogram(&self) -> Result<Vec<HeatBucket>> {
        self.db.check_open()?;
        if self.lineage()?.is_some() {
            return Ok(Vec::new());
        }
        let rp = self.db.read_point_of(&self.info, &ReadOptions::default())?;
        let heat = self.db.tables.heat.snapshot();
        let key = |k: &[u8]| decode_key(&self.info.key_types, k).unwrap_or_default();
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

    /// The rows in `range`, in key order, projected.
    pub fn scan(&self, range: &KeyRange, projection: &Projection, ropts: &ReadOptions<'_>) -> Result<ScanIter> {
        let (lo, hi) = self.encode_range(range)?;
        if let Some(t) = self.lineage()? {
            let point = self.db.lineage_read_point(t, ropts)?;
            return Ok(ScanIter::lineage(LineageRows::new(t.clone(), point, lo, hi, projection)));
        }
        self.db.scan(&self.info, lo, hi, projection, ropts)
    }
}
