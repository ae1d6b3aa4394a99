//! One member of one Raft group, as a sans-IO state machine.
//!
//! The caller drives it: [`Node::tick`] on a timer, [`Node::step`] for each
//! message, [`Node::propose`] for client data; then takes a [`Ready`], makes
//! its hard state, truncation, entries and snapshot durable, sends its
//! messages (`messages` at once, `persisted_messages` only after that
//! durability), applies `committed`, and calls [`Node::advance`] with the
//! ready's number. Readys must be persisted and advanced in order.
//!
//! Safety rules this code keeps (see docs/raft.md): a vote is granted, and
//! anything is answered in a new term, only after the term and vote are
//! durable; a follower acknowledges entries only after they are durable; the
//! leader counts its own copy toward commit only once durable (it writes in
//! parallel with sending); only entries of the current term are committed by
//! counting; entries are applied only once durable locally.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use crate::log::RaftLog;
use crate::message::{Envelope, Message};
use crate::types::{Entry, EntryKind, HardState, Index, Membership, NodeId, Snapshot, Term};

/// Heartbeats a leader keeps sending a removed voter after its removal
/// committed, waiting for it to have the removal (it may be behind or
/// unreachable: then it is not told).
const LEAVING_HEARTBEATS_MAX: u32 = 100;

#[derive(Debug, Clone)]
pub struct Config {
    pub id: NodeId,
    /// Election timeout: a random value in `[election_ticks, 2 * election_ticks)`.
    pub election_ticks: u32,
    pub heartbeat_ticks: u32,
    /// Caps of one append message.
    pub max_append_entries: usize,
    pub max_append_bytes: usize,
    /// Append messages (or snapshot chunks) in flight to one follower.
    pub max_inflight: usize,
    /// Bytes of one `InstallSnapshot` chunk.
    pub max_snapshot_chunk_bytes: usize,
    /// Committed entries handed out per ready.
    pub max_apply_entries: usize,
    pub pre_vote: bool,
    pub check_quorum: bool,
    /// A deliberately broken variant, for proving the simulator's checkers
    /// can fail. Never set outside tests.
    pub canary: Option<Canary>,
}

/// Known bugs the simulator must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canary {
    /// Grant votes without checking the candidate's log is up to date.
    VoteWithoutLogCheck,
    /// Count the leader's own entries toward commit before they are durable.
    CommitBeforeDurable,
    /// Write a snapshot chunk at its offset even past a lost one (the gap
    /// stays zeros), as a careless sparse-file writer would.
    SnapshotChunkGap,
    /// Ignore [`Restore::entries_lost_through_term`]: vote at once after
    /// losing the log.
    ForgetLostEntries,
}

impl Config {
    pub fn new(id: NodeId) -> Config {
        Config {
            id,
            election_ticks: 10,
            heartbeat_ticks: 2,
            max_append_entries: 256,
            max_append_bytes: 1 << 20,
            max_inflight: 8,
            max_snapshot_chunk_bytes: 1 << 20,
            max_apply_entries: 4096,
            pre_vote: true,
            check_quorum: true,
            canary: None,
        }
    }
}

/// What a node starts from: its durable state.
#[derive(Debug, Clone, Default)]
pub struct Restore {
    pub hard_state: HardState,
    pub snapshot: Option<Snapshot>,
    /// Durable entries after the snapshot, contiguous.
    pub entries: Vec<Entry>,
    /// Voters when there is no snapshot (a new group).
    pub membership: Membership,
    /// Highest index this node ever acknowledged. If the entries end before
    /// it (a damaged disk lost some), the node neither votes nor campaigns
    /// until it has them again.
    pub acknowledged_index: Index,
    /// Nonzero: entries after the snapshot were lost and how far this node
    /// had acknowledged is unknown (a journal lost), but its hard state
    /// survived (kept twice) and no term it acknowledged in is above this
    /// one. The node starts in the next term (without a vote, so the
    /// leader of this one steps down) and neither votes nor campaigns
    /// until its durable log holds an entry of a later term: that entry's
    /// leader was elected without it and holds everything committed
    /// before (Leader Completeness), so from then on its log is as safe to
    /// vote with as any follower's. docs/raft.md §Damage.
    pub entries_lost_through_term: Term,
    /// Seeds the election-timeout randomness (no randomness inside).
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Follower,
    PreCandidate,
    Candidate,
    Leader,
}

/// Why a proposal was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposeError {
    NotLeader {
        leader: Option<NodeId>,
    },
    /// A leadership transfer is in progress.
    Transferring,
    /// A membership change is already in flight.
    MembershipChangePending,
}

/// A linearizable read is safe once the state machine applied `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadState {
    pub context: u64,
    pub index: Index,
}

/// What the caller must do next.
#[derive(Debug, Clone, Default)]
pub struct Ready {
    pub number: u64,
    pub hard_state: Option<HardState>,
    /// Delete durable entries from this index on before appending `entries`.
    pub truncate_from: Option<Index>,
    pub entries: Vec<Entry>,
    /// Install and persist (replaces the log up to its index): the host
    /// swaps in what the chunks of `snapshot_chunks` (this ready's and
    /// earlier ones') staged.
    pub snapshot: Option<Snapshot>,
    /// Chunks of a snapshot this follower receives, in order, for the host
    /// to stage (an offset-0 chunk starts over). When `snapshot` is set,
    /// it installs what the chunks up to its own `last` one staged: chunks
    /// after that (a later transfer begun in the same ready) come after the
    /// install ([`Ready::chunks_before_install`]).
    pub snapshot_chunks: Vec<SnapshotChunk>,
    /// The leader's host reads these snapshot bytes and answers each with
    /// [`Node::snapshot_chunk`].
    pub snapshot_reads: Vec<SnapshotRead>,
    pub messages: Vec<Envelope>,
    /// Send only once this ready is durable.
    pub persisted_messages: Vec<Envelope>,
    /// Apply in order.
    pub committed: Vec<Entry>,
    pub read_states: Vec<ReadState>,
}

impl Ready {
    /// How many of `snapshot_chunks` the host stages before installing
    /// `snapshot` (all of them when there is none to install).
    pub fn chunks_before_install(&self) -> usize {
        chunks_before_install(&self.snapshot_chunks, self.snapshot.as_ref())
    }
}

/// How many of `chunks` (one ready's, in order) come before installing
/// `snapshot`: up to and including its last chunk.
pub fn chunks_before_install(chunks: &[SnapshotChunk], snapshot: Option<&Snapshot>) -> usize {
    snapshot
        .and_then(|snapshot| {
            chunks
                .iter()
                .rposition(|chunk| chunk.last && chunk.index == snapshot.index)
        })
        .map_or(chunks.len(), |position| position + 1)
}

/// The leader needs the next bytes of its snapshot at `index` for a
/// transfer to `peer`: the host answers with [`Node::snapshot_chunk`], at
/// most `max_bytes` from `offset` (at least one unless it is the last
/// chunk). Reads of one session come in order, each from where the last
/// ended; a read of a new session starts at offset 0. Every read of the
/// snapshot last given to [`Node::compact`] (or installed) must be
/// answered; an answer the transfer no longer wants is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRead {
    pub peer: NodeId,
    pub index: Index,
    pub session: u64,
    pub offset: u64,
    pub max_bytes: usize,
}

/// A snapshot chunk a follower received in order: the host writes `data`
/// at `offset` of what it stages for session `session` of the snapshot at
/// `index` (offset 0: a new staging, replacing any other). The ready with
/// the `last` chunk carries the install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotChunk {
    pub index: Index,
    pub session: u64,
    pub offset: u64,
    pub last: bool,
    pub data: Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProgressState {
    /// One append at a time until a response says where the follower is.
    Probe,
    /// Pipelined appends, up to `max_inflight`.
    Replicate,
    /// Waiting for a snapshot to be installed.
    Snapshot,
}

#[derive(Debug, Clone)]
struct Progress {
    match_index: Index,
    next_index: Index,
    state: ProgressState,
    /// Last index of each append in flight (Replicate).
    inflight: VecDeque<Index>,
    /// First index of the oldest append in flight (Replicate): where a
    /// stalled pipeline is probed again.
    inflight_from: Index,
    /// A probe is outstanding.
    paused: bool,
    recent_active: bool,
    /// The node's tick count when this follower was last heard from
    /// (`None`: not since this node leads). Monitoring only.
    heard_tick: Option<u64>,
    /// `match_index` at the last stall check (see `restart_stalled_replication`).
    checked_match: Index,
    /// The snapshot being sent (state `Snapshot`).
    transfer: Option<SnapshotTransfer>,
    /// The transfer's acknowledged bytes at the last stall check.
    checked_snapshot_bytes: u64,
}

/// A snapshot going to one follower chunk by chunk, at most `max_inflight`
/// chunks ahead of what it acknowledged. The host reads the chunks from its
/// live state as the transfer goes (`SnapshotRead`), so the same offset
/// read twice may differ: the chunks the follower has not acknowledged are
/// kept here for resending (at most `max_inflight`), and a follower that
/// lost acknowledged ones gets a new session.
#[derive(Debug, Clone)]
struct SnapshotTransfer {
    index: Index,
    session: u64,
    /// Chunks from the host not acknowledged yet, in offset order: the
    /// first begins at `acknowledged`.
    buffer: VecDeque<BufferedChunk>,
    /// How many of `buffer` went out since the last rewind.
    sent: usize,
    /// Bytes the follower said it holds.
    acknowledged: u64,
    /// Bytes the host gave (the next read's offset).
    produced: u64,
    /// The host gave the last chunk.
    finished: bool,
    /// A read is asked and not answered yet.
    reading: bool,
    /// The offset the last gap answer sent this transfer back to: further
    /// gap answers naming it are about chunks already resent (each
    /// out-of-order chunk of one window answers with the same gap), so
    /// they change nothing. Without this each of them resent the whole
    /// window and every resent chunk that arrived out of order did so
    /// again: the simulator's messages grew until the process ran out of
    /// memory.
    rewound_to: Option<u64>,
    /// Resumed after a whole election timeout without progress: a gap
    /// answer below what the follower acknowledged is believed once (the
    /// follower restarted and lost what it held). Otherwise such an answer
    /// is stale (reordered behind later ones) and changes nothing; acting
    /// on each stale one resent a window every time (seed 2675).
    after_stall: bool,
}

#[derive(Debug, Clone)]
struct BufferedChunk {
    offset: u64,
    data: Bytes,
    last: bool,
}

impl BufferedChunk {
    fn end(&self) -> u64 {
        self.offset + self.data.len() as u64
    }
}

impl SnapshotTransfer {
    fn new(index: Index, session: u64) -> SnapshotTransfer {
        SnapshotTransfer {
            index,
            session,
            buffer: VecDeque::new(),
            sent: 0,
            acknowledged: 0,
            produced: 0,
            finished: false,
            reading: false,
            rewound_to: None,
            after_stall: false,
        }
    }

    /// The follower holds `received` bytes: chunks before them go.
    fn acknowledge(&mut self, received: u64) {
        let received = received.min(self.produced);
        self.acknowledged = self.acknowledged.max(received);
        while let Some(front) = self.buffer.front() {
            if front.last || front.end() > self.acknowledged {
                break;
            }
            self.buffer.pop_front();
            self.sent = self.sent.saturating_sub(1);
        }
    }
}

/// The fields of one `InstallSnapshot` message.
struct ChunkMessage {
    index: Index,
    snapshot_term: Term,
    membership: Membership,
    session: u64,
    offset: u64,
    last: bool,
    chunk: Bytes,
}

/// A snapshot a follower is receiving: chunks in order from one leader's
/// transfer session (the bytes are the host's, staged as they come).
struct IncomingSnapshot {
    from: NodeId,
    term: Term,
    index: Index,
    snapshot_term: Term,
    membership: Membership,
    session: u64,
    received: u64,
}

