//! Crash durability of JetStream publishing: SIGKILL the server while two
//! connections keep many publishes in flight into four file-storage streams,
//! restart it on the same data, and check what survived.
//!
//! Invariants checked after every kill (per stream, no limits configured):
//! * every ACKED publish is stored at the sequence its PubAck named, with the
//!   same subject, payload and headers;
//! * sequences are contiguous: `first_seq == 1`, `messages == last_seq`;
//! * an unacked publish may be missing, but if stored it is intact and stored
//!   once; nothing is stored that was never published;
//! * what was read back after an earlier restart never changes later;
//! * the next publish gets `last_seq + 1`.
//!
//! Each round verifies everything the round added, plus a random sample of
//! earlier sequences; the end verifies every message. Placement of streams
//! on shards is by hash of the name, so with four streams and two publishing
//! connections both same-shard and cross-shard publishing are covered.
//!
//! Knobs: `TERN_CRASH_SEED` (u64 or `random`; fixed default; printed), `TERN_CRASH_KILLS`
//! (default 50; 25-35 s against nats-server). The nats-server variant runs
//! with `jetstream { sync_interval: always }` ([`Options::nats_sync_always`]):
//! by default nats-server acknowledges before its buffered write reaches the
//! file (it syncs every 2 min), so it may lose acked messages on SIGKILL.
//! With a sync per write it must keep every acked message, which proves the
//! test's expectations.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::context::{PublishErrorKind, RequestErrorKind};
use async_nats::jetstream::{self, stream::StorageType};
use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use tokio::sync::mpsc;

use common::{Flavor, Options, Server, TIMEOUT};
use tern_it::loop_device::LoopDevice;

const STREAMS: [(&str, &str); 4] = [
    ("CRASH_A", "a"),
    ("CRASH_B", "b"),
    ("CRASH_C", "c"),
    ("CRASH_D", "d"),
];
const PUBLISHERS: usize = 2;
const CRASH_ID: &str = "Crash-Id";
/// Acks to wait for before the kill: uniform in this range per round.
const MIN_ACKS: u64 = 50;
const MAX_ACKS: u64 = 2000;
/// Publishes in flight per publisher: uniform in this range per round.
const MIN_WINDOW: u64 = 64;
const MAX_WINDOW: u64 = 256;
/// Earlier sequences re-read per stream and round.
const SAMPLE: usize = 48;
/// Concurrent MSG.GET requests while verifying.
const GETS_IN_FLIGHT: usize = 32;
/// Bound for a round's publishers to reach the ack target, and for the
/// publishers to wind down after the kill.
const ROUND_TIMEOUT: Duration = Duration::from_secs(30);

/// SplitMix64: small, seedable, good enough to pick test parameters.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform-ish in `low..=high`.
    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

