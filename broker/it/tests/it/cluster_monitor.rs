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

/// `/jsz`'s members in nats-server's order (`JSInfo`, `AccountDetail`,
/// `StreamDetail`, `ConsumerInfo`): what each object of a body may hold,
/// in order. tern's own fields (`journal`, a stream's `shard`, `failure`,
/// `raft`) come after them and are left out of the check.
const JSINFO_ORDER: &[&str] = &[
    "memory",
    "storage",
    "reserved_memory",
    "reserved_storage",
    "accounts",
    "ha_assets",
    "api",
    "server_id",
    "now",
    "disabled",
    "config",
    "limits",
    "streams",
    "streams_leader",
    "consumers",
    "consumers_leader",
    "messages",
    "bytes",
    "meta_cluster",
    "account_details",
    "total",
];
const ACCOUNT_ORDER: &[&str] = &[
    "name",
    "id",
    "memory",
    "storage",
    "reserved_memory",
    "reserved_storage",
    "accounts",
    "ha_assets",
    "api",
    "stream_detail",
];
const STREAM_ORDER: &[&str] = &[
    "name",
    "created",
    "cluster",
    "config",
    "state",
    "consumer_detail",
    "direct_consumer_detail",
    "mirror",
    "sources",
    "stream_raft_group",
    "consumer_raft_groups",
];
const CONSUMER_ORDER: &[&str] = &[
    "stream_name",
    "name",
    "created",
    "config",
    "delivered",
    "ack_floor",
    "num_ack_pending",
    "num_redelivered",
    "num_waiting",
    "num_pending",
    "cluster",
    "push_bound",
    "paused",
    "pause_remaining",
    "ts",
    "priority_groups",
];
/// tern's additions (after nats-server's members).
const TERN_FIELDS: &[&str] = &["journal", "shard", "failure", "raft"];

/// The member names of every object at `path` of an indented body (both
/// servers indent as Go's MarshalIndent), in the order written, one list
/// per object. A path names the members leading to it, `[]` for an
/// array's element: `""` is the body, `"/account_details/[]"` an account.
fn objects_at(body: &str, path: &str) -> Vec<Vec<String>> {
    // Open containers: their path and, for an object, its index in `objects`.
    let mut open: Vec<(String, Option<usize>)> = Vec::new();
    let mut objects: Vec<(String, Vec<String>)> = Vec::new();
    fn open_object(
        open: &mut Vec<(String, Option<usize>)>,
        objects: &mut Vec<(String, Vec<String>)>,
        at: String,
    ) {
        objects.push((at.clone(), Vec::new()));
        open.push((at, Some(objects.len() - 1)));
    }
    for line in body.lines().map(str::trim) {
        let here = open.last().map(|(at, _)| at.clone()).unwrap_or_default();
        if line == "{" {
            let at = if open.is_empty() {
                String::new()
            } else {
                format!("{here}/[]")
            };
            open_object(&mut open, &mut objects, at);
        } else if line.starts_with('}') || line.starts_with(']') {
            open.pop();
        } else if let Some((key, rest)) = line
            .strip_prefix('"')
            .and_then(|line| line.split_once("\": "))
        {
            if let Some((_, Some(index))) = open.last() {
                objects[*index].1.push(key.to_string());
            }
            let at = format!("{here}/{key}");
            if rest == "{" {
                open_object(&mut open, &mut objects, at);
            } else if rest == "[" {
                open.push((at, None));
            }
        }
    }
    objects
        .into_iter()
        .filter(|(at, _)| at == path)
        .map(|(_, members)| members)
        .collect()
}

/// Every object at `path` of `body` lists its members in `order`
/// (nats-server's; tern's own fields after them): the first one that
/// does not, if any.
fn out_of_order(body: &str, path: &str, order: &[&str]) -> Option<Vec<String>> {
    objects_at(body, path).into_iter().find(|members| {
        let positions: Option<Vec<usize>> = members
            .iter()
            .filter(|member| !TERN_FIELDS.contains(&member.as_str()))
            .map(|member| order.iter().position(|known| known == member))
            .collect();
        let tern_after = members
            .iter()
            .skip_while(|member| !TERN_FIELDS.contains(&member.as_str()))
            .all(|member| TERN_FIELDS.contains(&member.as_str()));
        !tern_after
            || positions.is_none_or(|positions| positions.windows(2).any(|pair| pair[0] >= pair[1]))
    })
}

