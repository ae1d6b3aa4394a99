//! Journal recovery: find the live segments, replay their batches in order,
//! verify every checksum, sequence and chain link, repair what a single
//! damaged block destroyed, and decide what a batch that cannot be read
//! means. The rules (docs/storage-format.md, "Recovery"), each one a
//! function here:
//!
//! 1. **Identity.** Every segment header that verifies must carry the
//!    configured journal id and shard, and this format version; anything
//!    else is refused (another server's journal is never reformatted).
//! 2. **Headers.** A segment whose header does not verify is unused only if
//!    its first batch position (block 1) holds no batch of this journal;
//!    otherwise the header is rebuilt from that batch (generation, first
//!    sequence, chain) and written back. A journal is fresh only when no
//!    segment holds anything of it.
//! 3. **Live segments** are the generations floor..=newest, each exactly
//!    once, each continuing the previous one's sequence and chain.
//! 4. **Batches** verify whole: header, footer, records checksum, every
//!    record's checksum, sequence and chain. One that does not is rebuilt
//!    when exactly one of its blocks is damaged (the parity block holds the
//!    XOR of its data blocks), and the block is written back.
//! 5. **The end.** Where no batch can be read, a segment ends cleanly only
//!    if nothing of its generation follows. In the newest segment a batch
//!    with two or more unreadable blocks and nothing after it is a torn
//!    write: it was never acknowledged (an acknowledged batch was written
//!    whole, and one damaged block is rebuilt), so it is cut. Anything else
//!    (a valid batch after an unreadable one, a batch naming another
//!    offset, a gap between segments) is corruption, reported with the
//!    segment file and offset; nothing is dropped silently.

use std::collections::{BTreeMap, VecDeque};

use crate::device::{Device, IoBuffer};
use crate::format::{
    checksum, xor_blocks, BatchHeader, RecordHeader, RecordView, SegmentHeader, BATCH_FOOTER_BYTES,
    BATCH_HEADER_BYTES, BLOCK_BYTES, FORMAT_VERSION, SEGMENT_HEADER_BYTES,
};
use crate::journal::{JournalConfig, JournalError, SegmentState};

/// Where recovery cut the log, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailCut {
    pub segment: u32,
    pub offset: u64,
    pub reason: String,
    /// Valid batches found after the cut and dropped (only with `sync = never`,
    /// where unsynced writes may land out of order).
    pub batches_dropped: u64,
}

/// What recovery rebuilt from redundant data (and wrote back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairKind {
    /// One block of the batch at `batch_offset`, from its parity block.
    BlockFromParity { batch_offset: u64 },
    /// The parity block of the batch at `batch_offset` (its data was intact).
    Parity { batch_offset: u64 },
    /// The segment header, from the segment's first batch.
    SegmentHeader,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    pub segment: u32,
    pub file: String,
    /// Offset of the rewritten block in its segment.
    pub offset: u64,
    pub kind: RepairKind,
}

/// What recovery found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub journal_id: u64,
    /// `(segment, generation)`, oldest first.
    pub live_segments: Vec<(u32, u64)>,
    pub batches: u64,
    pub records: u64,
    /// First and last sequence replayed (0 when nothing was).
    pub first_sequence: u64,
    pub last_sequence: u64,
    /// A torn (or, with `sync = never`, lost) tail that was cut.
    pub tail_cut: Option<TailCut>,
    /// Damaged blocks rebuilt from redundant data.
    pub repairs: Vec<Repair>,
}

pub(crate) struct Recovered {
    pub report: RecoveryReport,
    pub segments: Vec<SegmentState>,
    pub live: VecDeque<u32>,
    pub write_offset: u64,
    pub next_sequence: u64,
    pub chain: u32,
    pub generation: u64,
    pub journal_id: u64,
    /// Rebuilt blocks to write back: (segment, offset, one block).
    pub rewrites: Vec<(u32, u64, Vec<u8>)>,
}

struct Context<'a, D: Device> {
    device: &'a D,
    config: &'a JournalConfig,
}

impl<D: Device> Context<'_, D> {
    /// Corruption at `segment`/`offset`; `cut` is where the readable log
    /// ends, for an operator's explicit repair (`None`: no cut helps).
    fn corrupt(
        &self,
        segment: u32,
        offset: u64,
        cut: Option<Cut>,
        reason: impl Into<String>,
    ) -> JournalError {
        JournalError::Corrupt {
            file: self.device.segment_name(segment),
            segment,
            offset,
            reason: reason.into(),
            cut,
        }
    }
}

