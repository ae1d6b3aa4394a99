//! The stream task's core, sans-IO: the stream's [`Replica`] and what its
//! host decides around it: which committed entries apply, when the node's
//! log compacts and to which point, when a checkpoint is taken and what it
//! names, how a snapshot received from the leader is staged and switched
//! in, and the group's voters as they apply. It reads no clock (times come
//! in as monotonic nanoseconds), opens no file and sends nothing: each
//! decision is returned as a value ([`Checkpoint`], a compaction's
//! [`Snapshot`], an [`Install`], a [`MembershipStep`]) that the glommio
//! driver (`task.rs`, `snapshot_host.rs`, `membership.rs`) carries out on
//! the block store, the journal and the groups, and that the cluster
//! simulator (`jetstream/sim`) carries out on its simulated disk, so the
//! production decisions run under the simulator's faults and checkers.
//!
//! Pair assertions hold the boundaries: a checkpoint never names a log
//! position the node has not made durable and never goes back; a snapshot
//! is installed only over an older state; a compaction point is never past
//! what applied.

use std::collections::VecDeque;

use tern_raft::{Entry, EntryKind, HardState, Membership, Node, NodeId, Snapshot, SnapshotChunk};

use super::config::StreamConfig;
use super::failure::StreamFailure;
use super::leader::Owed;
use super::replica::{Replica, StreamCanary};
use super::transfer::{SnapshotInstall, SnapshotPoint};

/// When a stream checkpoints and how much of its node's log it keeps:
/// production's constants ([`Policy::PRODUCTION`]) or the simulator's small
/// ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// A checkpoint is taken once this much was applied since the last…
    pub checkpoint_bytes: u64,
    /// …or this long after something was applied.
    pub checkpoint_interval_ns: u64,
    /// A replicated stream keeps this many applied entries in its node's
    /// log for followers that fall behind (beyond it, a snapshot)…
    pub retained_entries: u64,
    /// …and records a compaction point this often (in applied entries).
    pub compact_every_entries: u64,
}

impl Policy {
    pub const PRODUCTION: Policy = Policy {
        checkpoint_bytes: 64 << 20,
        checkpoint_interval_ns: 2_000_000_000,
        retained_entries: 20_000,
        compact_every_entries: 1_024,
    };
}

/// Where the node's log stands, as the core's decisions need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogPosition {
    /// The last index the log holds (proposed or received, maybe not
    /// durable).
    pub last_index: u64,
    /// The last index this node made durable.
    pub durable_index: u64,
}

impl LogPosition {
    /// Where `node`'s log stands.
    pub fn of(node: &Node) -> LogPosition {
        LogPosition {
            last_index: node.last_index(),
            durable_index: node.log().durable_index(),
        }
    }
}

/// A checkpoint to take: the store synced, the `raft` file naming
/// `index`, `term` and the store's `generation` written, and then the
/// journal told it may recycle the group's records up to `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub index: u64,
    pub term: u64,
    pub generation: u64,
}

/// A snapshot received from the leader, switched in as this replica: the
/// driver makes `checkpoint` durable (a file stream's store moves from
/// `old_generation` to the checkpoint's), then calls
/// [`StreamCore::installed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Install {
    pub checkpoint: Checkpoint,
    pub old_generation: u64,
}

/// What a chunk of a snapshot transfer asks of the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staging {
    /// The first chunk: open an empty store for the snapshot at `index`
    /// ([`StreamCore::begin_staging`]), then push the chunk.
    Open { index: u64 },
    /// Push the chunk into the store staged already.
    Continue,
}

/// The next thing a leader does to move its group to the voters the meta
/// group placed it on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipStep {
    /// Propose this change.
    Propose(EntryKind),
    /// This node leaves: hand leadership to this desired voter first (the
    /// next leader removes it).
    TransferTo(NodeId),
    /// This node leaves, and no desired voter is caught up yet.
    Wait,
}

