//! `ConsumerConfig`: what a consumer is configured as, parsed from a
//! `CONSUMER.CREATE` / `CONSUMER.DURABLE.CREATE` request, normalised and
//! validated as nats-server 2.15.1 does, and written back as it writes it.
//!
//! What mirrors what in nats-server (`server/jetstream_api.go`,
//! `server/consumer.go`, `server/jetstream_versioning.go`):
//! - [`CreateTarget::from_tokens`]: the subject forms `jsConsumerCreateRequest`
//!   is subscribed to, and which tokens are stream, consumer and filter;
//! - [`parse_create`]: `jsConsumerCreateRequest` (subject/body checks), then
//!   `setStaticConsumerMetadata`, `setConsumerConfigDefaults`,
//!   `checkConsumerCfg` and the checks of
//!   `(*stream).addConsumerWithAssignment` (existing consumer, action,
//!   max consumers, work-queue rules, name), in that order;
//! - [`check_update`]: `(*Account).checkNewConsumerConfig` (the `500/10012`
//!   texts of `(*consumer).updateConfig`);
//! - [`check_workqueue_overlap`]: `(*stream).partitionUnique` and the
//!   10099 rule;
//! - [`ConsumerConfig::same_as`]: `copyConsumerMetadata` + `reflect.DeepEqual`;
//! - [`ephemeral_name`]: `createConsumerName` (8 characters of nats-server's
//!   base-62 alphabet; the randomness is an argument).
//!
//! Wire format: the JSON object of spec §6.2 in Go's field order with its
//! `omitempty` rules ([`ConsumerConfig::write_json`]); the stored form is the
//! same without the dynamic `_nats.ver`/`_nats.level` metadata.
//!
//! Single-server simplifications (documented where they apply): no account
//! or server JetStream limits (only the stream's `consumer_limits`), no
//! clustering, and a changed push `deliver_subject` is never "in use".

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserialize, Deserializer};

use super::super::api::error::ApiError;
use super::super::api::json::{self, GoSchema, GoTime, RawJsonVisitor, RAW_JSON};
use super::super::stream::config::{
    is_valid_subject, subject_is_subset, subjects_overlap, Retention, StreamConfig, API_LEVEL,
    DESCRIPTION_BYTES_MAX, METADATA_BYTES_MAX, NAME_BYTES_MAX, SERVER_LEVEL_KEY, SERVER_VERSION,
    SERVER_VERSION_KEY,
};
use super::error::go_duration_text;

/// nats-server's `JsAckWaitDefault`: 30 s, for ack policies all/explicit.
pub const ACK_WAIT_DEFAULT_NS: i64 = 30_000_000_000;
/// nats-server's `JsDeleteWaitTimeDefault`: ephemerals go after 5 s idle.
pub const INACTIVE_THRESHOLD_DEFAULT_NS: i64 = 5_000_000_000;
/// nats-server's `JsDefaultMaxAckPending`.
pub const MAX_ACK_PENDING_DEFAULT: i64 = 1000;
/// nats-server's `JSWaitQueueDefaultMax`: queued pull requests.
pub const MAX_WAITING_DEFAULT: i64 = 512;
/// nats-server's `JsDefaultPinnedTTL`: 2 minutes, for pinned_client.
pub const PRIORITY_TIMEOUT_DEFAULT_NS: i64 = 120_000_000_000;
/// nats-server's `sourceHealthHB`: the heartbeat the flow_control ack policy
/// sets and requires.
pub const FLOW_CONTROL_ACK_HEARTBEAT_NS: i64 = 1_000_000_000;
/// Smallest push `idle_heartbeat`: 100 ms.
pub const HEARTBEAT_MIN_NS: i64 = 100_000_000;
/// Smallest non-zero `max_expires`: 1 ms.
pub const MAX_EXPIRES_MIN_NS: i64 = 1_000_000;
/// Longest priority group name (`validGroupName`).
pub const PRIORITY_GROUP_BYTES_MAX: usize = 16;
/// Length of a server-generated consumer name.
pub const EPHEMERAL_NAME_BYTES: usize = 8;
/// The alphabet of generated names (nats-server's `digits`, base 62).
pub const EPHEMERAL_NAME_ALPHABET: &[u8; 62] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// How often [`parse_create`] draws a new generated name when the previous
/// one is taken before it gives up (nats-server loops forever; with 62^8
/// names a collision is already improbable).
pub const EPHEMERAL_NAME_ATTEMPTS_MAX: usize = 64;
/// The text of the store failure nats-server answers (500/10012) when a
/// consumer's directory name is too long for the file system.
pub const STORE_FAILED_TEXT: &str = "error creating store for consumer";

// ---------------------------------------------------------------------------
// Enumerations, decoded from their raw JSON as nats-server's `UnmarshalJSON`.

/// `deliver_policy`: where delivery starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeliverPolicy {
    #[default]
    All,
    Last,
    New,
    ByStartSequence,
    ByStartTime,
    LastPerSubject,
}

/// `ack_policy`. The default (field absent) is `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AckPolicy {
    #[default]
    None,
    All,
    Explicit,
    /// 2.14+: acks ride on flow-control responses (push, sourcing).
    FlowControl,
}

/// `replay_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplayPolicy {
    #[default]
    Instant,
    Original,
}

/// `priority_policy` (ADR-42).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PriorityPolicy {
    #[default]
    None,
    Overflow,
    PinnedClient,
    Prioritized,
}

/// The request's `action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CreateAction {
    /// `""` or absent: create, or update an existing consumer.
    #[default]
    CreateOrUpdate,
    /// `"create"`: an existing consumer must have the same configuration.
    Create,
    /// `"update"`: the consumer must exist.
    Update,
}

impl DeliverPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliverPolicy::All => "all",
            DeliverPolicy::Last => "last",
            DeliverPolicy::New => "new",
            DeliverPolicy::ByStartSequence => "by_start_sequence",
            DeliverPolicy::ByStartTime => "by_start_time",
            DeliverPolicy::LastPerSubject => "last_per_subject",
        }
    }
}

impl AckPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            AckPolicy::None => "none",
            AckPolicy::All => "all",
            AckPolicy::Explicit => "explicit",
            AckPolicy::FlowControl => "flow_control",
        }
    }
}

impl ReplayPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ReplayPolicy::Instant => "instant",
            ReplayPolicy::Original => "original",
        }
    }
}

impl PriorityPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PriorityPolicy::None => "none",
            PriorityPolicy::Overflow => "overflow",
            PriorityPolicy::PinnedClient => "pinned_client",
            PriorityPolicy::Prioritized => "prioritized",
        }
    }
}

/// Go's `fmt.Errorf("can not unmarshal %q", data)`.
fn cannot_unmarshal(raw: &str) -> String {
    format!("can not unmarshal {}", json::quote_raw(raw))
}

