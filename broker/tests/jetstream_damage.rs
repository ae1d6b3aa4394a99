//! Fault matrix over the real `tern-server`: damage to any single file of
//! the store never loses or alters an acknowledged message without an error
//! that names it, and never deletes a stream.
//!
//! Each case publishes (every acked sequence, subject, headers and payload
//! recorded), deletes and purges some messages (recorded as gone), creates a
//! durable pull consumer and double-acks two messages (its ack floor
//! recorded), stops the server ([`Stop`]), damages ONE file ([`FileClass`],
//! [`Damage`]) and starts it again. Then, for every stream, exactly one of:
//!
//! * **served identical**: STREAM.INFO answers; every acked message not
//!   deleted or purged comes back identical from `STREAM.MSG.GET`; gone
//!   sequences answer 404/10037; the durable exists with an ack floor at
//!   least what was acked and a pull returns a later, identical message; a
//!   KV key that was deleted or purged stays so;
//! * **offline, named** (only for streams that depend on the damaged file):
//!   STREAM.INFO answers 500/10194 `stream is offline: ...` naming the file's
//!   base name; a publish to its subjects is refused; `/healthz` is 503 and
//!   names the stream; `/jsz?streams=true` lists it with a `failure`.
//!
//! Always: the server starts (except the store-identity cases, which may
//! refuse with a non-zero exit, a stderr line naming the file, and no file
//! changed), does not crash or hang, core NATS still works, and control
//! streams on every shard are served. Journal damage may take the streams of
//! that journal's shard offline, never those of the other shard.
//!
//! Cases of different streams' files share one server run (one victim stream
//! each); a run that does not start, crashes, or hurts a control stream is
//! re-run case by case from a copy of the undamaged store, so every outcome
//! names its cause. Journal and store-identity cases get a server each, run
//! concurrently. Every case prints its outcome; each test fails at the end
//! with the full list of violations.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy, kv, stream::StorageType};
use futures::StreamExt;
use serde_json::{json, Value};

use common::{Flavor, Options, Server, Stopped, TIMEOUT};

/// Bound for one request of the checker (a hang is a violation, not a wait).
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound for the `raft` files to cover the journal (checkpoints run every 2 s).
const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(20);
/// Servers of one test running at once (2 cores; they mostly wait on I/O).
const RUNS_IN_FLIGHT: usize = 4;
/// Messages published by the message workload.
const MESSAGES: u64 = 10;
/// The durable consumer every message workload creates.
const DURABLE: &str = "D";

// ----- the matrix -------------------------------------------------------------

/// Which file of the store a case damages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileClass {
    /// The newest `journal-NNNNNN.seg` of the victim stream's shard.
    JournalSegment,
    /// The newest `messages/NNNNNNNNNNNNNNNNNNNN.blk` of the victim stream.
    BlockSegment,
    DeletesLog,
    Meta,
    Config,
    Raft,
    Consumers,
    /// `jetstream/layout`.
    Layout,
}

/// Where a flipped bit goes; what each means per file is in [`flip_offset`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spot {
    Header,
    Checksum,
    Body,
    BatchHeader,
    LastRecord,
}

/// What is done to the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    /// One bit flipped.
    Flip(Spot),
    /// One aligned 4 KiB block zeroed.
    ZeroBlock,
    /// The last 3 bytes cut off.
    Truncate3,
    /// Cut to half its size.
    TruncateHalf,
    Delete,
}

/// How the server stops before the damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// SIGKILL right after the workload: the data is only in the journal.
    Kill,
    /// SIGKILL once every stream's `raft` file covers its journal entries:
    /// the block store is the only copy that counts.
    KillAfterCheckpoint,
    /// SIGTERM: a clean stop (which checkpoints).
    Term,
}

/// What the victim stream holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    /// Messages with deletes, a purge and a durable consumer.
    Messages,
    /// A KV bucket (history 1) with a deleted and a purged key.
    KeyValue,
}

/// One cell of the matrix: which file, what damage, after which stop.
#[derive(Clone, Copy, Debug)]
struct Case {
    file: FileClass,
    damage: Damage,
    stop: Stop,
    workload: Workload,
}

impl Case {
    /// `stop/file/damage`, how outcomes are printed.
    fn label(&self) -> String {
        let kv = if self.workload == Workload::KeyValue {
            " (KV)"
        } else {
            ""
        };
        format!(
            "{:?}/{}/{}{kv}",
            self.stop,
            self.file.name(),
            self.damage.name()
        )
    }

    /// The victim stream's name: unique per file class and damage.
    fn stream(&self) -> String {
        let tag = format!("{}_{}", self.file.name(), self.damage.name())
            .to_uppercase()
            .replace(['.', '-', ' '], "_");
        match self.workload {
            Workload::Messages => tag,
            Workload::KeyValue => format!("KV_{tag}"),
        }
    }
}

impl FileClass {
    /// Short name used in labels and stream names.
    fn name(self) -> &'static str {
        match self {
            FileClass::JournalSegment => "journal",
            FileClass::BlockSegment => "blk",
            FileClass::DeletesLog => "deletes",
            FileClass::Meta => "meta",
            FileClass::Config => "config",
            FileClass::Raft => "raft",
            FileClass::Consumers => "consumers",
            FileClass::Layout => "layout",
        }
    }
}

impl Damage {
    /// Short name used in labels and stream names.
    fn name(self) -> String {
        match self {
            Damage::Flip(spot) => format!("flip-{}", format!("{spot:?}").to_lowercase()),
            Damage::ZeroBlock => "zero-block".into(),
            Damage::Truncate3 => "truncate-3".into(),
            Damage::TruncateHalf => "truncate-half".into(),
            Damage::Delete => "delete".into(),
        }
    }
}

/// Every way the journal segment is damaged.
const JOURNAL_DAMAGES: [Damage; 9] = [
    Damage::Flip(Spot::Header),
    Damage::Flip(Spot::Checksum),
    Damage::Flip(Spot::BatchHeader),
    Damage::Flip(Spot::Body),
    Damage::Flip(Spot::LastRecord),
    Damage::ZeroBlock,
    Damage::Truncate3,
    Damage::TruncateHalf,
    Damage::Delete,
];

/// The generic kinds every small file gets: zeroed, cut, deleted.
const FILE_DAMAGES: [Damage; 4] = [
    Damage::ZeroBlock,
    Damage::Truncate3,
    Damage::TruncateHalf,
    Damage::Delete,
];

/// The stream-file cases of one stop: block store, deletes, meta, config, raft, consumers.
fn stream_file_cases(stop: Stop) -> Vec<Case> {
    let case = |file, damage, workload| Case {
        file,
        damage,
        stop,
        workload,
    };
    let mut cases = Vec::new();
    for spot in [Spot::Header, Spot::Checksum, Spot::Body, Spot::LastRecord] {
        cases.push(case(
            FileClass::BlockSegment,
            Damage::Flip(spot),
            Workload::Messages,
        ));
    }
    let flips: [(FileClass, &[Spot]); 5] = [
        (
            FileClass::DeletesLog,
            &[Spot::Header, Spot::Checksum, Spot::Body],
        ),
        (FileClass::Meta, &[Spot::Checksum, Spot::Body]),
        (
            FileClass::Config,
            &[Spot::Header, Spot::Checksum, Spot::Body],
        ),
        (FileClass::Raft, &[Spot::Header, Spot::Checksum]),
        (
            FileClass::Consumers,
            &[Spot::Header, Spot::Checksum, Spot::Body],
        ),
    ];
    for (file, spots) in flips {
        for spot in spots {
            cases.push(case(file, Damage::Flip(*spot), Workload::Messages));
        }
    }
    for file in [
        FileClass::BlockSegment,
        FileClass::DeletesLog,
        FileClass::Config,
        FileClass::Raft,
        FileClass::Consumers,
    ] {
        for damage in FILE_DAMAGES {
            cases.push(case(file, damage, Workload::Messages));
        }
    }
    cases.push(case(FileClass::Meta, Damage::Delete, Workload::Messages));
    // A KV bucket whose removed revisions must stay removed.
    cases.push(case(
        FileClass::DeletesLog,
        Damage::Flip(Spot::Body),
        Workload::KeyValue,
    ));
    cases.push(case(
        FileClass::DeletesLog,
        Damage::Delete,
        Workload::KeyValue,
    ));
    cases.push(case(
        FileClass::DeletesLog,
        Damage::ZeroBlock,
        Workload::KeyValue,
    ));
    cases
}

