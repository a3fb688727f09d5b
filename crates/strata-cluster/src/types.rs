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
}
