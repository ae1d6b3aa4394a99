//! The readable trace: a bounded ring buffer of the most recent simulator
//! events (ticks, deliveries, drops, persistence, crashes, role changes,
//! commits, client actions), formatted only when a violation is reported.

use std::collections::VecDeque;
use std::fmt;

use crate::message::Message;
use crate::node::Role;
use crate::types::{Index, NodeId, Term};

/// A message reduced to what a reader of the trace needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageSummary {
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
    Append {
        term: Term,
        prev_index: Index,
        prev_term: Term,
        entries: u64,
        commit: Index,
        read_context: u64,
    },
    AppendResponse {
        term: Term,
        success: bool,
        match_index: Index,
        hint: Index,
    },
    InstallSnapshot {
        term: Term,
        index: Index,
        snapshot_term: Term,
        session: u64,
        offset: u64,
        chunk_bytes: u64,
        last: bool,
    },
    SnapshotReceived {
        term: Term,
        index: Index,
        session: u64,
        received: u64,
        gap: bool,
    },
    InstallSnapshotResponse {
        term: Term,
        index: Index,
    },
    TimeoutNow {
        term: Term,
    },
}

impl MessageSummary {
    pub fn of(message: &Message) -> MessageSummary {
        match message {
            Message::Vote {
                term,
                last_index,
                last_term,
                pre_vote,
                transfer,
            } => MessageSummary::Vote {
                term: *term,
                last_index: *last_index,
                last_term: *last_term,
                pre_vote: *pre_vote,
                transfer: *transfer,
            },
            Message::VoteResponse {
                term,
                granted,
                pre_vote,
            } => MessageSummary::VoteResponse {
                term: *term,
                granted: *granted,
                pre_vote: *pre_vote,
            },
            Message::Append {
                term,
                prev_index,
                prev_term,
                entries,
                commit,
                read_context,
            } => MessageSummary::Append {
                term: *term,
                prev_index: *prev_index,
                prev_term: *prev_term,
                entries: entries.len() as u64,
                commit: *commit,
                read_context: *read_context,
            },
            Message::AppendResponse {
                term,
                success,
                match_index,
                hint,
                ..
            } => MessageSummary::AppendResponse {
                term: *term,
                success: *success,
                match_index: *match_index,
                hint: *hint,
            },
            Message::InstallSnapshot {
                term,
                index,
                snapshot_term,
                session,
                offset,
                last,
                chunk,
                ..
            } => MessageSummary::InstallSnapshot {
                term: *term,
                index: *index,
                snapshot_term: *snapshot_term,
                session: *session,
                offset: *offset,
                chunk_bytes: chunk.len() as u64,
                last: *last,
            },
            Message::SnapshotReceived {
                term,
                index,
                session,
                received,
                gap,
            } => MessageSummary::SnapshotReceived {
                term: *term,
                index: *index,
                session: *session,
                received: *received,
                gap: *gap,
            },
            Message::InstallSnapshotResponse { term, index } => {
                MessageSummary::InstallSnapshotResponse {
                    term: *term,
                    index: *index,
                }
            }
            Message::TimeoutNow { term } => MessageSummary::TimeoutNow { term: *term },
        }
    }
}

