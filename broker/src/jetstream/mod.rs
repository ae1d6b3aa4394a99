//! JetStream: streams stored on the journal and block store, each a Raft
//! group on the shard its name hashes to, and the `$JS.API` that manages them.
//!
//! Who does what:
//! - every shard holds an internal, unannounced subscription on `$JS.API.>`;
//!   a request is handled on the shard that read it (its *origin*) or sent
//!   to the shard that can answer it: stream create/update/delete to the
//!   meta shard (0), which owns the catalog of names and subjects and checks
//!   overlaps; per-stream calls to the stream's owner; listings and account
//!   info are gathered from every shard by the origin. Answers travel back
//!   to the origin, which publishes them to the reply subject (the origin is
//!   where the requester's interest is certainly known).
//! - a stream's owner holds announced internal subscriptions on its
//!   subjects, so the ordinary cross-shard routing forwards publishes to it;
//!   PubAcks are published by the owner (the publish came over the ring that
//!   also carried the publisher's interest).
//! - each shard has one journal (`<journal_dir>/shard-<i>`) shared by the
//!   streams it owns (group commit across streams).
//!
//! On-disk layout under `<store_dir>/jetstream/`: `layout` (shard count),
//! `streams/<name>/{config,raft,messages/}`, `trash/` (deletes in progress).
//! Formats: docs/jetstream-format.md.
//!
//! Module map:
//! - [`api`]: the API's bodies: request decoding with nats-server's error
//!   texts ([`api::requests`], [`api::json`]), responses and PubAcks
//!   ([`api::responses`]; an answer is an [`api::responses::ApiReply`],
//!   an error only when built from an [`ApiError`], and counted in
//!   [`JetStream::respond`]), errors with their codes ([`api::error`]).
//! - [`stream`]: one stream: its config ([`stream::config`]: parsing,
//!   normalisation, validation, update rules, its JSON as nats-server
//!   writes it), the replicated state and its apply, the leader's side,
//!   `Replica`, snapshots, the shard's Raft groups and the stream task.
//! - [`consumer`]: consumer config, delivery and acks, pull requests.
//! - [`headers`]: reading publish headers.
//! - [`entry`]: what a stream's Raft log and the journal carry.
//! - [`persist`]: a stream's checksummed config and Raft state files.
//! - [`recovery`]: opening JetStream on a shard (the store's streams, the
//!   meta checkpoint, the journal and the votes file recovered), with what
//!   refuses the start ([`recovery::RecoveryError`]) and what only keeps
//!   streams offline ([`recovery::JournalDamage`]).
//! - [`expiry`], [`advisory`], [`usage`], [`layout`], [`store_check`]:
//!   TTLs, advisories, account usage, the on-disk layout and its checker.
//! - [`cluster`], [`meta`], [`replication`], [`listing`]: across nodes
//!   (the meta group, requests handed to other nodes, what operators see
//!   of the groups, STREAM.LIST and account INFO gathered by the meta
//!   leader).

pub mod advisory;
pub mod api;
pub mod cluster;
pub mod consumer;
pub mod entry;
pub mod expiry;
pub mod headers;
pub mod identity;
pub mod journal_location;
pub mod layout;
pub mod listing;
pub mod message;
pub mod meta;
pub mod meta_membership;
pub mod persist;
pub mod recovery;
pub mod replication;
pub mod sim;
pub mod sink;
pub mod stepdown;
pub mod store_check;
pub mod stream;
pub mod usage;
pub mod votes;

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rustc_hash::FxHashMap;
use tern_shard::Waiters;
use tern_storage::block_store::{DmaFiles, StreamState};
use tern_storage::dma::DmaDevice;
use tern_storage::free_space::{filesystem_free_bytes, FreeSpace};
use tern_storage::Journal;

use crate::cluster::routes::Routes;
use crate::config::JetStreamConfig;
use crate::internal::{InternalScope, InternalSink, InternalSubscription};
use crate::mesh::PeerSender;
use crate::mesh::StartBarrier;
use crate::routing::shard_routing::ShardRouting;
use api::error::ApiError;
use api::responses::{ApiReply, Outcome};
use api::{requests, responses};
use message::JetStreamMessage;
use meta::{Catalog, MetaChange, MetaOperation, MetaRefusal, StoreLimits};
use persist::StreamFilesError;
use recovery::StreamStartError;
use stream::config::{self as stream_config, StorageType, StreamConfig};
use stream::groups::StreamGroups;
use stream::{ApiCall, Inbound, Recovered, StreamApi, StreamHandle, StreamTask};

/// The shard that owns the stream catalog.
pub const META_SHARD: usize = 0;
/// A stream directory is built under this prefix and renamed into place
/// once its config and Raft state are written (leftovers are removed at
/// start: their creation was never answered).
const CREATING_PREFIX: &str = ".creating-";
/// Subject prefix of the API.
pub const API_PREFIX: &[u8] = b"$JS.API.";
/// How long start-up and stream creation wait for every shard to apply a
/// stream's interest.
pub const INTEREST_TIMEOUT: Duration = Duration::from_secs(10);
/// Owner commands one stream may have queued: each is a meta entry
/// applied, so this many waiting means the stream's queue is stuck.
const QUEUED_OWNER_COMMANDS_MAX: usize = 65_536;
/// How long an owner shard waits for a stream's task to remove its copy
/// after a delete (the task then moves its directory to the trash); past
/// it the deletion is reported done anyway, logged.
const REMOVAL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a gather (listing, account info) waits for the other shards.
pub const GATHER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a shard waits for its streams' tasks to list their consumers
/// (`/jsz?consumers=true`); a stream that has not answered by then is
/// listed without them.
pub const CONSUMER_DETAILS_TIMEOUT: Duration = Duration::from_secs(2);
/// Paging limits (nats-server).
pub const NAMES_LIMIT: usize = 1024;
pub const LIST_LIMIT: usize = 256;
const JOURNAL_BATCH_BYTES_MIN: usize = 2 << 20;

pub fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64)
}

/// Which shard owns `stream`.
pub fn owner_of(stream: &str, shard_count: usize) -> usize {
    tern_shard::placement::stream_shard("$G", stream, shard_count)
}

/// The `kind` MSG.NEXT is routed with: it has no JSON response type, so
/// where another request would get a JSON error, a pull request gets a
/// status (see `answer_unavailable`).
pub(crate) const CONSUMER_NEXT_KIND: &str = "consumer_next_response";

/// An API request on its way from the origin shard to the shard that
/// handles it.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    pub origin: usize,
    pub subject: Bytes,
    pub reply: Option<Bytes>,
    pub payload: Bytes,
    /// Nodes it passed before this one (0: a client of this node); it is
    /// handed on at most to [`crate::cluster::frame::API_HOPS_MAX`].
    pub hops: u8,
}

/// Meta shard -> owner: a change the catalog accepted.
#[derive(Debug)]
pub enum OwnerCommand {
    Create {
        config: Box<StreamConfig>,
        created_unix_ns: u64,
        group: u64,
        /// A replicated stream's voters (empty: one, this node).
        peers: Vec<u64>,
        /// A replica added to an existing group (it waits to be sent the
        /// stream; it does not stand for election at once).
        joining: bool,
        origin: usize,
        reply: Option<Bytes>,
    },
    /// A replicated stream's voters as the meta group placed them.
    Peers { name: String, peers: Vec<u64> },
    Update {
        config: Box<StreamConfig>,
        create: bool,
        origin: usize,
        reply: Option<Bytes>,
    },
    Delete {
        name: String,
        origin: usize,
        reply: Option<Bytes>,
        /// In a cluster: the meta entry (its index) whose apply asked for
        /// this deletion; shard 0 is told when it is done
        /// ([`JetStreamMessage::Deleted`]), so the meta leader answers
        /// a delete only once every node it reaches has carried it out.
        meta_index: Option<u64>,
    },
}

impl OwnerCommand {
    /// The stream the command is about.
    pub(crate) fn stream_name(&self) -> &str {
        match self {
            OwnerCommand::Create { config, .. } | OwnerCommand::Update { config, .. } => {
                &config.name
            }
            OwnerCommand::Delete { name, .. } | OwnerCommand::Peers { name, .. } => name,
        }
    }
}

