//! `tern stream export|verify`: a tamper-evident copy of a stream's
//! messages. An export is three files, in a directory or (`obj://BUCKET`)
//! as objects of an object-store bucket:
//!
//! - `records.jsonl`: one JSON record per message, in sequence order,
//!   append-only, each carrying a SHA-256 hash that covers the previous
//!   record's hash and the record's canonical bytes (a hash chain);
//! - `manifest.json`: the stream, first and last sequence, record count,
//!   the signed length of `records.jsonl`, the last hash, and the signer's
//!   public key;
//! - `manifest.sig`: the signer's ed25519 signature (an NKey) over the
//!   manifest file's exact bytes, base64.
//!
//! docs/export-format.md gives the format field by field and byte by byte.
//! A second export continues the chain: it verifies the existing export
//! with the seed's public key first, then appends only the sequences after
//! the manifest's last one and re-signs the manifest. Deleted messages
//! (gaps in the stream's sequences) are skipped: a record's sequence is
//! always greater than the previous record's, and the jump shows the gap.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, object_store};
use base64::Engine;
use clap::Args;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::connection::ConnectionArgs;
use crate::error::CliError;
use crate::output::line;

pub const RECORDS_NAME: &str = "records.jsonl";
pub const MANIFEST_NAME: &str = "manifest.json";
pub const SIGNATURE_NAME: &str = "manifest.sig";
/// The manifest being signed, written before `manifest.sig`: a run that
/// stops after replacing the signature but before the manifest leaves
/// the signed manifest here, and the next run completes the switch.
pub const PENDING_MANIFEST_NAME: &str = "manifest.pending.json";
/// `manifest.json`'s `format` and `version`.
pub const FORMAT_NAME: &str = "tern-stream-export";
pub const FORMAT_VERSION: u64 = 1;
/// The whole of `records.jsonl` is held in memory (an object is put
/// whole), so an export stops growing at this size.
pub const RECORDS_BYTES_MAX: u64 = 1 << 30;
/// The hash chain's value before the first record.
pub const GENESIS_HASH: [u8; 32] = [0; 32];
/// `obj://` in `--to` and in `verify`'s target names a bucket.
const BUCKET_SCHEME: &str = "obj://";

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Stream name
    pub stream: String,
    /// Where the export lives: a directory, or obj://BUCKET
    #[arg(long, value_name = "DIR|obj://BUCKET")]
    pub to: String,
    /// The signer's NKey seed file (`SU…`/`SN…`, as `tern nkey gen` writes)
    #[arg(long, value_name = "SEED_FILE")]
    pub key: PathBuf,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The export: a directory, or obj://BUCKET
    #[arg(value_name = "DIR|obj://BUCKET")]
    pub target: String,
    /// The signer's public key (`U…` or `N…`)
    #[arg(long, value_name = "PUBLIC_KEY")]
    pub key: String,
}

/// Why an export or a verification failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Key {
        what: String,
        source: nkeys::error::Error,
    },
    #[error("{what}: {source}")]
    Bucket {
        what: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{name} is missing")]
    Missing { name: &'static str },
    #[error("{MANIFEST_NAME}: {detail}")]
    Manifest { detail: String },
    #[error("bad signature: {SIGNATURE_NAME} does not sign {MANIFEST_NAME} with key {key} (the manifest names signer {signer})")]
    Signature { key: String, signer: String },
    #[error("record {index} (sequence {sequence}, line {index}, byte offset {offset}) of {RECORDS_NAME} does not match: {reason}")]
    Record {
        index: u64,
        /// The sequence the line claims, or `?` when it cannot be read.
        sequence: String,
        offset: u64,
        reason: String,
    },
    #[error("{RECORDS_NAME} does not match the manifest: {detail}")]
    Totals { detail: String },
    #[error("the export holds stream {found}, not {wanted}")]
    OtherStream { found: String, wanted: String },
    #[error("{RECORDS_NAME} would exceed {RECORDS_BYTES_MAX} bytes")]
    TooLarge,
}

/// One exported message; `records.jsonl` holds one per line, fields in
/// this order.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    sequence: u64,
    time_unix_ns: i64,
    subject: String,
    /// Header name and value pairs, sorted by name, values in order.
    headers: Vec<(String, String)>,
    data_base64: String,
    /// SHA-256 (hex) of the previous hash and this record's canonical bytes.
    hash: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    format: String,
    version: u64,
    stream: String,
    first_sequence: u64,
    last_sequence: u64,
    record_count: u64,
    records_bytes: u64,
    last_hash: String,
    created_unix_ns: i64,
    updated_unix_ns: i64,
    signer_public_key: String,
}

