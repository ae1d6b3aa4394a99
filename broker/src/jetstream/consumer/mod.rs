//! A consumer as its stream's task runs it: what it selects (filters, the
//! start the deliver policy chose), its delivery state ([`DeliveryState`]),
//! its waiting pull requests ([`PullQueue`]) and the running count of
//! messages it has not been sent yet (`num_pending`, kept like
//! nats-server's `npc`: counted once, then moved by deliveries and new
//! messages, and clamped by the stream's state when reported).
//!
//! The stream task owns every consumer of its stream; nothing here does IO.
//! The JSON side (config parsing, info responses) lives elsewhere; this is
//! what the delivery loop needs.

pub mod config;
pub mod delivery;
pub mod error;
pub mod pull;
pub mod rate_limit;
pub mod requests;
pub mod responses;
pub mod store;

use std::collections::VecDeque;

use bytes::Bytes;

use self::config::{AckPolicy, ConsumerConfig, DeliverPolicy, ReplayPolicy};
use self::delivery::{AckMode, DeliveryConfig, DeliveryState};
use self::pull::PullQueue;
use super::api::error::ApiError;
use super::stream::config::subject_matches;

/// Where a new consumer starts, as its deliver policy resolves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// `all`: the first message.
    All,
    /// `new`: after the last message now stored.
    New,
    /// `last`: the last (matching) message.
    Last,
    /// `by_start_sequence`.
    Sequence(u64),
    /// `by_start_time` (Unix ns).
    Time(u64),
    /// `last_per_subject`: the last message of every matching subject,
    /// then everything newer.
    LastPerSubject,
}

/// Flow control's window (nats-server's `JsFlowControlMaxPending`): the
/// most bytes a push consumer has outstanding once fully ramped up.
pub const FLOW_CONTROL_WINDOW_MAX_BYTES: u64 = 32 << 20;

/// A push consumer's delivery: where to, and how it is paced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushSpec {
    /// Shared, so each delivery routes to it without a copy.
    pub deliver_subject: Bytes,
    /// Empty: no queue group.
    pub deliver_group: String,
    pub flow_control: bool,
    /// `0`: no heartbeats.
    pub idle_heartbeat_ns: u64,
    /// `rate_limit_bps`; `0`: unpaced.
    pub rate_limit_bps: u64,
}

/// What the delivery loop needs from a consumer's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSpec {
    /// `filter_subject`/`filter_subjects`; empty matches everything.
    pub filters: Vec<String>,
    pub start: Start,
    pub delivery: DeliveryConfig,
    /// Pull requests queued at most (`max_waiting`).
    pub max_waiting: usize,
    /// Deliver headers and `Nats-Msg-Size`, not the payload.
    pub headers_only: bool,
    /// `Some` for a push consumer.
    pub push: Option<PushSpec>,
    /// `replay_policy: original`: new messages are spaced as they were
    /// stored.
    pub replay_original: bool,
    /// Delete the consumer after this long without interest (push) or
    /// requests (pull); `0`: never.
    pub inactive_threshold_ns: u64,
}

impl ConsumerSpec {
    /// What the delivery loop runs from a consumer's (checked) config.
    /// Features not built yet are refused here, explicitly.
    pub fn from_config(config: &ConsumerConfig) -> Result<ConsumerSpec, ApiError> {
        let not_yet =
            |what: &str| ApiError::new(500, 10012, format!("{what} are not supported yet"));
        let start = match config.deliver_policy {
            DeliverPolicy::All => Start::All,
            DeliverPolicy::New => Start::New,
            DeliverPolicy::Last => Start::Last,
            DeliverPolicy::ByStartSequence => Start::Sequence(config.opt_start_sequence),
            DeliverPolicy::ByStartTime => Start::Time(
                config
                    .opt_start_time
                    .as_ref()
                    .map_or(0, |time| time.unix_ns_clamped()),
            ),
            DeliverPolicy::LastPerSubject => Start::LastPerSubject,
        };
        if config.ack_policy == AckPolicy::FlowControl {
            return Err(not_yet("flow control ack policies"));
        }
        let push = (!config.deliver_subject.is_empty()).then(|| PushSpec {
            deliver_subject: Bytes::from(config.deliver_subject.clone()),
            deliver_group: config.deliver_group.clone(),
            flow_control: config.flow_control,
            idle_heartbeat_ns: config.idle_heartbeat_ns.max(0) as u64,
            rate_limit_bps: config.rate_limit_bps,
        });
        let ack = match config.ack_policy {
            AckPolicy::None => AckMode::None,
            AckPolicy::All | AckPolicy::FlowControl => AckMode::All,
            AckPolicy::Explicit => AckMode::Explicit,
        };
        Ok(ConsumerSpec {
            filters: config
                .subject_filters()
                .into_iter()
                .map(str::to_string)
                .collect(),
            start,
            delivery: DeliveryConfig {
                ack,
                ack_wait_ns: config.ack_wait_ns.max(0) as u64,
                backoff_ns: config
                    .backoff_ns
                    .iter()
                    .map(|delay| (*delay).max(0) as u64)
                    .collect(),
                max_deliver: (config.max_deliver > 0).then_some(config.max_deliver as u64),
                max_ack_pending: (config.max_ack_pending > 0)
                    .then_some(config.max_ack_pending as usize),
            },
            max_waiting: config.max_waiting.clamp(1, 1 << 20) as usize,
            headers_only: config.headers_only,
            push,
            replay_original: config.replay_policy == ReplayPolicy::Original,
            inactive_threshold_ns: config.inactive_threshold_ns.max(0) as u64,
        })
    }
}

