//! Subject routing state of one shard: its sublist (own subscriptions plus
//! the interest other shards announced), the counts behind its own
//! announcements, and the bookkeeping that lets a PONG promise "every shard
//! now knows about your subscriptions".
//!
//! Interest protocol between shards (like nats-server's route `RS+`/`RS-`,
//! over the in-process mesh): when a shard's local count for a (subject,
//! queue) changes it broadcasts `InterestUpdate { sequence, subject, queue,
//! count }`: for plain subscriptions only on 0 <-> 1 transitions, for queue
//! subscriptions on every change (the count is the group's weight there, so
//! queue members are picked uniformly across shards). A peer applies updates
//! in order and acknowledges the highest sequence applied; a client's PONG
//! waits until every peer has acknowledged that client's last announcement.
//!
//! Interest between nodes: every shard knows its whole node's client
//! interest (the mesh updates carry the clients' part of each count) and
//! tells the other nodes of its changes over its own routes, so a message
//! that crosses to another shard here before it leaves finds its interest
//! on that shard's route ahead of it. The shard that hears an update on a
//! route applies it and relays it over the mesh to its node's other
//! shards ahead of any later message from that route, so a message that
//! crosses to another shard there finds it too. A shard keeps, per (node,
//! subject, queue), the set of its node's shards whose routes say the
//! interest is there (and the latest weight), and sends to that node over
//! its own link to it.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use bytes::Bytes;
use rustc_hash::FxHashMap;

use crate::cluster::frame::{NodeInterestError, NODE_KEYS_MAX};
use crate::internal::InternalSubscription;
use crate::nats::conn::{Client, Subscription};
use crate::proto::subject::InvalidSubject;
use crate::routing::message::InterestUpdate;
use crate::routing::sublist::{Matches, Sublist, SublistEntry};

/// Another shard's interest in a (subject, queue); `weight` is its number of
/// local queue members (1 for plain interest); `clients` the part of it that
/// is clients' (exported to other nodes; internal subscriptions are not).
#[derive(Debug)]
pub struct RemoteInterest {
    pub shard: usize,
    pub weight: Cell<u32>,
    pub clients: Cell<u32>,
}

/// This shard's way to another node: its own route link to it, while one
/// is open. Shared by every [`NodeInterest`] of that node, so a link coming
/// or going touches one cell.
pub struct NodeRoute {
    pub node_id: u64,
    link: RefCell<Option<Rc<crate::cluster::link::RouteLink>>>,
}

impl NodeRoute {
    /// The open link to the node, if any.
    pub fn link(&self) -> Option<Rc<crate::cluster::link::RouteLink>> {
        self.link
            .borrow()
            .as_ref()
            .filter(|link| link.is_open())
            .cloned()
    }
}

/// Another node's interest in a (subject, queue): `weight` is that node's
/// number of queue members (1 for plain interest), as the latest update
/// said; `sources` the shards of this node whose routes to it said it is
/// there (this shard's own, and the ones that relayed theirs). Messages go
/// over this shard's own link to the node.
pub struct NodeInterest {
    pub node: Rc<NodeRoute>,
    pub weight: Cell<u32>,
    sources: RefCell<ShardSet>,
}

impl std::fmt::Debug for NodeInterest {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "node {:#x} weight {}",
            self.node.node_id,
            self.weight.get()
        )
    }
}

/// A set of this node's shards, by index (a bit each).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ShardSet(smallvec::SmallVec<[u64; 1]>);

impl ShardSet {
    fn new(shard_count: usize) -> ShardSet {
        ShardSet(smallvec::smallvec![0; shard_count.div_ceil(64)])
    }

    /// Adds or removes `shard`; whether the set changed.
    fn set(&mut self, shard: usize, present: bool) -> bool {
        let (word, bit) = (shard / 64, 1u64 << (shard % 64));
        let before = self.0[word];
        if present {
            self.0[word] |= bit;
        } else {
            self.0[word] &= !bit;
        }
        before != self.0[word]
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(|&word| word == 0)
    }
}

