//! One shard of the broker: its connections, its router, its links to the
//! other shards, and the publish path.
//!
//! Publish path (core NATS): the connection's read task parses a PUB and calls
//! [`Shard::route_publish`], which matches the subject in this shard's
//! sublist (cached), appends the message to the outbound buffer of every local
//! subscriber, picks one member per queue group (weighted across shards), and
//! forwards the message once to each other shard with interest. The receiving
//! shard delivers to its own subscribers ([`Shard::deliver_routed`]). Nothing
//! here is shared with other threads except the immutable [`Shared`] and one
//! connection counter used only when connections open and close.

use std::cell::{Cell, OnceCell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use glommio::net::{TcpListener, TcpStream};
use rustc_hash::FxHashMap;
use tern_shard::mesh::RingProgress;
use tern_shard::spin::Spinner;
use tern_shard::{Shutdown, Waiters};

use crate::auth::Authorization;
use crate::cluster::frame::RoutedFrame;
use crate::cluster::link::RouteLink;
use crate::cluster::routes::Routes;
use crate::config::Config;
use crate::internal::InternalSubscription;
use crate::jetstream::JetStream;
use crate::mesh::outbox::PeerLinks;
use crate::nats::conn::{self, Client, CloseReason, Subscription};
use crate::proto::encode::{self, Delivery};
use crate::proto::errors;
use crate::proto::info::{ServerInfo, NATS_COMPATIBLE_VERSION, TERN_VERSION};
use crate::proto::parser::Publish;
use crate::routing::interest::{Router, Target};
use crate::routing::message::RoutingMessage::{self, Deliver};
use crate::routing::message::{InterestUpdate, RoutedMessage};
use crate::routing::sublist::QueueMatches;
use crate::stats::{self, ConnectionInfo, ReportKind, RouteInfo, ShardCounters, ShardReport};
use crate::timestamp::{go_duration, Civil};
use message::ShardMessage;

pub mod message;

/// How long monitoring waits for the other shards' reports.
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest a producer (a client's read loop, or a peer's receive loop) waits
/// per batch for slow consumers to drain; nats-server: 2 to 5 ms per
/// consumer, 10 ms in total per read.
pub const STALL_PER_CONSUMER_MAX: Duration = Duration::from_millis(5);
pub const STALL_TOTAL_MAX: Duration = Duration::from_millis(10);
/// Forwarded messages a receive loop delivers before letting other tasks run.
pub const RECEIVE_BATCH_MESSAGES: usize = 256;

/// Ack subjects (`$JS.ACK.<stream>.<consumer>.…`) are matched by their
/// first four tokens (see `Sublist::matches_by_prefix`).
const ACK_SUBJECT_PREFIX: &[u8] = b"$JS.ACK.";
const ACK_SUBJECT_ROUTING_TOKENS: usize = 4;

/// Whether a subject's match result is worth caching: not for server
/// replies, which go to inboxes used once and would only churn the cache.
/// A delivery's inbox is used for a whole pull batch (or for ever, for a
/// push consumer), so it is cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caching {
    Cached,
    Transient,
}

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
    pub storage_usage: crate::jetstream::usage::StorageUsage,
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
    pub router: RefCell<Router>,
    pub links: Rc<PeerLinks<ShardMessage>>,
    pub counters: ShardCounters,
    pub shutdown: Shutdown,
    clients: RefCell<FxHashMap<u64, Rc<Client>>>,
    next_client_sequence: Cell<u64>,
    pending_reports: RefCell<FxHashMap<u64, Rc<PendingReport>>>,
    next_report_id: Cell<u64>,
    /// Clients that passed their stall threshold since the last stall check.
    stalled: RefCell<Vec<Stalled>>,
    /// Clients with a large backlog to write at the end of the current batch.
    flush_candidates: RefCell<Vec<Rc<Client>>>,
    /// How far this shard has handled each peer's ring.
    ring_progress: Vec<(usize, Rc<RingProgress>)>,
    /// Keeps the shard awake while a peer's reply to a forwarded request is due.
    pub spinner: Rc<Spinner>,
    /// Present when JetStream is enabled (set once at start).
    pub jetstream: OnceCell<Rc<JetStream>>,
    /// Woken when a peer acknowledges interest updates.
    interest_applied: Waiters,
    /// Woken when a client's or a peer's interest changes (push consumers
    /// waiting for a subscriber).
    pub interest_changed: Waiters,
    /// Peers that said they finished starting.
    started_peers: Cell<usize>,
    started_waiters: Waiters,
    /// This shard's routes to the other nodes (clustered only).
    pub routes: Option<Routes>,
    /// Who may connect (one `Arc` per shard, swapped by a reload, which
    /// then re-checks the connections: `apply_reload`).
    authorization: RefCell<Arc<Authorization>>,
    /// TLS for new connections (a reload swaps it; `None`: plaintext).
    tls: RefCell<Option<crate::tls::TlsServer>>,
    /// When the configuration was last loaded (start or reload; `/varz`
    /// `config_load_time`).
    config_load_time: Cell<SystemTime>,
}