impl fmt::Display for MessageSummary {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MessageSummary::Vote {
                term,
                last_index,
                last_term,
                pre_vote,
                transfer,
            } => {
                let kind = if pre_vote { "PreVote" } else { "Vote" };
                let transfer = if transfer { " transfer" } else { "" };
                write!(
                    formatter,
                    "{kind} term={term} last={last_index}/{last_term}{transfer}"
                )
            }
            MessageSummary::VoteResponse {
                term,
                granted,
                pre_vote,
            } => {
                let kind = if pre_vote {
                    "PreVoteResponse"
                } else {
                    "VoteResponse"
                };
                write!(formatter, "{kind} term={term} granted={granted}")
            }
            MessageSummary::Append {
                term,
                prev_index,
                prev_term,
                entries,
                commit,
                read_context,
            } => {
                let entries = if entries == 0 {
                    "none".to_string()
                } else {
                    format!("{}..={}", prev_index + 1, prev_index + entries)
                };
                write!(
                    formatter,
                    "Append term={term} prev={prev_index}/{prev_term} entries={entries} commit={commit}"
                )?;
                if read_context != 0 {
                    write!(formatter, " read={read_context}")?;
                }
                Ok(())
            }
            MessageSummary::AppendResponse {
                term,
                success,
                match_index,
                hint,
            } => {
                if success {
                    write!(
                        formatter,
                        "AppendResponse term={term} ok match={match_index}"
                    )
                } else {
                    write!(formatter, "AppendResponse term={term} reject hint={hint}")
                }
            }
            MessageSummary::InstallSnapshot {
                term,
                index,
                snapshot_term,
                session,
                offset,
                chunk_bytes,
                last,
            } => write!(
                formatter,
                "InstallSnapshot term={term} snapshot={index}/{snapshot_term} \
                 session={session} bytes={offset}+{chunk_bytes}{}",
                if last { " last" } else { "" }
            ),
            MessageSummary::SnapshotReceived {
                term,
                index,
                session,
                received,
                gap,
            } => write!(
                formatter,
                "SnapshotReceived term={term} snapshot={index} session={session} received={received}{}",
                if gap { " gap" } else { "" }
            ),
            MessageSummary::InstallSnapshotResponse { term, index } => {
                write!(
                    formatter,
                    "InstallSnapshotResponse term={term} index={index}"
                )
            }
            MessageSummary::TimeoutNow { term } => write!(formatter, "TimeoutNow term={term}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEvent {
    Phase(&'static str),
    Tick,
    Deliver {
        from: NodeId,
        to: NodeId,
        message: MessageSummary,
    },
    Drop {
        from: NodeId,
        to: NodeId,
        message: MessageSummary,
        reason: &'static str,
    },
    Role {
        node: NodeId,
        role: Role,
        term: Term,
    },
    Commit {
        node: NodeId,
        index: Index,
    },
    Persisted {
        node: NodeId,
        ready: u64,
        durable_last: Index,
    },
    Crash {
        node: NodeId,
        lost_writes: usize,
        durable_last: Index,
    },
    Restart {
        node: NodeId,
        durable_last: Index,
        acknowledged: Index,
        corrupt_from: Option<Index>,
        /// Entries lost after the snapshot, the hard state kept.
        lost_entries: Option<usize>,
    },
    /// A node's whole store was lost; its host comes back as `comes_back_as`.
    Wipe {
        node: NodeId,
        comes_back_as: NodeId,
    },
    /// A wiped host's new id is a voter in the leader's applied state.
    Joined {
        node: NodeId,
    },
    Network(String),
    Propose {
        node: NodeId,
        id: u64,
        index: Index,
    },
    Acknowledged {
        node: NodeId,
        id: u64,
        index: Index,
    },
    Membership {
        node: NodeId,
        change: String,
    },
    Transfer {
        from: NodeId,
        to: NodeId,
    },
    ReadStart {
        node: NodeId,
        context: u64,
        committed: Index,
    },
    ReadState {
        node: NodeId,
        context: u64,
        index: Index,
    },
    Compact {
        node: NodeId,
        index: Index,
    },
    InstallSnapshot {
        node: NodeId,
        index: Index,
    },
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceEvent::Phase(name) => write!(formatter, "=== {name} phase ==="),
            TraceEvent::Tick => write!(formatter, "tick"),
            TraceEvent::Deliver { from, to, message } => {
                write!(formatter, "deliver {from}->{to} {message}")
            }
            TraceEvent::Drop {
                from,
                to,
                message,
                reason,
            } => write!(formatter, "drop ({reason}) {from}->{to} {message}"),
            TraceEvent::Role { node, role, term } => {
                write!(formatter, "node {node} is {role:?} in term {term}")
            }
            TraceEvent::Commit { node, index } => {
                write!(formatter, "node {node} commit={index}")
            }
            TraceEvent::Persisted {
                node,
                ready,
                durable_last,
            } => write!(
                formatter,
                "node {node} ready {ready} durable (log ends at {durable_last})"
            ),
            TraceEvent::Crash {
                node,
                lost_writes,
                durable_last,
            } => write!(
                formatter,
                "node {node} CRASH: lost {lost_writes} unsynced writes, durable log ends at {durable_last}"
            ),
            TraceEvent::Restart {
                node,
                durable_last,
                acknowledged,
                corrupt_from,
                lost_entries,
            } => {
                write!(
                    formatter,
                    "node {node} RESTART: log ends at {durable_last}, acknowledged {acknowledged}"
                )?;
                if let Some(index) = corrupt_from {
                    write!(formatter, ", entry {index} corrupt (log cut before it)")?;
                }
                if let Some(lost) = lost_entries {
                    write!(formatter, ", {lost} entries after the snapshot lost (hard state kept)")?;
                }
                Ok(())
            }
            TraceEvent::Network(change) => write!(formatter, "network: {change}"),
            TraceEvent::Propose { node, id, index } => {
                write!(formatter, "client proposal #{id} to node {node} at index {index}")
            }
            TraceEvent::Acknowledged { node, id, index } => write!(
                formatter,
                "client proposal #{id} acknowledged by node {node} (index {index})"
            ),
            TraceEvent::Membership { node, change } => {
                write!(formatter, "node {node} proposes {change}")
            }
            TraceEvent::Transfer { from, to } => {
                write!(formatter, "node {from} transfers leadership to {to}")
            }
            TraceEvent::ReadStart {
                node,
                context,
                committed,
            } => write!(
                formatter,
                "read #{context} at node {node} (committed anywhere: {committed})"
            ),
            TraceEvent::ReadState {
                node,
                context,
                index,
            } => write!(formatter, "read #{context} at node {node} -> index {index}"),
            TraceEvent::Wipe {
                node,
                comes_back_as,
            } if comes_back_as == node => write!(
                formatter,
                "node {node} WIPED: it comes back under the same id with an empty store"
            ),
            TraceEvent::Wipe {
                node,
                comes_back_as,
            } => write!(
                formatter,
                "node {node} WIPED: its host comes back as node {comes_back_as}"
            ),
            TraceEvent::Joined { node } => write!(formatter, "node {node} joined"),
            TraceEvent::Compact { node, index } => {
                write!(formatter, "node {node} compacts to {index}")
            }
            TraceEvent::InstallSnapshot { node, index } => {
                write!(formatter, "node {node} installs snapshot {index}")
            }
        }
    }
}

/// The last `capacity` events, each with the tick it happened in.
#[derive(Debug)]
pub struct Trace {
    events: VecDeque<(u64, TraceEvent)>,
    capacity: usize,
}

impl Trace {
    pub fn new(capacity: usize) -> Trace {
        Trace {
            events: VecDeque::with_capacity(capacity.min(4096)),
            capacity,
        }
    }

    pub fn record(&mut self, tick: u64, event: TraceEvent) {
        if self.capacity == 0 {
            return;
        }
        if self.events.len() == self.capacity {
            self.events.pop_front();
        }
        self.events.push_back((tick, event));
    }

    /// Oldest first; consecutive bare ticks are folded into one line.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::with_capacity(self.events.len());
        let mut previous_was_tick = false;
        for (tick, event) in &self.events {
            let is_tick = *event == TraceEvent::Tick;
            if is_tick && previous_was_tick {
                lines.pop();
            }
            previous_was_tick = is_tick;
            lines.push(format!("t={tick:<6} {event}"));
        }
        lines
    }
}
