//! The process heap policy: large buffers stay resident between uses.
//!
//! Shards allocate and free large buffers on every durable write and every
//! store read: the journal's batch buffer (`max_payload` + 128 KiB), the
//! block store's write and read-ahead buffers (hundreds of KiB). glommio
//! carves them from its registered `io_memory` pool while it has room and
//! from the heap otherwise. With glibc's default thresholds, the heap served
//! them with a fresh `mmap` and gave them back with `munmap` on free. Each
//! cycle costs two syscalls that take the process-wide `mmap_lock` (which
//! the other shards' page faults take too), a TLB shootdown on every other
//! CPU running a shard (an inter-processor interrupt: a VM exit on a virtual
//! machine), and a minor page fault for each 4 KiB page touched afterwards.
//! Measured on one shard storing then draining 200 000 × 1 KiB messages with
//! `--sync always`: 2 852 mmap/munmap pairs and 131 000 minor page faults;
//! with this policy none and 2 000.
//!
//! [`keep_large_buffers_resident`] fixes glibc's mmap threshold at its
//! maximum (32 MiB), so those buffers come from the shard thread's own
//! arena, and raises the trim threshold, so freed memory stays mapped and
//! faulted in for the next buffer. The price is resident memory: freed
//! buffers stay with their arena for the next use instead of returning to
//! the kernel (peak RSS of that drain rose from 14 MiB to 16–23 MiB;
//! nats-server's was 58 MiB).
//!
//! Tested end to end by `durable_publishes_and_reads_reuse_resident_buffers`
//! (broker/it/tests/it/jetstream_publish.rs), which counts the server's page
//! faults: the allocator's state is process-wide, so a unit test here could
//! not tell the policy's effect from what earlier tests left behind.

/// glibc's upper bound for `M_MMAP_THRESHOLD` on 64-bit targets
/// (`DEFAULT_MMAP_THRESHOLD_MAX`): allocations at least this large are
/// mapped on their own whatever the setting.
pub const MMAP_THRESHOLD_BYTES: usize = 32 << 20;

/// Free memory at the top of an arena kept mapped before glibc trims it.
pub const TRIM_THRESHOLD_BYTES: usize = 256 << 20;

/// What [`keep_large_buffers_resident`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapPolicy {
    /// Both thresholds set.
    Applied,
    /// glibc refused a setting (its return value was 0): the defaults stay.
    Refused { parameter: &'static str },
    /// Not glibc: its allocator decides.
    Unsupported,
}

/// Applies the policy above. Call once at start-up, before the shards start
/// allocating; the thresholds are process-wide.
pub fn keep_large_buffers_resident() -> HeapPolicy {
    apply()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn apply() -> HeapPolicy {
    const { assert!(MMAP_THRESHOLD_BYTES <= i32::MAX as usize) };
    const { assert!(TRIM_THRESHOLD_BYTES <= i32::MAX as usize) };
    // SAFETY: mallopt only changes allocator parameters; it is safe to call
    // at any time, from any thread.
    let mmap = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES as i32) };
    if mmap == 0 {
        return HeapPolicy::Refused {
            parameter: "M_MMAP_THRESHOLD",
        };
    }
    // SAFETY: as above.
    let trim = unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES as i32) };
    if trim == 0 {
        return HeapPolicy::Refused {
            parameter: "M_TRIM_THRESHOLD",
        };
    }
    HeapPolicy::Applied
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn apply() -> HeapPolicy {
    HeapPolicy::Unsupported
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    #[test]
    fn glibc_accepts_both_thresholds() {
        // mallopt refuses (returns 0) values past glibc's limits, silently
        // leaving the defaults: this catches a threshold raised too far.
        assert_eq!(keep_large_buffers_resident(), HeapPolicy::Applied);
    }
}
