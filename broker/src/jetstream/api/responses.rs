//! Response bodies of the stream API and PubAcks, built as strings with the
//! exact bytes nats-server 2.15.1 sends: its field order (Go struct order,
//! embedded structs first), its omit rules and escaping ([`json::write_string`]).
//!
//! Shapes (`<type>` is `"type":"io.nats.jetstream.api.v1.<kind>"`):
//! - stream info: `{<type>[,"total","offset","limit"],"config","created",
//!   "state"[,"cluster"],"ts"[,"did_create":true]}`;
//! - errors: `{<type>,"error":{…}}` plus what the kind's Go response struct
//!   always writes (`"purged":0`, paging with `"streams":null`, …);
//! - PubAck: `{"stream":"S"[,"domain":"D"],"seq":N[,"duplicate": true]}`,
//!   built by concatenation as nats-server does (note the space).

use std::fmt::Write as _;

use super::super::persist::StreamFilesError;
use super::super::stream::config::{StreamConfig, API_LEVEL};
use super::error::ApiError;
use super::json;

/// `"type"` prefix of every API response.
pub const TYPE_PREFIX: &str = "io.nats.jetstream.api.v1.";

/// STREAM.INFO paging limit for `subjects_filter` (nats-server's
/// `JSMaxSubjectDetails`).
pub const SUBJECT_DETAILS_LIMIT: usize = 100_000;

/// A stream's state as STREAM.INFO reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamState {
    pub messages: u64,
    pub bytes: u64,
    /// After a purge of everything: `last_sequence + 1`.
    pub first_sequence: u64,
    /// 0: none (written as Go's zero time).
    pub first_unix_ns: u64,
    pub last_sequence: u64,
    pub last_unix_ns: u64,
    /// Omitted when 0.
    pub num_subjects: u64,
    /// Per-subject counts (only with `subjects_filter`); written sorted by
    /// subject as a JSON object, omitted when `None` or empty.
    pub subjects: Option<Vec<(String, u64)>>,
    /// Interior gaps; omitted when 0.
    pub num_deleted: u64,
    /// Only with `deleted_details`; omitted when `None` or empty.
    pub deleted: Option<Vec<u64>>,
    pub consumer_count: u64,
}

/// Appends the `state` object.
pub fn write_state(out: &mut String, state: &StreamState) {
    let _ = write!(
        out,
        "{{\"messages\":{},\"bytes\":{},\"first_seq\":{},\"first_ts\":",
        state.messages, state.bytes, state.first_sequence
    );
    json::write_time(out, state.first_unix_ns);
    let _ = write!(out, ",\"last_seq\":{},\"last_ts\":", state.last_sequence);
    json::write_time(out, state.last_unix_ns);
    if state.num_subjects != 0 {
        let _ = write!(out, ",\"num_subjects\":{}", state.num_subjects);
    }
    if let Some(subjects) = state
        .subjects
        .as_ref()
        .filter(|subjects| !subjects.is_empty())
    {
        // Go writes maps with sorted keys.
        let mut sorted: Vec<&(String, u64)> = subjects.iter().collect();
        sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out.push_str(",\"subjects\":{");
        for (index, (subject, count)) in sorted.into_iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            json::write_string(out, subject);
            let _ = write!(out, ":{count}");
        }
        out.push('}');
    }
    if state.num_deleted != 0 {
        let _ = write!(out, ",\"num_deleted\":{}", state.num_deleted);
    }
    if let Some(deleted) = state.deleted.as_ref().filter(|deleted| !deleted.is_empty()) {
        out.push_str(",\"deleted\":[");
        for (index, sequence) in deleted.iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            let _ = write!(out, "{sequence}");
        }
        out.push(']');
    }
    let _ = write!(out, ",\"consumer_count\":{}}}", state.consumer_count);
}

