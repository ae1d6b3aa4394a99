//! js-bench: the JetStream durable publish path (publish -> PubAck) measured
//! on tern-server and nats-server side by side in one run.
//!
//! ```text
//! cargo build --release -p tern-broker -p tern-bench
//! ./target/release/js-bench \
//!     [--only tern,nats-sync,nats] [--tern target/release/tern-server] [--nats nats-server] \
//!     [--samples 20000] [--warmup 2000] [--messages 200000] [--window 256] [--payload 1024] \
//!     [--server-cpu 1] [--client-cpu 0] [--tern-cores 0,1] [--no-cross-shard] \
//!     [--dir /tmp] [--timeout-secs 10] [--tern-arg=--spin_before_park --tern-arg=200us ...]
//! ```
//!
//! Servers, each started in a fresh directory under `--dir` (default: the
//! system temp dir) and removed afterwards, pinned to `--server-cpu` (as
//! `taskset -c 1` would) while the client runs on `--client-cpu`:
//! - `tern`: `tern-server -a 127.0.0.1 -p -1 -m -1 -js -sd <dir> --sync always --cores 1`;
//! - `nats-sync`: nats-server with `jetstream { store_dir: "<dir>", sync_interval: always }`
//!   (an fsync before every PubAck, as tern's `--sync always`);
//! - `nats`: nats-server with `jetstream { store_dir: "<dir>" }` (its default:
//!   PubAck after the write, fsync every two minutes).
//!
//! On each, stream `BENCH` (R1, file storage, subjects `bench.>`) is created
//! with a raw `$JS.API.STREAM.CREATE.BENCH` request, and a raw-protocol client
//! (std `TcpStream`, one thread, no async-nats) publishes `PUB bench.x
//! _INBOX.bench.<n> <payload>` with `SUB _INBOX.bench.* 1`, matching every
//! PubAck to its publish by the unique reply subject and checking it carries
//! `"seq"` and no `"error"`. Measures:
//! 1. latency: one publish in flight, publish -> PubAck, `--warmup` then
//!    `--samples` (HDR histogram: p50/p90/p99/p99.9/max);
//! 2. throughput: `--window` publishes in flight (fill the window, then one
//!    new publish per PubAck, written in batches per read), msgs/s over
//!    `--messages` acknowledged publishes;
//! 3. tern only, cross-shard cost: a second tern with one shard per CPU of
//!    `--tern-cores` (default `0,1`: the client then shares CPU 0 with shard 0,
//!    there being no third CPU on the reference machine). Streams are created
//!    until one is owned by the client connection's shard and one by another
//!    (owner from `GET /jsz?streams=true`, the connection's shard from `GET
//!    /connz`, matched by the client's port); publishes alternate between the
//!    two streams, one in flight, and p50/p99 of each plus the difference are
//!    reported. If the monitor does not tell, two streams are measured and the
//!    shards reported as unknown;
//! 4. peak RSS (VmHWM) of each server process after its runs.
//!
//! CPU lists, pinning and RSS come from the `tern_bench` library (the
//! `tern bench` engine); its raw-protocol client stays here.
//!
//! A benchmark, not a test: it never fails on a number. It exits non-zero only
//! when something went wrong (a server did not start, a stream could not be
//! created, a PubAck was an error or did not come), after reporting the error
//! for that server and measuring the others.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tern_bench::{server, system};

// ----- settings ---------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Tern,
    NatsSync,
    Nats,
}

impl Target {
    const ALL: [Target; 3] = [Target::Tern, Target::NatsSync, Target::Nats];

    fn flag(self) -> &'static str {
        match self {
            Target::Tern => "tern",
            Target::NatsSync => "nats-sync",
            Target::Nats => "nats",
        }
    }

    fn column(self) -> &'static str {
        match self {
            Target::Tern => "tern (--sync always)",
            Target::NatsSync => "nats sync always",
            Target::Nats => "nats default",
        }
    }
}

struct Settings {
    targets: Vec<Target>,
    tern: String,
    nats: String,
    server_cpu: usize,
    client_cpu: usize,
    tern_cores: String,
    /// The shard the cross-shard client connection should land on.
    client_shard: usize,
    cross_shard: bool,
    samples: usize,
    warmup: usize,
    messages: usize,
    window: usize,
    payload: usize,
    dir: PathBuf,
    timeout: Duration,
    tern_extra: Vec<String>,
}

const USAGE: &str =
    "usage: js-bench [--only tern|nats|nats-sync[,...]] [--tern PATH] [--nats PATH] \
[--samples N] [--warmup N] [--messages N] [--window N] [--payload BYTES] [--server-cpu N] \
[--client-cpu N] [--tern-cores LIST] [--client-shard N] [--no-cross-shard] [--dir DIR] [--timeout-secs N] \
[--tern-arg=ARG ...]";

