//! Spawning the shards: one pinned glommio executor per configured CPU, the
//! channel mesh and the shutdown signal wired before any shard runs.

use std::future::Future;
use std::sync::Arc;

use glommio::{LocalExecutorBuilder, Placement};

use crate::cpuset::CpuList;
use crate::mesh::{full_mesh, MeshEnds};
use crate::shutdown::{block_shutdown_signals, Control, Shutdown, CONTROL_RING_CAPACITY};

/// How to start the shards.
#[derive(Clone, Debug)]
pub struct ShardSpec {
    /// Shard `i` runs pinned to `cpus[i]`, or (`pinned` false) floats
    /// wherever the kernel schedules it, the list only counting the shards.
    pub cpus: CpuList,
    pub pinned: bool,
    /// glommio io memory per shard (registered with io_uring, counts to memlock).
    pub io_memory_bytes: usize,
    /// Messages each mesh ring holds before senders wait.
    pub mesh_ring_capacity: usize,
    /// Watch SIGINT/SIGTERM and turn them into shutdown.
    pub watch_signals: bool,
    /// Busy-poll this long for new I/O before sleeping when a shard runs out
    /// of work (Seastar's idle poll): trades idle CPU for wake-up latency.
    pub spin_before_park: Option<std::time::Duration>,
}

/// What a shard's entry function receives.
pub struct ShardContext<M: Send + 'static> {
    pub index: usize,
    pub shard_count: usize,
    pub cpu: usize,
    /// This shard's ends of the application mesh; call `connect` first thing.
    pub mesh: MeshEnds<M>,
    pub shutdown: Shutdown,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("could not start shard {index} on CPU {cpu}: {message}")]
    Spawn {
        index: usize,
        cpu: usize,
        message: String,
    },
    #[error("shard {index} on CPU {cpu} stopped abnormally: {message}")]
    Join {
        index: usize,
        cpu: usize,
        message: String,
    },
}

/// Runs `entry` on every shard and returns each shard's result, in shard order,
/// once all have returned.
pub fn run_shards<M, T, F, Fut>(spec: &ShardSpec, entry: F) -> Result<Vec<T>, RuntimeError>
where
    M: Send + 'static,
    T: Send + 'static,
    F: Fn(ShardContext<M>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = T> + 'static,
{
    let shard_count = spec.cpus.len();
    assert!(shard_count > 0);
    if spec.watch_signals {
        block_shutdown_signals();
    }
    let entry = Arc::new(entry);
    let mut meshes = full_mesh::<M>(shard_count, spec.mesh_ring_capacity).into_iter();
    let mut controls = full_mesh::<Control>(shard_count, CONTROL_RING_CAPACITY).into_iter();
    let mut handles = Vec::with_capacity(shard_count);
    for (index, &cpu) in spec.cpus.cpus().iter().enumerate() {
        let mesh = meshes.next().expect("one mesh end per shard");
        let control = controls.next().expect("one control end per shard");
        let entry = entry.clone();
        let watch_signals = spec.watch_signals && index == 0;
        let placement = if spec.pinned {
            Placement::Fixed(cpu)
        } else {
            Placement::Unbound
        };
        let mut builder = LocalExecutorBuilder::new(placement)
            .name(&format!("shard-{index}"))
            .io_memory(spec.io_memory_bytes);
        if let Some(spin) = spec.spin_before_park.filter(|spin| !spin.is_zero()) {
            builder = builder.spin_before_park(spin);
        }
        let handle = builder
            .spawn(move || async move {
                let shutdown = Shutdown::connect(control, watch_signals).await;
                let context = ShardContext {
                    index,
                    shard_count,
                    cpu,
                    mesh,
                    shutdown,
                };
                entry(context).await
            })
            .map_err(|error| RuntimeError::Spawn {
                index,
                cpu,
                message: error.to_string(),
            })?;
        handles.push((index, cpu, handle));
    }
    let mut results = Vec::with_capacity(shard_count);
    for (index, cpu, handle) in handles {
        let result = handle.join().map_err(|error| RuntimeError::Join {
            index,
            cpu,
            message: error.to_string(),
        })?;
        results.push(result);
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    fn spec(cpus: &str) -> ShardSpec {
        ShardSpec {
            cpus: CpuList::parse(cpus).unwrap(),
            pinned: true,
            io_memory_bytes: 256 * 1024,
            mesh_ring_capacity: 16,
            watch_signals: false,
            spin_before_park: None,
        }
    }

    /// Every shard sends its index to every peer; each sums what it receives.
    #[test]
    fn mesh_delivers_between_all_pairs_in_order() {
        let cpus = CpuList::online();
        let list = cpus
            .cpus()
            .iter()
            .map(|cpu| cpu.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let count = cpus.len();
        let results =
            run_shards::<(usize, u32), _, _, _>(&spec(&list), move |context| async move {
                let mut mesh = context.mesh.connect();
                let receivers = mesh.take_receivers();
                let received = Rc::new(Cell::new(0usize));
                let mut tasks = Vec::new();
                for (peer, receiver) in receivers {
                    let received = received.clone();
                    tasks.push(glommio::spawn_local(async move {
                        for expected in 0..100u32 {
                            let (from, sequence) = receiver.recv().await.unwrap();
                            assert_eq!(from, peer);
                            assert_eq!(sequence, expected, "per-pair FIFO");
                            received.set(received.get() + 1);
                            receiver.handled();
                        }
                    }));
                }
                for peer in 0..context.shard_count {
                    if peer != context.index {
                        for sequence in 0..100u32 {
                            mesh.send(peer, (context.index, sequence)).await.unwrap();
                        }
                    }
                }
                for task in tasks {
                    task.await;
                }
                for (_, progress) in mesh.progress() {
                    progress.catch_up().await;
                    assert!(progress.caught_up());
                }
                received.get()
            })
            .unwrap();
        assert_eq!(results.len(), count);
        for received in results {
            assert_eq!(received, 100 * (count - 1));
        }
    }

    #[test]
    fn shutdown_reaches_every_shard() {
        let cpus = CpuList::online();
        let list = cpus
            .cpus()
            .iter()
            .map(|cpu| cpu.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let results = run_shards::<(), _, _, _>(&spec(&list), |context| async move {
            let _mesh = context.mesh.connect();
            if context.index == 0 {
                context.shutdown.trigger();
            }
            context.shutdown.wait().await;
            context.shutdown.is_triggered()
        })
        .unwrap();
        assert!(results.into_iter().all(|triggered| triggered));
    }

    #[test]
    fn runs_pinned_to_the_named_cpu() {
        let cpu = *CpuList::online().cpus().last().unwrap();
        let results = run_shards::<(), _, _, _>(&spec(&cpu.to_string()), |_context| async move {
            // SAFETY: sched_getcpu has no preconditions.
            unsafe { libc::sched_getcpu() }
        })
        .unwrap();
        assert_eq!(results, vec![cpu as i32]);
    }
}
