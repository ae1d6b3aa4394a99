//! The server-wide JetStream limits `max_file_store` and `max_memory_store`,
//! differential against nats-server 2.15.1:
//!
//! - create and update: the streams' `max_bytes` reservations of one storage
//!   type may not exceed the limit (500 10047 for file, 500 10028 for memory;
//!   a stream without `max_bytes` reserves 1 byte when created);
//! - publish: once the server stores more bytes of a type than its limit,
//!   publishes to every stream of that type are refused with 503 10023
//!   `insufficient resources` (tern: whichever shard owns the stream), and a
//!   purge makes room again.

use crate::common;

use bytes::Bytes;
use common::js::{self, api, api_ok, create, parse_json};
use common::{Flavor, Options, Server};
use serde_json::{json, Value};

const MIB: i64 = 1 << 20;
const PAYLOAD_BYTES: usize = 8 * 1024;

fn expect_error(response: &Value, code: u16, err_code: u32, description: &str, what: &str) {
    assert_eq!(
        response["error"],
        json!({"code": code, "err_code": err_code, "description": description}),
        "{what}: {response}"
    );
}

async fn stream_request(client: &async_nats::Client, operation: &str, config: Value) -> Value {
    let name = config["name"].as_str().expect("a name").to_string();
    api(
        client,
        &format!("$JS.API.STREAM.{operation}.{name}"),
        &config.to_string(),
    )
    .await
}

