//! Fault matrix over the real `tern-server`: damage to any single file of
//! the store never loses or alters an acknowledged message without an error
//! that names it, and never deletes a stream.
//!
//! Each case publishes (every acked sequence, subject, headers and payload
//! recorded), deletes and purges some messages (recorded as gone), creates a
//! durable pull consumer and double-acks three messages (the ack floor the
//! last double-ack confirmed, read back from CONSUMER.INFO, recorded), stops
//! the server ([`Stop`]), damages ONE file ([`FileClass`], [`Damage`]) and
//! starts it again. Some victims hold more ([`Workload`]): a journal that
//! rotated, a message whose journal batch spans several blocks, or a block
//! store of three or more segments. Then, for every stream, exactly one of:
//!
//! * **served identical**: STREAM.INFO answers; every acked message not
//!   deleted or purged comes back identical from `STREAM.MSG.GET`; gone
//!   sequences answer 404/10037; the durable exists with an ack floor at
//!   least what the double-ack confirmed and a pull returns a later,
//!   identical message; a KV key that was deleted or purged stays so; it is
//!   in no list of offline streams (`/healthz`, STREAM.LIST);
//! * **offline, named** (only for streams that depend on the damaged file):
//!   STREAM.INFO answers 500/10194 `stream is offline: ...` naming the file's
//!   base name; a publish to its subjects is refused; `/healthz` is 503 and
//!   its `errors` list the stream (`"type":"STREAM"`); `/jsz?streams=true`
//!   lists it with a `failure`; STREAM.LIST lists it under `missing` and
//!   under `offline` with a reason naming the file; STREAM.NAMES lists it.
//!
//! Always: the server starts (except the store-identity cases, which may
//! refuse with a non-zero exit, a stderr line naming the file, and no file
//! changed), does not crash or hang, core NATS still works, and control
//! streams (one per shard) are served. Journal damage may take the streams
//! of that journal's shard offline (its control stream included), never
//! those of the other shard.
//!
//! Cases of different streams' files share one server run (one victim stream
//! each); a run that does not start, crashes, or hurts a control stream is
//! re-run case by case from a copy of the undamaged store, so every outcome
//! names its cause. Journal and store-identity cases get a server each, run
//! concurrently. Every case prints its outcome; each test fails at the end
//! with the full list of violations.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy, kv, stream::StorageType};
use futures::StreamExt;
use serde_json::{json, Value};

use common::{Flavor, Options, Server, Stopped, TIMEOUT};

/// Bound for one request of the checker (a hang is a violation, not a wait).
/// How long a publish in the prepare phase waits for its PubAck.
const PUBLISH_ACK_TIMEOUT: Duration = Duration::from_secs(90);
const CHECK_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound for the `raft` files to cover the journal (checkpoints run every 2 s).
const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(60);
/// Servers of one test running at once (2 cores; they mostly wait on I/O).
const RUNS_IN_FLIGHT: usize = 4;
/// Messages published by the message workload.
const MESSAGES: u64 = 10;
/// The durable consumer every message workload creates.
const DURABLE: &str = "D";
/// Payload of the [`Workload::Rotated`] messages that fill the journal.
const ROTATION_PAYLOAD_BYTES: usize = 64 << 10;
/// Bound on them: two 4 MiB segments hold fewer than this many.
const ROTATION_MESSAGES_MAX: u64 = 110;
/// Payload of the [`Workload::BigMessage`] message: its batch is 6 data blocks.
const BIG_PAYLOAD_BYTES: usize = 20 << 10;
/// Payload and count of the [`Workload::Large`] messages: a block-store
/// segment stops growing at 64 MiB (not configurable), so 700 of 200 KB
/// make two full segments (335 each) and a third. (Not larger: the broker
/// stores at most ~252 KiB per message, its block-store write buffer.)
const LARGE_PAYLOAD_BYTES: usize = 200_000;
const LARGE_MESSAGES: u64 = 700;
/// Large messages published before their acks are awaited.
const LARGE_PUBLISHES_IN_FLIGHT: usize = 16;
/// Segments a [`Workload::Large`] block store must have.
const LARGE_SEGMENTS_MIN: usize = 3;

// ----- the matrix -------------------------------------------------------------

/// Which file of the store a case damages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileClass {
    /// The newest `journal-NNNNNN.seg` (by generation) of the victim
    /// stream's shard.
    JournalSegment,
    /// A block-store segment the victim's checkpoint manifest names
    /// (`messages/<first:020>.blk` or `<first:020>.<version>.blk`), in
    /// manifest order.
    BlockSegment(Nth),
    DeletesLog,
    Config,
    Raft,
    Consumers,
    /// `jetstream/layout`.
    Layout,
}

/// Which of several: a segment of the manifest, a record of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nth {
    First,
    /// Index `len / 2`.
    Middle,
    Last,
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
    /// The middle data block of the victim's largest journal batch zeroed
    /// (neither the block of its header nor of its footer).
    ZeroBatchMiddle,
    /// The last 3 bytes cut off.
    Truncate3,
    /// Cut to half its size.
    TruncateHalf,
    /// Cut exactly where a record (block store) or entry (deletes log) starts.
    CutAtRecord(Nth),
    Delete,
    /// Every segment of the victim shard's journal zeroed, sizes kept: an
    /// erased journal, which must not read as a fresh one.
    ZeroJournal,
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
    /// Messages, then 64 KiB messages until the shard's journal has rotated
    /// and the victim's records are in two segments.
    Rotated,
    /// Messages, then one 20 KiB message: a journal batch of several blocks.
    BigMessage,
    /// Messages, then 700 of 200 KB: a block store of three or more segments.
    Large,
}

