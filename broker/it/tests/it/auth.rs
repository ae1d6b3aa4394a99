//! Authentication and permissions against the real servers, tern and
//! nats-server 2.15.1 with the same settings (tern's TOML next to
//! nats-server's config): token, users with plain and bcrypt passwords,
//! NKeys from a seed file, each refusal's exact bytes (wrong credentials,
//! a bad signature, no CONNECT in time, an operation before CONNECT), and
//! per-user permissions on publish, subscribe, responses, the JetStream API
//! and consumer acks, with denied publishes shown not delivered or stored.
//!
//! Servers run with short auth timeouts; each test starts one server.

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::json;

use crate::common::{self, js, text, Flavor, Options, RawClient, Server, TIMEOUT};

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

/// CONNECT with `fields` (JSON members) and PING: the server refuses with
/// `Authorization Violation` and closes.
async fn expect_refused(server: &Server, fields: impl FnOnce(&str) -> String) {
    let (mut raw, info) = server.raw().await;
    let nonce = info["nonce"].as_str().unwrap_or_default().to_string();
    let connect = format!("CONNECT {{{QUIET},{}}}\r\nPING\r\n", fields(&nonce));
    raw.send(connect.as_bytes()).await;
    let got = raw.expect_closed(TIMEOUT).await;
    assert_eq!(
        text(&got),
        VIOLATION,
        "{}: {connect:?}",
        server.flavor.name()
    );
}

/// A raw connection authenticated with `fields`, after PING/PONG.
async fn raw_as(server: &Server, fields: &str) -> RawClient {
    server.raw_handshake(&format!("{{{QUIET},{fields}}}")).await
}

