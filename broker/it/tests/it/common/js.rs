//! JetStream helpers for the stream tests (`jetstream_api.rs`,
//! `jetstream_publish.rs`, `jetstream_restart.rs`): raw `$JS.API` requests
//! answered as JSON, normalisation of volatile fields, the normalised default
//! stream configuration of nats-server 2.15.1, publishing with headers, and
//! bounded waits on a stream's state.
//!
//! JSON responses are compared structurally (`serde_json::Value`) after
//! [`normalize`] has replaced the fields that differ from run to run
//! (timestamps, `_nats.ver`, the server name in `cluster.leader`). PubAcks and
//! error texts are compared exactly by the tests themselves.

use std::time::{Duration, Instant};

use async_nats::{HeaderMap, Message, RequestErrorKind};
use serde_json::{json, Value};

use super::{Flavor, Options, Server, Target, TIMEOUT};

/// nats-server's zero `time.Time`, used for `first_ts`/`last_ts` of empty streams.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";
/// What [`normalize`] puts in place of the zero time.
pub const ZERO: &str = "<zero>";
/// What [`normalize`] puts in place of any other time stamp.
pub const TIME: &str = "<time>";
/// What [`normalize`] puts in place of the server name in `cluster.leader`.
pub const SERVER_NAME: &str = "<server>";
/// What [`normalize`] puts in place of the cluster's name in `cluster.name`.
pub const CLUSTER_NAME: &str = "<cluster>";
/// What [`normalize`] puts in place of each of `cluster.replicas`.
pub const REPLICA: &str = "<replica>";
/// The default `duplicate_window`: two minutes in nanoseconds.
pub const DEFAULT_DUPLICATE_WINDOW_NS: u64 = 120_000_000_000;

/// The JetStream server of a client-level test, JetStream enabled and
/// everything else default: one server, or a cluster in a `*_cluster`
/// variant ([`super::target`]).
pub fn start(flavor: Flavor) -> Target {
    Target::start(flavor, Options::jetstream())
}

/// One JetStream server process, whatever the variant (for the tests of
/// what only one process has: restarts of it, its files).
pub fn server(flavor: Flavor) -> Server {
    Server::start(flavor, Options::jetstream())
}

/// The reply to a core request, or a panic that says why there was none.
/// No responders on a `$JS.API` subject means the server has no JetStream
/// API (not implemented, or disabled).
pub async fn request_message(
    client: &async_nats::Client,
    subject: &str,
    headers: Option<HeaderMap>,
    body: &[u8],
) -> Message {
    let payload = bytes::Bytes::copy_from_slice(body);
    let outcome = match headers {
        Some(headers) => {
            tokio::time::timeout(
                TIMEOUT,
                client.request_with_headers(subject.to_string(), headers, payload),
            )
            .await
        }
        None => tokio::time::timeout(TIMEOUT, client.request(subject.to_string(), payload)).await,
    };
    match outcome {
        Ok(Ok(message)) => message,
        Ok(Err(error)) if error.kind() == RequestErrorKind::NoResponders => panic!(
            "no responders for {subject} (is JetStream implemented and enabled?); body {:?}",
            String::from_utf8_lossy(body)
        ),
        Ok(Err(error)) => panic!("request to {subject} failed: {error}"),
        Err(_) => panic!(
            "no reply to {subject} within {TIMEOUT:?}; body {:?}",
            String::from_utf8_lossy(body)
        ),
    }
}

/// A `$JS.API` request whose reply is parsed as JSON (not normalised).
pub async fn api(client: &async_nats::Client, subject: &str, body: &str) -> Value {
    let message = request_message(client, subject, None, body.as_bytes()).await;
    parse_json(subject, &message.payload)
}

/// Like [`api`], panicking if the response carries an `error`.
pub async fn api_ok(client: &async_nats::Client, subject: &str, body: &str) -> Value {
    let value = api(client, subject, body).await;
    assert!(
        value.get("error").is_none(),
        "{subject} {body} failed: {value}"
    );
    value
}

pub fn parse_json(what: &str, payload: &[u8]) -> Value {
    serde_json::from_slice(payload).unwrap_or_else(|error| {
        panic!(
            "{what}: reply is not JSON ({error}): {:?}",
            String::from_utf8_lossy(payload)
        )
    })
}