fn mix(mut value: u64) -> u64 {
    value = (value ^ (value >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    value ^ (value >> 31)
}

fn hash_str(text: &str) -> u64 {
    text.bytes().fold(0xCBF2_9CE4_8422_2325u64, |hash, byte| {
        (hash ^ byte as u64).wrapping_mul(0x0100_0000_01B3)
    })
}

/// One publish, identified by `stream/publisher/round/counter`: its subject,
/// payload and header all derive from the id, so any stored message can be
/// checked without remembering what was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
struct MessageId {
    stream: usize,
    publisher: String,
    round: u64,
    counter: u64,
}

impl MessageId {
    fn text(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            STREAMS[self.stream].0, self.publisher, self.round, self.counter
        )
    }

    fn parse(text: &str) -> Option<MessageId> {
        let mut parts = text.split('/');
        let stream_name = parts.next()?;
        let stream = STREAMS.iter().position(|(name, _)| *name == stream_name)?;
        let publisher = parts.next()?.to_string();
        let round = parts.next()?.parse().ok()?;
        let counter = parts.next()?.parse().ok()?;
        if parts.next().is_some() {
            return None;
        }
        Some(MessageId {
            stream,
            publisher,
            round,
            counter,
        })
    }

    fn subject(&self) -> String {
        format!(
            "crash.{}.{}.{}",
            STREAMS[self.stream].1,
            self.publisher,
            self.counter % 3
        )
    }

    /// `<id>|<filler>`: the filler's length and bytes depend on the id; most
    /// payloads are under 512 bytes, one in 32 up to 8 KiB.
    fn payload(&self) -> Bytes {
        let id = self.text();
        let hash = mix(hash_str(&id));
        let length = if hash % 32 == 0 {
            (hash >> 8) % 8192
        } else {
            (hash >> 8) % 512
        } as usize;
        let mut payload = Vec::with_capacity(id.len() + 1 + length);
        payload.extend_from_slice(id.as_bytes());
        payload.push(b'|');
        let mut state = hash;
        while payload.len() < id.len() + 1 + length {
            state = mix(state.wrapping_add(1));
            payload.push(b'a' + (state % 26) as u8);
        }
        Bytes::from(payload)
    }

    fn headers(&self) -> async_nats::HeaderMap {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(CRASH_ID, self.text().as_str());
        headers
    }
}

/// What one stream is known to hold.
#[derive(Default)]
struct StreamModel {
    /// `stored[seq - 1]`: the id read back at `seq` after a restart.
    stored: Vec<String>,
    /// Ids present in the stream.
    present: HashSet<String>,
}

impl StreamModel {
    fn verified_last(&self) -> u64 {
        self.stored.len() as u64
    }
}

/// Everything the test remembers across rounds.
struct Model {
    streams: Vec<StreamModel>,
    /// Every id a publisher attempted, acked or not.
    attempted: HashSet<String>,
    /// Every acked id: (stream, seq).
    acked: HashMap<String, (usize, u64)>,
}

enum RoundEvent {
    TargetReached,
    Failed(String),
}

/// State the publishers of one round share with the killer.
struct RoundShared {
    acks: AtomicU64,
    target: u64,
    killed: AtomicBool,
    events: mpsc::UnboundedSender<RoundEvent>,
}

#[derive(Default)]
struct PublisherOutcome {
    attempted: Vec<String>,
    /// (id, stream, seq)
    acked: Vec<(String, usize, u64)>,
    /// Errors seen (after the kill, plus 429 load shedding), by kind.
    errors: HashMap<String, u64>,
}

/// Prints how to reproduce when the test panics.
struct SeedReport {
    flavor: Flavor,
    seed: u64,
    kills: u64,
}

impl Drop for SeedReport {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "jetstream_crash ({}) failed: reproduce with TERN_CRASH_SEED={} TERN_CRASH_KILLS={}",
                self.flavor.name(),
                self.seed,
                self.kills
            );
        }
    }
}

/// A client that gives up at once when the server goes away: one immediate
/// reconnect attempt (to the dead port), then the connection task ends and
/// every pending ack future resolves with an error instead of timing out.
async fn connect_once(server: &Server, name: &str) -> async_nats::Client {
    server
        .connect_with(
            async_nats::ConnectOptions::new()
                .name(name)
                .max_reconnects(1)
                .reconnect_delay_callback(|_| Duration::ZERO),
        )
        .await
}

fn context(client: async_nats::Client) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(TIMEOUT / 2)
        .max_ack_inflight(1024)
        .build(client)
}

