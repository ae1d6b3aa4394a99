//! Messages between the members of one group. The caller carries them
//! (batched per peer as it likes: every message names its group's term and
//! is independent of the others). Wire encoding is the caller's (see
//! docs/raft.md).

use crate::types::{Entry, Index, NodeId, Snapshot, Term};

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
    InstallSnapshot {
        term: Term,
        snapshot: Snapshot,
    },
    /// Sent after the snapshot is installed and durable.
    InstallSnapshotResponse {
        term: Term,
        index: Index,
    },
    /// Leader transfer: start an election now.
    TimeoutNow {
        term: Term,
    },
}

impl Message {
    pub fn term(&self) -> Term {
        match self {
            Message::Vote { term, .. }
            | Message::VoteResponse { term, .. }
            | Message::Append { term, .. }
            | Message::AppendResponse { term, .. }
            | Message::InstallSnapshot { term, .. }
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
