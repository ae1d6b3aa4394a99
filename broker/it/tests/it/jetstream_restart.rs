//! JetStream streams across a crash: each test publishes, SIGKILLs the server
//! (`Server::restart`: kill, then start again on the same data directory) and
//! checks what the restarted server recomputes: messages, bytes, first and
//! last sequence, subjects, deletes, purges, limits (still enforced
//! afterwards), stream deletion, config updates, memory streams and the
//! duplicate window. Against tern-server and nats-server 2.15.1.
//!
//! nats-server does not fsync each message, but SIGKILL leaves the page cache
//! alone, so everything it acknowledged must survive these restarts; a loss on
//! the nats flavor would be a real finding, not a test to relax.

use crate::common;

use std::time::{Duration, Instant};

use common::js::{
    self, api, api_error, api_ok, create, expect_no_responders, expect_puback, file_record_bytes,
    normalize, state, state_detailed, state_of,
};
use common::{Flavor, Server};
use serde_json::{json, Value};

/// SIGKILLs `server`, starts it again on the same data, and connects.
async fn crash_and_restart(server: Server) -> (Server, async_nats::Client) {
    let server = server.restart();
    let client = server.connect().await;
    (server, client)
}

fn ack(stream: &str, seq: u64) -> String {
    format!(r#"{{"stream":"{stream}","seq":{seq}}}"#)
}

/// Every stored message as MSG.GET returns it (raw JSON, time included).
async fn messages(client: &async_nats::Client, stream: &str, last_seq: u64) -> Vec<Value> {
    let mut found = Vec::new();
    for seq in 1..=last_seq {
        let response = api(
            client,
            &format!("$JS.API.STREAM.MSG.GET.{stream}"),
            &json!({ "seq": seq }).to_string(),
        )
        .await;
        if response.get("error").is_none() {
            found.push(response["message"].clone());
        }
    }
    found
}

async fn restart_keeps_messages(flavor: Flavor) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"KEEP","subjects":["keep.>"],"max_msgs":100}),
    )
    .await;
    expect_puback(&client, "keep.a", &[], "one", &ack("KEEP", 1)).await;
    expect_puback(
        &client,
        "keep.b",
        &[("Nats-Msg-Id", "id-2")],
        "two",
        &ack("KEEP", 2),
    )
    .await;
    expect_puback(
        &client,
        "keep.a",
        &[("X-Other", "value")],
        "",
        &ack("KEEP", 3),
    )
    .await;
    expect_puback(&client, "keep.c.d", &[], "four", &ack("KEEP", 4)).await;
    let before = api_ok(
        &client,
        "$JS.API.STREAM.INFO.KEEP",
        r#"{"subjects_filter":">"}"#,
    )
    .await;
    let stored_before = messages(&client, "KEEP", 4).await;
    assert_eq!(stored_before.len(), 4);

    let (_server, client) = crash_and_restart(server).await;
    let after = api_ok(
        &client,
        "$JS.API.STREAM.INFO.KEEP",
        r#"{"subjects_filter":">"}"#,
    )
    .await;
    // Creation time and message time stamps are stored, not re-derived.
    for (field, path) in [
        ("created", &["created"][..]),
        ("first_ts", &["state", "first_ts"][..]),
        ("last_ts", &["state", "last_ts"][..]),
    ] {
        let pick = |value: &Value| {
            path.iter()
                .fold(value.clone(), |value, key| value[*key].clone())
        };
        assert_eq!(
            pick(&after),
            pick(&before),
            "{}: {field} after restart",
            flavor.name()
        );
    }
    assert_eq!(
        normalize(after.clone())["config"],
        normalize(before.clone())["config"]
    );
    assert_eq!(
        normalize(after)["state"],
        normalize(before)["state"],
        "{}: state after restart",
        flavor.name()
    );
    assert_eq!(
        messages(&client, "KEEP", 4).await,
        stored_before,
        "{}: every message (subject, headers, data, time) survives",
        flavor.name()
    );
    expect_puback(&client, "keep.a", &[], "five", &ack("KEEP", 5)).await;
}
differential!(restart_keeps_messages);