/// The next change that moves `voters` towards `desired`: a voter to
/// remove (not `this`), else one to add, else `this` to remove (`None`:
/// nothing to do).
pub(super) fn next_change(voters: &[u64], desired: &[u64], this: u64) -> Option<EntryKind> {
    if let Some(&gone) = voters
        .iter()
        .find(|voter| !desired.contains(voter) && **voter != this)
    {
        return Some(EntryKind::RemoveVoter(gone));
    }
    if let Some(&new) = desired.iter().find(|peer| !voters.contains(peer)) {
        return Some(EntryKind::AddVoter(new));
    }
    (!desired.contains(&this) && voters.contains(&this)).then_some(EntryKind::RemoveVoter(this))
}

/// A snapshot being received: its index and transfer session, and what it
/// built so far.
struct Staged {
    index: u64,
    session: u64,
    install: SnapshotInstall,
}

/// The stream's replica and its host's decisions (module docs).
pub struct StreamCore {
    /// What every replica holds identically (changed only by apply), the
    /// leader's side (sequences, checks, dedupe, replies owed) and the
    /// live consumers.
    pub replica: Replica,
    /// The group's voters as of the applied index (this node's id alone
    /// for one voter).
    pub membership: Membership,
    pub group: u64,
    pub created_unix_ns: u64,
    /// The hard state recovered (the checkpoint's until the groups make a
    /// newer one durable).
    pub hard_state: HardState,
    /// A consumer's state entry must fit one journal record.
    pub state_entry_bytes_max: usize,
    /// The block store's directory generation (`persist::messages_directory`).
    pub generation: u64,
    pub checkpointed_index: u64,
    last_checkpoint_ns: u64,
    /// Up to where the node's log was last compacted.
    pub compacted_index: u64,
    /// Points recorded for the node's log to compact to later, oldest
    /// first.
    snapshot_points: VecDeque<SnapshotPoint>,
    staged: Option<Staged>,
    /// A replicated stream: the config the catalog gave it, which its
    /// leader proposes until it applied…
    pub desired_config: Option<Box<StreamConfig>>,
    /// …and the index and term of that proposal while in flight.
    pub config_proposal: Option<(u64, u64)>,
    /// A replicated stream: the voters the meta group placed it on, which
    /// its leader moves the group to.
    pub desired_peers: Option<Vec<u64>>,
    /// The meta group placed the stream on other nodes (this one stays a
    /// voter until the group removes it).
    pub placed_elsewhere: bool,
    /// The group removed this node (its removal applied here): the copy
    /// goes at the end of the turn.
    pub removed_from_group: bool,
    policy: Policy,
}

/// The core's identity and what recovery found.
pub struct CoreStart {
    pub replica: Replica,
    pub membership: Membership,
    pub group: u64,
    pub created_unix_ns: u64,
    pub hard_state: HardState,
    pub state_entry_bytes_max: usize,
    pub generation: u64,
    pub policy: Policy,
    /// Now, in monotonic nanoseconds.
    pub now_ns: u64,
}

impl StreamCore {
    pub fn new(start: CoreStart) -> StreamCore {
        let applied = start.replica.state.applied_index;
        assert!(
            start.membership.voters.len() <= 7,
            "a stream group has at most 7 voters"
        );
        StreamCore {
            replica: start.replica,
            membership: start.membership,
            group: start.group,
            created_unix_ns: start.created_unix_ns,
            hard_state: start.hard_state,
            state_entry_bytes_max: start.state_entry_bytes_max,
            generation: start.generation,
            checkpointed_index: applied,
            last_checkpoint_ns: start.now_ns,
            compacted_index: applied,
            snapshot_points: VecDeque::new(),
            staged: None,
            desired_config: None,
            config_proposal: None,
            desired_peers: None,
            placed_elsewhere: false,
            removed_from_group: false,
            policy: start.policy,
        }
    }

    fn canary(&self) -> Option<StreamCanary> {
        self.replica.canary
    }

    // ----- apply ---------------------------------------------------------------

    /// Whether a committed entry applies: not one released before a
    /// snapshot this follower installed since, which holds it.
    pub fn admits(&self, entry: &Entry) -> bool {
        entry.index > self.replica.state.applied_index
            || self.canary() == Some(StreamCanary::EntriesOverInstall)
    }

