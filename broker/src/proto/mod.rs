//! The NATS client protocol: parsing what clients send, encoding what the
//! server sends, CONNECT options, INFO, subjects, and the exact `-ERR` texts.
//! Everything here is sans-IO and allocation-free on the hot path.

pub mod connect;
pub mod encode;
pub mod errors;
pub mod info;
pub mod parser;
pub mod subject;
