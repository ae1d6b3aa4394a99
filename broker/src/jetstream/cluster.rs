//! JetStream across nodes: the meta group, and requests forwarded to the
//! node that serves them.
//!
//! The meta group (Raft group [`META_GROUP`]) runs on shard 0 of every
//! node, persisted in shard 0's journal like a stream's group. Its voters
//! are fixed when the cluster first forms: this node and the nodes at its
//! configured routes, once all are connected (so every node must list
//! every node). Its log holds [`MetaEntry`]s: the streams' configs and
//! where each is placed. Every member applies them to its catalog and, for
//! a stream placed on this node, has the stream's owner shard carry the
//! change out (and answer the client, on the first placed node).
//!
//! Each member keeps a checkpoint ([`MetaCheckpoint`], file
//! `jetstream/meta/state`) after every applied batch; the journal's meta
//! records up to it are then released. The checkpoint is also the group's
//! snapshot: a member that fell behind the leader's compaction gets it in
//! chunks and replaces its state with it.
//!
//! Requests: stream create, update and delete go to the meta leader (a
//! non-leader's shard 0 forwards them over its route as an `Api` frame;
//! none known: 503 10008). A stream's own requests (info, messages,
//! consumers) go from its owner shard to the same shard of the node that
//! holds it.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tern_raft::{Entry, EntryKind, HardState, Membership, Node, NodeId, Restore, Snapshot};
use tern_shard::Waiters;
use tern_storage::block_store::DmaFiles;

use super::api::error::ApiError;
use super::meta::cluster::{self as meta, MetaCheckpoint, MetaEntry, Placement, META_GROUP};
use super::meta::{MetaChange, MetaOperation};
use super::replication::{GroupView, MetaStatus, RaftReport, StreamGroupReport};
use super::stepdown::{choose_target, StepdownGroup, StepdownRequest, StepdownTarget};
use super::stream::groups::{GroupHost, Persistence};
use super::{owner_of, persist, ApiRequest, JetStream, OwnerCommand, META_SHARD};
use crate::cluster::multiraft::{GroupError, SnapshotStep};
use crate::jetstream::message::JetStreamMessage;

/// How often a node waiting for its configured routes looks again.
const FORMING_POLL: Duration = Duration::from_millis(100);
/// How long a request handed to a replica that knows no leader yet waits
/// for one (elections take 0.5–1 s here) before it is answered 503 10008.
const LEADER_WAIT: Duration = Duration::from_secs(3);
/// How often shard 0 looks for a change of meta leader to announce.
const LEADER_WATCH: Duration = Duration::from_millis(50);
/// Entries applied past the last compaction before the next one.
const COMPACT_AFTER_ENTRIES: u64 = 64;
/// How long the meta leader holds a stream delete's answer for a voter it
/// reaches to report the deletion carried out (see
/// [`carried_out_everywhere`]); past it the answer goes, logged. A voter
/// that stops answering is skipped sooner: once it is not heard from
/// within three heartbeats.
const HELD_ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// Answers the leader holds at most; past it the oldest goes at once.
const HELD_ANSWERS_MAX: usize = 4096;
/// The tokens after `$JS.API.` of a node's report to the meta leader of
/// how far it carried out the meta state; honoured only when handed over
/// by another node (`hops > 0`), on shard 0. Body: [`CarriedOut`].
pub const META_CARRIED_OUT_TOKENS: [&str; 3] = ["$TERN", "META", "CARRIED"];

/// A node's report: every meta entry through `index` applied, and every
/// deletion they asked of its owner shards done. 16 bytes: the node's Raft
/// id, then `index`, both big-endian u64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CarriedOut {
    pub node: NodeId,
    pub index: u64,
}

impl CarriedOut {
    pub const ENCODED_BYTES: usize = 16;

    pub fn encode(&self) -> [u8; Self::ENCODED_BYTES] {
        let mut bytes = [0; Self::ENCODED_BYTES];
        bytes[..8].copy_from_slice(&self.node.to_be_bytes());
        bytes[8..].copy_from_slice(&self.index.to_be_bytes());
        bytes
    }

    /// `None` unless `bytes` is exactly one report of a real node.
    pub fn decode(bytes: &[u8]) -> Option<CarriedOut> {
        let bytes: &[u8; Self::ENCODED_BYTES] = bytes.try_into().ok()?;
        let node = u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
        let index = u64::from_be_bytes(bytes[8..].try_into().expect("8 bytes"));
        (node != 0).then_some(CarriedOut { node, index })
    }
}

/// A stream delete's answer the meta leader holds until the voters it
/// reaches have carried out the entry at `index`.
struct HeldAnswer {
    index: u64,
    reply: Bytes,
    body: String,
    deadline: Instant,
}

/// Whether every voter but `this` that `reachable` says is up has carried
/// out the meta state through `index` (`carried_out`, as reported); this
/// node's own count is `own`. Pure: the leader's rule for answering a
/// delete only once a following request through any node it reaches sees
/// the stream gone.
fn carried_out_everywhere(
    index: u64,
    this: NodeId,
    own: u64,
    voters: &[NodeId],
    reachable: impl Fn(NodeId) -> bool,
    carried_out: impl Fn(NodeId) -> u64,
) -> bool {
    own >= index
        && voters
            .iter()
            .filter(|&&voter| voter != this && reachable(voter))
            .all(|&voter| carried_out(voter) >= index)
}

/// What the shard's groups driver hands the meta group.
#[derive(Default)]
pub struct MetaHost {
    committed: RefCell<VecDeque<Entry>>,
    steps: RefCell<VecDeque<SnapshotStep>>,
    reads: RefCell<VecDeque<tern_raft::SnapshotRead>>,
    wake: Waiters,
}

impl GroupHost for MetaHost {
    fn committed(&self, entries: Vec<Entry>) {
        self.committed.borrow_mut().extend(entries);
        self.wake.wake_all();
    }

    fn snapshot_step(&self, step: SnapshotStep) {
        self.steps.borrow_mut().push_back(step);
        self.wake.wake_all();
    }

    fn snapshot_read(&self, read: tern_raft::SnapshotRead) {
        self.reads.borrow_mut().push_back(read);
        self.wake.wake_all();
    }

    fn persists_snapshots(&self) -> bool {
        true
    }
}

impl MetaHost {
    fn has_work(&self) -> bool {
        !self.committed.borrow().is_empty()
            || !self.steps.borrow().is_empty()
            || !self.reads.borrow().is_empty()
    }
}

/// The meta group as shard 0 runs it.
pub struct Meta {
    pub node_id: NodeId,
    host: Rc<MetaHost>,
    /// The applied state (catalog and placements).
    pub(super) state: RefCell<MetaCheckpoint>,
    /// The group's snapshot: the checkpoint the node's log was last
    /// compacted to (index, term, encoding).
    snapshot: RefCell<(u64, u64, Bytes)>,
    /// A snapshot being received from the leader.
    staging: RefCell<Vec<u8>>,
    /// The group runs (voters known).
    running: Cell<bool>,
    files: DmaFiles,
    /// The journal's hard state and entries past the checkpoint, and the
    /// term through which its entries were lost
    /// (`Recovered::entries_lost_through_term`), until the group starts.
    recovered: RefCell<Option<RecoveredMeta>>,
    /// The hard state last written in a checkpoint.
    hard_state: Cell<HardState>,
    /// Why the checkpoint (`meta/state`) could not be read, if it could
    /// not: start-up decides whether the node rejoins from its peers.
    checkpoint_damage: RefCell<Option<String>>,
    /// Why the group stopped or could not start, once it did.
    failure: RefCell<Option<String>>,
    /// The leader last logged (`announce_meta`).
    logged_leader: Cell<Option<(NodeId, u64)>>,
    /// Deletions sent to owner shards and not done yet, counted by the
    /// index of the meta entry (or installed snapshot) that asked for them.
    deletions_in_flight: RefCell<BTreeMap<u64, usize>>,
    /// What this node last told the meta leader (which one, and through
    /// which index it carried out the meta state); a new leader is told
    /// again.
    reported: Cell<Option<(NodeId, u64)>>,
    /// On the leader: how far each other voter carried out the meta
    /// state, as it last reported.
    carried_out: RefCell<BTreeMap<NodeId, u64>>,
    /// On the leader: delete answers held until the voters it reaches
    /// carried them out, oldest first.
    held_answers: RefCell<VecDeque<HeldAnswer>>,
    /// The group's own membership: joins, removals (`meta_membership`).
    pub(super) membership: super::meta_membership::MetaMembership,
}