/// A change of this node's client interest to tell the other nodes:
/// `weight` 0 means none left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeExport {
    pub subject: Bytes,
    pub queue: Option<Bytes>,
    pub weight: u32,
}

/// What the sublist holds.
#[derive(Clone, Debug)]
pub enum Target {
    Local(Rc<Subscription>),
    Remote(Rc<RemoteInterest>),
    Internal(Rc<InternalSubscription>),
    Node(Rc<NodeInterest>),
}

impl SublistEntry for Target {
    fn same(&self, other: &Self) -> bool {
        match (self, other) {
            (Target::Local(a), Target::Local(b)) => Rc::ptr_eq(a, b),
            (Target::Remote(a), Target::Remote(b)) => Rc::ptr_eq(a, b),
            (Target::Internal(a), Target::Internal(b)) => Rc::ptr_eq(a, b),
            (Target::Node(a), Target::Node(b)) => Rc::ptr_eq(a, b),
            _ => false,
        }
    }
}

type InterestKey = (Bytes, Option<Bytes>);

pub struct Router {
    index: usize,
    shard_count: usize,
    sublist: Sublist<Target>,
    local_counts: FxHashMap<InterestKey, u32>,
    /// The clients' part of `local_counts` (what other nodes are told of).
    local_clients: FxHashMap<InterestKey, u32>,
    remote: Vec<FxHashMap<InterestKey, Rc<RemoteInterest>>>,
    /// This node's client interest, all shards together: per key, the sum
    /// of every shard's clients (a shard's plain interest counts 1).
    node_counts: FxHashMap<InterestKey, u32>,
    /// Changes of `node_counts` not yet sent to the other nodes.
    exports: Vec<NodeExport>,
    /// Other nodes' interest, per node (Raft id).
    nodes: FxHashMap<u64, FxHashMap<InterestKey, Rc<NodeInterest>>>,
    /// This shard's link to each node it has heard of.
    node_routes: FxHashMap<u64, Rc<NodeRoute>>,
    /// Sequence of the last update this shard broadcast.
    sequence: u64,
    /// Per peer: highest of our sequences it has applied.
    peer_applied: Vec<u64>,
    /// PONGs waiting for peers to apply a sequence, in the order they were
    /// asked for (per client that order is also sequence order).
    deferred_pongs: Vec<(u64, Weak<Client>)>,
    random: crate::random::Xorshift,
    /// Bumped whenever the sublist changes, so a caller that remembers
    /// whether a subject had interest knows when to look again.
    generation: u64,
}

impl Router {
    pub fn new(index: usize, shard_count: usize, seed: u64) -> Router {
        assert!(index < shard_count);
        Router {
            index,
            shard_count,
            sublist: Sublist::new(),
            local_counts: FxHashMap::default(),
            local_clients: FxHashMap::default(),
            remote: (0..shard_count).map(|_| FxHashMap::default()).collect(),
            node_counts: FxHashMap::default(),
            exports: Vec::new(),
            nodes: FxHashMap::default(),
            node_routes: FxHashMap::default(),
            sequence: 0,
            peer_applied: vec![0; shard_count],
            deferred_pongs: Vec::new(),
            random: crate::random::Xorshift::new(seed),
            generation: 0,
        }
    }

    pub fn sublist(&self) -> &Sublist<Target> {
        &self.sublist
    }

    /// Changes whenever any interest is added or removed.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether anything (local, remote or internal) subscribes to `subject`.
    pub fn has_interest(&mut self, subject: &[u8]) -> bool {
        let matches = self.sublist.matches_transient(subject);
        !matches.plain.is_empty() || !matches.queues.is_empty()
    }

    /// Indexes a local subscription; returns the update to broadcast, if any.
    pub fn add_local(
        &mut self,
        subscription: &Rc<Subscription>,
    ) -> Result<Option<InterestUpdate>, InvalidSubject> {
        self.sublist.insert(
            &subscription.subject,
            subscription.queue.as_ref(),
            Target::Local(subscription.clone()),
        )?;
        self.generation += 1;
        let key = (subscription.subject.clone(), subscription.queue.clone());
        let count = self.local_counts.entry(key.clone()).or_insert(0);
        *count += 1;
        let count = *count;
        let clients = self.local_clients.entry(key.clone()).or_insert(0);
        *clients += 1;
        let clients = *clients;
        self.count_node_clients(&key, clients - 1, clients);
        Ok(self.announce(key, count, clients, count == 1 || clients == 1))
    }

