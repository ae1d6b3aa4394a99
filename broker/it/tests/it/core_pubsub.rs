//! Core publish/subscribe through the async-nats client, against both
//! tern-server and nats-server: plain pub/sub, `*`/`>` wildcards, queue
//! groups, request/reply (single and concurrent), multi-value headers, no
//! responders, auto-unsubscribe, `no_echo`, per-publisher ordering, and many
//! subscriptions on one connection.

use crate::common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{
    expect_nothing_before_marker, flush, next_message, subject, sync_interest, Flavor, Server,
    QUIET, TIMEOUT,
};
use futures::StreamExt;

async fn pub_sub(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let subscriber_client = server.connect().await;
    let publisher = server.connect().await;
    let subject = subject("pub_sub", flavor, "greeting");
    let mut subscriber = subscriber_client.subscribe(subject.clone()).await.unwrap();
    sync_interest(&subscriber_client, &publisher).await;
    publisher
        .publish(subject.clone(), "hello".into())
        .await
        .unwrap();
    flush(&publisher).await;
    let placement = server.placement(&[
        ("subscriber", &subscriber_client),
        ("publisher", &publisher),
    ]);
    let message = tokio::time::timeout(TIMEOUT, subscriber.next())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{}: message not delivered within {TIMEOUT:?}{placement}{}",
                flavor.name(),
                server.shard_counters()
            )
        })
        .expect("subscription ended");
    assert_eq!(message.subject.as_str(), subject);
    assert_eq!(&message.payload[..], b"hello");
    assert!(message.reply.is_none());
    expect_nothing_before_marker(&publisher, &subject, &mut subscriber).await;
}
differential!(pub_sub);

/// Collects payloads until one equals `END`.
async fn collect_until_end(subscriber: &mut async_nats::Subscriber) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    loop {
        let message = next_message(subscriber, TIMEOUT).await;
        let payload = String::from_utf8_lossy(&message.payload).to_string();
        if payload == "END" {
            return seen;
        }
        seen.push((message.subject.to_string(), payload));
    }
}

async fn wildcards(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let client = server.connect().await;
    let base = subject("wildcards", flavor, "a");
    let mut literal = client.subscribe(base.clone()).await.unwrap();
    let mut star = client.subscribe(format!("{base}.*")).await.unwrap();
    let mut full = client.subscribe(format!("{base}.>")).await.unwrap();
    let publisher = server.connect().await;
    sync_interest(&client, &publisher).await;
    let one = base.clone();
    let two = format!("{base}.b");
    let three = format!("{base}.b.c");
    publisher.publish(one.clone(), "1".into()).await.unwrap();
    publisher.publish(two.clone(), "2".into()).await.unwrap();
    publisher.publish(three.clone(), "3".into()).await.unwrap();
    // End markers: one for the literal subscription, one for both wildcards.
    publisher.publish(one.clone(), "END".into()).await.unwrap();
    publisher
        .publish(format!("{base}.z"), "END".into())
        .await
        .unwrap();
    flush(&publisher).await;
    assert_eq!(
        collect_until_end(&mut literal).await,
        vec![(one.clone(), "1".to_string())],
        "literal {one}"
    );
    assert_eq!(
        collect_until_end(&mut star).await,
        vec![(two.clone(), "2".to_string())],
        "{base}.* must match {two} but not {one} or {three}"
    );
    assert_eq!(
        collect_until_end(&mut full).await,
        vec![
            (two.clone(), "2".to_string()),
            (three.clone(), "3".to_string())
        ],
        "{base}.> must match {two} and {three} but not {one}"
    );
    // Wildcard tokens must be whole tokens: `a*` is a literal token.
    let mut partial = client.subscribe(format!("{base}.b*")).await.unwrap();
    sync_interest(&client, &publisher).await;
    publisher
        .publish(format!("{base}.bx"), "no".into())
        .await
        .unwrap();
    publisher
        .publish(format!("{base}.b*"), "yes".into())
        .await
        .unwrap();
    flush(&publisher).await;
    let message = next_message(&mut partial, TIMEOUT).await;
    assert_eq!(&message.payload[..], b"yes");
    expect_nothing_before_marker(&publisher, &format!("{base}.b*"), &mut partial).await;
}
differential!(wildcards);

