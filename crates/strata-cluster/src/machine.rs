//! A group's state machine: a strata database that applies the group's log in order.
//!
//! Besides the group's tables the database holds `__raft`, one row: the id of the last entry
//! applied and the membership last applied. Each entry's rows and that row go in one write batch,
//! so after a crash the database holds every entry up to the one the row names and none after
//! it, and Raft applies the rest again from its log. A table is created before the row records
//! its entry; applying that entry again finds the table and goes on.
//!
//! An entry the database refuses (its batch names no table here, or breaks a budget) is refused
//! on every replica alike, since they hold the same data: it is recorded as applied with nothing
//! written, and its writer is answered [`Reply::Refused`]. A failure of the database itself
//! stops the group (Raft shuts it down on a storage error).

use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use strata::{Column, ColumnType, Db, Engine, Options, Projection, ReadOptions, Schema, Table, TableOptions, Value};

use crate::types::{Cfg, Command, NodeId, Reply};

/// The table holding the applied state.
pub const RAFT_TABLE: &str = "__raft";

/// What `__raft` holds.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Applied {
    last: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
}

/// A group's database and what of the log it holds.
pub struct Machine {
    db: Arc<Db>,
    raft: Table,
    applied: Applied,
}

fn raft_schema() -> strata::Result<Schema> {
    Schema::new(vec![Column::new("id", ColumnType::BigInt), Column::new("state", ColumnType::Bytea)], &["id"])
}

fn sm_error(e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::write_state_machine(AnyError::error(e.to_string())).into()
}

/// Whether `e` is a refusal every replica makes alike (so the entry is applied as nothing).
fn refused_alike(e: &strata::Error) -> bool {
    matches!(
        e,
        strata::Error::InvalidArgument(_)
            | strata::Error::UnknownTable(_)
            | strata::Error::TableExists(_)
            | strata::Error::TypeMismatch { .. }
            | strata::Error::OutOfMemory(_)
    )
}

impl Machine {
    /// Opens (or creates) the group's database in `dir`.
    pub fn open(dir: &Path, opts: Options) -> strata::Result<Machine> {
        let db = Db::open(dir, opts)?;
        let raft = match db.table(RAFT_TABLE) {
            Ok(t) => t,
            Err(strata::Error::UnknownTable(_)) => {
                db.create_table(RAFT_TABLE, raft_schema()?, TableOptions::default())?
            }
            Err(e) => return Err(e),
        };
        let row = raft.get(&[Value::BigInt(0)], &Projection::All, &ReadOptions::default())?;
        let applied = match row.as_deref() {
            Some([_, Value::Bytea(b)]) => postcard::from_bytes(b).map_err(|e| {
                strata::Error::InvalidArgument(format!(
                    "{}: the applied Raft state does not decode: {e}",
                    dir.display()
                ))
            })?,
            _ => Applied::default(),
        };
        Ok(Machine { db: Arc::new(db), raft, applied })
    }

    /// The group's database (for reads; writes go through the log).
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    /// The id of the last entry applied.
    pub fn last_applied(&self) -> Option<LogId<NodeId>> {
        self.applied.last
    }

    /// Applies one entry: its rows, if any, and `__raft` in one batch. (The error is openraft's,
    /// large as it is: it goes straight back to openraft.)
    #[allow(clippy::result_large_err)]
    fn apply_one(&mut self, entry: Entry<Cfg>) -> Result<Reply, StorageError<NodeId>> {
        let mut applied = self.applied.clone();
        applied.last = Some(entry.log_id);
        let (batch, commit_ms, refused) = match entry.payload {
            EntryPayload::Blank => (strata::WriteBatch::new(), 0, None),
            EntryPayload::Membership(m) => {
                applied.membership = StoredMembership::new(Some(entry.log_id), m);
                (strata::WriteBatch::new(), 0, None)
            }
            EntryPayload::Normal(Command::CreateTable { name, schema, layout, lineage }) => {
                let refused = match self.create_table(&name, &schema, layout, lineage) {
                    Ok(()) => None,
                    Err(e) if refused_alike(&e) => Some(e.to_string()),
                    Err(e) => return Err(sm_error(e)),
                };
                (strata::WriteBatch::new(), 0, refused)
            }
            EntryPayload::Normal(Command::Write { payload, commit_ms }) => {
                match strata::WriteBatch::from_payload(&payload) {
                    Ok(b) => (b, commit_ms, None),
                    Err(e) => (strata::WriteBatch::new(), 0, Some(e.to_string())),
                }
            }
        };
        let state = postcard::to_stdvec(&applied).map_err(sm_error)?;
        let raft_row = [Value::BigInt(0), Value::Bytea(state)];
        let opts = strata::WriteOptions::default();
        let mut with_rows = batch;
        with_rows.insert(&self.raft, &raft_row).map_err(sm_error)?;
        let reply = match self.db.apply_replicated(with_rows, commit_ms, &opts) {
            Ok(seq) => refused.map_or(Reply::Applied { seq }, Reply::Refused),
            Err(e) if refused_alike(&e) => {
                let mut alone = strata::WriteBatch::new();
                alone.insert(&self.raft, &raft_row).map_err(sm_error)?;
                self.db.apply_replicated(alone, commit_ms, &opts).map_err(sm_error)?;
                Reply::Refused(e.to_string())
            }
            Err(e) => return Err(sm_error(e)),
        };
        self.applied = applied;
        Ok(reply)
    }

    fn create_table(&self, name: &str, schema: &[u8], layout: Option<String>, lineage: bool) -> strata::Result<()> {
        let schema = Schema::from_bytes(schema)?;
        if let Ok(t) = self.db.table(name) {
            // Applied before a crash that came before its entry was recorded.
            if t.schema() == &schema {
                return Ok(());
            }
        }
        let engine = if lineage { Engine::Lineage } else { Engine::Lsm };
        let opts = layout.map_or_else(TableOptions::default, TableOptions::with_layout).with_engine(engine);
        self.db.create_table(name, schema, opts).map(|_| ())
    }
}

/// Snapshots are not made yet: logs are kept whole (the groups run with
/// [`openraft::SnapshotPolicy::Never`]), so a new or lagging replica catches up from the log.
pub struct NoSnapshots;

impl RaftSnapshotBuilder<Cfg> for NoSnapshots {
    async fn build_snapshot(&mut self) -> Result<Snapshot<Cfg>, StorageError<NodeId>> {
        Err(sm_error("snapshots of a shard are not made yet; its log is kept whole"))
    }
}

impl RaftStateMachine<Cfg> for Machine {
    type SnapshotBuilder = NoSnapshots;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>> {
        Ok((self.applied.last, self.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Reply>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<Cfg>> + Send,
        I::IntoIter: Send,
    {
        let mut replies = Vec::new();
        for entry in entries {
            replies.push(self.apply_one(entry)?);
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        NoSnapshots
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        _meta: &SnapshotMeta<NodeId, BasicNode>,
        _snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        Err(sm_error("snapshots of a shard are not installed yet; its log is kept whole"))
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<Cfg>>, StorageError<NodeId>> {
        Ok(None)
    }
}
