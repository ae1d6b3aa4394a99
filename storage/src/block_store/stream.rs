//! One stream's log. See the module documentation of `block_store`.
//!
//! What is on disk, and what a reopen may trust, is described by a
//! [`Manifest`] that [`StreamLog::sync`] returns and the caller stores:
//! `open` requires exactly the manifest's extent to be there and verify,
//! and ignores (then removes) everything else. Files the latest stored
//! manifest may still name are never removed before the caller says a
//! newer one is stored ([`StreamLog::checkpointed`]).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

use crate::block_store::files::{StoreFile, StoreFiles};
use crate::block_store::manifest::{
    deletes_file_name, digest_append, parse_deletes_file_name, parse_segment_file_name,
    segment_file_name, DeletesExtent, Manifest, ManifestError, SegmentExtent, DELETE_ENTRY_BYTES,
    DIGEST_EMPTY, SEGMENTS_MAX,
};
use crate::block_store::record::{self, DecodeError, NewMessage, StoredView};
use crate::block_store::removals::{RemovalWatches, Removed, WatchId};
use crate::device::{DeviceError, IoBuffer};
use crate::format::{align_up, checksum, BLOCK_BYTES};

/// Leftovers of the format before manifests (`meta`, `meta.tmp`) and of
/// interrupted rewrites: removed at open like any file the manifest does
/// not name.
const LEGACY_META_FILE: &str = "meta";
const LEFTOVER_SUFFIXES: [&str; 2] = [".compact", ".tmp"];
/// Sequences one segment may span, counting gaps: a segment's in-memory
/// index is dense (one entry per sequence), so this bounds it at 64 MiB.
/// A write past it starts a new segment; a record past it when loading is
/// corruption. Above what the default 64 MiB of 40-byte records can reach.
pub const SEGMENT_SEQUENCES_MAX: u64 = 1 << 21;
/// Bound on [`StreamConfig::prefetch_runs`] (memory per reading stream is
/// `read_ahead_bytes` times one more than this).
pub const PREFETCH_RUNS_MAX: usize = 8;
/// Readers going in order through one stream at different places (two
/// consumers behind, a replay beside a worker) each keep their read-ahead
/// and prefetched runs: the current one plus up to this many parked.
const PARKED_READERS_MAX: usize = 3;
const DELETE_MAGIC: u32 = 0x4445_4c31; // "DEL1"

#[derive(Debug, Clone)]
pub struct StreamConfig {
    /// A segment file stops growing past this size.
    pub segment_bytes_max: u64,
    /// Bytes appended between flushes before a flush is forced (multiple of 4096).
    pub write_buffer_bytes: usize,
    /// Recent messages kept in memory for readers that keep up.
    pub tail_cache_bytes: usize,
    /// fdatasync on flush (the journal already made records durable; this
    /// makes the checkpoint true).
    pub sync: bool,
    /// Bytes read per request when replaying or opening.
    pub read_chunk_bytes: usize,
    /// Bytes [`StreamLog::get`] reads at once when a message is not in
    /// memory (multiple of 4096; 0 reads just the message's blocks). The
    /// run is kept (one per reader in order, at most four per stream), so
    /// the sequences after it (a consumer reading in order) are served
    /// without another disk read.
    pub read_ahead_bytes: usize,
    /// Runs after the read-ahead kept in flight for a reader going in
    /// order (requested once it is past the middle of a run), so the disk
    /// works while a consumer waits for acks or its next pull.
    pub prefetch_runs: usize,
    /// A sealed segment is rewritten when more than this share of it is deleted.
    pub compact_deleted_ratio: f64,
    /// What one message counts toward `StreamState::bytes` and the byte
    /// limit, from its subject, header and payload lengths (a protocol's own
    /// accounting; the default is the bytes it occupies here).
    pub message_bytes: fn(usize, usize, usize) -> u64,
    /// `deletes.log` is rewritten (floor raised, only interior deletes kept)
    /// once it grows past this many bytes.
    pub deletes_log_bytes_max: u64,
}

/// The default [`StreamConfig::message_bytes`]: bytes stored.
pub fn stored_message_bytes(subject: usize, headers: usize, payload: usize) -> u64 {
    record::stored_bytes(subject, headers, payload) as u64
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            segment_bytes_max: 64 << 20,
            write_buffer_bytes: 1 << 20,
            tail_cache_bytes: 4 << 20,
            sync: true,
            read_chunk_bytes: 4 << 20,
            read_ahead_bytes: 256 << 10,
            prefetch_runs: 2,
            compact_deleted_ratio: 0.5,
            message_bytes: stored_message_bytes,
            deletes_log_bytes_max: 1 << 20,
        }
    }
}

/// Retention limits (None: unlimited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub max_messages: Option<u64>,
    pub max_bytes: Option<u64>,
    pub max_age_ns: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("block store I/O: {0}")]
    Io(DeviceError),
    #[error("the block store stopped after an I/O error and needs reopening: {0}")]
    Poisoned(DeviceError),
    #[error("block store corrupt in {file} at offset {offset}: {reason}")]
    Corrupt {
        file: String,
        offset: u64,
        reason: String,
    },
    #[error("message of {bytes} bytes does not fit a segment of {max} bytes")]
    TooLarge { bytes: usize, max: u64 },
    #[error("sequence {sequence} does not follow the last stored sequence {last}")]
    OutOfOrder { sequence: u64, last: u64 },
    #[error("block store: {0}")]
    Manifest(#[from] ManifestError),
    #[error("a stream log holds at most {max} segments")]
    TooManySegments { max: usize },
}

/// A message read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    pub sequence: u64,
    pub timestamp_ns: u64,
    pub subject: Vec<u8>,
    pub headers: Vec<u8>,
    pub payload: Vec<u8>,
}

/// What the stream holds (for stream info).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamState {
    pub messages: u64,
    /// Bytes of live messages as [`StreamConfig::message_bytes`] counts them.
    pub bytes: u64,
    /// 0 when empty.
    pub first_sequence: u64,
    pub last_sequence: u64,
    pub first_timestamp_ns: u64,
    pub last_timestamp_ns: u64,
    pub subjects: u64,
    /// Sequences between first and last that are gone.
    pub deleted: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    offset: u32,
    /// Bytes the record occupies in its segment.
    bytes: u32,
    checksum: u32,
    subject: u32,
    timestamp_ns: u64,
    /// What it counts toward the stream's bytes.
    accounted_bytes: u32,
    live: bool,
}

const ABSENT: Entry = Entry {
    offset: 0,
    bytes: 0,
    checksum: 0,
    subject: 0,
    timestamp_ns: 0,
    accounted_bytes: 0,
    live: false,
};

struct Segment<F> {
    first_sequence: u64,
    /// Bumped by each compaction (the file name carries it).
    version: u32,
    name: String,
    /// Shared with a write in flight (write-behind).
    file: Rc<F>,
    /// Dense: entry `i` is sequence `first_sequence + i`.
    entries: Vec<Entry>,
    /// Bytes of the file in use (records).
    end: u64,
    live_bytes: u64,
    /// Records in `[0, end)` (deleted and purged ones included), the last
    /// one's sequence (0: none) and their digest: what the manifest
    /// records, kept up to date on append and compaction.
    records: u64,
    last_record_sequence: u64,
    digest: u32,
}

impl<F> Segment<F> {
    fn new(first_sequence: u64, version: u32, file: Rc<F>) -> Segment<F> {
        Segment {
            first_sequence,
            version,
            name: segment_file_name(first_sequence, version),
            file,
            entries: Vec::new(),
            end: 0,
            live_bytes: 0,
            records: 0,
            last_record_sequence: 0,
            digest: DIGEST_EMPTY,
        }
    }

    /// Counts one more record at the end.
    fn add_record(&mut self, sequence: u64, record_checksum: u32) {
        assert!(self.records == 0 || sequence > self.last_record_sequence);
        self.records += 1;
        self.last_record_sequence = sequence;
        self.digest = digest_append(self.digest, record_checksum);
    }

