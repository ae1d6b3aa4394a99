//! One stream on its owner shard: a task that owns the stream's block store
//! and its ingest state, fed by a command queue, whose Raft group (one voter
//! here) runs with every other stream group of the shard in the shard's
//! [`StreamGroups`] (a `MultiRaft`). Everything that touches the stream
//! goes through that queue, in order, so a read sees every write
//! acknowledged before it.
//!
//! Publish path inside the owner shard:
//! 1. the router matches the stream's internal subscription and calls
//!    [`StreamHandle::publish`], which queues the message (no I/O);
//! 2. the task checks the publish headers and limits against the state
//!    including messages still in flight, assigns the sequence and time, and
//!    proposes the encoded [`Operation::Message`] to its group's node;
//! 3. the shard's groups driver takes one flush of every group's ready and
//!    appends its entries and hard states to the shard's journal: one
//!    O_DIRECT write + sync commits them all (group commit; no timer);
//! 4. when the journal says the flush is durable, the groups advance, the
//!    entry commits (the only voter has it), the driver hands it to the
//!    task, which applies it to the block store (buffered) and sends the
//!    PubAck.
//!
//! Checkpoints flush the block store (synced), record the applied index in
//! the `raft` file, and tell the journal it may recycle what is older.
//! Memory streams run the same path without the journal: their Raft log is
//! "durable" at once, and nothing survives a restart but their config.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use bytes::Bytes;
use tern_raft::Entry;
use tern_shard::Waiters;
use tern_storage::block_store::{DmaFiles, MemoryFiles, StoreError, StreamLog, StreamState};

use super::api::error::ApiError;
use super::entry::PendingMessage;
use super::now_unix_ns;
use config::{Retention, StorageType, StreamConfig};

/// Publishes queued for a stream before new ones are refused (429).
pub const QUEUED_COMMANDS_MAX: usize = 65536;
/// Messages one turn removes for their TTL; the rest wait a turn.
const EXPIRED_PER_TURN_MAX: usize = 4096;

/// A message published into the stream, already encoded as the operation
/// that will store it (sequence and time filled in at ingest).
pub struct Inbound {
    pub message: PendingMessage,
    pub reply: Option<Bytes>,
}

/// An API call the owner shard handles for this stream.
pub struct ApiCall {
    pub origin: usize,
    pub reply: Option<Bytes>,
    pub payload: Bytes,
    pub kind: StreamApi,
}

pub enum StreamApi {
    Info,
    Purge,
    MessageGet,
    MessageDelete,
    /// `$JS.API.DIRECT.GET.<stream>[.<subject>]`: the appended subject, if any.
    DirectGet {
        subject: Option<Bytes>,
    },
    /// The meta shard accepted a new config: `create` answers a create
    /// (`stream_create_response`), with `"did_create":true` if
    /// `did_create` (a new stream; on one server also a create of an
    /// identical config, which nats-server's cluster answers without it).
    Update {
        config: Box<StreamConfig>,
        create: bool,
        did_create: bool,
    },
    Delete,
    /// `$JS.API.STREAM.LEADER.STEPDOWN.<stream>` (in a cluster).
    LeaderStepdown,
    /// The meta group moved a replicated stream to these voters: its
    /// leader changes the group's membership to them, one voter at a time.
    Peers {
        peers: Vec<u64>,
    },
    /// `$JS.API.CONSUMER.LEADER.STEPDOWN.<stream>.<consumer>` (in a
    /// cluster): a consumer is led by its stream's leader.
    ConsumerLeaderStepdown {
        consumer: String,
    },
    /// `$JS.API.CONSUMER.…`: the tokens after `CONSUMER.`.
    Consumer {
        tokens: Vec<String>,
    },
}

