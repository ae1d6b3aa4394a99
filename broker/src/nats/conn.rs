//! One client connection: its state, its subscriptions, its outbound buffer,
//! and the three tasks that serve it on its shard (read, write, ping).
//!
//! The read task owns the connection's life: it parses operations and acts on
//! them, and when the connection ends for any reason it removes the
//! subscriptions and tells the write task to finish. The write task drains the
//! outbound buffer in one write per wake-up (so replies to a burst of
//! operations leave in one syscall). The ping task sends server PINGs and
//! closes stale connections.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use rustc_hash::FxHashMap;
use tern_shard::Waiters;

use crate::auth::permissions::{ConnectionPermissions, Permissions};
use crate::auth::recheck::{recheck, Recheck};
use crate::auth::{Authenticated, Authorization, Identity, Outcome, PendingBcrypt, Refusal};
use crate::config::Limits;
use crate::proto::connect::{ConnectError, ConnectOptions};
use crate::proto::encode::{self, Delivery};
use crate::proto::errors;
use crate::proto::info::ServerInfo;
use crate::proto::parser::{ClientOp, ParseError, Parser, ParserLimits, Publish, Step};
use crate::proto::subject;
use crate::proto::subject::InvalidSubject;
use crate::stats::{self, ShardCounters};
use crate::tls;

/// What a connection's tasks need of the shard they run on. The node's
/// shard implements it; connections, below the routing layer, reach the
/// publish path and the shard's settings only through it (one
/// implementation: calls are static).
// The node's futures stay on their shard's thread: no `Send` bound wanted.
#[allow(async_fn_in_trait)]
pub trait ClientHost: 'static {
    fn shard_index(&self) -> usize;
    fn limits(&self) -> &Limits;
    fn counters(&self) -> &ShardCounters;
    /// The INFO this server sends `client`.
    fn server_info(&self, client: &Client) -> ServerInfo;
    /// TLS for a new connection (`None`: plaintext).
    fn tls(&self) -> Option<tls::TlsServer>;
    /// The authentication settings a CONNECT is checked against.
    fn authorization(&self) -> Arc<Authorization>;
    /// A closed connection leaves the shard (its subscriptions go).
    fn remove_client(&self, client: &Client);
    /// A number below `bound` (the first PING's jitter).
    fn random_below(&self, bound: u64) -> u64;
    /// Routes a client's publish.
    fn route_publish(&self, client: &Rc<Client>, publish: &Publish<'_>);
    /// Adds a subscription everywhere; `Ok(Some(sequence))`: the client's
    /// next PONG waits until every shard applied interest update `sequence`.
    fn subscribe(&self, subscription: &Rc<Subscription>) -> Result<Option<u64>, InvalidSubject>;
    /// Removes one subscription of `client` everywhere.
    fn unsubscribe(&self, client: &Client, subscription: &Rc<Subscription>);
    /// Whether a PONG may go now; if not, the shard sends it once every
    /// shard applied interest up to `needed`.
    fn pong_now_or_defer(&self, needed: u64, client: &Rc<Client>) -> bool;
    /// Waits until what this node's other shards sent before now is
    /// handled here.
    async fn catch_up_with_peers(&self);
    /// After a read's operations: deliveries flushed, and the reader held
    /// back while consumers or other shards cannot keep up.
    async fn input_handled(&self);
}

/// Read buffer size a connection starts with and returns to when idle.
pub const READ_BUFFER_INITIAL_BYTES: usize = 4 * 1024;
/// Read buffer size a busy connection grows to for ordinary traffic.
pub const READ_BUFFER_BUSY_BYTES: usize = 64 * 1024;
/// Pending bytes past which a producer writes to the client's socket itself
/// at the end of its batch instead of waiting for the client's write task.
pub const FLUSH_INLINE_BYTES: usize = 64 * 1024;
/// Outbound buffer capacity kept between writes; larger ones are released.
const OUTBOUND_RETAINED_BYTES: usize = 256 * 1024;
/// The first server PING goes out this soon after CONNECT (nats-server: 2 s).
const FIRST_PING_INTERVAL: Duration = Duration::from_secs(2);
/// How long a closing connection may take to flush its last bytes.
const CLOSE_FLUSH_DEADLINE: Duration = Duration::from_secs(2);
/// nats-server re-measures RTT with a PING at least this often.
const RTT_MEASUREMENT_INTERVAL: Duration = Duration::from_secs(3600);

/// A subscription of a client; the sublist holds it as a `Target::Local`.
#[derive(Debug)]
pub struct Subscription {
    pub client: Weak<Client>,
    pub client_id: u64,
    pub sid: Bytes,
    pub subject: Bytes,
    pub queue: Option<Bytes>,
    pub delivered: Cell<u64>,
    /// Auto-unsubscribe after this many deliveries in total; 0 = never.
    pub max: Cell<u64>,
    pub closed: Cell<bool>,
    /// Deliveries are checked against the subscriber's deny rules (a
    /// wildcard or queue subscription of a user with subscribe deny rules;
    /// decided again when a reload changes the rules).
    pub deny_filtered: Cell<bool>,
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    ClientClosed,
    ReadError,
    WriteError,
    ProtocolViolation,
    ParseError,
    MaxPayloadExceeded,
    MaxControlLineExceeded,
    MaxConnectionsExceeded,
    BadClientProtocol,
    NoRespondersRequiresHeaders,
    AuthorizationViolation,
    AuthenticationTimeout,
    StaleConnection,
    SlowConsumerPendingBytes,
    SlowConsumerWriteDeadline,
    ServerShutdown,
    /// The TLS handshake failed or timed out (nats-server: TLSHandshakeError).
    TlsHandshakeError,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// Flush what is queued (such as a final -ERR), then close.
    Closing,
    /// Close without flushing (slow consumer).
    Closed,
}

/// The options a delivery needs, copied out of CONNECT for the hot path.
#[derive(Debug, Clone, Copy)]
struct Flags {
    verbose: bool,
    pedantic: bool,
    echo: bool,
    headers: bool,
    no_responders: bool,
    /// The user's permissions restrict publishing.
    publish_checked: bool,
    /// Requests delivered to this connection grant it responses.
    grants_responses: bool,
}