/// The full error response nats-server sends for a failed API call of kind
/// `kind` (the `type` suffix): type plus error object only.
pub fn api_error(kind: &str, code: u16, err_code: u32, description: &str) -> Value {
    json!({
        "type": format!("io.nats.jetstream.api.v1.{kind}"),
        "error": {"code": code, "err_code": err_code, "description": description},
    })
}

/// Creates a stream from a raw StreamConfig JSON, panicking on an error.
pub async fn create(client: &async_nats::Client, config: Value) -> Value {
    let name = config["name"]
        .as_str()
        .expect("config has a name")
        .to_string();
    api_ok(
        client,
        &format!("$JS.API.STREAM.CREATE.{name}"),
        &config.to_string(),
    )
    .await
}

/// `$JS.API.STREAM.INFO.<stream>` with `body`, normalised.
pub async fn info_with(client: &async_nats::Client, stream: &str, body: &str) -> Value {
    normalize(api_ok(client, &format!("$JS.API.STREAM.INFO.{stream}"), body).await)
}

/// The normalised `state` of a stream (STREAM.INFO with an empty body).
pub async fn state(client: &async_nats::Client, stream: &str) -> Value {
    info_with(client, stream, "").await["state"].clone()
}

/// The normalised `state` with `subjects_filter: ">"` and `deleted_details`.
pub async fn state_detailed(client: &async_nats::Client, stream: &str) -> Value {
    info_with(
        client,
        stream,
        r#"{"subjects_filter":">","deleted_details":true}"#,
    )
    .await["state"]
        .clone()
}