/// Where the readable part of a damaged journal ends: what an operator's
/// repair ([`cut`]) discards, so that the journal opens again. Never
/// applied by recovery itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Everything from `offset` of `segment` on, and every segment of a
    /// later generation.
    At { segment: u32, offset: u64 },
    /// Every segment of generation `from` or later.
    Generations { from: u64 },
}

/// A segment's header as recovery uses it: read, or rebuilt from its first batch.
#[derive(Debug, Clone, Copy)]
struct LiveHeader {
    header: SegmentHeader,
    /// Rebuilt: its floor generation is not known (and not used).
    rebuilt: bool,
}

/// What a batch position holds, as far as its own bytes tell.
enum Slot {
    /// A batch of this generation verified (possibly after a repair).
    Batch {
        header: BatchHeader,
        repair: Option<BatchRepair>,
    },
    /// Nothing of this generation starts here (old data, zeros, garbage)
    /// and no footer names this offset.
    Empty,
    /// A batch of this generation is here (its header or footer says so)
    /// but two or more of its blocks are unreadable: a torn write.
    Torn { reason: String, batch_bytes: u64 },
}

#[derive(Debug, Clone)]
struct BatchRepair {
    /// Offset of the rebuilt block in the segment.
    offset: u64,
    block: Vec<u8>,
    kind: RepairKind,
}

/// What a verified batch must continue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expect {
    pub(crate) generation: u64,
    pub(crate) journal_id: u64,
    pub(crate) offset: u64,
    /// `None` when rebuilding a segment header (or reading back one batch):
    /// taken from the batch.
    pub(crate) continues: Option<(u64, u32)>,
}

/// Why a batch's bytes were refused.
#[derive(Debug)]
pub(crate) enum BatchFault {
    /// The bytes are not a whole, self-consistent batch (torn or damaged).
    Unreadable(String),
    /// A self-consistent batch that does not continue the log: corruption.
    Discontinuous {
        relative_offset: u64,
        reason: String,
    },
}

