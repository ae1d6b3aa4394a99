//! The journal: one per shard, shared by every Raft group on it. Records are
//! appended into the open batch; one flush at a time writes the batch (O_DIRECT,
//! block-aligned) and, with `sync = always`, makes it durable; records that
//! arrive meanwhile collect in the next batch (group commit without timers).
//! `append` returns the record's sequence; `wait_durable(sequence)` completes
//! once the batch holding it is durable.
//!
//! Segments are used in generation order and recycled FIFO: the oldest live
//! segment is freed once every group with records in it has checkpointed past
//! them. After any I/O error the journal is poisoned: no more appends or
//! flushes, every waiter gets the error, and only reopening (recovery) clears
//! it — an fsync is never retried and assumed to have worked.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};

use tern_shard::Waiters;

use crate::device::{Device, DeviceError, IoBuffer};
use crate::format::{
    batch_bytes, checksum, record_bytes, seal_batch, BatchHeader, RecordHeader, RecordView,
    SegmentHeader, BATCH_FOOTER_BYTES, BATCH_HEADER_BYTES, BLOCK_BYTES, RECORD_HEADER_BYTES,
    SEGMENT_HEADER_BYTES,
};
use crate::recovery::{self, Recovered, RecoveryReport};

/// When an appended record counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Written and on stable storage (fdatasync or O_DSYNC) before it is acknowledged.
    Always,
    /// Written to the device, not synced: durability comes from replication.
    Never,
}

#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// The shard owning this journal (stored in segment headers).
    pub shard: u32,
    /// Largest batch one flush writes (header, records, padding, footer and
    /// the parity block): at least two blocks.
    pub batch_bytes_max: usize,
    pub sync: SyncPolicy,
    /// The journal's identity: written into a freshly formatted journal, and
    /// required of every segment of an existing one (a journal of another
    /// id is refused, never reformatted).
    pub journal_id: u64,
    /// The store records that this journal was formatted before (its first
    /// segment header was durable): finding nothing of it is then damage
    /// ([`JournalError::Erased`]), never a fresh start. A journal opened
    /// fresh writes its first segment header before `open` returns, so
    /// the caller may record it as formatted from then on.
    pub formatted_before: bool,
}

impl JournalConfig {
    /// Largest record body that fits in a batch.
    pub fn body_bytes_max(&self) -> usize {
        // batch_bytes(record_bytes(body)) <= batch_bytes_max, solved for body.
        self.batch_bytes_max
            - BLOCK_BYTES
            - BATCH_HEADER_BYTES
            - BATCH_FOOTER_BYTES
            - RECORD_HEADER_BYTES
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    #[error(
        "the journal stopped after an I/O error and accepts no writes until it is reopened: {0}"
    )]
    Poisoned(DeviceError),
    #[error("record body of {body_bytes} bytes is larger than the maximum of {max} bytes")]
    TooLarge { body_bytes: usize, max: usize },
    #[error("journal damaged: {file} at offset {offset}: {reason}")]
    Corrupt {
        /// The segment's file (or device region) name.
        file: String,
        segment: u32,
        offset: u64,
        reason: String,
        /// What an operator's repair would discard (`recovery::cut`).
        cut: Option<crate::recovery::Cut>,
    },
    #[error("{file} belongs to journal {found:#x}, not this store's journal {expected:#x}: is the journal directory another server's?")]
    Foreign {
        file: String,
        found: u64,
        expected: u64,
    },
    #[error("{file} was written in journal format {version}; this tern reads format {supported}")]
    Version {
        file: String,
        version: u16,
        supported: u16,
    },
    #[error("reading the journal failed: {0}")]
    Read(DeviceError),
    #[error("the journal holds nothing of journal {journal_id:#x}, which the store records as formatted: it was erased or replaced")]
    Erased { journal_id: u64 },
    #[error("invalid journal configuration: {0}")]
    Config(String),
}

/// How a [`Journal::read_group`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadEnd {
    /// Every durable record of the group at or after the index was passed.
    Complete,
    /// Stopped once the byte limit was reached (at a batch end): read on
    /// from the index after the last record passed.
    Limited,
    /// A segment was recycled while it was being read: what it held is in
    /// the block store only (the group checkpointed past it).
    Recycled,
}

