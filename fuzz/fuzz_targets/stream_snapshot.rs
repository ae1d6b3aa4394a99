//! Fuzzes the stream snapshot decoder (a follower installs what a peer
//! sends): never panic, allocate only what the input holds, re-encode
//! whatever decodes to exactly the input, and install it (or refuse it
//! with an error) without panicking. The checksum is checked last, so every
//! field's bounds are reached by mutated inputs.
#![no_main]

use bytes::Bytes;
use futures_lite::future::block_on;
use libfuzzer_sys::fuzz_target;
use tern_broker::jetstream::stream::replica::Replica;
use tern_broker::jetstream::stream::snapshot::StreamSnapshot;

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    if let Ok(snapshot) = StreamSnapshot::decode(&input) {
        assert_eq!(&snapshot.encode()[..], data, "the encoding is canonical");
        if let Ok(replica) = block_on(Replica::from_snapshot(&input, None)) {
            assert_eq!(replica.applied_index(), snapshot.applied_index);
        }
    }
});
