//! What runs between nodes: route connections between same-index shards
//! of the nodes ([`frame`], [`steer`], [`link`], [`routes`]) and many Raft
//! groups per shard ([`multiraft`]). The deterministic cluster simulator
//! that proves the replicated stream code is `jetstream::sim`.

pub mod frame;
pub mod link;
pub mod multiraft;
pub mod routes;
pub mod steer;

/// The Raft id of a node without a JetStream store (and of a store written
/// before stores had identities, `jetstream::identity`): FNV-1a 64 of the
/// server name's bytes (never 0, which Raft reads as "no vote").
pub fn node_id(server_name: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in server_name.as_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash.max(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn node_ids_are_stable_and_never_zero() {
        // Known values: a change here renames every node in every group.
        assert_eq!(super::node_id(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::node_id("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(super::node_id("n1"), super::node_id("n2"));
    }
}
