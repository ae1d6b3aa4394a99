//! Pull consumers through async-nats against tern-server and nats-server
//! 2.15.1: create, fetch, explicit acks and the state consumer info reports
//! after each step, no_wait at the end of the stream, names/list, delete.

use crate::common;

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy};
use common::js::{self, api, create};
use common::{Flavor, TIMEOUT};
use futures::StreamExt;
use serde_json::json;

async fn info_numbers(consumer: &mut jetstream::consumer::PullConsumer) -> [u64; 8] {
    let info = consumer.info().await.expect("consumer info");
    [
        info.delivered.consumer_sequence,
        info.delivered.stream_sequence,
        info.ack_floor.consumer_sequence,
        info.ack_floor.stream_sequence,
        info.num_ack_pending as u64,
        info.num_pending,
        info.num_waiting as u64,
        info.num_redelivered as u64,
    ]
}

async fn pull_fetch_ack_and_info(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"PULL","subjects":["pull.>"]})).await;
    js::publish_all(&client, &["pull.a", "pull.b", "pull.a", "pull.c", "pull.a"]).await;
    let context = jetstream::new(client.clone());
    let stream = context.get_stream("PULL").await.expect("stream");
    let mut consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("d".into()),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .expect("create consumer");
    assert_eq!(info_numbers(&mut consumer).await, [0, 0, 0, 0, 0, 5, 0, 0]);

    let received = js::fetch(&consumer, 3, TIMEOUT).await;
    let subjects: Vec<&str> = received.iter().map(|m| m.subject.as_str()).collect();
    assert_eq!(
        subjects,
        ["pull.a", "pull.b", "pull.a"],
        "{}",
        flavor.name()
    );
    let first = received[0].info().expect("ack subject");
    assert_eq!(
        (
            first.stream,
            first.consumer,
            first.stream_sequence,
            first.consumer_sequence,
            first.delivered,
            first.pending
        ),
        ("PULL", "d", 1, 1, 1, 4)
    );
    assert_eq!(info_numbers(&mut consumer).await, [3, 3, 0, 0, 3, 2, 0, 0]);

    // Acks out of order: the floor waits for the first.
    received[1].double_ack().await.expect("ack 2");
    assert_eq!(info_numbers(&mut consumer).await, [3, 3, 0, 0, 2, 2, 0, 0]);
    received[0].double_ack().await.expect("ack 1");
    received[2].double_ack().await.expect("ack 3");
    assert_eq!(info_numbers(&mut consumer).await, [3, 3, 3, 3, 0, 2, 0, 0]);

    // no_wait: the two left, then the end.
    let mut rest = consumer
        .batch()
        .max_messages(10)
        .messages()
        .await
        .expect("batch");
    let mut left = Vec::new();
    while let Some(message) = rest.next().await {
        let message = message.expect("message");
        left.push(message.subject.to_string());
        message.double_ack().await.expect("ack");
    }
    assert_eq!(left, ["pull.c", "pull.a"], "{}", flavor.name());
    // (num_waiting is left out: the batch's request may still wait for its expiry.)
    let mut numbers = info_numbers(&mut consumer).await;
    numbers[6] = 0;
    assert_eq!(numbers, [5, 5, 5, 5, 0, 0, 0, 0]);

    let names = api(&client, "$JS.API.CONSUMER.NAMES.PULL", "").await;
    assert_eq!(names["consumers"], json!(["d"]), "{names:#}");
    assert_eq!(names["total"], 1);
    let list = api(&client, "$JS.API.CONSUMER.LIST.PULL", "").await;
    assert_eq!(list["consumers"][0]["name"], "d", "{list:#}");
    assert_eq!(list["consumers"][0]["num_pending"], 0, "{list:#}");

    assert!(stream.delete_consumer("d").await.expect("delete").success);
    let gone = api(&client, "$JS.API.CONSUMER.INFO.PULL.d", "").await;
    assert_eq!(gone["error"]["err_code"], 10014, "{gone:#}");
}
differential_cluster!(pull_fetch_ack_and_info);

