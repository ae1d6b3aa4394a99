//! A stream replica's snapshot as a byte stream (`TSS2`): what a follower
//! whose needed entries were compacted away installs instead. It is read
//! from the leader's live store chunk by chunk while entries go on
//! applying (`transfer.rs`), so it is a header, records, and an end record
//! that says what changed behind the reader; memory on both ends stays
//! bounded by one record and one chunk. All integers little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `TSS2` |
//! | 8 | applied index `I` (the snapshot's Raft index) |
//! | 8 | applied term |
//! | 8 | time of the last message applied (ns since the Unix epoch) |
//! | 8 | last sequence `L` at `I` (may be past the last message: trailing deletes) |
//! | 4 | config length, then the config's stored JSON |
//! | 4 | consumer count, then per consumer, in increasing name order: |
//! | 2 | · name length, |
//! | 8 | · created (ns since the Unix epoch), |
//! | 4 | · config length, |
//! | 4 | · delivery state length, then name (UTF-8), config's stored JSON, delivery state (`delivery.rs`) |
//!
//! then records, each a tag byte and its fields:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | tag 1: a message |
//! | 8 | · sequence (> the previous, ≤ `L`) |
//! | 8 | · timestamp (ns) |
//! | 2 | · subject length, |
//! | 4 | · headers length, |
//! | 4 | · payload length, then subject, headers, payload |
//! | 1 | tag 2: the end (last record) |
//! | 8 | · converges at `T` (≥ `I`): the installed replica holds the leader's state once it applied index `T` |
//! | 4 | · removed range count, then per range, increasing and disjoint: |
//! | 16 | · · first and last sequence (≤ `L`): messages read above that went before `T` |
//! | 4 | · CRC-32C of every byte of the snapshot before it |
//!
//! Decoding ([`SnapshotDecoder`]) is incremental and strict (magic, every
//! length against [`SNAPSHOT_RECORD_BYTES_MAX`] before buffering, counts
//! against [`SNAPSHOT_CONSUMERS_MAX`] and [`SNAPSHOT_REMOVED_RANGES_MAX`],
//! sequences increasing and ≤ `L`, names increasing and UTF-8, nothing after
//! the end, the checksum) and names the field that failed.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Durable consumers one snapshot may hold.
pub const SNAPSHOT_CONSUMERS_MAX: u32 = 1 << 16;
/// Removed ranges an end record may carry (a transfer that needs more
/// starts over).
pub const SNAPSHOT_REMOVED_RANGES_MAX: u32 = tern_storage::block_store::REMOVED_RANGES_MAX as u32;
/// Bytes the decoder buffers for one piece at most (the header, or one
/// record): larger than any message the server stores.
pub const SNAPSHOT_RECORD_BYTES_MAX: usize = 256 << 20;

const MAGIC: &[u8; 4] = b"TSS2";
const TAG_MESSAGE: u8 = 1;
const TAG_END: u8 = 2;
/// Header bytes before the config: magic, index, term, time, last sequence,
/// config length.
const HEADER_FIXED_BYTES: usize = 4 + 8 * 4 + 4;
/// A consumer's fixed fields.
const CONSUMER_FIXED_BYTES: usize = 2 + 8 + 4 + 4;
/// A message record's tag and fixed fields.
const MESSAGE_FIXED_BYTES: usize = 1 + 8 + 8 + 2 + 4 + 4;
/// An end record's tag, index and range count.
const END_FIXED_BYTES: usize = 1 + 8 + 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotMessage {
    pub sequence: u64,
    pub timestamp_ns: u64,
    pub subject: Bytes,
    pub headers: Bytes,
    pub payload: Bytes,
}

/// A durable consumer as the log holds it (`state::LoggedConsumer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotConsumer {
    pub name: String,
    pub created_unix_ns: u64,
    pub config_json: Bytes,
    pub delivery_state: Bytes,
}

/// What a snapshot says of the replica at its index, before the messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotHeader {
    pub applied_index: u64,
    pub applied_term: u64,
    pub stored_last_unix_ns: u64,
    pub last_sequence: u64,
    pub config_json: Bytes,
    /// In increasing name order.
    pub consumers: Vec<SnapshotConsumer>,
}

