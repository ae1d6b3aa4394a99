//! `tern server check …`: health checks for monitoring systems, Nagios
//! style. Each prints one status line (`OK: …`, `WARNING: …`,
//! `CRITICAL: …`, `UNKNOWN: …`, with `| name=value;warn;crit` performance
//! data) or, with `--json`, one JSON object; the exit status is 0, 1, 2
//! or 3 to match. The verdicts are pure functions of the API's or the
//! monitoring endpoints' answers (unit-tested below); the commands only
//! fetch them.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::{Args, Subcommand, ValueEnum};
use futures::StreamExt;
use serde_json::{json, Value};

use crate::connection::ConnectionArgs;
use crate::error::CliError;
use crate::monitor;
use crate::output::line;
use crate::units;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Ok = 0,
    Warning = 1,
    Critical = 2,
    Unknown = 3,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warning => "WARNING",
            Status::Critical => "CRITICAL",
            Status::Unknown => "UNKNOWN",
        }
    }

    /// Higher is worse: `value` at or over `critical` is critical, at or
    /// over `warning` a warning.
    pub fn of_level(value: f64, warning: Option<f64>, critical: Option<f64>) -> Status {
        if critical.is_some_and(|limit| value >= limit) {
            Status::Critical
        } else if warning.is_some_and(|limit| value >= limit) {
            Status::Warning
        } else {
            Status::Ok
        }
    }
}

/// One metric of the performance data: `name=value;warn;crit`.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub value: f64,
    pub unit: &'static str,
    pub warning: Option<f64>,
    pub critical: Option<f64>,
}

impl Metric {
    fn plain(name: &'static str, value: f64) -> Metric {
        Metric {
            name,
            value,
            unit: "",
            warning: None,
            critical: None,
        }
    }
}

/// A check's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: Status,
    pub message: String,
    pub metrics: Vec<Metric>,
}

impl Outcome {
    fn new(status: Status, message: impl Into<String>) -> Outcome {
        Outcome {
            status,
            message: message.into(),
            metrics: Vec::new(),
        }
    }

    /// The Nagios line.
    pub fn line(&self) -> String {
        let mut text = format!("{}: {}", self.status.label(), self.message);
        if !self.metrics.is_empty() {
            text.push_str(" |");
            for metric in &self.metrics {
                let limit = |value: Option<f64>| value.map(number).unwrap_or_default();
                text.push_str(&format!(
                    " {}={}{};{};{}",
                    metric.name,
                    number(metric.value),
                    metric.unit,
                    limit(metric.warning),
                    limit(metric.critical)
                ));
            }
        }
        text
    }

    pub fn json(&self, check: &str) -> Value {
        let metrics: serde_json::Map<String, Value> = self
            .metrics
            .iter()
            .map(|metric| (metric.name.to_string(), json!(metric.value)))
            .collect();
        json!({
            "check": check,
            "status": self.status.label(),
            "exit_code": self.status as u8,
            "message": self.message,
            "metrics": metrics,
        })
    }
}

impl Outcome {
    /// Raises the status to `status` (when worse) and adds `finding` to
    /// the message.
    pub fn flag(&mut self, status: Status, finding: impl Into<String>) {
        self.status = self.status.max(status);
        self.message.push_str("; ");
        self.message.push_str(&finding.into());
    }

    /// Prometheus text exposition: a gauge per metric,
    /// `<namespace>_<check>_<metric>{item="…"}`, and
    /// `<namespace>_<check>_status_code{item="…",status="…"}` (the Nagios
    /// code), as the nats CLI writes them; sorted by name.
    pub fn prometheus(&self, namespace: &str, check: &str, item: &str) -> String {
        let item = item.replace('"', ".").replace('\\', "\\\\");
        let prefix = [namespace, check]
            .iter()
            .filter(|part| !part.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("_");
        let mut families: Vec<(String, String, String)> = self
            .metrics
            .iter()
            .map(|metric| {
                (
                    format!("{prefix}_{}", metric.name),
                    format!("Data about the tern check {check}"),
                    format!("{{item=\"{item}\"}} {}", number(metric.value)),
                )
            })
            .collect();
        families.push((
            format!("{prefix}_status_code"),
            format!("Nagios compatible status code for {check}"),
            format!(
                "{{item=\"{item}\",status=\"{}\"}} {}",
                self.status.label(),
                self.status as u8
            ),
        ));
        families.sort();
        let mut text = String::new();
        for (name, help, sample) in families {
            text.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{sample}\n"
            ));
        }
        text
    }

    /// For people: the check and its status, the findings, the metrics.
    pub fn text(&self, check: &str, item: &str) -> String {
        let mut text = format!("{check} {item}: {}\n\n", self.status.label());
        for finding in self.message.split("; ") {
            text.push_str(&format!("  {finding}\n"));
        }
        if !self.metrics.is_empty() {
            text.push('\n');
            for metric in &self.metrics {
                let limit = |value: Option<f64>| value.map(number).unwrap_or_else(|| "-".into());
                text.push_str(&format!(
                    "  {}: {}{} (warning {}, critical {})\n",
                    metric.name,
                    number(metric.value),
                    metric.unit,
                    limit(metric.warning),
                    limit(metric.critical)
                ));
            }
        }
        text
    }
}

fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        let text = format!("{value:.6}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// How a verdict is printed (`--format`, as the nats CLI's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One status line with performance data
    Nagios,
    /// One JSON object
    Json,
    /// Prometheus gauges: `<namespace>_<check>_<metric>{item}` and
    /// `<namespace>_<check>_status_code{item,status}`
    Prometheus,
    /// A few lines for people
    Text,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(subcommand)]
    pub check: Check,
    /// Print one JSON object instead of the status line (--format json)
    #[arg(long, global = true)]
    pub json: bool,
    /// How to print the verdict
    #[arg(long, global = true, value_enum, default_value = "nagios")]
    pub format: Format,
    /// The Prometheus namespace (--format prometheus)
    #[arg(
        long,
        global = true,
        value_name = "NAMESPACE",
        default_value = "nats_server_check"
    )]
    pub namespace: String,
    /// Write the verdict to this file (replaced whole) instead of stdout
    #[arg(long, global = true, value_name = "FILE")]
    pub outfile: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Check {
    /// Connect, and time the connection, a PING and a round trip through
    /// the server
    #[command(alias = "conn")]
    Connection(ConnectionCheck),
    /// A stream's bytes against its max_bytes, its replicas, messages,
    /// subjects, sources and mirror
    Stream(StreamCheck),
    /// A consumer's lag, pending acks, waiting pulls, redeliveries and
    /// last activity
    Consumer(ConsumerCheck),
    /// JetStream answers ($JS.API.INFO); usage against account limits;
    /// every stream's replicas
    #[command(alias = "js")]
    Jetstream(JetStreamCheck),
    /// Every node present and every replica current (monitoring /jsz)
    #[command(alias = "meta", alias = "raft")]
    Cluster(ClusterCheck),
    /// Failed authentication attempts (monitoring /varz)
    Auth(AuthCheck),
}

#[derive(Debug, Args)]
pub struct ConnectionCheck {
    /// Connection time that warns (0: none)
    #[arg(long, value_name = "DURATION", default_value = "500ms")]
    pub connect_warn: String,
    /// Connection time that is critical (0: none)
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub connect_critical: String,
    /// PING round trip time that warns (0: none)
    #[arg(long, value_name = "DURATION", default_value = "500ms")]
    pub rtt_warn: String,
    /// PING round trip time that is critical (0: none)
    #[arg(
        long,
        alias = "rtt-critical",
        value_name = "DURATION",
        default_value = "1s"
    )]
    pub rtt_crit: String,
    /// Time of a message's trip to our own inbox and back that warns (0:
    /// none)
    #[arg(long, value_name = "DURATION", default_value = "500ms")]
    pub req_warn: String,
    /// Time of that trip that is critical (0: none)
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub req_critical: String,
}

#[derive(Debug, Args)]
pub struct StreamCheck {
    /// Stream name (--stream, as the nats CLI)
    #[arg(long, alias = "stream", value_name = "STREAM")]
    pub name: String,
    /// Share of max_bytes used that warns
    #[arg(long, value_name = "PERCENT", default_value = "80%")]
    pub bytes_warn: String,
    /// Share of max_bytes used that is critical
    #[arg(
        long,
        alias = "bytes-critical",
        value_name = "PERCENT",
        default_value = "95%"
    )]
    pub bytes_crit: String,
    /// Lag of any source or the mirror that is critical
    #[arg(long, value_name = "MSGS")]
    pub lag_critical: Option<u64>,
    /// Time since a source or the mirror was last seen that is critical
    #[arg(long, value_name = "DURATION")]
    pub seen_critical: Option<String>,
    /// Sources expected at least
    #[arg(long, value_name = "SOURCES")]
    pub min_sources: Option<i64>,
    /// Sources expected at most
    #[arg(long, value_name = "SOURCES")]
    pub max_sources: Option<i64>,
    /// Replicas (leader included) expected
    #[arg(long, value_name = "SERVERS")]
    pub peer_expect: Option<i64>,
    /// A replica's lag (operations) that is critical
    #[arg(long, value_name = "OPS")]
    pub peer_lag_critical: Option<u64>,
    /// Time since a replica was last seen that is critical
    #[arg(long, value_name = "DURATION")]
    pub peer_seen_critical: Option<String>,
    /// Warn with this many messages or fewer
    #[arg(long, value_name = "MSGS")]
    pub msgs_warn: Option<u64>,
    /// Critical with this many messages or fewer
    #[arg(long, value_name = "MSGS")]
    pub msgs_critical: Option<u64>,
    /// Subjects that warn (below --subjects-critical: at or above it;
    /// above it: at or below it)
    #[arg(long, value_name = "SUBJECTS")]
    pub subjects_warn: Option<i64>,
    /// Subjects that are critical
    #[arg(long, value_name = "SUBJECTS")]
    pub subjects_critical: Option<i64>,
}