async fn restart_max_msgs(flavor: Flavor) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"R_MSGS","subjects":["rmsgs.>"],"max_msgs":3}),
    )
    .await;
    js::publish_all(
        &client,
        &["rmsgs.a", "rmsgs.b", "rmsgs.c", "rmsgs.d", "rmsgs.e"],
    )
    .await;
    let record = file_record_bytes("rmsgs.a", 0, 1);
    let (_server, client) = crash_and_restart(server).await;
    assert_eq!(
        state_detailed(&client, "R_MSGS").await,
        state_of(
            3,
            3 * record,
            3,
            5,
            json!({"num_subjects": 3, "subjects": {"rmsgs.c": 1, "rmsgs.d": 1, "rmsgs.e": 1}})
        ),
        "{}: after restart",
        flavor.name()
    );
    // Still enforced.
    expect_puback(&client, "rmsgs.f", &[], "v", &ack("R_MSGS", 6)).await;
    assert_eq!(
        state(&client, "R_MSGS").await,
        state_of(3, 3 * record, 4, 6, json!({"num_subjects": 3})),
        "{}: limit after restart",
        flavor.name()
    );
}
differential!(restart_max_msgs);

async fn restart_max_bytes(flavor: Flavor) {
    let server = js::server(flavor);
    let client = server.connect().await;
    // Two 74-byte records fit in 160 bytes, three do not.
    create(
        &client,
        json!({"name":"R_BYTES","subjects":["rbytes.>"],"max_bytes":160}),
    )
    .await;
    let payload = "0123456789012345678901234567890123456789";
    for (index, subject) in ["rbytes.a", "rbytes.b", "rbytes.c"].iter().enumerate() {
        expect_puback(
            &client,
            subject,
            &[],
            payload,
            &ack("R_BYTES", index as u64 + 1),
        )
        .await;
    }
    let record = file_record_bytes("rbytes.a", 0, payload.len());
    let (_server, client) = crash_and_restart(server).await;
    assert_eq!(
        state(&client, "R_BYTES").await,
        state_of(2, 2 * record, 2, 3, json!({"num_subjects": 2})),
        "{}: after restart",
        flavor.name()
    );
    expect_puback(&client, "rbytes.d", &[], payload, &ack("R_BYTES", 4)).await;
    assert_eq!(
        state(&client, "R_BYTES").await,
        state_of(2, 2 * record, 3, 4, json!({"num_subjects": 2})),
        "{}: limit after restart",
        flavor.name()
    );
}
differential!(restart_max_bytes);

async fn restart_max_msgs_per_subject(flavor: Flavor) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"R_PER","subjects":["rper.>"],"max_msgs_per_subject":2}),
    )
    .await;
    // seq: 1 a, 2 b, 3 a, 4 a (evicts 1), 5 b
    js::publish_all(&client, &["rper.a", "rper.b", "rper.a", "rper.a", "rper.b"]).await;
    let record = file_record_bytes("rper.a", 0, 1);
    let (_server, client) = crash_and_restart(server).await;
    assert_eq!(
        state_detailed(&client, "R_PER").await,
        state_of(
            4,
            4 * record,
            2,
            5,
            json!({"num_subjects": 2, "subjects": {"rper.a": 2, "rper.b": 2}})
        ),
        "{}: after restart",
        flavor.name()
    );
    // The per-subject history is still tracked: 6 evicts seq 3.
    expect_puback(&client, "rper.a", &[], "v", &ack("R_PER", 6)).await;
    assert_eq!(
        state_detailed(&client, "R_PER").await,
        state_of(
            4,
            4 * record,
            2,
            6,
            json!({"num_subjects": 2, "subjects": {"rper.a": 2, "rper.b": 2}, "num_deleted": 1, "deleted": [3]})
        ),
        "{}: per-subject limit after restart",
        flavor.name()
    );
}
differential!(restart_max_msgs_per_subject);

