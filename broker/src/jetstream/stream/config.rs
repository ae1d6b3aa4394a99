//! `StreamConfig`: what a stream is configured as, parsed from the
//! `STREAM.CREATE` / `STREAM.UPDATE` request body, normalised and validated
//! as nats-server 2.15.1 does (`jsStreamCreateRequest`, `jsStreamUpdateRequest`,
//! `checkStreamCfg`, `configUpdateCheck` in `server/stream.go` and
//! `server/jetstream_api.go`), and written back as nats-server writes it.
//!
//! Wire format: the JSON object of spec §4.1, in Go's field order and with
//! its omit rules (see [`StreamConfig::write_json`]). The same JSON (without
//! the dynamic `_nats.ver`/`_nats.level` metadata) is the stored form.
//!
//! Fields the engine does not implement yet (placement, subject transform,
//! republish, consumer limits, the 2.12+ flags) parse, validate, round-trip
//! and echo. Mirrors and sources parse and echo but `parse` refuses them
//! (10052, `stream mirrors are not supported yet` / `stream sources are not
//! supported yet`) after nats-server's own checks that need no other stream.
//!
//! Subject helpers ([`subjects_overlap`], [`subject_matches`]) follow
//! nats-server's `sublist.go` exactly, quirks included.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer};

use super::super::api::error::ApiError;
use super::super::api::json::{self, GoSchema, GoTime, RawJsonVisitor, RAW_JSON};

/// nats-server's `JSMaxNameLen`.
pub const NAME_BYTES_MAX: usize = 255;
/// nats-server's `JSMaxDescriptionLen`.
pub const DESCRIPTION_BYTES_MAX: usize = 4 * 1024;
/// nats-server's `JSMaxMetadataLen` (sum of key and value lengths).
pub const METADATA_BYTES_MAX: usize = 128 * 1024;
/// nats-server's `StreamMaxReplicas`.
pub const REPLICAS_MAX: i64 = 5;
/// nats-server's `StreamDefaultDuplicatesWindow`: two minutes.
pub const DUPLICATE_WINDOW_DEFAULT_NS: i64 = 120_000_000_000;
/// Smallest `max_age` and `duplicate_window`: 100 ms.
pub const WINDOW_MIN_NS: i64 = 100_000_000;
/// Smallest `subject_delete_marker_ttl`: one second.
pub const DELETE_MARKER_TTL_MIN_NS: i64 = 1_000_000_000;
/// The JetStream API level this server implements (`_nats.level`).
pub const API_LEVEL: u32 = 5;
/// The nats-server version tern answers as (`_nats.ver`).
pub const SERVER_VERSION: &str = "2.15.1";
/// Metadata keys the server owns.
pub const REQUIRED_LEVEL_KEY: &str = "_nats.req.level";
pub const SERVER_VERSION_KEY: &str = "_nats.ver";
pub const SERVER_LEVEL_KEY: &str = "_nats.level";

/// Error text for a mirror (10052) until mirrors are implemented.
pub const MIRROR_NOT_SUPPORTED: &str = "stream mirrors are not supported yet";
/// Error text for sources (10052) until sources are implemented.
pub const SOURCES_NOT_SUPPORTED: &str = "stream sources are not supported yet";

// ---------------------------------------------------------------------------
// Enumerations, decoded from their raw JSON as nats-server's `UnmarshalJSON`.

/// `retention`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Retention {
    #[default]
    Limits,
    Interest,
    WorkQueue,
}

/// `discard`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Discard {
    #[default]
    Old,
    New,
}

/// `storage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StorageType {
    #[default]
    File,
    Memory,
}

/// `compression`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    #[default]
    None,
    S2,
}

/// `persist_mode` (2.12+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PersistMode {
    #[default]
    Default,
    Async,
}

impl Retention {
    pub fn as_str(self) -> &'static str {
        match self {
            Retention::Limits => "limits",
            Retention::Interest => "interest",
            Retention::WorkQueue => "workqueue",
        }
    }
}

impl Discard {
    pub fn as_str(self) -> &'static str {
        match self {
            Discard::Old => "old",
            Discard::New => "new",
        }
    }
}

impl StorageType {
    pub fn as_str(self) -> &'static str {
        match self {
            StorageType::File => "file",
            StorageType::Memory => "memory",
        }
    }
}

impl Compression {
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::S2 => "s2",
        }
    }
}

impl PersistMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PersistMode::Default => "default",
            PersistMode::Async => "async",
        }
    }
}

/// Go's `fmt.Errorf("can not unmarshal %q", data)`.
fn cannot_unmarshal(raw: &str) -> String {
    format!("can not unmarshal {}", json::quote_raw(raw))
}

impl<'de> Deserialize<'de> for Retention {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_newtype_struct(
            RAW_JSON,
            RawJsonVisitor {
                expecting: "a retention policy",
                parse: |raw: &str| match raw {
                    "\"limits\"" => Ok(Retention::Limits),
                    "\"interest\"" => Ok(Retention::Interest),
                    "\"workqueue\"" => Ok(Retention::WorkQueue),
                    _ => Err(cannot_unmarshal(raw)),
                },
            },
        )
    }
}

impl<'de> Deserialize<'de> for Discard {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_newtype_struct(
            RAW_JSON,
            RawJsonVisitor {
                expecting: "a discard policy",
                // nats-server lower-cases the raw bytes first.
                parse: |raw: &str| match raw.to_lowercase().as_str() {
                    "\"old\"" => Ok(Discard::Old),
                    "\"new\"" => Ok(Discard::New),
                    _ => Err(cannot_unmarshal(raw)),
                },
            },
        )
    }
}

impl<'de> Deserialize<'de> for StorageType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_newtype_struct(
            RAW_JSON,
            RawJsonVisitor {
                expecting: "a storage type",
                parse: |raw: &str| match raw {
                    "\"file\"" => Ok(StorageType::File),
                    "\"memory\"" => Ok(StorageType::Memory),
                    _ => Err(cannot_unmarshal(raw)),
                },
            },
        )
    }
}

impl<'de> Deserialize<'de> for Compression {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_newtype_struct(
            RAW_JSON,
            RawJsonVisitor {
                expecting: "a compression algorithm",
                // nats-server: json.Unmarshal into a string, then compare.
                parse: |raw: &str| {
                    let text = match json::raw_kind(raw) {
                        "null" => String::new(),
                        "string" => json::raw_string(raw).unwrap_or_default(),
                        kind => {
                            return Err(format!(
                                "json: cannot unmarshal {kind} into Go value of type string"
                            ))
                        }
                    };
                    match text.as_str() {
                        "s2" => Ok(Compression::S2),
                        "none" => Ok(Compression::None),
                        _ => Err("unknown compression algorithm".to_string()),
                    }
                },
            },
        )
    }
}

impl<'de> Deserialize<'de> for PersistMode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_newtype_struct(
            RAW_JSON,
            RawJsonVisitor {
                expecting: "a persist mode",
                parse: |raw: &str| match raw {
                    "\"default\"" | "\"\"" => Ok(PersistMode::Default),
                    "\"async\"" => Ok(PersistMode::Async),
                    _ => Err(cannot_unmarshal(raw)),
                },
            },
        )
    }
}

