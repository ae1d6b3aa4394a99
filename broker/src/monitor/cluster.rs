//! What `/jsz`, `/healthz` and `/metrics` add in a cluster, rendered from
//! the views of `jetstream::replication` (pure; the HTTP side is
//! `http.rs`).
//!
//! - `/jsz`: nats-server's `meta_cluster` object (its field names), plus a
//!   `raft` object of tern's (term, indexes); each stream of
//!   `?streams=true` gets its `cluster` block (STREAM.INFO's shape) and,
//!   when replicated, its own `raft` object with each replica's lag.
//! - `/healthz`: nats-server's texts for the meta layer and for a stream
//!   that is not current.
//! - `/metrics`: the replication families. Per-stream series are capped at
//!   [`LAG_STREAMS_MAX`] streams (the most behind first), so a node with
//!   thousands of streams does not send thousands of series; the rest are
//!   counted in `tern_raft_replica_lag_streams_omitted`.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::jetstream::api::json;
use crate::jetstream::api::responses::ClusterBlock;
use crate::jetstream::replication::{
    GroupView, MetaStatus, NotCurrent, RaftReport, StreamGroupReport,
};
use crate::jetstream::Gathered;

/// Streams whose replicas' lag `/metrics` lists (series: this times the
/// replicas per stream).
pub const LAG_STREAMS_MAX: usize = 64;

/// nats-server's reason for a stream replica that is not current.
pub const STREAM_GROUP_UNHEALTHY: &str = "group node unhealthy";
/// nats-server's reason for a stream placed here that does not run.
pub const STREAM_NOT_FOUND: &str = "stream not found";

/// `/jsz`'s `meta_cluster`: nats-server's `MetaClusterInfo` fields, and
/// tern's `raft` details.
pub fn meta_cluster_json(status: &MetaStatus) -> Value {
    let mut meta = json!({
        "name": status.cluster,
        "cluster_size": status.voters.len(),
        "quorum_needed": status.voters.len() / 2 + 1,
        // Requests queued for the meta leader: tern answers each as it
        // comes (none wait in a queue).
        "pending": 0,
        "pending_requests": 0,
        "pending_infos": 0,
        "snapshot": {
            "pending_entries": status.pending_entries,
            "pending_size": status.pending_bytes,
        },
    });
    if let Some(leader) = &status.leader_name {
        meta["leader"] = json!(leader);
    }
    if let Some(leader) = status.view.as_ref().and_then(|view| view.leader) {
        meta["peer"] = json!(format!("{leader:x}"));
    }
    if !status.replicas.is_empty() {
        meta["replicas"] = cluster_json(&ClusterBlock {
            replicas: status.replicas.clone(),
            ..ClusterBlock::default()
        })["replicas"]
            .clone();
    }
    let mut raft = match &status.view {
        Some(view) => raft_json(view),
        None => json!({ "running": false }),
    };
    raft["applied_state"] = json!(status.applied_index);
    raft["caught_up"] = json!(status.caught_up);
    if let Some(failure) = &status.failure {
        raft["failure"] = json!(failure);
    }
    meta["raft"] = raft;
    meta
}

/// `/jsz`'s `meta_cluster` in nats-server's field order (`MetaClusterInfo`:
/// `name`, `leader`, `peer`, `replicas`, `cluster_size`, `quorum_needed`,
/// `pending`, `pending_requests`, `pending_infos`, `snapshot`), then
/// tern's `raft`: [`meta_cluster_json`]'s fields.
pub fn write_meta_cluster(out: &mut String, status: &MetaStatus) {
    let value = meta_cluster_json(status);
    out.push_str("{\"name\":");
    json::write_string(out, &status.cluster);
    for key in ["leader", "peer"] {
        if let Some(text) = value[key].as_str() {
            let _ = write!(out, ",\"{key}\":");
            json::write_string(out, text);
        }
    }
    if !status.replicas.is_empty() {
        // `{"replicas":[…]}` of a block with nothing else: its member.
        let mut block = String::with_capacity(256);
        ClusterBlock {
            replicas: status.replicas.clone(),
            ..ClusterBlock::default()
        }
        .write_json(&mut block);
        out.push(',');
        out.push_str(&block[1..block.len() - 1]);
    }
    for key in [
        "cluster_size",
        "quorum_needed",
        "pending",
        "pending_requests",
        "pending_infos",
    ] {
        let _ = write!(out, ",\"{key}\":{}", value[key]);
    }
    let _ = write!(
        out,
        ",\"snapshot\":{{\"pending_entries\":{},\"pending_size\":{}}},\"raft\":{}}}",
        status.pending_entries, status.pending_bytes, value["raft"]
    );
}

