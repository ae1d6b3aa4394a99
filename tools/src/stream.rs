//! `tern stream add|info|ls|edit|rm|purge|get|rmm`: the `nats` CLI's stream
//! commands over the raw JetStream API, with every flag the `nats` CLI
//! gives them (docs/cli.md has the inventory). A stream config holds only
//! what the flags gave (plus `allow_direct`, on by default as in the
//! `nats` CLI); the server fills in the rest with its defaults and refuses
//! what it does not take. Nothing prompts: `--defaults` is accepted for
//! scripts written for the `nats` CLI.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Map, Value};

use crate::api::{self, Api};
use crate::consumer::{metadata, split_subjects};
use crate::error::CliError;
use crate::output::{line, table};
use crate::units;

/// Streams listed by `stream ls` at most (the API pages by 256).
pub const STREAMS_LISTED_MAX: usize = 100_000;
/// A stream config file read at most.
const CONFIG_FILE_BYTES_MAX: u64 = 1 << 20;

/// `tern stream …`: the subcommand, and the nats CLI's `-a` of every
/// stream command.
#[derive(Debug, Args)]
pub struct StreamArgs {
    /// Include system streams (KV_, OBJ_, $MQTT_) in `ls`
    #[arg(short = 'a', long, global = true)]
    pub all: bool,
    #[command(subcommand)]
    pub command: StreamCommand,
}

