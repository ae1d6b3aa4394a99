//! The workload kinds, measured with the official async-nats client so the
//! numbers are fair to any NATS server:
//!
//! | kind | latency sample | throughput counts |
//! |---|---|---|
//! | `core_pub_sub` | publish → receipt by each subscriber (other connection) | receipts |
//! | `request_reply` | request → reply from a responder (other connection) | replies |
//! | `js_publish` | publish → PubAck (`window = 1`: one in flight) | PubAcks |
//! | `js_end_to_end` | publish → receipt by a pull consumer | receipts |
//! | `js_pull_drain` | one fetch of `batch_messages` from a preloaded stream | messages drained |
//! | `js_push_throughput` | gap between deliveries of a preloaded stream | messages delivered |
//!
//! Subjects are `bench.<run>.<key>` (core) or `bench.<run>.s<stream>.<key>`
//! (JetStream, stream `BENCH_<run>_<stream>`), keys spread over `subjects`.
//! Streams this run created are deleted at its end, also after an error.
//! Every wait is bounded by the workload's `timeout_millis`: a server that
//! does not implement something (tern has no consumers yet) produces an
//! error naming the step, never a hang.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use tokio::sync::watch;

use crate::histogram::LatencyHistogram;
use crate::load::{
    self, Clock, Counters, Pacing, Phases, ProducerOutcome, ProducerSchedule, Window,
};
use crate::system::{self, ServerSource, SystemUsage};
use crate::workload::{Kind, Storage, Workload};

/// Subject suffix of the probes that prove a subscription is registered.
const PROBE: &str = "probe";
/// How often a probe is repeated while waiting for interest.
const PROBE_INTERVAL: Duration = Duration::from_millis(20);
/// Commands async-nats may queue per connection before `publish` waits.
const CLIENT_CAPACITY: usize = 8192;

/// What one run of a workload against one server measured.
#[derive(Debug, Default)]
pub struct Measurement {
    pub latency: LatencyHistogram,
    pub send_lag: LatencyHistogram,
    pub sent: u64,
    /// Answers (replies, PubAcks, first-subscriber receipts) over the run.
    pub completed: u64,
    /// Sends never answered within the timeout after the end.
    pub lost: u64,
    pub errors: u64,
    /// Samples counted for throughput (received inside the measured window).
    pub measured_count: u64,
    pub measured_secs: f64,
    pub throughput_msgs_per_second: f64,
    pub usage: SystemUsage,
}

impl Kind {
    pub fn latency_meaning(self) -> &'static str {
        match self {
            Kind::CorePubSub => "publish → receipt",
            Kind::RequestReply => "request → reply",
            Kind::JsPublish => "publish → PubAck",
            Kind::JsEndToEnd => "publish → consumer receipt",
            Kind::JsPullDrain => "pull fetch of one batch",
            Kind::JsPushThroughput => "gap between push deliveries",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("cannot connect to {url}: {reason}")]
    Connect { url: String, reason: String },
    /// The workload does not apply to this server (R3 on a single node).
    #[error("skipped: {0}")]
    Skipped(String),
    #[error("{step} failed: {reason}")]
    Step { step: String, reason: String },
    #[error("{step} did not finish within {timeout:?}")]
    Timeout { step: String, timeout: Duration },
}

fn step_error(step: &str, reason: impl std::fmt::Display) -> MeasureError {
    MeasureError::Step {
        step: step.to_string(),
        reason: reason.to_string(),
    }
}

/// Awaits `future` for at most `timeout`, naming `step` if it does not end.
async fn bounded<T>(
    step: &str,
    timeout: Duration,
    future: impl std::future::Future<Output = T>,
) -> Result<T, MeasureError> {
    tokio::time::timeout(timeout, future)
        .await
        .map_err(|_| MeasureError::Timeout {
            step: step.to_string(),
            timeout,
        })
}

/// How the harness's clients authenticate (the `tern` CLI's connection
/// flags: `--user`/`--password`, `--token`, `--nkey`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Credentials {
    #[default]
    None,
    UserPassword {
        user: String,
        password: String,
    },
    Token(String),
    /// An NKey seed (`SU…`).
    NkeySeed(String),
}

