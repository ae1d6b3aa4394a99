//! The stream task on its owner shard, the host of the stream's
//! [`Replica`]: opening and recovery (the replica takes office once its
//! log applied), the turn (commands, committed entries, consumers' timers
//! and deliveries, expiry, checkpoints), ingest, and the answers of what
//! applies. Its API answers are `api.rs`, its consumers' delivery
//! `consumers.rs` and their log entries `persistence.rs`.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tern_raft::{Entry, HardState, Membership, Node, Restore, Snapshot};
use tern_storage::block_store::{DmaFiles, Manifest, MemoryFiles, StoreError, StreamLog};
use tern_storage::JournalError;

use super::super::api::error::ApiError;
use super::super::api::responses::{self, ApiReply};
use super::super::entry::{Operation, CONSUMER_STATE_BYTES_MAX};
use super::super::expiry::Expiry;
use super::super::persist::{self, RaftState};
use super::super::{now_unix_ns, JetStream};
use super::api::InfoQuery;
use super::config::{StorageType, StreamConfig};
use super::consumer_leader::Waiter;
use super::core::{Checkpoint, CoreStart, LogPosition, Policy, StreamCore};
use super::failure::StreamFailure;
use super::groups::{Persistence, StreamGroups};
use super::leader::{Owed, OwedReply};
use super::replica::{Answer, NodeView, Replica, ReplicaApplied};
use super::state::{Applied, ReplicatedState};
use super::*;

/// Commands one turn of the task handles before driving Raft and the journal.
const COMMANDS_PER_TURN_MAX: usize = 4096;
/// Block store write size (its write-behind buffer).
const STORE_WRITE_BYTES: usize = 256 << 10;
/// How often max_age is enforced at the latest.
const AGE_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// The one voter of a single-node stream group.
const NODE_ID: u64 = 1;
/// How often a replicated stream looks at its node's leadership at the
/// latest.
const LEADERSHIP_CHECK_INTERVAL: Duration = Duration::from_millis(50);
/// Committed entries a turn applies at most (the rest wait a turn, so
/// commands are not starved).
const COMMITTED_PER_TURN_MAX: usize = 8192;

/// Block-store segments stop growing at 64 MiB, or at the largest message
/// the server accepts if that is larger: a message that passed ingest must
/// always fit one (a store refusing it at apply time would take the stream
/// offline).
fn segment_bytes_max(js: &JetStream) -> u64 {
    const SEGMENT_BYTES: u64 = 64 << 20;
    let limits = &js.shard().limits;
    let largest = tern_storage::block_store::stored_message_bytes(
        limits.max_control_line_bytes,
        0,
        limits.max_payload_bytes,
    );
    SEGMENT_BYTES.max(largest.next_multiple_of(4096))
}

/// A file stream's block store (the journal makes messages durable).
pub(super) fn file_store_config(js: &JetStream) -> tern_storage::block_store::StreamConfig {
    let mut config = tern_storage::block_store::StreamConfig {
        message_bytes: file_message_bytes,
        // The journal makes messages durable; the store syncs only at
        // checkpoints (`StreamLog::sync`).
        sync: false,
        // Nothing reads recent messages from memory until consumers
        // arrive; the cache would copy every message.
        tail_cache_bytes: 0,
        // Smaller writes queue less ahead of the journal's when both share
        // a device (a larger message gets a buffer of its own for its
        // flush).
        write_buffer_bytes: STORE_WRITE_BYTES,
        segment_bytes_max: segment_bytes_max(js),
        ..tern_storage::block_store::StreamConfig::default()
    };
    // Sizes from the I/O profile `tern iotune` measured, when there is one.
    if let Some(settings) = js.config.io_settings {
        config.write_buffer_bytes = settings.store_write_buffer_bytes as usize;
        config.read_ahead_bytes = settings.store_read_ahead_bytes as usize;
        config.prefetch_runs = settings.store_prefetch_runs as usize;
    }
    config
}

/// A block-store directory's files (created if missing).
pub(super) async fn open_messages_directory(
    directory: &std::path::Path,
) -> Result<DmaFiles, StreamFailure> {
    DmaFiles::open(directory)
        .await
        .map_err(|source| StreamFailure::Open {
            directory: directory.display().to_string(),
            source,
        })
}

/// A memory stream's block store.
pub(super) fn memory_store_config(js: &JetStream) -> tern_storage::block_store::StreamConfig {
    tern_storage::block_store::StreamConfig {
        message_bytes: memory_message_bytes,
        sync: false,
        write_buffer_bytes: 64 << 10,
        tail_cache_bytes: 0,
        segment_bytes_max: segment_bytes_max(js),
        ..tern_storage::block_store::StreamConfig::default()
    }
}

/// Held create and update replies, at most.
const UPDATE_REPLIES_MAX: usize = 64;
/// How long a create or update reply is held for its config to apply
/// (clients' API timeouts are a few seconds).
const UPDATE_REPLY_HOLD: Duration = Duration::from_secs(30);

/// A create or update reply held until its config is in force.
pub(super) struct UpdateReply {
    origin: usize,
    reply: Bytes,
    config: Box<StreamConfig>,
    /// A create (answered as `stream_create_response`), with
    /// `"did_create":true` or not; `None` for an update.
    create: Option<bool>,
    held_at: Instant,
}

/// Everything recovery found for one stream.
pub struct Recovered {
    pub raft: Option<RaftState>,
    pub hard_state: Option<HardState>,
    /// Entries after the raft file's applied index, in index order.
    pub entries: Vec<Entry>,
    /// The voters of a replicated stream (Raft node ids of the nodes
    /// holding it); empty: one voter, this node.
    pub peers: Vec<u64>,
    /// The last entry this node acknowledged (its journal's last, before
    /// a gap dropped some).
    pub acknowledged_index: u64,
    /// A replica added to an existing group: it never stands first.
    pub joining: bool,
    /// Nonzero: the entries after the checkpoint were lost (the journal or
    /// the checkpoint gone, the hard state kept in the votes file) through
    /// this term: `Restore::entries_lost_through_term`.
    pub entries_lost_through_term: u64,
}

