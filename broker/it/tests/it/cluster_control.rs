//! The JetStream control plane across a 3-node cluster as a client and an
//! operator see it, against tern-server and nats-server alike: leader
//! stepdowns reach every current replica (after a restart too), a change
//! answered through one node is seen by the next request through any node
//! (read after delete, create after delete, account counts), and the
//! meta group's membership changes.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::{Flavor, Options};
use serde_json::{json, Value};

use crate::cluster_jetstream::{
    api_when_ready, publish_acked, stream_config, stream_leader, wait_replicas_current,
    wait_replicas_current_at, CONVERGE_TIMEOUT,
};
use futures::StreamExt;

/// Stepdowns each test allows before every replica must have led.
///
/// tern hands leadership to a current replica chosen uniformly at random
/// (`tern_raft::Node::transfer_candidate`): with three replicas all
/// current, a given one that does not lead is chosen with probability 1/2
/// at each stepdown, so it is still not reached after `STEPDOWNS`
/// stepdowns with probability 2^-20, and some replica is missed with
/// probability at most 2 · 2^-20 < 2e-6. nats-server takes the first
/// healthy peer in a Go map's (random) order: about the same odds.
const STEPDOWNS: usize = 20;

/// Steps the group down (`stepdown`, answer type `kind`) until each of
/// its three replicas has led it, as `info` (a STREAM.INFO or
/// CONSUMER.INFO subject) names its leader; waits for every replica to be
/// current before each stepdown. Returns the leaders in order.
async fn rotate_leadership(
    client: &async_nats::Client,
    stepdown: &str,
    info: &str,
    kind: &str,
) -> Vec<String> {
    let mut leaders = Vec::new();
    for _ in 0..=STEPDOWNS {
        let current = wait_replicas_current_at(client, info).await;
        let leader = current["cluster"]["leader"]
            .as_str()
            .unwrap_or_else(|| panic!("{info}: no leader: {current}"))
            .to_string();
        leaders.push(leader.clone());
        if leaders.iter().collect::<BTreeSet<_>>().len() == 3 {
            return leaders;
        }
        let answer = api_when_ready(client, stepdown, Value::Null).await;
        assert_eq!(
            answer,
            json!({"type": format!("io.nats.jetstream.api.v1.{kind}"), "success": true}),
            "{stepdown}"
        );
        wait_leader_other_than(client, info, &leader).await;
    }
    panic!("{info}: after {STEPDOWNS} stepdowns only {leaders:?} led");
}

