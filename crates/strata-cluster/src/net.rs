//! A node's one TCP port: Raft's messages for every group it hosts, tagged with the group, and
//! proposals sent to a group's leader.
//!
//! Each message is a frame, `len u32 LE | body (postcard)`, answered by one frame on the same
//! connection. A peer keeps one connection per (group, target) and opens it again after an
//! error. A connection that cannot be opened is reported to Raft as the target being
//! unreachable (it backs off); one that breaks mid-call as a network error.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, Raft};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::types::{Cfg, Command, GroupId, NodeId, NodeRequest, NodeResponse, Reply};
use crate::{Error, Result};

/// The largest frame sent or taken.
const MAX_FRAME: usize = 1 << 30;

/// How long opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A message to a node.
#[derive(Debug, Serialize, Deserialize)]
enum Request {
    Append(GroupId, AppendEntriesRequest<Cfg>),
    Vote(GroupId, VoteRequest<NodeId>),
    Snapshot(GroupId, InstallSnapshotRequest<Cfg>),
    Propose(GroupId, Command),
    Node(NodeRequest),
}

/// A node's answer.
#[derive(Debug, Serialize, Deserialize)]
enum Response {
    Append(AppendEntriesResponse<NodeId>),
    Vote(VoteResponse<NodeId>),
    Snapshot(InstallSnapshotResponse<NodeId>),
    Proposed(Reply),
    Node(NodeResponse),
    /// The node is not the group's leader: the leader it knows of (id, address), if any.
    NotLeader(Option<(NodeId, String)>),
    /// The node hosts no replica of the group.
    NoGroup(GroupId),
    Failed(String),
}

/// What answers a node's [`NodeRequest`]s.
pub trait Handler: Send + Sync + 'static {
    /// The answer to `req`.
    fn handle(&self, req: NodeRequest) -> Pin<Box<dyn Future<Output = NodeResponse> + Send + '_>>;
}

/// The groups a node hosts: where its server hands each message.
#[derive(Clone, Default)]
pub struct Hosted {
    groups: Arc<RwLock<HashMap<GroupId, Raft<Cfg>>>>,
    handler: Arc<RwLock<Option<Arc<dyn Handler>>>>,
}

impl Hosted {
    /// Hands the group's messages to `raft` from now on.
    pub fn add(&self, group: GroupId, raft: Raft<Cfg>) {
        self.groups.write().insert(group, raft);
    }

    /// Stops handing the group's messages on.
    pub fn remove(&self, group: GroupId) -> Option<Raft<Cfg>> {
        self.groups.write().remove(&group)
    }

    /// Hands [`NodeRequest`]s to `handler` from now on.
    pub fn set_handler(&self, handler: Arc<dyn Handler>) {
        *self.handler.write() = Some(handler);
    }

    /// Answers no more [`NodeRequest`]s (and lets the handler go).
    pub fn clear_handler(&self) {
        *self.handler.write() = None;
    }

    fn get(&self, group: GroupId) -> Option<Raft<Cfg>> {
        self.groups.read().get(&group).cloned()
    }
}

async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, body: &[u8]) -> std::io::Result<()> {
    w.write_all(&(body.len() as u32).to_le_bytes()).await?;
    w.write_all(body).await?;
    w.flush().await
}

async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a frame of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await?;
    Ok(body)
}

/// A node's server: it answers on its port until stopped or dropped.
pub struct Server {
    addr: SocketAddr,
    task: Option<JoinHandle<()>>,
}

