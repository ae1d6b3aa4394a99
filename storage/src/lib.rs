//! tern-storage: the storage engine, with no knowledge of NATS.
//!
//! - [`format`]: the journal's byte layout (see `docs/storage-format.md`).
//! - [`device`]: the I/O interface (segments of aligned blocks).
//! - [`memory`]: an in-memory device that injects crashes, torn writes, bit
//!   flips, misdirected writes and I/O errors, deterministically from a seed.
//! - [`journal`]: one per shard; records from every group, group commit,
//!   `sync = always | never`, FIFO segment recycling by checkpoint.
//! - [`recovery`]: replay, verification, torn-tail cut, corruption reports.
//! - [`dma`]: the file and raw-device backend on O_DIRECT glommio files.
//! - [`journal_device`]: a raw block device holding every shard's journal
//!   (device header, one region per shard).
//! - [`block_store`]: per-stream segments and indexes.
//! - [`free_space`]: keeps the block store's filesystem above a reserve.

pub mod background;
pub mod block_store;
pub mod device;
pub mod dma;
pub mod format;
pub mod free_space;
pub mod journal;
pub mod journal_device;
pub mod memory;
pub mod recovery;

pub use device::{Device, DeviceError, HeapBuffer, IoBuffer};
pub use journal::{
    AppendError, Journal, JournalConfig, JournalError, JournalStats, NewRecord, ReadEnd, SyncPolicy,
};
pub use recovery::{Cut, CutReport, RecoveryReport, Repair, RepairKind, TailCut};
