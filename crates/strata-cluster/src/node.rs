//! A node: the metadata group's replica, the shard replicas the shard map gives it, and the
//! answers to clients and other nodes on its one port.
//!
//! Directory layout: `DIR/meta` (the metadata group, group 0: its membership lists the nodes, its
//! database the shard map) and `DIR/shards/ID` (one replica per shard held).
//!
//! Every 100 ms a node compares the shard map with the replicas it runs: it starts the ones
//! assigned to it (the first node listed for a shard makes the group's membership), and where it
//! leads a shard whose database lacks the shard's table it proposes creating it.
//!
//! Any node takes a client's writes and reads: it finds the shard by the first key column in
//! the shard map and sends the request to the shard's leader, following "not the leader"
//! answers and trying the replicas in turn until a deadline.
//!
//! A transaction lives at the leader of its shard, as a strata transaction on the leader's
//! database (its snapshot, its writes held, its own writes read back), with the last log entry
//! its snapshot holds. Its commit proposes the writes with that entry ([`Command::Txn`]); every
//! replica applies it only if no row it writes was written by a later entry. Its steps reach
//! that leader through any node. One left idle for [`TXN_IDLE`] is rolled back.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{CheckIsLeaderError, RaftError};
use parking_lot::Mutex;
use strata::{Projection, ReadOptions, Schema, TxnOptions, Value};
use tokio::sync::RwLock;
use tokio::task::JoinHandle;

use crate::group::{Replica, ReplicaOptions};
use crate::machine::{applied_index, cluster_map};
use crate::net::{self, Handler, Hosted, Proposed, Server};
use crate::types::{
    from_wire, to_wire, ClusterStatus, Command, GroupId, MetaCommand, NodeId, NodeRequest, NodeResponse, Reply,
    ShardInfo, ShardStatus, TableMap, TxnId, TxnOp, WireValue,
};
use crate::{Error, Result};

/// The metadata group's id.
pub const META_GROUP: GroupId = 0;

/// How long a request routed to a shard keeps trying (leaders move, shards start).
const ROUTE_DEADLINE: Duration = Duration::from_secs(10);

/// How long one call to another node may take.
const CALL_TTL: Duration = Duration::from_secs(5);

/// How long a change of membership (adding a node, moving a shard) may take beyond the new
/// replica's catching up ([`ReplicaOptions::catch_up`]).
const ADMIN_MARGIN: Duration = Duration::from_secs(30);

/// How long `status` waits for a group's leader to report its replicas' lag.
const LAG_TTL: Duration = Duration::from_secs(1);

/// How long an open transaction may wait between steps before it is rolled back.
pub const TXN_IDLE: Duration = Duration::from_secs(60);

/// How a node runs.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// Its id, unique in the cluster.
    pub id: NodeId,
    /// Its directory.
    pub dir: PathBuf,
    /// The address it listens on (`127.0.0.1:0` picks a port).
    pub listen: String,
    /// The cluster's first nodes (id → address, this one included): the one with the smallest
    /// id makes the metadata group's membership. Empty for a node started again.
    pub peers: BTreeMap<NodeId, String>,
    /// How its replicas run.
    pub replica: ReplicaOptions,
    /// The address its worker (the gRPC service running query tasks) listens on; `None`: the
    /// host of `listen`, a port picked.
    pub worker_listen: Option<String>,
    /// How long each shard partition of a query waits before it reads (zero; a testing knob, to
    /// kill a worker during a query).
    pub scan_delay: Duration,
}

impl NodeOptions {
    /// Node `id` in `dir` listening on `listen`, with no peers (a node started again, or one
    /// to be added), default replica options, its worker on a port picked and no scan delay.
    pub fn new(id: NodeId, dir: impl Into<PathBuf>, listen: impl Into<String>) -> NodeOptions {
        NodeOptions {
            id,
            dir: dir.into(),
            listen: listen.into(),
            peers: BTreeMap::new(),
            replica: ReplicaOptions::default(),
            worker_listen: None,
            scan_delay: Duration::ZERO,
        }
    }
}

/// A running node.
pub struct Node {
    inner: Arc<Inner>,
    server: Server,
    watcher: JoinHandle<()>,
    worker: JoinHandle<()>,
    stop_worker: Option<tokio::sync::oneshot::Sender<()>>,
}

struct Inner {
    /// Itself, for what outlives a request (a query's plan holds the node).
    me: std::sync::Weak<Inner>,
    id: NodeId,
    dir: PathBuf,
    opts: ReplicaOptions,
    hosted: Hosted,
    meta: Replica,
    shards: RwLock<HashMap<GroupId, Arc<Replica>>>,
    /// When the node started (Unix ms): the epoch of its transactions' ids.
    epoch: u64,
    next_txn: AtomicU64,
    txns: Mutex<HashMap<u64, OpenTxn>>,
    /// Its worker's URL.
    worker_url: String,
    scan_delay: Duration,
}

/// A transaction open at this node, the leader of its shard when it began.
struct OpenTxn {
    tx: strata::Transaction,
    shard: ShardInfo,
    table: strata::Table,
    /// The last log entry its snapshot holds.
    start: u64,
    touched: Instant,
}