fn settings() -> Result<Settings, String> {
    let mut settings = Settings {
        targets: Target::ALL.to_vec(),
        tern: "target/release/tern-server".into(),
        nats: "nats-server".into(),
        server_cpu: 1,
        client_cpu: 0,
        tern_cores: "0,1".into(),
        client_shard: 0,
        cross_shard: true,
        samples: 20_000,
        warmup: 2_000,
        messages: 200_000,
        window: 256,
        payload: 1024,
        dir: std::env::temp_dir(),
        timeout: Duration::from_secs(10),
        tern_extra: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_string(), Some(value)),
            _ => (arg.clone(), None),
        };
        match flag.as_str() {
            "--no-cross-shard" => {
                settings.cross_shard = false;
                continue;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => {}
        }
        let value = match inline {
            Some(value) => value.to_string(),
            None => args
                .next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?,
        };
        let number = |value: &str| {
            value
                .replace('_', "")
                .parse::<usize>()
                .map_err(|_| format!("{flag}: {value:?} is not a number"))
        };
        match flag.as_str() {
            "--only" => {
                settings.targets = Vec::new();
                for name in value.split(',').filter(|name| !name.is_empty()) {
                    let target = Target::ALL
                        .into_iter()
                        .find(|target| target.flag() == name)
                        .ok_or_else(|| {
                            format!("--only: {name:?} is not tern, nats or nats-sync")
                        })?;
                    if !settings.targets.contains(&target) {
                        settings.targets.push(target);
                    }
                }
                settings.targets.sort_by_key(|target| *target as u8);
            }
            "--tern" => settings.tern = value,
            "--nats" => settings.nats = value,
            "--server-cpu" => settings.server_cpu = number(&value)?,
            "--client-cpu" => settings.client_cpu = number(&value)?,
            "--tern-cores" => {
                parse_cpu_list(&value)?;
                settings.tern_cores = value;
            }
            "--client-shard" => settings.client_shard = number(&value)?,
            "--samples" => settings.samples = number(&value)?.max(1),
            "--warmup" => settings.warmup = number(&value)?,
            "--messages" => settings.messages = number(&value)?.max(1),
            "--window" => settings.window = number(&value)?.max(1),
            "--payload" => settings.payload = number(&value)?,
            "--dir" => settings.dir = PathBuf::from(value),
            "--timeout-secs" => {
                settings.timeout = Duration::from_secs(number(&value)?.max(1) as u64)
            }
            "--tern-arg" => settings.tern_extra.push(value),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(settings)
}

/// taskset syntax: `1`, `0-3`, `0,2`, `0-1,4` (the library's parser).
fn parse_cpu_list(list: &str) -> Result<Vec<usize>, String> {
    server::parse_cpu_list(list).map_err(|error| error.to_string())
}

fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    server::cpu_set(cpus)
}

fn pin_current_thread(cpu: usize) {
    let _ = server::pin_current_thread(&[cpu]);
}

// ----- servers ----------------------------------------------------------------

/// A server process and its data directory; dropping it kills the process and
/// removes the directory.
struct Server {
    child: Child,
    port: u16,
    http_port: Option<u16>,
    log: Receiver<String>,
    tail: VecDeque<String>,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        // Write back whatever this server left dirty so the next one does not
        // pay for it.
        // SAFETY: sync(2) takes no arguments and cannot fail.
        unsafe { libc::sync() };
    }
}

const LOG_TAIL_LINES: usize = 12;

impl Server {
    fn start(
        program: &str,
        args: &[String],
        cpus: &[usize],
        dir: PathBuf,
        timeout: Duration,
    ) -> Result<Server, String> {
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let set = cpu_set(cpus);
        // SAFETY: pre_exec runs in the child between fork and exec; it only
        // calls sched_setaffinity, which is async-signal-safe, on a set
        // computed before the fork.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(move || {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|error| format!("cannot start {program}: {error}"))?;
        let stderr = child.stderr.take().expect("stderr piped");
        let (sender, log) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            child,
            port: 0,
            http_port: None,
            log,
            tail: VecDeque::new(),
            dir,
        };
        let deadline = Instant::now() + timeout;
        let mut port = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match server.log.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.split("Listening for client connections on ").nth(1) {
                        port = last_port(rest);
                    }
                    if let Some(rest) = line.split("Starting http monitor on ").nth(1) {
                        server.http_port = last_port(rest);
                    }
                    let ready = line.contains("Server is ready");
                    server.remember(line);
                    if ready {
                        // From here on a failure shows only what the server
                        // logged after starting.
                        server.tail.clear();
                        break;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(server.failure(&format!(
                        "{program} did not say \"Server is ready\" within {} s",
                        timeout.as_secs()
                    )))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(server.failure(&format!("{program} exited while starting")))
                }
            }
        }
        server.port = port.ok_or_else(|| server.failure("the server did not log its port"))?;
        Ok(server)
    }

    fn remember(&mut self, line: String) {
        if self.tail.len() == LOG_TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(line);
    }

    /// `what`, whether the process is still running, and its last log lines.
    fn failure(&mut self, what: &str) -> String {
        std::thread::sleep(Duration::from_millis(100));
        while let Ok(line) = self.log.try_recv() {
            self.remember(line);
        }
        let mut text = what.to_string();
        match self.child.try_wait() {
            Ok(Some(status)) => {
                let _ = write!(text, " (server exited: {status})");
            }
            Ok(None) => text.push_str(" (server still running)"),
            Err(_) => {}
        }
        if !self.tail.is_empty() {
            text.push_str("; server log (last lines):");
            for line in &self.tail {
                let _ = write!(text, "\n    {line}");
            }
        }
        text
    }

    fn peak_rss_bytes(&self) -> Option<u64> {
        system::status_kib(self.child.id(), "VmHWM:").map(|kib| kib * 1024)
    }
}

fn last_port(address: &str) -> Option<u16> {
    address.trim().rsplit(':').next()?.parse().ok()
}

