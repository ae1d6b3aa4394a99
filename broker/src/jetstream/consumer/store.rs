//! A stream's `consumers` file: every durable consumer as of a checkpoint
//! (its stored config JSON, creation time and its last APPLIED delivery
//! state snapshot), so the journal may recycle the log entries that built
//! them. Written atomically by the checkpoint before the `raft` file
//! (temporary file, sync, rename, directory sync; `persist::replace`), read
//! once when the stream opens. The consumer entries replayed from the
//! journal after the checkpoint then apply on top.
//!
//! Fail closed: a file that fails any check stops the stream with an error;
//! recovery never drops or rewrites it.
//!
//! Layout (little-endian), documented in docs/jetstream-format.md:
//!
//! ```text
//! header (40): magic "TERNCONS" (8) | version u32 = 1 | count u32 | applied_index u64
//!              | body_bytes u64 | crc32c u32 of bytes 0..32 and the body | reserved u32 = 0
//! body: count × { name_bytes u32 | json_bytes u32 | state_bytes u32 | reserved u32 = 0
//!                 | created_unix_ns u64 | name | json | state }, names strictly ascending
//! ```
//! Zero-padded to a 4096-byte block.

use tern_storage::block_store::StoreFiles;
use tern_storage::format::{checksum, checksum_append};

use super::super::entry::{CONFIG_BYTES_MAX, CONSUMER_NAME_BYTES_MAX, CONSUMER_STATE_BYTES_MAX};
use super::super::persist::{corrupt, read_if_present, replace, PersistError};

pub const CONSUMERS_FILE: &str = "consumers";
const MAGIC: &[u8; 8] = b"TERNCONS";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 40;
const CONSUMER_HEADER_BYTES: usize = 24;
/// Durable consumers one stream's file holds at most.
pub const CONSUMERS_MAX: usize = 1 << 16;

/// One durable consumer as the checkpoint saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredConsumer {
    pub name: String,
    pub created_unix_ns: u64,
    /// `ConsumerConfig::to_stored_json`.
    pub json: Vec<u8>,
    /// `DeliveryState::encode` of the last snapshot applied.
    pub state: Vec<u8>,
}

/// The whole file: the applied index it was taken at (every consumer entry
/// up to it is reflected) and the consumers, ascending by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredConsumers {
    pub applied_index: u64,
    pub consumers: Vec<StoredConsumer>,
}