    /// A membership entry applied on `node`: the group's voters from now
    /// on. This replica is removed for good when the change removes it,
    /// the meta group placed it elsewhere, and no later entry in the node's
    /// log adds it back (a replica that rejoined replays its old removal on
    /// the way).
    pub fn membership_applied(&mut self, change: &EntryKind, node: &Node) {
        let this = node.id();
        let in_latest = node.membership().contains(this);
        let mut voters = self.membership.voters.clone();
        match change {
            EntryKind::AddVoter(node) => {
                if !voters.contains(node) {
                    voters.push(*node);
                }
            }
            EntryKind::RemoveVoter(node) => voters.retain(|voter| voter != node),
            EntryKind::Normal(_) | EntryKind::Noop => unreachable!("a membership entry"),
        }
        self.membership = Membership::new(voters);
        if *change == EntryKind::RemoveVoter(this) && self.placed_elsewhere && !in_latest {
            self.removed_from_group = true;
        }
    }

    // ----- compaction and checkpoints ---------------------------------------------

    /// After entries applied, the snapshot the node's log compacts to, if
    /// any. One voter: to what applied (it never sends entries to a
    /// follower, and the journal keeps them until the checkpoint). A
    /// replicated stream records a point every
    /// [`Policy::compact_every_entries`] and compacts to the newest point
    /// at least [`Policy::retained_entries`] behind what applied.
    pub fn compaction(&mut self, replicated: bool) -> Option<Snapshot> {
        let applied = self.replica.state.applied_index;
        if !replicated {
            return Some(Snapshot {
                index: applied,
                term: self.replica.state.applied_term,
                membership: self.membership.clone(),
            });
        }
        let last_recorded = self
            .snapshot_points
            .back()
            .map_or(self.compacted_index, |point| point.index);
        if applied >= last_recorded + self.policy.compact_every_entries {
            self.snapshot_points
                .push_back(self.replica.snapshot_point_here());
        }
        let target = applied.saturating_sub(self.policy.retained_entries);
        let mut chosen = None;
        while self
            .snapshot_points
            .front()
            .is_some_and(|point| point.index <= target)
        {
            chosen = self.snapshot_points.pop_front();
        }
        let point = chosen?;
        assert!(
            point.index > self.compacted_index && point.index <= applied,
            "group {}: compaction point {} outside ({}, {applied}]",
            self.group,
            point.index,
            self.compacted_index
        );
        let (index, term) = self.replica.use_snapshot_point(point);
        self.compacted_index = index;
        Some(Snapshot {
            index,
            term,
            membership: self.membership.clone(),
        })
    }

    /// A one-voter stream about to gain voters: its node's log, compacted
    /// to what applied, has a point a new replica is sent. Returns the
    /// compaction, if the node's log is not there yet.
    pub fn become_replicated(&mut self, node_snapshot_index: u64) -> Option<Snapshot> {
        let applied = self.replica.state.applied_index;
        let term = self.replica.state.applied_term;
        if applied > 0 {
            self.replica.mark_snapshot();
        }
        self.compacted_index = applied;
        (applied > 0 && node_snapshot_index < applied).then(|| Snapshot {
            index: applied,
            term,
            membership: self.membership.clone(),
        })
    }

    /// Whether a checkpoint is due at `now_ns`.
    pub fn checkpoint_due(&self, now_ns: u64) -> bool {
        self.replica.state.applied_index > self.checkpointed_index
            && (self.replica.state.applied_bytes_since_checkpoint >= self.policy.checkpoint_bytes
                || now_ns.saturating_sub(self.last_checkpoint_ns)
                    >= self.policy.checkpoint_interval_ns)
    }

    /// How long until a checkpoint is due (`None`: nothing to checkpoint).
    pub fn checkpoint_in_ns(&self, now_ns: u64) -> Option<u64> {
        (self.replica.state.applied_index > self.checkpointed_index).then(|| {
            self.policy
                .checkpoint_interval_ns
                .saturating_sub(now_ns.saturating_sub(self.last_checkpoint_ns))
        })
    }

