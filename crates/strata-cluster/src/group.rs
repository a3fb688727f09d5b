//! One replica of one group on one node: its Raft log in `DIR/raft`, its database in `DIR/db`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use strata::{Db, Value, WriteBatch};

use crate::log::LogStore;
use crate::machine::Machine;
use crate::net::{Hosted, Network, Proposed};
use crate::types::{Cfg, Command, GroupId, NodeId, Reply};
use crate::{Error, Result};

/// How a replica runs.
#[derive(Debug, Clone)]
pub struct ReplicaOptions {
    /// Options of its database.
    pub db: strata::Options,
    /// A follower that hears nothing from a leader for a time drawn from this range (ms) starts
    /// an election.
    pub election_timeout_ms: (u64, u64),
    /// How often a leader sends heartbeats (ms).
    pub heartbeat_ms: u64,
    /// How long a new replica (a node added, a shard moved) may take to catch up with its
    /// group's log before the change gives up and is undone.
    pub catch_up: Duration,
}

impl Default for ReplicaOptions {
    fn default() -> Self {
        // Ten minutes of history, so a query reads every shard as of its read point even when a
        // flush or compaction ran since.
        let db = strata::Options { history_retention: Some(Duration::from_secs(600)), ..strata::Options::default() };
        ReplicaOptions { db, election_timeout_ms: (300, 600), heartbeat_ms: 60, catch_up: Duration::from_secs(120) }
    }
}

/// A running replica.
pub struct Replica {
    group: GroupId,
    node: NodeId,
    raft: Raft<Cfg>,
    db: Arc<Db>,
    hosted: Hosted,
}

fn raft_error(e: impl std::fmt::Display) -> Error {
    Error::Raft(e.to_string())
}

impl Replica {
    /// Starts node `node`'s replica of group `group` from `dir` (created if missing) and hosts it
    /// in `hosted`, so the node's server hands it the group's messages.
    pub async fn start(
        dir: &Path,
        group: GroupId,
        node: NodeId,
        opts: &ReplicaOptions,
        hosted: &Hosted,
    ) -> Result<Replica> {
        let log = LogStore::open(&dir.join("raft")).map_err(|e| Error::Io(e.to_string()))?;
        let machine = Machine::open(&dir.join("db"), opts.db.clone())?;
        let db = machine.db().clone();
        let config = Config {
            cluster_name: format!("strata-group-{group}"),
            election_timeout_min: opts.election_timeout_ms.0,
            election_timeout_max: opts.election_timeout_ms.1,
            heartbeat_interval: opts.heartbeat_ms,
            snapshot_policy: SnapshotPolicy::Never,
            ..Config::default()
        }
        .validate()
        .map_err(raft_error)?;
        let raft = Raft::new(node, Arc::new(config), Network::new(group), log, machine).await.map_err(raft_error)?;
        hosted.add(group, raft.clone());
        Ok(Replica { group, node, raft, db, hosted: hosted.clone() })
    }

    /// Makes the group's first membership: `members` (id → address), on one replica of a new
    /// group. A group already initialized is left as it is.
    pub async fn initialize(&self, members: &BTreeMap<NodeId, String>) -> Result<()> {
        if self.raft.is_initialized().await.map_err(raft_error)? {
            return Ok(());
        }
        let nodes: BTreeMap<NodeId, BasicNode> = members.iter().map(|(&id, a)| (id, BasicNode::new(a))).collect();
        self.raft.initialize(nodes).await.map_err(raft_error)
    }

    /// The group.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// The node it runs on.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Its Raft instance.
    pub fn raft(&self) -> &Raft<Cfg> {
        &self.raft
    }

    /// The group's membership (voters, learners, their addresses) as this replica knows it.
    pub fn membership(&self) -> openraft::Membership<NodeId, BasicNode> {
        self.raft.metrics().borrow().membership_config.membership().clone()
    }

    /// Its database, for reads (writes go through [`Replica::propose`]).
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    /// The leader this replica knows of.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow().current_leader
    }

    /// The leader this replica knows of, with its address.
    pub fn leader_hint(&self) -> Option<(NodeId, String)> {
        let m = self.raft.metrics().borrow().clone();
        let id = m.current_leader?;
        let addr = m.membership_config.membership().get_node(&id)?.addr.clone();
        Some((id, addr))
    }

    /// Proposes `cmd` here: committed and applied when this replica leads the group; else the
    /// leader it knows of.
    pub async fn propose(&self, cmd: Command) -> Result<Proposed> {
        crate::net::propose_to(&self.raft, cmd).await
    }

    /// Proposes inserting `rows` into `table` as one batch, built against this replica's
    /// database, when this replica leads the group (else the leader it knows of): a row that
    /// does not fit the table's schema is an error before anything is proposed.
    pub async fn insert(&self, table: &str, rows: &[Vec<Value>]) -> Result<Proposed> {
        if self.leader() != Some(self.node) {
            return Ok(Proposed::NotLeader(self.leader_hint()));
        }
        let t = self.db.table(table)?;
        let mut batch = WriteBatch::new();
        for row in rows {
            batch.insert(&t, row)?;
        }
        self.propose(Command::Write { payload: batch.payload(), commit_ms: now_ms() }).await
    }

    /// Waits up to `timeout` until this replica has applied every entry up to `index`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<()> {
        self.raft
            .wait(Some(timeout))
            .applied_index_at_least(Some(index), "applied")
            .await
            .map(|_| ())
            .map_err(raft_error)
    }

    /// Stops the replica: it leaves `hosted` and its Raft task ends (its directory is kept).
    pub async fn shutdown(&self) -> Result<()> {
        self.hosted.remove(self.group);
        self.raft.shutdown().await.map_err(raft_error)
    }
}

/// The time now in Unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// What a proposal applied to; an error for a refusal or a proposal that reached no leader.
pub fn applied(p: Proposed) -> Result<u64> {
    match p {
        Proposed::Done(Reply::Applied { seq }) => Ok(seq),
        Proposed::Done(Reply::Refused(m) | Reply::Conflict(m)) => Err(Error::Strata(strata::Error::InvalidArgument(m))),
        Proposed::NotLeader(l) => Err(Error::Raft(format!("not the leader (the leader known: {l:?})"))),
    }
}
