//! JetStream across a cluster, against tern-server and nats-server alike:
//! three nodes that each list every node in `--routes` (see
//! [`Cluster::meshed`]). A stream created through one node is placed on
//! one of them, takes publishes from every node, answers its API from
//! every node and serves a consumer on another node; deleting it from a
//! third node removes it everywhere. Then tern only: the meta group
//! survives a restart of every node (its checkpoint and journal), and a
//! cluster without a meta quorum answers 503 10008.

use crate::common;

use tern_it::loop_device::LoopDevice;

use std::time::{Duration, Instant};

use common::cluster::{wait_log, Cluster};
use common::{Flavor, Options, TIMEOUT};
use serde_json::{json, Value};

/// How long a cluster may take to answer again or converge. Longer than
/// the harness's [`TIMEOUT`]: with the whole suite's servers on 2 vCPUs,
/// elections (0.5–1 s timeouts) can follow one another before a leader
/// holds; a cluster that never converges still fails.
pub(crate) const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);

/// A JetStream API request through `client`; the JSON answer.
async fn api(client: &async_nats::Client, subject: &str, body: Value) -> Value {
    let payload = if body.is_null() {
        bytes::Bytes::new()
    } else {
        bytes::Bytes::from(body.to_string())
    };
    let reply = tokio::time::timeout(TIMEOUT, client.request(subject.to_string(), payload))
        .await
        .unwrap_or_else(|_| panic!("{subject}: no answer within {TIMEOUT:?}"))
        .unwrap_or_else(|error| panic!("{subject}: {error}"));
    serde_json::from_slice(&reply.payload)
        .unwrap_or_else(|error| panic!("{subject}: answer is not JSON: {error}"))
}

