//! Workloads: what to measure and how hard to push, read from TOML files in
//! `bench/workloads/` (in the spirit of OpenMessaging Benchmark's workload
//! files).
//!
//! Parsing is strict: an unknown key is an error (a typo must not silently
//! fall back to a default), and every number is checked against a stated
//! limit before anything connects. Example:
//!
//! ```toml
//! name = "latency-1k"
//! kind = "core_pub_sub"          # see `Kind`
//! rate_per_second = 1000         # omit for max-throughput mode
//! payload_bytes = 128
//! warmup_secs = 5
//! duration_secs = 30
//! ```

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Largest payload a workload may ask for (nats-server's own hard ceiling).
pub const PAYLOAD_BYTES_MAX: usize = 64 << 20;
/// Every message carries its origin time in its first 16 bytes.
pub const PAYLOAD_BYTES_MIN: usize = 16;
pub const RATE_PER_SECOND_MAX: u64 = 10_000_000;
pub const SUBJECTS_MAX: u32 = 1_000_000;
pub const STREAMS_MAX: u32 = 10_000;
pub const PRODUCERS_MAX: u32 = 256;
pub const CONSUMERS_MAX: u32 = 1024;
pub const CONNECTIONS_MAX: u32 = 1024;
pub const WINDOW_MAX: u32 = 1 << 16;
pub const WARMUP_SECS_MAX: f64 = 600.0;
pub const DURATION_SECS_MAX: f64 = 24.0 * 3600.0;
pub const DURATION_SECS_MIN: f64 = 0.1;
pub const TIMEOUT_MILLIS_MAX: u64 = 120_000;
pub const PRELOAD_MESSAGES_MAX: u64 = 100_000_000;
pub const BATCH_MESSAGES_MAX: u32 = 10_000;
/// A workload file larger than this is refused before parsing.
pub const FILE_BYTES_MAX: u64 = 1 << 20;

/// What is measured; see `measure.rs` for each one's exact definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Core NATS: publish → receipt by a subscriber on another connection.
    CorePubSub,
    /// Core NATS: request → reply from a responder on another connection.
    RequestReply,
    /// JetStream: publish → PubAck (`window = 1`: one in flight; more:
    /// windowed async publishing).
    JsPublish,
    /// JetStream: publish → receipt by a consumer of the stream.
    JsEndToEnd,
    /// JetStream: preload the stream, then drain it with a pull consumer.
    JsPullDrain,
    /// JetStream: preload the stream, then deliver it to a push consumer.
    JsPushThroughput,
}

impl Kind {
    pub fn is_jetstream(self) -> bool {
        !matches!(self, Kind::CorePubSub | Kind::RequestReply)
    }

    /// Kinds that measure how fast a preloaded stream is read, not a paced
    /// publish.
    pub fn is_drain(self) -> bool {
        matches!(self, Kind::JsPullDrain | Kind::JsPushThroughput)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Storage {
    #[default]
    File,
    Memory,
}

/// How sends are paced and where a latency sample starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Loop {
    /// Open loop, coordinated omission corrected: send *i* is due at
    /// `start + i / rate` and its latency counts from that time.
    #[default]
    Open,
    /// Closed loop, uncorrected (the classic mistake, kept to prove the
    /// correction): latency counts from the actual send, and a late send
    /// pushes the whole schedule back.
    ClosedUncorrected,
}

/// One workload file, validated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub kind: Kind,
    /// Target rate over all producers; `None` is max-throughput mode.
    #[serde(default)]
    pub rate_per_second: Option<u64>,
    #[serde(default)]
    pub pacing: Loop,
    /// Requests (or publishes awaiting a PubAck / receipt) in flight per
    /// producer, at most. In max-throughput mode this is the window.
    #[serde(default = "default_window")]
    pub window: u32,
    #[serde(default = "default_payload_bytes")]
    pub payload_bytes: usize,
    /// Distinct subjects the producers spread over (keyed workloads).
    #[serde(default = "one")]
    pub subjects: u32,
    #[serde(default = "one")]
    pub streams: u32,
    #[serde(default = "one")]
    pub replicas: u32,
    #[serde(default)]
    pub storage: Storage,
    #[serde(default = "default_warmup_secs")]
    pub warmup_secs: f64,
    #[serde(default = "default_duration_secs")]
    pub duration_secs: f64,
    #[serde(default = "one")]
    pub producers: u32,
    #[serde(default = "one")]
    pub consumers: u32,
    #[serde(default = "default_connections")]
    pub connections: u32,
    /// Bound on every single wait (connect, stream create, a reply); a run
    /// never hangs longer than this past its end.
    #[serde(default = "default_timeout_millis")]
    pub timeout_millis: u64,
    /// Drain kinds: messages stored before the consumer starts.
    #[serde(default = "default_preload_messages")]
    pub preload_messages: u64,
    /// Pull-drain kind: messages per fetch.
    #[serde(default = "default_batch_messages")]
    pub batch_messages: u32,
    /// Pull-drain kind: a durable consumer with explicit acks, the client
    /// acking every message (fire-and-forget `+ACK`); off: an ephemeral
    /// consumer with `ack_policy: none`.
    #[serde(default)]
    pub ack_explicit: bool,
}

