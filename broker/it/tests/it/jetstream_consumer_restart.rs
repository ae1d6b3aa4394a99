//! Durable pull consumers across restarts: what CONSUMER.INFO reported and
//! every double-acked message survive a clean restart (tern and nats-server
//! 2.15.1) and a SIGKILL (tern only: nats-server does not promise exact
//! consumer state after a SIGKILL at R1). Unacked deliveries come back as
//! redeliveries after ack_wait; nothing is skipped. A deleted durable stays
//! deleted; an ephemeral is gone on tern (nats-server 2.15.1 brings an
//! ephemeral of a file stream back after a clean restart). A
//! `last_per_subject` durable does not keep its skip list across a restart,
//! on either server.
//!
//! The SIGKILL loop (`TERN_CONSUMER_KILLS`, default 6; seed
//! `TERN_CONSUMER_SEED`: a u64 or `random`, fixed by default, printed) kills the server while a worker
//! fetches and double-acks, and checks after every restart that the ack
//! floor covers every message double-acked before, that no double-acked
//! message is delivered again, and at the end that every message was
//! delivered and acked.

// Test bookkeeping, not broker code: one Mutex shares what the worker task
// saw with the test.
#![allow(clippy::disallowed_types)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy};
use common::js::{self, api, create};
use common::{Flavor, Server, TIMEOUT};
use futures::StreamExt;
use serde_json::json;

const STREAM: &str = "WORK";
const CONSUMER: &str = "worker";

/// How the server goes down between the two halves of a test.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// SIGTERM: a clean shutdown.
    Graceful,
    /// SIGKILL.
    Kill,
}

fn restart(server: Server, stop: Stop) -> Server {
    match stop {
        Stop::Graceful => server.restart_graceful(),
        Stop::Kill => server.restart(),
    }
}

/// delivered (consumer, stream), ack floor (consumer, stream),
/// num_ack_pending, num_pending.
async fn info_numbers(consumer: &mut jetstream::consumer::PullConsumer) -> [u64; 6] {
    let info = consumer.info().await.expect("consumer info");
    [
        info.delivered.consumer_sequence,
        info.delivered.stream_sequence,
        info.ack_floor.consumer_sequence,
        info.ack_floor.stream_sequence,
        info.num_ack_pending as u64,
        info.num_pending,
    ]
}

async fn worker(client: &async_nats::Client) -> jetstream::consumer::PullConsumer {
    jetstream::new(client.clone())
        .get_stream(STREAM)
        .await
        .expect("stream")
        .get_consumer(CONSUMER)
        .await
        .expect("durable consumer")
}

/// Fetches (and double-acks) until `wanted` messages arrived or a bounded
/// deadline passes: (stream sequence, delivery count) in arrival order.
async fn fetch_and_ack(
    consumer: &jetstream::consumer::PullConsumer,
    wanted: usize,
    deadline: Duration,
) -> Vec<(u64, u64)> {
    let until = Instant::now() + deadline;
    let mut received = Vec::new();
    while received.len() < wanted && Instant::now() < until {
        let mut batch = consumer
            .fetch()
            .max_messages(wanted - received.len())
            .expires(Duration::from_millis(500))
            .messages()
            .await
            .expect("fetch");
        while let Some(message) = batch.next().await {
            let message = message.expect("message");
            let info = message.info().expect("ack subject");
            received.push((info.stream_sequence, info.delivered as u64));
            message.double_ack().await.expect("double ack");
        }
    }
    received
}