/// Creates `name` with `replicas` replicas (and `durable` on it, a pull
/// consumer with explicit acks) through `client`, retried while JetStream
/// is not available yet (10008) or does not answer.
async fn create_stream_with_durable(
    cluster: &Cluster,
    client: &async_nats::Client,
    (name, replicas): (&str, usize),
    durable: &str,
) {
    let stream = json!({
        "name": name,
        "subjects": [format!("{}.>", name.to_lowercase())],
        "storage": "file",
        "num_replicas": replicas,
    });
    let consumer = json!({
        "stream_name": name,
        "config": {"durable_name": durable, "ack_policy": "explicit"},
    });
    for (subject, body) in [
        (format!("$JS.API.STREAM.CREATE.{name}"), stream),
        (
            format!("$JS.API.CONSUMER.DURABLE.CREATE.{name}.{durable}"),
            consumer,
        ),
    ] {
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            let answer = tokio::time::timeout(
                Duration::from_secs(2),
                client.request(subject.clone(), body.to_string().into()),
            )
            .await;
            if let Ok(Ok(reply)) = &answer {
                let value: Value = serde_json::from_slice(&reply.payload).expect("JSON");
                if value["error"]["err_code"] != 10008 {
                    assert!(value.get("error").is_none(), "{subject}: {value}");
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{subject}: never answered: {answer:?}\n{}",
                cluster.logs()
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Pulls `count` messages of `stream`'s `durable` and acknowledges the
/// first (a double ack, so it is in the consumer's state when answered).
async fn pull_and_ack_first(
    client: &async_nats::Client,
    stream: &str,
    durable: &str,
    count: usize,
) {
    let inbox = client.new_inbox();
    let mut messages = client.subscribe(inbox.clone()).await.expect("subscribe");
    common::flush(client).await;
    let request = json!({"batch": count, "expires": 5_000_000_000u64});
    client
        .publish_with_reply(
            format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"),
            inbox,
            request.to_string().into(),
        )
        .await
        .expect("pull");
    let mut delivered = Vec::new();
    while delivered.len() < count {
        let message = tokio::time::timeout(TIMEOUT, futures::StreamExt::next(&mut messages))
            .await
            .expect("a delivery in time")
            .expect("subscribed");
        // Deliveries carry their ack subject as the reply (statuses do not).
        if message.reply.is_some() && message.status.is_none() {
            delivered.push(message);
        }
    }
    let ack = delivered[0].reply.clone().expect("an ack subject");
    let confirmed = tokio::time::timeout(TIMEOUT, client.request(ack, "+ACK".into())).await;
    assert!(matches!(confirmed, Ok(Ok(_))), "ack: {confirmed:?}");
}

/// Every node's `/jsz?query` once `ready` holds for all of them.
async fn jsz_everywhere(
    cluster: &Cluster,
    query: &str,
    what: &str,
    ready: impl Fn(usize, &Value) -> Result<(), String>,
) -> Vec<Value> {
    wait_for(cluster, what, CONVERGE_TIMEOUT, || {
        let mut all = Vec::new();
        for node in 1..=3 {
            let jsz = cluster.node(node).http_json(&format!("/jsz?{query}"));
            ready(node, &jsz).map_err(|error| format!("n{node}: {error}: {jsz}"))?;
            all.push(jsz);
        }
        Ok(all)
    })
    .await
}

fn names_of(values: &[Value]) -> Vec<String> {
    values
        .iter()
        .filter_map(|value| value["name"].as_str().map(str::to_string))
        .collect()
}

/// `/jsz` with nats-server's options on a 3-node cluster, each node
/// asked: an R1 stream with a durable (on one node) and an R3 stream with
/// a durable that delivered two messages and had one acknowledged. As
/// nats-server's, every node lists the replicas it holds (not every
/// stream), each with the same creation time, leader and config, its
/// `cluster` block as that node sees it, the durables it holds (a
/// follower: no pending count), under the one account `$G` whose usage is
/// the cluster's; `config`, `consumers`, `accounts`, `acc`, `offset`,
/// `limit`, `leader-only`, `stream-leader-only` and `raft` select what
/// the exporters read; members come in nats-server's order.
async fn jsz_lists_each_nodes_replicas(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    create_stream_with_durable(&cluster, &client, ("ONE", 1), "D1").await;
    create_stream_with_durable(&cluster, &client, ("THREE", 3), "D3").await;
    for _ in 0..3 {
        publish_acked(&client, "one.a").await;
        publish_acked(&client, "three.a").await;
    }
    pull_and_ack_first(&client, "THREE", "D3", 2).await;
    let meta_leader = wait_for(&cluster, "one meta leader", CONVERGE_TIMEOUT, || {
        converged_meta_leader(&cluster, &[1, 2, 3])
    })
    .await;

    // What the Prometheus exporter asks, once every replica has the
    // messages and D3's state, and the account's usage is every node's.
    let exporter = "accounts=true&streams=true&consumers=true&config=true";
    let all = jsz_everywhere(&cluster, exporter, "every replica caught up", |_, jsz| {
        for stream in common::js::jsz_streams(jsz) {
            if stream["state"]["messages"] != 3 {
                return Err(format!("{} has not every message", stream["name"]));
            }
            let consumer = &stream["consumer_detail"][0];
            if stream["name"] == "THREE"
                && (consumer["delivered"]["stream_seq"] != 2
                    || consumer["ack_floor"]["stream_seq"] != 1)
            {
                return Err("D3's state has not reached it".into());
            }
        }
        Ok(())
    })
    .await;
    let stored: u64 = all.iter().map(|jsz| jsz["storage"].as_u64().unwrap()).sum();
    wait_for(
        &cluster,
        "the account's usage summed",
        CONVERGE_TIMEOUT,
        || {
            for node in 1..=3 {
                let jsz = cluster.node(node).http_json("/jsz?accounts=true");
                if jsz["account_details"][0]["storage"] != stored {
                    return Err(format!("n{node}: {jsz} (the nodes store {stored})"));
                }
            }
            Ok(())
        },
    )
    .await;
    let mut holders_of_one = Vec::new();
    let mut leaders = std::collections::BTreeMap::new();
    let mut created = std::collections::BTreeMap::new();
    let mut consumers_pending = Vec::new();
    for (index, jsz) in all.iter().enumerate() {
        let node = index + 1;
        let this = format!("n{node}");
        assert_eq!(jsz["accounts"], 1, "{jsz}");
        assert_eq!(jsz["total"], 1, "{jsz}");
        assert!(jsz["config"]["max_storage"].is_i64(), "{jsz}");
        let accounts = jsz["account_details"].as_array().expect("accounts");
        assert_eq!(accounts.len(), 1, "{jsz}");
        assert_eq!(
            (&accounts[0]["name"], &accounts[0]["id"]),
            (&json!("$G"), &json!("$G"))
        );
        let streams = common::js::jsz_streams(jsz);
        let mut names = names_of(&streams);
        names.sort();
        // Only its own replicas: THREE everywhere, ONE on one node.
        match names.as_slice() {
            [three] if three == "THREE" => {}
            [one, three] if one == "ONE" && three == "THREE" => holders_of_one.push(node),
            _ => panic!("{this} lists {names:?}: {jsz}"),
        }
        assert_eq!(jsz["streams"], names.len(), "{jsz}");
        assert_eq!(jsz["consumers"], names.len(), "a durable each: {jsz}");
        for stream in &streams {
            let name = stream["name"].as_str().unwrap().to_string();
            let block = &stream["cluster"];
            assert_eq!(block["name"], cluster.name.as_str(), "{stream}");
            let leader = block["leader"].as_str().expect("a leader").to_string();
            assert_eq!(
                leaders
                    .entry(name.clone())
                    .or_insert_with(|| leader.clone()),
                &leader,
                "every node names the same leader: {stream}"
            );
            assert_eq!(
                created
                    .entry(name.clone())
                    .or_insert_with(|| stream["created"].clone()),
                &stream["created"],
                "the same creation time: {stream}"
            );
            assert_eq!(stream["config"]["name"], name.as_str(), "{stream}");
            let replicas = if name == "ONE" { 1 } else { 3 };
            assert_eq!(stream["config"]["num_replicas"], replicas, "{stream}");
            assert_eq!(stream["state"]["consumer_count"], 1, "{stream}");
            let others = names_of(block["replicas"].as_array().map_or(&[][..], Vec::as_slice));
            if replicas == 1 {
                assert_eq!(leader, this, "{stream}");
                assert!(others.is_empty(), "{stream}");
            } else {
                // The others as this node sees them (never itself).
                let mut expected: Vec<String> = ["n1", "n2", "n3"]
                    .iter()
                    .filter(|n| **n != this)
                    .map(|n| n.to_string())
                    .collect();
                let mut listed = others.clone();
                listed.sort();
                expected.sort();
                assert_eq!(listed, expected, "{stream}");
            }
            let consumers = stream["consumer_detail"].as_array().expect("its durable");
            assert_eq!(
                names_of(consumers),
                [if replicas == 1 { "D1" } else { "D3" }]
            );
            let consumer = &consumers[0];
            assert_eq!(consumer["stream_name"], name.as_str(), "{consumer}");
            assert_eq!(consumer["config"]["ack_policy"], "explicit", "{consumer}");
            assert_eq!(
                consumer["cluster"]["name"],
                cluster.name.as_str(),
                "{consumer}"
            );
            if replicas == 3 {
                assert_eq!(consumer["num_ack_pending"], 1, "{consumer}");
                consumers_pending.push((
                    this.clone(),
                    consumer["cluster"]["leader"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    consumer["num_pending"].as_u64().unwrap_or_default(),
                ));
            } else {
                assert_eq!(consumer["num_pending"], 3, "{consumer}");
            }
        }
        let body = common_body(&cluster, node, exporter);
        assert_eq!(objects_at(&body, "").len(), 1, "{body}");
        if let Some(members) = out_of_order(&body, "", JSINFO_ORDER) {
            panic!("{this}: top-level members out of nats-server's order: {members:?}");
        }
    }
    assert_eq!(holders_of_one.len(), 1, "ONE is on one node");
    // D3's leader counts what it has left to deliver; a follower does not.
    for (node, leader, pending) in &consumers_pending {
        let expected = if node == leader { 1 } else { 0 };
        assert_eq!(
            *pending, expected,
            "{node} (D3 led by {leader}): {consumers_pending:?}"
        );
    }

    // Members in nats-server's order, in the account, streams, consumers.
    let body = common_body(&cluster, 1, &format!("{exporter}&raft=true"));
    let account = "/account_details/[]";
    let stream = format!("{account}/stream_detail/[]");
    let consumer = format!("{stream}/consumer_detail/[]");
    for (path, order, count) in [
        (account, ACCOUNT_ORDER, 1),
        (stream.as_str(), STREAM_ORDER, 1),
        (consumer.as_str(), CONSUMER_ORDER, 1),
    ] {
        assert!(objects_at(&body, path).len() >= count, "{path}: {body}");
        if let Some(members) = out_of_order(&body, path, order) {
            panic!("{path}: members out of nats-server's order: {members:?}\n{body}");
        }
    }

    // Less asked, less listed.
    for node in 1..=3 {
        let server = cluster.node(node);
        let streams = server.http_json("/jsz?streams=true");
        for stream in common::js::jsz_streams(&streams) {
            assert!(stream.get("config").is_none(), "{stream}");
            assert!(stream.get("consumer_detail").is_none(), "{stream}");
        }
        let consumers = server.http_json("/jsz?consumers=true");
        for stream in common::js::jsz_streams(&consumers) {
            assert!(stream.get("config").is_none(), "{stream}");
            assert!(
                stream["consumer_detail"][0].get("config").is_none(),
                "{stream}"
            );
        }
        let accounts = server.http_json("/jsz?accounts=true");
        assert!(
            accounts["account_details"][0]
                .get("stream_detail")
                .is_none(),
            "{accounts}"
        );
        assert!(server.http_json("/jsz").get("account_details").is_none());
        let named = server.http_json("/jsz?acc=%24G&streams=true");
        assert!(!common::js::jsz_streams(&named).is_empty(), "{named}");
        for query in ["acc=NOPE&streams=true", "accounts=true&offset=1"] {
            let jsz = server.http_json(&format!("/jsz?{query}"));
            assert!(jsz.get("account_details").is_none(), "{query}: {jsz}");
        }
        let every = server.http_json("/jsz?accounts=true&offset=1&limit=-1");
        assert_eq!(
            every["account_details"].as_array().map(Vec::len),
            Some(1),
            "{every}"
        );
        // leader-only: the meta leader answers, the others refuse.
        let (status, body) = server.http_get("/jsz?leader-only=true");
        if meta_leader == format!("n{node}") {
            assert_eq!(status, 200, "{body}");
        } else {
            assert_eq!(
                (status, body.as_str()),
                (400, "filtered response: not leader")
            );
        }
        let (status, body) = server.http_get("/jsz?consumers=maybe");
        assert_eq!(status, 400, "{body}");
        assert_eq!(
            body,
            "Error decoding boolean for 'consumers': strconv.ParseBool: parsing \"maybe\": invalid syntax"
        );
        let (status, body) = server.http_get("/jsz?offset=x");
        assert_eq!(
            (status, body.as_str()),
            (
                400,
                "Error decoding int for 'offset': strconv.Atoi: parsing \"x\": invalid syntax"
            )
        );
    }

    // stream-leader-only: each stream on the node that leads it alone.
    let mut led: Vec<String> = Vec::new();
    for node in 1..=3 {
        let jsz = cluster
            .node(node)
            .http_json("/jsz?streams=true&stream-leader-only=true");
        for stream in common::js::jsz_streams(&jsz) {
            assert_eq!(stream["cluster"]["leader"], format!("n{node}"), "{stream}");
            led.push(stream["name"].as_str().unwrap().to_string());
        }
    }
    led.sort();
    assert_eq!(led, ["ONE", "THREE"]);

    // raft=true: the groups' names (the same on every node) and what each
    // node leads, which sums to every stream and durable once.
    let (mut streams_led, mut consumers_led) = (0, 0);
    let mut groups = std::collections::BTreeMap::new();
    for node in 1..=3 {
        let jsz = cluster
            .node(node)
            .http_json("/jsz?consumers=true&raft=true");
        streams_led += jsz["streams_leader"].as_u64().unwrap_or(0);
        consumers_led += jsz["consumers_leader"].as_u64().unwrap_or(0);
        for stream in common::js::jsz_streams(&jsz) {
            let group = stream["stream_raft_group"].as_str().expect("a group name");
            assert!(!group.is_empty(), "{stream}");
            let name = stream["name"].as_str().unwrap().to_string();
            assert_eq!(
                groups.entry(name).or_insert_with(|| group.to_string()),
                group,
                "{stream}"
            );
            let consumer_groups = stream["consumer_raft_groups"]
                .as_array()
                .expect("the durable's");
            assert_eq!(consumer_groups.len(), 1, "{stream}");
            assert!(
                consumer_groups[0]["raft_group"]
                    .as_str()
                    .is_some_and(|group| !group.is_empty()),
                "{stream}"
            );
        }
    }
    assert_eq!((streams_led, consumers_led), (2, 2));
}
differential!(jsz_lists_each_nodes_replicas);

/// `node`'s `/jsz?query` as its body text.
fn common_body(cluster: &Cluster, node: usize, query: &str) -> String {
    let (status, body) = cluster.node(node).http_get(&format!("/jsz?{query}"));
    assert_eq!(status, 200, "{body}");
    body
}
