//! Monitoring a JetStream cluster, against tern-server and nats-server
//! alike: three nodes listing each other (`Cluster::meshed`), an R3
//! stream. `/jsz` names the meta leader in nats-server's `meta_cluster`
//! (same field names in both), lists the stream's `cluster` block, and
//! `/healthz` is ok on every node once the cluster converged; with two
//! nodes killed the survivor's `/healthz` answers 503 with nats-server's
//! meta-layer text, and ok again once they are back. tern alone: its Raft
//! details in `/jsz`, the replication families of `/metrics`, and the
//! leader lines in the logs.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::{wait_log, Cluster};
use common::{Flavor, Options, Server, TIMEOUT};
use serde_json::{json, Value};

/// How long a cluster may take to converge (the suite's servers share 2
/// vCPUs; see cluster_jetstream.rs).
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Poll interval of the bounded waits below.
const POLL: Duration = Duration::from_millis(50);

/// nats-server's `/healthz` texts for the meta layer (server/monitor.go).
const META_NO_LEADER: &str = "JetStream has not established contact with a meta leader";
const META_NOT_CURRENT: &str = "JetStream is not current with the meta leader";

/// Polls `probe` until it gives a value; panics with `what`, the last
/// observation and every node's log after `timeout`.
async fn wait_for<T>(
    cluster: &Cluster,
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match probe() {
            Ok(value) => return value,
            Err(last) => last,
        };
        if Instant::now() >= deadline {
            panic!(
                "{}: {what} not within {timeout:?}; last: {last}\n{}",
                cluster.flavor.name(),
                cluster.logs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `/healthz`: the status code and the JSON body.
fn healthz(server: &Server) -> (u16, Value) {
    let (status, body) = server.http_get("/healthz");
    let value = serde_json::from_str(&body)
        .unwrap_or_else(|error| panic!("/healthz is not JSON ({error}): {body}"));
    (status, value)
}

/// Every one of `nodes` answers `/healthz` with 200 `ok`.
fn all_healthy(cluster: &Cluster, nodes: &[usize]) -> Result<(), String> {
    for &node in nodes {
        let (status, body) = healthz(cluster.node(node));
        if status != 200 || body != json!({"status": "ok"}) {
            return Err(format!("n{node}: {status} {body}"));
        }
    }
    Ok(())
}

/// A stream's entry in `/jsz?streams=true`: tern lists `stream_detail` at
/// the top, nats-server under each account of `account_details`.
fn stream_detail(jsz: &Value, name: &str) -> Option<Value> {
    let top = jsz["stream_detail"].as_array().into_iter().flatten();
    let accounts = jsz["account_details"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|account| account["stream_detail"].as_array().into_iter().flatten());
    top.chain(accounts)
        .find(|stream| stream["name"] == name)
        .cloned()
}

/// The meta leader's name once every node in `nodes` names the same one
/// and, on it, both other voters are current.
fn converged_meta_leader(cluster: &Cluster, nodes: &[usize]) -> Result<String, String> {
    let mut leaders = Vec::new();
    for &node in nodes {
        let jsz = cluster.node(node).http_json("/jsz");
        let leader = jsz["meta_cluster"]["leader"].as_str().unwrap_or_default();
        leaders.push(leader.to_string());
    }
    let leader = leaders[0].clone();
    if leader.is_empty() || leaders.iter().any(|other| *other != leader) {
        return Err(format!("leaders seen: {leaders:?}"));
    }
    let number: usize = leader[1..]
        .parse()
        .map_err(|_| format!("leader {leader:?} is not a node"))?;
    let meta = cluster.node(number).http_json("/jsz")["meta_cluster"].clone();
    let replicas = meta["replicas"].as_array().cloned().unwrap_or_default();
    if replicas.len() != 2 || replicas.iter().any(|replica| replica["current"] != true) {
        return Err(format!("on the leader: {meta}"));
    }
    Ok(leader)
}

/// Creates `name` with three replicas through `client`, retried while
/// JetStream is not available yet (10008) or does not answer.
async fn create_r3(cluster: &Cluster, client: &async_nats::Client, name: &str) {
    let config = json!({
        "name": name,
        "subjects": [format!("{}.>", name.to_lowercase())],
        "storage": "file",
        "num_replicas": 3,
    });
    let subject = format!("$JS.API.STREAM.CREATE.{name}");
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let answer = tokio::time::timeout(
            Duration::from_secs(2),
            client.request(subject.clone(), config.to_string().into()),
        )
        .await;
        if let Ok(Ok(reply)) = &answer {
            let value: Value = serde_json::from_slice(&reply.payload).expect("JSON");
            if value["error"]["err_code"] != 10008 {
                assert!(value.get("error").is_none(), "{value}");
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{subject}: JetStream never became available: {answer:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Publishes until acknowledged (the stream's subjects may not be known
/// on `client`'s node yet, or its leader may be changing).
async fn publish_acked(client: &async_nats::Client, subject: &str) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let answer = tokio::time::timeout(
            Duration::from_secs(2),
            client.request(subject.to_string(), "m".into()),
        )
        .await;
        if let Ok(Ok(reply)) = answer {
            let ack: Value = serde_json::from_slice(&reply.payload).expect("a PubAck is JSON");
            if ack.get("seq").is_some() {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{subject}: never acknowledged");
        tokio::time::sleep(POLL).await;
    }
}

async fn cluster_monitoring(flavor: Flavor) {
    let mut cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let all = [1, 2, 3];
    let client = cluster.connect(2).await;
    create_r3(&cluster, &client, "MON").await;
    for _ in 0..3 {
        publish_acked(&client, "mon.a").await;
    }
    drop(client);

    wait_for(
        &cluster,
        "/healthz ok on every node",
        CONVERGE_TIMEOUT,
        || all_healthy(&cluster, &all),
    )
    .await;
    let leader = wait_for(&cluster, "one meta leader", CONVERGE_TIMEOUT, || {
        converged_meta_leader(&cluster, &all)
    })
    .await;

    // nats-server's meta_cluster fields, on every node.
    for node in all {
        let jsz = cluster.node(node).http_json("/jsz");
        let meta = &jsz["meta_cluster"];
        assert_eq!(meta["name"], cluster.name.as_str(), "{jsz}");
        assert_eq!(meta["leader"], leader.as_str(), "{jsz}");
        assert_eq!(meta["cluster_size"], 3, "{jsz}");
        assert!(
            meta["peer"].as_str().is_some_and(|peer| !peer.is_empty()),
            "{jsz}"
        );
        assert!(meta["pending"].is_u64(), "{jsz}");
        let replicas = meta["replicas"].as_array().expect("replicas");
        assert_eq!(replicas.len(), 2, "the other two voters: {jsz}");
        for replica in replicas {
            for field in ["name", "current", "active", "peer"] {
                assert!(replica.get(field).is_some(), "{field}: {jsz}");
            }
            assert_ne!(replica["name"], format!("n{node}"), "not itself: {jsz}");
        }
        if flavor == Flavor::Tern {
            let raft = &meta["raft"];
            assert!(raft["term"].as_u64() >= Some(1), "{jsz}");
            assert!(raft["applied"].as_u64() >= Some(1), "{jsz}");
            assert!(raft["commit"].as_u64() >= raft["applied"].as_u64(), "{jsz}");
            let role = if leader == format!("n{node}") {
                "leader"
            } else {
                "follower"
            };
            assert_eq!(raft["role"], role, "{jsz}");
        }
    }

    // The stream's cluster block, on every node (each its own view).
    for node in all {
        let jsz = cluster.node(node).http_json("/jsz?streams=true");
        let stream = stream_detail(&jsz, "MON").unwrap_or_else(|| panic!("n{node}: {jsz}"));
        let block = &stream["cluster"];
        assert_eq!(block["name"], cluster.name.as_str(), "{stream}");
        let stream_leader = block["leader"].as_str().expect("a leader").to_string();
        let replicas = block["replicas"].as_array().expect("replicas");
        // The other replicas (a follower lists the leader among them).
        let this = format!("n{node}");
        let mut names: Vec<&str> = replicas.iter().filter_map(|r| r["name"].as_str()).collect();
        assert!(!names.contains(&this.as_str()), "not itself: {stream}");
        names.push(&stream_leader);
        names.push(&this);
        names.sort_unstable();
        names.dedup();
        assert_eq!(names, ["n1", "n2", "n3"], "{stream}");
        if flavor == Flavor::Tern {
            let raft = &stream["raft"];
            assert!(raft["term"].as_u64() >= Some(1), "{stream}");
            assert!(raft["applied"].as_u64() >= Some(3), "3 messages: {stream}");
            assert_eq!(raft["current"], true, "{stream}");
            if stream_leader == format!("n{node}") {
                let lag = raft["replicas"].as_array().expect("each replica's lag");
                assert_eq!(lag.len(), 2, "{stream}");
                assert!(
                    lag.iter().all(|replica| replica["lag"].is_u64()),
                    "{stream}"
                );
            }
        }
    }

    if flavor == Flavor::Tern {
        tern_metrics_and_logs(&cluster, &leader).await;
    }

    // The meta leader and one more node die: the survivor loses its meta
    // leader and says so.
    let leader_number: usize = leader[1..].parse().expect("nN");
    let other = all
        .into_iter()
        .find(|&node| node != leader_number)
        .expect("two more");
    let survivor = all
        .into_iter()
        .find(|&node| node != leader_number && node != other)
        .expect("one more");
    cluster.kill(leader_number);
    cluster.kill(other);
    let unhealthy = wait_for(
        &cluster,
        "/healthz 503 on the survivor",
        CONVERGE_TIMEOUT,
        || match healthz(cluster.node(survivor)) {
            (503, body) => Ok(body),
            (status, body) => Err(format!("{status} {body}")),
        },
    )
    .await;
    assert_eq!(unhealthy["status"], "unavailable", "{unhealthy}");
    let error = unhealthy["error"].as_str().unwrap_or_default();
    assert!(
        error == META_NO_LEADER || error == META_NOT_CURRENT,
        "a meta-layer text: {unhealthy}"
    );
    // nats-server's options: JetStream merely enabled, or the server
    // alone, is healthy; the meta layer alone is not.
    for (query, expected) in [
        ("js-enabled-only=true", 200),
        ("js-server-only=true", 200),
        ("js-meta-only=true", 503),
    ] {
        let (status, body) = cluster
            .node(survivor)
            .http_get(&format!("/healthz?{query}"));
        assert_eq!(status, expected, "{query}: {body}");
    }
    if flavor == Flavor::Tern {
        // Its election timeout passes: no leader at all.
        let jsz = wait_for(&cluster, "no meta leader", CONVERGE_TIMEOUT, || {
            let (_, body) = healthz(cluster.node(survivor));
            match body["error"] == META_NO_LEADER {
                true => Ok(cluster.node(survivor).http_json("/jsz")),
                false => Err(body.to_string()),
            }
        })
        .await;
        let meta = &jsz["meta_cluster"];
        assert!(meta.get("leader").is_none(), "{jsz}");
        let offline: Vec<&str> = meta["replicas"]
            .as_array()
            .expect("every voter, itself too")
            .iter()
            .filter(|replica| replica["offline"] == true)
            .filter_map(|replica| replica["name"].as_str())
            .collect();
        assert_eq!(offline.len(), 2, "the dead two: {jsz}");
        let metrics = cluster.node(survivor).http_get("/metrics").1;
        assert!(metrics.contains("tern_meta_leader_known 0\n"), "{metrics}");
        assert!(metrics.contains("tern_meta_current 0\n"), "{metrics}");
        let dead = format!("tern_route_connected{{shard=\"0\",peer=\"{leader}\"}} 0\n");
        assert!(metrics.contains(&dead), "{dead}: {metrics}");
    }

    cluster.restart(leader_number);
    cluster.restart(other);
    wait_for(
        &cluster,
        "/healthz ok again on every node",
        CONVERGE_TIMEOUT,
        || all_healthy(&cluster, &all),
    )
    .await;
    // One stream asked for: one that is not there is 404 with nats-server's
    // text (the account `$G`, percent-encoded as a client sends it).
    let (status, body) = cluster
        .node(survivor)
        .http_get("/healthz?account=%24G&stream=NOPE");
    assert_eq!(status, 404, "{body}");
    let body: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        body["error"], "JetStream stream \"NOPE\" not found on account \"$G\"",
        "{body}"
    );
}
differential!(cluster_monitoring);

/// tern's `/metrics` replication families and leader log lines, on the
/// converged cluster whose meta group `leader` leads.
async fn tern_metrics_and_logs(cluster: &Cluster, leader: &str) {
    let leader_number: usize = leader[1..].parse().expect("nN");
    let metrics = cluster.node(leader_number).http_get("/metrics").1;
    for line in [
        "tern_raft_groups{shard=\"0\",role=\"leader\"} ",
        "tern_raft_elections_total{shard=\"0\"} ",
        "tern_raft_leader_changes_total{shard=\"1\"} ",
        "tern_raft_messages_dropped_total{shard=\"1\"} ",
        "tern_raft_stream_groups_not_current 0\n",
        "tern_meta_leader 1\n",
        "tern_meta_leader_known 1\n",
        "tern_meta_current 1\n",
        "tern_raft_replica_lag_streams_omitted 0\n",
    ] {
        assert!(metrics.contains(line), "{line:?} missing:\n{metrics}");
    }
    for node in [1, 2, 3].into_iter().filter(|&node| node != leader_number) {
        let route = format!("tern_route_connected{{shard=\"0\",peer=\"n{node}\"}} 1\n");
        assert!(metrics.contains(&route), "{route:?} missing:\n{metrics}");
    }
    // The stream's leader lists its replicas' lag.
    let stream_leader = cluster.node(1).http_json("/jsz?streams=true");
    let stream_leader = stream_detail(&stream_leader, "MON").expect("MON")["cluster"]["leader"]
        .as_str()
        .expect("a leader")
        .to_string();
    let stream_number: usize = stream_leader[1..].parse().expect("nN");
    let metrics = cluster.node(stream_number).http_get("/metrics").1;
    assert!(
        metrics.contains("tern_raft_replica_lag_entries{stream=\"MON\",peer=\"n"),
        "{metrics}"
    );

    wait_log(
        cluster.node(leader_number),
        leader,
        "meta group: this node leads (term",
        TIMEOUT,
    )
    .await;
    let follower = [1, 2, 3]
        .into_iter()
        .find(|&node| node != leader_number)
        .expect("a follower");
    wait_log(
        cluster.node(follower),
        "a meta follower",
        &format!("meta group: leader is {leader} (term"),
        TIMEOUT,
    )
    .await;
    let stream_follower = [1, 2, 3]
        .into_iter()
        .find(|&node| node != stream_number)
        .expect("a stream follower");
    wait_log(
        cluster.node(stream_follower),
        "a stream follower",
        &format!("stream MON: leader is {stream_leader} (term"),
        TIMEOUT,
    )
    .await;
}

/// One server, no cluster: `/jsz` has no `meta_cluster`, as nats-server's.
async fn single_server_has_no_meta_cluster(flavor: Flavor) {
    let server = Server::start(flavor, Options::jetstream());
    let client = server.connect().await;
    let config = json!({"name": "ONE", "subjects": ["one.>"], "storage": "file"});
    let created = client
        .request("$JS.API.STREAM.CREATE.ONE", config.to_string().into())
        .await
        .expect("create");
    let created: Value = serde_json::from_slice(&created.payload).expect("JSON");
    assert!(created.get("error").is_none(), "{created}");
    let jsz = server.http_json("/jsz?streams=true");
    assert!(jsz.get("meta_cluster").is_none(), "{jsz}");
    assert!(stream_detail(&jsz, "ONE").is_some(), "{jsz}");
    assert_eq!(healthz(&server), (200, json!({"status": "ok"})));
}
differential!(single_server_has_no_meta_cluster);