async fn publisher(
    js: jetstream::Context,
    name: String,
    round: u64,
    seed: u64,
    window: usize,
    shared: Arc<RoundShared>,
) -> PublisherOutcome {
    let mut rng = Rng(seed);
    let mut outcome = PublisherOutcome::default();
    let mut inflight = FuturesUnordered::new();
    let mut counter = 0u64;
    let mut sending = true;
    loop {
        if sending && inflight.len() < window && !shared.killed.load(Ordering::Acquire) {
            counter += 1;
            let id = MessageId {
                stream: rng.range(0, STREAMS.len() as u64 - 1) as usize,
                publisher: name.clone(),
                round,
                counter,
            };
            let text = id.text();
            outcome.attempted.push(text.clone());
            match js
                .publish_with_headers(id.subject(), id.headers(), id.payload())
                .await
            {
                Ok(ack) => {
                    let stream = id.stream;
                    inflight.push(async move { (text, stream, ack.await) });
                }
                Err(error) => {
                    if !shared.killed.load(Ordering::Acquire) {
                        let _ = shared.events.send(RoundEvent::Failed(format!(
                            "{name}: publish {text} failed before the kill: {error}"
                        )));
                    }
                    *outcome
                        .errors
                        .entry(format!("send: {:?}", error.kind()))
                        .or_default() += 1;
                    sending = false;
                }
            }
            continue;
        }
        match inflight.next().await {
            None => break,
            Some((text, stream, Ok(ack))) => {
                if ack.stream != STREAMS[stream].0 || ack.duplicate {
                    let _ = shared.events.send(RoundEvent::Failed(format!(
                        "{name}: publish {text} to {} got a wrong ack {ack:?}",
                        STREAMS[stream].0
                    )));
                }
                outcome.acked.push((text, stream, ack.sequence));
                if shared.acks.fetch_add(1, Ordering::AcqRel) + 1 == shared.target {
                    let _ = shared.events.send(RoundEvent::TargetReached);
                }
            }
            Some((_, _, Err(error))) if is_too_many_requests(&error) => {
                // §7: a full ingest queue answers 429/10167 and does not
                // store the message; `verify` treats it as any unacked one.
                *outcome
                    .errors
                    .entry("ack: 429 too many requests".to_string())
                    .or_default() += 1;
            }
            Some((text, _, Err(error))) => {
                if !shared.killed.load(Ordering::Acquire) {
                    let _ = shared.events.send(RoundEvent::Failed(format!(
                        "{name}: publish {text} not acked before the kill: {error}"
                    )));
                }
                let kind = match error.kind() {
                    PublishErrorKind::BrokenPipe => "ack: BrokenPipe".to_string(),
                    PublishErrorKind::TimedOut => "ack: TimedOut".to_string(),
                    other => format!("ack: {other:?}: {error}"),
                };
                *outcome.errors.entry(kind).or_default() += 1;
                sending = false;
            }
        }
    }
    outcome
}

/// A 429/10167 PubAck: the server shed load, the publish was not stored.
fn is_too_many_requests(error: &jetstream::context::PublishError) -> bool {
    std::error::Error::source(error)
        .and_then(|source| source.downcast_ref::<jetstream::Error>())
        .is_some_and(|api| api.error_code().0 == 10167)
}

/// The stored message at `seq` must be a well-formed message of stream
/// `stream` (subject, payload and headers as its id says); returns the id.
fn check_message(
    tag: &str,
    stream: usize,
    seq: u64,
    message: &async_nats::jetstream::message::StreamMessage,
) -> String {
    let name = STREAMS[stream].0;
    let payload = &message.payload;
    let text = payload
        .iter()
        .position(|byte| *byte == b'|')
        .and_then(|end| std::str::from_utf8(&payload[..end]).ok())
        .unwrap_or_else(|| panic!("{tag} {name} seq {seq}: malformed payload {payload:?}"));
    let id = MessageId::parse(text)
        .unwrap_or_else(|| panic!("{tag} {name} seq {seq}: unparsable id {text:?}"));
    assert_eq!(
        id.stream, stream,
        "{tag} {name} seq {seq}: message {text} belongs to another stream"
    );
    assert_eq!(message.sequence, seq, "{tag} {name}: asked for seq {seq}");
    assert_eq!(
        message.subject.as_str(),
        id.subject(),
        "{tag} {name} seq {seq}: subject of {text}"
    );
    assert!(
        *payload == id.payload(),
        "{tag} {name} seq {seq}: payload of {text} is corrupt ({} bytes, expected {})",
        payload.len(),
        id.payload().len()
    );
    let crash_id = message.headers.get(CRASH_ID).map(|value| value.as_str());
    assert_eq!(
        crash_id,
        Some(text),
        "{tag} {name} seq {seq}: header {CRASH_ID} of {text}; headers {:?}",
        message.headers
    );
    assert_eq!(
        message.headers.len(),
        1,
        "{tag} {name} seq {seq}: extra headers on {text}: {:?}",
        message.headers
    );
    text.to_string()
}

