//! One shard's routes: its links to the same-index shard of every other
//! node. Each shard runs this alone (no state shared between shards): it
//! accepts on its own socket of the cluster port (the kernel steers
//! connections by source port, see [`crate::cluster::steer`]), dials the
//! configured routes and the ones it learns (gossip), checks every peer at
//! the handshake (cluster name, shard count, shard index), keeps one link
//! per node, and reconnects with backoff.
//!
//! With `[cluster.tls]`, a TLS handshake comes first on every connection:
//! both nodes present certificates and each verifies the other's against
//! the cluster's CA (the dialer also checks the certificate names the host
//! it dialed); the frames below then travel inside the session.
//!
//! Handshake: the dialer sends its Hello; the acceptor answers with its own
//! Hello or a Refuse naming the mismatch, and both log it. A node that
//! reaches itself (its own address among the routes) remembers the URL and
//! stops dialing it. When both nodes dial each other, both keep the
//! connection dialed by the node with the smaller server id.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use rustc_hash::FxHashMap;
use tern_shard::{Shutdown, Waiters};

use crate::cluster::frame::{self, Frame, Hello};
use crate::cluster::frame::{NodeInterestError, RoutedFrame, NODE_KEYS_MAX};
use crate::cluster::link::{LinkClose, PeerIdentity, RouteLink};
use crate::config::{ClusterConfig, HostPort};
use crate::nats::conn::SharedStream;
use crate::tls::RouteTls;

/// How long a handshake may take, either side.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnect backoff: doubles from the first to the last.
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A link pings this often when idle; silence for `STALE_AFTER` closes it.
const PING_INTERVAL: Duration = Duration::from_secs(2);
const STALE_AFTER: Duration = Duration::from_secs(10);
/// First read buffer; it grows to one frame at most.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Frames a read loop handles before letting other tasks run.
const READ_BATCH_FRAMES: usize = 256;
/// What a frame may carry beyond a message's payload for Raft: an
/// append's entries past the first (`max_append_bytes`, 1 MiB) or a
/// snapshot chunk, and their headers.
const RAFT_FRAME_EXTRA_BYTES: usize = 2 << 20;
/// Most nodes (route URLs) one shard tracks.
const TARGETS_MAX: usize = 256;

/// A route URL this shard keeps connected.
#[derive(Debug, Default)]
struct TargetState {
    /// The node found there, once known.
    server_id: Option<String>,
    /// The URL is this node.
    is_self: bool,
    /// From the configuration (redialed for ever), not learnt (dropped
    /// after [`LEARNT_ROUTE_ATTEMPTS`] failed dials in a row, as
    /// nats-server drops implicit routes; gossip brings it back).
    configured: bool,
}

/// Failed dials in a row after which a learnt route URL is forgotten.
const LEARNT_ROUTE_ATTEMPTS: u32 = 3;

/// One shard's routes.
pub struct Routes {
    pub config: ClusterConfig,
    /// This shard's Hello (its `known_routes` are filled in when sent).
    hello: RefCell<Hello>,
    links: RefCell<FxHashMap<String, Rc<RouteLink>>>,
    targets: RefCell<BTreeMap<String, TargetState>>,
    next_link_id: Cell<u64>,
    /// Woken when links come or go (dialers waiting on a connected node).
    changed: Waiters,
    /// Frame bodies above this are refused.
    body_max_bytes: usize,
    pending_max_bytes: usize,
    random: crate::random::Xorshift,
    raft_dropped: Cell<u64>,
    /// Every node a link was established with since start (Raft id ->
    /// server name), kept when the link closes: monitoring names a node
    /// that is down. Bounded by the cluster's size.
    known_nodes: RefCell<BTreeMap<u64, String>>,
}

impl Routes {
    /// Makes `link` the node's link, unless the open one it has is the one
    /// both nodes keep (`None`: `link` is dropped). `Some(replaced)`: the
    /// link it replaced, closed.
    fn register(&self, link: &Rc<RouteLink>) -> Option<Option<Rc<RouteLink>>> {
        let mut links = self.links.borrow_mut();
        let existing = links.get(&link.peer.server_id).cloned();
        if let Some(existing) = &existing {
            let own_id = self.hello.borrow().server_id.clone();
            if existing.is_open() && !keeps_new(&own_id, existing, link.peer.did_solicit) {
                return None;
            }
            existing.close(LinkClose::Duplicate);
        }
        links.insert(link.peer.server_id.clone(), link.clone());
        self.known_nodes
            .borrow_mut()
            .insert(link.peer.node_id, link.peer.server_name.clone());
        Some(existing)
    }

    pub fn new(
        config: ClusterConfig,
        hello: Hello,
        max_payload_bytes: usize,
        pending_max_bytes: usize,
        seed: u64,
    ) -> Routes {
        Routes {
            config,
            hello: RefCell::new(hello),
            links: RefCell::new(FxHashMap::default()),
            targets: RefCell::new(BTreeMap::new()),
            next_link_id: Cell::new(1),
            changed: Waiters::new(),
            // A Raft frame carries an append of up to 1 MiB past its first
            // entry (itself up to a message), or a 1 MiB snapshot chunk.
            body_max_bytes: max_payload_bytes
                + frame::MESSAGE_OVERHEAD_BYTES_MAX
                + RAFT_FRAME_EXTRA_BYTES,
            pending_max_bytes,
            random: crate::random::Xorshift::new(seed),
            raft_dropped: Cell::new(0),
            known_nodes: RefCell::new(BTreeMap::new()),
        }
    }

