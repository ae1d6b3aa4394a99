//! Monitoring over HTTP on shard 0: `/healthz`, `/varz`, `/connz`, `/subsz`
//! (nats-server's field names where a field exists) and `/metrics`
//! (Prometheus text). Numbers come from every shard's report, gathered over
//! the mesh; nothing is read from another thread's memory.
//!
//! The HTTP server is deliberately small: one GET per connection, the request
//! head capped at [`REQUEST_HEAD_BYTES_MAX`], `Connection: close`.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime};

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use serde::Serialize;

use crate::monitor::{cluster, jsz};
use crate::proto::info::{NATS_COMPATIBLE_VERSION, TERN_VERSION};
use crate::shard::Shard;
use crate::stats::ReportKind;
use crate::stats::{ConnectionInfo, RouteInfo, ShardReport};
use crate::timestamp::{go_duration, Civil};

pub const REQUEST_HEAD_BYTES_MAX: usize = 16 * 1024;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// `/connz` default and maximum page size (nats-server: 1024 / no max; we bound it).
pub const CONNZ_LIMIT_DEFAULT: usize = 1024;
pub const CONNZ_LIMIT_MAX: usize = 100_000;

/// State of the monitor itself (request counts, CPU sampling).
pub struct Monitor {
    shard: Rc<Shard>,
    http_port: u16,
    requests: RefCell<BTreeMap<String, u64>>,
    cpu_sample: Cell<(Instant, u64)>,
    cpu_percent: Cell<f64>,
}

impl Monitor {
    pub fn new(shard: Rc<Shard>, http_port: u16) -> Rc<Monitor> {
        Rc::new(Monitor {
            shard,
            http_port,
            requests: RefCell::new(BTreeMap::new()),
            cpu_sample: Cell::new((Instant::now(), process_cpu_ticks())),
            cpu_percent: Cell::new(0.0),
        })
    }

