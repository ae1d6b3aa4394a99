//! Consumer request bodies other than the configuration, parsed with
//! nats-server 2.15.1's rules (`server/consumer.go`,
//! `server/jetstream_api.go`):
//! - [`PullRequest`]: the `$JS.API.CONSUMER.MSG.NEXT.<S>.<C>` body and the
//!   `+NXT` ack body (`nextReqFromMsg`, the checks of
//!   `processNextMsgRequest`). Not strict: unknown fields are ignored, and
//!   errors are status messages ([`PullStatus`]), not JSON.
//! - [`AckBody`]: what a publish to an ack subject means (`processAck`,
//!   `processNak`, `processTerm`).
//! - [`AckSubject`], the reply subject of a delivery:
//!   `$JS.ACK.<stream>.<consumer>.<delivered>.<stream_seq>.<consumer_seq>.<timestamp_ns>.<pending>`
//!   (v1, 9 tokens), also read in
//!   the v2 form (≥ 11 tokens: `$JS.ACK.<domain>.<account hash>.…`) as
//!   `ackReplyInfo` and clients do.
//! - [`ConsumersRequest`]: the CONSUMER.NAMES / LIST paging body
//!   (`JSApiConsumersRequest`: only `offset`; strict).

use super::super::api::error::ApiError;
use super::super::api::json::{self, DecodeMode, GoSchema};
use super::super::expiry::parse_go_duration_ns;
use super::config::{ConsumerConfig, PriorityPolicy};
use super::responses::PullStatus;

// ---------------------------------------------------------------------------
// Pull requests.

/// The ADR-42 fields of a pull request (present whenever the body was a
/// JSON object, as nats-server's embedded `PriorityGroup`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PriorityRequest {
    pub group: String,
    pub min_pending: i64,
    pub min_ack_pending: i64,
    /// The pin id the client holds.
    pub id: String,
    pub priority: i64,
}

/// A parsed pull request. `batch` may be 0 or negative (a bare `"-3"`,
/// `{"batch":-1}`); nats-server then delivers nothing for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    pub batch: i64,
    /// `0`: no expiry. Negative: already expired.
    pub expires_ns: i64,
    pub no_wait: bool,
    /// `0` or below: no byte limit.
    pub max_bytes: i64,
    pub idle_heartbeat_ns: i64,
    /// `Some` for a JSON body.
    pub priority: Option<PriorityRequest>,
}

impl Default for PullRequest {
    /// An empty body: one message, no expiry.
    fn default() -> PullRequest {
        PullRequest {
            batch: 1,
            expires_ns: 0,
            no_wait: false,
            max_bytes: 0,
            idle_heartbeat_ns: 0,
            priority: None,
        }
    }
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct PullRequestBody {
    expires: i64,
    batch: i64,
    max_bytes: i64,
    no_wait: bool,
    idle_heartbeat: i64,
    group: String,
    min_pending: i64,
    min_ack_pending: i64,
    id: String,
    priority: i64,
}

/// nats-server decodes into a `**JSApiConsumerGetNextRequest`, so its error
/// texts name the struct as empty: `Go struct field .batch of type int`.
const PULL_SCHEMA: GoSchema = GoSchema {
    struct_name: "",
    field_types: &[
        ("expires", "time.Duration"),
        ("batch", "int"),
        ("max_bytes", "int"),
        ("idle_heartbeat", "time.Duration"),
        ("priority", "int"),
    ],
};

/// The priority range of `prioritized` consumers.
pub const PRIORITY_MAX: i64 = 9;

/// Go's `bytes.TrimSpace` for ASCII whitespace (and the Unicode spaces a
/// UTF-8 body may carry).
fn trim_space(body: &[u8]) -> &[u8] {
    let is_space = |byte: &u8| matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0B | 0x0C);
    let start = body
        .iter()
        .position(|byte| !is_space(byte))
        .unwrap_or(body.len());
    let end = body
        .iter()
        .rposition(|byte| !is_space(byte))
        .map_or(start, |end| end + 1);
    body.get(start..end).unwrap_or_default()
}

