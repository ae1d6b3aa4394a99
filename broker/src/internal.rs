//! The server's own subscriptions: what an internal subscriber (JetStream
//! today; the system account later) hands the router, and the sink the
//! router delivers matching messages through. The router calls a sink
//! without knowing what is behind it, so it names no subscriber's types.

use std::rc::Rc;

use bytes::Bytes;

use crate::proto::encode::Delivery;

/// Where messages an internal subscription matched go.
pub trait InternalSink {
    /// Takes one message; whether it was taken (a "no responders" status
    /// is sent to a requester nobody took a message from). `local`: it was
    /// published on this shard (false: forwarded by another shard or node).
    fn receive(&self, delivery: &Delivery<'_>, local: bool) -> bool;

    /// What the sink is, for logs and `Debug` ("stream", "ack", ...).
    fn kind(&self) -> &'static str;
}

/// Who sees messages published elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InternalScope {
    /// Matched on this shard only: never announced to other shards.
    Shard,
    /// Announced to this node's other shards, which forward matching
    /// messages here; other nodes are not told.
    Node,
    /// Announced to the other shards and to the other nodes (a stream's
    /// subjects, acks and direct gets live on the nodes that hold it).
    Cluster,
}

/// A subscription the server holds itself. Announced ones are counted and
/// broadcast like a client's, so other shards forward matching messages
/// here; unannounced ones are matched on this shard only.
pub struct InternalSubscription {
    pub subject: Bytes,
    pub scope: InternalScope,
    pub sink: Rc<dyn InternalSink>,
}

impl InternalSubscription {
    pub fn new(subject: Bytes, scope: InternalScope, sink: Rc<dyn InternalSink>) -> Self {
        assert!(!subject.is_empty());
        InternalSubscription {
            subject,
            scope,
            sink,
        }
    }

    /// Whether this node's other shards forward matching messages here.
    pub fn announced(&self) -> bool {
        self.scope != InternalScope::Shard
    }

    /// Whether other nodes route matching messages here.
    pub fn cluster_wide(&self) -> bool {
        self.scope == InternalScope::Cluster
    }
}

impl std::fmt::Debug for InternalSubscription {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "internal {} {:?}",
            self.sink.kind(),
            String::from_utf8_lossy(&self.subject)
        )
    }
}
