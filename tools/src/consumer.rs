//! `tern consumer add|info|ls|next|rm`: the `nats` CLI's consumer commands
//! over the raw JetStream API, with every flag the `nats` CLI gives them
//! (docs/cli.md has the inventory). `add` sends a ConsumerConfig holding
//! what the flags give (and the ack policy `nats --defaults` picks); the
//! server fills in the rest and refuses what it does not take. `next`
//! pulls in batches of at most [`PULL_BATCH_MAX`], prints each body on its
//! own line and acks it (the last ack waits for the server's
//! confirmation), so `--count 10000` is a few dozen round trips rather
//! than ten thousand.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand, ValueEnum};
use futures::StreamExt;
use serde_json::{json, Map, Value};

use crate::api::{self, Api};
use crate::error::CliError;
use crate::output::{line, table};
use crate::progress;
use crate::stream::{print_columns, require_force};
use crate::timestamp::{parse_date_time, rfc3339};
use crate::units;

/// Messages asked for by one pull request of `next` (and so at most
/// unacknowledged at once: below the server's default max_ack_pending).
pub const PULL_BATCH_MAX: u64 = 256;
/// Consumers listed by `consumer ls` at most.
pub const CONSUMERS_LISTED_MAX: usize = 100_000;
/// Steps of a `--backoff linear` policy at most (the server keeps the
/// list in every consumer's config).
pub const BACKOFF_STEPS_MAX: u64 = 1_000;
/// A consumer config file read at most.
const CONFIG_FILE_BYTES_MAX: u64 = 1 << 20;

/// `tern consumer …`: the subcommand, and the nats CLI's `-a` of every
/// consumer command.
#[derive(Debug, Args)]
pub struct ConsumerArgs {
    /// Include system streams when picking a stream (accepted: tern never
    /// picks, the stream is always named)
    #[arg(short = 'a', long, global = true)]
    pub all: bool,
    #[command(subcommand)]
    pub command: ConsumerCommand,
}

