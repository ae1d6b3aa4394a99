//! The cluster simulator's invariants, checked as the run goes and at its
//! end. Each names what a client of a replicated stream relies on:
//!
//! - `acknowledged publish lost`: a PubAck's sequence holds another
//!   message on some replica, or is missing after heal.
//! - `sequence given to two messages`: two replicas applied different
//!   messages at one sequence.
//! - `acknowledged publish reordered`: a publish sent after another's
//!   PubAck got a lower sequence; or a replica applied sequences out of
//!   order.
//! - `replicas diverged`: two replicas that applied the same prefix of the
//!   log hold different stream contents.
//! - `read back failed`: the leader after heal does not return an
//!   acknowledged message's payload.
//! - `no liveness after heal`: a stream has no leader taking publishes, or
//!   its replicas do not catch up, or it has no durable consumer, once
//!   every fault stopped.
//! - `acknowledged ack lost`: a delivery whose double ack was confirmed is
//!   delivered again, or the leader after heal has it pending or not
//!   delivered.
//! - `consumer state went back`: a replica applied a consumer state whose
//!   delivered or ack floor is below one it applied before (or one that
//!   does not decode).
//!
//! Divergence covers consumers too: the contents digest includes every
//! replica's durable consumers (configs and delivery states).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use tern_raft::NodeId;

use crate::cluster::multiraft::GroupId;
use crate::jetstream::consumer::delivery::{AckMode, DeliveryConfig, DeliveryState};

#[derive(Debug, Clone)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

/// What one stream's replicas and clients did, as the checks need it.
#[derive(Default)]
struct StreamRecord {
    /// The message first applied at each sequence, by any replica.
    owner: BTreeMap<u64, Bytes>,
    /// Acknowledged publishes: sequence -> payload.
    acked: BTreeMap<u64, Bytes>,
    /// Highest sequence acknowledged so far.
    acked_sequence_max: u64,
    /// Per replica: the last sequence it applied (since its last start).
    last_applied: BTreeMap<NodeId, u64>,
    /// Contents digest the first replica reported at an applied index.
    digests: BTreeMap<u64, (NodeId, u64)>,
    /// (consumer, stream sequence) whose double ack a client saw confirmed.
    acks_confirmed: BTreeSet<(String, u64)>,
    /// Per replica and consumer: (delivered, ack floor) stream sequences of
    /// the last state it applied (since its last start).
    consumer_floors: BTreeMap<(NodeId, String), (u64, u64)>,
}

#[derive(Default)]
pub struct Checker {
    streams: BTreeMap<GroupId, StreamRecord>,
    pub violations: Vec<Violation>,
    pub acked_total: u64,
}

impl Checker {
    fn violation(&mut self, invariant: &'static str, detail: String) {
        self.violations.push(Violation { invariant, detail });
    }

    /// A replica restarted: its applied sequences start over.
    pub fn restarted(&mut self, group: GroupId, node: NodeId) {
        if let Some(record) = self.streams.get_mut(&group) {
            record.last_applied.remove(&node);
            record
                .consumer_floors
                .retain(|(floor_node, _), _| *floor_node != node);
        }
    }

    /// What a publish sent now must exceed: the highest sequence acked.
    pub fn publish_floor(&self, group: GroupId) -> u64 {
        self.streams
            .get(&group)
            .map_or(0, |record| record.acked_sequence_max)
    }

    /// A replica applied a message entry.
    pub fn applied_message(
        &mut self,
        group: GroupId,
        node: NodeId,
        sequence: u64,
        payload: &Bytes,
    ) {
        let record = self.streams.entry(group).or_default();
        let mut found = Vec::new();
        let last = record.last_applied.insert(node, sequence).unwrap_or(0);
        if sequence <= last {
            found.push((
                "acknowledged publish reordered",
                format!("group {group}: node {node} applied sequence {sequence} after {last}"),
            ));
        }
        match record.owner.get(&sequence) {
            Some(owner) if owner != payload => found.push((
                "sequence given to two messages",
                format!(
                    "group {group}: sequence {sequence} is {:?} on one replica, {:?} on node {node}",
                    owner, payload
                ),
            )),
            Some(_) => {}
            None => {
                record.owner.insert(sequence, payload.clone());
            }
        }
        if let Some(acked) = record.acked.get(&sequence) {
            if acked != payload {
                found.push((
                    "acknowledged publish lost",
                    format!(
                        "group {group}: {:?} was acknowledged at sequence {sequence}, node {node} applied {:?} there",
                        acked, payload
                    ),
                ));
            }
        }
        for (invariant, detail) in found {
            self.violation(invariant, detail);
        }
    }

    /// A client got a PubAck for `payload` at `sequence`; `floor` is what
    /// [`Checker::publish_floor`] said when it was sent.
    pub fn acknowledged(
        &mut self,
        group: GroupId,
        sequence: u64,
        payload: &Bytes,
        floor: u64,
        duplicate: bool,
    ) {
        self.acked_total += 1;
        let record = self.streams.entry(group).or_default();
        let mut found = Vec::new();
        if sequence <= floor && !duplicate {
            found.push((
                "acknowledged publish reordered",
                format!(
                    "group {group}: {:?} sent after sequence {floor} was acknowledged got {sequence}",
                    payload
                ),
            ));
        }
        if let Some(owner) = record.owner.get(&sequence) {
            if owner != payload {
                found.push((
                    "acknowledged publish lost",
                    format!(
                        "group {group}: {:?} acknowledged at sequence {sequence}, which holds {:?}",
                        payload, owner
                    ),
                ));
            }
        }
        match record.acked.get(&sequence) {
            Some(acked) if acked != payload => found.push((
                "sequence given to two messages",
                format!(
                    "group {group}: sequence {sequence} acknowledged for {:?} and {:?}",
                    acked, payload
                ),
            )),
            _ => {
                record.acked.insert(sequence, payload.clone());
            }
        }
        record.acked_sequence_max = record.acked_sequence_max.max(sequence);
        for (invariant, detail) in found {
            self.violation(invariant, detail);
        }
    }

