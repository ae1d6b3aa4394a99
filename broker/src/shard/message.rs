//! What crosses between the shards of one node: one enum, owned by the
//! node, wrapping each layer's own messages. Only these messages cross;
//! payloads cross as `Bytes` (reference counted), nothing else is shared.
//!
//! The layers below never name this type: each holds a
//! [`PeerSender`](crate::mesh::PeerSender) of its own message type, which
//! the node's outboxes implement by wrapping ([`From`] below).

use std::sync::Arc;

use crate::jetstream::message::JetStreamMessage;
use crate::mesh::MeshMessage;
use crate::reload::Settings;
use crate::routing::message::RoutingMessage;
use crate::stats::{ReportKind, ShardReport};

#[derive(Debug)]
pub enum ShardMessage {
    /// Interest and forwarded messages (`routing`).
    Routing(RoutingMessage),
    ReportRequest {
        id: u64,
        kind: ReportKind,
    },
    Report {
        id: u64,
        report: Box<ShardReport>,
    },
    /// The sender finished starting (JetStream recovered, its streams'
    /// interest applied everywhere); clients may connect once all have.
    Started,
    JetStream(JetStreamMessage),
    /// Shard 0 -> every shard, on SIGHUP: the settings to swap in.
    Reload(Arc<Settings>),
}

impl From<RoutingMessage> for ShardMessage {
    fn from(message: RoutingMessage) -> Self {
        ShardMessage::Routing(message)
    }
}

impl From<JetStreamMessage> for ShardMessage {
    fn from(message: JetStreamMessage) -> Self {
        ShardMessage::JetStream(message)
    }
}

impl MeshMessage for ShardMessage {
    fn acknowledgement(sequence: u64) -> Self {
        ShardMessage::Routing(RoutingMessage::InterestApplied { sequence })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_messages_stay_small() {
        // Every ring slot holds one ShardMessage by value.
        assert!(
            std::mem::size_of::<ShardMessage>() <= 96,
            "{}",
            std::mem::size_of::<ShardMessage>()
        );
    }
}
