//! Per-message TTLs (`Nats-TTL`) and subject delete markers
//! (`subject_delete_marker_ttl`) against tern-server and nats-server 2.15.1:
//! which header values are accepted where, expiry by TTL, `never` exempting
//! a message from max_age, the marker left when a subject's last message
//! ages out (its exact headers), the marker's own expiry, and a TTL below
//! the marker TTL being raised. Expiry is the server's own doing, so the
//! tests wait for it with bounded polls.

use crate::common;

use common::js::{self, api, api_ok, base64, create, expect_puback, wait_state};
use common::Flavor;
use serde_json::json;

fn error_ack(code: u16, err_code: u32, description: &str, stream: &str) -> String {
    format!(
        r#"{{"error":{{"code":{code},"err_code":{err_code},"description":"{description}"}},"stream":"{stream}","seq":0}}"#
    )
}

fn ack(stream: &str, seq: u64) -> String {
    format!(r#"{{"stream":"{stream}","seq":{seq}}}"#)
}

async fn ttl_header_values(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(&client, json!({"name":"PLAIN","subjects":["plain.>"]})).await;
    let disabled = error_ack(400, 10166, "per-message TTL is disabled", "PLAIN");
    let invalid = error_ack(400, 10165, "invalid per-message TTL", "PLAIN");
    expect_puback(&client, "plain.a", &[("Nats-TTL", "5s")], "x", &disabled).await;
    expect_puback(&client, "plain.a", &[("Nats-TTL", "never")], "x", &disabled).await;
    // Unparsable reads as "no TTL" for the disabled check, then is invalid.
    // nats-server's cluster says "disabled" for a replicated stream (its
    // leader's pre-check looks at the header, not its value; an R1
    // stream's answer is one server's); tern keeps one server's answer.
    let unparsable = if flavor == Flavor::Nats && common::target::clustered() {
        &disabled
    } else {
        &invalid
    };
    expect_puback(&client, "plain.a", &[("Nats-TTL", "soon")], "x", unparsable).await;
    // "00" is zero seconds: no TTL at all, stored.
    expect_puback(
        &client,
        "plain.a",
        &[("Nats-TTL", "00")],
        "x",
        &ack("PLAIN", 1),
    )
    .await;

    create(
        &client,
        json!({"name":"TTL","subjects":["ttl.>"],"allow_msg_ttl":true}),
    )
    .await;
    let invalid = error_ack(400, 10165, "invalid per-message TTL", "TTL");
    for value in ["0", "500ms", "-5s", "1x"] {
        expect_puback(&client, "ttl.a", &[("Nats-TTL", value)], "x", &invalid).await;
    }
    let mut sequence = 0;
    // An empty value is no TTL, like "00".
    for value in ["1", "10s", "1h30m", "NEVER", "never", "00", ""] {
        sequence += 1;
        expect_puback(
            &client,
            "ttl.a",
            &[("Nats-TTL", value)],
            "x",
            &ack("TTL", sequence),
        )
        .await;
    }
}
differential_cluster!(ttl_header_values, nats_cluster_in_ci);

async fn ttl_expires_messages_and_never_outlives_max_age(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"EXP","subjects":["exp.>"],"allow_msg_ttl":true}),
    )
    .await;
    expect_puback(&client, "exp.a", &[("Nats-TTL", "1s")], "x", &ack("EXP", 1)).await;
    expect_puback(&client, "exp.b", &[], "x", &ack("EXP", 2)).await;
    expect_puback(
        &client,
        "exp.c",
        &[("Nats-TTL", "never")],
        "x",
        &ack("EXP", 3),
    )
    .await;
    let state = wait_state(&client, "EXP", "the 1s TTL to expire", |state| {
        state["messages"] == 2
    })
    .await;
    assert_eq!(
        (&state["first_seq"], &state["last_seq"]),
        (&json!(2), &json!(3)),
        "{}: {state:#}",
        flavor.name()
    );

    // max_age removes everything but the message that never expires.
    create(
        &client,
        json!({"name":"AGED","subjects":["aged.>"],"allow_msg_ttl":true,"max_age":1_000_000_000u64}),
    )
    .await;
    expect_puback(
        &client,
        "aged.a",
        &[("Nats-TTL", "never")],
        "x",
        &ack("AGED", 1),
    )
    .await;
    expect_puback(&client, "aged.b", &[], "x", &ack("AGED", 2)).await;
    expect_puback(
        &client,
        "aged.c",
        &[("Nats-TTL", "1h")],
        "x",
        &ack("AGED", 3),
    )
    .await;
    let state = wait_state(&client, "AGED", "max_age to pass", |state| {
        state["messages"] == 1
    })
    .await;
    assert_eq!(
        (&state["first_seq"], &state["last_seq"]),
        (&json!(1), &json!(3)),
        "{}: {state:#}",
        flavor.name()
    );
    let kept = api_ok(&client, "$JS.API.STREAM.MSG.GET.AGED", r#"{"seq":1}"#).await;
    assert_eq!(kept["message"]["subject"], "aged.a");
}
differential_cluster!(ttl_expires_messages_and_never_outlives_max_age);

