//! The NATS client protocol on raw TCP sockets, byte for byte, against both
//! tern-server and nats-server: the INFO line, CONNECT/PING/PONG, verbose and
//! pedantic modes, every client-visible `-ERR` (fatal and not), the closes
//! that happen without `-ERR`, reserved subjects and replies, the exact
//! no-responders 503 bytes, header delivery as HMSG/MSG, UNSUB with a maximum,
//! duplicate sids, case-insensitive operations, split writes, and isolation of
//! healthy connections from broken ones.
//!
//! Raw connections send CONNECT without `"protocol"` (protocol 0) so no async
//! INFO follows the first PONG and every byte can be asserted.

use crate::common;

use std::time::Duration;

use common::{text, Flavor, Options, RawClient, Server, TIMEOUT};

/// `verbose:false, pedantic:false`, headers and no_responders on.
const QUIET_CONNECT: &str =
    r#"{"verbose":false,"pedantic":false,"headers":true,"no_responders":true}"#;

/// Asserts the connection is closed after exactly `expected` bytes.
async fn assert_closed_after(raw: &mut RawClient, expected: &str, what: &str, flavor: Flavor) {
    let got = raw.expect_closed(TIMEOUT).await;
    assert_eq!(text(&got), expected, "{}: {what}", flavor.name());
}

/// Sends `bytes` then `PING`, and asserts exactly `expected` precedes (and includes) the PONG.
async fn assert_reply(raw: &mut RawClient, bytes: &str, expected: &str, flavor: Flavor) {
    raw.send(format!("{bytes}PING\r\n").as_bytes()).await;
    let got = raw.read_until(b"PONG\r\n", TIMEOUT).await;
    assert_eq!(
        text(&got),
        format!("{expected}PONG\r\n"),
        "{}: reply to {bytes:?}",
        flavor.name()
    );
}

async fn info_line(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = RawClient::connect(server.client_port()).await;
    let line = text(&raw.read_until(b"\r\n", TIMEOUT).await);
    assert!(line.starts_with("INFO {"), "{line:?}");
    assert!(
        line.ends_with("} \r\n"),
        "INFO ends with a space before CRLF: {line:?}"
    );
    let info: serde_json::Value =
        serde_json::from_str(&line["INFO ".len()..line.len() - 3]).expect("INFO JSON");
    let server_id = info["server_id"].as_str().expect("server_id");
    assert_eq!(server_id.len(), 56, "nkey-style server id: {server_id}");
    assert!(server_id.starts_with('N'), "{server_id}");
    assert!(info["server_name"].is_string());
    assert!(
        info["version"]
            .as_str()
            .expect("version")
            .starts_with("2.15."),
        "{info}"
    );
    assert_eq!(info["proto"], 1);
    assert_eq!(info["headers"], true);
    assert_eq!(info["max_payload"], 1024 * 1024);
    assert!(info["client_id"].as_u64().expect("client_id") > 0);
    assert_eq!(info["host"], "127.0.0.1");
    assert_eq!(info["port"].as_u64(), Some(u64::from(server.client_port())));
    assert!(info["go"].is_string());
    assert_eq!(info["client_ip"], "127.0.0.1");
    assert!(
        info.get("auth_required").is_none(),
        "no auth configured: {info}"
    );
    // Nothing else is sent before the client speaks.
    raw.expect_silence(Duration::from_millis(100)).await;
}
differential!(info_line);

