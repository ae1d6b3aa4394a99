//! One shard's routing: its interest index ([`Router`]) and the publish
//! path. A message published here (by a client, by JetStream, or forwarded
//! by another node's route) is matched in this shard's sublist (cached),
//! appended to the outbound buffer of every local subscriber, handed to
//! internal sinks, given to one member per queue group (weighted across
//! shards and nodes), and forwarded once to each other shard, and once to
//! each other node, with interest. The receiving shard delivers to its own
//! subscribers ([`ShardRouting::deliver_routed`]).
//!
//! It reaches the other shards through the node's outboxes as a
//! [`PeerSender`] of its own messages, and the other nodes through this
//! shard's routes. Nothing here is shared with other threads.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use tern_shard::spin::Spinner;
use tern_shard::Waiters;

use crate::cluster::frame::NodeInterestError;
use crate::cluster::frame::RoutedFrame;
use crate::cluster::link::RouteLink;
use crate::cluster::routes::Routes;
use crate::internal::InternalSubscription;
use crate::mesh::PeerSender;
use crate::nats::conn::{self, Client, Subscription};
use crate::proto::encode::{self, Delivery};
use crate::proto::parser::Publish;
use crate::proto::subject::InvalidSubject;
use crate::routing::interest::{Router, Target};
use crate::routing::message::RoutingMessage::{self, Deliver};
use crate::routing::message::{InterestUpdate, NodeInterestRelay, RoutedMessage};
use crate::routing::sublist::QueueMatches;
use crate::stats::{self, ShardCounters};

/// Longest a producer (a client's read loop, or a peer's receive loop) waits
/// per batch for slow consumers to drain; nats-server: 2 to 5 ms per
/// consumer, 10 ms in total per read.
pub const STALL_PER_CONSUMER_MAX: Duration = Duration::from_millis(5);
pub const STALL_TOTAL_MAX: Duration = Duration::from_millis(10);

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

/// Which members a queue group's pick may land on.
#[derive(Clone, Copy)]
struct QueueScope {
    shards: bool,
    nodes: bool,
}

/// One shard's interest index and publish path.
pub struct ShardRouting {
    index: usize,
    pub router: RefCell<Router>,
    /// The other shards of this node (the node's outboxes).
    peers: Rc<dyn PeerSender<RoutingMessage>>,
    counters: Rc<ShardCounters>,
    /// This shard's routes to the other nodes (clustered only).
    routes: Option<Rc<Routes>>,
    /// Keeps the shard awake while a peer's reply to a forwarded request is due.
    spinner: Rc<Spinner>,
    /// Consumers that passed their stall threshold since the last stall check.
    stalled: RefCell<Vec<Stalled>>,
    /// Clients with a large backlog to write at the end of the current batch.
    flush_candidates: RefCell<Vec<Rc<Client>>>,
    /// Woken when a peer acknowledges interest updates.
    interest_applied: Waiters,
    /// Woken when a client's or a peer's interest changes (push consumers
    /// waiting for a subscriber).
    pub interest_changed: Waiters,
}

/// What a shard's routing is built from (`ShardRouting::new`).
pub struct RoutingParts {
    pub router: Router,
    pub peers: Rc<dyn PeerSender<RoutingMessage>>,
    pub counters: Rc<ShardCounters>,
    pub routes: Option<Rc<Routes>>,
    pub spinner: Rc<Spinner>,
}

impl ShardRouting {
    pub fn new(parts: RoutingParts) -> ShardRouting {
        let RoutingParts {
            router,
            peers,
            counters,
            routes,
            spinner,
        } = parts;
        assert_eq!(router.index(), peers.index());
        ShardRouting {
            index: peers.index(),
            router: RefCell::new(router),
            peers,
            counters,
            routes,
            spinner,
            stalled: RefCell::new(Vec::new()),
            flush_candidates: RefCell::new(Vec::new()),
            interest_applied: Waiters::new(),
            interest_changed: Waiters::new(),
        }
    }

    /// The spinner the node runs (`server`): armed here when a request
    /// crosses to another shard.
    pub fn spinner(&self) -> &Rc<Spinner> {
        &self.spinner
    }

    /// This shard's route to node `node_id` opened: messages for it go there.
    pub fn node_link_opened(&self, node_id: u64, link: &Rc<RouteLink>) {
        self.router.borrow_mut().node_link_opened(node_id, link);
    }

    /// Adds a local client's subscription: the index, the other shards'
    /// and nodes' views of it. `Ok(Some(sequence))`: the client's next PONG
    /// waits until every shard applied interest update `sequence`.
    pub fn subscribe(
        &self,
        subscription: &Rc<Subscription>,
    ) -> Result<Option<u64>, InvalidSubject> {
        let added = self.router.borrow_mut().add_local(subscription);
        self.export_interest();
        self.interest_changed.wake_all();
        let Some(update) = added? else {
            return Ok(None);
        };
        log::debug!(
            target: "tern::interest",
            "shard {} cid {}: announce {} {:?} count {}",
            self.index,
            subscription.client_id,
            update.sequence,
            String::from_utf8_lossy(&update.subject),
            update.count
        );
        let sequence = update.sequence;
        self.broadcast_interest(update);
        Ok(Some(sequence))
    }