impl PullRequest {
    /// nats-server's `nextReqFromMsg`: an empty (or all-space) body is one
    /// message; a body starting with `{` is JSON (Go's `json.Unmarshal`,
    /// unknown fields ignored; failures are `400 Bad Request - <Go error>`);
    /// `idle_heartbeat * 2 > expires` is `400 Bad Request - heartbeat value
    /// too large`; anything else is a batch size if Go's `strconv.Atoi`
    /// reads it, else one message.
    pub fn parse(body: &[u8]) -> Result<PullRequest, PullStatus> {
        let body = trim_space(body);
        if body.is_empty() {
            return Ok(PullRequest::default());
        }
        if body.first() == Some(&b'{') {
            let request: PullRequestBody = json::decode(body, &PULL_SCHEMA, DecodeMode::Lenient)
                .map_err(|error| PullStatus::BadRequest(unmarshal_error_text(error.text())))?;
            // Go's `time.Duration` arithmetic wraps.
            if request.idle_heartbeat > 0
                && request.idle_heartbeat.wrapping_mul(2) > request.expires
            {
                return Err(PullStatus::BadRequest("heartbeat value too large".into()));
            }
            return Ok(PullRequest {
                batch: request.batch,
                expires_ns: request.expires,
                no_wait: request.no_wait,
                max_bytes: request.max_bytes,
                idle_heartbeat_ns: request.idle_heartbeat,
                priority: Some(PriorityRequest {
                    group: request.group,
                    min_pending: request.min_pending,
                    min_ack_pending: request.min_ack_pending,
                    id: request.id,
                    priority: request.priority,
                }),
            });
        }
        let batch = std::str::from_utf8(body)
            .ok()
            .and_then(go_atoi)
            .unwrap_or(1);
        Ok(PullRequest {
            batch,
            ..PullRequest::default()
        })
    }

    /// The checks of `processNextMsgRequest` that need only the consumer's
    /// configuration, in its order: `max_batch`, `max_expires`, `max_bytes`
    /// caps (409), then the priority-group rules (400). Pin-id mismatch
    /// (423), the wait queue (409 Exceeded MaxWaiting) and `no_wait` (404 /
    /// 408 Requests Pending) need the consumer's state: see
    /// [`PullRequest::no_wait_answer`].
    pub fn check(&self, config: &ConsumerConfig) -> Result<(), PullStatus> {
        if config.max_batch > 0 && self.batch > config.max_batch {
            return Err(PullStatus::ExceededMaxRequestBatch(config.max_batch));
        }
        if self.expires_ns != 0
            && config.max_expires_ns > 0
            && self.expires_ns > config.max_expires_ns
        {
            return Err(PullStatus::ExceededMaxRequestExpires(config.max_expires_ns));
        }
        if self.max_bytes > 0 && config.max_bytes > 0 && self.max_bytes > config.max_bytes {
            return Err(PullStatus::ExceededMaxRequestMaxBytes(config.max_bytes));
        }
        let Some(priority) = &self.priority else {
            return Ok(());
        };
        let bad = |text: &str| Err(PullStatus::BadRequest(text.to_string()));
        if (priority.min_pending != 0 || priority.min_ack_pending != 0)
            && config.priority_policy != PriorityPolicy::Overflow
        {
            return bad("Not a Overflow Priority consumer");
        }
        if !priority.id.is_empty() && config.priority_policy != PriorityPolicy::PinnedClient {
            return bad("Not a Pinned Client Priority consumer");
        }
        if !(0..=PRIORITY_MAX).contains(&priority.priority) {
            return bad("Priority must be between 0 and 9");
        }
        if config.priority_policy != PriorityPolicy::None {
            if priority.group.is_empty() {
                return bad("Priority Group missing");
            }
            if !config.priority_groups.contains(&priority.group) {
                return bad("Invalid Priority Group");
            }
        }
        Ok(())
    }

    /// For a `no_wait` request: `Some(404)` when nothing is pending and no
    /// `expires` was given (nats-server answers at once); `Some(408
    /// Requests Pending)` when the queued requests' outstanding batches
    /// already cover the pending messages; `None` otherwise (queue it; with
    /// `expires` it ends at the first delivery, or 408 at expiry).
    pub fn no_wait_answer(
        &self,
        messages_pending: u64,
        queued_batches_pending: u64,
    ) -> Option<PullStatus> {
        if !self.no_wait {
            return None;
        }
        if messages_pending == 0 && self.expires_ns == 0 {
            return Some(PullStatus::NoMessages);
        }
        if messages_pending > 0 && messages_pending < queued_batches_pending {
            return Some(PullStatus::RequestsPending);
        }
        None
    }
}

