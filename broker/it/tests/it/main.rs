//! tern-broker's integration tests: one binary (one build of the helpers in
//! `common/`), one module per area. Each test spawns real servers (tern and,
//! for the differential half, nats-server 2.15.1) and drives them with real
//! clients. Run one module with `cargo test -p tern-it <module>::`.

#[macro_use]
mod common;

mod auth;
mod cluster_control;
mod cluster_core;
mod cluster_failover;
mod cluster_faults;
mod cluster_jetstream;
mod cluster_lists;
mod cluster_membership;
mod cluster_monitor;
mod cluster_push;
mod cluster_tls;
mod core_pubsub;
mod jetstream_api;
mod jetstream_consumer;
mod jetstream_consumer_restart;
mod jetstream_crash;
mod jetstream_damage;
mod jetstream_gaps;
mod jetstream_io_profile;
mod jetstream_kv;
mod jetstream_object;
mod jetstream_publish;
mod jetstream_push;
mod jetstream_raw_journal;
mod jetstream_restart;
mod jetstream_retention;
mod jetstream_storage_full;
mod jetstream_store_limits;
mod jetstream_ttl;
mod lifecycle;
mod limits;
mod memlock;
mod monitoring;
mod protocol_raw;
mod python_clients;
mod reload;
mod shards;
mod tls;