/// A `cluster` block exactly as STREAM.INFO writes it.
pub fn cluster_json(block: &ClusterBlock) -> Value {
    let mut text = String::with_capacity(128);
    block.write_json(&mut text);
    serde_json::from_str(&text).expect("a cluster block is JSON")
}

/// tern's Raft details of one group as this node sees it.
pub fn raft_json(view: &GroupView) -> Value {
    json!({
        "role": view.role_label(),
        "term": view.term,
        "commit": view.commit_index,
        "applied": view.applied_index,
        "last_index": view.last_index,
    })
}

/// `/jsz?streams=true`: a replicated stream's `raft` object: its group,
/// whether this replica is current, and (on the leader) each replica's
/// lag in entries.
pub fn stream_raft_json(report: &StreamGroupReport) -> Value {
    let mut raft = raft_json(&report.view);
    raft["group"] = json!(report.group);
    raft["current"] = json!(report.current.is_ok());
    if let Err(reason) = report.current {
        raft["not_current"] = json!(not_current_text(reason));
    }
    if report.view.is_leader() {
        let lag: Vec<Value> = report
            .replica_lag
            .iter()
            .map(|(name, lag)| json!({ "name": name, "lag": lag }))
            .collect();
        raft["replicas"] = Value::Array(lag);
    }
    raft
}

fn not_current_text(reason: NotCurrent) -> String {
    match reason {
        NotCurrent::NoLeader => "no leader".into(),
        NotCurrent::LeaderSilent => "the leader has not been heard from lately".into(),
        NotCurrent::Behind { backlog } => format!("{backlog} committed entries not applied"),
    }
}

/// One `/healthz` problem: nats-server's `HealthzError`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthProblem {
    /// `JETSTREAM` or `STREAM`.
    pub kind: &'static str,
    pub stream: Option<String>,
    pub error: String,
}

impl HealthProblem {
    fn stream(stream: &str, error: String) -> HealthProblem {
        HealthProblem {
            kind: "STREAM",
            stream: Some(stream.to_string()),
            error: format!("JetStream stream '$G > {stream}' {error}"),
        }
    }

    pub fn to_json(&self) -> Value {
        let mut value = json!({ "type": self.kind, "error": self.error });
        if let Some(stream) = &self.stream {
            value["account"] = json!("$G");
            value["stream"] = json!(stream);
        }
        value
    }
}

/// What keeps this node from being healthy, in nats-server's order: the
/// meta layer first (alone: nothing else is looked at while it is down),
/// then every stream of this node that is offline, stopped, missing or
/// not current, by name.
pub fn health_problems(meta: Option<&MetaStatus>, parts: &[Gathered]) -> Vec<HealthProblem> {
    if let Some(Err(error)) = meta.map(MetaStatus::health) {
        return vec![HealthProblem {
            kind: "JETSTREAM",
            stream: None,
            error: error.to_string(),
        }];
    }
    let mut problems: Vec<HealthProblem> = Vec::new();
    for part in parts {
        for stream in &part.streams {
            if let Some(failure) = &stream.failure {
                problems.push(HealthProblem::stream(
                    &stream.name,
                    format!("write error: {failure}"),
                ));
            }
        }
        for stream in &part.offline {
            problems.push(HealthProblem::stream(
                &stream.name,
                format!("is offline: {}", stream.reason),
            ));
        }
        for name in &part.missing {
            problems.push(HealthProblem::stream(
                name,
                format!("is not current: {STREAM_NOT_FOUND}"),
            ));
        }
        for report in part.stream_groups.iter().filter(|r| r.current.is_err()) {
            problems.push(HealthProblem::stream(
                &report.name,
                format!("is not current: {STREAM_GROUP_UNHEALTHY}"),
            ));
        }
    }
    problems.sort_by(|a, b| (&a.stream, &a.error).cmp(&(&b.stream, &b.error)));
    problems.dedup_by(|a, b| a.stream == b.stream);
    problems
}

