//! Transactions with snapshot isolation: reads at the snapshot taken when the transaction
//! began, with its own writes laid over them; writes held in the transaction until
//! [`Transaction::commit`] applies all of them as one batch (one WAL record) or none. A commit
//! loses ([`Error::Conflict`]) when another commit wrote one of its rows after its snapshot
//! (first committer wins, checked by the commit leader before sequence numbers are given, see
//! [`crate::mvcc::conflict`]); a partial update is a write of its row. A write to a row that
//! another commit wrote after the snapshot fails at once with that conflict, and the transaction
//! is lost: its later writes and its commit report it too (its reads go on at the snapshot).
//! Tables of both engines can be written in one transaction.
//!
//! Under [`Isolation::ReadCommitted`] each statement ([`Transaction::new_statement`]) reads a
//! new snapshot, and a row is checked against the snapshot it was last known at rather than the
//! first: the *base* kept for every row written or locked. [`Transaction::lock`] holds a row
//! until the transaction ends ([`crate::mvcc::locks`]), so a second writer of the row waits for
//! the first to end and then reads the row again instead of losing: what PostgreSQL's
//! READ COMMITTED does with `UPDATE t SET n = n + 1`. Writers that do not lock are still checked
//! against every base, so a commit never overwrites a row version its writer did not know.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use super::commit::Validate;
use super::{Db, DbInner, KeyRange, Projection, ReadOptions, Table, WriteOptions};
use crate::error::{Error, Result};
use crate::mvcc::conflict::{Lost, RowId};
use crate::mvcc::snapshot::Snapshot;
use crate::mvcc::Kind;
use crate::read::overlay::{fold, Overlay};
use crate::read::{project_with, KeyOf, ScanIter};
use crate::scan::{BatchIter, ScanRequest};
use crate::types::key::decode_key;
use crate::types::Value;
use crate::write::batch::{BatchOp, WriteBatch};

/// How many times [`Db::transaction`] runs a transaction that lost a conflict before it gives
/// the conflict back.
pub const TXN_RETRIES: usize = 16;

/// How a transaction runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TxnOptions {
    /// Reads only: writes are refused, and the commit never loses (it is a snapshot).
    pub read_only: bool,
    /// Which snapshots its reads see.
    pub isolation: Isolation,
}

/// Which snapshots a transaction's reads see (see the [module](self) documentation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Every read sees the snapshot taken when the transaction began (SQL's REPEATABLE READ).
    #[default]
    Snapshot,
    /// Each statement reads a snapshot taken when it began ([`Transaction::new_statement`]), and
    /// a row locked after another transaction changed it is read again rather than lost (SQL's
    /// READ COMMITTED, as PostgreSQL runs it).
    ReadCommitted,
}

/// What [`Transaction::lock`] found once it held the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locked {
    /// The row is as the transaction's snapshot has it.
    Current,
    /// Another transaction committed the row after the snapshot (only under
    /// [`Isolation::ReadCommitted`]; snapshot isolation loses instead): read it again after
    /// [`Transaction::new_statement`] before writing it.
    Changed,
}

/// The writes of a [`Transaction`] at one moment ([`Transaction::savepoint`]).
#[derive(Clone, Default)]
pub struct Savepoint {
    writes: BTreeMap<RowId, Vec<BatchOp>>,
    tables: HashMap<u32, Table>,
    bytes: usize,
    lost: Option<Lost>,
}

impl std::fmt::Debug for Savepoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Savepoint").field("rows_written", &self.writes.len()).finish_non_exhaustive()
    }
}

