//! Journal tests on the in-memory fault-injecting device: group commit,
//! rotation and recycling, poisoning, and the crash property: after any crash
//! every acknowledged record is recovered byte-identical and nothing corrupt
//! is accepted.

use std::collections::BTreeMap;

use futures_lite::future::block_on;

use super::*;
use crate::format::BLOCK_BYTES;
use crate::memory::{Faults, MemoryDevice, Random};

const KIB: u64 = 1024;

fn config(batch_bytes_max: usize) -> JournalConfig {
    JournalConfig {
        shard: 0,
        batch_bytes_max,
        sync: SyncPolicy::Always,
        journal_id: 0xabc,
        formatted_before: false,
    }
}

/// What reopening gives a test: the journal, the report, the records replayed.
type Reopened = (
    Journal<MemoryDevice>,
    RecoveryReport,
    BTreeMap<u64, Remembered>,
);

/// A record as the test remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Remembered {
    kind: u8,
    group: u64,
    term: u64,
    index: u64,
    body: Vec<u8>,
}

fn open(
    device: MemoryDevice,
    config: JournalConfig,
) -> (
    Journal<MemoryDevice>,
    RecoveryReport,
    BTreeMap<u64, Remembered>,
) {
    let mut replayed = BTreeMap::new();
    let (journal, report) = block_on(Journal::open(device, config, |view| {
        let previous = replayed.insert(
            view.header.sequence,
            Remembered {
                kind: view.header.kind,
                group: view.header.group,
                term: view.header.term,
                index: view.header.index,
                body: view.body.to_vec(),
            },
        );
        assert!(
            previous.is_none(),
            "sequence {} replayed twice",
            view.header.sequence
        );
    }))
    .expect("journal opens");
    (journal, report, replayed)
}

fn append(journal: &Journal<MemoryDevice>, record: &Remembered) -> u64 {
    journal
        .try_append(NewRecord {
            kind: record.kind,
            group: record.group,
            term: record.term,
            index: record.index,
            body: &record.body,
        })
        .expect("room in the open batch")
}

fn record(group: u64, index: u64, body_bytes: usize) -> Remembered {
    Remembered {
        kind: 1,
        group,
        term: 1,
        index,
        body: (0..body_bytes)
            .map(|i| (i as u64 * 31 + index) as u8)
            .collect(),
    }
}

#[test]
fn records_survive_a_clean_reopen() {
    let device = MemoryDevice::new(4, 64 * KIB, 1);
    let (journal, report, replayed) = open(device, config(16 * KIB as usize));
    assert_eq!(report.records, 0);
    assert!(replayed.is_empty());
    let mut written = BTreeMap::new();
    for index in 1..=50 {
        let record = record(7, index, (index as usize * 13) % 700);
        let sequence = append(&journal, &record);
        written.insert(sequence, record);
        if index % 10 == 0 {
            block_on(journal.flush()).unwrap();
        }
    }
    assert_eq!(journal.durable_sequence(), 50);
    let device = journal.device().crash(99);
    let (journal, report, replayed) = open(device, config(16 * KIB as usize));
    assert_eq!(replayed, written);
    assert_eq!(
        (report.first_sequence, report.last_sequence, report.records),
        (1, 50, 50)
    );
    assert_eq!(report.tail_cut, None);
    assert_eq!(journal.next_sequence(), 51);
}

#[test]
fn group_commit_puts_concurrent_appends_in_one_batch() {
    let device = MemoryDevice::new(4, 256 * KIB, 2);
    let (journal, _, _) = open(device, config(64 * KIB as usize));
    for index in 1..=40 {
        append(&journal, &record(1, index, 100));
    }
    assert_eq!(block_on(journal.flush()).unwrap(), Some(40));
    assert_eq!(journal.stats().flushes, 1);
    assert_eq!(journal.stats().records, 40);
    // Nothing left: a flush is a no-op.
    assert_eq!(block_on(journal.flush()).unwrap(), None);
}

#[test]
fn waits_complete_when_their_batch_is_durable() {
    let device = MemoryDevice::new(4, 64 * KIB, 3);
    let (journal, _, _) = open(device, config(16 * KIB as usize));
    let first = append(&journal, &record(1, 1, 10));
    block_on(async {
        let wait = journal.wait_durable(first);
        let flush = journal.flush();
        let (waited, flushed) = futures_lite::future::zip(wait, flush).await;
        waited.unwrap();
        assert_eq!(flushed.unwrap(), Some(first));
    });
}

