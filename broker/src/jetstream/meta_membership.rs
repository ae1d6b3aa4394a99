//! The meta group's membership on a node: the host side of
//! [`super::meta::membership`] (what to change is decided there, sans-IO).
//!
//! - A node that hears no meta leader announces itself every
//!   [`JOIN_INTERVAL`] to every node it links to:
//!   `$JS.API.$TERN.META.JOIN`, an `Api` frame whose body is
//!   [`JoinRequest`]. Only the meta leader acts on it, and only when the
//!   route it came over belongs to that node and name.
//! - The leader proposes one change at a time (a `name` entry, a
//!   `RemoveVoter` of a replaced identity, an `AddVoter`); every member
//!   applies the committed change to its checkpoint's voters.
//! - `$JS.API.SERVER.REMOVE` (`{"peer":"<server name>"}` or
//!   `{"peer_id":"<hex Raft id>"}`, nats-server's request) removes a voter
//!   for good, answered once the removal applied. The node is drained
//!   first: it takes no new placements, and its replicated streams'
//!   replicas move to other voters while it still applies the meta log
//!   (a replica it leads hands leadership over, then leaves), so none
//!   keeps a leader that no longer hears of placements; then it leaves the
//!   group (after at most [`DRAIN_MAX`], or at once when nothing can move).
//!   Replicas on a voter removed without draining (a replaced, dead
//!   identity) move afterwards ([`JetStream::move_stranded_replicas`]).
//!
//! nats-server takes `SERVER.REMOVE` from its system account only; tern
//! has no accounts yet and takes it from any client (as
//! `META.LEADER.STEPDOWN`).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tern_raft::{EntryKind, Node, NodeId};

use super::api::error::ApiError;
use super::api::json::{self, GoSchema};
use super::cluster::Meta;
use super::meta::cluster::{self as meta, MetaEntry, META_GROUP};
use super::meta::membership::{
    join_change, stranded_replicas, JoinRefusal, Joiner, MembershipChange, MembershipView,
};
use super::{ApiRequest, JetStream, META_SHARD};

/// The tokens after `$JS.API.` of a node's request to join the meta
/// group; honoured only when handed over by another node, on shard 0.
pub const META_JOIN_TOKENS: [&str; 3] = ["$TERN", "META", "JOIN"];
/// How often a node that hears no meta leader announces itself.
const JOIN_INTERVAL: Duration = Duration::from_secs(1);
/// How long the leader waits for a stranded replica's move to apply
/// before it proposes it again.
const REMAP_RETRY: Duration = Duration::from_secs(5);
/// How long a removal waits for the node's replicas to move before the
/// node leaves the meta group anyway (those left keep it in their groups).
const DRAIN_MAX: Duration = Duration::from_secs(30);
/// How long a `SERVER.REMOVE` of the meta leader itself waits for the
/// leadership it hands over to land before it goes to the new leader.
const HANDOVER_WAIT: Duration = Duration::from_secs(3);
/// Longest server name a join carries.
const NAME_BYTES_MAX: usize = 255;
const SERVER_REMOVE_KIND: &str = "meta_server_remove_response";

/// A node's request to join: its Raft id (8 bytes, big-endian), then its
/// server name (UTF-8, 1 to [`NAME_BYTES_MAX`] bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinRequest {
    pub node: NodeId,
    pub name: String,
}

impl JoinRequest {
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.node != 0 && !self.name.is_empty() && self.name.len() <= NAME_BYTES_MAX);
        let mut bytes = Vec::with_capacity(8 + self.name.len());
        bytes.extend_from_slice(&self.node.to_be_bytes());
        bytes.extend_from_slice(self.name.as_bytes());
        bytes
    }

    /// `None` unless `bytes` is exactly one well-formed request.
    pub fn decode(bytes: &[u8]) -> Option<JoinRequest> {
        if bytes.len() <= 8 || bytes.len() > 8 + NAME_BYTES_MAX {
            return None;
        }
        let node = u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
        let name = std::str::from_utf8(&bytes[8..]).ok()?;
        (node != 0).then(|| JoinRequest {
            node,
            name: name.to_string(),
        })
    }
}

