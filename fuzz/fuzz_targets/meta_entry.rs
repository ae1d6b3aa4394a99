//! Fuzzes the meta group's decoders: a `MetaEntry` (what a meta leader's
//! log carries to every node) and a `MetaCheckpoint` (the `meta/state`
//! file, and the meta group's snapshot sent by the leader), and the votes
//! file beside them (every group's term and vote, `jetstream/votes/`):
//! never panic, and whatever decodes re-encodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_broker::jetstream::meta::cluster::{MetaCheckpoint, MetaEntry};
use tern_broker::jetstream::votes;

fuzz_target!(|data: &[u8]| {
    if let Ok(entry) = MetaEntry::decode(data) {
        let again = MetaEntry::decode(&entry.encode()).expect("an encoded entry decodes");
        assert_eq!(again, entry);
    }
    if let Ok(checkpoint) = MetaCheckpoint::decode(data) {
        let again =
            MetaCheckpoint::decode(&checkpoint.encode()).expect("an encoded checkpoint decodes");
        assert_eq!(again, checkpoint);
    }
    if let Ok(decoded) = votes::decode(data) {
        let again = votes::decode(&votes::encode(&decoded)).expect("an encoded votes file decodes");
        assert_eq!(again, decoded);
    }
});