/// Where a queue group's message goes.
enum QueueChoice {
    Delivered,
    Forward(usize),
    ForwardToNode(Rc<RouteLink>),
    Nobody,
}

/// A consumer past its stall threshold: a client, or another node's route.
enum Stalled {
    Client(Rc<Client>),
    Route(Rc<RouteLink>),
}

/// Where a message came from, which decides where it may go next.
#[derive(Clone, Copy)]
enum Origin<'a> {
    /// A client or the server on this node: everywhere.
    ThisNode,
    /// Another node's route: this node's clients only (never back to a
    /// node, never to JetStream, which is per node), and for `queues` only
    /// those groups the sender chose this node for.
    OtherNode {
        queues: &'a [&'a [u8]],
        queues_only: bool,
    },
}

/// One message on the publish path, borrowed from wherever it was read:
/// interest is matched against `routing`, subscribers see it as `subject`
/// (the two differ only for a JetStream delivery, routed to its inbox).
#[derive(Clone, Copy)]
struct Routed<'a> {
    routing: &'a [u8],
    subject: &'a [u8],
    reply: Option<&'a [u8]>,
    header_bytes: usize,
    message: &'a [u8],
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

/// Which members a queue group's pick may land on.
#[derive(Clone, Copy)]
struct QueueScope {
    shards: bool,
    nodes: bool,
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
        Rc::new(Shard {
            spinner,
            index,
            shard_count,
            cpu,
            config: shared.config.clone(),
            shared,
            router: RefCell::new(Router::new(index, shard_count, seed)),
            links,
            counters: ShardCounters::default(),
            shutdown,
            clients: RefCell::new(FxHashMap::default()),
            next_client_sequence: Cell::new(0),
            pending_reports: RefCell::new(FxHashMap::default()),
            next_report_id: Cell::new(0),
            stalled: RefCell::new(Vec::new()),
            flush_candidates: RefCell::new(Vec::new()),
            ring_progress,
            jetstream: OnceCell::new(),
            interest_applied: Waiters::new(),
            interest_changed: Waiters::new(),
            started_peers: Cell::new(0),
            started_waiters: Waiters::new(),
            routes,
            authorization: RefCell::new(config_authorization),
            tls: RefCell::new(tls),
            config_load_time: Cell::new(started),
        })
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