impl Credentials {
    pub fn apply(&self, options: async_nats::ConnectOptions) -> async_nats::ConnectOptions {
        match self {
            Credentials::None => options,
            Credentials::UserPassword { user, password } => {
                options.user_and_password(user.clone(), password.clone())
            }
            Credentials::Token(token) => options.token(token.clone()),
            Credentials::NkeySeed(seed) => options.nkey(seed.clone()),
        }
    }
}

/// Where to connect, where to read server figures, what to report progress to.
#[derive(Clone, Debug)]
pub struct Target {
    pub url: String,
    pub server: ServerSource,
    pub counters: Arc<Counters>,
    /// CA the clients trust when the server requires TLS.
    pub tls_ca: Option<std::path::PathBuf>,
    pub credentials: Credentials,
}

/// Measures `workload` against `target`. Must run on a multi-threaded
/// tokio runtime (producers are blocking threads that enter it).
pub async fn measure(workload: &Workload, target: &Target) -> Result<Measurement, MeasureError> {
    workload
        .validate()
        .map_err(|error| step_error("workload", error))?;
    let run = run_id();
    let timeout = workload.timeout();
    let mut clients = Vec::new();
    // A comma-separated list puts connection `i` on server `i % n` (the
    // producer on the first, the subscriber on the second: across the
    // nodes of a cluster), and nowhere else.
    let urls: Vec<&str> = target.url.split(',').map(str::trim).collect();
    for index in 0..workload.connections as usize {
        let url = urls[index % urls.len()];
        let mut options = async_nats::ConnectOptions::new()
            .connection_timeout(timeout)
            .client_capacity(CLIENT_CAPACITY)
            .request_timeout(Some(timeout))
            .ignore_discovered_servers();
        if let Some(ca) = &target.tls_ca {
            options = options.add_root_certificates(ca.clone());
        }
        let options = target.credentials.apply(options);
        let client = bounded("connect", timeout, options.connect(url))
            .await?
            .map_err(|error| MeasureError::Connect {
                url: url.to_string(),
                reason: error.to_string(),
            })?;
        clients.push(client);
    }
    let mut context = jetstream::new(clients[0].clone());
    context.set_timeout(timeout);
    let mut streams = Vec::new();
    let result = async {
        if workload.kind.is_jetstream() {
            streams = create_streams(&context, workload, &run).await?;
        }
        match workload.kind {
            Kind::CorePubSub | Kind::RequestReply | Kind::JsPublish | Kind::JsEndToEnd => {
                paced(workload, target, &clients, &streams, &run).await
            }
            Kind::JsPullDrain | Kind::JsPushThroughput => {
                drain(workload, target, &clients[0], &context, &streams, &run).await
            }
        }
    }
    .await;
    for stream in &streams {
        let _ = bounded("delete stream", timeout, context.delete_stream(stream)).await;
    }
    for client in &clients {
        let _ = bounded("flush", timeout, client.flush()).await;
    }
    result
}

/// A short id unique enough to keep concurrent runs on one server apart.
fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    format!(
        "{:08x}",
        (nanos ^ u64::from(std::process::id()) << 32) as u32
    )
}

fn stream_name(run: &str, index: u32) -> String {
    format!("BENCH_{run}_{index}")
}

/// The subject of send `index` of `producer`.
fn subject(workload: &Workload, run: &str, producer: u32, index: u64) -> String {
    let key = (index * u64::from(workload.producers) + u64::from(producer))
        % u64::from(workload.subjects);
    if workload.kind.is_jetstream() {
        let stream = key % u64::from(workload.streams);
        format!("bench.{run}.s{stream}.{key}")
    } else {
        format!("bench.{run}.{key}")
    }
}

async fn create_streams(
    context: &jetstream::Context,
    workload: &Workload,
    run: &str,
) -> Result<Vec<String>, MeasureError> {
    let mut names = Vec::new();
    for index in 0..workload.streams {
        let name = stream_name(run, index);
        let config = stream::Config {
            name: name.clone(),
            subjects: vec![format!("bench.{run}.s{index}.>")],
            storage: match workload.storage {
                Storage::File => stream::StorageType::File,
                Storage::Memory => stream::StorageType::Memory,
            },
            num_replicas: workload.replicas as usize,
            ..Default::default()
        };
        let created = bounded(
            "create stream",
            workload.timeout(),
            context.create_stream(config),
        )
        .await?;
        match created {
            Ok(_) => names.push(name),
            Err(error) => {
                // Delete what was made before reporting.
                for made in &names {
                    let _ = bounded(
                        "delete stream",
                        workload.timeout(),
                        context.delete_stream(made),
                    )
                    .await;
                }
                return Err(stream_error(workload, error));
            }
        }
    }
    Ok(names)
}

