//! Secondary indexes: `CREATE [UNIQUE] INDEX [IF NOT EXISTS] name ON t (col [ASC|DESC], ...)`
//! and `DROP INDEX [IF EXISTS] names`.
//!
//! An index is a table of strata-sql's own, `__strata_index_NAME`, with one row per row of the
//! indexed table: its key is an order-preserving encoding of the indexed values
//! ([`Index::entry`]), and its other columns hold the row's primary key. The entries of a
//! statement's rows are written in the same [`WriteBatch`] as the rows themselves
//! ([`Maintainer`]), so a row and its entries commit (and survive a crash) together or not at
//! all. The indexes themselves are listed in [`INDEXES`].
//!
//! Entry encoding, column by column: `00` for NULL, or `01` and the value's memcomparable
//! encoding ([`strata::types::key::encode_value`]); then the primary key's encoding. A UNIQUE
//! index leaves the primary key out when no indexed value is NULL, so two rows with equal values
//! have the same entry: the statement that would write the second finds the first and fails
//! with 23505, and of two concurrent transactions writing it, one fails to commit (40001). Rows
//! with a NULL among their values never collide, as in PostgreSQL.
//!
//! Only writes through SQL keep indexes: rows written with the Rust API, the CLI's loads or
//! Python's table methods are not indexed (see docs/sql.md).

use std::collections::HashSet;

use datafusion::sql::sqlparser::ast::{CreateIndex, Expr as AstExpr, ObjectName};
use strata::types::key::encode_value;
use strata::{Column, ColumnType, Db, Projection, Schema, Table, TableOptions, Value, WriteBatch};

use crate::catalog::{own_table, own_table_or_create, OWN_PREFIX};
use crate::ddl::{normalize, table_name};
use crate::error::{ErrorKind, SqlError};
use crate::txn::TxnCell;

/// The table listing indexes: `name` (the key), `tbl`, `columns` (one name per line),
/// `is_unique` and `table_id`.
pub(crate) const INDEXES: &str = "__strata_indexes";
/// How DDL writes its listings: synced, so a finished statement survives a power loss.
const SYNC: strata::WriteOptions = strata::WriteOptions { sync: true };
/// Entries written per batch when an index is filled.
const FILL_BATCH: usize = 8192;
/// The prefix of an index's own table.
pub(crate) const DATA_PREFIX: &str = "__strata_index_";

/// One index of a table.
#[derive(Clone)]
pub(crate) struct Index {
    pub(crate) name: String,
    /// The indexed columns, as indices of the table's schema.
    pub(crate) columns: Vec<usize>,
    pub(crate) unique: bool,
    /// The index's entries.
    data: Table,
}

fn catalog(db: &Db) -> Result<Option<Table>, SqlError> {
    own_table(db, INDEXES)
}

fn text(v: Option<&Value>) -> Option<&str> {
    match v {
        Some(Value::Text(s)) => Some(s),
        _ => None,
    }
}

/// A row of [`INDEXES`].
struct Listed {
    name: String,
    table: String,
    /// The table's id ([`strata::TableInfo::id`], never reused): a listing whose table was
    /// dropped outside SQL (`strata drop-table`) and created again is not the new table's.
    table_id: u32,
    columns: Vec<String>,
    unique: bool,
}

impl Listed {
    /// Whether its table is still the one it was made for.
    fn is_live(&self, db: &Db) -> bool {
        db.table(&self.table).is_ok_and(|t| t.info().id == self.table_id)
    }
}

/// The rows of [`INDEXES`].
fn listed(db: &Db) -> Result<Vec<Listed>, SqlError> {
    let Some(cat) = catalog(db)? else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for row in cat.scan(&strata::KeyRange::all(), &Projection::All, &Default::default())? {
        let row = row?;
        let (Some(name), Some(tbl), Some(cols)) = (text(row.first()), text(row.get(1)), text(row.get(2))) else {
            return Err(SqlError::new(ErrorKind::Internal, "an index is listed damaged"));
        };
        let unique = matches!(row.get(3), Some(Value::Boolean(true)));
        let Some(Value::BigInt(id)) = row.get(4) else {
            return Err(SqlError::new(ErrorKind::Internal, "an index is listed damaged"));
        };
        out.push(Listed {
            name: name.to_string(),
            table: tbl.to_string(),
            table_id: *id as u32,
            columns: cols.lines().map(str::to_string).collect(),
            unique,
        });
    }
    Ok(out)
}