impl Workload {
    /// The prefix of the victim's name and the suffix of its label.
    fn tags(self) -> (&'static str, &'static str) {
        match self {
            Workload::Messages => ("", ""),
            Workload::KeyValue => ("KV_", " (KV)"),
            Workload::Rotated => ("ROT_", " (rotated journal)"),
            Workload::BigMessage => ("BIG_", " (20 KiB message)"),
            Workload::Large => ("LARGE_", " (3+ segments)"),
        }
    }
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
        format!(
            "{:?}/{}/{}{}",
            self.stop,
            self.file.name(),
            self.damage.name(),
            self.workload.tags().1
        )
    }

    /// The victim stream's name: unique per file class, damage and workload.
    fn stream(&self) -> String {
        let tag = format!("{}_{}", self.file.name(), self.damage.name())
            .to_uppercase()
            .replace(['.', '-', ' '], "_");
        format!("{}{tag}", self.workload.tags().0)
    }
}

impl FileClass {
    /// Short name used in labels and stream names.
    fn name(self) -> &'static str {
        match self {
            FileClass::JournalSegment => "journal",
            FileClass::BlockSegment(Nth::Last) => "blk",
            FileClass::BlockSegment(Nth::Middle) => "blk-middle",
            FileClass::BlockSegment(Nth::First) => "blk-first",
            FileClass::DeletesLog => "deletes",
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
            Damage::ZeroBatchMiddle => "zero-batch-middle-block".into(),
            Damage::Truncate3 => "truncate-3".into(),
            Damage::TruncateHalf => "truncate-half".into(),
            Damage::CutAtRecord(nth) => {
                format!("cut-at-{}-record", format!("{nth:?}").to_lowercase())
            }
            Damage::Delete => "delete".into(),
            Damage::ZeroJournal => "zero-journal".into(),
        }
    }
}

/// Every way the journal segment is damaged, and on which victim.
const JOURNAL_DAMAGES: [(Damage, Workload); 12] = [
    (Damage::Flip(Spot::Header), Workload::Messages),
    (Damage::Flip(Spot::Checksum), Workload::Messages),
    (Damage::Flip(Spot::BatchHeader), Workload::Messages),
    (Damage::Flip(Spot::Body), Workload::Messages),
    (Damage::Flip(Spot::LastRecord), Workload::Messages),
    (Damage::ZeroBlock, Workload::Messages),
    (Damage::ZeroBatchMiddle, Workload::BigMessage),
    (Damage::Truncate3, Workload::Messages),
    (Damage::TruncateHalf, Workload::Messages),
    (Damage::Delete, Workload::Messages),
    // The newest of two segments the victim's records are in.
    (Damage::Delete, Workload::Rotated),
    (Damage::ZeroJournal, Workload::Messages),
];

/// The generic kinds every small file gets: zeroed, cut, deleted.
const FILE_DAMAGES: [Damage; 4] = [
    Damage::ZeroBlock,
    Damage::Truncate3,
    Damage::TruncateHalf,
    Damage::Delete,
];

/// The stream-file cases of one stop: block store, deletes, config, raft, consumers.
fn stream_file_cases(stop: Stop) -> Vec<Case> {
    let case = |file, damage, workload| Case {
        file,
        damage,
        stop,
        workload,
    };
    let newest = FileClass::BlockSegment(Nth::Last);
    let mut cases = Vec::new();
    for spot in [Spot::Header, Spot::Checksum, Spot::Body, Spot::LastRecord] {
        cases.push(case(newest, Damage::Flip(spot), Workload::Messages));
    }
    let flips: [(FileClass, &[Spot]); 4] = [
        (
            FileClass::DeletesLog,
            &[Spot::Header, Spot::Checksum, Spot::Body],
        ),
        (
            FileClass::Config,
            &[Spot::Header, Spot::Checksum, Spot::Body],
        ),
        (FileClass::Raft, &[Spot::Header, Spot::Checksum, Spot::Body]),
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
        newest,
        FileClass::DeletesLog,
        FileClass::Config,
        FileClass::Raft,
        FileClass::Consumers,
    ] {
        for damage in FILE_DAMAGES {
            cases.push(case(file, damage, Workload::Messages));
        }
    }
    // Cuts a size check alone must catch: nothing half-written is left.
    for nth in [Nth::Last, Nth::Middle] {
        cases.push(case(newest, Damage::CutAtRecord(nth), Workload::Messages));
    }
    cases.push(case(
        FileClass::DeletesLog,
        Damage::CutAtRecord(Nth::Last),
        Workload::Messages,
    ));
    // A KV bucket whose removed revisions must stay removed.
    for damage in [
        Damage::Flip(Spot::Body),
        Damage::Delete,
        Damage::ZeroBlock,
        Damage::CutAtRecord(Nth::Last),
    ] {
        cases.push(case(FileClass::DeletesLog, damage, Workload::KeyValue));
    }
    cases
}