/// `/healthz`'s query options, nats-server's names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthOptions {
    /// `js-enabled-only` (or the deprecated `js-enabled`): only whether
    /// JetStream is on.
    pub jetstream_enabled_only: bool,
    /// `js-server-only`: the server alone, nothing of JetStream.
    pub server_only: bool,
    /// `js-meta-only`: the meta layer, no stream.
    pub meta_only: bool,
    /// `account`: that account's streams only (tern has `$G` alone).
    pub account: Option<String>,
    /// `stream`, with `account`: that stream only.
    pub stream: Option<String>,
    /// `details`: problems in `errors` only (else also the first as `error`).
    pub details: bool,
}

/// A bad `/healthz` query: nats-server's 400 text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadBoolean {
    pub parameter: String,
    pub value: String,
}

impl std::fmt::Display for BadBoolean {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "Error decoding boolean for '{}': strconv.ParseBool: parsing {:?}: invalid syntax",
            self.parameter, self.value
        )
    }
}

impl std::error::Error for BadBoolean {}

/// A query parameter as nats-server's `decodeBool` reads it (Go's
/// `strconv.ParseBool`; absent or empty: false).
pub fn parse_go_bool(
    query: &std::collections::BTreeMap<String, String>,
    parameter: &str,
) -> Result<bool, BadBoolean> {
    match query.get(parameter).map(String::as_str) {
        None | Some("") => Ok(false),
        Some("1" | "t" | "T" | "TRUE" | "true" | "True") => Ok(true),
        Some("0" | "f" | "F" | "FALSE" | "false" | "False") => Ok(false),
        Some(value) => Err(BadBoolean {
            parameter: parameter.to_string(),
            value: value.to_string(),
        }),
    }
}

impl HealthOptions {
    /// From the query's decoded pairs; booleans as Go's `ParseBool`.
    pub fn parse(
        query: &std::collections::BTreeMap<String, String>,
    ) -> Result<HealthOptions, BadBoolean> {
        let boolean = |parameter: &str| parse_go_bool(query, parameter);
        let text = |parameter: &str| {
            query
                .get(parameter)
                .filter(|value| !value.is_empty())
                .cloned()
        };
        Ok(HealthOptions {
            jetstream_enabled_only: boolean("js-enabled")? | boolean("js-enabled-only")?,
            server_only: boolean("js-server-only")?,
            meta_only: boolean("js-meta-only")?,
            details: boolean("details")?,
            account: text("account"),
            stream: text("stream"),
        })
    }
}

/// The answer to `/healthz`: a status code and the problems (none: ok).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub status_code: u16,
    pub problems: Vec<HealthProblem>,
}

impl Health {
    /// nats-server's body (without `status_code`, which it drops over
    /// HTTP): `ok`, or `unavailable` with the first problem as `error`
    /// and all in `errors` (only `errors` with `details`).
    pub fn to_json(&self, details: bool) -> Value {
        let Some(first) = self.problems.first() else {
            return json!({"status": "ok"});
        };
        let mut body = json!({"status": "unavailable"});
        if !details {
            body["error"] = json!(first.error);
        }
        body["errors"] = Value::Array(self.problems.iter().map(HealthProblem::to_json).collect());
        body
    }
}

/// This node's health under `options` (nats-server's `healthz`): `None`
/// for the meta layer and `parts` when JetStream is off.
pub fn health(
    options: &HealthOptions,
    jetstream: Option<(Option<&MetaStatus>, &[Gathered])>,
) -> Health {
    let ok = Health {
        status_code: 200,
        problems: Vec::new(),
    };
    let Some((meta, parts)) = jetstream else {
        return ok;
    };
    if options.server_only || options.jetstream_enabled_only {
        return ok;
    }
    if let Some(Err(error)) = meta.map(MetaStatus::health) {
        return Health {
            status_code: 503,
            problems: vec![HealthProblem {
                kind: "JETSTREAM",
                stream: None,
                error: error.to_string(),
            }],
        };
    }
    if options.meta_only {
        return ok;
    }
    let mut problems = health_problems(None, parts);
    if let Some(account) = &options.account {
        if account != "$G" {
            return Health {
                status_code: 404,
                problems: vec![HealthProblem {
                    kind: "ACCOUNT",
                    stream: None,
                    error: format!("JetStream account {account:?} not found"),
                }],
            };
        }
        if let Some(stream) = &options.stream {
            let here = parts.iter().any(|part| {
                part.streams.iter().any(|summary| &summary.name == stream)
                    || part.offline.iter().any(|offline| &offline.name == stream)
                    || part.missing.contains(stream)
                    || part
                        .stream_groups
                        .iter()
                        .any(|report| &report.name == stream)
            });
            if !here {
                return Health {
                    status_code: 404,
                    problems: vec![HealthProblem {
                        kind: "STREAM",
                        stream: Some(stream.clone()),
                        error: format!(
                            "JetStream stream {stream:?} not found on account {account:?}"
                        ),
                    }],
                };
            }
            problems.retain(|problem| problem.stream.as_ref() == Some(stream));
        }
    }
    Health {
        status_code: if problems.is_empty() { 200 } else { 503 },
        problems,
    }
}

