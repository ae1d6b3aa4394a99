//! JetStream API errors: the HTTP-like status, the stable JetStream error
//! code and the exact description nats-server 2.15.1 sends (its
//! `server/errors.json`), so clients that branch on `err_code` or match on
//! the text behave as they do against nats-server.
//!
//! Wire form (inside a response object, or a PubAck):
//! `{"code":400,"err_code":10065,"description":"subjects overlap with an existing stream"}`.
//!
//! One constructor per `errors.json` row that streams use, named for its
//! meaning. Rows whose description is `{err}` take the text as an argument.

use std::fmt;

use super::json;

/// A JetStream API error as it goes on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP-like status (`code` on the wire): 400, 404, 412, 429, 500, 503.
    pub status: u16,
    /// Stable JetStream code (`err_code` on the wire), 10001..=10227.
    pub code: u32,
    /// Exact description text.
    pub description: String,
}

impl fmt::Display for ApiError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "{} (status {}, err_code {})",
            self.description, self.status, self.code
        )
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    pub fn new(status: u16, code: u32, description: impl Into<String>) -> ApiError {
        assert!(
            (100..=599).contains(&status),
            "status {status} is not HTTP-like"
        );
        assert!(
            (10_000..=10_999).contains(&code),
            "err_code {code} is outside the JetStream range"
        );
        ApiError {
            status,
            code,
            description: description.into(),
        }
    }

    /// Appends `{"code":…,"err_code":…,"description":"…"}` (Go's field order
    /// and escaping).
    pub fn write_json(&self, out: &mut String) {
        out.push_str("{\"code\":");
        out.push_str(&self.status.to_string());
        out.push_str(",\"err_code\":");
        out.push_str(&self.code.to_string());
        out.push_str(",\"description\":");
        json::write_string(out, &self.description);
        out.push('}');
    }

    // ---- request shape -------------------------------------------------

    /// 400 10003 `bad request`.
    pub fn bad_request() -> ApiError {
        ApiError::new(400, 10003, "bad request")
    }

    /// 400 10025 `invalid JSON: {detail}`; `detail` is the Go decoder's text.
    pub fn invalid_json(detail: &str) -> ApiError {
        ApiError::new(400, 10025, format!("invalid JSON: {detail}"))
    }

    /// 400 10038 `expected an empty request payload`.
    pub fn empty_request_expected() -> ApiError {
        ApiError::new(400, 10038, "expected an empty request payload")
    }

    /// 412 10185 `JetStream minimum api level required`.
    pub fn required_api_level() -> ApiError {
        ApiError::new(412, 10185, "JetStream minimum api level required")
    }

    /// 429 10167 `too many requests` (stream ingest queue full).
    pub fn too_many_requests() -> ApiError {
        ApiError::new(429, 10167, "too many requests")
    }

    /// 400 10157 `pedantic mode: {text}`.
    pub fn pedantic(text: &str) -> ApiError {
        ApiError::new(400, 10157, format!("pedantic mode: {text}"))
    }

    // ---- availability ---------------------------------------------------

    /// 503 10039 `JetStream not enabled for account`.
    pub fn not_enabled_for_account() -> ApiError {
        ApiError::new(503, 10039, "JetStream not enabled for account")
    }

    /// 503 10076 `JetStream not enabled`.
    pub fn not_enabled() -> ApiError {
        ApiError::new(503, 10076, "JetStream not enabled")
    }

    /// 503 10010 `JetStream clustering support required` (stepdown, peer
    /// remove on a single server).
    pub fn clustering_required() -> ApiError {
        ApiError::new(503, 10010, "JetStream clustering support required")
    }

    /// 500 10009 `JetStream cluster can not handle request`: what a
    /// proposal gets when its group's leadership is lost before it commits
    /// (nats-server's JSClusterNotLeaderErr).
    pub fn cluster_not_leader() -> ApiError {
        ApiError::new(500, 10009, "JetStream cluster can not handle request")
    }

    /// 400 10005 `{detail}`: no peer to move to (nats-server's
    /// JSClusterNoPeersErrF; a stepdown's preferred server).
    pub fn cluster_no_peers(detail: impl Into<String>) -> ApiError {
        ApiError::new(400, 10005, detail)
    }

    /// 503 10008 `JetStream system temporarily unavailable`.
    pub fn cluster_unavailable() -> ApiError {
        ApiError::new(503, 10008, "JetStream system temporarily unavailable")
    }

    // ---- stream lifecycle -----------------------------------------------

    /// 404 10059 `stream not found`.
    pub fn stream_not_found() -> ApiError {
        ApiError::new(404, 10059, "stream not found")
    }

    /// 400 10058 `stream name already in use with a different configuration`.
    pub fn stream_name_in_use() -> ApiError {
        ApiError::new(
            400,
            10058,
            "stream name already in use with a different configuration",
        )
    }

    /// 400 10056 `stream name in subject does not match request`.
    pub fn stream_name_mismatch() -> ApiError {
        ApiError::new(400, 10056, "stream name in subject does not match request")
    }

    /// 400 10128 `Stream name can not contain path separators`.
    pub fn stream_name_has_path_separators() -> ApiError {
        ApiError::new(400, 10128, "Stream name can not contain path separators")
    }

    /// 500 10052 `{text}`: invalid stream configuration, e.g. `invalid subject`.
    pub fn invalid_stream_config(text: &str) -> ApiError {
        ApiError::new(500, 10052, text)
    }

    /// 500 10049 `{text}`: stream create failed.
    pub fn stream_create_failed(text: &str) -> ApiError {
        ApiError::new(500, 10049, text)
    }

    /// 500 10069 `{text}`: stream update failed.
    pub fn stream_update_failed(text: &str) -> ApiError {
        ApiError::new(500, 10069, text)
    }

    /// 500 10050 `{text}`: stream delete failed.
    pub fn stream_delete_failed(text: &str) -> ApiError {
        ApiError::new(500, 10050, text)
    }

    /// 500 10051 `{text}`: any other stream failure (nats-server uses it
    /// for purge errors other than "not permitted").
    pub fn stream_general(text: &str) -> ApiError {
        ApiError::new(500, 10051, text)
    }

    /// 500 10062 `restore failed: {text}`.
    pub fn restore_failed(text: &str) -> ApiError {
        ApiError::new(500, 10062, format!("restore failed: {text}"))
    }

    /// 400 10065 `subjects overlap with an existing stream`.
    pub fn subjects_overlap() -> ApiError {
        ApiError::new(400, 10065, "subjects overlap with an existing stream")
    }

    /// 500 10074 `replicas > 1 not supported in non-clustered mode`.
    pub fn replicas_not_supported() -> ApiError {
        ApiError::new(
            500,
            10074,
            "replicas > 1 not supported in non-clustered mode",
        )
    }

    /// 400 10133 `replicas count cannot be negative`.
    pub fn replicas_negative() -> ApiError {
        ApiError::new(400, 10133, "replicas count cannot be negative")
    }

    /// 400 10027 `maximum number of streams reached`.
    pub fn maximum_streams() -> ApiError {
        ApiError::new(400, 10027, "maximum number of streams reached")
    }

    /// 400 10026 `maximum consumers limit reached`.
    pub fn maximum_consumers() -> ApiError {
        ApiError::new(400, 10026, "maximum consumers limit reached")
    }

    /// 400 10055 `stream mirror configuration can not be updated`.
    pub fn mirror_update_not_allowed() -> ApiError {
        ApiError::new(400, 10055, "stream mirror configuration can not be updated")
    }

    /// 400 10034 `stream mirrors can not contain subjects`.
    pub fn mirror_with_subjects() -> ApiError {
        ApiError::new(400, 10034, "stream mirrors can not contain subjects")
    }

    /// 400 10031 `stream mirrors can not also contain other sources`.
    pub fn mirror_with_sources() -> ApiError {
        ApiError::new(
            400,
            10031,
            "stream mirrors can not also contain other sources",
        )
    }

    /// 400 10143 `stream mirrors can not have first sequence configured`.
    pub fn mirror_with_first_sequence() -> ApiError {
        ApiError::new(
            400,
            10143,
            "stream mirrors can not have first sequence configured",
        )
    }

    /// 400 10155 `stream transform source: {text}`.
    pub fn transform_invalid_source(text: &str) -> ApiError {
        ApiError::new(400, 10155, format!("stream transform source: {text}"))
    }

    /// 400 10156 `stream transform: {text}`.
    pub fn transform_invalid_destination(text: &str) -> ApiError {
        ApiError::new(400, 10156, format!("stream transform: {text}"))
    }

    // ---- resources --------------------------------------------------------

    /// 400 10002 `resource limits exceeded for account`.
    pub fn account_resources_exceeded() -> ApiError {
        ApiError::new(400, 10002, "resource limits exceeded for account")
    }

    /// 500 10194 `stream is offline: {reason}` (damaged files, or stopped
    /// after a storage error).
    pub fn stream_offline(reason: &str) -> ApiError {
        ApiError::new(500, 10194, format!("stream is offline: {reason}"))
    }

    /// 400 10040 `peer not a member`.
    pub fn peer_not_member() -> ApiError {
        ApiError::new(400, 10040, "peer not a member")
    }

    /// 400 10044 `server is not a member of the cluster`.
    pub fn server_not_member() -> ApiError {
        ApiError::new(400, 10044, "server is not a member of the cluster")
    }

    /// 400 10202 `cluster member change is in progress`.
    pub fn member_change_in_flight() -> ApiError {
        ApiError::new(400, 10202, "cluster member change is in progress")
    }

    /// 500 10041 with Raft's own text (nats-server's `JSRaftGeneralErrF`).
    pub fn raft_general(detail: impl Into<String>) -> ApiError {
        ApiError::new(500, 10041, detail)
    }

    /// 503 10075 `peer remap failed`.
    pub fn peer_remap_failed() -> ApiError {
        ApiError::new(503, 10075, "peer remap failed")
    }

    /// 503 10023 `insufficient resources`.
    pub fn insufficient_resources() -> ApiError {
        ApiError::new(503, 10023, "insufficient resources")
    }

    /// 500 10028 `insufficient memory resources available`.
    pub fn insufficient_memory() -> ApiError {
        ApiError::new(500, 10028, "insufficient memory resources available")
    }

    /// 500 10047 `insufficient storage resources available`.
    pub fn insufficient_storage() -> ApiError {
        ApiError::new(500, 10047, "insufficient storage resources available")
    }

    // ---- messages ----------------------------------------------------------

    /// 404 10037 `no message found` (MSG.GET).
    pub fn no_message_found() -> ApiError {
        ApiError::new(404, 10037, "no message found")
    }

    /// 400 10043 `sequence {sequence} not found` (MSG.DELETE of a deleted
    /// interior sequence).
    pub fn sequence_not_found(sequence: u64) -> ApiError {
        ApiError::new(400, 10043, format!("sequence {sequence} not found"))
    }

    /// 500 10057 `{text}`: message delete failed (`no message found`,
    /// `message delete not permitted`, `stream store EOF`).
    pub fn message_delete_failed(text: &str) -> ApiError {
        ApiError::new(500, 10057, text)
    }

    /// 500 10057 `message delete not permitted` (deny_delete).
    pub fn message_delete_not_permitted() -> ApiError {
        ApiError::message_delete_failed("message delete not permitted")
    }

    /// 500 10110 `{text}`: purge failed.
    pub fn purge_failed(text: &str) -> ApiError {
        ApiError::new(500, 10110, text)
    }

    /// 500 10110 `stream purge not permitted` (deny_purge).
    pub fn purge_not_permitted() -> ApiError {
        ApiError::purge_failed("stream purge not permitted")
    }

    /// 400 10109 `invalid operation on sealed stream`.
    pub fn sealed() -> ApiError {
        ApiError::new(400, 10109, "invalid operation on sealed stream")
    }

    // ---- publish -------------------------------------------------------------

    /// 400 10060 `expected stream does not match`.
    pub fn expected_stream_mismatch() -> ApiError {
        ApiError::new(400, 10060, "expected stream does not match")
    }

    /// 400 10166 `per-message TTL is disabled`.
    pub fn ttl_disabled() -> ApiError {
        ApiError::new(400, 10166, "per-message TTL is disabled")
    }

    /// 400 10165 `invalid per-message TTL`.
    pub fn invalid_ttl() -> ApiError {
        ApiError::new(400, 10165, "invalid per-message TTL")
    }

    /// 400 10071 `wrong last sequence: {last}`.
    pub fn wrong_last_sequence(last: u64) -> ApiError {
        ApiError::new(400, 10071, format!("wrong last sequence: {last}"))
    }

    /// 400 10164 `wrong last sequence` (clustered compare-and-set variant).
    pub fn wrong_last_sequence_constant() -> ApiError {
        ApiError::new(400, 10164, "wrong last sequence")
    }

    /// 400 10193 `missing sequence for expected last sequence per subject`.
    pub fn missing_last_subject_sequence() -> ApiError {
        ApiError::new(
            400,
            10193,
            "missing sequence for expected last sequence per subject",
        )
    }

    /// 400 10227 `message stream source header is not allowed`.
    pub fn stream_source_header_not_allowed() -> ApiError {
        ApiError::new(400, 10227, "message stream source header is not allowed")
    }

    /// 400 10070 `wrong last msg ID: {last_id}`.
    pub fn wrong_last_msg_id(last_id: &str) -> ApiError {
        ApiError::new(400, 10070, format!("wrong last msg ID: {last_id}"))
    }

    /// 409 10158 `duplicate message id is in process`.
    pub fn duplicate_message_in_process() -> ApiError {
        ApiError::new(409, 10158, "duplicate message id is in process")
    }

    /// 500 10111 `{text}`: `rollup not permitted`, `rollup value invalid: "x"`.
    pub fn rollup_failed(text: &str) -> ApiError {
        ApiError::new(500, 10111, text)
    }

    /// 400 10054 `message size exceeds maximum allowed`.
    pub fn message_too_large() -> ApiError {
        ApiError::new(400, 10054, "message size exceeds maximum allowed")
    }

    /// 400 10097 `header size exceeds maximum allowed of 64k`.
    pub fn header_too_large() -> ApiError {
        ApiError::new(400, 10097, "header size exceeds maximum allowed of 64k")
    }

    /// 503 10077 `{text}`: store failed (`maximum messages exceeded`,
    /// `maximum bytes exceeded`, `maximum messages per subject exceeded`,
    /// `message too large`).
    pub fn store_failed(text: &str) -> ApiError {
        ApiError::new(503, 10077, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_of(error: &ApiError) -> String {
        let mut out = String::new();
        error.write_json(&mut out);
        out
    }

    #[test]
    fn writes_go_field_order_and_escaping() {
        // nats-server 2.15.1: CREATE.A {"name":"A","num_replicas":3}
        assert_eq!(
            json_of(&ApiError::replicas_not_supported()),
            r#"{"code":500,"err_code":10074,"description":"replicas \u003e 1 not supported in non-clustered mode"}"#
        );
        // nats-server 2.15.1: CREATE.Q overlapping p.>
        assert_eq!(
            json_of(&ApiError::subjects_overlap()),
            r#"{"code":400,"err_code":10065,"description":"subjects overlap with an existing stream"}"#
        );
        // nats-server 2.15.1: CREATE.B {"name":"B","retention":"foo"}
        assert_eq!(
            json_of(&ApiError::invalid_json(r#"can not unmarshal "\"foo\"""#)),
            r#"{"code":400,"err_code":10025,"description":"invalid JSON: can not unmarshal \"\\\"foo\\\"\""}"#
        );
    }

    #[test]
    fn every_constructor_has_its_table_row() {
        let rows: Vec<(ApiError, u16, u32, &str)> = vec![
            (ApiError::bad_request(), 400, 10003, "bad request"),
            (ApiError::invalid_json("x"), 400, 10025, "invalid JSON: x"),
            (
                ApiError::empty_request_expected(),
                400,
                10038,
                "expected an empty request payload",
            ),
            (
                ApiError::required_api_level(),
                412,
                10185,
                "JetStream minimum api level required",
            ),
            (
                ApiError::too_many_requests(),
                429,
                10167,
                "too many requests",
            ),
            (ApiError::pedantic("x"), 400, 10157, "pedantic mode: x"),
            (
                ApiError::not_enabled_for_account(),
                503,
                10039,
                "JetStream not enabled for account",
            ),
            (ApiError::not_enabled(), 503, 10076, "JetStream not enabled"),
            (
                ApiError::clustering_required(),
                503,
                10010,
                "JetStream clustering support required",
            ),
            (
                ApiError::cluster_unavailable(),
                503,
                10008,
                "JetStream system temporarily unavailable",
            ),
            (ApiError::stream_not_found(), 404, 10059, "stream not found"),
            (
                ApiError::stream_name_in_use(),
                400,
                10058,
                "stream name already in use with a different configuration",
            ),
            (
                ApiError::stream_name_mismatch(),
                400,
                10056,
                "stream name in subject does not match request",
            ),
            (
                ApiError::stream_name_has_path_separators(),
                400,
                10128,
                "Stream name can not contain path separators",
            ),
            (ApiError::invalid_stream_config("x"), 500, 10052, "x"),
            (ApiError::stream_create_failed("x"), 500, 10049, "x"),
            (ApiError::stream_update_failed("x"), 500, 10069, "x"),
            (ApiError::stream_delete_failed("x"), 500, 10050, "x"),
            (ApiError::stream_general("x"), 500, 10051, "x"),
            (
                ApiError::restore_failed("x"),
                500,
                10062,
                "restore failed: x",
            ),
            (
                ApiError::subjects_overlap(),
                400,
                10065,
                "subjects overlap with an existing stream",
            ),
            (
                ApiError::replicas_not_supported(),
                500,
                10074,
                "replicas > 1 not supported in non-clustered mode",
            ),
            (
                ApiError::replicas_negative(),
                400,
                10133,
                "replicas count cannot be negative",
            ),
            (
                ApiError::maximum_streams(),
                400,
                10027,
                "maximum number of streams reached",
            ),
            (
                ApiError::maximum_consumers(),
                400,
                10026,
                "maximum consumers limit reached",
            ),
            (
                ApiError::mirror_update_not_allowed(),
                400,
                10055,
                "stream mirror configuration can not be updated",
            ),
            (
                ApiError::mirror_with_subjects(),
                400,
                10034,
                "stream mirrors can not contain subjects",
            ),
            (
                ApiError::mirror_with_sources(),
                400,
                10031,
                "stream mirrors can not also contain other sources",
            ),
            (
                ApiError::mirror_with_first_sequence(),
                400,
                10143,
                "stream mirrors can not have first sequence configured",
            ),
            (
                ApiError::transform_invalid_source("x"),
                400,
                10155,
                "stream transform source: x",
            ),
            (
                ApiError::transform_invalid_destination("x"),
                400,
                10156,
                "stream transform: x",
            ),
            (
                ApiError::account_resources_exceeded(),
                400,
                10002,
                "resource limits exceeded for account",
            ),
            (
                ApiError::insufficient_resources(),
                503,
                10023,
                "insufficient resources",
            ),
            (
                ApiError::insufficient_memory(),
                500,
                10028,
                "insufficient memory resources available",
            ),
            (
                ApiError::insufficient_storage(),
                500,
                10047,
                "insufficient storage resources available",
            ),
            (ApiError::no_message_found(), 404, 10037, "no message found"),
            (
                ApiError::sequence_not_found(2),
                400,
                10043,
                "sequence 2 not found",
            ),
            (ApiError::message_delete_failed("x"), 500, 10057, "x"),
            (
                ApiError::message_delete_not_permitted(),
                500,
                10057,
                "message delete not permitted",
            ),
            (ApiError::purge_failed("x"), 500, 10110, "x"),
            (
                ApiError::purge_not_permitted(),
                500,
                10110,
                "stream purge not permitted",
            ),
            (
                ApiError::sealed(),
                400,
                10109,
                "invalid operation on sealed stream",
            ),
            (
                ApiError::expected_stream_mismatch(),
                400,
                10060,
                "expected stream does not match",
            ),
            (
                ApiError::ttl_disabled(),
                400,
                10166,
                "per-message TTL is disabled",
            ),
            (
                ApiError::invalid_ttl(),
                400,
                10165,
                "invalid per-message TTL",
            ),
            (
                ApiError::wrong_last_sequence(7),
                400,
                10071,
                "wrong last sequence: 7",
            ),
            (
                ApiError::wrong_last_sequence_constant(),
                400,
                10164,
                "wrong last sequence",
            ),
            (
                ApiError::missing_last_subject_sequence(),
                400,
                10193,
                "missing sequence for expected last sequence per subject",
            ),
            (
                ApiError::stream_source_header_not_allowed(),
                400,
                10227,
                "message stream source header is not allowed",
            ),
            (
                ApiError::wrong_last_msg_id("m1"),
                400,
                10070,
                "wrong last msg ID: m1",
            ),
            (
                ApiError::duplicate_message_in_process(),
                409,
                10158,
                "duplicate message id is in process",
            ),
            (
                ApiError::rollup_failed("rollup not permitted"),
                500,
                10111,
                "rollup not permitted",
            ),
            (
                ApiError::message_too_large(),
                400,
                10054,
                "message size exceeds maximum allowed",
            ),
            (
                ApiError::header_too_large(),
                400,
                10097,
                "header size exceeds maximum allowed of 64k",
            ),
            (
                ApiError::store_failed("maximum messages exceeded"),
                503,
                10077,
                "maximum messages exceeded",
            ),
        ];
        for (error, status, code, description) in rows {
            assert_eq!(
                (error.status, error.code, error.description.as_str()),
                (status, code, description)
            );
        }
    }

    #[test]
    #[should_panic(expected = "outside the JetStream range")]
    fn rejects_codes_outside_the_range() {
        let _ = ApiError::new(400, 42, "x");
    }
}
