//! Configuration: command-line flags (named as nats-server's where they
//! overlap), an optional TOML file, defaults. Flags override the file.
//!
//! Sizes accept a number of bytes or a string with a unit (`"64KB"`, `"1MiB"`);
//! durations accept seconds or a string (`"2m"`, `"100ms"`, `"1h"`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser as ClapParser;
use serde::Deserialize;
use tern_shard::CpuList;

use crate::auth::config::{AuthConfigError, AuthFlags};
use crate::auth::Authorization;

pub const DEFAULT_PORT: u16 = 4222;
pub const DEFAULT_HTTP_PORT: u16 = 8222;
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 1024 * 1024;
pub const DEFAULT_MAX_PENDING_BYTES: usize = 64 * 1024 * 1024;
pub const DEFAULT_MAX_CONNECTIONS: usize = 64 * 1024;
pub const DEFAULT_MAX_CONTROL_LINE_BYTES: usize = 4096;
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(120);
pub const DEFAULT_PING_MAX: u32 = 2;
pub const DEFAULT_WRITE_DEADLINE: Duration = Duration::from_secs(10);
/// glommio io memory per shard. Small until the storage engine needs DMA
/// buffers: it is pinned (memlock) and counts in RSS.
pub const DEFAULT_IO_MEMORY_BYTES: usize = 1024 * 1024;
pub const DEFAULT_MESH_RING_CAPACITY: usize = 1024;
/// Off: a spin holds the shard's other connections for up to its window,
/// and on 2 vCPUs it measured within noise (docs/benchmarks-history.md). 200us covers a
/// journal commit on the peer shard where it is turned on.
pub const DEFAULT_SPIN_AWAITING_REPLY: Duration = Duration::ZERO;
/// A spin holds its shard: never longer than this.
pub const MAX_SPIN_AWAITING_REPLY: Duration = Duration::from_millis(1);
/// nats-server refuses a max_payload above this.
pub const MAX_PAYLOAD_LIMIT_BYTES: usize = 64 * 1024 * 1024;

#[derive(ClapParser, Debug, Default, Clone)]
#[command(
    name = "tern-server",
    version,
    about = "tern: a NATS-compatible message broker, thread-per-core on io_uring",
    long_about = "tern-server speaks the NATS client protocol. Flags that exist in nats-server \
                  have its names (-a, -p, -m, -c, -n, -sd). Flags override the config file."
)]
pub struct Flags {
    /// Client listen address (nats-server: --addr/--net)
    #[arg(short = 'a', long = "addr", alias = "net", value_name = "HOST")]
    pub addr: Option<String>,
    /// Client port; 0 or -1 picks a free port [default: 4222]
    #[arg(
        short = 'p',
        long = "port",
        value_name = "PORT",
        allow_negative_numbers = true
    )]
    pub port: Option<i32>,
    /// Monitoring HTTP port; -1 picks a free port, 0 disables [default: 8222]
    #[arg(
        short = 'm',
        long = "http_port",
        alias = "http-port",
        value_name = "PORT",
        allow_negative_numbers = true
    )]
    pub http_port: Option<i32>,
    /// Monitoring HTTP listen address [default: the client address]
    #[arg(long = "http_host", alias = "http-host", value_name = "HOST")]
    pub http_host: Option<String>,
    /// TOML configuration file
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Server name [default: the server id]
    #[arg(short = 'n', long = "server_name", alias = "name", value_name = "NAME")]
    pub server_name: Option<String>,
    /// Data directory (also written -sd) [default: ./data]
    #[arg(long = "store_dir", alias = "store-dir", value_name = "DIR")]
    pub store_dir: Option<PathBuf>,
    /// CPUs to run shards on, one shard per CPU, taskset syntax: 1, 0-3, 0,2 [default: all online CPUs]
    #[arg(long = "cores", value_name = "LIST")]
    pub cores: Option<String>,
    /// Do not pin shards to their CPUs: the --cores list then only sets how
    /// many shards run (any count, online or not). For hosts shared with other
    /// work (CI, tests, containers); a dedicated host pins [default: pinned]
    #[arg(long = "unpinned")]
    pub unpinned: bool,
    /// Largest message payload (headers included) a client may publish [default: 1MB]
    #[arg(long = "max_payload", value_name = "SIZE")]
    pub max_payload: Option<String>,
    /// Bytes queued to a client before it is closed as a slow consumer [default: 64MB]
    #[arg(long = "max_pending", value_name = "SIZE")]
    pub max_pending: Option<String>,
    /// Most client connections at once [default: 65536]
    #[arg(long = "max_connections", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Most subscriptions per connection; 0 is unlimited [default: 0]
    #[arg(long = "max_subscriptions", value_name = "N")]
    pub max_subscriptions: Option<usize>,
    /// Longest control line (its arguments) a client may send [default: 4KB]
    #[arg(long = "max_control_line", value_name = "SIZE")]
    pub max_control_line: Option<String>,
    /// How often the server PINGs an idle client [default: 2m]
    #[arg(long = "ping_interval", value_name = "DURATION")]
    pub ping_interval: Option<String>,
    /// Unanswered server PINGs before the connection is stale [default: 2]
    #[arg(long = "ping_max", value_name = "N")]
    pub ping_max: Option<u32>,
    /// How long a write to a client may block before it is a slow consumer [default: 10s]
    #[arg(long = "write_deadline", value_name = "DURATION")]
    pub write_deadline: Option<String>,
    /// io_uring buffer memory per shard, pinned (counts against RLIMIT_MEMLOCK) [default: 1MiB]
    #[arg(long = "io_memory", value_name = "SIZE")]
    pub io_memory: Option<String>,
    /// Busy-poll this long for I/O before a shard sleeps (lower latency, more CPU); 0 disables [default: 0]
    #[arg(long = "spin_before_park", value_name = "DURATION")]
    pub spin_before_park: Option<String>,
    /// After forwarding a request whose reply comes back from another shard,
    /// spin up to this long on the incoming rings instead of sleeping (saves a
    /// cross-CPU wake-up per reply; holds the shard meanwhile); 0 disables [default: 0]
    #[arg(long = "spin_awaiting_reply", value_name = "DURATION")]
    pub spin_awaiting_reply: Option<String>,
    /// Enable JetStream (nats-server: -js, --jetstream)
    #[arg(long = "jetstream")]
    pub jetstream: bool,
    /// When a journal write counts as durable: `always` (fsync before every
    /// PubAck) or `never` (rely on replication; a crash can lose acked
    /// messages) [default: always]
    #[arg(long = "sync", value_name = "POLICY")]
    pub sync: Option<String>,
    /// Journal directory or raw block device [default: <store_dir>/jetstream/journal]
    #[arg(long = "journal_dir", alias = "journal-dir", value_name = "PATH")]
    pub journal_dir: Option<PathBuf>,
    /// Cluster listen URL, `nats://HOST:PORT` (port -1 or 0 picks a free
    /// port); enables clustering (nats-server: --cluster)
    #[arg(long = "cluster", value_name = "URL")]
    pub cluster: Option<String>,
    /// Cluster name; every node of a cluster has the same (nats-server: --cluster_name)
    #[arg(long = "cluster_name", alias = "cluster-name", value_name = "NAME")]
    pub cluster_name: Option<String>,
    /// Routes to other nodes, comma separated `nats://HOST:PORT`; one is
    /// enough, the rest are learnt from it
    #[arg(long = "routes", value_name = "URLS")]
    pub routes: Option<String>,
    /// Username required for connection (nats-server: --user); with --pass
    #[arg(long = "user", value_name = "USER")]
    pub user: Option<String>,
    /// Password required for connection (nats-server: --pass); plain or a bcrypt hash
    #[arg(long = "pass", value_name = "PASSWORD")]
    pub pass: Option<String>,
    /// Authorization token required for connection (nats-server: --auth)
    #[arg(long = "auth", value_name = "TOKEN")]
    pub auth: Option<String>,
    /// Enable TLS on the client port (nats-server: --tls); needs --tlscert and --tlskey
    #[arg(long = "tls")]
    pub tls: bool,
    /// Server certificate chain, PEM (nats-server: --tlscert)
    #[arg(long = "tlscert", value_name = "FILE")]
    pub tlscert: Option<PathBuf>,
    /// Server private key, PEM (nats-server: --tlskey)
    #[arg(long = "tlskey", value_name = "FILE")]
    pub tlskey: Option<PathBuf>,
    /// Require and verify client certificates (nats-server: --tlsverify); needs --tlscacert
    #[arg(long = "tlsverify")]
    pub tlsverify: bool,
    /// CA certificates that sign client certificates, PEM (nats-server: --tlscacert)
    #[arg(long = "tlscacert", value_name = "FILE")]
    pub tlscacert: Option<PathBuf>,
    /// Enable debug logging
    #[arg(short = 'D', long = "debug")]
    pub debug: bool,
}