/// Implements `Deserialize` for an enum read from its raw JSON text.
macro_rules! raw_enum {
    ($type:ty, $expecting:literal, $parse:expr) => {
        impl<'de> Deserialize<'de> for $type {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_newtype_struct(
                    RAW_JSON,
                    RawJsonVisitor {
                        expecting: $expecting,
                        parse: $parse,
                    },
                )
            }
        }
    };
}

raw_enum!(DeliverPolicy, "a deliver policy", |raw: &str| match raw {
    // nats-server reads "undefined" as all.
    "\"all\"" | "\"undefined\"" => Ok(DeliverPolicy::All),
    "\"last\"" => Ok(DeliverPolicy::Last),
    "\"new\"" => Ok(DeliverPolicy::New),
    "\"by_start_sequence\"" => Ok(DeliverPolicy::ByStartSequence),
    "\"by_start_time\"" => Ok(DeliverPolicy::ByStartTime),
    "\"last_per_subject\"" => Ok(DeliverPolicy::LastPerSubject),
    _ => Err(cannot_unmarshal(raw)),
});

raw_enum!(AckPolicy, "an ack policy", |raw: &str| match raw {
    "\"none\"" => Ok(AckPolicy::None),
    "\"all\"" => Ok(AckPolicy::All),
    "\"explicit\"" => Ok(AckPolicy::Explicit),
    "\"flow_control\"" => Ok(AckPolicy::FlowControl),
    _ => Err(cannot_unmarshal(raw)),
});

raw_enum!(ReplayPolicy, "a replay policy", |raw: &str| match raw {
    "\"instant\"" => Ok(ReplayPolicy::Instant),
    "\"original\"" => Ok(ReplayPolicy::Original),
    _ => Err(cannot_unmarshal(raw)),
});

raw_enum!(PriorityPolicy, "a priority policy", |raw: &str| match raw {
    "\"none\"" => Ok(PriorityPolicy::None),
    "\"overflow\"" => Ok(PriorityPolicy::Overflow),
    "\"pinned_client\"" => Ok(PriorityPolicy::PinnedClient),
    "\"prioritized\"" => Ok(PriorityPolicy::Prioritized),
    _ => Err(format!("unknown priority policy: {raw}")),
});

raw_enum!(CreateAction, "a consumer action", |raw: &str| match raw {
    "\"\"" => Ok(CreateAction::CreateOrUpdate),
    "\"create\"" => Ok(CreateAction::Create),
    "\"update\"" => Ok(CreateAction::Update),
    _ => Err(format!("unknown consumer action: {raw}")),
});

// ---------------------------------------------------------------------------
// The configuration.

/// A consumer's configuration, normalised (defaults filled in) once it has
/// gone through [`parse_create`]. Integer limits are Go `int`s (`i64`);
/// durations are nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerConfig {
    /// Empty: ephemeral.
    pub durable_name: String,
    /// Empty for a legacy ephemeral whose name the server generated.
    pub name: String,
    pub description: String,
    pub deliver_policy: DeliverPolicy,
    /// `0`: none.
    pub opt_start_sequence: u64,
    pub opt_start_time: Option<GoTime>,
    pub ack_policy: AckPolicy,
    /// `0` only for ack policy none (then kept as sent).
    pub ack_wait_ns: i64,
    /// `-1`: unlimited.
    pub max_deliver: i64,
    pub backoff_ns: Vec<i64>,
    /// Empty: none (then `filter_subjects` may hold several).
    pub filter_subject: String,
    pub filter_subjects: Vec<String>,
    pub replay_policy: ReplayPolicy,
    pub rate_limit_bps: u64,
    /// e.g. `"30%"`; empty: no sampling.
    pub sample_frequency: String,
    /// Pull: queued requests allowed (512 default); push: 0.
    pub max_waiting: i64,
    /// `0`: none (ack none), `-1`: unlimited.
    pub max_ack_pending: i64,
    pub flow_control: bool,
    pub headers_only: bool,
    /// Pull request caps; `0`: no cap.
    pub max_batch: i64,
    pub max_expires_ns: i64,
    pub max_bytes: i64,
    /// Non-empty: a push consumer.
    pub deliver_subject: String,
    pub deliver_group: String,
    pub idle_heartbeat_ns: i64,
    /// `0`: never (durables without stream limits).
    pub inactive_threshold_ns: i64,
    /// `0`: as the stream.
    pub num_replicas: i64,
    pub mem_storage: bool,
    pub direct: bool,
    pub sourcing: bool,
    /// User keys plus the stored `_nats.req.level`; sorted as Go writes maps.
    pub metadata: BTreeMap<String, String>,
    pub pause_until: Option<GoTime>,
    pub priority_groups: Vec<String>,
    pub priority_policy: PriorityPolicy,
    pub priority_timeout_ns: i64,
}

/// `config` of the request body, with JSON names.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, rename = "ConsumerConfig")]
struct ConsumerConfigBody {
    durable_name: String,
    name: String,
    description: String,
    deliver_policy: DeliverPolicy,
    opt_start_seq: u64,
    opt_start_time: Option<GoTime>,
    ack_policy: AckPolicy,
    ack_wait: i64,
    max_deliver: i64,
    backoff: Vec<i64>,
    filter_subject: String,
    filter_subjects: Vec<String>,
    replay_policy: ReplayPolicy,
    rate_limit_bps: u64,
    sample_freq: String,
    max_waiting: i64,
    max_ack_pending: i64,
    flow_control: bool,
    headers_only: bool,
    max_batch: i64,
    max_expires: i64,
    max_bytes: i64,
    deliver_subject: String,
    deliver_group: String,
    idle_heartbeat: i64,
    inactive_threshold: i64,
    num_replicas: i64,
    mem_storage: bool,
    direct: bool,
    sourcing: bool,
    metadata: BTreeMap<String, String>,
    pause_until: Option<GoTime>,
    priority_groups: Vec<String>,
    priority_policy: PriorityPolicy,
    priority_timeout: i64,
}

/// nats-server's `CreateConsumerRequest`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, rename = "CreateConsumerRequest")]
struct CreateConsumerRequest {
    stream_name: String,
    config: ConsumerConfigBody,
    action: CreateAction,
    pedantic: bool,
}

/// Go types of the fields whose Rust type does not tell (captured from
/// nats-server 2.15.1's decode errors).
const DURATION_AND_INT_FIELDS: &[(&str, &str)] = &[
    ("ack_wait", "time.Duration"),
    ("max_deliver", "int"),
    ("backoff", "[]time.Duration"),
    ("backoff.*", "time.Duration"),
    ("max_waiting", "int"),
    ("max_ack_pending", "int"),
    ("max_batch", "int"),
    ("max_expires", "time.Duration"),
    ("max_bytes", "int"),
    ("idle_heartbeat", "time.Duration"),
    ("inactive_threshold", "time.Duration"),
    ("num_replicas", "int"),
    ("priority_timeout", "time.Duration"),
];