fn user(name: &str, password: &str) -> String {
    format!(r#""user":"{name}","pass":"{password}""#)
}

/// Sends `operations` and a PING; returns what came before the PONG.
async fn exchange(raw: &mut RawClient, operations: &str) -> String {
    raw.send(format!("{operations}PING\r\n").as_bytes()).await;
    let got = text(&raw.read_until(b"PONG\r\n", TIMEOUT).await);
    got.strip_suffix("PONG\r\n").unwrap_or(&got).to_string()
}

async fn token(flavor: Flavor) {
    let server = Server::start(
        flavor,
        options(
            "token = \"s3cret-token\"\ntimeout = 1",
            "token: \"s3cret-token\"\ntimeout: 1",
        ),
    );
    let (_, info) = server.raw().await;
    assert_eq!(info["auth_required"], json!(true));
    assert!(info.get("nonce").is_none(), "no nkey users, no nonce");
    let client = server
        .connect_with(async_nats::ConnectOptions::with_token(
            "s3cret-token".into(),
        ))
        .await;
    let mut subscriber = client.subscribe("token.works").await.unwrap();
    client.publish("token.works", "yes".into()).await.unwrap();
    let message = common::next_message(&mut subscriber, TIMEOUT).await;
    assert_eq!(&message.payload[..], b"yes");
    expect_refused(&server, |_| r#""auth_token":"s3cret-tokeN""#.into()).await;
    expect_refused(&server, |_| r#""auth_token":"""#.into()).await;
    expect_refused(&server, |_| user("s3cret-token", "s3cret-token")).await;
    let varz = server.varz();
    assert_eq!(varz["auth_required"], json!(true));
    assert_eq!(varz["auth_timeout"], json!(1));
    if flavor == Flavor::Tern {
        assert_eq!(varz["tern_authentication_failures"], json!(3), "{varz}");
        let (status, metrics) = server.http_get("/metrics");
        assert_eq!(status, 200);
        let total: u64 = metrics
            .lines()
            .filter(|line| line.starts_with("tern_authentication_failures_total{"))
            .map(|line| line.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(total, 3, "{metrics}");
        let log = server.log_tail();
        assert!(log.contains("authentication failed: wrong token"), "{log}");
        assert!(!log.contains("s3cret-tokeN"), "the secret is never logged");
    }
}
differential!(token);

async fn users(flavor: Flavor) {
    // `$2a$` as nats-server's `nats server passwd` writes, `$2b$` as
    // other tools do; cost 4 keeps the test fast.
    let hash_a = bcrypt::hash_with_result("pw-hashed", 4)
        .unwrap()
        .format_for_version(bcrypt::Version::TwoA);
    let hash_b = bcrypt::hash_with_result("pw-other", 4)
        .unwrap()
        .format_for_version(bcrypt::Version::TwoB);
    let server = Server::start(
        flavor,
        options(
            &format!(
                "users = [ {{ user = \"plain\", password = \"pw-plain\" }}, {{ user = \"hashed\", password = \"{hash_a}\" }}, {{ user = \"other\", password = \"{hash_b}\" }} ]"
            ),
            &format!(
                "users = [ {{user: plain, password: \"pw-plain\"}}, {{user: hashed, password: \"{hash_a}\"}}, {{user: other, password: \"{hash_b}\"}} ]"
            ),
        ),
    );
    for (name, password) in [
        ("plain", "pw-plain"),
        ("hashed", "pw-hashed"),
        ("other", "pw-other"),
    ] {
        let client = server
            .connect_with(async_nats::ConnectOptions::with_user_and_password(
                name.into(),
                password.into(),
            ))
            .await;
        let reply = client.new_inbox();
        let mut subscriber = client.subscribe(reply.clone()).await.unwrap();
        client.publish(reply, name.into()).await.unwrap();
        assert_eq!(
            &common::next_message(&mut subscriber, TIMEOUT).await.payload[..],
            name.as_bytes()
        );
    }
    expect_refused(&server, |_| user("plain", "pw-plaiN")).await;
    expect_refused(&server, |_| user("hashed", "pw-plain")).await;
    expect_refused(&server, |_| user("hashed", &hash_a)).await;
    expect_refused(&server, |_| user("nobody", "pw-plain")).await;
    expect_refused(&server, |_| r#""auth_token":"pw-plain""#.into()).await;
}
differential!(users);

async fn nkey(flavor: Flavor) {
    let key = nkeys::KeyPair::new_user();
    let stranger = nkeys::KeyPair::new_user();
    let public = key.public_key();
    let server = Server::start(
        flavor,
        options(
            &format!("users = [ {{ nkey = \"{public}\" }} ]"),
            &format!("users = [ {{nkey: \"{public}\"}} ]"),
        ),
    );
    let (_, info) = server.raw().await;
    let nonce = info["nonce"].as_str().expect("INFO has a nonce");
    assert_eq!(nonce.len(), 15, "{nonce}");
    assert_eq!(info["auth_required"], json!(true));
    // The seed as `nk -gen user` or `tern nkey gen user` writes it.
    let dir = tempfile::tempdir().unwrap();
    let seed_file = dir.path().join("user.nk");
    std::fs::write(&seed_file, format!("{}\n", key.seed().unwrap())).unwrap();
    let seed = std::fs::read_to_string(&seed_file).unwrap();
    let client = server
        .connect_with(async_nats::ConnectOptions::with_nkey(seed.trim().into()))
        .await;
    let mut subscriber = client.subscribe("nkey.works").await.unwrap();
    client.publish("nkey.works", "yes".into()).await.unwrap();
    assert_eq!(
        &common::next_message(&mut subscriber, TIMEOUT).await.payload[..],
        b"yes"
    );
    let raw_url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let sign =
        |pair: &nkeys::KeyPair, nonce: &str| raw_url.encode(pair.sign(nonce.as_bytes()).unwrap());
    // Signed by another key; over another nonce; not base64; no signature;
    // a key the server does not know.
    expect_refused(&server, |nonce| {
        format!(r#""nkey":"{public}","sig":"{}""#, sign(&stranger, nonce))
    })
    .await;
    expect_refused(&server, |_| {
        format!(
            r#""nkey":"{public}","sig":"{}""#,
            sign(&key, "another-nonce")
        )
    })
    .await;
    expect_refused(&server, |_| format!(r#""nkey":"{public}","sig":"***""#)).await;
    expect_refused(&server, |_| format!(r#""nkey":"{public}""#)).await;
    let stranger_public = stranger.public_key();
    expect_refused(&server, |nonce| {
        format!(
            r#""nkey":"{stranger_public}","sig":"{}""#,
            sign(&stranger, nonce)
        )
    })
    .await;
    // Standard base64 with padding is accepted too (nats-server's fallback).
    let (mut raw, info) = server.raw().await;
    let nonce = info["nonce"].as_str().unwrap();
    let standard =
        base64::engine::general_purpose::STANDARD.encode(key.sign(nonce.as_bytes()).unwrap());
    raw.send(
        format!("CONNECT {{{QUIET},\"nkey\":\"{public}\",\"sig\":\"{standard}\"}}\r\nPING\r\n")
            .as_bytes(),
    )
    .await;
    assert_eq!(
        text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
}
differential!(nkey);

async fn auth_timeout(flavor: Flavor) {
    let server = Server::start(
        flavor,
        options("token = \"t\"\ntimeout = 0.5", "token: \"t\"\ntimeout: 0.5"),
    );
    let started = Instant::now();
    let (mut raw, _) = server.raw().await;
    let got = raw.expect_closed(TIMEOUT).await;
    assert_eq!(text(&got), "-ERR 'Authentication Timeout'\r\n");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(400),
        "closed after {waited:?}, before the 0.5 s timeout"
    );
    // A client that authenticates in time stays connected past it.
    let mut client = raw_as(&server, r#""auth_token":"t""#).await;
    client.expect_silence(Duration::from_millis(700)).await;
    if flavor == Flavor::Tern {
        assert_eq!(server.varz()["tern_authentication_timeouts"], json!(1));
    }
}
differential!(auth_timeout);

async fn before_connect(flavor: Flavor) {
    let server = Server::start(flavor, options("token = \"t\"", "token: \"t\""));
    for operation in [
        "PING\r\n",
        "SUB foo 1\r\n",
        "PUB foo 1\r\nx\r\n",
        "INFO {}\r\n",
    ] {
        let (mut raw, _) = server.raw().await;
        raw.send(operation.as_bytes()).await;
        let got = raw.expect_closed(TIMEOUT).await;
        assert_eq!(text(&got), VIOLATION, "{operation:?}");
    }
}
differential!(before_connect);

/// Users for the permission tests, in both formats.
fn permission_users() -> Options {
    options(
        r#"users = [
  { user = "admin", password = "admin-pw" },
  { user = "pub", password = "pub-pw", permissions = { publish = { allow = ["allowed.>"], deny = ["allowed.secret"] } } },
  { user = "sub", password = "sub-pw", permissions = { subscribe = { allow = ["public.>", "jobs.* workers"], deny = ["public.secret"] } } },
  { user = "svc", password = "svc-pw", permissions = { subscribe = "svc.>", allow_responses = true } },
]"#,
        r#"users = [
  {user: admin, password: "admin-pw"}
  {user: pub, password: "pub-pw", permissions: {publish: {allow: ["allowed.>"], deny: ["allowed.secret"]}}}
  {user: sub, password: "sub-pw", permissions: {subscribe: {allow: ["public.>", "jobs.* workers"], deny: ["public.secret"]}}}
  {user: svc, password: "svc-pw", permissions: {subscribe: "svc.>", allow_responses: true}}
]"#,
    )
}

async fn publish_denied(flavor: Flavor) {
    let server = Server::start(flavor, permission_users());
    let mut admin = raw_as(&server, &user("admin", "admin-pw")).await;
    assert_eq!(
        exchange(&mut admin, "SUB allowed.> 1\r\nSUB other.> 2\r\n").await,
        ""
    );
    let mut publisher = raw_as(
        &server,
        &format!(r#"{},"headers":true"#, user("pub", "pub-pw")),
    )
    .await;
    let refused = exchange(
        &mut publisher,
        "PUB allowed.secret 6\r\nsecret\r\nPUB other.x 5\r\nother\r\nHPUB allowed.secret 12 13\r\nNATS/1.0\r\n\r\nh\r\nPUB allowed.x 2\r\nok\r\n",
    )
    .await;
    assert_eq!(
        refused,
        "-ERR 'Permissions Violation for Publish to \"allowed.secret\"'\r\n\
         -ERR 'Permissions Violation for Publish to \"other.x\"'\r\n\
         -ERR 'Permissions Violation for Publish to \"allowed.secret\"'\r\n"
    );
    // Non-fatal, and nothing denied was delivered: the allowed message is
    // the first the admin gets.
    let got = text(&admin.read_until(b"ok\r\n", TIMEOUT).await);
    assert_eq!(got, "MSG allowed.x 1 2\r\nok\r\n");
    assert_eq!(exchange(&mut admin, "").await, "");
}
differential!(publish_denied);

async fn subscribe_denied(flavor: Flavor) {
    let server = Server::start(flavor, permission_users());
    let mut subscriber = raw_as(&server, &user("sub", "sub-pw")).await;
    let refused = exchange(
        &mut subscriber,
        "SUB public.secret 1\r\nSUB jobs.a 2\r\nSUB jobs.a others 3\r\nSUB jobs.a workers 4\r\nSUB public.> 5\r\nSUB other.x 6\r\nSUB public.news _sys_ 7\r\n",
    )
    .await;
    assert_eq!(
        refused,
        "-ERR 'Permissions Violation for Subscription to \"public.secret\"'\r\n\
         -ERR 'Permissions Violation for Subscription to \"jobs.a\"'\r\n\
         -ERR 'Permissions Violation for Subscription to \"jobs.a\" using queue \"others\"'\r\n\
         -ERR 'Permissions Violation for Subscription to \"other.x\"'\r\n\
         -ERR 'Permissions Violation for Subscription to \"public.news\" using queue \"_sys_\"'\r\n"
    );
    // `public.>` is allowed, but what the deny rule names never reaches it.
    let mut admin = raw_as(&server, &user("admin", "admin-pw")).await;
    admin
        .send(b"PUB public.secret 6\r\nsecret\r\nPUB public.news 4\r\nnews\r\nPUB jobs.a 3\r\njob\r\n")
        .await;
    let got = text(&subscriber.read_until(b"job\r\n", TIMEOUT).await);
    assert_eq!(
        got,
        "MSG public.news 5 4\r\nnews\r\nMSG jobs.a 4 3\r\njob\r\n"
    );
}
differential!(subscribe_denied);

async fn allow_responses(flavor: Flavor) {
    let server = Server::start(flavor, permission_users());
    let mut service = raw_as(&server, &user("svc", "svc-pw")).await;
    assert_eq!(exchange(&mut service, "SUB svc.echo 1\r\n").await, "");
    let mut requester = raw_as(&server, &user("admin", "admin-pw")).await;
    assert_eq!(exchange(&mut requester, "SUB reply.> 9\r\n").await, "");
    requester.send(b"PUB svc.echo reply.1 2\r\nhi\r\n").await;
    assert_eq!(
        text(&service.read_until(b"hi\r\n", TIMEOUT).await),
        "MSG svc.echo 1 reply.1 2\r\nhi\r\n"
    );
    // One response per request (the default max), to its reply subject only.
    let refused = exchange(
        &mut service,
        "PUB reply.1 3\r\nyes\r\nPUB reply.1 5\r\nagain\r\nPUB reply.2 5\r\nother\r\nPUB svc.echo 4\r\nself\r\n",
    )
    .await;
    assert_eq!(
        refused,
        "-ERR 'Permissions Violation for Publish to \"reply.1\"'\r\n\
         -ERR 'Permissions Violation for Publish to \"reply.2\"'\r\n\
         -ERR 'Permissions Violation for Publish to \"svc.echo\"'\r\n"
    );
    requester.send(b"PUB svc.echo reply.3 2\r\nho\r\n").await;
    service.read_until(b"ho\r\n", TIMEOUT).await;
    assert_eq!(
        exchange(&mut service, "PUB reply.3 4\r\nlast\r\n").await,
        ""
    );
    let got = text(&requester.read_until(b"last\r\n", TIMEOUT).await);
    assert_eq!(got, "MSG reply.1 9 3\r\nyes\r\nMSG reply.3 9 4\r\nlast\r\n");
}
differential!(allow_responses);

async fn jetstream_denied(flavor: Flavor) {
    let mut options = options(
        r#"users = [
  { user = "admin", password = "admin-pw" },
  { user = "app", password = "app-pw", permissions = { publish = { deny = ["$JS.API.STREAM.CREATE.>", "$JS.ACK.>", "orders.>"] } } },
]"#,
        r#"users = [
  {user: admin, password: "admin-pw"}
  {user: app, password: "app-pw", permissions: {publish: {deny: ["$JS.API.STREAM.CREATE.>", "$JS.ACK.>", "orders.>"]}}}
]"#,
    );
    options.jetstream = true;
    let server = Server::start(flavor, options);
    let admin = server
        .connect_with(async_nats::ConnectOptions::with_user_and_password(
            "admin".into(),
            "admin-pw".into(),
        ))
        .await;
    js::create(&admin, js::default_config("ORDERS", &["orders.>"])).await;
    js::publish_all(&admin, &["orders.first"]).await;
    js::api_ok(
        &admin,
        "$JS.API.CONSUMER.CREATE.ORDERS.C",
        r#"{"stream_name":"ORDERS","config":{"durable_name":"C","ack_policy":"explicit"}}"#,
    )
    .await;
    let mut app = raw_as(&server, &user("app", "app-pw")).await;
    // The JetStream API and the stream's subjects are ordinary subjects.
    let create = r#"{"name":"EVIL","subjects":["evil.>"]}"#;
    let refused = exchange(
        &mut app,
        &format!(
            "SUB inbox.> 1\r\nPUB $JS.API.STREAM.CREATE.EVIL inbox.create {}\r\n{create}\r\nPUB orders.second inbox.pub 6\r\nsecond\r\n",
            create.len()
        ),
    )
    .await;
    assert_eq!(
        refused,
        "-ERR 'Permissions Violation for Publish to \"$JS.API.STREAM.CREATE.EVIL\"'\r\n\
         -ERR 'Permissions Violation for Publish to \"orders.second\"'\r\n"
    );
    let missing = js::api(&admin, "$JS.API.STREAM.INFO.EVIL", "").await;
    assert_eq!(missing["error"]["err_code"], json!(10059), "{missing}");
    let state = js::state(&admin, "ORDERS").await;
    assert_eq!(state["messages"], json!(1), "{state}");
    // A fetch is allowed; its ack is not, and the message stays unacked.
    app.send(b"PUB $JS.API.CONSUMER.MSG.NEXT.ORDERS.C inbox.next 1\r\n1\r\n")
        .await;
    let delivery = text(&app.read_until(b"\r\nv\r\n", TIMEOUT).await);
    let ack = delivery
        .split_whitespace()
        .find(|token| token.starts_with("$JS.ACK.ORDERS.C."))
        .unwrap_or_else(|| panic!("no ack subject in {delivery:?}"))
        .to_string();
    let refused = exchange(&mut app, &format!("PUB {ack} 0\r\n\r\n")).await;
    assert_eq!(
        refused,
        format!("-ERR 'Permissions Violation for Publish to \"{ack}\"'\r\n")
    );
    let info = js::api_ok(&admin, "$JS.API.CONSUMER.INFO.ORDERS.C", "").await;
    assert_eq!(info["num_ack_pending"], json!(1), "{info}");
    assert_eq!(info["ack_floor"]["consumer_seq"], json!(0), "{info}");
}
differential!(jetstream_denied);
