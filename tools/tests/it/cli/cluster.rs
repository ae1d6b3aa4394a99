//! The CLI against a 3-node cluster of each server (JetStream on): the
//! users' `stream add ORDERS … --replicas 3` line, 100 acknowledged
//! publishes, `stream info --json` with a leader and two replicas, `server
//! check cluster` OK with every node present and every replica current,
//! `server ls` and `server report jetstream` over the three nodes, then a
//! follower SIGKILLed and `server check cluster` naming it.
//!
//! The cluster is started as the broker's tests start theirs
//! (`broker/tests/it/common/cluster.rs`, `Cluster::meshed`): route ports
//! picked up front, every node listing every node in `--routes`. Every
//! wait is a bounded poll.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{on_both_flavors, Flavor, Run, Server};

/// Bound on the cluster electing its leaders and its replicas catching up.
pub(super) const CONVERGE: Duration = Duration::from_secs(20);
/// Poll interval of the bounded waits below.
const POLL: Duration = Duration::from_millis(50);
const NODES: usize = 3;

/// A port nothing listens on now, below the kernel's ephemeral range
/// (32768 and up), so no server started with `-p -1` meanwhile takes the
/// route port every node is told before the node binds it. Each call
/// takes the next port of 10000..32000 from a start spread by the
/// process id, checked free by binding it.
fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 10_000;
    const COUNT: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = (std::process::id() * 7919) % COUNT;
    for _ in 0..COUNT {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (FIRST + (start + offset) % COUNT) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + COUNT);
}

/// Nodes `n1`..`nN` of one cluster (three unless asked), each routing to
/// all. Dropping it kills every node (by PID).
pub struct Cluster {
    nodes: Vec<Server>,
}

impl Cluster {
    pub fn start(flavor: Flavor) -> Cluster {
        Cluster::start_with(flavor, "")
    }

    /// [`Cluster::start`], with `extra` appended to every node's config
    /// file (TLS, authorization, …).
    pub fn start_with(flavor: Flavor, extra: &str) -> Cluster {
        Cluster::start_nodes(flavor, extra, NODES)
    }

