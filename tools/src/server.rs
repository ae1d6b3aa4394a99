//! `tern server info|ls|report jetstream`: per node and per stream/replica
//! tables from the monitoring endpoints (`/varz`, `/jsz`), readable in a
//! terminal, `--json` for machines, with the nats CLI's flags (where the
//! nats CLI asks the system account, tern reads the nodes' monitoring
//! ports; docs/cli.md says what each flag means here). The summaries are
//! pure functions of the endpoints' answers (unit-tested below). `/jsz`
//! is read in nats-server's layout (streams under each account, their
//! state under `state`), tern's too; earlier tern servers' (streams at
//! the top, their state in the detail) is read as well.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use serde_json::Value;

use crate::check::stream_details;
use crate::error::CliError;
use crate::monitor;
use crate::output::{self, line};
use crate::units::format_bytes;

/// The monitoring URL when none is given (nats-server's `-m 8222`).
pub const MONITOR_DEFAULT: &str = "http://127.0.0.1:8222";
/// `--watch` refreshes at most (then it stops).
pub const WATCH_REFRESHES_MAX: u64 = 1_000_000;

/// `--archive`: the nats CLI reads `nats audit gather` archives; tern
/// reads only live monitoring endpoints.
fn refuse_archive(archive: &Option<PathBuf>) -> Result<(), CliError> {
    match archive {
        None => Ok(()),
        Some(path) => Err(CliError::Usage(format!(
            "--archive {}: tern reads the nodes' monitoring endpoints (--monitor), not audit archives",
            path.display()
        ))),
    }
}

pub fn monitors(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(String::from)
        .collect()
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    /// The node (server name or id) among the --monitor URLs
    #[arg(value_name = "SERVER")]
    pub node: Option<String>,
    /// The server's monitoring URL (or several, comma separated, to pick
    /// SERVER from)
    #[arg(long, value_name = "URL[,URL…]", default_value = MONITOR_DEFAULT)]
    pub monitor: String,
    /// Print JSON
    #[arg(short = 'j', long)]
    pub json: bool,
    /// Refused: tern reads monitoring endpoints, not audit archives
    #[arg(long, value_name = "FILE")]
    pub archive: Option<PathBuf>,
}

/// `server ls --sort`: the nats CLI's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LsSort {
    Name,
    Cluster,
    #[value(alias = "conn")]
    Conns,
    #[value(alias = "sub")]
    Subs,
    #[value(alias = "route")]
    Routes,
    #[value(alias = "gws")]
    Gw,
    Mem,
    Cpu,
    Slow,
    Uptime,
    Rtt,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Nodes expected: fewer answering is a failure
    pub expect: Option<usize>,
    /// The nodes' monitoring URLs, comma separated or repeated
    #[arg(long, value_name = "URL[,URL…]", value_delimiter = ',', default_value = MONITOR_DEFAULT)]
    pub monitor: Vec<String>,
    /// Print JSON
    #[arg(short = 'j', long)]
    pub json: bool,
    /// Order of the rows (numbers largest first, names and rtt smallest
    /// first)
    #[arg(long, value_enum, default_value = "rtt")]
    pub sort: LsSort,
    /// Reverse the order
    #[arg(short = 'R', long)]
    pub reverse: bool,
    /// Drop the domain the names share (the default; --no-compact keeps it)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_compact")]
    pub compact: Option<bool>,
    #[arg(long, hide = true, overrides_with = "compact")]
    pub no_compact: bool,
    /// Refused: tern reads monitoring endpoints, not audit archives
    #[arg(long, value_name = "FILE")]
    pub archive: Option<PathBuf>,
}

/// `server report …`: the subcommand, and the nats CLI's `-R` of every
/// report.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Reverse the order
    #[arg(short = 'R', long, global = true)]
    pub reverse: bool,
    #[command(subcommand)]
    pub command: ReportCommand,
}

#[derive(Debug, Subcommand)]
pub enum ReportCommand {
    /// Per stream: replicas, leader, messages, bytes, each replica's lag
    #[command(visible_alias = "js", alias = "jsz")]
    Jetstream(JetStreamReportArgs),
}

