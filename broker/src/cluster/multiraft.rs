//! Many Raft groups on one shard, driven as one: one tick for all, their
//! messages batched per peer (the same shard index on another node), their
//! writes gathered into one [`Flush`] (one journal flush makes every group
//! in it durable), and each group's ready finished only once its flush is
//! durable. Sans-IO: the host persists flushes, carries batches and
//! applies what [`MultiRaft::flushed`] hands back.
//!
//! The `Ready` contract of docs/raft.md, per group: `messages` leave at
//! once; `hard_state`, `truncate_from`, `entries` and `snapshot` go into
//! the next flush; `persisted_messages`, the snapshot to install and
//! `read_states` are released when that flush (and every earlier one) is
//! durable, in ready order, and only then is the ready advanced. A ready
//! with nothing to write waits for the flushes before it (durable "after
//! everything before it"). `committed` entries are durable on this node
//! already (the node never hands out more), so they are released at once
//! (by the next [`MultiRaft::finish`] or [`MultiRaft::flushed`]), while
//! the ready's own writes are in flight; only a snapshot to install, in
//! that ready or an unfinished earlier one, holds them back until it is
//! durable (entries apply after the snapshot they follow). A follower's
//! received snapshot chunks travel with their ready too, ahead of the
//! install they lead to; a leader's snapshot reads go to the host with the
//! next [`MultiRaft::finish`] (answered through [`MultiRaft::node_mut`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use tern_raft::{
    chunks_before_install, Entry, Envelope, HardState, Index, Node, NodeCounters, NodeId,
    ReadState, Snapshot, SnapshotChunk, SnapshotRead,
};

/// A Raft group's id, unique in the cluster (a stream's group).
pub type GroupId = u64;

/// Groups one shard may run; a create past it is refused.
pub const GROUPS_MAX: usize = 65_536;

/// Messages queued for one peer before [`MultiRaft::take_outgoing`] must
/// be called (a host that stops reading is a bug, not a slow peer).
pub const OUTGOING_PER_PEER_MAX: usize = 1 << 20;

/// What one group's ready writes.
#[derive(Debug, Default)]
pub struct GroupWrite {
    pub group: GroupId,
    pub hard_state: Option<HardState>,
    /// Delete this group's entries at and after this index first.
    pub truncate_from: Option<Index>,
    pub entries: Vec<Entry>,
    pub snapshot: Option<Snapshot>,
}

/// Writes of many groups, durable together.
#[derive(Debug)]
pub struct Flush {
    pub number: u64,
    pub writes: Vec<GroupWrite>,
}

/// A follower's snapshot work, in order: stage a chunk, or install what
/// was staged.
#[derive(Debug)]
pub enum SnapshotStep {
    Chunk(SnapshotChunk),
    Install(Snapshot),
}

/// What became durable, for the host to apply, install and serve.
#[derive(Debug, Default)]
pub struct Durable {
    /// Per group, entries to apply in order.
    pub committed: Vec<(GroupId, Vec<Entry>)>,
    /// Chunks to stage and snapshots to install, in order, before applying
    /// that group's entries.
    pub snapshot_steps: Vec<(GroupId, SnapshotStep)>,
    /// Snapshot bytes leaders' hosts are asked for.
    pub snapshot_reads: Vec<(GroupId, SnapshotRead)>,
    pub read_states: Vec<(GroupId, ReadState)>,
}

