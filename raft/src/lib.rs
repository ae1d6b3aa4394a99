//! tern-raft: Raft as a sans-IO library, for many groups per shard.
//!
//! The caller feeds a [`Node`] ticks, messages and persistence completions;
//! it returns, in a [`Ready`], hard state and entries to persist, messages to
//! send (some only after persisting), committed entries to apply, snapshots
//! to install and linearizable read states. No sockets, files, clocks or
//! randomness inside (the election-timeout randomness is seeded by the
//! caller). See docs/raft.md for the contract.
//!
//! - [`types`]: ids, entries, hard state, membership, snapshots.
//! - [`message`]: what members send each other.
//! - [`log`]: the log as one node sees it.
//! - [`node`]: the protocol: pre-vote, check-quorum, pipelined replication
//!   with flow control, commit on durable quorums, snapshots, single-voter
//!   membership changes, leader transfer, read index.
//! - [`wire`]: the canonical byte encoding of messages, bounded decoding.
//! - [`sim`]: the deterministic seeded simulator and its invariant checkers.

pub mod log;
pub mod message;
pub mod node;
pub mod sim;
pub mod types;
pub mod wire;

pub use message::{Envelope, Message};
pub use node::{
    chunks_before_install, Canary, Config, Node, NodeCounters, PeerStatus, ProposeError, ReadState,
    Ready, Restore, Role, SnapshotChunk, SnapshotRead,
};
pub use types::{Entry, EntryKind, HardState, Index, Membership, NodeId, Snapshot, Term};
