//! tern-only: routing across shards (2 shards). Connections are placed by the
//! kernel; tests open connections until `/connz` (each entry has `shard`)
//! shows the placement they need. Covers queue groups with members on both
//! shards, plain fan-out to both shards, per-publisher ordering across
//! shards, request/reply across shards, interest removal across shards, and
//! the interest barrier (a PONG after SUB means every shard knows the
//! subscription).

use crate::common;

use std::collections::HashSet;
use std::time::Instant;

use common::{next_message, sync_interest, text, Flavor, RawClient, Server, QUIET, TIMEOUT};
use futures::StreamExt;

const SHARDS: usize = 2;
/// Connections opened at most while looking for one on a given shard.
const PLACEMENT_ATTEMPTS: usize = 64;

fn two_shard_server() -> Server {
    Server::start(
        Flavor::Tern,
        common::Options {
            shards: Some(SHARDS),
            ..common::Options::default()
        },
    )
}

/// Hands out async-nats clients on a requested shard, keeping the others for later.
struct Placer<'a> {
    server: &'a Server,
    spare: Vec<Vec<async_nats::Client>>,
}

impl<'a> Placer<'a> {
    fn new(server: &'a Server) -> Placer<'a> {
        Placer {
            server,
            spare: (0..SHARDS).map(|_| Vec::new()).collect(),
        }
    }

    async fn on_shard(&mut self, shard: usize) -> async_nats::Client {
        for _ in 0..PLACEMENT_ATTEMPTS {
            if let Some(client) = self.spare[shard].pop() {
                return client;
            }
            let client = self.server.connect().await;
            let cid = client.server_info().client_id;
            let placed = self
                .server
                .shard_of(cid)
                .unwrap_or_else(|| panic!("/connz does not list cid {cid} with a shard"));
            assert!(placed < SHARDS, "shard {placed} out of range");
            self.spare[placed].push(client);
        }
        panic!("no connection landed on shard {shard} in {PLACEMENT_ATTEMPTS} attempts");
    }
}

/// A raw connection (after CONNECT/PING/PONG) served by `shard`.
async fn raw_on_shard(server: &Server, shard: usize) -> RawClient {
    for _ in 0..PLACEMENT_ATTEMPTS {
        let (mut raw, info) = server.raw().await;
        raw.ignore_server_pings();
        let cid = info["client_id"].as_u64().expect("client_id");
        raw.send(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true}\r\nPING\r\n")
            .await;
        assert_eq!(
            text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
            "PONG\r\n"
        );
        if server.shard_of(cid) == Some(shard) {
            return raw;
        }
    }
    panic!("no raw connection landed on shard {shard} in {PLACEMENT_ATTEMPTS} attempts");
}

async fn queue_group_across_shards() {
    const MESSAGES: usize = 400;
    let server = two_shard_server();
    let mut placer = Placer::new(&server);
    let subject = "shards.queue.work";
    let publisher = placer.on_shard(0).await;

    let mut members = Vec::new();
    let mut member_clients = Vec::new();
    for shard in [0, 1, 0, 1] {
        let client = placer.on_shard(shard).await;
        let subscriber = client
            .queue_subscribe(subject, "workers".into())
            .await
            .unwrap();
        sync_interest(&client, &publisher).await;
        members.push((shard, subscriber));
        member_clients.push(client);
    }
    let mut plain = Vec::new();
    let mut plain_clients = Vec::new();
    for shard in 0..SHARDS {
        let client = placer.on_shard(shard).await;
        plain.push((shard, client.subscribe(subject).await.unwrap()));
        sync_interest(&client, &publisher).await;
        plain_clients.push(client);
    }
    for index in 0..MESSAGES {
        publisher
            .publish(subject, index.to_string().into())
            .await
            .unwrap();
    }
    common::flush(&publisher).await;

    for (shard, subscriber) in plain.iter_mut() {
        for index in 0..MESSAGES {
            let message = next_message(subscriber, TIMEOUT).await;
            assert_eq!(
                String::from_utf8_lossy(&message.payload),
                index.to_string(),
                "plain subscriber on shard {shard}: every message, in order"
            );
        }
    }

    let mut merged = futures::stream::select_all(
        members
            .into_iter()
            .map(|(shard, subscriber)| subscriber.map(move |message| (shard, message))),
    );
    let mut per_shard = [0usize; SHARDS];
    let mut seen = HashSet::new();
    let deadline = Instant::now() + TIMEOUT;
    while seen.len() < MESSAGES {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let (shard, message) = tokio::time::timeout(remaining, merged.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "queue group got {} of {MESSAGES} (per shard {per_shard:?}){}",
                    seen.len(),
                    server.shard_counters()
                )
            })
            .expect("queue subscriptions ended");
        let payload = String::from_utf8_lossy(&message.payload).to_string();
        assert!(
            seen.insert(payload.clone()),
            "message {payload} delivered twice in the group"
        );
        per_shard[shard] += 1;
    }
    if let Ok(Some((shard, message))) = tokio::time::timeout(QUIET, merged.next()).await {
        panic!(
            "extra queue delivery on shard {shard}: {:?}",
            message.payload
        );
    }
    assert!(
        per_shard.iter().all(|&count| count > 0),
        "members on both shards get some: {per_shard:?}"
    );
    drop((member_clients, plain_clients));
}
tern_only!(queue_group_across_shards);