/// `$JS.API.SERVER.REMOVE`'s body (`JSApiMetaServerRemoveRequest`).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, rename = "JSApiMetaServerRemoveRequest")]
struct ServerRemoveRequest {
    /// The server's name.
    peer: String,
    /// Its peer id (tern: the hex Raft id `/jsz` shows); wins over `peer`.
    peer_id: String,
}

const SERVER_REMOVE_SCHEMA: GoSchema = GoSchema {
    struct_name: "JSApiMetaServerRemoveRequest",
    field_types: &[("peer", "string"), ("peer_id", "string")],
};

/// A removal the leader is carrying out, answered once it applies.
struct PendingRemoval {
    node: NodeId,
    origin: usize,
    reply: Option<Bytes>,
    /// When the node's replicas started to move off it.
    draining_since: Instant,
    /// The `RemoveVoter` is proposed (the replicas that could move did).
    proposed: bool,
}

/// What a node keeps for the meta group's membership (shard 0).
#[derive(Default)]
pub struct MetaMembership {
    last_join_sent: Cell<Option<Instant>>,
    removal: RefCell<Option<PendingRemoval>>,
    remaps_proposed: RefCell<BTreeMap<String, Instant>>,
    refusals_logged: RefCell<BTreeSet<NodeId>>,
}

impl JetStream {
    /// One look at the group's membership, every turn of the meta task:
    /// a node that hears no leader announces itself; the leader names
    /// voters it has no name for and moves stranded replicas.
    pub(super) fn membership_turn(self: &Rc<Self>, meta: &Rc<Meta>) {
        if !meta.is_running() {
            return;
        }
        let leader = self.groups().node(META_GROUP, Node::leader);
        match leader {
            None => self.announce_join(meta),
            Some(leader) if leader == meta.node_id && meta.leader_caught_up(self) => {
                self.name_unnamed_voters(meta);
                self.move_stranded_replicas(meta);
                self.finish_removal(meta);
            }
            Some(_) => {}
        }
    }

    /// Sends a join request to every node this one links to, at most
    /// every [`JOIN_INTERVAL`].
    fn announce_join(&self, meta: &Meta) {
        let now = Instant::now();
        let membership = meta.membership();
        if membership
            .last_join_sent
            .get()
            .is_some_and(|sent| now < sent + JOIN_INTERVAL)
        {
            return;
        }
        membership.last_join_sent.set(Some(now));
        let request = JoinRequest {
            node: meta.node_id,
            name: self.server_name(),
        };
        let subject = format!("$JS.API.{}", META_JOIN_TOKENS.join("."));
        let shard = self.shard();
        let Some(routes) = shard.routes.as_ref() else {
            return;
        };
        for link in routes.links().iter().filter(|link| link.is_open()) {
            link.send_api(1, subject.as_bytes(), None, &request.encode());
        }
    }

    /// A join request handed over by another node (shard 0): the leader
    /// proposes the next change it calls for.
    pub(super) fn on_join_request(self: &Rc<Self>, request: &ApiRequest) {
        assert_eq!(self.index, META_SHARD);
        assert!(request.hops > 0, "only another node asks to join");
        let (Some(meta), Some(join)) = (self.meta.get(), JoinRequest::decode(&request.payload))
        else {
            return;
        };
        if !meta.is_running() {
            return;
        }
        // Only over the node's own route, under its own name.
        let genuine = self
            .shard()
            .routes
            .as_ref()
            .and_then(|routes| routes.link_to_node(join.node))
            .is_some_and(|link| link.peer.server_name == join.name);
        let leads = self.groups().node(META_GROUP, Node::leader) == Some(meta.node_id);
        if !genuine || !leads || !meta.leader_caught_up(self) {
            return;
        }
        let change = {
            let state = meta.state.borrow();
            let view = MembershipView {
                voters: &state.voters,
                names: &state.names,
                removed: &state.removed,
            };
            join_change(
                &view,
                &Joiner {
                    node: join.node,
                    name: join.name.clone(),
                },
            )
        };
        match change {
            Err(JoinRefusal::Member) => {}
            Err(JoinRefusal::Removed) => {
                if meta
                    .membership()
                    .refusals_logged
                    .borrow_mut()
                    .insert(join.node)
                {
                    log::warn!(target: "tern::jetstream", "meta group: node {} ({:016x}) asks to join, but it was removed from the cluster for good; remove its JetStream data to join again as a new node", join.name, join.node);
                }
            }
            Ok(change) => self.propose_membership_change(change, &join.name),
        }
    }

