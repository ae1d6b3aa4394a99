//! Retention that needs consumers, through async-nats against tern-server
//! and nats-server 2.15.1: work-queue streams remove a message once its
//! consumer acks it and refuse consumers that would share subjects;
//! interest streams drop messages nobody is interested in, keep a message
//! until every interested consumer acked it, and release it when the last
//! consumer that needed it is deleted.

use crate::common;

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy};
use common::js::{self, api, create, wait_state};
use common::{Flavor, TIMEOUT};
use futures::StreamExt;
use serde_json::{json, Value};

async fn fetch(
    consumer: &jetstream::consumer::PullConsumer,
    count: usize,
) -> Vec<jetstream::Message> {
    let messages = js::fetch(consumer, count, TIMEOUT).await;
    assert_eq!(messages.len(), count, "fetched");
    messages
}

async fn pull_consumer(
    context: &jetstream::Context,
    stream: &str,
    name: &str,
    filter: &str,
) -> jetstream::consumer::PullConsumer {
    context
        .get_stream(stream)
        .await
        .expect("stream")
        .create_consumer(pull::Config {
            durable_name: Some(name.into()),
            filter_subject: filter.into(),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .expect("create consumer")
}

fn messages_are(count: u64) -> impl FnMut(&Value) -> bool {
    move |state| state["messages"] == count
}

async fn create_error(
    client: &async_nats::Client,
    stream: &str,
    name: &str,
    config: Value,
) -> Value {
    let reply = api(
        client,
        &format!("$JS.API.CONSUMER.CREATE.{stream}.{name}"),
        &json!({"stream_name": stream, "config": config}).to_string(),
    )
    .await;
    reply["error"].clone()
}

async fn work_queue_removes_acked_messages(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"WQ","subjects":["wq.>"],"retention":"workqueue"}),
    )
    .await;
    js::publish_all(&client, &["wq.a", "wq.b", "wq.a", "wq.c", "wq.b"]).await;
    let context = jetstream::new(client.clone());
    let consumer = pull_consumer(&context, "WQ", "W", "").await;
    let first = fetch(&consumer, 3).await;
    first[1].double_ack().await.expect("ack");
    first[2].double_ack().await.expect("ack");
    let state = wait_state(&client, "WQ", "two acked removed", messages_are(3)).await;
    assert_eq!(state["first_seq"], 1, "{}: {state}", flavor.name());
    assert_eq!(state["num_deleted"], 2, "{}: {state}", flavor.name());
    first[0].double_ack().await.expect("ack");
    for message in fetch(&consumer, 2).await {
        message.double_ack().await.expect("ack");
    }
    let state = wait_state(&client, "WQ", "all removed", messages_are(0)).await;
    assert_eq!(state["first_seq"], 6, "{}: {state}", flavor.name());
    assert_eq!(state["last_seq"], 5, "{}: {state}", flavor.name());

    // One consumer per subject.
    let error = create_error(
        &client,
        "WQ",
        "OTHER",
        json!({"durable_name":"OTHER","ack_policy":"explicit"}),
    )
    .await;
    assert_eq!(error["err_code"], 10099, "{}: {error}", flavor.name());
    assert_eq!(
        error["description"],
        "multiple non-filtered consumers not allowed on workqueue stream"
    );
    let error = create_error(
        &client,
        "WQ",
        "NONE",
        json!({"durable_name":"NONE","ack_policy":"none","filter_subject":"wq.z"}),
    )
    .await;
    assert_eq!(error["err_code"], 10084, "{}: {error}", flavor.name());
    assert_eq!(
        error["description"],
        "consumer in pull mode requires explicit ack policy on workqueue stream"
    );
}
differential_cluster!(work_queue_removes_acked_messages);