    /// Every open link (one per other node this shard reaches).
    pub fn links(&self) -> Vec<Rc<RouteLink>> {
        let mut links: Vec<Rc<RouteLink>> = self.links.borrow().values().cloned().collect();
        links.sort_by(|a, b| a.peer.server_name.cmp(&b.peer.server_name));
        links
    }

    /// The open link to the node with Raft id `node_id`.
    pub fn link_to_node(&self, node_id: u64) -> Option<Rc<RouteLink>> {
        self.links
            .borrow()
            .values()
            .find(|link| link.peer.node_id == node_id && link.is_open())
            .cloned()
    }

    /// Every node this shard has had a link to since start, by Raft id:
    /// its server name and whether a link is open now.
    pub fn known_nodes(&self) -> Vec<(u64, String, bool)> {
        self.known_nodes
            .borrow()
            .iter()
            .map(|(&node, name)| (node, name.clone(), self.link_to_node(node).is_some()))
            .collect()
    }

    /// The server name of node `node_id`, if this shard ever linked to it.
    pub fn known_node_name(&self, node_id: u64) -> Option<String> {
        self.known_nodes.borrow().get(&node_id).cloned()
    }

    /// The Raft ids of the nodes at the configured route URLs, once every
    /// one of them is connected (or found to be this node); `None` before.
    /// The meta group's first voters: every node lists every node.
    pub fn configured_peers(&self) -> Option<Vec<u64>> {
        self.configured_peers_formed(0).map(|(peers, _)| peers)
    }

    /// [`Routes::configured_peers`], and the meta group voters a node this
    /// shard links to said it has (one naming `this` first), if any does:
    /// then a node with a new store joins that group, or forms it with
    /// those voters when it is one of them, instead of forming its own.
    pub fn configured_peers_formed(&self, this: u64) -> Option<(Vec<u64>, Option<Vec<u64>>)> {
        let formed = {
            let links = self.links.borrow();
            let mut groups: Vec<Vec<u64>> = links
                .values()
                .filter(|link| link.is_open() && !link.peer.meta_voters.is_empty())
                .map(|link| link.peer.meta_voters.clone())
                .collect();
            groups.sort_by_key(|voters| !voters.contains(&this));
            groups.into_iter().next()
        };
        let targets = self.targets.borrow();
        let links = self.links.borrow();
        let mut peers = Vec::new();
        for url in &self.config.routes {
            let state = targets.get(&url.to_string())?;
            if state.is_self {
                continue;
            }
            let link = links.get(state.server_id.as_ref()?)?;
            if !link.is_open() {
                return None;
            }
            peers.push(link.peer.node_id);
        }
        peers.sort_unstable();
        peers.dedup();
        Some((peers, formed))
    }

    /// This node's Raft id.
    pub fn node_id(&self) -> u64 {
        self.hello.borrow().node_id
    }

    /// Sends a batch of Raft messages to its node, if a link reaches it
    /// and is not over its stall threshold; otherwise the batch is lost,
    /// as to Raft any message may be (it retries, within its own
    /// in-flight limits), and counted.
    pub fn send_raft(&self, batch: crate::cluster::multiraft::Outgoing) {
        let Some(link) = self.link_to_node(batch.to) else {
            self.raft_dropped
                .set(self.raft_dropped.get() + batch.messages.len() as u64);
            return;
        };
        if link.over_stall_threshold() {
            self.raft_dropped
                .set(self.raft_dropped.get() + batch.messages.len() as u64);
            return;
        }
        let from = self.node_id();
        let mut encoded = Vec::with_capacity(batch.messages.len());
        for (group, envelope) in &batch.messages {
            debug_assert_eq!(envelope.from, from);
            let mut bytes = bytes::BytesMut::with_capacity(tern_raft::wire::encoded_size_bytes(
                &envelope.message,
            ));
            tern_raft::wire::encode(&envelope.message, &mut bytes);
            encoded.push((*group, bytes.freeze()));
        }
        let body_max_bytes = self.body_max_bytes;
        link.send_raft(from, batch.to, &encoded, body_max_bytes);
    }

    /// Raft messages dropped because no link reached their node or it
    /// was stalled.
    pub fn raft_dropped(&self) -> u64 {
        self.raft_dropped.get()
    }

    /// The other nodes' client addresses, for INFO `connect_urls`.
    pub fn connect_urls(&self) -> Vec<String> {
        let mut urls: Vec<String> = self
            .links
            .borrow()
            .values()
            .map(|link| link.peer.client_url.clone())
            .filter(|url| !url.is_empty())
            .collect();
        urls.sort();
        urls.dedup();
        urls
    }

    fn random_below(&self, bound: u64) -> u64 {
        self.random.below(bound)
    }

    /// Route URLs to gossip: every connected node's and every configured one.
    fn known_routes(&self) -> Vec<String> {
        let mut known: Vec<String> = self
            .links
            .borrow()
            .values()
            .map(|link| link.peer.route_url.clone())
            .collect();
        known.extend(
            self.targets
                .borrow()
                .iter()
                .filter(|(_, state)| !state.is_self)
                .map(|(url, _)| url.clone()),
        );
        known.sort();
        known.dedup();
        known.truncate(frame::ROUTE_URLS_MAX);
        known
    }