/// What varies between the stream info responses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InfoExtras {
    /// STREAM.CREATE adds `"did_create":true` (also for an identical
    /// existing stream).
    pub did_create: bool,
    /// STREAM.INFO adds `"cluster":{…}`: the leader alone on one server;
    /// in a cluster also its name and the other replicas.
    pub cluster: Option<ClusterBlock>,
    /// STREAM.INFO's `(total, offset, limit)`; `None` for create/update.
    /// nats-server reports `(0, 0, 0)` unless `subjects_filter` matched
    /// something; a zero total is written that way whatever is passed.
    pub paging: Option<(usize, usize, usize)>,
    /// Add `_nats.level`/`_nats.ver` to the config's metadata.
    pub dynamic_metadata: bool,
}

/// A stream's (or consumer's) `cluster` block, nats-server's `ClusterInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterBlock {
    /// The cluster's name (absent on one server).
    pub name: Option<String>,
    /// The leader's server name (absent while there is none).
    pub leader: Option<String>,
    /// The other replicas (absent for one).
    pub replicas: Vec<ReplicaBlock>,
}

/// One replica besides the leader, nats-server's `PeerInfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaBlock {
    pub name: String,
    /// It has everything the leader committed (lag 0) and was heard from
    /// recently.
    pub current: bool,
    /// Nanoseconds since the leader last heard from it.
    pub active_ns: u64,
    /// Entries behind the leader's log.
    pub lag: u64,
    /// No route reaches it.
    pub offline: bool,
    /// Its Raft id in hex (nats-server: the hash of its name).
    pub peer: String,
}

impl ClusterBlock {
    pub fn write_json(&self, out: &mut String) {
        out.push('{');
        let mut first = true;
        let mut comma = |out: &mut String| {
            if !std::mem::replace(&mut first, false) {
                out.push(',');
            }
        };
        if let Some(name) = &self.name {
            comma(out);
            out.push_str("\"name\":");
            json::write_string(out, name);
        }
        if let Some(leader) = &self.leader {
            comma(out);
            out.push_str("\"leader\":");
            json::write_string(out, leader);
        }
        if !self.replicas.is_empty() {
            comma(out);
            out.push_str("\"replicas\":[");
            for (index, replica) in self.replicas.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str("{\"name\":");
                json::write_string(out, &replica.name);
                let _ = write!(
                    out,
                    ",\"current\":{},\"active\":{}",
                    replica.current, replica.active_ns
                );
                if replica.offline {
                    out.push_str(",\"offline\":true");
                }
                if replica.lag > 0 {
                    let _ = write!(out, ",\"lag\":{}", replica.lag);
                }
                out.push_str(",\"peer\":");
                json::write_string(out, &replica.peer);
                out.push('}');
            }
            out.push(']');
        }
        out.push('}');
    }
}

fn push_type(out: &mut String, kind: &str) {
    out.push_str("{\"type\":\"");
    out.push_str(TYPE_PREFIX);
    out.push_str(kind);
    out.push('"');
}

/// A full stream info response of `kind` (`stream_create_response`,
/// `stream_update_response`, `stream_info_response`).
pub fn stream_info(
    kind: &str,
    config: &StreamConfig,
    created_unix_ns: u64,
    state: &StreamState,
    now_unix_ns: u64,
    extras: InfoExtras,
) -> String {
    let mut out = String::with_capacity(1024);
    push_type(&mut out, kind);
    if let Some((total, offset, limit)) = extras.paging {
        let (offset, limit) = if total == 0 { (0, 0) } else { (offset, limit) };
        let _ = write!(
            out,
            ",\"total\":{total},\"offset\":{offset},\"limit\":{limit}"
        );
    }
    out.push(',');
    write_info_fields(
        &mut out,
        config,
        created_unix_ns,
        state,
        now_unix_ns,
        extras.dynamic_metadata,
        extras.cluster.as_ref(),
    );
    if extras.did_create {
        out.push_str(",\"did_create\":true");
    }
    out.push('}');
    out
}

