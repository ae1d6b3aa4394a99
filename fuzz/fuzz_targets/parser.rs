//! Fuzzes the client protocol parser: any bytes, split at any point, never
//! panic, never consume more than given, and every operation it returns is
//! well-formed (sizes add up, limits hold).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_broker::proto::parser::{ClientOp, Parser, ParserLimits, Step};

const LIMITS: ParserLimits = ParserLimits { max_control_line_bytes: 256, max_payload_bytes: 1024 };

fuzz_target!(|data: &[u8]| {
    let Some((&split_seed, input)) = data.split_first() else { return };
    let split = if input.is_empty() { 0 } else { usize::from(split_seed) % (input.len() + 1) };
    let headers = split_seed & 1 == 1;
    let mut parser = Parser::new(LIMITS);
    let mut buffer: Vec<u8> = Vec::new();
    for chunk in [&input[..split], &input[split..]] {
        buffer.extend_from_slice(chunk);
        loop {
            match parser.parse(&buffer, headers) {
                Ok(Step::Op { op, consumed }) => {
                    assert!(consumed > 0 && consumed <= buffer.len());
                    check(&op);
                    buffer.drain(..consumed);
                }
                Ok(Step::NeedMore { consumed, bytes_needed }) => {
                    assert!(consumed <= buffer.len());
                    buffer.drain(..consumed);
                    if let Some(needed) = bytes_needed {
                        assert!(needed > buffer.len());
                        assert!(needed <= LIMITS.max_payload_bytes + 2 + 64 + LIMITS.max_control_line_bytes + 2);
                    }
                    break;
                }
                Err(_) => return,
            }
        }
        // Unparsed bytes are bounded by the limits (the caller's buffer cannot grow forever).
        assert!(buffer.len() <= LIMITS.max_control_line_bytes + LIMITS.max_payload_bytes + 64 + 4 + chunk.len());
    }
});

fn check(op: &ClientOp<'_>) {
    match op {
        ClientOp::Publish(publish) => {
            assert!(publish.header_bytes <= publish.message.len());
            assert!(publish.message.len() <= LIMITS.max_payload_bytes);
            assert!(!publish.subject.is_empty());
            assert!(publish.subject.len() <= LIMITS.max_control_line_bytes);
        }
        ClientOp::Subscribe { subject, sid, .. } => {
            assert!(!subject.is_empty() && !sid.is_empty());
        }
        ClientOp::Unsubscribe { sid, max_messages } => {
            assert!(!sid.is_empty());
            assert!(*max_messages >= -1);
        }
        ClientOp::Connect { json } | ClientOp::Info { json } => {
            assert!(json.len() <= LIMITS.max_control_line_bytes);
        }
        ClientOp::Err { text } => assert!(text.len() <= LIMITS.max_control_line_bytes),
        ClientOp::Ping | ClientOp::Pong | ClientOp::Ok => {}
    }
}
