//! Block-store benchmarks (not tests): `cargo bench -p tern-storage --bench block_store`.
//!
//! Writes `TERN_BENCH_STORE_MB` (default 1024) MB of 1 KiB messages into one
//! stream with O_DIRECT, then measures a cold sequential replay of all of
//! it (O_DIRECT reads of 4 MiB with the next one in flight). Prints
//! `bench=block_store_append ...` and `bench=block_store_replay ... gb_per_s=..`.

use std::path::PathBuf;
use std::time::Instant;

use tern_storage::block_store::{DmaFiles, Manifest, NewMessage, StreamConfig, StreamLog};

fn main() {
    // `cargo test --all-targets` runs harness-less benches too; they measure,
    // they do not test, so they run only under `cargo bench` (which passes
    // `--bench`). CI still compiles them.
    if !std::env::args().any(|argument| argument == "--bench") {
        eprintln!("benchmark: skipped outside `cargo bench`");
        return;
    }
    let megabytes: u64 = std::env::var("TERN_BENCH_STORE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let base = std::env::var_os("TERN_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-block-store")
        });
    let directory = base.join(format!("run-{}", std::process::id()));
    let executor = glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(0))
        .io_memory(16 << 20)
        .make()
        .unwrap();
    let path = directory.clone();
    executor.run(async move {
        let config = StreamConfig { write_buffer_bytes: 4 << 20, tail_cache_bytes: 0, ..StreamConfig::default() };
        let files = DmaFiles::open(&path).await.unwrap();
        let (mut log, _) = StreamLog::open(files, config.clone(), &Manifest::new(1)).await.unwrap();
        let payload = vec![0x42u8; 1024];
        let messages = megabytes * 1_000_000 / 1100;
        let started = Instant::now();
        for sequence in 1..=messages {
            log.append(NewMessage { sequence, timestamp_ns: sequence, subject: b"bench.replay", headers: b"", payload: &payload })
                .await
                .unwrap();
        }
        let manifest = log.sync().await.unwrap();
        let elapsed = started.elapsed().as_secs_f64();
        let bytes = log.state().bytes;
        println!(
            "bench=block_store_append messages={messages} bytes={bytes} messages_per_s={:.0} gb_per_s={:.2}",
            messages as f64 / elapsed,
            bytes as f64 / elapsed / 1e9
        );
        drop(log);
        // Cold: reopen from the manifest (which itself scans and verifies
        // everything it names), then replay.
        let files = DmaFiles::open(&path).await.unwrap();
        let started = Instant::now();
        let (log, report) = StreamLog::open(files, config, &manifest).await.unwrap();
        let open_seconds = started.elapsed().as_secs_f64();
        println!(
            "bench=block_store_open records={} seconds={open_seconds:.2} gb_per_s={:.2}",
            report.records,
            bytes as f64 / open_seconds / 1e9
        );
        let started = Instant::now();
        let mut seen = 0u64;
        let mut payload_bytes = 0u64;
        log.replay(1, |view| {
            seen += 1;
            payload_bytes += view.payload.len() as u64;
        })
        .await
        .unwrap();
        let elapsed = started.elapsed().as_secs_f64();
        assert_eq!(seen, messages);
        println!(
            "bench=block_store_replay messages={seen} bytes={bytes} seconds={elapsed:.2} messages_per_s={:.0} gb_per_s={:.2}",
            seen as f64 / elapsed,
            bytes as f64 / elapsed / 1e9
        );
    });
    let _ = std::fs::remove_dir_all(&directory);
}
