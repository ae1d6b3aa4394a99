//! A cluster of real servers (tern or nats-server) on one host, started as
//! an operator would: node 1 listens for routes on a random port, nodes
//! 2..N list only node 1 in `--routes` and learn the others by gossip.
//!
//! Nodes are numbered from 1, like their names (`n1`, `n2`, ...). Every
//! wait is a bounded poll; nothing here sleeps to synchronise.
//!
//! Interest across nodes: a subscription made on node 2 reaches node 1
//! some time after node 2 has processed it. [`super::sync_interest`] (a
//! probe subscription on the subscriber's connection, published to until
//! it arrives) works across nodes as it does on one: one connection's
//! subscriptions propagate in the order it made them. [`wait_interest`]
//! probes given subscriptions on their own subject, and
//! [`Cluster::wait_responder`] retries a request until a reply comes back
//! (which also needs the requester's reply inbox to be known on the
//! responder's node).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::{flush, Flavor, Options, Server, TIMEOUT};

/// Payload of the messages [`wait_interest`] publishes until one arrives.
pub const PROBE: &[u8] = b"__probe__";
/// Published once after the first probe arrived: everything up to it is a probe.
pub const PROBE_END: &[u8] = b"__probe_end__";

/// Poll interval of the bounded waits below (not synchronisation).
const POLL: Duration = Duration::from_millis(20);

static CLUSTERS: AtomicUsize = AtomicUsize::new(0);

/// A cluster name no other test (or test run) uses.
pub fn unique_cluster_name(flavor: Flavor) -> String {
    format!(
        "it-{}-{}-{}",
        flavor.name(),
        std::process::id(),
        CLUSTERS.fetch_add(1, Ordering::Relaxed)
    )
}

/// The command-line arguments that make a server a cluster node named
/// `node` of `cluster_name`, routing to `seed_route_port` (node 1's) if given.
pub fn cluster_args(node: &str, cluster_name: &str, seed_route_port: Option<u16>) -> Vec<String> {
    let mut args = vec![
        "-n".to_string(),
        node.to_string(),
        "--cluster".to_string(),
        "nats://127.0.0.1:-1".to_string(),
        "--cluster_name".to_string(),
        cluster_name.to_string(),
    ];
    if let Some(port) = seed_route_port {
        args.push("--routes".to_string());
        args.push(format!("nats://127.0.0.1:{port}"));
    }
    args
}

/// Starts one cluster node: `options` with the cluster arguments put before
/// its own `extra_args`.
fn start_node(
    flavor: Flavor,
    options: &Options,
    node: &str,
    cluster_name: &str,
    seed_route_port: Option<u16>,
) -> Server {
    let mut options = options.clone();
    let mut args = cluster_args(node, cluster_name, seed_route_port);
    args.append(&mut options.extra_args);
    options.extra_args = args;
    Server::start(flavor, options)
}

/// A port nothing listens on now, below the kernel's ephemeral range
/// (32768 and up here): a port the kernel hands out meanwhile, to another
/// test's server started with `-p -1` or to a client, can then never be
/// the one chosen for a route, which every node is told before it binds.
/// Each call in this process takes the next port of 10000..32000 from a
/// start spread by the process id, checked free by binding it.
pub fn free_port() -> u16 {
    const FIRST: u32 = 10_000;
    const COUNT: u32 = 22_000;
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let start = (std::process::id() * 7919) % COUNT;
    for _ in 0..COUNT {
        let offset = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = (FIRST + (start + offset) % COUNT) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + COUNT);
}

