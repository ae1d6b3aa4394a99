//! The JetStream API's wire side: request bodies as nats-server decodes
//! them ([`requests`]), response bodies ([`responses`]), its errors and
//! their codes ([`error`]) and the JSON rules both follow ([`json`]).
//! Subject dispatch is `JetStream::on_api` (jetstream/mod.rs).

pub mod error;
pub mod json;
pub mod requests;
pub mod responses;
