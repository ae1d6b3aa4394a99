//! One route connection, seen from one shard: this shard's link to the
//! same-index shard of one other node. Frames for the peer are appended to
//! a bounded outbound buffer that one write task drains; producers stall
//! (bounded) past 75 % of it, and a peer that stops reading is dropped once
//! the buffer is full or a write blocks past the write deadline.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::task::{Poll, Waker};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use tern_shard::Waiters;

use crate::cluster::frame;

/// Who is at the other end, from its Hello.
#[derive(Debug, Clone)]
pub struct PeerIdentity {
    pub server_id: String,
    pub server_name: String,
    /// Its Raft node id.
    pub node_id: u64,
    /// Its meta group's voters when it sent its Hello (empty: none).
    pub meta_voters: Vec<u64>,
    /// `host:port` its clients connect to.
    pub client_url: String,
    /// `host:port` its cluster port is reached on.
    pub route_url: String,
    pub address: SocketAddr,
    /// This node dialed the connection.
    pub did_solicit: bool,
}

/// Why a link closed (logged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkClose {
    PeerClosed,
    ReadError,
    WriteError,
    Protocol,
    /// The peer did not take what we sent in time, or the buffer filled.
    SlowPeer,
    /// Nothing heard from the peer for too long.
    Stale,
    /// Another connection to the same node was kept.
    Duplicate,
    Shutdown,
}

pub struct RouteLink {
    /// Unique on this shard (router tables key by it).
    pub id: u64,
    pub peer: PeerIdentity,
    pub started: SystemTime,
    outbound: RefCell<Vec<u8>>,
    writer_waker: RefCell<Option<Waker>>,
    drain_waiters: Waiters,
    close_waiters: Waiters,
    stall_listed: Cell<bool>,
    closed: Cell<Option<LinkClose>>,
    pending_max_bytes: usize,
    stall_threshold_bytes: usize,
    pub last_in: Cell<Instant>,
    pub in_msgs: Cell<u64>,
    pub in_bytes: Cell<u64>,
    pub out_msgs: Cell<u64>,
    pub out_bytes: Cell<u64>,
}

impl RouteLink {
    pub fn new(id: u64, peer: PeerIdentity, pending_max_bytes: usize) -> RouteLink {
        assert!(pending_max_bytes > 0);
        RouteLink {
            id,
            peer,
            started: SystemTime::now(),
            outbound: RefCell::new(Vec::with_capacity(4096)),
            writer_waker: RefCell::new(None),
            drain_waiters: Waiters::new(),
            close_waiters: Waiters::new(),
            stall_listed: Cell::new(false),
            closed: Cell::new(None),
            pending_max_bytes,
            stall_threshold_bytes: pending_max_bytes / 4 * 3,
            last_in: Cell::new(Instant::now()),
            in_msgs: Cell::new(0),
            in_bytes: Cell::new(0),
            out_msgs: Cell::new(0),
            out_bytes: Cell::new(0),
        }
    }

    pub fn is_open(&self) -> bool {
        self.closed.get().is_none()
    }

    pub fn close_reason(&self) -> Option<LinkClose> {
        self.closed.get()
    }

    /// Closes the link (idempotent): the write task stops, the read task
    /// sees it and tears the connection down.
    pub fn close(&self, reason: LinkClose) {
        if self.closed.get().is_some() {
            return;
        }
        self.closed.set(Some(reason));
        self.wake_writer();
        self.drain_waiters.wake_all();
        self.close_waiters.wake_all();
    }

    pub async fn closed(&self) {
        self.close_waiters.wait_until(|| !self.is_open()).await
    }

    pub fn pending_bytes(&self) -> usize {
        self.outbound.borrow().len()
    }

    /// Appends frames with `encode`; false if the link is closed. A buffer
    /// past its maximum closes the link (the peer is not reading).
    fn queue(&self, encode: impl FnOnce(&mut Vec<u8>)) -> bool {
        if !self.is_open() {
            return false;
        }
        let mut outbound = self.outbound.borrow_mut();
        let before = outbound.len();
        encode(&mut outbound);
        let length = outbound.len();
        drop(outbound);
        self.out_bytes
            .set(self.out_bytes.get() + (length - before) as u64);
        if length > self.pending_max_bytes {
            log::warn!(
                target: "tern::cluster",
                "route to {} ({}): {} bytes pending, over the limit of {}: the peer is not reading; closing",
                self.peer.server_name, self.peer.address, length, self.pending_max_bytes
            );
            self.close(LinkClose::SlowPeer);
            return false;
        }
        if before == 0 {
            self.wake_writer();
        }
        true
    }