impl StreamApi {
    /// The `type` of its response (`io.nats.jetstream.api.v1.<kind>`).
    pub fn response_kind(&self) -> &'static str {
        match self {
            StreamApi::Info => "stream_info_response",
            StreamApi::Purge => "stream_purge_response",
            StreamApi::MessageGet => "stream_msg_get_response",
            StreamApi::MessageDelete => "stream_msg_delete_response",
            StreamApi::DirectGet { .. } => "stream_msg_get_response",
            StreamApi::Update { create: true, .. } => "stream_create_response",
            StreamApi::Update { create: false, .. } => "stream_update_response",
            StreamApi::Delete => "stream_delete_response",
            StreamApi::LeaderStepdown => "stream_leader_stepdown_response",
            StreamApi::Peers { .. } => "stream_remove_peer_response",
            StreamApi::ConsumerLeaderStepdown { .. } => "consumer_leader_stepdown_response",
            StreamApi::Consumer { tokens } => match tokens.first().map(String::as_str) {
                Some("INFO") => "consumer_info_response",
                Some("DELETE") => "consumer_delete_response",
                Some("NAMES") => "consumer_names_response",
                Some("LIST") => "consumer_list_response",
                _ => "consumer_create_response",
            },
        }
    }
}

pub enum Command {
    Publish(Inbound),
    Api(ApiCall),
    Consumer(ConsumerCommand),
    /// `/jsz?consumers=true`: the stream's consumers as this replica has
    /// them.
    ConsumerDetails(Rc<ConsumerDetailsRequest>),
}

/// Consumers one `/jsz` lists of a stream at most (nats-server lists
/// every one); the rest are left out.
pub const CONSUMER_DETAILS_MAX: usize = 4096;

/// One consumer in `/jsz`'s `consumer_detail`, rendered by its stream's
/// task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerDetail {
    pub name: String,
    /// Its element: nats-server's `ConsumerInfo` (without the config
    /// unless asked).
    pub json: String,
    /// In the stream's log (a durable): its Raft group is the stream's.
    pub logged: bool,
}

/// A monitoring request for a stream's consumers, answered by its task
/// in its turn (so the answer sees every change queued before it).
pub struct ConsumerDetailsRequest {
    /// Write each consumer's config (`config=true`).
    pub config: bool,
    answer: RefCell<Option<Vec<ConsumerDetail>>>,
    answered: Waiters,
}

impl ConsumerDetailsRequest {
    pub fn new(config: bool) -> Rc<ConsumerDetailsRequest> {
        Rc::new(ConsumerDetailsRequest {
            config,
            answer: RefCell::new(None),
            answered: Waiters::new(),
        })
    }

    /// The task's answer (at most [`CONSUMER_DETAILS_MAX`], by name).
    pub(super) fn answer(&self, mut details: Vec<ConsumerDetail>) {
        details.truncate(CONSUMER_DETAILS_MAX);
        *self.answer.borrow_mut() = Some(details);
        self.answered.wake_all();
    }

    /// Waits for the answer, at most `timeout` (`None`: not answered in
    /// time, or the stream stopped first).
    pub async fn wait(&self, timeout: std::time::Duration) -> Option<Vec<ConsumerDetail>> {
        let answered = self.answered.wait_until(|| self.answer.borrow().is_some());
        let _ = tern_shard::timer::timeout(timeout, answered).await;
        self.answer.borrow_mut().take()
    }
}