fn stream_error(
    workload: &Workload,
    error: async_nats::jetstream::context::CreateStreamError,
) -> MeasureError {
    use async_nats::jetstream::context::CreateStreamErrorKind;
    use async_nats::jetstream::ErrorCode;
    if let CreateStreamErrorKind::JetStream(api) = error.kind() {
        let code = api.error_code();
        let placement = [
            ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED,
            ErrorCode::INSUFFICIENT_RESOURCES,
            ErrorCode::CLUSTER_NO_PEERS,
            ErrorCode::CLUSTER_NOT_AVAILABLE,
        ];
        if workload.replicas > 1 && placement.contains(&code) {
            return MeasureError::Skipped(format!(
                "the server cannot place R{} streams (run this workload against a cluster): {api}",
                workload.replicas
            ));
        }
    }
    step_error("create stream", error)
}

/// What a receiving task does with each message.
#[derive(Clone)]
enum Role {
    /// Core subscriber; the first one frees producers' window slots.
    Subscriber { releases: bool },
    /// Echoes each request to its reply subject.
    Responder { client: async_nats::Client },
    /// A producer's reply inbox (request/reply).
    Replies,
    /// A producer's PubAck inbox; the origin is the reply subject's last token.
    Acks { records: bool },
    /// A JetStream consumer's deliveries (end to end).
    Consumer,
}

#[derive(Debug, Default)]
struct Received {
    latency: LatencyHistogram,
    measured_count: u64,
}

struct Shared {
    clock: Clock,
    phases: Phases,
    windows: Vec<Arc<Window>>,
    counters: Arc<Counters>,
}

impl Shared {
    fn complete(&self, producer: Option<u32>) {
        Counters::add(&self.counters.completed, 1);
        if let Some(window) = producer.and_then(|p| self.windows.get(p as usize)) {
            window.release();
        }
    }

    fn record(&self, received: &mut Received, origin_nanos: u64, now: Instant) {
        let origin = self.clock.instant(origin_nanos);
        if self.phases.measured(origin) {
            received
                .latency
                .record(now.saturating_duration_since(origin));
        }
        if now >= self.phases.measure_start && now < self.phases.end {
            received.measured_count += 1;
        }
    }
}

/// Handles one message for `role`.
async fn receive(
    role: &Role,
    shared: &Shared,
    received: &mut Received,
    subject: &str,
    reply: Option<&str>,
    payload: &Bytes,
    producer_of_inbox: Option<u32>,
) {
    let now = Instant::now();
    if subject.ends_with(PROBE) {
        return;
    }
    match role {
        Role::Subscriber { releases } => {
            Counters::add(&shared.counters.delivered, 1);
            let Some((origin, producer)) = load::parse_header(payload) else {
                return;
            };
            shared.record(received, origin, now);
            if *releases {
                shared.complete(Some(producer));
            }
        }
        Role::Responder { client } => {
            if let Some(reply) = reply {
                if client
                    .publish(reply.to_string(), payload.clone())
                    .await
                    .is_err()
                {
                    Counters::add(&shared.counters.errors, 1);
                }
            }
        }
        Role::Replies => {
            if let Some((origin, producer)) = load::parse_header(payload) {
                shared.record(received, origin, now);
                shared.complete(Some(producer));
            }
        }
        Role::Acks { records } => {
            let origin = subject
                .rsplit('.')
                .next()
                .and_then(|t| t.parse::<u64>().ok());
            let failed = payload.windows(7).any(|window| window == b"\"error\"");
            if failed || origin.is_none() {
                Counters::add(&shared.counters.errors, 1);
            } else if let (Some(origin), true) = (origin, *records) {
                shared.record(received, origin, now);
            }
            shared.complete(producer_of_inbox);
        }
        Role::Consumer => {
            Counters::add(&shared.counters.delivered, 1);
            if let Some((origin, _)) = load::parse_header(payload) {
                shared.record(received, origin, now);
            }
        }
    }
}