#[derive(Debug, Subcommand)]
pub enum ConsumerCommand {
    /// Create a consumer (durable when named)
    #[command(visible_alias = "create", alias = "new")]
    Add(Box<AddArgs>),
    /// Show a consumer's configuration and state
    #[command(alias = "nfo")]
    Info(InfoArgs),
    /// List a stream's consumers
    #[command(visible_alias = "list")]
    Ls(LsArgs),
    /// Fetch messages from a pull consumer, print their bodies and ack them
    Next(NextArgs),
    /// Delete a consumer (needs --force)
    #[command(visible_alias = "delete", alias = "del")]
    Rm(RmArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AckPolicy {
    Explicit,
    None,
    All,
    /// Acks follow the flow control of a push consumer (nats-server 2.14+)
    #[value(name = "flow_control", alias = "flow-control")]
    FlowControl,
}

impl AckPolicy {
    fn name(self) -> &'static str {
        match self {
            AckPolicy::Explicit => "explicit",
            AckPolicy::None => "none",
            AckPolicy::All => "all",
            AckPolicy::FlowControl => "flow_control",
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReplayPolicy {
    Instant,
    Original,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackoffMode {
    Linear,
    None,
}

/// The config flags of `consumer add`, as the nats CLI names them; `None`
/// (or empty) leaves a field to the server.
#[derive(Debug, Args, Default)]
pub struct ConfigArgs {
    /// A pull consumer (the default when no --target is given)
    #[arg(long)]
    pub pull: bool,
    /// Push consumer: deliver to this subject
    #[arg(long, value_name = "SUBJECT")]
    pub target: Option<String>,
    /// Push consumer: deliver to this queue group only
    #[arg(long, value_name = "GROUP")]
    pub deliver_group: Option<String>,
    /// Acknowledgement policy [default: explicit for pull, none for push]
    #[arg(long, value_enum)]
    pub ack: Option<AckPolicy>,
    /// Push consumer: a delivery rate limit, bits per second
    #[arg(long, value_name = "BPS")]
    pub bps: Option<u64>,
    /// A redelivery backoff policy: linear (--backoff-steps from
    /// --backoff-min to --backoff-max) or none
    #[arg(long, value_enum, value_name = "MODE")]
    pub backoff: Option<BackoffMode>,
    /// Steps of the backoff policy [default: 10]
    #[arg(long, value_name = "STEPS")]
    pub backoff_steps: Option<u64>,
    /// Shortest backoff period [default: 1m]
    #[arg(long, value_name = "DURATION")]
    pub backoff_min: Option<String>,
    /// Longest backoff period [default: 20m]
    #[arg(long, value_name = "DURATION")]
    pub backoff_max: Option<String>,
    /// Where delivery starts: all, new (next), last, subject (last per
    /// subject), a stream sequence, or a duration back from now (e.g. 1h)
    #[arg(long, value_name = "POLICY")]
    pub deliver: Option<String>,
    /// Only messages on these subjects (repeatable; comma or space
    /// separated)
    #[arg(long, value_name = "SUBJECTS")]
    pub filter: Vec<String>,
    /// Push consumer: flow control
    #[arg(long)]
    pub flow_control: bool,
    /// Push consumer: idle heartbeat interval, e.g. 5s (-1: none)
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub heartbeat: Option<String>,
    /// Deliver only the headers (with Nats-Msg-Size), no bodies
    #[arg(long, overrides_with = "no_headers_only")]
    pub headers_only: bool,
    /// Deliver bodies (the default)
    #[arg(long, overrides_with = "headers_only")]
    pub no_headers_only: bool,
    /// Deliveries of one message at most (-1 unlimited)
    #[arg(long, value_name = "TRIES", allow_hyphen_values = true)]
    pub max_deliver: Option<i64>,
    /// Unacknowledged messages at most before delivery pauses (0 or -1:
    /// the server's default)
    #[arg(
        long,
        alias = "max-outstanding",
        value_name = "N",
        allow_hyphen_values = true
    )]
    pub max_pending: Option<i64>,
    /// Pull requests waiting at most
    #[arg(long, value_name = "PULLS")]
    pub max_waiting: Option<i64>,
    /// Largest batch a pull request may ask for
    #[arg(long, value_name = "BATCH_SIZE")]
    pub max_pull_batch: Option<i64>,
    /// Longest expiry a pull request may ask for, e.g. 30s
    #[arg(long, value_name = "EXPIRES")]
    pub max_pull_expire: Option<String>,
    /// Largest max_bytes a pull request may ask for
    #[arg(long, value_name = "BYTES")]
    pub max_pull_bytes: Option<i64>,
    /// Replay policy
    #[arg(long, value_enum)]
    pub replay: Option<ReplayPolicy>,
    /// Percentage of acks sampled into advisories (1 to 100)
    #[arg(long, value_name = "PERCENT", allow_hyphen_values = true)]
    pub sample: Option<i64>,
    /// Time allowed for an ack before redelivery (ack_wait), e.g. 30s
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub wait: Option<String>,
    /// Remove the consumer after this long without activity
    #[arg(long, value_name = "THRESHOLD")]
    pub inactive_threshold: Option<String>,
    /// Keep the consumer's state in memory whatever the stream's storage
    #[arg(long)]
    pub memory: bool,
    /// Replicas of the consumer's state (0: the stream's)
    #[arg(long, value_name = "N")]
    pub replicas: Option<i64>,
    /// Metadata, KEY=VALUE (repeatable)
    #[arg(long, value_name = "META")]
    pub metadata: Vec<String>,
    /// Paused until this time (2006-01-02 15:04:05, UTC) or for this long
    /// from now (e.g. 1h)
    #[arg(long, value_name = "UNTIL")]
    pub pause: Option<String>,
    /// A pinned-client consumer of these priority groups (repeatable)
    #[arg(long, value_name = "GROUPS")]
    pub pinned_groups: Vec<String>,
    /// How long a pinned client may go without pulling before it is unpinned
    #[arg(long, value_name = "TTL")]
    pub pinned_ttl: Option<String>,
    /// An overflow consumer of these priority groups (repeatable)
    #[arg(long, value_name = "GROUPS")]
    pub overflow_groups: Vec<String>,
    /// A prioritized consumer of these priority groups (repeatable)
    #[arg(long, value_name = "GROUPS")]
    pub prioritized_groups: Vec<String>,
    /// A description of the consumer
    #[arg(long)]
    pub description: Option<String>,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// Stream name
    pub stream: String,
    /// Consumer name (durable unless --ephemeral)
    pub consumer: Option<String>,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// An ephemeral consumer (removed when inactive); the name is optional
    #[arg(long, conflicts_with = "durable")]
    pub ephemeral: bool,
    /// A durable consumer (the default for a named one); --durable=NAME
    /// names it when no name is given. tern's: the nats CLI has no
    /// --durable on consumer add
    #[arg(
        long,
        value_name = "NAME",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = ""
    )]
    pub durable: Option<String>,
    /// Start from the consumer config (or `consumer info --json`) in this
    /// JSON file; the flags given change it
    #[arg(long = "config", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// Only check the configuration and print it; create nothing
    #[arg(long)]
    pub validate: bool,
    /// Write the configuration to this file instead of creating it
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Accepted for the nats CLI's scripts: tern never prompts, and what is
    /// not given is what `nats --defaults` picks (the server's defaults)
    #[arg(long)]
    pub defaults: bool,
    /// Print the API's answer as JSON
    #[arg(short = 'j', long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Stream name
    pub stream: String,
    /// Consumer name
    pub consumer: String,
    /// Print the API's answer as JSON
    #[arg(short = 'j', long)]
    pub json: bool,
    /// Accepted: tern never offers a list to pick from
    #[arg(long)]
    pub no_select: bool,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Stream name
    pub stream: String,
    /// Only the names, one a line
    #[arg(short = 'n', long)]
    pub names: bool,
    /// The names as a JSON array (as the nats CLI)
    #[arg(short = 'j', long)]
    pub json: bool,
    /// Accepted: tern never offers a list to pick from
    #[arg(long)]
    pub no_select: bool,
}

#[derive(Debug, Args)]
pub struct NextArgs {
    /// Stream name
    pub stream: String,
    /// Consumer name
    pub consumer: String,
    /// Messages to fetch
    #[arg(long, default_value_t = 1)]
    pub count: u64,
    /// Acknowledge each message (the default)
    #[arg(long, overrides_with = "no_ack")]
    pub ack: bool,
    /// Leave the messages unacknowledged
    #[arg(long, overrides_with = "ack")]
    pub no_ack: bool,
    /// Negatively acknowledge each message (redelivered at once)
    #[arg(long)]
    pub nak: bool,
    /// Terminate each message (never redelivered)
    #[arg(long)]
    pub term: bool,
    /// Wait a random time up to this long before each acknowledgement
    #[arg(long, value_name = "DURATION")]
    pub wait: Option<String>,
    /// Accepted for the nats CLI's scripts: tern prints only bodies
    #[arg(short = 'r', long)]
    pub raw: bool,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    /// Stream name
    pub stream: String,
    /// Consumer name
    pub consumer: String,
    /// Delete without asking (required: tern never prompts)
    #[arg(short = 'f', long)]
    pub force: bool,
}

pub async fn execute(api: &Api, command: ConsumerCommand) -> Result<(), CliError> {
    match command {
        ConsumerCommand::Add(args) => add(api, *args).await,
        ConsumerCommand::Info(args) => {
            let answer = info(api, &args.stream, &args.consumer).await?;
            print_info(answer, args.json);
            Ok(())
        }
        ConsumerCommand::Ls(args) => ls(api, args).await,
        ConsumerCommand::Next(args) => next(api, args).await,
        ConsumerCommand::Rm(args) => {
            let action = format!("consumer rm {} {}", args.stream, args.consumer);
            require_force(args.force, &action)?;
            api.request(
                &action,
                &format!("CONSUMER.DELETE.{}.{}", args.stream, args.consumer),
                &Value::Null,
            )
            .await?;
            Ok(())
        }
    }
}

fn usage(text: impl Into<String>) -> CliError {
    CliError::Usage(text.into())
}

fn duration_flag(flag: &'static str, text: &str) -> Result<Duration, CliError> {
    units::parse_duration(text).map_err(CliError::unit(flag))
}

/// `--subjects "a b,c" --subjects d` as the nats CLI splits them.
pub fn split_subjects(given: &[String]) -> Vec<String> {
    given
        .iter()
        .flat_map(|text| text.split([',', ' ', '\t']))
        .map(str::trim)
        .filter(|subject| !subject.is_empty())
        .map(String::from)
        .collect()
}

/// `--metadata KEY=VALUE` (or `KEY:VALUE`, as the nats CLI splits them)
/// flags as a JSON object; none is `None`.
pub fn metadata(given: &[String]) -> Result<Option<Map<String, Value>>, CliError> {
    if given.is_empty() {
        return Ok(None);
    }
    let mut map = Map::new();
    for text in given {
        let Some(at) = text.find([':', '=']) else {
            return Err(usage(format!("--metadata {text:?}: expected KEY=VALUE")));
        };
        let (key, value) = (&text[..at], &text[at + 1..]);
        if key.starts_with("_nats.") {
            return Err(usage(format!(
                "--metadata {text:?}: keys starting _nats. are the server's"
            )));
        }
        map.insert(key.to_string(), json!(value));
    }
    Ok(Some(map))
}

/// The nats CLI's linear backoff (jsm.go's `LinearBackoffPeriods`): `steps`
/// periods from `min` rising by (max - min) / steps, each step rounded to
/// the millisecond.
pub fn linear_backoff(steps: u64, min: Duration, max: Duration) -> Result<Vec<Duration>, CliError> {
    if steps == 0 || steps > BACKOFF_STEPS_MAX {
        return Err(usage(format!(
            "--backoff-steps: from 1 to {BACKOFF_STEPS_MAX}"
        )));
    }
    if min.is_zero() || max.is_zero() {
        return Err(usage("--backoff-min and --backoff-max: more than 0"));
    }
    let (min, max) = if max < min { (max, min) } else { (min, max) };
    let step_ns = (max - min).as_nanos() / u128::from(steps);
    if max != min && step_ns == 0 {
        return Err(usage(format!(
            "--backoff: the range from {} to {} is too small for {steps} steps",
            units::format_duration(min),
            units::format_duration(max)
        )));
    }
    Ok((0..u128::from(steps))
        .map(|step| {
            let offset_ns = step * step_ns;
            // Go's Duration.Round: halves away from zero.
            let rounded_ns = (offset_ns + 500_000) / 1_000_000 * 1_000_000;
            min + Duration::from_nanos(rounded_ns as u64)
        })
        .collect())
}

/// The durations of a backoff list, in the API's nanoseconds.
fn nanos_list(durations: &[Duration]) -> Value {
    Value::Array(
        durations
            .iter()
            .map(|duration| json!(units::nanos(*duration)))
            .collect(),
    )
}

impl ConfigArgs {
    /// Writes the given flags into a ConsumerConfig object (which may
    /// hold a config file's fields already), as the nats CLI's
    /// `consumer add --defaults` builds it; `now` is the clock `--deliver
    /// 1h` and `--pause 1h` count from.
    pub fn apply(&self, config: &mut Map<String, Value>, now: SystemTime) -> Result<(), CliError> {
        if self.pull && self.target.is_some() {
            return Err(usage(
                "--pull and --target: a consumer is pull or push, not both",
            ));
        }
        let mut set = |key: &str, value: Value| {
            config.insert(key.into(), value);
        };
        if let Some(target) = &self.target {
            set("deliver_subject", json!(target));
        }
        if let Some(group) = &self.deliver_group {
            set("deliver_group", json!(group));
        }
        if let Some(deliver) = &self.deliver {
            for (key, value) in deliver_policy(deliver, now)? {
                set(key, value);
            }
        }
        if let Some(description) = &self.description {
            set("description", json!(description));
        }
        let push = config.contains_key("deliver_subject");
        match self.ack {
            Some(ack) => {
                config.insert("ack_policy".into(), json!(ack.name()));
            }
            None => {
                // `nats --defaults`: explicit for pull, none for push.
                let ack = if push {
                    AckPolicy::None
                } else {
                    AckPolicy::Explicit
                };
                config
                    .entry("ack_policy")
                    .or_insert_with(|| json!(ack.name()));
            }
        }
        let acks = config.get("ack_policy").and_then(Value::as_str) != Some("none");
        self.apply_delivery(config, push, acks)?;
        self.apply_limits(config, acks)?;
        self.apply_placement(config, now)
    }