    pub fn send_message(
        &self,
        routing: &[u8],
        subject: &[u8],
        reply: Option<&[u8]>,
        header_bytes: usize,
        message: &[u8],
        queues: &[Bytes],
    ) -> bool {
        let sent = self.queue(|buffer| {
            frame::push_message(
                buffer,
                routing,
                subject,
                reply,
                header_bytes,
                message,
                queues,
            )
        });
        if sent {
            self.out_msgs.set(self.out_msgs.get() + 1);
        }
        sent
    }

    pub fn send_raft(
        &self,
        from: u64,
        to: u64,
        messages: &[(u64, Bytes)],
        body_max_bytes: usize,
    ) -> bool {
        self.queue(|buffer| frame::push_raft(buffer, from, to, messages, body_max_bytes))
    }

    /// Hands a JetStream API request to the peer.
    pub fn send_api(&self, hops: u8, subject: &[u8], reply: Option<&[u8]>, payload: &[u8]) -> bool {
        self.queue(|buffer| {
            frame::push_api(buffer, hops, subject, reply.unwrap_or_default(), payload)
        })
    }

    pub fn send_interest(&self, subject: &[u8], queue: Option<&Bytes>, weight: u32) -> bool {
        self.queue(|buffer| frame::push_interest(buffer, subject, queue, weight))
    }

    pub fn send_routes(&self, routes: &[String]) -> bool {
        self.queue(|buffer| frame::push_routes(buffer, routes))
    }

    pub fn send_ping(&self) -> bool {
        self.queue(frame::push_ping)
    }

    pub fn send_pong(&self) -> bool {
        self.queue(frame::push_pong)
    }

    /// Whether producers should wait before sending more.
    pub fn over_stall_threshold(&self) -> bool {
        self.is_open() && self.pending_bytes() > self.stall_threshold_bytes
    }

    /// Marks the link as listed for a stall check; false if it already was.
    pub fn list_for_stall(&self) -> bool {
        !self.stall_listed.replace(true)
    }

    pub fn unlist_for_stall(&self) {
        self.stall_listed.set(false);
    }

    /// Completes once the pending bytes are below the stall threshold (or
    /// the link closed).
    pub async fn drained(&self) {
        self.drain_waiters
            .wait_until(|| !self.over_stall_threshold())
            .await
    }

    fn wake_writer(&self) {
        if let Some(waker) = self.writer_waker.borrow_mut().take() {
            waker.wake();
        }
    }

    /// Waits for bytes to send, then swaps them into `spare` (emptied
    /// first); `None` once the link closed.
    pub async fn next_outbound(&self, spare: &mut Vec<u8>) -> Option<()> {
        spare.clear();
        std::future::poll_fn(|context| {
            if !self.is_open() {
                return Poll::Ready(None);
            }
            if self.outbound.borrow().is_empty() {
                *self.writer_waker.borrow_mut() = Some(context.waker().clone());
                return Poll::Pending;
            }
            std::mem::swap(&mut *self.outbound.borrow_mut(), spare);
            Poll::Ready(Some(()))
        })
        .await
    }

    /// After a write completed: producers stalled on this link may go on.
    pub fn wrote(&self) {
        if !self.over_stall_threshold() {
            self.drain_waiters.wake_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(pending_max_bytes: usize) -> RouteLink {
        RouteLink::new(
            1,
            PeerIdentity {
                server_id: "N2".into(),
                server_name: "n2".into(),
                node_id: crate::cluster::node_id("n2"),
                meta_voters: Vec::new(),
                client_url: "127.0.0.1:4222".into(),
                route_url: "127.0.0.1:6222".into(),
                address: SocketAddr::from(([127, 0, 0, 1], 6222)),
                did_solicit: true,
            },
            pending_max_bytes,
        )
    }

    #[test]
    fn a_full_buffer_closes_the_link_and_stalls_before() {
        let link = link(4096);
        let payload = vec![7u8; 1100];
        assert!(link.send_message(b"a", b"a", None, 0, &payload, &[]));
        assert!(!link.over_stall_threshold());
        assert!(link.send_message(b"a", b"a", None, 0, &payload, &[]));
        assert!(link.send_message(b"a", b"a", None, 0, &payload, &[]));
        assert!(link.over_stall_threshold());
        assert!(link.is_open());
        assert!(!link.send_message(b"a", b"a", None, 0, &payload, &[]));
        assert_eq!(link.close_reason(), Some(LinkClose::SlowPeer));
        assert!(!link.send_ping());
        assert_eq!(link.out_msgs.get(), 3);
    }
}