    fn own_hello(&self) -> Hello {
        let mut hello = self.hello.borrow().clone();
        hello.known_routes = self.known_routes();
        hello
    }

    /// This node's JetStream meta group's voters (empty: none yet), as
    /// the Hellos it sends from now on say (shard 0's JetStream keeps it
    /// current).
    pub fn set_meta_voters(&self, voters: &[u64]) {
        let mut hello = self.hello.borrow_mut();
        if hello.meta_voters != voters {
            hello.meta_voters = voters.to_vec();
        }
    }

    /// Why a peer's Hello is refused, if it is.
    fn check(&self, hello: &Hello, address: SocketAddr) -> Result<(), Refusal> {
        let own = self.hello.borrow();
        if hello.cluster != own.cluster {
            return Err(Refusal::Permanent(format!(
                "cluster name mismatch: peer {address} is in cluster {:?}, this node in {:?}",
                hello.cluster, own.cluster
            )));
        }
        if hello.shard_count != own.shard_count {
            return Err(Refusal::Permanent(format!(
                "shard count mismatch: peer {address} ({}) runs {} shards, this node runs {}; every node of a cluster needs the same shard count",
                hello.server_name, hello.shard_count, own.shard_count
            )));
        }
        if hello.shard_index != own.shard_index {
            return Err(Refusal::Retry(format!(
                "route from {address} for shard {} arrived on shard {}: SO_REUSEPORT steering is not in effect",
                hello.shard_index, own.shard_index
            )));
        }
        if hello.server_id == own.server_id {
            return Err(Refusal::Itself);
        }
        // Names identify nodes to operators (and, with JetStream, to Raft):
        // two live nodes may not share one.
        if hello.server_name == own.server_name {
            return Err(Refusal::Permanent(format!(
                "duplicate server name: peer {address} is named {:?} like this node",
                hello.server_name
            )));
        }
        // Raft knows nodes by their store's id (`jetstream::identity`):
        // two nodes with one id would be one voter.
        if hello.node_id == 0 || hello.node_id == own.node_id {
            return Err(Refusal::Permanent(format!(
                "node id collision: peer {address} named {:?} sends Raft node id {:#x}, this node named {:?} has {:#x}",
                hello.server_name, hello.node_id, own.server_name, own.node_id
            )));
        }
        let clash = self
            .links
            .borrow()
            .values()
            .find(|link| {
                link.is_open()
                    && link.peer.server_name == hello.server_name
                    && link.peer.server_id != hello.server_id
            })
            .map(|link| link.peer.address);
        if let Some(connected) = clash {
            // Retried: the connected one may be a restarted node's old
            // link, about to be noticed dead.
            return Err(Refusal::Retry(format!(
                "duplicate server name: peer {address} is named {:?} like the node connected from {connected}",
                hello.server_name
            )));
        }
        Ok(())
    }
}

enum Refusal {
    /// Configuration differs: retrying will not help until it changes.
    Permanent(String),
    /// Try again (from another source port).
    Retry(String),
    /// The route leads back to this node.
    Itself,
}

/// `host:port` with an unspecified host replaced by the address the peer
/// was seen from.
fn observed(url: &str, seen_from: IpAddr) -> String {
    match HostPort::parse(url, false) {
        Ok(mut host_port) => {
            let unspecified = host_port
                .host
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.is_unspecified());
            if unspecified {
                host_port.host = seen_from.to_string();
            }
            host_port.to_string()
        }
        Err(_) => url.to_string(),
    }
}

/// What a shard's routes need of the shard they run on. The node's shard
/// implements it; the routes, below the routing layer and JetStream, reach
/// them only through it (one implementation: calls are static).
// The node's futures stay on their shard's thread: no `Send` bound wanted.
#[allow(async_fn_in_trait)]
pub trait RouteHost: 'static {
    /// This shard's routes (the host is clustered).
    fn routes(&self) -> &Routes;
    fn shard_index(&self) -> usize;
    fn shard_count(&self) -> usize;
    fn shutdown(&self) -> &Shutdown;
    /// How long a write to a peer may block before its link closes.
    fn write_deadline(&self) -> Duration;
    /// TLS on route connections (`None`: plaintext).
    fn route_tls(&self) -> Option<&RouteTls>;
    /// A link to `link.peer` was established (or replaced another): this
    /// shard's interest goes over it.
    fn link_opened(&self, link: &Rc<RouteLink>);
    /// What the peer said over `link` is forgotten (closed or replaced).
    fn link_closed(&self, link: &Rc<RouteLink>);
    /// Links came or went (clients are told the cluster's new URLs).
    fn cluster_changed(&self);
    /// A message a peer routed here.
    fn deliver(&self, message: &RoutedFrame<'_>);
    /// An interest update from node `node_id`.
    fn apply_interest(
        &self,
        node_id: u64,
        subject: &[u8],
        queue: Option<&[u8]>,
        weight: u32,
    ) -> Result<(), NodeInterestError>;
    /// Whether JetStream runs here (Raft and API frames go to it).
    fn has_jetstream(&self) -> bool;
    /// A Raft message for one of this shard's groups.
    fn raft_message(&self, group: u64, envelope: tern_raft::Envelope);
    /// A JetStream API request another node handed to this shard.
    fn forwarded_api(&self, hops: u8, subject: &[u8], reply: Option<&[u8]>, payload: &[u8]);
    /// After a batch of frames: deliveries flushed, stalled consumers
    /// given their turn.
    async fn frames_handled(&self);
    /// Waits until what this node's other shards sent before now is
    /// handled here.
    async fn catch_up_with_peers(&self);
}