/// Everything `/metrics` adds in a cluster.
pub struct ReplicationMetrics<'a> {
    pub meta: Option<&'a MetaStatus>,
    pub parts: &'a [Gathered],
    pub routes: Vec<ShardRoutes<'a>>,
}

/// One shard's routes.
pub struct ShardRoutes<'a> {
    pub shard: usize,
    /// Every node linked to since start (server name), open now or not.
    pub nodes: &'a [(String, bool)],
    /// Raft messages dropped for want of an open route.
    pub raft_dropped: u64,
}

/// Writes the replication families in Prometheus' text format.
pub fn write_replication_metrics(out: &mut String, metrics: &ReplicationMetrics) {
    let mut shards: Vec<(usize, RaftReport)> = metrics
        .parts
        .iter()
        .map(|part| (part.shard, part.raft))
        .collect();
    shards.sort_by_key(|(shard, _)| *shard);

    family(
        out,
        "tern_raft_groups",
        "gauge",
        "Raft groups on this shard (streams' and, on shard 0, the meta group) by role.",
    );
    for (shard, raft) in &shards {
        for (role, count) in [
            ("leader", raft.leaders),
            ("follower", raft.followers),
            ("candidate", raft.candidates),
        ] {
            let _ = writeln!(
                out,
                "tern_raft_groups{{shard=\"{shard}\",role=\"{role}\"}} {count}"
            );
        }
    }
    family(
        out,
        "tern_raft_elections_total",
        "counter",
        "Elections this shard's groups stood in.",
    );
    for (shard, raft) in &shards {
        let _ = writeln!(
            out,
            "tern_raft_elections_total{{shard=\"{shard}\"}} {}",
            raft.counters.elections
        );
    }
    family(
        out,
        "tern_raft_leader_changes_total",
        "counter",
        "New leaders (a leader per term) this shard's groups saw.",
    );
    for (shard, raft) in &shards {
        let _ = writeln!(
            out,
            "tern_raft_leader_changes_total{{shard=\"{shard}\"}} {}",
            raft.counters.leader_changes
        );
    }

    let reports: Vec<&StreamGroupReport> = metrics
        .parts
        .iter()
        .flat_map(|part| &part.stream_groups)
        .collect();
    family(
        out,
        "tern_raft_stream_groups_not_current",
        "gauge",
        "Replicated streams on this node whose replica here is not current (what /healthz checks).",
    );
    let not_current = reports.iter().filter(|r| r.current.is_err()).count();
    let _ = writeln!(out, "tern_raft_stream_groups_not_current {not_current}");
    write_lag(out, &reports);

    family(
        out,
        "tern_route_connected",
        "gauge",
        "1 while this shard's route to the peer node is open, 0 once it closed.",
    );
    for routes in &metrics.routes {
        let shard = routes.shard;
        for (peer, open) in routes.nodes {
            let _ = writeln!(
                out,
                "tern_route_connected{{shard=\"{shard}\",peer=\"{}\"}} {}",
                label(peer),
                u8::from(*open)
            );
        }
    }
    family(
        out,
        "tern_raft_messages_dropped_total",
        "counter",
        "Raft messages dropped because no open route reached their node.",
    );
    for routes in &metrics.routes {
        let _ = writeln!(
            out,
            "tern_raft_messages_dropped_total{{shard=\"{}\"}} {}",
            routes.shard, routes.raft_dropped
        );
    }

    if let Some(meta) = metrics.meta {
        write_meta(out, meta);
    }
}