// ---------------------------------------------------------------------------
// Nested objects (Go struct names kept for error texts).

/// `placement`: cluster and tags guiding placement in a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default, rename = "Placement")]
pub struct Placement {
    pub cluster: String,
    /// `None` is Go's nil slice, `Some(empty)` an empty one (they differ
    /// for the "empty placement" rule and for create idempotency).
    pub tags: Option<Vec<String>>,
    pub preferred: String,
}

/// `external`: a source in another account or domain.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default, rename = "ExternalStream")]
pub struct ExternalStream {
    pub api: String,
    pub deliver: String,
}

/// `consumer` of a source: a durable sourcing consumer.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default, rename = "StreamConsumerSource")]
pub struct StreamConsumerSource {
    pub name: String,
    pub deliver_subject: String,
}

/// `subject_transform`, and elements of a source's `subject_transforms`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default, rename = "SubjectTransformConfig")]
pub struct SubjectTransform {
    pub src: String,
    pub dest: String,
}

/// `republish`: republish stored messages to another subject.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default, rename = "RePublish")]
pub struct Republish {
    pub src: String,
    pub dest: String,
    pub headers_only: bool,
}

/// `consumer_limits`: defaults and caps for the stream's consumers.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default, rename = "StreamConsumerLimits")]
pub struct ConsumerLimits {
    #[serde(rename = "inactive_threshold")]
    pub inactive_threshold_ns: i64,
    pub max_ack_pending: i64,
}

/// `mirror`, and elements of `sources`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default, rename = "StreamSource")]
pub struct StreamSource {
    pub name: String,
    #[serde(rename = "opt_start_seq")]
    pub opt_start_sequence: u64,
    pub opt_start_time: Option<GoTime>,
    pub filter_subject: String,
    pub subject_transforms: Vec<SubjectTransform>,
    pub external: Option<ExternalStream>,
    pub consumer: Option<StreamConsumerSource>,
}

// ---------------------------------------------------------------------------
// The configuration.

/// A stream's configuration, normalised (every default filled in) once it
/// has gone through [`parse`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamConfig {
    pub name: String,
    /// Empty: none.
    pub description: String,
    pub subjects: Vec<String>,
    pub retention: Retention,
    /// `-1`: unlimited (Go `int`).
    pub max_consumers: i64,
    /// `-1`: unlimited.
    pub max_msgs: i64,
    /// `-1`: unlimited.
    pub max_bytes: i64,
    /// `0`: unlimited.
    pub max_age_ns: i64,
    /// `-1`: unlimited.
    pub max_msgs_per_subject: i64,
    /// `-1`: unlimited.
    pub max_msg_size: i32,
    pub discard: Discard,
    pub storage: StorageType,
    pub num_replicas: i64,
    pub no_ack: bool,
    pub duplicate_window_ns: i64,
    pub placement: Option<Placement>,
    pub mirror: Option<StreamSource>,
    pub sources: Vec<StreamSource>,
    pub compression: Compression,
    /// `0`: none set.
    pub first_sequence: u64,
    pub subject_transform: Option<SubjectTransform>,
    pub republish: Option<Republish>,
    pub allow_direct: bool,
    pub mirror_direct: bool,
    pub discard_new_per_subject: bool,
    pub sealed: bool,
    pub deny_delete: bool,
    pub deny_purge: bool,
    pub allow_rollup_hdrs: bool,
    pub consumer_limits: ConsumerLimits,
    pub allow_msg_ttl: bool,
    /// `0`: no delete markers.
    pub subject_delete_marker_ttl_ns: i64,
    pub allow_msg_counter: bool,
    pub allow_atomic: bool,
    pub allow_msg_schedules: bool,
    pub persist_mode: PersistMode,
    pub allow_batched: bool,
    /// User keys plus the stored `_nats.req.level`; sorted as Go writes maps.
    pub metadata: BTreeMap<String, String>,
}

/// The request body: the configuration plus `pedantic`, with JSON names.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, rename = "StreamConfigRequest")]
struct StreamConfigRequest {
    name: String,
    description: String,
    subjects: Vec<String>,
    retention: Retention,
    max_consumers: i64,
    max_msgs: i64,
    max_bytes: i64,
    max_age: i64,
    max_msgs_per_subject: i64,
    max_msg_size: i32,
    discard: Discard,
    storage: StorageType,
    num_replicas: i64,
    no_ack: bool,
    duplicate_window: i64,
    placement: Option<Placement>,
    mirror: Option<StreamSource>,
    sources: Vec<StreamSource>,
    compression: Compression,
    first_seq: u64,
    subject_transform: Option<SubjectTransform>,
    republish: Option<Republish>,
    allow_direct: bool,
    mirror_direct: bool,
    discard_new_per_subject: bool,
    sealed: bool,
    deny_delete: bool,
    deny_purge: bool,
    allow_rollup_hdrs: bool,
    consumer_limits: ConsumerLimits,
    allow_msg_ttl: bool,
    subject_delete_marker_ttl: i64,
    allow_msg_counter: bool,
    allow_atomic: bool,
    allow_msg_schedules: bool,
    persist_mode: PersistMode,
    allow_batched: bool,
    metadata: BTreeMap<String, String>,
    pedantic: bool,
}

/// Go names for decode errors (`StreamConfigRequest.max_age of type
/// time.Duration`); captured from nats-server 2.15.1.
const STREAM_CONFIG_SCHEMA: GoSchema = GoSchema {
    struct_name: "StreamConfigRequest",
    field_types: &[
        ("max_consumers", "int"),
        ("max_age", "time.Duration"),
        ("num_replicas", "int"),
        ("duplicate_window", "time.Duration"),
        ("subject_delete_marker_ttl", "time.Duration"),
        ("consumer_limits.inactive_threshold", "time.Duration"),
        ("consumer_limits.max_ack_pending", "int"),
        ("sources", "[]*server.StreamSource"),
        (
            "mirror.subject_transforms",
            "[]server.SubjectTransformConfig",
        ),
        (
            "sources.*.subject_transforms",
            "[]server.SubjectTransformConfig",
        ),
    ],
};

impl StreamConfigRequest {
    fn into_parts(self) -> (StreamConfig, bool) {
        let config = StreamConfig {
            name: self.name,
            description: self.description,
            subjects: self.subjects,
            retention: self.retention,
            max_consumers: self.max_consumers,
            max_msgs: self.max_msgs,
            max_bytes: self.max_bytes,
            max_age_ns: self.max_age,
            max_msgs_per_subject: self.max_msgs_per_subject,
            max_msg_size: self.max_msg_size,
            discard: self.discard,
            storage: self.storage,
            num_replicas: self.num_replicas,
            no_ack: self.no_ack,
            duplicate_window_ns: self.duplicate_window,
            placement: self.placement,
            mirror: self.mirror,
            sources: self.sources,
            compression: self.compression,
            first_sequence: self.first_seq,
            subject_transform: self.subject_transform,
            republish: self.republish,
            allow_direct: self.allow_direct,
            mirror_direct: self.mirror_direct,
            discard_new_per_subject: self.discard_new_per_subject,
            sealed: self.sealed,
            deny_delete: self.deny_delete,
            deny_purge: self.deny_purge,
            allow_rollup_hdrs: self.allow_rollup_hdrs,
            consumer_limits: self.consumer_limits,
            allow_msg_ttl: self.allow_msg_ttl,
            subject_delete_marker_ttl_ns: self.subject_delete_marker_ttl,
            allow_msg_counter: self.allow_msg_counter,
            allow_atomic: self.allow_atomic,
            allow_msg_schedules: self.allow_msg_schedules,
            persist_mode: self.persist_mode,
            allow_batched: self.allow_batched,
            metadata: self.metadata,
        };
        (config, self.pedantic)
    }
}

