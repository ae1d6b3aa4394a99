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

    #[test]
    fn health_looks_at_the_meta_layer_first_then_every_stream() {
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
        let parts = [part];
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