/// A batch of messages for one peer, every group's.
#[derive(Debug)]
pub struct Outgoing {
    pub to: NodeId,
    pub messages: Vec<(GroupId, Envelope)>,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum GroupError {
    #[error("group {0} already runs on this shard")]
    Exists(GroupId),
    #[error("this shard runs {GROUPS_MAX} groups already")]
    TooMany,
}

/// A ready taken, waiting for its flush.
struct Waiting {
    flush: u64,
    ready: u64,
    persisted_messages: Vec<Envelope>,
    committed: Vec<Entry>,
    snapshot_chunks: Vec<SnapshotChunk>,
    snapshot: Option<Snapshot>,
    read_states: Vec<ReadState>,
}

struct Group {
    node: Node,
    waiting: VecDeque<Waiting>,
    /// Committed entries released at once (no snapshot waits before
    /// them), for the next finish.
    released: Vec<Entry>,
}

pub struct MultiRaft {
    groups: BTreeMap<GroupId, Group>,
    /// Groups that may have a ready (changed since the last
    /// [`MultiRaft::take_flush`]): a flush looks at these, not at every
    /// group, so an idle group costs nothing per flush.
    touched: BTreeSet<GroupId>,
    /// Groups with readies taken and not finished, or committed entries
    /// released and not yet handed out: what [`MultiRaft::finish`] visits.
    unfinished: BTreeSet<GroupId>,
    /// The number the next flush gets (flushes are durable in order).
    next_flush: u64,
    /// Every flush up to this one is durable.
    durable_flush: u64,
    outgoing: BTreeMap<NodeId, Vec<(GroupId, Envelope)>>,
    /// Snapshot reads for the next finish.
    snapshot_reads: Vec<(GroupId, SnapshotRead)>,
    /// Messages for groups this shard does not run.
    pub unknown_group_messages: u64,
    /// The counters of groups removed, so totals never go back.
    retired_counters: NodeCounters,
}

impl Default for MultiRaft {
    fn default() -> Self {
        MultiRaft::new()
    }
}

impl MultiRaft {
    pub fn new() -> MultiRaft {
        MultiRaft {
            groups: BTreeMap::new(),
            touched: BTreeSet::new(),
            unfinished: BTreeSet::new(),
            next_flush: 1,
            durable_flush: 0,
            outgoing: BTreeMap::new(),
            snapshot_reads: Vec::new(),
            unknown_group_messages: 0,
            retired_counters: NodeCounters::default(),
        }
    }

    pub fn insert(&mut self, group: GroupId, node: Node) -> Result<(), GroupError> {
        if self.groups.contains_key(&group) {
            return Err(GroupError::Exists(group));
        }
        if self.groups.len() >= GROUPS_MAX {
            return Err(GroupError::TooMany);
        }
        self.groups.insert(
            group,
            Group {
                node,
                waiting: VecDeque::new(),
                released: Vec::new(),
            },
        );
        self.touched.insert(group);
        Ok(())
    }

    /// Stops running `group`; what its readies still owed is dropped.
    pub fn remove(&mut self, group: GroupId) -> Option<Node> {
        self.touched.remove(&group);
        self.unfinished.remove(&group);
        let node = self.groups.remove(&group).map(|group| group.node)?;
        self.retired_counters += node.counters();
        Some(node)
    }

    /// Elections and leader changes of every group this ran, removed
    /// groups included (monitoring counters: they never go back).
    pub fn counters(&self) -> NodeCounters {
        let mut total = self.retired_counters;
        for group in self.groups.values() {
            total += group.node.counters();
        }
        total
    }

    pub fn node(&self, group: GroupId) -> Option<&Node> {
        self.groups.get(&group).map(|group| &group.node)
    }

    /// The node, to propose, campaign or compact with: the group is
    /// looked at by the next flush.
    pub fn node_mut(&mut self, group: GroupId) -> Option<&mut Node> {
        let node = self.groups.get_mut(&group).map(|group| &mut group.node)?;
        self.touched.insert(group);
        Some(node)
    }

    pub fn groups(&self) -> impl Iterator<Item = (GroupId, &Node)> + '_ {
        self.groups.iter().map(|(&id, group)| (id, &group.node))
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// One tick of the shard's timer, for every group.
    pub fn tick(&mut self) {
        for (&id, group) in self.groups.iter_mut() {
            group.node.tick();
            self.touched.insert(id);
        }
    }

    /// A message from a peer for `group`.
    pub fn step(&mut self, group: GroupId, envelope: Envelope) {
        match self.groups.get_mut(&group) {
            Some(state) => {
                state.node.step(envelope);
                self.touched.insert(group);
            }
            None => self.unknown_group_messages += 1,
        }
    }