/// Replica lag of the streams this node leads, the most behind first,
/// at most [`LAG_STREAMS_MAX`] streams.
fn write_lag(out: &mut String, reports: &[&StreamGroupReport]) {
    let most_behind = |report: &StreamGroupReport| {
        report
            .replica_lag
            .iter()
            .map(|(_, lag)| *lag)
            .max()
            .unwrap_or(0)
    };
    let mut led: Vec<&StreamGroupReport> = reports
        .iter()
        .copied()
        .filter(|report| report.view.is_leader())
        .collect();
    led.sort_by(|a, b| {
        most_behind(b)
            .cmp(&most_behind(a))
            .then(a.name.cmp(&b.name))
    });
    family(
        out,
        "tern_raft_replica_lag_entries",
        "gauge",
        "Entries a replica is behind this node's log, for the streams this node leads (the most behind first, capped).",
    );
    for report in led.iter().take(LAG_STREAMS_MAX) {
        for (peer, lag) in &report.replica_lag {
            let _ = writeln!(
                out,
                "tern_raft_replica_lag_entries{{stream=\"{}\",peer=\"{}\"}} {lag}",
                label(&report.name),
                label(peer)
            );
        }
    }
    family(
        out,
        "tern_raft_replica_lag_streams_omitted",
        "gauge",
        "Streams led here left out of tern_raft_replica_lag_entries by its cap.",
    );
    let omitted = led.len().saturating_sub(LAG_STREAMS_MAX);
    let _ = writeln!(out, "tern_raft_replica_lag_streams_omitted {omitted}");
}