    pub async fn accept_loop(self: Rc<Self>, listener: TcpListener) {
        loop {
            let accepted =
                futures_lite::future::or(async { Some(listener.accept().await) }, async {
                    self.shard.shutdown.wait().await;
                    None
                })
                .await;
            match accepted {
                None => break,
                Some(Ok(stream)) => {
                    let monitor = self.clone();
                    glommio::spawn_local(async move {
                        let _ = tern_shard::timer::timeout(REQUEST_TIMEOUT, monitor.serve(stream))
                            .await;
                    })
                    .detach();
                }
                Some(Err(_)) => tern_shard::timer::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    async fn serve(&self, mut stream: TcpStream) {
        let mut head = Vec::with_capacity(1024);
        let mut chunk = [0u8; 2048];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(bytes) => head.extend_from_slice(&chunk[..bytes]),
            }
            if head.windows(4).any(|window| window == b"\r\n\r\n") {
                break;
            }
            if head.len() > REQUEST_HEAD_BYTES_MAX {
                let _ = stream
                    .write_all(&response(431, "text/plain", b"request header too large\n"))
                    .await;
                return;
            }
        }
        let response = self.respond(&head).await;
        let _ = stream.write_all(&response).await;
        let _ = stream.shutdown(std::net::Shutdown::Both).await;
    }

    async fn respond(&self, head: &[u8]) -> Vec<u8> {
        let line = head.split(|&byte| byte == b'\n').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        let mut parts = line.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if method != "GET" && method != "HEAD" {
            return response(405, "text/plain", b"only GET\n");
        }
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let query = parse_query(query);
        let path = path.trim_end_matches('/');
        let path = if path.is_empty() { "/" } else { path };
        *self
            .requests
            .borrow_mut()
            .entry(path.to_string())
            .or_insert(0) += 1;
        match path {
            "/" => response(200, "text/plain", INDEX.as_bytes()),
            "/healthz" => self.healthz(&query).await,
            "/varz" => json_response(&self.varz().await),
            "/connz" => json_response(&self.connz(&query).await),
            "/subsz" | "/subscriptionsz" => json_response(&self.subsz().await),
            "/jsz" => self.jsz(&query).await,
            "/routez" => json_response(&self.routez().await),
            "/metrics" => {
                let body = self.metrics().await;
                response(200, "text/plain; version=0.0.4", body.as_bytes())
            }
            _ => response(404, "text/plain", b"not found\n"),
        }
    }

    /// nats-server's health: 503 `unavailable` with the first problem as
    /// `error` and every one in `errors` (so one damaged stream does not
    /// hide another; `?details=true`: `errors` only), else `ok`. On one
    /// server the problems are streams offline (damaged files, a damaged
    /// journal) or stopped after a write error; in a cluster first the
    /// meta layer (no leader heard from, or this node behind it), then
    /// also every stream placed here whose replica is not current
    /// (`monitor::cluster::health`, which also reads nats-server's
    /// options: `js-enabled-only`, `js-server-only`, `js-meta-only`,
    /// `account`, `stream`).
    async fn healthz(&self, query: &BTreeMap<String, String>) -> Vec<u8> {
        let options = match cluster::HealthOptions::parse(query) {
            Ok(options) => options,
            Err(error) => return response(400, "text/plain", error.to_string().as_bytes()),
        };
        let health = match self.shard.jetstream.get() {
            Some(jetstream) => {
                let meta = jetstream.meta_status();
                let parts = jetstream.gather().await;
                cluster::health(&options, Some((meta.as_ref(), &parts)))
            }
            None => cluster::health(&options, None),
        };
        let mut body = serde_json::to_vec_pretty(&health.to_json(options.details))
            .expect("monitoring JSON serialises");
        body.push(b'\n');
        response(health.status_code, "application/json", &body)
    }

    /// nats-server's `/jsz` (`monitor::jsz`): this node's JetStream
    /// totals and, as asked, its account with the streams it holds a
    /// replica of (their consumers, configs, Raft group names). The
    /// account's usage is the cluster's (every node a route reaches is
    /// asked), as nats-server's; consumers come from each stream's task.
    /// A bad option is 400 with nats-server's text, as is `leader-only`
    /// off the meta leader.
    async fn jsz(&self, query: &BTreeMap<String, String>) -> Vec<u8> {
        let options = match jsz::JszOptions::parse(query) {
            Ok(options) => options,
            Err(error) => return response(400, "text/plain", error.to_string().as_bytes()),
        };
        let shard = &self.shard;
        let server_name = shard.shared.server_name.clone();
        let input = |jetstream| jsz::JszInput {
            server_id: &shard.shared.server_id,
            server_name: &server_name,
            now_unix_ns: crate::jetstream::now_unix_ns(),
            jetstream,
        };
        let rendered = match shard.jetstream.get() {
            None => jsz::render(&options, &input(None)),
            Some(jetstream) => {
                let meta = jetstream.meta_status();
                let detail = crate::jetstream::GatherDetail {
                    consumers: options.lists_consumers().then_some(options.config),
                };
                let parts = jetstream.gather_with(detail).await;
                let account_usage = jetstream
                    .account_usage(&parts, options.lists_account())
                    .await;
                let config = shard.config.jetstream.as_ref();
                let settings = jsz::ServerSettings {
                    max_memory: config.map_or(-1, |config| config.max_memory_bytes),
                    max_storage: config.map_or(-1, |config| config.max_file_bytes),
                    store_dir: shard
                        .config
                        .store_dir
                        .join("jetstream")
                        .display()
                        .to_string(),
                    sync_always: config
                        .is_some_and(|config| config.sync == tern_storage::SyncPolicy::Always),
                };
                let cluster_name = jetstream.cluster_name();
                let view = jsz::JetStreamView {
                    parts: &parts,
                    meta: meta.as_ref(),
                    cluster: cluster_name.as_deref(),
                    settings,
                    account_usage,
                    journal: match jetstream.journal_if_open() {
                        Some(journal) => format!("{:?}", journal.stats()),
                        None => format!(
                            "damaged: {}",
                            jetstream.journal_damage().unwrap_or_default()
                        ),
                    },
                };
                jsz::render(&options, &input(Some(view)))
            }
        };
        match rendered {
            Ok(compact) => {
                let mut body = jsz::indent(&compact).into_bytes();
                body.push(b'\n');
                response(200, "application/json", &body)
            }
            Err(jsz::NotLeader) => response(400, "text/plain", jsz::NOT_LEADER.as_bytes()),
        }
    }

    fn sample_cpu(&self) -> f64 {
        let (then, ticks_then) = self.cpu_sample.get();
        let now = Instant::now();
        let ticks_now = process_cpu_ticks();
        let elapsed = now.duration_since(then).as_secs_f64();
        if elapsed >= 0.5 {
            let ticks_per_second = clock_ticks_per_second();
            let busy_seconds = ticks_now.saturating_sub(ticks_then) as f64 / ticks_per_second;
            self.cpu_percent
                .set((busy_seconds / elapsed * 100.0 * 100.0).round() / 100.0);
            self.cpu_sample.set((now, ticks_now));
        }
        self.cpu_percent.get()
    }

    async fn varz(&self) -> Varz {
        let shard = &self.shard;
        let reports = shard.gather_reports(ReportKind::Counters).await;
        let config = &shard.config;
        let now = SystemTime::now();
        let uptime = now
            .duration_since(shard.shared.started)
            .unwrap_or(Duration::ZERO);
        Varz {
            server_id: shard.shared.server_id.clone(),
            server_name: shard.shared.server_name.clone(),
            version: NATS_COMPATIBLE_VERSION,
            proto: 1,
            go: format!("tern-{TERN_VERSION}"),
            host: config.host.clone(),
            port: shard.shared.client_port,
            auth_required: shard.authorization().required(),
            tls_required: shard.tls().is_some(),
            tls_verify: shard.tls().as_ref().is_some_and(|tls| tls.verify),
            max_connections: config.limits.max_connections,
            ping_interval: config.limits.ping_interval.as_nanos() as u64,
            ping_max: config.limits.ping_max,
            http_host: config.http_host.clone(),
            http_port: self.http_port,
            auth_timeout: shard.authorization().timeout.as_secs_f64(),
            max_control_line: config.limits.max_control_line_bytes,
            max_payload: config.limits.max_payload_bytes,
            max_pending: config.limits.max_pending_bytes,
            max_subscriptions: config.limits.max_subscriptions,
            tls_timeout: shard
                .tls()
                .as_ref()
                .map_or(crate::tls::DEFAULT_TIMEOUT, |tls| tls.timeout)
                .as_secs_f64(),
            write_deadline: config.limits.write_deadline.as_nanos() as u64,
            start: Civil::from_system_time(shard.shared.started).rfc3339(),
            config_load_time: Civil::from_system_time(shard.config_load_time()).rfc3339(),
            now: Civil::from_system_time(now).rfc3339(),
            uptime: go_duration(uptime),
            mem: resident_bytes(),
            mem_peak: peak_resident_bytes(),
            cores: online_cpus(),
            gomaxprocs: shard.shard_count,
            cpu: self.sample_cpu(),
            connections: reports.iter().map(|report| report.connections).sum(),
            total_connections: reports.iter().map(|report| report.total_connections).sum(),
            routes: reports
                .iter()
                .map(|report| report.routes.len() as u64)
                .sum(),
            remotes: 0,
            leafnodes: 0,
            in_msgs: reports.iter().map(|report| report.in_msgs).sum(),
            out_msgs: reports.iter().map(|report| report.out_msgs).sum(),
            in_bytes: reports.iter().map(|report| report.in_bytes).sum(),
            out_bytes: reports.iter().map(|report| report.out_bytes).sum(),
            slow_consumers: reports.iter().map(|report| report.slow_consumers).sum(),
            subscriptions: reports.iter().map(|report| report.subscriptions).sum(),
            http_req_stats: self.requests.borrow().clone(),
            tern_version: TERN_VERSION,
            tern_authentication_failures: reports
                .iter()
                .map(|report| report.authentication_failures)
                .sum(),
            tern_authentication_timeouts: reports
                .iter()
                .map(|report| report.authentication_timeouts)
                .sum(),
            tern_permission_violations: reports
                .iter()
                .map(|report| report.permission_violations)
                .sum(),
            shards: reports.iter().map(ShardVarz::from).collect(),
        }
    }

    async fn connz(&self, query: &BTreeMap<String, String>) -> Connz {
        let subscriptions = matches!(
            query.get("subs").map(String::as_str),
            Some("1" | "true" | "detail")
        );
        let reports = self
            .shard
            .gather_reports(ReportKind::Connections { subscriptions })
            .await;
        let mut connections: Vec<ConnectionInfo> = reports
            .into_iter()
            .flat_map(|report| report.connection_list)
            .collect();
        connections.sort_by_key(|connection| connection.cid);
        if let Some(cid) = query.get("cid").and_then(|cid| cid.parse::<u64>().ok()) {
            connections.retain(|connection| connection.cid == cid);
        }
        let total = connections.len();
        let offset = query
            .get("offset")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0);
        let limit = query
            .get("limit")
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&limit| limit > 0)
            .unwrap_or(CONNZ_LIMIT_DEFAULT)
            .min(CONNZ_LIMIT_MAX);
        let page: Vec<ConnectionInfo> = connections.into_iter().skip(offset).take(limit).collect();
        Connz {
            server_id: self.shard.shared.server_id.clone(),
            now: Civil::from_system_time(SystemTime::now()).rfc3339(),
            num_connections: page.len(),
            total,
            offset,
            limit,
            connections: page,
        }
    }

    /// Every route connection of every shard (one per shard and node).
    async fn routez(&self) -> Routez {
        let shard = &self.shard;
        let reports = shard.gather_reports(ReportKind::Counters).await;
        let routes: Vec<RouteInfo> = reports
            .into_iter()
            .flat_map(|report| report.routes)
            .collect();
        Routez {
            server_id: shard.shared.server_id.clone(),
            server_name: shard.shared.server_name.clone(),
            now: Civil::from_system_time(SystemTime::now()).rfc3339(),
            num_routes: routes.len(),
            routes,
        }
    }

    async fn subsz(&self) -> Subsz {
        let reports = self.shard.gather_reports(ReportKind::Counters).await;
        let matches: u64 = reports.iter().map(|report| report.sublist.matches).sum();
        let hits: u64 = reports.iter().map(|report| report.sublist.cache_hits).sum();
        let misses = matches - hits;
        let fanout_total: u64 = reports
            .iter()
            .map(|report| report.sublist.fanout_total)
            .sum();
        Subsz {
            server_id: self.shard.shared.server_id.clone(),
            now: Civil::from_system_time(SystemTime::now()).rfc3339(),
            num_subscriptions: reports.iter().map(|report| report.subscriptions).sum(),
            num_cache: reports
                .iter()
                .map(|report| report.sublist_cache_entries)
                .sum(),
            num_inserts: reports.iter().map(|report| report.sublist.inserts).sum(),
            num_removes: reports.iter().map(|report| report.sublist.removes).sum(),
            num_matches: matches,
            cache_hit_rate: if matches == 0 {
                0.0
            } else {
                hits as f64 / matches as f64
            },
            max_fanout: reports
                .iter()
                .map(|report| report.sublist.fanout_max)
                .max()
                .unwrap_or(0),
            avg_fanout: if misses == 0 {
                0.0
            } else {
                fanout_total as f64 / misses as f64
            },
            shards: reports
                .iter()
                .map(|report| SubszShard {
                    shard: report.shard,
                    subscriptions: report.subscriptions,
                    sublist_entries: report.sublist_entries,
                    cache_entries: report.sublist_cache_entries,
                })
                .collect(),
        }
    }

    async fn metrics(&self) -> String {
        let reports = self.shard.gather_reports(ReportKind::Counters).await;
        // In a cluster: the replication families (monitor::cluster).
        let replication = match (&self.shard.routes, self.shard.jetstream.get()) {
            (Some(_), Some(jetstream)) => Some((jetstream.meta_status(), jetstream.gather().await)),
            _ => None,
        };
        let mut out = String::with_capacity(4096);
        write_shard_families(&mut out, &reports);
        if self.shard.routes.is_some() {
            write_route_families(&mut out, &reports);
        }
        if let Some((meta, parts)) = &replication {
            let metrics = cluster::ReplicationMetrics {
                meta: meta.as_ref(),
                parts,
                routes: reports
                    .iter()
                    .map(|report| cluster::ShardRoutes {
                        shard: report.shard,
                        nodes: &report.route_nodes,
                        raft_dropped: report.raft_dropped,
                    })
                    .collect(),
            };
            cluster::write_replication_metrics(&mut out, &metrics);
        }
        write_process_metrics(&mut out, self.shard.shard_count);
        out
    }
}

