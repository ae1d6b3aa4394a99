//! The full channel mesh between shards.
//!
//! One bounded ring per ordered pair of shards ([`crate::ring`]: lock-free,
//! a wake-up only for a side that is parked). Ring `i -> j` carries
//! only what shard `i` sends to shard `j`, in order: per-pair FIFO is the
//! ordering guarantee the broker builds on (interest before messages).
//!
//! The mesh is wired in the main thread before the shards start, so peer ids
//! are shard indexes and nothing is shared between threads but the rings.
//! (glommio's own `MeshBuilder` shares an `Rc` across threads; we avoid it.)
//!
//! Each ring also counts what was pushed into it (one atomic, written by the
//! producer only). The consumer counts what it has handled, so it can ask
//! "have I handled everything my peer had sent by now?" ([`RingProgress`])
//! and process a peer's earlier messages before acting on new local input.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Poll, Waker};

use crate::ring::{ring, RingReceiver, RingSender};

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

/// One shard's ends of the mesh; `Send`, moved into the shard thread.
pub struct MeshEnds<T: Send + 'static> {
    index: usize,
    senders: Vec<Option<RingSender<T>>>,
    receivers: Vec<Option<RingReceiver<T>>>,
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
            let (sender, receiver) = ring(capacity);
            ends[from].senders[to] = Some(sender);
            ends[to].receivers[from] = Some(receiver);
        }
    }
    ends
}

impl<T: Send + 'static> MeshEnds<T> {
    /// The mesh as the calling shard uses it.
    pub fn connect(self) -> Mesh<T> {
        let mut receivers = Vec::with_capacity(self.receivers.len());
        let mut progress = Vec::with_capacity(self.receivers.len());
        for receiver in self.receivers {
            match receiver {
                Some(receiver) => {
                    let ring_progress = Rc::new(RingProgress {
                        sent: receiver.sent_counter(),
                        handled: Cell::new(0),
                        waiters: RefCell::new(Vec::new()),
                    });
                    progress.push(Some(ring_progress.clone()));
                    receivers.push(Some(Receiver {
                        inner: receiver,
                        progress: ring_progress,
                    }));
                }
                None => {
                    progress.push(None);
                    receivers.push(None);
                }
            }
        }
        Mesh {
            index: self.index,
            senders: self.senders,
            receivers,
            progress,
        }
    }
}

/// The connected mesh as seen from one shard.
pub struct Mesh<T: Send + 'static> {
    index: usize,
    senders: Vec<Option<RingSender<T>>>,
    receivers: Vec<Option<Receiver<T>>>,
    progress: Vec<Option<Rc<RingProgress>>>,
}

/// How far this shard has got through one incoming ring.
pub struct RingProgress {
    sent: Arc<AtomicU64>,
    handled: Cell<u64>,
    waiters: RefCell<Vec<(u64, Waker)>>,
}

impl RingProgress {
    /// A ring whose peer has pushed `sent` messages, none handled (tests).
    #[cfg(test)]
    pub(crate) fn with_sent(sent: u64) -> Rc<RingProgress> {
        Rc::new(RingProgress {
            sent: Arc::new(AtomicU64::new(sent)),
            handled: Cell::new(0),
            waiters: RefCell::new(Vec::new()),
        })
    }

    /// Whether every message the peer had pushed by now has been handled.
    pub fn caught_up(&self) -> bool {
        self.handled.get() >= self.sent.load(Ordering::Acquire)
    }

    /// Completes once every message the peer had pushed when this was called
    /// has been handled (see [`Receiver::handled`]).
    pub async fn catch_up(&self) {
        let target = self.sent.load(Ordering::Acquire);
        std::future::poll_fn(|context| {
            if self.handled.get() >= target {
                Poll::Ready(())
            } else {
                self.waiters
                    .borrow_mut()
                    .push((target, context.waker().clone()));
                Poll::Pending
            }
        })
        .await
    }
}

/// The receiving end of one ring.
pub struct Receiver<T: Send + 'static> {
    inner: RingReceiver<T>,
    progress: Rc<RingProgress>,
}

impl<T: Send + 'static> Receiver<T> {
    /// The next message, or `None` once the sending shard has stopped. Call
    /// [`Receiver::handled`] once it has been acted on.
    pub async fn recv(&self) -> Option<T> {
        self.inner.recv().await
    }

    /// Marks the last received message as handled.
    pub fn handled(&self) {
        let handled = self.progress.handled.get() + 1;
        self.progress.handled.set(handled);
        if self.progress.waiters.borrow().is_empty() {
            return;
        }
        self.progress
            .waiters
            .borrow_mut()
            .retain(|(target, waker)| {
                if *target <= handled {
                    waker.wake_by_ref();
                    false
                } else {
                    true
                }
            });
    }
}

impl<T: Send + 'static> Mesh<T> {
    pub fn index(&self) -> usize {
        self.index
    }

    pub fn shard_count(&self) -> usize {
        self.senders.len()
    }

    fn sender(&self, peer: usize) -> &RingSender<T> {
        assert_ne!(
            peer, self.index,
            "a shard never sends to itself through the mesh"
        );
        self.senders[peer]
            .as_ref()
            .expect("every peer has a sender")
    }

    /// Sends without waiting; a full ring hands the message back.
    pub fn try_send(&self, peer: usize, message: T) -> Result<(), MeshError<T>> {
        self.sender(peer).try_send(message)
    }

    /// Sends, waiting while the ring is full (backpressure).
    pub async fn send(&self, peer: usize, message: T) -> Result<(), MeshError<T>> {
        self.sender(peer).send(message).await
    }

    /// Progress through each incoming ring, `(peer, progress)`.
    pub fn progress(&self) -> Vec<(usize, Rc<RingProgress>)> {
        self.progress
            .iter()
            .enumerate()
            .filter_map(|(peer, progress)| progress.clone().map(|progress| (peer, progress)))
            .collect()
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