/// One stream as a listing sees it.
#[derive(Debug, Clone)]
pub struct StreamSummary {
    pub name: String,
    pub config: Box<StreamConfig>,
    pub created_unix_ns: u64,
    pub state: StreamState,
    /// Time of the last message stored (kept when it is removed).
    pub last_unix_ns: u64,
    pub shard: usize,
    pub failure: Option<String>,
    /// Consumers of this replica: in office its live ones (durable and
    /// ephemeral), otherwise the durables of its log.
    pub consumers: usize,
    /// This replica leads it (one replica always does).
    pub leading: bool,
    /// Its Raft group.
    pub group: u64,
    /// More than one voter.
    pub replicated: bool,
}

/// What rebuilding a damaged replica from its peers keeps of it
/// ([`JetStream::rebuild_from_peers`]).
pub(crate) struct Rebuild {
    pub(crate) config: StreamConfig,
    pub(crate) created_unix_ns: u64,
    pub(crate) group: u64,
    pub(crate) peers: Vec<u64>,
    /// The checkpoint it had (its term and vote, what it had applied).
    pub(crate) previous: persist::RaftState,
    /// The journal's last hard state for the group, if any.
    pub(crate) hard_state: Option<tern_raft::HardState>,
    /// The last entry it acknowledged, from the journal.
    pub(crate) acknowledged_index: u64,
    /// How far it acknowledged is unknown (its checkpoint lost, its votes
    /// kept in the votes file): its entries are marked lost through its
    /// term (`Recovered::entries_lost_through_term`).
    pub(crate) entries_lost: bool,
}

/// A stream of this shard that could not be opened: damaged files, or a
/// damaged journal. It answers 500 10194 `stream is offline: <reason>`.
#[derive(Debug, Clone)]
pub struct OfflineStream {
    pub name: String,
    pub reason: String,
    /// Its config, when that was readable (filters listings by subject).
    pub config: Option<Box<StreamConfig>>,
    pub shard: usize,
}

/// What a shard reports to a gather.
#[derive(Debug, Default)]
pub struct Gathered {
    /// The shard that reported it.
    pub shard: usize,
    pub streams: Vec<StreamSummary>,
    /// Streams that could not be opened (listed by nats-server's
    /// `offline` and `missing` fields).
    pub offline: Vec<OfflineStream>,
    pub api_total: u64,
    pub api_errors: u64,
    /// In a cluster: the replicated streams' groups on this shard.
    pub stream_groups: Vec<replication::StreamGroupReport>,
    /// In a cluster: streams the meta group placed on this node that this
    /// shard does not run (nor holds offline).
    pub missing: Vec<String>,
    /// The shard's Raft groups by role, and their counters.
    pub raft: replication::RaftReport,
    /// Asked for ([`GatherDetail::consumers`]): each running stream's
    /// consumers, by stream name (a stream that did not answer in
    /// [`CONSUMER_DETAILS_TIMEOUT`] is not there).
    pub consumer_details: BTreeMap<String, Vec<stream::ConsumerDetail>>,
}

/// What a gather asks of each shard besides its streams' summaries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GatherDetail {
    /// Each stream's consumers as its task has them (`/jsz`), `Some(true)`
    /// with their configs.
    pub consumers: Option<bool>,
}

struct PendingGather {
    expected: usize,
    parts: RefCell<Vec<Gathered>>,
    arrived: Waiters,
}

/// What JetStream uses of the shard it runs on, handed in by the node:
/// JetStream reaches the layers below it (the publish path, the routes,
/// the other shards) through these and never names the shard.
pub struct ShardServices {
    pub index: usize,
    pub shard_count: usize,
    pub server_name: String,
    /// The server's `store_dir` (JetStream's files are under `jetstream/`).
    pub store_dir: PathBuf,
    /// The server's limits (the largest message sizes the journal's batch
    /// and the block store's segments).
    pub limits: crate::config::Limits,
    /// Bytes stored by every shard's streams (`max_file_store`,
    /// `max_memory_store`), shared by the node's shards.
    pub storage_usage: std::sync::Arc<usage::StorageUsage>,
    pub routing: Rc<ShardRouting>,
    /// This shard's routes to the other nodes (clustered only).
    pub routes: Option<Rc<Routes>>,
    pub peers: Rc<dyn PeerSender<JetStreamMessage>>,
    pub started: Rc<StartBarrier>,
}

impl ShardServices {
    /// Waits until every other shard of this node started (its JetStream,
    /// if any, is there to take messages).
    pub async fn wait_all_started(&self) {
        self.started.wait().await;
    }
}

pub struct JetStream {
    index: usize,
    shard_count: usize,
    config: JetStreamConfig,
    root: PathBuf,
    shard: ShardServices,
    /// This JetStream, for the sinks it hands the router.
    this: Weak<JetStream>,
    journal: OnceCell<Rc<Journal<DmaDevice>>>,
    /// The Raft groups of the streams this shard owns, and their driver.
    groups: OnceCell<Rc<StreamGroups>>,
    /// Why the journal could not be opened (then `journal` stays empty).
    journal_damage: RefCell<Option<String>>,
    streams: RefCell<BTreeMap<String, Rc<StreamHandle>>>,
    subscriptions: RefCell<FxHashMap<String, Vec<Rc<InternalSubscription>>>>,
    /// Streams whose files are damaged (name -> reason); they answer errors.
    damaged: RefCell<BTreeMap<String, String>>,
    /// The readable configs of damaged streams (journal damage).
    damaged_configs: RefCell<BTreeMap<String, Box<StreamConfig>>>,
    /// The catalog, on the meta shard only.
    catalog: RefCell<Catalog>,
    /// In a cluster, on the meta shard: the meta group.
    meta: OnceCell<Rc<cluster::Meta>>,
    /// In a cluster, on an owner shard: the nodes holding each of its
    /// streams (from the meta group), for requests to be handed to them.
    placements: RefCell<BTreeMap<String, Vec<u64>>>,
    /// On an owner shard: each stream's owner commands not yet carried
    /// out, in arrival order. One stream's commands run one after another
    /// (a delete is done, its copy gone, before a create of the same name
    /// starts); different streams' run side by side.
    owner_queues: RefCell<FxHashMap<String, VecDeque<OwnerCommand>>>,
    /// In a cluster: `placements` holds what the meta group knows (until
    /// then a stream not on this node may exist elsewhere: 503, not 404).
    meta_ready: Cell<bool>,
    /// In a cluster: the meta group's leader as shard 0 last announced.
    meta_leader: Cell<Option<u64>>,
    gathers: RefCell<FxHashMap<u64, Rc<PendingGather>>>,
    /// In a cluster, on shard 0: gathers across nodes in flight (at most
    /// [`listing::CLUSTER_GATHERS_MAX`]), and their inbox.
    cluster_gathers: RefCell<FxHashMap<u64, Rc<listing::ClusterGather>>>,
    gather_inbox: RefCell<Option<Rc<InternalSubscription>>>,
    next_gather: Cell<u64>,
    api_total: Cell<u64>,
    api_errors: Cell<u64>,
    stopping: Cell<bool>,
    stop_waiters: Waiters,
    /// Free space on the store's filesystem, kept above the reserve.
    free_space: RefCell<FreeSpace>,
    /// Whether publishes to file streams are being refused (logged on change).
    storage_refusing: Cell<bool>,
}

impl JetStream {
    /// JetStream on `shard` before anything is recovered
    /// ([`JetStream::open`], in `recovery`).
    fn new(
        shard: ShardServices,
        config: JetStreamConfig,
        root: PathBuf,
        free_space: FreeSpace,
    ) -> Rc<JetStream> {
        let limits = StoreLimits {
            max_file_bytes: config.max_file_bytes,
            max_memory_bytes: config.max_memory_bytes,
        };
        Rc::new_cyclic(|this| JetStream {
            index: shard.index,
            shard_count: shard.shard_count,
            config,
            root,
            shard,
            this: this.clone(),
            journal: OnceCell::new(),
            groups: OnceCell::new(),
            journal_damage: RefCell::new(None),
            streams: RefCell::new(BTreeMap::new()),
            subscriptions: RefCell::new(FxHashMap::default()),
            damaged: RefCell::new(BTreeMap::new()),
            damaged_configs: RefCell::new(BTreeMap::new()),
            catalog: RefCell::new(Catalog::new(limits)),
            meta: OnceCell::new(),
            placements: RefCell::new(BTreeMap::new()),
            owner_queues: RefCell::new(FxHashMap::default()),
            meta_ready: Cell::new(false),
            meta_leader: Cell::new(None),
            gathers: RefCell::new(FxHashMap::default()),
            cluster_gathers: RefCell::new(FxHashMap::default()),
            gather_inbox: RefCell::new(None),
            next_gather: Cell::new(0),
            api_total: Cell::new(0),
            api_errors: Cell::new(0),
            stopping: Cell::new(false),
            stop_waiters: Waiters::new(),
            free_space: RefCell::new(free_space),
            storage_refusing: Cell::new(false),
        })
    }