    /// The checkpoint of what applied (`None`: nothing new since the
    /// last). It names what applied, which the node made durable before
    /// handing it out: never a position past `log.durable_index`.
    pub fn checkpoint(&self, log: LogPosition) -> Option<Checkpoint> {
        let applied = self.replica.state.applied_index;
        if applied == self.checkpointed_index {
            return None;
        }
        assert!(
            applied > self.checkpointed_index,
            "group {}: applied {applied} behind the checkpoint {}",
            self.group,
            self.checkpointed_index
        );
        let index = match self.canary() {
            // The log's end (proposed or received), not what applied.
            Some(StreamCanary::CheckpointBeyondDurable) => log.last_index.max(applied),
            _ => {
                assert!(
                    applied <= log.durable_index,
                    "group {}: a checkpoint at {applied} names a position not durable (durable to {})",
                    self.group,
                    log.durable_index
                );
                applied
            }
        };
        Some(Checkpoint {
            index,
            term: self.replica.state.applied_term,
            generation: self.generation,
        })
    }

    /// `checkpoint` is durable: the journal may recycle what it names.
    pub fn checkpointed(&mut self, checkpoint: Checkpoint, now_ns: u64) {
        assert!(
            checkpoint.index >= self.checkpointed_index,
            "group {}: a checkpoint at {} after one at {}",
            self.group,
            checkpoint.index,
            self.checkpointed_index
        );
        assert_eq!(checkpoint.generation, self.generation);
        self.checkpointed_index = checkpoint.index;
        self.replica.state.applied_bytes_since_checkpoint = 0;
        self.last_checkpoint_ns = now_ns;
    }

    // ----- snapshot staging and install ---------------------------------------------

    /// A chunk of the snapshot this follower receives, in order: the
    /// first of a transfer asks for a new staged store.
    pub fn stage(&self, chunk: &SnapshotChunk) -> Result<Staging, StreamFailure> {
        if chunk.offset == 0 {
            return Ok(Staging::Open { index: chunk.index });
        }
        match &self.staged {
            Some(staged) if staged.index == chunk.index && staged.session == chunk.session => {
                Ok(Staging::Continue)
            }
            // Raft hands chunks in order from offset 0: never expected.
            _ => Err(StreamFailure::SnapshotInstall {
                index: chunk.index,
                reason: format!(
                    "a chunk at offset {} of a transfer whose start was not received",
                    chunk.offset
                ),
            }),
        }
    }

    /// The store opened for [`Staging::Open`] (any earlier staging is
    /// dropped).
    pub fn begin_staging(&mut self, chunk: &SnapshotChunk, install: SnapshotInstall) {
        assert_eq!(chunk.offset, 0, "a transfer is staged from its start");
        self.staged = Some(Staged {
            index: chunk.index,
            session: chunk.session,
            install,
        });
    }

    /// Adds a chunk to the staged store ([`StreamCore::stage`] said
    /// where).
    pub async fn push_chunk(&mut self, chunk: &SnapshotChunk) -> Result<(), StreamFailure> {
        let staged = self
            .staged
            .as_mut()
            .filter(|staged| staged.index == chunk.index && staged.session == chunk.session)
            .expect("a chunk is pushed into the store staged for its transfer");
        staged
            .install
            .push(&chunk.data)
            .await
            .map_err(|error| StreamFailure::SnapshotInstall {
                index: chunk.index,
                reason: error.to_string(),
            })
    }

