//! Request bodies of the stream API other than the configuration: STREAM.INFO,
//! PURGE, MSG.GET, MSG.DELETE, NAMES/LIST paging and DIRECT.GET, parsed with
//! nats-server 2.15.1's rules (`server/jetstream_api.go`, `server/stream.go`)
//! and its exact errors.
//!
//! Which bodies are decoded at all follows nats-server:
//! - INFO, PURGE, NAMES, LIST: only a body starting with `{` or `[`
//!   (after whitespace) is decoded; any other body means "no options".
//! - MSG.GET, MSG.DELETE: an empty request (see [`json::is_empty_request`])
//!   is `400/10003 bad request`; anything else is decoded strictly.
//! - DIRECT.GET: decoded leniently (unknown fields ignored); errors are
//!   status lines, not JSON ([`DirectGetError`]).

use super::error::ApiError;
use super::json::{self, DecodeMode, GoSchema, GoTime};

/// `$JS.API.STREAM.INFO.<stream>` options.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamInfoRequest {
    pub deleted_details: bool,
    /// Report per-subject counts for subjects matching this filter.
    pub subjects_filter: Option<String>,
    /// Paging offset into the sorted subjects (negative offsets are 0).
    pub offset: usize,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, rename = "JSApiStreamInfoRequest")]
struct StreamInfoBody {
    offset: i64,
    deleted_details: bool,
    subjects_filter: String,
}

const STREAM_INFO_SCHEMA: GoSchema = GoSchema {
    struct_name: "JSApiStreamInfoRequest",
    field_types: &[("offset", "int")],
};

impl StreamInfoRequest {
    pub fn parse(body: &[u8]) -> Result<StreamInfoRequest, ApiError> {
        if !json::is_object_or_array(body) {
            return Ok(StreamInfoRequest::default());
        }
        let body: StreamInfoBody = json::decode_strict_with(body, &STREAM_INFO_SCHEMA)?;
        Ok(StreamInfoRequest {
            deleted_details: body.deleted_details,
            subjects_filter: non_empty(body.subjects_filter),
            offset: clamp_offset(body.offset),
        })
    }
}

/// `$JS.API.STREAM.PURGE.<stream>` options (all absent: purge everything).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PurgeRequest {
    /// Only messages whose subject matches (wildcards allowed). nats-server
    /// does not validate it: an invalid filter matches nothing.
    pub filter: Option<String>,
    /// Purge below this sequence (exclusive). Never `Some(0)`.
    pub sequence: Option<u64>,
    /// Keep this many newest messages. Never `Some(0)`.
    pub keep: Option<u64>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, rename = "JSApiStreamPurgeRequest")]
struct PurgeBody {
    seq: u64,
    filter: String,
    keep: u64,
}

const PURGE_SCHEMA: GoSchema = GoSchema {
    struct_name: "JSApiStreamPurgeRequest",
    field_types: &[],
};

impl PurgeRequest {
    /// `seq` and `keep` together are `400/10003`.
    pub fn parse(body: &[u8]) -> Result<PurgeRequest, ApiError> {
        if !json::is_object_or_array(body) {
            return Ok(PurgeRequest::default());
        }
        let body: PurgeBody = json::decode_strict_with(body, &PURGE_SCHEMA)?;
        if body.seq > 0 && body.keep > 0 {
            return Err(ApiError::bad_request());
        }
        Ok(PurgeRequest {
            filter: non_empty(body.filter),
            sequence: (body.seq > 0).then_some(body.seq),
            keep: (body.keep > 0).then_some(body.keep),
        })
    }
}

/// `$JS.API.STREAM.MSG.DELETE.<stream>`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MessageDeleteRequest {
    /// May be 0 (nats-server then answers `500/10057 no message found`).
    pub sequence: u64,
    /// Remove without overwriting the data.
    pub no_erase: bool,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, rename = "JSApiMsgDeleteRequest")]
