//! Mutual TLS between cluster nodes (`[cluster.tls]`; nats-server's
//! `cluster { tls { } }`), each behaviour against tern and nats-server:
//! a cluster whose nodes hold certificates signed by the cluster's CA
//! forms and replicates, and a wire tap on the route ports reads nothing
//! of what crosses (while the same tap reads a plaintext cluster's
//! payloads, proving it would see them); a node whose certificate another
//! CA signed is refused, by a cluster that keeps serving.

use futures::StreamExt;
use serde_json::json;

use crate::cluster_jetstream::{api_when_ready, publish_through_failover};
use crate::common::capture::{Captured, LoopbackCapture};
use crate::common::cluster::{wait_log, Cluster};
use crate::common::tls::Pki;
use crate::common::{self, subject, sync_interest, Flavor, Options, TIMEOUT};

/// Publishes `count` messages carrying `marker` on node 1 to a subscriber
/// on the last node, and checks each arrives.
async fn core_messages_cross(cluster: &Cluster, test: &str, marker: &str, count: usize) {
    let topic = subject(test, cluster.flavor, "topic");
    let subscriber = cluster.connect(cluster.len()).await;
    let mut messages = subscriber.subscribe(topic.clone()).await.unwrap();
    let publisher = cluster.connect(1).await;
    sync_interest(&subscriber, &publisher).await;
    for index in 0..count {
        publisher
            .publish(topic.clone(), format!("{marker}-{index}").into())
            .await
            .unwrap();
    }
    common::flush(&publisher).await;
    for index in 0..count {
        let message = tokio::time::timeout(TIMEOUT, messages.next())
            .await
            .unwrap_or_else(|_| panic!("message {index} never crossed the route"))
            .expect("subscription open");
        assert_eq!(message.payload, format!("{marker}-{index}").as_bytes());
    }
}

/// The route ports of every node.
fn route_ports(cluster: &Cluster) -> Vec<u16> {
    (1..=cluster.len())
        .map(|node| cluster.route_port(node))
        .collect()
}

fn assert_tap_saw_routes(captured: &Captured, what: &str) {
    assert!(
        captured.segments > 0,
        "{what}: the tap saw nothing on the route ports"
    );
    assert_eq!(captured.dropped, 0, "{what}: the tap dropped frames");
}

/// Three nodes over mutual TLS: routes form (the third learns the second
/// by gossip and dials it under TLS too), core messages and an R3
/// stream's replication cross them, and a tap on the route ports never
/// reads the payloads.
async fn cluster_routes_are_mutual_tls(flavor: Flavor) {
    let pki = Pki::generate();
    let mut options = pki.cluster_options(false);
    options.jetstream = true;
    let cluster = Cluster::meshed(flavor, 3, options).await;
    let marker = format!("secret-{}-{}", flavor.name(), std::process::id());
    let tap = LoopbackCapture::start(&route_ports(&cluster));
    core_messages_cross(&cluster, "cluster_routes_are_mutual_tls", &marker, 20).await;
    // Raft traffic: an R3 stream's entries reach all three nodes.
    let client = cluster.connect(2).await;
    let config = json!({
        "name": "SECRETS",
        "subjects": ["secrets.>"],
        "storage": "file",
        "num_replicas": 3,
    });
    let created = api_when_ready(&client, "$JS.API.STREAM.CREATE.SECRETS", config).await;
    assert!(created.get("error").is_none(), "{created}");
    for index in 0..10u64 {
        let sequence =
            publish_through_failover(&client, "secrets.a", &format!("{marker}-js-{index}")).await;
        assert_eq!(sequence, index + 1);
    }
    let captured = tap.finish();
    assert_tap_saw_routes(&captured, "mutual TLS");
    assert!(
        !captured.contains(marker.as_bytes()),
        "a payload crossed a route in plaintext"
    );
    // Every node routes to the two others.
    cluster.assert_formed();
}
differential!(cluster_routes_are_mutual_tls);

/// The tap's own proof: on a plaintext cluster it reads the payloads.
async fn plaintext_routes_show_payloads_to_the_tap() {
    let cluster = Cluster::formed(Flavor::Tern, 2, Options::default()).await;
    let marker = format!("visible-{}", std::process::id());
    let tap = LoopbackCapture::start(&route_ports(&cluster));
    core_messages_cross(
        &cluster,
        "plaintext_routes_show_payloads_to_the_tap",
        &marker,
        5,
    )
    .await;
    let captured = tap.finish();
    assert_tap_saw_routes(&captured, "plaintext");
    assert!(
        captured.contains(marker.as_bytes()),
        "the tap missed a plaintext payload: it would miss a leak too"
    );
}
tern_only!(plaintext_routes_show_payloads_to_the_tap);

/// A node whose certificate another CA signed dials node 1: the handshake
/// fails on both sides, it routes to no one, and the cluster keeps
/// serving across its two nodes.
async fn node_signed_by_another_ca_cannot_join(flavor: Flavor) {
    let pki = Pki::generate();
    let cluster = Cluster::formed(flavor, 2, pki.cluster_options(false)).await;
    let stranger = cluster.start_joiner("stranger", &cluster.name, pki.cluster_options(true));
    let needle = match flavor {
        Flavor::Tern => "TLS handshake",
        Flavor::Nats => "TLS route handshake error",
    };
    wait_log(cluster.node(1), "node 1", needle, TIMEOUT).await;
    wait_log(&stranger, "the stranger", needle, TIMEOUT).await;
    crate::cluster_core::assert_cluster_unaffected(
        &cluster,
        &stranger,
        "node_signed_by_another_ca_cannot_join",
    )
    .await;
}
differential!(node_signed_by_another_ca_cannot_join);