fn write_info_fields(
    out: &mut String,
    config: &StreamConfig,
    created_unix_ns: u64,
    state: &StreamState,
    now_unix_ns: u64,
    dynamic_metadata: bool,
    cluster: Option<&ClusterBlock>,
) {
    out.push_str("\"config\":");
    config.write_json(out, dynamic_metadata);
    out.push_str(",\"created\":");
    json::write_time(out, created_unix_ns);
    out.push_str(",\"state\":");
    write_state(out, state);
    if let Some(cluster) = cluster {
        out.push_str(",\"cluster\":");
        cluster.write_json(out);
    }
    out.push_str(",\"ts\":");
    json::write_time(out, now_unix_ns);
}

/// Appends one STREAM.LIST element: `{"config":…,"created":…,"state":…,"ts":…}`.
pub fn write_stream_info_object(
    out: &mut String,
    config: &StreamConfig,
    created_unix_ns: u64,
    state: &StreamState,
    now_unix_ns: u64,
    dynamic_metadata: bool,
) {
    out.push('{');
    write_info_fields(
        out,
        config,
        created_unix_ns,
        state,
        now_unix_ns,
        dynamic_metadata,
        None,
    );
    out.push('}');
}

/// A STREAM.LIST element for a stream none of whose nodes is reachable
/// (nats-server's by-hand entry in a cluster): its config and creation
/// time from the meta group, an empty state and `cluster` (no leader,
/// every replica offline).
pub fn offline_stream_info_object(
    config: &StreamConfig,
    created_unix_ns: u64,
    cluster: &ClusterBlock,
    now_unix_ns: u64,
) -> String {
    let mut out = String::with_capacity(1024);
    out.push('{');
    write_info_fields(
        &mut out,
        config,
        created_unix_ns,
        &StreamState::default(),
        now_unix_ns,
        false,
        Some(cluster),
    );
    out.push('}');
    out
}

/// The STREAM.LIST element in a STREAM.INFO response (`{"config":…,
/// "created":…,"state":…,"cluster":…,"ts":…}`), or `None` for an error.
/// [`stream_info`] writes `"config"` right after the type and the paging
/// numbers, neither of which can hold it, so the element is what follows.
pub fn list_element_of_info(body: &str) -> Option<String> {
    let head = format!("{{\"type\":\"{TYPE_PREFIX}stream_info_response\",");
    // An error response has `"error"` here instead.
    let rest = body
        .strip_prefix(head.as_str())?
        .strip_prefix("\"total\":")?;
    let start = rest.find("\"config\":")?;
    Some(format!("{{{}", &rest[start..]))
}

/// [`write_stream_info_object`] into a new string.
pub fn stream_info_object(
    config: &StreamConfig,
    created_unix_ns: u64,
    state: &StreamState,
    now_unix_ns: u64,
    dynamic_metadata: bool,
) -> String {
    let mut out = String::with_capacity(1024);
    write_stream_info_object(
        &mut out,
        config,
        created_unix_ns,
        state,
        now_unix_ns,
        dynamic_metadata,
    );
    out
}

/// An API answer as it is sent: its JSON, and whether it is an error (the
/// account's `api.errors` counts those, in `JetStream::respond`). An
/// error's JSON is written only by [`ApiReply::error`]; any other body is
/// a success (`From<String>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiReply {
    body: String,
    outcome: Outcome,
}

/// How an API request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Error,
}

impl ApiReply {
    /// A success: `body` is the response's JSON.
    pub fn success(body: String) -> ApiReply {
        ApiReply {
            body,
            outcome: Outcome::Success,
        }
    }

    /// The error response of `kind` for `error` (see [`error_response`]).
    pub fn error(kind: &str, error: &ApiError) -> ApiReply {
        let body = error_response(kind, error);
        assert!(
            body.contains(",\"error\":{"),
            "an error answer carries its error"
        );
        ApiReply {
            body,
            outcome: Outcome::Error,
        }
    }

