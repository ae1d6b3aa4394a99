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

#[derive(Debug, Clone)]
pub struct Config {
    pub id: NodeId,
    /// Election timeout: a random value in `[election_ticks, 2 * election_ticks)`.
    pub election_ticks: u32,
    pub heartbeat_ticks: u32,
    /// Caps of one append message.
    pub max_append_entries: usize,
    pub max_append_bytes: usize,
    /// Append messages in flight to one follower.
    pub max_inflight: usize,
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
    /// Install and persist (replaces the log up to its index).
    pub snapshot: Option<Snapshot>,
    pub messages: Vec<Envelope>,
    /// Send only once this ready is durable.
    pub persisted_messages: Vec<Envelope>,
    /// Apply in order.
    pub committed: Vec<Entry>,
    pub read_states: Vec<ReadState>,
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
    /// A probe is outstanding.
    paused: bool,
    recent_active: bool,
}

impl Progress {
    fn new(next_index: Index) -> Progress {
        Progress {
            match_index: 0,
            next_index,
            state: ProgressState::Probe,
            inflight: VecDeque::new(),
            paused: false,
            recent_active: false,
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
    pending_reads: Vec<PendingRead>,
    read_states: Vec<ReadState>,
    next_read_context: u64,
    /// Index of the last membership entry appended.
    pending_membership_index: Index,
    transfer: Option<(NodeId, u32)>,
    /// Damaged: must catch up to this index before voting or campaigning.
    damaged_until: Index,
    next_ready: u64,
    outstanding: VecDeque<ReadyInfo>,
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
            pending_reads: Vec::new(),
            read_states: Vec::new(),
            next_read_context: 1,
            pending_membership_index: 0,
            transfer: None,
            damaged_until,
            next_ready: 1,
            outstanding: VecDeque::new(),
            config,
        };
        node.recompute_membership();
        node.reset_election_timeout();
        node
    }

    // ----- accessors ------------------------------------------------------------

    pub fn id(&self) -> NodeId {
        self.config.id
    }

    pub fn role(&self) -> Role {
        self.role
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

    pub fn membership(&self) -> &Membership {
        &self.membership
    }

    pub fn log(&self) -> &RaftLog {
        &self.log
    }

    pub fn is_damaged(&self) -> bool {
        self.damaged_until > 0
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

    pub fn tick(&mut self) {
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
                }
            }
            _ => {
                if self.election_elapsed >= self.randomized_election_ticks {
                    self.campaign(false);
                }
            }
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
        self.progress.clear();
        self.votes.clear();
        self.transfer = None;
        self.pending_reads.clear();
        self.reset_election_timeout();
    }

    fn campaign(&mut self, transfer: bool) {
        let id = self.id();
        if !self.membership.contains(id) || self.damaged_until > 0 {
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
        self.votes.clear();
        self.heartbeat_elapsed = 0;
        self.election_elapsed = 0;
        self.transfer = None;
        let next = self.log.last_index() + 1;
        self.progress = self
            .membership
            .voters
            .iter()
            .filter(|&&voter| voter != id)
            .map(|&voter| (voter, Progress::new(next)))
            .collect();
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
            self.progress.retain(|peer, _| voters.contains(peer));
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
        if let Message::VoteResponse { pre_vote: true, .. } = &message {
            if self.role == Role::PreCandidate && term == self.hard.term + 1 {
                self.on_vote_response(from, &message);
            } else if term > self.hard.term + 1 {
                self.become_follower(term - 1, None);
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
            Message::InstallSnapshot { snapshot, .. } => self.on_install_snapshot(from, snapshot),
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
        let granted = can_vote && up_to_date && self.damaged_until == 0;
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
                if self.damaged_until > 0
                    && self.log.last_index() >= self.damaged_until
                    && self.log.persisted >= self.damaged_until
                {
                    self.damaged_until = 0;
                }
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
        if success {
            if match_index > progress.match_index {
                progress.match_index = match_index;
            }
            progress.next_index = progress.next_index.max(progress.match_index + 1);
            while progress
                .inflight
                .front()
                .is_some_and(|&last| last <= match_index)
            {
                progress.inflight.pop_front();
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

    fn on_install_snapshot(&mut self, from: NodeId, snapshot: Snapshot) {
        self.leader = Some(from);
        self.election_elapsed = 0;
        if self.role != Role::Follower {
            self.become_follower(self.hard.term, Some(from));
        }
        let term = self.hard.term;
        if snapshot.index <= self.log.committed {
            let index = self.log.committed;
            self.send(from, Message::InstallSnapshotResponse { term, index });
            return;
        }
        self.log.restore(snapshot.index, snapshot.term);
        self.snapshot_membership = snapshot.membership.clone();
        self.recompute_membership();
        let index = snapshot.index;
        self.snapshot = Some(snapshot.clone());
        self.snapshot_to_install = Some(snapshot);
        self.send_after_persist(from, Message::InstallSnapshotResponse { term, index });
    }

    fn on_snapshot_installed(&mut self, from: NodeId, index: Index) {
        if self.role != Role::Leader {
            return;
        }
        let Some(progress) = self.progress.get_mut(&from) else {
            return;
        };
        progress.recent_active = true;
        progress.match_index = progress.match_index.max(index);
        progress.next_index = progress.match_index + 1;
        progress.state = ProgressState::Probe;
        progress.paused = false;
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
            let Some(snapshot) = self.snapshot.clone() else {
                return;
            };
            let progress = self.progress.get_mut(&peer).expect("checked");
            progress.state = ProgressState::Snapshot;
            self.send(peer, Message::InstallSnapshot { term, snapshot });
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
        if self.damaged_until > 0 && self.log.persisted >= self.damaged_until {
            self.damaged_until = 0;
        }
        self.maybe_commit();
    }

    /// The state machine took a snapshot at `snapshot.index` (≤ applied):
    /// the log before it is dropped, and lagging followers get the snapshot.
    pub fn compact(&mut self, snapshot: Snapshot) {
        assert!(snapshot.index <= self.log.applied);
        self.log.compact(snapshot.index, snapshot.term);
        self.snapshot_membership = snapshot.membership.clone();
        self.snapshot = Some(snapshot);
    }
}
