//! A filling disk, on a real (small) tmpfs under the store directory.
//!
//! - Differential: nats-server 2.15.1 and tern both refuse publishes with
//!   503 10023 `insufficient resources` before the filesystem is full
//!   (nats-server: past its default `max_file_store`, 75 % of the free space
//!   at start; tern: under its storage reserve). Every acked message stays
//!   readable, the server stays up, and deleting the stream makes room.
//! - tern only: with no reserve the block store hits ENOSPC. The stream stops
//!   with a clear error (publishes 503 10077, INFO 500 10194 `stream is
//!   offline`, `/healthz` 503), other streams keep working, and deleting the
//!   stopped stream frees its space and its journal records.
//!
//! Mounting needs root (CI runs as root); the test says so if it cannot.

use crate::common;

use bytes::Bytes;
use common::js::{self, api, api_ok, create};
use common::{Flavor, Options, Server};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;
/// The tmpfs: tern's test journal takes 32 MiB of it, preallocated.
const FILESYSTEM_BYTES: u64 = 96 * MIB;
const PAYLOAD_BYTES: usize = 8 * 1024;
/// Enough publishes to fill the filesystem many times over.
const PUBLISHES_MAX: usize = (FILESYSTEM_BYTES as usize / PAYLOAD_BYTES) * 2;

