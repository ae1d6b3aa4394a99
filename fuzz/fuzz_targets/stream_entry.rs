//! Fuzzes what recovery decodes from the journal for a stream: the stream
//! operation inside a Raft entry, the entry record, the hard state record
//! a consumer's delivery state (which then must run without panics), and a
//! stream's `consumers` checkpoint file. Never panic; whatever decodes re-encodes to exactly the input
//! (the encoding is canonical), so replay cannot reinterpret a record.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tern_broker::jetstream::consumer::delivery::{AckMode, DeliveryConfig, DeliveryState, Next};
use tern_broker::jetstream::consumer::store as consumer_store;
use tern_broker::jetstream::entry::{
    decode_hard_state, encode_hard_state, entry_kind, entry_record, Operation,
};

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    if let Ok(operation) = Operation::decode(&input) {
        assert_eq!(&operation.encode()[..], data, "canonical encoding");
    }
    if let Ok(stored) = consumer_store::decode(data) {
        // Canonical up to the zero padding after the body.
        let encoded = consumer_store::encode(&stored);
        assert_eq!(&data[..encoded.len()], &encoded[..], "canonical encoding");
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
    let config = DeliveryConfig {
        ack: AckMode::Explicit,
        ack_wait_ns: 30_000_000_000,
        backoff_ns: vec![1_000_000_000, 5_000_000_000],
        max_deliver: Some(3),
        max_ack_pending: Some(4),
    };
    if let Ok(mut state) = DeliveryState::decode(config, data) {
        assert_eq!(state.encode(), data, "canonical encoding");
        let now_ns = 1_800_000_000_000_000_000;
        state.check_pending(now_ns, 1);
        for _ in 0..4 {
            match state.next_to_deliver() {
                Next::Redeliver { stream_sequence } | Next::FromStream { stream_sequence } => {
                    let delivery = state.delivered_at(stream_sequence, now_ns);
                    state.nak(
                        delivery.stream_sequence,
                        delivery.consumer_sequence,
                        None,
                        now_ns,
                    );
                }
                Next::Stalled => break,
            }
        }
        let first = state.pending().next();
        if let Some((stream_sequence, pending)) = first {
            state.ack(stream_sequence, pending.consumer_sequence);
        }
    }
});
