//! A stream replica's snapshot: what a follower that lags behind the
//! leader's compacted log installs instead of the entries. Its messages,
//! its durable consumers, its config and where it stands in the log; byte
//! for byte (all integers little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `TSS1` |
//! | 8 | applied index (the snapshot's Raft index) |
//! | 8 | applied term |
//! | 8 | time of the last message applied (ns since the Unix epoch) |
//! | 8 | last sequence (may be past the last message: trailing deletes) |
//! | 4 | config length, then the config's stored JSON |
//! | 4 | message count, then per message, in increasing sequence: |
//! | 8 | · sequence |
//! | 8 | · timestamp (ns) |
//! | 2 | · subject length, |
//! | 4 | · headers length, |
//! | 4 | · payload length, then subject, headers, payload |
//! | 4 | consumer count, then per consumer, in increasing name order: |
//! | 2 | · name length, |
//! | 8 | · created (ns since the Unix epoch), |
//! | 4 | · config length, |
//! | 4 | · delivery state length, then name (UTF-8), config's stored JSON, delivery state (`delivery.rs`) |
//! | 4 | CRC-32C of every byte before it |
//!
//! Decoding is strict (magic, lengths against the bytes present and
//! [`SNAPSHOT_MESSAGES_MAX`] / [`SNAPSHOT_CONSUMERS_MAX`], sequences
//! increasing and ≤ the last, names increasing and UTF-8, no trailing
//! bytes, the checksum) and allocates nothing before checking.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Messages one snapshot may hold.
pub const SNAPSHOT_MESSAGES_MAX: u32 = 1 << 24;
/// Durable consumers one snapshot may hold.
pub const SNAPSHOT_CONSUMERS_MAX: u32 = 1 << 16;
/// Bytes of a message's fixed fields, and of a consumer's.
const MESSAGE_FIXED_BYTES: usize = 26;
const CONSUMER_FIXED_BYTES: usize = 18;

const MAGIC: &[u8; 4] = b"TSS1";

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSnapshot {
    pub applied_index: u64,
    pub applied_term: u64,
    pub stored_last_unix_ns: u64,
    pub last_sequence: u64,
    pub config_json: Bytes,
    pub messages: Vec<SnapshotMessage>,
    /// In increasing name order.
    pub consumers: Vec<SnapshotConsumer>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    #[error("stream snapshot: not a snapshot (magic)")]
    Magic,
    #[error("stream snapshot: {field} runs past the end")]
    Truncated { field: &'static str },
    #[error("stream snapshot: {count} messages, more than {SNAPSHOT_MESSAGES_MAX}")]
    TooManyMessages { count: u32 },
    #[error("stream snapshot: sequence {sequence} after {previous} or past the last {last}")]
    Sequence {
        sequence: u64,
        previous: u64,
        last: u64,
    },
    #[error("stream snapshot: {count} consumers, more than {SNAPSHOT_CONSUMERS_MAX}")]
    TooManyConsumers { count: u32 },
    #[error("stream snapshot: consumer names not increasing or not UTF-8")]
    ConsumerName,
    #[error("stream snapshot: {count} bytes after the checksum")]
    Trailing { count: usize },
    #[error("stream snapshot: checksum mismatch")]
    Checksum,
}

impl StreamSnapshot {
    pub fn encode(&self) -> Bytes {
        let messages_bytes: usize = self
            .messages
            .iter()
            .map(|message| {
                MESSAGE_FIXED_BYTES
                    + message.subject.len()
                    + message.headers.len()
                    + message.payload.len()
            })
            .sum();
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
        let mut out =
            BytesMut::with_capacity(52 + self.config_json.len() + messages_bytes + consumers_bytes);
        out.put_slice(MAGIC);
        out.put_u64_le(self.applied_index);
        out.put_u64_le(self.applied_term);
        out.put_u64_le(self.stored_last_unix_ns);
        out.put_u64_le(self.last_sequence);
        out.put_u32_le(u32::try_from(self.config_json.len()).expect("a config is small"));
        out.put_slice(&self.config_json);
        let count = u32::try_from(self.messages.len()).expect("bounded by the store");
        assert!(
            count <= SNAPSHOT_MESSAGES_MAX,
            "snapshot of {count} messages"
        );
        out.put_u32_le(count);
        for message in &self.messages {
            out.put_u64_le(message.sequence);
            out.put_u64_le(message.timestamp_ns);
            out.put_u16_le(u16::try_from(message.subject.len()).expect("subjects are short"));
            out.put_u32_le(u32::try_from(message.headers.len()).expect("bounded headers"));
            out.put_u32_le(u32::try_from(message.payload.len()).expect("bounded payloads"));
            out.put_slice(&message.subject);
            out.put_slice(&message.headers);
            out.put_slice(&message.payload);
        }
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
        let checksum = crc32c::crc32c(&out);
        out.put_u32_le(checksum);
        out.freeze()
    }

    /// Decodes `data`; payloads are slices of it.
    pub fn decode(data: &Bytes) -> Result<StreamSnapshot, SnapshotError> {
        if data.len() < 4 {
            return Err(SnapshotError::Truncated { field: "checksum" });
        }
        let body_end = data.len() - 4;
        let mut reader = Reader {
            data: data.slice(..body_end),
        };
        if reader.take(4, "magic")? != MAGIC[..] {
            return Err(SnapshotError::Magic);
        }
        let applied_index = reader.u64("applied index")?;
        let applied_term = reader.u64("applied term")?;
        let stored_last_unix_ns = reader.u64("last time")?;
        let last_sequence = reader.u64("last sequence")?;
        let config_length = reader.u32("config length")? as usize;
        let config_json = reader.take(config_length, "config")?;
        let count = reader.u32("message count")?;
        if count > SNAPSHOT_MESSAGES_MAX {
            return Err(SnapshotError::TooManyMessages { count });
        }
        // Every message takes at least 26 bytes: the count is checked
        // against what is there before anything is allocated.
        if (count as usize).saturating_mul(MESSAGE_FIXED_BYTES) > reader.data.len() {
            return Err(SnapshotError::Truncated { field: "messages" });
        }
        let mut messages = Vec::with_capacity(count as usize);
        let mut previous = 0;
        for _ in 0..count {
            let sequence = reader.u64("sequence")?;
            let timestamp_ns = reader.u64("timestamp")?;
            let subject_length = reader.u16("subject length")? as usize;
            let headers_length = reader.u32("headers length")? as usize;
            let payload_length = reader.u32("payload length")? as usize;
            if sequence <= previous || sequence > last_sequence {
                return Err(SnapshotError::Sequence {
                    sequence,
                    previous,
                    last: last_sequence,
                });
            }
            previous = sequence;
            messages.push(SnapshotMessage {
                sequence,
                timestamp_ns,
                subject: reader.take(subject_length, "subject")?,
                headers: reader.take(headers_length, "headers")?,
                payload: reader.take(payload_length, "payload")?,
            });
        }
        let count = reader.u32("consumer count")?;
        if count > SNAPSHOT_CONSUMERS_MAX {
            return Err(SnapshotError::TooManyConsumers { count });
        }
        if (count as usize).saturating_mul(CONSUMER_FIXED_BYTES) > reader.data.len() {
            return Err(SnapshotError::Truncated { field: "consumers" });
        }
        let mut consumers: Vec<SnapshotConsumer> = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let name_length = reader.u16("consumer name length")? as usize;
            let created_unix_ns = reader.u64("consumer created")?;
            let config_length = reader.u32("consumer config length")? as usize;
            let state_length = reader.u32("consumer state length")? as usize;
            let name = reader.take(name_length, "consumer name")?;
            let name = String::from_utf8(name.to_vec()).map_err(|_| SnapshotError::ConsumerName)?;
            if consumers
                .last()
                .is_some_and(|previous| previous.name >= name)
            {
                return Err(SnapshotError::ConsumerName);
            }
            consumers.push(SnapshotConsumer {
                name,
                created_unix_ns,
                config_json: reader.take(config_length, "consumer config")?,
                delivery_state: reader.take(state_length, "consumer state")?,
            });
        }
        if !reader.data.is_empty() {
            return Err(SnapshotError::Trailing {
                count: reader.data.len(),
            });
        }
        let stored = (&data[body_end..]).get_u32_le();
        if crc32c::crc32c(&data[..body_end]) != stored {
            return Err(SnapshotError::Checksum);
        }
        Ok(StreamSnapshot {
            applied_index,
            applied_term,
            stored_last_unix_ns,
            last_sequence,
            config_json,
            messages,
            consumers,
        })
    }
}