/// What other parts of the shard hold of a stream: its command queue and a
/// snapshot of its state for listings.
pub struct StreamHandle {
    pub name: String,
    /// Its Raft group (the journal's record group).
    pub group: u64,
    commands: RefCell<VecDeque<Command>>,
    /// Entries of its group that committed, handed over by the shard's
    /// groups driver, for the task to apply.
    committed: RefCell<VecDeque<Entry>>,
    wake: Waiters,
    stopped: Cell<bool>,
    /// Its copy is gone (deleted, or its node no longer holds it): the
    /// shard forgot it ([`StreamHandle::set_removed`]).
    removed: Cell<bool>,
    /// Who waits for `removed` (an owner shard's delete).
    removal: Waiters,
    /// Its group's leadership moved on this node since the task last
    /// followed it (`StreamGroups::step`).
    leadership_moved: Cell<bool>,
    /// Stored bytes last counted in the shard's storage usage.
    pub(crate) counted_bytes: Cell<u64>,
    /// Updated by the task after every turn (LIST, account info).
    pub snapshot: RefCell<Snapshot_>,
    /// A replicated stream's voters (Raft node ids) when it was created
    /// or opened; empty: one voter.
    pub peers: Vec<u64>,
    /// More than one voter (or becoming so: a one-voter stream the meta
    /// group placed on more nodes).
    replicated: Cell<bool>,
    /// A replicated stream: the leader's node id as the task last saw it.
    pub leader: Cell<Option<u64>>,
    /// A replicated stream: this replica leads (in office).
    pub leading: Cell<bool>,
    /// A follower's snapshot chunks and installs, in order, handed over
    /// by the groups driver (before the entries that follow them).
    snapshot_steps: RefCell<VecDeque<crate::cluster::multiraft::SnapshotStep>>,
    /// A leader's reads of its snapshot for followers.
    snapshot_reads: RefCell<VecDeque<tern_raft::SnapshotRead>>,
}

/// Listing view of a stream, refreshed by its task.
#[derive(Clone)]
pub struct Snapshot_ {
    pub config: Rc<StreamConfig>,
    pub created_unix_ns: u64,
    pub state: StreamState,
    /// Time of the last message stored (kept when it is removed).
    pub last_unix_ns: u64,
    /// Set when the stream stopped after an error (journal or store).
    pub failure: Option<String>,
    /// Consumers on the stream (durable and ephemeral).
    pub consumers: usize,
}

impl StreamHandle {
    pub fn new(
        name: String,
        group: u64,
        config: Rc<StreamConfig>,
        created_unix_ns: u64,
        peers: Vec<u64>,
    ) -> Rc<StreamHandle> {
        Rc::new(StreamHandle {
            name,
            group,
            replicated: Cell::new(peers.len() > 1),
            peers,
            leader: Cell::new(None),
            leading: Cell::new(false),
            commands: RefCell::new(VecDeque::new()),
            committed: RefCell::new(VecDeque::new()),
            snapshot_steps: RefCell::new(VecDeque::new()),
            snapshot_reads: RefCell::new(VecDeque::new()),
            wake: Waiters::new(),
            stopped: Cell::new(false),
            removed: Cell::new(false),
            removal: Waiters::new(),
            leadership_moved: Cell::new(false),
            counted_bytes: Cell::new(0),
            snapshot: RefCell::new(Snapshot_ {
                config,
                created_unix_ns,
                state: StreamState::default(),
                last_unix_ns: 0,
                failure: None,
                consumers: 0,
            }),
        })
    }

    /// Queues a published message (the router's call; never blocks).
    /// Gives it back when the stream stopped or its queue is full.
    pub fn publish(&self, inbound: Inbound) -> Result<(), Box<(Inbound, ApiError)>> {
        if self.stopped.get() {
            let reason = self.failure_reason();
            return Err(Box::new((inbound, ApiError::store_failed(&reason))));
        }
        if self.commands.borrow().len() >= QUEUED_COMMANDS_MAX {
            return Err(Box::new((inbound, ApiError::too_many_requests())));
        }
        self.push(Command::Publish(inbound));
        Ok(())
    }

    /// Queues an API call; gives it back when the stream stopped (its task
    /// is gone: the caller answers).
    pub fn call(&self, call: ApiCall) -> Result<(), ApiCall> {
        if self.stopped.get() {
            return Err(call);
        }
        self.push(Command::Api(call));
        Ok(())
    }

    /// Asks the task for its consumers (`/jsz`); `None` when the stream
    /// stopped (its task is gone).
    pub fn consumer_details(&self, config: bool) -> Option<Rc<ConsumerDetailsRequest>> {
        if self.stopped.get() {
            return None;
        }
        let request = ConsumerDetailsRequest::new(config);
        self.push(Command::ConsumerDetails(request.clone()));
        Some(request)
    }