/// `json.Unmarshal` validates the whole input first, so a truncated body
/// is `unexpected end of JSON input` (the streaming decoder's
/// `unexpected EOF`).
fn unmarshal_error_text(text: &str) -> String {
    if text == "unexpected EOF" {
        "unexpected end of JSON input".to_string()
    } else {
        text.to_string()
    }
}

/// Go's `strconv.Atoi`: optional sign, ASCII digits, within `i64`.
fn go_atoi(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

// ---------------------------------------------------------------------------
// Ack bodies.

/// What a message published to an ack subject asks for (the body after
/// any headers). nats-server answers a reply subject on the ack with an
/// empty message for everything except [`AckBody::Next`] (whose reply
/// receives messages), including [`AckBody::Unknown`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckBody {
    /// Empty, `+ACK` or `+OK` (exactly).
    Ack,
    /// `-NAK…`: redeliver; after `delay_ns` when the rest is `{"delay":ns}`
    /// or a Go duration (`-NAK 10s`); a rest that does not parse is a plain
    /// NAK (nats-server logs a warning).
    Nak { delay_ns: Option<i64> },
    /// `+WPI` (exactly): in progress, restart the ack wait.
    Progress,
    /// `+NXT…`: ack, then a pull request (the rest of the body) whose reply
    /// is the ack's reply subject. `Err` is the status for that reply.
    Next(Result<PullRequest, PullStatus>),
    /// `+TERM…`: stop redelivering; the rest, trimmed, is the reason.
    Term { reason: Option<String> },
    /// Anything else: no effect (the ack reply is still sent).
    Unknown,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct NakOptions {
    delay: i64,
}

const NAK_SCHEMA: GoSchema = GoSchema {
    struct_name: "ConsumerNakOptions",
    field_types: &[("delay", "time.Duration")],
};

impl AckBody {
    /// `processAck`'s dispatch, in its order (prefix matches for `+NXT`,
    /// `-NAK` and `+TERM`; exact matches otherwise; no trimming).
    pub fn parse(body: &[u8]) -> AckBody {
        if body.is_empty() || body == b"+ACK" || body == b"+OK" {
            return AckBody::Ack;
        }
        if let Some(rest) = body.strip_prefix(b"+NXT") {
            return AckBody::Next(PullRequest::parse(rest));
        }
        if let Some(rest) = body.strip_prefix(b"-NAK") {
            return AckBody::Nak {
                delay_ns: nak_delay(rest),
            };
        }
        if body == b"+WPI" {
            return AckBody::Progress;
        }
        if let Some(rest) = body.strip_prefix(b"+TERM") {
            let reason = trim_space(rest);
            return AckBody::Term {
                reason: (!reason.is_empty()).then(|| String::from_utf8_lossy(reason).into_owned()),
            };
        }
        AckBody::Unknown
    }
}

/// `processNak`'s delay: `{…}` decoded as `ConsumerNakOptions` (Go's
/// `json.Unmarshal`), else `time.ParseDuration`.
fn nak_delay(rest: &[u8]) -> Option<i64> {
    let argument = trim_space(rest);
    if argument.is_empty() {
        return None;
    }
    if argument.first() == Some(&b'{') {
        let options: NakOptions = json::decode(argument, &NAK_SCHEMA, DecodeMode::Lenient).ok()?;
        return Some(options.delay);
    }
    parse_go_duration_ns(argument).and_then(|delay| i64::try_from(delay).ok())
}

// ---------------------------------------------------------------------------
// Ack subjects.

/// The reply subject of a delivered message, borrowed from it: every ack
/// of every message is decoded, so decoding allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckSubject<'a> {
    pub stream: &'a str,
    pub consumer: &'a str,
    /// How often this message has been delivered (1 the first time).
    pub delivered_count: u64,
    pub stream_sequence: u64,
    pub consumer_sequence: u64,
    /// The message's store time, Unix nanoseconds.
    pub timestamp_ns: i64,
    /// `num_pending` after this delivery.
    pub pending: u64,
    /// v2 only: the domain token (`_` when none) and the account hash.
    pub domain: Option<&'a str>,
    pub account_hash: Option<&'a str>,
}

