//! Core NATS across a cluster (routes between nodes), against tern-server
//! and nats-server alike: pub/sub with `*`/`>` and headers between nodes,
//! exactly-once fan-out to subscribers on every node, queue groups spread
//! over the cluster, request/reply and no-responders across nodes,
//! unsubscribe propagation, a node that dies, the INFO a client sees
//! (`cluster`, `connect_urls`), a 5-node cluster, and nats-py on two nodes.
//! Then tern only: a node of another cluster, a node with another shard
//! count, and garbage on the route port are all refused while the cluster
//! keeps serving.
//!
//! Clusters are started as an operator would (`-n`, `--cluster`,
//! `--cluster_name`, one `--routes` to node 1; the rest by gossip), see
//! [`common::cluster`]. Clients stay on the node they connected to
//! (`Cluster::connect` ignores discovered servers).

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, Instant};

use common::cluster::{
    remote_ids, request_within, routez, server_id, wait_interest, wait_log, Cluster,
};
use common::{
    flush, next_message, subject, sync_interest, Flavor, Options, RawClient, Server, QUIET, TIMEOUT,
};
use futures::StreamExt;

const END: &str = "END";

/// Proves a negative: none of `subscribers` gets anything within [`QUIET`]
/// (one quiet period for all of them).
async fn expect_quiet(subscribers: &mut [&mut async_nats::Subscriber], what: &str) {
    let streams = subscribers
        .iter_mut()
        .enumerate()
        .map(|(number, subscriber)| (&mut **subscriber).map(move |message| (number, message)));
    let mut merged = futures::stream::select_all(streams);
    if let Ok(Some((number, message))) = tokio::time::timeout(QUIET, merged.next()).await {
        panic!(
            "{what}: unexpected extra message to subscription {number} on {}: {:?}",
            message.subject, message.payload
        );
    }
}

/// (subject, payload, headers) of messages in arrival order.
type Received = Vec<(String, String, Option<async_nats::HeaderMap>)>;

/// Messages of one subscription until it has seen `ends` `END-*` payloads
/// (END markers excluded).
async fn collect_until_ends(
    subscriber: &mut async_nats::Subscriber,
    ends: usize,
    what: &str,
) -> Received {
    let mut received = Vec::new();
    let mut seen_ends = 0;
    let deadline = Instant::now() + TIMEOUT;
    while seen_ends < ends {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let message = match tokio::time::timeout(remaining, subscriber.next()).await {
            Ok(Some(message)) => message,
            Ok(None) => panic!("{what}: subscription ended"),
            Err(_) => panic!(
                "{what}: {seen_ends} of {ends} END markers after {TIMEOUT:?}; got {} messages: {:?}",
                received.len(),
                received
                    .iter()
                    .map(|(_, payload, _): &(String, String, _)| payload.as_str())
                    .collect::<Vec<_>>()
            ),
        };
        let payload = String::from_utf8_lossy(&message.payload).to_string();
        if payload.starts_with(END) {
            seen_ends += 1;
        } else {
            received.push((message.subject.to_string(), payload, message.headers));
        }
    }
    received
}

/// Every third message a publisher sends carries headers.
fn has_headers(index: usize) -> bool {
    index % 3 == 0
}

fn headers_for(name: &str, index: usize) -> async_nats::HeaderMap {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("X-From", name);
    headers.insert("X-Seq", index.to_string().as_str());
    headers.append("X-Multi", "first");
    headers.append("X-Multi", "second");
    headers
}