/// Polls a stream's normalised state until `condition` holds (bounded).
/// For changes the server makes on its own (ingest of a message published
/// without a reply, `max_age` expiry).
pub async fn wait_state(
    client: &async_nats::Client,
    stream: &str,
    what: &str,
    mut condition: impl FnMut(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let state = state(client, stream).await;
        if condition(&state) {
            return state;
        }
        if Instant::now() >= deadline {
            panic!("stream {stream}: timed out after {TIMEOUT:?} waiting for {what}; last state {state:#}");
        }
        // Poll interval of a bounded wait, not synchronisation.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `$JS.API.INFO` until `condition` holds (bounded by [`TIMEOUT`]).
pub async fn wait_account_info(
    client: &async_nats::Client,
    what: &str,
    mut condition: impl FnMut(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let info = api(client, "$JS.API.INFO", "").await;
        if condition(&info) {
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "account info: no {what} within {TIMEOUT:?}; last {info}"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Replaces volatile values, recursively: `created`, `ts`, `time` and every
/// `*_ts` become [`ZERO`] (Go's zero time) or [`TIME`] (any other RFC 3339
/// UTC time stamp, checked for shape); `metadata._nats.ver` is removed;
/// a `cluster` block is normalised as [`normalize_cluster`] says.
pub fn normalize(mut value: Value) -> Value {
    normalize_in_place(&mut value);
    value
}

fn normalize_in_place(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                let volatile_time =
                    key == "created" || key == "ts" || key == "time" || key.ends_with("_ts");
                if volatile_time {
                    if let Value::String(text) = field {
                        *field = Value::String(time_placeholder(text).to_string());
                        continue;
                    }
                }
                if key == "metadata" {
                    if let Value::Object(metadata) = field {
                        metadata.remove("_nats.ver");
                    }
                }
                if key == "cluster" {
                    normalize_cluster(field);
                    continue;
                }
                normalize_in_place(field);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_in_place),
        _ => {}
    }
}

/// A `cluster` block (stream, consumer): `leader` becomes [`SERVER_NAME`],
/// `name` (the cluster's) [`CLUSTER_NAME`], each of `replicas` (checked to
/// be named) [`REPLICA`]; the fields only nats-server writes
/// (`raft_group`, `leader_since`, `system_account`, `traffic_account`)
/// go. One server's block is `{"leader": …}`; see [`cluster_block`].
fn normalize_cluster(block: &mut Value) {
    let Value::Object(map) = block else { return };
    map.retain(|key, _| {
        ![
            "raft_group",
            "leader_since",
            "system_account",
            "traffic_account",
        ]
        .contains(&key.as_str())
    });
    if let Some(leader) = map.get_mut("leader") {
        *leader = Value::String(SERVER_NAME.to_string());
    }
    if let Some(name) = map.get_mut("name") {
        *name = Value::String(CLUSTER_NAME.to_string());
    }
    if let Some(Value::Array(replicas)) = map.get_mut("replicas") {
        for replica in replicas.iter_mut() {
            assert!(
                replica["name"]
                    .as_str()
                    .is_some_and(|name| !name.is_empty()),
                "a replica without a name: {replica}"
            );
            *replica = Value::String(REPLICA.to_string());
        }
    }
}

/// The normalised `cluster` block of a stream with the default replicas
/// (or of one of its consumers), as STREAM.INFO shows it: one server's
/// `{"leader": …}`, or a cluster's name, leader and the other replicas.
pub fn cluster_block() -> Value {
    if super::target::clustered() {
        let replicas = super::target::default_replicas() as usize - 1;
        json!({
            "name": CLUSTER_NAME,
            "leader": SERVER_NAME,
            "replicas": vec![REPLICA; replicas],
        })
    } else {
        json!({"leader": SERVER_NAME})
    }
}

/// `answer` with the `cluster` block a cluster adds where one server has
/// none (the answers to a stream create or update, each STREAM.LIST
/// element: nats-server's and tern's alike); unchanged on one server.
pub fn with_cluster_block(mut answer: Value) -> Value {
    if super::target::clustered() {
        answer["cluster"] = cluster_block();
    }
    answer
}

fn time_placeholder(text: &str) -> &'static str {
    if text == ZERO_TIME {
        return ZERO;
    }
    assert!(
        text.len() >= 20
            && text.ends_with('Z')
            && text.as_bytes()[4] == b'-'
            && text.as_bytes()[10] == b'T',
        "not an RFC 3339 UTC time stamp: {text:?}"
    );
    TIME
}

/// The normalised config nats-server 2.15.1 echoes for `{"name":name,
/// "subjects":subjects}` in create/update/info responses (LIST omits
/// `_nats.level`, see [`list_config`]); `num_replicas` is
/// [`super::target::default_replicas`] (3 in a cluster variant, whose
/// client proxy asks for it).
pub fn default_config(name: &str, subjects: &[&str]) -> Value {
    json!({
        "name": name,
        "subjects": subjects,
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msgs_per_subject": -1,
        "max_msg_size": -1,
        "discard": "old",
        "storage": "file",
        "num_replicas": super::target::default_replicas(),
        "duplicate_window": DEFAULT_DUPLICATE_WINDOW_NS,
        "compression": "none",
        "allow_direct": false,
        "mirror_direct": false,
        "sealed": false,
        "deny_delete": false,
        "deny_purge": false,
        "allow_rollup_hdrs": false,
        "consumer_limits": {},
        "allow_msg_ttl": false,
        "metadata": {"_nats.level": "5", "_nats.req.level": "0"},
    })
}

/// [`default_config`] with the top-level keys of `overrides` replaced or added.
pub fn config_with(name: &str, subjects: &[&str], overrides: Value) -> Value {
    let mut config = default_config(name, subjects);
    merge(&mut config, overrides);
    config
}

/// A config as STREAM.LIST shows it: metadata without the dynamic `_nats.level`.
pub fn list_config(mut config: Value) -> Value {
    config["metadata"]
        .as_object_mut()
        .expect("metadata")
        .remove("_nats.level");
    config
}

/// Replaces or adds the top-level keys of `overrides` in `target`.
pub fn merge(target: &mut Value, overrides: Value) {
    let target = target.as_object_mut().expect("merge into an object");
    for (key, value) in overrides.as_object().expect("overrides object") {
        target.insert(key.clone(), value.clone());
    }
}

/// The state of a stream that never held a message.
pub fn empty_state() -> Value {
    json!({
        "messages": 0, "bytes": 0,
        "first_seq": 0, "first_ts": ZERO,
        "last_seq": 0, "last_ts": ZERO,
        "consumer_count": 0,
    })
}

/// A state object; `extra` adds keys such as `num_subjects`, `num_deleted`,
/// `subjects`, `deleted`. Time stamps are [`TIME`] when the stream holds
/// messages; an empty stream has `first_ts` zero and `last_ts` set if any
/// message was ever stored (`last_seq > 0`).
pub fn state_of(messages: u64, bytes: u64, first_seq: u64, last_seq: u64, extra: Value) -> Value {
    let first_ts = if messages == 0 { ZERO } else { TIME };
    let last_ts = if last_seq == 0 { ZERO } else { TIME };
    let mut state = json!({
        "messages": messages, "bytes": bytes,
        "first_seq": first_seq, "first_ts": first_ts,
        "last_seq": last_seq, "last_ts": last_ts,
        "consumer_count": 0,
    });
    merge(&mut state, extra);
    state
}

/// Bytes one message accounts for in a file-store stream: `30 + subject +
/// payload`, or `34 + subject + headers + payload` with headers (nats-server
/// `fileStoreMsgSize`; the header block counts whole, `NATS/1.0\r\n...\r\n\r\n`).
pub fn file_record_bytes(subject: &str, header_bytes: usize, payload_bytes: usize) -> u64 {
    let overhead = if header_bytes == 0 { 30 } else { 34 };
    (overhead + subject.len() + header_bytes + payload_bytes) as u64
}

/// Bytes one message accounts for in a memory-store stream: `16 + subject +
/// headers + payload` (nats-server `memStoreMsgSize`).
pub fn memory_record_bytes(subject: &str, header_bytes: usize, payload_bytes: usize) -> u64 {
    (16 + subject.len() + header_bytes + payload_bytes) as u64
}

/// Headers from `(name, value)` pairs.
pub fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, *value);
    }
    map
}