    /// Filters, replay, heartbeats, flow control, headers, sampling.
    fn apply_delivery(
        &self,
        config: &mut Map<String, Value>,
        push: bool,
        acks: bool,
    ) -> Result<(), CliError> {
        if let Some(text) = &self.wait {
            // The nats CLI's default is -1s: only a positive wait is sent.
            let trimmed = text.trim();
            if !trimmed.starts_with('-') {
                let wait = duration_flag("--wait", trimmed)?;
                if !wait.is_zero() {
                    config.insert("ack_wait".into(), json!(units::nanos(wait)));
                }
            }
        }
        if let Some(sample) = self.sample {
            if sample > 100 {
                return Err(usage("--sample: a percentage from 1 to 100"));
            }
            if sample > 0 {
                config.insert("sample_freq".into(), json!(sample.to_string()));
            }
        }
        if let Some(replay) = self.replay {
            let name = match replay {
                ReplayPolicy::Instant => "instant",
                ReplayPolicy::Original => "original",
            };
            config.insert("replay_policy".into(), json!(name));
        }
        let filters = split_subjects(&self.filter);
        match filters.as_slice() {
            [] => {}
            [one] => {
                config.insert("filter_subject".into(), json!(one));
            }
            many => {
                config.insert("filter_subjects".into(), json!(many));
            }
        }
        let last_per_subject =
            config.get("deliver_policy").and_then(Value::as_str) == Some("last_per_subject");
        if last_per_subject
            && !config.contains_key("filter_subject")
            && !config.contains_key("filter_subjects")
        {
            config.insert("filter_subject".into(), json!(">"));
        }
        if let Some(text) = &self.heartbeat {
            if text.trim() != "-1" {
                if !push {
                    return Err(usage("--heartbeat: pull consumers take no idle heartbeats"));
                }
                let heartbeat = duration_flag("--heartbeat", text)?;
                config.insert("idle_heartbeat".into(), json!(units::nanos(heartbeat)));
            }
        }
        if self.flow_control {
            config.insert("flow_control".into(), json!(true));
        }
        if self.headers_only || self.no_headers_only {
            config.insert("headers_only".into(), json!(self.headers_only));
        }
        if let Some(bps) = self.bps.filter(|bps| *bps > 0) {
            if !push {
                return Err(usage("--bps: rate limits are for push consumers only"));
            }
            config.insert("rate_limit_bps".into(), json!(bps));
        }
        if let Some(mode) = self.backoff {
            if !acks {
                return Err(usage(
                    "--backoff: an --ack none consumer redelivers nothing",
                ));
            }
            if mode == BackoffMode::Linear {
                let min =
                    duration_flag("--backoff-min", self.backoff_min.as_deref().unwrap_or("1m"))?;
                let max = duration_flag(
                    "--backoff-max",
                    self.backoff_max.as_deref().unwrap_or("20m"),
                )?;
                let periods = linear_backoff(self.backoff_steps.unwrap_or(10), min, max)?;
                // As the nats CLI: unlimited deliveries become one more
                // than the policy's steps.
                if matches!(self.max_deliver, None | Some(-1)) {
                    config.insert("max_deliver".into(), json!(periods.len() + 1));
                }
                config.insert("backoff".into(), nanos_list(&periods));
            }
        } else if self.backoff_steps.is_some()
            || self.backoff_min.is_some()
            || self.backoff_max.is_some()
        {
            return Err(usage(
                "--backoff-steps, --backoff-min, --backoff-max: give --backoff linear too",
            ));
        }
        Ok(())
    }