    /// The shard's journal. Only file streams use it, and none runs on a
    /// shard whose journal is damaged (see [`JetStream::journal_damage`]).
    pub fn journal(&self) -> &Rc<Journal<DmaDevice>> {
        self.journal
            .get()
            .expect("file streams run only with a journal")
    }

    /// The Raft groups of the streams this shard owns.
    pub fn groups(&self) -> &Rc<StreamGroups> {
        self.groups
            .get()
            .expect("groups run once the journal is opened")
    }

    /// The journal, unless it was found damaged at start-up.
    pub fn journal_if_open(&self) -> Option<&Rc<Journal<DmaDevice>>> {
        self.journal.get()
    }

    /// Why this shard's journal cannot be used, if it is damaged.
    pub fn journal_damage(&self) -> Option<String> {
        self.journal_damage.borrow().clone()
    }

    fn shard(&self) -> &ShardServices {
        &self.shard
    }

    pub fn server_name(&self) -> String {
        self.shard.server_name.clone()
    }

    pub fn stream_directory(&self, name: &str) -> PathBuf {
        self.root.join("streams").join(name)
    }

    pub fn stopping(&self) -> bool {
        self.stopping.get()
    }

    pub async fn wait_stopping(&self) {
        self.stop_waiters.wait_until(|| self.stopping.get()).await;
    }

    /// Asks every stream task to checkpoint and stop.
    pub fn stop(&self) {
        self.stopping.set(true);
        self.stop_waiters.wake_all();
    }

    /// Stops every stream task (each checkpoints first), bounded.
    pub async fn stop_and_wait(&self, timeout: Duration) {
        self.stop();
        let streams: Vec<Rc<StreamHandle>> = self.streams.borrow().values().cloned().collect();
        let all = async {
            for stream in streams {
                while !stream.is_stopped() {
                    tern_shard::timer::sleep(Duration::from_millis(1)).await;
                }
            }
        };
        let _ = tern_shard::timer::timeout(timeout, all).await;
    }

    /// Streams owned by this shard: (name, shard) for `/jsz`.
    pub fn owned_streams(&self) -> Vec<String> {
        self.streams.borrow().keys().cloned().collect()
    }

    /// The stored config JSON: the Raft group, the config and, for a
    /// replicated stream, its voters (`"peers"`, Raft node ids).
    pub fn stored_config_json(&self, group: u64, config_json: &str, peers: &[u64]) -> String {
        if peers.is_empty() {
            return format!("{{\"group\":{group},\"config\":{config_json}}}");
        }
        let peers: Vec<String> = peers.iter().map(u64::to_string).collect();
        format!(
            "{{\"group\":{group},\"config\":{config_json},\"peers\":[{}]}}",
            peers.join(",")
        )
    }

    async fn start_stream(
        self: &Rc<Self>,
        config: StreamConfig,
        created_unix_ns: u64,
        group: u64,
        files: Option<DmaFiles>,
        recovered: Recovered,
    ) -> Result<Rc<StreamHandle>, stream::failure::StreamFailure> {
        let name = config.name.clone();
        let config = Rc::new(config);
        let handle = StreamHandle::new(
            name.clone(),
            group,
            config.clone(),
            created_unix_ns,
            recovered.peers.clone(),
        );
        let task = StreamTask::open(
            self.clone(),
            handle.clone(),
            config.clone(),
            created_unix_ns,
            group,
            files,
            recovered,
        )
        .await?;
        self.streams.borrow_mut().insert(name, handle.clone());
        // A replicated stream's subjects are the leader's: its task
        // subscribes when it takes office.
        if !handle.is_replicated() {
            self.subscribe_stream(&handle, &config);
        }
        glommio::spawn_local(task.run()).detach();
        Ok(handle)
    }

    /// `$JS.API.>` on this shard only: every shard takes its clients'
    /// requests and forwards what another shard answers.
    fn subscribe_api(&self) {
        let api = Rc::new(InternalSubscription::new(
            Bytes::from_static(b"$JS.API.>"),
            InternalScope::Shard,
            self.sink(sink::Role::Api),
        ));
        let update = self.shard().routing.router.borrow_mut().add_internal(&api);
        assert!(matches!(update, Ok(None)), "a valid subject, not announced");
    }

    /// A sink for the router that hands JetStream (this shard's) what it
    /// matched, as `role`.
    fn sink(&self, role: sink::Role) -> Rc<dyn InternalSink> {
        Rc::new(sink::JetStreamSink {
            js: self.this.clone(),
            role,
        })
    }

    fn stream_subscriptions(
        &self,
        handle: &Rc<StreamHandle>,
        config: &StreamConfig,
    ) -> Vec<Rc<InternalSubscription>> {
        let subscription = |subject: Bytes, role: sink::Role| {
            Rc::new(InternalSubscription::new(
                subject,
                InternalScope::Cluster,
                self.sink(role),
            ))
        };
        let mut subscriptions: Vec<Rc<InternalSubscription>> = config
            .subjects
            .iter()
            .map(|subject| {
                subscription(
                    Bytes::copy_from_slice(subject.as_bytes()),
                    sink::Role::Stream(handle.clone()),
                )
            })
            .collect();
        // Acks, and push consumers' flow control replies.
        for subject in [
            format!("$JS.ACK.{}.>", config.name),
            format!("$JS.FC.{}.>", config.name),
        ] {
            subscriptions.push(subscription(
                Bytes::from(subject),
                sink::Role::Ack(handle.clone()),
            ));
        }
        if config.allow_direct {
            for subject in [
                format!("$JS.API.DIRECT.GET.{}", config.name),
                format!("$JS.API.DIRECT.GET.{}.>", config.name),
            ] {
                subscriptions.push(subscription(
                    Bytes::from(subject),
                    sink::Role::DirectGet(handle.clone()),
                ));
            }
        }
        subscriptions
    }

    fn subscribe_stream(&self, handle: &Rc<StreamHandle>, config: &StreamConfig) {
        let shard = self.shard();
        let subscriptions = self.stream_subscriptions(handle, config);
        for subscription in &subscriptions {
            let update = shard.routing.router.borrow_mut().add_internal(subscription);
            match update {
                Ok(Some(update)) => shard.routing.broadcast_interest(update),
                Ok(None) => {}
                Err(error) => {
                    log::error!(target: "tern::jetstream", "stream {}: subject {:?}: {error:?}", handle.name, subscription.subject)
                }
            }
        }
        self.subscriptions
            .borrow_mut()
            .insert(handle.name.clone(), subscriptions);
        // Other nodes route the stream's subjects here.
        shard.routing.export_interest();
    }

    fn unsubscribe_stream(&self, name: &str) {
        let shard = self.shard();
        let Some(subscriptions) = self.subscriptions.borrow_mut().remove(name) else {
            return;
        };
        for subscription in subscriptions {
            let update = shard
                .routing
                .router
                .borrow_mut()
                .remove_internal(&subscription);
            if let Some(update) = update {
                shard.routing.broadcast_interest(update);
            }
        }
        shard.routing.export_interest();
    }

    /// A stream's config changed: its subscriptions follow.
    pub fn stream_subjects_changed(
        &self,
        handle: &Rc<StreamHandle>,
        old: &StreamConfig,
        new: &StreamConfig,
    ) {
        if old.subjects == new.subjects && old.allow_direct == new.allow_direct {
            return;
        }
        // Subscribe the new set before dropping the old, so no publish to a
        // subject in both finds nobody.
        let old_subscriptions = self.subscriptions.borrow_mut().remove(&handle.name);
        self.subscribe_stream(handle, new);
        if let Some(subscriptions) = old_subscriptions {
            let shard = self.shard();
            for subscription in subscriptions {
                if let Some(update) = shard
                    .routing
                    .router
                    .borrow_mut()
                    .remove_internal(&subscription)
                {
                    shard.routing.broadcast_interest(update);
                }
            }
            shard.routing.export_interest();
        }
    }

    /// Forgets a deleted stream (its task has stopped).
    pub fn forget_stream(&self, handle: &Rc<StreamHandle>) {
        self.count_stored_bytes(handle, 0);
        self.unsubscribe_stream(&handle.name);
        {
            let mut streams = self.streams.borrow_mut();
            if streams
                .get(&handle.name)
                .is_some_and(|current| Rc::ptr_eq(current, handle))
            {
                streams.remove(&handle.name);
            }
        }
        handle.set_removed();
    }

