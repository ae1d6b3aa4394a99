//! Failover of a replicated stream's leader under publish load, tern only:
//! a 3-node cluster ([`Cluster::meshed`]) holds an R3 file stream and a
//! durable pull consumer. Two publishers, on clients of different nodes,
//! keep a few publishes in flight, each with a `Nats-Msg-Id` equal to its
//! unique payload and retried (timeouts, no responders, 503, 500 10009)
//! until acknowledged; a consumer on a third node fetches and acks
//! throughout. Over [`ROUNDS`] rounds the current stream leader (per
//! STREAM.INFO's `cluster.leader`) is stopped, alternately by SIGTERM and
//! SIGKILL; a probe publish sent once it is gone measures the failover
//! (signal → first PubAck, which only a new leader can give); the consumer
//! must deliver a message stored after the failover; the node is restarted
//! on its data and must become `current` again (catch-up from the leader's
//! log).
//!
//! At the end, with the publishers stopped, the whole stream is read (batched
//! direct gets) while each node in turn leads it (stepdowns; when one goes
//! to the wrong node, the third node is killed for the next and restarted),
//! so each replica's copy is checked: sequences `1..=last` without a gap,
//! every acknowledged payload stored exactly once at the sequence its
//! PubAck named, nothing else. The consumer must have received every
//! sequence (at least once), each with the payload stored there, and its
//! ack floor must reach the last one. Last, with two nodes down, a pull
//! request through the third must get a 503 status, not a JSON body.
//!
//! Then a snapshot round (`SNAPSHOT CATCH-UP`): a follower down while
//! 22 000 messages go in returns through the leader's snapshot.
//!
//! Per-round failover times are printed (`--nocapture`); the test never
//! fails on a timing, only on generous bounds. `TERN_FAILOVER_SEED` (u64 or
//! `random`, printed) picks how many acks each round waits for before its
//! stop, i.e. where in the load the leader dies.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::{HeaderMap, RequestErrorKind};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

use common::cluster::Cluster;
use common::{Flavor, Options, TIMEOUT};

const STREAM: &str = "FAILOVER";
const SUBJECT: &str = "failover.work";
const DURABLE: &str = "WORKER";
const NODES: usize = 3;
/// Leader stops, alternately SIGTERM (even rounds) and SIGKILL (odd).
const ROUNDS: usize = 20;
/// Messages published while a follower is down in the snapshot round:
/// more than the leader's retained log (20 000 entries) and a compaction
/// step (1024).
const SNAPSHOT_BULK: usize = 22_000;
const PUBLISHERS: usize = 2;
/// Publishes each publisher keeps in flight at most.
const IN_FLIGHT: usize = 4;
/// A publisher starts one publish per interval (while fewer than
/// [`IN_FLIGHT`] wait): moderate load. A restarted node must return before
/// the leader's retained log (20 000 entries: each message, and the
/// consumer's state entries) moves past it, as catch-up by snapshot is not
/// built yet; unpaced, the publishers filled that in about 5 s.
const PUBLISH_INTERVAL: Duration = Duration::from_millis(10);
/// Acks to wait for (all publishers together) before a round's stop:
/// uniform in this range, from the seed.
const ACKS_BEFORE_STOP_MIN: u64 = 10;
const ACKS_BEFORE_STOP_MAX: u64 = 80;
/// One publish attempt; a retry carries the same `Nats-Msg-Id`, so a slow
/// PubAck costs a duplicate answer, never a duplicate message.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// One attempt of the probe that measures a failover (finer grained).
const PROBE_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(250);
/// One publish, across however many failovers it meets.
const PUBLISH_DEADLINE: Duration = Duration::from_secs(30);
/// Elections, catch-up, the consumer resuming: generous bounds, not
/// timings (2 shared vCPUs, other tests' servers running too).
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Consumer: messages per pull request and how long the server holds it.
const FETCH_BATCH: usize = 64;
const FETCH_EXPIRES: Duration = Duration::from_millis(400);
/// A pull request lost with its leader gets no end-of-batch status: the
/// consumer gives up on it this long after it expired.
const FETCH_GRACE: Duration = Duration::from_millis(300);
/// The consumer's ack wait: a delivery or ack lost with a leader is
/// redelivered after it.
const ACK_WAIT: Duration = Duration::from_secs(2);
/// Messages per direct-get batch when reading the stream back.
const READ_BATCH: u64 = 512;
/// A stepdown that has not moved leadership within this is asked again.
const STEPDOWN_RETRY: Duration = Duration::from_secs(2);
/// Poll interval of the bounded waits below (not synchronisation).
const POLL: Duration = Duration::from_millis(20);

/// SplitMix64: small, seedable, good enough to pick test parameters.
struct Rng(u64);