#[derive(Debug, Args)]
pub struct ConsumerCheck {
    /// Stream name
    #[arg(long, value_name = "STREAM")]
    pub stream: String,
    /// Consumer name (--consumer, as the nats CLI)
    #[arg(long, alias = "consumer", value_name = "CONSUMER")]
    pub name: String,
    /// Messages not yet delivered (num_pending) that warn
    #[arg(long, value_name = "MESSAGES")]
    pub lag_warn: Option<u64>,
    /// Messages not yet delivered (num_pending) that are critical
    #[arg(long, alias = "lag-critical", value_name = "MESSAGES")]
    pub lag_crit: Option<u64>,
    /// Messages awaiting an ack that are critical (-1: none)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub outstanding_ack_critical: Option<i64>,
    /// Waiting pull requests that are critical (-1: none)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub waiting_critical: Option<i64>,
    /// Messages not yet delivered (num_pending) that are critical (-1:
    /// none)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub unprocessed_critical: Option<i64>,
    /// Time since the last delivery that is critical (0s: none)
    #[arg(long, value_name = "DURATION")]
    pub last_delivery_critical: Option<String>,
    /// Time since the last ack that is critical (0s: none)
    #[arg(long, value_name = "DURATION")]
    pub last_ack_critical: Option<String>,
    /// Redelivered messages that are critical (-1: none)
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub redelivery_critical: Option<i64>,
    /// A pinned-client consumer with every priority group pinned
    #[arg(long)]
    pub pinned: bool,
}

#[derive(Debug, Args)]
pub struct JetStreamCheck {
    /// Share of the account's storage limit used that warns (when limited)
    #[arg(long, value_name = "PERCENT", default_value = "75%")]
    pub store_warn: String,
    /// Share of the account's storage limit used that is critical
    #[arg(
        long,
        alias = "store-critical",
        value_name = "PERCENT",
        default_value = "90%"
    )]
    pub store_crit: String,
    /// Share of the account's memory limit used that warns (when limited)
    #[arg(long, value_name = "PERCENT", default_value = "75%")]
    pub mem_warn: String,
    /// Share of the account's memory limit used that is critical
    #[arg(long, value_name = "PERCENT", default_value = "90%")]
    pub mem_critical: String,
    /// Share of the account's stream limit used that warns (-1: none)
    #[arg(
        long,
        value_name = "PERCENT",
        allow_hyphen_values = true,
        default_value = "-1"
    )]
    pub streams_warn: String,
    /// Share of the account's stream limit used that is critical (-1: none)
    #[arg(
        long,
        value_name = "PERCENT",
        allow_hyphen_values = true,
        default_value = "-1"
    )]
    pub streams_critical: String,
    /// Share of the account's consumer limit used that warns (-1: none)
    #[arg(
        long,
        value_name = "PERCENT",
        allow_hyphen_values = true,
        default_value = "-1"
    )]
    pub consumers_warn: String,
    /// Share of the account's consumer limit used that is critical (-1:
    /// none)
    #[arg(
        long,
        value_name = "PERCENT",
        allow_hyphen_values = true,
        default_value = "-1"
    )]
    pub consumers_critical: String,
    /// Check every stream's replicas (the default; --no-replicas: skip)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_replicas")]
    pub replicas: Option<bool>,
    #[arg(long, hide = true, overrides_with = "replicas")]
    pub no_replicas: bool,
    /// Time since a replica was last seen that is critical
    #[arg(long, value_name = "DURATION", default_value = "5s")]
    pub replica_seen_critical: String,
    /// A replica's lag (operations) that is critical
    #[arg(long, value_name = "OPS", default_value_t = 200)]
    pub replica_lag_critical: u64,
}

#[derive(Debug, Args)]
pub struct ClusterCheck {
    /// The nodes' monitoring URLs, comma separated, e.g.
    /// http://10.0.0.1:8222,http://10.0.0.2:8222 (each group's replicas
    /// are judged from its leader's view, so give them all)
    #[arg(long, value_name = "URL[,URL…]")]
    pub monitor: String,
    /// Nodes the cluster must have
    #[arg(long, value_name = "NODES")]
    pub expect: Option<usize>,
    /// A meta group peer's lag (operations) that is critical
    #[arg(long, value_name = "OPS")]
    pub lag_critical: Option<u64>,
    /// Time since a meta group peer was last seen that is critical
    #[arg(long, value_name = "DURATION")]
    pub seen_critical: Option<String>,
}

#[derive(Debug, Args)]
pub struct AuthCheck {
    /// The server's monitoring URL, e.g. http://127.0.0.1:8222
    #[arg(long, value_name = "URL")]
    pub monitor: String,
    /// Failed attempts (since the server started) that warn
    #[arg(long, value_name = "COUNT", default_value_t = 1)]
    pub warn: u64,
    /// Failed attempts (since the server started) that are critical
    #[arg(long, alias = "critical", value_name = "COUNT", default_value_t = 100)]
    pub crit: u64,
}

/// Runs one check and prints its verdict (or writes it to `--outfile`);
/// the exit status is the verdict's.
pub async fn execute(connection: &ConnectionArgs, args: CheckArgs) -> ExitCode {
    let (name, item) = match &args.check {
        Check::Connection(_) => ("connection", connection.server().to_string()),
        Check::Stream(check) => ("stream", check.name.clone()),
        Check::Consumer(check) => ("consumer", format!("{}_{}", check.stream, check.name)),
        Check::Jetstream(_) => ("jetstream", "JetStream".to_string()),
        Check::Cluster(_) => ("cluster", "cluster".to_string()),
        Check::Auth(check) => ("auth", check.monitor.clone()),
    };
    let outcome = run(connection, args.check)
        .await
        .unwrap_or_else(|error| error_outcome(&error));
    let format = if args.json { Format::Json } else { args.format };
    let text = match format {
        Format::Nagios => outcome.line(),
        Format::Json => outcome.json(name).to_string(),
        Format::Prometheus => outcome.prometheus(&args.namespace, name, &item),
        Format::Text => outcome.text(name, &item),
    };
    match &args.outfile {
        None => line(text.trim_end()),
        Some(path) => {
            if let Err(error) = write_replacing(path, &text) {
                eprintln!("tern: {error}");
                return ExitCode::from(Status::Unknown as u8);
            }
        }
    }
    ExitCode::from(outcome.status as u8)
}

/// Writes `text` to a temporary file beside `path`, then renames it over
/// `path`: a reader (node_exporter's textfile collector) never sees half.
fn write_replacing(path: &std::path::Path, text: &str) -> Result<(), CliError> {
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "check".into());
    let temporary = path.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
    let action = format!("--outfile {}", path.display());
    std::fs::write(&temporary, format!("{}\n", text.trim_end()))
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|error| {
            let _ = std::fs::remove_file(&temporary);
            CliError::io(action)(error)
        })
}

/// What the check could not do: the server unreachable or a thing missing
/// is critical; a bad flag or a puzzling answer is unknown.
fn error_outcome(error: &CliError) -> Outcome {
    let status = match error {
        CliError::Unit { .. } | CliError::Usage(_) | CliError::BadAnswer { .. } => Status::Unknown,
        _ => Status::Critical,
    };
    Outcome::new(status, error.to_string())
}

fn percent(flag: &'static str, text: &str) -> Result<f64, CliError> {
    units::parse_percent(text).map_err(CliError::unit(flag))
}

fn duration(flag: &'static str, text: &str) -> Result<Duration, CliError> {
    units::parse_duration(text).map_err(CliError::unit(flag))
}

fn optional_duration(
    flag: &'static str,
    text: &Option<String>,
) -> Result<Option<Duration>, CliError> {
    text.as_deref().map(|text| duration(flag, text)).transpose()
}

/// A percentage threshold where a negative number means none.
fn percent_or_none(flag: &'static str, text: &str) -> Result<Option<f64>, CliError> {
    if text.trim().starts_with('-') {
        return Ok(None);
    }
    percent(flag, text).map(Some)
}

