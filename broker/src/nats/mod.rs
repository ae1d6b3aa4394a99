//! The NATS client protocol's connections: one connection's state and
//! tasks ([`conn`]) and the interest index of a shard ([`interest`]; it
//! moves to `routing/` with the publish path). The codec is
//! [`crate::proto`]; the subject trie [`crate::routing::sublist`].

pub mod conn;
pub mod interest;
