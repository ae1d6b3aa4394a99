//! `tern stream add|info|ls|edit|rm|purge|get|rmm`: the `nats` CLI's stream
//! commands over the raw JetStream API. A stream config holds only what
//! the flags gave (plus `allow_direct`, on by default as in the `nats`
//! CLI); the server fills in the rest with its defaults. Nothing prompts:
//! `--defaults` is accepted for scripts written for the `nats` CLI.

use std::time::Duration;

use base64::Engine;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Map, Value};

use crate::api::{self, Api};
use crate::error::CliError;
use crate::output::{line, table};
use crate::units;

/// Streams listed by `stream ls` at most (the API pages by 256).
pub const STREAMS_LISTED_MAX: usize = 100_000;

#[derive(Debug, Subcommand)]
pub enum StreamCommand {
    /// Create a stream
    #[command(visible_alias = "create", alias = "new")]
    Add(AddArgs),
    /// Show a stream's configuration and state
    #[command(alias = "nfo", alias = "i")]
    Info(InfoArgs),
    /// List streams
    #[command(visible_alias = "list", alias = "l")]
    Ls(LsArgs),
    /// Change a stream's configuration (only the flags given change)
    #[command(visible_alias = "update")]
    Edit(EditArgs),
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

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Discard {
    Old,
    New,
}

/// The config flags of `add` and `edit`; `None` leaves a field alone.
#[derive(Debug, Args, Default)]
pub struct ConfigArgs {
    /// Subjects the stream captures (comma or space separated, repeatable)
    #[arg(long, value_name = "SUBJECTS", num_args = 1.., value_delimiter = ',')]
    pub subjects: Vec<String>,
    /// A description of the stream
    #[arg(long)]
    pub description: Option<String>,
    /// Retention policy
    #[arg(long, value_enum)]
    pub retention: Option<Retention>,
    /// Storage backend
    #[arg(long, value_enum)]
    pub storage: Option<Storage>,
    /// Replicas of the data (1, 3 or 5; more than 1 needs a cluster)
    #[arg(long, value_name = "N")]
    pub replicas: Option<i64>,
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
    /// Window of duplicate detection by Nats-Msg-Id, e.g. 2m
    #[arg(long, value_name = "DURATION")]
    pub dupe_window: Option<String>,
    /// Allow Nats-Rollup headers (=false to turn off)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allow_rollup: Option<bool>,
    /// Refuse message deletes through the API
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub deny_delete: Option<bool>,
    /// Refuse purges through the API
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub deny_purge: Option<bool>,
    /// Allow direct gets (on unless =false, as the nats CLI)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allow_direct: Option<bool>,
    /// Allow per-message TTLs (Nats-TTL)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub allow_msg_ttl: Option<bool>,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// Stream name
    pub stream: String,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Start from the stream config in this JSON file (flags override it)
    #[arg(long = "config", value_name = "FILE")]
    pub config_file: Option<std::path::PathBuf>,
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
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only streams capturing subjects that overlap this one
    #[arg(long, value_name = "SUBJECT")]
    pub subject: Option<String>,
    /// Only the names, one a line
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
    /// Accepted for the nats CLI's scripts (tern never prompts)
    #[arg(short = 'f', long)]
    pub force: bool,
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

pub async fn execute(api: &Api, command: StreamCommand) -> Result<(), CliError> {
    match command {
        StreamCommand::Add(args) => add(api, args).await,
        StreamCommand::Info(args) => {
            let answer = info(api, &args.stream).await?;
            print_info(answer, args.json);
            Ok(())
        }
        StreamCommand::Ls(args) => ls(api, args).await,
        StreamCommand::Edit(args) => edit(api, args).await,
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

impl ConfigArgs {
    /// Writes the given flags into a StreamConfig object.
    pub fn apply(&self, config: &mut Map<String, Value>) -> Result<(), CliError> {
        let subjects = split_subjects(&self.subjects);
        if !subjects.is_empty() {
            config.insert("subjects".into(), json!(subjects));
        }
        let mut set = |key: &str, value: Value| {
            config.insert(key.into(), value);
        };
        if let Some(description) = &self.description {
            set("description", json!(description));
        }
        if let Some(retention) = self.retention {
            let name = match retention {
                Retention::Limits => "limits",
                Retention::Interest => "interest",
                Retention::Workqueue => "workqueue",
            };
            set("retention", json!(name));
        }
        if let Some(storage) = self.storage {
            let name = match storage {
                Storage::File => "file",
                Storage::Memory => "memory",
            };
            set("storage", json!(name));
        }
        if let Some(replicas) = self.replicas {
            if replicas < 1 {
                return Err(CliError::Usage("--replicas: must be 1 or more".into()));
            }
            set("num_replicas", json!(replicas));
        }
        for (key, value) in [
            ("max_msgs", self.max_msgs),
            ("max_msgs_per_subject", self.max_msgs_per_subject),
            ("max_consumers", self.max_consumers),
        ] {
            if let Some(value) = value {
                set(key, json!(value.max(units::UNLIMITED)));
            }
        }
        if let Some(text) = &self.max_bytes {
            let bytes = units::parse_size(text).map_err(CliError::unit("--max-bytes"))?;
            set("max_bytes", json!(bytes));
        }
        if let Some(text) = &self.max_msg_size {
            let bytes = units::parse_size(text).map_err(CliError::unit("--max-msg-size"))?;
            if bytes > i64::from(i32::MAX) {
                return Err(CliError::Usage(format!(
                    "--max-msg-size {text}: at most {} bytes",
                    i32::MAX
                )));
            }
            set("max_msg_size", json!(bytes));
        }
        if let Some(text) = &self.max_age {
            let age =
                units::parse_duration_or_unlimited(text).map_err(CliError::unit("--max-age"))?;
            set("max_age", json!(units::nanos(age)));
        }
        if let Some(text) = &self.dupe_window {
            let window = units::parse_duration(text).map_err(CliError::unit("--dupe-window"))?;
            set("duplicate_window", json!(units::nanos(window)));
        }
        if let Some(discard) = self.discard {
            let name = match discard {
                Discard::Old => "old",
                Discard::New => "new",
            };
            set("discard", json!(name));
        }
        for (key, value) in [
            ("allow_rollup_hdrs", self.allow_rollup),
            ("deny_delete", self.deny_delete),
            ("deny_purge", self.deny_purge),
            ("allow_direct", self.allow_direct),
            ("allow_msg_ttl", self.allow_msg_ttl),
        ] {
            if let Some(value) = value {
                set(key, json!(value));
            }
        }
        Ok(())
    }
}

/// `--subjects "a b,c" --subjects d` as the nats CLI splits them.
fn split_subjects(given: &[String]) -> Vec<String> {
    given
        .iter()
        .flat_map(|text| text.split([',', ' ']))
        .map(str::trim)
        .filter(|subject| !subject.is_empty())
        .map(String::from)
        .collect()
}

/// The config `stream add` sends: the file's (if any), the name, the nats
/// CLI's `allow_direct`, then the flags.
pub fn add_config(args: &AddArgs) -> Result<Map<String, Value>, CliError> {
    let mut config = match &args.config_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| CliError::ReadFile {
                what: "the stream config",
                path: path.display().to_string(),
                source,
            })?;
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(map)) => map,
                Ok(_) | Err(_) => {
                    return Err(CliError::Usage(format!(
                        "--config {}: not a JSON stream config object",
                        path.display()
                    )))
                }
            }
        }
        None => Map::new(),
    };
    config.insert("name".into(), json!(args.stream));
    config.entry("allow_direct").or_insert_with(|| json!(true));
    args.config.apply(&mut config)?;
    Ok(config)
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

