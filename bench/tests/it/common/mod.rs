//! Shared by the harness's cross-process tests: start a real server (the
//! workspace's `tern-server`, or nats-server 2.15.1 from PATH) on ephemeral
//! ports, and run a workload written inline against it.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_bench::load::Counters;
use tern_bench::measure::{self, Measurement, Target};
use tern_bench::server::{self, Flavor, ServerProcess, ServerSpec};
use tern_bench::system::ServerSource;
use tern_bench::workload::Workload;

/// Bound on any wait for a condition in these tests.
pub const CONDITION_TIMEOUT: Duration = Duration::from_secs(30);

pub fn start(flavor: Flavor) -> ServerProcess {
    let program = match flavor {
        // `cargo test --workspace --all-targets` builds tern-server before
        // running tests; a lone `cargo test -p tern-bench` may not have.
        Flavor::Tern => server::tern_server_path().unwrap_or_else(|error| {
            panic!("{error} (the tests use target/<profile>/tern-server: run `cargo build -p tern-broker` or `cargo test --workspace`)")
        }),
        Flavor::Nats => server::nats_server_path().unwrap_or_else(|error| panic!("{error}")),
    };
    ServerProcess::start(&ServerSpec {
        flavor,
        program,
        jetstream: false,
        sync_always: false,
        cpus: None,
        extra_args: Vec::new(),
    })
    .unwrap_or_else(|error| panic!("{error}"))
}

pub fn workload(text: &str) -> Workload {
    Workload::parse(text, "test").unwrap_or_else(|error| panic!("{error}"))
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

pub fn measure(
    runtime: &tokio::runtime::Runtime,
    server: &ServerProcess,
    workload: &Workload,
    counters: Arc<Counters>,
) -> Measurement {
    let target = Target {
        url: server.url(),
        server: ServerSource::Pid(server.pid()),
        counters,
        tls_ca: None,
        credentials: Default::default(),
    };
    runtime
        .block_on(measure::measure(workload, &target))
        .unwrap_or_else(|error| panic!("{}: {error}", workload.name))
}

/// Waits until `condition` holds, polling; panics after `CONDITION_TIMEOUT`.
pub fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + CONDITION_TIMEOUT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