    /// Moves the stream's directory to the trash (atomic), then removes it.
    pub async fn remove_stream_files(&self, name: &str) -> Result<(), StreamFilesError> {
        let directory = self.stream_directory(name);
        if !directory.exists() {
            return Ok(());
        }
        let trash = self.root.join("trash");
        std::fs::create_dir_all(&trash).map_err(StreamFilesError::io(&trash))?;
        let target = trash.join(format!("{name}.{:016x}", crate::random::random_u64()));
        std::fs::rename(&directory, &target).map_err(StreamFilesError::io(&directory))?;
        let streams = self.root.join("streams");
        std::fs::File::open(&streams)
            .and_then(|directory| directory.sync_all())
            .map_err(StreamFilesError::io(&streams))?;
        std::fs::remove_dir_all(&target).map_err(StreamFilesError::io(&target))
    }

    // ----- replies ------------------------------------------------------------

    /// Publishes a reply from this shard (PubAcks, direct gets on the owner).
    pub fn publish_reply(&self, reply: &[u8], payload: &[u8]) {
        self.shard().routing.publish_internal(reply, 0, payload);
    }

    /// Sends an API answer to the origin shard, which publishes it; an
    /// error is counted here, and only here.
    pub fn respond(&self, origin: usize, reply: Bytes, answer: impl Into<ApiReply>) {
        let answer = answer.into();
        // The meta leader's own requests are not counted (see `listing`).
        if answer.outcome() == Outcome::Error && !Self::is_gather_reply(Some(&reply)) {
            self.api_errors.set(self.api_errors.get() + 1);
        }
        let body = Bytes::from(answer.into_body());
        self.respond_message(origin, reply, Bytes::new(), body);
    }

    /// Sends a reply message with a header block to the origin shard.
    pub fn respond_message(&self, origin: usize, reply: Bytes, headers: Bytes, payload: Bytes) {
        let shard = self.shard();
        if origin == self.index {
            let mut message = Vec::with_capacity(headers.len() + payload.len());
            message.extend_from_slice(&headers);
            message.extend_from_slice(&payload);
            shard
                .routing
                .publish_internal(&reply, headers.len(), &message);
        } else {
            self.peers().send(
                origin,
                JetStreamMessage::Reply(Box::new((reply, headers, payload))),
            );
        }
    }

    fn send_to(self: &Rc<Self>, target: usize, message: JetStreamMessage) {
        if target == self.index {
            let js = self.clone();
            glommio::spawn_local(async move { js.handle_shard_message(message) }).detach();
        } else {
            self.peers().send(target, message);
        }
    }

    /// Waits (bounded) until this node's other shards applied this shard's
    /// interest changes (a new stream's subjects).
    async fn wait_interest_applied(&self) {
        let shard = self.shard();
        shard.routing.wait_interest_applied(INTEREST_TIMEOUT).await;
    }

    /// How this JetStream reaches the other shards' (the node's outboxes).
    fn peers(&self) -> Rc<dyn PeerSender<JetStreamMessage>> {
        self.shard.peers.clone()
    }

    /// The cluster's name, in a cluster.
    pub fn cluster_name(&self) -> Option<String> {
        self.shard()
            .routes
            .as_ref()
            .map(|routes| routes.config.name.clone())
    }

    /// The server name of the node with Raft id `node`, if this shard
    /// ever linked to it (or it is this node), and whether it reaches it.
    pub fn peer_name(&self, node: u64) -> Option<replication::PeerName> {
        if self.node_id() == Some(node) {
            return Some(replication::PeerName {
                name: self.server_name(),
                reachable: true,
            });
        }
        let shard = self.shard();
        let routes = shard.routes.as_ref()?;
        // Linked since this process started; else (shard 0) as the meta
        // group recorded it.
        let name = routes.known_node_name(node).or_else(|| {
            self.meta
                .get()
                .and_then(|meta| meta.state.borrow().names.get(&node).cloned())
        })?;
        Some(replication::PeerName {
            name,
            reachable: routes.link_to_node(node).is_some(),
        })
    }

    /// This node's Raft id, in a cluster.
    pub fn node_id(&self) -> Option<u64> {
        self.shard().routes.as_ref().map(|routes| routes.node_id())
    }

    /// A Raft message from another node for one of this shard's groups.
    pub fn raft_message(&self, group: u64, envelope: tern_raft::Envelope) {
        if let Some(groups) = self.groups.get() {
            groups.step(group, envelope);
        }
    }

    // ----- the API ------------------------------------------------------------

    /// A message matched `$JS.API.>` on this shard. Returns whether it was
    /// taken (DIRECT.GET is left to the streams' own subscriptions, so a
    /// direct get nobody serves gets "no responders").
    pub fn on_api(
        self: &Rc<Self>,
        subject: &[u8],
        reply: Option<&[u8]>,
        header_bytes: usize,
        message: &[u8],
    ) -> bool {
        let rest = &subject[API_PREFIX.len()..];
        if rest.starts_with(b"DIRECT.GET.") || rest == b"DIRECT.GET" {
            return false;
        }
        self.api_total.set(self.api_total.get() + 1);
        let request = ApiRequest {
            origin: self.index,
            subject: Bytes::copy_from_slice(subject),
            reply: reply.map(Bytes::copy_from_slice),
            payload: Bytes::copy_from_slice(&message[header_bytes..]),
            hops: 0,
        };
        self.dispatch_api(request);
        true
    }

    /// Sends a request to the shard that handles it (or handles it here).
    fn dispatch_api(self: &Rc<Self>, request: ApiRequest) {
        let text = String::from_utf8_lossy(&request.subject[API_PREFIX.len()..]).into_owned();
        let tokens: Vec<&str> = text.split('.').collect();
        match tokens.as_slice() {
            // In a cluster the names, the list and the account's figures
            // are the meta leader's (shard 0).
            ["INFO"] | ["STREAM", "NAMES" | "LIST"] if self.is_clustered() => {
                self.send_to(META_SHARD, JetStreamMessage::Api(Box::new(request)));
            }
            ["INFO"] => {
                let js = self.clone();
                glommio::spawn_local(async move { js.account_info(request).await }).detach();
            }
            // Only from the meta leader's node, to shard 0 (see `listing`).
            tokens
                if tokens == listing::NODE_USAGE_TOKENS
                    && request.hops > 0
                    && self.index == META_SHARD =>
            {
                self.answer_node_usage(request)
            }
            // Only from another node, to shard 0 (see `cluster`).
            tokens
                if tokens == cluster::META_CARRIED_OUT_TOKENS
                    && request.hops > 0
                    && self.index == META_SHARD =>
            {
                self.on_carried_out_report(&request)
            }
            tokens
                if tokens == meta_membership::META_JOIN_TOKENS
                    && request.hops > 0
                    && self.index == META_SHARD =>
            {
                self.on_join_request(&request)
            }
            ["SERVER", "REMOVE"] if self.is_clustered() => {
                self.send_to(META_SHARD, JetStreamMessage::Api(Box::new(request)));
            }
            ["STREAM", "NAMES"] | ["STREAM", "LIST"] => {
                let js = self.clone();
                let list = tokens[1] == "LIST";
                glommio::spawn_local(async move { js.names_or_list(request, list).await }).detach();
            }
            ["STREAM", "CREATE" | "UPDATE" | "DELETE", _] => {
                self.send_to(META_SHARD, JetStreamMessage::Api(Box::new(request)));
            }
            ["STREAM", "INFO" | "PURGE", name]
            | ["STREAM", "MSG", "GET" | "DELETE", name]
            | ["CONSUMER", "MSG", "NEXT", name, _]
            | ["CONSUMER", "CREATE" | "INFO" | "DELETE", name, ..]
            | ["CONSUMER", "NAMES" | "LIST", name]
            | ["CONSUMER", "DURABLE", "CREATE", name, ..] => {
                let owner = owner_of(name, self.shard_count);
                self.send_to(owner, JetStreamMessage::Api(Box::new(request)));
            }
            ["STREAM", "LEADER", "STEPDOWN", name] if self.is_clustered() => {
                let owner = owner_of(name, self.shard_count);
                self.send_to(owner, JetStreamMessage::Api(Box::new(request)));
            }
            ["META", "LEADER", "STEPDOWN"] if self.is_clustered() => {
                self.send_to(META_SHARD, JetStreamMessage::Api(Box::new(request)));
            }
            ["CONSUMER", "LEADER", "STEPDOWN", name, _] if self.is_clustered() => {
                let owner = owner_of(name, self.shard_count);
                self.send_to(owner, JetStreamMessage::Api(Box::new(request)));
            }
            ["CONSUMER", "LEADER", "STEPDOWN", _, _] => {
                self.answer_here(
                    request,
                    "consumer_leader_stepdown_response",
                    ApiError::clustering_required(),
                );
            }
            ["STREAM", "LEADER", "STEPDOWN", _] => {
                self.answer_here(
                    request,
                    "stream_leader_stepdown_response",
                    ApiError::clustering_required(),
                );
            }
            ["STREAM", "PEER", "REMOVE", _] if self.is_clustered() => {
                self.send_to(META_SHARD, JetStreamMessage::Api(Box::new(request)));
            }
            ["STREAM", "PEER", "REMOVE", _] => {
                self.answer_here(
                    request,
                    "stream_remove_peer_response",
                    ApiError::clustering_required(),
                );
            }
            _ => {
                // Unknown or not yet served (consumers arrive with their
                // issue): no response, as nats-server for unknown subjects.
                log::debug!(target: "tern::jetstream", "no handler for {text}");
            }
        }
    }

