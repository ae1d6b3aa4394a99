//! tern-broker: `tern-server`, the NATS-compatible broker.
//!
//! This crate owns configuration and flags, the NATS client protocol codec,
//! connections, subject routing within and across shards, monitoring HTTP,
//! and JetStream streams (the API and the durable publish path). Later
//! issues add TLS here. See
//! ARCHITECTURE.md for the publish paths.
//!
//! Module map:
//! - [`config`]: flags, TOML file, limits.
//! - [`auth`]: who may connect (token, user/password with bcrypt, NKeys)
//!   and per-user publish/subscribe permissions.
//! - [`nats`]: the client protocol ([`nats::proto`]: parser, encoder,
//!   CONNECT/INFO, subjects, `-ERR` texts), one connection's state and tasks
//!   ([`nats::conn`]), the subject trie ([`nats::sublist`]) and interest:
//!   local subscriptions, internal (JetStream) ones and other shards'
//!   ([`nats::interest`]).
//! - [`mesh`]: between the shards of one process: what crosses
//!   ([`mesh::message`]) and the outboxes ([`mesh::outbox`]).
//! - [`cluster`]: many Raft groups per shard, and the cluster simulator.
//! - [`jetstream`]: streams, consumers, their API, journal, Raft groups and
//!   recovery.
//! - [`shard`]: one shard's connections and the publish path.
//! - [`monitor`]: `/healthz`, `/varz`, `/connz`, `/subsz`, `/metrics`
//!   ([`monitor::http`]) and the reports behind them ([`monitor::stats`]).
//! - [`server`]: start-up and shard wiring.
//! - [`reload`]: SIGHUP, the configuration read again while running.

pub mod auth;
pub mod cluster;
pub mod config;
pub mod io_profile;
pub mod jetstream;
pub mod logger;
pub mod mesh;
pub mod monitor;
pub mod nats;
pub mod random;
pub mod reload;
pub mod server;
pub mod shard;
pub mod timestamp;
pub mod tls;
