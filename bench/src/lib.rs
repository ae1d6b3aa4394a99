//! tern-bench: the bundled latency harness (issue "tern bench").
//!
//! This crate will own open-loop load generation with coordinated-omission
//! correction, HDR histograms, workloads in `bench/workloads/*.toml`,
//! reports (markdown, JSON, HDR logs, SVG/PNG plots) and side-by-side runs
//! against another server. Until then `bench/src/bin/core_bench.rs` measures
//! core pub/sub against tern and nats-server.