pub struct Client {
    pub id: u64,
    pub address: SocketAddr,
    /// The address the client reached this server on.
    local_address: Cell<Option<SocketAddr>>,
    pub started: SystemTime,
    started_instant: Instant,
    options: RefCell<ConnectOptions>,
    flags: Cell<Flags>,
    subscriptions: RefCell<FxHashMap<Bytes, Rc<Subscription>>>,
    outbound: RefCell<Vec<u8>>,
    in_flight_bytes: Cell<usize>,
    writer_waker: RefCell<Option<Waker>>,
    /// Producers waiting for this client's pending bytes to drop below the stall threshold.
    drain_waiters: Waiters,
    /// Already on the shard's list of stalled clients.
    stall_listed: Cell<bool>,
    /// Already on the shard's list of clients to flush inline.
    flush_listed: Cell<bool>,
    /// The socket, for inline flushes; -1 once the connection is being torn down.
    socket_fd: Cell<i32>,
    state: Cell<State>,
    close_reason: Cell<Option<CloseReason>>,
    close_waiters: Waiters,
    pub in_msgs: Cell<u64>,
    pub in_bytes: Cell<u64>,
    pub out_msgs: Cell<u64>,
    pub out_bytes: Cell<u64>,
    last_activity: Cell<Instant>,
    /// Last client data or PING (suppresses server PINGs).
    last_in: Cell<Instant>,
    pings_out: Cell<u32>,
    rtt: Cell<Option<Duration>>,
    rtt_start: Cell<Option<Instant>>,
    connect_received: Cell<bool>,
    /// Authentication is required and CONNECT has not come yet: anything
    /// else is an authorization violation.
    awaiting_connect: Cell<bool>,
    /// The nonce this connection's INFO carried (NKey users exist).
    nonce: std::cell::OnceCell<String>,
    /// Who the connection authenticated as.
    identity: RefCell<Identity>,
    /// `None`: everything is allowed.
    permissions: RefCell<Option<ConnectionPermissions>>,
    first_pong_sent: Cell<bool>,
    /// The interest sequence every peer must apply before this client's next PONG.
    interest_needed: Cell<u64>,
    max_pending_bytes: usize,
    stall_threshold_bytes: usize,
}

impl Client {
    pub fn new(id: u64, address: SocketAddr, max_pending_bytes: usize) -> Client {
        let now = Instant::now();
        let options = ConnectOptions::default();
        let flags = Flags::from_options(&options);
        Client {
            id,
            address,
            local_address: Cell::new(None),
            started: SystemTime::now(),
            started_instant: now,
            options: RefCell::new(options),
            flags: Cell::new(flags),
            subscriptions: RefCell::new(FxHashMap::default()),
            outbound: RefCell::new(Vec::with_capacity(1024)),
            in_flight_bytes: Cell::new(0),
            writer_waker: RefCell::new(None),
            drain_waiters: Waiters::new(),
            stall_listed: Cell::new(false),
            flush_listed: Cell::new(false),
            socket_fd: Cell::new(-1),
            state: Cell::new(State::Open),
            close_reason: Cell::new(None),
            close_waiters: Waiters::new(),
            in_msgs: Cell::new(0),
            in_bytes: Cell::new(0),
            out_msgs: Cell::new(0),
            out_bytes: Cell::new(0),
            last_activity: Cell::new(now),
            last_in: Cell::new(now),
            pings_out: Cell::new(0),
            rtt: Cell::new(None),
            rtt_start: Cell::new(None),
            connect_received: Cell::new(false),
            awaiting_connect: Cell::new(false),
            nonce: std::cell::OnceCell::new(),
            identity: RefCell::new(Identity::Anonymous),
            permissions: RefCell::new(None),
            first_pong_sent: Cell::new(false),
            interest_needed: Cell::new(0),
            max_pending_bytes,
            // nats-server: producers stall once a target passes 75 % of max_pending.
            stall_threshold_bytes: max_pending_bytes / 4 * 3,
        }
    }

    pub fn local_address(&self) -> Option<SocketAddr> {
        self.local_address.get()
    }

    /// Before it is served: whether it must authenticate, and the nonce
    /// its INFO carries for NKey users.
    pub fn expect_authentication(&self, nonce: Option<String>) {
        self.awaiting_connect.set(true);
        if let Some(nonce) = nonce {
            self.nonce.set(nonce).expect("a connection gets one nonce");
        }
    }

    pub fn nonce(&self) -> Option<&str> {
        self.nonce.get().map(String::as_str)
    }

    /// Who the connection authenticated as.
    pub fn identity(&self) -> Identity {
        self.identity.borrow().clone()
    }

    /// Whether this connection may publish to `subject` (its user's rules
    /// and the responses it was granted).
    fn publish_allowed(&self, subject: &[u8], now: Instant) -> bool {
        self.permissions
            .borrow()
            .as_ref()
            .is_none_or(|permissions| permissions.publish_allowed(subject, now))
    }

    /// A delivery to a deny-filtered subscription that the user's subscribe
    /// deny rules refuse.
    pub fn delivery_denied(&self, subject: &[u8], queue: Option<&[u8]>) -> bool {
        self.permissions
            .borrow()
            .as_ref()
            .is_some_and(|permissions| permissions.delivery_denied(subject, queue))
    }

    /// A request with `reply` was delivered to this connection: with
    /// `allow_responses` it may now answer it.
    pub fn grant_response(&self, reply: &[u8]) {
        if !self.flags.get().grants_responses {
            return;
        }
        if let Some(permissions) = self.permissions.borrow().as_ref() {
            permissions.grant_response(reply, Instant::now());
        }
    }

    pub fn set_local_address(&self, address: Option<SocketAddr>) {
        self.local_address.set(address);
    }

    /// Whether producers should wait for this client before sending it more.
    pub fn over_stall_threshold(&self) -> bool {
        self.is_open() && self.pending_bytes() > self.stall_threshold_bytes
    }

    /// Marks the client as listed for a stall check; false if it already was.
    pub fn list_for_stall(&self) -> bool {
        !self.stall_listed.replace(true)
    }

    pub fn unlist_for_stall(&self) {
        self.stall_listed.set(false);
    }

    /// Marks the client as listed for an inline flush; false if it already was.
    pub fn list_for_flush(&self) -> bool {
        !self.flush_listed.replace(true)
    }

