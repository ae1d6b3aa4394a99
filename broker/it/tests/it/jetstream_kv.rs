//! Key-Value buckets through async-nats's `jetstream::kv` against tern-server
//! and nats-server 2.15.1 (see spec/kv-objectstore.md §1): bucket creation
//! and status, put/get and revisions, update with an expected revision,
//! create, history, delete and purge markers, keys, watches (one key, a
//! prefix, the whole bucket), and expiry by `max_age` and per-key TTL.
//!
//! KV is a client convention on streams: watch, keys and history run on
//! ordered push consumers (`last_per_subject`, `new`, `all`), gets on direct
//! get. Every client call is bounded by [`TIMEOUT`], so a server that never
//! answers fails the test instead of hanging it.

use crate::common;

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv, stream::DiscardPolicy};
use common::{js, Flavor, Target, TIMEOUT};
use futures::{Stream, StreamExt};

/// Awaits a client call under [`TIMEOUT`]; panics with `what` and the error.
async fn ok<T, E: Display>(
    server: &Target,
    what: &str,
    future: impl Future<Output = Result<T, E>>,
) -> T {
    match tokio::time::timeout(TIMEOUT, future).await {
        Ok(Ok(value)) => value,
        Ok(Err(error)) => panic!("{}: {what}: {error}", server.flavor.name()),
        Err(_) => panic!(
            "{}: {what}: no result within {TIMEOUT:?}",
            server.flavor.name()
        ),
    }
}

/// Awaits a client call that must fail under [`TIMEOUT`]; returns the error.
async fn fails<T: std::fmt::Debug, E>(
    server: &Target,
    what: &str,
    future: impl Future<Output = Result<T, E>>,
) -> E {
    match tokio::time::timeout(TIMEOUT, future).await {
        Ok(Ok(value)) => panic!(
            "{}: {what}: expected an error, got {value:?}",
            server.flavor.name()
        ),
        Ok(Err(error)) => error,
        Err(_) => panic!(
            "{}: {what}: no result within {TIMEOUT:?}",
            server.flavor.name()
        ),
    }
}

/// The next item of a watch/history/keys stream, bounded by [`TIMEOUT`].
async fn next_item<T, E: Display>(
    server: &Target,
    what: &str,
    stream: &mut (impl Stream<Item = Result<T, E>> + Unpin),
) -> T {
    match tokio::time::timeout(TIMEOUT, stream.next()).await {
        Ok(Some(Ok(item))) => item,
        Ok(Some(Err(error))) => panic!("{}: {what}: {error}", server.flavor.name()),
        Ok(None) => panic!("{}: {what}: stream ended", server.flavor.name()),
        Err(_) => panic!(
            "{}: {what}: nothing within {TIMEOUT:?}",
            server.flavor.name()
        ),
    }
}

/// Every item of a finite stream (history, keys), bounded by [`TIMEOUT`].
async fn collect_all<T, E: Display>(
    server: &Target,
    what: &str,
    stream: impl Stream<Item = Result<T, E>>,
) -> Vec<T> {
    let items = ok(server, what, async {
        let mut items = Vec::new();
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            items.push(item?);
        }
        Ok::<_, E>(items)
    })
    .await;
    items
}

/// A bucket with `history` values per key, everything else default.
async fn bucket(
    server: &Target,
    context: &jetstream::Context,
    name: &str,
    history: i64,
) -> kv::Store {
    ok(
        server,
        &format!("create bucket {name}"),
        context.create_key_value(kv::Config {
            bucket: name.to_string(),
            history,
            ..Default::default()
        }),
    )
    .await
}

/// `(key, value, revision, operation)` of an entry, for whole-list asserts.
fn summary(entry: &kv::Entry) -> (String, String, u64, kv::Operation) {
    (
        entry.key.clone(),
        String::from_utf8_lossy(&entry.value).into_owned(),
        entry.revision,
        entry.operation,
    )
}

fn row(
    key: &str,
    value: &str,
    revision: u64,
    operation: kv::Operation,
) -> (String, String, u64, kv::Operation) {
    (key.to_string(), value.to_string(), revision, operation)
}