fn fresh_dir(settings: &Settings, name: &str) -> Result<PathBuf, String> {
    let dir = settings
        .dir
        .join(format!("js-bench-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
    Ok(dir)
}

fn start_tern(settings: &Settings, name: &str, cores: &str) -> Result<Server, String> {
    let cpus = parse_cpu_list(cores)?;
    let dir = fresh_dir(settings, name)?;
    let mut args: Vec<String> = [
        "-a",
        "127.0.0.1",
        "-p",
        "-1",
        "-m",
        "-1",
        "-js",
        "-sd",
        &dir.display().to_string(),
        "--sync",
        "always",
        "--cores",
        cores,
    ]
    .map(String::from)
    .to_vec();
    args.extend(settings.tern_extra.iter().cloned());
    Server::start(&settings.tern, &args, &cpus, dir, settings.timeout)
}

fn start_nats(settings: &Settings, name: &str, sync_always: bool) -> Result<Server, String> {
    let dir = fresh_dir(settings, name)?;
    let config = dir.join("nats-server.conf");
    let sync = if sync_always {
        "  sync_interval: always\n"
    } else {
        ""
    };
    let store = dir.join("store");
    std::fs::write(
        &config,
        format!(
            "jetstream {{\n  store_dir: \"{}\"\n{sync}}}\n",
            store.display()
        ),
    )
    .map_err(|error| format!("cannot write {}: {error}", config.display()))?;
    let args: Vec<String> = [
        "-a",
        "127.0.0.1",
        "-p",
        "-1",
        "-m",
        "-1",
        "-c",
        &config.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    Server::start(
        &settings.nats,
        &args,
        &[settings.server_cpu],
        dir,
        settings.timeout,
    )
}

// ----- raw NATS client -----------------------------------------------------------

const INBOX_PREFIX: &str = "_INBOX.bench.";

/// One protocol message from the server, as far as the bench cares.
enum Event {
    /// `MSG`/`HMSG` on our inbox: the reply id, the header status if any
    /// (`503` = no responders), the payload's range in the read buffer.
    Reply {
        id: u64,
        status: Option<u16>,
        payload: Range<usize>,
    },
    /// Anything else (`PONG`, `+OK`, `INFO`, ...).
    Other,
    Pong,
}

struct Client {
    stream: TcpStream,
    local_port: u16,
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    out: Vec<u8>,
    payload: Vec<u8>,
    next_id: u64,
}

impl Client {
    fn connect(port: u16, payload_bytes: usize, timeout: Duration) -> Result<Client, String> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .map_err(|error| format!("cannot connect to 127.0.0.1:{port}: {error}"))?;
        stream
            .set_nodelay(true)
            .map_err(|error| error.to_string())?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|error| error.to_string())?;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(|error| error.to_string())?;
        let local_port = stream
            .local_addr()
            .map_err(|error| error.to_string())?
            .port();
        let mut client = Client {
            stream,
            local_port,
            buffer: vec![0; 256 * 1024],
            start: 0,
            end: 0,
            out: Vec::with_capacity(1 << 20),
            payload: (0..payload_bytes)
                .map(|index| b'a' + (index % 26) as u8)
                .collect(),
            next_id: 0,
        };
        client.write(
            b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"no_responders\":true,\
              \"name\":\"js-bench\",\"lang\":\"rust\",\"version\":\"0\",\"protocol\":1}\r\n\
              SUB _INBOX.bench.* 1\r\nPING\r\n",
        )?;
        loop {
            match client.next_event()? {
                Event::Pong => break,
                Event::Reply { id, .. } => return Err(format!("unexpected reply {id}")),
                Event::Other => {}
            }
        }
        Ok(client)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream
            .write_all(bytes)
            .map_err(|error| format!("write to server: {error}"))
    }

    fn flush_out(&mut self) -> Result<(), String> {
        if self.out.is_empty() {
            return Ok(());
        }
        let result = self.stream.write_all(&self.out);
        self.out.clear();
        result.map_err(|error| format!("write to server: {error}"))
    }

    /// Appends `PUB <subject> _INBOX.bench.<id> <len>` with `body` (or the
    /// benchmark payload) to the output buffer; returns the id.
    fn push_pub(&mut self, subject: &str, body: Option<&[u8]>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let body = body.unwrap_or(&self.payload);
        let _ = write!(
            VecWriter(&mut self.out),
            "PUB {subject} {INBOX_PREFIX}{id} {}\r\n",
            body.len()
        );
        self.out.extend_from_slice(body);
        self.out.extend_from_slice(b"\r\n");
        id
    }

    /// Reads once from the socket (blocking up to the read timeout).
    fn fill(&mut self) -> Result<(), String> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buffer.len() {
            if self.start > 0 {
                self.buffer.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                let grown = self.buffer.len() * 2;
                self.buffer.resize(grown, 0);
            }
        }
        match self.stream.read(&mut self.buffer[self.end..]) {
            Ok(0) => Err("the server closed the connection".into()),
            Ok(bytes) => {
                self.end += bytes;
                Ok(())
            }
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(format!(
                    "nothing from the server for {} s",
                    self.stream
                        .read_timeout()
                        .ok()
                        .flatten()
                        .unwrap_or_default()
                        .as_secs()
                ))
            }
            Err(error) => Err(format!("read from server: {error}")),
        }
    }

    fn next_event(&mut self) -> Result<Event, String> {
        loop {
            if let Some(event) = self.try_event()? {
                return Ok(event);
            }
            self.fill()?;
        }
    }

    /// The next complete protocol message already in the buffer, if any.
    /// Answers server PINGs.
    fn try_event(&mut self) -> Result<Option<Event>, String> {
        let available = &self.buffer[self.start..self.end];
        let Some(line_end) = available.windows(2).position(|pair| pair == b"\r\n") else {
            return Ok(None);
        };
        let line = &available[..line_end];
        let body_start = self.start + line_end + 2;
        let mut words = line
            .split(|&byte| byte == b' ' || byte == b'\t')
            .filter(|word| !word.is_empty());
        let op = words.next().unwrap_or_default().to_ascii_uppercase();
        match op.as_slice() {
            b"MSG" | b"HMSG" => {
                let words: Vec<&[u8]> = words.collect();
                let headers = op == b"HMSG";
                let sizes = if headers { 2 } else { 1 };
                if words.len() < 2 + sizes {
                    return Err(format!(
                        "bad protocol line {:?}",
                        String::from_utf8_lossy(line)
                    ));
                }
                let number = |word: &[u8]| -> Result<usize, String> {
                    std::str::from_utf8(word)
                        .ok()
                        .and_then(|text| text.parse().ok())
                        .ok_or_else(|| {
                            format!("bad protocol line {:?}", String::from_utf8_lossy(line))
                        })
                };
                let total = number(words[words.len() - 1])?;
                let header_bytes = if headers {
                    number(words[words.len() - 2])?
                } else {
                    0
                };
                if header_bytes > total {
                    return Err(format!(
                        "bad protocol line {:?}",
                        String::from_utf8_lossy(line)
                    ));
                }
                let subject = words[0];
                if self.end < body_start + total + 2 {
                    return Ok(None);
                }
                let id = subject
                    .strip_prefix(INBOX_PREFIX.as_bytes())
                    .and_then(|token| std::str::from_utf8(token).ok())
                    .and_then(|token| token.parse::<u64>().ok())
                    .ok_or_else(|| {
                        format!(
                            "message on unexpected subject {:?}",
                            String::from_utf8_lossy(subject)
                        )
                    })?;
                let status = if headers {
                    let header = &self.buffer[body_start..body_start + header_bytes];
                    header.strip_prefix(b"NATS/1.0").and_then(|rest| {
                        let rest = std::str::from_utf8(rest).ok()?;
                        rest.split_whitespace().next()?.parse::<u16>().ok()
                    })
                } else {
                    None
                };
                let payload = body_start + header_bytes..body_start + total;
                self.start = body_start + total + 2;
                Ok(Some(Event::Reply {
                    id,
                    status,
                    payload,
                }))
            }
            b"PING" => {
                self.start = body_start;
                self.write(b"PONG\r\n")?;
                Ok(Some(Event::Other))
            }
            b"PONG" => {
                self.start = body_start;
                Ok(Some(Event::Pong))
            }
            b"-ERR" => Err(format!("server error: {}", String::from_utf8_lossy(line))),
            _ => {
                self.start = body_start;
                Ok(Some(Event::Other))
            }
        }
    }

    /// A request-reply exchange with one request in flight; the reply's payload.
    fn request(&mut self, subject: &str, body: &[u8]) -> Result<String, String> {
        let id = self.push_pub(subject, Some(body));
        self.flush_out()?;
        loop {
            match self.next_event() {
                Ok(Event::Reply {
                    id: got,
                    status,
                    payload,
                }) if got == id => {
                    return match status {
                        Some(503) => Err(format!(
                            "no responders to {subject} (503): the server has no JetStream API"
                        )),
                        Some(status) if payload.is_empty() => {
                            Err(format!("status {status} in reply to {subject}"))
                        }
                        _ => Ok(String::from_utf8_lossy(&self.buffer[payload]).into_owned()),
                    };
                }
                Ok(Event::Reply { id: got, .. }) => {
                    return Err(format!("reply {got} while waiting for {id}"))
                }
                Ok(_) => {}
                Err(error) => return Err(format!("{subject}: {error}")),
            }
        }
    }

    fn create_stream(&mut self, name: &str, subjects: &str) -> Result<(), String> {
        let body = format!(
            "{{\"name\":\"{name}\",\"subjects\":[\"{subjects}\"],\"retention\":\"limits\",\
             \"storage\":\"file\",\"num_replicas\":1,\"discard\":\"old\"}}"
        );
        let subject = format!("$JS.API.STREAM.CREATE.{name}");
        let reply = self.request(&subject, body.as_bytes())?;
        if let Some(error) = api_error(&reply) {
            return Err(format!("{subject}: {error}"));
        }
        Ok(())
    }

    fn delete_stream(&mut self, name: &str) {
        let _ = self.request(&format!("$JS.API.STREAM.DELETE.{name}"), b"");
    }

    /// Checks a reply to one of our publishes.
    fn check_ack(&self, status: Option<u16>, payload: Range<usize>) -> Result<(), String> {
        let ack = &self.buffer[payload];
        let text = || String::from_utf8_lossy(ack).into_owned();
        if status == Some(503) {
            return Err("no responders to the publish (503): no stream took it".into());
        }
        if contains(ack, b"\"error\"") {
            return Err(format!("error PubAck: {}", text()));
        }
        if !has_key(ack, b"\"seq\"") {
            return Err(format!("PubAck without \"seq\": {:?}", text()));
        }
        Ok(())
    }

    /// Publishes to `subjects[i % len]` with one publish in flight; one
    /// histogram (ns) per subject.
    fn latency(
        &mut self,
        subjects: &[&str],
        warmup: usize,
        samples: usize,
    ) -> Result<Vec<Histogram<u64>>, String> {
        let mut histograms = vec![new_histogram(); subjects.len()];
        let rounds = subjects.len() * (warmup + samples);
        for round in 0..rounds {
            let which = round % subjects.len();
            let id = self.push_pub(subjects[which], None);
            let start = Instant::now();
            self.flush_out()?;
            loop {
                match self.try_event()? {
                    Some(Event::Reply {
                        id: got,
                        status,
                        payload,
                    }) => {
                        let elapsed = start.elapsed();
                        if got != id {
                            return Err(format!("PubAck for {got} while waiting for {id}"));
                        }
                        self.check_ack(status, payload)?;
                        if round >= subjects.len() * warmup {
                            histograms[which]
                                .record(elapsed.as_nanos() as u64)
                                .map_err(|error| error.to_string())?;
                        }
                        break;
                    }
                    Some(_) => {}
                    None => self.fill()?,
                }
            }
        }
        Ok(histograms)
    }

    /// `window` publishes in flight until `messages` are acknowledged; msgs/s.
    fn throughput(&mut self, subject: &str, messages: usize, window: usize) -> Result<f64, String> {
        let first = self.next_id;
        let mut acked_ids = vec![false; messages];
        let (mut sent, mut acked) = (0usize, 0usize);
        let start = Instant::now();
        while acked < messages {
            while sent < messages && sent - acked < window {
                self.push_pub(subject, None);
                sent += 1;
            }
            self.flush_out()?;
            // Take every PubAck this read brought, then top the window up in
            // one write.
            self.fill()?;
            while let Some(event) = self.try_event()? {
                if let Event::Reply {
                    id,
                    status,
                    payload,
                } = event
                {
                    let index = id.wrapping_sub(first) as usize;
                    if index >= sent || acked_ids[index] {
                        return Err(format!("unexpected or repeated PubAck for {id}"));
                    }
                    self.check_ack(status, payload)?;
                    acked_ids[index] = true;
                    acked += 1;
                }
            }
        }
        Ok(messages as f64 / start.elapsed().as_secs_f64())
    }
}