impl Progress {
    fn new(next_index: Index) -> Progress {
        Progress {
            match_index: 0,
            next_index,
            state: ProgressState::Probe,
            inflight: VecDeque::new(),
            inflight_from: 0,
            paused: false,
            recent_active: false,
            heard_tick: None,
            checked_match: 0,
            transfer: None,
            checked_snapshot_bytes: 0,
        }
    }
}

struct PendingRead {
    context: u64,
    /// Carried by the confirming heartbeats.
    internal: u64,
    index: Index,
    acks: BTreeSet<NodeId>,
}

struct ReadyInfo {
    number: u64,
    last: Option<(Index, Term)>,
    snapshot: Option<(Index, Term)>,
    persisted_messages: bool,
}

pub struct Node {
    config: Config,
    hard: HardState,
    hard_dirty: bool,
    role: Role,
    leader: Option<NodeId>,
    membership: Membership,
    snapshot_membership: Membership,
    log: RaftLog,
    election_elapsed: u32,
    heartbeat_elapsed: u32,
    randomized_election_ticks: u32,
    random: u64,
    votes: BTreeMap<NodeId, bool>,
    progress: BTreeMap<NodeId, Progress>,
    messages: Vec<Envelope>,
    persisted_messages: Vec<Envelope>,
    snapshot_to_install: Option<Snapshot>,
    /// The latest snapshot the state machine gave (sent to lagging followers).
    snapshot: Option<Snapshot>,
    /// The snapshot being received from the leader.
    incoming_snapshot: Option<IncomingSnapshot>,
    /// Received chunks for the host to stage (next ready).
    snapshot_chunks: Vec<SnapshotChunk>,
    /// Snapshot bytes the host is asked to read (next ready).
    snapshot_reads: Vec<SnapshotRead>,
    /// The next snapshot transfer's session number.
    next_session: u64,
    pending_reads: Vec<PendingRead>,
    read_states: Vec<ReadState>,
    next_read_context: u64,
    /// Index of the last membership entry appended.
    pending_membership_index: Index,
    /// Index of the membership entry `membership` comes from (0: the snapshot's).
    membership_index: Index,
    transfer: Option<(NodeId, u32)>,
    /// A leader removing a voter keeps replicating to it until it has the
    /// removal and a commit index past it (so it learns it was removed:
    /// the host deletes its copy then), or for `LEAVING_HEARTBEATS_MAX`
    /// heartbeats after the removal committed: per peer, the removal's
    /// index and the heartbeats sent since it committed (several when
    /// removals follow each other faster than the removed catch up).
    leaving: BTreeMap<NodeId, (Index, u32)>,
    /// Damaged: must catch up to this index before voting or campaigning.
    damaged_until: Index,
    /// Damaged: must hold a durable entry of a later term than this before
    /// voting or campaigning ([`Restore::entries_lost_through_term`]).
    damaged_through_term: Term,
    next_ready: u64,
    outstanding: VecDeque<ReadyInfo>,
    /// Ticks since the node started (monitoring: how long ago a peer was
    /// heard from).
    ticks: u64,
    /// The leader last counted in `counters.leader_changes`, with its term.
    counted_leader: Option<(NodeId, Term)>,
    counters: NodeCounters,
}

/// Monitoring counters of one node; the protocol never reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCounters {
    /// Elections this node stood in (it became a candidate; a pre-vote
    /// that failed does not count).
    pub elections: u64,
    /// Times this node learned of a new leader: another node, or one
    /// (itself included) elected in a new term.
    pub leader_changes: u64,
}

impl std::ops::AddAssign for NodeCounters {
    fn add_assign(&mut self, other: NodeCounters) {
        self.elections += other.elections;
        self.leader_changes += other.leader_changes;
    }
}

/// The leader's view of another voter (monitoring).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerStatus {
    pub id: NodeId,
    /// The last index known to be in its log.
    pub match_index: Index,
    /// Heard from within the current check-quorum window.
    pub recently_active: bool,
    /// Ticks since it was last heard from; `None`: not since this node
    /// leads.
    pub silent_ticks: Option<u64>,
}

impl Node {
    pub fn new(config: Config, restore: Restore) -> Node {
        assert!(config.election_ticks > config.heartbeat_ticks && config.heartbeat_ticks > 0);
        let (snapshot_index, snapshot_term, snapshot_membership) = match &restore.snapshot {
            Some(snapshot) => (snapshot.index, snapshot.term, snapshot.membership.clone()),
            None => (0, 0, restore.membership.clone()),
        };
        let log = RaftLog::new(snapshot_index, snapshot_term, restore.entries);
        let damaged_until = if log.last_index() < restore.acknowledged_index {
            restore.acknowledged_index
        } else {
            0
        };
        let mut node = Node {
            hard: restore.hard_state,
            hard_dirty: false,
            role: Role::Follower,
            leader: None,
            membership: snapshot_membership.clone(),
            snapshot_membership,
            log,
            election_elapsed: 0,
            heartbeat_elapsed: 0,
            randomized_election_ticks: 0,
            random: restore.seed | 1,
            votes: BTreeMap::new(),
            progress: BTreeMap::new(),
            messages: Vec::new(),
            persisted_messages: Vec::new(),
            snapshot_to_install: None,
            snapshot: restore.snapshot,
            incoming_snapshot: None,
            snapshot_chunks: Vec::new(),
            snapshot_reads: Vec::new(),
            next_session: 1,
            pending_reads: Vec::new(),
            read_states: Vec::new(),
            next_read_context: 1,
            pending_membership_index: 0,
            membership_index: 0,
            transfer: None,
            leaving: BTreeMap::new(),
            damaged_until,
            damaged_through_term: if config.canary == Some(Canary::ForgetLostEntries) {
                0
            } else {
                restore.entries_lost_through_term
            },
            next_ready: 1,
            outstanding: VecDeque::new(),
            ticks: 0,
            counted_leader: None,
            counters: NodeCounters::default(),
            config,
        };
        node.recompute_membership();
        node.reset_election_timeout();
        // A mark kept from before a restart may be satisfied already.
        node.clear_damage();
        if node.damaged_through_term > 0 && node.hard.term <= node.damaged_through_term {
            // Ends the term it lost entries in: a leader of that term (which
            // may have counted acknowledgements this node no longer has)
            // steps down on hearing the next one, and the election that
            // follows, held without this node, makes the entry of a later
            // term that ends the damage. Raising one's term without voting
            // is always safe.
            node.hard = HardState {
                term: node.damaged_through_term + 1,
                vote: None,
            };
            node.hard_dirty = true;
        }
        node
    }

    // ----- accessors ------------------------------------------------------------

