//! Bytes stored per shard, for the server-wide `max_file_store` and
//! `max_memory_store` limits.
//!
//! nats-server refuses a publish with 503 10023 `insufficient resources` once
//! the server's stored bytes of that storage type exceed the limit. Streams
//! live on different shards, so the total is a sum over shards: one slot per
//! shard, each written only by its own shard (after a stream task's turn) and
//! read by the others when a publish is checked. A slot is a cache line of its
//! own, so a shard's writes do not slow the others' reads of their slots, and
//! only shards with a configured limit read at all. Like the ring counters in
//! `tern-shard`'s mesh, no lock is involved and no shard waits for another.

use std::sync::atomic::{AtomicU64, Ordering};

use super::stream::config::StorageType;

/// One shard's stored bytes, on a cache line of its own.
#[repr(align(64))]
#[derive(Default)]
struct UsageSlot {
    file_bytes: AtomicU64,
    memory_bytes: AtomicU64,
}

impl UsageSlot {
    fn bytes(&self, storage: StorageType) -> &AtomicU64 {
        match storage {
            StorageType::File => &self.file_bytes,
            StorageType::Memory => &self.memory_bytes,
        }
    }
}

/// Stored bytes of every shard; shared by all of them.
pub struct StorageUsage {
    slots: Box<[UsageSlot]>,
}

impl StorageUsage {
    pub fn new(shard_count: usize) -> StorageUsage {
        assert!(shard_count > 0);
        StorageUsage {
            slots: (0..shard_count).map(|_| UsageSlot::default()).collect(),
        }
    }

    /// Shard `shard` now stores `after` bytes of `storage` in one stream that
    /// stored `before` (only shard `shard` calls this for its slot).
    pub fn record(&self, shard: usize, storage: StorageType, before: u64, after: u64) {
        let slot = self.slots[shard].bytes(storage);
        if after >= before {
            slot.fetch_add(after - before, Ordering::Relaxed);
        } else {
            let previous = slot.fetch_sub(before - after, Ordering::Relaxed);
            assert!(
                previous >= before - after,
                "a shard's stored bytes never go below zero"
            );
        }
    }

    /// Bytes of `storage` stored by every shard (each slot as last written).
    pub fn total_bytes(&self, storage: StorageType) -> u64 {
        self.slots
            .iter()
            .map(|slot| slot.bytes(storage).load(Ordering::Relaxed))
            .sum()
    }

    /// Whether the server stores more of `storage` than `limit_bytes`
    /// (negative: no limit), nats-server's test before storing a message.
    pub fn exceeds(&self, storage: StorageType, limit_bytes: i64) -> bool {
        u64::try_from(limit_bytes).is_ok_and(|limit| self.total_bytes(storage) > limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_sum_every_shard_and_follow_each_stream() {
        let usage = StorageUsage::new(3);
        usage.record(0, StorageType::File, 0, 600);
        usage.record(2, StorageType::File, 0, 500);
        usage.record(1, StorageType::Memory, 0, 70);
        assert_eq!(usage.total_bytes(StorageType::File), 1_100);
        assert_eq!(usage.total_bytes(StorageType::Memory), 70);
        assert!(usage.exceeds(StorageType::File, 1_099));
        // At the limit is not over it.
        assert!(!usage.exceeds(StorageType::File, 1_100));
        assert!(!usage.exceeds(StorageType::File, -1));
        // A purge, then a delete.
        usage.record(0, StorageType::File, 600, 100);
        usage.record(2, StorageType::File, 500, 0);
        assert_eq!(usage.total_bytes(StorageType::File), 100);
        assert!(!usage.exceeds(StorageType::File, 1_099));
    }

    #[test]
    #[should_panic(expected = "never go below zero")]
    fn releasing_more_than_recorded_is_a_bug() {
        let usage = StorageUsage::new(1);
        usage.record(0, StorageType::File, 0, 10);
        usage.record(0, StorageType::File, 20, 0);
    }
}