/// Why `try_append` did not take a record now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendError {
    /// The open batch is full; wait for [`Journal::wait_for_room`] and retry.
    Busy,
    Failed(JournalError),
}

/// One record to append.
#[derive(Debug, Clone, Copy)]
pub struct NewRecord<'a> {
    pub kind: u8,
    pub group: u64,
    pub term: u64,
    pub index: u64,
    pub body: &'a [u8],
}

#[derive(Debug, Clone, Default)]
pub(crate) struct SegmentState {
    /// 0: holds nothing of this journal.
    pub generation: u64,
    pub first_sequence: u64,
    pub last_sequence: u64,
    /// Per group, the highest index it has in this segment.
    pub groups: BTreeMap<u64, u64>,
}

struct OpenBatch<B> {
    buffer: B,
    records_bytes: usize,
    record_count: u32,
    first_sequence: u64,
    /// Chain value before the first record (for a segment header).
    chain_before: u32,
    groups: BTreeMap<u64, u64>,
}

struct State<B> {
    journal_id: u64,
    generation: u64,
    segments: Vec<SegmentState>,
    /// Live segments, oldest first; the back one is being written.
    live: VecDeque<u32>,
    free: VecDeque<u32>,
    /// Next batch offset in the back live segment.
    write_offset: u64,
    open: OpenBatch<B>,
    next_sequence: u64,
    chain: u32,
    durable_sequence: u64,
    flushing: bool,
    poisoned: Option<DeviceError>,
    checkpoints: BTreeMap<u64, u64>,
}

/// Counters for monitoring and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalStats {
    pub flushes: u64,
    pub records: u64,
    pub bytes_written: u64,
    pub segments_opened: u64,
    pub segments_recycled: u64,
}

pub struct Journal<D: Device> {
    device: D,
    config: JournalConfig,
    state: RefCell<State<D::Buffer>>,
    stats: RefCell<JournalStats>,
    /// Woken when the durable sequence advances or the journal is poisoned.
    durable: Waiters,
    /// Woken when the open batch has room again.
    room: Waiters,
    /// Woken when there is something to flush (or space to flush it).
    work: Waiters,
}