async fn kv_bucket_put_get_status(flavor: Flavor) {
    let server = js::start(flavor);
    let context = jetstream::new(server.connect().await);
    let store = bucket(&server, &context, "basic", 5).await;
    assert_eq!(store.name, "basic");
    assert_eq!(store.stream_name, "KV_basic");

    let status = ok(&server, "status", store.status()).await;
    assert_eq!(status.bucket(), "basic");
    assert_eq!(status.history(), 5);
    assert_eq!(status.values(), 0);
    assert_eq!(status.max_age(), Duration::ZERO);
    let config = &status.info.config;
    assert_eq!(config.subjects, vec!["$KV.basic.>".to_string()]);
    assert_eq!(config.discard, DiscardPolicy::New);
    assert!(config.allow_rollup && config.deny_delete && config.allow_direct);

    // Revisions are the bucket stream's sequences.
    assert_eq!(ok(&server, "put a", store.put("a", "1".into())).await, 1);
    assert_eq!(ok(&server, "put b", store.put("b", "x".into())).await, 2);
    assert_eq!(ok(&server, "put a", store.put("a", "2".into())).await, 3);
    assert_eq!(
        ok(
            &server,
            "put dotted",
            store.put("dir.sub/k=v_1-2", "d".into())
        )
        .await,
        4
    );

    assert_eq!(
        ok(&server, "get a", store.get("a")).await.as_deref(),
        Some(&b"2"[..])
    );
    assert_eq!(
        ok(&server, "get dotted", store.get("dir.sub/k=v_1-2"))
            .await
            .as_deref(),
        Some(&b"d"[..])
    );
    assert_eq!(ok(&server, "get missing", store.get("missing")).await, None);
    assert!(ok(&server, "entry missing", store.entry("missing"))
        .await
        .is_none());

    let entry = ok(&server, "entry a", store.entry("a"))
        .await
        .expect("a exists");
    assert_eq!(summary(&entry), row("a", "2", 3, kv::Operation::Put));
    assert_eq!(entry.bucket, "basic");
    let first = ok(&server, "entry a@1", store.entry_for_revision("a", 1))
        .await
        .expect("revision 1 kept (history 5)");
    assert_eq!(summary(&first), row("a", "1", 1, kv::Operation::Put));
    // Revision 2 belongs to another key.
    assert!(ok(&server, "entry a@2", store.entry_for_revision("a", 2))
        .await
        .is_none());

    // The handle's status is cached; a fresh handle reads the current state.
    let reopened = ok(&server, "get_key_value", context.get_key_value("basic")).await;
    let status = ok(&server, "status", reopened.status()).await;
    assert_eq!(status.values(), 4);
    assert_eq!(status.info.state.last_sequence, 4);

    // Creating the same bucket again is idempotent; a missing bucket errors.
    bucket(&server, &context, "basic", 5).await;
    fails(
        &server,
        "open missing bucket",
        context.get_key_value("nope"),
    )
    .await;

    ok(&server, "delete bucket", context.delete_key_value("basic")).await;
    fails(
        &server,
        "open deleted bucket",
        context.get_key_value("basic"),
    )
    .await;
}

async fn kv_update_and_create(flavor: Flavor) {
    let server = js::start(flavor);
    let context = jetstream::new(server.connect().await);
    let store = bucket(&server, &context, "upd", 10).await;

    let first = ok(&server, "create k", store.create("k", "v1".into())).await;
    assert_eq!(first, 1);
    let error = fails(
        &server,
        "create existing k",
        store.create("k", "again".into()),
    )
    .await;
    assert_eq!(error.kind(), kv::CreateErrorKind::AlreadyExists, "{error}");

    let second = ok(&server, "update k@1", store.update("k", "v2".into(), first)).await;
    assert_eq!(second, 2);
    let error = fails(
        &server,
        "update k@1 again",
        store.update("k", "v3".into(), first),
    )
    .await;
    assert_eq!(
        error.kind(),
        kv::UpdateErrorKind::WrongLastRevision,
        "{error}"
    );
    // Revision 0 means "the key must not exist".
    let error = fails(&server, "update k@0", store.update("k", "v3".into(), 0)).await;
    assert_eq!(
        error.kind(),
        kv::UpdateErrorKind::WrongLastRevision,
        "{error}"
    );
    assert_eq!(
        ok(&server, "get k", store.get("k")).await.as_deref(),
        Some(&b"v2"[..])
    );

    // Another key's write moves the stream sequence, not k's revision.
    assert_eq!(
        ok(&server, "put other", store.put("other", "o".into())).await,
        3
    );
    let error = fails(&server, "update k@3", store.update("k", "v3".into(), 3)).await;
    assert_eq!(
        error.kind(),
        kv::UpdateErrorKind::WrongLastRevision,
        "{error}"
    );
    assert_eq!(
        ok(&server, "update k@2", store.update("k", "v3".into(), 2)).await,
        4
    );

    // After a delete, create succeeds again (over the delete marker).
    ok(&server, "delete k", store.delete("k")).await;
    assert_eq!(ok(&server, "get deleted k", store.get("k")).await, None);
    let recreated = ok(&server, "create deleted k", store.create("k", "new".into())).await;
    assert_eq!(recreated, 6);
    assert_eq!(
        ok(&server, "get k", store.get("k")).await.as_deref(),
        Some(&b"new"[..])
    );
}

