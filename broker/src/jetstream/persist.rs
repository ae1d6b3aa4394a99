//! A stream's small durable files, each checksummed and replaced atomically
//! (temporary file, sync, rename, directory sync), through the block store's
//! file abstraction (O_DIRECT files, or memory in tests):
//!
//! - `config`: the stream's configuration and creation time. A config that
//!   fails its checksum stops that stream with an error; it is never
//!   deleted or rewritten by recovery (fail closed).
//! - `raft`: the checkpoint, i.e. what the journal no longer has once it
//!   recycles: term, vote, the index/term the block store holds, the block
//!   store's manifest (which files, how far, what they hold: so a deleted
//!   or shortened file is found, not read as a clean end), and which
//!   `consumers` file goes with it. Written when the stream is created, so
//!   a stream without one is damaged, never "not checkpointed yet".
//!
//! Layouts (little-endian), documented in docs/jetstream-format.md:
//!
//! ```text
//! config: magic "TERNSCFG" (8) | version u32 = 1 | json_bytes u32 | created_unix_ns u64
//!         | crc32c u32 of bytes 0..24 and the JSON | reserved u32 = 0 | JSON (stored config)
//! raft:   magic "TERNRAFT" (8) | version u32 = 2 | flags u32 (1: consumers file) | term u64
//!         | vote u64 | applied_index u64 | applied_term u64 | last_unix_ns u64
//!         | consumers_applied_index u64 | consumers_checksum u32 | manifest_bytes u32
//!         | manifest | crc32c u32 of everything before it
//! ```
//! Both files are zero-padded to the 4096-byte block.

use tern_storage::block_store::{Manifest, StoreFile, StoreFiles};
use tern_storage::format::{checksum, checksum_append};
use tern_storage::{DeviceError, IoBuffer};

