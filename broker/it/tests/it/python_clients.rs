//! nats-py against the real server, tern (2 shards) and nats-server alike;
//! the JetStream scripts also against a 3-node cluster of each
//! (`*_cluster`, through the client proxy: `common/target.rs`).
//! Each script under `tests/py/` takes the server URL, bounds itself, and
//! prints `nats-py <name>: ok` when every check passed:
//! - `smoke.py`: pub/sub, headers, request/reply, no-responders and a queue
//!   group across two connections;
//! - `jetstream.py`: stream management (add/update/info/list/names/delete),
//!   publish with PubAck checks, `Nats-Msg-Id` de-duplication,
//!   expected-last-sequence and expected-stream errors, get/delete message
//!   and purge;
//! - `kv_object.py`: KV put/get/create/update, history, delete and purge
//!   markers, keys, watches (initial values, then live updates with a
//!   delete) and status, then an object store put/get of a multi-chunk
//!   object, info, list, overwrite and delete. nats-py creates KV buckets
//!   without `allow_direct`, so its gets go through
//!   `$JS.API.STREAM.MSG.GET`;
//! - `auth.py`: an NKey user from a seed file (`nkeys_seed`, which needs
//!   the `nkeys` package), a permission violation reported and not
//!   delivered, a wrong password refused.

use crate::common;

use common::{Flavor, Options, Target};

/// Runs `tests/py/<name>.py` against a server started with `options`.
async fn run_script(flavor: Flavor, options: Options, name: &str) {
    run_script_with(flavor, options, name, &[]).await
}

/// [`run_script`] with more arguments after the server URL.
async fn run_script_with(flavor: Flavor, options: Options, name: &str, arguments: &[&str]) {
    let server = Target::start(flavor, options);
    let script = format!("{}/tests/py/{name}.py", env!("CARGO_MANIFEST_DIR"));
    // The scripts bound themselves (60 s); this only catches a hung interpreter.
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(90),
        tokio::process::Command::new("python3")
            .arg(&script)
            .arg(server.url())
            .args(arguments)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{name}.py did not finish within 90 s"))
    .expect("python3 runs (nats-py: pip install nats-py)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(&format!("nats-py {name}: ok")),
        "nats-py {name} failed against {} ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}\nserver log:\n{}",
        flavor.name(),
        output.status,
        server.log_tail()
    );
}

async fn nats_py_smoke(flavor: Flavor) {
    run_script(flavor, Options::default(), "smoke").await;
}
differential!(nats_py_smoke);

async fn nats_py_jetstream(flavor: Flavor) {
    let replicas = common::target::default_replicas().to_string();
    // The flavor: the script asks nats-server (never tern) again when an
    // idempotent request goes unanswered.
    let arguments = [replicas.as_str(), flavor.name()];
    run_script_with(flavor, Options::jetstream(), "jetstream", &arguments).await;
}
differential_cluster!(nats_py_jetstream, nats_cluster_in_ci);

async fn nats_py_kv_object(flavor: Flavor) {
    run_script(flavor, Options::jetstream(), "kv_object").await;
}
differential_cluster!(nats_py_kv_object);

async fn nats_py_auth(flavor: Flavor) {
    let key = nkeys::KeyPair::new_user();
    let public = key.public_key();
    let dir = tempfile::tempdir().unwrap();
    let seed_file = dir.path().join("user.nk");
    std::fs::write(&seed_file, format!("{}\n", key.seed().unwrap())).unwrap();
    let options = Options {
        tern_config: format!(
            "[authorization]\nusers = [ {{ nkey = \"{public}\" }}, {{ user = \"app\", password = \"app-pw\", permissions = {{ publish = {{ deny = \"secret.>\" }} }} }} ]\n"
        ),
        nats_config: format!(
            "authorization {{\n  users = [ {{nkey: \"{public}\"}}, {{user: app, password: \"app-pw\", permissions: {{publish: {{deny: \"secret.>\"}}}}}} ]\n}}\n"
        ),
        ..Options::default()
    };
    run_script_with(flavor, options, "auth", &[seed_file.to_str().unwrap()]).await;
}
differential!(nats_py_auth);