/// A limit loosened by an update: what the tighter limit removed before
/// the update stays removed over a crash (the restart replays the messages
/// from before the update under the limit then in force, not the new one).
/// tern only: nats-server 2.15.1 brings the removed messages back after a
/// SIGKILL (measured: 3 messages from seq 1), which tern deliberately does
/// not copy (a removed message must not reappear).
async fn restart_after_a_loosened_limit() {
    let flavor = Flavor::Tern;
    let server = js::server(flavor);
    let client = server.connect().await;
    let config = json!({"name":"R_LOOSE","subjects":["rloose.>"],"max_msgs_per_subject":1});
    create(&client, config.clone()).await;
    // seq 1, 2, 3 on one subject: each evicts the one before.
    js::publish_all(&client, &["rloose.a", "rloose.a", "rloose.a"]).await;
    let mut loosened = config;
    loosened["max_msgs_per_subject"] = json!(3);
    api_ok(
        &client,
        "$JS.API.STREAM.UPDATE.R_LOOSE",
        &loosened.to_string(),
    )
    .await;
    let record = file_record_bytes("rloose.a", 0, 1);
    let before = state(&client, "R_LOOSE").await;
    assert_eq!(
        before,
        state_of(1, record, 3, 3, json!({"num_subjects": 1})),
        "{}",
        flavor.name()
    );
    let (_server, client) = crash_and_restart(server).await;
    assert_eq!(
        state(&client, "R_LOOSE").await,
        before,
        "{}: removed messages stay removed after the restart",
        flavor.name()
    );
}
tern_only!(restart_after_a_loosened_limit);

async fn restart_max_age_expires_during_downtime(flavor: Flavor) {
    const MAX_AGE: Duration = Duration::from_secs(1);
    let mut server = js::server(flavor);
    let client = server.connect().await;
    let max_age_ns = MAX_AGE.as_nanos() as u64;
    create(
        &client,
        json!({"name":"R_AGE","subjects":["rage.>"],"max_age": max_age_ns}),
    )
    .await;
    create(&client, json!({"name":"R_AGELESS","subjects":["rageless"]})).await;
    js::publish_all(&client, &["rage.a", "rage.b", "rageless"]).await;
    let published = Instant::now();
    // The messages must expire while the server is down: kill it, let
    // max_age pass (the passage of time is what is tested), then restart.
    server.kill();
    tokio::time::sleep((MAX_AGE + Duration::from_millis(200)).saturating_sub(published.elapsed()))
        .await;
    let (_server, client) = crash_and_restart(server).await;
    assert_eq!(
        state(&client, "R_AGE").await,
        state_of(0, 0, 3, 2, json!({})),
        "{}: expired during downtime, gone right after the restart",
        flavor.name()
    );
    assert_eq!(
        state(&client, "R_AGELESS").await["messages"],
        1,
        "{}",
        flavor.name()
    );
    expect_puback(&client, "rage.a", &[], "v", &ack("R_AGE", 3)).await;
}
differential!(restart_max_age_expires_during_downtime);

async fn restart_discard_new(flavor: Flavor) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"R_NEW","subjects":["rnew.>"],"max_msgs":2,"discard":"new"}),
    )
    .await;
    js::publish_all(&client, &["rnew.a", "rnew.b"]).await;
    let (_server, client) = crash_and_restart(server).await;
    expect_puback(
        &client,
        "rnew.c",
        &[],
        "v",
        r#"{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"R_NEW","seq":0}"#,
    )
    .await;
    assert_eq!(
        state(&client, "R_NEW").await,
        state_of(
            2,
            2 * file_record_bytes("rnew.a", 0, 1),
            1,
            2,
            json!({"num_subjects": 2})
        ),
        "{}",
        flavor.name()
    );
}
differential!(restart_discard_new);

