//! The client node's door in a cluster target ([`super::target`]): a TCP
//! proxy between a test's clients (async-nats, nats-py, raw) and one node
//! that passes the NATS protocol through, frame by frame, so that a
//! client-level test written for one server runs on a cluster as a user
//! would meet it: every stream replicated, the client on a node that leads
//! nothing. It changes no byte a test sees except as follows:
//!
//! 1. **Replicated streams.** The body of a `$JS.API.STREAM.CREATE.<name>`
//!    or `STREAM.UPDATE.<name>` request whose `num_replicas` is absent, 0
//!    or 1 asks for [`CLUSTER_NODES`] replicas instead (a textual edit:
//!    the rest of the body is kept byte for byte, a body that is not a
//!    JSON object passes unchanged). async-nats always sends
//!    `num_replicas` (0 for a stream, 1 for a KV bucket), nats-py only
//!    when set. A test's expectation of the replica count follows
//!    [`super::target::default_replicas`].
//! 2. **No leader on the client's node.** The answer to a stream create
//!    (or a consumer create) whose `cluster.leader` is the client's node
//!    is held back: the stream (consumer) is asked to step down and the
//!    answer goes on once every node's `/jsz` names the same new leader,
//!    another node, with every replica current, and a publish through the
//!    client's node reaches it (bounded; if that does not happen the
//!    answer goes on anyway and stderr says so). Holding the answer keeps
//!    the test's order: the client's next request comes after the move.
//!    A consumer of a tern stream is led by its stream's leader, so
//!    moving the stream moves it. nats-server gives each replicated
//!    consumer a Raft group of its own, stepped down on its own; an R1
//!    consumer (nats-server's ephemerals) cannot move and may stay on the
//!    client's node.
//!
//! And it waits where a cluster is known to answer before it is ready
//! ([`Settle`]; docs/cluster-jetstream.md, "Client-level tests on a
//! cluster"):
//!
//! - both servers: the answer to a stream create is held until every node
//!   names the leader and a publish through each shard of the client's
//!   node reaches it (both servers can answer a create before the
//!   client's node knows the leader's subscription);
//! - nats-server, whose consumers read their own server's copy of the
//!   stream and whose replicas all answer direct gets
//!   ([`Settle::copies`]): a consumer create, a pull request, a consumer
//!   info and a direct get are held until every node's copy of the stream
//!   holds the same messages, and so is the answer to a message delete or
//!   a purge.
//!
//! Leadership that moves back to the client's node later (an election
//! under load) is not undone. The stepdowns are JetStream API requests: a
//! cluster's `$JS.API.INFO` API counters count them (no cluster variant
//! asserts those).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use super::cluster::Cluster;
use super::target::CLUSTER_NODES;
use super::{Flavor, TIMEOUT};

/// How long an answer is held while its stream's leader moves: below
/// async-nats' default JetStream request timeout (5 s) with the create's
/// own time on top.
const MOVE_TIMEOUT: Duration = Duration::from_secs(3);
/// A leader still on the client's node this long after a stepdown is
/// asked again (it may have been elected again).
const STEPDOWN_RETRY: Duration = Duration::from_millis(1000);
/// Poll interval of the bounded waits below.
const POLL: Duration = Duration::from_millis(20);
/// How long one probe request waits for its answer (a lost one is sent
/// again).
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);

/// What a watched answer is the answer to.
#[derive(Debug, Clone)]
enum Pending {
    StreamCreate {
        stream: String,
    },
    ConsumerCreate {
        stream: String,
    },
    /// A message delete or a purge.
    StreamWrite {
        stream: String,
    },
}

/// Where the proxy waits for the cluster to settle besides moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settle {
    /// After a stream create's answer, until a publish through each shard
    /// of the client's node reaches the leader: both servers can answer a
    /// create before the client's node knows the leader's subscription
    /// (nats-server seldom: once in about 160 creates).
    pub creates: bool,
    /// Before a consumer create, a pull request, a consumer info or a
    /// direct get, and after a message delete's or a purge's answer, until
    /// every node's copy of the stream holds the same messages
    /// (nats-server: a consumer reads its own server's copy, which may lag
    /// its stream's leader, and any replica answers a direct get).
    pub copies: bool,
}

