//! Response bodies of the consumer API and the status messages consumers
//! send, with the exact bytes nats-server 2.15.1 sends.
//!
//! JSON (`<type>` is `"type":"io.nats.jetstream.api.v1.<kind>"`):
//! - consumer info (`ConsumerInfo`, `server/consumer.go`):
//!   `{<type>,"stream_name","name","created","config","delivered",
//!   "ack_floor","num_ack_pending","num_redelivered","num_waiting",
//!   "num_pending"[,"cluster"][,"push_bound":true][,"paused":true,"pause_remaining"],
//!   "ts"[,"priority_groups"]}`; `last_active` omitted until set;
//! - delete: `{<type>,"success":true}`; names: `"consumers":[…]` sorted,
//!   `[]` when empty; list: `"consumers":[<info without type>…]`.
//!   Errors: [`super::super::api::responses::error_response`].
//!
//! Status header blocks (empty payload; `processNextMsgRequest`,
//! `processWaiting`, `sendIdleHeartbeat`, `sendFlowControl`): pull 404 /
//! 408 / 409 / 100 / 400 ([`PullStatus`]) and the push idle heartbeat and
//! flow-control request ([`push_idle_heartbeat`], [`FLOW_CONTROL_REQUEST`]).

use std::fmt::Write as _;

use super::super::api::json;
use super::super::api::responses::{ClusterBlock, TYPE_PREFIX};
use super::config::ConsumerConfig;

/// CONSUMER.NAMES page size (`JSApiNamesLimit`).
pub const NAMES_LIMIT: usize = 1024;
/// CONSUMER.LIST page size (`JSApiListLimit`).
pub const LIST_LIMIT: usize = 256;

/// `delivered` / `ack_floor` of consumer info.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SequencePair {
    pub consumer_sequence: u64,
    pub stream_sequence: u64,
    /// `None`: not yet active (the field is omitted).
    pub last_active_unix_ns: Option<u64>,
}

/// A priority group's pin (ADR-42), in info's `priority_groups`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PriorityGroupState {
    pub group: String,
    /// Empty: none pinned (omitted).
    pub pinned_client_id: String,
    /// Written always (Go's `omitempty` does not omit a `time.Time`).
    pub pinned_unix_ns: u64,
}

/// What consumer info reports besides the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerInfoState {
    pub delivered: SequencePair,
    pub ack_floor: SequencePair,
    pub num_ack_pending: u64,
    pub num_redelivered: u64,
    pub num_waiting: u64,
    pub num_pending: u64,
    /// In a cluster: the `cluster` block (a consumer is led by its
    /// stream's leader: the stream's block).
    pub cluster: Option<ClusterBlock>,
    /// A push consumer with interest on its deliver subject.
    pub push_bound: bool,
    /// `Some(remaining_ns)`: paused (`"paused":true`, `pause_remaining`
    /// omitted when 0).
    pub pause_remaining_ns: Option<u64>,
    pub priority_groups: Vec<PriorityGroupState>,
}

impl ConsumerInfoState {
    /// The `priority_groups` nats-server reports for `config`: only its
    /// first group (nats-server 2.15 tracks one pin), with the current pin.
    pub fn priority_groups_of(
        config: &ConsumerConfig,
        pinned_client_id: &str,
        pinned_unix_ns: u64,
    ) -> Vec<PriorityGroupState> {
        config
            .priority_groups
            .first()
            .map(|group| PriorityGroupState {
                group: group.clone(),
                pinned_client_id: pinned_client_id.to_string(),
                pinned_unix_ns,
            })
            .into_iter()
            .collect()
    }
}

fn push_type(out: &mut String, kind: &str) {
    out.push_str("{\"type\":\"");
    out.push_str(TYPE_PREFIX);
    out.push_str(kind);
    out.push('"');
}

fn write_sequence_pair(out: &mut String, pair: &SequencePair) {
    let _ = write!(
        out,
        "{{\"consumer_seq\":{},\"stream_seq\":{}",
        pair.consumer_sequence, pair.stream_sequence
    );
    if let Some(unix_ns) = pair.last_active_unix_ns {
        out.push_str(",\"last_active\":");
        json::write_time(out, unix_ns);
    }
    out.push('}');
}

/// What one `ConsumerInfo` object says, as [`write_info_fields`] writes it.
#[derive(Clone, Copy)]
struct InfoFields<'a> {
    stream: &'a str,
    name: &'a str,
    /// `None`: left out (`/jsz` without `config=true`).
    config: Option<&'a ConsumerConfig>,
    created_unix_ns: u64,
    state: &'a ConsumerInfoState,
    /// `ts`: when the info was taken.
    now_unix_ns: u64,
    /// The config's metadata with the dynamic `_nats.*` keys (API
    /// responses), or as stored (list elements, `/jsz`).
    dynamic_metadata: bool,
}