    /// Removes a local subscription; returns the update to broadcast, if any.
    pub fn remove_local(&mut self, subscription: &Rc<Subscription>) -> Option<InterestUpdate> {
        let target = Target::Local(subscription.clone());
        if !self
            .sublist
            .remove(&subscription.subject, subscription.queue.as_ref(), &target)
        {
            return None;
        }
        self.generation += 1;
        let key = (subscription.subject.clone(), subscription.queue.clone());
        let count = self
            .local_counts
            .get_mut(&key)
            .expect("a removed subscription was counted");
        assert!(*count > 0);
        *count -= 1;
        let count = *count;
        if count == 0 {
            self.local_counts.remove(&key);
        }
        let clients = self
            .local_clients
            .get_mut(&key)
            .expect("a removed subscription was counted");
        *clients -= 1;
        let clients = *clients;
        if clients == 0 {
            self.local_clients.remove(&key);
        }
        self.count_node_clients(&key, clients + 1, clients);
        self.announce(key, count, clients, count == 0 || clients == 0)
    }

    /// Indexes an internal subscription; returns the update to broadcast
    /// (announced ones only).
    pub fn add_internal(
        &mut self,
        subscription: &Rc<InternalSubscription>,
    ) -> Result<Option<InterestUpdate>, InvalidSubject> {
        self.sublist.insert(
            &subscription.subject,
            None,
            Target::Internal(subscription.clone()),
        )?;
        self.generation += 1;
        if !subscription.announced() {
            return Ok(None);
        }
        let key = (subscription.subject.clone(), None);
        let count = self.local_counts.entry(key.clone()).or_insert(0);
        *count += 1;
        let count = *count;
        if subscription.cluster_wide() {
            // Counted as a client's: other nodes are told.
            let clients = self.local_clients.entry(key.clone()).or_insert(0);
            *clients += 1;
            let clients = *clients;
            self.count_node_clients(&key, clients - 1, clients);
            return Ok(self.announce(key, count, clients, count == 1 || clients == 1));
        }
        let clients = self.local_clients.get(&key).copied().unwrap_or(0);
        Ok(self.announce(key, count, clients, count == 1))
    }

    /// Removes an internal subscription; returns the update to broadcast, if any.
    pub fn remove_internal(
        &mut self,
        subscription: &Rc<InternalSubscription>,
    ) -> Option<InterestUpdate> {
        let target = Target::Internal(subscription.clone());
        let removed = self.sublist.remove(&subscription.subject, None, &target);
        self.generation += u64::from(removed);
        if !removed || !subscription.announced() {
            return None;
        }
        let key = (subscription.subject.clone(), None);
        let count = self
            .local_counts
            .get_mut(&key)
            .expect("an announced internal subscription was counted");
        assert!(*count > 0);
        *count -= 1;
        let count = *count;
        if count == 0 {
            self.local_counts.remove(&key);
        }
        if subscription.cluster_wide() {
            let clients = self
                .local_clients
                .get_mut(&key)
                .expect("a cluster-wide internal subscription was counted");
            *clients -= 1;
            let clients = *clients;
            if clients == 0 {
                self.local_clients.remove(&key);
            }
            self.count_node_clients(&key, clients + 1, clients);
            return self.announce(key, count, clients, count == 0 || clients == 0);
        }
        let clients = self.local_clients.get(&key).copied().unwrap_or(0);
        self.announce(key, count, clients, count == 0)
    }

