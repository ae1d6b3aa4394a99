//! The meta group's membership changed while the cluster runs, against
//! tern-server and nats-server alike: a fourth node joins a running
//! cluster and takes a stream's replica, `$JS.API.SERVER.REMOVE` removes a
//! node for good (its replica moves, nothing acknowledged is lost), and a
//! node whose store was wiped comes back under its name and catches up
//! while publishes run. nats-server takes SERVER.REMOVE from its system
//! account only, so both servers' clients here are a user `sys` (on
//! nats-server in the system account `SYS`; tern has no accounts yet and
//! takes it from anyone) and the others land in a JetStream account `APP`
//! (`no_auth_user`).

use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::{Flavor, Options, Server};
use serde_json::{json, Value};

use crate::cluster_jetstream::{
    api_when_ready, publish_through_failover, wait_replicas_current, CONVERGE_TIMEOUT,
};

/// nats-server: a system account for SERVER.REMOVE and an application
/// account with JetStream for everyone else; tern reads neither.
fn options() -> Options {
    Options {
        nats_config: "accounts {\n  SYS { users = [{user: sys, password: sys}] }\n  APP { jetstream: enabled, users = [{user: app, password: app}] }\n}\nsystem_account: SYS\nno_auth_user: app\n".into(),
        ..Options::jetstream()
    }
}

/// A client of the system account (`sys`) on `server`.
async fn system_client(server: &Server) -> async_nats::Client {
    server
        .connect_with(
            async_nats::ConnectOptions::with_user_and_password("sys".into(), "sys".into())
                .ignore_discovered_servers(),
        )
        .await
}

/// A JSON answer of a request through `client`, bounded by
/// [`CONVERGE_TIMEOUT`]: a removal is answered once the node's replicas
/// moved and the meta group applied it.
async fn request(client: &async_nats::Client, subject: &str, body: Value) -> Value {
    let payload = match body {
        Value::Null => bytes::Bytes::new(),
        Value::String(text) => bytes::Bytes::from(text),
        body => bytes::Bytes::from(body.to_string()),
    };
    let request = async_nats::Request::new()
        .payload(payload)
        .timeout(Some(CONVERGE_TIMEOUT));
    let reply = tokio::time::timeout(
        CONVERGE_TIMEOUT,
        client.send_request(subject.to_string(), request),
    )
    .await
    .unwrap_or_else(|_| panic!("{subject}: no answer"))
    .unwrap_or_else(|error| panic!("{subject}: {error}"));
    serde_json::from_slice(&reply.payload).expect("JSON")
}

