//! One shard of the node: its connections, its routing (the interest index
//! and the publish path: [`crate::routing::shard_routing`]), its JetStream,
//! its links to the other shards and its routes to the other nodes; the
//! messages between shards ([`message`]) and monitoring reports. Nothing
//! here is shared with other threads except the immutable [`Shared`] and one
//! connection counter used only when connections open and close.

use std::cell::{Cell, OnceCell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use glommio::net::{TcpListener, TcpStream};
use rustc_hash::FxHashMap;
use tern_shard::mesh::RingProgress;
use tern_shard::spin::Spinner;
use tern_shard::{Shutdown, Waiters};

use crate::auth::Authorization;
use crate::cluster::routes::Routes;
use crate::config::Config;
use crate::jetstream::{JetStream, ShardServices};
use crate::mesh::outbox::PeerLinks;
use crate::mesh::StartBarrier;
use crate::nats::conn::{self, Client, CloseReason};
use crate::proto::errors;
use crate::proto::info::{ServerInfo, NATS_COMPATIBLE_VERSION, TERN_VERSION};
use crate::routing::interest::Router;
use crate::routing::shard_routing::{RoutingParts, ShardRouting, STALL_TOTAL_MAX};
use crate::stats::{self, ConnectionInfo, ReportKind, RouteInfo, ShardCounters, ShardReport};
use crate::timestamp::{go_duration, Civil};
use message::ShardMessage;

mod hosts;
pub mod message;
pub mod reload;

/// How long monitoring waits for the other shards' reports.
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(2);
/// Forwarded messages a receive loop delivers before letting other tasks run.
pub const RECEIVE_BATCH_MESSAGES: usize = 256;

/// How long shutdown waits for connections to flush and close.
pub const SHUTDOWN_DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

/// Immutable server-wide state, plus the connection count (touched only when
/// a connection opens or closes, never on the publish path).
pub struct Shared {
    pub config: Config,
    pub server_id: String,
    pub server_name: String,
    /// This node's Raft id in a cluster (`jetstream::identity`: its
    /// store's, with JetStream; else its name's hash).
    pub node_id: u64,
    pub started: SystemTime,
    pub client_port: u16,
    /// Mutual TLS between nodes (`[cluster.tls]`); read-only.
    pub route_tls: Option<crate::tls::RouteTls>,
    pub connections: AtomicUsize,
    /// Bytes stored by each shard's streams (`max_file_store`, `max_memory_store`).
    pub storage_usage: Arc<crate::jetstream::usage::StorageUsage>,
    /// TLS on the client port at start (`None`: plaintext); each shard
    /// holds the current one (`Shard::tls`, swapped by a reload).
    pub tls_at_start: Option<crate::tls::TlsServer>,
}

struct PendingReport {
    expected: usize,
    reports: RefCell<Vec<ShardReport>>,
    arrived: Waiters,
}

pub struct Shard {
    pub index: usize,
    pub shard_count: usize,
    pub cpu: usize,
    pub config: Config,
    pub shared: Arc<Shared>,
    /// The interest index and the publish path.
    pub routing: Rc<ShardRouting>,
    pub links: Rc<PeerLinks<ShardMessage>>,
    pub counters: Rc<ShardCounters>,
    pub shutdown: Shutdown,
    clients: RefCell<FxHashMap<u64, Rc<Client>>>,
    next_client_sequence: Cell<u64>,
    pending_reports: RefCell<FxHashMap<u64, Rc<PendingReport>>>,
    next_report_id: Cell<u64>,
    /// How far this shard has handled each peer's ring.
    ring_progress: Vec<(usize, Rc<RingProgress>)>,
    /// Present when JetStream is enabled (set once at start).
    pub jetstream: OnceCell<Rc<JetStream>>,
    /// Peers that said they finished starting.
    pub started: Rc<StartBarrier>,
    /// This shard's routes to the other nodes (clustered only).
    pub routes: Option<Rc<Routes>>,
    /// Who may connect (one `Arc` per shard, swapped by a reload, which
    /// then re-checks the connections: `reload::apply`).
    authorization: RefCell<Arc<Authorization>>,
    /// TLS for new connections (a reload swaps it; `None`: plaintext).
    tls: RefCell<Option<crate::tls::TlsServer>>,
    /// When the configuration was last loaded (start or reload; `/varz`
    /// `config_load_time`).
    config_load_time: Cell<SystemTime>,
}

/// Which shard this is: its index among `shard_count` shards, and the CPU
/// it runs on.
#[derive(Debug, Clone, Copy)]
pub struct ShardPosition {
    pub index: usize,
    pub shard_count: usize,
    pub cpu: usize,
}

/// How a shard reaches the others: the rings to the other shards of this
/// node (and how far it has handled each peer's), and its routes to the
/// other nodes (clustered only).
pub struct ShardLinks {
    pub peers: Rc<PeerLinks<ShardMessage>>,
    pub ring_progress: Vec<(usize, Rc<RingProgress>)>,
    pub routes: Option<Routes>,
}

impl Shard {
    pub fn new(
        position: ShardPosition,
        shared: Arc<Shared>,
        links: ShardLinks,
        shutdown: Shutdown,
        seed: u64,
    ) -> Rc<Shard> {
        let ShardPosition {
            index,
            shard_count,
            cpu,
        } = position;
        let ShardLinks {
            peers: links,
            ring_progress,
            routes,
        } = links;
        let config_authorization = shared.config.authorization.clone();
        let tls = shared.tls_at_start.clone();
        let started = shared.started;
        let spinner = Spinner::new(
            shared.config.spin_awaiting_reply,
            ring_progress.iter().map(|(_, ring)| ring.clone()).collect(),
        );
        let routes = routes.map(Rc::new);
        let counters = Rc::new(ShardCounters::default());
        let routing = Rc::new(ShardRouting::new(RoutingParts {
            router: Router::new(index, shard_count, seed),
            peers: links.clone(),
            counters: counters.clone(),
            routes: routes.clone(),
            spinner,
        }));
        Rc::new(Shard {
            index,
            shard_count,
            cpu,
            config: shared.config.clone(),
            shared,
            routing,
            links,
            counters,
            shutdown,
            clients: RefCell::new(FxHashMap::default()),
            next_client_sequence: Cell::new(0),
            pending_reports: RefCell::new(FxHashMap::default()),
            next_report_id: Cell::new(0),
            ring_progress,
            jetstream: OnceCell::new(),
            started: Rc::new(StartBarrier::new(shard_count)),
            routes,
            authorization: RefCell::new(config_authorization),
            tls: RefCell::new(tls),
            config_load_time: Cell::new(started),
        })
    }

    /// What JetStream on this shard uses of it.
    pub fn jetstream_services(&self) -> ShardServices {
        ShardServices {
            index: self.index,
            shard_count: self.shard_count,
            server_name: self.shared.server_name.clone(),
            store_dir: self.config.store_dir.clone(),
            limits: self.config.limits.clone(),
            storage_usage: self.shared.storage_usage.clone(),
            routing: self.routing.clone(),
            routes: self.routes.clone(),
            peers: self.links.clone(),
            started: self.started.clone(),
        }
    }

    /// Client ids are unique across shards: shard `i` of `n` hands out `i+1, i+1+n, …`.
    fn next_client_id(&self) -> u64 {
        let sequence = self.next_client_sequence.get();
        self.next_client_sequence.set(sequence + 1);
        sequence * self.shard_count as u64 + self.index as u64 + 1
    }

    /// The authentication settings new CONNECTs are checked against.
    pub fn authorization(&self) -> Arc<Authorization> {
        self.authorization.borrow().clone()
    }

    /// TLS for a new connection (`None`: plaintext).
    pub fn tls(&self) -> Option<crate::tls::TlsServer> {
        self.tls.borrow().clone()
    }

    /// When the configuration was last loaded.
    pub fn config_load_time(&self) -> SystemTime {
        self.config_load_time.get()
    }

    pub fn server_info(&self, client: &Client) -> ServerInfo {
        ServerInfo {
            server_id: self.shared.server_id.clone(),
            server_name: self.shared.server_name.clone(),
            version: NATS_COMPATIBLE_VERSION,
            proto: 1,
            git_commit: None,
            go: format!("tern-{TERN_VERSION}"),
            host: self.config.host.clone(),
            port: self.shared.client_port,
            headers: true,
            auth_required: self.authorization.borrow().required(),
            tls_required: self.tls.borrow().is_some(),
            tls_verify: self.tls.borrow().as_ref().is_some_and(|tls| tls.verify),
            max_payload: self.config.limits.max_payload_bytes,
            jetstream: self.config.jetstream.is_some(),
            client_id: client.id,
            client_ip: client.address.ip().to_string(),
            nonce: String::new(),
            cluster: self
                .config
                .cluster
                .as_ref()
                .map(|cluster| cluster.name.clone()),
            connect_urls: self.connect_urls(client),
            connect_info: false,
            remote_account: String::new(),
            ldm: false,
            api_lvl: 0,
            tern_version: TERN_VERSION,
            tern_shard: self.index,
        }
    }

    // ----- connections -----------------------------------------------------

    /// Accepts connections until shutdown.
    pub async fn accept_loop(self: Rc<Self>, listener: TcpListener) {
        loop {
            let accepted =
                futures_lite::future::or(async { Some(listener.accept().await) }, async {
                    self.shutdown.wait().await;
                    None
                })
                .await;
            match accepted {
                None => break,
                Some(Ok(stream)) => self.start_client(stream),
                Some(Err(error)) => {
                    log::warn!(target: "tern::shard", "shard {}: accept failed: {error}", self.index);
                    tern_shard::timer::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    fn start_client(self: &Rc<Self>, stream: TcpStream) {
        let address = stream
            .peer_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let id = self.next_client_id();
        let client = Rc::new(Client::new(
            id,
            address,
            self.config.limits.max_pending_bytes,
        ));
        client.set_local_address(stream.local_addr().ok());
        {
            let authorization = self.authorization.borrow();
            if authorization.required() {
                let nonce = authorization
                    .nonce_required()
                    .then(crate::auth::nkey::generate_nonce);
                client.expect_authentication(nonce);
            }
        }
        let open = self.shared.connections.fetch_add(1, Ordering::Relaxed) + 1;
        if open > self.config.limits.max_connections {
            self.shared.connections.fetch_sub(1, Ordering::Relaxed);
            log::warn!(target: "tern::client", "{address} - cid:{id} - maximum connections exceeded");
            let info = self.server_info(&client).to_line();
            glommio::spawn_local(conn::reject(
                stream,
                info,
                errors::MAXIMUM_CONNECTIONS_EXCEEDED,
            ))
            .detach();
            return;
        }
        stats::add(&self.counters.connections, 1);
        stats::add(&self.counters.total_connections, 1);
        self.clients.borrow_mut().insert(id, client.clone());
        log::debug!(target: "tern::client", "{address} - cid:{id} - client connection created on shard {}", self.index);
        glommio::spawn_local(conn::serve(self.clone(), client, stream)).detach();
    }

    /// Forgets a closed client: its subscriptions and its slot.
    pub fn remove_client(&self, client: &Client) {
        assert!(!client.is_open());
        conn::unsubscribe_all(self, client);
        if self.clients.borrow_mut().remove(&client.id).is_some() {
            stats::subtract(&self.counters.connections, 1);
            self.shared.connections.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Closes every connection and waits (bounded) for them to finish.
    pub async fn drain_clients(&self) {
        let clients: Vec<Rc<Client>> = self.clients.borrow().values().cloned().collect();
        for client in clients {
            client.close(CloseReason::ServerShutdown);
        }
        let deadline = std::time::Instant::now() + SHUTDOWN_DRAIN_TIMEOUT;
        while !self.clients.borrow().is_empty() && std::time::Instant::now() < deadline {
            tern_shard::timer::sleep(Duration::from_millis(5)).await;
        }
    }

    // ----- interest ----------------------------------------------------------

    // ----- the cluster ---------------------------------------------------------

    /// Client addresses of the cluster's nodes for INFO `connect_urls`:
    /// this node's and every node this shard has a route to (nats-server
    /// lists them once a route exists). Listening on every address
    /// (`0.0.0.0`), this node is named by the address `client` reached.
    fn connect_urls(&self, client: &Client) -> Vec<String> {
        let Some(routes) = &self.routes else {
            return Vec::new();
        };
        let others = routes.connect_urls();
        if others.is_empty() {
            return Vec::new();
        }
        let unspecified = self
            .config
            .host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        let own = match client.local_address() {
            Some(local) if unspecified => {
                SocketAddr::new(local.ip(), self.shared.client_port).to_string()
            }
            _ => crate::config::HostPort {
                host: self.config.host.clone(),
                port: self.shared.client_port,
            }
            .to_string(),
        };
        let mut urls = vec![own];
        urls.extend(others);
        urls
    }

    /// A route came or went: clients that take async INFO learn the new
    /// `connect_urls`.
    pub fn cluster_changed(&self) {
        let clients: Vec<Rc<Client>> = self.clients.borrow().values().cloned().collect();
        for client in clients {
            client.send_info_update(self);
        }
    }
    // ----- the publish path --------------------------------------------------

    /// Tells the peers this shard started, and waits (bounded) until they all have.
    pub async fn announce_started(&self, timeout: Duration) {
        self.links.broadcast(|| ShardMessage::Started);
        if tern_shard::timer::timeout(timeout, self.started.wait())
            .await
            .is_err()
        {
            log::warn!(target: "tern::server", "shard {}: not every shard started within {timeout:?}", self.index);
        }
    }

    // ----- messages from other shards ------------------------------------------

    /// Handles whatever the other shards had already sent when this is called
    /// (bounded by [`STALL_TOTAL_MAX`]). A client's operations are acted on
    /// only after the interest changes other shards made before they were
    /// read, as if there were one subscription index: a SUB processed on
    /// shard A is seen by a PUB that shard B reads afterwards.
    pub async fn catch_up_with_peers(&self) {
        if self
            .ring_progress
            .iter()
            .all(|(_, progress)| progress.caught_up())
        {
            return;
        }
        let _ = tern_shard::timer::timeout(STALL_TOTAL_MAX, async {
            for (_, progress) in &self.ring_progress {
                progress.catch_up().await;
            }
        })
        .await;
    }

    /// Drains the ring from `peer` until it closes: flushes large backlogs
    /// inline, stalls (bounded) on consumers past their threshold, which backs
    /// the ring up to the publishing shard, and lets other tasks run every
    /// [`RECEIVE_BATCH_MESSAGES`].
    pub async fn receive_from(
        self: Rc<Self>,
        peer: usize,
        receiver: tern_shard::mesh::Receiver<ShardMessage>,
    ) {
        let mut since_yield = 0;
        while let Some(message) = receiver.recv().await {
            self.handle_peer_message(peer, message);
            receiver.handled();
            self.routing.flush_inline();
            since_yield += 1;
            if self.routing.has_stalled() {
                self.routing.stall_for_consumers().await;
            }
            if since_yield >= RECEIVE_BATCH_MESSAGES {
                since_yield = 0;
                futures_lite::future::yield_now().await;
            }
        }
    }

    fn handle_peer_message(self: &Rc<Self>, peer: usize, message: ShardMessage) {
        match message {
            ShardMessage::Routing(message) => {
                for client in self.routing.handle_message(peer, message) {
                    client.send_pong(&**self);
                }
            }
            ShardMessage::ReportRequest { id, kind } => {
                let report = Box::new(self.report(kind));
                self.links.send(peer, ShardMessage::Report { id, report });
            }
            ShardMessage::Started => self.started.peer_started(),
            ShardMessage::JetStream(message) => match self.jetstream.get() {
                Some(jetstream) => jetstream.handle_shard_message(message),
                None => {
                    log::error!(target: "tern::jetstream", "shard {}: JetStream message without JetStream: {message:?}", self.index)
                }
            },
            ShardMessage::Reload(settings) => reload::apply(self, &settings),
            ShardMessage::Report { id, report } => {
                let pending = self.pending_reports.borrow().get(&id).cloned();
                if let Some(pending) = pending {
                    pending.reports.borrow_mut().push(*report);
                    pending.arrived.wake_all();
                }
            }
        }
    }

    // ----- monitoring --------------------------------------------------------

    /// This shard's counters (and connections, if asked).
    pub fn report(&self, kind: ReportKind) -> ShardReport {
        let mut report = ShardReport::from_counters(self.index, self.cpu, &self.counters);
        {
            let router = self.routing.router.borrow();
            report.sublist = router.sublist().stats();
            report.sublist_entries = router.sublist().count() as u64;
            report.sublist_cache_entries = router.sublist().cache_len() as u64;
        }
        if let Some(routes) = &self.routes {
            report.raft_dropped = routes.raft_dropped();
            report.route_nodes = routes
                .known_nodes()
                .into_iter()
                .map(|(_, name, open)| (name, open))
                .collect();
            for link in routes.links() {
                report.routes.push(RouteInfo {
                    rid: link.id * self.shard_count as u64 + self.index as u64,
                    remote_id: link.peer.server_id.clone(),
                    remote_name: link.peer.server_name.clone(),
                    did_solicit: link.peer.did_solicit,
                    ip: link.peer.address.ip().to_string(),
                    port: link.peer.address.port(),
                    start: Civil::from_system_time(link.started).rfc3339(),
                    pending_size: link.pending_bytes() as u64,
                    in_msgs: link.in_msgs.get(),
                    out_msgs: link.out_msgs.get(),
                    in_bytes: link.in_bytes.get(),
                    out_bytes: link.out_bytes.get(),
                    shard: self.index,
                });
            }
        }
        if let ReportKind::Connections { subscriptions } = kind {
            let now = std::time::Instant::now();
            let wall_now = SystemTime::now();
            for client in self.clients.borrow().values() {
                let options = client.options();
                let last_activity =
                    wall_now - now.saturating_duration_since(client.last_activity());
                report.connection_list.push(ConnectionInfo {
                    cid: client.id,
                    kind: "Client",
                    connection_type: "nats",
                    ip: client.address.ip().to_string(),
                    port: client.address.port(),
                    start: Civil::from_system_time(client.started).rfc3339(),
                    last_activity: Civil::from_system_time(last_activity).rfc3339(),
                    rtt: client
                        .rtt()
                        .map(|rtt| format!("{rtt:?}"))
                        .unwrap_or_default(),
                    uptime: go_duration(now.saturating_duration_since(client.started_instant())),
                    idle: go_duration(now.saturating_duration_since(client.last_activity())),
                    pending_bytes: client.pending_bytes() as u64,
                    in_msgs: client.in_msgs.get(),
                    out_msgs: client.out_msgs.get(),
                    in_bytes: client.in_bytes.get(),
                    out_bytes: client.out_bytes.get(),
                    subscriptions: client.subscription_count() as u64,
                    name: options.name,
                    lang: options.lang,
                    version: options.version,
                    subscriptions_list: subscriptions.then(|| client.subscription_subjects()),
                    shard: self.index,
                    cpu: self.cpu,
                });
            }
        }
        report
    }

    /// Every shard's report, in shard order (missing ones if a shard does
    /// not answer within [`REPORT_TIMEOUT`]).
    pub async fn gather_reports(&self, kind: ReportKind) -> Vec<ShardReport> {
        let id = self.next_report_id.get();
        self.next_report_id.set(id + 1);
        let pending = Rc::new(PendingReport {
            expected: self.shard_count - 1,
            reports: RefCell::new(Vec::with_capacity(self.shard_count)),
            arrived: Waiters::new(),
        });
        self.pending_reports
            .borrow_mut()
            .insert(id, pending.clone());
        self.links
            .broadcast(|| ShardMessage::ReportRequest { id, kind });
        let all_arrived = pending
            .arrived
            .wait_until(|| pending.reports.borrow().len() >= pending.expected);
        let _ = tern_shard::timer::timeout(REPORT_TIMEOUT, all_arrived).await;
        self.pending_reports.borrow_mut().remove(&id);
        let mut reports = std::mem::take(&mut *pending.reports.borrow_mut());
        reports.push(self.report(kind));
        reports.sort_by_key(|report| report.shard);
        reports
    }
}
