//! Links between the shards of one process ("mesh"; "cluster" is between
//! processes): what crosses them ([`message`]) and the per-peer outboxes
//! that put it on the rings ([`outbox`]).

pub mod message;
pub mod outbox;