    /// Deliveries, pending acks, pull request limits, inactivity.
    fn apply_limits(&self, config: &mut Map<String, Value>, acks: bool) -> Result<(), CliError> {
        if let Some(tries) = self.max_deliver {
            if !acks && tries != -1 {
                return Err(usage(
                    "--max-deliver: an --ack none consumer delivers each message once",
                ));
            }
            if acks && tries != 0 {
                config.insert("max_deliver".into(), json!(tries.max(-1)));
            }
        }
        if let Some(pending) = self.max_pending.filter(|pending| *pending > 0) {
            config.insert("max_ack_pending".into(), json!(pending));
        }
        if let Some(waiting) = self.max_waiting {
            config.insert("max_waiting".into(), json!(waiting));
        }
        if let Some(batch) = self.max_pull_batch.filter(|batch| *batch > 0) {
            config.insert("max_batch".into(), json!(batch));
        }
        if let Some(text) = &self.max_pull_expire {
            let expire = duration_flag("--max-pull-expire", text)?;
            if !expire.is_zero() {
                config.insert("max_expires".into(), json!(units::nanos(expire)));
            }
        }
        if let Some(bytes) = self.max_pull_bytes.filter(|bytes| *bytes > 0) {
            config.insert("max_bytes".into(), json!(bytes));
        }
        if let Some(text) = &self.inactive_threshold {
            let threshold = duration_flag("--inactive-threshold", text)?;
            config.insert("inactive_threshold".into(), json!(units::nanos(threshold)));
        }
        Ok(())
    }

    /// Replicas, memory, metadata, pause, priority groups.
    fn apply_placement(
        &self,
        config: &mut Map<String, Value>,
        now: SystemTime,
    ) -> Result<(), CliError> {
        if let Some(replicas) = self.replicas {
            if replicas < 0 {
                return Err(usage("--replicas: 0 (the stream's) or more"));
            }
            config.insert("num_replicas".into(), json!(replicas));
        }
        if self.memory {
            config.insert("mem_storage".into(), json!(true));
        }
        if let Some(metadata) = metadata(&self.metadata)? {
            config.insert("metadata".into(), Value::Object(metadata));
        }
        if let Some(text) = &self.pause {
            config.insert("pause_until".into(), json!(pause_until(text, now)?));
        }
        let groups = |given: &[String]| split_subjects(given);
        let (pinned, overflow, prioritized) = (
            groups(&self.pinned_groups),
            groups(&self.overflow_groups),
            groups(&self.prioritized_groups),
        );
        if !pinned.is_empty() && !overflow.is_empty() {
            return Err(usage(
                "--pinned-groups and --overflow-groups: one priority policy at a time",
            ));
        }
        let policy = if !pinned.is_empty() {
            Some(("pinned_client", pinned))
        } else if !overflow.is_empty() {
            Some(("overflow", overflow))
        } else if !prioritized.is_empty() {
            Some(("prioritized", prioritized))
        } else {
            None
        };
        if let Some((name, groups)) = policy {
            config.insert("priority_policy".into(), json!(name));
            config.insert("priority_groups".into(), json!(groups));
        }
        if let Some(text) = &self.pinned_ttl {
            if config.get("priority_policy").and_then(Value::as_str) != Some("pinned_client") {
                return Err(usage("--pinned-ttl: give --pinned-groups too"));
            }
            let ttl = duration_flag("--pinned-ttl", text)?;
            config.insert("priority_timeout".into(), json!(units::nanos(ttl)));
        }
        Ok(())
    }
}

/// `--pause` as the nats CLI reads it: `2006-01-02 15:04:05` (UTC), or a
/// duration from now.
pub fn pause_until(text: &str, now: SystemTime) -> Result<String, CliError> {
    if let Some(time) = parse_date_time(text) {
        return Ok(rfc3339(time));
    }
    let duration = units::parse_duration(text).map_err(|_| {
        usage(format!(
            "--pause {text}: expected a time such as \"2026-01-02 15:04:05\" (UTC) or a duration such as 1h"
        ))
    })?;
    Ok(rfc3339(now + duration))
}

/// `--deliver` as the nats CLI reads it: a policy name, a stream sequence,
/// or a duration back from now.
pub fn deliver_policy(text: &str, now: SystemTime) -> Result<Vec<(&'static str, Value)>, CliError> {
    let policy = |name: &str| vec![("deliver_policy", json!(name))];
    Ok(match text.trim().to_ascii_lowercase().as_str() {
        "all" => policy("all"),
        "new" | "next" => policy("new"),
        "last" => policy("last"),
        "subject" | "last_per_subject" | "last-per-subject" => policy("last_per_subject"),
        number if number.chars().all(|c| c.is_ascii_digit()) && !number.is_empty() => {
            let sequence: u64 = number
                .parse()
                .map_err(|_| usage(format!("--deliver {text}: sequence out of range")))?;
            vec![
                ("deliver_policy", json!("by_start_sequence")),
                ("opt_start_seq", json!(sequence)),
            ]
        }
        _ => {
            let back = units::parse_duration(text).map_err(|_| {
                usage(format!(
                    "--deliver {text}: expected all, new, last, subject, a sequence or a duration such as 1h"
                ))
            })?;
            let start = now.checked_sub(back).unwrap_or(UNIX_EPOCH);
            vec![
                ("deliver_policy", json!("by_start_time")),
                ("opt_start_time", json!(rfc3339(start))),
            ]
        }
    })
}

/// A `--config` file's consumer config: a ConsumerConfig, or the
/// `config` of a `consumer info --json`.
fn read_config_file(path: &std::path::Path) -> Result<Map<String, Value>, CliError> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(CONFIG_FILE_BYTES_MAX).read_to_string(&mut text))
        .map_err(|source| CliError::ReadFile {
            what: "the consumer config",
            path: path.display().to_string(),
            source,
        })?;
    let not_config = || {
        usage(format!(
            "--config {}: not a JSON consumer config object",
            path.display()
        ))
    };
    let mut config = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => map,
        _ => return Err(not_config()),
    };
    if let Some(Value::Object(inner)) = config.remove("config") {
        config = inner;
    }
    crate::stream::strip_server_metadata(&mut config);
    Ok(config)
}

