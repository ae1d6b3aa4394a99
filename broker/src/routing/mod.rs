//! Who is subscribed where and how a message finds them: the subject trie
//! ([`sublist`]), one shard's interest index over its clients', its
//! internal sinks', other shards' and other nodes' subscriptions
//! ([`interest`]), and what shards tell each other about it ([`message`]).
//! The publish path moves here from `shard.rs` (docs/ARCHITECTURE: layers).

pub mod interest;
pub mod message;
pub mod sublist;
