//! The JetStream server a client-level test runs against: one server (the
//! `tern` and `nats` halves of a differential test) or a 3-node cluster of
//! the same server (`tern_cluster`, `nats_cluster`; made by
//! [`differential_cluster!`](crate::differential_cluster)).
//!
//! The test body is the same for both: `js::start(flavor)` gives a
//! [`Target`], whose `connect`, `url`, `raw_quiet`, `restart` and
//! `log_tail` mean "the server the client talks to". In a cluster that is
//! node 1, reached through a [`ClientProxy`]: every stream created through
//! it is made replicated (R3; see the proxy's module doc for the rule),
//! and any stream or consumer whose leader turns out to be node 1 is moved
//! to another node before the client sees the create's answer. So every
//! request, publish, pull and delivery of the test crosses a route to the
//! leader, and every stored message is replicated.
//!
//! Which topology runs is a task-local ([`topology`]) set by the test
//! macro, so helpers (`js::default_config`, `default_replicas`) can
//! follow it without the test body passing it around.

use std::future::Future;
use std::time::{Duration, Instant};

use super::cluster::Cluster;
use super::proxy::{jsz, stream_details, ClientProxy, Settle};
use super::{Flavor, Options, RawClient, Server, TIMEOUT};

/// How many nodes a cluster target has, and how many replicas the proxy
/// gives a stream created without more.
pub const CLUSTER_NODES: usize = 3;
/// The node clients connect to (through the proxy).
pub const CLIENT_NODE: usize = 1;
/// How long a cluster may take to elect its meta leader and have every
/// node current (the suite's servers share 2 vCPUs; nats-server's meta
/// group takes a few seconds to form).
pub const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// One server, or a cluster of [`CLUSTER_NODES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    Single,
    Cluster,
}

tokio::task_local! {
    static TOPOLOGY: Topology;
}

/// The topology of the running test (Single outside a cluster variant's
/// task, e.g. in a task the test spawned).
pub fn topology() -> Topology {
    TOPOLOGY
        .try_with(|topology| *topology)
        .unwrap_or(Topology::Single)
}

/// True inside a `*_cluster` variant.
pub fn clustered() -> bool {
    topology() == Topology::Cluster
}

/// Runs a test body with `topology` (what the `*_cluster` variants do).
pub async fn run_on<F: Future>(topology: Topology, body: F) -> F::Output {
    TOPOLOGY.scope(topology, body).await
}

/// Replicas of a stream the test created without asking for more: 1 on
/// one server, [`CLUSTER_NODES`] in a cluster (the proxy's rule).
pub fn default_replicas() -> u64 {
    match topology() {
        Topology::Single => 1,
        Topology::Cluster => CLUSTER_NODES as u64,
    }
}

/// A cluster whose nodes' last log lines go to stderr when it is dropped
/// by a failing test (a panic's message rarely names the node that
/// misbehaved).
struct LoggedCluster(Cluster);

impl Drop for LoggedCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{} cluster:\n{}", self.0.flavor.name(), self.0.logs());
        }
    }
}

/// Where the client proxy waits for the cluster to settle (see
/// [`Settle`]): both servers after a create; nats-server where its
/// consumers read lagging copies.
fn settle(flavor: Flavor) -> Settle {
    Settle {
        creates: true,
        copies: flavor == Flavor::Nats,
    }
}

/// Runs `future` to completion from synchronous code inside the test's
/// multi-threaded runtime (the harness's start and restart are sync, as
/// `Server`'s are).
fn block_on<F: Future>(future: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(future))
}

enum Shape {
    Single(Server),
    Cluster {
        cluster: LoggedCluster,
        proxy: ClientProxy,
    },
}

/// The server under test, as the client sees it.
pub struct Target {
    pub flavor: Flavor,
    shape: Shape,
}

