//! The design's verification checklist, typed line by line as a user types
//! it (the `nats` CLI's spellings, `consumer add … --durable` included),
//! through `tern` against a 3-node cluster with TLS on the client port and
//! NKey authentication, of tern and of nats-server side by side: the same
//! lines, the same expectations.
//!
//! The user's connection is a nats CLI context (`~/.config/nats/context/`,
//! selected in `context.txt`: the server URL, the CA, the NKey seed), so
//! the lines carry no connection flags, as a user's do. Every wait is a
//! bounded poll: the cluster electing its leaders, the replicas catching
//! up.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cluster::{Cluster, CONVERGE};
use super::credentials::{certificates, nkey_user};
use super::{on_both_flavors, run_command, tern_command, Flavor, Run};

/// Poll interval of the bounded waits below.
const POLL: Duration = Duration::from_millis(50);

/// A command line split as a POSIX shell splits it (quotes; no
/// expansion): what the user's shell hands the program.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for character in line.chars() {
        match (quote, character) {
            (Some(open), close) if open == close => quote = None,
            (Some(_), inner) => word.get_or_insert_with(String::new).push(inner),
            (None, '"' | '\'') => {
                quote = Some(character);
                word.get_or_insert_with(String::new);
            }
            (None, ' ') => words.extend(word.take()),
            (None, other) => word.get_or_insert_with(String::new).push(other),
        }
    }
    assert!(quote.is_none(), "an open quote in {line:?}");
    words.extend(word);
    words
}

/// One user's shell: a nats CLI context selected in its configuration
/// directory (the cluster's TLS URL, the CA, the NKey seed).
struct Session {
    flavor: Flavor,
    config_home: PathBuf,
}

impl Session {
    fn new(flavor: Flavor, directory: &Path, url: &str, ca: &Path, seed: &Path) -> Session {
        let config_home = directory.join(format!("config-{flavor:?}"));
        let contexts = config_home.join("nats/context");
        std::fs::create_dir_all(&contexts).expect("context directory");
        let context = serde_json::json!({
            "description": "the checklist's cluster",
            "url": url,
            "ca": ca,
            "nkey": seed,
        });
        std::fs::write(contexts.join("checklist.json"), context.to_string()).expect("context");
        std::fs::write(config_home.join("nats/context.txt"), "checklist\n").expect("selection");
        Session {
            flavor,
            config_home,
        }
    }

    /// `tern <line>`, the line as the user types it.
    fn tern(&self, line: &str) -> Run {
        let words = shell_words(line);
        let args: Vec<&str> = words.iter().map(String::as_str).collect();
        let mut command = tern_command(&args);
        command.env("XDG_CONFIG_HOME", &self.config_home);
        run_command(command, &args)
    }

    /// A line that must succeed (at once, on both servers): its stdout.
    fn ok(&self, line: &str) -> String {
        let run = self.tern(line);
        assert_eq!(run.code, Some(0), "{:?}: {line}: {run:?}", self.flavor);
        run.stdout
    }

    /// `line` until its output satisfies `done` (a cluster's views
    /// converging), bounded; the last output.
    fn until(&self, line: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + CONVERGE;
        loop {
            let output = self.ok(line);
            if done(&output) {
                return output;
            }
            assert!(
                Instant::now() < deadline,
                "{:?}: {line}: never as expected: {output}",
                self.flavor
            );
            std::thread::sleep(POLL);
        }
    }

    /// `line` until it answers something else than "JetStream not ready"
    /// (503, no responders, no answer while the meta group elects).
    fn when_ready(&self, line: &str) -> Run {
        let deadline = Instant::now() + CONVERGE;
        loop {
            let run = self.tern(&format!("--timeout 2s {line}"));
            let waiting = run.code != Some(0)
                && ["code 503", "no responders", "no answer within", "timed out"]
                    .iter()
                    .any(|sign| run.stderr.to_lowercase().contains(sign));
            if !waiting {
                return run;
            }
            assert!(
                Instant::now() < deadline,
                "{:?}: never ready: {line}: {run:?}",
                self.flavor
            );
            std::thread::sleep(POLL);
        }
    }

    /// A `server check` line polled until it is OK (the replicas catching
    /// up), bounded; its status line.
    fn check_until_ok(&self, line: &str) -> String {
        let deadline = Instant::now() + CONVERGE;
        loop {
            let run = self.tern(line);
            if run.code == Some(0) {
                assert!(run.stdout.starts_with("OK: "), "{:?}: {run:?}", self.flavor);
                return run.stdout;
            }
            assert!(
                Instant::now() < deadline,
                "{:?}: {line}: never OK: {run:?}",
                self.flavor
            );
            std::thread::sleep(POLL);
        }
    }
}