/// The end record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotEnd {
    pub converges_at: u64,
    /// Sorted, disjoint, inclusive.
    pub removed: Vec<(u64, u64)>,
}

/// One decoded piece, in stream order: the header, messages, the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotPart {
    Header(SnapshotHeader),
    Message(SnapshotMessage),
    End(SnapshotEnd),
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    #[error("stream snapshot: not a snapshot (magic)")]
    Magic,
    #[error("stream snapshot: it ends inside {field}")]
    Truncated { field: &'static str },
    #[error("stream snapshot: {field} of {bytes} bytes, more than {SNAPSHOT_RECORD_BYTES_MAX}")]
    TooLarge { field: &'static str, bytes: u64 },
    #[error("stream snapshot: {count} consumers, more than {SNAPSHOT_CONSUMERS_MAX}")]
    TooManyConsumers { count: u32 },
    #[error("stream snapshot: {count} removed ranges, more than {SNAPSHOT_REMOVED_RANGES_MAX}")]
    TooManyRanges { count: u32 },
    #[error("stream snapshot: consumer names not increasing or not UTF-8")]
    ConsumerName,
    #[error("stream snapshot: sequence {sequence} after {previous} or past the last {last}")]
    Sequence {
        sequence: u64,
        previous: u64,
        last: u64,
    },
    #[error("stream snapshot: removed range {first}..={last} out of order or past {limit}")]
    Range { first: u64, last: u64, limit: u64 },
    #[error("stream snapshot: converges at {converges_at}, before its index {index}")]
    Converges { converges_at: u64, index: u64 },
    #[error("stream snapshot: unknown record tag {0}")]
    Tag(u8),
    #[error("stream snapshot: bytes after the end")]
    Trailing,
    #[error("stream snapshot: checksum mismatch")]
    Checksum,
}

// ----- encoding ------------------------------------------------------------------

impl SnapshotHeader {
    pub fn encode(&self) -> Bytes {
        let consumers_bytes: usize = self
            .consumers
            .iter()
            .map(|consumer| {
                CONSUMER_FIXED_BYTES
                    + consumer.name.len()
                    + consumer.config_json.len()
                    + consumer.delivery_state.len()
            })
            .sum();
        let mut out = BytesMut::with_capacity(
            HEADER_FIXED_BYTES + self.config_json.len() + 4 + consumers_bytes,
        );
        out.put_slice(MAGIC);
        out.put_u64_le(self.applied_index);
        out.put_u64_le(self.applied_term);
        out.put_u64_le(self.stored_last_unix_ns);
        out.put_u64_le(self.last_sequence);
        out.put_u32_le(u32::try_from(self.config_json.len()).expect("a config is small"));
        out.put_slice(&self.config_json);
        let count = u32::try_from(self.consumers.len()).expect("bounded by the stream");
        assert!(
            count <= SNAPSHOT_CONSUMERS_MAX,
            "snapshot of {count} consumers"
        );
        out.put_u32_le(count);
        for consumer in &self.consumers {
            out.put_u16_le(u16::try_from(consumer.name.len()).expect("names are short"));
            out.put_u64_le(consumer.created_unix_ns);
            out.put_u32_le(u32::try_from(consumer.config_json.len()).expect("a config is small"));
            out.put_u32_le(
                u32::try_from(consumer.delivery_state.len()).expect("bounded delivery state"),
            );
            out.put_slice(consumer.name.as_bytes());
            out.put_slice(&consumer.config_json);
            out.put_slice(&consumer.delivery_state);
        }
        assert!(
            out.len() <= SNAPSHOT_RECORD_BYTES_MAX,
            "a header decoders refuse"
        );
        out.freeze()
    }
}

/// Appends a message record to `out`.
pub fn encode_message(
    out: &mut BytesMut,
    sequence: u64,
    timestamp_ns: u64,
    subject: &[u8],
    headers: &[u8],
    payload: &[u8],
) {
    out.put_u8(TAG_MESSAGE);
    out.put_u64_le(sequence);
    out.put_u64_le(timestamp_ns);
    out.put_u16_le(u16::try_from(subject.len()).expect("subjects are short"));
    out.put_u32_le(u32::try_from(headers.len()).expect("bounded headers"));
    out.put_u32_le(u32::try_from(payload.len()).expect("bounded payloads"));
    out.put_slice(subject);
    out.put_slice(headers);
    out.put_slice(payload);
}

/// Appends the end record to `out`; `checksum` is the CRC-32C of every
/// snapshot byte before `out`'s (the running one), and is finished here.
pub fn encode_end(out: &mut BytesMut, end: &SnapshotEnd, checksum: u32) {
    let start = out.len();
    out.put_u8(TAG_END);
    out.put_u64_le(end.converges_at);
    let count = u32::try_from(end.removed.len()).expect("bounded ranges");
    assert!(count <= SNAPSHOT_REMOVED_RANGES_MAX);
    out.put_u32_le(count);
    for (first, last) in &end.removed {
        out.put_u64_le(*first);
        out.put_u64_le(*last);
    }
    let checksum = crc32c::crc32c_append(checksum, &out[start..]);
    out.put_u32_le(checksum);
}

// ----- decoding ------------------------------------------------------------------

/// A piece found complete at the front of the carried bytes: how many
/// bytes it takes, and what it is (a message's fields as ranges of them).
enum Parsed {
    Header(SnapshotHeader),
    Message {
        sequence: u64,
        timestamp_ns: u64,
        subject: std::ops::Range<usize>,
        headers: std::ops::Range<usize>,
        payload: std::ops::Range<usize>,
    },
    End(SnapshotEnd),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Header,
    Record,
    Done,
}

/// Decodes a snapshot as its bytes arrive ([`SnapshotDecoder::push`]),
/// handing out each complete piece ([`SnapshotDecoder::next_part`]).
#[derive(Debug)]
pub struct SnapshotDecoder {
    carry: BytesMut,
    expect: Expect,
    /// CRC-32C of every byte consumed so far.
    checksum: u32,
    last_sequence: u64,
    previous_sequence: u64,
    applied_index: u64,
}

impl Default for SnapshotDecoder {
    fn default() -> Self {
        SnapshotDecoder::new()
    }
}

/// A little-endian cursor over bytes that are all present.
struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl Cursor<'_> {
    /// `None`: not all here yet.
    fn take(&mut self, length: usize) -> Option<&[u8]> {
        let end = self.position.checked_add(length)?;
        let taken = self.bytes.get(self.position..end)?;
        self.position = end;
        Some(taken)
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|mut bytes| bytes.get_u16_le())
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|mut bytes| bytes.get_u32_le())
    }

    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|mut bytes| bytes.get_u64_le())
    }
}