struct Reader {
    data: Bytes,
}

impl Reader {
    fn take(&mut self, length: usize, field: &'static str) -> Result<Bytes, SnapshotError> {
        if self.data.len() < length {
            return Err(SnapshotError::Truncated { field });
        }
        Ok(self.data.split_to(length))
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, SnapshotError> {
        Ok(self.take(2, field)?.get_u16_le())
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, SnapshotError> {
        Ok(self.take(4, field)?.get_u32_le())
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, SnapshotError> {
        Ok(self.take(8, field)?.get_u64_le())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StreamSnapshot {
        StreamSnapshot {
            applied_index: 42,
            applied_term: 3,
            stored_last_unix_ns: 7,
            last_sequence: 9,
            config_json: Bytes::from_static(br#"{"name":"S"}"#),
            messages: vec![
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
            ],
            consumers: vec![SnapshotConsumer {
                name: "C".into(),
                created_unix_ns: 11,
                config_json: Bytes::from_static(br#"{"durable_name":"C"}"#),
                delivery_state: Bytes::from_static(b"state"),
            }],
        }
    }

    #[test]
    fn round_trips_and_pins_its_layout() {
        let snapshot = sample();
        let bytes = snapshot.encode();
        assert_eq!(&bytes[..4], b"TSS1");
        assert_eq!(&bytes[4..12], &42u64.to_le_bytes());
        assert_eq!(&bytes[28..36], &9u64.to_le_bytes(), "last sequence");
        assert_eq!(&bytes[36..40], &12u32.to_le_bytes(), "config length");
        assert_eq!(&bytes[52..56], &2u32.to_le_bytes(), "message count");
        assert_eq!(&bytes[56..64], &2u64.to_le_bytes(), "first sequence");
        let consumers_at = 56 + (26 + 3 + 3) + (26 + 3 + 12);
        assert_eq!(
            &bytes[consumers_at..consumers_at + 4],
            &1u32.to_le_bytes(),
            "consumer count"
        );
        assert_eq!(
            bytes.len(),
            consumers_at + 4 + (18 + 1 + 20 + 5) + 4,
            "header, two messages, one consumer, checksum"
        );
        assert_eq!(StreamSnapshot::decode(&bytes), Ok(snapshot));
    }

    #[test]
    fn every_damage_is_refused() {
        let bytes = sample().encode();
        for position in 0..bytes.len() {
            let mut damaged = bytes.to_vec();
            damaged[position] ^= 0x10;
            assert!(
                StreamSnapshot::decode(&Bytes::from(damaged)).is_err(),
                "a flipped bit at {position} decoded"
            );
        }
        for length in 0..bytes.len() {
            assert!(StreamSnapshot::decode(&bytes.slice(..length)).is_err());
        }
        let mut longer = bytes.to_vec();
        longer.push(0);
        assert!(StreamSnapshot::decode(&Bytes::from(longer)).is_err());
    }
}