    /// A replica's contents digest at `applied_index`.
    pub fn contents_at(&mut self, group: GroupId, node: NodeId, applied_index: u64, digest: u64) {
        let record = self.streams.entry(group).or_default();
        match record.digests.get(&applied_index) {
            Some(&(first, expected)) if expected != digest => {
                self.violation(
                    "replicas diverged",
                    format!(
                        "group {group}: after index {applied_index} node {node}'s contents differ from node {first}'s"
                    ),
                );
            }
            Some(_) => {}
            None => {
                record.digests.insert(applied_index, (node, digest));
            }
        }
    }

    /// Acknowledged sequences of a stream and their payloads.
    pub fn acked(&self, group: GroupId) -> impl Iterator<Item = (u64, &Bytes)> + '_ {
        self.streams.get(&group).into_iter().flat_map(|record| {
            record
                .acked
                .iter()
                .map(|(&sequence, payload)| (sequence, payload))
        })
    }

    /// After heal: `node`'s replica must hold every acked message's entry
    /// (past what a snapshot gave it).
    pub fn check_replica_complete(
        &mut self,
        group: GroupId,
        node: NodeId,
        applied: &BTreeMap<u64, Bytes>,
        snapshot_through: u64,
    ) {
        // Up to `snapshot_through` the replica holds what a snapshot held:
        // what limits removed before it is not there (its contents are
        // compared with the replica that took it instead).
        let missing: Vec<u64> = self
            .acked(group)
            .filter(|(sequence, payload)| match applied.get(sequence) {
                Some(found) => found != *payload,
                None => *sequence > snapshot_through,
            })
            .map(|(sequence, _)| sequence)
            .take(5)
            .collect();
        if !missing.is_empty() {
            self.violation(
                "acknowledged publish lost",
                format!("group {group}: node {node} after heal lacks acknowledged sequences {missing:?}"),
            );
        }
    }

    pub fn read_back_failed(&mut self, group: GroupId, sequence: u64, found: Option<Vec<u8>>) {
        self.violation(
            "read back failed",
            format!(
                "group {group}: the leader returns {found:?} for acknowledged sequence {sequence}"
            ),
        );
    }

    /// A replica applied a state entry of consumer `name`.
    pub fn applied_consumer_state(
        &mut self,
        group: GroupId,
        node: NodeId,
        name: &str,
        state: &[u8],
    ) {
        let decoded = match DeliveryState::decode(DeliveryConfig::unlimited(AckMode::Explicit), state)
        {
            Ok(decoded) => decoded,
            Err(error) => {
                return self.violation(
                    "consumer state went back",
                    format!(
                        "group {group}: node {node} applied a state of {name} that does not decode: {error}"
                    ),
                )
            }
        };
        let now = (decoded.delivered().1, decoded.ack_floor().1);
        let record = self.streams.entry(group).or_default();
        let before = record
            .consumer_floors
            .insert((node, name.to_string()), now)
            .unwrap_or((0, 0));
        if now.0 < before.0 || now.1 < before.1 {
            self.violation(
                "consumer state went back",
                format!(
                    "group {group}: node {node} applied {name}'s delivered/ack floor {now:?} after {before:?}"
                ),
            );
        }
    }

    /// A client got a delivery of `sequence` from consumer `name` on `node`.
    pub fn consumer_delivered(&mut self, group: GroupId, name: &str, sequence: u64, node: NodeId) {
        let record = self.streams.entry(group).or_default();
        if record
            .acks_confirmed
            .contains(&(name.to_string(), sequence))
        {
            self.violation(
                "acknowledged ack lost",
                format!("group {group}: node {node} delivered sequence {sequence} of {name} again after its ack was confirmed"),
            );
        }
    }

    /// A client saw its double ack of `sequence` on consumer `name` confirmed.
    pub fn ack_confirmed(&mut self, group: GroupId, name: &str, sequence: u64) {
        self.streams
            .entry(group)
            .or_default()
            .acks_confirmed
            .insert((name.to_string(), sequence));
    }

    /// After heal: the leader's consumer `name` has every confirmed ack of
    /// it acked.
    pub fn check_acks_kept(
        &mut self,
        group: GroupId,
        name: &str,
        leader: NodeId,
        delivery: &DeliveryState,
    ) {
        let lost: Vec<u64> = self
            .streams
            .get(&group)
            .into_iter()
            .flat_map(|record| &record.acks_confirmed)
            .filter(|(consumer, _)| consumer == name)
            .map(|&(_, sequence)| sequence)
            .filter(|&sequence| {
                sequence >= delivery.next_stream_sequence() || delivery.is_pending(sequence)
            })
            .take(5)
            .collect();
        if !lost.is_empty() {
            self.violation(
                "acknowledged ack lost",
                format!("group {group}: leader {leader} after heal has confirmed acks {lost:?} of {name} pending or undelivered"),
            );
        }
    }

    pub fn not_live(&mut self, group: GroupId, why: String) {
        self.violation("no liveness after heal", format!("group {group}: {why}"));
    }
}
