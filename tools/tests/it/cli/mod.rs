//! The operator CLI (`tern stream|consumer|pub|sub|req|kv|object|server
//! check`) through the real `tern` binary, against a real `tern-server`
//! (one node, JetStream, a temp store, free ports) and against nats-server
//! 2.15.1 side by side: the same commands must print the same lines and
//! JSON of the same shape, and have the same effects.
//!
//! Each test starts its own pair of servers (tens of milliseconds each) so
//! the tests run in parallel and share nothing. Nothing sleeps to
//! synchronise: every wait is a bounded poll.

// Test harness: a closure shared by the two flavors' threads.
#![allow(clippy::disallowed_types)]

mod buckets;
mod checklist;
mod checks;
mod cluster;
mod consumers;
mod credentials;
mod exports;
mod flags;
mod flow;
mod messages;
mod monitoring;
mod streams;
mod usage;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Bound on a server's start and on any one `tern` run.
pub const TIMEOUT: Duration = Duration::from_secs(30);
/// Poll interval of the bounded waits for a process.
const POLL: Duration = Duration::from_millis(5);
/// A small journal: every test server formats its own, zero-filled.
const TERN_CONFIG: &str = "[jetstream]\njournal_segment_size = 4194304\njournal_segments = 2\n";
/// nats-server reserves a stream's max_bytes against the store's limit,
/// which defaults to the disk's free space: the users' `--max-bytes 500GB`
/// needs a limit that large (nothing is written beforehand).
const NATS_CONFIG: &str = "jetstream {\n  max_file_store: 1TB\n}\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Tern,
    Nats,
}

/// A running server; dropping it kills the process (by its PID) and
/// removes its directory.
pub struct Server {
    pub flavor: Flavor,
    child: Child,
    port: u16,
    http_port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The port at the end of a `... on HOST:PORT` log line.
fn port_after(line: &str, marker: &str) -> Option<u16> {
    let rest = &line[line.find(marker)? + marker.len()..];
    rest.trim().rsplit(':').next()?.trim().parse().ok()
}

impl Server {
    pub fn start(flavor: Flavor) -> Server {
        Server::start_with(flavor, "")
    }

    /// Started with `extra` appended to its config file (TOML for tern,
    /// nats-server's format for nats-server).
    pub fn start_with(flavor: Flavor, extra: &str) -> Server {
        Server::start_node(flavor, extra, &[])
    }

    /// [`Server::start_with`], with `args` appended to its command line
    /// (a cluster node's `-n`, `--cluster`, `--routes`, …).
    pub fn start_node(flavor: Flavor, extra: &str, args: &[String]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        let mut command = match flavor {
            Flavor::Tern => {
                let config = dir.path().join("tern.toml");
                std::fs::write(&config, format!("{extra}\n{TERN_CONFIG}"))
                    .expect("write tern.toml");
                let program = tern_bench::server::tern_server_path()
                    .unwrap_or_else(|error| panic!("{error} (run `cargo build -p tern-broker`)"));
                let mut command = Command::new(program);
                command
                    .args(["-a", "127.0.0.1", "-p", "-1", "-m", "-1"])
                    .args(["--cores", "0-1", "--unpinned", "--jetstream", "-c"])
                    .arg(config)
                    .arg("--store_dir")
                    .arg(data);
                command
            }
            Flavor::Nats => {
                let config = dir.path().join("nats.conf");
                std::fs::write(&config, format!("{NATS_CONFIG}{extra}\n"))
                    .expect("write nats.conf");
                let program = tern_bench::server::nats_server_path()
                    .unwrap_or_else(|error| panic!("{error}"));
                let mut command = Command::new(program);
                command
                    .args(["-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-c"])
                    .arg(config)
                    .arg("-js")
                    .arg("-sd")
                    .arg(data);
                command
            }
        };
        let mut child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {flavor:?}: {error}"));
        let stderr = child.stderr.take().expect("piped stderr");
        let (lines, log) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                // After start-up nobody listens; keep draining regardless.
                let _ = lines.send(line);
            }
        });
        let deadline = Instant::now() + TIMEOUT;
        let (mut port, mut http_port, mut seen) = (None, None, Vec::new());
        while port.is_none() || http_port.is_none() {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match log.recv_timeout(remaining) {
                Ok(line) => {
                    port = port.or(port_after(&line, "Listening for client connections on "));
                    http_port = http_port.or(port_after(&line, "Starting http monitor on "));
                    seen.push(line);
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("{flavor:?} did not start; stderr:\n{}", seen.join("\n"));
                }
            }
        }
        Server {
            flavor,
            child,
            port: port.unwrap(),
            http_port: http_port.unwrap(),
            _dir: dir,
        }
    }

    /// SIGKILLs the server (by its PID) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn monitor_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// Runs `tern -s <this server> args…`.
    pub fn tern(&self, args: &[&str]) -> Run {
        let url = self.url();
        let mut all = vec!["-s", url.as_str()];
        all.extend_from_slice(args);
        tern(&all)
    }

    /// An async-nats client of this server (for the test's own side).
    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.url()).await.expect("connect")
    }
}