async fn subscription_task(
    mut subscriber: async_nats::Subscriber,
    role: Role,
    shared: Arc<Shared>,
    producer_of_inbox: Option<u32>,
    mut stop: watch::Receiver<bool>,
) -> Received {
    let mut received = Received::default();
    loop {
        tokio::select! {
            message = subscriber.next() => {
                let Some(message) = message else { break };
                receive(
                    &role,
                    &shared,
                    &mut received,
                    message.subject.as_str(),
                    message.reply.as_ref().map(|reply| reply.as_str()),
                    &message.payload,
                    producer_of_inbox,
                )
                .await;
            }
            _ = stop.changed() => break,
        }
    }
    received
}

async fn consumer_task(
    mut messages: consumer::pull::Stream,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> Received {
    let mut received = Received::default();
    loop {
        tokio::select! {
            message = messages.next() => {
                match message {
                    Some(Ok(message)) => {
                        receive(&Role::Consumer, &shared, &mut received, "", None, &message.payload, None).await;
                    }
                    Some(Err(_)) => Counters::add(&shared.counters.errors, 1),
                    None => break,
                }
            }
            _ = stop.changed() => break,
        }
    }
    received
}

/// Waits (bounded) until `subscriber` sees a probe published on `client`:
/// then its interest is registered and no measured message can miss it.
async fn await_interest(
    client: &async_nats::Client,
    subscriber: &mut async_nats::Subscriber,
    probe_subject: &str,
    timeout: Duration,
) -> Result<(), MeasureError> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        client
            .publish(probe_subject.to_string(), Bytes::new())
            .await
            .map_err(|error| step_error("probe publish", error))?;
        client
            .flush()
            .await
            .map_err(|error| step_error("flush", error))?;
        if let Ok(Some(_)) = tokio::time::timeout(PROBE_INTERVAL, subscriber.next()).await {
            return Ok(());
        }
    }
    Err(MeasureError::Timeout {
        step: "subscription interest".into(),
        timeout,
    })
}