    fn extent(&self) -> SegmentExtent {
        SegmentExtent {
            first_sequence: self.first_sequence,
            version: self.version,
            bytes: self.end,
            records: self.records,
            last_record_sequence: self.last_record_sequence,
            digest: self.digest,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct SubjectState {
    first: u64,
    last: u64,
    count: u64,
}

#[derive(Default)]
struct Subjects {
    names: Vec<Box<[u8]>>,
    ids: HashMap<Box<[u8]>, u32>,
    state: Vec<SubjectState>,
    live: u64,
}

impl Subjects {
    fn id(&mut self, subject: &[u8]) -> u32 {
        if let Some(&id) = self.ids.get(subject) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(subject.into());
        self.ids.insert(subject.into(), id);
        self.state.push(SubjectState::default());
        id
    }

    fn add(&mut self, id: u32, sequence: u64) {
        let state = &mut self.state[id as usize];
        if state.count == 0 {
            state.first = sequence;
            self.live += 1;
        }
        state.count += 1;
        state.last = state.last.max(sequence);
    }
}

/// A buffer being written in the background, and a copy of what it holds.
struct PendingWrite {
    segment_first_sequence: u64,
    start: u64,
    bytes: Vec<u8>,
    task: glommio::Task<Result<(), DeviceError>>,
}

/// A run of one segment's on-disk bytes that [`StreamLog::get`] read in one
/// request (at most `read_ahead_bytes`), kept for the sequences after it.
/// It holds only bytes that can no longer change: below the write buffer
/// and below a write in flight. A record served from it is checked against
/// its index entry exactly like one read from disk, and liveness comes from
/// the index first, so a deleted message is never served. The file it came
/// from is held and compared by identity, so a segment rewritten by
/// compaction never matches; compaction and purge also drop it (a retired
/// file's bytes are never read again).
struct ReadAhead<F: StoreFile> {
    file: Rc<F>,
    start: u64,
    bytes: F::ReadBuffer,
}

impl<F: StoreFile> ReadAhead<F> {
    /// Whether the record at `offset` starts in this run, ends past it, and
    /// ends within `next`, the prefetched run right after it.
    fn straddles_into(
        &self,
        next: Option<&Prefetch<F>>,
        file: &Rc<F>,
        offset: u64,
        bytes: usize,
    ) -> bool {
        let end = self.start + self.bytes.as_ref().len() as u64;
        Rc::ptr_eq(&self.file, file)
            && offset >= self.start
            && offset < end
            && offset + bytes as u64 > end
            && next.is_some_and(|next| {
                Rc::ptr_eq(&next.file, file)
                    && next.start == end
                    && offset + bytes as u64 <= next.start + next.bytes
            })
    }

    /// The record at `offset` of `bytes` bytes in `file`, if held whole.
    fn record(&self, file: &Rc<F>, offset: u64, bytes: usize) -> Option<&[u8]> {
        let held = self.bytes.as_ref();
        let inside = Rc::ptr_eq(&self.file, file)
            && offset >= self.start
            && offset + bytes as u64 <= self.start + held.len() as u64;
        inside.then(|| {
            let at = (offset - self.start) as usize;
            &held[at..at + bytes]
        })
    }
}

/// A run after the read-ahead, requested before a reader gets there (once
/// it is past the middle of the current run, up to `prefetch_runs` of them
/// back to back), so a consumer reading in order does not wait for the disk.
/// Same rules as [`ReadAhead`]: stable bytes only, at most
/// `read_ahead_bytes`, dropped with it.
struct Prefetch<F: StoreFile> {
    file: Rc<F>,
    start: u64,
    bytes: u64,
    read: PrefetchRead<F::ReadBuffer>,
}

/// The read-ahead and prefetched runs of a reader in order that another
/// reader interrupted, resumed when a read lands in them.
struct ParkedReader<F: StoreFile> {
    run: ReadAhead<F>,
    prefetch: VecDeque<Prefetch<F>>,
}

/// Whether a reader whose run is `run` and whose prefetched runs are
/// `prefetch` holds the record at `offset` (whole in one run, across its
/// run and the first prefetched one, or in a prefetched run).
fn reader_holds<F: StoreFile>(
    run: &ReadAhead<F>,
    prefetch: &VecDeque<Prefetch<F>>,
    file: &Rc<F>,
    offset: u64,
    bytes: usize,
) -> bool {
    run.record(file, offset, bytes).is_some()
        || run.straddles_into(prefetch.front(), file, offset, bytes)
        || prefetch.iter().any(|next| next.holds(file, offset, bytes))
}

enum PrefetchRead<B> {
    /// Submitted (polled once); awaited by the get that needs it.
    InFlight(std::pin::Pin<Box<dyn std::future::Future<Output = Result<B, DeviceError>>>>),
    /// Completed on its first poll.
    Done(Result<B, DeviceError>),
}

impl<F: StoreFile> Prefetch<F> {
    fn holds(&self, file: &Rc<F>, offset: u64, bytes: usize) -> bool {
        Rc::ptr_eq(&self.file, file)
            && offset >= self.start
            && offset + bytes as u64 <= self.start + self.bytes
    }

    async fn finish(self) -> Result<F::ReadBuffer, DeviceError> {
        match self.read {
            PrefetchRead::InFlight(read) => read.await,
            PrefetchRead::Done(result) => result,
        }
    }
}

pub struct StreamLog<S: StoreFiles> {
    files: S,
    config: StreamConfig,
    segments: Vec<Segment<S::File>>,
    subjects: Subjects,
    /// Unflushed tail of the last segment, starting at `buffer_start`.
    buffer: Option<<S::File as StoreFile>::Buffer>,
    buffer_start: u64,
    deletes: Option<S::File>,
    /// Version of the deletes log in use (its file name carries it).
    deletes_version: u32,
    /// Delete entries not yet written, and the partial last block already written.
    deletes_pending: Vec<u8>,
    deletes_end: u64,
    /// The deletes log is rewritten when it grows past this: the configured
    /// maximum, or twice what the last rewrite kept (so a log of many
    /// interior deletes is not rewritten on every flush).
    deletes_rewrite_bytes: u64,
    /// Sequences below this are purged.
    floor: u64,
    last_sequence: u64,
    durable_sequence: u64,
    /// First sequences of segments written or rewritten since the last
    /// [`StreamLog::sync`] and not synced yet (with `sync` off every
    /// flush; compaction in both modes), and whether deletes were.
    unsynced_segments: Vec<u64>,
    deletes_unsynced: bool,
    /// Files were created since the last sync: their directory entries
    /// are not durable yet.
    directory_unsynced: bool,
    /// Files no longer part of the log (purged or replaced segments,
    /// replaced deletes logs) retired since the last sync: the manifest the
    /// caller stored last may still name them, so they stay on disk. At
    /// most the segments and deletes logs retired between two checkpoints
    /// (the caller checkpoints by applied bytes and time).
    retired_since_sync: Vec<String>,
    /// Files retired before the last sync: the manifest it returned names
    /// none of them, so [`StreamLog::checkpointed`] removes them.
    removable_at_checkpoint: Vec<String>,
    /// With `sync` off, a flushed buffer is written in the background while
    /// appends go on (one write in flight); its bytes stay readable here.
    pending_write: RefCell<Option<PendingWrite>>,
    /// A background write failed: the log is poisoned.
    deferred_error: RefCell<Option<DeviceError>>,
    messages: u64,
    bytes: u64,
    tail: VecDeque<(u64, Vec<u8>)>,
    tail_bytes: usize,
    /// See [`ReadAhead`]: the current reader's run (others are parked).
    read_ahead: RefCell<Option<ReadAhead<S::File>>>,
    /// See [`Prefetch`]: at most `prefetch_runs` per stream, in file
    /// order, the first starting where the read-ahead run ends.
    prefetch: RefCell<VecDeque<Prefetch<S::File>>>,
    /// Other readers in order, oldest first; see [`ParkedReader`].
    parked_readers: RefCell<Vec<ParkedReader<S::File>>>,
    poisoned: Option<DeviceError>,
    /// Readers told about removals behind them (snapshot transfers).
    removal_watches: RemovalWatches,
}

fn corrupt(file: &str, offset: u64, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        file: file.to_string(),
        offset,
        reason: reason.into(),
    }
}

/// Whether `name` is a file this log writes (or wrote in an older format):
/// only those are removed at open when the manifest does not name them. A
/// foreign file in the directory is left alone.
fn is_store_file(name: &str) -> bool {
    parse_segment_file_name(name).is_some()
        || parse_deletes_file_name(name).is_some()
        || name == LEGACY_META_FILE
        || LEFTOVER_SUFFIXES
            .iter()
            .any(|suffix| name.ends_with(suffix))
}

/// Reads `[0, bytes)` of `file` (`bytes` a multiple of the block size) in
/// requests of at most `chunk_bytes`; a file that ends first is truncated,
/// reported against `recorded`, the extent the checkpoint recorded.
async fn read_extent<F: StoreFile>(
    file: &F,
    bytes: u64,
    chunk_bytes: usize,
    recorded: u64,
) -> Result<Vec<u8>, StoreError> {
    assert!(bytes % BLOCK_BYTES as u64 == 0 && chunk_bytes % BLOCK_BYTES == 0);
    let mut data: Vec<u8> = Vec::with_capacity(bytes as usize);
    while (data.len() as u64) < bytes {
        let offset = data.len() as u64;
        let request = (chunk_bytes as u64).min(bytes - offset) as usize;
        let read = file.read(offset, request).await.map_err(StoreError::Io)?;
        let got = read.as_ref();
        data.extend_from_slice(&got[..got.len().min(request)]);
        if got.len() < request {
            let size = data.len() as u64;
            return Err(corrupt(
                file.name(),
                size,
                format!("truncated to {size} bytes, the checkpoint recorded {recorded}"),
            ));
        }
    }
    assert_eq!(data.len() as u64, bytes);
    Ok(data)
}

/// Whether opening may change the store (serve) or only looks (verify).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpenMode {
    Serve,
    Verify,
}

/// What opening found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    pub segments: u64,
    /// Records verified in the manifest's extent.
    pub records: u64,
    pub deletes_applied: u64,
    /// Files the manifest does not name, removed: written after the
    /// checkpoint (the journal still holds what they held) or superseded
    /// before it.
    pub files_removed: Vec<String>,
}

impl<S: StoreFiles> StreamLog<S> {
    /// Opens the log in `files` as `manifest` (what the last checkpoint's
    /// [`StreamLog::sync`] returned, or [`Manifest::new`] for a new log)
    /// describes it. Every segment it names must be there with exactly the
    /// records it recorded, and the deletes log with its entries: anything
    /// missing, short or not verifying is [`StoreError::Corrupt`] and
    /// nothing is removed. Bytes past the manifest's extent were written
    /// after the checkpoint and are ignored (the caller replays its journal
    /// from the checkpoint); then the store's files the manifest does not
    /// name are removed.
    pub async fn open(
        files: S,
        config: StreamConfig,
        manifest: &Manifest,
    ) -> Result<(StreamLog<S>, OpenReport), StoreError> {
        Self::open_as(files, config, manifest, OpenMode::Serve).await
    }

    /// Verifies `files` against `manifest` exactly as [`StreamLog::open`]
    /// does, changing nothing (no file removed or created): what
    /// `tern storage check` runs. The report lists, in `files_removed`,
    /// what `open` would remove.
    pub async fn verify(
        files: S,
        config: StreamConfig,
        manifest: &Manifest,
    ) -> Result<OpenReport, StoreError> {
        Self::open_as(files, config, manifest, OpenMode::Verify)
            .await
            .map(|(_, report)| report)
    }