/// `server report jetstream --sort`: the nats CLI's keys, on tern's rows
/// (streams).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportSort {
    /// The stream's name
    Name,
    /// The stream's leader, then name (the nats CLI's default)
    Cluster,
    /// Replicas
    Streams,
    Consumers,
    Msgs,
    /// Bytes (mbytes, bytes, mem, file and store all sort by bytes)
    #[value(alias = "bytes", alias = "mem", alias = "file", alias = "store")]
    Mbytes,
    /// Followers behind or offline (api and err: the problems first)
    #[value(alias = "err")]
    Api,
}

#[derive(Debug, Args)]
pub struct JetStreamReportArgs {
    /// Streams listed at most
    pub limit: Option<usize>,
    /// The server's monitoring URL
    #[arg(long, value_name = "URL", default_value = MONITOR_DEFAULT)]
    pub monitor: String,
    /// Print JSON
    #[arg(short = 'j', long)]
    pub json: bool,
    /// Only the streams of this account (nats-server's /jsz names them)
    #[arg(long, value_name = "ACCOUNT")]
    pub account: Option<String>,
    /// Order of the rows
    #[arg(long, value_enum, default_value = "cluster")]
    pub sort: ReportSort,
    /// Drop the domain the node names share (the default; --no-compact
    /// keeps it)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", overrides_with = "no_compact")]
    pub compact: Option<bool>,
    #[arg(long, hide = true, overrides_with = "compact")]
    pub no_compact: bool,
    /// Then how many streams each node leads
    #[arg(short = 'l', long)]
    pub leaders: bool,
    /// Only streams with a replica on this node
    #[arg(long, value_name = "SERVER")]
    pub host: Option<String>,
    /// Only when the meta group's cluster has this name
    #[arg(long, value_name = "CLUSTER")]
    pub cluster: Option<String>,
    /// Refused: /jsz does not name the nodes' tags
    #[arg(long, value_name = "TAG")]
    pub tags: Vec<String>,
    /// Print the report again every this many seconds
    #[arg(long, value_name = "SECONDS")]
    pub watch: Option<u64>,
    /// Refused: tern reads monitoring endpoints, not audit archives
    #[arg(long, value_name = "FILE")]
    pub archive: Option<PathBuf>,
}

/// One node's summary from `/varz` and `/jsz`.
#[derive(Debug, Serialize, PartialEq)]
pub struct Node {
    pub monitor: String,
    pub name: String,
    pub id: String,
    pub version: String,
    pub uptime: String,
    pub connections: u64,
    pub subscriptions: u64,
    pub in_msgs: u64,
    pub out_msgs: u64,
    pub in_bytes: u64,
    pub out_bytes: u64,
    /// JetStream's counts; None when the server has JetStream off.
    pub streams: Option<u64>,
    pub consumers: Option<u64>,
    pub storage_bytes: Option<u64>,
    pub memory_bytes: Option<u64>,
    /// The cluster's name (empty when not clustered).
    pub cluster: String,
    pub routes: u64,
    pub gateways: u64,
    /// Resident memory, bytes.
    pub mem: u64,
    pub cpu: f64,
    pub slow_consumers: u64,
    /// Seconds since the server started (from `start`).
    pub uptime_seconds: u64,
    /// How long `/varz` took to answer, microseconds.
    pub rtt_us: u64,
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or("").to_string()
}