#[test]
fn a_full_batch_makes_appends_wait() {
    let device = MemoryDevice::new(4, 64 * KIB, 4);
    let (journal, _, _) = open(device, config(2 * BLOCK_BYTES));
    let mut appended = 0;
    loop {
        match journal.try_append(NewRecord {
            kind: 0,
            group: 1,
            term: 1,
            index: appended + 1,
            body: &[9u8; 100],
        }) {
            Ok(_) => appended += 1,
            Err(AppendError::Busy) => break,
            Err(other) => panic!("{other:?}"),
        }
    }
    assert!(appended > 10);
    block_on(journal.flush()).unwrap();
    assert!(journal
        .try_append(NewRecord {
            kind: 0,
            group: 1,
            term: 1,
            index: 999,
            body: &[9u8; 100]
        })
        .is_ok());
    let too_big = vec![0u8; BLOCK_BYTES];
    assert!(BLOCK_BYTES > journal.config().body_bytes_max());
    assert!(matches!(
        journal.try_append(NewRecord {
            kind: 0,
            group: 1,
            term: 1,
            index: 1000,
            body: &too_big
        }),
        Err(AppendError::Failed(JournalError::TooLarge { .. }))
    ));
}

#[test]
fn segments_rotate_and_recycle_fifo_on_checkpoints() {
    // 4 segments of 20 KiB: 4 blocks after the header, two batches of two
    // blocks (data and parity) each.
    let device = MemoryDevice::new(4, 20 * KIB, 5);
    let (journal, _, _) = open(device, config(2 * BLOCK_BYTES));
    let mut index = 0;
    let mut flush_one = |journal: &Journal<MemoryDevice>| {
        index += 1;
        append(journal, &record(1, index, 2000));
        block_on(journal.flush()).unwrap()
    };
    for _ in 0..8 {
        assert!(flush_one(&journal).is_some());
    }
    assert_eq!(journal.live_segments().len(), 4);
    // Full: the next flush cannot place its batch.
    assert_eq!(flush_one(&journal), None);
    // Checkpointing the first segment's records frees it (only it: FIFO).
    journal.checkpoint(1, 2);
    assert_eq!(journal.live_segments().len(), 3);
    assert!(block_on(journal.flush()).unwrap().is_some());
    assert_eq!(journal.live_segments().len(), 4);
    assert_eq!(journal.stats().segments_recycled, 1);
    // Reopen: everything since the oldest live segment is replayed.
    let device = journal.device().crash(1);
    let (_journal, report, replayed) = open(device, config(2 * BLOCK_BYTES));
    assert_eq!(report.live_segments.len(), 4);
    assert_eq!(replayed.keys().next(), Some(&3));
    assert_eq!(replayed.keys().last(), Some(&9));
}

#[test]
fn an_io_error_poisons_the_journal() {
    let device = MemoryDevice::new(4, 64 * KIB, 6);
    device.set_faults(Faults {
        fail_write: Some(2),
        ..Faults::default()
    });
    let (journal, _, _) = open(device, config(16 * KIB as usize));
    let first = append(&journal, &record(1, 1, 10));
    // Write 1 is the segment header, write 2 the batch: it fails.
    assert!(matches!(
        block_on(journal.flush()),
        Err(JournalError::Poisoned(_))
    ));
    assert!(matches!(
        block_on(journal.wait_durable(first)),
        Err(JournalError::Poisoned(_))
    ));
    assert!(matches!(
        journal.try_append(NewRecord {
            kind: 0,
            group: 1,
            term: 1,
            index: 2,
            body: b"x"
        }),
        Err(AppendError::Failed(JournalError::Poisoned(_)))
    ));
    assert!(matches!(
        block_on(journal.flush()),
        Err(JournalError::Poisoned(_))
    ));
}

/// A journal with batches of several shapes in segment 0, crashed (so the
/// image is durable): `(device, written records, batch offsets and sizes)`.
fn journal_with_batches() -> (MemoryDevice, BTreeMap<u64, Remembered>, Vec<(u64, u64)>) {
    let device = MemoryDevice::new(4, 128 * KIB, 7);
    let (journal, _, _) = open(device, config(32 * KIB as usize));
    let mut written = BTreeMap::new();
    let mut batches = Vec::new();
    let mut offset = BLOCK_BYTES as u64;
    let mut index = 0;
    // One-block, two-block and five-block batches, twice over.
    for body_bytes in [300usize, 6000, 18_000, 100, 5000, 17_000] {
        index += 1;
        let record = record(1, index, body_bytes);
        written.insert(append(&journal, &record), record);
        block_on(journal.flush()).unwrap();
        let bytes = crate::format::batch_bytes(crate::format::record_bytes(body_bytes)) as u64;
        batches.push((offset, bytes));
        offset += bytes;
    }
    (journal.device().crash(1), written, batches)
}

fn reopen(device: MemoryDevice) -> Result<Reopened, JournalError> {
    let mut replayed = BTreeMap::new();
    block_on(Journal::open(device, config(32 * KIB as usize), |view| {
        replayed.insert(
            view.header.sequence,
            Remembered {
                kind: view.header.kind,
                group: view.header.group,
                term: view.header.term,
                index: view.header.index,
                body: view.body.to_vec(),
            },
        );
    }))
    .map(|(journal, report)| (journal, report, replayed))
}

