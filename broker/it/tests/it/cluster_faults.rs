//! A cluster through faults, against tern-server and nats-server alike: a
//! node SIGKILLed and replaced by a fresh one of the same name (new server
//! id, new ports) that the others take back, and a node that stops reading
//! (SIGSTOP) while node 1 floods it: node 1 says so in its log (tern drops
//! the route, nats-server reports a slow consumer on it and keeps it), stays
//! up with bounded memory while nodes 1 and 2 keep serving each other, and
//! the cluster forms again once the node runs again.
//!
//! Clusters are started as in [`crate::cluster_core`] (one `--routes` to
//! node 1, the rest by gossip); every wait is a bounded poll.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::{remote_names, routez, server_id, wait_interest, Cluster};
use common::{flush, next_message, subject, sync_interest, Flavor, Options, TIMEOUT};

use crate::cluster_core::{check_pub_sub, check_queue_group, spawn_responder};

/// Poll interval of the bounded waits below (not synchronisation).
const POLL: Duration = Duration::from_millis(20);

/// Every live node routes to exactly the other live nodes, by name too (a
/// stale route to a replaced node of the same name has another server id,
/// which [`Cluster::wait_formed`] already refuses).
fn assert_names(cluster: &Cluster) {
    for node in cluster.alive_nodes() {
        let routez = routez(cluster.node(node));
        let expected: std::collections::BTreeSet<String> = cluster
            .alive_nodes()
            .into_iter()
            .filter(|&other| other != node)
            .map(|other| format!("n{other}"))
            .collect();
        assert_eq!(
            remote_names(&routez),
            expected,
            "{}: node {node}'s routes by name; its /routez:\n{routez:#}",
            cluster.flavor.name()
        );
    }
}

/// `count` requests from `requester` to the responder on `subject`, each
/// answered `re:<payload>`, once [`Cluster::wait_responder`] got a reply.
async fn check_requests(
    cluster: &Cluster,
    requester: &async_nats::Client,
    subject: &str,
    count: usize,
    what: &str,
) {
    let first = cluster.wait_responder(requester, subject).await;
    assert_eq!(&first.payload[..], b"re:__probe__", "{what}");
    for index in 0..count {
        let payload = format!("r{index}");
        let reply = tokio::time::timeout(
            TIMEOUT,
            requester.request(subject.to_string(), payload.clone().into()),
        )
        .await
        .unwrap_or_else(|_| panic!("{what}: request {payload} not answered within {TIMEOUT:?}"))
        .unwrap_or_else(|error| panic!("{what}: request {payload}: {error}\n{}", cluster.logs()));
        assert_eq!(
            String::from_utf8_lossy(&reply.payload),
            format!("re:{payload}"),
            "{what}"
        );
    }
}

async fn cluster_node_restarts(flavor: Flavor) {
    const TEST: &str = "cluster_node_restarts";
    let mut cluster = Cluster::formed(flavor, 3, Options::default()).await;
    let old_id = server_id(cluster.node(3));

    // A subscription on node 1 made (and processed) before the restart:
    // the new node 3 must be told about it.
    let early_subject = subject(TEST, flavor, "early");
    let on_one = cluster.connect(1).await;
    let mut early = on_one.subscribe(early_subject.clone()).await.unwrap();
    sync_interest(&on_one, &on_one).await;

    cluster.replace(3);
    let new_id = server_id(cluster.node(3));
    assert_ne!(new_id, old_id, "{}: a fresh node 3", flavor.name());
    // Every live node routes to the other two, and nothing else: no route
    // to the killed node 3's server id counts.
    cluster.wait_formed().await;
    assert_names(&cluster);

    // The subscription made before the restart, from the new node 3.
    let on_three = cluster.connect(3).await;
    wait_interest(&on_three, &early_subject, &mut early).await;
    on_three
        .publish(early_subject.clone(), "after".into())
        .await
        .unwrap();
    flush(&on_three).await;
    assert_eq!(
        &next_message(&mut early, TIMEOUT).await.payload[..],
        b"after"
    );

    // Pub/sub between the new node 3 and node 1, both ways.
    check_pub_sub(&cluster, TEST, 3, &[1], 20).await;
    check_pub_sub(&cluster, TEST, 1, &[3], 20).await;

    // Request/reply between them, both ways.
    let to_three = subject(TEST, flavor, "svc3");
    let (_stop3, responder3) = spawn_responder(cluster.connect(3).await, to_three.clone()).await;
    check_requests(
        &cluster,
        &on_one,
        &to_three,
        10,
        &format!("{}: node 1 -> the new node 3", flavor.name()),
    )
    .await;
    let to_one = subject(TEST, flavor, "svc1");
    let (_stop1, responder1) = spawn_responder(cluster.connect(1).await, to_one.clone()).await;
    check_requests(
        &cluster,
        &on_three,
        &to_one,
        10,
        &format!("{}: the new node 3 -> node 1", flavor.name()),
    )
    .await;
    responder3.abort();
    responder1.abort();

    // A queue group spanning the three nodes (two members on each, the
    // publisher on the new node): every message to exactly one member.
    check_queue_group(&cluster, TEST, 3, &[1, 2, 3], 2, Some(1), 300).await;
    cluster.assert_formed();
}
differential!(cluster_node_restarts);