/// Tokens of a v1 ack subject.
pub const ACK_TOKENS_V1: usize = 9;
/// Fewest tokens of a v2 ack subject.
pub const ACK_TOKENS_V2_MIN: usize = 11;

impl<'a> AckSubject<'a> {
    /// The v1 subject nats-server sends by default.
    pub fn encode(&self) -> String {
        format!(
            "$JS.ACK.{}.{}.{}.{}.{}.{}.{}",
            self.stream,
            self.consumer,
            self.delivered_count,
            self.stream_sequence,
            self.consumer_sequence,
            self.timestamp_ns,
            self.pending
        )
    }

    /// Reads a v1 (exactly 9 tokens) or v2 (11 or more) ack subject. `None`
    /// for any other shape, a name that is not UTF-8, or a number field
    /// that is not all ASCII digits or overflows (nats-server then matches
    /// no pending message).
    pub fn decode(subject: &'a [u8]) -> Option<AckSubject<'a>> {
        let mut tokens: [&[u8]; ACK_TOKENS_V2_MIN] = [&[]; ACK_TOKENS_V2_MIN];
        let mut count = 0;
        for token in subject.split(|&byte| byte == b'.') {
            if let Some(slot) = tokens.get_mut(count) {
                *slot = token;
            }
            count += 1;
        }
        if (count != ACK_TOKENS_V1 && count < ACK_TOKENS_V2_MIN)
            || tokens[0] != b"$JS"
            || tokens[1] != b"ACK"
        {
            return None;
        }
        let offset = if count >= ACK_TOKENS_V2_MIN { 4 } else { 2 };
        let text = |index: usize| std::str::from_utf8(tokens[index]).ok();
        let number = |index: usize| -> Option<u64> {
            let token = tokens[offset + index];
            if token.is_empty() {
                return None;
            }
            token.iter().try_fold(0u64, |value, &byte| {
                if !byte.is_ascii_digit() {
                    return None;
                }
                value.checked_mul(10)?.checked_add(u64::from(byte - b'0'))
            })
        };
        let (domain, account_hash) = if offset == 4 {
            (Some(text(2)?), Some(text(3)?))
        } else {
            (None, None)
        };
        Some(AckSubject {
            stream: text(offset)?,
            consumer: text(offset + 1)?,
            delivered_count: number(2)?,
            stream_sequence: number(3)?,
            consumer_sequence: number(4)?,
            timestamp_ns: i64::try_from(number(5)?).ok()?,
            pending: number(6)?,
            domain,
            account_hash,
        })
    }
}

// ---------------------------------------------------------------------------
// NAMES / LIST paging.

/// `$JS.API.CONSUMER.NAMES.<S>` / `LIST.<S>` options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConsumersRequest {
    /// Negative offsets are 0; the response clamps it to the total.
    pub offset: usize,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct ConsumersBody {
    offset: i64,
}

const CONSUMERS_SCHEMA: GoSchema = GoSchema {
    struct_name: "JSApiConsumersRequest",
    field_types: &[("offset", "int")],
};

impl ConsumersRequest {
    /// Only a body starting with `{` or `[` is decoded (strictly: an
    /// unknown field such as `subject` is `10025`); any other body means
    /// no options. nats-server's consumer paging has no subject filter.
    pub fn parse(body: &[u8]) -> Result<ConsumersRequest, ApiError> {
        if !json::is_object_or_array(body) {
            return Ok(ConsumersRequest::default());
        }
        let body: ConsumersBody = json::decode_strict_with(body, &CONSUMERS_SCHEMA)?;
        Ok(ConsumersRequest {
            offset: usize::try_from(body.offset.max(0)).unwrap_or(usize::MAX),
        })
    }
}

#[cfg(test)]
#[path = "requests_tests.rs"]
mod tests;