/// Parses and checks a `STREAM.CREATE` (`is_create`) or `STREAM.UPDATE`
/// body for the stream named in the subject, in nats-server's order:
///
/// - create: decode (10025), name in subject (10056), path separators
///   (10128), sealed, mirror_direct without mirror, `checkStreamCfg`
///   (10052/10157/10133/…), replicas > 1 (10074). The caller then checks
///   account limits, an existing stream ([`StreamConfig::same_as`], 10058)
///   and subject overlap (10065). (nats-server checks account limits just
///   before `checkStreamCfg`; only a body that fails both differs.)
/// - update: decode, `checkStreamCfg`, name in subject (10056). The caller
///   then looks the stream up (10059) and calls [`apply_update`].
///
/// The result is normalised and carries `_nats.req.level` in its metadata
/// (dynamic `_nats.ver`/`_nats.level` removed).
pub fn parse(
    name_in_subject: &str,
    body: &[u8],
    is_create: bool,
) -> Result<StreamConfig, ApiError> {
    parse_for(name_in_subject, body, is_create, false)
}

/// Whether a listing filtered by `subject` (none: everything) shows a
/// stream with `config` (`None`: its config is damaged, shown only
/// unfiltered).
pub fn listed_for(subject: Option<&str>, config: Option<&StreamConfig>) -> bool {
    match (subject, config) {
        (None, _) => true,
        (Some(subject), Some(config)) => config
            .subjects
            .iter()
            .any(|candidate| subjects_overlap(candidate, subject)),
        (Some(_), None) => false,
    }
}

/// [`parse`] for a server that is (`clustered`) or is not part of a
/// cluster: on one server a create with `num_replicas` above 1 is refused
/// (10074), last, as nats-server does.
pub fn parse_for(
    name_in_subject: &str,
    body: &[u8],
    is_create: bool,
    clustered: bool,
) -> Result<StreamConfig, ApiError> {
    let request: StreamConfigRequest = json::decode_strict_with(body, &STREAM_CONFIG_SCHEMA)?;
    let (mut config, pedantic) = request.into_parts();
    if !is_create {
        let mut config = check(config, pedantic)?;
        if config.name != name_in_subject {
            return Err(ApiError::stream_name_mismatch());
        }
        config.set_static_metadata();
        return Ok(config);
    }
    config.set_static_metadata();
    if config.name != name_in_subject {
        return Err(ApiError::stream_name_mismatch());
    }
    if name_in_subject.contains(['\\', '/']) {
        return Err(ApiError::stream_name_has_path_separators());
    }
    if config.sealed {
        return Err(ApiError::invalid_stream_config(
            "stream configuration for create can not be sealed",
        ));
    }
    if config.mirror_direct && config.mirror.is_none() {
        return Err(ApiError::invalid_stream_config(
            "stream has no mirror but does have mirror direct",
        ));
    }
    let config = check(config, pedantic)?;
    if !clustered && config.num_replicas > 1 {
        return Err(ApiError::replicas_not_supported());
    }
    Ok(config)
}

