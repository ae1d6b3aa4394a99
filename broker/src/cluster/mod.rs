//! What runs between nodes: route connections between same-index shards
//! of the nodes ([`frame`], [`steer`], [`link`], [`routes`]), many Raft
//! groups per shard ([`multiraft`]), and the deterministic cluster
//! simulator that proves the replicated stream code before it goes on the
//! network ([`sim`]).

pub mod frame;
pub mod link;
pub mod multiraft;
pub mod routes;
pub mod sim;
pub mod steer;
