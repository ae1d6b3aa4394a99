//! Clean shutdown: SIGINT/SIGTERM (or any shard asking) becomes a per-shard
//! signal that tasks await. Shard 0 watches the process signals; every shard
//! forwards the first trigger to all peers over a small control mesh.

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
            let shutdown_for_signal = shutdown.clone();
            let stop = shutdown.inner.watcher_stop.clone();
            glommio::spawn_local(async move {
                let signal = glommio::executor()
                    .spawn_blocking(move || wait_for_signal(&stop))
                    .await;
                if let Some(signal) = signal {
                    log::info!("Trapped {signal:?} signal");
                    shutdown_for_signal.trigger();
                }
            })
            .detach();
        }
        shutdown
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

/// A process signal that asks for shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Interrupt,
    Terminate,
}

fn shutdown_signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data initialised by sigemptyset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

/// Blocks SIGINT and SIGTERM in the calling thread (and threads it spawns
/// later), so they stay pending until the watcher collects them.
pub fn block_shutdown_signals() {
    let set = shutdown_signal_set();
    // SAFETY: valid set pointer; old mask not requested.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "pthread_sigmask failed");
}

/// Waits for SIGINT/SIGTERM, checking `stop` between short waits.
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
            _ => continue,
        }
    }
    None
}