/// `fmt::Write` into a byte vector (subjects and numbers are ASCII).
struct VecWriter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for VecWriter<'_> {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.0.extend_from_slice(text.as_bytes());
        Ok(())
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// `key` (quoted) followed by optional whitespace and a colon.
fn has_key(haystack: &[u8], key: &[u8]) -> bool {
    let mut from = 0;
    while let Some(position) = haystack[from..]
        .windows(key.len())
        .position(|window| window == key)
    {
        let after = from + position + key.len();
        if haystack[after..]
            .iter()
            .find(|byte| !byte.is_ascii_whitespace())
            == Some(&b':')
        {
            return true;
        }
        from = after;
    }
    false
}

/// The error of a JetStream API response, if it has one.
fn api_error(reply: &str) -> Option<String> {
    match json::parse(reply) {
        Some(value) => {
            let error = value.get("error")?;
            let description = error
                .get("description")
                .and_then(json::Value::as_str)
                .unwrap_or("");
            let code = error.get("err_code").and_then(json::Value::as_f64);
            Some(match code {
                Some(code) => format!("{description} (err_code {code})"),
                None => format!("{description} ({reply})"),
            })
        }
        None => Some(format!("response is not JSON: {reply:?}")),
    }
}

fn new_histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

// ----- monitoring -------------------------------------------------------------------

