//! [`Table`]: the per-table API. Turns typed values into encoded operations (checking types and
//! NOT NULL on the way in) and decoded rows back out. Cheap to clone; usable from any thread.

use std::ops::Bound;
use std::sync::Arc;

use super::stats::HeatBucket;
use super::store::TableState;
use super::{DbInner, KeyRange, Projection, ReadOptions, TableInfo, WriteOptions};
use crate::error::{Error, Result};
use crate::mvcc::Kind;
use crate::read::{project_with, KeyOf, ScanIter};
use crate::types::key::encode_key;
use crate::types::row::encode_row_with;
use crate::types::{Schema, Value};
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

/// A handle to one table.
#[derive(Clone)]
pub struct Table {
    db: Arc<DbInner>,
    /// The table's definition when the handle was made.
    info: Arc<TableInfo>,
    /// What the database keeps for the table: its store, counters and sequences.
    state: Arc<TableState>,
}

impl Table {
    pub(crate) fn new(db: Arc<DbInner>, info: Arc<TableInfo>) -> Self {
        let state = db.stores.pin().get(&info.id).cloned();
        let state = state.unwrap_or_else(|| Arc::new(TableState::detached(&info, db.config.opts.num_levels)));
        Table { db, info, state }
    }

    pub(crate) fn with_state(db: Arc<DbInner>, info: Arc<TableInfo>, state: Arc<TableState>) -> Self {
        Table { db, info, state }
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
        self.db.sequence_values(&self.state, &self.info, name, n)
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
        self.db.ingest(&self.info, &self.state, encoded)
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

    /// The value cells (the `wanted` ones; all with `None`) of the row with encoded key `k` at
    /// the read point, from whichever engine holds the table.
    pub(crate) fn cells_at(
        &self,
        k: &[u8],
        wanted: Option<&[bool]>,
        ropts: &ReadOptions<'_>,
    ) -> Result<Option<crate::types::row::Cells>> {
        self.state.store.cells_at(&self.db, &self.info, k, wanted, ropts)
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
        let encoded = keys.iter().map(|k| self.encode_key(k.as_ref())).collect::<Result<Vec<_>>>()?;
        let wanted = projection.wanted().map(|w| &w[..]);
        let cells = self.state.store.multi_get(&self.db, &self.info, &encoded, wanted, ropts)?;
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
        let range = self.encode_range(&req.range)?;
        self.db.check_open()?;
        self.state.store.scan_batches(&self.db, &self.info, range, req, ropts)
    }

    /// About how many rows the table holds, for a query planner: counted without reading data,
    /// from the versions each level's files store and the memtables' entries (up to 65,536 per
    /// memtable), so overwritten and deleted rows still count until compaction drops them.
    pub fn estimated_rows(&self) -> Result<u64> {
        self.db.check_open()?;
        self.state.store.estimated_rows(&self.db, &self.info)
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
        self.state.store.key_splits(&self.db, &self.info, n)
    }

    /// About the smallest and largest value of each column (by schema position), for a query
    /// planner: from the zone maps of every block of every file and the memtables' bounds, so
    /// values since overwritten or deleted still count until compaction drops them. `None` for
    /// a column with no non-null value, a column whose values are not bounded (very long text),
    /// a key column after the first, and every column of a lineage-engine table. Reads no data: each open file merges its index's zone maps once and
    /// keeps the result.
    pub fn column_bounds(&self) -> Result<Vec<Option<(Value, Value)>>> {
        self.db.check_open()?;
        self.state.store.column_bounds(&self.db, &self.info)
    }

    /// The table's access histograms (LogStore §V-A): per level, one bucket per file in key
    /// order, with the point reads it served and the probes that searched it and found nothing,
    /// decayed by [`Options::heat_half_life`](crate::Options::heat_half_life) and carried to
    /// new files by compaction. Empty for a lineage-engine table.
    pub fn access_histogram(&self) -> Result<Vec<HeatBucket>> {
        self.db.check_open()?;
        self.state.store.access_histogram(&self.db, &self.info)
    }

    /// The rows in `range`, in key order, projected.
    pub fn scan(&self, range: &KeyRange, projection: &Projection, ropts: &ReadOptions<'_>) -> Result<ScanIter> {
        let range = self.encode_range(range)?;
        self.state.store.scan(&self.db, &self.info, range, projection, ropts)
    }
}

/// A batch's operations are encoded by the table they write (its types, its key); the batch
/// itself knows only encoded operations.
impl WriteBatch {
    /// Adds a full-row insert (replaces an existing row with the same key). See [`Table::insert`].
    pub fn insert(&mut self, table: &Table, row: &[Value]) -> Result<()> {
        let op = table.encode_insert(row)?;
        self.push(op);
        Ok(())
    }

    /// Adds a partial update of named columns. See [`Table::update`].
    pub fn update(&mut self, table: &Table, key: &[Value], set: &[(&str, Value)]) -> Result<()> {
        let op = table.encode_update(key, set)?;
        self.push(op);
        Ok(())
    }

    /// Adds a delete. See [`Table::delete`].
    pub fn delete(&mut self, table: &Table, key: &[Value]) -> Result<()> {
        let op = table.encode_delete(key)?;
        self.push(op);
        Ok(())
    }
}