fn invalid(text: &str) -> ApiError {
    ApiError::invalid_stream_config(text)
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

/// Sum of metadata key and value lengths (nats-server's measure).
fn metadata_bytes(config: &StreamConfig) -> usize {
    config
        .metadata
        .iter()
        .map(|(key, value)| key.len() + value.len())
        .sum()
}

/// Normalises a "0 or below -1 means unlimited" limit to -1; pedantic mode
/// refuses values below -1.
fn normalise_limit(value: &mut i64, field: &str, pedantic: bool) -> Result<(), ApiError> {
    if *value == 0 || *value < -1 {
        if pedantic && *value < -1 {
            return Err(ApiError::pedantic(&format!("{field} must be set to -1")));
        }
        *value = -1;
    }
    Ok(())
}

/// nats-server's `checkStreamCfg` for a single server with no account
/// limits: defaults, then every check that needs no other stream, in order.
fn check(mut config: StreamConfig, pedantic: bool) -> Result<StreamConfig, ApiError> {
    if !is_valid_name(&config.name) {
        return Err(invalid(
            "stream name is required and can not contain '.', '*', '>', '\\', '/'",
        ));
    }
    if config.name.len() > NAME_BYTES_MAX {
        return Err(invalid(&format!(
            "stream name is too long, maximum allowed is {NAME_BYTES_MAX}"
        )));
    }
    if config.description.len() > DESCRIPTION_BYTES_MAX {
        return Err(invalid(&format!(
            "stream description is too long, maximum allowed is {DESCRIPTION_BYTES_MAX}"
        )));
    }
    if metadata_bytes(&config) > METADATA_BYTES_MAX {
        return Err(invalid(&format!(
            "stream metadata exceeds maximum size of {METADATA_BYTES_MAX} bytes"
        )));
    }
    if config.num_replicas == 0 {
        config.num_replicas = 1;
    }
    if config.num_replicas > REPLICAS_MAX {
        return Err(invalid(&format!("maximum replicas is {REPLICAS_MAX}")));
    }
    if config.num_replicas < 0 {
        return Err(ApiError::replicas_negative());
    }
    normalise_limit(&mut config.max_msgs, "max_msgs", pedantic)?;
    normalise_limit(
        &mut config.max_msgs_per_subject,
        "max_msgs_per_subject",
        pedantic,
    )?;
    normalise_limit(&mut config.max_bytes, "max_bytes", pedantic)?;
    let mut max_msg_size = i64::from(config.max_msg_size);
    normalise_limit(&mut max_msg_size, "max_msg_size", pedantic)?;
    config.max_msg_size = max_msg_size as i32;
    normalise_limit(&mut config.max_consumers, "max_consumers", pedantic)?;
    if config.max_age_ns < 0 {
        return Err(invalid("max age can not be negative"));
    }
    if config.max_age_ns != 0 && config.max_age_ns < WINDOW_MIN_NS {
        return Err(invalid("max age needs to be >= 100ms"));
    }
    if config.duplicate_window_ns == 0 && config.mirror.is_none() && config.sources.is_empty() {
        if config.max_age_ns != 0 && config.max_age_ns < DUPLICATE_WINDOW_DEFAULT_NS {
            if pedantic {
                return Err(ApiError::pedantic(
                    "duplicate window cannot be bigger than max age",
                ));
            }
            config.duplicate_window_ns = config.max_age_ns;
        } else {
            config.duplicate_window_ns = DUPLICATE_WINDOW_DEFAULT_NS;
        }
    }
    if config.duplicate_window_ns < 0 {
        return Err(invalid("duplicates window can not be negative"));
    }
    if config.max_age_ns != 0 && config.duplicate_window_ns > config.max_age_ns {
        return Err(invalid("duplicates window can not be larger then max age"));
    }
    if config.duplicate_window_ns > 0 && config.duplicate_window_ns < WINDOW_MIN_NS {
        return Err(invalid("duplicates window needs to be >= 100ms"));
    }
    if config.deny_purge && config.allow_rollup_hdrs {
        return Err(invalid("roll-ups require the purge permission"));
    }
    if config.allow_msg_counter {
        if config.discard == Discard::New {
            return Err(invalid("counter stream cannot use discard new"));
        }
        if config.allow_msg_ttl {
            return Err(invalid("counter stream cannot use message TTLs"));
        }
        if config.allow_msg_schedules {
            return Err(invalid("counter stream cannot use message schedules"));
        }
        if config.retention != Retention::Limits {
            return Err(invalid("counter stream can only use limits retention"));
        }
    }
    check_discard_new_per_subject(&config)?;
    if config.subject_delete_marker_ttl_ns > 0 {
        if config.subject_delete_marker_ttl_ns < DELETE_MARKER_TTL_MIN_NS {
            return Err(invalid(
                "subject delete marker TTL must be at least 1 second",
            ));
        }
        if !config.allow_msg_ttl {
            if pedantic {
                return Err(invalid(
                    "subject delete marker cannot be set if message TTLs are disabled",
                ));
            }
            config.allow_msg_ttl = true;
        }
        if !config.allow_rollup_hdrs {
            if pedantic {
                return Err(invalid(
                    "subject delete marker cannot be set if roll-ups are disabled",
                ));
            }
            config.allow_rollup_hdrs = true;
            config.deny_purge = false;
        }
    } else if config.subject_delete_marker_ttl_ns < 0 {
        return Err(invalid("subject delete marker TTL must not be negative"));
    }
    if config.allow_msg_schedules {
        if config.discard == Discard::New {
            return Err(invalid("message scheduling cannot use discard new"));
        }
        if !config.allow_rollup_hdrs {
            if pedantic {
                return Err(invalid(
                    "message scheduling cannot be set if roll-ups are disabled",
                ));
            }
            config.allow_rollup_hdrs = true;
            config.deny_purge = false;
        }
    }
    if config.persist_mode == PersistMode::Async {
        if config.storage != StorageType::File {
            return Err(invalid(
                "async persist mode is only supported on file storage",
            ));
        }
        if config.num_replicas > 1 {
            return Err(invalid(
                "async persist mode is not supported on replicated streams",
            ));
        }
        if config.allow_atomic {
            return Err(invalid(
                "async persist mode is not supported with atomic batch publish",
            ));
        }
    }
    check_mirror_and_sources(&config)?;
    if config.subjects.is_empty() {
        config.subjects.push(config.name.clone());
    } else {
        check_subjects(&config)?;
    }
    if let Some(transform) = &config.subject_transform {
        if !transform.src.is_empty() && !is_valid_subject(&transform.src) {
            return Err(ApiError::transform_invalid_source(&format!(
                "invalid subject {}",
                transform.src
            )));
        }
        if let Err(error) = validate_mapping(&transform.src, &transform.dest) {
            return Err(ApiError::transform_invalid_destination(&error.to_string()));
        }
    }
    check_republish(&mut config, pedantic)?;
    if config
        .placement
        .as_ref()
        .is_some_and(|placement| *placement == Placement::default())
    {
        config.placement = None;
    }
    if config
        .placement
        .as_ref()
        .is_some_and(|placement| !placement.preferred.is_empty())
    {
        return Err(invalid("preferred server not permitted in placement"));
    }
    Ok(config)
}

/// The mirror and source checks of `checkStreamCfg` that need no other
/// stream; then, as tern does not implement them yet, a refusal.
fn check_mirror_and_sources(config: &StreamConfig) -> Result<(), ApiError> {
    if let Some(mirror) = &config.mirror {
        if config.first_sequence > 0 {
            return Err(ApiError::mirror_with_first_sequence());
        }
        if !config.subjects.is_empty() {
            return Err(ApiError::mirror_with_subjects());
        }
        if !config.sources.is_empty() {
            return Err(ApiError::mirror_with_sources());
        }
        let refusals = [
            (
                config.allow_msg_counter,
                10173,
                "stream mirrors can not also calculate counters",
            ),
            (
                config.allow_atomic,
                10198,
                "stream mirrors can not also use atomic publishing",
            ),
            (
                config.allow_batched,
                10209,
                "stream mirrors can not also use batch publishing",
            ),
            (
                config.allow_msg_schedules,
                10186,
                "stream mirrors can not also schedule messages",
            ),
        ];
        if let Some((_, code, text)) = refusals.iter().find(|(refused, ..)| *refused) {
            return Err(ApiError::new(400, *code, *text));
        }
        if let Some(consumer) = &mirror.consumer {
            let deliver = &consumer.deliver_subject;
            if !is_valid_name(&consumer.name)
                || !is_valid_subject(deliver)
                || deliver.split('.').any(|token| token == "*" || token == ">")
                || mirror.opt_start_sequence != 0
                || mirror.opt_start_time.is_some()
                || !mirror.filter_subject.is_empty()
            {
                return Err(ApiError::new(
                    400,
                    10213,
                    "stream mirror consumer config is invalid",
                ));
            }
        }
        if !mirror.filter_subject.is_empty() && !mirror.subject_transforms.is_empty() {
            return Err(ApiError::new(
                400,
                10150,
                "mirror with multiple subject transforms cannot also have a single subject filter",
            ));
        }
        if config.subject_delete_marker_ttl_ns > 0 {
            return Err(invalid("subject delete markers forbidden on mirrors"));
        }
        if mirror.external.is_none() && !is_valid_name(&mirror.name) {
            return Err(ApiError::new(400, 10142, "mirrored stream name is invalid"));
        }
        return Err(invalid(MIRROR_NOT_SUPPORTED));
    }
    if config.sources.is_empty() {
        return Ok(());
    }
    if config.allow_msg_schedules {
        return Err(ApiError::new(
            400,
            10203,
            "stream source can not also schedule messages",
        ));
    }
    let mut identities: Vec<String> = Vec::with_capacity(config.sources.len());
    for source in &config.sources {
        if !is_valid_name(&source.name) {
            return Err(ApiError::new(400, 10141, "sourced stream name is invalid"));
        }
        let identity = source_identity(source);
        if identities.contains(&identity) {
            return Err(ApiError::new(
                400,
                10140,
                "duplicate source configuration detected",
            ));
        }
        identities.push(identity);
    }
    Err(invalid(SOURCES_NOT_SUPPORTED))
}

/// What makes two sources the same one (nats-server's `composeIName`).
fn source_identity(source: &StreamSource) -> String {
    let mut identity = source.name.clone();
    if let Some(external) = &source.external {
        identity.push_str(":E=");
        identity.push_str(&external.api);
    }
    if let Some(consumer) = &source.consumer {
        identity.push_str(":C=");
        identity.push_str(&consumer.name);
    }
    let or_all = |text: &str| {
        if text.is_empty() {
            ">".to_string()
        } else {
            text.to_string()
        }
    };
    if source.subject_transforms.is_empty() {
        identity.push(' ');
        identity.push_str(&or_all(&source.filter_subject));
        identity.push_str(" >");
    } else {
        for transform in &source.subject_transforms {
            identity.push(' ');
            identity.push_str(&or_all(&transform.src));
            identity.push(' ');
            identity.push_str(&or_all(&transform.dest));
        }
    }
    identity
}

fn check_discard_new_per_subject(config: &StreamConfig) -> Result<(), ApiError> {
    if config.discard_new_per_subject {
        if config.discard != Discard::New {
            return Err(invalid(
                "discard new per subject requires discard new policy to be set",
            ));
        }
        if config.max_msgs_per_subject <= 0 {
            return Err(invalid(
                "discard new per subject requires max msgs per subject > 0",
            ));
        }
    }
    Ok(())
}

/// The subject loop of `checkStreamCfg`.
fn check_subjects(config: &StreamConfig) -> Result<(), ApiError> {
    let mut seen: Vec<&str> = Vec::with_capacity(config.subjects.len());
    for (index, subject) in config.subjects.iter().enumerate() {
        if !is_valid_subject(subject) {
            return Err(invalid("invalid subject"));
        }
        if seen.contains(&subject.as_str()) {
            return Err(invalid("duplicate subjects detected"));
        }
        if subject == ">" {
            if !config.no_ack {
                return Err(invalid("capturing all subjects requires no-ack to be true"));
            }
            if config.num_replicas != 1 {
                return Err(invalid("capturing all subjects requires replicas of 1"));
            }
        }
        if !config.no_ack {
            for namespace in ["$JS.>", "$JSC.>", "$NRG.>"] {
                // Streams on `$JS.EVENT.>` predate the rule and stay allowed.
                if subjects_overlap(subject, namespace)
                    && !subject_is_subset(subject, "$JS.EVENT.>")
                {
                    return Err(invalid(
                        "subjects that overlap with jetstream api require no-ack to be true",
                    ));
                }
            }
            if subjects_overlap(subject, "$SYS.>") && !subject_is_subset(subject, "$SYS.ACCOUNT.>")
            {
                return Err(invalid(
                    "subjects that overlap with system api require no-ack to be true",
                ));
            }
        }
        for other in &config.subjects[index + 1..] {
            if subjects_overlap(other, subject) {
                return Err(invalid(&format!(
                    "subject {} overlaps with {}",
                    json::go_quote(subject),
                    json::go_quote(other)
                )));
            }
        }
        seen.push(subject);
    }
    Ok(())
}

fn check_republish(config: &mut StreamConfig, pedantic: bool) -> Result<(), ApiError> {
    let Some(mut republish) = config.republish.take() else {
        return Ok(());
    };
    if republish.src.is_empty() {
        if pedantic {
            return Err(ApiError::pedantic("republish source can not be empty"));
        }
        republish.src = ">".to_string();
    }
    // `>` to `>` republishes through the subject transform when the
    // transform's source is the only stream subject.
    if republish.dest == ">" && republish.src == ">" {
        if let Some(transform) = &config.subject_transform {
            if config.subjects.len() == 1 && transform.src == config.subjects[0] {
                if pedantic {
                    return Err(ApiError::pedantic(
                        "implicit republish based on subject transform",
                    ));
                }
                republish.src = transform.dest.clone();
                republish.dest = transform.dest.clone();
            }
        }
    }
    if config
        .subjects
        .iter()
        .any(|subject| subjects_overlap(&republish.dest, subject))
    {
        return Err(invalid(
            "stream configuration for republish destination forms a cycle",
        ));
    }
    if transform_error(&republish.src, &republish.dest).is_some() {
        return Err(invalid(&format!(
            "stream configuration for republish with transform from '{}' to '{}' not valid",
            republish.src, republish.dest
        )));
    }
    config.republish = Some(republish);
    Ok(())
}

/// nats-server's `ValidateMapping` for a subject transform destination, as
/// far as tern checks it: token shape, then [`transform_error`].
fn validate_mapping(source: &str, destination: &str) -> Result<(), MappingError> {
    if destination.is_empty() {
        return Ok(());
    }
    let mut after_full_wildcard = false;
    for token in destination.split('.') {
        if token.is_empty() || after_full_wildcard {
            return Err(MappingError::InvalidTransform {
                token: token.to_string(),
            });
        }
        if token.len() > 4 && token.starts_with("{{") && token.ends_with("}}") {
            if mapping_function(token).is_none() {
                return Err(MappingError::UnknownFunction {
                    token: token.to_string(),
                });
            }
            continue;
        }
        if token == ">" {
            after_full_wildcard = true;
        } else if token.contains([' ', '\t', '\n', '\r', '\x0c']) {
            return Err(MappingError::InvalidTransform {
                token: String::new(),
            });
        }
    }
    match transform_error(source, destination) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// Why nats-server's `ValidateMapping` or `NewSubjectTransform` refuses a
/// transform destination, with its texts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum MappingError {
    /// Go's `mappingDestinationErr` omits ` in <token>` when it is empty.
    #[error(
        "invalid mapping destination: invalid transform{}{token}",
        if token.is_empty() { "" } else { " in " }
    )]
    InvalidTransform { token: String },
    #[error("invalid mapping destination: unknown function in {token}")]
    UnknownFunction { token: String },
    #[error("invalid subject")]
    InvalidSubject,
    #[error("invalid mapping destination: not enough arguments passed to the function in {token}")]
    NotEnoughArguments { token: String },
    #[error(
        "invalid mapping destination: function argument is invalid or in the wrong format in {token}"
    )]
    InvalidArgument { token: String },
    /// A wildcard reference in a source without wildcards (`index`:
    /// `None`), or past its last one.
    #[error(
        "invalid mapping destination: wildcard index out of range in {token}{}",
        index.map_or(String::new(), |index| format!(": [{index}]"))
    )]
    WildcardOutOfRange { token: String, index: Option<usize> },
}