// ----- what the client was told ------------------------------------------------

/// One acked message as published.
#[derive(Clone, Debug)]
struct Stored {
    subject: String,
    headers: Vec<(String, String)>,
    payload: Vec<u8>,
}

/// What a client knows about one stream after the workload.
#[derive(Clone, Debug)]
struct StreamModel {
    name: String,
    shard: usize,
    /// A subject the stream stores (for the refused-publish check).
    probe_subject: String,
    /// Acked and not removed, by sequence.
    live: BTreeMap<u64, Stored>,
    /// Acked, then deleted or purged (or removed by a KV limit).
    gone: BTreeSet<u64>,
    /// The durable's name and the stream sequence of its ack floor.
    durable: Option<(String, u64)>,
    kv: Option<KvModel>,
    /// A `raft` file existed when the server stopped (a checkpoint ran).
    checkpointed: bool,
}

/// What a KV client knows about its bucket.
#[derive(Clone, Debug)]
struct KvModel {
    bucket: String,
    live: Vec<(String, Vec<u8>)>,
    /// Deleted or purged keys: must read as absent.
    removed: Vec<String>,
}

impl StreamModel {
    /// A stream with nothing acked yet.
    fn new(name: &str, probe_subject: String) -> StreamModel {
        StreamModel {
            name: name.to_string(),
            shard: usize::MAX,
            probe_subject,
            live: BTreeMap::new(),
            gone: BTreeSet::new(),
            durable: None,
            kv: None,
            checkpointed: false,
        }
    }

    /// The highest sequence ever acked (live or gone).
    fn last_acked(&self) -> u64 {
        let live = self.live.keys().next_back().copied().unwrap_or(0);
        live.max(self.gone.iter().next_back().copied().unwrap_or(0))
    }
}

/// The payload of message `index` of `stream`: 700 to ~1600 bytes, so the
/// block store's records span several 4 KiB blocks.
fn payload(stream: &str, index: u64) -> Vec<u8> {
    let mut bytes = format!("{stream}/{index}|").into_bytes();
    let length = 700 + 97 * index as usize;
    let mut state = index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ stream.len() as u64;
    while bytes.len() < length {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        bytes.push(b'a' + (state >> 59) as u8 % 26);
    }
    bytes
}

/// Publishes one message and returns its acked sequence; panics on a refusal
/// (the workload runs before any damage).
async fn publish(
    js: &jetstream::Context,
    subject: &str,
    headers: &[(&str, &str)],
    payload: Vec<u8>,
) -> u64 {
    let mut map = async_nats::HeaderMap::new();
    for (name, value) in headers {
        map.insert(*name, *value);
    }
    js.publish_with_headers(subject.to_string(), map, payload.into())
        .await
        .unwrap_or_else(|error| panic!("publish to {subject}: {error}"))
        .await
        .unwrap_or_else(|error| panic!("PubAck for {subject}: {error}"))
        .sequence
}

/// Creates stream `name` and runs the message workload: 10 messages (two
/// with a header), purge below 3, delete 5 and 8, durable `D` acks 3 and 4.
async fn messages_workload(
    js: &jetstream::Context,
    client: &async_nats::Client,
    name: &str,
) -> StreamModel {
    let prefix = name.to_lowercase();
    let stream = js
        .create_stream(jetstream::stream::Config {
            name: name.to_string(),
            subjects: vec![format!("{prefix}.>")],
            storage: StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|error| panic!("create stream {name}: {error}"));
    let mut model = StreamModel::new(name, format!("{prefix}.probe"));
    for index in 1..=MESSAGES {
        let subject = format!("{prefix}.m.{}", index % 3);
        let id = format!("{name}/{index}");
        let headers: Vec<(&str, &str)> = if index == 2 || index == 7 {
            vec![("Dmg-Id", id.as_str())]
        } else {
            Vec::new()
        };
        let body = payload(name, index);
        let seq = publish(js, &subject, &headers, body.clone()).await;
        assert_eq!(seq, index, "{name}: PubAck sequence");
        model.live.insert(
            seq,
            Stored {
                subject,
                headers: headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect(),
                payload: body,
            },
        );
    }
    let purged = request(
        client,
        &format!("$JS.API.STREAM.PURGE.{name}"),
        r#"{"seq":3}"#,
    )
    .await;
    assert_eq!(
        purged.as_ref().ok().and_then(|v| v["purged"].as_u64()),
        Some(2),
        "{name}: purge: {purged:?}"
    );
    for seq in [1, 2] {
        model.live.remove(&seq);
        model.gone.insert(seq);
    }
    for seq in [5u64, 8] {
        let deleted = request(
            client,
            &format!("$JS.API.STREAM.MSG.DELETE.{name}"),
            &json!({"seq": seq}).to_string(),
        )
        .await;
        assert_eq!(
            deleted.as_ref().ok().map(|v| v["success"].clone()),
            Some(json!(true)),
            "{name}: delete {seq}: {deleted:?}"
        );
        model.live.remove(&seq);
        model.gone.insert(seq);
    }
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(DURABLE.to_string()),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|error| panic!("{name}: create durable: {error}"));
    let mut batch = consumer
        .fetch()
        .max_messages(2)
        .expires(TIMEOUT)
        .messages()
        .await
        .unwrap_or_else(|error| panic!("{name}: fetch: {error}"));
    let mut acked = Vec::new();
    while let Some(message) = batch.next().await {
        let message = message.unwrap_or_else(|error| panic!("{name}: fetched: {error}"));
        acked.push(message.info().expect("JetStream message").stream_sequence);
        message
            .double_ack()
            .await
            .unwrap_or_else(|error| panic!("{name}: double ack: {error}"));
    }
    assert_eq!(acked, [3, 4], "{name}: the durable's first deliveries");
    model.durable = Some((DURABLE.to_string(), 4));
    model
}

/// One KV write as published: key, headers, value.
type KvOperation = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [u8],
);