async fn delete_marker_replaces_expired_last_message(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    let config = create(
        &client,
        json!({"name":"SDM","subjects":["sdm.>"],"subject_delete_marker_ttl":1_000_000_000u64}),
    )
    .await;
    // The marker TTL turns on message TTLs and rollups.
    assert_eq!(config["config"]["allow_msg_ttl"], true, "{config:#}");
    assert_eq!(config["config"]["allow_rollup_hdrs"], true, "{config:#}");

    expect_puback(&client, "sdm.k", &[("Nats-TTL", "1s")], "v", &ack("SDM", 1)).await;
    let state = wait_state(&client, "SDM", "the marker to replace sdm.k", |state| {
        state["last_seq"] == 2 && state["messages"] == 1
    })
    .await;
    assert_eq!(state["first_seq"], 2, "{}: {state:#}", flavor.name());
    let marker = api_ok(
        &client,
        "$JS.API.STREAM.MSG.GET.SDM",
        r#"{"last_by_subj":"sdm.k"}"#,
    )
    .await;
    assert_eq!(marker["message"]["seq"], 2, "{marker:#}");
    assert_eq!(
        marker["message"]["hdrs"],
        base64(
            b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 1s\r\nNats-Rollup: sub\r\n\r\n"
        ),
        "{}: {marker:#}",
        flavor.name()
    );
    assert!(marker["message"].get("data").is_none(), "{marker:#}");
    // The marker expires in its turn, leaving nothing behind.
    let state = wait_state(&client, "SDM", "the marker to expire", |state| {
        state["messages"] == 0
    })
    .await;
    assert_eq!(
        (&state["first_seq"], &state["last_seq"]),
        (&json!(3), &json!(2)),
        "{}: {state:#}",
        flavor.name()
    );
    // A subject with a newer message gets no marker.
    expect_puback(&client, "sdm.m", &[("Nats-TTL", "1s")], "v", &ack("SDM", 3)).await;
    expect_puback(&client, "sdm.m", &[], "w", &ack("SDM", 4)).await;
    let state = wait_state(&client, "SDM", "sdm.m's first message to expire", |state| {
        state["messages"] == 1
    })
    .await;
    assert_eq!(
        (&state["first_seq"], &state["last_seq"]),
        (&json!(4), &json!(4)),
        "{}: {state:#}",
        flavor.name()
    );
}
differential_cluster!(delete_marker_replaces_expired_last_message);

async fn low_ttl_is_raised_to_the_marker_ttl(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"RAISE","subjects":["raise.>"],"subject_delete_marker_ttl":60_000_000_000u64}),
    )
    .await;
    expect_puback(
        &client,
        "raise.k",
        &[("Nats-TTL", "2s"), ("X-Other", "y")],
        "v",
        &ack("RAISE", 1),
    )
    .await;
    let stored = api_ok(&client, "$JS.API.STREAM.MSG.GET.RAISE", r#"{"seq":1}"#).await;
    assert_eq!(
        stored["message"]["hdrs"],
        base64(b"NATS/1.0\r\nX-Other: y\r\nNats-TTL: 60\r\n\r\n"),
        "{}: {stored:#}",
        flavor.name()
    );
    // The stream's bytes count the rewritten headers.
    let info = api(&client, "$JS.API.STREAM.INFO.RAISE", "").await;
    let header_bytes = b"NATS/1.0\r\nX-Other: y\r\nNats-TTL: 60\r\n\r\n".len() as u64;
    assert_eq!(
        info["state"]["bytes"],
        json!(34 + "raise.k".len() as u64 + header_bytes + 1),
        "{}: {info:#}",
        flavor.name()
    );
}
differential_cluster!(low_ttl_is_raised_to_the_marker_ttl);

async fn ttls_survive_a_restart(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"KEEP","subjects":["keep.>"],"allow_msg_ttl":true,"max_age":2_000_000_000u64}),
    )
    .await;
    expect_puback(
        &client,
        "keep.a",
        &[("Nats-TTL", "never")],
        "x",
        &ack("KEEP", 1),
    )
    .await;
    expect_puback(
        &client,
        "keep.b",
        &[("Nats-TTL", "1s")],
        "x",
        &ack("KEEP", 2),
    )
    .await;
    expect_puback(&client, "keep.c", &[], "x", &ack("KEEP", 3)).await;
    drop(client);
    let server = server.restart();
    let client = server.connect().await;
    // After the restart the TTL still expires keep.b, max_age takes keep.c,
    // and keep.a never expires.
    let state = wait_state(&client, "KEEP", "TTL and max_age after restart", |state| {
        state["messages"] == 1
    })
    .await;
    assert_eq!(
        (&state["first_seq"], &state["last_seq"]),
        (&json!(1), &json!(3)),
        "{}: {state:#}",
        flavor.name()
    );
}
differential_cluster!(ttls_survive_a_restart);

async fn max_age_leaves_a_marker_too(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    create(
        &client,
        json!({"name":"AGEM","subjects":["agem.>"],"max_age":1_000_000_000u64,
               "subject_delete_marker_ttl":1_000_000_000u64}),
    )
    .await;
    expect_puback(&client, "agem.k", &[], "v", &ack("AGEM", 1)).await;
    let state = wait_state(&client, "AGEM", "the marker for agem.k", |state| {
        state["last_seq"] == 2
    })
    .await;
    assert!(
        state["messages"] == 1 || state["messages"] == 0,
        "{state:#}"
    );
    // Markers are not replaced by markers: the stream empties.
    let state = wait_state(&client, "AGEM", "the marker to go", |state| {
        state["messages"] == 0
    })
    .await;
    assert_eq!(
        (&state["first_seq"], &state["last_seq"]),
        (&json!(3), &json!(2)),
        "{}: {state:#}",
        flavor.name()
    );
}
differential_cluster!(max_age_leaves_a_marker_too);