/// The name of a `{{function(...)}}` mapping token, if it is one nats-server
/// knows, and its argument text.
fn mapping_function(token: &str) -> Option<(String, &str)> {
    let inner = token.strip_prefix("{{")?.strip_suffix("}}")?.trim();
    let open = inner.find('(')?;
    let close = inner.rfind(')')?;
    if close < open || !inner[close + 1..].trim().is_empty() {
        return None;
    }
    let name = inner[..open].trim().to_ascii_lowercase();
    let known = [
        "wildcard",
        "partition",
        "splitfromleft",
        "splitfromright",
        "slicefromleft",
        "slicefromright",
        "split",
        "left",
        "right",
        "random",
    ];
    known
        .contains(&name.as_str())
        .then_some((name, &inner[open + 1..close]))
}

/// The parts of nats-server's `NewSubjectTransform` tern checks: both sides
/// valid, `>` on both or neither, no `*` in the destination, and wildcard
/// references (`$n`, `{{wildcard(n)}}`) within the source's `*` count.
/// Other mapping functions are accepted as written.
fn transform_error(source: &str, destination: &str) -> Option<MappingError> {
    if destination.is_empty() {
        return None;
    }
    let source = if source.is_empty() { ">" } else { source };
    let (Some((source_wildcards, source_full)), Some((destination_wildcards, destination_full))) =
        (subject_info(source), subject_info(destination))
    else {
        return Some(MappingError::InvalidSubject);
    };
    if destination_wildcards > 0 || source_full != destination_full {
        return Some(MappingError::InvalidSubject);
    }
    for token in destination.split('.') {
        let index = if let Some(digits) = token.strip_prefix('$') {
            match digits.parse::<usize>() {
                Ok(index) if token.len() > 1 => Some(index),
                _ => None,
            }
        } else if let Some((name, arguments)) = mapping_function(token) {
            if name != "wildcard" {
                continue;
            }
            match arguments.trim().parse::<usize>() {
                Ok(index) => Some(index),
                Err(_) if arguments.trim().is_empty() => {
                    return Some(MappingError::NotEnoughArguments {
                        token: token.to_string(),
                    })
                }
                Err(_) => {
                    return Some(MappingError::InvalidArgument {
                        token: token.to_string(),
                    })
                }
            }
        } else {
            None
        };
        let Some(index) = index else {
            continue;
        };
        if source_wildcards == 0 && !source_full {
            return Some(MappingError::WildcardOutOfRange {
                token: token.to_string(),
                index: None,
            });
        }
        if index > source_wildcards {
            return Some(MappingError::WildcardOutOfRange {
                token: token.to_string(),
                index: Some(index),
            });
        }
    }
    None
}