/// Why the meta store (`<jetstream>/meta`: its checkpoint) cannot be
/// opened or written, or the meta group cannot start or go on: each names
/// the file or the entry, and the cause.
#[derive(Debug, thiserror::Error)]
pub enum MetaStoreError {
    /// The meta directory cannot be created or opened.
    #[error("{}: {source}", directory.display())]
    Directory {
        directory: std::path::PathBuf,
        source: MetaDirectoryError,
    },
    /// A damaged checkpoint could not be moved aside.
    #[error("moving {} aside: {source}", path.display())]
    SetAside {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the meta state is {bytes} bytes, over its limit of {}",
        persist::CONFIG_JSON_BYTES_MAX
    )]
    CheckpointTooLarge { bytes: usize },
    #[error("writing the meta state: {0}")]
    WriteCheckpoint(#[source] persist::PersistError),
    /// The checkpoint was lost and no other voter holds the catalog.
    #[error("the meta state (meta/state) was lost and this node is the meta group's only voter: nothing to rejoin from; restore the file or remove this node's JetStream data")]
    LostAlone,
    /// The group could not be added to the shard's Raft groups.
    #[error("{0}")]
    Group(#[from] GroupError),
    #[error("the leader's meta snapshot: {0}")]
    Snapshot(#[source] meta::MetaDecodeError),
    #[error("meta entry {index} arrived before the leader's snapshot on a joining node")]
    EntryBeforeSnapshot { index: u64 },
}

/// Why the meta directory cannot be used: it cannot be created, or its
/// files opened.
#[derive(Debug, thiserror::Error)]
pub enum MetaDirectoryError {
    #[error(transparent)]
    Create(#[from] std::io::Error),
    #[error(transparent)]
    Open(#[from] tern_storage::device::DeviceError),
}

/// The meta group's journal records past its checkpoint: hard state,
/// entries, and the term through which entries were lost (0: none).
type RecoveredMeta = (Option<HardState>, Vec<Entry>, u64);

/// Stream `name` as this node's meta checkpoint (`<jetstream>/meta/state`)
/// has it, read directly by any shard: the config a replica whose own
/// `config` file is damaged rebuilds with. `None` when the checkpoint is
/// missing or damaged, or lacks the stream.
pub(super) async fn catalog_entry(
    jetstream_root: &std::path::Path,
    name: &str,
) -> Option<(super::stream::config::StreamConfig, Placement)> {
    let directory = jetstream_root.join("meta");
    if !directory.is_dir() {
        return None;
    }
    let files = DmaFiles::open(&directory).await.ok()?;
    let json = persist::read_meta_state(&files).await.ok()??;
    let mut checkpoint = MetaCheckpoint::decode(&json).ok()?;
    checkpoint.streams.remove(name)
}

/// The node id this store's meta checkpoint (`<root>/meta/state`) records
/// as its own, read at start-up before any shard runs (the second copy of
/// `jetstream/node`). `None` when there is no checkpoint, it is damaged,
/// or it was written before it recorded one.
pub fn checkpoint_node(jetstream_root: &std::path::Path) -> Option<u64> {
    let path = jetstream_root.join("meta").join(persist::META_STATE_FILE);
    let bytes = std::fs::read(path).ok()?;
    let (json, _) = persist::decode_config(&bytes).ok()?;
    let checkpoint = MetaCheckpoint::decode(&json).ok()?;
    (checkpoint.node != 0).then_some(checkpoint.node)
}

impl Meta {
    /// Holds a delete's answer (the leader); past [`HELD_ANSWERS_MAX`] the
    /// oldest is answered at once by the caller's next release.
    fn hold_answer(&self, answer: HeldAnswer) {
        let mut held = self.held_answers.borrow_mut();
        assert!(
            held.back().is_none_or(|last| last.index <= answer.index),
            "answers are held in index order"
        );
        if held.len() >= HELD_ANSWERS_MAX {
            if let Some(oldest) = held.front_mut() {
                oldest.deadline = Instant::now();
            }
        }
        held.push_back(answer);
    }

    /// Reads the checkpoint (a node that never formed a cluster has none).
    pub async fn open(
        node_id: NodeId,
        directory: &std::path::Path,
    ) -> Result<Meta, MetaStoreError> {
        let directory_error = |source: MetaDirectoryError| MetaStoreError::Directory {
            directory: directory.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(directory).map_err(|error| directory_error(error.into()))?;
        let files = DmaFiles::open(directory)
            .await
            .map_err(|error| directory_error(error.into()))?;
        let name = directory.join(persist::META_STATE_FILE);
        let read = match persist::read_meta_state(&files).await {
            Ok(Some(json)) => MetaCheckpoint::decode(&json).map_err(|error| error.to_string()),
            Ok(None) => Ok(MetaCheckpoint::default()),
            Err(error) => Err(error.to_string()),
        };
        let (state, checkpoint_damage) = match read {
            Ok(state) => (state, None),
            Err(error) => (
                MetaCheckpoint::default(),
                Some(format!("{}: {error}", name.display())),
            ),
        };
        let snapshot = (
            state.applied_index,
            state.applied_term,
            Bytes::from(state.encode()),
        );
        let hard_state = HardState {
            term: state.term,
            vote: (state.vote != 0).then_some(state.vote),
        };
        Ok(Meta {
            node_id,
            host: Rc::new(MetaHost::default()),
            state: RefCell::new(state),
            snapshot: RefCell::new(snapshot),
            staging: RefCell::new(Vec::new()),
            running: Cell::new(false),
            files,
            recovered: RefCell::new(None),
            hard_state: Cell::new(hard_state),
            checkpoint_damage: RefCell::new(checkpoint_damage),
            failure: RefCell::new(None),
            logged_leader: Cell::new(None),
            deletions_in_flight: RefCell::new(BTreeMap::new()),
            reported: Cell::new(None),
            carried_out: RefCell::new(BTreeMap::new()),
            held_answers: RefCell::new(VecDeque::new()),
            membership: Default::default(),
        })
    }

    /// The applied index the journal's records are wanted after.
    pub fn applied_index(&self) -> u64 {
        self.state.borrow().applied_index
    }

    /// Whether this node leads the meta group and has applied an entry of
    /// its term (so everything committed before: its state is complete).
    pub(super) fn leader_caught_up(&self, js: &JetStream) -> bool {
        if !self.is_running() {
            return false;
        }
        let (leader, term) = js
            .groups()
            .node(META_GROUP, |node| (node.leader(), node.term()));
        leader == Some(self.node_id) && self.state.borrow().applied_term == term
    }

    /// Through which index this node has carried out the meta state:
    /// applied, and every deletion those entries asked of its owner
    /// shards done.
    fn carried_out_through(&self) -> u64 {
        let applied = self.applied_index();
        match self.deletions_in_flight.borrow().keys().next() {
            Some(&oldest) => applied.min(oldest - 1),
            None => applied,
        }
    }

    /// Why the checkpoint could not be read, if it could not.
    pub fn checkpoint_damage(&self) -> Option<String> {
        self.checkpoint_damage.borrow().clone()
    }

    /// A damaged checkpoint moved aside (`meta/state.damaged.<ns>`), kept
    /// for the operator, before the node rejoins from its peers.
    pub fn set_aside_damaged_checkpoint(
        &self,
        directory: &std::path::Path,
    ) -> Result<(), MetaStoreError> {
        let path = directory.join(persist::META_STATE_FILE);
        if path.exists() {
            let kept = directory.join(format!(
                "{}.damaged.{}",
                persist::META_STATE_FILE,
                super::now_unix_ns()
            ));
            std::fs::rename(&path, &kept)
                .and_then(|()| std::fs::File::open(directory)?.sync_all())
                .map_err(|source| MetaStoreError::SetAside { path, source })?;
        }
        *self.checkpoint_damage.borrow_mut() = None;
        Ok(())
    }

    pub fn set_recovered(
        &self,
        hard_state: Option<HardState>,
        entries: Vec<Entry>,
        entries_lost_through_term: u64,
    ) {
        *self.recovered.borrow_mut() = Some((hard_state, entries, entries_lost_through_term));
    }

    /// The checkpoint's hard state and applied term.
    pub fn checkpointed(&self) -> (HardState, u64) {
        (self.hard_state.get(), self.state.borrow().applied_term)
    }

    pub fn is_running(&self) -> bool {
        self.running.get()
    }

    /// Where `name` is placed, if the catalog has it.
    pub fn placement(&self, name: &str) -> Option<Placement> {
        self.state
            .borrow()
            .streams
            .get(name)
            .map(|(_, placement)| placement.clone())
    }

    /// Each stream listed for a `subject` filter (all without one),
    /// by name: its config and placement.
    pub fn streams_listed_for(
        &self,
        subject: Option<&str>,
    ) -> Vec<(String, super::stream::config::StreamConfig, Placement)> {
        self.state
            .borrow()
            .streams
            .iter()
            .filter(|(_, (config, _))| super::stream::config::listed_for(subject, Some(config)))
            .map(|(name, (config, placement))| (name.clone(), config.clone(), placement.clone()))
            .collect()
    }

    pub fn stream_names(&self) -> Vec<String> {
        self.state.borrow().streams.keys().cloned().collect()
    }

    pub fn voters(&self) -> Vec<NodeId> {
        self.state.borrow().voters.clone()
    }

    /// The group cannot run (logged by the caller): `/healthz` says the
    /// meta layer is not running.
    pub fn fail(&self, reason: String) {
        self.running.set(false);
        *self.failure.borrow_mut() = Some(reason);
    }

    /// Whether this node's meta state has caught up with its leader: a
    /// leader has applied an entry of its own term (so everything
    /// committed before it), a follower everything its leader said is
    /// committed. Until then a stream this node has not heard of may
    /// exist (503, not 404).
    fn caught_up(&self, leader: Option<NodeId>, term: u64, commit: u64) -> bool {
        let state = self.state.borrow();
        match leader {
            Some(leader) if leader == self.node_id => state.applied_term == term,
            Some(_) => state.applied_index >= commit,
            None => false,
        }
    }

    async fn write_checkpoint(&self) -> Result<(), MetaStoreError> {
        let json = {
            let mut state = self.state.borrow_mut();
            let hard_state = self.hard_state.get();
            state.term = hard_state.term;
            state.vote = hard_state.vote.unwrap_or(0);
            state.node = self.node_id;
            state.encode()
        };
        if json.len() > persist::CONFIG_JSON_BYTES_MAX {
            return Err(MetaStoreError::CheckpointTooLarge { bytes: json.len() });
        }
        persist::write_meta_state(&self.files, &json)
            .await
            .map_err(MetaStoreError::WriteCheckpoint)
    }
}

impl JetStream {
    /// The meta group's task (shard 0 of a clustered node): forms the
    /// group, then applies what it commits for as long as the shard runs.
    pub(super) async fn run_meta(self: Rc<Self>) {
        let meta = self.meta.get().expect("the meta group runs here").clone();
        // Placements go to the other shards: their JetStream must be up.
        futures_lite::future::or(self.shard().wait_all_started(), self.wait_stopping()).await;
        if self.stopping() {
            return;
        }
        if let Err(error) = self.start_meta(&meta).await {
            log::error!(target: "tern::jetstream", "the meta group cannot start: {error}; JetStream answers 503 on this node");
            meta.fail(format!("cannot start: {error}"));
            return;
        }
        let mut announced = None;
        while !self.stopping() {
            self.announce_meta(&meta, &mut announced);
            if let Some(routes) = self.shard().routes.as_ref() {
                routes.set_meta_voters(&meta.voters());
            }
            // A new leader is told again; a leader's held answers go once
            // carried out everywhere, or at their deadline.
            self.report_carried_out(&meta);
            self.membership_turn(&meta);
            let host = meta.host.clone();
            let stopping = async {
                self.wait_stopping().await;
            };
            // Leadership changes without an entry to apply: looked at
            // every LEADER_WATCH.
            let watch = glommio::timer::sleep(LEADER_WATCH);
            futures_lite::future::or(
                host.wake.wait_until(|| host.has_work()),
                futures_lite::future::or(stopping, watch),
            )
            .await;
            if self.stopping() {
                break;
            }
            if !host.has_work() {
                continue;
            }
            if let Err(error) = self.meta_turn(&meta).await {
                log::error!(target: "tern::jetstream", "the meta group stopped: {error}; JetStream answers 503 on this node");
                self.groups().remove(META_GROUP);
                meta.fail(format!("stopped: {error}"));
                return;
            }
        }
    }

    /// Waits for the voters (first start), then runs the group.
    async fn start_meta(self: &Rc<Self>, meta: &Rc<Meta>) -> Result<(), MetaStoreError> {
        let shard = self.shard();
        let routes = shard.routes.as_ref().expect("clustered");
        // The configured peers, when this store joins a meta group that
        // exists instead of forming one.
        let mut joining: Option<Vec<NodeId>> = None;
        // The configured peers, when this node forms the group with them.
        let mut founding: Option<Vec<NodeId>> = None;
        if meta.state.borrow().voters.is_empty() {
            log::info!(target: "tern::jetstream", "waiting for every configured route to connect, to form the meta group");
            let (peers, formed) = loop {
                if let Some(found) = routes.configured_peers_formed(meta.node_id) {
                    break found;
                }
                if self.stopping() {
                    return Ok(());
                }
                glommio::timer::sleep(FORMING_POLL).await;
            };
            match formed {
                // Formed at the same time by a peer, with this node among
                // its voters (the first voters are the configured nodes):
                // the same group, formed here with the same voters.
                Some(voters) if voters.contains(&meta.node_id) => {
                    founding = Some(
                        voters
                            .into_iter()
                            .filter(|voter| *voter != meta.node_id)
                            .collect(),
                    );
                }
                Some(_) => {
                    // Another node's meta group exists: this store is new to
                    // it (a node added, or a wiped one back under a new
                    // identity). It joins that group through its leader and
                    // never forms one of its own: a configuration it made up
                    // could elect it without entries the group committed. Its
                    // Raft node starts outside any configuration it could
                    // campaign in and takes the leader's snapshot (every
                    // member's log starts after one) once the leader adds it.
                    log::info!(target: "tern::jetstream", "the cluster's meta group exists: this node asks its leader to join it");
                    joining = Some(peers);
                }
                None => founding = Some(peers),
            }
        }
        if let Some(peers) = founding {
            let mut voters = peers;
            voters.push(meta.node_id);
            voters.sort_unstable();
            voters.dedup();
            // A lost checkpoint rejoins from the other voters: alone, this
            // node held the catalog's only copy.
            let lost = meta
                .recovered
                .borrow()
                .as_ref()
                .is_some_and(|(_, _, lost_through_term)| *lost_through_term > 0);
            if lost && voters == [meta.node_id] {
                return Err(MetaStoreError::LostAlone);
            }
            // Their names go into the log once a leader is elected
            // (`meta_membership`), so every member, a later one too, has them.
            meta.state.borrow_mut().voters = voters.clone();
            meta.write_checkpoint().await?;
            *meta.snapshot.borrow_mut() = (0, 0, Bytes::from(meta.state.borrow().encode()));
            log::info!(target: "tern::jetstream", "meta group formed with {} voters: {:x?}", voters.len(), voters);
        }
        let state = meta.state.borrow().clone();
        let (journal_hard_state, entries, entries_lost_through_term) =
            meta.recovered.borrow_mut().take().unwrap_or_default();
        let mut hard_state = meta.hard_state.get();
        if let Some(journaled) = journal_hard_state {
            if journaled.term >= hard_state.term {
                hard_state = journaled;
            }
        }
        let membership = match &joining {
            Some(peers) => Membership::new(peers.clone()),
            None => Membership::new(state.voters.clone()),
        };
        assert!(
            joining.is_none() || !membership.contains(meta.node_id),
            "a joining node is outside its first configuration"
        );
        // Entries must follow the checkpoint without a gap; a gap (the
        // checkpoint of an installed snapshot lost, or damage) drops them:
        // the node then waits to have them again before it votes.
        let acknowledged_index = entries
            .last()
            .map_or(state.applied_index, |entry| entry.index);
        let entries = if entries
            .first()
            .is_some_and(|entry| entry.index != state.applied_index + 1)
        {
            Vec::new()
        } else {
            entries
        };
        let node = Node::new(
            tern_raft::Config::new(meta.node_id),
            Restore {
                hard_state,
                snapshot: (state.applied_index > 0).then(|| Snapshot {
                    index: state.applied_index,
                    term: state.applied_term,
                    membership: membership.clone(),
                }),
                entries,
                membership,
                acknowledged_index,
                entries_lost_through_term,
                seed: meta.node_id ^ crate::random::random_u64(),
            },
        );
        self.groups()
            .insert(META_GROUP, node, Persistence::Journal, meta.host.clone())?;
        meta.running.set(true);
        // The catalog is the meta group's.
        {
            let mut catalog = self.catalog.borrow_mut();
            catalog.clear();
            catalog.clustered = true;
            for (name, (config, _)) in &state.streams {
                catalog.load(name.clone(), Some(config.clone()));
            }
        }
        for (name, (_, placement)) in &state.streams {
            self.tell_owner_placement(name, Some(placement));
        }

        if state.voters == [meta.node_id] {
            self.groups().with_node(META_GROUP, Node::campaign_now);
        }
        Ok(())
    }

    /// Snapshot work, snapshot reads and committed entries, then the
    /// checkpoint.
    async fn meta_turn(self: &Rc<Self>, meta: &Rc<Meta>) -> Result<(), MetaStoreError> {
        let steps: Vec<SnapshotStep> = meta.host.steps.borrow_mut().drain(..).collect();
        for step in steps {
            match step {
                SnapshotStep::Chunk(chunk) => {
                    let mut staging = meta.staging.borrow_mut();
                    if chunk.offset == 0 {
                        staging.clear();
                    }
                    if chunk.offset as usize == staging.len() {
                        staging.extend_from_slice(&chunk.data);
                    }
                }
                SnapshotStep::Install(snapshot) => {
                    let bytes = std::mem::take(&mut *meta.staging.borrow_mut());
                    let mut installed =
                        MetaCheckpoint::decode(&bytes).map_err(MetaStoreError::Snapshot)?;
                    installed.applied_index = snapshot.index;
                    installed.applied_term = snapshot.term;
                    // The leader's own id is not this member's.
                    installed.node = meta.node_id;
                    let before = std::mem::replace(&mut *meta.state.borrow_mut(), installed);
                    meta.write_checkpoint().await?;
                    *meta.snapshot.borrow_mut() = (
                        snapshot.index,
                        snapshot.term,
                        Bytes::from(meta.state.borrow().encode()),
                    );
                    self.reconcile(meta, &before, snapshot.index);
                    log::info!(target: "tern::jetstream", "meta group: installed the leader's snapshot at index {}", snapshot.index);
                }
            }
        }
        let reads: Vec<tern_raft::SnapshotRead> = meta.host.reads.borrow_mut().drain(..).collect();
        for read in reads {
            let (index, _, bytes) = meta.snapshot.borrow().clone();
            if read.index != index {
                // Not the snapshot kept: the transfer starts over on the
                // current one.
                self.groups()
                    .with_node(META_GROUP, |node| node.restart_snapshot_transfer(read.peer));
                continue;
            }
            let start = (read.offset as usize).min(bytes.len());
            let end = (start + read.max_bytes.max(1)).min(bytes.len());
            let last = end == bytes.len();
            self.groups().with_node(META_GROUP, |node| {
                node.snapshot_chunk(&read, bytes.slice(start..end), last)
            });
        }
        let entries: Vec<Entry> = meta.host.committed.borrow_mut().drain(..).collect();
        if entries.is_empty() {
            return Ok(());
        }
        for entry in entries {
            if entry.index <= meta.state.borrow().applied_index {
                continue;
            }
            if meta.state.borrow().voters.is_empty() {
                // A joining node is sent the leader's snapshot first.
                return Err(MetaStoreError::EntryBeforeSnapshot { index: entry.index });
            }
            match &entry.kind {
                EntryKind::Normal(data) => match MetaEntry::decode(data) {
                    Ok(decoded) => {
                        log::debug!(target: "tern::jetstream", "meta entry {} (term {}): {decoded:?}", entry.index, entry.term);
                        self.apply_meta(meta, entry.index, &decoded)
                    }
                    // Written by a leader of another version: skipped, loudly.
                    Err(error) => {
                        log::error!(target: "tern::jetstream", "meta entry {} does not decode: {error}; skipped", entry.index)
                    }
                },
                EntryKind::AddVoter(node) => self.apply_meta_membership(meta, *node, true),
                EntryKind::RemoveVoter(node) => self.apply_meta_membership(meta, *node, false),
                _ => {}
            }
            let mut state = meta.state.borrow_mut();
            state.applied_index = entry.index;
            state.applied_term = entry.term;
        }
        if let Some(hard_state) = self.groups().durable_hard_state(META_GROUP) {
            meta.hard_state.set(hard_state);
        }
        meta.write_checkpoint().await?;
        let (applied_index, applied_term) = {
            let state = meta.state.borrow();
            (state.applied_index, state.applied_term)
        };
        if let Some(journal) = self.journal_if_open() {
            journal.checkpoint(META_GROUP, applied_index);
        }
        // Every member's log starts after a snapshot from its first apply
        // on: a node joining later is sent the snapshot (which names the
        // voters), never the log from index 1 (whose first voters no entry
        // names).
        let snapshot_index = meta.snapshot.borrow().0;
        if snapshot_index == 0 || applied_index >= snapshot_index + COMPACT_AFTER_ENTRIES {
            let voters = meta.state.borrow().voters.clone();
            *meta.snapshot.borrow_mut() = (
                applied_index,
                applied_term,
                Bytes::from(meta.state.borrow().encode()),
            );
            self.groups().compact(
                META_GROUP,
                Snapshot {
                    index: applied_index,
                    term: applied_term,
                    membership: Membership::new(voters),
                },
            );
        }
        Ok(())
    }

    /// One committed entry: the catalog moves, and the nodes holding the
    /// stream carry it out.
    fn apply_meta(self: &Rc<Self>, meta: &Meta, index: u64, entry: &MetaEntry) {
        let this = meta.node_id;
        match entry {
            MetaEntry::Create {
                config,
                placement,
                reply,
            } => {
                if meta.state.borrow().streams.contains_key(&config.name) {
                    // A second create of one name (both passed the
                    // leader's check before either applied): the first
                    // stands; the second's client hears about it.
                    if let Some((current, existing)) = meta.state.borrow().streams.get(&config.name)
                    {
                        if existing.peers.contains(&this) {
                            self.send_owner(OwnerCommand::Update {
                                config: Box::new(current.clone()),
                                create: true,
                                origin: owner_of(&config.name, self.shard_count),
                                reply: reply_for_replicas(reply),
                            });
                        }
                    }
                    return;
                }
                meta.state.borrow_mut().apply(entry);
                self.catalog.borrow_mut().apply(&MetaChange::Create {
                    config: config.clone(),
                    group: placement.group,
                });
                if placement.peers.contains(&this) {
                    let reply = reply_for_replicas(reply);
                    self.send_owner(self.create_command(config, placement, reply));
                }
                self.tell_owner_placement(&config.name, Some(placement));
            }
            MetaEntry::Update {
                config,
                create,
                reply,
                ..
            } => {
                let placement = meta.placement(&config.name);
                meta.state.borrow_mut().apply(entry);
                let Some(placement) = placement else {
                    return;
                };
                if !create {
                    self.catalog.borrow_mut().apply(&MetaChange::Update {
                        config: config.clone(),
                    });
                }
                if placement.peers.contains(&this) {
                    let config = match create {
                        // A create with the config it already has: the
                        // stream answers with its info.
                        true => meta
                            .state
                            .borrow()
                            .streams
                            .get(&config.name)
                            .map(|(config, _)| config.clone())
                            .unwrap_or_else(|| config.clone()),
                        false => config.clone(),
                    };
                    self.send_owner(OwnerCommand::Update {
                        origin: owner_of(&config.name, self.shard_count),
                        config: Box::new(config),
                        create: *create,
                        reply: reply_for_replicas(reply),
                    });
                }
            }
            MetaEntry::Delete { name, reply } => {
                let placement = meta.placement(name);
                meta.state.borrow_mut().apply(entry);
                self.catalog
                    .borrow_mut()
                    .apply(&MetaChange::Delete { name: name.clone() });
                self.tell_owner_placement(name, None);
                if placement.is_some_and(|placement| placement.peers.contains(&this)) {
                    self.delete_copy_for(meta, name, index);
                }
                // The stream is gone once the catalog says so: the meta
                // leader answers, whether or not its nodes are up (one that
                // is down deletes its copy when it returns and learns it),
                // once every voter it reaches has carried the delete out,
                // so the next request through any of them finds no stream.
                if let Some(reply) = reply.as_ref().filter(|_| self.leads_meta(meta)) {
                    meta.hold_answer(HeldAnswer {
                        index,
                        reply: Bytes::from(reply.clone()),
                        body: super::responses::delete_response(),
                        deadline: Instant::now() + HELD_ANSWER_TIMEOUT,
                    });
                }
            }
            MetaEntry::Name { node, name } => {
                log::info!(target: "tern::jetstream", "meta group: node {node:016x} is named {name}");
                meta.state.borrow_mut().apply(entry);
            }
            MetaEntry::Remap {
                name,
                peers,
                config,
                reply,
                ..
            } => {
                let Some(before) = meta.placement(name) else {
                    return;
                };
                meta.state.borrow_mut().apply(entry);
                let Some((current, after)) = meta.state.borrow().streams.get(name).cloned() else {
                    return;
                };
                if let Some(config) = config {
                    self.catalog.borrow_mut().apply(&MetaChange::Update {
                        config: config.clone(),
                    });
                }
                self.tell_owner_placement(name, Some(&after));
                let was_here = before.peers.contains(&this);
                let is_here = peers.contains(&this);
                log::info!(target: "tern::jetstream", "meta group: stream {name} moves from {:x?} to {:x?}", before.peers, peers);
                match (was_here, is_here) {
                    // A new replica: empty, it catches up from the leader
                    // once the group adds it.
                    (false, true) => self.send_owner(OwnerCommand::Create {
                        config: Box::new(current.clone()),
                        created_unix_ns: after.created_unix_ns,
                        group: after.group,
                        peers: voters_of(&after),
                        joining: true,
                        origin: owner_of(name, self.shard_count),
                        reply: None,
                    }),
                    // No longer placed here: this copy goes now if the
                    // nodes that stay are a quorum of the old voters, else
                    // it stays a voter until the group removes it.
                    (true, false) => self.send_owner(leave_command(
                        name,
                        owner_of(name, self.shard_count),
                        &before.peers,
                        peers,
                    )),
                    (true, true) => {
                        self.send_owner(OwnerCommand::Peers {
                            name: name.clone(),
                            peers: peers.clone(),
                        });
                        if let Some(config) = config {
                            // The replica answering is the first one that
                            // stays.
                            let answering = before.peers.iter().find(|peer| peers.contains(peer))
                                == Some(&this);
                            self.send_owner(OwnerCommand::Update {
                                origin: owner_of(name, self.shard_count),
                                config: Box::new(config.clone()),
                                create: false,
                                reply: answering
                                    .then(|| reply.as_deref().map(|r| Bytes::from(r.to_string())))
                                    .flatten(),
                            });
                        }
                    }
                    (false, false) => {}
                }
                // A peer removal is done once the catalog says so: the meta
                // leader answers.
                if config.is_none() {
                    self.answer_as_meta_leader(meta, reply, super::responses::remove_peer_response);
                }
            }
        }
    }

    /// Answers `reply` with `body` if this node leads the meta group (the
    /// entry that carried it applied: what it asked is decided).
    fn answer_as_meta_leader(
        &self,
        meta: &Meta,
        reply: &Option<String>,
        body: impl FnOnce() -> String,
    ) {
        if let Some(reply) = reply.as_ref().filter(|_| self.leads_meta(meta)) {
            self.respond(META_SHARD, Bytes::from(reply.clone()), body());
        }
    }

    fn leads_meta(&self, meta: &Meta) -> bool {
        self.groups().node(META_GROUP, Node::leader) == Some(meta.node_id)
    }

    /// Has the owner shard delete this node's copy of `name`, as the meta
    /// state at `index` asks; counted until it reports the copy gone.
    fn delete_copy_for(self: &Rc<Self>, meta: &Meta, name: &str, index: u64) {
        assert!(index > 0, "a meta index");
        *meta
            .deletions_in_flight
            .borrow_mut()
            .entry(index)
            .or_insert(0) += 1;
        self.send_owner(OwnerCommand::Delete {
            name: name.to_string(),
            origin: owner_of(name, self.shard_count),
            reply: None,
            meta_index: Some(index),
        });
    }

    /// An owner shard deleted the copy the meta entry at `meta_index`
    /// asked for (shard 0).
    pub(super) fn deletion_done(self: &Rc<Self>, meta_index: u64) {
        assert_eq!(self.index, META_SHARD);
        let meta = self
            .meta
            .get()
            .expect("deletions are the meta group's")
            .clone();
        {
            let mut in_flight = meta.deletions_in_flight.borrow_mut();
            let count = in_flight
                .get_mut(&meta_index)
                .expect("a deletion done was one asked for");
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&meta_index);
            }
        }
        self.report_carried_out(&meta);
    }

    /// Tells the meta leader how far this node carried out the meta state,
    /// when that moved or the leader changed since it last did; the leader
    /// itself takes its own count and looks at its held answers.
    fn report_carried_out(self: &Rc<Self>, meta: &Meta) {
        if !meta.is_running() {
            return;
        }
        let Some(leader) = self.groups().node(META_GROUP, Node::leader) else {
            return;
        };
        let through = meta.carried_out_through();
        if leader == meta.node_id {
            return self.release_held_answers(meta);
        }
        if meta.reported.get() == Some((leader, through)) {
            return;
        }
        let report = CarriedOut {
            node: meta.node_id,
            index: through,
        };
        let subject = format!("$JS.API.{}", META_CARRIED_OUT_TOKENS.join("."));
        let shard = self.shard();
        let sent = shard
            .routes
            .as_ref()
            .and_then(|routes| routes.link_to_node(leader))
            .is_some_and(|link| link.send_api(1, subject.as_bytes(), None, &report.encode()));
        if sent {
            meta.reported.set(Some((leader, through)));
        }
    }

    /// `$JS.API.$TERN.META.CARRIED` handed over by another node, on shard
    /// 0: how far it carried out the meta state.
    pub(super) fn on_carried_out_report(self: &Rc<Self>, request: &ApiRequest) {
        assert_eq!(self.index, META_SHARD);
        assert!(request.hops > 0, "only another node reports");
        let (Some(meta), Some(report)) = (self.meta.get(), CarriedOut::decode(&request.payload))
        else {
            return;
        };
        if !meta.is_running() || !meta.voters().contains(&report.node) {
            return;
        }
        {
            let mut carried_out = meta.carried_out.borrow_mut();
            let known = carried_out.entry(report.node).or_insert(0);
            *known = (*known).max(report.index);
        }
        self.release_held_answers(meta);
    }

    /// Sends every held delete answer whose entry the voters this leader
    /// reaches have carried out (or whose time is up), oldest first.
    fn release_held_answers(&self, meta: &Meta) {
        if meta.held_answers.borrow().is_empty() {
            return;
        }
        let reachable = self.voters_heard_recently(meta);
        let voters = meta.voters();
        let own = meta.carried_out_through();
        let now = Instant::now();
        loop {
            let released = {
                let mut held = meta.held_answers.borrow_mut();
                let Some(front) = held.front() else {
                    return;
                };
                let carried = carried_out_everywhere(
                    front.index,
                    meta.node_id,
                    own,
                    &voters,
                    |voter| reachable.contains(&voter),
                    |voter| meta.carried_out.borrow().get(&voter).copied().unwrap_or(0),
                );
                if !carried && now < front.deadline {
                    return;
                }
                if !carried {
                    log::warn!(target: "tern::jetstream", "meta group: a delete (entry {}) answered before every node reported it carried out", front.index);
                }
                held.pop_front().expect("checked")
            };
            self.respond(META_SHARD, released.reply, released.body);
        }
    }

    /// After a snapshot replaced the state: streams placed here that this
    /// node does not have are created, streams gone are deleted, and every
    /// owner shard learns the placements.
    fn reconcile(self: &Rc<Self>, meta: &Meta, before: &MetaCheckpoint, index: u64) {
        let this = meta.node_id;
        let after = meta.state.borrow().clone();
        {
            let mut catalog = self.catalog.borrow_mut();
            catalog.clear();
            for (name, (config, _)) in &after.streams {
                catalog.load(name.clone(), Some(config.clone()));
            }
        }
        for (name, (_, placement)) in &before.streams {
            if !after.streams.contains_key(name) {
                self.tell_owner_placement(name, None);
                if placement.peers.contains(&this) {
                    self.delete_copy_for(meta, name, index);
                }
            }
        }
        for (name, (config, placement)) in &after.streams {
            self.tell_owner_placement(name, Some(placement));
            let was_here = before
                .streams
                .get(name)
                .is_some_and(|(_, before)| before.peers.contains(&this));
            if placement.peers.contains(&this) {
                let mut create = self.create_command(config, placement, None);
                if let OwnerCommand::Create { joining, .. } = &mut create {
                    // Placed here by a remap this node did not see.
                    *joining = before.streams.contains_key(name) && !was_here;
                }
                self.send_owner(create);
                if placement.peers.len() > 1 {
                    self.send_owner(OwnerCommand::Peers {
                        name: name.clone(),
                        peers: placement.peers.clone(),
                    });
                }
            } else if let Some((_, before)) = before.streams.get(name).filter(|_| was_here) {
                self.send_owner(leave_command(
                    name,
                    owner_of(name, self.shard_count),
                    &before.peers,
                    &placement.peers,
                ));
            }
        }
    }

    /// The owner shard's command to create a stream placed on this node
    /// (answering `reply`, if any, when done).
    fn create_command(
        &self,
        config: &super::stream::config::StreamConfig,
        placement: &Placement,
        reply: Option<Bytes>,
    ) -> OwnerCommand {
        OwnerCommand::Create {
            config: Box::new(config.clone()),
            created_unix_ns: placement.created_unix_ns,
            group: placement.group,
            peers: voters_of(placement),
            joining: false,
            origin: owner_of(&config.name, self.shard_count),
            reply,
        }
    }

    fn send_owner(self: &Rc<Self>, command: OwnerCommand) {
        let owner = owner_of(command.stream_name(), self.shard_count);
        self.send_to(owner, JetStreamMessage::Owner(Box::new(command)));
    }

    /// Tells `name`'s owner shard where the stream lives (`None`: gone).
    fn tell_owner_placement(self: &Rc<Self>, name: &str, placement: Option<&Placement>) {
        let owner = owner_of(name, self.shard_count);
        self.send_to(
            owner,
            JetStreamMessage::Placement {
                name: name.to_string(),
                peers: placement.map(|placement| placement.peers.clone()),
            },
        );
    }

    /// The owner shard learns where one of its streams lives.
    pub(super) fn set_placement(&self, name: String, peers: Option<Vec<NodeId>>) {
        match peers {
            Some(peers) => self.placements.borrow_mut().insert(name, peers),
            None => self.placements.borrow_mut().remove(&name),
        };
    }

    /// Stream create, update or delete in a cluster: decided by the meta
    /// leader (forwarded to it from other nodes), answered by the stream's
    /// first node once committed.
    pub(super) fn meta_request_clustered(
        self: &Rc<Self>,
        kind: &str,
        operation: MetaOperation,
        name: &str,
        request: ApiRequest,
    ) {
        assert_eq!(self.index, META_SHARD);
        let meta = self.meta.get().expect("clustered").clone();
        if !self.served_by_meta_leader(&request, kind) {
            return;
        }
        let Some(change) = self.check_meta(operation, name, &request, kind) else {
            return;
        };
        let reply = request
            .reply
            .as_ref()
            .map(|reply| String::from_utf8_lossy(reply).into_owned());
        let entry = match change {
            MetaChange::Create { config, group } => {
                let replicas = config.num_replicas.max(1) as usize;
                let candidates = self.placement_candidates(&meta);
                let random = crate::random::random_u64();
                let Some(peers) = meta::place(replicas, &candidates, |node| {
                    (node ^ random).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                }) else {
                    let error = ApiError::new(400, 10005, "no suitable peers for placement");
                    return self.answer_error(request.origin, request.reply, kind, &error);
                };
                MetaEntry::Create {
                    config,
                    placement: Placement {
                        group,
                        peers,
                        created_unix_ns: super::now_unix_ns(),
                    },
                    reply,
                }
            }
            MetaChange::Exists { config } => MetaEntry::Update {
                group: meta.placement(name).map_or(0, |placement| placement.group),
                config,
                create: true,
                reply,
            },
            MetaChange::Update { config }
                if meta.placement(name).is_some_and(|placement| {
                    placement.peers.len() as i64 != config.num_replicas.max(1)
                }) =>
            {
                let placement = meta.placement(name).expect("checked");
                match self.resize(&meta, &placement, config.num_replicas.max(1) as usize) {
                    Ok(peers) => MetaEntry::Remap {
                        name: name.to_string(),
                        group: placement.group,
                        peers,
                        config: Some(config),
                        reply,
                    },
                    Err(error) => {
                        return self.answer_error(request.origin, request.reply, kind, &error)
                    }
                }
            }
            MetaChange::Update { config } => MetaEntry::Update {
                group: meta.placement(name).map_or(0, |placement| placement.group),
                config,
                create: false,
                reply,
            },
            MetaChange::Delete { name } => MetaEntry::Delete { name, reply },
        };
        let proposed = self
            .groups()
            .with_node(META_GROUP, |node| node.propose(Bytes::from(entry.encode())));
        if proposed.is_err() {
            self.answer_unavailable(&request, kind);
        }
    }

    /// A stream's voters for `replicas`: more are the least loaded
    /// reachable nodes it is not on; fewer keep the reachable ones first,
    /// in placement order (a replica down stays placed only if too few are
    /// up). Nodes taken off leave as `leave_command` says.
    fn resize(
        &self,
        meta: &Meta,
        placement: &Placement,
        replicas: usize,
    ) -> Result<Vec<NodeId>, ApiError> {
        let current = placement.peers.len();
        if replicas < current {
            let reachable: Vec<NodeId> = self
                .placement_candidates(meta)
                .into_iter()
                .map(|(node, _)| node)
                .collect();
            let mut kept: Vec<NodeId> = placement
                .peers
                .iter()
                .copied()
                .filter(|peer| reachable.contains(peer))
                .collect();
            kept.extend(
                placement
                    .peers
                    .iter()
                    .filter(|peer| !reachable.contains(peer)),
            );
            kept.truncate(replicas);
            return Ok(kept);
        }
        let candidates: Vec<(NodeId, usize)> = self
            .placement_candidates(meta)
            .into_iter()
            .filter(|(node, _)| !placement.peers.contains(node))
            .collect();
        let random = crate::random::random_u64();
        let added = meta::place(replicas - current, &candidates, |node| {
            (node ^ random).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        })
        .ok_or_else(ApiError::insufficient_resources)?;
        let mut peers = placement.peers.clone();
        peers.extend(added);
        Ok(peers)
    }

    /// `$JS.API.STREAM.PEER.REMOVE.<stream>` `{"peer":"<server name>"}` on
    /// the meta leader: the peer is replaced by a reachable node the stream
    /// is not on (nats-server's rule: without one, 503 10075 `peer remap
    /// failed`); answered once the catalog applied it.
    pub(super) fn peer_remove_clustered(self: &Rc<Self>, name: &str, request: ApiRequest) {
        const KIND: &str = "stream_remove_peer_response";
        assert_eq!(self.index, META_SHARD);
        let meta = self.meta.get().expect("clustered").clone();
        if !self.served_by_meta_leader(&request, KIND) {
            return;
        }
        let peer = serde_json::from_slice::<serde_json::Value>(&request.payload)
            .ok()
            .and_then(|body| body.get("peer")?.as_str().map(str::to_string))
            .filter(|peer| !peer.is_empty());
        let Some(peer) = peer else {
            return self.answer_error(
                request.origin,
                request.reply,
                KIND,
                &ApiError::bad_request(),
            );
        };
        let Some(placement) = meta.placement(name) else {
            return self.answer_error(
                request.origin,
                request.reply,
                KIND,
                &ApiError::stream_not_found(),
            );
        };
        let removed = self.node_named(&meta, &peer);
        let Some(position) = placement
            .peers
            .iter()
            .position(|node| Some(*node) == removed)
        else {
            return self.answer_error(
                request.origin,
                request.reply,
                KIND,
                &ApiError::peer_not_member(),
            );
        };
        let candidates: Vec<(NodeId, usize)> = self
            .placement_candidates(&meta)
            .into_iter()
            .filter(|(node, _)| !placement.peers.contains(node))
            .collect();
        let random = crate::random::random_u64();
        let replacement = meta::place(1, &candidates, |node| {
            (node ^ random).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        });
        // A one-voter stream's group is its node's alone: it cannot move.
        let Some(replacement) = replacement.filter(|_| placement.peers.len() > 1) else {
            return self.answer_error(
                request.origin,
                request.reply,
                KIND,
                &ApiError::peer_remap_failed(),
            );
        };
        let mut peers = placement.peers.clone();
        peers[position] = replacement[0];
        let entry = MetaEntry::Remap {
            name: name.to_string(),
            group: placement.group,
            peers,
            config: None,
            reply: request
                .reply
                .as_ref()
                .map(|reply| String::from_utf8_lossy(reply).into_owned()),
        };
        let proposed = self
            .groups()
            .with_node(META_GROUP, |node| node.propose(Bytes::from(entry.encode())));
        if proposed.is_err() {
            self.answer_unavailable(&request, KIND);
        }
    }

    /// This node and the voters it reaches, with the streams each holds.
    /// Reachable: a route is open to it and, as the meta leader sees it,
    /// it answered within the last three heartbeats (a node that died a
    /// moment ago, its route not yet closed, is not chosen: a create placed
    /// there would never be answered).
    pub(super) fn placement_candidates(&self, meta: &Meta) -> Vec<(NodeId, usize)> {
        let reachable = self.voters_heard_recently(meta);
        // A voter being removed takes nothing new.
        let departing = self.departing_voter(meta);
        let state = meta.state.borrow();
        reachable
            .into_iter()
            .filter(|node| Some(*node) != departing)
            .map(|node| (node, state.load(node)))
            .collect()
    }

    /// The node known by server name `name`: this one, a node the meta
    /// group recorded (a voter's, or a former voter's), or one linked to.
    pub(super) fn node_named(&self, meta: &Meta, name: &str) -> Option<NodeId> {
        if self.server_name() == name {
            return Some(meta.node_id);
        }
        let state = meta.state.borrow();
        let recorded = |node: &NodeId| state.names.get(node).is_some_and(|known| known == name);
        state
            .voters
            .iter()
            .copied()
            .find(recorded)
            .or_else(|| state.names.keys().copied().find(recorded))
            .or_else(|| {
                let shard = self.shard();
                let routes = shard.routes.as_ref()?;
                routes
                    .known_nodes()
                    .into_iter()
                    .find(|(_, known, _)| known == name)
                    .map(|(node, _, _)| node)
            })
    }

    /// This node and the voters it reaches: a route is open to each and,
    /// as the meta leader sees it, it answered within the last three
    /// heartbeats (one not heard yet since this node leads is given the
    /// benefit of the doubt: its route is open).
    fn voters_heard_recently(&self, meta: &Meta) -> Vec<NodeId> {
        let shard = self.shard();
        let routes = shard.routes.as_ref().expect("clustered");
        let recent_ticks = 3 * u64::from(tern_raft::Config::new(meta.node_id).heartbeat_ticks);
        let heard: Vec<(NodeId, bool)> = self.groups().node(META_GROUP, |node| {
            node.peer_status()
                .into_iter()
                .map(|peer| {
                    let recent = peer
                        .silent_ticks
                        .is_none_or(|silent| silent <= recent_ticks);
                    (peer.id, recent)
                })
                .collect()
        });
        let state = meta.state.borrow();
        state
            .voters
            .iter()
            .copied()
            .filter(|&node| {
                node == meta.node_id
                    || (routes.link_to_node(node).is_some()
                        && heard
                            .iter()
                            .find(|(peer, _)| *peer == node)
                            .is_none_or(|(_, recent)| *recent))
            })
            .collect()
    }

    /// A stream's request on its owner shard when the stream is not on
    /// this node: handed to the same shard of a node holding it, or, when
    /// this node's meta state has not heard of it yet (a create another
    /// node applied first), to the meta leader's node, which knows every
    /// stream that was answered as created. Returns false when no other
    /// node is asked (the stream does not exist).
    pub(super) fn forward_to_host(&self, name: &str, request: &ApiRequest, kind: &str) -> bool {
        let this = self.node_id();
        let peers = self.placements.borrow().get(name).cloned();
        let target = match peers {
            Some(peers) => self.other_peer(&peers),
            None if request.hops == 0 => self.meta_leader.get().filter(|&node| Some(node) != this),
            None => None,
        };
        let Some(target) = target else {
            return false;
        };
        self.hand_to(target, request, kind);
        true
    }

    /// One of `peers` other than this node, one a route reaches first (a
    /// node that is down would answer 503 while another could serve).
    fn other_peer(&self, peers: &[NodeId]) -> Option<NodeId> {
        let this = self.node_id();
        let shard = self.shard();
        let reachable = |node: NodeId| {
            shard
                .routes
                .as_ref()
                .is_some_and(|routes| routes.link_to_node(node).is_some())
        };
        let others = || peers.iter().copied().filter(|&node| Some(node) != this);
        others()
            .find(|&node| reachable(node))
            .or_else(|| others().next())
    }

    /// Hands `request` to the same shard of node `node`; if it passed
    /// through enough nodes already, or no route reaches that node, 503
    /// 10008 (the client retries).
    pub(super) fn hand_to(&self, node: NodeId, request: &ApiRequest, kind: &str) {
        let shard = self.shard();
        let link = (request.hops < crate::cluster::frame::API_HOPS_MAX)
            .then(|| shard.routes.as_ref()?.link_to_node(node))
            .flatten();
        let sent = link.is_some_and(|link| {
            link.send_api(
                request.hops + 1,
                &request.subject,
                request.reply.as_deref(),
                &request.payload,
            )
        });
        if !sent {
            self.answer_unavailable(request, kind);
        }
    }

    /// Shard 0 tells every shard who leads the meta group, and whether
    /// this node's meta state is caught up ([`Meta::caught_up`]), when
    /// either changes; a new leader is logged.
    fn announce_meta(self: &Rc<Self>, meta: &Meta, announced: &mut Option<(Option<NodeId>, bool)>) {
        if !meta.is_running() {
            return;
        }
        let (leader, term, commit) = self.groups().node(META_GROUP, |node| {
            (node.leader(), node.term(), node.commit_index())
        });
        if let Some(leader) =
            leader.filter(|&leader| meta.logged_leader.get() != Some((leader, term)))
        {
            meta.logged_leader.set(Some((leader, term)));
            self.log_leader("meta group", leader, term);
        }
        let caught_up = meta.caught_up(leader, term, commit);
        if *announced != Some((leader, caught_up)) {
            *announced = Some((leader, caught_up));
            for shard in 0..self.shard_count {
                self.send_to(shard, JetStreamMessage::MetaLeader(leader));
                self.send_to(shard, JetStreamMessage::MetaReady(caught_up));
            }
        }
    }

    /// An owner shard learns who leads the meta group.
    pub(super) fn set_meta_leader(&self, leader: Option<NodeId>) {
        self.meta_leader.set(leader);
    }

    /// Whether this node is part of a cluster.
    pub(super) fn is_clustered(&self) -> bool {
        self.shard().routes.is_some()
    }

    /// Whether shard 0 serves a meta request here: this node leads the
    /// meta group and has applied an entry of its term (so everything
    /// committed before it: a new leader's catalog is then complete).
    /// Otherwise the request was handed to the leader's node, or, with no
    /// leader (or handed over already), answered 503 10008.
    pub(super) fn served_by_meta_leader(&self, request: &ApiRequest, kind: &str) -> bool {
        let meta = self.meta.get().expect("clustered");
        let (leader, term) = match meta.is_running() {
            true => self
                .groups()
                .node(META_GROUP, |node| (node.leader(), node.term())),
            false => (None, 0),
        };
        let caught_up = meta.state.borrow().applied_term == term;
        match leader {
            Some(leader) if leader == meta.node_id && caught_up => return true,
            Some(leader) if leader != meta.node_id && request.hops == 0 => {
                self.hand_to(leader, request, kind)
            }
            _ => self.answer_unavailable(request, kind),
        }
        false
    }

    /// 503 10008 `JetStream system temporarily unavailable`; to a pull
    /// request a 503 status instead, as when no node holds the stream:
    /// MSG.NEXT has no JSON answer (nats-server sends its inbox messages
    /// and statuses only), and a client takes any plain message there for
    /// a delivery.
    fn answer_unavailable(&self, request: &ApiRequest, kind: &str) {
        if kind == super::CONSUMER_NEXT_KIND {
            return self.no_responders(request.reply.clone());
        }
        self.answer_error(
            request.origin,
            request.reply.clone(),
            kind,
            &ApiError::cluster_unavailable(),
        );
    }

    /// STREAM.NAMES in a cluster, on shard 0: from the meta group's catalog.
    pub(super) fn cluster_names(&self, request: ApiRequest) {
        let kind = "stream_names_response";
        // The meta leader's catalog has every stream answered as created
        // (a follower's may lag by a heartbeat): asked there.
        if !self.served_by_meta_leader(&request, kind) {
            return;
        }
        let parsed = match super::requests::NamesRequest::parse(&request.payload) {
            Ok(parsed) => parsed,
            Err(error) => return self.answer_error(request.origin, request.reply, kind, &error),
        };
        let Some(reply) = request.reply else {
            return;
        };
        let names = self
            .catalog
            .borrow()
            .names_matching(parsed.subject.as_deref());
        let total = names.len();
        let page: Vec<String> = names
            .into_iter()
            .skip(parsed.offset)
            .take(super::NAMES_LIMIT)
            .collect();
        let body =
            super::responses::names_response(total, parsed.offset, super::NAMES_LIMIT, &page);
        self.respond(request.origin, reply, body);
    }

    /// A replicated stream's request reaching a replica that does not
    /// lead: handed to the leader's node (the same shard there). With no
    /// leader known here (a replica just created, an election under way),
    /// a client's own request is asked of another replica, which may know;
    /// one handed over already waits here (at most [`LEADER_WAIT`]) for
    /// this replica to learn its leader, as nats-server's requests wait for
    /// a stream leader to answer them, then goes on (503 10008 if none
    /// came). False when this replica serves it.
    pub(super) fn route_to_leader(
        self: &Rc<Self>,
        handle: &Rc<super::stream::StreamHandle>,
        request: &ApiRequest,
        kind: &str,
    ) -> bool {
        if !handle.is_replicated() || handle.leading.get() || handle.is_stopped() {
            return false;
        }
        let this = self.node_id();
        let leader = self.replica_leader(handle);
        let elsewhere = leader.filter(|&leader| Some(leader) != this);
        // No leader known here: a client's own request is asked of
        // another replica, which may know.
        let another = (request.hops == 0 && leader.is_none())
            .then(|| self.other_peer(&handle.peers))
            .flatten();
        match elsewhere.or(another) {
            Some(target) => self.hand_to(target, request, kind),
            // No leader known, or this node's Raft node leads and its task
            // has not taken office yet: the request waits here for either.
            None => {
                let (js, handle, request, kind) = (
                    self.clone(),
                    handle.clone(),
                    request.clone(),
                    kind.to_string(),
                );
                glommio::spawn_local(async move {
                    let deadline = Instant::now() + LEADER_WAIT;
                    let settled = |js: &JetStream| {
                        handle.leading.get()
                            || js
                                .replica_leader(&handle)
                                .is_some_and(|leader| Some(leader) != js.node_id())
                    };
                    while !settled(&js) && !handle.is_stopped() && Instant::now() < deadline {
                        // Bounded poll of the replica's leadership.
                        tern_shard::timer::sleep(Duration::from_millis(5)).await;
                    }
                    if settled(&js) && !handle.is_stopped() {
                        js.handle_request(request);
                    } else {
                        js.answer_unavailable(&request, &kind);
                    }
                })
                .detach();
            }
        }
        true
    }

    /// A replicated stream's leader as this node sees it: its Raft node's
    /// view (the task may not have followed a change yet), else the task's.
    fn replica_leader(&self, handle: &super::stream::StreamHandle) -> Option<NodeId> {
        self.groups
            .get()
            .and_then(|groups| groups.node_if_running(handle.group, Node::leader))
            .flatten()
            .or(handle.leader.get())
    }

    /// META.LEADER.STEPDOWN on shard 0: the meta leader hands leadership
    /// to the voter the body's `placement` prefers, or else to the one
    /// a current voter chosen at random (`Node::transfer_candidate`; asked
    /// there from other nodes).
    pub(super) fn meta_stepdown(&self, request: ApiRequest) {
        let kind = "meta_leader_stepdown_response";
        if !self.served_by_meta_leader(&request, kind) {
            return;
        }
        let target = match self.meta_stepdown_target(&request.payload) {
            Ok(target) => target,
            Err(error) => {
                return self.answer_error(request.origin, request.reply, kind, &error);
            }
        };
        let Some(target) = target else {
            return self.answer_unavailable(&request, kind);
        };
        self.groups()
            .with_node(META_GROUP, |node| node.transfer_leadership(target));
        if let Some(reply) = request.reply {
            self.respond(
                request.origin,
                reply,
                super::responses::success_response(kind),
            );
        }
    }

    /// The voter a meta stepdown hands leadership to (see
    /// [`super::stepdown`]); `None` when none can take it.
    fn meta_stepdown_target(&self, payload: &[u8]) -> Result<Option<NodeId>, ApiError> {
        let meta = self.meta.get().expect("clustered");
        let cluster = self.cluster_name().expect("clustered");
        let request = StepdownRequest::parse(payload)?;
        let voters = self
            .groups()
            .node(META_GROUP, |node| node.membership().voters.clone());
        let group = StepdownGroup {
            this_node: meta.node_id,
            voters: &voters,
            cluster: &cluster,
        };
        let target = choose_target(request.placement.as_ref(), &group, |node| {
            self.peer_name(node)
        })?;
        Ok(self.groups().with_node(META_GROUP, |node| match target {
            StepdownTarget::Any => node.transfer_candidate(),
            StepdownTarget::Preferred(voter) => node.transfer_candidate_preferring(voter),
        }))
    }

    /// A request another node handed to this shard.
    pub fn on_forwarded_api(
        self: &Rc<Self>,
        hops: u8,
        subject: &[u8],
        reply: Option<&[u8]>,
        payload: &[u8],
    ) {
        let request = ApiRequest {
            origin: self.index,
            subject: Bytes::copy_from_slice(subject),
            reply: reply.map(Bytes::copy_from_slice),
            payload: Bytes::copy_from_slice(payload),
            hops,
        };
        // Not counted in the API statistics: a client's request was counted
        // once, where the client sent it (`on_api`); the meta leader's own
        // requests (listings) and the nodes' reports (`$JS.API.$TERN.…`)
        // are not clients'. (`$JS.API.INFO` sums every node's count.)
        self.dispatch_api(request);
    }
}

// ----- monitoring ---------------------------------------------------------------

impl JetStream {
    /// The meta group as this node sees it; `None` unless this is shard 0
    /// of a clustered node.
    pub fn meta_status(&self) -> Option<MetaStatus> {
        let meta = self.meta.get()?;
        let cluster = self.cluster_name()?;
        let read = |node: &Node| {
            let log = node.log();
            let pending_bytes = log
                .entries()
                .filter(|entry| entry.index > log.snapshot_index())
                .map(|entry| match &entry.kind {
                    EntryKind::Normal(data) => data.len() as u64,
                    _ => 0,
                })
                .sum();
            let pending_entries = log.last_index().saturating_sub(log.snapshot_index());
            (Some(GroupView::of(node)), pending_entries, pending_bytes)
        };
        let (view, pending_entries, pending_bytes) = self
            .groups
            .get()
            .filter(|_| meta.is_running())
            .and_then(|groups| groups.node_if_running(META_GROUP, read))
            .unwrap_or((None, 0, 0));
        let caught_up = view
            .as_ref()
            .is_some_and(|view| meta.caught_up(view.leader, view.term, view.commit_index));
        let name_of = |node| self.peer_name(node);
        let (leader_name, replicas) = match &view {
            Some(view) => {
                let block = view.cluster_block(cluster.clone(), name_of);
                (block.leader, block.replicas)
            }
            None => (None, Vec::new()),
        };
        Some(MetaStatus {
            cluster,
            voters: meta.voters(),
            view,
            failure: meta.failure.borrow().clone(),
            applied_index: meta.applied_index(),
            caught_up,
            leader_name,
            replicas,
            pending_entries,
            pending_bytes,
        })
    }

    /// Each replicated stream of this shard that runs: its group as this
    /// node sees it.
    pub(super) fn stream_group_reports(&self) -> Vec<StreamGroupReport> {
        let (Some(groups), Some(cluster)) = (self.groups.get(), self.cluster_name()) else {
            return Vec::new();
        };
        let name_of = |node| self.peer_name(node);
        let streams = self.streams.borrow();
        let mut reports = Vec::new();
        for handle in streams.values().filter(|handle| handle.is_replicated()) {
            let Some(view) = groups.node_if_running(handle.group, GroupView::of) else {
                continue;
            };
            let replica_lag = view
                .replica_lag()
                .into_iter()
                .map(|(node, lag)| {
                    let name = name_of(node).map_or_else(|| format!("{node:x}"), |peer| peer.name);
                    (name, lag)
                })
                .collect();
            reports.push(StreamGroupReport {
                name: handle.name.clone(),
                group: handle.group,
                cluster: view.cluster_block(cluster.clone(), name_of),
                current: view.current(handle.committed_backlog()),
                view,
                replica_lag,
            });
        }
        reports
    }

    /// Streams the meta group placed on this node that this shard owns but
    /// does not run (a create not carried out, or a replica lost).
    pub(super) fn missing_streams(&self) -> Vec<String> {
        let Some(this) = self.node_id() else {
            return Vec::new();
        };
        let streams = self.streams.borrow();
        let damaged = self.damaged.borrow();
        self.placements
            .borrow()
            .iter()
            .filter(|(name, peers)| {
                peers.contains(&this)
                    && owner_of(name, self.shard_count) == self.index
                    && !streams.contains_key(*name)
                    && !damaged.contains_key(*name)
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// This shard's groups by role (the meta group's too, on shard 0) and
    /// their elections and leader changes.
    pub(super) fn raft_report(&self) -> RaftReport {
        let mut report = RaftReport::default();
        if let Some(groups) = self.groups.get() {
            groups.visit_nodes(|_, node| report.count(node.role()));
            report.counters = groups.counters();
        }
        report
    }

    /// A new leader of a group on this node: logged once per leader and
    /// term.
    pub(super) fn log_leader(&self, group: &str, leader: NodeId, term: u64) {
        if Some(leader) == self.node_id() {
            log::info!(target: "tern::jetstream", "{group}: this node leads (term {term})");
            return;
        }
        let name = self
            .peer_name(leader)
            .map_or_else(|| format!("{leader:x}"), |peer| peer.name);
        log::info!(target: "tern::jetstream", "{group}: leader is {name} (term {term})");
    }

    /// A replicated stream's task saw its group's leader change; this
    /// replica taking office is logged by the task itself.
    pub fn log_stream_leader(&self, stream: &str, leader: NodeId, term: u64) {
        if Some(leader) != self.node_id() {
            self.log_leader(&format!("stream {stream}"), leader, term);
        }
    }
}

/// A stream's voters as its task runs them: none for one replica (a
/// single voter, as on one server), else the placed nodes.
fn voters_of(placement: &Placement) -> Vec<NodeId> {
    if placement.peers.len() > 1 {
        placement.peers.clone()
    } else {
        Vec::new()
    }
}

/// The client's inbox, for every node holding the stream: its replica in
/// office answers (a one-replica stream's only one), so a create or
/// update is answered while any quorum of its nodes is up.
fn reply_for_replicas(reply: &Option<String>) -> Option<Bytes> {
    reply.as_deref().map(|reply| Bytes::from(reply.to_string()))
}

/// What a node taken off a stream (`before` to `after`) does with its
/// copy. If the nodes that stay are a quorum of the old voters, the group
/// moves on without it: the copy goes at once (a node down meanwhile
/// deletes it when it returns). Otherwise (shrinking by a majority, e.g. 3
/// replicas to 1) the group still needs its vote to remove the others, so
/// it stays a voter, told the new placement, and deletes its copy when
/// the group's removal of it applies there (`StreamTask::leave_group`).
fn leave_command(name: &str, origin: usize, before: &[NodeId], after: &[NodeId]) -> OwnerCommand {
    let staying = before.iter().filter(|peer| after.contains(peer)).count();
    // A quorum of the old voters: more than half.
    if staying > before.len() / 2 {
        OwnerCommand::Delete {
            name: name.to_string(),
            origin,
            reply: None,
            meta_index: None,
        }
    } else {
        OwnerCommand::Peers {
            name: name.to_string(),
            peers: after.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delete_is_answered_once_every_reachable_voter_carried_it_out() {
        let voters = [1, 2, 3];
        let reachable = |voter: NodeId| voter != 3;
        let carried = |reported: [u64; 3]| move |voter: NodeId| reported[(voter - 1) as usize];
        // This node (1) has not carried out entry 7 itself yet.
        assert!(!carried_out_everywhere(
            7,
            1,
            6,
            &voters,
            reachable,
            carried([0, 9, 0])
        ));
        // Node 2 reached and behind: held.
        assert!(!carried_out_everywhere(
            7,
            1,
            7,
            &voters,
            reachable,
            carried([0, 6, 0])
        ));
        // Node 2 through it; node 3 unreachable, not waited for.
        assert!(carried_out_everywhere(
            7,
            1,
            7,
            &voters,
            reachable,
            carried([0, 7, 0])
        ));
        // Node 3 reachable again and behind: held.
        assert!(!carried_out_everywhere(
            7,
            1,
            7,
            &voters,
            |_| true,
            carried([0, 7, 2])
        ));
        // A single voter answers on its own count.
        assert!(carried_out_everywhere(7, 1, 7, &[1], |_| true, |_| 0));
    }

    #[test]
    fn carried_out_reports_round_trip_and_refuse_garbage() {
        let report = CarriedOut {
            node: 0x0102_0304_0506_0708,
            index: 42,
        };
        let bytes = report.encode();
        assert_eq!(&bytes[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&bytes[8..], &42u64.to_be_bytes());
        assert_eq!(CarriedOut::decode(&bytes), Some(report));
        assert_eq!(CarriedOut::decode(&bytes[..15]), None, "short");
        assert_eq!(
            CarriedOut::decode(&[bytes.as_slice(), &[0]].concat()),
            None,
            "long"
        );
        assert_eq!(CarriedOut::decode(&[0; 16]), None, "node 0");
    }
}
