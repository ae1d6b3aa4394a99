//! `tern server info|ls|report jetstream`: per node and per stream/replica
//! tables from the monitoring endpoints (`/varz`, `/jsz`), readable in a
//! terminal, `--json` for machines. The summaries are pure functions of
//! the endpoints' answers (unit-tested below); tern and nats-server lay
//! `/jsz` out differently (streams' state at the top of a detail or under
//! `state`, streams at the top or under each account), both are read.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::Value;

use crate::check::stream_details;
use crate::error::CliError;
use crate::monitor;
use crate::output::{self, line};
use crate::units::format_bytes;

/// The monitoring URL when none is given (nats-server's `-m 8222`).
pub const MONITOR_DEFAULT: &str = "http://127.0.0.1:8222";

#[derive(Debug, Args)]
pub struct InfoArgs {
    /// The server's monitoring URL
    #[arg(long, value_name = "URL", default_value = MONITOR_DEFAULT)]
    pub monitor: String,
    /// Print JSON
    #[arg(short = 'j', long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LsArgs {
    /// The nodes' monitoring URLs, comma separated or repeated
    #[arg(long, value_name = "URL[,URL…]", value_delimiter = ',', default_value = MONITOR_DEFAULT)]
    pub monitor: Vec<String>,
    /// Print JSON
    #[arg(short = 'j', long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ReportCommand {
    /// Per stream: replicas, leader, messages, bytes, each replica's lag
    #[command(visible_alias = "js")]
    Jetstream(InfoArgs),
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
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or("").to_string()
}

fn count(value: &Value) -> u64 {
    value.as_u64().unwrap_or(0)
}

/// `jsz` is None when `/jsz` could not be read (JetStream off).
pub fn node(monitor: &str, varz: &Value, jsz: Option<&Value>) -> Node {
    let jetstream = jsz.filter(|jsz| jsz["disabled"].as_bool() != Some(true));
    let from_jsz = |key: &str| jetstream.and_then(|jsz| jsz[key].as_u64());
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
    }
}

async fn read_node(monitor: &str, timeout: Duration) -> Result<Node, CliError> {
    let varz = monitor::get_json(monitor, "/varz", timeout).await?;
    let jsz = monitor::get_json(monitor, "/jsz", timeout).await.ok();
    Ok(node(monitor, &varz, jsz.as_ref()))
}

fn optional(value: Option<u64>) -> String {
    value.map_or_else(|| "-".into(), |value| value.to_string())
}

fn info_rows(node: &Node) -> Vec<(&'static str, String)> {
    let bytes = |value: Option<u64>| value.map_or_else(|| "-".into(), format_bytes);
    vec![
        ("Name", node.name.clone()),
        ("ID", node.id.clone()),
        ("Version", node.version.clone()),
        ("Uptime", node.uptime.clone()),
        ("Connections", node.connections.to_string()),
        ("Subscriptions", node.subscriptions.to_string()),
        ("Messages in", node.in_msgs.to_string()),
        ("Messages out", node.out_msgs.to_string()),
        ("Bytes in", format_bytes(node.in_bytes)),
        ("Bytes out", format_bytes(node.out_bytes)),
        ("Streams", optional(node.streams)),
        ("Consumers", optional(node.consumers)),
        ("File storage", bytes(node.storage_bytes)),
        ("Memory storage", bytes(node.memory_bytes)),
    ]
}

pub async fn info(args: InfoArgs, timeout: Duration) -> Result<(), CliError> {
    let node = read_node(&args.monitor, timeout).await?;
    if args.json {
        line(serde_json::to_string_pretty(&node).expect("a node serialises"));
    } else {
        line(format_args!("Server information for {}\n", node.name));
        output::table(&info_rows(&node));
    }
    Ok(())
}

pub const LS_HEADER: [&str; 10] = [
    "Name",
    "Version",
    "Uptime",
    "Conns",
    "Subs",
    "Msgs in",
    "Msgs out",
    "Bytes in",
    "Bytes out",
    "Streams",
];

fn ls_row(node: &Node) -> Vec<String> {
    vec![
        node.name.clone(),
        node.version.clone(),
        node.uptime.clone(),
        node.connections.to_string(),
        node.subscriptions.to_string(),
        node.in_msgs.to_string(),
        node.out_msgs.to_string(),
        format_bytes(node.in_bytes),
        format_bytes(node.out_bytes),
        optional(node.streams),
    ]
}

/// Every node given, one row each; a node that cannot be read is named on
/// stderr and fails the command after the others are shown.
pub async fn ls(args: LsArgs, timeout: Duration) -> Result<(), CliError> {
    let mut nodes = Vec::new();
    let mut failures = Vec::new();
    for monitor in &args.monitor {
        match read_node(monitor, timeout).await {
            Ok(node) => nodes.push(node),
            Err(error) => failures.push(error),
        }
    }
    if args.json {
        line(serde_json::to_string_pretty(&nodes).expect("nodes serialise"));
    } else {
        let rows: Vec<Vec<String>> = nodes.iter().map(ls_row).collect();
        print!("{}", output::columns(&LS_HEADER, &rows));
    }
    let unreachable = failures.len();
    match failures.into_iter().next() {
        None => Ok(()),
        Some(first) => Err(CliError::Failed {
            action: "server ls".into(),
            reason: format!(
                "{unreachable} of {} nodes unreadable: {first}",
                args.monitor.len()
            ),
        }),
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

pub async fn report_jetstream(args: InfoArgs, timeout: Duration) -> Result<(), CliError> {
    let jsz = monitor::get_json(
        &args.monitor,
        "/jsz?accounts=true&streams=true&config=true",
        timeout,
    )
    .await?;
    let reports = stream_reports(&jsz);
    if args.json {
        line(serde_json::to_string_pretty(&reports).expect("reports serialise"));
    } else {
        let rows: Vec<Vec<String>> = reports.iter().map(report_row).collect();
        print!("{}", output::columns(&REPORT_HEADER, &rows));
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
        let node = node("http://m", &varz, Some(&jsz));
        assert_eq!((node.name.as_str(), node.in_bytes), ("n1", 6));
        assert_eq!((node.streams, node.storage_bytes), (Some(1), Some(99)));
        let off = super::node("http://m", &varz, Some(&json!({"disabled": true})));
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
}