    async fn open_as(
        files: S,
        config: StreamConfig,
        manifest: &Manifest,
        mode: OpenMode,
    ) -> Result<(StreamLog<S>, OpenReport), StoreError> {
        assert!(
            config.write_buffer_bytes % BLOCK_BYTES == 0
                && config.write_buffer_bytes >= BLOCK_BYTES
        );
        assert!(config.read_chunk_bytes % BLOCK_BYTES == 0 && config.read_chunk_bytes > 0);
        assert!(config.read_ahead_bytes % BLOCK_BYTES == 0);
        assert!(config.prefetch_runs <= PREFETCH_RUNS_MAX);
        // Record offsets in the index are 32-bit.
        assert!(config.segment_bytes_max <= u64::from(u32::MAX));
        manifest.check()?;
        let names = files.names();
        let present: HashSet<&str> = names.iter().map(String::as_str).collect();
        let mut log = StreamLog {
            config,
            segments: Vec::with_capacity(manifest.segments.len()),
            subjects: Subjects::default(),
            buffer: None,
            buffer_start: 0,
            deletes: None,
            deletes_version: manifest.deletes.version,
            deletes_pending: Vec::new(),
            deletes_end: 0,
            deletes_rewrite_bytes: 0,
            floor: manifest.floor,
            last_sequence: manifest.last_sequence,
            durable_sequence: manifest.last_sequence,
            unsynced_segments: Vec::new(),
            deletes_unsynced: false,
            directory_unsynced: false,
            retired_since_sync: Vec::new(),
            removable_at_checkpoint: Vec::new(),
            pending_write: RefCell::new(None),
            deferred_error: RefCell::new(None),
            messages: 0,
            bytes: 0,
            tail: VecDeque::new(),
            tail_bytes: 0,
            read_ahead: RefCell::new(None),
            prefetch: RefCell::new(VecDeque::new()),
            parked_readers: RefCell::new(Vec::new()),
            poisoned: None,
            removal_watches: RemovalWatches::default(),
            files,
        };
        let mut report = OpenReport::default();
        let mut carried = Vec::new();
        for extent in &manifest.segments {
            carried = log.load_segment(extent, &present).await?;
            report.segments += 1;
            report.records += extent.records;
        }
        report.deletes_applied = log.load_deletes(&manifest.deletes, &present).await?;
        // Everything the manifest names verified: the rest of the store's
        // files hold nothing the journal cannot replay.
        let named: HashSet<String> = manifest
            .segments
            .iter()
            .map(SegmentExtent::file_name)
            .chain([manifest.deletes.file_name()])
            .collect();
        for name in names.iter().filter(|name| is_store_file(name)) {
            if !named.contains(name) {
                if mode == OpenMode::Serve {
                    log.files.remove(name).await.map_err(StoreError::Io)?;
                }
                report.files_removed.push(name.clone());
            }
        }
        if mode == OpenMode::Verify {
            return Ok((log, report));
        }
        let deletes_missing = log.deletes.is_none();
        if deletes_missing {
            let file = log
                .files
                .create(&manifest.deletes.file_name())
                .await
                .map_err(StoreError::Io)?;
            log.deletes = Some(file);
        }
        if deletes_missing || !report.files_removed.is_empty() {
            log.files.sync_directory().await.map_err(StoreError::Io)?;
        }
        if let Some(last) = log.segments.last() {
            // Carry the partial last block of the extent into the write
            // buffer: the next flush rewrites that block with the same
            // leading bytes, and whatever followed them (written after the
            // checkpoint) is overwritten.
            let start = last.end / BLOCK_BYTES as u64 * BLOCK_BYTES as u64;
            let mut buffer = last.file.allocate(log.config.write_buffer_bytes);
            buffer.bytes_mut().fill(0);
            assert_eq!(carried.len() as u64, last.end - start);
            buffer.bytes_mut()[..carried.len()].copy_from_slice(&carried);
            log.buffer = Some(buffer);
            log.buffer_start = start;
        }
        Ok((log, report))
    }

    /// Verifies one segment of the manifest against its file and indexes
    /// it; returns the bytes of its partial last block (below `bytes`).
    async fn load_segment(
        &mut self,
        extent: &SegmentExtent,
        present: &HashSet<&str>,
    ) -> Result<Vec<u8>, StoreError> {
        let name = extent.file_name();
        if !present.contains(name.as_str()) {
            return Err(corrupt(
                &name,
                0,
                format!(
                    "missing: the checkpoint recorded {} records in it, sequences {}..={} ({} bytes)",
                    extent.records, extent.first_sequence, extent.last_record_sequence, extent.bytes
                ),
            ));
        }
        let file = self.files.open(&name).await.map_err(StoreError::Io)?;
        let size = file.size();
        let covered = align_up(extent.bytes as usize, BLOCK_BYTES) as u64;
        if size < covered {
            return Err(corrupt(
                &name,
                size,
                format!(
                    "truncated to {size} bytes, the checkpoint recorded {}",
                    extent.bytes
                ),
            ));
        }
        let data = read_extent(&file, covered, self.config.read_chunk_bytes, extent.bytes).await?;
        let mut segment = Segment::new(extent.first_sequence, extent.version, Rc::new(file));
        let end = extent.bytes as usize;
        let mut position = 0usize;
        while position < end {
            let offset = position as u64;
            let view = record::decode(&data[position..end]).map_err(|failure| {
                corrupt(
                    &name,
                    offset,
                    match failure {
                        DecodeError::Empty => {
                            "no record where the checkpoint recorded one (zeroed or lost write)"
                        }
                        DecodeError::Invalid => "record fails its checksum",
                    },
                )
            })?;
            self.index_record(&mut segment, &view, extent, offset)?;
            position += view.stored_bytes;
        }
        assert_eq!(position, end);
        if segment.records != extent.records {
            return Err(corrupt(
                &name,
                extent.bytes,
                format!(
                    "{} records where the checkpoint recorded {}",
                    segment.records, extent.records
                ),
            ));
        }
        if segment.last_record_sequence != extent.last_record_sequence {
            return Err(corrupt(
                &name,
                segment
                    .entries
                    .last()
                    .map_or(0, |entry| u64::from(entry.offset)),
                format!(
                    "last record is sequence {}, the checkpoint recorded {}",
                    segment.last_record_sequence, extent.last_record_sequence
                ),
            ));
        }
        if segment.digest != extent.digest {
            return Err(corrupt(
                &name,
                0,
                format!(
                    "records verify but are not the ones checkpointed (digest {:#010x}, recorded {:#010x})",
                    segment.digest, extent.digest
                ),
            ));
        }
        segment.end = extent.bytes;
        let partial_start = end / BLOCK_BYTES * BLOCK_BYTES;
        let carried = data[partial_start..end].to_vec();
        self.segments.push(segment);
        Ok(carried)
    }

    /// Adds one verified record at `offset` of `segment` to the index.
    fn index_record(
        &mut self,
        segment: &mut Segment<S::File>,
        view: &StoredView<'_>,
        extent: &SegmentExtent,
        offset: u64,
    ) -> Result<(), StoreError> {
        let expected = segment.first_sequence + segment.entries.len() as u64;
        if view.sequence < expected {
            return Err(corrupt(
                &segment.name,
                offset,
                format!(
                    "sequence {} where {expected} or later was due",
                    view.sequence
                ),
            ));
        }
        if view.sequence - segment.first_sequence >= SEGMENT_SEQUENCES_MAX {
            return Err(corrupt(
                &segment.name,
                offset,
                format!(
                    "sequence {} beyond the segment's {SEGMENT_SEQUENCES_MAX} sequences",
                    view.sequence
                ),
            ));
        }
        if segment.records == extent.records {
            return Err(corrupt(
                &segment.name,
                offset,
                format!(
                    "more records than the {} the checkpoint recorded",
                    extent.records
                ),
            ));
        }
        while segment.first_sequence + (segment.entries.len() as u64) < view.sequence {
            segment.entries.push(ABSENT);
        }
        let subject = self.subjects.id(view.subject);
        let live = view.sequence >= self.floor;
        let accounted_bytes =
            (self.config.message_bytes)(view.subject.len(), view.headers.len(), view.payload.len());
        segment.entries.push(Entry {
            offset: offset as u32,
            bytes: view.stored_bytes as u32,
            checksum: view.checksum,
            subject,
            timestamp_ns: view.timestamp_ns,
            accounted_bytes: accounted_bytes as u32,
            live,
        });
        segment.add_record(view.sequence, view.checksum);
        if live {
            self.subjects.add(subject, view.sequence);
            self.messages += 1;
            self.bytes += accounted_bytes;
            segment.live_bytes += view.stored_bytes as u64;
        }
        Ok(())
    }

    /// Verifies the deletes log's first `entries` entries and applies them;
    /// returns how many removed a live message. A missing log with no
    /// entries to hold is created by `open` after verification.
    async fn load_deletes(
        &mut self,
        extent: &DeletesExtent,
        present: &HashSet<&str>,
    ) -> Result<u64, StoreError> {
        let name = extent.file_name();
        if !present.contains(name.as_str()) {
            if extent.entries > 0 {
                return Err(corrupt(
                    &name,
                    0,
                    format!(
                        "missing: the checkpoint recorded {} delete entries in it",
                        extent.entries
                    ),
                ));
            }
            return Ok(0);
        }
        let file = self.files.open(&name).await.map_err(StoreError::Io)?;
        let size = file.size();
        let covered = align_up(extent.bytes() as usize, BLOCK_BYTES) as u64;
        if size < covered {
            return Err(corrupt(
                &name,
                size,
                format!(
                    "truncated to {size} bytes, the checkpoint recorded {}",
                    extent.bytes()
                ),
            ));
        }
        let data =
            read_extent(&file, covered, self.config.read_chunk_bytes, extent.bytes()).await?;
        let mut applied = 0;
        let entries = data[..extent.bytes() as usize].chunks_exact(DELETE_ENTRY_BYTES);
        for (index, entry) in entries.enumerate() {
            let offset = (index * DELETE_ENTRY_BYTES) as u64;
            let Some(sequence) = decode_delete_entry(entry) else {
                return Err(corrupt(&name, offset, "delete entry fails its checksum"));
            };
            if sequence > self.last_sequence {
                return Err(corrupt(
                    &name,
                    offset,
                    format!(
                        "delete of sequence {sequence} after the last sequence {}",
                        self.last_sequence
                    ),
                ));
            }
            if self.remove_entry(sequence) {
                applied += 1;
            }
        }
        self.deletes_end = extent.bytes();
        self.deletes = Some(file);
        Ok(applied)
    }

