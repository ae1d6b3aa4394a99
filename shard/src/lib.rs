//! tern-shard: the thread-per-core runtime.
//!
//! A node runs one shard per configured CPU. Each shard is a glommio
//! `LocalExecutor` pinned to its CPU; shard state is `!Send` and never shared.
//! Shards talk only through the channel [`mesh`]: bounded lock-free rings,
//! one per ordered pair of shards. This crate owns:
//!
//! - [`cpuset`]: parsing `--cores` in taskset syntax (`1`, `0-3`, `0,2`).
//! - [`heap`]: the process heap policy (large buffers stay resident).
//! - [`memlock`]: the RLIMIT_MEMLOCK check at start-up.
//! - [`placement`]: jump consistent hash from a stream's key to its shard.
//! - [`mesh`]: the full channel mesh between shards.
//! - [`ring`]: one ring of the mesh (a lock-free queue, wake-ups only for a parked side).
//! - [`timer`]: shard-local timers (sleep, deadlines).
//! - [`shutdown`]: SIGINT/SIGTERM turned into a per-shard shutdown signal.
//! - [`runtime`]: spawning the pinned executors and joining them.
//! - [`spin`]: spinning instead of parking while a peer shard's reply is due.
//! - [`waiters`]: tasks of one shard waiting for a condition.
//!
//! glommio types stay behind these small interfaces so that moving to another
//! io_uring runtime touches this crate (and `storage`) only.

pub mod cpuset;
pub mod heap;
pub mod memlock;
pub mod mesh;
pub mod placement;
pub mod ring;
pub mod runtime;
pub mod shutdown;
pub mod spin;
pub mod timer;
pub mod waiters;

pub use cpuset::CpuList;
pub use mesh::{Mesh, MeshError};
pub use placement::jump_hash;
pub use runtime::{run_shards, RuntimeError, ShardContext, ShardSpec};
pub use shutdown::Shutdown;
pub use waiters::Waiters;