pub struct StreamTask {
    pub(super) js: Rc<JetStream>,
    pub(super) handle: Rc<StreamHandle>,
    /// The replica and the host's decisions around it, sans-IO
    /// (`core.rs`): what this task carries out.
    pub(super) core: StreamCore,
    pub(super) files: Option<DmaFiles>,
    /// The shard's stream groups, this stream's among them.
    pub(super) groups: Rc<StreamGroups>,
    pub(super) persistence: Persistence,
    /// A client read found damage: the stream stops after answering it.
    pub(super) read_damage: RefCell<Option<StoreError>>,
    pub(super) failure: Option<String>,
    pub(super) acks: AckWriter,
    pub(super) consumers_file: ConsumersFile,
    pub(super) serving: Serving,
}

/// PubAcks written from one prefix into one buffer.
pub(super) struct AckWriter {
    /// `{"stream":"<name>","seq":`.
    pub(super) prefix: String,
    pub(super) buffer: String,
}

/// The `consumers` file as the task last wrote or found it.
pub(super) struct ConsumersFile {
    /// Whether one was written or found (so a checkpoint rewrites it also
    /// once the last durable is gone).
    pub(super) written: bool,
    /// The one the next `raft` file names (the last written).
    pub(super) reference: Option<persist::ConsumersReference>,
}

/// What the replica in office holds for clients.
pub(super) struct Serving {
    /// The task's stream subjects are subscribed (a replicated stream's
    /// only while it leads).
    pub(super) subscribed: bool,
    /// Create and update replies answered once their config applied, by
    /// the replica in office (every replica's node holds them, so a
    /// leader that is down does not leave the client unanswered).
    pub(super) update_replies: Vec<UpdateReply>,
    /// Consumer API calls that reached this replica elected but not yet in
    /// office (its log still applying): run once it takes office, or
    /// answered 10008 if it lost the election first.
    pub(super) awaiting_office: Vec<ApiCall>,
    /// When the leader next looks for messages past max_age.
    pub(super) age_check_at: Instant,
    /// The last turn's deliveries stopped at their budget: the next turn
    /// comes at once (after the shard's other tasks had theirs).
    pub(super) deliveries_pending: bool,
}

impl Serving {
    /// Whether another consumer API call may wait for office
    /// ([`AWAITING_OFFICE_MAX`]).
    pub(super) fn has_room_awaiting_office(&self) -> bool {
        self.awaiting_office.len() < AWAITING_OFFICE_MAX
    }
}

