//! Object store buckets through async-nats's `jetstream::object_store`
//! against tern-server and nats-server 2.15.1 (see spec/kv-objectstore.md
//! §2): a multi-chunk object put and read back byte for byte (the client
//! checks the SHA-256 digest while reading), its info (size, chunks, digest,
//! nuid), custom chunk sizes, small and empty objects, list, overwrite (old
//! chunks purged), delete, and the bucket's stream state after each.
//!
//! Reading an object runs an ordered push consumer over its chunk subject;
//! info is a direct get of the last meta message. Every client call is
//! bounded by [`TIMEOUT`].

use crate::common;

use std::fmt::Display;
use std::future::Future;

use async_nats::jetstream::{self, object_store};
use common::{js, Flavor, Target, TIMEOUT};
use futures::StreamExt;
use tokio::io::AsyncReadExt;

const DEFAULT_CHUNK_BYTES: usize = 128 * 1024;

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

/// Deterministic pseudo-random bytes (xorshift64*), so a failure reproduces.
fn random_bytes(seed: u64, count: usize) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(count + 8);
    while out.len() < count {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(count);
    out
}

async fn bucket(
    server: &Target,
    context: &jetstream::Context,
    name: &str,
) -> object_store::ObjectStore {
    ok(
        server,
        &format!("create object store {name}"),
        context.create_object_store(object_store::Config {
            bucket: name.to_string(),
            ..Default::default()
        }),
    )
    .await
}

async fn put(
    server: &Target,
    store: &object_store::ObjectStore,
    meta: object_store::ObjectMetadata,
    data: &[u8],
) -> object_store::ObjectInfo {
    let what = format!("put {} ({} bytes)", meta.name, data.len());
    let mut reader = data;
    ok(server, &what, store.put(meta, &mut reader)).await
}

fn named(name: &str) -> object_store::ObjectMetadata {
    object_store::ObjectMetadata {
        name: name.to_string(),
        ..Default::default()
    }
}

/// The whole object, read through the client (which checks the digest).
async fn read_object(server: &Target, store: &object_store::ObjectStore, name: &str) -> Vec<u8> {
    let mut object = ok(server, &format!("get {name}"), store.get(name)).await;
    let mut data = Vec::new();
    ok(
        server,
        &format!("read {name}"),
        object.read_to_end(&mut data),
    )
    .await;
    data
}

/// Asserts an object reads back exactly as `expected`.
async fn expect_content(
    server: &Target,
    store: &object_store::ObjectStore,
    name: &str,
    expected: &[u8],
) {
    let data = read_object(server, store, name).await;
    assert_eq!(
        data.len(),
        expected.len(),
        "{}: {name} size",
        server.flavor.name()
    );
    assert!(
        data == expected,
        "{}: {name} content differs",
        server.flavor.name()
    );
}

/// `(messages, first_seq, last_seq)` of the bucket's stream.
async fn stream_numbers(client: &async_nats::Client, stream: &str) -> (u64, u64, u64) {
    let state = js::state(client, stream).await;
    (
        state["messages"].as_u64().unwrap(),
        state["first_seq"].as_u64().unwrap(),
        state["last_seq"].as_u64().unwrap(),
    )
}

/// Every live object the bucket lists.
async fn list_all(
    server: &Target,
    store: &object_store::ObjectStore,
) -> Vec<object_store::ObjectInfo> {
    let list = ok(server, "list", store.list()).await;
    ok(server, "list items", async {
        list.collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
    })
    .await
}

fn is_sha256_digest(digest: &Option<String>) -> bool {
    digest.as_deref().is_some_and(|digest| {
        digest.len() == "SHA-256=".len() + 44 && digest.starts_with("SHA-256=")
    })
}

