//! One replica of a stream, independent of any executor: the replicated
//! state ([`ReplicatedState`]) and, while this replica leads, the leader's
//! side ([`Leader`]) and the live consumers ([`ConsumerLeader`]). A host
//! owns the Raft node and the disk, feeds committed entries to
//! [`Replica::apply_entry`] and answers clients from what it returns: the
//! stream task on a node (`task.rs`), and the cluster simulator (through
//! [`Replica::apply`], which turns them into [`Answer`]s).
//!
//! Leadership is taken only once everything in the node's log applied in
//! its term (the new leader's no-op included): until then the last
//! sequence is unknown, and a publish is refused with nats-server's 10009.
//!
//! Durable consumers are in the log too (create, update, delete, delivery
//! state); the leader runs them live ([`ConsumerLeader`]) and confirms a
//! double ack only once a state entry holding it applied.

use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use tern_raft::{Entry, EntryKind, Node, NodeId, Role};
use tern_storage::block_store::{Manifest, MemoryFiles, StoreError, StreamLog};

use super::super::api::error::ApiError;
use super::super::consumer::delivery::{Delivery, DeliveryState};
use super::super::consumer::requests::PullRequest as RequestBody;
use super::super::entry::{Operation, PendingMessage, CONSUMER_STATE_BYTES_MAX};
use super::config::{Retention, StreamConfig};
use super::consumer_leader::{
    ConsumerLeader, LoggedConsumerError, Removed, StateEntryTooLarge, Waiter,
};
use super::deliveries::{Delivered, DeliveryRound, DeliveryScratch, Outlet};
use super::leader::{EntryApplied, Ingested, Leader, Owed};
use super::persistence::ConsumerOwed;
use super::snapshot::SnapshotError;
pub use super::state::LoggedConsumer;
use super::state::{Applied, ReplicatedState};
use super::transfer::{SnapshotPoint, SnapshotSource};
use super::{memory_message_bytes, Store};

/// A known bug switched on, for the simulator's checkers to catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamCanary {
    /// PubAck once the leader's own copy is durable, before a quorum has it.
    AckBeforeQuorum,
    /// max_age removals from each replica's own clock, outside the log.
    LocalExpiry,
    /// A double ack confirmed at once, before a state entry holding it
    /// committed.
    AckBeforeState,
    /// An interest stream keeps or drops a message by the consumers each
    /// replica runs itself (only the leader runs any), not by the log.
    LocalInterest,
    /// A snapshot transfer leaves out the messages removed after they were
    /// read (the end record's list).
    SnapshotWithoutRemovals,
    /// max_msgs evicts the newest message instead of the oldest (the same
    /// on every replica, but not a rule a snapshot read while entries
    /// apply converges under).
    LimitEvictsNewest,
    /// A checkpoint names the log's last index (proposed or received, maybe
    /// not durable) instead of what applied.
    CheckpointBeyondDurable,
    /// Committed entries released before a snapshot installed since (which
    /// holds them) apply over it: the installed, newer state is taken back.
    EntriesOverInstall,
}

/// What a client is told.
#[derive(Debug)]
pub enum Answer {
    /// The publish is in the stream at `sequence` (`duplicate`: it was
    /// already, from the same message id).
    PubAck {
        reply: Bytes,
        sequence: u64,
        duplicate: bool,
    },
    /// The publish or ack failed (leadership lost, a check refused it).
    Failed { reply: Bytes, error: ApiError },
    /// A double ack's confirmation: the ack is in the replicated state.
    AckConfirmed { reply: Bytes },
    /// A message delete applied (`removed`: the message was there).
    Deleted { reply: Bytes, removed: bool },
}

/// One committed entry applied by a replica: [`EntryApplied`] and, while
/// in office, the consumer its delete removed.
pub(super) struct ReplicaApplied {
    pub(super) superseded: smallvec::SmallVec<[Owed; 1]>,
    pub(super) applied: Option<Applied>,
    pub(super) released: smallvec::SmallVec<[Owed; 1]>,
    pub(super) removed: Option<Removed>,
}

/// What a replica needs to know of its Raft node to follow leadership
/// (read at once, so a host need not hold the node across an await).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub leads: bool,
    pub term: u64,
    pub applied_index: u64,
    pub last_index: u64,
}

impl NodeView {
    pub fn of(node: &Node) -> NodeView {
        NodeView {
            leads: node.role() == Role::Leader,
            term: node.term(),
            applied_index: node.applied_index(),
            last_index: node.last_index(),
        }
    }
}

/// Replies a change of leadership leaves unanswered, for the host to fail.
#[derive(Default)]
pub(super) struct Unanswered {
    pub(super) owed: Vec<Owed>,
    pub(super) waiting: Vec<Waiter>,
}

/// Why a replica cannot go on (the host takes it offline).
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Consumer(#[from] LoggedConsumerError),
    #[error(transparent)]
    StateEntry(#[from] StateEntryTooLarge),
}

/// One durable's state entry from [`Replica::propose_due_states`].
pub(super) struct DueState {
    pub(super) name: String,
    pub(super) outcome: StateOutcome,
    /// The replies waiting for this state to be durable.
    pub(super) waiting: Vec<Waiter>,
}

pub(super) enum StateOutcome {
    /// Proposed at `index` in `term`: the waiting replies are owed until
    /// it applies.
    Proposed { term: u64, index: u64 },
    /// Nothing new since the last one proposed, which applied: what the
    /// waiting replies report is durable already.
    NothingNew,
    /// Not proposed (leadership moving); the state stays due.
    Refused(tern_raft::ProposeError),
}

/// A stored message as the checkers compare them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoredSummary {
    pub sequence: u64,
    pub timestamp_ns: u64,
    pub subject: Bytes,
}