    /// Whether a client's PONG may go now: every shard applied interest
    /// updates up to `needed`. If not, it is deferred until they have
    /// (`handle_message` returns the client then).
    pub fn pong_now_or_defer(&self, needed: u64, client: &Rc<Client>) -> bool {
        let mut router = self.router.borrow_mut();
        if router.all_applied(needed) {
            log::debug!(target: "tern::interest", "shard {} cid {}: PONG now (needs {needed})", self.index, client.id);
            return true;
        }
        log::debug!(target: "tern::interest", "shard {} cid {}: PONG deferred until {needed}", self.index, client.id);
        router.defer_pong(needed, client);
        false
    }

    /// A route link to `link.peer` was established (or replaced another):
    /// it becomes the node's route, and what this shard's clients
    /// subscribe to goes over it.
    pub fn route_link_opened(&self, link: &Rc<RouteLink>) {
        self.node_link_opened(link.peer.node_id, link);
        for export in self.router.borrow().node_interest() {
            link.send_interest(&export.subject, export.queue.as_ref(), export.weight);
        }
    }

    /// This shard's route `link_id` to node `node_id` closed or was
    /// replaced: what it said is forgotten here and on this node's other
    /// shards (a new link says it all again).
    pub fn node_link_closed(&self, node_id: u64, link_id: u64) {
        {
            let mut router = self.router.borrow_mut();
            router.node_link_closed(node_id, link_id);
            router.forget_node_source(node_id, self.index);
        }
        self.peers
            .broadcast(&mut || RoutingMessage::NodeSourceClosed { node_id });
        self.interest_changed.wake_all();
    }

    /// Applies an interest update node `node_id` sent over this shard's
    /// route, and relays it to this node's other shards ahead of any
    /// message this route carries after it (they share the ring's order).
    pub fn apply_node_interest(
        &self,
        node_id: u64,
        subject: &[u8],
        queue: Option<&[u8]>,
        weight: u32,
    ) -> Result<(), NodeInterestError> {
        self.router
            .borrow_mut()
            .apply_node(node_id, self.index, subject, queue, weight)?;
        let relay = NodeInterestRelay {
            node_id,
            subject: Bytes::copy_from_slice(subject),
            queue: queue.map(Bytes::copy_from_slice),
            weight,
        };
        self.peers
            .broadcast(&mut || RoutingMessage::NodeInterest(relay.clone()));
        self.interest_changed.wake_all();
        Ok(())
    }

    /// Whether consumers passed their stall threshold in the current batch.
    pub fn has_stalled(&self) -> bool {
        !self.stalled.borrow().is_empty()
    }

    /// Removes one subscription of `client` everywhere.
    pub fn unsubscribe(&self, client: &Client, subscription: &Rc<Subscription>) {
        if subscription.closed.replace(true) {
            return;
        }
        client.forget_subscription(&subscription.sid);
        stats::subtract(&self.counters.subscriptions, 1);
        let update = self.router.borrow_mut().remove_local(subscription);
        self.export_interest();
        self.interest_changed.wake_all();
        if let Some(update) = update {
            self.broadcast_interest(update);
        }
    }

    /// Changes whenever interest on this shard's sublist changes.
    pub fn interest_generation(&self) -> u64 {
        self.router.borrow().generation()
    }

    /// Whether a message published to `subject` here would reach anyone.
    pub fn has_interest(&self, subject: &[u8]) -> bool {
        self.router.borrow_mut().has_interest(subject)
    }

    pub fn broadcast_interest(&self, update: InterestUpdate) {
        self.peers
            .broadcast(&mut || RoutingMessage::Interest(update.clone()));
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
            self.peers.send(peer, Deliver(routed));
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
            self.unsubscribe(&client, subscription);
            return false;
        }
        client.queue_delivery(
            &self.counters,
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
            self.unsubscribe(&client, subscription);
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

    /// Applies what another shard's routing sent; the clients whose PONG
    /// that released, for the node to answer.
    #[must_use]
    pub fn handle_message(&self, peer: usize, message: RoutingMessage) -> Vec<Rc<Client>> {
        match message {
            RoutingMessage::Deliver(routed) => {
                self.deliver_routed(&routed);
                Vec::new()
            }
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
                self.peers.acknowledge(peer, update.sequence);
                Vec::new()
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
                Vec::new()
            }
            RoutingMessage::NodeSourceClosed { node_id } => {
                log::debug!(target: "tern::interest", "shard {}: node {node_id:#x}'s interest heard on shard {peer}'s route forgotten", self.index);
                self.router.borrow_mut().forget_node_source(node_id, peer);
                self.interest_changed.wake_all();
                Vec::new()
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
                ready
            }
        }
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