    fn answer_here(&self, request: ApiRequest, kind: &str, error: ApiError) {
        self.answer_error(request.origin, request.reply, kind, &error);
    }

    /// Answers an API call with an error, if it asked for an answer.
    pub fn answer_error(&self, origin: usize, reply: Option<Bytes>, kind: &str, error: &ApiError) {
        if let Some(reply) = reply {
            self.respond(origin, reply, ApiReply::error(kind, error));
        }
    }

    /// Handles what another shard (or this one) sent JetStream.
    pub fn handle_shard_message(self: &Rc<Self>, message: JetStreamMessage) {
        match message {
            JetStreamMessage::Api(request) => self.handle_request(*request),
            JetStreamMessage::Owner(command) => self.queue_owner_command(*command),
            JetStreamMessage::Deleted { meta_index } => self.deletion_done(meta_index),
            JetStreamMessage::CreateFailed { name } => {
                // In a cluster the meta group's catalog keeps it (the
                // stream is offline on its node, not gone).
                if self.meta.get().is_none() {
                    self.catalog.borrow_mut().forget(&name);
                }
            }
            JetStreamMessage::Placement { name, peers } => self.set_placement(name, peers),
            JetStreamMessage::MetaReady(ready) => self.meta_ready.set(ready),
            JetStreamMessage::MetaLeader(leader) => self.set_meta_leader(leader),
            JetStreamMessage::Reply(reply) => {
                let (reply, headers, payload) = *reply;
                let mut message = Vec::with_capacity(headers.len() + payload.len());
                message.extend_from_slice(&headers);
                message.extend_from_slice(&payload);
                self.shard()
                    .routing
                    .publish_internal(&reply, headers.len(), &message);
            }
            JetStreamMessage::Gather { id, origin, detail } => {
                if detail == GatherDetail::default() {
                    let gathered = self.gather_local();
                    return self.send_to(
                        origin,
                        JetStreamMessage::Gathered {
                            id,
                            gathered: Box::new(gathered),
                        },
                    );
                }
                // The streams' tasks answer in their turns.
                let js = self.clone();
                glommio::spawn_local(async move {
                    let gathered = js.gather_local_with(detail).await;
                    js.send_to(
                        origin,
                        JetStreamMessage::Gathered {
                            id,
                            gathered: Box::new(gathered),
                        },
                    );
                })
                .detach();
            }
            JetStreamMessage::Gathered { id, gathered } => {
                let pending = self.gathers.borrow().get(&id).cloned();
                if let Some(pending) = pending {
                    pending.parts.borrow_mut().push(*gathered);
                    pending.arrived.wake_all();
                }
            }
        }
    }

    pub(super) fn handle_request(self: &Rc<Self>, request: ApiRequest) {
        let text = String::from_utf8_lossy(&request.subject[API_PREFIX.len()..]).into_owned();
        let tokens: Vec<&str> = text.split('.').collect();
        match tokens.as_slice() {
            ["STREAM", "NAMES"] => self.cluster_names(request),
            ["STREAM", "LIST"] => self.cluster_list(request),
            ["INFO"] => self.cluster_account_info(request),
            ["CONSUMER", "LEADER", "STEPDOWN", name, consumer] => self.stream_call(
                name,
                request,
                StreamApi::ConsumerLeaderStepdown {
                    consumer: consumer.to_string(),
                },
                "consumer_leader_stepdown_response",
            ),
            ["STREAM", "LEADER", "STEPDOWN", name] => self.stream_call(
                name,
                request,
                StreamApi::LeaderStepdown,
                "stream_leader_stepdown_response",
            ),
            ["META", "LEADER", "STEPDOWN"] => self.meta_stepdown(request),
            ["SERVER", "REMOVE"] => self.server_remove(request),
            ["STREAM", "PEER", "REMOVE", name] => {
                let name = name.to_string();
                self.peer_remove_clustered(&name, request);
            }
            ["STREAM", operation @ ("CREATE" | "UPDATE" | "DELETE"), name] => {
                assert_eq!(self.index, META_SHARD);
                let operation = operation.to_string();
                let name = name.to_string();
                self.meta_request(&operation, &name, request);
            }
            ["STREAM", "INFO", name] => {
                self.stream_call(name, request, StreamApi::Info, "stream_info_response")
            }
            ["STREAM", "PURGE", name] => {
                self.stream_call(name, request, StreamApi::Purge, "stream_purge_response")
            }
            ["STREAM", "MSG", "GET", name] => self.stream_call(
                name,
                request,
                StreamApi::MessageGet,
                "stream_msg_get_response",
            ),
            ["STREAM", "MSG", "DELETE", name] => self.stream_call(
                name,
                request,
                StreamApi::MessageDelete,
                "stream_msg_delete_response",
            ),
            ["CONSUMER", "MSG", "NEXT", name, consumer] => {
                let handle = self.streams.borrow().get(*name).cloned();
                match handle.filter(|handle| !handle.is_stopped()) {
                    Some(handle) => {
                        if !self.route_to_leader(&handle, &request, CONSUMER_NEXT_KIND) {
                            handle.consumer(stream::ConsumerCommand::Next {
                                consumer: consumer.to_string(),
                                reply: request.reply,
                                payload: request.payload,
                            });
                        }
                    }
                    None if self.forward_to_host(name, &request, CONSUMER_NEXT_KIND) => {}
                    // No such stream: nobody would be listening (503).
                    None => self.no_responders(request.reply),
                }
            }
            ["CONSUMER", rest @ ..] => {
                let name = match rest {
                    ["DURABLE", "CREATE", name, ..] => *name,
                    [_, name, ..] => *name,
                    _ => unreachable!("routed only with a stream name: {text}"),
                };
                let kind = match rest.first() {
                    Some(&"INFO") => "consumer_info_response",
                    Some(&"DELETE") => "consumer_delete_response",
                    Some(&"NAMES") => "consumer_names_response",
                    Some(&"LIST") => "consumer_list_response",
                    _ => "consumer_create_response",
                };
                let tokens = rest.iter().map(|token| token.to_string()).collect();
                self.stream_call(name, request, StreamApi::Consumer { tokens }, kind)
            }
            _ => unreachable!("routed only known subjects: {text}"),
        }
    }

    /// A per-stream call on the owner shard.
    fn stream_call(
        self: &Rc<Self>,
        name: &str,
        request: ApiRequest,
        kind: StreamApi,
        response_kind: &str,
    ) {
        let handle = self.streams.borrow().get(name).cloned();
        if handle.is_none() && self.forward_to_host(name, &request, response_kind) {
            return;
        }
        if handle.is_none() && self.is_clustered() && !self.meta_ready.get() {
            return self.answer_here(request, response_kind, ApiError::cluster_unavailable());
        }
        if let Some(handle) = &handle {
            if self.route_to_leader(handle, &request, response_kind) {
                return;
            }
        }
        let Some(handle) = handle.clone().filter(|handle| !handle.is_stopped()) else {
            let stopped = handle.map(|handle| handle.failure_reason());
            let error = match stopped.or_else(|| self.damaged.borrow().get(name).cloned()) {
                Some(reason) => ApiError::stream_offline(&reason),
                None => ApiError::stream_not_found(),
            };
            return self.answer_here(request, response_kind, error);
        };
        self.call_stream(
            &handle,
            ApiCall {
                origin: request.origin,
                reply: request.reply,
                payload: request.payload,
                kind,
            },
        );
    }