    /// Swaps in what a reload built (on every shard, shard 0 included):
    /// new connections use it at once; with new authorization settings,
    /// each open connection is checked again (`conn::reauthorize`).
    pub fn apply_reload(self: &Rc<Self>, settings: &crate::reload::Settings) {
        *self.tls.borrow_mut() = settings.tls.clone();
        self.config_load_time.set(SystemTime::now());
        let previous = self.authorization.replace(settings.authorization.clone());
        if !settings.authorization_changed {
            // Unchanged settings travel as the very `Arc` that runs.
            assert!(Arc::ptr_eq(&previous, &settings.authorization));
            return;
        }
        let clients: Vec<Rc<Client>> = self.clients.borrow().values().cloned().collect();
        for client in &clients {
            conn::reauthorize(self, client, &previous, &settings.authorization);
        }
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

    /// Changes whenever interest on this shard's sublist changes.
    pub fn interest_generation(&self) -> u64 {
        self.router.borrow().generation()
    }

    /// Whether a message published to `subject` here would reach anyone.
    pub fn has_interest(&self, subject: &[u8]) -> bool {
        self.router.borrow_mut().has_interest(subject)
    }

    pub fn broadcast_interest(&self, update: InterestUpdate) {
        self.links
            .broadcast(|| RoutingMessage::Interest(update.clone()).into());
    }

    /// Tells the other nodes (over this shard's routes) how this node's
    /// client interest changed. Called after every change of it.
    pub fn export_interest(&self) {
        let exports = self.router.borrow_mut().take_exports();
        let Some(routes) = &self.routes else {
            return;
        };
        if exports.is_empty() {
            return;
        }
        let links = routes.links();
        for export in exports {
            for link in &links {
                link.send_interest(&export.subject, export.queue.as_ref(), export.weight);
            }
        }
    }

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

    /// Routes one published message from a local client.
    pub fn route_publish(&self, publisher: &Rc<Client>, publish: &Publish<'_>) {
        self.route(
            Origin::ThisNode,
            Some(publisher),
            Caching::Cached,
            Routed {
                routing: publish.subject,
                subject: publish.subject,
                reply: publish.reply,
                header_bytes: publish.header_bytes,
                message: publish.message,
            },
        );
    }

    /// Publishes a message the server itself produced (JetStream replies):
    /// routed like a client's publish, without a publisher.
    pub fn publish_internal(&self, subject: &[u8], header_bytes: usize, message: &[u8]) {
        self.route(
            Origin::ThisNode,
            None,
            Caching::Transient,
            Routed {
                routing: subject,
                subject,
                reply: None,
                header_bytes,
                message,
            },
        );
    }

    /// A JetStream delivery: routed to `inbox` (a pull request's reply or a
    /// push consumer's deliver subject), shown as the stored `subject` with
    /// the ack subject as its reply.
    pub fn publish_delivery(
        &self,
        inbox: &[u8],
        subject: &[u8],
        reply: Option<&[u8]>,
        header_bytes: usize,
        message: &[u8],
    ) {
        self.route(
            Origin::ThisNode,
            None,
            Caching::Cached,
            Routed {
                routing: inbox,
                subject,
                reply,
                header_bytes,
                message,
            },
        );
    }

    /// Delivers a message another node forwarded over this shard's route:
    /// to this node's clients, on this shard and the others.
    pub fn deliver_from_route(&self, message: &RoutedFrame<'_>) {
        self.route(
            Origin::OtherNode {
                queues: &message.queues,
                queues_only: message.queues_only,
            },
            None,
            Caching::Cached,
            Routed {
                routing: message.routing,
                subject: message.subject,
                reply: message.reply,
                header_bytes: message.header_bytes,
                message: message.message,
            },
        );
    }

    /// Routes by `routing` (interest is matched against it) and delivers as
    /// `subject` (the same but for JetStream deliveries).
    fn route(
        &self,
        origin: Origin<'_>,
        publisher: Option<&Rc<Client>>,
        caching: Caching,
        routed: Routed<'_>,
    ) {
        let Routed {
            routing,
            subject,
            reply,
            header_bytes,
            message,
        } = routed;
        let matches = if routing.starts_with(ACK_SUBJECT_PREFIX) {
            // Every ack subject is unique, but the subscriptions that tell
            // apart acks of one consumer almost never exist.
            self.router
                .borrow_mut()
                .matches_by_prefix(routing, ACK_SUBJECT_ROUTING_TOKENS)
        } else if caching == Caching::Transient {
            self.router.borrow_mut().matches_transient(routing)
        } else {
            self.router.borrow_mut().matches(routing)
        };
        let delivery = Delivery {
            subject,
            sid: &[],
            reply,
            header_bytes,
            message,
        };
        let publisher_id = publisher.map(|publisher| publisher.id);
        let (from_node, named_queues, queues_only) = match origin {
            Origin::ThisNode => (false, &[][..], false),
            Origin::OtherNode {
                queues,
                queues_only,
            } => (true, queues, queues_only),
        };
        let mut delivered = false;
        let mut forwards: Vec<(usize, Vec<Bytes>)> = Vec::new();
        let mut node_forwards: Vec<(Rc<RouteLink>, Vec<Bytes>)> = Vec::new();
        for target in matches.plain.iter().filter(|_| !queues_only) {
            match target {
                Target::Local(subscription) => {
                    delivered |= self.deliver_local(subscription, publisher_id, &delivery);
                }
                Target::Remote(interest) => add_forward(&mut forwards, interest.shard, None),
                Target::Internal(internal) => {
                    if !from_node || internal.cluster_wide() {
                        delivered |= self.deliver_internal(internal, &delivery, true);
                    }
                }
                Target::Node(interest) => {
                    if !from_node {
                        if let Some(link) = interest.node.link() {
                            add_node_forward(&mut node_forwards, &link, None);
                        }
                    }
                }
            }
        }
        let scope = QueueScope {
            shards: true,
            nodes: !from_node,
        };
        for group in &matches.queues {
            if from_node && !named_queues.contains(&&group.name[..]) {
                continue;
            }
            match self.choose_queue_member(group, publisher_id, &delivery, scope) {
                QueueChoice::Delivered => delivered = true,
                QueueChoice::Forward(shard) => add_forward(&mut forwards, shard, Some(&group.name)),
                QueueChoice::ForwardToNode(route) => {
                    add_node_forward(&mut node_forwards, &route, Some(&group.name))
                }
                QueueChoice::Nobody => {}
            }
        }
        if reply.is_some() && publisher.is_some() && !forwards.is_empty() {
            self.spinner.arm();
        }
        for (peer, queues) in forwards {
            let mut routed =
                RoutedMessage::routed_as(routing, subject, reply, header_bytes, message, queues);
            routed.from_node = from_node;
            self.links.send(peer, Deliver(routed).into());
            stats::add(&self.counters.forwarded_msgs, 1);
            delivered = true;
        }
        for (route, queues) in node_forwards {
            if route.send_message(routing, subject, reply, header_bytes, message, &queues) {
                delivered = true;
                if route.over_stall_threshold() && route.list_for_stall() {
                    self.stalled.borrow_mut().push(Stalled::Route(route));
                }
            }
        }
        if !delivered {
            log::debug!(
                target: "tern::interest",
                "shard {} cid {:?}: no interest in {:?}",
                self.index,
                publisher_id,
                String::from_utf8_lossy(subject)
            );
            if let (Some(reply), Some(publisher)) = (reply, publisher) {
                if publisher.no_responders() {
                    self.send_no_responders(publisher, subject, reply);
                }
            }
        }
    }

    /// Hands a message to the server's own subscriber (JetStream). A
    /// forwarded message (`local` false) reaches a sink on every shard
    /// (the API's) only where it was published.
    fn deliver_internal(
        &self,
        internal: &InternalSubscription,
        delivery: &Delivery<'_>,
        local: bool,
    ) -> bool {
        internal.sink.receive(delivery, local)
    }

    /// Waits (bounded) until every peer applied this shard's interest updates.
    pub async fn wait_interest_applied(&self, timeout: Duration) {
        let sequence = self.router.borrow().sequence();
        let applied = self
            .interest_applied
            .wait_until(|| self.router.borrow().all_applied(sequence));
        if tern_shard::timer::timeout(timeout, applied).await.is_err() {
            log::warn!(target: "tern::interest", "shard {}: peers did not apply interest {sequence} within {timeout:?}", self.index);
        }
    }

    /// Tells the peers this shard started, and waits (bounded) until they all have.
    pub async fn announce_started(&self, timeout: Duration) {
        self.links.broadcast(|| ShardMessage::Started);
        let all = self
            .started_waiters
            .wait_until(|| self.started_peers.get() + 1 >= self.shard_count);
        if tern_shard::timer::timeout(timeout, all).await.is_err() {
            log::warn!(target: "tern::server", "shard {}: not every shard started within {timeout:?}", self.index);
        }
    }

    /// Waits until every other shard said it started (its JetStream, if
    /// any, is there to take messages).
    pub async fn wait_all_started(&self) {
        self.started_waiters
            .wait_until(|| self.started_peers.get() + 1 >= self.shard_count)
            .await;
    }

    /// Delivers a message another shard forwarded here.
    pub fn deliver_routed(&self, routed: &RoutedMessage) {
        stats::add(&self.counters.received_forwarded_msgs, 1);
        let matches = self.router.borrow_mut().matches(routed.routing_subject());
        let delivery = Delivery {
            subject: routed.subject(),
            sid: &[],
            reply: routed.reply(),
            header_bytes: routed.header_bytes as usize,
            message: routed.message(),
        };
        for target in &matches.plain {
            match target {
                Target::Local(subscription) => {
                    self.deliver_local(subscription, None, &delivery);
                }
                Target::Internal(internal) => {
                    if !routed.from_node || internal.cluster_wide() {
                        self.deliver_internal(internal, &delivery, false);
                    }
                }
                Target::Remote(_) | Target::Node(_) => {}
            }
        }
        let local_only = QueueScope {
            shards: false,
            nodes: false,
        };
        for name in &routed.queues {
            if let Some(group) = matches.queues.iter().find(|group| group.name == name) {
                self.choose_queue_member(group, None, &delivery, local_only);
            }
        }
    }

    /// Picks one member of a queue group, weighted so every member across all
    /// shards and nodes is equally likely, and delivers to it if it is
    /// local. `scope` says whether other shards' and other nodes' members
    /// count (not for a message forwarded from them).
    fn choose_queue_member(
        &self,
        group: &QueueMatches<Target>,
        publisher: Option<u64>,
        delivery: &Delivery<'_>,
        scope: QueueScope,
    ) -> QueueChoice {
        let weight = |target: &Target| -> u64 {
            match target {
                Target::Local(subscription) => u64::from(!subscription.closed.get()),
                Target::Remote(interest) if scope.shards => u64::from(interest.weight.get()),
                Target::Node(interest) if scope.nodes && interest.node.link().is_some() => {
                    u64::from(interest.weight.get())
                }
                Target::Remote(_) | Target::Node(_) | Target::Internal(_) => 0,
            }
        };
        let total: u64 = group.members.iter().map(weight).sum();
        if total == 0 {
            return QueueChoice::Nobody;
        }
        let mut pick = self.router.borrow().random_below(total);
        let mut start = 0;
        for (index, member) in group.members.iter().enumerate() {
            let member_weight = weight(member);
            if pick < member_weight {
                start = index;
                break;
            }
            pick -= member_weight;
        }
        // From the pick onwards, the first member able to take it gets it.
        let count = group.members.len();
        for offset in 0..count {
            let member = &group.members[(start + offset) % count];
            if weight(member) == 0 {
                continue;
            }
            match member {
                Target::Local(subscription) => {
                    if self.deliver_local(subscription, publisher, delivery) {
                        return QueueChoice::Delivered;
                    }
                }
                Target::Remote(interest) => return QueueChoice::Forward(interest.shard),
                Target::Node(interest) => {
                    if let Some(link) = interest.node.link() {
                        return QueueChoice::ForwardToNode(link);
                    }
                }
                Target::Internal(_) => {}
            }
        }
        QueueChoice::Nobody
    }

    /// Delivers to one local subscription; false if it could not take it
    /// (closed, echo suppressed, auto-unsubscribe limit passed).
    fn deliver_local(
        &self,
        subscription: &Rc<Subscription>,
        publisher: Option<u64>,
        delivery: &Delivery<'_>,
    ) -> bool {
        if subscription.closed.get() {
            return false;
        }
        let Some(client) = subscription.client.upgrade() else {
            return false;
        };
        if !client.is_open() {
            return false;
        }
        if publisher == Some(client.id) && !client.echo() {
            return false;
        }
        if subscription.deny_filtered.get()
            && client.delivery_denied(delivery.subject, subscription.queue.as_deref())
        {
            return false;
        }
        let delivered = subscription.delivered.get() + 1;
        subscription.delivered.set(delivered);
        let max = subscription.max.get();
        if max > 0 && delivered > max {
            conn::unsubscribe(self, &client, subscription);
            return false;
        }
        client.queue_delivery(
            self,
            &Delivery {
                sid: &subscription.sid,
                ..*delivery
            },
        );
        if let Some(reply) = delivery.reply {
            client.grant_response(reply);
        }
        if client.pending_bytes() > conn::FLUSH_INLINE_BYTES && client.list_for_flush() {
            self.flush_candidates.borrow_mut().push(client.clone());
        }
        if client.over_stall_threshold() && client.list_for_stall() {
            self.stalled
                .borrow_mut()
                .push(Stalled::Client(client.clone()));
        }
        if max > 0 && delivered == max {
            conn::unsubscribe(self, &client, subscription);
        }
        true
    }

    /// The 503 status to a requester whose request matched no one, on its
    /// first plain subscription matching the reply subject.
    fn send_no_responders(&self, publisher: &Client, subject: &[u8], reply: &[u8]) {
        let matches = self.router.borrow_mut().matches(reply);
        let subscription = matches.plain.iter().find_map(|target| match target {
            Target::Local(subscription)
                if subscription.client_id == publisher.id && !subscription.closed.get() =>
            {
                Some(subscription.clone())
            }
            _ => None,
        });
        if let Some(subscription) = subscription {
            let mut bytes = Vec::with_capacity(64 + reply.len() + subject.len());
            encode::push_no_responders(&mut bytes, reply, &subscription.sid, subject);
            publisher.queue_bytes(&bytes);
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

    /// Writes out large backlogs queued during the current batch (see
    /// [`conn::FLUSH_INLINE_BYTES`]), so a producer that never waits does
    /// not starve its consumers' write tasks.
    pub fn flush_inline(&self) {
        if self.flush_candidates.borrow().is_empty() {
            return;
        }
        let candidates = std::mem::take(&mut *self.flush_candidates.borrow_mut());
        for client in candidates {
            client.write_now();
        }
    }

    /// Waits (bounded) for clients that passed 75 % of max_pending to drain,
    /// as nats-server stalls fast producers. What is still over afterwards
    /// stays queued and max_pending decides.
    pub async fn stall_for_consumers(&self) {
        if self.stalled.borrow().is_empty() {
            return;
        }
        let stalled = std::mem::take(&mut *self.stalled.borrow_mut());
        let started = std::time::Instant::now();
        for target in stalled {
            let spent = started.elapsed();
            match target {
                Stalled::Client(client) => {
                    client.unlist_for_stall();
                    if spent < STALL_TOTAL_MAX {
                        let budget = STALL_PER_CONSUMER_MAX.min(STALL_TOTAL_MAX - spent);
                        let _ = tern_shard::timer::timeout(budget, client.drained()).await;
                    }
                }
                // A route carries every consumer of its node: it may take
                // the whole batch's budget.
                Stalled::Route(link) => {
                    link.unlist_for_stall();
                    if spent < STALL_TOTAL_MAX {
                        let _ = tern_shard::timer::timeout(STALL_TOTAL_MAX - spent, link.drained())
                            .await;
                    }
                }
            }
        }
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
            self.flush_inline();
            since_yield += 1;
            if !self.stalled.borrow().is_empty() {
                self.stall_for_consumers().await;
            }
            if since_yield >= RECEIVE_BATCH_MESSAGES {
                since_yield = 0;
                futures_lite::future::yield_now().await;
            }
        }
    }

    fn handle_peer_message(self: &Rc<Self>, peer: usize, message: ShardMessage) {
        match message {
            ShardMessage::Routing(message) => self.handle_routing_message(peer, message),
            ShardMessage::ReportRequest { id, kind } => {
                let report = Box::new(self.report(kind));
                self.links.send(peer, ShardMessage::Report { id, report });
            }
            ShardMessage::Started => {
                self.started_peers.set(self.started_peers.get() + 1);
                self.started_waiters.wake_all();
            }
            ShardMessage::JetStream(message) => match self.jetstream.get() {
                Some(jetstream) => jetstream.handle_shard_message(message),
                None => {
                    log::error!(target: "tern::jetstream", "shard {}: JetStream message without JetStream: {message:?}", self.index)
                }
            },
            ShardMessage::Reload(settings) => self.apply_reload(&settings),
            ShardMessage::Report { id, report } => {
                let pending = self.pending_reports.borrow().get(&id).cloned();
                if let Some(pending) = pending {
                    pending.reports.borrow_mut().push(*report);
                    pending.arrived.wake_all();
                }
            }
        }
    }

    fn handle_routing_message(&self, peer: usize, message: RoutingMessage) {
        match message {
            RoutingMessage::Deliver(routed) => self.deliver_routed(&routed),
            RoutingMessage::Interest(update) => {
                log::debug!(
                    target: "tern::interest",
                    "shard {}: apply {} from shard {peer}: {:?} count {}",
                    self.index,
                    update.sequence,
                    String::from_utf8_lossy(&update.subject),
                    update.count
                );
                self.router.borrow_mut().apply_remote(peer, &update);
                self.export_interest();
                self.interest_changed.wake_all();
                self.links.acknowledge(peer, update.sequence);
            }
            RoutingMessage::NodeInterest(relay) => {
                // The relaying shard applied it first: refused there, it
                // was never relayed.
                self.router
                    .borrow_mut()
                    .apply_node(
                        relay.node_id,
                        peer,
                        &relay.subject,
                        relay.queue.as_deref(),
                        relay.weight,
                    )
                    .expect("a relayed update was accepted by the shard that heard it");
                self.interest_changed.wake_all();
            }
            RoutingMessage::NodeSourceClosed { node_id } => {
                log::debug!(target: "tern::interest", "shard {}: node {node_id:#x}'s interest heard on shard {peer}'s route forgotten", self.index);
                self.router.borrow_mut().forget_node_source(node_id, peer);
                self.interest_changed.wake_all();
            }
            RoutingMessage::InterestApplied { sequence } => {
                let ready = self.router.borrow_mut().record_applied(peer, sequence);
                self.interest_applied.wake_all();
                log::debug!(
                    target: "tern::interest",
                    "shard {}: shard {peer} applied up to {sequence}; {} PONG(s) released",
                    self.index,
                    ready.len()
                );
                for client in ready {
                    client.send_pong(self);
                }
            }
        }
    }

    // ----- monitoring --------------------------------------------------------

    /// This shard's counters (and connections, if asked).
    pub fn report(&self, kind: ReportKind) -> ShardReport {
        let mut report = ShardReport::from_counters(self.index, self.cpu, &self.counters);
        {
            let router = self.router.borrow();
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

fn add_node_forward(
    forwards: &mut Vec<(Rc<RouteLink>, Vec<Bytes>)>,
    route: &Rc<RouteLink>,
    queue: Option<&Bytes>,
) {
    let position = match forwards.iter().position(|(link, _)| link.id == route.id) {
        Some(position) => position,
        None => {
            forwards.push((route.clone(), Vec::new()));
            forwards.len() - 1
        }
    };
    if let Some(queue) = queue {
        forwards[position].1.push(queue.clone());
    }
}

fn add_forward(forwards: &mut Vec<(usize, Vec<Bytes>)>, shard: usize, queue: Option<&Bytes>) {
    let position = match forwards.iter().position(|(peer, _)| *peer == shard) {
        Some(position) => position,
        None => {
            forwards.push((shard, Vec::new()));
            forwards.len() - 1
        }
    };
    if let Some(queue) = queue {
        forwards[position].1.push(queue.clone());
    }
}