/// An index as the PostgreSQL catalog shows it (`pg_catalog`): its name, its table, its
/// columns by name, whether it is UNIQUE, and the id of the table holding its entries.
pub(crate) struct Described {
    pub(crate) name: String,
    pub(crate) table: String,
    pub(crate) columns: Vec<String>,
    pub(crate) unique: bool,
    pub(crate) data_id: u32,
}

/// Every index whose table is still the one it was made for, in name order.
pub(crate) fn describe_all(db: &Db) -> Result<Vec<Described>, SqlError> {
    let mut out = Vec::new();
    for l in listed(db)? {
        if !l.is_live(db) {
            continue;
        }
        let Ok(data) = db.table(&format!("{DATA_PREFIX}{}", l.name)) else { continue };
        out.push(Described {
            data_id: data.info().id,
            name: l.name,
            table: l.table,
            columns: l.columns,
            unique: l.unique,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The indexes of `table`.
pub(crate) fn of_table(db: &Db, table: &Table) -> Result<Vec<Index>, SqlError> {
    let mut out = Vec::new();
    for Listed { name, table: tbl, table_id, columns: cols, unique } in listed(db)? {
        if tbl != table.name() || table_id != table.info().id {
            continue;
        }
        let columns = cols
            .iter()
            .map(|c| table.schema().column_index(c))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| SqlError::new(ErrorKind::Internal, format!("index {name} names a missing column")))?;
        let data = db.table(&format!("{DATA_PREFIX}{name}"))?;
        out.push(Index { name, columns, unique, data });
    }
    Ok(out)
}

impl Index {
    /// The entry of a row: its indexed values (`values`, in index order) and primary key.
    pub(crate) fn entry(&self, schema: &Schema, values: &[Value], key: &[Value]) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        let mut null = false;
        for (&c, v) in self.columns.iter().zip(values) {
            if v.is_null() {
                out.push(0);
                null = true;
            } else {
                out.push(1);
                encode_value(&mut out, schema.columns()[c].ty, v);
            }
        }
        if !self.unique || null {
            for (&k, v) in schema.primary_key().iter().zip(key) {
                encode_value(&mut out, schema.columns()[k].ty, v);
            }
        }
        out
    }

    /// The indexed values of a row (schema-wide values).
    fn values(&self, row: &[Value]) -> Vec<Value> {
        self.columns.iter().map(|&c| row[c].clone()).collect()
    }

    /// The entry of a row (schema-wide values) with primary key `key`.
    fn row_entry(&self, schema: &Schema, row: &[Value], key: &[Value]) -> Vec<u8> {
        self.entry(schema, &self.values(row), key)
    }

    fn duplicate(&self, table: &Table, values: &[Value]) -> SqlError {
        let names: Vec<&str> = self.columns.iter().map(|&c| table.schema().columns()[c].name.as_str()).collect();
        SqlError::new(
            ErrorKind::UniqueViolation,
            format!(
                "duplicate key value violates unique constraint \"{}\": key ({})={}",
                self.name,
                names.join(", "),
                crate::display_key(values)
            ),
        )
    }
}

/// One row change, as [`Maintainer::change`] takes it.
pub(crate) enum RowChange<'a> {
    /// A new row (all columns, schema order).
    Insert(&'a [Value]),
    /// The row with this key gets these columns (schema indices) set.
    Update(&'a [Value], &'a [(usize, Value)]),
    /// The row with this key goes.
    Delete(&'a [Value]),
}

/// Writes the index entries of one statement's row changes into its batch.
pub(crate) struct Maintainer<'a> {
    table: &'a Table,
    indexes: Vec<Index>,
    /// The indexed columns, read from the old row of an update or delete.
    read: Vec<usize>,
    projection: Projection,
    /// Entries the statement wrote and removed so far, by index.
    added: Vec<HashSet<Vec<u8>>>,
    removed: Vec<HashSet<Vec<u8>>>,
}

impl<'a> Maintainer<'a> {
    /// A maintainer of `table`'s indexes; `None` if it has none.
    pub(crate) fn of(db: &Db, table: &'a Table) -> Result<Option<Maintainer<'a>>, SqlError> {
        let indexes = of_table(db, table)?;
        if indexes.is_empty() {
            return Ok(None);
        }
        let mut read: Vec<usize> = indexes.iter().flat_map(|i| i.columns.iter().copied()).collect();
        read.sort_unstable();
        read.dedup();
        let names: Vec<&str> = read.iter().map(|&c| table.schema().columns()[c].name.as_str()).collect();
        let projection = table.projection(&names)?;
        let n = indexes.len();
        Ok(Some(Maintainer {
            table,
            indexes,
            read,
            projection,
            added: vec![HashSet::new(); n],
            removed: vec![HashSet::new(); n],
        }))
    }

    /// The indexed values of the row with `key` as `tx` sees it (schema-wide, NULL elsewhere).
    fn old_row(&self, tx: &TxnCell, key: &[Value]) -> Result<Option<Vec<Value>>, SqlError> {
        let Some(values) = tx.read(|t| t.get(self.table, key, &self.projection))? else { return Ok(None) };
        let mut row = vec![Value::Null; self.table.schema().columns().len()];
        for (&c, v) in self.read.iter().zip(values) {
            row[c] = v;
        }
        Ok(Some(row))
    }

    fn remove(&mut self, i: usize, batch: &mut WriteBatch, entry: Vec<u8>) -> Result<(), SqlError> {
        batch.delete(&self.indexes[i].data, &[Value::Bytea(entry.clone())])?;
        self.added[i].remove(&entry);
        self.removed[i].insert(entry);
        Ok(())
    }

    fn add(
        &mut self,
        i: usize,
        tx: &TxnCell,
        batch: &mut WriteBatch,
        row: &[Value],
        key: &[Value],
    ) -> Result<(), SqlError> {
        let index = &self.indexes[i];
        let schema = self.table.schema();
        let values = index.values(row);
        let entry = index.entry(schema, &values, key);
        if index.unique {
            let taken = self.added[i].contains(&entry)
                || (!self.removed[i].contains(&entry)
                    && tx.read(|t| t.get(&index.data, &[Value::Bytea(entry.clone())], &Projection::All))?.is_some());
            if taken {
                return Err(index.duplicate(self.table, &values));
            }
        }
        let mut data_row = Vec::with_capacity(1 + key.len());
        data_row.push(Value::Bytea(entry.clone()));
        data_row.extend(key.iter().cloned());
        batch.insert(&index.data, &data_row)?;
        self.removed[i].remove(&entry);
        self.added[i].insert(entry);
        Ok(())
    }

    /// Adds the index writes of `change` to `batch` (checking unique indexes against what `tx`
    /// sees and what the statement wrote before).
    pub(crate) fn change(
        &mut self,
        tx: &TxnCell,
        batch: &mut WriteBatch,
        change: RowChange<'_>,
    ) -> Result<(), SqlError> {
        let schema = self.table.schema().clone();
        let key_of = |row: &[Value]| -> Vec<Value> { schema.primary_key().iter().map(|&k| row[k].clone()).collect() };
        match change {
            RowChange::Insert(row) => {
                let key = key_of(row);
                // A row it replaces (`INSERT OR REPLACE`) takes its entries with it.
                let old = self.old_row(tx, &key)?;
                for i in 0..self.indexes.len() {
                    if let Some(old) = &old {
                        let entry = self.indexes[i].row_entry(&schema, old, &key);
                        self.remove(i, batch, entry)?;
                    }
                    self.add(i, tx, batch, row, &key)?;
                }
            }
            RowChange::Delete(key) => {
                let Some(old) = self.old_row(tx, key)? else { return Ok(()) };
                for i in 0..self.indexes.len() {
                    let entry = self.indexes[i].row_entry(&schema, &old, key);
                    self.remove(i, batch, entry)?;
                }
            }
            RowChange::Update(key, set) => {
                let Some(old) = self.old_row(tx, key)? else { return Ok(()) };
                let mut new = old.clone();
                for (c, v) in set {
                    new[*c] = v.clone();
                }
                for i in 0..self.indexes.len() {
                    let cols = &self.indexes[i].columns;
                    if cols.iter().all(|&c| old[c] == new[c]) {
                        continue;
                    }
                    let entry = self.indexes[i].row_entry(&schema, &old, key);
                    self.remove(i, batch, entry)?;
                    self.add(i, tx, batch, &new, key)?;
                }
            }
        }
        Ok(())
    }
}

/// Runs a `CREATE [UNIQUE] INDEX`: lists the index and fills it from the table's rows at a
/// snapshot. Refused with 23505 (nothing created) when a UNIQUE index finds two rows with equal
/// values, and with 40001 when the table was written while it was filled.
pub(crate) fn create_index(db: &Db, ci: &CreateIndex) -> Result<(), SqlError> {
    if ci.predicate.is_some() || !ci.include.is_empty() || ci.nulls_distinct == Some(false) || !ci.with.is_empty() {
        return Err(SqlError::unsupported(
            "CREATE INDEX of columns only (no WHERE, INCLUDE, NULLS NOT DISTINCT or WITH)",
        ));
    }
    let table = db.table(&table_name(&ci.table_name)?)?;
    let visible = crate::meta::visible_columns(&table);
    let mut columns = Vec::with_capacity(ci.columns.len());
    let mut names = Vec::with_capacity(ci.columns.len());
    for c in &ci.columns {
        let AstExpr::Identifier(id) = &c.column.expr else {
            return Err(SqlError::unsupported(format!("an index on the expression {}", c.column.expr)));
        };
        let n = normalize(id);
        let i = table
            .schema()
            .column_index(&n)
            .filter(|i| visible.contains(i))
            .ok_or_else(|| SqlError::new(ErrorKind::UndefinedColumn, format!("column {n} does not exist")))?;
        columns.push(i);
        names.push(n);
    }
    let name = match &ci.name {
        Some(n) => table_name(n)?,
        None => format!("{}_{}_idx", table.name(), names.join("_")),
    };
    if name.starts_with(OWN_PREFIX) {
        return Err(SqlError::invalid(format!("names starting with {OWN_PREFIX} are strata's own")));
    }
    // A listing left by a table dropped outside SQL goes first.
    let stale: Vec<String> =
        listed(db)?.into_iter().filter(|l| l.name == name && !l.is_live(db)).map(|l| l.name).collect();
    drop_listed(db, &stale)?;
    if listed(db)?.iter().any(|l| l.name == name) || db.table(&name).is_ok() {
        if ci.if_not_exists {
            return Ok(());
        }
        return Err(SqlError::new(ErrorKind::DuplicateTable, format!("relation {name} already exists")));
    }
    let key_cols: Vec<Column> = table
        .schema()
        .primary_key()
        .iter()
        .enumerate()
        .map(|(i, &k)| Column::not_null(format!("k{i}"), table.schema().columns()[k].ty))
        .collect();
    let mut data_columns = vec![Column::not_null("entry", ColumnType::Bytea)];
    data_columns.extend(key_cols);
    let data_name = format!("{DATA_PREFIX}{name}");
    match db.drop_table(&data_name) {
        // What a crash during an earlier CREATE INDEX of this name may have left.
        Ok(()) | Err(strata::Error::UnknownTable(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let data = db.create_table(&data_name, Schema::new(data_columns, &["entry"])?, TableOptions::default())?;
    let index = Index { name: name.clone(), columns: columns.clone(), unique: ci.unique, data: data.clone() };
    let built = fill(db, &table, &index);
    if let Err(e) = built {
        let _ = db.drop_table(&data_name);
        return Err(e);
    }
    Ok(())
}

/// Fills a new index from its table at a snapshot, then lists it; undone (40001) if the table
/// took a write meanwhile, which the entries would lack.
fn fill(db: &Db, table: &Table, index: &Index) -> Result<(), SqlError> {
    let snapshot = db.snapshot();
    let read = strata::ReadOptions { snapshot: Some(&snapshot) };
    let schema = table.schema();
    let mut entries: Vec<Vec<Value>> = Vec::new();
    let mut seen = HashSet::new();
    for row in table.scan(&strata::KeyRange::all(), &Projection::All, &read)? {
        let row = row?;
        let key: Vec<Value> = schema.primary_key().iter().map(|&k| row[k].clone()).collect();
        let values = index.values(&row);
        let entry = index.entry(schema, &values, &key);
        if index.unique && !seen.insert(entry.clone()) {
            return Err(SqlError::new(
                ErrorKind::UniqueViolation,
                format!(
                    "could not create unique index \"{}\": key {} is duplicated",
                    index.name,
                    crate::display_key(&values)
                ),
            ));
        }
        let mut data_row = vec![Value::Bytea(entry)];
        data_row.extend(key);
        entries.push(data_row);
    }
    // Written in batches: nothing reads or writes the index before it is listed.
    for chunk in entries.chunks(FILL_BATCH) {
        let mut batch = WriteBatch::new();
        for row in chunk {
            batch.insert(&index.data, row)?;
        }
        db.write(batch, &Default::default())?;
    }
    let cat = own_table_or_create(
        db,
        INDEXES,
        &[
            ("name", ColumnType::Text),
            ("tbl", ColumnType::Text),
            ("columns", ColumnType::Text),
            ("is_unique", ColumnType::Boolean),
            ("table_id", ColumnType::BigInt),
        ],
    )?;
    let columns: Vec<&str> = index.columns.iter().map(|&c| schema.columns()[c].name.as_str()).collect();
    let listing = [
        Value::Text(index.name.clone()),
        Value::Text(table.name().to_string()),
        Value::Text(columns.join("\n")),
        Value::Boolean(index.unique),
        Value::BigInt(i64::from(table.info().id)),
    ];
    // Synced, as DDL is durable once done (the entries written before it go with it).
    cat.insert_with(&listing, &SYNC)?;
    if db.written_after(table.name(), snapshot.seq())? {
        cat.delete_with(&[Value::Text(index.name.clone())], &SYNC)?;
        return Err(SqlError::new(
            ErrorKind::SerializationFailure,
            format!("table {} was written while index {} was built; run CREATE INDEX again", table.name(), index.name),
        ));
    }
    Ok(())
}

/// Runs a `DROP INDEX`; returns how many were dropped. A name that is no index fails the whole
/// statement (unless `IF EXISTS`) before anything is dropped.
pub(crate) fn drop_indexes(db: &Db, names: &[ObjectName], if_exists: bool) -> Result<usize, SqlError> {
    let names: Vec<String> = names.iter().map(table_name).collect::<Result<_, _>>()?;
    let listed = listed(db)?;
    let mut present = Vec::new();
    for n in &names {
        if listed.iter().any(|l| l.name == *n) {
            present.push(n.clone());
        } else if !if_exists {
            return Err(SqlError::new(ErrorKind::UndefinedTable, format!("index {n} does not exist")));
        }
    }
    drop_listed(db, &present)?;
    Ok(present.len())
}

/// Drops the indexes named: first from the list (so no statement writes them any more), then
/// their entries.
fn drop_listed(db: &Db, names: &[String]) -> Result<(), SqlError> {
    let Some(cat) = catalog(db)? else { return Ok(()) };
    for n in names {
        // Durably unlisted before its entries go: a power loss in between leaves no index
        // listed without its table.
        cat.delete_with(&[Value::Text(n.clone())], &SYNC)?;
        match db.drop_table(&format!("{DATA_PREFIX}{n}")) {
            Ok(()) | Err(strata::Error::UnknownTable(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Drops the indexes of table `name` (which is being dropped).
pub(crate) fn drop_of_table(db: &Db, name: &str) -> Result<(), SqlError> {
    let names: Vec<String> = listed(db)?.into_iter().filter(|l| l.table == name).map(|l| l.name).collect();
    drop_listed(db, &names)
}

/// Whether `table` has indexes.
pub(crate) fn any(db: &Db, table: &str) -> Result<bool, SqlError> {
    Ok(listed(db)?.iter().any(|l| l.table == table && l.is_live(db)))
}

/// Checks that `table`'s indexes hold exactly the entries of its rows (as `snapshot` sees
/// both): a description of the first difference, or `None`.
pub fn check(db: &Db, table: &Table, snapshot: &strata::Snapshot) -> Result<Option<String>, SqlError> {
    let read = strata::ReadOptions { snapshot: Some(snapshot) };
    let schema = table.schema();
    for index in of_table(db, table)? {
        let mut want: Vec<(Vec<u8>, Vec<Value>)> = Vec::new();
        for row in table.scan(&strata::KeyRange::all(), &Projection::All, &read)? {
            let row = row?;
            let key: Vec<Value> = schema.primary_key().iter().map(|&k| row[k].clone()).collect();
            want.push((index.row_entry(schema, &row, &key), key));
        }
        want.sort_by(|a, b| a.0.cmp(&b.0));
        let mut have: Vec<(Vec<u8>, Vec<Value>)> = Vec::new();
        for row in index.data.scan(&strata::KeyRange::all(), &Projection::All, &read)? {
            let mut row = row?;
            let Value::Bytea(entry) = row.remove(0) else {
                return Ok(Some(format!("index {}: an entry is not BYTEA", index.name)));
            };
            have.push((entry, row));
        }
        if want != have {
            return Ok(Some(format!(
                "index {} of {}: {} entries where the rows give {} (first difference at {:?})",
                index.name,
                table.name(),
                have.len(),
                want.len(),
                want.iter().zip(&have).position(|(a, b)| a != b).unwrap_or(want.len().min(have.len()))
            )));
        }
    }
    Ok(None)
}

/// The smallest byte string greater than every string that starts with `prefix` (`None`: there
/// is none, the prefix being all `FF`).
fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// A read of rows through an index: the entries in `range` name the rows' keys.
#[derive(Clone)]
pub(crate) struct Lookup {
    pub(crate) index: String,
    pub(crate) data: Table,
    pub(crate) range: strata::KeyRange,
    /// The entry table's primary-key columns (`k0`, `k1`, ...).
    pub(crate) key_columns: Vec<String>,
}

impl std::fmt::Debug for Lookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lookup").field("index", &self.index).field("range", &self.range).finish_non_exhaustive()
    }
}

/// An index of `table` that answers some of `conjuncts` (conditions a scan applies exactly):
/// an equality on its first column, or else bounds on it (`ranges`: only when the caller
/// expects them to keep few rows). The rows it names are a superset of those the conditions
/// keep; the caller applies them all. Columns of floating-point types are not looked up
/// (`-0.0 = 0.0` though their entries differ).
pub(crate) fn lookup(db: &Db, table: &Table, conjuncts: &[strata::scan::Expr], ranges: bool) -> Option<Lookup> {
    use std::ops::Bound;
    use strata::scan::{CmpOp, Expr as SExpr};
    let schema = table.schema();
    let indexes = of_table(db, table).ok()?;
    for index in indexes {
        let first = index.columns[0];
        let column = &schema.columns()[first];
        if matches!(column.ty, ColumnType::Double | ColumnType::Real) {
            continue;
        }
        let encoded = |v: &Value| -> Option<Vec<u8>> {
            let v = crate::filter::coerce(v, column.ty)?;
            let mut out = vec![1];
            encode_value(&mut out, column.ty, &v);
            Some(out)
        };
        let mut lower: Option<Bound<Vec<u8>>> = None;
        let mut upper: Option<Bound<Vec<u8>>> = None;
        let mut equal = None;
        for c in conjuncts {
            let SExpr::Cmp { column: name, op, value } = c else { continue };
            if *name != column.name || value.is_null() {
                continue;
            }
            let Some(p) = encoded(value) else { continue };
            match op {
                CmpOp::Eq => equal = Some(p),
                CmpOp::Gt => lower = successor(&p).map(Bound::Included),
                CmpOp::GtEq => lower = Some(Bound::Included(p)),
                CmpOp::Lt => upper = Some(Bound::Excluded(p)),
                CmpOp::LtEq => upper = successor(&p).map(Bound::Excluded),
                _ => {}
            }
        }
        let (start, end) = match equal {
            Some(p) => (Bound::Included(p.clone()), successor(&p).map_or(Bound::Unbounded, Bound::Excluded)),
            None if ranges && (lower.is_some() || upper.is_some()) => (
                // Non-NULL entries start with 01; NULL ones (00) never satisfy a comparison.
                lower.unwrap_or(Bound::Included(vec![1])),
                upper.unwrap_or(Bound::Excluded(vec![2])),
            ),
            None => continue,
        };
        let bytes = |b: Bound<Vec<u8>>| match b {
            Bound::Included(v) => Bound::Included(vec![Value::Bytea(v)]),
            Bound::Excluded(v) => Bound::Excluded(vec![Value::Bytea(v)]),
            Bound::Unbounded => Bound::Unbounded,
        };
        let key_columns = (0..schema.primary_key().len()).map(|i| format!("k{i}")).collect();
        return Some(Lookup {
            index: index.name.clone(),
            data: index.data.clone(),
            range: strata::KeyRange { start: bytes(start), end: bytes(end) },
            key_columns,
        });
    }
    None
}

/// Refuses a write to `table` that would not go through SQL (the Rust API's callers: the CLI's
/// `load` and `exec`, Python's table methods) when the table has indexes, which only SQL's
/// writes keep: written otherwise, an index would miss rows and queries reading through it
/// would miss them too.
pub fn refuse_writes_outside_sql(db: &Db, table: &Table) -> Result<(), SqlError> {
    let names: Vec<String> = listed(db)?
        .into_iter()
        .filter(|l| l.table == table.name() && l.table_id == table.info().id)
        .map(|l| l.name)
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    Err(SqlError::unsupported(format!(
        "table {} has indexes ({}), which only SQL's writes keep: write it with SQL (INSERT, UPDATE, DELETE, COPY)",
        table.name(),
        names.join(", ")
    )))
}
