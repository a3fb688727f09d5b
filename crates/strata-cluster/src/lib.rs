//! strata as a cluster of nodes on which tables are split by primary-key range into shards,
//! each shard a Raft group (openraft) of replicas, each replica a strata database.
//!
//! What is here so far, from the bottom up:
//!
//! - [`log`]: a group's Raft log and vote, in one directory, checksummed records appended and
//!   synced before Raft counts them.
//! - [`machine`]: a group's state machine, a strata [`Db`](strata::Db). A log entry carries
//!   strata's WAL payload for a write batch and the commit time the leader chose; every replica
//!   applies the entries in log order with [`Db::apply_replicated`](strata::Db::apply_replicated),
//!   so each holds the same versions under the same sequence numbers and times, and a read as of
//!   a sequence number or time answers alike on any of them. The last applied entry is written
//!   in the same batch as its rows, so a restart neither loses nor repeats one.
//! - [`net`]: the one TCP port of a node, carrying Raft's messages for every group it hosts,
//!   and writes sent to a group's leader.
//! - [`group`]: a replica of one group on one node, started from its directory.
//! - [`node`]: a node: the metadata group (its membership the nodes, its database the shard
//!   map), the shard replicas the map assigns it, requests from clients routed to shard
//!   leaders, transactions at a shard's leader, and the worker running query tasks.
//! - [`sql`]: distributed SQL on datafusion-distributed: a sharded table's scan, one task per
//!   shard on a node holding it, every shard read at one read point.
//!
//! docs/cluster.md says what works today.

#![deny(missing_docs)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod group;
pub mod log;
pub mod machine;
pub mod net;
pub mod node;
pub mod sql;
pub mod types;

pub use group::{Replica, ReplicaOptions};
pub use net::{Hosted, Server};
pub use node::{Node, NodeOptions};
pub use types::{Cfg, Command, GroupId, NodeId, Reply};

/// An error of the cluster layer, with what it was doing.
#[derive(Debug)]
pub enum Error {
    /// strata refused or failed an operation.
    Strata(strata::Error),
    /// Raft refused or failed an operation (no leader, shutting down, not a member).
    Raft(String),
    /// A node could not be reached or answered with something that does not decode.
    Network(String),
    /// A file of the cluster layer could not be read or written.
    Io(String),
    /// A query failed.
    Sql(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Strata(e) => write!(f, "{e}"),
            Error::Raft(m) => write!(f, "raft: {m}"),
            Error::Network(m) => write!(f, "network: {m}"),
            Error::Io(m) => write!(f, "{m}"),
            Error::Sql(m) => write!(f, "query: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<strata::Error> for Error {
    fn from(e: strata::Error) -> Self {
        Error::Strata(e)
    }
}

/// A result of the cluster layer.
pub type Result<T> = std::result::Result<T, Error>;
