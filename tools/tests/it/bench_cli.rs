//! `tern bench` through the real `tern` binary: the basic call against a
//! nats-server started here, and a refused workload.

use std::path::Path;
use std::process::Command;

use tern_bench::server::{self, Flavor, ServerProcess, ServerSpec};

fn tern() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tern"))
}

fn workspace_file(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path)
        .display()
        .to_string()
}

#[test]
fn version_is_kept() {
    let output = tern().arg("--version").output().expect("run tern");
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text.trim(), format!("tern {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn bench_run_writes_the_report_and_prints_the_table() {
    let nats = ServerProcess::start(&ServerSpec {
        flavor: Flavor::Nats,
        program: server::nats_server_path().unwrap_or_else(|error| panic!("{error}")),
        jetstream: false,
        sync_always: false,
        cpus: None,
        extra_args: Vec::new(),
    })
    .unwrap_or_else(|error| panic!("{error}"));
    let out = tempfile::tempdir().unwrap();
    let output = tern()
        .args(["bench", "run", "--url", &nats.url(), "--workload"])
        .arg(workspace_file("bench/workloads/smoke.toml"))
        .arg("--out")
        .arg(out.path())
        .args(["--quiet", "--duration-secs", "1", "--warmup-secs", "0"])
        .args(["--label", "nats-server", "--pid", &nats.pid().to_string()])
        .output()
        .expect("run tern bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("| nats-server | "), "{stdout}");
    for file in [
        "report.md",
        "results.json",
        "latency.svg",
        "latency.png",
        "nats-server.hlog",
    ] {
        assert!(out.path().join(file).is_file(), "{file} missing; {stderr}");
    }
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    assert_eq!(json["runs"][0]["status"], "ok");
    assert_eq!(json["runs"][0]["sent"], 1000);
    assert!(
        json["runs"][0]["usage"]["server_rss_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
}

#[test]
fn a_bad_workload_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("bad.toml");
    std::fs::write(
        &workload,
        "name = \"bad\"\nkind = \"core_pub_sub\"\nrate = 5\n",
    )
    .unwrap();
    let output = tern()
        .args(["bench", "run", "--url", "nats://127.0.0.1:1", "--workload"])
        .arg(&workload)
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .expect("run tern bench");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown field `rate`"), "{stderr}");
}