/// Creates KV bucket `stream` minus `KV_` (history 1) and runs the KV
/// workload: k1 put twice, k2 deleted, k3 purged, k4 put.
async fn kv_workload(js: &jetstream::Context, stream: &str) -> StreamModel {
    let bucket = stream.strip_prefix("KV_").expect("a KV stream name");
    js.create_key_value(kv::Config {
        bucket: bucket.to_string(),
        history: 1,
        storage: StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap_or_else(|error| panic!("create bucket {bucket}: {error}"));
    let mut model = StreamModel::new(stream, format!("$KV.{bucket}.probe"));
    // (key, headers, value); each replaces the key's previous revision.
    let operations: [KvOperation; 7] = [
        ("k1", &[], b"v1"),
        ("k2", &[], b"v2"),
        ("k1", &[], b"v1b"),
        ("k3", &[], b"v3"),
        ("k2", &[("KV-Operation", "DEL")], b""),
        (
            "k3",
            &[("KV-Operation", "PURGE"), ("Nats-Rollup", "sub")],
            b"",
        ),
        ("k4", &[], b"v4"),
    ];
    let mut last_of_key: BTreeMap<&str, u64> = BTreeMap::new();
    for (key, headers, value) in operations {
        let subject = format!("$KV.{bucket}.{key}");
        let seq = publish(js, &subject, headers, value.to_vec()).await;
        // History 1 (and the purge's rollup) remove the key's earlier revision.
        if let Some(previous) = last_of_key.insert(key, seq) {
            model.live.remove(&previous);
            model.gone.insert(previous);
        }
        model.live.insert(
            seq,
            Stored {
                subject,
                headers: headers
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect(),
                payload: value.to_vec(),
            },
        );
    }
    model.kv = Some(KvModel {
        bucket: bucket.to_string(),
        live: vec![
            ("k1".into(), b"v1b".to_vec()),
            ("k4".into(), b"v4".to_vec()),
        ],
        removed: vec!["k2".into(), "k3".into()],
    });
    model
}

// ----- running a server ----------------------------------------------------------

/// The servers of this file: a small journal (2 segments of 4 MiB per shard).
fn options() -> Options {
    Options {
        journal_segment_bytes: Some(4 << 20),
        journal_segments: Some(2),
        ..Options::jetstream()
    }
}

/// Each stream's shard, from `/jsz?streams=true`.
fn shards(server: &Server) -> BTreeMap<String, usize> {
    let jsz = server.http_json("/jsz?streams=true");
    jsz["stream_detail"]
        .as_array()
        .expect("/jsz stream_detail")
        .iter()
        .map(|stream| {
            (
                stream["name"].as_str().expect("name").to_string(),
                stream["shard"].as_u64().expect("shard") as usize,
            )
        })
        .collect()
}

/// Starts a server, runs each victim's workload plus control streams
/// (`CTL_<i>`, until every shard has one), and stops it as `stop` says.
async fn prepare(
    stop: Stop,
    victims: &[(String, Workload)],
    options: Options,
) -> (Stopped, Vec<StreamModel>) {
    let server = tokio::task::block_in_place(|| Server::start(Flavor::Tern, options.clone()));
    let client = server.connect().await;
    let js = jetstream::new(client.clone());
    let shard_count = options.shards.unwrap_or(2);
    let mut models = Vec::new();
    let mut covered = BTreeSet::new();
    for index in 0..16 {
        if covered.len() == shard_count {
            break;
        }
        let name = format!("CTL_{index}");
        let model = messages_workload(&js, &client, &name).await;
        let shard = shards(&server)[&name];
        if covered.insert(shard) {
            models.push(model);
        } else {
            js.delete_stream(&name)
                .await
                .expect("delete a redundant control stream");
        }
    }
    assert_eq!(
        covered.len(),
        shard_count,
        "control streams cover every shard"
    );
    let workloads = victims.iter().map(|(name, workload)| {
        let (js, client) = (&js, &client);
        async move {
            match workload {
                Workload::Messages => messages_workload(js, client, name).await,
                Workload::KeyValue => kv_workload(js, name).await,
            }
        }
    });
    models.extend(futures::future::join_all(workloads).await);
    let placement = shards(&server);
    for model in &mut models {
        model.shard = placement[&model.name];
    }
    if stop == Stop::KillAfterCheckpoint {
        wait_checkpointed(&server.store_dir(), &models).await;
    }
    drop(client);
    let stopped = tokio::task::block_in_place(|| server.into_stopped(stop == Stop::Term));
    for model in &mut models {
        model.checkpointed = stream_dir(&stopped.store_dir(), &model.name)
            .join("raft")
            .is_file();
    }
    (stopped, models)
}

/// Waits (bounded) until each stream's `raft` file names an applied index at
/// least the last entry its shard's journal holds for it.
async fn wait_checkpointed(store: &Path, models: &[StreamModel]) {
    let deadline = Instant::now() + CHECKPOINT_TIMEOUT;
    loop {
        let mut behind = Vec::new();
        let mut journals: BTreeMap<usize, Vec<journal_layout::Segment>> = BTreeMap::new();
        for model in models {
            let segments = journals
                .entry(model.shard)
                .or_insert_with(|| journal_layout::segments(&journal_dir(store, model.shard)));
            let directory = stream_dir(store, &model.name);
            let group = stream_group(&directory);
            let last = segments
                .iter()
                .flat_map(|segment| &segment.batches)
                .flat_map(|batch| &batch.records)
                .filter(|record| Some(record.group) == group)
                .map(|record| record.index)
                .max()
                .unwrap_or(0);
            let applied = std::fs::read(directory.join("raft"))
                .ok()
                .filter(|bytes| bytes.len() >= 40)
                .map(|bytes| u64_at(&bytes, 32));
            if group.is_none() || applied.is_none_or(|applied| applied < last) {
                behind.push(format!(
                    "{} (applied {applied:?}, journal {last})",
                    model.name
                ));
            }
        }
        if behind.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint within {CHECKPOINT_TIMEOUT:?} for {behind:?}"
        );
        // Poll interval of a bounded wait for the periodic checkpoint.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `<store>/jetstream/journal/shard-<i>`.
fn journal_dir(store: &Path, shard: usize) -> PathBuf {
    store
        .join("jetstream")
        .join("journal")
        .join(format!("shard-{shard}"))
}

/// `<store>/jetstream/streams/<name>`.
fn stream_dir(store: &Path, name: &str) -> PathBuf {
    store.join("jetstream").join("streams").join(name)
}

/// The Raft group id in a stream's `config` file, if it reads.
fn stream_group(directory: &Path) -> Option<u64> {
    let bytes = std::fs::read(directory.join("config")).ok()?;
    let json_bytes = u32_at(&bytes, 12) as usize;
    let json: Value = serde_json::from_slice(bytes.get(32..32 + json_bytes)?).ok()?;
    json["group"].as_u64()
}

/// The little-endian u32 at `offset`.
fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("4 bytes"))
}

/// The little-endian u64 at `offset`.
fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

// ----- the journal's layout (adapt here when the format changes) ----------------

/// Where the current journal format puts segment headers, batches and
/// records; decoded with `tern_storage::format` so only this module knows
/// how batches follow each other.
mod journal_layout {
    use std::ops::Range;
    use std::path::{Path, PathBuf};

    use tern_storage::format::{
        BatchHeader, RecordHeader, SegmentHeader, BATCH_HEADER_BYTES, BLOCK_BYTES,
        RECORD_HEADER_BYTES,
    };

    /// One record: where it starts and where its body is, in the file.
    pub struct Record {
        pub offset: usize,
        pub body: Range<usize>,
        pub group: u64,
        pub index: u64,
    }

    /// One batch: where it starts and its records.
    pub struct Batch {
        pub offset: usize,
        pub records: Vec<Record>,
    }

    /// One segment file with a valid header.
    pub struct Segment {
        pub path: PathBuf,
        pub generation: u64,
        pub batches: Vec<Batch>,
    }

    impl Segment {
        /// Every record of the segment in order.
        pub fn records(&self) -> Vec<&Record> {
            self.batches
                .iter()
                .flat_map(|batch| &batch.records)
                .collect()
        }
    }

    /// The segment in `bytes` if its header is valid: the batches of its
    /// generation from block 1 on, up to the first that does not verify.
    pub fn decode(path: PathBuf, bytes: &[u8]) -> Option<Segment> {
        let header = SegmentHeader::decode(bytes.get(..BLOCK_BYTES)?)?;
        let mut batches = Vec::new();
        let mut offset = BLOCK_BYTES;
        while offset + BATCH_HEADER_BYTES <= bytes.len() {
            let Some(batch) = BatchHeader::decode(&bytes[offset..]) else {
                break;
            };
            let end = offset + BATCH_HEADER_BYTES + batch.records_bytes as usize;
            if batch.generation != header.generation
                || batch.offset != offset as u64
                || end > bytes.len()
            {
                break;
            }
            let mut records = Vec::new();
            let mut at = offset + BATCH_HEADER_BYTES;
            for _ in 0..batch.record_count {
                let Some((view, used)) = RecordHeader::decode(&bytes[at..end]) else {
                    break;
                };
                let body = at + RECORD_HEADER_BYTES;
                records.push(Record {
                    offset: at,
                    body: body..body + view.body.len(),
                    group: view.header.group,
                    index: view.header.index,
                });
                at += used;
            }
            batches.push(Batch { offset, records });
            offset += batch.batch_bytes as usize;
        }
        Some(Segment {
            path,
            generation: header.generation,
            batches,
        })
    }

    /// The valid segments of a shard's journal directory, oldest first.
    pub fn segments(directory: &Path) -> Vec<Segment> {
        let mut segments: Vec<Segment> = std::fs::read_dir(directory)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.path())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
            .into_iter()
            .filter(|path| path.extension().is_some_and(|extension| extension == "seg"))
            .filter_map(|path| {
                let bytes = std::fs::read(&path).ok()?;
                decode(path, &bytes)
            })
            .collect();
        segments.sort_by_key(|segment| segment.generation);
        segments
    }
}

// ----- the block store's layout -------------------------------------------------

/// One record of a block-store segment: its offset, size and payload range.
struct BlockRecord {
    offset: usize,
    payload: std::ops::Range<usize>,
}

/// The records of a `.blk` file, back to back from 0 until a zero size.
fn block_records(bytes: &[u8]) -> Vec<BlockRecord> {
    let mut records = Vec::new();
    let mut at = 0;
    while at + 40 <= bytes.len() {
        let size = u32_at(bytes, at) as usize;
        if size < 40 || at + size > bytes.len() {
            break;
        }
        let payload_start =
            at + 40 + u32_at(bytes, at + 24) as usize + u32_at(bytes, at + 28) as usize;
        let payload_end = payload_start + u32_at(bytes, at + 32) as usize;
        records.push(BlockRecord {
            offset: at,
            payload: payload_start..payload_end,
        });
        at += size;
    }
    records
}

