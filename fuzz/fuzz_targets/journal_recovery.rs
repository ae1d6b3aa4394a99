//! Fuzzes journal recovery: whatever bytes the segments hold, opening the
//! journal returns records that verify or an error — never a panic, never
//! a record that fails its checksum or breaks the chain.
#![no_main]

use futures_lite::future::block_on;
use libfuzzer_sys::fuzz_target;
use tern_storage::device::{Device, HeapBuffer};
use tern_storage::format::{checksum, record_bytes, BLOCK_BYTES};
use tern_storage::memory::MemoryDevice;
use tern_storage::{Journal, JournalConfig, SyncPolicy};

const SEGMENT_BYTES: usize = 4 * BLOCK_BYTES;

fuzz_target!(|data: &[u8]| {
    let device = MemoryDevice::new(2, SEGMENT_BYTES as u64, 1);
    // Lay the input over both segments (anything goes: headers, batches, garbage).
    for (segment, chunk) in data.chunks(SEGMENT_BYTES).take(2).enumerate() {
        let mut image = vec![0u8; SEGMENT_BYTES];
        image[..chunk.len()].copy_from_slice(chunk);
        block_on(device.write(segment as u32, 0, HeapBuffer(image), true)).expect("memory write");
    }
    for sync in [SyncPolicy::Always, SyncPolicy::Never] {
        let config = JournalConfig { shard: 0, batch_bytes_max: BLOCK_BYTES, sync, journal_id: 1 };
        let reopened = MemoryDevice::new(2, SEGMENT_BYTES as u64, 1);
        for segment in 0..2 {
            let image = device.contents(segment);
            block_on(reopened.write(segment, 0, HeapBuffer(image), true)).expect("memory write");
        }
        let mut previous: Option<(u64, u32)> = None;
        let _ = block_on(Journal::open(reopened, config, |view| {
            let mut encoded = vec![0u8; record_bytes(view.body.len())];
            let sum = view.header.encode(view.body, &mut encoded);
            assert_eq!(sum, view.checksum, "a replayed record verifies");
            if let Some((sequence, chain)) = previous {
                assert_eq!(view.header.sequence, sequence + 1, "replay is contiguous");
                assert_eq!(view.header.chain, chain, "replay follows the chain");
            }
            previous = Some((view.header.sequence, view.checksum));
            let _ = checksum(view.body);
        }));
    }
});