/// The `[cluster]` table of the TOML file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    pub name: Option<String>,
    /// `host:port` (or `nats://host:port`).
    pub listen: Option<String>,
    pub host: Option<String>,
    pub port: Option<i32>,
    #[serde(default)]
    pub routes: Vec<String>,
    /// Mutual TLS between nodes, with the cluster's own CA.
    pub tls: Option<crate::tls::RouteTlsFile>,
}

/// The `[jetstream]` table of the TOML file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct JetStreamFile {
    pub enabled: Option<bool>,
    /// `always` or `never` (nats-server: `sync_interval: always`).
    #[serde(alias = "sync_interval")]
    pub sync: Option<String>,
    pub journal_dir: Option<PathBuf>,
    /// A raw block device for every shard's journal (the same as a
    /// `journal_dir` naming a block device).
    pub journal_device: Option<PathBuf>,
    /// The I/O profile `tern iotune` wrote (default: `<store_dir>/io-profile.json`
    /// when it exists).
    pub io_profile: Option<PathBuf>,
    pub journal_segment_size: Option<SizeValue>,
    pub journal_segments: Option<u32>,
    pub max_memory_store: Option<SizeValue>,
    pub max_file_store: Option<SizeValue>,
    /// Free space kept on the store's filesystem; publishes to file streams
    /// are refused below it (default: 5 % of the filesystem, at most 1 GiB).
    pub storage_reserve: Option<SizeValue>,
}

/// The TOML file; same names as the flags (and as nats-server's config).
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(alias = "addr", alias = "net")]
    pub host: Option<String>,
    pub port: Option<i32>,
    pub http_port: Option<i32>,
    pub http_host: Option<String>,
    #[serde(alias = "name")]
    pub server_name: Option<String>,
    pub store_dir: Option<PathBuf>,
    pub cores: Option<String>,
    pub unpinned: Option<bool>,
    pub max_payload: Option<SizeValue>,
    pub max_pending: Option<SizeValue>,
    #[serde(alias = "max_conn")]
    pub max_connections: Option<usize>,
    #[serde(alias = "max_subs")]
    pub max_subscriptions: Option<usize>,
    pub max_control_line: Option<SizeValue>,
    pub ping_interval: Option<DurationValue>,
    pub ping_max: Option<u32>,
    pub write_deadline: Option<DurationValue>,
    pub io_memory: Option<SizeValue>,
    pub spin_before_park: Option<DurationValue>,
    pub spin_awaiting_reply: Option<DurationValue>,
    pub debug: Option<bool>,
    pub jetstream: Option<JetStreamFile>,
    pub cluster: Option<ClusterFile>,
    /// Read by `auth::config` (it names every mistake by its path).
    pub authorization: Option<toml::Value>,
    pub tls: Option<crate::tls::TlsFile>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum SizeValue {
    Bytes(u64),
    Text(String),
}

