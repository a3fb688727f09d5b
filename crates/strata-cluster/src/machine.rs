//! A group's state machine: a strata database that applies the group's log in order.
//!
//! Besides the group's tables the database holds `__raft`, one row: the id of the last entry
//! applied and the membership last applied. Each entry's rows and that row go in one write batch,
//! so after a crash the database holds every entry up to the one the row names and none after
//! it, and Raft applies the rest again from its log. A table is created before the row records
//! its entry; applying that entry again finds the table and goes on.
//!
//! The database also holds `__written`: for every row an entry wrote, the index of the last
//! entry that wrote it, written in the entry's batch too. A transaction's entry
//! ([`Command::Txn`]) names the last entry its snapshot held; it is applied only when none of
//! its rows was written after that entry, else answered [`Reply::Conflict`] with nothing
//! written. The rows are the database's own, so every replica decides alike.
//!
//! An entry the database refuses (its batch names no table here, or breaks a budget) is refused
//! on every replica alike, since they hold the same data: it is recorded as applied with nothing
//! written, and its writer is answered [`Reply::Refused`]. A failure of the database itself
//! stops the group (Raft shuts it down on a storage error).

use std::collections::BTreeMap;
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

use crate::types::{Cfg, Command, GroupId, MetaCommand, NodeId, Reply, ShardInfo, TableMap};

/// The table holding the applied state.
pub const RAFT_TABLE: &str = "__raft";

/// The table holding each written row's last writing entry: `(row BYTEA, entry BIGINT)`, the
/// row as its table's id (4 bytes, big-endian) and its encoded primary key.
pub const WRITTEN_TABLE: &str = "__written";

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
    written: Table,
    applied: Applied,
}

fn raft_schema() -> strata::Result<Schema> {
    Schema::new(vec![Column::new("id", ColumnType::BigInt), Column::new("state", ColumnType::Bytea)], &["id"])
}

fn written_schema() -> strata::Result<Schema> {
    Schema::new(vec![Column::new("row", ColumnType::Bytea), Column::new("entry", ColumnType::BigInt)], &["row"])
}