    /// Writes as much of the outbound buffer as the socket takes right now,
    /// without waiting, unless the write task is in the middle of a write
    /// (bytes must leave in order).
    pub fn write_now(&self) {
        self.flush_listed.set(false);
        let fd = self.socket_fd.get();
        if !self.is_open() || fd < 0 || self.in_flight_bytes.get() > 0 {
            return;
        }
        let mut outbound = self.outbound.borrow_mut();
        if outbound.is_empty() {
            return;
        }
        // SAFETY: fd is this connection's open socket (cleared before the
        // stream is dropped); the buffer is valid for its length.
        let sent = unsafe {
            libc::send(
                fd,
                outbound.as_ptr().cast(),
                outbound.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if sent > 0 {
            let sent = sent as usize;
            assert!(sent <= outbound.len());
            if sent == outbound.len() {
                outbound.clear();
            } else {
                outbound.drain(..sent);
            }
            drop(outbound);
            self.wake_drain_waiters();
        } else if sent < 0 {
            let error = std::io::Error::last_os_error();
            drop(outbound);
            if error.kind() != std::io::ErrorKind::WouldBlock
                && error.kind() != std::io::ErrorKind::Interrupted
            {
                self.close_now(CloseReason::WriteError);
            }
        }
    }

    /// Completes once this client's pending bytes are below the stall
    /// threshold (or it closed).
    pub async fn drained(&self) {
        self.drain_waiters
            .wait_until(|| !self.over_stall_threshold())
            .await
    }

    fn wake_drain_waiters(&self) {
        if !self.over_stall_threshold() {
            self.drain_waiters.wake_all();
        }
    }

    pub fn is_open(&self) -> bool {
        self.state.get() == State::Open
    }

    pub fn close_reason(&self) -> Option<CloseReason> {
        self.close_reason.get()
    }

    pub fn headers(&self) -> bool {
        self.flags.get().headers
    }

    pub fn echo(&self) -> bool {
        self.flags.get().echo
    }

    pub fn no_responders(&self) -> bool {
        self.flags.get().no_responders
    }

    pub fn options(&self) -> ConnectOptions {
        self.options.borrow().clone()
    }

    pub fn pending_bytes(&self) -> usize {
        self.outbound.borrow().len() + self.in_flight_bytes.get()
    }

    pub fn subscription_count(&self) -> usize {
        self.subscriptions.borrow().len()
    }

    pub fn subscription_subjects(&self) -> Vec<String> {
        self.subscriptions
            .borrow()
            .values()
            .map(|subscription| String::from_utf8_lossy(&subscription.subject).into_owned())
            .collect()
    }

    pub fn last_activity(&self) -> Instant {
        self.last_activity.get()
    }

    pub fn started_instant(&self) -> Instant {
        self.started_instant
    }

    pub fn rtt(&self) -> Option<Duration> {
        self.rtt.get()
    }

    // ----- outbound ------------------------------------------------------

    fn wake_writer(&self) {
        if let Some(waker) = self.writer_waker.borrow_mut().take() {
            waker.wake();
        }
    }

    /// Queues protocol bytes (PONG, +OK, -ERR, INFO, PING).
    pub fn queue_bytes(&self, bytes: &[u8]) {
        if !self.is_open() {
            return;
        }
        self.outbound.borrow_mut().extend_from_slice(bytes);
        self.wake_writer();
    }

    pub fn queue_err(&self, text: &str) {
        if !self.is_open() {
            return;
        }
        encode::push_err(&mut self.outbound.borrow_mut(), text);
        self.wake_writer();
    }

    fn queue_ok(&self) {
        if self.flags.get().verbose {
            self.queue_bytes(encode::OK);
        }
    }

    /// Forgets a subscription the router removed.
    pub fn forget_subscription(&self, sid: &[u8]) {
        self.subscriptions.borrow_mut().remove(sid);
    }

    /// Queues one message delivery; false if the connection cannot take it.
    /// Exceeding `max_pending` closes the connection as a slow consumer.
    pub fn queue_delivery(&self, counters: &ShardCounters, delivery: &Delivery<'_>) -> bool {
        if !self.is_open() {
            return false;
        }
        let headers = self.flags.get().headers;
        let (pending, body_bytes) = {
            let mut outbound = self.outbound.borrow_mut();
            encode::push_delivery(&mut outbound, delivery, headers);
            let body_bytes = if delivery.header_bytes > 0 && !headers {
                delivery.message.len() - delivery.header_bytes
            } else {
                delivery.message.len()
            };
            (outbound.len() + self.in_flight_bytes.get(), body_bytes)
        };
        stats::add(&self.out_msgs, 1);
        stats::add(&self.out_bytes, body_bytes as u64);
        stats::add(&counters.out_msgs, 1);
        stats::add(&counters.out_bytes, body_bytes as u64);
        if pending > self.max_pending_bytes {
            log::info!(
                target: "tern::client",
                "{} - cid:{} - Slow Consumer Detected: MaxPending of {} Exceeded",
                self.address,
                self.id,
                self.max_pending_bytes
            );
            stats::add(&counters.slow_consumers, 1);
            self.close_now(CloseReason::SlowConsumerPendingBytes);
            return true;
        }
        self.wake_writer();
        true
    }

    // ----- closing -------------------------------------------------------

    fn close_with(&self, state: State, reason: CloseReason) {
        if self.state.get() != State::Open {
            return;
        }
        self.state.set(state);
        self.close_reason.set(Some(reason));
        if state == State::Closed {
            self.outbound.borrow_mut().clear();
        }
        self.wake_writer();
        self.close_waiters.wake_all();
        self.wake_drain_waiters();
    }

    /// Closes after flushing what is queued.
    pub fn close(&self, reason: CloseReason) {
        self.close_with(State::Closing, reason);
    }

    /// Sends `-ERR '<text>'`, flushes, closes.
    pub fn close_with_err(&self, text: &str, reason: CloseReason) {
        self.queue_err(text);
        self.close(reason);
    }

    /// Closes at once, dropping anything queued.
    pub fn close_now(&self, reason: CloseReason) {
        self.close_with(State::Closed, reason);
    }

    /// Completes once the connection is no longer open.
    async fn closed(&self) {
        self.close_waiters.wait_until(|| !self.is_open()).await
    }

    // ----- PONG and the async INFO ---------------------------------------

    /// An async INFO with the current `connect_urls`, for a client that
    /// takes them (CONNECT with protocol 1 or more), as nats-server sends
    /// when the cluster changes.
    pub fn send_info_update<H: ClientHost>(&self, shard: &H) {
        if !self.is_open() || !self.connect_received.get() || self.options.borrow().protocol < 1 {
            return;
        }
        self.queue_bytes(&shard.server_info(self).to_line());
    }

    /// Sends a PONG, and after the first one the `connect_info` INFO.
    pub fn send_pong<H: ClientHost>(&self, shard: &H) {
        self.queue_bytes(encode::PONG);
        if self.connect_received.get()
            && !self.first_pong_sent.replace(true)
            && self.options.borrow().protocol >= 1
        {
            let mut info = shard.server_info(self);
            info.connect_info = true;
            info.remote_account = "$G".to_string();
            self.queue_bytes(&info.to_line());
        }
    }
}

impl Flags {
    fn from_options(options: &ConnectOptions) -> Flags {
        Flags {
            verbose: options.verbose,
            pedantic: options.pedantic,
            echo: options.echo,
            headers: options.headers,
            no_responders: options.no_responders,
            publish_checked: false,
            grants_responses: false,
        }
    }
}

/// A client's socket, plaintext or TLS, that the read and write tasks
/// share; each poll borrows it only for its own duration, and glommio
/// keeps read and write readiness separate.
#[derive(Clone)]
pub struct SharedStream {
    transport: Rc<RefCell<Transport>>,
    fd: i32,
}

enum Transport {
    Plain(TcpStream),
    /// The session runs on this shard; rustls buffers what it encrypts
    /// until a flush. A client's is a server session; a route's either.
    Tls(Box<tls::AnyTlsStream>),
}

impl SharedStream {
    pub fn new(stream: TcpStream) -> SharedStream {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
        SharedStream {
            transport: Rc::new(RefCell::new(Transport::Plain(stream))),
            fd,
        }
    }

    pub fn tls(stream: tls::AnyTlsStream, fd: i32) -> SharedStream {
        SharedStream {
            transport: Rc::new(RefCell::new(Transport::Tls(Box::new(stream)))),
            fd,
        }
    }

    fn is_tls(&self) -> bool {
        matches!(*self.transport.borrow(), Transport::Tls(_))
    }

    /// Shuts both directions down now (the socket closes when the last task drops it).
    pub fn shutdown(&self) {
        // SAFETY: fd is a socket owned by the stream, alive while we hold the Rc.
        unsafe {
            libc::shutdown(self.fd, libc::SHUT_RDWR);
        }
    }
}

impl futures_lite::AsyncRead for SharedStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &mut [u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut *self.transport.borrow_mut() {
            Transport::Plain(stream) => std::pin::Pin::new(stream).poll_read(context, buffer),
            Transport::Tls(stream) => {
                std::pin::Pin::new(stream.as_mut()).poll_read(context, buffer)
            }
        }
    }
}

impl futures_lite::AsyncWrite for SharedStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut *self.transport.borrow_mut() {
            Transport::Plain(stream) => std::pin::Pin::new(stream).poll_write(context, buffer),
            Transport::Tls(stream) => {
                std::pin::Pin::new(stream.as_mut()).poll_write(context, buffer)
            }
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut *self.transport.borrow_mut() {
            Transport::Plain(stream) => std::pin::Pin::new(stream).poll_flush(context),
            Transport::Tls(stream) => std::pin::Pin::new(stream.as_mut()).poll_flush(context),
        }
    }