/// Shared by every connection of one proxy.
struct Shared {
    flavor: Flavor,
    upstream_port: u16,
    /// The client node's server name (`n1`).
    client_node: String,
    /// Every node's monitoring port (for `/jsz`).
    http_ports: Vec<u16>,
    /// A connection on each shard of the client's node (one on
    /// nats-server): the probes of the path publishes take.
    client_shards: Vec<async_nats::Client>,
    /// A connection to another node, which the stepdowns are asked
    /// through.
    side_client: async_nats::Client,
    settle: Settle,
}

/// A connection to `node` on each of its shards (tern spreads
/// connections over shards itself: connections are made until `/connz`
/// has shown one on each), or one (nats-server).
async fn connect_every_shard(cluster: &Cluster, node: usize) -> Vec<async_nats::Client> {
    if cluster.flavor == Flavor::Nats {
        return vec![cluster.connect(node).await];
    }
    let shards = cluster.options().shards.unwrap_or(2);
    let mut by_shard: Vec<Option<async_nats::Client>> = vec![None; shards];
    for _ in 0..64 {
        let client = cluster.connect(node).await;
        let cid = client.server_info().client_id;
        if let Some(shard) = cluster.node(node).shard_of(cid) {
            if by_shard[shard].is_none() {
                by_shard[shard] = Some(client);
            }
        }
        if by_shard.iter().all(Option::is_some) {
            return by_shard.into_iter().flatten().collect();
        }
    }
    panic!("n{node}: 64 connections and not one on each of its {shards} shards");
}

