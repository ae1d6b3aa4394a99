//! Fuzzes the block-store manifest and opening a stream's block store over
//! arbitrary file contents. The input is a 2-byte length, that many bytes
//! of manifest, then 8 KiB per file: each segment the manifest names (at
//! most four), its deletes log, then one file it does not name (each file
//! keeps the odd size of its chunk).
//!
//! - the manifest decodes or reports an error, never panics, and what
//!   decodes re-encodes to the same bytes;
//! - with the manifest's checksum patched to match (so mutations reach the
//!   semantic checks and the open), opening reports corruption (having
//!   removed nothing) or opens, never panics; an opened log serves only
//!   messages that decode and match its index, and its next manifest
//!   decodes.
#![no_main]

use futures_lite::future::block_on;
use libfuzzer_sys::fuzz_target;
use tern_storage::block_store::{
    Manifest, MemoryFiles, StoreError, StoreFile, StoreFiles, StreamConfig, StreamLog,
};
use tern_storage::device::HeapBuffer;
use tern_storage::format::{checksum, BLOCK_BYTES};

const SEGMENT_FILES_MAX: usize = 4;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let length = u16::from_le_bytes([data[0], data[1]]) as usize;
    let manifest_bytes = &data[2..(2 + length).min(data.len())];
    let files_bytes = &data[(2 + length).min(data.len())..];
    if let Ok(manifest) = Manifest::decode(manifest_bytes) {
        assert_eq!(manifest.encode(), manifest_bytes);
    }
    // Patch the trailing checksum so the fuzzer gets past it.
    let mut patched = manifest_bytes.to_vec();
    if patched.len() >= 4 {
        let body = patched.len() - 4;
        let sum = checksum(&patched[..body]);
        patched[body..].copy_from_slice(&sum.to_le_bytes());
    }
    let Ok(manifest) = Manifest::decode(&patched) else {
        return;
    };
    let files = MemoryFiles::new();
    let mut names: Vec<String> = manifest
        .segments
        .iter()
        .take(SEGMENT_FILES_MAX)
        .map(|extent| extent.file_name())
        .collect();
    names.push(manifest.deletes.file_name());
    names.push("00000000000000999999.blk".to_string());
    let mut chunks = files_bytes.chunks(2 * BLOCK_BYTES);
    for name in &names {
        let Some(chunk) = chunks.next() else { break };
        let file = block_on(files.create(name)).expect("memory create");
        let mut image = vec![0u8; chunk.len().div_ceil(BLOCK_BYTES).max(1) * BLOCK_BYTES];
        image[..chunk.len()].copy_from_slice(chunk);
        block_on(file.write(0, HeapBuffer(image))).expect("memory write");
        block_on(file.sync()).expect("memory sync");
        files.truncate(name, chunk.len() as u64);
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
    let before = files.names();
    match block_on(StreamLog::open(files.clone(), config, &manifest)) {
        Ok((mut log, _)) => {
            let state = log.state();
            assert_eq!(state.last_sequence, manifest.last_sequence);
            let _ = block_on(log.replay(0, |view| {
                assert!(view.sequence <= state.last_sequence);
            }));
            let last = state.last_sequence.min(state.first_sequence.saturating_add(64));
            for sequence in state.first_sequence..=last {
                let _ = block_on(log.get(sequence));
            }
            if let Ok(next) = block_on(log.sync()) {
                assert_eq!(Manifest::decode(&next.encode()), Ok(next));
            }
        }
        Err(StoreError::Corrupt { .. } | StoreError::Io(_)) => {
            assert_eq!(files.names(), before, "a refused open removed nothing");
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
});