/// The message fields a record's hash covers.
struct Content<'a> {
    sequence: u64,
    time_unix_ns: i64,
    subject: &'a str,
    headers: &'a [(String, String)],
    data: &'a [u8],
}

/// The canonical bytes (docs/export-format.md): big-endian integers,
/// every string and byte string preceded by its length as a u32.
fn canonical_bytes(content: &Content) -> Vec<u8> {
    fn field(bytes: &mut Vec<u8>, value: &[u8]) {
        let length = u32::try_from(value.len()).expect("a NATS message field fits in u32");
        bytes.extend_from_slice(&length.to_be_bytes());
        bytes.extend_from_slice(value);
    }
    let mut bytes = Vec::with_capacity(64 + content.subject.len() + content.data.len());
    bytes.extend_from_slice(&content.sequence.to_be_bytes());
    bytes.extend_from_slice(&content.time_unix_ns.to_be_bytes());
    field(&mut bytes, content.subject.as_bytes());
    let count = u32::try_from(content.headers.len()).expect("headers fit in u32");
    bytes.extend_from_slice(&count.to_be_bytes());
    for (name, value) in content.headers {
        field(&mut bytes, name.as_bytes());
        field(&mut bytes, value.as_bytes());
    }
    field(&mut bytes, content.data);
    bytes
}

fn chain_hash(previous: &[u8; 32], content: &Content) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(previous);
    hasher.update(canonical_bytes(content));
    hasher.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Where an export lives.
enum Store {
    Directory(PathBuf),
    Bucket {
        name: String,
        store: object_store::ObjectStore,
    },
}

fn bucket_name(target: &str) -> Option<&str> {
    target.strip_prefix(BUCKET_SCHEME)
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ExportError {
    let what = what.into();
    move |source| ExportError::Io { what, source }
}

fn bucket<E: std::error::Error + Send + Sync + 'static>(
    what: impl Into<String>,
) -> impl FnOnce(E) -> ExportError {
    let what = what.into();
    move |source| ExportError::Bucket {
        what,
        source: Box::new(source),
    }
}

impl Store {
    fn describe(&self) -> String {
        match self {
            Store::Directory(path) => path.display().to_string(),
            Store::Bucket { name, .. } => format!("{BUCKET_SCHEME}{name}"),
        }
    }

    async fn read(&self, name: &'static str) -> Result<Option<Vec<u8>>, ExportError> {
        match self {
            Store::Directory(directory) => match std::fs::read(directory.join(name)) {
                Ok(bytes) => Ok(Some(bytes)),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(error) => Err(io(format!("cannot read {name}"))(error)),
            },
            Store::Bucket { store, .. } => {
                use tokio::io::AsyncReadExt;
                let mut object = match store.get(name).await {
                    Ok(object) => object,
                    Err(error) if error.kind() == object_store::GetErrorKind::NotFound => {
                        return Ok(None)
                    }
                    Err(error) => return Err(bucket(format!("cannot get {name}"))(error)),
                };
                let mut bytes = Vec::new();
                object
                    .read_to_end(&mut bytes)
                    .await
                    .map_err(io(format!("cannot read {name}")))?;
                Ok(Some(bytes))
            }
        }
    }

    /// Replaces a whole file (a directory's through a renamed temporary).
    async fn write(&self, name: &'static str, bytes: &[u8]) -> Result<(), ExportError> {
        match self {
            Store::Directory(directory) => {
                let temporary = directory.join(format!("{name}.new"));
                write_synced(&temporary, bytes).map_err(io(format!("cannot write {name}")))?;
                std::fs::rename(&temporary, directory.join(name))
                    .map_err(io(format!("cannot rename {name}")))
            }
            Store::Bucket { store, .. } => {
                let mut reader = bytes;
                store
                    .put(name, &mut reader)
                    .await
                    .map_err(bucket(format!("cannot put {name}")))?;
                Ok(())
            }
        }
    }