    fn propose_membership_change(&self, change: MembershipChange, name: &str) {
        let proposed = match &change {
            MembershipChange::Name { node, name } => {
                let entry = MetaEntry::Name {
                    node: *node,
                    name: name.clone(),
                };
                self.groups()
                    .with_node(META_GROUP, |raft| raft.propose(Bytes::from(entry.encode())))
            }
            MembershipChange::Add(node) => self.groups().with_node(META_GROUP, |raft| {
                raft.propose_membership(EntryKind::AddVoter(*node))
            }),
            MembershipChange::Remove(node) => self.groups().with_node(META_GROUP, |raft| {
                raft.propose_membership(EntryKind::RemoveVoter(*node))
            }),
        };
        match proposed {
            Ok(index) => {
                log::info!(target: "tern::jetstream", "meta group: proposed {change:?} for {name} at index {index}")
            }
            // One change at a time, or leadership moving: the node asks
            // again within a second.
            Err(error) => {
                log::debug!(target: "tern::jetstream", "meta group: {change:?} for {name} not proposed now: {error:?}")
            }
        }
    }

    /// A committed change of the meta group's voters, on every member.
    pub(super) fn apply_meta_membership(self: &Rc<Self>, meta: &Meta, node: NodeId, added: bool) {
        let name = meta
            .state
            .borrow()
            .names
            .get(&node)
            .cloned()
            .unwrap_or_else(|| format!("{node:016x}"));
        meta.state.borrow_mut().apply_membership(node, added);
        let voters = meta.voters().len();
        if added {
            log::info!(target: "tern::jetstream", "meta group: {name} ({node:016x}) joined; {voters} voters");
            return;
        }
        log::info!(target: "tern::jetstream", "meta group: {name} ({node:016x}) removed for good; {voters} voters");
        if node == meta.node_id {
            log::error!(target: "tern::jetstream", "this node was removed from the cluster's meta group: stop it and remove its JetStream data before it joins again (as a new node)");
        }
        let pending = meta.membership().removal.borrow_mut().take();
        match pending {
            Some(removal) if removal.node == node => {
                if let Some(reply) = removal.reply {
                    self.respond(
                        removal.origin,
                        reply,
                        super::responses::success_response(SERVER_REMOVE_KIND),
                    );
                }
            }
            other => *meta.membership().removal.borrow_mut() = other,
        }
    }

    /// Voters without a recorded name (a checkpoint of an earlier
    /// version) get the name their route gives, one entry at a time.
    fn name_unnamed_voters(&self, meta: &Meta) {
        let unnamed = {
            let state = meta.state.borrow();
            state
                .voters
                .iter()
                .copied()
                .find(|voter| !state.names.contains_key(voter))
        };
        let Some(node) = unnamed else {
            return;
        };
        let name = match node == meta.node_id {
            true => Some(self.server_name()),
            false => self
                .shard()
                .routes
                .as_ref()
                .and_then(|routes| routes.known_node_name(node)),
        };
        if let Some(name) = name {
            self.propose_membership_change(
                MembershipChange::Name {
                    node,
                    name: name.clone(),
                },
                &name,
            );
        }
    }

