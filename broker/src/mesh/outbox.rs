//! Outgoing links to the other shards: one bounded outbox per peer in front
//! of the mesh ring, drained by one sender task per peer.
//!
//! Sending never blocks the caller: the fast path puts the message straight
//! into the ring; when the ring is full (or earlier messages are still
//! queued) it joins the outbox, preserving order. Callers that can wait
//! (client read loops) then await [`PeerLinks::wait_for_space`], which is
//! where backpressure from a busy peer reaches a publisher. Acknowledgements
//! of interest updates are coalesced into one cell per peer, so a receive
//! loop never has to wait.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Poll, Waker};

use tern_shard::{Mesh, MeshError, Waiters};

use crate::mesh::{MeshMessage, PeerSender};

/// Messages an outbox holds before senders that can wait are made to.
pub const OUTBOX_MESSAGES_MAX: usize = 4096;

struct Link<M> {
    queue: RefCell<VecDeque<M>>,
    /// The sender task holds a message it popped and is sending it.
    in_flight: Cell<bool>,
    /// Highest interest sequence from this peer applied here, not yet acknowledged.
    pending_ack: Cell<Option<u64>>,
    sender_waker: RefCell<Option<Waker>>,
    space_waiters: Waiters,
}

impl<M> Link<M> {
    fn wake_sender(&self) {
        if let Some(waker) = self.sender_waker.borrow_mut().take() {
            waker.wake();
        }
    }
}

pub struct PeerLinks<M: Send + 'static> {
    mesh: Rc<Mesh<M>>,
    links: Vec<Link<M>>,
    dropped: Cell<u64>,
}

impl<M: MeshMessage + Send + 'static> PeerLinks<M> {
    pub fn new(mesh: Rc<Mesh<M>>) -> Rc<PeerLinks<M>> {
        let links = (0..mesh.shard_count())
            .map(|_| Link {
                queue: RefCell::new(VecDeque::new()),
                in_flight: Cell::new(false),
                pending_ack: Cell::new(None),
                sender_waker: RefCell::new(None),
                space_waiters: Waiters::new(),
            })
            .collect();
        Rc::new(PeerLinks {
            mesh,
            links,
            dropped: Cell::new(0),
        })
    }

    pub fn index(&self) -> usize {
        self.mesh.index()
    }

    pub fn shard_count(&self) -> usize {
        self.mesh.shard_count()
    }

    /// Peers other than this shard.
    pub fn peers(&self) -> impl Iterator<Item = usize> + '_ {
        let index = self.index();
        (0..self.shard_count()).filter(move |&peer| peer != index)
    }

    /// Starts one sender task per peer; they run until the shard stops.
    pub fn start(self: &Rc<Self>) {
        for peer in self.peers() {
            let links = self.clone();
            glommio::spawn_local(async move { links.run_sender(peer).await }).detach();
        }
    }

    /// Queues `message` for `peer` without waiting.
    pub fn send(&self, peer: usize, message: M) {
        let link = &self.links[peer];
        let idle = link.queue.borrow().is_empty() && !link.in_flight.get();
        let message = if idle {
            match self.mesh.try_send(peer, message) {
                Ok(()) => return,
                Err(MeshError::Full(message)) => message,
                Err(MeshError::Closed(_)) => {
                    self.dropped.set(self.dropped.get() + 1);
                    return;
                }
            }
        } else {
            message
        };
        link.queue.borrow_mut().push_back(message);
        link.wake_sender();
    }

    /// Sends `message` to every peer (`make` builds each copy).
    pub fn broadcast(&self, mut make: impl FnMut() -> M) {
        for peer in self.peers() {
            self.send(peer, make());
        }
    }

    /// Records that interest updates from `peer` up to `sequence` are applied.
    pub fn acknowledge(&self, peer: usize, sequence: u64) {
        let link = &self.links[peer];
        if link
            .pending_ack
            .get()
            .is_none_or(|pending| pending < sequence)
        {
            link.pending_ack.set(Some(sequence));
        }
        link.wake_sender();
    }

    /// Whether any outbox is over its bound.
    pub fn congested(&self) -> bool {
        self.links
            .iter()
            .any(|link| link.queue.borrow().len() > OUTBOX_MESSAGES_MAX)
    }

    /// Waits until every outbox is within its bound.
    pub async fn wait_for_space(&self) {
        for link in &self.links {
            link.space_waiters
                .wait_until(|| link.queue.borrow().len() <= OUTBOX_MESSAGES_MAX)
                .await;
        }
    }

    async fn run_sender(&self, peer: usize) {
        let link = &self.links[peer];
        loop {
            let next = std::future::poll_fn(|context| {
                if let Some(sequence) = link.pending_ack.take() {
                    return Poll::Ready(M::acknowledgement(sequence));
                }
                if let Some(message) = link.queue.borrow_mut().pop_front() {
                    return Poll::Ready(message);
                }
                *link.sender_waker.borrow_mut() = Some(context.waker().clone());
                Poll::Pending
            })
            .await;
            link.in_flight.set(true);
            let result = self.mesh.send(peer, next).await;
            link.in_flight.set(false);
            if result.is_err() {
                // The peer stopped (shutdown): nothing more will be delivered.
                self.dropped.set(self.dropped.get() + 1);
            }
            if link.queue.borrow().len() <= OUTBOX_MESSAGES_MAX {
                link.space_waiters.wake_all();
            }
        }
    }
}

impl<M, S> PeerSender<S> for PeerLinks<M>
where
    M: MeshMessage + Send + 'static,
    S: Into<M>,
{
    fn send(&self, peer: usize, message: S) {
        PeerLinks::send(self, peer, message.into());
    }

    fn index(&self) -> usize {
        PeerLinks::index(self)
    }

    fn shard_count(&self) -> usize {
        PeerLinks::shard_count(self)
    }
}