async fn ordering_across_shards() {
    const MESSAGES: usize = 10_000;
    let server = two_shard_server();
    let mut placer = Placer::new(&server);
    let mut runs = Vec::new();
    for (from, to) in [(0, 1), (1, 0)] {
        let publisher = placer.on_shard(from).await;
        let subscriber_client = placer.on_shard(to).await;
        let subject = format!("shards.order.{from}to{to}");
        let mut subscriber = subscriber_client.subscribe(subject.clone()).await.unwrap();
        sync_interest(&subscriber_client, &publisher).await;
        runs.push(tokio::spawn(async move {
            let publishing = {
                let publisher = publisher.clone();
                let subject = subject.clone();
                tokio::spawn(async move {
                    for index in 0..MESSAGES {
                        publisher
                            .publish(subject.clone(), index.to_string().into())
                            .await
                            .unwrap();
                    }
                    common::flush(&publisher).await;
                })
            };
            for index in 0..MESSAGES {
                let message = next_message(&mut subscriber, TIMEOUT).await;
                assert_eq!(
                    String::from_utf8_lossy(&message.payload),
                    index.to_string(),
                    "shard {from} -> shard {to}: message {index} out of order"
                );
            }
            publishing.await.unwrap();
            drop(subscriber_client);
        }));
    }
    for run in runs {
        run.await.unwrap();
    }
}
tern_only!(ordering_across_shards);

async fn request_reply_across_shards() {
    let server = two_shard_server();
    let mut placer = Placer::new(&server);
    for (responder_shard, requester_shard) in [(0, 1), (1, 0)] {
        let responder = placer.on_shard(responder_shard).await;
        let requester = placer.on_shard(requester_shard).await;
        let subject = format!("shards.svc.{responder_shard}");
        let mut requests = responder.subscribe(subject.clone()).await.unwrap();
        sync_interest(&responder, &requester).await;
        let answering = {
            let responder = responder.clone();
            tokio::spawn(async move {
                while let Some(request) = requests.next().await {
                    let reply = request.reply.expect("request has a reply subject");
                    let mut answer = format!("from{responder_shard}:").into_bytes();
                    answer.extend_from_slice(&request.payload);
                    responder.publish(reply, answer.into()).await.unwrap();
                }
            })
        };
        let answer =
            tokio::time::timeout(TIMEOUT, requester.request(subject.clone(), "one".into()))
                .await
                .expect("request timed out")
                .expect("request failed");
        assert_eq!(
            String::from_utf8_lossy(&answer.payload),
            format!("from{responder_shard}:one")
        );
        let requests = (0..200).map(|index| {
            let requester = requester.clone();
            let subject = subject.clone();
            async move {
                let answer = requester
                    .request(subject, format!("r{index}").into())
                    .await
                    .expect("request failed");
                assert_eq!(
                    String::from_utf8_lossy(&answer.payload),
                    format!("from{responder_shard}:r{index}")
                );
            }
        });
        tokio::time::timeout(TIMEOUT, futures::future::join_all(requests))
            .await
            .expect("concurrent cross-shard requests timed out");
        answering.abort();
    }
}
tern_only!(request_reply_across_shards);