/// A metric family: name, type, help, and its value in one row (a
/// shard's report, a route).
type Family<T> = (&'static str, &'static str, &'static str, fn(&T) -> u64);
/// The per-shard counter families of `/metrics`.
const SHARD_FAMILIES: [Family<ShardReport>; 14] = [
    (
        "tern_connections",
        "gauge",
        "Open client connections.",
        |r| r.connections,
    ),
    (
        "tern_connections_total",
        "counter",
        "Client connections accepted.",
        |r| r.total_connections,
    ),
    (
        "tern_subscriptions",
        "gauge",
        "Client subscriptions.",
        |r| r.subscriptions,
    ),
    (
        "tern_in_msgs_total",
        "counter",
        "Messages received from clients.",
        |r| r.in_msgs,
    ),
    (
        "tern_in_bytes_total",
        "counter",
        "Payload bytes received from clients.",
        |r| r.in_bytes,
    ),
    (
        "tern_out_msgs_total",
        "counter",
        "Messages delivered to clients.",
        |r| r.out_msgs,
    ),
    (
        "tern_out_bytes_total",
        "counter",
        "Payload bytes delivered to clients.",
        |r| r.out_bytes,
    ),
    (
        "tern_slow_consumers_total",
        "counter",
        "Connections closed as slow consumers.",
        |r| r.slow_consumers,
    ),
    (
        "tern_stale_connections_total",
        "counter",
        "Connections closed as stale.",
        |r| r.stale_connections,
    ),
    (
        "tern_authentication_failures_total",
        "counter",
        "Connections refused with Authorization Violation (bad or missing credentials, an operation before CONNECT).",
        |r| r.authentication_failures,
    ),
    (
        "tern_authentication_timeouts_total",
        "counter",
        "Connections closed with Authentication Timeout (no CONNECT in time).",
        |r| r.authentication_timeouts,
    ),
    (
        "tern_permission_violations_total",
        "counter",
        "Publishes and subscriptions refused by a user's permissions.",
        |r| r.permission_violations,
    ),
    (
        "tern_forwarded_msgs_total",
        "counter",
        "Messages forwarded to another shard.",
        |r| r.forwarded_msgs,
    ),
    (
        "tern_sublist_cache_hits_total",
        "counter",
        "Subject match cache hits.",
        |r| r.sublist.cache_hits,
    ),
];

/// The per-route families of `/metrics` (in a cluster).
const ROUTE_FAMILIES: [Family<RouteInfo>; 6] = [
    (
        "tern_route_up",
        "gauge",
        "1 per open route connection (shard, remote node).",
        |_| 1,
    ),
    (
        "tern_route_pending_bytes",
        "gauge",
        "Bytes queued for a route connection.",
        |r| r.pending_size,
    ),
    (
        "tern_route_in_msgs_total",
        "counter",
        "Messages received over a route connection.",
        |r| r.in_msgs,
    ),
    (
        "tern_route_out_msgs_total",
        "counter",
        "Messages sent over a route connection.",
        |r| r.out_msgs,
    ),
    (
        "tern_route_in_bytes_total",
        "counter",
        "Frame bytes received over a route connection.",
        |r| r.in_bytes,
    ),
    (
        "tern_route_out_bytes_total",
        "counter",
        "Frame bytes sent over a route connection.",
        |r| r.out_bytes,
    ),
];

fn write_shard_families(out: &mut String, reports: &[ShardReport]) {
    let rows: Vec<(String, &ShardReport)> = reports
        .iter()
        .map(|report| {
            (
                format!("shard=\"{}\",cpu=\"{}\"", report.shard, report.cpu),
                report,
            )
        })
        .collect();
    write_families(out, &SHARD_FAMILIES, &rows);
}

fn write_route_families(out: &mut String, reports: &[ShardReport]) {
    let rows: Vec<(String, &RouteInfo)> = reports
        .iter()
        .flat_map(|report| &report.routes)
        .map(|route| {
            (
                format!("shard=\"{}\",remote=\"{}\"", route.shard, route.remote_name),
                route,
            )
        })
        .collect();
    write_families(out, &ROUTE_FAMILIES, &rows);
}

/// Each family's HELP and TYPE lines, then one sample per row with the
/// row's labels.
fn write_families<T>(out: &mut String, families: &[Family<T>], rows: &[(String, &T)]) {
    for (name, kind, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, row) in rows {
            let _ = writeln!(out, "{name}{{{labels}}} {}", value(row));
        }
    }
}