struct MessageDeleteBody {
    seq: u64,
    no_erase: bool,
}

const MESSAGE_DELETE_SCHEMA: GoSchema = GoSchema {
    struct_name: "JSApiMsgDeleteRequest",
    field_types: &[],
};

impl MessageDeleteRequest {
    /// An empty request is `400/10003`.
    pub fn parse(body: &[u8]) -> Result<MessageDeleteRequest, ApiError> {
        if json::is_empty_request(body) {
            return Err(ApiError::bad_request());
        }
        let body: MessageDeleteBody = json::decode_strict_with(body, &MESSAGE_DELETE_SCHEMA)?;
        Ok(MessageDeleteRequest {
            sequence: body.seq,
            no_erase: body.no_erase,
        })
    }
}

/// Which message a MSG.GET or DIRECT.GET asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageGet {
    /// `{"seq":N}`.
    Sequence(u64),
    /// `{"last_by_subj":"s"}`: the newest message matching (wildcards ok).
    LastBySubject(String),
    /// `{"next_by_subj":"s"[,"seq":N]}`: the first message matching at or
    /// after `from_sequence` (0 means from the start).
    NextBySubject { subject: String, from_sequence: u64 },
    /// `{"start_time":"RFC3339"[,"next_by_subj":"s"]}`: the first message
    /// stored at or after the time (optionally matching `subject`).
    StartTime {
        unix_ns: u64,
        subject: Option<String>,
    },
}

/// JSApiMsgGetRequest, shared by MSG.GET and DIRECT.GET.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, rename = "JSApiMsgGetRequest")]
struct MessageGetBody {
    seq: u64,
    last_by_subj: String,
    next_by_subj: String,
    batch: i64,
    max_bytes: i64,
    start_time: Option<GoTime>,
    multi_last: Vec<String>,
    up_to_seq: u64,
    up_to_time: Option<GoTime>,
    no_hdr: bool,
}

const MESSAGE_GET_SCHEMA: GoSchema = GoSchema {
    struct_name: "JSApiMsgGetRequest",
    field_types: &[("batch", "int"), ("max_bytes", "int")],
};

impl MessageGetBody {
    /// The single-message selector; the caller has checked the selectors
    /// do not conflict and at least one is set.
    fn selector(&self) -> MessageGet {
        let next = non_empty(self.next_by_subj.clone());
        if let Some(time) = self.start_time {
            return MessageGet::StartTime {
                unix_ns: time.unix_ns_clamped(),
                subject: next,
            };
        }
        if let Some(subject) = next {
            return MessageGet::NextBySubject {
                subject,
                from_sequence: self.seq,
            };
        }
        if self.seq > 0 {
            return MessageGet::Sequence(self.seq);
        }
        MessageGet::LastBySubject(self.last_by_subj.clone())
    }
}

/// Parses a `$JS.API.STREAM.MSG.GET.<stream>` body into the message wanted
/// and `no_hdr`. Empty request, `batch`/`max_bytes` (not supported by
/// MSG.GET), no selector or conflicting selectors are `400/10003`.
pub fn parse_message_get(body: &[u8]) -> Result<(MessageGet, bool), ApiError> {
    if json::is_empty_request(body) {
        return Err(ApiError::bad_request());
    }
    let request: MessageGetBody = json::decode_strict_with(body, &MESSAGE_GET_SCHEMA)?;
    if request.batch > 0 || request.max_bytes > 0 {
        return Err(ApiError::bad_request());
    }
    let has_sequence = request.seq > 0;
    let has_last = !request.last_by_subj.is_empty();
    let has_next = !request.next_by_subj.is_empty();
    let has_time = request.start_time.is_some();
    // Seq, LastFor and StartTime are exclusive; NextFor pairs with Seq or
    // StartTime as a filter.
    if (has_sequence && has_last)
        || (!has_sequence && !has_last && !has_next && !has_time)
        || (has_sequence && has_time)
        || (has_time && has_last)
        || (has_last && has_next)
    {
        return Err(ApiError::bad_request());
    }
    Ok((request.selector(), request.no_hdr))
}

