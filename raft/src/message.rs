//! Messages between the members of one group. The caller carries them
//! (batched per peer as it likes: every message names its group's term and
//! is independent of the others). Wire encoding is the caller's (see
//! docs/raft.md).

use bytes::Bytes;

use crate::types::{Entry, Index, Membership, NodeId, Term};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A candidate (or a pre-candidate, which does not change any term) asks for a vote.
    Vote {
        term: Term,
        last_index: Index,
        last_term: Term,
        pre_vote: bool,
        transfer: bool,
    },
    VoteResponse {
        term: Term,
        granted: bool,
        pre_vote: bool,
    },
    /// Entries after `(prev_index, prev_term)`, and the leader's commit index.
    Append {
        term: Term,
        prev_index: Index,
        prev_term: Term,
        entries: Vec<Entry>,
        commit: Index,
        read_context: u64,
    },
    /// `success`: the follower's log now matches up to `match_index`.
    /// Rejection: `hint` is where the leader should try next.
    AppendResponse {
        term: Term,
        success: bool,
        match_index: Index,
        hint: Index,
        read_context: u64,
    },
    /// One chunk of the snapshot ending at `index`, as transfer `session`
    /// of this leader reads it: its bytes `[offset, offset + chunk.len())`;
    /// `last`: the snapshot ends with this chunk. Every chunk names the
    /// whole snapshot, so a follower can start from any offset-0 chunk.
    /// The host reads the bytes from its live state as the transfer goes,
    /// so two sessions of one snapshot may differ: a follower never mixes
    /// them.
    InstallSnapshot {
        term: Term,
        index: Index,
        snapshot_term: Term,
        membership: Membership,
        session: u64,
        offset: u64,
        last: bool,
        chunk: Bytes,
    },
    /// The follower holds the first `received` bytes of transfer `session`
    /// of the snapshot ending at `index`. `gap`: the chunk it answers began
    /// past them (lost or reordered chunks, or a follower that restarted):
    /// resend from `received`.
    SnapshotReceived {
        term: Term,
        index: Index,
        session: u64,
        received: u64,
        gap: bool,
    },
    /// Sent after the snapshot is installed and durable.
    InstallSnapshotResponse { term: Term, index: Index },
    /// Leader transfer: start an election now.
    TimeoutNow { term: Term },
}

impl Message {
    pub fn term(&self) -> Term {
        match self {
            Message::Vote { term, .. }
            | Message::VoteResponse { term, .. }
            | Message::Append { term, .. }
            | Message::AppendResponse { term, .. }
            | Message::InstallSnapshot { term, .. }
            | Message::SnapshotReceived { term, .. }
            | Message::InstallSnapshotResponse { term, .. }
            | Message::TimeoutNow { term } => *term,
        }
    }
}

/// A message with its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub from: NodeId,
    pub to: NodeId,
    pub message: Message,
}