/// Pub/sub from `publisher_nodes` to one client on `subscriber_node` with
/// three subscriptions: `base.x`, `base.*` and `base.>`. Each publisher
/// sends `count` messages alternating `base.x` and `base.x.y`, every third
/// with headers (HPUB), then `END-<name>` on `base.x`. Every subscription
/// gets exactly the messages its subject matches, once each, in each
/// publisher's order, headers intact.
pub(crate) async fn check_pub_sub(
    cluster: &Cluster,
    test: &str,
    subscriber_node: usize,
    publisher_nodes: &[usize],
    count: usize,
) {
    let flavor = cluster.flavor;
    let base = subject(test, flavor, &format!("to{subscriber_node}"));
    let subscriber_client = cluster.connect(subscriber_node).await;
    let mut plain = subscriber_client
        .subscribe(format!("{base}.x"))
        .await
        .unwrap();
    let mut star = subscriber_client
        .subscribe(format!("{base}.*"))
        .await
        .unwrap();
    let mut full = subscriber_client
        .subscribe(format!("{base}.>"))
        .await
        .unwrap();
    let mut publishers = Vec::new();
    for &node in publisher_nodes {
        let client = cluster.connect(node).await;
        sync_interest(&subscriber_client, &client).await;
        publishers.push((format!("p{node}"), client));
    }
    for (name, publisher) in &publishers {
        for index in 0..count {
            let target = if index % 2 == 0 {
                format!("{base}.x")
            } else {
                format!("{base}.x.y")
            };
            let payload = format!("{name}-{index}");
            if has_headers(index) {
                publisher
                    .publish_with_headers(target, headers_for(name, index), payload.into())
                    .await
                    .unwrap();
            } else {
                publisher.publish(target, payload.into()).await.unwrap();
            }
        }
        publisher
            .publish(format!("{base}.x"), format!("{END}-{name}").into())
            .await
            .unwrap();
        flush(publisher).await;
    }
    let ends = publishers.len();
    let subscriptions: [(&str, &mut async_nats::Subscriber, bool); 3] = [
        ("base.x", &mut plain, false),
        ("base.*", &mut star, false),
        ("base.>", &mut full, true),
    ];
    for (filter, subscriber, gets_deeper) in subscriptions {
        let what = format!(
            "{}: {filter} on node {subscriber_node} from nodes {publisher_nodes:?}",
            flavor.name()
        );
        let received = collect_until_ends(subscriber, ends, &what).await;
        for (name, _) in &publishers {
            let from_this: Vec<&(String, String, Option<async_nats::HeaderMap>)> = received
                .iter()
                .filter(|(_, payload, _)| payload.starts_with(&format!("{name}-")))
                .collect();
            let expected: Vec<(String, String)> = (0..count)
                .filter(|index| gets_deeper || index % 2 == 0)
                .map(|index| {
                    let target = if index % 2 == 0 {
                        format!("{base}.x")
                    } else {
                        format!("{base}.x.y")
                    };
                    (target, format!("{name}-{index}"))
                })
                .collect();
            let got: Vec<(String, String)> = from_this
                .iter()
                .map(|(subject, payload, _)| (subject.clone(), payload.clone()))
                .collect();
            assert_eq!(
                got, expected,
                "{what}: {name}'s messages, each once, in publish order"
            );
            for (_, payload, headers) in from_this {
                let index: usize = payload[name.len() + 1..].parse().unwrap();
                if has_headers(index) {
                    let headers = headers
                        .as_ref()
                        .unwrap_or_else(|| panic!("{what}: {payload} lost its headers"));
                    assert_eq!(
                        headers.get("X-From").map(|value| value.as_str()),
                        Some(name.as_str()),
                        "{what}: {payload}"
                    );
                    assert_eq!(
                        headers.get("X-Seq").map(|value| value.to_string()),
                        Some(index.to_string()),
                        "{what}: {payload}"
                    );
                    let multi: Vec<&str> = headers
                        .get_all("X-Multi")
                        .map(|value| value.as_str())
                        .collect();
                    assert_eq!(multi, ["first", "second"], "{what}: {payload}");
                } else {
                    assert!(
                        headers.as_ref().is_none_or(|headers| headers.is_empty()),
                        "{what}: {payload} was published without headers: {headers:?}"
                    );
                }
            }
        }
    }
    expect_quiet(
        &mut [&mut plain, &mut star, &mut full],
        &format!("{}: pub/sub to node {subscriber_node}", flavor.name()),
    )
    .await;
}