/// `STREAM.INFO`, retrying (bounded) only while the API does not answer yet.
async fn stream_state(
    tag: &str,
    server: &Server,
    js: &jetstream::Context,
    name: &str,
) -> jetstream::stream::State {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match js.get_stream_no_info(name).await {
            Ok(stream) => match stream.get_info().await {
                Ok(info) => return info.state,
                Err(error) => {
                    let transient = matches!(
                        error.kind(),
                        RequestErrorKind::NoResponders | RequestErrorKind::TimedOut
                    );
                    assert!(
                        transient && Instant::now() < deadline,
                        "{tag} STREAM.INFO {name} after restart: {error}\nserver log:\n{}",
                        server.log_tail()
                    );
                }
            },
            Err(error) => panic!("{tag} stream handle {name}: {error}"),
        }
        // Poll interval of a bounded wait for the API after a restart.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads `seqs` of stream `stream` concurrently; panics on any error.
async fn fetch(
    tag: &str,
    server: &Server,
    js: &jetstream::Context,
    stream: usize,
    seqs: Vec<u64>,
) -> Vec<(u64, async_nats::jetstream::message::StreamMessage)> {
    let name = STREAMS[stream].0;
    let handle = js
        .get_stream_no_info(name)
        .await
        .unwrap_or_else(|error| panic!("{tag} stream handle {name}: {error}"));
    let handle = &handle;
    let results: Vec<_> = futures::stream::iter(seqs)
        .map(|seq| async move { (seq, handle.get_raw_message(seq).await) })
        .buffer_unordered(GETS_IN_FLIGHT)
        .collect()
        .await;
    let mut messages = Vec::with_capacity(results.len());
    for (seq, result) in results {
        match result {
            Ok(message) => messages.push((seq, message)),
            Err(error) => panic!(
                "{tag} {name}: MSG.GET seq {seq} failed: {error}\nserver log:\n{}",
                server.log_tail()
            ),
        }
    }
    messages.sort_by_key(|(seq, _)| *seq);
    messages
}

/// Checks the invariants after a restart and extends the model with what the
/// round added. `acked_now`: (id, stream, seq) acked in the round just killed.
/// With `everything`, re-reads every message instead of a sample.
async fn verify(
    tag: &str,
    server: &Server,
    model: &mut Model,
    acked_now: &[(String, usize, u64)],
    rng: &mut Rng,
    round: u64,
    everything: bool,
) {
    let client = connect_once(server, "crash-verifier").await;
    let js = context(client);
    for (stream, (name, _)) in STREAMS.iter().enumerate() {
        let state = stream_state(tag, server, &js, name).await;
        let known = &model.streams[stream];
        let verified_last = known.verified_last();
        let max_acked = acked_now
            .iter()
            .filter(|(_, acked_stream, _)| *acked_stream == stream)
            .map(|(_, _, seq)| *seq)
            .max()
            .unwrap_or(0);
        if state.last_sequence == 0 {
            assert_eq!(state.messages, 0, "{tag} {name}: {state:?}");
        } else {
            assert_eq!(
                (state.first_sequence, state.messages),
                (1, state.last_sequence),
                "{tag} {name}: sequences are not contiguous from 1: {state:?}"
            );
        }
        assert!(
            state.last_sequence >= verified_last,
            "{tag} {name}: last_seq {} went below {verified_last}, which an earlier restart read back",
            state.last_sequence
        );
        assert!(
            state.last_sequence >= max_acked,
            "{tag} {name}: acked seq {max_acked} lost: last_seq is {} ({state:?})",
            state.last_sequence
        );

        // Everything the round added: acked or not, each must be intact.
        let new: Vec<u64> = (verified_last + 1..=state.last_sequence).collect();
        let mut seqs = new.clone();
        let sample: Vec<u64> = if everything || verified_last <= SAMPLE as u64 {
            (1..=verified_last).collect()
        } else {
            (0..SAMPLE).map(|_| rng.range(1, verified_last)).collect()
        };
        seqs.extend(&sample);
        let messages = fetch(tag, server, &js, stream, seqs).await;
        let known = &mut model.streams[stream];
        for (seq, message) in &messages {
            let text = check_message(tag, stream, *seq, message);
            if *seq <= verified_last {
                assert_eq!(
                    &text,
                    &known.stored[*seq as usize - 1],
                    "{tag} {name} seq {seq} changed since an earlier restart read it back"
                );
                continue;
            }
            assert!(
                model.attempted.contains(&text),
                "{tag} {name} seq {seq}: {text} was never published"
            );
            assert!(
                known.present.insert(text.clone()),
                "{tag} {name} seq {seq}: {text} is stored twice"
            );
            if let Some((acked_stream, acked_seq)) = model.acked.get(&text) {
                assert_eq!(
                    (*acked_stream, *acked_seq),
                    (stream, *seq),
                    "{tag} {name}: {text} was acked as {}/{acked_seq} but is stored at seq {seq}",
                    STREAMS[*acked_stream].0
                );
            }
            assert_eq!(known.stored.len() as u64 + 1, *seq);
            known.stored.push(text);
        }
        assert_eq!(known.verified_last(), state.last_sequence);
        // Every ack of the round points at its message.
        for (text, acked_stream, seq) in acked_now {
            if *acked_stream == stream {
                assert_eq!(
                    &known.stored[*seq as usize - 1],
                    text,
                    "{tag} {name}: acked {text} at seq {seq} was lost or replaced"
                );
            }
        }

        // The next publish continues the sequence.
        let probe = MessageId {
            stream,
            publisher: "probe".to_string(),
            round,
            counter: 0,
        };
        let text = probe.text();
        model.attempted.insert(text.clone());
        let ack = js
            .publish_with_headers(probe.subject(), probe.headers(), probe.payload())
            .await
            .unwrap_or_else(|error| panic!("{tag} {name}: probe publish: {error}"))
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "{tag} {name}: probe ack after restart: {error}\nserver log:\n{}",
                    server.log_tail()
                )
            });
        assert_eq!(
            (ack.stream.as_str(), ack.sequence, ack.duplicate),
            (*name, state.last_sequence + 1, false),
            "{tag} {name}: first publish after restart"
        );
        model.acked.insert(text.clone(), (stream, ack.sequence));
        let known = &mut model.streams[stream];
        known.present.insert(text.clone());
        known.stored.push(text);
    }
}

