//! Listings and consumer leadership across a cluster, against tern-server
//! and nats-server alike: three nodes that each list every node in
//! `--routes` ([`Cluster::meshed`]), a one-replica and a three-replica
//! stream. STREAM.LIST and account INFO asked of every node show both
//! streams with their leaders' state and the cluster's totals (a
//! replicated stream's bytes once per replica); consumer info, create and
//! list carry the `cluster` block; CONSUMER.LEADER.STEPDOWN answers and
//! moves the consumer's leadership; a stream whose node stopped is listed
//! offline and named in `missing`. On one server the stepdown needs a
//! cluster (10010).
//!
//! Where tern differs by design (docs/cluster-jetstream.md): a consumer
//! follows its stream (its `cluster` block is the stream's, whatever its
//! `num_replicas`, and stepping its leadership down steps the stream's
//! leader down); nats-server's `raft_group`, `leader_since`,
//! `system_account` and `traffic_account` are not written.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::{Flavor, Options, Server, TIMEOUT};
use serde_json::{json, Value};

/// How long the cluster may take to converge (see cluster_jetstream.rs).
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);
/// One attempt of a request: longer than a meta leader's gather (4 s in
/// both servers), so a listing that waits for a silent stream is answered.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(6);
/// Poll interval of the bounded waits below (not synchronisation).
const POLL: Duration = Duration::from_millis(50);

/// A JetStream API request through `client`; the JSON answer.
async fn api(client: &async_nats::Client, subject: &str, body: Value) -> Value {
    let payload = match body {
        Value::Null => bytes::Bytes::new(),
        body => bytes::Bytes::from(body.to_string()),
    };
    let reply = tokio::time::timeout(TIMEOUT, client.request(subject.to_string(), payload))
        .await
        .unwrap_or_else(|_| panic!("{subject}: no answer within {TIMEOUT:?}"))
        .unwrap_or_else(|error| panic!("{subject}: {error}"));
    serde_json::from_slice(&reply.payload)
        .unwrap_or_else(|error| panic!("{subject}: answer is not JSON: {error}"))
}