/// The wire size of the header block async-nats sends for `pairs` (one
/// value each): `NATS/1.0\r\n` + `Name: value\r\n`... + `\r\n`.
pub fn header_block_len(pairs: &[(&str, &str)]) -> usize {
    if pairs.is_empty() {
        return 0;
    }
    "NATS/1.0\r\n".len()
        + pairs
            .iter()
            .map(|(name, value)| name.len() + 2 + value.len() + 2)
            .sum::<usize>()
        + 2
}

/// Publishes `payload` to `subject` as a request (headers if any) and returns
/// the reply: a PubAck for a subject a stream stores.
pub async fn publish_request(
    client: &async_nats::Client,
    subject: &str,
    header_pairs: &[(&str, &str)],
    payload: &str,
) -> Message {
    let headers = (!header_pairs.is_empty()).then(|| headers(header_pairs));
    request_message(client, subject, headers, payload.as_bytes()).await
}

/// Publishes and asserts the PubAck's bytes are exactly `expected`.
pub async fn expect_puback(
    client: &async_nats::Client,
    subject: &str,
    header_pairs: &[(&str, &str)],
    payload: &str,
    expected: &str,
) {
    let reply = publish_request(client, subject, header_pairs, payload).await;
    assert!(
        reply.status.is_none(),
        "publish to {subject} {header_pairs:?}: PubAck with status {:?} {:?}",
        reply.status,
        reply.description
    );
    assert_eq!(
        String::from_utf8_lossy(&reply.payload),
        expected,
        "PubAck for publish to {subject} with headers {header_pairs:?}"
    );
}

/// Publishes one message (payload `v`) to each subject in order, each
/// awaited and checked to be a successful PubAck.
pub async fn publish_all(client: &async_nats::Client, subjects: &[&str]) {
    for subject in subjects {
        let reply = publish_request(client, subject, &[], "v").await;
        let ack = parse_json("PubAck", &reply.payload);
        assert!(
            ack.get("error").is_none() && ack["seq"].as_u64().is_some(),
            "publish to {subject}: {ack}"
        );
    }
}