/// A durable name the nats CLI accepts: no `.`, `*` or `>`.
fn check_name(name: &str) -> Result<(), CliError> {
    if name.is_empty() || name.contains(['.', '*', '>', ' ', '\t']) {
        return Err(usage(format!(
            "consumer name {name:?}: not empty, and no '.', '*', '>' or white space"
        )));
    }
    Ok(())
}

/// The create request `consumer add` sends, and the API subject.
pub fn create_request(args: &AddArgs, now: SystemTime) -> Result<(String, Value), CliError> {
    let mut config = match &args.config_file {
        Some(path) => read_config_file(path)?,
        None => Map::new(),
    };
    let from_file = config
        .get("durable_name")
        .or_else(|| config.get("name"))
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .map(String::from);
    let named_by_flag = args.durable.as_deref().filter(|name| !name.is_empty());
    let name = match (&args.consumer, named_by_flag) {
        (Some(positional), Some(flag)) if positional != flag => {
            return Err(usage(format!(
                "consumer add: two names, {positional} and --durable={flag}"
            )))
        }
        (Some(name), _) => Some(name.clone()),
        (None, Some(flag)) => Some(flag.to_string()),
        (None, None) => from_file,
    };
    let ephemeral = args.ephemeral
        || (args.durable.is_none()
            && args.consumer.is_none()
            && config.get("durable_name").is_none()
            && config.contains_key("name"));
    config.remove("durable_name");
    config.remove("name");
    let suffix = match (&name, ephemeral) {
        (Some(name), false) => {
            check_name(name)?;
            config.insert("durable_name".into(), json!(name));
            format!("CONSUMER.CREATE.{}.{name}", args.stream)
        }
        (Some(name), true) => {
            check_name(name)?;
            config.insert("name".into(), json!(name));
            format!("CONSUMER.CREATE.{}.{name}", args.stream)
        }
        (None, true) => format!("CONSUMER.CREATE.{}", args.stream),
        (None, false) => {
            return Err(usage(
                "consumer add: name the consumer, or pass --ephemeral",
            ))
        }
    };
    args.config.apply(&mut config, now)?;
    Ok((
        suffix,
        json!({ "stream_name": args.stream, "config": config, "action": "create" }),
    ))
}

/// `--validate` and `--output FILE`: the config, checked as far as tern
/// can without a server, printed or written; nothing is created.
pub fn offline(args: &AddArgs, now: SystemTime) -> Result<bool, CliError> {
    if !args.validate && args.output.is_none() {
        return Ok(false);
    }
    let (_, request) = create_request(args, now)?;
    let text = serde_json::to_string_pretty(&request["config"]).expect("JSON values serialise");
    if let Some(path) = &args.output {
        crate::stream::write_private(path, &text)?;
    }
    if args.validate {
        line(&text);
        line("");
        line("Configuration is a valid Consumer (checked by tern; the server checks the rest when it is created)");
    }
    Ok(true)
}

async fn add(api: &Api, args: AddArgs) -> Result<(), CliError> {
    let (suffix, request) = create_request(&args, SystemTime::now())?;
    let action = format!(
        "consumer add {} {}",
        args.stream,
        args.consumer.as_deref().unwrap_or("(ephemeral)")
    );
    let answer = api.request(&action, &suffix, &request).await?;
    if !args.json {
        line(format_args!(
            "Consumer {} > {} was created",
            args.stream,
            answer["name"].as_str().unwrap_or("")
        ));
        line("");
    }
    print_info(answer, args.json);
    Ok(())
}

pub async fn info(api: &Api, stream: &str, consumer: &str) -> Result<Value, CliError> {
    api.request(
        &format!("consumer info {stream} {consumer}"),
        &format!("CONSUMER.INFO.{stream}.{consumer}"),
        &Value::Null,
    )
    .await
}

async fn ls(api: &Api, args: LsArgs) -> Result<(), CliError> {
    let action = format!("consumer ls {}", args.stream);
    if args.names || args.json {
        let names = api
            .paged(
                &action,
                &format!("CONSUMER.NAMES.{}", args.stream),
                Map::new(),
                "consumers",
                CONSUMERS_LISTED_MAX,
            )
            .await?;
        api::print_names(names, args.json);
        return Ok(());
    }
    let consumers = api
        .paged(
            &action,
            &format!("CONSUMER.LIST.{}", args.stream),
            Map::new(),
            "consumers",
            CONSUMERS_LISTED_MAX,
        )
        .await?;
    if consumers.is_empty() {
        line(format_args!("No consumers defined on {}", args.stream));
        return Ok(());
    }
    let rows: Vec<[String; 4]> = consumers
        .iter()
        .map(|consumer| {
            [
                consumer["name"].as_str().unwrap_or("").to_string(),
                consumer["num_pending"].to_string(),
                consumer["num_ack_pending"].to_string(),
                consumer["delivered"]["stream_seq"].to_string(),
            ]
        })
        .collect();
    print_columns(
        &["Name", "Unprocessed", "Ack Pending", "Last Delivered"],
        &rows,
    );
    Ok(())
}

/// How `next` answers each message it prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `+ACK` (an empty body); the last one waits for the server's reply.
    Ack,
    /// `-NAK`: delivered again at once.
    Nak,
    /// `+TERM`: never delivered again.
    Term,
    /// Nothing (`--no-ack`, or an `ack_policy none` consumer).
    Leave,
}

impl Answer {
    /// The answer the flags ask for, as the nats CLI reads them: `--term`
    /// with `--ack` or `--nak` is refused.
    pub fn of(args: &NextArgs) -> Result<Answer, CliError> {
        if args.term {
            if args.ack || args.nak {
                return Err(usage("--term: not with --ack or --nak"));
            }
            return Ok(Answer::Term);
        }
        Ok(match (args.nak, args.no_ack) {
            (true, _) => Answer::Nak,
            (false, true) => Answer::Leave,
            (false, false) => Answer::Ack,
        })
    }

