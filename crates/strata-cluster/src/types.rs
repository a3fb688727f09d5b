//! What a group's Raft log entries carry and what applying one answers.

use serde::{Deserialize, Serialize};

/// A node's id in the cluster (its Raft id in every group it holds a replica of).
pub type NodeId = u64;

/// A Raft group's id.
pub type GroupId = u64;

openraft::declare_raft_types!(
    /// The Raft types of every group.
    pub Cfg:
        D = Command,
        R = Reply,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<Cfg>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A log entry's command to a group's database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Create a table (every replica creates it at the same point of the log, so under the same
    /// table id).
    CreateTable {
        /// The table's name.
        name: String,
        /// [`strata::Schema::to_bytes`].
        schema: Vec<u8>,
        /// [`strata::TableOptions::layout`].
        layout: Option<String>,
        /// The lineage engine instead of the LSM tree.
        lineage: bool,
    },
    /// Apply a write batch, made by the leader against its own database.
    Write {
        /// [`strata::WriteBatch::payload`].
        payload: Vec<u8>,
        /// The commit time (Unix ms): the leader's clock when it proposed the batch.
        commit_ms: u64,
    },
    /// Commit a transaction's writes, made by the leader against its own database, unless a
    /// row it writes was written by an entry after `start` (first committer wins: every replica
    /// decides alike, from the rows' last writes its database records).
    Txn {
        /// The last entry the transaction's snapshot held.
        start: u64,
        /// [`strata::WriteBatch::payload`].
        payload: Vec<u8>,
        /// The commit time (Unix ms), as [`Command::Write`]'s.
        commit_ms: u64,
    },
    /// A change to the shard map (the metadata group only).
    Meta(MetaCommand),
}

/// What applying an entry answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Applied.
    Applied {
        /// The database's newest sequence number after the entry.
        seq: u64,
    },
    /// Refused by the database, alike on every replica (nothing of it was written): the message.
    Refused(String),
    /// A [`Command::Txn`] lost: a row it writes was written after its snapshot (nothing of it
    /// was written): the message.
    Conflict(String),
}

/// A value as nodes send it to each other: [`strata::Value`] in serde's terms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum WireValue {
    Null,
    BigInt(i64),
    Int(i32),
    SmallInt(i16),
    TinyInt(i8),
    Double(f64),
    Real(f32),
    Boolean(bool),
    Text(String),
    Bytea(Vec<u8>),
    Date(i32),
    Timestamp(i64),
    TimestampTz(i64),
}

impl From<&strata::Value> for WireValue {
    fn from(v: &strata::Value) -> Self {
        use strata::Value as V;
        match v {
            V::Null => WireValue::Null,
            V::BigInt(x) => WireValue::BigInt(*x),
            V::Int(x) => WireValue::Int(*x),
            V::SmallInt(x) => WireValue::SmallInt(*x),
            V::TinyInt(x) => WireValue::TinyInt(*x),
            V::Double(x) => WireValue::Double(*x),
            V::Real(x) => WireValue::Real(*x),
            V::Boolean(x) => WireValue::Boolean(*x),
            V::Text(x) => WireValue::Text(x.clone()),
            V::Bytea(x) => WireValue::Bytea(x.clone()),
            V::Date(x) => WireValue::Date(*x),
            V::Timestamp(x) => WireValue::Timestamp(*x),
            V::TimestampTz(x) => WireValue::TimestampTz(*x),
        }
    }
}

impl From<WireValue> for strata::Value {
    fn from(v: WireValue) -> Self {
        use strata::Value as V;
        match v {
            WireValue::Null => V::Null,
            WireValue::BigInt(x) => V::BigInt(x),
            WireValue::Int(x) => V::Int(x),
            WireValue::SmallInt(x) => V::SmallInt(x),
            WireValue::TinyInt(x) => V::TinyInt(x),
            WireValue::Double(x) => V::Double(x),
            WireValue::Real(x) => V::Real(x),
            WireValue::Boolean(x) => V::Boolean(x),
            WireValue::Text(x) => V::Text(x),
            WireValue::Bytea(x) => V::Bytea(x),
            WireValue::Date(x) => V::Date(x),
            WireValue::Timestamp(x) => V::Timestamp(x),
            WireValue::TimestampTz(x) => V::TimestampTz(x),
        }
    }
}

/// Values to send.
pub fn to_wire(values: &[strata::Value]) -> Vec<WireValue> {
    values.iter().map(WireValue::from).collect()
}

/// Values received.
pub fn from_wire(values: Vec<WireValue>) -> Vec<strata::Value> {
    values.into_iter().map(strata::Value::from).collect()
}