/// Rule 4: any one damaged block of any batch, the last one included
/// (header block, a middle block, the footer's block, the parity block),
/// is rebuilt: every record comes back identical, the repair is reported
/// and written back (a second open finds nothing to repair).
#[test]
fn one_damaged_block_of_any_batch_is_rebuilt_from_parity() {
    let (device, written, batches) = journal_with_batches();
    let image = device.contents(0);
    for &(offset, bytes) in &batches {
        for block in (offset..offset + bytes).step_by(BLOCK_BYTES) {
            for damage in ["flip", "zero"] {
                let damaged = MemoryDevice::new(4, 128 * KIB, 1);
                block_on(damaged.write(0, 0, crate::device::HeapBuffer(image.clone()), true))
                    .unwrap();
                match damage {
                    "flip" => {
                        damaged.flip_bit(0, block, block + BLOCK_BYTES as u64);
                    }
                    _ => damaged.overwrite(0, block, &[0u8; BLOCK_BYTES]),
                }
                let (journal, report, replayed) = reopen(damaged).unwrap_or_else(|error| {
                    panic!("{damage} block {block} of batch {offset}: {error}")
                });
                assert_eq!(
                    replayed, written,
                    "{damage} block {block} of batch {offset}"
                );
                assert_eq!(report.tail_cut, None, "{damage} block {block}");
                let repaired = report.repairs.iter().any(|repair| repair.offset == block);
                // A flip in the zero padding of a data block still changes
                // the records checksum only if it hits records; padding and
                // parity flips are found by the parity check.
                assert!(
                    repaired,
                    "{damage} block {block} of batch {offset}: {:?}",
                    report.repairs
                );
                let (_, again, replayed) = reopen(journal.device().crash(2)).unwrap();
                assert!(
                    again.repairs.is_empty(),
                    "written back: {:?}",
                    again.repairs
                );
                assert_eq!(replayed, written);
            }
        }
    }
}

/// Rules 4 and 5: two damaged blocks cannot be rebuilt. Before the tail
/// that is corruption named by segment and offset, never a silent cut.
#[test]
fn two_damaged_blocks_before_the_tail_are_corruption() {
    let (device, written, batches) = journal_with_batches();
    let (offset, _) = batches[2];
    device.overwrite(0, offset, &[0u8; BLOCK_BYTES]);
    device.overwrite(0, offset + 2 * BLOCK_BYTES as u64, &[0u8; BLOCK_BYTES]);
    let cut = match reopen(device.crash(1))
        .err()
        .expect("corruption is an error")
    {
        JournalError::Corrupt {
            file,
            segment,
            offset: at,
            reason,
            cut,
        } => {
            assert_eq!((segment, at), (0, offset), "{reason}");
            assert_eq!(file, "segment 0");
            assert!(reason.contains("not a torn tail"), "{reason}");
            cut.expect("a cut is offered")
        }
        other => panic!("expected corruption, got {other:?}"),
    };
    assert_eq!(cut, crate::recovery::Cut::At { segment: 0, offset });
    // Only an explicit cut discards: the records before the damage stay.
    let config = config(32 * KIB as usize);
    let report = block_on(crate::recovery::cut(&device, &config, &cut)).unwrap();
    assert_eq!(report.zeroed, vec![(0, offset)]);
    let (_, report, replayed) = reopen(device.crash(2)).expect("opens after the cut");
    let kept: BTreeMap<u64, Remembered> = written.into_iter().take(2).collect();
    assert_eq!(replayed, kept);
    assert_eq!(report.tail_cut, None);
}

/// Rule 3 with a cut: a missing middle generation is corruption; the cut
/// zeroes every segment from that generation on, whole.
#[test]
fn a_cut_of_generations_zeroes_their_segments_whole() {
    let device = MemoryDevice::new(4, 20 * KIB, 12);
    let (journal, _, _) = open(device, config(2 * BLOCK_BYTES));
    let mut written = BTreeMap::new();
    for index in 1..=6 {
        let record = record(1, index, 2000);
        written.insert(append(&journal, &record), record);
        assert!(block_on(journal.flush()).unwrap().is_some());
    }
    // Two batches per segment: segments 0, 1, 2 are generations 1, 2, 3.
    let device = journal.device().crash(1);
    device.overwrite(1, 0, &vec![0u8; 20 * KIB as usize]);
    let cut = match block_on(Journal::open(
        device.crash(2),
        config(2 * BLOCK_BYTES),
        |_| {},
    ))
    .err()
    {
        Some(JournalError::Corrupt { cut: Some(cut), .. }) => cut,
        other => panic!("{other:?}"),
    };
    assert_eq!(cut, crate::recovery::Cut::Generations { from: 2 });
    let report = block_on(crate::recovery::cut(
        &device,
        &config(2 * BLOCK_BYTES),
        &cut,
    ))
    .unwrap();
    assert_eq!(report.zeroed, vec![(2, 0)]);
    assert!(device.contents(2).iter().all(|&byte| byte == 0));
    let (journal, _, replayed) = reopen_with(device.crash(3), config(2 * BLOCK_BYTES)).unwrap();
    let kept: BTreeMap<u64, Remembered> = written.into_iter().take(2).collect();
    assert_eq!(replayed, kept);
    assert_eq!(journal.next_sequence(), 3);
}