/// A proxy on `127.0.0.1:<port>` to one node of a cluster.
pub struct ClientProxy {
    port: u16,
    shared: Arc<Shared>,
    accept: tokio::task::JoinHandle<()>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl ClientProxy {
    /// Listens on a free port and forwards every connection to `node`.
    pub async fn start(cluster: &Cluster, node: usize, settle: Settle) -> ClientProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind the client proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let side_node = node % cluster.len() + 1;
        let shared = Arc::new(Shared {
            flavor: cluster.flavor,
            upstream_port: cluster.node(node).client_port(),
            client_node: format!("n{node}"),
            http_ports: (1..=cluster.len())
                .map(|number| cluster.node(number).http_port())
                .collect(),
            client_shards: connect_every_shard(cluster, node).await,
            side_client: cluster.connect(side_node).await,
            settle,
        });
        let connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let accept = {
            let shared = shared.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let task = tokio::spawn(serve(shared.clone(), client));
                    connections.lock().unwrap().push(task.abort_handle());
                }
            })
        };
        ClientProxy {
            port,
            shared,
            accept,
            connections,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for ClientProxy {
    fn drop(&mut self) {
        self.accept.abort();
        for task in self.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// One client connection: the two directions side by side.
async fn serve(shared: Arc<Shared>, client: TcpStream) {
    let upstream = match TcpStream::connect(("127.0.0.1", shared.upstream_port)).await {
        Ok(upstream) => upstream,
        Err(error) => {
            eprintln!(
                "client proxy: cannot reach {} at port {}: {error}",
                shared.client_node, shared.upstream_port
            );
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let pending: Arc<Mutex<HashMap<String, Pending>>> = Arc::default();
    tokio::join!(
        to_server(&shared, client_read, upstream_write, &pending),
        to_client(&shared, upstream_read, client_write, &pending),
    );
}

/// One protocol frame at the start of a buffer: a control line and, for
/// PUB, HPUB, MSG and HMSG, its payload.
struct Frame {
    /// Bytes of the whole frame (line, line end, payload, payload end).
    len: usize,
    /// The control line without its line end.
    line_end: usize,
    /// Where the payload starts, and its header and total sizes.
    payload: Option<(usize, usize, usize)>,
}

impl Frame {
    /// The first complete frame of `buffer`, or None if more bytes are
    /// needed. A line that does not parse is a frame of its own (the
    /// server says what is wrong with it).
    fn first(buffer: &[u8]) -> Option<Frame> {
        let newline = buffer.iter().position(|&byte| byte == b'\n')?;
        let line_end = if newline > 0 && buffer[newline - 1] == b'\r' {
            newline - 1
        } else {
            newline
        };
        let after_line = newline + 1;
        match payload_sizes(&buffer[..line_end]) {
            None => Some(Frame {
                len: after_line,
                line_end,
                payload: None,
            }),
            Some((header_len, total_len)) => {
                let len = after_line + total_len + 2;
                (buffer.len() >= len).then_some(Frame {
                    len,
                    line_end,
                    payload: Some((after_line, header_len, total_len)),
                })
            }
        }
    }
}

/// The operation and arguments of a control line.
fn tokens(line: &[u8]) -> Option<(String, Vec<&str>)> {
    let text = std::str::from_utf8(line).ok()?;
    let mut tokens = text.split_ascii_whitespace();
    let op = tokens.next()?.to_ascii_uppercase();
    Some((op, tokens.collect()))
}

/// Header and total payload sizes of a PUB, HPUB, MSG or HMSG line.
fn payload_sizes(line: &[u8]) -> Option<(usize, usize)> {
    let (op, args) = tokens(line)?;
    let (with_headers, counts) = match op.as_str() {
        "PUB" => (false, 2..=3),
        "HPUB" => (true, 3..=4),
        "MSG" => (false, 3..=4),
        "HMSG" => (true, 4..=5),
        _ => return None,
    };
    if !counts.contains(&args.len()) {
        return None;
    }
    let total: usize = args.last()?.parse().ok()?;
    let header: usize = if with_headers {
        args[args.len() - 2].parse().ok()?
    } else {
        0
    };
    (header <= total).then_some((header, total))
}

/// Subject and reply of a PUB or HPUB line.
fn publish_subjects(line: &[u8]) -> Option<(String, Option<String>)> {
    let (op, args) = tokens(line)?;
    let with_reply = match op.as_str() {
        "PUB" => args.len() == 3,
        "HPUB" => args.len() == 4,
        _ => return None,
    };
    let reply = with_reply.then(|| args[1].to_string());
    Some((args[0].to_string(), reply))
}

/// Subject of a MSG or HMSG line.
fn message_subject(line: &[u8]) -> Option<String> {
    let (op, args) = tokens(line)?;
    matches!(op.as_str(), "MSG" | "HMSG").then(|| args[0].to_string())
}

/// `body` asking for [`CLUSTER_NODES`] replicas, if it is a JSON object
/// asking for fewer than 2 (absent, 0 or 1); None leaves it as it is.
fn replicated(body: &[u8]) -> Option<Vec<u8>> {
    let value: Value = serde_json::from_slice(body).ok()?;
    let object = value.as_object()?;
    match object.get("num_replicas") {
        None => {
            let open = body.iter().position(|&byte| byte == b'{')?;
            let separator = if object.is_empty() { "" } else { "," };
            let mut edited = body[..=open].to_vec();
            edited.extend_from_slice(
                format!("\"num_replicas\":{CLUSTER_NODES}{separator}").as_bytes(),
            );
            edited.extend_from_slice(&body[open + 1..]);
            Some(edited)
        }
        Some(replicas) if replicas.as_u64().is_some_and(|count| count <= 1) => {
            replace_replicas_value(body)
        }
        Some(_) => None,
    }
}

/// Every `"num_replicas": <0 or 1>` of `body` with [`CLUSTER_NODES`].
fn replace_replicas_value(body: &[u8]) -> Option<Vec<u8>> {
    const KEY: &[u8] = b"\"num_replicas\"";
    let mut edited = Vec::with_capacity(body.len() + 1);
    let mut at = 0;
    let mut replaced = false;
    while let Some(found) = body[at..]
        .windows(KEY.len())
        .position(|window| window == KEY)
    {
        let key_end = at + found + KEY.len();
        let mut value = key_end;
        while value < body.len() && (body[value].is_ascii_whitespace() || body[value] == b':') {
            value += 1;
        }
        let digit = body.get(value).copied();
        let single = matches!(digit, Some(b'0' | b'1'))
            && !body.get(value + 1).is_some_and(u8::is_ascii_alphanumeric);
        edited.extend_from_slice(&body[at..value]);
        if single {
            edited.extend_from_slice(CLUSTER_NODES.to_string().as_bytes());
            at = value + 1;
            replaced = true;
        } else {
            at = value;
        }
    }
    edited.extend_from_slice(&body[at..]);
    replaced.then_some(edited)
}

/// The frame `buffer[..frame.len]` with its payload's body (after the
/// headers) replaced by `body`.
fn with_body(buffer: &[u8], frame: &Frame, body: &[u8]) -> Vec<u8> {
    let (start, header_len, _) = frame.payload.expect("a frame with a payload");
    let (op, args) = tokens(&buffer[..frame.line_end]).expect("a parsed line");
    let total = header_len + body.len();
    let mut line_args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    let last = line_args.len() - 1;
    line_args[last] = total.to_string();
    let mut out = format!("{op} {}\r\n", line_args.join(" ")).into_bytes();
    out.extend_from_slice(&buffer[start..start + header_len]);
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
    out
}

/// Client to node: every frame as it is, but the stream creates and
/// updates (made replicated), the requests whose answers are watched, and
/// the requests held as [`Settle`] says.
async fn to_server(
    shared: &Shared,
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    pending: &Mutex<HashMap<String, Pending>>,
) {
    let mut buffer = Vec::with_capacity(64 * 1024);
    let mut out = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    'read: loop {
        let read = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        buffer.extend_from_slice(&chunk[..read]);
        let mut at = 0;
        while let Some(frame) = Frame::first(&buffer[at..]) {
            let bytes = &buffer[at..at + frame.len];
            let (forwarded, reads) = rewrite_request(bytes, &frame, pending);
            if let Some(stream) = reads.filter(|_| shared.settle.copies) {
                // What went before goes first; the request waits.
                if to.write_all(&out).await.is_err() {
                    break 'read;
                }
                out.clear();
                wait_copies_agree(shared, &stream, "a read of a copy").await;
            }
            out.extend_from_slice(&forwarded);
            at += frame.len;
        }
        buffer.drain(..at);
        if to.write_all(&out).await.is_err() {
            break;
        }
        out.clear();
    }
    let _ = to.shutdown().await;
}

/// One client frame as it goes to the node, and the stream it reads a
/// copy of, for [`Settle::copies`]: a consumer create, a pull request, a
/// consumer info or a direct get.
fn rewrite_request(
    bytes: &[u8],
    frame: &Frame,
    pending: &Mutex<HashMap<String, Pending>>,
) -> (Vec<u8>, Option<String>) {
    let Some((start, header_len, total_len)) = frame.payload else {
        return (bytes.to_vec(), None);
    };
    let Some((subject, reply)) = publish_subjects(&bytes[..frame.line_end]) else {
        return (bytes.to_vec(), None);
    };
    let watch = |watched: Pending| {
        if let Some(reply) = &reply {
            pending.lock().unwrap().insert(reply.clone(), watched);
        }
    };
    let api = subject.strip_prefix("$JS.API.").unwrap_or_default();
    let stream_of = |prefix: &str| api.strip_prefix(prefix).map(str::to_string);
    if let Some(stream) = stream_of("STREAM.CREATE.").or_else(|| stream_of("STREAM.UPDATE.")) {
        if api.starts_with("STREAM.CREATE.") {
            watch(Pending::StreamCreate { stream });
        }
        let body = &bytes[start + header_len..start + total_len];
        let forwarded = match replicated(body) {
            Some(body) => with_body(bytes, frame, &body),
            None => bytes.to_vec(),
        };
        return (forwarded, None);
    }
    if let Some(stream) = stream_of("STREAM.MSG.DELETE.").or_else(|| stream_of("STREAM.PURGE.")) {
        watch(Pending::StreamWrite { stream });
        return (bytes.to_vec(), None);
    }
    let first_token = |rest: String| rest.split('.').next().map(str::to_string);
    let consumer_stream = stream_of("CONSUMER.CREATE.")
        .or_else(|| stream_of("CONSUMER.DURABLE.CREATE."))
        .and_then(first_token);
    if let Some(stream) = consumer_stream {
        watch(Pending::ConsumerCreate {
            stream: stream.clone(),
        });
        return (bytes.to_vec(), Some(stream));
    }
    // What a consumer or a replica answers from its own server's copy.
    let read_stream = stream_of("CONSUMER.MSG.NEXT.")
        .or_else(|| stream_of("CONSUMER.INFO."))
        .or_else(|| stream_of("DIRECT.GET."))
        .and_then(first_token);
    (bytes.to_vec(), read_stream)
}

/// Node to client: every frame as it is, the watched answers after their
/// leader moved off the client's node (or the cluster settled).
async fn to_client(
    shared: &Shared,
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    pending: &Mutex<HashMap<String, Pending>>,
) {
    let mut buffer = Vec::with_capacity(64 * 1024);
    let mut out = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    'read: loop {
        let read = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        buffer.extend_from_slice(&chunk[..read]);
        let mut at = 0;
        while let Some(frame) = Frame::first(&buffer[at..]) {
            let bytes = &buffer[at..at + frame.len];
            at += frame.len;
            let Some((start, header_len, total_len)) = frame.payload else {
                out.extend_from_slice(bytes);
                continue;
            };
            let body = &bytes[start + header_len..start + total_len];
            let watched = message_subject(&bytes[..frame.line_end])
                .and_then(|subject| pending.lock().unwrap().remove(&subject));
            if let Some(watched) = watched {
                // Everything before the answer goes first; the answer waits.
                if to.write_all(&out).await.is_err() {
                    break 'read;
                }
                out.clear();
                on_answer(shared, &watched, body).await;
            }
            out.extend_from_slice(bytes);
        }
        buffer.drain(..at);
        if to.write_all(&out).await.is_err() {
            break;
        }
        out.clear();
    }
    let _ = to.shutdown().await;
}

/// What the proxy does with a watched answer before it goes on: a move
/// off the client's node, or a wait for the cluster to settle.
async fn on_answer(shared: &Shared, watched: &Pending, body: &[u8]) {
    let Ok(answer) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    if answer.get("error").is_some() {
        return;
    }
    let cluster = &answer["cluster"];
    let replicated = cluster["replicas"]
        .as_array()
        .is_some_and(|replicas| !replicas.is_empty());
    let client_leads = cluster["leader"].as_str() == Some(shared.client_node.as_str());
    match watched {
        Pending::StreamCreate { stream } if client_leads && replicated => {
            move_off_client_node(shared, stream, None, &answer).await
        }
        Pending::StreamCreate { stream } if shared.settle.creates => {
            settle_create(shared, stream, &answer).await
        }
        // A tern consumer is led by its stream's leader.
        Pending::ConsumerCreate { stream } if client_leads && replicated => {
            let consumer = answer["name"]
                .as_str()
                .filter(|_| shared.flavor == Flavor::Nats);
            move_off_client_node(shared, stream, consumer, &answer).await
        }
        Pending::StreamWrite { stream } if shared.settle.copies => {
            wait_copies_agree(shared, stream, "a message delete or purge").await
        }
        _ => {}
    }
}

/// Moves the leadership of `stream` (or of its `consumer`) off the
/// client's node; for a stream, until a publish through the client's node
/// reaches the new leader.
async fn move_off_client_node(
    shared: &Shared,
    stream: &str,
    consumer: Option<&str>,
    answer: &Value,
) {
    let what = match consumer {
        None => format!("stream {stream}"),
        Some(name) => format!("consumer {stream} > {name}"),
    };
    let started = Instant::now();
    let leader = match move_leader(shared, stream, consumer).await {
        Ok(leader) => leader,
        Err(last) => {
            eprintln!(
                "client proxy: {what} still led from {} after {MOVE_TIMEOUT:?} (the answer goes on): {last}",
                shared.client_node
            );
            return;
        }
    };
    let moved = started.elapsed();
    let reached = match consumer {
        None => wait_publishes_reach_leader(shared, &answer["config"]).await,
        Some(_) => Ok(0),
    };
    eprintln!(
        "client proxy: {what} moved from {} to {leader} in {moved:?}; a publish through {} reaches it after {reached:?} more probes ({:?} in all)",
        shared.client_node,
        shared.client_node,
        started.elapsed()
    );
}

/// [`Settle::creates`]: holds a create's answer until every node names
/// the stream's leader and a publish through the client's node reaches it
/// (bounded; stderr says so if that does not happen).
async fn settle_create(shared: &Shared, stream: &str, answer: &Value) {
    let started = Instant::now();
    let deadline = started + MOVE_TIMEOUT;
    let mut led = leaders(shared, stream, None);
    while led.is_err() && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
        led = leaders(shared, stream, None);
    }
    let published = wait_publishes_reach_leader(shared, &answer["config"]).await;
    if led.is_err() || !matches!(published, Ok(0)) {
        eprintln!(
            "client proxy: {}: stream {stream} led by {led:?}; through {} a publish reaches it after {published:?} more probes ({:?})",
            shared.flavor.name(),
            shared.client_node,
            started.elapsed()
        );
    }
}

/// A subject of the stream `config` stores (its first pattern with every
/// wildcard token made `_harness_probe`), unless the stream sends no
/// PubAcks.
fn probe_subject(config: &Value) -> Option<String> {
    if config["no_ack"] == true {
        return None;
    }
    let pattern = match config["subjects"].as_array() {
        Some(subjects) => subjects.first()?.as_str()?.to_string(),
        None => config["name"].as_str()?.to_string(),
    };
    Some(
        pattern
            .split('.')
            .map(|token| match token {
                "*" | ">" => "_harness_probe",
                token => token,
            })
            .collect::<Vec<_>>()
            .join("."),
    )
}

/// Publishes to a subject of the stream `config` through each shard of
/// the client's node (see [`probe_subject`]) with a `Nats-Expected-Stream`
/// no stream has, until the answer is the leader's refusal of it (400
/// 10060: nothing stored), not a replica's 10009 or no responders: then a
/// publish through the client's node reaches the leader, whichever shard
/// the client is on. Bounded by [`MOVE_TIMEOUT`]; the probes it took
/// beyond one per shard, or the last answer.
async fn wait_publishes_reach_leader(shared: &Shared, config: &Value) -> Result<u32, String> {
    let Some(subject) = probe_subject(config) else {
        return Ok(0);
    };
    let deadline = Instant::now() + MOVE_TIMEOUT;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Expected-Stream", "_harness_no_such_stream");
    let clients = &shared.client_shards;
    let mut attempts = 0;
    for client in clients {
        loop {
            attempts += 1;
            let request = async_nats::Request::new()
                .headers(headers.clone())
                .timeout(Some(PROBE_TIMEOUT));
            let last = match client.send_request(subject.clone(), request).await {
                Ok(reply) => {
                    let body: Value = serde_json::from_slice(&reply.payload).unwrap_or(Value::Null);
                    if body["error"]["err_code"] == 10060 {
                        break;
                    }
                    body.to_string()
                }
                Err(error) => error.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(format!("{attempts} probes, last: {last}"));
            }
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(attempts - clients.len() as u32)
}

/// Steps the leader of `stream` (or of its `consumer`) down until every
/// node agrees on another leader with every replica current; the new
/// leader, or what was seen last.
async fn move_leader(
    shared: &Shared,
    stream: &str,
    consumer: Option<&str>,
) -> Result<String, String> {
    let stepdown = match consumer {
        None => format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}"),
        Some(name) => format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{name}"),
    };
    let deadline = Instant::now() + MOVE_TIMEOUT;
    let mut asked: Option<Instant> = None;
    loop {
        let seen = leaders(shared, stream, consumer);
        let last = match &seen {
            Ok(leader) if leader != &shared.client_node => return Ok(leader.clone()),
            Ok(leader) => format!("every node names {leader}"),
            Err(problem) => problem.clone(),
        };
        let client_leads = seen
            .as_ref()
            .is_ok_and(|leader| leader == &shared.client_node);
        if client_leads && asked.is_none_or(|at| at.elapsed() >= STEPDOWN_RETRY) {
            let answer = tokio::time::timeout(
                TIMEOUT,
                shared
                    .side_client
                    .request(stepdown.clone(), bytes::Bytes::new()),
            )
            .await;
            if !matches!(&answer, Ok(Ok(_))) {
                eprintln!("client proxy: {stepdown}: {answer:?}");
            }
            asked = Some(Instant::now());
        }
        if Instant::now() >= deadline {
            return Err(last);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The leader every node's `/jsz` names for `stream` (or its `consumer`),
/// if they agree and the leader's own view has every replica current.
fn leaders(shared: &Shared, stream: &str, consumer: Option<&str>) -> Result<String, String> {
    let mut views: Vec<(String, String, Value)> = Vec::new();
    for (index, port) in shared.http_ports.iter().enumerate() {
        let node = format!("n{}", index + 1);
        let jsz = jsz(*port)?;
        let cluster = cluster_block(&jsz, stream, consumer)
            .ok_or_else(|| format!("{node} does not list it yet"))?;
        let leader = cluster["leader"]
            .as_str()
            .filter(|leader| !leader.is_empty())
            .ok_or_else(|| format!("{node} knows no leader"))?
            .to_string();
        views.push((node, leader, cluster));
    }
    let leader = views[0].1.clone();
    if let Some((node, other, _)) = views.iter().find(|(_, other, _)| *other != leader) {
        return Err(format!("n1 names {leader}, {node} names {other}"));
    }
    let (_, _, view) = views
        .iter()
        .find(|(node, _, _)| *node == leader)
        .ok_or_else(|| format!("the leader {leader} is not a node"))?;
    let behind: Vec<&Value> = view["replicas"]
        .as_array()
        .map(|replicas| {
            replicas
                .iter()
                .filter(|replica| replica["current"] != true)
                .collect()
        })
        .unwrap_or_default();
    if behind.is_empty() {
        Ok(leader)
    } else {
        Err(format!("{leader} leads, replicas not current: {behind:?}"))
    }
}

/// [`Settle::copies`]: waits (bounded by [`MOVE_TIMEOUT`]) until every
/// node's `/jsz` shows the same last sequence and message count for
/// `stream` (stderr says so if they never do).
async fn wait_copies_agree(shared: &Shared, stream: &str, before: &str) {
    let deadline = Instant::now() + MOVE_TIMEOUT;
    loop {
        let copies: Vec<Result<(Value, Value), String>> = shared
            .http_ports
            .iter()
            .enumerate()
            .map(|(index, port)| {
                let jsz = jsz(*port)?;
                let detail = stream_details(&jsz)
                    .into_iter()
                    .find(|detail| detail["name"] == stream)
                    .ok_or_else(|| format!("n{} does not list {stream}", index + 1))?;
                // tern: at the top; nats-server: in `state`.
                let state = if detail["state"].is_object() {
                    &detail["state"]
                } else {
                    detail
                };
                Ok((state["last_seq"].clone(), state["messages"].clone()))
            })
            .collect();
        let agree =
            copies.iter().all(Result::is_ok) && copies.windows(2).all(|pair| pair[0] == pair[1]);
        // No node has it (a request about a missing stream): nothing to wait for.
        if agree || copies.iter().all(Result::is_err) {
            return;
        }
        if Instant::now() >= deadline {
            eprintln!(
                "client proxy: the copies of {stream} still differ before {before}: {copies:?}"
            );
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A node's `/jsz` with its streams and consumers.
pub(super) fn jsz(port: u16) -> Result<Value, String> {
    let (status, body) = super::blocking(move || {
        super::http_get(port, "/jsz?accounts=true&streams=true&consumers=true")
    });
    if status != 200 {
        return Err(format!("/jsz: {status}"));
    }
    serde_json::from_str(&body).map_err(|error| format!("/jsz: {error}"))
}

/// Every stream a `/jsz` lists: tern lists `stream_detail` at the top,
/// nats-server per account.
pub(super) fn stream_details(jsz: &Value) -> Vec<&Value> {
    let mut details: Vec<&Value> = jsz["stream_detail"]
        .as_array()
        .map(|streams| streams.iter().collect())
        .unwrap_or_default();
    for account in jsz["account_details"].as_array().into_iter().flatten() {
        details.extend(account["stream_detail"].as_array().into_iter().flatten());
    }
    details
}

/// The `cluster` block `/jsz` shows for `stream` (or its `consumer`).
fn cluster_block(jsz: &Value, stream: &str, consumer: Option<&str>) -> Option<Value> {
    let detail = stream_details(jsz)
        .into_iter()
        .find(|detail| detail["name"] == stream)?;
    match consumer {
        None => Some(detail["cluster"].clone()),
        Some(name) => detail["consumer_detail"]
            .as_array()?
            .iter()
            .find(|consumer| consumer["name"] == name)
            .map(|consumer| consumer["cluster"].clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_are_added_or_raised_and_the_rest_kept() {
        let edit = |body: &str| {
            replicated(body.as_bytes()).map(|edited| String::from_utf8(edited).unwrap())
        };
        assert_eq!(
            edit(r#"{"name":"A"}"#).as_deref(),
            Some(r#"{"num_replicas":3,"name":"A"}"#)
        );
        assert_eq!(edit(r#" {}"#).as_deref(), Some(r#" {"num_replicas":3}"#));
        assert_eq!(
            edit(r#"{"name":"A","num_replicas": 0,"max_msgs":1}"#).as_deref(),
            Some(r#"{"name":"A","num_replicas": 3,"max_msgs":1}"#)
        );
        assert_eq!(
            edit(r#"{"num_replicas":1}"#).as_deref(),
            Some(r#"{"num_replicas":3}"#)
        );
        assert_eq!(edit(r#"{"num_replicas":5}"#), None);
        assert_eq!(edit(r#"{"name":"A","#), None);
        assert_eq!(edit(r#"[]"#), None);
        assert_eq!(edit(""), None);
    }

    #[test]
    fn frames_are_split_at_their_payloads() {
        let buffer = b"PUB a r 3\r\nabc\r\nPING\r\nHMSG s 1 12 14\r\nNATS/1.0\r\n\r\nxy\r\n";
        let first = Frame::first(buffer).unwrap();
        assert_eq!((first.len, first.payload), (16, Some((11, 0, 3))));
        let second = Frame::first(&buffer[16..]).unwrap();
        assert_eq!((second.len, second.payload), (6, None));
        let third = Frame::first(&buffer[22..]).unwrap();
        assert_eq!(third.len, buffer.len() - 22);
        assert!(Frame::first(&buffer[22..buffer.len() - 1]).is_none());
        let rebuilt = with_body(buffer, &first, b"abcd");
        assert_eq!(rebuilt, b"PUB a r 4\r\nabcd\r\n");
    }
}