    /// The update other shards need, if any: for a plain subscription only
    /// when its count or its clients' count crossed zero (they route by
    /// presence, and tell other nodes by presence), for a queue group on
    /// every change (its weight).
    fn announce(
        &mut self,
        key: InterestKey,
        count: u32,
        clients: u32,
        transition: bool,
    ) -> Option<InterestUpdate> {
        if self.shard_count == 1 {
            return None;
        }
        let (subject, queue) = key;
        if queue.is_none() && !transition {
            return None;
        }
        self.sequence += 1;
        // Plain: presence only, so a peer's sum counts shards.
        let clients = if queue.is_none() {
            clients.min(1)
        } else {
            clients
        };
        Some(InterestUpdate {
            sequence: self.sequence,
            subject,
            queue,
            count,
            clients,
        })
    }

    /// Records that this node's clients' count for `key` went from `before`
    /// to `after` on one shard, and queues what other nodes must be told.
    fn count_node_clients(&mut self, key: &InterestKey, before: u32, after: u32) {
        if before == after {
            return;
        }
        let total = self.node_counts.entry(key.clone()).or_insert(0);
        let old_total = *total;
        *total = (*total + after)
            .checked_sub(before)
            .expect("a node's client count never goes negative");
        let new_total = *total;
        if new_total == 0 {
            self.node_counts.remove(key);
        }
        let weight = |total: u32| if key.1.is_none() { total.min(1) } else { total };
        if weight(old_total) != weight(new_total) {
            self.exports.push(NodeExport {
                subject: key.0.clone(),
                queue: key.1.clone(),
                weight: weight(new_total),
            });
        }
    }

    /// What other nodes have not been told yet (in order).
    pub fn take_exports(&mut self) -> Vec<NodeExport> {
        std::mem::take(&mut self.exports)
    }

    /// Everything this node's clients are interested in: the first thing a
    /// new route sends.
    pub fn node_interest(&self) -> Vec<NodeExport> {
        self.node_counts
            .iter()
            .map(|((subject, queue), total)| NodeExport {
                subject: subject.clone(),
                queue: queue.clone(),
                weight: if queue.is_none() { 1 } else { *total },
            })
            .collect()
    }

    /// This shard's way to `node_id` (made on first use).
    fn node_route(&mut self, node_id: u64) -> Rc<NodeRoute> {
        self.node_routes
            .entry(node_id)
            .or_insert_with(|| {
                Rc::new(NodeRoute {
                    node_id,
                    link: RefCell::new(None),
                })
            })
            .clone()
    }

    /// Records this shard's open link to `node_id` (it replaces any other).
    pub fn node_link_opened(&mut self, node_id: u64, link: &Rc<crate::cluster::link::RouteLink>) {
        let route = self.node_route(node_id);
        *route.link.borrow_mut() = Some(link.clone());
    }

    /// Forgets this shard's link to `node_id` if it is still `link_id`.
    pub fn node_link_closed(&mut self, node_id: u64, link_id: u64) {
        if let Some(route) = self.node_routes.get(&node_id) {
            let mut current = route.link.borrow_mut();
            if current.as_ref().is_some_and(|link| link.id == link_id) {
                *current = None;
            }
        }
    }

    /// Applies another node's interest update, heard on the route of this
    /// node's shard `source` (this one, or one that relayed it): `weight`
    /// 0 means that route says there is none left. A subject the sublist
    /// refuses is the sending node's protocol error; a refusal changes
    /// nothing.
    pub fn apply_node(
        &mut self,
        node_id: u64,
        source: usize,
        subject: &[u8],
        queue: Option<&[u8]>,
        weight: u32,
    ) -> Result<(), NodeInterestError> {
        assert!(source < self.shard_count);
        let key = (
            Bytes::copy_from_slice(subject),
            queue.map(Bytes::copy_from_slice),
        );
        let table = self.nodes.entry(node_id).or_default();
        if let Some(interest) = table.get(&key) {
            let changed = interest.sources.borrow_mut().set(source, weight > 0);
            if weight > 0 {
                interest.weight.set(weight);
            }
            if changed && interest.sources.borrow().is_empty() {
                let interest = table.remove(&key).expect("present");
                if table.is_empty() {
                    self.nodes.remove(&node_id);
                }
                let removed = self
                    .sublist
                    .remove(&key.0, key.1.as_ref(), &Target::Node(interest));
                assert!(removed, "node interest was indexed");
                self.generation += 1;
            }
            return Ok(());
        }
        if weight == 0 {
            if table.is_empty() {
                self.nodes.remove(&node_id);
            }
            return Ok(());
        }
        if table.len() >= NODE_KEYS_MAX {
            return Err(NodeInterestError::TooManyKeys);
        }
        let mut sources = ShardSet::new(self.shard_count);
        sources.set(source, true);
        let interest = Rc::new(NodeInterest {
            node: self.node_route(node_id),
            weight: Cell::new(weight),
            sources: RefCell::new(sources),
        });
        self.sublist
            .insert(&key.0, key.1.as_ref(), Target::Node(interest.clone()))
            .map_err(|_| NodeInterestError::InvalidSubject)?;
        self.generation += 1;
        self.nodes
            .get_mut(&node_id)
            .expect("made above")
            .insert(key, interest);
        Ok(())
    }