/// A command to the metadata group (group 0), which holds the shard map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaCommand {
    /// Add a table split into shards at `splits` (encoded values of the first key column,
    /// ascending): shard i holds the keys from split i-1 (inclusive) to split i (exclusive), on
    /// the nodes `replicas[i]`, the first of which starts the shard's group.
    CreateTable {
        /// The table's name.
        name: String,
        /// [`strata::Schema::to_bytes`].
        schema: Vec<u8>,
        /// The split points.
        splits: Vec<Vec<u8>>,
        /// Each shard's replicas.
        replicas: Vec<Vec<NodeId>>,
    },
    /// Set the nodes holding a shard (its replicas, the first of which made its group).
    SetReplicas {
        /// The shard.
        shard: GroupId,
        /// Its replicas, in order.
        replicas: Vec<NodeId>,
    },
    /// Record where a node's worker (the gRPC service running query tasks) listens.
    SetWorker {
        /// The node.
        node: NodeId,
        /// Its worker's URL (`http://HOST:PORT`).
        url: String,
    },
}

/// A sharded table in the shard map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableMap {
    /// The table's name.
    pub name: String,
    /// [`strata::Schema::to_bytes`].
    pub schema: Vec<u8>,
    /// Its shards, in key order.
    pub shards: Vec<GroupId>,
}

/// One shard in the shard map: a key range of a table and the nodes holding it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// The shard's Raft group.
    pub id: GroupId,
    /// Its table.
    pub table: String,
    /// The encoded first-key value it starts at (inclusive); `None`: from the first key.
    pub lo: Option<Vec<u8>>,
    /// The encoded first-key value it ends before; `None`: to the last key.
    pub hi: Option<Vec<u8>>,
    /// The nodes holding a replica.
    pub replicas: Vec<NodeId>,
}

impl ShardInfo {
    /// Whether the key whose first column encodes to `first` falls in this shard.
    pub fn holds(&self, first: &[u8]) -> bool {
        self.lo.as_deref().is_none_or(|lo| first >= lo) && self.hi.as_deref().is_none_or(|hi| first < hi)
    }
}

/// A request to a node from a client or another node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum NodeRequest {
    /// Create a table split into shards at `splits` (values of its first key column), each
    /// replicated on `replicas` nodes.
    CreateTable {
        /// The table's name.
        name: String,
        /// [`strata::Schema::to_bytes`].
        schema: Vec<u8>,
        /// The split points.
        splits: Vec<WireValue>,
        /// Replicas per shard.
        replicas: usize,
    },
    /// Insert rows, all in one shard, as one batch.
    Insert {
        /// The table.
        table: String,
        /// Whole rows.
        rows: Vec<Vec<WireValue>>,
    },
    /// Read one row by key at its shard's leader.
    Get {
        /// The table.
        table: String,
        /// The primary key.
        key: Vec<WireValue>,
    },
    /// [`NodeRequest::Insert`] at a shard's leader.
    ShardInsert {
        /// The shard.
        group: GroupId,
        /// The table.
        table: String,
        /// Whole rows.
        rows: Vec<Vec<WireValue>>,
    },
    /// [`NodeRequest::Get`] at a shard's leader.
    ShardGet {
        /// The shard.
        group: GroupId,
        /// The table.
        table: String,
        /// The primary key.
        key: Vec<WireValue>,
    },
    /// Begin a transaction on the shard of `table` that holds `key` (the primary key, or its
    /// first column at least), at the shard's leader, reading the rows committed before it
    /// began. Its reads and writes ([`NodeRequest::Txn`]) stay in that shard.
    Begin {
        /// The table.
        table: String,
        /// A key of the shard.
        key: Vec<WireValue>,
    },
    /// [`NodeRequest::Begin`] at a shard's leader.
    ShardBegin {
        /// The shard.
        group: GroupId,
        /// The table.
        table: String,
    },
    /// A step of an open transaction, sent to any node (it goes on to the node holding the
    /// transaction).
    Txn {
        /// The transaction.
        txn: TxnId,
        /// The step.
        op: TxnOp,
    },
    /// The index of the last entry committed in a shard's group, confirmed by a quorum just
    /// now, at the shard's leader: a follower that applied up to it reads everything committed
    /// before the request.
    ReadIndex {
        /// The shard.
        group: GroupId,
    },
    /// Add a node (started with `strata node`, not yet a member) to the cluster: a voter of the
    /// metadata group, so it learns the shard map. It holds no shard until one is moved to it.
    AddNode {
        /// Its id.
        id: NodeId,
        /// Its address.
        addr: String,
    },
    /// Remove a node holding no shard replica from the cluster (the metadata group): it leaves
    /// the membership, and shards and queries no longer use it. Its process is not stopped.
    RemoveNode {
        /// Its id.
        id: NodeId,
    },
    /// Move shard `shard`'s replica from node `from` to node `to` (a member holding none of it):
    /// `to` is added, catches up from the log, becomes a voter in `from`'s place, and `from`
    /// drops its replica. Writes and reads go on meanwhile.
    MoveShard {
        /// The shard.
        shard: GroupId,
        /// The node giving its replica up.
        from: NodeId,
        /// The node taking it.
        to: NodeId,
    },
    /// [`NodeRequest::MoveShard`] at the shard's leader.
    ShardMove {
        /// The shard.
        group: GroupId,
        /// The node giving its replica up.
        from: NodeId,
        /// The node taking it.
        to: NodeId,
    },
    /// What this node's replica of a shard holds: [`NodeResponse::Digest`], for comparing
    /// replicas that applied the same entries.
    ShardDigest {
        /// The shard.
        group: GroupId,
    },
    /// How far behind its leader each replica of a group is: [`NodeResponse::Lag`], answered
    /// by the group's leader.
    ShardLag {
        /// The group: a shard, or the metadata group (0).
        group: GroupId,
    },
    /// Run a SQL query over the sharded tables, this node coordinating.
    Sql {
        /// The query.
        query: String,
    },
    /// The nodes and shards, as this node sees them.
    Status,
    /// A sharded table's schema.
    Schema {
        /// The table.
        table: String,
    },
    /// Make the metadata group's first membership: the cluster's first nodes (id, address),
    /// the node asked among them. A cluster already made is left as it is.
    Initialize {
        /// The nodes.
        peers: Vec<(NodeId, String)>,
    },
}

