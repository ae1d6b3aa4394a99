//! The full channel mesh between shards.
//!
//! One bounded SPSC ring per ordered pair of shards (glommio `shared_channel`,
//! lock-free, eventfd wake-up when the consumer sleeps). Ring `i -> j` carries
//! only what shard `i` sends to shard `j`, in order: per-pair FIFO is the
//! ordering guarantee the broker builds on (interest before messages).
//!
//! The mesh is wired in the main thread before the shards start, so peer ids
//! are shard indexes and nothing is shared between threads but the rings.
//! (glommio's own `MeshBuilder` shares an `Rc` across threads; we avoid it.)

use glommio::channels::shared_channel::{
    self, ConnectedReceiver, ConnectedSender, SharedReceiver, SharedSender,
};

/// Why a send did not happen; the message comes back.
#[derive(Debug, thiserror::Error)]
pub enum MeshError<T> {
    #[error("the ring to the peer shard is full")]
    Full(T),
    #[error("the peer shard has stopped")]
    Closed(T),
}

impl<T> MeshError<T> {
    pub fn into_inner(self) -> T {
        match self {
            MeshError::Full(message) | MeshError::Closed(message) => message,
        }
    }
}

/// One shard's unconnected ends of the mesh; `Send`, moved into the shard thread.
pub struct MeshEnds<T: Send + 'static> {
    index: usize,
    senders: Vec<Option<SharedSender<T>>>,
    receivers: Vec<Option<SharedReceiver<T>>>,
}

/// Wires a full mesh for `shard_count` shards, each ring holding `capacity` messages.
pub fn full_mesh<T: Send + 'static>(shard_count: usize, capacity: usize) -> Vec<MeshEnds<T>> {
    assert!(shard_count > 0);
    assert!(capacity > 0);
    let mut ends: Vec<MeshEnds<T>> = (0..shard_count)
        .map(|index| MeshEnds {
            index,
            senders: (0..shard_count).map(|_| None).collect(),
            receivers: (0..shard_count).map(|_| None).collect(),
        })
        .collect();
    for from in 0..shard_count {
        for to in 0..shard_count {
            if from == to {
                continue;
            }
            let (sender, receiver) = shared_channel::new_bounded(capacity);
            ends[from].senders[to] = Some(sender);
            ends[to].receivers[from] = Some(receiver);
        }
    }
    ends
}

impl<T: Send + 'static> MeshEnds<T> {
    /// Connects every ring end on the calling shard. All shards must call this
    /// concurrently: a sender connects only once its peer's receiver has.
    pub async fn connect(self) -> Mesh<T> {
        let senders: Vec<_> = self
            .senders
            .into_iter()
            .map(|sender| sender.map(|sender| glommio::spawn_local(sender.connect()).detach()))
            .collect();
        let receivers: Vec<_> = self
            .receivers
            .into_iter()
            .map(|receiver| receiver.map(|receiver| glommio::spawn_local(receiver.connect()).detach()))
            .collect();
        let mut connected_senders = Vec::with_capacity(senders.len());
        for sender in senders {
            connected_senders.push(match sender {
                Some(task) => Some(task.await.expect("mesh sender connect task cancelled")),
                None => None,
            });
        }
        let mut connected_receivers = Vec::with_capacity(receivers.len());
        for receiver in receivers {
            connected_receivers.push(match receiver {
                Some(task) => Some(Receiver {
                    inner: task.await.expect("mesh receiver connect task cancelled"),
                }),
                None => None,
            });
        }
        Mesh { index: self.index, senders: connected_senders, receivers: connected_receivers }
    }
}

fn mesh_error<T>(error: glommio::GlommioError<T>) -> MeshError<T> {
    use glommio::{GlommioError, ResourceType};
    match error {
        GlommioError::WouldBlock(ResourceType::Channel(message)) => MeshError::Full(message),
        GlommioError::Closed(ResourceType::Channel(message)) => MeshError::Closed(message),
        other => panic!("unexpected mesh send error: {other}"),
    }
}

/// The connected mesh as seen from one shard.
pub struct Mesh<T: Send + 'static> {
    index: usize,
    senders: Vec<Option<ConnectedSender<T>>>,
    receivers: Vec<Option<Receiver<T>>>,
}

/// The receiving end of one ring.
pub struct Receiver<T: Send + 'static> {
    inner: ConnectedReceiver<T>,
}

impl<T: Send + 'static> Receiver<T> {
    /// The next message, or `None` once the sending shard has stopped.
    pub async fn recv(&self) -> Option<T> {
        self.inner.recv().await
    }
}

impl<T: Send + 'static> Mesh<T> {
    pub fn index(&self) -> usize {
        self.index
    }

    pub fn shard_count(&self) -> usize {
        self.senders.len()
    }

    fn sender(&self, peer: usize) -> &ConnectedSender<T> {
        assert_ne!(peer, self.index, "a shard never sends to itself through the mesh");
        self.senders[peer].as_ref().expect("every peer has a sender")
    }

    /// Sends without waiting; a full ring hands the message back.
    pub fn try_send(&self, peer: usize, message: T) -> Result<(), MeshError<T>> {
        let sender = self.sender(peer);
        sender.try_send(message).map_err(mesh_error)
    }

    /// Sends, waiting while the ring is full (backpressure).
    pub async fn send(&self, peer: usize, message: T) -> Result<(), MeshError<T>> {
        let sender = self.sender(peer);
        sender.send(message).await.map_err(mesh_error)
    }

    /// Takes the receiving ends, `(peer, receiver)`, to be drained by the caller's tasks.
    pub fn take_receivers(&mut self) -> Vec<(usize, Receiver<T>)> {
        self.receivers
            .iter_mut()
            .enumerate()
            .filter_map(|(peer, receiver)| receiver.take().map(|receiver| (peer, receiver)))
            .collect()
    }

    /// Closes every outgoing ring: peers see `None` once they drain.
    pub fn close(&self) {
        for sender in self.senders.iter().flatten() {
            sender.close();
        }
    }
}
