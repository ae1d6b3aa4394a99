//! Fuzzes the meta group's decoders: a `MetaEntry` (what a meta leader's
//! log carries to every node) and a `MetaCheckpoint` (the `meta/state`
//! file, and the meta group's snapshot sent by the leader), and the votes
//! file beside them (every group's term and vote, `jetstream/votes/`),
//! the node identity file (`jetstream/node`), and the bodies nodes send
//! the meta leader (a join request, a report of what a node carried out):
//! never panic, and whatever decodes re-encodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_broker::jetstream::cluster::CarriedOut;
use tern_broker::jetstream::identity::NodeIdentity;
use tern_broker::jetstream::meta::cluster::{MetaCheckpoint, MetaEntry};
use tern_broker::jetstream::meta_membership::JoinRequest;
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
    if let Some(report) = CarriedOut::decode(data) {
        assert_eq!(CarriedOut::decode(&report.encode()), Some(report));
    }
    if let Some(join) = JoinRequest::decode(data) {
        assert_eq!(JoinRequest::decode(&join.encode()), Some(join));
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(identity) = NodeIdentity::decode(text) {
            assert_eq!(identity.encode(), text, "only the canonical form decodes");
        }
    }
    if let Ok(decoded) = votes::decode(data) {
        let again = votes::decode(&votes::encode(&decoded)).expect("an encoded votes file decodes");
        assert_eq!(again, decoded);
    }
});
