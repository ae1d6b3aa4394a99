//! Monitoring: the HTTP endpoints ([`http`]) and the per-shard counters and
//! reports they gather ([`stats`]).

pub mod http;
pub mod stats;
