//! Who is subscribed where and how a message finds them: the subject trie
//! ([`sublist`]), one shard's interest index over its clients', its
//! internal sinks', other shards' and other nodes' subscriptions
//! ([`interest`]), what shards tell each other about it ([`message`]), and
//! one shard's publish path over them ([`shard_routing`]).

pub mod interest;
pub mod message;
pub mod shard_routing;
pub mod sublist;