async fn filtered_consumer_and_nak(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"FILT","subjects":["filt.>"]})).await;
    js::publish_all(&client, &["filt.a", "filt.b", "filt.a", "filt.b"]).await;
    let context = jetstream::new(client.clone());
    let stream = context.get_stream("FILT").await.expect("stream");
    let mut consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("only-b".into()),
            filter_subject: "filt.b".into(),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .expect("create consumer");
    assert_eq!(info_numbers(&mut consumer).await[5], 2);
    let message = js::fetch_one(&consumer).await;
    assert_eq!(message.info().expect("info").stream_sequence, 2);
    // A NAK redelivers it at once, counted as the second delivery.
    message
        .double_ack_with(jetstream::AckKind::Nak(None))
        .await
        .expect("nak");
    let again = js::fetch_one(&consumer).await;
    let info = again.info().expect("info");
    assert_eq!(
        (info.stream_sequence, info.consumer_sequence, info.delivered),
        (2, 2, 2),
        "{}",
        flavor.name()
    );
    again.double_ack().await.expect("ack");
    let numbers = info_numbers(&mut consumer).await;
    assert_eq!(numbers, [2, 2, 2, 2, 0, 1, 0, 0], "{}", flavor.name());
}
differential_cluster!(filtered_consumer_and_nak);

/// An advisory with its volatile fields checked for shape and removed.
fn advisory_fields(message: &async_nats::Message) -> (String, serde_json::Value) {
    let mut value: serde_json::Value =
        serde_json::from_slice(&message.payload).expect("advisory JSON");
    let object = value.as_object_mut().expect("object");
    let id = object.remove("id").expect("id");
    assert_eq!(id.as_str().map(str::len), Some(22), "{id}");
    let timestamp = object.remove("timestamp").expect("timestamp");
    assert!(timestamp.as_str().is_some_and(|time| time.ends_with('Z')));
    (message.subject.to_string(), value)
}

/// The next consumer advisory other than a creation's or a leader
/// election's.
async fn next_advisory(advisories: &mut async_nats::Subscriber) -> (String, serde_json::Value) {
    loop {
        let message = tokio::time::timeout(TIMEOUT, advisories.next())
            .await
            .expect("advisory in time")
            .expect("subscription open");
        // nats-server also announces the consumer's creation and, in a
        // cluster, each election of its leader (tern sends neither).
        if !message.subject.contains(".CREATED.") && !message.subject.contains(".LEADER_ELECTED.") {
            return advisory_fields(&message);
        }
    }
}

async fn nak_term_and_max_deliver_advisories(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"ADV","subjects":["adv.>"]})).await;
    js::publish_all(&client, &["adv.a", "adv.b"]).await;
    let mut advisories = client
        .subscribe("$JS.EVENT.ADVISORY.CONSUMER.>")
        .await
        .expect("subscribe");
    let context = jetstream::new(client.clone());
    let stream = context.get_stream("ADV").await.expect("stream");
    let consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("D".into()),
            ack_policy: AckPolicy::Explicit,
            max_deliver: 2,
            ..Default::default()
        })
        .await
        .expect("create consumer");
    let fetch_one = || js::fetch_one(&consumer);
    // adv.a: NAKed twice, then it has reached max_deliver.
    let first = fetch_one().await;
    first
        .double_ack_with(jetstream::AckKind::Nak(None))
        .await
        .expect("nak");
    let (subject, body) = next_advisory(&mut advisories).await;
    assert_eq!(subject, "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.ADV.D");
    assert_eq!(
        body,
        json!({"type":"io.nats.jetstream.advisory.v1.nak","stream":"ADV","consumer":"D",
               "consumer_seq":1,"stream_seq":1,"deliveries":1}),
        "{}",
        flavor.name()
    );
    let again = fetch_one().await;
    assert_eq!(again.info().expect("info").delivered, 2);
    again
        .double_ack_with(jetstream::AckKind::Nak(None))
        .await
        .expect("nak");
    let (_, body) = next_advisory(&mut advisories).await;
    assert_eq!(body["deliveries"], 2, "{}: {body}", flavor.name());
    // The next pull skips it (max_deliver) and delivers adv.b.
    let second = fetch_one().await;
    assert_eq!(second.subject.as_str(), "adv.b");
    let (subject, body) = next_advisory(&mut advisories).await;
    assert_eq!(subject, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ADV.D");
    assert_eq!(
        body,
        json!({"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"ADV","consumer":"D",
               "stream_seq":1,"deliveries":2}),
        "{}",
        flavor.name()
    );
    second
        .double_ack_with(jetstream::AckKind::Term)
        .await
        .expect("term");
    let (subject, body) = next_advisory(&mut advisories).await;
    assert_eq!(subject, "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.ADV.D");
    assert_eq!(
        body,
        json!({"type":"io.nats.jetstream.advisory.v1.terminated","stream":"ADV","consumer":"D",
               "consumer_seq":3,"stream_seq":2,"deliveries":1}),
        "{}",
        flavor.name()
    );
}
differential_cluster!(nak_term_and_max_deliver_advisories, nats_cluster_in_ci);

