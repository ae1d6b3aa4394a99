//! `tern server check …`: health checks for monitoring systems, Nagios
//! style. Each prints one status line (`OK: …`, `WARNING: …`,
//! `CRITICAL: …`, `UNKNOWN: …`, with `| name=value;warn;crit` performance
//! data) or, with `--json`, one JSON object; the exit status is 0, 1, 2
//! or 3 to match. The verdicts are pure functions of the API's or the
//! monitoring endpoints' answers (unit-tested below); the commands only
//! fetch them.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
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

fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        let text = format!("{value:.6}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(subcommand)]
    pub check: Check,
    /// Print one JSON object instead of the status line
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Check {
    /// Connect and time a round trip through the server
    #[command(alias = "conn")]
    Connection(ConnectionCheck),
    /// A stream's bytes against its max_bytes, and its replicas
    Stream(StreamCheck),
    /// A consumer's lag (messages not yet delivered)
    Consumer(ConsumerCheck),
    /// JetStream answers ($JS.API.INFO), and storage against account limits
    #[command(alias = "js")]
    Jetstream(JetStreamCheck),
    /// Every node present and every replica current (monitoring /jsz)
    #[command(alias = "meta")]
    Cluster(ClusterCheck),
    /// Failed authentication attempts (monitoring /varz)
    Auth(AuthCheck),
}

#[derive(Debug, Args)]
pub struct ConnectionCheck {
    /// Round trip time that warns
    #[arg(long, value_name = "DURATION", default_value = "500ms")]
    pub rtt_warn: String,
    /// Round trip time that is critical
    #[arg(
        long,
        alias = "rtt-critical",
        value_name = "DURATION",
        default_value = "1s"
    )]
    pub rtt_crit: String,
}

#[derive(Debug, Args)]
pub struct StreamCheck {
    /// Stream name
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
}