const CREATE_SCHEMA: GoSchema = GoSchema {
    struct_name: "CreateConsumerRequest",
    field_types: &[
        ("config", "server.ConsumerConfig"),
        ("config.ack_wait", "time.Duration"),
        ("config.max_deliver", "int"),
        ("config.backoff", "[]time.Duration"),
        ("config.backoff.*", "time.Duration"),
        ("config.max_waiting", "int"),
        ("config.max_ack_pending", "int"),
        ("config.max_batch", "int"),
        ("config.max_expires", "time.Duration"),
        ("config.max_bytes", "int"),
        ("config.idle_heartbeat", "time.Duration"),
        ("config.inactive_threshold", "time.Duration"),
        ("config.num_replicas", "int"),
        ("config.priority_timeout", "time.Duration"),
    ],
};

const STORED_SCHEMA: GoSchema = GoSchema {
    struct_name: "ConsumerConfig",
    field_types: DURATION_AND_INT_FIELDS,
};

impl ConsumerConfigBody {
    fn into_config(self) -> ConsumerConfig {
        ConsumerConfig {
            durable_name: self.durable_name,
            name: self.name,
            description: self.description,
            deliver_policy: self.deliver_policy,
            opt_start_sequence: self.opt_start_seq,
            opt_start_time: self.opt_start_time,
            ack_policy: self.ack_policy,
            ack_wait_ns: self.ack_wait,
            max_deliver: self.max_deliver,
            backoff_ns: self.backoff,
            filter_subject: self.filter_subject,
            filter_subjects: self.filter_subjects,
            replay_policy: self.replay_policy,
            rate_limit_bps: self.rate_limit_bps,
            sample_frequency: self.sample_freq,
            max_waiting: self.max_waiting,
            max_ack_pending: self.max_ack_pending,
            flow_control: self.flow_control,
            headers_only: self.headers_only,
            max_batch: self.max_batch,
            max_expires_ns: self.max_expires,
            max_bytes: self.max_bytes,
            deliver_subject: self.deliver_subject,
            deliver_group: self.deliver_group,
            idle_heartbeat_ns: self.idle_heartbeat,
            inactive_threshold_ns: self.inactive_threshold,
            num_replicas: self.num_replicas,
            mem_storage: self.mem_storage,
            direct: self.direct,
            sourcing: self.sourcing,
            metadata: self.metadata,
            pause_until: self.pause_until,
            priority_groups: self.priority_groups,
            priority_policy: self.priority_policy,
            priority_timeout_ns: self.priority_timeout,
        }
    }
}

// ---------------------------------------------------------------------------
// The create subject.

/// Which subject form a create request came on (spec §6.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateTarget {
    /// `CONSUMER.CREATE.<stream>.<consumer>[.<filter…>]`.
    Named {
        stream: String,
        consumer: String,
        /// The tokens after the consumer, joined with `.`.
        filter: Option<String>,
    },
    /// `CONSUMER.CREATE.<stream>`: legacy ephemeral; the name is
    /// `config.name` or generated.
    Ephemeral { stream: String },
    /// `CONSUMER.DURABLE.CREATE.<stream>.<consumer>`: legacy durable.
    Durable { stream: String, consumer: String },
}

impl CreateTarget {
    /// The target of a subject given as its tokens after `$JS.API.CONSUMER.`
    /// (`["CREATE", "S", "C", "orders", "*"]`). `None`: nats-server has no
    /// subscription there (e.g. `DURABLE.CREATE.S`), so nothing answers.
    pub fn from_tokens(tokens: &[&str]) -> Option<CreateTarget> {
        match tokens {
            ["CREATE", stream] => Some(CreateTarget::Ephemeral {
                stream: stream.to_string(),
            }),
            ["CREATE", stream, consumer, filter @ ..] => Some(CreateTarget::Named {
                stream: stream.to_string(),
                consumer: consumer.to_string(),
                filter: (!filter.is_empty()).then(|| filter.join(".")),
            }),
            ["DURABLE", "CREATE", stream, consumer] => Some(CreateTarget::Durable {
                stream: stream.to_string(),
                consumer: consumer.to_string(),
            }),
            _ => None,
        }
    }

    /// The stream named in the subject.
    pub fn stream(&self) -> &str {
        match self {
            CreateTarget::Named { stream, .. }
            | CreateTarget::Ephemeral { stream }
            | CreateTarget::Durable { stream, .. } => stream,
        }
    }
}

// ---------------------------------------------------------------------------
// Create.

/// What [`parse_create`] needs to know about the server side.
pub struct CreateContext<'a> {
    /// The stream named in the subject; `None`: it does not exist (10059).
    pub stream: Option<&'a StreamConfig>,
    /// The stream's consumers, by name.
    pub consumers: &'a [(&'a str, &'a ConsumerConfig)],
    /// Draws 64 random bits for a generated name (called only for a legacy
    /// ephemeral without `name`; again if the name is taken).
    pub random: &'a mut dyn FnMut() -> u64,
    /// The server is part of a cluster: `num_replicas` above 1 is not
    /// refused (10074) but checked against the stream's.
    pub clustered: bool,
}

/// What the caller does with an accepted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateKind {
    /// A new consumer.
    Created,
    /// The consumer exists; `config` is its new configuration (identical to
    /// the old one for an idempotent create). Answer with its info.
    Updated,
}

/// An accepted create request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOutcome {
    /// The consumer's name (generated for a legacy ephemeral without one;
    /// `config.name` then stays empty, as nats-server stores it).
    pub name: String,
    /// Normalised, with `_nats.req.level` in its metadata.
    pub config: ConsumerConfig,
    pub kind: CreateKind,
    pub action: CreateAction,
}