// ----- damage --------------------------------------------------------------------

/// The file a case damages for `victim`, or why there is none.
fn target(store: &Path, file: FileClass, victim: &StreamModel) -> Result<PathBuf, String> {
    let directory = stream_dir(store, &victim.name);
    let path = match file {
        FileClass::JournalSegment => journal_layout::segments(&journal_dir(store, victim.shard))
            .pop()
            .map(|segment| segment.path)
            .ok_or_else(|| format!("no valid journal segment for shard {}", victim.shard))?,
        FileClass::BlockSegment => {
            let mut segments: Vec<PathBuf> = std::fs::read_dir(directory.join("messages"))
                .map_err(|error| format!("{}: {error}", directory.display()))?
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|extension| extension == "blk"))
                .collect();
            segments.sort();
            segments.pop().ok_or("no .blk segment")?
        }
        FileClass::DeletesLog => directory.join("messages").join("deletes.log"),
        FileClass::Meta => directory.join("messages").join("meta"),
        FileClass::Config => directory.join("config"),
        FileClass::Raft => directory.join("raft"),
        FileClass::Consumers => directory.join("consumers"),
        FileClass::Layout => store.join("jetstream").join("layout"),
    };
    if !path.is_file() {
        return Err(format!("no file {} to damage", path.display()));
    }
    Ok(path)
}

/// The byte whose low bit a [`Damage::Flip`] flips, per file class.
fn flip_offset(file: FileClass, spot: Spot, bytes: &[u8]) -> Result<usize, String> {
    let middle = |range: std::ops::Range<usize>| range.start + range.len() / 2;
    let none = || format!("no {spot:?} spot in a {} file", file.name());
    match (file, spot) {
        // Segment header: the generation (checked bytes 0..64); its CRC at 64.
        (FileClass::JournalSegment, Spot::Header) => Ok(24),
        (FileClass::JournalSegment, Spot::Checksum) => Ok(64),
        (FileClass::JournalSegment, _) => {
            let segment =
                journal_layout::decode(PathBuf::new(), bytes).ok_or("no valid segment header")?;
            let records = segment.records();
            match spot {
                // The first-sequence field of the batch in the middle.
                Spot::BatchHeader => segment
                    .batches
                    .get(segment.batches.len() / 2)
                    .map(|batch| batch.offset + 32)
                    .ok_or_else(none),
                Spot::Body => records
                    .get(records.len() / 2)
                    .map(|record| middle(record.body.clone()))
                    .ok_or_else(none),
                _ => records
                    .last()
                    .map(|record| middle(record.offset..record.body.end))
                    .ok_or_else(none),
            }
        }
        (FileClass::BlockSegment, _) => {
            let records = block_records(bytes);
            let record = match spot {
                Spot::LastRecord => records.last(),
                _ => records.get(records.len() / 2),
            }
            .ok_or_else(none)?;
            match spot {
                Spot::Header => Ok(record.offset + 8),
                Spot::Checksum => Ok(record.offset + 4),
                _ => Ok(middle(record.payload.clone())),
            }
        }
        // Delete entry 0: sequence | CRC | magic.
        (FileClass::DeletesLog, Spot::Body) if bytes.len() >= 16 => Ok(0),
        (FileClass::DeletesLog, Spot::Checksum) if bytes.len() >= 16 => Ok(8),
        (FileClass::DeletesLog, Spot::Header) if bytes.len() >= 16 => Ok(12),
        // Meta: magic | floor | CRC.
        (FileClass::Meta, Spot::Body) if bytes.len() >= 20 => Ok(8),
        (FileClass::Meta, Spot::Checksum) if bytes.len() >= 20 => Ok(16),
        // Config: the creation time (checked), the CRC, the JSON.
        (FileClass::Config, Spot::Header) if bytes.len() >= 32 => Ok(16),
        (FileClass::Config, Spot::Checksum) if bytes.len() >= 32 => Ok(24),
        (FileClass::Config, Spot::Body) if bytes.len() >= 32 => {
            Ok(32 + (u32_at(bytes, 12) as usize).min(bytes.len() - 32) / 2)
        }
        // Raft: the applied index, the CRC.
        (FileClass::Raft, Spot::Header) if bytes.len() >= 60 => Ok(32),
        (FileClass::Raft, Spot::Checksum) if bytes.len() >= 60 => Ok(56),
        // Consumers: the applied index, the CRC, the first durable's ack floor.
        (FileClass::Consumers, Spot::Header) if bytes.len() >= 40 => Ok(16),
        (FileClass::Consumers, Spot::Checksum) if bytes.len() >= 40 => Ok(32),
        (FileClass::Consumers, Spot::Body) if bytes.len() >= 64 => {
            let state = 40 + 24 + u32_at(bytes, 40) as usize + u32_at(bytes, 44) as usize;
            (state + 33 <= bytes.len())
                .then_some(state + 25)
                .ok_or_else(none)
        }
        // Layout: the shard count's digit.
        (FileClass::Layout, _) => bytes
            .iter()
            .position(u8::is_ascii_digit)
            .or((!bytes.is_empty()).then_some(bytes.len() / 2))
            .ok_or_else(none),
        _ => Err(none()),
    }
}

/// True for a file the store may legitimately not have (`meta` is being
/// retired): its cases are skipped, not failed, when it is absent.
fn optional_and_absent(store: &Path, file: FileClass, victim: &StreamModel) -> bool {
    file == FileClass::Meta && target(store, file, victim).is_err()
}

/// Damages `file` of `victim` as `damage` says; returns the file's base name.
fn damage(
    store: &Path,
    file: FileClass,
    damage: Damage,
    victim: &StreamModel,
) -> Result<String, String> {
    let path = target(store, file, victim)?;
    let name = path
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned();
    let mut bytes = std::fs::read(&path).map_err(|error| format!("{}: {error}", path.display()))?;
    match damage {
        Damage::Delete => {
            return std::fs::remove_file(&path)
                .map(|()| name)
                .map_err(|error| format!("{}: {error}", path.display()))
        }
        Damage::Flip(spot) => {
            let offset = flip_offset(file, spot, &bytes)?;
            bytes[offset] ^= 1;
        }
        Damage::ZeroBlock => {
            let offset = match file {
                // The block holding the middle record.
                FileClass::JournalSegment => {
                    let offset = flip_offset(file, Spot::Body, &bytes)?;
                    offset / 4096 * 4096
                }
                FileClass::BlockSegment => bytes.len() / 4096 / 2 * 4096,
                _ => 0,
            };
            let end = (offset + 4096).min(bytes.len());
            bytes[offset..end].fill(0);
        }
        Damage::Truncate3 => bytes.truncate(bytes.len().saturating_sub(3)),
        Damage::TruncateHalf => bytes.truncate(bytes.len() / 2),
    }
    std::fs::write(&path, &bytes).map_err(|error| format!("{}: {error}", path.display()))?;
    Ok(name)
}

// ----- checking the contract -------------------------------------------------------

/// A request whose reply is parsed as JSON, or why there was none.
async fn request(client: &async_nats::Client, subject: &str, body: &str) -> Result<Value, String> {
    match tokio::time::timeout(
        CHECK_TIMEOUT,
        client.request(subject.to_string(), body.to_string().into()),
    )
    .await
    {
        Err(_) => Err(format!("no reply to {subject} within {CHECK_TIMEOUT:?}")),
        Ok(Err(error)) => Err(format!("{subject}: {error}")),
        Ok(Ok(message)) => serde_json::from_slice(&message.payload).map_err(|error| {
            format!(
                "{subject}: not JSON ({error}): {:?}",
                String::from_utf8_lossy(&message.payload)
            )
        }),
    }
}

/// Standard base64 (with padding) decoded; `None` if malformed.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut bits, mut count) = (0u32, 0);
    for byte in text.bytes().filter(|byte| *byte != b'=') {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        bits = (bits << 6) | u32::from(value);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    Some(out)
}