/// Waits until `info` names a leader other than `before`.
async fn wait_leader_other_than(client: &async_nats::Client, info: &str, before: &str) {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let answer = api_when_ready(client, info, Value::Null).await;
        let leader = &answer["cluster"]["leader"];
        if leader.is_string() && leader != before {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{info}: no new leader after a stepdown from {before}: {answer}"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// After a replica restarts and catches up, plain stepdowns (no
/// placement) move a stream's leadership to every replica, the restarted
/// one included, and a durable's too; on tern the meta group's as well
/// (nats-server takes META.LEADER.STEPDOWN from its system account only).
async fn stepdowns_reach_every_replica(flavor: Flavor) {
    let mut cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let client = cluster.connect(1).await;
    let mut config = stream_config("ROT");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.ROT", config).await;
    assert!(created.get("error").is_none(), "{created}");
    for number in 0..10 {
        let ack = publish_acked(&client, "rot.a", &format!("m{number}")).await;
        assert_eq!(ack["seq"], number + 1, "{ack}");
    }
    // A follower other than the client's node is killed and restarted;
    // it catches up with what went in meanwhile.
    let leader = stream_leader(&client, "ROT").await;
    let follower = [2, 3]
        .into_iter()
        .find(|&node| node != leader)
        .expect("a follower");
    cluster.kill(follower);
    for number in 10..20 {
        let ack = publish_acked(&client, "rot.a", &format!("m{number}")).await;
        assert_eq!(ack["seq"], number + 1, "{ack}");
    }
    cluster.restart(follower);
    cluster.wait_formed().await;
    wait_replicas_current(&client, "ROT").await;

    let leaders = rotate_leadership(
        &client,
        "$JS.API.STREAM.LEADER.STEPDOWN.ROT",
        "$JS.API.STREAM.INFO.ROT",
        "stream_leader_stepdown_response",
    )
    .await;
    assert!(
        leaders.contains(&format!("n{follower}")),
        "the restarted n{follower} led: {leaders:?}"
    );

    let consumer = api_when_ready(
        &client,
        "$JS.API.CONSUMER.CREATE.ROT.D",
        json!({"stream_name": "ROT", "config": {"durable_name": "D", "ack_policy": "explicit"}}),
    )
    .await;
    assert!(consumer.get("error").is_none(), "{consumer}");
    rotate_leadership(
        &client,
        "$JS.API.CONSUMER.LEADER.STEPDOWN.ROT.D",
        "$JS.API.CONSUMER.INFO.ROT.D",
        "consumer_leader_stepdown_response",
    )
    .await;

    if flavor == Flavor::Tern {
        rotate_meta_leadership(&cluster, &client).await;
    }
    // Every message is still there, in order, wherever it is read.
    let info = api_when_ready(&client, "$JS.API.STREAM.INFO.ROT", Value::Null).await;
    assert_eq!(info["state"]["messages"], 20, "{info}");
    assert_eq!(info["state"]["last_seq"], 20, "{info}");
}
differential!(stepdowns_reach_every_replica);

/// The meta leader as node 1's `/jsz` names it, once the leader's `/jsz`
/// shows every other voter current.
async fn meta_leader_with_voters_current(cluster: &Cluster) -> String {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let jsz = cluster.node(1).http_json("/jsz");
        if let Some(leader) = jsz["meta_cluster"]["leader"].as_str() {
            let number: usize = leader.trim_start_matches('n').parse().expect("n<number>");
            let on_leader = cluster.node(number).http_json("/jsz");
            let replicas = on_leader["meta_cluster"]["replicas"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if on_leader["meta_cluster"]["leader"] == leader
                && replicas.len() == 2
                && replicas.iter().all(|replica| replica["current"] == true)
            {
                return leader.to_string();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no meta leader with current voters: {jsz}"
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn rotate_meta_leadership(cluster: &Cluster, client: &async_nats::Client) {
    let mut leaders = Vec::new();
    for _ in 0..=STEPDOWNS {
        let leader = meta_leader_with_voters_current(cluster).await;
        leaders.push(leader.clone());
        if leaders.iter().collect::<BTreeSet<_>>().len() == 3 {
            return;
        }
        let answer = api_when_ready(client, "$JS.API.META.LEADER.STEPDOWN", Value::Null).await;
        assert_eq!(
            answer,
            json!({"type": "io.nats.jetstream.api.v1.meta_leader_stepdown_response", "success": true})
        );
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        loop {
            let jsz = cluster.node(1).http_json("/jsz");
            let now = &jsz["meta_cluster"]["leader"];
            if now.is_string() && *now != leader {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no new meta leader after a stepdown from {leader}: {jsz}"
            );
            // Poll interval of a bounded wait.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    panic!("after {STEPDOWNS} meta stepdowns only {leaders:?} led");
}

/// The JSON answer of a `$JS.API` request through `client`, or a panic
/// naming the subject (no retry: the point is the very next answer).
///
/// One exception, for nats-server's half only: a read (`INFO`, `NAMES`,
/// `LIST`) that got no answer is asked once more. A nats-server cluster
/// on a loaded 2-CPU machine drops API requests while its meta group
/// changes leader (seen in a full `.ci/run`: `STREAM.INFO` unanswered for
/// 10 s); what its half proves is the answer, not its promptness. tern's
/// half never retries.
async fn api_now(flavor: Flavor, client: &async_nats::Client, subject: &str, body: Value) -> Value {
    let payload = match body.is_null() {
        true => bytes::Bytes::new(),
        false => bytes::Bytes::from(body.to_string()),
    };
    let read = [".INFO", ".NAMES", ".LIST"]
        .iter()
        .any(|kind| subject.contains(kind));
    let attempts = if flavor == Flavor::Nats && read { 2 } else { 1 };
    for attempt in 1..=attempts {
        let answer = tokio::time::timeout(
            common::TIMEOUT,
            client.request(subject.to_string(), payload.clone()),
        )
        .await;
        match answer {
            Ok(Ok(reply)) => return serde_json::from_slice(&reply.payload).expect("JSON"),
            Ok(Err(error)) if attempt == attempts => panic!("{subject}: {error}"),
            Err(_) if attempt == attempts => panic!("{subject}: no answer"),
            Ok(Err(_)) | Err(_) => {}
        }
    }
    unreachable!("the last attempt returns or panics")
}

/// nats-server's `stream not found` error.
fn stream_not_found() -> Value {
    json!({"code": 404, "err_code": 10059, "description": "stream not found"})
}

/// Rounds of create, delete and create again, each through different
/// nodes; the answers right after each change are checked, so a change
/// still under way on some node shows up in some round.
const ROUNDS: usize = 6;

/// A stream delete answered through one node is seen by the very next
/// request through every node: STREAM.INFO is 404 10059 everywhere, the
/// name is free for a create through another node at once (with another
/// config, and empty), and `$JS.API.INFO` no longer counts it. One- and
/// three-replica streams.
async fn stream_deletes_are_seen_through_every_node(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let clients = [
        cluster.connect(1).await,
        cluster.connect(2).await,
        cluster.connect(3).await,
    ];
    let ready = api_when_ready(&clients[0], "$JS.API.INFO", Value::Null).await;
    assert!(ready.get("error").is_none(), "{ready}");
    for round in 0..ROUNDS {
        let replicas = if round % 2 == 0 { 1 } else { 3 };
        let name = format!("GHOST{round}");
        let subject = format!("ghost{round}");
        let (a, b, c) = (
            &clients[round % 3],
            &clients[(round + 1) % 3],
            &clients[(round + 2) % 3],
        );
        let config =
            json!({"name": name, "subjects": [format!("{subject}.a")], "num_replicas": replicas});
        let created = api_when_ready(a, &format!("$JS.API.STREAM.CREATE.{name}"), config).await;
        assert!(created.get("error").is_none(), "{created}");
        publish_acked(b, &format!("{subject}.a"), "x").await;
        let deleted = api_now(
            flavor,
            a,
            &format!("$JS.API.STREAM.DELETE.{name}"),
            Value::Null,
        )
        .await;
        assert_eq!(
            deleted,
            json!({"type": "io.nats.jetstream.api.v1.stream_delete_response", "success": true}),
            "round {round}"
        );
        for (node, client) in clients.iter().enumerate() {
            let info = api_now(
                flavor,
                client,
                &format!("$JS.API.STREAM.INFO.{name}"),
                Value::Null,
            )
            .await;
            assert_eq!(
                (info["type"].clone(), info["error"].clone()),
                (
                    json!("io.nats.jetstream.api.v1.stream_info_response"),
                    stream_not_found()
                ),
                "round {round} (R{replicas}): STREAM.INFO through n{} right after the delete",
                node + 1
            );
        }
        let usage = api_now(flavor, c, "$JS.API.INFO", Value::Null).await;
        assert_eq!(usage["streams"], 0, "round {round}: {usage}");
        // The name is free at once, through another node, for another
        // config; the new stream is empty.
        let config =
            json!({"name": name, "subjects": [format!("{subject}.b")], "num_replicas": replicas});
        let again = api_now(flavor, b, &format!("$JS.API.STREAM.CREATE.{name}"), config).await;
        assert!(again.get("error").is_none(), "round {round}: {again}");
        assert_eq!(again["config"]["subjects"], json!([format!("{subject}.b")]));
        let info = api_now(
            flavor,
            c,
            &format!("$JS.API.STREAM.INFO.{name}"),
            Value::Null,
        )
        .await;
        assert_eq!(
            (
                info["config"]["subjects"].clone(),
                info["state"]["messages"].clone()
            ),
            (json!([format!("{subject}.b")]), json!(0)),
            "round {round}: {info}"
        );
        let deleted = api_now(
            flavor,
            c,
            &format!("$JS.API.STREAM.DELETE.{name}"),
            Value::Null,
        )
        .await;
        assert_eq!(deleted["success"], true, "round {round}: {deleted}");
        // nats-server's STREAM.NAMES through another node lists a stream
        // just deleted now and then (seen in 1 run of 5); tern's names are
        // the meta leader's, which answered the delete.
        if flavor == Flavor::Tern {
            let names = api_now(flavor, a, "$JS.API.STREAM.NAMES", Value::Null).await;
            assert_eq!(names["total"], 0, "round {round}: {names}");
        }
    }
}
differential!(stream_deletes_are_seen_through_every_node);

/// A durable deleted through one node is gone for the next request
/// through any node: CONSUMER.INFO is 404 10014, `$JS.API.INFO` and the
/// stream's info count one consumer fewer; a purge answered through one
/// node is seen in the stream's info through the others; an update's new
/// subjects too.
async fn consumer_deletes_purges_and_updates_are_seen_through_every_node(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let clients = [
        cluster.connect(1).await,
        cluster.connect(2).await,
        cluster.connect(3).await,
    ];
    let mut config = stream_config("SEEN");
    config["num_replicas"] = json!(3);
    let created = api_when_ready(&clients[0], "$JS.API.STREAM.CREATE.SEEN", config).await;
    assert!(created.get("error").is_none(), "{created}");
    for number in 0..5 {
        publish_acked(&clients[1], "seen.a", &format!("m{number}")).await;
    }
    for round in 0..ROUNDS {
        let (a, b, c) = (
            &clients[round % 3],
            &clients[(round + 1) % 3],
            &clients[(round + 2) % 3],
        );
        let durable = format!("D{round}");
        let consumer = api_now(flavor, a,
            &format!("$JS.API.CONSUMER.CREATE.SEEN.{durable}"),
            json!({"stream_name": "SEEN", "config": {"durable_name": durable, "ack_policy": "explicit"}}),
        )
        .await;
        assert!(consumer.get("error").is_none(), "round {round}: {consumer}");
        let usage = api_now(flavor, b, "$JS.API.INFO", Value::Null).await;
        assert_eq!(usage["consumers"], 1, "round {round}: {usage}");
        let deleted = api_now(
            flavor,
            a,
            &format!("$JS.API.CONSUMER.DELETE.SEEN.{durable}"),
            Value::Null,
        )
        .await;
        assert_eq!(deleted["success"], true, "round {round}: {deleted}");
        for client in [b, c, a] {
            let usage = api_now(flavor, client, "$JS.API.INFO", Value::Null).await;
            assert_eq!(usage["consumers"], 0, "round {round}: {usage}");
            let info = api_now(
                flavor,
                client,
                &format!("$JS.API.CONSUMER.INFO.SEEN.{durable}"),
                Value::Null,
            )
            .await;
            assert_eq!(info["error"]["err_code"], 10014, "round {round}: {info}");
            // nats-server's STREAM.INFO counts a consumer whose delete
            // another node answered for a moment longer (its consumer
            // has a Raft group of its own; seen in 1 run of 4): tern's
            // consumers ride in the stream's log, gone when answered.
            if flavor == Flavor::Tern {
                let stream = api_now(flavor, client, "$JS.API.STREAM.INFO.SEEN", Value::Null).await;
                assert_eq!(
                    stream["state"]["consumer_count"], 0,
                    "round {round}: {stream}"
                );
            }
        }
    }
    let purged = api_now(
        flavor,
        &clients[2],
        "$JS.API.STREAM.PURGE.SEEN",
        Value::Null,
    )
    .await;
    assert_eq!(purged["purged"], 5, "{purged}");
    for client in &clients {
        let info = api_now(flavor, client, "$JS.API.STREAM.INFO.SEEN", Value::Null).await;
        assert_eq!(info["state"]["messages"], 0, "{info}");
    }
    let mut config = stream_config("SEEN");
    config["num_replicas"] = json!(3);
    config["subjects"] = json!(["seen.>", "more.>"]);
    let updated = api_now(flavor, &clients[0], "$JS.API.STREAM.UPDATE.SEEN", config).await;
    assert!(updated.get("error").is_none(), "{updated}");
    for client in &clients {
        let info = api_now(flavor, client, "$JS.API.STREAM.INFO.SEEN", Value::Null).await;
        assert_eq!(
            info["config"]["subjects"],
            json!(["seen.>", "more.>"]),
            "{info}"
        );
    }
}
differential!(consumer_deletes_purges_and_updates_are_seen_through_every_node);

/// A KV bucket and an object store deleted through one node cannot be
/// bound through the others right after, and are created again through
/// them at once (async-nats' own calls, as an application makes them).
async fn buckets_deleted_cannot_be_bound_through_other_nodes(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let clients = [
        cluster.connect(1).await,
        cluster.connect(2).await,
        cluster.connect(3).await,
    ];
    let ready = api_when_ready(&clients[0], "$JS.API.INFO", Value::Null).await;
    assert!(ready.get("error").is_none(), "{ready}");
    let contexts: Vec<async_nats::jetstream::Context> = clients
        .iter()
        .map(|client| async_nats::jetstream::new(client.clone()))
        .collect();
    for round in 0..ROUNDS {
        let replicas = if round % 2 == 0 { 1 } else { 3 };
        let (a, b, c) = (
            &contexts[round % 3],
            &contexts[(round + 1) % 3],
            &contexts[(round + 2) % 3],
        );
        let bucket = format!("kv{round}");
        let kv = a
            .create_key_value(async_nats::jetstream::kv::Config {
                bucket: bucket.clone(),
                num_replicas: replicas,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|error| panic!("round {round}: create {bucket}: {error}"));
        when_ready("a KV put", || kv.put("k", "v".into())).await;
        a.delete_key_value(&bucket)
            .await
            .expect("delete the bucket");
        for context in [b, c, a] {
            let bound = context.get_key_value(&bucket).await;
            assert!(
                bound.is_err(),
                "round {round}: {bucket} bound right after its delete"
            );
        }
        let again = b
            .create_key_value(async_nats::jetstream::kv::Config {
                bucket: bucket.clone(),
                num_replicas: replicas,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|error| panic!("round {round}: create {bucket} again: {error}"));
        let value = when_ready("a KV get", || again.get("k")).await;
        assert!(value.is_none(), "round {round}: the new bucket is empty");

        let store = format!("obj{round}");
        let objects = a
            .create_object_store(async_nats::jetstream::object_store::Config {
                bucket: store.clone(),
                num_replicas: replicas,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|error| panic!("round {round}: create {store}: {error}"));
        when_ready("an object put", || async {
            objects.put("o", &mut &b"object"[..]).await
        })
        .await;
        a.delete_object_store(&store)
            .await
            .expect("delete the store");
        for context in [c, b, a] {
            let bound = context.get_object_store(&store).await;
            assert!(
                bound.is_err(),
                "round {round}: {store} bound right after its delete"
            );
        }
        c.create_object_store(async_nats::jetstream::object_store::Config {
            bucket: store.clone(),
            num_replicas: replicas,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|error| panic!("round {round}: create {store} again: {error}"));
    }
}
differential!(buckets_deleted_cannot_be_bound_through_other_nodes);

/// Runs `attempt` until it succeeds, retried (bounded) while the cluster
/// has not routed a new bucket's subjects to the client's node yet
/// (nats-server answers a put or a get right after a bucket's create with
/// no responders now and then).
async fn when_ready<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    what: &str,
    mut attempt: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        match attempt().await {
            Ok(done) => return done,
            Err(error) => assert!(Instant::now() < deadline, "{what}: {error}"),
        }
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Requests per node in [`replies_reach_inboxes_subscribed_just_before`].
const INBOX_ROUNDS: usize = 150;

/// Threads that keep both CPUs busy while they live: the interest-order
/// race (a reply racing its inbox's interest between two nodes) showed
/// only under contention (tern lost about a third of the replies with
/// three such loops, none on an idle machine).
struct BusyLoops {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyLoops {
    fn start(count: usize) -> BusyLoops {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..count)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut spins = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        spins = std::hint::black_box(spins.wrapping_add(1));
                    }
                })
            })
            .collect();
        BusyLoops { stop, threads }
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A client subscribes a fresh inbox and at once sends a request naming
/// it, through a node that does not lead the stream (as async-nats'
/// `double_ack` and every request with a new inbox do): the leader's
/// answer must find the inbox. The subscription and the request leave on
/// one connection in that order, so nats-server's route carries them in
/// that order; tern's answer comes back on another core's route than the
/// request went out on, and must still find the interest
/// (`nats::interest`: a node's interest is relayed to its shards ahead of
/// later messages, and a route's input waits for what the node's other
/// shards sent before it). Under contention, with both CPUs busy.
async fn replies_reach_inboxes_subscribed_just_before(flavor: Flavor) {
    let cluster = Cluster::meshed(flavor, 3, Options::jetstream()).await;
    let admin = cluster.connect(1).await;
    let config = json!({"name": "INBOXES", "subjects": ["inboxes.>"], "num_replicas": 3, "allow_direct": true});
    let created = api_when_ready(&admin, "$JS.API.STREAM.CREATE.INBOXES", config).await;
    assert!(created.get("error").is_none(), "{created}");
    publish_acked(&admin, "inboxes.a", "x").await;
    wait_replicas_current(&admin, "INBOXES").await;
    let leader = stream_leader(&admin, "INBOXES").await;
    let _load = BusyLoops::start(3);
    for node in (1..=3).filter(|&node| node != leader) {
        // Several connections land on different cores of the node.
        for connection in 0..3 {
            let client = cluster.connect(node).await;
            for round in 0..INBOX_ROUNDS / 3 {
                let inbox = client.new_inbox();
                let mut replies = client.subscribe(inbox.clone()).await.expect("subscribe");
                client
                    .publish_with_reply(
                        "$JS.API.DIRECT.GET.INBOXES",
                        inbox,
                        r#"{"last_by_subj":"inboxes.a"}"#.into(),
                    )
                    .await
                    .expect("publish");
                let reply = tokio::time::timeout(Duration::from_secs(5), replies.next())
                    .await
                    .ok()
                    .flatten();
                let reply = reply.unwrap_or_else(|| {
                    panic!(
                        "n{node} (connection {connection}, round {round}; stream led by n{leader}): \
                         no answer to a direct get on an inbox subscribed just before it"
                    )
                });
                assert_eq!(&reply.payload[..], b"x");
            }
        }
    }
}
differential!(replies_reach_inboxes_subscribed_just_before);