/// Starts the shard's routes: accepting on `listener`, dialing the
/// configured routes.
pub fn start<H: RouteHost>(shard: &Rc<H>, listener: TcpListener) {
    let routes = shard.routes();
    glommio::spawn_local(accept_loop(shard.clone(), listener)).detach();
    for route in routes.config.routes.clone() {
        add_target(shard, route.to_string(), true);
    }
}

/// Adds a learnt route URL (gossip) to keep connected.
fn learn<H: RouteHost>(shard: &Rc<H>, url: String) {
    add_target(shard, url, false);
}

/// Adds a route URL to keep connected and starts dialing it, unless known
/// already.
fn add_target<H: RouteHost>(shard: &Rc<H>, url: String, configured: bool) {
    let routes = shard.routes();
    {
        let mut targets = routes.targets.borrow_mut();
        if targets.contains_key(&url) || targets.len() >= TARGETS_MAX {
            return;
        }
        // A node already connected under this URL (it dialed us) is not
        // dialed again while that link lasts.
        let server_id = routes
            .links
            .borrow()
            .values()
            .find(|link| link.peer.route_url == url)
            .map(|link| link.peer.server_id.clone());
        targets.insert(
            url.clone(),
            TargetState {
                server_id,
                is_self: false,
                configured,
            },
        );
    }
    log::debug!(target: "tern::cluster", "shard {}: route to {url} added", shard.shard_index());
    glommio::spawn_local(dial_loop(shard.clone(), url)).detach();
}