/// The `Name: value` lines of a header block, sorted (the version line dropped).
fn header_lines(block: &[u8]) -> Vec<String> {
    let mut lines: Vec<String> = String::from_utf8_lossy(block)
        .split("\r\n")
        .skip(1)
        .filter(|line| !line.is_empty())
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// How `expected` differs from a `STREAM.MSG.GET` message, if it does.
fn message_difference(expected: &Stored, message: &Value) -> Option<String> {
    let subject = message["subject"].as_str().unwrap_or("");
    if subject != expected.subject {
        return Some(format!("subject {subject:?}, acked {:?}", expected.subject));
    }
    let data = base64_decode(message["data"].as_str().unwrap_or("")).unwrap_or_default();
    if data != expected.payload {
        return Some(format!(
            "payload of {} bytes differs from the {} acked",
            data.len(),
            expected.payload.len()
        ));
    }
    let headers = base64_decode(message["hdrs"].as_str().unwrap_or("")).unwrap_or_default();
    let mut wanted: Vec<String> = expected
        .headers
        .iter()
        .map(|(name, value)| format!("{name}: {value}"))
        .collect();
    wanted.sort();
    let found = header_lines(&headers);
    (found != wanted).then(|| format!("headers {found:?}, acked {wanted:?}"))
}

/// What one stream looked like after the restart.
#[derive(Clone, Debug, Default)]
struct StreamReport {
    outcome: String,
    violations: Vec<String>,
}

/// What one restart showed: per stream, and for the server as a whole.
#[derive(Debug, Default)]
struct RunReport {
    streams: BTreeMap<String, StreamReport>,
    /// Did not start, crashed, core NATS broken, wrongly refused or changed files.
    server: Vec<String>,
    /// True when the server did not run through the whole check.
    fatal: bool,
}

/// Starts the (damaged) store and checks every stream against the contract;
/// `may_be_offline(stream)` lists the file names an offline stream may name.
async fn restart_and_check(
    stopped: Stopped,
    models: &[StreamModel],
    may_be_offline: &(dyn Fn(&StreamModel) -> Vec<String> + Sync),
) -> (RunReport, Option<Server>) {
    match tokio::task::block_in_place(|| stopped.try_start()) {
        Ok(mut server) => {
            let report = check_server(&mut server, models, may_be_offline).await;
            (report, Some(server))
        }
        Err(failure) => {
            let report = RunReport {
                fatal: true,
                server: vec![format!(
                    "server did not start ({}): {}",
                    if failure.timed_out {
                        "hung".to_string()
                    } else {
                        format!("{:?}", failure.status)
                    },
                    failure_lines(&failure.stderr)
                )],
                ..RunReport::default()
            };
            (report, None)
        }
    }
}

/// Checks every stream of a running server, core NATS, and that it survived.
async fn check_server(
    server: &mut Server,
    models: &[StreamModel],
    may_be_offline: &(dyn Fn(&StreamModel) -> Vec<String> + Sync),
) -> RunReport {
    let mut report = RunReport::default();
    let connecting = async_nats::ConnectOptions::new().connect(server.url());
    let client = match tokio::time::timeout(CHECK_TIMEOUT, connecting).await {
        Ok(Ok(client)) => client,
        outcome => {
            // It reported its ports, then stopped (a shard failed to start).
            let deadline = Instant::now() + CHECK_TIMEOUT;
            while server.is_running() && Instant::now() < deadline {
                // Poll interval of a bounded wait for the process to exit.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let error = match outcome {
                Ok(Err(error)) => error.to_string(),
                _ => "timed out".to_string(),
            };
            report.server.push(format!(
                "server did not start (exited after reporting its ports; connect: {error}): {}",
                failure_lines(&server.log_tail())
            ));
            report.fatal = true;
            return report;
        }
    };
    let checks = models.iter().map(|model| {
        let allowed = may_be_offline(model);
        let (client, server) = (&client, &*server);
        async move {
            (
                model.name.clone(),
                check_stream(client, server, model, &allowed).await,
            )
        }
    });
    report.streams = futures::future::join_all(checks)
        .await
        .into_iter()
        .collect();
    if let Err(error) = core_round_trip(&client).await {
        report.server.push(format!("core NATS: {error}"));
        report.fatal = true;
    }
    if !server.is_running() || server.log_tail().contains("panicked") {
        report.server.push(format!(
            "server crashed during the check: {}",
            failure_lines(&server.log_tail())
        ));
        report.fatal = true;
    }
    report
}

/// What a failed server said: its panic (location and message) or its
/// last error lines, joined by ` | `.
fn failure_lines(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    if let Some(panic) = lines.iter().position(|line| line.contains("panicked at")) {
        return lines[panic..(panic + 2).min(lines.len())].join(" | ");
    }
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|line| line.contains("[ERR]") || line.starts_with("tern-server:"))
        .collect();
    if errors.is_empty() {
        last_lines(log, 2)
    } else {
        last_lines(&errors.join("\n"), 2)
    }
}

/// The last `count` lines of a log, joined by ` | `.
fn last_lines(log: &str, count: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(count)..].join(" | ")
}

/// A plain pub/sub round trip on a fresh subject.
async fn core_round_trip(client: &async_nats::Client) -> Result<(), String> {
    let subject = client.new_inbox().replacen("_INBOX", "core", 1);
    let mut subscriber = client
        .subscribe(subject.clone())
        .await
        .map_err(|error| error.to_string())?;
    client
        .publish(subject, "ping".into())
        .await
        .map_err(|error| error.to_string())?;
    match tokio::time::timeout(CHECK_TIMEOUT, subscriber.next()).await {
        Ok(Some(message)) if &message.payload[..] == b"ping" => Ok(()),
        Ok(other) => Err(format!("got {other:?}")),
        Err(_) => Err(format!("no message within {CHECK_TIMEOUT:?}")),
    }
}

/// Checks one stream: served identical, or offline naming one of `allowed`.
async fn check_stream(
    client: &async_nats::Client,
    server: &Server,
    model: &StreamModel,
    allowed: &[String],
) -> StreamReport {
    let name = &model.name;
    let mut report = StreamReport::default();
    let info = match request(client, &format!("$JS.API.STREAM.INFO.{name}"), "").await {
        Ok(info) => info,
        Err(error) => {
            report.outcome = "no answer".into();
            report.violations.push(format!("STREAM.INFO: {error}"));
            return report;
        }
    };
    let Some(error) = info.get("error") else {
        report.outcome = "served".into();
        check_served(client, model, &info, &mut report.violations).await;
        return report;
    };
    let description = error["description"].as_str().unwrap_or("");
    let offline = error["code"] == 500
        && error["err_code"] == 10194
        && description.starts_with("stream is offline: ");
    if !offline {
        report.outcome = format!("error {error}");
        let what = if error["err_code"] == 10059 {
            "the stream vanished"
        } else {
            "not the offline error"
        };
        report
            .violations
            .push(format!("STREAM.INFO answered {error} ({what})"));
        return report;
    }
    report.outcome = format!("offline: {description}");
    if allowed.is_empty() {
        report.violations.push(format!(
            "offline although it depends on no damaged file: {description:?}"
        ));
    } else if !allowed
        .iter()
        .any(|file| description.contains(file.as_str()))
    {
        report.violations.push(format!(
            "offline without naming {}: {description:?}",
            allowed.join(" or ")
        ));
    }
    check_offline(client, server, model, &mut report.violations).await;
    report
}

/// The served half of the contract: every message, the durable, the KV keys.
async fn check_served(
    client: &async_nats::Client,
    model: &StreamModel,
    info: &Value,
    violations: &mut Vec<String>,
) {
    let name = &model.name;
    let last_seq = info["state"]["last_seq"].as_u64().unwrap_or(0);
    if last_seq < model.last_acked() {
        violations.push(format!(
            "last_seq {last_seq} is below the last acked {}",
            model.last_acked()
        ));
    }
    let (mut lost, mut back, mut differ) = (Vec::new(), Vec::new(), Vec::new());
    for seq in 1..=model.last_acked() {
        let answer = request(
            client,
            &format!("$JS.API.STREAM.MSG.GET.{name}"),
            &json!({"seq": seq}).to_string(),
        )
        .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) => {
                // No answer: the rest would time out too.
                violations.push(format!("MSG.GET {seq}: {error}"));
                break;
            }
        };
        let not_found = answer["error"]["err_code"] == 10037 && answer["error"]["code"] == 404;
        match (model.live.get(&seq), answer.get("error")) {
            (Some(stored), None) => {
                if let Some(difference) = message_difference(stored, &answer["message"]) {
                    differ.push(format!("seq {seq}: {difference}"));
                }
            }
            (Some(_), Some(error)) => lost.push(format!(
                "{seq} ({})",
                error["description"].as_str().unwrap_or("?")
            )),
            (None, None) => back.push(seq),
            (None, Some(error)) if !not_found => {
                violations.push(format!("MSG.GET of gone seq {seq}: {error}"))
            }
            (None, Some(_)) => {}
        }
    }
    if !lost.is_empty() {
        violations.push(format!("acked messages lost: {}", lost.join(", ")));
    }
    if !back.is_empty() {
        violations.push(format!("deleted/purged messages came back: {back:?}"));
    }
    violations.extend(
        differ
            .into_iter()
            .map(|difference| format!("message differs: {difference}")),
    );
    if let Some((durable, floor)) = &model.durable {
        check_durable(client, model, durable, *floor, violations).await;
    }
    if let Some(kv) = &model.kv {
        check_kv(client, kv, violations).await;
    }
}