async fn interest_removal_across_shards() {
    let server = two_shard_server();
    let mut placer = Placer::new(&server);
    let responder = placer.on_shard(1).await;
    let requester = placer.on_shard(0).await;
    let subject = "shards.leaving";
    let mut requests = responder.subscribe(subject).await.unwrap();
    sync_interest(&responder, &requester).await;
    requester.publish(subject, "x".into()).await.unwrap();
    assert_eq!(
        &next_message(&mut requests, TIMEOUT).await.payload[..],
        b"x"
    );
    requests.unsubscribe().await.unwrap();
    common::flush(&responder).await;
    // Once shard 0 learns the interest is gone, requests get no responders.
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let outcome = requester
            .send_request(
                subject,
                async_nats::Request::new()
                    .payload("y".into())
                    .timeout(Some(std::time::Duration::from_millis(500))),
            )
            .await;
        match outcome {
            Err(error) if error.kind() == async_nats::client::RequestErrorKind::NoResponders => {
                break
            }
            Err(error) if error.kind() == async_nats::client::RequestErrorKind::TimedOut => {}
            other => panic!("unexpected outcome after the only subscriber left: {other:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "interest removal never reached shard 0"
        );
    }
}
tern_only!(interest_removal_across_shards);

async fn interest_barrier() {
    const ROUNDS: usize = 50;
    let server = two_shard_server();
    let mut on_shard = [
        raw_on_shard(&server, 0).await,
        raw_on_shard(&server, 1).await,
    ];
    for round in 0..ROUNDS {
        let (subscriber_shard, publisher_shard) = if round % 2 == 0 { (0, 1) } else { (1, 0) };
        let subject = format!("shards.barrier.{round}");
        let sid = round + 1;
        {
            let subscriber = &mut on_shard[subscriber_shard];
            subscriber
                .send(format!("SUB {subject} {sid}\r\nPING\r\n").as_bytes())
                .await;
            assert_eq!(
                text(&subscriber.read_until(b"PONG\r\n", TIMEOUT).await),
                "PONG\r\n"
            );
        }
        // Immediately, from the other shard: the PONG promised every shard knows.
        on_shard[publisher_shard]
            .send(format!("PUB {subject} {}\r\n{round}\r\n", round.to_string().len()).as_bytes())
            .await;
        let expected = format!(
            "MSG {subject} {sid} {}\r\n{round}\r\n",
            round.to_string().len()
        );
        let got = on_shard[subscriber_shard]
            .try_read_until(format!("\r\n{round}\r\n").as_bytes(), TIMEOUT)
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "round {round}: publish from shard {publisher_shard} right after SUB+PONG on shard {subscriber_shard} was not delivered ({error:?}){}",
                    server.shard_counters()
                )
            });
        assert_eq!(text(&got), expected, "round {round}");
    }
    // Both connections are still healthy and nothing else arrived.
    for raw in on_shard.iter_mut() {
        raw.send(b"PING\r\n").await;
        assert_eq!(
            text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
            "PONG\r\n"
        );
    }
}
tern_only!(interest_barrier);