async fn accept_loop<H: RouteHost>(shard: Rc<H>, listener: TcpListener) {
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            shard.shutdown().wait().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok(stream)) => {
                glommio::spawn_local(accept_one(shard.clone(), stream)).detach();
            }
            Some(Err(error)) => {
                log::warn!(target: "tern::cluster", "shard {}: route accept failed: {error}", shard.shard_index());
                tern_shard::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Reads frames into `buffer` until one whole frame is there; returns it
/// decoded and how many bytes it took.
async fn read_frame(
    stream: &mut SharedStream,
    buffer: &mut Vec<u8>,
    body_max_bytes: usize,
) -> Result<(Hello, usize), HandshakeError> {
    loop {
        match frame::decode(buffer, body_max_bytes) {
            Ok(Some((Frame::Hello(hello), used))) => return Ok((hello, used)),
            Ok(Some((Frame::Refuse(reason), _))) => return Err(HandshakeError::Refused(reason)),
            Ok(Some((other, _))) => {
                return Err(HandshakeError::Frame(format!(
                    "expected a hello, got {other:?}"
                )))
            }
            Ok(None) => {}
            Err(error) => return Err(HandshakeError::Frame(error.to_string())),
        }
        let needed = frame::frame_bytes(buffer).unwrap_or(frame::FRAME_HEADER_BYTES);
        let start = buffer.len();
        buffer.resize(start.max(needed).max(start + 4096), 0);
        let read = stream.read(&mut buffer[start..]).await;
        match read {
            Ok(0) => {
                buffer.truncate(start);
                return Err(HandshakeError::Closed);
            }
            Ok(count) => buffer.truncate(start + count),
            Err(error) => {
                buffer.truncate(start);
                return Err(HandshakeError::Io(error));
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum HandshakeError {
    #[error("{0}")]
    Io(std::io::Error),
    #[error("{0}")]
    Tls(#[from] crate::tls::RouteHandshakeError),
    #[error("connection closed during the handshake")]
    Closed,
    #[error("handshake timed out")]
    Timeout,
    #[error("{0}")]
    Frame(String),
    #[error("refused by the peer: {0}")]
    Refused(String),
}

/// The route's transport over `stream`: the socket itself, or with
/// `[cluster.tls]` a TLS session whose handshake runs now (`dialed`: the
/// host this node dialed, which the peer's certificate must name).
async fn secure<H: RouteHost>(
    shard: &H,
    stream: TcpStream,
    dialed: Option<&str>,
) -> Result<SharedStream, crate::tls::RouteHandshakeError> {
    let Some(tls) = shard.route_tls() else {
        return Ok(SharedStream::new(stream));
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let tcp = crate::tls::SharedTcp::new(stream);
    let session = match dialed {
        None => crate::tls::accept_route(tls, tcp).await?,
        Some(host) => crate::tls::dial_route(tls, host, tcp).await?,
    };
    Ok(SharedStream::tls(session, fd))
}

/// Writes `bytes` and flushes them (a TLS session holds records until then).
async fn send(stream: &mut SharedStream, bytes: &[u8]) -> std::io::Result<()> {
    stream.write_all(bytes).await?;
    stream.flush().await
}

async fn accept_one<H: RouteHost>(shard: Rc<H>, stream: TcpStream) {
    let routes = shard.routes();
    let Ok(address) = stream.peer_addr() else {
        return;
    };
    let _ = stream.set_nodelay(true);
    let mut buffer = Vec::with_capacity(4096);
    let hello = tern_shard::timer::timeout(HANDSHAKE_TIMEOUT, async {
        let mut stream = secure(&*shard, stream, None).await?;
        let (hello, used) = read_frame(&mut stream, &mut buffer, routes.body_max_bytes).await?;
        Ok::<_, HandshakeError>((stream, hello, used))
    })
    .await
    .unwrap_or(Err(HandshakeError::Timeout));
    let (mut stream, hello, used) = match hello {
        Ok(found) => found,
        Err(error) => {
            log::warn!(target: "tern::cluster", "shard {}: route connection from {address} refused: {error}", shard.shard_index());
            return;
        }
    };
    buffer.drain(..used);
    let mut reply = Vec::new();
    match routes.check(&hello, address) {
        Ok(()) => {}
        Err(Refusal::Itself) => {
            frame::push_refuse(&mut reply, "a route to itself");
            let _ = tern_shard::timer::timeout(HANDSHAKE_TIMEOUT, send(&mut stream, &reply)).await;
            return;
        }
        Err(Refusal::Permanent(reason) | Refusal::Retry(reason)) => {
            log::warn!(target: "tern::cluster", "shard {}: route refused: {reason}", shard.shard_index());
            frame::push_refuse(&mut reply, &reason);
            let _ = tern_shard::timer::timeout(HANDSHAKE_TIMEOUT, send(&mut stream, &reply)).await;
            return;
        }
    }
    frame::push_hello(&mut reply, &routes.own_hello());
    match tern_shard::timer::timeout(HANDSHAKE_TIMEOUT, send(&mut stream, &reply)).await {
        Ok(Ok(())) => {}
        _ => return,
    }
    let peer = PeerIdentity {
        client_url: observed(&hello.client_url, address.ip()),
        route_url: observed(&hello.route_url, address.ip()),
        server_id: hello.server_id,
        server_name: hello.server_name,
        node_id: hello.node_id,
        meta_voters: hello.meta_voters,
        address,
        did_solicit: false,
    };
    for url in hello.known_routes {
        learn(&shard, observed(&url, address.ip()));
    }
    serve(shard, peer, stream, buffer).await;
}

/// Keeps `url` connected: dials it whenever no link to the node behind it
/// is open, with backoff; stops if the URL turns out to be this node.
async fn dial_loop<H: RouteHost>(shard: Rc<H>, url: String) {
    let routes = shard.routes();
    let mut backoff = BACKOFF_FIRST;
    let mut warned = false;
    let mut failures = 0u32;
    while !shard.shutdown().is_triggered() {
        let known = routes
            .targets
            .borrow()
            .get(&url)
            .and_then(|state| state.server_id.clone());
        if let Some(server_id) = known {
            let connected = routes.links.borrow().get(&server_id).cloned();
            if let Some(link) = connected.filter(|link| link.is_open()) {
                // Connected (perhaps through the other node's dial): wait
                // for that link to close, then redial (a closed link may
                // still be listed while its tasks finish: not waited on).
                futures_lite::future::or(link.closed(), shard.shutdown().wait()).await;
                backoff = BACKOFF_FIRST;
                continue;
            }
        }
        match dial(&shard, &url).await {
            Ok((peer, stream, leftover)) => {
                backoff = BACKOFF_FIRST;
                warned = false;
                failures = 0;
                if let Some(state) = routes.targets.borrow_mut().get_mut(&url) {
                    state.server_id = Some(peer.server_id.clone());
                }
                serve(shard.clone(), peer, stream, leftover).await;
                continue;
            }
            Err(DialError::Itself) => {
                if let Some(state) = routes.targets.borrow_mut().get_mut(&url) {
                    state.is_self = true;
                }
                log::debug!(target: "tern::cluster", "shard {}: route {url} is this node", shard.shard_index());
                return;
            }
            Err(DialError::Known(server_id)) => {
                if let Some(state) = routes.targets.borrow_mut().get_mut(&url) {
                    state.server_id = Some(server_id);
                }
                continue;
            }
            Err(DialError::Failed(error)) => {
                failures += 1;
                let configured = routes
                    .targets
                    .borrow()
                    .get(&url)
                    .is_some_and(|state| state.configured);
                if !configured && failures >= LEARNT_ROUTE_ATTEMPTS {
                    routes.targets.borrow_mut().remove(&url);
                    log::info!(target: "tern::cluster", "shard {}: learnt route {url} forgotten after {failures} failed attempts: {error}", shard.shard_index());
                    return;
                }
                if !warned {
                    log::warn!(target: "tern::cluster", "shard {}: route to {url}: {error}; retrying", shard.shard_index());
                    warned = true;
                } else {
                    log::debug!(target: "tern::cluster", "shard {}: route to {url}: {error}", shard.shard_index());
                }
            }
        }
        let jitter = Duration::from_millis(routes.random_below(backoff.as_millis() as u64 / 2 + 1));
        futures_lite::future::or(
            async {
                tern_shard::timer::sleep(backoff + jitter).await;
            },
            shard.shutdown().wait(),
        )
        .await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

enum DialError {
    Itself,
    /// The node there is already connected (under this server id).
    Known(String),
    Failed(String),
}

async fn dial<H: RouteHost>(
    shard: &Rc<H>,
    url: &str,
) -> Result<(PeerIdentity, SharedStream, Vec<u8>), DialError> {
    let routes = shard.routes();
    let address = url
        .to_socket_addrs()
        .map_err(|error| DialError::Failed(format!("cannot resolve: {error}")))?
        .next()
        .ok_or_else(|| DialError::Failed("no address".into()))?;
    let stream = connect(&**shard, address)?;
    let host = url.rsplit_once(':').map_or(url, |(host, _)| host);
    let mut hello = Vec::new();
    frame::push_hello(&mut hello, &routes.own_hello());
    let handshake = async {
        let mut stream = secure(&**shard, stream, Some(host)).await?;
        send(&mut stream, &hello)
            .await
            .map_err(HandshakeError::Io)?;
        let mut buffer = Vec::with_capacity(4096);
        let (peer_hello, used) =
            read_frame(&mut stream, &mut buffer, routes.body_max_bytes).await?;
        buffer.drain(..used);
        Ok::<_, HandshakeError>((stream, peer_hello, buffer))
    };
    let (stream, peer_hello, leftover) = tern_shard::timer::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .unwrap_or(Err(HandshakeError::Timeout))
        .map_err(|error| match &error {
            HandshakeError::Refused(reason) if reason == "a route to itself" => DialError::Itself,
            _ => DialError::Failed(error.to_string()),
        })?;
    match routes.check(&peer_hello, address) {
        Ok(()) => {}
        Err(Refusal::Itself) => return Err(DialError::Itself),
        Err(Refusal::Permanent(reason) | Refusal::Retry(reason)) => {
            return Err(DialError::Failed(reason))
        }
    }
    if let Some(link) = routes.links.borrow().get(&peer_hello.server_id) {
        if link.is_open() && !keeps_new(&routes.hello.borrow().server_id, link, true) {
            return Err(DialError::Known(peer_hello.server_id.clone()));
        }
    }
    for known in &peer_hello.known_routes {
        learn(shard, observed(known, address.ip()));
    }
    let peer = PeerIdentity {
        client_url: observed(&peer_hello.client_url, address.ip()),
        route_url: url.to_string(),
        server_id: peer_hello.server_id,
        server_name: peer_hello.server_name,
        node_id: peer_hello.node_id,
        meta_voters: peer_hello.meta_voters,
        address,
        did_solicit: true,
    };
    Ok((peer, stream, leftover))
}

/// A connection to `address` from a source port the peer's kernel steers
/// to its shard of this index ([`crate::cluster::steer`]).
fn connect<H: RouteHost>(shard: &H, address: SocketAddr) -> Result<TcpStream, DialError> {
    let routes = shard.routes();
    let socket = crate::cluster::steer::start_connect(
        address,
        shard.shard_index(),
        shard.shard_count(),
        |bound| routes.random_below(bound),
    )
    .map_err(|error| DialError::Failed(format!("connect: {error}")))?;
    // SAFETY: a fresh socket, owned until here; the stream owns it now.
    Ok(unsafe {
        <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(
            socket,
        ))
    })
}

/// Whether a new connection to a node that already has `existing` should
/// replace it: both nodes keep the one dialed by the smaller server id.
fn keeps_new(own_id: &str, existing: &RouteLink, new_did_solicit: bool) -> bool {
    let dialer = |did_solicit: bool, peer_id: &str| -> String {
        if did_solicit {
            own_id.to_string()
        } else {
            peer_id.to_string()
        }
    };
    let peer_id = &existing.peer.server_id;
    let existing_dialer = dialer(existing.peer.did_solicit, peer_id);
    let new_dialer = dialer(new_did_solicit, peer_id);
    new_dialer < existing_dialer
}

/// Runs one established link until it closes: registers it (one per node),
/// sends this node's interest, then reads frames while a task writes.
async fn serve<H: RouteHost>(
    shard: Rc<H>,
    peer: PeerIdentity,
    stream: SharedStream,
    leftover: Vec<u8>,
) {
    let routes = shard.routes();
    let id = routes.next_link_id.get();
    routes.next_link_id.set(id + 1);
    let link = Rc::new(RouteLink::new(id, peer, routes.pending_max_bytes));
    let Some(replaced) = routes.register(&link) else {
        log::debug!(target: "tern::cluster", "shard {}: duplicate route to {} dropped", shard.shard_index(), link.peer.server_name);
        return;
    };
    // What the replaced link said is forgotten (frames still read from it
    // are ignored): this one says it all again.
    if let Some(replaced) = replaced {
        forget_link_interest(&shard, &replaced);
    }
    shard.link_opened(&link);
    log::info!(
        target: "tern::cluster",
        "shard {}: route connection to {} ({}, {}) established",
        shard.shard_index(), link.peer.server_name, link.peer.address,
        if link.peer.did_solicit { "dialed" } else { "accepted" }
    );
    // Tell the other nodes about the new one.
    let new_route = vec![link.peer.route_url.clone()];
    for other in routes.links() {
        if other.id != link.id {
            other.send_routes(&new_route);
        }
    }
    routes.changed.wake_all();
    shard.cluster_changed();

    let writer = glommio::spawn_local(write_loop(shard.clone(), link.clone(), stream.clone()));
    let pinger = glommio::spawn_local(ping_loop(link.clone()));
    read_loop(&shard, &link, stream.clone(), leftover).await;
    link.close(LinkClose::PeerClosed);
    drop(pinger);
    writer.await;
    stream.shutdown();
    let current = {
        let mut links = routes.links.borrow_mut();
        let current = links
            .get(&link.peer.server_id)
            .is_some_and(|current| current.id == link.id);
        if current {
            links.remove(&link.peer.server_id);
        }
        current
    };
    // A link replaced by another was forgotten when that one came.
    if current {
        forget_link_interest(&shard, &link);
    }
    routes.changed.wake_all();
    shard.cluster_changed();
    let reason = link.close_reason();
    if reason == Some(LinkClose::Duplicate) {
        log::info!(target: "tern::cluster", "shard {}: duplicate route connection to {} ({}) closed: both nodes keep the one the smaller server id dialed", shard.shard_index(), link.peer.server_name, link.peer.address);
    } else {
        log::info!(
            target: "tern::cluster",
            "shard {}: route connection to {} ({}) closed: {:?}",
            shard.shard_index(), link.peer.server_name, link.peer.address, reason
        );
    }
}

/// Forgets what the node said over a link that closed or was replaced,
/// here and (relayed) on the node's other shards, after anything relayed
/// from it before.
fn forget_link_interest<H: RouteHost>(shard: &Rc<H>, link: &Rc<RouteLink>) {
    shard.link_closed(link);
}

async fn read_loop<H: RouteHost>(
    shard: &Rc<H>,
    link: &Rc<RouteLink>,
    mut stream: SharedStream,
    leftover: Vec<u8>,
) {
    let routes = shard.routes();
    let mut buffer = leftover;
    let mut start = 0;
    buffer.reserve(READ_BUFFER_BYTES);
    loop {
        // Handle every whole frame buffered.
        let mut handled = 0;
        loop {
            match frame::decode(&buffer[start..], routes.body_max_bytes) {
                Ok(Some((frame, used))) => {
                    start += used;
                    link.in_bytes.set(link.in_bytes.get() + used as u64);
                    if let Err(reason) = handle_frame(shard, link, frame) {
                        log::warn!(target: "tern::cluster", "shard {}: route to {} ({}): {reason}; closing", shard.shard_index(), link.peer.server_name, link.peer.address);
                        link.close(LinkClose::Protocol);
                        return;
                    }
                    handled += 1;
                    if handled % READ_BATCH_FRAMES == 0 {
                        shard.frames_handled().await;
                        futures_lite::future::yield_now().await;
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    log::warn!(target: "tern::cluster", "shard {}: route to {} ({}): {error}; closing", shard.shard_index(), link.peer.server_name, link.peer.address);
                    link.close(LinkClose::Protocol);
                    return;
                }
            }
        }
        if handled > 0 {
            shard.frames_handled().await;
        }
        if !link.is_open() {
            return;
        }
        // Compact, then make room for the rest of the current frame.
        buffer.drain(..start);
        start = 0;
        let needed = frame::frame_bytes(&buffer).unwrap_or(frame::FRAME_HEADER_BYTES);
        let end = buffer.len();
        let target = needed
            .max(end + READ_BUFFER_BYTES / 4)
            .max(READ_BUFFER_BYTES);
        buffer.resize(target, 0);
        let read = futures_lite::future::or(
            async { Some(stream.read(&mut buffer[end..]).await) },
            async {
                link.closed().await;
                None
            },
        )
        .await;
        match read {
            None => {
                buffer.truncate(end);
                return;
            }
            Some(Ok(0)) => {
                buffer.truncate(end);
                link.close(LinkClose::PeerClosed);
                return;
            }
            Some(Ok(count)) => {
                buffer.truncate(end + count);
                link.last_in.set(Instant::now());
                // Act on this input only after what this node's other
                // shards sent before it (their clients' subscriptions): a
                // reply from another node to an inbox subscribed on
                // another shard here finds it (as a client's input does).
                shard.catch_up_with_peers().await;
            }
            Some(Err(_)) => {
                buffer.truncate(end);
                link.close(LinkClose::ReadError);
                return;
            }
        }
        if buffer.capacity() > 2 * routes.body_max_bytes.max(READ_BUFFER_BYTES)
            && buffer.len() < READ_BUFFER_BYTES
        {
            buffer.shrink_to(READ_BUFFER_BYTES);
        }
    }
}

/// A peer's protocol error: the route is closed with it.
#[derive(Debug)]
enum PeerError {
    /// An interest update the router refused.
    Interest {
        subject: Vec<u8>,
        error: NodeInterestError,
    },
    /// A Raft frame not addressed from this link's node to this one.
    MisaddressedRaft {
        from: u64,
        to: u64,
        peer: u64,
        own: u64,
    },
    UndecodableRaft {
        group: u64,
        error: tern_raft::wire::DecodeError,
    },
    /// A forwarded request outside `$JS.API.`.
    NotAnApiSubject(Vec<u8>),
    SecondHello,
    Refused(String),
}

impl std::fmt::Display for PeerError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerError::Interest {
                subject,
                error: NodeInterestError::InvalidSubject,
            } => write!(
                formatter,
                "invalid subject {:?} in an interest update",
                String::from_utf8_lossy(subject)
            ),
            PeerError::Interest {
                error: NodeInterestError::TooManyKeys,
                ..
            } => write!(formatter, "more than {NODE_KEYS_MAX} subjects of interest"),
            PeerError::MisaddressedRaft {
                from,
                to,
                peer,
                own,
            } => write!(
                formatter,
                "Raft frame from node {from:#x} to {to:#x} on the link from {peer:#x} to {own:#x}"
            ),
            PeerError::UndecodableRaft { group, error } => write!(
                formatter,
                "undecodable Raft message for group {group:#x}: {error:?}"
            ),
            PeerError::NotAnApiSubject(subject) => write!(
                formatter,
                "forwarded request on {:?} is not a JetStream API subject",
                String::from_utf8_lossy(subject)
            ),
            PeerError::SecondHello => formatter.write_str("a second hello"),
            PeerError::Refused(reason) => write!(formatter, "refused: {reason}"),
        }
    }
}

/// Acts on one frame from a peer; `Err` is the peer's protocol error.
fn handle_frame<H: RouteHost>(
    shard: &Rc<H>,
    link: &Rc<RouteLink>,
    frame: Frame<'_>,
) -> Result<(), PeerError> {
    match frame {
        Frame::Message(message) => {
            link.in_msgs.set(link.in_msgs.get() + 1);
            shard.deliver(&message);
        }
        Frame::Interest {
            subject,
            queue,
            weight,
        } => {
            if !link.is_open() {
                // Replaced (its interest forgotten) or closing.
                return Ok(());
            }
            shard
                .apply_interest(link.peer.node_id, subject, queue, weight)
                .map_err(|error| PeerError::Interest {
                    subject: subject.to_vec(),
                    error,
                })?;
        }
        Frame::Routes(urls) => {
            for url in urls {
                learn(shard, observed(&url, link.peer.address.ip()));
            }
        }
        Frame::Ping => {
            link.send_pong();
        }
        Frame::Pong => {}
        Frame::Raft { from, to, messages } => {
            let own = shard.routes().node_id();
            if from != link.peer.node_id || to != own {
                return Err(PeerError::MisaddressedRaft {
                    from,
                    to,
                    peer: link.peer.node_id,
                    own,
                });
            }
            if !shard.has_jetstream() {
                return Ok(());
            }
            let limits = tern_raft::wire::DecodeLimits::default();
            for (group, bytes) in messages {
                let bytes = bytes::Bytes::copy_from_slice(bytes);
                let message = tern_raft::wire::decode(&bytes, &limits)
                    .map_err(|error| PeerError::UndecodableRaft { group, error })?;
                shard.raft_message(group, tern_raft::Envelope { from, to, message });
            }
        }
        Frame::Api {
            hops,
            subject,
            reply,
            payload,
        } => {
            if !subject.starts_with(b"$JS.API.") {
                return Err(PeerError::NotAnApiSubject(subject.to_vec()));
            }
            shard.forwarded_api(hops, subject, reply, payload);
        }
        Frame::Hello(_) => return Err(PeerError::SecondHello),
        Frame::Refuse(reason) => return Err(PeerError::Refused(reason)),
    }
    Ok(())
}

async fn write_loop<H: RouteHost>(shard: Rc<H>, link: Rc<RouteLink>, mut stream: SharedStream) {
    let write_deadline = shard.write_deadline();
    let mut spare = Vec::with_capacity(4096);
    while link.next_outbound(&mut spare).await.is_some() {
        // A link closed meanwhile (over its limit, a protocol error, a
        // duplicate) stops waiting on a write the peer may never take.
        let write = async { Some(send(&mut stream, &spare).await) };
        let closed = async {
            link.closed().await;
            None
        };
        let written =
            tern_shard::timer::timeout(write_deadline, futures_lite::future::or(write, closed))
                .await;
        link.wrote();
        let written = match written {
            Ok(None) => break,
            Ok(Some(result)) => Ok(result),
            Err(elapsed) => Err(elapsed),
        };
        match written {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                link.close(LinkClose::WriteError);
                break;
            }
            Err(_) => {
                log::warn!(
                    target: "tern::cluster",
                    "shard {}: route to {} ({}): a write blocked for {:?}: the peer is not reading; closing",
                    shard.shard_index(), link.peer.server_name, link.peer.address, write_deadline
                );
                link.close(LinkClose::SlowPeer);
                break;
            }
        }
        if spare.capacity() > 4 << 20 {
            spare = Vec::with_capacity(4096);
        }
    }
}

async fn ping_loop(link: Rc<RouteLink>) {
    while link.is_open() {
        tern_shard::timer::sleep(PING_INTERVAL).await;
        if link.last_in.get().elapsed() > STALE_AFTER {
            log::warn!(target: "tern::cluster", "route to {} ({}): nothing heard for {:?}; closing", link.peer.server_name, link.peer.address, STALE_AFTER);
            link.close(LinkClose::Stale);
            return;
        }
        link.send_ping();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_hosts_become_the_observed_address() {
        let seen: IpAddr = "10.0.0.7".parse().unwrap();
        assert_eq!(observed("0.0.0.0:6222", seen), "10.0.0.7:6222");
        assert_eq!(observed("[::]:6222", seen), "10.0.0.7:6222");
        assert_eq!(observed("10.0.0.2:6222", seen), "10.0.0.2:6222");
        assert_eq!(observed("node-2:6222", seen), "node-2:6222");
    }
}