    /// Queues `call` for the stream's task, or, when the stream stopped
    /// after a storage error (its task is gone), answers `stream is
    /// offline` with the reason.
    fn call_stream(&self, handle: &StreamHandle, call: ApiCall) {
        if let Err(call) = handle.call(call) {
            self.answer_error(
                call.origin,
                call.reply,
                call.kind.response_kind(),
                &ApiError::stream_offline(&handle.failure_reason()),
            );
        }
    }

    /// Deletes a stream whose task stopped after a storage error: releases
    /// its journal records, forgets it and removes its files (the way out of
    /// a full disk).
    async fn delete_stopped_stream(
        &self,
        handle: &Rc<StreamHandle>,
    ) -> Result<(), StreamFilesError> {
        assert!(handle.is_stopped());
        self.journal().checkpoint(handle.group, u64::MAX);
        self.forget_stream(handle);
        self.remove_stream_files(&handle.name).await
    }

    /// Create, update and delete, checked against the catalog (meta shard)
    /// and sent to the stream's owner once the catalog took them.
    fn meta_request(self: &Rc<Self>, operation: &str, name: &str, request: ApiRequest) {
        let (kind, operation) = match operation {
            "CREATE" => ("stream_create_response", MetaOperation::Create),
            "UPDATE" => ("stream_update_response", MetaOperation::Update),
            _ => ("stream_delete_response", MetaOperation::Delete),
        };
        if self.meta.get().is_some() {
            return self.meta_request_clustered(kind, operation, name, request);
        }
        let Some(change) = self.check_meta(operation, name, &request, kind) else {
            return;
        };
        self.catalog.borrow_mut().apply(&change);
        let command = match change {
            MetaChange::Delete { name } => OwnerCommand::Delete {
                name,
                origin: request.origin,
                reply: request.reply,
                meta_index: None,
            },
            MetaChange::Exists { config } => OwnerCommand::Update {
                config: Box::new(config),
                create: true,
                origin: request.origin,
                reply: request.reply,
            },
            MetaChange::Create { config, group } => OwnerCommand::Create {
                config: Box::new(config),
                created_unix_ns: now_unix_ns(),
                group,
                peers: Vec::new(),
                joining: false,
                origin: request.origin,
                reply: request.reply,
            },
            MetaChange::Update { config } => OwnerCommand::Update {
                config: Box::new(config),
                create: false,
                origin: request.origin,
                reply: request.reply,
            },
        };
        let owner = owner_of(name, self.shard_count);
        self.send_to(owner, JetStreamMessage::Owner(Box::new(command)));
    }

    /// The catalog's decision on a create, update or delete (a new
    /// stream's Raft group drawn at random); a refusal is answered here.
    fn check_meta(
        &self,
        operation: MetaOperation,
        name: &str,
        request: &ApiRequest,
        kind: &str,
    ) -> Option<MetaChange> {
        let checked = self
            .catalog
            .borrow()
            .check(operation, name, &request.payload, || {
                crate::random::random_u64() | 1
            });
        let error = match checked {
            Ok(change) => return Some(change),
            Err(MetaRefusal::Api(error)) => error,
            Err(MetaRefusal::Damaged) => {
                let reason = self.damaged.borrow().get(name).cloned().unwrap_or_default();
                ApiError::stream_offline(&reason)
            }
        };
        self.answer_error(request.origin, request.reply.clone(), kind, &error);
        None
    }

    /// `max_file_store` or `max_memory_store` (negative: none).
    fn store_limit_bytes(&self, storage: StorageType) -> i64 {
        match storage {
            StorageType::File => self.config.max_file_bytes,
            StorageType::Memory => self.config.max_memory_bytes,
        }
    }

    /// Queues `command` behind its stream's earlier ones. A stream with
    /// an entry in `owner_queues` has its task running; the first command
    /// of a stream starts one.
    fn queue_owner_command(self: &Rc<Self>, command: OwnerCommand) {
        let name = command.stream_name().to_string();
        {
            let mut queues = self.owner_queues.borrow_mut();
            if let Some(queue) = queues.get_mut(&name) {
                assert!(
                    queue.len() < QUEUED_OWNER_COMMANDS_MAX,
                    "stream {name}: {} owner commands queued",
                    queue.len()
                );
                queue.push_back(command);
                return;
            }
            queues.insert(name.clone(), VecDeque::from([command]));
        }
        // (glommio may poll a new task at once: nothing stays borrowed.)
        glommio::spawn_local(self.clone().run_owner_queue(name)).detach();
    }

    /// Carries out `name`'s owner commands one by one; once none is left
    /// (checked and forgotten in one step, so a later command starts a
    /// new task), ends.
    async fn run_owner_queue(self: Rc<Self>, name: String) {
        loop {
            let next = {
                let mut queues = self.owner_queues.borrow_mut();
                let queue = queues.get_mut(&name).expect("a queue while its task runs");
                match queue.pop_front() {
                    Some(command) => command,
                    None => {
                        queues.remove(&name);
                        return;
                    }
                }
            };
            self.clone().handle_owner_command(next).await;
        }
    }

    async fn handle_owner_command(self: Rc<Self>, command: OwnerCommand) {
        match command {
            OwnerCommand::Peers { name, peers } => {
                let handle = self.streams.borrow().get(&name).cloned();
                if let Some(handle) = handle {
                    self.call_stream(
                        &handle,
                        ApiCall {
                            origin: self.index,
                            reply: None,
                            payload: Bytes::new(),
                            kind: StreamApi::Peers { peers },
                        },
                    );
                }
            }
            OwnerCommand::Create {
                config,
                created_unix_ns,
                group,
                peers,
                joining,
                origin,
                reply,
            } => {
                let name = config.name.clone();
                // Every replica's node has the reply; a failure here is
                // told by the stream's first node only (the others may
                // well have created it).
                let answers_failure = peers
                    .first()
                    .is_none_or(|first| Some(*first) == self.node_id());
                let existing = self.streams.borrow().get(&name).cloned();
                if let Some(handle) = existing {
                    // The meta group's log applied again after a restart,
                    // or a snapshot's reconcile: the stream is here.
                    if reply.is_some() {
                        self.answer_create(&handle, config, origin, reply);
                    }
                    return;
                }
                match self
                    .create_stream(*config, created_unix_ns, group, peers, joining)
                    .await
                {
                    Ok(handle) => {
                        // A replicated stream: its replica in office
                        // answers, once the group has a leader (the first
                        // node stood for election at once), so the
                        // creator's first publishes find one.
                        if handle.is_replicated() && reply.is_some() {
                            let deadline = Instant::now() + INTEREST_TIMEOUT;
                            while handle.leader.get().is_none() && Instant::now() < deadline {
                                // Bounded poll of the task's leadership.
                                tern_shard::timer::sleep(Duration::from_millis(5)).await;
                            }
                        }
                        // Every shard must route the stream's subjects here
                        // before the creator hears it exists.
                        self.wait_interest_applied().await;
                        let config = Box::new(handle.snapshot.borrow().config.as_ref().clone());
                        self.answer_create(&handle, config, origin, reply);
                    }
                    Err(error) => {
                        log::error!(target: "tern::jetstream", "creating stream {name}: {error}");
                        let _ = self.remove_stream_files(&name).await;
                        self.send_to(META_SHARD, JetStreamMessage::CreateFailed { name });
                        if let Some(reply) = reply.filter(|_| answers_failure) {
                            self.respond(
                                origin,
                                reply,
                                ApiReply::error(
                                    "stream_create_response",
                                    &ApiError::stream_create_failed(&error.to_string()),
                                ),
                            );
                        }
                    }
                }
            }
            OwnerCommand::Update {
                config,
                create,
                origin,
                reply,
            } => {
                let name = config.name.clone();
                let handle = self.streams.borrow().get(&name).cloned();
                match handle {
                    Some(handle) => {
                        self.call_stream(
                            &handle,
                            ApiCall {
                                origin,
                                reply,
                                payload: Bytes::new(),
                                // A create of a stream that exists with
                                // this config: one server says
                                // `did_create`, a cluster does not (as
                                // nats-server's meta leader answers it).
                                kind: StreamApi::Update {
                                    config,
                                    create,
                                    did_create: create && !self.is_clustered(),
                                },
                            },
                        );
                        if !create {
                            self.wait_interest_applied().await;
                        }
                    }
                    None => {
                        if let Some(reply) = reply {
                            self.respond(
                                origin,
                                reply,
                                ApiReply::error(
                                    if create {
                                        "stream_create_response"
                                    } else {
                                        "stream_update_response"
                                    },
                                    &ApiError::stream_not_found(),
                                ),
                            );
                        }
                    }
                }
            }
            OwnerCommand::Delete {
                name,
                origin,
                reply,
                meta_index,
            } => {
                self.delete_copy(&name, origin, reply).await;
                if let Some(meta_index) = meta_index {
                    self.send_to(META_SHARD, JetStreamMessage::Deleted { meta_index });
                }
            }
        }
    }