    /// `result` as the answer of a `kind` request: its body, or its error.
    pub fn of(kind: &str, result: Result<String, ApiError>) -> ApiReply {
        match result {
            Ok(body) => ApiReply::success(body),
            Err(error) => ApiReply::error(kind, &error),
        }
    }

    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    pub fn body(&self) -> &str {
        &self.body
    }

    pub fn into_body(self) -> String {
        self.body
    }
}

impl From<String> for ApiReply {
    fn from(body: String) -> ApiReply {
        ApiReply::success(body)
    }
}

/// An error response of `kind` with the fields its Go struct always writes
/// (verified against nats-server 2.15.1):
/// `stream_purge_response` `"purged":0`; `stream_info_response` zero paging;
/// `stream_names_response` zero paging and `"streams":null`;
/// `stream_list_response` zero paging and `"streams":[]`;
/// `consumer_names_response`/`consumer_list_response` zero paging and
/// `"consumers":[]`.
fn error_response(kind: &str, error: &ApiError) -> String {
    let mut out = String::with_capacity(160);
    push_type(&mut out, kind);
    out.push_str(",\"error\":");
    error.write_json(&mut out);
    const PAGING: &str = ",\"total\":0,\"offset\":0,\"limit\":0";
    match kind {
        "stream_purge_response" => out.push_str(",\"purged\":0"),
        "stream_info_response" => out.push_str(PAGING),
        "stream_names_response" => {
            out.push_str(PAGING);
            out.push_str(",\"streams\":null");
        }
        "stream_list_response" => {
            out.push_str(PAGING);
            out.push_str(",\"streams\":[]");
        }
        "consumer_names_response" | "consumer_list_response" => {
            out.push_str(PAGING);
            out.push_str(",\"consumers\":[]");
        }
        _ => {}
    }
    out.push('}');
    out
}

/// `{"type":"…stream_delete_response","success":true}`.
pub fn remove_peer_response() -> String {
    success_response("stream_remove_peer_response")
}

pub fn delete_response() -> String {
    success_response("stream_delete_response")
}

/// The answer to a stream delete that removed its files, or failed to.
pub fn delete_result(result: Result<(), StreamFilesError>) -> ApiReply {
    let result = result
        .map(|()| delete_response())
        .map_err(|error| ApiError::stream_delete_failed(&error.to_string()));
    ApiReply::of("stream_delete_response", result)
}

/// `{"type":"…stream_msg_delete_response","success":true}`.
pub fn message_delete_response() -> String {
    success_response("stream_msg_delete_response")
}

/// `{"type":"…<kind>","success":true}`.
pub fn success_response(kind: &str) -> String {
    let mut out = String::with_capacity(80);
    push_type(&mut out, kind);
    out.push_str(",\"success\":true}");
    out
}

/// `{"type":"…stream_purge_response","success":true,"purged":N}`.
pub fn purge_response(purged: u64) -> String {
    let mut out = String::with_capacity(96);
    push_type(&mut out, "stream_purge_response");
    let _ = write!(out, ",\"success\":true,\"purged\":{purged}}}");
    out
}

/// STREAM.NAMES: `"streams":null` when the page is empty. `offset` is
/// clamped to `total` as nats-server reports it.
pub fn names_response(total: usize, offset: usize, limit: usize, names: &[String]) -> String {
    assert!(names.len() <= limit, "a page holds at most `limit` names");
    let mut out = String::with_capacity(96 + names.len() * 16);
    push_type(&mut out, "stream_names_response");
    let _ = write!(
        out,
        ",\"total\":{total},\"offset\":{},\"limit\":{limit},\"streams\":",
        offset.min(total)
    );
    if names.is_empty() {
        out.push_str("null");
    } else {
        out.push('[');
        for (index, name) in names.iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            json::write_string(&mut out, name);
        }
        out.push(']');
    }
    out.push('}');
    out
}