/// Runs `body` against a tern-server and a nats-server at once (each in
/// its own thread, each with its own fresh server) and returns both
/// results, tern's first.
pub fn on_both<T: Send>(body: impl Fn(&Server) -> T + Sync) -> (T, T) {
    std::thread::scope(|scope| {
        let body = &body;
        let nats = scope.spawn(move || body(&Server::start(Flavor::Nats)));
        let tern = body(&Server::start(Flavor::Tern));
        let nats = nats
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (tern, nats)
    })
}

/// Runs `body` for tern and for nats-server at once (each in its own
/// thread), for tests that start their own servers.
pub fn on_both_flavors(body: impl Fn(Flavor) + Sync) {
    std::thread::scope(|scope| {
        let body = &body;
        let nats = scope.spawn(move || body(Flavor::Nats));
        body(Flavor::Tern);
        nats.join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    })
}

/// A finished `tern` run.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Stdout of a run that must have succeeded.
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, Some(0), "tern failed: {self:?}");
        &self.stdout
    }

    /// Stdout parsed as JSON, of a run that must have succeeded.
    pub fn json(&self) -> Value {
        serde_json::from_str(self.ok())
            .unwrap_or_else(|error| panic!("not JSON ({error}): {self:?}"))
    }

    /// A failed run's stderr: one line, starting `tern: `.
    pub fn one_line_error(&self, code: i32) -> &str {
        assert_eq!(self.code, Some(code), "{self:?}");
        let error = self.stderr.trim_end();
        assert!(
            error.starts_with("tern: ") && !error.contains('\n'),
            "not a one-line error: {self:?}"
        );
        error
    }
}

pub fn tern_program() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tern"))
}

/// `tern args…` with the NATS_* environment cleared, waited for at most
/// [`TIMEOUT`].
pub fn tern(args: &[&str]) -> Run {
    run_command(tern_command(args), args)
}

/// Runs a `tern` command (from [`tern_command`]), waited for at most
/// [`TIMEOUT`].
pub fn run_command(mut command: Command, args: &[&str]) -> Run {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tern");
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let status = wait_bounded(&mut child, args);
    Run {
        code: status.code(),
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

/// Runs a `tern` command with `input` on its stdin, waited for at most
/// [`TIMEOUT`].
pub fn run_with_input(mut command: Command, args: &[&str], input: &[u8]) -> Run {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tern");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let _ = stdin.write_all(&input);
    });
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let status = wait_bounded(&mut child, args);
    let _ = writer.join();
    Run {
        code: status.code(),
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

pub fn tern_command(args: &[&str]) -> Command {
    let mut command = Command::new(tern_program());
    for variable in [
        "NATS_URL",
        "NATS_USER",
        "NATS_PASSWORD",
        "NATS_TOKEN",
        "NATS_NKEY",
        "NATS_CERT",
        "NATS_KEY",
        "NATS_CA",
        "NATS_TIMEOUT",
        "NATS_CREDS",
        "NATS_JWT",
        "NATS_SEED",
        "NATS_SOCKS_PROXY",
        "NATS_COLOR",
        "NATS_CONTEXT",
    ] {
        command.env_remove(variable);
    }
    // No nats CLI context of the host's (~/.config/nats) reaches a test.
    command.env("XDG_CONFIG_HOME", "/nonexistent/tern-test-config");
    command.args(args);
    command
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}

/// Waits for the child (bounded); kills it and fails the test at the bound.
pub fn wait_bounded(child: &mut Child, what: &[&str]) -> std::process::ExitStatus {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tern {what:?} did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(POLL);
    }
}

/// Every key path of a JSON value (`config.subjects[]`), for comparing
/// the shapes of two servers' answers.
pub fn key_paths(value: &Value) -> BTreeSet<String> {
    fn walk(value: &Value, prefix: &str, paths: &mut BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    paths.insert(path.clone());
                    walk(child, &path, paths);
                }
            }
            Value::Array(items) => {
                for item in items {
                    walk(item, &format!("{prefix}[]"), paths);
                }
            }
            _ => {}
        }
    }
    let mut paths = BTreeSet::new();
    walk(value, "", &mut paths);
    paths
}

/// A tokio runtime for a test's own async-nats side.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}