/// Parses and checks a consumer create request in nats-server's order
/// (see the module docs) and answers either the consumer to create or
/// update, or the exact error. The caller first checks the
/// `Nats-Required-Api-Level` header (10185) and that JetStream is enabled.
pub fn parse_create(
    target: &CreateTarget,
    body: &[u8],
    context: CreateContext<'_>,
) -> Result<CreateOutcome, ApiError> {
    let request: CreateConsumerRequest = json::decode_strict_with(body, &CREATE_SCHEMA)?;
    let action = request.action;
    let pedantic = request.pedantic;
    let mut config = request.config.into_config();
    if target.stream() != request.stream_name {
        return Err(ApiError::stream_name_mismatch());
    }
    let subject_consumer = match target {
        CreateTarget::Named { consumer, .. } | CreateTarget::Durable { consumer, .. } => {
            consumer.clone()
        }
        CreateTarget::Ephemeral { .. } => config.name.clone(),
    };
    if subject_consumer.contains(['\\', '/']) {
        return Err(ApiError::consumer_name_has_path_separators());
    }
    match target {
        CreateTarget::Durable { consumer, .. } => {
            if config.durable_name.is_empty() {
                return Err(ApiError::durable_name_not_set());
            }
            if *consumer != config.durable_name {
                return Err(ApiError::durable_name_mismatch());
            }
            config.name = consumer.clone();
        }
        CreateTarget::Named { consumer, .. } => {
            if !config.durable_name.is_empty() && *consumer != config.durable_name {
                return Err(ApiError::durable_name_mismatch());
            }
            config.name = consumer.clone();
        }
        CreateTarget::Ephemeral { .. } => {
            if !config.durable_name.is_empty() {
                return Err(ApiError::ephemeral_with_durable_name());
            }
        }
    }
    if let CreateTarget::Named {
        filter: Some(filter),
        ..
    } = target
    {
        if !config.filter_subjects.is_empty() {
            return Err(ApiError::multiple_filters_in_subject_api());
        }
        if config.filter_subject != *filter {
            return Err(ApiError::filter_subject_mismatch());
        }
    }
    if config.num_replicas > 1 && !context.clustered {
        return Err(ApiError::replicas_not_supported());
    }
    let Some(stream) = context.stream else {
        return Err(ApiError::stream_not_found());
    };
    let lookup = |name: &str| {
        context
            .consumers
            .iter()
            .find(|(existing, _)| *existing == name)
            .map(|(_, config)| *config)
    };
    if let Some(existing) = lookup(&subject_consumer) {
        // An existing consumer's pause can only change through PAUSE.
        config.pause_until = existing.pause_until;
    }
    config.set_static_metadata();
    set_defaults(&mut config, stream, pedantic)?;
    check_config(&config, stream)?;

    let registered_name = if config.durable_name.is_empty() {
        config.name.clone()
    } else {
        config.durable_name.clone()
    };
    if !registered_name.is_empty() {
        if let Some(existing) = lookup(&registered_name) {
            if action == CreateAction::Create && !config.same_as(existing) {
                return Err(ApiError::consumer_already_exists());
            }
            if stream.retention == Retention::WorkQueue
                && !partition_unique(
                    &registered_name,
                    &config.subject_filters(),
                    context.consumers,
                )
            {
                return Err(ApiError::workqueue_filter_not_unique());
            }
            let updated = apply_update(existing, &config)?;
            return Ok(CreateOutcome {
                name: registered_name,
                config: updated,
                kind: CreateKind::Updated,
                action,
            });
        }
    }
    if action == CreateAction::Update {
        return Err(ApiError::consumer_does_not_exist());
    }
    let limitable = context
        .consumers
        .iter()
        .filter(|(_, other)| !other.direct && !other.sourcing)
        .count();
    if stream.max_consumers > 0 && limitable as i64 >= stream.max_consumers {
        return Err(ApiError::maximum_consumers());
    }
    if stream.retention == Retention::WorkQueue && !config.direct && !config.sourcing {
        if config.ack_policy != AckPolicy::Explicit && config.ack_policy != AckPolicy::FlowControl {
            return Err(ApiError::workqueue_requires_explicit_ack());
        }
        if config.deliver_policy != DeliverPolicy::All {
            return Err(ApiError::workqueue_requires_deliver_all());
        }
        let others: Vec<(&str, &ConsumerConfig)> = context.consumers.to_vec();
        check_workqueue_overlap_named(&registered_name, &others, &config)?;
    }
    let name = if !config.durable_name.is_empty() {
        if config.durable_name.len() > NAME_BYTES_MAX {
            return Err(ApiError::consumer_name_too_long(NAME_BYTES_MAX));
        }
        config.durable_name.clone()
    } else if !config.name.is_empty() {
        config.name.clone()
    } else {
        generate_unused_name(context.random, |name| lookup(name).is_some())?
    };
    if !is_valid_name(&name) {
        return Err(ApiError::bad_durable_name());
    }
    // The consumer's store directory is its name: longer names fail to be
    // created on the file systems nats-server runs on (verified: 256 bytes).
    if name.len() > NAME_BYTES_MAX {
        return Err(ApiError::consumer_create_failed(STORE_FAILED_TEXT));
    }
    stamp_inactive_threshold(&mut config);
    Ok(CreateOutcome {
        name,
        config,
        kind: CreateKind::Created,
        action,
    })
}

fn generate_unused_name(
    random: &mut dyn FnMut() -> u64,
    taken: impl Fn(&str) -> bool,
) -> Result<String, ApiError> {
    for _ in 0..EPHEMERAL_NAME_ATTEMPTS_MAX {
        let name = ephemeral_name(random());
        if !taken(&name) {
            return Ok(name);
        }
    }
    Err(ApiError::consumer_create_failed(
        "could not generate an unused consumer name",
    ))
}

/// A server-generated consumer name: 8 characters of nats-server's base-62
/// alphabet, one per byte of `random_bits` (`digits[b % 62]`, as
/// `getHash` maps its SHA-256 bytes).
pub fn ephemeral_name(random_bits: u64) -> String {
    random_bits
        .to_le_bytes()
        .iter()
        .map(|byte| char::from(EPHEMERAL_NAME_ALPHABET[usize::from(*byte) % 62]))
        .collect()
}

/// nats-server's `isValidAssetName`.
fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.bytes().any(|byte| {
            matches!(
                byte,
                b' ' | b'\t' | b'\r' | b'\n' | 0x0C | b'.' | b'*' | b'>' | b'\\' | b'/'
            )
        })
}

fn pedantic_error(text: &str) -> ApiError {
    ApiError::pedantic(text)
}

/// nats-server's `setConsumerConfigDefaults` (no server or account limits).
fn set_defaults(
    config: &mut ConsumerConfig,
    stream: &StreamConfig,
    pedantic: bool,
) -> Result<(), ApiError> {
    if config.max_deliver == 0 || config.max_deliver < -1 {
        if pedantic && config.max_deliver < -1 {
            return Err(pedantic_error("max_deliver must be set to -1"));
        }
        config.max_deliver = -1;
    }
    let not_negative = [
        (&mut config.max_waiting, "max_waiting"),
        (&mut config.max_ack_pending, ""),
        (&mut config.max_batch, "max_batch"),
        (&mut config.max_expires_ns, "max_expires"),
        (&mut config.max_bytes, "max_bytes"),
        (&mut config.idle_heartbeat_ns, "idle_heartbeat"),
        (&mut config.inactive_threshold_ns, "inactive_threshold"),
        (&mut config.priority_timeout_ns, "priority_timeout"),
    ];
    for (value, field) in not_negative {
        if field.is_empty() {
            // max_ack_pending: below -1 means unlimited.
            if *value < -1 {
                if pedantic {
                    return Err(pedantic_error("max_ack_pending must be set to -1"));
                }
                *value = -1;
            }
        } else if *value < 0 {
            if pedantic {
                return Err(pedantic_error(&format!("{field} must not be negative")));
            }
            *value = 0;
        }
    }
    if config.deliver_subject.is_empty() && config.max_waiting == 0 {
        config.max_waiting = MAX_WAITING_DEFAULT;
    }
    if config.ack_wait_ns == 0 && matches!(config.ack_policy, AckPolicy::Explicit | AckPolicy::All)
    {
        config.ack_wait_ns = ACK_WAIT_DEFAULT_NS;
    }
    if let Some(first) = config.backoff_ns.first() {
        if pedantic && config.ack_wait_ns != *first {
            return Err(pedantic_error(
                "first backoff value has to equal batch AckWait",
            ));
        }
        config.ack_wait_ns = *first;
    }
    let limits = &stream.consumer_limits;
    if config.max_ack_pending == 0 {
        if pedantic && limits.max_ack_pending > 0 {
            return Err(pedantic_error(
                "max_ack_pending must be set if it's configured in stream limits",
            ));
        }
        config.max_ack_pending = limits.max_ack_pending;
    }
    if config.inactive_threshold_ns == 0 {
        if pedantic && limits.inactive_threshold_ns > 0 {
            return Err(pedantic_error(
                "inactive_threshold must be set if it's configured in stream limits",
            ));
        }
        config.inactive_threshold_ns = limits.inactive_threshold_ns;
    }
    if config.max_ack_pending == 0 && config.ack_policy != AckPolicy::None {
        config.max_ack_pending = MAX_ACK_PENDING_DEFAULT;
    }
    if config.priority_policy == PriorityPolicy::PinnedClient && config.priority_timeout_ns == 0 {
        config.priority_timeout_ns = PRIORITY_TIMEOUT_DEFAULT_NS;
    }
    if config.ack_policy == AckPolicy::FlowControl && !pedantic {
        config.flow_control = true;
        config.idle_heartbeat_ns = FLOW_CONTROL_ACK_HEARTBEAT_NS;
    }
    Ok(())
}

