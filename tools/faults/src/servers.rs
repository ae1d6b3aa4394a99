//! The nodes: a `tern-server` or `nats-server` process per node, started
//! inside the node's namespace (`ip netns exec` execs the server, so the
//! child's pid is the server's), with its store under the run directory
//! and its output appended to `n<i>.log` there across restarts. Stopped,
//! paused and killed by that pid only.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::net::Network;

/// The client, cluster and monitoring ports, the same on every node (each
/// has its own address).
pub const CLIENT_PORT: u16 = 4222;
pub const CLUSTER_PORT: u16 = 6222;
pub const MONITOR_PORT: u16 = 8222;

#[derive(Debug, Clone)]
pub enum Server {
    Tern { binary: PathBuf, shards: usize },
    Nats { binary: PathBuf, sync_always: bool },
}

impl Server {
    pub fn describe(&self) -> String {
        match self {
            Server::Tern { shards, .. } => format!("tern-server ({shards} shards, sync always)"),
            Server::Nats {
                sync_always: true, ..
            } => "nats-server 2.15.1 (sync_interval: always)".into(),
            Server::Nats {
                sync_always: false, ..
            } => "nats-server 2.15.1 (default sync)".into(),
        }
    }

    pub fn is_tern(&self) -> bool {
        matches!(self, Server::Tern { .. })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{node}: {what}: {source}")]
    Io {
        node: String,
        what: String,
        source: std::io::Error,
    },
    #[error("{node}: the client port did not open within {timeout:?} (log: {log})")]
    NotListening {
        node: String,
        timeout: Duration,
        log: String,
    },
    #[error("{node} exited: {status} (log: {log})")]
    Exited {
        node: String,
        status: std::process::ExitStatus,
        log: String,
    },
}

#[derive(Debug)]
pub struct Node {
    pub number: usize,
    pub name: String,
    pub ip: String,
    dir: PathBuf,
    process: Option<Child>,
    paused: bool,
}

/// How long a (re)started server may take to open its client port.
const START_TIMEOUT: Duration = Duration::from_secs(30);

impl Node {
    pub fn new(number: usize, network: &Network, run_dir: &Path) -> Node {
        Node {
            number,
            name: format!("n{number}"),
            ip: network.ip(number),
            dir: run_dir.join(format!("n{number}")),
            process: None,
            paused: false,
        }
    }

    pub fn store_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.with_extension("log")
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Child::id)
    }

    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    pub fn url(&self) -> String {
        format!("nats://{}:{CLIENT_PORT}", self.ip)
    }

    /// Starts the server; returns once its client port accepts.
    pub async fn start(
        &mut self,
        server: &Server,
        network: &Network,
        cluster_name: &str,
    ) -> Result<(), ServerError> {
        assert!(self.process.is_none(), "{} is running", self.name);
        let io = |what: &str| {
            let node = self.name.clone();
            let what = what.to_string();
            move |source| ServerError::Io { node, what, source }
        };
        std::fs::create_dir_all(self.store_dir()).map_err(io("create the store dir"))?;
        let routes: Vec<String> = (1..=network.nodes())
            .filter(|&other| other != self.number)
            .map(|other| format!("nats://{}:{CLUSTER_PORT}", network.ip(other)))
            .collect();
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &network.namespace(self.number)]);
        match server {
            Server::Tern { binary, shards } => {
                command.arg(binary).args([
                    "-n",
                    &self.name,
                    "-a",
                    &self.ip,
                    "-p",
                    &CLIENT_PORT.to_string(),
                    "-m",
                    &MONITOR_PORT.to_string(),
                    "--jetstream",
                    "--cores",
                    &format!("0-{}", shards - 1),
                    // Every node shares the machine's CPUs.
                    "--unpinned",
                    "--cluster",
                    &format!("nats://{}:{CLUSTER_PORT}", self.ip),
                    "--cluster_name",
                    cluster_name,
                    "--routes",
                    &routes.join(","),
                ]);
                command.arg("--store_dir").arg(self.store_dir());
            }
            Server::Nats {
                binary,
                sync_always,
            } => {
                let config = self.dir.join("nats.conf");
                let routes: Vec<String> =
                    routes.iter().map(|route| format!("\"{route}\"")).collect();
                let sync = if *sync_always {
                    "sync_interval: always"
                } else {
                    ""
                };
                let text = format!(
                    "server_name: {name}\nlisten: \"{ip}:{CLIENT_PORT}\"\nhttp: \"{ip}:{MONITOR_PORT}\"\n\
                     jetstream {{\n  store_dir: \"{store}\"\n  {sync}\n}}\n\
                     cluster {{\n  name: {cluster_name}\n  listen: \"{ip}:{CLUSTER_PORT}\"\n  routes: [{routes}]\n}}\n",
                    name = self.name,
                    ip = self.ip,
                    store = self.store_dir().display(),
                    routes = routes.join(", "),
                );
                std::fs::write(&config, text).map_err(io("write nats.conf"))?;
                command.arg(binary).arg("-c").arg(config);
            }
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(io("open the log"))?;
        let log_for_stderr = log.try_clone().map_err(io("open the log"))?;
        command
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_for_stderr);
        let child = command.spawn().map_err(io("spawn"))?;
        self.process = Some(child);
        self.paused = false;
        self.wait_listening().await
    }

    async fn wait_listening(&mut self) -> Result<(), ServerError> {
        let deadline = Instant::now() + START_TIMEOUT;
        let address = format!("{}:{CLIENT_PORT}", self.ip);
        loop {
            if let Some(child) = self.process.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.process = None;
                    return Err(ServerError::Exited {
                        node: self.name.clone(),
                        status,
                        log: self.log_path().display().to_string(),
                    });
                }
            }
            let connect = tokio::net::TcpStream::connect(&address);
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(200), connect).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(ServerError::NotListening {
                    node: self.name.clone(),
                    timeout: START_TIMEOUT,
                    log: self.log_path().display().to_string(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn signal(&self, signal: libc::c_int) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) on a pid this harness spawned and has not yet
            // reaped, so it cannot name another process.
            unsafe {
                libc::kill(pid as libc::pid_t, signal);
            }
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        if let Some(mut child) = self.process.take() {
            let _ = child.wait();
        }
        self.paused = false;
    }

    pub fn pause(&mut self) {
        assert!(
            self.is_running() && !self.paused,
            "{} not running",
            self.name
        );
        self.signal(libc::SIGSTOP);
        self.paused = true;
    }

    pub fn resume(&mut self) {
        if self.paused {
            self.signal(libc::SIGCONT);
            self.paused = false;
        }
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub async fn stop(&mut self, grace: Duration) {
        self.resume();
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while let Some(child) = self.process.as_mut() {
            if let Ok(Some(_)) = child.try_wait() {
                self.process = None;
                return;
            }
            if Instant::now() > deadline {
                self.kill();
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the process died by itself (a crash the harness did not
    /// cause): reaped and reported.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.process.as_mut()?.try_wait().ok()??;
        self.process = None;
        Some(status)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}