/// Rule 5: the last batch with two or more unreadable blocks and nothing
/// after it is a torn write (never acknowledged): cut, everything before
/// it intact, and the journal writes on from there.
#[test]
fn a_torn_last_batch_is_cut_and_writing_goes_on() {
    let (device, mut written, batches) = journal_with_batches();
    let (offset, bytes) = *batches.last().unwrap();
    // The write landed its first block only.
    for block in (offset + BLOCK_BYTES as u64..offset + bytes).step_by(BLOCK_BYTES) {
        device.overwrite(0, block, &[0u8; BLOCK_BYTES]);
    }
    let last = *written.keys().last().unwrap();
    written.remove(&last);
    let (journal, report, replayed) = reopen(device).expect("a torn tail is not corruption");
    assert_eq!(replayed, written);
    let cut = report.tail_cut.expect("the cut is reported");
    assert_eq!((cut.segment, cut.offset), (0, offset));
    let record = record(2, 1, 50);
    let sequence = append(&journal, &record);
    assert_eq!(sequence, last);
    block_on(journal.flush()).unwrap();
    written.insert(sequence, record);
    let (_, report, replayed) = reopen(journal.device().crash(3)).unwrap();
    assert_eq!(replayed, written);
    assert_eq!(
        report.tail_cut, None,
        "the stale remains of the torn batch are ignored"
    );
}

/// Rule 5: a zeroed one-block batch at the tail is not a clean end: its
/// parity block is a copy and still names it.
#[test]
fn a_zeroed_last_one_block_batch_is_rebuilt_not_lost() {
    let device = MemoryDevice::new(4, 64 * KIB, 7);
    let (journal, _, _) = open(device, config(16 * KIB as usize));
    let mut written = BTreeMap::new();
    for index in 1..=3 {
        let record = record(1, index, 200);
        written.insert(append(&journal, &record), record);
        block_on(journal.flush()).unwrap();
    }
    let device = journal.device().crash(1);
    // Batches at 4096, 12288, 20480 (a data block and its parity each).
    device.overwrite(0, 20480, &[0u8; BLOCK_BYTES]);
    let (_, report, replayed) = reopen_with(device, config(16 * KIB as usize)).unwrap();
    assert_eq!(replayed, written);
    assert_eq!(report.repairs.len(), 1, "{:?}", report.repairs);
}

fn reopen_with(device: MemoryDevice, config: JournalConfig) -> Result<Reopened, JournalError> {
    let mut replayed = BTreeMap::new();
    block_on(Journal::open(device, config, |view| {
        replayed.insert(
            view.header.sequence,
            Remembered {
                kind: view.header.kind,
                group: view.header.group,
                term: view.header.term,
                index: view.header.index,
                body: view.body.to_vec(),
            },
        );
    }))
    .map(|(journal, report)| (journal, report, replayed))
}

/// Rule 2: a segment header that fails its checksum (a flipped bit in any
/// field or the checksum, or the block zeroed) is rebuilt from the
/// segment's first batch, for the newest segment and an older live one;
/// nothing is lost and the journal is not formatted afresh.
#[test]
fn a_damaged_segment_header_is_rebuilt_from_its_first_batch() {
    let device = MemoryDevice::new(3, 16 * KIB, 8);
    let (journal, _, _) = open(device, config(2 * BLOCK_BYTES));
    let mut written = BTreeMap::new();
    // One batch of two blocks per segment fits (3 blocks after the header):
    // segments 0, 1 and 2 get one and then one more each... up to full.
    for index in 1..=3 {
        let record = record(1, index, 1000);
        written.insert(append(&journal, &record), record);
        assert!(block_on(journal.flush()).unwrap().is_some());
    }
    assert_eq!(journal.live_segments(), vec![0, 1, 2]);
    let image = journal.device().crash(1);
    for segment in 0..3 {
        for damage in [
            (8usize, 0x01u8),
            (32, 0x10),
            (40, 0x80),
            (56, 0x02),
            (64, 0x01),
            (0, 0xff),
        ] {
            let damaged = MemoryDevice::new(3, 16 * KIB, 1);
            for copy in 0..3 {
                block_on(damaged.write(
                    copy,
                    0,
                    crate::device::HeapBuffer(image.contents(copy)),
                    true,
                ))
                .unwrap();
            }
            let mut header = image.contents(segment)[..BLOCK_BYTES].to_vec();
            if damage.1 == 0xff {
                header.fill(0);
            } else {
                header[damage.0] ^= damage.1;
            }
            damaged.overwrite(segment, 0, &header);
            let (journal, report, replayed) = reopen_with(damaged, config(2 * BLOCK_BYTES))
                .unwrap_or_else(|error| panic!("segment {segment} damage {damage:?}: {error}"));
            assert_eq!(replayed, written, "segment {segment} damage {damage:?}");
            assert!(
                report.repairs.iter().any(|repair| repair.segment == segment
                    && repair.kind == crate::recovery::RepairKind::SegmentHeader),
                "{:?}",
                report.repairs
            );
            assert_eq!(report.journal_id, 0xabc);
            let (_, again, replayed) =
                reopen_with(journal.device().crash(2), config(2 * BLOCK_BYTES)).unwrap();
            assert!(again.repairs.is_empty(), "{:?}", again.repairs);
            assert_eq!(replayed, written, "after the header was written back");
        }
    }
}