    /// Takes every group's ready: messages to the outgoing batches, writes
    /// into one flush (`None` when nothing is to be written; readies that
    /// write nothing then finish with the next [`MultiRaft::flushed`]).
    pub fn take_flush(&mut self) -> Option<Flush> {
        let number = self.next_flush;
        let mut writes = Vec::new();
        for id in std::mem::take(&mut self.touched) {
            let Some(group) = self.groups.get_mut(&id) else {
                continue;
            };
            while group.node.has_ready() {
                let ready = group.node.ready();
                for envelope in ready.messages {
                    push_outgoing(&mut self.outgoing, id, envelope);
                }
                self.snapshot_reads
                    .extend(ready.snapshot_reads.into_iter().map(|read| (id, read)));
                let write = GroupWrite {
                    group: id,
                    hard_state: ready.hard_state,
                    truncate_from: ready.truncate_from,
                    entries: ready.entries,
                    snapshot: ready.snapshot.clone(),
                };
                let writes_anything = write.hard_state.is_some()
                    || write.truncate_from.is_some()
                    || !write.entries.is_empty()
                    || write.snapshot.is_some();
                // Nothing to write: durable once every earlier flush is.
                let flush = if writes_anything {
                    writes.push(write);
                    number
                } else {
                    group
                        .waiting
                        .back()
                        .map_or(self.durable_flush, |waiting| waiting.flush)
                };
                // Locally durable already: out now, unless a snapshot to
                // install comes first (then in order, after it).
                let held = ready.snapshot.is_some()
                    || group
                        .waiting
                        .iter()
                        .any(|waiting| waiting.snapshot.is_some() || !waiting.committed.is_empty());
                let committed = if held {
                    ready.committed
                } else {
                    group.released.extend(ready.committed);
                    Vec::new()
                };
                group.waiting.push_back(Waiting {
                    flush,
                    ready: ready.number,
                    persisted_messages: ready.persisted_messages,
                    committed,
                    snapshot_chunks: ready.snapshot_chunks,
                    snapshot: ready.snapshot,
                    read_states: ready.read_states,
                });
                self.unfinished.insert(id);
            }
        }
        if writes.is_empty() {
            return None;
        }
        self.next_flush += 1;
        Some(Flush { number, writes })
    }

    /// Flush `number` (and every one before it) is durable: the readies it
    /// finished release their persisted messages, commits, snapshots and
    /// reads, and are advanced. Also finishes readies that wrote nothing.
    pub fn flushed(&mut self, number: u64) -> Durable {
        assert!(
            number < self.next_flush,
            "flush {number} was never taken (next is {})",
            self.next_flush
        );
        self.durable_flush = self.durable_flush.max(number);
        self.finish()
    }

    /// Finishes readies whose flush is durable (also those that wrote
    /// nothing), without a new flush.
    pub fn finish(&mut self) -> Durable {
        let mut durable = Durable {
            snapshot_reads: std::mem::take(&mut self.snapshot_reads),
            ..Durable::default()
        };
        let unfinished: Vec<GroupId> = self.unfinished.iter().copied().collect();
        for id in unfinished {
            let group = self.groups.get_mut(&id).expect("unfinished groups run");
            let mut last_ready = None;
            let mut committed = std::mem::take(&mut group.released);
            while group
                .waiting
                .front()
                .is_some_and(|waiting| waiting.flush <= self.durable_flush)
            {
                let waiting = group.waiting.pop_front().expect("front exists");
                for envelope in waiting.persisted_messages {
                    push_outgoing(&mut self.outgoing, id, envelope);
                }
                let before =
                    chunks_before_install(&waiting.snapshot_chunks, waiting.snapshot.as_ref());
                let mut chunks = waiting.snapshot_chunks.into_iter();
                durable.snapshot_steps.extend(
                    chunks
                        .by_ref()
                        .take(before)
                        .map(|chunk| (id, SnapshotStep::Chunk(chunk))),
                );
                if let Some(snapshot) = waiting.snapshot {
                    // Entries before it are void; apply restarts after it.
                    committed.clear();
                    durable
                        .snapshot_steps
                        .push((id, SnapshotStep::Install(snapshot)));
                }
                // A later transfer begun in the same ready.
                durable
                    .snapshot_steps
                    .extend(chunks.map(|chunk| (id, SnapshotStep::Chunk(chunk))));
                committed.extend(waiting.committed);
                durable
                    .read_states
                    .extend(waiting.read_states.into_iter().map(|read| (id, read)));
                last_ready = Some(waiting.ready);
            }
            if !committed.is_empty() {
                durable.committed.push((id, committed));
            }
            if let Some(ready) = last_ready {
                group.node.advance(ready);
                // Advancing may commit (or let it send) more.
                self.touched.insert(id);
            }
            if group.waiting.is_empty() && group.released.is_empty() {
                self.unfinished.remove(&id);
            }
        }
        durable
    }

    /// Whether a group may have a ready to take (changed since the last
    /// flush and with one now).
    pub fn has_ready(&self) -> bool {
        self.touched.iter().any(|id| {
            self.groups
                .get(id)
                .is_some_and(|group| group.node.has_ready())
        })
    }

    /// Whether readies are taken and not finished (a flush in flight).
    pub fn is_waiting(&self) -> bool {
        self.unfinished
            .iter()
            .any(|id| !self.groups[id].waiting.is_empty())
    }