    async fn remove(&self, name: &'static str) -> Result<(), ExportError> {
        match self {
            Store::Directory(directory) => match std::fs::remove_file(directory.join(name)) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                    Err(io(format!("cannot remove {name}"))(error))
                }
                _ => Ok(()),
            },
            Store::Bucket { store, .. } => match store.delete(name).await {
                Err(error) if error.kind() != object_store::DeleteErrorKind::NotFound => {
                    Err(bucket(format!("cannot delete {name}"))(error))
                }
                _ => Ok(()),
            },
        }
    }

    /// Appends `new` to records.jsonl after its first `signed_bytes`
    /// (bytes past them were written by an export that stopped before
    /// signing its manifest: no signature covers them). `all` is the
    /// whole file as it will be.
    async fn append_records(
        &self,
        signed_bytes: u64,
        new: &[u8],
        all: &[u8],
    ) -> Result<(), ExportError> {
        match self {
            Store::Directory(directory) => {
                let what = format!("cannot append to {RECORDS_NAME}");
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(false)
                    .open(directory.join(RECORDS_NAME))
                    .map_err(io(what.clone()))?;
                file.set_len(signed_bytes).map_err(io(what.clone()))?;
                use std::io::Seek;
                file.seek(std::io::SeekFrom::End(0))
                    .map_err(io(what.clone()))?;
                file.write_all(new).map_err(io(what.clone()))?;
                file.sync_all().map_err(io(what))
            }
            Store::Bucket { .. } => self.write(RECORDS_NAME, all).await,
        }
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

async fn open_store(
    target: &str,
    context: Option<&jetstream::Context>,
    create: bool,
) -> Result<Store, CliError> {
    let Some(name) = bucket_name(target) else {
        let path = PathBuf::from(target);
        if create {
            std::fs::create_dir_all(&path)
                .map_err(CliError::io(format!("cannot create {target}")))?;
        }
        return Ok(Store::Directory(path));
    };
    let context = context.expect("a bucket target has a connection");
    let action = format!("object bucket {name}");
    let store = match context.get_object_store(name).await {
        Ok(store) => store,
        Err(error)
            if create && error.kind() == jetstream::context::ObjectStoreErrorKind::GetStore =>
        {
            context
                .create_object_store(object_store::Config {
                    bucket: name.to_string(),
                    description: Some("tern stream export".into()),
                    ..Default::default()
                })
                .await
                .map_err(CliError::client(action))?
        }
        Err(error) => return Err(CliError::client(action)(error)),
    };
    Ok(Store::Bucket {
        name: name.to_string(),
        store,
    })
}

/// What a verified export holds.
struct Verified {
    manifest: Manifest,
    last_hash: [u8; 32],
}

/// Checks the signature with `public_key`, then every record's chain
/// link, then the manifest's totals and last hash. `records` may run past
/// the manifest's `records_bytes` only when `unsigned_tail_allowed`.
fn verify_export(
    manifest_bytes: &[u8],
    signature_text: &[u8],
    records: &[u8],
    public_key: &str,
    unsigned_tail_allowed: bool,
) -> Result<Verified, ExportError> {
    let key =
        nkeys::KeyPair::from_public_key(public_key.trim()).map_err(|source| ExportError::Key {
            what: format!("public key {public_key}"),
            source,
        })?;
    let manifest: Result<Manifest, _> = serde_json::from_slice(manifest_bytes);
    let signer = manifest
        .as_ref()
        .map(|manifest| manifest.signer_public_key.clone())
        .unwrap_or_else(|_| "?".into());
    if !signature_matches(&key, manifest_bytes, signature_text) {
        return Err(ExportError::Signature {
            key: key.public_key(),
            signer,
        });
    }
    let manifest = manifest.map_err(|error| ExportError::Manifest {
        detail: error.to_string(),
    })?;
    if manifest.format != FORMAT_NAME || manifest.version != FORMAT_VERSION {
        return Err(ExportError::Manifest {
            detail: format!(
                "format {} version {}, not {FORMAT_NAME} version {FORMAT_VERSION}",
                manifest.format, manifest.version
            ),
        });
    }
    let signed = usize::try_from(manifest.records_bytes).unwrap_or(usize::MAX);
    if records.len() < signed || (records.len() > signed && !unsigned_tail_allowed) {
        return Err(ExportError::Totals {
            detail: format!(
                "it has {} bytes, the manifest signs {}",
                records.len(),
                manifest.records_bytes
            ),
        });
    }
    let last_hash = verify_chain(&records[..signed], &manifest)?;
    Ok(Verified {
        manifest,
        last_hash,
    })
}

fn signature_matches(key: &nkeys::KeyPair, manifest_bytes: &[u8], signature_text: &[u8]) -> bool {
    let signature = base64::engine::general_purpose::STANDARD
        .decode(String::from_utf8_lossy(signature_text).trim())
        .unwrap_or_default();
    key.verify(manifest_bytes, &signature).is_ok()
}

/// Walks the records line by line; the first that does not match is the
/// error.
fn verify_chain(records: &[u8], manifest: &Manifest) -> Result<[u8; 32], ExportError> {
    let mut previous_hash = GENESIS_HASH;
    let mut previous_sequence = 0u64;
    let (mut first_sequence, mut count, mut offset) = (0u64, 0u64, 0usize);
    while offset < records.len() {
        let index = count + 1;
        let end = records[offset..]
            .iter()
            .position(|&byte| byte == b'\n')
            .map(|position| offset + position);
        let fail = |sequence: String, reason: String| ExportError::Record {
            index,
            sequence,
            offset: offset as u64,
            reason,
        };
        let Some(end) = end else {
            return Err(fail("?".into(), "the line has no newline".into()));
        };
        let record: Record = serde_json::from_slice(&records[offset..end])
            .map_err(|error| fail("?".into(), format!("not a record: {error}")))?;
        let fail = |reason: String| fail(record.sequence.to_string(), reason);
        let data = base64::engine::general_purpose::STANDARD
            .decode(&record.data_base64)
            .map_err(|error| fail(format!("data_base64: {error}")))?;
        if record.sequence <= previous_sequence {
            return Err(fail(format!(
                "its sequence does not follow {previous_sequence}"
            )));
        }
        let hash = chain_hash(
            &previous_hash,
            &Content {
                sequence: record.sequence,
                time_unix_ns: record.time_unix_ns,
                subject: &record.subject,
                headers: &record.headers,
                data: &data,
            },
        );
        if hex(&hash) != record.hash {
            return Err(fail(
                "its hash is not SHA-256 of the previous hash and its contents".into(),
            ));
        }
        if count == 0 {
            first_sequence = record.sequence;
        }
        previous_hash = hash;
        previous_sequence = record.sequence;
        count += 1;
        offset = end + 1;
    }
    let found = (
        first_sequence,
        previous_sequence,
        count,
        hex(&previous_hash),
    );
    let claimed = (
        manifest.first_sequence,
        manifest.last_sequence,
        manifest.record_count,
        manifest.last_hash.clone(),
    );
    if found != claimed {
        return Err(ExportError::Totals {
            detail: format!(
                "records hold sequences {}..{}, {} records, last hash {}; the manifest says {}..{}, {}, {}",
                found.0, found.1, found.2, found.3, claimed.0, claimed.1, claimed.2, claimed.3
            ),
        });
    }
    Ok(previous_hash)
}

struct ExportFiles {
    manifest: Vec<u8>,
    signature: Vec<u8>,
    records: Vec<u8>,
}

async fn read_export(store: &Store) -> Result<Option<ExportFiles>, ExportError> {
    let Some(manifest) = store.read(MANIFEST_NAME).await? else {
        return Ok(None);
    };
    let signature = store
        .read(SIGNATURE_NAME)
        .await?
        .ok_or(ExportError::Missing {
            name: SIGNATURE_NAME,
        })?;
    let records = store.read(RECORDS_NAME).await?.unwrap_or_default();
    Ok(Some(ExportFiles {
        manifest,
        signature,
        records,
    }))
}

pub async fn verify(connection: &ConnectionArgs, args: VerifyArgs) -> Result<(), CliError> {
    let action = format!("stream verify {}", args.target);
    let failed = |error: ExportError| CliError::Failed {
        action: action.clone(),
        reason: error.to_string(),
    };
    let context = match bucket_name(&args.target) {
        None => None,
        Some(_) => Some(connection.api().await?.jetstream()),
    };
    let store = open_store(&args.target, context.as_ref(), false).await?;
    let files = read_export(&store).await.map_err(failed)?.ok_or_else(|| {
        failed(ExportError::Missing {
            name: MANIFEST_NAME,
        })
    })?;
    let verified = verify_export(
        &files.manifest,
        &files.signature,
        &files.records,
        &args.key,
        false,
    )
    .map_err(failed)?;
    let manifest = verified.manifest;
    line(format_args!(
        "OK: {} holds stream {} sequences {}..{}, {} records, last hash {}, signed by {}",
        store.describe(),
        manifest.stream,
        manifest.first_sequence,
        manifest.last_sequence,
        manifest.record_count,
        manifest.last_hash,
        manifest.signer_public_key
    ));
    Ok(())
}

fn unix_ns_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
}