/// Standard base64 with padding (what nats-server uses for `hdrs`/`data`).
pub fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let bytes = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let word = (u32::from(bytes[0]) << 16) | (u32::from(bytes[1]) << 8) | u32::from(bytes[2]);
        for index in 0..4 {
            if index <= chunk.len() {
                out.push(ALPHABET[((word >> (18 - 6 * index)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A request that must get no reply at all within `period` (neither a reply
/// nor a no-responders status): the server has a responder that stays silent.
pub async fn expect_silent_request(
    client: &async_nats::Client,
    subject: &str,
    body: &str,
    period: Duration,
) {
    match tokio::time::timeout(
        period,
        client.request(subject.to_string(), body.to_string().into()),
    )
    .await
    {
        Err(_) => {}
        Ok(Ok(message)) => panic!(
            "{subject}: expected no reply within {period:?}, got {:?} (status {:?})",
            String::from_utf8_lossy(&message.payload),
            message.status
        ),
        Ok(Err(error)) => panic!(
            "{subject}: expected a silent responder, got {error} ({:?})",
            error.kind()
        ),
    }
}

/// A request that must be answered with no-responders (503): nobody
/// subscribes to `subject`.
pub async fn expect_no_responders(client: &async_nats::Client, subject: &str, body: &str) {
    match tokio::time::timeout(
        TIMEOUT,
        client.request(subject.to_string(), body.to_string().into()),
    )
    .await
    {
        Ok(Err(error)) if error.kind() == RequestErrorKind::NoResponders => {}
        Ok(Ok(message)) => panic!(
            "{subject}: expected no responders, got {:?} (status {:?})",
            String::from_utf8_lossy(&message.payload),
            message.status
        ),
        Ok(Err(error)) => panic!("{subject}: expected no responders, got {error}"),
        Err(_) => panic!("{subject}: expected no responders, got no reply within {TIMEOUT:?}"),
    }
}

/// Up to `count` messages from one pull request of `consumer`, waiting at
/// most `expires` for them.
pub async fn fetch(
    consumer: &async_nats::jetstream::consumer::PullConsumer,
    count: usize,
    expires: Duration,
) -> Vec<async_nats::jetstream::Message> {
    use futures::StreamExt;
    let mut batch = consumer
        .fetch()
        .max_messages(count)
        .expires(expires)
        .messages()
        .await
        .expect("fetch");
    let mut messages = Vec::new();
    while let Some(message) = batch.next().await {
        messages.push(message.expect("message"));
    }
    messages
}

/// Exactly one message from `consumer` within [`TIMEOUT`].
pub async fn fetch_one(
    consumer: &async_nats::jetstream::consumer::PullConsumer,
) -> async_nats::jetstream::Message {
    fetch(consumer, 1, TIMEOUT)
        .await
        .pop()
        .expect("one message fetched")
}

/// One publish as a request, bounded by [`TIMEOUT`]: the PubAck as JSON and
/// as the bytes received (for exact comparison).
pub async fn pub_ack(
    client: &async_nats::Client,
    subject: &str,
    payload: bytes::Bytes,
) -> (Value, String) {
    let reply = tokio::time::timeout(TIMEOUT, client.request(subject.to_string(), payload))
        .await
        .unwrap_or_else(|_| panic!("publish to {subject}: no PubAck within {TIMEOUT:?}"))
        .expect("request");
    let text = String::from_utf8(reply.payload.to_vec()).expect("UTF-8 PubAck");
    (parse_json("PubAck", &reply.payload), text)
}

/// Publishes `payload` to `subject` until a PubAck comes back without an
/// error (a limit or a full disk cleared: the server looks again within its
/// recheck interval), polling every 20 ms up to [`TIMEOUT`]; returns it.
pub async fn publish_until_accepted(
    client: &async_nats::Client,
    subject: &str,
    payload: bytes::Bytes,
    what: &str,
) -> Value {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let (ack, _) = pub_ack(client, subject, payload.clone()).await;
        if ack.get("error").is_none() {
            return ack;
        }
        assert!(Instant::now() < deadline, "{what}: still refused: {ack}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Publishes `payload` to `subject` one message at a time until a PubAck
/// carries an error, at most `attempts_max` times; returns how many were
/// acked and the refusal's bytes (for exact comparison).
pub async fn publish_until_refused(
    client: &async_nats::Client,
    subject: &str,
    payload: bytes::Bytes,
    attempts_max: u64,
) -> (u64, String) {
    for attempt in 0..attempts_max {
        let (ack, text) = pub_ack(client, subject, payload.clone()).await;
        if ack.get("error").is_some() {
            return (attempt, text);
        }
    }
    panic!("{attempts_max} publishes to {subject} were all accepted");
}

/// The streams `/jsz?streams=true` lists (nats-server's layout, tern's
/// too): each account's `stream_detail`, in the order given.
pub fn jsz_streams(jsz: &Value) -> Vec<Value> {
    jsz["account_details"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|account| account["stream_detail"].as_array().into_iter().flatten())
        .cloned()
        .collect()
}
