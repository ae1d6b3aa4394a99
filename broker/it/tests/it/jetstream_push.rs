//! Push consumers through async-nats against tern-server and nats-server
//! 2.15.1: delivery to a deliver subject (and a deliver group), acks and
//! info, push_bound, idle heartbeats and flow control byte for byte,
//! last_per_subject, headers_only, replay original, ordered consumers as
//! async-nats drives them, ephemerals removed by inactive_threshold, and
//! rate_limit_bps pacing.

use crate::common;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::push, consumer::DeliverPolicy};
use async_nats::Message;
use common::js::{self, api, api_ok, create};
use common::{Flavor, TIMEOUT};
use futures::StreamExt;
use serde_json::{json, Value};

/// The next message on `subscriber`, or a panic after [`TIMEOUT`].
async fn next(subscriber: &mut async_nats::Subscriber, what: &str) -> Message {
    tokio::time::timeout(TIMEOUT, subscriber.next())
        .await
        .unwrap_or_else(|_| panic!("no {what} within {TIMEOUT:?}"))
        .expect("subscription open")
}

/// The next message that is not a status (heartbeat or flow control).
async fn next_data(subscriber: &mut async_nats::Subscriber, what: &str) -> Message {
    loop {
        let message = next(subscriber, what).await;
        if message.status.is_none() {
            return message;
        }
    }
}

/// CONSUMER.CREATE, naming the consumer in the subject when it has a name.
async fn create_consumer(client: &async_nats::Client, stream: &str, config: Value) -> Value {
    let name = config
        .get("durable_name")
        .or_else(|| config.get("name"))
        .and_then(Value::as_str);
    let subject = match name {
        Some(name) => format!("$JS.API.CONSUMER.CREATE.{stream}.{name}"),
        None => format!("$JS.API.CONSUMER.CREATE.{stream}"),
    };
    api_ok(
        client,
        &subject,
        &json!({ "stream_name": stream, "config": config }).to_string(),
    )
    .await
}

async fn consumer_info(client: &async_nats::Client, stream: &str, name: &str) -> Value {
    api(
        client,
        &format!("$JS.API.CONSUMER.INFO.{stream}.{name}"),
        "",
    )
    .await
}

/// (delivered consumer/stream, ack floor consumer/stream, ack pending,
/// pending) of an info response.
fn numbers(info: &Value) -> [u64; 6] {
    let number = |path: &str| {
        info.pointer(path)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("{path} in {info}"))
    };
    [
        number("/delivered/consumer_seq"),
        number("/delivered/stream_seq"),
        number("/ack_floor/consumer_seq"),
        number("/ack_floor/stream_seq"),
        number("/num_ack_pending"),
        number("/num_pending"),
    ]
}

async fn push_delivery_acks_and_info(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"PUSH","subjects":["push.>"]})).await;
    js::publish_all(&client, &["push.a", "push.b", "push.c"]).await;
    let mut deliveries = client.subscribe("deliver.push").await.expect("subscribe");
    client.flush().await.expect("flush");
    let created = create_consumer(
        &client,
        "PUSH",
        json!({"durable_name":"P","deliver_subject":"deliver.push","ack_policy":"explicit"}),
    )
    .await;
    assert_eq!(created["config"]["deliver_subject"], "deliver.push");
    let mut subjects = Vec::new();
    let mut received = Vec::new();
    for _ in 0..3 {
        let message = next_data(&mut deliveries, "push delivery").await;
        subjects.push(message.subject.to_string());
        received.push(message);
    }
    assert_eq!(
        subjects,
        ["push.a", "push.b", "push.c"],
        "{}",
        flavor.name()
    );
    let reply = received[1].reply.as_ref().expect("ack subject").to_string();
    assert!(
        reply.starts_with("$JS.ACK.PUSH.P.1.2.2."),
        "{reply} ({})",
        flavor.name()
    );
    // Ack the middle one and then the others, each with a double ack.
    for index in [1, 0, 2] {
        let reply = received[index].reply.clone().expect("ack subject");
        let answer = tokio::time::timeout(TIMEOUT, client.request(reply, "+ACK".into()))
            .await
            .expect("double ack answered")
            .expect("double ack");
        assert!(answer.payload.is_empty());
    }
    let info = consumer_info(&client, "PUSH", "P").await;
    assert_eq!(
        numbers(&info),
        [3, 3, 3, 3, 0, 0],
        "{}: {info}",
        flavor.name()
    );
    assert_eq!(info["push_bound"], true, "{}: {info}", flavor.name());
    // A new message is pushed as it is stored.
    js::publish_all(&client, &["push.d"]).await;
    let message = next_data(&mut deliveries, "live push delivery").await;
    assert_eq!(message.subject.as_str(), "push.d");
    // Without a subscriber the consumer is not bound.
    deliveries.unsubscribe().await.expect("unsubscribe");
    client.flush().await.expect("flush");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let info = consumer_info(&client, "PUSH", "P").await;
        if info.get("push_bound").is_none() {
            break;
        }
        assert!(Instant::now() < deadline, "still bound: {info}");
        tokio::task::yield_now().await;
    }
}
differential_cluster!(push_delivery_acks_and_info);