    fn body(self) -> &'static [u8] {
        match self {
            Answer::Ack | Answer::Leave => b"",
            Answer::Nak => b"-NAK",
            Answer::Term => b"+TERM",
        }
    }
}

/// A random delay below `limit` (`next --wait`): the hasher's random keys
/// are the only randomness tern needs.
fn random_below(limit: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(limit.as_nanos() as u64);
    let nanos = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX).max(1);
    Duration::from_nanos(hasher.finish() % nanos)
}

/// What ended a pull before `--count` messages came.
fn pull_status(status: u16, description: &str) -> Option<String> {
    match status {
        100 => None,
        404 | 408 => Some("no more messages within the timeout".into()),
        503 => Some("no responders: not a pull consumer, or it does not exist".into()),
        _ => Some(format!("{status} {description}")),
    }
}

async fn next(api: &Api, args: NextArgs) -> Result<(), CliError> {
    let action = format!("consumer next {} {}", args.stream, args.consumer);
    let consumer = info(api, &args.stream, &args.consumer).await?;
    if consumer["config"].get("deliver_subject").is_some() {
        return Err(CliError::Failed {
            action,
            reason: "not a pull consumer (it pushes to its deliver subject)".into(),
        });
    }
    // An ack_policy none consumer takes no acks (nobody answers them).
    let answer = match Answer::of(&args)? {
        _ if consumer["config"]["ack_policy"] == "none" => Answer::Leave,
        answer => answer,
    };
    let wait = match &args.wait {
        Some(text) => Some(duration_flag("--wait", text)?),
        None => None,
    };
    let client = &api.client;
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .map_err(CliError::client(action.clone()))?;
    let subject = api.subject(&format!(
        "CONSUMER.MSG.NEXT.{}.{}",
        args.stream, args.consumer
    ));
    let expires_ns = units::nanos(api.timeout);
    let mut stdout = std::io::BufWriter::new(std::io::stdout().lock());
    let mut received: u64 = 0;
    let mut last_reply: Option<async_nats::Subject> = None;
    let mut outcome = Ok(());
    let bar = progress::messages(args.count, "Receiving");
    'pulls: while received < args.count {
        let batch = (args.count - received).min(PULL_BATCH_MAX);
        let request = json!({ "batch": batch, "expires": expires_ns });
        client
            .publish_with_reply(subject.clone(), inbox.clone(), request.to_string().into())
            .await
            .map_err(CliError::client(action.clone()))?;
        let mut in_batch = 0;
        while in_batch < batch {
            // The server ends a request at `expires`; a margin covers the trip.
            let bound = api.timeout + Duration::from_secs(1);
            let message = match tokio::time::timeout(bound, replies.next()).await {
                Ok(Some(message)) => message,
                Ok(None) | Err(_) => {
                    outcome = Err("no answer to the pull request".to_string());
                    break 'pulls;
                }
            };
            if let Some(status) = message.status {
                let description = message.description.as_deref().unwrap_or("");
                match pull_status(status.as_u16(), description) {
                    None => continue,
                    Some(reason) => {
                        outcome = Err(reason);
                        break 'pulls;
                    }
                }
            }
            let _ = stdout.write_all(&message.payload);
            let _ = stdout.write_all(b"\n");
            in_batch += 1;
            received += 1;
            bar.inc(1);
            if answer != Answer::Leave {
                if let Some(reply) = last_reply.take() {
                    if let Some(limit) = wait {
                        tokio::time::sleep(random_below(limit)).await;
                    }
                    client
                        .publish(reply, bytes::Bytes::from_static(answer.body()))
                        .await
                        .map_err(CliError::client(action.clone()))?;
                }
                last_reply = message.reply.clone();
            }
        }
    }
    bar.finish_and_clear();
    let _ = stdout.flush();
    drop(stdout);
    if let Some(reply) = last_reply {
        if let Some(limit) = wait {
            tokio::time::sleep(random_below(limit)).await;
        }
        if answer == Answer::Ack {
            // The last ack waits for the server's answer (a "double
            // ack"): every ack before it on this connection has been
            // handled by then.
            let request = async_nats::Request::new()
                .payload(bytes::Bytes::new())
                .timeout(Some(api.timeout));
            client
                .send_request(reply.clone(), request)
                .await
                .map_err(|error| api::request_error(&action, &reply, api.timeout, error))?;
        } else {
            // A NAK or TERM gets no answer: flushed, it has reached the
            // server.
            client
                .publish(reply, bytes::Bytes::from_static(answer.body()))
                .await
                .map_err(CliError::client(action.clone()))?;
            client
                .flush()
                .await
                .map_err(CliError::client(action.clone()))?;
        }
    }
    outcome.map_err(|reason| CliError::Failed {
        action,
        reason: format!("{received} of {} messages received: {reason}", args.count),
    })
}