fn bounded(field: &'static str, bytes: u64) -> Result<usize, SnapshotError> {
    if bytes > SNAPSHOT_RECORD_BYTES_MAX as u64 {
        return Err(SnapshotError::TooLarge { field, bytes });
    }
    Ok(bytes as usize)
}

impl SnapshotDecoder {
    pub fn new() -> SnapshotDecoder {
        SnapshotDecoder {
            carry: BytesMut::new(),
            expect: Expect::Header,
            checksum: 0,
            last_sequence: 0,
            previous_sequence: 0,
            applied_index: 0,
        }
    }

    /// More bytes of the snapshot, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        if self.expect == Expect::Done && !bytes.is_empty() {
            return Err(SnapshotError::Trailing);
        }
        self.carry.extend_from_slice(bytes);
        Ok(())
    }

    /// Whether the end record was decoded (and checked).
    pub fn is_done(&self) -> bool {
        self.expect == Expect::Done
    }

    /// The next complete piece, `None` until more bytes come. An error
    /// is final.
    pub fn next_part(&mut self) -> Result<Option<SnapshotPart>, SnapshotError> {
        let parsed = match self.expect {
            Expect::Header => self.header()?,
            Expect::Record => self.record()?,
            Expect::Done => {
                if self.carry.is_empty() {
                    return Ok(None);
                }
                return Err(SnapshotError::Trailing);
            }
        };
        let Some((consumed, part)) = parsed else {
            return Ok(None);
        };
        let bytes = self.carry.split_to(consumed).freeze();
        let part = match part {
            Parsed::End(end) => {
                let body = &bytes[..bytes.len() - 4];
                let checksum = crc32c::crc32c_append(self.checksum, body);
                if checksum != (&bytes[body.len()..]).get_u32_le() {
                    return Err(SnapshotError::Checksum);
                }
                self.expect = Expect::Done;
                if !self.carry.is_empty() {
                    return Err(SnapshotError::Trailing);
                }
                return Ok(Some(SnapshotPart::End(end)));
            }
            Parsed::Header(header) => SnapshotPart::Header(header),
            // Payloads are slices of the consumed bytes.
            Parsed::Message {
                sequence,
                timestamp_ns,
                subject,
                headers,
                payload,
            } => SnapshotPart::Message(SnapshotMessage {
                sequence,
                timestamp_ns,
                subject: bytes.slice(subject),
                headers: bytes.slice(headers),
                payload: bytes.slice(payload),
            }),
        };
        self.checksum = crc32c::crc32c_append(self.checksum, &bytes);
        Ok(Some(part))
    }

    /// Whether the input ended cleanly: `Err` names what was cut short.
    pub fn finish(&self) -> Result<(), SnapshotError> {
        match self.expect {
            Expect::Done => Ok(()),
            Expect::Header => Err(SnapshotError::Truncated { field: "header" }),
            Expect::Record => Err(SnapshotError::Truncated {
                field: "records (no end)",
            }),
        }
    }

    fn header(&mut self) -> Result<Option<(usize, Parsed)>, SnapshotError> {
        let mut cursor = Cursor {
            bytes: &self.carry,
            position: 0,
        };
        let Some(magic) = cursor.take(4) else {
            return Ok(None);
        };
        if magic != MAGIC {
            return Err(SnapshotError::Magic);
        }
        let (
            Some(applied_index),
            Some(applied_term),
            Some(stored_last_unix_ns),
            Some(last_sequence),
        ) = (cursor.u64(), cursor.u64(), cursor.u64(), cursor.u64())
        else {
            return Ok(None);
        };
        let Some(config_length) = cursor.u32() else {
            return Ok(None);
        };
        let config_length = bounded("config", u64::from(config_length))?;
        let Some(config) = cursor.take(config_length).map(<[u8]>::to_vec) else {
            return Ok(None);
        };
        let Some(count) = cursor.u32() else {
            return Ok(None);
        };
        if count > SNAPSHOT_CONSUMERS_MAX {
            return Err(SnapshotError::TooManyConsumers { count });
        }
        let mut consumers: Vec<SnapshotConsumer> = Vec::new();
        for _ in 0..count {
            let (Some(name_length), Some(created_unix_ns), Some(config_length), Some(state_length)) =
                (cursor.u16(), cursor.u64(), cursor.u32(), cursor.u32())
            else {
                return Ok(None);
            };
            let total = u64::from(name_length) + u64::from(config_length) + u64::from(state_length);
            if cursor.position as u64 + total > SNAPSHOT_RECORD_BYTES_MAX as u64 {
                return Err(SnapshotError::TooLarge {
                    field: "header",
                    bytes: cursor.position as u64 + total,
                });
            }
            let Some(name) = cursor.take(usize::from(name_length)).map(<[u8]>::to_vec) else {
                return Ok(None);
            };
            let name = String::from_utf8(name).map_err(|_| SnapshotError::ConsumerName)?;
            if consumers
                .last()
                .is_some_and(|previous| previous.name >= name)
            {
                return Err(SnapshotError::ConsumerName);
            }
            let (Some(config_json), Some(delivery_state)) = (
                cursor
                    .take(config_length as usize)
                    .map(Bytes::copy_from_slice),
                cursor
                    .take(state_length as usize)
                    .map(Bytes::copy_from_slice),
            ) else {
                return Ok(None);
            };
            consumers.push(SnapshotConsumer {
                name,
                created_unix_ns,
                config_json,
                delivery_state,
            });
        }
        if cursor.position > SNAPSHOT_RECORD_BYTES_MAX {
            return Err(SnapshotError::TooLarge {
                field: "header",
                bytes: cursor.position as u64,
            });
        }
        let consumed = cursor.position;
        self.expect = Expect::Record;
        self.last_sequence = last_sequence;
        self.applied_index = applied_index;
        Ok(Some((
            consumed,
            Parsed::Header(SnapshotHeader {
                applied_index,
                applied_term,
                stored_last_unix_ns,
                last_sequence,
                config_json: Bytes::from(config),
                consumers,
            }),
        )))
    }

    fn record(&mut self) -> Result<Option<(usize, Parsed)>, SnapshotError> {
        let mut cursor = Cursor {
            bytes: &self.carry,
            position: 0,
        };
        let Some(&[tag]) = cursor.take(1) else {
            return Ok(None);
        };
        match tag {
            TAG_MESSAGE => {
                let (
                    Some(sequence),
                    Some(timestamp_ns),
                    Some(subject),
                    Some(headers),
                    Some(payload),
                ) = (
                    cursor.u64(),
                    cursor.u64(),
                    cursor.u16(),
                    cursor.u32(),
                    cursor.u32(),
                )
                else {
                    return Ok(None);
                };
                if sequence <= self.previous_sequence || sequence > self.last_sequence {
                    return Err(SnapshotError::Sequence {
                        sequence,
                        previous: self.previous_sequence,
                        last: self.last_sequence,
                    });
                }
                let body = u64::from(subject) + u64::from(headers) + u64::from(payload);
                let length = bounded("message", MESSAGE_FIXED_BYTES as u64 + body)?;
                if self.carry.len() < length {
                    return Ok(None);
                }
                self.previous_sequence = sequence;
                let subject_at = MESSAGE_FIXED_BYTES;
                let headers_at = subject_at + usize::from(subject);
                let payload_at = headers_at + headers as usize;
                Ok(Some((
                    length,
                    Parsed::Message {
                        sequence,
                        timestamp_ns,
                        subject: subject_at..headers_at,
                        headers: headers_at..payload_at,
                        payload: payload_at..length,
                    },
                )))
            }
            TAG_END => {
                let (Some(converges_at), Some(count)) = (cursor.u64(), cursor.u32()) else {
                    return Ok(None);
                };
                if converges_at < self.applied_index {
                    return Err(SnapshotError::Converges {
                        converges_at,
                        index: self.applied_index,
                    });
                }
                if count > SNAPSHOT_REMOVED_RANGES_MAX {
                    return Err(SnapshotError::TooManyRanges { count });
                }
                let length = END_FIXED_BYTES + 16 * count as usize + 4;
                if self.carry.len() < length {
                    return Ok(None);
                }
                let mut removed = Vec::with_capacity(count as usize);
                let mut floor = 0u64;
                for _ in 0..count {
                    let (first, last) = (
                        cursor.u64().expect("present"),
                        cursor.u64().expect("present"),
                    );
                    if first < floor || last < first || last > self.last_sequence {
                        return Err(SnapshotError::Range {
                            first,
                            last,
                            limit: self.last_sequence,
                        });
                    }
                    floor = last.saturating_add(2);
                    removed.push((first, last));
                }
                Ok(Some((
                    length,
                    Parsed::End(SnapshotEnd {
                        converges_at,
                        removed,
                    }),
                )))
            }
            other => Err(SnapshotError::Tag(other)),
        }
    }
}