fn one() -> u32 {
    1
}
fn default_window() -> u32 {
    1024
}
fn default_payload_bytes() -> usize {
    128
}
fn default_warmup_secs() -> f64 {
    2.0
}
fn default_duration_secs() -> f64 {
    10.0
}
fn default_connections() -> u32 {
    2
}
fn default_timeout_millis() -> u64 {
    5_000
}
fn default_preload_messages() -> u64 {
    100_000
}
fn default_batch_messages() -> u32 {
    256
}

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("cannot read workload {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("workload {path} is larger than {FILE_BYTES_MAX} bytes")]
    TooLarge { path: String },
    #[error("workload {path}: {source}")]
    Parse {
        path: String,
        source: toml::de::Error,
    },
    #[error("workload {name}: {field} = {value} is outside {limits}")]
    Invalid {
        name: String,
        field: &'static str,
        value: String,
        limits: String,
    },
}

impl Workload {
    /// Reads, parses and validates a workload file.
    pub fn load(path: &Path) -> Result<Workload, WorkloadError> {
        let shown = path.display().to_string();
        let metadata = std::fs::metadata(path).map_err(|source| WorkloadError::Read {
            path: shown.clone(),
            source,
        })?;
        if metadata.len() > FILE_BYTES_MAX {
            return Err(WorkloadError::TooLarge { path: shown });
        }
        let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Read {
            path: shown.clone(),
            source,
        })?;
        Workload::parse(&text, &shown)
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Workload, WorkloadError> {
        let workload: Workload = toml::from_str(text).map_err(|source| WorkloadError::Parse {
            path: origin.to_string(),
            source,
        })?;
        workload.validate()?;
        Ok(workload)
    }

