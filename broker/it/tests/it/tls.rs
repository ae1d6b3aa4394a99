//! TLS on the client port against the real servers, tern and nats-server
//! 2.15.1 with the same certificates (made per test, `common::tls`): the
//! plaintext INFO with `tls_required` and a TLS upgrade (async-nats pub/sub
//! and request/reply), a plaintext client on the TLS port (closed with no
//! `-ERR`), no handshake within the TLS timeout (closed, nothing written:
//! nats-server's `-ERR 'Secure Connection - TLS Required'` never reaches the
//! wire), client certificates with `verify` (none,
//! signed by the CA, signed by another CA), `handshake_first` (silence until
//! the ClientHello, INFO inside TLS), and nats-py over TLS.
//!
//! Each test starts one server.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::tls::{Pki, TlsSettings};
use crate::common::{self, preview, text, Flavor, RawClient, Server, QUIET, TIMEOUT};

/// First byte of a TLS alert record (content type 21).
const TLS_ALERT: u8 = 0x15;

/// async-nats `connect` under [`TIMEOUT`]: Ok(client) or the connect error
/// as text (a timeout panics: a refusal must be an error, not a hang).
async fn try_connect(
    server: &Server,
    options: async_nats::ConnectOptions,
) -> Result<async_nats::Client, String> {
    match tokio::time::timeout(TIMEOUT, options.connect(server.url())).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(error)) => Err(format!("{error} ({error:?})")),
        Err(_) => panic!(
            "{}: connect neither succeeded nor failed within {TIMEOUT:?}\nserver log:\n{}",
            server.flavor.name(),
            server.log_tail()
        ),
    }
}

/// The connect error is the server's refusal, not the client distrusting
/// the server's certificate (which would mean the test's PKI is wrong).
fn assert_refused_by_server(flavor: Flavor, error: &str) {
    assert!(
        !error.contains("invalid peer certificate"),
        "{}: the client refused the server: {error}",
        flavor.name()
    );
}

/// Pub/sub between two clients, then request/reply, all over TLS.
async fn exchange_messages(
    flavor: Flavor,
    test: &str,
    subscriber: &async_nats::Client,
    publisher: &async_nats::Client,
) {
    let subject = common::subject(test, flavor, "pubsub");
    let mut subscription = subscriber.subscribe(subject.clone()).await.unwrap();
    common::sync_interest(subscriber, publisher).await;
    publisher
        .publish(subject.clone(), "over tls".into())
        .await
        .unwrap();
    common::flush(publisher).await;
    let message = common::next_message(&mut subscription, TIMEOUT).await;
    assert_eq!(message.subject.as_str(), subject);
    assert_eq!(&message.payload[..], b"over tls");

    let service = common::subject(test, flavor, "service");
    let mut requests = subscriber.subscribe(service.clone()).await.unwrap();
    common::sync_interest(subscriber, publisher).await;
    let responder = {
        let subscriber = subscriber.clone();
        tokio::spawn(async move {
            let request = common::next_message(&mut requests, TIMEOUT).await;
            let reply = request.reply.expect("a request has a reply subject");
            let mut answer = b"answer:".to_vec();
            answer.extend_from_slice(&request.payload);
            subscriber.publish(reply, answer.into()).await.unwrap();
            common::flush(&subscriber).await;
        })
    };
    let reply = tokio::time::timeout(TIMEOUT, publisher.request(service, "question".into()))
        .await
        .expect("request timed out")
        .expect("request failed");
    assert_eq!(&reply.payload[..], b"answer:question");
    responder.await.unwrap();
}

/// Classic TLS: plaintext INFO with `tls_required`, then the client
/// upgrades; messages flow over TLS.
async fn classic(flavor: Flavor) {
    let pki = Pki::generate();
    let server = Server::start(flavor, pki.options(TlsSettings::default()));
    let (_raw, info) = server.raw().await;
    assert_eq!(info["tls_required"], json!(true), "INFO {info}");
    assert_ne!(info["tls_verify"], json!(true), "no verify, INFO {info}");
    assert_ne!(
        info["tls_available"],
        json!(true),
        "TLS is not optional, INFO {info}"
    );

    let subscriber = server.connect_with(pki.client_options()).await;
    let publisher = server.connect_with(pki.client_options()).await;
    assert!(subscriber.server_info().tls_required);
    exchange_messages(flavor, "tls_classic", &subscriber, &publisher).await;
}
differential!(classic);

/// A client that ignores `tls_required` and speaks plaintext: the server
/// tries the handshake, fails at the first byte, and closes without `-ERR`
/// well before the TLS timeout (set to 5 s here). Anything it writes is a
/// TLS record (an alert), never protocol text.
async fn plaintext_client(flavor: Flavor) {
    let pki = Pki::generate();
    let settings = TlsSettings {
        timeout_seconds: Some(5.0),
        ..TlsSettings::default()
    };
    let server = Server::start(flavor, pki.options(settings));
    let (mut raw, info) = server.raw().await;
    assert_eq!(info["tls_required"], json!(true), "INFO {info}");
    let sent = Instant::now();
    raw.send(b"CONNECT {}\r\nPING\r\n").await;
    let got = raw.expect_closed(TIMEOUT).await;
    let elapsed = sent.elapsed();
    eprintln!(
        "{}: plaintext client got {:02x?} ({}), closed after {elapsed:?}",
        flavor.name(),
        got,
        preview(&got)
    );
    let got_text = text(&got);
    for refused in ["PONG", "+OK", "-ERR", "INFO"] {
        assert!(
            !got_text.contains(refused),
            "{}: got {}",
            flavor.name(),
            preview(&got)
        );
    }
    assert!(
        got.is_empty() || got[0] == TLS_ALERT,
        "{}: only a TLS alert may precede the close, got {:02x?}",
        flavor.name(),
        got
    );
    assert!(
        elapsed < Duration::from_secs(4),
        "{}: closed after {elapsed:?}: the failed handshake, not the 5 s TLS timeout, must close it",
        flavor.name()
    );
}
differential!(plaintext_client);