/// A process SIGSTOPped; SIGCONTed when resumed or dropped (a failing
/// test leaves no stopped process behind).
struct Paused {
    pid: libc::pid_t,
    stopped: bool,
}

impl Paused {
    /// SIGSTOPs `pid` and waits (bounded) until the kernel reports it stopped.
    fn stop(pid: u32) -> Paused {
        let pid = pid as libc::pid_t;
        // SAFETY: kill(2) on the pid of a child the harness owns (and reaps
        // only on drop, after this guard is gone).
        let result = unsafe { libc::kill(pid, libc::SIGSTOP) };
        assert_eq!(
            result,
            0,
            "SIGSTOP {pid}: {}",
            std::io::Error::last_os_error()
        );
        let paused = Paused { pid, stopped: true };
        let deadline = Instant::now() + TIMEOUT;
        while process_state(pid) != Some('T') {
            assert!(
                Instant::now() < deadline,
                "process {pid} not stopped {TIMEOUT:?} after SIGSTOP (state {:?})",
                process_state(pid)
            );
            // A bounded poll of the process state.
            std::thread::sleep(Duration::from_millis(1));
        }
        paused
    }

    fn resume(&mut self) {
        if self.stopped {
            self.stopped = false;
            // SAFETY: as in `stop`.
            unsafe { libc::kill(self.pid, libc::SIGCONT) };
        }
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        self.resume();
    }
}