    /// `count` nodes `n1`..`nN`, each routing to all, with `extra` in
    /// every node's config file.
    pub fn start_nodes(flavor: Flavor, extra: &str, count: usize) -> Cluster {
        // A cluster name no other cluster of this run uses.
        static CLUSTERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let serial = CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("cli-{flavor:?}-{}-{serial}", std::process::id());
        let ports: Vec<u16> = (0..count).map(|_| free_port()).collect();
        let routes = ports
            .iter()
            .map(|port| format!("nats://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let nodes = ports
            .iter()
            .enumerate()
            .map(|(index, port)| {
                let args = [
                    "-n".to_string(),
                    format!("n{}", index + 1),
                    "--cluster".to_string(),
                    format!("nats://127.0.0.1:{port}"),
                    "--cluster_name".to_string(),
                    name.clone(),
                    "--routes".to_string(),
                    routes.clone(),
                ];
                Server::start_node(flavor, extra, &args)
            })
            .collect();
        Cluster { nodes }
    }

    /// Node `number` (from 1).
    pub fn node(&self, number: usize) -> &Server {
        &self.nodes[number - 1]
    }

    /// SIGKILLs node `number` (by its PID).
    pub fn kill(&mut self, number: usize) {
        self.nodes[number - 1].kill();
    }

    /// Every node's monitoring URL, comma separated, node 1 first.
    pub fn monitors(&self) -> String {
        self.nodes
            .iter()
            .map(Server::monitor_url)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Runs `args` through node 1 until it answers something else than
/// "JetStream not available yet" (503, no responders, a timeout while the
/// meta group elects), bounded by [`CONVERGE`].
fn when_ready(cluster: &Cluster, args: &[&str]) -> Run {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let run = cluster.node(1).tern(&[&["--timeout", "2s"], args].concat());
        let waiting = run.code != Some(0)
            && ["code 503", "no responders", "no answer within", "timed out"]
                .iter()
                .any(|sign| run.stderr.to_lowercase().contains(sign));
        if !waiting {
            return run;
        }
        assert!(Instant::now() < deadline, "never ready: {args:?}: {run:?}");
        std::thread::sleep(POLL);
    }
}

/// `server check cluster --json` through `monitor`, polled (bounded by
/// [`CONVERGE`]) until `done` holds; the last verdict.
fn check_until(server: &Server, monitor: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let run = server.tern(&[
            "server",
            "check",
            "cluster",
            "--monitor",
            monitor,
            "--expect",
            "3",
            "--json",
        ]);
        let verdict: Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {run:?}"));
        assert_eq!(
            run.code.map(Value::from),
            Some(verdict["exit_code"].clone())
        );
        if done(&verdict) {
            return verdict;
        }
        assert!(Instant::now() < deadline, "last verdict: {verdict}");
        std::thread::sleep(POLL);
    }
}

/// The node number in a name `nN`.
fn number(name: &str) -> usize {
    name.trim_start_matches('n')
        .parse()
        .expect("a node name nN")
}

/// The node named after `meta leader ` in a cluster verdict's message.
fn meta_leader(verdict: &Value) -> usize {
    let message = verdict["message"].as_str().unwrap_or("");
    let rest = &message[message.find("meta leader ").expect("a meta leader") + 12..];
    number(rest.split(',').next().unwrap_or(""))
}

fn replicated_stream(flavor: Flavor) {
    let started = Instant::now();
    let mut cluster = Cluster::start(flavor);
    let created = when_ready(
        &cluster,
        &[
            "stream",
            "add",
            "ORDERS",
            "--subjects",
            "orders.>",
            "--max-age",
            "30d",
            "--max-bytes",
            "500GB",
            "--storage",
            "file",
            "--replicas",
            "3",
            "--defaults",
            "--json",
        ],
    )
    .json();
    assert_eq!(
        created["config"]["num_replicas"], 3,
        "{flavor:?}: {created}"
    );
    assert_eq!(created["config"]["max_bytes"], 500u64 << 30);

    let node1 = cluster.node(1);
    let published = node1.tern(&["pub", "orders.new", "order {{Count}}", "--count", "100"]);
    published.ok();
    assert!(
        published
            .stderr
            .contains("each acknowledged; last stored in Stream: ORDERS Sequence: 100"),
        "{flavor:?}: {published:?}"
    );

    // The leader's view: the two others, current once they have it all.
    let deadline = Instant::now() + CONVERGE;
    let info = loop {
        let info = when_ready(&cluster, &["stream", "info", "ORDERS", "--json"]).json();
        let replicas = info["cluster"]["replicas"].as_array().cloned();
        let current = replicas.as_ref().is_some_and(|replicas| {
            replicas.len() == 2 && replicas.iter().all(|replica| replica["current"] == true)
        });
        if info["cluster"]["leader"].is_string() && current {
            break info;
        }
        assert!(Instant::now() < deadline, "{flavor:?}: {info}");
        std::thread::sleep(POLL);
    };
    assert_eq!(info["state"]["messages"], 100, "{flavor:?}: {info}");
    let leader = info["cluster"]["leader"].as_str().unwrap().to_string();
    let mut names: Vec<&str> = info["cluster"]["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|replica| replica["name"].as_str().unwrap_or(""))
        .chain([leader.as_str()])
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["n1", "n2", "n3"], "{flavor:?}: {info}");

    // Every node's view: each group is judged from its leader's.
    let monitors = cluster.monitors();
    let healthy = check_until(node1, &monitors, |verdict| verdict["exit_code"] == 0);
    let meta = meta_leader(&healthy);
    let message = healthy["message"].as_str().unwrap();
    assert!(
        message.contains(": 3 of 3 nodes present, meta leader n")
            && message.contains("1 replicated"),
        "{flavor:?}: {healthy}"
    );

    let ls = node1.tern(&["server", "ls", "--monitor", &monitors]);
    let rows: Vec<&str> = ls.ok().lines().skip(1).collect();
    assert_eq!(rows.len(), NODES, "{flavor:?}: {ls:?}");
    for name in ["n1", "n2", "n3"] {
        assert!(
            rows.iter()
                .any(|row| row.split_whitespace().next() == Some(name)),
            "{flavor:?}: no row for {name}: {ls:?}"
        );
    }

    let leader_monitor = cluster.node(number(&leader)).monitor_url();
    let report = node1
        .tern(&[
            "server",
            "report",
            "jetstream",
            "--monitor",
            &leader_monitor,
            "--json",
        ])
        .json();
    let orders = report
        .as_array()
        .and_then(|streams| streams.iter().find(|stream| stream["name"] == "ORDERS"))
        .unwrap_or_else(|| panic!("{flavor:?}: no ORDERS: {report}"));
    assert_eq!(
        (
            orders["replicas"].clone(),
            orders["leader"].as_str(),
            orders["messages"].clone()
        ),
        (Value::from(3), Some(leader.as_str()), Value::from(100)),
        "{flavor:?}: {orders}"
    );
    let mut followers: Vec<&str> = orders["followers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|replica| replica["name"].as_str().unwrap_or(""))
        .collect();
    followers.sort_unstable();
    let mut expected: Vec<&str> = ["n1", "n2", "n3"]
        .into_iter()
        .filter(|name| *name != leader)
        .collect();
    expected.sort_unstable();
    assert_eq!(followers, expected, "{flavor:?}: {orders}");

    // A node leading neither the stream nor the meta group goes away.
    let victim = (1..=NODES)
        .find(|&node| node != meta && node != number(&leader))
        .expect("three nodes, two leaders at most");
    cluster.kill(victim);
    let victim_name = format!("n{victim}");
    let node = cluster.node(meta);
    let down = check_until(node, &monitors, |verdict| {
        verdict["exit_code"] != 0
            && verdict["message"]
                .as_str()
                .is_some_and(|message| message.contains(&format!("node {victim_name} ")))
    });
    assert!(
        matches!(down["status"].as_str(), Some("WARNING" | "CRITICAL")),
        "{flavor:?}: {down}"
    );
    let victim_monitor = cluster.node(victim).monitor_url();
    assert!(
        down["message"]
            .as_str()
            .unwrap()
            .contains(&format!("monitor {victim_monitor} unreachable")),
        "{flavor:?}: {down}"
    );
    eprintln!("{flavor:?}: 3-node cluster test in {:?}", started.elapsed());
}

#[test]
fn stream_on_a_three_node_cluster_and_a_node_lost() {
    on_both_flavors(replicated_stream);
}

/// nats-server takes `SERVER.REMOVE` and `META.LEADER.STEPDOWN` only from
/// its system account: `sys` is in it, and a client without credentials
/// is `app` of an account with JetStream. (tern has no accounts yet and
/// takes them from anyone.)
const NATS_SYSTEM_ACCOUNT: &str = "accounts {
  SYS { users = [{user: sys, password: sys}] }
  APP { jetstream: enabled, users = [{user: app, password: app}] }
}
system_account: SYS
no_auth_user: app
";

/// `GET /jsz` of `server` (HTTP/1.0, plain TCP), parsed.
fn jsz(server: &Server) -> Value {
    use std::io::{Read, Write};
    let address = server.monitor_url().replace("http://", "");
    let mut stream = std::net::TcpStream::connect(&address).expect("connect to the monitor");
    stream
        .set_read_timeout(Some(super::TIMEOUT))
        .expect("read timeout");
    stream
        .write_all(format!("GET /jsz HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .expect("send GET /jsz");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read /jsz");
    let body = &answer[answer.find("\r\n\r\n").expect("an HTTP answer") + 4..];
    serde_json::from_str(body).unwrap_or_else(|error| panic!("/jsz not JSON ({error}): {answer}"))
}

/// `args` through `server` until it answers something else than
/// "JetStream not available yet" (as [`when_ready`]).
fn when_ready_on(server: &Server, args: &[&str]) -> Run {
    let deadline = Instant::now() + CONVERGE;
    loop {
        let run = server.tern(&[&["--timeout", "2s"], args].concat());
        let waiting = run.code != Some(0)
            && ["code 503", "no responders", "no answer within", "timed out"]
                .iter()
                .any(|sign| run.stderr.to_lowercase().contains(sign));
        if !waiting {
            return run;
        }
        assert!(Instant::now() < deadline, "never ready: {args:?}: {run:?}");
        std::thread::sleep(POLL);
    }
}

/// Polls `probe` until it returns something, bounded by [`CONVERGE`].
fn eventually<T>(what: &str, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + CONVERGE;
    loop {
        match probe() {
            Ok(value) => return value,
            Err(last) => assert!(Instant::now() < deadline, "{what}: {last}"),
        }
        std::thread::sleep(POLL);
    }
}

fn peer_remove(flavor: Flavor) {
    const FOUR: usize = 4;
    let started = Instant::now();
    let extra = match flavor {
        Flavor::Tern => "",
        Flavor::Nats => NATS_SYSTEM_ACCOUNT,
    };
    let mut cluster = Cluster::start_nodes(flavor, extra, FOUR);
    let system: &[&str] = match flavor {
        Flavor::Tern => &[],
        Flavor::Nats => &["--user", "sys", "--password", "sys"],
    };
    let admin = |server: &Server, args: &[&str]| server.tern(&[system, args].concat());

    let created = when_ready(
        &cluster,
        &[
            "stream",
            "add",
            "ORDERS",
            "--subjects",
            "orders.>",
            "--replicas",
            "3",
            "--defaults",
            "--json",
        ],
    );
    assert_eq!(created.json()["config"]["num_replicas"], 3, "{flavor:?}");
    cluster
        .node(1)
        .tern(&["pub", "orders.new", "order {{Count}}", "--count", "20"])
        .ok();

    // The meta group of four, and the stream's leader and followers.
    let meta_leader = eventually("a meta leader of four voters", || {
        let meta = jsz(cluster.node(1))["meta_cluster"].clone();
        match (meta["leader"].as_str(), meta["cluster_size"].as_u64()) {
            (Some(leader), Some(4)) if !leader.is_empty() => Ok(number(leader)),
            _ => Err(format!("{flavor:?}: {meta}")),
        }
    });
    let leader_node = cluster.node(meta_leader);
    let info = when_ready_on(leader_node, &["stream", "info", "ORDERS", "--json"]).json();
    let stream_leader = info["cluster"]["leader"].as_str().map(number);
    let victim = info["cluster"]["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|replica| replica["name"].as_str().map(number))
        .find(|&node| node != meta_leader && Some(node) != stream_leader)
        .unwrap_or_else(|| panic!("{flavor:?}: no follower outside the meta leader: {info}"));
    let victim_name = format!("n{victim}");
    // Its peer id as the meta leader shows it (what the nats CLI sends).
    let victim_id = eventually("the victim's peer id", || {
        let meta = jsz(leader_node)["meta_cluster"].clone();
        meta["replicas"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|replica| replica["name"] == victim_name.as_str())
            .and_then(|replica| replica["peer"].as_str().map(str::to_string))
            .ok_or_else(|| format!("{flavor:?}: {meta}"))
    });

    // Refused before anything is sent: no --force, an unknown server.
    let unforced = admin(
        leader_node,
        &["server", "raft", "peer-remove", &victim_name],
    );
    assert_eq!(
        unforced.one_line_error(1),
        format!(
            "tern: server cluster peer-remove {victim_name}: refusing without --force (-f): tern never prompts"
        ),
        "{flavor:?}"
    );
    let unknown = admin(leader_node, &["server", "raft", "peer-remove", "n9", "-f"]);
    assert_eq!(
        unknown.one_line_error(1),
        "tern: server cluster peer-remove n9: server is not a member of the cluster (code 400, err_code 10044)",
        "{flavor:?}"
    );

    // nats-server ignores the request from outside its system account;
    // tern-server takes it from anyone.
    if flavor == Flavor::Nats {
        let ignored = leader_node.tern(&["--timeout", "1s", "server", "raft", "rm", "n9", "-f"]);
        assert_eq!(
            ignored.one_line_error(1),
            "tern: server cluster peer-remove n9: no answer within 1s: did not receive a response from the meta leader, ensure the account used has system privileges and appropriate permissions",
        );
    }

    // The host dies; it is removed by its peer id.
    cluster.kill(victim);
    let leader_node = cluster.node(meta_leader);
    let removed = eventually("the removal answered", || {
        let run = admin(
            leader_node,
            &["server", "cluster", "peer-remove", &victim_id, "-f", "-j"],
        );
        match run.code {
            Some(0) => Ok(run),
            _ if run.stderr.contains("err_code 10202") || run.stderr.contains("code 503") => {
                Err(format!("{flavor:?}: {run:?}"))
            }
            _ => panic!("{flavor:?}: {run:?}"),
        }
    });
    assert_eq!(
        removed.json(),
        serde_json::json!({"success": true}),
        "{flavor:?}"
    );
    let live: Vec<usize> = (1..=FOUR).filter(|&node| node != victim).collect();
    for &node in &live {
        eventually("three voters", || {
            let meta = jsz(cluster.node(node))["meta_cluster"].clone();
            match meta["cluster_size"].as_u64() {
                Some(3) => Ok(()),
                _ => Err(format!("{flavor:?}: n{node}: {meta}")),
            }
        });
    }

    // The stream's replica moved to the fourth node and caught up.
    let moved = eventually("the stream on three live nodes", || {
        let info = when_ready_on(leader_node, &["stream", "info", "ORDERS", "--json"]).json();
        let replicas = info["cluster"]["replicas"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let fine = info["cluster"]["leader"].is_string()
            && replicas.len() == 2
            && replicas.iter().all(|replica| {
                replica["current"] == true && replica["name"] != victim_name.as_str()
            });
        if fine {
            Ok(info)
        } else {
            Err(format!("{flavor:?}: {info}"))
        }
    });
    assert_eq!(moved["state"]["messages"], 20, "{flavor:?}: {moved}");
    let monitors = live
        .iter()
        .map(|&node| cluster.node(node).monitor_url())
        .collect::<Vec<_>>()
        .join(",");
    check_until(leader_node, &monitors, |verdict| verdict["exit_code"] == 0);

    // Gone for good: a second removal does not find it.
    let again = admin(leader_node, &["server", "raft", "rm", &victim_name, "-f"]);
    assert_eq!(
        again.one_line_error(1),
        format!(
            "tern: server cluster peer-remove {victim_name}: server is not a member of the cluster (code 400, err_code 10044)"
        ),
        "{flavor:?}"
    );

    // The meta leader steps down; the monitors show who follows.
    let stepped = admin(
        leader_node,
        &["server", "raft", "step-down", "--monitor", &monitors],
    );
    let lines: Vec<&str> = stepped.ok().lines().collect();
    assert_eq!(lines.len(), 2, "{flavor:?}: {stepped:?}");
    assert_eq!(
        lines[0],
        format!("Requesting leader step down of \"n{meta_leader}\" in a 3 peer RAFT group"),
        "{flavor:?}"
    );
    assert!(
        lines[1].starts_with("New leader elected \"n")
            && !lines[1].contains(&format!("\"n{meta_leader}\"")),
        "{flavor:?}: {stepped:?}"
    );
    eprintln!(
        "{flavor:?}: 4-node peer-remove test in {:?}",
        started.elapsed()
    );
}

#[test]
fn peer_remove_of_a_dead_node_from_a_four_node_cluster() {
    on_both_flavors(peer_remove);
}