async fn object_multi_chunk_round_trip(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    let context = jetstream::new(client.clone());
    let store = bucket(&server, &context, "files").await;

    let data = random_bytes(0x5eed, 1 << 20);
    let put_info = put(&server, &store, named("big.bin"), &data).await;
    assert_eq!(put_info.name, "big.bin");
    assert_eq!(put_info.bucket, "files");
    assert_eq!(put_info.size, 1 << 20);
    assert_eq!(put_info.chunks, (1 << 20) / DEFAULT_CHUNK_BYTES);
    assert!(is_sha256_digest(&put_info.digest), "{:?}", put_info.digest);
    assert!(!put_info.deleted);

    // Info reads the stored meta message.
    let info = ok(&server, "info big.bin", store.info("big.bin")).await;
    assert_eq!(
        (&info.name, &info.nuid, info.size, info.chunks, &info.digest),
        (
            &put_info.name,
            &put_info.nuid,
            put_info.size,
            put_info.chunks,
            &put_info.digest
        )
    );
    assert_eq!(
        info.options
            .as_ref()
            .and_then(|options| options.max_chunk_size),
        Some(DEFAULT_CHUNK_BYTES)
    );

    // Eight chunks and one meta message.
    assert_eq!(stream_numbers(&client, "OBJ_files").await, (9, 1, 9));

    let object = ok(&server, "get big.bin", store.get("big.bin")).await;
    assert_eq!(object.info().nuid, put_info.nuid);
    expect_content(&server, &store, "big.bin", &data).await;
    // A second read (a new consumer) gives the same bytes.
    expect_content(&server, &store, "big.bin", &data).await;

    // The bucket can be opened by name; a missing one cannot.
    let reopened = ok(&server, "open files", context.get_object_store("files")).await;
    expect_content(&server, &reopened, "big.bin", &data).await;
    assert!(
        tokio::time::timeout(TIMEOUT, context.get_object_store("missing"))
            .await
            .expect("open missing bucket timed out")
            .is_err(),
        "{}: opening a missing object store must fail",
        flavor.name()
    );
}

async fn object_chunk_sizes_and_list(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    let context = jetstream::new(client.clone());
    let store = bucket(&server, &context, "sizes").await;

    let names = list_all(&server, &store).await;
    assert!(names.is_empty(), "{names:?}");

    // A small object is one chunk.
    let small = put(&server, &store, named("dir/hello.txt"), b"hello object").await;
    assert_eq!((small.size, small.chunks), (12, 1));
    assert_eq!(
        small.digest.as_deref(),
        // SHA-256 of "hello object", URL-safe base64 (spec §2.2's example).
        Some("SHA-256=XNkommlmTmnF4sMBUGJ5ZZCi1u1fMv6dTsHzyUY25Fc=")
    );
    expect_content(&server, &store, "dir/hello.txt", b"hello object").await;

    // A custom chunk size: 10 001 bytes in 1000-byte chunks is 11 chunks.
    let data = random_bytes(7, 10_001);
    let chunky = put(
        &server,
        &store,
        object_store::ObjectMetadata {
            name: "chunky".into(),
            description: Some("small chunks".into()),
            chunk_size: Some(1000),
            ..Default::default()
        },
        &data,
    )
    .await;
    assert_eq!((chunky.size, chunky.chunks), (10_001, 11));
    let info = ok(&server, "info chunky", store.info("chunky")).await;
    assert_eq!(info.description.as_deref(), Some("small chunks"));
    assert_eq!(
        info.options
            .as_ref()
            .and_then(|options| options.max_chunk_size),
        Some(1000)
    );
    expect_content(&server, &store, "chunky", &data).await;

    // An empty object has no chunks.
    let empty = put(&server, &store, named("empty"), b"").await;
    assert_eq!((empty.size, empty.chunks), (0, 0));
    expect_content(&server, &store, "empty", b"").await;

    // 1 + 11 chunks and three meta messages.
    assert_eq!(stream_numbers(&client, "OBJ_sizes").await, (15, 1, 15));

    let infos = list_all(&server, &store).await;
    let mut listed: Vec<(String, usize, usize)> = infos
        .iter()
        .map(|info| (info.name.clone(), info.size, info.chunks))
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        vec![
            ("chunky".to_string(), 10_001, 11),
            ("dir/hello.txt".to_string(), 12, 1),
            ("empty".to_string(), 0, 0),
        ],
        "{}",
        flavor.name()
    );
}