    /// Forgets what the route of this node's shard `source` to `node_id`
    /// said (the link closed, or a new one replaces it and will say it all
    /// again).
    pub fn forget_node_source(&mut self, node_id: u64, source: usize) {
        let Some(table) = self.nodes.get_mut(&node_id) else {
            return;
        };
        let mut gone = Vec::new();
        table.retain(|key, interest| {
            let mut sources = interest.sources.borrow_mut();
            sources.set(source, false);
            if sources.is_empty() {
                gone.push((key.clone(), interest.clone()));
                return false;
            }
            true
        });
        if table.is_empty() {
            self.nodes.remove(&node_id);
        }
        if gone.is_empty() {
            return;
        }
        self.generation += 1;
        for (key, interest) in gone {
            let removed = self
                .sublist
                .remove(&key.0, key.1.as_ref(), &Target::Node(interest));
            assert!(removed, "node interest was indexed");
        }
    }

    /// Applies an update from `peer`; the caller acknowledges `update.sequence`.
    pub fn apply_remote(&mut self, peer: usize, update: &InterestUpdate) {
        assert!(peer != self.index && peer < self.shard_count);
        let key = (update.subject.clone(), update.queue.clone());
        self.generation += 1;
        let before = self.remote[peer]
            .get(&key)
            .map_or(0, |interest| interest.clients.get());
        self.count_node_clients(&key, before, update.clients);
        let table = &mut self.remote[peer];
        if update.count == 0 {
            if let Some(interest) = table.remove(&key) {
                let removed =
                    self.sublist
                        .remove(&key.0, key.1.as_ref(), &Target::Remote(interest));
                assert!(removed, "remote interest was indexed");
            }
            return;
        }
        if let Some(interest) = table.get(&key) {
            interest.weight.set(update.count);
            interest.clients.set(update.clients);
            return;
        }
        let interest = Rc::new(RemoteInterest {
            shard: peer,
            weight: Cell::new(update.count),
            clients: Cell::new(update.clients),
        });
        // A peer only announces subjects its own sublist accepted.
        self.sublist
            .insert(&key.0, key.1.as_ref(), Target::Remote(interest.clone()))
            .expect("peer announced a valid subject");
        table.insert(key, interest);
    }

    pub fn matches(&mut self, subject: &[u8]) -> Rc<Matches<Target>> {
        self.sublist.matches(subject)
    }

    /// Matches without caching a miss (see [`Sublist::matches_transient`]).
    pub fn matches_transient(&mut self, subject: &[u8]) -> Rc<Matches<Target>> {
        self.sublist.matches_transient(subject)
    }

    /// Matches cached by the first `prefix_tokens` tokens (see
    /// [`crate::routing::sublist::Sublist::matches_by_prefix`]).
    pub fn matches_by_prefix(
        &mut self,
        subject: &[u8],
        prefix_tokens: usize,
    ) -> Rc<Matches<Target>> {
        self.sublist.matches_by_prefix(subject, prefix_tokens)
    }

    /// Last sequence this shard broadcast.
    /// This shard's index.
    pub fn index(&self) -> usize {
        self.index
    }

    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Whether every peer has applied our updates up to `sequence`.
    pub fn all_applied(&self, sequence: u64) -> bool {
        (0..self.shard_count).all(|peer| peer == self.index || self.peer_applied[peer] >= sequence)
    }