impl ConsumerSpec {
    /// Caps max_ack_pending at `pending_max` (a durable's whole delivery
    /// state must fit one journal record): delivery then waits for acks
    /// there, as at a configured max_ack_pending. Info still reports the
    /// configured value.
    pub fn limit_pending(&mut self, pending_max: usize) {
        assert!(pending_max > 0);
        let limited = self
            .delivery
            .max_ack_pending
            .map_or(pending_max, |max| max.min(pending_max));
        self.delivery.max_ack_pending = Some(limited);
    }
}

/// One consumer of a stream.
#[derive(Debug)]
pub struct Consumer {
    pub name: String,
    /// The config as clients see it (info, updates, idempotent creates).
    pub config: ConsumerConfig,
    pub spec: ConsumerSpec,
    pub created_unix_ns: u64,
    pub delivery: DeliveryState,
    pub pull: PullQueue,
    /// Matching messages not yet delivered (an estimate between recounts).
    pub num_pending: u64,
    /// `delivered.last_active` / `ack_floor.last_active` (0: never).
    pub last_delivered_unix_ns: u64,
    pub last_acked_unix_ns: u64,
    /// When the consumer's timers (ack wait, pull expiry, heartbeats) are
    /// next due (Unix ns).
    pub wake_at_ns: Option<u64>,
    /// `last_per_subject`: the sequences still to deliver from the start's
    /// list, ascending; after them delivery resumes past `resume_after`.
    pub start_list: VecDeque<u64>,
    pub resume_after: u64,
    /// Push delivery's state (`Some` for push consumers).
    pub push: Option<PushState>,
    /// Replay original: (stored time, wall time) of the first message
    /// replayed, the clock later messages are spaced by.
    pub replay_clock: Option<(u64, u64)>,
    /// The stream's last sequence when the consumer was created: replay
    /// original paces messages up to it.
    pub replay_until: u64,
    /// Last time the consumer had interest or a request (Unix ns), for
    /// `inactive_threshold`.
    pub last_active_unix_ns: u64,
    /// The router's interest generation the waiting pull requests were
    /// last checked at (requests whose inbox lost its subscriber go).
    pub pull_interest_generation: u64,
}

/// A push consumer's pacing: interest, flow control and heartbeats
/// (nats-server's `active`, `pbytes`/`maxpb`/`fcid`/`fcsz`, `hb`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushState {
    /// Someone subscribes to the deliver subject.
    pub active: bool,
    /// The shard's interest generation `active` was computed at.
    pub interest_generation: u64,
    /// Bytes delivered and not yet released by a flow control reply.
    pub pending_bytes: u64,
    /// The current window (0: no flow control); doubles per reply up to
    /// [`FLOW_CONTROL_WINDOW_MAX_BYTES`].
    pub window_bytes: u64,
    /// The outstanding flow control request's reply subject.
    pub flow_control_reply: Option<String>,
    /// Bytes that reply releases.
    pub flow_control_bytes: u64,
    /// When the next idle heartbeat is due (Unix ns; 0: none).
    pub heartbeat_due_ns: u64,
    /// The `rate_limit_bps` bucket, made at the first paced delivery.
    pub rate_limit: Option<self::rate_limit::RateLimit>,
}