pub async fn export(api: &crate::api::Api, args: ExportArgs) -> Result<(), CliError> {
    let action = format!("stream export {} --to {}", args.stream, args.to);
    let failed = |error: ExportError| CliError::Failed {
        action: action.clone(),
        reason: error.to_string(),
    };
    let seed = std::fs::read_to_string(&args.key).map_err(|source| CliError::ReadFile {
        what: "the seed file",
        path: args.key.display().to_string(),
        source,
    })?;
    let signer = nkeys::KeyPair::from_seed(seed.trim()).map_err(|source| {
        failed(ExportError::Key {
            what: format!("seed file {}", args.key.display()),
            source,
        })
    })?;
    let context = api.jetstream();
    let store = open_store(&args.to, Some(&context), true).await?;
    let now = unix_ns_now();
    let mut existing = read_export(&store).await.map_err(failed)?;
    if let (Some(files), Some(pending)) = (
        existing.as_mut(),
        store.read(PENDING_MANIFEST_NAME).await.map_err(failed)?,
    ) {
        // The last run replaced the signature but not the manifest: the
        // pending manifest is the signed one.
        let key = nkeys::KeyPair::from_public_key(&signer.public_key()).expect("a public key");
        if signature_matches(&key, &pending, &files.signature) {
            files.manifest = pending;
        }
    }
    let (mut manifest, mut records, signed_bytes, mut last_hash) = match existing {
        Some(files) => {
            let verified = verify_export(
                &files.manifest,
                &files.signature,
                &files.records,
                &signer.public_key(),
                true,
            )
            .map_err(|error| {
                failed(ExportError::Manifest {
                    detail: format!("the existing export does not verify: {error}"),
                })
            })?;
            if verified.manifest.stream != args.stream {
                return Err(failed(ExportError::OtherStream {
                    found: verified.manifest.stream,
                    wanted: args.stream,
                }));
            }
            let signed = verified.manifest.records_bytes;
            let mut records = files.records;
            records.truncate(signed as usize);
            (verified.manifest, records, signed, verified.last_hash)
        }
        None => (
            Manifest {
                format: FORMAT_NAME.into(),
                version: FORMAT_VERSION,
                stream: args.stream.clone(),
                first_sequence: 0,
                last_sequence: 0,
                record_count: 0,
                records_bytes: 0,
                last_hash: hex(&GENESIS_HASH),
                created_unix_ns: now,
                updated_unix_ns: now,
                signer_public_key: signer.public_key(),
            },
            Vec::new(),
            0,
            GENESIS_HASH,
        ),
    };
    let new_start = records.len();
    let appended = append_new_messages(
        &context,
        &action,
        api.timeout,
        &mut manifest,
        &mut records,
        &mut last_hash,
    )
    .await?;
    store
        .append_records(signed_bytes, &records[new_start..], &records)
        .await
        .map_err(failed)?;
    manifest.records_bytes = records.len() as u64;
    manifest.last_hash = hex(&last_hash);
    manifest.updated_unix_ns = now;
    manifest.signer_public_key = signer.public_key();
    let mut manifest_bytes = serde_json::to_vec_pretty(&manifest).expect("a manifest serialises");
    manifest_bytes.push(b'\n');
    let signature = signer
        .sign(&manifest_bytes)
        .expect("a seed's key pair signs");
    let signature_text = format!(
        "{}\n",
        base64::engine::general_purpose::STANDARD.encode(signature)
    );
    // The new manifest is written aside first, then the signature, then
    // the manifest: whenever this stops, either the old pair verifies or
    // the signature verifies the pending manifest (the next run uses it).
    store
        .write(PENDING_MANIFEST_NAME, &manifest_bytes)
        .await
        .map_err(failed)?;
    store
        .write(SIGNATURE_NAME, signature_text.as_bytes())
        .await
        .map_err(failed)?;
    store
        .write(MANIFEST_NAME, &manifest_bytes)
        .await
        .map_err(failed)?;
    store.remove(PENDING_MANIFEST_NAME).await.map_err(failed)?;
    line(format_args!(
        "Exported {appended} new records of {} to {}: sequences {}..{}, {} records, last hash {}",
        args.stream,
        store.describe(),
        manifest.first_sequence,
        manifest.last_sequence,
        manifest.record_count,
        manifest.last_hash
    ));
    Ok(())
}