    /// The batches for each peer, taken.
    pub fn take_outgoing(&mut self) -> impl Iterator<Item = Outgoing> {
        std::mem::take(&mut self.outgoing)
            .into_iter()
            .map(|(to, messages)| Outgoing { to, messages })
    }
}

fn push_outgoing(
    outgoing: &mut BTreeMap<NodeId, Vec<(GroupId, Envelope)>>,
    group: GroupId,
    envelope: Envelope,
) {
    let batch = outgoing.entry(envelope.to).or_default();
    assert!(
        batch.len() < OUTGOING_PER_PEER_MAX,
        "outgoing batches are taken after every flush"
    );
    batch.push((group, envelope));
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tern_raft::{Config, Membership, Restore, Role};

    fn node(id: NodeId, voters: &[NodeId], group: GroupId) -> Node {
        Node::new(
            Config::new(id),
            Restore {
                hard_state: HardState::default(),
                snapshot: None,
                entries: Vec::new(),
                membership: Membership::new(voters.to_vec()),
                acknowledged_index: 0,
                entries_lost_through_term: 0,
                seed: group * 31 + id,
            },
        )
    }

    /// Three shards (one per node), two groups each, messages carried by
    /// hand: one flush per shard makes both groups durable, nothing is
    /// committed before its flush, and both groups elect and commit.
    #[test]
    fn groups_share_flushes_and_commit_only_when_durable() {
        let voters = [1, 2, 3];
        let mut shards: Vec<MultiRaft> = voters
            .iter()
            .map(|&id| {
                let mut shard = MultiRaft::new();
                for group in [10, 20] {
                    shard.insert(group, node(id, &voters, group)).expect("new");
                }
                shard
            })
            .collect();
        for group in [10, 20] {
            shards[0].node_mut(group).expect("runs").campaign_now();
        }
        let mut proposed = false;
        let mut applied: BTreeMap<(usize, GroupId), Vec<Bytes>> = BTreeMap::new();
        for _round in 0..50 {
            let mut mail = Vec::new();
            for (position, shard) in shards.iter_mut().enumerate() {
                shard.tick();
                let mut durables = Vec::new();
                if let Some(flush) = shard.take_flush() {
                    let groups: Vec<GroupId> = flush.writes.iter().map(|w| w.group).collect();
                    let mut unique = groups.clone();
                    unique.dedup();
                    assert_eq!(groups, unique, "one write per group per flush");
                    // Not durable yet: nothing it writes may be applied.
                    let early = shard.finish();
                    for (group, entries) in &early.committed {
                        for entry in entries {
                            assert!(
                                !flush.writes.iter().any(|write| write.group == *group
                                    && write.entries.iter().any(|e| e.index == entry.index)),
                                "shard {position}: entry {} applied before its flush",
                                entry.index
                            );
                        }
                    }
                    durables.push(early);
                    durables.push(shard.flushed(flush.number));
                } else {
                    durables.push(shard.finish());
                }
                for durable in durables {
                    for (group, entries) in durable.committed {
                        for entry in entries {
                            if let tern_raft::EntryKind::Normal(data) = entry.kind {
                                applied.entry((position, group)).or_default().push(data);
                            }
                        }
                    }
                }
                mail.extend(shard.take_outgoing());
            }
            for outgoing in mail {
                let shard = &mut shards[(outgoing.to - 1) as usize];
                for (group, envelope) in outgoing.messages {
                    assert_eq!(envelope.to, outgoing.to);
                    shard.step(group, envelope);
                }
            }
            let leaders =
                [10, 20].map(|group| shards[0].node(group).expect("runs").role() == Role::Leader);
            if !proposed && leaders.iter().all(|&leads| leads) {
                for group in [10, 20] {
                    let payload = Bytes::from(format!("group {group}"));
                    shards[0]
                        .node_mut(group)
                        .expect("runs")
                        .propose(payload)
                        .expect("the leader accepts");
                }
                proposed = true;
            }
        }
        assert!(proposed, "both groups elected shard 0's node");
        for position in 0..3 {
            for group in [10, 20] {
                assert_eq!(
                    applied.get(&(position, group)).map(Vec::as_slice),
                    Some(&[Bytes::from(format!("group {group}"))][..]),
                    "shard {position} group {group}"
                );
            }
        }
        assert_eq!(
            shards[1].insert(10, node(2, &voters, 10)),
            Err(GroupError::Exists(10))
        );
        // Shard 0 stood in both elections and saw itself lead both;
        // removing a group keeps its counts in the totals.
        let counters = shards[0].counters();
        assert_eq!(counters.elections, 2);
        assert_eq!(counters.leader_changes, 2);
        shards[0].remove(10);
        assert_eq!(shards[0].counters(), counters);
        assert_eq!(shards[1].counters().leader_changes, 2, "followers too");
    }
}