/// nats-server's `subjectInfo` (transforms): tokens non-empty and nothing
/// after `>`; returns the number of `*` tokens and whether `>` ends it.
/// Unlike [`is_valid_subject`] it does not look for whitespace.
fn subject_info(subject: &str) -> Option<(usize, bool)> {
    if subject.is_empty() {
        return None;
    }
    let mut partial = 0;
    let mut full = false;
    for token in subject.split('.') {
        if token.is_empty() || full {
            return None;
        }
        match token {
            ">" => full = true,
            "*" => partial += 1,
            _ => {}
        }
    }
    Some((partial, full))
}

/// Checks an update of `current` to `proposed` (both parsed; `proposed`
/// from [`parse`] with `is_create == false`) with nats-server's rules and
/// texts (`configUpdateCheck`): all `500/10052` except replicas (10074) and
/// mirror changes (10055). The caller then checks subject overlap (10065).
/// More than one replica is refused on a single server only.
pub fn check_update(
    current: &StreamConfig,
    proposed: &StreamConfig,
    clustered: bool,
) -> Result<(), ApiError> {
    // nats-server re-runs checkStreamCfg with `_nats.req.level` now stored;
    // of its checks only the metadata size can change outcome.
    if metadata_bytes(proposed) > METADATA_BYTES_MAX {
        return Err(invalid(&format!(
            "stream metadata exceeds maximum size of {METADATA_BYTES_MAX} bytes"
        )));
    }
    if proposed.name != current.name {
        return Err(invalid("stream configuration name must match original"));
    }
    if proposed.num_replicas > 1 && !clustered {
        return Err(ApiError::replicas_not_supported());
    }
    if proposed.storage != current.storage {
        return Err(invalid(
            "stream configuration update can not change storage type",
        ));
    }
    if proposed.retention != current.retention
        && (current.retention == Retention::WorkQueue || proposed.retention == Retention::WorkQueue)
    {
        return Err(invalid(
            "stream configuration update can not change retention policy to/from workqueue",
        ));
    }
    if !proposed.sealed && current.sealed {
        return Err(invalid(
            "stream configuration update can not unseal a sealed stream",
        ));
    }
    if !proposed.deny_delete && current.deny_delete {
        return Err(invalid(
            "stream configuration update can not cancel deny message deletes",
        ));
    }
    if !proposed.deny_purge && current.deny_purge {
        return Err(invalid(
            "stream configuration update can not cancel deny purge",
        ));
    }
    // Removing the mirror ("promoting" it) is allowed; changing it is not.
    if proposed.mirror.is_some() && proposed.mirror != current.mirror {
        return Err(ApiError::mirror_update_not_allowed());
    }
    check_discard_new_per_subject(proposed)?;
    if current.allow_msg_ttl && !proposed.allow_msg_ttl {
        return Err(invalid("message TTL status can not be disabled"));
    }
    if proposed.allow_msg_counter != current.allow_msg_counter {
        return Err(invalid(
            "stream configuration update can not change message counter setting",
        ));
    }
    if current.allow_msg_schedules && !proposed.allow_msg_schedules {
        return Err(invalid("message schedules can not be disabled"));
    }
    if proposed.persist_mode != current.persist_mode {
        return Err(invalid(
            "stream configuration update can not change persist mode",
        ));
    }
    Ok(())
}

/// [`check_update`], then the configuration nats-server stores: sealing a
/// stream also sets `max_age` 0, `discard` new, `deny_delete` and
/// `deny_purge` true and `allow_rollup_hdrs` false.
pub fn apply_update(
    current: &StreamConfig,
    proposed: &StreamConfig,
    clustered: bool,
) -> Result<StreamConfig, ApiError> {
    check_update(current, proposed, clustered)?;
    let mut updated = proposed.clone();
    if updated.sealed {
        updated.max_age_ns = 0;
        updated.discard = Discard::New;
        updated.deny_delete = true;
        updated.deny_purge = true;
        updated.allow_rollup_hdrs = false;
    }
    Ok(updated)
}

impl StreamConfig {
    /// The API level the configuration needs (`_nats.req.level`):
    /// 1 for TTLs, 2 for counters/atomic/schedules/async persist, 4 for
    /// batched publishing, else 0.
    pub fn required_api_level(&self) -> u32 {
        let mut level = 0;
        if self.allow_msg_ttl || self.subject_delete_marker_ttl_ns > 0 {
            level = 1;
        }
        if self.allow_msg_counter
            || self.allow_atomic
            || self.allow_msg_schedules
            || self.persist_mode == PersistMode::Async
        {
            level = 2;
        }
        if self.allow_batched {
            level = 4;
        }
        level
    }

    /// nats-server's `setStaticStreamMetadata`: drop the dynamic keys and
    /// store `_nats.req.level`.
    pub fn set_static_metadata(&mut self) {
        let level = self.required_api_level();
        set_static_metadata(&mut self.metadata, level);
    }

    /// Whether a create of `other` is idempotent against this (existing)
    /// configuration: equal once normalised, ignoring the server-owned
    /// `_nats.*` metadata (nats-server's `copyStreamMetadata` + DeepEqual).
    pub fn same_as(&self, other: &StreamConfig) -> bool {
        let strip = |config: &StreamConfig| {
            let mut config = config.clone();
            strip_server_metadata(&mut config.metadata);
            config
        };
        strip(self) == strip(other)
    }