/// Rule 2: a journal is fresh only when no segment holds anything of it;
/// segments whose only content is an unwritten header are unused.
#[test]
fn only_an_empty_journal_is_fresh() {
    let device = MemoryDevice::new(3, 16 * KIB, 9);
    let (journal, report, _) = open(device, config(2 * BLOCK_BYTES));
    assert_eq!((report.records, report.live_segments.len()), (0, 0));
    let record = record(1, 1, 10);
    append(&journal, &record);
    block_on(journal.flush()).unwrap();
    // Zeroing the only segment's header leaves its batch: not fresh.
    let device = journal.device().crash(1);
    device.overwrite(0, 0, &[0u8; BLOCK_BYTES]);
    let (_, report, replayed) = reopen_with(device, config(2 * BLOCK_BYTES)).unwrap();
    assert_eq!(replayed.len(), 1);
    assert_eq!(report.live_segments, vec![(0, 1)]);
}

/// A fresh journal writes its first segment header at open, so a journal
/// the store knows was formatted and that now holds nothing (erased,
/// zeroed, replaced by an empty one) is refused, never started afresh.
#[test]
fn an_erased_journal_is_told_apart_from_a_fresh_one() {
    let device = MemoryDevice::new(3, 16 * KIB, 11);
    let (journal, report, _) = open(device, config(2 * BLOCK_BYTES));
    assert!(report.live_segments.is_empty(), "recovered nothing");
    // The header is durable before the first record.
    let (empty, report, replayed) =
        reopen_with(journal.device().crash(1), config(2 * BLOCK_BYTES)).unwrap();
    assert_eq!(report.live_segments, vec![(0, 1)]);
    assert!(replayed.is_empty());
    assert_eq!(empty.next_sequence(), 1);
    // Records continue in that segment, after its header.
    append(&empty, &record(1, 1, 10));
    block_on(empty.flush()).unwrap();
    let mut formatted = config(2 * BLOCK_BYTES);
    formatted.formatted_before = true;
    let (_, report, replayed) = reopen_with(empty.device().crash(2), formatted.clone()).unwrap();
    assert_eq!(report.live_segments, vec![(0, 1)]);
    assert_eq!(replayed.len(), 1);
    assert_eq!(replayed[&1].body, record(1, 1, 10).body);
    // Zeroed whole: refused when the store knows it was formatted.
    let device = empty.device().crash(3);
    for segment in 0..3 {
        device.overwrite(segment, 0, &vec![0u8; 16 * KIB as usize]);
    }
    match block_on(Journal::open(device.crash(4), formatted, |_| {})).err() {
        Some(JournalError::Erased { journal_id }) => assert_eq!(journal_id, 0xabc),
        other => panic!("{other:?}"),
    }
    // Not known to be formatted (a new store): a fresh journal again.
    let (_, report, _) = reopen_with(device, config(2 * BLOCK_BYTES)).unwrap();
    assert!(report.live_segments.is_empty());
}

/// Rule 1: segments of another journal (another server's, or a journal
/// directory reused) are refused by name, never reformatted.
#[test]
fn another_journals_segments_are_refused() {
    let device = MemoryDevice::new(3, 16 * KIB, 10);
    let (journal, _, _) = open(device, config(2 * BLOCK_BYTES));
    append(&journal, &record(1, 1, 10));
    block_on(journal.flush()).unwrap();
    let mut other = config(2 * BLOCK_BYTES);
    other.journal_id = 0xdef;
    let device = journal.device().crash(1);
    match block_on(Journal::open(device, other.clone(), |_| {})).err() {
        Some(JournalError::Foreign {
            found, expected, ..
        }) => {
            assert_eq!((found, expected), (0xabc, 0xdef))
        }
        other => panic!("{other:?}"),
    }
    // The same with the header damaged: its first batch names the journal.
    let device = journal.device().crash(1);
    device.overwrite(0, 0, &[0u8; BLOCK_BYTES]);
    assert!(matches!(
        block_on(Journal::open(device, other, |_| {})).err(),
        Some(JournalError::Foreign { .. })
    ));
}

