//! Fuzzes journal recovery against the promise it keeps: damage confined to
//! one 4 KiB block never loses or alters an acknowledged record silently.
//!
//! The input is `[scenario, segment, block_lo, block_hi, mask...]`. The
//! harness writes a valid journal (scenario picks how many records and how
//! they are batched; every record is acknowledged: flushed with
//! `SyncPolicy::Always`), XORs `mask` (up to one block, anything goes: one
//! bit, a zeroed block, garbage) into block `block` of segment `segment`,
//! and reopens. The outcome must be one of:
//! - the journal opens and replays every acknowledged record, identical and
//!   in order, and nothing else;
//! - the journal reports `Corrupt` naming the damage.
//!
//! An opened journal's read path (`read_group`, what a lagging follower is
//! served from) must give each group exactly what was replayed of it. A
//! second pass reopens the repaired device (what recovery rebuilt and wrote
//! back) and must replay the same records again.
#![no_main]

use std::sync::OnceLock;

use futures_lite::future::block_on;
use libfuzzer_sys::fuzz_target;
use tern_storage::device::{Device, HeapBuffer};
use tern_storage::format::BLOCK_BYTES;
use tern_storage::memory::MemoryDevice;
use tern_storage::{Journal, JournalConfig, JournalError, NewRecord, ReadEnd, SyncPolicy};

const SEGMENT_COUNT: u32 = 3;
const SEGMENT_BLOCKS: usize = 8;
const SEGMENT_BYTES: usize = SEGMENT_BLOCKS * BLOCK_BYTES;
const SCENARIOS: usize = 6;

/// One acknowledged record as the writer handed it in.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Acked {
    sequence: u64,
    group: u64,
    index: u64,
    body: Vec<u8>,
}

struct Image {
    segments: Vec<Vec<u8>>,
    acked: Vec<Acked>,
}

fn config() -> JournalConfig {
    JournalConfig {
        shard: 0,
        batch_bytes_max: 3 * BLOCK_BYTES,
        sync: SyncPolicy::Always,
        journal_id: 0x7e57,
        formatted_before: false,
    }
}

/// Scenario `n`: `records` records, a flush every `per_batch`, bodies of
/// varying sizes (some spanning a whole data block).
fn write_image(scenario: usize) -> Image {
    let (records, per_batch) = [(1, 1), (3, 3), (6, 2), (12, 4), (9, 1), (20, 5)][scenario];
    let device = MemoryDevice::new(SEGMENT_COUNT, SEGMENT_BYTES as u64, scenario as u64);
    let (journal, _) = block_on(Journal::open(device, config(), |_| {})).expect("fresh journal");
    let mut acked = Vec::new();
    for index in 1..=records as u64 {
        let body_bytes = (index as usize * 613 + scenario * 97) % 3000;
        let body: Vec<u8> = (0..body_bytes)
            .map(|byte| (byte as u64 ^ index) as u8)
            .collect();
        let group = index % 3;
        let record = NewRecord {
            kind: 1,
            group,
            term: 1,
            index,
            body: &body,
        };
        // A full batch answers Busy until it is flushed.
        let sequence = match journal.try_append(record) {
            Ok(sequence) => sequence,
            Err(_) => {
                block_on(journal.flush()).expect("memory flush");
                journal
                    .try_append(record)
                    .expect("room for the seed records")
            }
        };
        acked.push(Acked {
            sequence,
            group,
            index,
            body,
        });
        if index % per_batch == 0 {
            block_on(journal.flush()).expect("memory flush");
        }
    }
    block_on(journal.flush()).expect("memory flush");
    let segments = (0..SEGMENT_COUNT)
        .map(|segment| journal.device().contents(segment))
        .collect();
    Image { segments, acked }
}

fn images() -> &'static [Image] {
    static IMAGES: OnceLock<Vec<Image>> = OnceLock::new();
    IMAGES.get_or_init(|| (0..SCENARIOS).map(write_image).collect())
}

fn load(segments: &[Vec<u8>]) -> MemoryDevice {
    let device = MemoryDevice::new(SEGMENT_COUNT, SEGMENT_BYTES as u64, 1);
    for (segment, image) in segments.iter().enumerate() {
        block_on(device.write(segment as u32, 0, HeapBuffer(image.clone()), true))
            .expect("memory write");
    }
    device
}

/// Opens `device`; `Ok(records)` replayed, or `Err` if the journal reported
/// damage, a foreign journal or another format (any other error is a bug).
fn open(device: MemoryDevice) -> Result<(Vec<Acked>, MemoryDevice), ()> {
    let mut replayed = Vec::new();
    match block_on(Journal::open(device, config(), |view| {
        replayed.push(Acked {
            sequence: view.header.sequence,
            group: view.header.group,
            index: view.header.index,
            body: view.body.to_vec(),
        })
    })) {
        Ok((journal, _)) => {
            // The read path a lagging follower is served from gives each
            // group exactly what recovery replayed of it.
            for group in 0..3 {
                let mut read = Vec::new();
                let end = block_on(journal.read_group(group, 0, usize::MAX, |view| {
                    read.push(Acked {
                        sequence: view.header.sequence,
                        group: view.header.group,
                        index: view.header.index,
                        body: view.body.to_vec(),
                    })
                }));
                assert_eq!(end.ok(), Some(ReadEnd::Complete), "group {group} reads back");
                let replayed_group: Vec<&Acked> =
                    replayed.iter().filter(|acked| acked.group == group).collect();
                assert_eq!(read.iter().collect::<Vec<_>>(), replayed_group, "group {group}");
            }
            let segments = (0..SEGMENT_COUNT).map(|segment| journal.device().contents(segment));
            Ok((replayed, load(&segments.collect::<Vec<_>>())))
        }
        // Damage can also forge a whole valid segment header (its CRC
        // included) of another journal or format: refused, and named.
        Err(
            JournalError::Corrupt { .. }
            | JournalError::Foreign { .. }
            | JournalError::Version { .. },
        ) => Err(()),
        Err(other) => panic!("damage in one block must be reported as damage, got: {other}"),
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let image = &images()[data[0] as usize % SCENARIOS];
    let segment = data[1] as usize % SEGMENT_COUNT as usize;
    let block = u16::from_le_bytes([data[2], data[3]]) as usize % SEGMENT_BLOCKS;
    let mask = &data[4..data.len().min(4 + BLOCK_BYTES)];
    let mut segments = image.segments.clone();
    let start = block * BLOCK_BYTES;
    for (byte, flip) in segments[segment][start..start + mask.len()]
        .iter_mut()
        .zip(mask)
    {
        *byte ^= flip;
    }
    let Ok((replayed, repaired)) = open(load(&segments)) else {
        return;
    };
    assert_eq!(
        replayed, image.acked,
        "every acknowledged record, identical, and nothing else"
    );
    let Ok((again, _)) = open(repaired) else {
        panic!("a journal that opened reports damage after its own repairs");
    };
    assert_eq!(
        again, image.acked,
        "the repaired journal replays the same records"
    );
});