/// A transaction: see the [module](self) documentation. Dropping it without a commit rolls it
/// back (nothing of it was written).
///
/// ```
/// # use strata::*;
/// # let dir = std::env::temp_dir().join(format!("strata-doc-txn-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// let db = Db::open(&dir, Options::default())?;
/// let columns = vec![Column::new("id", ColumnType::BigInt), Column::new("balance", ColumnType::BigInt)];
/// let schema = Schema::new(columns, &["id"])?;
/// let t = db.create_table("accounts", schema, TableOptions::default())?;
/// t.insert(&[Value::BigInt(1), Value::BigInt(100)])?;
/// t.insert(&[Value::BigInt(2), Value::BigInt(0)])?;
/// // Move 30 from account 1 to account 2; a conflict runs the closure again.
/// db.transaction(&TxnOptions::default(), &WriteOptions::default(), |tx| {
///     let all = Projection::All;
///     let balance = |row: Option<Vec<Value>>| match row.as_deref() {
///         Some([_, Value::BigInt(b)]) => *b,
///         _ => 0,
///     };
///     let from = balance(tx.get(&t, &[Value::BigInt(1)], &all)?);
///     let to = balance(tx.get(&t, &[Value::BigInt(2)], &all)?);
///     tx.update(&t, &[Value::BigInt(1)], &[("balance", Value::BigInt(from - 30))])?;
///     tx.update(&t, &[Value::BigInt(2)], &[("balance", Value::BigInt(to + 30))])?;
///     Ok(())
/// })?;
/// let row = t.get(&[Value::BigInt(2)], &Projection::All, &ReadOptions::default())?;
/// assert_eq!(row, Some(vec![Value::BigInt(2), Value::BigInt(30)]));
/// # drop(db); std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), strata::Error>(())
/// ```
pub struct Transaction {
    db: Arc<DbInner>,
    /// What reads see: the transaction's snapshot, or its statement's.
    snapshot: Snapshot,
    /// The snapshot it began at, registered in the conflict window until it ends.
    opened_at: u64,
    isolation: Isolation,
    read_only: bool,
    /// Its id in the row locks (0 when read-only: it takes none).
    id: u64,
    /// The rows it locked, released when it ends.
    locked: Vec<RowId>,
    /// Under READ COMMITTED, each row written or locked, with the sequence number it was known
    /// at: its commit loses if another commit wrote the row after that (a row missing here was
    /// known at the snapshot).
    bases: HashMap<RowId, u64>,
    /// Each written row's operations, oldest first.
    writes: BTreeMap<RowId, Vec<BatchOp>>,
    /// The tables written, for messages.
    tables: HashMap<u32, Table>,
    /// Bytes of the writes held.
    bytes: usize,
    /// Set when a write found its row committed by someone else after the snapshot: the
    /// transaction can no longer commit, and refuses further writes.
    lost: Option<Lost>,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("snapshot", &self.snapshot.seq())
            .field("read_only", &self.read_only)
            .field("rows_written", &self.writes.len())
            .finish_non_exhaustive()
    }
}

impl Db {
    /// Begins a transaction reading at the newest committed state.
    ///
    /// # Errors
    /// [`Error::Closed`] after [`Db::close`].
    pub fn begin(&self, opts: &TxnOptions) -> Result<Transaction> {
        self.inner.check_open()?;
        let snapshot = if opts.read_only {
            Snapshot::new(self.inner.snapshots.clone())
        } else {
            // Taken under the window's lock, which the commit leader holds while it records and
            // publishes a group: every commit after this snapshot is recorded.
            let mut window = self.inner.commit.conflicts.lock();
            // Before the snapshot: a commit leader that publishes after this either is in the
            // snapshot or sees the flag and records its rows (see `commit_group`).
            self.inner.commit.conflicts_open.store(true, std::sync::atomic::Ordering::SeqCst);
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            let snapshot = Snapshot::new(self.inner.snapshots.clone());
            window.open(snapshot.seq());
            snapshot
        };
        Ok(Transaction {
            db: self.inner.clone(),
            opened_at: snapshot.seq(),
            snapshot,
            isolation: opts.isolation,
            read_only: opts.read_only,
            id: if opts.read_only { 0 } else { self.inner.commit.row_locks.new_id() },
            locked: Vec::new(),
            bases: HashMap::new(),
            writes: BTreeMap::new(),
            tables: HashMap::new(),
            bytes: 0,
            lost: None,
        })
    }