/// The durable exists, its ack floor held, and a pull returns a later message as acked.
async fn check_durable(
    client: &async_nats::Client,
    model: &StreamModel,
    durable: &str,
    floor: u64,
    violations: &mut Vec<String>,
) {
    let name = &model.name;
    let info = match request(
        client,
        &format!("$JS.API.CONSUMER.INFO.{name}.{durable}"),
        "",
    )
    .await
    {
        Ok(info) => info,
        Err(error) => return violations.push(format!("CONSUMER.INFO: {error}")),
    };
    if let Some(error) = info.get("error") {
        return violations.push(format!("durable {durable} is gone: {error}"));
    }
    let found = info["ack_floor"]["stream_seq"].as_u64().unwrap_or(0);
    if found < floor {
        violations.push(format!(
            "durable {durable}: ack floor {found}, acked up to {floor}"
        ));
    }
    // A pull's messages keep their own subjects: read them on a subscription.
    let inbox = client.new_inbox();
    let mut replies = match client.subscribe(inbox.clone()).await {
        Ok(replies) => replies,
        Err(error) => return violations.push(format!("subscribe: {error}")),
    };
    let expires_ns = CHECK_TIMEOUT.as_nanos() as u64 / 2;
    let body = json!({"batch": 1, "expires": expires_ns}).to_string();
    let subject = format!("$JS.API.CONSUMER.MSG.NEXT.{name}.{durable}");
    if let Err(error) = client.publish_with_reply(subject, inbox, body.into()).await {
        return violations.push(format!("pull from {durable}: {error}"));
    }
    let message = match tokio::time::timeout(CHECK_TIMEOUT, replies.next()).await {
        Ok(Some(message)) => message,
        Ok(None) => return violations.push(format!("pull from {durable}: subscription closed")),
        Err(_) => {
            return violations.push(format!(
                "pull from {durable}: no answer within {CHECK_TIMEOUT:?}"
            ))
        }
    };
    let wanted_next = model.live.range(floor + 1..).next().map(|(seq, _)| *seq);
    if message.status.is_some() {
        if let Some(next) = wanted_next {
            violations.push(format!(
                "pull from {durable}: {:?} {:?}, expected seq {next}",
                message.status, message.description
            ));
        }
        return;
    }
    let tokens: Vec<&str> = message.reply.as_deref().unwrap_or("").split('.').collect();
    // $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>... (or with domain and account: 2 more).
    let seq_token = if tokens.len() >= 12 {
        tokens.get(7)
    } else {
        tokens.get(5)
    };
    let Some(seq) = seq_token.and_then(|token| token.parse::<u64>().ok()) else {
        return violations.push(format!(
            "pull from {durable}: ack subject {:?}",
            message.reply
        ));
    };
    if seq <= floor {
        violations.push(format!(
            "pull from {durable} returned seq {seq}, at or below the ack floor {floor}"
        ));
    }
    match model.live.get(&seq) {
        None => violations.push(format!(
            "pull from {durable} returned seq {seq}, which is not a live acked message"
        )),
        Some(stored) => {
            let headers_ok = stored.headers.iter().all(|(header, value)| {
                message
                    .headers
                    .as_ref()
                    .and_then(|headers| headers.get(header.as_str()))
                    .map(|found| found.as_str())
                    == Some(value.as_str())
            });
            if message.subject.as_str() != stored.subject
                || message.payload[..] != stored.payload[..]
                || !headers_ok
            {
                violations.push(format!(
                    "pull from {durable}: seq {seq} differs from what was acked"
                ));
            }
        }
    }
}

/// Removed keys read as absent, live keys as put.
async fn check_kv(client: &async_nats::Client, model: &KvModel, violations: &mut Vec<String>) {
    let js = jetstream::new(client.clone());
    let store = match tokio::time::timeout(CHECK_TIMEOUT, js.get_key_value(&model.bucket)).await {
        Ok(Ok(store)) => store,
        other => return violations.push(format!("KV bucket {}: {other:?}", model.bucket)),
    };
    let expected = model
        .live
        .iter()
        .map(|(key, value)| (key, Some(value.clone())))
        .chain(model.removed.iter().map(|key| (key, None)));
    for (key, wanted) in expected {
        match tokio::time::timeout(CHECK_TIMEOUT, store.get(key.as_str())).await {
            Ok(Ok(found)) => {
                let found = found.map(|value| value.to_vec());
                if found != wanted {
                    violations.push(format!(
                        "KV key {key}: {:?}, expected {:?}",
                        found.map(|v| String::from_utf8_lossy(&v).into_owned()),
                        wanted.map(|v| String::from_utf8_lossy(&v).into_owned())
                    ));
                }
            }
            other => violations.push(format!("KV get {key}: {other:?}")),
        }
    }
}

/// The offline half of the contract: publishes refused, `/healthz` and `/jsz` name it.
async fn check_offline(
    client: &async_nats::Client,
    server: &Server,
    model: &StreamModel,
    violations: &mut Vec<String>,
) {
    let name = &model.name;
    let publish = client.request(model.probe_subject.clone(), "probe".into());
    match tokio::time::timeout(CHECK_TIMEOUT, publish).await {
        Err(_) => violations.push(format!(
            "publish to {} got no answer within {CHECK_TIMEOUT:?}",
            model.probe_subject
        )),
        // No responders: refused.
        Ok(Err(_)) => {}
        Ok(Ok(reply)) => {
            let ack: Value = serde_json::from_slice(&reply.payload).unwrap_or(Value::Null);
            if ack.get("error").is_none() && reply.status.is_none() {
                violations.push(format!("publish accepted while offline: {ack}"));
            }
        }
    }
    let (status, body) = server.http_get("/healthz");
    if status != 503 || !body.contains(name.as_str()) {
        let body = body.split_whitespace().collect::<Vec<_>>().join(" ");
        violations.push(format!("/healthz {status} does not name it: {body}"));
    }
    let (_, jsz) = server.http_get("/jsz?streams=true");
    let jsz: Value = serde_json::from_str(&jsz).unwrap_or(Value::Null);
    let listed = jsz["stream_detail"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|stream| stream["name"] == name.as_str())
        .cloned();
    match listed {
        None => violations.push("/jsz does not list it".into()),
        Some(stream) if stream["failure"].is_null() => {
            violations.push(format!("/jsz lists it without a failure: {stream}"))
        }
        Some(_) => {}
    }
}

// ----- outcomes --------------------------------------------------------------------

/// One case's result: the victim's outcome and every violation seen.
struct CaseResult {
    label: String,
    outcome: String,
    violations: Vec<String>,
}

/// Prints every case's outcome and fails with the full list of violations.
fn conclude(test: &str, started: Instant, results: Vec<CaseResult>) {
    let mut failed = Vec::new();
    for result in &results {
        let verdict = if result.violations.is_empty() {
            "ok"
        } else {
            "VIOLATED"
        };
        println!("[{}] {verdict}: {}", result.label, result.outcome);
        let label = &result.label;
        failed.extend(
            result
                .violations
                .iter()
                .map(|violation| format!("[{label}] {violation}")),
        );
    }
    println!(
        "{test}: {} cases, {} violated, {:.1?}",
        results.len(),
        results
            .iter()
            .filter(|result| !result.violations.is_empty())
            .count(),
        started.elapsed()
    );
    assert!(
        failed.is_empty(),
        "{test}: {} violations:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// A case's result from a run: its victim's report plus every other stream's
/// violations and the server's.
fn case_result(
    label: String,
    victim: &str,
    report: &RunReport,
    setup: Option<String>,
) -> CaseResult {
    let mut violations: Vec<String> = setup
        .into_iter()
        .map(|error| format!("setup: {error}"))
        .collect();
    violations.extend(report.server.iter().cloned());
    let mut outcome = report.server.first().cloned().unwrap_or_default();
    for (stream, stream_report) in &report.streams {
        if stream == victim {
            outcome = stream_report.outcome.clone();
        }
        violations.extend(
            stream_report
                .violations
                .iter()
                .map(|violation| format!("{stream}: {violation}")),
        );
    }
    CaseResult {
        label,
        outcome,
        violations,
    }
}

/// Copies a directory tree (a stopped server's files).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let destination = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &destination);
        } else {
            std::fs::copy(entry.path(), &destination).expect("copy file");
        }
    }
}