    // ----- reading state --------------------------------------------------------

    pub fn state(&self) -> StreamState {
        let first = self.first_live();
        let (first_sequence, first_timestamp_ns) =
            first.map_or((0, 0), |(sequence, entry)| (sequence, entry.timestamp_ns));
        let last_timestamp_ns = self
            .entry(self.last_sequence)
            .map_or(0, |entry| entry.timestamp_ns);
        let span = if self.messages == 0 {
            0
        } else {
            self.last_sequence - first_sequence + 1
        };
        StreamState {
            messages: self.messages,
            bytes: self.bytes,
            first_sequence: if self.messages == 0 {
                self.last_sequence + 1
            } else {
                first_sequence
            },
            last_sequence: self.last_sequence,
            first_timestamp_ns,
            last_timestamp_ns: if self.messages == 0 {
                0
            } else {
                last_timestamp_ns
            },
            subjects: self.subjects.live,
            deleted: span - self.messages,
        }
    }

    /// Everything up to here is on stable storage in this store (the
    /// checkpoint the journal recycles by).
    pub fn durable_sequence(&self) -> u64 {
        self.durable_sequence
    }

    pub fn last_sequence(&self) -> u64 {
        self.last_sequence
    }

    fn segment_index(&self, sequence: u64) -> Option<usize> {
        let position = self
            .segments
            .partition_point(|segment| segment.first_sequence <= sequence);
        position.checked_sub(1)
    }

    fn entry(&self, sequence: u64) -> Option<&Entry> {
        let segment = &self.segments[self.segment_index(sequence)?];
        segment
            .entries
            .get((sequence - segment.first_sequence) as usize)
    }

    fn first_live(&self) -> Option<(u64, &Entry)> {
        for segment in &self.segments {
            if segment.live_bytes == 0 {
                continue;
            }
            for (index, entry) in segment.entries.iter().enumerate() {
                if entry.live {
                    return Some((segment.first_sequence + index as u64, entry));
                }
            }
        }
        None
    }

    /// `(first, last, count)` of live messages on `subject`.
    pub fn subject_state(&self, subject: &[u8]) -> Option<(u64, u64, u64)> {
        let id = *self.subjects.ids.get(subject)?;
        let state = self.subjects.state[id as usize];
        (state.count > 0).then_some((state.first, state.last, state.count))
    }

    /// The first live sequence ≥ `from` whose subject satisfies `matches`.
    /// Verdicts are remembered per subject in a small direct-mapped table
    /// (no allocation: a consumer calls this once per delivery).
    pub fn next_matching(&self, from: u64, mut matches: impl FnMut(&[u8]) -> bool) -> Option<u64> {
        const VERDICT_SLOTS: usize = 16;
        let mut verdicts = [(u32::MAX, false); VERDICT_SLOTS];
        let start = self.segment_index(from).unwrap_or(0);
        for segment in &self.segments[start..] {
            let skip = from.saturating_sub(segment.first_sequence) as usize;
            for (index, entry) in segment.entries.iter().enumerate().skip(skip) {
                if !entry.live {
                    continue;
                }
                let slot = &mut verdicts[entry.subject as usize % VERDICT_SLOTS];
                if slot.0 != entry.subject {
                    *slot = (
                        entry.subject,
                        matches(&self.subjects.names[entry.subject as usize]),
                    );
                }
                if slot.1 {
                    return Some(segment.first_sequence + index as u64);
                }
            }
        }
        None
    }

    /// Reads one message; `None` if it does not exist or was deleted. A
    /// record that does not match its index entry is corruption.
    pub async fn get(&self, sequence: u64) -> Result<Option<StoredMessage>, StoreError> {
        self.read_with(sequence, |view| view.to_message()).await
    }

