//! tern-storage: the storage engine, with no knowledge of NATS.
//!
//! This crate will own (issue "Storage engine"):
//! - the per-shard **journal**: O_DIRECT, 4 KiB-aligned writes from preallocated
//!   DMA buffers onto preallocated segments or a raw NVMe namespace; records
//!   with header, checksum and hash chain; group commit without timers;
//!   `sync = always | never`; segment recycling after checkpoints;
//! - **recovery**: scan, verify, cut only a provably torn tail, report the rest;
//! - the **block store**: per-stream segments and indexes (sequence -> offset
//!   with checksum, subject -> last sequence), tail cache, O_DIRECT replay,
//!   deletes, purge, retention and compaction;
//! - a **fault-injecting disk** behind the same I/O interface, for tests.
//!
//! Nothing is implemented yet; the broker does not persist anything until then.