/// A row's key in `__written`.
fn written_key(table: u32, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + key.len());
    out.extend_from_slice(&table.to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// The index of the last entry applied in what `tx` reads (its snapshot): the entry a
/// transaction's [`Command::Txn`] names as its start. 0 before any.
pub fn applied_index(db: &Db, tx: &strata::Transaction) -> strata::Result<u64> {
    let raft = db.table(RAFT_TABLE)?;
    match tx.get(&raft, &[Value::BigInt(0)], &Projection::All)?.as_deref() {
        Some([_, Value::Bytea(b)]) => {
            let applied: Applied = postcard::from_bytes(b)
                .map_err(|e| strata::Error::InvalidArgument(format!("the applied Raft state does not decode: {e}")))?;
            Ok(applied.last.map_or(0, |l| l.index))
        }
        _ => Ok(0),
    }
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
        // Both made before the group's first entry, so under the same ids on every replica.
        let (raft, written) = match (db.table(RAFT_TABLE), db.table(WRITTEN_TABLE)) {
            (Ok(r), Ok(w)) => (r, w),
            (Err(strata::Error::UnknownTable(_)), Err(strata::Error::UnknownTable(_))) => (
                db.create_table(RAFT_TABLE, raft_schema()?, TableOptions::default())?,
                db.create_table(WRITTEN_TABLE, written_schema()?, TableOptions::default())?,
            ),
            (Ok(_), Err(strata::Error::UnknownTable(_))) => {
                return Err(strata::Error::InvalidArgument(format!(
                    "{}: this replica was made by a strata that kept no {WRITTEN_TABLE} table; remove the \
                     node's directory and let the replica be made again",
                    dir.display()
                )))
            }
            (Err(e), _) | (_, Err(e)) => return Err(e),
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
        Ok(Machine { db: Arc::new(db), raft, written, applied })
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
        let index = entry.log_id.index;
        let (batch, commit_ms, refused) = match entry.payload {
            EntryPayload::Blank => (strata::WriteBatch::new(), 0, None),
            EntryPayload::Membership(m) => {
                applied.membership = StoredMembership::new(Some(entry.log_id), m);
                (strata::WriteBatch::new(), 0, None)
            }
            EntryPayload::Normal(Command::CreateTable { name, schema, layout, lineage }) => {
                let refused = match self.create_table(&name, &schema, layout, lineage) {
                    Ok(()) => None,
                    Err(e) if refused_alike(&e) => Some(Reply::Refused(e.to_string())),
                    Err(e) => return Err(sm_error(e)),
                };
                (strata::WriteBatch::new(), 0, refused)
            }
            EntryPayload::Normal(Command::Meta(m)) => match self.meta_batch(m) {
                Ok(b) => (b, 0, None),
                Err(e) if refused_alike(&e) => (strata::WriteBatch::new(), 0, Some(Reply::Refused(e.to_string()))),
                Err(e) => return Err(sm_error(e)),
            },
            EntryPayload::Normal(Command::Write { payload, commit_ms }) => {
                match strata::WriteBatch::from_payload(&payload) {
                    Ok(b) => (b, commit_ms, None),
                    Err(e) => (strata::WriteBatch::new(), 0, Some(Reply::Refused(e.to_string()))),
                }
            }
            EntryPayload::Normal(Command::Txn { start, payload, commit_ms }) => {
                match strata::WriteBatch::from_payload(&payload) {
                    Ok(b) => match self.conflict(&b, start).map_err(sm_error)? {
                        None => (b, commit_ms, None),
                        Some(m) => (strata::WriteBatch::new(), 0, Some(Reply::Conflict(m))),
                    },
                    Err(e) => (strata::WriteBatch::new(), 0, Some(Reply::Refused(e.to_string()))),
                }
            }
        };
        let state = postcard::to_stdvec(&applied).map_err(sm_error)?;
        let raft_row = [Value::BigInt(0), Value::Bytea(state)];
        let opts = strata::WriteOptions::default();
        let mut with_rows = batch.clone();
        let mut rows: Vec<Vec<u8>> = batch.rows().map(|(t, k)| written_key(t, k)).collect();
        rows.sort_unstable();
        rows.dedup();
        for row in rows {
            with_rows.insert(&self.written, &[Value::Bytea(row), Value::BigInt(index as i64)]).map_err(sm_error)?;
        }
        with_rows.insert(&self.raft, &raft_row).map_err(sm_error)?;
        let reply = match self.db.apply_replicated(with_rows, commit_ms, &opts) {
            Ok(seq) => refused.unwrap_or(Reply::Applied { seq }),
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

    /// Why a transaction that read the entries up to `start` may not commit `batch`: a row it
    /// writes was written by a later entry. `None` when it may.
    fn conflict(&self, batch: &strata::WriteBatch, start: u64) -> strata::Result<Option<String>> {
        for (table, key) in batch.rows() {
            let row = self.written.get(
                &[Value::Bytea(written_key(table, key))],
                &Projection::All,
                &ReadOptions::default(),
            )?;
            if let Some([_, Value::BigInt(entry)]) = row.as_deref() {
                if *entry as u64 > start {
                    let name = self
                        .db
                        .table_names()
                        .into_iter()
                        .find(|n| self.db.table(n).is_ok_and(|t| t.info().id == table));
                    return Ok(Some(format!(
                        "a row of table {} that the transaction writes was written at entry {entry}, after its \
                         snapshot (entry {start})",
                        name.unwrap_or_else(|| format!("#{table}"))
                    )));
                }
            }
        }
        Ok(None)
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

impl Machine {
    /// The rows a change to the shard map writes into [`CLUSTER_TABLE`] (created by the first).
    fn meta_batch(&self, m: MetaCommand) -> strata::Result<strata::WriteBatch> {
        let t = match self.db.table(CLUSTER_TABLE) {
            Ok(t) => t,
            Err(strata::Error::UnknownTable(_)) => {
                self.db.create_table(CLUSTER_TABLE, cluster_schema()?, TableOptions::default())?
            }
            Err(e) => return Err(e),
        };
        let mut batch = strata::WriteBatch::new();
        match m {
            MetaCommand::CreateTable { name, schema, splits, replicas } => {
                let table_key = format!("table/{name}");
                if t.get(&[Value::Text(table_key.clone())], &Projection::All, &ReadOptions::default())?.is_some() {
                    return Err(strata::Error::TableExists(name));
                }
                Schema::from_bytes(&schema)?;
                if replicas.len() != splits.len() + 1 || replicas.iter().any(Vec::is_empty) {
                    return Err(strata::Error::InvalidArgument(format!(
                        "{} split points make {} shards, but replicas were given for {}",
                        splits.len(),
                        splits.len() + 1,
                        replicas.len()
                    )));
                }
                if splits.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(strata::Error::InvalidArgument("split points must ascend".into()));
                }
                let next =
                    match t.get(&[Value::Text("next".into())], &Projection::All, &ReadOptions::default())?.as_deref() {
                        Some([_, Value::Bytea(b)]) => {
                            b.as_slice().try_into().map(u64::from_le_bytes).map_err(|_| strata::Error::Corruption {
                                path: CLUSTER_TABLE.into(),
                                offset: 0,
                                reason: "the next shard id is not 8 bytes".into(),
                            })?
                        }
                        _ => 1,
                    };
                let mut shards = Vec::new();
                for (i, nodes) in replicas.into_iter().enumerate() {
                    let info = ShardInfo {
                        id: next + i as u64,
                        table: name.clone(),
                        lo: i.checked_sub(1).map(|j| splits[j].clone()),
                        hi: splits.get(i).cloned(),
                        replicas: nodes,
                    };
                    batch.insert(&t, &[Value::Text(shard_key(info.id)), Value::Bytea(encode(&info)?)])?;
                    shards.push(info.id);
                }
                let next = next + shards.len() as u64;
                let map = TableMap { name, schema, shards };
                batch.insert(&t, &[Value::Text(table_key), Value::Bytea(encode(&map)?)])?;
                batch.insert(&t, &[Value::Text("next".into()), Value::Bytea(next.to_le_bytes().to_vec())])?;
            }
            MetaCommand::SetReplicas { shard, replicas } => {
                let key = shard_key(shard);
                let row = t.get(&[Value::Text(key.clone())], &Projection::All, &ReadOptions::default())?;
                let Some([_, Value::Bytea(b)]) = row.as_deref() else {
                    return Err(strata::Error::InvalidArgument(format!("there is no shard {shard}")));
                };
                let mut info: ShardInfo = postcard::from_bytes(b)
                    .map_err(|e| strata::Error::InvalidArgument(format!("shard map row {key} does not decode: {e}")))?;
                let mut seen = std::collections::BTreeSet::new();
                if replicas.is_empty() || !replicas.iter().all(|n| seen.insert(*n)) {
                    return Err(strata::Error::InvalidArgument(format!(
                        "shard {shard} needs one or more distinct replicas, not {replicas:?}"
                    )));
                }
                info.replicas = replicas;
                batch.insert(&t, &[Value::Text(key), Value::Bytea(encode(&info)?)])?;
            }
            MetaCommand::SetWorker { node, url } => {
                batch.insert(&t, &[Value::Text(format!("worker/{node:020}")), Value::Bytea(url.into_bytes())])?;
            }
        }
        Ok(batch)
    }
}

/// The key of shard `id`'s row in the shard map.
fn shard_key(id: GroupId) -> String {
    format!("shard/{id:020}")
}

/// A shard map record's bytes (postcard).
fn encode<T: Serialize>(v: &T) -> strata::Result<Vec<u8>> {
    postcard::to_stdvec(v)
        .map_err(|e| strata::Error::InvalidArgument(format!("a shard map record does not encode: {e}")))
}

/// The table of the metadata group's database that holds the shard map: `(k TEXT, v BYTEA)`,
/// with rows `table/NAME` ([`TableMap`]), `shard/ID` ([`ShardInfo`], the id zero-padded to 20
/// digits), `worker/ID` (node ID's worker URL, UTF-8, the id padded alike) and `next` (the next
/// shard id, u64 LE).
pub const CLUSTER_TABLE: &str = "__cluster";

fn cluster_schema() -> strata::Result<Schema> {
    Schema::new(vec![Column::new("k", ColumnType::Text), Column::new("v", ColumnType::Bytea)], &["k"])
}

/// The shard map a metadata group's database holds: its tables and shards (in id order).
pub fn cluster_map(db: &Db) -> strata::Result<(Vec<TableMap>, Vec<ShardInfo>)> {
    let t = match db.table(CLUSTER_TABLE) {
        Ok(t) => t,
        Err(strata::Error::UnknownTable(_)) => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(e),
    };
    let (mut tables, mut shards) = (Vec::new(), Vec::new());
    let bad =
        |k: &str, e: postcard::Error| strata::Error::InvalidArgument(format!("shard map row {k} does not decode: {e}"));
    for row in t.scan(&strata::KeyRange::all(), &Projection::All, &ReadOptions::default())? {
        if let [Value::Text(k), Value::Bytea(v)] = row?.as_slice() {
            if k.starts_with("table/") {
                tables.push(postcard::from_bytes(v).map_err(|e| bad(k, e))?);
            } else if k.starts_with("shard/") {
                shards.push(postcard::from_bytes(v).map_err(|e| bad(k, e))?);
            }
        }
    }
    Ok((tables, shards))
}

/// What a replica's database holds, for comparing replicas that applied the same entries: the
/// rows of every table but `__raft` (which holds the replica's own Raft state) and a hash of
/// them, table by table in name order, rows in key order.
pub fn digest(db: &Db) -> strata::Result<(u64, u64)> {
    use std::hash::{Hash, Hasher};
    let mut names = db.table_names();
    names.sort();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut rows = 0u64;
    for name in names.iter().filter(|n| n.as_str() != RAFT_TABLE) {
        name.hash(&mut hasher);
        let t = db.table(name)?;
        for row in t.scan(&strata::KeyRange::all(), &Projection::All, &ReadOptions::default())? {
            format!("{:?}", row?).hash(&mut hasher);
            rows += 1;
        }
    }
    Ok((rows, hasher.finish()))
}

/// Each node's worker URL, as the metadata group's database records them.
pub fn cluster_workers(db: &Db) -> strata::Result<BTreeMap<NodeId, String>> {
    let t = match db.table(CLUSTER_TABLE) {
        Ok(t) => t,
        Err(strata::Error::UnknownTable(_)) => return Ok(BTreeMap::new()),
        Err(e) => return Err(e),
    };
    let mut out = BTreeMap::new();
    for row in t.scan(&strata::KeyRange::all(), &Projection::All, &ReadOptions::default())? {
        if let [Value::Text(k), Value::Bytea(v)] = row?.as_slice() {
            if let Some(id) = k.strip_prefix("worker/").and_then(|n| n.parse::<NodeId>().ok()) {
                out.insert(id, String::from_utf8_lossy(v).into_owned());
            }
        }
    }
    Ok(out)
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