async fn connect_ping_pong(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let (mut raw, _) = server.raw().await;
    raw.ignore_server_pings();
    raw.send(b"CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPING\r\n")
        .await;
    assert_eq!(
        text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    // PING with trailing text, LF-only line endings.
    raw.send(b"PING extra\r\nPING\n").await;
    assert_eq!(
        text(&raw.read_until(b"PONG\r\nPONG\r\n", TIMEOUT).await),
        "PONG\r\nPONG\r\n"
    );
    // The client may send INFO, +OK and PONG at any time: ignored.
    assert_reply(&mut raw, "INFO {}\r\n+OK\r\nPONG\r\n", "", flavor).await;
}
differential!(connect_ping_pong);

async fn connect_protocol_1_async_info(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let (mut raw, _) = server.raw().await;
    raw.ignore_server_pings();
    raw.send(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"protocol\":1}\r\nPING\r\n")
        .await;
    assert_eq!(
        text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    let info = raw.read_info().await;
    assert_eq!(info["connect_info"], true, "{info}");
    assert_eq!(info["remote_account"], "$G", "{info}");
    // Only after the first PONG.
    assert_reply(&mut raw, "", "", flavor).await;
}
differential!(connect_protocol_1_async_info);

async fn ping_before_connect(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let (mut raw, _) = server.raw().await;
    raw.send(b"PING\r\n").await;
    assert_eq!(
        text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
}
differential!(ping_before_connect);

async fn verbose_mode(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let (mut raw, _) = server.raw().await;
    raw.ignore_server_pings();
    raw.send(b"CONNECT {\"verbose\":true,\"pedantic\":false}\r\n")
        .await;
    assert_eq!(
        text(&raw.read_until(b"\r\n", TIMEOUT).await),
        "+OK\r\n",
        "{}: CONNECT",
        flavor.name()
    );
    raw.send(b"SUB verbose.a 1\r\n").await;
    assert_eq!(
        text(&raw.read_until(b"\r\n", TIMEOUT).await),
        "+OK\r\n",
        "{}: SUB",
        flavor.name()
    );
    raw.send(b"PUB verbose.a 2\r\nhi\r\n").await;
    assert_eq!(
        text(&raw.read_until(b"hi\r\n", TIMEOUT).await),
        "+OK\r\nMSG verbose.a 1 2\r\nhi\r\n",
        "{}: PUB",
        flavor.name()
    );
    raw.send(b"UNSUB 1\r\n").await;
    assert_eq!(
        text(&raw.read_until(b"\r\n", TIMEOUT).await),
        "+OK\r\n",
        "{}: UNSUB",
        flavor.name()
    );
    // No +OK for PING.
    raw.send(b"PING\r\n").await;
    assert_eq!(
        text(&raw.read_until(b"\r\n", TIMEOUT).await),
        "PONG\r\n",
        "{}: PING",
        flavor.name()
    );
    // Absent fields default to verbose (a CONNECT without "verbose" gets +OK).
    let (mut defaults, _) = server.raw().await;
    defaults.send(b"CONNECT {}\r\nPING\r\n").await;
    assert_eq!(
        text(&defaults.read_until(b"PONG\r\n", TIMEOUT).await),
        "+OK\r\nPONG\r\n"
    );
}
differential!(verbose_mode);

async fn pedantic_invalid_publish_subject(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server
        .raw_handshake(r#"{"verbose":false,"pedantic":true}"#)
        .await;
    assert_reply(&mut raw, "SUB pedantic.> 1\r\n", "", flavor).await;
    // Not fatal, and the message is still delivered (as a literal subject).
    assert_reply(
        &mut raw,
        "PUB pedantic.* 2\r\nhi\r\n",
        "-ERR 'Invalid Publish Subject'\r\nMSG pedantic.* 1 2\r\nhi\r\n",
        flavor,
    )
    .await;
    assert_reply(
        &mut raw,
        "PUB pedantic.ok 2\r\nok\r\n",
        "MSG pedantic.ok 1 2\r\nok\r\n",
        flavor,
    )
    .await;
    // Without pedantic, the same publish raises no error.
    let mut relaxed = server
        .raw_handshake(r#"{"verbose":false,"pedantic":false}"#)
        .await;
    assert_reply(&mut relaxed, "PUB pedantic.* 2\r\nhi\r\n", "", flavor).await;
    assert_eq!(
        text(&raw.read_until(b"hi\r\n", TIMEOUT).await),
        "MSG pedantic.* 1 2\r\nhi\r\n"
    );
}
differential!(pedantic_invalid_publish_subject);

async fn invalid_subject_on_sub(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(
        &mut raw,
        "SUB foo..bar 1\r\n",
        "-ERR 'Invalid Subject'\r\n",
        flavor,
    )
    .await;
    assert_reply(
        &mut raw,
        "SUB foo.>.bar 2\r\n",
        "-ERR 'Invalid Subject'\r\n",
        flavor,
    )
    .await;
    assert_reply(
        &mut raw,
        "SUB .foo 3\r\n",
        "-ERR 'Invalid Subject'\r\n",
        flavor,
    )
    .await;
    // The connection stays usable and the failed SUBs created nothing.
    assert_reply(
        &mut raw,
        "SUB foo.bar 4\r\nPUB foo.bar 1\r\nx\r\n",
        "MSG foo.bar 4 1\r\nx\r\n",
        flavor,
    )
    .await;
    // A published subject with an empty token matches nothing (no error without pedantic).
    assert_reply(
        &mut raw,
        "SUB foo.* 5\r\nPUB foo..bar 1\r\nx\r\n",
        "",
        flavor,
    )
    .await;
}
differential!(invalid_subject_on_sub);

async fn unknown_protocol_operation(flavor: Flavor) {
    let server = Server::default_for(flavor);
    for garbage in [
        "FOO\r\n",
        "MSG foo 1 1\r\nx\r\n",
        "HMSG foo 1 0 1\r\nx\r\n",
        "RS+ $G foo\r\n",
        "UNSUB\r\n",
    ] {
        let mut raw = server.raw_handshake(QUIET_CONNECT).await;
        raw.send(garbage.as_bytes()).await;
        assert_closed_after(
            &mut raw,
            "-ERR 'Unknown Protocol Operation'\r\n",
            &format!("after {garbage:?}"),
            flavor,
        )
        .await;
    }
    // Payload longer than announced: the trailing bytes are not CRLF.
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    raw.send(b"PUB foo 2\r\nhello\r\n").await;
    assert_closed_after(
        &mut raw,
        "-ERR 'Unknown Protocol Operation'\r\n",
        "payload too long",
        flavor,
    )
    .await;
}
differential!(unknown_protocol_operation);

async fn maximum_payload_violation(flavor: Flavor) {
    let server = Server::start(
        flavor,
        Options {
            max_payload: Some(1024),
            ..Options::default()
        },
    );
    let (mut raw, info) = server.raw().await;
    raw.ignore_server_pings();
    assert_eq!(info["max_payload"], 1024);
    raw.send(format!("CONNECT {QUIET_CONNECT}\r\nPING\r\n").as_bytes())
        .await;
    assert_eq!(
        text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    // Exactly max_payload is fine.
    let payload = "x".repeat(1024);
    assert_reply(
        &mut raw,
        &format!("SUB big 1\r\nPUB big 1024\r\n{payload}\r\n"),
        &format!("MSG big 1 1024\r\n{payload}\r\n"),
        flavor,
    )
    .await;
    // One byte more is refused on the control line, before any payload is sent.
    raw.send(b"PUB foo 2000\r\n").await;
    assert_closed_after(
        &mut raw,
        "-ERR 'Maximum Payload Violation'\r\n",
        "PUB foo 2000",
        flavor,
    )
    .await;
    // Header bytes count towards max_payload.
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    raw.send(b"HPUB foo 600 1025\r\n").await;
    assert_closed_after(
        &mut raw,
        "-ERR 'Maximum Payload Violation'\r\n",
        "HPUB foo 600 1025",
        flavor,
    )
    .await;
}
differential!(maximum_payload_violation);

async fn maximum_control_line_exceeded(flavor: Flavor) {
    let server = Server::start(
        flavor,
        Options {
            max_control_line: Some(512),
            ..Options::default()
        },
    );
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    let long_subject = format!("long.{}", "s".repeat(595));
    assert_eq!(long_subject.len(), 600);
    raw.send(format!("SUB {long_subject} 1\r\n").as_bytes())
        .await;
    assert_closed_after(
        &mut raw,
        "-ERR 'maximum control line exceeded'\r\n",
        "600-byte subject",
        flavor,
    )
    .await;
    // A line under the limit is fine.
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    let subject = format!("ok.{}", "s".repeat(400));
    assert_reply(
        &mut raw,
        &format!("SUB {subject} 1\r\nPUB {subject} 1\r\nx\r\n"),
        &format!("MSG {subject} 1 1\r\nx\r\n"),
        flavor,
    )
    .await;
}
differential!(maximum_control_line_exceeded);

async fn invalid_client_protocol(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let (mut raw, _) = server.raw().await;
    raw.send(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"protocol\":2}\r\nPING\r\n")
        .await;
    assert_closed_after(
        &mut raw,
        "-ERR 'invalid client protocol'\r\n",
        "protocol 2",
        flavor,
    )
    .await;
}
differential!(invalid_client_protocol);

async fn no_responders_requires_headers(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let (mut raw, _) = server.raw().await;
    raw.send(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"no_responders\":true,\"headers\":false}\r\nPING\r\n")
        .await;
    assert_closed_after(
        &mut raw,
        "-ERR 'no responders requires headers support'\r\n",
        "no_responders",
        flavor,
    )
    .await;
}
differential!(no_responders_requires_headers);

async fn authorization_violation_for_account(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let (mut raw, _) = server.raw().await;
    raw.send(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"account\":\"x\"}\r\nPING\r\n")
        .await;
    assert_closed_after(
        &mut raw,
        "-ERR 'Authorization Violation'\r\n",
        "account in CONNECT",
        flavor,
    )
    .await;
}
differential!(authorization_violation_for_account);

async fn bad_connect_json_closes_silently(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let (mut raw, _) = server.raw().await;
    raw.send(b"CONNECT {bad json\r\nPING\r\n").await;
    assert_closed_after(&mut raw, "", "bad CONNECT JSON", flavor).await;
}
differential!(bad_connect_json_closes_silently);

async fn connect_json_is_lenient(flavor: Flavor) {
    let server = Server::default_for(flavor);
    // Unknown fields ignored, null treated as absent (async-nats sends nulls).
    let mut raw = server
        .raw_handshake(r#"{"verbose":false,"pedantic":false,"jwt":null,"user":null,"future_field":{"a":[1,2]}}"#)
        .await;
    assert_reply(
        &mut raw,
        "SUB lenient 1\r\nPUB lenient 1\r\nx\r\n",
        "MSG lenient 1 1\r\nx\r\n",
        flavor,
    )
    .await;
}
differential!(connect_json_is_lenient);

async fn pub_argument_errors_close_silently(flavor: Flavor) {
    let server = Server::default_for(flavor);
    for bad in [
        "PUB foo\r\n",
        "PUB a b c d\r\n",
        "PUB foo bar\r\n",
        "PUB foo -1\r\n",
        "SUB foo\r\n",
        "SUB a b c d\r\n",
    ] {
        let mut raw = server.raw_handshake(QUIET_CONNECT).await;
        raw.send(bad.as_bytes()).await;
        assert_closed_after(&mut raw, "", &format!("{bad:?}"), flavor).await;
    }
}
differential!(pub_argument_errors_close_silently);

async fn hpub_without_headers_closes_silently(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server
        .raw_handshake(r#"{"verbose":false,"pedantic":false,"headers":false}"#)
        .await;
    raw.send(b"HPUB foo 12 14\r\nNATS/1.0\r\n\r\nhi\r\n").await;
    assert_closed_after(&mut raw, "", "HPUB without headers", flavor).await;
}
differential!(hpub_without_headers_closes_silently);

async fn hpub_header_size_larger_than_total_closes_silently(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    raw.send(b"HPUB foo 14 12\r\n").await;
    assert_closed_after(&mut raw, "", "HPUB hdr > total", flavor).await;
}
differential!(hpub_header_size_larger_than_total_closes_silently);

async fn reserved_publish_subject(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(&mut raw, "SUB _GR_.> 1\r\nSUB $NRG.> 2\r\n", "", flavor).await;
    // Refused, not fatal, not delivered (a delivery would precede the PONG).
    assert_reply(
        &mut raw,
        "PUB _GR_.x 2\r\nhi\r\n",
        "-ERR 'Permissions Violation for Publish to \"_GR_.x\"'\r\n",
        flavor,
    )
    .await;
    assert_reply(
        &mut raw,
        "PUB $NRG.y 2\r\nhi\r\n",
        "-ERR 'Permissions Violation for Publish to \"$NRG.y\"'\r\n",
        flavor,
    )
    .await;
}
differential!(reserved_publish_subject);

async fn reserved_reply_subject(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(&mut raw, "SUB foo 1\r\n", "", flavor).await;
    assert_reply(
        &mut raw,
        "PUB foo _R_.x 2\r\nhi\r\n",
        "-ERR 'Permissions Violation for Publish with Reply of \"_R_.x\"'\r\n",
        flavor,
    )
    .await;
    assert_reply(
        &mut raw,
        "PUB foo $JS.ACK.x 2\r\nhi\r\n",
        "-ERR 'Permissions Violation for Publish with Reply of \"$JS.ACK.x\"'\r\n",
        flavor,
    )
    .await;
    // An ordinary reply is delivered.
    assert_reply(
        &mut raw,
        "PUB foo my.reply 2\r\nhi\r\n",
        "MSG foo 1 my.reply 2\r\nhi\r\n",
        flavor,
    )
    .await;
}
differential!(reserved_reply_subject);

async fn no_responders_503_bytes(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    let subject = "nobody.listens.here";
    let length = 32 + subject.len();
    assert_reply(
        &mut raw,
        &format!("SUB inbox.abc 7\r\nPUB {subject} inbox.abc 2\r\nhi\r\n"),
        &format!("HMSG inbox.abc 7 {length} {length}\r\nNATS/1.0 503\r\nNats-Subject: {subject}\r\n\r\n\r\n"),
        flavor,
    )
    .await;
    // Without no_responders, nothing is sent back.
    let mut plain = server
        .raw_handshake(r#"{"verbose":false,"pedantic":false,"headers":true}"#)
        .await;
    assert_reply(
        &mut plain,
        &format!("SUB inbox.def 1\r\nPUB {subject} inbox.def 2\r\nhi\r\n"),
        "",
        flavor,
    )
    .await;
    // Without a subscription on the reply subject, nothing either.
    assert_reply(
        &mut raw,
        &format!("PUB {subject} inbox.none 2\r\nhi\r\n"),
        "",
        flavor,
    )
    .await;
}
differential!(no_responders_503_bytes);

async fn hpub_with_empty_header_is_delivered_as_msg(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(
        &mut raw,
        "SUB h0 1\r\nHPUB h0 0 2\r\nhi\r\n",
        "MSG h0 1 2\r\nhi\r\n",
        flavor,
    )
    .await;
    assert_reply(
        &mut raw,
        "HPUB h0 reply.to 0 2\r\nhi\r\n",
        "MSG h0 1 reply.to 2\r\nhi\r\n",
        flavor,
    )
    .await;
}
differential!(hpub_with_empty_header_is_delivered_as_msg);

async fn headers_delivery(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut without = server
        .raw_handshake(r#"{"verbose":false,"pedantic":false,"headers":false}"#)
        .await;
    assert_reply(&mut without, "SUB hs 1\r\n", "", flavor).await;
    let mut with = server.raw_handshake(QUIET_CONNECT).await;
    let header = "NATS/1.0\r\nA: b\r\nA: c\r\n\r\n";
    assert_eq!(header.len(), 24);
    // The header-aware publisher gets HMSG with the header block as sent.
    assert_reply(
        &mut with,
        &format!("SUB hs 9\r\nHPUB hs 24 26\r\n{header}hi\r\n"),
        &format!("HMSG hs 9 24 26\r\n{header}hi\r\n"),
        flavor,
    )
    .await;
    // The connection without headers gets MSG with the header block removed.
    assert_eq!(
        text(&without.read_until(b"hi\r\n", TIMEOUT).await),
        "MSG hs 1 2\r\nhi\r\n"
    );
    // With a reply subject too.
    assert_reply(
        &mut with,
        &format!("HPUB hs re.ply 24 26\r\n{header}hi\r\n"),
        &format!("HMSG hs 9 re.ply 24 26\r\n{header}hi\r\n"),
        flavor,
    )
    .await;
    assert_eq!(
        text(&without.read_until(b"hi\r\n", TIMEOUT).await),
        "MSG hs 1 re.ply 2\r\nhi\r\n"
    );
}
differential!(headers_delivery);

async fn unsub_with_maximum(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(
        &mut raw,
        "SUB u 1\r\nUNSUB 1 2\r\nPUB u 1\r\na\r\nPUB u 1\r\nb\r\nPUB u 1\r\nc\r\n",
        "MSG u 1 1\r\na\r\nMSG u 1 1\r\nb\r\n",
        flavor,
    )
    .await;
    assert_reply(&mut raw, "PUB u 1\r\nd\r\n", "", flavor).await;
    // A maximum already reached removes the subscription at once.
    assert_reply(
        &mut raw,
        "SUB v 2\r\nPUB v 1\r\na\r\n",
        "MSG v 2 1\r\na\r\n",
        flavor,
    )
    .await;
    assert_reply(&mut raw, "UNSUB 2 1\r\nPUB v 1\r\nb\r\n", "", flavor).await;
    // Plain UNSUB, and UNSUB of an unknown sid (no error).
    assert_reply(
        &mut raw,
        "SUB w 3\r\nUNSUB 3\r\nPUB w 1\r\na\r\nUNSUB 99\r\n",
        "",
        flavor,
    )
    .await;
    // sid 0 is valid.
    assert_reply(
        &mut raw,
        "SUB z 0\r\nPUB z 1\r\na\r\n",
        "MSG z 0 1\r\na\r\n",
        flavor,
    )
    .await;
}
differential!(unsub_with_maximum);

async fn duplicate_sid_is_ignored(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(
        &mut raw,
        "SUB d1 1\r\nSUB d2 1\r\nPUB d2 1\r\nx\r\nPUB d1 1\r\ny\r\n",
        "MSG d1 1 1\r\ny\r\n",
        flavor,
    )
    .await;
}
differential!(duplicate_sid_is_ignored);

async fn case_insensitive_operations(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let (mut raw, _) = server.raw().await;
    raw.ignore_server_pings();
    raw.send(b"connect {\"verbose\":false,\"pedantic\":false,\"headers\":true}\r\nping\r\n")
        .await;
    assert_eq!(
        text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    assert_reply(
        &mut raw,
        "sub ci 1\r\npub ci 2\r\nhi\r\n",
        "MSG ci 1 2\r\nhi\r\n",
        flavor,
    )
    .await;
    assert_reply(
        &mut raw,
        "Sub ci.x 2\r\nPuB ci.x 2\r\nhi\r\n",
        "MSG ci.x 2 2\r\nhi\r\n",
        flavor,
    )
    .await;
    assert_reply(
        &mut raw,
        "hpub ci 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
        "HMSG ci 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
        flavor,
    )
    .await;
    assert_reply(&mut raw, "unsub 1\r\nPUB ci 1\r\nx\r\n", "", flavor).await;
    // Tabs and repeated blanks separate arguments.
    assert_reply(
        &mut raw,
        "SUB\tci.t \t 3\r\nPUB  ci.t\t1\r\nx\r\n",
        "MSG ci.t 3 1\r\nx\r\n",
        flavor,
    )
    .await;
    raw.send(b"Ping\r\n").await;
    assert_eq!(
        text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
}
differential!(case_insensitive_operations);

async fn split_writes(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(&mut raw, "SUB split 1\r\n", "", flavor).await;
    let operations = b"PUB split 5\r\nhello\r\nHPUB split 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n";
    for byte in operations {
        raw.send(std::slice::from_ref(byte)).await;
        tokio::task::yield_now().await;
    }
    assert_eq!(
        text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
        "MSG split 1 5\r\nhello\r\nHMSG split 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPONG\r\n"
    );
    // Many operations in one write.
    let mut batch = String::new();
    let mut expected = String::new();
    for index in 0..500 {
        batch.push_str(&format!(
            "PUB split {}\r\n{index}\r\n",
            index.to_string().len()
        ));
        expected.push_str(&format!(
            "MSG split 1 {}\r\n{index}\r\n",
            index.to_string().len()
        ));
    }
    assert_reply(&mut raw, &batch, &expected, flavor).await;
}
differential!(split_writes);

/// A fresh healthy connection pub/subs, and reaches the long-lived `watcher`.
async fn assert_healthy(server: &Server, watcher: &mut RawClient, round: &str, flavor: Flavor) {
    let mut fresh = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(
        &mut fresh,
        &format!(
            "SUB healthy.{round} 1\r\nPUB healthy.{round} 2\r\nok\r\nPUB watch {}\r\n{round}\r\n",
            round.len()
        ),
        &format!("MSG healthy.{round} 1 2\r\nok\r\n"),
        flavor,
    )
    .await;
    let got = watcher
        .read_until(format!("{round}\r\n").as_bytes(), TIMEOUT)
        .await;
    assert_eq!(
        text(&got),
        format!("MSG watch 1 {}\r\n{round}\r\n", round.len()),
        "{}: after {round}",
        flavor.name()
    );
}

async fn bad_connections_do_not_affect_others(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut watcher = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(&mut watcher, "SUB watch 1\r\n", "", flavor).await;
    assert_healthy(&server, &mut watcher, "start", flavor).await;

    // Binary garbage: refused and closed.
    let (mut garbage, _) = server.raw().await;
    garbage
        .send(&[0x00, 0xff, 0xfe, 0x13, 0x37, b'\r', b'\n', 0x80, 0x81])
        .await;
    garbage.expect_closed(TIMEOUT).await;
    assert_healthy(&server, &mut watcher, "garbage", flavor).await;

    // Garbage after a valid CONNECT.
    let mut after_connect = server.raw_handshake(QUIET_CONNECT).await;
    after_connect.send(b"\x01\x02\x03 nonsense\r\n").await;
    after_connect.expect_closed(TIMEOUT).await;
    assert_healthy(&server, &mut watcher, "garbage_after_connect", flavor).await;

    // Half-open: an operation cut off mid-payload, the connection left open.
    let mut half_payload = server.raw_handshake(QUIET_CONNECT).await;
    half_payload.send(b"PUB watch 100\r\nabc").await;
    assert_healthy(&server, &mut watcher, "half_payload", flavor).await;

    // Half-open: a control line without its end, left open.
    let mut half_line = server.raw_handshake(QUIET_CONNECT).await;
    half_line.send(b"SUB watch 77").await;
    assert_healthy(&server, &mut watcher, "half_line", flavor).await;

    // Connected, never says anything (INFO not read).
    let _silent = RawClient::connect(server.client_port()).await;
    assert_healthy(&server, &mut watcher, "silent", flavor).await;

    // Write side shut down mid-operation.
    let mut shut = server.raw_handshake(QUIET_CONNECT).await;
    shut.send(b"PUB watch 10\r\nabc").await;
    tokio::io::AsyncWriteExt::shutdown(shut.stream())
        .await
        .unwrap();
    shut.expect_closed(TIMEOUT).await;
    assert_healthy(&server, &mut watcher, "shutdown", flavor).await;

    // Reset (linger 0) right after connecting, INFO unread.
    {
        let reset = RawClient::connect(server.client_port()).await;
        let mut reset = reset;
        #[allow(deprecated)]
        reset.stream().set_linger(Some(Duration::ZERO)).unwrap();
        reset
            .send(b"CONNECT {}\r\nSUB watch 5\r\nPUB watch 3\r\n")
            .await;
    }
    assert_healthy(&server, &mut watcher, "reset", flavor).await;

    // Fatal errors on other connections.
    let mut fatal = server.raw_handshake(QUIET_CONNECT).await;
    fatal.send(b"PUB foo 99999999\r\n").await;
    fatal.expect_closed(TIMEOUT).await;
    assert_healthy(&server, &mut watcher, "fatal", flavor).await;

    // The half-open ones are still open (the server waits for the rest) and
    // nothing leaked from them to the watcher.
    half_payload.expect_silence(Duration::from_millis(50)).await;
    half_line.expect_silence(Duration::from_millis(50)).await;
    // A last marker through the watcher's subscription: nothing came before it.
    assert_healthy(&server, &mut watcher, "end", flavor).await;
}
differential!(bad_connections_do_not_affect_others);

async fn control_line_limit_boundary(flavor: Flavor) {
    let server = Server::start(
        flavor,
        Options {
            max_control_line: Some(512),
            ..Options::default()
        },
    );
    // The limit counts the arguments (after "SUB "): 512 is fine, 513 is not.
    let at_limit = format!("b.{} 1", "s".repeat(508));
    assert_eq!(at_limit.len(), 512);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(&mut raw, &format!("SUB {at_limit}\r\n"), "", flavor).await;
    let over = format!("b.{} 1", "s".repeat(509));
    raw.send(format!("SUB {over}\r\n").as_bytes()).await;
    assert_closed_after(
        &mut raw,
        "-ERR 'maximum control line exceeded'\r\n",
        "513-byte arguments",
        flavor,
    )
    .await;
    // A line that never ends is cut off once it passes the limit.
    let mut endless = server.raw_handshake(QUIET_CONNECT).await;
    endless
        .send(format!("SUB {}", "e".repeat(2000)).as_bytes())
        .await;
    assert_closed_after(
        &mut endless,
        "-ERR 'maximum control line exceeded'\r\n",
        "unterminated line",
        flavor,
    )
    .await;
    // CONNECT counts too.
    let (mut connect, _) = server.raw().await;
    connect
        .send(
            format!(
                "CONNECT {{\"verbose\":false,\"name\":\"{}\"}}\r\n",
                "n".repeat(600)
            )
            .as_bytes(),
        )
        .await;
    assert_closed_after(
        &mut connect,
        "-ERR 'maximum control line exceeded'\r\n",
        "long CONNECT",
        flavor,
    )
    .await;
}
differential!(control_line_limit_boundary);

async fn verbose_and_pedantic_together(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let (mut raw, _) = server.raw().await;
    raw.ignore_server_pings();
    raw.send(b"CONNECT {\"verbose\":true,\"pedantic\":true}\r\n")
        .await;
    assert_eq!(text(&raw.read_until(b"\r\n", TIMEOUT).await), "+OK\r\n");
    assert_reply(&mut raw, "SUB vp.> 1\r\n", "+OK\r\n", flavor).await;
    assert_reply(
        &mut raw,
        "PUB vp.* 1\r\nx\r\n",
        "-ERR 'Invalid Publish Subject'\r\n+OK\r\nMSG vp.* 1 1\r\nx\r\n",
        flavor,
    )
    .await;
    // Refused publishes get no +OK; errors on SUB none either.
    assert_reply(
        &mut raw,
        "PUB _GR_.x 1\r\nx\r\n",
        "-ERR 'Permissions Violation for Publish to \"_GR_.x\"'\r\n",
        flavor,
    )
    .await;
    assert_reply(
        &mut raw,
        "SUB bad..subject 2\r\n",
        "-ERR 'Invalid Subject'\r\n",
        flavor,
    )
    .await;
    // UNSUB of an unknown sid is acknowledged.
    assert_reply(&mut raw, "UNSUB 42\r\n", "+OK\r\n", flavor).await;
}
differential!(verbose_and_pedantic_together);

async fn client_err_closes_silently(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    raw.send(b"-ERR 'something'\r\n").await;
    assert_closed_after(&mut raw, "", "-ERR from the client", flavor).await;
}
differential!(client_err_closes_silently);

async fn queue_and_plain_on_one_connection(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    // One copy per plain subscription, one per queue group.
    raw.send(b"SUB qp 1\r\nSUB qp g 2\r\nSUB qp.* 3\r\nSUB qp g 4\r\nSUB > 5\r\nPUB qp 1\r\nx\r\nPING\r\n").await;
    let got = text(&raw.read_until(b"PONG\r\n", TIMEOUT).await);
    let mut lines: Vec<&str> = got
        .split("\r\n")
        .filter(|line| line.starts_with("MSG"))
        .collect();
    lines.sort();
    assert_eq!(lines.len(), 3, "{}: {got:?}", flavor.name());
    assert_eq!(lines[0], "MSG qp 1 1");
    assert!(
        lines[1] == "MSG qp 2 1" || lines[1] == "MSG qp 4 1",
        "{got:?}"
    );
    assert_eq!(lines[2], "MSG qp 5 1");
    // A request answered only by a queue group gets no 503.
    let mut requester = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(
        &mut requester,
        "SUB reply.box 1\r\nPUB qp reply.box 1\r\ny\r\n",
        "",
        flavor,
    )
    .await;
}
differential!(queue_and_plain_on_one_connection);

async fn max_subscriptions_and_duplicate_sid(flavor: Flavor) {
    let server = Server::start(
        flavor,
        Options {
            max_subscriptions: Some(2),
            ..Options::default()
        },
    );
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(&mut raw, "SUB a 1\r\nSUB b 2\r\n", "", flavor).await;
    // At the limit, a SUB reusing an existing sid is refused by the limit
    // check (nats-server checks the limit first) and changes nothing.
    assert_reply(
        &mut raw,
        "SUB c 1\r\n",
        "-ERR 'maximum subscriptions exceeded'\r\n",
        flavor,
    )
    .await;
    assert_reply(
        &mut raw,
        "PUB a 1\r\nx\r\nPUB c 1\r\ny\r\n",
        "MSG a 1 1\r\nx\r\n",
        flavor,
    )
    .await;
}
differential!(max_subscriptions_and_duplicate_sid);

async fn client_status_headers_pass_through(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    let header = "NATS/1.0 503 Custom\r\nK: v\r\n\r\n";
    let total = header.len() + 2;
    assert_reply(
        &mut raw,
        &format!(
            "SUB st 1\r\nHPUB st {} {total}\r\n{header}ok\r\n",
            header.len()
        ),
        &format!("HMSG st 1 {} {total}\r\n{header}ok\r\n", header.len()),
        flavor,
    )
    .await;
}
differential!(client_status_headers_pass_through);

async fn large_payloads(flavor: Flavor) {
    const MIB: usize = 1024 * 1024;
    let server = Server::default_for(flavor);
    let mut subscriber = server.raw_handshake(QUIET_CONNECT).await;
    assert_reply(&mut subscriber, "SUB large 1\r\n", "", flavor).await;
    let mut publisher = server.raw_handshake(QUIET_CONNECT).await;
    // Three maximum-size messages, a small one and a header message at the
    // limit, all in one write.
    let payloads: Vec<Vec<u8>> = (0..3u8).map(|fill| vec![b'a' + fill; MIB]).collect();
    let header = "NATS/1.0\r\nBig: yes\r\n\r\n";
    let header_payload = vec![b'h'; MIB - header.len()];
    let mut batch = Vec::new();
    let mut expected = Vec::new();
    for payload in &payloads {
        batch.extend_from_slice(format!("PUB large {MIB}\r\n").as_bytes());
        batch.extend_from_slice(payload);
        batch.extend_from_slice(b"\r\n");
        expected.extend_from_slice(format!("MSG large 1 {MIB}\r\n").as_bytes());
        expected.extend_from_slice(payload);
        expected.extend_from_slice(b"\r\n");
    }
    batch.extend_from_slice(b"PUB large 5\r\nsmall\r\n");
    expected.extend_from_slice(b"MSG large 1 5\r\nsmall\r\n");
    batch.extend_from_slice(format!("HPUB large {} {MIB}\r\n{header}", header.len()).as_bytes());
    batch.extend_from_slice(&header_payload);
    batch.extend_from_slice(b"\r\nPING\r\n");
    expected
        .extend_from_slice(format!("HMSG large 1 {} {MIB}\r\n{header}", header.len()).as_bytes());
    expected.extend_from_slice(&header_payload);
    expected.extend_from_slice(b"\r\n");
    let sending = tokio::spawn(async move {
        publisher.send(&batch).await;
        assert_eq!(
            text(&publisher.read_until(b"PONG\r\n", TIMEOUT).await),
            "PONG\r\n"
        );
        publisher
    });
    let got = subscriber.read_exact_bytes(expected.len(), TIMEOUT).await;
    assert!(
        got == expected,
        "{}: large deliveries differ (got {} bytes)",
        flavor.name(),
        got.len()
    );
    sending.await.unwrap();
    subscriber.expect_silence(Duration::from_millis(100)).await;
}
differential!(large_payloads);

async fn first_server_ping_after_about_two_seconds(flavor: Flavor) {
    let server = Server::default_for(flavor);
    let (mut raw, _) = server.raw().await;
    let started = std::time::Instant::now();
    raw.send(b"CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPING\r\n")
        .await;
    assert_eq!(
        text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    // The RTT-measuring PING comes ~2 s (+ up to 20 %) after connecting.
    assert_eq!(
        text(&raw.read_until(b"\r\n", Duration::from_secs(5)).await),
        "PING\r\n",
        "{}",
        flavor.name()
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1500) && elapsed < Duration::from_secs(4),
        "{}: first PING after {elapsed:?}",
        flavor.name()
    );
    raw.send(b"PONG\r\n").await;
    assert_reply(
        &mut raw,
        "SUB alive 1\r\nPUB alive 1\r\nx\r\n",
        "MSG alive 1 1\r\nx\r\n",
        flavor,
    )
    .await;
}
differential!(first_server_ping_after_about_two_seconds);