async fn queue_groups(flavor: Flavor) {
    const MESSAGES: usize = 200;
    let server = Server::default_for(flavor);
    let subject = subject("queue_groups", flavor, "work");
    let publisher = server.connect().await;
    let mut members = Vec::new();
    let mut member_clients = Vec::new();
    for _ in 0..3 {
        let client = server.connect().await;
        members.push(
            client
                .queue_subscribe(subject.clone(), "workers".into())
                .await
                .unwrap(),
        );
        sync_interest(&client, &publisher).await;
        member_clients.push(client);
    }
    let mut plain = Vec::new();
    let mut plain_clients = Vec::new();
    for _ in 0..2 {
        let client = server.connect().await;
        plain.push(client.subscribe(subject.clone()).await.unwrap());
        sync_interest(&client, &publisher).await;
        plain_clients.push(client);
    }
    for index in 0..MESSAGES {
        publisher
            .publish(subject.clone(), index.to_string().into())
            .await
            .unwrap();
    }
    flush(&publisher).await;

    for (number, subscriber) in plain.iter_mut().enumerate() {
        for index in 0..MESSAGES {
            let message = next_message(subscriber, TIMEOUT).await;
            assert_eq!(
                String::from_utf8_lossy(&message.payload),
                index.to_string(),
                "plain subscriber {number} must get every message in order"
            );
        }
    }

    let mut merged = futures::stream::select_all(
        members
            .into_iter()
            .enumerate()
            .map(|(number, subscriber)| subscriber.map(move |message| (number, message))),
    );
    let mut per_member = [0usize; 3];
    let mut seen = HashSet::new();
    let deadline = Instant::now() + TIMEOUT;
    while seen.len() < MESSAGES {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let (number, message) = tokio::time::timeout(remaining, merged.next())
            .await
            .unwrap_or_else(|_| panic!("queue group got {} of {MESSAGES} messages", seen.len()))
            .expect("queue subscriptions ended");
        let payload = String::from_utf8_lossy(&message.payload).to_string();
        assert!(
            seen.insert(payload.clone()),
            "message {payload} delivered to more than one member"
        );
        per_member[number] += 1;
    }
    if let Ok(Some((number, message))) = tokio::time::timeout(QUIET, merged.next()).await {
        panic!(
            "extra queue delivery to member {number}: {:?}",
            message.payload
        );
    }
    assert!(
        per_member.iter().all(|&count| count > 0),
        "every member should get some: {per_member:?}"
    );
    drop(member_clients);
    drop(plain_clients);
}
differential!(queue_groups);

/// A responder answering `re:<payload>` until its subscription ends.
async fn spawn_responder(
    client: async_nats::Client,
    subject: String,
    requester: &async_nats::Client,
) -> tokio::task::JoinHandle<()> {
    let mut requests = client.subscribe(subject).await.unwrap();
    sync_interest(&client, requester).await;
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            if let Some(reply) = request.reply {
                let mut answer = b"re:".to_vec();
                answer.extend_from_slice(&request.payload);
                client.publish(reply, answer.into()).await.unwrap();
            }
        }
    })
}

async fn request_reply(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let subject = subject("request_reply", flavor, "svc");
    let requester = server.connect().await;
    let responder = spawn_responder(server.connect().await, subject.clone(), &requester).await;
    let answer = tokio::time::timeout(TIMEOUT, requester.request(subject.clone(), "one".into()))
        .await
        .expect("request timed out")
        .expect("request failed");
    assert_eq!(&answer.payload[..], b"re:one");

    // Many concurrent requests share the client's one wildcard inbox.
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
                format!("re:r{index}")
            );
        }
    });
    tokio::time::timeout(TIMEOUT, futures::future::join_all(requests))
        .await
        .expect("concurrent requests timed out");
    responder.abort();
}
differential!(request_reply);

async fn headers_multi_value(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let client = server.connect().await;
    let subject = subject("headers_multi_value", flavor, "h");
    let mut subscriber = client.subscribe(subject.clone()).await.unwrap();
    let publisher = server.connect().await;
    sync_interest(&client, &publisher).await;
    let mut headers = async_nats::HeaderMap::new();
    headers.append("X-Multi", "first");
    headers.append("X-Multi", "second");
    headers.append("X-Multi", "third");
    headers.insert("Single", "only");
    publisher
        .publish_with_headers(subject.clone(), headers, "body".into())
        .await
        .unwrap();
    flush(&publisher).await;
    let message = next_message(&mut subscriber, TIMEOUT).await;
    assert_eq!(&message.payload[..], b"body");
    let headers = message.headers.expect("headers delivered");
    let values: Vec<&str> = headers
        .get_all("X-Multi")
        .map(|value| value.as_str())
        .collect();
    assert_eq!(values, ["first", "second", "third"]);
    assert_eq!(
        headers.get("Single").map(|value| value.as_str()),
        Some("only")
    );
    assert!(message.status.is_none());
}
differential!(headers_multi_value);

async fn no_responders(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let client = server.connect().await;
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        TIMEOUT,
        client.request(subject("no_responders", flavor, "nobody"), "x".into()),
    )
    .await
    .expect("request without responders timed out at the test level");
    let error = outcome.expect_err("a request nobody listens to must fail");
    assert_eq!(
        error.kind(),
        async_nats::client::RequestErrorKind::NoResponders,
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "no responders took {:?}",
        started.elapsed()
    );
}
differential!(no_responders);