#[derive(Debug, Subcommand)]
pub enum StreamCommand {
    /// Create a stream
    #[command(visible_alias = "create", alias = "new")]
    Add(Box<AddArgs>),
    /// Show a stream's configuration and state
    #[command(alias = "nfo", alias = "i")]
    Info(InfoArgs),
    /// List streams
    #[command(visible_alias = "list", alias = "l")]
    Ls(LsArgs),
    /// Change a stream's configuration (only the flags given change)
    #[command(visible_alias = "update")]
    Edit(Box<EditArgs>),
    /// Delete a stream and its messages (needs --force)
    #[command(visible_alias = "delete", alias = "del")]
    Rm(RmArgs),
    /// Remove messages from a stream (needs --force)
    Purge(PurgeArgs),
    /// Show one stored message
    Get(GetArgs),
    /// Remove one message by sequence (needs --force)
    Rmm(RmmArgs),
    /// Copy the stream's messages into a signed, hash-chained export
    /// (a directory or obj://BUCKET); a second run appends what is new
    Export(crate::export::ExportArgs),
    /// Check an export's hash chain, totals and signature
    Verify(crate::export::VerifyArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Retention {
    Limits,
    Interest,
    #[value(alias = "work", alias = "workq")]
    Workqueue,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Storage {
    #[value(alias = "f")]
    File,
    #[value(alias = "m")]
    Memory,
}

impl Storage {
    pub fn name(self) -> &'static str {
        match self {
            Storage::File => "file",
            Storage::Memory => "memory",
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Discard {
    Old,
    New,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Compression {
    None,
    S2,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PersistMode {
    Default,
    Async,
}

/// A negatable switch: `--x` (or `--x=false`) and `--no-x`, the later
/// winning; `None` when neither is given.
pub fn switch(value: Option<bool>, negated: bool) -> Option<bool> {
    if negated {
        Some(false)
    } else {
        value
    }
}

/// The config flags of `add` and `edit`; `None` (or empty) leaves a field
/// alone.
#[derive(Debug, Args, Default)]
pub struct ConfigArgs {
    /// Subjects the stream captures (repeatable; comma or space separated)
    #[arg(long, value_name = "SUBJECTS")]
    pub subjects: Vec<String>,
    /// A description of the stream
    #[arg(long)]
    pub description: Option<String>,
    /// Retention policy
    #[arg(long, value_enum)]
    pub retention: Option<Retention>,
    /// Storage backend (on edit: tern's; the server refuses a change)
    #[arg(long, value_enum)]
    pub storage: Option<Storage>,
    /// Compression of file storage
    #[arg(long, value_enum)]
    pub compression: Option<Compression>,
    /// Replicas of the data (1, 3 or 5; more than 1 needs a cluster)
    #[arg(long, value_name = "N")]
    pub replicas: Option<i64>,
    /// Place the stream on servers with this tag (repeatable; on edit
    /// `--tag ""` removes the tags)
    #[arg(long, alias = "tags", value_name = "TAG")]
    pub tag: Vec<String>,
    /// Place the stream in this cluster (on edit `--cluster ""` removes it)
    #[arg(long, value_name = "CLUSTER")]
    pub cluster: Option<String>,
    /// Acknowledge publishes (the default; --no-ack: no PubAcks)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_ack")]
    pub ack: Option<bool>,
    /// Publishes get no PubAck (no_ack)
    #[arg(long, overrides_with = "ack")]
    pub no_ack: bool,
    /// Messages kept at most (-1 unlimited)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub max_msgs: Option<i64>,
    /// Messages kept per subject at most (-1 unlimited)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub max_msgs_per_subject: Option<i64>,
    /// Bytes kept at most, e.g. 500GB (1024-based; -1 unlimited)
    #[arg(long, value_name = "BYTES", allow_hyphen_values = true)]
    pub max_bytes: Option<String>,
    /// Oldest message kept, e.g. 30d, 12h (-1 unlimited)
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    pub max_age: Option<String>,
    /// Largest message accepted, e.g. 1MB (-1 unlimited)
    #[arg(long, value_name = "BYTES", allow_hyphen_values = true)]
    pub max_msg_size: Option<String>,
    /// Consumers allowed at most (-1 unlimited)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub max_consumers: Option<i64>,
    /// What happens at a limit: drop the oldest messages or refuse new ones
    #[arg(long, value_enum)]
    pub discard: Option<Discard>,
    /// Discard new applies per subject (with --max-msgs-per-subject)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_discard_per_subject")]
    pub discard_per_subject: Option<bool>,
    #[arg(long, hide = true, overrides_with = "discard_per_subject")]
    pub no_discard_per_subject: bool,
    /// Window of duplicate detection by Nats-Msg-Id, e.g. 2m
    #[arg(long, value_name = "DURATION")]
    pub dupe_window: Option<String>,
    /// Mirror this stream (a name, or a StreamSource JSON object)
    #[arg(long, value_name = "STREAM")]
    pub mirror: Option<String>,
    /// Source messages from this stream (repeatable; a name, or a
    /// StreamSource JSON object)
    #[arg(long, value_name = "STREAM")]
    pub source: Vec<String>,
    /// Allow atomic batch publishes (allow_atomic)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_allow_batch")]
    pub allow_batch: Option<bool>,
    #[arg(long, hide = true, overrides_with = "allow_batch")]
    pub no_allow_batch: bool,
    /// Allow fast batch publishes (allow_batched)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_allow_fast")]
    pub allow_fast: Option<bool>,
    #[arg(long, hide = true, overrides_with = "allow_fast")]
    pub no_allow_fast: bool,
    /// A distributed counter stream (allow_msg_counter)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allow_counter: Option<bool>,
    /// Allow Nats-Rollup headers
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_allow_rollup")]
    pub allow_rollup: Option<bool>,
    #[arg(long, hide = true, overrides_with = "allow_rollup")]
    pub no_allow_rollup: bool,
    /// Refuse message deletes through the API
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_deny_delete")]
    pub deny_delete: Option<bool>,
    #[arg(long, hide = true, overrides_with = "deny_delete")]
    pub no_deny_delete: bool,
    /// Refuse purges through the API
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_deny_purge")]
    pub deny_purge: Option<bool>,
    #[arg(long, hide = true, overrides_with = "deny_purge")]
    pub no_deny_purge: bool,
    /// Allow direct gets (on unless --no-allow-direct, as the nats CLI)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_allow_direct")]
    pub allow_direct: Option<bool>,
    #[arg(long, hide = true, overrides_with = "allow_direct")]
    pub no_allow_direct: bool,
    /// Allow direct gets on mirrors of this stream (mirror_direct)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_allow_mirror_direct")]
    pub allow_mirror_direct: Option<bool>,
    #[arg(long, hide = true, overrides_with = "allow_mirror_direct")]
    pub no_allow_mirror_direct: bool,
    /// Allow per-message TTLs (Nats-TTL)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allow_msg_ttl: Option<bool>,
    /// Allow message schedules (allow_msg_schedules)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_allow_schedules")]
    pub allow_schedules: Option<bool>,
    #[arg(long, hide = true, overrides_with = "allow_schedules")]
    pub no_allow_schedules: bool,
    /// How long subject delete markers stay (subject_delete_marker_ttl)
    #[arg(long, value_name = "DURATION")]
    pub subject_del_markers_ttl: Option<String>,
    /// Subject transform source (with --transform-destination)
    #[arg(long, value_name = "SOURCE")]
    pub transform_source: Option<String>,
    /// Subject transform destination (with --transform-source)
    #[arg(long, value_name = "DEST")]
    pub transform_destination: Option<String>,
    /// Metadata, KEY=VALUE (repeatable)
    #[arg(long, value_name = "META")]
    pub metadata: Vec<String>,
    /// Republish messages on these subjects (with --republish-destination)
    #[arg(long, value_name = "SOURCE")]
    pub republish_source: Option<String>,
    /// Where to republish (with --republish-source)
    #[arg(long, value_name = "DEST")]
    pub republish_destination: Option<String>,
    /// Republish only the headers
    #[arg(long)]
    pub republish_headers: bool,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// Stream name
    pub stream: String,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// First sequence of the stream (first_seq)
    #[arg(long, value_name = "SEQUENCE")]
    pub first_sequence: Option<u64>,
    /// Longest inactive_threshold a consumer of the stream may have
    #[arg(long, value_name = "THRESHOLD")]
    pub limit_consumer_inactive: Option<String>,
    /// Largest max_ack_pending a consumer of the stream may have
    #[arg(long, value_name = "PENDING")]
    pub limit_consumer_max_pending: Option<i64>,
    /// Persistence: default, or async (acknowledged before it is flushed)
    #[arg(long, value_enum)]
    pub persist_mode: Option<PersistMode>,
    /// Start from the stream config in this JSON file (or a `stream info
    /// --json`); the flags given change it
    #[arg(long = "config", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// Only check the configuration and print it; create nothing
    #[arg(long)]
    pub validate: bool,
    /// Write the configuration to this file instead of creating it
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Accepted for the nats CLI's scripts: tern never prompts, and what is
    /// not given takes the server's defaults
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
    /// Print the API's answer as JSON
    #[arg(short = 'j', long)]
    pub json: bool,
    /// Only the stream's state
    #[arg(long)]
    pub state: bool,
    /// Accepted: tern never offers a list to pick from
    #[arg(long)]
    pub no_select: bool,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only streams capturing subjects that overlap this one
    #[arg(long, value_name = "SUBJECT")]
    pub subject: Option<String>,
    /// Only the names, one a line (every stream)
    #[arg(short = 'n', long)]
    pub names: bool,
    /// The names as a JSON array (as the nats CLI)
    #[arg(short = 'j', long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct EditArgs {
    /// Stream name
    pub stream: String,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Remove the mirror (promotes a mirror to a stream of its own)
    #[arg(long)]
    pub no_mirror: bool,
    /// Remove the subject transform
    #[arg(long)]
    pub no_transform: bool,
    /// Remove the republish configuration
    #[arg(long)]
    pub no_republish: bool,
    /// Replace the configuration with the one in this JSON file
    #[arg(long = "config", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// Accepted for the nats CLI's scripts (tern never prompts)
    #[arg(short = 'f', long)]
    pub force: bool,
    /// Edit the configuration (JSON) in $EDITOR, then update
    #[arg(short = 'i', long, overrides_with = "no_interactive")]
    pub interactive: bool,
    #[arg(long, hide = true, overrides_with = "interactive")]
    pub no_interactive: bool,
    /// Only print the differences (exit 1 when there are some)
    #[arg(long)]
    pub dry_run: bool,
    /// Print the API's answer as JSON
    #[arg(short = 'j', long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    /// Stream name
    pub stream: String,
    /// Delete without asking (required: tern never prompts)
    #[arg(short = 'f', long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Stream name
    pub stream: String,
    /// Purge without asking (required: tern never prompts)
    #[arg(short = 'f', long)]
    pub force: bool,
    /// Only messages on this subject (wildcards allowed)
    #[arg(long, value_name = "SUBJECT")]
    pub subject: Option<String>,
    /// Purge up to, not including, this sequence
    #[arg(long, value_name = "SEQUENCE")]
    pub seq: Option<u64>,
    /// Keep this many of the newest messages
    #[arg(long, value_name = "MESSAGES")]
    pub keep: Option<u64>,
    /// Print the API's answer as JSON
    #[arg(short = 'j', long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// Stream name
    pub stream: String,
    /// Sequence of the message
    pub sequence: Option<u64>,
    /// The last message on this subject instead
    #[arg(short = 'S', long = "last-for", value_name = "SUBJECT")]
    pub last_for: Option<String>,
    /// Print the API's message object as JSON (body base64)
    #[arg(short = 'j', long)]
    pub json: bool,
    /// Run the body through this command before printing it
    /// ({{Subject}}, {{Stream}} replaced)
    #[arg(long, value_name = "COMMAND")]
    pub translate: Option<String>,
}

#[derive(Debug, Args)]
pub struct RmmArgs {
    /// Stream name
    pub stream: String,
    /// Sequence of the message
    pub sequence: u64,
    /// Remove without asking (required: tern never prompts)
    #[arg(short = 'f', long)]
    pub force: bool,
}

pub async fn execute(api: &Api, arguments: StreamArgs) -> Result<(), CliError> {
    match arguments.command {
        StreamCommand::Add(args) => add(api, *args).await,
        StreamCommand::Info(args) => {
            let answer = info(api, &args.stream).await?;
            if args.state && !args.json {
                print_state(&answer);
            } else {
                print_info(answer, args.json);
            }
            Ok(())
        }
        StreamCommand::Ls(args) => ls(api, args, arguments.all).await,
        StreamCommand::Edit(args) => edit(api, *args).await,
        StreamCommand::Rm(args) => {
            require_force(args.force, &format!("stream rm {}", args.stream))?;
            let action = format!("stream rm {}", args.stream);
            api.request(
                &action,
                &format!("STREAM.DELETE.{}", args.stream),
                &json!({}),
            )
            .await?;
            Ok(())
        }
        StreamCommand::Purge(args) => purge(api, args).await,
        StreamCommand::Export(args) => crate::export::export(api, args).await,
        StreamCommand::Verify(_) => {
            unreachable!("dispatched in main: no connection for a directory")
        }
        StreamCommand::Get(args) => get(api, args).await,
        StreamCommand::Rmm(args) => {
            let action = format!("stream rmm {} {}", args.stream, args.sequence);
            require_force(args.force, &action)?;
            api.request(
                &action,
                &format!("STREAM.MSG.DELETE.{}", args.stream),
                &json!({ "seq": args.sequence }),
            )
            .await?;
            Ok(())
        }
    }
}

/// Writes `text` to a new file only its owner reads (`--output`, as the
/// nats CLI's 0600).
pub fn write_private(path: &std::path::Path, text: &str) -> Result<(), CliError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(CliError::io(format!("writing {}", path.display())))
}

/// Destructive commands never prompt: without `--force` they refuse.
pub fn require_force(force: bool, action: &str) -> Result<(), CliError> {
    if force {
        Ok(())
    } else {
        Err(CliError::Failed {
            action: action.to_string(),
            reason: "refusing without --force (-f): tern never prompts".into(),
        })
    }
}

fn usage(text: impl Into<String>) -> CliError {
    CliError::Usage(text.into())
}

/// `--mirror`/`--source`: a stream name, or a StreamSource JSON object
/// (which must name its stream).
pub fn stream_source(flag: &str, text: &str) -> Result<Value, CliError> {
    let trimmed = text.trim();
    if trimmed.starts_with('{') && trimmed.ends_with('}') {
        let source: Value = serde_json::from_str(trimmed)
            .map_err(|error| usage(format!("{flag} {text}: not JSON: {error}")))?;
        if source["name"].as_str().is_none_or(str::is_empty) {
            return Err(usage(format!("{flag} {text}: the name is required")));
        }
        return Ok(source);
    }
    if trimmed.is_empty() {
        return Err(usage(format!("{flag}: a stream name")));
    }
    Ok(json!({ "name": trimmed }))
}

impl ConfigArgs {
    /// Writes the given flags into a StreamConfig object.
    pub fn apply(&self, config: &mut Map<String, Value>) -> Result<(), CliError> {
        let subjects = split_subjects(&self.subjects);
        if !subjects.is_empty() {
            config.insert("subjects".into(), json!(subjects));
        }
        if let Some(description) = &self.description {
            config.insert("description".into(), json!(description));
        }
        self.apply_policies(config)?;
        self.apply_limits(config)?;
        self.apply_switches(config)?;
        self.apply_placement(config)?;
        self.apply_routing(config)
    }

    fn apply_policies(&self, config: &mut Map<String, Value>) -> Result<(), CliError> {
        if let Some(retention) = self.retention {
            let name = match retention {
                Retention::Limits => "limits",
                Retention::Interest => "interest",
                Retention::Workqueue => "workqueue",
            };
            config.insert("retention".into(), json!(name));
        }
        if let Some(storage) = self.storage {
            config.insert("storage".into(), json!(storage.name()));
        }
        if let Some(compression) = self.compression {
            let name = match compression {
                Compression::None => "none",
                Compression::S2 => "s2",
            };
            config.insert("compression".into(), json!(name));
        }
        if let Some(replicas) = self.replicas {
            if replicas < 1 {
                return Err(usage("--replicas: must be 1 or more"));
            }
            config.insert("num_replicas".into(), json!(replicas));
        }
        if let Some(discard) = self.discard {
            let name = match discard {
                Discard::Old => "old",
                Discard::New => "new",
            };
            config.insert("discard".into(), json!(name));
        }
        if let Some(ack) = switch(self.ack, self.no_ack) {
            config.insert("no_ack".into(), json!(!ack));
        }
        Ok(())
    }

    fn apply_limits(&self, config: &mut Map<String, Value>) -> Result<(), CliError> {
        for (key, value) in [
            ("max_msgs", self.max_msgs),
            ("max_msgs_per_subject", self.max_msgs_per_subject),
            ("max_consumers", self.max_consumers),
        ] {
            if let Some(value) = value {
                config.insert(key.into(), json!(value.max(units::UNLIMITED)));
            }
        }
        if let Some(text) = &self.max_bytes {
            let bytes = units::parse_size(text).map_err(CliError::unit("--max-bytes"))?;
            config.insert("max_bytes".into(), json!(bytes));
        }
        if let Some(text) = &self.max_msg_size {
            let bytes = units::parse_size(text).map_err(CliError::unit("--max-msg-size"))?;
            if bytes > i64::from(i32::MAX) {
                return Err(usage(format!(
                    "--max-msg-size {text}: at most {} bytes",
                    i32::MAX
                )));
            }
            config.insert("max_msg_size".into(), json!(bytes));
        }
        if let Some(text) = &self.max_age {
            let age =
                units::parse_duration_or_unlimited(text).map_err(CliError::unit("--max-age"))?;
            config.insert("max_age".into(), json!(units::nanos(age)));
        }
        if let Some(text) = &self.dupe_window {
            let window = units::parse_duration(text).map_err(CliError::unit("--dupe-window"))?;
            config.insert("duplicate_window".into(), json!(units::nanos(window)));
        }
        if let Some(text) = &self.subject_del_markers_ttl {
            let ttl =
                units::parse_duration(text).map_err(CliError::unit("--subject-del-markers-ttl"))?;
            config.insert("subject_delete_marker_ttl".into(), json!(units::nanos(ttl)));
        }
        Ok(())
    }

    fn apply_switches(&self, config: &mut Map<String, Value>) -> Result<(), CliError> {
        for (key, value) in [
            (
                "allow_rollup_hdrs",
                switch(self.allow_rollup, self.no_allow_rollup),
            ),
            ("deny_delete", switch(self.deny_delete, self.no_deny_delete)),
            ("deny_purge", switch(self.deny_purge, self.no_deny_purge)),
            (
                "allow_direct",
                switch(self.allow_direct, self.no_allow_direct),
            ),
            (
                "mirror_direct",
                switch(self.allow_mirror_direct, self.no_allow_mirror_direct),
            ),
            ("allow_msg_ttl", self.allow_msg_ttl),
            (
                "allow_atomic",
                switch(self.allow_batch, self.no_allow_batch),
            ),
            ("allow_batched", switch(self.allow_fast, self.no_allow_fast)),
            ("allow_msg_counter", self.allow_counter),
            (
                "allow_msg_schedules",
                switch(self.allow_schedules, self.no_allow_schedules),
            ),
            (
                "discard_new_per_subject",
                switch(self.discard_per_subject, self.no_discard_per_subject),
            ),
        ] {
            if let Some(value) = value {
                config.insert(key.into(), json!(value));
            }
        }
        if let Some(metadata) = metadata(&self.metadata)? {
            config.insert("metadata".into(), Value::Object(metadata));
        }
        Ok(())
    }

    /// `--cluster` and `--tag`: an empty value removes it (on edit).
    fn apply_placement(&self, config: &mut Map<String, Value>) -> Result<(), CliError> {
        if self.cluster.is_none() && self.tag.is_empty() {
            return Ok(());
        }
        let mut placement = match config.remove("placement") {
            Some(Value::Object(placement)) => placement,
            _ => Map::new(),
        };
        if let Some(cluster) = &self.cluster {
            placement.insert("cluster".into(), json!(cluster));
        }
        if !self.tag.is_empty() {
            let tags: Vec<&String> = self.tag.iter().filter(|tag| !tag.is_empty()).collect();
            placement.insert("tags".into(), json!(tags));
        }
        placement.retain(|_, value| match value {
            Value::String(text) => !text.is_empty(),
            Value::Array(items) => !items.is_empty(),
            Value::Null => false,
            _ => true,
        });
        if !placement.is_empty() {
            config.insert("placement".into(), Value::Object(placement));
        }
        Ok(())
    }

    /// Mirror, sources, republish and the subject transform.
    fn apply_routing(&self, config: &mut Map<String, Value>) -> Result<(), CliError> {
        if let Some(mirror) = &self.mirror {
            if !split_subjects(&self.subjects).is_empty() {
                return Err(usage(
                    "--mirror and --subjects: a mirror listens on no subjects",
                ));
            }
            config.insert("mirror".into(), stream_source("--mirror", mirror)?);
        }
        if !self.source.is_empty() {
            let sources = self
                .source
                .iter()
                .map(|source| stream_source("--source", source))
                .collect::<Result<Vec<_>, _>>()?;
            config.insert("sources".into(), Value::Array(sources));
        }
        match (&self.republish_source, &self.republish_destination) {
            (Some(source), Some(destination)) => {
                let mut republish = json!({ "src": source, "dest": destination });
                if self.republish_headers {
                    republish["headers_only"] = json!(true);
                }
                config.insert("republish".into(), republish);
            }
            (None, None) if !self.republish_headers => {}
            _ => {
                return Err(usage(
                    "--republish-source and --republish-destination go together (and --republish-headers needs both)",
                ))
            }
        }
        match (&self.transform_source, &self.transform_destination) {
            (Some(source), Some(destination)) => {
                config.insert(
                    "subject_transform".into(),
                    json!({ "src": source, "dest": destination }),
                );
            }
            (None, None) => {}
            _ => {
                return Err(usage(
                    "--transform-source and --transform-destination go together",
                ))
            }
        }
        Ok(())
    }
}

/// A `--config` file's stream config: a StreamConfig, or the `config` of
/// a `stream info --json`.
fn read_config_file(path: &std::path::Path) -> Result<Map<String, Value>, CliError> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(CONFIG_FILE_BYTES_MAX).read_to_string(&mut text))
        .map_err(|source| CliError::ReadFile {
            what: "the stream config",
            path: path.display().to_string(),
            source,
        })?;
    let mut config = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => map,
        Ok(_) | Err(_) => {
            return Err(usage(format!(
                "--config {}: not a JSON stream config object",
                path.display()
            )))
        }
    };
    if let Some(Value::Object(inner)) = config.remove("config") {
        config = inner;
    }
    strip_server_metadata(&mut config);
    Ok(config)
}

/// The config `stream add` sends: the file's (if any), the name, the nats
/// CLI's `allow_direct`, then the flags.
pub fn add_config(args: &AddArgs) -> Result<Map<String, Value>, CliError> {
    let mut config = match &args.config_file {
        Some(path) => read_config_file(path)?,
        None => Map::new(),
    };
    config.insert("name".into(), json!(args.stream));
    config.entry("allow_direct").or_insert_with(|| json!(true));
    args.config.apply(&mut config)?;
    if let Some(sequence) = args.first_sequence {
        config.insert("first_seq".into(), json!(sequence));
    }
    let mut limits = Map::new();
    if let Some(text) = &args.limit_consumer_inactive {
        let threshold =
            units::parse_duration(text).map_err(CliError::unit("--limit-consumer-inactive"))?;
        if !threshold.is_zero() {
            limits.insert("inactive_threshold".into(), json!(units::nanos(threshold)));
        }
    }
    if let Some(pending) = args
        .limit_consumer_max_pending
        .filter(|pending| *pending > 0)
    {
        limits.insert("max_ack_pending".into(), json!(pending));
    }
    if !limits.is_empty() {
        config.insert("consumer_limits".into(), Value::Object(limits));
    }
    if let Some(mode) = args.persist_mode {
        let name = match mode {
            PersistMode::Default => "default",
            PersistMode::Async => "async",
        };
        config.insert("persist_mode".into(), json!(name));
    }
    Ok(config)
}

/// `--validate` and `--output FILE`: the config, checked as far as tern
/// can without a server, printed or written; nothing is created.
pub fn offline(args: &AddArgs) -> Result<(), CliError> {
    let config = add_config(args)?;
    let text = serde_json::to_string_pretty(&config).expect("JSON values serialise");
    if let Some(path) = &args.output {
        write_private(path, &text)?;
    }
    if args.validate {
        line(&text);
        line("");
        line("Configuration is a valid Stream (checked by tern; the server checks the rest when it is created)");
    }
    Ok(())
}

async fn add(api: &Api, args: AddArgs) -> Result<(), CliError> {
    let config = add_config(&args)?;
    let action = format!("stream add {}", args.stream);
    let answer = api
        .request(
            &action,
            &format!("STREAM.CREATE.{}", args.stream),
            &Value::Object(config),
        )
        .await?;
    if !args.json {
        line(format_args!("Stream {} was created", args.stream));
        line("");
    }
    print_info(answer, args.json);
    Ok(())
}

pub async fn info(api: &Api, stream: &str) -> Result<Value, CliError> {
    api.request(
        &format!("stream info {stream}"),
        &format!("STREAM.INFO.{stream}"),
        &Value::Null,
    )
    .await
}

/// The new config `stream edit` asks for: the file's, the editor's, or
/// the current one with the flags applied.
pub fn edited_config(
    args: &EditArgs,
    mut current: Map<String, Value>,
) -> Result<Map<String, Value>, CliError> {
    if let Some(path) = &args.config_file {
        let mut config = read_config_file(path)?;
        config.entry("name").or_insert_with(|| json!(args.stream));
        return Ok(config);
    }
    args.config.apply(&mut current)?;
    if args.no_mirror {
        current.remove("mirror");
    }
    if args.no_transform {
        current.remove("subject_transform");
    }
    if args.no_republish {
        current.remove("republish");
    }
    Ok(current)
}

/// The top-level keys whose values differ, as `-key: old` / `+key: new`
/// lines (subject lists compared as sets, as the nats CLI does).
pub fn differences(old: &Map<String, Value>, new: &Map<String, Value>) -> Vec<String> {
    let normal = |value: Option<&Value>| match value {
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
            let mut sorted = items.clone();
            sorted.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
            Some(Value::Array(sorted))
        }
        other => other.cloned(),
    };
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut lines = Vec::new();
    for key in keys {
        let (before, after) = (normal(old.get(key)), normal(new.get(key)));
        if before == after {
            continue;
        }
        if let Some(before) = before {
            lines.push(format!("-  {key}: {before}"));
        }
        if let Some(after) = after {
            lines.push(format!("+  {key}: {after}"));
        }
    }
    lines
}

/// `edit -i`: the config as JSON in `$VISUAL`/`$EDITOR` (vi when neither
/// is set), read back when the editor exits.
fn edit_interactively(config: &Map<String, Value>) -> Result<Map<String, Value>, CliError> {
    let directory = tempfile_directory()?;
    let path = directory.join("stream.json");
    let text = serde_json::to_string_pretty(config).expect("JSON values serialise");
    write_private(&path, &text)?;
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".into());
    let words = crate::translate::split_words(&editor)
        .map_err(|error| usage(format!("$EDITOR {editor}: {error}")))?;
    let status = std::process::Command::new(&words[0])
        .args(&words[1..])
        .arg(&path)
        .status()
        .map_err(CliError::io(format!("running the editor {editor}")))?;
    let edited = std::fs::read_to_string(&path);
    let _ = std::fs::remove_dir_all(&directory);
    if !status.success() {
        return Err(CliError::Failed {
            action: format!("editing with {editor}"),
            reason: format!("the editor exited with {status}"),
        });
    }
    let edited = edited.map_err(CliError::io("reading the edited config"))?;
    match serde_json::from_str::<Value>(&edited) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(usage("the edited config is not a JSON object")),
    }
}

/// A private directory for the editor's file.
fn tempfile_directory() -> Result<PathBuf, CliError> {
    let base = std::env::temp_dir();
    for attempt in 0..100u32 {
        let path = base.join(format!("tern-edit-{}-{attempt}", std::process::id()));
        match std::fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(CliError::io("creating a temporary directory")(error)),
        }
    }
    Err(usage("no temporary directory could be created"))
}

