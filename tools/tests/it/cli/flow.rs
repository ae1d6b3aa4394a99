//! The command sequence from users' designs, on both servers: the ORDERS
//! stream with the users' flags, 10,000 publishes in one `tern pub`
//! (each acknowledged), a durable pull consumer, `consumer next --count
//! 10000` printing every payload in order, `stream info --json` of the
//! same shape on both, and `server check consumer` reading the lag before
//! and after.

use std::time::Instant;

use super::{key_paths, on_both, Server};

const MESSAGES: usize = 10_000;

struct Seen {
    next_lines: String,
    info_paths: std::collections::BTreeSet<String>,
    create_paths: std::collections::BTreeSet<String>,
}

fn users_sequence(server: &Server) -> Seen {
    let flavor = server.flavor;
    let created = server
        .tern(&[
            "stream",
            "add",
            "ORDERS",
            "--subjects",
            "orders.>",
            "--max-age",
            "30d",
            "--max-bytes",
            "500GB",
            "--storage",
            "file",
            "--replicas",
            "1",
            "--defaults",
            "--json",
        ])
        .json();
    assert_eq!(created["config"]["max_age"], 30u64 * 86_400 * 1_000_000_000);
    assert_eq!(created["config"]["max_bytes"], 500u64 << 30);
    assert_eq!(created["config"]["subjects"][0], "orders.>");
    assert_eq!(created["config"]["storage"], "file");
    assert!(created.get("type").is_none(), "--json drops only `type`");

    let started = Instant::now();
    let published = server.tern(&[
        "pub",
        "orders.new",
        "order {{Count}}",
        "--count",
        &MESSAGES.to_string(),
    ]);
    published.ok();
    assert!(
        published
            .stderr
            .contains("each acknowledged; last stored in Stream: ORDERS Sequence: 10000"),
        "{flavor:?}: {published:?}"
    );
    eprintln!(
        "{flavor:?}: 10,000 acknowledged publishes in {:?}",
        started.elapsed()
    );

    server
        .tern(&[
            "consumer",
            "add",
            "ORDERS",
            "P",
            "--pull",
            "--ack",
            "explicit",
            "--defaults",
        ])
        .ok();
    let lag = server.tern(&[
        "server",
        "check",
        "consumer",
        "--stream",
        "ORDERS",
        "--name",
        "P",
        "--lag-warn",
        "100",
        "--lag-crit",
        "10000",
    ]);
    assert_eq!(lag.code, Some(2), "{flavor:?}: {lag:?}");
    assert!(
        lag.stdout
            .starts_with("CRITICAL: consumer ORDERS > P: 10000 messages not yet delivered"),
        "{flavor:?}: {lag:?}"
    );

    let started = Instant::now();
    let next = server.tern(&[
        "consumer",
        "next",
        "ORDERS",
        "P",
        "--count",
        &MESSAGES.to_string(),
    ]);
    let lines: Vec<&str> = next.ok().lines().collect();
    assert_eq!(lines.len(), MESSAGES, "{flavor:?}");
    for (index, line) in lines.iter().enumerate() {
        assert_eq!(*line, format!("order {}", index + 1), "{flavor:?}");
    }
    eprintln!("{flavor:?}: next --count 10000 in {:?}", started.elapsed());

    let consumer = server
        .tern(&["consumer", "info", "ORDERS", "P", "--json"])
        .json();
    assert_eq!(consumer["num_pending"], 0, "{flavor:?}");
    assert_eq!(
        consumer["num_ack_pending"], 0,
        "{flavor:?}: every message acked"
    );
    assert_eq!(consumer["ack_floor"]["stream_seq"], MESSAGES, "{flavor:?}");
    let lag = server.tern(&[
        "server",
        "check",
        "consumer",
        "--stream",
        "ORDERS",
        "--name",
        "P",
        "--lag-warn",
        "100",
    ]);
    assert_eq!(lag.code, Some(0), "{flavor:?}: {lag:?}");

    let info = server.tern(&["stream", "info", "ORDERS", "--json"]).json();
    assert_eq!(info["state"]["messages"], MESSAGES, "{flavor:?}");
    assert_eq!(info["state"]["last_seq"], MESSAGES, "{flavor:?}");
    assert_eq!(info["state"]["consumer_count"], 1, "{flavor:?}");
    Seen {
        next_lines: next.stdout.clone(),
        info_paths: key_paths(&info),
        create_paths: key_paths(&created),
    }
}

#[test]
fn users_sequence_on_both_servers() {
    let (tern, nats) = on_both(users_sequence);
    assert_eq!(tern.next_lines, nats.next_lines);
    assert_eq!(tern.info_paths, nats.info_paths, "stream info --json keys");
    assert_eq!(
        tern.create_paths, nats.create_paths,
        "stream add --json keys"
    );
}

/// `server check stream` against a small stream: OK, then WARNING past
/// 80 % of max_bytes, then CRITICAL past 95 %, on both servers.
#[test]
fn stream_check_trips_as_the_stream_fills() {
    let (tern, nats) = on_both(|server| {
        let flavor = server.flavor;
        server
            .tern(&[
                "stream",
                "add",
                "SMALL",
                "--subjects",
                "small.>",
                "--max-bytes",
                "1KB",
                "--defaults",
            ])
            .ok();
        let check = || {
            server.tern(&[
                "server",
                "check",
                "stream",
                "--name",
                "SMALL",
                "--bytes-warn",
                "80%",
                "--bytes-crit",
                "95%",
            ])
        };
        // A record is 30 + subject + payload bytes: 50 here.
        let publish = |count: &str| {
            server
                .tern(&["pub", "small.x", "0123456789abc", "--count", count, "-q"])
                .ok();
        };
        let mut statuses = Vec::new();
        for (count, expected) in [("10", 0), ("7", 1), ("3", 2)] {
            publish(count);
            let run = check();
            let info = server.tern(&["stream", "info", "SMALL", "--json"]).json();
            assert_eq!(run.code, Some(expected), "{flavor:?}: {run:?} {info}");
            let first = run.stdout.split(':').next().unwrap_or("").to_string();
            statuses.push((first, info["state"]["bytes"].clone()));
        }
        let json = server
            .tern(&["server", "check", "stream", "--name", "SMALL", "--json"])
            .stdout;
        let json: serde_json::Value = serde_json::from_str(&json).expect("check --json");
        assert_eq!(json["status"], "CRITICAL");
        assert_eq!(json["exit_code"], 2);
        statuses
    });
    assert_eq!(tern, nats);
    let labels: Vec<&str> = tern.iter().map(|(label, _)| label.as_str()).collect();
    assert_eq!(labels, ["OK", "WARNING", "CRITICAL"]);
}