/// The paced kinds: producers on blocking threads, receivers as tasks.
async fn paced(
    workload: &Workload,
    target: &Target,
    clients: &[async_nats::Client],
    streams: &[String],
    run: &str,
) -> Result<Measurement, MeasureError> {
    let timeout = workload.timeout();
    let connections = clients.len();
    let producer_client = |producer: u32| clients[producer as usize % connections].clone();
    let consumer_client =
        |consumer: u32| clients[(workload.producers + consumer) as usize % connections].clone();
    let windows: Vec<Arc<Window>> = (0..workload.producers)
        .map(|producer| Window::new(Pacing::for_producer(workload, producer).window))
        .collect();
    let (stop_sender, stop) = watch::channel(false);
    let clock = Clock::new();
    // Receivers first: subscriptions, interest proven by a probe.
    let mut pending = Vec::new();
    let probe_subject = format!("bench.{run}.{PROBE}");
    let mut consumer_streams = Vec::new();
    match workload.kind {
        Kind::CorePubSub | Kind::RequestReply => {
            for consumer in 0..workload.consumers {
                let client = consumer_client(consumer);
                let mut subscriber = client
                    .subscribe(format!("bench.{run}.>"))
                    .await
                    .map_err(|error| step_error("subscribe", error))?;
                await_interest(
                    &producer_client(0),
                    &mut subscriber,
                    &probe_subject,
                    timeout,
                )
                .await?;
                let role = if workload.kind == Kind::RequestReply {
                    Role::Responder { client }
                } else {
                    Role::Subscriber {
                        releases: consumer == 0,
                    }
                };
                pending.push((subscriber, role, None));
            }
        }
        Kind::JsEndToEnd => {
            let context = jetstream::new(clients[0].clone());
            for consumer in 0..workload.consumers {
                let name = &streams[consumer as usize % streams.len()];
                let stream = bounded("get stream", timeout, context.get_stream(name))
                    .await?
                    .map_err(|error| step_error("get stream", error))?;
                let config = consumer::pull::Config {
                    name: Some(format!("bench_{run}_{consumer}")),
                    ack_policy: consumer::AckPolicy::None,
                    ..Default::default()
                };
                let created = bounded(
                    "create pull consumer",
                    timeout,
                    stream.create_consumer(config),
                )
                .await?
                .map_err(|error| step_error("create pull consumer", error))?;
                let messages = bounded("consumer messages", timeout, created.messages())
                    .await?
                    .map_err(|error| step_error("consumer messages", error))?;
                consumer_streams.push(messages);
            }
        }
        Kind::JsPublish | Kind::JsPullDrain | Kind::JsPushThroughput => {}
    }
    // Reply and PubAck inboxes, one per producer on its own connection.
    let inbox = |producer: u32| format!("_INBOX.bench.{run}.{producer}");
    if matches!(
        workload.kind,
        Kind::RequestReply | Kind::JsPublish | Kind::JsEndToEnd
    ) {
        for producer in 0..workload.producers {
            let subject = match workload.kind {
                Kind::RequestReply => inbox(producer),
                _ => format!("{}.*", inbox(producer)),
            };
            let subscriber = producer_client(producer)
                .subscribe(subject)
                .await
                .map_err(|error| step_error("subscribe inbox", error))?;
            let role = match workload.kind {
                Kind::RequestReply => Role::Replies,
                _ => Role::Acks {
                    records: workload.kind == Kind::JsPublish,
                },
            };
            pending.push((subscriber, role, Some(producer)));
        }
    }
    for client in clients {
        bounded("flush", timeout, client.flush())
            .await?
            .map_err(|error| step_error("flush", error))?;
    }
    let phases = Phases::new(Instant::now(), workload);
    let shared = Arc::new(Shared {
        clock,
        phases,
        windows: windows.clone(),
        counters: target.counters.clone(),
    });
    let mut receivers = Vec::new();
    for (subscriber, role, producer) in pending {
        receivers.push(tokio::spawn(subscription_task(
            subscriber,
            role,
            shared.clone(),
            producer,
            stop.clone(),
        )));
    }
    for messages in consumer_streams {
        receivers.push(tokio::spawn(consumer_task(
            messages,
            shared.clone(),
            stop.clone(),
        )));
    }
    let sampler = tokio::spawn(sample_window(target.server.clone(), phases));
    let handle = tokio::runtime::Handle::current();
    let mut producers = Vec::new();
    for producer in 0..workload.producers {
        let client = producer_client(producer);
        let window = windows[producer as usize].clone();
        let counters = target.counters.clone();
        let handle = handle.clone();
        let workload = workload.clone();
        let run = run.to_string();
        let reply_inbox = inbox(producer);
        producers.push(tokio::task::spawn_blocking(move || {
            let schedule = ProducerSchedule {
                clock,
                phases,
                pacing: Pacing::for_producer(&workload, producer),
                timeout: workload.timeout(),
            };
            load::run_producer(&handle, schedule, &window, &counters, |index, origin| {
                let client = client.clone();
                let subject = subject(&workload, &run, producer, index);
                let payload = load::payload(origin, producer, workload.payload_bytes);
                let reply = match workload.kind {
                    Kind::CorePubSub => None,
                    Kind::RequestReply => Some(reply_inbox.clone()),
                    _ => Some(format!("{reply_inbox}.{origin}")),
                };
                async move {
                    match reply {
                        None => client.publish(subject, payload).await,
                        Some(reply) => client.publish_with_reply(subject, reply, payload).await,
                    }
                }
            })
        }));
    }
    let mut outcome = ProducerOutcome::default();
    for producer in producers {
        let done = producer
            .await
            .map_err(|error| step_error("producer thread", error))?;
        outcome.sent += done.sent;
        outcome.window_timeouts += done.window_timeouts;
        outcome.send_errors += done.send_errors;
        outcome.abandoned += done.abandoned;
        outcome.send_lag.merge(&done.send_lag);
    }
    // Drain: wait (bounded) for the answers still owed.
    let counters = &target.counters;
    let deliveries_owed = match workload.kind {
        Kind::CorePubSub | Kind::JsEndToEnd => outcome.sent * u64::from(workload.consumers),
        _ => 0,
    };
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline
        && (Counters::get(&counters.completed) + outcome.window_timeouts + outcome.send_errors
            < outcome.sent
            || Counters::get(&counters.delivered) < deliveries_owed)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = stop_sender.send(true);
    let mut measurement = Measurement {
        send_lag: outcome.send_lag,
        sent: outcome.sent,
        ..Measurement::default()
    };
    for receiver in receivers {
        let received = receiver
            .await
            .map_err(|error| step_error("receiver task", error))?;
        measurement.latency.merge(&received.latency);
        measurement.measured_count += received.measured_count;
    }
    measurement.usage = sampler
        .await
        .map_err(|error| step_error("sampler", error))?;
    measurement.completed = Counters::get(&counters.completed);
    measurement.lost = if deliveries_owed > 0 {
        deliveries_owed.saturating_sub(Counters::get(&counters.delivered))
    } else {
        outcome.sent.saturating_sub(measurement.completed)
    };
    measurement.errors = Counters::get(&counters.errors);
    measurement.measured_secs = phases.measured_secs();
    measurement.throughput_msgs_per_second =
        measurement.measured_count as f64 / measurement.measured_secs;
    Ok(measurement)
}

