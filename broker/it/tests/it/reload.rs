//! SIGHUP configuration reload against the real servers, tern and
//! nats-server 2.15.1 with the same settings: users added and removed,
//! a changed password, permissions narrowed under existing subscriptions
//! and publishers, a broken file that changes nothing, a new TLS
//! certificate for new connections; and (tern only) options that cannot
//! change at runtime keeping their values. Each test
//! rewrites its server's config file and sends SIGHUP by PID; every wait
//! is for something a client sees (a login that starts working, an -ERR,
//! a close), bounded.

use std::time::{Duration, Instant};

use crate::common::tls::{Pki, TlsSettings};
use crate::common::{text, Flavor, Options, RawClient, ReadError, Server, TIMEOUT};

const VIOLATION: &str = "-ERR 'Authorization Violation'\r\n";
const QUIET: &str = r#""verbose":false,"pedantic":false"#;

/// Options with an authorization block for each server.
fn options(tern: &str, nats: &str) -> Options {
    Options {
        tern_config: format!("[authorization]\n{tern}\n"),
        nats_config: format!("authorization {{\n{nats}\n}}\n"),
        ..Options::default()
    }
}

fn connect_line(name: &str, password: &str) -> String {
    format!("CONNECT {{{QUIET},\"user\":\"{name}\",\"pass\":\"{password}\"}}\r\nPING\r\n")
}

/// A raw connection logged in as `name`, after PING/PONG.
async fn raw_as(server: &Server, name: &str, password: &str) -> RawClient {
    server
        .raw_handshake(&format!(
            "{{{QUIET},\"user\":\"{name}\",\"pass\":\"{password}\"}}"
        ))
        .await
}

/// One login attempt: `Ok` with the connection if PONG came, `Err` with
/// what the server sent before closing.
async fn try_login(server: &Server, name: &str, password: &str) -> Result<RawClient, String> {
    let (mut raw, _) = server.raw().await;
    raw.ignore_server_pings();
    raw.send(connect_line(name, password).as_bytes()).await;
    match raw.try_read_until(b"PONG\r\n", TIMEOUT).await {
        Ok(got) => {
            assert_eq!(text(&got), "PONG\r\n", "{}", server.flavor.name());
            Ok(raw)
        }
        Err(ReadError::Closed) => Err(text(raw.buffered())),
        Err(ReadError::Timeout) => panic!("{}: no answer to CONNECT", server.flavor.name()),
    }
}

/// Logs in again and again until `name` is accepted (the reload reached
/// the shard the connection landed on), within `TIMEOUT`.
async fn wait_until_accepted(server: &Server, name: &str, password: &str) -> RawClient {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match try_login(server, name, password).await {
            Ok(raw) => return raw,
            Err(got) => {
                assert_eq!(got, VIOLATION, "{}", server.flavor.name());
                assert!(
                    Instant::now() < deadline,
                    "{}: {name} not accepted within {TIMEOUT:?}; log:\n{}",
                    server.flavor.name(),
                    server.log_tail()
                );
            }
        }
    }
}

/// Sends `operations` and a PING; returns what came before the PONG.
async fn exchange(raw: &mut RawClient, operations: &str) -> String {
    raw.send(format!("{operations}PING\r\n").as_bytes()).await;
    let got = text(&raw.read_until(b"PONG\r\n", TIMEOUT).await);
    got.strip_suffix("PONG\r\n").unwrap_or(&got).to_string()
}

/// A user added by a reload logs in; a removed user's connection is
/// closed without a word (nats-server: "Client Closed"); a user whose
/// password changed gets `Authorization Violation` and is closed; old
/// credentials no longer work; `/varz` `config_load_time` moves.
async fn users_added_removed_and_changed(flavor: Flavor) {
    let mut server = Server::start(
        flavor,
        options(
            r#"users = [ { user = "ann", password = "ann-pw" }, { user = "bob", password = "bob-pw" } ]"#,
            r#"users = [ {user: ann, password: "ann-pw"}, {user: bob, password: "bob-pw"} ]"#,
        ),
    );
    let loaded_at_start = server.varz()["config_load_time"].clone();
    assert!(loaded_at_start.is_string(), "{loaded_at_start}");
    let mut ann = raw_as(&server, "ann", "ann-pw").await;
    let mut bob = raw_as(&server, "bob", "bob-pw").await;
    assert_eq!(
        try_login(&server, "cat", "cat-pw").await.err().as_deref(),
        Some(VIOLATION)
    );
    server.reload_with(options(
        r#"users = [ { user = "bob", password = "bob-new" }, { user = "cat", password = "cat-pw" } ]"#,
        r#"users = [ {user: bob, password: "bob-new"}, {user: cat, password: "cat-pw"} ]"#,
    ));
    let mut cat = wait_until_accepted(&server, "cat", "cat-pw").await;
    assert_eq!(exchange(&mut cat, "SUB cat.> 1\r\n").await, "");
    assert_eq!(
        text(&ann.expect_closed(TIMEOUT).await),
        "",
        "ann was removed"
    );
    assert_eq!(
        text(&bob.expect_closed(TIMEOUT).await),
        VIOLATION,
        "bob's password changed"
    );
    for (name, password) in [("ann", "ann-pw"), ("bob", "bob-pw")] {
        assert_eq!(
            try_login(&server, name, password).await.err().as_deref(),
            Some(VIOLATION),
            "{name}"
        );
    }
    drop(wait_until_accepted(&server, "bob", "bob-new").await);
    let loaded = server.varz()["config_load_time"].clone();
    assert_ne!(loaded, loaded_at_start, "config_load_time after the reload");
    server
        .wait_log("Reloaded server configuration", TIMEOUT)
        .await;
}
differential!(users_added_removed_and_changed);