async fn ack_wait_and_backoff_redeliver(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"WAIT","subjects":["wait.>"]})).await;
    js::publish_all(&client, &["wait.a"]).await;
    let context = jetstream::new(client.clone());
    let stream = context.get_stream("WAIT").await.expect("stream");
    let mut consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("W".into()),
            ack_policy: AckPolicy::Explicit,
            backoff: vec![
                std::time::Duration::from_millis(300),
                std::time::Duration::from_millis(600),
            ],
            max_deliver: 3,
            ..Default::default()
        })
        .await
        .expect("create consumer");
    let info = consumer.cached_info();
    // The first backoff step becomes the ack wait.
    assert_eq!(info.config.ack_wait, std::time::Duration::from_millis(300));
    let mut arrivals = Vec::new();
    for expected in 1..=3u64 {
        let message = js::fetch_one(&consumer).await;
        arrivals.push(std::time::Instant::now());
        assert_eq!(
            message.info().expect("info").delivered,
            expected as i64,
            "{}",
            flavor.name()
        );
    }
    // Redelivered no sooner than the backoff allows.
    assert!(arrivals[1] - arrivals[0] >= std::time::Duration::from_millis(250));
    assert!(arrivals[2] - arrivals[1] >= std::time::Duration::from_millis(550));
    let info = consumer.info().await.expect("info");
    assert_eq!(info.num_redelivered, 1, "{}", flavor.name());
    assert_eq!(info.num_ack_pending, 1, "{}", flavor.name());
}
differential_cluster!(ack_wait_and_backoff_redeliver);

async fn acks_for_unknown_or_acked_messages(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"BAD","subjects":["bad.>"]})).await;
    js::publish_all(&client, &["bad.a", "bad.b"]).await;
    let context = jetstream::new(client.clone());
    let stream = context.get_stream("BAD").await.expect("stream");
    let mut consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("B".into()),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .expect("create consumer");
    let message = js::fetch_one(&consumer).await;
    message.double_ack().await.expect("ack");
    // Acked again: still answered, nothing changes.
    message.double_ack().await.expect("second ack");
    // An ack for a consumer that does not exist: nobody answers.
    let unknown = client
        .request("$JS.ACK.BAD.NOPE.1.1.1.0.0", "+ACK".into())
        .await;
    assert!(
        matches!(&unknown, Err(error) if error.kind() == async_nats::RequestErrorKind::NoResponders),
        "{}: {unknown:?}",
        flavor.name()
    );
    // Nonsense bodies and sequences are ignored.
    for (subject, body) in [
        ("$JS.ACK.BAD.B.1.99.99.0.0", "+ACK"),
        ("$JS.ACK.BAD.B.1.2.2.0.0", "+WHAT"),
        ("$JS.ACK.BAD.B.x.y.z", "+ACK"),
    ] {
        client.publish(subject, body.into()).await.expect("publish");
    }
    let info = consumer.info().await.expect("info");
    assert_eq!(
        (
            info.delivered.stream_sequence,
            info.ack_floor.stream_sequence,
            info.num_ack_pending,
            info.num_pending
        ),
        (1, 1, 0, 1),
        "{}",
        flavor.name()
    );
    // The consumer still delivers.
    let next = js::fetch_one(&consumer).await;
    assert_eq!(next.subject.as_str(), "bad.b");
}
differential_cluster!(acks_for_unknown_or_acked_messages);