    pub fn id(&self) -> NodeId {
        self.config.id
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// The current term and vote, durable or about to be (a host that
    /// rebuilds its state keeps them: it must never vote twice in a term).
    pub fn hard_state(&self) -> HardState {
        self.hard
    }

    pub fn term(&self) -> Term {
        self.hard.term
    }

    pub fn leader(&self) -> Option<NodeId> {
        self.leader
    }

    pub fn commit_index(&self) -> Index {
        self.log.committed
    }

    pub fn last_index(&self) -> Index {
        self.log.last_index()
    }

    pub fn applied_index(&self) -> Index {
        self.log.applied
    }

    /// The leader's view of each other voter: (id, match index, heard
    /// from recently). Empty unless this node leads.
    pub fn peer_progress(&self) -> Vec<(NodeId, Index, bool)> {
        if self.role != Role::Leader {
            return Vec::new();
        }
        self.progress
            .iter()
            .filter(|(peer, _)| **peer != self.id() && self.membership.contains(**peer))
            .map(|(peer, progress)| (*peer, progress.match_index, progress.recent_active))
            .collect()
    }

    /// Like [`Node::peer_progress`], with how long ago each was heard
    /// from. Empty unless this node leads.
    pub fn peer_status(&self) -> Vec<PeerStatus> {
        if self.role != Role::Leader {
            return Vec::new();
        }
        self.progress
            .iter()
            .filter(|(peer, _)| **peer != self.id() && self.membership.contains(**peer))
            .map(|(peer, progress)| PeerStatus {
                id: *peer,
                match_index: progress.match_index,
                recently_active: progress.recent_active,
                silent_ticks: progress.heard_tick.map(|tick| self.ticks - tick),
            })
            .collect()
    }

    /// A follower that knows its leader: ticks since it last heard from it
    /// (it campaigns, forgetting the leader, once its election timeout
    /// passes). `None` otherwise.
    pub fn leader_silent_ticks(&self) -> Option<u64> {
        (self.role == Role::Follower && self.leader.is_some_and(|leader| leader != self.id()))
            .then_some(u64::from(self.election_elapsed))
    }

    /// Elections stood in and leaders seen (monitoring).
    pub fn counters(&self) -> NodeCounters {
        self.counters
    }

    /// Counts `leader` once per (leader, term).
    fn note_leader(&mut self, leader: NodeId) {
        let seen = Some((leader, self.hard.term));
        if self.counted_leader != seen {
            self.counted_leader = seen;
            self.counters.leader_changes += 1;
        }
    }

    /// The voter heard from recently with the most of the log: where a
    /// leader leaving the group hands over (the fastest handover). `None`
    /// unless this node leads and has such a peer.
    ///
    /// "Recently" is within three heartbeats (nats-server's rule), not the
    /// check-quorum window: a voter that died moments ago must not be
    /// chosen, or the handover is lost and leadership stays put.
    pub fn most_caught_up_peer(&self) -> Option<NodeId> {
        self.peer_status()
            .into_iter()
            .filter(|peer| self.is_heard_recently(peer))
            .max_by_key(|peer| peer.match_index)
            .map(|peer| peer.id)
    }

    /// Where a plain stepdown hands leadership: a current voter (heard
    /// within three heartbeats and holding every committed entry) chosen
    /// uniformly at random with the node's seeded generator, so repeated
    /// stepdowns reach every current replica (nats-server takes the first
    /// healthy peer of a Go map, in random order). With no current voter,
    /// the one heard recently with the most of the log
    /// ([`Node::most_caught_up_peer`]); the handover then waits for it to
    /// catch up before it asks it to stand. `None` unless this node leads
    /// and has such a peer.
    pub fn transfer_candidate(&mut self) -> Option<NodeId> {
        let committed = self.log.committed;
        let current: Vec<NodeId> = self
            .peer_status()
            .into_iter()
            .filter(|peer| self.is_heard_recently(peer) && peer.match_index >= committed)
            .map(|peer| peer.id)
            .collect();
        if current.is_empty() {
            return self.most_caught_up_peer();
        }
        let chosen = current[(self.next_random() % current.len() as u64) as usize];
        assert!(self.membership.contains(chosen) && chosen != self.id());
        Some(chosen)
    }

    /// Whom a stepdown that prefers `preferred` hands leadership to: it,
    /// when it is a voter heard within three heartbeats, else (as
    /// nats-server's `StepDown(preferred)`, which then takes the first
    /// healthy peer) [`Node::transfer_candidate`].
    pub fn transfer_candidate_preferring(&mut self, preferred: NodeId) -> Option<NodeId> {
        let healthy = self
            .peer_status()
            .iter()
            .any(|peer| peer.id == preferred && self.is_heard_recently(peer));
        if healthy {
            Some(preferred)
        } else {
            self.transfer_candidate()
        }
    }

    /// A peer that answered within three heartbeats (nats-server's
    /// `hbInterval*3` health test for a stepdown's target).
    fn is_heard_recently(&self, peer: &PeerStatus) -> bool {
        let recent_ticks = 3 * u64::from(self.config.heartbeat_ticks);
        peer.recently_active
            && peer
                .silent_ticks
                .is_some_and(|silent| silent <= recent_ticks)
    }

    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    pub fn log(&self) -> &RaftLog {
        &self.log
    }

    /// The term through which this node lost entries and has not yet held
    /// one of a later term (0: none); the host keeps it across restarts.
    pub fn entries_lost_through_term(&self) -> Term {
        self.damaged_through_term
    }

    pub fn is_damaged(&self) -> bool {
        self.damaged_until > 0 || self.damaged_through_term > 0
    }

    /// Ends the damage marks the durable log now satisfies.
    fn clear_damage(&mut self) {
        if self.damaged_until > 0
            && self.log.last_index() >= self.damaged_until
            && self.log.persisted >= self.damaged_until
        {
            self.damaged_until = 0;
        }
        if self.damaged_through_term > 0
            && self
                .log
                .term_at(self.log.persisted)
                .is_some_and(|term| term > self.damaged_through_term)
        {
            self.damaged_through_term = 0;
        }
    }

    // ----- time -----------------------------------------------------------------

    fn next_random(&mut self) -> u64 {
        self.random ^= self.random << 13;
        self.random ^= self.random >> 7;
        self.random ^= self.random << 17;
        self.random
    }

    fn reset_election_timeout(&mut self) {
        let base = u64::from(self.config.election_ticks);
        self.randomized_election_ticks = (base + self.next_random() % base) as u32;
        self.election_elapsed = 0;
    }

    /// Starts an election now instead of waiting for the timeout: for a
    /// group whose only voter is this node (it wins at once), or a caller
    /// that knows the leader is gone. A leader ignores it.
    pub fn campaign_now(&mut self) {
        if self.role != Role::Leader {
            self.campaign(false);
        }
    }

    pub fn tick(&mut self) {
        self.ticks += 1;
        self.election_elapsed += 1;
        match self.role {
            Role::Leader => {
                self.heartbeat_elapsed += 1;
                if self.heartbeat_elapsed >= self.config.heartbeat_ticks {
                    self.heartbeat_elapsed = 0;
                    self.broadcast_heartbeat(0);
                }
                if self.election_elapsed >= self.config.election_ticks {
                    self.election_elapsed = 0;
                    if self.config.check_quorum && !self.quorum_recently_active() {
                        self.become_follower(self.hard.term, None);
                        return;
                    }
                    // A transfer that did not finish within a timeout is abandoned.
                    self.transfer = None;
                    self.restart_stalled_replication();
                }
            }
            _ => {
                if self.election_elapsed >= self.randomized_election_ticks {
                    self.campaign(false);
                }
            }
        }
    }

    /// A follower that acknowledged nothing for a whole election timeout
    /// while behind lost what was sent to it (pipelined appends or a
    /// snapshot the network dropped): heartbeats alone never resend them, so
    /// probe again from what it acknowledged.
    fn restart_stalled_replication(&mut self) {
        let last = self.log.last_index();
        let mut stalled = Vec::new();
        let mut resumed = Vec::new();
        for (peer, progress) in self.progress.iter_mut() {
            let waiting = progress.state != ProgressState::Probe && progress.match_index < last;
            let snapshot_bytes = progress
                .transfer
                .as_ref()
                .map_or(0, |transfer| transfer.acknowledged);
            if waiting
                && progress.match_index == progress.checked_match
                && snapshot_bytes == progress.checked_snapshot_bytes
            {
                match &mut progress.transfer {
                    // Chunks were lost: resend from what the follower holds.
                    Some(transfer) if progress.state == ProgressState::Snapshot => {
                        transfer.sent = 0;
                        transfer.rewound_to = None;
                        transfer.after_stall = true;
                        resumed.push(*peer);
                    }
                    _ => {
                        // Resend from the oldest append in flight (a probe
                        // the follower rejects, with its last index as the
                        // hint, if it lacks what came before). Probing from
                        // the match index instead walked a follower whose
                        // match was unknown (0: a heartbeat's answer) up from
                        // entry 1, one append per round trip, although it
                        // held 709 entries (Raft simulator seed 109608).
                        let from = if progress.inflight.is_empty() {
                            progress.next_index.min(last + 1)
                        } else {
                            progress.inflight_from
                        };
                        progress.state = ProgressState::Probe;
                        progress.inflight.clear();
                        progress.paused = false;
                        progress.next_index = from.max(progress.match_index + 1);
                        progress.transfer = None;
                        stalled.push(*peer);
                    }
                }
            }
            progress.checked_match = progress.match_index;
            progress.checked_snapshot_bytes = snapshot_bytes;
        }
        for peer in stalled {
            self.send_append(peer);
        }
        for peer in resumed {
            self.send_snapshot_chunks(peer);
        }
    }

    fn quorum_recently_active(&mut self) -> bool {
        let id = self.id();
        let mut active = 0;
        for voter in &self.membership.voters {
            if *voter == id {
                active += 1;
            } else if let Some(progress) = self.progress.get_mut(voter) {
                if progress.recent_active {
                    active += 1;
                }
                progress.recent_active = false;
            }
        }
        active >= self.membership.quorum()
    }

    // ----- roles ----------------------------------------------------------------

    fn become_follower(&mut self, term: Term, leader: Option<NodeId>) {
        if term > self.hard.term {
            self.hard.term = term;
            self.hard.vote = None;
            self.hard_dirty = true;
        }
        self.role = Role::Follower;
        self.leader = leader;
        if let Some(leader) = leader {
            self.note_leader(leader);
        }
        self.progress.clear();
        self.votes.clear();
        self.transfer = None;
        self.leaving.clear();
        self.pending_reads.clear();
        self.reset_election_timeout();
    }

    fn campaign(&mut self, transfer: bool) {
        let id = self.id();
        // A node outside its latest configuration still campaigns while that
        // configuration is uncommitted: it may be the one needed to commit it
        // (its own vote does not count, see `tally`). Raft dissertation §4.1.
        let removed = !self.membership.contains(id) && self.membership_index <= self.log.committed;
        if removed || self.is_damaged() {
            // It may not campaign, but its timeout passed without a word
            // from the leader: the lease is over, so a candidate's vote
            // request is heard (else a node added while it did not know,
            // or a damaged one, could keep refusing every election).
            self.leader = None;
            self.reset_election_timeout();
            return;
        }
        self.votes.clear();
        self.leader = None;
        let pre_vote = self.config.pre_vote && !transfer;
        if pre_vote {
            self.role = Role::PreCandidate;
        } else {
            self.role = Role::Candidate;
            self.hard.term += 1;
            self.hard.vote = Some(id);
            self.hard_dirty = true;
            self.counters.elections += 1;
        }
        self.reset_election_timeout();
        self.votes.insert(id, true);
        if self.tally() {
            self.on_election_won(pre_vote);
            return;
        }
        let term = if pre_vote {
            self.hard.term + 1
        } else {
            self.hard.term
        };
        let (last_index, last_term) = (self.log.last_index(), self.log.last_term());
        for voter in self.membership.voters.clone() {
            if voter != id {
                self.send(
                    voter,
                    Message::Vote {
                        term,
                        last_index,
                        last_term,
                        pre_vote,
                        transfer,
                    },
                );
            }
        }
    }

    fn tally(&self) -> bool {
        let granted = self
            .votes
            .iter()
            .filter(|(voter, granted)| **granted && self.membership.contains(**voter))
            .count();
        granted >= self.membership.quorum()
    }

    fn tally_rejected(&self) -> bool {
        let rejected = self
            .votes
            .iter()
            .filter(|(voter, granted)| !**granted && self.membership.contains(**voter))
            .count();
        rejected >= self.membership.quorum()
    }

    fn on_election_won(&mut self, pre_vote: bool) {
        if pre_vote {
            self.campaign_real();
        } else {
            self.become_leader();
        }
    }

    fn campaign_real(&mut self) {
        let id = self.id();
        self.role = Role::Candidate;
        self.hard.term += 1;
        self.hard.vote = Some(id);
        self.hard_dirty = true;
        self.counters.elections += 1;
        self.votes.clear();
        self.votes.insert(id, true);
        self.reset_election_timeout();
        if self.tally() {
            self.become_leader();
            return;
        }
        let term = self.hard.term;
        let (last_index, last_term) = (self.log.last_index(), self.log.last_term());
        for voter in self.membership.voters.clone() {
            if voter != id {
                self.send(
                    voter,
                    Message::Vote {
                        term,
                        last_index,
                        last_term,
                        pre_vote: false,
                        transfer: false,
                    },
                );
            }
        }
    }

    fn become_leader(&mut self) {
        let id = self.id();
        self.role = Role::Leader;
        self.leader = Some(id);
        self.note_leader(id);
        self.votes.clear();
        self.heartbeat_elapsed = 0;
        self.election_elapsed = 0;
        self.transfer = None;
        self.leaving.clear();
        let next = self.log.last_index() + 1;
        self.progress = self
            .membership
            .voters
            .iter()
            .filter(|&&voter| voter != id)
            .map(|&voter| (voter, Progress::new(next)))
            .collect();
        // Voters removed by entries still in the log (a leader that handed
        // over before telling them): this leader tells them.
        self.leaving.clear();
        for entry in self.log.entries() {
            if let EntryKind::RemoveVoter(peer) = entry.kind {
                if peer != id && !self.membership.contains(peer) {
                    self.leaving.insert(peer, (entry.index, 0));
                    self.progress.insert(peer, Progress::new(next));
                }
            }
        }
        // Commit entries of earlier terms through one of our own.
        let entry = Entry {
            term: self.hard.term,
            index: next,
            kind: EntryKind::Noop,
        };
        self.log.push(entry);
        self.pending_membership_index = self.log.last_index();
        self.broadcast_append();
        self.maybe_commit();
    }

    // ----- proposals --------------------------------------------------------------

    pub fn propose(&mut self, data: Bytes) -> Result<Index, ProposeError> {
        self.propose_entry(EntryKind::Normal(data))
    }

    /// Whether a membership change this leader proposed has not committed
    /// yet (another one would be refused).
    pub fn membership_change_pending(&self) -> bool {
        self.role == Role::Leader && self.pending_membership_index > self.log.committed
    }

    /// Adds or removes one voter; one change at a time.
    pub fn propose_membership(&mut self, change: EntryKind) -> Result<Index, ProposeError> {
        assert!(matches!(
            change,
            EntryKind::AddVoter(_) | EntryKind::RemoveVoter(_)
        ));
        if self.role == Role::Leader && self.pending_membership_index > self.log.committed {
            return Err(ProposeError::MembershipChangePending);
        }
        let index = self.propose_entry(change)?;
        self.pending_membership_index = index;
        Ok(index)
    }

    fn propose_entry(&mut self, kind: EntryKind) -> Result<Index, ProposeError> {
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader,
            });
        }
        if self.transfer.is_some() {
            return Err(ProposeError::Transferring);
        }
        let index = self.log.last_index() + 1;
        let membership_change = matches!(kind, EntryKind::AddVoter(_) | EntryKind::RemoveVoter(_));
        let kind_removed = match kind {
            EntryKind::RemoveVoter(peer) => Some(peer),
            _ => None,
        };
        self.log.push(Entry {
            term: self.hard.term,
            index,
            kind,
        });
        if membership_change {
            self.recompute_membership();
            let id = self.id();
            for voter in self.membership.voters.clone() {
                if voter != id {
                    self.progress
                        .entry(voter)
                        .or_insert_with(|| Progress::new(index));
                }
            }
            let voters = self.membership.voters.clone();
            if let Some(peer) = kind_removed.filter(|peer| *peer != id) {
                if self.progress.contains_key(&peer) {
                    self.leaving.insert(peer, (index, 0));
                }
            }
            // A removed voter added back is a voter again.
            self.leaving.retain(|peer, _| !voters.contains(peer));
            let leaving = &self.leaving;
            self.progress
                .retain(|peer, _| voters.contains(peer) || leaving.contains_key(peer));
        }
        self.broadcast_append();
        self.maybe_commit();
        Ok(index)
    }

    /// Hands leadership to `target` once it is up to date.
    pub fn transfer_leadership(&mut self, target: NodeId) {
        if self.role != Role::Leader || target == self.id() || !self.membership.contains(target) {
            return;
        }
        self.transfer = Some((target, 0));
        self.election_elapsed = 0;
        self.maybe_finish_transfer(target);
    }

    fn maybe_finish_transfer(&mut self, target: NodeId) {
        let last = self.log.last_index();
        let caught_up = self
            .progress
            .get(&target)
            .is_some_and(|progress| progress.match_index == last);
        if caught_up {
            let term = self.hard.term;
            self.send(target, Message::TimeoutNow { term });
        } else {
            self.send_append(target);
        }
    }

    /// Starts a linearizable read; a [`ReadState`] with `context` follows
    /// once a quorum confirmed this node still leads.
    pub fn read_index(&mut self, context: u64) -> Result<(), ProposeError> {
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader,
            });
        }
        let internal = self.next_read_context;
        self.next_read_context += 1;
        let mut acks = BTreeSet::new();
        acks.insert(self.id());
        self.pending_reads.push(PendingRead {
            context,
            internal,
            index: self.log.committed,
            acks,
        });
        self.broadcast_heartbeat(internal);
        self.release_reads();
        Ok(())
    }

    // ----- messages -------------------------------------------------------------

    fn send(&mut self, to: NodeId, message: Message) {
        let envelope = Envelope {
            from: self.id(),
            to,
            message,
        };
        // Anything said in a term must follow the durable term and vote.
        if self.hard_dirty {
            self.persisted_messages.push(envelope);
        } else {
            self.messages.push(envelope);
        }
    }

    fn send_after_persist(&mut self, to: NodeId, message: Message) {
        self.persisted_messages.push(Envelope {
            from: self.id(),
            to,
            message,
        });
    }

    pub fn step(&mut self, envelope: Envelope) {
        let Envelope { from, to, message } = envelope;
        assert_eq!(to, self.id(), "message delivered to the wrong node");
        let term = message.term();
        // Leases: a follower that heard from a leader recently ignores
        // elections (unless the leader itself asked for one).
        if let Message::Vote {
            pre_vote, transfer, ..
        } = &message
        {
            let in_lease = self.config.check_quorum
                && self.leader.is_some()
                && self.election_elapsed < self.config.election_ticks
                && !*transfer;
            if in_lease && term > self.hard.term {
                return;
            }
            if *pre_vote {
                self.on_vote_request(from, &message);
                return;
            }
        }
        if let Message::VoteResponse {
            pre_vote: true,
            granted,
            ..
        } = &message
        {
            if !granted && term > self.hard.term {
                // Rejected by a node in a later term: learn that term, or a
                // pre-candidate behind it asks about a term that node never
                // grants while the node itself may lack the votes to win.
                self.become_follower(term, None);
            } else if self.role == Role::PreCandidate && term == self.hard.term + 1 {
                self.on_vote_response(from, &message);
            }
            return;
        }
        if term > self.hard.term {
            let leader = matches!(
                message,
                Message::Append { .. } | Message::InstallSnapshot { .. }
            )
            .then_some(from);
            self.become_follower(term, leader);
        } else if term < self.hard.term {
            // Tell a stale leader or candidate about the newer term.
            match message {
                Message::Append { .. } | Message::InstallSnapshot { .. } => {
                    let response = Message::AppendResponse {
                        term: self.hard.term,
                        success: false,
                        match_index: 0,
                        hint: self.log.last_index(),
                        read_context: 0,
                    };
                    self.send(from, response);
                }
                Message::Vote { .. } => {
                    let response = Message::VoteResponse {
                        term: self.hard.term,
                        granted: false,
                        pre_vote: false,
                    };
                    self.send(from, response);
                }
                _ => {}
            }
            return;
        }
        match message {
            Message::Vote { .. } => self.on_vote_request(from, &message),
            Message::VoteResponse { .. } => self.on_vote_response(from, &message),
            Message::Append {
                prev_index,
                prev_term,
                entries,
                commit,
                read_context,
                ..
            } => self.on_append(from, prev_index, prev_term, entries, commit, read_context),
            Message::AppendResponse {
                success,
                match_index,
                hint,
                read_context,
                ..
            } => self.on_append_response(from, success, match_index, hint, read_context),
            Message::InstallSnapshot {
                index,
                snapshot_term,
                membership,
                session,
                offset,
                last,
                chunk,
                ..
            } => {
                let chunk = ChunkMessage {
                    index,
                    snapshot_term,
                    membership,
                    session,
                    offset,
                    last,
                    chunk,
                };
                self.on_snapshot_chunk(from, chunk)
            }
            Message::SnapshotReceived {
                index,
                session,
                received,
                gap,
                ..
            } => self.on_snapshot_received(from, index, session, received, gap),
            Message::InstallSnapshotResponse { index, .. } => {
                self.on_snapshot_installed(from, index)
            }
            Message::TimeoutNow { .. } => {
                if self.role != Role::Leader {
                    self.campaign(true);
                }
            }
        }
    }

    fn on_vote_request(&mut self, from: NodeId, message: &Message) {
        let Message::Vote {
            term,
            last_index,
            last_term,
            pre_vote,
            ..
        } = *message
        else {
            unreachable!()
        };
        let up_to_date = self.log.is_up_to_date(last_index, last_term)
            || self.config.canary == Some(Canary::VoteWithoutLogCheck);
        let can_vote = if pre_vote {
            term > self.hard.term
        } else {
            self.hard.vote.is_none_or(|voted| voted == from)
        };
        let granted = can_vote && up_to_date && !self.is_damaged();
        if granted && !pre_vote {
            self.hard.vote = Some(from);
            self.hard_dirty = true;
            self.reset_election_timeout();
        }
        // A granted pre-vote answers in the term asked about; anything else
        // in ours (so a stale candidate learns it).
        let response_term = if pre_vote && granted {
            term
        } else {
            self.hard.term
        };
        let response = Message::VoteResponse {
            term: response_term,
            granted,
            pre_vote,
        };
        if pre_vote {
            self.send(from, response);
        } else {
            self.send_after_persist(from, response);
        }
    }

    fn on_vote_response(&mut self, from: NodeId, message: &Message) {
        let Message::VoteResponse {
            granted, pre_vote, ..
        } = *message
        else {
            unreachable!()
        };
        let expecting = if pre_vote {
            Role::PreCandidate
        } else {
            Role::Candidate
        };
        if self.role != expecting {
            return;
        }
        self.votes.insert(from, granted);
        if self.tally() {
            self.on_election_won(pre_vote);
        } else if self.tally_rejected() {
            self.become_follower(self.hard.term, None);
        }
    }

    fn on_append(
        &mut self,
        from: NodeId,
        prev_index: Index,
        prev_term: Term,
        entries: Vec<Entry>,
        commit: Index,
        read_context: u64,
    ) {
        if self.role != Role::Follower {
            self.become_follower(self.hard.term, Some(from));
        }
        self.leader = Some(from);
        self.note_leader(from);
        self.election_elapsed = 0;
        let had_membership_entries = entries.iter().any(|entry| {
            matches!(
                entry.kind,
                EntryKind::AddVoter(_) | EntryKind::RemoveVoter(_)
            )
        });
        let truncating = entries.iter().any(|entry| {
            self.log
                .term_at(entry.index)
                .is_some_and(|term| term != entry.term)
        });
        match self.log.try_append(prev_index, prev_term, &entries) {
            Some(match_index) => {
                if had_membership_entries || truncating {
                    self.recompute_membership();
                }
                let new_commit = commit.min(match_index);
                if new_commit > self.log.committed {
                    self.log.committed = new_commit;
                }
                self.clear_damage();
                let term = self.hard.term;
                self.send_after_persist(
                    from,
                    Message::AppendResponse {
                        term,
                        success: true,
                        match_index,
                        hint: 0,
                        read_context,
                    },
                );
            }
            None => {
                let hint = self.log.last_index().min(prev_index.saturating_sub(1));
                let term = self.hard.term;
                self.send(
                    from,
                    Message::AppendResponse {
                        term,
                        success: false,
                        match_index: 0,
                        hint,
                        read_context,
                    },
                );
            }
        }
    }

    fn on_append_response(
        &mut self,
        from: NodeId,
        success: bool,
        match_index: Index,
        hint: Index,
        read_context: u64,
    ) {
        if self.role != Role::Leader {
            return;
        }
        if read_context != 0 {
            self.ack_read(from, read_context);
        }
        let Some(progress) = self.progress.get_mut(&from) else {
            return;
        };
        progress.recent_active = true;
        progress.heard_tick = Some(self.ticks);
        if success {
            if match_index > progress.match_index {
                progress.match_index = match_index;
            }
            progress.next_index = progress.next_index.max(progress.match_index + 1);
            while let Some(last) = progress
                .inflight
                .front()
                .copied()
                .filter(|&last| last <= match_index)
            {
                progress.inflight.pop_front();
                progress.inflight_from = last + 1;
            }
            if progress.state == ProgressState::Probe {
                progress.state = ProgressState::Replicate;
                progress.inflight.clear();
            }
            progress.paused = false;
            self.maybe_commit();
            self.send_append(from);
            if let Some((target, _)) = self.transfer {
                if target == from {
                    self.maybe_finish_transfer(target);
                }
            }
        } else {
            // Go back to probing from where the follower says it is.
            if progress.state == ProgressState::Snapshot {
                return;
            }
            // A follower that lost entries it had acknowledged (a damaged
            // disk) answers below its match index: believe it, or the probe
            // would never go below the old match. Lowering a match index is
            // always safe: commit never goes back.
            progress.match_index = progress.match_index.min(hint);
            progress.state = ProgressState::Probe;
            progress.inflight.clear();
            progress.paused = false;
            progress.next_index = (hint + 1)
                .min(progress.next_index.saturating_sub(1))
                .max(progress.match_index + 1)
                .max(1);
            self.send_append(from);
        }
    }

    /// A chunk of the leader's snapshot: handed to the host if it continues
    /// the transfer being received, answered with what is held; the last
    /// one installs.
    fn on_snapshot_chunk(&mut self, from: NodeId, chunk: ChunkMessage) {
        self.leader = Some(from);
        self.note_leader(from);
        self.election_elapsed = 0;
        if self.role != Role::Follower {
            self.become_follower(self.hard.term, Some(from));
        }
        let term = self.hard.term;
        if chunk.index <= self.log.committed {
            self.incoming_snapshot = None;
            let index = self.log.committed;
            self.send(from, Message::InstallSnapshotResponse { term, index });
            return;
        }
        if self.log.term_at(chunk.index) == Some(chunk.snapshot_term) {
            // Our log already holds the snapshot's last entry (a snapshot sent
            // while we lagged, delivered late): keep the log, whose entries
            // after it we may have acknowledged already, and only commit.
            self.incoming_snapshot = None;
            self.log.committed = chunk.index;
            let index = chunk.index;
            self.send_after_persist(from, Message::InstallSnapshotResponse { term, index });
            return;
        }
        let (index, session) = (chunk.index, chunk.session);
        let continues = self.incoming_snapshot.as_ref().is_some_and(|incoming| {
            incoming.from == from
                && incoming.term == term
                && incoming.index == chunk.index
                && incoming.snapshot_term == chunk.snapshot_term
                && incoming.session == chunk.session
        });
        if !continues {
            if chunk.offset != 0 {
                // Mid-snapshot of one we do not hold: start it over.
                let received = 0;
                let gap = true;
                self.answer_chunk(from, index, session, received, gap);
                return;
            }
            self.incoming_snapshot = Some(IncomingSnapshot {
                from,
                term,
                index: chunk.index,
                snapshot_term: chunk.snapshot_term,
                membership: chunk.membership,
                session: chunk.session,
                received: 0,
            });
        }
        let incoming = self.incoming_snapshot.as_mut().expect("set above");
        if self.config.canary == Some(Canary::SnapshotChunkGap) && chunk.offset > incoming.received
        {
            // The host writes at the chunk's offset; the gap stays zeros.
            incoming.received = chunk.offset;
        }
        if chunk.offset != incoming.received {
            // A duplicate, or a chunk past a lost one.
            let gap = chunk.offset > incoming.received;
            let received = incoming.received;
            self.answer_chunk(from, index, session, received, gap);
            return;
        }
        let end = chunk.offset + chunk.chunk.len() as u64;
        incoming.received = end;
        self.snapshot_chunks.push(SnapshotChunk {
            index,
            session,
            offset: chunk.offset,
            last: chunk.last,
            data: chunk.chunk,
        });
        if !chunk.last {
            let received = end;
            let gap = false;
            self.answer_chunk(from, index, session, received, gap);
            return;
        }
        let incoming = self.incoming_snapshot.take().expect("set above");
        let snapshot = Snapshot {
            index: incoming.index,
            term: incoming.snapshot_term,
            membership: incoming.membership,
        };
        self.log.restore(snapshot.index, snapshot.term);
        // Writes handed out before this one may complete first, but the
        // snapshot's write then replaces the log they extended: their entries
        // must not count as durable (the same entries may be back in memory
        // by then, so the term check in `persisted_to` cannot tell).
        for info in &mut self.outstanding {
            info.last = None;
        }
        self.snapshot_membership = snapshot.membership.clone();
        self.recompute_membership();
        let index = snapshot.index;
        self.snapshot = Some(snapshot.clone());
        self.snapshot_to_install = Some(snapshot);
        self.send_after_persist(from, Message::InstallSnapshotResponse { term, index });
    }

    /// Tells the leader how much of its transfer `session` of the snapshot
    /// ending at `index` this follower holds (`gap`: the chunk it answers
    /// began past that).
    fn answer_chunk(
        &mut self,
        leader: NodeId,
        index: Index,
        session: u64,
        received: u64,
        gap: bool,
    ) {
        let term = self.hard.term;
        let answer = Message::SnapshotReceived {
            term,
            index,
            session,
            received,
            gap,
        };
        self.send(leader, answer);
    }

    /// The follower's answer to a chunk: send what the window allows next
    /// (from where it is, after a gap).
    fn on_snapshot_received(
        &mut self,
        from: NodeId,
        index: Index,
        session: u64,
        received: u64,
        gap: bool,
    ) {
        if self.role != Role::Leader {
            return;
        }
        let Some(progress) = self.progress.get_mut(&from) else {
            return;
        };
        progress.recent_active = true;
        progress.heard_tick = Some(self.ticks);
        if progress.state != ProgressState::Snapshot {
            return;
        }
        let Some(transfer) = progress
            .transfer
            .as_mut()
            .filter(|transfer| transfer.index == index && transfer.session == session)
        else {
            // About another session (or snapshot): nothing to resend from.
            return;
        };
        if gap {
            let stale = received < transfer.acknowledged && !transfer.after_stall;
            if stale || transfer.rewound_to == Some(received) {
                return;
            }
            if received < transfer.acknowledged {
                // The follower lost what it acknowledged (it restarted): the
                // chunks before `acknowledged` are gone here, and reading
                // them again may give other bytes: a new session.
                progress.transfer = None;
                self.send_snapshot_chunks(from);
                return;
            }
            transfer.after_stall = false;
            transfer.rewound_to = Some(received);
            transfer.acknowledge(received);
            transfer.sent = 0;
        } else {
            transfer.acknowledge(received);
        }
        self.send_snapshot_chunks(from);
    }

    /// Sends `peer` the chunks of the current snapshot its window allows,
    /// and asks the host for the next while fewer than the window wait.
    fn send_snapshot_chunks(&mut self, peer: NodeId) {
        let Some(snapshot) = self.snapshot.clone() else {
            return;
        };
        let chunk_bytes = self.config.max_snapshot_chunk_bytes.max(1);
        let window = self.config.max_inflight.max(1);
        let term = self.hard.term;
        let next_session = &mut self.next_session;
        let Some(progress) = self.progress.get_mut(&peer) else {
            return;
        };
        if progress.state != ProgressState::Snapshot {
            return;
        }
        if progress
            .transfer
            .as_ref()
            .is_none_or(|transfer| transfer.index != snapshot.index)
        {
            // A new transfer, or the state machine compacted again: send the
            // newer snapshot.
            progress.transfer = Some(SnapshotTransfer::new(snapshot.index, *next_session));
            *next_session += 1;
        }
        let transfer = progress.transfer.as_mut().expect("set above");
        let mut chunks = Vec::new();
        while transfer.sent < transfer.buffer.len() && transfer.sent < window {
            let chunk = &transfer.buffer[transfer.sent];
            chunks.push(Message::InstallSnapshot {
                term,
                index: snapshot.index,
                snapshot_term: snapshot.term,
                membership: snapshot.membership.clone(),
                session: transfer.session,
                offset: chunk.offset,
                last: chunk.last,
                chunk: chunk.data.clone(),
            });
            transfer.sent += 1;
        }
        if !transfer.finished && !transfer.reading && transfer.buffer.len() < window {
            transfer.reading = true;
            self.snapshot_reads.push(SnapshotRead {
                peer,
                index: snapshot.index,
                session: transfer.session,
                offset: transfer.produced,
                max_bytes: chunk_bytes,
            });
        }
        for chunk in chunks {
            self.send(peer, chunk);
        }
    }

    /// The host's answer to `read`: the snapshot's bytes from its offset
    /// (`last`: they end it). Ignored if that transfer is over or replaced.
    pub fn snapshot_chunk(&mut self, read: &SnapshotRead, data: Bytes, last: bool) {
        let SnapshotRead {
            peer,
            index,
            session,
            offset,
            ..
        } = *read;
        assert!(
            last || !data.is_empty(),
            "only a snapshot's last chunk may be empty"
        );
        assert!(
            data.len() <= self.config.max_snapshot_chunk_bytes.max(1),
            "a snapshot chunk of {} bytes",
            data.len()
        );
        if self.role != Role::Leader {
            return;
        }
        let Some(transfer) = self
            .progress
            .get_mut(&peer)
            .filter(|progress| progress.state == ProgressState::Snapshot)
            .and_then(|progress| progress.transfer.as_mut())
            .filter(|transfer| {
                transfer.index == index
                    && transfer.session == session
                    && transfer.reading
                    && transfer.produced == offset
            })
        else {
            return;
        };
        transfer.reading = false;
        transfer.produced += data.len() as u64;
        transfer.finished = last;
        transfer
            .buffer
            .push_back(BufferedChunk { offset, data, last });
        self.send_snapshot_chunks(peer);
    }

    /// The host cannot go on reading the transfer to `peer` (what it must
    /// remember behind its reader outgrew its bound): a new session starts
    /// from offset 0.
    pub fn restart_snapshot_transfer(&mut self, peer: NodeId) {
        if self.role != Role::Leader {
            return;
        }
        let Some(progress) = self
            .progress
            .get_mut(&peer)
            .filter(|progress| progress.state == ProgressState::Snapshot)
        else {
            return;
        };
        progress.transfer = None;
        self.send_snapshot_chunks(peer);
    }

    /// The snapshot transfer to `peer` in progress: its snapshot index and
    /// session (a host drops what it read for any other).
    pub fn snapshot_transfer(&self, peer: NodeId) -> Option<(Index, u64)> {
        if self.role != Role::Leader {
            return None;
        }
        self.progress
            .get(&peer)
            .filter(|progress| progress.state == ProgressState::Snapshot)
            .and_then(|progress| progress.transfer.as_ref())
            .map(|transfer| (transfer.index, transfer.session))
    }

    fn on_snapshot_installed(&mut self, from: NodeId, index: Index) {
        if self.role != Role::Leader {
            return;
        }
        let Some(progress) = self.progress.get_mut(&from) else {
            return;
        };
        progress.recent_active = true;
        progress.heard_tick = Some(self.ticks);
        if progress.state != ProgressState::Snapshot && index <= progress.match_index {
            // A late or repeated answer (every chunk still in flight to a
            // follower that has the snapshot answers again): acting on each
            // would restart probing once per answer, and probes that fall
            // back into snapshot state send a window of chunks each, a
            // loop that multiplied traffic (simulator seed 13924).
            return;
        }
        progress.match_index = progress.match_index.max(index);
        progress.next_index = progress.match_index + 1;
        progress.state = ProgressState::Probe;
        progress.paused = false;
        progress.transfer = None;
        self.maybe_commit();
        self.send_append(from);
    }

    // ----- replication ------------------------------------------------------------

    fn broadcast_append(&mut self) {
        for peer in self.progress.keys().copied().collect::<Vec<_>>() {
            self.send_append(peer);
        }
    }

    fn broadcast_heartbeat(&mut self, read_context: u64) {
        let term = self.hard.term;
        for (peer, progress) in self.progress.clone() {
            let prev_index = progress
                .match_index
                .max(self.log.snapshot_index())
                .min(self.log.last_index());
            let Some(prev_term) = self.log.term_at(prev_index) else {
                continue;
            };
            let commit = self.log.committed.min(progress.match_index);
            self.send(
                peer,
                Message::Append {
                    term,
                    prev_index,
                    prev_term,
                    entries: Vec::new(),
                    commit,
                    read_context,
                },
            );
            if let Some(&(index, sent)) = self.leaving.get(&peer) {
                if self.log.committed >= index {
                    // Told of its removal (a commit past it), or given up on.
                    if commit >= index || sent + 1 >= LEAVING_HEARTBEATS_MAX {
                        self.progress.remove(&peer);
                        self.leaving.remove(&peer);
                        continue;
                    }
                    self.leaving.insert(peer, (index, sent + 1));
                }
            }
            if progress.state == ProgressState::Probe && progress.paused {
                // A lost probe is retried on the heartbeat.
                if let Some(progress) = self.progress.get_mut(&peer) {
                    progress.paused = false;
                }
                self.send_append(peer);
            }
        }
    }

    /// Sends what `peer` needs next, within flow control.
    fn send_append(&mut self, peer: NodeId) {
        let Some(progress) = self.progress.get(&peer).cloned() else {
            return;
        };
        match progress.state {
            ProgressState::Snapshot => return,
            ProgressState::Probe if progress.paused => return,
            ProgressState::Replicate if progress.inflight.len() >= self.config.max_inflight => {
                return
            }
            _ => {}
        }
        let term = self.hard.term;
        if progress.next_index <= self.log.snapshot_index() {
            if self.snapshot.is_none() {
                return;
            }
            let progress = self.progress.get_mut(&peer).expect("checked");
            progress.state = ProgressState::Snapshot;
            progress.transfer = None;
            self.send_snapshot_chunks(peer);
            return;
        }
        let prev_index = progress.next_index - 1;
        let prev_term = self
            .log
            .term_at(prev_index)
            .expect("prev is in the log or the snapshot");
        let entries = if progress.next_index <= self.log.last_index() {
            self.log.slice(
                progress.next_index,
                self.config.max_append_entries,
                self.config.max_append_bytes,
            )
        } else {
            Vec::new()
        };
        if entries.is_empty() && progress.state == ProgressState::Replicate {
            return;
        }
        let last = entries.last().map(|entry| entry.index);
        let commit = self.log.committed;
        self.send(
            peer,
            Message::Append {
                term,
                prev_index,
                prev_term,
                entries,
                commit,
                read_context: 0,
            },
        );
        let progress = self.progress.get_mut(&peer).expect("checked");
        match progress.state {
            ProgressState::Replicate => {
                if let Some(last) = last {
                    if progress.inflight.is_empty() {
                        progress.inflight_from = prev_index + 1;
                    }
                    progress.next_index = last + 1;
                    progress.inflight.push_back(last);
                }
            }
            ProgressState::Probe => progress.paused = true,
            ProgressState::Snapshot => {}
        }
    }

    /// Commits the highest index a quorum has durably, if it is of this term.
    fn maybe_commit(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        let id = self.id();
        let mut matched: Vec<Index> = self
            .membership
            .voters
            .iter()
            .map(|voter| {
                if *voter == id {
                    if self.config.canary == Some(Canary::CommitBeforeDurable) {
                        self.log.last_index()
                    } else {
                        self.log.persisted
                    }
                } else {
                    self.progress.get(voter).map_or(0, |p| p.match_index)
                }
            })
            .collect();
        if matched.is_empty() {
            return;
        }
        matched.sort_unstable_by(|a, b| b.cmp(a));
        let candidate = matched[self.membership.quorum() - 1];
        if candidate > self.log.committed && self.log.term_at(candidate) == Some(self.hard.term) {
            self.log.committed = candidate;
            self.release_reads();
            // A leader that removed itself steps down once that is committed.
            if !self.membership.contains(id) && self.pending_membership_index <= self.log.committed
            {
                self.become_follower(self.hard.term, None);
            }
        }
    }

    fn recompute_membership(&mut self) {
        let mut membership = self.snapshot_membership.clone();
        let mut last = 0;
        for entry in self.log.entries() {
            if matches!(
                entry.kind,
                EntryKind::AddVoter(_) | EntryKind::RemoveVoter(_)
            ) {
                membership.apply(&entry.kind);
                last = entry.index;
            }
        }
        self.membership = membership;
        self.membership_index = last;
        self.pending_membership_index = self.pending_membership_index.max(last);
    }

    // ----- reads ----------------------------------------------------------------

    fn ack_read(&mut self, from: NodeId, internal: u64) {
        // A confirmation of a later round confirms every earlier one too.
        for read in &mut self.pending_reads {
            if read.internal <= internal {
                read.acks.insert(from);
            }
        }
        self.release_reads();
    }

    fn release_reads(&mut self) {
        // Safe only once this leader committed an entry of its own term:
        // before that its commit index may lag what is really committed.
        if self.role != Role::Leader || self.log.term_at(self.log.committed) != Some(self.hard.term)
        {
            return;
        }
        let quorum = self.membership.quorum();
        let confirmed = self
            .pending_reads
            .iter()
            .take_while(|read| {
                read.acks
                    .iter()
                    .filter(|node| self.membership.contains(**node))
                    .count()
                    >= quorum
            })
            .count();
        let committed = self.log.committed;
        for read in self.pending_reads.drain(..confirmed) {
            self.read_states.push(ReadState {
                context: read.context,
                index: read.index.max(committed),
            });
        }
    }

    // ----- ready / advance ----------------------------------------------------------

    pub fn has_ready(&self) -> bool {
        self.hard_dirty
            || self.log.has_unpersisted()
            || !self.messages.is_empty()
            || !self.persisted_messages.is_empty()
            || self.snapshot_to_install.is_some()
            || !self.snapshot_chunks.is_empty()
            || !self.snapshot_reads.is_empty()
            || self.log.has_committed_to_apply()
            || !self.read_states.is_empty()
    }

    pub fn ready(&mut self) -> Ready {
        let number = self.next_ready;
        self.next_ready += 1;
        let hard_state = if self.hard_dirty {
            self.hard_dirty = false;
            Some(self.hard)
        } else {
            None
        };
        let (truncate_from, entries) = self.log.take_unpersisted();
        let snapshot = self.snapshot_to_install.take();
        let committed = self.log.take_committed(self.config.max_apply_entries);
        let persisted_messages = std::mem::take(&mut self.persisted_messages);
        self.outstanding.push_back(ReadyInfo {
            number,
            last: entries.last().map(|entry| (entry.index, entry.term)),
            snapshot: snapshot
                .as_ref()
                .map(|snapshot| (snapshot.index, snapshot.term)),
            persisted_messages: !persisted_messages.is_empty(),
        });
        Ready {
            number,
            hard_state,
            truncate_from,
            entries,
            snapshot,
            snapshot_chunks: std::mem::take(&mut self.snapshot_chunks),
            snapshot_reads: std::mem::take(&mut self.snapshot_reads),
            messages: std::mem::take(&mut self.messages),
            persisted_messages,
            committed,
            read_states: std::mem::take(&mut self.read_states),
        }
    }

    /// The caller made ready `number` (and all before it) durable.
    pub fn advance(&mut self, number: u64) {
        while let Some(info) = self.outstanding.front() {
            if info.number > number {
                break;
            }
            let info = self.outstanding.pop_front().expect("front exists");
            let _ = info.persisted_messages;
            if let Some((index, _term)) = info.snapshot {
                self.log.persisted = self.log.persisted.max(index);
            }
            if let Some((index, term)) = info.last {
                self.log.persisted_to(index, term);
            }
        }
        self.clear_damage();
        self.maybe_commit();
    }

    /// The state machine took a snapshot at `snapshot.index` (≤ applied):
    /// the log before it is dropped, and lagging followers get the snapshot
    /// (its bytes read from the host when a transfer needs them).
    pub fn compact(&mut self, snapshot: Snapshot) {
        assert!(snapshot.index <= self.log.applied);
        self.log.compact(snapshot.index, snapshot.term);
        self.snapshot_membership = snapshot.membership.clone();
        self.snapshot = Some(snapshot);
        // Transfers of an older snapshot switch to this one now: the host
        // need not answer reads of a snapshot it replaced.
        let switching: Vec<NodeId> = self
            .progress
            .iter()
            .filter(|(_, progress)| progress.state == ProgressState::Snapshot)
            .map(|(peer, _)| *peer)
            .collect();
        for peer in switching {
            self.send_snapshot_chunks(peer);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Regression tests for bugs the simulator found (see `crate::sim`).

    use super::*;

    fn entry(index: Index, term: Term, kind: EntryKind) -> Entry {
        Entry { index, term, kind }
    }

    fn noops(range: std::ops::RangeInclusive<Index>, term: Term) -> Vec<Entry> {
        range
            .map(|index| entry(index, term, EntryKind::Noop))
            .collect()
    }

    #[test]
    fn a_single_voter_campaigns_now_and_leads_at_once() {
        let mut node = node(
            1,
            |_| {},
            Restore {
                membership: Membership::new(vec![1]),
                ..Restore::default()
            },
        );
        node.campaign_now();
        assert_eq!(node.role(), Role::Leader);
        assert_eq!(node.term(), 1);
        let ready = node.ready();
        assert_eq!(ready.hard_state.map(|hard| hard.term), Some(1));
        assert_eq!(ready.entries.len(), 1, "the leader's noop");
        assert!(
            ready.committed.is_empty(),
            "nothing commits before it is durable"
        );
        node.advance(ready.number);
        let ready = node.ready();
        assert_eq!(
            ready.committed.len(),
            1,
            "durable on the only voter: committed"
        );
        node.campaign_now();
        assert_eq!(node.term(), 1, "a leader ignores campaign_now");
    }

    fn node(id: NodeId, config: impl FnOnce(&mut Config), restore: Restore) -> Node {
        let mut settings = Config::new(id);
        config(&mut settings);
        Node::new(settings, restore)
    }

    fn restore(term: Term, entries: Vec<Entry>) -> Restore {
        Restore {
            hard_state: HardState { term, vote: None },
            entries,
            membership: Membership::new(vec![1, 2, 3]),
            seed: 7,
            ..Restore::default()
        }
    }

    /// Persists every ready at once; returns everything sent.
    fn persist(node: &mut Node) -> Vec<Envelope> {
        let mut sent = Vec::new();
        while node.has_ready() {
            let ready = node.ready();
            sent.extend(ready.messages);
            sent.extend(ready.persisted_messages);
            node.advance(ready.number);
        }
        sent
    }

    fn deliver(node: &mut Node, from: NodeId, message: Message) {
        let to = node.id();
        node.step(Envelope { from, to, message });
    }

    /// Node 1 leading {1, 2, 3} in term 2 over `entries` of term 1 (no-op appended).
    fn leader(entries: Vec<Entry>) -> Node {
        let mut leader = node(
            1,
            |config| {
                config.pre_vote = false;
                config.check_quorum = false;
            },
            restore(1, entries),
        );
        elect(&mut leader);
        persist(&mut leader);
        leader
    }

    /// Node 1 campaigns on its own timeout and wins with node 2's vote.
    fn elect(leader: &mut Node) {
        while leader.role() != Role::Candidate {
            leader.tick();
        }
        persist(leader);
        let vote = Message::VoteResponse {
            term: leader.term(),
            granted: true,
            pre_vote: false,
        };
        deliver(leader, 2, vote);
        assert_eq!(leader.role(), Role::Leader);
    }

    fn appends_to(sent: &[Envelope], to: NodeId) -> Vec<(Index, usize)> {
        sent.iter()
            .filter(|envelope| envelope.to == to)
            .filter_map(|envelope| match &envelope.message {
                Message::Append {
                    prev_index,
                    entries,
                    ..
                } => Some((*prev_index, entries.len())),
                _ => None,
            })
            .collect()
    }

    fn acknowledge(leader: &mut Node, from: NodeId, match_index: Index) {
        let response = Message::AppendResponse {
            term: leader.term(),
            success: true,
            match_index,
            hint: 0,
            read_context: 0,
        };
        deliver(leader, from, response);
    }

    #[test]
    fn counters_count_elections_and_leaders_and_peers_are_timed() {
        let mut leader = leader(Vec::new());
        assert_eq!(
            leader.counters(),
            NodeCounters {
                elections: 1,
                leader_changes: 1
            }
        );
        assert_eq!(leader.peer_status()[0].silent_ticks, None, "not heard yet");
        acknowledge(&mut leader, 2, 1);
        leader.tick();
        leader.tick();
        let status = leader.peer_status();
        assert_eq!(status[0].id, 2);
        assert_eq!(status[0].match_index, 1);
        assert_eq!(status[0].silent_ticks, Some(2));
        assert_eq!(status[1].silent_ticks, None, "node 3 never answered");
        assert_eq!(leader.leader_silent_ticks(), None, "a leader has no leader");

        // Node 3 wins a later term: one more leader seen, heartbeats from
        // it are not counted again.
        let term = leader.term() + 1;
        let heartbeat = Message::Append {
            term,
            prev_index: 0,
            prev_term: 0,
            entries: Vec::new(),
            commit: 0,
            read_context: 0,
        };
        deliver(&mut leader, 3, heartbeat.clone());
        deliver(&mut leader, 3, heartbeat);
        assert_eq!(leader.counters().leader_changes, 2);
        assert_eq!(leader.counters().elections, 1);
        assert!(
            leader.peer_status().is_empty(),
            "a follower has no progress"
        );
        leader.tick();
        assert_eq!(leader.leader_silent_ticks(), Some(1));
    }

    #[test]
    fn a_stepdown_hands_over_only_to_a_voter_heard_within_three_heartbeats() {
        let mut leader = leader(Vec::new());
        assert_eq!(leader.transfer_candidate(), None, "nobody heard yet");
        assert_eq!(leader.most_caught_up_peer(), None, "nobody heard yet");
        // Node 2 has more of the log but goes silent; node 3 keeps
        // answering.
        acknowledge(&mut leader, 2, 1);
        acknowledge(&mut leader, 3, 0);
        assert_eq!(leader.most_caught_up_peer(), Some(2));
        let heartbeat_ticks = leader.config.heartbeat_ticks;
        for _ in 0..3 * heartbeat_ticks + 1 {
            leader.tick();
            acknowledge(&mut leader, 3, 0);
        }
        assert_eq!(
            leader.most_caught_up_peer(),
            Some(3),
            "node 2 was silent for more than three heartbeats"
        );
        for _ in 0..20 {
            assert_eq!(
                leader.transfer_candidate(),
                Some(3),
                "node 2 was silent for more than three heartbeats"
            );
        }
    }

    /// A plain stepdown picks among the current voters at random: over
    /// 64 stepdowns from one leader of five voters, every current one is
    /// chosen (each is missed with probability (3/4)^64 < 1e-7, and the
    /// generator is seeded, so the test is deterministic), and never a
    /// voter missing a committed entry while a current one exists.
    #[test]
    fn a_stepdown_reaches_every_current_voter_and_never_one_behind() {
        let mut leader = node(
            1,
            |config| {
                config.pre_vote = false;
                config.check_quorum = false;
            },
            Restore {
                membership: Membership::new(vec![1, 2, 3, 4, 5]),
                ..restore(1, Vec::new())
            },
        );
        while leader.role() != Role::Candidate {
            leader.tick();
        }
        persist(&mut leader);
        for voter in [2, 3] {
            let vote = Message::VoteResponse {
                term: leader.term(),
                granted: true,
                pre_vote: false,
            };
            deliver(&mut leader, voter, vote);
        }
        assert_eq!(leader.role(), Role::Leader);
        persist(&mut leader);
        leader.propose(Bytes::from_static(b"x")).unwrap();
        persist(&mut leader);
        let last = leader.last_index();
        for peer in [2, 3, 4] {
            acknowledge(&mut leader, peer, last);
        }
        // Node 5 answers but misses the committed entry.
        acknowledge(&mut leader, 5, last - 1);
        assert_eq!(leader.commit_index(), last);
        let mut chosen = BTreeSet::new();
        for _ in 0..64 {
            let candidate = leader.transfer_candidate().expect("current voters");
            assert_ne!(candidate, 5, "node 5 is behind");
            chosen.insert(candidate);
        }
        assert_eq!(chosen, BTreeSet::from([2, 3, 4]));
        // Nobody current but node 5: the most caught up heard recently.
        let heartbeat_ticks = leader.config.heartbeat_ticks;
        for _ in 0..3 * heartbeat_ticks + 1 {
            leader.tick();
            acknowledge(&mut leader, 5, last - 1);
        }
        assert_eq!(leader.transfer_candidate(), Some(5));
    }

    #[test]
    fn a_stepdown_prefers_a_named_voter_only_while_it_is_heard() {
        let mut leader = leader(Vec::new());
        assert_eq!(leader.transfer_candidate_preferring(3), None);
        acknowledge(&mut leader, 2, 1);
        acknowledge(&mut leader, 3, 0);
        // Behind node 2, still preferred.
        assert_eq!(leader.transfer_candidate_preferring(3), Some(3));
        assert_eq!(leader.transfer_candidate_preferring(2), Some(2));
        // Not a voter: the usual candidate.
        assert_eq!(leader.transfer_candidate_preferring(9), Some(2));
        let heartbeat_ticks = leader.config.heartbeat_ticks;
        for _ in 0..3 * heartbeat_ticks + 1 {
            leader.tick();
            acknowledge(&mut leader, 2, 1);
        }
        assert_eq!(
            leader.transfer_candidate_preferring(3),
            Some(2),
            "node 3 was silent for more than three heartbeats"
        );
    }

    #[test]
    fn appends_lost_in_the_pipeline_are_resent_after_an_election_timeout() {
        let mut leader = leader(Vec::new());
        acknowledge(&mut leader, 2, 1);
        persist(&mut leader);
        leader.propose(Bytes::from_static(b"x")).unwrap();
        let lost = persist(&mut leader);
        assert_eq!(
            appends_to(&lost, 2),
            vec![(1, 1)],
            "pipelined append (lost)"
        );
        let mut resent = Vec::new();
        for _ in 0..2 * leader.config.election_ticks {
            leader.tick();
            resent.extend(persist(&mut leader));
        }
        assert!(
            appends_to(&resent, 2).contains(&(1, 1)),
            "entry 2 resent: {:?}",
            appends_to(&resent, 2)
        );
    }

    #[test]
    fn a_follower_that_lost_acknowledged_entries_is_probed_below_its_old_match() {
        let mut leader = leader(noops(1..=5, 1));
        acknowledge(&mut leader, 2, 6);
        persist(&mut leader);
        // Node 2's disk lost entries 4..=6: it rejects, saying its log ends at 3.
        let rejection = Message::AppendResponse {
            term: leader.term(),
            success: false,
            match_index: 0,
            hint: 3,
            read_context: 0,
        };
        deliver(&mut leader, 2, rejection);
        let sent = persist(&mut leader);
        assert_eq!(appends_to(&sent, 2), vec![(3, 3)]);
    }

    #[test]
    fn a_rejected_pre_vote_teaches_the_later_term() {
        let mut candidate = node(3, |_| {}, restore(1, noops(1..=3, 1)));
        while candidate.role() != Role::PreCandidate {
            candidate.tick();
        }
        let rejection = Message::VoteResponse {
            term: 2,
            granted: false,
            pre_vote: true,
        };
        deliver(&mut candidate, 1, rejection);
        assert_eq!(candidate.term(), 2, "asks about term 3 next time");
        assert_eq!(candidate.role(), Role::Follower);
    }

    #[test]
    fn a_node_outside_its_uncommitted_configuration_still_campaigns() {
        let entries = vec![
            entry(1, 1, EntryKind::Noop),
            entry(2, 1, EntryKind::RemoveVoter(3)),
        ];
        let mut removed = node(3, |_| {}, restore(1, entries));
        assert!(!removed.membership().contains(3));
        let mut sent = Vec::new();
        for _ in 0..2 * removed.config.election_ticks {
            removed.tick();
            sent.extend(persist(&mut removed));
        }
        assert_eq!(removed.role(), Role::PreCandidate);
        assert!(sent
            .iter()
            .any(|envelope| matches!(envelope.message, Message::Vote { pre_vote: true, .. })));
        // Once the removal is committed (here: in the snapshot) it stays quiet.
        let snapshot = Snapshot {
            index: 2,
            term: 1,
            membership: Membership::new(vec![1, 2]),
        };
        let committed = Restore {
            snapshot: Some(snapshot),
            ..restore(1, Vec::new())
        };
        let mut quiet = node(3, |_| {}, committed);
        for _ in 0..2 * quiet.config.election_ticks {
            quiet.tick();
            assert!(persist(&mut quiet).is_empty());
        }
        assert_eq!(quiet.role(), Role::Follower);
    }

    /// A node that lost its entries but kept its hard state (term 5, a
    /// journal lost) starts in term 6 without a vote, so term 5's leader
    /// steps down on hearing it; it grants no vote, even to an up-to-date
    /// candidate, until it holds a durable entry of a term after 5.
    #[test]
    fn a_node_that_lost_its_entries_votes_only_after_an_entry_of_a_later_term() {
        let vote = |term: Term, last_index: Index, last_term: Term| Message::Vote {
            term,
            last_index,
            last_term,
            pre_vote: false,
            transfer: false,
        };
        let granted = |sent: &[Envelope]| {
            sent.iter().any(|envelope| {
                matches!(
                    envelope.message,
                    Message::VoteResponse { granted: true, .. }
                )
            })
        };
        // No pre-votes nor leases: each vote request is judged alone.
        let mut damaged = node(
            3,
            |config| {
                config.pre_vote = false;
                config.check_quorum = false;
            },
            Restore {
                hard_state: HardState {
                    term: 5,
                    vote: Some(1),
                },
                entries_lost_through_term: 5,
                ..restore(5, Vec::new())
            },
        );
        assert!(damaged.is_damaged());
        assert_eq!(
            damaged.hard_state(),
            HardState {
                term: 6,
                vote: None
            }
        );
        let ready = damaged.ready();
        assert_eq!(
            ready.hard_state,
            Some(HardState {
                term: 6,
                vote: None
            })
        );
        damaged.advance(ready.number);
        // Term 5's leader hears of term 6.
        deliver(
            &mut damaged,
            1,
            Message::Append {
                term: 5,
                prev_index: 0,
                prev_term: 0,
                commit: 0,
                read_context: 0,
                entries: Vec::new(),
            },
        );
        let sent = persist(&mut damaged);
        assert!(sent.iter().any(|envelope| matches!(
            envelope.message,
            Message::AppendResponse {
                term: 6,
                success: false,
                ..
            }
        )));
        // Asked for a vote with a log far ahead of its own: refused.
        deliver(&mut damaged, 2, vote(7, 100, 5));
        assert!(!granted(&persist(&mut damaged)));
        // Term 8's leader (elected without it) appends its first entry.
        deliver(
            &mut damaged,
            1,
            Message::Append {
                term: 8,
                prev_index: 0,
                prev_term: 0,
                commit: 0,
                read_context: 0,
                entries: vec![Entry {
                    term: 8,
                    index: 1,
                    kind: EntryKind::Noop,
                }],
            },
        );
        persist(&mut damaged);
        assert!(!damaged.is_damaged());
        deliver(&mut damaged, 2, vote(9, 1, 8));
        assert!(granted(&persist(&mut damaged)));
    }

    /// Found by the cluster simulator: a node outside its configuration
    /// (added by an entry it has not received) heard from a leader once,
    /// then reset its timeout at every expiry without forgetting that
    /// leader, so its lease never ended and it ignored the real votes of
    /// the candidates that needed it (a group of four with a damaged
    /// voter stayed leaderless after every fault healed).
    #[test]
    fn a_node_that_may_not_campaign_still_ends_its_lease() {
        let mut outsider = node(
            4,
            |_| {},
            Restore {
                hard_state: HardState {
                    term: 1,
                    vote: None,
                },
                membership: Membership::new(vec![1, 2, 3]),
                seed: 7,
                ..Restore::default()
            },
        );
        let heartbeat = Message::Append {
            term: 1,
            prev_index: 0,
            prev_term: 0,
            commit: 0,
            read_context: 0,
            entries: Vec::new(),
        };
        deliver(&mut outsider, 1, heartbeat);
        assert_eq!(outsider.leader(), Some(1));
        let _ = persist(&mut outsider);
        for _ in 0..2 * outsider.config.election_ticks {
            outsider.tick();
            assert!(persist(&mut outsider)
                .iter()
                .all(|envelope| !matches!(envelope.message, Message::Vote { .. })));
        }
        // Timed out twice without hearing from the leader: a vote of a
        // later term is heard and granted at any point of its timer now.
        let vote = Message::Vote {
            term: 2,
            last_index: 5,
            last_term: 1,
            pre_vote: false,
            transfer: false,
        };
        deliver(&mut outsider, 2, vote);
        assert_eq!(outsider.term(), 2);
        assert!(persist(&mut outsider).iter().any(|envelope| matches!(
            envelope.message,
            Message::VoteResponse { granted: true, .. }
        )));
    }

    /// Found by the Raft simulator (seed 109608): a follower whose match
    /// index the leader did not know (0) and whose appends were lost was
    /// probed again from entry 1 after the stall, and then replicated one
    /// entry per round trip although it held most of the log. The probe
    /// now starts where replication had got to.
    #[test]
    fn a_stalled_follower_is_probed_where_replication_had_got_to() {
        let one_entry = |config: &mut Config| {
            config.pre_vote = false;
            config.check_quorum = false;
            config.max_append_entries = 1;
        };
        let mut leader = node(1, one_entry, restore(1, noops(1..=50, 1)));
        elect(&mut leader);
        let _ = persist(&mut leader);
        {
            let progress = leader.progress.get_mut(&2).expect("a peer");
            progress.state = ProgressState::Replicate;
            progress.match_index = 0;
            // The pipeline started at 41 (a rejection said the follower
            // holds 40); both appends were lost.
            progress.next_index = 43;
            progress.inflight = VecDeque::from([41, 42]);
            progress.inflight_from = 41;
            progress.checked_match = 0;
        }
        let mut probes = Vec::new();
        for _ in 0..3 * leader.config.election_ticks {
            leader.tick();
            for envelope in persist(&mut leader) {
                if let (
                    2,
                    Message::Append {
                        prev_index,
                        entries,
                        ..
                    },
                ) = (envelope.to, &envelope.message)
                {
                    if !entries.is_empty() {
                        probes.push(*prev_index);
                    }
                }
            }
        }
        assert!(!probes.is_empty(), "the stalled follower is probed again");
        assert!(
            probes.iter().all(|prev| *prev >= 40),
            "probed where replication had got to, not from the start: {probes:?}"
        );
    }

    /// An elected leader whose log starts with a snapshot at 5 and a new
    /// follower, sending chunks of `chunk_bytes`, `inflight` at a time.
    fn chunked_pair(chunk_bytes: usize, inflight: usize) -> (Node, Node) {
        let chunked = |config: &mut Config| {
            config.pre_vote = false;
            config.check_quorum = false;
            config.max_snapshot_chunk_bytes = chunk_bytes;
            config.max_inflight = inflight;
        };
        let snapshot = Snapshot {
            index: 5,
            term: 1,
            membership: Membership::new(vec![1, 2, 3]),
        };
        let mut leader = node(
            1,
            chunked,
            Restore {
                snapshot: Some(snapshot),
                ..restore(1, Vec::new())
            },
        );
        elect(&mut leader);
        (leader, node(2, chunked, restore(1, Vec::new())))
    }

    /// The leader's host: answers every read of `node`'s ready from
    /// `data` (what its snapshot holds), and counts them.
    fn answer_reads(node: &mut Node, reads: Vec<SnapshotRead>, data: &Bytes, count: &mut u64) {
        for read in reads {
            *count += 1;
            let end = (read.offset as usize + read.max_bytes).min(data.len());
            let chunk = data.slice(read.offset as usize..end);
            let last = end == data.len();
            node.snapshot_chunk(&read, chunk, last);
        }
    }

    /// Chunks lost, reordered and duplicated on the way still assemble into
    /// the leader's snapshot, byte for byte, within the window; the leader
    /// reads each chunk from its host once and holds at most the window.
    #[test]
    fn a_snapshot_crosses_in_chunks_despite_loss_reordering_and_duplicates() {
        let data = Bytes::from((0u8..100).collect::<Vec<_>>());
        let (mut leader, mut follower) = chunked_pair(7, 3);

        let mut installed = None;
        let mut staged = Vec::new();
        let mut chunks_seen = 0u64;
        let mut reads = 0u64;
        let mut largest_window = 0;
        let mut largest_buffer = 0;
        for _round in 0..2_000 {
            let mut to_follower = Vec::new();
            while leader.has_ready() {
                let ready = leader.ready();
                answer_reads(&mut leader, ready.snapshot_reads, &data, &mut reads);
                to_follower.extend(ready.messages);
                to_follower.extend(ready.persisted_messages);
                leader.advance(ready.number);
            }
            let mut to_follower: Vec<Message> = to_follower
                .into_iter()
                .filter(|envelope| envelope.to == 2)
                .map(|envelope| envelope.message)
                .collect();
            if let Some(transfer) = leader
                .progress
                .get(&2)
                .and_then(|progress| progress.transfer.as_ref())
            {
                largest_window = largest_window.max(transfer.sent);
                largest_buffer = largest_buffer.max(transfer.buffer.len());
            }
            // Lose every fourth chunk, duplicate every fifth, reverse each batch.
            let mut perturbed = Vec::new();
            for message in to_follower.drain(..) {
                if let Message::InstallSnapshot { .. } = message {
                    chunks_seen += 1;
                    if chunks_seen % 4 == 0 {
                        continue;
                    }
                    if chunks_seen % 5 == 0 {
                        perturbed.push(message.clone());
                    }
                }
                perturbed.push(message);
            }
            perturbed.reverse();
            for message in perturbed {
                deliver(&mut follower, 1, message);
            }
            let mut to_leader = Vec::new();
            while follower.has_ready() {
                let ready = follower.ready();
                for chunk in ready.snapshot_chunks {
                    assert_eq!(chunk.offset as usize, staged.len(), "chunks come in order");
                    staged.extend_from_slice(&chunk.data);
                }
                if let Some(snapshot) = ready.snapshot {
                    installed = Some(snapshot);
                }
                to_leader.extend(ready.messages);
                to_leader.extend(ready.persisted_messages);
                follower.advance(ready.number);
            }
            for envelope in to_leader {
                leader.step(envelope);
            }
            if installed.is_some() && follower.commit_index() >= 6 {
                break;
            }
            leader.tick();
        }
        let installed = installed.expect("the snapshot arrived");
        assert_eq!(installed.index, 5);
        assert_eq!(staged, data, "assembled byte for byte");
        assert_eq!(follower.commit_index(), 6, "and the log goes on after it");
        assert_eq!(reads, 100 / 7 + 1, "each chunk read from the host once");
        assert!(largest_window > 1, "several chunks in flight");
        assert!(largest_window <= 3, "at most max_inflight chunks in flight");
        assert!(largest_buffer <= 3, "the leader holds at most the window");
        assert!(chunks_seen > 100 / 7, "losses were resent");
        assert!(
            chunks_seen < 6 * 100 / 7,
            "{chunks_seen} chunks for 15: gap answers must not multiply resends"
        );
    }

    /// A follower that restarts mid-transfer lost what it acknowledged: the
    /// leader cannot resend that (it kept only the window, and reading the
    /// host again may give other bytes), so it starts a new session from
    /// offset 0 once the transfer stalled; chunks of the old session still
    /// in flight are refused by the follower.
    #[test]
    fn a_follower_that_restarts_mid_transfer_gets_a_new_session() {
        let (mut leader, mut follower) = chunked_pair(4, 2);
        let data = Bytes::from(vec![9u8; 40]);
        let mut reads = Vec::new();
        let pump = |leader: &mut Node, reads: &mut Vec<SnapshotRead>| -> Vec<Message> {
            let mut out = Vec::new();
            while leader.has_ready() {
                let ready = leader.ready();
                reads.extend(ready.snapshot_reads.iter().cloned());
                let mut count = 0;
                answer_reads(leader, ready.snapshot_reads, &data, &mut count);
                out.extend(
                    ready
                        .messages
                        .into_iter()
                        .filter(|envelope| envelope.to == 2)
                        .map(|envelope| envelope.message),
                );
                leader.advance(ready.number);
            }
            out
        };
        // The probe finds the follower behind the snapshot; the first two
        // chunks arrive and are acknowledged; the rest of the window is
        // lost with the follower's restart.
        let mut delivered = 0;
        let mut outgoing = pump(&mut leader, &mut reads);
        while delivered < 2 {
            assert!(!outgoing.is_empty(), "the transfer goes on");
            for message in outgoing.drain(..) {
                if matches!(message, Message::InstallSnapshot { .. }) {
                    if delivered == 2 {
                        continue;
                    }
                    delivered += 1;
                }
                deliver(&mut follower, 1, message);
            }
            for envelope in persist(&mut follower) {
                leader.step(envelope);
            }
            outgoing = pump(&mut leader, &mut reads);
        }
        let in_flight = outgoing;
        assert!(in_flight
            .iter()
            .all(|message| matches!(message, Message::InstallSnapshot { session: 1, .. })));
        let mut restarted = chunked_pair(4, 2).1;
        // The old session's next chunk: refused, answered as a gap from 0.
        let old = in_flight
            .into_iter()
            .find(
                |message| matches!(message, Message::InstallSnapshot { offset, .. } if *offset > 0),
            )
            .expect("a later chunk");
        deliver(&mut restarted, 1, old);
        let answers = persist(&mut restarted);
        assert!(answers.iter().any(|envelope| matches!(
            envelope.message,
            Message::SnapshotReceived {
                session: 1,
                received: 0,
                gap: true,
                ..
            }
        )));
        // Below what was acknowledged: stale until the transfer stalls.
        for envelope in answers.clone() {
            leader.step(envelope);
        }
        assert!(pump(&mut leader, &mut reads).is_empty());
        for _ in 0..3 * leader.config.election_ticks {
            leader.tick();
        }
        let _ = pump(&mut leader, &mut reads);
        for envelope in answers {
            leader.step(envelope);
        }
        let resumed = pump(&mut leader, &mut reads);
        assert!(
            resumed.iter().any(|message| matches!(
                message,
                Message::InstallSnapshot {
                    session: 2,
                    offset: 0,
                    ..
                }
            )),
            "a new session from offset 0: {resumed:?}"
        );
        assert!(reads
            .iter()
            .any(|read| read.session == 2 && read.offset == 0));
        // And it completes.
        let mut pending = resumed;
        let mut installed = false;
        for _ in 0..100 {
            for message in pending.drain(..) {
                deliver(&mut restarted, 1, message);
            }
            let mut answers = Vec::new();
            while restarted.has_ready() {
                let ready = restarted.ready();
                installed |= ready.snapshot.is_some();
                answers.extend(ready.messages);
                answers.extend(ready.persisted_messages);
                restarted.advance(ready.number);
            }
            for envelope in answers {
                leader.step(envelope);
            }
            pending = pump(&mut leader, &mut reads);
            if installed {
                break;
            }
        }
        assert!(installed);
    }

    fn install(term: Term, index: Index, snapshot_term: Term) -> Message {
        Message::InstallSnapshot {
            term,
            index,
            snapshot_term,
            membership: Membership::new(vec![1, 2, 3]),
            session: 1,
            offset: 0,
            last: true,
            chunk: Bytes::new(),
        }
    }

    #[test]
    fn a_late_snapshot_keeps_the_entries_after_it() {
        let mut follower = node(2, |_| {}, restore(1, noops(1..=5, 1)));
        deliver(&mut follower, 1, install(1, 3, 1));
        assert_eq!(
            follower.last_index(),
            5,
            "entries 4..=5 may be acknowledged"
        );
        assert_eq!(follower.commit_index(), 3);
        let sent = persist(&mut follower);
        assert!(sent
            .iter()
            .any(|envelope| envelope.message
                == Message::InstallSnapshotResponse { term: 1, index: 3 }));
    }

    #[test]
    fn writes_before_a_snapshot_install_do_not_count_as_durable() {
        let mut follower = node(2, |_| {}, restore(1, Vec::new()));
        let append = |term, prev_index, prev_term, entries| Message::Append {
            term,
            prev_index,
            prev_term,
            entries,
            commit: 0,
            read_context: 0,
        };
        deliver(&mut follower, 1, append(1, 0, 0, noops(1..=3, 1)));
        let first = follower.ready();
        assert_eq!(first.entries.len(), 3);
        // A leader of term 3 replaces entry 3; one of term 4 (which has the
        // old entry 3 committed) sends a snapshot ending there.
        deliver(&mut follower, 3, append(3, 2, 1, noops(3..=3, 3)));
        let second = follower.ready();
        assert_eq!(second.truncate_from, Some(3));
        deliver(&mut follower, 1, install(4, 3, 1));
        let third = follower.ready();
        assert!(third.snapshot.is_some());
        // The first write completes; the later ones (the snapshot replaces
        // the log) have not: entry 3 is not durable yet.
        follower.advance(first.number);
        assert!(follower.log().persisted < 3);
        follower.advance(third.number);
        assert_eq!(follower.log().persisted, 3);
    }
}
