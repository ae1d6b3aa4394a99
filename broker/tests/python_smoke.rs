//! nats-py against the real server: `tests/py/smoke.py` does pub/sub,
//! headers, request/reply, no-responders and a queue group across two
//! connections. Runs against tern (2 shards) and nats-server alike.

mod common;

use common::{Flavor, Options, Server};

async fn nats_py_smoke(flavor: Flavor) {
    let server = Server::start(flavor, Options::default());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/smoke.py");
    let output = tokio::process::Command::new("python3")
        .arg(script)
        .arg(server.url())
        .output()
        .await
        .expect("python3 runs (nats-py: pip install nats-py)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("nats-py smoke: ok"),
        "nats-py smoke failed against {}:\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        flavor.name(),
        server.log_tail()
    );
}

differential!(nats_py_smoke);