/// A whole snapshot in one buffer, as [`SnapshotDecoder`] reads it
/// (tests, fuzzing, and the simulator's disk).
pub fn encode_whole(
    header: &SnapshotHeader,
    messages: &[SnapshotMessage],
    end: &SnapshotEnd,
) -> Bytes {
    let mut out = BytesMut::new();
    out.put_slice(&header.encode());
    for message in messages {
        encode_message(
            &mut out,
            message.sequence,
            message.timestamp_ns,
            &message.subject,
            &message.headers,
            &message.payload,
        );
    }
    let checksum = crc32c::crc32c(&out);
    encode_end(&mut out, end, checksum);
    out.freeze()
}

/// Every piece of a whole snapshot, decoded.
pub fn decode_whole(data: &[u8]) -> Result<Vec<SnapshotPart>, SnapshotError> {
    let mut decoder = SnapshotDecoder::new();
    decoder.push(data)?;
    let mut parts = Vec::new();
    while let Some(part) = decoder.next_part()? {
        parts.push(part);
    }
    decoder.finish()?;
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> SnapshotHeader {
        SnapshotHeader {
            applied_index: 42,
            applied_term: 3,
            stored_last_unix_ns: 7,
            last_sequence: 9,
            config_json: Bytes::from_static(br#"{"name":"S"}"#),
            consumers: vec![SnapshotConsumer {
                name: "C".into(),
                created_unix_ns: 11,
                config_json: Bytes::from_static(br#"{"durable_name":"C"}"#),
                delivery_state: Bytes::from_static(b"state"),
            }],
        }
    }

    fn messages() -> Vec<SnapshotMessage> {
        vec![
            SnapshotMessage {
                sequence: 2,
                timestamp_ns: 5,
                subject: Bytes::from_static(b"s.a"),
                headers: Bytes::new(),
                payload: Bytes::from_static(b"one"),
            },
            SnapshotMessage {
                sequence: 8,
                timestamp_ns: 6,
                subject: Bytes::from_static(b"s.b"),
                headers: Bytes::from_static(b"NATS/1.0\r\n\r\n"),
                payload: Bytes::new(),
            },
        ]
    }

    fn end() -> SnapshotEnd {
        SnapshotEnd {
            converges_at: 50,
            removed: vec![(1, 2), (5, 5)],
        }
    }

    fn sample() -> Bytes {
        encode_whole(&header(), &messages(), &end())
    }

    fn expected_parts() -> Vec<SnapshotPart> {
        let mut parts = vec![SnapshotPart::Header(header())];
        parts.extend(messages().into_iter().map(SnapshotPart::Message));
        parts.push(SnapshotPart::End(end()));
        parts
    }

    #[test]
    fn round_trips_and_pins_its_layout() {
        let bytes = sample();
        assert_eq!(&bytes[..4], b"TSS2");
        assert_eq!(&bytes[4..12], &42u64.to_le_bytes());
        assert_eq!(&bytes[28..36], &9u64.to_le_bytes(), "last sequence");
        assert_eq!(&bytes[36..40], &12u32.to_le_bytes(), "config length");
        assert_eq!(&bytes[52..56], &1u32.to_le_bytes(), "consumer count");
        let records_at = 56 + (18 + 1 + 20 + 5);
        assert_eq!(bytes[records_at], 1, "a message record");
        assert_eq!(&bytes[records_at + 1..records_at + 9], &2u64.to_le_bytes());
        let end_at = records_at + (27 + 3 + 3) + (27 + 3 + 12);
        assert_eq!(bytes[end_at], 2, "the end record");
        assert_eq!(&bytes[end_at + 1..end_at + 9], &50u64.to_le_bytes());
        assert_eq!(&bytes[end_at + 9..end_at + 13], &2u32.to_le_bytes());
        assert_eq!(bytes.len(), end_at + 13 + 32 + 4);
        let checksum = crc32c::crc32c(&bytes[..bytes.len() - 4]);
        assert_eq!(&bytes[bytes.len() - 4..], &checksum.to_le_bytes());
        assert_eq!(decode_whole(&bytes), Ok(expected_parts()));
    }

    #[test]
    fn any_split_into_chunks_decodes_the_same() {
        let bytes = sample();
        for chunk in [1, 2, 3, 7, 64] {
            let mut decoder = SnapshotDecoder::new();
            let mut parts = Vec::new();
            for piece in bytes.chunks(chunk) {
                decoder.push(piece).expect("in order");
                while let Some(part) = decoder.next_part().expect("valid") {
                    parts.push(part);
                }
            }
            decoder.finish().expect("complete");
            assert_eq!(parts, expected_parts(), "chunks of {chunk}");
        }
    }

    #[test]
    fn every_damage_is_refused() {
        let bytes = sample();
        for position in 0..bytes.len() {
            let mut damaged = bytes.to_vec();
            damaged[position] ^= 0x10;
            assert!(
                decode_whole(&damaged).is_err(),
                "a flipped bit at {position} decoded"
            );
        }
        for length in 0..bytes.len() {
            assert!(decode_whole(&bytes[..length]).is_err());
        }
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert_eq!(decode_whole(&longer), Err(SnapshotError::Trailing));
    }

    #[test]
    fn lengths_are_bounded_before_buffering() {
        let mut huge = sample()[..36].to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        let mut decoder = SnapshotDecoder::new();
        decoder.push(&huge).unwrap();
        assert_eq!(
            decoder.next_part(),
            Err(SnapshotError::TooLarge {
                field: "config",
                bytes: u64::from(u32::MAX)
            })
        );
    }
}
