//! The database as the commit pipeline's environment: the write stall (waiting on the
//! scheduler), new WAL files, freezing the memtable, and applying a committed batch to the
//! stores it writes (the memtable for LSM tables, with a hot key's updates folded into whole
//! rows; the store itself, in commit order, for a lineage table).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::stall::{room, Room, StallLimits};
use super::{CommitEnv, Validate};
use crate::db::store::{Applies, StoreMap};
use crate::db::workload::{At, Op};
use crate::db::{wal_name, DbInner, ReadView, WriteOptions};
use crate::error::{Error, Result};
use crate::memtable::{Before, Fold, Memtable};
use crate::mvcc::conflict::Lost;
use crate::mvcc::Kind;
use crate::read::PointAt;
use crate::types::row::{carried, encode_row};
use crate::version::TableVersion;
use crate::write::batch::WriteBatch;
use crate::write::wal::WalWriter;

impl DbInner {
    pub(crate) fn write(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        match self.commit_request(batch, opts, None, None)? {
            Ok(()) => Ok(()),
            // Only a request with rows to check can lose.
            Err(lost) => Err(Error::InvalidArgument(format!("a plain write was refused as a transaction: {lost:?}"))),
        }
    }

    /// Commits `batch` through the pipeline (see [`super::Committer::commit`]).
    pub(crate) fn commit_request(
        &self,
        batch: WriteBatch,
        opts: &WriteOptions,
        validate: Option<Validate>,
        at_ms: Option<u64>,
    ) -> Result<std::result::Result<(), Lost>> {
        self.commit.commit(self, batch, opts.sync, validate, at_ms)
    }

    /// Runs `f` as the commit leader (no write group in flight meanwhile).
    pub(crate) fn as_leader<T>(&self, f: impl FnOnce(&mut super::Leader) -> T) -> T {
        self.commit.as_leader(f)
    }

    /// Freezes the memtable and waits until every frozen memtable is in Level-0.
    pub(crate) fn flush(&self) -> Result<()> {
        self.check_writable()?;
        self.as_leader(|leader| match self.view.pin().mem.is_empty() {
            true => Ok(()),
            false => self.commit.rotate(self, leader),
        })?;
        self.wait_background(|_, view| view.imm.is_empty())
    }

    /// What the write-stall rule says of `view`.
    fn room_in(&self, view: &ReadView) -> Room {
        let l0 = view.version.tables.values().map(|t| t.levels[0].runs.len()).max().unwrap_or(0);
        room(l0, view.mem.approximate_bytes(), view.imm.len(), &StallLimits::of(&self.config.opts))
    }

    /// Inserts the memtable's share of `batch` (the writes of tables whose store takes them
    /// there), from sequence number `first` on.
    fn insert_batch(&self, view: &ReadView, stores: &StoreMap, batch: &WriteBatch, first: u64) -> Result<()> {
        // The memtable's bounds first: a reader that sees a version finds it inside them.
        let versions = batch.ops.iter().filter_map(|op| {
            let t = view.version.tables.get(&op.table_id)?;
            (stores.applies(op.table_id) == Applies::Memtable).then_some((
                op.table_id,
                &t.info.value_types[..],
                op.kind,
                &op.row[..],
            ))
        });
        view.mem.widen_by(versions).map_err(|e| Error::corruption("<memtable>", 0, e.0))?;
        for (j, op) in batch.ops.iter().enumerate() {
            let s = first + j as u64;
            let Some(t) = view.version.tables.get(&op.table_id) else { continue };
            if stores.applies(op.table_id) != Applies::Memtable {
                continue;
            }
            // The whole row just before this write, for folding a hot key's updates into it.
            let before = || self.row_before(view, t, &op.key, s - 1);
            let fold = Fold { types: &t.info.value_types, before: &before };
            view.mem
                .insert(op.table_id, &op.key, s, op.kind, &op.row, Some(fold))
                .map_err(|e| Error::corruption("<memtable>", 0, e.0))?;
            match op.kind {
                Kind::Update => {
                    let cols = carried(&op.row, t.info.value_types.len());
                    t.info.workload.record(At::Memtable, Op::Update, cols, 0);
                }
                Kind::Put => t.info.workload.record_inserts(1),
                _ => {}
            }
        }
        Ok(())
    }