    /// Runs `f` in a transaction and commits it, running both again (at most [`TXN_RETRIES`]
    /// more times) while the transaction loses a conflict, at one of its writes or at the
    /// commit. `f` must do nothing outside the transaction that it cannot repeat.
    ///
    /// # Errors
    /// `f`'s errors, and the commit's ([`Error::Conflict`] once the retries are spent).
    pub fn transaction<T>(
        &self,
        opts: &TxnOptions,
        wopts: &WriteOptions,
        mut f: impl FnMut(&mut Transaction) -> Result<T>,
    ) -> Result<T> {
        let mut tries = 0;
        loop {
            let mut tx = self.begin(opts)?;
            // A write of `f` may already report the conflict.
            let out = match f(&mut tx) {
                Err(e) if e.is_retryable() && tries < TXN_RETRIES => {
                    tries += 1;
                    continue;
                }
                r => r?,
            };
            match tx.commit(wopts) {
                Err(e) if e.is_retryable() && tries < TXN_RETRIES => tries += 1,
                r => return r.map(|()| out),
            }
        }
    }
}

impl Transaction {
    /// The sequence number the transaction reads at (under READ COMMITTED, its statement).
    pub fn snapshot_seq(&self) -> u64 {
        self.snapshot.seq()
    }

    /// How the transaction reads.
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    /// A statement begins: under [`Isolation::ReadCommitted`] reads from now on see every
    /// commit so far (with the transaction's own writes laid over them); under snapshot
    /// isolation nothing changes.
    pub fn new_statement(&mut self) {
        if self.isolation == Isolation::ReadCommitted && !self.read_only {
            self.snapshot = Snapshot::new(self.db.snapshots.clone());
        }
    }

    /// Locks the row with `key` (present or not) until the transaction ends, waiting while
    /// another transaction holds it, and says whether the row is still as the snapshot has it.
    /// A caller that locks a row before it reads and writes it never loses that row to a
    /// concurrent writer that locks it too: that writer waits.
    ///
    /// Under snapshot isolation a row committed by another transaction after the snapshot
    /// loses, as a write of it would ([`Error::Conflict`], and the transaction is lost); under
    /// READ COMMITTED it answers [`Locked::Changed`].
    ///
    /// # Errors
    /// [`Error::Deadlock`] when the holder waits, directly or through others, for a row this
    /// transaction holds (nothing is locked; the transaction should be rolled back); the
    /// transaction's loss, if it lost a conflict before; [`Error::InvalidArgument`] for a
    /// read-only transaction.
    pub fn lock(&mut self, table: &Table, key: &[Value]) -> Result<Locked> {
        let row = self.lockable(table, key)?;
        let newly = match self.db.commit.row_locks.lock(self.id, &row) {
            Ok(newly) => newly,
            Err(crate::mvcc::locks::Deadlock) => {
                return Err(Error::Deadlock { table: table.name().to_owned(), key: format!("{key:?}") })
            }
        };
        self.locked_now(row, newly)
    }

    /// As [`Transaction::lock`] without waiting: `Ok(None)` when another transaction holds the
    /// row.
    ///
    /// # Errors
    /// As [`Transaction::lock`], less the deadlock.
    pub fn try_lock(&mut self, table: &Table, key: &[Value]) -> Result<Option<Locked>> {
        let row = self.lockable(table, key)?;
        match self.db.commit.row_locks.try_lock(self.id, &row) {
            Some(newly) => self.locked_now(row, newly).map(Some),
            None => Ok(None),
        }
    }

    fn lockable(&self, table: &Table, key: &[Value]) -> Result<RowId> {
        self.check_table(table)?;
        if self.read_only {
            return Err(Error::InvalidArgument("a read-only transaction cannot lock rows".into()));
        }
        if let Some(lost) = &self.lost {
            return Err(self.error_of(lost.clone()));
        }
        Ok((table.info().id, table.encode_key(key)?))
    }