/// 20 published, 10 fetched, 1..5 and 7 double-acked: INFO is the same
/// after the restart; 6, 8, 9, 10 come back as redeliveries, then 11..20.
async fn durable_resumes(flavor: Flavor, stop: Stop) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(&client, json!({"name": STREAM, "subjects": ["work.>"]})).await;
    let subjects: Vec<String> = (1..=20).map(|n| format!("work.{n}")).collect();
    let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
    js::publish_all(&client, &subjects).await;
    let stream = jetstream::new(client.clone())
        .get_stream(STREAM)
        .await
        .expect("stream");
    let mut consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(CONSUMER.into()),
            ack_policy: AckPolicy::Explicit,
            ack_wait: Duration::from_secs(1),
            ..Default::default()
        })
        .await
        .expect("create consumer");
    let received = js::fetch(&consumer, 10, TIMEOUT).await;
    let sequences: Vec<u64> = received
        .iter()
        .map(|message| message.info().expect("ack subject").stream_sequence)
        .collect();
    assert_eq!(
        sequences,
        (1..=10).collect::<Vec<u64>>(),
        "{}",
        flavor.name()
    );
    for message in &received {
        let sequence = message.info().expect("ack subject").stream_sequence;
        if sequence <= 5 || sequence == 7 {
            message.double_ack().await.expect("double ack");
        }
    }
    let before = info_numbers(&mut consumer).await;
    assert_eq!(before, [10, 10, 5, 5, 4, 10], "{}", flavor.name());

    let server = restart(server, stop);
    let client = server.connect().await;
    let mut consumer = worker(&client).await;
    assert_eq!(
        info_numbers(&mut consumer).await,
        before,
        "{} after {stop:?}: {}",
        flavor.name(),
        server.log_tail()
    );

    let received = fetch_and_ack(&consumer, 14, Duration::from_secs(15)).await;
    let delivered: BTreeMap<u64, u64> = received.iter().copied().collect();
    assert_eq!(
        delivered.len(),
        received.len(),
        "{}: delivered twice: {received:?}",
        flavor.name()
    );
    let expected: BTreeMap<u64, u64> = [6, 8, 9, 10]
        .into_iter()
        .map(|sequence| (sequence, 2))
        .chain((11..=20).map(|sequence| (sequence, 1)))
        .collect();
    assert_eq!(delivered, expected, "{}: {received:?}", flavor.name());
    assert_eq!(
        info_numbers(&mut consumer).await,
        [24, 20, 24, 20, 0, 0],
        "{}",
        flavor.name()
    );
}

async fn durable_resumes_after_graceful_restart(flavor: Flavor) {
    durable_resumes(flavor, Stop::Graceful).await;
}
differential!(durable_resumes_after_graceful_restart);

/// A `last_per_subject` durable restarted partway through the stream's last
/// messages: subjects a b c b d c give the list 1 4 5 6. nats-server 2.15.1
/// does not keep that list across a restart: after 1 is acked and the server
/// restarts, delivery goes on from 2 with every match, including the older
/// messages of b and c (2, 3) the list skipped. tern does the same (the
/// list is not part of the consumer's stored state).
async fn last_per_subject_durable_resumes(flavor: Flavor, stop: Stop) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(&client, json!({"name": STREAM, "subjects": ["work.>"]})).await;
    js::publish_all(
        &client,
        &["work.a", "work.b", "work.c", "work.b", "work.d", "work.c"],
    )
    .await;
    let stream = jetstream::new(client.clone())
        .get_stream(STREAM)
        .await
        .expect("stream");
    let consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(CONSUMER.into()),
            ack_policy: AckPolicy::Explicit,
            deliver_policy: jetstream::consumer::DeliverPolicy::LastPerSubject,
            filter_subject: "work.>".into(),
            ..Default::default()
        })
        .await
        .expect("create consumer");
    let first = fetch_and_ack(&consumer, 1, TIMEOUT).await;
    assert_eq!(first, [(1, 1)], "{}", flavor.name());

    let server = restart(server, stop);
    let client = server.connect().await;
    js::publish_all(&client, &["work.e"]).await;
    let consumer = worker(&client).await;
    let rest = fetch_and_ack(&consumer, 6, Duration::from_secs(10)).await;
    assert_eq!(
        rest,
        [(2, 1), (3, 1), (4, 1), (5, 1), (6, 1), (7, 1)],
        "{} after {stop:?}",
        flavor.name()
    );
}

async fn last_per_subject_durable_resumes_after_graceful_restart(flavor: Flavor) {
    last_per_subject_durable_resumes(flavor, Stop::Graceful).await;
}
differential!(last_per_subject_durable_resumes_after_graceful_restart);

async fn durable_resumes_after_sigkill() {
    durable_resumes(Flavor::Tern, Stop::Kill).await;
}
tern_only!(durable_resumes_after_sigkill);