/// Appends the fields of `ConsumerInfo` (no braces).
fn write_info_fields(out: &mut String, info: &InfoFields<'_>) {
    let InfoFields {
        stream,
        name,
        config,
        created_unix_ns,
        state,
        now_unix_ns,
        dynamic_metadata,
    } = *info;
    out.push_str("\"stream_name\":");
    json::write_string(out, stream);
    out.push_str(",\"name\":");
    json::write_string(out, name);
    out.push_str(",\"created\":");
    json::write_time(out, created_unix_ns);
    if let Some(config) = config {
        out.push_str(",\"config\":");
        config.write_json(out, dynamic_metadata);
    }
    out.push_str(",\"delivered\":");
    write_sequence_pair(out, &state.delivered);
    out.push_str(",\"ack_floor\":");
    write_sequence_pair(out, &state.ack_floor);
    let _ = write!(
        out,
        ",\"num_ack_pending\":{},\"num_redelivered\":{},\"num_waiting\":{},\"num_pending\":{}",
        state.num_ack_pending, state.num_redelivered, state.num_waiting, state.num_pending
    );
    if let Some(cluster) = &state.cluster {
        out.push_str(",\"cluster\":");
        cluster.write_json(out);
    }
    if state.push_bound {
        out.push_str(",\"push_bound\":true");
    }
    if let Some(remaining_ns) = state.pause_remaining_ns {
        out.push_str(",\"paused\":true");
        if remaining_ns != 0 {
            let _ = write!(out, ",\"pause_remaining\":{remaining_ns}");
        }
    }
    out.push_str(",\"ts\":");
    json::write_time(out, now_unix_ns);
    if !state.priority_groups.is_empty() {
        out.push_str(",\"priority_groups\":[");
        for (index, group) in state.priority_groups.iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            out.push_str("{\"group\":");
            json::write_string(out, &group.group);
            if !group.pinned_client_id.is_empty() {
                out.push_str(",\"pinned_client_id\":");
                json::write_string(out, &group.pinned_client_id);
            }
            out.push_str(",\"pinned_ts\":");
            json::write_time(out, group.pinned_unix_ns);
            out.push('}');
        }
        out.push(']');
    }
}

/// A consumer info response of `kind` (`consumer_create_response`,
/// `consumer_info_response`), config with dynamic `_nats.*` metadata.
pub fn consumer_info_response(
    kind: &str,
    stream: &str,
    name: &str,
    config: &ConsumerConfig,
    created_unix_ns: u64,
    state: &ConsumerInfoState,
    now_unix_ns: u64,
) -> String {
    let mut out = String::with_capacity(768);
    push_type(&mut out, kind);
    out.push(',');
    write_info_fields(
        &mut out,
        &InfoFields {
            stream,
            name,
            config: Some(config),
            created_unix_ns,
            state,
            now_unix_ns,
            dynamic_metadata: true,
        },
    );
    out.push('}');
    out
}

/// `consumer_create_response` (see [`consumer_info_response`]).
pub fn consumer_create_response(
    stream: &str,
    name: &str,
    config: &ConsumerConfig,
    created_unix_ns: u64,
    state: &ConsumerInfoState,
    now_unix_ns: u64,
) -> String {
    consumer_info_response(
        "consumer_create_response",
        stream,
        name,
        config,
        created_unix_ns,
        state,
        now_unix_ns,
    )
}

/// One CONSUMER.LIST element: the info object without `type`, config
/// without dynamic metadata.
pub fn consumer_info_object(
    stream: &str,
    name: &str,
    config: &ConsumerConfig,
    created_unix_ns: u64,
    state: &ConsumerInfoState,
    now_unix_ns: u64,
) -> String {
    let mut out = String::with_capacity(768);
    out.push('{');
    write_info_fields(
        &mut out,
        &InfoFields {
            stream,
            name,
            config: Some(config),
            created_unix_ns,
            state,
            now_unix_ns,
            dynamic_metadata: false,
        },
    );
    out.push('}');
    out
}

/// One `consumer_detail` element of `/jsz` (nats-server's `ConsumerInfo`
/// as `accountDetail` writes it): a CONSUMER.LIST element, its config
/// only when asked (`config=true`).
pub fn consumer_detail_object(
    stream: &str,
    name: &str,
    config: Option<&ConsumerConfig>,
    created_unix_ns: u64,
    state: &ConsumerInfoState,
    now_unix_ns: u64,
) -> String {
    let mut out = String::with_capacity(768);
    out.push('{');
    write_info_fields(
        &mut out,
        &InfoFields {
            stream,
            name,
            config,
            created_unix_ns,
            state,
            now_unix_ns,
            dynamic_metadata: false,
        },
    );
    out.push('}');
    out
}

