//! core-bench: core NATS pub/sub measured on tern-server and nats-server side
//! by side in one run, each server pinned to one CPU and the client to another.
//!
//! ```text
//! cargo run --release -p tern-bench --bin core-bench -- \
//!     [--tern target/release/tern-server] [--nats nats-server] \
//!     [--server-cpu 1] [--client-cpu 0] [--samples 20000] [--messages 2000000] \
//!     [--tern-arg=--spin_before_park --tern-arg=100us ...] \
//!     [--nats-arg=-c --nats-arg=auth.conf ...] [--user NAME --pass PASSWORD]
//! ```
//!
//! `--user`/`--pass` authenticate every connection (for servers given an
//! authorization config through `--tern-arg`/`--nats-arg`, e.g. to measure
//! the permission check on the publish path).
//!
//! Measures, for each server:
//! - latency: one message in flight, 128 B, publish -> receipt on another
//!   connection (async-nats), p50/p90/p99/p99.9/max over `--samples`;
//! - fan-out throughput 1 -> 1: a raw-socket publisher writes `--messages`
//!   128 B PUBs as fast as the socket takes them while a raw-socket subscriber
//!   counts deliveries; msgs/s until the last one arrives;
//! - peak RSS of the server process (VmHWM).
//!
//! A benchmark, not a test: it never fails on a number. Prints a markdown table.
//! Servers are started by `tern_bench::server` (the `tern bench` launcher);
//! for open-loop, percentile-rich runs use `tern bench compare`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tern_bench::histogram::LatencyHistogram;
use tern_bench::server::{self, Flavor, ServerProcess, ServerSpec};
use tern_bench::system;

const PAYLOAD_BYTES: usize = 128;

struct Settings {
    tern: String,
    nats: String,
    server_cpu: usize,
    client_cpu: usize,
    samples: usize,
    warmup: usize,
    messages: usize,
    tern_extra: Vec<String>,
    nats_extra: Vec<String>,
    user: Option<String>,
    password: Option<String>,
}

fn settings() -> Settings {
    let mut settings = Settings {
        tern: "target/release/tern-server".into(),
        nats: "nats-server".into(),
        server_cpu: 1,
        client_cpu: 0,
        samples: 20_000,
        warmup: 2_000,
        messages: 2_000_000,
        tern_extra: Vec::new(),
        nats_extra: Vec::new(),
        user: None,
        password: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut index = 0;
    while index < args.len() {
        let value = args.get(index + 1).cloned().unwrap_or_default();
        match args[index].as_str() {
            "--tern" => settings.tern = value,
            "--nats" => settings.nats = value,
            "--server-cpu" => settings.server_cpu = value.parse().expect("--server-cpu N"),
            "--client-cpu" => settings.client_cpu = value.parse().expect("--client-cpu N"),
            "--samples" => settings.samples = value.parse().expect("--samples N"),
            "--warmup" => settings.warmup = value.parse().expect("--warmup N"),
            "--messages" => settings.messages = value.parse().expect("--messages N"),
            "--tern-arg" => settings.tern_extra.push(value),
            "--nats-arg" => settings.nats_extra.push(value),
            "--user" => settings.user = Some(value),
            "--pass" => settings.password = Some(value),
            other => panic!("unknown argument {other}"),
        }
        index += 2;
    }
    settings
}

/// Starts a server with the library's launcher (127.0.0.1, ephemeral ports,
/// temp dir, pinned to `cpu`; tern also gets `--cores <cpu>`).
fn start(flavor: Flavor, program: &str, extra_args: &[String], cpu: usize) -> ServerProcess {
    ServerProcess::start(&ServerSpec {
        flavor,
        program: program.into(),
        jetstream: false,
        sync_always: false,
        cpus: Some(vec![cpu]),
        extra_args: extra_args.to_vec(),
    })
    .unwrap_or_else(|error| panic!("{error}"))
}

fn peak_rss_bytes(pid: u32) -> u64 {
    system::status_kib(pid, "VmHWM:").map_or(0, |kib| kib * 1024)
}

struct Results {
    latency: LatencyHistogram,
    throughput_msgs_per_second: f64,
    peak_rss_bytes: u64,
}

async fn measure_latency(port: u16, settings: &Settings) -> LatencyHistogram {
    let url = format!("nats://127.0.0.1:{port}");
    let options = || match (&settings.user, &settings.password) {
        (Some(user), Some(password)) => {
            async_nats::ConnectOptions::with_user_and_password(user.clone(), password.clone())
        }
        _ => async_nats::ConnectOptions::new(),
    };
    let publisher = options().connect(&url).await.expect("publisher connects");
    let subscriber_client = options().connect(&url).await.expect("subscriber connects");
    let mut subscriber = subscriber_client
        .subscribe("bench.latency")
        .await
        .expect("subscribe");
    subscriber_client.flush().await.expect("flush");
    let payload = bytes::Bytes::from(vec![b'x'; PAYLOAD_BYTES]);
    let mut histogram = LatencyHistogram::new();
    for index in 0..settings.warmup + settings.samples {
        let start = Instant::now();
        publisher
            .publish("bench.latency", payload.clone())
            .await
            .expect("publish");
        let message = tokio::time::timeout(Duration::from_secs(5), subscriber.next())
            .await
            .expect("message within 5 s")
            .expect("subscription open");
        let elapsed = start.elapsed();
        assert_eq!(message.payload.len(), PAYLOAD_BYTES);
        if index >= settings.warmup {
            histogram.record(elapsed);
        }
    }
    histogram
}

/// Raw sockets on both sides so the client is not the limit.
fn measure_throughput(port: u16, messages: usize, credentials: &str) -> f64 {
    let connect = format!("CONNECT {{\"verbose\":false,\"pedantic\":false{credentials}}}\r\n");
    let mut subscriber = TcpStream::connect(("127.0.0.1", port)).expect("subscriber connects");
    subscriber
        .write_all(format!("{connect}SUB bench.fanout 1\r\nPING\r\n").as_bytes())
        .unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 65536];
    while !seen.windows(6).any(|window| window == b"PONG\r\n") {
        let bytes = subscriber.read(&mut chunk).unwrap();
        assert!(bytes > 0, "server closed the subscriber");
        seen.extend_from_slice(&chunk[..bytes]);
    }
    let frame_bytes = format!("MSG bench.fanout 1 {PAYLOAD_BYTES}\r\n").len() + PAYLOAD_BYTES + 2;
    let expected_bytes = frame_bytes * messages;
    let counter = std::thread::spawn(move || {
        let mut received = 0usize;
        let mut chunk = vec![0u8; 1 << 20];
        while received < expected_bytes {
            let bytes = subscriber.read(&mut chunk).expect("subscriber reads");
            assert!(
                bytes > 0,
                "server closed the subscriber after {received} bytes"
            );
            received += bytes;
        }
        Instant::now()
    });
    let mut publisher = TcpStream::connect(("127.0.0.1", port)).expect("publisher connects");
    publisher.write_all(connect.as_bytes()).unwrap();
    let mut frame = format!("PUB bench.fanout {PAYLOAD_BYTES}\r\n").into_bytes();
    frame.extend(std::iter::repeat_n(b'x', PAYLOAD_BYTES));
    frame.extend_from_slice(b"\r\n");
    let batch_messages = 512;
    let batch: Vec<u8> = frame.repeat(batch_messages);
    let start = Instant::now();
    let mut sent = 0;
    while sent < messages {
        let count = batch_messages.min(messages - sent);
        publisher
            .write_all(&batch[..count * frame.len()])
            .expect("publish");
        sent += count;
    }
    let finished = counter.join().expect("counter thread");
    messages as f64 / finished.duration_since(start).as_secs_f64()
}