fn write_meta(out: &mut String, meta: &MetaStatus) {
    let view = meta.view.as_ref();
    let gauges: [(&str, &str, u64); 5] = [
        (
            "tern_meta_leader",
            "1 while this node leads the meta group.",
            u64::from(view.is_some_and(GroupView::is_leader)),
        ),
        (
            "tern_meta_leader_known",
            "1 while this node knows a meta leader.",
            u64::from(view.is_some_and(|view| view.leader.is_some())),
        ),
        (
            "tern_meta_current",
            "1 while this node's meta state is current with its leader (what /healthz checks first).",
            u64::from(meta.health().is_ok()),
        ),
        (
            "tern_meta_term",
            "The meta group's term on this node.",
            view.map_or(0, |view| view.term),
        ),
        (
            "tern_meta_applied_index",
            "The meta log index this node's catalog has applied.",
            meta.applied_index,
        ),
    ];
    for (name, help, value) in gauges {
        family(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {value}");
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value in Prometheus' text format (backslash, quote, newline
/// escaped). Server and stream names cannot hold them, but a name never
/// breaks the format.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jetstream::api::responses::ReplicaBlock;
    use crate::jetstream::replication::{META_NOT_CURRENT, META_NO_LEADER};
    use tern_raft::{NodeCounters, PeerStatus, Role};

    fn leader_view() -> GroupView {
        GroupView {
            this_node: 0xa,
            role: Role::Leader,
            term: 3,
            leader: Some(0xa),
            commit_index: 9,
            applied_index: 9,
            last_index: 9,
            voters: vec![0xa, 0xb, 0xc],
            peers: vec![PeerStatus {
                id: 0xb,
                match_index: 9,
                recently_active: true,
                silent_ticks: Some(0),
            }],
            leader_silent_ticks: None,
        }
    }

    fn meta(view: Option<GroupView>) -> MetaStatus {
        MetaStatus {
            cluster: "east".into(),
            voters: vec![0xa, 0xb, 0xc],
            view,
            failure: None,
            applied_index: 9,
            caught_up: true,
            leader_name: Some("a".into()),
            replicas: vec![ReplicaBlock {
                name: "b".into(),
                current: true,
                active_ns: 0,
                lag: 0,
                offline: false,
                peer: "b".into(),
            }],
            pending_entries: 2,
            pending_bytes: 300,
        }
    }

    fn report(name: &str, view: GroupView, lag: &[(&str, u64)]) -> StreamGroupReport {
        StreamGroupReport {
            name: name.into(),
            group: 7,
            current: view.current(0),
            cluster: ClusterBlock::default(),
            replica_lag: lag
                .iter()
                .map(|(peer, lag)| (peer.to_string(), *lag))
                .collect(),
            view,
        }
    }

    #[test]
    fn meta_cluster_has_nats_servers_fields() {
        let value = meta_cluster_json(&meta(Some(leader_view())));
        for field in [
            "name",
            "leader",
            "peer",
            "replicas",
            "cluster_size",
            "quorum_needed",
            "pending",
            "snapshot",
        ] {
            assert!(value.get(field).is_some(), "{field} in {value}");
        }
        assert_eq!(value["leader"], "a");
        assert_eq!(value["peer"], "a");
        assert_eq!(value["cluster_size"], 3);
        assert_eq!(value["quorum_needed"], 2);
        assert_eq!(value["snapshot"]["pending_entries"], 2);
        assert_eq!(
            value["replicas"],
            json!([{"name": "b", "current": true, "active": 0, "peer": "b"}])
        );
        assert_eq!(value["raft"]["term"], 3);
        assert_eq!(value["raft"]["role"], "leader");
        assert_eq!(value["raft"]["applied_state"], 9);

        let forming = meta_cluster_json(&MetaStatus {
            leader_name: None,
            replicas: Vec::new(),
            ..meta(None)
        });
        assert!(forming.get("leader").is_none() && forming.get("peer").is_none());
        assert!(forming.get("replicas").is_none(), "omitted when empty");
        assert_eq!(forming["raft"]["running"], false);
    }

    /// A follower's view, a leaderless one, and a shard whose streams are
    /// B (no leader), A (current) and C (placed here, missing).
    fn followers_and_three_streams() -> (GroupView, GroupView, [Gathered; 1]) {
        let follower = GroupView {
            role: Role::Follower,
            this_node: 0xb,
            peers: Vec::new(),
            leader_silent_ticks: Some(1),
            ..leader_view()
        };
        let leaderless = GroupView {
            role: Role::Candidate,
            leader: None,
            leader_silent_ticks: None,
            ..follower.clone()
        };
        let part = Gathered {
            stream_groups: vec![
                report("B", leaderless.clone(), &[]),
                report("A", follower.clone(), &[]),
            ],
            missing: vec!["C".into()],
            ..Gathered::default()
        };
        (follower, leaderless, [part])
    }

    #[test]
    fn health_looks_at_the_meta_layer_first_then_every_stream() {
        let (follower, leaderless, parts) = followers_and_three_streams();
        let no_leader = meta(Some(leaderless.clone()));
        let problems = health_problems(Some(&no_leader), &parts);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].error, META_NO_LEADER);
        assert_eq!(
            problems[0].to_json(),
            json!({"type": "JETSTREAM", "error": META_NO_LEADER})
        );
        let behind = MetaStatus {
            caught_up: false,
            ..meta(Some(follower.clone()))
        };
        assert_eq!(
            health_problems(Some(&behind), &parts)[0].error,
            META_NOT_CURRENT
        );

        let healthy = meta(Some(follower));
        let problems = health_problems(Some(&healthy), &parts);
        let errors: Vec<&str> = problems.iter().map(|p| p.error.as_str()).collect();
        assert_eq!(
            errors,
            [
                "JetStream stream '$G > B' is not current: group node unhealthy",
                "JetStream stream '$G > C' is not current: stream not found",
            ]
        );
        assert_eq!(problems[0].to_json()["stream"], "B");
        assert!(health_problems(None, &[Gathered::default()]).is_empty());
    }

    #[test]
    fn health_options_narrow_what_is_checked_as_nats_server_does() {
        let (follower, leaderless, parts) = followers_and_three_streams();
        let query = |text: &str| -> std::collections::BTreeMap<String, String> {
            text.split('&')
                .filter_map(|pair| pair.split_once('='))
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect()
        };
        let options = |text: &str| HealthOptions::parse(&query(text)).expect("valid");
        let no_leader = meta(Some(leaderless));
        let healthy = meta(Some(follower));
        let down = Some((Some(&no_leader), &parts[..]));
        let up = Some((Some(&healthy), &parts[..]));
        // The meta layer down: 503, unless JetStream's checks are skipped.
        assert_eq!(health(&options(""), down).status_code, 503);
        assert_eq!(health(&options("js-meta-only=true"), down).status_code, 503);
        for skip in ["js-enabled-only=true", "js-enabled=1", "js-server-only=T"] {
            assert_eq!(health(&options(skip), down).status_code, 200, "{skip}");
        }
        // The meta layer up: the streams decide, unless only it is asked.
        assert_eq!(health(&options(""), up).problems.len(), 2);
        assert_eq!(health(&options("js-meta-only=true"), up).status_code, 200);
        let one = health(&options("account=$G&stream=A"), up);
        assert_eq!((one.status_code, one.problems.len()), (200, 0));
        let other = health(&options("account=$G&stream=C"), up);
        assert_eq!(other.status_code, 503);
        assert_eq!(other.problems[0].stream.as_deref(), Some("C"));
        let unknown = health(&options("account=$G&stream=Z"), up);
        assert_eq!(unknown.status_code, 404);
        assert_eq!(
            unknown.to_json(false)["error"],
            "JetStream stream \"Z\" not found on account \"$G\""
        );
        let account = health(&options("account=ACME"), up);
        assert_eq!(account.status_code, 404);
        assert_eq!(
            account.to_json(false)["error"],
            "JetStream account \"ACME\" not found"
        );
        // details: every problem in `errors`, no `error`.
        let detailed = health(&options("details=true"), up).to_json(true);
        assert!(detailed.get("error").is_none(), "{detailed}");
        assert_eq!(detailed["errors"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            health(&options(""), None).to_json(false),
            json!({"status": "ok"})
        );
        // Go's ParseBool, and its 400 text.
        let bad = HealthOptions::parse(&query("js-meta-only=yes")).expect_err("not a bool");
        assert_eq!(
            bad.to_string(),
            "Error decoding boolean for 'js-meta-only': strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
    }

    #[test]
    fn metrics_list_roles_counters_lag_routes_and_meta() {
        let mut part = Gathered {
            shard: 1,
            raft: RaftReport {
                leaders: 2,
                followers: 1,
                candidates: 0,
                counters: NodeCounters {
                    elections: 4,
                    leader_changes: 5,
                },
            },
            ..Gathered::default()
        };
        for index in 0..LAG_STREAMS_MAX + 2 {
            let lag = if index == 5 { 40 } else { 0 };
            part.stream_groups.push(report(
                &format!("S{index:03}"),
                leader_view(),
                &[("b", lag), ("c", 0)],
            ));
        }
        let nodes = [("b".to_string(), true), ("c".to_string(), false)];
        let metrics = ReplicationMetrics {
            meta: Some(&meta(Some(leader_view()))),
            parts: std::slice::from_ref(&part),
            routes: vec![ShardRoutes {
                shard: 1,
                nodes: &nodes,
                raft_dropped: 12,
            }],
        };
        let mut out = String::new();
        write_replication_metrics(&mut out, &metrics);
        for line in [
            "tern_raft_groups{shard=\"1\",role=\"leader\"} 2",
            "tern_raft_groups{shard=\"1\",role=\"candidate\"} 0",
            "tern_raft_elections_total{shard=\"1\"} 4",
            "tern_raft_leader_changes_total{shard=\"1\"} 5",
            "tern_raft_replica_lag_entries{stream=\"S005\",peer=\"b\"} 40",
            "tern_raft_replica_lag_streams_omitted 2",
            "tern_raft_stream_groups_not_current 0",
            "tern_route_connected{shard=\"1\",peer=\"b\"} 1",
            "tern_route_connected{shard=\"1\",peer=\"c\"} 0",
            "tern_raft_messages_dropped_total{shard=\"1\"} 12",
            "tern_meta_leader 1",
            "tern_meta_current 1",
            "tern_meta_term 3",
        ] {
            assert!(out.contains(&format!("{line}\n")), "{line} missing:\n{out}");
        }
        let lag_series = out
            .lines()
            .filter(|line| line.starts_with("tern_raft_replica_lag_entries{"))
            .count();
        assert_eq!(lag_series, LAG_STREAMS_MAX * 2, "capped");
        let first = out
            .lines()
            .find(|line| line.starts_with("tern_raft_replica_lag_entries{"))
            .unwrap();
        assert!(first.contains("S005"), "the most behind first: {first}");
        assert_eq!(label("a\"b\\c"), "a\\\"b\\\\c");
    }
}