/// The cases of a block store of three or more segments (the bug report's
/// "10,000 to 20,048 acked messages lost"): a whole segment gone, one cut
/// at a record boundary, a bit flipped in a record in the middle.
fn large_cases() -> Vec<Case> {
    [
        (FileClass::BlockSegment(Nth::Middle), Damage::Delete),
        (
            FileClass::BlockSegment(Nth::First),
            Damage::CutAtRecord(Nth::Middle),
        ),
        (
            FileClass::BlockSegment(Nth::Middle),
            Damage::Flip(Spot::Body),
        ),
    ]
    .into_iter()
    .map(|(file, damage)| Case {
        file,
        damage,
        stop: Stop::KillAfterCheckpoint,
        workload: Workload::Large,
    })
    .collect()
}

// ----- what the client was told ------------------------------------------------

/// One acked message as published (the payload shared: 140 MB of large ones).
#[derive(Clone, Debug)]
struct Stored {
    subject: String,
    headers: Vec<(String, String)>,
    payload: Arc<[u8]>,
}

impl Stored {
    /// A message as published on `subject` with `headers`.
    fn new(subject: String, headers: &[(&str, &str)], payload: Vec<u8>) -> Stored {
        Stored {
            subject,
            headers: headers
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            payload: payload.into(),
        }
    }
}