/// Monotonic nanoseconds for the core's timers (since the first call).
pub(super) fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Consumer API calls one replica holds while it takes office (more are
/// answered 10008 at once).
pub(super) const AWAITING_OFFICE_MAX: usize = 1024;

impl StreamTask {
    /// Opens the stream's store and Raft node, replays what the journal
    /// holds past the last checkpoint, and returns the task ready to run.
    pub async fn open(
        js: Rc<JetStream>,
        handle: Rc<StreamHandle>,
        config: Rc<StreamConfig>,
        created_unix_ns: u64,
        group: u64,
        files: Option<DmaFiles>,
        recovered: Recovered,
    ) -> Result<StreamTask, StreamFailure> {
        let store = match config.storage {
            StorageType::File => {
                let generation = recovered.raft.as_ref().map_or(0, |raft| raft.generation);
                remove_other_messages_directories(
                    &js.stream_directory(&handle.name),
                    generation,
                    &handle.name,
                );
                let directory = js
                    .stream_directory(&handle.name)
                    .join(persist::messages_directory(generation));
                let files = open_messages_directory(&directory).await?;
                let store_config = file_store_config(&js);
                // The checkpoint says which files hold what: anything it
                // names that is missing, shortened or altered keeps the
                // stream offline; anything after it is replayed from the
                // journal.
                let manifest = &recovered
                    .raft
                    .as_ref()
                    .expect("a file stream has a raft file")
                    .manifest;
                let (log, report) = StreamLog::open(files, store_config, manifest)
                    .await
                    .map_err(|source| StreamFailure::Recover {
                        directory: directory.display().to_string(),
                        source,
                    })?;
                if !report.files_removed.is_empty() {
                    log::info!(target: "tern::jetstream", "stream {}: removed {:?} (not in the checkpoint)", handle.name, report.files_removed);
                }
                Store::File(log)
            }
            StorageType::Memory => {
                let store_config = memory_store_config(&js);
                // A memory store is new at every start: an empty log.
                let (log, _) =
                    StreamLog::open(MemoryFiles::new(), store_config, &Manifest::new(1)).await?;
                Store::Memory(log)
            }
        };
        let persistence = match config.storage {
            StorageType::File => Persistence::Journal,
            StorageType::Memory => Persistence::Memory,
        };
        let raft = recovered
            .raft
            .clone()
            .unwrap_or_else(|| RaftState::created(1));
        let mut hard_state = HardState {
            term: raft.term,
            vote: (raft.vote != 0).then_some(raft.vote),
        };
        if let Some(journaled) = recovered.hard_state {
            if journaled.term >= hard_state.term {
                hard_state = journaled;
            }
        }
        let replicated = recovered.peers.len() > 1;
        // In a cluster every group runs under the node's id (a one-voter
        // stream may gain voters); on a single server, under 1.
        let node_id = js.node_id().unwrap_or(NODE_ID);
        assert!(
            !replicated || js.node_id().is_some(),
            "a replicated stream runs in a cluster"
        );
        let membership = match replicated {
            true => Membership::new(recovered.peers.clone()),
            false => Membership::new(vec![node_id]),
        };
        // A new replicated stream: its first node stands for election at
        // once (the others wait their timeout), so the create's answer
        // and the first publishes do not wait for one.
        let stand_first = replicated
            && !recovered.joining
            && raft.applied_index == 0
            && recovered.entries.is_empty()
            && hard_state.term == 0
            && recovered.peers.first() == Some(&node_id);
        let snapshot = (raft.applied_index > 0).then(|| Snapshot {
            index: raft.applied_index,
            term: raft.applied_term,
            membership: membership.clone(),
        });
        let acknowledged_index = recovered
            .entries
            .last()
            .map_or(raft.applied_index, |entry| entry.index)
            .max(recovered.acknowledged_index);
        let node = Node::new(
            tern_raft::Config::new(node_id),
            Restore {
                hard_state,
                snapshot,
                entries: recovered.entries,
                membership: membership.clone(),
                acknowledged_index,
                entries_lost_through_term: recovered.entries_lost_through_term,
                seed: group ^ node_id,
            },
        );
        let groups = js.groups().clone();
        groups.insert(group, node, persistence, handle.clone())?;
        let state_entry_bytes_max = js
            .journal_if_open()
            .map_or(CONSUMER_STATE_BYTES_MAX, |journal| {
                journal.config().body_bytes_max()
            })
            .min(CONSUMER_STATE_BYTES_MAX);
        let replica = Replica::new(
            ReplicatedState {
                stored_last_unix_ns: raft.last_unix_ns,
                applied_index: raft.applied_index,
                applied_term: raft.applied_term,
                ..ReplicatedState::new(store, config)
            },
            state_entry_bytes_max,
            None,
        );
        let core = StreamCore::new(CoreStart {
            replica,
            membership,
            group,
            created_unix_ns,
            hard_state,
            state_entry_bytes_max,
            generation: raft.generation,
            policy: Policy::PRODUCTION,
            now_ns: monotonic_ns(),
        });
        let subscribed = !replicated;
        let mut task = StreamTask::new(js, handle, core, files, groups, persistence, subscribed);
        if stand_first {
            task.groups.with_node(group, Node::campaign_now);
        }
        task.acks.prefix = {
            let full = responses::pub_ack(&task.handle.name, 1, false, None);
            full.strip_suffix("1}")
                .expect("a PubAck ends with the sequence")
                .to_string()
        };
        match task.recover(&raft).await {
            Ok(()) => Ok(task),
            Err(error) => {
                task.groups.remove(group);
                Err(error)
            }
        }
    }

    /// The task around its core (`subscribed`: its stream's subjects are,
    /// as a one-voter stream's are from the start).
    fn new(
        js: Rc<JetStream>,
        handle: Rc<StreamHandle>,
        core: StreamCore,
        files: Option<DmaFiles>,
        groups: Rc<StreamGroups>,
        persistence: Persistence,
        subscribed: bool,
    ) -> StreamTask {
        StreamTask {
            js,
            handle,
            core,
            files,
            groups,
            persistence,
            read_damage: RefCell::new(None),
            failure: None,
            acks: AckWriter {
                prefix: String::new(),
                buffer: String::with_capacity(128),
            },
            consumers_file: ConsumersFile {
                written: false,
                reference: None,
            },
            serving: Serving {
                subscribed,
                update_replies: Vec::new(),
                awaiting_office: Vec::new(),
                age_check_at: Instant::now(),
                deliveries_pending: false,
            },
        }
    }

    /// Writes the stream's config file (a file stream's; `stored` is the
    /// JSON `JetStream::stored_config_json` made).
    pub(super) async fn write_config_file(&self, stored: &str) -> Result<(), StreamFailure> {
        if let Some(files) = &self.files {
            persist::write_config(files, stored.as_bytes(), self.core.created_unix_ns).await?;
        }
        Ok(())
    }

    /// Consumers as of the checkpoint, then everything the log holds
    /// after it, applied as the only voter; then the replica takes office.
    pub(super) async fn recover(&mut self, raft: &RaftState) -> Result<(), StreamFailure> {
        // Durable consumers as of the checkpoint; the log's consumer
        // entries after it apply on top.
        self.load_consumers(raft).await?;
        if self.handle.is_replicated() {
            // The node's log starts at the checkpoint: the point a
            // follower too far behind is sent, should this node lead.
            if raft.applied_index > 0 {
                self.core.replica.mark_snapshot();
            }
            debug_assert!(self.has_point_for_raft_snapshot());
            // Entries apply as a leader commits them (this node's or
            // another's); the replica takes office if it is elected.
            self.note_stored_last_timestamp();
            self.core.replica.state.rebuild_expiry().await?;
            self.refresh_snapshot();
            return Ok(());
        }
        // Become leader (the only voter) and apply everything recovered.
        self.groups.with_node(self.core.group, Node::campaign_now);
        self.settle().await?;
        self.after_recovery().await
    }

    /// Takes office once the node leads and its log applied (the live
    /// consumers start from what the log holds); leaves it when the node
    /// no longer leads, failing what was owed.
    pub(super) async fn follow_leadership(&mut self) -> Result<(), StreamFailure> {
        let view = self.groups.node(self.core.group, NodeView::of);
        let unanswered = self.core.replica.follow(view, now_unix_ns()).await?;
        let not_leader = ApiError::cluster_not_leader();
        for waiter in unanswered.waiting {
            match waiter {
                // As a failed owed double ack: no reply (the client
                // retries after its timeout).
                Waiter::Ack { .. } => {}
                Waiter::Info { origin, reply } => {
                    self.answer_error(origin, Some(reply), "consumer_info_response", &not_leader)
                }
            }
        }
        for owed in unanswered.owed {
            self.fail_owed(owed, &not_leader);
        }
        Ok(())
    }

    /// Whether its Raft node is leader (in office, or still applying its
    /// log to take office).
    pub(super) fn is_elected(&self) -> bool {
        self.groups.node(self.core.group, |node: &Node| {
            node.role() == tern_raft::Role::Leader
        })
    }

    /// Whether the replica leads (in office, its node leader in that term).
    pub(super) fn is_leading(&self) -> bool {
        let view = self.groups.node(self.core.group, NodeView::of);
        self.core.replica.leads(view)
    }

    /// The last stored message's time as the store has it (`last_ts`
    /// outlives the message).
    fn note_stored_last_timestamp(&mut self) {
        let state = with_store!(&self.core.replica.state.store, log => log.state());
        self.core.replica.state.stored_last_unix_ns = self
            .core
            .replica
            .state
            .stored_last_unix_ns
            .max(state.last_timestamp_ns);
    }

    /// State that follows from the store once recovery applied everything.
    pub(super) async fn after_recovery(&mut self) -> Result<(), StreamFailure> {
        self.note_stored_last_timestamp();
        self.follow_leadership().await?;
        assert!(
            self.is_leading(),
            "stream {}: the only voter leads once its log applied",
            self.handle.name
        );
        self.core.replica.state.rebuild_expiry().await?;
        self.core
            .replica
            .state
            .enforce_size_limits(&mut self.core.replica.consumers);
        // What aged out while the server was down goes before the stream
        // serves, through the log like any expiry.
        let now_ns = now_unix_ns();
        while self.core.replica.state.config.max_age_ns > 0 && {
            let (leader, state, consumers, name) = (
                &mut self.core.replica.leader,
                &mut self.core.replica.state,
                &self.core.replica.consumers,
                &self.handle.name,
            );
            self.groups.with_node(self.core.group, |node| {
                leader.expire_aged(state, consumers, node, name, now_ns)
            })
        } {
            self.settle().await?;
        }
        self.settle().await?;
        self.refresh_snapshot();
        Ok(())
    }

    /// Applies what commits until everything proposed has applied
    /// (opening: the only voter commits alone).
    pub(super) async fn settle(&mut self) -> Result<(), StreamFailure> {
        loop {
            self.apply_committed().await?;
            if self.core.replica.state.applied_index
                >= self.groups.node(self.core.group, Node::last_index)
            {
                return Ok(());
            }
            let (handle, groups) = (self.handle.clone(), self.groups.clone());
            let journal = self.persistence == Persistence::Journal;
            handle
                .wake
                .wait_until(|| {
                    !handle.committed.borrow().is_empty() || (journal && groups.failure().is_some())
                })
                .await;
        }
    }

    /// Why this stream's group cannot go on (the journal stopped).
    pub(super) fn groups_failure(&self) -> Option<JournalError> {
        match self.persistence {
            Persistence::Journal => self.groups.failure(),
            Persistence::Memory => None,
        }
    }

    /// Applies what the groups driver handed over (at most
    /// [`COMMITTED_PER_TURN_MAX`] entries), then compacts the node's
    /// in-memory log up to there: the only voter never sends applied
    /// entries to a follower, and the journal keeps them until the
    /// checkpoint.
    pub(super) async fn apply_committed(&mut self) -> Result<(), StreamFailure> {
        if let Some(failure) = self.groups_failure() {
            return Err(failure.into());
        }
        let entries: Vec<Entry> = {
            let mut committed = self.handle.committed.borrow_mut();
            let count = committed.len().min(COMMITTED_PER_TURN_MAX);
            committed.drain(..count).collect()
        };
        if entries.is_empty() {
            return Ok(());
        }
        if !self.handle.committed.borrow().is_empty() {
            self.handle.wake.wake_all();
        }
        // One clock read for the batch (the live consumers' timers only).
        let now_ns = now_unix_ns();
        for entry in entries {
            if !self.core.admits(&entry) {
                continue;
            }
            let membership_change = match &entry.kind {
                tern_raft::EntryKind::AddVoter(_) | tern_raft::EntryKind::RemoveVoter(_) => {
                    Some(entry.kind.clone())
                }
                _ => None,
            };
            if self.handle.is_replicated() {
                if let tern_raft::EntryKind::Normal(data) = &entry.kind {
                    if super::super::entry::is_config(data) {
                        let data = data.clone();
                        self.before_config_entry(&data).await?;
                    }
                }
            }
            self.apply(entry, now_ns).await?;
            if let Some(change) = membership_change {
                self.membership_applied(change).await?;
            }
        }
        if let Some(snapshot) = self.core.compaction(self.handle.is_replicated()) {
            self.groups.compact(self.core.group, snapshot);
        }
        Ok(())
    }

    /// A replicated stream's config entry, before it applies: everything
    /// before it is checkpointed, then the config file takes the new
    /// config. A restart then never replays an entry from before the
    /// change under the new config (a loosened limit would bring back what
    /// the old one removed), and one that stops between the two replays
    /// the change from the log.
    async fn before_config_entry(&mut self, data: &Bytes) -> Result<(), StreamFailure> {
        if self.files.is_none() {
            return Ok(());
        }
        let Ok(Operation::Config { json }) = Operation::decode(data) else {
            return Ok(());
        };
        self.checkpoint().await?;
        let stored = self.js.stored_config_json(
            self.core.group,
            &String::from_utf8_lossy(&json),
            &self.core.membership.voters,
        );
        let files = self.files.as_ref().expect("checked above");
        persist::write_config(files, stored.as_bytes(), self.core.created_unix_ns).await?;
        Ok(())
    }

    /// A replicated stream's leader proposes the config the catalog gave
    /// the stream, if it has not applied yet and is not in flight.
    pub(super) fn propose_desired_config(&mut self) -> Result<(), StreamFailure> {
        let Some(desired) = self.core.desired_config.as_deref() else {
            return Ok(());
        };
        if *desired == *self.core.replica.state.config {
            self.core.desired_config = None;
            return Ok(());
        }
        let term = self.groups.node(self.core.group, Node::term);
        let in_flight = self
            .core
            .config_proposal
            .is_some_and(|(index, proposed_term)| {
                proposed_term == term && index > self.core.replica.state.applied_index
            });
        if in_flight || !self.is_leading() {
            return Ok(());
        }
        let operation = Operation::Config {
            json: Bytes::from(desired.to_stored_json()),
        };
        // Leadership moving: the next turn of the next leader proposes it.
        if let Some(index) = self.propose_as_leader(&operation, "config update")? {
            self.core.config_proposal = Some((index, term));
        }
        Ok(())
    }

    /// Update replies whose config applied here.
    /// Answers the held create and update replies whose config is in
    /// force, if this replica answers for the stream (it is the only voter,
    /// or the leader in office); drops those held past
    /// [`UPDATE_REPLY_HOLD`] (their clients gave up).
    pub(super) fn answer_updates(&mut self) {
        let now = Instant::now();
        self.serving
            .update_replies
            .retain(|held| now.duration_since(held.held_at) < UPDATE_REPLY_HOLD);
        let config = self.core.replica.state.config.clone();
        if self.handle.is_replicated() && !self.is_leading() {
            // Another replica leads: it answers what is in force here (a
            // client is answered once, not again by each later leader).
            let this = self.js.node_id();
            if self
                .handle
                .leader
                .get()
                .is_some_and(|leader| Some(leader) != this)
            {
                self.serving
                    .update_replies
                    .retain(|held| *held.config != *config);
            }
            return;
        }
        let (applied, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.serving.update_replies)
            .into_iter()
            .partition(|held| *held.config == *config);
        self.serving.update_replies = waiting;
        for held in applied {
            let kind = match held.create {
                Some(_) => "stream_create_response",
                None => "stream_update_response",
            };
            let did_create = held.create.unwrap_or(false);
            let body = self.info_response(InfoQuery {
                did_create,
                ..InfoQuery::config(kind)
            });
            self.js.respond(held.origin, held.reply, body);
        }
    }

    /// Holds a create or update reply for [`Self::answer_updates`]
    /// (bounded: past [`UPDATE_REPLIES_MAX`] the oldest goes unanswered,
    /// and its client retries).
    pub(super) fn hold_update_reply(
        &mut self,
        origin: usize,
        reply: Bytes,
        config: Box<StreamConfig>,
        create: Option<bool>,
    ) {
        if self.serving.update_replies.len() >= UPDATE_REPLIES_MAX {
            self.serving.update_replies.remove(0);
        }
        self.serving.update_replies.push(UpdateReply {
            origin,
            reply,
            config,
            create,
            held_at: Instant::now(),
        });
    }

    /// A replicated stream, each turn: the replica takes or leaves office
    /// with its node's leadership, its subjects follow (only the leader's
    /// subscriptions route publishes, acks and direct gets to it, from
    /// every node), and the handle shows who leads for requests to be
    /// handed there.
    pub(super) async fn follow_replication(&mut self) -> Result<(), StreamFailure> {
        self.follow_leadership().await?;
        let leading = self.is_leading();
        let (leader, term) = self
            .groups
            .node(self.core.group, |node| (node.leader(), node.term()));
        let previous = self.handle.leader.replace(leader);
        if let Some(leader) = leader.filter(|&leader| previous != Some(leader)) {
            self.js.log_stream_leader(&self.handle.name, leader, term);
        }
        self.handle.leading.set(leading);
        if leading {
            self.propose_desired_config()?;
            self.change_membership();
        }
        if leading && !self.serving.subscribed {
            let config = self.core.replica.state.config.clone();
            self.js.subscribe_stream(&self.handle, &config);
            self.serving.subscribed = true;
            log::info!(target: "tern::jetstream", "stream {}: this replica leads (term {})", self.handle.name, self.groups.node(self.core.group, Node::term));
        } else if !leading && self.serving.subscribed {
            self.js.unsubscribe_stream(&self.handle.name);
            self.serving.subscribed = false;
        }
        // After subscribing: a creator answered here finds the leader.
        if !self.serving.update_replies.is_empty() {
            self.answer_updates();
        }
        Ok(())
    }

    /// Runs until the stream is deleted or the shard stops.
    pub async fn run(mut self) {
        let mut rebuild = false;
        loop {
            self.wait_for_work().await;
            if self.js.stopping() {
                let _ = self.checkpoint().await;
                break;
            }
            if let Err(error) = self.turn().await {
                // Its own files damaged, with peers to rebuild from.
                rebuild = error.is_local_damage()
                    && self.handle.is_replicated()
                    && self.files.is_some()
                    && !self.js.stopping();
                self.fail(error);
            }
            if self.handle.stopped.get() {
                break;
            }
        }
        self.handle.stopped.set(true);
        if rebuild {
            self.rebuild_from_peers().await;
        } else {
            self.groups.remove(self.core.group);
        }
    }

    pub(super) async fn wait_for_work(&self) {
        if self.serving.deliveries_pending {
            futures_lite::future::yield_now().await;
            return;
        }
        let handle = self.handle.clone();
        let js = self.js.clone();
        let groups = self.groups.clone();
        let journal = self.persistence == Persistence::Journal;
        let commands = async {
            handle
                .wake
                .wait_until(|| {
                    !handle.commands.borrow().is_empty()
                        || !handle.committed.borrow().is_empty()
                        || handle.has_snapshot_work()
                        || handle.leadership_moved.get()
                        || (journal && groups.failure().is_some())
                        || js.stopping()
                })
                .await;
        };
        let timer = tern_shard::timer::sleep(self.next_timer());
        let stopping = self.js.wait_stopping();
        // A push consumer with work waits for a subscriber to appear.
        let interest = async {
            match self.awaiting_interest_since() {
                Some(generation) => {
                    let shard = self.js.shard();
                    shard
                        .routing
                        .interest_changed
                        .wait_until(|| shard.routing.interest_generation() != generation)
                        .await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        futures_lite::future::or(
            commands,
            futures_lite::future::or(futures_lite::future::or(timer, stopping), interest),
        )
        .await;
    }

    pub(super) fn next_timer(&self) -> Duration {
        let mut next = AGE_CHECK_INTERVAL;
        for due_ns in [
            self.core
                .replica
                .state
                .expiry
                .as_ref()
                .and_then(Expiry::next_due_ns),
            self.consumers_wake_at_ns(),
        ]
        .into_iter()
        .flatten()
        {
            next = next.min(Duration::from_nanos(due_ns.saturating_sub(now_unix_ns())));
        }
        if let Some(due_ns) = self.core.checkpoint_in_ns(monotonic_ns()) {
            next = next.min(Duration::from_nanos(due_ns));
        }
        next = next.min(
            self.serving
                .age_check_at
                .saturating_duration_since(Instant::now()),
        );
        if self.handle.is_replicated() {
            // Leadership can go without an entry committing here.
            next = next.min(LEADERSHIP_CHECK_INTERVAL);
        }
        next.max(Duration::from_millis(1))
    }

    pub(super) async fn turn(&mut self) -> Result<(), StreamFailure> {
        // A follower's install comes before the entries after it.
        self.snapshot_work().await?;
        self.apply_committed().await?;
        if self.core.removed_from_group {
            self.leave_group().await;
            return Ok(());
        }
        self.handle.take_leadership_moved();
        if self.handle.is_replicated() {
            self.follow_replication().await?;
            if !self.serving.awaiting_office.is_empty() && (self.is_leading() || !self.is_elected())
            {
                let mut queue = self.handle.commands.borrow_mut();
                for call in self.serving.awaiting_office.drain(..).rev() {
                    queue.push_front(Command::Api(call));
                }
            }
        }
        self.run_commands().await?;
        if self.handle.stopped.get() {
            return Ok(());
        }
        // A placement that found the group's removal of this node applied.
        if self.core.removed_from_group {
            self.leave_group().await;
            return Ok(());
        }
        self.consumers_and_limits(now_unix_ns()).await?;
        if self.core.checkpoint_due(monotonic_ns()) {
            self.checkpoint().await?;
        }
        self.refresh_snapshot();
        Ok(())
    }

    /// The commands queued for the task (at most
    /// [`COMMANDS_PER_TURN_MAX`] a turn), in arrival order, until one
    /// stops the stream.
    async fn run_commands(&mut self) -> Result<(), StreamFailure> {
        let commands: Vec<Command> = {
            let mut queue = self.handle.commands.borrow_mut();
            let count = queue.len().min(COMMANDS_PER_TURN_MAX);
            queue.drain(..count).collect()
        };
        if !self.handle.commands.borrow().is_empty() {
            self.handle.wake.wake_all();
        }
        // One clock read for the turn's acks (an API call may wait: read
        // again after one).
        let mut commands_now_ns = now_unix_ns();
        for command in commands {
            match command {
                Command::Publish(inbound) => self.ingest(inbound),
                Command::Api(call) => {
                    self.api(call).await?;
                    if let Some(damage) = self.read_damage.borrow_mut().take() {
                        return Err(damage.into());
                    }
                    commands_now_ns = now_unix_ns();
                }
                Command::Consumer(command) => self.consumer_command(command, commands_now_ns),
                Command::ConsumerDetails(request) => {
                    request.answer(self.consumer_details(request.config))
                }
            }
            if self.handle.stopped.get() {
                return Ok(());
            }
        }
        Ok(())
    }

    /// What time brings a turn: consumer timers and deliveries, durable
    /// consumers' state entries, per-message expiry and `max_age`.
    async fn consumers_and_limits(&mut self, now_ns: u64) -> Result<(), StreamFailure> {
        if self
            .consumers_wake_at_ns()
            .is_some_and(|wake_ns| wake_ns <= now_ns)
        {
            self.consumer_timers(now_ns);
        }
        self.serving.deliveries_pending = false;
        if !self.core.replica.consumers.is_empty() {
            self.deliver_to_consumers().await?;
            self.publish_all_events();
        }
        // Durable consumers' state entries (one in flight each; the next
        // once it applied).
        if self.core.replica.consumers.has_logged() {
            self.propose_consumer_snapshots()?;
        }
        if self
            .core
            .replica
            .state
            .expiry
            .as_ref()
            .and_then(Expiry::next_due_ns)
            .is_some_and(|due_ns| due_ns <= now_ns)
        {
            let (leader, state, consumers, name) = (
                &mut self.core.replica.leader,
                &mut self.core.replica.state,
                &self.core.replica.consumers,
                &self.handle.name,
            );
            self.groups.with_node(self.core.group, |node| {
                leader.expire_due(state, consumers, node, name, now_ns)
            });
        }
        if Instant::now() >= self.serving.age_check_at {
            self.serving.age_check_at = Instant::now() + AGE_CHECK_INTERVAL;
            if self.core.replica.state.config.max_age_ns > 0 && {
                let (leader, state, consumers, name) = (
                    &mut self.core.replica.leader,
                    &mut self.core.replica.state,
                    &self.core.replica.consumers,
                    &self.handle.name,
                );
                self.groups.with_node(self.core.group, |node| {
                    leader.expire_aged(state, consumers, node, name, now_ns)
                })
            } {
                // More aged out than one entry holds: again next turn.
                self.serving.age_check_at = Instant::now();
            }
        }
        Ok(())
    }

    pub(super) fn fail(&mut self, error: StreamFailure) {
        log::error!(target: "tern::jetstream", "stream {} stopped: {error}", self.handle.name);
        self.failure = Some(error.to_string());
        self.refresh_snapshot();
        // Everything owed fails; nothing more is accepted.
        let owed: Vec<OwedReply> = self.core.replica.leader.owed.drain(..).collect();
        let failure = ApiError::store_failed(self.failure.as_deref().unwrap_or("failed"));
        for owed in owed {
            self.fail_owed(owed.owed, &failure);
        }
        self.handle.stopped.set(true);
        let commands: Vec<Command> = self.handle.commands.borrow_mut().drain(..).collect();
        let offline = ApiError::stream_offline(self.failure.as_deref().unwrap_or("failed"));
        for command in commands {
            match command {
                Command::Publish(Inbound {
                    reply: Some(reply), ..
                }) => {
                    self.js.publish_reply(
                        &reply,
                        responses::pub_ack_error(&self.handle.name, &failure).as_bytes(),
                    );
                }
                Command::Api(ApiCall {
                    kind: StreamApi::DirectGet { .. },
                    reply,
                    ..
                }) => self.js.no_responders(reply),
                Command::Api(call) => {
                    let kind = call.kind.response_kind();
                    self.js
                        .answer_error(call.origin, call.reply, kind, &offline);
                }
                // Its waiter gives up at its timeout.
                Command::Publish(_) | Command::Consumer(_) | Command::ConsumerDetails(_) => {}
            }
        }
    }

    /// Answers an owed reply with `error`.
    pub(super) fn fail_owed(&self, owed: Owed, error: &ApiError) {
        match owed {
            Owed::PubAck { reply } | Owed::Duplicate { reply, .. } => {
                self.js.publish_reply(
                    &reply,
                    responses::pub_ack_error(&self.handle.name, error).as_bytes(),
                );
            }
            Owed::Purge { origin, reply } => {
                self.answer_error(origin, reply, "stream_purge_response", error)
            }
            Owed::Delete { origin, reply } => {
                self.answer_error(origin, reply, "stream_msg_delete_response", error)
            }
            Owed::Update { origin, reply } => {
                self.answer_error(origin, reply, "stream_update_response", error)
            }
            Owed::Consumer(owed) => self.fail_consumer_owed(owed, error),
        }
    }

    pub(super) fn refresh_snapshot(&self) {
        let mut snapshot = self.handle.snapshot.borrow_mut();
        snapshot.config = self.core.replica.state.config.clone();
        snapshot.state = with_store!(&self.core.replica.state.store, log => log.state());
        snapshot.last_unix_ns = self.core.replica.state.stored_last_unix_ns;
        snapshot.failure = self.failure.clone();
        // In office its live consumers (durables and ephemerals); a
        // follower holds the durables of its log (as a nats-server
        // follower counts the consumer replicas it holds).
        snapshot.consumers = if self.core.replica.in_office() {
            self.core.replica.consumers.len()
        } else {
            self.core.replica.state.logged_consumers.len()
        };
        let bytes = snapshot.state.bytes;
        drop(snapshot);
        // A stopped stream keeps its last count until it is deleted
        // (`forget_stream`), a deleted one is not counted again.
        if !self.handle.stopped.get() {
            self.js.count_stored_bytes(&self.handle, bytes);
        }
    }

    /// The `raft` file of `checkpoint`, its store synced to `manifest`.
    pub(super) fn checkpoint_state(&self, checkpoint: Checkpoint, manifest: Manifest) -> RaftState {
        let hard_state = self
            .groups
            .durable_hard_state(self.core.group)
            .unwrap_or(self.core.hard_state);
        RaftState {
            term: hard_state.term,
            vote: hard_state.vote.unwrap_or(0),
            applied_index: checkpoint.index,
            applied_term: checkpoint.term,
            last_unix_ns: self.core.replica.state.stored_last_unix_ns,
            consumers: self.consumers_file.reference,
            manifest,
            generation: checkpoint.generation,
        }
    }

    /// Where the group's node log stands.
    pub(super) fn log_position(&self) -> LogPosition {
        self.groups.node(self.core.group, LogPosition::of)
    }

    /// The checkpoint the core asks for, if any: the store flushed
    /// (synced), the applied index recorded, and the journal let recycle
    /// what is older.
    pub(super) async fn checkpoint(&mut self) -> Result<(), StreamFailure> {
        let Some(checkpoint) = self.core.checkpoint(self.log_position()) else {
            return Ok(());
        };
        self.checkpoint_consumers().await?;
        let manifest = with_store!(&mut self.core.replica.state.store, log => log.sync().await)?;
        if let Some(files) = &self.files {
            let state = self.checkpoint_state(checkpoint, manifest);
            persist::write_raft(files, &state).await?;
            // Only now may the journal recycle what the block store holds,
            // and the block store drop files the older checkpoint named.
            self.js
                .journal()
                .checkpoint(self.core.group, checkpoint.index);
        }
        with_store!(&mut self.core.replica.state.store, log => log.checkpointed().await)?;
        self.core.checkpointed(checkpoint, monotonic_ns());
        Ok(())
    }

    // ----- ingest --------------------------------------------------------------

    /// A publish: the replica's leader checks and proposes it; the reply
    /// is owed until its entry applies, or answered at once.
    pub(super) fn ingest(&mut self, inbound: Inbound) {
        let Inbound { message, reply } = inbound;
        let replica = &mut self.core.replica;
        let answer = self.groups.with_node(self.core.group, |node| {
            replica.ingest(node, message, reply, now_unix_ns())
        });
        let body = match answer {
            None => return,
            Some(Answer::PubAck {
                reply,
                sequence,
                duplicate,
            }) => (
                reply,
                responses::pub_ack(&self.handle.name, sequence, duplicate, None),
            ),
            Some(Answer::Failed { reply, error }) => {
                (reply, responses::pub_ack_error(&self.handle.name, &error))
            }
            Some(other) => unreachable!("a publish is answered by a PubAck: {other:?}"),
        };
        self.js.publish_reply(&body.0, body.1.as_bytes());
    }

    // ----- apply -----------------------------------------------------------------

    /// Applies one committed entry (the path `Replica` takes too), then
    /// does what only this task does with it: live consumers following the
    /// log, subscriptions following a config, and the replies it releases.
    pub(super) async fn apply(&mut self, entry: Entry, now_ns: u64) -> Result<(), StreamFailure> {
        let ReplicaApplied {
            superseded,
            applied,
            mut released,
            removed,
        } = self.core.replica.apply_entry(entry, now_ns).await?;
        for owed in superseded {
            self.fail_owed(owed, &ApiError::cluster_not_leader());
        }
        if let Some(removed) = removed {
            self.close_consumer(removed);
        }
        let stored_sequence = match applied {
            Some(applied) => self.follow_applied(applied, &mut released),
            None => None,
        };
        for owed in released {
            {
                match (owed, stored_sequence) {
                    (Owed::PubAck { reply }, Some(sequence)) => {
                        // `{"stream":"<name>","seq":` is the same every time.
                        let mut ack = std::mem::take(&mut self.acks.buffer);
                        ack.clear();
                        ack.push_str(&self.acks.prefix);
                        let _ = std::fmt::Write::write_fmt(&mut ack, format_args!("{sequence}}}"));
                        self.js.publish_reply(&reply, ack.as_bytes());
                        self.acks.buffer = ack;
                    }
                    (owed, _) => self.send_owed(owed),
                }
            }
        }
        Ok(())
    }

    /// What the operation did, followed by this task: subscriptions, and
    /// the API answers among `released` that need the result (taken out of
    /// them); the live consumers followed in the replica. A message's
    /// sequence is returned for its PubAck.
    pub(super) fn follow_applied(
        &mut self,
        applied: Applied,
        released: &mut [Owed],
    ) -> Option<u64> {
        match applied {
            Applied::Message { sequence } => return Some(sequence),
            Applied::ConsumerCreated { .. }
            | Applied::ConsumerDeleted { .. }
            | Applied::ConsumerState { .. } => {}
            Applied::Purged { count } => {
                for owed in released.iter_mut() {
                    if let Owed::Purge { origin, reply } = owed {
                        if let Some(reply) = reply.take() {
                            self.js
                                .respond(*origin, reply, responses::purge_response(count));
                        }
                    }
                }
            }
            Applied::Deleted { removed } => {
                for owed in released.iter_mut() {
                    if let Owed::Delete { origin, reply } = owed {
                        if let Some(reply) = reply.take() {
                            let answer = if removed {
                                ApiReply::success(responses::message_delete_response())
                            } else {
                                ApiReply::error(
                                    "stream_msg_delete_response",
                                    &ApiError::message_delete_failed("no message found"),
                                )
                            };
                            self.js.respond(*origin, reply, answer);
                        }
                    }
                }
            }
            Applied::Expired => {}
            Applied::Config { changed_from } => {
                if !self.serving.update_replies.is_empty() {
                    self.answer_updates();
                }
                if let Some(old) = changed_from {
                    // A replicated stream's subjects are subscribed only
                    // while it leads (and follow its config when it does).
                    if self.serving.subscribed {
                        self.js.stream_subjects_changed(
                            &self.handle,
                            &old,
                            &self.core.replica.state.config,
                        );
                    }
                    // Age is the leader's to decide: its next check, at once.
                    self.serving.age_check_at = Instant::now();
                    self.refresh_snapshot();
                }
                let owed: Vec<(usize, Option<Bytes>)> = released
                    .iter_mut()
                    .filter_map(|owed| match owed {
                        Owed::Update { origin, reply } => Some((*origin, reply.take())),
                        _ => None,
                    })
                    .collect();
                for (origin, reply) in owed {
                    let body = self.info_response(InfoQuery::config("stream_update_response"));
                    if let Some(reply) = reply {
                        self.js.respond(origin, reply, body);
                    }
                }
            }
        }
        None
    }

    /// Owes a reply once the entry this leader proposed at `index` (in its
    /// current term) applies.
    pub(super) fn owe(&mut self, index: u64, owed: Owed) {
        let term = self.groups.node(self.core.group, Node::term);
        self.core
            .replica
            .leader
            .owe(term, index, self.core.replica.state.applied_index, owed);
    }

    /// The last index of the group's log (proposed, maybe not committed).
    pub(super) fn last_index(&self) -> u64 {
        self.groups.node(self.core.group, Node::last_index)
    }

    /// Proposes `operation` to the group.
    pub(super) fn propose(&self, operation: &Operation) -> Result<u64, tern_raft::ProposeError> {
        self.groups
            .with_node(self.core.group, |node| node.propose(operation.encode()))
    }

    /// Proposes `operation` (`what`, for the failure) as the leader: its
    /// index, or `None` when a replicated stream's leadership is moving
    /// (its node stepped down, or hands leadership over and takes no
    /// proposals until the transfer ends): nothing was proposed, and the
    /// caller answers 10009 or tries again on a later turn. A single
    /// voter always leads and never transfers: a refusal there is a bug.
    pub(super) fn propose_as_leader(
        &self,
        operation: &Operation,
        what: &'static str,
    ) -> Result<Option<u64>, StreamFailure> {
        match self.propose(operation) {
            Ok(index) => Ok(Some(index)),
            Err(
                tern_raft::ProposeError::NotLeader { .. } | tern_raft::ProposeError::Transferring,
            ) if self.handle.is_replicated() => Ok(None),
            Err(error) => Err(StreamFailure::Refused { what, error }),
        }
    }

    pub(super) fn send_owed(&self, owed: Owed) {
        match owed {
            Owed::PubAck { .. } => {
                unreachable!("a PubAck is owed only by a message entry, which has a sequence")
            }
            Owed::Duplicate { reply, sequence } => {
                self.js.publish_reply(
                    &reply,
                    responses::pub_ack(&self.handle.name, sequence, true, None).as_bytes(),
                );
            }
            Owed::Consumer(owed) => self.send_consumer_owed(owed),
            Owed::Purge { .. } | Owed::Delete { .. } | Owed::Update { .. } => {}
        }
    }
}

/// Removes the stream's block-store directories other than `generation`'s:
/// a snapshot staged when the node stopped, or a store an install replaced
/// (docs/stream-snapshots.md).
fn remove_other_messages_directories(stream: &std::path::Path, generation: u64, name: &str) {
    let Ok(entries) = std::fs::read_dir(stream) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(other) = entry
            .file_name()
            .to_str()
            .and_then(persist::messages_generation)
        else {
            continue;
        };
        if other == generation {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => {
                log::info!(target: "tern::jetstream", "stream {name}: removed {} (the checkpoint names messages generation {generation})", entry.path().display())
            }
            Err(error) => {
                log::warn!(target: "tern::jetstream", "stream {name}: removing {}: {error}", entry.path().display())
            }
        }
    }
}