/// A DIRECT.GET refusal: the status line nats-server answers with (no JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectGetError {
    /// Empty body, or no selector.
    EmptyRequest,
    /// The body is not valid JSON for the request.
    MalformedRequest,
    /// Conflicting or (subject form) not allowed options.
    BadRequest,
}

impl DirectGetError {
    /// `408 Empty Request` etc., what follows `NATS/1.0 ` in the status line.
    pub fn status(self) -> &'static str {
        match self {
            DirectGetError::EmptyRequest => "408 Empty Request",
            DirectGetError::MalformedRequest => "408 Malformed Request",
            DirectGetError::BadRequest => "408 Bad Request",
        }
    }

    /// The whole header block: `NATS/1.0 408 Empty Request\r\n\r\n`.
    pub fn header_block(self) -> String {
        format!("NATS/1.0 {}\r\n\r\n", self.status())
    }
}

impl std::ops::Deref for DirectGetError {
    type Target = str;

    fn deref(&self) -> &str {
        self.status()
    }
}

/// Batch options of a DIRECT.GET (`batch` > 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectBatch {
    /// Messages to send at most (≥ 1).
    pub size: usize,
    /// Payload bytes to send at most; 0: the server default.
    pub max_bytes: usize,
}

/// `multi_last` options of a DIRECT.GET: the last message of each subject
/// matching any filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectMultiLast {
    pub subjects: Vec<String>,
    /// Only messages up to this sequence (0: the last).
    pub up_to_sequence: u64,
    /// Only messages stored up to this time.
    pub up_to_unix_ns: Option<u64>,
    /// `batch` (0: no limit but the server's).
    pub batch: usize,
    /// 0: the server default.
    pub max_bytes: usize,
}

/// A parsed DIRECT.GET request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectGet {
    /// The message wanted (for a batch: the first one). Meaningless when
    /// `multi_last` is set (then `Sequence(0)`).
    pub get: MessageGet,
    /// `no_hdr`: answer the payload alone, as a plain message.
    pub no_headers: bool,
    /// `Some` for a batch request (`Nats-Num-Pending`, EOB status).
    pub batch: Option<DirectBatch>,
    /// `Some` for a `multi_last` request.
    pub multi_last: Option<DirectMultiLast>,
}

impl DirectGet {
    /// `$JS.API.DIRECT.GET.<stream>` with a JSON body.
    pub fn parse(body: &[u8]) -> Result<DirectGet, DirectGetError> {
        if body.is_empty() {
            return Err(DirectGetError::EmptyRequest);
        }
        let request: MessageGetBody = json::decode(body, &MESSAGE_GET_SCHEMA, DecodeMode::Lenient)
            .map_err(|_| DirectGetError::MalformedRequest)?;
        let has_sequence = request.seq > 0;
        let has_last = !request.last_by_subj.is_empty();
        let has_next = !request.next_by_subj.is_empty();
        let has_multi = !request.multi_last.is_empty();
        let has_time = request.start_time.is_some();
        if !has_sequence && !has_last && !has_next && !has_multi && !has_time {
            return Err(DirectGetError::EmptyRequest);
        }
        // nats-server's conflicts; `last_by_subj` is never batched.
        let conflicting = (has_sequence && (has_last || has_time))
            || (has_last && (has_time || has_next || has_multi || request.batch > 0))
            || (has_next && has_multi)
            || (request.up_to_seq > 0 && request.up_to_time.is_some());
        if conflicting {
            return Err(DirectGetError::BadRequest);
        }
        let max_bytes = usize::try_from(request.max_bytes.max(0)).unwrap_or(usize::MAX);
        let batch_size = usize::try_from(request.batch.max(0)).unwrap_or(usize::MAX);
        if has_multi {
            return Ok(DirectGet {
                get: MessageGet::Sequence(0),
                no_headers: request.no_hdr,
                batch: None,
                multi_last: Some(DirectMultiLast {
                    subjects: request.multi_last,
                    up_to_sequence: request.up_to_seq,
                    up_to_unix_ns: request.up_to_time.map(|time| time.unix_ns_clamped()),
                    batch: batch_size,
                    max_bytes,
                }),
            });
        }
        Ok(DirectGet {
            get: request.selector(),
            no_headers: request.no_hdr,
            batch: (batch_size > 0).then_some(DirectBatch {
                size: batch_size,
                max_bytes,
            }),
            multi_last: None,
        })
    }

