//! Background work on a shard, below client traffic: block-store writes run
//! in their own glommio task queue with a tenth of the default shares, so a
//! burst of large sequential writes yields to the publish path.

use std::future::Future;

use glommio::{executor, Latency, Shares, TaskQueueHandle};

/// Shares of the background queue (glommio's default queue has 1000).
pub const BACKGROUND_SHARES: usize = 100;

/// A lower-priority task queue on the current shard.
pub fn background_queue(name: &str) -> TaskQueueHandle {
    executor().create_task_queue(
        Shares::Static(BACKGROUND_SHARES),
        Latency::NotImportant,
        name,
    )
}

/// Runs `future` in `queue` to completion in the background.
pub fn spawn_in<T: 'static>(
    queue: TaskQueueHandle,
    future: impl Future<Output = T> + 'static,
) -> glommio::Task<T> {
    glommio::spawn_local_into(future, queue).expect("the queue exists on this shard")
}