/// The process's resident memory and the version information.
fn write_process_metrics(out: &mut String, shard_count: usize) {
    let _ = writeln!(
        out,
        "# HELP tern_resident_memory_bytes Resident set size of the process."
    );
    let _ = writeln!(out, "# TYPE tern_resident_memory_bytes gauge");
    let _ = writeln!(out, "tern_resident_memory_bytes {}", resident_bytes());
    let _ = writeln!(out, "# HELP tern_info Version information.");
    let _ = writeln!(out, "# TYPE tern_info gauge");
    let _ = writeln!(
        out,
        "tern_info{{version=\"{TERN_VERSION}\",nats_compatible=\"{NATS_COMPATIBLE_VERSION}\",shards=\"{}\"}} 1",
        shard_count
    );
}

const INDEX: &str = "tern monitoring\n\n/healthz\n/varz\n/connz\n/routez\n/subsz\n/jsz\n/metrics\n";

#[derive(Serialize)]
struct Varz {
    server_id: String,
    server_name: String,
    version: &'static str,
    proto: u32,
    go: String,
    host: String,
    port: u16,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    auth_required: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    tls_required: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    tls_verify: bool,
    max_connections: usize,
    ping_interval: u64,
    ping_max: u32,
    http_host: String,
    http_port: u16,
    /// Seconds (nats-server's field; whole seconds print as Go prints them).
    #[serde(serialize_with = "go_float")]
    auth_timeout: f64,
    max_control_line: usize,
    max_payload: usize,
    max_pending: usize,
    max_subscriptions: usize,
    /// Seconds (nats-server prints its default, 2, without TLS too).
    #[serde(serialize_with = "go_float")]
    tls_timeout: f64,
    write_deadline: u64,
    start: String,
    /// When the configuration was last loaded (start, or the last reload).
    config_load_time: String,
    now: String,
    uptime: String,
    mem: u64,
    mem_peak: u64,
    cores: usize,
    gomaxprocs: usize,
    cpu: f64,
    connections: u64,
    total_connections: u64,
    routes: u64,
    remotes: u64,
    leafnodes: u64,
    in_msgs: u64,
    out_msgs: u64,
    in_bytes: u64,
    out_bytes: u64,
    slow_consumers: u64,
    subscriptions: u64,
    http_req_stats: BTreeMap<String, u64>,
    tern_version: &'static str,
    /// Connections refused with `Authorization Violation` (bad or missing
    /// credentials, an operation before CONNECT); nats-server has no such
    /// counter.
    tern_authentication_failures: u64,
    /// Connections closed with `Authentication Timeout`.
    tern_authentication_timeouts: u64,
    /// Publishes and subscriptions refused by permissions.
    tern_permission_violations: u64,
    shards: Vec<ShardVarz>,
}