/// What a client knows about one stream after the workload.
#[derive(Clone, Debug)]
struct StreamModel {
    name: String,
    workload: Workload,
    shard: usize,
    /// A subject the stream stores (for the refused-publish check).
    probe_subject: String,
    /// Acked and not removed, by sequence.
    live: BTreeMap<u64, Stored>,
    /// Acked, then deleted or purged (or removed by a KV limit).
    gone: BTreeSet<u64>,
    /// The durable's name and the ack floor (stream sequence) CONSUMER.INFO
    /// reported after the last double-ack was answered.
    durable: Option<(String, u64)>,
    kv: Option<KvModel>,
    /// When the server stopped, the `raft` file's applied index covered
    /// every journal entry of the stream (the block store had everything).
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
    fn new(name: &str, workload: Workload, probe_subject: String) -> StreamModel {
        StreamModel {
            name: name.to_string(),
            workload,
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

    /// The subject prefix of a (non-KV) stream.
    fn prefix(&self) -> String {
        self.name.to_lowercase()
    }
}

/// The payload of message `index` of `stream`: 700 to ~1600 bytes, so the
/// block store's records span several 4 KiB blocks.
fn payload(stream: &str, index: u64) -> Vec<u8> {
    payload_of(stream, index, 700 + 97 * index as usize)
}

/// `length` bytes that name `stream` and `index`, then pseudo-random letters.
fn payload_of(stream: &str, index: u64, length: usize) -> Vec<u8> {
    let mut bytes = format!("{stream}/{index}|").into_bytes();
    bytes.reserve(length.saturating_sub(bytes.len()));
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
    send(js, subject, headers, payload)
        .await
        .await
        .unwrap_or_else(|error| panic!("PubAck for {subject}: {error}"))
        .sequence
}

/// Sends one publish; the PubAck is awaited by the caller.
async fn send(
    js: &jetstream::Context,
    subject: &str,
    headers: &[(&str, &str)],
    payload: Vec<u8>,
) -> jetstream::context::PublishAckFuture {
    let mut map = async_nats::HeaderMap::new();
    for (name, value) in headers {
        map.insert(*name, *value);
    }
    js.publish_with_headers(subject.to_string(), map, payload.into())
        .await
        .unwrap_or_else(|error| panic!("publish to {subject}: {error}"))
}

/// Publishes `payload` to `<prefix>.<token>` and records it as live.
async fn publish_live(
    js: &jetstream::Context,
    model: &mut StreamModel,
    token: &str,
    payload: Vec<u8>,
) {
    let subject = format!("{}.{token}", model.prefix());
    let seq = publish(js, &subject, &[], payload.clone()).await;
    assert!(
        seq > model.last_acked(),
        "{}: PubAck sequence {seq}",
        model.name
    );
    model.live.insert(seq, Stored::new(subject, &[], payload));
}

/// Creates stream `name` and runs the message workload: 10 messages (two
/// with a header), purge below 3, delete 5 and 8, durable `D` double-acks
/// 3 and 4, then 6 (by hand), and its ack floor is read back.
async fn messages_workload(
    js: &jetstream::Context,
    client: &async_nats::Client,
    name: &str,
    workload: Workload,
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
    let mut model = StreamModel::new(name, workload, format!("{prefix}.probe"));
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
        model.live.insert(seq, Stored::new(subject, &headers, body));
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
    let acked = fetch_and_double_ack(&consumer, 2, name).await;
    assert_eq!(acked, [3, 4], "{name}: the durable's first deliveries");
    let confirmed = double_ack_next(client, &consumer, name).await;
    model.durable = Some((DURABLE.to_string(), confirmed));
    model
}

/// Fetches `count` messages and double-acks each (async-nats); their stream sequences.
async fn fetch_and_double_ack(
    consumer: &jetstream::consumer::Consumer<pull::Config>,
    count: usize,
    name: &str,
) -> Vec<u64> {
    let mut batch = consumer
        .fetch()
        .max_messages(count)
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
    acked
}

/// Fetches the message after the ack floor (6: 5 is deleted), acks it with
/// a reply subject, waits for the empty reply (the ack is stored), and
/// returns the ack floor CONSUMER.INFO then reports: what a restart must
/// not go behind.
async fn double_ack_next(
    client: &async_nats::Client,
    consumer: &jetstream::consumer::Consumer<pull::Config>,
    name: &str,
) -> u64 {
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .expires(TIMEOUT)
        .messages()
        .await
        .unwrap_or_else(|error| panic!("{name}: fetch: {error}"));
    let message = batch
        .next()
        .await
        .unwrap_or_else(|| panic!("{name}: no message after the ack floor"))
        .unwrap_or_else(|error| panic!("{name}: fetched: {error}"));
    let seq = message.info().expect("JetStream message").stream_sequence;
    assert_eq!(seq, 6, "{name}: the delivery after the ack floor");
    let ack_subject = message.reply.clone().expect("an ack subject").to_string();
    let reply = tokio::time::timeout(TIMEOUT, client.request(ack_subject, "+ACK".into()))
        .await
        .unwrap_or_else(|_| panic!("{name}: no reply to the double ack of {seq}"))
        .unwrap_or_else(|error| panic!("{name}: double ack of {seq}: {error}"));
    assert!(
        reply.payload.is_empty(),
        "{name}: double ack of {seq} answered {:?}",
        String::from_utf8_lossy(&reply.payload)
    );
    let info = request(
        client,
        &format!("$JS.API.CONSUMER.INFO.{name}.{DURABLE}"),
        "",
    )
    .await
    .unwrap_or_else(|error| panic!("{name}: CONSUMER.INFO: {error}"));
    let floor = info["ack_floor"]["stream_seq"].as_u64().unwrap_or(0);
    assert!(
        floor >= seq,
        "{name}: ack floor {floor} after the double ack of {seq}: {info}"
    );
    floor
}

/// One message of 20 KiB: its journal batch has 6 data blocks.
async fn big_message_workload(js: &jetstream::Context, model: &mut StreamModel) {
    let index = model.last_acked() + 1;
    publish_live(
        js,
        model,
        "big",
        payload_of(&model.name, index, BIG_PAYLOAD_BYTES),
    )
    .await;
}

/// 700 messages of 200 KB (a few in flight at once): the block store gets
/// two full 64 MiB segments and a third.
async fn large_workload(js: &jetstream::Context, model: &mut StreamModel) {
    let subject = format!("{}.large", model.prefix());
    let first = model.last_acked() + 1;
    let indices: Vec<u64> = (first..first + LARGE_MESSAGES).collect();
    for chunk in indices.chunks(LARGE_PUBLISHES_IN_FLIGHT) {
        let mut pending = Vec::new();
        for &index in chunk {
            let body = payload_of(&model.name, index, LARGE_PAYLOAD_BYTES);
            pending.push((index, body.clone(), send(js, &subject, &[], body).await));
        }
        for (index, body, ack) in pending {
            let seq = ack
                .await
                .unwrap_or_else(|error| panic!("PubAck for {subject}: {error}"))
                .sequence;
            assert_eq!(seq, index, "{}: PubAck sequence", model.name);
            model
                .live
                .insert(seq, Stored::new(subject.clone(), &[], body));
        }
    }
}

/// 64 KiB messages until the shard's journal has rotated (a second
/// segment opened) and the victim's records are in two segments.
async fn rotate_journal(js: &jetstream::Context, store: &Path, model: &mut StreamModel) {
    let directory = journal_dir(store, model.shard);
    let group = stream_group(&stream_dir(store, &model.name)).expect("the victim's group");
    for _ in 0..ROTATION_MESSAGES_MAX {
        if journal_layout::opened_segments(&directory) >= 2
            && journal_layout::segments_holding(&directory, group) >= 2
        {
            return;
        }
        let index = model.last_acked() + 1;
        publish_live(
            js,
            model,
            "fill",
            payload_of(&model.name, index, ROTATION_PAYLOAD_BYTES),
        )
        .await;
    }
    panic!(
        "{}: the journal of shard {} did not rotate within {ROTATION_MESSAGES_MAX} messages of {ROTATION_PAYLOAD_BYTES} bytes",
        model.name, model.shard
    );
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
    let mut model = StreamModel::new(stream, Workload::KeyValue, format!("$KV.{bucket}.probe"));
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
        model
            .live
            .insert(seq, Stored::new(subject, headers, value.to_vec()));
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

/// The servers of the large cases: a journal that holds what is applied
/// between two checkpoints (one per 64 MiB per stream) of three victims
/// (5 segments of 64 MiB per shard).
fn large_options() -> Options {
    Options {
        journal_segment_bytes: Some(64 << 20),
        journal_segments: Some(5),
        ..Options::jetstream()
    }
}

/// Each stream's shard, from `/jsz?streams=true`.
fn shards(server: &Server) -> BTreeMap<String, usize> {
    let jsz = server.http_json("/jsz?streams=true");
    common::js::jsz_streams(&jsz)
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
    // A PubAck waits 5 s by default: the large workload's 200 KB batches on
    // a host loaded by the rest of the suite have taken longer.
    let js = jetstream::ContextBuilder::new()
        .timeout(PUBLISH_ACK_TIMEOUT)
        .build(client.clone());
    let shard_count = options.shards.unwrap_or(2);
    let mut models = Vec::new();
    let mut covered = BTreeSet::new();
    for index in 0..16 {
        if covered.len() == shard_count {
            break;
        }
        let name = format!("CTL_{index}");
        let model = messages_workload(&js, &client, &name, Workload::Messages).await;
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
            if *workload == Workload::KeyValue {
                return kv_workload(js, name).await;
            }
            let mut model = messages_workload(js, client, name, *workload).await;
            match workload {
                Workload::BigMessage => big_message_workload(js, &mut model).await,
                Workload::Large => large_workload(js, &mut model).await,
                _ => {}
            }
            model
        }
    });
    models.extend(futures::future::join_all(workloads).await);
    let placement = shards(&server);
    for model in &mut models {
        model.shard = placement[&model.name];
    }
    let store = server.store_dir();
    for model in &mut models {
        if model.workload == Workload::Rotated {
            rotate_journal(&js, &store, model).await;
        }
    }
    if stop == Stop::KillAfterCheckpoint {
        wait_checkpointed(&store, &models).await;
    }
    drop(client);
    let stopped = tokio::task::block_in_place(|| server.into_stopped(stop == Stop::Term));
    let lagging = checkpoint_lag(
        &stopped.store_dir(),
        &models,
        &journal_last_indices(&stopped.store_dir(), &models),
    );
    for model in &mut models {
        model.checkpointed = !lagging.contains_key(&model.name);
    }
    (stopped, models)
}

/// Each stream's last entry index in its shard's journal (0: none there).
fn journal_last_indices(store: &Path, models: &[StreamModel]) -> BTreeMap<String, u64> {
    let mut journals: BTreeMap<usize, Vec<journal_layout::Segment>> = BTreeMap::new();
    let mut last = BTreeMap::new();
    for model in models {
        let segments = journals
            .entry(model.shard)
            .or_insert_with(|| journal_layout::segments(&journal_dir(store, model.shard)));
        let group = stream_group(&stream_dir(store, &model.name));
        let index = segments
            .iter()
            .flat_map(|segment| &segment.batches)
            .flat_map(|batch| &batch.records)
            .filter(|record| Some(record.group) == group)
            .map(|record| record.index)
            .max()
            .unwrap_or(0);
        last.insert(model.name.clone(), index);
    }
    last
}

/// The streams whose `raft` file does not cover `journal_last` (or whose
/// config or raft file does not read): name → what was found.
fn checkpoint_lag(
    store: &Path,
    models: &[StreamModel],
    journal_last: &BTreeMap<String, u64>,
) -> BTreeMap<String, String> {
    let mut behind = BTreeMap::new();
    for model in models {
        let directory = stream_dir(store, &model.name);
        let group = stream_group(&directory);
        let last = journal_last.get(&model.name).copied().unwrap_or(0);
        // The applied index: bytes 32..40 of the raft file.
        let applied = std::fs::read(directory.join("raft"))
            .ok()
            .filter(|bytes| bytes.len() >= 40)
            .map(|bytes| u64_at(&bytes, 32));
        if group.is_none() || applied.is_none_or(|applied| applied < last) {
            behind.insert(
                model.name.clone(),
                format!("applied {applied:?}, journal {last}"),
            );
        }
    }
    behind
}

/// Waits (bounded) until each stream's `raft` file names an applied index at
/// least the last entry its shard's journal holds for it (the journal is
/// read once: the workload is over, nothing more is appended).
async fn wait_checkpointed(store: &Path, models: &[StreamModel]) {
    let deadline = Instant::now() + CHECKPOINT_TIMEOUT;
    let journal_last = journal_last_indices(store, models);
    loop {
        let behind = checkpoint_lag(store, models, &journal_last);
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

    /// One batch: where it starts, its size (data blocks and the parity
    /// block) and its records.
    pub struct Batch {
        pub offset: usize,
        pub bytes: usize,
        pub records: Vec<Record>,
    }

    impl Batch {
        /// Its data blocks: all but the parity block.
        pub fn data_blocks(&self) -> usize {
            self.bytes / BLOCK_BYTES - 1
        }
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
            batches.push(Batch {
                offset,
                bytes: batch.batch_bytes as usize,
                records,
            });
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
        let mut segments: Vec<Segment> = segment_files(directory)
            .into_iter()
            .filter(|path| header_valid(path))
            .filter_map(|path| {
                let bytes = std::fs::read(&path).ok()?;
                decode(path, &bytes)
            })
            .collect();
        segments.sort_by_key(|segment| segment.generation);
        segments
    }

    /// The file's block 0 is a valid segment header (it was opened for
    /// writing); reads that block only.
    fn header_valid(path: &Path) -> bool {
        let mut block = vec![0u8; BLOCK_BYTES];
        std::fs::File::open(path)
            .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut block))
            .is_ok()
            && SegmentHeader::decode(&block).is_some()
    }