/// nats-server's `updateInactiveThreshold`: an ephemeral without a
/// threshold goes after 5 s. nats-server stamps it when it creates or
/// updates the consumer, after the create-idempotency comparison.
fn stamp_inactive_threshold(config: &mut ConsumerConfig) {
    if config.durable_name.is_empty() && config.inactive_threshold_ns <= 0 {
        config.inactive_threshold_ns = INACTIVE_THRESHOLD_DEFAULT_NS;
    }
}

fn invalid_config(text: &str) -> ApiError {
    ApiError::invalid_stream_config(text)
}

/// nats-server's `checkConsumerCfg` (single server, no account limits).
fn check_config(config: &ConsumerConfig, stream: &StreamConfig) -> Result<(), ApiError> {
    if !config.name.is_empty() && !is_valid_name(&config.name) {
        return Err(invalid_config(
            "consumer name can not contain '.', '*', '>', '\\', '/'",
        ));
    }
    if !config.durable_name.is_empty() && !is_valid_name(&config.durable_name) {
        return Err(invalid_config(
            "consumer durable name can not contain '.', '*', '>', '\\', '/'",
        ));
    }
    if config.num_replicas > 0 && config.num_replicas > stream.num_replicas {
        return Err(ApiError::consumer_replicas_exceed_stream());
    }
    if config.num_replicas < 0 {
        return Err(ApiError::replicas_negative());
    }
    if matches!(stream.retention, Retention::Interest | Retention::WorkQueue)
        && config.num_replicas != 0
        && config.num_replicas != stream.num_replicas
    {
        return Err(ApiError::consumer_replicas_must_match_stream());
    }
    if config.backoff_ns.iter().any(|backoff| *backoff < 0) {
        return Err(ApiError::backoff_negative());
    }
    if config.ack_wait_ns < 0 {
        return Err(ApiError::ack_wait_negative());
    }
    let is_push = !config.deliver_subject.is_empty();
    if config.ack_policy == AckPolicy::FlowControl {
        if !is_push {
            return Err(ApiError::flow_control_ack_requires_push());
        }
        if !config.flow_control {
            return Err(ApiError::flow_control_ack_requires_flow_control());
        }
        if config.idle_heartbeat_ns != FLOW_CONTROL_ACK_HEARTBEAT_NS {
            return Err(invalid_config(
                "flow control ack policy heartbeat needs to be 1s",
            ));
        }
        if config.max_ack_pending <= 0 {
            return Err(ApiError::flow_control_ack_requires_max_ack_pending());
        }
        if config.ack_wait_ns != 0 || !config.backoff_ns.is_empty() {
            return Err(ApiError::flow_control_ack_requires_no_ack_wait());
        }
        if config.max_deliver > 0 {
            return Err(ApiError::flow_control_ack_requires_no_max_deliver());
        }
    }
    check_backoff_length(config)?;
    if config.description.len() > DESCRIPTION_BYTES_MAX {
        return Err(ApiError::consumer_description_too_long(
            DESCRIPTION_BYTES_MAX,
        ));
    }
    if is_push {
        check_push(config, stream)?;
    } else {
        check_pull(config, stream)?;
    }
    let limits = &stream.consumer_limits;
    if limits.max_ack_pending > 0 && config.max_ack_pending > limits.max_ack_pending {
        return Err(ApiError::max_ack_pending_excess(
            &limits.max_ack_pending.to_string(),
        ));
    }
    if limits.inactive_threshold_ns > 0
        && config.inactive_threshold_ns > limits.inactive_threshold_ns
    {
        return Err(ApiError::inactive_threshold_excess(&go_duration_text(
            limits.inactive_threshold_ns,
        )));
    }
    if config.direct {
        if !is_push {
            return Err(ApiError::direct_requires_push());
        }
        if !config.durable_name.is_empty() {
            return Err(ApiError::direct_requires_ephemeral());
        }
    }
    check_filters(config)?;
    check_deliver_policy(config)?;
    if !config.sample_frequency.is_empty() {
        check_sample_frequency(&config.sample_frequency)?;
    }
    if config.flow_control && config.idle_heartbeat_ns == 0 {
        return Err(ApiError::flow_control_requires_heartbeat());
    }
    if !config.durable_name.is_empty()
        && !config.name.is_empty()
        && config.name != config.durable_name
    {
        return Err(ApiError::durable_and_name_mismatch());
    }
    if metadata_bytes(config) > METADATA_BYTES_MAX {
        return Err(ApiError::consumer_metadata_too_long(&format!(
            "{}KB",
            METADATA_BYTES_MAX / 1024
        )));
    }
    check_priority(config)?;
    if stream
        .placement
        .as_ref()
        .is_some_and(|placement| !placement.preferred.is_empty())
    {
        return Err(invalid_config(
            "preferred server not permitted in placement",
        ));
    }
    Ok(())
}

fn check_backoff_length(config: &ConsumerConfig) -> Result<(), ApiError> {
    let length = config.backoff_ns.len() as i64;
    if length > 0 && config.max_deliver != -1 && length > config.max_deliver {
        return Err(ApiError::max_deliver_backoff());
    }
    Ok(())
}

