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
use std::time::{Duration, Instant};

use bytes::Bytes;
use rustc_hash::FxHashMap;
use tern_raft::{Entry, HardState, Membership, Node, Restore, Snapshot};
use tern_shard::Waiters;
use tern_storage::block_store::{
    DmaFiles, Manifest, MemoryFiles, StoreError, StoredMessage, StreamLog, StreamState,
};
use tern_storage::JournalError;

use super::api::error::ApiError;
use super::api::requests::{self, MessageGet};
use super::api::responses;
use super::entry::{Operation, PendingMessage};
use super::expiry::Expiry;
use super::persist::{self, RaftState};
use super::stream_config::{subject_matches, Retention, StorageType, StreamConfig};
use super::{now_unix_ns, JetStream};
use failure::StreamFailure;
use groups::{Persistence, StreamGroups};

/// Commands one turn of the task handles before driving Raft and the journal.
const COMMANDS_PER_TURN_MAX: usize = 4096;
/// Block store write size (its write-behind buffer).
const STORE_WRITE_BYTES: usize = 256 << 10;
/// Publishes queued for a stream before new ones are refused (429).
pub const QUEUED_COMMANDS_MAX: usize = 65536;
/// A checkpoint is taken once this much was applied since the last one…
const CHECKPOINT_BYTES: u64 = 64 << 20;
/// …or this long after something was applied.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(2);
/// How often max_age is enforced at the latest.
const AGE_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// Messages one turn removes for their TTL; the rest wait a turn.
const EXPIRED_PER_TURN_MAX: usize = 4096;
/// The one voter of a single-node stream group.
const NODE_ID: u64 = 1;
/// Committed entries a turn applies at most (the rest wait a turn, so
/// commands are not starved).
const COMMITTED_PER_TURN_MAX: usize = 8192;

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
    /// The meta shard accepted a new config; `did_create` answers a create
    /// of an identical config.
    Update {
        config: Box<StreamConfig>,
        create: bool,
    },
    Delete,
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
    /// Stored bytes last counted in the shard's storage usage.
    pub(crate) counted_bytes: Cell<u64>,
    /// Updated by the task after every turn (LIST, account info).
    pub snapshot: RefCell<Snapshot_>,
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
    ) -> Rc<StreamHandle> {
        Rc::new(StreamHandle {
            name,
            group,
            commands: RefCell::new(VecDeque::new()),
            committed: RefCell::new(VecDeque::new()),
            wake: Waiters::new(),
            stopped: Cell::new(false),
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

    fn push(&self, command: Command) {
        self.commands.borrow_mut().push_back(command);
        self.wake.wake_all();
    }

    pub fn is_stopped(&self) -> bool {
        self.stopped.get()
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

/// Block-store segments stop growing at 64 MiB, or at the largest message
/// the server accepts if that is larger: a message that passed ingest must
/// always fit one (a store refusing it at apply time would take the stream
/// offline).
fn segment_bytes_max(js: &JetStream) -> u64 {
    const SEGMENT_BYTES: u64 = 64 << 20;
    let limits = &js.shard().config.limits;
    let largest = tern_storage::block_store::stored_message_bytes(
        limits.max_control_line_bytes,
        0,
        limits.max_payload_bytes,
    );
    SEGMENT_BYTES.max(largest.next_multiple_of(4096))
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

/// Everything recovery found for one stream.
pub struct Recovered {
    pub raft: Option<RaftState>,
    pub hard_state: Option<HardState>,
    /// Entries after the raft file's applied index, in index order.
    pub entries: Vec<Entry>,
}

pub struct StreamTask {
    js: Rc<JetStream>,
    handle: Rc<StreamHandle>,
    /// What every replica holds identically, changed only by apply.
    state: ReplicatedState,
    created_unix_ns: u64,
    group: u64,
    files: Option<DmaFiles>,
    /// The shard's stream groups, this stream's among them.
    groups: Rc<StreamGroups>,
    persistence: Persistence,
    /// The leader's side: sequences, checks, dedupe, replies owed.
    leader: Leader,
    checkpointed_index: u64,
    last_checkpoint: Instant,
    /// When the leader next looks for messages past max_age.
    age_check_at: Instant,
    /// The durable consumers whose state is in the log, by name.
    durables: persistence::Durables,
    /// Whether a `consumers` file was written or found (so a checkpoint
    /// rewrites it also once the last durable is gone).
    consumers_file_written: bool,
    /// The `consumers` file the next `raft` file names (the last written).
    consumers_reference: Option<persist::ConsumersReference>,
    /// A client read found damage: the stream stops after answering it.
    read_damage: RefCell<Option<StoreError>>,
    /// Replaying the log in `open`: consumer snapshots rebuild state.
    recovering: bool,
    /// The hard state recovered (the checkpoint's until the groups make
    /// a newer one durable).
    hard_state: HardState,
    failure: Option<String>,
    /// `{"stream":"<name>","seq":`, and a buffer PubAcks are built in.
    ack_prefix: String,
    ack_buffer: String,
    /// Reused by every delivery: the message read from the store (subject,
    /// headers, payload back to back) and its ack subject.
    delivery_scratch: DeliveryScratch,
}

/// Buffers a delivery is built in, kept between deliveries so the drain
/// path allocates nothing per message.
#[derive(Default)]
pub(super) struct DeliveryScratch {
    pub(super) message: Vec<u8>,
    pub(super) ack_subject: String,
}

impl StreamTask {
    /// Opens the stream's store and Raft node, replays what the journal
    /// holds past the last checkpoint, and returns the task ready to run.
    #[allow(clippy::too_many_arguments)]
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
                let directory = js.stream_directory(&handle.name).join("messages");
                let files =
                    DmaFiles::open(&directory)
                        .await
                        .map_err(|source| StreamFailure::Open {
                            directory: directory.display().to_string(),
                            source,
                        })?;
                let store_config = tern_storage::block_store::StreamConfig {
                    message_bytes: file_message_bytes,
                    // The journal makes messages durable; the store syncs
                    // only at checkpoints (`StreamLog::sync`).
                    sync: false,
                    // Nothing reads recent messages from memory until
                    // consumers arrive; the cache would copy every message.
                    tail_cache_bytes: 0,
                    // Smaller writes queue less ahead of the journal's when
                    // both share a device (a larger message gets a buffer of
                    // its own for its flush).
                    write_buffer_bytes: STORE_WRITE_BYTES,
                    segment_bytes_max: segment_bytes_max(&js),
                    ..tern_storage::block_store::StreamConfig::default()
                };
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
                let store_config = tern_storage::block_store::StreamConfig {
                    message_bytes: memory_message_bytes,
                    sync: false,
                    write_buffer_bytes: 64 << 10,
                    tail_cache_bytes: 0,
                    segment_bytes_max: segment_bytes_max(&js),
                    ..tern_storage::block_store::StreamConfig::default()
                };
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
        let membership = Membership::new(vec![NODE_ID]);
        let snapshot = (raft.applied_index > 0).then(|| Snapshot {
            index: raft.applied_index,
            term: raft.applied_term,
            membership: membership.clone(),
            data: Bytes::new(),
        });
        let acknowledged_index = recovered
            .entries
            .last()
            .map_or(raft.applied_index, |entry| entry.index);
        let node = Node::new(
            tern_raft::Config::new(NODE_ID),
            Restore {
                hard_state,
                snapshot,
                entries: recovered.entries,
                membership,
                acknowledged_index,
                seed: group,
            },
        );
        let groups = js.groups().clone();
        groups.insert(group, node, persistence, handle.clone())?;
        let mut task = StreamTask {
            js,
            handle,
            state: ReplicatedState {
                stored_last_unix_ns: raft.last_unix_ns,
                applied_index: raft.applied_index,
                applied_term: raft.applied_term,
                ..ReplicatedState::new(store, config)
            },
            created_unix_ns,
            group,
            files,
            groups,
            persistence,
            leader: Leader::default(),
            checkpointed_index: raft.applied_index,
            last_checkpoint: Instant::now(),
            age_check_at: Instant::now(),
            durables: persistence::Durables::new(),
            consumers_file_written: false,
            consumers_reference: None,
            read_damage: RefCell::new(None),
            recovering: true,
            hard_state,
            failure: None,
            ack_prefix: String::new(),
            ack_buffer: String::with_capacity(128),
            delivery_scratch: DeliveryScratch::default(),
        };
        task.ack_prefix = {
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

    /// Consumers as of the checkpoint, then everything the log holds
    /// after it, applied as the only voter.
    async fn recover(&mut self, raft: &RaftState) -> Result<(), StreamFailure> {
        // Durable consumers as of the checkpoint; the log's consumer
        // entries after it apply on top.
        self.load_consumers(raft).await?;
        // Become leader (the only voter) and apply everything recovered.
        self.groups.with_node(self.group, Node::campaign_now);
        self.settle().await?;
        self.recovering = false;
        self.after_recovery().await
    }

    /// State that follows from the store once recovery applied everything.
    async fn after_recovery(&mut self) -> Result<(), StreamFailure> {
        let state = with_store!(&self.state.store, log => log.state());
        self.state.stored_last_unix_ns =
            self.state.stored_last_unix_ns.max(state.last_timestamp_ns);
        self.leader.take_office(&self.state, now_unix_ns()).await?;
        self.state.rebuild_expiry().await?;
        self.state.enforce_size_limits();
        // What aged out while the server was down goes before the stream
        // serves, through the log like any expiry.
        let now_ns = now_unix_ns();
        while self.state.config.max_age_ns > 0 && {
            let (leader, state, name) = (&mut self.leader, &mut self.state, &self.handle.name);
            self.groups.with_node(self.group, |node| {
                leader.expire_aged(state, node, name, now_ns)
            })
        } {
            self.settle().await?;
        }
        self.settle().await?;
        self.consumers_recovered();
        self.refresh_snapshot();
        Ok(())
    }

    /// Applies what commits until everything proposed has applied
    /// (opening: the only voter commits alone).
    async fn settle(&mut self) -> Result<(), StreamFailure> {
        loop {
            self.apply_committed().await?;
            if self.state.applied_index >= self.groups.node(self.group, Node::last_index) {
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
    fn groups_failure(&self) -> Option<JournalError> {
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
    async fn apply_committed(&mut self) -> Result<(), StreamFailure> {
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
        for entry in entries {
            self.apply(entry).await?;
        }
        let snapshot = Snapshot {
            index: self.state.applied_index,
            term: self.state.applied_term,
            membership: Membership::new(vec![NODE_ID]),
            data: Bytes::new(),
        };
        self.groups.compact(self.group, snapshot);
        Ok(())
    }

    /// Runs until the stream is deleted or the shard stops.
    pub async fn run(mut self) {
        loop {
            self.wait_for_work().await;
            if self.js.stopping() {
                let _ = self.checkpoint().await;
                break;
            }
            if let Err(error) = self.turn().await {
                self.fail(error);
            }
            if self.handle.stopped.get() {
                break;
            }
        }
        self.handle.stopped.set(true);
        self.groups.remove(self.group);
    }

    async fn wait_for_work(&self) {
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
                        .interest_changed
                        .wait_until(|| shard.interest_generation() != generation)
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

    fn next_timer(&self) -> Duration {
        let mut next = AGE_CHECK_INTERVAL;
        for due_ns in [
            self.state.expiry.as_ref().and_then(Expiry::next_due_ns),
            self.consumers_wake_at_ns(),
        ]
        .into_iter()
        .flatten()
        {
            next = next.min(Duration::from_nanos(due_ns.saturating_sub(now_unix_ns())));
        }
        if self.state.applied_index > self.checkpointed_index {
            next = next.min(CHECKPOINT_INTERVAL.saturating_sub(self.last_checkpoint.elapsed()));
        }
        next = next.min(self.age_check_at.saturating_duration_since(Instant::now()));
        next.max(Duration::from_millis(1))
    }

    async fn turn(&mut self) -> Result<(), StreamFailure> {
        self.apply_committed().await?;
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
            }
            if self.handle.stopped.get() {
                return Ok(());
            }
        }
        let now_ns = now_unix_ns();
        if self
            .consumers_wake_at_ns()
            .is_some_and(|wake_ns| wake_ns <= now_ns)
        {
            self.consumer_timers(now_ns);
        }
        if !self.state.consumers.is_empty() {
            self.deliver_to_consumers().await?;
            self.publish_all_events();
        }
        // Durable consumers' state entries (one in flight each; the next
        // once it applied).
        if !self.durables.is_empty() {
            self.propose_consumer_snapshots()?;
        }
        if self
            .state
            .expiry
            .as_ref()
            .and_then(Expiry::next_due_ns)
            .is_some_and(|due_ns| due_ns <= now_ns)
        {
            let (leader, state, name) = (&mut self.leader, &mut self.state, &self.handle.name);
            self.groups.with_node(self.group, |node| {
                leader.expire_due(state, node, name, now_ns)
            });
        }
        if Instant::now() >= self.age_check_at {
            self.age_check_at = Instant::now() + AGE_CHECK_INTERVAL;
            if self.state.config.max_age_ns > 0 && {
                let (leader, state, name) = (&mut self.leader, &mut self.state, &self.handle.name);
                self.groups.with_node(self.group, |node| {
                    leader.expire_aged(state, node, name, now_ns)
                })
            } {
                // More aged out than one entry holds: again next turn.
                self.age_check_at = Instant::now();
            }
        }
        if self.state.applied_index > self.checkpointed_index
            && (self.state.applied_bytes_since_checkpoint >= CHECKPOINT_BYTES
                || self.last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL)
        {
            self.checkpoint().await?;
        }
        self.refresh_snapshot();
        Ok(())
    }

    fn fail(&mut self, error: StreamFailure) {
        log::error!(target: "tern::jetstream", "stream {} stopped: {error}", self.handle.name);
        self.failure = Some(error.to_string());
        self.refresh_snapshot();
        // Everything owed fails; nothing more is accepted.
        let owed: Vec<OwedReply> = self.leader.owed.drain(..).collect();
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
                Command::Publish(_) | Command::Consumer(_) => {}
            }
        }
    }

    /// Answers an owed reply with `error`.
    fn fail_owed(&self, owed: Owed, error: &ApiError) {
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

    fn refresh_snapshot(&self) {
        let mut snapshot = self.handle.snapshot.borrow_mut();
        snapshot.config = self.state.config.clone();
        snapshot.state = with_store!(&self.state.store, log => log.state());
        snapshot.last_unix_ns = self.state.stored_last_unix_ns;
        snapshot.failure = self.failure.clone();
        snapshot.consumers = self.state.consumers.len();
        let bytes = snapshot.state.bytes;
        drop(snapshot);
        // A stopped stream keeps its last count until it is deleted
        // (`forget_stream`), a deleted one is not counted again.
        if !self.handle.stopped.get() {
            self.js.count_stored_bytes(&self.handle, bytes);
        }
    }

    /// Flushes the store (synced), records the applied index, and lets the
    /// journal recycle what is older.
    async fn checkpoint(&mut self) -> Result<(), StreamFailure> {
        if self.state.applied_index == self.checkpointed_index {
            return Ok(());
        }
        self.checkpoint_consumers().await?;
        let manifest = with_store!(&mut self.state.store, log => log.sync().await)?;
        if let Some(files) = &self.files {
            let hard_state = self
                .groups
                .durable_hard_state(self.group)
                .unwrap_or(self.hard_state);
            let state = RaftState {
                term: hard_state.term,
                vote: hard_state.vote.unwrap_or(0),
                applied_index: self.state.applied_index,
                applied_term: self.state.applied_term,
                last_unix_ns: self.state.stored_last_unix_ns,
                consumers: self.consumers_reference,
                manifest,
            };
            persist::write_raft(files, &state).await?;
            // Only now may the journal recycle what the block store holds,
            // and the block store drop files the older checkpoint named.
            self.js
                .journal()
                .checkpoint(self.group, self.state.applied_index);
        }
        with_store!(&mut self.state.store, log => log.checkpointed().await)?;
        self.checkpointed_index = self.state.applied_index;
        self.state.applied_bytes_since_checkpoint = 0;
        self.last_checkpoint = Instant::now();
        Ok(())
    }

    // ----- ingest --------------------------------------------------------------

    /// A publish: the leader checks and proposes it; the reply is owed
    /// until its entry applies (a duplicate's until what is in flight has).
    fn ingest(&mut self, inbound: Inbound) {
        let Inbound { message, reply } = inbound;
        let (leader, state, name) = (&mut self.leader, &self.state, &self.handle.name);
        let ingested = self.groups.with_node(self.group, |node| {
            leader.ingest(state, node, name, message, now_unix_ns(), |subject| {
                state.live_consumer_wants(subject)
            })
        });
        let reply = match ingested {
            Ingested::Rejected(error) => return self.reject(&reply, error),
            _ if self.state.config.no_ack => return,
            _ => match reply {
                Some(reply) => reply,
                None => return,
            },
        };
        match ingested {
            Ingested::Rejected(_) => unreachable!("answered above"),
            Ingested::Duplicate { sequence } => {
                let owed = Owed::Duplicate { reply, sequence };
                // The original may still be in flight: answer after it.
                let last_index = self.last_index();
                if last_index > self.state.applied_index {
                    self.owe(last_index, owed);
                } else {
                    self.send_owed(owed);
                }
            }
            Ingested::Proposed { index, .. } => self.owe(index, Owed::PubAck { reply }),
        }
    }

    fn reject(&self, reply: &Option<Bytes>, error: ApiError) {
        if let Some(reply) = reply {
            if !self.state.config.no_ack {
                self.js.publish_reply(
                    reply,
                    responses::pub_ack_error(&self.handle.name, &error).as_bytes(),
                );
            }
        }
    }

    // ----- apply -----------------------------------------------------------------

    /// Applies one committed entry (the path `Replica` takes too), then
    /// does what only this task does with it: live consumers following the
    /// log, subscriptions following a config, and the replies it releases.
    async fn apply(&mut self, entry: Entry) -> Result<(), StreamFailure> {
        let index = entry.index;
        let EntryApplied {
            superseded,
            applied,
            mut released,
        } = self.leader.apply(&mut self.state, &entry).await?;
        for owed in superseded {
            self.fail_owed(owed, &ApiError::cluster_not_leader());
        }
        let stored_sequence = match applied {
            Some(applied) => self.follow_applied(index, applied, &mut released)?,
            None => None,
        };
        for owed in released {
            {
                match (owed, stored_sequence) {
                    (Owed::PubAck { reply }, Some(sequence)) => {
                        // `{"stream":"<name>","seq":` is the same every time.
                        let mut ack = std::mem::take(&mut self.ack_buffer);
                        ack.clear();
                        ack.push_str(&self.ack_prefix);
                        let _ = std::fmt::Write::write_fmt(&mut ack, format_args!("{sequence}}}"));
                        self.js.publish_reply(&reply, ack.as_bytes());
                        self.ack_buffer = ack;
                    }
                    (owed, _) => self.send_owed(owed),
                }
            }
        }
        Ok(())
    }

    /// What the operation at `index` did, followed by this task: live
    /// consumers, subscriptions, and the API answers among `released` that
    /// need the result (taken out of them). A message's sequence is
    /// returned for its PubAck.
    fn follow_applied(
        &mut self,
        index: u64,
        applied: Applied,
        released: &mut [Owed],
    ) -> Result<Option<u64>, StreamFailure> {
        match applied {
            Applied::Message { sequence } => return Ok(Some(sequence)),
            Applied::ConsumerCreated {
                name,
                start_sequence,
            } => self.consumer_created(index, &name, start_sequence)?,
            Applied::ConsumerDeleted { name } => self.consumer_deleted(&name),
            Applied::ConsumerState { name, known } => {
                if known {
                    self.consumer_state_applied(index, &name)?;
                }
            }
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
                            let body = if removed {
                                responses::message_delete_response()
                            } else {
                                responses::error_response(
                                    "stream_msg_delete_response",
                                    &ApiError::message_delete_failed("no message found"),
                                )
                            };
                            self.js.respond(*origin, reply, body);
                        }
                    }
                }
            }
            Applied::Expired => {}
            Applied::Config { changed_from } => {
                if let Some(old) = changed_from {
                    self.js
                        .stream_subjects_changed(&self.handle, &old, &self.state.config);
                    // Age is the leader's to decide: its next check, at once.
                    self.age_check_at = Instant::now();
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
                    let body =
                        self.info_response("stream_update_response", false, None, false, 0, false);
                    if let Some(reply) = reply {
                        self.js.respond(origin, reply, body);
                    }
                }
            }
        }
        Ok(None)
    }

    /// Owes a reply once the entry this leader proposed at `index` (in its
    /// current term) applies.
    fn owe(&mut self, index: u64, owed: Owed) {
        let term = self.groups.node(self.group, Node::term);
        self.leader.owe(term, index, self.state.applied_index, owed);
    }

    /// The last index of the group's log (proposed, maybe not committed).
    fn last_index(&self) -> u64 {
        self.groups.node(self.group, Node::last_index)
    }

    /// Proposes `operation` to the group.
    fn propose(&self, operation: &Operation) -> Result<u64, tern_raft::ProposeError> {
        self.groups
            .with_node(self.group, |node| node.propose(operation.encode()))
    }

    fn send_owed(&self, owed: Owed) {
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

    // ----- API calls ----------------------------------------------------------------

    async fn api(&mut self, call: ApiCall) -> Result<(), StreamFailure> {
        let ApiCall {
            origin,
            reply,
            payload,
            kind,
        } = call;
        match kind {
            StreamApi::Info => {
                let body = match requests::StreamInfoRequest::parse(&payload) {
                    Ok(request) => self.info_response(
                        "stream_info_response",
                        false,
                        request.subjects_filter.as_deref(),
                        request.deleted_details,
                        request.offset,
                        true,
                    ),
                    Err(error) => responses::error_response("stream_info_response", &error),
                };
                if let Some(reply) = reply {
                    self.js.respond(origin, reply, body);
                }
            }
            StreamApi::Purge => {
                let request = match requests::PurgeRequest::parse(&payload) {
                    Ok(request) => request,
                    Err(error) => {
                        self.answer_error(origin, reply, "stream_purge_response", &error);
                        return Ok(());
                    }
                };
                let refusal = if self.state.config.sealed {
                    Some(ApiError::sealed())
                } else if self.state.config.deny_purge {
                    Some(ApiError::purge_not_permitted())
                } else {
                    None
                };
                if let Some(error) = refusal {
                    self.answer_error(origin, reply, "stream_purge_response", &error);
                    return Ok(());
                }
                let operation = Operation::Purge {
                    last: self.leader.last_sequence,
                    filter: request.filter.map(Bytes::from),
                    sequence: request.sequence,
                    keep: request.keep,
                };
                let index = self
                    .propose(&operation)
                    .map_err(|error| StreamFailure::Refused {
                        what: "purge",
                        error,
                    })?;
                self.owe(index, Owed::Purge { origin, reply });
            }
            StreamApi::MessageDelete => {
                let request = match requests::MessageDeleteRequest::parse(&payload) {
                    Ok(request) => request,
                    Err(error) => {
                        self.answer_error(origin, reply, "stream_msg_delete_response", &error);
                        return Ok(());
                    }
                };
                let refusal = if self.state.config.sealed {
                    Some(ApiError::sealed())
                } else if self.state.config.deny_delete {
                    Some(ApiError::message_delete_failed(
                        "message delete not permitted",
                    ))
                } else if with_store!(&self.state.store, log => log.subject_of(request.sequence))
                    .is_none()
                {
                    // nats-server's three answers for a missing message.
                    let state = with_store!(&self.state.store, log => log.state());
                    Some(if request.sequence > state.last_sequence {
                        ApiError::message_delete_failed("stream store EOF")
                    } else if state.messages == 0 || request.sequence < state.first_sequence {
                        ApiError::message_delete_failed("no message found")
                    } else {
                        ApiError::sequence_not_found(request.sequence)
                    })
                } else {
                    None
                };
                if let Some(error) = refusal {
                    self.answer_error(origin, reply, "stream_msg_delete_response", &error);
                    return Ok(());
                }
                let operation = Operation::Delete {
                    sequence: request.sequence,
                    erase: !request.no_erase,
                };
                let index = self
                    .propose(&operation)
                    .map_err(|error| StreamFailure::Refused {
                        what: "delete",
                        error,
                    })?;
                self.owe(index, Owed::Delete { origin, reply });
            }
            StreamApi::MessageGet => {
                let body = match requests::parse_message_get(&payload) {
                    Ok((get, no_headers)) => match self.find(&get).await {
                        Ok(Some(message)) => responses::message_get_response(
                            &String::from_utf8_lossy(&message.subject),
                            message.sequence,
                            if no_headers { &[] } else { &message.headers },
                            &message.payload,
                            message.timestamp_ns,
                        ),
                        Ok(None) => responses::error_response(
                            "stream_msg_get_response",
                            &ApiError::no_message_found(),
                        ),
                        Err(error) => responses::error_response(
                            "stream_msg_get_response",
                            &ApiError::store_failed(&error.to_string()),
                        ),
                    },
                    Err(error) => responses::error_response("stream_msg_get_response", &error),
                };
                if let Some(reply) = reply {
                    self.js.respond(origin, reply, body);
                }
            }
            StreamApi::DirectGet { subject } => {
                if let Some(reply) = reply {
                    self.direct_get(origin, reply, subject, &payload).await;
                }
            }
            StreamApi::Update { config, create } => {
                let kind = if create {
                    "stream_create_response"
                } else {
                    "stream_update_response"
                };
                if create {
                    let body = self.info_response(kind, create, None, false, 0, false);
                    if let Some(reply) = reply {
                        self.js.respond(origin, reply, body);
                    }
                    return Ok(());
                }
                // The config file first: the meta shard reads it on start,
                // so a restart never finds the log ahead of the catalog.
                // Then through the log, so the change lands between the
                // messages exactly where it was made (and reaches replicas).
                // A restart replays the log after the checkpoint under the
                // config file's config: everything proposed before this
                // update is applied and checkpointed first, so no entry
                // from before it is ever replayed under the new config (a
                // loosened limit would bring back what the old one removed).
                if self.files.is_some() {
                    self.settle().await?;
                    self.checkpoint().await?;
                }
                let json = config.to_stored_json();
                let stored = self.js.stored_config_json(self.group, &json);
                if let Some(files) = &self.files {
                    persist::write_config(files, stored.as_bytes(), self.created_unix_ns).await?;
                }
                let operation = Operation::Config {
                    json: Bytes::from(json),
                };
                let index = self
                    .propose(&operation)
                    .map_err(|error| StreamFailure::Refused {
                        what: "config update",
                        error,
                    })?;
                self.owe(index, Owed::Update { origin, reply });
            }
            StreamApi::Consumer { tokens } => {
                let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
                self.consumer_api(origin, reply, &payload, &tokens);
            }
            StreamApi::Delete => {
                self.handle.stopped.set(true);
                // Owed replies of entries not yet applied get an error.
                self.fail_pending("stream deleted");
                self.js.journal().checkpoint(self.group, u64::MAX);
                let result = self.js.remove_stream_files(&self.handle.name).await;
                if let Some(reply) = reply {
                    self.js
                        .respond(origin, reply, responses::delete_result(result));
                }
                self.js.forget_stream(&self.handle);
            }
        }
        Ok(())
    }

    fn answer_error(&self, origin: usize, reply: Option<Bytes>, kind: &str, error: &ApiError) {
        self.js.answer_error(origin, reply, kind, error);
    }

    fn fail_pending(&mut self, reason: &str) {
        let error = ApiError::store_failed(reason);
        let owed: Vec<OwedReply> = self.leader.owed.drain(..).collect();
        for OwedReply { owed, .. } in owed {
            if let Owed::PubAck { reply } | Owed::Duplicate { reply, .. } = owed {
                self.js.publish_reply(
                    &reply,
                    responses::pub_ack_error(&self.handle.name, &error).as_bytes(),
                );
            }
        }
    }

    fn info_response(
        &self,
        kind: &str,
        did_create: bool,
        subjects_filter: Option<&str>,
        deleted_details: bool,
        offset: usize,
        with_leader: bool,
    ) -> String {
        let state = with_store!(&self.state.store, log => log.state());
        let mut info_state = info_state(
            &state,
            self.state.stored_last_unix_ns,
            &self.state.config,
            self.state.consumers.len(),
        );
        let mut paging = Some((0, 0, 0));
        if let Some(filter) = subjects_filter {
            let mut subjects: Vec<(String, u64)> = with_store!(&self.state.store, log => log
                .subjects()
                .map(|(subject, _, _, count)| (String::from_utf8_lossy(subject).into_owned(), count))
                .filter(|(subject, _)| subject_matches(filter, subject))
                .collect());
            subjects.sort();
            let total = subjects.len();
            const SUBJECTS_LIMIT: usize = 100_000;
            let page: Vec<(String, u64)> = subjects
                .into_iter()
                .skip(offset)
                .take(SUBJECTS_LIMIT)
                .collect();
            info_state.subjects = Some(page);
            paging = Some((total, offset, SUBJECTS_LIMIT));
        }
        if deleted_details {
            info_state.deleted =
                Some(with_store!(&self.state.store, log => log.deleted_sequences(usize::MAX)));
        }
        responses::stream_info(
            kind,
            &self.state.config,
            self.created_unix_ns,
            &info_state,
            now_unix_ns(),
            responses::InfoExtras {
                did_create,
                leader: with_leader.then(|| self.js.server_name()),
                paging: if with_leader { paging } else { None },
                dynamic_metadata: true,
            },
        )
    }

    async fn find(&self, get: &MessageGet) -> Result<Option<StoredMessage>, StoreError> {
        let sequence = match get {
            MessageGet::Sequence(sequence) => Some(*sequence),
            MessageGet::LastBySubject(subject) => {
                with_store!(&self.state.store, log => log.last_matching(|candidate| {
                    subject_matches(subject, &String::from_utf8_lossy(candidate))
                }))
            }
            MessageGet::NextBySubject {
                subject,
                from_sequence,
            } => {
                with_store!(&self.state.store, log => log.next_matching((*from_sequence).max(1), |candidate| {
                    subject_matches(subject, &String::from_utf8_lossy(candidate))
                }))
            }
            MessageGet::StartTime { unix_ns, subject } => {
                match with_store!(&self.state.store, log => log.first_at_or_after(*unix_ns)) {
                    None => None,
                    Some(first) => match subject {
                        None => Some(first),
                        Some(subject) => {
                            with_store!(&self.state.store, log => log.next_matching(first, |candidate| {
                                subject_matches(subject, &String::from_utf8_lossy(candidate))
                            }))
                        }
                    },
                }
            }
        };
        match sequence {
            None => Ok(None),
            Some(sequence) => self.read_message(sequence).await,
        }
    }

    /// Reads one stored message for a client. Every read is verified; one
    /// that fails its checks answers an error and, once the call is done,
    /// takes the stream offline (never a skipped or altered message).
    async fn read_message(&self, sequence: u64) -> Result<Option<StoredMessage>, StoreError> {
        let read = with_store!(&self.state.store, log => log.get(sequence).await);
        if let Err(error @ StoreError::Corrupt { .. }) = &read {
            self.read_damage
                .borrow_mut()
                .get_or_insert_with(|| error.clone());
        }
        read
    }

    async fn direct_get(
        &self,
        origin: usize,
        reply: Bytes,
        subject: Option<Bytes>,
        payload: &[u8],
    ) {
        let parsed = match &subject {
            Some(subject) => requests::DirectGet::parse_subject_form(subject, payload),
            None => requests::DirectGet::parse(payload),
        };
        let get = match parsed {
            Ok(get) => get,
            Err(status) => {
                self.js
                    .respond_message(origin, reply, status_headers(&status), Bytes::new());
                return;
            }
        };
        if let Some(multi_last) = &get.multi_last {
            return self
                .direct_get_multi_last(origin, reply, multi_last, get.no_headers)
                .await;
        }
        if let Some(batch) = &get.batch {
            return self
                .direct_get_batch(origin, reply, &get.get, batch, get.no_headers)
                .await;
        }
        match self.find(&get.get).await {
            Ok(Some(message)) => {
                let (headers, payload) = self.direct_message(message, get.no_headers, None);
                self.js.respond_message(origin, reply, headers, payload);
            }
            Ok(None) => self.js.respond_message(
                origin,
                reply,
                status_headers("404 Message Not Found"),
                Bytes::new(),
            ),
            Err(error) => self.js.respond_message(
                origin,
                reply,
                status_headers(&format!("500 {error}")),
                Bytes::new(),
            ),
        }
    }

    /// A stored message as a direct-get reply: its headers followed by
    /// `Nats-Stream`, `Nats-Subject`, `Nats-Sequence`, `Nats-Time-Stamp`
    /// and, in a batch, `Nats-Num-Pending` and `Nats-Last-Sequence`.
    fn direct_message(
        &self,
        message: StoredMessage,
        no_headers: bool,
        batch: Option<(u64, u64)>,
    ) -> (Bytes, Bytes) {
        let payload = Bytes::from(message.payload);
        if no_headers {
            return (Bytes::new(), payload);
        }
        let mut block = if message.headers.is_empty() {
            b"NATS/1.0\r\n".to_vec()
        } else {
            message.headers[..message.headers.len() - 2].to_vec()
        };
        let mut time = String::new();
        super::api::json::write_time(&mut time, message.timestamp_ns);
        let time = time.trim_matches('"');
        block.extend_from_slice(
            format!(
                "Nats-Stream: {}\r\nNats-Subject: {}\r\nNats-Sequence: {}\r\nNats-Time-Stamp: {time}\r\n",
                self.handle.name,
                String::from_utf8_lossy(&message.subject),
                message.sequence,
            )
            .as_bytes(),
        );
        if let Some((pending, previous)) = batch {
            block.extend_from_slice(
                format!("Nats-Num-Pending: {pending}\r\nNats-Last-Sequence: {previous}\r\n")
                    .as_bytes(),
            );
        }
        block.extend_from_slice(b"\r\n");
        (Bytes::from(block), payload)
    }

    /// Sends `sequences` (ascending) as a direct-get batch, at most `limit`
    /// messages and (when non-zero) about `max_bytes`, then the end-of-batch
    /// status. `up_to` adds `Nats-UpTo-Sequence` (multi_last).
    #[allow(clippy::too_many_arguments)]
    async fn send_direct_batch(
        &self,
        origin: usize,
        reply: Bytes,
        sequences: &[u64],
        limit: usize,
        max_bytes: usize,
        no_headers: bool,
        up_to: Option<u64>,
    ) {
        let total = sequences.len() as u64;
        let (mut sent, mut sent_bytes, mut previous) = (0u64, 0usize, 0u64);
        for &sequence in sequences.iter().take(limit.max(1)) {
            let message = match self.read_message(sequence).await {
                Ok(Some(message)) => message,
                Ok(None) => continue,
                Err(error) => {
                    let status = status_headers(&format!("500 {error}"));
                    return self.js.respond_message(origin, reply, status, Bytes::new());
                }
            };
            sent += 1;
            sent_bytes += message.subject.len() + message.headers.len() + message.payload.len();
            let (headers, payload) =
                self.direct_message(message, no_headers, Some((total - sent, previous)));
            self.js
                .respond_message(origin, reply.clone(), headers, payload);
            previous = sequence;
            if max_bytes > 0 && sent_bytes >= max_bytes {
                break;
            }
        }
        let mut end = format!(
            "NATS/1.0 204 EOB\r\nNats-Num-Pending: {}\r\nNats-Last-Sequence: {previous}\r\n",
            total - sent
        );
        if let Some(up_to) = up_to {
            end.push_str(&format!("Nats-UpTo-Sequence: {up_to}\r\n"));
        }
        end.push_str("\r\n");
        self.js
            .respond_message(origin, reply, Bytes::from(end), Bytes::new());
    }

    /// `{"seq"|"next_by_subj"|"start_time", "batch": N}`: consecutive
    /// matching messages from the start.
    async fn direct_get_batch(
        &self,
        origin: usize,
        reply: Bytes,
        get: &MessageGet,
        batch: &requests::DirectBatch,
        no_headers: bool,
    ) {
        let (from, filter) = match get {
            MessageGet::Sequence(sequence) => (Some(*sequence), None),
            MessageGet::NextBySubject {
                subject,
                from_sequence,
            } => (Some(*from_sequence), Some(subject.as_str())),
            MessageGet::StartTime { unix_ns, subject } => (
                with_store!(&self.state.store, log => log.first_at_or_after(*unix_ns)),
                subject.as_deref(),
            ),
            MessageGet::LastBySubject(_) => (None, None),
        };
        let mut sequences = Vec::new();
        if let Some(mut from) = from.map(|from| from.max(1)) {
            while let Some(next) = with_store!(&self.state.store, log => log.next_matching(from, |subject| {
                filter.is_none_or(|filter| subject_matches(filter, &String::from_utf8_lossy(subject)))
            })) {
                sequences.push(next);
                from = next + 1;
            }
        }
        if sequences.is_empty() {
            let status = status_headers("404 Message Not Found");
            return self.js.respond_message(origin, reply, status, Bytes::new());
        }
        self.send_direct_batch(
            origin,
            reply,
            &sequences,
            batch.size,
            batch.max_bytes,
            no_headers,
            None,
        )
        .await;
    }

    /// `{"multi_last": [subjects…]}`: the last message of every subject
    /// matching one of the filters, up to a sequence or time, in sequence
    /// order.
    async fn direct_get_multi_last(
        &self,
        origin: usize,
        reply: Bytes,
        multi_last: &requests::DirectMultiLast,
        no_headers: bool,
    ) {
        let state = with_store!(&self.state.store, log => log.state());
        let mut up_to = if multi_last.up_to_sequence > 0 {
            multi_last.up_to_sequence.min(state.last_sequence)
        } else {
            state.last_sequence
        };
        if let Some(unix_ns) = multi_last.up_to_unix_ns {
            up_to = match with_store!(&self.state.store, log => log.first_at_or_after(unix_ns.saturating_add(1)))
            {
                Some(after) => up_to.min(after.saturating_sub(1)),
                None => up_to,
            };
        }
        let matches = |subject: &[u8]| {
            let subject = String::from_utf8_lossy(subject);
            multi_last
                .subjects
                .iter()
                .any(|filter| subject_matches(filter, &subject))
        };
        // Last sequence per matching subject, at most `up_to`.
        let mut last_per_subject: FxHashMap<Vec<u8>, u64> = FxHashMap::default();
        let mut from = state.first_sequence.max(1);
        while let Some(next) =
            with_store!(&self.state.store, log => log.next_matching(from, matches))
        {
            if next > up_to {
                break;
            }
            if let Some(subject) = with_store!(&self.state.store, log => log.subject_of(next)) {
                last_per_subject.insert(subject.to_vec(), next);
            }
            from = next + 1;
        }
        let mut sequences: Vec<u64> = last_per_subject.into_values().collect();
        sequences.sort_unstable();
        if sequences.is_empty() {
            let status = status_headers("404 No Results");
            return self.js.respond_message(origin, reply, status, Bytes::new());
        }
        let limit = if multi_last.batch > 0 {
            multi_last.batch
        } else {
            sequences.len()
        };
        self.send_direct_batch(
            origin,
            reply,
            &sequences,
            limit,
            multi_last.max_bytes,
            no_headers,
            Some(up_to),
        )
        .await;
    }
}

/// Stream info's `state` from the block store's, for a stream with
/// `config` and `consumers` consumers.
pub fn info_state(
    state: &StreamState,
    last_unix_ns: u64,
    config: &StreamConfig,
    consumers: usize,
) -> responses::StreamState {
    let empty = state.messages == 0;
    // A stream created with `first_seq` reports it before its first
    // message, with the sequence before it as the last (nats-server).
    let last_sequence = state
        .last_sequence
        .max(config.first_sequence.saturating_sub(1));
    responses::StreamState {
        messages: state.messages,
        bytes: state.bytes,
        // nats-server: 0 for a stream that never held a message, last + 1
        // once everything was removed.
        first_sequence: if empty && last_sequence == 0 {
            0
        } else if empty {
            last_sequence + 1
        } else {
            state.first_sequence
        },
        first_unix_ns: if empty { 0 } else { state.first_timestamp_ns },
        last_sequence,
        last_unix_ns: last_unix_ns.max(state.last_timestamp_ns),
        num_subjects: state.subjects,
        subjects: None,
        num_deleted: state.deleted,
        deleted: None,
        consumer_count: consumers as u64,
    }
}

fn status_headers(status: &str) -> Bytes {
    Bytes::from(format!("NATS/1.0 {status}\r\n\r\n"))
}

mod consumer_leader;
mod consumers;
pub mod failure;
pub mod groups;
mod leader;
mod persistence;
pub use consumers::ConsumerCommand;
use leader::{EntryApplied, Ingested, Leader, Owed, OwedReply};
mod state;
mod state_entries;
use state::{Applied, ReplicatedState};
pub mod replica;
pub mod snapshot;
