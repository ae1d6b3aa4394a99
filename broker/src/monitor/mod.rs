//! Monitoring: the HTTP endpoints ([`http`]), `/jsz` ([`jsz`]), what
//! they add in a cluster ([`cluster`]) and the per-shard counters and
//! reports they gather ([`stats`]).

pub mod cluster;
pub mod http;
pub mod jsz;
