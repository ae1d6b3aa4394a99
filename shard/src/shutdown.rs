//! Clean shutdown: SIGINT/SIGTERM (or any shard asking) becomes a per-shard
//! signal that tasks await. Shard 0 watches the process signals; every shard
//! forwards the first trigger to all peers over a small control mesh.
//!
//! SIGHUP does not shut down: shard 0's watcher counts it as a reload
//! request ([`Shutdown::reload_requests`], [`Shutdown::wait_reload_request`])
//! and keeps watching. What a reload does is the application's business.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::mesh::{Mesh, MeshEnds};
use crate::waiters::Waiters;

/// What crosses the control mesh.
#[derive(Debug, Clone, Copy)]
pub enum Control {
    Shutdown,
}

/// Each shard sends at most one control message to each peer.
pub const CONTROL_RING_CAPACITY: usize = 4;

/// How often the signal watcher thread checks whether it should stop.
const SIGNAL_POLL_INTERVAL: Duration = Duration::from_millis(200);

struct Inner {
    triggered: Cell<bool>,
    waiters: Waiters,
    /// SIGHUPs collected so far (shard 0 only; always 0 elsewhere).
    reload_requests: Cell<u64>,
    reload_waiters: Waiters,
    peers: Mesh<Control>,
    /// Tells shard 0's blocking signal watcher to return.
    watcher_stop: Arc<AtomicBool>,
}

/// The shard's shutdown signal. Cloning shares it within the shard.
#[derive(Clone)]
pub struct Shutdown {
    inner: Rc<Inner>,
}

impl Shutdown {
    pub(crate) async fn connect(ends: MeshEnds<Control>, watch_signals: bool) -> Shutdown {
        let mut peers = ends.connect();
        let receivers = peers.take_receivers();
        let shutdown = Shutdown {
            inner: Rc::new(Inner {
                triggered: Cell::new(false),
                waiters: Waiters::new(),
                reload_requests: Cell::new(0),
                reload_waiters: Waiters::new(),
                peers,
                watcher_stop: Arc::new(AtomicBool::new(false)),
            }),
        };
        for (_, receiver) in receivers {
            let shutdown = shutdown.clone();
            glommio::spawn_local(async move {
                if let Some(Control::Shutdown) = receiver.recv().await {
                    receiver.handled();
                    shutdown.trigger_local();
                }
            })
            .detach();
        }
        if watch_signals {
            glommio::spawn_local(shutdown.clone().watch_signals()).detach();
        }
        shutdown
    }

    /// Collects process signals on a blocking thread, one at a time: a
    /// SIGHUP counts a reload request and the watch goes on (signals that
    /// arrive between two waits stay pending: they are blocked), SIGINT or
    /// SIGTERM shuts down.
    async fn watch_signals(self) {
        loop {
            let stop = self.inner.watcher_stop.clone();
            let signal = glommio::executor()
                .spawn_blocking(move || wait_for_signal(&stop))
                .await;
            match signal {
                None => return,
                Some(Signal::Hangup) => {
                    log::info!("Trapped {:?} signal", Signal::Hangup);
                    let requests = self.inner.reload_requests.get() + 1;
                    self.inner.reload_requests.set(requests);
                    self.inner.reload_waiters.wake_all();
                }
                Some(signal) => {
                    log::info!("Trapped {signal:?} signal");
                    self.trigger();
                    return;
                }
            }
        }
    }

    /// How many SIGHUPs shard 0 collected (0 on other shards).
    pub fn reload_requests(&self) -> u64 {
        self.inner.reload_requests.get()
    }

    /// Completes once more than `seen` reload requests were collected, or
    /// shutdown began; returns the count of requests.
    pub async fn wait_reload_request(&self, seen: u64) -> u64 {
        self.inner
            .reload_waiters
            .wait_until(|| self.inner.reload_requests.get() > seen || self.is_triggered())
            .await;
        self.inner.reload_requests.get()
    }

    pub fn is_triggered(&self) -> bool {
        self.inner.triggered.get()
    }

    /// Starts shutdown on this shard and every peer.
    pub fn trigger(&self) {
        if self.trigger_local() {
            for peer in 0..self.inner.peers.shard_count() {
                if peer != self.inner.peers.index() {
                    // A full or closed ring means the peer is already shutting down.
                    let _ = self.inner.peers.try_send(peer, Control::Shutdown);
                }
            }
        }
    }

    /// Returns whether this call was the first trigger on this shard.
    fn trigger_local(&self) -> bool {
        if self.inner.triggered.replace(true) {
            return false;
        }
        self.inner.watcher_stop.store(true, Ordering::Relaxed);
        self.inner.waiters.wake_all();
        self.inner.reload_waiters.wake_all();
        true
    }

    /// Completes once shutdown has been triggered.
    pub async fn wait(&self) {
        self.inner
            .waiters
            .wait_until(|| self.inner.triggered.get())
            .await
    }
}

/// A process signal the watcher collects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT: shut down.
    Interrupt,
    /// SIGTERM: shut down.
    Terminate,
    /// SIGHUP: reload the configuration; no shutdown.
    Hangup,
}

fn shutdown_signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data initialised by sigemptyset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        set
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and threads it
/// spawns later), so they stay pending until the watcher collects them.
pub fn block_shutdown_signals() {
    let set = shutdown_signal_set();
    // SAFETY: valid set pointer; old mask not requested.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "pthread_sigmask failed");
}

/// Waits for SIGINT, SIGTERM or SIGHUP, checking `stop` between short waits.
fn wait_for_signal(stop: &AtomicBool) -> Option<Signal> {
    let set = shutdown_signal_set();
    let timeout = libc::timespec {
        tv_sec: 0,
        tv_nsec: SIGNAL_POLL_INTERVAL.as_nanos() as libc::c_long,
    };
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: valid set and timeout; no siginfo requested.
        let signal = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
        match signal {
            libc::SIGINT => return Some(Signal::Interrupt),
            libc::SIGTERM => return Some(Signal::Terminate),
            libc::SIGHUP => return Some(Signal::Hangup),
            _ => continue,
        }
    }
    None
}