    /// Appends the configuration as nats-server writes it: Go's field order,
    /// `omitempty` rules and escaping. `dynamic_metadata` adds
    /// `_nats.level` and `_nats.ver` (create, update and info responses);
    /// LIST elements and the stored form go without.
    pub fn write_json(&self, out: &mut String, dynamic_metadata: bool) {
        out.push_str("{\"name\":");
        json::write_string(out, &self.name);
        if !self.description.is_empty() {
            out.push_str(",\"description\":");
            json::write_string(out, &self.description);
        }
        if !self.subjects.is_empty() {
            out.push_str(",\"subjects\":");
            write_strings(out, &self.subjects);
        }
        push_field(out, "retention", &quoted(self.retention.as_str()));
        push_field(out, "max_consumers", &self.max_consumers.to_string());
        push_field(out, "max_msgs", &self.max_msgs.to_string());
        push_field(out, "max_bytes", &self.max_bytes.to_string());
        push_field(out, "max_age", &self.max_age_ns.to_string());
        push_field(
            out,
            "max_msgs_per_subject",
            &self.max_msgs_per_subject.to_string(),
        );
        if self.max_msg_size != 0 {
            push_field(out, "max_msg_size", &self.max_msg_size.to_string());
        }
        push_field(out, "discard", &quoted(self.discard.as_str()));
        push_field(out, "storage", &quoted(self.storage.as_str()));
        push_field(out, "num_replicas", &self.num_replicas.to_string());
        if self.no_ack {
            push_field(out, "no_ack", "true");
        }
        if self.duplicate_window_ns != 0 {
            push_field(
                out,
                "duplicate_window",
                &self.duplicate_window_ns.to_string(),
            );
        }
        if let Some(placement) = &self.placement {
            out.push_str(",\"placement\":");
            write_placement(out, placement);
        }
        if let Some(mirror) = &self.mirror {
            out.push_str(",\"mirror\":");
            write_source(out, mirror);
        }
        if !self.sources.is_empty() {
            out.push_str(",\"sources\":[");
            for (index, source) in self.sources.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_source(out, source);
            }
            out.push(']');
        }
        push_field(out, "compression", &quoted(self.compression.as_str()));
        if self.first_sequence != 0 {
            push_field(out, "first_seq", &self.first_sequence.to_string());
        }
        if let Some(transform) = &self.subject_transform {
            out.push_str(",\"subject_transform\":");
            write_transform(out, transform);
        }
        if let Some(republish) = &self.republish {
            out.push_str(",\"republish\":{");
            if !republish.src.is_empty() {
                out.push_str("\"src\":");
                json::write_string(out, &republish.src);
                out.push(',');
            }
            out.push_str("\"dest\":");
            json::write_string(out, &republish.dest);
            if republish.headers_only {
                out.push_str(",\"headers_only\":true");
            }
            out.push('}');
        }
        push_field(out, "allow_direct", bool_text(self.allow_direct));
        push_field(out, "mirror_direct", bool_text(self.mirror_direct));
        if self.discard_new_per_subject {
            push_field(out, "discard_new_per_subject", "true");
        }
        push_field(out, "sealed", bool_text(self.sealed));
        push_field(out, "deny_delete", bool_text(self.deny_delete));
        push_field(out, "deny_purge", bool_text(self.deny_purge));
        push_field(out, "allow_rollup_hdrs", bool_text(self.allow_rollup_hdrs));
        out.push_str(",\"consumer_limits\":{");
        let limits = &self.consumer_limits;
        if limits.inactive_threshold_ns != 0 {
            out.push_str("\"inactive_threshold\":");
            out.push_str(&limits.inactive_threshold_ns.to_string());
        }
        if limits.max_ack_pending != 0 {
            if limits.inactive_threshold_ns != 0 {
                out.push(',');
            }
            out.push_str("\"max_ack_pending\":");
            out.push_str(&limits.max_ack_pending.to_string());
        }
        out.push('}');
        push_field(out, "allow_msg_ttl", bool_text(self.allow_msg_ttl));
        if self.subject_delete_marker_ttl_ns != 0 {
            push_field(
                out,
                "subject_delete_marker_ttl",
                &self.subject_delete_marker_ttl_ns.to_string(),
            );
        }
        if self.allow_msg_counter {
            push_field(out, "allow_msg_counter", "true");
        }
        if self.allow_atomic {
            push_field(out, "allow_atomic", "true");
        }
        if self.allow_msg_schedules {
            push_field(out, "allow_msg_schedules", "true");
        }
        if self.persist_mode != PersistMode::Default {
            push_field(out, "persist_mode", &quoted(self.persist_mode.as_str()));
        }
        if self.allow_batched {
            push_field(out, "allow_batched", "true");
        }
        self.write_metadata(out, dynamic_metadata);
        out.push('}');
    }

    fn write_metadata(&self, out: &mut String, dynamic_metadata: bool) {
        let level = API_LEVEL.to_string();
        let mut entries: Vec<(&str, &str)> = self
            .metadata
            .iter()
            .filter(|(key, _)| {
                !dynamic_metadata || (*key != SERVER_LEVEL_KEY && *key != SERVER_VERSION_KEY)
            })
            .map(|(key, value)| (key.as_str(), value.as_str()))
            .collect();
        if dynamic_metadata {
            entries.push((SERVER_LEVEL_KEY, &level));
            entries.push((SERVER_VERSION_KEY, SERVER_VERSION));
            entries.sort_unstable();
        }
        if entries.is_empty() {
            return;
        }
        out.push_str(",\"metadata\":{");
        for (index, (key, value)) in entries.iter().enumerate() {
            if index > 0 {
                out.push(',');
            }
            json::write_string(out, key);
            out.push(':');
            json::write_string(out, value);
        }
        out.push('}');
    }

    /// The JSON stored on disk: [`StreamConfig::write_json`] without dynamic
    /// metadata, so [`StreamConfig::from_stored_json`] reads it back equal.
    pub fn to_stored_json(&self) -> String {
        let mut out = String::with_capacity(512);
        self.write_json(&mut out, false);
        out
    }

    /// Reads a stored configuration (as written by
    /// [`StreamConfig::to_stored_json`], or by nats-server). Unknown fields
    /// are ignored (a newer tern may add some); nothing is normalised.
    pub fn from_stored_json(bytes: &[u8]) -> Result<StreamConfig, StoredStreamConfigError> {
        let request: StreamConfigRequest =
            json::decode(bytes, &STREAM_CONFIG_SCHEMA, json::DecodeMode::Lenient)?;
        let (config, _) = request.into_parts();
        if !is_valid_name(&config.name) {
            return Err(StoredStreamConfigError::Name(json::go_quote(&config.name)));
        }
        Ok(config)
    }
}

/// A stored stream config that does not read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoredStreamConfigError {
    #[error("stored stream config: {0}")]
    Json(#[from] json::DecodeError),
    /// The name, quoted as Go quotes it.
    #[error("stored stream config: invalid name {0}")]
    Name(String),
}

impl fmt::Display for StreamConfig {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.to_stored_json())
    }
}

fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    json::write_string(&mut out, text);
    out
}

fn bool_text(value: bool) -> &'static str {
    if value {
        "true"
    } else {
        "false"
    }
}

fn push_field(out: &mut String, name: &str, value: &str) {
    out.push_str(",\"");
    out.push_str(name);
    out.push_str("\":");
    out.push_str(value);
}

fn write_strings(out: &mut String, values: &[String]) {
    out.push('[');
    for (index, value) in values.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        json::write_string(out, value);
    }
    out.push(']');
}

/// Writes `{"a":…,"b":…}` from the fields present, in order.
fn write_object(out: &mut String, fields: &[(&str, Option<String>)]) {
    out.push('{');
    let mut first = true;
    for (name, value) in fields {
        let Some(value) = value else {
            continue;
        };
        if !first {
            out.push(',');
        }
        first = false;
        out.push('"');
        out.push_str(name);
        out.push_str("\":");
        out.push_str(value);
    }
    out.push('}');
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| quoted(text))
}

