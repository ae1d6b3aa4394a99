//! nats-py Key-Value and Object Store against the real server:
//! `tests/py/kv_object.py` does KV put/get/create/update, history, delete and
//! purge markers, keys, watches (initial values, then live updates with a
//! delete) and status, then an object store put/get of a multi-chunk object,
//! info, list, overwrite and delete. nats-py creates KV buckets without
//! `allow_direct`, so its gets go through `$JS.API.STREAM.MSG.GET`. Runs
//! against tern (2 shards, JetStream on) and nats-server alike.

mod common;

use common::{Flavor, Options, Server};

async fn nats_py_kv_object(flavor: Flavor) {
    let server = Server::start(flavor, Options::jetstream());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/kv_object.py");
    // The script bounds itself (60 s); this bound only catches a hung interpreter.
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(90),
        tokio::process::Command::new("python3")
            .arg(script)
            .arg(server.url())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("kv_object.py did not finish within 90 s")
    .expect("python3 runs (nats-py: pip install nats-py)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("nats-py kv_object: ok"),
        "nats-py kv_object failed against {} ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        flavor.name(),
        output.status,
        server.log_tail()
    );
}

differential!(nats_py_kv_object);