#[derive(Deserialize, Debug, Clone)]
#[serde(untagged)]
pub enum DurationValue {
    Seconds(u64),
    Text(String),
}

/// Client-facing limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_payload_bytes: usize,
    pub max_pending_bytes: usize,
    pub max_connections: usize,
    /// 0 = unlimited.
    pub max_subscriptions: usize,
    pub max_control_line_bytes: usize,
    pub ping_interval: Duration,
    pub ping_max: u32,
    pub write_deadline: Duration,
}

/// JetStream settings (present when JetStream is enabled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JetStreamConfig {
    pub sync: tern_storage::SyncPolicy,
    /// One journal per shard under here (`shard-<i>`), or a raw block device
    /// (one region per shard: `crate::jetstream::journal_location`).
    pub journal_dir: PathBuf,
    pub journal_segment_bytes: u64,
    pub journal_segments: u32,
    /// Account limits reported by `$JS.API.INFO` (-1 = unlimited).
    pub max_memory_bytes: i64,
    pub max_file_bytes: i64,
    /// Free space kept on the store's filesystem (`None`: the default,
    /// [`default_storage_reserve_bytes`] of the filesystem's size).
    pub storage_reserve_bytes: Option<u64>,
    /// Each shard's journal id, from the store's layout (filled in at
    /// start-up, before the shards open their journals).
    pub journal_ids: Vec<u64>,
    /// On a raw journal device, where each shard's region starts (filled in
    /// at start-up from the device header; empty for journal directories).
    pub journal_regions: Vec<u64>,
    /// `io_profile` from the file (`None`: `<store_dir>/io-profile.json`
    /// if it exists).
    pub io_profile: Option<PathBuf>,
    /// The settings of the I/O profile (filled in at start-up; `None`:
    /// no profile, the built-in sizes).
    pub io_settings: Option<crate::io_profile::IoSettings>,
}

/// A host and port, as given (resolved when connecting, so a name may
/// stand for an address that changes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub host: String,
    /// 0 = pick a free port (listen addresses only).
    pub port: u16,
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(formatter, "[{}]:{}", self.host, self.port)
        } else {
            write!(formatter, "{}:{}", self.host, self.port)
        }
    }
}

impl HostPort {
    /// `nats://host:port`, `nats-route://host:port`, `host:port`; `-1` as
    /// the port means "pick one" (0) where `random_port` allows it.
    pub fn parse(text: &str, random_port: bool) -> Result<HostPort, HostPortError> {
        let trimmed = text.trim();
        let rest = ["nats-route://", "nats://", "tls://"]
            .iter()
            .find_map(|scheme| trimmed.strip_prefix(scheme))
            .unwrap_or(trimmed);
        let text = text.to_string();
        // Credentials in a route URL (`nats://user:pass@host:port`) belong
        // to route authorization, which tern does not have: refuse them.
        if rest.contains('@') {
            return Err(HostPortError::Credentials { text });
        }
        let rest = rest.trim_end_matches('/');
        let Some((host, port)) = rest.rsplit_once(':') else {
            return Err(HostPortError::NotHostPort { text });
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(HostPortError::NoHost { text });
        }
        let Ok(port) = port.parse::<i32>() else {
            let port = port.to_string();
            return Err(HostPortError::PortNotNumber { text, port });
        };
        let port = match port {
            -1 | 0 if random_port => 0,
            port => u16::try_from(port)
                .ok()
                .filter(|port| *port != 0)
                .ok_or(HostPortError::PortOutOfRange { text, port })?,
        };
        Ok(HostPort {
            host: host.to_string(),
            port,
        })
    }
}

/// Why a `host:port` (a listen address, a route URL) was refused; each
/// text quotes what was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostPortError {
    #[error("{text:?}: credentials in a route URL are not supported")]
    Credentials { text: String },
    #[error("{text:?} is not host:port")]
    NotHostPort { text: String },
    #[error("{text:?} has no host")]
    NoHost { text: String },
    #[error("{text:?}: {port:?} is not a port")]
    PortNotNumber { text: String, port: String },
    #[error("{text:?}: {port} is not a port")]
    PortOutOfRange { text: String, port: i32 },
}

/// Clustering (present when a cluster listen address is configured).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Every node of the cluster has the same; checked when nodes connect.
    pub name: String,
    pub listen: HostPort,
    /// Where to find other nodes; the rest are learnt from them.
    pub routes: Vec<HostPort>,
    /// `[cluster.tls]`: every route is mutual TLS when set.
    pub tls: Option<crate::tls::RouteTlsConfig>,
}

/// The default storage reserve: 5 % of the filesystem, at most 1 GiB.
pub fn default_storage_reserve_bytes(filesystem_bytes: u64) -> u64 {
    (filesystem_bytes / 20).min(1 << 30)
}

