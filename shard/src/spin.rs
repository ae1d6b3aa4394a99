//! Spinning instead of parking while a reply from another shard is due.
//!
//! A parked glommio executor is woken through an eventfd: on a VM that is an
//! inter-processor interrupt plus a VM exit and entry, tens of microseconds.
//! When a shard has just forwarded a request whose answer comes back from a
//! peer shard (a JetStream publish routed to the stream's owner), the answer
//! is due within a journal commit. [`Spinner::arm`] wakes a task that spins on
//! the incoming rings' counters until a peer message is pending or the window
//! lapses, then returns to the executor, which finds the message without
//! having parked. The spin holds the executor: the window bounds what other
//! work on the shard can wait, and it ends the moment anything arrives.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::mesh::RingProgress;
use crate::Waiters;

/// One per shard. Cheap to arm on every forwarded request.
pub struct Spinner {
    window: Duration,
    until: Cell<Option<Instant>>,
    armed: Waiters,
    rings: Vec<Rc<RingProgress>>,
    spins: Cell<u64>,
    spins_answered: Cell<u64>,
}

impl Spinner {
    /// A spinner that watches `rings` for up to `window` after each
    /// [`arm`](Self::arm). A zero window turns it off.
    pub fn new(window: Duration, rings: Vec<Rc<RingProgress>>) -> Rc<Spinner> {
        Rc::new(Spinner {
            window,
            until: Cell::new(None),
            armed: Waiters::new(),
            rings,
            spins: Cell::new(0),
            spins_answered: Cell::new(0),
        })
    }

    /// Spins, at the next chance the executor gives, until a peer message is
    /// pending or `window` from now.
    pub fn arm(&self) {
        if self.window.is_zero() || self.rings.is_empty() {
            return;
        }
        let was_idle = self.until.get().is_none();
        self.until.set(Some(Instant::now() + self.window));
        if was_idle {
            self.armed.wake_all();
        }
    }

    /// `(spins, spins that ended with a message)`, for statistics.
    pub fn counts(&self) -> (u64, u64) {
        (self.spins.get(), self.spins_answered.get())
    }

    /// The spinning task: run once per shard for the shard's lifetime.
    pub async fn run(self: Rc<Self>) {
        if self.window.is_zero() || self.rings.is_empty() {
            return;
        }
        loop {
            let this = self.clone();
            self.armed
                .wait_until(move || this.until.get().is_some())
                .await;
            // Let whatever is runnable go first: a spin only replaces a park.
            futures_lite::future::yield_now().await;
            let Some(until) = self.until.take() else {
                continue;
            };
            self.spins.set(self.spins.get() + 1);
            loop {
                if self.rings.iter().any(|ring| !ring.caught_up()) {
                    self.spins_answered.set(self.spins_answered.get() + 1);
                    break;
                }
                if Instant::now() >= until {
                    break;
                }
                std::hint::spin_loop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_armed(window: Duration, pending: u64) -> (Duration, (u64, u64)) {
        let executor = glommio::LocalExecutorBuilder::default()
            .io_memory(128 * 1024)
            .make()
            .unwrap();
        executor.run(async move {
            let spinner = Spinner::new(window, vec![RingProgress::with_sent(pending)]);
            let _task = glommio::spawn_local(spinner.clone().run());
            futures_lite::future::yield_now().await;
            let started = Instant::now();
            spinner.arm();
            // The spin holds the executor: once this task runs again, it is over.
            while spinner.counts().0 == 0 {
                futures_lite::future::yield_now().await;
            }
            (started.elapsed(), spinner.counts())
        })
    }

    #[test]
    fn a_pending_peer_message_ends_the_spin_at_once() {
        let (elapsed, (spins, answered)) = run_armed(Duration::from_secs(5), 1);
        assert_eq!((spins, answered), (1, 1));
        assert!(elapsed < Duration::from_secs(1), "spun {elapsed:?}");
    }

    #[test]
    fn without_a_message_the_spin_lasts_its_window() {
        let window = Duration::from_millis(20);
        let (elapsed, (spins, answered)) = run_armed(window, 0);
        assert_eq!((spins, answered), (1, 0));
        assert!(elapsed >= window, "spun {elapsed:?}");
    }

    #[test]
    fn a_zero_window_never_spins() {
        let spinner = Spinner::new(Duration::ZERO, vec![RingProgress::with_sent(0)]);
        spinner.arm();
        assert_eq!(spinner.counts(), (0, 0));
        assert!(spinner.until.get().is_none());
    }
}