    /// Replicated streams with a replica on a node that is no longer a
    /// voter: each gets, in its place, the least loaded reachable voter it
    /// is not on (none: it waits for one, e.g. the replacement to join).
    fn move_stranded_replicas(self: &Rc<Self>, meta: &Meta) {
        let stranded = self.stranded(meta);
        if stranded.is_empty() {
            return;
        }
        let now = Instant::now();
        let candidates = self.placement_candidates(meta);
        let membership = meta.membership();
        membership
            .remaps_proposed
            .borrow_mut()
            .retain(|_, at| now < *at + REMAP_RETRY);
        for stream in stranded {
            if membership
                .remaps_proposed
                .borrow()
                .contains_key(&stream.name)
            {
                continue;
            }
            let free: Vec<(NodeId, usize)> = candidates
                .iter()
                .copied()
                .filter(|(node, _)| !stream.placement.peers.contains(node))
                .collect();
            let random = crate::random::random_u64();
            let Some(chosen) = meta::place(1, &free, |node| {
                (node ^ random).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            }) else {
                continue;
            };
            let peers: Vec<NodeId> = stream
                .placement
                .peers
                .iter()
                .map(|&peer| {
                    if peer == stream.stranded {
                        chosen[0]
                    } else {
                        peer
                    }
                })
                .collect();
            let entry = MetaEntry::Remap {
                name: stream.name.clone(),
                group: stream.placement.group,
                peers,
                config: None,
                reply: None,
            };
            let proposed = self
                .groups()
                .with_node(META_GROUP, |raft| raft.propose(Bytes::from(entry.encode())));
            if proposed.is_ok() {
                log::info!(target: "tern::jetstream", "meta group: stream {}'s replica on {:016x}, no longer a voter, moves to {:016x}", stream.name, stream.stranded, chosen[0]);
                membership
                    .remaps_proposed
                    .borrow_mut()
                    .insert(stream.name, now);
            }
        }
    }

    /// Replicated streams with a replica on a node that is not a voter, or
    /// on the voter being removed.
    fn stranded(&self, meta: &Meta) -> Vec<super::meta::membership::Stranded> {
        let departing = meta
            .membership()
            .removal
            .borrow()
            .as_ref()
            .map(|removal| removal.node);
        let state = meta.state.borrow();
        let members: Vec<NodeId> = state
            .voters
            .iter()
            .copied()
            .filter(|voter| Some(*voter) != departing)
            .collect();
        let placements = state
            .streams
            .iter()
            .map(|(name, (_, placement))| (name, placement));
        stranded_replicas(placements, &members)
    }

    /// A removal under way: once no replica on the node can move (all
    /// that could have: their moves applied), or after [`DRAIN_MAX`], the
    /// node leaves the meta group.
    fn finish_removal(&self, meta: &Meta) {
        let (node, since) = match meta.membership().removal.borrow().as_ref() {
            Some(removal) if !removal.proposed => (removal.node, removal.draining_since),
            _ => return,
        };
        let candidates = self.placement_candidates(meta);
        let movable = self.stranded(meta).into_iter().any(|stream| {
            stream.stranded == node
                && candidates
                    .iter()
                    .any(|(candidate, _)| !stream.placement.peers.contains(candidate))
        });
        if movable && Instant::now() < since + DRAIN_MAX {
            return;
        }
        let proposed = self.groups().with_node(META_GROUP, |raft| {
            raft.propose_membership(EntryKind::RemoveVoter(node))
        });
        if let Ok(index) = proposed {
            log::info!(target: "tern::jetstream", "meta group: removing {node:016x} for good (index {index}){}", if movable { ", some of its replicas still on it" } else { "" });
            if let Some(removal) = meta.membership().removal.borrow_mut().as_mut() {
                removal.proposed = true;
            }
        }
    }

    /// `$JS.API.SERVER.REMOVE` on shard 0 (handed to the meta leader).
    pub(super) fn server_remove(self: &Rc<Self>, request: ApiRequest) {
        assert_eq!(self.index, META_SHARD);
        if !self.served_by_meta_leader(&request, SERVER_REMOVE_KIND) {
            return;
        }
        let meta = self.meta.get().expect("clustered").clone();
        let target = match self.removal_target(&meta, &request.payload) {
            Ok(target) => target,
            Err(error) => {
                return self.answer_error(request.origin, request.reply, SERVER_REMOVE_KIND, &error)
            }
        };
        if meta.membership().removal.borrow().is_some() {
            let error = ApiError::member_change_in_flight();
            return self.answer_error(request.origin, request.reply, SERVER_REMOVE_KIND, &error);
        }
        if target == meta.node_id {
            return self.remove_leader_itself(&meta, request);
        }
        let in_flight = self
            .groups()
            .node(META_GROUP, Node::membership_change_pending);
        if in_flight {
            let error = ApiError::member_change_in_flight();
            return self.answer_error(request.origin, request.reply, SERVER_REMOVE_KIND, &error);
        }
        log::info!(target: "tern::jetstream", "meta group: draining {target:016x} before it leaves for good");
        *meta.membership().removal.borrow_mut() = Some(PendingRemoval {
            node: target,
            origin: request.origin,
            reply: request.reply,
            draining_since: Instant::now(),
            proposed: false,
        });
        self.finish_removal(&meta);
    }