    /// Table `t`'s row `key` at `seq` (read through `view`), for [`Fold::before`]. Leader only:
    /// the memtable holds every write up to `seq`.
    fn row_before(&self, view: &ReadView, t: &TableVersion, key: &[u8], seq: u64) -> Before {
        let point = PointAt { tables: &self.tables, snapshot_filter: self.config.opts.snapshot_filter, view, t, seq };
        match point.get_cells(&t.info, key, None, false) {
            Ok(Some(cells)) => {
                let mut row = Vec::new();
                encode_row(&t.info.value_types, &cells, &mut row);
                Before::Row(row)
            }
            Ok(None) => Before::Missing,
            Err(_) => Before::Unknown,
        }
    }
}

impl CommitEnv for DbInner {
    fn check_writable(&self) -> Result<()> {
        DbInner::check_writable(self)
    }

    fn admit(&self, batch: &WriteBatch) -> Result<()> {
        {
            let view = self.view.pin();
            if let Some(op) = batch.ops.iter().find(|op| !view.version.tables.contains_key(&op.table_id)) {
                return Err(Error::UnknownTable(format!("(dropped table id {})", op.table_id)));
            }
        }
        self.check_lineage_budget(batch)
    }

    /// Waits while Level-0 is over its stop trigger or too many memtables wait for flush (the
    /// write-stall rule, [`room`]), and delays the group once by a millisecond while Level-0 is
    /// over its slowdown trigger.
    fn make_room(&self) -> Result<bool> {
        let mut slowed = false;
        loop {
            DbInner::check_writable(self)?;
            // The common case, room in the memtable and Level-0 under its triggers, takes no lock.
            let r = self.room_in(&self.view.pin());
            if r.stop {
                let stalled = |d: Duration| self.io.lock().stall_micros += d.as_micros() as u64;
                self.sched.stall_while(|| self.room_in(&self.view.pin()).stop, stalled)?;
                continue;
            }
            if r.slow && !slowed {
                slowed = true;
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                self.io.lock().stall_micros += t.elapsed().as_micros() as u64;
                continue;
            }
            return Ok(r.rotate);
        }
    }

    fn new_wal(&self) -> Result<(u64, WalWriter)> {
        let number = self.files.next_file.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let wal = WalWriter::create(self.config.fs.as_ref(), &self.config.dir.join(wal_name(number)))?;
        self.config.fs.sync_dir(&self.config.dir)?;
        Ok((number, wal))
    }

    fn freeze(&self, number: u64) {
        self.view.update(|v| {
            let mut imm = vec![v.mem.clone()];
            imm.extend(v.imm.iter().cloned());
            (ReadView { mem: Arc::new(Memtable::new(number)), imm, version: v.version.clone() }, ())
        });
        self.sched.frozen();
    }

    fn visible(&self) -> u64 {
        self.snapshots.visible()
    }

    fn publish(&self, seq: u64) {
        self.snapshots.publish(seq);
    }

    fn in_order(&self, batch: &WriteBatch) -> bool {
        let stores = self.stores.pin();
        !stores.all_memtable() && batch.ops.iter().any(|op| stores.applies(op.table_id) == Applies::InOrder)
    }

    fn apply(&self, batch: &WriteBatch, first: u64) -> Result<()> {
        let stores = self.stores.pin();
        if !stores.all_memtable() {
            let (mut ops, mut wal, mut mem) = (0u64, 0u64, 0u64);
            for (j, op) in batch.ops.iter().enumerate() {
                let Some(t) = stores.get(&op.table_id).filter(|t| t.store.applies() == Applies::InOrder) else {
                    continue;
                };
                t.store.apply(op, first + j as u64).map_err(|e| Error::corruption("<store>", 0, e.0))?;
                ops += 1;
                wal += t.store.checkpoint_bytes(op);
                mem += t.store.memory_estimate(op);
            }
            if ops > 0 {
                self.lineage.applied(ops, wal, mem);
            }
        }
        self.insert_batch(&self.view.pin(), &stores, batch, first)
    }

    fn insert(&self, batch: &WriteBatch, first: u64) -> Result<()> {
        self.insert_batch(&self.view.pin(), &self.stores.pin(), batch, first)
    }

    fn applied(&self, won: &mut dyn Iterator<Item = &WriteBatch>) {
        // Bytes written per table, summed here so each table's counter is written once per group.
        let mut written: Vec<(u32, u64)> = Vec::new();
        for op in won.flat_map(|b| &b.ops) {
            let n = (op.key.len() + op.row.len()) as u64;
            match written.iter_mut().find(|(t, _)| *t == op.table_id) {
                Some((_, b)) => *b += n,
                None => written.push((op.table_id, n)),
            }
        }
        let stores = self.stores.pin();
        for (t, n) in written {
            if let Some(t) = stores.get(&t) {
                t.count_ingested(n);
            }
        }
    }

    fn poison(&self, e: &Error) {
        self.sched.poison(e);
    }
}