async fn edit(api: &Api, args: EditArgs) -> Result<(), CliError> {
    let action = format!("stream edit {}", args.stream);
    let current = info(api, &args.stream).await?;
    let Some(Value::Object(mut config)) = current.get("config").cloned() else {
        return Err(CliError::BadAnswer {
            action,
            detail: "no config in the stream info".into(),
        });
    };
    strip_server_metadata(&mut config);
    let new = if args.interactive {
        edit_interactively(&config)?
    } else {
        edited_config(&args, config.clone())?
    };
    let lines = differences(&config, &new);
    if lines.is_empty() {
        if !args.dry_run {
            line("No difference in configuration");
        }
        return Ok(());
    }
    if args.dry_run || !args.json {
        line("Differences (-old +new):");
        for text in &lines {
            line(text);
        }
    }
    if args.dry_run {
        return Err(CliError::Failed {
            action,
            reason: "--dry-run: the configuration would change (nothing was sent)".into(),
        });
    }
    let answer = api
        .request(
            &action,
            &format!("STREAM.UPDATE.{}", args.stream),
            &Value::Object(new),
        )
        .await?;
    if !args.json {
        line("");
        line(format_args!("Stream {} was updated", args.stream));
        line("");
    }
    print_info(answer, args.json);
    Ok(())
}