async fn work_queue_filtered_consumers_must_not_overlap(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"WQF","subjects":["wqf.>"],"retention":"workqueue"}),
    )
    .await;
    let context = jetstream::new(client.clone());
    let orders = pull_consumer(&context, "WQF", "ORDERS", "wqf.orders.>").await;
    let _returns = pull_consumer(&context, "WQF", "RETURNS", "wqf.returns.>").await;
    let error = create_error(
        &client,
        "WQF",
        "ALSO",
        json!({"durable_name":"ALSO","ack_policy":"explicit","filter_subject":"wqf.orders.1"}),
    )
    .await;
    assert_eq!(error["err_code"], 10100, "{}: {error}", flavor.name());
    assert_eq!(
        error["description"],
        "filtered consumer not unique on workqueue stream"
    );
    js::publish_all(&client, &["wqf.orders.1", "wqf.returns.1", "wqf.orders.2"]).await;
    for message in fetch(&orders, 2).await {
        message.double_ack().await.expect("ack");
    }
    let state = wait_state(&client, "WQF", "orders removed", messages_are(1)).await;
    assert_eq!(state["first_seq"], 2, "{}: {state}", flavor.name());
}
differential_cluster!(work_queue_filtered_consumers_must_not_overlap);

async fn interest_keeps_messages_until_every_consumer_acked(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"INT","subjects":["int.>"],"retention":"interest"}),
    )
    .await;
    // Nobody interested: the sequence is used, the message not kept.
    js::publish_all(&client, &["int.a"]).await;
    let state = wait_state(&client, "INT", "nothing kept", messages_are(0)).await;
    assert_eq!(state["last_seq"], 1, "{}: {state}", flavor.name());

    let context = jetstream::new(client.clone());
    let all = pull_consumer(&context, "INT", "ALL", "").await;
    let only_b = pull_consumer(&context, "INT", "ONLYB", "int.b").await;
    js::publish_all(&client, &["int.a", "int.b", "int.b"]).await;
    wait_state(&client, "INT", "three kept", messages_are(3)).await;
    for message in fetch(&all, 3).await {
        message.double_ack().await.expect("ack");
    }
    // int.a (2) had only ALL's interest; the int.b ones wait for ONLYB.
    let state = wait_state(&client, "INT", "int.a released", messages_are(2)).await;
    assert_eq!(state["first_seq"], 3, "{}: {state}", flavor.name());
    let from_b = fetch(&only_b, 2).await;
    from_b[0].double_ack().await.expect("ack");
    let state = wait_state(&client, "INT", "first int.b released", messages_are(1)).await;
    assert_eq!(state["first_seq"], 4, "{}: {state}", flavor.name());
    // Deleting ONLYB releases what only it still needed.
    context
        .get_stream("INT")
        .await
        .expect("stream")
        .delete_consumer("ONLYB")
        .await
        .expect("delete consumer");
    let state = wait_state(&client, "INT", "all released", messages_are(0)).await;
    assert_eq!(state["last_seq"], 4, "{}: {state}", flavor.name());
}
differential_cluster!(interest_keeps_messages_until_every_consumer_acked);

async fn interest_with_ack_none_releases_on_delivery(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"INTN","subjects":["intn.>"],"retention":"interest"}),
    )
    .await;
    let mut deliveries = client.subscribe("deliver.intn").await.expect("subscribe");
    client.flush().await.expect("flush");
    let created = api(
        &client,
        "$JS.API.CONSUMER.CREATE.INTN.PUSHER",
        &json!({"stream_name":"INTN","config":{"durable_name":"PUSHER","deliver_subject":"deliver.intn","ack_policy":"none"}}).to_string(),
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    js::publish_all(&client, &["intn.a", "intn.b"]).await;
    for _ in 0..2 {
        tokio::time::timeout(TIMEOUT, deliveries.next())
            .await
            .expect("delivery in time")
            .expect("subscription open");
    }
    let state = wait_state(&client, "INTN", "delivered released", messages_are(0)).await;
    assert_eq!(state["last_seq"], 2, "{}: {state}", flavor.name());
}
differential_cluster!(interest_with_ack_none_releases_on_delivery);