/// A JetStream API request with an empty body, waiting at most `wait`;
/// `Null` when no answer came.
async fn api_within(client: &async_nats::Client, subject: &str, wait: Duration) -> Value {
    match tokio::time::timeout(
        wait,
        client.request(subject.to_string(), bytes::Bytes::new()),
    )
    .await
    {
        Ok(Ok(reply)) => serde_json::from_slice(&reply.payload).unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

/// The API request, retried (bounded) while the cluster answers that
/// JetStream is not available yet (its meta group forming: 10008) or
/// does not answer at all.
pub(crate) async fn api_when_ready(
    client: &async_nats::Client,
    subject: &str,
    body: Value,
) -> Value {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let payload = bytes::Bytes::from(if body.is_null() {
            String::new()
        } else {
            body.to_string()
        });
        let answer = tokio::time::timeout(
            Duration::from_secs(2),
            client.request(subject.to_string(), payload),
        )
        .await;
        if let Ok(Ok(reply)) = &answer {
            let value: Value = serde_json::from_slice(&reply.payload).expect("JSON");
            if value["error"]["err_code"] != 10008 {
                return value;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{subject}: JetStream never became available: {answer:?}"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Publishes with a PubAck, retried (bounded) while no node has told this
/// one about the stream yet (no responders).
pub(crate) async fn publish_acked(
    client: &async_nats::Client,
    subject: &str,
    payload: &str,
) -> Value {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let answer = tokio::time::timeout(
            Duration::from_secs(2),
            client.request(subject.to_string(), payload.to_string().into()),
        )
        .await;
        match answer {
            Ok(Ok(reply)) => {
                return serde_json::from_slice(&reply.payload).expect("a PubAck is JSON")
            }
            Ok(Err(error)) if error.kind() == async_nats::RequestErrorKind::NoResponders => {}
            other => panic!("publish to {subject}: {other:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "publish to {subject}: the stream never took it"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn stream_config(name: &str) -> Value {
    json!({
        "name": name,
        "subjects": [format!("{}.>", name.to_lowercase())],
        "storage": "file",
        "num_replicas": 1,
    })
}

async fn r1_stream_serves_every_node(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let (one, two, three) = (
        cluster.connect(1).await,
        cluster.connect(2).await,
        cluster.connect(3).await,
    );
    let created = api_when_ready(
        &two,
        "$JS.API.STREAM.CREATE.ORDERS",
        stream_config("ORDERS"),
    )
    .await;
    assert_eq!(
        created["type"], "io.nats.jetstream.api.v1.stream_create_response",
        "{created}"
    );
    assert!(created.get("error").is_none(), "{created}");
    assert_eq!(created["config"]["name"], "ORDERS");
    assert_eq!(created["state"]["messages"], 0);
    let host = created["cluster"]["leader"].as_str().map(str::to_string);

    // Publishes from every node reach the stream, in order.
    for (number, client) in [(1, &one), (2, &two), (3, &three)] {
        for index in 0..5 {
            let ack = publish_acked(client, "orders.new", &format!("n{number}-{index}")).await;
            assert_eq!(ack["stream"], "ORDERS", "{ack}");
            assert!(ack.get("error").is_none(), "{ack}");
        }
    }
    // Every node answers for it.
    for client in [&one, &two, &three] {
        let info = api(client, "$JS.API.STREAM.INFO.ORDERS", Value::Null).await;
        assert_eq!(info["state"]["messages"], 15, "{info}");
        assert_eq!(info["state"]["last_seq"], 15, "{info}");
        if let Some(host) = &host {
            assert_eq!(
                info["cluster"]["leader"].as_str(),
                Some(host.as_str()),
                "{info}"
            );
        }
        let names = api(client, "$JS.API.STREAM.NAMES", Value::Null).await;
        assert_eq!(names["streams"], json!(["ORDERS"]), "{names}");
        let message = api(client, "$JS.API.STREAM.MSG.GET.ORDERS", json!({"seq": 6})).await;
        assert_eq!(message["message"]["seq"], 6, "{message}");
    }
    // A consumer made through node 1 delivers to a client on node 1.
    let consumer = api(
        &one,
        "$JS.API.CONSUMER.CREATE.ORDERS.PULL",
        json!({"stream_name": "ORDERS", "config": {"durable_name": "PULL", "ack_policy": "explicit"}}),
    )
    .await;
    assert!(consumer.get("error").is_none(), "{consumer}");
    let context = async_nats::jetstream::new(one.clone());
    let stream = context
        .get_stream("ORDERS")
        .await
        .expect("the stream, from node 1");
    let pull: async_nats::jetstream::consumer::PullConsumer =
        stream.get_consumer("PULL").await.expect("the consumer");
    let mut received = Vec::new();
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while received.len() < 15 {
        assert!(Instant::now() < deadline, "consumed only {received:?}");
        let mut batch = pull
            .fetch()
            .max_messages(15 - received.len())
            .expires(Duration::from_secs(1))
            .messages()
            .await
            .expect("a fetch");
        use futures::StreamExt;
        while let Some(message) = batch.next().await {
            let message = message.expect("a message");
            received.push(String::from_utf8_lossy(&message.payload).into_owned());
            message.ack().await.expect("an ack");
        }
    }
    let expected: Vec<String> = (1..=3)
        .flat_map(|number| (0..5).map(move |index| format!("n{number}-{index}")))
        .collect();
    assert_eq!(received, expected);

    // Deleted through node 3: gone everywhere.
    let deleted = api(&three, "$JS.API.STREAM.DELETE.ORDERS", Value::Null).await;
    assert_eq!(deleted["success"], true, "{deleted}");
    for client in [&one, &two, &three] {
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            // A node may not answer while the deletion reaches it
            // (nats-server): each try waits a little.
            let info =
                api_within(client, "$JS.API.STREAM.INFO.ORDERS", Duration::from_secs(2)).await;
            if info["error"]["err_code"] == 10059 {
                assert_eq!(info["error"]["description"], "stream not found");
                break;
            }
            assert!(Instant::now() < deadline, "still there: {info}");
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn r1_stream_serves_every_node_tern() {
    r1_stream_serves_every_node(Flavor::Tern).await;
}

#[tokio::test]
async fn r1_stream_serves_every_node_nats() {
    r1_stream_serves_every_node(Flavor::Nats).await;
}

/// The catalog lives in the meta group: after every node restarts (from
/// its checkpoint and journal) the streams are still known, still placed,
/// and keep their messages.
#[tokio::test]
async fn meta_group_survives_restarts_tern() {
    let mut cluster = Cluster::meshed(Flavor::Tern, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    for name in ["A", "B", "C", "D"] {
        let created = api_when_ready(
            &client,
            &format!("$JS.API.STREAM.CREATE.{name}"),
            stream_config(name),
        )
        .await;
        assert!(created.get("error").is_none(), "{created}");
        publish_acked(&client, &format!("{}.x", name.to_lowercase()), name).await;
    }
    drop(client);
    for node in 1..=3 {
        cluster.restart(node);
    }
    cluster.wait_formed().await;
    let client = cluster.connect(2).await;
    for name in ["A", "B", "C", "D"] {
        let info =
            api_when_ready(&client, &format!("$JS.API.STREAM.INFO.{name}"), Value::Null).await;
        assert_eq!(
            info["state"]["messages"],
            1,
            "{name}: {info}\n{}",
            cluster.logs()
        );
    }
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.E", stream_config("E")).await;
    assert!(created.get("error").is_none(), "{created}");
    let taken = api(
        &client,
        "$JS.API.STREAM.CREATE.F",
        json!({"name": "F", "subjects": ["a.>"]}),
    )
    .await;
    assert_eq!(taken["error"]["err_code"], 10065, "overlaps A: {taken}");
}

/// Two of three nodes down: no meta quorum, and the API says so with
/// nats-server's 503 10008 instead of hanging.
#[tokio::test]
async fn no_meta_quorum_answers_unavailable_tern() {
    let mut cluster = Cluster::meshed(Flavor::Tern, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.Q", stream_config("Q")).await;
    assert!(created.get("error").is_none(), "{created}");
    cluster.kill(2);
    cluster.kill(3);
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        // A create the old leader took before it noticed it is alone is
        // never answered (as in nats-server): each try waits a little.
        let answer = tokio::time::timeout(
            Duration::from_secs(2),
            client.request(
                "$JS.API.STREAM.CREATE.R",
                stream_config("R").to_string().into(),
            ),
        )
        .await;
        let answer: Value = match answer {
            Ok(Ok(reply)) => serde_json::from_slice(&reply.payload).expect("JSON"),
            _ => Value::Null,
        };
        if answer["error"]["err_code"] == 10008 {
            assert_eq!(answer["error"]["code"], 503);
            assert_eq!(
                answer["error"]["description"],
                "JetStream system temporarily unavailable"
            );
            break;
        }
        assert!(Instant::now() < deadline, "still answering: {answer}");
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Publishes with a PubAck, retried (bounded) through what a failover
/// shows a client: no responders, a timeout, or 503 while a new leader
/// takes office. Returns the acknowledged sequence. Each call's retries
/// carry one `Nats-Msg-Id`, so a retry of a publish whose PubAck was lost
/// is not stored twice.
pub(crate) async fn publish_through_failover(
    client: &async_nats::Client,
    subject: &str,
    payload: &str,
) -> u64 {
    let deadline = Instant::now() + TIMEOUT * 2;
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", client.new_inbox().as_str());
    loop {
        let answer = tokio::time::timeout(
            Duration::from_secs(2),
            client.request_with_headers(
                subject.to_string(),
                headers.clone(),
                payload.to_string().into(),
            ),
        )
        .await;
        if let Ok(Ok(reply)) = answer {
            let ack: Value = serde_json::from_slice(&reply.payload).expect("a PubAck is JSON");
            // An error (e.g. 10009 from a replica that just stopped
            // leading) carries `"seq":0`: retried.
            if ack.get("error").is_none() {
                return ack["seq"].as_u64().expect("a PubAck has a sequence");
            }
        }
        assert!(
            Instant::now() < deadline,
            "publish to {subject}: never acknowledged"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Fetches everything `durable` has for a client on its node, acking each.
async fn drain(
    client: &async_nats::Client,
    stream: &str,
    durable: &str,
    count: usize,
) -> Vec<String> {
    use futures::StreamExt;
    let context = async_nats::jetstream::new(client.clone());
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let mut received = Vec::new();
    while received.len() < count {
        assert!(Instant::now() < deadline, "consumed only {received:?}");
        let Ok(stream) = context.get_stream(stream).await else {
            continue;
        };
        let Ok(pull) = stream
            .get_consumer::<async_nats::jetstream::consumer::pull::Config>(durable)
            .await
        else {
            continue;
        };
        let Ok(mut batch) = pull
            .fetch()
            .max_messages(count - received.len())
            .expires(Duration::from_secs(1))
            .messages()
            .await
        else {
            continue;
        };
        while let Some(Ok(message)) = batch.next().await {
            received.push(String::from_utf8_lossy(&message.payload).into_owned());
            let _ = message.double_ack().await;
        }
    }
    received
}

async fn r3_stream_replicates(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let (one, two, three) = (
        cluster.connect(1).await,
        cluster.connect(2).await,
        cluster.connect(3).await,
    );
    let mut config = stream_config("EVENTS");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&two, "$JS.API.STREAM.CREATE.EVENTS", config).await;
    assert!(created.get("error").is_none(), "{created}");
    assert_eq!(created["config"]["num_replicas"], 3, "{created}");
    for (number, client) in [(1, &one), (2, &two), (3, &three)] {
        for index in 0..4 {
            let sequence =
                publish_through_failover(client, "events.a", &format!("n{number}-{index}")).await;
            assert_eq!(sequence, (number - 1) * 4 + index + 1);
        }
    }
    // Every node answers with the leader's view: the other two replicas,
    // current once they have everything.
    for client in [&one, &two, &three] {
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            // 503 while a leader changes (an election under load) is retried.
            let info = api_when_ready(client, "$JS.API.STREAM.INFO.EVENTS", Value::Null).await;
            assert_eq!(info["state"]["messages"], 12, "{info}");
            assert_eq!(info["cluster"]["name"], cluster.name.as_str(), "{info}");
            let leader = info["cluster"]["leader"]
                .as_str()
                .expect("a leader")
                .to_string();
            let replicas = info["cluster"]["replicas"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut names: Vec<String> = replicas
                .iter()
                .map(|replica| replica["name"].as_str().unwrap_or_default().to_string())
                .collect();
            names.push(leader);
            names.sort();
            assert_eq!(names, ["n1", "n2", "n3"], "{info}");
            if replicas.iter().all(|replica| replica["current"] == true) {
                break;
            }
            assert!(Instant::now() < deadline, "replicas never current: {info}");
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let consumer = api(
        &three,
        "$JS.API.CONSUMER.CREATE.EVENTS.C",
        json!({"stream_name": "EVENTS", "config": {"durable_name": "C", "ack_policy": "explicit"}}),
    )
    .await;
    assert!(consumer.get("error").is_none(), "{consumer}");
    let received = drain(&three, "EVENTS", "C", 12).await;
    let expected: Vec<String> = (1..=3)
        .flat_map(|number| (0..4).map(move |index| format!("n{number}-{index}")))
        .collect();
    assert_eq!(received, expected);

    // A stepdown hands the stream to another replica, which keeps it all.
    let before = api_when_ready(&one, "$JS.API.STREAM.INFO.EVENTS", Value::Null).await;
    let old_leader = before["cluster"]["leader"]
        .as_str()
        .expect("a leader")
        .to_string();
    let stepdown = api_when_ready(&one, "$JS.API.STREAM.LEADER.STEPDOWN.EVENTS", Value::Null).await;
    assert_eq!(
        stepdown,
        json!({"type": "io.nats.jetstream.api.v1.stream_leader_stepdown_response", "success": true})
    );
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let info = api_when_ready(&two, "$JS.API.STREAM.INFO.EVENTS", Value::Null).await;
        let leader = info["cluster"]["leader"].as_str().unwrap_or_default();
        if !leader.is_empty() && leader != old_leader {
            assert_eq!(info["state"]["messages"], 12, "{info}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the leader stayed {old_leader}: {info}"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    publish_through_failover(&three, "events.a", "after-stepdown").await;

    // An update of the replicated stream, through a node of any role: every
    // replica takes it through the stream's log, so publishes to a new
    // subject reach whichever replica leads next.
    let mut updated = stream_config("EVENTS");
    updated["num_replicas"] = json!(3);
    updated["subjects"] = json!(["events.>", "more.>"]);
    updated["max_msgs"] = json!(1000);
    let answer = api_when_ready(&one, "$JS.API.STREAM.UPDATE.EVENTS", updated).await;
    assert_eq!(
        answer["type"], "io.nats.jetstream.api.v1.stream_update_response",
        "{answer}"
    );
    assert_eq!(
        answer["config"]["subjects"],
        json!(["events.>", "more.>"]),
        "{answer}"
    );
    assert_eq!(answer["config"]["max_msgs"], 1000, "{answer}");
    assert_eq!(answer["state"]["messages"], 13, "{answer}");
    publish_through_failover(&two, "more.x", "after-update").await;
    let stepdown = api_when_ready(&one, "$JS.API.STREAM.LEADER.STEPDOWN.EVENTS", Value::Null).await;
    assert_eq!(stepdown["success"], true, "{stepdown}");
    publish_through_failover(&three, "more.y", "after-update-stepdown").await;
    let info = api_when_ready(&three, "$JS.API.STREAM.INFO.EVENTS", Value::Null).await;
    assert_eq!(info["config"]["max_msgs"], 1000, "{info}");
    assert_eq!(info["state"]["messages"], 15, "{info}");
    if flavor == Flavor::Nats {
        // nats-server takes META.LEADER.STEPDOWN from its system account
        // only; tern has no accounts yet and takes it from anyone.
        return;
    }
    let stepdown = api_when_ready(&two, "$JS.API.META.LEADER.STEPDOWN", Value::Null).await;
    assert_eq!(
        stepdown,
        json!({"type": "io.nats.jetstream.api.v1.meta_leader_stepdown_response", "success": true})
    );
    // The catalog answers again under its new leader.
    let names = api_when_ready(&three, "$JS.API.STREAM.NAMES", Value::Null).await;
    assert_eq!(names["streams"], json!(["EVENTS"]), "{names}");
}

#[tokio::test]
async fn r3_stream_replicates_tern() {
    r3_stream_replicates(Flavor::Tern).await;
}

#[tokio::test]
async fn r3_stream_replicates_nats() {
    r3_stream_replicates(Flavor::Nats).await;
}

/// The leader of an R3 stream is killed under publishes: a new leader
/// takes over, every acknowledged message is there once and in order, and
/// the old leader catches up when it returns.
#[tokio::test]
async fn r3_leader_killed_keeps_every_acked_message_tern() {
    let mut cluster = Cluster::meshed(Flavor::Tern, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("FAIL");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.FAIL", config).await;
    assert!(created.get("error").is_none(), "{created}");
    let mut acked: Vec<(u64, String)> = Vec::new();
    let mut kills = 0;
    for round in 0..3 {
        for index in 0..20 {
            let payload = format!("r{round}-{index}");
            let sequence = publish_through_failover(&client, "fail.x", &payload).await;
            acked.push((sequence, payload));
        }
        // The leader, moved off node 1 (the client's) by stepdowns.
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        let node = loop {
            let info = api_when_ready(&client, "$JS.API.STREAM.INFO.FAIL", Value::Null).await;
            let leader = info["cluster"]["leader"].as_str().unwrap_or_default();
            let node: usize = leader.trim_start_matches('n').parse().unwrap_or(0);
            if node > 1 {
                break node;
            }
            assert!(
                Instant::now() < deadline,
                "the leader never left n1: {info}"
            );
            if node == 1 {
                api_when_ready(&client, "$JS.API.STREAM.LEADER.STEPDOWN.FAIL", Value::Null).await;
            }
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        kills += 1;
        cluster.kill(node);
        for index in 0..20 {
            let payload = format!("r{round}-after-{index}");
            let sequence = publish_through_failover(&client, "fail.x", &payload).await;
            acked.push((sequence, payload));
        }
        cluster.restart(node);
        cluster.wait_formed().await;
    }
    assert_eq!(kills, 3);
    // Sequences are contiguous and each acknowledged message is stored at
    // its sequence, once.
    let mut sequences: Vec<u64> = acked.iter().map(|(sequence, _)| *sequence).collect();
    sequences.sort_unstable();
    sequences.dedup();
    assert_eq!(
        sequences.len(),
        acked.len(),
        "a sequence acknowledged twice"
    );
    for (sequence, payload) in &acked {
        let message = api_when_ready(
            &client,
            "$JS.API.STREAM.MSG.GET.FAIL",
            json!({ "seq": sequence }),
        )
        .await;
        let data = message["message"]["data"].as_str().unwrap_or_default();
        use base64::Engine;
        let data = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap_or_default();
        assert_eq!(
            String::from_utf8_lossy(&data),
            *payload,
            "seq {sequence}: {message}"
        );
    }
    // Every replica catches up.
    let info = wait_replicas_current(&client, "FAIL").await;
    assert_eq!(info["state"]["messages"], acked.len(), "{info}");
}

/// A node that was down while the meta leader compacted its log past what
/// the node has (more than 64 catalog changes) gets the meta snapshot: on
/// return it knows every stream created meanwhile, and forgets the ones
/// deleted.
#[tokio::test]
async fn meta_snapshot_catches_up_a_returning_node_tern() {
    let mut cluster = Cluster::meshed(Flavor::Tern, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.OLD", stream_config("OLD")).await;
    assert!(created.get("error").is_none(), "{created}");
    cluster.kill(3);
    // Nodes 1 and 2 have seen it go (its routes closed), so nothing new is
    // placed on it: a create placed on a node that died before answering
    // is never answered (docs/cluster-jetstream.md, "Not yet").
    cluster.wait_formed().await;
    let deleted = api_when_ready(&client, "$JS.API.STREAM.DELETE.OLD", Value::Null).await;
    // Answered by the meta leader even when the stream's node is the one down.
    assert_eq!(deleted["success"], true, "{deleted}");
    let names: Vec<String> = (0..70).map(|index| format!("S{index}")).collect();
    for name in &names {
        // Memory streams: the catalog is what is tested, not 70 stores.
        let mut config = stream_config(name);
        config["storage"] = json!("memory");
        let created =
            api_when_ready(&client, &format!("$JS.API.STREAM.CREATE.{name}"), config).await;
        assert!(created.get("error").is_none(), "{created}");
    }
    cluster.restart(3);
    cluster.wait_formed().await;
    // Its log is behind the leader's compaction: it catches up by snapshot.
    wait_log(
        cluster.node(3),
        "n3",
        "installed the leader's snapshot",
        TIMEOUT,
    )
    .await;
    let three = cluster.connect(3).await;
    // Node 3 answers for a stream it never saw created (held by node 1 or
    // 2, which it learnt from the snapshot), and not for the deleted one.
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let info = api_when_ready(&three, "$JS.API.STREAM.INFO.S69", Value::Null).await;
        if info["config"]["name"] == "S69" {
            break;
        }
        assert!(Instant::now() < deadline, "node 3 never learnt S69: {info}");
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its own copy of the deleted stream goes once it learnt the deletion.
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let old = api_when_ready(&three, "$JS.API.STREAM.INFO.OLD", Value::Null).await;
        if old["error"]["err_code"] == 10059 {
            break;
        }
        assert!(Instant::now() < deadline, "node 3 still has OLD: {old}");
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed = api_when_ready(&three, "$JS.API.STREAM.NAMES", Value::Null).await;
    assert_eq!(listed["total"], 70, "{listed}");
}

/// A KV bucket with three replicas: written through one node, read through
/// the others (direct gets reach the stream's leader from every node).
async fn r3_kv_bucket_across_nodes(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let (one, two, three) = (
        cluster.connect(1).await,
        cluster.connect(2).await,
        cluster.connect(3).await,
    );
    // Wait for the meta group before the client library's first call.
    api_when_ready(&one, "$JS.API.STREAM.NAMES", Value::Null).await;
    let context = async_nats::jetstream::new(one.clone());
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let bucket = loop {
        match context
            .create_key_value(async_nats::jetstream::kv::Config {
                bucket: "CONFIG".into(),
                history: 3,
                num_replicas: 3,
                ..Default::default()
            })
            .await
        {
            Ok(bucket) => break bucket,
            Err(error) => assert!(Instant::now() < deadline, "create bucket: {error}"),
        }
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    drop(bucket);
    let writer = async_nats::jetstream::new(two.clone())
        .get_key_value("CONFIG")
        .await
        .expect("the bucket, through node 2");
    for value in ["a", "b", "c"] {
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        while let Err(error) = writer.put("mode", value.into()).await {
            assert!(Instant::now() < deadline, "put: {error}");
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let reader = async_nats::jetstream::new(three.clone())
        .get_key_value("CONFIG")
        .await
        .expect("the bucket, through node 3");
    let entry = reader
        .entry("mode")
        .await
        .expect("a read")
        .expect("the key");
    assert_eq!(&entry.value[..], b"c");
    assert_eq!(entry.revision, 3);
    let info = api_when_ready(&three, "$JS.API.STREAM.INFO.KV_CONFIG", Value::Null).await;
    assert_eq!(info["config"]["num_replicas"], 3, "{info}");
    assert_eq!(info["state"]["messages"], 3, "{info}");
}

#[tokio::test]
async fn r3_kv_bucket_across_nodes_tern() {
    r3_kv_bucket_across_nodes(Flavor::Tern).await;
}

#[tokio::test]
async fn r3_kv_bucket_across_nodes_nats() {
    r3_kv_bucket_across_nodes(Flavor::Nats).await;
}

/// Damage to the meta checkpoint of a node that is the meta group's only
/// voter keeps JetStream down there with the reason (it must not start as
/// new, with an empty catalog, and vote again in a term it voted in; with
/// other voters it would rejoin from them, see
/// `r3_node_with_a_lost_meta_state_rejoins_from_its_peers_tern`): a
/// flipped byte fails its checksum; a deleted file, with the journal and
/// the votes file still holding meta records, is refused too.
#[tokio::test]
async fn damaged_meta_state_of_a_lone_voter_keeps_jetstream_down_tern() {
    for damage in ["flip", "delete"] {
        let port = common::cluster::free_port();
        let mut options = Options::jetstream();
        options.extra_args = vec![
            "-n".into(),
            "solo".into(),
            "--cluster".into(),
            format!("nats://127.0.0.1:{port}"),
            "--cluster_name".into(),
            format!("damage-{damage}-{}", std::process::id()),
            "--routes".into(),
            format!("nats://127.0.0.1:{port}"),
        ];
        let server = common::Server::start(Flavor::Tern, options);
        let client = server.connect().await;
        let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.M", stream_config("M")).await;
        assert!(created.get("error").is_none(), "{created}");
        drop(client);
        let stopped = server.into_stopped(true);
        let state = stopped.store_dir().join("jetstream/meta/state");
        match damage {
            "flip" => {
                let mut bytes = std::fs::read(&state).expect("the meta state");
                bytes[40] ^= 0x01;
                std::fs::write(&state, bytes).expect("write");
            }
            _ => std::fs::remove_file(&state).expect("delete"),
        }
        let expected = match damage {
            "flip" => "corrupt",
            _ => "is missing but the journal or the votes file hold meta group records",
        };
        let server = stopped.start();
        wait_log(&server, damage, expected, CONVERGE_TIMEOUT).await;
        wait_log(
            &server,
            damage,
            "this node is the meta group's only voter",
            CONVERGE_TIMEOUT,
        )
        .await;
        // The meta group does not run: no create is answered with success
        // (the stream itself, held here, still serves).
        let client = server.connect().await;
        let created = api(&client, "$JS.API.STREAM.CREATE.N", stream_config("N")).await;
        assert!(created.get("error").is_some(), "{damage}: {created}");
        let kept = std::fs::read_dir(server.store_dir().join("jetstream/meta"))
            .expect("the meta directory")
            .filter_map(|entry| entry.ok())
            .filter(|entry| {
                entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with("state.damaged.")
            })
            .count();
        assert_eq!(kept, usize::from(damage == "flip"), "{damage}");
    }
}

/// The node of a replicated stream's leader, from STREAM.INFO through
/// `client` (bounded wait until one is known).
pub(crate) async fn stream_leader(client: &async_nats::Client, stream: &str) -> usize {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let info = api_when_ready(
            client,
            &format!("$JS.API.STREAM.INFO.{stream}"),
            Value::Null,
        )
        .await;
        let leader = info["cluster"]["leader"].as_str().unwrap_or_default();
        if let Ok(node) = leader.trim_start_matches('n').parse::<usize>() {
            return node;
        }
        assert!(Instant::now() < deadline, "no leader: {info}");
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every replica of `stream` is current; its info.
pub(crate) async fn wait_replicas_current(client: &async_nats::Client, stream: &str) -> Value {
    wait_replicas_current_at(client, &format!("$JS.API.STREAM.INFO.{stream}")).await
}

/// The answer of `info_subject` (a STREAM.INFO or CONSUMER.INFO of an R3
/// group) once both followers are current.
pub(crate) async fn wait_replicas_current_at(
    client: &async_nats::Client,
    info_subject: &str,
) -> Value {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let info = api_when_ready(client, info_subject, Value::Null).await;
        let replicas = info["cluster"]["replicas"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if replicas.len() == 2 && replicas.iter().all(|replica| replica["current"] == true) {
            return info;
        }
        assert!(Instant::now() < deadline, "replicas never current: {info}");
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A replica down while the leader compacted its log past what it holds
/// (more than the 20 000 entries a leader retains) catches up by the
/// stream's snapshot, read from the leader's live store while publishes
/// go on: on return it installs it into a new block-store directory, and
/// once it leads it serves every acknowledged message, not the deleted
/// ones, and the durable consumer's acks.
#[tokio::test]
async fn r3_replica_behind_the_compacted_log_catches_up_by_snapshot_tern() {
    use futures::StreamExt;
    const MESSAGES: usize = 23_000;
    let mut cluster = Cluster::meshed(Flavor::Tern, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("SNAP");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.SNAP", config).await;
    assert!(created.get("error").is_none(), "{created}");
    let consumer = api_when_ready(
        &client,
        "$JS.API.CONSUMER.CREATE.SNAP.C",
        json!({"stream_name": "SNAP", "config": {"durable_name": "C", "ack_policy": "explicit"}}),
    )
    .await;
    assert!(consumer.get("error").is_none(), "{consumer}");
    // The replica to leave behind: neither the leader nor the client's node.
    let leader = stream_leader(&client, "SNAP").await;
    let behind = (2..=3)
        .find(|node| *node != leader)
        .expect("two candidates");
    cluster.kill(behind);
    let context = async_nats::jetstream::new(client.clone());
    let mut acked = Vec::with_capacity(MESSAGES);
    for chunk in 0..MESSAGES / 500 {
        let mut pending = Vec::with_capacity(500);
        for index in chunk * 500..(chunk + 1) * 500 {
            let payload = format!("m{index}");
            let ack = context
                .publish("snap.x", payload.clone().into())
                .await
                .expect("published");
            pending.push((payload, ack));
        }
        for (payload, ack) in pending {
            let ack = tokio::time::timeout(CONVERGE_TIMEOUT, ack)
                .await
                .expect("acknowledged in time")
                .expect("acknowledged");
            acked.push((ack.sequence, payload));
        }
    }
    // Removals inside the snapshot's range, and consumer progress in its
    // header.
    let deleted: Vec<u64> = vec![2, 500, 10_001];
    for sequence in &deleted {
        let answer = api_when_ready(
            &client,
            "$JS.API.STREAM.MSG.DELETE.SNAP",
            json!({ "seq": sequence }),
        )
        .await;
        assert_eq!(answer["success"], true, "{answer}");
    }
    let stream = context.get_stream("SNAP").await.expect("stream");
    let pull = stream
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>("C")
        .await
        .expect("consumer");
    let mut batch = pull
        .fetch()
        .max_messages(100)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .expect("fetch");
    let mut consumed = 0;
    while let Some(message) = batch.next().await {
        message.expect("message").double_ack().await.expect("acked");
        consumed += 1;
    }
    assert_eq!(consumed, 100);
    // Killed at each step of its install first: staged (the checkpoint
    // still names the old store, the journal voids the entries before the
    // install), then switched (the checkpoint names the new store, the
    // old one and the journal not cleaned yet). Each restart recovers.
    for point in ["snapshot-staged", "snapshot-switched"] {
        let options = cluster.node_mut(behind).options_mut();
        options.env = vec![("TERN_TEST_CRASH_AT".into(), point.into())];
        cluster.restart(behind);
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        while cluster.node_mut(behind).is_running() {
            assert!(
                Instant::now() < deadline,
                "n{behind} never reached {point}: {}",
                cluster.node(behind).log_tail()
            );
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            cluster
                .node(behind)
                .log_tail()
                .contains(&format!("TERN_TEST_CRASH_AT={point}")),
            "{}",
            cluster.node(behind).log_tail()
        );
    }
    cluster.node_mut(behind).options_mut().env.clear();
    cluster.restart(behind);
    cluster.wait_formed().await;
    let info = wait_replicas_current(&client, "SNAP").await;
    let expected_messages = MESSAGES - deleted.len();
    assert_eq!(info["state"]["messages"], expected_messages, "{info}");
    // Leadership moved to the returned replica: it serves from what it
    // installed.
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while stream_leader(&client, "SNAP").await != behind {
        assert!(Instant::now() < deadline, "n{behind} never led");
        api_when_ready(&client, "$JS.API.STREAM.LEADER.STEPDOWN.SNAP", Value::Null).await;
        wait_replicas_current(&client, "SNAP").await;
    }
    let info = api_when_ready(&client, "$JS.API.STREAM.INFO.SNAP", Value::Null).await;
    assert_eq!(info["state"]["messages"], expected_messages, "{info}");
    assert_eq!(info["state"]["last_seq"], MESSAGES, "{info}");
    let consumer_info = api_when_ready(&client, "$JS.API.CONSUMER.INFO.SNAP.C", Value::Null).await;
    assert_eq!(
        consumer_info["ack_floor"]["stream_seq"], 101,
        "the consumer's acks survive the snapshot: {consumer_info}"
    );
    // Every acknowledged message, read in order from the new leader.
    let ordered = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default())
        .await
        .expect("ordered consumer");
    let mut messages = ordered.messages().await.expect("messages");
    let mut expected = acked
        .iter()
        .filter(|(sequence, _)| !deleted.contains(sequence));
    for _ in 0..expected_messages {
        let message = tokio::time::timeout(CONVERGE_TIMEOUT, messages.next())
            .await
            .expect("in time")
            .expect("a message")
            .expect("readable");
        let (sequence, payload) = expected.next().expect("no more than acknowledged");
        let info = message.info().expect("a JetStream message");
        assert_eq!(info.stream_sequence, *sequence);
        assert_eq!(String::from_utf8_lossy(&message.payload), *payload);
    }
    // Its store is the installed one (`messages.<index>/`, named by the
    // checkpoint), and it reopens from it after a SIGKILL.
    let stream_directory = cluster
        .node(behind)
        .store_dir()
        .join("jetstream/streams/SNAP");
    let directories: Vec<String> = std::fs::read_dir(&stream_directory)
        .expect("stream directory")
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| name.starts_with("messages"))
        .collect();
    assert!(
        directories.len() == 1 && directories[0].starts_with("messages."),
        "{directories:?}"
    );
    cluster.kill(behind);
    cluster.restart(behind);
    cluster.wait_formed().await;
    let info = wait_replicas_current(&client, "SNAP").await;
    assert_eq!(info["state"]["messages"], expected_messages, "{info}");
    assert!(
        !cluster.node(behind).log_tail().contains("offline"),
        "{}",
        cluster.node(behind).log_tail()
    );
    // The installed store deleted while the node is down: found at start
    // (the checkpoint names its files), that replica rebuilds from its
    // peers (the damaged files kept aside), while the other two keep the
    // stream writable; then it leads, with every message and the
    // consumer's acks.
    cluster.kill(behind);
    std::fs::remove_dir_all(stream_directory.join(&directories[0])).expect("removed");
    cluster.restart(behind);
    wait_log(
        cluster.node(behind),
        &format!("n{behind}"),
        "this replica rebuilds from its peers",
        CONVERGE_TIMEOUT,
    )
    .await;
    publish_through_failover(&client, "snap.x", "after-damage").await;
    let kept = cluster.node(behind).store_dir().join("jetstream/damaged");
    let kept: Vec<String> = std::fs::read_dir(&kept)
        .expect("the damaged copy is kept")
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    assert!(kept.len() == 1 && kept[0].starts_with("SNAP."), "{kept:?}");
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while stream_leader(&client, "SNAP").await != behind {
        assert!(
            Instant::now() < deadline,
            "the rebuilt n{behind} never led: {}",
            cluster.node(behind).log_tail()
        );
        wait_replicas_current(&client, "SNAP").await;
        api_when_ready(&client, "$JS.API.STREAM.LEADER.STEPDOWN.SNAP", Value::Null).await;
    }
    let info = api_when_ready(&client, "$JS.API.STREAM.INFO.SNAP", Value::Null).await;
    assert_eq!(info["state"]["messages"], expected_messages + 1, "{info}");
    assert_eq!(info["state"]["last_seq"], MESSAGES + 1, "{info}");
    let consumer_info = api_when_ready(&client, "$JS.API.CONSUMER.INFO.SNAP.C", Value::Null).await;
    assert_eq!(
        consumer_info["ack_floor"]["stream_seq"],
        101,
        "the consumer's acks survive the rebuild: {consumer_info}\n{}",
        cluster.logs()
    );
    let last = api_when_ready(
        &client,
        "$JS.API.STREAM.MSG.GET.SNAP",
        json!({"last_by_subj": "snap.x"}),
    )
    .await;
    assert!(last.get("error").is_none(), "{last}");
}

/// A bit flipped in the stream leader's block store while it runs: the
/// read that meets it stops that replica, which rebuilds from its peers
/// (its damaged files kept aside) while another leads; every message reads
/// back intact, and the rebuilt replica leads again with all of them.
#[tokio::test]
async fn r3_leader_with_a_flipped_bit_rebuilds_from_its_peers_tern() {
    // Past the block store's 4 MiB tail cache, so early messages are read
    // from the disk.
    const MESSAGES: usize = 6_000;
    let cluster = Cluster::meshed(Flavor::Tern, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("BITS");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.BITS", config).await;
    assert!(created.get("error").is_none(), "{created}");
    let payload = |index: usize| format!("{index:04}-{}", "x".repeat(1000));
    let jetstream = async_nats::jetstream::new(client.clone());
    // The first one retried until this node knows the new stream's leader
    // (its interest may reach this node after the create's answer).
    assert_eq!(
        publish_through_failover(&client, "bits.x", &payload(1)).await,
        1
    );
    for batch in (2..=MESSAGES).collect::<Vec<_>>().chunks(256) {
        let mut acks = Vec::with_capacity(batch.len());
        for index in batch {
            let ack = jetstream
                .publish("bits.x", payload(*index).into())
                .await
                .expect("published");
            acks.push((*index, ack));
        }
        for (index, ack) in acks {
            let ack = tokio::time::timeout(CONVERGE_TIMEOUT, ack)
                .await
                .expect("acked in time")
                .expect("acked");
            assert_eq!(ack.sequence, index as u64);
        }
    }
    wait_replicas_current(&client, "BITS").await;
    let leader = stream_leader(&client, "BITS").await;
    // A byte in the payload of an early message, in the first segment.
    let segment = cluster
        .node(leader)
        .store_dir()
        .join("jetstream/streams/BITS/messages/00000000000000000001.blk");
    let mut bytes = std::fs::read(&segment).expect("the first segment");
    let offset = 40 * 1024;
    assert!(bytes.len() > offset, "{} bytes", bytes.len());
    bytes[offset] ^= 0x01;
    std::fs::write(&segment, &bytes).expect("flipped");
    // Messages read back by sequence (the early ones, then a sample): the
    // first read of the damaged one stops that replica; the answers come
    // from whichever leads.
    for index in (1..=100).chain((200..=MESSAGES).step_by(200)) {
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            let answer = api_when_ready(
                &client,
                "$JS.API.STREAM.MSG.GET.BITS",
                json!({"seq": index}),
            )
            .await;
            if answer.get("error").is_none() {
                let data = answer["message"]["data"].as_str().expect("data");
                let data = base64_decode(data);
                assert_eq!(data, payload(index).into_bytes(), "message {index}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "message {index}: {answer}\n{}",
                cluster.node(leader).log_tail()
            );
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    wait_log(
        cluster.node(leader),
        &format!("n{leader}"),
        "this replica rebuilds from its peers",
        CONVERGE_TIMEOUT,
    )
    .await;
    let kept = cluster.node(leader).store_dir().join("jetstream/damaged");
    assert_eq!(
        std::fs::read_dir(&kept)
            .expect("the damaged copy is kept")
            .count(),
        1
    );
    publish_through_failover(&client, "bits.x", "after").await;
    // The rebuilt copy, as that node's own `/jsz` reports it: every
    // message, the same last sequence as the leader's.
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let jsz = cluster.node(leader).http_json("/jsz?streams=true");
        let detail = common::js::jsz_streams(&jsz)
            .into_iter()
            .find(|stream| stream["name"] == "BITS")
            .unwrap_or_default();
        let state = &detail["state"];
        if state["messages"] == MESSAGES + 1 && state["last_seq"] == MESSAGES + 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rebuilt n{leader} never caught up: {detail}\n{}",
            cluster.node(leader).log_tail()
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let info = wait_replicas_current(&client, "BITS").await;
    assert_eq!(info["state"]["messages"], MESSAGES + 1, "{info}");
}

/// Damage found at start in a replica's block store rebuilds that replica
/// from its peers whichever shard owns the stream (the fault harness found
/// streams on shard 1 left offline: only shard 0 runs the meta group, and
/// start-up asked for it). Eight streams cover both shards; a byte of each
/// one's first record is flipped on one node while it is down; on restart
/// every one rebuilds and that node's own copy holds every message.
#[tokio::test]
async fn r3_damaged_block_stores_on_every_shard_rebuild_at_start_tern() {
    const STREAMS: usize = 8;
    const MESSAGES: usize = 20;
    let mut cluster = Cluster::meshed(Flavor::Tern, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let names: Vec<String> = (0..STREAMS)
        .map(|index| format!("SHARDED{index}"))
        .collect();
    create_r3_streams_with_messages(&client, &names, MESSAGES).await;
    const DAMAGED: usize = 3;
    // Stopped cleanly, so every message is in the block store (a kill can
    // leave the newest only in the journal).
    cluster.stop(DAMAGED);
    let streams = cluster.node(DAMAGED).store_dir().join("jetstream/streams");
    for name in &names {
        let segment = streams.join(format!("{name}/messages/00000000000000000001.blk"));
        let mut bytes = std::fs::read(&segment).expect("the first segment");
        // Inside the first record (its payload), past the segment header.
        let offset = bytes
            .windows(name.len() + 2)
            .position(|window| window == format!("{name}-1").as_bytes())
            .unwrap_or_else(|| panic!("{name}-1 not found in {}", segment.display()));
        bytes[offset] ^= 0x01;
        std::fs::write(&segment, &bytes).expect("flipped");
    }
    cluster.restart(DAMAGED);
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let log = cluster.node(DAMAGED).log_tail();
        let rebuilding = names
            .iter()
            .filter(|name| {
                log.lines().any(|line| {
                    line.contains(&format!("stream {name}: "))
                        && line.contains("this replica rebuilds from its peers")
                })
            })
            .count();
        if rebuilding == STREAMS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{rebuilding} of {STREAMS} streams rebuilt on n{DAMAGED}:\n{log}"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // That node's own copies, as its `/jsz` reports them: every message.
    wait_copies_complete(&cluster, DAMAGED, &names, MESSAGES as u64).await;
    assert!(
        !cluster.node(DAMAGED).log_tail().contains("stays offline"),
        "{}",
        cluster.node(DAMAGED).log_tail()
    );
}

/// The part of the lost-journal tests after the damage (node `damaged`
/// down, its journals lost or damaged beyond repair): publishes while it
/// is down, restarts it, waits for `journals` journals to be replaced
/// (`replaced_needle` logged that many times), and checks it rejoined: current,
/// published through, its own copy of every stream whole and in order
/// when it leads, and the meta group answering through it.
async fn rejoins_after_its_journal_is_replaced(
    cluster: &mut Cluster,
    client: &async_nats::Client,
    names: &[String],
    damaged: usize,
    messages: usize,
    (replaced_needle, journals): (&str, usize),
) {
    // Published while it is down (a leader it held fails over meanwhile):
    // it must catch up with these too.
    for name in names {
        let subject = format!("{}.x", name.to_lowercase());
        let sequence =
            publish_through_failover(client, &subject, &format!("{name}-{}", messages + 1)).await;
        assert_eq!(sequence, messages as u64 + 1);
    }
    cluster.restart(damaged);
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let log = cluster.node(damaged).log_tail();
        let replaced = log
            .lines()
            .filter(|line| line.contains(replaced_needle))
            .count();
        if replaced == journals {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{replaced} of {journals} journals replaced on n{damaged}:\n{log}"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its return ends the term its groups' leaders were in (it starts in
    // the next one): once they have led again and it is current,
    // published through it.
    for name in names {
        wait_replicas_current(client, name).await;
    }
    let through_damaged = cluster.connect(damaged).await;
    for name in names {
        let subject = format!("{}.x", name.to_lowercase());
        let ack = publish_acked(
            &through_damaged,
            &subject,
            &format!("{name}-{}", messages + 2),
        )
        .await;
        assert_eq!(ack["seq"], messages + 2, "{ack}");
    }
    let expected = messages + 2;
    wait_copies_complete(cluster, damaged, names, expected as u64).await;
    // Its copy, read from it as the leader: every message, in order.
    let damaged_name = format!("n{damaged}");
    for name in names {
        let answer = api_when_ready(
            client,
            &format!("$JS.API.STREAM.LEADER.STEPDOWN.{name}"),
            preferred(&damaged_name),
        )
        .await;
        assert_eq!(answer["success"], true, "{answer}");
        let info_subject = format!("$JS.API.STREAM.INFO.{name}");
        wait_leader_named(client, &info_subject, &damaged_name).await;
        for sequence in 1..=expected {
            let answer = api(
                &through_damaged,
                &format!("$JS.API.STREAM.MSG.GET.{name}"),
                json!({ "seq": sequence }),
            )
            .await;
            let data = answer["message"]["data"]
                .as_str()
                .unwrap_or_else(|| panic!("{answer}"));
            assert_eq!(
                base64_decode(data),
                format!("{name}-{sequence}").as_bytes(),
                "{name} #{sequence}"
            );
        }
    }
    // The meta group runs through it: a create answered.
    let mut config = stream_config("LOSTAFTER");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&through_damaged, "$JS.API.STREAM.CREATE.LOSTAFTER", config).await;
    assert!(created.get("error").is_none(), "{created}");
    let log = cluster.node(damaged).log_tail();
    assert!(!log.contains("stays offline"), "{log}");
}

/// A cluster node whose journal was lost while it was down (every segment
/// of shard 0 deleted, every segment of shard 1 zeroed in place, after a
/// SIGKILL under load, so its newest entries existed only there; a zeroed
/// journal must not pass for a fresh one) rejoins from its peers instead of staying
/// offline: its votes survive in the votes file, a new journal replaces
/// the old one (kept aside), every group, the meta group included,
/// restarts from its checkpoint and catches up. Its own copy of each
/// stream then holds every acknowledged message and the ones published
/// after, and the meta group answers through it. Without the votes file
/// as well, the node fails closed as before (nothing deleted).
#[tokio::test]
async fn r3_node_with_a_lost_journal_rejoins_from_its_peers_tern() {
    const STREAMS: usize = 4;
    const MESSAGES: usize = 20;
    let mut cluster = Cluster::meshed(Flavor::Tern, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let names: Vec<String> = (0..STREAMS).map(|index| format!("LOST{index}")).collect();
    create_r3_streams_with_messages(&client, &names, MESSAGES).await;
    const DAMAGED: usize = 3;
    cluster.kill(DAMAGED);
    let store = cluster.node(DAMAGED).store_dir().to_path_buf();
    let mut damaged = [0, 0];
    for (shard, count) in damaged.iter_mut().enumerate() {
        let journal = store.join(format!("jetstream/journal/shard-{shard}"));
        for entry in std::fs::read_dir(&journal).expect("the journal") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|extension| extension == "seg") {
                if shard == 0 {
                    std::fs::remove_file(&path).expect("deleted");
                } else {
                    let bytes = std::fs::metadata(&path).expect("a segment").len();
                    std::fs::write(&path, vec![0u8; bytes as usize]).expect("zeroed");
                }
                *count += 1;
            }
        }
    }
    assert!(
        damaged[0] >= 1 && damaged[1] >= 1,
        "journal segments under {}: {damaged:?}",
        store.display()
    );
    rejoins_after_its_journal_is_replaced(
        &mut cluster,
        &client,
        &names,
        DAMAGED,
        MESSAGES,
        ("a new one takes its place", 2),
    )
    .await;
    let kept = std::fs::read_dir(store.join("jetstream/journal/damaged"))
        .expect("the damaged journals are kept")
        .count();
    assert_eq!(kept, 2);

    // Both copies of the votes gone: that node refuses to guess.
    cluster.kill(DAMAGED);
    std::fs::remove_dir_all(store.join("jetstream/votes")).expect("votes deleted");
    let journal = store.join("jetstream/journal/shard-0");
    for entry in std::fs::read_dir(&journal).expect("the journal") {
        std::fs::remove_file(entry.expect("an entry").path()).expect("deleted");
    }
    cluster.restart(DAMAGED);
    common::cluster::wait_log(
        cluster.node(DAMAGED),
        "the meta group refusing to run",
        "the meta group cannot run without shard 0's journal",
        CONVERGE_TIMEOUT,
    )
    .await;
}

/// The same with each node's journal on its own raw device (a loop
/// device): node 3's journal regions damaged while it was down, under
/// load: shard 0's region zeroed whole (erased, not fresh), shard 1's
/// beyond its parity (two blocks of its first batch flipped). Each
/// damaged region is zeroed and a fresh journal takes its place; the node
/// rejoins and its copies are whole.
#[tokio::test]
async fn r3_node_with_a_damaged_raw_journal_rejoins_from_its_peers_tern() {
    const STREAMS: usize = 2;
    const MESSAGES: usize = 20;
    const SEGMENT_BYTES: u64 = 8 << 20;
    const SEGMENTS: u64 = 4;
    let backing = tempfile::tempdir().unwrap();
    let devices: Vec<LoopDevice> = (1..=3)
        .map(|node| {
            LoopDevice::attach(
                &backing.path().join(format!("n{node}.img")),
                (1 << 20) + 2 * SEGMENTS * SEGMENT_BYTES,
                true,
            )
        })
        .collect();
    let mut cluster = Cluster::meshed_with(Flavor::Tern, 3, |node| Options {
        journal_segment_bytes: Some(SEGMENT_BYTES),
        journal_segments: Some(SEGMENTS as u32),
        extra_args: vec![
            "--journal_dir".into(),
            devices[node - 1].path.display().to_string(),
        ],
        ..Options::jetstream()
    })
    .await;
    let client = cluster.connect(1).await;
    let names: Vec<String> = (0..STREAMS)
        .map(|index| format!("RAWLOST{index}"))
        .collect();
    create_r3_streams_with_messages(&client, &names, MESSAGES).await;
    const DAMAGED: usize = 3;
    cluster.kill(DAMAGED);
    let device = &devices[DAMAGED - 1];
    let mut damaged_regions = 0;
    for shard in 0..2 {
        let region = (1 << 20) + shard * SEGMENTS * SEGMENT_BYTES;
        if shard == 0 {
            device.write(region, &vec![0u8; (SEGMENTS * SEGMENT_BYTES) as usize]);
            damaged_regions += 1;
            continue;
        }
        if &device.read(region + 4096, 4)[..] != b"TJB1" {
            continue; // This shard journaled nothing (no group placed on it).
        }
        // A data block and the next (another data block, or the parity):
        // one parity block cannot rebuild two.
        device.flip(region + 4096 + 100, 0x20);
        device.flip(region + 2 * 4096 + 100, 0x20);
        damaged_regions += 1;
    }
    assert!(damaged_regions >= 1, "shard 0 journals the meta group");
    rejoins_after_its_journal_is_replaced(
        &mut cluster,
        &client,
        &names,
        DAMAGED,
        MESSAGES,
        (
            "was zeroed and a new journal takes its place",
            damaged_regions,
        ),
    )
    .await;
}

/// A node whose meta checkpoint (`meta/state`) was deleted, then on a
/// second run damaged, while it was down rejoins the meta group from its
/// peers, its term and vote taken from the votes file: it applies the
/// meta log again (a create made while it was down included), and the
/// API works through it.
#[tokio::test]
async fn r3_node_with_a_lost_meta_state_rejoins_from_its_peers_tern() {
    let mut cluster = Cluster::meshed(Flavor::Tern, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    const DAMAGED: usize = 2;
    for (round, damage) in ["delete", "flip"].into_iter().enumerate() {
        let name = format!("BEFORE{round}");
        let mut config = stream_config(&name);
        config["num_replicas"] = json!(3);
        let subject = format!("$JS.API.STREAM.CREATE.{name}");
        let created = api_when_ready(&client, &subject, config).await;
        assert!(created.get("error").is_none(), "{created}");
        cluster.kill(DAMAGED);
        let state = cluster
            .node(DAMAGED)
            .store_dir()
            .join("jetstream/meta/state");
        match damage {
            "delete" => std::fs::remove_file(&state).expect("deleted"),
            _ => {
                let mut bytes = std::fs::read(&state).expect("the meta state");
                bytes[40] ^= 0x01;
                std::fs::write(&state, bytes).expect("flipped");
            }
        }
        // The catalog changes while it is down: a stream placed on the
        // two others, once the meta leader sees it gone.
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            let offline = [1, 3].into_iter().any(|node| {
                let jsz = cluster.node(node).http_json("/jsz");
                jsz["meta_cluster"]["replicas"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|replica| replica["name"] == "n2" && replica["offline"] == true)
            });
            if offline {
                break;
            }
            assert!(Instant::now() < deadline, "n{DAMAGED} never seen offline");
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut config = stream_config(&format!("WHILEDOWN{round}"));
        config["num_replicas"] = json!(2);
        let subject = format!("$JS.API.STREAM.CREATE.WHILEDOWN{round}");
        let created = api_when_ready(&client, &subject, config).await;
        assert!(created.get("error").is_none(), "{created}");
        let leader_applied = meta_applied(&cluster, 1).max(meta_applied(&cluster, 3));
        cluster.restart(DAMAGED);
        wait_log(
            cluster.node(DAMAGED),
            damage,
            "the meta group rejoins from its peers",
            CONVERGE_TIMEOUT,
        )
        .await;
        // It applies the meta log again, up to what the others had.
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        while meta_applied(&cluster, DAMAGED) < leader_applied {
            assert!(
                Instant::now() < deadline,
                "{damage}: n{DAMAGED}'s meta group never caught up: {}\n{}",
                cluster.node(DAMAGED).http_json("/jsz"),
                cluster.node(DAMAGED).log_tail()
            );
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let through_damaged = cluster.connect(DAMAGED).await;
        let mut config = stream_config(&format!("AFTER{round}"));
        config["num_replicas"] = json!(3);
        let subject = format!("$JS.API.STREAM.CREATE.AFTER{round}");
        let created = api_when_ready(&through_damaged, &subject, config).await;
        assert!(created.get("error").is_none(), "{damage}: {created}");
    }
}

/// Kills `node`, deletes stream `deleted`'s `file` and flips a bit in
/// stream `flipped`'s, and starts it again.
fn delete_one_flip_other(
    cluster: &mut Cluster,
    node: usize,
    [deleted, flipped]: [&str; 2],
    file: &str,
) {
    cluster.kill(node);
    let streams = cluster.node(node).store_dir().join("jetstream/streams");
    std::fs::remove_file(streams.join(deleted).join(file)).expect("deleted");
    let flipped = streams.join(flipped).join(file);
    let mut bytes = std::fs::read(&flipped).expect("the file to flip");
    bytes[20] ^= 0x10;
    std::fs::write(&flipped, &bytes).expect("flipped");
    cluster.restart(node);
}

/// A replica whose `raft` file (its checkpoint: term, vote, what it
/// applied) was deleted or damaged while its node was down rebuilds from
/// its peers, its term and vote taken from the votes file, instead of
/// staying offline; its copy then holds every message. A damaged or
/// deleted votes file is rewritten from the journal at the next start,
/// and that copy is good enough to rejoin with after the journal is lost.
#[tokio::test]
async fn r3_replica_with_a_lost_checkpoint_rebuilds_from_its_peers_tern() {
    const MESSAGES: usize = 10;
    let mut cluster = Cluster::meshed(Flavor::Tern, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let names = ["CKPTGONE", "CKPTFLIP"];
    create_r3_streams_with_messages(&client, &names, MESSAGES).await;
    const DAMAGED: usize = 2;
    delete_one_flip_other(&mut cluster, DAMAGED, names, "raft");
    for name in names {
        wait_log(
            cluster.node(DAMAGED),
            name,
            &format!("stream {name}: "),
            CONVERGE_TIMEOUT,
        )
        .await;
    }
    wait_copies_complete(&cluster, DAMAGED, &names, MESSAGES as u64).await;
    let log = cluster.node(DAMAGED).log_tail();
    for name in names {
        assert!(
            log.lines()
                .any(|line| line.contains(&format!("stream {name}: "))
                    && line.contains("this replica rebuilds from its peers")),
            "{log}"
        );
    }
    assert!(!log.contains("stays offline"), "{log}");

    // The votes files damaged (one flipped, one deleted) while the journal
    // is intact: rewritten from the journal at start; then every journal
    // segment deleted: the rewritten copies are the ones it rejoins with.
    let store = cluster.node(DAMAGED).store_dir().to_path_buf();
    cluster.kill(DAMAGED);
    let votes_flipped = store.join("jetstream/votes/shard-0/votes");
    let mut bytes = std::fs::read(&votes_flipped).expect("the votes file");
    bytes[20] ^= 0x01;
    std::fs::write(&votes_flipped, &bytes).expect("flipped");
    std::fs::remove_file(store.join("jetstream/votes/shard-1/votes")).expect("deleted");
    cluster.restart(DAMAGED);
    wait_log(
        cluster.node(DAMAGED),
        "votes",
        "rewritten from the journal",
        CONVERGE_TIMEOUT,
    )
    .await;
    for name in names {
        wait_replicas_current(&client, name).await;
    }
    cluster.kill(DAMAGED);
    for shard in 0..2 {
        let journal = store.join(format!("jetstream/journal/shard-{shard}"));
        for entry in std::fs::read_dir(&journal).expect("the journal") {
            std::fs::remove_file(entry.expect("an entry").path()).expect("deleted");
        }
    }
    cluster.restart(DAMAGED);
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while cluster
        .node(DAMAGED)
        .log_tail()
        .matches("a new one takes its place")
        .count()
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "the journals were not replaced:\n{}",
            cluster.node(DAMAGED).log_tail()
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_copies_complete(&cluster, DAMAGED, &names, MESSAGES as u64).await;
}

/// A replica whose `config` file was deleted or damaged while its node
/// was down takes its config and placement from the meta group's catalog
/// and rebuilds from its peers, instead of staying offline; its copy then
/// holds every message.
#[tokio::test]
async fn r3_replica_with_a_damaged_config_rebuilds_from_its_peers_tern() {
    const MESSAGES: usize = 10;
    let mut cluster = Cluster::meshed(Flavor::Tern, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let names = ["CFGGONE", "CFGFLIP"];
    create_r3_streams_with_messages(&client, &names, MESSAGES).await;
    const DAMAGED: usize = 3;
    delete_one_flip_other(&mut cluster, DAMAGED, names, "config");
    wait_copies_complete(&cluster, DAMAGED, &names, MESSAGES as u64).await;
    let log = cluster.node(DAMAGED).log_tail();
    for name in names {
        assert!(
            log.lines()
                .any(|line| line.contains(&format!("stream {name}: "))
                    && line.contains("its config taken from the meta group's catalog")
                    && line.contains("this replica rebuilds from its peers")),
            "{log}"
        );
    }
    assert!(!log.contains("stays offline"), "{log}");
    // The rebuilt directory has a good config: the next start opens it
    // (the log is the new process's).
    cluster.kill(DAMAGED);
    cluster.restart(DAMAGED);
    wait_log(
        cluster.node(DAMAGED),
        "ready",
        "Server is ready",
        CONVERGE_TIMEOUT,
    )
    .await;
    wait_copies_complete(&cluster, DAMAGED, &names, MESSAGES as u64).await;
    let log = cluster.node(DAMAGED).log_tail();
    assert!(
        !log.contains("this replica rebuilds from its peers"),
        "{log}"
    );
    assert!(!log.contains("stays offline"), "{log}");
}

/// A cluster node whose `layout` was damaged while it was down rebuilds it
/// from its journals, which name it unambiguously, instead of refusing to
/// start (the fault harness truncated one): it rejoins with its streams and
/// their messages. (A single server still refuses: `jetstream_damage`.)
#[tokio::test]
async fn cluster_node_rebuilds_a_damaged_layout_from_its_journals_tern() {
    const MESSAGES: usize = 10;
    let mut cluster = Cluster::meshed(Flavor::Tern, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("LAYOUT");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.LAYOUT", config).await;
    assert!(created.get("error").is_none(), "{created}");
    for index in 1..=MESSAGES {
        let ack = publish_acked(&client, "layout.x", &format!("m{index}")).await;
        assert_eq!(ack["seq"], index, "{ack}");
    }
    wait_replicas_current(&client, "LAYOUT").await;
    const DAMAGED: usize = 2;
    cluster.kill(DAMAGED);
    let layout = cluster.node(DAMAGED).store_dir().join("jetstream/layout");
    let bytes = std::fs::read(&layout).expect("layout");
    std::fs::write(&layout, &bytes[..bytes.len() / 2]).expect("truncated");
    cluster.restart(DAMAGED);
    wait_log(
        cluster.node(DAMAGED),
        &format!("n{DAMAGED}"),
        "rebuilt from the journals",
        CONVERGE_TIMEOUT,
    )
    .await;
    cluster.wait_formed().await;
    assert_eq!(
        std::fs::read(&layout).expect("rewritten"),
        bytes,
        "the same layout"
    );
    // Its copy is back: it leads with every message.
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while stream_leader(&client, "LAYOUT").await != DAMAGED {
        assert!(Instant::now() < deadline, "n{DAMAGED} never led");
        let body = json!({"placement": {"preferred": format!("n{DAMAGED}")}});
        api_when_ready(&client, "$JS.API.STREAM.LEADER.STEPDOWN.LAYOUT", body).await;
        wait_replicas_current(&client, "LAYOUT").await;
    }
    let info = api_when_ready(&client, "$JS.API.STREAM.INFO.LAYOUT", Value::Null).await;
    assert_eq!(info["state"]["messages"], MESSAGES, "{info}");
}

/// Creates an R3 stream per name (subjects `<name lowercased>.>`), puts
/// `<name>-1` to `<name>-<messages>` in each, and waits until every
/// replica of each is current.
async fn create_r3_streams_with_messages<S: AsRef<str>>(
    client: &async_nats::Client,
    names: &[S],
    messages: usize,
) {
    for name in names {
        let name = name.as_ref();
        let mut config = stream_config(name);
        config["num_replicas"] = json!(3);
        let created =
            api_when_ready(client, &format!("$JS.API.STREAM.CREATE.{name}"), config).await;
        assert!(created.get("error").is_none(), "{created}");
        // Retried through timeouts (a leader still taking office under
        // load), deduplicated by message id.
        for index in 1..=messages {
            let subject = format!("{}.x", name.to_lowercase());
            let sequence =
                publish_through_failover(client, &subject, &format!("{name}-{index}")).await;
            assert_eq!(sequence, index as u64, "{name}");
        }
    }
    for name in names {
        wait_replicas_current(client, name.as_ref()).await;
    }
}

/// What `node`'s meta group has applied, from its `/jsz`.
fn meta_applied(cluster: &Cluster, node: usize) -> u64 {
    let jsz = cluster.node(node).http_json("/jsz");
    jsz["meta_cluster"]["raft"]["applied"].as_u64().unwrap_or(0)
}

/// Waits (bounded) until `node`'s own copy of each stream in `names`, as
/// its `/jsz` reports it, holds `messages` messages ending at that
/// sequence.
async fn wait_copies_complete<S: AsRef<str>>(
    cluster: &Cluster,
    node: usize,
    names: &[S],
    messages: u64,
) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let jsz = cluster.node(node).http_json("/jsz?streams=true");
        let complete = common::js::jsz_streams(&jsz)
            .iter()
            .filter(|stream| names.iter().any(|name| stream["name"] == name.as_ref()))
            .filter(|stream| {
                stream["state"]["messages"] == messages && stream["state"]["last_seq"] == messages
            })
            .count();
        if complete == names.len() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "n{node}'s copies never complete: {jsz}\n{}",
            cluster.node(node).log_tail()
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The API's `data` (standard base64), decoded.
pub(crate) fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64")
}

/// `STREAM.PEER.REMOVE` where no node is free to take the peer's place
/// (an R3 stream on three nodes): nats-server's 503 10075 `peer remap
/// failed`; a peer that is not a member: 400 10040. Nothing moves.
async fn peer_remove_without_a_spare_node(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("MOVE");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.MOVE", config).await;
    assert!(created.get("error").is_none(), "{created}");
    let stranger = api_when_ready(
        &client,
        "$JS.API.STREAM.PEER.REMOVE.MOVE",
        json!({"peer": "nobody"}),
    )
    .await;
    assert_eq!(
        stranger,
        json!({"type": "io.nats.jetstream.api.v1.stream_remove_peer_response",
               "error": {"code": 400, "err_code": 10040, "description": "peer not a member"}})
    );
    let refused = api_when_ready(
        &client,
        "$JS.API.STREAM.PEER.REMOVE.MOVE",
        json!({"peer": "n2"}),
    )
    .await;
    assert_eq!(
        refused,
        json!({"type": "io.nats.jetstream.api.v1.stream_remove_peer_response",
               "error": {"code": 503, "err_code": 10075, "description": "peer remap failed"}})
    );
    let info = wait_replicas_current(&client, "MOVE").await;
    assert_eq!(info["config"]["num_replicas"], 3, "{info}");
}

#[tokio::test]
async fn peer_remove_without_a_spare_node_tern() {
    peer_remove_without_a_spare_node(Flavor::Tern).await;
}

#[tokio::test]
async fn peer_remove_without_a_spare_node_nats() {
    peer_remove_without_a_spare_node(Flavor::Nats).await;
}

/// The replica names of `stream` (leader included) once they are all
/// current and `count` of them.
async fn wait_replica_set(client: &async_nats::Client, stream: &str, count: usize) -> Vec<String> {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let info = api_when_ready(
            client,
            &format!("$JS.API.STREAM.INFO.{stream}"),
            Value::Null,
        )
        .await;
        let replicas = info["cluster"]["replicas"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut names: Vec<String> = replicas
            .iter()
            .map(|replica| replica["name"].as_str().unwrap_or_default().to_string())
            .collect();
        if let Some(leader) = info["cluster"]["leader"].as_str() {
            names.push(leader.to_string());
        }
        names.sort();
        if names.len() == count && replicas.iter().all(|replica| replica["current"] == true) {
            return names;
        }
        assert!(
            Instant::now() < deadline,
            "never {count} current replicas: {info}"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// On five nodes an R3 stream's peer is removed and replaced (the new
/// replica catches up from the leader), the stream grows to five replicas
/// and shrinks back to three through updates, and every acknowledged
/// message stays, published throughout.
#[tokio::test]
async fn r3_stream_moves_and_resizes_on_five_nodes_tern() {
    let cluster = Cluster::meshed(Flavor::Tern, 5, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("MOVE");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.MOVE", config.clone()).await;
    assert!(created.get("error").is_none(), "{created}");
    let mut acked = 0;
    let publish_some = |round: &'static str| {
        let client = client.clone();
        async move {
            for index in 0..50 {
                publish_through_failover(&client, "move.x", &format!("{round}-{index}")).await;
            }
        }
    };
    publish_some("first").await;
    acked += 50;
    let before = wait_replica_set(&client, "MOVE", 3).await;
    let leader = format!("n{}", stream_leader(&client, "MOVE").await);
    let removed = before
        .iter()
        .find(|name| **name != leader)
        .expect("a follower")
        .clone();
    let answer = api_when_ready(
        &client,
        "$JS.API.STREAM.PEER.REMOVE.MOVE",
        json!({ "peer": removed }),
    )
    .await;
    assert_eq!(
        answer,
        json!({"type": "io.nats.jetstream.api.v1.stream_remove_peer_response", "success": true})
    );
    publish_some("moving").await;
    acked += 50;
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let after = loop {
        let after = wait_replica_set(&client, "MOVE", 3).await;
        if !after.contains(&removed) {
            break after;
        }
        assert!(Instant::now() < deadline, "{removed} never left: {after:?}");
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        after.iter().filter(|name| before.contains(name)).count(),
        2,
        "{before:?} -> {after:?}"
    );
    // Five replicas, then three again.
    for replicas in [5, 3] {
        config["num_replicas"] = json!(replicas);
        let updated = api_when_ready(&client, "$JS.API.STREAM.UPDATE.MOVE", config.clone()).await;
        assert_eq!(updated["config"]["num_replicas"], replicas, "{updated}");
        publish_some("resizing").await;
        acked += 50;
        let set = wait_replica_set(&client, "MOVE", replicas).await;
        let info = api_when_ready(&client, "$JS.API.STREAM.INFO.MOVE", Value::Null).await;
        assert_eq!(info["state"]["messages"], acked, "{info}");
        assert_eq!(info["state"]["last_seq"], acked, "{info}");
        // A node the stream left drops its copy.
        wait_copies_only_on(&cluster, 5, "MOVE", &set).await;
    }
}

/// A one-replica stream updated to three: both other nodes join, catch up
/// and serve as leader after a stepdown, with every message.
async fn r1_stream_grows_to_three_replicas(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("GROW");
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.GROW", config.clone()).await;
    assert!(created.get("error").is_none(), "{created}");
    for index in 0..20 {
        publish_through_failover(&client, "grow.x", &format!("before-{index}")).await;
    }
    config["num_replicas"] = json!(3);
    let updated = api_when_ready(&client, "$JS.API.STREAM.UPDATE.GROW", config).await;
    assert_eq!(updated["config"]["num_replicas"], 3, "{updated}");
    publish_through_failover(&client, "grow.x", "after").await;
    let names = wait_replica_set(&client, "GROW", 3).await;
    assert_eq!(names, ["n1", "n2", "n3"]);
    let old_leader = stream_leader(&client, "GROW").await;
    let stepdown =
        api_when_ready(&client, "$JS.API.STREAM.LEADER.STEPDOWN.GROW", Value::Null).await;
    assert_eq!(stepdown["success"], true, "{stepdown}");
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    while stream_leader(&client, "GROW").await == old_leader {
        assert!(Instant::now() < deadline, "the leader stayed n{old_leader}");
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    publish_through_failover(&client, "grow.x", "after-stepdown").await;
    let info = api_when_ready(&client, "$JS.API.STREAM.INFO.GROW", Value::Null).await;
    assert_eq!(info["state"]["messages"], 22, "{info}");
    assert_eq!(info["state"]["last_seq"], 22, "{info}");
}

#[tokio::test]
async fn r1_stream_grows_to_three_replicas_tern() {
    r1_stream_grows_to_three_replicas(Flavor::Tern).await;
}

#[tokio::test]
async fn r1_stream_grows_to_three_replicas_nats() {
    r1_stream_grows_to_three_replicas(Flavor::Nats).await;
}

/// Waits until, of nodes 1 to `nodes`, only those in `set` (names `nN`)
/// keep a directory for `stream`.
async fn wait_copies_only_on(cluster: &Cluster, nodes: usize, stream: &str, set: &[String]) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    for node in 1..=nodes {
        let directory = cluster
            .node(node)
            .store_dir()
            .join("jetstream/streams")
            .join(stream);
        let placed = set.contains(&format!("n{node}"));
        while !placed && directory.exists() {
            assert!(
                Instant::now() < deadline,
                "n{node} kept {directory:?}: {}",
                cluster.logs()
            );
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(directory.exists(), placed, "n{node} in {set:?}");
    }
}

/// An R3 stream updated to one replica: the nodes it leaves are still
/// needed to remove each other (two of three leave), so each stays a voter
/// until the group removes it, then drops its copy; every message and the
/// durable consumer's acks stay on the replica that remains.
async fn r3_stream_shrinks_to_one_replica(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("SHRINK");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.SHRINK", config.clone()).await;
    assert!(created.get("error").is_none(), "{created}");
    let consumer = api_when_ready(
        &client,
        "$JS.API.CONSUMER.CREATE.SHRINK.D",
        json!({"stream_name": "SHRINK", "config": {"durable_name": "D", "ack_policy": "explicit"}}),
    )
    .await;
    assert!(consumer.get("error").is_none(), "{consumer}");
    for index in 0..20 {
        publish_through_failover(&client, "shrink.x", &format!("before-{index}")).await;
    }
    assert_eq!(drain(&client, "SHRINK", "D", 5).await.len(), 5);
    wait_replicas_current(&client, "SHRINK").await;
    config["num_replicas"] = json!(1);
    let updated = api_when_ready(&client, "$JS.API.STREAM.UPDATE.SHRINK", config).await;
    assert_eq!(updated["config"]["num_replicas"], 1, "{updated}");
    let set = wait_replica_set(&client, "SHRINK", 1).await;
    publish_through_failover(&client, "shrink.x", "after").await;
    let info = api_when_ready(&client, "$JS.API.STREAM.INFO.SHRINK", Value::Null).await;
    assert_eq!(info["state"]["messages"], 21, "{info}");
    assert_eq!(info["state"]["last_seq"], 21, "{info}");
    let consumer = api_when_ready(&client, "$JS.API.CONSUMER.INFO.SHRINK.D", Value::Null).await;
    assert_eq!(consumer["ack_floor"]["stream_seq"], 5, "{consumer}");
    assert_eq!(consumer["num_pending"], 16, "{consumer}");
    if flavor == Flavor::Tern {
        // The nodes the stream left drop their copies.
        wait_copies_only_on(&cluster, 3, "SHRINK", &set).await;
    }
}

#[tokio::test]
async fn r3_stream_shrinks_to_one_replica_tern() {
    r3_stream_shrinks_to_one_replica(Flavor::Tern).await;
}

#[tokio::test]
async fn r3_stream_shrinks_to_one_replica_nats() {
    r3_stream_shrinks_to_one_replica(Flavor::Nats).await;
}

/// A replicated memory stream's durable consumer survives leader changes:
/// its acks are in the stream's log on every replica. While leadership
/// moves, CONSUMER.INFO asked back to back on every node never answers
/// "consumer not found" (a replica elected but still applying its log, or
/// one that just lost office, must not).
async fn r3_memory_stream_durable_survives_a_stepdown(flavor: Flavor) {
    const STEPDOWNS: usize = 3;
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("MEMDUR");
    config["num_replicas"] = json!(3);
    config["storage"] = json!("memory");
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.MEMDUR", config).await;
    assert!(created.get("error").is_none(), "{created}");
    let consumer = api_when_ready(
        &client,
        "$JS.API.CONSUMER.CREATE.MEMDUR.D",
        json!({"stream_name": "MEMDUR", "config": {"durable_name": "D", "ack_policy": "explicit"}}),
    )
    .await;
    assert!(consumer.get("error").is_none(), "{consumer}");
    for index in 0..10 {
        publish_through_failover(&client, "memdur.x", &format!("m{index}")).await;
    }
    let received = drain(&client, "MEMDUR", "D", 5).await;
    assert_eq!(received.len(), 5);
    let clients = [
        client.clone(),
        cluster.connect(2).await,
        cluster.connect(3).await,
    ];
    for _ in 0..STEPDOWNS {
        wait_replicas_current(&client, "MEMDUR").await;
        let old_leader = stream_leader(&client, "MEMDUR").await;
        let moved = std::rc::Rc::new(std::cell::Cell::new(false));
        // Every node asks back to back until the move is seen.
        let askers = clients.iter().map(|asker| {
            let moved = moved.clone();
            async move {
                let mut asked = 0;
                while !moved.get() {
                    let answer = tokio::time::timeout(
                        Duration::from_secs(2),
                        asker.request("$JS.API.CONSUMER.INFO.MEMDUR.D", "".into()),
                    )
                    .await;
                    if let Ok(Ok(reply)) = answer {
                        let info: Value = serde_json::from_slice(&reply.payload).expect("JSON");
                        assert_ne!(
                            info["error"]["err_code"], 10014,
                            "asked while leadership left n{old_leader}: {info}"
                        );
                    }
                    asked += 1;
                }
                asked
            }
        });
        let asking = futures::future::join_all(askers);
        let watching = async {
            let stepdown = api_when_ready(
                &client,
                "$JS.API.STREAM.LEADER.STEPDOWN.MEMDUR",
                Value::Null,
            )
            .await;
            assert_eq!(stepdown["success"], true, "{stepdown}");
            let deadline = Instant::now() + CONVERGE_TIMEOUT;
            loop {
                let leader = stream_leader(&client, "MEMDUR").await;
                let info =
                    api_when_ready(&client, "$JS.API.CONSUMER.INFO.MEMDUR.D", Value::Null).await;
                if leader != old_leader && info["ack_floor"]["stream_seq"] == 5 {
                    assert_eq!(info["num_pending"], 5, "{info}");
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the consumer's acks did not survive the stepdown from n{old_leader}: {info}"
                );
                // Poll interval of a bounded wait.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            moved.set(true);
        };
        let (asked, ()) = futures::future::join(asking, watching).await;
        assert!(asked.iter().all(|count| *count > 0), "{asked:?}");
    }
}

#[tokio::test]
async fn r3_memory_stream_durable_survives_a_stepdown_tern() {
    r3_memory_stream_durable_survives_a_stepdown(Flavor::Tern).await;
}

#[tokio::test]
async fn r3_memory_stream_durable_survives_a_stepdown_nats() {
    r3_memory_stream_durable_survives_a_stepdown(Flavor::Nats).await;
}

/// Leadership handed over again and again while a durable consumer acks
/// (each ack moves its state, proposed through the log every turn) and a
/// client publishes: a leader takes no proposals while it hands over, and
/// that must never stop its replica (tern once took the refused state
/// entry for a broken stream and took the replica offline). After every
/// stepdown all three replicas are current again, and at the end the
/// durable has delivered every acknowledged publish.
async fn stepdowns_while_a_durable_acks(flavor: Flavor) {
    use futures::StreamExt;
    const STEPDOWNS: usize = 4;
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("HAND");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.HAND", config).await;
    assert!(created.get("error").is_none(), "{created}");
    let consumer = api_when_ready(
        &client,
        "$JS.API.CONSUMER.CREATE.HAND.D",
        json!({"stream_name": "HAND", "config": {"durable_name": "D", "ack_policy": "explicit"}}),
    )
    .await;
    assert!(consumer.get("error").is_none(), "{consumer}");
    let publisher = cluster.connect(2).await;
    let fetcher = cluster.connect(3).await;
    let stop = std::rc::Rc::new(std::cell::Cell::new(false));

    let publishing = {
        let stop = stop.clone();
        async move {
            let mut acked = Vec::new();
            while !stop.get() {
                let payload = format!("h{}", acked.len());
                publish_through_failover(&publisher, "hand.x", &payload).await;
                acked.push(payload);
            }
            acked
        }
    };
    let consuming = {
        let stop = stop.clone();
        async move {
            let context = async_nats::jetstream::new(fetcher);
            let mut received = std::collections::BTreeSet::new();
            while !stop.get() {
                let batch = async {
                    let stream = context.get_stream("HAND").await.ok()?;
                    let pull = stream
                        .get_consumer::<async_nats::jetstream::consumer::pull::Config>("D")
                        .await
                        .ok()?;
                    pull.fetch()
                        .max_messages(20)
                        .expires(Duration::from_millis(300))
                        .messages()
                        .await
                        .ok()
                };
                let Some(mut batch) = batch.await else {
                    // Poll interval while leadership moves.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                while let Some(Ok(message)) = batch.next().await {
                    received.insert(String::from_utf8_lossy(&message.payload).into_owned());
                    // A lost ack only means a redelivery.
                    let _ = message.ack().await;
                }
            }
            received
        }
    };
    let stepping_down = {
        let stop = stop.clone();
        let client = client.clone();
        async move {
            for round in 0..STEPDOWNS {
                wait_replicas_current(&client, "HAND").await;
                let old_leader = stream_leader(&client, "HAND").await;
                let answer =
                    api_when_ready(&client, "$JS.API.STREAM.LEADER.STEPDOWN.HAND", Value::Null)
                        .await;
                assert_eq!(answer["success"], true, "stepdown {round}: {answer}");
                let deadline = Instant::now() + CONVERGE_TIMEOUT;
                while stream_leader(&client, "HAND").await == old_leader {
                    assert!(
                        Instant::now() < deadline,
                        "stepdown {round}: n{old_leader} still leads"
                    );
                    // Poll interval of a bounded wait.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            wait_replicas_current(&client, "HAND").await;
            stop.set(true);
        }
    };
    let (acked, mut received, ()) =
        futures::future::join3(publishing, consuming, stepping_down).await;
    assert!(!acked.is_empty());

    // What the fetcher had not seen yet (or saw with a lost ack) comes now.
    let info = api_when_ready(&client, "$JS.API.CONSUMER.INFO.HAND.D", Value::Null).await;
    let left = info["num_pending"].as_u64().expect("num_pending") as usize
        + info["num_ack_pending"].as_u64().expect("num_ack_pending") as usize;
    received.extend(drain_within(&client, "HAND", "D", left).await);
    let missing: Vec<&String> = acked
        .iter()
        .filter(|payload| !received.contains(*payload))
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged, never delivered: {missing:?}"
    );
}

/// Fetches up to `count` messages of `durable`, acking each: what arrives
/// before a fetch comes back empty (redeliveries wait out their ack wait).
async fn drain_within(
    client: &async_nats::Client,
    stream: &str,
    durable: &str,
    count: usize,
) -> Vec<String> {
    use futures::StreamExt;
    let context = async_nats::jetstream::new(client.clone());
    let stream = context.get_stream(stream).await.expect("the stream");
    let pull = stream
        .get_consumer::<async_nats::jetstream::consumer::pull::Config>(durable)
        .await
        .expect("the durable");
    let mut received = Vec::new();
    while received.len() < count {
        let mut batch = pull
            .fetch()
            .max_messages(count - received.len())
            .expires(Duration::from_secs(1))
            .messages()
            .await
            .expect("a fetch");
        let before = received.len();
        while let Some(Ok(message)) = batch.next().await {
            received.push(String::from_utf8_lossy(&message.payload).into_owned());
            let _ = message.double_ack().await;
        }
        if received.len() == before {
            break;
        }
    }
    received
}

#[tokio::test]
async fn stepdowns_while_a_durable_acks_tern() {
    stepdowns_while_a_durable_acks(Flavor::Tern).await;
}

#[tokio::test]
async fn stepdowns_while_a_durable_acks_nats() {
    stepdowns_while_a_durable_acks(Flavor::Nats).await;
}

/// A stream update is answered while a quorum of the stream's nodes is
/// up, whichever node is down: each node in turn is killed, the stream
/// updated through another and the update's answer carries the new
/// config (tern once answered only from the stream's first placed node,
/// so with that node down the client waited in vain).
async fn update_with_any_replica_down(flavor: Flavor) {
    let mut cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("UPD");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.UPD", config.clone()).await;
    assert!(created.get("error").is_none(), "{created}");
    wait_replicas_current(&client, "UPD").await;
    for down in 1..=3 {
        let asker = cluster.connect(if down == 1 { 2 } else { 1 }).await;
        cluster.kill(down);
        let max_msgs = 100 + down;
        config["max_msgs"] = json!(max_msgs);
        let answer = api_when_ready(&asker, "$JS.API.STREAM.UPDATE.UPD", config.clone()).await;
        assert_eq!(
            answer["config"]["max_msgs"], max_msgs,
            "update with n{down} down: {answer}"
        );
        cluster.restart(down);
        cluster.wait_formed().await;
        wait_replicas_current(&asker, "UPD").await;
    }
}

#[tokio::test]
async fn update_with_any_replica_down_tern() {
    update_with_any_replica_down(Flavor::Tern).await;
}

#[tokio::test]
async fn update_with_any_replica_down_nats() {
    update_with_any_replica_down(Flavor::Nats).await;
}

/// Waits until `info_subject`'s `cluster.leader` is `expected`; panics
/// with the last info after [`CONVERGE_TIMEOUT`].
async fn wait_leader_named(client: &async_nats::Client, info_subject: &str, expected: &str) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let info = api_when_ready(client, info_subject, Value::Null).await;
        if info["cluster"]["leader"] == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{info_subject}: the leader never became {expected}: {info}"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Hands the leadership of a group to `target` with a preferred stepdown
/// on `stepdown_subject` (answer type `kind`), and waits until
/// `info_subject` names it leader. nats-server hands over to the preferred
/// peer only if it answered the leader within three heartbeats, and
/// otherwise to any healthy peer, silently (raft.go `StepDown`), so on
/// nats a handover that lands elsewhere is asked again, a bounded number
/// of times. Tern hands over to the preferred follower or refuses: it
/// must land on the first request.
pub(crate) async fn hand_over_leadership(
    client: &async_nats::Client,
    flavor: Flavor,
    stepdown_subject: &str,
    info_subject: &str,
    kind: &str,
    target: &str,
) {
    const ATTEMPTS: usize = 5;
    for attempt in 1..=ATTEMPTS {
        wait_replicas_current_at(client, info_subject).await;
        let before =
            api_when_ready(client, info_subject, Value::Null).await["cluster"]["leader"].clone();
        let answer = api_when_ready(client, stepdown_subject, preferred(target)).await;
        assert_eq!(
            answer,
            json!({"type": format!("io.nats.jetstream.api.v1.{kind}"), "success": true})
        );
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        let leader = loop {
            let info = api_when_ready(client, info_subject, Value::Null).await;
            let leader = &info["cluster"]["leader"];
            if leader.is_string() && *leader != before {
                break leader.clone();
            }
            assert!(
                Instant::now() < deadline,
                "{info_subject}: no new leader after the stepdown: {info}"
            );
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        if leader == target {
            return;
        }
        assert!(
            flavor == Flavor::Nats,
            "{info_subject}: leadership went to {leader}, not the preferred {target}"
        );
        assert!(
            attempt < ATTEMPTS,
            "{info_subject}: leadership never went to {target}"
        );
    }
}

/// A stepdown body naming `server` as the preferred next leader.
fn preferred(server: &str) -> Value {
    json!({"placement": {"preferred": server}})
}

/// nats-server's 400 10005 answer of type `kind`.
fn no_peers(kind: &str, description: String) -> Value {
    json!({
        "type": format!("io.nats.jetstream.api.v1.{kind}"),
        "error": {"code": 400, "err_code": 10005, "description": description},
    })
}

/// `placement.preferred` in STREAM.LEADER.STEPDOWN and
/// CONSUMER.LEADER.STEPDOWN moves leadership to the named follower; the
/// leader itself or a name outside the group is nats-server's 400 10005,
/// an unknown field its 400 10025. Tern only: META.LEADER.STEPDOWN (which
/// nats-server takes from its system account only) checks the name alike.
async fn stepdown_to_a_preferred_server(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("PREF");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.PREF", config).await;
    assert!(created.get("error").is_none(), "{created}");
    let stream_kind = "stream_leader_stepdown_response";
    let stream_stepdown = "$JS.API.STREAM.LEADER.STEPDOWN.PREF";

    // To a named follower: success, and it leads.
    let info = wait_replicas_current(&client, "PREF").await;
    let follower = info["cluster"]["replicas"][0]["name"]
        .as_str()
        .expect("a replica's name")
        .to_string();
    hand_over_leadership(
        &client,
        flavor,
        stream_stepdown,
        "$JS.API.STREAM.INFO.PREF",
        stream_kind,
        &follower,
    )
    .await;

    // To the leader itself, to a server outside the group, with an
    // unknown field: refused, leadership stays.
    let answer = api_when_ready(&client, stream_stepdown, preferred(&follower)).await;
    assert_eq!(
        answer,
        no_peers(
            stream_kind,
            format!("preferred server \"{follower}\" is already leader")
        )
    );
    let answer = api_when_ready(&client, stream_stepdown, preferred("nowhere")).await;
    assert_eq!(
        answer,
        no_peers(
            stream_kind,
            "preferred server \"nowhere\" not known".to_string()
        )
    );
    let mut unknown_field = preferred("nowhere");
    unknown_field["placement"]["zone"] = json!("z");
    let answer = api_when_ready(&client, stream_stepdown, unknown_field).await;
    assert_eq!(
        answer,
        json!({
            "type": format!("io.nats.jetstream.api.v1.{stream_kind}"),
            "error": {"code": 400, "err_code": 10025, "description": "invalid JSON: json: unknown field \"zone\""},
        })
    );
    assert_eq!(
        stream_leader(&client, "PREF").await.to_string(),
        follower[1..]
    );

    // A durable's leader (nats-server: its own group; tern: the stream's).
    let consumer = api_when_ready(
        &client,
        "$JS.API.CONSUMER.CREATE.PREF.D",
        json!({"stream_name": "PREF", "config": {"durable_name": "D", "ack_policy": "explicit"}}),
    )
    .await;
    assert!(consumer.get("error").is_none(), "{consumer}");
    let consumer_kind = "consumer_leader_stepdown_response";
    let consumer_stepdown = "$JS.API.CONSUMER.LEADER.STEPDOWN.PREF.D";
    let consumer_leader = durable_leader(&client).await;
    let answer = api_when_ready(&client, consumer_stepdown, preferred(&consumer_leader)).await;
    assert_eq!(
        answer,
        no_peers(
            consumer_kind,
            format!("preferred server \"{consumer_leader}\" is already leader")
        )
    );
    let answer = api_when_ready(&client, consumer_stepdown, preferred("nowhere")).await;
    assert_eq!(
        answer,
        no_peers(
            consumer_kind,
            "preferred server \"nowhere\" not known".to_string()
        )
    );
    let other = ["n1", "n2", "n3"]
        .into_iter()
        .find(|name| *name != consumer_leader)
        .expect("another server");
    hand_over_leadership(
        &client,
        flavor,
        consumer_stepdown,
        "$JS.API.CONSUMER.INFO.PREF.D",
        consumer_kind,
        other,
    )
    .await;

    if flavor == Flavor::Tern {
        let answer = api_when_ready(
            &client,
            "$JS.API.META.LEADER.STEPDOWN",
            preferred("nowhere"),
        )
        .await;
        assert_eq!(
            answer,
            no_peers(
                "meta_leader_stepdown_response",
                "preferred server \"nowhere\" not known".to_string()
            )
        );
    }
}

/// The durable `PREF.D`'s leader, once CONSUMER.INFO names one.
async fn durable_leader(client: &async_nats::Client) -> String {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let info = api_when_ready(client, "$JS.API.CONSUMER.INFO.PREF.D", Value::Null).await;
        if let Some(leader) = info["cluster"]["leader"].as_str() {
            return leader.to_string();
        }
        assert!(Instant::now() < deadline, "no consumer leader: {info}");
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn stepdown_to_a_preferred_server_tern() {
    stepdown_to_a_preferred_server(Flavor::Tern).await;
}

#[tokio::test]
async fn stepdown_to_a_preferred_server_nats() {
    stepdown_to_a_preferred_server(Flavor::Nats).await;
}
