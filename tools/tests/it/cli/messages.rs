//! `tern pub`, `tern sub` and `tern req` on both servers: JetStream
//! publishes with headers and templates, replay of a stream, a plain
//! subscription, a request answered by a responder, and the errors when
//! nobody answers.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use super::{on_both, runtime, tern_command, wait_bounded, Server, TIMEOUT};

#[test]
fn publish_replay_and_request() {
    let (tern, nats) = on_both(|server| {
        let flavor = server.flavor;
        let mut seen = Vec::new();
        server
            .tern(&[
                "stream",
                "add",
                "EVENTS",
                "--subjects",
                "events.>",
                "--defaults",
            ])
            .ok();
        let one = server.tern(&["pub", "events.one", "hello", "-J", "-H", "Trace:abc"]);
        one.ok();
        assert!(
            one.stderr.contains("Stored in Stream: EVENTS Sequence: 1"),
            "{flavor:?}: {one:?}"
        );
        server
            .tern(&[
                "pub",
                "events.{{Count}}",
                "n{{ Count }}",
                "--count",
                "3",
                "-q",
            ])
            .ok();
        let got = server.tern(&["stream", "get", "EVENTS", "1"]);
        assert!(got.ok().contains("  Trace: abc"), "{flavor:?}: {got:?}");
        let got = server
            .tern(&[
                "stream",
                "get",
                "EVENTS",
                "--last-for",
                "events.3",
                "--json",
            ])
            .json();
        assert_eq!(got["data"], "bjM=", "{flavor:?}: n3 on events.3");

        seen.push(json!(server
            .tern(&["sub", "--stream", "EVENTS", "--all", "--count", "4", "--raw"])
            .ok()));
        seen.push(json!(server
            .tern(&["sub", "events.2", "--all", "--count", "1", "--raw"])
            .ok()));
        seen.push(json!(server
            .tern(&["sub", "events.>", "--last", "--count", "1"])
            .ok()));
        // -J on a subject no stream captures: the publish is refused.
        seen.push(json!(server
            .tern(&["pub", "nowhere", "x", "-J"])
            .one_line_error(1)));

        seen.push(json!(plain_subscription(server)));
        seen.push(json!(request_reply(server)));
        seen.push(json!(server
            .tern(&["req", "no.one", "x"])
            .one_line_error(1)));
        seen
    });
    assert_eq!(tern, nats);
}

/// `tern sub SUBJECT --count 1` in the background; the test publishes
/// until the subscription has one (bounded), and the subscriber prints it.
fn plain_subscription(server: &Server) -> String {
    let url = server.url();
    let mut child = tern_command(&["-s", &url, "sub", "plain.x", "--count", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tern sub");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut ready = String::new();
    stderr.read_line(&mut ready).expect("tern sub's first line");
    assert_eq!(ready.trim(), "Subscribing on plain.x");
    let deadline = Instant::now() + TIMEOUT;
    runtime().block_on(async {
        let client = server.client().await;
        // The subscription may not reach every shard yet: publish until
        // the subscriber has one and exits (a bounded poll).
        while child.try_wait().expect("try_wait").is_none() {
            assert!(Instant::now() < deadline, "tern sub got nothing");
            client
                .publish("plain.x", "hi".into())
                .await
                .expect("publish");
            client.flush().await.expect("flush");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let status = wait_bounded(&mut child, &["sub"]);
    assert!(status.success());
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut stdout)
        .expect("read stdout");
    stdout
}

/// A responder of the test's own; `tern req` prints its reply.
fn request_reply(server: &Server) -> String {
    let runtime = runtime();
    let (client, mut requests) = runtime.block_on(async {
        let client = server.client().await;
        let mut requests = client.subscribe("svc.echo").await.expect("subscribe");
        client.flush().await.expect("flush");
        // Probes from another connection until one arrives: then any
        // connection's request reaches the responder (a bounded poll).
        let prober = server.client().await;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            assert!(
                Instant::now() < deadline,
                "the responder never became visible"
            );
            prober
                .publish("svc.echo", "probe".into())
                .await
                .expect("probe");
            prober.flush().await.expect("flush");
            let wait = Duration::from_millis(25);
            if let Ok(Some(_)) = tokio::time::timeout(wait, requests.next()).await {
                break;
            }
        }
        (client, requests)
    });
    let url = server.url();
    let mut child = tern_command(&["-s", &url, "req", "svc.echo", "ping", "--raw"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tern req");
    runtime.block_on(async {
        let request = loop {
            let message = tokio::time::timeout(TIMEOUT, requests.next())
                .await
                .expect("a request within the bound")
                .expect("a request");
            if message.reply.is_some() {
                break message;
            }
        };
        assert_eq!(&request.payload[..], b"ping");
        let reply = request.reply.expect("a reply subject");
        client.publish(reply, "pong".into()).await.expect("reply");
        client.flush().await.expect("flush");
    });
    let status = wait_bounded(&mut child, &["req"]);
    assert!(status.success());
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut stdout)
        .expect("read stdout");
    stdout
}