async fn num_pending_follows_deletes_and_purges(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"NP","subjects":["np.>"]})).await;
    js::publish_all(&client, &["np.a", "np.b", "np.a", "np.b", "np.a", "np.c"]).await;
    let context = jetstream::new(client.clone());
    let stream = context.get_stream("NP").await.expect("stream");
    let mut filtered: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("A".into()),
            filter_subject: "np.a".into(),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .expect("create consumer");
    let created = api(
        &client,
        "$JS.API.CONSUMER.CREATE.NP.LAST",
        &json!({"stream_name":"NP","config":{"name":"LAST","deliver_policy":"last_per_subject","filter_subject":"np.>","ack_policy":"explicit"}}).to_string(),
    )
    .await;
    assert_eq!(created["num_pending"], 3, "{}: {created}", flavor.name());
    assert_eq!(info_numbers(&mut filtered).await[5], 3);
    // Deleting an np.a ahead of the consumer: one less pending.
    let deleted = api(&client, "$JS.API.STREAM.MSG.DELETE.NP", r#"{"seq":1}"#).await;
    assert_eq!(deleted["success"], true, "{deleted}");
    assert_eq!(info_numbers(&mut filtered).await[5], 2, "{}", flavor.name());
    // Deleting the last np.b (listed for LAST): one less there.
    api(&client, "$JS.API.STREAM.MSG.DELETE.NP", r#"{"seq":4}"#).await;
    let last = api(&client, "$JS.API.CONSUMER.INFO.NP.LAST", "").await;
    assert_eq!(last["num_pending"], 2, "{}: {last}", flavor.name());
    // A filtered purge keeping the newest np.a.
    let purged = api(
        &client,
        "$JS.API.STREAM.PURGE.NP",
        r#"{"filter":"np.a","keep":1}"#,
    )
    .await;
    assert_eq!(purged["purged"], 1, "{purged}");
    assert_eq!(info_numbers(&mut filtered).await[5], 1, "{}", flavor.name());
    // A full purge leaves nothing pending.
    api(&client, "$JS.API.STREAM.PURGE.NP", "").await;
    assert_eq!(info_numbers(&mut filtered).await[5], 0, "{}", flavor.name());
    let last = api(&client, "$JS.API.CONSUMER.INFO.NP.LAST", "").await;
    assert_eq!(last["num_pending"], 0, "{}: {last}", flavor.name());
}
differential_cluster!(num_pending_follows_deletes_and_purges);

async fn several_filter_subjects(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"MULTI","subjects":["multi.>"]})).await;
    js::publish_all(
        &client,
        &[
            "multi.a.1",
            "multi.b",
            "multi.c.1",
            "multi.a.2",
            "multi.d",
            "multi.c.2",
        ],
    )
    .await;
    let context = jetstream::new(client.clone());
    let stream = context.get_stream("MULTI").await.expect("stream");
    let mut consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("M".into()),
            filter_subjects: vec!["multi.a.*".into(), "multi.c.>".into()],
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .expect("create consumer");
    assert_eq!(info_numbers(&mut consumer).await[5], 4, "{}", flavor.name());
    let mut subjects = Vec::new();
    for message in js::fetch(&consumer, 10, std::time::Duration::from_millis(500)).await {
        subjects.push(message.subject.to_string());
        message.ack().await.expect("ack");
    }
    assert_eq!(
        subjects,
        ["multi.a.1", "multi.c.1", "multi.a.2", "multi.c.2"],
        "{}",
        flavor.name()
    );
}
differential_cluster!(several_filter_subjects);

/// Sends a pull request on a raw connection and returns the status frame
/// that ends it (from its `HMSG` line through the frame's end), skipping
/// the messages delivered before it.
async fn pull_status_frame(
    raw: &mut common::RawClient,
    consumer: &str,
    request: Option<&str>,
    status: &str,
) -> String {
    if let Some(request) = request {
        raw.send(
            format!(
                "PUB $JS.API.CONSUMER.MSG.NEXT.STATUS.{consumer} inbox.status {}\r\n{request}\r\n",
                request.len()
            )
            .as_bytes(),
        )
        .await;
    }
    let bytes = raw.read_until(status.as_bytes(), TIMEOUT).await;
    let mut frame = common::text(&bytes);
    frame.push_str(&common::text(
        &raw.read_until(b"\r\n\r\n\r\n", TIMEOUT).await,
    ));
    let start = frame.rfind("HMSG ").expect("a status frame");
    frame[start..].to_string()
}