    /// Reads one message and hands it to `visit` borrowed from wherever it
    /// is (write buffer, write in flight, read-ahead run, tail cache or a
    /// fresh read): no copy by the log. `visit` runs only on a record that
    /// verified itself and is the one the index names; `None` if the
    /// message does not exist or was deleted.
    pub async fn read_with<R>(
        &self,
        sequence: u64,
        visit: impl FnOnce(&StoredView<'_>) -> R,
    ) -> Result<Option<R>, StoreError> {
        let Some(entry) = self.entry(sequence).filter(|entry| entry.live).copied() else {
            return Ok(None);
        };
        let mut visit = Some(visit);
        let mut apply = |view: &StoredView<'_>| (visit.take().expect("one visit per read"))(view);
        if let Some(view) = self.cached(sequence) {
            return Ok(Some(apply(&view)));
        }
        let segment = &self.segments[self.segment_index(sequence).expect("entry exists")];
        let offset = entry.offset as u64;
        let record_bytes = entry.bytes as usize;
        // The record verified itself; it must also be the one the index
        // names (a misdirected write leaves a valid record in the wrong place).
        let mut verified_visit = |bytes: &[u8]| -> Result<R, StoreError> {
            match record::decode(bytes) {
                Ok(view) if view.sequence == sequence && view.checksum == entry.checksum => {
                    Ok(apply(&view))
                }
                Ok(view) => Err(corrupt(
                    &segment.name,
                    offset,
                    format!(
                        "index says sequence {sequence}, found sequence {} (misdirected or lost write)",
                        view.sequence
                    ),
                )),
                Err(_) => Err(corrupt(
                    &segment.name,
                    offset,
                    format!("record of sequence {sequence} fails its checksum"),
                )),
            }
        };
        // Bytes still in memory: the buffer being filled, or the copy of
        // one being written in the background.
        let in_buffer = self.buffer.is_some()
            && std::ptr::eq(segment, self.segments.last().expect("a segment"))
            && offset >= self.buffer_start;
        if in_buffer {
            let buffer = self.buffer.as_ref().expect("checked");
            let at = (offset - self.buffer_start) as usize;
            return verified_visit(&buffer.bytes()[at..at + record_bytes]).map(Some);
        }
        {
            let pending = self.pending_write.borrow();
            if let Some(pending) = pending.as_ref().filter(|pending| {
                pending.segment_first_sequence == segment.first_sequence
                    && offset >= pending.start
                    && offset + record_bytes as u64 <= pending.start + pending.bytes.len() as u64
            }) {
                let at = (offset - pending.start) as usize;
                return verified_visit(&pending.bytes[at..at + record_bytes]).map(Some);
            }
        }
        self.resume_reader(&segment.file, offset, record_bytes);
        let from_run = {
            let read_ahead = self.read_ahead.borrow();
            read_ahead
                .as_ref()
                .and_then(|run| run.record(&segment.file, offset, record_bytes))
                .map(&mut verified_visit)
        };
        let visited = match from_run {
            Some(visited) => visited,
            None => match self.read_across_runs(segment, offset, record_bytes).await? {
                Some(bytes) => verified_visit(&bytes),
                None => {
                    let (read_start, read, keep) =
                        self.read_run(segment, offset, record_bytes).await?;
                    let skip = (offset - read_start) as usize;
                    let bytes = read.as_ref();
                    if bytes.len() < skip + record_bytes {
                        return Err(corrupt(
                            &segment.name,
                            offset,
                            "record extends past the end of the file",
                        ));
                    }
                    let visited = verified_visit(&bytes[skip..skip + record_bytes]);
                    if keep {
                        *self.read_ahead.borrow_mut() = Some(ReadAhead {
                            file: segment.file.clone(),
                            start: read_start,
                            bytes: read,
                        });
                    }
                    visited
                }
            },
        };
        self.prefetch_after(segment, offset + record_bytes as u64)
            .await;
        visited.map(Some)
    }

    /// Where the bytes of `segment` that can still change begin: the write
    /// buffer of the last segment, or a write in flight (block-aligned).
    fn stable_end(&self, segment: &Segment<S::File>) -> u64 {
        let mut end = align_up(segment.end as usize, BLOCK_BYTES) as u64;
        let last = self.segments.last().expect("a segment");
        if self.buffer.is_some() && std::ptr::eq(segment, last) {
            end = end.min(self.buffer_start);
        }
        if let Some(pending) = self.pending_write.borrow().as_ref() {
            if pending.segment_first_sequence == segment.first_sequence {
                end = end.min(pending.start);
            }
        }
        end
    }

    /// A record that starts in the read-ahead run and ends in the prefetched
    /// run right after it (a run's end rarely falls between two records):
    /// its bytes copied from both, and the prefetched run becomes the
    /// read-ahead. `None` if the two runs do not hold it between them.
    async fn read_across_runs(
        &self,
        segment: &Segment<S::File>,
        offset: u64,
        record_bytes: usize,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let head = {
            let read_ahead = self.read_ahead.borrow();
            let Some(run) = read_ahead.as_ref() else {
                return Ok(None);
            };
            if !run.straddles_into(
                self.prefetch.borrow().front(),
                &segment.file,
                offset,
                record_bytes,
            ) {
                return Ok(None);
            }
            let held = run.bytes.as_ref();
            held[(offset - run.start) as usize..].to_vec()
        };
        let next = self.prefetch.borrow_mut().pop_front().expect("checked");
        let next_start = next.start;
        let read = next.finish().await.map_err(StoreError::Io)?;
        let rest = record_bytes - head.len();
        if read.as_ref().len() < rest {
            return Err(corrupt(
                &segment.name,
                offset,
                "record extends past the end of the file",
            ));
        }
        let mut bytes = head;
        bytes.extend_from_slice(&read.as_ref()[..rest]);
        *self.read_ahead.borrow_mut() = Some(ReadAhead {
            file: segment.file.clone(),
            start: next_start,
            bytes: read,
        });
        Ok(Some(bytes))
    }

    /// The run holding the record at `offset`: a prefetched one if one holds
    /// it (those before it are dropped: the reader skipped them), otherwise
    /// a fresh read from the record's first block, of `read_ahead_bytes`
    /// when those bytes are stable. Returns where the run starts, its bytes,
    /// and whether to keep it as the read-ahead.
    async fn read_run(
        &self,
        segment: &Segment<S::File>,
        offset: u64,
        record_bytes: usize,
    ) -> Result<(u64, <S::File as StoreFile>::ReadBuffer, bool), StoreError> {
        let holder = {
            let mut prefetch = self.prefetch.borrow_mut();
            match prefetch
                .iter()
                .position(|run| run.holds(&segment.file, offset, record_bytes))
            {
                Some(position) => {
                    prefetch.drain(..position);
                    prefetch.pop_front()
                }
                None => {
                    // Another reader, or this one went elsewhere: what is in
                    // flight is for bytes not read next.
                    drop(prefetch);
                    self.park_reader();
                    None
                }
            }
        };
        if let Some(run) = holder {
            let start = run.start;
            let read = run.finish().await.map_err(StoreError::Io)?;
            return Ok((start, read, true));
        }
        let start = offset / BLOCK_BYTES as u64 * BLOCK_BYTES as u64;
        let skip = (offset - start) as usize;
        let length = align_up(skip + record_bytes, BLOCK_BYTES);
        // Read ahead only over bytes that can no longer change.
        let stable_end = self.stable_end(segment);
        let keep = self.config.read_ahead_bytes > 0 && start + length as u64 <= stable_end;
        let read_length = if keep {
            length.max(
                self.config
                    .read_ahead_bytes
                    .min((stable_end - start) as usize),
            )
        } else {
            length
        };
        let read = segment
            .file
            .read(start, read_length)
            .await
            .map_err(StoreError::Io)?;
        Ok((start, read, keep))
    }

    /// Forgets the read-ahead run and the prefetched runs (their segment was
    /// removed or rewritten).
    fn drop_read_ahead(&self) {
        self.read_ahead.borrow_mut().take();
        self.prefetch.borrow_mut().clear();
        self.parked_readers.borrow_mut().clear();
    }

    /// Makes current the parked reader holding the record at `offset`, if
    /// the current one does not; the current one is parked in its place.
    fn resume_reader(&self, file: &Rc<S::File>, offset: u64, bytes: usize) {
        let current_holds = self
            .read_ahead
            .borrow()
            .as_ref()
            .is_some_and(|run| reader_holds(run, &self.prefetch.borrow(), file, offset, bytes));
        if current_holds {
            return;
        }
        let found =
            self.parked_readers.borrow().iter().position(|parked| {
                reader_holds(&parked.run, &parked.prefetch, file, offset, bytes)
            });
        let Some(position) = found else {
            return;
        };
        let resumed = self.parked_readers.borrow_mut().remove(position);
        self.park_reader();
        *self.read_ahead.borrow_mut() = Some(resumed.run);
        *self.prefetch.borrow_mut() = resumed.prefetch;
    }

    /// Parks the current reader's run and prefetched runs, dropping the
    /// oldest parked reader past the bound. No run is in flight for the
    /// current reader afterwards.
    fn park_reader(&self) {
        let prefetch = std::mem::take(&mut *self.prefetch.borrow_mut());
        let Some(run) = self.read_ahead.borrow_mut().take() else {
            return;
        };
        let mut parked = self.parked_readers.borrow_mut();
        if parked.len() == PARKED_READERS_MAX {
            parked.remove(0);
        }
        parked.push(ParkedReader { run, prefetch });
        assert!(parked.len() <= PARKED_READERS_MAX);
    }

    /// Once a reader of the read-ahead run is past its middle (`reached`),
    /// requests the runs after it that are stable and not requested yet, up
    /// to `prefetch_runs` in flight. Each request is polled once, which
    /// submits it.
    async fn prefetch_after(&self, segment: &Segment<S::File>, reached: u64) {
        if self.config.read_ahead_bytes == 0 || self.config.prefetch_runs == 0 {
            return;
        }
        let stable_end = self.stable_end(segment);
        while self.prefetch.borrow().len() < self.config.prefetch_runs {
            let (file, next_start) = {
                let read_ahead = self.read_ahead.borrow();
                let Some(run) = read_ahead.as_ref() else {
                    return;
                };
                let held = run.bytes.as_ref().len() as u64;
                let past_middle = reached >= run.start + held / 2;
                if !Rc::ptr_eq(&run.file, &segment.file)
                    || !past_middle
                    || held % BLOCK_BYTES as u64 != 0
                {
                    return;
                }
                let next_start = match self.prefetch.borrow().back() {
                    Some(last) => last.start + last.bytes,
                    None => run.start + held,
                };
                (run.file.clone(), next_start)
            };
            if next_start >= stable_end {
                return;
            }
            let bytes = (self.config.read_ahead_bytes as u64).min(stable_end - next_start);
            let reader = file.clone();
            let mut read: std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<_, DeviceError>>>,
            > = Box::pin(async move { reader.read(next_start, bytes as usize).await });
            let read = match futures_lite::future::poll_once(read.as_mut()).await {
                Some(result) => PrefetchRead::Done(result),
                None => PrefetchRead::InFlight(read),
            };
            self.prefetch.borrow_mut().push_back(Prefetch {
                file,
                start: next_start,
                bytes,
                read,
            });
        }
    }

    fn cached(&self, sequence: u64) -> Option<StoredView<'_>> {
        let first = self.tail.front()?.0;
        let (cached_sequence, bytes) = self.tail.get(sequence.checked_sub(first)? as usize)?;
        if *cached_sequence != sequence {
            return None;
        }
        record::decode(bytes).ok()
    }