async fn restart_after_purge(flavor: Flavor) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"R_PURGE_ALL","subjects":["rpa.>"]})).await;
    create(
        &client,
        json!({"name":"R_PURGE_SUBJECT","subjects":["rps.>"]}),
    )
    .await;
    js::publish_all(&client, &["rpa.a", "rpa.b", "rpa.c"]).await;
    js::publish_all(&client, &["rps.a", "rps.b", "rps.a", "rps.c"]).await;
    api_ok(&client, "$JS.API.STREAM.PURGE.R_PURGE_ALL", "").await;
    api_ok(
        &client,
        "$JS.API.STREAM.PURGE.R_PURGE_SUBJECT",
        r#"{"filter":"rps.a"}"#,
    )
    .await;
    let subject_state = state_detailed(&client, "R_PURGE_SUBJECT").await;
    let (_server, client) = crash_and_restart(server).await;
    // Empty after a purge: first_seq = last_seq + 1, also after a restart.
    assert_eq!(
        state(&client, "R_PURGE_ALL").await,
        state_of(0, 0, 4, 3, json!({})),
        "{}: purged stream after restart",
        flavor.name()
    );
    assert_eq!(
        state_detailed(&client, "R_PURGE_SUBJECT").await,
        subject_state,
        "{}: subject-purged stream after restart",
        flavor.name()
    );
    assert_eq!(
        subject_state,
        state_of(
            2,
            2 * file_record_bytes("rps.b", 0, 1),
            2,
            4,
            json!({"num_subjects": 2, "subjects": {"rps.b": 1, "rps.c": 1}, "num_deleted": 1, "deleted": [3]})
        ),
        "{}",
        flavor.name()
    );
    // Sequences continue; nothing purged comes back.
    expect_puback(&client, "rpa.a", &[], "v", &ack("R_PURGE_ALL", 4)).await;
    let missing = api(
        &client,
        "$JS.API.STREAM.MSG.GET.R_PURGE_SUBJECT",
        r#"{"last_by_subj":"rps.a"}"#,
    )
    .await;
    assert_eq!(missing["error"]["err_code"], 10037, "{missing}");
}
differential!(restart_after_purge);

async fn restart_after_message_delete(flavor: Flavor) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"R_DEL","subjects":["rdel.>"]})).await;
    js::publish_all(&client, &["rdel.a", "rdel.b", "rdel.c", "rdel.d", "rdel.e"]).await;
    api_ok(&client, "$JS.API.STREAM.MSG.DELETE.R_DEL", r#"{"seq":2}"#).await;
    api_ok(
        &client,
        "$JS.API.STREAM.MSG.DELETE.R_DEL",
        r#"{"seq":3,"no_erase":true}"#,
    )
    .await;
    // Deleting the first message moves first_seq.
    api_ok(&client, "$JS.API.STREAM.MSG.DELETE.R_DEL", r#"{"seq":1}"#).await;
    // Deleting the last message keeps last_seq (tail deletes count as deleted).
    create(&client, json!({"name":"R_DEL_TAIL","subjects":["rdelt"]})).await;
    js::publish_all(&client, &["rdelt", "rdelt", "rdelt"]).await;
    api_ok(
        &client,
        "$JS.API.STREAM.MSG.DELETE.R_DEL_TAIL",
        r#"{"seq":3}"#,
    )
    .await;
    let record = file_record_bytes("rdel.a", 0, 1);
    let tail_before = state_detailed(&client, "R_DEL_TAIL").await;

    let (_server, client) = crash_and_restart(server).await;
    assert_eq!(
        state_detailed(&client, "R_DEL").await,
        state_of(
            2,
            2 * record,
            4,
            5,
            json!({"num_subjects": 2, "subjects": {"rdel.d": 1, "rdel.e": 1}})
        ),
        "{}: after restart",
        flavor.name()
    );
    for seq in [1, 2, 3] {
        let missing = api(
            &client,
            "$JS.API.STREAM.MSG.GET.R_DEL",
            &json!({ "seq": seq }).to_string(),
        )
        .await;
        assert_eq!(
            missing,
            api_error("stream_msg_get_response", 404, 10037, "no message found"),
            "{}: deleted seq {seq} after restart",
            flavor.name()
        );
    }
    let mut tail_after = state_detailed(&client, "R_DEL_TAIL").await;
    // nats-server differs from the spec (empty-stream rule aside, `last_ts`
    // is the last message's time): after a restart, when the last message
    // was deleted, nats-server 2.15.1 reports `last_ts` as the zero time (the
    // time stamp lived only in that message). Not pinned here.
    let mut tail_expected = tail_before.clone();
    for state in [&mut tail_after, &mut tail_expected] {
        state.as_object_mut().expect("state").remove("last_ts");
    }
    assert_eq!(
        tail_after,
        tail_expected,
        "{}: tail delete after restart",
        flavor.name()
    );
    let mut expected = state_of(
        2,
        2 * file_record_bytes("rdelt", 0, 1),
        1,
        3,
        json!({"num_subjects": 1, "subjects": {"rdelt": 2}, "num_deleted": 1, "deleted": [3]}),
    );
    expected.as_object_mut().expect("state").remove("last_ts");
    assert_eq!(tail_after, expected, "{}", flavor.name());
    // The deleted tail sequence is not reused.
    expect_puback(&client, "rdelt", &[], "v", &ack("R_DEL_TAIL", 4)).await;
}
differential!(restart_after_message_delete);

async fn restart_after_stream_delete(flavor: Flavor) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"R_GONE","subjects":["rgone"]})).await;
    create(&client, json!({"name":"R_STAYS","subjects":["rstays"]})).await;
    js::publish_all(&client, &["rgone", "rgone", "rstays"]).await;
    api_ok(&client, "$JS.API.STREAM.DELETE.R_GONE", "").await;
    let (_server, client) = crash_and_restart(server).await;
    assert_eq!(
        api(&client, "$JS.API.STREAM.INFO.R_GONE", "").await["error"]["err_code"],
        10059,
        "{}: deleted stream back after restart",
        flavor.name()
    );
    let names = api(&client, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(
        names["streams"],
        json!(["R_STAYS"]),
        "{}: {names}",
        flavor.name()
    );
    expect_no_responders(&client, "rgone", "x").await;
    // A new stream of that name starts from scratch.
    create(&client, json!({"name":"R_GONE","subjects":["rgone"]})).await;
    expect_puback(&client, "rgone", &[], "v", &ack("R_GONE", 1)).await;
}
differential!(restart_after_stream_delete);

