//! Fuzzes what recovery decodes from the journal for a stream: the stream
//! operation inside a Raft entry, the entry record and the hard state
//! record. Never panic; whatever decodes re-encodes to exactly the input
//! (the encoding is canonical), so replay cannot reinterpret a record.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tern_broker::jetstream::entry::{
    decode_hard_state, encode_hard_state, entry_kind, entry_record, Operation,
};

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    if let Ok(operation) = Operation::decode(&input) {
        assert_eq!(&operation.encode()[..], data, "canonical encoding");
    }
    if let Some((&record_kind, body)) = data.split_first() {
        if let Ok(kind) = entry_kind(record_kind, body) {
            let entry = tern_raft::Entry {
                term: 1,
                index: 1,
                kind,
            };
            let (kind_again, body_again) = entry_record(&entry);
            assert_eq!(kind_again, record_kind);
            assert_eq!(&body_again[..], body);
        }
    }
    if let Ok(hard_state) = decode_hard_state(data) {
        let encoded = encode_hard_state(&hard_state);
        // A zero vote and "no vote" share the encoding.
        assert_eq!(encoded[..8], data[..8]);
    }
});