fn write_placement(out: &mut String, placement: &Placement) {
    let tags = placement
        .tags
        .as_ref()
        .filter(|tags| !tags.is_empty())
        .map(|tags| {
            let mut text = String::new();
            write_strings(&mut text, tags);
            text
        });
    write_object(
        out,
        &[
            ("cluster", non_empty(&placement.cluster)),
            ("tags", tags),
            ("preferred", non_empty(&placement.preferred)),
        ],
    );
}

fn write_transform(out: &mut String, transform: &SubjectTransform) {
    write_object(
        out,
        &[
            ("src", Some(quoted(&transform.src))),
            ("dest", Some(quoted(&transform.dest))),
        ],
    );
}

fn write_source(out: &mut String, source: &StreamSource) {
    let start_time = source.opt_start_time.map(|time| {
        let mut text = String::new();
        time.write_json(&mut text);
        text
    });
    let transforms = (!source.subject_transforms.is_empty()).then(|| {
        let mut text = String::from("[");
        for (index, transform) in source.subject_transforms.iter().enumerate() {
            if index > 0 {
                text.push(',');
            }
            write_transform(&mut text, transform);
        }
        text.push(']');
        text
    });
    let external = source.external.as_ref().map(|external| {
        let mut text = String::new();
        write_object(
            &mut text,
            &[
                ("api", Some(quoted(&external.api))),
                ("deliver", Some(quoted(&external.deliver))),
            ],
        );
        text
    });
    let consumer = source.consumer.as_ref().map(|consumer| {
        let mut text = String::new();
        write_object(
            &mut text,
            &[
                ("name", non_empty(&consumer.name)),
                ("deliver_subject", non_empty(&consumer.deliver_subject)),
            ],
        );
        text
    });
    write_object(
        out,
        &[
            ("name", Some(quoted(&source.name))),
            (
                "opt_start_seq",
                (source.opt_start_sequence != 0).then(|| source.opt_start_sequence.to_string()),
            ),
            ("opt_start_time", start_time),
            ("filter_subject", non_empty(&source.filter_subject)),
            ("subject_transforms", transforms),
            ("external", external),
            ("consumer", consumer),
        ],
    );
}

impl<'de> Deserialize<'de> for StreamConfig {
    /// Reads the JSON form (as [`StreamConfig::from_stored_json`] does, but
    /// through any serde deserializer); `pedantic` is ignored.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let request = StreamConfigRequest::deserialize(deserializer)?;
        let (config, _) = request.into_parts();
        if config.name.is_empty() {
            return Err(de::Error::custom("stream config without a name"));
        }
        Ok(config)
    }
}

// ---------------------------------------------------------------------------
// Subjects, as nats-server's sublist.go.

/// nats-server's `IsValidSubject`: non-empty tokens, `>` only last, no
/// whitespace.
/// nats-server's `setStatic…Metadata`: the dynamic `_nats.ver` and
/// `_nats.level` go, `_nats.req.level` is stored.
pub fn set_static_metadata(metadata: &mut BTreeMap<String, String>, required_level: u32) {
    metadata.remove(SERVER_VERSION_KEY);
    metadata.remove(SERVER_LEVEL_KEY);
    metadata.insert(REQUIRED_LEVEL_KEY.to_string(), required_level.to_string());
}

/// Drops every server-owned `_nats.*` key (for "same config" comparisons).
pub fn strip_server_metadata(metadata: &mut BTreeMap<String, String>) {
    for key in [REQUIRED_LEVEL_KEY, SERVER_VERSION_KEY, SERVER_LEVEL_KEY] {
        metadata.remove(key);
    }
}

pub fn is_valid_subject(subject: &str) -> bool {
    crate::proto::subject::is_valid_subject(subject.as_bytes())
}

/// nats-server's `SubjectsCollide`: whether some literal subject could match
/// both `a` and `b` (`*` one token, `>` one or more trailing tokens).
pub fn subjects_overlap(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let tokens_a: Vec<&str> = a.split('.').collect();
    let tokens_b: Vec<&str> = b.split('.').collect();
    let (partial_a, full_a) = wildcards_of(&tokens_a);
    let (partial_b, full_b) = wildcards_of(&tokens_b);
    let literal_a = !(partial_a || full_a);
    let literal_b = !(partial_b || full_b);
    if literal_a && literal_b {
        return false;
    }
    if literal_a {
        return is_subset_tokens(&tokens_a, &tokens_b);
    }
    if literal_b {
        return is_subset_tokens(&tokens_b, &tokens_a);
    }
    if !full_a && !full_b && tokens_a.len() != tokens_b.len() {
        return false;
    }
    let (length_a, length_b) = (tokens_a.len(), tokens_b.len());
    if length_a != length_b
        && ((length_a < length_b && !full_a) || (length_b < length_a && !full_b))
    {
        return false;
    }
    tokens_a
        .iter()
        .zip(tokens_b.iter())
        .all(|(token_a, token_b)| tokens_can_match(token_a, token_b))
}

/// Whether any subject of `a` overlaps any subject of `b`.
pub fn any_subjects_overlap(a: &[String], b: &[String]) -> bool {
    a.iter()
        .any(|left| b.iter().any(|right| subjects_overlap(left, right)))
}

/// Whether the literal `subject` matches `filter` (wildcards allowed in the
/// filter only).
pub fn subject_matches(filter: &str, subject: &str) -> bool {
    crate::proto::subject::matches(filter.as_bytes(), subject.as_bytes())
}

/// nats-server's `subjectIsSubsetMatch(subject, test)`: every subject
/// `subject` matches is matched by `test`.
pub fn subject_is_subset(subject: &str, test: &str) -> bool {
    let tokens: Vec<&str> = subject.split('.').collect();
    let test_tokens: Vec<&str> = test.split('.').collect();
    is_subset_tokens(&tokens, &test_tokens)
}

/// `analyzeTokens`: whether single-character `*` / `>` tokens occur.
fn wildcards_of(tokens: &[&str]) -> (bool, bool) {
    (tokens.contains(&"*"), tokens.contains(&">"))
}

/// `tokensCanMatch` (it looks at the first byte only, as nats-server).
fn tokens_can_match(a: &str, b: &str) -> bool {
    let (Some(first_a), Some(first_b)) = (a.bytes().next(), b.bytes().next()) else {
        return false;
    };
    if matches!(first_a, b'*' | b'>') || matches!(first_b, b'*' | b'>') {
        return true;
    }
    a == b
}

/// `isSubsetMatchTokenized`.
fn is_subset_tokens(tokens: &[&str], test: &[&str]) -> bool {
    for (index, test_token) in test.iter().enumerate() {
        let Some(token) = tokens.get(index) else {
            return false;
        };
        let Some(test_first) = test_token.bytes().next() else {
            return false;
        };
        if *test_token == ">" {
            return true;
        }
        let Some(first) = token.bytes().next() else {
            return false;
        };
        if *token == ">" {
            return false;
        }
        if first == b'*' && token.len() == 1 {
            if *test_token != "*" {
                return false;
            }
            continue;
        }
        if test_first != b'*' && token != test_token {
            return false;
        }
    }
    tokens.len() == test.len()
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