/// A queue group with `members_per_node` members on each of `member_nodes`
/// (and, if given, a plain subscriber on `plain_node`): `count` messages
/// from `publisher_node` reach exactly one member each, members on at
/// least two nodes get some, and the plain subscriber gets all, in order.
pub(crate) async fn check_queue_group(
    cluster: &Cluster,
    test: &str,
    publisher_node: usize,
    member_nodes: &[usize],
    members_per_node: usize,
    plain_node: Option<usize>,
    count: usize,
) {
    let flavor = cluster.flavor;
    let subject = subject(test, flavor, "work");
    let publisher = cluster.connect(publisher_node).await;
    let mut members = Vec::new();
    let mut member_clients = Vec::new();
    for &node in member_nodes {
        for _ in 0..members_per_node {
            let client = cluster.connect(node).await;
            let member = client
                .queue_subscribe(subject.clone(), "q".into())
                .await
                .unwrap();
            sync_interest(&client, &publisher).await;
            members.push((node, member));
            member_clients.push(client);
        }
    }
    let mut plain = None;
    if let Some(node) = plain_node {
        let client = cluster.connect(node).await;
        let subscriber = client.subscribe(subject.clone()).await.unwrap();
        sync_interest(&client, &publisher).await;
        plain = Some((client, subscriber));
    }
    for index in 0..count {
        publisher
            .publish(subject.clone(), index.to_string().into())
            .await
            .unwrap();
    }
    flush(&publisher).await;

    if let Some((_, subscriber)) = plain.as_mut() {
        for index in 0..count {
            let message = next_message(subscriber, TIMEOUT).await;
            assert_eq!(
                String::from_utf8_lossy(&message.payload),
                index.to_string(),
                "{}: the plain subscriber beside the group gets every message in order",
                flavor.name()
            );
        }
    }

    let mut merged = futures::stream::select_all(
        members
            .into_iter()
            .map(|(node, member)| member.map(move |message| (node, message))),
    );
    let mut per_node: BTreeMap<usize, usize> = BTreeMap::new();
    let mut seen = HashSet::new();
    let deadline = Instant::now() + TIMEOUT;
    while seen.len() < count {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let (node, message) = tokio::time::timeout(remaining, merged.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{}: queue group got {} of {count} messages (per node {per_node:?})",
                    flavor.name(),
                    seen.len()
                )
            })
            .expect("queue subscriptions ended");
        let payload = String::from_utf8_lossy(&message.payload).to_string();
        assert!(
            seen.insert(payload.clone()),
            "{}: message {payload} delivered to more than one member (again on node {node})",
            flavor.name()
        );
        *per_node.entry(node).or_default() += 1;
    }
    if let Ok(Some((node, message))) = tokio::time::timeout(QUIET, merged.next()).await {
        panic!(
            "{}: extra queue delivery to a member on node {node}: {:?} (per node {per_node:?})",
            flavor.name(),
            message.payload
        );
    }
    assert_eq!(per_node.values().sum::<usize>(), count);
    assert!(
        per_node.values().filter(|&&got| got > 0).count() >= 2,
        "{}: members on at least two nodes should get some: {per_node:?}",
        flavor.name()
    );
    if let Some((_, mut subscriber)) = plain {
        // The group's quiet period has passed: a duplicate to the plain
        // subscriber would be buffered by now (a zero timeout still polls).
        common::expect_no_message(&mut subscriber, Duration::ZERO).await;
    }
}

/// A responder on `client` answering `re:<payload>` until the returned
/// sender fires (then it unsubscribes) or the task is aborted.
pub(crate) async fn spawn_responder(
    client: async_nats::Client,
    subject: String,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let mut requests = client.subscribe(subject).await.unwrap();
    flush(&client).await;
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stopped => {
                    requests.unsubscribe().await.expect("unsubscribe");
                    flush(&client).await;
                    return;
                }
                request = requests.next() => {
                    let Some(request) = request else { return };
                    if let Some(reply) = request.reply {
                        let mut answer = b"re:".to_vec();
                        answer.extend_from_slice(&request.payload);
                        client.publish(reply, answer.into()).await.unwrap();
                        flush(&client).await;
                    }
                }
            }
        }
    });
    (stop, task)
}

/// A request that must fail with no responders, and quickly (async-nats'
/// default request timeout is 10 s).
async fn assert_no_responders_now(requester: &async_nats::Client, subject: &str, what: &str) {
    let started = Instant::now();
    let outcome = tokio::time::timeout(TIMEOUT, requester.request(subject.to_string(), "x".into()))
        .await
        .unwrap_or_else(|_| panic!("{what}: request not answered within {TIMEOUT:?}"));
    let error = outcome.expect_err("no responder is left: the request must fail");
    assert_eq!(
        error.kind(),
        async_nats::client::RequestErrorKind::NoResponders,
        "{what}: {error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{what}: no responders took {:?}",
        started.elapsed()
    );
}

async fn cluster_pub_sub(flavor: Flavor) {
    let cluster = Cluster::formed(flavor, 3, Options::default()).await;
    check_pub_sub(&cluster, "cluster_pub_sub", 2, &[1, 3], 50).await;
}
differential!(cluster_pub_sub);