pub const DEFAULT_JOURNAL_SEGMENT_BYTES: u64 = 64 << 20;
pub const DEFAULT_JOURNAL_SEGMENTS: u32 = 8;

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub host: String,
    /// 0 = pick a free port.
    pub port: u16,
    /// `None` = monitoring disabled; `Some(0)` = pick a free port.
    pub http_port: Option<u16>,
    pub http_host: String,
    pub server_name: Option<String>,
    pub store_dir: PathBuf,
    /// Shard `i` runs on `cores[i]` (pinned) or, when `unpinned`, floats and
    /// the list only counts the shards.
    pub cores: CpuList,
    pub unpinned: bool,
    pub limits: Limits,
    pub io_memory_bytes: usize,
    pub mesh_ring_capacity: usize,
    pub spin_before_park: Duration,
    pub spin_awaiting_reply: Duration,
    pub debug: bool,
    pub config_file: Option<PathBuf>,
    /// `None`: JetStream is disabled (its API subjects have no responders).
    pub jetstream: Option<JetStreamConfig>,
    /// `None`: a single node.
    pub cluster: Option<ClusterConfig>,
    /// Who may connect and what each user may do (immutable; shards hold
    /// an `Arc` of it).
    pub authorization: Arc<Authorization>,
    /// `None`: the client port is plaintext.
    pub tls: Option<crate::tls::TlsConfig>,
    /// What this was resolved from, for a reload (`crate::reload`).
    pub source: Arc<ConfigSource>,
}

/// The flags and the file's `[authorization]` table a [`Config`] was
/// resolved from: a reload resolves the same flags over the file again,
/// and compares the tables to know whether the authorization changed.
/// Holds secrets: `Debug` prints none of it.
#[derive(Default)]
pub struct ConfigSource {
    pub flags: Flags,
    pub authorization: Option<toml::Value>,
}

impl std::fmt::Debug for ConfigSource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("ConfigSource(<redacted>)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
    #[error("{field}: {source}")]
    Size {
        field: &'static str,
        source: SizeError,
    },
    #[error("{field}: {source}")]
    Address {
        field: &'static str,
        source: HostPortError,
    },
    #[error(transparent)]
    Authorization(#[from] AuthConfigError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

fn invalid(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        message: message.into(),
    }
}

/// The error of a size in `field`.
fn size_error(field: &'static str) -> impl Fn(SizeError) -> ConfigError {
    move |source| ConfigError::Size { field, source }
}

/// The error of a `host:port` in `field`.
fn address(field: &'static str) -> impl Fn(HostPortError) -> ConfigError {
    move |source| ConfigError::Address { field, source }
}

/// The TOML file's text as its tables (nothing checked beyond the types).
pub fn parse_file(text: &str) -> Result<FileConfig, toml::de::Error> {
    toml::from_str::<FileConfig>(text)
}

/// nats-server's two-letter short flags clap cannot express.
pub fn normalise_args(args: impl IntoIterator<Item = String>) -> Vec<String> {
    args.into_iter()
        .map(|arg| match arg.as_str() {
            "-sd" => "--store_dir".to_string(),
            "-js" => "--jetstream".to_string(),
            _ => match arg.strip_prefix("-sd=") {
                Some(value) => format!("--store_dir={value}"),
                None => arg,
            },
        })
        .collect()
}

impl Config {
    /// Flags from the process arguments, then the file they name, then defaults.
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Result<Config, clap::Error> {
        let flags = Flags::try_parse_from(normalise_args(args))?;
        Config::resolve(flags).map_err(|error| {
            clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{error}\n"))
        })
    }

    pub fn resolve(flags: Flags) -> Result<Config, ConfigError> {
        let file = match &flags.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                parse_file(&text).map_err(|source| ConfigError::Parse {
                    path: path.clone(),
                    source,
                })?
            }
            None => FileConfig::default(),
        };
        Config::resolve_with(flags, file)
    }

    /// Flags over an already parsed file, then defaults (no file I/O).
    pub fn resolve_with(flags: Flags, file: FileConfig) -> Result<Config, ConfigError> {
        // Read before the fields move out; its error is reported in order below.
        let limits = resolve_limits(&flags, &file);
        let source = Arc::new(ConfigSource {
            flags: flags.clone(),
            authorization: file.authorization.clone(),
        });
        let host = flags
            .addr
            .or(file.host)
            .unwrap_or_else(|| "0.0.0.0".to_string());
        let port = match flags.port.or(file.port) {
            None => DEFAULT_PORT,
            Some(-1) | Some(0) => 0,
            Some(port) => {
                u16::try_from(port).map_err(|_| invalid("port", format!("{port} is not a port")))?
            }
        };
        let http_port = match flags.http_port.or(file.http_port) {
            None => Some(DEFAULT_HTTP_PORT),
            Some(0) => None,
            Some(-1) => Some(0),
            Some(port) => Some(
                u16::try_from(port)
                    .map_err(|_| invalid("http_port", format!("{port} is not a port")))?,
            ),
        };
        let http_host = flags
            .http_host
            .or(file.http_host)
            .unwrap_or_else(|| host.clone());
        let unpinned = flags.unpinned || file.unpinned.unwrap_or(false);
        let cores = match flags.cores.or(file.cores) {
            Some(list) => {
                let cores =
                    CpuList::parse(&list).map_err(|error| invalid("cores", error.to_string()))?;
                if !unpinned {
                    cores
                        .check_online()
                        .map_err(|error| invalid("cores", error.to_string()))?;
                }
                cores
            }
            None => CpuList::online(),
        };
        let limits = limits?;
        let store_dir = flags
            .store_dir
            .or(file.store_dir)
            .unwrap_or_else(|| PathBuf::from("./data"));
        let jetstream = resolve_jetstream(
            flags.jetstream,
            flags.sync,
            flags.journal_dir,
            file.jetstream.unwrap_or_default(),
            &store_dir,
        )?;
        let cluster = resolve_cluster(
            flags.cluster,
            flags.cluster_name,
            flags.routes,
            file.cluster,
        )?;
        let authorization = crate::auth::config::resolve(
            file.authorization.as_ref(),
            AuthFlags {
                user: flags.user,
                password: flags.pass,
                token: flags.auth,
            },
        )?;
        let tls = crate::tls::resolve(
            crate::tls::TlsFlags {
                tls: flags.tls,
                cert_file: flags.tlscert,
                key_file: flags.tlskey,
                verify: flags.tlsverify,
                ca_file: flags.tlscacert,
            },
            file.tls,
        )?;
        let config = Config {
            authorization: Arc::new(authorization),
            tls,
            cluster,
            host,
            port,
            http_port,
            http_host,
            server_name: flags.server_name.or(file.server_name),
            store_dir,
            cores,
            unpinned,
            limits,
            io_memory_bytes: resolve_size(
                "io_memory",
                flags.io_memory,
                file.io_memory,
                DEFAULT_IO_MEMORY_BYTES,
            )?,
            mesh_ring_capacity: DEFAULT_MESH_RING_CAPACITY,
            spin_before_park: resolve_duration(
                "spin_before_park",
                flags.spin_before_park,
                file.spin_before_park,
                Duration::ZERO,
            )?,
            spin_awaiting_reply: resolve_duration(
                "spin_awaiting_reply",
                flags.spin_awaiting_reply,
                file.spin_awaiting_reply,
                DEFAULT_SPIN_AWAITING_REPLY,
            )?,
            debug: flags.debug || file.debug.unwrap_or(false),
            config_file: flags.config,
            jetstream,
            source,
        };
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let limits = &self.limits;
        if limits.max_payload_bytes == 0 {
            return Err(invalid("max_payload", "must be positive"));
        }
        if limits.max_payload_bytes > MAX_PAYLOAD_LIMIT_BYTES {
            return Err(invalid(
                "max_payload",
                format!("cannot be higher than {MAX_PAYLOAD_LIMIT_BYTES} bytes"),
            ));
        }
        if limits.max_payload_bytes > limits.max_pending_bytes {
            return Err(invalid(
                "max_payload",
                format!(
                    "{} cannot be higher than max_pending {}",
                    limits.max_payload_bytes, limits.max_pending_bytes
                ),
            ));
        }
        if limits.max_control_line_bytes < 64 {
            return Err(invalid("max_control_line", "must be at least 64 bytes"));
        }
        if limits.max_connections == 0 {
            return Err(invalid("max_connections", "must be positive"));
        }
        if limits.ping_interval.is_zero() {
            return Err(invalid("ping_interval", "must be positive"));
        }
        if limits.write_deadline.is_zero() {
            return Err(invalid("write_deadline", "must be positive"));
        }
        if self.spin_awaiting_reply > MAX_SPIN_AWAITING_REPLY {
            return Err(invalid("spin_awaiting_reply", "must be at most 1ms"));
        }
        if self.io_memory_bytes < 64 * 1024 {
            return Err(invalid("io_memory", "must be at least 64KiB"));
        }
        if self.jetstream.is_some() && self.cluster.is_some() && self.server_name.is_none() {
            // Raft knows a node by its name (nats-server's rule and text).
            return Err(invalid(
                "server_name",
                "jetstream cluster requires `server_name` to be set",
            ));
        }
        if let Some(jetstream) = &self.jetstream {
            if jetstream.journal_segments < 2 {
                return Err(invalid("journal_segments", "must be at least 2"));
            }
            if jetstream.journal_segment_bytes < 4 << 20
                || jetstream.journal_segment_bytes % 4096 != 0
            {
                return Err(invalid(
                    "journal_segment_size",
                    "must be a multiple of 4KiB and at least 4MiB",
                ));
            }
        }
        Ok(())
    }
}
/// A size from its flag (text), else from the file (bytes or text), else
/// `default`.
fn resolve_size(
    field: &'static str,
    flag: Option<String>,
    file: Option<SizeValue>,
    default: usize,
) -> Result<usize, ConfigError> {
    match (flag, file) {
        (Some(text), _) => parse_size(&text).map_err(size_error(field)),
        (None, Some(SizeValue::Bytes(bytes))) => Ok(bytes as usize),
        (None, Some(SizeValue::Text(text))) => parse_size(&text).map_err(size_error(field)),
        (None, None) => Ok(default),
    }
}

