//! tern-bench: the bundled open-loop latency harness behind `tern bench`.
//!
//! It measures any NATS server through the official async-nats client, so
//! tern and nats-server can be put side by side fairly. Modules, from the
//! input to the output:
//!
//! - [`workload`]: TOML workload files (`bench/workloads/*.toml`), strict and
//!   validated against stated limits;
//! - [`load`]: the send schedule (open loop with coordinated-omission
//!   correction, max throughput with a window, closed loop uncorrected for
//!   comparison), producer threads, the message header;
//! - [`measure`]: the workload kinds (core pub/sub, request/reply,
//!   JetStream publish → PubAck, end to end, pull drain, push throughput);
//! - [`histogram`]: HDR histograms of latency, percentiles, merging;
//! - [`system`]: client CPU, server CPU and RSS (`/proc` or `/varz`);
//! - [`server`]: starting tern-server or nats-server on ephemeral ports;
//! - [`compare`]: one side or two, one after the other;
//! - [`report`] and [`plot`]: markdown, JSON, HDR logs, SVG and PNG;
//! - [`progress`]: the progress line; [`command`]: the CLI commands.
//!
//! `core-bench` and `js-bench` (in `src/bin/`) measure what an open-loop
//! run through async-nats cannot (BENCHMARKS.md, "Harnesses"): a
//! raw-socket flood's fan-out throughput, and the durable publish path
//! through a raw-protocol client with the cost of a publish to a stream
//! on another shard; they share [`server`] helpers with this crate.

pub mod command;
pub mod compare;
pub mod histogram;
pub mod load;
pub mod measure;
pub mod plot;
pub mod progress;
pub mod report;
pub mod server;
pub mod system;
pub mod workload;
