//! What runs between nodes: many Raft groups per shard ([`multiraft`]) and
//! the deterministic cluster simulator that proves the replicated stream
//! code before it goes on the network ([`sim`]). The transport and routes
//! come with the cluster issue.

pub mod multiraft;
pub mod sim;