/// A duration from its flag (text), else from the file (seconds or
/// text), else `default`.
fn resolve_duration(
    field: &'static str,
    flag: Option<String>,
    file: Option<DurationValue>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match (flag, file) {
        (Some(text), _) => crate::duration::parse_duration(&text)
            .map_err(|error| invalid(field, error.to_string())),
        (None, Some(DurationValue::Seconds(seconds))) => Ok(Duration::from_secs(seconds)),
        (None, Some(DurationValue::Text(text))) => crate::duration::parse_duration(&text)
            .map_err(|error| invalid(field, error.to_string())),
        (None, None) => Ok(default),
    }
}

/// The connection and message limits, flags over the file.
fn resolve_limits(flags: &Flags, file: &FileConfig) -> Result<Limits, ConfigError> {
    Ok(Limits {
        max_payload_bytes: resolve_size(
            "max_payload",
            flags.max_payload.clone(),
            file.max_payload.clone(),
            DEFAULT_MAX_PAYLOAD_BYTES,
        )?,
        max_pending_bytes: resolve_size(
            "max_pending",
            flags.max_pending.clone(),
            file.max_pending.clone(),
            DEFAULT_MAX_PENDING_BYTES,
        )?,
        max_connections: flags
            .max_connections
            .or(file.max_connections)
            .unwrap_or(DEFAULT_MAX_CONNECTIONS),
        max_subscriptions: flags
            .max_subscriptions
            .or(file.max_subscriptions)
            .unwrap_or(0),
        max_control_line_bytes: resolve_size(
            "max_control_line",
            flags.max_control_line.clone(),
            file.max_control_line.clone(),
            DEFAULT_MAX_CONTROL_LINE_BYTES,
        )?,
        ping_interval: resolve_duration(
            "ping_interval",
            flags.ping_interval.clone(),
            file.ping_interval.clone(),
            DEFAULT_PING_INTERVAL,
        )?,
        ping_max: flags.ping_max.or(file.ping_max).unwrap_or(DEFAULT_PING_MAX),
        write_deadline: resolve_duration(
            "write_deadline",
            flags.write_deadline.clone(),
            file.write_deadline.clone(),
            DEFAULT_WRITE_DEADLINE,
        )?,
    })
}

