//! Who is subscribed where and how a message finds them. Today: the subject
//! trie ([`sublist`]); the interest index and the publish path move here
//! from `nats/interest.rs` and `shard.rs` (docs/ARCHITECTURE: layers).

pub mod message;
pub mod sublist;