/// A deleted durable stays deleted, a kept one is kept, an ephemeral is gone.
async fn deleted_and_ephemeral_consumers(flavor: Flavor, stop: Stop) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(&client, json!({"name": STREAM, "subjects": ["work.>"]})).await;
    js::publish_all(&client, &["work.1", "work.2"]).await;
    let stream = jetstream::new(client.clone())
        .get_stream(STREAM)
        .await
        .expect("stream");
    for name in ["gone", "kept"] {
        let _: jetstream::consumer::PullConsumer = stream
            .create_consumer(pull::Config {
                durable_name: Some(name.into()),
                ack_policy: AckPolicy::Explicit,
                ..Default::default()
            })
            .await
            .expect("create durable");
    }
    let ephemeral: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .expect("create ephemeral");
    let ephemeral_name = ephemeral.cached_info().name.clone();
    assert!(
        stream
            .delete_consumer("gone")
            .await
            .expect("delete")
            .success
    );
    let names = api(&client, &format!("$JS.API.CONSUMER.NAMES.{STREAM}"), "").await;
    let mut expected = vec![ephemeral_name.clone(), "kept".to_string()];
    expected.sort();
    assert_eq!(names["consumers"], json!(expected), "{names:#}");

    let server = restart(server, stop);
    let client = server.connect().await;
    let names = api(&client, &format!("$JS.API.CONSUMER.NAMES.{STREAM}"), "").await;
    let listed: Vec<String> = serde_json::from_value(names["consumers"].clone()).expect("names");
    assert!(listed.contains(&"kept".to_string()), "{names:#}");
    assert!(!listed.contains(&"gone".to_string()), "{names:#}");
    // nats-server 2.15.1 writes an ephemeral of a file stream to disk too
    // and brings it back after a clean restart (until its inactivity
    // threshold removes it); tern keeps ephemerals in memory only.
    if flavor == Flavor::Tern {
        assert_eq!(
            listed,
            ["kept"],
            "{} after {stop:?}: {names:#}",
            flavor.name()
        );
    }
    let gone = api(&client, &format!("$JS.API.CONSUMER.INFO.{STREAM}.gone"), "").await;
    assert_eq!(gone["error"]["err_code"], 10014, "{gone:#}");
    let kept = api(&client, &format!("$JS.API.CONSUMER.INFO.{STREAM}.kept"), "").await;
    assert_eq!(kept["num_pending"], 2, "{kept:#}");
}

async fn deleted_stays_deleted_after_graceful_restart(flavor: Flavor) {
    deleted_and_ephemeral_consumers(flavor, Stop::Graceful).await;
}
differential!(deleted_stays_deleted_after_graceful_restart);

async fn deleted_stays_deleted_after_sigkill() {
    deleted_and_ephemeral_consumers(Flavor::Tern, Stop::Kill).await;
}
tern_only!(deleted_stays_deleted_after_sigkill);

// ----- the SIGKILL loop ------------------------------------------------------

const LOOP_MESSAGES: u64 = 300;
/// Kills stop once this many double acks were answered.
const KILLS_UNTIL_ACKED: u64 = 250;