/// A client that reads INFO and never starts TLS: at the TLS timeout
/// (0.5 s) the server closes the connection (EOF) without writing anything.
///
/// nats-server 2.15.1 queues `-ERR 'Secure Connection - TLS Required'`
/// then, but writes it through the TLS connection whose handshake has just
/// failed (the handshake's read deadline is the same timeout), so not one
/// byte reaches the client: no plaintext `-ERR`, no TLS alert. (The error
/// table in spec/nats-protocol.md lists that `-ERR` for this case; on the
/// wire there is none.)
async fn handshake_timeout(flavor: Flavor) {
    let pki = Pki::generate();
    let settings = TlsSettings {
        timeout_seconds: Some(0.5),
        ..TlsSettings::default()
    };
    let server = Server::start(flavor, pki.options(settings));
    let connected = Instant::now();
    let mut raw = RawClient::connect(server.client_port()).await;
    let info = raw.read_info().await;
    assert_eq!(info["tls_required"], json!(true), "INFO {info}");
    let got = raw.expect_closed(TIMEOUT).await;
    let elapsed = connected.elapsed();
    eprintln!(
        "{}: silent client got {:02x?} ({}), closed after {elapsed:?}",
        flavor.name(),
        got,
        preview(&got)
    );
    assert!(
        got.is_empty(),
        "{}: the TLS timeout closes silently, got {:02x?} ({})",
        flavor.name(),
        got,
        preview(&got)
    );
    assert!(
        elapsed >= Duration::from_millis(400) && elapsed < Duration::from_secs(3),
        "{}: closed after {elapsed:?}, expected about the 0.5 s TLS timeout",
        flavor.name()
    );
}
differential!(handshake_timeout);

/// `verify`: a client certificate signed by the CA is required.
async fn verify_client_certificate(flavor: Flavor) {
    let pki = Pki::generate();
    let settings = TlsSettings {
        verify: true,
        ..TlsSettings::default()
    };
    let server = Server::start(flavor, pki.options(settings));
    let (_raw, info) = server.raw().await;
    assert_eq!(info["tls_required"], json!(true), "INFO {info}");
    assert_eq!(info["tls_verify"], json!(true), "INFO {info}");

    let error = try_connect(&server, pki.client_options())
        .await
        .err()
        .unwrap_or_else(|| {
            panic!(
                "{}: a client without a certificate connected",
                flavor.name()
            )
        });
    eprintln!("{}: without a certificate: {error}", flavor.name());
    assert_refused_by_server(flavor, &error);

    let other = pki
        .client_options()
        .add_client_certificate(pki.other_client_cert.clone(), pki.other_client_key.clone());
    let error = try_connect(&server, other).await.err().unwrap_or_else(|| {
        panic!(
            "{}: a client with another CA's certificate connected",
            flavor.name()
        )
    });
    eprintln!("{}: with another CA's certificate: {error}", flavor.name());
    assert_refused_by_server(flavor, &error);

    let subscriber = server
        .connect_with(pki.client_options_with_certificate())
        .await;
    let publisher = server
        .connect_with(pki.client_options_with_certificate())
        .await;
    exchange_messages(flavor, "tls_verify", &subscriber, &publisher).await;
}
differential!(verify_client_certificate);

/// `handshake_first`: nothing before the client's ClientHello; a TLS-first
/// client gets INFO (with `tls_required`) inside TLS.
async fn handshake_first(flavor: Flavor) {
    let pki = Pki::generate();
    let settings = TlsSettings {
        handshake_first: true,
        ..TlsSettings::default()
    };
    let server = Server::start(flavor, pki.options(settings));
    let mut raw = RawClient::connect(server.client_port()).await;
    raw.expect_silence(QUIET).await;

    let subscriber = server.connect_with(pki.client_options().tls_first()).await;
    let publisher = server.connect_with(pki.client_options().tls_first()).await;
    assert!(
        subscriber.server_info().tls_required,
        "{}: INFO over TLS without tls_required",
        flavor.name()
    );
    exchange_messages(flavor, "tls_handshake_first", &subscriber, &publisher).await;
}
differential!(handshake_first);

/// nats-py with an `ssl.SSLContext` trusting the CA: publishes and
/// receives one message over TLS (`tests/py/tls.py`).
async fn nats_py_tls(flavor: Flavor) {
    let pki = Pki::generate();
    let server = Server::start(flavor, pki.options(TlsSettings::default()));
    let script = format!("{}/tests/py/tls.py", env!("CARGO_MANIFEST_DIR"));
    // The script bounds itself (30 s); this only catches a hung interpreter.
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("python3")
            .arg(&script)
            .arg(server.url())
            .arg(&pki.ca)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("tls.py did not finish within 60 s")
    .expect("python3 runs (nats-py: pip install nats-py)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("nats-py tls: ok"),
        "nats-py tls failed against {} ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        flavor.name(),
        output.status,
        server.log_tail()
    );
}
differential!(nats_py_tls);