/// A tmpfs mounted at a path; unmounted (lazily) when dropped.
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size_bytes: u64) -> Tmpfs {
        std::fs::create_dir_all(path).unwrap();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size_bytes}"))
            .arg("tmpfs")
            .arg(path)
            .output()
            .expect("run mount");
        assert!(
            output.status.success(),
            "this test mounts a {size_bytes}-byte tmpfs and needs root: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Tmpfs {
            path: path.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// A server whose store directory is a fresh small tmpfs.
fn start_on_tmpfs(flavor: Flavor, options: Options) -> (Server, Tmpfs) {
    let dir = tempfile::tempdir().unwrap();
    let tmpfs = Tmpfs::mount(&dir.path().join("data"), FILESYSTEM_BYTES);
    (Server::start_in(flavor, options, dir), tmpfs)
}

/// Publishes `PAYLOAD_BYTES` messages one at a time until one is refused;
/// returns how many were acked and the refusal's bytes.
async fn publish_until_refused(client: &async_nats::Client, subject: &str) -> (u64, String) {
    let payload = Bytes::from(vec![b'x'; PAYLOAD_BYTES]);
    js::publish_until_refused(client, subject, payload, PUBLISHES_MAX as u64).await
}

fn error_ack(code: u16, err_code: u32, description: &str, stream: &str) -> String {
    format!(
        r#"{{"error":{{"code":{code},"err_code":{err_code},"description":"{description}"}},"stream":"{stream}","seq":0}}"#
    )
}

/// Whether the stored message at `sequence` is the published payload.
async fn expect_stored_payload(client: &async_nats::Client, stream: &str, sequence: u64) {
    let response = api_ok(
        client,
        &format!("$JS.API.STREAM.MSG.GET.{stream}"),
        &json!({ "seq": sequence }).to_string(),
    )
    .await;
    let data = response["message"]["data"].as_str().expect("data");
    assert!(
        data == js::base64(&[b'x'; PAYLOAD_BYTES]),
        "message {sequence} of {stream} is not the payload published"
    );
}

async fn full_store_refuses_publishes_with_insufficient_resources(flavor: Flavor) {
    let (server, _tmpfs) = start_on_tmpfs(flavor, Options::jetstream());
    let client = server.connect().await;
    create(&client, json!({"name": "FULL", "subjects": ["full.>"]})).await;
    let (acked, refusal) = publish_until_refused(&client, "full.a").await;
    assert_eq!(
        refusal,
        error_ack(503, 10023, "insufficient resources", "FULL"),
        "after {acked} acked"
    );
    assert!(
        acked * PAYLOAD_BYTES as u64 >= 24 * MIB,
        "refused early: only {acked} messages acked"
    );
    // Still refusing, still up; everything acked is there and readable.
    let (_, again) = publish_until_refused(&client, "full.b").await;
    assert_eq!(again, refusal);
    let state = js::state(&client, "FULL").await;
    assert_eq!(
        (&state["messages"], &state["last_seq"]),
        (&json!(acked), &json!(acked)),
        "{state}"
    );
    for sequence in [1, acked / 2, acked] {
        expect_stored_payload(&client, "FULL", sequence).await;
    }
    let (status, _) = server.http_get("/healthz");
    assert_eq!(status, 200, "a refusing server is healthy");
    // Deleting the stream makes room again (tern looks again within 100 ms).
    api_ok(&client, "$JS.API.STREAM.DELETE.FULL", "").await;
    create(&client, json!({"name": "AGAIN", "subjects": ["again.>"]})).await;
    let ack = js::publish_until_accepted(
        &client,
        "again.a",
        Bytes::from(vec![b'y'; PAYLOAD_BYTES]),
        "after the delete",
    )
    .await;
    assert_eq!(ack["seq"], json!(1), "{ack}");
}
differential!(full_store_refuses_publishes_with_insufficient_resources);

async fn a_stream_that_hits_enospc_stops_and_can_be_deleted() {
    let options = Options {
        storage_reserve_bytes: Some(0),
        ..Options::jetstream()
    };
    let (server, _tmpfs) = start_on_tmpfs(Flavor::Tern, options);
    let client = server.connect().await;
    create(&client, json!({"name": "FULL", "subjects": ["full.>"]})).await;
    create(
        &client,
        json!({"name": "MEMORY", "subjects": ["memory.>"], "storage": "memory"}),
    )
    .await;
    let (acked, refusal) = publish_until_refused(&client, "full.a").await;
    let ack: serde_json::Value = serde_json::from_str(&refusal).unwrap();
    assert_eq!(
        (&ack["error"]["code"], &ack["error"]["err_code"]),
        (&json!(503), &json!(10077)),
        "{refusal}"
    );
    let description = ack["error"]["description"].as_str().unwrap();
    // ENOSPC, or the short write a full filesystem gives first.
    assert!(
        description.contains("No space left on device") || description.contains("short write"),
        "{description}"
    );
    assert!(acked > 0);
    let info = api(&client, "$JS.API.STREAM.INFO.FULL", "").await;
    assert_eq!(
        (&info["error"]["code"], &info["error"]["err_code"]),
        (&json!(500), &json!(10194)),
        "{info}"
    );
    assert!(
        info["error"]["description"]
            .as_str()
            .unwrap()
            .starts_with("stream is offline: "),
        "{info}"
    );
    let (status, health) = server.http_get("/healthz");
    assert_eq!(status, 503, "{health}");
    let health: serde_json::Value = serde_json::from_str(&health).unwrap();
    assert_eq!(health["status"], json!("unavailable"), "{health}");
    assert!(
        health["error"]
            .as_str()
            .unwrap()
            .starts_with("JetStream stream '$G > FULL' write error: "),
        "{health}"
    );
    // Other streams on the server keep working.
    js::expect_puback(&client, "memory.a", &[], "m", &ack_of("MEMORY", 1)).await;
    // Deleting the stopped stream frees its files and journal records.
    api_ok(&client, "$JS.API.STREAM.DELETE.FULL", "").await;
    let (status, _) = server.http_get("/healthz");
    assert_eq!(status, 200);
    create(&client, json!({"name": "AGAIN", "subjects": ["again.>"]})).await;
    let (again, _) = publish_until_refused(&client, "again.a").await;
    assert!(
        again * 2 >= acked,
        "the space came back: {again} acked after the delete, {acked} before"
    );
}
tern_only!(a_stream_that_hits_enospc_stops_and_can_be_deleted);

fn ack_of(stream: &str, sequence: u64) -> String {
    format!(r#"{{"stream":"{stream}","seq":{sequence}}}"#)
}