/// Waits (bounded by [`TIMEOUT`]) until `server` has logged `Listening for
/// route connections on HOST:PORT` (a server logs it after its client
/// port), and returns the port. Panics with the log if it never does.
pub fn wait_route_port(server: &mut Server, node: &str) -> u16 {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(port) = server.route_port() {
            return port;
        }
        if !server.is_running() {
            panic!(
                "{} {node} exited before logging its route port; stderr:\n{}",
                server.flavor.name(),
                server.log_tail()
            );
        }
        if Instant::now() >= deadline {
            panic!(
                "{} {node} never logged `Listening for route connections on` within {TIMEOUT:?}; stderr:\n{}",
                server.flavor.name(),
                server.log_tail()
            );
        }
        // Poll interval of a bounded wait.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (bounded by `timeout`) until `server`'s stderr (its last lines)
/// contains `needle`; panics with the log if it does not.
pub async fn wait_log(server: &Server, what: &str, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let log = server.log_tail();
        if log.contains(needle) {
            return;
        }
        if Instant::now() >= deadline {
            panic!(
                "{}: {what}'s log has no {needle:?} after {timeout:?}; stderr:\n{log}",
                server.flavor.name()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A server's `/routez`.
pub fn routez(server: &Server) -> serde_json::Value {
    server.http_json("/routez")
}

/// The distinct `remote_id`s of a `/routez` (nats-server pools several
/// connections per peer; tern opens one per shard).
pub fn remote_ids(routez: &serde_json::Value) -> BTreeSet<String> {
    routez["routes"]
        .as_array()
        .map(|routes| {
            routes
                .iter()
                .filter_map(|route| route["remote_id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The distinct `remote_name`s of a `/routez`.
pub fn remote_names(routez: &serde_json::Value) -> BTreeSet<String> {
    routez["routes"]
        .as_array()
        .map(|routes| {
            routes
                .iter()
                .filter_map(|route| route["remote_name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A server's id, as its `/routez` reports it.
pub fn server_id(server: &Server) -> String {
    let routez = routez(server);
    routez["server_id"]
        .as_str()
        .unwrap_or_else(|| {
            panic!(
                "{}: /routez has no server_id: {routez:#}",
                server.flavor.name()
            )
        })
        .to_string()
}

/// A cluster of `N` nodes; dropping it SIGKILLs every node.
pub struct Cluster {
    pub flavor: Flavor,
    /// `--cluster_name` of every node.
    pub name: String,
    options: Options,
    nodes: Vec<Server>,
    alive: Vec<bool>,
    /// The route port of each node, as logged.
    route_ports: Vec<u16>,
}

impl Cluster {
    /// Starts `nodes` nodes (see the module doc); does not wait for the
    /// routes: call [`Cluster::wait_formed`] (or use [`Cluster::formed`]).
    /// tern's shard count comes from `options.shards` (default 2).
    pub fn start(flavor: Flavor, nodes: usize, options: Options) -> Cluster {
        assert!(nodes >= 1, "a cluster has at least one node");
        let name = unique_cluster_name(flavor);
        let mut first = start_node(flavor, &options, "n1", &name, None);
        let seed = wait_route_port(&mut first, "n1");
        let mut cluster = Cluster {
            flavor,
            name,
            options,
            nodes: vec![first],
            alive: vec![true],
            route_ports: vec![seed],
        };
        for number in 2..=nodes {
            let node = format!("n{number}");
            let mut server = start_node(flavor, &cluster.options, &node, &cluster.name, Some(seed));
            let port = wait_route_port(&mut server, &node);
            cluster.nodes.push(server);
            cluster.alive.push(true);
            cluster.route_ports.push(port);
        }
        cluster
    }

    /// Starts `nodes` nodes that each list every node in `--routes` on
    /// route ports picked up front (what clustered JetStream asks of an
    /// operator: the meta group's voters are the configured nodes; a
    /// restarted node keeps its route port). Waits for the routes.
    pub async fn meshed(flavor: Flavor, nodes: usize, options: Options) -> Cluster {
        Cluster::meshed_with(flavor, nodes, |_| options.clone()).await
    }

    /// [`Cluster::meshed`] with node `n`'s options from `options_of(n)`
    /// (1-based; e.g. each node's own raw journal device).
    pub async fn meshed_with(
        flavor: Flavor,
        nodes: usize,
        options_of: impl Fn(usize) -> Options,
    ) -> Cluster {
        assert!(nodes >= 1, "a cluster has at least one node");
        let options = options_of(1);
        let name = unique_cluster_name(flavor);
        let ports: Vec<u16> = (0..nodes).map(|_| free_port()).collect();
        let routes = ports
            .iter()
            .map(|port| format!("nats://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            flavor,
            name,
            options,
            nodes: Vec::new(),
            alive: Vec::new(),
            route_ports: Vec::new(),
        };
        for (index, port) in ports.iter().enumerate() {
            let node = format!("n{}", index + 1);
            let mut options = options_of(index + 1);
            let mut args = vec![
                "-n".to_string(),
                node.clone(),
                "--cluster".to_string(),
                format!("nats://127.0.0.1:{port}"),
                "--cluster_name".to_string(),
                cluster.name.clone(),
                "--routes".to_string(),
                routes.clone(),
            ];
            args.append(&mut options.extra_args);
            options.extra_args = args;
            let mut server = Server::start(flavor, options);
            let logged = wait_route_port(&mut server, &node);
            assert_eq!(logged, *port, "{node} listens for routes where it was told");
            cluster.nodes.push(server);
            cluster.alive.push(true);
            cluster.route_ports.push(*port);
        }
        cluster.wait_formed().await;
        cluster
    }

    /// SIGKILLs `node` and starts it again on its data, with its
    /// arguments (its route port too); does not wait for the routes.
    pub fn restart(&mut self, node: usize) {
        let index = self.index(node);
        self.nodes[index].restart_in_place();
        wait_route_port(&mut self.nodes[index], &format!("n{node}"));
        self.alive[index] = true;
    }

    /// [`Cluster::start`], then [`Cluster::wait_formed`].
    pub async fn formed(flavor: Flavor, nodes: usize, options: Options) -> Cluster {
        let cluster = Cluster::start(flavor, nodes, options);
        cluster.wait_formed().await;
        cluster
    }

    /// Number of nodes started (killed ones included).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    fn index(&self, node: usize) -> usize {
        assert!(
            (1..=self.nodes.len()).contains(&node),
            "node {node} of a {}-node cluster (nodes count from 1)",
            self.nodes.len()
        );
        node - 1
    }

    /// Node `node` (from 1).
    pub fn node(&self, node: usize) -> &Server {
        &self.nodes[self.index(node)]
    }

    pub fn node_mut(&mut self, node: usize) -> &mut Server {
        let index = self.index(node);
        &mut self.nodes[index]
    }

    /// The options every node was started with (before the cluster arguments).
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// `nats://127.0.0.1:<client port>` of `node`.
    pub fn url(&self, node: usize) -> String {
        self.node(node).url()
    }

    /// Every node's client URL, node 1 first.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// `127.0.0.1:<client port>`, as `connect_urls` lists it.
    pub fn client_address(&self, node: usize) -> String {
        format!("127.0.0.1:{}", self.node(node).client_port())
    }

    /// The route port `node` logged.
    pub fn route_port(&self, node: usize) -> u16 {
        self.route_ports[self.index(node)]
    }

    /// An async-nats client on `node` that stays there: it ignores the other
    /// nodes the server advertises (`connect_urls`), so it never fails
    /// over (and resubscribes) elsewhere when its node goes away.
    pub async fn connect(&self, node: usize) -> async_nats::Client {
        self.node(node)
            .connect_with(async_nats::ConnectOptions::new().ignore_discovered_servers())
            .await
    }

    /// SIGKILLs `node` (by pid) and waits for it to be gone.
    pub fn kill(&mut self, node: usize) {
        let index = self.index(node);
        self.nodes[index].kill();
        self.alive[index] = false;
    }

    /// SIGTERMs `node` (by pid) and waits (bounded) for it to exit.
    pub fn stop(&mut self, node: usize) {
        let index = self.index(node);
        self.nodes[index].stop_gracefully();
        self.alive[index] = false;
    }

    /// SIGKILLs `node` (if it still runs) and starts a fresh server in its
    /// place, as an operator replacing a crashed machine would: the same
    /// name `n<node>`, the cluster's options, a new directory (so a new
    /// server id) and, ports being random, new ports; `--routes` to the
    /// lowest-numbered other live node (node 1 unless node 1 is the one
    /// replaced). Returns once it has logged its route port; does not wait
    /// for the routes (see [`Cluster::wait_formed`]).
    pub fn replace(&mut self, node: usize) {
        let index = self.index(node);
        self.nodes[index].kill();
        self.alive[index] = false;
        let seed = self
            .alive_nodes()
            .into_iter()
            .next()
            .map(|other| self.route_port(other));
        let name = format!("n{node}");
        let mut server = start_node(self.flavor, &self.options, &name, &self.name, seed);
        let port = wait_route_port(&mut server, &name);
        // Drops (and so reaps) the killed server and its directory.
        self.nodes[index] = server;
        self.alive[index] = true;
        self.route_ports[index] = port;
    }

    pub fn is_alive(&self, node: usize) -> bool {
        self.alive[self.index(node)]
    }

    /// Node numbers not killed or stopped.
    pub fn alive_nodes(&self) -> Vec<usize> {
        (1..=self.nodes.len())
            .filter(|&node| self.alive[node - 1])
            .collect()
    }

    /// Starts a server that is not part of the cluster's configuration but
    /// routes to node 1: named `node`, with `cluster_name` and `options` of
    /// its own (a stranger the cluster must refuse). Returns once it has
    /// logged its route port.
    pub fn start_joiner(&self, node: &str, cluster_name: &str, options: Options) -> Server {
        let mut server = start_node(
            self.flavor,
            &options,
            node,
            cluster_name,
            Some(self.route_port(1)),
        );
        wait_route_port(&mut server, node);
        server
    }

    /// Every live node's server id (from its `/routez`), by node number.
    pub fn server_ids(&self) -> Vec<(usize, String)> {
        self.alive_nodes()
            .into_iter()
            .map(|node| (node, server_id(self.node(node))))
            .collect()
    }

    /// Why the live nodes' routes do not (yet) form a full mesh, or None if
    /// they do: every live node lists routes to exactly the other live
    /// nodes (distinct `remote_id`s; several connections per peer are fine).
    fn mesh_problem(&self, ids: &[(usize, String)]) -> Option<String> {
        for (node, own_id) in ids {
            let routez = routez(self.node(*node));
            let expected: BTreeSet<String> = ids
                .iter()
                .filter(|(_, id)| id != own_id)
                .map(|(_, id)| id.clone())
                .collect();
            let found = remote_ids(&routez);
            if found != expected {
                return Some(format!(
                    "node {node} ({own_id}) routes to {found:?}, expected {expected:?}; its /routez:\n{routez:#}"
                ));
            }
        }
        None
    }

    /// Waits (bounded by [`TIMEOUT`]) until every live node has routes to
    /// every other live node and to nothing else; panics with the /routez
    /// that is not there yet.
    pub async fn wait_formed(&self) {
        let ids = self.server_ids();
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let Some(problem) = self.mesh_problem(&ids) else {
                return;
            };
            if Instant::now() >= deadline {
                panic!(
                    "{}: cluster {} ({} live nodes) not formed within {TIMEOUT:?}: {problem}\n{}",
                    self.flavor.name(),
                    self.name,
                    ids.len(),
                    self.logs()
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Asserts (now, no waiting) that the live nodes form a full mesh and
    /// route to nothing else.
    pub fn assert_formed(&self) {
        let ids = self.server_ids();
        if let Some(problem) = self.mesh_problem(&ids) {
            panic!(
                "{}: cluster {}: {problem}\n{}",
                self.flavor.name(),
                self.name,
                self.logs()
            );
        }
    }

    /// Every node's last stderr lines, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(index, server)| format!("--- n{} stderr:\n{}", index + 1, server.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Waits (bounded by [`TIMEOUT`]) until messages `publisher` publishes on
/// `subject` reach every one of `subscribers` (each must match `subject`),
/// and leaves no probe behind in them.
///
/// Publishes [`PROBE`] every 25 ms until each subscription has received
/// one, then [`PROBE_END`] once, and consumes every subscription up to its
/// `PROBE_END` (one publisher's messages arrive in order, so any probe
/// still on its way comes before it). Any other message on the way panics:
/// nothing but probes may be published on `subject` meanwhile. Other
/// subscriptions matching `subject` also get the probes.
pub async fn wait_interest_all(
    publisher: &async_nats::Client,
    subject: &str,
    subscribers: &mut [&mut async_nats::Subscriber],
) {
    let deadline = Instant::now() + TIMEOUT;
    let mut probes = 0u64;
    for (number, subscriber) in subscribers.iter_mut().enumerate() {
        loop {
            probes += 1;
            publisher
                .publish(subject.to_string(), PROBE.into())
                .await
                .expect("probe publish");
            flush(publisher).await;
            // Poll interval of a bounded wait: each probe gets 25 ms to arrive.
            match tokio::time::timeout(Duration::from_millis(25), subscriber.next()).await {
                Ok(Some(message)) if &message.payload[..] == PROBE => break,
                Ok(Some(message)) => panic!(
                    "subscription {number}: unexpected {:?} on {} while probing {subject}",
                    message.payload, message.subject
                ),
                Ok(None) => panic!("subscription {number} ended while probing {subject}"),
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                panic!(
                    "subscription {number}'s interest in {subject} never reached the publisher's node within {TIMEOUT:?} ({probes} probes)"
                );
            }
        }
    }
    publisher
        .publish(subject.to_string(), PROBE_END.into())
        .await
        .expect("probe end publish");
    flush(publisher).await;
    for (number, subscriber) in subscribers.iter_mut().enumerate() {
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let message = match tokio::time::timeout(remaining.max(POLL), subscriber.next()).await {
                Ok(Some(message)) => message,
                Ok(None) => panic!("subscription {number} ended while draining probes"),
                Err(_) => panic!("subscription {number}: no {PROBE_END:?} within {TIMEOUT:?}"),
            };
            match &message.payload[..] {
                payload if payload == PROBE_END => break,
                payload if payload == PROBE => {}
                payload => panic!(
                    "subscription {number}: unexpected {payload:?} on {} while draining probes",
                    message.subject
                ),
            }
        }
    }
}

/// [`wait_interest_all`] for one subscription.
pub async fn wait_interest(
    publisher: &async_nats::Client,
    subject: &str,
    subscriber: &mut async_nats::Subscriber,
) {
    wait_interest_all(publisher, subject, &mut [subscriber]).await;
}

/// One request with its own (short) timeout.
pub async fn request_within(
    requester: &async_nats::Client,
    subject: &str,
    payload: &[u8],
    timeout: Duration,
) -> Result<async_nats::Message, async_nats::RequestError> {
    let request = async_nats::Request::new()
        .payload(payload.to_vec().into())
        .timeout(Some(timeout));
    requester.send_request(subject.to_string(), request).await
}

/// Retries a request (payload [`PROBE`], 250 ms each) until a reply comes
/// back, bounded by [`TIMEOUT`]: the responder's subscription is known on
/// the requester's node and the requester's reply inbox on the
/// responder's. Returns the reply, or why there was none.
pub async fn try_wait_responder(
    requester: &async_nats::Client,
    subject: &str,
) -> Result<async_nats::Message, String> {
    let deadline = Instant::now() + TIMEOUT;
    let mut attempts = 0u64;
    loop {
        attempts += 1;
        let outcome = request_within(requester, subject, PROBE, Duration::from_millis(250)).await;
        match outcome {
            Ok(reply) => return Ok(reply),
            Err(error) => {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "no reply on {subject} within {TIMEOUT:?} ({attempts} requests, last: {error})"
                    ));
                }
                if error.kind() == async_nats::client::RequestErrorKind::NoResponders {
                    // Poll interval: the responder is not known here yet.
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    }
}

/// Retries a request (250 ms each) until it fails with no responders,
/// bounded by [`TIMEOUT`]: the requester's node knows no responder any
/// more. Err says what the last request got instead.
pub async fn try_wait_no_responders(
    requester: &async_nats::Client,
    subject: &str,
) -> Result<(), String> {
    let deadline = Instant::now() + TIMEOUT;
    let mut attempts = 0u64;
    loop {
        attempts += 1;
        let outcome = request_within(requester, subject, PROBE, Duration::from_millis(250)).await;
        let last = match outcome {
            Err(error) if error.kind() == async_nats::client::RequestErrorKind::NoResponders => {
                return Ok(())
            }
            Err(error) => error.to_string(),
            Ok(reply) => format!("a reply {:?}", reply.payload),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "requests on {subject} still do not fail with no responders after {TIMEOUT:?} ({attempts} requests, last: {last})"
            ));
        }
        // Poll interval of a bounded wait.
        tokio::time::sleep(POLL).await;
    }
}

impl Cluster {
    /// [`try_wait_responder`]; panics with every node's log if no reply comes.
    pub async fn wait_responder(
        &self,
        requester: &async_nats::Client,
        subject: &str,
    ) -> async_nats::Message {
        match try_wait_responder(requester, subject).await {
            Ok(reply) => reply,
            Err(problem) => panic!("{}: {problem}\n{}", self.flavor.name(), self.logs()),
        }
    }

    /// [`try_wait_no_responders`]; panics with every node's log if
    /// requests keep getting something else.
    pub async fn wait_no_responders(&self, requester: &async_nats::Client, subject: &str) {
        if let Err(problem) = try_wait_no_responders(requester, subject).await {
            panic!("{}: {problem}\n{}", self.flavor.name(), self.logs());
        }
    }
}