/// Narrowed permissions: subscriptions the new rules refuse are removed
/// with nats-server's `-ERR … (sid "…")` (plain and queue forms) and
/// receive nothing more, the connection stays, the subscription still
/// allowed keeps receiving, and a publish the new rules deny is refused
/// and not delivered.
async fn permissions_narrowed(flavor: Flavor) {
    let wide = options(
        r#"users = [
  { user = "admin", password = "admin-pw" },
  { user = "bob", password = "bob-pw", permissions = { publish = ["x.>", "q.>"], subscribe = ["x.>", "q.>"] } },
]"#,
        r#"users = [
  {user: admin, password: "admin-pw"}
  {user: bob, password: "bob-pw", permissions: {publish: ["x.>", "q.>"], subscribe: ["x.>", "q.>"]}}
]"#,
    );
    let narrow = options(
        r#"users = [
  { user = "admin", password = "admin-pw" },
  { user = "bob", password = "bob-pw", permissions = { publish = ["x.>"], subscribe = ["x.>"] } },
]"#,
        r#"users = [
  {user: admin, password: "admin-pw"}
  {user: bob, password: "bob-pw", permissions: {publish: ["x.>"], subscribe: ["x.>"]}}
]"#,
    );
    let mut server = Server::start(flavor, wide);
    let mut bob = raw_as(&server, "bob", "bob-pw").await;
    assert_eq!(
        exchange(&mut bob, "SUB x.1 1\r\nSUB q.1 workers 2\r\nSUB q.2 3\r\n").await,
        ""
    );
    let mut admin = raw_as(&server, "admin", "admin-pw").await;
    assert_eq!(exchange(&mut admin, "SUB q.9 1\r\nSUB x.2 2\r\n").await, "");
    server.reload_with(narrow);
    // Both removals come, in the order the server walks its map.
    let queue_removed =
        "-ERR 'Permissions Violation for Subscription to \"q.1\" using queue \"workers\" (sid \"2\")'\r\n";
    let plain_removed = "-ERR 'Permissions Violation for Subscription to \"q.2\" (sid \"3\")'\r\n";
    let mut removed = text(&bob.read_until(b"(sid \"", TIMEOUT).await);
    removed.push_str(&text(&bob.read_until(b"\r\n", TIMEOUT).await));
    let other = if removed == queue_removed {
        plain_removed
    } else {
        queue_removed
    };
    assert!(
        removed == queue_removed || removed == plain_removed,
        "{}: {removed:?}",
        flavor.name()
    );
    assert_eq!(
        text(&bob.read_until(b"\r\n", TIMEOUT).await),
        other,
        "{}",
        flavor.name()
    );
    // The removed subscriptions receive nothing; the one still allowed
    // does (the same publisher, in order: q.* first).
    assert_eq!(
        exchange(
            &mut admin,
            "PUB q.1 9\r\nq1-denied\r\nPUB q.2 9\r\nq2-denied\r\nPUB x.1 10\r\nx1-allowed\r\n"
        )
        .await,
        ""
    );
    let got = text(&bob.read_until(b"x1-allowed\r\n", TIMEOUT).await);
    assert_eq!(got, "MSG x.1 1 10\r\nx1-allowed\r\n", "{}", flavor.name());
    // Publishing: q.9 is now denied and not delivered, x.2 still allowed.
    assert_eq!(
        exchange(
            &mut bob,
            "PUB q.9 9\r\nq9-denied\r\nPUB x.2 10\r\nx2-allowed\r\n"
        )
        .await,
        "-ERR 'Permissions Violation for Publish to \"q.9\"'\r\n",
        "{}",
        flavor.name()
    );
    let got = text(&admin.read_until(b"x2-allowed\r\n", TIMEOUT).await);
    assert_eq!(got, "MSG x.2 2 10\r\nx2-allowed\r\n", "{}", flavor.name());
    // A new subscription is judged by the new rules too.
    assert_eq!(
        exchange(&mut bob, "SUB q.3 4\r\n").await,
        "-ERR 'Permissions Violation for Subscription to \"q.3\"'\r\n"
    );
}
differential!(permissions_narrowed);