    /// Parks a PONG until every peer has applied `sequence`.
    pub fn defer_pong(&mut self, sequence: u64, client: &Rc<Client>) {
        assert!(!self.all_applied(sequence));
        assert!(
            sequence <= self.sequence,
            "a PONG waits only for a sequence this shard sent"
        );
        self.deferred_pongs.push((sequence, Rc::downgrade(client)));
    }

    /// Records `peer`'s acknowledgement; returns the clients whose PONG may go now.
    pub fn record_applied(&mut self, peer: usize, sequence: u64) -> Vec<Rc<Client>> {
        assert!(
            sequence <= self.sequence,
            "peer acknowledged a sequence never sent"
        );
        if sequence > self.peer_applied[peer] {
            self.peer_applied[peer] = sequence;
        }
        // Clients wait for different sequences; release every satisfied one,
        // keeping the order they asked in (so one client's PONGs stay in order).
        let minimum_applied = (0..self.shard_count)
            .filter(|&peer| peer != self.index)
            .map(|peer| self.peer_applied[peer])
            .min()
            .unwrap_or(u64::MAX);
        let mut ready = Vec::new();
        self.deferred_pongs.retain(|(needed, client)| {
            if *needed > minimum_applied {
                return true;
            }
            if let Some(client) = client.upgrade() {
                ready.push(client);
            }
            false
        });
        ready
    }

