//! Fuzzes the stream snapshot decoder (a follower installs what a peer
//! sends, chunk by chunk): never panic, buffer only what the input holds,
//! re-encode whatever decodes to exactly the input, decode the same in
//! two pieces as in one, and install it (or refuse it with an error)
//! without panicking. The checksum is checked last, so every field's
//! bounds are reached by mutated inputs.
#![no_main]

use futures_lite::future::block_on;
use libfuzzer_sys::fuzz_target;
use tern_broker::jetstream::stream::snapshot::{self, SnapshotDecoder, SnapshotPart};
use tern_broker::jetstream::stream::transfer::SnapshotInstall;

fuzz_target!(|data: &[u8]| {
    let whole = snapshot::decode_whole(data);
    // The same bytes in two pieces decode the same.
    let split = data.first().map_or(0, |first| usize::from(*first) % (data.len() + 1));
    let mut decoder = SnapshotDecoder::new();
    let mut pieces = Vec::new();
    let mut failed = None;
    for piece in [&data[..split], &data[split..]] {
        if let Err(error) = decoder.push(piece) {
            failed = Some(error);
            break;
        }
        loop {
            match decoder.next_part() {
                Ok(Some(part)) => pieces.push(part),
                Ok(None) => break,
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        if failed.is_some() {
            break;
        }
    }
    let pieced = match failed {
        Some(error) => Err(error),
        None => decoder.finish().map(|()| pieces),
    };
    assert_eq!(whole.is_ok(), pieced.is_ok(), "splitting changed the outcome");
    let Ok(parts) = whole else {
        return;
    };
    assert_eq!(Ok(&parts), pieced.as_ref());
    let mut header = None;
    let mut messages = Vec::new();
    let mut end = None;
    for part in parts {
        match part {
            SnapshotPart::Header(decoded) => header = Some(decoded),
            SnapshotPart::Message(message) => messages.push(message),
            SnapshotPart::End(decoded) => end = Some(decoded),
        }
    }
    let (header, end) = (header.expect("decoded"), end.expect("decoded"));
    let encoded = snapshot::encode_whole(&header, &messages, &end);
    assert_eq!(&encoded[..], data, "the encoding is canonical");
    let mut install = SnapshotInstall::new(None);
    if block_on(install.push(data)).is_ok() {
        if let Ok(replica) = install.finish() {
            assert_eq!(replica.applied_index(), header.applied_index);
        }
    }
});