fn http_get(port: u16, path: &str) -> Result<String, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .map_err(|error| format!("monitor 127.0.0.1:{port}: {error}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|error| error.to_string())?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .map_err(|error| format!("GET {path}: {error}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|error| format!("GET {path}: {error}"))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: no HTTP response"))?;
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        return Err(format!(
            "GET {path}: {}",
            head.lines().next().unwrap_or_default()
        ));
    }
    Ok(body.to_string())
}

/// The shard of the connection from `client_port`, from `/connz`.
fn connection_shard(http_port: u16, client_port: u16) -> Result<usize, String> {
    let body = http_get(http_port, "/connz?limit=1024")?;
    let value = json::parse(&body).ok_or("/connz is not JSON")?;
    let connections = value
        .get("connections")
        .and_then(json::Value::as_array)
        .ok_or("/connz has no connections array")?;
    let connection = connections
        .iter()
        .find(|connection| {
            connection.get("port").and_then(json::Value::as_f64) == Some(client_port as f64)
        })
        .or(match connections {
            [only] => Some(only),
            _ => None,
        })
        .ok_or_else(|| format!("/connz does not list the connection from port {client_port}"))?;
    connection
        .get("shard")
        .and_then(json::Value::as_f64)
        .map(|shard| shard as usize)
        .ok_or_else(|| "/connz gives no \"shard\" for the connection".into())
}

/// Stream name -> owning shard, from `/jsz?streams=true` (any object in the
/// document with a string `name` and a numeric `shard`).
fn stream_shards(http_port: u16) -> Result<Vec<(String, usize)>, String> {
    let body = http_get(http_port, "/jsz?streams=true")?;
    let value = json::parse(&body).ok_or("/jsz is not JSON")?;
    let mut found = Vec::new();
    value.walk(&mut |object| {
        if let (Some(name), Some(shard)) = (
            object.get("name").and_then(json::Value::as_str),
            object.get("shard").and_then(json::Value::as_f64),
        ) {
            found.push((name.to_string(), shard as usize));
        }
    });
    Ok(found)
}

// ----- measurements -----------------------------------------------------------------

#[derive(Default)]
struct Measured {
    latency: Option<Histogram<u64>>,
    throughput: Option<f64>,
    peak_rss_bytes: Option<u64>,
    error: Option<String>,
}

fn measure(target: Target, settings: &Settings) -> Measured {
    let mut measured = Measured::default();
    let started = match target {
        Target::Tern => start_tern(settings, target.flag(), &settings.server_cpu.to_string()),
        Target::NatsSync => start_nats(settings, target.flag(), true),
        Target::Nats => start_nats(settings, target.flag(), false),
    };
    let mut server = match started {
        Ok(server) => server,
        Err(error) => {
            measured.error = Some(error);
            return measured;
        }
    };
    eprintln!(
        "{}: pid {}, port {}",
        target.flag(),
        server.child.id(),
        server.port
    );
    if let Err(error) = run(&mut server, settings, &mut measured) {
        measured.error = Some(server.failure(&error));
    }
    // Only meaningful once the server has carried the load.
    if measured.throughput.is_some() {
        measured.peak_rss_bytes = server.peak_rss_bytes();
    }
    measured
}

fn run(server: &mut Server, settings: &Settings, measured: &mut Measured) -> Result<(), String> {
    let mut client = Client::connect(server.port, settings.payload, settings.timeout)?;
    client.create_stream("BENCH", "bench.>")?;
    eprintln!(
        "  latency: {} warm-up + {} samples, one in flight",
        settings.warmup, settings.samples
    );
    let mut histograms = client.latency(&["bench.x"], settings.warmup, settings.samples)?;
    measured.latency = histograms.pop();
    eprintln!(
        "  throughput: {} messages, {} in flight",
        settings.messages, settings.window
    );
    measured.throughput = Some(client.throughput("bench.x", settings.messages, settings.window)?);
    Ok(())
}

struct CrossShard {
    /// (label, shard, histogram) per measured stream.
    streams: Vec<(String, Option<usize>, Histogram<u64>)>,
    client_shard: Option<usize>,
    notes: Vec<String>,
    peak_rss_bytes: Option<u64>,
    error: Option<String>,
}

const CROSS_SHARD_CANDIDATES: usize = 24;

fn cross_shard(settings: &Settings) -> CrossShard {
    let mut result = CrossShard {
        streams: Vec::new(),
        client_shard: None,
        notes: Vec::new(),
        peak_rss_bytes: None,
        error: None,
    };
    let mut server = match start_tern(settings, "tern-shards", &settings.tern_cores) {
        Ok(server) => server,
        Err(error) => {
            result.error = Some(error);
            return result;
        }
    };
    eprintln!(
        "tern --cores {}: pid {}, port {}",
        settings.tern_cores,
        server.child.id(),
        server.port
    );
    if let Err(error) = run_cross_shard(&server, settings, &mut result) {
        result.error = Some(server.failure(&error));
    }
    if !result.streams.is_empty() {
        result.peak_rss_bytes = server.peak_rss_bytes();
    }
    result
}