/// A consumer info answer as text, or (`json`) as the API sent it.
pub fn print_info(answer: Value, json: bool) {
    if json {
        api::print_json(&api::without_type(answer));
        return;
    }
    let config = &answer["config"];
    let text = |value: &Value| match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let ack_wait = config["ack_wait"]
        .as_u64()
        .map(|ns| units::format_duration(Duration::from_nanos(ns)))
        .unwrap_or_else(|| "-".into());
    line(format_args!(
        "Information for Consumer {} > {} created {}",
        text(&answer["stream_name"]),
        text(&answer["name"]),
        text(&answer["created"])
    ));
    line("");
    let kind = if config.get("deliver_subject").is_some() {
        format!("push to {}", text(&config["deliver_subject"]))
    } else {
        "pull".into()
    };
    table(&[
        ("Durable Name", text(&config["durable_name"])),
        ("Mode", kind),
        ("Deliver Policy", text(&config["deliver_policy"])),
        ("Filter Subject", text(&config["filter_subject"])),
        ("Ack Policy", text(&config["ack_policy"])),
        ("Ack Wait", ack_wait),
        ("Replay Policy", text(&config["replay_policy"])),
        ("Maximum Deliveries", text(&config["max_deliver"])),
        ("Max Ack Pending", text(&config["max_ack_pending"])),
    ]);
    line("");
    line("State:");
    line("");
    table(&[
        (
            "Last Delivered Message",
            format!(
                "Consumer sequence: {} Stream sequence: {}",
                answer["delivered"]["consumer_seq"], answer["delivered"]["stream_seq"]
            ),
        ),
        (
            "Acknowledgment Floor",
            format!(
                "Consumer sequence: {} Stream sequence: {}",
                answer["ack_floor"]["consumer_seq"], answer["ack_floor"]["stream_seq"]
            ),
        ),
        ("Outstanding Acks", text(&answer["num_ack_pending"])),
        ("Redelivered Messages", text(&answer["num_redelivered"])),
        ("Unprocessed Messages", text(&answer["num_pending"])),
        ("Waiting Pulls", text(&answer["num_waiting"])),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Harness {
        #[command(flatten)]
        consumer: ConsumerArgs,
    }

    fn parse(arguments: &[&str]) -> Result<ConsumerCommand, CliError> {
        Harness::try_parse_from(std::iter::once("consumer").chain(arguments.iter().copied()))
            .map(|harness| harness.consumer.command)
            .map_err(|error| CliError::Usage(error.to_string()))
    }

    fn request_of(arguments: &[&str], now: SystemTime) -> Result<(String, Value), CliError> {
        match parse(arguments)? {
            ConsumerCommand::Add(args) => create_request(&args, now),
            other => panic!("not add: {other:?}"),
        }
    }

    fn config_of(arguments: &[&str]) -> Value {
        let now = UNIX_EPOCH + Duration::from_secs(86_400 * 365);
        request_of(arguments, now)
            .unwrap_or_else(|error| panic!("{arguments:?}: {error}"))
            .1["config"]
            .clone()
    }

    #[test]
    fn the_checklists_pull_consumer_with_durable() {
        for line in [
            &[
                "add",
                "ORDERS",
                "ORDER_PROCESSOR",
                "--durable",
                "--pull",
                "--ack",
                "explicit",
                "--defaults",
            ][..],
            &[
                "add",
                "ORDERS",
                "--durable=ORDER_PROCESSOR",
                "--pull",
                "--ack",
                "explicit",
            ],
            &["add", "--durable", "ORDERS", "ORDER_PROCESSOR", "--pull"],
            &[
                "-a",
                "add",
                "ORDERS",
                "ORDER_PROCESSOR",
                "--pull",
                "--ack",
                "explicit",
            ],
        ] {
            let (subject, request) = request_of(line, SystemTime::now()).unwrap();
            assert_eq!(
                subject, "CONSUMER.CREATE.ORDERS.ORDER_PROCESSOR",
                "{line:?}"
            );
            assert_eq!(
                request,
                json!({
                    "stream_name": "ORDERS",
                    "action": "create",
                    "config": {"durable_name": "ORDER_PROCESSOR", "ack_policy": "explicit"},
                }),
                "{line:?}"
            );
        }
        let now = SystemTime::now();
        let error = request_of(&["add", "S", "A", "--durable=B"], now).unwrap_err();
        assert!(error.to_string().contains("two names"), "{error}");
        assert!(request_of(&["add", "S", "A", "--durable", "--ephemeral"], now).is_err());
        assert!(request_of(&["add", "S", "a.b"], now).is_err());
    }

    #[test]
    fn every_config_flag_has_its_field() {
        let config = config_of(&[
            "add",
            "S",
            "C",
            "--ack",
            "all",
            "--deliver",
            "42",
            "--filter",
            "a.*",
            "--filter",
            "b.>",
            "--max-deliver",
            "5",
            "--wait",
            "10s",
            "--max-pending",
            "100",
            "--replay",
            "original",
            "--headers-only",
            "--max-waiting",
            "7",
            "--max-pull-batch",
            "50",
            "--max-pull-expire",
            "30s",
            "--max-pull-bytes",
            "1024",
            "--sample",
            "25",
            "--inactive-threshold",
            "1h",
            "--memory",
            "--replicas",
            "3",
            "--metadata",
            "team=orders",
            "--metadata",
            "tier:gold",
            "--pause",
            "2000-02-29 00:00:00",
            "--description",
            "d",
        ]);
        assert_eq!(
            config,
            json!({
                "durable_name": "C",
                "ack_policy": "all",
                "deliver_policy": "by_start_sequence",
                "opt_start_seq": 42,
                "filter_subjects": ["a.*", "b.>"],
                "max_deliver": 5,
                "ack_wait": 10_000_000_000u64,
                "max_ack_pending": 100,
                "replay_policy": "original",
                "headers_only": true,
                "max_waiting": 7,
                "max_batch": 50,
                "max_expires": 30_000_000_000u64,
                "max_bytes": 1024,
                "sample_freq": "25",
                "inactive_threshold": 3_600_000_000_000u64,
                "mem_storage": true,
                "num_replicas": 3,
                "metadata": {"team": "orders", "tier": "gold"},
                "pause_until": "2000-02-29T00:00:00.000000000Z",
                "description": "d",
            })
        );
        let config = config_of(&["add", "S", "C", "--deliver", "1h", "--filter", "a"]);
        assert_eq!(config["deliver_policy"], "by_start_time");
        assert_eq!(config["opt_start_time"], "1970-12-31T23:00:00.000000000Z");
        assert_eq!(config["filter_subject"], "a");
        // The nats CLI's defaults: nothing sent for them.
        let config = config_of(&[
            "add",
            "S",
            "C",
            "--wait",
            "-1s",
            "--max-pending",
            "-1",
            "--sample",
            "-1",
            "--heartbeat",
            "-1",
            "--no-headers-only",
        ]);
        assert_eq!(
            config,
            json!({"durable_name": "C", "ack_policy": "explicit", "headers_only": false})
        );
        let config = config_of(&["add", "S", "C", "--deliver", "subject"]);
        assert_eq!(config["filter_subject"], ">");
        let config = config_of(&["add", "S", "C", "--max-outstanding", "5"]);
        assert_eq!(
            config["max_ack_pending"], 5,
            "the hidden spelling of --max-pending"
        );
    }

    #[test]
    fn linear_backoff_as_the_nats_cli_computes_it() {
        let minutes = |list: &[Duration]| list.iter().map(Duration::as_secs).collect::<Vec<_>>();
        let periods =
            linear_backoff(10, Duration::from_secs(60), Duration::from_secs(1_200)).unwrap();
        assert_eq!(
            minutes(&periods),
            [60, 174, 288, 402, 516, 630, 744, 858, 972, 1_086]
        );
        let config = config_of(&[
            "add",
            "S",
            "C",
            "--backoff",
            "linear",
            "--backoff-steps",
            "3",
            "--backoff-min",
            "1s",
            "--backoff-max",
            "4s",
        ]);
        assert_eq!(
            config["backoff"],
            json!([1_000_000_000u64, 2_000_000_000u64, 3_000_000_000u64])
        );
        assert_eq!(config["max_deliver"], 4, "steps + 1, as the nats CLI");
        let config = config_of(&["add", "S", "C", "--backoff", "linear", "--max-deliver", "9"]);
        assert_eq!(config["max_deliver"], 9);
        assert_eq!(config["backoff"].as_array().map(Vec::len), Some(10));
        let config = config_of(&["add", "S", "C", "--backoff", "none"]);
        assert_eq!(config.get("backoff"), None);
        assert!(linear_backoff(5, Duration::from_nanos(1), Duration::from_nanos(3)).is_err());
        assert!(request_of(
            &["add", "S", "C", "--backoff-steps", "3"],
            SystemTime::now()
        )
        .is_err());
    }

    #[test]
    fn push_consumers_default_to_no_acks() {
        let (subject, request) = request_of(
            &[
                "add",
                "S",
                "--ephemeral",
                "--target",
                "out",
                "--deliver",
                "new",
            ],
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(subject, "CONSUMER.CREATE.S");
        assert_eq!(
            request["config"],
            json!({"deliver_subject": "out", "ack_policy": "none", "deliver_policy": "new"})
        );
        let config = config_of(&[
            "add",
            "S",
            "P",
            "--target",
            "out",
            "--deliver-group",
            "workers",
            "--heartbeat",
            "5s",
            "--flow-control",
            "--bps",
            "1000",
            "--ack",
            "flow_control",
        ]);
        assert_eq!(
            config,
            json!({
                "durable_name": "P",
                "deliver_subject": "out",
                "deliver_group": "workers",
                "ack_policy": "flow_control",
                "idle_heartbeat": 5_000_000_000u64,
                "flow_control": true,
                "rate_limit_bps": 1000,
            })
        );
    }

    #[test]
    fn priority_groups() {
        let config = config_of(&[
            "add",
            "S",
            "C",
            "--pinned-groups",
            "a",
            "--pinned-groups",
            "b",
            "--pinned-ttl",
            "2m",
        ]);
        assert_eq!(config["priority_policy"], "pinned_client");
        assert_eq!(config["priority_groups"], json!(["a", "b"]));
        assert_eq!(config["priority_timeout"], 120_000_000_000u64);
        let config = config_of(&["add", "S", "C", "--overflow-groups", "o"]);
        assert_eq!(config["priority_policy"], "overflow");
        assert_eq!(config["priority_groups"], json!(["o"]));
        let config = config_of(&["add", "S", "C", "--prioritized-groups", "p"]);
        assert_eq!(config["priority_policy"], "prioritized");
    }

    #[test]
    fn bad_values_are_refused() {
        let now = SystemTime::now();
        for line in [
            &["add", "S"][..],
            &["add", "S", "C", "--pull", "--target", "x"],
            &["add", "S", "C", "--deliver", "sometime"],
            &["add", "S", "C", "--ack", "maybe"],
            &["add", "S", "C", "--bps", "100"],
            &["add", "S", "C", "--heartbeat", "5s"],
            &["add", "S", "C", "--sample", "101"],
            &[
                "add",
                "S",
                "C",
                "--pinned-groups",
                "a",
                "--overflow-groups",
                "b",
            ],
            &["add", "S", "C", "--pinned-ttl", "1m"],
            &["add", "S", "C", "--metadata", "novalue"],
            &["add", "S", "C", "--ack", "none", "--max-deliver", "3"],
            &["add", "S", "C", "--pause", "tomorrow"],
        ] {
            assert!(request_of(line, now).is_err(), "{line:?}");
        }
        let error = request_of(&["add", "S", "C", "--wait", "ten"], now).unwrap_err();
        assert!(
            error.to_string().starts_with("--wait: invalid duration"),
            "{error}"
        );
    }

    #[test]
    fn a_config_file_then_the_flags() {
        let directory = tempfile::tempdir().expect("temp dir");
        let path = directory.path().join("c.json");
        std::fs::write(
            &path,
            r#"{"config": {"durable_name": "FROM_FILE", "ack_policy": "all", "max_deliver": 3,
                 "metadata": {"_nats.req.level": "0"}}}"#,
        )
        .expect("write");
        let path = path.to_str().unwrap();
        let (subject, request) = request_of(
            &["add", "S", "--config", path, "--max-deliver", "4"],
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(subject, "CONSUMER.CREATE.S.FROM_FILE");
        assert_eq!(
            request["config"],
            json!({"durable_name": "FROM_FILE", "ack_policy": "all", "max_deliver": 4})
        );
        let (subject, _) =
            request_of(&["add", "S", "OTHER", "--config", path], SystemTime::now()).unwrap();
        assert_eq!(subject, "CONSUMER.CREATE.S.OTHER");
    }

    #[test]
    fn next_answers() {
        let answer = |line: &[&str]| match parse(line).unwrap() {
            ConsumerCommand::Next(args) => Answer::of(&args),
            other => panic!("not next: {other:?}"),
        };
        assert_eq!(answer(&["next", "S", "C"]).unwrap(), Answer::Ack);
        assert_eq!(
            answer(&["next", "S", "C", "--no-ack"]).unwrap(),
            Answer::Leave
        );
        assert_eq!(
            answer(&["next", "S", "C", "--no-ack", "--ack"]).unwrap(),
            Answer::Ack
        );
        assert_eq!(answer(&["next", "S", "C", "--nak"]).unwrap(), Answer::Nak);
        assert_eq!(answer(&["next", "S", "C", "--term"]).unwrap(), Answer::Term);
        assert!(answer(&["next", "S", "C", "--term", "--ack"]).is_err());
        assert!(random_below(Duration::from_millis(5)) < Duration::from_millis(5));
    }

    #[test]
    fn pull_statuses() {
        assert_eq!(pull_status(100, "Idle Heartbeat"), None);
        assert!(pull_status(408, "Request Timeout").is_some());
        assert!(pull_status(503, "").unwrap().contains("pull consumer"));
        assert_eq!(
            pull_status(409, "Consumer Deleted").as_deref(),
            Some("409 Consumer Deleted")
        );
    }
}