/// Reads the stream from the sequence after the manifest's last one up to
/// the stream's last sequence at the start, through an ordered consumer,
/// appending a record per message. Returns how many were appended.
async fn append_new_messages(
    context: &jetstream::Context,
    action: &str,
    timeout: Duration,
    manifest: &mut Manifest,
    records: &mut Vec<u8>,
    last_hash: &mut [u8; 32],
) -> Result<u64, CliError> {
    let mut stream = context
        .get_stream(&manifest.stream)
        .await
        .map_err(CliError::client(action))?;
    let state = stream
        .info()
        .await
        .map_err(CliError::client(action))?
        .state
        .clone();
    let start_sequence = (manifest.last_sequence + 1).max(state.first_sequence);
    if state.messages == 0 || state.last_sequence < start_sequence {
        return Ok(0);
    }
    let ordered = stream
        .create_consumer(consumer::pull::OrderedConfig {
            deliver_policy: consumer::DeliverPolicy::ByStartSequence { start_sequence },
            ..Default::default()
        })
        .await
        .map_err(CliError::client(action))?;
    let mut messages = ordered.messages().await.map_err(CliError::client(action))?;
    let mut appended = 0;
    loop {
        let message = match tokio::time::timeout(timeout, messages.next()).await {
            Ok(Some(Ok(message))) => message,
            Ok(Some(Err(error))) => return Err(CliError::client(action)(error)),
            Ok(None) => {
                return Err(CliError::Failed {
                    action: action.into(),
                    reason: "the consumer ended".into(),
                })
            }
            Err(_) => {
                return Err(CliError::Timeout {
                    action: action.into(),
                    timeout,
                })
            }
        };
        let info = message.info().map_err(|error| CliError::Failed {
            action: action.into(),
            reason: format!("a message without JetStream metadata: {error}"),
        })?;
        let sequence = info.stream_sequence;
        let pending = info.pending;
        let time_unix_ns = i64::try_from(info.published.unix_timestamp_nanos()).unwrap_or(0);
        assert!(
            sequence > manifest.last_sequence,
            "an ordered consumer goes forward"
        );
        let mut headers: Vec<(String, String)> = message
            .headers
            .iter()
            .flat_map(|map| map.iter())
            .flat_map(|(name, values)| {
                values
                    .iter()
                    .map(move |value| (name.to_string(), value.as_str().to_string()))
            })
            .collect();
        headers.sort_by(|left, right| left.0.cmp(&right.0));
        let hash = chain_hash(
            last_hash,
            &Content {
                sequence,
                time_unix_ns,
                subject: message.subject.as_str(),
                headers: &headers,
                data: &message.payload,
            },
        );
        let record = Record {
            sequence,
            time_unix_ns,
            subject: message.subject.to_string(),
            headers,
            data_base64: base64::engine::general_purpose::STANDARD.encode(&message.payload),
            hash: hex(&hash),
        };
        let mut bytes = serde_json::to_vec(&record).expect("a record serialises");
        bytes.push(b'\n');
        if (records.len() + bytes.len()) as u64 > RECORDS_BYTES_MAX {
            return Err(CliError::Failed {
                action: action.into(),
                reason: ExportError::TooLarge.to_string(),
            });
        }
        records.extend_from_slice(&bytes);
        *last_hash = hash;
        if manifest.record_count == 0 {
            manifest.first_sequence = sequence;
        }
        manifest.last_sequence = sequence;
        manifest.record_count += 1;
        appended += 1;
        if sequence >= state.last_sequence || pending == 0 {
            return Ok(appended);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_bytes_are_as_documented() {
        let headers = vec![("A".to_string(), "b".to_string())];
        let bytes = canonical_bytes(&Content {
            sequence: 1,
            time_unix_ns: 2,
            subject: "s",
            headers: &headers,
            data: b"xy",
        });
        let mut expected = Vec::new();
        expected.extend_from_slice(&1u64.to_be_bytes());
        expected.extend_from_slice(&2i64.to_be_bytes());
        expected.extend_from_slice(&[0, 0, 0, 1, b's']);
        expected.extend_from_slice(&[0, 0, 0, 1]);
        expected.extend_from_slice(&[0, 0, 0, 1, b'A', 0, 0, 0, 1, b'b']);
        expected.extend_from_slice(&[0, 0, 0, 2, b'x', b'y']);
        assert_eq!(bytes, expected);
    }
}