async fn kv_history_delete_purge(flavor: Flavor) {
    let server = js::start(flavor);
    let context = jetstream::new(server.connect().await);
    let store = bucket(&server, &context, "hist", 10).await;

    for value in ["v1", "v2", "v3"] {
        ok(&server, "put k", store.put("k", value.into())).await;
    }
    ok(&server, "put other", store.put("other", "o".into())).await;
    ok(&server, "delete k", store.delete("k")).await;

    let history = ok(&server, "history k", store.history("k")).await;
    let entries = collect_all(&server, "history k", history).await;
    let rows: Vec<_> = entries.iter().map(summary).collect();
    assert_eq!(
        rows,
        vec![
            row("k", "v1", 1, kv::Operation::Put),
            row("k", "v2", 2, kv::Operation::Put),
            row("k", "v3", 3, kv::Operation::Put),
            row("k", "", 5, kv::Operation::Delete),
        ],
        "{}",
        flavor.name()
    );
    // Delta counts down to the newest entry.
    let deltas: Vec<u64> = entries.iter().map(|entry| entry.delta).collect();
    assert_eq!(deltas, vec![3, 2, 1, 0]);

    // A deleted key: get is None, entry is the delete marker.
    assert_eq!(ok(&server, "get deleted", store.get("k")).await, None);
    let marker = ok(&server, "entry deleted", store.entry("k"))
        .await
        .expect("the delete marker is the last entry");
    assert_eq!(summary(&marker), row("k", "", 5, kv::Operation::Delete));

    // Purge keeps only its own marker (rollup of the subject).
    ok(&server, "purge k", store.purge("k")).await;
    let entries = collect_all(
        &server,
        "history k after purge",
        ok(&server, "history", store.history("k")).await,
    )
    .await;
    let rows: Vec<_> = entries.iter().map(summary).collect();
    assert_eq!(
        rows,
        vec![row("k", "", 6, kv::Operation::Purge)],
        "{}",
        flavor.name()
    );
    assert_eq!(ok(&server, "get purged", store.get("k")).await, None);
    let status = ok(
        &server,
        "status",
        ok(&server, "reopen", context.get_key_value("hist"))
            .await
            .status(),
    )
    .await;
    // "other" and the purge marker.
    assert_eq!(status.values(), 2);

    // History is bounded by the bucket's history setting.
    let short = bucket(&server, &context, "short", 2).await;
    for value in ["a", "b", "c"] {
        ok(&server, "put s", short.put("s", value.into())).await;
    }
    let entries = collect_all(
        &server,
        "history s",
        ok(&server, "history", short.history("s")).await,
    )
    .await;
    let rows: Vec<_> = entries.iter().map(summary).collect();
    assert_eq!(
        rows,
        vec![
            row("s", "b", 2, kv::Operation::Put),
            row("s", "c", 3, kv::Operation::Put)
        ]
    );
}

async fn kv_keys(flavor: Flavor) {
    let server = js::start(flavor);
    let context = jetstream::new(server.connect().await);
    let store = bucket(&server, &context, "keys", 3).await;

    let keys: Vec<String> = collect_all(
        &server,
        "keys of empty bucket",
        ok(&server, "keys", store.keys()).await,
    )
    .await;
    assert!(keys.is_empty(), "{keys:?}");

    for (key, value) in [("a", "1"), ("b", "1"), ("c.d", "1"), ("a", "2"), ("e", "1")] {
        ok(&server, "put", store.put(key, value.into())).await;
    }
    ok(&server, "delete b", store.delete("b")).await;
    ok(&server, "purge e", store.purge("e")).await;
    let mut keys: Vec<String> =
        collect_all(&server, "keys", ok(&server, "keys", store.keys()).await).await;
    keys.sort();
    assert_eq!(
        keys,
        vec!["a".to_string(), "c.d".to_string()],
        "{}",
        flavor.name()
    );
}