/// Samples CPU and memory at the measured window's start and end.
async fn sample_window(source: ServerSource, phases: Phases) -> SystemUsage {
    tokio::time::sleep_until(phases.measure_start.into()).await;
    let first = {
        let source = source.clone();
        tokio::task::spawn_blocking(move || system::sample(&source)).await
    };
    tokio::time::sleep_until(phases.end.into()).await;
    let last = tokio::task::spawn_blocking(move || system::sample(&source)).await;
    match (first, last) {
        (Ok(first), Ok(last)) => system::usage(&first, &last),
        _ => SystemUsage::default(),
    }
}

/// Stores `preload_messages` with up to `window` PubAcks outstanding.
async fn preload(
    context: &jetstream::Context,
    workload: &Workload,
    run: &str,
    counters: &Counters,
) -> Result<(), MeasureError> {
    let clock = Clock::new();
    let mut in_flight = FuturesUnordered::new();
    let mut failures = 0u64;
    for index in 0..workload.preload_messages {
        while in_flight.len() >= workload.window as usize {
            if let Some(Err(_)) = in_flight.next().await {
                failures += 1;
            }
        }
        let subject = subject(workload, run, 0, index);
        let payload = load::payload(clock.nanos(Instant::now()), 0, workload.payload_bytes);
        let future = context.publish(subject, payload);
        let timeout = workload.timeout();
        in_flight.push(async move {
            let ack = tokio::time::timeout(timeout, future)
                .await
                .map_err(|_| ())?
                .map_err(|_| ())?;
            tokio::time::timeout(timeout, ack)
                .await
                .map_err(|_| ())?
                .map_err(|_| ())
                .map(|_| ())
        });
        Counters::add(&counters.sent, 1);
    }
    while let Some(result) = in_flight.next().await {
        if result.is_err() {
            failures += 1;
        }
    }
    if failures > 0 {
        return Err(step_error(
            "preload",
            format!(
                "{failures} of {} publishes not acknowledged",
                workload.preload_messages
            ),
        ));
    }
    Ok(())
}