async fn cluster_fanout_once(flavor: Flavor) {
    const MESSAGES: usize = 100;
    let cluster = Cluster::formed(flavor, 3, Options::default()).await;
    let subject = subject("cluster_fanout_once", flavor, "all");
    let publisher = cluster.connect(1).await;
    let mut clients = Vec::new();
    let mut subscribers = Vec::new();
    for node in 1..=3 {
        let client = cluster.connect(node).await;
        subscribers.push(client.subscribe(subject.clone()).await.unwrap());
        sync_interest(&client, &publisher).await;
        clients.push(client);
    }
    for index in 0..MESSAGES {
        publisher
            .publish(subject.clone(), index.to_string().into())
            .await
            .unwrap();
    }
    publisher
        .publish(subject.clone(), format!("{END}-p1").into())
        .await
        .unwrap();
    flush(&publisher).await;
    for (number, subscriber) in subscribers.iter_mut().enumerate() {
        let what = format!("{}: subscriber on node {}", flavor.name(), number + 1);
        let received = collect_until_ends(subscriber, 1, &what).await;
        let payloads: Vec<String> = received
            .into_iter()
            .map(|(_, payload, _)| payload)
            .collect();
        let expected: Vec<String> = (0..MESSAGES).map(|index| index.to_string()).collect();
        assert_eq!(payloads, expected, "{what}: every message once, in order");
    }
    let mut all: Vec<&mut async_nats::Subscriber> = subscribers.iter_mut().collect();
    expect_quiet(&mut all, &format!("{}: fan-out", flavor.name())).await;
}
differential!(cluster_fanout_once);

async fn cluster_queue_groups(flavor: Flavor) {
    let cluster = Cluster::formed(flavor, 3, Options::default()).await;
    check_queue_group(
        &cluster,
        "cluster_queue_groups",
        1,
        &[1, 2, 3],
        2,
        Some(2),
        300,
    )
    .await;
}
differential!(cluster_queue_groups);

async fn cluster_request_reply(flavor: Flavor) {
    const REQUESTS: usize = 50;
    let cluster = Cluster::formed(flavor, 3, Options::default()).await;
    let subject = subject("cluster_request_reply", flavor, "svc");
    let requester = cluster.connect(1).await;
    let (_stop, responder) = spawn_responder(cluster.connect(3).await, subject.clone()).await;
    let first = cluster.wait_responder(&requester, &subject).await;
    assert_eq!(&first.payload[..], b"re:__probe__");
    let requests = (0..REQUESTS).map(|index| {
        let requester = requester.clone();
        let subject = subject.clone();
        async move {
            let answer = requester
                .request(subject, format!("r{index}").into())
                .await
                .unwrap_or_else(|error| panic!("request r{index}: {error}"));
            assert_eq!(
                String::from_utf8_lossy(&answer.payload),
                format!("re:r{index}")
            );
        }
    });
    tokio::time::timeout(TIMEOUT, futures::future::join_all(requests))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{}: {REQUESTS} requests not answered within {TIMEOUT:?}\n{}",
                flavor.name(),
                cluster.logs()
            )
        });
    responder.abort();
}
differential!(cluster_request_reply);

async fn cluster_no_responders(flavor: Flavor) {
    let cluster = Cluster::formed(flavor, 3, Options::default()).await;
    let requester = cluster.connect(1).await;

    // A responder on node 2 that unsubscribes.
    let unsubscribed = subject("cluster_no_responders", flavor, "unsub");
    let (stop, responder) = spawn_responder(cluster.connect(2).await, unsubscribed.clone()).await;
    cluster.wait_responder(&requester, &unsubscribed).await;
    stop.send(()).expect("responder running");
    tokio::time::timeout(TIMEOUT, responder)
        .await
        .expect("responder unsubscribes")
        .expect("responder task");
    cluster.wait_no_responders(&requester, &unsubscribed).await;
    assert_no_responders_now(
        &requester,
        &unsubscribed,
        &format!(
            "{}: after the responder on node 2 unsubscribed",
            flavor.name()
        ),
    )
    .await;

    // A subscriber on node 3 whose connection closes without UNSUB.
    let closed = subject("cluster_no_responders", flavor, "closed");
    let mut raw = cluster.node(3).raw_quiet().await;
    raw.send(format!("SUB {closed} 1\r\nPING\r\n").as_bytes())
        .await;
    raw.read_until(b"PONG\r\n", TIMEOUT).await;
    // It never answers: its interest is visible on node 1 once a request
    // times out instead of failing with no responders.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let outcome = request_within(&requester, &closed, b"x", Duration::from_millis(100)).await;
        match outcome {
            Err(error) if error.kind() == async_nats::client::RequestErrorKind::TimedOut => break,
            Err(error) if error.kind() == async_nats::client::RequestErrorKind::NoResponders => {}
            other => panic!("{}: unexpected outcome {other:?}", flavor.name()),
        }
        assert!(
            Instant::now() < deadline,
            "{}: the subscriber on node 3 never became visible on node 1",
            flavor.name()
        );
        // Poll interval of a bounded wait.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(raw);
    cluster.wait_no_responders(&requester, &closed).await;
    assert_no_responders_now(
        &requester,
        &closed,
        &format!(
            "{}: after the subscriber on node 3 disconnected",
            flavor.name()
        ),
    )
    .await;
}
differential!(cluster_no_responders);