/// Where tern keeps its journal in a run.
#[derive(Debug, Clone, Copy)]
enum JournalPlace {
    Directory,
    /// A loop device (the raw-namespace path), its own direct I/O on or off.
    LoopDevice {
        direct_io: bool,
    },
}

async fn sigkill_loop(flavor: Flavor, journal: JournalPlace) {
    let seed = common::seed_from_env("TERN_CRASH_SEED", 0x5eed_c4a5);
    let kills = std::env::var("TERN_CRASH_KILLS")
        .ok()
        .map(|text| {
            text.trim()
                .parse::<u64>()
                .expect("TERN_CRASH_KILLS is a u64")
        })
        .unwrap_or(match journal {
            JournalPlace::Directory => 50,
            JournalPlace::LoopDevice { .. } => 25,
        });
    let _report = SeedReport {
        flavor,
        seed,
        kills,
    };
    eprintln!(
        "jetstream_crash ({}, {journal:?}): TERN_CRASH_SEED={seed} TERN_CRASH_KILLS={kills}",
        flavor.name()
    );
    let started = Instant::now();
    let mut rng = Rng(seed);
    let backing = tempfile::tempdir().expect("temp dir");
    let device = match journal {
        JournalPlace::Directory => None,
        JournalPlace::LoopDevice { direct_io } => Some(LoopDevice::attach(
            &backing.path().join("journal.img"),
            // 2 shards × 4 segments × 8 MiB, plus the 1 MiB header area.
            80 << 20,
            direct_io,
        )),
    };
    let mut server = Server::start(
        flavor,
        Options {
            nats_sync_always: true,
            extra_args: match &device {
                None => Vec::new(),
                Some(device) => vec![
                    "--journal_dir".to_string(),
                    device.path.display().to_string(),
                ],
            },
            ..Options::jetstream()
        },
    );

    {
        let client = server.connect().await;
        let js = jetstream::new(client);
        for (name, letter) in STREAMS {
            js.create_stream(jetstream::stream::Config {
                name: name.to_string(),
                subjects: vec![format!("crash.{letter}.>")],
                storage: StorageType::File,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "{}: create stream {name}: {error}\nserver log:\n{}",
                    flavor.name(),
                    server.log_tail()
                )
            });
        }
    }

    let mut model = Model {
        streams: STREAMS.iter().map(|_| StreamModel::default()).collect(),
        attempted: HashSet::new(),
        acked: HashMap::new(),
    };
    let mut total_acked = 0u64;
    let mut errors: HashMap<String, u64> = HashMap::new();
    for round in 1..=kills {
        let tag = format!("[{} seed={seed} round={round}]", flavor.name());
        let target = rng.range(MIN_ACKS, MAX_ACKS);
        let (events, mut received) = mpsc::unbounded_channel();
        let shared = Arc::new(RoundShared {
            acks: AtomicU64::new(0),
            target,
            killed: AtomicBool::new(false),
            events,
        });
        let mut tasks = Vec::new();
        for index in 0..PUBLISHERS {
            let name = format!("p{index}");
            let client = connect_once(&server, &format!("crash-{name}")).await;
            let window = rng.range(MIN_WINDOW, MAX_WINDOW) as usize;
            tasks.push(tokio::spawn(publisher(
                context(client),
                name,
                round,
                rng.next(),
                window,
                shared.clone(),
            )));
        }

        match tokio::time::timeout(ROUND_TIMEOUT, received.recv()).await {
            Ok(Some(RoundEvent::TargetReached)) => {}
            Ok(Some(RoundEvent::Failed(error))) => panic!(
                "{tag} {error} ({} acks so far)\nserver log:\n{}",
                shared.acks.load(Ordering::Acquire),
                server.log_tail()
            ),
            Ok(None) => unreachable!("the round holds a sender"),
            Err(_) => panic!(
                "{tag} only {} of {target} acks within {ROUND_TIMEOUT:?}\nserver log:\n{}",
                shared.acks.load(Ordering::Acquire),
                server.log_tail()
            ),
        }
        shared.killed.store(true, Ordering::Release);
        server.kill();

        let mut acked_now = Vec::new();
        for task in tasks {
            let outcome = tokio::time::timeout(ROUND_TIMEOUT, task)
                .await
                .unwrap_or_else(|_| {
                    panic!("{tag} a publisher did not wind down within {ROUND_TIMEOUT:?}")
                })
                .expect("publisher task");
            model.attempted.extend(outcome.attempted);
            for (kind, count) in outcome.errors {
                *errors.entry(kind).or_default() += count;
            }
            acked_now.extend(outcome.acked);
        }
        // A publisher reports only what it saw before the kill flag was set
        // (so before the kill): any such failure fails the test.
        while let Ok(event) = received.try_recv() {
            if let RoundEvent::Failed(error) = event {
                panic!("{tag} {error}\nserver log:\n{}", server.log_tail());
            }
        }
        for (text, stream, seq) in &acked_now {
            if let Some(previous) = model.acked.insert(text.clone(), (*stream, *seq)) {
                panic!("{tag} {text} acked twice: {previous:?} and {seq}");
            }
        }
        total_acked += acked_now.len() as u64;

        server = tokio::task::block_in_place(move || server.restart());
        verify(
            &tag,
            &server,
            &mut model,
            &acked_now,
            &mut rng,
            round,
            round == kills,
        )
        .await;
    }

    let stored: u64 = model.streams.iter().map(StreamModel::verified_last).sum();
    eprintln!(
        "jetstream_crash ({}): {kills} kills, {total_acked} acked publishes, {stored} messages stored, \
         {} attempted, {:.1?}; publish errors: {errors:?}",
        flavor.name(),
        model.attempted.len(),
        started.elapsed()
    );
}

mod sigkill_loop {
    use super::{Flavor, JournalPlace};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tern() {
        super::sigkill_loop(Flavor::Tern, JournalPlace::Directory).await
    }

    /// nats-server with a sync per write (`sync_interval: always`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nats() {
        super::sigkill_loop(Flavor::Nats, JournalPlace::Directory).await
    }

    /// The journal on a raw block device (a loop device with its own
    /// direct I/O on, so writes reach the backing file unbuffered).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tern_raw_journal() {
        super::sigkill_loop(Flavor::Tern, JournalPlace::LoopDevice { direct_io: true }).await
    }

    /// As [`tern_raw_journal`] with the loop driver buffering its backing
    /// file (flushes are then what makes writes durable).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tern_raw_journal_buffered_loop() {
        super::sigkill_loop(Flavor::Tern, JournalPlace::LoopDevice { direct_io: false }).await
    }
}