    fn poll_close(
        self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut *self.transport.borrow_mut() {
            Transport::Plain(stream) => std::pin::Pin::new(stream).poll_close(context),
            Transport::Tls(stream) => std::pin::Pin::new(stream.as_mut()).poll_close(context),
        }
    }
}

/// The first INFO a connection gets (with its nonce when NKeys are on).
fn info_line<H: ClientHost>(shard: &H, client: &Client) -> Vec<u8> {
    let mut info = shard.server_info(client);
    info.nonce = client.nonce().unwrap_or_default().to_string();
    info.to_line()
}

/// TLS on a connection (the client port requires it): the classic INFO
/// in plaintext first unless `handshake_first`, then the handshake on this
/// shard. `None`: it failed or timed out, and the socket closes without a
/// word, as nats-server's does.
async fn start_tls<H: ClientHost>(
    shard: &H,
    client: &Client,
    stream: TcpStream,
    server: &tls::TlsServer,
) -> Option<SharedStream> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let tcp = tls::SharedTcp::new(stream);
    if !server.handshake_first {
        let line = info_line(shard, client);
        let written =
            tern_shard::timer::timeout(CLOSE_FLUSH_DEADLINE, tcp.clone().write_all(&line)).await;
        if !matches!(written, Ok(Ok(()))) {
            return None;
        }
    }
    match tls::handshake(server, tcp.clone()).await {
        Ok(session) => Some(SharedStream::tls(session.into(), fd)),
        Err(tls::HandshakeFailure::TimedOut) => {
            // nats-server 2.15.1 queues `-ERR 'Secure Connection - TLS
            // Required'` here but into the TLS session that never started:
            // nothing reaches the wire, and so here (`it::tls`).
            log::debug!(target: "tern::client", "{} - cid:{} - TLS handshake timeout", client.address, client.id);
            None
        }
        Err(tls::HandshakeFailure::Failed(error)) => {
            log::error!(target: "tern::client", "{} - cid:{} - TLS handshake error: {error}", client.address, client.id);
            None
        }
    }
}

/// Serves one accepted connection until it closes.
pub async fn serve<H: ClientHost>(shard: Rc<H>, client: Rc<Client>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    // The TLS settings when the connection came (a reload changes only
    // those of later connections).
    let tls = shard.tls();
    let handshake_first = tls.as_ref().is_some_and(|tls| tls.handshake_first);
    let stream = match tls {
        None => {
            // Plaintext: deliveries may be sent inline on the raw socket
            // (`write_now`); a TLS session's records only leave through
            // its write task.
            client
                .socket_fd
                .set(std::os::fd::AsRawFd::as_raw_fd(&stream));
            SharedStream::new(stream)
        }
        Some(server) => match start_tls(&*shard, &client, stream, &server).await {
            Some(stream) => stream,
            None => {
                client.close_now(CloseReason::TlsHandshakeError);
                shard.remove_client(&client);
                return;
            }
        },
    };
    // Classic TLS wrote INFO in plaintext before the handshake.
    if !stream.is_tls() || handshake_first {
        client.queue_bytes(&info_line(&*shard, &client));
    }
    let writer = glommio::spawn_local(write_loop(shard.clone(), client.clone(), stream.clone()));
    let pinger = glommio::spawn_local(ping_loop(shard.clone(), client.clone()));
    let authentication_timer = client.awaiting_connect.get().then(|| {
        let timeout = shard.authorization().timeout;
        glommio::spawn_local(authentication_timeout(
            shard.clone(),
            client.clone(),
            timeout,
        ))
    });
    read_loop(&shard, &client, stream).await;
    // The connection is over: no more deliveries, subscriptions go away.
    if client.is_open() {
        client.close(CloseReason::ClientClosed);
    }
    drop(authentication_timer);
    drop(pinger);
    shard.remove_client(&client);
    writer.await;
    client.socket_fd.set(-1);
    log::debug!(target: "tern::client", "{} - cid:{} - closed: {:?}", client.address, client.id, client.close_reason());
}

/// A growable read buffer; `data[start..end]` is unparsed input.
struct ReadBuffer {
    data: Vec<u8>,
    start: usize,
    end: usize,
    limit_bytes: usize,
}

impl ReadBuffer {
    fn new(limit_bytes: usize) -> ReadBuffer {
        ReadBuffer {
            data: vec![0; READ_BUFFER_INITIAL_BYTES],
            start: 0,
            end: 0,
            limit_bytes,
        }
    }

