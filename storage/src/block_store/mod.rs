//! The block store: one log per stream, written from the journal in large
//! sequential O_DIRECT writes, read by consumers. Segment files of
//! checksummed records; an in-memory index (sequence -> offset, size,
//! checksum, subject, time) rebuilt by a sequential scan at open and checked
//! on every read, so a misdirected write or a flipped bit is reported, never
//! returned; a subject table (first, last, count per subject); a tail cache;
//! a bounded read-ahead (a run per reader in order, up to four readers per
//! stream, the next `prefetch_runs` runs in flight, a record straddling two
//! runs served from both) for consumers reading in order;
//! deletes, purge from the head, retention by count, bytes and age; and
//! compaction of mostly-deleted segments; removal watches for readers
//! that walk the log while it changes (`removals.rs`). What a reopen may trust is the
//! [`Manifest`] the last checkpoint's `sync` returned: the log opens
//! exactly that extent, verified record by record and by a digest per
//! segment, and never removes a file a stored manifest may still name.
//! Byte tables in `docs/storage-format.md`.

pub mod files;
pub mod manifest;
pub mod record;
pub mod removals;
pub mod salvage;
pub mod stream;

pub use files::{DmaFiles, MemoryFiles, StoreFile, StoreFiles};
pub use manifest::{DeletesExtent, Manifest, ManifestError, SegmentExtent, SEGMENTS_MAX};
pub use record::{NewMessage, StoredView};
pub use removals::{RemovalWatches, Removed, WatchId, REMOVED_RANGES_MAX};
pub use salvage::{salvage, Loss, Salvage};
pub use stream::{
    stored_message_bytes, Limits, OpenReport, StoreError, StoredMessage, StreamConfig, StreamLog,
    StreamState,
};
