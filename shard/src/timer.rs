//! Shard-local timers. Each shard's timers fire on its own executor; nothing
//! here crosses threads. Thin wrappers so callers never name glommio.

use std::future::Future;
use std::time::{Duration, Instant};

/// Completes after `duration`.
pub async fn sleep(duration: Duration) {
    glommio::timer::sleep(duration).await;
}

/// Completes at `deadline` (immediately if it has passed).
pub async fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        sleep(deadline - now).await;
    }
}

/// The timeout elapsed before the future completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timed out after {0:?}")]
pub struct Elapsed(pub Duration);

/// Runs `future` for at most `duration`.
pub async fn timeout<F: Future>(duration: Duration, future: F) -> Result<F::Output, Elapsed> {
    futures_lite::future::or(async { Ok(future.await) }, async {
        sleep(duration).await;
        Err(Elapsed(duration))
    })
    .await
}

/// Spawns `tick` every `period` on the current shard until the handle is dropped.
pub fn every<F: FnMut() + 'static>(period: Duration, mut tick: F) -> PeriodicTask {
    assert!(!period.is_zero());
    PeriodicTask {
        _task: glommio::spawn_local(async move {
            loop {
                sleep(period).await;
                tick();
            }
        }),
    }
}

/// Handle of a task started by [`every`]; dropping it cancels the timer.
pub struct PeriodicTask {
    _task: glommio::Task<()>,
}

/// A task on the current shard that is cancelled when its handle is dropped.
pub struct ScopedTask<T> {
    _task: glommio::Task<T>,
}

/// Spawns `future` on the current shard; dropping the returned handle cancels it.
pub fn spawn_scoped<T: 'static>(future: impl Future<Output = T> + 'static) -> ScopedTask<T> {
    ScopedTask {
        _task: glommio::spawn_local(future),
    }
}

/// Spawns `future` on the current shard to run to completion in the background.
pub fn spawn_detached(future: impl Future<Output = ()> + 'static) {
    glommio::spawn_local(future).detach();
}