impl Rng {
    fn range(&mut self, low: u64, high: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut value = self.0;
        value = (value ^ (value >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        value = (value ^ (value >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        value ^= value >> 31;
        low + value % (high - low + 1)
    }
}

/// One client per live node (`None` while the node is down), by node
/// number minus one, with when it connected; the publishers and the
/// consumer pick from it on every attempt, so a client whose node died is
/// left for another.
type Clients = Vec<Option<(Instant, async_nats::Client)>>;

/// Node `home`'s client if it is up, else the next live node's.
fn pick(clients: &Clients, home: usize) -> Option<(usize, async_nats::Client)> {
    (0..clients.len())
        .map(|offset| (home - 1 + offset) % clients.len())
        .find_map(|index| {
            let (_, client) = clients[index].as_ref()?;
            Some((index + 1, client.clone()))
        })
}

/// Live nodes, the one whose client connected first first. A request
/// through a node that just started may lose its reply: the node that
/// answers may not know the client's inbox yet (interest reaches other
/// nodes some time after it is made, see `common::cluster`).
fn oldest_first(clients: &Clients) -> Vec<usize> {
    let mut live: Vec<(Instant, usize)> = clients
        .iter()
        .enumerate()
        .filter_map(|(index, slot)| slot.as_ref().map(|(since, _)| (*since, index + 1)))
        .collect();
    live.sort();
    live.into_iter().map(|(_, node)| node).collect()
}

/// A publish the stream acknowledged.
#[derive(Debug, Clone)]
struct Acked {
    payload: String,
    sequence: u64,
}

/// Publishes `payload` (also its `Nats-Msg-Id`) through node `home` (or
/// the next live one) until a PubAck names its sequence. Retried: a
/// timeout, no responders, any 503 (10008 while no leader is in office,
/// 10077 `stream is stopped` from a node shutting down) and 500 10009
/// (what a leader change shows a client); anything else is an error, as
/// is the deadline.
async fn publish_until_acked(
    clients: watch::Receiver<Clients>,
    home: usize,
    payload: String,
    attempt_timeout: Duration,
) -> Result<Acked, String> {
    let deadline = Instant::now() + PUBLISH_DEADLINE;
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", payload.as_str());
    let mut attempts = 0u64;
    let mut last = String::from("no live node");
    loop {
        if Instant::now() >= deadline {
            return Err(format!(
                "{payload}: not acknowledged within {PUBLISH_DEADLINE:?} ({attempts} attempts, last: {last})"
            ));
        }
        let picked = pick(&clients.borrow(), home);
        let Some((node, client)) = picked else {
            tokio::time::sleep(POLL).await;
            continue;
        };
        attempts += 1;
        let request = async_nats::Request::new()
            .headers(headers.clone())
            .payload(payload.clone().into())
            .timeout(Some(attempt_timeout));
        match client.send_request(SUBJECT.to_string(), request).await {
            Ok(reply) => {
                let ack: Value = serde_json::from_slice(&reply.payload).map_err(|error| {
                    format!(
                        "{payload}: the answer through n{node} is not JSON ({error}): {:?}",
                        String::from_utf8_lossy(&reply.payload)
                    )
                })?;
                // An error PubAck carries `"seq": 0` too (as nats-server's).
                if ack.get("error").is_none() {
                    let sequence = ack["seq"].as_u64().unwrap_or(0);
                    if ack["stream"] != STREAM || sequence == 0 {
                        return Err(format!(
                            "{payload}: through n{node}: not a PubAck of {STREAM}: {ack}"
                        ));
                    }
                    return Ok(Acked { payload, sequence });
                }
                // 503: unavailable (no leader yet, or the stream's node
                // shutting down); 500 10009: asked a replica not in office.
                let unavailable = ack["error"]["code"] == 503;
                if !unavailable && ack["error"]["err_code"] != 10009 {
                    return Err(format!("{payload}: through n{node}: {ack}"));
                }
                last = format!("n{node}: {ack}");
                // Poll interval: the stream has no leader in office yet.
                tokio::time::sleep(POLL).await;
            }
            Err(error) => {
                last = format!("n{node}: {error}");
                if error.kind() != RequestErrorKind::TimedOut {
                    // Poll interval: no responder (yet), or the
                    // connection is down.
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    }
}

/// A publisher: a publish every [`PUBLISH_INTERVAL`] through node `home`
/// (payloads `p<id>-<n>`), at most [`IN_FLIGHT`] at a time, until `stop`;
/// then it waits for those in flight.
async fn publisher(
    id: usize,
    home: usize,
    clients: watch::Receiver<Clients>,
    stop: Arc<AtomicBool>,
    acks: Arc<AtomicU64>,
) -> Result<Vec<Acked>, String> {
    let mut pending = FuturesUnordered::new();
    let mut acked = Vec::new();
    let mut next = 0u64;
    let mut pace = tokio::time::interval(PUBLISH_INTERVAL);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopped = stop.load(Ordering::Relaxed);
        if stopped && pending.is_empty() {
            return Ok(acked);
        }
        tokio::select! {
            _ = pace.tick(), if !stopped && pending.len() < IN_FLIGHT => {
                let payload = format!("p{id}-{next}");
                next += 1;
                pending.push(publish_until_acked(
                    clients.clone(),
                    home,
                    payload,
                    ATTEMPT_TIMEOUT,
                ));
            }
            Some(outcome) = pending.next(), if !pending.is_empty() => {
                acked.push(outcome?);
                acks.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// What the consumer received.
#[derive(Default)]
struct Consumed {
    /// Stream sequence -> payload, of every delivery (redeliveries too:
    /// the payload must be the same each time).
    payloads: BTreeMap<u64, String>,
    deliveries: u64,
    redeliveries: u64,
    /// `n` such that every sequence `1..=n` was delivered.
    contiguous: u64,
}

impl Consumed {
    fn record(&mut self, sequence: u64, payload: String) -> Result<(), String> {
        self.deliveries += 1;
        if let Some(earlier) = self.payloads.get(&sequence) {
            self.redeliveries += 1;
            if *earlier != payload {
                return Err(format!(
                    "sequence {sequence} delivered as {earlier:?} and later as {payload:?}"
                ));
            }
            return Ok(());
        }
        self.payloads.insert(sequence, payload);
        while self.payloads.contains_key(&(self.contiguous + 1)) {
            self.contiguous += 1;
        }
        Ok(())
    }
}

/// The consumer: fetches from [`DURABLE`] through node `home` (or the next
/// live one) and acks every message, until `stop`. `highest` is the
/// highest stream sequence delivered so far.
async fn consumer(
    home: usize,
    clients: watch::Receiver<Clients>,
    stop: Arc<AtomicBool>,
    consumed: Arc<Mutex<Consumed>>,
    highest: Arc<AtomicU64>,
) -> Result<(), String> {
    use async_nats::jetstream::consumer::PullConsumer;
    let mut current: Option<(usize, async_nats::Client, PullConsumer)> = None;
    while !stop.load(Ordering::Relaxed) {
        let picked = pick(&clients.borrow(), home);
        let Some((node, client)) = picked else {
            tokio::time::sleep(POLL).await;
            continue;
        };
        // The client of a node that went down is dropped for a live one.
        let same = matches!(&current, Some((held, held_client, _))
            if *held == node && held_client.server_info().port == client.server_info().port);
        if !same {
            let context = async_nats::jetstream::new(client.clone());
            // A request that reached a leader as it died is never
            // answered: ask again soon.
            let built = tokio::time::timeout(
                Duration::from_secs(2),
                context.get_consumer_from_stream::<async_nats::jetstream::consumer::pull::Config, _, _>(
                    DURABLE, STREAM,
                ),
            )
            .await;
            match built {
                Ok(Ok(pull)) => current = Some((node, client, pull)),
                _ => {
                    // Poll interval: the API is not answering here yet.
                    tokio::time::sleep(POLL).await;
                    continue;
                }
            }
        }
        let (node, _, pull) = current.as_ref().expect("built above");
        let node = *node;
        let batch = pull
            .fetch()
            .max_messages(FETCH_BATCH)
            .expires(FETCH_EXPIRES)
            .messages()
            .await;
        let Ok(mut batch) = batch else {
            current = None;
            tokio::time::sleep(POLL).await;
            continue;
        };
        loop {
            let next = tokio::time::timeout(FETCH_EXPIRES + FETCH_GRACE, batch.next()).await;
            let message = match next {
                Ok(Some(Ok(message))) => message,
                Ok(Some(Err(_))) | Ok(None) | Err(_) => break,
            };
            let sequence = match message.info() {
                Ok(info) => info.stream_sequence,
                Err(error) => {
                    return Err(format!(
                        "through n{node}: a message on the pull inbox that is no delivery ({error}): reply {:?}, headers {:?}, payload {:?}",
                        message.reply,
                        message.headers,
                        String::from_utf8_lossy(&message.payload)
                    ))
                }
            };
            let payload = String::from_utf8_lossy(&message.payload).into_owned();
            consumed.lock().await.record(sequence, payload)?;
            highest.fetch_max(sequence, Ordering::Relaxed);
            // A lost ack is redelivered after ACK_WAIT.
            let _ = message.ack().await;
        }
    }
    Ok(())
}

/// The load: publishers and the consumer, running until stopped.
struct Load {
    stop_publishing: Arc<AtomicBool>,
    stop_consuming: Arc<AtomicBool>,
    acks: Arc<AtomicU64>,
    publishers: Vec<JoinHandle<Result<Vec<Acked>, String>>>,
    consumer: Option<JoinHandle<Result<(), String>>>,
    consumed: Arc<Mutex<Consumed>>,
    highest_delivered: Arc<AtomicU64>,
}

impl Load {
    /// Publisher `i` on node `i + 1`, the consumer on the last node.
    fn start(clients: &watch::Sender<Clients>) -> Load {
        let stop_publishing = Arc::new(AtomicBool::new(false));
        let stop_consuming = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(AtomicU64::new(0));
        let publishers = (0..PUBLISHERS)
            .map(|id| {
                tokio::spawn(publisher(
                    id,
                    id % NODES + 1,
                    clients.subscribe(),
                    stop_publishing.clone(),
                    acks.clone(),
                ))
            })
            .collect();
        let consumed = Arc::new(Mutex::new(Consumed::default()));
        let highest_delivered = Arc::new(AtomicU64::new(0));
        let consumer = tokio::spawn(consumer(
            NODES,
            clients.subscribe(),
            stop_consuming.clone(),
            consumed.clone(),
            highest_delivered.clone(),
        ));
        Load {
            stop_publishing,
            stop_consuming,
            acks,
            publishers,
            consumer: Some(consumer),
            consumed,
            highest_delivered,
        }
    }

    /// Panics (with every node's log) if a task ended on its own: a
    /// publish never acknowledged, or a consumer invariant broken.
    async fn check(&mut self, cluster: &Cluster) {
        let publisher_ended = self.publishers.iter().position(JoinHandle::is_finished);
        if let Some(index) = publisher_ended {
            if !self.stop_publishing.load(Ordering::Relaxed) {
                let outcome = (&mut self.publishers[index]).await;
                panic!(
                    "publisher {index} stopped: {:?}\n{}",
                    outcome.map(|acked| acked.map(|acked| acked.len())),
                    cluster.logs()
                );
            }
        }
        if self.consumer.as_ref().is_some_and(JoinHandle::is_finished) {
            let outcome = self.consumer.take().expect("checked").await;
            panic!("the consumer stopped: {outcome:?}\n{}", cluster.logs());
        }
    }

    /// Stops publishing; every acknowledged publish.
    async fn stop_publishers(&mut self, cluster: &Cluster) -> Vec<Acked> {
        self.stop_publishing.store(true, Ordering::Relaxed);
        let mut acked = Vec::new();
        for (index, handle) in self.publishers.drain(..).enumerate() {
            match tokio::time::timeout(PUBLISH_DEADLINE + TIMEOUT, handle).await {
                Ok(Ok(Ok(mut some))) => acked.append(&mut some),
                outcome => panic!(
                    "publisher {index}: {:?}\n{}",
                    outcome.map(|joined| joined.map(|acked| acked.map(|acked| acked.len()))),
                    cluster.logs()
                ),
            }
        }
        acked
    }

    async fn stop_consumer(&mut self, cluster: &Cluster) {
        self.stop_consuming.store(true, Ordering::Relaxed);
        let handle = self.consumer.take().expect("the consumer runs");
        match tokio::time::timeout(TIMEOUT, handle).await {
            Ok(Ok(Ok(()))) => {}
            outcome => panic!("the consumer: {outcome:?}\n{}", cluster.logs()),
        }
    }
}

/// A `$JS.API` request through `client`, waiting at most `wait`; `Null`
/// when no (JSON) answer came.
async fn api_within(
    client: &async_nats::Client,
    subject: &str,
    body: &Value,
    wait: Duration,
) -> Value {
    let payload = if body.is_null() {
        bytes::Bytes::new()
    } else {
        bytes::Bytes::from(body.to_string())
    };
    match tokio::time::timeout(wait, client.request(subject.to_string(), payload)).await {
        Ok(Ok(reply)) => serde_json::from_slice(&reply.payload).unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

/// A `$JS.API` request through a live node (the one up longest first,
/// see [`oldest_first`]), retried (bounded), through the next node each
/// time, until it is answered with something else than 503 10008 / 500
/// 10009.
async fn api(
    cluster: &Cluster,
    clients: &watch::Sender<Clients>,
    subject: &str,
    body: Value,
) -> Value {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let mut attempt = 0;
    loop {
        let order = oldest_first(&clients.borrow());
        let mut answer = Value::Null;
        if !order.is_empty() {
            let node = order[attempt % order.len()];
            attempt += 1;
            let picked = pick(&clients.borrow(), node);
            let (_, client) = picked.expect("a live node's client");
            answer = api_within(&client, subject, &body, Duration::from_secs(2)).await;
            let code = answer["error"]["err_code"].as_u64();
            if !answer.is_null() && !matches!(code, Some(10008 | 10009)) {
                return answer;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{subject}: no answer within {CONVERGE_TIMEOUT:?} (last: {answer})\n{}",
            cluster.logs()
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(POLL).await;
    }
}

/// The stream's info while a leader is in office: (leader node, info).
async fn leader_info(cluster: &Cluster, clients: &watch::Sender<Clients>) -> (usize, Value) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let info = api(
            cluster,
            clients,
            &format!("$JS.API.STREAM.INFO.{STREAM}"),
            Value::Null,
        )
        .await;
        let leader = info["cluster"]["leader"].as_str().unwrap_or_default();
        let node: usize = leader.trim_start_matches('n').parse().unwrap_or(0);
        if (1..=NODES).contains(&node) && cluster.is_alive(node) {
            return (node, info);
        }
        assert!(
            Instant::now() < deadline,
            "no leader in office within {CONVERGE_TIMEOUT:?}: {info}\n{}",
            cluster.logs()
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(POLL).await;
    }
}

/// Replicas of `info` other than the leader, by node number: `current`.
fn replicas_current(info: &Value) -> BTreeMap<usize, bool> {
    info["cluster"]["replicas"]
        .as_array()
        .map(|replicas| {
            replicas
                .iter()
                .filter_map(|replica| {
                    let node = replica["name"]
                        .as_str()?
                        .trim_start_matches('n')
                        .parse()
                        .ok()?;
                    Some((node, replica["current"] == true))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (bounded) until a leader's STREAM.INFO lists both other nodes
/// as `current` replicas (active, no lag). Returns how long it took.
async fn wait_all_current(
    cluster: &Cluster,
    clients: &watch::Sender<Clients>,
    load: &mut Load,
    what: &str,
) -> Duration {
    let started = Instant::now();
    let deadline = started + CONVERGE_TIMEOUT;
    loop {
        load.check(cluster).await;
        let (leader, info) = leader_info(cluster, clients).await;
        let replicas = replicas_current(&info);
        let others: Vec<usize> = (1..=NODES).filter(|&node| node != leader).collect();
        if others.iter().all(|node| replicas.get(node) == Some(&true)) {
            return started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "{what}: replicas not all current within {CONVERGE_TIMEOUT:?}: {}\n{}",
            info["cluster"],
            cluster.logs()
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fresh client on `node` (after its start or restart).
async fn connect(cluster: &Cluster, clients: &watch::Sender<Clients>, node: usize) {
    let client = cluster.connect(node).await;
    clients.send_modify(|clients| clients[node - 1] = Some((Instant::now(), client)));
}

/// One message read back: (sequence, payload, `Nats-Msg-Id`).
type Stored = (u64, String, Option<String>);

/// Every message of the stream, by batched direct gets through `client`
/// (answered by the stream's leader). Err says what went wrong.
async fn read_stream(client: &async_nats::Client) -> Result<Vec<Stored>, String> {
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .map_err(|error| format!("subscribe: {error}"))?;
    let mut stored: BTreeMap<u64, (String, Option<String>)> = BTreeMap::new();
    let mut from = 1u64;
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        if Instant::now() >= deadline {
            return Err(format!("not read within {CONVERGE_TIMEOUT:?}; at {from}"));
        }
        let body = json!({"seq": from, "batch": READ_BATCH}).to_string();
        client
            .publish_with_reply(
                format!("$JS.API.DIRECT.GET.{STREAM}"),
                inbox.clone(),
                body.into(),
            )
            .await
            .map_err(|error| format!("direct get: {error}"))?;
        // Messages of one batch, then its end (204 with Nats-Num-Pending).
        let mut pending = None;
        loop {
            // The reply inbox may not be known at the leader's node yet:
            // a batch that gets nothing is asked again.
            let Ok(Some(message)) =
                tokio::time::timeout(Duration::from_secs(2), replies.next()).await
            else {
                break;
            };
            let header = |name: &str| {
                message
                    .headers
                    .as_ref()
                    .and_then(|headers| headers.get(name))
                    .map(|value| value.as_str().to_string())
            };
            match message.status.map(|status| status.as_u16()) {
                None | Some(200) => {
                    let sequence: u64 = header("Nats-Sequence")
                        .and_then(|text| text.parse().ok())
                        .ok_or_else(|| {
                            format!("a direct get reply without Nats-Sequence: {message:?}")
                        })?;
                    let payload = String::from_utf8_lossy(&message.payload).into_owned();
                    let msg_id = header("Nats-Msg-Id");
                    if let Some((earlier, _)) = stored.get(&sequence) {
                        if *earlier != payload {
                            return Err(format!(
                                "sequence {sequence} read as {earlier:?} and as {payload:?}"
                            ));
                        }
                    }
                    stored.insert(sequence, (payload, msg_id));
                    from = from.max(sequence + 1);
                }
                Some(204) => {
                    pending = Some(
                        header("Nats-Num-Pending")
                            .and_then(|text| text.parse::<u64>().ok())
                            .unwrap_or(0),
                    );
                    break;
                }
                Some(404) => {
                    pending = Some(0);
                    break;
                }
                // No responders: the leader was elected but has not taken
                // office yet (it subscribes once its log applied); the
                // batch is asked again.
                Some(503) => {
                    // Poll interval of a bounded wait.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    break;
                }
                Some(status) => {
                    return Err(format!(
                        "direct get from {from}: status {status} {message:?}"
                    ))
                }
            }
        }
        if pending == Some(0) {
            break;
        }
    }
    Ok(stored
        .into_iter()
        .map(|(sequence, (payload, msg_id))| (sequence, payload, msg_id))
        .collect())
}

/// The stream as read back holds exactly the acknowledged publishes: at
/// sequences `1..=last` without a gap, each payload once, at the sequence
/// its PubAck named, with its `Nats-Msg-Id`.
fn check_stream(stored: &[Stored], acked: &[Acked], perspective: &str) {
    let by_payload: BTreeMap<&str, u64> = acked
        .iter()
        .map(|acked| (acked.payload.as_str(), acked.sequence))
        .collect();
    assert_eq!(
        by_payload.len(),
        acked.len(),
        "a payload acknowledged twice"
    );
    let last = stored.last().map_or(0, |(sequence, ..)| *sequence);
    let gaps: Vec<u64> = {
        let present: BTreeSet<u64> = stored.iter().map(|(sequence, ..)| *sequence).collect();
        (1..=last)
            .filter(|sequence| !present.contains(sequence))
            .take(20)
            .collect()
    };
    assert!(
        gaps.is_empty(),
        "{perspective}: gaps in 1..={last}: {gaps:?}..."
    );
    assert_eq!(
        stored.len() as u64,
        last,
        "{perspective}: sequences 1..={last}"
    );
    let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
    for (sequence, payload, msg_id) in stored {
        if let Some(first) = seen.insert(payload.as_str(), *sequence) {
            panic!("{perspective}: {payload:?} stored twice, at {first} and {sequence}");
        }
        assert_eq!(
            msg_id.as_deref(),
            Some(payload.as_str()),
            "{perspective}: seq {sequence}: Nats-Msg-Id"
        );
        match by_payload.get(payload.as_str()) {
            Some(acked) => assert_eq!(
                acked, sequence,
                "{perspective}: {payload:?} acknowledged at {acked}, stored at {sequence}"
            ),
            None => panic!("{perspective}: {payload:?} at {sequence} was never acknowledged"),
        }
    }
    let missing: Vec<(&str, u64)> = by_payload
        .iter()
        .filter(|(payload, _)| !seen.contains_key(*payload))
        .map(|(payload, sequence)| (*payload, *sequence))
        .take(20)
        .collect();
    assert!(
        missing.is_empty(),
        "{perspective}: acknowledged and not stored (payload, acked seq): {missing:?}"
    );
}

/// Stops `node` (SIGTERM, waiting for it to exit, or SIGKILL); its client
/// is withdrawn first.
fn stop_node(cluster: &mut Cluster, clients: &watch::Sender<Clients>, node: usize, sigterm: bool) {
    clients.send_modify(|clients| clients[node - 1] = None);
    tokio::task::block_in_place(|| {
        if sigterm {
            cluster.stop(node);
        } else {
            cluster.kill(node);
        }
    });
}

/// Starts `node` again on its data, with a fresh client.
async fn restart_node(cluster: &mut Cluster, clients: &watch::Sender<Clients>, node: usize) {
    tokio::task::block_in_place(|| cluster.restart(node));
    connect(cluster, clients, node).await;
}

/// Steps the stream's leader (`leader`) down and returns the new one.
/// Re-asked while leadership stays: a stepdown hands over to the replica
/// the leader heard from recently with the most of the log, which may be
/// one that just died (still counted active until the leader's next
/// election timeout); that handover is then abandoned.
async fn step_down(cluster: &Cluster, clients: &watch::Sender<Clients>, leader: usize) -> usize {
    let stepdown = format!("$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}");
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let answer = api(cluster, clients, &stepdown, Value::Null).await;
        assert_eq!(answer["success"], true, "stepdown: {answer}");
        let ask_again = Instant::now() + STEPDOWN_RETRY;
        while Instant::now() < ask_again {
            let (now, _) = leader_info(cluster, clients).await;
            if now != leader {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "n{leader} still leads after stepdowns for {CONVERGE_TIMEOUT:?}\n{}",
                cluster.logs()
            );
            // Poll interval of a bounded wait.
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Hands the stream's leadership to `target` (bounded): a stepdown goes
/// to the most caught-up active replica, which may be the third node;
/// then the former leader is taken down while the third steps down,
/// leaving `target` the only candidate, and restarted.
async fn lead_on(
    cluster: &mut Cluster,
    clients: &watch::Sender<Clients>,
    load: &mut Load,
    target: usize,
) {
    let (leader, _) = leader_info(cluster, clients).await;
    if leader == target {
        return;
    }
    let former = leader;
    let leader = step_down(cluster, clients, leader).await;
    println!("stepdown: n{former} -> n{leader}");
    if leader == target {
        return;
    }
    let other = (1..=NODES)
        .find(|&node| node != leader && node != target)
        .expect("3 nodes");
    stop_node(cluster, clients, other, false);
    let former = leader;
    let leader = step_down(cluster, clients, leader).await;
    println!("stepdown with n{other} down: n{former} -> n{leader}");
    assert_eq!(leader, target, "the only other replica is n{target}");
    restart_node(cluster, clients, other).await;
    wait_all_current(
        cluster,
        clients,
        load,
        &format!("n{other} back after the handover to n{target}"),
    )
    .await;
}

/// A pull request through a replica that reaches no leader (the other
/// two nodes down) is answered with a 503 status, never with a JSON API
/// error: a client takes any plain message on its pull inbox for a
/// delivery (async-nats's fetch did, and the consumer above stopped on a
/// "message" without an ack subject).
async fn pull_without_leader_gets_a_status(
    cluster: &mut Cluster,
    clients: &watch::Sender<Clients>,
) {
    let alone = 1;
    for node in 2..=NODES {
        stop_node(cluster, clients, node, false);
    }
    let (_, client) = pick(&clients.borrow(), alone).expect("n1 is up");
    let subject = format!("$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{DURABLE}");
    let body = json!({"batch": 1, "expires": 500_000_000u64}).to_string();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        // A request handed to a leader's link before n1 saw it close is
        // lost: asked again.
        let outcome = common::cluster::request_within(
            &client,
            &subject,
            body.as_bytes(),
            Duration::from_secs(1),
        )
        .await;
        match outcome {
            Err(error) if error.kind() == RequestErrorKind::NoResponders => break,
            Err(error) if error.kind() == RequestErrorKind::TimedOut => {}
            Err(error) => panic!("pull through n{alone} alone: {error}"),
            Ok(reply) => panic!(
                "pull through n{alone} alone answered with a plain message: status {:?}, {:?}",
                reply.status,
                String::from_utf8_lossy(&reply.payload)
            ),
        }
        assert!(
            Instant::now() < deadline,
            "pull through n{alone} alone: no 503 within {TIMEOUT:?}\n{}",
            cluster.logs()
        );
    }
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() - 1) as f64 * fraction).round() as usize;
    sorted[index]
}

async fn leader_failover_rounds() {
    let seed = common::seed_from_env("TERN_FAILOVER_SEED", 0x5eed_fa11);
    let mut rng = Rng(seed);
    let started = Instant::now();
    let mut cluster = Cluster::meshed(Flavor::Tern, NODES, Options::jetstream()).await;
    let (clients, _) = watch::channel::<Clients>(vec![None; NODES]);
    for node in 1..=NODES {
        connect(&cluster, &clients, node).await;
    }
    let created = api(
        &cluster,
        &clients,
        &format!("$JS.API.STREAM.CREATE.{STREAM}"),
        json!({
            "name": STREAM,
            "subjects": ["failover.>"],
            "storage": "file",
            "num_replicas": 3,
            // Longer than the test: every retry of a publish dedupes.
            "duplicate_window": 120_000_000_000u64,
            "allow_direct": true,
        }),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    let consumer = api(
        &cluster,
        &clients,
        &format!("$JS.API.CONSUMER.CREATE.{STREAM}.{DURABLE}"),
        json!({"stream_name": STREAM, "config": {
            "durable_name": DURABLE,
            "ack_policy": "explicit",
            "ack_wait": ACK_WAIT.as_nanos() as u64,
        }}),
    )
    .await;
    assert!(consumer.get("error").is_none(), "{consumer}");
    let mut load = Load::start(&clients);
    // The probes are acknowledged publishes like the others.
    let mut probes: Vec<Acked> = Vec::new();
    let mut failovers: Vec<Duration> = Vec::new();
    let mut catch_ups: Vec<Duration> = Vec::new();

    for round in 0..ROUNDS {
        let sigterm = round % 2 == 0;
        let signal = if sigterm { "SIGTERM" } else { "SIGKILL" };
        // Some load on the current leader before it goes.
        let target = load.acks.load(Ordering::Relaxed)
            + rng.range(ACKS_BEFORE_STOP_MIN, ACKS_BEFORE_STOP_MAX);
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        while load.acks.load(Ordering::Relaxed) < target {
            load.check(&cluster).await;
            assert!(
                Instant::now() < deadline,
                "round {round}: publishes stalled at {} acks\n{}",
                load.acks.load(Ordering::Relaxed),
                cluster.logs()
            );
            tokio::time::sleep(POLL).await;
        }
        let (leader, _) = leader_info(&cluster, &clients).await;
        let signalled = Instant::now();
        stop_node(&mut cluster, &clients, leader, sigterm);
        let gone = signalled.elapsed();
        // Sent after the leader is gone: only a new leader can ack it.
        let probe_home = leader % NODES + 1;
        let probe = publish_until_acked(
            clients.subscribe(),
            probe_home,
            format!("probe-{round}"),
            PROBE_ATTEMPT_TIMEOUT,
        )
        .await
        .unwrap_or_else(|error| panic!("round {round}: {error}\n{}", cluster.logs()));
        let failover = signalled.elapsed();
        failovers.push(failover);
        restart_node(&mut cluster, &clients, leader).await;
        let catch_up = wait_all_current(
            &cluster,
            &clients,
            &mut load,
            &format!("round {round}: n{leader} back after {signal}"),
        )
        .await;
        catch_ups.push(catch_up);
        // The consumer resumed under the new leader: it delivered the
        // probe or something stored after it.
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        while load.highest_delivered.load(Ordering::Relaxed) < probe.sequence {
            load.check(&cluster).await;
            assert!(
                Instant::now() < deadline,
                "round {round}: the consumer did not resume after the failover (delivered up to {}, probe at {})\n{}",
                load.highest_delivered.load(Ordering::Relaxed),
                probe.sequence,
                cluster.logs()
            );
            tokio::time::sleep(POLL).await;
        }
        let resumed = signalled.elapsed();
        println!(
            "round {round:2}: {signal} n{leader} (exited after {} ms): failover {} ms (probe seq {}), n{leader} current {} ms after its restart, consumer past the probe at {} ms",
            gone.as_millis(),
            failover.as_millis(),
            probe.sequence,
            catch_up.as_millis(),
            resumed.as_millis()
        );
        probes.push(probe);
    }

    // SNAPSHOT CATCH-UP: a follower kept down while the leader applies and
    // compacts past its retained log (20 000 entries) returns through the
    // leader's snapshot, read from the live store under the same load, and
    // becomes current; the final checks read its copy as leader too.
    let (leader, _) = leader_info(&cluster, &clients).await;
    let behind = leader % NODES + 1;
    stop_node(&mut cluster, &clients, behind, false);
    let bulk_home = leader;
    let (_, client) = pick(&clients.borrow(), bulk_home).expect("a live node");
    let context = async_nats::jetstream::new(client);
    for chunk in 0..SNAPSHOT_BULK / 500 {
        let mut pending = Vec::with_capacity(500);
        for index in chunk * 500..(chunk + 1) * 500 {
            let payload = format!("bulk-{index}");
            let mut headers = HeaderMap::new();
            headers.insert("Nats-Msg-Id", payload.as_str());
            let ack = context
                .publish_with_headers(SUBJECT, headers, payload.clone().into())
                .await
                .expect("published");
            pending.push((payload, ack));
        }
        for (payload, ack) in pending {
            let ack = tokio::time::timeout(CONVERGE_TIMEOUT, ack)
                .await
                .expect("acknowledged in time")
                .unwrap_or_else(|error| panic!("{payload}: {error}\n{}", cluster.logs()));
            probes.push(Acked {
                payload,
                sequence: ack.sequence,
            });
        }
    }
    restart_node(&mut cluster, &clients, behind).await;
    let catch_up = wait_all_current(
        &cluster,
        &clients,
        &mut load,
        &format!("n{behind} back behind the compacted log"),
    )
    .await;
    assert!(
        cluster
            .node(behind)
            .log_tail()
            .contains(&format!("stream {STREAM}: installed the leader's snapshot")),
        "n{behind} caught up without the snapshot:\n{}",
        cluster.node(behind).log_tail()
    );
    println!(
        "snapshot round: n{behind} missed {SNAPSHOT_BULK} messages, current {} ms after its restart",
        catch_up.as_millis()
    );

    println!(
        "{ROUNDS} rounds done at {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut acked = load.stop_publishers(&cluster).await;
    acked.extend(probes);
    acked.sort_by_key(|acked| acked.sequence);
    let last = acked.last().map_or(0, |acked| acked.sequence);
    wait_all_current(&cluster, &clients, &mut load, "after the rounds").await;
    let (_, info) = leader_info(&cluster, &clients).await;
    assert_eq!(info["state"]["first_seq"], 1, "{info}");
    assert_eq!(info["state"]["last_seq"], last, "{info}");
    assert_eq!(info["state"]["messages"], last, "{info}");

    // The consumer got every sequence and acknowledged through the last.
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        load.check(&cluster).await;
        let contiguous = load.consumed.lock().await.contiguous;
        let consumer_info = api(
            &cluster,
            &clients,
            &format!("$JS.API.CONSUMER.INFO.{STREAM}.{DURABLE}"),
            Value::Null,
        )
        .await;
        if contiguous >= last
            && consumer_info["ack_floor"]["stream_seq"] == last
            && consumer_info["num_ack_pending"] == 0
            && consumer_info["num_pending"] == 0
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the consumer did not get through {last}: every sequence up to {contiguous} delivered; {consumer_info}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    load.stop_consumer(&cluster).await;
    let consumed = std::mem::take(&mut *load.consumed.lock().await);

    // Each node's copy, read while it leads.
    let mut stored_by_leader = BTreeMap::new();
    for node in 1..=NODES {
        lead_on(&mut cluster, &clients, &mut load, node).await;
        // Through the leader's own node: no other node's interest to wait for.
        let (_, client) = clients.borrow()[node - 1]
            .clone()
            .expect("the leader is up");
        let stored = read_stream(&client)
            .await
            .unwrap_or_else(|error| panic!("reading n{node}'s copy: {error}\n{}", cluster.logs()));
        let (after, _) = leader_info(&cluster, &clients).await;
        assert_eq!(
            after, node,
            "the leader changed while reading n{node}'s copy"
        );
        check_stream(&stored, &acked, &format!("n{node}'s copy"));
        println!(
            "n{node}'s copy checked at {:.1} s: {} messages",
            started.elapsed().as_secs_f64(),
            stored.len()
        );
        stored_by_leader.insert(node, stored);
    }
    let stored = &stored_by_leader[&1];
    for (sequence, payload) in &consumed.payloads {
        let at = stored
            .get((*sequence - 1) as usize)
            .map(|(_, payload, _)| payload);
        assert_eq!(
            at,
            Some(payload),
            "the consumer got seq {sequence} as {payload:?}"
        );
    }
    pull_without_leader_gets_a_status(&mut cluster, &clients).await;

    let mut sorted = failovers.clone();
    sorted.sort();
    println!(
        "failover over {ROUNDS} rounds: min {} ms, p50 {} ms, max {} ms; catch-up to current: p50 {} ms, max {} ms",
        sorted[0].as_millis(),
        percentile(&sorted, 0.5).as_millis(),
        sorted[sorted.len() - 1].as_millis(),
        {
            let mut catch_ups = catch_ups.clone();
            catch_ups.sort();
            percentile(&catch_ups, 0.5).as_millis()
        },
        catch_ups.iter().max().map_or(0, Duration::as_millis),
    );
    println!(
        "{} messages acknowledged ({} probes), {} deliveries ({} redeliveries), {:.1} s in all (seed {seed})",
        acked.len(),
        ROUNDS,
        consumed.deliveries,
        consumed.redeliveries,
        started.elapsed().as_secs_f64()
    );
}

tern_only!(leader_failover_rounds);