/// A copy of a stopped server's files, startable on their own.
fn copy_stopped(stopped: &Stopped) -> Stopped {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_tree(stopped.dir.path(), dir.path());
    Stopped {
        flavor: stopped.flavor,
        options: stopped.options.clone(),
        dir,
    }
}

/// Runs `work` over labelled `items`, at most [`RUNS_IN_FLIGHT`] at once;
/// results in the order of `items`, a panicking case reported as a violation.
async fn in_parallel<T, F>(items: Vec<(String, T)>, work: F) -> Vec<CaseResult>
where
    T: Send + 'static,
    F: Fn(T) -> futures::future::BoxFuture<'static, CaseResult> + Send + Sync + 'static,
{
    let limit = Arc::new(tokio::sync::Semaphore::new(RUNS_IN_FLIGHT));
    let work = Arc::new(work);
    let tasks: Vec<_> = items
        .into_iter()
        .map(|(label, item)| {
            let (limit, work) = (limit.clone(), work.clone());
            let task = tokio::spawn(async move {
                let _permit = limit.acquire_owned().await.expect("semaphore");
                work(item).await
            });
            (label, task)
        })
        .collect();
    let mut results = Vec::new();
    for (label, task) in tasks {
        results.push(task.await.unwrap_or_else(|error| {
            let panic = error.try_into_panic().ok();
            let message = panic
                .as_ref()
                .and_then(|panic| panic.downcast_ref::<String>().cloned())
                .or_else(|| {
                    panic
                        .as_ref()
                        .and_then(|panic| panic.downcast_ref::<&str>().map(|text| text.to_string()))
                })
                .unwrap_or_else(|| "cancelled".into());
            CaseResult {
                label,
                outcome: "the case panicked".into(),
                violations: vec![format!("the case panicked: {message}")],
            }
        }));
    }
    results
}

// ----- the tests ---------------------------------------------------------------------

/// One server per journal damage: a victim stream and control streams; the
/// victim's shard journal is damaged.
async fn journal_matrix(test: &str, stop: Stop) {
    let started = Instant::now();
    let cases: Vec<Case> = JOURNAL_DAMAGES
        .iter()
        .map(|damage| Case {
            file: FileClass::JournalSegment,
            damage: *damage,
            stop,
            workload: Workload::Messages,
        })
        .collect();
    let labelled = cases.into_iter().map(|case| (case.label(), case)).collect();
    let results = in_parallel(labelled, |case| {
        Box::pin(async move {
            let victim = "VICTIM".to_string();
            let (stopped, models) =
                prepare(case.stop, &[(victim.clone(), case.workload)], options()).await;
            let model = models
                .iter()
                .find(|model| model.name == victim)
                .expect("victim");
            let shard = model.shard;
            let damaged = damage(&stopped.store_dir(), case.file, case.damage, model);
            let file = damaged.clone().unwrap_or_default();
            // Every stream on the damaged journal's shard depends on it.
            let allowed = move |stream: &StreamModel| {
                if stream.shard == shard {
                    vec![file.clone()]
                } else {
                    Vec::new()
                }
            };
            let (report, _server) = restart_and_check(stopped, &models, &allowed).await;
            let mut result = case_result(case.label(), &victim, &report, damaged.err());
            let copies = if model.checkpointed {
                "checkpointed"
            } else {
                "journal only"
            };
            result.outcome = format!("shard {shard}, {copies}: {}", result.outcome);
            result
        })
    })
    .await;
    conclude(test, started, results);
}

/// One server for all stream-file cases of `stop` (a victim stream each); a
/// run that does not hold together is repeated one case at a time.
async fn stream_file_matrix(test: &str, cases: Vec<Case>) {
    let started = Instant::now();
    let stop = cases[0].stop;
    let victims: Vec<(String, Workload)> = cases
        .iter()
        .map(|case| (case.stream(), case.workload))
        .collect();
    let (stopped, models) = prepare(stop, &victims, options()).await;
    let by_name: BTreeMap<String, StreamModel> = models
        .iter()
        .map(|model| (model.name.clone(), model.clone()))
        .collect();
    let (skipped, cases): (Vec<Case>, Vec<Case>) = cases.into_iter().partition(|case| {
        optional_and_absent(&stopped.store_dir(), case.file, &by_name[&case.stream()])
    });
    let mut results: Vec<CaseResult> = skipped
        .iter()
        .map(|case| CaseResult {
            label: case.label(),
            outcome: format!("skipped: the store has no {} file", case.file.name()),
            violations: Vec::new(),
        })
        .collect();
    let pristine = tokio::task::block_in_place(|| copy_stopped(&stopped));
    // Damage every victim's file; remember which name each may report.
    let mut files = BTreeMap::new();
    let mut setup = BTreeMap::new();
    for case in &cases {
        let victim = &by_name[&case.stream()];
        match damage(&stopped.store_dir(), case.file, case.damage, victim) {
            Ok(file) => files.insert(case.stream(), file),
            Err(error) => setup.insert(case.stream(), error),
        };
    }
    let allowed =
        move |stream: &StreamModel| files.get(&stream.name).cloned().into_iter().collect();
    let (report, server) = restart_and_check(stopped, &models, &allowed).await;
    drop(server);
    let controls_hurt = report
        .streams
        .iter()
        .any(|(name, stream)| name.starts_with("CTL_") && !stream.violations.is_empty());
    if !report.fatal && !controls_hurt {
        results.extend(cases.iter().map(|case| {
            let victim = case.stream();
            let stream = &report.streams[&victim];
            let setup = setup.get(&victim).map(|error| format!("setup: {error}"));
            CaseResult {
                label: case.label(),
                outcome: stream.outcome.clone(),
                violations: setup
                    .into_iter()
                    .chain(stream.violations.iter().cloned())
                    .collect(),
            }
        }));
    } else {
        println!(
            "{test}: the shared run did not hold together ({}); re-running each case alone",
            report
                .server
                .first()
                .cloned()
                .unwrap_or_else(|| "a control stream was hurt".into())
        );
        let pristine = Arc::new(pristine);
        let models = Arc::new(models);
        let labelled = cases.into_iter().map(|case| (case.label(), case)).collect();
        let alone = in_parallel(labelled, move |case| {
            let (pristine, models) = (pristine.clone(), models.clone());
            Box::pin(async move {
                let copy = tokio::task::block_in_place(|| copy_stopped(&pristine));
                let victim = case.stream();
                let model = models
                    .iter()
                    .find(|model| model.name == victim)
                    .expect("victim");
                let damaged = damage(&copy.store_dir(), case.file, case.damage, model);
                let file = damaged.clone().unwrap_or_default();
                let allowed = move |stream: &StreamModel| {
                    if stream.name == victim {
                        vec![file.clone()]
                    } else {
                        Vec::new()
                    }
                };
                let (report, _server) = restart_and_check(copy, &models, &allowed).await;
                case_result(case.label(), &case.stream(), &report, damaged.err())
            })
        })
        .await;
        results.extend(alone);
    }
    conclude(test, started, results);
}

/// Journal damage with the data only in the journal (SIGKILL right after publishing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn journal_after_sigkill() {
    journal_matrix("journal_after_sigkill", Stop::Kill).await;
}

/// Journal damage after a checkpoint and SIGKILL: the block store has everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn journal_after_checkpoint_sigkill() {
    journal_matrix(
        "journal_after_checkpoint_sigkill",
        Stop::KillAfterCheckpoint,
    )
    .await;
}

/// Journal damage after a clean stop (SIGTERM).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn journal_after_clean_stop() {
    journal_matrix("journal_after_clean_stop", Stop::Term).await;
}