/// An open transaction: the node holding it (the shard leader it began at) and its number
/// there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TxnId {
    /// The node holding it.
    pub node: NodeId,
    /// When that node started (Unix ms), so a number is not taken for one given out before
    /// the node restarted.
    pub epoch: u64,
    /// Its number on that node.
    pub id: u64,
}

/// A step of a transaction ([`NodeRequest::Txn`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TxnOp {
    /// Read a row by key, as the transaction sees it (its snapshot with its own writes).
    Get {
        /// The primary key.
        key: Vec<WireValue>,
    },
    /// Insert (or replace) a whole row.
    Insert {
        /// The row.
        row: Vec<WireValue>,
    },
    /// Delete a row by key.
    Delete {
        /// The primary key.
        key: Vec<WireValue>,
    },
    /// Commit: [`NodeResponse::Written`], or [`NodeResponse::Conflict`] when it lost.
    Commit,
    /// Roll back (nothing of it is written).
    Rollback,
}

/// A node's answer to a [`NodeRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum NodeResponse {
    /// Done.
    Done,
    /// Written: the shard's newest sequence number after the write.
    Written {
        /// The sequence number.
        seq: u64,
    },
    /// A row read, if there is one.
    Row(Option<Vec<WireValue>>),
    /// Not the shard's leader: the leader known, if any.
    NotLeader(Option<(NodeId, String)>),
    /// The shard (or its table) is not started on this node yet: try again.
    NotReady(String),
    /// The cluster as the node sees it.
    Status(ClusterStatus),
    /// A table's schema ([`strata::Schema::to_bytes`]).
    Schema(Vec<u8>),
    /// A transaction began.
    Begun(TxnId),
    /// A log index ([`NodeRequest::ReadIndex`]).
    Index(u64),
    /// What a replica holds ([`NodeRequest::ShardDigest`]).
    Digest {
        /// The last entry it applied.
        applied: u64,
        /// Rows of its tables (all but `__raft`, which holds the replica's own Raft state).
        rows: u64,
        /// A hash of those rows, table by table in key order.
        hash: u64,
    },
    /// How far behind its leader each replica of a group is ([`NodeRequest::ShardLag`]).
    Lag {
        /// The group's leader: the node answering.
        leader: NodeId,
        /// Each replica's lag, as in [`ShardStatus::lag`].
        lag: Vec<(NodeId, Option<u64>)>,
    },
    /// A query's answer: its rows as an Arrow IPC stream.
    Rows {
        /// The IPC stream (schema, then batches).
        ipc: Vec<u8>,
        /// The read point every shard was read at (Unix ms).
        read_ms: u64,
        /// How many times the query ran (2: a worker failed the first run).
        runs: usize,
    },
    /// A transaction lost first-committer-wins (a row it writes was written after its snapshot)
    /// or its shard's leader changed before its commit was proposed: nothing of it is written,
    /// and it is over. Running it again may succeed.
    Conflict(String),
    /// Refused or failed: why.
    Failed(String),
}

/// The cluster as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The node answering.
    pub node: NodeId,
    /// The nodes (id, address), from the metadata group's membership.
    pub nodes: Vec<(NodeId, String)>,
    /// The metadata group's leader.
    pub meta_leader: Option<NodeId>,
    /// How far behind the metadata group's leader each of its members is, as in
    /// [`ShardStatus::lag`].
    pub meta_lag: Vec<(NodeId, Option<u64>)>,
    /// The shards.
    pub shards: Vec<ShardStatus>,
}

/// One shard in [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardStatus {
    /// The shard.
    pub info: ShardInfo,
    /// Its leader, as the answering node's replica knows it or as the leader answered.
    pub leader: Option<NodeId>,
    /// The last entry the answering node's replica applied, when it holds one.
    pub applied: Option<u64>,
    /// For each replica (its node), how many entries of the leader's log it lacks, as far as
    /// the leader has heard: `Some(0)` for the leader; `None` for a replica the leader has not
    /// heard from since it was elected (its node down, say). Empty when no leader answered
    /// within a second.
    pub lag: Vec<(NodeId, Option<u64>)>,
}
