//! Links between the shards of one process ("mesh"; "cluster" is between
//! processes): the per-peer outboxes that put messages on the rings
//! ([`outbox`]), generic over the message type the node defines
//! (`shard::message::ShardMessage`), and the sending interface each layer
//! below the node holds for its own messages ([`PeerSender`]).

pub mod outbox;

/// What the node's shard message must offer the outboxes: the coalesced
/// acknowledgement of interest updates they send on their own.
pub trait MeshMessage: Sized {
    /// "Every interest update from you up to `sequence` is applied here."
    fn acknowledgement(sequence: u64) -> Self;
}

/// How a layer below the node sends its own messages (`M`) to the other
/// shards of this node without naming the node's message type: the node's
/// outboxes implement it for every `M` its message wraps.
pub trait PeerSender<M> {
    /// Queues `message` for shard `peer` (never this one) without waiting.
    fn send(&self, peer: usize, message: M);
    /// This shard's index.
    fn index(&self) -> usize;
    /// Shards in this node.
    fn shard_count(&self) -> usize;
    /// Sends `make()` to every other shard.
    fn broadcast(&self, make: &mut dyn FnMut() -> M) {
        for peer in (0..self.shard_count()).filter(|&peer| peer != self.index()) {
            self.send(peer, make());
        }
    }
}