    /// Deletes this node's copy of `name`, and returns once it is gone:
    /// its task has removed it (or, stopped or damaged, it is removed
    /// here). A live stream's task answers `reply`; otherwise it is
    /// answered here.
    async fn delete_copy(&self, name: &str, origin: usize, reply: Option<Bytes>) {
        let handle = self.streams.borrow().get(name).cloned();
        if let Some(handle) = handle.as_ref().filter(|handle| !handle.is_stopped()) {
            let call = ApiCall {
                origin,
                reply,
                payload: Bytes::new(),
                kind: StreamApi::Delete,
            };
            assert!(handle.call(call).is_ok(), "checked: not stopped");
            let removed = handle.wait_removed();
            let timeout = async {
                tern_shard::timer::sleep(REMOVAL_TIMEOUT).await;
                false
            };
            let removed = futures_lite::future::or(
                async {
                    removed.await;
                    true
                },
                timeout,
            )
            .await;
            if !removed {
                log::warn!(target: "tern::jetstream", "stream {name}: its copy was not removed within {REMOVAL_TIMEOUT:?} of its delete");
            }
            return;
        }
        let result = match handle {
            // Stopped after a storage error: its task is gone.
            Some(handle) => self.delete_stopped_stream(&handle).await,
            // A damaged stream: its files go.
            None => {
                self.damaged.borrow_mut().remove(name);
                self.remove_stream_files(name).await
            }
        };
        if let Some(reply) = reply {
            self.respond(origin, reply, responses::delete_result(result));
        }
    }

    /// The stream answers a create with its info (`did_create`).
    fn answer_create(
        &self,
        handle: &StreamHandle,
        config: Box<StreamConfig>,
        origin: usize,
        reply: Option<Bytes>,
    ) {
        self.call_stream(
            handle,
            ApiCall {
                origin,
                reply,
                payload: Bytes::new(),
                kind: StreamApi::Update {
                    config,
                    create: true,
                    did_create: true,
                },
            },
        );
    }

    async fn create_stream(
        self: &Rc<Self>,
        config: StreamConfig,
        created_unix_ns: u64,
        group: u64,
        peers: Vec<u64>,
        joining: bool,
    ) -> Result<Rc<StreamHandle>, StreamStartError> {
        let recovered = Recovered {
            raft: None,
            hard_state: None,
            entries: Vec::new(),
            peers: peers.clone(),
            acknowledged_index: 0,
            joining,
            entries_lost_through_term: 0,
        };
        if config.storage == StorageType::Memory {
            // Nothing persisted: gone after a restart, as in nats-server.
            return Ok(self
                .start_stream(config, created_unix_ns, group, None, recovered)
                .await?);
        }
        if let Some(damage) = self.journal_damage() {
            return Err(StreamStartError::JournalDamaged {
                shard: self.index,
                damage,
            });
        }
        let files = self
            .write_stream_directory(
                &config,
                created_unix_ns,
                group,
                &peers,
                &persist::RaftState::created(1),
            )
            .await?;
        let raft = persist::read_raft(&files).await?;
        let recovered = Recovered { raft, ..recovered };
        Ok(self
            .start_stream(config, created_unix_ns, group, Some(files), recovered)
            .await?)
    }

    // ----- publishing into streams ---------------------------------------------

    /// A message matched a stream's subscription on this (owner) shard.
    pub fn on_stream_publish(
        &self,
        handle: &StreamHandle,
        subject: &[u8],
        reply: Option<&[u8]>,
        header_bytes: usize,
        message: &[u8],
    ) {
        let storage = handle.storage();
        let refused = self.over_store_limit(storage)
            || (storage == StorageType::File
                && !self.storage_has_room(subject.len() + message.len()));
        if refused {
            if let Some(reply) = reply {
                let error = ApiError::insufficient_resources();
                self.publish_reply(
                    reply,
                    responses::pub_ack_error(&handle.name, &error).as_bytes(),
                );
            }
            return;
        }
        let inbound = Inbound {
            message: entry::PendingMessage::new(
                subject,
                &message[..header_bytes],
                &message[header_bytes..],
            ),
            reply: reply.map(Bytes::copy_from_slice),
        };
        if let Err(refused) = handle.publish(inbound) {
            let (inbound, error) = *refused;
            let Some(reply) = inbound.reply else {
                return;
            };
            let body = responses::pub_ack_error(&handle.name, &error);
            if error.status == 429 {
                // nats-server: a 429 status message carrying the error PubAck.
                let head = b"NATS/1.0 429 Too Many Requests\r\n\r\n";
                let mut message = head.to_vec();
                message.extend_from_slice(body.as_bytes());
                self.shard()
                    .routing
                    .publish_internal(&reply, head.len(), &message);
            } else {
                self.publish_reply(&reply, body.as_bytes());
            }
        }
    }

    /// Counts a stream's stored bytes in the server-wide usage (after each
    /// turn of its task; 0 once it is gone).
    pub fn count_stored_bytes(&self, handle: &StreamHandle, bytes: u64) {
        let before = handle.counted_bytes.replace(bytes);
        if before != bytes {
            self.shard
                .storage_usage
                .record(self.index, handle.storage(), before, bytes);
        }
    }

    /// Whether the server stores more of `storage` than its `max_file_store`
    /// or `max_memory_store` (nats-server then refuses publishes, 503 10023).
    fn over_store_limit(&self, storage: StorageType) -> bool {
        let limit_bytes = self.store_limit_bytes(storage);
        // No limit: no look at the other shards' slots.
        limit_bytes >= 0 && self.shard.storage_usage.exceeds(storage, limit_bytes)
    }

    /// Whether `bytes` more may go to a file stream: false while the
    /// filesystem's free space is under the reserve (counts them if so).
    fn storage_has_room(&self, bytes: usize) -> bool {
        let mut space = self.free_space.borrow_mut();
        let now = Instant::now();
        if space.needs_check(now) {
            match filesystem_free_bytes(&self.root) {
                Ok(free_bytes) => space.record_check(free_bytes, now),
                // Unknown space must not stop publishing; the next look
                // comes after the interval.
                Err(error) => {
                    log::warn!(target: "tern::jetstream", "statvfs {}: {error}", self.root.display());
                    space.record_check(u64::MAX, now);
                }
            }
        }
        let low = space.is_low();
        if low != self.storage_refusing.replace(low) {
            log::warn!(
                target: "tern::jetstream",
                "shard {}: about {} MiB free on {}, reserve {} MiB: publishes to file streams {}",
                self.index,
                space.free_bytes_estimate().unwrap_or_default() >> 20,
                self.root.display(),
                space.reserve_bytes() >> 20,
                if low { "refused (insufficient resources)" } else { "accepted again" }
            );
        }
        if !low {
            space.note_written(bytes as u64);
        }
        !low
    }

    /// What a requester hears when nothing serves its subject.
    pub fn no_responders(&self, reply: Option<Bytes>) {
        if let Some(reply) = reply {
            let head = b"NATS/1.0 503\r\n\r\n";
            self.shard()
                .routing
                .publish_internal(&reply, head.len(), head);
        }
    }

    /// An ack (`$JS.ACK.<stream>.…`) reached the stream's owner.
    pub fn on_ack(&self, handle: &StreamHandle, subject: &[u8], reply: Option<&[u8]>, body: &[u8]) {
        handle.consumer(stream::ConsumerCommand::Ack {
            subject: Bytes::copy_from_slice(subject),
            body: Bytes::copy_from_slice(body),
            reply: reply.map(Bytes::copy_from_slice),
        });
    }

    /// A direct get matched a stream's DIRECT.GET subscription here.
    pub fn on_direct_get(
        &self,
        handle: &StreamHandle,
        subject: &[u8],
        reply: Option<&[u8]>,
        header_bytes: usize,
        message: &[u8],
    ) {
        let Some(reply) = reply else {
            return;
        };
        let prefix_bytes = b"$JS.API.DIRECT.GET.".len() + handle.name.len();
        let appended = (subject.len() > prefix_bytes + 1)
            .then(|| Bytes::copy_from_slice(&subject[prefix_bytes + 1..]));
        let call = ApiCall {
            origin: self.index,
            reply: Some(Bytes::copy_from_slice(reply)),
            payload: Bytes::copy_from_slice(&message[header_bytes..]),
            kind: StreamApi::DirectGet { subject: appended },
        };
        // A stopped stream serves nothing: as if nobody subscribed.
        if let Err(call) = handle.call(call) {
            self.no_responders(call.reply);
        }
    }