async fn cluster_unsubscribe(flavor: Flavor) {
    const MESSAGES: usize = 20;
    let cluster = Cluster::formed(flavor, 3, Options::default()).await;
    let subject = subject("cluster_unsubscribe", flavor, "s");
    let marker = common::subject("cluster_unsubscribe", flavor, "marker");
    let publisher = cluster.connect(1).await;
    // The one that unsubscribes: raw, so what the server sends it is seen.
    let mut leaving = cluster.node(2).raw_quiet().await;
    leaving
        .send(format!("SUB {subject} 1\r\nPING\r\n").as_bytes())
        .await;
    leaving.read_until(b"PONG\r\n", TIMEOUT).await;
    // The one that stays, on the same node and subject.
    let staying_client = cluster.connect(2).await;
    let mut staying = staying_client.subscribe(subject.clone()).await.unwrap();
    sync_interest(&staying_client, &publisher).await;

    // Both get a message first.
    publisher
        .publish(subject.clone(), "before".into())
        .await
        .unwrap();
    flush(&publisher).await;
    assert_eq!(
        &next_message(&mut staying, TIMEOUT).await.payload[..],
        b"before"
    );
    let got = leaving.read_until(b"before\r\n", TIMEOUT).await;
    assert_eq!(
        common::text(&got),
        format!("MSG {subject} 1 6\r\nbefore\r\n"),
        "{}",
        flavor.name()
    );

    // Unsubscribe (processed by node 2 at the PONG), and take a marker
    // subject that node 1 is made to route to node 2 (via `staying_client`).
    leaving
        .send(format!("UNSUB 1\r\nSUB {marker} 2\r\nPING\r\n").as_bytes())
        .await;
    leaving.read_until(b"PONG\r\n", TIMEOUT).await;
    let mut staying_marker = staying_client.subscribe(marker.clone()).await.unwrap();
    sync_interest(&staying_client, &publisher).await;

    for index in 0..MESSAGES {
        publisher
            .publish(subject.clone(), index.to_string().into())
            .await
            .unwrap();
    }
    publisher
        .publish(marker.clone(), "marker".into())
        .await
        .unwrap();
    flush(&publisher).await;
    for index in 0..MESSAGES {
        let message = next_message(&mut staying, TIMEOUT).await;
        assert_eq!(
            String::from_utf8_lossy(&message.payload),
            index.to_string(),
            "{}: the subscriber that stays gets every message",
            flavor.name()
        );
    }
    assert_eq!(
        &next_message(&mut staying_marker, TIMEOUT).await.payload[..],
        b"marker"
    );
    // One publisher's messages arrive in order: had any reached the
    // unsubscribed sid, it would come before the marker.
    let got = leaving.read_until(b"marker\r\n", TIMEOUT).await;
    assert_eq!(
        common::text(&got),
        format!("MSG {marker} 2 6\r\nmarker\r\n"),
        "{}: nothing for the unsubscribed sid",
        flavor.name()
    );
}
differential!(cluster_unsubscribe);

async fn cluster_node_dies(flavor: Flavor) {
    let mut cluster = Cluster::formed(flavor, 3, Options::default()).await;
    let service = subject("cluster_node_dies", flavor, "svc");
    let topic = subject("cluster_node_dies", flavor, "topic");
    let requester = cluster.connect(1).await;
    let (_stop, responder) = spawn_responder(cluster.connect(3).await, service.clone()).await;
    cluster.wait_responder(&requester, &service).await;
    let on_two = cluster.connect(2).await;
    let mut subscriber = on_two.subscribe(topic.clone()).await.unwrap();
    sync_interest(&on_two, &requester).await;

    cluster.kill(3);
    cluster.wait_no_responders(&requester, &service).await;
    assert_no_responders_now(
        &requester,
        &service,
        &format!("{}: the responder's node was killed", flavor.name()),
    )
    .await;
    responder.abort();
    // The survivors drop the dead node's routes and keep each other's.
    cluster.wait_formed().await;

    // 1 -> 2 on the subscription made before the kill.
    for index in 0..20 {
        requester
            .publish(topic.clone(), index.to_string().into())
            .await
            .unwrap();
    }
    flush(&requester).await;
    for index in 0..20 {
        let message = next_message(&mut subscriber, TIMEOUT).await;
        assert_eq!(String::from_utf8_lossy(&message.payload), index.to_string());
    }
    // 2 -> 1 on a subscription made after it.
    let mut back = requester.subscribe(topic.clone()).await.unwrap();
    sync_interest(&requester, &on_two).await;
    on_two.publish(topic.clone(), "back".into()).await.unwrap();
    flush(&on_two).await;
    assert_eq!(&next_message(&mut back, TIMEOUT).await.payload[..], b"back");
    assert_eq!(
        &next_message(&mut subscriber, TIMEOUT).await.payload[..],
        b"back"
    );
}
differential!(cluster_node_dies);

