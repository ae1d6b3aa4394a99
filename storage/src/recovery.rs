//! Journal recovery: find the live segments, replay their batches in order,
//! verify every checksum, sequence and chain link, and decide what the first
//! bad batch means (see `docs/storage-format.md`, "Recovery"): the normal end
//! of a segment, a torn tail to cut, or corruption to report with its segment
//! and offset. Nothing is dropped silently.

use std::collections::{BTreeMap, VecDeque};

use crate::device::Device;
use crate::format::{
    BatchHeader, RecordHeader, RecordView, SegmentHeader, BATCH_HEADER_BYTES, BLOCK_BYTES,
    SEGMENT_HEADER_BYTES,
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
}

fn corrupt(segment: u32, offset: u64, reason: impl Into<String>) -> JournalError {
    JournalError::Corrupt {
        segment,
        offset,
        reason: reason.into(),
    }
}

/// How a segment's scan ended.
struct SegmentEnd {
    /// Offset of the first block that is not an accepted batch.
    offset: u64,
    /// A batch header was valid there but its contents were not (torn or damaged).
    damaged_batch: Option<String>,
}

pub(crate) async fn recover<D: Device>(
    device: &D,
    config: &JournalConfig,
    lenient_tail: bool,
    mut on_record: impl FnMut(RecordView<'_>),
) -> Result<Recovered, JournalError> {
    let segment_count = device.segment_count();
    let segment_bytes = device.segment_bytes();
    let mut headers: Vec<Option<SegmentHeader>> = Vec::with_capacity(segment_count as usize);
    for segment in 0..segment_count {
        let block = device
            .read(segment, 0, BLOCK_BYTES)
            .await
            .map_err(JournalError::Read)?;
        headers.push(SegmentHeader::decode(block.as_ref()));
    }
    let mut segments = vec![SegmentState::default(); segment_count as usize];
    let newest = headers
        .iter()
        .enumerate()
        .filter_map(|(segment, header)| header.map(|header| (segment as u32, header)))
        .max_by_key(|(_, header)| header.generation);
    let Some((newest_segment, newest_header)) = newest else {
        // Nothing written yet: a fresh journal.
        return Ok(Recovered {
            report: RecoveryReport {
                journal_id: config.journal_id,
                ..RecoveryReport::default()
            },
            segments,
            live: VecDeque::new(),
            write_offset: 0,
            next_sequence: 1,
            chain: 0,
            generation: 0,
            journal_id: config.journal_id,
        });
    };
    let journal_id = newest_header.journal_id;
    for (segment, header) in headers.iter().enumerate() {
        let Some(header) = header else { continue };
        if header.journal_id != journal_id {
            return Err(corrupt(
                segment as u32,
                0,
                format!(
                    "segment belongs to journal {:#x}, not {journal_id:#x}",
                    header.journal_id
                ),
            ));
        }
        if header.shard != config.shard {
            return Err(corrupt(
                segment as u32,
                0,
                format!(
                    "journal of shard {} opened by shard {}",
                    header.shard, config.shard
                ),
            ));
        }
        if header.segment_bytes != segment_bytes {
            return Err(corrupt(
                segment as u32,
                0,
                format!(
                    "segment size {} but the device has {segment_bytes}",
                    header.segment_bytes
                ),
            ));
        }
    }
    // The live segments are generations floor..=newest, one segment each.
    let floor = newest_header.floor_generation;
    let mut by_generation: BTreeMap<u64, u32> = BTreeMap::new();
    for (segment, header) in headers.iter().enumerate() {
        if let Some(header) = header {
            if header.generation >= floor {
                if let Some(other) = by_generation.insert(header.generation, segment as u32) {
                    return Err(corrupt(
                        segment as u32,
                        0,
                        format!(
                            "segments {other} and {segment} both claim generation {}",
                            header.generation
                        ),
                    ));
                }
            }
        }
    }
    for generation in floor..=newest_header.generation {
        if !by_generation.contains_key(&generation) {
            return Err(corrupt(
                newest_segment,
                0,
                format!("live segment of generation {generation} (floor {floor}) is missing"),
            ));
        }
    }
    let live: VecDeque<u32> = by_generation.values().copied().collect();
    let mut report = RecoveryReport {
        journal_id,
        ..RecoveryReport::default()
    };
    let first_header = headers[live[0] as usize].expect("live segments have headers");
    let mut next_sequence = first_header.first_sequence;
    let mut chain = first_header.chain;
    let mut write_offset = SEGMENT_HEADER_BYTES as u64;
    for (position, &segment) in live.iter().enumerate() {
        let header = headers[segment as usize].expect("live segments have headers");
        if header.first_sequence != next_sequence || header.chain != chain {
            return Err(corrupt(
                segment,
                0,
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
        let bytes = contents.as_ref();
        let state = &mut segments[segment as usize];
        state.generation = header.generation;
        state.first_sequence = header.first_sequence;
        state.last_sequence = header.first_sequence - 1;
        let end = scan_segment(
            bytes,
            segment,
            &header,
            &mut next_sequence,
            &mut chain,
            state,
            &mut report,
            &mut on_record,
        )?;
        let newest = position + 1 == live.len();
        let later_batch = find_batch_after(bytes, end.offset, &header);
        if newest {
            write_offset = end.offset;
            match (later_batch, &end.damaged_batch) {
                (Some((offset, dropped)), reason) if lenient_tail => {
                    let _ = offset;
                    report.tail_cut = Some(TailCut {
                        segment,
                        offset: end.offset,
                        reason: reason
                            .clone()
                            .unwrap_or_else(|| "unsynced writes lost".into()),
                        batches_dropped: dropped,
                    });
                }
                (Some((offset, _)), _) => {
                    return Err(corrupt(
                        segment,
                        end.offset,
                        format!(
                            "bad batch at offset {} followed by a valid batch at offset {offset}: not a torn tail{}",
                            end.offset,
                            end.damaged_batch.as_ref().map(|reason| format!(" ({reason})")).unwrap_or_default()
                        ),
                    ));
                }
                (None, Some(reason)) => {
                    report.tail_cut = Some(TailCut {
                        segment,
                        offset: end.offset,
                        reason: reason.clone(),
                        batches_dropped: 0,
                    });
                }
                (None, None) => {}
            }
        } else if let Some((offset, _)) = later_batch {
            return Err(corrupt(
                segment,
                end.offset,
                format!(
                    "segment ends at offset {} but a valid batch follows at offset {offset}",
                    end.offset
                ),
            ));
        }
        // A damaged batch at the end of an older segment is allowed only if the
        // next segment continues the log exactly (checked at the loop's top):
        // it is a tail that was torn, recovered and then rotated past.
    }
    report.first_sequence = if report.records > 0 {
        first_header.first_sequence
    } else {
        0
    };
    report.last_sequence = next_sequence - 1;
    if report.records == 0 {
        report.last_sequence = 0;
    }
    Ok(Recovered {
        report,
        segments,
        live,
        write_offset,
        next_sequence,
        chain,
        generation: newest_header.generation,
        journal_id,
    })
}

/// Replays the accepted batches of one segment; returns where they end.
#[allow(clippy::too_many_arguments)]
fn scan_segment(
    bytes: &[u8],
    segment: u32,
    header: &SegmentHeader,
    next_sequence: &mut u64,
    chain: &mut u32,
    state: &mut SegmentState,
    report: &mut RecoveryReport,
    on_record: &mut impl FnMut(RecordView<'_>),
) -> Result<SegmentEnd, JournalError> {
    let mut offset = SEGMENT_HEADER_BYTES;
    while offset + BLOCK_BYTES <= bytes.len() {
        let Some(batch) = BatchHeader::decode(&bytes[offset..offset + BATCH_HEADER_BYTES]) else {
            return Ok(SegmentEnd {
                offset: offset as u64,
                damaged_batch: None,
            });
        };
        if batch.generation != header.generation || batch.journal_id != header.journal_id {
            // Left from an earlier use of this segment.
            return Ok(SegmentEnd {
                offset: offset as u64,
                damaged_batch: None,
            });
        }
        if batch.offset != offset as u64 {
            return Err(corrupt(
                segment,
                offset as u64,
                format!(
                    "batch written for offset {} found at offset {offset} (misdirected write)",
                    batch.offset
                ),
            ));
        }
        let batch_end = offset + batch.batch_bytes as usize;
        if batch_end > bytes.len() {
            return Ok(SegmentEnd {
                offset: offset as u64,
                damaged_batch: Some(format!(
                    "batch of {} bytes runs past the segment end",
                    batch.batch_bytes
                )),
            });
        }
        let records = &bytes[offset + BATCH_HEADER_BYTES
            ..offset + BATCH_HEADER_BYTES + batch.records_bytes as usize];
        if crate::format::checksum(records) != batch.records_checksum {
            return Ok(SegmentEnd {
                offset: offset as u64,
                damaged_batch: Some("records checksum mismatch".into()),
            });
        }
        if batch.first_sequence != *next_sequence {
            return Err(corrupt(
                segment,
                offset as u64,
                format!(
                    "batch starts at sequence {} but the log continues at {}",
                    batch.first_sequence, next_sequence
                ),
            ));
        }
        // Verify every record before handing any out: a batch is all or nothing.
        let mut position = 0;
        let mut expected_sequence = *next_sequence;
        let mut expected_chain = *chain;
        for _ in 0..batch.record_count {
            let Some((view, used)) = RecordHeader::decode(&records[position..]) else {
                return Err(corrupt(
                    segment,
                    (offset + BATCH_HEADER_BYTES + position) as u64,
                    "record fails its checksum inside a valid batch",
                ));
            };
            if view.header.sequence != expected_sequence || view.header.chain != expected_chain {
                return Err(corrupt(
                    segment,
                    (offset + BATCH_HEADER_BYTES + position) as u64,
                    format!(
                        "record {} breaks the chain (expected sequence {expected_sequence})",
                        view.header.sequence
                    ),
                ));
            }
            expected_sequence += 1;
            expected_chain = view.checksum;
            position += used;
        }
        if position != records.len() {
            return Err(corrupt(
                segment,
                offset as u64,
                "batch record count and size disagree",
            ));
        }
        let mut position = 0;
        for _ in 0..batch.record_count {
            let (view, used) = RecordHeader::decode(&records[position..]).expect("verified above");
            let highest = state
                .groups
                .entry(view.header.group)
                .or_insert(view.header.index);
            *highest = (*highest).max(view.header.index);
            on_record(view);
            position += used;
        }
        *next_sequence = expected_sequence;
        *chain = expected_chain;
        state.last_sequence = expected_sequence - 1;
        report.batches += 1;
        report.records += u64::from(batch.record_count);
        offset = batch_end;
    }
    Ok(SegmentEnd {
        offset: offset as u64,
        damaged_batch: None,
    })
}

/// The first valid batch header of this segment's generation after `from`,
/// and how many there are: any means the bad batch at `from` was not the tail.
fn find_batch_after(bytes: &[u8], from: u64, header: &SegmentHeader) -> Option<(u64, u64)> {
    let mut found = None;
    let mut count = 0;
    let mut offset = from as usize + BLOCK_BYTES;
    while offset + BLOCK_BYTES <= bytes.len() {
        if let Some(batch) = BatchHeader::decode(&bytes[offset..offset + BATCH_HEADER_BYTES]) {
            if batch.generation == header.generation && batch.journal_id == header.journal_id {
                found.get_or_insert(offset as u64);
                count += 1;
            }
        }
        offset += BLOCK_BYTES;
    }
    found.map(|offset| (offset, count))
}