/// The state letter of `/proc/<pid>/stat` (`T` when stopped).
fn process_state(pid: libc::pid_t) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) S ...`: comm may hold spaces and parentheses.
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// A process's resident set size (`VmRSS` of `/proc/<pid>/status`).
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|error| panic!("/proc/{pid}/status: {error}"));
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status:\n{status}"));
    let kib: u64 = line["VmRSS:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("VmRSS line {line:?}"));
    kib * 1024
}

/// The first line of `server`'s log (its last lines) that `wanted` accepts.
fn log_line(server: &common::Server, wanted: impl Fn(&str) -> bool) -> Option<String> {
    server
        .log_tail()
        .lines()
        .find(|line| wanted(line))
        .map(str::to_string)
}

/// Whether `line` of node 1's log says that a route to node 3 (the one
/// stopped) is not read: tern drops it (`the peer is not reading`, its
/// buffer past `max_pending` or one write blocked for `write_deadline`);
/// nats-server logs a slow consumer on a route connection (`rid:`; its
/// lines do not name the peer, and node 3 is the only one not reading).
fn slow_route_line(flavor: Flavor, line: &str) -> bool {
    match flavor {
        Flavor::Tern => line.contains("route to n3 (") && line.contains("the peer is not reading"),
        Flavor::Nats => line.contains(" - rid:") && line.contains("Slow Consumer Detected"),
    }
}

async fn cluster_peer_stops_reading(flavor: Flavor) {
    const TEST: &str = "cluster_peer_stops_reading";
    const MIB: u64 = 1 << 20;
    /// The flood stops here at the latest, line or not.
    const FLOOD_BYTES_MAX: u64 = 200 * MIB;
    const FLOOD_TIME_MAX: Duration = Duration::from_secs(20);
    /// Node 1's resident memory may grow by less than this.
    const GROWTH_MAX: u64 = 64 * MIB;
    const PAYLOAD: usize = 1024;
    let options = Options {
        max_pending: Some(MIB as usize),
        max_payload: Some(64 * 1024),
        write_deadline_ms: Some(2000),
        ..Options::default()
    };
    let mut cluster = Cluster::formed(flavor, 3, options).await;
    let flooded = subject(TEST, flavor, "flood");

    // A subscriber on node 3 that node 1 knows about.
    let on_three = cluster.connect(3).await;
    let subscriber = on_three.subscribe(flooded.clone()).await.unwrap();
    let on_one = cluster.connect(1).await;
    sync_interest(&on_three, &on_one).await;
    drop(on_one);

    // The publisher: raw, so nothing client-side buffers or drops.
    let mut publisher = cluster.node(1).raw_quiet().await;
    let mut batch = Vec::new();
    for _ in 0..64 {
        batch.extend_from_slice(format!("PUB {flooded} {PAYLOAD}\r\n").as_bytes());
        batch.extend_from_slice(&[b'x'; PAYLOAD]);
        batch.extend_from_slice(b"\r\n");
    }

    let pid1 = cluster.node(1).pid();
    let before = rss_bytes(pid1);
    let mut paused = Paused::stop(cluster.node(3).pid());

    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let sent = sent.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) && sent.load(Ordering::Relaxed) < FLOOD_BYTES_MAX {
                publisher.try_send(&batch).await?;
                sent.fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            Ok::<_, std::io::Error>(())
        })
    };
    let started = Instant::now();
    let mut peak = before;
    let detection = loop {
        peak = peak.max(rss_bytes(pid1));
        if let Some(line) = log_line(cluster.node(1), |line| slow_route_line(flavor, line)) {
            break line;
        }
        if flood.is_finished() || started.elapsed() >= FLOOD_TIME_MAX {
            stop.store(true, Ordering::Relaxed);
            flood.abort();
            let outcome = flood.await;
            panic!(
                "{}: node 1 never logged that the route to node 3 is slow: {} MiB published in {:?} (publisher: {outcome:?}), RSS {} -> {} MiB\n{}",
                flavor.name(),
                sent.load(Ordering::Relaxed) / MIB,
                started.elapsed(),
                before / MIB,
                peak / MIB,
                cluster.logs()
            );
        }
        tokio::time::sleep(POLL).await;
    };
    let detected = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    flood.abort();
    let _ = flood.await;
    eprintln!(
        "{}: after {detected:?} and {} MiB published, node 1 logged {detection:?}; its RSS {} -> {} MiB",
        flavor.name(),
        sent.load(Ordering::Relaxed) / MIB,
        before / MIB,
        peak / MIB
    );

    // Node 1 is up and, node 3 still stopped, nodes 1 and 2 serve each other.
    assert!(
        cluster.node_mut(1).is_running(),
        "{}: node 1 exited:\n{}",
        flavor.name(),
        cluster.logs()
    );
    check_pub_sub(&cluster, TEST, 2, &[1], 20).await;
    check_pub_sub(&cluster, TEST, 1, &[2], 20).await;
    if flavor == Flavor::Tern {
        // That route is torn down while node 3 is still stopped: at the
        // latest when the write in progress reaches `write_deadline` (the
        // "closed" line comes once its tasks are done).
        let address = detection
            .split("route to n3 (")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .unwrap_or_else(|| panic!("no address in {detection:?}"));
        let closed = format!("route connection to n3 ({address}) closed:");
        let deadline = Instant::now() + TIMEOUT;
        while log_line(cluster.node(1), |line| line.contains(&closed)).is_none() {
            assert!(
                Instant::now() < deadline,
                "tern: node 1 logged {detection:?} but never closed that route to n3 within {TIMEOUT:?} (n3 still stopped)\n{}",
                cluster.logs()
            );
            peak = peak.max(rss_bytes(pid1));
            tokio::time::sleep(POLL).await;
        }
    }
    peak = peak.max(rss_bytes(pid1));
    assert!(
        peak.saturating_sub(before) < GROWTH_MAX,
        "{}: node 1's RSS grew from {} to {} MiB",
        flavor.name(),
        before / MIB,
        peak / MIB
    );

    // Node 3 runs again: it rejoins, and 1 -> 3 works on a fresh subject.
    drop(subscriber);
    drop(on_three);
    paused.resume();
    cluster.wait_formed().await;
    check_pub_sub(&cluster, TEST, 3, &[1], 20).await;
}
differential!(cluster_peer_stops_reading);
