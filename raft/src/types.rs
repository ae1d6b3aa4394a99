//! The vocabulary: ids, entries, hard state, snapshots, configurations.

use bytes::Bytes;

pub type NodeId = u64;
pub type Term = u64;
pub type Index = u64;

/// What an entry carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// Appended by a new leader to commit entries of earlier terms.
    Noop,
    /// A client proposal.
    Normal(Bytes),
    /// Add or remove one voter (single-server membership change).
    AddVoter(NodeId),
    RemoveVoter(NodeId),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub term: Term,
    pub index: Index,
    pub kind: EntryKind,
}

impl Entry {
    /// Approximate bytes on the wire (for batching caps).
    pub fn size_bytes(&self) -> usize {
        24 + match &self.kind {
            EntryKind::Normal(data) => data.len(),
            _ => 8,
        }
    }
}

/// What must be durable before the node answers anything in a new term.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HardState {
    pub term: Term,
    pub vote: Option<NodeId>,
}

/// The voters of a group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Membership {
    pub voters: Vec<NodeId>,
}

impl Membership {
    pub fn new(mut voters: Vec<NodeId>) -> Membership {
        voters.sort_unstable();
        voters.dedup();
        Membership { voters }
    }

    pub fn contains(&self, node: NodeId) -> bool {
        self.voters.binary_search(&node).is_ok()
    }

    pub fn quorum(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    pub(crate) fn apply(&mut self, kind: &EntryKind) {
        match kind {
            EntryKind::AddVoter(node) if !self.contains(*node) => {
                self.voters.push(*node);
                self.voters.sort_unstable();
            }
            EntryKind::RemoveVoter(node) => self.voters.retain(|voter| voter != node),
            _ => {}
        }
    }
}

/// A snapshot's identity: everything up to `index` (of `term`) is in the
/// state machine's state. Its bytes are the host's: Raft asks for them
/// chunk by chunk when a follower needs them ([`crate::SnapshotRead`]) and
/// hands a follower's host the chunks it receives ([`crate::SnapshotChunk`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub index: Index,
    pub term: Term,
    pub membership: Membership,
}