fn check_push(config: &ConsumerConfig, stream: &StreamConfig) -> Result<(), ApiError> {
    let subject = &config.deliver_subject;
    let is_literal = !subject.split('.').any(|token| token == "*" || token == ">");
    if !is_literal {
        return Err(ApiError::deliver_subject_has_wildcards());
    }
    if !is_valid_subject(subject) {
        return Err(ApiError::invalid_deliver_subject());
    }
    // `deliveryFormsCycle`.
    if stream
        .subjects
        .iter()
        .any(|stream_subject| subject_is_subset(subject, stream_subject))
    {
        return Err(ApiError::deliver_subject_forms_cycle());
    }
    if config.max_waiting != 0 {
        return Err(ApiError::push_max_waiting());
    }
    if config.max_ack_pending > 0 && config.ack_policy == AckPolicy::None {
        return Err(ApiError::max_ack_pending_requires_ack_policy());
    }
    if config.idle_heartbeat_ns > 0 && config.idle_heartbeat_ns < HEARTBEAT_MIN_NS {
        return Err(ApiError::heartbeat_too_small());
    }
    Ok(())
}

fn check_pull(config: &ConsumerConfig, stream: &StreamConfig) -> Result<(), ApiError> {
    if config.ack_policy == AckPolicy::None && stream.retention == Retention::WorkQueue {
        return Err(ApiError::pull_requires_explicit_ack());
    }
    if config.rate_limit_bps > 0 {
        return Err(ApiError::pull_with_rate_limit());
    }
    if config.max_waiting < 0 {
        return Err(ApiError::max_waiting_negative());
    }
    if config.idle_heartbeat_ns > 0 {
        return Err(ApiError::heartbeat_requires_push());
    }
    if config.flow_control {
        return Err(ApiError::flow_control_requires_push());
    }
    if config.max_batch < 0 {
        return Err(ApiError::max_request_batch_negative());
    }
    if config.max_expires_ns != 0 && config.max_expires_ns < MAX_EXPIRES_MIN_NS {
        return Err(ApiError::max_request_expires_too_small());
    }
    Ok(())
}

fn check_filters(config: &ConsumerConfig) -> Result<(), ApiError> {
    if !config.filter_subject.is_empty() && !config.filter_subjects.is_empty() {
        return Err(ApiError::filter_subject_and_filter_subjects());
    }
    if !config.filter_subject.is_empty() && !is_valid_subject(&config.filter_subject) {
        return Err(invalid_config("invalid subject"));
    }
    if config.filter_subjects.iter().any(String::is_empty) {
        return Err(ApiError::empty_filter_subject());
    }
    let filters = config.subject_filters();
    for (outer, subject) in filters.iter().enumerate() {
        if !is_valid_subject(subject) {
            return Err(invalid_config("invalid subject"));
        }
        for (inner, other) in filters.iter().enumerate() {
            if inner != outer && subject_is_subset(subject, other) {
                return Err(ApiError::overlapping_filter_subjects());
            }
        }
    }
    Ok(())
}

fn check_deliver_policy(config: &ConsumerConfig) -> Result<(), ApiError> {
    let also_set = |policy: &str, start: &str| {
        Err(ApiError::invalid_deliver_policy(&format!(
            "consumer delivery policy is deliver {policy}, but optional start {start} is also set"
        )))
    };
    let not_set = |policy: &str, what: &str| {
        Err(ApiError::invalid_deliver_policy(&format!(
            "consumer delivery policy is deliver {policy}, but optional {what} is not set"
        )))
    };
    let has_sequence = config.opt_start_sequence > 0;
    let has_time = config.opt_start_time.is_some();
    let simple = match config.deliver_policy {
        DeliverPolicy::All => Some("all"),
        DeliverPolicy::Last => Some("last"),
        DeliverPolicy::LastPerSubject => Some("last per subject"),
        DeliverPolicy::New => Some("new"),
        DeliverPolicy::ByStartSequence | DeliverPolicy::ByStartTime => None,
    };
    if let Some(policy) = simple {
        if has_sequence {
            return also_set(policy, "sequence");
        }
        if has_time {
            return also_set(policy, "time");
        }
        if config.deliver_policy == DeliverPolicy::LastPerSubject
            && config.filter_subject.is_empty()
            && config.filter_subjects.is_empty()
        {
            return not_set(policy, "filter subject");
        }
        return Ok(());
    }
    if config.deliver_policy == DeliverPolicy::ByStartSequence {
        if !has_sequence {
            return not_set("by start sequence", "start sequence");
        }
        if has_time {
            return also_set("by start sequence", "time");
        }
    } else {
        if !has_time {
            return not_set("by start time", "start time");
        }
        if config.opt_start_sequence != 0 {
            // nats-server's text says "start" twice.
            return also_set("by start time", "start sequence");
        }
    }
    Ok(())
}

/// `sample_freq`: an integer ≥ 0, optionally followed by one `%`
/// (Go's `strconv.Atoi` after `strings.TrimSuffix`).
fn check_sample_frequency(text: &str) -> Result<(), ApiError> {
    let number = text.strip_suffix('%').unwrap_or(text);
    match go_atoi(number) {
        Ok(value) if value >= 0 => Ok(()),
        // nats-server formats the nil error.
        Ok(_) => Err(ApiError::invalid_sampling("<nil>")),
        Err(error) => Err(ApiError::invalid_sampling(&error.to_string())),
    }
}

/// Go's `strconv.Atoi` with its error text.
fn go_atoi(text: &str) -> Result<i64, AtoiError> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    let error = |out_of_range| AtoiError {
        text: text.to_string(),
        out_of_range,
    };
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(error(false));
    }
    text.parse::<i64>().map_err(|_| error(true))
}

/// Go's `strconv.Atoi` error: `strconv.Atoi: parsing "x": invalid syntax`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "strconv.Atoi: parsing {}: {}",
    json::go_quote(text),
    if *out_of_range { "value out of range" } else { "invalid syntax" }
)]
struct AtoiError {
    text: String,
    out_of_range: bool,
}

fn check_priority(config: &ConsumerConfig) -> Result<(), ApiError> {
    if config.priority_policy != PriorityPolicy::None {
        if !config.deliver_subject.is_empty() {
            return Err(ApiError::push_with_priority_groups());
        }
        if config.priority_groups.is_empty() {
            return Err(ApiError::priority_policy_without_group());
        }
        for group in &config.priority_groups {
            if group.is_empty() {
                return Err(ApiError::empty_priority_group());
            }
            if !is_valid_group_name(group) {
                return Err(ApiError::invalid_priority_group());
            }
        }
        return Ok(());
    }
    if !config.priority_groups.is_empty() {
        return Err(ApiError::priority_groups_without_policy());
    }
    if config.priority_timeout_ns > 0 {
        return Err(ApiError::priority_timeout_without_policy());
    }
    Ok(())
}

/// nats-server's `validGroupName`: `^[a-zA-Z0-9/_=-]{1,16}$`.
pub fn is_valid_group_name(group: &str) -> bool {
    (1..=PRIORITY_GROUP_BYTES_MAX).contains(&group.len())
        && group
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'/' | b'_' | b'=' | b'-'))
}

fn metadata_bytes(config: &ConsumerConfig) -> usize {
    config
        .metadata
        .iter()
        .map(|(key, value)| key.len() + value.len())
        .sum()
}

// ---------------------------------------------------------------------------
// Work queues, updates.

