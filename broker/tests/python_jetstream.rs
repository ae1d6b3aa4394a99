//! nats-py JetStream against the real server: `tests/py/jetstream.py` does
//! stream management (add/update/info/list/names/delete), publish with
//! PubAck checks, `Nats-Msg-Id` de-duplication, expected-last-sequence and
//! expected-stream errors, get/delete message and purge. Runs against tern
//! (2 shards, JetStream on) and nats-server alike.

mod common;

use common::{Flavor, Options, Server};

async fn nats_py_jetstream(flavor: Flavor) {
    let server = Server::start(flavor, Options::jetstream());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/jetstream.py");
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
    .expect("jetstream.py did not finish within 90 s")
    .expect("python3 runs (nats-py: pip install nats-py)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("nats-py jetstream: ok"),
        "nats-py jetstream failed against {} ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        flavor.name(),
        output.status,
        server.log_tail()
    );
}

differential!(nats_py_jetstream);