async fn edit(api: &Api, args: EditArgs) -> Result<(), CliError> {
    let current = info(api, &args.stream).await?;
    let Some(Value::Object(mut config)) = current.get("config").cloned() else {
        return Err(CliError::BadAnswer {
            action: format!("stream edit {}", args.stream),
            detail: "no config in the stream info".into(),
        });
    };
    strip_server_metadata(&mut config);
    args.config.apply(&mut config)?;
    let answer = api
        .request(
            &format!("stream edit {}", args.stream),
            &format!("STREAM.UPDATE.{}", args.stream),
            &Value::Object(config),
        )
        .await?;
    if !args.json {
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

async fn ls(api: &Api, args: LsArgs) -> Result<(), CliError> {
    let mut filter = Map::new();
    if let Some(subject) = &args.subject {
        filter.insert("subject".into(), json!(subject));
    }
    if args.names || args.json {
        let names = api
            .paged(
                "stream ls",
                "STREAM.NAMES",
                filter,
                "streams",
                STREAMS_LISTED_MAX,
            )
            .await?;
        api::print_names(names, args.json);
        return Ok(());
    }
    let streams = api
        .paged(
            "stream ls",
            "STREAM.LIST",
            filter,
            "streams",
            STREAMS_LISTED_MAX,
        )
        .await?;
    if streams.is_empty() {
        line("No streams defined");
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
    Ok(())
}

/// Columns padded to their widest cell.
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

async fn purge(api: &Api, args: PurgeArgs) -> Result<(), CliError> {
    let action = format!("stream purge {}", args.stream);
    require_force(args.force, &action)?;
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
    line(String::from_utf8_lossy(&data));
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
    table(&[
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
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Harness {
        #[command(subcommand)]
        command: StreamCommand,
    }

    fn add_config_of(arguments: &[&str]) -> Result<Map<String, Value>, CliError> {
        let harness =
            Harness::try_parse_from(std::iter::once("stream").chain(arguments.iter().copied()))
                .map_err(|error| CliError::Usage(error.to_string()))?;
        match harness.command {
            StreamCommand::Add(args) => add_config(&args),
            other => panic!("not add: {other:?}"),
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
            "--allow-direct=false",
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
        assert!(add_config_of(&["add", "S", "--storage", "disk"]).is_err());
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
    fn destructive_commands_refuse_without_force() {
        let error = require_force(false, "stream rm ORDERS").unwrap_err();
        assert_eq!(
            error.to_string(),
            "stream rm ORDERS: refusing without --force (-f): tern never prompts"
        );
        assert!(require_force(true, "stream rm ORDERS").is_ok());
    }
}