const BLOCK_BYTES: usize = 4096;
const CONFIG_MAGIC: &[u8; 8] = b"TERNSCFG";
const RAFT_MAGIC: &[u8; 8] = b"TERNRAFT";
const VERSION: u32 = 1;
/// Version 2 of the raft file added the manifest and the consumers file.
const RAFT_VERSION: u32 = 3;
/// The layout before the messages directory's generation (read, never
/// written).
const RAFT_VERSION_WITHOUT_GENERATION: u32 = 2;
const RAFT_FLAG_CONSUMERS: u32 = 1;
const CONFIG_HEADER_BYTES: usize = 32;
pub const CONFIG_FILE: &str = "config";
pub const RAFT_FILE: &str = "raft";
/// Largest stored config (nats-server bounds metadata to 128 KiB).
pub const CONFIG_JSON_BYTES_MAX: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PersistError {
    #[error("{0}")]
    Io(DeviceError),
    #[error("{file} is corrupt: {reason}")]
    Corrupt { file: &'static str, reason: String },
}

/// Why a stream's directory could not be written, moved aside or removed.
#[derive(Debug, thiserror::Error)]
pub enum StreamFilesError {
    /// Building or removing it: the text is the cause alone, as a
    /// client's failed delete has always been told it.
    #[error("{source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// The new directory renamed into place.
    #[error("{}: {source}", path.display())]
    Rename {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A damaged directory moved aside, kept for the operator.
    #[error("moving {} aside: {source}", path.display())]
    MoveAside {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Files(#[from] DeviceError),
    #[error(transparent)]
    Persist(#[from] PersistError),
}

impl StreamFilesError {
    /// The error of an I/O operation on `path`.
    pub fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StreamFilesError {
        let path = path.to_path_buf();
        move |source| StreamFilesError::Io { path, source }
    }
}

/// What the `raft` file holds: the stream's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftState {
    pub term: u64,
    pub vote: u64,
    pub applied_index: u64,
    pub applied_term: u64,
    /// Time of the last message applied (stream info's `last_ts`, which
    /// outlives the message).
    pub last_unix_ns: u64,
    /// The `consumers` file that goes with this checkpoint, if one exists.
    pub consumers: Option<ConsumersReference>,
    /// The block store as of `applied_index`.
    pub manifest: Manifest,
    /// Which directory holds the block store: `messages` (0), or
    /// `messages.<generation>` once a snapshot from a leader replaced it
    /// ([`messages_directory`]).
    pub generation: u64,
}

/// The block store's directory in a stream directory for `generation`.
pub fn messages_directory(generation: u64) -> String {
    match generation {
        0 => "messages".to_string(),
        generation => format!("messages.{generation}"),
    }
}

/// The generation a stream directory's entry named `name` holds, if it is
/// a messages directory.
pub fn messages_generation(name: &str) -> Option<u64> {
    match name {
        "messages" => Some(0),
        name => name
            .strip_prefix("messages.")?
            .parse()
            .ok()
            .filter(|generation| *generation > 0),
    }
}

/// Which `consumers` file a checkpoint wrote: its applied index and the
/// checksum it carries, so a deleted or stale file is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumersReference {
    pub applied_index: u64,
    pub checksum: u32,
}

impl RaftState {
    /// The checkpoint of a stream just created: nothing applied, an empty
    /// block store whose first sequence is `first_sequence`.
    pub fn created(first_sequence: u64) -> RaftState {
        RaftState {
            term: 0,
            vote: 0,
            applied_index: 0,
            applied_term: 0,
            last_unix_ns: 0,
            consumers: None,
            manifest: Manifest::new(first_sequence),
            generation: 0,
        }
    }
}

pub(super) fn corrupt(file: &'static str, reason: impl Into<String>) -> PersistError {
    PersistError::Corrupt {
        file,
        reason: reason.into(),
    }
}

pub(super) async fn replace<S: StoreFiles>(
    files: &S,
    name: &str,
    bytes: &[u8],
) -> Result<(), DeviceError> {
    let temporary = format!("{name}.tmp");
    let file = files.create(&temporary).await?;
    let length = bytes.len().div_ceil(BLOCK_BYTES).max(1) * BLOCK_BYTES;
    let mut buffer = file.allocate(length);
    let out = buffer.bytes_mut();
    out.fill(0);
    out[..bytes.len()].copy_from_slice(bytes);
    file.write(0, buffer).await?;
    file.sync().await?;
    files.rename(&temporary, name).await?;
    files.sync_directory().await
}

/// The whole of file `name`, `None` if there is no such file.
pub(super) async fn read_if_present<S: StoreFiles>(
    files: &S,
    name: &str,
) -> Result<Option<Vec<u8>>, PersistError> {
    if !files.names().iter().any(|present| present == name) {
        return Ok(None);
    }
    read_all(files, name)
        .await
        .map(Some)
        .map_err(PersistError::Io)
}

/// The whole of file `name`, whatever its size (reads are whole blocks: a
/// file cut to an odd size is read up to its end, and its checks fail).
pub(super) async fn read_all<S: StoreFiles>(files: &S, name: &str) -> Result<Vec<u8>, DeviceError> {
    let file = files.open(name).await?;
    let size = file.size() as usize;
    let mut bytes = Vec::with_capacity(size);
    let mut offset = 0;
    while offset < size {
        let want = (size - offset).min(1 << 20).next_multiple_of(BLOCK_BYTES);
        let chunk = file.read(offset as u64, want).await?;
        let chunk = chunk.as_ref();
        if chunk.is_empty() {
            break;
        }
        bytes.extend_from_slice(chunk);
        offset += chunk.len();
    }
    bytes.truncate(size);
    Ok(bytes)
}

pub fn encode_config(json: &[u8], created_unix_ns: u64) -> Vec<u8> {
    assert!(json.len() <= CONFIG_JSON_BYTES_MAX);
    let mut out = Vec::with_capacity(CONFIG_HEADER_BYTES + json.len());
    out.extend_from_slice(CONFIG_MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&created_unix_ns.to_le_bytes());
    let sum = checksum_append(checksum(&out[0..24]), json);
    out.extend_from_slice(&sum.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(json);
    out
}

/// The stored JSON and creation time, verified.
pub fn decode_config(bytes: &[u8]) -> Result<(Vec<u8>, u64), PersistError> {
    if bytes.len() < CONFIG_HEADER_BYTES || &bytes[0..8] != CONFIG_MAGIC {
        return Err(corrupt(CONFIG_FILE, "bad magic"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(corrupt(CONFIG_FILE, format!("unknown version {version}")));
    }
    let json_bytes = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize;
    if json_bytes > CONFIG_JSON_BYTES_MAX || CONFIG_HEADER_BYTES + json_bytes > bytes.len() {
        return Err(corrupt(
            CONFIG_FILE,
            format!("length {json_bytes} out of range"),
        ));
    }
    let created_unix_ns = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let stored = u32::from_le_bytes(bytes[24..28].try_into().expect("4 bytes"));
    let json = &bytes[CONFIG_HEADER_BYTES..CONFIG_HEADER_BYTES + json_bytes];
    if stored != checksum_append(checksum(&bytes[0..24]), json) {
        return Err(corrupt(CONFIG_FILE, "checksum mismatch"));
    }
    Ok((json.to_vec(), created_unix_ns))
}

const RAFT_HEADER_BYTES: usize = 80;
const RAFT_HEADER_BYTES_WITHOUT_GENERATION: usize = 72;

pub fn encode_raft(state: &RaftState) -> Vec<u8> {
    let manifest = state.manifest.encode();
    let mut out = vec![0u8; RAFT_HEADER_BYTES];
    out[0..8].copy_from_slice(RAFT_MAGIC);
    out[8..12].copy_from_slice(&RAFT_VERSION.to_le_bytes());
    let flags = if state.consumers.is_some() {
        RAFT_FLAG_CONSUMERS
    } else {
        0
    };
    out[12..16].copy_from_slice(&flags.to_le_bytes());
    out[16..24].copy_from_slice(&state.term.to_le_bytes());
    out[24..32].copy_from_slice(&state.vote.to_le_bytes());
    out[32..40].copy_from_slice(&state.applied_index.to_le_bytes());
    out[40..48].copy_from_slice(&state.applied_term.to_le_bytes());
    out[48..56].copy_from_slice(&state.last_unix_ns.to_le_bytes());
    let consumers = state.consumers.unwrap_or(ConsumersReference {
        applied_index: 0,
        checksum: 0,
    });
    out[56..64].copy_from_slice(&consumers.applied_index.to_le_bytes());
    out[64..68].copy_from_slice(&consumers.checksum.to_le_bytes());
    out[68..76].copy_from_slice(&state.generation.to_le_bytes());
    out[76..80].copy_from_slice(&(manifest.len() as u32).to_le_bytes());
    out.extend_from_slice(&manifest);
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Decodes and verifies a `raft` file (what follows it is zero padding).
pub fn decode_raft(bytes: &[u8]) -> Result<RaftState, PersistError> {
    if bytes.len() < RAFT_HEADER_BYTES_WITHOUT_GENERATION + 4 || &bytes[0..8] != RAFT_MAGIC {
        return Err(corrupt(RAFT_FILE, "bad magic"));
    }
    let u32_field = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let field = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    // Version 2 had no generation (its manifest length at 68); the checksum
    // is checked before anything read here is trusted.
    let header_bytes = match u32_field(8) {
        RAFT_VERSION_WITHOUT_GENERATION => RAFT_HEADER_BYTES_WITHOUT_GENERATION,
        _ if bytes.len() < RAFT_HEADER_BYTES + 4 => return Err(corrupt(RAFT_FILE, "too short")),
        _ => RAFT_HEADER_BYTES,
    };
    let manifest_bytes = u32_field(header_bytes - 4) as usize;
    let end = header_bytes + manifest_bytes;
    if end + 4 > bytes.len() {
        return Err(corrupt(
            RAFT_FILE,
            format!("manifest of {manifest_bytes} bytes runs past the end of the file"),
        ));
    }
    if u32_field(end) != checksum(&bytes[..end]) {
        return Err(corrupt(RAFT_FILE, "checksum mismatch"));
    }
    if bytes[end + 4..].iter().any(|&byte| byte != 0) {
        return Err(corrupt(RAFT_FILE, "bytes after the checksum are not zero"));
    }
    let version = u32_field(8);
    if version != RAFT_VERSION && version != RAFT_VERSION_WITHOUT_GENERATION {
        return Err(corrupt(RAFT_FILE, format!("unknown version {version}")));
    }
    let flags = u32_field(12);
    if flags & !RAFT_FLAG_CONSUMERS != 0 {
        return Err(corrupt(RAFT_FILE, format!("unknown flags {flags:#x}")));
    }
    let manifest = Manifest::decode(&bytes[header_bytes..end])
        .map_err(|error| corrupt(RAFT_FILE, format!("manifest: {error}")))?;
    Ok(RaftState {
        term: field(16),
        vote: field(24),
        applied_index: field(32),
        applied_term: field(40),
        last_unix_ns: field(48),
        consumers: (flags & RAFT_FLAG_CONSUMERS != 0).then(|| ConsumersReference {
            applied_index: field(56),
            checksum: u32_field(64),
        }),
        manifest,
        generation: match version {
            RAFT_VERSION_WITHOUT_GENERATION => 0,
            _ => field(68),
        },
    })
}

pub async fn write_config<S: StoreFiles>(
    files: &S,
    json: &[u8],
    created_unix_ns: u64,
) -> Result<(), PersistError> {
    replace(files, CONFIG_FILE, &encode_config(json, created_unix_ns))
        .await
        .map_err(PersistError::Io)
}

/// `Ok(None)`: no config file (the directory is not a stream).
pub async fn read_config<S: StoreFiles>(files: &S) -> Result<Option<(Vec<u8>, u64)>, PersistError> {
    read_if_present(files, CONFIG_FILE)
        .await?
        .map(|bytes| decode_config(&bytes))
        .transpose()
}

/// The meta group's checkpoint (`jetstream/meta/state` on shard 0): JSON
/// in the `config` layout (its creation time field zero).
pub const META_STATE_FILE: &str = "state";

pub async fn write_meta_state<S: StoreFiles>(files: &S, json: &[u8]) -> Result<(), PersistError> {
    replace(files, META_STATE_FILE, &encode_config(json, 0))
        .await
        .map_err(PersistError::Io)
}

/// `Ok(None)`: no meta state yet (the cluster has not formed).
pub async fn read_meta_state<S: StoreFiles>(files: &S) -> Result<Option<Vec<u8>>, PersistError> {
    read_if_present(files, META_STATE_FILE)
        .await?
        .map(|bytes| decode_config(&bytes).map(|(json, _)| json))
        .transpose()
}

pub async fn write_raft<S: StoreFiles>(files: &S, state: &RaftState) -> Result<(), PersistError> {
    replace(files, RAFT_FILE, &encode_raft(state))
        .await
        .map_err(PersistError::Io)
}

/// `Ok(None)`: no raft file (for a stream, damage: it is written at create).
pub async fn read_raft<S: StoreFiles>(files: &S) -> Result<Option<RaftState>, PersistError> {
    read_if_present(files, RAFT_FILE)
        .await?
        .map(|bytes| decode_raft(&bytes))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_and_every_flipped_bit_is_caught() {
        let json = br#"{"name":"ORDERS","subjects":["orders.>"]}"#;
        let encoded = encode_config(json, 1234);
        assert_eq!(decode_config(&encoded), Ok((json.to_vec(), 1234)));
        let mut padded = encoded.clone();
        padded.resize(4096, 0);
        assert_eq!(decode_config(&padded), Ok((json.to_vec(), 1234)));
        for bit in 0..encoded.len() * 8 {
            let mut flipped = encoded.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            if (28..32).contains(&(bit / 8)) {
                continue; // reserved bytes are not covered
            }
            assert!(decode_config(&flipped).is_err(), "bit {bit} flipped");
        }
        assert!(decode_config(&encoded[..20]).is_err());
    }

    fn sample_raft() -> RaftState {
        let mut manifest = Manifest::new(1);
        manifest.last_sequence = 40;
        manifest.floor = 3;
        RaftState {
            term: 3,
            vote: 1,
            applied_index: 99,
            applied_term: 3,
            last_unix_ns: 1_700_000_000_000_000_000,
            consumers: Some(ConsumersReference {
                applied_index: 97,
                checksum: 0xdead_beef,
            }),
            manifest,
            generation: 1234,
        }
    }

    #[test]
    fn a_version_2_raft_file_reads_as_generation_0() {
        let state = RaftState {
            generation: 0,
            ..sample_raft()
        };
        // Version 2: no generation field, the manifest length at 68.
        let current = encode_raft(&state);
        let mut old = current[..68].to_vec();
        old[8..12].copy_from_slice(&RAFT_VERSION_WITHOUT_GENERATION.to_le_bytes());
        old.extend_from_slice(&current[76..current.len() - 4]);
        let sum = checksum(&old);
        old.extend_from_slice(&sum.to_le_bytes());
        old.resize(4096, 0);
        assert_eq!(decode_raft(&old), Ok(state));
    }

    #[test]
    fn messages_directories_name_their_generation() {
        assert_eq!(messages_directory(0), "messages");
        assert_eq!(messages_directory(812), "messages.812");
        for generation in [0, 1, 812, u64::MAX] {
            assert_eq!(
                messages_generation(&messages_directory(generation)),
                Some(generation)
            );
        }
        for other in ["messages.0", "messages.", "messages.x", "consumers", "raft"] {
            assert_eq!(messages_generation(other), None, "{other}");
        }
    }

    #[test]
    fn raft_state_round_trips_and_every_flipped_bit_is_caught() {
        let state = sample_raft();
        let encoded = encode_raft(&state);
        assert_eq!(decode_raft(&encoded), Ok(state.clone()));
        let mut padded = encoded.clone();
        padded.resize(4096, 0);
        assert_eq!(decode_raft(&padded), Ok(state.clone()));
        for bit in 0..padded.len() * 8 {
            let mut flipped = padded.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_raft(&flipped).is_err(), "bit {bit} flipped");
        }
        for cut in [0, 8, 71, 72, 79, 80, encoded.len() - 1] {
            assert!(decode_raft(&encoded[..cut]).is_err(), "cut at {cut}");
        }
        let created = RaftState::created(100);
        assert_eq!(decode_raft(&encode_raft(&created)), Ok(created));
    }

    #[test]
    fn files_are_replaced_atomically_in_memory_files() {
        let files = tern_storage::block_store::MemoryFiles::new();
        let executor = glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 20)
            .make()
            .unwrap();
        executor.run(async move {
            assert_eq!(read_config(&files).await, Ok(None));
            write_config(&files, b"{}", 5).await.unwrap();
            write_config(&files, b"{\"a\":1}", 6).await.unwrap();
            assert_eq!(
                read_config(&files).await,
                Ok(Some((b"{\"a\":1}".to_vec(), 6)))
            );
            let state = sample_raft();
            write_raft(&files, &state).await.unwrap();
            assert_eq!(read_raft(&files).await, Ok(Some(state)));
            files.overwrite(CONFIG_FILE, 33, b"X");
            let files = files.crash(1);
            assert!(matches!(
                read_config(&files).await,
                Err(PersistError::Corrupt { .. })
            ));
        });
    }
}