/// The work-queue rules that need the stream's other consumers, for a new
/// consumer `new` (nats-server checks them only when the stream already has
/// a consumer): an unfiltered consumer is refused (10099), and each filter
/// must not collide with any filter of another consumer, an unfiltered
/// existing consumer colliding with everything (10100). Direct and sourcing
/// consumers are ignored. [`parse_create`] calls it; it is public for
/// callers that re-check (e.g. on recovery, where nats-server only warns).
pub fn check_workqueue_overlap(
    existing: &[&ConsumerConfig],
    new: &ConsumerConfig,
) -> Result<(), ApiError> {
    let named: Vec<(&str, &ConsumerConfig)> = existing.iter().map(|config| ("", *config)).collect();
    check_workqueue_overlap_named("\u{0}", &named, new)
}

fn check_workqueue_overlap_named(
    name: &str,
    existing: &[(&str, &ConsumerConfig)],
    new: &ConsumerConfig,
) -> Result<(), ApiError> {
    let limitable = existing
        .iter()
        .filter(|(_, other)| !other.direct && !other.sourcing)
        .count();
    if limitable == 0 {
        return Ok(());
    }
    let filters = new.subject_filters();
    if filters.is_empty() {
        return Err(ApiError::workqueue_multiple_unfiltered());
    }
    if !partition_unique(name, &filters, existing) {
        return Err(ApiError::workqueue_filter_not_unique());
    }
    Ok(())
}

/// nats-server's `partitionUnique`: no filter of `partitions` collides with
/// a filter of another (non-direct, non-sourcing) consumer; an unfiltered
/// other consumer collides with everything.
fn partition_unique(
    name: &str,
    partitions: &[&str],
    consumers: &[(&str, &ConsumerConfig)],
) -> bool {
    partitions.iter().all(|partition| {
        consumers
            .iter()
            .filter(|(other_name, other)| *other_name != name && !other.direct && !other.sourcing)
            .all(|(_, other)| {
                let filters = other.subject_filters();
                !filters.is_empty()
                    && filters
                        .iter()
                        .all(|filter| !subjects_overlap(partition, filter))
            })
    })
}

fn update_error(text: &str) -> ApiError {
    ApiError::consumer_create_failed(text)
}

/// Checks an update of `current` to `proposed` (both normalised) with
/// nats-server's rules and texts (`checkNewConsumerConfig`): `500/10012`
/// `<field> can not be updated`, or `400/10116`. A changed push
/// `deliver_subject` is allowed (nats-server refuses it with 10013 only
/// while the old subject has interest; the caller checks that).
pub fn check_update(current: &ConsumerConfig, proposed: &ConsumerConfig) -> Result<(), ApiError> {
    if current == proposed {
        return Ok(());
    }
    if current.deliver_policy != proposed.deliver_policy {
        return Err(update_error("deliver policy can not be updated"));
    }
    if current.mem_storage != proposed.mem_storage {
        return Err(update_error("storage type can not be updated"));
    }
    if current.direct != proposed.direct {
        return Err(update_error("direct can not be updated"));
    }
    if current.sourcing != proposed.sourcing {
        return Err(update_error("sourcing can not be updated"));
    }
    if current.opt_start_sequence != proposed.opt_start_sequence {
        return Err(update_error("start sequence can not be updated"));
    }
    let same_start_time = match (&current.opt_start_time, &proposed.opt_start_time) {
        (Some(a), Some(b)) => a.unix_seconds == b.unix_seconds && a.nanosecond == b.nanosecond,
        (None, None) => true,
        _ => false,
    };
    if !same_start_time {
        return Err(update_error("start time can not be updated"));
    }
    if current.ack_policy != proposed.ack_policy {
        return Err(update_error("ack policy can not be updated"));
    }
    if current.replay_policy != proposed.replay_policy {
        return Err(update_error("replay policy can not be updated"));
    }
    if current.idle_heartbeat_ns != proposed.idle_heartbeat_ns {
        return Err(update_error("heart beats can not be updated"));
    }
    if current.flow_control != proposed.flow_control {
        return Err(update_error("flow control can not be updated"));
    }
    if current.deliver_subject != proposed.deliver_subject {
        if current.deliver_subject.is_empty() {
            return Err(update_error("can not update pull consumer to push based"));
        }
        if proposed.deliver_subject.is_empty() {
            return Err(update_error("can not update push consumer to pull based"));
        }
    }
    if current.max_waiting != proposed.max_waiting {
        return Err(update_error("max waiting can not be updated"));
    }
    check_backoff_length(proposed)
}

/// [`check_update`], then the configuration nats-server stores: the
/// proposed one with `pause_until` in UTC and an ephemeral's default
/// inactive threshold.
pub fn apply_update(
    current: &ConsumerConfig,
    proposed: &ConsumerConfig,
) -> Result<ConsumerConfig, ApiError> {
    check_update(current, proposed)?;
    let mut updated = proposed.clone();
    if let Some(pause) = updated.pause_until.as_mut() {
        pause.offset_seconds = 0;
    }
    // nats-server asks whether the consumer *was* durable.
    if current.durable_name.is_empty() && updated.inactive_threshold_ns <= 0 {
        updated.inactive_threshold_ns = INACTIVE_THRESHOLD_DEFAULT_NS;
    }
    Ok(updated)
}

// ---------------------------------------------------------------------------
// Queries, metadata, JSON.

impl ConsumerConfig {
    /// Whether it is a durable consumer.
    pub fn is_durable(&self) -> bool {
        !self.durable_name.is_empty()
    }

    /// Whether it is a push consumer (has a deliver subject).
    pub fn is_push(&self) -> bool {
        !self.deliver_subject.is_empty()
    }

    /// nats-server's `gatherSubjectFilters`: `filter_subjects` plus
    /// `filter_subject` (at most one of them is set once checked).
    pub fn subject_filters(&self) -> Vec<&str> {
        let mut filters: Vec<&str> = self.filter_subjects.iter().map(String::as_str).collect();
        if !self.filter_subject.is_empty() {
            filters.push(&self.filter_subject);
        }
        filters
    }

    /// The API level the configuration needs (`_nats.req.level`): 1 for a
    /// non-zero `pause_until` or priority groups, 4 for the flow_control
    /// ack policy, else 0.
    pub fn required_api_level(&self) -> u32 {
        let mut level = 0;
        let paused = self.pause_until.is_some_and(|pause| {
            pause.unix_seconds != json::ZERO_TIME_UNIX_SECONDS || pause.nanosecond != 0
        });
        if paused
            || self.priority_policy != PriorityPolicy::None
            || self.priority_timeout_ns != 0
            || !self.priority_groups.is_empty()
        {
            level = 1;
        }
        if self.ack_policy == AckPolicy::FlowControl {
            level = 4;
        }
        level
    }

    /// nats-server's `setStaticConsumerMetadata`: drop the dynamic keys and
    /// store `_nats.req.level`.
    pub fn set_static_metadata(&mut self) {
        let level = self.required_api_level();
        super::super::stream::config::set_static_metadata(&mut self.metadata, level);
    }