impl<D: Device> Journal<D> {
    /// Opens the journal on `device`, recovering what it holds: every record
    /// of the live segments is passed to `on_record` in sequence order.
    pub async fn open(
        device: D,
        config: JournalConfig,
        on_record: impl FnMut(RecordView<'_>),
    ) -> Result<(Journal<D>, RecoveryReport), JournalError> {
        let segment_bytes = device.segment_bytes() as usize;
        if config.batch_bytes_max % BLOCK_BYTES != 0
            || config.batch_bytes_max < 2 * BLOCK_BYTES
            || config.batch_bytes_max > segment_bytes - SEGMENT_HEADER_BYTES
        {
            return Err(JournalError::Config(format!(
                "batch_bytes_max {} must be a multiple of {BLOCK_BYTES}, at least two blocks, and fit a segment of {segment_bytes} bytes after its header",
                config.batch_bytes_max
            )));
        }
        if device.segment_count() < 2 {
            return Err(JournalError::Config(
                "a journal needs at least two segments".into(),
            ));
        }
        let lenient_tail = config.sync == SyncPolicy::Never;
        let recovered = recovery::recover(&device, &config, lenient_tail, on_record).await?;
        let Recovered {
            report,
            mut segments,
            mut live,
            mut write_offset,
            next_sequence,
            chain,
            mut generation,
            journal_id,
            rewrites,
        } = recovered;
        // What recovery rebuilt from redundancy goes back to disk before
        // anything new is written, so a second damage later finds the
        // redundancy whole again.
        for (segment, offset, block) in rewrites {
            let mut buffer = device.allocate(BLOCK_BYTES);
            buffer.bytes_mut().copy_from_slice(&block);
            device
                .write(segment, offset, buffer, true)
                .await
                .map_err(JournalError::Poisoned)?;
        }
        if live.is_empty() {
            if config.formatted_before {
                return Err(JournalError::Erased { journal_id });
            }
            // A fresh journal: its first segment header, durable now, so a
            // journal erased later is told apart from one never used.
            generation = 1;
            let (block, state) = new_segment(
                &device,
                &config,
                journal_id,
                generation,
                generation,
                next_sequence,
                chain,
            );
            device
                .write(0, 0, block, true)
                .await
                .map_err(JournalError::Poisoned)?;
            segments[0] = state;
            live.push_back(0);
            write_offset = SEGMENT_HEADER_BYTES as u64;
        }
        let free: VecDeque<u32> = (0..device.segment_count())
            .filter(|segment| !live.contains(segment))
            .collect();
        let open = OpenBatch {
            buffer: device.allocate(config.batch_bytes_max),
            records_bytes: 0,
            record_count: 0,
            first_sequence: next_sequence,
            chain_before: chain,
            groups: BTreeMap::new(),
        };
        let state = State {
            journal_id,
            generation,
            segments,
            live,
            free,
            write_offset,
            open,
            next_sequence,
            chain,
            durable_sequence: next_sequence - 1,
            flushing: false,
            poisoned: None,
            checkpoints: BTreeMap::new(),
        };
        let journal = Journal {
            device,
            config,
            state: RefCell::new(state),
            stats: RefCell::new(JournalStats::default()),
            durable: Waiters::new(),
            room: Waiters::new(),
            work: Waiters::new(),
        };
        Ok((journal, report))
    }

    pub fn device(&self) -> &D {
        &self.device
    }

    pub fn config(&self) -> &JournalConfig {
        &self.config
    }

    pub fn stats(&self) -> JournalStats {
        *self.stats.borrow()
    }

    /// Highest sequence known durable.
    pub fn durable_sequence(&self) -> u64 {
        self.state.borrow().durable_sequence
    }

    /// Sequence the next appended record will get.
    pub fn next_sequence(&self) -> u64 {
        self.state.borrow().next_sequence
    }

    pub fn poisoned(&self) -> Option<DeviceError> {
        self.state.borrow().poisoned.clone()
    }

    /// Appends a record to the open batch without waiting.
    pub fn try_append(&self, record: NewRecord<'_>) -> Result<u64, AppendError> {
        let max = self.config.body_bytes_max();
        if record.body.len() > max {
            return Err(AppendError::Failed(JournalError::TooLarge {
                body_bytes: record.body.len(),
                max,
            }));
        }
        let mut state = self.state.borrow_mut();
        if let Some(error) = &state.poisoned {
            return Err(AppendError::Failed(JournalError::Poisoned(error.clone())));
        }
        let size = record_bytes(record.body.len());
        let start = BATCH_HEADER_BYTES + state.open.records_bytes;
        if batch_bytes(state.open.records_bytes + size) > self.config.batch_bytes_max {
            return Err(AppendError::Busy);
        }
        let sequence = state.next_sequence;
        let header = RecordHeader {
            body_bytes: record.body.len() as u32,
            kind: record.kind,
            group: record.group,
            term: record.term,
            index: record.index,
            sequence,
            chain: state.chain,
        };
        let sum = header.encode(
            record.body,
            &mut state.open.buffer.bytes_mut()[start..start + size],
        );
        state.chain = sum;
        state.next_sequence += 1;
        let open = &mut state.open;
        open.records_bytes += size;
        open.record_count += 1;
        let highest = open.groups.entry(record.group).or_insert(record.index);
        *highest = (*highest).max(record.index);
        drop(state);
        self.work.wake_all();
        Ok(sequence)
    }

    /// Appends, waiting while the open batch is full.
    pub async fn append(&self, record: NewRecord<'_>) -> Result<u64, JournalError> {
        loop {
            match self.try_append(record) {
                Ok(sequence) => return Ok(sequence),
                Err(AppendError::Failed(error)) => return Err(error),
                Err(AppendError::Busy) => self.wait_for_room().await,
            }
        }
    }

    /// Completes when the open batch may have room (or the journal failed).
    pub async fn wait_for_room(&self) {
        let open_bytes = self.state.borrow().open.records_bytes;
        self.room
            .wait_until(|| {
                let state = self.state.borrow();
                state.poisoned.is_some() || state.open.records_bytes < open_bytes
            })
            .await
    }

    /// Completes once `sequence` is durable, or with the error that stopped the journal.
    pub async fn wait_durable(&self, sequence: u64) -> Result<(), JournalError> {
        self.durable
            .wait_until(|| {
                let state = self.state.borrow();
                state.durable_sequence >= sequence || state.poisoned.is_some()
            })
            .await;
        let state = self.state.borrow();
        if state.durable_sequence >= sequence {
            Ok(())
        } else {
            Err(JournalError::Poisoned(
                state
                    .poisoned
                    .clone()
                    .expect("woken without progress means poisoned"),
            ))
        }
    }

    /// Records that `group` has made everything up to `index` durable
    /// elsewhere (the block store); frees the oldest segments no group needs.
    pub fn checkpoint(&self, group: u64, index: u64) {
        let mut state = self.state.borrow_mut();
        let entry = state.checkpoints.entry(group).or_insert(0);
        *entry = (*entry).max(index);
        let mut recycled = 0;
        // FIFO: only the oldest live segment may go, never the one being written.
        while state.live.len() > 1 {
            let oldest = *state.live.front().expect("live is not empty");
            let needed = state.segments[oldest as usize]
                .groups
                .iter()
                .any(|(group, &highest)| {
                    state
                        .checkpoints
                        .get(group)
                        .is_none_or(|&done| done < highest)
                });
            if needed {
                break;
            }
            state.live.pop_front();
            state.free.push_back(oldest);
            recycled += 1;
        }
        drop(state);
        if recycled > 0 {
            self.stats.borrow_mut().segments_recycled += recycled;
            self.work.wake_all();
        }
    }

    /// Reads back the durable records of `group` whose index is at least
    /// `from_index`, oldest first, for a follower that lags behind what the
    /// leader keeps in memory. Passes each to `on_record` and stops after
    /// the batch in which the bodies passed reach `bytes_max`, so memory
    /// stays at one batch whatever the log's length. An index can appear
    /// more than once (Raft rewrote it after a truncation): the later
    /// record supersedes the earlier. Records in segments already recycled
    /// are not passed: a reader whose first record is above the index it
    /// asked for needs the block store (a snapshot) for the rest. Records
    /// still in the open batch are not passed either (the caller's memory
    /// holds them). Every batch read is verified; damage
    /// one block explains is repaired in memory (recovery rewrites it at
    /// the next start), anything else is [`JournalError::Corrupt`].
    pub async fn read_group(
        &self,
        group: u64,
        from_index: u64,
        bytes_max: usize,
        mut on_record: impl FnMut(RecordView<'_>),
    ) -> Result<ReadEnd, JournalError> {
        // (segment, generation, where its durable batches end, last sequence)
        let (journal_id, plan) = {
            let state = self.state.borrow();
            let back = state.live.back().copied();
            let plan: Vec<(u32, u64, u64, u64)> = state
                .live
                .iter()
                .map(|&segment| (segment, &state.segments[segment as usize]))
                .filter(|(_, segment)| {
                    segment
                        .groups
                        .get(&group)
                        .is_some_and(|&highest| highest >= from_index)
                })
                .map(|(index, segment)| {
                    let end = if Some(index) == back {
                        state.write_offset
                    } else {
                        self.device.segment_bytes()
                    };
                    (index, segment.generation, end, segment.last_sequence)
                })
                .collect();
            (state.journal_id, plan)
        };
        let mut passed_bytes = 0;
        for (segment, generation, end, last_sequence) in plan {
            let mut offset = SEGMENT_HEADER_BYTES as u64;
            while offset + BLOCK_BYTES as u64 <= end {
                let head = self
                    .device
                    .read(segment, offset, BLOCK_BYTES)
                    .await
                    .map_err(JournalError::Read)?;
                if !self.holds(segment, generation) {
                    return Ok(ReadEnd::Recycled);
                }
                let expect = recovery::Expect {
                    generation,
                    journal_id,
                    offset,
                    continues: None,
                };
                let corrupt = |reason: String| JournalError::Corrupt {
                    file: self.device.segment_name(segment),
                    segment,
                    offset,
                    reason,
                    cut: None,
                };
                let batch_bytes = match BatchHeader::decode(&head.as_ref()[..BATCH_HEADER_BYTES]) {
                    Some(header)
                        if !header.footer
                            && header.generation == generation
                            && header.journal_id == journal_id
                            && header.offset == offset =>
                    {
                        header.batch_bytes as usize
                    }
                    _ => {
                        return Err(corrupt(
                            "a durable batch's header is unreadable on read-back".into(),
                        ))
                    }
                };
                if offset + batch_bytes as u64 > end {
                    return Err(corrupt(format!(
                        "batch of {batch_bytes} bytes runs past the durable end {end}"
                    )));
                }
                let bytes = self
                    .device
                    .read(segment, offset, batch_bytes)
                    .await
                    .map_err(JournalError::Read)?;
                if !self.holds(segment, generation) {
                    return Ok(ReadEnd::Recycled);
                }
                let repaired;
                let batch: &[u8] = match recovery::verify_batch(bytes.as_ref(), &expect) {
                    Ok(_) => bytes.as_ref(),
                    Err(fault) => match recovery::rebuild_from_parity(bytes.as_ref(), &expect) {
                        Some((_, rebuilt)) => {
                            repaired = rebuilt;
                            &repaired
                        }
                        None => {
                            return Err(corrupt(match fault {
                                recovery::BatchFault::Unreadable(reason)
                                | recovery::BatchFault::Discontinuous { reason, .. } => reason,
                            }))
                        }
                    },
                };
                let header = BatchHeader::decode(&batch[..BATCH_HEADER_BYTES]).expect("verified");
                let records =
                    &batch[BATCH_HEADER_BYTES..BATCH_HEADER_BYTES + header.records_bytes as usize];
                let mut at = 0;
                for _ in 0..header.record_count {
                    let (view, used) = RecordHeader::decode(&records[at..]).expect("verified");
                    at += used;
                    if view.header.group == group && view.header.index >= from_index {
                        passed_bytes += view.body.len();
                        on_record(view);
                    }
                }
                if passed_bytes >= bytes_max {
                    return Ok(ReadEnd::Limited);
                }
                let batch_last = header.first_sequence + u64::from(header.record_count) - 1;
                if batch_last >= last_sequence {
                    break;
                }
                offset += batch_bytes as u64;
            }
        }
        Ok(ReadEnd::Complete)
    }

    /// Whether `segment` is still live in `generation` (not recycled).
    fn holds(&self, segment: u32, generation: u64) -> bool {
        let state = self.state.borrow();
        state.live.contains(&segment) && state.segments[segment as usize].generation == generation
    }

    /// Live segments, oldest first (for monitoring and tests).
    pub fn live_segments(&self) -> Vec<u32> {
        self.state.borrow().live.iter().copied().collect()
    }

    /// Flushes forever: one batch at a time, the next collecting meanwhile.
    /// Returns when the journal is poisoned.
    pub async fn run(&self) {
        loop {
            self.work
                .wait_until(|| {
                    let state = self.state.borrow();
                    state.poisoned.is_some()
                        || (!state.flushing
                            && state.open.record_count > 0
                            && self.has_space(&state))
                })
                .await;
            if self.state.borrow().poisoned.is_some() {
                return;
            }
            let _ = self.flush().await;
        }
    }

    fn has_space(&self, state: &State<D::Buffer>) -> bool {
        let batch_bytes = batch_bytes(state.open.records_bytes) as u64;
        let fits = !state.live.is_empty()
            && state.write_offset + batch_bytes <= self.device.segment_bytes();
        fits || !state.free.is_empty()
    }

    /// Writes the open batch if there is one and no flush is in flight.
    /// Returns the last sequence made durable by this flush, if any.
    pub async fn flush(&self) -> Result<Option<u64>, JournalError> {
        let (segment, offset, header_block, buffer, last_sequence, groups) = {
            let mut state = self.state.borrow_mut();
            if let Some(error) = &state.poisoned {
                return Err(JournalError::Poisoned(error.clone()));
            }
            if state.flushing || state.open.record_count == 0 {
                return Ok(None);
            }
            let batch_bytes = batch_bytes(state.open.records_bytes);
            let fits = !state.live.is_empty()
                && state.write_offset + batch_bytes as u64 <= self.device.segment_bytes();
            let mut header_block = None;
            if !fits {
                let Some(next) = state.free.pop_front() else {
                    // Full: wait for checkpoints to free the oldest segment.
                    return Ok(None);
                };
                state.generation += 1;
                let generation = state.generation;
                let floor_generation = match state.live.front() {
                    Some(&oldest) => state.segments[oldest as usize].generation,
                    None => generation,
                };
                let (block, segment_state) = new_segment(
                    &self.device,
                    &self.config,
                    state.journal_id,
                    generation,
                    floor_generation,
                    state.open.first_sequence,
                    state.open.chain_before,
                );
                state.segments[next as usize] = segment_state;
                state.live.push_back(next);
                state.write_offset = SEGMENT_HEADER_BYTES as u64;
                header_block = Some(block);
            }
            let segment = *state.live.back().expect("a live segment to write");
            let offset = state.write_offset;
            let generation = state.segments[segment as usize].generation;
            let fresh = OpenBatch {
                buffer: self.device.allocate(self.config.batch_bytes_max),
                records_bytes: 0,
                record_count: 0,
                first_sequence: state.next_sequence,
                chain_before: state.chain,
                groups: BTreeMap::new(),
            };
            let mut batch = std::mem::replace(&mut state.open, fresh);
            let records_end = BATCH_HEADER_BYTES + batch.records_bytes;
            let bytes = batch.buffer.bytes_mut();
            let records_checksum = checksum(&bytes[BATCH_HEADER_BYTES..records_end]);
            let header = BatchHeader {
                footer: false,
                batch_bytes: batch_bytes as u32,
                record_count: batch.record_count,
                generation,
                offset,
                first_sequence: batch.first_sequence,
                records_bytes: batch.records_bytes as u32,
                records_checksum,
                journal_id: state.journal_id,
            };
            seal_batch(&header, &mut bytes[..batch_bytes]);
            batch.buffer.truncate(batch_bytes);
            state.flushing = true;
            let last_sequence = batch.first_sequence + u64::from(batch.record_count) - 1;
            (
                segment,
                offset,
                header_block,
                batch.buffer,
                last_sequence,
                (batch.groups, batch.record_count, batch_bytes),
            )
        };
        // The open batch is empty again: appenders may continue.
        self.room.wake_all();
        let durable = self.config.sync == SyncPolicy::Always;
        let header_opened = header_block.is_some();
        let mut result = Ok(());
        if let Some(block) = header_block {
            result = self.device.write(segment, 0, block, durable).await;
        }
        if result.is_ok() {
            result = self.device.write(segment, offset, buffer, durable).await;
        }
        let (groups, record_count, batch_bytes) = groups;
        let mut state = self.state.borrow_mut();
        state.flushing = false;
        match result {
            Ok(()) => {
                assert_eq!(
                    state.durable_sequence + u64::from(record_count),
                    last_sequence,
                    "batches complete in order"
                );
                state.durable_sequence = last_sequence;
                state.write_offset = offset + batch_bytes as u64;
                let segment_state = &mut state.segments[segment as usize];
                segment_state.last_sequence = last_sequence;
                for (group, highest) in groups {
                    let entry = segment_state.groups.entry(group).or_insert(highest);
                    *entry = (*entry).max(highest);
                }
                drop(state);
                let mut stats = self.stats.borrow_mut();
                stats.flushes += 1;
                stats.records += u64::from(record_count);
                stats.bytes_written +=
                    batch_bytes as u64 + if header_opened { BLOCK_BYTES as u64 } else { 0 };
                stats.segments_opened += u64::from(header_opened);
                drop(stats);
                self.durable.wake_all();
                self.work.wake_all();
                Ok(Some(last_sequence))
            }
            Err(error) => {
                state.poisoned = Some(error.clone());
                drop(state);
                self.durable.wake_all();
                self.room.wake_all();
                self.work.wake_all();
                Err(JournalError::Poisoned(error))
            }
        }
    }
}

/// A segment opened for `generation`, its first record `first_sequence`
/// after chain value `chain`: its header block, to write at offset 0, and
/// its state (nothing in it yet).
fn new_segment<D: Device>(
    device: &D,
    config: &JournalConfig,
    journal_id: u64,
    generation: u64,
    floor_generation: u64,
    first_sequence: u64,
    chain: u32,
) -> (D::Buffer, SegmentState) {
    let header = SegmentHeader {
        segment_bytes: device.segment_bytes(),
        generation,
        first_sequence,
        chain,
        shard: config.shard,
        journal_id,
        floor_generation,
    };
    let mut block = device.allocate(BLOCK_BYTES);
    header.encode(block.bytes_mut());
    let state = SegmentState {
        generation,
        first_sequence,
        last_sequence: first_sequence - 1,
        groups: BTreeMap::new(),
    };
    (block, state)
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