impl Server {
    /// Listens on `listen` (`127.0.0.1:0` picks a free port) and serves the groups `hosted` holds.
    pub async fn start(listen: &str, hosted: Hosted) -> Result<Server> {
        let listener =
            TcpListener::bind(listen).await.map_err(|e| Error::Network(format!("listening on {listen}: {e}")))?;
        let addr = listener.local_addr().map_err(|e| Error::Network(e.to_string()))?;
        let task = tokio::spawn(async move {
            // Connections end with the server: dropping the set aborts them.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else {
                            // Out of descriptors, say: wait rather than spin.
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        };
                        let _ = stream.set_nodelay(true);
                        connections.spawn(serve(stream, hosted.clone()));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(Server { addr, task: Some(task) })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening and drops every connection.
    pub fn stop(&self) {
        if let Some(t) = &self.task {
            t.abort();
        }
    }

    /// Stops listening, drops every connection, and returns once they are gone.
    pub async fn shutdown(mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn serve(mut stream: TcpStream, hosted: Hosted) {
    while let Ok(body) = read_frame(&mut stream).await {
        let response = match postcard::from_bytes::<Request>(&body) {
            Ok(req) => answer(req, &hosted).await,
            Err(e) => Response::Failed(format!("a message that does not decode: {e}")),
        };
        let Ok(out) = postcard::to_stdvec(&response) else { return };
        if write_frame(&mut stream, &out).await.is_err() {
            return;
        }
    }
}

async fn answer(req: Request, hosted: &Hosted) -> Response {
    let group = match &req {
        Request::Append(g, _) | Request::Vote(g, _) | Request::Snapshot(g, _) | Request::Propose(g, _) => *g,
        Request::Node(_) => {
            let handler = hosted.handler.read().clone();
            let (Request::Node(r), Some(h)) = (req, handler) else {
                return Response::Failed("this server answers no node requests".into());
            };
            return Response::Node(h.handle(r).await);
        }
    };
    let Some(raft) = hosted.get(group) else { return Response::NoGroup(group) };
    match req {
        Request::Append(_, rpc) => {
            raft.append_entries(rpc).await.map_or_else(|e| Response::Failed(e.to_string()), Response::Append)
        }
        Request::Vote(_, rpc) => raft.vote(rpc).await.map_or_else(|e| Response::Failed(e.to_string()), Response::Vote),
        Request::Snapshot(_, rpc) => {
            raft.install_snapshot(rpc).await.map_or_else(|e| Response::Failed(e.to_string()), Response::Snapshot)
        }
        Request::Node(_) => Response::Failed("unreachable".into()),
        Request::Propose(_, cmd) => match propose_to(&raft, cmd).await {
            Ok(Proposed::Done(r)) => Response::Proposed(r),
            Ok(Proposed::NotLeader(l)) => Response::NotLeader(l),
            Err(e) => Response::Failed(e.to_string()),
        },
    }
}

/// How a call failed.
enum CallError {
    /// The connection could not be opened.
    Unreachable(std::io::Error),
    /// It broke, timed out or carried something that does not decode.
    Broken(std::io::Error),
}

/// One connection to a node, opened when needed.
struct Connection {
    addr: String,
    stream: Option<TcpStream>,
}

impl Connection {
    async fn call(&mut self, req: &Request, ttl: Duration) -> std::result::Result<Response, CallError> {
        let body = postcard::to_stdvec(req).map_err(|e| CallError::Broken(std::io::Error::other(e)))?;
        if self.stream.is_none() {
            let stream = match tokio::time::timeout(CONNECT_TIMEOUT.min(ttl), TcpStream::connect(&self.addr)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => return Err(CallError::Unreachable(e)),
                Err(_) => return Err(CallError::Unreachable(std::io::Error::other("connecting timed out"))),
            };
            let _ = stream.set_nodelay(true);
            self.stream = Some(stream);
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(CallError::Broken(std::io::Error::other("no connection")));
        };
        let exchange = async {
            write_frame(stream, &body).await?;
            read_frame(stream).await
        };
        let res = match tokio::time::timeout(ttl, exchange).await {
            Ok(Ok(out)) => postcard::from_bytes(&out)
                .map_err(|e| std::io::Error::other(format!("an answer that does not decode: {e}"))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no answer in {ttl:?}"))),
        };
        res.map_err(|e| {
            self.stream = None;
            CallError::Broken(e)
        })
    }
}

/// The Raft network of one group: a [`Peer`] per target node.
pub struct Network {
    group: GroupId,
}

impl Network {
    /// The network of `group`.
    pub fn new(group: GroupId) -> Network {
        Network { group }
    }
}

impl RaftNetworkFactory<Cfg> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer { group: self.group, target, conn: Connection { addr: node.addr.clone(), stream: None } }
    }
}

/// A group's connection to one of its other replicas.
pub struct Peer {
    group: GroupId,
    target: NodeId,
    conn: Connection,
}

type RpcResult<T, E = openraft::error::Infallible> =
    std::result::Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl Peer {
    async fn rpc<T, E: std::error::Error>(
        &mut self,
        req: Request,
        ttl: Duration,
        pick: impl FnOnce(Response) -> Option<T>,
    ) -> RpcResult<T, E> {
        let failed = |m: String| RPCError::Network(NetworkError::new(&std::io::Error::other(m)));
        match self.conn.call(&req, ttl).await {
            Ok(Response::Failed(m)) => Err(failed(format!("node {}: {m}", self.target))),
            Ok(Response::NoGroup(g)) => Err(failed(format!("node {} holds no replica of group {g}", self.target))),
            Ok(r) => pick(r).ok_or_else(|| failed(format!("node {} answered out of turn", self.target))),
            Err(CallError::Unreachable(e)) => Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(CallError::Broken(e)) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }
}

impl RaftNetwork<Cfg> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Cfg>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>> {
        let group = self.group;
        self.rpc(Request::Append(group, rpc), option.hard_ttl(), |r| match r {
            Response::Append(a) => Some(a),
            _ => None,
        })
        .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<Cfg>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        let group = self.group;
        self.rpc(Request::Snapshot(group, rpc), option.hard_ttl(), |r| match r {
            Response::Snapshot(a) => Some(a),
            _ => None,
        })
        .await
    }

    async fn vote(&mut self, rpc: VoteRequest<NodeId>, option: RPCOption) -> RpcResult<VoteResponse<NodeId>> {
        let group = self.group;
        self.rpc(Request::Vote(group, rpc), option.hard_ttl(), |r| match r {
            Response::Vote(a) => Some(a),
            _ => None,
        })
        .await
    }
}

/// What a proposal sent to a node came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proposed {
    /// Committed and applied on the leader.
    Done(Reply),
    /// The node is not the leader; the leader it knows of, if any (id, address).
    NotLeader(Option<(NodeId, String)>),
}

/// Proposes `cmd` to the group `raft` runs: committed and applied when it leads the group;
/// else the leader it knows of.
pub(crate) async fn propose_to(raft: &Raft<Cfg>, cmd: Command) -> Result<Proposed> {
    match raft.client_write(cmd).await {
        Ok(r) => Ok(Proposed::Done(r.data)),
        Err(RaftError::APIError(openraft::error::ClientWriteError::ForwardToLeader(f))) => {
            Ok(Proposed::NotLeader(f.leader_id.zip(f.leader_node.map(|n| n.addr))))
        }
        Err(e) => Err(Error::Raft(e.to_string())),
    }
}

/// Sends `cmd` to group `group` on the node at `addr`, waiting up to `ttl` for it to commit.
pub async fn propose(addr: &str, group: GroupId, cmd: Command, ttl: Duration) -> Result<Proposed> {
    let mut conn = Connection { addr: addr.to_string(), stream: None };
    match conn.call(&Request::Propose(group, cmd), ttl).await {
        Ok(Response::Proposed(r)) => Ok(Proposed::Done(r)),
        Ok(Response::NotLeader(l)) => Ok(Proposed::NotLeader(l)),
        Ok(Response::NoGroup(g)) => Err(Error::Raft(format!("{addr} holds no replica of group {g}"))),
        Ok(Response::Failed(m)) => Err(Error::Raft(format!("{addr}: {m}"))),
        Ok(other) => Err(Error::Network(format!("{addr} answered a proposal with {other:?}"))),
        Err(CallError::Unreachable(e) | CallError::Broken(e)) => Err(Error::Network(format!("{addr}: {e}"))),
    }
}

/// Sends `req` to the node at `addr`, waiting up to `ttl` for its answer.
pub async fn call(addr: &str, req: NodeRequest, ttl: Duration) -> Result<NodeResponse> {
    let mut conn = Connection { addr: addr.to_string(), stream: None };
    match conn.call(&Request::Node(req), ttl).await {
        Ok(Response::Node(r)) => Ok(r),
        Ok(Response::Failed(m)) => Err(Error::Network(format!("{addr}: {m}"))),
        Ok(other) => Err(Error::Network(format!("{addr} answered a node request with {other:?}"))),
        Err(CallError::Unreachable(e) | CallError::Broken(e)) => Err(Error::Network(format!("{addr}: {e}"))),
    }
}