/// Why a snapshot could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error("stream snapshot: its config does not decode: {0}")]
    Config(#[from] super::config::StoredStreamConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("stream snapshot: {0}")]
    Consumer(#[from] LoggedConsumerError),
}

pub struct Replica {
    name: String,
    pub(super) state: ReplicatedState,
    pub(super) leader: Leader,
    pub(super) consumers: ConsumerLeader,
    /// The term this replica took office in (it leads while the node is
    /// leader in that term).
    office_term: Option<u64>,
    pub(super) canary: Option<StreamCanary>,
    /// What Raft compacted to last (`transfer.rs`).
    pub(super) snapshot_point: Option<SnapshotPoint>,
    /// Snapshot transfers being read, by follower.
    pub(super) transfers: BTreeMap<NodeId, SnapshotSource>,
    /// Installed from a snapshot read while the leader went on: the
    /// contents are a replica's state only from this applied index on.
    pub(super) converges_at: u64,
    /// Reused by every delivery (`deliveries.rs`).
    scratch: DeliveryScratch,
}

/// The server's max_payload [`Replica::serve`] paces push consumers by
/// (nats-server's default; the stream task passes its configured one).
const SERVE_MAX_PAYLOAD_BYTES: u64 = 1 << 20;

impl Replica {
    /// A replica with an empty memory store.
    pub async fn in_memory(
        config: StreamConfig,
        canary: Option<StreamCanary>,
    ) -> Result<Replica, StoreError> {
        let store_config = tern_storage::block_store::StreamConfig {
            message_bytes: memory_message_bytes,
            // Synced appends: no executor for write-behind.
            sync: true,
            ..tern_storage::block_store::StreamConfig::default()
        };
        let (log, _) = StreamLog::open(MemoryFiles::new(), store_config, &Manifest::new(1)).await?;
        let state = ReplicatedState::new(Store::Memory(log), Rc::new(config));
        let mut replica = Replica::new(state, CONSUMER_STATE_BYTES_MAX, canary);
        replica.state.rebuild_expiry().await?;
        Ok(replica)
    }

    /// A replica of `state` (opened by its host), whose consumers' state
    /// entries are at most `state_entry_bytes_max` (the host's log
    /// record).
    pub(super) fn new(
        mut state: ReplicatedState,
        state_entry_bytes_max: usize,
        canary: Option<StreamCanary>,
    ) -> Replica {
        state.evict_newest = canary == Some(StreamCanary::LimitEvictsNewest);
        Replica {
            name: state.config.name.clone(),
            state,
            leader: Leader::default(),
            consumers: ConsumerLeader::new(state_entry_bytes_max),
            office_term: None,
            canary,
            snapshot_point: None,
            transfers: BTreeMap::new(),
            converges_at: 0,
            scratch: DeliveryScratch::default(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn applied_index(&self) -> u64 {
        self.state.applied_index
    }

    /// Whether this replica leads: its node is leader in the term it took
    /// office in.
    pub fn is_leading(&self, node: &Node) -> bool {
        self.leads(NodeView::of(node))
    }

    /// Whether it took office (and runs the live consumers) and has not
    /// left it.
    pub(super) fn in_office(&self) -> bool {
        self.office_term.is_some()
    }

    pub(super) fn leads(&self, view: NodeView) -> bool {
        view.leads && self.office_term == Some(view.term)
    }

    /// [`Self::follow`], the replies it fails answered as [`Answer`]s.
    pub async fn follow_leadership(
        &mut self,
        node: &Node,
        now_ns: u64,
        answers: &mut Vec<Answer>,
    ) -> Result<(), ReplicaError> {
        let unanswered = self.follow(NodeView::of(node), now_ns).await?;
        for waiter in unanswered.waiting {
            if let Waiter::Ack { reply } = waiter {
                answers.push(Answer::Failed {
                    reply,
                    error: ApiError::cluster_not_leader(),
                });
            }
        }
        for owed in unanswered.owed {
            fail(owed, &ApiError::cluster_not_leader(), answers);
        }
        Ok(())
    }

    /// Takes office when the node leads and its log applied in full
    /// (the leader's side and the live consumers start from the applied
    /// state); leaves it when the node no longer leads. Returns the
    /// replies that fail (with nats-server's 10009): acks waiting for a
    /// consumer state entry when leaving, and replies still owed from an
    /// earlier term when taking office.
    pub(super) async fn follow(
        &mut self,
        view: NodeView,
        now_ns: u64,
    ) -> Result<Unanswered, ReplicaError> {
        let mut unanswered = Unanswered::default();
        if !self.leads(view) && self.office_term.is_some() {
            self.office_term = None;
            unanswered.waiting = self.consumers.leave_office();
        }
        if view.leads
            && self.office_term.is_none()
            && view.applied_index == view.last_index
            && self.state.applied_index == view.last_index
        {
            unanswered
                .owed
                .extend(self.leader.owed.drain(..).map(|owed| owed.owed));
            self.leader.take_office(&self.state, now_ns).await?;
            self.consumers.take_office(&self.state, now_ns)?;
            self.office_term = Some(view.term);
        }
        Ok(unanswered)
    }

    /// `Some(reply)` while this replica leads; otherwise the reply fails
    /// with nats-server's 10009 and `None`.
    fn refused_unless_leading(
        &self,
        node: &Node,
        reply: Bytes,
        answers: &mut Vec<Answer>,
    ) -> Option<Bytes> {
        if self.is_leading(node) {
            return Some(reply);
        }
        answers.push(Answer::Failed {
            reply,
            error: ApiError::cluster_not_leader(),
        });
        None
    }

    /// A publish at `now_ns`: checked and proposed by the leader, its
    /// PubAck owed until the entry applies (a duplicate's until what is in
    /// flight has). Returns the answer due at once: a refusal (10009 when
    /// this replica does not lead), or a duplicate of what applied
    /// already; none when the stream takes no acks or the publish wants no
    /// reply.
    pub fn ingest(
        &mut self,
        node: &mut Node,
        message: PendingMessage,
        reply: Option<Bytes>,
        now_ns: u64,
    ) -> Option<Answer> {
        let reply = reply.filter(|_| !self.state.config.no_ack);
        if !self.is_leading(node) {
            return reply.map(|reply| Answer::Failed {
                reply,
                error: ApiError::cluster_not_leader(),
            });
        }
        let consumers = &self.consumers;
        let ingested =
            self.leader
                .ingest(&self.state, node, &self.name, message, now_ns, |subject| {
                    consumers.wants(subject)
                });
        let reply = reply?;
        match ingested {
            Ingested::Rejected(error) => Some(Answer::Failed { reply, error }),
            Ingested::Duplicate { sequence } => {
                // The original may still be in flight: answer after it.
                let last_index = node.last_index();
                if last_index > self.state.applied_index {
                    self.leader.owe(
                        node.term(),
                        last_index,
                        self.state.applied_index,
                        Owed::Duplicate { reply, sequence },
                    );
                    return None;
                }
                Some(Answer::PubAck {
                    reply,
                    sequence,
                    duplicate: true,
                })
            }
            Ingested::Proposed { index, .. } => {
                self.leader.owe(
                    node.term(),
                    index,
                    self.state.applied_index,
                    Owed::PubAck { reply },
                );
                None
            }
        }
    }

    /// [`Self::ingest`] of a publish that wants a reply.
    pub fn publish(
        &mut self,
        node: &mut Node,
        message: PendingMessage,
        reply: Bytes,
        now_ns: u64,
        answers: &mut Vec<Answer>,
    ) {
        answers.extend(self.ingest(node, message, Some(reply), now_ns));
    }

    /// The leader's timer: proposes what max_age and TTLs removed by its
    /// clock (with the local-expiry canary, every replica removes them
    /// itself instead, outside the log).
    pub async fn expire(&mut self, node: &mut Node, now_ns: u64) -> Result<(), StoreError> {
        if self.canary == Some(StreamCanary::LocalExpiry) {
            let max_age_ns = self.state.config.max_age_ns;
            if max_age_ns > 0 {
                let aged = self.aged(now_ns, max_age_ns as u64);
                if !aged.is_empty() {
                    self.state
                        .apply(Operation::Expire { sequences: aged }, &mut self.consumers)
                        .await?;
                }
            }
            return Ok(());
        }
        if !self.is_leading(node) {
            return Ok(());
        }
        self.leader
            .expire_due(&mut self.state, &self.consumers, node, &self.name, now_ns);
        if self.state.config.max_age_ns > 0 {
            self.leader
                .expire_aged(&mut self.state, &self.consumers, node, &self.name, now_ns);
        }
        Ok(())
    }

    /// Canary only: what is past max_age by this replica's clock.
    fn aged(&self, now_ns: u64, max_age_ns: u64) -> Vec<u64> {
        self.contents()
            .into_iter()
            .take_while(|stored| now_ns.saturating_sub(stored.timestamp_ns) > max_age_ns)
            .map(|stored| stored.sequence)
            .collect()
    }

    /// Entries this node made durable (the ack-before-quorum canary
    /// answers PubAcks here instead of at apply).
    pub fn persisted(&mut self, entries: &[Entry], answers: &mut Vec<Answer>) {
        if self.canary != Some(StreamCanary::AckBeforeQuorum) {
            return;
        }
        for entry in entries {
            let Some(owed) = self.leader.owed.front() else {
                return;
            };
            if owed.index != entry.index || owed.term != entry.term {
                continue;
            }
            let EntryKind::Normal(data) = &entry.kind else {
                continue;
            };
            let Ok(Operation::Message { sequence, .. }) = Operation::decode(data) else {
                continue;
            };
            let owed = self.leader.owed.pop_front().expect("front exists");
            if let Owed::PubAck { reply } = owed.owed {
                answers.push(Answer::PubAck {
                    reply,
                    sequence,
                    duplicate: false,
                });
            }
        }
    }

    /// Applies one committed entry at `now_ns` (the host's clock, for
    /// the live consumers' timers only): what every host answers from.
    /// While in office the live consumers follow the log.
    pub(super) async fn apply_entry(
        &mut self,
        entry: Entry,
        now_ns: u64,
    ) -> Result<ReplicaApplied, ReplicaError> {
        assert!(
            entry.index == self.state.applied_index + 1,
            "stream {}: entry {} applies after {}",
            self.name,
            entry.index,
            self.state.applied_index
        );
        let entry = match self.canary {
            Some(StreamCanary::LocalInterest) => self.with_local_interest(entry),
            _ => entry,
        };
        let EntryApplied {
            superseded,
            applied,
            released,
        } = self
            .leader
            .apply(&mut self.state, &mut self.consumers, &entry)
            .await?;
        let mut removed = None;
        if let (Some(applied), Some(_)) = (&applied, self.office_term) {
            removed = self
                .consumers
                .applied(&self.state, entry.index, applied, now_ns)?;
        }
        Ok(ReplicaApplied {
            superseded,
            applied,
            released,
            removed,
        })
    }

    /// Applies one committed entry; the replies it releases (or fails, for
    /// proposals it superseded) go to `answers`.
    pub async fn apply(
        &mut self,
        entry: Entry,
        now_ns: u64,
        answers: &mut Vec<Answer>,
    ) -> Result<(), ReplicaError> {
        let ReplicaApplied {
            superseded,
            applied,
            released,
            removed,
        } = self.apply_entry(entry, now_ns).await?;
        for owed in superseded {
            fail(owed, &ApiError::cluster_not_leader(), answers);
        }
        let stored_sequence = match &applied {
            Some(Applied::Message { sequence }) => Some(*sequence),
            _ => None,
        };
        let deleted = match &applied {
            Some(Applied::Deleted { removed }) => Some(*removed),
            _ => None,
        };
        // Acks waiting for a deleted consumer's next state entry fail.
        for waiter in removed.into_iter().flat_map(|removed| removed.waiting) {
            if let Waiter::Ack { reply } = waiter {
                answers.push(Answer::Failed {
                    reply,
                    error: ApiError::consumer_not_found(),
                });
            }
        }
        for owed in released {
            match (owed, stored_sequence) {
                (Owed::PubAck { reply }, Some(sequence)) => answers.push(Answer::PubAck {
                    reply,
                    sequence,
                    duplicate: false,
                }),
                (Owed::Duplicate { reply, sequence }, _) => answers.push(Answer::PubAck {
                    reply,
                    sequence,
                    duplicate: true,
                }),
                (
                    Owed::Consumer(ConsumerOwed::Reply {
                        origin: None,
                        reply,
                        ..
                    }),
                    _,
                ) => answers.push(Answer::AckConfirmed { reply }),
                (
                    Owed::Delete {
                        reply: Some(reply), ..
                    },
                    _,
                ) if deleted.is_some() => answers.push(Answer::Deleted {
                    reply,
                    removed: deleted == Some(true),
                }),
                (owed, _) => fail(owed, &ApiError::cluster_not_leader(), answers),
            }
        }
        Ok(())
    }

    /// Canary only: a message entry of an interest stream rewritten to
    /// keep the message exactly when this replica's own consumers want it.
    fn with_local_interest(&self, entry: Entry) -> Entry {
        let EntryKind::Normal(data) = &entry.kind else {
            return entry;
        };
        if self.state.config.retention != Retention::Interest {
            return entry;
        }
        let Ok(Operation::Message {
            sequence,
            timestamp_ns,
            subject,
            headers,
            payload,
            ..
        }) = Operation::decode(data)
        else {
            return entry;
        };
        let retained = self.consumers.wants(&subject);
        let operation = Operation::Message {
            sequence,
            timestamp_ns,
            subject,
            headers,
            payload,
            retained,
        };
        Entry {
            kind: EntryKind::Normal(operation.encode()),
            ..entry
        }
    }

    /// A client's delete of message `sequence`: proposed by the leader,
    /// answered once the entry applies.
    pub fn delete_message(
        &mut self,
        node: &mut Node,
        sequence: u64,
        reply: Bytes,
        answers: &mut Vec<Answer>,
    ) {
        let Some(reply) = self.refused_unless_leading(node, reply, answers) else {
            return;
        };
        let operation = Operation::Delete {
            sequence,
            erase: false,
        };
        match node.propose(operation.encode()) {
            Ok(index) => self.leader.owe(
                node.term(),
                index,
                self.state.applied_index,
                Owed::Delete {
                    origin: 0,
                    reply: Some(reply),
                },
            ),
            Err(_) => answers.push(Answer::Failed {
                reply,
                error: ApiError::cluster_not_leader(),
            }),
        }
    }

    // ----- durable consumers --------------------------------------------------

    /// Proposes a durable consumer's create (or config update) with
    /// `config_json` (a consumer config's stored JSON); it exists once the
    /// entry applies.
    pub fn add_consumer(
        &mut self,
        node: &mut Node,
        name: &str,
        config_json: Bytes,
        now_ns: u64,
    ) -> Result<u64, ApiError> {
        if !self.is_leading(node) {
            return Err(ApiError::cluster_not_leader());
        }
        let created_unix_ns = self
            .state
            .logged_consumers
            .get(name)
            .map_or(now_ns, |logged| logged.created_unix_ns);
        let operation = Operation::ConsumerCreate {
            name: name.to_string(),
            created_unix_ns,
            start_sequence: 1,
            json: config_json,
        };
        node.propose(operation.encode())
            .map_err(|_| ApiError::cluster_not_leader())
    }

    /// Proposes a durable consumer's delete; it is gone once the entry
    /// applies (acks still waiting for it then fail).
    pub fn delete_consumer(&mut self, node: &mut Node, name: &str) -> Result<u64, ApiError> {
        if !self.is_leading(node) {
            return Err(ApiError::cluster_not_leader());
        }
        let operation = Operation::ConsumerDelete {
            name: name.to_string(),
        };
        node.propose(operation.encode())
            .map_err(|_| ApiError::cluster_not_leader())
    }

    /// A client's pull request for consumer `name` (the leader's): a
    /// `MSG.NEXT` `body` answered on `inbox`, through `outlet` (statuses
    /// at once, deliveries when the leader next serves).
    pub fn pull(
        &mut self,
        node: &Node,
        outlet: &mut impl Outlet,
        name: &str,
        inbox: Bytes,
        body: &[u8],
        now_ns: u64,
    ) -> Result<(), ApiError> {
        if !self.is_leading(node) {
            return Err(ApiError::cluster_not_leader());
        }
        if !self.consumers.contains(name) {
            return Err(ApiError::consumer_not_found());
        }
        let parsed = RequestBody::parse(body);
        self.consumers.pull(outlet, name, inbox, parsed, now_ns);
        Ok(())
    }

    /// The live consumers' timers due at `now_ns` (redeliveries, pull
    /// expiries, heartbeats) through `outlet`; returns the consumers past
    /// their inactive threshold, for the host to delete.
    pub(super) fn run_timers(&mut self, outlet: &mut impl Outlet, now_ns: u64) -> Vec<String> {
        self.consumers.run_timers(outlet, &self.state, now_ns)
    }

    /// Deliveries to the live consumers' clients through `outlet` at
    /// `now_ns` (`max_payload_bytes`: the server's, what a paced push
    /// consumer's bucket holds when the stream sets no max_msg_size;
    /// `seed` tags flow control requests).
    pub(super) async fn deliver(
        &mut self,
        outlet: &mut impl Outlet,
        max_payload_bytes: u64,
        seed: u64,
        now_ns: u64,
    ) -> Result<Delivered, StoreError> {
        // A paced bucket holds one message at most, as nats-server's.
        let burst_bytes = match self.state.config.max_msg_size {
            size if size > 0 => size as u64,
            _ => max_payload_bytes,
        };
        let round = DeliveryRound {
            state: &self.state,
            stream: &self.name,
            burst_bytes,
            seed,
            now_ns,
        };
        self.consumers
            .deliver(outlet, round, &mut self.scratch)
            .await
    }

    /// The leader serves its consumers at `now_ns`: timers due, then
    /// deliveries through `outlet`; what went to consumers that take no
    /// acks is released through the log. Returns the removals proposed.
    pub async fn serve(
        &mut self,
        node: &mut Node,
        outlet: &mut impl Outlet,
        now_ns: u64,
    ) -> Result<usize, StoreError> {
        if !self.is_leading(node) {
            return Ok(0);
        }
        self.run_timers(outlet, now_ns);
        let delivered = self
            .deliver(
                outlet,
                SERVE_MAX_PAYLOAD_BYTES,
                now_ns ^ node.term(),
                now_ns,
            )
            .await?;
        let mut released = 0;
        for sequence in delivered.unacknowledged {
            released += self.release(node, sequence, None);
        }
        Ok(released)
    }

    /// A double ack of one delivery: confirmed by an
    /// [`Answer::AckConfirmed`] once a state entry holding it applied.
    pub fn ack(
        &mut self,
        node: &mut Node,
        name: &str,
        delivery: Delivery,
        reply: Bytes,
        now_ns: u64,
        answers: &mut Vec<Answer>,
    ) -> usize {
        let Some(reply) = self.refused_unless_leading(node, reply, answers) else {
            return 0;
        };
        let (stream_sequence, consumer_sequence) =
            (delivery.stream_sequence, delivery.consumer_sequence);
        let acked = if self.canary == Some(StreamCanary::AckBeforeState) {
            match self
                .consumers
                .ack_unconfirmed(name, stream_sequence, consumer_sequence, now_ns)
            {
                Some(moved) => {
                    answers.push(Answer::AckConfirmed { reply });
                    moved
                }
                None => {
                    answers.push(Answer::Failed {
                        reply,
                        error: ApiError::consumer_not_found(),
                    });
                    return 0;
                }
            }
        } else {
            match self
                .consumers
                .ack(name, stream_sequence, consumer_sequence, reply, now_ns)
            {
                Ok(moved) => moved,
                Err(reply) => {
                    answers.push(Answer::Failed {
                        reply,
                        error: ApiError::consumer_not_found(),
                    });
                    return 0;
                }
            }
        };
        // Interest retention: what no consumer needs any more goes,
        // through the log.
        self.release(node, stream_sequence, acked.moved())
    }

    /// Interest and work-queue retention: proposes the removal of
    /// `sequence` and of what an ack floor passed (`floor_moved`) once no
    /// live consumer needs them ([`Leader::release`]). Returns the
    /// removals proposed.
    pub(super) fn release(
        &mut self,
        node: &mut Node,
        sequence: u64,
        floor_moved: Option<std::ops::RangeInclusive<u64>>,
    ) -> usize {
        let consumers = &self.consumers;
        self.leader.release(
            &self.state,
            node,
            sequence,
            floor_moved,
            |subject, candidate| consumers.needs(subject, candidate),
        )
    }

    /// The leader's turn: a state entry proposed for every durable whose
    /// live state moved (at most one in flight each), with the replies
    /// that waited for it, for the host to owe or answer. A refused
    /// proposal (leadership moving: a transfer under way, or stepped
    /// down) leaves the state due, for whoever leads next. Every host's
    /// one way to propose consumer state (the stream task, the simulator).
    pub(super) fn propose_due_states(
        &mut self,
        node: &mut Node,
    ) -> Result<Vec<DueState>, StateEntryTooLarge> {
        let mut proposals = Vec::new();
        for name in self.consumers.due_names() {
            let Some(due) = self.consumers.take_due_entry(&name, &self.name)? else {
                continue;
            };
            let outcome = match due.entry {
                None => StateOutcome::NothingNew,
                Some((operation, state, signature)) => match node.propose(operation.encode()) {
                    Ok(index) => {
                        self.consumers.proposed(&name, state, signature, index);
                        StateOutcome::Proposed {
                            term: node.term(),
                            index,
                        }
                    }
                    Err(error) => StateOutcome::Refused(error),
                },
            };
            proposals.push(DueState {
                name,
                outcome,
                waiting: due.waiting,
            });
        }
        Ok(proposals)
    }

    /// The simulator's host of [`Self::propose_due_states`]: acks owed
    /// until their entry applies, confirmed at once when nothing changed,
    /// failed with 10009 when the proposal was refused.
    pub fn propose_consumer_states(
        &mut self,
        node: &mut Node,
        answers: &mut Vec<Answer>,
    ) -> Result<(), ReplicaError> {
        if !self.is_leading(node) {
            return Ok(());
        }
        for due in self.propose_due_states(node)? {
            let acks = due.waiting.into_iter().filter_map(|waiter| match waiter {
                Waiter::Ack { reply } => Some(reply),
                Waiter::Info { .. } => None,
            });
            match due.outcome {
                StateOutcome::NothingNew => {
                    answers.extend(acks.map(|reply| Answer::AckConfirmed { reply }))
                }
                StateOutcome::Refused(_) => answers.extend(acks.map(|reply| Answer::Failed {
                    reply,
                    error: ApiError::cluster_not_leader(),
                })),
                StateOutcome::Proposed { term, index } => {
                    for reply in acks {
                        self.leader.owe(
                            term,
                            index,
                            self.state.applied_index,
                            Owed::Consumer(ConsumerOwed::Reply {
                                origin: None,
                                reply,
                                body: Bytes::new(),
                            }),
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// The durable consumers as this replica applied them.
    pub fn logged_consumers(&self) -> &BTreeMap<String, LoggedConsumer> {
        &self.state.logged_consumers
    }

    /// The leader's live delivery state of consumer `name`.
    pub fn live_delivery(&self, node: &Node, name: &str) -> Option<&DeliveryState> {
        if !self.is_leading(node) {
            return None;
        }
        self.consumers.get(name).map(|consumer| &consumer.delivery)
    }

    /// The last sequence the stream used.
    pub fn last_sequence(&self) -> u64 {
        with_store!(&self.state.store, log => log.last_sequence())
    }

    /// What the store holds, in sequence order (sequence, time, subject).
    pub fn contents(&self) -> Vec<StoredSummary> {
        let mut found = Vec::new();
        let mut from = 0;
        while let Some(sequence) =
            with_store!(&self.state.store, log => log.next_matching(from, |_| true))
        {
            let timestamp_ns =
                with_store!(&self.state.store, log => log.timestamp_of(sequence)).expect("listed");
            let subject = with_store!(&self.state.store, log => log.subject_of(sequence))
                .map(Bytes::copy_from_slice)
                .expect("listed");
            found.push(StoredSummary {
                sequence,
                timestamp_ns,
                subject,
            });
            from = sequence + 1;
        }
        found
    }

    /// A stored message's payload.
    pub async fn payload(&self, sequence: u64) -> Result<Option<Vec<u8>>, StoreError> {
        let message = with_store!(&self.state.store, log => log.get(sequence).await)?;
        Ok(message.map(|message| message.payload))
    }
}

/// Fails replies a replica that left office still owed (not leader).
pub fn fail_superseded(owed: Vec<Owed>, answers: &mut Vec<Answer>) {
    let not_leader = ApiError::cluster_not_leader();
    for owed in owed {
        fail(owed, &not_leader, answers);
    }
}

fn fail(owed: Owed, error: &ApiError, answers: &mut Vec<Answer>) {
    match owed {
        Owed::PubAck { reply }
        | Owed::Duplicate { reply, .. }
        | Owed::Consumer(ConsumerOwed::Reply {
            origin: None,
            reply,
            ..
        }) => answers.push(Answer::Failed {
            reply,
            error: error.clone(),
        }),
        Owed::Delete {
            reply: Some(reply), ..
        } => answers.push(Answer::Failed {
            reply,
            error: error.clone(),
        }),
        // API answers and consumer replies are the stream task's.
        Owed::Purge { .. } | Owed::Delete { .. } | Owed::Update { .. } | Owed::Consumer(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use futures_lite::future::block_on;
    use tern_raft::{Config, Membership, Restore};

    use super::super::config as stream_config;
    use super::super::deliveries::{Outlet, RecordingOutlet};
    use super::*;

    fn leader_node() -> Node {
        let mut node = Node::new(
            Config::new(1),
            Restore {
                membership: Membership::new(vec![1]),
                seed: 1,
                ..Restore::default()
            },
        );
        node.campaign_now();
        node
    }

    /// A memory stream of `config_json` whose only voter leads, in office.
    fn leading(config_json: &str) -> (Node, Replica) {
        let config = stream_config::parse("S", config_json.as_bytes(), true).expect("valid");
        let mut node = leader_node();
        let mut replica = block_on(Replica::in_memory(config, None)).expect("opens");
        let mut answers = Vec::new();
        settle(&mut node, &mut replica, &mut answers);
        block_on(replica.follow_leadership(&node, 1_000, &mut answers)).expect("memory");
        assert!(answers.is_empty());
        (node, replica)
    }

    /// Durable consumer `C` (explicit acks, `ack_wait_ns`) through the log.
    fn add_durable(node: &mut Node, replica: &mut Replica, ack_wait_ns: u64) {
        let json = format!(
            r#"{{"name":"C","durable_name":"C","deliver_policy":"all","ack_policy":"explicit","ack_wait":{ack_wait_ns}}}"#
        );
        replica
            .add_consumer(node, "C", Bytes::from(json), 1_000)
            .expect("leads");
        let mut answers = Vec::new();
        settle(node, replica, &mut answers);
        assert!(answers.is_empty());
    }

    /// What a no-wait pull request for `count` gets at once.
    fn fetch(
        replica: &mut Replica,
        node: &mut Node,
        name: &str,
        count: usize,
        now_ns: u64,
    ) -> Vec<Delivery> {
        let mut outlet = RecordingOutlet::default();
        let body = format!(r#"{{"batch":{count},"no_wait":true}}"#);
        replica
            .pull(
                node,
                &mut outlet,
                name,
                Bytes::from("inbox"),
                body.as_bytes(),
                now_ns,
            )
            .expect("leads");
        block_on(replica.serve(node, &mut outlet, now_ns)).expect("memory store");
        outlet.deliveries
    }

    /// Drives the single voter until everything proposed applied.
    fn settle(node: &mut Node, replica: &mut Replica, answers: &mut Vec<Answer>) {
        while node.has_ready() {
            let ready = node.ready();
            node.advance(ready.number);
            for entry in ready.committed {
                block_on(replica.apply(entry, 0, answers)).expect("memory store");
            }
        }
    }

    /// A durable consumer lives in the log: its create and its delivery
    /// state apply on the replica, a double ack is confirmed only once a
    /// state entry holding it applied, and a replica installed from a
    /// snapshot leads on with the same state (acked messages stay acked,
    /// the unacked one is redelivered after its ack wait).
    #[test]
    fn a_consumer_state_survives_a_snapshot_and_a_new_leader() {
        let (mut node, mut replica) =
            leading(r#"{"name":"S","subjects":["s.>"],"storage":"memory"}"#);
        let mut answers = Vec::new();
        add_durable(&mut node, &mut replica, 1000);
        assert!(replica.logged_consumers().contains_key("C"));
        for number in 0..3 {
            let message = PendingMessage::new(b"s.a", b"", format!("m{number}").as_bytes());
            replica.publish(&mut node, message, Bytes::from("p"), 2_000, &mut answers);
        }
        settle(&mut node, &mut replica, &mut answers);
        answers.clear();
        let deliveries = fetch(&mut replica, &mut node, "C", 10, 3_000);
        let sequences: Vec<u64> = deliveries.iter().map(|d| d.stream_sequence).collect();
        assert_eq!(sequences, [1, 2, 3]);
        for delivery in &deliveries[..2] {
            let reply = Bytes::from(format!("ack{}", delivery.stream_sequence));
            replica.ack(&mut node, "C", *delivery, reply, 3_000, &mut answers);
        }
        assert!(answers.is_empty(), "not confirmed before its state entry");
        replica
            .propose_consumer_states(&mut node, &mut answers)
            .expect("fits");
        assert!(answers.is_empty(), "not confirmed before the entry applied");
        settle(&mut node, &mut replica, &mut answers);
        let confirmed: Vec<Bytes> = answers
            .drain(..)
            .map(|answer| match answer {
                Answer::AckConfirmed { reply } => reply,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(confirmed, [Bytes::from("ack1"), Bytes::from("ack2")]);
        // An ack of a sequence this leader never delivered is refused.
        let never = Delivery {
            stream_sequence: 9,
            consumer_sequence: 9,
            delivery_count: 1,
        };
        replica.ack(
            &mut node,
            "C",
            never,
            Bytes::from("ack9"),
            3_000,
            &mut answers,
        );
        assert!(matches!(answers.pop(), Some(Answer::Failed { .. })));

        let (index, term) = replica.mark_snapshot();
        let whole = block_on(replica.snapshot_whole()).expect("reads");
        let mut installed = block_on(Replica::from_snapshot(&whole, None)).expect("installs");
        assert_eq!(installed.logged_consumers().len(), 1);
        assert_eq!(installed.logged_consumers(), replica.logged_consumers());
        let mut other = Node::new(
            Config::new(1),
            Restore {
                membership: Membership::new(vec![1]),
                snapshot: Some(tern_raft::Snapshot {
                    index,
                    term,
                    membership: Membership::new(vec![1]),
                }),
                seed: 2,
                ..Restore::default()
            },
        );
        other.campaign_now();
        settle(&mut other, &mut installed, &mut answers);
        block_on(installed.follow_leadership(&other, 4_000, &mut answers)).expect("memory");
        assert!(installed.is_leading(&other));
        let live = installed.live_delivery(&other, "C").expect("runs");
        assert_eq!(live.ack_floor().1, 2, "the confirmed acks");
        let again = fetch(&mut installed, &mut other, "C", 10, 1_000_000);
        let sequences: Vec<u64> = again.iter().map(|d| d.stream_sequence).collect();
        assert_eq!(
            sequences,
            [3],
            "only the unacked message, after its ack wait"
        );
    }

    /// What reaches a push consumer's deliver subject without an ack
    /// subject (idle heartbeats, flow control requests), besides what a
    /// [`RecordingOutlet`] records.
    #[derive(Default)]
    struct StatusOutlet {
        recording: RecordingOutlet,
        statuses: Vec<Bytes>,
    }

    impl Outlet for StatusOutlet {
        fn interest_generation(&self) -> u64 {
            self.recording.interest_generation()
        }

        fn has_interest(&self, subject: &[u8]) -> bool {
            self.recording.has_interest(subject)
        }

        fn deliver(
            &mut self,
            inbox: &[u8],
            subject: &[u8],
            reply: Option<&[u8]>,
            header_bytes: usize,
            body: &[u8],
        ) {
            if reply.is_none() {
                self.statuses.push(Bytes::copy_from_slice(body));
            }
            self.recording
                .deliver(inbox, subject, reply, header_bytes, body);
        }

        fn publish(&mut self, subject: &[u8], header_bytes: usize, body: &[u8]) {
            self.recording.publish(subject, header_bytes, body);
        }
    }

    /// A push consumer's idle heartbeats go on under a leader that takes
    /// office with nothing to deliver: they are due one interval after it
    /// took office (a leader once armed them only at a create and at
    /// deliveries, so after a stepdown an idle consumer's client heard
    /// nothing, and took it for gone).
    #[test]
    fn a_new_leader_sends_an_idle_push_consumers_heartbeats() {
        const HEARTBEAT_NS: u64 = 1_000_000_000;
        let (mut node, mut replica) =
            leading(r#"{"name":"S","subjects":["s.>"],"storage":"memory"}"#);
        let json = format!(
            r#"{{"name":"P","durable_name":"P","deliver_policy":"all","ack_policy":"explicit","deliver_subject":"d","idle_heartbeat":{HEARTBEAT_NS}}}"#
        );
        replica
            .add_consumer(&mut node, "P", Bytes::from(json), 1_000)
            .expect("leads");
        let mut answers = Vec::new();
        settle(&mut node, &mut replica, &mut answers);
        let mut outlet = StatusOutlet::default();
        block_on(replica.serve(&mut node, &mut outlet, 1_000 + HEARTBEAT_NS)).expect("memory");
        assert_eq!(outlet.statuses.len(), 1, "the first leader's heartbeat");

        // Another replica takes office (from a snapshot of this one).
        let (index, term) = replica.mark_snapshot();
        let whole = block_on(replica.snapshot_whole()).expect("reads");
        let mut installed = block_on(Replica::from_snapshot(&whole, None)).expect("installs");
        let mut other = Node::new(
            Config::new(1),
            Restore {
                membership: Membership::new(vec![1]),
                snapshot: Some(tern_raft::Snapshot {
                    index,
                    term,
                    membership: Membership::new(vec![1]),
                }),
                seed: 2,
                ..Restore::default()
            },
        );
        other.campaign_now();
        settle(&mut other, &mut installed, &mut answers);
        let office_ns = 5 * HEARTBEAT_NS;
        block_on(installed.follow_leadership(&other, office_ns, &mut answers)).expect("memory");
        assert!(installed.is_leading(&other));
        let mut outlet = StatusOutlet::default();
        block_on(installed.serve(&mut other, &mut outlet, office_ns + HEARTBEAT_NS - 1))
            .expect("memory");
        assert!(outlet.statuses.is_empty(), "{:?}", outlet.statuses);
        block_on(installed.serve(&mut other, &mut outlet, office_ns + HEARTBEAT_NS))
            .expect("memory");
        assert_eq!(outlet.statuses.len(), 1, "{:?}", outlet.statuses);
        assert!(
            outlet.statuses[0].starts_with(b"NATS/1.0 100 Idle Heartbeat\r\n"),
            "{:?}",
            outlet.statuses[0]
        );
        assert!(outlet.recording.deliveries.is_empty());
    }

    /// The production pull path as a replica serves it: a no-wait request
    /// on nothing is answered 404 on its inbox; a batch takes what there
    /// is, in order, each delivery named by its ack subject; what was not
    /// acked comes again (delivery count 2) once its ack wait passed and
    /// the timers ran, and an acked message does not.
    #[test]
    fn pull_requests_are_served_by_the_delivery_loop() {
        let (mut node, mut replica) =
            leading(r#"{"name":"S","subjects":["s.>"],"storage":"memory"}"#);
        let mut answers = Vec::new();
        add_durable(&mut node, &mut replica, 1000000);

        let mut outlet = RecordingOutlet::default();
        let no_wait = br#"{"batch":5,"no_wait":true}"#;
        replica
            .pull(&node, &mut outlet, "C", Bytes::from("in.1"), no_wait, 2_000)
            .expect("leads");
        block_on(replica.serve(&mut node, &mut outlet, 2_000)).expect("memory store");
        assert!(outlet.deliveries.is_empty());
        let (inbox, status) = outlet.published.pop().expect("answered");
        assert_eq!(&inbox[..], b"in.1");
        assert!(
            status.starts_with(b"NATS/1.0 404 No Messages"),
            "{status:?}"
        );

        for number in 0..3 {
            let message = PendingMessage::new(b"s.a", b"", format!("m{number}").as_bytes());
            replica.publish(&mut node, message, Bytes::from("p"), 3_000, &mut answers);
        }
        settle(&mut node, &mut replica, &mut answers);
        let first = fetch(&mut replica, &mut node, "C", 2, 4_000);
        let second = fetch(&mut replica, &mut node, "C", 5, 4_000);
        let delivered: Vec<(u64, u64, u64)> = first
            .iter()
            .chain(&second)
            .map(|d| (d.stream_sequence, d.consumer_sequence, d.delivery_count))
            .collect();
        assert_eq!(delivered, [(1, 1, 1), (2, 2, 1), (3, 3, 1)]);
        answers.clear();
        replica.ack(
            &mut node,
            "C",
            first[0],
            Bytes::from("a1"),
            5_000,
            &mut answers,
        );
        assert!(answers.is_empty());

        let early = fetch(&mut replica, &mut node, "C", 5, 500_000);
        assert!(early.is_empty(), "before the ack wait: {early:?}");
        let again = fetch(&mut replica, &mut node, "C", 5, 2_000_000);
        let redelivered: Vec<(u64, u64)> = again
            .iter()
            .map(|d| (d.stream_sequence, d.delivery_count))
            .collect();
        assert_eq!(redelivered, [(2, 2), (3, 2)], "the acked one stays acked");
    }

    /// A snapshot holds what the replica holds: installed elsewhere it
    /// gives the same contents, payloads, applied index and last sequence
    /// (with the last messages deleted), and the new replica leads on
    /// from there with the next sequence.
    #[test]
    fn a_snapshot_installs_the_same_stream() {
        let (mut node, mut replica) = leading(
            r#"{"name":"S","subjects":["s.>"],"storage":"memory","max_msgs_per_subject":2}"#,
        );
        let mut answers = Vec::new();
        assert!(replica.is_leading(&node));
        for (number, subject) in ["s.a", "s.b", "s.a", "s.a", "s.c"].iter().enumerate() {
            let message =
                PendingMessage::new(subject.as_bytes(), b"", format!("m{number}").as_bytes());
            replica.publish(
                &mut node,
                message,
                Bytes::from("reply"),
                2_000,
                &mut answers,
            );
            settle(&mut node, &mut replica, &mut answers);
        }
        let delete = Operation::Delete {
            sequence: 5,
            erase: false,
        };
        node.propose(delete.encode()).expect("leads");
        settle(&mut node, &mut replica, &mut answers);
        let sequences: Vec<u64> = answers
            .iter()
            .map(|answer| match answer {
                Answer::PubAck { sequence, .. } => *sequence,
                Answer::Failed { error, .. } => panic!("refused: {error:?}"),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(sequences, [1, 2, 3, 4, 5]);
        let snapshot = block_on(replica.snapshot_whole()).expect("reads");
        let mut installed = block_on(Replica::from_snapshot(&snapshot, None)).expect("installs");
        assert_eq!(
            installed.last_sequence(),
            5,
            "the deleted last still counts"
        );
        assert_eq!(installed.applied_index(), replica.applied_index());
        assert_eq!(installed.contents(), replica.contents());
        assert_eq!(
            installed
                .contents()
                .iter()
                .map(|m| m.sequence)
                .collect::<Vec<_>>(),
            [2, 3, 4],
            "s.a keeps two, 5 deleted"
        );
        for sequence in 2..=4 {
            assert_eq!(
                block_on(installed.payload(sequence)).expect("reads"),
                block_on(replica.payload(sequence)).expect("reads")
            );
        }
        let again = block_on(installed.snapshot_whole()).expect("reads");
        assert_eq!(
            again, snapshot,
            "a snapshot of the installed replica is the same"
        );
    }
}