/// Proves `subscriber` has nothing pending from `publisher` without waiting
/// out a quiet period: subscribes it to `subject` (its PONG: every shard
/// knows), publishes a marker there and asserts the marker is the next
/// thing it reads. One publisher's messages reach a connection in order
/// across shards (one ordered channel per shard pair), so anything sent
/// earlier would come first. Unsubscribes again.
async fn expect_marker_next(publisher: &mut RawClient, subscriber: &mut RawClient, subject: &str) {
    subscriber
        .send(format!("SUB {subject} 99\r\nPING\r\n").as_bytes())
        .await;
    assert_eq!(
        text(&subscriber.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    publisher
        .send(format!("PUB {subject} 6\r\nmarker\r\n").as_bytes())
        .await;
    assert_eq!(
        text(&subscriber.read_until(b"marker\r\n", TIMEOUT).await),
        format!("MSG {subject} 99 6\r\nmarker\r\n"),
        "nothing before the marker"
    );
    subscriber.send(b"UNSUB 99\r\nPING\r\n").await;
    assert_eq!(
        text(&subscriber.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
}

async fn unsubscribe_barrier() {
    // The mirror image: after UNSUB + PONG nothing published from the other
    // shard is delivered (a marker published after it arrives first).
    let server = two_shard_server();
    let mut subscriber = raw_on_shard(&server, 0).await;
    let mut publisher = raw_on_shard(&server, 1).await;
    subscriber.send(b"SUB shards.unsub 1\r\nPING\r\n").await;
    assert_eq!(
        text(&subscriber.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    publisher.send(b"PUB shards.unsub 1\r\na\r\n").await;
    assert_eq!(
        text(&subscriber.read_until(b"a\r\n", TIMEOUT).await),
        "MSG shards.unsub 1 1\r\na\r\n"
    );
    subscriber.send(b"UNSUB 1\r\nPING\r\n").await;
    assert_eq!(
        text(&subscriber.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    publisher.send(b"PUB shards.unsub 1\r\nb\r\nPING\r\n").await;
    assert_eq!(
        text(&publisher.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    expect_marker_next(&mut publisher, &mut subscriber, "shards.unsub.marker").await;
    let varz = server.varz();
    assert_eq!(varz["subscriptions"], 0, "{varz}");
}
tern_only!(unsubscribe_barrier);

async fn auto_unsubscribe_across_shards() {
    let server = two_shard_server();
    let mut subscriber = raw_on_shard(&server, 0).await;
    let mut publisher = raw_on_shard(&server, 1).await;
    subscriber
        .send(b"SUB shards.auto 1\r\nUNSUB 1 5\r\nPING\r\n")
        .await;
    assert_eq!(
        text(&subscriber.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    let mut batch = String::new();
    for index in 0..10 {
        batch.push_str(&format!("PUB shards.auto 1\r\n{index}\r\n"));
    }
    publisher.send(format!("{batch}PING\r\n").as_bytes()).await;
    assert_eq!(
        text(&publisher.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    let expected: String = (0..5)
        .map(|index| format!("MSG shards.auto 1 1\r\n{index}\r\n"))
        .collect();
    assert_eq!(
        text(&subscriber.read_until(b"\r\n4\r\n", TIMEOUT).await),
        expected
    );
    expect_marker_next(&mut publisher, &mut subscriber, "shards.auto.marker").await;
    server
        .wait_varz("the subscription removed", TIMEOUT, |varz| {
            varz["subscriptions"].as_u64() == Some(0)
        })
        .await;
}
tern_only!(auto_unsubscribe_across_shards);

async fn headers_across_shards() {
    let server = two_shard_server();
    let mut with_headers = raw_on_shard(&server, 0).await;
    // A connection without headers on the other shard.
    let mut without = None;
    for _ in 0..PLACEMENT_ATTEMPTS {
        let (mut raw, info) = server.raw().await;
        raw.ignore_server_pings();
        raw.send(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":false}\r\nPING\r\n")
            .await;
        assert_eq!(
            text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
            "PONG\r\n"
        );
        if server.shard_of(info["client_id"].as_u64().unwrap()) == Some(1) {
            without = Some(raw);
            break;
        }
    }
    let mut without = without.expect("a connection on shard 1");
    without.send(b"SUB shards.hdr 1\r\nPING\r\n").await;
    assert_eq!(
        text(&without.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    let mut publisher = raw_on_shard(&server, 0).await;
    with_headers.send(b"SUB shards.hdr 2\r\nPING\r\n").await;
    assert_eq!(
        text(&with_headers.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    let header = "NATS/1.0\r\nA: b\r\n\r\n";
    publisher
        .send(
            format!(
                "HPUB shards.hdr r.x {} {}\r\n{header}hi\r\n",
                header.len(),
                header.len() + 2
            )
            .as_bytes(),
        )
        .await;
    assert_eq!(
        text(&without.read_until(b"hi\r\n", TIMEOUT).await),
        "MSG shards.hdr 1 r.x 2\r\nhi\r\n"
    );
    assert_eq!(
        text(&with_headers.read_until(b"hi\r\n", TIMEOUT).await),
        format!(
            "HMSG shards.hdr 2 r.x {} {}\r\n{header}hi\r\n",
            header.len(),
            header.len() + 2
        )
    );
}
tern_only!(headers_across_shards);

async fn fan_out_to_many_connections() {
    const SUBSCRIBERS: usize = 40;
    const MESSAGES: usize = 200;
    let server = two_shard_server();
    let publisher = server.connect().await;
    let mut subscribers = Vec::new();
    let mut shards_seen = HashSet::new();
    for _ in 0..SUBSCRIBERS {
        let client = server.connect().await;
        shards_seen.insert(
            server
                .shard_of(client.server_info().client_id)
                .expect("shard"),
        );
        let subscriber = client.subscribe("shards.fan").await.unwrap();
        sync_interest(&client, &publisher).await;
        subscribers.push((client, subscriber));
    }
    assert_eq!(
        shards_seen.len(),
        SHARDS,
        "{SUBSCRIBERS} connections should span both shards"
    );
    for index in 0..MESSAGES {
        publisher
            .publish("shards.fan", index.to_string().into())
            .await
            .unwrap();
    }
    common::flush(&publisher).await;
    for (number, (_, subscriber)) in subscribers.iter_mut().enumerate() {
        for index in 0..MESSAGES {
            let message = next_message(subscriber, TIMEOUT).await;
            assert_eq!(
                String::from_utf8_lossy(&message.payload),
                index.to_string(),
                "subscriber {number}"
            );
        }
    }
}
tern_only!(fan_out_to_many_connections);

async fn burst_across_shards_keeps_order() {
    // Far more messages than the inter-shard rings hold, in one write: the
    // publisher is slowed down, nothing is lost or reordered.
    const MESSAGES: usize = 100_000;
    let server = two_shard_server();
    let mut subscriber = raw_on_shard(&server, 1).await;
    let mut publisher = raw_on_shard(&server, 0).await;
    subscriber.send(b"SUB shards.burst 1\r\nPING\r\n").await;
    assert_eq!(
        text(&subscriber.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    let mut batch = Vec::with_capacity(MESSAGES * 32);
    let mut expected = Vec::with_capacity(MESSAGES * 40);
    for index in 0..MESSAGES {
        let payload = format!("{index:06}");
        batch.extend_from_slice(format!("PUB shards.burst 6\r\n{payload}\r\n").as_bytes());
        expected.extend_from_slice(format!("MSG shards.burst 1 6\r\n{payload}\r\n").as_bytes());
    }
    let sending = tokio::spawn(async move {
        publisher.send(&batch).await;
        publisher
    });
    let got = subscriber.read_exact_bytes(expected.len(), TIMEOUT).await;
    if got != expected {
        let at = got
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "burst differs at byte {at}: got {:?}, expected {:?}",
            text(&got[at.saturating_sub(40)..(at + 40).min(got.len())]),
            text(&expected[at.saturating_sub(40)..(at + 40).min(expected.len())])
        );
    }
    sending.await.unwrap();
}
tern_only!(burst_across_shards_keeps_order);

async fn queue_members_leaving_a_shard() {
    const MESSAGES: usize = 100;
    let server = two_shard_server();
    let mut stay = raw_on_shard(&server, 0).await;
    let mut leave_a = raw_on_shard(&server, 1).await;
    let mut leave_b = raw_on_shard(&server, 1).await;
    for raw in [&mut stay, &mut leave_a, &mut leave_b] {
        raw.send(b"SUB shards.qleave workers 1\r\nPING\r\n").await;
        assert_eq!(
            text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
            "PONG\r\n"
        );
    }
    // Both members on shard 1 leave; after their PONGs every shard knows.
    for raw in [&mut leave_a, &mut leave_b] {
        raw.send(b"UNSUB 1\r\nPING\r\n").await;
        assert_eq!(
            text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
            "PONG\r\n"
        );
    }
    let mut publisher = raw_on_shard(&server, 0).await;
    let mut batch = String::new();
    let mut expected = String::new();
    for index in 0..MESSAGES {
        let payload = format!("{index:03}");
        batch.push_str(&format!("PUB shards.qleave 3\r\n{payload}\r\n"));
        expected.push_str(&format!("MSG shards.qleave 1 3\r\n{payload}\r\n"));
    }
    publisher.send(format!("{batch}PING\r\n").as_bytes()).await;
    assert_eq!(
        text(&publisher.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    let got = stay.read_exact_bytes(expected.len(), TIMEOUT).await;
    assert_eq!(
        text(&got),
        expected,
        "the remaining member gets every message"
    );
    expect_marker_next(&mut publisher, &mut leave_a, "shards.qleave.marker").await;
    expect_marker_next(&mut publisher, &mut leave_b, "shards.qleave.marker").await;
}
tern_only!(queue_members_leaving_a_shard);