pub(crate) async fn recover<D: Device>(
    device: &D,
    config: &JournalConfig,
    lenient_tail: bool,
    mut on_record: impl FnMut(RecordView<'_>),
) -> Result<Recovered, JournalError> {
    let context = Context { device, config };
    let segment_count = device.segment_count();
    let segment_bytes = device.segment_bytes();
    let mut headers: Vec<Option<LiveHeader>> = Vec::with_capacity(segment_count as usize);
    let mut rewrites = Vec::new();
    // Segments with neither a header nor a readable first batch.
    let mut unreadable: Vec<(u32, u64, String)> = Vec::new();
    let mut report = RecoveryReport {
        journal_id: config.journal_id,
        ..RecoveryReport::default()
    };
    // Rules 1 and 2: every header verified or rebuilt.
    for segment in 0..segment_count {
        let block = device
            .read(segment, 0, BLOCK_BYTES)
            .await
            .map_err(JournalError::Read)?;
        let header = match SegmentHeader::decode(block.as_ref()) {
            Some(header) => {
                check_identity(&context, segment, &header)?;
                Some(LiveHeader {
                    header,
                    rebuilt: false,
                })
            }
            None => {
                if let Some(version) = SegmentHeader::version_of(block.as_ref()) {
                    return Err(JournalError::Version {
                        file: device.segment_name(segment),
                        version,
                        supported: FORMAT_VERSION,
                    });
                }
                match rebuild_header(&context, segment).await? {
                    Rebuild::Header(header) => {
                        report.repairs.push(Repair {
                            segment,
                            file: device.segment_name(segment),
                            offset: 0,
                            kind: RepairKind::SegmentHeader,
                        });
                        Some(LiveHeader {
                            header,
                            rebuilt: true,
                        })
                    }
                    Rebuild::Unreadable { generation, reason } => {
                        unreadable.push((segment, generation, reason));
                        None
                    }
                    Rebuild::Unused => None,
                }
            }
        };
        headers.push(header);
    }
    let mut segments = vec![SegmentState::default(); segment_count as usize];
    let newest_generation = headers
        .iter()
        .flatten()
        .map(|header| header.header.generation)
        .max();
    let live_floor = newest_generation.map(|newest| {
        let newest = headers
            .iter()
            .flatten()
            .find(|header| header.header.generation == newest)
            .expect("the newest exists");
        floor_generation(&headers, newest)
    });
    for (segment, generation, reason) in &unreadable {
        // Left from an older use of the segment, or (sync = never) a first
        // batch whose writes were lost with the header's: nothing of the log.
        if lenient_tail || live_floor.is_some_and(|floor| *generation < floor) {
            continue;
        }
        return Err(context.corrupt(
            *segment,
            0,
            Some(Cut::Generations { from: *generation }),
            format!(
                "segment header fails its checksum and its first batch (generation {generation}) cannot be read: {reason}"
            ),
        ));
    }
    let Some((newest_segment, newest)) = headers
        .iter()
        .enumerate()
        .filter_map(|(segment, header)| header.map(|header| (segment as u32, header)))
        .max_by_key(|(_, header)| header.header.generation)
    else {
        // Nothing of this journal anywhere: a fresh journal.
        return Ok(Recovered {
            report,
            segments,
            live: VecDeque::new(),
            write_offset: 0,
            next_sequence: 1,
            chain: 0,
            generation: 0,
            journal_id: config.journal_id,
            rewrites,
        });
    };
    // Rule 3: the live segments.
    let floor = floor_generation(&headers, &newest);
    // Rebuilt headers are written back with the floor worked out here (the
    // newest one's floor is where the next recovery starts).
    for (segment, header) in headers.iter_mut().enumerate() {
        let Some(header) = header.as_mut().filter(|header| header.rebuilt) else {
            continue;
        };
        header.header.floor_generation = floor.min(header.header.generation);
        let mut block = vec![0u8; BLOCK_BYTES];
        header.header.encode(&mut block);
        rewrites.push((segment as u32, 0, block));
    }
    let mut by_generation: BTreeMap<u64, u32> = BTreeMap::new();
    for (segment, header) in headers.iter().enumerate() {
        let Some(header) = header else { continue };
        if header.header.generation < floor {
            continue;
        }
        if let Some(other) = by_generation.insert(header.header.generation, segment as u32) {
            return Err(context.corrupt(
                segment as u32,
                0,
                None,
                format!(
                    "segments {other} and {segment} both claim generation {}",
                    header.header.generation
                ),
            ));
        }
    }
    for generation in floor..=newest.header.generation {
        if !by_generation.contains_key(&generation) {
            return Err(context.corrupt(
                newest_segment,
                0,
                Some(Cut::Generations { from: generation }),
                format!(
                    "live segment of generation {generation} (floor {floor}, newest {}) is missing",
                    newest.header.generation
                ),
            ));
        }
    }
    let live: VecDeque<u32> = by_generation.values().copied().collect();
    let first_header = headers[live[0] as usize]
        .expect("live segments have headers")
        .header;
    let mut next_sequence = first_header.first_sequence;
    let mut chain = first_header.chain;
    let mut write_offset = SEGMENT_HEADER_BYTES as u64;
    for (position, &segment) in live.iter().enumerate() {
        let header = headers[segment as usize]
            .expect("live segments have headers")
            .header;
        if header.first_sequence != next_sequence || header.chain != chain {
            return Err(context.corrupt(
                segment,
                0,
                Some(Cut::Generations {
                    from: header.generation,
                }),
                format!(
                    "segment of generation {} starts at sequence {} (chain {:#x}) but the log continues at {next_sequence} (chain {chain:#x})",
                    header.generation, header.first_sequence, header.chain
                ),
            ));
        }
        report.live_segments.push((segment, header.generation));
        let contents = device
            .read(segment, 0, segment_bytes as usize)
            .await
            .map_err(JournalError::Read)?;
        let state = &mut segments[segment as usize];
        state.generation = header.generation;
        state.first_sequence = header.first_sequence;
        state.last_sequence = header.first_sequence - 1;
        let newest_live = position + 1 == live.len();
        let end = scan_segment(
            &context,
            SegmentRead {
                segment,
                header: &header,
                bytes: contents.as_ref(),
            },
            ScanPosition {
                next_sequence: &mut next_sequence,
                chain: &mut chain,
            },
            state,
            &mut report,
            &mut rewrites,
            &mut on_record,
        )?;
        // Rule 5: what the end of the segment means.
        let traces = traces_after(contents.as_ref(), end.offset, &header);
        match end.torn {
            None if traces == 0 => {}
            torn if newest_live && lenient_tail => {
                report.tail_cut = Some(TailCut {
                    segment,
                    offset: end.offset,
                    reason: torn
                        .map(|(reason, _)| reason)
                        .unwrap_or_else(|| "unsynced writes lost".into()),
                    batches_dropped: traces,
                });
            }
            Some((reason, _)) if traces == 0 => {
                if newest_live {
                    report.tail_cut = Some(TailCut {
                        segment,
                        offset: end.offset,
                        reason: format!("torn write: {reason}"),
                        batches_dropped: 0,
                    });
                }
                // In an older segment: a tail torn, cut and rotated past;
                // the next segment must continue exactly (checked above).
            }
            torn => {
                return Err(context.corrupt(
                    segment,
                    end.offset,
                    Some(Cut::At {
                        segment,
                        offset: end.offset,
                    }),
                    format!(
                        "the log ends at offset {} but {traces} batch(es) of generation {} follow: not a torn tail{}",
                        end.offset,
                        header.generation,
                        torn.map(|(reason, _)| format!(" ({reason})")).unwrap_or_default()
                    ),
                ));
            }
        }
        if newest_live {
            write_offset = end.offset;
        }
    }
    report.last_sequence = next_sequence - 1;
    if report.records == 0 {
        report.last_sequence = 0;
    } else {
        report.first_sequence = first_header.first_sequence;
    }
    Ok(Recovered {
        report,
        segments,
        live,
        write_offset,
        next_sequence,
        chain,
        generation: newest.header.generation,
        journal_id: config.journal_id,
        rewrites,
    })
}

/// Rule 1: a verified header must be this journal's, this shard's, sized
/// for this device.
fn check_identity<D: Device>(
    context: &Context<'_, D>,
    segment: u32,
    header: &SegmentHeader,
) -> Result<(), JournalError> {
    if header.journal_id != context.config.journal_id {
        return Err(JournalError::Foreign {
            file: context.device.segment_name(segment),
            found: header.journal_id,
            expected: context.config.journal_id,
        });
    }
    if header.shard != context.config.shard {
        return Err(context.corrupt(
            segment,
            0,
            None,
            format!(
                "journal of shard {} opened by shard {}",
                header.shard, context.config.shard
            ),
        ));
    }
    if header.segment_bytes != context.device.segment_bytes() {
        return Err(context.corrupt(
            segment,
            0,
            None,
            format!(
                "segment size {} but the device has {}",
                header.segment_bytes,
                context.device.segment_bytes()
            ),
        ));
    }
    Ok(())
}

/// What a segment whose header does not verify holds.
enum Rebuild {
    /// Nothing of this journal's (zeros, garbage).
    Unused,
    /// The header rebuilt from the first batch (its floor generation still
    /// to be worked out).
    Header(SegmentHeader),
    /// A batch header of this journal at block 1 whose batch cannot be
    /// read: harmless if its generation is below the floor (left from an
    /// older use of the segment), corruption otherwise.
    Unreadable { generation: u64, reason: String },
}

/// Rule 2: a segment whose header does not verify. If its block 1 holds a
/// batch header of this journal, the segment was in use: the header is
/// rebuilt from that batch.
async fn rebuild_header<D: Device>(
    context: &Context<'_, D>,
    segment: u32,
) -> Result<Rebuild, JournalError> {
    let device = context.device;
    let journal_id = context.config.journal_id;
    let first = device
        .read(segment, SEGMENT_HEADER_BYTES as u64, BLOCK_BYTES)
        .await
        .map_err(JournalError::Read)?;
    let first = first.as_ref();
    if let Some(version) =
        BatchHeader::version_of(first).filter(|&version| version != FORMAT_VERSION)
    {
        return Err(JournalError::Version {
            file: device.segment_name(segment),
            version,
            supported: FORMAT_VERSION,
        });
    }
    // With one damaged block (the header), the first batch is intact: a
    // segment ever used holds a verified batch header at block 1. None, or
    // one left from an older use of the segment (below the floor, sorted
    // out by the caller), and nothing of the segment's current use exists.
    let Some(found) = BatchHeader::decode(first).filter(|header| !header.footer) else {
        return Ok(Rebuild::Unused);
    };
    if found.journal_id != journal_id {
        return Err(JournalError::Foreign {
            file: device.segment_name(segment),
            found: found.journal_id,
            expected: journal_id,
        });
    }
    if found.offset != SEGMENT_HEADER_BYTES as u64
        || SEGMENT_HEADER_BYTES as u64 + u64::from(found.batch_bytes) > device.segment_bytes()
    {
        return Ok(Rebuild::Unused);
    }
    let batch = device
        .read(
            segment,
            SEGMENT_HEADER_BYTES as u64,
            found.batch_bytes as usize,
        )
        .await
        .map_err(JournalError::Read)?;
    let expect = Expect {
        generation: found.generation,
        journal_id,
        offset: SEGMENT_HEADER_BYTES as u64,
        continues: None,
    };
    let (header, chain) = match verify_batch(batch.as_ref(), &expect) {
        Ok(verified) => verified,
        Err(BatchFault::Unreadable(reason) | BatchFault::Discontinuous { reason, .. }) => {
            return Ok(Rebuild::Unreadable {
                generation: found.generation,
                reason,
            })
        }
    };
    let rebuilt = SegmentHeader {
        segment_bytes: device.segment_bytes(),
        generation: header.generation,
        first_sequence: header.first_sequence,
        chain,
        shard: context.config.shard,
        journal_id,
        // Unknown; `floor_generation` works it out from the other headers.
        floor_generation: header.generation,
    };
    Ok(Rebuild::Header(rebuilt))
}

/// The oldest live generation. From the newest header when it verified;
/// when it was rebuilt, the oldest generation from which every generation
/// up to the newest is present, but never below a floor some verified
/// header recorded (floors only rise).
fn floor_generation(headers: &[Option<LiveHeader>], newest: &LiveHeader) -> u64 {
    if !newest.rebuilt {
        return newest.header.floor_generation;
    }
    let generations: std::collections::BTreeSet<u64> = headers
        .iter()
        .flatten()
        .map(|header| header.header.generation)
        .collect();
    let mut contiguous = newest.header.generation;
    while contiguous > 1 && generations.contains(&(contiguous - 1)) {
        contiguous -= 1;
    }
    let recorded = headers
        .iter()
        .flatten()
        .filter(|header| !header.rebuilt)
        .map(|header| header.header.floor_generation)
        .max()
        .unwrap_or(0);
    contiguous.max(recorded).min(newest.header.generation)
}

/// How a segment's scan ended.
struct SegmentEnd {
    /// Offset of the first position holding no readable batch.
    offset: u64,
    /// A torn batch there: why, and its length.
    torn: Option<(String, u64)>,
}

struct ScanPosition<'a> {
    next_sequence: &'a mut u64,
    chain: &'a mut u32,
}