#[derive(Debug, Args)]
pub struct ConsumerCheck {
    /// Stream name
    #[arg(long, value_name = "STREAM")]
    pub stream: String,
    /// Consumer name
    #[arg(long, alias = "consumer", value_name = "CONSUMER")]
    pub name: String,
    /// Messages not yet delivered (num_pending) that warn
    #[arg(long, value_name = "MESSAGES")]
    pub lag_warn: Option<u64>,
    /// Messages not yet delivered (num_pending) that are critical
    #[arg(long, alias = "lag-critical", value_name = "MESSAGES")]
    pub lag_crit: Option<u64>,
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

/// Runs one check and prints its verdict; the exit status is the
/// verdict's.
pub async fn execute(connection: &ConnectionArgs, args: CheckArgs) -> ExitCode {
    let name = match &args.check {
        Check::Connection(_) => "connection",
        Check::Stream(_) => "stream",
        Check::Consumer(_) => "consumer",
        Check::Jetstream(_) => "jetstream",
        Check::Cluster(_) => "cluster",
        Check::Auth(_) => "auth",
    };
    let outcome = run(connection, args.check)
        .await
        .unwrap_or_else(|error| error_outcome(&error));
    if args.json {
        line(outcome.json(name));
    } else {
        line(outcome.line());
    }
    ExitCode::from(outcome.status as u8)
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

async fn run(connection: &ConnectionArgs, check: Check) -> Result<Outcome, CliError> {
    let timeout = connection.timeout()?;
    match check {
        Check::Connection(args) => {
            let warning =
                units::parse_duration(&args.rtt_warn).map_err(CliError::unit("--rtt-warn"))?;
            let critical =
                units::parse_duration(&args.rtt_crit).map_err(CliError::unit("--rtt-crit"))?;
            let started = Instant::now();
            let client = connection.connect().await?;
            let connect_time = started.elapsed();
            let rtt = round_trip(&client, timeout).await?;
            Ok(connection_outcome(
                connection.server(),
                connect_time,
                rtt,
                warning,
                critical,
            ))
        }
        Check::Stream(args) => {
            let warning = percent("--bytes-warn", &args.bytes_warn)?;
            let critical = percent("--bytes-crit", &args.bytes_crit)?;
            let api = connection.api().await?;
            let info = crate::stream::info(&api, &args.name).await?;
            Ok(stream_outcome(&args.name, &info, warning, critical))
        }
        Check::Consumer(args) => {
            let api = connection.api().await?;
            let info = crate::consumer::info(&api, &args.stream, &args.name).await?;
            Ok(consumer_outcome(&info, args.lag_warn, args.lag_crit))
        }
        Check::Jetstream(args) => {
            let warning = percent("--store-warn", &args.store_warn)?;
            let critical = percent("--store-crit", &args.store_crit)?;
            let api = connection.api().await?;
            match api
                .request("JetStream account info", "INFO", &Value::Null)
                .await
            {
                Ok(info) => Ok(jetstream_outcome(&info, warning, critical)),
                Err(CliError::NoResponders { .. }) => Ok(Outcome::new(
                    Status::Critical,
                    "JetStream is not enabled (no responder for $JS.API.INFO)",
                )),
                Err(error) => Err(error),
            }
        }
        Check::Cluster(args) => {
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
            let mut outcome = cluster_outcome(&leader_views(&views), args.expect);
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

pub fn connection_outcome(
    server: &str,
    connect_time: Duration,
    rtt: Duration,
    warning: Duration,
    critical: Duration,
) -> Outcome {
    let seconds = |duration: Duration| duration.as_secs_f64();
    let status = Status::of_level(
        seconds(rtt),
        Some(seconds(warning)),
        Some(seconds(critical)),
    );
    Outcome {
        status,
        message: format!(
            "connected to {server} in {:.1}ms, round trip {:.1}ms",
            connect_time.as_secs_f64() * 1e3,
            rtt.as_secs_f64() * 1e3
        ),
        metrics: vec![
            Metric {
                unit: "s",
                ..Metric::plain("connect_time", seconds(connect_time))
            },
            Metric {
                name: "rtt",
                value: seconds(rtt),
                unit: "s",
                warning: Some(seconds(warning)),
                critical: Some(seconds(critical)),
            },
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

pub fn jetstream_outcome(info: &Value, warning_pct: f64, critical_pct: f64) -> Outcome {
    let storage = info["storage"].as_u64().unwrap_or(0);
    let memory = info["memory"].as_u64().unwrap_or(0);
    let streams = info["streams"].as_u64().unwrap_or(0);
    let consumers = info["consumers"].as_u64().unwrap_or(0);
    let max_storage = info["limits"]["max_storage"].as_i64().unwrap_or(-1);
    let mut status = Status::Ok;
    let mut message = format!(
        "JetStream answers: {streams} streams, {consumers} consumers, {} file, {} memory",
        units::format_bytes(storage),
        units::format_bytes(memory)
    );
    let mut metrics = vec![
        Metric::plain("streams", streams as f64),
        Metric::plain("consumers", consumers as f64),
        Metric {
            unit: "B",
            ..Metric::plain("storage", storage as f64)
        },
        Metric {
            unit: "B",
            ..Metric::plain("memory", memory as f64)
        },
    ];
    if max_storage > 0 {
        let used_pct = storage as f64 * 100.0 / max_storage as f64;
        status = Status::of_level(used_pct, Some(warning_pct), Some(critical_pct));
        message.push_str(&format!(
            "; storage {used_pct:.1}% of the account's {}",
            units::format_bytes(max_storage as u64)
        ));
        metrics.push(Metric {
            name: "storage_used",
            value: (used_pct * 10.0).round() / 10.0,
            unit: "%",
            warning: Some(warning_pct),
            critical: Some(critical_pct),
        });
    }
    Outcome {
        status,
        message,
        metrics,
    }
}

/// Streams' details in `/jsz?accounts=true&streams=true`: at the top
/// (tern) or under each account (nats-server).
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

    #[test]
    fn jetstream_storage_against_limits() {
        let info = json!({"storage": 90, "memory": 0, "streams": 1, "consumers": 2,
                          "limits": {"max_storage": 100}});
        assert_eq!(
            jetstream_outcome(&info, 75.0, 90.0).status,
            Status::Critical
        );
        let unlimited = json!({"storage": 90, "limits": {"max_storage": -1}});
        assert_eq!(jetstream_outcome(&unlimited, 75.0, 90.0).status, Status::Ok);
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
