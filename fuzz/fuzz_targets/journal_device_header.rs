//! Fuzzes the raw journal device's header decoder and the signature scan
//! (both read whatever is on a device tern is given): any bytes decode to a
//! header or a fault, never a panic; a header that decodes is exactly what
//! `encode` writes for it (no second spelling of the same header), and its
//! regions fit the size the header names.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_storage::format::BLOCK_BYTES;
use tern_storage::journal_device::{signature, DeviceHeader};

fuzz_target!(|data: &[u8]| {
    let _ = signature(data);
    let mut block = vec![0u8; BLOCK_BYTES];
    // Short inputs fill the start of a block (the interesting fields), so
    // the fuzzer need not grow inputs to 4 KiB to reach the decoder.
    let length = data.len().min(BLOCK_BYTES);
    block[..length].copy_from_slice(&data[..length]);
    for candidate in [&block[..], data] {
        if let Ok(header) = DeviceHeader::decode(candidate) {
            assert_eq!(header.encode(), candidate, "canonical");
            assert!(header.shard_count() >= 1);
            let _ = header.region_offset(header.shard_count() - 1);
        }
    }
});