impl PushState {
    pub fn new(spec: &PushSpec) -> PushState {
        PushState {
            active: false,
            interest_generation: u64::MAX,
            pending_bytes: 0,
            window_bytes: if spec.flow_control {
                FLOW_CONTROL_WINDOW_MAX_BYTES / 16
            } else {
                0
            },
            flow_control_reply: None,
            flow_control_bytes: 0,
            heartbeat_due_ns: 0,
            rate_limit: None,
        }
    }

    /// Whether flow control holds deliveries back.
    pub fn stalled(&self) -> bool {
        self.window_bytes > 0 && self.pending_bytes > self.window_bytes
    }

    /// Accounts a delivery of `size_bytes`; returns whether a flow control
    /// request should follow it (nats-server's `needFlowControl`).
    pub fn delivered(&mut self, size_bytes: u64) -> bool {
        if self.window_bytes == 0 {
            return false;
        }
        self.pending_bytes += size_bytes;
        if self.flow_control_reply.is_none() {
            return self.pending_bytes > self.window_bytes / 2;
        }
        if self.pending_bytes - self.flow_control_bytes >= self.window_bytes {
            self.flow_control_bytes += size_bytes;
        }
        false
    }

    /// A flow control request went out with `reply`.
    pub fn requested(&mut self, reply: String) {
        self.flow_control_bytes = self.pending_bytes;
        self.flow_control_reply = Some(reply);
    }

    /// A flow control reply arrived on `subject`; returns whether it was
    /// the outstanding one (older ones are ignored, as nats-server does).
    pub fn replied(&mut self, subject: &str) -> bool {
        if self.flow_control_reply.as_deref() != Some(subject) {
            return false;
        }
        self.window_bytes = (self.window_bytes * 2).min(FLOW_CONTROL_WINDOW_MAX_BYTES);
        self.pending_bytes = self.pending_bytes.saturating_sub(self.flow_control_bytes);
        self.flow_control_reply = None;
        self.flow_control_bytes = 0;
        true
    }
}

impl Consumer {
    /// A consumer starting at `start_sequence` with `num_pending` matching
    /// messages from there (both resolved by the stream from `spec.start`).
    pub fn new(
        name: String,
        config: ConsumerConfig,
        spec: ConsumerSpec,
        created_unix_ns: u64,
        start_sequence: u64,
        num_pending: u64,
    ) -> Consumer {
        let delivery = DeliveryState::new(spec.delivery.clone(), start_sequence);
        let pull = PullQueue::new(spec.max_waiting.max(1));
        let push = spec.push.as_ref().map(PushState::new);
        Consumer {
            name,
            config,
            spec,
            created_unix_ns,
            delivery,
            pull,
            num_pending,
            last_delivered_unix_ns: 0,
            last_acked_unix_ns: 0,
            wake_at_ns: None,
            start_list: VecDeque::new(),
            resume_after: 0,
            push,
            replay_clock: None,
            replay_until: 0,
            last_active_unix_ns: created_unix_ns,
            pull_interest_generation: 0,
        }
    }

    /// Whether the consumer was created with a durable name (its state is
    /// kept across restarts).
    pub fn is_durable(&self) -> bool {
        !self.config.durable_name.is_empty()
    }

    /// Arms a push consumer's idle heartbeat one interval after `now_ns`
    /// (nothing without one): where it starts to run (created, or its
    /// leader taking office) or its push settings change. Deliveries
    /// re-arm it; without this a leader that delivers nothing would send
    /// no heartbeat at all.
    pub fn arm_idle_heartbeat(&mut self, now_ns: u64) {
        if let (Some(spec), Some(push)) = (&self.spec.push, &mut self.push) {
            if spec.idle_heartbeat_ns > 0 {
                push.heartbeat_due_ns = now_ns + spec.idle_heartbeat_ns;
            }
        }
    }