async fn run(connection: &ConnectionArgs, check: Check) -> Result<Outcome, CliError> {
    let timeout = connection.timeout()?;
    match check {
        Check::Connection(args) => {
            let thresholds = ConnectionThresholds {
                connect: (
                    duration("--connect-warn", &args.connect_warn)?,
                    duration("--connect-critical", &args.connect_critical)?,
                ),
                rtt: (
                    duration("--rtt-warn", &args.rtt_warn)?,
                    duration("--rtt-crit", &args.rtt_crit)?,
                ),
                request: (
                    duration("--req-warn", &args.req_warn)?,
                    duration("--req-critical", &args.req_critical)?,
                ),
            };
            let started = Instant::now();
            let client = connection.connect().await?;
            let connect = started.elapsed();
            let started = Instant::now();
            client.flush().await.map_err(CliError::client("PING"))?;
            let rtt = started.elapsed();
            let request = round_trip(&client, timeout).await?;
            Ok(connection_outcome(
                connection.server(),
                ConnectionTimes {
                    connect,
                    rtt,
                    request,
                },
                &thresholds,
            ))
        }
        Check::Stream(args) => {
            let warning = percent("--bytes-warn", &args.bytes_warn)?;
            let critical = percent("--bytes-crit", &args.bytes_crit)?;
            let thresholds = StreamThresholds::of(&args)?;
            let api = connection.api().await?;
            let info = crate::stream::info(&api, &args.name).await?;
            let thresholds = thresholds.with_metadata(&info["config"]["metadata"])?;
            let mut outcome = stream_outcome(&args.name, &info, warning, critical);
            stream_thresholds_outcome(&info, &thresholds, &mut outcome);
            Ok(outcome)
        }
        Check::Consumer(args) => {
            let thresholds = ConsumerThresholds::of(&args)?;
            let api = connection.api().await?;
            let info = crate::consumer::info(&api, &args.stream, &args.name).await?;
            let mut outcome = consumer_outcome(&info, args.lag_warn, args.lag_crit);
            consumer_thresholds_outcome(&info, &thresholds, SystemTime::now(), &mut outcome);
            Ok(outcome)
        }
        Check::Jetstream(args) => {
            let thresholds = JetStreamThresholds::of(&args)?;
            let api = connection.api().await?;
            let info = match api
                .request("JetStream account info", "INFO", &Value::Null)
                .await
            {
                Ok(info) => info,
                Err(CliError::NoResponders { .. }) => {
                    return Ok(Outcome::new(
                        Status::Critical,
                        "JetStream is not enabled (no responder for $JS.API.INFO)",
                    ))
                }
                Err(error) => return Err(error),
            };
            let mut outcome = jetstream_outcome(&info, &thresholds);
            if thresholds.replicas {
                let streams = api
                    .paged(
                        "JetStream streams",
                        "STREAM.LIST",
                        serde_json::Map::new(),
                        "streams",
                        crate::stream::STREAMS_LISTED_MAX,
                    )
                    .await?;
                replicas_outcome(&streams, &thresholds, &mut outcome);
            }
            Ok(outcome)
        }
        Check::Cluster(args) => {
            let seen_critical = optional_duration("--seen-critical", &args.seen_critical)?;
            let mut views = Vec::new();
            let mut unreachable = Vec::new();
            let mut first_error = None;
            for url in args.monitor.split(',').map(str::trim) {
                match node_view(url, timeout).await {
                    Ok(view) => views.push(view),
                    Err(error) => {
                        unreachable.push(format!("monitor {url} unreachable"));
                        first_error.get_or_insert(error);
                    }
                }
            }
            if views.is_empty() {
                return Err(first_error.expect("at least one URL"));
            }
            let merged = leader_views(&views);
            let mut outcome = cluster_outcome(&merged, args.expect);
            meta_peers_outcome(&merged, args.lag_critical, seen_critical, &mut outcome);
            if !unreachable.is_empty() {
                outcome.status = Status::Critical;
                outcome.message = format!("{}; {}", outcome.message, unreachable.join("; "));
            }
            Ok(outcome)
        }
        Check::Auth(args) => {
            let varz = monitor::get_json(&args.monitor, "/varz", timeout).await?;
            Ok(auth_outcome(&varz, args.warn, args.crit))
        }
    }
}

/// A message to an inbox of our own and back: a full trip through the
/// server.
async fn round_trip(client: &async_nats::Client, timeout: Duration) -> Result<Duration, CliError> {
    let action = "round trip";
    let inbox = client.new_inbox();
    let mut subscription = client
        .subscribe(inbox.clone())
        .await
        .map_err(CliError::client(action))?;
    let started = Instant::now();
    client
        .publish(inbox, bytes::Bytes::from_static(b"ping"))
        .await
        .map_err(CliError::client(action))?;
    client.flush().await.map_err(CliError::client(action))?;
    match tokio::time::timeout(timeout, subscription.next()).await {
        Ok(Some(_)) => Ok(started.elapsed()),
        Ok(None) => Err(CliError::Failed {
            action: action.into(),
            reason: "the connection closed".into(),
        }),
        Err(_) => Err(CliError::Timeout {
            action: action.into(),
            timeout,
        }),
    }
}

/// What `server check connection` measured.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionTimes {
    pub connect: Duration,
    /// A PING's round trip (the client's flush).
    pub rtt: Duration,
    /// A message to our own inbox and back.
    pub request: Duration,
}

/// (warning, critical) of each time; zero is no threshold, as in the nats
/// CLI.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionThresholds {
    pub connect: (Duration, Duration),
    pub rtt: (Duration, Duration),
    pub request: (Duration, Duration),
}

/// `value` against (warning, critical) durations; a zero one is none.
fn time_level(value: Duration, (warning, critical): (Duration, Duration)) -> Status {
    if !critical.is_zero() && value >= critical {
        Status::Critical
    } else if !warning.is_zero() && value >= warning {
        Status::Warning
    } else {
        Status::Ok
    }
}

pub fn connection_outcome(
    server: &str,
    times: ConnectionTimes,
    thresholds: &ConnectionThresholds,
) -> Outcome {
    let seconds = |duration: Duration| duration.as_secs_f64();
    let limit = |duration: Duration| Some(seconds(duration)).filter(|value| *value > 0.0);
    let status = [
        time_level(times.connect, thresholds.connect),
        time_level(times.rtt, thresholds.rtt),
        time_level(times.request, thresholds.request),
    ]
    .into_iter()
    .max()
    .unwrap_or(Status::Ok);
    let metric =
        |name: &'static str, value: Duration, (warning, critical): (Duration, Duration)| Metric {
            name,
            value: seconds(value),
            unit: "s",
            warning: limit(warning),
            critical: limit(critical),
        };
    Outcome {
        status,
        message: format!(
            "connected to {server} in {:.1}ms, rtt {:.1}ms, round trip {:.1}ms",
            seconds(times.connect) * 1e3,
            seconds(times.rtt) * 1e3,
            seconds(times.request) * 1e3
        ),
        metrics: vec![
            metric("connect_time", times.connect, thresholds.connect),
            metric("rtt", times.rtt, thresholds.rtt),
            metric("request_time", times.request, thresholds.request),
        ],
    }
}

/// One node's `/varz` name and its `/jsz?accounts=true&streams=true`.
async fn node_view(url: &str, timeout: Duration) -> Result<(String, Value), CliError> {
    let varz = monitor::get_json(url, "/varz", timeout).await?;
    let jsz = monitor::get_json(url, "/jsz?accounts=true&streams=true", timeout).await?;
    let name = varz["server_name"].as_str().unwrap_or_default().to_string();
    Ok((name, jsz))
}

/// One `/jsz` made of the nodes' views (name, `/jsz`): the meta group and
/// each stream as its leader reports it. Only a Raft leader knows whether
/// its followers are current (a follower's `/jsz` shows its peers as not
/// current, on nats-server as on tern), so a group whose leader is not
/// among the views keeps the first view's block, marked
/// `judged_elsewhere`: its replicas are counted, not judged.
pub fn leader_views(views: &[(String, Value)]) -> Value {
    let (_, first) = &views[0];
    if first["disabled"].as_bool() == Some(true) {
        return first.clone();
    }
    let from_leader = |group: &Value, leader_of: &dyn Fn(&Value) -> Option<Value>| {
        let leader = group["leader"].as_str().unwrap_or_default();
        let led = views
            .iter()
            .find(|(name, _)| !leader.is_empty() && name == leader)
            .and_then(|(_, jsz)| leader_of(jsz));
        led.unwrap_or_else(|| {
            let mut group = group.clone();
            if group["replicas"].as_array().is_some_and(|r| !r.is_empty()) {
                group["judged_elsewhere"] = json!(true);
            }
            group
        })
    };
    let mut merged = json!({});
    if first["meta_cluster"].is_object() {
        merged["meta_cluster"] = from_leader(&first["meta_cluster"], &|jsz| {
            Some(jsz["meta_cluster"].clone()).filter(Value::is_object)
        });
    }
    let mut details = Vec::new();
    for detail in stream_details(first) {
        let name = &detail["name"];
        let cluster = from_leader(&detail["cluster"], &|jsz| {
            stream_details(jsz)
                .into_iter()
                .find(|other| &other["name"] == name)
                .map(|other| other["cluster"].clone())
        });
        let mut detail = detail.clone();
        if !detail["cluster"].is_null() {
            detail["cluster"] = cluster;
        }
        details.push(detail);
    }
    merged["stream_detail"] = Value::Array(details);
    merged
}