async fn deliver_group_splits_messages(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"GROUP","subjects":["group.>"]})).await;
    let mut first = client
        .queue_subscribe("deliver.group", "workers".into())
        .await
        .expect("subscribe");
    let mut second = client
        .queue_subscribe("deliver.group", "workers".into())
        .await
        .expect("subscribe");
    client.flush().await.expect("flush");
    create_consumer(
        &client,
        "GROUP",
        json!({"durable_name":"G","deliver_subject":"deliver.group","deliver_group":"workers","ack_policy":"none"}),
    )
    .await;
    let subjects: Vec<String> = (0..40).map(|index| format!("group.{index}")).collect();
    let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
    js::publish_all(&client, &subjects).await;
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + TIMEOUT;
    while seen.len() < 40 {
        assert!(Instant::now() < deadline, "only {} of 40", seen.len());
        let message = tokio::select! {
            Some(message) = first.next() => message,
            Some(message) = second.next() => message,
        };
        assert!(
            seen.insert(message.subject.to_string()),
            "{} twice",
            message.subject
        );
    }
    let mut info = consumer_info(&client, "GROUP", "G").await;
    // nats-server's cluster answered 39 delivered (of 40 received) once:
    // its info can lag its deliveries; waited for there (bounded).
    let deadline = Instant::now() + TIMEOUT;
    while flavor == Flavor::Nats
        && common::target::clustered()
        && numbers(&info)[..2] != [40, 40]
        && Instant::now() < deadline
    {
        // Poll interval of a bounded wait.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        info = consumer_info(&client, "GROUP", "G").await;
    }
    assert_eq!(info["config"]["deliver_group"], "workers");
    assert_eq!(numbers(&info)[..2], [40, 40], "{}: {info}", flavor.name());
}
differential_cluster!(deliver_group_splits_messages, nats_cluster_in_ci);