async fn restart_keeps_config_update(flavor: Flavor) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"R_UPD","subjects":["rupd.a"]})).await;
    js::publish_all(&client, &["rupd.a", "rupd.a", "rupd.a"]).await;
    let updated = api_ok(
        &client,
        "$JS.API.STREAM.UPDATE.R_UPD",
        r#"{"name":"R_UPD","subjects":["rupd.a","rupd.b"],"max_msgs":2,"description":"updated","deny_delete":true}"#,
    )
    .await;
    // The update applied the new limit at once.
    assert_eq!(updated["state"]["messages"], 2, "{updated}");
    let (_server, client) = crash_and_restart(server).await;
    let info = normalize(api_ok(&client, "$JS.API.STREAM.INFO.R_UPD", "").await);
    assert_eq!(
        info["config"],
        normalize(updated)["config"],
        "{}: config after restart",
        flavor.name()
    );
    assert_eq!(
        info["state"],
        state_of(
            2,
            2 * file_record_bytes("rupd.a", 0, 1),
            2,
            3,
            json!({"num_subjects": 1})
        ),
        "{}",
        flavor.name()
    );
    expect_puback(&client, "rupd.b", &[], "v", &ack("R_UPD", 4)).await;
    assert_eq!(state(&client, "R_UPD").await["first_seq"], 3);
    let denied = api(&client, "$JS.API.STREAM.MSG.DELETE.R_UPD", r#"{"seq":3}"#).await;
    assert_eq!(
        denied,
        api_error(
            "stream_msg_delete_response",
            500,
            10057,
            "message delete not permitted"
        ),
        "{}",
        flavor.name()
    );
}
differential!(restart_keeps_config_update);

async fn restart_memory_stream(flavor: Flavor) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"R_MEM","subjects":["rmem"],"storage":"memory"}),
    )
    .await;
    create(&client, json!({"name":"R_FILE","subjects":["rfile"]})).await;
    js::publish_all(&client, &["rmem", "rmem", "rfile"]).await;
    let (_server, client) = crash_and_restart(server).await;
    // nats-server differs from the spec (which does not say): nats-server
    // 2.15.1 (single server) keeps neither the messages nor the definition of
    // a memory stream; after a crash (or a clean restart) the stream does not
    // exist.
    assert_eq!(
        api(&client, "$JS.API.STREAM.INFO.R_MEM", "").await["error"]["err_code"],
        10059,
        "{}: memory stream after restart",
        flavor.name()
    );
    let names = api(&client, "$JS.API.STREAM.NAMES", "").await;
    assert_eq!(
        names["streams"],
        json!(["R_FILE"]),
        "{}: {names}",
        flavor.name()
    );
    expect_no_responders(&client, "rmem", "x").await;
    assert_eq!(state(&client, "R_FILE").await["messages"], 1);
    // The name and subject are free again.
    create(
        &client,
        json!({"name":"R_MEM","subjects":["rmem"],"storage":"memory"}),
    )
    .await;
    expect_puback(&client, "rmem", &[], "v", &ack("R_MEM", 1)).await;
}
differential!(restart_memory_stream);