/// The server adds `_nats.*` metadata to configs it answers with; an
/// update sends the operator's metadata only.
pub fn strip_server_metadata(config: &mut Map<String, Value>) {
    if let Some(Value::Object(metadata)) = config.get_mut("metadata") {
        metadata.retain(|key, _| !key.starts_with("_nats."));
        if metadata.is_empty() {
            config.remove("metadata");
        }
    }
}

/// A stream the nats CLI counts as the system's (a KV or object store
/// bucket, MQTT state): listed only with `-a`.
pub fn is_internal(name: &str) -> bool {
    name.starts_with("KV_") || name.starts_with("OBJ_") || name.starts_with("$MQTT_")
}

async fn ls(api: &Api, args: LsArgs, all: bool) -> Result<(), CliError> {
    let mut filter = Map::new();
    if let Some(subject) = &args.subject {
        filter.insert("subject".into(), json!(subject));
    }
    if args.names || args.json {
        let mut names = api
            .paged(
                "stream ls",
                "STREAM.NAMES",
                filter,
                "streams",
                STREAMS_LISTED_MAX,
            )
            .await?;
        // As the nats CLI: `-n` lists every stream, `-j` the ones the
        // table would show.
        if !args.names && !all {
            names.retain(|name| !name.as_str().is_some_and(is_internal));
        }
        api::print_names(names, args.json);
        return Ok(());
    }
    let (mut streams, missing, offline) = list_streams(api, filter).await?;
    let before = streams.len() + missing.len() + offline.len();
    if !all {
        streams.retain(|stream| !stream["config"]["name"].as_str().is_some_and(is_internal));
    }
    if streams.is_empty() && missing.is_empty() && offline.is_empty() {
        if before > 0 {
            line("No Streams defined, pass -a to include system streams");
        } else {
            line("No streams defined");
        }
        return Ok(());
    }
    let rows: Vec<[String; 5]> = streams
        .iter()
        .map(|stream| {
            let state = &stream["state"];
            [
                stream["config"]["name"].as_str().unwrap_or("").to_string(),
                subjects_text(&stream["config"]),
                state["messages"].as_u64().unwrap_or(0).to_string(),
                units::format_bytes(state["bytes"].as_u64().unwrap_or(0)),
                state["consumer_count"].as_u64().unwrap_or(0).to_string(),
            ]
        })
        .collect();
    print_columns(
        &["Name", "Subjects", "Messages", "Size", "Consumers"],
        &rows,
    );
    print_unlisted(&missing, &offline);
    Ok(())
}