/// SplitMix64: small, seedable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut value = self.0;
        value = (value ^ (value >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        value = (value ^ (value >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        value ^ (value >> 31)
    }

    fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// What the worker saw, shared with the test.
#[derive(Default)]
struct Seen {
    /// Stream sequences whose double ack was answered.
    acked: BTreeSet<u64>,
    /// Every stream sequence delivered.
    delivered: BTreeSet<u64>,
    /// Deliveries of a message after its double ack was answered.
    after_ack: Vec<(u64, u64)>,
}

impl Seen {
    /// The highest k with 1..=k all double-acked.
    fn acked_prefix(&self) -> u64 {
        let mut prefix = 0;
        for &sequence in &self.acked {
            if sequence != prefix + 1 {
                break;
            }
            prefix = sequence;
        }
        prefix
    }
}

/// Fetches and double-acks until the connection fails (the server died)
/// or a fetch finds nothing once every message was delivered.
async fn work(consumer: jetstream::consumer::PullConsumer, seen: Arc<Mutex<Seen>>) {
    loop {
        let mut got_any = false;
        let Ok(mut batch) = consumer
            .fetch()
            .max_messages(10)
            .expires(Duration::from_millis(500))
            .messages()
            .await
        else {
            return;
        };
        while let Some(message) = batch.next().await {
            let Ok(message) = message else {
                return;
            };
            let Ok(info) = message.info() else {
                return;
            };
            let (sequence, count) = (info.stream_sequence, info.delivered as u64);
            got_any = true;
            {
                let mut seen = seen.lock().unwrap();
                if seen.acked.contains(&sequence) {
                    seen.after_ack.push((sequence, count));
                }
                seen.delivered.insert(sequence);
            }
            if message.double_ack().await.is_err() {
                return;
            }
            seen.lock().unwrap().acked.insert(sequence);
        }
        if !got_any && seen.lock().unwrap().delivered.len() as u64 == LOOP_MESSAGES {
            return;
        }
    }
}

async fn sigkill_loop_keeps_acks() {
    let seed = common::seed_from_env("TERN_CONSUMER_SEED", 0x5eed_c0de);
    let kills: u64 = std::env::var("TERN_CONSUMER_KILLS")
        .ok()
        .and_then(|kills| kills.parse().ok())
        .unwrap_or(6);
    let mut rng = Rng(seed);
    let mut server = js::server(Flavor::Tern);
    let client = server.connect().await;
    create(&client, json!({"name": STREAM, "subjects": ["work.>"]})).await;
    let context = jetstream::new(client.clone());
    let acks: Vec<_> = {
        let mut acks = Vec::new();
        for n in 1..=LOOP_MESSAGES {
            acks.push(
                context
                    .publish(format!("work.{n}"), "v".into())
                    .await
                    .expect("publish"),
            );
        }
        acks
    };
    for ack in acks {
        ack.await.expect("PubAck");
    }
    let _: jetstream::consumer::PullConsumer = context
        .get_stream(STREAM)
        .await
        .expect("stream")
        .create_consumer(pull::Config {
            durable_name: Some(CONSUMER.into()),
            ack_policy: AckPolicy::Explicit,
            ack_wait: Duration::from_secs(2),
            ..Default::default()
        })
        .await
        .expect("create consumer");
    let seen = Arc::new(Mutex::new(Seen::default()));
    for round in 0..kills {
        let client = server.connect().await;
        let consumer = worker(&client).await;
        let mut numbers_consumer = consumer.clone();
        let floor = info_numbers(&mut numbers_consumer).await[3];
        let (prefix, acked) = {
            let seen = seen.lock().unwrap();
            (seen.acked_prefix(), seen.acked.len() as u64)
        };
        assert!(
            floor >= prefix,
            "seed {seed} round {round}: ack floor {floor} is below the double-acked prefix {prefix}"
        );
        // A double ack whose reply a kill cut off may be applied without
        // the worker knowing, so the kills stop short of the end.
        if acked >= KILLS_UNTIL_ACKED {
            break;
        }
        // Kill once the worker double-acked a few more (a random count).
        let target = (acked + rng.range(1, 40)).min(KILLS_UNTIL_ACKED);
        let task = tokio::spawn(work(consumer, seen.clone()));
        let deadline = Instant::now() + Duration::from_secs(20);
        while (seen.lock().unwrap().acked.len() as u64) < target {
            assert!(
                Instant::now() < deadline,
                "seed {seed} round {round}: no progress to {target} acks; {}",
                server.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        server.kill();
        let _ = tokio::time::timeout(TIMEOUT, task).await;
        server = server.restart();
    }
    // No more kills: the rest is delivered and acked.
    let client = server.connect().await;
    let mut consumer = worker(&client).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        tokio::time::timeout(
            Duration::from_secs(60),
            work(consumer.clone(), seen.clone()),
        )
        .await
        .unwrap_or_else(|_| panic!("seed {seed}: the worker did not finish"));
        let numbers = info_numbers(&mut consumer).await;
        if numbers[3] == LOOP_MESSAGES && numbers[4] == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "seed {seed}: not everything acked: {numbers:?}"
        );
    }
    let numbers = info_numbers(&mut consumer).await;
    let seen = seen.lock().unwrap();
    assert!(
        seen.after_ack.is_empty(),
        "seed {seed}: double-acked messages delivered again: {:?}",
        seen.after_ack
    );
    let all: BTreeSet<u64> = (1..=LOOP_MESSAGES).collect();
    assert_eq!(
        seen.delivered, all,
        "seed {seed}: not every message was delivered"
    );
    assert!(
        seen.acked.len() as u64 >= KILLS_UNTIL_ACKED,
        "seed {seed}: {} double acks answered",
        seen.acked.len()
    );
    assert_eq!(
        [numbers[3], numbers[4], numbers[5]],
        [LOOP_MESSAGES, 0, 0],
        "seed {seed}: {numbers:?}"
    );
}
tern_only!(sigkill_loop_keeps_acks);

/// (delivered consumer/stream, ack floor consumer/stream, ack pending,
/// pending) from a raw CONSUMER.INFO.
async fn raw_info_numbers(client: &async_nats::Client, name: &str) -> [u64; 6] {
    let info = api(
        client,
        &format!("$JS.API.CONSUMER.INFO.{STREAM}.{name}"),
        "",
    )
    .await;
    let number = |path: &str| {
        info.pointer(path)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or_else(|| panic!("{path} in {info}"))
    };
    [
        number("/delivered/consumer_seq"),
        number("/delivered/stream_seq"),
        number("/ack_floor/consumer_seq"),
        number("/ack_floor/stream_seq"),
        number("/num_ack_pending"),
        number("/num_pending"),
    ]
}

/// Push deliveries (not statuses) until `count` arrived: (stream sequence,
/// delivery count, ack subject).
async fn receive_push(
    subscriber: &mut async_nats::Subscriber,
    count: usize,
) -> Vec<(u64, u64, String)> {
    let mut received = Vec::new();
    while received.len() < count {
        let message = tokio::time::timeout(Duration::from_secs(15), subscriber.next())
            .await
            .unwrap_or_else(|_| panic!("only {} of {count} pushed: {received:?}", received.len()))
            .expect("subscription open");
        if message.status.is_some() {
            continue;
        }
        let reply = message.reply.expect("ack subject").to_string();
        let tokens: Vec<&str> = reply.split('.').collect();
        received.push((
            tokens[5].parse().expect("stream sequence"),
            tokens[4].parse().expect("delivery count"),
            reply,
        ));
    }
    received
}

/// A durable push consumer (max_ack_pending 10) mid-stream: 10 of 20
/// pushed, 1..5 and 7 double-acked; after the restart INFO is the same and
/// a new subscriber gets 6, 8, 9, 10 again and then 11..20.
async fn push_durable_resumes(flavor: Flavor, stop: Stop) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(&client, json!({"name": STREAM, "subjects": ["work.>"]})).await;
    let subjects: Vec<String> = (1..=20).map(|n| format!("work.{n}")).collect();
    let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
    js::publish_all(&client, &subjects).await;
    let mut subscriber = client.subscribe("push.work").await.expect("subscribe");
    client.flush().await.expect("flush");
    let created = api(
        &client,
        &format!("$JS.API.CONSUMER.CREATE.{STREAM}.pusher"),
        &json!({"stream_name": STREAM, "config": {"durable_name": "pusher",
            "deliver_subject": "push.work", "ack_policy": "explicit",
            "ack_wait": 1_000_000_000u64, "max_ack_pending": 10}})
        .to_string(),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    let received = receive_push(&mut subscriber, 10).await;
    let sequences: Vec<u64> = received.iter().map(|(sequence, ..)| *sequence).collect();
    assert_eq!(
        sequences,
        (1..=10).collect::<Vec<u64>>(),
        "{}",
        flavor.name()
    );
    // Unbound first, so acks free no room for more pushes.
    drop(subscriber);
    client.flush().await.expect("flush");
    for (sequence, _, reply) in &received {
        if *sequence <= 5 || *sequence == 7 {
            let answer =
                tokio::time::timeout(TIMEOUT, client.request(reply.clone(), "+ACK".into()))
                    .await
                    .expect("double ack in time")
                    .expect("double ack");
            assert!(answer.payload.is_empty());
        }
    }
    let before = raw_info_numbers(&client, "pusher").await;
    assert_eq!(before, [10, 10, 5, 5, 4, 10], "{}", flavor.name());

    let server = restart(server, stop);
    let client = server.connect().await;
    assert_eq!(
        raw_info_numbers(&client, "pusher").await,
        before,
        "{} after {stop:?}: {}",
        flavor.name(),
        server.log_tail()
    );
    let mut subscriber = client.subscribe("push.work").await.expect("subscribe");
    client.flush().await.expect("flush");
    let mut delivered = BTreeMap::new();
    while delivered.len() < 14 {
        for (sequence, count, reply) in receive_push(&mut subscriber, 1).await {
            assert!(
                delivered.insert(sequence, count).is_none() || sequence <= 10,
                "{}: {sequence} pushed twice",
                flavor.name()
            );
            client
                .request(reply, "+ACK".into())
                .await
                .expect("double ack");
        }
    }
    let expected: BTreeMap<u64, u64> = [6, 8, 9, 10]
        .into_iter()
        .map(|sequence| (sequence, 2))
        .chain((11..=20).map(|sequence| (sequence, 1)))
        .collect();
    assert_eq!(delivered, expected, "{}", flavor.name());
    assert_eq!(
        raw_info_numbers(&client, "pusher").await,
        [24, 20, 24, 20, 0, 0],
        "{}",
        flavor.name()
    );
}

async fn push_durable_resumes_after_graceful_restart(flavor: Flavor) {
    push_durable_resumes(flavor, Stop::Graceful).await;
}
differential!(push_durable_resumes_after_graceful_restart);

async fn push_durable_resumes_after_sigkill() {
    push_durable_resumes(Flavor::Tern, Stop::Kill).await;
}
tern_only!(push_durable_resumes_after_sigkill);

/// A durable's whole delivery state rides in one journal record. With
/// max_ack_pending unlimited, deliveries wait for acks once more pending
/// acks would not fit one (2 MiB records: about 52k pending acks), and the
/// stream keeps working: before, the snapshot that did not fit (about 87k
/// pending) stopped the whole stream. Acks make room; the state survives a
/// SIGKILL. Ack all keeps the test fast: one ack per batch.
async fn unlimited_ack_pending_waits_where_the_state_fits_a_record() {
    const MESSAGES: u64 = 100_000;
    const CHUNK: u64 = 5_000;
    let server = js::server(Flavor::Tern);
    let client = server.connect().await;
    create(&client, json!({"name": STREAM, "subjects": ["work.>"]})).await;
    let context = jetstream::new(client.clone());
    // In chunks: async-nats holds at most 5000 PubAcks outstanding.
    for chunk in 0..MESSAGES / CHUNK {
        let mut acks = Vec::with_capacity(CHUNK as usize);
        for n in 0..CHUNK {
            let ack = context
                .publish(format!("work.{}", (chunk * CHUNK + n) % 10), "x".into())
                .await
                .expect("publish");
            acks.push(ack);
        }
        for ack in acks {
            ack.await.expect("puback");
        }
    }
    let stream = context.get_stream(STREAM).await.expect("stream");
    let mut consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(CONSUMER.into()),
            ack_policy: AckPolicy::All,
            ack_wait: Duration::from_secs(600),
            max_ack_pending: -1,
            ..Default::default()
        })
        .await
        .expect("create consumer");
    // Fetch without acking until nothing more comes.
    let mut held = 0u64;
    let mut last = None;
    loop {
        let batch = js::fetch(&consumer, 5000, Duration::from_millis(300)).await;
        let Some(newest) = batch.into_iter().last() else {
            break;
        };
        held = newest.info().expect("ack subject").stream_sequence;
        last = Some(newest);
        assert!(held <= MESSAGES);
    }
    assert!(
        (10_000..MESSAGES).contains(&held),
        "deliveries stop where the state still fits a record: {held}; {}",
        server.log_tail()
    );
    assert_eq!(
        info_numbers(&mut consumer).await[4],
        held,
        "num_ack_pending at the cap"
    );
    // The stream still takes messages.
    let ack = context
        .publish("work.last", "x".into())
        .await
        .expect("publish")
        .await
        .expect("the stream still acknowledges publishes");
    assert_eq!(ack.sequence, MESSAGES + 1);
    // Acks make room: everything else arrives.
    last.expect("something was delivered")
        .double_ack()
        .await
        .expect("ack all");
    let mut received = held;
    let until = Instant::now() + Duration::from_secs(30);
    while received < MESSAGES + 1 && Instant::now() < until {
        let batch = js::fetch(&consumer, 5000, Duration::from_millis(500)).await;
        received += batch.len() as u64;
        if let Some(newest) = batch.last() {
            newest.double_ack().await.expect("ack all");
        }
    }
    let everything = [MESSAGES + 1, MESSAGES + 1, MESSAGES + 1, MESSAGES + 1, 0, 0];
    assert_eq!(received, MESSAGES + 1, "the rest after acks");
    assert_eq!(info_numbers(&mut consumer).await, everything);
    let server = server.restart();
    let client = server.connect().await;
    let mut consumer = worker(&client).await;
    assert_eq!(
        info_numbers(&mut consumer).await,
        everything,
        "after SIGKILL: {}",
        server.log_tail()
    );
}
tern_only!(unlimited_ack_pending_waits_where_the_state_fits_a_record);