fn run_cross_shard(
    server: &Server,
    settings: &Settings,
    result: &mut CrossShard,
) -> Result<(), String> {
    let mut client = Client::connect(server.port, settings.payload, settings.timeout)?;
    let http_port = server.http_port;
    // The kernel spreads connections over the shards (SO_REUSEPORT):
    // reconnect until this one lands on the wanted shard (by default the
    // one sharing the client's CPU, so that the other shard has a CPU of
    // its own and the hop is what the delta measures).
    if let Some(port) = http_port {
        for _ in 0..64 {
            if connection_shard(port, client.local_port).ok() == Some(settings.client_shard) {
                break;
            }
            client = Client::connect(server.port, settings.payload, settings.timeout)?;
        }
    }
    match http_port.map(|port| connection_shard(port, client.local_port)) {
        Some(Ok(shard)) => result.client_shard = Some(shard),
        Some(Err(error)) => result.notes.push(format!("client shard unknown: {error}")),
        None => result
            .notes
            .push("client shard unknown: no monitoring port".into()),
    }
    // Create streams until one is on the client's shard and one elsewhere.
    let mut same: Option<(String, usize)> = None;
    let mut other: Option<(String, usize)> = None;
    let mut unplaced: Vec<String> = Vec::new();
    let mut spare: Vec<String> = Vec::new();
    let mut shards_known = true;
    for candidate in 0..CROSS_SHARD_CANDIDATES {
        let name = format!("XS{candidate}");
        client.create_stream(&name, &format!("xs.{name}.>"))?;
        let shard = if shards_known {
            match owner(http_port, &name) {
                Ok(shard) => shard,
                Err(error) => {
                    result.notes.push(format!("stream shards unknown: {error}"));
                    shards_known = false;
                    None
                }
            }
        } else {
            None
        };
        match (shard, result.client_shard) {
            (Some(shard), Some(client_shard)) if shard == client_shard && same.is_none() => {
                same = Some((name, shard))
            }
            (Some(shard), Some(client_shard)) if shard != client_shard && other.is_none() => {
                other = Some((name, shard))
            }
            (Some(shard), None) if same.is_none() => same = Some((name, shard)),
            (Some(shard), None)
                if other.is_none() && same.as_ref().is_some_and(|s| s.1 != shard) =>
            {
                other = Some((name, shard))
            }
            (None, _) => unplaced.push(name),
            _ => spare.push(name),
        }
        let placed = same.is_some() && other.is_some();
        if placed || (!shards_known && unplaced.len() + usize::from(same.is_some()) >= 2) {
            break;
        }
    }
    for name in &spare {
        client.delete_stream(name);
    }
    let mut chosen: Vec<(String, Option<usize>, String)> = Vec::new();
    let label = |kind: &str, shard: usize| format!("{kind} (stream on shard {shard})");
    if let Some((name, shard)) = same {
        let kind = if result.client_shard.is_some() {
            "same shard"
        } else {
            "stream A"
        };
        chosen.push((name, Some(shard), label(kind, shard)));
    }
    if let Some((name, shard)) = other {
        let kind = if result.client_shard.is_some() {
            "other shard"
        } else {
            "stream B"
        };
        chosen.push((name, Some(shard), label(kind, shard)));
    }
    for name in unplaced {
        if chosen.len() == 2 {
            client.delete_stream(&name);
            continue;
        }
        let label = format!("stream {name} (shard unknown)");
        chosen.push((name, None, label));
    }
    if chosen.len() < 2 {
        result.notes.push(format!(
            "found no two streams on different shards among {CROSS_SHARD_CANDIDATES} names"
        ));
    }
    let subjects: Vec<String> = chosen
        .iter()
        .map(|(name, _, _)| format!("xs.{name}.x"))
        .collect();
    let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
    eprintln!(
        "  cross-shard latency: streams {:?}, client on shard {:?}, alternating, {} warm-up + {} samples each",
        chosen.iter().map(|(name, _, _)| name.as_str()).collect::<Vec<_>>(),
        result.client_shard,
        settings.warmup,
        settings.samples
    );
    let histograms = client.latency(&subjects, settings.warmup, settings.samples)?;
    result.streams = chosen
        .into_iter()
        .zip(histograms)
        .map(|((_, shard, label), histogram)| (label, shard, histogram))
        .collect();
    Ok(())
}

/// The shard owning stream `name` per `/jsz`; `Err` when the monitor cannot tell.
fn owner(http_port: Option<u16>, name: &str) -> Result<Option<usize>, String> {
    let port = http_port.ok_or("no monitoring port")?;
    for _ in 0..10 {
        let shards = stream_shards(port)?;
        if let Some((_, shard)) = shards.iter().find(|(stream, _)| stream == name) {
            return Ok(Some(*shard));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "/jsz?streams=true lists no shard for stream {name}"
    ))
}

// ----- report ---------------------------------------------------------------------

fn micros(histogram: &Histogram<u64>, quantile: f64) -> f64 {
    histogram.value_at_quantile(quantile) as f64 / 1000.0
}

fn grouped(value: f64) -> String {
    let digits = format!("{:.0}", value);
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(' ');
        }
        out.push(digit);
    }
    out
}

fn shell_quote(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_./=,:@%+".contains(&byte))
    {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

fn version(program: &str) -> String {
    Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()
        .map(|output| {
            let text = String::from_utf8_lossy(&output.stdout).into_owned()
                + &String::from_utf8_lossy(&output.stderr);
            text.lines().next().unwrap_or("").trim().to_string()
        })
        .filter(|text| !text.is_empty())
        .unwrap_or_else(|| "version unknown".into())
}

fn filesystem(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return "unknown".into();
    };
    // SAFETY: statfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c_path.as_ptr(), &mut stat) } != 0 {
        return "unknown".into();
    }
    #[allow(clippy::unnecessary_cast)]
    match stat.f_type as i64 {
        0xEF53 => "ext4".into(),
        0x0102_1994 => "tmpfs (fsync is free: numbers meaningless for durability)".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        other => format!("f_type {other:#x}"),
    }
}