/// Replicas not current or offline in a cluster block, named; none when
/// the block is not its leader's view (see [`leader_views`]).
fn unhealthy_replicas(cluster: &Value) -> Vec<String> {
    if cluster["judged_elsewhere"].as_bool() == Some(true) {
        return Vec::new();
    }
    cluster["replicas"]
        .as_array()
        .map(|replicas| {
            replicas
                .iter()
                .filter_map(|replica| {
                    let name = replica["name"].as_str().unwrap_or("?");
                    if replica["offline"].as_bool() == Some(true) {
                        Some(format!("{name} offline"))
                    } else if replica["current"].as_bool() != Some(true) {
                        Some(format!("{name} not current"))
                    } else {
                        None
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn stream_outcome(stream: &str, info: &Value, warning_pct: f64, critical_pct: f64) -> Outcome {
    let bytes = info["state"]["bytes"].as_u64().unwrap_or(0);
    let messages = info["state"]["messages"].as_u64().unwrap_or(0);
    let max_bytes = info["config"]["max_bytes"].as_i64().unwrap_or(-1);
    let mut metrics = vec![Metric::plain("messages", messages as f64)];
    let (mut status, mut message) = if max_bytes > 0 {
        let used_pct = bytes as f64 * 100.0 / max_bytes as f64;
        metrics.push(Metric {
            name: "bytes",
            value: bytes as f64,
            unit: "B",
            warning: Some(max_bytes as f64 * warning_pct / 100.0),
            critical: Some(max_bytes as f64 * critical_pct / 100.0),
        });
        metrics.push(Metric {
            name: "bytes_used",
            value: (used_pct * 10.0).round() / 10.0,
            unit: "%",
            warning: Some(warning_pct),
            critical: Some(critical_pct),
        });
        (
            Status::of_level(used_pct, Some(warning_pct), Some(critical_pct)),
            format!(
                "stream {stream} uses {} of max_bytes {} ({used_pct:.1}%), {messages} messages",
                units::format_bytes(bytes),
                units::format_bytes(max_bytes as u64)
            ),
        )
    } else {
        metrics.push(Metric {
            unit: "B",
            ..Metric::plain("bytes", bytes as f64)
        });
        (
            Status::Ok,
            format!(
                "stream {stream} holds {} in {messages} messages (no max_bytes limit)",
                units::format_bytes(bytes)
            ),
        )
    };
    let cluster = &info["cluster"];
    let unhealthy = unhealthy_replicas(cluster);
    if !unhealthy.is_empty() {
        status = Status::Critical;
        message.push_str(&format!("; replicas: {}", unhealthy.join(", ")));
    }
    if cluster.is_object() && cluster["replicas"].is_array() && cluster["leader"].as_str().is_none()
    {
        status = Status::Critical;
        message.push_str("; no leader");
    }
    Outcome {
        status,
        message,
        metrics,
    }
}

pub fn consumer_outcome(info: &Value, warning: Option<u64>, critical: Option<u64>) -> Outcome {
    let stream = info["stream_name"].as_str().unwrap_or("?");
    let name = info["name"].as_str().unwrap_or("?");
    let pending = info["num_pending"].as_u64().unwrap_or(0);
    let ack_pending = info["num_ack_pending"].as_u64().unwrap_or(0);
    let redelivered = info["num_redelivered"].as_u64().unwrap_or(0);
    let as_f64 = |limit: Option<u64>| limit.map(|value| value as f64);
    let status = Status::of_level(pending as f64, as_f64(warning), as_f64(critical));
    Outcome {
        status,
        message: format!(
            "consumer {stream} > {name}: {pending} messages not yet delivered, {ack_pending} awaiting ack, {redelivered} redelivered"
        ),
        metrics: vec![
            Metric {
                name: "lag",
                value: pending as f64,
                unit: "",
                warning: as_f64(warning),
                critical: as_f64(critical),
            },
            Metric::plain("ack_pending", ack_pending as f64),
            Metric::plain("redelivered", redelivered as f64),
        ],
    }
}

/// The account's JetStream usage against its limits, as the nats CLI
/// judges it: each of memory, storage, streams and consumers in whole
/// percent of its limit (when limited), over critical is critical, over
/// warning a warning; warning at or above critical is refused.
pub fn jetstream_outcome(info: &Value, thresholds: &JetStreamThresholds) -> Outcome {
    let count = |key: &str| info[key].as_u64().unwrap_or(0);
    let (storage, memory, streams, consumers) = (
        count("storage"),
        count("memory"),
        count("streams"),
        count("consumers"),
    );
    let mut outcome = Outcome::new(
        Status::Ok,
        format!(
            "JetStream answers: {streams} streams, {consumers} consumers, {} file, {} memory",
            units::format_bytes(storage),
            units::format_bytes(memory)
        ),
    );
    let limits = &info["limits"];
    for (name, unit, current, limit, (warning, critical)) in [
        ("memory", "B", memory, "max_memory", thresholds.memory),
        ("storage", "B", storage, "max_storage", thresholds.storage),
        ("streams", "", streams, "max_streams", thresholds.streams),
        (
            "consumers",
            "",
            consumers,
            "max_consumers",
            thresholds.consumers,
        ),
    ] {
        let max = limits[limit].as_i64().unwrap_or(-1);
        let used_pct = if max > 0 {
            (current as f64 * 100.0 / max as f64).floor()
        } else {
            0.0
        };
        outcome.metrics.push(Metric {
            unit,
            ..Metric::plain(name, current as f64)
        });
        outcome.metrics.push(Metric {
            name: match name {
                "memory" => "memory_pct",
                "storage" => "storage_pct",
                "streams" => "streams_pct",
                _ => "consumers_pct",
            },
            value: used_pct,
            unit: "%",
            warning,
            critical,
        });
        match (warning, critical) {
            (Some(warning), Some(critical)) if warning >= critical => {
                outcome.flag(Status::Critical, format!("{name}: invalid thresholds"));
            }
            _ if used_pct > 100.0 => {
                outcome.flag(
                    Status::Critical,
                    format!("{name}: exceeds the account's limit"),
                );
            }
            (Some(warning), Some(critical)) if max > 0 => {
                if used_pct > critical {
                    outcome.flag(
                        Status::Critical,
                        format!("{name} {used_pct}% of the account's {max}"),
                    );
                } else if used_pct > warning {
                    outcome.flag(
                        Status::Warning,
                        format!("{name} {used_pct}% of the account's {max}"),
                    );
                }
            }
            _ => {}
        }
    }
    outcome
}

/// `server check jetstream`'s thresholds (percent; `None`: no threshold).
#[derive(Debug, Clone, PartialEq)]
pub struct JetStreamThresholds {
    pub memory: (Option<f64>, Option<f64>),
    pub storage: (Option<f64>, Option<f64>),
    pub streams: (Option<f64>, Option<f64>),
    pub consumers: (Option<f64>, Option<f64>),
    /// Judge every stream's replicas (`--replicas`, on by default).
    pub replicas: bool,
    pub replica_seen_critical: Duration,
    pub replica_lag_critical: u64,
}

impl JetStreamThresholds {
    pub fn of(args: &JetStreamCheck) -> Result<JetStreamThresholds, CliError> {
        Ok(JetStreamThresholds {
            memory: (
                percent_or_none("--mem-warn", &args.mem_warn)?,
                percent_or_none("--mem-critical", &args.mem_critical)?,
            ),
            storage: (
                percent_or_none("--store-warn", &args.store_warn)?,
                percent_or_none("--store-crit", &args.store_crit)?,
            ),
            streams: (
                percent_or_none("--streams-warn", &args.streams_warn)?,
                percent_or_none("--streams-critical", &args.streams_critical)?,
            ),
            consumers: (
                percent_or_none("--consumers-warn", &args.consumers_warn)?,
                percent_or_none("--consumers-critical", &args.consumers_critical)?,
            ),
            replicas: crate::stream::switch(args.replicas, args.no_replicas).unwrap_or(true),
            replica_seen_critical: duration(
                "--replica-seen-critical",
                &args.replica_seen_critical,
            )?,
            replica_lag_critical: args.replica_lag_critical,
        })
    }
}

/// Nanoseconds in a JSON field (`active`) as a duration.
fn nanos_field(value: &Value) -> Duration {
    Duration::from_nanos(value.as_u64().unwrap_or(0))
}

/// Every stream's replicas, as the nats CLI's `server check jetstream`
/// judges them: a replicated stream without a leader, with fewer
/// replicas than configured, or with a replica offline, unseen for longer
/// than `--replica-seen-critical` or behind by more than
/// `--replica-lag-critical` is unhealthy; any unhealthy is critical.
pub fn replicas_outcome(
    streams: &[Value],
    thresholds: &JetStreamThresholds,
    outcome: &mut Outcome,
) {
    let (mut healthy, mut no_leader, mut missing, mut lagged, mut unseen, mut failed) =
        (0, 0, 0, 0, 0, 0);
    for info in streams {
        let configured = info["config"]["num_replicas"].as_u64().unwrap_or(1);
        if configured <= 1 {
            healthy += 1;
            continue;
        }
        let cluster = &info["cluster"];
        if !cluster.is_object() {
            failed += 1;
            continue;
        }
        if cluster["leader"].as_str().is_none_or(str::is_empty) {
            no_leader += 1;
            continue;
        }
        let replicas = cluster["replicas"].as_array().cloned().unwrap_or_default();
        if replicas.len() as u64 != configured - 1 {
            missing += 1;
            continue;
        }
        let mut ok = true;
        for replica in &replicas {
            if replica["offline"].as_bool() == Some(true) {
                failed += 1;
                ok = false;
            } else if nanos_field(&replica["active"]) > thresholds.replica_seen_critical {
                unseen += 1;
                ok = false;
            } else if replica["lag"].as_u64().unwrap_or(0) > thresholds.replica_lag_critical {
                lagged += 1;
                ok = false;
            }
        }
        if ok {
            healthy += 1;
        }
    }
    for (name, value) in [
        ("replicas_ok", healthy),
        ("replicas_no_leader", no_leader),
        ("replicas_missing_replicas", missing),
        ("replicas_lagged", lagged),
        ("replicas_not_seen", unseen),
        ("replicas_fail", failed),
    ] {
        outcome.metrics.push(Metric::plain(name, value as f64));
    }
    let unhealthy = no_leader + missing + lagged + unseen + failed;
    if unhealthy > 0 {
        outcome.flag(Status::Critical, format!("{unhealthy} unhealthy streams"));
    }
}

/// `server check stream`'s thresholds beyond bytes, as the nats CLI's
/// (jsm.go's `CheckStreamHealthOptions`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamThresholds {
    pub lag_critical: Option<u64>,
    pub seen_critical: Option<Duration>,
    pub min_sources: Option<i64>,
    pub max_sources: Option<i64>,
    pub peer_expect: Option<i64>,
    pub peer_lag_critical: Option<u64>,
    pub peer_seen_critical: Option<Duration>,
    pub msgs_warn: Option<u64>,
    pub msgs_critical: Option<u64>,
    pub subjects_warn: Option<i64>,
    pub subjects_critical: Option<i64>,
}

impl StreamThresholds {
    pub fn of(args: &StreamCheck) -> Result<StreamThresholds, CliError> {
        Ok(StreamThresholds {
            lag_critical: args.lag_critical,
            seen_critical: optional_duration("--seen-critical", &args.seen_critical)?,
            min_sources: args.min_sources,
            max_sources: args.max_sources,
            peer_expect: args.peer_expect,
            peer_lag_critical: args.peer_lag_critical,
            peer_seen_critical: optional_duration(
                "--peer-seen-critical",
                &args.peer_seen_critical,
            )?,
            msgs_warn: args.msgs_warn,
            msgs_critical: args.msgs_critical,
            subjects_warn: args.subjects_warn,
            subjects_critical: args.subjects_critical,
        })
    }

    /// The stream's own `io.nats.monitor.*` metadata, which wins over the
    /// flags (as in the nats CLI).
    pub fn with_metadata(mut self, metadata: &Value) -> Result<StreamThresholds, CliError> {
        let text = |key: &str| metadata[format!("io.nats.monitor.{key}")].as_str();
        let bad = |key: &str, value: &str| {
            CliError::Usage(format!(
                "stream metadata io.nats.monitor.{key}={value}: not a number or duration"
            ))
        };
        let number = |key: &str| -> Result<Option<i64>, CliError> {
            text(key)
                .map(|value| value.trim().parse().map_err(|_| bad(key, value)))
                .transpose()
        };
        let time = |key: &str| -> Result<Option<Duration>, CliError> {
            text(key)
                .map(|value| units::parse_duration(value).map_err(|_| bad(key, value)))
                .transpose()
        };
        let positive = |value: Option<i64>| value.map(|value| value.max(0) as u64);
        if let Some(value) = number("lag-critical")? {
            self.lag_critical = positive(Some(value));
        }
        if let Some(value) = time("seen-critical")? {
            self.seen_critical = Some(value);
        }
        if let Some(value) = number("min-sources")? {
            self.min_sources = Some(value);
        }
        if let Some(value) = number("max-sources")? {
            self.max_sources = Some(value);
        }
        if let Some(value) = number("peer-expect")? {
            self.peer_expect = Some(value);
        }
        if let Some(value) = number("peer-lag-critical")? {
            self.peer_lag_critical = positive(Some(value));
        }
        if let Some(value) = time("peer-seen-critical")? {
            self.peer_seen_critical = Some(value);
        }
        if let Some(value) = number("msgs-warn")? {
            self.msgs_warn = positive(Some(value));
        }
        if let Some(value) = number("msgs-critical")? {
            self.msgs_critical = positive(Some(value));
        }
        if let Some(value) = number("subjects-warn")? {
            self.subjects_warn = Some(value);
        }
        if let Some(value) = number("subjects-critical")? {
            self.subjects_critical = Some(value);
        }
        Ok(self)
    }
}

/// The nats CLI's stream checks (jsm.go `CheckStreamInfoHealth`) on top of
/// tern's bytes and replicas verdict: the cluster against
/// `--peer-expect`, the peers' lag and last sight, the message and
/// subject counts, the sources and the mirror.
pub fn stream_thresholds_outcome(
    info: &Value,
    thresholds: &StreamThresholds,
    outcome: &mut Outcome,
) {
    stream_cluster_thresholds(info, thresholds, outcome);
    let state = &info["state"];
    let messages = state["messages"].as_u64().unwrap_or(0);
    let (warning, critical) = (
        thresholds.msgs_warn.filter(|value| *value > 0),
        thresholds.msgs_critical.filter(|value| *value > 0),
    );
    if warning.is_some() || critical.is_some() {
        if critical.is_some_and(|critical| messages <= critical) {
            outcome.flag(Status::Critical, format!("{messages} messages"));
        } else if warning.is_some_and(|warning| messages <= warning) {
            outcome.flag(Status::Warning, format!("{messages} messages"));
        }
    }
    let (warning, critical) = (
        thresholds.subjects_warn.unwrap_or(0),
        thresholds.subjects_critical.unwrap_or(0),
    );
    if warning > 0 || critical > 0 {
        let subjects = state["num_subjects"].as_i64().unwrap_or(0);
        outcome.metrics.push(Metric {
            name: "subjects",
            value: subjects as f64,
            unit: "",
            warning: Some(warning as f64),
            critical: Some(critical as f64),
        });
        // Warning below critical: more is worse; above it: fewer is.
        let rising = warning < critical;
        let status = match rising {
            true if subjects >= critical => Status::Critical,
            true if subjects >= warning => Status::Warning,
            false if subjects <= critical => Status::Critical,
            false if subjects <= warning => Status::Warning,
            _ => Status::Ok,
        };
        if status != Status::Ok {
            outcome.flag(status, format!("{subjects} subjects"));
        }
    }
    stream_sources_thresholds(info, thresholds, outcome);
}

fn stream_cluster_thresholds(info: &Value, thresholds: &StreamThresholds, outcome: &mut Outcome) {
    let cluster = &info["cluster"];
    let configured = info["config"]["num_replicas"].as_i64().unwrap_or(1);
    let clustered = cluster.is_object() && configured > 1;
    if let Some(expected) = thresholds.peer_expect {
        if !clustered {
            outcome.flag(Status::Critical, "stream is not clustered");
            return;
        }
        if cluster["leader"].as_str().is_none_or(str::is_empty) {
            outcome.flag(Status::Critical, "no leader");
            return;
        }
        let peers = 1 + cluster["replicas"].as_array().map_or(0, Vec::len) as i64;
        if peers != expected {
            outcome.flag(
                Status::Critical,
                format!("expected {expected} replicas, got {peers}"),
            );
            return;
        }
    }
    if !clustered {
        return;
    }
    let replicas = cluster["replicas"].as_array().cloned().unwrap_or_default();
    if let Some(limit) = thresholds.peer_lag_critical.filter(|limit| *limit > 0) {
        let lagged = replicas
            .iter()
            .filter(|replica| replica["lag"].as_u64().unwrap_or(0) > limit)
            .count();
        if lagged > 0 {
            outcome.flag(Status::Critical, format!("{lagged} replicas lagged"));
        }
    }
    if let Some(limit) = thresholds
        .peer_seen_critical
        .filter(|limit| !limit.is_zero())
    {
        let unseen = replicas
            .iter()
            .filter(|replica| nanos_field(&replica["active"]) > limit)
            .count();
        if unseen > 0 {
            outcome.flag(Status::Critical, format!("{unseen} replicas inactive"));
        }
    }
}

fn stream_sources_thresholds(info: &Value, thresholds: &StreamThresholds, outcome: &mut Outcome) {
    let sources = info["sources"].as_array().cloned().unwrap_or_default();
    let count = sources.len() as i64;
    outcome.metrics.push(Metric::plain("sources", count as f64));
    if thresholds
        .min_sources
        .is_some_and(|min| min > 0 && count < min)
        || thresholds
            .max_sources
            .is_some_and(|max| max > 0 && count > max)
    {
        outcome.flag(Status::Critical, format!("{count} sources"));
    }
    let lag_limit = thresholds.lag_critical.filter(|limit| *limit > 0);
    let seen_limit = thresholds.seen_critical.filter(|limit| !limit.is_zero());
    if lag_limit.is_none() && seen_limit.is_none() {
        return;
    }
    let lagging = |origin: &Value| {
        lag_limit.is_some_and(|limit| origin["lag"].as_u64().unwrap_or(0) >= limit)
    };
    let unseen =
        |origin: &Value| seen_limit.is_some_and(|limit| nanos_field(&origin["active"]) >= limit);
    if !sources.is_empty() {
        let lagged = sources.iter().filter(|source| lagging(source)).count();
        let inactive = sources.iter().filter(|source| unseen(source)).count();
        if lagged > 0 {
            outcome.flag(Status::Critical, format!("{lagged} sources are lagged"));
        }
        if inactive > 0 {
            outcome.flag(Status::Critical, format!("{inactive} sources are inactive"));
        }
        return;
    }
    if !info["config"]["mirror"].is_object() {
        outcome.flag(Status::Critical, "not mirrored");
        return;
    }
    let mirror = &info["mirror"];
    if !mirror.is_object() {
        outcome.flag(Status::Critical, "invalid mirror state");
        return;
    }
    if lagging(mirror) {
        outcome.flag(
            Status::Critical,
            format!("mirror lag {}", mirror["lag"].as_u64().unwrap_or(0)),
        );
    }
    if unseen(mirror) {
        outcome.flag(
            Status::Critical,
            format!(
                "mirror seen {} ago",
                units::format_duration(nanos_field(&mirror["active"]))
            ),
        );
    }
}

/// `server check consumer`'s thresholds, as the nats CLI's (jsm.go
/// `CheckConsumerHealthOptions`); zero or negative is none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConsumerThresholds {
    pub outstanding_ack_critical: Option<i64>,
    pub waiting_critical: Option<i64>,
    pub unprocessed_critical: Option<i64>,
    pub last_delivery_critical: Option<Duration>,
    pub last_ack_critical: Option<Duration>,
    pub redelivery_critical: Option<i64>,
    pub pinned: bool,
}

impl ConsumerThresholds {
    pub fn of(args: &ConsumerCheck) -> Result<ConsumerThresholds, CliError> {
        Ok(ConsumerThresholds {
            outstanding_ack_critical: args.outstanding_ack_critical,
            waiting_critical: args.waiting_critical,
            unprocessed_critical: args.unprocessed_critical,
            last_delivery_critical: optional_duration(
                "--last-delivery-critical",
                &args.last_delivery_critical,
            )?,
            last_ack_critical: optional_duration("--last-ack-critical", &args.last_ack_critical)?,
            redelivery_critical: args.redelivery_critical,
            pinned: args.pinned,
        })
    }
}

/// The nats CLI's consumer checks on top of tern's lag verdict; `now` is
/// the clock the last delivery and ack are measured against.
pub fn consumer_thresholds_outcome(
    info: &Value,
    thresholds: &ConsumerThresholds,
    now: SystemTime,
    outcome: &mut Outcome,
) {
    for (limit, key, what) in [
        (
            thresholds.outstanding_ack_critical,
            "num_ack_pending",
            "ack pending",
        ),
        (thresholds.waiting_critical, "num_waiting", "waiting pulls"),
        (
            thresholds.unprocessed_critical,
            "num_pending",
            "unprocessed messages",
        ),
        (
            thresholds.redelivery_critical,
            "num_redelivered",
            "redelivered",
        ),
    ] {
        let Some(limit) = limit.filter(|limit| *limit > 0) else {
            continue;
        };
        let value = info[key].as_i64().unwrap_or(0);
        if value >= limit {
            outcome.flag(Status::Critical, format!("{what}: {value}"));
        }
    }
    for (limit, block, nothing, what) in [
        (
            thresholds.last_delivery_critical,
            "delivered",
            "no deliveries",
            "last delivery",
        ),
        (
            thresholds.last_ack_critical,
            "ack_floor",
            "no acks",
            "last ack",
        ),
    ] {
        let Some(limit) = limit.filter(|limit| !limit.is_zero()) else {
            continue;
        };
        let last = info[block]["last_active"]
            .as_str()
            .and_then(crate::timestamp::parse_rfc3339);
        match last {
            None => outcome.flag(Status::Critical, nothing),
            Some(last) => {
                let ago = now.duration_since(last).unwrap_or(Duration::ZERO);
                if ago >= limit {
                    outcome.flag(
                        Status::Critical,
                        format!("{what} {} ago", units::format_duration(ago)),
                    );
                }
            }
        }
    }
    if thresholds.pinned {
        let config = &info["config"];
        let groups = config["priority_groups"].as_array().map_or(0, Vec::len);
        let pinned = info["priority_groups"].as_array().map_or(0, |groups| {
            groups
                .iter()
                .filter(|group| {
                    group["pinned_client_id"]
                        .as_str()
                        .is_some_and(|id| !id.is_empty())
                })
                .count()
        });
        if config["priority_policy"] != "pinned_client" || groups == 0 {
            outcome.flag(Status::Critical, "not a pinned client priority consumer");
        } else if pinned != groups {
            outcome.flag(
                Status::Critical,
                format!("{pinned} / {groups} pinned clients"),
            );
        }
    }
}

/// The nats CLI's `server check meta` thresholds on the meta group's
/// peers, as the merged leader view reports them.
pub fn meta_peers_outcome(
    jsz: &Value,
    lag_critical: Option<u64>,
    seen_critical: Option<Duration>,
    outcome: &mut Outcome,
) {
    let peers = jsz["meta_cluster"]["replicas"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for peer in &peers {
        let name = peer["name"].as_str().unwrap_or("?");
        if let Some(limit) = lag_critical {
            let lag = peer["lag"].as_u64().unwrap_or(0);
            if lag > limit {
                outcome.flag(
                    Status::Critical,
                    format!("node {name} {lag} operations behind"),
                );
            }
        }
        if let Some(limit) = seen_critical {
            let active = nanos_field(&peer["active"]);
            if active > limit {
                outcome.flag(
                    Status::Critical,
                    format!(
                        "node {name} last seen {} ago",
                        units::format_duration(active)
                    ),
                );
            }
        }
    }
}

/// Streams' details in `/jsz?accounts=true&streams=true`: under each
/// account (nats-server, tern), or at the top (earlier tern servers).
pub fn stream_details(jsz: &Value) -> Vec<&Value> {
    let mut details: Vec<&Value> = jsz["stream_detail"]
        .as_array()
        .map(|streams| streams.iter().collect())
        .unwrap_or_default();
    if let Some(accounts) = jsz["account_details"].as_array() {
        for account in accounts {
            if let Some(streams) = account["stream_detail"].as_array() {
                details.extend(streams);
            }
        }
    }
    details
}

pub fn cluster_outcome(jsz: &Value, expect: Option<usize>) -> Outcome {
    if jsz["disabled"].as_bool() == Some(true) {
        return Outcome::new(Status::Critical, "JetStream is disabled on this server");
    }
    let mut problems = Vec::new();
    let streams = stream_details(jsz);
    let mut replicated = 0;
    for stream in &streams {
        let name = stream["name"].as_str().unwrap_or("?");
        if let Some(failure) = stream["failure"].as_str() {
            problems.push(format!("stream {name}: {failure}"));
        }
        let cluster = &stream["cluster"];
        if cluster["replicas"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
        {
            replicated += 1;
            if cluster["leader"].as_str().is_none() {
                problems.push(format!("stream {name} has no leader"));
            }
        }
        for replica in unhealthy_replicas(cluster) {
            problems.push(format!("stream {name} replica {replica}"));
        }
    }
    let meta = &jsz["meta_cluster"];
    let nodes = if meta.is_object() {
        if meta["leader"].as_str().is_none() {
            problems.push("no meta leader".into());
        }
        for replica in unhealthy_replicas(meta) {
            problems.push(format!("node {replica}"));
        }
        1 + meta["replicas"].as_array().map_or(0, Vec::len)
    } else {
        1
    };
    let size = meta["cluster_size"]
        .as_u64()
        .map_or(nodes, |size| size as usize);
    if let Some(expected) = expect {
        if nodes < expected || size < expected {
            problems.push(format!("{nodes} of {expected} nodes present"));
        }
    }
    let summary = if meta.is_object() {
        format!(
            "cluster {}: {nodes} of {size} nodes present, meta leader {}, {} streams ({replicated} replicated)",
            meta["name"].as_str().unwrap_or("?"),
            meta["leader"].as_str().unwrap_or("none"),
            streams.len()
        )
    } else {
        format!("single server (no cluster), {} streams", streams.len())
    };
    let metrics = vec![
        Metric::plain("nodes", nodes as f64),
        Metric::plain("streams", streams.len() as f64),
        Metric::plain("problems", problems.len() as f64),
    ];
    if problems.is_empty() {
        Outcome {
            status: Status::Ok,
            message: summary,
            metrics,
        }
    } else {
        Outcome {
            status: Status::Critical,
            message: format!("{summary}; {}", problems.join("; ")),
            metrics,
        }
    }
}

/// `/varz`'s count of failed authentication attempts: tern's
/// `tern_authentication_failures` (nats-server 2.15 has none).
pub const AUTH_FAILURE_FIELDS: [&str; 1] = ["tern_authentication_failures"];

pub fn auth_outcome(varz: &Value, warning: u64, critical: u64) -> Outcome {
    let Some((field, failures)) = AUTH_FAILURE_FIELDS
        .iter()
        .find_map(|field| varz[*field].as_u64().map(|count| (*field, count)))
    else {
        return Outcome::new(
            Status::Unknown,
            format!(
                "/varz has no count of failed authentication attempts (looked for {})",
                AUTH_FAILURE_FIELDS.join(", ")
            ),
        );
    };
    Outcome {
        status: Status::of_level(failures as f64, Some(warning as f64), Some(critical as f64)),
        message: format!("{failures} failed authentication attempts since start ({field})"),
        metrics: vec![Metric {
            name: "auth_failures",
            value: failures as f64,
            unit: "",
            warning: Some(warning as f64),
            critical: Some(critical as f64),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream_info(bytes: u64, max_bytes: i64) -> Value {
        json!({"config": {"name": "ORDERS", "max_bytes": max_bytes},
               "state": {"bytes": bytes, "messages": 10}})
    }

    #[test]
    fn stream_bytes_trip_warning_then_critical() {
        let ok = stream_outcome("ORDERS", &stream_info(500, 1000), 80.0, 95.0);
        assert_eq!(ok.status, Status::Ok);
        assert!(
            ok.line()
                .starts_with("OK: stream ORDERS uses 500 B of max_bytes 1000 B (50.0%)"),
            "{}",
            ok.line()
        );
        assert!(
            ok.line()
                .contains("| messages=10;; bytes=500B;800;950 bytes_used=50%;80;95"),
            "{}",
            ok.line()
        );
        let warning = stream_outcome("ORDERS", &stream_info(800, 1000), 80.0, 95.0);
        assert_eq!(warning.status, Status::Warning);
        assert!(warning.line().starts_with("WARNING: "));
        let critical = stream_outcome("ORDERS", &stream_info(990, 1000), 80.0, 95.0);
        assert_eq!(critical.status, Status::Critical);
        assert!(critical.line().starts_with("CRITICAL: "));
        let unlimited = stream_outcome("ORDERS", &stream_info(990, -1), 80.0, 95.0);
        assert_eq!(unlimited.status, Status::Ok);
        assert!(unlimited.message.contains("no max_bytes limit"));
    }

    #[test]
    fn a_replica_behind_is_critical() {
        let mut info = stream_info(1, 1000);
        info["cluster"] = json!({"leader": "n1", "replicas": [
            {"name": "n2", "current": true, "active": 1},
            {"name": "n3", "current": false, "active": 1, "lag": 7}]});
        let outcome = stream_outcome("ORDERS", &info, 80.0, 95.0);
        assert_eq!(outcome.status, Status::Critical);
        assert!(
            outcome.message.ends_with("; replicas: n3 not current"),
            "{}",
            outcome.message
        );
    }

    #[test]
    fn consumer_lag() {
        let info = json!({"stream_name": "ORDERS", "name": "P", "num_pending": 10000,
                          "num_ack_pending": 3, "num_redelivered": 0});
        assert_eq!(
            consumer_outcome(&info, Some(100), Some(10000)).status,
            Status::Critical
        );
        assert_eq!(
            consumer_outcome(&info, Some(100), None).status,
            Status::Warning
        );
        assert_eq!(consumer_outcome(&info, None, None).status, Status::Ok);
        let line = consumer_outcome(&info, Some(100), Some(20000)).line();
        assert!(
            line.starts_with("WARNING: consumer ORDERS > P: 10000 messages not yet delivered"),
            "{line}"
        );
        assert!(line.contains("lag=10000;100;20000"), "{line}");
    }

    #[test]
    fn cluster_health() {
        let healthy = json!({"meta_cluster": {"name": "C", "leader": "n1", "cluster_size": 3,
            "replicas": [{"name": "n2", "current": true}, {"name": "n3", "current": true}]},
            "stream_detail": [{"name": "S", "cluster": {"leader": "n1", "replicas": [
                {"name": "n2", "current": true}, {"name": "n3", "current": true}]}}]});
        let outcome = cluster_outcome(&healthy, Some(3));
        assert_eq!(outcome.status, Status::Ok, "{}", outcome.message);
        assert!(outcome
            .message
            .starts_with("cluster C: 3 of 3 nodes present, meta leader n1"));
        let mut down = healthy.clone();
        down["meta_cluster"]["replicas"][1] =
            json!({"name": "n3", "current": false, "offline": true});
        down["stream_detail"][0]["cluster"]["replicas"][1] =
            json!({"name": "n3", "current": false});
        let outcome = cluster_outcome(&down, Some(3));
        assert_eq!(outcome.status, Status::Critical);
        assert!(
            outcome.message.contains("node n3 offline"),
            "{}",
            outcome.message
        );
        assert!(
            outcome.message.contains("stream S replica n3 not current"),
            "{}",
            outcome.message
        );
        let mut missing = healthy.clone();
        missing["meta_cluster"]["replicas"] = json!([{"name": "n2", "current": true}]);
        missing["meta_cluster"]["cluster_size"] = json!(2);
        assert_eq!(cluster_outcome(&missing, Some(3)).status, Status::Critical);
        let nats_layout = json!({"account_details": [{"stream_detail": [
            {"name": "T", "cluster": {"leader": "a"}}]}]});
        let outcome = cluster_outcome(&nats_layout, None);
        assert_eq!(outcome.status, Status::Ok);
        assert!(outcome
            .message
            .contains("single server (no cluster), 1 streams"));
        // A follower's view of its peers is not judged; the leader's is.
        let mut follower = healthy.clone();
        follower["meta_cluster"]["replicas"][0] = json!({"name": "n1", "current": false});
        follower["stream_detail"][0]["cluster"]["replicas"][0] =
            json!({"name": "n1", "current": false});
        let merged = leader_views(&[("n2".into(), follower.clone())]);
        assert_eq!(cluster_outcome(&merged, Some(3)).status, Status::Ok);
        let merged = leader_views(&[("n2".into(), follower), ("n1".into(), down.clone())]);
        let outcome = cluster_outcome(&merged, Some(3));
        assert!(
            outcome.message.contains("node n3 offline")
                && outcome.message.contains("stream S replica n3 not current"),
            "{}",
            outcome.message
        );
        let failed = json!({"stream_detail": [{"name": "S", "failure": "offline: damaged"}]});
        assert_eq!(cluster_outcome(&failed, None).status, Status::Critical);
        assert_eq!(
            cluster_outcome(&json!({"disabled": true}), None).status,
            Status::Critical
        );
    }

    #[test]
    fn auth_failures_when_counted() {
        assert_eq!(
            auth_outcome(&json!({"tern_authentication_failures": 0}), 1, 100).status,
            Status::Ok
        );
        assert_eq!(
            auth_outcome(&json!({"tern_authentication_failures": 5}), 1, 100).status,
            Status::Warning
        );
        assert_eq!(
            auth_outcome(&json!({"tern_authentication_failures": 500}), 1, 100).status,
            Status::Critical
        );
        let unknown = auth_outcome(&json!({"connections": 1}), 1, 100);
        assert_eq!(unknown.status, Status::Unknown);
        assert!(unknown.line().starts_with("UNKNOWN: /varz has no count"));
    }

    fn default_jetstream_thresholds() -> JetStreamThresholds {
        JetStreamThresholds {
            memory: (Some(75.0), Some(90.0)),
            storage: (Some(75.0), Some(90.0)),
            streams: (None, None),
            consumers: (None, None),
            replicas: true,
            replica_seen_critical: Duration::from_secs(5),
            replica_lag_critical: 200,
        }
    }

    #[test]
    fn jetstream_usage_against_limits() {
        let thresholds = default_jetstream_thresholds();
        let info = json!({"storage": 91, "memory": 0, "streams": 1, "consumers": 2,
                          "limits": {"max_storage": 100}});
        assert_eq!(
            jetstream_outcome(&info, &thresholds).status,
            Status::Critical
        );
        // As the nats CLI: over the threshold, not at it.
        let info = json!({"storage": 90, "limits": {"max_storage": 100}});
        assert_eq!(
            jetstream_outcome(&info, &thresholds).status,
            Status::Warning
        );
        let unlimited = json!({"storage": 90, "limits": {"max_storage": -1}});
        assert_eq!(
            jetstream_outcome(&unlimited, &thresholds).status,
            Status::Ok
        );
        let streams = JetStreamThresholds {
            streams: (Some(50.0), Some(80.0)),
            ..default_jetstream_thresholds()
        };
        let info = json!({"streams": 9, "limits": {"max_streams": 10}});
        let outcome = jetstream_outcome(&info, &streams);
        assert_eq!(outcome.status, Status::Critical, "{}", outcome.message);
        let inverted = JetStreamThresholds {
            memory: (Some(90.0), Some(75.0)),
            ..default_jetstream_thresholds()
        };
        let outcome = jetstream_outcome(&json!({}), &inverted);
        assert!(outcome.message.contains("memory: invalid thresholds"));
    }

    #[test]
    fn every_streams_replicas() {
        let thresholds = default_jetstream_thresholds();
        let healthy = json!({"config": {"num_replicas": 3}, "cluster": {"leader": "n1",
            "replicas": [{"name": "n2", "active": 1_000, "lag": 0},
                         {"name": "n3", "active": 2_000, "lag": 3}]}});
        let single = json!({"config": {"num_replicas": 1}});
        let mut outcome = Outcome::new(Status::Ok, "x");
        replicas_outcome(&[healthy.clone(), single], &thresholds, &mut outcome);
        assert_eq!(outcome.status, Status::Ok, "{}", outcome.message);
        let mut behind = healthy.clone();
        behind["cluster"]["replicas"][1]["lag"] = json!(500);
        let mut unseen = healthy.clone();
        unseen["cluster"]["replicas"][0]["active"] = json!(10_000_000_000u64);
        let mut leaderless = healthy;
        leaderless["cluster"]["leader"] = Value::Null;
        let mut outcome = Outcome::new(Status::Ok, "x");
        replicas_outcome(&[behind, unseen, leaderless], &thresholds, &mut outcome);
        assert_eq!(outcome.status, Status::Critical);
        assert!(
            outcome.message.ends_with("; 3 unhealthy streams"),
            "{}",
            outcome.message
        );
    }

    #[test]
    fn the_nats_clis_stream_thresholds() {
        let mut info = stream_info(1, -1);
        info["config"]["num_replicas"] = json!(3);
        info["state"]["num_subjects"] = json!(4);
        info["cluster"] = json!({"leader": "n1", "replicas": [
            {"name": "n2", "current": true, "active": 1_000, "lag": 0},
            {"name": "n3", "current": true, "active": 1_000, "lag": 9}]});
        let judge = |thresholds: StreamThresholds| {
            let mut outcome = stream_outcome("ORDERS", &info, 80.0, 95.0);
            stream_thresholds_outcome(&info, &thresholds, &mut outcome);
            outcome
        };
        let few = judge(StreamThresholds {
            msgs_critical: Some(10),
            ..StreamThresholds::default()
        });
        assert_eq!(
            few.status,
            Status::Critical,
            "10 messages, at most 10: {}",
            few.message
        );
        assert!(few.message.ends_with("; 10 messages"), "{}", few.message);
        let ok = judge(StreamThresholds {
            peer_expect: Some(3),
            peer_lag_critical: Some(100),
            msgs_warn: Some(1),
            ..StreamThresholds::default()
        });
        assert_eq!(ok.status, Status::Ok, "{}", ok.message);
        let outcome = judge(StreamThresholds {
            peer_expect: Some(5),
            ..StreamThresholds::default()
        });
        assert!(
            outcome.message.contains("expected 5 replicas, got 3"),
            "{}",
            outcome.message
        );
        let outcome = judge(StreamThresholds {
            peer_lag_critical: Some(5),
            ..StreamThresholds::default()
        });
        assert!(
            outcome.message.ends_with("; 1 replicas lagged"),
            "{}",
            outcome.message
        );
        let outcome = judge(StreamThresholds {
            subjects_warn: Some(3),
            subjects_critical: Some(10),
            ..StreamThresholds::default()
        });
        assert_eq!(outcome.status, Status::Warning, "{}", outcome.message);
        let outcome = judge(StreamThresholds {
            min_sources: Some(1),
            ..StreamThresholds::default()
        });
        assert!(
            outcome.message.ends_with("; 0 sources"),
            "{}",
            outcome.message
        );
        let outcome = judge(StreamThresholds {
            lag_critical: Some(10),
            ..StreamThresholds::default()
        });
        assert!(
            outcome.message.ends_with("; not mirrored"),
            "{}",
            outcome.message
        );
        let from_metadata = StreamThresholds::default()
            .with_metadata(&json!({"io.nats.monitor.peer-expect": "3",
                                   "io.nats.monitor.seen-critical": "5m"}))
            .unwrap();
        assert_eq!(from_metadata.peer_expect, Some(3));
        assert_eq!(from_metadata.seen_critical, Some(Duration::from_secs(300)));
        assert!(StreamThresholds::default()
            .with_metadata(&json!({"io.nats.monitor.msgs-warn": "many"}))
            .is_err());
    }

    #[test]
    fn the_nats_clis_consumer_thresholds() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_796_029_674);
        let info = json!({"stream_name": "S", "name": "C", "num_pending": 10,
            "num_ack_pending": 3, "num_redelivered": 1, "num_waiting": 0,
            "delivered": {"last_active": "2026-11-30T09:07:00Z"},
            "ack_floor": {},
            "config": {"priority_policy": "pinned_client", "priority_groups": ["a", "b"]},
            "priority_groups": [{"group": "a", "pinned_client_id": "x"}, {"group": "b"}]});
        let judge = |thresholds: ConsumerThresholds| {
            let mut outcome = consumer_outcome(&info, None, None);
            consumer_thresholds_outcome(&info, &thresholds, now, &mut outcome);
            outcome
        };
        let ok = judge(ConsumerThresholds {
            outstanding_ack_critical: Some(4),
            unprocessed_critical: Some(-1),
            last_delivery_critical: Some(Duration::from_secs(60)),
            ..ConsumerThresholds::default()
        });
        assert_eq!(ok.status, Status::Ok, "{}", ok.message);
        let outcome = judge(ConsumerThresholds {
            unprocessed_critical: Some(10),
            redelivery_critical: Some(1),
            last_delivery_critical: Some(Duration::from_secs(30)),
            last_ack_critical: Some(Duration::from_secs(30)),
            pinned: true,
            ..ConsumerThresholds::default()
        });
        assert_eq!(outcome.status, Status::Critical);
        for finding in [
            "unprocessed messages: 10",
            "redelivered: 1",
            "last delivery 54s ago",
            "no acks",
            "1 / 2 pinned clients",
        ] {
            assert!(
                outcome.message.contains(finding),
                "{finding}: {}",
                outcome.message
            );
        }
    }

    #[test]
    fn connection_times_against_thresholds() {
        let millis = Duration::from_millis;
        let thresholds = ConnectionThresholds {
            connect: (millis(500), millis(1000)),
            rtt: (Duration::ZERO, Duration::ZERO),
            request: (millis(5), millis(1000)),
        };
        let times = ConnectionTimes {
            connect: millis(2),
            rtt: millis(900),
            request: millis(6),
        };
        let outcome = connection_outcome("nats://x", times, &thresholds);
        assert_eq!(outcome.status, Status::Warning, "zero is no threshold");
        assert!(outcome.line().contains("rtt=0.9s;;"), "{}", outcome.line());
    }

    #[test]
    fn prometheus_and_text() {
        let outcome = consumer_outcome(
            &json!({"stream_name": "S", "name": "C", "num_pending": 5}),
            Some(1),
            Some(10),
        );
        let text = outcome.prometheus("nats_server_check", "consumer", "S_C");
        assert!(
            text.contains("# TYPE nats_server_check_consumer_lag gauge\nnats_server_check_consumer_lag{item=\"S_C\"} 5\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "nats_server_check_consumer_status_code{item=\"S_C\",status=\"WARNING\"} 1"
            ),
            "{text}"
        );
        let human = outcome.text("consumer", "S_C");
        assert!(
            human.starts_with("consumer S_C: WARNING\n\n  consumer S > C: 5 messages"),
            "{human}"
        );
    }

    #[test]
    fn json_verdicts() {
        let outcome = consumer_outcome(
            &json!({"stream_name": "S", "name": "C", "num_pending": 5}),
            Some(1),
            Some(10),
        );
        let value = outcome.json("consumer");
        assert_eq!(value["status"], "WARNING");
        assert_eq!(value["exit_code"], 1);
        assert_eq!(value["metrics"]["lag"], 5.0);
    }

    #[test]
    fn errors_are_critical_or_unknown() {
        let unreachable = CliError::ConnectTimeout {
            server: "nats://x".into(),
            timeout: Duration::from_secs(1),
        };
        assert_eq!(error_outcome(&unreachable).status, Status::Critical);
        assert_eq!(
            error_outcome(&CliError::Usage("x".into())).status,
            Status::Unknown
        );
    }
}