async fn idle_heartbeats_and_flow_control_requests(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"FLOW","subjects":["flow.>"]})).await;
    let mut deliveries = client.subscribe("deliver.flow").await.expect("subscribe");
    client.flush().await.expect("flush");
    create_consumer(
        &client,
        "FLOW",
        json!({"durable_name":"F","deliver_subject":"deliver.flow","ack_policy":"none",
               "flow_control":true,"idle_heartbeat":200_000_000}),
    )
    .await;
    // Idle: a heartbeat with the last sequences (none yet).
    let heartbeat = next(&mut deliveries, "idle heartbeat").await;
    assert_eq!(heartbeat.subject.as_str(), "deliver.flow");
    assert_eq!(heartbeat.reply, None);
    let headers = heartbeat.headers.as_ref().expect("headers");
    assert_eq!(heartbeat.status.map(u16::from), Some(100));
    assert_eq!(heartbeat.description.as_deref(), Some("Idle Heartbeat"));
    assert_eq!(headers.get("Nats-Last-Consumer").unwrap().as_str(), "0");
    assert_eq!(headers.get("Nats-Last-Stream").unwrap().as_str(), "0");
    // 3 MiB against a first window of 2 MiB: a flow control request once
    // over half of it, then a stall until it is answered.
    let payload = bytes::Bytes::from(vec![7u8; 64 << 10]);
    let context = jetstream::new(client.clone());
    const TOTAL: usize = 48;
    for _ in 0..TOTAL {
        context
            .publish("flow.data", payload.clone())
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    let mut data = 0;
    let mut request: Option<Message> = None;
    let stalled_on = loop {
        let message = next(&mut deliveries, "flow control stall").await;
        match message.status.map(u16::from) {
            None => data += 1,
            Some(100) if message.reply.is_some() => {
                assert!(request.is_none(), "{}: a second request", flavor.name());
                request = Some(message);
            }
            Some(100) => {
                let headers = message.headers.as_ref().expect("heartbeat headers");
                if let Some(stalled) = headers.get("Nats-Consumer-Stalled") {
                    break stalled.as_str().to_string();
                }
            }
            Some(status) => panic!("status {status}"),
        }
    };
    let request = request.expect("a flow control request before the stall");
    assert_eq!(
        request.description.as_deref(),
        Some("FlowControl Request"),
        "{}",
        flavor.name()
    );
    assert_eq!(request.subject.as_str(), "deliver.flow");
    assert!(request.payload.is_empty());
    let reply = request.reply.clone().unwrap().to_string();
    assert_eq!(stalled_on, reply, "{}", flavor.name());
    let tokens: Vec<&str> = reply.split('.').collect();
    assert_eq!(tokens[..4], ["$JS", "FC", "FLOW", "F"], "{reply}");
    assert_eq!(tokens.len(), 5, "{reply}");
    assert_eq!(tokens[4].len(), 4, "{reply}");
    assert!(
        (30..TOTAL).contains(&data),
        "{}: {data} messages before the stall",
        flavor.name()
    );
    // Answered, the rest arrives (answering any further requests).
    client.publish(reply, "".into()).await.expect("answer");
    while data < TOTAL {
        let message = next(&mut deliveries, "rest of the data").await;
        match (message.status, message.reply) {
            (None, _) => data += 1,
            (Some(_), Some(reply)) => client.publish(reply, "".into()).await.expect("answer"),
            (Some(_), None) => {}
        }
    }
}
differential_cluster!(idle_heartbeats_and_flow_control_requests);

async fn last_per_subject_then_new(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"LAST","subjects":["last.>"]})).await;
    js::publish_all(&client, &["last.x", "last.y", "last.x", "last.z", "last.y"]).await;
    let mut deliveries = client.subscribe("deliver.last").await.expect("subscribe");
    client.flush().await.expect("flush");
    let created = create_consumer(
        &client,
        "LAST",
        json!({"deliver_subject":"deliver.last","deliver_policy":"last_per_subject",
               "filter_subject":"last.>","ack_policy":"explicit"}),
    )
    .await;
    assert_eq!(created["num_pending"], 3, "{}: {created}", flavor.name());
    let mut sequences = Vec::new();
    for _ in 0..3 {
        let message = next_data(&mut deliveries, "last per subject").await;
        let info = jetstream::Message {
            message: message.clone(),
            context: jetstream::new(client.clone()),
        };
        let info = info.info().expect("info");
        sequences.push((
            message.subject.to_string(),
            info.stream_sequence,
            info.consumer_sequence,
            info.pending,
        ));
    }
    assert_eq!(
        sequences,
        [
            ("last.x".to_string(), 3, 1, 2),
            ("last.z".to_string(), 4, 2, 1),
            ("last.y".to_string(), 5, 3, 0)
        ],
        "{}",
        flavor.name()
    );
    js::publish_all(&client, &["last.x"]).await;
    let message = next_data(&mut deliveries, "new message").await;
    assert_eq!(message.subject.as_str(), "last.x");
}
differential_cluster!(last_per_subject_then_new);

async fn headers_only_and_replay_original(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"REPLAY","subjects":["replay.>"]})).await;
    let context = jetstream::new(client.clone());
    // Stored 300 ms apart (spacing the workload, not waiting for anything).
    for index in 0..3 {
        if index > 0 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        context
            .publish("replay.a", "hello".into())
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    let mut deliveries = client.subscribe("deliver.replay").await.expect("subscribe");
    client.flush().await.expect("flush");
    create_consumer(
        &client,
        "REPLAY",
        json!({"deliver_subject":"deliver.replay","replay_policy":"original",
               "headers_only":true,"ack_policy":"none"}),
    )
    .await;
    let mut arrived = Vec::new();
    for _ in 0..3 {
        let message = next_data(&mut deliveries, "replayed message").await;
        arrived.push(Instant::now());
        assert!(message.payload.is_empty());
        let headers = message.headers.as_ref().expect("headers");
        assert_eq!(headers.get("Nats-Msg-Size").unwrap().as_str(), "5");
    }
    for pair in arrived.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_millis(200),
            "{}: replayed {gap:?} apart",
            flavor.name()
        );
    }
}
differential_cluster!(headers_only_and_replay_original);