/// A file that does not parse changes nothing: the server keeps running on
/// what it had, old credentials still log in, connections stay; a later
/// good file is applied.
async fn broken_file_keeps_the_running_config(flavor: Flavor) {
    let mut server = Server::start(
        flavor,
        options(
            r#"users = [ { user = "ann", password = "ann-pw" } ]"#,
            r#"users = [ {user: ann, password: "ann-pw"} ]"#,
        ),
    );
    let mut ann = raw_as(&server, "ann", "ann-pw").await;
    server.reload_with_text("authorization = [ this is not a config\n");
    server
        .wait_log("Failed to reload server configuration", TIMEOUT)
        .await;
    assert!(server.is_running(), "{}", flavor.name());
    assert_eq!(exchange(&mut ann, "SUB a.1 1\r\n").await, "");
    drop(
        try_login(&server, "ann", "ann-pw")
            .await
            .expect("old credentials"),
    );
    server.reload_with(options(
        r#"users = [ { user = "ann", password = "ann-pw" }, { user = "cat", password = "cat-pw" } ]"#,
        r#"users = [ {user: ann, password: "ann-pw"}, {user: cat, password: "cat-pw"} ]"#,
    ));
    drop(wait_until_accepted(&server, "cat", "cat-pw").await);
    assert_eq!(exchange(&mut ann, "").await, "", "ann is unchanged");
    // Nothing more came to ann meanwhile.
    ann.expect_silence(Duration::from_millis(100)).await;
}
differential!(broken_file_keeps_the_running_config);

/// async-nats `connect` under `TIMEOUT`: the client or the error's text.
async fn try_connect(
    server: &Server,
    options: async_nats::ConnectOptions,
) -> Result<async_nats::Client, String> {
    match tokio::time::timeout(TIMEOUT, options.connect(server.url())).await {
        Ok(outcome) => outcome.map_err(|error| format!("{error} ({error:?})")),
        Err(_) => panic!("{}: connect hung", server.flavor.name()),
    }
}

/// A new certificate (from another CA) serves new connections after the
/// reload; a client trusting only the old CA is refused from then on; a
/// connection made before keeps working.
async fn tls_certificate_replaced(flavor: Flavor) {
    let first = Pki::generate();
    let second = Pki::generate();
    let mut server = Server::start(flavor, first.options(TlsSettings::default()));
    let before = try_connect(&server, first.client_options())
        .await
        .expect("the first certificate");
    server.reload_with(second.options(TlsSettings::default()));
    let deadline = Instant::now() + TIMEOUT;
    let after = loop {
        match try_connect(&server, second.client_options()).await {
            Ok(client) => break client,
            Err(error) => assert!(
                Instant::now() < deadline,
                "{}: the second certificate not served within {TIMEOUT:?}: {error}",
                flavor.name()
            ),
        }
    };
    let error = match try_connect(&server, first.client_options()).await {
        Ok(_) => panic!("{}: the old CA still matches", flavor.name()),
        Err(error) => error,
    };
    assert!(
        error.to_lowercase().contains("certificate"),
        "{}: {error}",
        flavor.name()
    );
    let mut subscriber = after.subscribe("tls.reload").await.unwrap();
    crate::common::sync_interest(&after, &before).await;
    before
        .publish("tls.reload", "old connection".into())
        .await
        .unwrap();
    before.flush().await.unwrap();
    let message = crate::common::next_message(&mut subscriber, TIMEOUT).await;
    assert_eq!(&message.payload[..], b"old connection");
}
differential!(tls_certificate_replaced);

/// Options that cannot change while the server runs keep their running
/// values and are named in a warning; the rest of the file applies.
/// (nats-server refuses the whole reload for some of them: tern only.)
async fn fixed_options_keep_their_values() {
    let mut server = Server::start(
        Flavor::Tern,
        Options {
            max_payload: Some(4096),
            ..options(r#"users = [ { user = "ann", password = "ann-pw" } ]"#, "")
        },
    );
    server.reload_with(Options {
        max_payload: Some(8192),
        ..options(
            r#"users = [ { user = "ann", password = "ann-pw" }, { user = "cat", password = "cat-pw" } ]"#,
            "",
        )
    });
    let mut cat = wait_until_accepted(&server, "cat", "cat-pw").await;
    server
        .wait_log(
            "Reload: max_payload cannot change while the server runs; keeping the running value",
            TIMEOUT,
        )
        .await;
    let (_, info) = server.raw().await;
    assert_eq!(info["max_payload"], serde_json::json!(4096));
    assert_eq!(server.varz()["max_payload"], serde_json::json!(4096));
    assert_eq!(exchange(&mut cat, "SUB fixed.1 1\r\n").await, "");
}
tern_only!(fixed_options_keep_their_values);
