//! Fuzzes the Raft message decoder: never panic, never allocate beyond the
//! limits, and whatever decodes re-encodes to exactly the input (the
//! encoding is canonical).
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use tern_raft::wire::{decode, encode, encoded_size_bytes, DecodeLimits};

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    if let Ok(message) = decode(&input, &DecodeLimits::default()) {
        let mut out = BytesMut::new();
        encode(&message, &mut out);
        assert_eq!(out.len(), encoded_size_bytes(&message));
        assert_eq!(&out[..], data, "decode then encode must give back the input");
    }
});