async fn pull_status_replies_are_byte_exact(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"STATUS","subjects":["status.>"]})).await;
    let context = jetstream::new(client.clone());
    for _ in 0..2 {
        context
            .publish("status.big", bytes::Bytes::from(vec![b'x'; 1024]))
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    for name in ["A"] {
        let created = api(
            &client,
            &format!("$JS.API.CONSUMER.CREATE.STATUS.{name}"),
            &json!({"stream_name":"STATUS","config":{"durable_name":name,"ack_policy":"none"}})
                .to_string(),
        )
        .await;
        assert!(created.get("error").is_none(), "{created}");
    }
    let mut raw = server.raw_quiet().await;
    raw.send(b"SUB inbox.status 1\r\nPING\r\n").await;
    raw.read_until(b"PONG\r\n", TIMEOUT).await;
    let mut frames = Vec::new();
    // 409: the first message does not fit max_bytes.
    frames.push(
        pull_status_frame(
            &mut raw,
            "A",
            Some(r#"{"batch":1,"max_bytes":100}"#),
            "409 ",
        )
        .await,
    );
    // 408 after both messages: three of the batch left, no bytes limit.
    frames.push(
        pull_status_frame(
            &mut raw,
            "A",
            Some(r#"{"batch":5,"expires":300000000}"#),
            "408 ",
        )
        .await,
    );
    // 404: nothing left for no_wait.
    frames.push(
        pull_status_frame(&mut raw, "A", Some(r#"{"batch":1,"no_wait":true}"#), "404 ").await,
    );
    // Idle heartbeats while waiting, then 408 with the bytes left.
    frames.push(
        pull_status_frame(
            &mut raw,
            "A",
            Some(r#"{"batch":2,"max_bytes":4096,"expires":450000000,"idle_heartbeat":100000000}"#),
            "100 ",
        )
        .await,
    );
    frames.push(pull_status_frame(&mut raw, "A", None, "408 ").await);
    let frames: Vec<String> = frames
        .iter()
        .map(|frame| frame.replace("\r\n", "|"))
        .collect();
    assert_eq!(
        frames,
        [
            "HMSG inbox.status 1 97 97|NATS/1.0 409 Message Size Exceeds MaxBytes|Nats-Pending-Messages: 1|Nats-Pending-Bytes: 100|||",
            "HMSG inbox.status 1 81 81|NATS/1.0 408 Request Timeout|Nats-Pending-Messages: 3|Nats-Pending-Bytes: 0|||",
            "HMSG inbox.status 1 28 28|NATS/1.0 404 No Messages|||",
            "HMSG inbox.status 1 75 75|NATS/1.0 100 Idle Heartbeat|Nats-Last-Consumer: 2|Nats-Last-Stream: 2|||",
            "HMSG inbox.status 1 84 84|NATS/1.0 408 Request Timeout|Nats-Pending-Messages: 2|Nats-Pending-Bytes: 4096|||",
        ],
        "{}",
        flavor.name()
    );
}
differential_cluster!(pull_status_replies_are_byte_exact);

/// The first stream sequence a new pull consumer with `config` delivers.
async fn first_delivered(
    stream: &jetstream::stream::Stream,
    config: pull::Config,
) -> (u64, u64, String) {
    let mut consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(config)
        .await
        .expect("create consumer");
    let pending = info_numbers(&mut consumer).await[5];
    let message = js::fetch_one(&consumer).await;
    let sequence = message.info().expect("info").stream_sequence;
    (sequence, pending, message.subject.to_string())
}

async fn deliver_policies_and_ack_all(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"POLICY","subjects":["policy.>"]})).await;
    js::publish_all(&client, &["policy.a", "policy.b", "policy.a"]).await;
    let context = jetstream::new(client.clone());
    let stream = context.get_stream("POLICY").await.expect("stream");
    let info = api(&client, "$JS.API.STREAM.MSG.GET.POLICY", r#"{"seq":3}"#).await;
    let third_time = info["message"]["time"].as_str().expect("time").to_string();
    let start = |policy: jetstream::consumer::DeliverPolicy, filter: &str| pull::Config {
        deliver_policy: policy,
        filter_subject: filter.into(),
        ack_policy: AckPolicy::Explicit,
        ..Default::default()
    };
    use jetstream::consumer::DeliverPolicy;
    assert_eq!(
        first_delivered(&stream, start(DeliverPolicy::Last, "policy.b")).await,
        (2, 1, "policy.b".into()),
        "{}",
        flavor.name()
    );
    assert_eq!(
        first_delivered(
            &stream,
            start(DeliverPolicy::ByStartSequence { start_sequence: 2 }, "")
        )
        .await,
        (2, 2, "policy.b".into()),
        "{}",
        flavor.name()
    );
    // by_start_time, through the raw API (the time as the stream gave it).
    let created = api(
        &client,
        "$JS.API.CONSUMER.CREATE.POLICY.BYTIME",
        &json!({"stream_name":"POLICY","config":{"name":"BYTIME","deliver_policy":"by_start_time",
            "opt_start_time": third_time,"ack_policy":"explicit"}})
        .to_string(),
    )
    .await;
    assert_eq!(created["num_pending"], 1, "{}: {created}", flavor.name());
    let by_time: jetstream::consumer::PullConsumer =
        stream.get_consumer("BYTIME").await.expect("consumer");
    let message = js::fetch_one(&by_time).await;
    assert_eq!(message.info().expect("info").stream_sequence, 3);
    // `new`: nothing pending until the next publish.
    let mut fresh: jetstream::consumer::PullConsumer = stream
        .create_consumer(start(DeliverPolicy::New, ""))
        .await
        .expect("create consumer");
    assert_eq!(info_numbers(&mut fresh).await[5], 0);
    js::publish_all(&client, &["policy.c"]).await;
    let message = js::fetch_one(&fresh).await;
    assert_eq!(message.info().expect("info").stream_sequence, 4);

    // Ack all: acking the third delivery acknowledges the two before it.
    let mut all: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("ALL".into()),
            ack_policy: AckPolicy::All,
            ..Default::default()
        })
        .await
        .expect("create consumer");
    let received = js::fetch(&all, 3, TIMEOUT).await;
    assert_eq!(received.len(), 3);
    received[2].double_ack().await.expect("ack");
    assert_eq!(
        info_numbers(&mut all).await[..6],
        [3, 3, 3, 3, 0, 1],
        "{}",
        flavor.name()
    );
}
differential_cluster!(deliver_policies_and_ack_all);

/// Waits (bounded) until `consumer` reports `waiting` pull requests.
async fn wait_num_waiting(consumer: &mut jetstream::consumer::PullConsumer, waiting: usize) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let info = consumer.info().await.expect("consumer info");
        if info.num_waiting == waiting {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "num_waiting stayed {} (want {waiting})",
            info.num_waiting
        );
    }
}