    /// The voter a removal names, with nats-server's errors.
    fn removal_target(&self, meta: &Meta, payload: &[u8]) -> Result<NodeId, ApiError> {
        if payload.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::bad_request());
        }
        let parsed: ServerRemoveRequest = json::decode_strict_with(payload, &SERVER_REMOVE_SCHEMA)?;
        let by_name = (!parsed.peer.is_empty())
            .then(|| self.node_named(meta, &parsed.peer))
            .flatten();
        let state = meta.state.borrow();
        let found = state
            .voters
            .iter()
            .copied()
            .find(|&voter| match parsed.peer_id.is_empty() {
                false => format!("{voter:x}") == parsed.peer_id,
                true => Some(voter) == by_name,
            });
        let found = found.ok_or_else(ApiError::server_not_member)?;
        if state.voters.len() <= 1 {
            return Err(ApiError::raft_general("raft: cannot remove the last peer"));
        }
        Ok(found)
    }

    /// A removal of the meta leader itself: leadership goes to a current
    /// voter first, then the request to it (a leader does not propose its
    /// own removal).
    fn remove_leader_itself(self: &Rc<Self>, meta: &Rc<Meta>, request: ApiRequest) {
        let Some(target) = self
            .groups()
            .with_node(META_GROUP, Node::transfer_candidate)
        else {
            return self.answer_error(
                request.origin,
                request.reply,
                SERVER_REMOVE_KIND,
                &ApiError::cluster_unavailable(),
            );
        };
        self.groups()
            .with_node(META_GROUP, |raft| raft.transfer_leadership(target));
        let (js, meta) = (self.clone(), meta.clone());
        glommio::spawn_local(async move {
            let deadline = Instant::now() + HANDOVER_WAIT;
            loop {
                let leader = js.groups().node(META_GROUP, Node::leader);
                match leader {
                    Some(leader) if leader != meta.node_id => {
                        return js.hand_to(leader, &request, SERVER_REMOVE_KIND);
                    }
                    _ if Instant::now() >= deadline => {
                        return js.answer_error(
                            request.origin,
                            request.reply,
                            SERVER_REMOVE_KIND,
                            &ApiError::cluster_unavailable(),
                        );
                    }
                    // Bounded poll of the handover.
                    _ => tern_shard::timer::sleep(Duration::from_millis(10)).await,
                }
            }
        })
        .detach();
    }
}

impl Meta {
    fn membership(&self) -> &MetaMembership {
        &self.membership
    }
}

impl JetStream {
    /// The voter a removal is draining, if any (the leader's).
    pub(super) fn departing_voter(&self, meta: &Meta) -> Option<NodeId> {
        meta.membership()
            .removal
            .borrow()
            .as_ref()
            .map(|removal| removal.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_requests_round_trip_and_refuse_garbage() {
        let request = JoinRequest {
            node: 0x0102_0304_0506_0708,
            name: "n4".into(),
        };
        let bytes = request.encode();
        assert_eq!(&bytes[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(JoinRequest::decode(&bytes), Some(request));
        assert_eq!(JoinRequest::decode(&bytes[..8]), None, "no name");
        assert_eq!(JoinRequest::decode(&[0; 9]), None, "node 0");
        let mut long = vec![1; 8];
        long.extend(std::iter::repeat_n(b'a', NAME_BYTES_MAX + 1));
        assert_eq!(JoinRequest::decode(&long), None);
        let mut invalid = vec![1; 8];
        invalid.push(0xff);
        assert_eq!(JoinRequest::decode(&invalid), None, "not UTF-8");
    }
}