    pub fn validate(&self) -> Result<(), WorkloadError> {
        let invalid = |field: &'static str, value: String, limits: &str| WorkloadError::Invalid {
            name: self.name.clone(),
            field,
            value,
            limits: limits.to_string(),
        };
        if self.name.is_empty()
            || self.name.len() > 64
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(invalid(
                "name",
                format!("{:?}", self.name),
                "1..=64 characters of [A-Za-z0-9_-]",
            ));
        }
        if let Some(rate) = self.rate_per_second {
            if rate == 0 || rate > RATE_PER_SECOND_MAX {
                return Err(invalid(
                    "rate_per_second",
                    rate.to_string(),
                    &format!("1..={RATE_PER_SECOND_MAX}"),
                ));
            }
        }
        if self.pacing == Loop::ClosedUncorrected && self.rate_per_second.is_none() {
            return Err(invalid(
                "pacing",
                "closed_uncorrected".into(),
                "a paced workload (closed_uncorrected needs rate_per_second)",
            ));
        }
        let ranges: [(&'static str, u64, u64, u64); 9] = [
            ("window", self.window.into(), 1, WINDOW_MAX.into()),
            (
                "payload_bytes",
                self.payload_bytes as u64,
                PAYLOAD_BYTES_MIN as u64,
                PAYLOAD_BYTES_MAX as u64,
            ),
            ("subjects", self.subjects.into(), 1, SUBJECTS_MAX.into()),
            ("streams", self.streams.into(), 1, STREAMS_MAX.into()),
            ("producers", self.producers.into(), 1, PRODUCERS_MAX.into()),
            ("consumers", self.consumers.into(), 1, CONSUMERS_MAX.into()),
            (
                "connections",
                self.connections.into(),
                1,
                CONNECTIONS_MAX.into(),
            ),
            (
                "timeout_millis",
                self.timeout_millis,
                10,
                TIMEOUT_MILLIS_MAX,
            ),
            (
                "batch_messages",
                self.batch_messages.into(),
                1,
                BATCH_MESSAGES_MAX.into(),
            ),
        ];
        for (field, value, low, high) in ranges {
            if !(low..=high).contains(&value) {
                return Err(invalid(
                    field,
                    value.to_string(),
                    &format!("{low}..={high}"),
                ));
            }
        }
        if !matches!(self.replicas, 1 | 3 | 5) {
            return Err(invalid("replicas", self.replicas.to_string(), "1, 3 or 5"));
        }
        if !(0.0..=WARMUP_SECS_MAX).contains(&self.warmup_secs) {
            return Err(invalid(
                "warmup_secs",
                self.warmup_secs.to_string(),
                &format!("0..={WARMUP_SECS_MAX}"),
            ));
        }
        if !(DURATION_SECS_MIN..=DURATION_SECS_MAX).contains(&self.duration_secs) {
            return Err(invalid(
                "duration_secs",
                self.duration_secs.to_string(),
                &format!("{DURATION_SECS_MIN}..={DURATION_SECS_MAX}"),
            ));
        }
        if self.kind.is_drain() && !(1..=PRELOAD_MESSAGES_MAX).contains(&self.preload_messages) {
            return Err(invalid(
                "preload_messages",
                self.preload_messages.to_string(),
                &format!("1..={PRELOAD_MESSAGES_MAX}"),
            ));
        }
        if let Some(rate) = self.rate_per_second {
            // Each producer must be able to pace itself: at most 1 M sends/s
            // per producer thread.
            let per_producer = rate / u64::from(self.producers);
            if per_producer > 1_000_000 {
                return Err(invalid(
                    "rate_per_second",
                    rate.to_string(),
                    "1 M per producer (add producers)",
                ));
            }
        }
        Ok(())
    }

    /// True when JetStream acks must mean "on stable storage", so a
    /// reference nats-server must run with `sync_interval: always`.
    pub fn is_durable(&self) -> bool {
        self.kind.is_jetstream() && self.storage == Storage::File
    }

    pub fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup_secs)
    }

    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.duration_secs)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_what_is_left_out() {
        let workload = Workload::parse("name = \"x\"\nkind = \"core_pub_sub\"\n", "test").unwrap();
        assert_eq!(workload.rate_per_second, None);
        assert_eq!(workload.payload_bytes, 128);
        assert_eq!(workload.connections, 2);
        assert_eq!(workload.storage, Storage::File);
        assert_eq!(workload.pacing, Loop::Open);
        assert!(!workload.is_durable());
    }

    #[test]
    fn unknown_keys_are_refused() {
        let error = Workload::parse("name = \"x\"\nkind = \"core_pub_sub\"\nrate = 5\n", "test")
            .unwrap_err();
        assert!(error.to_string().contains("unknown field"), "{error}");
    }

    #[test]
    fn limits_are_checked() {
        for (text, field) in [
            ("rate_per_second = 0", "rate_per_second"),
            ("payload_bytes = 4", "payload_bytes"),
            ("replicas = 2", "replicas"),
            ("producers = 0", "producers"),
            ("duration_secs = 0.0", "duration_secs"),
            ("window = 100000", "window"),
            ("pacing = \"closed_uncorrected\"", "pacing"),
        ] {
            let error = Workload::parse(
                &format!("name = \"x\"\nkind = \"js_publish\"\n{text}\n"),
                "test",
            )
            .unwrap_err();
            assert!(
                matches!(&error, WorkloadError::Invalid { field: f, .. } if *f == field),
                "{text}: {error}"
            );
        }
    }

    #[test]
    fn bundled_workloads_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) == Some("toml") {
                let workload = Workload::load(&path).unwrap();
                assert_eq!(
                    Some(workload.name.as_str()),
                    path.file_stem().and_then(|s| s.to_str())
                );
                names.push(workload.name);
            }
        }
        names.sort();
        for expected in [
            "latency-1k",
            "latency-10k",
            "latency-50k",
            "max-throughput",
            "payload-16k",
            "subjects-1024",
            "many-streams",
            "r3",
            "smoke",
        ] {
            assert!(names.iter().any(|n| n == expected), "missing {expected}");
        }
    }
}