/// A pull request whose inbox loses its subscriber (a client gave up on a
/// fetch) is dropped: the next message goes to a live request instead of
/// waiting out its ack_wait at a dead inbox, and info stops counting it.
async fn pull_requests_without_interest_are_dropped(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name": "DEAD", "subjects": ["dead.>"]})).await;
    let stream = jetstream::new(client.clone())
        .get_stream("DEAD")
        .await
        .expect("stream");
    let mut consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(pull::Config {
            durable_name: Some("worker".into()),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .expect("create consumer");
    let dead_request = |inbox: String| {
        let client = client.clone();
        async move {
            let subscriber = client.subscribe(inbox.clone()).await.expect("subscribe");
            client
                .publish_with_reply(
                    "$JS.API.CONSUMER.MSG.NEXT.DEAD.worker",
                    inbox,
                    r#"{"batch":1,"expires":60000000000}"#.into(),
                )
                .await
                .expect("pull request");
            client.flush().await.expect("flush");
            subscriber
        }
    };
    // Delivery skips a request nobody listens to any more.
    let subscriber = dead_request(client.new_inbox()).await;
    wait_num_waiting(&mut consumer, 1).await;
    drop(subscriber);
    client.flush().await.expect("flush");
    js::publish_all(&client, &["dead.1"]).await;
    let message = js::fetch_one(&consumer).await;
    let info = message.info().expect("ack subject");
    assert_eq!(
        (info.stream_sequence, info.delivered),
        (1, 1),
        "{}: the live request got the message, first delivery",
        flavor.name()
    );
    message.double_ack().await.expect("ack");
    // Info does not count one either.
    let subscriber = dead_request(client.new_inbox()).await;
    wait_num_waiting(&mut consumer, 1).await;
    drop(subscriber);
    client.flush().await.expect("flush");
    wait_num_waiting(&mut consumer, 0).await;
}
differential_cluster!(pull_requests_without_interest_are_dropped);