/// Rule 1: a journal written in another format version is refused by name
/// (taking its segments for unused ones would format over its records).
#[test]
fn another_format_version_is_refused() {
    let device = MemoryDevice::new(3, 16 * KIB, 11);
    let (journal, _, _) = open(device, config(2 * BLOCK_BYTES));
    append(&journal, &record(1, 1, 10));
    block_on(journal.flush()).unwrap();
    let device = journal.device().crash(1);
    let mut header = device.contents(0)[..BLOCK_BYTES].to_vec();
    header[8] = 1;
    let sum = crate::format::checksum(&header[..64]);
    header[64..68].copy_from_slice(&sum.to_le_bytes());
    device.overwrite(0, 0, &header);
    match block_on(Journal::open(device, config(2 * BLOCK_BYTES), |_| {})).err() {
        Some(JournalError::Version { version, .. }) => assert_eq!(version, 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_misdirected_write_is_caught() {
    let device = MemoryDevice::new(2, 64 * KIB, 8);
    // Write 1: header, 2: batch, 3: batch (misdirected), 4: batch.
    device.set_faults(Faults {
        misdirect_write: Some(3),
        ..Faults::default()
    });
    let (journal, _, _) = open(device, config(2 * BLOCK_BYTES));
    for index in 1..=3 {
        append(&journal, &record(1, index, 100));
        block_on(journal.flush()).unwrap();
    }
    let device = journal.device().crash(4);
    let result = block_on(Journal::open(device, config(2 * BLOCK_BYTES), |_| {}));
    assert!(
        matches!(result, Err(JournalError::Corrupt { .. })),
        "{:?}",
        result.err()
    );
}

#[test]
fn sync_never_cuts_a_tail_with_lost_writes() {
    let device = MemoryDevice::new(2, 64 * KIB, 9);
    let mut never = config(2 * BLOCK_BYTES);
    never.sync = SyncPolicy::Never;
    let (journal, _, _) = open(device, never.clone());
    for index in 1..=5 {
        append(&journal, &record(1, index, 100));
        block_on(journal.flush()).unwrap();
    }
    for seed in 0..50 {
        let crashed = journal.device().crash(seed);
        let mut replayed = Vec::new();
        let (_, report) = block_on(Journal::open(crashed, never.clone(), |view| {
            replayed.push(view.header.sequence)
        }))
        .expect("sync = never never reports lost unsynced writes as corruption");
        assert_eq!(
            replayed,
            (1..=replayed.len() as u64).collect::<Vec<_>>(),
            "a prefix survives"
        );
        if replayed.len() < 5 {
            assert!(report.tail_cut.is_some() || report.records < 5);
        }
    }
}

/// One seed of the crash property: random appends, flushes and checkpoints,
/// the process dies at a random write, the disk keeps, drops or tears what
/// was not yet durable; then recover and check, three times over.
#[derive(Debug, Default)]
struct Coverage {
    cycles: u64,
    acked_records_checked: u64,
    tail_cuts: u64,
    rotations: u64,
    recycled: u64,
}

fn crash_property(seed: u64, coverage: &mut Coverage, lying_disk: bool) {
    let mut random = Random::new(seed);
    let segment_count = 3 + random.below(3) as u32;
    let segment_bytes = (4 + random.below(12)) * 4 * KIB;
    let batch_bytes_max =
        ((2 + random.below(3)) as usize * BLOCK_BYTES).min(segment_bytes as usize - BLOCK_BYTES);
    let config = config(batch_bytes_max);
    let mut device = MemoryDevice::new(segment_count, segment_bytes, seed);
    device.set_faults(Faults {
        lie_about_durability: lying_disk,
        ..Faults::default()
    });
    // What every group has appended (index -> record), and what is acked.
    let mut appended: BTreeMap<u64, Remembered> = BTreeMap::new();
    let mut acked_sequence = 0u64;
    let mut checkpoints: BTreeMap<u64, u64> = BTreeMap::new();
    let mut next_index: BTreeMap<u64, u64> = BTreeMap::new();
    for cycle in 0..3 {
        let (journal, report, replayed) = open(device, config.clone());
        coverage.cycles += 1;
        coverage.tail_cuts += u64::from(report.tail_cut.is_some());
        coverage.acked_records_checked += appended.range(..=acked_sequence).count() as u64;
        // Every acknowledged record not yet checkpointed is back, identical.
        for (sequence, record) in appended.range(..=acked_sequence) {
            let checkpointed = checkpoints
                .get(&record.group)
                .is_some_and(|&done| done >= record.index);
            match replayed.get(sequence) {
                Some(found) => assert_eq!(found, record, "seed {seed} cycle {cycle}: sequence {sequence} differs"),
                None => assert!(
                    checkpointed,
                    "seed {seed} cycle {cycle}: acked sequence {sequence} ({record:?}) lost; report {report:?}"
                ),
            }
        }
        // Whatever else came back was appended (never invented), and the
        // replay is one contiguous run.
        for (sequence, found) in &replayed {
            assert_eq!(
                appended.get(sequence),
                Some(found),
                "seed {seed}: sequence {sequence} was never appended"
            );
        }
        if let (Some(first), Some(last)) = (replayed.keys().next(), replayed.keys().last()) {
            assert_eq!(
                replayed.len() as u64,
                last - first + 1,
                "seed {seed}: replay has a gap"
            );
        }
        // The log is now what was replayed: later sequences will be reused.
        let recovered_last = journal.next_sequence() - 1;
        appended.retain(|&sequence, _| sequence <= recovered_last);
        acked_sequence = recovered_last;
        next_index.clear();
        for record in appended.values() {
            let next = next_index.entry(record.group).or_insert(0);
            *next = (*next).max(record.index);
        }
        for (&group, &index) in &checkpoints {
            journal.checkpoint(group, index);
        }
        let dies_at = journal.device().writes() + 1 + random.below(12);
        journal.device().set_faults(Faults {
            die_at_write: Some(dies_at),
            lie_about_durability: lying_disk,
            ..Faults::default()
        });
        while !journal.device().is_dead() {
            match random.below(10) {
                0..=5 => {
                    let group = random.below(3);
                    let index = next_index.entry(group).or_insert(0);
                    *index += 1;
                    let body_bytes =
                        random.below((config.body_bytes_max() as u64).min(3000)) as usize;
                    let record = Remembered {
                        kind: random.below(4) as u8,
                        group,
                        term: 1 + cycle,
                        index: *index,
                        body: (0..body_bytes).map(|_| random.below(256) as u8).collect(),
                    };
                    match journal.try_append(NewRecord {
                        kind: record.kind,
                        group: record.group,
                        term: record.term,
                        index: record.index,
                        body: &record.body,
                    }) {
                        Ok(sequence) => {
                            appended.insert(sequence, record);
                        }
                        Err(AppendError::Busy) => *index -= 1,
                        Err(AppendError::Failed(_)) => break,
                    }
                }
                6..=8 => match block_on(journal.flush()) {
                    Ok(Some(last)) => acked_sequence = last,
                    Ok(None) => {
                        // Maybe full: checkpoint everything durable.
                        for record in appended.range(..=acked_sequence).map(|(_, record)| record) {
                            let done = checkpoints.entry(record.group).or_insert(0);
                            *done = (*done).max(record.index);
                        }
                        for (&group, &index) in &checkpoints {
                            journal.checkpoint(group, index);
                        }
                    }
                    Err(_) => break,
                },
                _ => {
                    // Checkpoint a group up to some durable index of it.
                    let durable: Vec<&Remembered> =
                        appended.range(..=acked_sequence).map(|(_, r)| r).collect();
                    if let Some(record) =
                        durable.get(random.below(durable.len().max(1) as u64) as usize)
                    {
                        let done = checkpoints.entry(record.group).or_insert(0);
                        *done = (*done).max(record.index);
                        journal.checkpoint(record.group, *done);
                    }
                }
            }
        }
        coverage.rotations += journal.stats().segments_opened;
        coverage.recycled += journal.stats().segments_recycled;
        device = journal.device().crash(random.next_u64());
    }
}

#[test]
fn every_acked_record_survives_crashes() {
    let seeds: u64 = std::env::var("TERN_JOURNAL_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut coverage = Coverage::default();
    for seed in 0..seeds {
        crash_property(seed, &mut coverage, false);
    }
    eprintln!("{coverage:?}");
    // The property must have been exercised, not passed vacuously.
    assert!(coverage.acked_records_checked > seeds * 5, "{coverage:?}");
    assert!(coverage.tail_cuts > seeds / 10, "{coverage:?}");
    assert!(coverage.rotations > seeds, "{coverage:?}");
    assert!(coverage.recycled > seeds / 4, "{coverage:?}");
}

/// The checks above can fail: on a disk that acknowledges syncs it never
/// does, some seed must lose an acknowledged record and be caught.
#[test]
fn the_crash_checks_catch_a_lying_disk() {
    let caught = (0..50).find(|&seed| {
        std::panic::catch_unwind(|| crash_property(seed, &mut Coverage::default(), true)).is_err()
    });
    assert!(
        caught.is_some(),
        "no seed caught a disk that drops acknowledged writes"
    );
}

/// Records as (index, body), in the order passed.
type Passed = Vec<(u64, Vec<u8>)>;

/// What `read_group` passes.
fn read_back(
    journal: &Journal<MemoryDevice>,
    group: u64,
    from_index: u64,
    bytes_max: usize,
) -> (Result<ReadEnd, JournalError>, Passed) {
    let mut passed = Vec::new();
    let end = block_on(journal.read_group(group, from_index, bytes_max, |view| {
        assert_eq!(view.header.group, group);
        passed.push((view.header.index, view.body.to_vec()));
    }));
    (end, passed)
}

/// Three groups interleaved over rotating segments: each group's durable
/// records come back in order from any index, bounded by the byte limit,
/// and nothing of another group or of the open batch.
#[test]
fn a_group_reads_back_its_durable_records_from_any_index() {
    let device = MemoryDevice::new(16, 64 * KIB, 3);
    let (journal, _, _) = open(device, config(16 * KIB as usize));
    let mut written: BTreeMap<u64, Passed> = BTreeMap::new();
    for index in 1..=40u64 {
        for group in 1..=3u64 {
            let record = record(
                group,
                index,
                300 + (index as usize * 97 + group as usize) % 2500,
            );
            append(&journal, &record);
            written.entry(group).or_default().push((index, record.body));
        }
        assert!(block_on(journal.flush()).unwrap().is_some());
    }
    assert!(
        journal.live_segments().len() > 2,
        "the records span segments"
    );
    // Not yet flushed: never read back.
    append(&journal, &record(2, 41, 10));
    for group in 1..=3u64 {
        for from_index in [1, 2, 17, 40, 41] {
            let (end, passed) = read_back(&journal, group, from_index, usize::MAX);
            assert_eq!(end.unwrap(), ReadEnd::Complete);
            let expected: Vec<_> = written[&group]
                .iter()
                .filter(|(index, _)| *index >= from_index)
                .cloned()
                .collect();
            assert_eq!(passed, expected, "group {group} from {from_index}");
        }
    }
    // Bounded: pages of at least 4 KiB of bodies, each ending at a batch,
    // together the whole log.
    let mut from_index = 1;
    let mut paged = Vec::new();
    let mut pages = 0;
    loop {
        let (end, passed) = read_back(&journal, 2, from_index, 4096);
        let end = end.unwrap();
        let bytes: usize = passed.iter().map(|(_, body)| body.len()).sum();
        pages += 1;
        if end == ReadEnd::Limited {
            // Past the limit by less than one batch (16 KiB).
            assert!((4096..4096 + 16 * 1024).contains(&bytes), "{bytes}");
        }
        from_index = passed.last().map_or(from_index, |(index, _)| index + 1);
        paged.extend(passed);
        if end == ReadEnd::Complete {
            break;
        }
    }
    assert_eq!(paged, written[&2]);
    assert!(pages > 5, "the limit pages the read: {pages} pages");
    assert_eq!(read_back(&journal, 9, 1, usize::MAX).1, vec![]);
}

/// A record rewritten at an index (after a Raft truncation) is passed
/// again, later: the reader keeps the last.
#[test]
fn a_rewritten_index_is_passed_again_after_the_first() {
    let device = MemoryDevice::new(4, 64 * KIB, 3);
    let (journal, _, _) = open(device, config(16 * KIB as usize));
    let first = record(1, 5, 100);
    let mut second = record(1, 5, 120);
    second.term = 2;
    append(&journal, &first);
    block_on(journal.flush()).unwrap();
    append(&journal, &second);
    block_on(journal.flush()).unwrap();
    let (end, passed) = read_back(&journal, 1, 5, usize::MAX);
    assert_eq!(end.unwrap(), ReadEnd::Complete);
    assert_eq!(passed, vec![(5, first.body), (5, second.body)]);
}

/// Damage found on read-back: one block is rebuilt from parity in memory
/// and the records are exact; two blocks are named corruption, never
/// wrong bytes.
#[test]
fn damage_found_on_read_back_is_repaired_or_named() {
    let device = MemoryDevice::new(4, 64 * KIB, 3);
    let (journal, _, _) = open(device, config(32 * KIB as usize));
    let record = record(1, 1, 9000); // a three-data-block batch
    append(&journal, &record);
    block_on(journal.flush()).unwrap();
    let batch = BLOCK_BYTES as u64;
    journal.device().flip_bit(
        0,
        batch + BLOCK_BYTES as u64,
        batch + 2 * BLOCK_BYTES as u64,
    );
    let (end, passed) = read_back(&journal, 1, 1, usize::MAX);
    assert_eq!(end.unwrap(), ReadEnd::Complete);
    assert_eq!(passed, vec![(1, record.body.clone())]);
    journal.device().flip_bit(
        0,
        batch + 2 * BLOCK_BYTES as u64,
        batch + 3 * BLOCK_BYTES as u64,
    );
    let (end, passed) = read_back(&journal, 1, 1, usize::MAX);
    assert!(
        matches!(end, Err(JournalError::Corrupt { segment: 0, .. })),
        "{end:?}"
    );
    assert!(passed.is_empty());
}

/// Once a segment is recycled its records are the block store's: a read
/// that needs them learns so instead of reading reused space.
#[test]
fn a_recycled_segment_is_not_read() {
    let device = MemoryDevice::new(4, 20 * KIB, 5);
    let (journal, _, _) = open(device, config(2 * BLOCK_BYTES));
    for index in 1..=8 {
        append(&journal, &record(1, index, 2000));
        block_on(journal.flush()).unwrap();
    }
    journal.checkpoint(1, 2);
    let (end, passed) = read_back(&journal, 1, 1, usize::MAX);
    assert_eq!(end.unwrap(), ReadEnd::Complete);
    assert_eq!(
        passed.iter().map(|(index, _)| *index).collect::<Vec<_>>(),
        (3..=8).collect::<Vec<_>>(),
        "what is live, from the oldest live segment"
    );
}