    /// `$JS.API.DIRECT.GET.<stream>.<subject…>`: the last message on the
    /// appended subject (wildcards allowed). The body may be empty or carry
    /// `no_hdr` / `max_bytes`; any selector, batch or bound is a bad request.
    pub fn parse_subject_form(subject: &[u8], body: &[u8]) -> Result<DirectGet, DirectGetError> {
        let request: MessageGetBody = if body.is_empty() {
            MessageGetBody::default()
        } else {
            json::decode(body, &MESSAGE_GET_SCHEMA, DecodeMode::Lenient)
                .map_err(|_| DirectGetError::MalformedRequest)?
        };
        if subject.is_empty() {
            return Err(DirectGetError::BadRequest);
        }
        if !request.last_by_subj.is_empty()
            || !request.next_by_subj.is_empty()
            || !request.multi_last.is_empty()
            || request.seq != 0
            || request.batch != 0
            || request.start_time.is_some()
            || request.up_to_seq != 0
            || request.up_to_time.is_some()
        {
            return Err(DirectGetError::BadRequest);
        }
        Ok(DirectGet {
            get: MessageGet::LastBySubject(String::from_utf8_lossy(subject).into_owned()),
            no_headers: request.no_hdr,
            batch: None,
            multi_last: None,
        })
    }
}

/// `$JS.API.STREAM.NAMES` / `$JS.API.STREAM.LIST` options.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NamesRequest {
    /// Paging offset (negative offsets are 0; the response clamps it to
    /// the total).
    pub offset: usize,
    /// Only streams with a subject overlapping this one.
    pub subject: Option<String>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct NamesBody {
    offset: i64,
    subject: String,
}

const NAMES_SCHEMA: GoSchema = GoSchema {
    struct_name: "JSApiStreamNamesRequest",
    field_types: &[("offset", "int")],
};

const LIST_SCHEMA: GoSchema = GoSchema {
    struct_name: "JSApiStreamListRequest",
    field_types: &[("offset", "int")],
};

impl NamesRequest {
    /// A STREAM.NAMES body (errors name `JSApiStreamNamesRequest`).
    pub fn parse(body: &[u8]) -> Result<NamesRequest, ApiError> {
        NamesRequest::parse_with(body, &NAMES_SCHEMA)
    }

    /// A STREAM.LIST body (errors name `JSApiStreamListRequest`).
    pub fn parse_list(body: &[u8]) -> Result<NamesRequest, ApiError> {
        NamesRequest::parse_with(body, &LIST_SCHEMA)
    }

    fn parse_with(body: &[u8], schema: &GoSchema) -> Result<NamesRequest, ApiError> {
        if !json::is_object_or_array(body) {
            return Ok(NamesRequest::default());
        }
        let body: NamesBody = json::decode_strict_with(body, schema)?;
        Ok(NamesRequest {
            offset: clamp_offset(body.offset),
            subject: non_empty(body.subject),
        })
    }
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

fn clamp_offset(offset: i64) -> usize {
    usize::try_from(offset.max(0)).unwrap_or(usize::MAX)
}

#[cfg(test)]
#[path = "requests_tests.rs"]
mod tests;