/// `rate_limit_bps` paces a push consumer: a bucket of the stream's
/// `max_msg_size` (4 KiB), refilled at 20 000 bytes per second. Ten
/// deliveries of about 2 KiB (payload, subject and ack subject) take at
/// least (10 × 2 KiB − 4 KiB) / 20 000 B/s ≈ 0.8 s; unpaced they take
/// milliseconds. The lower bound cannot be met early by a fast machine.
async fn rate_limit_paces_push_deliveries(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"PACED","subjects":["paced.>"],"max_msg_size":4096}),
    )
    .await;
    let payload = vec![b'p'; 2_000];
    for _ in 0..10 {
        js::publish_request(
            &client,
            "paced.a",
            &[],
            std::str::from_utf8(&payload).unwrap(),
        )
        .await;
    }
    let mut deliveries = client.subscribe("deliver.paced").await.expect("subscribe");
    client.flush().await.expect("flush");
    let created = create_consumer(
        &client,
        "PACED",
        json!({"deliver_subject":"deliver.paced","ack_policy":"none",
               "rate_limit_bps":160_000}),
    )
    .await;
    assert_eq!(
        created["config"]["rate_limit_bps"],
        json!(160_000),
        "{created}"
    );
    let started = Instant::now();
    let mut arrived = Vec::new();
    for index in 0..10 {
        let message = next_data(&mut deliveries, &format!("paced message {index}")).await;
        assert_eq!(message.payload.len(), 2_000);
        arrived.push(started.elapsed());
    }
    let total = arrived[9];
    assert!(
        total >= Duration::from_millis(700),
        "{}: ten paced deliveries took only {total:?}: {arrived:?}",
        flavor.name()
    );
    // After the first bucket, about 100 ms apart.
    let tail = arrived[9] - arrived[4];
    assert!(
        tail >= Duration::from_millis(400),
        "{}: the last five came {tail:?} apart: {arrived:?}",
        flavor.name()
    );
}
differential_cluster!(rate_limit_paces_push_deliveries);