async fn kv_watch_key_and_prefix(flavor: Flavor) {
    let server = js::start(flavor);
    let context = jetstream::new(server.connect().await);
    let store = bucket(&server, &context, "watch", 5).await;

    ok(&server, "put cfg.a", store.put("cfg.a", "a1".into())).await; // 1
    ok(&server, "put cfg.b", store.put("cfg.b", "b1".into())).await; // 2
    ok(&server, "put cfg.a", store.put("cfg.a", "a2".into())).await; // 3
    ok(&server, "put other", store.put("other", "o1".into())).await; // 4

    // Initial values (the last per key, in stream order), then live updates.
    let mut prefix = ok(&server, "watch cfg.>", store.watch_with_history("cfg.>")).await;
    let first = next_item(&server, "watch cfg.> initial 1", &mut prefix).await;
    let second = next_item(&server, "watch cfg.> initial 2", &mut prefix).await;
    assert_eq!(
        vec![summary(&first), summary(&second)],
        vec![
            row("cfg.b", "b1", 2, kv::Operation::Put),
            row("cfg.a", "a2", 3, kv::Operation::Put),
        ],
        "{}",
        flavor.name()
    );
    assert!(!first.seen_current && second.seen_current);

    // Updates only on one key.
    let mut single = ok(&server, "watch cfg.a", store.watch("cfg.a")).await;

    ok(&server, "put cfg.a", store.put("cfg.a", "a3".into())).await; // 5
    ok(&server, "put other", store.put("other", "o2".into())).await; // 6
    ok(&server, "delete cfg.b", store.delete("cfg.b")).await; // 7
    ok(&server, "put cfg.c", store.put("cfg.c", "c1".into())).await; // 8
    ok(&server, "purge cfg.a", store.purge("cfg.a")).await; // 9

    let mut live = Vec::new();
    for index in 0..4 {
        live.push(summary(
            &next_item(&server, &format!("watch cfg.> live {index}"), &mut prefix).await,
        ));
    }
    assert_eq!(
        live,
        vec![
            row("cfg.a", "a3", 5, kv::Operation::Put),
            row("cfg.b", "", 7, kv::Operation::Delete),
            row("cfg.c", "c1", 8, kv::Operation::Put),
            row("cfg.a", "", 9, kv::Operation::Purge),
        ],
        "{}",
        flavor.name()
    );
    let single_rows = vec![
        summary(&next_item(&server, "watch cfg.a 1", &mut single).await),
        summary(&next_item(&server, "watch cfg.a 2", &mut single).await),
    ];
    assert_eq!(
        single_rows,
        vec![
            row("cfg.a", "a3", 5, kv::Operation::Put),
            row("cfg.a", "", 9, kv::Operation::Purge),
        ]
    );

    // A watch with history on a key without values delivers only updates.
    let mut empty = ok(&server, "watch none.x", store.watch_with_history("none.x")).await;
    ok(&server, "put none.x", store.put("none.x", "n".into())).await; // 10
    let entry = next_item(&server, "watch none.x", &mut empty).await;
    assert_eq!(summary(&entry), row("none.x", "n", 10, kv::Operation::Put));
    assert!(entry.seen_current);
}

