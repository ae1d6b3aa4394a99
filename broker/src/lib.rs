//! tern-broker: `tern-server`, the NATS-compatible broker.
//!
//! This crate owns configuration and flags, the NATS client protocol codec,
//! connections, subject routing within and across shards, monitoring HTTP,
//! and JetStream streams (the API and the durable publish path). Later
//! issues add consumers, KV and object store, auth and TLS here. See
//! ARCHITECTURE.md for the publish paths.
//!
//! Module map:
//! - [`config`]: flags, TOML file, limits.
//! - [`proto`]: parser, encoder, CONNECT/INFO, subjects, `-ERR` texts.
//! - [`sublist`]: the subject trie with its match cache.
//! - [`cluster`]: many Raft groups per shard, and the cluster simulator.
//! - [`router`]: local subscriptions, internal (JetStream) ones and other
//!   shards' interest.
//! - [`jetstream`]: streams, their API, journal, Raft group and recovery.
//! - [`client`]: one connection's state and tasks.
//! - [`shard`]: one shard's connections and the publish path.
//! - [`peer`]: outboxes to the other shards.
//! - [`message`]: what crosses between shards.
//! - [`monitor`]: `/healthz`, `/varz`, `/connz`, `/subsz`, `/metrics`.
//! - [`server`]: start-up and shard wiring.

pub mod client;
pub mod cluster;
pub mod config;
pub mod jetstream;
pub mod logger;
pub mod message;
pub mod monitor;
pub mod peer;
pub mod proto;
pub mod router;
pub mod server;
pub mod shard;
pub mod stats;
pub mod sublist;
pub mod timestamp;