/// One live segment as read from the device: its number, its verified (or
/// rebuilt) header and its whole contents.
#[derive(Clone, Copy)]
struct SegmentRead<'a> {
    segment: u32,
    header: &'a SegmentHeader,
    bytes: &'a [u8],
}

/// Replays the batches of one segment (rule 4); returns where they end.
fn scan_segment<D: Device>(
    context: &Context<'_, D>,
    read: SegmentRead<'_>,
    position: ScanPosition<'_>,
    state: &mut SegmentState,
    report: &mut RecoveryReport,
    rewrites: &mut Vec<(u32, u64, Vec<u8>)>,
    on_record: &mut impl FnMut(RecordView<'_>),
) -> Result<SegmentEnd, JournalError> {
    let SegmentRead {
        segment,
        header,
        bytes,
    } = read;
    let ScanPosition {
        next_sequence,
        chain,
    } = position;
    let mut offset = SEGMENT_HEADER_BYTES;
    while offset + BLOCK_BYTES <= bytes.len() {
        let expect = Expect {
            generation: header.generation,
            journal_id: header.journal_id,
            offset: offset as u64,
            continues: Some((*next_sequence, *chain)),
        };
        let slot = read_slot(context, bytes, segment, &expect)?;
        let (batch_header, repaired) = match slot {
            Slot::Empty => {
                return Ok(SegmentEnd {
                    offset: offset as u64,
                    torn: None,
                })
            }
            Slot::Torn {
                reason,
                batch_bytes,
            } => {
                return Ok(SegmentEnd {
                    offset: offset as u64,
                    torn: Some((reason, batch_bytes)),
                })
            }
            Slot::Batch { header, repair } => (header, repair),
        };
        let batch_end = offset + batch_header.batch_bytes as usize;
        let repaired_batch;
        let batch: &[u8] = match &repaired {
            Some(repair) => {
                let mut copy = bytes[offset..batch_end].to_vec();
                let at = repair.offset as usize - offset;
                copy[at..at + BLOCK_BYTES].copy_from_slice(&repair.block);
                repaired_batch = copy;
                &repaired_batch
            }
            None => &bytes[offset..batch_end],
        };
        if let Some(repair) = repaired {
            report.repairs.push(Repair {
                segment,
                file: context.device.segment_name(segment),
                offset: repair.offset,
                kind: repair.kind,
            });
            rewrites.push((segment, repair.offset, repair.block));
        }
        let records =
            &batch[BATCH_HEADER_BYTES..BATCH_HEADER_BYTES + batch_header.records_bytes as usize];
        let mut at = 0;
        for _ in 0..batch_header.record_count {
            let (view, used) = RecordHeader::decode(&records[at..]).expect("verified");
            let highest = state
                .groups
                .entry(view.header.group)
                .or_insert(view.header.index);
            *highest = (*highest).max(view.header.index);
            *chain = view.checksum;
            on_record(view);
            at += used;
        }
        *next_sequence += u64::from(batch_header.record_count);
        state.last_sequence = *next_sequence - 1;
        report.batches += 1;
        report.records += u64::from(batch_header.record_count);
        offset = batch_end;
    }
    Ok(SegmentEnd {
        offset: offset as u64,
        torn: None,
    })
}

/// What the position `expect.offset` of a segment holds (rules 4 and 5).
fn read_slot<D: Device>(
    context: &Context<'_, D>,
    bytes: &[u8],
    segment: u32,
    expect: &Expect,
) -> Result<Slot, JournalError> {
    let offset = expect.offset as usize;
    // Where the batch is and how long: its header, or a footer naming it.
    let at_header = BatchHeader::decode(&bytes[offset..offset + BATCH_HEADER_BYTES])
        .filter(|header| !header.footer)
        .filter(|header| {
            header.generation == expect.generation && header.journal_id == expect.journal_id
        });
    if let Some(header) = at_header {
        if header.offset != expect.offset {
            return Err(context.corrupt(
                segment,
                expect.offset,
                Some(Cut::At {
                    segment,
                    offset: expect.offset,
                }),
                format!(
                    "batch written for offset {} found at offset {offset} (misdirected write)",
                    header.offset
                ),
            ));
        }
    }
    let geometry = at_header.or_else(|| find_footer(bytes, expect.offset, expect));
    let Some(geometry) = geometry else {
        return Ok(Slot::Empty);
    };
    let batch_end = offset + geometry.batch_bytes as usize;
    if batch_end > bytes.len() {
        return Ok(Slot::Torn {
            reason: format!(
                "batch of {} bytes runs past the segment end",
                geometry.batch_bytes
            ),
            batch_bytes: geometry.batch_bytes as u64,
        });
    }
    let batch = &bytes[offset..batch_end];
    let fault = match verify_batch(batch, expect) {
        Ok((header, _)) => {
            // Data intact; a damaged parity block is rewritten so that a
            // later damage to the data can still be repaired.
            let repair = (!parity_holds(batch, &header)).then(|| BatchRepair {
                offset: expect.offset + header.data_blocks() as u64 * BLOCK_BYTES as u64,
                block: parity_of(batch, &header),
                kind: RepairKind::Parity {
                    batch_offset: expect.offset,
                },
            });
            return Ok(Slot::Batch { header, repair });
        }
        Err(fault) => fault,
    };
    let reason = match fault {
        BatchFault::Discontinuous {
            relative_offset,
            reason,
        } => {
            return Err(context.corrupt(
                segment,
                expect.offset + relative_offset,
                Some(Cut::At {
                    segment,
                    offset: expect.offset,
                }),
                reason,
            ));
        }
        BatchFault::Unreadable(reason) => reason,
    };
    match rebuild_from_parity(batch, expect) {
        Some((block_index, repaired)) => {
            // A repaired batch may still not continue the log.
            let (header, _) = verify_batch(&repaired, expect).map_err(|fault| match fault {
                BatchFault::Discontinuous {
                    relative_offset,
                    reason,
                } => context.corrupt(
                    segment,
                    expect.offset + relative_offset,
                    Some(Cut::At {
                        segment,
                        offset: expect.offset,
                    }),
                    reason,
                ),
                BatchFault::Unreadable(reason) => context.corrupt(
                    segment,
                    expect.offset,
                    Some(Cut::At {
                        segment,
                        offset: expect.offset,
                    }),
                    reason,
                ),
            })?;
            let block_start = block_index * BLOCK_BYTES;
            Ok(Slot::Batch {
                header,
                repair: Some(BatchRepair {
                    offset: expect.offset + block_start as u64,
                    block: repaired[block_start..block_start + BLOCK_BYTES].to_vec(),
                    kind: RepairKind::BlockFromParity {
                        batch_offset: expect.offset,
                    },
                }),
            })
        }
        None => Ok(Slot::Torn {
            reason,
            batch_bytes: geometry.batch_bytes as u64,
        }),
    }
}

/// Verifies a whole batch (`batch` is exactly its bytes): header, footer,
/// records checksum, and every record's checksum, sequence and chain
/// continuing `expect`. Returns the header and the chain value before its
/// first record.
pub(crate) fn verify_batch(
    batch: &[u8],
    expect: &Expect,
) -> Result<(BatchHeader, u32), BatchFault> {
    let unreadable = |reason: &str| Err(BatchFault::Unreadable(reason.to_string()));
    let Some(header) = BatchHeader::decode(&batch[..BATCH_HEADER_BYTES]) else {
        return unreadable("batch header fails its checksum");
    };
    if header.footer
        || header.generation != expect.generation
        || header.journal_id != expect.journal_id
        || header.offset != expect.offset
        || header.batch_bytes as usize != batch.len()
    {
        return unreadable("batch header does not describe this batch");
    }
    let footer_at = header.footer_offset();
    match BatchHeader::decode(&batch[footer_at..footer_at + BATCH_FOOTER_BYTES]) {
        Some(footer) if footer.footer && footer.same_batch(&header) => {}
        _ => return unreadable("batch footer missing or different"),
    }
    let records_end = BATCH_HEADER_BYTES + header.records_bytes as usize;
    let records = &batch[BATCH_HEADER_BYTES..records_end];
    if checksum(records) != header.records_checksum {
        return unreadable("records checksum mismatch");
    }
    // The padding is covered by no checksum but is zeros by construction:
    // a damaged byte there is found here (and rebuilt), not left behind.
    if batch[records_end..footer_at].iter().any(|&byte| byte != 0) {
        return unreadable("batch padding is not zero");
    }
    let Some((first, _)) = RecordHeader::decode(records) else {
        return unreadable("first record fails its checksum");
    };
    let (first_sequence, chain_before) = expect
        .continues
        .unwrap_or((first.header.sequence, first.header.chain));
    if header.first_sequence != first_sequence {
        return Err(BatchFault::Discontinuous {
            relative_offset: 0,
            reason: format!(
                "batch starts at sequence {} but the log continues at {first_sequence}",
                header.first_sequence
            ),
        });
    }
    let mut position = 0;
    let mut expected_chain = chain_before;
    for expected_sequence in (first_sequence..).take(header.record_count as usize) {
        let Some((view, used)) = RecordHeader::decode(&records[position..]) else {
            return unreadable("a record fails its checksum inside a verified batch");
        };
        if view.header.sequence != expected_sequence || view.header.chain != expected_chain {
            return Err(BatchFault::Discontinuous {
                relative_offset: (BATCH_HEADER_BYTES + position) as u64,
                reason: format!(
                    "record {} breaks the chain (expected sequence {expected_sequence})",
                    view.header.sequence
                ),
            });
        }
        expected_chain = view.checksum;
        position += used;
    }
    if position != records.len() {
        return unreadable("batch record count and size disagree");
    }
    Ok((header, chain_before))
}

/// The parity block a batch should have.
fn parity_of(batch: &[u8], header: &BatchHeader) -> Vec<u8> {
    let mut parity = vec![0u8; BLOCK_BYTES];
    xor_blocks(&batch[..header.data_blocks() * BLOCK_BYTES], &mut parity);
    parity
}

fn parity_holds(batch: &[u8], header: &BatchHeader) -> bool {
    let data_end = header.data_blocks() * BLOCK_BYTES;
    parity_of(batch, header) == batch[data_end..data_end + BLOCK_BYTES]
}

/// Rule 4: if exactly one data block of `batch` is damaged, the XOR of all
/// its blocks (parity included) is that block's error; patching each block
/// in turn with it and re-verifying finds the one. Returns the block index
/// and the repaired batch; `None` when no single block explains the damage.
pub(crate) fn rebuild_from_parity(batch: &[u8], expect: &Expect) -> Option<(usize, Vec<u8>)> {
    assert_eq!(batch.len() % BLOCK_BYTES, 0);
    let mut syndrome = vec![0u8; BLOCK_BYTES];
    xor_blocks(batch, &mut syndrome);
    if syndrome.iter().all(|&byte| byte == 0) {
        return None;
    }
    let data_blocks = batch.len() / BLOCK_BYTES - 1;
    let mut candidate = batch.to_vec();
    for block in 0..data_blocks {
        let range = block * BLOCK_BYTES..(block + 1) * BLOCK_BYTES;
        for (byte, error) in candidate[range.clone()].iter_mut().zip(&syndrome) {
            *byte ^= error;
        }
        if verify_batch(&candidate, expect).is_ok() {
            return Some((block, candidate));
        }
        candidate[range.clone()].copy_from_slice(&batch[range]);
    }
    None
}

/// A footer (in the last bytes of some block after `offset`) of a batch at
/// `offset` of `expect`'s generation and journal. A one-block batch's
/// parity block is a copy of its data block, so its footer is also found
/// one block later.
fn find_footer(bytes: &[u8], offset: u64, expect: &Expect) -> Option<BatchHeader> {
    let mut block_end = offset as usize + BLOCK_BYTES;
    while block_end <= bytes.len() {
        let at = block_end - BATCH_FOOTER_BYTES;
        if let Some(footer) = BatchHeader::decode(&bytes[at..block_end]) {
            let ours =
                footer.generation == expect.generation && footer.journal_id == expect.journal_id;
            let placed = footer.offset == offset
                && (footer.footer_offset() + offset as usize == at
                    || (footer.data_blocks() == 1
                        && offset as usize + 2 * BLOCK_BYTES - BATCH_FOOTER_BYTES == at));
            if footer.footer && ours && placed {
                return Some(footer);
            }
        }
        block_end += BLOCK_BYTES;
    }
    None
}

/// Rule 5: batches of `header`'s generation after `from` — a header at its
/// own offset, or a footer naming an offset past `from` (footers of batches
/// before `from` are left from writes that a later batch overwrote). Any
/// means the log did not end at `from`.
fn traces_after(bytes: &[u8], from: u64, header: &SegmentHeader) -> u64 {
    let ours = |batch: &BatchHeader| {
        batch.generation == header.generation && batch.journal_id == header.journal_id
    };
    let mut traces = 0;
    let mut block = from as usize + BLOCK_BYTES;
    while block + BLOCK_BYTES <= bytes.len() {
        let start = BatchHeader::decode(&bytes[block..block + BATCH_HEADER_BYTES])
            .filter(|batch| !batch.footer && ours(batch) && batch.offset == block as u64);
        let end = BatchHeader::decode(
            &bytes[block + BLOCK_BYTES - BATCH_FOOTER_BYTES..block + BLOCK_BYTES],
        )
        .filter(|batch| batch.footer && ours(batch) && batch.offset > from);
        traces += u64::from(start.is_some() || end.is_some());
        block += BLOCK_BYTES;
    }
    traces
}

/// Recovery without writing anything (no repair is written back): what
/// `tern storage check` reports. Returns the report; the records go to
/// `on_record` as in [`crate::Journal::open`].
pub async fn inspect<D: Device>(
    device: &D,
    config: &JournalConfig,
    on_record: impl FnMut(RecordView<'_>),
) -> Result<RecoveryReport, JournalError> {
    let lenient_tail = config.sync == crate::journal::SyncPolicy::Never;
    recover(device, config, lenient_tail, on_record)
        .await
        .map(|recovered| recovered.report)
}

/// What [`cut`] zeroed: `(segment, from offset)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CutReport {
    pub zeroed: Vec<(u32, u64)>,
}

/// An operator's repair of a damaged journal: discards what `cut` names by
/// zeroing it (a zeroed segment is unused by rule 2; a zeroed tail is a
/// clean end by rule 5), so the journal opens with the log before the
/// damage. Whole later segments are zeroed, not just their headers, so
/// nothing of their generations is left to be mistaken for a later use of
/// the same generation numbers. Durable when it returns.
pub async fn cut<D: Device>(
    device: &D,
    config: &JournalConfig,
    cut: &Cut,
) -> Result<CutReport, JournalError> {
    let mut generations = Vec::with_capacity(device.segment_count() as usize);
    for segment in 0..device.segment_count() {
        generations.push(segment_generation(device, config, segment).await?);
    }
    let (from, within) = match *cut {
        Cut::At { segment, offset } => {
            let generation = generations[segment as usize].ok_or_else(|| {
                JournalError::Config(format!(
                    "cut at {} holds nothing of this journal",
                    device.segment_name(segment)
                ))
            })?;
            (generation + 1, Some((segment, offset)))
        }
        Cut::Generations { from } => (from, None),
    };
    let mut report = CutReport::default();
    for (segment, generation) in generations.iter().enumerate() {
        let segment = segment as u32;
        let start = match within {
            Some((at, offset)) if at == segment => offset,
            _ if generation.is_some_and(|generation| generation >= from) => 0,
            _ => continue,
        };
        zero(device, segment, start).await?;
        report.zeroed.push((segment, start));
    }
    Ok(report)
}

/// The generation a segment holds: its header's, or (header unreadable)
/// its first batch header's; `None` when it holds nothing of this journal.
async fn segment_generation<D: Device>(
    device: &D,
    config: &JournalConfig,
    segment: u32,
) -> Result<Option<u64>, JournalError> {
    let blocks = device
        .read(segment, 0, 2 * BLOCK_BYTES)
        .await
        .map_err(JournalError::Read)?;
    let blocks = blocks.as_ref();
    if let Some(header) = SegmentHeader::decode(&blocks[..BLOCK_BYTES]) {
        return Ok((header.journal_id == config.journal_id).then_some(header.generation));
    }
    Ok(BatchHeader::decode(&blocks[BLOCK_BYTES..])
        .filter(|batch| !batch.footer && batch.journal_id == config.journal_id)
        .map(|batch| batch.generation))
}

async fn zero<D: Device>(device: &D, segment: u32, from: u64) -> Result<(), JournalError> {
    const CHUNK_BYTES: usize = 1 << 20;
    assert_eq!(from % BLOCK_BYTES as u64, 0);
    let mut offset = from;
    while offset < device.segment_bytes() {
        let bytes = CHUNK_BYTES.min((device.segment_bytes() - offset) as usize);
        let mut buffer = device.allocate(bytes);
        buffer.bytes_mut().fill(0);
        device
            .write(segment, offset, buffer, true)
            .await
            .map_err(JournalError::Poisoned)?;
        offset += bytes as u64;
    }
    Ok(())
}