fn main() {
    let settings = match settings() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("js-bench: {error}");
            std::process::exit(2);
        }
    };
    pin_current_thread(settings.client_cpu);

    let mut columns: Vec<(Target, Measured)> = Vec::new();
    for &target in &settings.targets {
        let measured = measure(target, &settings);
        if let Some(error) = &measured.error {
            eprintln!("{}: ERROR: {error}", target.flag());
        }
        columns.push((target, measured));
    }
    let cross = (settings.cross_shard
        && settings.targets.contains(&Target::Tern)
        && parse_cpu_list(&settings.tern_cores).is_ok_and(|cpus| cpus.len() >= 2))
    .then(|| cross_shard(&settings));
    if let Some(CrossShard {
        error: Some(error), ..
    }) = &cross
    {
        eprintln!("tern cross-shard: ERROR: {error}");
    }

    // ----- the table
    let command: Vec<String> = std::env::args().map(|arg| shell_quote(&arg)).collect();
    println!("Command: `{}`", command.join(" "));
    println!();
    let mut servers = Vec::new();
    if settings.targets.contains(&Target::Tern) {
        servers.push(format!(
            "tern {} ({})",
            settings.tern,
            version(&settings.tern)
        ));
    }
    if settings
        .targets
        .iter()
        .any(|target| *target != Target::Tern)
    {
        servers.push(format!(
            "nats {} ({})",
            settings.nats,
            version(&settings.nats)
        ));
    }
    println!(
        "Servers: {}. Server on CPU {}, client on CPU {}. Payload {} B; stream R1, file storage; \
         store under {} ({}).",
        servers.join("; "),
        settings.server_cpu,
        settings.client_cpu,
        settings.payload,
        settings.dir.display(),
        filesystem(&settings.dir),
    );
    println!();
    let column = |target: Target| columns.iter().find(|(t, _)| *t == target).map(|(_, m)| m);
    let order = [Target::Tern, Target::NatsSync, Target::Nats];
    println!(
        "| metric | {} | {} | {} | tern / nats sync always |",
        order[0].column(),
        order[1].column(),
        order[2].column()
    );
    println!("|---|---|---|---|---|");
    let cell = |target: Target, value: &dyn Fn(&Measured) -> Option<String>| match column(target) {
        None => "–".to_string(),
        Some(measured) => value(measured).unwrap_or_else(|| {
            if measured.error.is_some() {
                "error".into()
            } else {
                "–".into()
            }
        }),
    };
    let ratio = |value: &dyn Fn(&Measured) -> Option<f64>| match (
        column(Target::Tern).and_then(value),
        column(Target::NatsSync).and_then(value),
    ) {
        (Some(tern), Some(nats)) if nats > 0.0 => format!("{:.2}", tern / nats),
        _ => "–".into(),
    };
    let quantiles = [
        ("p50", 0.5),
        ("p90", 0.9),
        ("p99", 0.99),
        ("p99.9", 0.999),
        ("max", 1.0),
    ];
    for (name, quantile) in quantiles {
        let value = move |measured: &Measured| -> Option<f64> {
            measured
                .latency
                .as_ref()
                .map(|histogram| micros(histogram, quantile))
        };
        let cells: Vec<String> = order
            .iter()
            .map(|&target| cell(target, &|m| value(m).map(|v| format!("{v:.1}"))))
            .collect();
        println!(
            "| publish→PubAck {name} µs (1 in flight) | {} | {} | {} | {} |",
            cells[0],
            cells[1],
            cells[2],
            ratio(&value)
        );
    }
    let throughput = |measured: &Measured| measured.throughput;
    let cells: Vec<String> = order
        .iter()
        .map(|&target| cell(target, &|m| throughput(m).map(grouped)))
        .collect();
    println!(
        "| PubAcks/s ({} in flight, {} msgs) | {} | {} | {} | {} |",
        settings.window,
        settings.messages,
        cells[0],
        cells[1],
        cells[2],
        ratio(&throughput)
    );
    let rss = |measured: &Measured| {
        measured
            .peak_rss_bytes
            .map(|bytes| bytes as f64 / (1024.0 * 1024.0))
    };
    let cells: Vec<String> = order
        .iter()
        .map(|&target| cell(target, &|m| rss(m).map(|v| format!("{v:.1}"))))
        .collect();
    println!(
        "| peak RSS MiB | {} | {} | {} | {} |",
        cells[0],
        cells[1],
        cells[2],
        ratio(&rss)
    );

    // ----- cross-shard (tern only)
    if let Some(cross) = &cross {
        println!();
        println!(
            "Cross-shard (tern `--cores {}`, one shard per CPU; the client runs on CPU {} too, \
             sharing it with the shard there; one publish in flight, alternating between the \
             two streams; client connection on shard {}):",
            settings.tern_cores,
            settings.client_cpu,
            cross
                .client_shard
                .map_or("unknown".to_string(), |shard| shard.to_string())
        );
        println!();
        println!("| stream | p50 µs | p99 µs |");
        println!("|---|---|---|");
        for (label, _, histogram) in &cross.streams {
            println!(
                "| {label} | {:.1} | {:.1} |",
                micros(histogram, 0.5),
                micros(histogram, 0.99)
            );
        }
        if let [(_, Some(a), first), (_, Some(b), second)] = &cross.streams[..] {
            if a != b {
                let what = if cross.client_shard.is_some() {
                    "other − same"
                } else {
                    "B − A"
                };
                println!(
                    "| delta ({what}) | {:+.1} | {:+.1} |",
                    micros(second, 0.5) - micros(first, 0.5),
                    micros(second, 0.99) - micros(first, 0.99)
                );
            }
        } else if cross.streams.len() == 2 {
            println!("| delta | unknown (shards unknown) | |");
        }
        if cross.streams.is_empty() {
            println!("| error | – | – |");
        }
        if let Some(bytes) = cross.peak_rss_bytes {
            println!();
            println!(
                "Peak RSS of the {}-shard tern: {:.1} MiB.",
                parse_cpu_list(&settings.tern_cores).map_or(0, |cpus| cpus.len()),
                bytes as f64 / (1024.0 * 1024.0)
            );
        }
        for note in &cross.notes {
            println!("- note: {note}");
        }
    }

    // ----- errors
    let mut errors: Vec<String> = columns
        .iter()
        .filter_map(|(target, measured)| {
            measured
                .error
                .as_ref()
                .map(|error| format!("{}: {error}", target.flag()))
        })
        .collect();
    if let Some(CrossShard {
        error: Some(error), ..
    }) = &cross
    {
        errors.push(format!("tern cross-shard: {error}"));
    }
    if !errors.is_empty() {
        println!();
        println!("Errors:");
        for error in &errors {
            println!();
            println!("- {error}");
        }
        std::process::exit(1);
    }
}

