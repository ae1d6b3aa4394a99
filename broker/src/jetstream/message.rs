//! What JetStream on one shard tells JetStream on another: API requests for
//! the shard that can answer them, catalog commands between the meta shard
//! and a stream's owner, the meta group's state, replies for the origin
//! shard to publish, and listing gathers. The node wraps them into its
//! shard messages ([`crate::mesh::PeerSender`]); JetStream never names
//! the node's message type.

use bytes::Bytes;

use super::{ApiRequest, GatherDetail, Gathered, OwnerCommand};

#[derive(Debug)]
pub enum JetStreamMessage {
    /// A `$JS.API` request for the shard that can answer it.
    Api(Box<ApiRequest>),
    /// Meta shard -> owner: a catalog change to carry out.
    Owner(Box<OwnerCommand>),
    /// Owner -> meta shard: creating the stream failed; drop the reservation.
    CreateFailed {
        name: String,
    },
    /// Meta shard -> owner, in a cluster: where one of its streams lives
    /// (`None`: deleted).
    Placement {
        name: String,
        peers: Option<Vec<u64>>,
    },
    /// Owner -> meta shard, in a cluster: the deletion the meta entry at
    /// `meta_index` asked for is done (this node's copy is gone).
    Deleted {
        meta_index: u64,
    },
    /// Meta shard -> every shard, in a cluster: whether this node's meta
    /// state is caught up (the placements sent before it are current), so
    /// a stream it does not know does not exist.
    MetaReady(bool),
    /// Meta shard -> every shard, in a cluster: who leads the meta group.
    MetaLeader(Option<u64>),
    /// An API answer for the origin shard to publish: (reply, header block, payload).
    Reply(Box<(Bytes, Bytes, Bytes)>),
    /// Asks for this shard's streams (listings, account info).
    Gather {
        id: u64,
        origin: usize,
        detail: GatherDetail,
    },
    Gathered {
        id: u64,
        gathered: Box<Gathered>,
    },
}