async fn auto_unsubscribe(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let client = server.connect().await;
    let subject = subject("auto_unsubscribe", flavor, "n");
    flush(&client).await;
    let baseline = server.varz()["subscriptions"]
        .as_u64()
        .expect("varz subscriptions");
    let mut subscriber = client.subscribe(subject.clone()).await.unwrap();
    subscriber.unsubscribe_after(3).await.unwrap();
    let publisher = server.connect().await;
    sync_interest(&client, &publisher).await;
    for index in 0..10 {
        publisher
            .publish(subject.clone(), index.to_string().into())
            .await
            .unwrap();
    }
    flush(&publisher).await;
    let mut got = Vec::new();
    loop {
        match tokio::time::timeout(TIMEOUT, subscriber.next()).await {
            Ok(Some(message)) => got.push(String::from_utf8_lossy(&message.payload).to_string()),
            Ok(None) => break,
            Err(_) => panic!("subscription did not end after 3 messages; got {got:?}"),
        }
    }
    assert_eq!(got, ["0", "1", "2"]);
    // The server dropped the interest: the subscription count is back where it was.
    server
        .wait_varz("subscriptions back to the baseline", TIMEOUT, |varz| {
            varz["subscriptions"].as_u64() == Some(baseline)
        })
        .await;
}
differential!(auto_unsubscribe);

async fn no_echo(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let subject = subject("no_echo", flavor, "e");
    let quiet = server
        .connect_with(async_nats::ConnectOptions::new().no_echo())
        .await;
    let other = server.connect().await;
    let mut own = quiet.subscribe(subject.clone()).await.unwrap();
    let mut others = other.subscribe(subject.clone()).await.unwrap();
    sync_interest(&quiet, &other).await;
    sync_interest(&other, &quiet).await;

    quiet
        .publish(subject.clone(), "from-quiet".into())
        .await
        .unwrap();
    flush(&quiet).await;
    let message = next_message(&mut others, TIMEOUT).await;
    assert_eq!(&message.payload[..], b"from-quiet");

    // "from-other" is published after the server delivered "from-quiet": had
    // "from-quiet" been echoed to its publisher, it would arrive first.
    other
        .publish(subject.clone(), "from-other".into())
        .await
        .unwrap();
    flush(&other).await;
    let message = next_message(&mut own, TIMEOUT).await;
    assert_eq!(
        &message.payload[..],
        b"from-other",
        "echo=false must suppress the connection's own message"
    );
    let message = next_message(&mut others, TIMEOUT).await;
    assert_eq!(&message.payload[..], b"from-other", "echo is on by default");
    expect_nothing_before_marker(&other, &subject, &mut own).await;
}
differential!(no_echo);

async fn ordering(flavor: Flavor) {
    const MESSAGES: usize = 10_000;
    let server = Server::default_for(flavor);
    let subject = subject("ordering", flavor, "seq");
    let subscriber_client = server.connect().await;
    let mut subscriber = subscriber_client.subscribe(subject.clone()).await.unwrap();
    let publisher = server.connect().await;
    sync_interest(&subscriber_client, &publisher).await;
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
            flush(&publisher).await;
        })
    };
    for index in 0..MESSAGES {
        let message = next_message(&mut subscriber, TIMEOUT).await;
        assert_eq!(
            String::from_utf8_lossy(&message.payload),
            index.to_string(),
            "message {index} out of order"
        );
    }
    publishing.await.unwrap();
}
differential!(ordering);

async fn many_subscriptions(flavor: Flavor) {
    const SUBSCRIPTIONS: usize = 10_000;
    let server = Server::default_for(flavor);
    let client = server.connect().await;
    let base = subject("many_subscriptions", flavor, "");
    let mut subscribers = Vec::with_capacity(SUBSCRIPTIONS);
    for index in 0..SUBSCRIPTIONS {
        subscribers.push(client.subscribe(format!("{base}.{index}")).await.unwrap());
    }
    let publisher = server.connect().await;
    sync_interest(&client, &publisher).await;
    server
        .wait_json("/subsz", "10000 subscriptions", TIMEOUT, &mut |subsz| {
            subsz["num_subscriptions"].as_u64().unwrap_or(0) >= SUBSCRIPTIONS as u64
        })
        .await;
    for index in 0..SUBSCRIPTIONS {
        publisher
            .publish(format!("{base}.{index}"), index.to_string().into())
            .await
            .unwrap();
    }
    flush(&publisher).await;
    for (index, subscriber) in subscribers.iter_mut().enumerate() {
        let message = next_message(subscriber, TIMEOUT).await;
        assert_eq!(message.subject.as_str(), format!("{base}.{index}"));
        assert_eq!(String::from_utf8_lossy(&message.payload), index.to_string());
    }
}
differential!(many_subscriptions);