/// The labelled value of a `Label: value` line of an info block.
fn field<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|line| line.trim_start().strip_prefix(&format!("{label}: ")))
}

/// TLS on the client port (no client certificates) and one NKey user, in
/// each server's config format.
fn secured(flavor: Flavor, directory: &Path, public_key: &str) -> String {
    let (cert, key) = (directory.join("server.pem"), directory.join("server.key"));
    match flavor {
        Flavor::Tern => format!(
            "[tls]\ncert_file = {cert:?}\nkey_file = {key:?}\n\n[authorization]\nusers = [ {{ nkey = \"{public_key}\" }} ]\n"
        ),
        Flavor::Nats => format!(
            "tls {{\n  cert_file: {cert:?}\n  key_file: {key:?}\n}}\nauthorization {{\n  users = [ {{nkey: {public_key}}} ]\n}}\n"
        ),
    }
}

fn checklist(flavor: Flavor, directory: &Path, public_key: &str, seed: &Path) {
    let started = Instant::now();
    let cluster = Cluster::start_with(flavor, &secured(flavor, directory, public_key));
    let url = cluster.node(1).url().replace("nats://", "tls://");
    let user = Session::new(flavor, directory, &url, &directory.join("ca.pem"), seed);

    // A replicated stream, as the design types it.
    let created = user.when_ready(
        r#"stream add ORDERS --subjects "orders.>" --storage file --replicas 3 --max-age 30d --max-bytes 500GB --defaults"#,
    );
    let text = &created.stdout;
    assert_eq!(created.code, Some(0), "{flavor:?}: {created:?}");
    assert!(
        text.starts_with("Stream ORDERS was created"),
        "{flavor:?}: {text}"
    );
    assert_eq!(
        field(text, "Subjects"),
        Some("orders.>"),
        "{flavor:?}: {text}"
    );
    assert_eq!(field(text, "Replicas"), Some("3"), "{flavor:?}: {text}");
    assert_eq!(field(text, "Storage"), Some("file"), "{flavor:?}: {text}");
    assert_eq!(
        field(text, "Maximum Age"),
        Some("30d"),
        "{flavor:?}: {text}"
    );
    // A stream whose leader has not answered the listing yet is listed
    // as inaccessible (nats-server under load): the row comes once it has.
    user.until("stream ls", |listed| {
        listed
            .lines()
            .any(|row| row.starts_with("ORDERS ") && row.contains("orders.>"))
    });

    let published = user.tern(r#"pub orders.new "order {{Count}}" --count 100"#);
    assert_eq!(published.code, Some(0), "{flavor:?}: {published:?}");
    assert!(
        published
            .stderr
            .contains("each acknowledged; last stored in Stream: ORDERS Sequence: 100"),
        "{flavor:?}: {published:?}"
    );
    let one = user.tern(r#"pub orders.rush '{"id": 101}' -J -H Nats-Msg-Id:101"#);
    assert!(
        one.stderr
            .contains("Stored in Stream: ORDERS Sequence: 101"),
        "{flavor:?}: {one:?}"
    );

    let info = user.ok("stream info ORDERS");
    assert_eq!(field(&info, "Messages"), Some("101"), "{flavor:?}: {info}");
    assert!(field(&info, "Leader").is_some(), "{flavor:?}: {info}");
    let replicas = info
        .lines()
        .filter(|line| line.trim_start().starts_with("Replica: "))
        .count();
    assert_eq!(replicas, 2, "{flavor:?}: {info}");

    // The pull consumer, with the flag spellings the design uses.
    let added = user.ok(
        "consumer add ORDERS ORDER_PROCESSOR --durable --pull --ack explicit --max-deliver 5 --wait 30s --filter orders.new --defaults",
    );
    assert!(
        added.starts_with("Consumer ORDERS > ORDER_PROCESSOR was created"),
        "{flavor:?}: {added}"
    );
    for (label, value) in [
        ("Durable Name", "ORDER_PROCESSOR"),
        ("Mode", "pull"),
        ("Ack Policy", "explicit"),
        ("Ack Wait", "30s"),
        ("Maximum Deliveries", "5"),
        ("Filter Subject", "orders.new"),
    ] {
        assert_eq!(field(&added, label), Some(value), "{flavor:?}: {added}");
    }
    assert!(
        user.ok("consumer ls ORDERS").contains("ORDER_PROCESSOR"),
        "{flavor:?}"
    );
    let bodies = user.ok("consumer next ORDERS ORDER_PROCESSOR --count 10");
    let expected: Vec<String> = (1..=10).map(|count| format!("order {count}")).collect();
    assert_eq!(
        bodies.lines().collect::<Vec<_>>(),
        expected,
        "{flavor:?}: {bodies}"
    );
    let consumer = user.ok("consumer info ORDERS ORDER_PROCESSOR");
    assert_eq!(
        field(&consumer, "Unprocessed Messages"),
        Some("90"),
        "{flavor:?}: {consumer}"
    );
    assert_eq!(
        field(&consumer, "Outstanding Acks"),
        Some("0"),
        "{flavor:?}: {consumer}"
    );

    // Key-value and object stores, replicated.
    assert!(
        user.ok("kv add CONFIG --history 5 --replicas 3")
            .starts_with("Bucket CONFIG created: history 5"),
        "{flavor:?}"
    );
    assert_eq!(
        user.ok("kv put CONFIG db.url pg://orders").trim(),
        "pg://orders"
    );
    let value = user.ok("kv get CONFIG db.url");
    assert!(
        value.starts_with("CONFIG > db.url revision: 1 created @ "),
        "{flavor:?}: {value}"
    );
    assert_eq!(value.lines().last(), Some("pg://orders"), "{flavor:?}");
    assert!(
        user.ok("object add FILES --replicas 3")
            .starts_with("Bucket FILES created"),
        "{flavor:?}"
    );
    let file = directory.join(format!("report-{flavor:?}.bin"));
    let content: Vec<u8> = (0..300_000u32).map(|index| (index % 251) as u8).collect();
    std::fs::write(&file, &content).expect("the report");
    let stored = user.ok(&format!("object put FILES {}", file.display()));
    assert!(
        stored.starts_with(&format!("Stored report-{flavor:?}.bin in FILES: 293.0 KiB")),
        "{flavor:?}: {stored}"
    );
    let back = directory.join(format!("back-{flavor:?}.bin"));
    user.ok(&format!(
        "object get FILES report-{flavor:?}.bin -O {}",
        back.display()
    ));
    assert!(
        std::fs::read(&back).expect("read back") == content,
        "{flavor:?}"
    );

    // Health, as a monitoring system asks for it.
    assert!(
        user.ok("server check connection")
            .starts_with(&format!("OK: connected to {url}")),
        "{flavor:?}"
    );
    user.check_until_ok(
        "server check stream --stream ORDERS --peer-expect 3 --peer-lag-critical 100 --peer-seen-critical 5s --msgs-warn 10 --msgs-critical 1",
    );
    user.check_until_ok(
        "server check consumer --stream ORDERS --consumer ORDER_PROCESSOR --outstanding-ack-critical 100 --unprocessed-critical 1000 --last-delivery-critical 5m",
    );
    user.check_until_ok("server check jetstream");
    let monitors = cluster.monitors();
    let cluster_line = user.check_until_ok(&format!(
        "server check cluster --monitor {monitors} --expect 3"
    ));
    assert!(
        cluster_line.contains(": 3 of 3 nodes present, meta leader n"),
        "{flavor:?}: {cluster_line}"
    );
    user.check_until_ok(&format!(
        "server check meta --monitor {monitors} --expect 3 --lag-critical 100 --seen-critical 10s"
    ));

    // And away again.
    user.ok("consumer rm ORDERS ORDER_PROCESSOR -f");
    user.ok("stream rm ORDERS -f");
    assert_eq!(
        user.ok("stream ls").trim(),
        "No Streams defined, pass -a to include system streams",
        "{flavor:?}"
    );
    let all = user.ok("stream ls -a");
    assert!(
        all.contains("KV_CONFIG") && all.contains("OBJ_FILES"),
        "{flavor:?}: {all}"
    );
    let gone = user.tern("stream info ORDERS");
    assert_eq!(
        gone.one_line_error(1),
        "tern: stream info ORDERS: stream not found (code 404, err_code 10059)",
        "{flavor:?}"
    );
    eprintln!("{flavor:?}: the checklist in {:?}", started.elapsed());
}

#[test]
fn the_verification_checklist_on_a_tls_nkey_cluster() {
    let directory = tempfile::tempdir().expect("temp dir");
    certificates(directory.path());
    let (public_key, seed) = nkey_user(directory.path());
    on_both_flavors(|flavor| checklist(flavor, directory.path(), &public_key, &seed));
}
