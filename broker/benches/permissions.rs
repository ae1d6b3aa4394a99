//! The permission check's cost per message (not a test):
//! `cargo bench -p tern-broker --bench permissions`.
//!
//! What `handle_publish` pays per PUB for a connection whose user has
//! publish rules (docs/security.md "Cost of the permission check"):
//! - `cache_hit`: the same few subjects over and over (the common case),
//!   one hash lookup in the connection's verdict cache;
//! - `cache_miss`: a new subject every time (inbox-like), a walk of the
//!   allow and deny tries plus a cache insertion (and a prune every 32);
//! - `rules_only`: the trie walk alone, for rule sets of 5 and 500 entries.
//!
//! One line per case: `bench=permissions_NAME ns_per_check=..`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use tern_broker::auth::permissions::{ConnectionPermissions, Permissions};
use tern_broker::auth::subjects::SubjectSet;

const CHECKS: usize = 5_000_000;

fn rules(allow_count: usize) -> Permissions {
    let mut allow = SubjectSet::new();
    for pattern in ["bench.>", "orders.>", "$JS.API.>"] {
        allow.insert_subject(pattern).unwrap();
    }
    for index in 3..allow_count {
        allow
            .insert_subject(&format!("tenant{index}.*.events.>"))
            .unwrap();
    }
    let mut deny = SubjectSet::new();
    deny.insert_subject("bench.secret.>").unwrap();
    deny.insert_subject("$JS.API.STREAM.DELETE.>").unwrap();
    Permissions {
        publish_allow: Some(allow),
        publish_deny: Some(deny),
        ..Permissions::default()
    }
}

fn report(name: &str, started: Instant, checks: usize) {
    let nanos = started.elapsed().as_nanos() as f64 / checks as f64;
    println!("bench=permissions_{name} checks={checks} ns_per_check={nanos:.1}");
}

fn main() {
    // `cargo test --all-targets` runs harness-less benches too: measure only
    // under `cargo bench` (which passes `--bench`).
    if !std::env::args().any(|argument| argument == "--bench") {
        eprintln!("benchmark: skipped outside `cargo bench`");
        return;
    }
    let now = Instant::now();
    let connection = ConnectionPermissions::new(Arc::new(rules(5)), now);
    let subjects: Vec<String> = (0..8)
        .map(|index| format!("bench.latency.{index}"))
        .collect();
    let started = Instant::now();
    for index in 0..CHECKS {
        let subject = &subjects[index % subjects.len()];
        assert!(black_box(
            connection.publish_allowed(subject.as_bytes(), now)
        ));
    }
    report("cache_hit", started, CHECKS);

    let unique: Vec<String> = (0..CHECKS / 10)
        .map(|index| format!("bench.inbox.{index:08}"))
        .collect();
    let started = Instant::now();
    for subject in &unique {
        assert!(black_box(
            connection.publish_allowed(subject.as_bytes(), now)
        ));
    }
    report("cache_miss", started, unique.len());

    for allow_count in [5, 500] {
        let rules = rules(allow_count);
        let started = Instant::now();
        for index in 0..CHECKS {
            let subject = &subjects[index % subjects.len()];
            assert!(black_box(rules.publish_allowed(subject.as_bytes())));
        }
        report(&format!("rules_only_{allow_count}"), started, CHECKS);
    }
}