/// A float64 as Go's encoding/json writes it: `1`, not `1.0`.
fn go_float<S: serde::Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        serializer.serialize_i64(*value as i64)
    } else {
        serializer.serialize_f64(*value)
    }
}

#[derive(Serialize)]
struct ShardVarz {
    shard: usize,
    cpu: usize,
    connections: u64,
    subscriptions: u64,
    in_msgs: u64,
    out_msgs: u64,
    forwarded_msgs: u64,
    received_forwarded_msgs: u64,
    authentication_failures: u64,
    authentication_timeouts: u64,
    permission_violations: u64,
}

impl From<&ShardReport> for ShardVarz {
    fn from(report: &ShardReport) -> Self {
        ShardVarz {
            shard: report.shard,
            cpu: report.cpu,
            connections: report.connections,
            subscriptions: report.subscriptions,
            in_msgs: report.in_msgs,
            out_msgs: report.out_msgs,
            forwarded_msgs: report.forwarded_msgs,
            received_forwarded_msgs: report.received_forwarded_msgs,
            authentication_failures: report.authentication_failures,
            authentication_timeouts: report.authentication_timeouts,
            permission_violations: report.permission_violations,
        }
    }
}

#[derive(Serialize)]
struct Connz {
    server_id: String,
    now: String,
    num_connections: usize,
    total: usize,
    offset: usize,
    limit: usize,
    connections: Vec<ConnectionInfo>,
}