/// The drain kinds: preload, then read everything back as fast as the
/// server delivers.
async fn drain(
    workload: &Workload,
    target: &Target,
    client: &async_nats::Client,
    context: &jetstream::Context,
    streams: &[String],
    run: &str,
) -> Result<Measurement, MeasureError> {
    let timeout = workload.timeout();
    preload(context, workload, run, &target.counters).await?;
    let mut measurement = Measurement::default();
    let started = Instant::now();
    let deadline = started + workload.duration() + timeout;
    let phases = Phases {
        start: started,
        measure_start: started,
        end: deadline,
    };
    let first_sample = system::sample(&target.server);
    let mut drained = 0u64;
    let per_stream = |index: usize| {
        let total = workload.preload_messages;
        let streams = streams.len() as u64;
        total / streams + u64::from((index as u64) < total % streams)
    };
    for (index, name) in streams.iter().enumerate() {
        let want = per_stream(index);
        let stream = bounded("get stream", timeout, context.get_stream(name))
            .await?
            .map_err(|error| step_error("get stream", error))?;
        if workload.kind == Kind::JsPullDrain {
            let consumer = bounded(
                "create pull consumer",
                timeout,
                stream.create_consumer(consumer::pull::Config {
                    durable_name: workload.ack_explicit.then(|| format!("drain-{run}")),
                    ack_policy: if workload.ack_explicit {
                        consumer::AckPolicy::Explicit
                    } else {
                        consumer::AckPolicy::None
                    },
                    ..Default::default()
                }),
            )
            .await?
            .map_err(|error| step_error("create pull consumer", error))?;
            let mut got = 0u64;
            while got < want && Instant::now() < deadline {
                let asked = Instant::now();
                let mut batch = bounded(
                    "fetch",
                    timeout,
                    consumer
                        .fetch()
                        .max_messages(workload.batch_messages as usize)
                        .expires(timeout)
                        .messages(),
                )
                .await?
                .map_err(|error| step_error("fetch", error))?;
                while let Some(message) = bounded("fetch batch", timeout * 2, batch.next()).await? {
                    let Ok(message) = message else {
                        Counters::add(&target.counters.errors, 1);
                        continue;
                    };
                    if workload.ack_explicit && message.ack().await.is_err() {
                        Counters::add(&target.counters.errors, 1);
                    }
                    got += 1;
                    Counters::add(&target.counters.delivered, 1);
                }
                measurement.latency.record(asked.elapsed());
            }
            drained += got;
        } else {
            let deliver_subject = client.new_inbox();
            let consumer = bounded(
                "create push consumer",
                timeout,
                // Flow control, as the nats CLI's push consumers have it:
                // without it a server that delivers faster than async-nats
                // reads overflows the subscription's buffer, which drops.
                stream.create_consumer(consumer::push::Config {
                    deliver_subject,
                    ack_policy: consumer::AckPolicy::None,
                    flow_control: true,
                    idle_heartbeat: Duration::from_secs(5),
                    ..Default::default()
                }),
            )
            .await?
            .map_err(|error| step_error("create push consumer", error))?;
            let mut messages = bounded("push messages", timeout, consumer.messages())
                .await?
                .map_err(|error| step_error("push messages", error))?;
            let mut got = 0u64;
            let mut last = Instant::now();
            while got < want && Instant::now() < deadline {
                match bounded("push delivery", timeout, messages.next()).await? {
                    Some(Ok(_)) => {
                        let now = Instant::now();
                        measurement.latency.record(now - last);
                        last = now;
                        got += 1;
                        Counters::add(&target.counters.delivered, 1);
                    }
                    Some(Err(_)) => Counters::add(&target.counters.errors, 1),
                    None => break,
                }
            }
            drained += got;
        }
    }
    let elapsed = started.elapsed();
    let last_sample = system::sample(&target.server);
    measurement.usage = system::usage(&first_sample, &last_sample);
    measurement.sent = workload.preload_messages;
    measurement.completed = drained;
    measurement.measured_count = drained;
    measurement.lost = workload.preload_messages.saturating_sub(drained);
    measurement.errors = Counters::get(&target.counters.errors);
    measurement.measured_secs = elapsed.as_secs_f64();
    measurement.throughput_msgs_per_second = drained as f64 / elapsed.as_secs_f64().max(1e-9);
    assert!(phases.end >= phases.start);
    Ok(measurement)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_spread_over_keys_and_streams() {
        let workload = Workload::parse(
            "name = \"t\"\nkind = \"js_publish\"\nsubjects = 4\nstreams = 2\nproducers = 2\n",
            "test",
        )
        .unwrap();
        let subjects: Vec<String> = (0..4).map(|i| subject(&workload, "r", 1, i)).collect();
        assert_eq!(
            subjects,
            [
                "bench.r.s1.1",
                "bench.r.s1.3",
                "bench.r.s1.1",
                "bench.r.s1.3"
            ]
        );
        assert_eq!(subject(&workload, "r", 0, 1), "bench.r.s0.2");
        let core = Workload::parse("name = \"t\"\nkind = \"core_pub_sub\"\n", "test").unwrap();
        assert_eq!(subject(&core, "r", 0, 7), "bench.r.0");
    }

    #[test]
    fn run_ids_are_subject_tokens() {
        let id = run_id();
        assert_eq!(id.len(), 8);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