impl Node {
    /// Starts a node: its server, its metadata replica, and the watcher that starts its shards.
    pub async fn start(opts: NodeOptions) -> Result<Node> {
        check_id(&opts.dir, opts.id)?;
        let hosted = Hosted::default();
        let server = Server::start(&opts.listen, hosted.clone()).await?;
        let worker_listen = match &opts.worker_listen {
            Some(a) => a.clone(),
            None => format!("{}:0", server.addr().ip()),
        };
        let worker_listener = tokio::net::TcpListener::bind(&worker_listen)
            .await
            .map_err(|e| Error::Network(format!("the worker cannot listen on {worker_listen}: {e}")))?;
        let worker_addr =
            worker_listener.local_addr().map_err(|e| Error::Network(format!("the worker's address: {e}")))?;
        let meta = Replica::start(&opts.dir.join("meta"), META_GROUP, opts.id, &opts.replica, &hosted).await?;
        if opts.peers.keys().next() == Some(&opts.id) {
            meta.initialize(&opts.peers).await?;
        }
        let inner = Arc::new_cyclic(|me| Inner {
            me: me.clone(),
            id: opts.id,
            dir: opts.dir,
            opts: opts.replica,
            hosted: hosted.clone(),
            meta,
            shards: RwLock::new(HashMap::new()),
            epoch: crate::group::now_ms(),
            next_txn: AtomicU64::new(1),
            txns: Mutex::new(HashMap::new()),
            worker_url: format!("http://{worker_addr}"),
            scan_delay: opts.scan_delay,
        });
        hosted.set_handler(inner.clone());
        let (stop_worker, stopped) = tokio::sync::oneshot::channel::<()>();
        let worker = {
            // The worker holds the node weakly, so the node's databases close when it stops.
            let me = Arc::downgrade(&inner);
            let service = datafusion_distributed::Worker::from_session_builder(
                move |ctx: datafusion_distributed::WorkerQueryContext| {
                    let node = me.upgrade();
                    async move {
                        use datafusion_distributed::DistributedExt;
                        let Some(node) = node else {
                            return Err(datafusion::error::DataFusionError::Execution("the node is stopping".into()));
                        };
                        let node: Arc<dyn crate::sql::Cluster> = node;
                        let codec = crate::sql::ShardScanCodec::new(&node);
                        Ok(ctx.builder.with_distributed_user_codec(codec).build())
                    }
                },
            );
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(worker_listener);
            tokio::spawn(async move {
                let serve = tonic::transport::Server::builder()
                    .add_service(service.into_worker_server())
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = stopped.await;
                    });
                // The worker stops with the node; an error of its server ends it early (queries
                // then route around this node).
                let _ = serve.await;
            })
        };
        let watching = inner.clone();
        let watcher = tokio::spawn(async move {
            loop {
                // A failure here (a shard that cannot start yet) is tried again next round.
                let _ = watching.reconcile().await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Ok(Node { inner, server, watcher, worker, stop_worker: Some(stop_worker) })
    }

    /// The address it listens on.
    pub fn addr(&self) -> String {
        self.server.addr().to_string()
    }

    /// Makes the metadata group's first membership, `peers` (id → address, this node
    /// included), when no node has: what [`NodeOptions::peers`] does at start, for nodes whose
    /// addresses were known only once they listened.
    pub async fn initialize(&self, peers: &BTreeMap<NodeId, String>) -> Result<()> {
        self.inner.meta.initialize(peers).await
    }

    /// Its id.
    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    /// Its worker's URL (the gRPC service running query tasks).
    pub fn worker_url(&self) -> &str {
        &self.inner.worker_url
    }

    /// Answers `req` as if it had come over the network.
    pub async fn request(&self, req: NodeRequest) -> NodeResponse {
        self.inner.answer(req).await
    }

    /// Stops the node: its server, its watcher and every replica (its directory is kept).
    /// Returns once its databases are closed, so the directory can be opened again.
    pub async fn shutdown(mut self) -> Result<()> {
        self.inner.hosted.clear_handler();
        self.server.shutdown().await;
        if let Some(stop) = self.stop_worker.take() {
            let _ = stop.send(());
        }
        // The worker's server ends once its connections close; other nodes may hold theirs
        // open, so it is given a moment and then stopped.
        if tokio::time::timeout(Duration::from_millis(500), &mut self.worker).await.is_err() {
            self.worker.abort();
        }
        self.watcher.abort();
        let _ = self.watcher.await;
        let shards: Vec<Arc<Replica>> = self.inner.shards.write().await.drain().map(|(_, r)| r).collect();
        for r in &shards {
            r.shutdown().await?;
        }
        self.inner.meta.shutdown().await?;
        drop(shards);
        // Requests still in flight hold the node; its databases close when the last one ends.
        let start = Instant::now();
        while Arc::strong_count(&self.inner) > 1 && start.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}

/// Records the node's id in `DIR/node-id` at its first start and refuses another id later
/// (its replicas' Raft state belongs to that id).
fn check_id(dir: &Path, id: NodeId) -> Result<()> {
    let path = dir.join("node-id");
    let io = |e: std::io::Error| Error::Io(format!("{}: {e}", path.display()));
    match std::fs::read_to_string(&path) {
        Ok(s) if s.trim() == id.to_string() => Ok(()),
        Ok(s) => Err(Error::Io(format!("{} belongs to node {}, not node {id}", dir.display(), s.trim()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io)?;
            std::fs::write(&path, format!("{id}\n")).map_err(io)
        }
        Err(e) => Err(io(e)),
    }
}

/// Removes `id` from `r`'s group if it is there as a learner (a change that added it and then
/// gave up).
async fn drop_learner(r: &Replica, id: NodeId) -> Result<()> {
    if r.membership().learner_ids().any(|n| n == id) {
        let remove = openraft::ChangeMembers::RemoveNodes(BTreeSet::from([id]));
        r.raft().change_membership(remove, false).await.map_err(|e| Error::Raft(e.to_string()))?;
    }
    Ok(())
}

/// The error of a change that failed, and whether undoing it failed too.
fn undone(e: Error, undo: Result<()>) -> Error {
    let e = match e {
        Error::Raft(m) => m,
        other => other.to_string(),
    };
    match undo {
        Ok(()) => Error::Raft(format!("{e} (undone)")),
        Err(u) => Error::Raft(format!("{e}; undoing it failed too: {u}")),
    }
}

fn failed(e: impl std::fmt::Display) -> NodeResponse {
    NodeResponse::Failed(e.to_string())
}

/// The encoded first key column of `key` (a key or a whole row's key columns).
fn first_key(schema: &Schema, key_value: &Value) -> Vec<u8> {
    let ty = schema.columns()[schema.primary_key()[0]].ty;
    let mut out = Vec::new();
    strata::types::key::encode_value(&mut out, ty, key_value);
    out
}

impl Inner {
    /// The nodes, from the metadata group's membership.
    fn nodes(&self) -> BTreeMap<NodeId, String> {
        self.meta.membership().nodes().map(|(id, n)| (*id, n.addr.clone())).collect()
    }

    /// How long a change of membership may take here, its new replica's catching up included.
    fn admin_ttl(&self) -> Duration {
        self.opts.catch_up + ADMIN_MARGIN
    }

    fn map(&self) -> Result<(Vec<TableMap>, Vec<ShardInfo>)> {
        Ok(cluster_map(self.meta.db())?)
    }

    /// Starts the shards assigned here and creates their tables where this node leads.
    async fn reconcile(&self) -> Result<()> {
        // A failure is tried again next round; the shards start meanwhile.
        let _ = self.register_worker().await;
        let (tables, shards) = self.map()?;
        // Replicas of shards the map no longer assigns here (moved away): stopped, their
        // directories removed.
        let held: Vec<GroupId> = self.shards.read().await.keys().copied().collect();
        for id in held {
            let assigned = shards.iter().find(|s| s.id == id).is_none_or(|s| s.replicas.contains(&self.id));
            if !assigned {
                if let Some(r) = self.shards.write().await.remove(&id) {
                    r.shutdown().await?;
                    drop(r);
                    let dir = self.dir.join("shards").join(id.to_string());
                    std::fs::remove_dir_all(&dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
                }
            }
        }
        let nodes = self.nodes();
        for info in shards.iter().filter(|s| s.replicas.contains(&self.id)) {
            let running = self.shards.read().await.get(&info.id).cloned();
            let replica = match running {
                Some(r) => r,
                None => {
                    let dir = self.dir.join("shards").join(info.id.to_string());
                    let r = Arc::new(Replica::start(&dir, info.id, self.id, &self.opts, &self.hosted).await?);
                    self.shards.write().await.insert(info.id, r.clone());
                    r
                }
            };
            // The first replica listed makes the group (each round until it is made: a failed
            // attempt is tried again).
            if info.replicas.first() == Some(&self.id) && replica.leader().is_none() {
                let members: BTreeMap<NodeId, String> =
                    info.replicas.iter().filter_map(|n| Some((*n, nodes.get(n)?.clone()))).collect();
                replica.initialize(&members).await?;
            }
            if replica.leader() == Some(self.id) && replica.db().table(&info.table).is_err() {
                if let Some(t) = tables.iter().find(|t| t.name == info.table) {
                    let create = Command::CreateTable {
                        name: t.name.clone(),
                        schema: t.schema.clone(),
                        layout: None,
                        lineage: false,
                    };
                    replica.propose(create).await?;
                }
            }
        }
        Ok(())
    }

    /// Proposes a change to the shard map at the metadata group's leader.
    async fn propose_meta(&self, cmd: MetaCommand) -> Result<()> {
        let cmd = Command::Meta(cmd);
        let answer = match self.meta.propose(cmd.clone()).await? {
            Proposed::NotLeader(Some((_, addr))) => net::propose(&addr, META_GROUP, cmd, CALL_TTL).await?,
            other => other,
        };
        match answer {
            Proposed::Done(Reply::Applied { .. }) => Ok(()),
            Proposed::Done(Reply::Refused(m) | Reply::Conflict(m)) => Err(Error::Raft(m)),
            Proposed::NotLeader(_) => Err(Error::Raft("the metadata group has no leader; try again".into())),
        }
    }

    /// Sends `req` to the metadata group's leader, waiting up to `ttl` for its answer.
    async fn to_meta_leader(&self, req: NodeRequest, ttl: Duration) -> Result<NodeResponse> {
        match self.meta.leader_hint() {
            Some((_, leader)) => net::call(&leader, req, ttl).await,
            None => Ok(failed("the metadata group has no leader; try again")),
        }
    }

    /// Adds node `id` at `addr` to the metadata group (at its leader): a learner until it holds
    /// the group's log, then a voter.
    async fn add_node(&self, id: NodeId, addr: String) -> Result<NodeResponse> {
        if self.meta.leader() != Some(self.id) {
            return self.to_meta_leader(NodeRequest::AddNode { id, addr }, self.admin_ttl()).await;
        }
        if self.nodes().contains_key(&id) {
            return Ok(failed(format!("node {id} is already in the cluster")));
        }
        if let Err(e) = self.add_learner(&self.meta, id, &addr).await {
            // The node is not left a learner, so adding it can be tried again.
            return Err(undone(e, drop_learner(&self.meta, id).await));
        }
        let mut voters: BTreeSet<NodeId> = self.meta.membership().voter_ids().collect();
        voters.insert(id);
        self.meta.raft().change_membership(voters, false).await.map_err(|e| Error::Raft(e.to_string()))?;
        Ok(NodeResponse::Done)
    }

    /// Removes node `id`, which must hold no shard replica, from the metadata group (at its
    /// leader): with its voters less `id`, and `id` no longer listed even as a learner.
    async fn remove_node(&self, id: NodeId) -> Result<NodeResponse> {
        if self.meta.leader() != Some(self.id) {
            return self.to_meta_leader(NodeRequest::RemoveNode { id }, self.admin_ttl()).await;
        }
        if !self.nodes().contains_key(&id) {
            return Ok(failed(format!("node {id} is not in the cluster")));
        }
        let (_, shards) = self.map()?;
        let held: Vec<GroupId> = shards.iter().filter(|s| s.replicas.contains(&id)).map(|s| s.id).collect();
        if !held.is_empty() {
            return Ok(failed(format!(
                "node {id} holds replicas of shards {held:?}: move them to other nodes first (move-shard)"
            )));
        }
        let voters: BTreeSet<NodeId> = self.meta.membership().voter_ids().filter(|n| *n != id).collect();
        if voters.is_empty() {
            return Ok(failed(format!("node {id} is the cluster's last voter")));
        }
        self.meta.raft().change_membership(voters, false).await.map_err(|e| Error::Raft(e.to_string()))?;
        drop_learner(&self.meta, id).await?;
        Ok(NodeResponse::Done)
    }

    async fn route_move(&self, shard: GroupId, from: NodeId, to: NodeId) -> Result<NodeResponse> {
        let (_, shards) = self.map()?;
        let Some(info) = shards.into_iter().find(|s| s.id == shard) else {
            return Ok(failed(format!("there is no shard {shard}")));
        };
        let ttl = self.admin_ttl();
        self.at_leader_within(&info, Instant::now() + ttl, ttl, |group| NodeRequest::ShardMove { group, from, to })
            .await
    }

    /// Moves this leader's shard from node `from` to node `to`: the shard map assigns it to
    /// `to` too (whose node starts a replica), `to` joins as a learner and catches up, becomes a
    /// voter in `from`'s place, and the map drops `from` (whose node then drops its replica).
    /// If `to` does not catch up, or the change of voters fails before it takes effect, the move
    /// is undone (the learner leaves, the map lists the replicas it listed), so it can be tried
    /// again.
    async fn shard_move(&self, group: GroupId, from: NodeId, to: NodeId) -> NodeResponse {
        let Some(r) = self.replica(group).await else {
            return NodeResponse::NotReady(format!("shard {group} is not started on node {}", self.id));
        };
        if r.leader() != Some(self.id) {
            return NodeResponse::NotLeader(r.leader_hint());
        }
        match self.move_here(&r, group, from, to).await {
            Ok(()) => NodeResponse::Done,
            Err(e) => failed(format!("moving shard {group} from node {from} to node {to}: {e}")),
        }
    }

    async fn move_here(&self, r: &Replica, group: GroupId, from: NodeId, to: NodeId) -> Result<()> {
        let (_, shards) = self.map()?;
        let info =
            shards.into_iter().find(|s| s.id == group).ok_or_else(|| Error::Raft("not in the shard map".into()))?;
        if !info.replicas.contains(&from) {
            return Err(Error::Raft(format!("node {from} holds no replica of it (replicas {:?})", info.replicas)));
        }
        if info.replicas.contains(&to) {
            return Err(Error::Raft(format!("node {to} holds a replica already (replicas {:?})", info.replicas)));
        }
        let Some(addr) = self.nodes().get(&to).cloned() else {
            return Err(Error::Raft(format!("node {to} is not in the cluster (add it first)")));
        };
        // Appended, never first: the first replica listed makes a group that has none.
        let mut with = info.replicas.clone();
        with.push(to);
        self.propose_meta(MetaCommand::SetReplicas { shard: group, replicas: with }).await?;
        if let Err(e) = self.add_learner(r, to, &addr).await {
            return Err(self.undo_move(r, &info, to, e).await);
        }
        let after: Vec<NodeId> = info.replicas.iter().copied().filter(|n| *n != from).chain([to]).collect();
        let voters: BTreeSet<NodeId> = after.iter().copied().collect();
        if let Err(e) = r.raft().change_membership(voters.clone(), false).await {
            let now = r.membership().get_joint_config().clone();
            if now == [voters] {
                // It failed after taking effect (a lost answer): the map follows.
            } else if now.iter().all(|c| !c.contains(&to)) {
                return Err(self.undo_move(r, &info, to, Error::Raft(e.to_string())).await);
            } else {
                return Err(Error::Raft(format!("{e}; the shard's voters are now {now:?}")));
            }
        }
        self.propose_meta(MetaCommand::SetReplicas { shard: group, replicas: after }).await
    }

    /// Undoes a move of shard `info` to node `to` that failed with `e` before `to` became a
    /// voter: `to` leaves the group and the map lists the replicas it listed before.
    async fn undo_move(&self, r: &Replica, info: &ShardInfo, to: NodeId, e: Error) -> Error {
        let left = drop_learner(r, to).await;
        let before = MetaCommand::SetReplicas { shard: info.id, replicas: info.replicas.clone() };
        let restored = self.propose_meta(before).await;
        undone(e, left.and(restored))
    }

    /// Adds node `id` at `addr` to `r`'s group as a learner and waits, at most
    /// [`ReplicaOptions::catch_up`], until it holds every entry of the group's log up to the one
    /// that added it. (openraft's own wait takes a learner within its replication lag threshold,
    /// 5,000 entries, as caught up: on a short log, a learner that holds nothing, its node down.)
    async fn add_learner(&self, r: &Replica, id: NodeId, addr: &str) -> Result<()> {
        let wait = self.opts.catch_up;
        let late = || Error::Raft(format!("node {id} at {addr} did not catch up within {wait:?}"));
        let added = tokio::time::timeout(wait, r.raft().add_learner(id, openraft::BasicNode::new(addr), false))
            .await
            .map_err(|_| late())?
            .map_err(|e| Error::Raft(e.to_string()))?;
        let upto = added.log_id.index;
        // Also ends when this node stops leading (it reports no replication then).
        let holds = |m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>| match &m.replication {
            None => true,
            Some(rep) => rep.get(&id).and_then(|matched| matched.as_ref()).is_some_and(|l| l.index >= upto),
        };
        match r.raft().wait(Some(wait)).metrics(holds, format!("node {id} catching up")).await {
            Ok(m) if m.replication.is_some() => Ok(()),
            Ok(_) => Err(Error::Raft(format!("node {} stopped leading the group", self.id))),
            Err(openraft::metrics::WaitError::Timeout(..)) => Err(late()),
            Err(e) => Err(Error::Raft(e.to_string())),
        }
    }

    async fn shard_digest(&self, group: GroupId) -> NodeResponse {
        let Some(r) = self.replica(group).await else {
            return NodeResponse::NotReady(format!("shard {group} is not started on node {}", self.id));
        };
        let applied = r.raft().metrics().borrow().last_applied.map_or(0, |l| l.index);
        match crate::machine::digest(r.db()) {
            // Applied may have moved on while the rows were read: the caller compares replicas
            // once writes have stopped and every replica applied as much.
            Ok((rows, hash)) => NodeResponse::Digest { applied, rows, hash },
            Err(e) => failed(e),
        }
    }

    /// Records this node's worker URL in the shard map when the map lacks it or has another.
    async fn register_worker(&self) -> Result<()> {
        let known = crate::machine::cluster_workers(self.meta.db())?;
        if known.get(&self.id) == Some(&self.worker_url) || self.meta.leader().is_none() {
            return Ok(());
        }
        self.propose_meta(MetaCommand::SetWorker { node: self.id, url: self.worker_url.clone() }).await
    }

    /// Makes sure this node's replica `r` holds every entry committed before the call: at the
    /// leader a quorum confirms the leadership; at a follower it applies up to the leader's
    /// confirmed commit index. Tries until [`ROUTE_DEADLINE`] (an election may be on).
    async fn caught_up(&self, r: &Replica) -> Result<()> {
        let deadline = Instant::now() + ROUTE_DEADLINE;
        let mut last = String::new();
        while Instant::now() < deadline {
            if r.leader() == Some(self.id) {
                match r.raft().ensure_linearizable().await {
                    Ok(_) => return Ok(()),
                    Err(e) => last = e.to_string(),
                }
            } else if let Some((_, addr)) = r.leader_hint() {
                match net::call(&addr, NodeRequest::ReadIndex { group: r.group() }, CALL_TTL).await {
                    Ok(NodeResponse::Index(i)) => return r.wait_applied(i, ROUTE_DEADLINE).await,
                    Ok(other) => last = format!("{addr} answered {other:?}"),
                    Err(e) => last = e.to_string(),
                }
            } else {
                last = "no leader known".into();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(Error::Raft(format!("shard {}: cannot confirm what is committed: {last}", r.group())))
    }

    async fn read_index(&self, group: GroupId) -> NodeResponse {
        let Some(r) = self.replica(group).await else {
            return NodeResponse::NotReady(format!("shard {group} is not started on node {}", self.id));
        };
        match r.raft().ensure_linearizable().await {
            Ok(id) => NodeResponse::Index(id.map_or(0, |l| l.index)),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                NodeResponse::NotLeader(f.leader_id.zip(f.leader_node.map(|n| n.addr)))
            }
            Err(e) => NodeResponse::NotReady(format!("shard {group}: {e}")),
        }
    }

    async fn sql(self: Arc<Self>, query: String) -> NodeResponse {
        let coordinator = crate::sql::Coordinator::new(self);
        match coordinator.query(&query).await {
            Ok(answer) => match crate::sql::ipc_bytes(&answer.batches) {
                Ok(ipc) => NodeResponse::Rows { ipc, read_ms: answer.read_ms, runs: answer.runs },
                Err(e) => failed(e),
            },
            Err(e) => failed(e),
        }
    }

    async fn answer(&self, req: NodeRequest) -> NodeResponse {
        match req {
            NodeRequest::CreateTable { name, schema, splits, replicas } => {
                self.create_table(name, schema, splits, replicas).await.unwrap_or_else(failed)
            }
            NodeRequest::Insert { table, rows } => self.route_insert(table, rows).await.unwrap_or_else(failed),
            NodeRequest::Get { table, key } => self.route_get(table, key).await.unwrap_or_else(failed),
            NodeRequest::ShardInsert { group, table, rows } => self.shard_insert(group, &table, rows).await,
            NodeRequest::ShardGet { group, table, key } => self.shard_get(group, &table, key).await,
            NodeRequest::Begin { table, key } => self.route_begin(table, key).await.unwrap_or_else(failed),
            NodeRequest::ShardBegin { group, table } => self.shard_begin(group, &table).await,
            NodeRequest::Txn { txn, op } => self.route_txn(txn, op).await,
            NodeRequest::ReadIndex { group } => self.read_index(group).await,
            NodeRequest::AddNode { id, addr } => self.add_node(id, addr).await.unwrap_or_else(failed),
            NodeRequest::RemoveNode { id } => self.remove_node(id).await.unwrap_or_else(failed),
            NodeRequest::MoveShard { shard, from, to } => self.route_move(shard, from, to).await.unwrap_or_else(failed),
            NodeRequest::ShardMove { group, from, to } => self.shard_move(group, from, to).await,
            NodeRequest::ShardDigest { group } => self.shard_digest(group).await,
            NodeRequest::ShardLag { group } => self.shard_lag(group).await,
            NodeRequest::Sql { query } => match self.me.upgrade() {
                Some(me) => me.sql(query).await,
                None => failed("the node is stopping"),
            },
            NodeRequest::Status => self.status().await,
            NodeRequest::Schema { table } => match self.table(&table, Instant::now()).await {
                Ok((schema, _)) => NodeResponse::Schema(schema.to_bytes()),
                Err(e) => failed(e),
            },
            NodeRequest::Initialize { peers } => {
                if !peers.iter().any(|(id, _)| *id == self.id) {
                    return failed(format!("node {} is not among the peers given", self.id));
                }
                match self.meta.initialize(&peers.into_iter().collect()).await {
                    Ok(()) => NodeResponse::Done,
                    Err(e) => failed(e),
                }
            }
        }
    }

    async fn create_table(
        &self,
        name: String,
        schema: Vec<u8>,
        splits: Vec<WireValue>,
        replicas: usize,
    ) -> Result<NodeResponse> {
        let parsed = Schema::from_bytes(&schema)?;
        let nodes: Vec<NodeId> = self.nodes().into_keys().collect();
        if replicas == 0 || replicas > nodes.len() {
            return Ok(failed(format!("{replicas} replicas asked for, but the cluster has {} nodes", nodes.len())));
        }
        let key_ty = parsed.columns()[parsed.primary_key()[0]].ty;
        let mut encoded = Vec::new();
        for v in from_wire(splits) {
            if v.is_null() || !v.has_type(key_ty) {
                return Ok(failed(format!(
                    "split point {v:?} is not a value of the first key column's type {key_ty:?}"
                )));
            }
            encoded.push(first_key(&parsed, &v));
        }
        // Shard i on nodes i, i+1, … (round the ring), so leaders and load spread.
        let assign =
            (0..=encoded.len()).map(|i| (0..replicas).map(|j| nodes[(i + j) % nodes.len()]).collect()).collect();
        let cmd = Command::Meta(MetaCommand::CreateTable { name, schema, splits: encoded, replicas: assign });
        match self.meta.propose(cmd.clone()).await? {
            Proposed::Done(Reply::Applied { .. }) => Ok(NodeResponse::Done),
            Proposed::Done(Reply::Refused(m) | Reply::Conflict(m)) => Ok(NodeResponse::Failed(m)),
            Proposed::NotLeader(Some((_, addr))) => match net::propose(&addr, META_GROUP, cmd, CALL_TTL).await? {
                Proposed::Done(Reply::Applied { .. }) => Ok(NodeResponse::Done),
                Proposed::Done(Reply::Refused(m) | Reply::Conflict(m)) => Ok(NodeResponse::Failed(m)),
                Proposed::NotLeader(_) => Ok(failed("the metadata group's leader moved; try again")),
            },
            Proposed::NotLeader(None) => Ok(failed("the metadata group has no leader; try again")),
        }
    }

    /// The schema and shards of `table`, waiting until `deadline` for the shard map to show it
    /// (a table just created may not have reached this node's replica of the map yet).
    async fn table(&self, table: &str, deadline: Instant) -> Result<(Schema, Vec<ShardInfo>)> {
        loop {
            let (tables, shards) = self.map()?;
            if let Some(t) = tables.iter().find(|t| t.name == table) {
                let shards = shards.into_iter().filter(|s| s.table == table).collect();
                return Ok((Schema::from_bytes(&t.schema)?, shards));
            }
            if Instant::now() >= deadline {
                return Err(Error::Strata(strata::Error::UnknownTable(table.to_string())));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The shard among `shards` holding the key whose first column is `first`.
    fn shard_of<'a>(schema: &Schema, shards: &'a [ShardInfo], first: &Value) -> Result<&'a ShardInfo> {
        let enc = first_key(schema, first);
        shards.iter().find(|s| s.holds(&enc)).ok_or_else(|| Error::Raft("no shard holds the key".into()))
    }

    async fn route_insert(&self, table: String, rows: Vec<Vec<WireValue>>) -> Result<NodeResponse> {
        let deadline = Instant::now() + ROUTE_DEADLINE;
        let (schema, shards) = self.table(&table, deadline).await?;
        let k = schema.primary_key()[0];
        let mut shard: Option<&ShardInfo> = None;
        for r in &rows {
            // A row without its key column goes to any shard, whose leader refuses it.
            let first = r.get(k).cloned().map_or(Value::Null, Value::from);
            let s = Self::shard_of(&schema, &shards, &first)?;
            match shard {
                Some(prev) if prev.id != s.id => {
                    return Ok(failed(format!(
                        "the rows fall in shards {} and {} of {table}: a write spanning shards is refused until \
                         cross-shard commit exists (send each shard's rows apart)",
                        prev.id, s.id
                    )));
                }
                _ => shard = Some(s),
            }
        }
        let Some(shard) = shard else { return Ok(NodeResponse::Done) };
        self.at_leader(shard, deadline, |group| NodeRequest::ShardInsert {
            group,
            table: table.clone(),
            rows: rows.clone(),
        })
        .await
    }

    async fn route_get(&self, table: String, key: Vec<WireValue>) -> Result<NodeResponse> {
        let deadline = Instant::now() + ROUTE_DEADLINE;
        let (schema, shards) = self.table(&table, deadline).await?;
        let first: Value = key.first().cloned().map_or(Value::Null, Value::from);
        let shard = Self::shard_of(&schema, &shards, &first)?;
        self.at_leader(shard, deadline, |group| NodeRequest::ShardGet { group, table: table.clone(), key: key.clone() })
            .await
    }

    /// Sends the request `make` builds to `shard`'s leader: follows "not the leader" answers,
    /// tries each replica in turn when none is known, until `deadline`.
    async fn at_leader(
        &self,
        shard: &ShardInfo,
        deadline: Instant,
        make: impl Fn(GroupId) -> NodeRequest,
    ) -> Result<NodeResponse> {
        self.at_leader_within(shard, deadline, CALL_TTL, make).await
    }

    /// [`Inner::at_leader`], each call waiting up to `ttl` for its answer.
    async fn at_leader_within(
        &self,
        shard: &ShardInfo,
        deadline: Instant,
        ttl: Duration,
        make: impl Fn(GroupId) -> NodeRequest,
    ) -> Result<NodeResponse> {
        if shard.replicas.is_empty() {
            return Ok(failed(format!("shard {} has no replicas in the shard map", shard.id)));
        }
        let mut next = 0usize;
        let mut hint: Option<String> = None;
        let mut last = String::from("no replica answered");
        while Instant::now() < deadline {
            let addr = match hint.take() {
                Some(a) => a,
                None => {
                    let n = shard.replicas[next % shard.replicas.len()];
                    next += 1;
                    match self.nodes().get(&n) {
                        Some(a) => a.clone(),
                        None => {
                            last = format!("node {n} is not in the membership this node knows: {:?}", self.nodes());
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    }
                }
            };
            let answer = if addr == self.addr() {
                Ok(self.handle(make(shard.id)).await)
            } else {
                net::call(&addr, make(shard.id), ttl).await
            };
            match answer {
                Ok(NodeResponse::NotLeader(Some((_, a)))) => hint = Some(a),
                Ok(NodeResponse::NotLeader(None)) => {
                    last = format!("{addr} knows no leader of shard {}", shard.id);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(NodeResponse::NotReady(m)) => {
                    last = m;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(r) => return Ok(r),
                Err(e) => {
                    last = e.to_string();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        Ok(failed(format!("shard {} answered nothing within {ROUTE_DEADLINE:?}: {last}", shard.id)))
    }

    fn addr(&self) -> String {
        self.nodes().get(&self.id).cloned().unwrap_or_default()
    }

    async fn replica(&self, group: GroupId) -> Option<Arc<Replica>> {
        self.shards.read().await.get(&group).cloned()
    }

    async fn shard_insert(&self, group: GroupId, table: &str, rows: Vec<Vec<WireValue>>) -> NodeResponse {
        let Some(r) = self.replica(group).await else {
            return NodeResponse::NotReady(format!("shard {group} is not started on node {}", self.id));
        };
        let rows: Vec<Vec<Value>> = rows.into_iter().map(from_wire).collect();
        match r.insert(table, &rows).await {
            Ok(Proposed::Done(Reply::Applied { seq })) => NodeResponse::Written { seq },
            Ok(Proposed::Done(Reply::Refused(m) | Reply::Conflict(m))) => NodeResponse::Failed(m),
            Ok(Proposed::NotLeader(l)) => NodeResponse::NotLeader(l),
            Err(Error::Strata(strata::Error::UnknownTable(t))) => {
                NodeResponse::NotReady(format!("shard {group} has no table {t} yet"))
            }
            Err(e) => failed(e),
        }
    }

    /// This node's replica of `group` and its `table`, when it leads the group and a quorum
    /// confirmed that just now, so a read here sees every write committed before it began;
    /// else the answer to give (not the leader, not ready).
    async fn leading(
        &self,
        group: GroupId,
        table: &str,
    ) -> std::result::Result<(Arc<Replica>, strata::Table), NodeResponse> {
        let Some(r) = self.replica(group).await else {
            return Err(NodeResponse::NotReady(format!("shard {group} is not started on node {}", self.id)));
        };
        if r.leader() != Some(self.id) {
            return Err(NodeResponse::NotLeader(r.leader_hint()));
        }
        match r.raft().ensure_linearizable().await {
            Ok(_) => {}
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                return Err(NodeResponse::NotLeader(f.leader_id.zip(f.leader_node.map(|n| n.addr))));
            }
            // No quorum confirmed it (a replica is down or an election is on): try again.
            Err(e) => return Err(NodeResponse::NotReady(format!("shard {group}: {e}"))),
        }
        match r.db().table(table) {
            Ok(t) => Ok((r, t)),
            Err(strata::Error::UnknownTable(_)) => {
                Err(NodeResponse::NotReady(format!("shard {group} has no table {table} yet")))
            }
            Err(e) => Err(failed(e)),
        }
    }

    async fn shard_get(&self, group: GroupId, table: &str, key: Vec<WireValue>) -> NodeResponse {
        let t = match self.leading(group, table).await {
            Ok((_, t)) => t,
            Err(answer) => return answer,
        };
        match t.get(&from_wire(key), &Projection::All, &ReadOptions::default()) {
            Ok(row) => NodeResponse::Row(row.map(|r| to_wire(&r))),
            Err(e) => failed(e),
        }
    }

    async fn route_begin(&self, table: String, key: Vec<WireValue>) -> Result<NodeResponse> {
        let deadline = Instant::now() + ROUTE_DEADLINE;
        let (schema, shards) = self.table(&table, deadline).await?;
        let first: Value = key.first().cloned().map_or(Value::Null, Value::from);
        let shard = Self::shard_of(&schema, &shards, &first)?;
        self.at_leader(shard, deadline, |group| NodeRequest::ShardBegin { group, table: table.clone() }).await
    }

    async fn shard_begin(&self, group: GroupId, table: &str) -> NodeResponse {
        let (r, t) = match self.leading(group, table).await {
            Ok(rt) => rt,
            Err(answer) => return answer,
        };
        let shard = match self.map() {
            Ok((_, shards)) => match shards.into_iter().find(|s| s.id == group) {
                Some(s) => s,
                None => return NodeResponse::NotReady(format!("shard {group} is not in the shard map here yet")),
            },
            Err(e) => return failed(e),
        };
        let begun = r.db().begin(&TxnOptions::default()).and_then(|tx| Ok((applied_index(r.db(), &tx)?, tx)));
        let (start, tx) = match begun {
            Ok(b) => b,
            Err(e) => return failed(e),
        };
        let id = self.next_txn.fetch_add(1, Ordering::Relaxed);
        let mut txns = self.txns.lock();
        // Transactions their clients left: rolled back (dropped), so they pin nothing.
        txns.retain(|_, o| o.touched.elapsed() < TXN_IDLE);
        txns.insert(id, OpenTxn { tx, shard, table: t, start, touched: Instant::now() });
        NodeResponse::Begun(TxnId { node: self.id, epoch: self.epoch, id })
    }

    /// Sends a transaction's step to the node holding it, or runs it when that is this one.
    async fn route_txn(&self, txn: TxnId, op: TxnOp) -> NodeResponse {
        if txn.node == self.id {
            return self.txn_step(txn, op).await;
        }
        let Some(addr) = self.nodes().get(&txn.node).cloned() else {
            return failed(format!("node {} (holding transaction {}) is not in the cluster", txn.node, txn.id));
        };
        net::call(&addr, NodeRequest::Txn { txn, op }, CALL_TTL).await.unwrap_or_else(|e| {
            failed(format!("node {} (holding transaction {}) did not answer: {e}", txn.node, txn.id))
        })
    }

    /// A step of a transaction held here.
    async fn txn_step(&self, txn: TxnId, op: TxnOp) -> NodeResponse {
        let open = if txn.epoch == self.epoch { self.txns.lock().remove(&txn.id) } else { None };
        let Some(mut open) = open else {
            return failed(format!(
                "transaction {} is not open on node {} (it ended, was idle over {TXN_IDLE:?}, or the node restarted)",
                txn.id, self.id
            ));
        };
        let step = match op {
            TxnOp::Get { key } => Self::in_shard(&open, &key, "reads")
                .and_then(|()| Ok(open.tx.get(&open.table, &from_wire(key), &Projection::All)?))
                .map(|row| NodeResponse::Row(row.map(|r| to_wire(&r)))),
            TxnOp::Insert { row } => {
                let k = open.table.schema().primary_key()[0];
                let first: Vec<WireValue> = row.get(k).cloned().into_iter().collect();
                Self::in_shard(&open, &first, "writes")
                    .and_then(|()| Ok(open.tx.insert(&open.table, &from_wire(row))?))
                    .map(|()| NodeResponse::Done)
            }
            TxnOp::Delete { key } => Self::in_shard(&open, &key, "writes")
                .and_then(|()| Ok(open.tx.delete(&open.table, &from_wire(key))?))
                .map(|()| NodeResponse::Done),
            TxnOp::Commit => return self.commit(open).await,
            TxnOp::Rollback => return NodeResponse::Done,
        };
        match step {
            Ok(answer) => {
                open.touched = Instant::now();
                self.txns.lock().insert(txn.id, open);
                answer
            }
            // A write that found its row written after the snapshot: the transaction is lost.
            Err(Error::Strata(e @ strata::Error::Conflict { .. })) => NodeResponse::Conflict(e.to_string()),
            Err(e) => {
                // A refused step (a key outside the shard, a row that does not fit) leaves the
                // transaction open, as a failed statement would.
                open.touched = Instant::now();
                self.txns.lock().insert(txn.id, open);
                failed(e)
            }
        }
    }

    /// Refuses a key (or its first column) outside the transaction's shard.
    fn in_shard(open: &OpenTxn, key: &[WireValue], what: &str) -> Result<()> {
        let first: Value = key.first().cloned().map_or(Value::Null, Value::from);
        if open.shard.holds(&first_key(open.table.schema(), &first)) {
            return Ok(());
        }
        Err(Error::Strata(strata::Error::InvalidArgument(format!(
            "the transaction {what} key {first:?}, outside its shard {} of {}: a transaction spanning shards is \
             refused until cross-shard commit exists",
            open.shard.id, open.shard.table
        ))))
    }

    async fn commit(&self, open: OpenTxn) -> NodeResponse {
        let seq = open.tx.snapshot_seq();
        let batch = match open.tx.into_batch() {
            Ok(b) => b,
            Err(e @ strata::Error::Conflict { .. }) => return NodeResponse::Conflict(e.to_string()),
            Err(e) => return failed(e),
        };
        if batch.is_empty() {
            return NodeResponse::Written { seq };
        }
        let Some(r) = self.replica(open.shard.id).await else {
            return NodeResponse::Conflict(format!("shard {} stopped on node {}", open.shard.id, self.id));
        };
        let cmd = Command::Txn { start: open.start, payload: batch.payload(), commit_ms: crate::group::now_ms() };
        match r.propose(cmd).await {
            Ok(Proposed::Done(Reply::Applied { seq })) => NodeResponse::Written { seq },
            Ok(Proposed::Done(Reply::Conflict(m))) => NodeResponse::Conflict(m),
            Ok(Proposed::Done(Reply::Refused(m))) => failed(m),
            // The leader may have logged the entry before it stepped down, and a new leader may
            // still commit it: the outcome is not known.
            Ok(Proposed::NotLeader(_)) => failed(format!(
                "shard {}'s leader changed during the commit; whether the transaction committed is not known",
                open.shard.id
            )),
            Err(e) => failed(format!("the commit failed, whether the transaction committed is not known: {e}")),
        }
    }

    async fn status(&self) -> NodeResponse {
        let (_, shards) = match self.map() {
            Ok(m) => m,
            Err(e) => return failed(e),
        };
        let mut out = Vec::new();
        for info in shards {
            let r = self.replica(info.id).await;
            let applied = r.as_ref().and_then(|r| r.raft().metrics().borrow().last_applied.map(|l| l.index));
            let asked = match &r {
                Some(r) if r.leader() == Some(self.id) => Ok(self.lag_of(r)),
                _ => {
                    let deadline = Instant::now() + LAG_TTL;
                    self.at_leader_within(&info, deadline, LAG_TTL, |group| NodeRequest::ShardLag { group }).await
                }
            };
            let (leader, lag) = match asked {
                Ok(NodeResponse::Lag { leader, lag }) => (Some(leader), lag),
                _ => (r.as_ref().and_then(|r| r.leader()), Vec::new()),
            };
            out.push(ShardStatus { info, leader, applied, lag });
        }
        let meta_lag = if self.meta.leader() == Some(self.id) {
            self.lag_of(&self.meta)
        } else {
            self.to_meta_leader(NodeRequest::ShardLag { group: META_GROUP }, LAG_TTL).await.unwrap_or_else(failed)
        };
        NodeResponse::Status(ClusterStatus {
            node: self.id,
            nodes: self.nodes().into_iter().collect(),
            meta_leader: self.meta.leader(),
            meta_lag: match meta_lag {
                NodeResponse::Lag { lag, .. } => lag,
                _ => Vec::new(),
            },
            shards: out,
        })
    }

    async fn shard_lag(&self, group: GroupId) -> NodeResponse {
        if group == META_GROUP {
            return self.lag_of(&self.meta);
        }
        match self.replica(group).await {
            Some(r) => self.lag_of(&r),
            None => NodeResponse::NotReady(format!("shard {group} is not started on node {}", self.id)),
        }
    }

    /// How far behind this node each member of `r`'s group is, if this node leads the group.
    fn lag_of(&self, r: &Replica) -> NodeResponse {
        let m = r.raft().metrics().borrow().clone();
        let Some(matched) = &m.replication else {
            return NodeResponse::NotLeader(r.leader_hint());
        };
        let last = m.last_log_index.unwrap_or(0);
        let lag = m
            .membership_config
            .membership()
            .nodes()
            .map(|(n, _)| {
                let behind = if *n == self.id {
                    Some(0)
                } else {
                    matched.get(n).and_then(|l| l.as_ref()).map(|l| last.saturating_sub(l.index))
                };
                (*n, behind)
            })
            .collect();
        NodeResponse::Lag { leader: self.id, lag }
    }
}

impl Handler for Inner {
    fn handle(&self, req: NodeRequest) -> Pin<Box<dyn Future<Output = NodeResponse> + Send + '_>> {
        Box::pin(self.answer(req))
    }
}

impl crate::sql::Cluster for Inner {
    fn read_at(
        &self,
        group: GroupId,
        at_ms: u64,
    ) -> crate::sql::BoxFuture<'_, Result<(Arc<strata::Db>, Arc<strata::Snapshot>)>> {
        Box::pin(async move {
            let r = self
                .replica(group)
                .await
                .ok_or_else(|| Error::Raft(format!("node {} holds no replica of shard {group}", self.id)))?;
            self.caught_up(&r).await?;
            let snapshot = crate::sql::snapshot_at_ms(r.db(), at_ms)?;
            Ok((r.db().clone(), Arc::new(snapshot)))
        })
    }

    fn tables(&self) -> Result<(Vec<TableMap>, Vec<ShardInfo>)> {
        self.map()
    }

    fn workers(&self) -> BTreeMap<NodeId, url::Url> {
        let known = crate::machine::cluster_workers(self.meta.db()).unwrap_or_default();
        let members = self.nodes();
        known
            .into_iter()
            .filter(|(n, _)| members.contains_key(n))
            .filter_map(|(n, u)| Some((n, u.parse().ok()?)))
            .collect()
    }

    fn scan_delay(&self) -> Duration {
        self.scan_delay
    }
}