async fn kv_watch_all(flavor: Flavor) {
    let server = js::start(flavor);
    let context = jetstream::new(server.connect().await);
    let store = bucket(&server, &context, "all", 5).await;
    ok(&server, "put before", store.put("before", "b".into())).await; // 1

    // watch_all delivers only what happens after it starts.
    let mut watch = ok(&server, "watch_all", store.watch_all()).await;
    ok(&server, "put x", store.put("x", "1".into())).await; // 2
    ok(&server, "put y.z", store.put("y.z", "2".into())).await; // 3
    ok(&server, "delete x", store.delete("x")).await; // 4
    ok(&server, "purge before", store.purge("before")).await; // 5
    ok(&server, "put x", store.put("x", "3".into())).await; // 6

    let mut rows = Vec::new();
    for index in 0..5 {
        rows.push(summary(
            &next_item(&server, &format!("watch_all {index}"), &mut watch).await,
        ));
    }
    assert_eq!(
        rows,
        vec![
            row("x", "1", 2, kv::Operation::Put),
            row("y.z", "2", 3, kv::Operation::Put),
            row("x", "", 4, kv::Operation::Delete),
            row("before", "", 5, kv::Operation::Purge),
            row("x", "3", 6, kv::Operation::Put),
        ],
        "{}",
        flavor.name()
    );

    // From a revision: everything from that sequence on.
    let mut from = ok(
        &server,
        "watch_all_from_revision 4",
        store.watch_all_from_revision(4),
    )
    .await;
    let mut rows = Vec::new();
    for index in 0..3 {
        rows.push(summary(
            &next_item(&server, &format!("watch from 4: {index}"), &mut from).await,
        ));
    }
    assert_eq!(
        rows,
        vec![
            row("x", "", 4, kv::Operation::Delete),
            row("before", "", 5, kv::Operation::Purge),
            row("x", "3", 6, kv::Operation::Put),
        ]
    );
}

/// Polls `get(key)` until it is None (the server expired the value).
async fn wait_expired(server: &Target, store: &kv::Store, key: &str) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if ok(server, "get while expiring", store.get(key))
            .await
            .is_none()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{}: {key} did not expire within {TIMEOUT:?}",
            server.flavor.name()
        );
        // Poll interval of a bounded wait, not synchronisation.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn kv_max_age_and_ttl(flavor: Flavor) {
    let server = js::start(flavor);
    let context = jetstream::new(server.connect().await);

    let aging = ok(
        &server,
        "create aging bucket",
        context.create_key_value(kv::Config {
            bucket: "aging".into(),
            history: 2,
            max_age: Duration::from_secs(1),
            ..Default::default()
        }),
    )
    .await;
    let status = ok(&server, "status", aging.status()).await;
    assert_eq!(status.max_age(), Duration::from_secs(1));
    ok(&server, "put k", aging.put("k", "v".into())).await;
    assert_eq!(
        ok(&server, "get k", aging.get("k")).await.as_deref(),
        Some(&b"v"[..])
    );
    wait_expired(&server, &aging, "k").await;
    assert!(ok(&server, "entry k", aging.entry("k")).await.is_none());

    // Per-key TTL needs limit markers (allow_msg_ttl + subject delete markers).
    let marked = ok(
        &server,
        "create bucket with limit markers",
        context.create_key_value(kv::Config {
            bucket: "marked".into(),
            history: 2,
            limit_markers: Some(Duration::from_secs(5)),
            ..Default::default()
        }),
    )
    .await;
    let config = &ok(&server, "status", marked.status()).await.info.config;
    assert!(config.allow_message_ttl);
    assert_eq!(
        config.subject_delete_marker_ttl,
        Some(Duration::from_secs(5))
    );
    ok(&server, "put keep", marked.put("keep", "forever".into())).await;
    let revision = ok(
        &server,
        "create short with ttl",
        marked.create_with_ttl("short", "gone soon".into(), Duration::from_secs(1)),
    )
    .await;
    assert_eq!(revision, 2);
    wait_expired(&server, &marked, "short").await;
    // The server's marker reads as a purge.
    let marker = ok(&server, "entry short", marked.entry("short"))
        .await
        .expect("a delete marker replaces the expired value");
    assert_eq!(marker.operation, kv::Operation::Purge, "{marker:?}");
    assert!(marker.revision > revision);
    assert_eq!(
        ok(&server, "get keep", marked.get("keep")).await.as_deref(),
        Some(&b"forever"[..])
    );
    // The key can be created again over the marker.
    ok(
        &server,
        "create short again",
        marked.create("short", "back".into()),
    )
    .await;

    // A TTL on a bucket without limit markers is refused by the server.
    let plain = bucket(&server, &context, "plain", 1).await;
    fails(
        &server,
        "create with ttl on plain bucket",
        plain.create_with_ttl("k", "v".into(), Duration::from_secs(5)),
    )
    .await;
}

differential_cluster!(kv_bucket_put_get_status);
differential_cluster!(kv_update_and_create);
differential_cluster!(kv_history_delete_purge);
differential_cluster!(kv_keys);
differential_cluster!(kv_watch_key_and_prefix);
differential_cluster!(kv_watch_all);
differential_cluster!(kv_max_age_and_ttl);