/// STREAM.LIST: `infos` are [`stream_info_object`]s (`[]` when none).
/// `offset` is clamped to `total` as nats-server reports it. `offline`:
/// streams that could not be loaded, named in `missing` and, with the
/// reason, in `offline`.
pub fn list_response(
    total: usize,
    offset: usize,
    limit: usize,
    infos: &[String],
    offline: &[(String, String)],
) -> String {
    assert!(
        infos.len() + offline.len() <= limit,
        "a page holds at most `limit` streams"
    );
    let missing: Vec<String> = offline.iter().map(|(name, _)| name.clone()).collect();
    list_response_with_missing(total, offset.min(total), limit, infos, &missing, offline)
}

/// STREAM.LIST as a cluster's meta leader answers it: `missing` names the
/// streams whose leaders did not answer (or are offline), `offline` those
/// that answered they are offline, with the reason (both omitted when
/// empty). `offset` is written as given (nats-server's meta leader
/// answers a page past the end with the offset clamped and a zero total).
pub fn list_response_with_missing(
    total: usize,
    offset: usize,
    limit: usize,
    infos: &[String],
    missing: &[String],
    offline: &[(String, String)],
) -> String {
    assert!(
        infos.len() <= limit && missing.len() <= limit,
        "a page holds at most `limit` streams"
    );
    let capacity = 96 + infos.iter().map(|info| info.len() + 1).sum::<usize>();
    let mut out = String::with_capacity(capacity);
    push_type(&mut out, "stream_list_response");
    let _ = write!(
        out,
        ",\"total\":{total},\"offset\":{offset},\"limit\":{limit},\"streams\":["
    );
    for (index, info) in infos.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        out.push_str(info);
    }
    out.push(']');
    // nats-server: streams that could not be loaded or did not answer,
    // by name (`missing`) and with the reason (`offline`), both omitted
    // when empty.
    if !missing.is_empty() {
        out.push_str(",\"missing\":[");
        for (index, name) in missing.iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            json::write_string(&mut out, name);
        }
        out.push(']');
    }
    if !offline.is_empty() {
        out.push_str(",\"offline\":{");
        for (index, (name, reason)) in offline.iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            json::write_string(&mut out, name);
            out.push(':');
            json::write_string(&mut out, reason);
        }
        out.push('}');
    }
    out.push('}');
    out
}

/// STREAM.MSG.GET: `hdrs` (base64 of the header block) omitted when there
/// are no headers, `data` omitted when the payload is empty.
pub fn message_get_response(
    subject: &str,
    sequence: u64,
    headers: &[u8],
    payload: &[u8],
    unix_ns: u64,
) -> String {
    let mut out = String::with_capacity(160 + (headers.len() + payload.len()) * 4 / 3);
    push_type(&mut out, "stream_msg_get_response");
    out.push_str(",\"message\":{\"subject\":");
    json::write_string(&mut out, subject);
    let _ = write!(out, ",\"seq\":{sequence}");
    if !headers.is_empty() {
        out.push_str(",\"hdrs\":\"");
        json::base64_encode(headers, &mut out);
        out.push('"');
    }
    if !payload.is_empty() {
        out.push_str(",\"data\":\"");
        json::base64_encode(payload, &mut out);
        out.push('"');
    }
    out.push_str(",\"time\":");
    json::write_time(&mut out, unix_ns);
    out.push_str("}}");
    out
}

/// `$JS.API.INFO` figures. Limits are `-1` for unlimited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountInfo {
    pub memory: u64,
    pub storage: u64,
    pub reserved_memory: u64,
    pub reserved_storage: u64,
    pub streams: usize,
    pub consumers: usize,
    pub max_memory: i64,
    pub max_storage: i64,
    pub max_streams: i64,
    pub max_consumers: i64,
    pub max_ack_pending: i64,
    pub memory_max_stream_bytes: i64,
    pub storage_max_stream_bytes: i64,
    pub max_bytes_required: bool,
    /// JetStream domain, if configured.
    pub domain: Option<String>,
    pub api_total: u64,
    pub api_errors: u64,
}

