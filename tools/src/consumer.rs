//! `tern consumer add|info|ls|next|rm`: the `nats` CLI's consumer commands
//! over the raw JetStream API. `next` pulls in batches of at most
//! [`PULL_BATCH_MAX`], prints each body on its own line and acks it
//! (the last ack waits for the server's confirmation), so `--count 10000`
//! is a few dozen round trips rather than ten thousand.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand, ValueEnum};
use futures::StreamExt;
use serde_json::{json, Map, Value};

use crate::api::{self, Api, API_PREFIX};
use crate::error::CliError;
use crate::output::{line, table};
use crate::progress;
use crate::stream::{print_columns, require_force};
use crate::units;

/// Messages asked for by one pull request of `next` (and so at most
/// unacknowledged at once: below the server's default max_ack_pending).
pub const PULL_BATCH_MAX: u64 = 256;
/// Consumers listed by `consumer ls` at most.
pub const CONSUMERS_LISTED_MAX: usize = 100_000;

#[derive(Debug, Subcommand)]
pub enum ConsumerCommand {
    /// Create a consumer (durable when named)
    #[command(visible_alias = "create", alias = "new")]
    Add(AddArgs),
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

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum AckPolicy {
    Explicit,
    None,
    All,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReplayPolicy {
    Instant,
    Original,
}

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
    /// Where delivery starts: all, new, last, subject (last per subject), a
    /// stream sequence, or a duration back from now (e.g. 1h)
    #[arg(long, value_name = "POLICY")]
    pub deliver: Option<String>,
    /// Only messages on these subjects (comma separated, repeatable)
    #[arg(long, value_name = "SUBJECTS", num_args = 1.., value_delimiter = ',')]
    pub filter: Vec<String>,
    /// Deliveries of one message at most (-1 unlimited)
    #[arg(long, value_name = "TRIES", allow_hyphen_values = true)]
    pub max_deliver: Option<i64>,
    /// Time allowed for an ack before redelivery (ack_wait), e.g. 30s
    #[arg(long, value_name = "DURATION")]
    pub wait: Option<String>,
    /// Unacknowledged messages at most before delivery pauses
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub max_pending: Option<i64>,
    /// Pull requests waiting at most
    #[arg(long, value_name = "PULLS")]
    pub max_waiting: Option<i64>,
    /// Replay policy
    #[arg(long, value_enum)]
    pub replay: Option<ReplayPolicy>,
    /// Push consumer: idle heartbeat interval, e.g. 5s
    #[arg(long, value_name = "DURATION")]
    pub heartbeat: Option<String>,
    /// Push consumer: flow control
    #[arg(long)]
    pub flow_control: bool,
    /// Remove the consumer after this long without activity
    #[arg(long, value_name = "DURATION")]
    pub inactive_threshold: Option<String>,
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
    /// An ephemeral consumer (removed when inactive)
    #[arg(long)]
    pub ephemeral: bool,
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
    /// Consumer name
    pub consumer: String,
    /// Print the API's answer as JSON
    #[arg(short = 'j', long)]
    pub json: bool,
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
    /// Leave the messages unacknowledged
    #[arg(long)]
    pub no_ack: bool,
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
        ConsumerCommand::Add(args) => add(api, args).await,
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

impl ConfigArgs {
    /// Writes the given flags into a ConsumerConfig object; `now` is the
    /// clock `--deliver 1h` counts back from.
    pub fn apply(&self, config: &mut Map<String, Value>, now: SystemTime) -> Result<(), CliError> {
        if self.pull && self.target.is_some() {
            return Err(CliError::Usage(
                "--pull and --target: a consumer is pull or push, not both".into(),
            ));
        }
        let push = self.target.is_some();
        if let Some(target) = &self.target {
            config.insert("deliver_subject".into(), json!(target));
        }
        if let Some(group) = &self.deliver_group {
            config.insert("deliver_group".into(), json!(group));
        }
        let ack = self.ack.unwrap_or(if push {
            AckPolicy::None
        } else {
            AckPolicy::Explicit
        });
        let ack = match ack {
            AckPolicy::Explicit => "explicit",
            AckPolicy::None => "none",
            AckPolicy::All => "all",
        };
        config.insert("ack_policy".into(), json!(ack));
        if let Some(deliver) = &self.deliver {
            for (key, value) in deliver_policy(deliver, now)? {
                config.insert(key.into(), value);
            }
        }
        let filters: Vec<&str> = self
            .filter
            .iter()
            .flat_map(|text| text.split([',', ' ']))
            .map(str::trim)
            .filter(|subject| !subject.is_empty())
            .collect();
        match filters.as_slice() {
            [] => {}
            [one] => {
                config.insert("filter_subject".into(), json!(one));
            }
            many => {
                config.insert("filter_subjects".into(), json!(many));
            }
        }
        if let Some(tries) = self.max_deliver {
            config.insert("max_deliver".into(), json!(tries.max(-1)));
        }
        if let Some(pending) = self.max_pending {
            config.insert("max_ack_pending".into(), json!(pending.max(-1)));
        }
        if let Some(waiting) = self.max_waiting {
            config.insert("max_waiting".into(), json!(waiting));
        }
        for (flag, key, text) in [
            ("--wait", "ack_wait", &self.wait),
            ("--heartbeat", "idle_heartbeat", &self.heartbeat),
            (
                "--inactive-threshold",
                "inactive_threshold",
                &self.inactive_threshold,
            ),
        ] {
            if let Some(text) = text {
                let duration = units::parse_duration(text).map_err(CliError::unit(flag))?;
                config.insert(key.into(), json!(units::nanos(duration)));
            }
        }
        if let Some(replay) = self.replay {
            let name = match replay {
                ReplayPolicy::Instant => "instant",
                ReplayPolicy::Original => "original",
            };
            config.insert("replay_policy".into(), json!(name));
        }
        if self.flow_control {
            config.insert("flow_control".into(), json!(true));
        }
        if let Some(description) = &self.description {
            config.insert("description".into(), json!(description));
        }
        Ok(())
    }
}

/// `--deliver` as the nats CLI reads it: a policy name, a stream sequence,
/// or a duration back from now.
pub fn deliver_policy(text: &str, now: SystemTime) -> Result<Vec<(&'static str, Value)>, CliError> {
    let policy = |name: &str| vec![("deliver_policy", json!(name))];
    Ok(match text.trim().to_ascii_lowercase().as_str() {
        "all" => policy("all"),
        "new" => policy("new"),
        "last" => policy("last"),
        "subject" | "last_per_subject" | "last-per-subject" => policy("last_per_subject"),
        number if number.chars().all(|c| c.is_ascii_digit()) && !number.is_empty() => {
            let sequence: u64 = number
                .parse()
                .map_err(|_| CliError::Usage(format!("--deliver {text}: sequence out of range")))?;
            vec![
                ("deliver_policy", json!("by_start_sequence")),
                ("opt_start_seq", json!(sequence)),
            ]
        }
        _ => {
            let back = units::parse_duration(text).map_err(|_| {
                CliError::Usage(format!(
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

/// UTC RFC 3339 with nanoseconds, as Go writes `time.Time`.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let seconds = since.as_secs() as i64;
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_nanos()
    )
}

/// The create request `consumer add` sends, and the API subject.
pub fn create_request(args: &AddArgs, now: SystemTime) -> Result<(String, Value), CliError> {
    let mut config = Map::new();
    let suffix = match (&args.consumer, args.ephemeral) {
        (Some(name), false) => {
            config.insert("durable_name".into(), json!(name));
            format!("CONSUMER.CREATE.{}.{name}", args.stream)
        }
        (Some(name), true) => {
            config.insert("name".into(), json!(name));
            format!("CONSUMER.CREATE.{}.{name}", args.stream)
        }
        (None, true) => format!("CONSUMER.CREATE.{}", args.stream),
        (None, false) => {
            return Err(CliError::Usage(
                "consumer add: name the consumer, or pass --ephemeral".into(),
            ))
        }
    };
    args.config.apply(&mut config, now)?;
    Ok((
        suffix,
        json!({ "stream_name": args.stream, "config": config, "action": "create" }),
    ))
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
    let acks = !args.no_ack && consumer["config"]["ack_policy"] != "none";
    let client = &api.client;
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .map_err(CliError::client(action.clone()))?;
    let subject = format!(
        "{API_PREFIX}.CONSUMER.MSG.NEXT.{}.{}",
        args.stream, args.consumer
    );
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
            let wait = api.timeout + Duration::from_secs(1);
            let message = match tokio::time::timeout(wait, replies.next()).await {
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
            if acks {
                if let Some(reply) = last_reply.take() {
                    client
                        .publish(reply, bytes::Bytes::new())
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
    // The last ack waits for the server's answer (a "double ack"): every
    // ack before it on this connection has been handled by then.
    if let Some(reply) = last_reply {
        let request = async_nats::Request::new()
            .payload(bytes::Bytes::new())
            .timeout(Some(api.timeout));
        client
            .send_request(reply.clone(), request)
            .await
            .map_err(|error| api::request_error(&action, &reply, api.timeout, error))?;
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
        #[command(subcommand)]
        command: ConsumerCommand,
    }

    fn request_of(arguments: &[&str], now: SystemTime) -> Result<(String, Value), CliError> {
        let harness =
            Harness::try_parse_from(std::iter::once("consumer").chain(arguments.iter().copied()))
                .map_err(|error| CliError::Usage(error.to_string()))?;
        match harness.command {
            ConsumerCommand::Add(args) => create_request(&args, now),
            other => panic!("not add: {other:?}"),
        }
    }

    #[test]
    fn the_users_pull_consumer() {
        let (subject, request) = request_of(
            &[
                "add",
                "ORDERS",
                "P",
                "--pull",
                "--ack",
                "explicit",
                "--defaults",
            ],
            SystemTime::now(),
        )
        .unwrap();
        assert_eq!(subject, "CONSUMER.CREATE.ORDERS.P");
        assert_eq!(
            request,
            json!({
                "stream_name": "ORDERS",
                "action": "create",
                "config": {"durable_name": "P", "ack_policy": "explicit"},
            })
        );
    }

    #[test]
    fn every_config_flag_has_its_field() {
        let now = UNIX_EPOCH + Duration::from_secs(86_400 * 365);
        let (_, request) = request_of(
            &[
                "add",
                "S",
                "C",
                "--ack",
                "all",
                "--deliver",
                "42",
                "--filter",
                "a.*,b.>",
                "--max-deliver",
                "5",
                "--wait",
                "10s",
                "--max-pending",
                "100",
                "--replay",
                "original",
            ],
            now,
        )
        .unwrap();
        assert_eq!(
            request["config"],
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
            })
        );
        let (_, request) =
            request_of(&["add", "S", "C", "--deliver", "1h", "--filter", "a"], now).unwrap();
        assert_eq!(request["config"]["deliver_policy"], "by_start_time");
        assert_eq!(
            request["config"]["opt_start_time"],
            "1970-12-31T23:00:00.000000000Z"
        );
        assert_eq!(request["config"]["filter_subject"], "a");
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
    }

    #[test]
    fn bad_values_are_refused() {
        let now = SystemTime::now();
        assert!(request_of(&["add", "S"], now).is_err());
        assert!(request_of(&["add", "S", "C", "--pull", "--target", "x"], now).is_err());
        assert!(request_of(&["add", "S", "C", "--deliver", "sometime"], now).is_err());
        assert!(request_of(&["add", "S", "C", "--ack", "maybe"], now).is_err());
        let error = request_of(&["add", "S", "C", "--wait", "ten"], now).unwrap_err();
        assert!(
            error.to_string().starts_with("--wait: invalid duration"),
            "{error}"
        );
    }

    #[test]
    fn rfc3339_as_go_writes_it() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let time = UNIX_EPOCH + Duration::new(1_796_029_674, 907_003_966);
        assert_eq!(rfc3339(time), "2026-11-30T09:07:54.907003966Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000000000Z");
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