/// Every page of STREAM.LIST: the streams, and those the server could not
/// describe in time (`missing`: their leaders did not answer) or that are
/// offline (name and reason).
async fn list_streams(
    api: &Api,
    filter: Map<String, Value>,
) -> Result<(Vec<Value>, Vec<String>, Vec<(String, String)>), CliError> {
    let (mut streams, mut missing, mut offline) = (Vec::new(), Vec::new(), Vec::new());
    let mut request = filter;
    loop {
        request.insert("offset".into(), json!(streams.len()));
        let answer = api
            .request("stream ls", "STREAM.LIST", &Value::Object(request.clone()))
            .await?;
        let page = answer["streams"].as_array().cloned().unwrap_or_default();
        for name in answer["missing"].as_array().into_iter().flatten() {
            missing.extend(name.as_str().map(String::from));
        }
        for (name, reason) in answer["offline"].as_object().into_iter().flatten() {
            offline.push((name.clone(), reason.as_str().unwrap_or("").to_string()));
        }
        let total = answer["total"].as_u64().unwrap_or(0) as usize;
        let empty = page.is_empty();
        streams.extend(page);
        if empty || streams.len() >= total || streams.len() >= STREAMS_LISTED_MAX {
            streams.truncate(STREAMS_LISTED_MAX);
            missing.sort();
            missing.dedup();
            return Ok((streams, missing, offline));
        }
    }
}