/// What a client connecting to `node` should be told: the cluster's name,
/// and `connect_urls` with the node's own client address first, then
/// every other node's (in any order). That is what nats-server 2.15 sends.
fn info_problem(cluster: &Cluster, node: usize, info: &serde_json::Value) -> Option<String> {
    if info["cluster"].as_str() != Some(cluster.name.as_str()) {
        return Some(format!("\"cluster\" is not {:?}", cluster.name));
    }
    let urls: Vec<String> = match info["connect_urls"].as_array() {
        Some(urls) => urls
            .iter()
            .map(|url| url.as_str().unwrap_or("?").to_string())
            .collect(),
        None => return Some("no connect_urls".into()),
    };
    let own = cluster.client_address(node);
    if urls.first() != Some(&own) {
        return Some(format!("connect_urls does not start with its own {own}"));
    }
    let others: BTreeSet<String> = (1..=cluster.len())
        .filter(|&other| other != node)
        .map(|other| cluster.client_address(other))
        .collect();
    let listed: BTreeSet<String> = urls[1..].iter().cloned().collect();
    if urls.len() != cluster.len() || listed != others {
        return Some(format!(
            "connect_urls after its own should be exactly {others:?}"
        ));
    }
    None
}

async fn cluster_info(flavor: Flavor) {
    let cluster = Cluster::formed(flavor, 3, Options::default()).await;
    for node in 1..=3 {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let mut raw = RawClient::connect(cluster.node(node).client_port()).await;
            let info = raw.read_info().await;
            let Some(problem) = info_problem(&cluster, node, &info) else {
                break;
            };
            if Instant::now() >= deadline {
                panic!(
                    "{}: node {node}'s INFO after {TIMEOUT:?}: {problem}:\n{info:#}",
                    flavor.name()
                );
            }
            // Poll interval of a bounded wait (a fresh connection each time).
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
differential!(cluster_info);

async fn cluster_five_nodes(flavor: Flavor) {
    let cluster = Cluster::formed(flavor, 5, Options::default()).await;
    for node in 1..=5 {
        let routez = routez(cluster.node(node));
        assert_eq!(
            remote_ids(&routez).len(),
            4,
            "{}: node {node}",
            flavor.name()
        );
    }
    check_pub_sub(&cluster, "cluster_five_nodes", 5, &[1, 4], 20).await;
    check_pub_sub(&cluster, "cluster_five_nodes", 2, &[3, 5], 20).await;
    check_queue_group(
        &cluster,
        "cluster_five_nodes",
        2,
        &[1, 2, 3, 4, 5],
        1,
        Some(4),
        100,
    )
    .await;
}
differential!(cluster_five_nodes);

async fn cluster_nats_py(flavor: Flavor) {
    let cluster = Cluster::formed(flavor, 2, Options::default()).await;
    let script = format!("{}/tests/py/cluster.py", env!("CARGO_MANIFEST_DIR"));
    // The script bounds itself (60 s); this only catches a hung interpreter.
    let output = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new("python3")
            .arg(&script)
            .arg(cluster.url(1))
            .arg(cluster.url(2))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("cluster.py did not finish within 90 s"))
    .expect("python3 runs (nats-py: pip install nats-py)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("nats-py cluster: ok"),
        "nats-py cluster failed against {} ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}\n{}",
        flavor.name(),
        output.status,
        cluster.logs()
    );
}
differential!(cluster_nats_py);

// ---- tern only ----

/// After a refused joiner: the cluster still routes among its own nodes
/// only, the joiner has no route, and pub/sub works across the cluster.
pub(crate) async fn assert_cluster_unaffected(cluster: &Cluster, joiner: &Server, test: &str) {
    let joiner_id = server_id(joiner);
    let joiner_routez = routez(joiner);
    assert!(
        remote_ids(&joiner_routez).is_empty(),
        "the refused node lists routes: {joiner_routez:#}"
    );
    for node in 1..=cluster.len() {
        let routez = routez(cluster.node(node));
        assert!(
            !remote_ids(&routez).contains(&joiner_id),
            "node {node} routes to the refused node {joiner_id}: {routez:#}"
        );
    }
    cluster.assert_formed();
    check_pub_sub(cluster, test, 2, &[1], 20).await;
    check_pub_sub(cluster, test, 1, &[2], 20).await;
}

async fn cluster_name_mismatch() {
    let cluster = Cluster::formed(Flavor::Tern, 2, Options::default()).await;
    let stranger = cluster.start_joiner(
        "stranger",
        &format!("{}-other", cluster.name),
        cluster.options().clone(),
    );
    wait_log(&stranger, "the stranger", "cluster name mismatch", TIMEOUT).await;
    wait_log(cluster.node(1), "node 1", "cluster name mismatch", TIMEOUT).await;
    assert_cluster_unaffected(&cluster, &stranger, "cluster_name_mismatch").await;
}
tern_only!(cluster_name_mismatch);

async fn cluster_shard_count_mismatch() {
    let options = Options {
        shards: Some(2),
        ..Options::default()
    };
    let cluster = Cluster::formed(Flavor::Tern, 2, options).await;
    let stranger = cluster.start_joiner(
        "one-shard",
        &cluster.name,
        Options {
            shards: Some(1),
            ..Options::default()
        },
    );
    wait_log(
        &stranger,
        "the 1-shard node",
        "shard count mismatch",
        TIMEOUT,
    )
    .await;
    wait_log(cluster.node(1), "node 1", "shard count mismatch", TIMEOUT).await;
    assert_cluster_unaffected(&cluster, &stranger, "cluster_shard_count_mismatch").await;
}
tern_only!(cluster_shard_count_mismatch);

/// Deterministic pseudo-random bytes (xorshift64*).
fn noise(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed.max(1);
    (0..length)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

async fn cluster_route_garbage() {
    let mut cluster = Cluster::formed(Flavor::Tern, 2, Options::default()).await;
    let seed = common::seed_from_env("TERN_ROUTE_GARBAGE_SEED", 0x5eed);
    let route_port = cluster.route_port(1);

    // 64 KiB of noise.
    let mut raw = RawClient::connect(route_port).await;
    // The server may close before reading it all: a failed write is fine.
    let _ = raw.try_send(&noise(seed, 64 * 1024)).await;
    raw.expect_closed(TIMEOUT).await;

    // A frame length of 4 GiB, as a u32 (either byte order) and as a
    // big-endian u64, then a little noise.
    let mut frame = vec![0xff; 4];
    frame.extend_from_slice(&(4u64 << 30).to_be_bytes());
    frame.extend_from_slice(&noise(seed ^ 1, 1024));
    let mut raw = RawClient::connect(route_port).await;
    let _ = raw.try_send(&frame).await;
    raw.expect_closed(TIMEOUT).await;

    assert!(
        cluster.node_mut(1).is_running(),
        "node 1 exited:\n{}",
        cluster.logs()
    );
    cluster.assert_formed();
    check_pub_sub(&cluster, "cluster_route_garbage", 2, &[1], 20).await;
    check_pub_sub(&cluster, "cluster_route_garbage", 1, &[2], 20).await;
}
tern_only!(cluster_route_garbage);

/// `wait_interest` (probes on the subject itself) across nodes, for
/// subscriptions whose client the test does not drive.
async fn cluster_wait_interest(flavor: Flavor) {
    let cluster = Cluster::formed(flavor, 3, Options::default()).await;
    let base = subject("cluster_wait_interest", flavor, "");
    let subject = format!("{base}.w");
    let publisher = cluster.connect(3).await;
    let subscriber_client = cluster.connect(1).await;
    let mut wildcard = subscriber_client
        .subscribe(format!("{base}.*"))
        .await
        .unwrap();
    wait_interest(&publisher, &subject, &mut wildcard).await;
    publisher
        .publish(subject.clone(), "after".into())
        .await
        .unwrap();
    flush(&publisher).await;
    let message = next_message(&mut wildcard, TIMEOUT).await;
    assert_eq!(&message.payload[..], b"after", "no probe left behind");
}
differential!(cluster_wait_interest);

/// What operators see of the routes: `/routez` lists one route per shard
/// and other node with nats-server's fields and the owning shard, `/varz`
/// counts them, `/metrics` has a `tern_route_up` per route and the
/// message counters move when messages cross.
async fn cluster_monitoring() {
    let cluster = Cluster::formed(Flavor::Tern, 3, Options::default()).await;
    let test = "cluster_monitoring";
    // Subscriber on node 2, publisher on node 1.
    check_pub_sub(&cluster, test, 2, &[1], 20).await;
    let node = cluster.node(1);
    let routez = common::cluster::routez(node);
    let routes = routez["routes"].as_array().expect("routes");
    // Two shards (the harness default), two other nodes.
    assert_eq!(routes.len(), 4, "{routez:#}");
    assert_eq!(routez["num_routes"], 4);
    for route in routes {
        for field in [
            "rid",
            "remote_id",
            "remote_name",
            "did_solicit",
            "ip",
            "port",
            "pending_size",
        ] {
            assert!(!route[field].is_null(), "{field} missing: {route:#}");
        }
    }
    let shards: BTreeSet<u64> = routes
        .iter()
        .map(|route| route["shard"].as_u64().unwrap())
        .collect();
    assert_eq!(shards, BTreeSet::from([0, 1]));
    let names: BTreeSet<&str> = routes
        .iter()
        .map(|route| route["remote_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, BTreeSet::from(["n2", "n3"]));
    let sent: u64 = routes
        .iter()
        .filter(|route| route["remote_name"] == "n2")
        .map(|route| route["out_msgs"].as_u64().unwrap())
        .sum();
    assert!(sent >= 20, "node 1 sent {sent} messages to n2: {routez:#}");
    assert_eq!(node.http_json("/varz")["routes"], 4);
    let (status, metrics) = node.http_get("/metrics");
    assert_eq!(status, 200);
    let up = metrics
        .lines()
        .filter(|line| line.starts_with("tern_route_up{"))
        .count();
    assert_eq!(up, 4, "{metrics}");
    assert!(
        metrics.contains("tern_route_out_msgs_total{shard=\""),
        "{metrics}"
    );
}
tern_only!(cluster_monitoring);

/// A node named like one already in the cluster is refused with a log
/// line on both sides, and the cluster keeps serving.
async fn cluster_duplicate_server_name() {
    let cluster = Cluster::formed(Flavor::Tern, 2, Options::default()).await;
    let twin = cluster.start_joiner("n2", &cluster.name, cluster.options().clone());
    wait_log(&twin, "the twin", "duplicate server name", TIMEOUT).await;
    wait_log(cluster.node(1), "node 1", "duplicate server name", TIMEOUT).await;
    assert_cluster_unaffected(&cluster, &twin, "cluster_duplicate_server_name").await;
}
tern_only!(cluster_duplicate_server_name);

/// A client told of the other nodes (INFO `connect_urls`) fails over when
/// its node dies: it reconnects to another node by itself, its
/// subscription is restored there, and messages published on a third node
/// reach it.
async fn cluster_client_fails_over(flavor: Flavor) {
    let mut cluster = Cluster::formed(flavor, 3, Options::default()).await;
    let topic = subject("cluster_client_fails_over", flavor, "topic");
    // Only node 1's URL: the others must come from INFO.
    let roaming = cluster
        .node(1)
        .connect_with(async_nats::ConnectOptions::new().retain_servers_order())
        .await;
    let deadline = Instant::now() + TIMEOUT;
    while roaming.server_info().connect_urls.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "{}: connect_urls never listed the cluster: {:?}",
            flavor.name(),
            roaming.server_info().connect_urls
        );
        flush(&roaming).await;
    }
    let mut subscription = roaming.subscribe(topic.clone()).await.unwrap();
    let first_port = roaming.server_info().port;
    assert_eq!(first_port, cluster.node(1).client_port());
    cluster.kill(1);
    let publisher = cluster.connect(3).await;
    // Publish until the subscription, restored on node 2 or 3, gets one.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut index = 0u64;
    let received = loop {
        assert!(
            Instant::now() < deadline,
            "{}: no message reached the client after its node died (now on port {}):\n{}",
            flavor.name(),
            roaming.server_info().port,
            cluster.logs()
        );
        publisher
            .publish(topic.clone(), index.to_string().into())
            .await
            .unwrap();
        flush(&publisher).await;
        index += 1;
        if let Ok(Some(message)) =
            tokio::time::timeout(Duration::from_millis(100), subscription.next()).await
        {
            break message;
        }
    };
    assert!(received.payload.len() <= 20);
    assert_ne!(
        roaming.server_info().port,
        first_port,
        "reconnected elsewhere"
    );
}
differential!(cluster_client_fails_over);