// ----- a small JSON reader (monitoring and API responses only) ---------------------

mod json {
    pub enum Value {
        /// `true`, `false` or `null` (the bench never needs which).
        Literal,
        Number(f64),
        String(String),
        Array(Vec<Value>),
        Object(Vec<(String, Value)>),
    }

    impl Value {
        pub fn get(&self, key: &str) -> Option<&Value> {
            match self {
                Value::Object(fields) => fields
                    .iter()
                    .find(|(name, _)| name == key)
                    .map(|(_, value)| value),
                _ => None,
            }
        }

        pub fn as_str(&self) -> Option<&str> {
            match self {
                Value::String(text) => Some(text),
                _ => None,
            }
        }

        pub fn as_f64(&self) -> Option<f64> {
            match self {
                Value::Number(number) => Some(*number),
                _ => None,
            }
        }

        pub fn as_array(&self) -> Option<&[Value]> {
            match self {
                Value::Array(items) => Some(items),
                _ => None,
            }
        }

        /// Calls `visit` on every object in the document, depth first.
        pub fn walk(&self, visit: &mut dyn FnMut(&Value)) {
            match self {
                Value::Object(fields) => {
                    visit(self);
                    for (_, value) in fields {
                        value.walk(visit);
                    }
                }
                Value::Array(items) => {
                    for item in items {
                        item.walk(visit);
                    }
                }
                Value::Literal | Value::Number(_) | Value::String(_) => {}
            }
        }
    }

    pub fn parse(text: &str) -> Option<Value> {
        let mut parser = Parser {
            bytes: text.as_bytes(),
            at: 0,
            depth: 0,
        };
        let value = parser.value()?;
        parser.space();
        (parser.at == parser.bytes.len()).then_some(value)
    }

    struct Parser<'a> {
        bytes: &'a [u8],
        at: usize,
        depth: usize,
    }

    impl Parser<'_> {
        fn space(&mut self) {
            while self
                .bytes
                .get(self.at)
                .is_some_and(|byte| byte.is_ascii_whitespace())
            {
                self.at += 1;
            }
        }

        fn eat(&mut self, byte: u8) -> bool {
            self.space();
            if self.bytes.get(self.at) == Some(&byte) {
                self.at += 1;
                true
            } else {
                false
            }
        }

        fn literal(&mut self, word: &str, value: Value) -> Option<Value> {
            self.bytes[self.at..].starts_with(word.as_bytes()).then(|| {
                self.at += word.len();
                value
            })
        }

        fn value(&mut self) -> Option<Value> {
            self.space();
            self.depth += 1;
            if self.depth > 128 {
                return None;
            }
            let value = match *self.bytes.get(self.at)? {
                b'{' => {
                    self.at += 1;
                    let mut fields = Vec::new();
                    if !self.eat(b'}') {
                        loop {
                            self.space();
                            let key = self.string()?;
                            if !self.eat(b':') {
                                return None;
                            }
                            fields.push((key, self.value()?));
                            if self.eat(b'}') {
                                break;
                            }
                            if !self.eat(b',') {
                                return None;
                            }
                        }
                    }
                    Value::Object(fields)
                }
                b'[' => {
                    self.at += 1;
                    let mut items = Vec::new();
                    if !self.eat(b']') {
                        loop {
                            items.push(self.value()?);
                            if self.eat(b']') {
                                break;
                            }
                            if !self.eat(b',') {
                                return None;
                            }
                        }
                    }
                    Value::Array(items)
                }
                b'"' => Value::String(self.string()?),
                b't' => self.literal("true", Value::Literal)?,
                b'f' => self.literal("false", Value::Literal)?,
                b'n' => self.literal("null", Value::Literal)?,
                _ => {
                    let start = self.at;
                    while self
                        .bytes
                        .get(self.at)
                        .is_some_and(|byte| b"+-.0123456789eE".contains(byte))
                    {
                        self.at += 1;
                    }
                    let text = std::str::from_utf8(&self.bytes[start..self.at]).ok()?;
                    Value::Number(text.parse().ok()?)
                }
            };
            self.depth -= 1;
            Some(value)
        }

        fn string(&mut self) -> Option<String> {
            if self.bytes.get(self.at) != Some(&b'"') {
                return None;
            }
            self.at += 1;
            let mut out = Vec::new();
            loop {
                let byte = *self.bytes.get(self.at)?;
                self.at += 1;
                match byte {
                    b'"' => return String::from_utf8(out).ok(),
                    b'\\' => {
                        let escape = *self.bytes.get(self.at)?;
                        self.at += 1;
                        let decoded = match escape {
                            b'n' => '\n',
                            b't' => '\t',
                            b'r' => '\r',
                            b'b' => '\u{8}',
                            b'f' => '\u{c}',
                            b'u' => {
                                let hex =
                                    std::str::from_utf8(self.bytes.get(self.at..self.at + 4)?)
                                        .ok()?;
                                self.at += 4;
                                char::from_u32(u32::from_str_radix(hex, 16).ok()?)
                                    .unwrap_or('\u{fffd}')
                            }
                            other => other as char,
                        };
                        let mut utf8 = [0u8; 4];
                        out.extend_from_slice(decoded.encode_utf8(&mut utf8).as_bytes());
                    }
                    _ => out.push(byte),
                }
            }
        }
    }
}
