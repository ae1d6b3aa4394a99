//! What the routing layers of two shards tell each other: interest changes
//! (a shard's own, and other nodes' it heard on its routes), their
//! acknowledgements, and forwarded messages. Payloads cross as `Bytes`
//! (reference counted), nothing else is shared.
//!
//! Ordering: each ring between two shards is FIFO, and a shard sends its
//! interest changes (its own, and other nodes' it heard on its routes) and
//! its forwarded messages on the same ring, so a peer always learns of a
//! subscription before any message that relies on it.

use bytes::Bytes;

/// A shard's interest in `subject` (and `queue`) changed: it now has `count`
/// local subscriptions for it (0 = none), `clients` of them clients' (for a
/// plain subject 0 or 1: presence), the part other nodes are told of.
#[derive(Debug, Clone)]
pub struct InterestUpdate {
    /// Increases by one per update a shard broadcasts.
    pub sequence: u64,
    pub subject: Bytes,
    pub queue: Option<Bytes>,
    pub count: u32,
    pub clients: u32,
}

/// A published message forwarded to a shard with matching interest. The
/// receiving shard delivers it to its local plain subscriptions, and to one
/// local member of each queue group named in `queues`.
#[derive(Debug, Clone)]
pub struct RoutedMessage {
    /// `subject`, then `reply`, then the message (header block + payload),
    /// then the routing subject if it differs, in one allocation.
    pub data: Bytes,
    pub subject_bytes: u32,
    /// Bytes of a routing subject stored after the message (0: the subject
    /// routes). JetStream deliveries route by the request's inbox and show
    /// the stored subject.
    pub routing_bytes: u32,
    pub reply_bytes: u32,
    pub has_reply: bool,
    pub header_bytes: u32,
    pub queues: Vec<Bytes>,
    /// Came from another node: for this node's clients only.
    pub from_node: bool,
}

impl RoutedMessage {
    pub fn new(
        subject: &[u8],
        reply: Option<&[u8]>,
        header_bytes: usize,
        message: &[u8],
        queues: Vec<Bytes>,
    ) -> Self {
        Self::routed_as(subject, subject, reply, header_bytes, message, queues)
    }

    /// A message matched against `routing` but delivered as `subject`.
    pub fn routed_as(
        routing: &[u8],
        subject: &[u8],
        reply: Option<&[u8]>,
        header_bytes: usize,
        message: &[u8],
        queues: Vec<Bytes>,
    ) -> Self {
        let routing_stored: &[u8] = if routing == subject { &[] } else { routing };
        let reply_slice = reply.unwrap_or(&[]);
        let mut data = Vec::with_capacity(
            subject.len() + reply_slice.len() + message.len() + routing_stored.len(),
        );
        data.extend_from_slice(subject);
        data.extend_from_slice(reply_slice);
        data.extend_from_slice(message);
        data.extend_from_slice(routing_stored);
        assert!(header_bytes <= message.len());
        RoutedMessage {
            data: Bytes::from(data),
            subject_bytes: subject.len() as u32,
            routing_bytes: routing_stored.len() as u32,
            reply_bytes: reply_slice.len() as u32,
            has_reply: reply.is_some(),
            header_bytes: header_bytes as u32,
            queues,
            from_node: false,
        }
    }

    pub fn subject(&self) -> &[u8] {
        &self.data[..self.subject_bytes as usize]
    }

    pub fn reply(&self) -> Option<&[u8]> {
        let start = self.subject_bytes as usize;
        self.has_reply
            .then(|| &self.data[start..start + self.reply_bytes as usize])
    }

    pub fn message(&self) -> &[u8] {
        let end = self.data.len() - self.routing_bytes as usize;
        &self.data[(self.subject_bytes + self.reply_bytes) as usize..end]
    }

    /// The subject interest is matched against.
    pub fn routing_subject(&self) -> &[u8] {
        if self.routing_bytes == 0 {
            self.subject()
        } else {
            &self.data[self.data.len() - self.routing_bytes as usize..]
        }
    }
}

/// Another node's interest update, heard by the sending shard on its route
/// to node `node_id` and relayed to its node's other shards ahead of any
/// later message from that route (`routing::interest`).
#[derive(Debug, Clone)]
pub struct NodeInterestRelay {
    pub node_id: u64,
    pub subject: Bytes,
    pub queue: Option<Bytes>,
    pub weight: u32,
}

/// What the routing layer of one shard tells another's.
#[derive(Debug)]
pub enum RoutingMessage {
    Interest(InterestUpdate),
    NodeInterest(NodeInterestRelay),
    /// The sender's route to node `node_id` closed or was replaced: what it
    /// said is forgotten (a new link says it all again).
    NodeSourceClosed {
        node_id: u64,
    },
    /// The sender has applied every interest update up to `sequence` from the receiver.
    InterestApplied {
        sequence: u64,
    },
    Deliver(RoutedMessage),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routed_message_round_trips() {
        let routed = RoutedMessage::new(b"a.b", Some(b"_INBOX.1"), 2, b"h:xyz", vec![]);
        assert_eq!(routed.subject(), b"a.b");
        assert_eq!(routed.reply(), Some(&b"_INBOX.1"[..]));
        assert_eq!(routed.message(), b"h:xyz");
        let no_reply = RoutedMessage::new(b"a", None, 0, b"", vec![]);
        assert_eq!(no_reply.reply(), None);
        assert_eq!(no_reply.message(), b"");
        let empty_reply = RoutedMessage::new(b"a", Some(b""), 0, b"x", vec![]);
        assert_eq!(empty_reply.reply(), Some(&b""[..]));
    }

    #[test]
    fn a_routed_message_keeps_its_parts() {
        let plain = RoutedMessage::new(b"a.b", Some(b"r"), 2, b"h:xyz", Vec::new());
        assert_eq!(plain.subject(), b"a.b");
        assert_eq!(plain.routing_subject(), b"a.b");
        assert_eq!(plain.reply(), Some(&b"r"[..]));
        assert_eq!(plain.message(), b"h:xyz");
        assert_eq!(plain.routing_bytes, 0);

        let delivery =
            RoutedMessage::routed_as(b"_INBOX.1", b"orders.1", None, 0, b"pay", Vec::new());
        assert_eq!(delivery.subject(), b"orders.1");
        assert_eq!(delivery.routing_subject(), b"_INBOX.1");
        assert_eq!(delivery.reply(), None);
        assert_eq!(delivery.message(), b"pay");
    }
}
