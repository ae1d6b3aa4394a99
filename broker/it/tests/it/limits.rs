//! Server limits, against both tern-server and nats-server: slow consumers
//! (max_pending), stale connections (ping_interval/ping_max), clients that
//! answer PINGs staying connected, max_connections and max_subscriptions.

use crate::common;

use std::time::{Duration, Instant};

use common::{text, Flavor, Options, RawClient, ReadError, Server, TIMEOUT};

const QUIET_CONNECT: &str = r#"{"verbose":false,"pedantic":false}"#;

async fn slow_consumer_is_closed(flavor: Flavor) {
    const MESSAGE_BYTES: usize = 1000;
    const TOTAL_BYTES: usize = 64 * 1024 * 1024;
    // nats-server stalls the publisher while the subscriber's write is stuck
    // and closes it when `write_deadline` passes; a short deadline keeps the
    // test fast. (tern closes it as soon as max_pending is exceeded.)
    let server = Server::start(
        flavor,
        Options {
            max_payload: Some(1024),
            max_pending: Some(65536),
            write_deadline_ms: Some(1000),
            ..Options::default()
        },
    );
    // The subscriber never reads; a small receive buffer makes it back up sooner.
    let mut slow = RawClient::connect_small_buffer(server.client_port(), 4096).await;
    slow.read_info().await;
    slow.send(format!("CONNECT {QUIET_CONNECT}\r\nSUB slow.subject 1\r\nPING\r\n").as_bytes())
        .await;
    assert_eq!(
        text(&slow.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );

    let mut publisher = server.raw_handshake(QUIET_CONNECT).await;
    let payload = "p".repeat(MESSAGE_BYTES);
    let one = format!("PUB slow.subject {MESSAGE_BYTES}\r\n{payload}\r\n");
    let chunk = one.repeat(1024);
    let mut sent = 0;
    let started = Instant::now();
    while sent < TOTAL_BYTES {
        tokio::time::timeout(Duration::from_secs(30), publisher.send(chunk.as_bytes()))
            .await
            .expect("publisher stuck: the server stopped reading it");
        sent += chunk.len();
    }
    eprintln!(
        "{}: published {sent} bytes in {:?}",
        flavor.name(),
        started.elapsed()
    );
    // The publisher is unaffected: everything it sent is processed.
    publisher.send(b"PING\r\n").await;
    let reply = publisher
        .read_until(b"PONG\r\n", Duration::from_secs(30))
        .await;
    assert_eq!(
        text(&reply),
        "PONG\r\n",
        "{}: publisher after {sent} bytes",
        flavor.name()
    );

    let varz = server
        .wait_varz("slow_consumers >= 1", TIMEOUT, |varz| {
            varz["slow_consumers"].as_u64().unwrap_or(0) >= 1
        })
        .await;
    // The slow subscriber was closed (after whatever the kernel had
    // buffered, possibly nothing), without any -ERR: it only ever got messages.
    let tail = slow.expect_closed(TIMEOUT).await;
    assert!(
        tail.is_empty() || tail.starts_with(b"MSG slow.subject 1 1000\r\n"),
        "{}: {:?}",
        flavor.name(),
        text(&tail[..tail.len().min(64)])
    );
    assert!(
        !text(&tail).contains("-ERR"),
        "{}: slow consumers are closed without -ERR",
        flavor.name()
    );
    assert!(varz["slow_consumers"].as_u64().unwrap() >= 1);
    eprintln!(
        "{}: slow consumer closed after publishing {sent} bytes in {:?}; it had received {} bytes",
        flavor.name(),
        started.elapsed(),
        tail.len()
    );
}
differential!(slow_consumer_is_closed);

fn ping_options() -> Options {
    Options {
        ping_interval_ms: Some(100),
        ping_max: Some(2),
        ..Options::default()
    }
}

async fn stale_connection(flavor: Flavor) {
    let server = Server::start(flavor, ping_options());
    let (mut raw, _) = server.raw().await;
    let started = Instant::now();
    raw.send(format!("CONNECT {QUIET_CONNECT}\r\n").as_bytes())
        .await;
    let got = raw.expect_closed(Duration::from_secs(5)).await;
    assert_eq!(
        text(&got),
        "PING\r\nPING\r\n-ERR 'Stale Connection'\r\n",
        "{}",
        flavor.name()
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "stale after {:?}",
        started.elapsed()
    );
}
differential!(stale_connection);

async fn answering_pings_stays_connected(flavor: Flavor) {
    let server = Server::start(flavor, ping_options());
    let (mut raw, _) = server.raw().await;
    raw.send(format!("CONNECT {QUIET_CONNECT}\r\n").as_bytes())
        .await;
    // Answer every server PING for 1.2 s (12 ping intervals): a negative proof
    // that the connection is not closed as stale.
    let deadline = Instant::now() + Duration::from_millis(1200);
    let mut pings = 0;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            break;
        }
        match raw.try_read_until(b"\r\n", remaining).await {
            Ok(line) => {
                assert_eq!(
                    text(&line),
                    "PING\r\n",
                    "{}: only PINGs expected",
                    flavor.name()
                );
                pings += 1;
                raw.send(b"PONG\r\n").await;
            }
            Err(ReadError::Timeout) => break,
            Err(ReadError::Closed) => {
                panic!(
                    "{}: closed after {pings} answered PINGs: {:?}",
                    flavor.name(),
                    text(raw.buffered())
                )
            }
        }
    }
    assert!(
        pings >= 3,
        "{}: expected PINGs every 100ms, got {pings}",
        flavor.name()
    );
    raw.send(b"SUB alive 1\r\nPUB alive 2\r\nok\r\n").await;
    let got = raw.read_until(b"ok\r\n", TIMEOUT).await;
    // A server PING may come in between.
    assert!(
        text(&got).ends_with("MSG alive 1 2\r\nok\r\n"),
        "{}: {:?}",
        flavor.name(),
        text(&got)
    );
}
differential!(answering_pings_stays_connected);

