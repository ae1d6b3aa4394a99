//! One run: hosts up, the cluster formed, the stream and its consumer
//! made, the workload started, the nemesis's plan carried out step by
//! step, everything healed, the workload stopped and drained, each node's
//! copy read, and the history checked.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::checker::{self, FaultWindow, History, NodeCopy, Report};
use crate::damage::{self, Damage};
use crate::nemesis::{self, Fault, ScheduleName, Step};
use crate::net::{NetError, Network};
use crate::servers::{Node, Server, ServerError};
use crate::workload::{self, CONSUMER, STREAM, SUBJECT_PREFIX};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Which server to test.
    #[arg(long, value_enum, default_value_t = Flavor::Tern)]
    pub server: Flavor,
    /// nats-server only: `sync_interval: always` (fsync before every ack).
    #[arg(long)]
    pub sync_always: bool,
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// The stream's replicas (defaults to the node count, at most 5).
    #[arg(long)]
    pub replicas: Option<usize>,
    #[arg(long, value_enum, default_value_t = ScheduleName::Short)]
    pub schedule: ScheduleName,
    /// The plan's length (all but `short`), e.g. 600s, 60m.
    #[arg(long, value_parser = parse_duration, default_value = "300s")]
    pub duration: Duration,
    /// The seed of the plan and of every random choice; printed, so a
    /// failure repeats. Default: drawn from the clock.
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long, default_value_t = 3)]
    pub publishers: usize,
    #[arg(long, default_value_t = 2)]
    pub consumers: usize,
    /// Wait after each acknowledged publish, per publisher.
    #[arg(long, value_parser = parse_duration, default_value = "2ms")]
    pub publish_pause: Duration,
    /// tern-server's shards per node.
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
    /// Default: `tern-server` beside this binary.
    #[arg(long)]
    pub tern_server: Option<PathBuf>,
    /// Default: `nats-server` on the PATH.
    #[arg(long, default_value = "nats-server")]
    pub nats_server: PathBuf,
    /// Where stores, logs and report.json go. Default: a new directory
    /// under the system's temp dir, removed after a passing run.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Flavor {
    Tern,
    Nats,
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |at| text.split_at(at));
    let number: u64 = number
        .parse()
        .map_err(|_| format!("not a duration: {text:?}"))?;
    let scale = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("unit of {text:?}: one of ms, s, m, h")),
    };
    Ok(Duration::from_millis(number * scale))
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Net(#[from] NetError),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error(transparent)]
    Damage(#[from] damage::DamageError),
    #[error("{what} within {timeout:?}: {last}")]
    Timeout {
        what: String,
        timeout: Duration,
        last: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// The run's outcome, written to `report.json`.
#[derive(Debug, serde::Serialize)]
pub struct Outcome {
    pub server: String,
    pub nodes: usize,
    pub replicas: usize,
    pub schedule: ScheduleName,
    pub seed: u64,
    pub steps: Vec<StepRecord>,
    /// Servers that exited without the nemesis killing them, refused to
    /// start again after a fault, or were not healthy (`/healthz`) at the
    /// end (each a failure of the run).
    pub crashes: Vec<String>,
    pub report: Report,
    /// From the last heal to every value delivered and every copy current.
    pub drain_ms: u64,
    pub elapsed_ms: u64,
    pub passed: bool,
}

#[derive(Debug, serde::Serialize)]
pub struct StepRecord {
    pub step: Step,
    pub start_ms: u64,
    pub heal_ms: u64,
    pub damage: Option<Damage>,
    /// What a membership change did.
    pub note: Option<String>,
    /// From the heal until every replica was current again (`None`: not
    /// within the recovery timeout; the next fault then started degraded).
    pub recovered_ms: Option<u64>,
}

/// How long the cluster gets to form and accept the stream.
const FORM_TIMEOUT: Duration = Duration::from_secs(60);
/// From the last heal: every delivery made and every copy current.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long each node gets to answer `/healthz` 200 at the end.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the next fault waits for every replica to be current.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(60);
/// How far behind the leader (entries) a follower may be while the
/// publishers run and still count as recovered: about a second of them.
const RUNNING_LAG_MAX: u64 = 1_000;
/// The same wait while the previous step had not recovered either.
const DEGRADED_RECOVERY_TIMEOUT: Duration = Duration::from_secs(5);
/// The workload runs this long before the first fault and after the last.
const WARM_UP: Duration = Duration::from_secs(3);
const COOL_DOWN: Duration = Duration::from_secs(5);
const CLUSTER_NAME: &str = "jepsen";

struct Cluster {
    server: Server,
    network: Network,
    nodes: Vec<Node>,
    started: Instant,
    crashes: Vec<String>,
}

impl Cluster {
    fn node(&mut self, number: usize) -> &mut Node {
        &mut self.nodes[number - 1]
    }

    /// Starts `number`; a server that refuses to start (exits) is a
    /// failure of the run, recorded with its last log line, and the node
    /// is then replaced as an operator would: its store moved aside and a
    /// fresh one started under the same name, so the run goes on.
    async fn start(&mut self, number: usize) -> Result<(), RunError> {
        let node = &mut self.nodes[number - 1];
        match node.start(&self.server, &self.network, CLUSTER_NAME).await {
            Ok(()) => Ok(()),
            Err(ServerError::Exited { status, .. }) => {
                let log = std::fs::read_to_string(node.log_path()).unwrap_or_default();
                let reason = log
                    .lines()
                    .rev()
                    .find(|line| {
                        line.contains("[ERR]") || line.contains("[FTL]") || line.contains("rror")
                    })
                    .or_else(|| log.lines().last())
                    .unwrap_or("no log")
                    .to_string();
                let store = node.store_dir();
                let aside = store.with_file_name(format!("data-refused-{}", self.crashes.len()));
                std::fs::rename(&store, &aside).map_err(|source| RunError::Io {
                    path: store.display().to_string(),
                    source,
                })?;
                let line = format!(
                    "n{number} refused to start ({status}): {reason}; its store moved to {} and the node replaced",
                    aside.display()
                );
                self.log(&line);
                self.crashes.push(line);
                let node = &mut self.nodes[number - 1];
                node.start(&self.server, &self.network, CLUSTER_NAME)
                    .await?;
                Ok(())
            }
            Err(error) => Err(error.into()),
        }
    }

    fn log(&self, line: &str) {
        let at = self.started.elapsed().as_secs_f64();
        eprintln!("[{at:8.3}] {line}");
    }

    /// Any server that exited by itself is a crash: recorded, restarted.
    async fn reap_crashes(&mut self) -> Result<(), RunError> {
        for number in 1..=self.nodes.len() {
            if let Some(status) = self.node(number).exited() {
                let line = format!("n{number} exited by itself: {status}");
                self.log(&line);
                self.crashes.push(line);
                self.start(number).await?;
            }
        }
        Ok(())
    }
}

/// What a step left to undo at its heal.
#[derive(Default)]
struct Active {
    restart: Option<usize>,
    resume: Option<usize>,
    partitioned: bool,
    loss: Option<usize>,
    delay: Option<(usize, std::process::Child)>,
    damage: Option<Damage>,
    note: Option<String>,
}

/// Removes the `pick`-th current replica (by name order) from the stream;
/// what happened, for the report.
async fn peer_remove(cluster: &Cluster, pick: usize) -> String {
    let client = match workload::connect(&cluster.nodes[0].url()).await {
        Ok(client) => client,
        Err(error) => return format!("no client: {error}"),
    };
    let info = match stream_info(&client).await {
        Ok(info) => info,
        Err(error) => return format!("stream info: {error}"),
    };
    let mut replicas: Vec<String> = std::iter::once(&info["cluster"]["leader"])
        .chain(
            info["cluster"]["replicas"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|replica| &replica["name"]),
        )
        .filter_map(|name| name.as_str().map(str::to_string))
        .collect();
    replicas.sort();
    if replicas.is_empty() {
        return "no replicas known".into();
    }
    let peer = replicas[pick % replicas.len()].clone();
    let body = serde_json::json!({ "peer": peer }).to_string();
    match api(
        &client,
        &format!("$JS.API.STREAM.PEER.REMOVE.{STREAM}"),
        &body,
    )
    .await
    {
        Ok(answer) => match api_error(&answer) {
            None => format!("removed {peer} from {replicas:?}"),
            Some(error) => format!("removing {peer}: {error}"),
        },
        Err(error) => format!("removing {peer}: {error}"),
    }
}

async fn apply(cluster: &mut Cluster, step: &Step) -> Result<Active, RunError> {
    let mut active = Active::default();
    let tern = cluster.server.is_tern();
    match &step.fault {
        Fault::Kill { node } => {
            cluster.node(*node).kill();
            active.restart = Some(*node);
        }
        Fault::Pause { node } => {
            cluster.node(*node).pause();
            active.resume = Some(*node);
        }
        Fault::Isolate { node } => {
            let pairs = cluster.network.isolation(&[*node]);
            cluster.network.set_partition(&pairs)?;
            active.partitioned = true;
        }
        Fault::Split { minority } => {
            let pairs = cluster.network.isolation(minority);
            cluster.network.set_partition(&pairs)?;
            active.partitioned = true;
        }
        Fault::OneWay { from, to } => {
            cluster.network.set_partition(&[(*from, *to)])?;
            active.partitioned = true;
        }
        Fault::Loss { node, percent } => {
            cluster.network.set_loss(*node, *percent)?;
            active.loss = Some(*node);
        }
        Fault::Delay {
            node,
            delay_ms,
            jitter_ms,
        } => {
            let shim = cluster.network.start_delay(
                *node,
                *delay_ms,
                *jitter_ms,
                step.hold.as_millis() as u64,
            )?;
            active.delay = Some((*node, shim));
        }
        Fault::Damage {
            node,
            target,
            action,
            seed,
        } => {
            cluster.node(*node).kill();
            let store = cluster.node(*node).store_dir();
            let done = damage::damage(tern, &store, *target, *action, *seed)?;
            cluster.log(&format!("  n{node}: {} {}", done.path, done.detail));
            active.damage = Some(done);
            active.restart = Some(*node);
        }
        Fault::PauseThenKill { node } => {
            cluster.node(*node).pause();
            tokio::time::sleep(step.hold / 2).await;
            cluster.node(*node).kill();
            active.restart = Some(*node);
        }
        Fault::IsolateThenKill { node } => {
            let pairs = cluster.network.isolation(&[*node]);
            cluster.network.set_partition(&pairs)?;
            active.partitioned = true;
            tokio::time::sleep(step.hold / 3).await;
            cluster.node(*node).kill();
            tokio::time::sleep(step.hold / 3).await;
            cluster.start(*node).await?;
        }
        Fault::PeerRemove { pick } => {
            let done = peer_remove(cluster, *pick).await;
            cluster.log(&format!("  {done}"));
            active.note = Some(done);
        }
        Fault::Wipe { node } => {
            cluster.node(*node).kill();
            let store = cluster.node(*node).store_dir();
            std::fs::remove_dir_all(&store).map_err(|source| RunError::Io {
                path: store.display().to_string(),
                source,
            })?;
            active.restart = Some(*node);
        }
    }
    Ok(active)
}

async fn heal(
    cluster: &mut Cluster,
    active: Active,
) -> Result<(Option<Damage>, Option<String>), RunError> {
    if let Some(node) = active.resume {
        cluster.node(node).resume();
    }
    if active.partitioned {
        cluster.network.set_partition(&[])?;
    }
    if let Some(node) = active.loss {
        cluster.network.set_loss(node, 0)?;
    }
    if let Some((node, shim)) = active.delay {
        cluster.network.stop_delay(node, shim)?;
    }
    if let Some(node) = active.restart {
        cluster.start(node).await?;
    }
    Ok((active.damage, active.note))
}

/// A JetStream API request and its JSON answer.
async fn api(
    client: &async_nats::Client,
    subject: &str,
    body: &str,
) -> Result<serde_json::Value, String> {
    let reply = tokio::time::timeout(
        Duration::from_secs(3),
        client.request(subject.to_string(), body.to_string().into()),
    )
    .await
    .map_err(|_| "timed out".to_string())?
    .map_err(|error| error.to_string())?;
    serde_json::from_slice(&reply.payload).map_err(|error| error.to_string())
}

fn api_error(answer: &serde_json::Value) -> Option<String> {
    answer.get("error").map(|error| error.to_string())
}

/// Retries `attempt` until it is `Ok` or `timeout` passes.
async fn until<T, F, Fut>(what: &str, timeout: Duration, mut attempt: F) -> Result<T, RunError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(last) if Instant::now() > deadline => {
                return Err(RunError::Timeout {
                    what: what.to_string(),
                    timeout,
                    last,
                })
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn create_stream(client: &async_nats::Client, replicas: usize) -> Result<(), RunError> {
    let stream = serde_json::json!({
        "name": STREAM,
        "subjects": [format!("{SUBJECT_PREFIX}.>")],
        "num_replicas": replicas,
        "storage": "file",
        "retention": "limits",
        "allow_direct": true,
    })
    .to_string();
    until("the stream created", FORM_TIMEOUT, || async {
        let answer = api(client, &format!("$JS.API.STREAM.CREATE.{STREAM}"), &stream).await?;
        match api_error(&answer) {
            None => Ok(()),
            Some(error) => Err(error),
        }
    })
    .await?;
    let consumer = serde_json::json!({
        "stream_name": STREAM,
        "config": {
            "name": CONSUMER,
            "durable_name": CONSUMER,
            "ack_policy": "explicit",
            "ack_wait": workload::ACK_WAIT.as_nanos() as u64,
            "max_ack_pending": 100_000,
            "deliver_policy": "all",
        }
    })
    .to_string();
    until("the consumer created", FORM_TIMEOUT, || async {
        let answer = api(
            client,
            &format!("$JS.API.CONSUMER.CREATE.{STREAM}.{CONSUMER}"),
            &consumer,
        )
        .await?;
        match api_error(&answer) {
            None => Ok(()),
            Some(error) => Err(error),
        }
    })
    .await
}

/// STREAM.INFO as `client`'s node gets it.
async fn stream_info(client: &async_nats::Client) -> Result<serde_json::Value, String> {
    let answer = api(client, &format!("$JS.API.STREAM.INFO.{STREAM}"), "").await?;
    match api_error(&answer) {
        None => Ok(answer),
        Some(error) => Err(error),
    }
}

/// Every replica within `lag_max` entries of the leader (with publishers
/// still running a healthy follower is always a few entries behind, which
/// tern reports as not current: then `lag_max` > 0; 0 is the strict check
/// once they stopped), and the leader at `last_sequence` or beyond.
fn converged(
    info: &serde_json::Value,
    replicas: usize,
    last_sequence: u64,
    lag_max: u64,
) -> Result<(), String> {
    let cluster = &info["cluster"];
    if cluster["leader"].as_str().is_none_or(str::is_empty) {
        return Err("no leader".into());
    }
    let others = cluster["replicas"].as_array().map_or(0, Vec::len);
    if others + 1 != replicas {
        return Err(format!("{others} replicas besides the leader: {cluster}"));
    }
    for replica in cluster["replicas"].as_array().into_iter().flatten() {
        let current = replica["current"].as_bool() == Some(true);
        let lag = replica["lag"].as_u64().unwrap_or(0);
        let close = lag <= lag_max && replica["offline"].as_bool() != Some(true);
        let caught_up = current && lag == 0;
        let catching_up = lag_max > 0 && close && lag > 0;
        if !caught_up && !catching_up {
            return Err(format!("replica not current: {replica}"));
        }
    }
    let last = info["state"]["last_seq"].as_u64().unwrap_or(0);
    if last < last_sequence {
        return Err(format!("last_seq {last} < {last_sequence}"));
    }
    Ok(())
}

/// `GET /healthz` on `node`'s monitoring port: `Ok` on 200, else the
/// status line and body.
async fn healthz(node: &Node) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = format!("{}:{}", node.ip, crate::servers::MONITOR_PORT);
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(&address).await?;
        stream
            .write_all(b"GET /healthz HTTP/1.0\r\nHost: tern\r\n\r\n")
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(3), exchange)
        .await
        .map_err(|_| "no answer within 3 s".to_string())?
        .map_err(|error| error.to_string())?;
    let text = String::from_utf8_lossy(&response);
    let status_line = text.lines().next().unwrap_or_default();
    if status_line.split_whitespace().nth(1) == Some("200") {
        Ok(())
    } else {
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().trim();
        Err(format!("{status_line}: {body}"))
    }
}

/// `node`'s copy: it is made the stream's leader, then its store is read
/// in batches of direct gets from a client connected to it.
async fn read_copy(node: &Node, expected_last: u64) -> Result<Vec<(u64, String)>, String> {
    let client = workload::connect(&node.url())
        .await
        .map_err(|error| error.to_string())?;
    let name = node.name.clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = stream_info(&client).await;
        let leader = info
            .as_ref()
            .ok()
            .and_then(|info| info["cluster"]["leader"].as_str().map(str::to_string));
        if leader.as_deref() == Some(name.as_str()) {
            break;
        }
        if Instant::now() > deadline {
            let cluster = info.map(|info| info["cluster"].to_string());
            return Err(format!(
                "not made leader within 30 s (leader {leader:?}, cluster {cluster:?})"
            ));
        }
        let body = serde_json::json!({ "placement": { "preferred": name } }).to_string();
        let _ = api(
            &client,
            &format!("$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}"),
            &body,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut messages = Vec::new();
    let mut next = 1u64;
    const BATCH: u64 = 1000;
    loop {
        let inbox = client.new_inbox();
        let mut replies = client
            .subscribe(inbox.clone())
            .await
            .map_err(|error| error.to_string())?;
        let request = serde_json::json!({ "seq": next, "batch": BATCH }).to_string();
        client
            .publish_with_reply(
                format!("$JS.API.DIRECT.GET.{STREAM}"),
                inbox,
                request.into(),
            )
            .await
            .map_err(|error| error.to_string())?;
        let mut got = 0;
        loop {
            let reply = tokio::time::timeout(Duration::from_secs(5), replies.next())
                .await
                .map_err(|_| format!("direct get from {next}: no end of batch within 5 s"))?
                .ok_or("subscription closed")?;
            if reply.status.is_some() {
                break;
            }
            let sequence = reply
                .headers
                .as_ref()
                .and_then(|headers| headers.get("Nats-Sequence"))
                .and_then(|value| value.as_str().parse::<u64>().ok())
                .ok_or_else(|| format!("direct get from {next}: no Nats-Sequence"))?;
            messages.push((
                sequence,
                String::from_utf8_lossy(&reply.payload).into_owned(),
            ));
            next = sequence + 1;
            got += 1;
        }
        if got == 0 {
            break;
        }
    }
    let last = messages.last().map_or(0, |last| last.0);
    if last < expected_last {
        return Err(format!(
            "read up to seq {last}, the stream ends at {expected_last}"
        ));
    }
    Ok(messages)
}

pub async fn run(args: RunArgs) -> Result<Outcome, RunError> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |since| since.as_nanos() as u64)
    });
    let replicas = args.replicas.unwrap_or(args.nodes.min(5));
    assert!(
        replicas <= args.nodes,
        "{replicas} replicas on {} nodes",
        args.nodes
    );
    let server = match args.server {
        Flavor::Tern => Server::Tern {
            binary: args.tern_server.clone().unwrap_or_else(|| {
                std::env::current_exe()
                    .ok()
                    .and_then(|exe| exe.parent().map(|dir| dir.join("tern-server")))
                    .unwrap_or_else(|| PathBuf::from("tern-server"))
            }),
            shards: args.shards,
        },
        Flavor::Nats => Server::Nats {
            binary: args.nats_server.clone(),
            sync_always: args.sync_always,
        },
    };
    let steps = nemesis::plan(args.schedule, seed, args.nodes, replicas, args.duration);
    let run_dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("tern-faults-{}-{seed}", std::process::id())),
    };
    std::fs::create_dir_all(&run_dir).map_err(|source| RunError::Io {
        path: run_dir.display().to_string(),
        source,
    })?;
    eprintln!(
        "tern-faults: {}, {} nodes, R{replicas}, schedule {:?} ({} steps), seed {seed}, dir {}",
        server.describe(),
        args.nodes,
        args.schedule,
        steps.len(),
        run_dir.display()
    );
    let network = Network::create(args.nodes)?;
    let nodes = (1..=args.nodes)
        .map(|number| Node::new(number, &network, &run_dir))
        .collect();
    let mut cluster = Cluster {
        server,
        network,
        nodes,
        started: Instant::now(),
        crashes: Vec::new(),
    };
    for number in 1..=args.nodes {
        cluster.start(number).await?;
    }
    let admin = workload::connect(&cluster.nodes[0].url())
        .await
        .map_err(|error| RunError::Timeout {
            what: "connect to n1".into(),
            timeout: FORM_TIMEOUT,
            last: error.to_string(),
        })?;
    create_stream(&admin, replicas).await?;
    cluster.log("stream and consumer made; workload starts");

    let started = cluster.started;
    let stop_publishing = Arc::new(AtomicBool::new(false));
    let stop_consuming = Arc::new(AtomicBool::new(false));
    let publishers: Vec<_> = (0..args.publishers)
        .map(|publisher| {
            let url = cluster.nodes[publisher % args.nodes].url();
            tokio::spawn(workload::publish(
                publisher as u64,
                url,
                started,
                args.publish_pause,
                stop_publishing.clone(),
            ))
        })
        .collect();
    let consumers: Vec<_> = (0..args.consumers)
        .map(|consumer| {
            // Consumers on other nodes than the first publishers'.
            let url = cluster.nodes[(consumer + 1) % args.nodes].url();
            tokio::spawn(workload::consume(consumer, url, stop_consuming.clone()))
        })
        .collect();

    tokio::time::sleep(WARM_UP).await;
    let mut records = Vec::new();
    let mut windows = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        cluster.reap_crashes().await?;
        cluster.log(&format!(
            "step {}/{}: {} for {:?}",
            index + 1,
            steps.len(),
            step.fault,
            step.hold
        ));
        let start = started.elapsed();
        let active = apply(&mut cluster, step).await?;
        tokio::time::sleep(step.hold.saturating_sub(started.elapsed() - start)).await;
        let heal_at = started.elapsed();
        let (damage, note) = heal(&mut cluster, active).await?;
        cluster.log("  healed");
        let healthy_before = records
            .last()
            .is_none_or(|record: &StepRecord| record.recovered_ms.is_some());
        windows.push(FaultWindow {
            fault: step.fault.to_string(),
            single_node: step.fault.is_single_node(),
            started_healthy: healthy_before,
            start,
            heal: heal_at,
        });
        records.push(StepRecord {
            step: step.clone(),
            start_ms: start.as_millis() as u64,
            heal_ms: heal_at.as_millis() as u64,
            damage,
            note,
            recovered_ms: None,
        });
        tokio::time::sleep(step.quiet).await;
        // The next fault starts from a healthy cluster (every replica
        // current), so each one's availability is its own; how long that
        // took after the heal is the step's recovery time.
        // After a step that did not recover, a short wait only: a replica
        // that stays broken would otherwise stretch every later step.
        let degraded = records
            .iter()
            .rev()
            .nth(1)
            .is_some_and(|record: &StepRecord| record.recovered_ms.is_none());
        let timeout = if degraded {
            DEGRADED_RECOVERY_TIMEOUT
        } else {
            RECOVERY_TIMEOUT
        };
        let recovered = until("every replica current", timeout, || async {
            let info = stream_info(&admin).await?;
            converged(&info, replicas, 0, RUNNING_LAG_MAX)
        })
        .await;
        let record = records.last_mut().expect("pushed above");
        match recovered {
            Ok(()) => record.recovered_ms = Some((started.elapsed() - heal_at).as_millis() as u64),
            Err(error) => cluster.log(&format!("  not recovered: {error}")),
        }
    }
    cluster.reap_crashes().await?;
    let last_heal = started.elapsed();
    tokio::time::sleep(COOL_DOWN).await;
    stop_publishing.store(true, Ordering::Relaxed);
    let mut attempts = Vec::new();
    for publisher in publishers {
        attempts.extend(publisher.await.expect("publisher task"));
    }
    let last_acked = attempts
        .iter()
        .filter_map(|attempt| match attempt.outcome {
            checker::Outcome::Acked { sequence } => Some(sequence),
            checker::Outcome::Failed => None,
        })
        .max()
        .unwrap_or(0);
    cluster.log(&format!(
        "publishers stopped; {} attempts, last acked seq {last_acked}",
        attempts.len()
    ));

    // Drain: the consumers run until nothing is pending or unacknowledged.
    let drain_deadline = DRAIN_TIMEOUT;
    until("the consumer drained", drain_deadline, || async {
        let answer = api(
            &admin,
            &format!("$JS.API.CONSUMER.INFO.{STREAM}.{CONSUMER}"),
            "",
        )
        .await?;
        if let Some(error) = api_error(&answer) {
            return Err(error);
        }
        let pending = answer["num_pending"].as_u64().unwrap_or(u64::MAX);
        let unacked = answer["num_ack_pending"].as_u64().unwrap_or(u64::MAX);
        if pending == 0 && unacked == 0 {
            Ok(())
        } else {
            Err(format!("num_pending {pending}, num_ack_pending {unacked}"))
        }
    })
    .await
    .map_err(|error| {
        cluster.log(&format!("drain: {error}"));
        error
    })
    .ok();
    stop_consuming.store(true, Ordering::Relaxed);
    let mut deliveries = Vec::new();
    for consumer in consumers {
        deliveries.extend(consumer.await.expect("consumer task"));
    }
    let converged_at = until("every replica current", DRAIN_TIMEOUT, || async {
        let info = stream_info(&admin).await?;
        converged(&info, replicas, last_acked, 0)
    })
    .await;
    if let Err(error) = &converged_at {
        cluster.log(&format!("{error}"));
    }
    // Every node healthy again (its JetStream up, its groups current).
    for node in &cluster.nodes {
        let name = node.name.clone();
        let healthy = until(&format!("{name} healthy"), HEALTH_TIMEOUT, || healthz(node)).await;
        if let Err(error) = healthy {
            let line = format!("{name} not healthy after the heal: {error}");
            cluster.log(&line);
            cluster.crashes.push(line);
        }
    }
    let drain_ms = (started.elapsed() - last_heal).as_millis() as u64;
    cluster.log("reading each node's copy");

    // The replicas' names, from the leader's view (R < nodes: the others
    // hold no copy).
    let holders: Vec<String> = match stream_info(&admin).await {
        Ok(info) => {
            let cluster_info = &info["cluster"];
            std::iter::once(&cluster_info["leader"])
                .chain(
                    cluster_info["replicas"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|replica| &replica["name"]),
                )
                .filter_map(|name| name.as_str().map(str::to_string))
                .collect()
        }
        Err(_) => cluster.nodes.iter().map(|node| node.name.clone()).collect(),
    };
    let mut copies = Vec::new();
    for node in cluster
        .nodes
        .iter()
        .filter(|node| holders.contains(&node.name))
    {
        let messages = read_copy(node, last_acked).await;
        match &messages {
            Ok(messages) => cluster.log(&format!("  {}: {} messages", node.name, messages.len())),
            Err(error) => cluster.log(&format!("  {}: {error}", node.name)),
        }
        copies.push(NodeCopy {
            node: node.name.clone(),
            messages,
        });
    }
    if copies.len() < replicas {
        copies.push(NodeCopy {
            node: "replicas".into(),
            messages: Err(format!(
                "{} replicas known ({holders:?}), {replicas} wanted",
                copies.len()
            )),
        });
    }
    let history = History {
        attempts,
        deliveries,
        copies,
        faults: windows,
    };
    let report = checker::check(&history);
    let passed = report.safe() && report.recovered() && cluster.crashes.is_empty();
    for node in &mut cluster.nodes {
        node.stop(Duration::from_secs(10)).await;
    }
    let outcome = Outcome {
        server: cluster.server.describe(),
        nodes: args.nodes,
        replicas,
        schedule: args.schedule,
        seed,
        steps: records,
        crashes: cluster.crashes.clone(),
        report,
        drain_ms,
        elapsed_ms: started.elapsed().as_millis() as u64,
        passed,
    };
    let json = serde_json::to_string_pretty(&outcome).expect("serialisable");
    let report_path = run_dir.join("report.json");
    std::fs::write(&report_path, json).map_err(|source| RunError::Io {
        path: report_path.display().to_string(),
        source,
    })?;
    drop(cluster);
    if passed && args.dir.is_none() {
        let _ = std::fs::remove_dir_all(&run_dir);
    }
    Ok(outcome)
}