async fn run(server: &ServerProcess, settings: &Settings) -> Results {
    let latency = measure_latency(server.client_port, settings).await;
    let port = server.client_port;
    let messages = settings.messages;
    let credentials = match (&settings.user, &settings.password) {
        (Some(user), Some(password)) => format!(
            ",\"user\":{},\"pass\":{}",
            serde_json::Value::from(user.as_str()),
            serde_json::Value::from(password.as_str())
        ),
        _ => String::new(),
    };
    let throughput =
        tokio::task::spawn_blocking(move || measure_throughput(port, messages, &credentials))
            .await
            .unwrap();
    Results {
        latency,
        throughput_msgs_per_second: throughput,
        peak_rss_bytes: peak_rss_bytes(server.pid()),
    }
}

fn micros(histogram: &LatencyHistogram, quantile: f64) -> f64 {
    histogram.value_at_quantile_nanos(quantile) as f64 / 1000.0
}

fn main() {
    let settings = settings();
    server::pin_current_thread(&[settings.client_cpu]).expect("pin the client");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut all = Vec::new();
    for (flavor, program, args) in [
        (Flavor::Nats, &settings.nats, &settings.nats_extra),
        (Flavor::Tern, &settings.tern, &settings.tern_extra),
    ] {
        let server = start(flavor, program, args, settings.server_cpu);
        eprintln!(
            "measuring {} (pid {}, port {})",
            flavor.name(),
            server.pid(),
            server.client_port
        );
        let results = runtime.block_on(run(&server, &settings));
        all.push((flavor.name(), results));
    }
    println!(
        "| server | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | fan-out 1→1 msgs/s | peak RSS MiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, results) in &all {
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} |",
            micros(&results.latency, 0.5),
            micros(&results.latency, 0.9),
            micros(&results.latency, 0.99),
            micros(&results.latency, 0.999),
            micros(&results.latency, 1.0),
            results.throughput_msgs_per_second,
            results.peak_rss_bytes as f64 / (1024.0 * 1024.0)
        );
    }
    if let [(_, nats), (_, tern)] = &all[..] {
        println!(
            "| tern / nats | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            micros(&tern.latency, 0.5) / micros(&nats.latency, 0.5),
            micros(&tern.latency, 0.9) / micros(&nats.latency, 0.9),
            micros(&tern.latency, 0.99) / micros(&nats.latency, 0.99),
            micros(&tern.latency, 0.999) / micros(&nats.latency, 0.999),
            micros(&tern.latency, 1.0) / micros(&nats.latency, 1.0),
            tern.throughput_msgs_per_second / nats.throughput_msgs_per_second,
            tern.peak_rss_bytes as f64 / nats.peak_rss_bytes as f64
        );
    }
}