async fn object_overwrite_and_delete(flavor: Flavor) {
    let server = js::start(flavor);
    let client = server.connect().await;
    let context = jetstream::new(client.clone());
    let store = bucket(&server, &context, "docs").await;

    let first = random_bytes(1, 300 * 1024);
    let v1 = put(&server, &store, named("doc"), &first).await;
    assert_eq!(v1.chunks, 3);
    ok(&server, "put keep", async {
        store.put("keep", &mut &b"kept"[..]).await
    })
    .await;
    // doc: three chunks (300 KiB in 128 KiB chunks) and a meta; keep: one each.
    assert_eq!(stream_numbers(&client, "OBJ_docs").await, (6, 1, 6));

    // Overwrite: a new version (new nuid); the old chunks are purged and the
    // old meta is rolled up.
    let second = b"second version".to_vec();
    let v2 = put(&server, &store, named("doc"), &second).await;
    assert_ne!(v2.nuid, v1.nuid);
    assert_eq!((v2.size, v2.chunks), (second.len(), 1));
    let info = ok(&server, "info doc", store.info("doc")).await;
    assert_eq!(
        (info.nuid.as_str(), info.size),
        (v2.nuid.as_str(), second.len())
    );
    expect_content(&server, &store, "doc", &second).await;
    // keep's chunk and meta, doc's new chunk and meta.
    let (messages, _, last) = stream_numbers(&client, "OBJ_docs").await;
    assert_eq!((messages, last), (4, 8), "{}", flavor.name());

    // Delete: the meta says deleted, the chunks are gone, get fails.
    ok(&server, "delete doc", store.delete("doc")).await;
    let info = ok(&server, "info deleted doc", store.info("doc")).await;
    assert!(info.deleted, "{info:?}");
    assert_eq!((info.size, info.chunks), (0, 0));
    let error = match tokio::time::timeout(TIMEOUT, store.get("doc")).await {
        Ok(Ok(object)) => panic!(
            "{}: get of a deleted object: {:?}",
            flavor.name(),
            object.info
        ),
        Ok(Err(error)) => error,
        Err(_) => panic!("{}: get of a deleted object timed out", flavor.name()),
    };
    assert_eq!(
        error.kind(),
        object_store::GetErrorKind::NotFound,
        "{error}"
    );
    let (messages, _, last) = stream_numbers(&client, "OBJ_docs").await;
    assert_eq!((messages, last), (3, 9), "{}", flavor.name());

    // A name that never existed.
    let error = match tokio::time::timeout(TIMEOUT, store.get("never")).await {
        Ok(Ok(object)) => panic!(
            "{}: get of a missing object: {:?}",
            flavor.name(),
            object.info
        ),
        Ok(Err(error)) => error,
        Err(_) => panic!("{}: get of a missing object timed out", flavor.name()),
    };
    assert_eq!(
        error.kind(),
        object_store::GetErrorKind::NotFound,
        "{error}"
    );

    // The list skips deleted objects.
    let names: Vec<String> = list_all(&server, &store)
        .await
        .into_iter()
        .map(|info| info.name)
        .collect();
    assert_eq!(names, vec!["keep".to_string()], "{}", flavor.name());
    expect_content(&server, &store, "keep", b"kept").await;

    // A deleted object can be put again.
    put(&server, &store, named("doc"), b"third").await;
    expect_content(&server, &store, "doc", b"third").await;

    ok(
        &server,
        "delete bucket",
        context.delete_object_store("docs"),
    )
    .await;
    assert!(
        tokio::time::timeout(TIMEOUT, context.get_object_store("docs"))
            .await
            .expect("open deleted bucket timed out")
            .is_err()
    );
}

differential_cluster!(object_multi_chunk_round_trip);
differential_cluster!(object_chunk_sizes_and_list);
differential_cluster!(object_overwrite_and_delete);
