//! Fuzzes the route frame decoder (what another node, or anyone reaching
//! the cluster port, sends): never panic, never trust a length before the
//! limit, and every frame that decodes re-encodes to a frame that decodes
//! the same.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tern_broker::cluster::frame::{self, decode, Frame};

const BODY_MAX_BYTES: usize = 1 << 20;

fn encode(frame: &Frame<'_>) -> Vec<u8> {
    let mut buffer = Vec::new();
    match frame {
        Frame::Hello(hello) => frame::push_hello(&mut buffer, hello),
        Frame::Refuse(reason) => frame::push_refuse(&mut buffer, reason),
        Frame::Interest {
            subject,
            queue,
            weight,
        } => {
            let queue = queue.map(Bytes::copy_from_slice);
            frame::push_interest(&mut buffer, subject, queue.as_ref(), *weight)
        }
        Frame::Message(message) => {
            let queues: Vec<Bytes> = message
                .queues
                .iter()
                .map(|queue| Bytes::copy_from_slice(queue))
                .collect();
            frame::push_message(
                &mut buffer,
                message.routing,
                message.subject,
                message.reply,
                message.header_bytes,
                message.message,
                &queues,
            )
        }
        Frame::Routes(routes) => frame::push_routes(&mut buffer, routes),
        Frame::Raft { from, to, messages } => {
            let messages: Vec<(u64, Bytes)> = messages
                .iter()
                .map(|(group, bytes)| (*group, Bytes::copy_from_slice(bytes)))
                .collect();
            frame::push_raft(&mut buffer, *from, *to, &messages, BODY_MAX_BYTES)
        }
        Frame::Api {
            hops,
            subject,
            reply,
            payload,
        } => frame::push_api(&mut buffer, *hops, subject, reply.unwrap_or_default(), payload),
        Frame::Ping => frame::push_ping(&mut buffer),
        Frame::Pong => frame::push_pong(&mut buffer),
    }
    buffer
}

fuzz_target!(|data: &[u8]| {
    let mut offset = 0;
    while offset < data.len() {
        match decode(&data[offset..], BODY_MAX_BYTES) {
            Ok(Some((decoded, used))) => {
                assert!(used > frame::FRAME_HEADER_BYTES && used <= data.len() - offset);
                if let Frame::Message(message) = &decoded {
                    if message.queues_only {
                        // The encoder sets the flag only on continuation frames.
                        offset += used;
                        continue;
                    }
                }
                let encoded = encode(&decoded);
                let (again, again_used) = decode(&encoded, BODY_MAX_BYTES)
                    .expect("an encoded frame decodes")
                    .expect("whole");
                assert_eq!(again_used, encoded.len());
                assert_eq!(again, decoded);
                offset += used;
            }
            Ok(None) | Err(_) => break,
        }
    }
});
