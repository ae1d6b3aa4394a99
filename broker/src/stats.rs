//! Counters. Each shard counts in plain `Cell`s (no atomics on the publish
//! path); monitoring asks every shard for a [`ShardReport`] over the mesh and
//! adds them up.

use std::cell::Cell;

use serde::Serialize;

/// One shard's running totals.
#[derive(Debug, Default)]
pub struct ShardCounters {
    pub in_msgs: Cell<u64>,
    pub in_bytes: Cell<u64>,
    pub out_msgs: Cell<u64>,
    pub out_bytes: Cell<u64>,
    pub slow_consumers: Cell<u64>,
    pub connections: Cell<u64>,
    pub total_connections: Cell<u64>,
    pub subscriptions: Cell<u64>,
    /// Messages this shard forwarded to / received from other shards.
    pub forwarded_msgs: Cell<u64>,
    pub received_forwarded_msgs: Cell<u64>,
    pub stale_connections: Cell<u64>,
    /// Connections refused for their credentials or for an operation
    /// before CONNECT (`-ERR 'Authorization Violation'`).
    pub authentication_failures: Cell<u64>,
    /// Connections that sent no CONNECT within the auth timeout.
    pub authentication_timeouts: Cell<u64>,
    /// Publishes and subscriptions refused by a user's permissions.
    pub permission_violations: Cell<u64>,
}

pub fn add(cell: &Cell<u64>, amount: u64) {
    cell.set(cell.get().wrapping_add(amount));
}

pub fn subtract(cell: &Cell<u64>, amount: u64) {
    let value = cell.get();
    assert!(value >= amount, "counter underflow");
    cell.set(value - amount);
}

/// One route connection as `/routez` shows it (nats-server field names,
/// plus the shard that owns it).
#[derive(Debug, Clone, Serialize)]
pub struct RouteInfo {
    pub rid: u64,
    pub remote_id: String,
    pub remote_name: String,
    pub did_solicit: bool,
    pub ip: String,
    pub port: u16,
    pub start: String,
    pub pending_size: u64,
    pub in_msgs: u64,
    pub out_msgs: u64,
    pub in_bytes: u64,
    pub out_bytes: u64,
    pub shard: usize,
}

/// One connection as `/connz` shows it (nats-server field names, plus the shard).
#[derive(Debug, Clone, Serialize)]
pub struct ConnectionInfo {
    pub cid: u64,
    pub kind: &'static str,
    #[serde(rename = "type")]
    pub connection_type: &'static str,
    pub ip: String,
    pub port: u16,
    pub start: String,
    pub last_activity: String,
    pub rtt: String,
    pub uptime: String,
    pub idle: String,
    pub pending_bytes: u64,
    pub in_msgs: u64,
    pub out_msgs: u64,
    pub in_bytes: u64,
    pub out_bytes: u64,
    pub subscriptions: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub lang: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subscriptions_list: Option<Vec<String>>,
    /// The shard (core) serving this connection.
    pub shard: usize,
    pub cpu: usize,
}

/// What a shard reports to monitoring.
#[derive(Debug, Clone, Default)]
pub struct ShardReport {
    pub shard: usize,
    pub cpu: usize,
    pub in_msgs: u64,
    pub in_bytes: u64,
    pub out_msgs: u64,
    pub out_bytes: u64,
    pub slow_consumers: u64,
    pub connections: u64,
    pub total_connections: u64,
    pub subscriptions: u64,
    pub forwarded_msgs: u64,
    pub received_forwarded_msgs: u64,
    pub stale_connections: u64,
    pub authentication_failures: u64,
    pub authentication_timeouts: u64,
    pub permission_violations: u64,
    pub sublist: SublistStats,
    pub sublist_entries: u64,
    pub sublist_cache_entries: u64,
    pub connection_list: Vec<ConnectionInfo>,
    pub routes: Vec<RouteInfo>,
    /// In a cluster: every node this shard linked to since start (server
    /// name) and whether its route is open now.
    pub route_nodes: Vec<(String, bool)>,
    /// Raft messages this shard's routes dropped (no open link).
    pub raft_dropped: u64,
}

impl ShardReport {
    pub fn from_counters(shard: usize, cpu: usize, counters: &ShardCounters) -> ShardReport {
        ShardReport {
            shard,
            cpu,
            in_msgs: counters.in_msgs.get(),
            in_bytes: counters.in_bytes.get(),
            out_msgs: counters.out_msgs.get(),
            out_bytes: counters.out_bytes.get(),
            slow_consumers: counters.slow_consumers.get(),
            connections: counters.connections.get(),
            total_connections: counters.total_connections.get(),
            subscriptions: counters.subscriptions.get(),
            forwarded_msgs: counters.forwarded_msgs.get(),
            received_forwarded_msgs: counters.received_forwarded_msgs.get(),
            stale_connections: counters.stale_connections.get(),
            authentication_failures: counters.authentication_failures.get(),
            authentication_timeouts: counters.authentication_timeouts.get(),
            permission_violations: counters.permission_violations.get(),
            ..ShardReport::default()
        }
    }
}

/// What monitoring asks a shard for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportKind {
    /// Counters only.
    Counters,
    /// Counters and every connection (for `/connz`).
    Connections { subscriptions: bool },
}

/// A sublist's counters for `/subsz` (`routing::sublist` keeps them).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SublistStats {
    pub inserts: u64,
    pub removes: u64,
    pub matches: u64,
    pub cache_hits: u64,
    pub fanout_max: u64,
    pub fanout_total: u64,
}