    /// When the consumer's own housekeeping is next due: its idle
    /// heartbeat, or the inactivity check of `inactive_threshold`.
    pub fn next_housekeeping_ns(&self, now_ns: u64) -> Option<u64> {
        let heartbeat = self
            .push
            .as_ref()
            .map(|push| push.heartbeat_due_ns)
            .filter(|due_ns| *due_ns > 0);
        let inactive = (self.spec.inactive_threshold_ns > 0)
            .then(|| (self.last_active_unix_ns + self.spec.inactive_threshold_ns).max(now_ns));
        match (heartbeat, inactive) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A message this consumer selects left the stream: if it was still
    /// ahead (not yet delivered), one pending message less.
    pub fn lost(&mut self, sequence: u64) {
        if let Ok(position) = self.start_list.binary_search(&sequence) {
            self.start_list.remove(position);
            self.num_pending = self.num_pending.saturating_sub(1);
        } else if sequence >= self.delivery.next_stream_sequence() && sequence > self.resume_after {
            self.num_pending = self.num_pending.saturating_sub(1);
        }
    }

    /// Whether `subject` passes the consumer's filters.
    pub fn matches(&self, subject: &[u8]) -> bool {
        if self.spec.filters.is_empty() {
            return true;
        }
        let subject = String::from_utf8_lossy(subject);
        self.spec
            .filters
            .iter()
            .any(|filter| subject_matches(filter, &subject))
    }

    /// `num_pending` as reported: never more than the stream could hold
    /// from the next sequence on (nats-server's `checkNumPending`).
    pub fn reported_num_pending(&self, stream_messages: u64, stream_last_sequence: u64) -> u64 {
        let next = self.delivery.next_stream_sequence();
        if next > stream_last_sequence {
            return 0;
        }
        self.num_pending
            .min(stream_messages)
            .min(stream_last_sequence - next + 1)
    }

    /// Notes the consumer's next wake-up (the earliest wins).
    pub fn wake_at(&mut self, at_ns: Option<u64>) {
        if let Some(at_ns) = at_ns {
            self.wake_at_ns = Some(self.wake_at_ns.map_or(at_ns, |current| current.min(at_ns)));
        }
    }
}

/// The ack subject of a delivery (v1, nine tokens):
/// `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>`.
#[cfg(test)]
pub fn ack_subject(
    stream: &str,
    consumer: &str,
    delivery_count: u64,
    stream_sequence: u64,
    consumer_sequence: u64,
    timestamp_ns: u64,
    pending: u64,
) -> String {
    let mut subject = String::new();
    write_ack_subject(
        &mut subject,
        stream,
        consumer,
        [
            delivery_count,
            stream_sequence,
            consumer_sequence,
            timestamp_ns,
            pending,
        ],
    );
    subject
}

/// Writes an ack subject into `subject` (cleared first): built by hand into
/// a reused buffer, one per delivery, as `format!` of five numbers costs
/// more than the rest of the subject. `numbers` are the delivery count,
/// stream sequence, consumer sequence, timestamp and pending count.
pub fn write_ack_subject(subject: &mut String, stream: &str, consumer: &str, numbers: [u64; 5]) {
    const NUMBERS_BYTES_MAX: usize = 5 * (20 + 1);
    subject.clear();
    subject.reserve("$JS.ACK.".len() + stream.len() + consumer.len() + 1 + NUMBERS_BYTES_MAX);
    subject.push_str("$JS.ACK.");
    subject.push_str(stream);
    subject.push('.');
    subject.push_str(consumer);
    for number in numbers {
        subject.push('.');
        push_decimal(subject, number);
    }
}

fn push_decimal(out: &mut String, value: u64) {
    out.push_str(itoa::Buffer::new().format(value));
}

/// The header block of a headers-only delivery: the stored headers (or an
/// empty block) plus `Nats-Msg-Size: <payload bytes>`.
pub fn headers_only(header_block: &[u8], payload_bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(header_block.len() + 32);
    if header_block.len() >= 4 && header_block.ends_with(b"\r\n\r\n") {
        out.extend_from_slice(&header_block[..header_block.len() - 2]);
    } else {
        out.extend_from_slice(b"NATS/1.0\r\n");
    }
    out.extend_from_slice(format!("Nats-Msg-Size: {payload_bytes}\r\n\r\n").as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jetstream::consumer::delivery::AckMode;

    fn spec(filters: &[&str]) -> ConsumerSpec {
        ConsumerSpec {
            filters: filters.iter().map(|filter| filter.to_string()).collect(),
            start: Start::All,
            delivery: DeliveryConfig {
                ack: AckMode::Explicit,
                ack_wait_ns: 30_000_000_000,
                backoff_ns: Vec::new(),
                max_deliver: None,
                max_ack_pending: Some(1000),
            },
            max_waiting: 512,
            headers_only: false,
            push: None,
            replay_original: false,
            inactive_threshold_ns: 0,
        }
    }

    #[test]
    fn filters_select_subjects() {
        let all = Consumer::new("c".into(), ConsumerConfig::default(), spec(&[]), 0, 1, 0);
        assert!(all.matches(b"anything.at.all"));
        let some = Consumer::new(
            "c".into(),
            ConsumerConfig::default(),
            spec(&["orders.*", "returns.>"]),
            0,
            1,
            0,
        );
        assert!(some.matches(b"orders.1"));
        assert!(some.matches(b"returns.a.b"));
        assert!(!some.matches(b"orders.1.2"));
        assert!(!some.matches(b"other"));
    }

    #[test]
    fn reported_pending_is_clamped_by_the_stream() {
        let mut consumer =
            Consumer::new("c".into(), ConsumerConfig::default(), spec(&[]), 0, 5, 10);
        assert_eq!(consumer.reported_num_pending(100, 9), 5);
        assert_eq!(consumer.reported_num_pending(3, 100), 3);
        assert_eq!(consumer.reported_num_pending(100, 4), 0);
        consumer.num_pending = 2;
        assert_eq!(consumer.reported_num_pending(100, 100), 2);
    }

    #[test]
    fn ack_subjects_and_headers_only_blocks_are_exact() {
        assert_eq!(
            ack_subject("ORDERS", "P1", 1, 1, 1, 1796029674907003966, 2),
            "$JS.ACK.ORDERS.P1.1.1.1.1796029674907003966.2"
        );
        assert_eq!(
            headers_only(b"", 5),
            b"NATS/1.0\r\nNats-Msg-Size: 5\r\n\r\n"
        );
        assert_eq!(
            headers_only(b"NATS/1.0\r\nA: b\r\n\r\n", 0),
            b"NATS/1.0\r\nA: b\r\nNats-Msg-Size: 0\r\n\r\n"
        );
    }

    #[test]
    fn the_earliest_wake_up_wins() {
        let mut consumer = Consumer::new("c".into(), ConsumerConfig::default(), spec(&[]), 0, 1, 0);
        consumer.wake_at(Some(10));
        consumer.wake_at(None);
        consumer.wake_at(Some(20));
        assert_eq!(consumer.wake_at_ns, Some(10));
        consumer.wake_at(Some(5));
        assert_eq!(consumer.wake_at_ns, Some(5));
    }

    fn push_spec(flow_control: bool) -> PushSpec {
        PushSpec {
            deliver_subject: "deliver".into(),
            deliver_group: String::new(),
            flow_control,
            idle_heartbeat_ns: 0,
            rate_limit_bps: 0,
        }
    }

    #[test]
    fn flow_control_requests_stalls_and_ramps_up() {
        let mut push = PushState::new(&push_spec(true));
        let window = FLOW_CONTROL_WINDOW_MAX_BYTES / 16;
        assert_eq!(push.window_bytes, window);
        // Up to half the window: nothing asked.
        assert!(!push.delivered(window / 2));
        // Past half: a request.
        assert!(push.delivered(1));
        push.requested("$JS.FC.S.C.abcd".into());
        assert_eq!(push.flow_control_bytes, window / 2 + 1);
        // No second request while one is out; stalled past the window.
        assert!(!push.delivered(window / 2 - 2));
        assert!(!push.stalled());
        assert!(!push.delivered(2));
        assert!(push.stalled());
        // A stale reply changes nothing; the outstanding one releases what
        // it covered and doubles the window.
        assert!(!push.replied("$JS.FC.S.C.zzzz"));
        assert!(push.stalled());
        assert!(push.replied("$JS.FC.S.C.abcd"));
        assert!(!push.stalled());
        assert_eq!(push.window_bytes, window * 2);
        assert_eq!(push.pending_bytes, window / 2);
        assert_eq!(push.flow_control_reply, None);
        // The window never grows past the maximum.
        for _ in 0..10 {
            push.requested("r".into());
            push.replied("r");
        }
        assert_eq!(push.window_bytes, FLOW_CONTROL_WINDOW_MAX_BYTES);
    }

    #[test]
    fn without_flow_control_nothing_is_counted() {
        let mut push = PushState::new(&push_spec(false));
        assert!(!push.delivered(u64::MAX / 2));
        assert!(!push.stalled());
        assert_eq!(push.pending_bytes, 0);
    }

    #[test]
    fn ack_subjects_carry_every_number_in_nats_server_order() {
        assert_eq!(
            ack_subject("ORDERS", "worker", 1, 42, 7, 1_700_000_000_123_456_789, 0),
            "$JS.ACK.ORDERS.worker.1.42.7.1700000000123456789.0"
        );
        assert_eq!(
            ack_subject("S", "C", u64::MAX, 10, 100, 9, 1_000),
            format!("$JS.ACK.S.C.{}.10.100.9.1000", u64::MAX)
        );
    }
}
