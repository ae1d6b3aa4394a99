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