async fn restart_keeps_duplicate_window(flavor: Flavor) {
    let server = js::server(flavor);
    let client = server.connect().await;
    // Default window: two minutes, far longer than the test.
    create(&client, json!({"name":"R_DUP","subjects":["rdup"]})).await;
    expect_puback(
        &client,
        "rdup",
        &[("Nats-Msg-Id", "d1")],
        "x",
        &ack("R_DUP", 1),
    )
    .await;
    expect_puback(
        &client,
        "rdup",
        &[("Nats-Msg-Id", "d2")],
        "x",
        &ack("R_DUP", 2),
    )
    .await;
    expect_puback(&client, "rdup", &[], "x", &ack("R_DUP", 3)).await;
    let (_server, client) = crash_and_restart(server).await;
    // nats-server rebuilds the window from the stored messages' Nats-Msg-Id.
    expect_puback(
        &client,
        "rdup",
        &[("Nats-Msg-Id", "d1")],
        "x",
        r#"{"stream":"R_DUP","seq":1,"duplicate": true}"#,
    )
    .await;
    expect_puback(
        &client,
        "rdup",
        &[("Nats-Msg-Id", "d2")],
        "x",
        r#"{"stream":"R_DUP","seq":2,"duplicate": true}"#,
    )
    .await;
    expect_puback(
        &client,
        "rdup",
        &[("Nats-Msg-Id", "d3")],
        "x",
        &ack("R_DUP", 4),
    )
    .await;
    assert_eq!(state(&client, "R_DUP").await["messages"], 4);
}
differential!(restart_keeps_duplicate_window);

/// A message of the largest size the server accepts (1 MiB by default:
/// larger than the block store's write buffer) is stored, survives a
/// checkpoint and a SIGKILL, and reads back identical.
async fn restart_keeps_a_max_payload_message(flavor: Flavor) {
    let server = js::server(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"HUGE","subjects":["huge.>"]})).await;
    let max_payload = client.server_info().max_payload;
    let payload: Vec<u8> = (0..max_payload).map(|i| (i * 31 % 251) as u8).collect();
    expect_puback(&client, "huge.a", &[], "small", &ack("HUGE", 1)).await;
    let ack_two = js::request_message(&client, "huge.b", None, &payload).await;
    assert_eq!(
        js::parse_json("puback", &ack_two.payload)["seq"],
        json!(2),
        "{ack_two:?}"
    );
    expect_puback(&client, "huge.c", &[], "after", &ack("HUGE", 3)).await;
    // A clean stop checkpoints it into the block store; the SIGKILL after
    // restarts from that checkpoint.
    let server = server.restart_graceful();
    let (_server, client) = crash_and_restart(server).await;
    let stored = messages(&client, "HUGE", 3).await;
    assert_eq!(stored.len(), 3, "{:?}", state(&client, "HUGE").await);
    let data = stored[1]["data"].as_str().expect("base64 data");
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(data)
        .expect("base64");
    assert!(
        decoded == payload,
        "the 1 MiB message differs after two restarts"
    );
}

differential!(restart_keeps_a_max_payload_message);