    /// Calls `visit` with every live message from `from` on, in order,
    /// borrowed (no copy per message). Each segment is read sequentially in
    /// large O_DIRECT chunks, the next chunk in flight while one is decoded.
    pub async fn replay(
        &self,
        from: u64,
        mut visit: impl FnMut(&StoredView<'_>),
    ) -> Result<u64, StoreError> {
        self.settle().await?;
        let mut visited = 0;
        let start = self.segment_index(from).unwrap_or(0);
        let count = self.segments.len();
        let chunk = self.config.read_chunk_bytes as u64;
        for (position, segment) in self.segments.iter().enumerate().skip(start) {
            let last = position + 1 == count;
            // Records end at `segment.end`; whatever follows in the file
            // (zero padding, or bytes written after a checkpoint this log
            // was reopened from) is not read as records.
            let disk_end = if last && self.buffer.is_some() {
                self.buffer_start
            } else {
                align_up(segment.end as usize, BLOCK_BYTES) as u64
            };
            let mut partial: Vec<u8> = Vec::new();
            let mut offset = 0u64;
            let mut current = if disk_end > 0 {
                let request = chunk.min(disk_end) as usize;
                Some((request, segment.file.read(0, request).await))
            } else {
                None
            };
            while let Some((request, result)) = current.take() {
                let read = result.map_err(StoreError::Io)?;
                let bytes = read.as_ref();
                let chunk_start = offset;
                offset += bytes.len().min(request) as u64;
                if bytes.len() < request && offset < segment.end.min(disk_end) {
                    return Err(corrupt(
                        &segment.name,
                        offset,
                        format!(
                            "file ends at {offset} bytes, its records at {}",
                            segment.end
                        ),
                    ));
                }
                let mut next = (bytes.len() == request && offset < disk_end).then(|| {
                    let request = chunk.min(disk_end - offset) as usize;
                    (request, Box::pin(segment.file.read(offset, request)))
                });
                let mut early = None;
                if let Some((_, next)) = next.as_mut() {
                    // Submit the next read, let the reactor send it, then decode
                    // this chunk while it is in flight.
                    early = futures_lite::future::poll_once(next.as_mut()).await;
                    if early.is_none() {
                        futures_lite::future::yield_now().await;
                    }
                }
                let records_bytes =
                    (segment.end.saturating_sub(chunk_start) as usize).min(bytes.len());
                self.process_chunk(
                    segment,
                    &bytes[..records_bytes],
                    &mut partial,
                    from,
                    &mut visit,
                    &mut visited,
                )?;
                if let Some((request, next)) = next {
                    let result = match early {
                        Some(result) => result,
                        None => next.await,
                    };
                    current = Some((request, result));
                }
            }
            if last {
                if let Some(buffer) = &self.buffer {
                    // The unflushed tail continues the disk bytes read above.
                    let tail = &buffer.bytes()[..(segment.end - self.buffer_start) as usize];
                    self.process_chunk(
                        segment,
                        tail,
                        &mut partial,
                        from,
                        &mut visit,
                        &mut visited,
                    )?;
                }
            }
            if !partial.is_empty() {
                return Err(corrupt(
                    &segment.name,
                    segment.end - partial.len() as u64,
                    "record cut short by the end of the segment's records",
                ));
            }
        }
        Ok(visited)
    }

    /// Decodes the records in `bytes` (all below the segment's end),
    /// continuing one split across chunks in `partial`.
    fn process_chunk(
        &self,
        segment: &Segment<S::File>,
        mut bytes: &[u8],
        partial: &mut Vec<u8>,
        from: u64,
        visit: &mut impl FnMut(&StoredView<'_>),
        visited: &mut u64,
    ) -> Result<(), StoreError> {
        if !partial.is_empty() {
            let header_missing = 4usize.saturating_sub(partial.len()).min(bytes.len());
            partial.extend_from_slice(&bytes[..header_missing]);
            bytes = &bytes[header_missing..];
            if partial.len() < 4 {
                return Ok(());
            }
            let total = record_size(segment, partial)?;
            let missing = total.saturating_sub(partial.len()).min(bytes.len());
            partial.extend_from_slice(&bytes[..missing]);
            bytes = &bytes[missing..];
            if partial.len() < total {
                return Ok(());
            }
            let record = std::mem::take(partial);
            self.visit_one(segment, &record, from, visit, visited)?;
        }
        while bytes.len() >= 4 {
            let total = record_size(segment, bytes)?;
            if total > bytes.len() {
                break;
            }
            self.visit_one(segment, &bytes[..total], from, visit, visited)?;
            bytes = &bytes[total..];
        }
        partial.extend_from_slice(bytes);
        Ok(())
    }

    fn visit_one(
        &self,
        segment: &Segment<S::File>,
        bytes: &[u8],
        from: u64,
        visit: &mut impl FnMut(&StoredView<'_>),
        visited: &mut u64,
    ) -> Result<(), StoreError> {
        let view = record::decode(bytes)
            .map_err(|_| corrupt(&segment.name, 0, "record fails its checksum during replay"))?;
        if view.sequence < from {
            return Ok(());
        }
        let Some(entry) = self.entry(view.sequence).filter(|entry| entry.live) else {
            return Ok(());
        };
        if entry.checksum != view.checksum {
            return Err(corrupt(
                &segment.name,
                u64::from(entry.offset),
                "record differs from its index entry",
            ));
        }
        visit(&view);
        *visited += 1;
        Ok(())
    }

    // ----- writing -------------------------------------------------------------

    fn check_poisoned(&self) -> Result<(), StoreError> {
        if let Some(error) = self.deferred_error.borrow().as_ref() {
            return Err(StoreError::Poisoned(error.clone()));
        }
        match &self.poisoned {
            Some(error) => Err(StoreError::Poisoned(error.clone())),
            None => Ok(()),
        }
    }

    /// Waits for the background write, if one is in flight; a failure
    /// poisons the log.
    async fn settle(&self) -> Result<(), StoreError> {
        let pending = self.pending_write.borrow_mut().take();
        if let Some(pending) = pending {
            if let Err(error) = pending.task.await {
                *self.deferred_error.borrow_mut() = Some(error.clone());
                return Err(StoreError::Io(error));
            }
        }
        self.check_poisoned()
    }

    /// Appends a message (its sequence must follow the last one; gaps are
    /// allowed and count as deleted). Flushes on its own when the write
    /// buffer fills or a segment rolls.
    pub async fn append(&mut self, message: NewMessage<'_>) -> Result<(), StoreError> {
        self.check_poisoned()?;
        if message.sequence <= self.last_sequence {
            return Err(StoreError::OutOfOrder {
                sequence: message.sequence,
                last: self.last_sequence,
            });
        }
        let size = record::stored_bytes(
            message.subject.len(),
            message.headers.len(),
            message.payload.len(),
        );
        // A record larger than the write buffer gets a buffer of its own
        // for one flush (below); only a segment bounds it.
        if size as u64 > self.config.segment_bytes_max {
            return Err(StoreError::TooLarge {
                bytes: size,
                max: self.config.segment_bytes_max,
            });
        }
        let roll = match self.segments.last() {
            None => true,
            Some(last) => {
                (last.end + size as u64 > self.config.segment_bytes_max && last.end > 0)
                    || message.sequence - last.first_sequence >= SEGMENT_SEQUENCES_MAX
            }
        };
        if roll {
            if self.segments.len() >= SEGMENTS_MAX {
                return Err(StoreError::TooManySegments { max: SEGMENTS_MAX });
            }
            self.flush().await?;
            let name = segment_file_name(message.sequence, 0);
            let file = self
                .files
                .create(&name)
                .await
                .map_err(|error| self.poison(error))?;
            self.directory_unsynced = true;
            let mut buffer = file.allocate(self.config.write_buffer_bytes);
            buffer.bytes_mut().fill(0);
            self.buffer = Some(buffer);
            self.buffer_start = 0;
            self.segments
                .push(Segment::new(message.sequence, 0, Rc::new(file)));
        }
        let room = {
            let last = self.segments.last().expect("a segment to write");
            (last.end - self.buffer_start) as usize + size <= self.config.write_buffer_bytes
        };
        if !room {
            self.flush().await?;
        }
        self.make_room(size);
        let last = self.segments.last_mut().expect("a segment to write");
        let at = (last.end - self.buffer_start) as usize;
        let buffer = self.buffer.as_mut().expect("the last segment has a buffer");
        let sum = record::encode(&message, &mut buffer.bytes_mut()[at..at + size]);
        while last.first_sequence + (last.entries.len() as u64) < message.sequence {
            last.entries.push(ABSENT);
        }
        let subject = self.subjects.id(message.subject);
        let accounted_bytes = (self.config.message_bytes)(
            message.subject.len(),
            message.headers.len(),
            message.payload.len(),
        );
        last.entries.push(Entry {
            offset: last.end as u32,
            bytes: size as u32,
            checksum: sum,
            subject,
            timestamp_ns: message.timestamp_ns,
            accounted_bytes: accounted_bytes as u32,
            live: true,
        });
        last.end += size as u64;
        last.live_bytes += size as u64;
        last.add_record(message.sequence, sum);
        self.subjects.add(subject, message.sequence);
        self.messages += 1;
        self.bytes += accounted_bytes;
        self.last_sequence = message.sequence;
        if self.config.tail_cache_bytes > 0 {
            let encoded = buffer.bytes()[at..at + size].to_vec();
            self.cache(message.sequence, encoded);
        }
        Ok(())
    }

    /// Grows the write buffer when a record of `size` bytes does not fit
    /// it even right after a flush (a message larger than the buffer): a
    /// buffer of exactly what is needed, for one flush; the next flush
    /// goes back to `write_buffer_bytes`.
    fn make_room(&mut self, size: usize) {
        let last = self.segments.last().expect("a segment to write");
        let at = (last.end - self.buffer_start) as usize;
        let buffer = self.buffer.as_ref().expect("the last segment has a buffer");
        if at + size <= buffer.bytes().len() {
            return;
        }
        let mut grown = last.file.allocate(align_up(at + size, BLOCK_BYTES));
        grown.bytes_mut().fill(0);
        grown.bytes_mut()[..at].copy_from_slice(&buffer.bytes()[..at]);
        self.buffer = Some(grown);
    }

    fn cache(&mut self, sequence: u64, bytes: Vec<u8>) {
        if self.config.tail_cache_bytes == 0 {
            return;
        }
        if self
            .tail
            .back()
            .is_some_and(|(last, _)| *last + 1 != sequence)
        {
            self.tail.clear();
            self.tail_bytes = 0;
        }
        self.tail_bytes += bytes.len();
        self.tail.push_back((sequence, bytes));
        while self.tail_bytes > self.config.tail_cache_bytes {
            let (_, evicted) = self.tail.pop_front().expect("over budget means not empty");
            self.tail_bytes -= evicted.len();
        }
    }

    fn poison(&mut self, error: DeviceError) -> StoreError {
        self.poisoned = Some(error.clone());
        StoreError::Poisoned(error)
    }

    /// Writes what was appended (whole blocks, the partial last one
    /// rewritten next time) and pending deletes, then syncs: afterwards
    /// `durable_sequence` is the last appended sequence.
    pub async fn flush(&mut self) -> Result<(), StoreError> {
        self.settle().await?;
        if let Some(last) = self.segments.last() {
            let used = (last.end - self.buffer_start) as usize;
            if used > 0 && self.durable_sequence < self.last_sequence {
                let length = align_up(used, BLOCK_BYTES);
                let mut written = self.buffer.take().expect("the last segment has a buffer");
                let partial = used % BLOCK_BYTES;
                let keep_from = used - partial;
                let mut next = last.file.allocate(self.config.write_buffer_bytes);
                next.bytes_mut().fill(0);
                next.bytes_mut()[..partial].copy_from_slice(&written.bytes()[keep_from..used]);
                written.truncate(length);
                let start = self.buffer_start;
                self.buffer = Some(next);
                self.buffer_start = start + keep_from as u64;
                let last = self.segments.last().expect("checked");
                if self.config.sync {
                    if let Err(error) = last.file.write(start, written).await {
                        return Err(self.poison(error));
                    }
                    let last = self.segments.last().expect("checked");
                    if let Err(error) = last.file.sync().await {
                        return Err(self.poison(error));
                    }
                } else {
                    // Write-behind: appends go on while this is written;
                    // readers of these bytes use the copy until it lands.
                    let bytes = written.bytes()[..length].to_vec();
                    let file = last.file.clone();
                    let task =
                        glommio::spawn_local(async move { file.write(start, written).await });
                    let segment_first_sequence = last.first_sequence;
                    *self.pending_write.borrow_mut() = Some(PendingWrite {
                        segment_first_sequence,
                        start,
                        bytes,
                        task,
                    });
                    if !self.unsynced_segments.contains(&segment_first_sequence) {
                        self.unsynced_segments.push(segment_first_sequence);
                    }
                }
            }
        }
        self.flush_deletes().await?;
        self.durable_sequence = self.last_sequence;
        if self.deletes_end
            > self
                .config
                .deletes_log_bytes_max
                .max(self.deletes_rewrite_bytes)
        {
            self.rewrite_deletes().await?;
        }
        Ok(())
    }

    /// Flushes, then makes everything written so far durable (with `sync`
    /// off, flushes only write: this syncs each segment written since, and
    /// the deletes log; compaction outputs and rewritten deletes logs in
    /// both modes; the directory entries of files created), and returns
    /// the manifest of exactly what is now on stable storage. What a
    /// checkpoint calls: the caller stores the manifest durably, then may
    /// recycle its journal up to `last_sequence` and calls
    /// [`StreamLog::checkpointed`].
    pub async fn sync(&mut self) -> Result<Manifest, StoreError> {
        self.flush().await?;
        self.settle().await?;
        if self.directory_unsynced {
            if let Err(error) = self.files.sync_directory().await {
                return Err(self.poison(error));
            }
            self.directory_unsynced = false;
        }
        let unsynced = std::mem::take(&mut self.unsynced_segments);
        for first_sequence in unsynced {
            // A segment purged since is retired: no manifest from now on
            // names it, nothing to sync.
            let Some(segment) = self
                .segments
                .iter()
                .find(|segment| segment.first_sequence == first_sequence)
            else {
                continue;
            };
            if let Err(error) = segment.file.sync().await {
                return Err(self.poison(error));
            }
        }
        if std::mem::take(&mut self.deletes_unsynced) {
            if let Some(deletes) = &self.deletes {
                if let Err(error) = deletes.sync().await {
                    return Err(self.poison(error));
                }
            }
        }
        let manifest = self.manifest();
        // Paired with the check at open: a manifest this log cannot reopen
        // must never reach the caller's checkpoint.
        if let Err(error) = manifest.check() {
            panic!("sync built an invalid manifest: {error}");
        }
        // The manifest just returned names none of the files retired so
        // far: once the caller stored it, they can go.
        let retired = std::mem::take(&mut self.retired_since_sync);
        self.removable_at_checkpoint.extend(retired);
        Ok(manifest)
    }

    /// The caller durably stored the manifest the latest [`StreamLog::sync`]
    /// returned: removes the files retired before that sync (purged and
    /// compacted segments, rewritten deletes logs), which no manifest from
    /// then on names. Files retired after it stay until the next sync and
    /// checkpoint.
    pub async fn checkpointed(&mut self) -> Result<(), StoreError> {
        self.check_poisoned()?;
        if self.removable_at_checkpoint.is_empty() {
            return Ok(());
        }
        while let Some(name) = self.removable_at_checkpoint.pop() {
            if let Err(error) = self.files.remove(&name).await {
                return Err(self.poison(error));
            }
        }
        if let Err(error) = self.files.sync_directory().await {
            return Err(self.poison(error));
        }
        Ok(())
    }

    /// What is on disk now, if everything written was synced.
    fn manifest(&self) -> Manifest {
        assert!(self.deletes_end % DELETE_ENTRY_BYTES as u64 == 0);
        assert!(self.segments.len() <= SEGMENTS_MAX);
        Manifest {
            floor: self.floor,
            last_sequence: self.last_sequence,
            segments: self.segments.iter().map(Segment::extent).collect(),
            deletes: DeletesExtent {
                version: self.deletes_version,
                entries: self.deletes_end / DELETE_ENTRY_BYTES as u64,
            },
        }
    }

    /// Files retired and not removed yet (tests, and operators wondering
    /// where disk space went between checkpoints).
    pub fn retired_files(&self) -> impl Iterator<Item = &str> + '_ {
        self.retired_since_sync
            .iter()
            .chain(self.removable_at_checkpoint.iter())
            .map(String::as_str)
    }

    /// Keeps the deletes log bounded: raises the floor to the first live
    /// message (whole segments below it retired), then writes the deletes
    /// between the floor and the last sequence into the next version of
    /// the log, a new file. The old one is retired: the stored manifest
    /// names it (with the old floor) until the next checkpoint, and a
    /// reopen from that manifest finds it intact.
    async fn rewrite_deletes(&mut self) -> Result<(), StoreError> {
        let first_live = self
            .first_live()
            .map_or(self.last_sequence + 1, |(sequence, _)| sequence);
        self.purge_below(first_live).await?;
        let interior = self.deleted_sequences(usize::MAX);
        let mut bytes = Vec::with_capacity(interior.len() * DELETE_ENTRY_BYTES);
        for sequence in &interior {
            bytes.extend_from_slice(&delete_entry(*sequence));
        }
        let version = self
            .deletes_version
            .checked_add(1)
            .expect("fewer than 2^32 rewrites of one deletes log");
        let name = deletes_file_name(version);
        let file = self
            .files
            .create(&name)
            .await
            .map_err(|error| self.poison(error))?;
        self.directory_unsynced = true;
        if !bytes.is_empty() {
            let mut buffer = file.allocate(align_up(bytes.len(), BLOCK_BYTES));
            buffer.bytes_mut().fill(0);
            buffer.bytes_mut()[..bytes.len()].copy_from_slice(&bytes);
            file.write(0, buffer)
                .await
                .map_err(|error| self.poison(error))?;
        }
        self.retired_since_sync
            .push(deletes_file_name(self.deletes_version));
        self.deletes = Some(file);
        self.deletes_version = version;
        self.deletes_unsynced = true;
        self.deletes_end = bytes.len() as u64;
        self.deletes_rewrite_bytes = 2 * self.deletes_end;
        Ok(())
    }

    /// Sequences between the first live message and the last sequence that
    /// are gone (deleted or never stored), ascending, at most `limit`.
    pub fn deleted_sequences(&self, limit: usize) -> Vec<u64> {
        let mut deleted = Vec::new();
        let Some((first, _)) = self.first_live() else {
            return deleted;
        };
        let mut expected = first;
        for segment in &self.segments {
            for (index, entry) in segment.entries.iter().enumerate() {
                let sequence = segment.first_sequence + index as u64;
                if sequence < first {
                    continue;
                }
                while expected < sequence && deleted.len() < limit {
                    deleted.push(expected);
                    expected += 1;
                }
                if deleted.len() >= limit {
                    return deleted;
                }
                if !entry.live {
                    deleted.push(sequence);
                }
                expected = sequence + 1;
            }
        }
        deleted.truncate(limit);
        deleted
    }

    /// Every subject with live messages: `(subject, first, last, count)`.
    pub fn subjects(&self) -> impl Iterator<Item = (&[u8], u64, u64, u64)> + '_ {
        self.subjects
            .names
            .iter()
            .zip(self.subjects.state.iter())
            .filter(|(_, state)| state.count > 0)
            .map(|(name, state)| (&name[..], state.first, state.last, state.count))
    }

    /// The highest live sequence whose subject satisfies `matches`.
    pub fn last_matching(&self, mut matches: impl FnMut(&[u8]) -> bool) -> Option<u64> {
        self.subjects()
            .filter(|(name, ..)| matches(name))
            .map(|(_, _, last, _)| last)
            .max()
    }

    /// The first live sequence stored at or after `timestamp_ns`.
    pub fn first_at_or_after(&self, timestamp_ns: u64) -> Option<u64> {
        for segment in &self.segments {
            if segment.live_bytes == 0 {
                continue;
            }
            for (index, entry) in segment.entries.iter().enumerate() {
                if entry.live && entry.timestamp_ns >= timestamp_ns {
                    return Some(segment.first_sequence + index as u64);
                }
            }
        }
        None
    }

    /// Timestamp of a live message.
    pub fn timestamp_of(&self, sequence: u64) -> Option<u64> {
        self.entry(sequence)
            .filter(|entry| entry.live)
            .map(|entry| entry.timestamp_ns)
    }

    /// Subject of a live message.
    pub fn subject_of(&self, sequence: u64) -> Option<&[u8]> {
        self.entry(sequence)
            .filter(|entry| entry.live)
            .map(|entry| &self.subjects.names[entry.subject as usize][..])
    }

    async fn flush_deletes(&mut self) -> Result<(), StoreError> {
        if self.deletes_pending.is_empty() {
            return Ok(());
        }
        let file = self.deletes.as_ref().expect("opened at start");
        let start = self.deletes_end / BLOCK_BYTES as u64 * BLOCK_BYTES as u64;
        let carried = (self.deletes_end - start) as usize;
        let mut bytes = Vec::with_capacity(carried + self.deletes_pending.len());
        if carried > 0 {
            let read = file
                .read(start, BLOCK_BYTES)
                .await
                .map_err(StoreError::Io)?;
            let Some(kept) = read.as_ref().get(..carried) else {
                return Err(corrupt(
                    file.name(),
                    start + read.as_ref().len() as u64,
                    format!("truncated below its {} bytes of entries", self.deletes_end),
                ));
            };
            bytes.extend_from_slice(kept);
        }
        bytes.extend_from_slice(&self.deletes_pending);
        let length = align_up(bytes.len(), BLOCK_BYTES);
        let mut buffer = file.allocate(length);
        buffer.bytes_mut().fill(0);
        buffer.bytes_mut()[..bytes.len()].copy_from_slice(&bytes);
        if let Err(error) = file.write(start, buffer).await {
            return Err(self.poison(error));
        }
        if self.config.sync {
            if let Err(error) = self.deletes.as_ref().expect("opened").sync().await {
                return Err(self.poison(error));
            }
        } else {
            self.deletes_unsynced = true;
        }
        self.deletes_end = start + bytes.len() as u64;
        self.deletes_pending.clear();
        Ok(())
    }

    /// Starts recording removals (see [`RemovalWatches`]): nothing until
    /// [`StreamLog::advance_watch`] sets a bound.
    pub fn watch_removals(&mut self) -> WatchId {
        self.removal_watches.watch()
    }

    /// Records removals of sequences below `below` from now on.
    pub fn advance_watch(&mut self, id: WatchId, below: u64) {
        self.removal_watches.advance(id, below);
    }

    /// Whether watch `id` still records everything (not overflowed, not
    /// finished).
    pub fn watch_is_healthy(&self, id: WatchId) -> bool {
        self.removal_watches.is_healthy(id)
    }

    /// Ends watch `id` and returns what it recorded.
    pub fn finish_watch(&mut self, id: WatchId) -> Option<Removed> {
        self.removal_watches.finish(id)
    }

    /// Removes one message from the live set (in memory); the delete is
    /// persisted by the next flush. Returns whether it was live.
    pub fn delete(&mut self, sequence: u64) -> bool {
        if !self.remove_entry(sequence) {
            return false;
        }
        self.deletes_pending
            .extend_from_slice(&delete_entry(sequence));
        true
    }

    fn remove_entry(&mut self, sequence: u64) -> bool {
        let Some(index) = self.segment_index(sequence) else {
            return false;
        };
        let segment = &mut self.segments[index];
        let Some(entry) = segment
            .entries
            .get_mut((sequence - segment.first_sequence) as usize)
        else {
            return false;
        };
        if !entry.live {
            return false;
        }
        entry.live = false;
        if !self.removal_watches.is_empty() {
            self.removal_watches.removed(sequence);
        }
        let (subject, bytes) = (entry.subject, u64::from(entry.bytes));
        segment.live_bytes -= bytes;
        self.messages -= 1;
        self.bytes -= u64::from(entry.accounted_bytes);
        let state = &mut self.subjects.state[subject as usize];
        state.count -= 1;
        if state.count == 0 {
            self.subjects.live -= 1;
        } else if state.first == sequence {
            // The subject's next live message.
            let next = self.next_live_of_subject(sequence + 1, subject);
            self.subjects.state[subject as usize].first =
                next.expect("count > 0 means another exists");
        }
        if state_last_needs_update(&self.subjects.state[subject as usize], sequence) {
            let previous = self.previous_live_of_subject(sequence, subject);
            self.subjects.state[subject as usize].last =
                previous.expect("count > 0 means another exists");
        }
        true
    }

    fn next_live_of_subject(&self, from: u64, subject: u32) -> Option<u64> {
        let start = self.segment_index(from)?;
        for segment in &self.segments[start..] {
            let skip = from.saturating_sub(segment.first_sequence) as usize;
            for (index, entry) in segment.entries.iter().enumerate().skip(skip) {
                if entry.live && entry.subject == subject {
                    return Some(segment.first_sequence + index as u64);
                }
            }
        }
        None
    }

    fn previous_live_of_subject(&self, before: u64, subject: u32) -> Option<u64> {
        let start = self.segment_index(before)?;
        for segment in self.segments[..=start].iter().rev() {
            let limit = (before - segment.first_sequence.min(before)) as usize;
            for index in (0..segment.entries.len().min(limit)).rev() {
                let entry = &segment.entries[index];
                if entry.live && entry.subject == subject {
                    return Some(segment.first_sequence + index as u64);
                }
            }
        }
        None
    }

    /// Removes every message below `sequence` (purge from the head), in
    /// memory: the caller's journal holds the purge until the next
    /// checkpoint, whose manifest records the floor. Whole segments below
    /// the floor are retired (never the one being written).
    pub async fn purge_below(&mut self, sequence: u64) -> Result<u64, StoreError> {
        self.settle().await?;
        let sequence = sequence.min(self.last_sequence + 1);
        if sequence <= self.floor {
            return Ok(0);
        }
        let mut removed = 0;
        let mut cursor = self.floor;
        while cursor < sequence {
            if self.remove_entry(cursor) {
                removed += 1;
            }
            cursor += 1;
        }
        self.floor = sequence;
        while self.segments.len() > 1 && self.segments[1].first_sequence <= self.floor {
            let segment = self.segments.remove(0);
            assert_eq!(
                segment.live_bytes, 0,
                "a retired segment holds no live message"
            );
            self.drop_read_ahead();
            self.retired_since_sync.push(segment.name);
        }
        Ok(removed)
    }

    /// Applies retention from the head; returns how many messages went.
    pub async fn enforce_limits(&mut self, limits: Limits, now_ns: u64) -> Result<u64, StoreError> {
        let mut cut = self.floor;
        let mut messages = self.messages;
        let mut bytes = self.bytes;
        for segment in &self.segments {
            for (index, entry) in segment.entries.iter().enumerate() {
                let sequence = segment.first_sequence + index as u64;
                if sequence < cut || !entry.live {
                    continue;
                }
                let over_count = limits.max_messages.is_some_and(|max| messages > max);
                let over_bytes = limits.max_bytes.is_some_and(|max| bytes > max);
                let too_old = limits
                    .max_age_ns
                    .is_some_and(|max| now_ns.saturating_sub(entry.timestamp_ns) > max);
                if !(over_count || over_bytes || too_old) {
                    return self.purge_below(cut).await;
                }
                messages -= 1;
                bytes -= u64::from(entry.accounted_bytes);
                cut = sequence + 1;
            }
        }
        self.purge_below(cut).await
    }

    /// Rewrites sealed segments that are mostly deleted; returns bytes reclaimed.
    pub async fn compact(&mut self) -> Result<u64, StoreError> {
        self.settle().await?;
        let mut reclaimed = 0;
        let sealed = self.segments.len().saturating_sub(1);
        for index in 0..sealed {
            let segment = &self.segments[index];
            if segment.end == 0 {
                continue;
            }
            let deleted_share = 1.0 - segment.live_bytes as f64 / segment.end as f64;
            if deleted_share <= self.config.compact_deleted_ratio {
                continue;
            }
            reclaimed += self.compact_segment(index).await?;
        }
        Ok(reclaimed)
    }

    /// Writes the live records of sealed segment `index` into the
    /// segment's next version, a new file; the old file is retired (the
    /// stored manifest names it until the next checkpoint). The new file
    /// is synced by the next [`StreamLog::sync`], before any manifest
    /// names it.
    async fn compact_segment(&mut self, index: usize) -> Result<u64, StoreError> {
        assert!(
            index + 1 < self.segments.len(),
            "never the segment being written"
        );
        let mut live: Vec<(usize, Vec<u8>, u32)> = Vec::new();
        let (first_sequence, version) = {
            let segment = &self.segments[index];
            for (position, entry) in segment.entries.iter().enumerate() {
                if !entry.live {
                    continue;
                }
                let sequence = segment.first_sequence + position as u64;
                let message = self.get(sequence).await?.expect("live entries can be read");
                let mut bytes = vec![0u8; entry.bytes as usize];
                let sum = record::encode(
                    &NewMessage {
                        sequence,
                        timestamp_ns: message.timestamp_ns,
                        subject: &message.subject,
                        headers: &message.headers,
                        payload: &message.payload,
                    },
                    &mut bytes,
                );
                // The same message encodes to the same record.
                assert_eq!(sum, entry.checksum);
                live.push((position, bytes, sum));
            }
            let version = segment
                .version
                .checked_add(1)
                .expect("fewer than 2^32 compactions of one segment");
            (segment.first_sequence, version)
        };
        let total: usize = live.iter().map(|(_, bytes, _)| bytes.len()).sum();
        let name = segment_file_name(first_sequence, version);
        let file = self
            .files
            .create(&name)
            .await
            .map_err(|error| self.poison(error))?;
        self.directory_unsynced = true;
        let mut buffer = file.allocate(align_up(total.max(1), BLOCK_BYTES));
        buffer.bytes_mut().fill(0);
        let mut compacted = Segment::new(first_sequence, version, Rc::new(file));
        let mut offsets = Vec::with_capacity(live.len());
        let mut at = 0;
        for (position, bytes, sum) in &live {
            buffer.bytes_mut()[at..at + bytes.len()].copy_from_slice(bytes);
            offsets.push((*position, at as u32));
            compacted.add_record(first_sequence + *position as u64, *sum);
            at += bytes.len();
        }
        compacted
            .file
            .write(0, buffer)
            .await
            .map_err(|error| self.poison(error))?;
        if !self.unsynced_segments.contains(&first_sequence) {
            self.unsynced_segments.push(first_sequence);
        }
        let segment = &mut self.segments[index];
        let reclaimed = segment.end - total as u64;
        compacted.entries = std::mem::take(&mut segment.entries);
        for entry in compacted.entries.iter_mut() {
            if !entry.live {
                *entry = ABSENT;
            }
        }
        for (position, offset) in offsets {
            compacted.entries[position].offset = offset;
        }
        compacted.end = total as u64;
        compacted.live_bytes = total as u64;
        assert_eq!(compacted.live_bytes, segment.live_bytes);
        let retired = std::mem::replace(segment, compacted);
        self.retired_since_sync.push(retired.name);
        self.drop_read_ahead();
        Ok(reclaimed)
    }
}

/// The size field of the record starting `bytes` (at least 4 of them):
/// below the segment's end a record is always there, so a size that cannot
/// be one (zero, shorter than a header) is corruption.
fn record_size<F>(segment: &Segment<F>, bytes: &[u8]) -> Result<usize, StoreError> {
    let total = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize;
    if total < record::RECORD_HEADER_BYTES {
        return Err(corrupt(
            &segment.name,
            0,
            format!("record size {total} during replay"),
        ));
    }
    Ok(total)
}

/// The sequence a delete entry names, if it verifies.
fn decode_delete_entry(entry: &[u8]) -> Option<u64> {
    let sequence = u64::from_le_bytes(entry[0..8].try_into().expect("8 bytes"));
    let sum = u32::from_le_bytes(entry[8..12].try_into().expect("4 bytes"));
    let magic = u32::from_le_bytes(entry[12..16].try_into().expect("4 bytes"));
    (magic == DELETE_MAGIC && sum == checksum(&entry[0..8])).then_some(sequence)
}

fn delete_entry(sequence: u64) -> [u8; DELETE_ENTRY_BYTES] {
    let mut entry = [0u8; DELETE_ENTRY_BYTES];
    entry[0..8].copy_from_slice(&sequence.to_le_bytes());
    let sum = checksum(&entry[0..8]);
    entry[8..12].copy_from_slice(&sum.to_le_bytes());
    entry[12..16].copy_from_slice(&DELETE_MAGIC.to_le_bytes());
    entry
}

fn state_last_needs_update(state: &SubjectState, removed: u64) -> bool {
    state.count > 0 && state.last == removed
}

impl StoredView<'_> {
    pub fn to_message(&self) -> StoredMessage {
        StoredMessage {
            sequence: self.sequence,
            timestamp_ns: self.timestamp_ns,
            subject: self.subject.to_vec(),
            headers: self.headers.to_vec(),
            payload: self.payload.to_vec(),
        }
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