    // ----- gathers ----------------------------------------------------------------

    fn gather_local(&self) -> Gathered {
        let streams = self
            .streams
            .borrow()
            .values()
            .map(|handle| {
                let snapshot = handle.snapshot.borrow();
                StreamSummary {
                    name: handle.name.clone(),
                    config: Box::new(snapshot.config.as_ref().clone()),
                    created_unix_ns: snapshot.created_unix_ns,
                    state: snapshot.state,
                    last_unix_ns: snapshot.last_unix_ns,
                    shard: self.index,
                    failure: snapshot.failure.clone(),
                    consumers: snapshot.consumers,
                    leading: !handle.is_replicated() || handle.leading.get(),
                    group: handle.group,
                    replicated: handle.is_replicated(),
                }
            })
            .collect();
        let offline = self
            .damaged
            .borrow()
            .iter()
            // The meta shard also holds damaged configs of other owners.
            .filter(|(name, _)| owner_of(name, self.shard_count) == self.index)
            .map(|(name, reason)| OfflineStream {
                name: name.clone(),
                reason: reason.clone(),
                config: self.damaged_configs.borrow().get(name).cloned(),
                shard: self.index,
            })
            .collect();
        Gathered {
            shard: self.index,
            streams,
            offline,
            api_total: self.api_total.get(),
            api_errors: self.api_errors.get(),
            stream_groups: self.stream_group_reports(),
            missing: self.missing_streams(),
            raft: self.raft_report(),
            consumer_details: BTreeMap::new(),
        }
    }

    /// This shard's part with what `detail` asks for.
    async fn gather_local_with(&self, detail: GatherDetail) -> Gathered {
        let mut gathered = self.gather_local();
        if let Some(config) = detail.consumers {
            gathered.consumer_details = self.consumer_details(config).await;
        }
        gathered
    }

    /// Each running stream's consumers, asked of its task, at most
    /// [`CONSUMER_DETAILS_TIMEOUT`] in all.
    async fn consumer_details(
        &self,
        config: bool,
    ) -> BTreeMap<String, Vec<stream::ConsumerDetail>> {
        let asked: Vec<(String, Rc<stream::ConsumerDetailsRequest>)> = self
            .streams
            .borrow()
            .values()
            .filter_map(|handle| Some((handle.name.clone(), handle.consumer_details(config)?)))
            .collect();
        let deadline = Instant::now() + CONSUMER_DETAILS_TIMEOUT;
        let mut details = BTreeMap::new();
        for (name, request) in asked {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Some(consumers) = request.wait(left).await {
                details.insert(name, consumers);
            }
        }
        details
    }

    /// Every shard's part, this one's included.
    pub async fn gather(self: &Rc<Self>) -> Vec<Gathered> {
        self.gather_with(GatherDetail::default()).await
    }

    /// [`Self::gather`], each part with what `detail` asks for.
    pub async fn gather_with(self: &Rc<Self>, detail: GatherDetail) -> Vec<Gathered> {
        let id = self.next_gather.get();
        self.next_gather.set(id + 1);
        let pending = Rc::new(PendingGather {
            expected: self.shard_count - 1,
            parts: RefCell::new(Vec::new()),
            arrived: Waiters::new(),
        });
        self.gathers.borrow_mut().insert(id, pending.clone());
        self.peers().broadcast(&mut || JetStreamMessage::Gather {
            id,
            origin: self.index,
            detail,
        });
        let all = pending
            .arrived
            .wait_until(|| pending.parts.borrow().len() >= pending.expected);
        let _ = tern_shard::timer::timeout(GATHER_TIMEOUT, all).await;
        self.gathers.borrow_mut().remove(&id);
        let mut parts = std::mem::take(&mut *pending.parts.borrow_mut());
        parts.push(self.gather_local_with(detail).await);
        parts
    }

    async fn account_info(self: Rc<Self>, request: ApiRequest) {
        let parts = self.gather().await;
        let Some(reply) = request.reply else {
            return;
        };
        let mut info = responses::AccountInfo::default();
        for part in &parts {
            info.api_total += part.api_total;
            info.api_errors += part.api_errors;
            for stream in &part.streams {
                info.streams += 1;
                info.consumers += stream.consumers;
                let reserved = stream.config.max_bytes.max(0) as u64;
                match stream.config.storage {
                    StorageType::Memory => {
                        info.memory += stream.state.bytes;
                        info.reserved_memory += reserved;
                    }
                    StorageType::File => {
                        info.storage += stream.state.bytes;
                        info.reserved_storage += reserved;
                    }
                }
            }
        }
        // nats-server counts a request once it is answered: not this one.
        info.api_total = info.api_total.saturating_sub(1);
        // The account's limits stay -1 (nats-server's dynamic account limits
        // without accounts configured): max_file_store and max_memory_store
        // are the server's, enforced on create, update and publish.
        self.respond(
            request.origin,
            reply,
            responses::account_info_response(&info),
        );
    }

    async fn names_or_list(self: Rc<Self>, request: ApiRequest, list: bool) {
        let kind = if list {
            "stream_list_response"
        } else {
            "stream_names_response"
        };
        let parsed = if list {
            requests::NamesRequest::parse_list(&request.payload)
        } else {
            requests::NamesRequest::parse(&request.payload)
        };
        let parsed = match parsed {
            Ok(parsed) => parsed,
            Err(error) => return self.answer_here(request, kind, error),
        };
        let parts = self.gather().await;
        let Some(reply) = request.reply else {
            return;
        };
        let selects = |config: Option<&StreamConfig>| {
            stream_config::listed_for(parsed.subject.as_deref(), config)
        };
        let mut entries: Vec<(String, Result<StreamSummary, String>)> = Vec::new();
        for part in parts {
            for stream in part.streams {
                if selects(Some(&stream.config)) {
                    entries.push((stream.name.clone(), Ok(stream)));
                }
            }
            for offline in part.offline {
                if selects(offline.config.as_deref()) {
                    entries.push((offline.name, Err(offline.reason)));
                }
            }
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let total = entries.len();
        let limit = if list { LIST_LIMIT } else { NAMES_LIMIT };
        let page = entries.into_iter().skip(parsed.offset).take(limit);
        let body = if list {
            let now = now_unix_ns();
            let mut infos = Vec::new();
            let mut offline = Vec::new();
            for (name, entry) in page {
                match entry {
                    Ok(stream) => {
                        let state = stream::info_state(
                            &stream.state,
                            stream.last_unix_ns,
                            &stream.config,
                            stream.consumers,
                        );
                        infos.push(responses::stream_info_object(
                            &stream.config,
                            stream.created_unix_ns,
                            &state,
                            now,
                            false,
                        ));
                    }
                    Err(reason) => offline.push((name, reason)),
                }
            }
            responses::list_response(total, parsed.offset, limit, &infos, &offline)
        } else {
            let names: Vec<String> = page.map(|(name, _)| name).collect();
            responses::names_response(total, parsed.offset, limit, &names)
        };
        self.respond(request.origin, reply, body);
    }
}

/// Why a stream's stored config file does not read back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoredConfigFileError {
    #[error("config is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("config has no group")]
    NoGroup,
    #[error("config has no config")]
    NoConfig,
    #[error(transparent)]
    Config(#[from] stream::config::StoredStreamConfigError),
}

/// The voters a stored config names (`"peers"`; none: one voter).
fn decode_stored_peers(json: &[u8]) -> Vec<u64> {
    serde_json::from_slice::<serde_json::Value>(json)
        .ok()
        .and_then(|value| {
            value
                .get("peers")
                .and_then(|peers| peers.as_array())
                .map(|peers| peers.iter().filter_map(serde_json::Value::as_u64).collect())
        })
        .unwrap_or_default()
}

/// The stored config file's JSON: `{"group":N,"config":{…}}`.
fn decode_stored_config(json: &[u8]) -> Result<(u64, StreamConfig), StoredConfigFileError> {
    let value: serde_json::Value = serde_json::from_slice(json)?;
    let group = value
        .get("group")
        .and_then(|group| group.as_u64())
        .ok_or(StoredConfigFileError::NoGroup)?;
    let config = value.get("config").ok_or(StoredConfigFileError::NoConfig)?;
    let config = StreamConfig::from_stored_json(config.to_string().as_bytes())?;
    Ok((group, config))
}