impl Target {
    /// One server or a cluster, as the running variant asks.
    pub fn start(flavor: Flavor, options: Options) -> Target {
        let shape = match topology() {
            Topology::Single => Shape::Single(Server::start(flavor, options)),
            Topology::Cluster => block_on(async {
                let jetstream = options.jetstream;
                let cluster = Cluster::meshed(flavor, CLUSTER_NODES, options).await;
                if jetstream {
                    wait_jetstream_ready(&cluster).await;
                }
                let proxy = ClientProxy::start(&cluster, CLIENT_NODE, settle(flavor)).await;
                Shape::Cluster {
                    cluster: LoggedCluster(cluster),
                    proxy,
                }
            }),
        };
        Target { flavor, shape }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self.shape, Shape::Cluster { .. })
    }

    /// The single server; panics on a cluster (for what only one process
    /// has: its pid, its files).
    pub fn server(&self) -> &Server {
        match &self.shape {
            Shape::Single(server) => server,
            Shape::Cluster { .. } => panic!("a single-server test ran on a cluster"),
        }
    }

    /// The cluster, if this is one.
    pub fn cluster(&self) -> Option<&Cluster> {
        match &self.shape {
            Shape::Single(_) => None,
            Shape::Cluster { cluster, .. } => Some(&cluster.0),
        }
    }

    fn client_port(&self) -> u16 {
        match &self.shape {
            Shape::Single(server) => server.client_port(),
            Shape::Cluster { proxy, .. } => proxy.port(),
        }
    }

    /// The URL clients connect to.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port())
    }

    /// An async-nats client with default options.
    pub async fn connect(&self) -> async_nats::Client {
        self.connect_with(async_nats::ConnectOptions::new()).await
    }

    /// An async-nats client; in a cluster it stays on the client node
    /// (the other nodes' URLs it learns are ignored).
    pub async fn connect_with(&self, options: async_nats::ConnectOptions) -> async_nats::Client {
        let options = if self.is_cluster() {
            options.ignore_discovered_servers()
        } else {
            options
        };
        match tokio::time::timeout(TIMEOUT, options.connect(self.url())).await {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => panic!(
                "{}: connect failed: {error}\nserver log:\n{}",
                self.flavor.name(),
                self.log_tail()
            ),
            Err(_) => panic!(
                "{}: connect timed out\nserver log:\n{}",
                self.flavor.name(),
                self.log_tail()
            ),
        }
    }

    /// A raw connection after INFO, `CONNECT` (verbose and pedantic off,
    /// headers on) and `PING` → `PONG`; see [`Server::raw_quiet`].
    pub async fn raw_quiet(&self) -> RawClient {
        let mut raw = RawClient::connect(self.client_port()).await;
        raw.read_info().await;
        raw.ignore_server_pings();
        raw.send(
            b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"no_responders\":true}\r\nPING\r\n",
        )
        .await;
        let got = raw.read_until(b"PONG\r\n", TIMEOUT).await;
        assert_eq!(
            super::text(&got),
            "PONG\r\n",
            "{}: raw handshake",
            self.flavor.name()
        );
        raw
    }

    /// The last stderr lines of the server, or of every node.
    pub fn log_tail(&self) -> String {
        match &self.shape {
            Shape::Single(server) => server.log_tail(),
            Shape::Cluster { cluster, .. } => cluster.0.logs(),
        }
    }

    /// SIGKILLs the server (every node of a cluster, all before any
    /// starts again) and starts it again on its data; a cluster is
    /// waited for until its JetStream is ready again. Clients made before
    /// are cut off.
    pub fn restart(self) -> Target {
        let flavor = self.flavor;
        let shape = match self.shape {
            Shape::Single(server) => Shape::Single(server.restart()),
            Shape::Cluster { mut cluster, proxy } => {
                drop(proxy);
                let nodes = &mut cluster.0;
                for node in 1..=nodes.len() {
                    nodes.kill(node);
                }
                for node in 1..=nodes.len() {
                    nodes.restart(node);
                }
                let proxy = block_on(async {
                    nodes.wait_formed().await;
                    wait_jetstream_ready(nodes).await;
                    wait_streams_led(nodes).await;
                    ClientProxy::start(nodes, CLIENT_NODE, settle(flavor)).await
                });
                Shape::Cluster { cluster, proxy }
            }
        };
        Target { flavor, shape }
    }
}

/// Waits (bounded by [`CLUSTER_READY_TIMEOUT`]) until every stream a
/// node lists has a leader, the same on every node (after a restart of
/// every node: `/healthz` can be 200 before a stream's group elected one,
/// and nats-server then leaves a STREAM.INFO unanswered).
pub async fn wait_streams_led(cluster: &Cluster) {
    let deadline = Instant::now() + CLUSTER_READY_TIMEOUT;
    loop {
        let mut leaders: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        let mut problem = None;
        for node in cluster.alive_nodes() {
            match jsz(cluster.node(node).http_port()) {
                Ok(jsz) => {
                    for detail in stream_details(&jsz) {
                        let name = detail["name"].as_str().unwrap_or_default().to_string();
                        let leader = detail["cluster"]["leader"].as_str().unwrap_or_default();
                        leaders.entry(name).or_default().push(leader.to_string());
                    }
                }
                Err(error) => problem = Some(format!("n{node}: {error}")),
            }
        }
        let unled = leaders.iter().find(|(_, seen)| {
            seen.iter().any(String::is_empty) || seen.windows(2).any(|pair| pair[0] != pair[1])
        });
        if let Some((stream, seen)) = unled {
            problem = Some(format!("{stream}'s leader as each node sees it: {seen:?}"));
        }
        let Some(problem) = problem else {
            return;
        };
        if Instant::now() >= deadline {
            panic!(
                "{}: streams not led after {CLUSTER_READY_TIMEOUT:?}: {problem}\n{}",
                cluster.flavor.name(),
                cluster.logs()
            );
        }
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (bounded by [`CLUSTER_READY_TIMEOUT`]) until every node's
/// `/healthz` is 200: a meta leader is known and every node is current
/// with it and with every replicated stream it holds (nats-server's rule;
/// tern's `/healthz` follows it). No JetStream API request is made, so the
/// tests' API counters start at zero.
pub async fn wait_jetstream_ready(cluster: &Cluster) {
    let deadline = Instant::now() + CLUSTER_READY_TIMEOUT;
    for node in cluster.alive_nodes() {
        loop {
            let (status, body) = cluster.node(node).http_get("/healthz");
            if status == 200 {
                break;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{}: n{node}'s /healthz is still {status} after {CLUSTER_READY_TIMEOUT:?}: {body}\n{}",
                    cluster.flavor.name(),
                    cluster.logs()
                );
            }
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