async fn restart_keeps_every_acked_message(flavor: Flavor) {
    const COUNT: u64 = 500;
    let server = js::server(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"R_BURST","subjects":["rburst.*"]})).await;
    // Pipelined: every publish is sent before the first ack is awaited, so
    // the acks race the server's writes; the kill follows the last ack at once.
    let context = async_nats::jetstream::new(client.clone());
    let mut acks = Vec::with_capacity(COUNT as usize);
    for index in 0..COUNT {
        let subject = format!("rburst.{}", index % 10);
        acks.push(
            context
                .publish(subject, format!("message {index}").into())
                .await
                .expect("publish"),
        );
    }
    for (index, ack) in acks.into_iter().enumerate() {
        let ack = ack.await.expect("PubAck");
        assert_eq!(ack.sequence, index as u64 + 1);
    }
    let (_server, client) = crash_and_restart(server).await;
    let record = file_record_bytes("rburst.0", 0, "message 0".len());
    let state = state(&client, "R_BURST").await;
    assert_eq!(
        (&state["messages"], &state["first_seq"], &state["last_seq"]),
        (&json!(COUNT), &json!(1), &json!(COUNT)),
        "{}: every acknowledged message after SIGKILL: {state}",
        flavor.name()
    );
    // Payload lengths vary ("message 0" .. "message 499"): check the sum.
    let bytes: u64 = (0..COUNT)
        .map(|index| record - 1 + format!("{index}").len() as u64)
        .sum();
    assert_eq!(state["bytes"], bytes, "{}", flavor.name());
    let last = api_ok(
        &client,
        "$JS.API.STREAM.MSG.GET.R_BURST",
        &json!({"seq": COUNT}).to_string(),
    )
    .await;
    assert_eq!(
        last["message"]["data"],
        js::base64(format!("message {}", COUNT - 1).as_bytes())
    );
}
differential!(restart_keeps_every_acked_message);

/// The README starts the server with a data directory relative to the
/// working directory (`./data`): streams must work and survive a restart.
async fn relative_store_dir_works_and_restarts() {
    let options = common::Options {
        relative_store_dir: true,
        ..common::Options::jetstream()
    };
    let server = Server::start(Flavor::Tern, options);
    let client = server.connect().await;
    create(&client, json!({"name":"REL","subjects":["rel.>"]})).await;
    expect_puback(&client, "rel.a", &[], "one", &ack("REL", 1)).await;
    drop(client);
    let server = server.restart();
    let client = server.connect().await;
    let state = js::state(&client, "REL").await;
    assert_eq!(
        (&state["messages"], &state["last_seq"]),
        (&json!(1), &json!(1)),
        "{state}"
    );
}
tern_only!(relative_store_dir_works_and_restarts);

/// A stream whose config file is damaged fails closed: after a restart it
/// answers an error naming the damage, its files stay as they were, the
/// other streams are unaffected, and repairing the file brings it back with
/// every message.
async fn corrupt_config_fails_closed_and_deletes_nothing() {
    let server = js::server(Flavor::Tern);
    let client = server.connect().await;
    create(&client, json!({"name":"DAMAGED","subjects":["damaged.>"]})).await;
    create(&client, json!({"name":"HEALTHY","subjects":["healthy.>"]})).await;
    for sequence in 1..=3 {
        expect_puback(&client, "damaged.a", &[], "x", &ack("DAMAGED", sequence)).await;
    }
    expect_puback(&client, "healthy.a", &[], "y", &ack("HEALTHY", 1)).await;
    drop(client);
    let config_path = server.store_dir().join("jetstream/streams/DAMAGED/config");
    let original = std::fs::read(&config_path).expect("the stream has a config file");
    let mut damaged = original.clone();
    damaged[40] ^= 0x20; // inside the JSON: only the checksum can tell
    std::fs::write(&config_path, &damaged).unwrap();
    let server = server.restart();
    let client = server.connect().await;
    let info = js::api(&client, "$JS.API.STREAM.INFO.DAMAGED", "").await;
    let description = info["error"]["description"].as_str().unwrap_or_default();
    assert!(
        description.contains("checksum"),
        "a damaged stream says why: {info}"
    );
    assert_eq!(
        std::fs::read(&config_path).unwrap(),
        damaged,
        "recovery leaves the damaged file alone"
    );
    let state = js::state(&client, "HEALTHY").await;
    assert_eq!(state["messages"], json!(1), "{state}");
    // Publishing to the damaged stream's subjects is not accepted.
    js::expect_no_responders(&client, "damaged.a", "z").await;
    drop(client);
    std::fs::write(&config_path, &original).unwrap();
    let server = server.restart();
    let client = server.connect().await;
    let state = js::state(&client, "DAMAGED").await;
    assert_eq!(
        (&state["messages"], &state["last_seq"]),
        (&json!(3), &json!(3)),
        "repaired: {state}"
    );
}
tern_only!(corrupt_config_fails_closed_and_deletes_nothing);