/// What the nats CLI prints under the table: the streams not described.
fn print_unlisted(missing: &[String], offline: &[(String, String)]) {
    if !missing.is_empty() {
        line("");
        line(format_args!("Inaccessible Streams: {}", missing.join(", ")));
    }
    if !offline.is_empty() {
        line("");
        line("Offline Streams:");
        for (name, reason) in offline {
            line(format_args!("  {name}: {reason}"));
        }
    }
}

/// The purge request: `--seq` and `--keep` do not go together (as the
/// nats CLI).
pub fn purge_request(args: &PurgeArgs) -> Result<Map<String, Value>, CliError> {
    if args.seq.is_some() && args.keep.is_some() {
        return Err(usage("--seq and --keep: one or the other"));
    }
    let mut request = Map::new();
    if let Some(subject) = &args.subject {
        request.insert("filter".into(), json!(subject));
    }
    if let Some(sequence) = args.seq {
        request.insert("seq".into(), json!(sequence));
    }
    if let Some(keep) = args.keep {
        request.insert("keep".into(), json!(keep));
    }
    Ok(request)
}

async fn purge(api: &Api, args: PurgeArgs) -> Result<(), CliError> {
    let action = format!("stream purge {}", args.stream);
    require_force(args.force, &action)?;
    let request = purge_request(&args)?;
    let answer = api
        .request(
            &action,
            &format!("STREAM.PURGE.{}", args.stream),
            &Value::Object(request),
        )
        .await?;
    if args.json {
        api::print_json(&api::without_type(answer));
    } else {
        line(format_args!(
            "Purged {} messages from {}",
            answer["purged"].as_u64().unwrap_or(0),
            args.stream
        ));
    }
    Ok(())
}

pub fn print_columns<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let render = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    line(render(header.to_vec()));
    for row in rows {
        line(render(row.iter().map(String::as_str).collect()));
    }
}