pub fn encode(stored: &StoredConsumers) -> Vec<u8> {
    assert!(stored.consumers.len() <= CONSUMERS_MAX);
    assert!(
        stored
            .consumers
            .windows(2)
            .all(|pair| pair[0].name < pair[1].name),
        "names ascend"
    );
    let mut body = Vec::new();
    for consumer in &stored.consumers {
        assert!(!consumer.name.is_empty() && consumer.name.len() <= CONSUMER_NAME_BYTES_MAX);
        assert!(consumer.json.len() <= CONFIG_BYTES_MAX);
        assert!(consumer.state.len() <= CONSUMER_STATE_BYTES_MAX);
        body.extend_from_slice(&(consumer.name.len() as u32).to_le_bytes());
        body.extend_from_slice(&(consumer.json.len() as u32).to_le_bytes());
        body.extend_from_slice(&(consumer.state.len() as u32).to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        body.extend_from_slice(&consumer.created_unix_ns.to_le_bytes());
        body.extend_from_slice(consumer.name.as_bytes());
        body.extend_from_slice(&consumer.json);
        body.extend_from_slice(&consumer.state);
    }
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(stored.consumers.len() as u32).to_le_bytes());
    out.extend_from_slice(&stored.applied_index.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let sum = checksum_append(checksum(&out[0..32]), &body);
    out.extend_from_slice(&sum.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&body);
    out
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The file's consumers, verified (what follows the body is padding and
/// not read).
pub fn decode(bytes: &[u8]) -> Result<StoredConsumers, PersistError> {
    let bad = |reason: String| corrupt(CONSUMERS_FILE, reason);
    if bytes.len() < HEADER_BYTES || &bytes[0..8] != MAGIC {
        return Err(bad("bad magic".into()));
    }
    let body_bytes = u64_at(bytes, 24);
    if body_bytes > (bytes.len() - HEADER_BYTES) as u64 {
        return Err(bad(format!("body of {body_bytes} bytes is past the end")));
    }
    let body = &bytes[HEADER_BYTES..HEADER_BYTES + body_bytes as usize];
    if u32_at(bytes, 32) != checksum_append(checksum(&bytes[0..32]), body) {
        return Err(bad("checksum mismatch".into()));
    }
    if u32_at(bytes, 36) != 0 {
        return Err(bad("reserved bytes are not zero".into()));
    }
    let version = u32_at(bytes, 8);
    if version != VERSION {
        return Err(bad(format!("unknown version {version}")));
    }
    let count = u32_at(bytes, 12) as usize;
    if count > CONSUMERS_MAX {
        return Err(bad(format!("{count} consumers is over the limit")));
    }
    let applied_index = u64_at(bytes, 16);
    let mut consumers: Vec<StoredConsumer> = Vec::with_capacity(count);
    let mut offset = 0;
    for _ in 0..count {
        if body.len() - offset < CONSUMER_HEADER_BYTES {
            return Err(bad("consumer truncated".into()));
        }
        let name_bytes = u32_at(body, offset) as usize;
        let json_bytes = u32_at(body, offset + 4) as usize;
        let state_bytes = u32_at(body, offset + 8) as usize;
        let created_unix_ns = u64_at(body, offset + 16);
        if u32_at(body, offset + 12) != 0 {
            return Err(bad("reserved bytes are not zero".into()));
        }
        if name_bytes == 0
            || name_bytes > CONSUMER_NAME_BYTES_MAX
            || json_bytes > CONFIG_BYTES_MAX
            || state_bytes > CONSUMER_STATE_BYTES_MAX
        {
            return Err(bad("consumer field length out of range".into()));
        }
        offset += CONSUMER_HEADER_BYTES;
        if body.len() - offset < name_bytes + json_bytes + state_bytes {
            return Err(bad("consumer truncated".into()));
        }
        let name = std::str::from_utf8(&body[offset..offset + name_bytes])
            .map_err(|_| bad("consumer name is not UTF-8".into()))?
            .to_string();
        offset += name_bytes;
        let json = body[offset..offset + json_bytes].to_vec();
        offset += json_bytes;
        let state = body[offset..offset + state_bytes].to_vec();
        offset += state_bytes;
        if consumers.last().is_some_and(|last| last.name >= name) {
            return Err(bad("consumer names do not ascend".into()));
        }
        consumers.push(StoredConsumer {
            name,
            created_unix_ns,
            json,
            state,
        });
    }
    if offset != body.len() {
        return Err(bad(format!("{} trailing bytes", body.len() - offset)));
    }
    Ok(StoredConsumers {
        applied_index,
        consumers,
    })
}

/// The checksum a verified file carries (what the `raft` file records of
/// the consumers file a checkpoint wrote).
pub(in crate::jetstream) fn file_checksum(bytes: &[u8]) -> u32 {
    u32_at(bytes, 32)
}

/// Writes the file; returns its checksum.
pub async fn write<S: StoreFiles>(
    files: &S,
    stored: &StoredConsumers,
) -> Result<u32, PersistError> {
    let bytes = encode(stored);
    replace(files, CONSUMERS_FILE, &bytes)
        .await
        .map_err(PersistError::Io)?;
    Ok(file_checksum(&bytes))
}

/// The file's consumers and its checksum; `Ok(None)`: no file.
pub async fn read<S: StoreFiles>(
    files: &S,
) -> Result<Option<(StoredConsumers, u32)>, PersistError> {
    read_if_present(files, CONSUMERS_FILE)
        .await?
        .map(|bytes| decode(&bytes).map(|stored| (stored, file_checksum(&bytes))))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StoredConsumers {
        StoredConsumers {
            applied_index: 77,
            consumers: vec![
                StoredConsumer {
                    name: "a".into(),
                    created_unix_ns: 5,
                    json: br#"{"durable_name":"a"}"#.to_vec(),
                    state: vec![1, 2, 3, 4],
                },
                StoredConsumer {
                    name: "worker".into(),
                    created_unix_ns: 6,
                    json: br#"{"durable_name":"worker"}"#.to_vec(),
                    state: vec![9; 41],
                },
            ],
        }
    }

    #[test]
    fn round_trips_with_and_without_padding() {
        let stored = sample();
        let encoded = encode(&stored);
        assert_eq!(decode(&encoded), Ok(stored.clone()));
        let mut padded = encoded;
        padded.resize(8192, 0);
        assert_eq!(decode(&padded), Ok(stored));
        let empty = StoredConsumers::default();
        assert_eq!(decode(&encode(&empty)), Ok(empty));
    }

    #[test]
    fn the_header_layout_is_pinned() {
        let encoded = encode(&StoredConsumers {
            applied_index: 3,
            consumers: Vec::new(),
        });
        assert_eq!(&encoded[0..8], b"TERNCONS");
        assert_eq!(u32_at(&encoded, 8), 1);
        assert_eq!(u32_at(&encoded, 12), 0);
        assert_eq!(u64_at(&encoded, 16), 3);
        assert_eq!(u64_at(&encoded, 24), 0);
        assert_eq!(u32_at(&encoded, 32), checksum(&encoded[0..32]));
        assert_eq!(encoded.len(), 40);
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_caught() {
        let encoded = encode(&sample());
        for bit in 0..encoded.len() * 8 {
            let mut flipped = encoded.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&flipped).is_err(), "bit {bit} flipped");
        }
        for cut in 0..encoded.len() {
            assert!(decode(&encoded[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn out_of_order_names_are_refused_even_when_checksummed() {
        let mut stored = sample();
        stored.consumers.swap(0, 1);
        // Built by hand: `encode` asserts the order.
        let mut body = Vec::new();
        for consumer in &stored.consumers {
            body.extend_from_slice(&(consumer.name.len() as u32).to_le_bytes());
            body.extend_from_slice(&(consumer.json.len() as u32).to_le_bytes());
            body.extend_from_slice(&(consumer.state.len() as u32).to_le_bytes());
            body.extend_from_slice(&0u32.to_le_bytes());
            body.extend_from_slice(&consumer.created_unix_ns.to_le_bytes());
            body.extend_from_slice(consumer.name.as_bytes());
            body.extend_from_slice(&consumer.json);
            body.extend_from_slice(&consumer.state);
        }
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&2u32.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        let sum = checksum_append(checksum(&out[0..32]), &body);
        out.extend_from_slice(&sum.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&body);
        assert!(matches!(decode(&out), Err(PersistError::Corrupt { .. })));
    }

    #[test]
    fn written_atomically_and_read_back() {
        let files = tern_storage::block_store::MemoryFiles::new();
        let executor = glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 20)
            .make()
            .unwrap();
        executor.run(async move {
            assert_eq!(read(&files).await, Ok(None));
            write(&files, &StoredConsumers::default()).await.unwrap();
            let checksum = write(&files, &sample()).await.unwrap();
            assert_eq!(read(&files).await, Ok(Some((sample(), checksum))));
            files.overwrite(CONSUMERS_FILE, 50, b"X");
            let files = files.crash(1);
            assert!(matches!(
                read(&files).await,
                Err(PersistError::Corrupt { .. })
            ));
        });
    }
}