    /// The `.seg` files of a shard's journal directory.
    pub fn segment_files(directory: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(directory)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.path())
                    .filter(|path| path.extension().is_some_and(|extension| extension == "seg"))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many segments of the directory were ever opened for writing
    /// (a valid header in block 0); reads block 0 only.
    pub fn opened_segments(directory: &Path) -> usize {
        segment_files(directory)
            .iter()
            .filter(|path| header_valid(path))
            .count()
    }

    /// How many segments hold records of `group`.
    pub fn segments_holding(directory: &Path, group: u64) -> usize {
        segments(directory)
            .iter()
            .filter(|segment| segment.records().iter().any(|record| record.group == group))
            .count()
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

/// Size of a `deletes.log` entry: sequence | CRC | magic.
const DELETE_ENTRY_BYTES: usize = 16;
/// The magic of a delete entry ("DEL1").
const DELETE_MAGIC: u32 = 0x4445_4c31;

/// How many entries the deletes log starts with (until one without the magic).
fn delete_entries(bytes: &[u8]) -> usize {
    bytes
        .chunks_exact(DELETE_ENTRY_BYTES)
        .take_while(|entry| u32_at(entry, 12) == DELETE_MAGIC)
        .count()
}

/// Where the `raft` file (format 3) keeps the block-store manifest: its
/// length at 76..80, the manifest from 80, then the file's CRC-32C.
const RAFT_MANIFEST_AT: usize = 80;

/// The manifest bytes of a `raft` file.
fn raft_manifest(raft: &[u8]) -> Result<&[u8], String> {
    let length = raft
        .get(RAFT_MANIFEST_AT - 4..RAFT_MANIFEST_AT)
        .map(|_| u32_at(raft, RAFT_MANIFEST_AT - 4) as usize)
        .ok_or("raft file shorter than its header")?;
    raft.get(RAFT_MANIFEST_AT..RAFT_MANIFEST_AT + length)
        .ok_or_else(|| format!("raft file shorter than its {length}-byte manifest"))
}

/// The segments and the deletes-log version a stream's checkpoint manifest
/// names (magic | version | count at 12 | floor | last | entries | deletes
/// version at 40 | reserved | 40 bytes per segment from 48).
fn manifest_files(raft: &[u8]) -> Result<(Vec<String>, u32), String> {
    let manifest = raft_manifest(raft)?;
    if manifest.get(..8) != Some(b"TERNBMAN".as_slice()) || manifest.len() < 52 {
        return Err("no block-store manifest in the raft file".into());
    }
    let count = u32_at(manifest, 12) as usize;
    if manifest.len() < 52 + 40 * count {
        return Err(format!("manifest of {count} segments is cut short"));
    }
    let segments = (0..count)
        .map(|index| {
            let at = 48 + 40 * index;
            let (first, version) = (u64_at(manifest, at), u32_at(manifest, at + 32));
            if version == 0 {
                format!("{first:020}.blk")
            } else {
                format!("{first:020}.{version}.blk")
            }
        })
        .collect();
    Ok((segments, u32_at(manifest, 40)))
}

/// The one of `items` that `nth` names.
fn pick<T: Copy>(items: &[T], nth: Nth) -> Option<T> {
    match nth {
        Nth::First => items.first().copied(),
        Nth::Middle => items.get(items.len() / 2).copied(),
        Nth::Last => items.last().copied(),
    }
}

// ----- damage --------------------------------------------------------------------

/// The file a case damages for `victim`, or why there is none.
fn target(store: &Path, file: FileClass, victim: &StreamModel) -> Result<PathBuf, String> {
    let directory = stream_dir(store, &victim.name);
    let manifest = || {
        let raft = std::fs::read(directory.join("raft"))
            .map_err(|error| format!("{}: {error}", directory.join("raft").display()))?;
        manifest_files(&raft)
    };
    let path = match file {
        FileClass::JournalSegment => journal_layout::segments(&journal_dir(store, victim.shard))
            .pop()
            .map(|segment| segment.path)
            .ok_or_else(|| format!("no valid journal segment for shard {}", victim.shard))?,
        FileClass::BlockSegment(nth) => {
            let (segments, _) = manifest()?;
            if victim.workload == Workload::Large && segments.len() < LARGE_SEGMENTS_MIN {
                return Err(format!(
                    "the checkpoint names {} block-store segments, not {LARGE_SEGMENTS_MIN} or more",
                    segments.len()
                ));
            }
            let index: Vec<usize> = (0..segments.len()).collect();
            let chosen = pick(&index, nth).ok_or("the checkpoint names no .blk segment")?;
            directory.join("messages").join(&segments[chosen])
        }
        FileClass::DeletesLog => {
            let name = match manifest()?.1 {
                0 => "deletes.log".to_string(),
                version => format!("deletes.{version}.log"),
            };
            directory.join("messages").join(name)
        }
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
        (FileClass::BlockSegment(_), _) => {
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
        // Config: the creation time (checked), the CRC, the JSON.
        (FileClass::Config, Spot::Header) if bytes.len() >= 32 => Ok(16),
        (FileClass::Config, Spot::Checksum) if bytes.len() >= 32 => Ok(24),
        (FileClass::Config, Spot::Body) if bytes.len() >= 32 => {
            Ok(32 + (u32_at(bytes, 12) as usize).min(bytes.len() - 32) / 2)
        }
        // Raft: the applied index; the CRC after the manifest; a byte in
        // the middle of the manifest.
        (FileClass::Raft, Spot::Header) if bytes.len() >= 40 => Ok(32),
        (FileClass::Raft, Spot::Checksum) => {
            let at = RAFT_MANIFEST_AT + raft_manifest(bytes)?.len();
            (at + 4 <= bytes.len()).then_some(at).ok_or_else(none)
        }
        (FileClass::Raft, Spot::Body) => {
            let manifest = raft_manifest(bytes)?;
            (!manifest.is_empty())
                .then_some(RAFT_MANIFEST_AT + manifest.len() / 2)
                .ok_or_else(none)
        }
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

/// Where a [`Damage::CutAtRecord`] cuts: the start of a block-store record
/// or of a delete entry.
fn record_boundary(file: FileClass, nth: Nth, bytes: &[u8]) -> Result<usize, String> {
    let starts: Vec<usize> = match file {
        FileClass::BlockSegment(_) => block_records(bytes)
            .iter()
            .map(|record| record.offset)
            .collect(),
        FileClass::DeletesLog => (0..delete_entries(bytes))
            .map(|entry| entry * DELETE_ENTRY_BYTES)
            .collect(),
        _ => Vec::new(),
    };
    if starts.len() < 2 {
        return Err(format!(
            "{} records in the {} file, not enough to cut at one",
            starts.len(),
            file.name()
        ));
    }
    pick(&starts, nth).ok_or_else(|| format!("no {nth:?} record"))
}

/// The first byte of the middle data block of the largest journal batch
/// holding records of `group` (at least 3 data blocks, so the block holds
/// neither the batch's header nor its footer).
fn batch_middle_block(bytes: &[u8], group: u64) -> Result<usize, String> {
    let segment = journal_layout::decode(PathBuf::new(), bytes).ok_or("no valid segment header")?;
    let batch = segment
        .batches
        .iter()
        .filter(|batch| batch.records.iter().any(|record| record.group == group))
        .max_by_key(|batch| batch.bytes)
        .ok_or("no batch of the victim in the segment")?;
    if batch.data_blocks() < 3 {
        return Err(format!(
            "the victim's largest batch has {} data blocks, not 3 or more",
            batch.data_blocks()
        ));
    }
    Ok(batch.offset + batch.data_blocks() / 2 * 4096)
}

/// Damages `file` of `victim` as `damage` says; returns the file's base name.
fn damage(
    store: &Path,
    file: FileClass,
    damage: Damage,
    victim: &StreamModel,
) -> Result<String, String> {
    if damage == Damage::ZeroJournal {
        if file != FileClass::JournalSegment {
            return Err(format!("{} is not a journal", file.name()));
        }
        let directory = journal_dir(store, victim.shard);
        for path in journal_layout::segment_files(&directory) {
            let bytes = std::fs::metadata(&path)
                .map_err(|error| format!("{}: {error}", path.display()))?
                .len();
            std::fs::write(&path, vec![0u8; bytes as usize])
                .map_err(|error| format!("{}: {error}", path.display()))?;
        }
        // The server names the journal's directory.
        return Ok(directory
            .file_name()
            .expect("a shard directory")
            .to_string_lossy()
            .into_owned());
    }
    let path = target(store, file, victim)?;
    let name = path
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned();
    let mut bytes = std::fs::read(&path).map_err(|error| format!("{}: {error}", path.display()))?;
    match damage {
        Damage::ZeroJournal => unreachable!("handled above"),
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
                FileClass::BlockSegment(_) => bytes.len() / 4096 / 2 * 4096,
                _ => 0,
            };
            let end = (offset + 4096).min(bytes.len());
            bytes[offset..end].fill(0);
        }
        Damage::ZeroBatchMiddle => {
            if file != FileClass::JournalSegment {
                return Err(format!("no batches in a {} file", file.name()));
            }
            let group = stream_group(&stream_dir(store, &victim.name))
                .ok_or("the victim's config does not name its group")?;
            let offset = batch_middle_block(&bytes, group)?;
            bytes[offset..offset + 4096].fill(0);
        }
        Damage::Truncate3 => bytes.truncate(bytes.len().saturating_sub(3)),
        Damage::TruncateHalf => bytes.truncate(bytes.len() / 2),
        Damage::CutAtRecord(nth) => {
            let at = record_boundary(file, nth, &bytes)?;
            bytes.truncate(at);
        }
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
    if data[..] != expected.payload[..] {
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
    check_served_not_listed(&client, server, &mut report.streams).await;
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
    check_offline(client, server, model, allowed, &mut report.violations).await;
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

/// The offline half of the contract: publishes refused; `/healthz`, `/jsz`,
/// STREAM.LIST and STREAM.NAMES list it (the LIST reason naming one of `allowed`).
async fn check_offline(
    client: &async_nats::Client,
    server: &Server,
    model: &StreamModel,
    allowed: &[String],
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
    let health = serde_json::from_str(&body).unwrap_or(Value::Null);
    if status != 503 || !health_errors(&health).contains(name) {
        let body = body.split_whitespace().collect::<Vec<_>>().join(" ");
        violations.push(format!(
            "/healthz {status} does not list it in `errors` as a STREAM: {body}"
        ));
    }
    let (_, jsz) = server.http_get("/jsz?streams=true");
    let jsz: Value = serde_json::from_str(&jsz).unwrap_or(Value::Null);
    let listed = common::js::jsz_streams(&jsz)
        .into_iter()
        .find(|stream| stream["name"] == name.as_str());
    match listed {
        None => violations.push("/jsz does not list it".into()),
        Some(stream) if stream["failure"].is_null() => {
            violations.push(format!("/jsz lists it without a failure: {stream}"))
        }
        Some(_) => {}
    }
    match request(client, "$JS.API.STREAM.LIST", "{}").await {
        Err(error) => violations.push(format!("STREAM.LIST: {error}")),
        Ok(list) => {
            let missing = list["missing"]
                .as_array()
                .is_some_and(|missing| missing.iter().any(|entry| entry == name.as_str()));
            if !missing {
                violations.push(format!(
                    "STREAM.LIST `missing` does not name it: {}",
                    list["missing"]
                ));
            }
            match list["offline"][name.as_str()].as_str() {
                None => violations.push(format!(
                    "STREAM.LIST `offline` does not list it: {}",
                    list["offline"]
                )),
                Some(reason) if !allowed.iter().any(|file| reason.contains(file.as_str())) => {
                    violations.push(format!(
                        "STREAM.LIST `offline` reason does not name {}: {reason:?}",
                        allowed.join(" or ")
                    ))
                }
                Some(_) => {}
            }
        }
    }
    match request(client, "$JS.API.STREAM.NAMES", "{}").await {
        Err(error) => violations.push(format!("STREAM.NAMES: {error}")),
        Ok(names) => {
            let listed = names["streams"]
                .as_array()
                .is_some_and(|streams| streams.iter().any(|entry| entry == name.as_str()));
            if !listed {
                violations.push(format!(
                    "STREAM.NAMES does not list it: {}",
                    names["streams"]
                ));
            }
        }
    }
}

/// The streams `/healthz` lists in its `errors` (entries of type STREAM).
fn health_errors(health: &Value) -> BTreeSet<String> {
    health["errors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|error| error["type"] == "STREAM")
        .filter_map(|error| error["stream"].as_str().map(str::to_string))
        .collect()
}

/// A served stream is in no list of offline streams: `/healthz` `errors`,
/// STREAM.LIST `offline` and `missing`; with none offline, `/healthz` is 200.
async fn check_served_not_listed(
    client: &async_nats::Client,
    server: &Server,
    streams: &mut BTreeMap<String, StreamReport>,
) {
    let (status, body) = server.http_get("/healthz");
    let unhealthy = health_errors(&serde_json::from_str(&body).unwrap_or(Value::Null));
    let list = request(client, "$JS.API.STREAM.LIST", "{}")
        .await
        .unwrap_or(Value::Null);
    let mut listed_offline: BTreeSet<String> = list["offline"]
        .as_object()
        .map(|offline| offline.keys().cloned().collect())
        .unwrap_or_default();
    listed_offline.extend(
        list["missing"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|name| name.as_str().map(str::to_string)),
    );
    let any_offline = streams
        .values()
        .any(|stream| stream.outcome.starts_with("offline"));
    for (name, stream) in streams.iter_mut() {
        if stream.outcome != "served" {
            continue;
        }
        if unhealthy.contains(name) {
            stream
                .violations
                .push(format!("served, but /healthz lists it: {body}"));
        }
        if listed_offline.contains(name) {
            stream.violations.push(format!(
                "served, but STREAM.LIST lists it as offline: {} {}",
                list["offline"], list["missing"]
            ));
        }
        if !any_offline && status != 200 {
            stream.violations.push(format!(
                "every stream served, but /healthz is {status}: {body}"
            ));
        }
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
        .map(|&(damage, workload)| Case {
            file: FileClass::JournalSegment,
            damage,
            stop,
            workload,
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
            let (report, server) = restart_and_check(stopped, &models, &allowed).await;
            let mut result = case_result(case.label(), &victim, &report, damaged.err());
            // What recovery rebuilt was written back: a second start (after
            // a SIGKILL) must find the same, with nothing left to repair.
            if let Some(server) = server {
                let stopped = tokio::task::block_in_place(|| server.into_stopped(false));
                let (again, _server) = restart_and_check(stopped, &models, &allowed).await;
                let again = case_result(case.label(), &victim, &again, None);
                result.violations.extend(
                    again
                        .violations
                        .into_iter()
                        .map(|violation| format!("after a second restart: {violation}")),
                );
            }
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
async fn stream_file_matrix(test: &str, cases: Vec<Case>, options: Options) {
    let started = Instant::now();
    let stop = cases[0].stop;
    let victims: Vec<(String, Workload)> = cases
        .iter()
        .map(|case| (case.stream(), case.workload))
        .collect();
    let (stopped, models) = prepare(stop, &victims, options).await;
    // Phase times go with a failure's output (a slow host shows here).
    println!("{test}: prepared in {:.1?}", started.elapsed());
    let by_name: BTreeMap<String, StreamModel> = models
        .iter()
        .map(|model| (model.name.clone(), model.clone()))
        .collect();
    let mut results = Vec::new();
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
    println!("{test}: restarted and checked at {:.1?}", started.elapsed());
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
/// and `raft` (written when the stream is created; `consumers` and the
/// block store's files come with a checkpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stream_files_after_sigkill() {
    let mut cases = Vec::new();
    let damages = [
        Damage::Flip(Spot::Header),
        Damage::Flip(Spot::Checksum),
        Damage::Flip(Spot::Body),
    ];
    for file in [FileClass::Config, FileClass::Raft] {
        for damage in damages.into_iter().chain(FILE_DAMAGES) {
            cases.push(Case {
                file,
                damage,
                stop: Stop::Kill,
                workload: Workload::Messages,
            });
        }
    }
    stream_file_matrix("stream_files_after_sigkill", cases, options()).await;
}

/// Block store, deletes, config, raft and consumers files damaged after a
/// checkpoint and SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stream_files_after_checkpoint_sigkill() {
    stream_file_matrix(
        "stream_files_after_checkpoint_sigkill",
        stream_file_cases(Stop::KillAfterCheckpoint),
        options(),
    )
    .await;
}

/// The same files damaged after a clean stop (SIGTERM).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stream_files_after_clean_stop() {
    stream_file_matrix(
        "stream_files_after_clean_stop",
        stream_file_cases(Stop::Term),
        options(),
    )
    .await;
}

/// A block store of three or more 64 MiB segments, checkpointed, then
/// SIGKILL: its middle segment deleted, its first cut at a record
/// boundary, a bit flipped in a record in the middle. Each takes the
/// stream offline naming the segment, never a served stream short of
/// thousands of acked messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_block_store() {
    stream_file_matrix("large_block_store", large_cases(), large_options()).await;
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
