//! JetStream fields clients read that tern once left unmaintained, against
//! tern-server and nats-server 2.15.1: `state.consumer_count` and the
//! account's `consumers` (also after a restart), `first_seq`, and a pull
//! request to a push consumer (409), and no client accepted before the
//! server can serve it.

use crate::common;

use async_nats::jetstream;
use common::js::{self, api, api_ok, create};
use common::{Flavor, TIMEOUT};
use futures::StreamExt;
use serde_json::json;

async fn counts(client: &async_nats::Client, stream: &str) -> (u64, u64, u64) {
    let info = api_ok(client, &format!("$JS.API.STREAM.INFO.{stream}"), "").await;
    let account = api_ok(client, "$JS.API.INFO", "").await;
    let listed = api_ok(client, "$JS.API.STREAM.LIST", "{}").await;
    let listed_count = listed["streams"]
        .as_array()
        .expect("streams")
        .iter()
        .find(|entry| entry["config"]["name"] == stream)
        .expect("listed")["state"]["consumer_count"]
        .as_u64()
        .expect("consumer_count in LIST");
    let info_count = info["state"]["consumer_count"]
        .as_u64()
        .expect("consumer_count");
    assert_eq!(listed_count, info_count, "LIST and INFO agree");
    (
        info_count,
        account["consumers"].as_u64().expect("account consumers"),
        account["streams"].as_u64().expect("account streams"),
    )
}

async fn consumer_counts_follow_creates_deletes_and_restarts(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"COUNTED","subjects":["counted.>"]})).await;
    create(&client, json!({"name":"OTHER","subjects":["other.>"]})).await;
    assert_eq!(counts(&client, "COUNTED").await, (0, 0, 2));
    for durable in ["a", "b", "c"] {
        api_ok(
            &client,
            &format!("$JS.API.CONSUMER.CREATE.COUNTED.{durable}"),
            &json!({"stream_name":"COUNTED","config":{"durable_name":durable,"ack_policy":"explicit"}})
                .to_string(),
        )
        .await;
    }
    api_ok(
        &client,
        "$JS.API.CONSUMER.CREATE.OTHER.x",
        &json!({"stream_name":"OTHER","config":{"durable_name":"x"}}).to_string(),
    )
    .await;
    assert_eq!(counts(&client, "COUNTED").await, (3, 4, 2));
    api_ok(&client, "$JS.API.CONSUMER.DELETE.COUNTED.b", "").await;
    assert_eq!(counts(&client, "COUNTED").await, (2, 3, 2));
    drop(client);
    let server = server.restart();
    let client = server.connect().await;
    assert_eq!(
        counts(&client, "COUNTED").await,
        (2, 3, 2),
        "after a restart"
    );
    let other = api_ok(&client, "$JS.API.STREAM.INFO.OTHER", "").await;
    assert_eq!(other["state"]["consumer_count"], 1);
}
differential_cluster!(
    consumer_counts_follow_creates_deletes_and_restarts,
    nats_cluster_in_ci
);

async fn first_seq_numbers_the_first_message(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    let created = create(
        &client,
        json!({"name":"FIRST","subjects":["first.>"],"first_seq":100}),
    )
    .await;
    assert_eq!(created["config"]["first_seq"], 100);
    assert_eq!(created["state"]["first_seq"], 100);
    assert_eq!(created["state"]["last_seq"], 99);
    let context = jetstream::new(client.clone());
    for expected in 100..103 {
        let ack = context
            .publish("first.a", "x".into())
            .await
            .expect("publish")
            .await
            .expect("ack");
        assert_eq!(ack.sequence, expected);
    }
    let info = api_ok(&client, "$JS.API.STREAM.INFO.FIRST", "").await;
    assert_eq!(info["state"]["first_seq"], 100);
    assert_eq!(info["state"]["last_seq"], 102);
    assert_eq!(info["state"]["messages"], 3);
    assert_eq!(info["state"]["num_deleted"].as_u64().unwrap_or(0), 0);
    drop(client);
    let server = server.restart();
    let client = server.connect().await;
    let info = api_ok(&client, "$JS.API.STREAM.INFO.FIRST", "").await;
    assert_eq!(info["state"]["first_seq"], 100, "after a restart");
    assert_eq!(info["state"]["last_seq"], 102, "after a restart");
    let next = jetstream::new(client.clone())
        .publish("first.a", "y".into())
        .await
        .expect("publish")
        .await
        .expect("ack");
    assert_eq!(next.sequence, 103);
}
differential_cluster!(first_seq_numbers_the_first_message);