impl Default for AccountInfo {
    fn default() -> AccountInfo {
        AccountInfo {
            memory: 0,
            storage: 0,
            reserved_memory: 0,
            reserved_storage: 0,
            streams: 0,
            consumers: 0,
            max_memory: -1,
            max_storage: -1,
            max_streams: -1,
            max_consumers: -1,
            max_ack_pending: -1,
            memory_max_stream_bytes: -1,
            storage_max_stream_bytes: -1,
            max_bytes_required: false,
            domain: None,
            api_total: 0,
            api_errors: 0,
        }
    }
}

/// `{"type":"…account_info_response","memory":…,…,"limits":{…}[,"domain"],"api":{…}}`.
pub fn account_info_response(info: &AccountInfo) -> String {
    let mut out = String::with_capacity(512);
    push_type(&mut out, "account_info_response");
    let _ = write!(
        out,
        ",\"memory\":{},\"storage\":{},\"reserved_memory\":{},\"reserved_storage\":{},\"streams\":{},\"consumers\":{}",
        info.memory, info.storage, info.reserved_memory, info.reserved_storage, info.streams, info.consumers
    );
    let _ = write!(
        out,
        ",\"limits\":{{\"max_memory\":{},\"max_storage\":{},\"max_streams\":{},\"max_consumers\":{},\"max_ack_pending\":{},\"memory_max_stream_bytes\":{},\"storage_max_stream_bytes\":{},\"max_bytes_required\":{}}}",
        info.max_memory,
        info.max_storage,
        info.max_streams,
        info.max_consumers,
        info.max_ack_pending,
        info.memory_max_stream_bytes,
        info.storage_max_stream_bytes,
        info.max_bytes_required
    );
    if let Some(domain) = info.domain.as_deref().filter(|domain| !domain.is_empty()) {
        out.push_str(",\"domain\":");
        json::write_string(&mut out, domain);
    }
    let _ = write!(
        out,
        ",\"api\":{{\"level\":{API_LEVEL},\"total\":{},\"errors\":{}}}}}",
        info.api_total, info.api_errors
    );
    out
}

/// A successful PubAck, exactly as nats-server concatenates it (stream and
/// domain quoted with Go's `%q`): `{"stream":"S","seq":1}`,
/// `{"stream":"S","domain":"D","seq":1}`, `{"stream":"S","seq":2,"duplicate": true}`.
pub fn pub_ack(stream: &str, sequence: u64, duplicate: bool, domain: Option<&str>) -> String {
    let mut out = String::with_capacity(48 + stream.len());
    out.push_str("{\"stream\":");
    out.push_str(&json::go_quote(stream));
    if let Some(domain) = domain.filter(|domain| !domain.is_empty()) {
        out.push_str(",\"domain\":");
        out.push_str(&json::go_quote(domain));
    }
    let _ = write!(out, ",\"seq\":{sequence}");
    if duplicate {
        out.push_str(",\"duplicate\": true");
    }
    out.push('}');
    out
}

/// A refused publish: `{"error":{…},"stream":"S","seq":0}` (Go's
/// `json.Marshal` of the error PubAck; no domain).
pub fn pub_ack_error(stream: &str, error: &ApiError) -> String {
    let mut out = String::with_capacity(128 + stream.len());
    out.push_str("{\"error\":");
    error.write_json(&mut out);
    out.push_str(",\"stream\":");
    json::write_string(&mut out, stream);
    out.push_str(",\"seq\":0}");
    out
}

#[cfg(test)]
#[path = "responses_tests.rs"]
mod tests;