    /// Uniform random number below `bound` (deterministic per seed).
    pub fn random_below(&self, bound: u64) -> u64 {
        self.random.below(bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::internal::{InternalScope, InternalSink};
    use crate::proto::encode::Delivery;
    use std::net::SocketAddr;

    /// A sink that takes nothing: the router never calls it.
    struct NoSink;

    impl InternalSink for NoSink {
        fn receive(&self, _: &Delivery<'_>, _: bool) -> bool {
            unreachable!("the router's tests deliver nothing")
        }

        fn kind(&self) -> &'static str {
            "test"
        }
    }

    fn client(id: u64) -> Rc<Client> {
        Rc::new(Client::new(
            id,
            SocketAddr::from(([127, 0, 0, 1], 1000)),
            1 << 20,
        ))
    }

    fn subscription(
        client: &Rc<Client>,
        subject: &'static str,
        queue: Option<&'static str>,
    ) -> Rc<Subscription> {
        Rc::new(Subscription {
            client: Rc::downgrade(client),
            client_id: client.id,
            sid: Bytes::from_static(b"1"),
            subject: Bytes::from_static(subject.as_bytes()),
            queue: queue.map(|queue| Bytes::from_static(queue.as_bytes())),
            delivered: Cell::new(0),
            max: Cell::new(0),
            closed: Cell::new(false),
            deny_filtered: Cell::new(false),
        })
    }

    #[test]
    fn plain_interest_is_announced_on_transitions_only() {
        let mut router = Router::new(0, 2, 7);
        let owner = client(1);
        let first = subscription(&owner, "a.b", None);
        let second = subscription(&owner, "a.b", None);
        let update = router
            .add_local(&first)
            .unwrap()
            .expect("0 -> 1 is announced");
        assert_eq!((update.sequence, update.count), (1, 1));
        assert!(
            router.add_local(&second).unwrap().is_none(),
            "1 -> 2 is not"
        );
        assert!(router.remove_local(&first).is_none(), "2 -> 1 is not");
        let update = router.remove_local(&second).expect("1 -> 0 is announced");
        assert_eq!((update.sequence, update.count), (2, 0));
    }

    #[test]
    fn queue_weight_is_announced_on_every_change() {
        let mut router = Router::new(0, 2, 7);
        let owner = client(1);
        let members: Vec<_> = (0..3)
            .map(|_| subscription(&owner, "jobs", Some("workers")))
            .collect();
        let counts: Vec<u32> = members
            .iter()
            .map(|member| router.add_local(member).unwrap().expect("announced").count)
            .collect();
        assert_eq!(counts, vec![1, 2, 3]);
    }

    #[test]
    fn a_single_shard_announces_nothing() {
        let mut router = Router::new(0, 1, 7);
        let owner = client(1);
        assert!(router
            .add_local(&subscription(&owner, "x", None))
            .unwrap()
            .is_none());
        assert!(router.all_applied(0));
    }

    #[test]
    fn remote_interest_is_matched_and_removed() {
        let mut router = Router::new(0, 2, 7);
        let update = |count| InterestUpdate {
            sequence: 1,
            subject: Bytes::from_static(b"orders.*"),
            queue: Some(Bytes::from_static(b"q")),
            count,
            clients: count,
        };
        router.apply_remote(1, &update(2));
        let matches = router.matches(b"orders.new");
        let Target::Remote(interest) = &matches.queues[0].members[0] else {
            panic!("remote")
        };
        assert_eq!((interest.shard, interest.weight.get()), (1, 2));
        router.apply_remote(1, &update(5));
        assert_eq!(interest.weight.get(), 5, "weight updates in place");
        router.apply_remote(1, &update(0));
        assert!(router.matches(b"orders.new").is_empty());
    }

    #[test]
    fn other_nodes_hear_of_client_interest_summed_over_shards() {
        let mut router = Router::new(0, 2, 7);
        let owner = client(1);
        let export = |subject: &'static str, queue: Option<&'static str>, weight| NodeExport {
            subject: Bytes::from_static(subject.as_bytes()),
            queue: queue.map(|queue| Bytes::from_static(queue.as_bytes())),
            weight,
        };
        // Plain interest: presence, whichever shard has it.
        let first = subscription(&owner, "a.>", None);
        let update = router.add_local(&first).unwrap().expect("announced");
        assert_eq!((update.count, update.clients), (1, 1));
        assert_eq!(router.take_exports(), vec![export("a.>", None, 1)]);
        let peer_update = |count, clients| InterestUpdate {
            sequence: 1,
            subject: Bytes::from_static(b"a.>"),
            queue: None,
            count,
            clients,
        };
        router.apply_remote(1, &peer_update(1, 1));
        assert!(router.take_exports().is_empty(), "still present");
        router.remove_local(&first);
        assert!(
            router.take_exports().is_empty(),
            "the other shard still has it"
        );
        router.apply_remote(1, &peer_update(0, 0));
        assert_eq!(router.take_exports(), vec![export("a.>", None, 0)]);

        // Queue groups: the weight is the node's member count.
        let member = subscription(&owner, "w", Some("q"));
        router.add_local(&member).unwrap();
        let queue_update = |count| InterestUpdate {
            sequence: 2,
            subject: Bytes::from_static(b"w"),
            queue: Some(Bytes::from_static(b"q")),
            count,
            clients: count,
        };
        router.apply_remote(1, &queue_update(2));
        assert_eq!(
            router.take_exports(),
            vec![export("w", Some("q"), 1), export("w", Some("q"), 3)]
        );
        let mut all = router.node_interest();
        all.sort_by(|a, b| a.subject.cmp(&b.subject));
        assert_eq!(all, vec![export("w", Some("q"), 3)]);

        // Internal (JetStream) interest stays on this node.
        let internal = Rc::new(InternalSubscription::new(
            Bytes::from_static(b"orders.>"),
            InternalScope::Node,
            Rc::new(NoSink),
        ));
        let update = router.add_internal(&internal).unwrap().expect("announced");
        assert_eq!((update.count, update.clients), (1, 0));
        assert!(router.take_exports().is_empty());
        // A client on the same subject is exported, though the shard's
        // count does not cross zero.
        let client_too = subscription(&owner, "orders.>", None);
        let update = router
            .add_local(&client_too)
            .unwrap()
            .expect("clients crossed zero");
        assert_eq!((update.count, update.clients), (2, 1));
        assert_eq!(router.take_exports(), vec![export("orders.>", None, 1)]);
    }

    #[test]
    fn node_interest_stays_while_any_shards_route_says_so() {
        let mut router = Router::new(0, 2, 7);
        let (node, other_node) = (0xA, 0xB);
        let found = |router: &mut Router, subject: &[u8]| -> Vec<(u64, u32)> {
            let matches = router.matches(subject);
            let mut found: Vec<(u64, u32)> = matches
                .plain
                .iter()
                .chain(matches.queues.iter().flat_map(|group| group.members.iter()))
                .filter_map(|target| match target {
                    Target::Node(interest) => Some((interest.node.node_id, interest.weight.get())),
                    _ => None,
                })
                .collect();
            found.sort();
            found
        };
        // Heard on this shard's route and relayed from the other's: one
        // entry per node, there while either says so.
        router.apply_node(node, 0, b"in.1", None, 1).unwrap();
        router.apply_node(node, 1, b"in.1", None, 1).unwrap();
        router.apply_node(other_node, 1, b"in.1", None, 1).unwrap();
        assert_eq!(
            found(&mut router, b"in.1"),
            vec![(node, 1), (other_node, 1)]
        );
        router.apply_node(node, 0, b"in.1", None, 0).unwrap();
        assert_eq!(
            found(&mut router, b"in.1"),
            vec![(node, 1), (other_node, 1)]
        );
        router.apply_node(node, 1, b"in.1", None, 0).unwrap();
        assert_eq!(found(&mut router, b"in.1"), vec![(other_node, 1)]);
        // A removal from a route that never said it changes nothing.
        router.apply_node(node, 1, b"in.2", None, 0).unwrap();
        assert!(found(&mut router, b"in.2").is_empty());
        // Queue weights: the latest said.
        router.apply_node(node, 0, b"jobs", Some(b"q"), 3).unwrap();
        router.apply_node(node, 1, b"jobs", Some(b"q"), 4).unwrap();
        assert_eq!(found(&mut router, b"jobs"), vec![(node, 4)]);
        // A route that closes takes only what it alone said.
        router.apply_node(node, 1, b"only.one", None, 1).unwrap();
        router.forget_node_source(node, 1);
        assert_eq!(found(&mut router, b"jobs"), vec![(node, 4)]);
        assert!(found(&mut router, b"only.one").is_empty());
        assert_eq!(found(&mut router, b"in.1"), vec![(other_node, 1)]);
        router.forget_node_source(node, 0);
        assert!(found(&mut router, b"jobs").is_empty());
        // A bad subject is refused and changes nothing.
        let entries = router.sublist().count();
        assert_eq!(
            router.apply_node(node, 0, b"a..b", None, 1),
            Err(NodeInterestError::InvalidSubject)
        );
        assert_eq!(router.sublist().count(), entries);
        // Without a link to the node there is no way to it.
        assert!(router.node_route(node).link().is_none());
    }

    #[test]
    fn shard_sets_span_words() {
        let mut set = ShardSet::new(130);
        assert!(set.is_empty());
        assert!(set.set(129, true));
        assert!(!set.set(129, true), "no change");
        assert!(set.set(3, true));
        assert!(set.set(129, false));
        assert!(!set.is_empty());
        assert!(set.set(3, false));
        assert!(set.is_empty());
    }

    #[test]
    fn deferred_pongs_are_released_per_sequence_in_order() {
        let mut router = Router::new(0, 3, 7);
        let owner = client(1);
        for subject in ["a", "b", "c", "d", "e"] {
            router
                .add_local(&subscription(&owner, subject, None))
                .unwrap();
        }
        let (x, y) = (client(2), client(3));
        router.defer_pong(5, &x);
        router.defer_pong(3, &y);
        router.defer_pong(5, &x);
        // Both peers must apply a sequence before its PONGs go.
        assert!(router.record_applied(1, 4).is_empty());
        let ready = router.record_applied(2, 3);
        assert_eq!(
            ready.iter().map(|client| client.id).collect::<Vec<_>>(),
            vec![3]
        );
        assert!(router.record_applied(2, 4).is_empty());
        router.record_applied(1, 5);
        let ready = router.record_applied(2, 5);
        assert_eq!(
            ready.iter().map(|client| client.id).collect::<Vec<_>>(),
            vec![2, 2]
        );
    }
}