/// The meta group as `server`'s `/jsz` shows it once its leader's `/jsz`
/// lists exactly `names` (besides itself) with every one current.
async fn wait_meta_members(servers: &[&Server], names: &[&str]) -> Value {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let expected: BTreeSet<String> = names.iter().map(|name| name.to_string()).collect();
    loop {
        for server in servers {
            let jsz = server.http_json("/jsz");
            let meta = &jsz["meta_cluster"];
            let Some(leader) = meta["leader"].as_str() else {
                continue;
            };
            // Only the leader's view says who is current.
            if server.varz()["server_name"] != leader {
                continue;
            }
            let replicas = meta["replicas"].as_array().cloned().unwrap_or_default();
            let mut members: BTreeSet<String> = replicas
                .iter()
                .filter_map(|replica| replica["name"].as_str().map(str::to_string))
                .collect();
            members.insert(leader.to_string());
            let current = replicas.iter().all(|replica| replica["current"] == true);
            if members == expected && current && meta["cluster_size"] == names.len() {
                return jsz;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the meta group never became {names:?} with every member current: {:#}",
            servers[0].http_json("/jsz")["meta_cluster"]
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the meta leader among `servers` sees `down` as not current.
async fn wait_meta_member_down(servers: &[&Server], down: &str) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        for server in servers {
            let jsz = server.http_json("/jsz");
            let meta = &jsz["meta_cluster"];
            if meta["leader"].is_null() || server.varz()["server_name"] != meta["leader"] {
                continue;
            }
            let replicas = meta["replicas"].as_array().cloned().unwrap_or_default();
            if replicas
                .iter()
                .any(|replica| replica["name"] == down && replica["current"] == false)
            {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{down} never seen down");
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Publishes `prefix-<n>` to `subject` through `client` until `stop`;
/// returns every acknowledged (sequence, payload).
fn spawn_publisher(
    client: async_nats::Client,
    subject: String,
    prefix: &'static str,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(u64, String)>> {
    tokio::spawn(async move {
        let mut acked = Vec::new();
        let mut number = 0;
        while !stop.load(Ordering::Relaxed) {
            let payload = format!("{prefix}-{number}");
            let sequence = publish_through_failover(&client, &subject, &payload).await;
            acked.push((sequence, payload));
            number += 1;
            // Paced: the point is publishes during the change, not load.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        acked
    })
}

/// Every acknowledged message is in `stream` at its acknowledged sequence,
/// read through `client` (direct from the leader, one by one).
async fn assert_every_ack_stored(
    client: &async_nats::Client,
    stream: &str,
    acked: &[(u64, String)],
) {
    assert!(!acked.is_empty(), "something was acknowledged");
    for (sequence, payload) in acked {
        let answer = api_when_ready(
            client,
            &format!("$JS.API.STREAM.MSG.GET.{stream}"),
            json!({ "seq": sequence }),
        )
        .await;
        let data = answer["message"]["data"].as_str().unwrap_or_else(|| {
            panic!("{stream}: acknowledged sequence {sequence} ({payload}) missing: {answer}")
        });
        assert_eq!(
            crate::cluster_jetstream::base64_decode(data),
            payload.as_bytes(),
            "{stream} #{sequence}"
        );
    }
}

/// A fourth node joins a running three-node cluster's meta group and is
/// eligible for placement (with a founding node down, a new R3 stream
/// lands on it); SERVER.REMOVE then removes it for good while publishes
/// run: the meta group is three again and the stream's replica moves back
/// to the founding node, with every acknowledged message. Bad requests get
/// nats-server's errors and change nothing.
async fn a_node_joins_and_is_removed(flavor: Flavor) {
    let mut cluster = Cluster::meshed(flavor, 3, options()).await;
    let client = cluster.connect(1).await;
    let ready = api_when_ready(&client, "$JS.API.INFO", Value::Null).await;
    assert!(ready.get("error").is_none(), "{ready}");
    let name = cluster.name.clone();
    let fourth = cluster.start_joiner("n4", &name, cluster.options().clone());
    {
        let nodes = [cluster.node(1), cluster.node(2), cluster.node(3), &fourth];
        wait_meta_members(&nodes, &["n1", "n2", "n3", "n4"]).await;
    }

    // With n3 down (and seen down by the meta leader), an R3 stream can
    // only go on n1, n2 and n4.
    cluster.kill(3);
    {
        let nodes = [cluster.node(1), cluster.node(2), &fourth];
        wait_meta_member_down(&nodes, "n3").await;
    }
    let created = api_when_ready(
        &client,
        "$JS.API.STREAM.CREATE.GROW",
        json!({"name": "GROW", "subjects": ["grow.>"], "num_replicas": 3}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    let info = wait_replicas_current(&client, "GROW").await;
    let mut placed: BTreeSet<String> = info["cluster"]["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .map(|replica| replica["name"].as_str().expect("a name").to_string())
        .collect();
    placed.insert(
        info["cluster"]["leader"]
            .as_str()
            .expect("a leader")
            .to_string(),
    );
    assert_eq!(
        placed,
        BTreeSet::from(["n1".into(), "n2".into(), "n4".into()])
    );
    cluster.restart(3);
    {
        let nodes = [cluster.node(1), cluster.node(2), cluster.node(3), &fourth];
        wait_meta_members(&nodes, &["n1", "n2", "n3", "n4"]).await;
    }
    // A stepdown to a node of the cluster that holds no replica: refused,
    // leadership stays.
    let answer = api_when_ready(
        &client,
        "$JS.API.STREAM.LEADER.STEPDOWN.GROW",
        json!({"placement": {"preferred": "n3"}}),
    )
    .await;
    assert_eq!(
        answer,
        json!({"type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response",
               "error": {"code": 400, "err_code": 10005, "description": "preferred server \"n3\" not known"}})
    );

    let stop = Arc::new(AtomicBool::new(false));
    let publisher = spawn_publisher(cluster.connect(2).await, "grow.a".into(), "g", stop.clone());
    let system = system_client(cluster.node(1)).await;
    // Bad requests first: nothing changes.
    let kind = "io.nats.jetstream.api.v1.meta_server_remove_response";
    let answer = request(&system, "$JS.API.SERVER.REMOVE", Value::Null).await;
    assert_eq!(
        answer,
        json!({"type": kind, "error": {"code": 400, "err_code": 10003, "description": "bad request"}})
    );
    let answer = request(&system, "$JS.API.SERVER.REMOVE", json!({"peer": "nowhere"})).await;
    assert_eq!(
        answer,
        json!({"type": kind, "error": {"code": 400, "err_code": 10044, "description": "server is not a member of the cluster"}})
    );
    let answer = request(
        &system,
        "$JS.API.SERVER.REMOVE",
        json!({"peer": "n4", "zone": "z"}),
    )
    .await;
    assert_eq!(answer["error"]["err_code"], 10025, "{answer}");
    {
        let nodes = [cluster.node(1), cluster.node(2), cluster.node(3), &fourth];
        wait_meta_members(&nodes, &["n1", "n2", "n3", "n4"]).await;
    }

    // The hard case: the node removed leads the stream.
    if crate::cluster_jetstream::stream_leader(&client, "GROW").await != 4 {
        let answer = api_when_ready(
            &client,
            "$JS.API.STREAM.LEADER.STEPDOWN.GROW",
            json!({"placement": {"preferred": "n4"}}),
        )
        .await;
        assert_eq!(answer["success"], true, "{answer}");
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        while crate::cluster_jetstream::stream_leader(&client, "GROW").await != 4 {
            assert!(Instant::now() < deadline, "n4 never led GROW");
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let answer = request(&system, "$JS.API.SERVER.REMOVE", json!({"peer": "n4"})).await;
    assert_eq!(answer, json!({"type": kind, "success": true}));
    {
        let nodes = [cluster.node(1), cluster.node(2), cluster.node(3)];
        wait_meta_members(&nodes, &["n1", "n2", "n3"]).await;
    }
    // The replica on n4 moves to n3 (the only node left without one).
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let info = wait_replicas_current(&client, "GROW").await;
        let mut placed: BTreeSet<String> = info["cluster"]["replicas"]
            .as_array()
            .expect("replicas")
            .iter()
            .map(|replica| replica["name"].as_str().expect("a name").to_string())
            .collect();
        placed.insert(
            info["cluster"]["leader"]
                .as_str()
                .expect("a leader")
                .to_string(),
        );
        if placed == BTreeSet::from(["n1".into(), "n2".into(), "n3".into()]) {
            break;
        }
        assert!(Instant::now() < deadline, "GROW never left n4: {info}");
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let acked = publisher.await.expect("the publisher");
    assert_every_ack_stored(&client, "GROW", &acked).await;
    drop(fourth);
}
differential!(a_node_joins_and_is_removed);

/// A node whose store is wiped comes back under its name while publishes
/// run (tern: under a new Raft identity, through membership changes; the
/// old one is never a voter again): the meta group is whole and current,
/// the stream's replicas too, and every acknowledged message is stored.
async fn a_wiped_node_rejoins(flavor: Flavor) {
    let mut cluster = Cluster::meshed(flavor, 3, options()).await;
    let client = cluster.connect(1).await;
    let created = api_when_ready(
        &client,
        "$JS.API.STREAM.CREATE.WIPE",
        json!({"name": "WIPE", "subjects": ["wipe.>"], "num_replicas": 3}),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    wait_replicas_current(&client, "WIPE").await;
    let before = cluster.node(1).http_json("/jsz");
    let old_peer = peer_of(&before, "n3");

    let stop = Arc::new(AtomicBool::new(false));
    let publisher = spawn_publisher(cluster.connect(2).await, "wipe.a".into(), "w", stop.clone());
    // Some publishes with n3 up, then it goes with its whole store.
    wait_stream_messages(&client, "WIPE", 20).await;
    cluster.replace(3);
    cluster.wait_formed().await;
    {
        let nodes = [cluster.node(1), cluster.node(2), cluster.node(3)];
        wait_meta_members(&nodes, &["n1", "n2", "n3"]).await;
    }
    wait_replicas_current(&client, "WIPE").await;
    if flavor == Flavor::Tern {
        let after = cluster.node(1).http_json("/jsz");
        let new_peer = peer_of(&after, "n3");
        assert_ne!(
            new_peer, old_peer,
            "n3's wiped store joined under a new Raft identity"
        );
    }
    let messages = stream_messages(&client, "WIPE").await;
    wait_stream_messages(&client, "WIPE", messages + 20).await;
    stop.store(true, Ordering::Relaxed);
    let acked = publisher.await.expect("the publisher");
    assert_every_ack_stored(&client, "WIPE", &acked).await;
    // n3 holds them too: it leads after a stepdown to it.
    let answer = api_when_ready(
        &client,
        "$JS.API.STREAM.LEADER.STEPDOWN.WIPE",
        json!({"placement": {"preferred": "n3"}}),
    )
    .await;
    assert_eq!(answer["success"], true, "{answer}");
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while crate::cluster_jetstream::stream_leader(&client, "WIPE").await != 3 {
        assert!(Instant::now() < deadline, "n3 never led WIPE");
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_every_ack_stored(&client, "WIPE", &acked).await;
}
differential!(a_wiped_node_rejoins);

/// The `peer` id `/jsz` (the meta leader's or a follower's) shows for
/// `name`; empty when it does not list it.
fn peer_of(jsz: &Value, name: &str) -> String {
    let meta = &jsz["meta_cluster"];
    if meta["leader"] == name {
        return meta["peer"].as_str().unwrap_or_default().to_string();
    }
    meta["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|replica| replica["name"] == name)
        .and_then(|replica| replica["peer"].as_str())
        .unwrap_or_default()
        .to_string()
}

async fn stream_messages(client: &async_nats::Client, stream: &str) -> u64 {
    let info = api_when_ready(
        client,
        &format!("$JS.API.STREAM.INFO.{stream}"),
        Value::Null,
    )
    .await;
    info["state"]["messages"].as_u64().unwrap_or(0)
}

async fn wait_stream_messages(client: &async_nats::Client, stream: &str, at_least: u64) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while stream_messages(client, stream).await < at_least {
        assert!(
            Instant::now() < deadline,
            "{stream} never held {at_least} messages"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// tern only: a node of another cluster name or shard count never joins
/// (its routes are refused), and removing a one-node cluster's only voter
/// is Raft's error; the group stays as it was.
#[tokio::test]
async fn strangers_and_the_last_node_change_nothing_tern() {
    let cluster = Cluster::meshed(Flavor::Tern, 3, options()).await;
    let stranger = cluster.start_joiner("n9", "elsewhere", cluster.options().clone());
    let other_shards = cluster.start_joiner(
        "n8",
        &cluster.name,
        Options {
            shards: Some(1),
            ..cluster.options().clone()
        },
    );
    common::cluster::wait_log(&stranger, "n9", "cluster name mismatch", common::TIMEOUT).await;
    common::cluster::wait_log(
        cluster.node(1),
        "n1",
        "shard count mismatch",
        common::TIMEOUT,
    )
    .await;
    let nodes = [cluster.node(1), cluster.node(2), cluster.node(3)];
    wait_meta_members(&nodes, &["n1", "n2", "n3"]).await;
    drop((stranger, other_shards));

    let single = Cluster::meshed(Flavor::Tern, 1, options()).await;
    let system = system_client(single.node(1)).await;
    let kind = "io.nats.jetstream.api.v1.meta_server_remove_response";
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let answer = request(&system, "$JS.API.SERVER.REMOVE", json!({"peer": "n1"})).await;
        if answer["error"]["err_code"] != 10008 {
            assert_eq!(
                answer,
                json!({"type": kind, "error": {"code": 500, "err_code": 10041, "description": "raft: cannot remove the last peer"}})
            );
            break;
        }
        assert!(Instant::now() < deadline, "no meta leader: {answer}");
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