/// `{"type":"…consumer_delete_response","success":true}`.
pub fn consumer_delete_response() -> String {
    let mut out = String::with_capacity(80);
    push_type(&mut out, "consumer_delete_response");
    out.push_str(",\"success\":true}");
    out
}

/// CONSUMER.NAMES: one page of the sorted names (`[]` when empty).
/// `offset` is clamped to `total` as nats-server reports it.
pub fn consumer_names_response(total: usize, offset: usize, names: &[String]) -> String {
    assert!(
        names.len() <= NAMES_LIMIT,
        "a page holds at most {NAMES_LIMIT} names"
    );
    let mut out = String::with_capacity(96 + names.len() * 16);
    push_type(&mut out, "consumer_names_response");
    let _ = write!(
        out,
        ",\"total\":{total},\"offset\":{},\"limit\":{NAMES_LIMIT},\"consumers\":[",
        offset.min(total)
    );
    for (index, name) in names.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        json::write_string(&mut out, name);
    }
    out.push_str("]}");
    out
}

/// The page `[offset, offset + limit)` of `names` sorted, as NAMES and
/// LIST take it.
pub fn page_of(mut names: Vec<String>, offset: usize, limit: usize) -> Vec<String> {
    names.sort_unstable();
    names.into_iter().skip(offset).take(limit).collect()
}

/// CONSUMER.LIST: `infos` are [`consumer_info_object`]s (`[]` when none).
pub fn consumer_list_response(total: usize, offset: usize, infos: &[String]) -> String {
    assert!(
        infos.len() <= LIST_LIMIT,
        "a page holds at most {LIST_LIMIT} consumers"
    );
    let capacity = 96 + infos.iter().map(|info| info.len() + 1).sum::<usize>();
    let mut out = String::with_capacity(capacity);
    push_type(&mut out, "consumer_list_response");
    let _ = write!(
        out,
        ",\"total\":{total},\"offset\":{},\"limit\":{LIST_LIMIT},\"consumers\":[",
        offset.min(total)
    );
    for (index, info) in infos.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        out.push_str(info);
    }
    out.push_str("]}");
    out
}

// ---------------------------------------------------------------------------
// Status header blocks.

/// `Nats-Pending-Messages` (pull statuses).
pub const PENDING_MESSAGES_HEADER: &str = "Nats-Pending-Messages";
/// `Nats-Pending-Bytes` (pull statuses).
pub const PENDING_BYTES_HEADER: &str = "Nats-Pending-Bytes";
/// `Nats-Last-Consumer` (heartbeats).
pub const LAST_CONSUMER_HEADER: &str = "Nats-Last-Consumer";
/// `Nats-Last-Stream` (heartbeats).
pub const LAST_STREAM_HEADER: &str = "Nats-Last-Stream";
/// `Nats-Consumer-Stalled` (push heartbeats while a flow-control request
/// is unanswered).
pub const CONSUMER_STALLED_HEADER: &str = "Nats-Consumer-Stalled";
/// The flow-control request sent to a push consumer's deliver subject,
/// with reply `$JS.FC.<stream>.<consumer>.<4 random chars>`.
pub const FLOW_CONTROL_REQUEST: &str = "NATS/1.0 100 FlowControl Request\r\n\r\n";

/// A status message sent to a pull request's reply subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullStatus {
    /// 404: `no_wait` and nothing (more) to deliver.
    NoMessages,
    /// 408: `expires` elapsed; what is left of the batch and max_bytes.
    RequestTimeout {
        pending_messages: i64,
        pending_bytes: i64,
    },
    /// 408: `no_wait` while other requests already cover what is pending.
    RequestsPending,
    /// 100: idle heartbeat, last delivered consumer and stream sequence.
    IdleHeartbeat {
        last_consumer_sequence: u64,
        last_stream_sequence: u64,
    },
    /// 400 `Bad Request - <text>` (bad JSON, heartbeat rules, priority).
    BadRequest(String),
    /// 409: the wait queue is full (not sent to requests with heartbeats).
    ExceededMaxWaiting,
    /// 409: the request's batch is above the consumer's `max_batch`.
    ExceededMaxRequestBatch(i64),
    /// 409: `expires` above the consumer's `max_expires` (nanoseconds).
    ExceededMaxRequestExpires(i64),
    /// 409: `max_bytes` above the consumer's `max_bytes`.
    ExceededMaxRequestMaxBytes(i64),
    /// 409: the next message is bigger than what is left of `max_bytes`.
    MessageSizeExceedsMaxBytes {
        pending_messages: i64,
        pending_bytes: i64,
    },
    /// 409: the batch is full while `max_bytes` remain.
    BatchCompleted { pending_bytes: i64 },
    /// 409: the consumer was deleted with the request pending.
    ConsumerDeleted,
    /// 409: MSG.NEXT on a push consumer.
    ConsumerIsPushBased,
    /// 409: server shutting down with the request pending.
    ServerShutdown {
        pending_messages: i64,
        pending_bytes: i64,
    },
    /// 412: the request's `Nats-Required-Api-Level` is above the server's.
    RequiredApiLevel,
    /// 423: the request's pin id is not the current one.
    PinIdMismatch,
}