async fn an_empty_first_seq_stream_keeps_its_start_over_a_restart(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"LATER","subjects":["later"],"first_seq":5000}),
    )
    .await;
    drop(client);
    let server = server.restart();
    let client = server.connect().await;
    let info = api_ok(&client, "$JS.API.STREAM.INFO.LATER", "").await;
    assert_eq!(info["state"]["first_seq"], 5000);
    assert_eq!(info["state"]["last_seq"], 4999);
    // The expected-last-sequence check sees the sequence before the start.
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Expected-Last-Sequence", "4999");
    let message = js::request_message(&client, "later", Some(headers), b"").await;
    let ack = js::parse_json("pub ack", &message.payload);
    assert_eq!(ack["seq"], 5000, "{ack}");
    let wrong = api(&client, "later", "").await;
    assert_eq!(wrong["seq"], 5001, "{wrong}");
}
differential_cluster!(an_empty_first_seq_stream_keeps_its_start_over_a_restart);

async fn a_pull_request_to_a_push_consumer_gets_409(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"PUSHED","subjects":["pushed"]})).await;
    api_ok(
        &client,
        "$JS.API.CONSUMER.CREATE.PUSHED.p",
        &json!({"stream_name":"PUSHED","config":{"durable_name":"p","deliver_subject":"pushed.inbox"}})
            .to_string(),
    )
    .await;
    // A body that would be refused on a pull consumer: the push check is first.
    for body in ["", r#"{"batch":1}"#, "not json"] {
        let reply = client.new_inbox();
        let mut replies = client.subscribe(reply.clone()).await.expect("subscribe");
        client
            .publish_with_reply("$JS.API.CONSUMER.MSG.NEXT.PUSHED.p", reply, body.into())
            .await
            .expect("publish");
        let answer = tokio::time::timeout(TIMEOUT, replies.next())
            .await
            .expect("an answer, not a timeout")
            .expect("subscription open");
        let status = answer.status.expect("a status message");
        assert_eq!(status.as_u16(), 409, "body {body:?}");
        assert_eq!(
            answer.description.as_deref(),
            Some("Consumer is push based"),
            "body {body:?}"
        );
        assert!(answer.payload.is_empty());
    }
    // Through async-nats' request: an answer, not a timeout.
    let answer =
        js::request_message(&client, "$JS.API.CONSUMER.MSG.NEXT.PUSHED.p", None, b"").await;
    assert_eq!(answer.status.map(|status| status.as_u16()), Some(409));
}
differential_cluster!(a_pull_request_to_a_push_consumer_gets_409);

/// Polls `condition` every 5 ms until it holds, or panics after [`TIMEOUT`].
async fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} within {TIMEOUT:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Kills the server by PID when the test ends, passing or not.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// While JetStream starts, the client port refuses connections (nothing
/// listens yet); once every shard can serve, a client connects and JetStream
/// answers at once. (tern only: the hook that holds start-up is tern's.)
async fn clients_are_refused_until_the_server_can_serve() {
    let directory = tempfile::tempdir().expect("temp dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("free port")
        .local_addr()
        .expect("address")
        .port();
    let log_path = directory.path().join("stderr.log");
    let release = directory.path().join("release");
    let _server = Child(
        std::process::Command::new(crate::common::tern_server())
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "--cores", "0-1"])
            .args(["--unpinned", "--jetstream", "--store_dir"])
            .arg(directory.path().join("data"))
            .env("TERN_TEST_HOLD_STARTUP", &release)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log_path).expect("log file"))
            .spawn()
            .expect("start tern-server"),
    );
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    wait_for("start-up held after JetStream opened", || {
        log().contains("start-up held")
    })
    .await;
    let error = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect_err("nothing listens while the server starts");
    assert_eq!(
        error.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "{error}"
    );
    assert!(!log().contains("Server is ready"), "{}", log());
    std::fs::write(&release, b"").expect("release start-up");
    wait_for("the server ready", || log().contains("Server is ready")).await;
    let client = async_nats::connect(format!("127.0.0.1:{port}"))
        .await
        .expect("connect once ready");
    let account = api_ok(&client, "$JS.API.INFO", "").await;
    assert_eq!(account["streams"], 0);
}
tern_only!(clients_are_refused_until_the_server_can_serve);