#[derive(Serialize)]
struct Routez {
    server_id: String,
    server_name: String,
    now: String,
    num_routes: usize,
    routes: Vec<RouteInfo>,
}

#[derive(Serialize)]
struct Subsz {
    server_id: String,
    now: String,
    num_subscriptions: u64,
    num_cache: u64,
    num_inserts: u64,
    num_removes: u64,
    num_matches: u64,
    cache_hit_rate: f64,
    max_fanout: u64,
    avg_fanout: f64,
    shards: Vec<SubszShard>,
}

#[derive(Serialize)]
struct SubszShard {
    shard: usize,
    subscriptions: u64,
    sublist_entries: u64,
    cache_entries: u64,
}

fn response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn json_response<T: Serialize>(value: &T) -> Vec<u8> {
    let mut body = serde_json::to_vec_pretty(value).expect("monitoring JSON serialises");
    body.push(b'\n');
    response(200, "application/json", &body)
}

fn parse_query(query: &str) -> BTreeMap<String, String> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decoded(key), percent_decoded(value))
        })
        .collect()
}

/// CPUs online on the host (not this pinned thread's affinity).
fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let count = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if count > 0 {
        count as usize
    } else {
        1
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as u64
    } else {
        4096
    }
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// Resident set size, from /proc/self/statm.
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|text| {
            text.split_whitespace()
                .nth(1)
                .and_then(|pages| pages.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * page_size())
}