/// The request, repeated (bounded by [`CONVERGE_TIMEOUT`]) until its
/// answer satisfies `done`; the last answer. No answer, or JetStream not
/// available yet (10008: no meta leader, an election), counts as not done.
async fn api_until(
    client: &async_nats::Client,
    subject: &str,
    body: Value,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let mut last = Value::Null;
    loop {
        let payload = match &body {
            Value::Null => bytes::Bytes::new(),
            body => bytes::Bytes::from(body.to_string()),
        };
        let answer = tokio::time::timeout(
            ATTEMPT_TIMEOUT,
            client.request(subject.to_string(), payload),
        )
        .await;
        if let Ok(Ok(reply)) = answer {
            last = serde_json::from_slice(&reply.payload).unwrap_or(Value::Null);
            if last["error"]["err_code"] != 10008 && done(&last) {
                return last;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{subject}: no satisfying answer within {CONVERGE_TIMEOUT:?}; the last: {last:#}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Publishes with a PubAck, retried (bounded) while the stream's subjects
/// are not routed to it yet or its leader changes.
async fn publish_acked(client: &async_nats::Client, subject: &str, payload: &str) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let answer = tokio::time::timeout(
            Duration::from_secs(2),
            client.request(subject.to_string(), payload.to_string().into()),
        )
        .await;
        if let Ok(Ok(reply)) = &answer {
            let ack: Value = serde_json::from_slice(&reply.payload).expect("a PubAck is JSON");
            if ack["seq"].as_u64().unwrap_or(0) > 0 {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "publish to {subject}: never acknowledged: {answer:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

fn no_error(answer: &Value) -> bool {
    answer.get("error").is_none()
}

/// The names in a `cluster` block's `replicas`.
fn replica_names(cluster: &Value) -> BTreeSet<String> {
    cluster["replicas"]
        .as_array()
        .map(|replicas| {
            replicas
                .iter()
                .filter_map(|replica| replica["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `n1`..`n3` but `leader`.
fn others(leader: &str) -> BTreeSet<String> {
    ["n1", "n2", "n3"]
        .into_iter()
        .filter(|name| *name != leader)
        .map(str::to_string)
        .collect()
}

/// A replicated group's block: the cluster, a leader and the two other
/// nodes as replicas, each with nats-server's fields.
fn assert_replicated_block(cluster: &Value, cluster_name: &str, what: &str) {
    assert_eq!(cluster["name"], cluster_name, "{what}: {cluster}");
    let leader = cluster["leader"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no leader: {cluster}"));
    assert_eq!(replica_names(cluster), others(leader), "{what}: {cluster}");
    for replica in cluster["replicas"].as_array().expect("replicas") {
        assert!(replica["current"].is_boolean(), "{what}: {replica}");
        assert!(replica["active"].is_u64(), "{what}: {replica}");
        assert!(replica["peer"].is_string(), "{what}: {replica}");
    }
}

/// A one-replica group's block: the cluster and the node, no replicas.
fn assert_single_block(cluster: &Value, cluster_name: &str, leader: &str, what: &str) {
    assert_eq!(cluster["name"], cluster_name, "{what}: {cluster}");
    assert_eq!(cluster["leader"], leader, "{what}: {cluster}");
    assert!(cluster.get("replicas").is_none(), "{what}: {cluster}");
}

/// The node number of server `name` (`n2` → 2).
fn node_of(name: &str) -> usize {
    name.trim_start_matches('n').parse().expect("a node name")
}

async fn lists_across_nodes(flavor: Flavor) {
    let mut cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let clients = [
        cluster.connect(1).await,
        cluster.connect(2).await,
        cluster.connect(3).await,
    ];
    let name = cluster.name.clone();
    let created = api_until(
        &clients[0],
        "$JS.API.STREAM.CREATE.ONE",
        json!({"name": "ONE", "subjects": ["one.>"], "storage": "file", "num_replicas": 1}),
        no_error,
    )
    .await;
    let one_host = created["cluster"]["leader"]
        .as_str()
        .expect("ONE's node")
        .to_string();
    api_until(
        &clients[1],
        "$JS.API.STREAM.CREATE.THREE",
        json!({"name": "THREE", "subjects": ["three.>"], "storage": "file",
               "num_replicas": 3, "max_bytes": 100_000}),
        no_error,
    )
    .await;
    for index in 0..2 {
        publish_acked(&clients[2], "one.x", &format!("one {index}")).await;
    }
    for index in 0..3 {
        publish_acked(&clients[2], "three.x", &format!("three {index}")).await;
    }

    // Consumers, created through different nodes: the answer has the
    // group's block.
    let durable = json!({"durable_name": "D", "ack_policy": "explicit"});
    let created = api_until(
        &clients[0],
        "$JS.API.CONSUMER.CREATE.THREE.D",
        json!({"stream_name": "THREE", "config": durable}),
        no_error,
    )
    .await;
    assert_replicated_block(&created["cluster"], &name, "CONSUMER.CREATE THREE.D");
    let created = api_until(
        &clients[0],
        "$JS.API.CONSUMER.CREATE.THREE.R1",
        json!({"stream_name": "THREE",
               "config": {"durable_name": "R1", "ack_policy": "explicit", "num_replicas": 1}}),
        no_error,
    )
    .await;
    assert_eq!(created["config"]["num_replicas"], 1, "{created}");
    let created = api_until(
        &clients[1],
        "$JS.API.CONSUMER.CREATE.ONE.D",
        json!({"stream_name": "ONE", "config": durable}),
        no_error,
    )
    .await;
    assert_single_block(
        &created["cluster"],
        &name,
        &one_host,
        "CONSUMER.CREATE ONE.D",
    );

    // Every node lists both streams with their leaders' state.
    let mut one_bytes = 0;
    let mut three_bytes = 0;
    for client in &clients {
        let list = api_until(client, "$JS.API.STREAM.LIST", Value::Null, |list| {
            list["total"] == 2
                && list["streams"][1]["state"]["consumer_count"] == 2
                && list["streams"][0]["state"]["consumer_count"] == 1
        })
        .await;
        assert_eq!(
            list["type"], "io.nats.jetstream.api.v1.stream_list_response",
            "{list}"
        );
        assert_eq!((&list["offset"], &list["limit"]), (&json!(0), &json!(256)));
        assert!(list.get("missing").is_none(), "{list}");
        let streams = list["streams"].as_array().expect("streams");
        let names: Vec<&str> = streams
            .iter()
            .map(|stream| stream["config"]["name"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(names, ["ONE", "THREE"], "{list}");
        let (one, three) = (&streams[0], &streams[1]);
        assert_eq!(one["state"]["messages"], 2, "{one}");
        assert_eq!(three["state"]["messages"], 3, "{three}");
        assert_eq!(three["state"]["last_seq"], 3, "{three}");
        assert_single_block(&one["cluster"], &name, &one_host, "LIST's ONE");
        assert_replicated_block(&three["cluster"], &name, "LIST's THREE");
        let info = api(client, "$JS.API.STREAM.INFO.THREE", Value::Null).await;
        assert_eq!(
            three["cluster"]["leader"], info["cluster"]["leader"],
            "{info}"
        );
        one_bytes = one["state"]["bytes"].as_u64().expect("bytes");
        three_bytes = three["state"]["bytes"].as_u64().expect("bytes");
        // A filter: only THREE's subjects.
        let filtered = api_until(
            client,
            "$JS.API.STREAM.LIST",
            json!({"subject": "three.x"}),
            no_error,
        )
        .await;
        assert_eq!(filtered["total"], 1, "{filtered}");
        assert_eq!(filtered["streams"][0]["config"]["name"], "THREE");
        // Past the end: nats-server's meta leader answers a zero total.
        let past = api_until(
            client,
            "$JS.API.STREAM.LIST",
            json!({"offset": 5}),
            no_error,
        )
        .await;
        assert_eq!(past["streams"], json!([]), "{past}");
        assert_eq!(past["offset"], 2, "{past}");
    }

    // Account INFO from every node: the cluster's totals, a replicated
    // stream's bytes once per replica (nats-server sums every server's
    // usage; it sends it every few seconds).
    let storage = one_bytes + 3 * three_bytes;
    for client in &clients {
        let info = api_until(client, "$JS.API.INFO", Value::Null, |info| {
            info["storage"] == storage
        })
        .await;
        assert_eq!(
            info["type"], "io.nats.jetstream.api.v1.account_info_response",
            "{info}"
        );
        assert_eq!(info["streams"], 2, "{info}");
        assert_eq!(info["consumers"], 3, "{info}");
        assert_eq!(info["memory"], 0, "{info}");
        assert_eq!(info["reserved_storage"], 100_000, "{info}");
        assert!(info["api"]["total"].as_u64() > Some(0), "{info}");
    }

    // CONSUMER.INFO and LIST from every node carry the block.
    for client in &clients {
        let info = api_until(
            client,
            "$JS.API.CONSUMER.INFO.THREE.D",
            Value::Null,
            no_error,
        )
        .await;
        assert_replicated_block(&info["cluster"], &name, "CONSUMER.INFO THREE.D");
        let info = api_until(client, "$JS.API.CONSUMER.INFO.ONE.D", Value::Null, no_error).await;
        assert_single_block(&info["cluster"], &name, &one_host, "CONSUMER.INFO ONE.D");
        let info = api_until(
            client,
            "$JS.API.CONSUMER.INFO.THREE.R1",
            Value::Null,
            no_error,
        )
        .await;
        match flavor {
            // Its own one-replica group on one of the stream's nodes.
            Flavor::Nats => {
                assert_eq!(info["cluster"]["name"], name.as_str(), "{info}");
                assert!(info["cluster"]["leader"].is_string(), "{info}");
                assert!(info["cluster"].get("replicas").is_none(), "{info}");
            }
            // The stream's group, whatever its num_replicas.
            Flavor::Tern => {
                assert_replicated_block(&info["cluster"], &name, "CONSUMER.INFO THREE.R1")
            }
        }
        let list = api_until(client, "$JS.API.CONSUMER.LIST.THREE", Value::Null, no_error).await;
        assert_eq!(list["total"], 2, "{list}");
        for consumer in list["consumers"].as_array().expect("consumers") {
            assert_eq!(consumer["cluster"]["name"], name.as_str(), "{consumer}");
            assert!(consumer["cluster"]["leader"].is_string(), "{consumer}");
        }
    }

    // CONSUMER.LEADER.STEPDOWN: success, and another node leads it.
    let before = api(&clients[2], "$JS.API.CONSUMER.INFO.THREE.D", Value::Null).await;
    let leader_before = before["cluster"]["leader"]
        .as_str()
        .expect("a leader")
        .to_string();
    let stream_leader_before = api(&clients[2], "$JS.API.STREAM.INFO.THREE", Value::Null).await
        ["cluster"]["leader"]
        .clone();
    let stepped = api(
        &clients[2],
        "$JS.API.CONSUMER.LEADER.STEPDOWN.THREE.D",
        Value::Null,
    )
    .await;
    assert_eq!(
        stepped,
        json!({"type": "io.nats.jetstream.api.v1.consumer_leader_stepdown_response",
               "success": true})
    );
    let after = api_until(
        &clients[2],
        "$JS.API.CONSUMER.INFO.THREE.D",
        Value::Null,
        |info| info["cluster"]["leader"].is_string() && info["cluster"]["leader"] != leader_before,
    )
    .await;
    assert_replicated_block(&after["cluster"], &name, "CONSUMER.INFO after stepdown");
    let stream_after = api_until(
        &clients[2],
        "$JS.API.STREAM.INFO.THREE",
        Value::Null,
        |info| info["cluster"]["leader"].is_string(),
    )
    .await;
    match flavor {
        // The consumer's own group moved; the stream's leader stays.
        Flavor::Nats => assert_eq!(
            stream_after["cluster"]["leader"], stream_leader_before,
            "{stream_after}"
        ),
        // One leader for both.
        Flavor::Tern => assert_eq!(
            stream_after["cluster"]["leader"], after["cluster"]["leader"],
            "{stream_after}"
        ),
    }
    // A one-replica stream's consumer: nothing to hand over, success.
    let stepped = api(
        &clients[0],
        "$JS.API.CONSUMER.LEADER.STEPDOWN.ONE.D",
        Value::Null,
    )
    .await;
    assert_eq!(stepped["success"], true, "{stepped}");
    let missing = api(
        &clients[0],
        "$JS.API.CONSUMER.LEADER.STEPDOWN.THREE.NOPE",
        Value::Null,
    )
    .await;
    assert_eq!(
        missing,
        json!({"type": "io.nats.jetstream.api.v1.consumer_leader_stepdown_response",
               "error": {"code": 404, "err_code": 10014, "description": "consumer not found"}})
    );
    let missing = api(
        &clients[1],
        "$JS.API.CONSUMER.LEADER.STEPDOWN.NOPE.D",
        Value::Null,
    )
    .await;
    assert_eq!(
        missing,
        json!({"type": "io.nats.jetstream.api.v1.consumer_leader_stepdown_response",
               "error": {"code": 404, "err_code": 10059, "description": "stream not found"}})
    );

    // ONE's node stops: ONE is listed as nats-server lists a stream none
    // of whose nodes is reachable (empty state, no leader, its node
    // offline) and named missing; THREE is listed once it leads again.
    let stopped = node_of(&one_host);
    cluster.stop(stopped);
    let asker = &clients[if stopped == 1 { 1 } else { 0 }];
    let list = api_until(asker, "$JS.API.STREAM.LIST", Value::Null, |list| {
        list["missing"] == json!(["ONE"])
            && list["streams"]
                .as_array()
                .is_some_and(|streams| streams.len() == 2)
    })
    .await;
    assert_eq!(list["total"], 2, "{list}");
    let (one, three) = (&list["streams"][0], &list["streams"][1]);
    assert_eq!(one["config"]["name"], "ONE", "{list}");
    assert_eq!(one["state"]["messages"], 0, "{one}");
    assert_eq!(one["state"]["consumer_count"], 0, "{one}");
    assert_eq!(one["cluster"]["name"], name.as_str(), "{one}");
    assert!(one["cluster"].get("leader").is_none(), "{one}");
    let replicas = one["cluster"]["replicas"].as_array().expect("replicas");
    assert_eq!(replicas.len(), 1, "{one}");
    assert_eq!(replicas[0]["name"], one_host.as_str(), "{one}");
    assert_eq!(replicas[0]["current"], false, "{one}");
    assert_eq!(replicas[0]["offline"], true, "{one}");
    assert_eq!(replicas[0]["active"], 0, "{one}");
    assert!(replicas[0]["peer"].is_string(), "{one}");
    assert_eq!(three["config"]["name"], "THREE", "{list}");
    assert_eq!(three["state"]["messages"], 3, "{three}");
}

differential!(lists_across_nodes);

/// On one server there is nothing to step down: 503 10010, before the
/// stream is even looked up.
async fn consumer_stepdown_needs_a_cluster(flavor: Flavor) {
    let server = Server::start(flavor, Options::jetstream());
    let client = server.connect().await;
    let answer = api(&client, "$JS.API.CONSUMER.LEADER.STEPDOWN.S.C", Value::Null).await;
    assert_eq!(
        answer,
        json!({"type": "io.nats.jetstream.api.v1.consumer_leader_stepdown_response",
               "error": {"code": 503, "err_code": 10010,
                         "description": "JetStream clustering support required"}})
    );
}

differential!(consumer_stepdown_needs_a_cluster);