fn count(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

/// `jsz` is None when `/jsz` could not be read (JetStream off); `now` the
/// clock uptime is measured against; `rtt` the time `/varz` took.
pub fn node(
    monitor: &str,
    varz: &Value,
    jsz: Option<&Value>,
    now: SystemTime,
    rtt: Duration,
) -> Node {
    let jetstream = jsz.filter(|jsz| jsz["disabled"].as_bool() != Some(true));
    let from_jsz = |key: &str| jetstream.and_then(|jsz| jsz[key].as_u64());
    let length = |value: &Value| value.as_array().map_or(0, Vec::len) as u64;
    let started = varz["start"]
        .as_str()
        .and_then(crate::timestamp::parse_rfc3339);
    Node {
        monitor: monitor.to_string(),
        name: text(&varz["server_name"]),
        id: text(&varz["server_id"]),
        version: text(&varz["version"]),
        uptime: text(&varz["uptime"]),
        connections: count(&varz["connections"]),
        subscriptions: count(&varz["subscriptions"]),
        in_msgs: count(&varz["in_msgs"]),
        out_msgs: count(&varz["out_msgs"]),
        in_bytes: count(&varz["in_bytes"]),
        out_bytes: count(&varz["out_bytes"]),
        streams: from_jsz("streams"),
        consumers: from_jsz("consumers"),
        storage_bytes: from_jsz("storage"),
        memory_bytes: from_jsz("memory"),
        cluster: text(&varz["cluster"]["name"]),
        routes: count(&varz["routes"]),
        gateways: length(&varz["gateway"]["gateways"]),
        mem: count(&varz["mem"]),
        cpu: varz["cpu"].as_f64().unwrap_or(0.0),
        slow_consumers: count(&varz["slow_consumers"]),
        uptime_seconds: started
            .and_then(|started| now.duration_since(started).ok())
            .map_or(0, |uptime| uptime.as_secs()),
        rtt_us: rtt.as_micros() as u64,
    }
}

async fn read_node(monitor: &str, timeout: Duration) -> Result<Node, CliError> {
    let started = Instant::now();
    let varz = monitor::get_json(monitor, "/varz", timeout).await?;
    let rtt = started.elapsed();
    let jsz = monitor::get_json(monitor, "/jsz", timeout).await.ok();
    Ok(node(monitor, &varz, jsz.as_ref(), SystemTime::now(), rtt))
}

fn optional(value: Option<u64>) -> String {
    value.map_or_else(|| "-".into(), |value| value.to_string())
}

/// The nats CLI's `CompactStrings`: the dot-separated parts every name
/// shares at the same place, from the last part of the shortest name back
/// (never its first), are dropped.
pub fn compact_names(names: &[String]) -> Vec<String> {
    let parts: Vec<Vec<&str>> = names.iter().map(|name| name.split('.').collect()).collect();
    let Some(shortest) = parts.iter().map(Vec::len).min() else {
        return Vec::new();
    };
    let mut suffix = String::new();
    for index in (1..shortest).rev() {
        let part = parts[0][index];
        if parts.iter().all(|name| name[index] == part) {
            suffix = format!(".{part}{suffix}");
        } else {
            break;
        }
    }
    names
        .iter()
        .map(|name| name.strip_suffix(&suffix).unwrap_or(name).to_string())
        .collect()
}

/// Orders `nodes` as the nats CLI's `server ls --sort`: numbers largest
/// first, names and round trips smallest first; `reverse` flips it.
pub fn sort_nodes(nodes: &mut [Node], key: LsSort, reverse: bool) {
    use std::cmp::Ordering;
    nodes.sort_by(|a, b| {
        let by_name = a.name.cmp(&b.name);
        let order = match key {
            LsSort::Name => by_name,
            LsSort::Cluster => a.cluster.cmp(&b.cluster).then(by_name),
            LsSort::Conns => b.connections.cmp(&a.connections),
            LsSort::Subs => b.subscriptions.cmp(&a.subscriptions),
            LsSort::Routes => b.routes.cmp(&a.routes).then(by_name),
            LsSort::Gw => b.gateways.cmp(&a.gateways).then(by_name),
            LsSort::Mem => b.mem.cmp(&a.mem),
            LsSort::Cpu => b.cpu.partial_cmp(&a.cpu).unwrap_or(Ordering::Equal),
            LsSort::Slow => b.slow_consumers.cmp(&a.slow_consumers),
            LsSort::Uptime => b.uptime_seconds.cmp(&a.uptime_seconds),
            LsSort::Rtt => a.rtt_us.cmp(&b.rtt_us),
        };
        if reverse {
            order.reverse()
        } else {
            order
        }
    });
}

fn info_rows(node: &Node) -> Vec<(&'static str, String)> {
    let bytes = |value: Option<u64>| value.map_or_else(|| "-".into(), format_bytes);
    vec![
        ("Name", node.name.clone()),
        ("ID", node.id.clone()),
        ("Version", node.version.clone()),
        ("Cluster", node.cluster.clone()),
        ("Uptime", node.uptime.clone()),
        ("Connections", node.connections.to_string()),
        ("Subscriptions", node.subscriptions.to_string()),
        ("Routes", node.routes.to_string()),
        ("Messages in", node.in_msgs.to_string()),
        ("Messages out", node.out_msgs.to_string()),
        ("Bytes in", format_bytes(node.in_bytes)),
        ("Bytes out", format_bytes(node.out_bytes)),
        ("Memory", format_bytes(node.mem)),
        ("Slow consumers", node.slow_consumers.to_string()),
        ("Streams", optional(node.streams)),
        ("Consumers", optional(node.consumers)),
        ("File storage", bytes(node.storage_bytes)),
        ("Memory storage", bytes(node.memory_bytes)),
    ]
}

pub async fn info(args: InfoArgs, timeout: Duration) -> Result<(), CliError> {
    refuse_archive(&args.archive)?;
    let urls = monitors(&args.monitor);
    let node = match &args.node {
        None => {
            read_node(
                urls.first().map_or(MONITOR_DEFAULT, String::as_str),
                timeout,
            )
            .await?
        }
        Some(wanted) => {
            let mut found = None;
            for url in &urls {
                let node = read_node(url, timeout).await?;
                if &node.name == wanted || &node.id == wanted {
                    found = Some(node);
                    break;
                }
            }
            found.ok_or_else(|| CliError::Failed {
                action: format!("server info {wanted}"),
                reason: format!("no node of that name or id among {}", args.monitor),
            })?
        }
    };
    if args.json {
        line(serde_json::to_string_pretty(&node).expect("a node serialises"));
    } else {
        line(format_args!("Server information for {}\n", node.name));
        output::table(&info_rows(&node));
    }
    Ok(())
}

pub const LS_HEADER: [&str; 13] = [
    "Name",
    "Cluster",
    "Version",
    "Uptime",
    "Conns",
    "Subs",
    "Routes",
    "Msgs in",
    "Msgs out",
    "Bytes in",
    "Bytes out",
    "Streams",
    "RTT",
];

fn ls_row(node: &Node, name: &str) -> Vec<String> {
    vec![
        name.to_string(),
        node.cluster.clone(),
        node.version.clone(),
        node.uptime.clone(),
        node.connections.to_string(),
        node.subscriptions.to_string(),
        node.routes.to_string(),
        node.in_msgs.to_string(),
        node.out_msgs.to_string(),
        format_bytes(node.in_bytes),
        format_bytes(node.out_bytes),
        optional(node.streams),
        crate::units::format_duration(Duration::from_micros(node.rtt_us)),
    ]
}

/// Every node given, one row each; a node that cannot be read is named on
/// stderr and fails the command after the others are shown.
pub async fn ls(args: LsArgs, timeout: Duration) -> Result<(), CliError> {
    refuse_archive(&args.archive)?;
    let mut nodes = Vec::new();
    let mut failures = Vec::new();
    for monitor in &args.monitor {
        match read_node(monitor, timeout).await {
            Ok(node) => nodes.push(node),
            Err(error) => failures.push(error),
        }
    }
    sort_nodes(&mut nodes, args.sort, args.reverse);
    if args.json {
        line(serde_json::to_string_pretty(&nodes).expect("nodes serialise"));
    } else {
        let names: Vec<String> = nodes.iter().map(|node| node.name.clone()).collect();
        let names = if crate::stream::switch(args.compact, args.no_compact).unwrap_or(true) {
            compact_names(&names)
        } else {
            names
        };
        let rows: Vec<Vec<String>> = nodes
            .iter()
            .zip(&names)
            .map(|(node, name)| ls_row(node, name))
            .collect();
        print!("{}", output::columns(&LS_HEADER, &rows));
    }
    let unreachable = failures.len();
    if let Some(first) = failures.into_iter().next() {
        return Err(CliError::Failed {
            action: "server ls".into(),
            reason: format!(
                "{unreachable} of {} nodes unreadable: {first}",
                args.monitor.len()
            ),
        });
    }
    match args.expect {
        Some(expected) if nodes.len() < expected => Err(CliError::Failed {
            action: "server ls".into(),
            reason: format!("{} of {expected} nodes expected answered", nodes.len()),
        }),
        _ => Ok(()),
    }
}

/// One replica of a stream as `/jsz` reports it.
#[derive(Debug, Serialize, PartialEq)]
pub struct Replica {
    pub name: String,
    pub current: bool,
    pub offline: bool,
    /// Entries behind the leader (0 when the answer omits it).
    pub lag: u64,
    pub active: String,
}

/// One stream's line of the JetStream report.
#[derive(Debug, Serialize, PartialEq)]
pub struct StreamReport {
    pub name: String,
    pub replicas: u64,
    pub leader: String,
    pub messages: u64,
    pub bytes: u64,
    pub consumers: u64,
    /// The followers (the leader is not listed).
    pub followers: Vec<Replica>,
    /// Why the stream cannot serve (tern's `failure`), if it cannot.
    pub failure: Option<String>,
}

/// Per stream from `/jsz?accounts=true&streams=true&config=true`.
pub fn stream_reports(jsz: &Value) -> Vec<StreamReport> {
    let mut reports: Vec<StreamReport> = stream_details(jsz)
        .into_iter()
        .map(|detail| {
            // nats-server nests the counts under `state`; tern does not.
            let state = if detail["state"].is_object() {
                &detail["state"]
            } else {
                detail
            };
            let cluster = &detail["cluster"];
            let followers: Vec<Replica> = cluster["replicas"]
                .as_array()
                .map(|replicas| {
                    replicas
                        .iter()
                        .map(|replica| Replica {
                            name: text(&replica["name"]),
                            current: replica["current"].as_bool().unwrap_or(false),
                            offline: replica["offline"].as_bool().unwrap_or(false),
                            lag: count(&replica["lag"]),
                            active: replica["active"]
                                .as_u64()
                                .map(|ns| crate::units::format_duration(Duration::from_nanos(ns)))
                                .unwrap_or_else(|| text(&replica["active"])),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let replicas = detail["config"]["num_replicas"]
                .as_u64()
                .unwrap_or(followers.len() as u64 + 1);
            StreamReport {
                name: text(&detail["name"]),
                replicas,
                leader: text(&cluster["leader"]),
                messages: count(&state["messages"]),
                bytes: count(&state["bytes"]),
                consumers: count(&state["consumer_count"]),
                followers,
                failure: detail["failure"].as_str().map(str::to_string),
            }
        })
        .collect();
    reports.sort_by(|a, b| a.name.cmp(&b.name));
    reports
}

pub const REPORT_HEADER: [&str; 8] = [
    "Stream",
    "Replicas",
    "Leader",
    "Messages",
    "Bytes",
    "Consumers",
    "Followers",
    "Failure",
];

fn report_row(report: &StreamReport) -> Vec<String> {
    let followers: Vec<String> = report
        .followers
        .iter()
        .map(|replica| {
            let state = match (replica.offline, replica.current) {
                (true, _) => "offline",
                (false, true) => "current",
                (false, false) => "behind",
            };
            format!("{} ({state}, lag {})", replica.name, replica.lag)
        })
        .collect();
    vec![
        report.name.clone(),
        report.replicas.to_string(),
        if report.leader.is_empty() {
            "-".into()
        } else {
            report.leader.clone()
        },
        report.messages.to_string(),
        format_bytes(report.bytes),
        report.consumers.to_string(),
        if followers.is_empty() {
            "-".into()
        } else {
            followers.join(", ")
        },
        report.failure.clone().unwrap_or_default(),
    ]
}

/// The stream details of one account: nats-server lists them under each
/// account of `/jsz?accounts=true`; tern's top-level list is its global
/// account's (`$G`).
fn account_details<'a>(jsz: &'a Value, account: &str) -> Vec<&'a Value> {
    let mut details: Vec<&Value> = Vec::new();
    if account == "$G" {
        details.extend(jsz["stream_detail"].as_array().into_iter().flatten());
    }
    for entry in jsz["account_details"].as_array().into_iter().flatten() {
        if entry["name"].as_str() == Some(account) || entry["id"].as_str() == Some(account) {
            details.extend(entry["stream_detail"].as_array().into_iter().flatten());
        }
    }
    details
}

/// The rows `server report jetstream` prints: the streams of `jsz` (of
/// `account` when given) with a replica on `host` (when given), ordered
/// by `sort`, at most `limit`.
pub fn report_rows(jsz: &Value, args: &JetStreamReportArgs, reverse: bool) -> Vec<StreamReport> {
    let mut reports = match &args.account {
        Some(account) => {
            let details: Vec<Value> = account_details(jsz, account).into_iter().cloned().collect();
            stream_reports(&serde_json::json!({ "stream_detail": details }))
        }
        None => stream_reports(jsz),
    };
    if let Some(host) = &args.host {
        reports.retain(|report| {
            &report.leader == host || report.followers.iter().any(|replica| &replica.name == host)
        });
    }
    if let Some(cluster) = &args.cluster {
        if jsz["meta_cluster"]["name"].as_str() != Some(cluster.as_str()) {
            reports.clear();
        }
    }
    let problems = |report: &StreamReport| {
        report
            .followers
            .iter()
            .filter(|replica| replica.offline || !replica.current)
            .count()
            + usize::from(report.failure.is_some())
    };
    reports.sort_by(|a, b| {
        let by_name = a.name.cmp(&b.name);
        let order = match args.sort {
            ReportSort::Name => by_name,
            ReportSort::Cluster => a.leader.cmp(&b.leader).then(by_name),
            ReportSort::Streams => b.replicas.cmp(&a.replicas).then(by_name),
            ReportSort::Consumers => b.consumers.cmp(&a.consumers).then(by_name),
            ReportSort::Msgs => b.messages.cmp(&a.messages).then(by_name),
            ReportSort::Mbytes => b.bytes.cmp(&a.bytes).then(by_name),
            ReportSort::Api => problems(b).cmp(&problems(a)).then(by_name),
        };
        if reverse {
            order.reverse()
        } else {
            order
        }
    });
    if let Some(limit) = args.limit {
        reports.truncate(limit);
    }
    reports
}

/// `-l`: how many of the streams each node leads.
pub fn leader_counts(reports: &[StreamReport]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for report in reports.iter().filter(|report| !report.leader.is_empty()) {
        *counts.entry(report.leader.clone()).or_insert(0) += 1;
    }
    counts
}

fn print_report(reports: &mut [StreamReport], args: &JetStreamReportArgs) {
    if args.json {
        line(serde_json::to_string_pretty(&reports).expect("reports serialise"));
        return;
    }
    if crate::stream::switch(args.compact, args.no_compact).unwrap_or(true) {
        let mut names: Vec<String> = reports
            .iter()
            .flat_map(|report| {
                std::iter::once(report.leader.clone())
                    .chain(report.followers.iter().map(|replica| replica.name.clone()))
            })
            .filter(|name| !name.is_empty())
            .collect();
        names.sort();
        names.dedup();
        let short: BTreeMap<String, String> =
            names.iter().cloned().zip(compact_names(&names)).collect();
        let shorten = |name: &mut String| {
            if let Some(short) = short.get(name.as_str()) {
                *name = short.clone();
            }
        };
        for report in reports.iter_mut() {
            shorten(&mut report.leader);
            for replica in &mut report.followers {
                shorten(&mut replica.name);
            }
        }
    }
    let rows: Vec<Vec<String>> = reports.iter().map(report_row).collect();
    print!("{}", output::columns(&REPORT_HEADER, &rows));
    if args.leaders {
        line("");
        let rows: Vec<Vec<String>> = leader_counts(reports)
            .into_iter()
            .map(|(node, streams)| vec![node, streams.to_string()])
            .collect();
        print!("{}", output::columns(&["Leader", "Streams led"], &rows));
    }
}

pub async fn report_jetstream(arguments: ReportArgs, timeout: Duration) -> Result<(), CliError> {
    let ReportCommand::Jetstream(args) = arguments.command;
    refuse_archive(&args.archive)?;
    if !args.tags.is_empty() {
        return Err(CliError::Usage(
            "--tags: the monitoring endpoints do not name the nodes' tags; --host picks a node"
                .into(),
        ));
    }
    let refreshes = match args.watch {
        Some(0) => return Err(CliError::Usage("--watch: at least 1 second".into())),
        Some(_) => WATCH_REFRESHES_MAX,
        None => 1,
    };
    for refresh in 0..refreshes {
        if refresh > 0 {
            tokio::time::sleep(Duration::from_secs(args.watch.unwrap_or(1))).await;
            line("");
        }
        let jsz = monitor::get_json(
            &args.monitor,
            "/jsz?accounts=true&streams=true&config=true",
            timeout,
        )
        .await?;
        let mut reports = report_rows(&jsz, &args, arguments.reverse);
        print_report(&mut reports, &args);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_node_from_varz_and_jsz() {
        let varz = json!({"server_name": "n1", "server_id": "ID", "version": "2.15.1",
            "uptime": "1m", "connections": 2, "subscriptions": 3, "in_msgs": 4,
            "out_msgs": 5, "in_bytes": 6, "out_bytes": 7});
        let jsz = json!({"streams": 1, "consumers": 2, "storage": 99, "memory": 0});
        let node = node(
            "http://m",
            &varz,
            Some(&jsz),
            std::time::UNIX_EPOCH,
            Duration::ZERO,
        );
        assert_eq!((node.name.as_str(), node.in_bytes), ("n1", 6));
        assert_eq!((node.streams, node.storage_bytes), (Some(1), Some(99)));
        let off = super::node(
            "http://m",
            &varz,
            Some(&json!({"disabled": true})),
            std::time::UNIX_EPOCH,
            Duration::ZERO,
        );
        assert_eq!(off.streams, None);
    }

    #[test]
    fn streams_from_both_layouts() {
        let tern = json!({"stream_detail": [{"name": "S", "messages": 3, "bytes": 99,
            "consumer_count": 1, "failure": null, "cluster": {"leader": "n1",
            "replicas": [{"name": "n2", "current": true, "lag": 0},
                         {"name": "n3", "current": false, "lag": 7},
                         {"name": "n4", "current": false, "offline": true, "active": 0}]}}]});
        let reports = stream_reports(&tern);
        assert_eq!(reports[0].replicas, 4);
        assert_eq!(reports[0].messages, 3);
        assert_eq!(reports[0].followers[1].lag, 7);
        let row = report_row(&reports[0]);
        assert_eq!(
            row[6],
            "n2 (current, lag 0), n3 (behind, lag 7), n4 (offline, lag 0)"
        );
        let nats = json!({"account_details": [{"stream_detail": [{"name": "T",
            "config": {"num_replicas": 1}, "cluster": {"leader": "a"},
            "state": {"messages": 2, "bytes": 10, "consumer_count": 0}}]}]});
        let reports = stream_reports(&nats);
        assert_eq!(
            (
                reports[0].replicas,
                reports[0].messages,
                reports[0].leader.as_str()
            ),
            (1, 2, "a")
        );
    }

    #[test]
    fn names_compacted_as_the_nats_cli_does() {
        let names: Vec<String> = ["n1.east.example.com", "n2.east.example.com"]
            .map(String::from)
            .to_vec();
        assert_eq!(compact_names(&names), ["n1", "n2"]);
        let names: Vec<String> = ["a.x.com", "b.y.com"].map(String::from).to_vec();
        assert_eq!(compact_names(&names), ["a.x", "b.y"]);
        let names: Vec<String> = ["n1", "n2"].map(String::from).to_vec();
        assert_eq!(compact_names(&names), ["n1", "n2"]);
    }

    fn node_named(name: &str, connections: u64, rtt_us: u64) -> Node {
        let varz = json!({"server_name": name, "connections": connections});
        let mut node = node(
            "http://m",
            &varz,
            None,
            std::time::UNIX_EPOCH,
            Duration::ZERO,
        );
        node.rtt_us = rtt_us;
        node
    }

    #[test]
    fn nodes_sorted_as_the_nats_cli_sorts_them() {
        let mut nodes = vec![
            node_named("b", 1, 30),
            node_named("a", 5, 20),
            node_named("c", 3, 10),
        ];
        let names = |nodes: &[Node]| {
            nodes
                .iter()
                .map(|node| node.name.clone())
                .collect::<Vec<_>>()
        };
        sort_nodes(&mut nodes, LsSort::Rtt, false);
        assert_eq!(names(&nodes), ["c", "a", "b"]);
        sort_nodes(&mut nodes, LsSort::Conns, false);
        assert_eq!(names(&nodes), ["a", "c", "b"]);
        sort_nodes(&mut nodes, LsSort::Name, true);
        assert_eq!(names(&nodes), ["c", "b", "a"]);
    }

    #[test]
    fn the_report_filtered_sorted_and_led() {
        use clap::Parser;
        #[derive(Debug, Parser)]
        struct Harness {
            #[command(flatten)]
            report: ReportArgs,
        }
        let parse = |line: &[&str]| {
            let harness =
                Harness::try_parse_from(std::iter::once("report").chain(line.iter().copied()))
                    .unwrap_or_else(|error| panic!("{line:?}: {error}"));
            let reverse = harness.report.reverse;
            let ReportCommand::Jetstream(args) = harness.report.command;
            (args, reverse)
        };
        let jsz = json!({"meta_cluster": {"name": "C"}, "account_details": [
            {"name": "A", "stream_detail": [
                {"name": "X", "cluster": {"leader": "n1", "replicas": [{"name": "n2", "current": true}]},
                 "state": {"messages": 5, "bytes": 50}},
                {"name": "Y", "cluster": {"leader": "n2", "replicas": [{"name": "n3", "current": false}]},
                 "state": {"messages": 9, "bytes": 10}}]},
            {"name": "B", "stream_detail": [
                {"name": "Z", "cluster": {"leader": "n1"}, "state": {"messages": 1, "bytes": 99}}]}]});
        let names = |reports: &[StreamReport]| {
            reports
                .iter()
                .map(|report| report.name.clone())
                .collect::<Vec<_>>()
        };
        let (args, reverse) = parse(&["jetstream", "--sort", "msgs"]);
        assert_eq!(names(&report_rows(&jsz, &args, reverse)), ["Y", "X", "Z"]);
        let (args, reverse) = parse(&["-R", "js", "--sort", "bytes", "2"]);
        assert_eq!(names(&report_rows(&jsz, &args, reverse)), ["Y", "X"]);
        let (args, reverse) = parse(&["js", "--account", "A", "--host", "n3"]);
        assert_eq!(names(&report_rows(&jsz, &args, reverse)), ["Y"]);
        let (args, reverse) = parse(&["js", "--sort", "err"]);
        assert_eq!(names(&report_rows(&jsz, &args, reverse))[0], "Y");
        let (args, reverse) = parse(&["js", "--cluster", "other"]);
        assert!(report_rows(&jsz, &args, reverse).is_empty());
        let (args, reverse) = parse(&["js", "-l"]);
        let counts = leader_counts(&report_rows(&jsz, &args, reverse));
        assert_eq!(counts.get("n1"), Some(&2));
        assert_eq!(counts.get("n2"), Some(&1));
    }
}