async fn max_connections(flavor: Flavor) {
    let server = Server::start(
        flavor,
        Options {
            max_connections: Some(2),
            ..Options::default()
        },
    );
    let mut first = server.raw_handshake(QUIET_CONNECT).await;
    let mut second = server.raw_handshake(QUIET_CONNECT).await;
    let (mut third, info) = server.raw().await;
    assert!(
        info["server_id"].is_string(),
        "the refused connection still gets INFO first"
    );
    let got = third.expect_closed(TIMEOUT).await;
    assert_eq!(
        text(&got),
        "-ERR 'maximum connections exceeded'\r\n",
        "{}",
        flavor.name()
    );
    // The admitted ones are unaffected.
    for raw in [&mut first, &mut second] {
        raw.send(b"PING\r\n").await;
        assert_eq!(
            text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
            "PONG\r\n"
        );
    }
    // Closing one frees a slot (the server notices asynchronously: poll).
    drop(first);
    server
        .wait_varz("one connection left", TIMEOUT, |varz| {
            varz["connections"].as_u64() == Some(1)
        })
        .await;
    let mut again = server.raw_handshake(QUIET_CONNECT).await;
    again.send(b"PING\r\n").await;
    assert_eq!(
        text(&again.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
}
differential!(max_connections);

async fn max_subscriptions(flavor: Flavor) {
    let server = Server::start(
        flavor,
        Options {
            max_subscriptions: Some(3),
            ..Options::default()
        },
    );
    let mut raw = server.raw_handshake(QUIET_CONNECT).await;
    raw.send(b"SUB ms.1 1\r\nSUB ms.2 2\r\nSUB ms.3 3\r\nSUB ms.4 4\r\nPING\r\n")
        .await;
    assert_eq!(
        text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
        "-ERR 'maximum subscriptions exceeded'\r\nPONG\r\n",
        "{}",
        flavor.name()
    );
    // Still usable; the fourth subscription does not exist.
    raw.send(b"PUB ms.4 2\r\nno\r\nPUB ms.1 2\r\nhi\r\nPING\r\n")
        .await;
    assert_eq!(
        text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
        "MSG ms.1 1 2\r\nhi\r\nPONG\r\n"
    );
    // After an UNSUB there is room again.
    raw.send(b"UNSUB 2\r\nSUB ms.4 4\r\nPUB ms.4 2\r\nok\r\nPING\r\n")
        .await;
    assert_eq!(
        text(&raw.read_until(b"PONG\r\n", TIMEOUT).await),
        "MSG ms.4 4 2\r\nok\r\nPONG\r\n"
    );
}
differential!(max_subscriptions);

async fn fast_consumer_survives_a_burst(flavor: Flavor) {
    // max_pending bounds what queues for a client that cannot keep up. A
    // subscriber that reads as fast as it can must survive a publisher's
    // burst many times larger than max_pending: nats-server stalls the
    // producer when a target passes 75 % of max_pending (spec §12).
    const MESSAGES: usize = 2000;
    const MESSAGE_BYTES: usize = 1000;
    const PENDING: usize = 256 * 1024;
    let server = Server::start(
        flavor,
        Options {
            max_payload: Some(1024),
            max_pending: Some(PENDING),
            ..Options::default()
        },
    );
    let (mut subscriber, subscriber_info) = server.raw().await;
    subscriber.ignore_server_pings();
    subscriber
        .send(format!("CONNECT {QUIET_CONNECT}\r\nSUB burst 1\r\nPING\r\n").as_bytes())
        .await;
    assert_eq!(
        text(&subscriber.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    let subscriber_shard = match flavor {
        Flavor::Tern => server.shard_of(subscriber_info["client_id"].as_u64().unwrap()),
        Flavor::Nats => None,
    };
    let payload = "b".repeat(MESSAGE_BYTES);
    let one = format!("PUB burst {MESSAGE_BYTES}\r\n{payload}\r\n");
    let expected_one = format!("MSG burst 1 {MESSAGE_BYTES}\r\n{payload}\r\n");
    let expected_bytes = expected_one.len() * MESSAGES;
    let reading = tokio::spawn(async move { subscriber.read_up_to(expected_bytes, TIMEOUT).await });
    let (mut publisher, publisher_info) = server.raw().await;
    publisher.ignore_server_pings();
    publisher
        .send(format!("CONNECT {QUIET_CONNECT}\r\n").as_bytes())
        .await;
    publisher.send(one.repeat(MESSAGES).as_bytes()).await;
    publisher.send(b"PING\r\n").await;
    assert_eq!(
        text(&publisher.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    let (got, stopped) = reading.await.unwrap();
    let placement = match flavor {
        Flavor::Tern => format!(
            " [subscriber on shard {:?}, publisher on shard {:?}]",
            subscriber_shard,
            publisher_info["client_id"]
                .as_u64()
                .and_then(|cid| server.shard_of(cid)),
        ),
        Flavor::Nats => String::new(),
    };
    assert!(
        stopped.is_none() && got == expected_one.repeat(MESSAGES).as_bytes(),
        "{}: a subscriber reading as fast as it can got {} of {expected_bytes} bytes ({} whole messages), then {:?}; \
         /varz slow_consumers = {}{placement}",
        flavor.name(),
        got.len(),
        got.len() / expected_one.len(),
        stopped,
        server.varz()["slow_consumers"]
    );
    assert_eq!(server.varz()["slow_consumers"], 0, "{}", flavor.name());
}
differential!(fast_consumer_survives_a_burst);

async fn write_deadline_closes_a_stuck_consumer(flavor: Flavor) {
    // max_pending stays at its default (64 MiB): only the write deadline can
    // catch a subscriber that stops reading while less than that is queued.
    const MESSAGE_BYTES: usize = 60_000;
    const TOTAL_BYTES: usize = 24 * 1024 * 1024;
    let server = Server::start(
        flavor,
        Options {
            write_deadline_ms: Some(500),
            ..Options::default()
        },
    );
    let mut stuck = RawClient::connect_small_buffer(server.client_port(), 4096).await;
    stuck.read_info().await;
    stuck.ignore_server_pings();
    stuck
        .send(format!("CONNECT {QUIET_CONNECT}\r\nSUB stuck 1\r\nPING\r\n").as_bytes())
        .await;
    assert_eq!(
        text(&stuck.read_until(b"PONG\r\n", TIMEOUT).await),
        "PONG\r\n"
    );
    let mut publisher = server.raw_handshake(QUIET_CONNECT).await;
    let one = format!(
        "PUB stuck {MESSAGE_BYTES}\r\n{}\r\n",
        "w".repeat(MESSAGE_BYTES)
    );
    let started = Instant::now();
    let mut sent = 0;
    while sent < TOTAL_BYTES {
        tokio::time::timeout(Duration::from_secs(30), publisher.send(one.as_bytes()))
            .await
            .expect("publisher stuck: the server stopped reading it");
        sent += one.len();
    }
    publisher.send(b"PING\r\n").await;
    assert_eq!(
        text(
            &publisher
                .read_until(b"PONG\r\n", Duration::from_secs(30))
                .await
        ),
        "PONG\r\n"
    );
    server
        .wait_varz("slow_consumers >= 1 (write deadline)", TIMEOUT, |varz| {
            varz["slow_consumers"].as_u64().unwrap_or(0) >= 1
        })
        .await;
    let tail = stuck.expect_closed(TIMEOUT).await;
    assert!(
        !text(&tail).contains("-ERR"),
        "{}: closed without -ERR",
        flavor.name()
    );
    eprintln!(
        "{}: stuck consumer closed {:?} after the first publish",
        flavor.name(),
        started.elapsed()
    );
}
differential!(write_deadline_closes_a_stuck_consumer);