    fn unparsed(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    fn consume(&mut self, bytes: usize) {
        assert!(self.start + bytes <= self.end);
        self.start += bytes;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Makes room for at least `needed` unparsed bytes in total (when known)
    /// and some free space; returns the free space.
    fn spare(&mut self, needed: Option<usize>) -> &mut [u8] {
        let unparsed = self.end - self.start;
        let wanted = needed.unwrap_or(0).max(unparsed + 1);
        assert!(
            wanted <= self.limit_bytes,
            "operation larger than the read limit"
        );
        if self.start > 0
            && (self.data.len() - self.end < READ_BUFFER_INITIAL_BYTES
                || self.data.len() - self.start < wanted)
        {
            self.data.copy_within(self.start..self.end, 0);
            self.start = 0;
            self.end = unparsed;
        }
        // Grow for a large operation, or (up to the busy size) for a full buffer.
        let full = self.end == self.data.len();
        if self.data.len() < wanted || (full && self.data.len() < READ_BUFFER_BUSY_BYTES) {
            let grown = (self.data.len() * 2)
                .max(wanted)
                .min(self.limit_bytes.max(wanted));
            self.data.resize(grown, 0);
        }
        assert!(self.end < self.data.len(), "the read buffer has free space");
        &mut self.data[self.end..]
    }

    fn filled(&mut self, bytes: usize) {
        self.end += bytes;
        assert!(self.end <= self.data.len());
    }

    /// Returns to the initial size once idle after a large message.
    fn shrink_if_idle(&mut self) {
        if self.start == self.end && self.data.len() > READ_BUFFER_BUSY_BYTES {
            self.data = vec![0; READ_BUFFER_INITIAL_BYTES];
            self.start = 0;
            self.end = 0;
        }
    }
}

async fn read_loop<H: ClientHost>(shard: &Rc<H>, client: &Rc<Client>, mut stream: SharedStream) {
    let limits = &shard.limits();
    let parser_limits = ParserLimits {
        max_control_line_bytes: limits.max_control_line_bytes,
        max_payload_bytes: limits.max_payload_bytes,
    };
    let mut parser = Parser::new(parser_limits);
    // A whole operation: control line (with a little slack for the op name
    // and blanks) plus the largest payload and its CRLF.
    let limit_bytes = limits.max_control_line_bytes
        + limits.max_payload_bytes
        + crate::proto::parser::OPERATION_PREFIX_BYTES_MAX
        + 16;
    let mut buffer = ReadBuffer::new(limit_bytes.max(READ_BUFFER_BUSY_BYTES));
    let mut bytes_needed = None;
    while client.is_open() {
        let spare = buffer.spare(bytes_needed);
        let spare_bytes = spare.len();
        let read = futures_lite::future::or(async { Some(stream.read(spare).await) }, async {
            client.closed().await;
            None
        })
        .await;
        let read_bytes = match read {
            None => break,
            Some(Ok(0)) => {
                client.close(CloseReason::ClientClosed);
                break;
            }
            Some(Ok(bytes)) => bytes,
            Some(Err(_)) => {
                client.close_now(CloseReason::ReadError);
                break;
            }
        };
        buffer.filled(read_bytes);
        // Act on this input only after what other shards sent before it.
        shard.catch_up_with_peers().await;
        let now = Instant::now();
        client.last_activity.set(now);
        bytes_needed = None;
        while client.is_open() {
            if client.awaiting_connect.get() && !buffer.unparsed().starts_with_connect_letter() {
                // nats-server: on an auth-required connection the first
                // operation must be CONNECT (checked on its first byte).
                refuse(&**shard, client, "operation before CONNECT");
                break;
            }
            let headers = client.flags.get().headers;
            match parser.parse(buffer.unparsed(), headers) {
                Ok(Step::Op { op, consumed }) => {
                    let pending = handle_op(shard, client, op, now);
                    buffer.consume(consumed);
                    if let Some(pending) = pending {
                        // Later operations need the answer: wait for it
                        // (the shard serves its other connections meanwhile).
                        let verdict = pending.resolve().await;
                        finish_connect(shard, client, verdict);
                    }
                }
                Ok(Step::NeedMore {
                    consumed,
                    bytes_needed: needed,
                }) => {
                    buffer.consume(consumed);
                    bytes_needed = needed;
                    break;
                }
                Err(error) => {
                    close_for_parse_error(client, error);
                    break;
                }
            }
        }
        if read_bytes < spare_bytes / 4 {
            buffer.shrink_if_idle();
        }
        // A hot socket never makes `read` wait, so the write tasks of the
        // clients this batch delivered to may not run before the next batch:
        // push large backlogs out now (as nats-server flushes its clients at
        // the end of each read) rather than let a burst pile up unsent.
        // Backpressure: consumers on this shard past 75 % of max_pending, and
        // peer shards that cannot keep up, slow this publisher.
        shard.input_handled().await;
    }
}

fn close_for_parse_error(client: &Client, error: ParseError) {
    log::debug!(target: "tern::client", "{} - cid:{} - parser error: {error}", client.address, client.id);
    match error {
        ParseError::UnknownOperation => {
            client.close_with_err(errors::UNKNOWN_PROTOCOL_OPERATION, CloseReason::ParseError)
        }
        ParseError::ControlLineTooLong => client.close_with_err(
            errors::MAXIMUM_CONTROL_LINE_EXCEEDED,
            CloseReason::MaxControlLineExceeded,
        ),
        ParseError::PayloadTooLarge { .. } => client.close_with_err(
            errors::MAXIMUM_PAYLOAD_VIOLATION,
            CloseReason::MaxPayloadExceeded,
        ),
        ParseError::Violation(_) => client.close(CloseReason::ProtocolViolation),
    }
}

/// The first byte of a CONNECT (`c`/`C`), on non-empty input.
trait ConnectLetter {
    fn starts_with_connect_letter(&self) -> bool;
}

impl ConnectLetter for [u8] {
    fn starts_with_connect_letter(&self) -> bool {
        self.first()
            .is_none_or(|&byte| byte == b'C' || byte == b'c')
    }
}

/// Acts on one operation; a CONNECT whose password is a bcrypt hash returns
/// the verification to wait for.
fn handle_op<H: ClientHost>(
    shard: &Rc<H>,
    client: &Rc<Client>,
    op: ClientOp<'_>,
    now: Instant,
) -> Option<PendingBcrypt> {
    if let ClientOp::Connect { json } = op {
        return handle_connect(shard, client, json, now);
    }
    match op {
        ClientOp::Publish(publish) => handle_publish(shard, client, &publish, now),
        ClientOp::Ping => handle_ping(shard, client, now),
        ClientOp::Pong => {
            client.pings_out.set(0);
            if let Some(start) = client.rtt_start.get() {
                client.rtt.set(Some(now.saturating_duration_since(start)));
            }
        }
        ClientOp::Subscribe {
            subject,
            queue,
            sid,
        } => handle_subscribe(shard, client, subject, queue, sid, now),
        ClientOp::Unsubscribe { sid, max_messages } => {
            handle_unsubscribe(shard, client, sid, max_messages, now)
        }
        ClientOp::Connect { .. } => unreachable!("handled above"),
        ClientOp::Info { json } => {
            if serde_json::from_slice::<serde::de::IgnoredAny>(json).is_err() {
                client.close(CloseReason::ParseError);
            }
        }
        ClientOp::Ok => {}
        ClientOp::Err { .. } => client.close(CloseReason::ParseError),
    }
    None
}

fn handle_connect<H: ClientHost>(
    shard: &Rc<H>,
    client: &Rc<Client>,
    json: &[u8],
    now: Instant,
) -> Option<PendingBcrypt> {
    let options = match ConnectOptions::parse(json) {
        Ok(options) => options,
        Err(_) => {
            client.close(CloseReason::ProtocolViolation);
            return None;
        }
    };
    client
        .rtt
        .set(Some(now.saturating_duration_since(client.started_instant)));
    let first_connect = !client.connect_received.replace(true);
    client.awaiting_connect.set(false);
    *client.options.borrow_mut() = options;
    client
        .flags
        .set(Flags::from_options(&client.options.borrow()));
    let authorization = shard.authorization();
    if !authorization.required() {
        finish_connect(
            shard,
            client,
            Ok(Authenticated {
                identity: Identity::Anonymous,
                permissions: None,
            }),
        );
        return None;
    }
    if !first_connect {
        // A second CONNECT authenticates again, maybe as someone else: what
        // the first identity subscribed to goes (nats-server clears the
        // connection's subscriptions from its account).
        unsubscribe_all(&**shard, client);
    }
    let nonce = client.nonce().unwrap_or_default().as_bytes();
    match authorization.authenticate(&client.options.borrow(), nonce) {
        Outcome::Accepted(authenticated) => finish_connect(shard, client, Ok(authenticated)),
        Outcome::Refused(refusal) => finish_connect(shard, client, Err(refusal)),
        Outcome::Pending(pending) => return Some(pending),
    }
    None
}

/// The rest of CONNECT once its credentials are judged: nats-server's
/// checks after authentication, in its order.
fn finish_connect<H: ClientHost>(
    shard: &Rc<H>,
    client: &Rc<Client>,
    verdict: Result<Authenticated, Refusal>,
) {
    let authenticated = match verdict {
        Ok(authenticated) => authenticated,
        Err(refusal) => {
            refuse(&**shard, client, &refusal);
            return;
        }
    };
    set_permissions(client, authenticated.permissions);
    if authenticated.identity != Identity::Anonymous {
        log::debug!(target: "tern::auth", "{} - cid:{} - authenticated as {}", client.address, client.id, authenticated.identity);
    }
    *client.identity.borrow_mut() = authenticated.identity;
    let verdict = client.options.borrow().validate();
    match verdict {
        Ok(()) => client.queue_ok(),
        Err(ConnectError::AccountDesignation) => client.close_with_err(
            errors::AUTHORIZATION_VIOLATION,
            CloseReason::AuthorizationViolation,
        ),
        Err(ConnectError::InvalidProtocol) => client.close_with_err(
            errors::INVALID_CLIENT_PROTOCOL,
            CloseReason::BadClientProtocol,
        ),
        Err(ConnectError::NoRespondersWithoutHeaders) => client.close_with_err(
            errors::NO_RESPONDERS_REQUIRES_HEADERS,
            CloseReason::NoRespondersRequiresHeaders,
        ),
        Err(ConnectError::Malformed(_)) => unreachable!("malformed CONNECT handled above"),
    }
}

/// A connection's permissions (`None`: everything allowed), with the
/// flags the hot paths read; verdict caches and response grants start
/// empty.
fn set_permissions(client: &Client, rules: Option<Arc<Permissions>>) {
    let mut flags = client.flags.get();
    let permissions = rules.map(|rules| ConnectionPermissions::new(rules, Instant::now()));
    flags.publish_checked = permissions
        .as_ref()
        .is_some_and(|permissions| permissions.rules().restricts_publish());
    flags.grants_responses = permissions
        .as_ref()
        .is_some_and(ConnectionPermissions::tracks_responses);
    client.flags.set(flags);
    *client.permissions.borrow_mut() = permissions;
}

/// After a reload changed the authorization settings: judges an
/// authenticated connection again (`auth::recheck`, nats-server's
/// `reloadAuthorization`) and acts on the verdict. Connections still
/// waiting for CONNECT are judged when it comes, by the new settings.
pub fn reauthorize<H: ClientHost>(
    shard: &Rc<H>,
    client: &Rc<Client>,
    previous: &Authorization,
    current: &Authorization,
) {
    if !client.is_open() || !client.connect_received.get() || client.awaiting_connect.get() {
        return;
    }
    let verdict = {
        let options = client.options.borrow();
        let nonce = client.nonce().unwrap_or_default().as_bytes();
        recheck(previous, current, &options, nonce)
    };
    match verdict {
        Recheck::Keep(rules) => keep_after_reload(&**shard, client, rules),
        Recheck::Removed => {
            // nats-server closes it as "Client Closed", without an -ERR.
            log::info!(target: "tern::auth", "{} - cid:{} - {} - closed: the user is no longer configured", client.address, client.id, client.identity.borrow());
            client.close(CloseReason::ClientClosed);
        }
        Recheck::Refused(refusal) => refuse(&**shard, client, &refusal),
        Recheck::Verify(pending) => {
            let shard = shard.clone();
            let client = client.clone();
            glommio::spawn_local(async move {
                match pending.resolve().await {
                    _ if !client.is_open() => {}
                    Ok(authenticated) => keep_after_reload(&*shard, &client, authenticated.permissions),
                    Err(Refusal::VerifierBusy(error)) => {
                        // Not a verdict on the client: it keeps what it had.
                        log::warn!(target: "tern::auth", "{} - cid:{} - not re-checked after the reload: {error}", client.address, client.id);
                    }
                    Err(refusal) => refuse(&*shard, &client, &refusal),
                }
            })
            .detach();
        }
    }
}

/// A connection that still authenticates after a reload: its user's new
/// permissions from now on, and every subscription they no longer allow
/// removed with nats-server's `-ERR` (the connection stays).
fn keep_after_reload<H: ClientHost>(shard: &H, client: &Client, rules: Option<Arc<Permissions>>) {
    set_permissions(client, rules);
    let subscriptions: Vec<Rc<Subscription>> =
        client.subscriptions.borrow().values().cloned().collect();
    let permissions = client.permissions.borrow();
    let Some(permissions) = permissions.as_ref() else {
        for subscription in &subscriptions {
            subscription.deny_filtered.set(false);
        }
        return;
    };
    let rules = permissions.rules();
    for subscription in &subscriptions {
        let (subject, queue) = (&subscription.subject[..], subscription.queue.as_deref());
        if rules.subscribe_allowed(subject, queue) {
            subscription
                .deny_filtered
                .set(rules.filters_delivery(subject, queue));
            continue;
        }
        unsubscribe(shard, client, subscription);
        log::info!(
            target: "tern::auth",
            "Removed sub {}{} (sid {}) for {} - not authorized",
            errors::go_quote(subject),
            queue.map(|queue| format!(" using queue {}", errors::go_quote(queue))).unwrap_or_default(),
            errors::go_quote(&subscription.sid),
            client.identity.borrow()
        );
        client.queue_err(&errors::subscription_removed(
            subject,
            queue,
            &subscription.sid,
        ));
    }
}

/// `-ERR 'Authorization Violation'` and close, counted and logged with
/// the client's address and why (never a secret).
fn refuse<H: ClientHost>(shard: &H, client: &Client, reason: impl std::fmt::Display) {
    stats::add(&shard.counters().authentication_failures, 1);
    log::warn!(target: "tern::auth", "{} - cid:{} - authentication failed: {reason}", client.address, client.id);
    client.close_with_err(
        errors::AUTHORIZATION_VIOLATION,
        CloseReason::AuthorizationViolation,
    );
}

/// nats-server `authTimeout`: no CONNECT within the auth timeout.
async fn authentication_timeout<H: ClientHost>(
    shard: Rc<H>,
    client: Rc<Client>,
    timeout: Duration,
) {
    tern_shard::timer::sleep(timeout).await;
    if client.is_open() && client.awaiting_connect.get() {
        stats::add(&shard.counters().authentication_timeouts, 1);
        log::warn!(target: "tern::auth", "{} - cid:{} - authentication failed: no CONNECT within {timeout:?}", client.address, client.id);
        client.close_with_err(
            errors::AUTHENTICATION_TIMEOUT,
            CloseReason::AuthenticationTimeout,
        );
    }
}

fn handle_ping<H: ClientHost>(shard: &Rc<H>, client: &Rc<Client>, now: Instant) {
    client.last_in.set(now);
    if shard.pong_now_or_defer(client.interest_needed.get(), client) {
        client.send_pong(&**shard);
    }
}

fn handle_subscribe<H: ClientHost>(
    shard: &Rc<H>,
    client: &Rc<Client>,
    subject: &[u8],
    queue: Option<&[u8]>,
    sid: &[u8],
    now: Instant,
) {
    client.last_in.set(now);
    // nats-server checks permissions first; the queue `_sys_` is reserved.
    let denied = queue == Some(SYSTEM_QUEUE)
        || client
            .permissions
            .borrow()
            .as_ref()
            .is_some_and(|permissions| !permissions.rules().subscribe_allowed(subject, queue));
    if denied {
        stats::add(&shard.counters().permission_violations, 1);
        log::warn!(
            target: "tern::auth",
            "{} - cid:{} - {} - Subscription Violation - Subject {}{}, SID {}",
            client.address,
            client.id,
            client.identity.borrow(),
            errors::go_quote(subject),
            queue.map(|queue| format!(", Queue: {}", errors::go_quote(queue))).unwrap_or_default(),
            String::from_utf8_lossy(sid)
        );
        client.queue_err(&errors::subscribe_violation(subject, queue));
        return;
    }
    let max_subscriptions = shard.limits().max_subscriptions;
    if max_subscriptions > 0 && client.subscriptions.borrow().len() >= max_subscriptions {
        client.queue_err(errors::MAXIMUM_SUBSCRIPTIONS_EXCEEDED);
        return;
    }
    if client.subscriptions.borrow().contains_key(sid) {
        client.queue_ok();
        return;
    }
    let subscription = Rc::new(Subscription {
        client: Rc::downgrade(client),
        client_id: client.id,
        sid: Bytes::copy_from_slice(sid),
        subject: Bytes::copy_from_slice(subject),
        queue: queue.map(Bytes::copy_from_slice),
        delivered: Cell::new(0),
        max: Cell::new(0),
        closed: Cell::new(false),
        deny_filtered: Cell::new(
            client
                .permissions
                .borrow()
                .as_ref()
                .is_some_and(|permissions| permissions.rules().filters_delivery(subject, queue)),
        ),
    });
    match shard.subscribe(&subscription) {
        Err(_) => {
            client.queue_err(errors::INVALID_SUBJECT);
        }
        Ok(needed) => {
            client
                .subscriptions
                .borrow_mut()
                .insert(subscription.sid.clone(), subscription);
            stats::add(&shard.counters().subscriptions, 1);
            if let Some(needed) = needed {
                client.interest_needed.set(needed);
            }
            client.queue_ok();
        }
    }
}

fn handle_unsubscribe<H: ClientHost>(
    shard: &Rc<H>,
    client: &Rc<Client>,
    sid: &[u8],
    max_messages: i64,
    now: Instant,
) {
    client.last_in.set(now);
    let subscription = client.subscriptions.borrow().get(sid).cloned();
    if let Some(subscription) = subscription {
        if max_messages > 0 && max_messages as u64 > subscription.delivered.get() {
            subscription.max.set(max_messages as u64);
        } else {
            unsubscribe(&**shard, client, &subscription);
        }
    }
    client.queue_ok();
}

/// Removes one subscription of `client` everywhere.
pub fn unsubscribe<H: ClientHost>(shard: &H, client: &Client, subscription: &Rc<Subscription>) {
    shard.unsubscribe(client, subscription);
}

/// Removes every subscription of a closing client.
pub fn unsubscribe_all<H: ClientHost>(shard: &H, client: &Client) {
    let subscriptions: Vec<Rc<Subscription>> =
        client.subscriptions.borrow().values().cloned().collect();
    for subscription in subscriptions {
        unsubscribe(shard, client, &subscription);
    }
    assert!(client.subscriptions.borrow().is_empty());
}

/// nats-server `sysGroup`: a queue group name clients may not use.
const SYSTEM_QUEUE: &[u8] = b"_sys_";

/// Reserved subject prefixes a client may not publish to.
fn reserved_subject(subject: &[u8]) -> bool {
    subject.starts_with(b"_GR_.") || subject.starts_with(b"$NRG.")
}

/// Reserved reply prefixes a client may not use.
fn reserved_reply(reply: &[u8]) -> bool {
    reply.starts_with(b"_R_.") || reply.starts_with(b"_GR_.") || reply.starts_with(b"$JS.ACK.")
}

fn handle_publish<H: ClientHost>(
    shard: &Rc<H>,
    client: &Rc<Client>,
    publish: &Publish<'_>,
    now: Instant,
) {
    stats::add(&client.in_msgs, 1);
    stats::add(&client.in_bytes, publish.message.len() as u64);
    stats::add(&shard.counters().in_msgs, 1);
    stats::add(&shard.counters().in_bytes, publish.message.len() as u64);
    client.last_in.set(now);
    let flags = client.flags.get();
    if flags.pedantic && !subject::is_valid_literal_subject(publish.subject) {
        client.queue_err(errors::INVALID_PUBLISH_SUBJECT);
    }
    if reserved_subject(publish.subject) {
        client.queue_err(&errors::publish_violation(publish.subject));
        return;
    }
    if flags.publish_checked && !client.publish_allowed(publish.subject, now) {
        // Never routed: not delivered, not stored by JetStream (its API
        // and ack subjects are checked like any other).
        stats::add(&shard.counters().permission_violations, 1);
        log::warn!(
            target: "tern::auth",
            "{} - cid:{} - {} - Publish Violation - Subject {}",
            client.address,
            client.id,
            client.identity.borrow(),
            errors::go_quote(publish.subject)
        );
        client.queue_err(&errors::publish_violation(publish.subject));
        return;
    }
    if let Some(reply) = publish.reply {
        if reserved_reply(reply) {
            client.queue_err(&errors::reply_violation(reply));
            return;
        }
    }
    client.queue_ok();
    shard.route_publish(client, publish);
}

async fn write_loop<H: ClientHost>(shard: Rc<H>, client: Rc<Client>, mut stream: SharedStream) {
    let mut spare: Vec<u8> = Vec::with_capacity(1024);
    let write_deadline = shard.limits().write_deadline;
    loop {
        std::future::poll_fn(|context| {
            if !client.outbound.borrow().is_empty() || !client.is_open() {
                Poll::Ready(())
            } else {
                *client.writer_waker.borrow_mut() = Some(context.waker().clone());
                Poll::Pending
            }
        })
        .await;
        let state = client.state.get();
        if state == State::Closed
            || (state == State::Closing && client.outbound.borrow().is_empty())
        {
            break;
        }
        std::mem::swap(&mut *client.outbound.borrow_mut(), &mut spare);
        client.in_flight_bytes.set(spare.len());
        let deadline = if state == State::Open {
            write_deadline
        } else {
            CLOSE_FLUSH_DEADLINE.min(write_deadline)
        };
        // A TLS session holds records until flushed.
        let written = tern_shard::timer::timeout(deadline, async {
            stream.write_all(&spare).await?;
            stream.flush().await
        })
        .await;
        client.in_flight_bytes.set(0);
        client.wake_drain_waiters();
        match written {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                client.close_now(CloseReason::WriteError);
                break;
            }
            Err(_) => {
                if client.is_open() {
                    log::info!(
                        target: "tern::client",
                        "{} - cid:{} - Slow Consumer Detected: WriteDeadline of {:?} exceeded",
                        client.address,
                        client.id,
                        write_deadline
                    );
                    stats::add(&shard.counters().slow_consumers, 1);
                }
                client.close_now(CloseReason::SlowConsumerWriteDeadline);
                break;
            }
        }
        spare.clear();
        if spare.capacity() > OUTBOUND_RETAINED_BYTES {
            spare = Vec::with_capacity(1024);
        }
    }
    stream.shutdown();
}

async fn ping_loop<H: ClientHost>(shard: Rc<H>, client: Rc<Client>) {
    let limits = &shard.limits();
    let interval = limits.ping_interval;
    let first = interval.min(FIRST_PING_INTERVAL);
    // nats-server adds up to 20 % jitter to the first PING.
    let jitter_ns = shard.random_below((first.as_nanos() as u64 / 5).max(1));
    tern_shard::timer::sleep(first + Duration::from_nanos(jitter_ns)).await;
    while client.is_open() {
        let now = Instant::now();
        let need_rtt = client.rtt.get().is_none()
            || client.rtt_start.get().is_none_or(|start| {
                now.saturating_duration_since(start) > RTT_MEASUREMENT_INTERVAL
            });
        let recently_active = now.saturating_duration_since(client.last_in.get()) < interval;
        if need_rtt || !recently_active {
            if client.pings_out.get() + 1 > limits.ping_max {
                log::debug!(target: "tern::client", "{} - cid:{} - Stale Client Connection - Closing", client.address, client.id);
                stats::add(&shard.counters().stale_connections, 1);
                client.close_with_err(errors::STALE_CONNECTION, CloseReason::StaleConnection);
                break;
            }
            client.rtt_start.set(Some(now));
            client.pings_out.set(client.pings_out.get() + 1);
            client.queue_bytes(encode::PING);
        }
        tern_shard::timer::sleep(interval).await;
    }
}

/// Refuses a connection: INFO, then `-ERR '<text>'`, then close.
pub async fn reject(mut stream: TcpStream, info: Vec<u8>, text: &'static str) {
    let mut bytes = info;
    encode::push_err(&mut bytes, text);
    let _ = tern_shard::timer::timeout(CLOSE_FLUSH_DEADLINE, stream.write_all(&bytes)).await;
    let _ = stream.shutdown(std::net::Shutdown::Both).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_buffer_grows_only_as_needed() {
        let limit = 1024 * 1024 + 4096 + 80;
        let mut buffer = ReadBuffer::new(limit);
        // Full reads grow it up to the busy size, not beyond.
        for _ in 0..10 {
            let spare = buffer.spare(None).len();
            buffer.filled(spare);
            buffer.consume(buffer.end - buffer.start);
        }
        assert!(buffer.data.len() <= READ_BUFFER_BUSY_BYTES);
        // An operation that needs more gets exactly room for it.
        buffer.filled(10);
        let spare = buffer.spare(Some(500_000)).len();
        assert!(buffer.data.len() >= 500_000);
        assert!(spare >= 500_000 - 10);
        buffer.consume(10);
        buffer.shrink_if_idle();
        assert_eq!(buffer.data.len(), READ_BUFFER_INITIAL_BYTES);
    }

    #[test]
    fn read_buffer_compacts_before_growing() {
        let mut buffer = ReadBuffer::new(1 << 20);
        let size = buffer.spare(None).len();
        buffer.filled(size);
        buffer.consume(size - 3);
        let before = buffer.data.len();
        let spare = buffer.spare(Some(100)).len();
        assert_eq!(buffer.start, 0);
        assert_eq!(buffer.unparsed().len(), 3);
        assert_eq!(buffer.data.len(), before);
        assert!(spare >= 97);
    }
}
