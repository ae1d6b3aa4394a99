//! tern-raft: Raft as a sans-IO library.
//!
//! This crate will own (issue "Raft as a sans-IO library"): leader election
//! with pre-vote and check-quorum, pipelined log replication, commit on a
//! quorum of durable copies, snapshots, membership changes, leader transfer and
//! read index — driven by the caller with messages, ticks and persistence
//! completions, with no sockets, files, clocks or randomness inside — plus a
//! seeded deterministic simulator with invariant checkers and a canary bug.
//!
//! Nothing is implemented yet.