/// Peak resident set size (VmHWM), from /proc/self/status.
pub fn peak_resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .and_then(|value| {
                    value
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .map_or(0, |kib| kib * 1024)
}

/// User plus system CPU time of the process, in clock ticks.
fn process_cpu_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |index: usize| {
        fields
            .get(index)
            .and_then(|value| value.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// A query component with `%XX` escapes and `+` decoded (an escape that is
/// not two hex digits stays as it is).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        let hex = |offset: usize| {
            bytes
                .get(index + offset)
                .and_then(|digit| (*digit as char).to_digit(16))
        };
        match (byte, hex(1), hex(2)) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                index += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                index += 1;
            }
            _ => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse() {
        let query = parse_query("cid=5&subs=1&flag");
        assert_eq!(query.get("cid").map(String::as_str), Some("5"));
        assert_eq!(query.get("subs").map(String::as_str), Some("1"));
        assert_eq!(query.get("flag").map(String::as_str), Some(""));
    }

    #[test]
    fn responses_have_length() {
        let bytes = response(200, "application/json", b"{}");
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(text.contains("Content-Length: 2\r\n"));
        assert!(text.ends_with("\r\n\r\n{}"));
    }

    #[test]
    fn process_numbers_are_readable() {
        assert!(resident_bytes() > 0);
        assert!(peak_resident_bytes() >= resident_bytes() / 2);
    }
}
