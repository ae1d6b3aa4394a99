//! The NATS client protocol's connections: one connection's state and
//! tasks ([`conn`]). The codec is [`crate::proto`]; interest and the
//! publish path are [`crate::routing`]'s.

pub mod conn;
