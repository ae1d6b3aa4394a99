//! The I/O profile `tern iotune` writes (`<store_dir>/io-profile.json`):
//! tern-server reads it at start, says what it sizes from it, and serves
//! with those sizes; a damaged profile refuses the start with the file
//! named; a profile named in the config must exist.

use crate::common;

use async_nats::jetstream::{self, stream::StorageType};

use common::{Flavor, Options, Server, Stopped, TIMEOUT};

fn profile(settings: &str) -> String {
    format!(
        r#"{{"version": 1, "measured_unix_seconds": 1, "journal": {{"path": "j", "durable_writes": [], "writes": [], "reads": []}},
            "store": {{"path": "s", "durable_writes": [], "writes": [], "reads": []}}, "settings": {settings}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_sizes_its_io_from_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    // Small sizes, so that 300 messages of 1 KiB cross many writes and reads.
    std::fs::write(
        dir.path().join("data/io-profile.json"),
        profile(
            r#"{"journal_batch_bytes_max": 262144, "store_write_buffer_bytes": 65536,
                "store_read_ahead_bytes": 65536, "store_prefetch_runs": 1}"#,
        ),
    )
    .unwrap();
    let server = Server::start_in(Flavor::Tern, Options::jetstream(), dir);
    server
        .wait_log(
            "journal batches up to 262144 bytes, block-store writes of 65536 bytes, read-ahead 65536 bytes with 1 runs prefetched",
            TIMEOUT,
        )
        .await;
    let js = jetstream::new(server.connect().await);
    js.create_stream(jetstream::stream::Config {
        name: "PROFILED".into(),
        subjects: vec!["profiled".into()],
        storage: StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap();
    let body = vec![b'x'; 1024];
    for _ in 0..300 {
        js.publish("profiled", body.clone().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    // Restarted, the messages come back from the block store through the
    // profile's read-ahead.
    let server = server.restart_graceful();
    let stream = jetstream::new(server.connect().await)
        .get_stream("PROFILED")
        .await
        .unwrap();
    for sequence in [1, 150, 300] {
        let message = stream.get_raw_message(sequence).await.unwrap();
        assert_eq!(message.payload.len(), 1024);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_missing_profile_refuses_the_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(
        dir.path().join("data/io-profile.json"),
        b"{\"version\": 1, \"sett",
    )
    .unwrap();
    let dir = Stopped {
        flavor: Flavor::Tern,
        options: Options::jetstream(),
        dir,
    }
    .refused("io-profile.json: EOF while parsing");
    let options = Options {
        tern_config: "io_profile = \"/nonexistent/io-profile.json\"\n".into(),
        ..Options::jetstream()
    };
    std::fs::remove_file(dir.path().join("data/io-profile.json")).unwrap();
    Stopped {
        flavor: Flavor::Tern,
        options,
        dir,
    }
    .refused("/nonexistent/io-profile.json: no such file");
}