impl PullStatus {
    /// The header block, byte for byte as nats-server sends it.
    pub fn header_block(&self) -> String {
        let pending = |status: &str, messages: i64, bytes: i64| {
            format!(
                "NATS/1.0 {status}\r\n{PENDING_MESSAGES_HEADER}: {messages}\r\n{PENDING_BYTES_HEADER}: {bytes}\r\n\r\n"
            )
        };
        let simple = |status: &str| format!("NATS/1.0 {status}\r\n\r\n");
        match self {
            PullStatus::NoMessages => simple("404 No Messages"),
            PullStatus::RequestTimeout {
                pending_messages,
                pending_bytes,
            } => pending("408 Request Timeout", *pending_messages, *pending_bytes),
            PullStatus::RequestsPending => simple("408 Requests Pending"),
            PullStatus::IdleHeartbeat {
                last_consumer_sequence,
                last_stream_sequence,
            } => idle_heartbeat(*last_consumer_sequence, *last_stream_sequence, None),
            PullStatus::BadRequest(text) => simple(&format!("400 Bad Request - {text}")),
            PullStatus::ExceededMaxWaiting => simple("409 Exceeded MaxWaiting"),
            PullStatus::ExceededMaxRequestBatch(limit) => {
                simple(&format!("409 Exceeded MaxRequestBatch of {limit}"))
            }
            PullStatus::ExceededMaxRequestExpires(limit_ns) => simple(&format!(
                "409 Exceeded MaxRequestExpires of {}",
                super::error::go_duration_text(*limit_ns)
            )),
            PullStatus::ExceededMaxRequestMaxBytes(limit) => {
                simple(&format!("409 Exceeded MaxRequestMaxBytes of {limit}"))
            }
            PullStatus::MessageSizeExceedsMaxBytes {
                pending_messages,
                pending_bytes,
            } => pending(
                "409 Message Size Exceeds MaxBytes",
                *pending_messages,
                *pending_bytes,
            ),
            PullStatus::BatchCompleted { pending_bytes } => {
                pending("409 Batch Completed", 0, *pending_bytes)
            }
            PullStatus::ConsumerDeleted => simple("409 Consumer Deleted"),
            PullStatus::ConsumerIsPushBased => simple("409 Consumer is push based"),
            PullStatus::ServerShutdown {
                pending_messages,
                pending_bytes,
            } => pending("409 Server Shutdown", *pending_messages, *pending_bytes),
            PullStatus::RequiredApiLevel => simple("412 Required Api Level"),
            PullStatus::PinIdMismatch => simple("423 Nats-Pin-Id mismatch"),
        }
    }
}

fn idle_heartbeat(
    last_consumer_sequence: u64,
    last_stream_sequence: u64,
    stalled_reply: Option<&str>,
) -> String {
    let mut out = format!(
        "NATS/1.0 100 Idle Heartbeat\r\n{LAST_CONSUMER_HEADER}: {last_consumer_sequence}\r\n{LAST_STREAM_HEADER}: {last_stream_sequence}\r\n"
    );
    if let Some(reply) = stalled_reply {
        let _ = write!(out, "{CONSUMER_STALLED_HEADER}: {reply}\r\n");
    }
    out.push_str("\r\n");
    out
}

/// A push consumer's idle heartbeat; with `stalled_reply` (the reply
/// subject of an unanswered flow-control request) it also carries
/// `Nats-Consumer-Stalled`.
pub fn push_idle_heartbeat(
    last_consumer_sequence: u64,
    last_stream_sequence: u64,
    stalled_reply: Option<&str>,
) -> String {
    idle_heartbeat(last_consumer_sequence, last_stream_sequence, stalled_reply)
}

/// The reply subject of a flow-control request:
/// `$JS.FC.<stream>.<consumer>.<4 chars>` (`random_bits` picks the chars
/// from the generated-name alphabet).
pub fn flow_control_reply(stream: &str, consumer: &str, random_bits: u32) -> String {
    let suffix: String = random_bits
        .to_le_bytes()
        .iter()
        .map(|byte| char::from(super::config::EPHEMERAL_NAME_ALPHABET[usize::from(*byte) % 62]))
        .collect();
    format!("$JS.FC.{stream}.{consumer}.{suffix}")
}

#[cfg(test)]
#[path = "responses_tests.rs"]
mod tests;