/// `[jetstream]`, when enabled by the flag or the file.
fn resolve_jetstream(
    enabled_flag: bool,
    sync_flag: Option<String>,
    journal_dir_flag: Option<PathBuf>,
    jetstream_file: JetStreamFile,
    store_dir: &Path,
) -> Result<Option<JetStreamConfig>, ConfigError> {
    if !(enabled_flag || jetstream_file.enabled.unwrap_or(false)) {
        return Ok(None);
    }
    let sync = match sync_flag.or(jetstream_file.sync).as_deref() {
        None | Some("always") => tern_storage::SyncPolicy::Always,
        Some("never") => tern_storage::SyncPolicy::Never,
        Some(other) => {
            return Err(invalid(
                "sync",
                format!("{other:?} is not `always` or `never`"),
            ))
        }
    };
    let limit = |field: &'static str, value: Option<SizeValue>| -> Result<i64, ConfigError> {
        match value {
            None => Ok(-1),
            Some(value) => resolve_size(field, None, Some(value), 0).map(|bytes| bytes as i64),
        }
    };
    Ok(Some(JetStreamConfig {
        sync,
        journal_dir: match (
            journal_dir_flag,
            jetstream_file.journal_dir,
            jetstream_file.journal_device,
        ) {
            (_, Some(_), Some(_)) => {
                return Err(invalid(
                    "journal_device",
                    "give either `journal_dir` or `journal_device`, not both",
                ))
            }
            (Some(path), _, _) | (None, Some(path), None) | (None, None, Some(path)) => path,
            (None, None, None) => store_dir.join("jetstream").join("journal"),
        },
        journal_segment_bytes: resolve_size(
            "journal_segment_size",
            None,
            jetstream_file.journal_segment_size,
            DEFAULT_JOURNAL_SEGMENT_BYTES as usize,
        )? as u64,
        journal_segments: jetstream_file
            .journal_segments
            .unwrap_or(DEFAULT_JOURNAL_SEGMENTS),
        max_memory_bytes: limit("max_memory_store", jetstream_file.max_memory_store)?,
        max_file_bytes: limit("max_file_store", jetstream_file.max_file_store)?,
        journal_ids: Vec::new(),
        journal_regions: Vec::new(),
        io_profile: jetstream_file.io_profile,
        io_settings: None,
        storage_reserve_bytes: match jetstream_file.storage_reserve {
            None => None,
            Some(value) => Some(resolve_size("storage_reserve", None, Some(value), 0)? as u64),
        },
    }))
}

/// The cluster flags over the `[cluster]` table: `None` unless a listen
/// address is given. nats-server names a cluster without a name after a
/// random id; tern asks for one, so two clusters never merge by accident.
fn resolve_cluster(
    listen_flag: Option<String>,
    name_flag: Option<String>,
    routes_flag: Option<String>,
    file: Option<ClusterFile>,
) -> Result<Option<ClusterConfig>, ConfigError> {
    let file = file.unwrap_or_default();
    let listen = match (listen_flag, file.listen, file.host, file.port) {
        (Some(url), ..) | (None, Some(url), ..) => {
            Some(HostPort::parse(&url, true).map_err(address("cluster"))?)
        }
        (None, None, host, Some(port)) => Some(
            HostPort::parse(
                &format!("{}:{port}", host.as_deref().unwrap_or("0.0.0.0")),
                true,
            )
            .map_err(address("cluster"))?,
        ),
        (None, None, _, None) => None,
    };
    let route_texts: Vec<String> = match routes_flag {
        Some(text) => text
            .split(',')
            .map(str::trim)
            .filter(|route| !route.is_empty())
            .map(str::to_string)
            .collect(),
        None => file.routes,
    };
    let name = name_flag.or(file.name);
    let Some(listen) = listen else {
        if !route_texts.is_empty() || name.is_some() || file.tls.is_some() {
            return Err(invalid(
                "cluster",
                "routes, a cluster name and [cluster.tls] need a cluster listen address (--cluster or [cluster] listen)",
            ));
        }
        return Ok(None);
    };
    let name = name.ok_or_else(|| {
        invalid(
            "cluster_name",
            "a cluster needs a name (--cluster_name or [cluster] name)",
        )
    })?;
    if name.is_empty()
        || name.contains(|c: char| c.is_whitespace() || c == '.' || c == '*' || c == '>')
    {
        return Err(invalid(
            "cluster_name",
            format!("{name:?}: no spaces, dots or wildcards"),
        ));
    }
    let routes = route_texts
        .iter()
        .map(|route| HostPort::parse(route, false).map_err(address("routes")))
        .collect::<Result<Vec<_>, _>>()?;
    if routes.len() > MAX_ROUTES {
        return Err(invalid("routes", format!("at most {MAX_ROUTES}")));
    }
    let tls = file.tls.map(crate::tls::resolve_route).transpose()?;
    Ok(Some(ClusterConfig {
        name,
        listen,
        routes,
        tls,
    }))
}

/// Most routes a configuration may list (and most nodes a cluster may have).
pub const MAX_ROUTES: usize = 64;

