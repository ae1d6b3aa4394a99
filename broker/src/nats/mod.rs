//! The NATS client protocol and what serves it: the codec ([`proto`]), one
//! connection's state and tasks ([`conn`]), the subject trie ([`sublist`])
//! and the interest index built on it ([`interest`]).

pub mod conn;
pub mod interest;
pub mod proto;
pub mod sublist;
