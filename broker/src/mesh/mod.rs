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
    /// Records that interest updates from `peer` up to `sequence` are
    /// applied here; the acknowledgement is coalesced and sent by the
    /// outbox ([`MeshMessage::acknowledgement`]).
    fn acknowledge(&self, peer: usize, sequence: u64);
    /// Sends `make()` to every other shard.
    fn broadcast(&self, make: &mut dyn FnMut() -> M) {
        for peer in (0..self.shard_count()).filter(|&peer| peer != self.index()) {
            self.send(peer, make());
        }
    }
}

/// Which of this node's shards said they finished starting (their
/// JetStream, if any, is there to take messages): the shard counts the
/// announcements, and whoever must wait for every shard waits here.
pub struct StartBarrier {
    shard_count: usize,
    started_peers: std::cell::Cell<usize>,
    waiters: tern_shard::Waiters,
}

impl StartBarrier {
    pub fn new(shard_count: usize) -> StartBarrier {
        assert!(shard_count > 0);
        StartBarrier {
            shard_count,
            started_peers: std::cell::Cell::new(0),
            waiters: tern_shard::Waiters::new(),
        }
    }

    /// Another shard announced it started (once per peer).
    pub fn peer_started(&self) {
        let started = self.started_peers.get() + 1;
        assert!(started < self.shard_count, "each peer announces once");
        self.started_peers.set(started);
        self.waiters.wake_all();
    }

    /// Waits until every other shard said it started.
    pub async fn wait(&self) {
        self.waiters
            .wait_until(|| self.started_peers.get() + 1 >= self.shard_count)
            .await;
    }
}