/// `1048576`, `64KB`, `64K`, `1MiB`, `1 MB`: KB/K/KiB all mean 1024 (as nats-server).
pub fn parse_size(text: &str) -> Result<usize, SizeError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let too_large = || SizeError::TooLarge {
        text: text.to_string(),
    };
    let value: u64 = digits.parse().map_err(|_| SizeError::NotSize {
        text: text.to_string(),
    })?;
    let multiplier: u64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => {
            return Err(SizeError::UnknownUnit {
                text: text.to_string(),
                unit: unit.to_string(),
            })
        }
    };
    let bytes = value.checked_mul(multiplier).ok_or_else(too_large)?;
    usize::try_from(bytes).map_err(|_| too_large())
}

/// Why a size (`64KB`) was refused; each text quotes what was given
/// (trimmed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("{text:?} is not a size")]
    NotSize { text: String },
    #[error("{text:?}: unknown size unit {unit:?}")]
    UnknownUnit { text: String, unit: String },
    #[error("{text:?} is too large")]
    TooLarge { text: String },
}

/// glommio opens directories by absolute path only (a relative one fails
/// with EBADF): the data paths resolved against the working directory, at
/// start and on every reload.
pub fn absolute_data_paths(config: &mut Config) {
    let absolute = |path: &std::path::Path| {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .map(|directory| directory.join(path))
                .unwrap_or_else(|_| path.to_path_buf())
        }
    };
    config.store_dir = absolute(&config.store_dir);
    if let Some(jetstream) = config.jetstream.as_mut() {
        jetstream.journal_dir = absolute(&jetstream.journal_dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> Result<Config, clap::Error> {
        Config::from_args(
            std::iter::once("tern-server")
                .chain(args.iter().copied())
                .map(String::from),
        )
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("64KB"), Ok(65536));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2 mb"), Ok(2 << 20));
        assert!(parse_size("1XB").is_err());
    }

    #[test]
    fn defaults() {
        let config = config(&[]).unwrap();
        assert_eq!(config.port, 4222);
        assert_eq!(config.http_port, Some(8222));
        assert_eq!(config.store_dir, PathBuf::from("./data"));
        assert_eq!(config.limits.max_payload_bytes, 1024 * 1024);
        assert_eq!(config.limits.ping_interval, Duration::from_secs(120));
        assert_eq!(config.cores, CpuList::online());
    }

    /// The README's secure config (section "Authentication and
    /// permissions") resolves whole: TLS on both ports, a cluster, users.
    #[test]
    fn the_readme_secure_config_resolves() {
        let readme = include_str!("../../README.md");
        let section = &readme[readme
            .find("### Authentication and permissions")
            .expect("the README's auth section")..];
        let start = section.find("```toml\n").expect("a toml block") + "```toml\n".len();
        let end = start + section[start..].find("```").expect("the block's end");
        let file = parse_file(&section[start..end]).unwrap_or_else(|error| panic!("{error}"));
        let flags = Flags {
            config: Some("tern.toml".into()),
            ..Flags::default()
        };
        let config = Config::resolve_with(flags, file).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(config.server_name.as_deref(), Some("n1"));
        assert!(config.jetstream.is_some());
        let tls = config.tls.expect("[tls]");
        assert!(!tls.verify);
        let cluster = config.cluster.expect("[cluster]");
        assert_eq!(cluster.routes.len(), 3);
        let routes = cluster.tls.expect("[cluster.tls]");
        assert_eq!(routes.ca_file, PathBuf::from("/etc/tern/cluster-ca.pem"));
        assert!(config.authorization.required());
    }

    #[test]
    fn nats_server_flag_names() {
        let config = config(&[
            "-a",
            "127.0.0.1",
            "-p",
            "-1",
            "-m",
            "-1",
            "-n",
            "edge",
            "-sd",
            "/tmp/x",
        ])
        .unwrap();
        assert_eq!(config.host, "127.0.0.1");
        assert_eq!(config.port, 0);
        assert_eq!(config.http_port, Some(0));
        assert_eq!(config.server_name.as_deref(), Some("edge"));
        assert_eq!(config.store_dir, PathBuf::from("/tmp/x"));
        let config = super::Config::from_args(
            [
                "tern-server",
                "--port",
                "5000",
                "--http_port",
                "0",
                "--max_payload",
                "64KB",
            ]
            .map(String::from),
        )
        .unwrap();
        assert_eq!(config.port, 5000);
        assert_eq!(config.http_port, None);
        assert_eq!(config.limits.max_payload_bytes, 65536);
    }

    #[test]
    fn cluster_flags_and_table() {
        let flags = config(&[
            "--cluster",
            "nats://127.0.0.1:-1",
            "--cluster_name",
            "orders",
            "--routes",
            "nats://10.0.0.2:6222, nats-route://[::1]:6223",
        ])
        .unwrap();
        let cluster = flags.cluster.unwrap();
        assert_eq!(cluster.name, "orders");
        assert_eq!(
            cluster.listen,
            HostPort {
                host: "127.0.0.1".into(),
                port: 0
            }
        );
        assert_eq!(
            cluster.routes,
            vec![
                HostPort {
                    host: "10.0.0.2".into(),
                    port: 6222
                },
                HostPort {
                    host: "::1".into(),
                    port: 6223
                }
            ]
        );
        assert_eq!(cluster.routes[1].to_string(), "[::1]:6223");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tern.toml");
        std::fs::write(
            &path,
            "[cluster]\nname = \"c1\"\nlisten = \"0.0.0.0:6222\"\nroutes = [\"nats://n2:6222\"]\n",
        )
        .unwrap();
        let file = config(&["-c", path.to_str().unwrap()]).unwrap();
        let cluster = file.cluster.unwrap();
        assert_eq!(cluster.listen.port, 6222);
        assert_eq!(cluster.routes[0].host, "n2");
        let overridden = config(&["-c", path.to_str().unwrap(), "--cluster_name", "c2"]).unwrap();
        assert_eq!(overridden.cluster.unwrap().name, "c2");

        assert!(config(&[]).unwrap().cluster.is_none());
        for bad in [
            &["--cluster", "nats://127.0.0.1:6222"][..],
            &["--routes", "nats://a:1"],
            &[
                "--cluster",
                "nats://127.0.0.1:6222",
                "--cluster_name",
                "a.b",
            ],
            &["--cluster", "127.0.0.1", "--cluster_name", "a"],
            &[
                "--cluster",
                "nats://h:1",
                "--cluster_name",
                "a",
                "--routes",
                "nats://u:p@h:2",
            ],
            &[
                "--cluster",
                "nats://h:1",
                "--cluster_name",
                "a",
                "--routes",
                "nats://h:-1",
            ],
        ] {
            assert!(config(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tern.toml");
        std::fs::write(
            &path,
            "port = 5555\nmax_payload = \"2MB\"\nping_interval = \"100ms\"\nping_max = 3\nmax_pending = 10485760\n",
        )
        .unwrap();
        let config = config(&["-c", path.to_str().unwrap(), "-p", "6666"]).unwrap();
        assert_eq!(config.port, 6666);
        assert_eq!(config.limits.max_payload_bytes, 2 * 1024 * 1024);
        assert_eq!(config.limits.ping_interval, Duration::from_millis(100));
        assert_eq!(config.limits.ping_max, 3);
        assert_eq!(config.limits.max_pending_bytes, 10 * 1024 * 1024);
    }

    #[test]
    fn unpinned_shards_count_cores_without_needing_them_online() {
        assert!(!config(&[]).unwrap().unpinned);
        // 4096 CPUs are not online here: pinned, that is refused.
        assert!(config(&["--cores", "0-4095"]).is_err());
        let flag = config(&["--unpinned", "--cores", "0-4095"]).unwrap();
        assert!(flag.unpinned);
        assert_eq!(flag.cores.len(), 4096);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tern.toml");
        std::fs::write(&path, "unpinned = true\ncores = \"0-2\"\n").unwrap();
        let file = config(&["-c", path.to_str().unwrap()]).unwrap();
        assert!(file.unpinned);
        assert_eq!(file.cores.len(), 3);
    }

    #[test]
    fn spin_awaiting_reply_is_off_by_default_and_bounded() {
        assert_eq!(config(&[]).unwrap().spin_awaiting_reply, Duration::ZERO);
        let on = config(&["--spin_awaiting_reply", "200us"]).unwrap();
        assert_eq!(on.spin_awaiting_reply, Duration::from_micros(200));
        assert!(config(&["--spin_awaiting_reply", "2ms"]).is_err());
    }

    #[test]
    fn jetstream_is_off_unless_asked_for() {
        assert_eq!(config(&[]).unwrap().jetstream, None);
        let enabled = config(&["-js", "-sd", "/tmp/y"]).unwrap();
        let jetstream = enabled.jetstream.expect("enabled by -js");
        assert_eq!(jetstream.sync, tern_storage::SyncPolicy::Always);
        assert_eq!(
            jetstream.journal_dir,
            PathBuf::from("/tmp/y/jetstream/journal")
        );
        assert_eq!(jetstream.max_file_bytes, -1);
        let never = config(&["--jetstream", "--sync", "never"]).unwrap();
        assert_eq!(
            never.jetstream.unwrap().sync,
            tern_storage::SyncPolicy::Never
        );
        assert!(config(&["--jetstream", "--sync", "sometimes"]).is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("js.toml");
        std::fs::write(
            &path,
            "[jetstream]\nenabled = true\nsync = \"never\"\njournal_segment_size = \"8MB\"\nmax_file_store = \"1GB\"\n",
        )
        .unwrap();
        let from_file = config(&["-c", path.to_str().unwrap()])
            .unwrap()
            .jetstream
            .unwrap();
        assert_eq!(from_file.sync, tern_storage::SyncPolicy::Never);
        assert_eq!(from_file.journal_segment_bytes, 8 << 20);
        assert_eq!(from_file.max_file_bytes, 1 << 30);
        // A raw journal device: `journal_device`, or `journal_dir` naming it;
        // giving both in the file is refused; the flag overrides either.
        std::fs::write(
            &path,
            "[jetstream]\nenabled = true\njournal_device = \"/dev/nvme0n1\"\n",
        )
        .unwrap();
        let device = config(&["-c", path.to_str().unwrap()])
            .unwrap()
            .jetstream
            .unwrap();
        assert_eq!(device.journal_dir, PathBuf::from("/dev/nvme0n1"));
        let flag = config(&["-c", path.to_str().unwrap(), "--journal_dir", "/dev/loop3"]);
        assert_eq!(
            flag.unwrap().jetstream.unwrap().journal_dir,
            PathBuf::from("/dev/loop3")
        );
        std::fs::write(
            &path,
            "[jetstream]\nenabled = true\njournal_device = \"/dev/a\"\njournal_dir = \"/j\"\n",
        )
        .unwrap();
        assert!(config(&["-c", path.to_str().unwrap()]).is_err());
    }

    #[test]
    fn rejects_bad_values() {
        assert!(config(&["--cores", "x"]).is_err());
        assert!(config(&["--max_payload", "2MB", "--max_pending", "1MB"]).is_err());
        assert!(config(&["-p", "70000"]).is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "no_such_option = 1\n").unwrap();
        assert!(config(&["-c", path.to_str().unwrap()]).is_err());
    }
}
