//! tern-broker: `tern-server`, the NATS-compatible broker.
//!
//! This crate owns configuration and flags, the NATS client protocol codec,
//! connections, subject routing within and across shards, monitoring HTTP,
//! and JetStream streams (the API and the durable publish path). Later
//! issues add TLS here. See
//! ARCHITECTURE.md for the publish paths.
//!
//! Module map:
//! - [`config`]: flags, TOML file, limits; [`duration`]: durations as
//!   operators write them.
//! - [`auth`]: who may connect (token, user/password with bcrypt, NKeys)
//!   and per-user publish/subscribe permissions.
//! - [`proto`]: the client protocol's codec: parser, encoder, CONNECT/INFO,
//!   subjects, `-ERR` texts.
//! - [`routing`]: who is subscribed where: the subject trie
//!   ([`routing::sublist`]) and a shard's interest: local subscriptions,
//!   internal ones, other shards' and other nodes'
//!   ([`routing::interest`]), and what shards tell each other about it
//!   ([`routing::message`]); the publish path moves here.
//! - [`internal`]: the server's own subscriptions and the sinks the router
//!   delivers them through (JetStream's are `jetstream::sink`).
//! - [`nats`]: one connection's state and tasks ([`nats::conn`]).
//! - [`mesh`]: between the shards of one process: the outboxes
//!   ([`mesh::outbox`]), generic over the node's message
//!   (`shard::message`), and the sender each layer holds.
//! - [`cluster`]: many Raft groups per shard, and the cluster simulator.
//! - [`jetstream`]: streams, consumers, their API, journal, Raft groups and
//!   recovery.
//! - [`shard`]: one shard's connections and the publish path.
//! - [`monitor`]: `/healthz`, `/varz`, `/connz`, `/subsz`, `/metrics`,
//!   `/jsz` ([`monitor::http`]); [`stats`]: the shard counters and reports
//!   behind them.
//! - [`server`]: start-up and shard wiring.
//! - [`reload`]: SIGHUP, the configuration read again while running.

pub mod auth;
pub mod cluster;
pub mod config;
pub mod duration;
pub mod internal;
pub mod io_profile;
pub mod jetstream;
pub mod logger;
pub mod mesh;
pub mod monitor;
pub mod nats;
pub mod proto;
pub mod random;
pub mod reload;
pub mod routing;
pub mod server;
pub mod shard;
pub mod stats;
pub mod timestamp;
pub mod tls;