    /// The snapshot received replaces this replica: the staged store is
    /// checked against `snapshot` and switched in (the old replica is
    /// dropped; the replies it still owed are returned, to fail). The
    /// driver then makes the returned checkpoint durable and calls
    /// [`StreamCore::installed`].
    pub fn install(&mut self, snapshot: &Snapshot) -> Result<(Install, Vec<Owed>), StreamFailure> {
        let failed = |reason: String| StreamFailure::SnapshotInstall {
            index: snapshot.index,
            reason,
        };
        let staged = match self.staged.take() {
            Some(staged) if staged.index == snapshot.index => staged,
            Some(staged) => {
                return Err(failed(format!(
                    "the chunks received were of the snapshot at index {}",
                    staged.index
                )))
            }
            None => return Err(failed("no chunk of it was received".into())),
        };
        let replica = staged
            .install
            .finish()
            .map_err(|error| failed(error.to_string()))?;
        if replica.state.applied_index != snapshot.index {
            return Err(failed(format!(
                "its header is of index {}",
                replica.state.applied_index
            )));
        }
        // Raft installs only past what it committed, which is at or past
        // what applied here.
        assert!(
            snapshot.index > self.replica.state.applied_index,
            "group {}: the snapshot at {} installed over the state at {}",
            self.group,
            snapshot.index,
            self.replica.state.applied_index
        );
        // A leader that lost office since its last turn may still owe
        // replies: they fail (not leader), as leaving office fails them.
        let mut old = std::mem::replace(&mut self.replica, replica);
        let superseded: Vec<Owed> = old.leader.owed.drain(..).map(|owed| owed.owed).collect();
        drop(old);
        self.replica.state.applied_term = snapshot.term;
        let old_generation = std::mem::replace(&mut self.generation, snapshot.index);
        let install = Install {
            checkpoint: Checkpoint {
                index: snapshot.index,
                term: snapshot.term,
                generation: self.generation,
            },
            old_generation,
        };
        Ok((install, superseded))
    }

    /// The install's checkpoint is durable: the snapshot is this node's
    /// checkpoint, what its log compacted to, and the point it serves
    /// transfers from.
    pub fn installed(&mut self, install: Install, now_ns: u64) {
        let index = install.checkpoint.index;
        assert_eq!(self.replica.state.applied_index, index);
        self.checkpointed_index = index;
        self.compacted_index = index;
        self.replica.state.applied_bytes_since_checkpoint = 0;
        self.last_checkpoint_ns = now_ns;
        self.snapshot_points.clear();
        self.replica.mark_snapshot();
    }

    // ----- membership ------------------------------------------------------------

    /// The meta group placed the stream on `peers`; `this` is the node's
    /// id.
    pub fn place_on(&mut self, peers: Vec<u64>, this: NodeId) {
        assert!(!peers.is_empty(), "a stream is placed on some node");
        self.placed_elsewhere = !peers.contains(&this);
        self.desired_peers = Some(peers);
    }

    /// The leader's next step on `node` towards the voters the meta group
    /// gave the stream (`None`: there already, or nothing was asked), from
    /// the node's newest voters and its best follower.
    pub fn membership_step(&mut self, node: &Node) -> Option<MembershipStep> {
        let desired = self.desired_peers.as_ref()?;
        let this = node.id();
        let Some(change) = next_change(&node.membership().voters, desired, this) else {
            self.desired_peers = None;
            return None;
        };
        if change == EntryKind::RemoveVoter(this) {
            return Some(
                match node
                    .most_caught_up_peer()
                    .filter(|candidate| desired.contains(candidate))
                {
                    Some(target) => MembershipStep::TransferTo(target),
                    None => MembershipStep::Wait,
                },
            );
        }
        Some(MembershipStep::Propose(change))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_remove_others_first_then_add_then_remove_this_node() {
        // A peer replaced: its removal first (the quorum never waits for
        // the new, empty replica), then the addition.
        assert_eq!(
            next_change(&[1, 2, 3], &[1, 2, 4], 1),
            Some(EntryKind::RemoveVoter(3))
        );
        assert_eq!(
            next_change(&[1, 2], &[1, 2, 4], 1),
            Some(EntryKind::AddVoter(4))
        );
        assert_eq!(next_change(&[1, 2, 4], &[1, 2, 4], 1), None);
        // Three to five, and back.
        assert_eq!(
            next_change(&[1, 2, 3], &[1, 2, 3, 4, 5], 2),
            Some(EntryKind::AddVoter(4))
        );
        assert_eq!(
            next_change(&[1, 2, 3, 4, 5], &[1, 2, 3], 2),
            Some(EntryKind::RemoveVoter(4))
        );
        // The leader leaving: the others first, itself last.
        assert_eq!(
            next_change(&[1, 2, 3], &[2, 3, 4], 1),
            Some(EntryKind::AddVoter(4))
        );
        assert_eq!(
            next_change(&[1, 2, 3, 4], &[2, 3, 4], 1),
            Some(EntryKind::RemoveVoter(1))
        );
    }
}