    /// Pull requests and acks for the stream's consumers.
    pub fn consumer(&self, command: ConsumerCommand) {
        if self.stopped.get() {
            return;
        }
        self.push(Command::Consumer(command));
    }

    /// Entries of its group that committed (none: look at the groups'
    /// failure).
    pub(super) fn committed(&self, entries: Vec<Entry>) {
        self.committed.borrow_mut().extend(entries);
        self.wake.wake_all();
    }

    /// A follower's snapshot work from the groups driver.
    pub(super) fn snapshot_step(&self, step: crate::cluster::multiraft::SnapshotStep) {
        self.snapshot_steps.borrow_mut().push_back(step);
        self.wake.wake_all();
    }

    /// A leader's snapshot read from the groups driver.
    pub(super) fn snapshot_read(&self, read: tern_raft::SnapshotRead) {
        self.snapshot_reads.borrow_mut().push_back(read);
        self.wake.wake_all();
    }

    /// Whether snapshot work waits for the task.
    fn has_snapshot_work(&self) -> bool {
        !self.snapshot_steps.borrow().is_empty() || !self.snapshot_reads.borrow().is_empty()
    }

    fn push(&self, command: Command) {
        self.commands.borrow_mut().push_back(command);
        self.wake.wake_all();
    }

    /// Whether the stream has more than one voter.
    pub fn is_replicated(&self) -> bool {
        self.replicated.get()
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.get()
    }

    /// Its group's leadership moved: the task follows at once.
    pub(super) fn leadership_moved(&self) {
        self.leadership_moved.set(true);
        self.wake.wake_all();
    }

    /// Whether leadership moved since the last call (the task's turn).
    pub(super) fn take_leadership_moved(&self) -> bool {
        self.leadership_moved.replace(false)
    }

    /// The shard forgot the stream: its copy is gone.
    pub fn set_removed(&self) {
        self.removed.set(true);
        self.removal.wake_all();
    }

    /// Completes once the shard has forgotten the stream.
    pub async fn wait_removed(&self) {
        self.removal.wait_until(|| self.removed.get()).await
    }

    /// Why the stream stopped (the storage error), for the errors it answers.
    pub fn failure_reason(&self) -> String {
        self.snapshot
            .borrow()
            .failure
            .clone()
            .unwrap_or_else(|| "stream is stopped".into())
    }

    /// Where its messages go (block store or memory).
    pub fn storage(&self) -> StorageType {
        self.snapshot.borrow().config.storage
    }

    /// Messages queued and not yet taken by the task.
    pub fn queued(&self) -> usize {
        self.commands.borrow().len()
    }

    /// Committed entries handed to the task and not yet applied.
    pub fn committed_backlog(&self) -> u64 {
        self.committed.borrow().len() as u64
    }
}

/// The block store, on O_DIRECT files or in memory.
enum Store {
    File(StreamLog<DmaFiles>),
    Memory(StreamLog<MemoryFiles>),
}

macro_rules! with_store {
    ($store:expr, $log:ident => $body:expr) => {
        match $store {
            Store::File($log) => $body,
            Store::Memory($log) => $body,
        }
    };
}

/// nats-server's byte accounting for file streams.
pub fn file_message_bytes(subject: usize, headers: usize, payload: usize) -> u64 {
    let base = if headers > 0 { 34 } else { 30 };
    (base + subject + headers + payload) as u64
}

/// nats-server's byte accounting for memory streams.
pub fn memory_message_bytes(subject: usize, headers: usize, payload: usize) -> u64 {
    (16 + subject + headers + payload) as u64
}

mod api;
pub mod config;
mod consumer_leader;
mod consumers;
pub mod core;
pub mod deliveries;
pub mod failure;
pub mod groups;
mod leader;
mod membership;
mod persistence;
pub use consumers::ConsumerCommand;
use leader::Owed;
pub mod replica;
pub mod snapshot;
mod snapshot_host;
mod state;
mod state_entries;
mod task;
pub mod transfer;
pub use api::info_state;
pub use task::{Recovered, StreamTask};