fn subjects_text(config: &Value) -> String {
    config["subjects"]
        .as_array()
        .map(|subjects| {
            subjects
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

async fn get(api: &Api, args: GetArgs) -> Result<(), CliError> {
    let (request, what) = match (args.sequence, &args.last_for) {
        (Some(sequence), None) => (json!({ "seq": sequence }), sequence.to_string()),
        (None, Some(subject)) => (json!({ "last_by_subj": subject }), subject.clone()),
        _ => {
            return Err(CliError::Usage(
                "stream get: give a sequence or --last-for SUBJECT (one of them)".into(),
            ))
        }
    };
    let action = format!("stream get {} {what}", args.stream);
    let answer = api
        .request(
            &action,
            &format!("STREAM.MSG.GET.{}", args.stream),
            &request,
        )
        .await?;
    let message = &answer["message"];
    if args.json {
        api::print_json(message);
        return Ok(());
    }
    let decode = |field: &str| -> Result<Vec<u8>, CliError> {
        match message[field].as_str() {
            None => Ok(Vec::new()),
            Some(text) => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|error| CliError::BadAnswer {
                    action: action.clone(),
                    detail: format!("{field}: {error}"),
                }),
        }
    };
    let headers = decode("hdrs")?;
    let data = decode("data")?;
    line(format_args!(
        "Item: {}#{} received {} on Subject {}",
        args.stream,
        message["seq"].as_u64().unwrap_or(0),
        message["time"].as_str().unwrap_or(""),
        message["subject"].as_str().unwrap_or("")
    ));
    line("");
    if !headers.is_empty() {
        line("Headers:");
        for header in String::from_utf8_lossy(&headers).lines().skip(1) {
            if !header.is_empty() {
                line(format_args!("  {header}"));
            }
        }
        line("");
    }
    let data = match &args.translate {
        Some(command) => crate::translate::translate(
            command,
            &data,
            message["subject"].as_str().unwrap_or(""),
            &args.stream,
        )?,
        None => data,
    };
    let text = String::from_utf8_lossy(&data);
    line(text.strip_suffix('\n').unwrap_or(&text));
    Ok(())
}

/// A stream info answer as text, or (`json`) as the API sent it.
pub fn print_info(answer: Value, json: bool) {
    if json {
        api::print_json(&api::without_type(answer));
        return;
    }
    let config = &answer["config"];
    let state = &answer["state"];
    let limit = |key: &str| match config[key].as_i64() {
        Some(value) if value >= 0 => value.to_string(),
        _ => "unlimited".into(),
    };
    let size = |key: &str| match config[key].as_i64() {
        Some(value) if value >= 0 => units::format_bytes(value as u64),
        _ => "unlimited".into(),
    };
    let duration = |key: &str, zero: &str| match config[key].as_u64() {
        Some(0) | None => zero.to_string(),
        Some(ns) => units::format_duration(Duration::from_nanos(ns)),
    };
    let flag = |key: &str| config[key].as_bool().unwrap_or(false).to_string();
    line(format_args!(
        "Information for Stream {} created {}",
        config["name"].as_str().unwrap_or(""),
        answer["created"].as_str().unwrap_or("")
    ));
    line("");
    table(&[
        ("Subjects", subjects_text(config)),
        ("Replicas", config["num_replicas"].to_string()),
        ("Storage", config["storage"].as_str().unwrap_or("").into()),
        (
            "Retention",
            config["retention"].as_str().unwrap_or("").into(),
        ),
        (
            "Discard Policy",
            config["discard"].as_str().unwrap_or("").into(),
        ),
        ("Maximum Messages", limit("max_msgs")),
        ("Maximum Per Subject", limit("max_msgs_per_subject")),
        ("Maximum Bytes", size("max_bytes")),
        ("Maximum Age", duration("max_age", "unlimited")),
        ("Maximum Message Size", size("max_msg_size")),
        ("Maximum Consumers", limit("max_consumers")),
        ("Duplicate Window", duration("duplicate_window", "0s")),
        ("Allows Rollups", flag("allow_rollup_hdrs")),
        ("Allows Direct Get", flag("allow_direct")),
        ("Deny Delete", flag("deny_delete")),
        ("Deny Purge", flag("deny_purge")),
    ]);
    if let Some(leader) = answer["cluster"]["leader"].as_str() {
        line("");
        line("Cluster Information:");
        line("");
        let mut rows = vec![
            (
                "Name",
                answer["cluster"]["name"].as_str().unwrap_or("").to_string(),
            ),
            ("Leader", leader.to_string()),
        ];
        // As the `nats` CLI: each replica, current or not, and when the
        // leader last heard from it (`active`, nanoseconds).
        for replica in answer["cluster"]["replicas"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = replica["name"].as_str().unwrap_or("?");
            let state = if replica["offline"] == true {
                "offline"
            } else if replica["current"] == true {
                "current"
            } else {
                "outdated"
            };
            let seen_seconds = replica["active"].as_u64().unwrap_or(0) as f64 / 1e9;
            rows.push((
                "Replica",
                format!("{name}, {state}, seen {seen_seconds:.2}s ago"),
            ));
        }
        table(&rows);
    }
    line("");
    line("State:");
    line("");
    table(&state_rows(state));
}

/// `stream info --state`: only the state, as the nats CLI prints it.
pub fn print_state(answer: &Value) {
    line(format_args!(
        "State for Stream {} created {}",
        answer["config"]["name"].as_str().unwrap_or(""),
        answer["created"].as_str().unwrap_or("")
    ));
    line("");
    table(&state_rows(&answer["state"]));
}

fn state_rows(state: &Value) -> Vec<(&'static str, String)> {
    vec![
        ("Messages", state["messages"].to_string()),
        (
            "Bytes",
            units::format_bytes(state["bytes"].as_u64().unwrap_or(0)),
        ),
        (
            "First Sequence",
            format!(
                "{} @ {}",
                state["first_seq"],
                state["first_ts"].as_str().unwrap_or("")
            ),
        ),
        (
            "Last Sequence",
            format!(
                "{} @ {}",
                state["last_seq"],
                state["last_ts"].as_str().unwrap_or("")
            ),
        ),
        ("Active Consumers", state["consumer_count"].to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Harness {
        #[command(flatten)]
        stream: StreamArgs,
    }

    fn parse(arguments: &[&str]) -> Result<StreamCommand, CliError> {
        Harness::try_parse_from(std::iter::once("stream").chain(arguments.iter().copied()))
            .map(|harness| harness.stream.command)
            .map_err(|error| CliError::Usage(error.to_string()))
    }

    fn add_config_of(arguments: &[&str]) -> Result<Map<String, Value>, CliError> {
        match parse(arguments)? {
            StreamCommand::Add(args) => add_config(&args),
            other => panic!("not add: {other:?}"),
        }
    }

    /// `stream edit` of `current` with `arguments`: the config it sends.
    fn edit_of(arguments: &[&str], current: Value) -> Result<Value, CliError> {
        match parse(arguments)? {
            StreamCommand::Edit(args) => {
                let Value::Object(current) = current else {
                    panic!("not an object")
                };
                edited_config(&args, current).map(Value::Object)
            }
            other => panic!("not edit: {other:?}"),
        }
    }

    #[test]
    fn the_users_stream_add_maps_to_the_api_config() {
        let config = add_config_of(&[
            "add",
            "ORDERS",
            "--subjects",
            "orders.>",
            "--max-age",
            "30d",
            "--max-bytes",
            "500GB",
            "--storage",
            "file",
            "--replicas",
            "3",
            "--defaults",
        ])
        .unwrap();
        assert_eq!(
            Value::Object(config),
            json!({
                "name": "ORDERS",
                "subjects": ["orders.>"],
                "max_age": 30u64 * 86_400 * 1_000_000_000,
                "max_bytes": 500i64 << 30,
                "storage": "file",
                "num_replicas": 3,
                "allow_direct": true,
            })
        );
    }

    #[test]
    fn every_config_flag_has_its_field() {
        let config = add_config_of(&[
            "add",
            "S",
            "--subjects",
            "a.*, b.>",
            "--subjects",
            "c",
            "--retention",
            "work",
            "--storage",
            "m",
            "--max-msgs",
            "-1",
            "--max-msgs-per-subject",
            "5",
            "--max-msg-size",
            "1MB",
            "--max-consumers",
            "10",
            "--discard",
            "new",
            "--dupe-window",
            "1m",
            "--allow-rollup",
            "--deny-delete",
            "--deny-purge=false",
            "--no-allow-direct",
            "--description",
            "d",
        ])
        .unwrap();
        assert_eq!(
            Value::Object(config),
            json!({
                "name": "S",
                "subjects": ["a.*", "b.>", "c"],
                "retention": "workqueue",
                "storage": "memory",
                "max_msgs": -1,
                "max_msgs_per_subject": 5,
                "max_msg_size": 1 << 20,
                "max_consumers": 10,
                "discard": "new",
                "duplicate_window": 60_000_000_000u64,
                "allow_rollup_hdrs": true,
                "deny_delete": true,
                "deny_purge": false,
                "allow_direct": false,
                "description": "d",
            })
        );
    }

    #[test]
    fn the_newer_flags_have_their_fields() {
        let config = add_config_of(&[
            "add",
            "S",
            "--subjects",
            "a",
            "--compression",
            "s2",
            "--tag",
            "ssd",
            "--tags",
            "eu",
            "--cluster",
            "c1",
            "--no-ack",
            "--discard-per-subject",
            "--first-sequence",
            "100",
            "--allow-batch",
            "--allow-fast",
            "--allow-counter",
            "--no-allow-direct",
            "--allow-mirror-direct",
            "--allow-msg-ttl",
            "--allow-schedules",
            "--subject-del-markers-ttl",
            "1m",
            "--transform-source",
            "a",
            "--transform-destination",
            "b",
            "--metadata",
            "team=orders",
            "--republish-source",
            "a",
            "--republish-destination",
            "re.a",
            "--republish-headers",
            "--limit-consumer-inactive",
            "1h",
            "--limit-consumer-max-pending",
            "500",
            "--persist-mode",
            "async",
            "--source",
            "OTHER",
            "--source",
            r#"{"name": "THIRD", "filter_subject": "x.>"}"#,
            "--json",
        ])
        .unwrap();
        assert_eq!(
            Value::Object(config),
            json!({
                "name": "S",
                "subjects": ["a"],
                "compression": "s2",
                "placement": {"cluster": "c1", "tags": ["ssd", "eu"]},
                "no_ack": true,
                "discard_new_per_subject": true,
                "first_seq": 100,
                "allow_atomic": true,
                "allow_batched": true,
                "allow_msg_counter": true,
                "allow_direct": false,
                "mirror_direct": true,
                "allow_msg_ttl": true,
                "allow_msg_schedules": true,
                "subject_delete_marker_ttl": 60_000_000_000u64,
                "subject_transform": {"src": "a", "dest": "b"},
                "metadata": {"team": "orders"},
                "republish": {"src": "a", "dest": "re.a", "headers_only": true},
                "consumer_limits": {"inactive_threshold": 3_600_000_000_000u64, "max_ack_pending": 500},
                "persist_mode": "async",
                "sources": [{"name": "OTHER"}, {"name": "THIRD", "filter_subject": "x.>"}],
            })
        );
        let mirror = add_config_of(&["add", "M", "--mirror", "S"]).unwrap();
        assert_eq!(mirror["mirror"], json!({"name": "S"}));
        // The last of --x and --no-x wins.
        let config = add_config_of(&["add", "S", "--no-deny-delete", "--deny-delete"]).unwrap();
        assert_eq!(config["deny_delete"], true);
        let config = add_config_of(&["add", "S", "--deny-purge", "--no-deny-purge"]).unwrap();
        assert_eq!(config["deny_purge"], false);
        // --subjects takes one value, so the name may follow it.
        let config = add_config_of(&["add", "--subjects", "a.>", "LATE"]).unwrap();
        assert_eq!(config["name"], "LATE");
    }

    #[test]
    fn edit_changes_only_what_is_given() {
        let current = json!({
            "name": "S",
            "subjects": ["a"],
            "placement": {"cluster": "c1", "tags": ["ssd"]},
            "republish": {"src": "a", "dest": "b"},
            "subject_transform": {"src": "a", "dest": "c"},
            "mirror": {"name": "X"},
            "max_msgs": -1,
        });
        let edited = edit_of(
            &["edit", "S", "--max-msgs", "5", "--tag", ""],
            current.clone(),
        )
        .unwrap();
        assert_eq!(edited["max_msgs"], 5);
        assert_eq!(edited["placement"], json!({"cluster": "c1"}));
        assert_eq!(edited["republish"], current["republish"]);
        let edited = edit_of(
            &[
                "edit",
                "S",
                "--no-mirror",
                "--no-transform",
                "--no-republish",
                "--cluster",
                "",
            ],
            current.clone(),
        )
        .unwrap();
        for key in ["mirror", "subject_transform", "republish"] {
            assert_eq!(edited.get(key), None, "{key}");
        }
        assert_eq!(edited["placement"], json!({"tags": ["ssd"]}));
        let Value::Object(old) = current else {
            unreachable!()
        };
        let Value::Object(new) = edit_of(
            &["edit", "S", "--subjects", "a"],
            Value::Object(old.clone()),
        )
        .unwrap() else {
            unreachable!()
        };
        assert!(differences(&old, &new).is_empty());
        let mut changed = new.clone();
        changed.insert("max_msgs".into(), json!(3));
        assert_eq!(
            differences(&old, &changed),
            ["-  max_msgs: -1", "+  max_msgs: 3"]
        );
    }

    #[test]
    fn nothing_given_is_the_servers_default() {
        let config = add_config_of(&["add", "S"]).unwrap();
        assert_eq!(
            Value::Object(config),
            json!({"name": "S", "allow_direct": true})
        );
        let config = add_config_of(&["add", "S", "--max-age", "-1"]).unwrap();
        assert_eq!(config["max_age"], json!(0));
    }

    #[test]
    fn bad_values_name_the_flag() {
        let error = add_config_of(&["add", "S", "--max-bytes", "5XB"]).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("--max-bytes: invalid size \"5XB\""),
            "{error}"
        );
        let error = add_config_of(&["add", "S", "--max-age", "30 days"]).unwrap_err();
        assert!(
            error.to_string().starts_with("--max-age: invalid duration"),
            "{error}"
        );
        let error = add_config_of(&["add", "S", "--max-msg-size", "4GB"]).unwrap_err();
        assert!(error.to_string().contains("at most"), "{error}");
        let error = add_config_of(&["add", "S", "--replicas", "0"]).unwrap_err();
        assert!(error.to_string().contains("--replicas"), "{error}");
        for line in [
            &["add", "S", "--storage", "disk"][..],
            &["add", "S", "--mirror", "X", "--subjects", "a"],
            &["add", "S", "--republish-source", "a"],
            &["add", "S", "--republish-headers"],
            &["add", "S", "--transform-destination", "b"],
            &["add", "S", "--source", "{\"filter_subject\": \"a\"}"],
            &["add", "S", "--compression", "zstd"],
            &["add", "S", "--metadata", "_nats.level=1"],
        ] {
            assert!(add_config_of(line).is_err(), "{line:?}");
        }
        let purge = |line: &[&str]| match parse(line).unwrap() {
            StreamCommand::Purge(args) => purge_request(&args),
            other => panic!("not purge: {other:?}"),
        };
        assert!(purge(&["purge", "S", "-f", "--seq", "5", "--keep", "1"]).is_err());
        assert_eq!(
            Value::Object(purge(&["purge", "S", "-f", "--subject", "a", "--keep", "1"]).unwrap()),
            json!({"filter": "a", "keep": 1})
        );
    }

    #[test]
    fn edit_keeps_the_operators_metadata_only() {
        let mut config = json!({"name": "S", "metadata": {"_nats.ver": "2.15.1", "team": "a"}})
            .as_object()
            .cloned()
            .unwrap();
        strip_server_metadata(&mut config);
        assert_eq!(
            Value::Object(config.clone()),
            json!({"name": "S", "metadata": {"team": "a"}})
        );
        config.insert("metadata".into(), json!({"_nats.level": "5"}));
        strip_server_metadata(&mut config);
        assert_eq!(Value::Object(config), json!({"name": "S"}));
    }

    #[test]
    fn system_streams_are_the_nats_clis() {
        for name in ["KV_cfg", "OBJ_files", "$MQTT_sess"] {
            assert!(is_internal(name), "{name}");
        }
        assert!(!is_internal("ORDERS"));
    }

    #[test]
    fn destructive_commands_refuse_without_force() {
        let error = require_force(false, "stream rm ORDERS").unwrap_err();
        assert_eq!(
            error.to_string(),
            "stream rm ORDERS: refusing without --force (-f): tern never prompts"
        );
        assert!(require_force(true, "stream rm ORDERS").is_ok());
    }
}