async fn reservations_must_fit_max_file_store_and_max_memory_store(flavor: Flavor) {
    let options = Options {
        max_file_store_bytes: Some(4 * MIB as u64),
        max_memory_store_bytes: Some(MIB as u64),
        ..Options::jetstream()
    };
    let server = Server::start(flavor, options);
    let client = server.connect().await;
    let file = |name: &str, max_bytes: Option<i64>| {
        let mut config = json!({"name": name, "subjects": [format!("{}.>", name.to_lowercase())]});
        if let Some(bytes) = max_bytes {
            config["max_bytes"] = json!(bytes);
        }
        config
    };
    const STORAGE: (u16, u32, &str) = (500, 10047, "insufficient storage resources available");

    create(&client, file("A", Some(3 * MIB))).await;
    let refused = stream_request(&client, "CREATE", file("B", Some(2 * MIB))).await;
    expect_error(
        &refused,
        STORAGE.0,
        STORAGE.1,
        STORAGE.2,
        "B over the limit",
    );
    // Exactly filling the limit fits.
    create(&client, file("B", Some(MIB))).await;
    // No max_bytes still takes one byte, and none is left.
    let refused = stream_request(&client, "CREATE", file("C", None)).await;
    expect_error(
        &refused,
        STORAGE.0,
        STORAGE.1,
        STORAGE.2,
        "C unlimited, limit full",
    );
    // An update may not raise past the limit; lowering frees room.
    let refused = stream_request(&client, "UPDATE", file("A", Some(4 * MIB))).await;
    expect_error(&refused, STORAGE.0, STORAGE.1, STORAGE.2, "A raised");
    let lowered = stream_request(&client, "UPDATE", file("A", Some(2 * MIB))).await;
    assert!(lowered.get("error").is_none(), "A lowered: {lowered}");
    create(&client, file("C", None)).await;
    // A refused create left nothing behind.
    let names = api_ok(&client, "$JS.API.STREAM.NAMES", "").await;
    let mut names: Vec<&str> = names["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|name| name.as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["A", "B", "C"]);

    // Memory streams count against max_memory_store only.
    let memory = |name: &str, max_bytes: i64| {
        json!({"name": name, "subjects": [format!("{}.>", name.to_lowercase())],
               "storage": "memory", "max_bytes": max_bytes})
    };
    let refused = stream_request(&client, "CREATE", memory("M", 2 * MIB)).await;
    expect_error(
        &refused,
        500,
        10028,
        "insufficient memory resources available",
        "M over the memory limit",
    );
    create(&client, memory("M", MIB / 2)).await;
    let info = api_ok(&client, "$JS.API.INFO", "").await;
    // A 2 MiB + B 1 MiB + C none.
    assert_eq!(info["reserved_storage"], json!(3 * MIB), "{info}");
    assert_eq!(info["reserved_memory"], json!(MIB / 2), "{info}");
    // The limits are the server's: the account's stay unlimited.
    assert_eq!(
        (
            &info["limits"]["max_storage"],
            &info["limits"]["max_memory"]
        ),
        (&json!(-1), &json!(-1)),
        "{info}"
    );
}
differential!(reservations_must_fit_max_file_store_and_max_memory_store);

/// Publishes `PAYLOAD_BYTES` messages one at a time until one is refused;
/// returns how many were acked and the refusal.
async fn publish_until_refused(client: &async_nats::Client, subject: &str) -> (u64, Value) {
    let payload = Bytes::from(vec![b'x'; PAYLOAD_BYTES]);
    let (acked, refusal) = js::publish_until_refused(client, subject, payload, 10_000).await;
    (acked, parse_json("PubAck", refusal.as_bytes()))
}

async fn publish_once(client: &async_nats::Client, subject: &str) -> Value {
    js::pub_ack(client, subject, Bytes::from_static(b"small"))
        .await
        .0
}

fn expect_insufficient_resources(ack: &Value, stream: &str) {
    assert_eq!(
        ack,
        &json!({"error": {"code": 503, "err_code": 10023, "description": "insufficient resources"},
                "stream": stream, "seq": 0}),
        "{stream}"
    );
}

async fn publishes_past_the_store_limits_are_refused_until_a_purge(flavor: Flavor) {
    let file_limit_bytes = MIB;
    let memory_limit_bytes = MIB / 2;
    let options = Options {
        max_file_store_bytes: Some(file_limit_bytes as u64),
        max_memory_store_bytes: Some(memory_limit_bytes as u64),
        ..Options::jetstream()
    };
    let server = Server::start(flavor, options);
    let mut client = server.connect().await;
    create(&client, json!({"name": "FILL", "subjects": ["fill.>"]})).await;
    // Several more file streams: with tern's two shards some live on the
    // shard that does not own FILL, and the limit is server-wide.
    let others = ["OTHER1", "OTHER2", "OTHER3", "OTHER4"];
    for name in others {
        create(
            &client,
            json!({"name": name, "subjects": [format!("{}.>", name.to_lowercase())]}),
        )
        .await;
    }
    create(
        &client,
        json!({"name": "MEM", "subjects": ["mem.>"], "storage": "memory"}),
    )
    .await;

    let (acked, refusal) = publish_until_refused(&client, "fill.a").await;
    expect_insufficient_resources(&refusal, "FILL");
    // nats-server refuses once the stored bytes exceed the limit: the
    // message that crossed it was stored.
    let message_bytes = js::state(&client, "FILL").await["bytes"].as_u64().unwrap() / acked;
    let fitting = file_limit_bytes as u64 / message_bytes;
    assert!(
        (fitting..=fitting + 2).contains(&acked),
        "{acked} acked of {message_bytes} bytes each under a {file_limit_bytes}-byte limit"
    );
    for name in others {
        let ack = publish_once(&client, &format!("{}.x", name.to_lowercase())).await;
        expect_insufficient_resources(&ack, name);
    }
    // Memory has its own limit.
    let ack = publish_once(&client, "mem.x").await;
    assert_eq!(ack["seq"], json!(1), "{ack}");
    let (memory_acked, refusal) = publish_until_refused(&client, "mem.a").await;
    expect_insufficient_resources(&refusal, "MEM");
    assert!(
        memory_acked * PAYLOAD_BYTES as u64 >= memory_limit_bytes as u64 - PAYLOAD_BYTES as u64
    );

    // The count survives a SIGKILL: recovery counts what it finds.
    let server = server.restart();
    client = server.connect().await;
    let ack = publish_once(&client, "fill.after-restart").await;
    expect_insufficient_resources(&ack, "FILL");

    // Everything acked is stored; a purge makes room again.
    let state = js::state(&client, "FILL").await;
    assert_eq!(state["messages"], json!(acked), "{state}");
    api_ok(&client, "$JS.API.STREAM.PURGE.FILL", "").await;
    let ack = js::publish_until_accepted(
        &client,
        "other1.x",
        Bytes::from_static(b"small"),
        "after the purge",
    )
    .await;
    assert_eq!(ack["seq"], json!(1), "{ack}");
}
differential!(publishes_past_the_store_limits_are_refused_until_a_purge);
