//! JetStream: streams stored on the journal and block store, each a Raft
//! group on the shard its name hashes to, and the `$JS.API` that manages them.
//!
//! Module map:
//! - [`error`]: JetStream API errors (codes and exact descriptions).
//! - [`json`]: strict request decoding with nats-server's error texts.
//! - [`stream_config`]: `StreamConfig`: parsing, normalisation, validation,
//!   update rules, and its JSON as nats-server writes it.