    /// Keeps the first sequence number `row` was known at. Only READ COMMITTED needs it: under
    /// snapshot isolation every row's base is the one snapshot, which a missing entry means.
    fn note_base(&mut self, row: RowId, seq: u64) {
        if self.isolation == Isolation::ReadCommitted {
            self.bases.entry(row).or_insert(seq);
        }
    }

    /// The row is held: is it as the snapshot has it?
    fn locked_now(&mut self, row: RowId, newly: bool) -> Result<Locked> {
        if newly {
            self.locked.push(row.clone());
        }
        let seq = self.snapshot.seq();
        let checked = self.db.commit.conflicts.lock().check_each([(&row, seq)], &std::collections::HashSet::new());
        match checked {
            Ok(()) => {
                self.note_base(row, seq);
                Ok(Locked::Current)
            }
            Err(Lost::Row { .. }) if self.isolation == Isolation::ReadCommitted => Ok(Locked::Changed),
            Err(lost) => {
                self.lost = Some(lost.clone());
                Err(self.error_of(lost))
            }
        }
    }

    /// Options that read at the transaction's snapshot, without its own writes.
    pub fn read_options(&self) -> ReadOptions<'_> {
        ReadOptions { snapshot: Some(&self.snapshot) }
    }

    /// Rows written so far (each counted once however often it was written).
    pub fn rows_written(&self) -> usize {
        self.writes.len()
    }

    fn check_table(&self, table: &Table) -> Result<()> {
        if Arc::ptr_eq(table.db(), &self.db) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!("table `{}` belongs to another database", table.name())))
        }
    }

    /// The row with `key` as the transaction sees it: its own writes over its snapshot.
    pub fn get(&self, table: &Table, key: &[Value], projection: &Projection) -> Result<Option<Vec<Value>>> {
        self.check_table(table)?;
        let row = (table.info().id, table.encode_key(key)?);
        let Some(ops) = self.writes.get(&row) else {
            return table.get(key, projection, &self.read_options());
        };
        // The snapshot's row only matters when the transaction's first write to it is partial.
        let base = match ops.first().map(|op| op.kind) {
            Some(Kind::Update) => table.cells_at(&row.1, None, &self.read_options())?,
            _ => None,
        };
        let cells = fold(&table.info().value_types, base, ops)?;
        cells.map(|c| project_with(table.info(), KeyOf::Values(key), c, projection)).transpose()
    }

    /// The rows in `range`, in key order, projected, as the transaction sees them: its own
    /// writes over its snapshot.
    pub fn scan(&self, table: &Table, range: &KeyRange, projection: &Projection) -> Result<ScanIter> {
        self.check_table(table)?;
        let pending = self.pending(table, range)?;
        if pending.is_empty() {
            return table.scan(range, projection, &self.read_options());
        }
        let base = table.scan(range, &Projection::All, &self.read_options())?;
        Ok(ScanIter::overlay(Overlay::new(base, pending, table.info_arc(), projection.clone())))
    }

    /// Answers an analytical scan as [`Table::scan_batches`], as the transaction sees the table:
    /// where it wrote rows in the range, they are laid over its snapshot's and the request runs
    /// over the merged rows (on the calling thread, in one pass); elsewhere the plain scan runs
    /// at the snapshot.
    pub fn scan_batches(&self, table: &Table, req: &ScanRequest) -> Result<BatchIter> {
        self.check_table(table)?;
        if self.pending(table, &req.range)?.is_empty() {
            return table.scan_batches(req, &self.read_options());
        }
        crate::scan::run_row_scan(&self.db.scans, &table.info_arc(), req, |projection| {
            self.scan(table, &req.range, projection)
        })
    }

    /// The transaction's written rows of `table` in `range`, in key order.
    fn pending(&self, table: &Table, range: &KeyRange) -> Result<VecDeque<(Vec<u8>, Vec<BatchOp>)>> {
        let (lo, hi) = table.encode_range(range)?;
        let id = table.info().id;
        Ok(self
            .writes
            .range((id, lo)..)
            .take_while(|((t, k), _)| *t == id && hi.as_ref().is_none_or(|h| k < h))
            .map(|((_, k), ops)| (k.clone(), ops.clone()))
            .collect())
    }

    fn push(&mut self, table: &Table, op: BatchOp) -> Result<()> {
        self.check_table(table)?;
        self.tables.entry(table.info().id).or_insert_with(|| table.clone());
        self.add(vec![op])
    }

    /// Adds every operation of `batch` (written for tables of this database) to the
    /// transaction, or none of them: a refused batch leaves the transaction as it was, unless it
    /// lost a conflict (then the transaction is lost, as at any write).
    ///
    /// # Errors
    /// As [`Transaction::insert`]; [`Error::UnknownTable`] for an operation on a table that no
    /// longer exists.
    pub fn write_batch(&mut self, batch: WriteBatch) -> Result<()> {
        let view = self.db.view.load();
        for op in &batch.ops {
            if !self.tables.contains_key(&op.table_id) {
                let t = view
                    .version
                    .tables
                    .get(&op.table_id)
                    .ok_or_else(|| Error::UnknownTable(format!("(id {})", op.table_id)))?;
                self.tables.insert(op.table_id, Table::new(self.db.clone(), t.info.clone()));
            }
        }
        self.add(batch.ops)
    }

    /// Adds `ops` after the checks every write takes: all of them, or none.
    fn add(&mut self, ops: Vec<BatchOp>) -> Result<()> {
        if self.read_only {
            return Err(Error::InvalidArgument("a read-only transaction cannot write".into()));
        }
        let n: usize = ops.iter().map(|op| op.key.len() + op.row.len() + 16).sum();
        let max = self.db.config.opts.txn_max_bytes;
        if self.bytes + n > max {
            return Err(Error::OutOfMemory(format!(
                "the transaction holds {} bytes of writes; this one would take it past Options::txn_max_bytes \
                 ({max}): it was not added (the transaction's earlier writes are still held)",
                self.bytes
            )));
        }
        if let Some(lost) = &self.lost {
            return Err(self.error_of(lost.clone()));
        }
        // A row already committed by someone else after it was known (its base, or the
        // snapshot) makes the commit lose: say so at this write, as PostgreSQL does, instead of
        // at the commit.
        let rows: Vec<RowId> = ops.iter().map(|op| (op.table_id, op.key.clone())).collect();
        let seq = self.snapshot.seq();
        let early = self.db.commit.conflicts.lock().check_each(
            rows.iter().map(|r| (r, self.bases.get(r).copied().unwrap_or(seq))),
            &std::collections::HashSet::new(),
        );
        if let Err(lost) = early {
            self.lost = Some(lost.clone());
            return Err(self.error_of(lost));
        }
        self.bytes += n;
        if self.isolation == Isolation::ReadCommitted {
            for row in &rows {
                self.bases.entry(row.clone()).or_insert(seq);
            }
        }
        for (row, op) in rows.into_iter().zip(ops) {
            self.writes.entry(row).or_default().push(op);
        }
        Ok(())
    }

    /// Inserts a full row (replacing one with the same key), as [`Table::insert`].
    pub fn insert(&mut self, table: &Table, row: &[Value]) -> Result<()> {
        let op = table.encode_insert(row)?;
        self.push(table, op)
    }

    /// Sets the named columns of a row, as [`Table::update`]: a row the transaction does not
    /// see stays missing.
    pub fn update(&mut self, table: &Table, key: &[Value], set: &[(&str, Value)]) -> Result<()> {
        let op = table.encode_update(key, set)?;
        self.push(table, op)
    }

    /// Deletes a row, as [`Table::delete`].
    pub fn delete(&mut self, table: &Table, key: &[Value]) -> Result<()> {
        let op = table.encode_delete(key)?;
        self.push(table, op)
    }

    /// Applies every write of the transaction, atomically (one WAL record), or none.
    ///
    /// # Errors
    /// [`Error::Conflict`] when another commit wrote one of its rows after its snapshot (also
    /// when a write already reported that), and [`Error::TxnTooOld`] when it was open too long
    /// to be checked: nothing of it was written. Otherwise as [`Db::write`].
    pub fn commit(mut self, opts: &WriteOptions) -> Result<()> {
        if let Some(lost) = self.lost.take() {
            return Err(self.error_of(lost));
        }
        if self.writes.is_empty() {
            return Ok(());
        }
        let writes = std::mem::take(&mut self.writes);
        let seq = self.snapshot.seq();
        let rows: Vec<(RowId, u64)> =
            writes.keys().map(|r| (r.clone(), self.bases.get(r).copied().unwrap_or(seq))).collect();
        let mut batch = WriteBatch::new();
        for op in writes.into_values().flatten() {
            batch.push(op);
        }
        let validate = Validate { rows };
        self.db.commit_request(batch, opts, Some(validate), None)?.map_err(|lost| self.error_of(lost))
    }

    /// Ends the transaction and gives its writes as one batch, for a log that commits it
    /// elsewhere: a replicated log whose replicas check, at the point of the log where it lands,
    /// that no row it writes ([`WriteBatch::rows`]) was written after the snapshot the
    /// transaction read ([`Transaction::snapshot_seq`]). Nothing is written here.
    ///
    /// # Errors
    /// [`Error::Conflict`] when a write already found its row committed by someone else after
    /// the snapshot.
    pub fn into_batch(mut self) -> Result<WriteBatch> {
        if let Some(lost) = self.lost.take() {
            return Err(self.error_of(lost));
        }
        let mut batch = WriteBatch::new();
        for op in std::mem::take(&mut self.writes).into_values().flatten() {
            batch.push(op);
        }
        Ok(batch)
    }

    /// The error a lost check is reported as.
    fn error_of(&self, lost: Lost) -> Error {
        match lost {
            Lost::TooOld { horizon } => Error::TxnTooOld { snapshot: self.snapshot.seq(), horizon },
            Lost::Row { table, key, .. } => {
                let (name, key) = match self.tables.get(&table) {
                    Some(t) => {
                        let shown = decode_key(&t.info().key_types, &key)
                            .map(|vals| format!("{vals:?}"))
                            .unwrap_or_else(|_| format!("{key:02x?}"));
                        (t.name().to_owned(), shown)
                    }
                    None => (format!("(id {table})"), format!("{key:02x?}")),
                };
                Error::Conflict { table: name, key }
            }
        }
    }

    /// Discards the transaction's writes (as dropping it does).
    pub fn rollback(self) {}

    /// A point to return to with [`Transaction::rollback_to`]: the writes held now (SQL's
    /// `SAVEPOINT`). It copies the writes held, so it costs what they take.
    pub fn savepoint(&self) -> Savepoint {
        Savepoint {
            writes: self.writes.clone(),
            tables: self.tables.clone(),
            bytes: self.bytes,
            lost: self.lost.clone(),
        }
    }

    /// Discards the writes made since `point` was taken (SQL's `ROLLBACK TO SAVEPOINT`); the
    /// snapshot and the rows locked stay. A write since then that lost a conflict is undone with
    /// the rest, so the transaction may commit again (its row is no longer written).
    /// `Savepoint::default()` is the point before any write.
    pub fn rollback_to(&mut self, point: &Savepoint) {
        self.writes = point.writes.clone();
        self.tables = point.tables.clone();
        self.bytes = point.bytes;
        self.lost = point.lost.clone();
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if !self.read_only {
            // After a commit: a waiter that takes a row next reads the committed version.
            self.db.commit.row_locks.release(self.id, &self.locked);
            let mut window = self.db.commit.conflicts.lock();
            window.close(self.opened_at);
            self.db.commit.conflicts_open.store(window.is_recording(), std::sync::atomic::Ordering::SeqCst);
        }
    }
}
