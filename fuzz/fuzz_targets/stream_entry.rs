//! Fuzzes what recovery decodes from the journal for a stream: the stream
//! operation inside a Raft entry, the entry body and the hard state record.
//! Never panic; whatever decodes re-encodes to exactly the input (the
//! encoding is canonical), so replay cannot reinterpret a record.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tern_broker::jetstream::entry::{
    decode_entry_body, decode_hard_state, encode_entry_body, encode_hard_state, Operation,
};

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    if let Ok(operation) = Operation::decode(&input) {
        assert_eq!(&operation.encode()[..], data, "canonical encoding");
    }
    if let Ok(kind) = decode_entry_body(data) {
        let entry = tern_raft::Entry {
            term: 1,
            index: 1,
            kind,
        };
        assert_eq!(&encode_entry_body(&entry)[..], data);
    }
    if let Ok(hard_state) = decode_hard_state(data) {
        let encoded = encode_hard_state(&hard_state);
        // A zero vote and "no vote" share the encoding.
        assert!(encoded[..8] == data[..8]);
    }
});