/// Stream files damaged while the data is only in the journal: `config`
/// (the only stream file that exists before a checkpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stream_files_after_sigkill() {
    let mut cases = Vec::new();
    let damages = [
        Damage::Flip(Spot::Header),
        Damage::Flip(Spot::Checksum),
        Damage::Flip(Spot::Body),
    ];
    for damage in damages.into_iter().chain(FILE_DAMAGES) {
        cases.push(Case {
            file: FileClass::Config,
            damage,
            stop: Stop::Kill,
            workload: Workload::Messages,
        });
    }
    stream_file_matrix("stream_files_after_sigkill", cases).await;
}

/// Block store, deletes, meta, config, raft and consumers files damaged after
/// a checkpoint and SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stream_files_after_checkpoint_sigkill() {
    stream_file_matrix(
        "stream_files_after_checkpoint_sigkill",
        stream_file_cases(Stop::KillAfterCheckpoint),
    )
    .await;
}

/// The same files damaged after a clean stop (SIGTERM).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stream_files_after_clean_stop() {
    stream_file_matrix(
        "stream_files_after_clean_stop",
        stream_file_cases(Stop::Term),
    )
    .await;
}

// ----- store identity ------------------------------------------------------------

/// Every file under `root` with its size and CRC-32C.
fn file_snapshot(root: &Path) -> BTreeMap<PathBuf, (u64, u32)> {
    let mut files = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&directory) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                files.insert(
                    path,
                    (bytes.len() as u64, tern_storage::format::checksum(&bytes)),
                );
            }
        }
    }
    files
}

/// What changed between two snapshots: files added, removed or rewritten.
fn snapshot_changes(
    before: &BTreeMap<PathBuf, (u64, u32)>,
    after: &BTreeMap<PathBuf, (u64, u32)>,
) -> Vec<String> {
    let mut changes = Vec::new();
    for (path, summary) in before {
        match after.get(path) {
            None => changes.push(format!("{} deleted", path.display())),
            Some(found) if found != summary => changes.push(format!("{} changed", path.display())),
            Some(_) => {}
        }
    }
    changes.extend(
        after
            .keys()
            .filter(|path| !before.contains_key(*path))
            .map(|path| format!("{} created", path.display())),
    );
    changes
}

/// What a store-identity start left: a running server, or the refused files.
enum Started {
    Running(Server),
    Refused(Stopped),
}

/// A start on a store it must not silently use: either it refuses (non-zero
/// exit, a stderr line naming one of `names`, nothing under `watched`
/// changed), or it starts and the contract holds (offline streams naming
/// one of `names`). Returns the outcome, the violations and what is left.
async fn identity_start(
    stopped: Stopped,
    models: &[StreamModel],
    names: &[&str],
    watched: &[PathBuf],
) -> (String, Vec<String>, Started) {
    let before: Vec<_> = watched.iter().map(|root| file_snapshot(root)).collect();
    let (flavor, options) = (stopped.flavor, stopped.options.clone());
    match tokio::task::block_in_place(|| stopped.try_start()) {
        Ok(mut server) => {
            let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
            let allowed = move |_: &StreamModel| names.clone();
            let report = check_server(&mut server, models, &allowed).await;
            let offline: Vec<&String> = report
                .streams
                .iter()
                .filter(|(_, stream)| stream.outcome.starts_with("offline"))
                .map(|(name, _)| name)
                .collect();
            let outcome = format!("started; offline streams: {offline:?}");
            let violations = case_result(String::new(), "", &report, None).violations;
            (outcome, violations, Started::Running(server))
        }
        Err(failure) => {
            let mut violations = Vec::new();
            let line = failure
                .stderr
                .lines()
                .find(|line| {
                    names.iter().any(|name| line.contains(name)) && !line.contains("[INF]")
                })
                .map(str::to_string);
            if failure.timed_out {
                violations.push("neither started nor exited (hang)".into());
            } else if failure.status.is_some_and(|status| status.success()) {
                violations.push("refused with exit status 0".into());
            }
            if line.is_none() {
                violations.push(format!(
                    "no stderr line names {}: {}",
                    names.join(" or "),
                    failure_lines(&failure.stderr)
                ));
            }
            for (root, before) in watched.iter().zip(&before) {
                let changes = snapshot_changes(before, &file_snapshot(root));
                violations.extend(
                    changes
                        .into_iter()
                        .map(|change| format!("refused but {change}")),
                );
            }
            let said = line.unwrap_or_else(|| failure_lines(&failure.stderr));
            let outcome = format!("refused ({:?}): {said}", failure.status);
            let refused = Stopped {
                flavor,
                options,
                dir: failure.dir,
            };
            (outcome, violations, Started::Refused(refused))
        }
    }
}

/// `jetstream/layout` deleted, flipped or cut: refuse cleanly or serve everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn layout_damaged() {
    let started = Instant::now();
    let damages = vec![Damage::Delete, Damage::Flip(Spot::Body), Damage::Truncate3];
    let labelled = damages
        .into_iter()
        .map(|kind| (format!("Kill/layout/{}", kind.name()), kind))
        .collect();
    let results = in_parallel(labelled, |kind| {
        Box::pin(async move {
            let label = format!("Kill/layout/{}", kind.name());
            let victims = [("VICTIM".to_string(), Workload::Messages)];
            let (stopped, models) = prepare(Stop::Kill, &victims, options()).await;
            let store = stopped.store_dir();
            let setup = damage(&store, FileClass::Layout, kind, &models[0]).err();
            let (outcome, mut violations, _left) =
                identity_start(stopped, &models, &["layout"], &[store]).await;
            violations.extend(setup.map(|error| format!("setup: {error}")));
            CaseResult {
                label,
                outcome,
                violations,
            }
        })
    })
    .await;
    conclude("layout_damaged", started, results);
}

/// Data written by 2 shards, started with 1: refuse cleanly or serve
/// everything; either way, started with 2 again it serves everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shard_count_changed() {
    let started = Instant::now();
    let victims = [("VICTIM".to_string(), Workload::Messages)];
    let (mut stopped, models) = prepare(Stop::Kill, &victims, options()).await;
    let store = stopped.store_dir();
    stopped.options.shards = Some(1);
    let (outcome, mut violations, left) =
        identity_start(stopped, &models, &["layout"], &[store]).await;
    let mut restored = match left {
        Started::Running(server) => tokio::task::block_in_place(|| server.into_stopped(false)),
        Started::Refused(stopped) => stopped,
    };
    restored.options.shards = Some(2);
    let (report, _server) =
        restart_and_check(restored, &models, &|_: &StreamModel| Vec::new()).await;
    let again = case_result(String::new(), "", &report, None).violations;
    violations.extend(
        again
            .into_iter()
            .map(|violation| format!("back on 2 shards: {violation}")),
    );
    let result = CaseResult {
        label: "Kill/layout/started-with-1-shard".into(),
        outcome,
        violations,
    };
    conclude("shard_count_changed", started, vec![result]);
}

/// A store started with another server's journal (`--journal_dir`): refuse
/// cleanly or serve its own streams; the other server's data survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn foreign_journal() {
    let started = Instant::now();
    let victims_a = [("A_VICTIM".to_string(), Workload::Messages)];
    let victims_b = [("B_VICTIM".to_string(), Workload::Messages)];
    let ((foreign, models_a), (stopped_b, models_b)) = tokio::join!(
        prepare(Stop::Kill, &victims_a, options()),
        prepare(Stop::Kill, &victims_b, options()),
    );
    let journal_b = stopped_b.store_dir().join("jetstream").join("journal");
    let mut foreign = foreign;
    foreign.options.extra_args = vec!["--journal_dir".into(), journal_b.display().to_string()];
    let store_a = foreign.store_dir();
    let watched = [store_a, journal_b.clone()];
    let (outcome, mut violations, left) =
        identity_start(foreign, &models_a, &["journal", "layout"], &watched).await;
    drop(left);
    let (report, _server) =
        restart_and_check(stopped_b, &models_b, &|_: &StreamModel| Vec::new()).await;
    let after = case_result(String::new(), "", &report, None).violations;
    violations.extend(
        after
            .into_iter()
            .map(|violation| format!("server B afterwards: {violation}")),
    );
    let result = CaseResult {
        label: "Kill/journal/another-server's".into(),
        outcome,
        violations,
    };
    conclude("foreign_journal", started, vec![result]);
}