async fn ordered_consumer_reads_everything(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"ORDERED","subjects":["ordered.>"]})).await;
    let context = jetstream::new(client.clone());
    // 4 MiB: the client answers several flow control requests on the way.
    let payload = bytes::Bytes::from(vec![1u8; 32 << 10]);
    for index in 0..128 {
        let subject = if index % 2 == 0 {
            "ordered.even"
        } else {
            "ordered.odd"
        };
        context
            .publish(subject, payload.clone())
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    let stream = context.get_stream("ORDERED").await.expect("stream");
    let consumer = stream
        .create_consumer(push::OrderedConfig {
            deliver_subject: client.new_inbox(),
            filter_subject: "ordered.even".into(),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("ordered consumer");
    let mut messages = consumer.messages().await.expect("messages");
    for expected in (1..=128u64).step_by(2) {
        let message = tokio::time::timeout(TIMEOUT, messages.next())
            .await
            .expect("ordered message in time")
            .expect("stream open")
            .expect("message");
        assert_eq!(message.subject.as_str(), "ordered.even");
        assert_eq!(message.info().expect("info").stream_sequence, expected);
        assert_eq!(message.payload.len(), 32 << 10);
    }
    // Live messages follow.
    context
        .publish("ordered.even", "live".into())
        .await
        .expect("publish")
        .await
        .expect("ack");
    let message = tokio::time::timeout(TIMEOUT, messages.next())
        .await
        .expect("live message in time")
        .expect("stream open")
        .expect("message");
    assert_eq!(message.payload.as_ref(), b"live");
}
differential_cluster!(ordered_consumer_reads_everything);

async fn inactive_ephemerals_are_removed(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"IDLE","subjects":["idle.>"]})).await;
    let push = create_consumer(
        &client,
        "IDLE",
        json!({"name":"PUSHY","deliver_subject":"deliver.nobody","inactive_threshold":300_000_000}),
    )
    .await;
    assert_eq!(push["config"]["inactive_threshold"], 300_000_000);
    let pull = create_consumer(
        &client,
        "IDLE",
        json!({"name":"PULLY","inactive_threshold":300_000_000}),
    )
    .await;
    assert_eq!(pull["name"], "PULLY");
    let durable = create_consumer(
        &client,
        "IDLE",
        json!({"durable_name":"KEEP","deliver_subject":"deliver.nobody2"}),
    )
    .await;
    assert_eq!(durable["name"], "KEEP");
    let deadline = Instant::now() + TIMEOUT;
    for name in ["PUSHY", "PULLY"] {
        loop {
            let info = consumer_info(&client, "IDLE", name).await;
            if info["error"]["err_code"] == 10014 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {name} still there: {info}",
                flavor.name()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let info = consumer_info(&client, "IDLE", "KEEP").await;
    assert_eq!(info["name"], "KEEP", "{}: {info}", flavor.name());
}
differential_cluster!(inactive_ephemerals_are_removed);

async fn delivery_starts_when_a_subscriber_arrives(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"LATE","subjects":["late.>"]})).await;
    js::publish_all(&client, &["late.a", "late.b"]).await;
    // Several consumers, each subscribed from its own connection later, so
    // some subscribers sit on another shard than the stream.
    for index in 0..3 {
        let name = format!("L{index}");
        let deliver = format!("deliver.late.{index}");
        create_consumer(
            &client,
            "LATE",
            json!({"durable_name":name,"deliver_subject":deliver,"ack_policy":"explicit"}),
        )
        .await;
        let info = consumer_info(&client, "LATE", &name).await;
        assert!(info.get("push_bound").is_none(), "{info}");
        assert_eq!(numbers(&info)[5], 2, "{}: {info}", flavor.name());
        let subscriber_client = server.connect().await;
        let mut deliveries = subscriber_client
            .subscribe(deliver)
            .await
            .expect("subscribe");
        subscriber_client.flush().await.expect("flush");
        for expected in ["late.a", "late.b"] {
            let message = next_data(&mut deliveries, "delivery to a late subscriber").await;
            assert_eq!(message.subject.as_str(), expected, "{}", flavor.name());
        }
    }
}
differential_cluster!(delivery_starts_when_a_subscriber_arrives);

/// More than one turn's worth of deliveries (tern's task delivers at most
/// 1 024 a turn) reaches a push consumer at once: nothing but the task
/// itself can ask for the rest (a push consumer sends no next request), so
/// the task must come back for them, not wait for a timer (it delivered
/// 1 024 about every half second before it did).
async fn a_push_consumer_gets_a_backlog_beyond_one_turn(flavor: Flavor) {
    const MESSAGES: u64 = 10_000;
    let server = js::start(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"BACKLOG","subjects":["backlog.>"],"storage":"memory"}),
    )
    .await;
    let payload = bytes::Bytes::from(vec![b'm'; 1024]);
    for _ in 0..MESSAGES {
        client
            .publish("backlog.x", payload.clone())
            .await
            .expect("publish");
    }
    client.flush().await.expect("flush");
    js::wait_state(&client, "BACKLOG", "every message stored", |state| {
        state["messages"] == MESSAGES
    })
    .await;
    let subscriber_client = server.connect().await;
    let mut deliveries = subscriber_client
        .subscribe("deliver.backlog")
        .await
        .expect("subscribe");
    subscriber_client.flush().await.expect("flush");
    create_consumer(
        &client,
        "BACKLOG",
        json!({"durable_name":"B","deliver_subject":"deliver.backlog","ack_policy":"none"}),
    )
    .await;
    let started = Instant::now();
    let mut received = 0;
    while received < MESSAGES {
        next_data(&mut deliveries, "a delivery of the backlog").await;
        received += 1;
    }
    // nats-server delivers them in milliseconds; a task waiting for its
    // timer between turns would take over four seconds.
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(3),
        "{}: {MESSAGES} deliveries took {elapsed:?}",
        flavor.name()
    );
}
differential_cluster!(a_push_consumer_gets_a_backlog_beyond_one_turn);