    /// Whether a `"create"` of `other` is idempotent against this existing
    /// configuration: equal once normalised, ignoring the server-owned
    /// `_nats.*` metadata (nats-server's `copyConsumerMetadata` + DeepEqual).
    pub fn same_as(&self, other: &ConsumerConfig) -> bool {
        let strip = |config: &ConsumerConfig| {
            let mut config = config.clone();
            super::super::stream::config::strip_server_metadata(&mut config.metadata);
            config
        };
        strip(self) == strip(other)
    }

    /// Appends the configuration as nats-server writes it: Go's field order
    /// and `omitempty` rules. `dynamic_metadata` adds `_nats.level` and
    /// `_nats.ver` (create and info responses); LIST elements and the
    /// stored form go without.
    pub fn write_json(&self, out: &mut String, dynamic_metadata: bool) {
        out.push('{');
        let mut fields = FieldWriter { out, first: true };
        fields.string_non_empty("durable_name", &self.durable_name);
        fields.string_non_empty("name", &self.name);
        fields.string_non_empty("description", &self.description);
        fields.string("deliver_policy", self.deliver_policy.as_str());
        fields.number_non_zero("opt_start_seq", i128::from(self.opt_start_sequence));
        if let Some(time) = &self.opt_start_time {
            fields.time("opt_start_time", time);
        }
        fields.string("ack_policy", self.ack_policy.as_str());
        fields.number_non_zero("ack_wait", i128::from(self.ack_wait_ns));
        fields.number_non_zero("max_deliver", i128::from(self.max_deliver));
        if !self.backoff_ns.is_empty() {
            let values: Vec<String> = self.backoff_ns.iter().map(i64::to_string).collect();
            fields.raw("backoff", &format!("[{}]", values.join(",")));
        }
        fields.string_non_empty("filter_subject", &self.filter_subject);
        if !self.filter_subjects.is_empty() {
            fields.raw("filter_subjects", &strings_json(&self.filter_subjects));
        }
        fields.string("replay_policy", self.replay_policy.as_str());
        fields.number_non_zero("rate_limit_bps", i128::from(self.rate_limit_bps));
        fields.string_non_empty("sample_freq", &self.sample_frequency);
        fields.number_non_zero("max_waiting", i128::from(self.max_waiting));
        fields.number_non_zero("max_ack_pending", i128::from(self.max_ack_pending));
        fields.true_only("flow_control", self.flow_control);
        fields.true_only("headers_only", self.headers_only);
        fields.number_non_zero("max_batch", i128::from(self.max_batch));
        fields.number_non_zero("max_expires", i128::from(self.max_expires_ns));
        fields.number_non_zero("max_bytes", i128::from(self.max_bytes));
        fields.string_non_empty("deliver_subject", &self.deliver_subject);
        fields.string_non_empty("deliver_group", &self.deliver_group);
        fields.number_non_zero("idle_heartbeat", i128::from(self.idle_heartbeat_ns));
        fields.number_non_zero("inactive_threshold", i128::from(self.inactive_threshold_ns));
        fields.raw("num_replicas", &self.num_replicas.to_string());
        fields.true_only("mem_storage", self.mem_storage);
        fields.true_only("direct", self.direct);
        fields.true_only("sourcing", self.sourcing);
        let metadata = self.metadata_entries(dynamic_metadata);
        if !metadata.is_empty() {
            let mut text = String::from("{");
            for (index, (key, value)) in metadata.iter().enumerate() {
                if index > 0 {
                    text.push(',');
                }
                json::write_string(&mut text, key);
                text.push(':');
                json::write_string(&mut text, value);
            }
            text.push('}');
            fields.raw("metadata", &text);
        }
        if let Some(time) = &self.pause_until {
            fields.time("pause_until", time);
        }
        if !self.priority_groups.is_empty() {
            fields.raw("priority_groups", &strings_json(&self.priority_groups));
        }
        if self.priority_policy != PriorityPolicy::None {
            fields.string("priority_policy", self.priority_policy.as_str());
        }
        fields.number_non_zero("priority_timeout", i128::from(self.priority_timeout_ns));
        out.push('}');
    }

    fn metadata_entries(&self, dynamic_metadata: bool) -> Vec<(String, String)> {
        let mut entries: BTreeMap<String, String> = self.metadata.clone();
        if dynamic_metadata {
            entries.insert(SERVER_LEVEL_KEY.to_string(), API_LEVEL.to_string());
            entries.insert(SERVER_VERSION_KEY.to_string(), SERVER_VERSION.to_string());
        }
        entries.into_iter().collect()
    }

    /// The JSON stored on disk: [`ConsumerConfig::write_json`] without
    /// dynamic metadata, so [`ConsumerConfig::from_stored_json`] reads it
    /// back equal.
    pub fn to_stored_json(&self) -> String {
        let mut out = String::with_capacity(384);
        self.write_json(&mut out, false);
        out
    }

    /// Reads a stored configuration (as written by
    /// [`ConsumerConfig::to_stored_json`], or a `config` nats-server wrote).
    /// Unknown fields are ignored; nothing is normalised.
    pub fn from_stored_json(bytes: &[u8]) -> Result<ConsumerConfig, StoredConsumerConfigError> {
        let body: ConsumerConfigBody =
            json::decode(bytes, &STORED_SCHEMA, json::DecodeMode::Lenient)?;
        Ok(body.into_config())
    }
}

/// A stored consumer config that does not read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stored consumer config: {0}")]
pub struct StoredConsumerConfigError(#[from] pub json::DecodeError);

impl fmt::Display for ConsumerConfig {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.to_stored_json())
    }
}

/// Writes `"name":value` pairs separated by commas.
struct FieldWriter<'a> {
    out: &'a mut String,
    first: bool,
}

impl FieldWriter<'_> {
    fn raw(&mut self, name: &str, value: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push('"');
        self.out.push_str(name);
        self.out.push_str("\":");
        self.out.push_str(value);
    }

    fn string(&mut self, name: &str, value: &str) {
        let mut text = String::with_capacity(value.len() + 2);
        json::write_string(&mut text, value);
        self.raw(name, &text);
    }

    fn string_non_empty(&mut self, name: &str, value: &str) {
        if !value.is_empty() {
            self.string(name, value);
        }
    }

    fn number_non_zero(&mut self, name: &str, value: i128) {
        if value != 0 {
            self.raw(name, &value.to_string());
        }
    }

    fn true_only(&mut self, name: &str, value: bool) {
        if value {
            self.raw(name, "true");
        }
    }

    fn time(&mut self, name: &str, time: &GoTime) {
        let mut text = String::new();
        time.write_json(&mut text);
        self.raw(name, &text);
    }
}

fn strings_json(values: &[String]) -> String {
    let mut text = String::from("[");
    for (index, value) in values.iter().enumerate() {
        if index > 0 {
            text.push(',');
        }
        json::write_string(&mut text, value);
    }
    text.push(']');
    text
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
