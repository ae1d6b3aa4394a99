//! Journal benchmarks (not tests): `cargo bench -p tern-storage --bench journal`.
//!
//! In one run, on the filesystem of `TERN_BENCH_DIR` (default: a temp dir under
//! `target/`), it measures the disk's own limit and the journal against it:
//!
//! - `raw_sync_4k`: a plain loop of one 4 KiB O_DIRECT write + fdatasync into
//!   a preallocated (zero-written) file; also into freshly fallocated space
//!   (`raw_sync_4k_fresh`) and with O_DSYNC instead of fdatasync;
//! - `journal_sync_1k`: one 1 KiB record in flight, appended and awaited durable;
//! - `journal_window256_1k`: 256 appenders each awaiting its own 1 KiB record
//!   (group commit), durable records per second.
//!
//! One line per case: `bench=NAME n=.. p50_us=.. p99_us=.. ...`.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use glommio::io::{DmaFile, OpenOptions};
use tern_storage::dma::{DmaDevice, SyncMethod};
use tern_storage::{Journal, JournalConfig, NewRecord, SyncPolicy};

const BLOCK: usize = 4096;

fn percentile(samples: &mut [u64], quantile: f64) -> f64 {
    samples.sort_unstable();
    let index = ((samples.len() as f64 - 1.0) * quantile).round() as usize;
    samples[index] as f64 / 1000.0
}

fn bench_dir() -> PathBuf {
    let base = std::env::var_os("TERN_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-journal")
        });
    std::fs::create_dir_all(&base).unwrap();
    base
}

async fn open_direct(path: &Path, dsync: bool) -> DmaFile {
    let mut flags = libc::O_DIRECT;
    if dsync {
        flags |= libc::O_DSYNC;
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .custom_flags(flags)
        .dma_open(path)
        .await
        .unwrap();
    assert!(tern_storage::dma::o_direct_in_effect(file.as_raw_fd()).unwrap());
    file
}

/// One 4 KiB write + sync at a time, cycling through `span` bytes of the file.
async fn raw_loop(file: &DmaFile, samples: usize, span: u64, dsync: bool) -> Vec<u64> {
    let mut latencies = Vec::with_capacity(samples);
    for index in 0..samples {
        let mut buffer = glommio::allocate_dma_buffer(BLOCK);
        buffer.as_bytes_mut().fill(index as u8);
        let offset = (index as u64 * BLOCK as u64) % span;
        let start = Instant::now();
        file.write_rc_at(Rc::new(buffer), offset).await.unwrap();
        if !dsync {
            file.fdatasync().await.unwrap();
        }
        latencies.push(start.elapsed().as_nanos() as u64);
    }
    latencies
}

async fn zero_file(file: &DmaFile, bytes: u64) {
    let mut offset = 0;
    while offset < bytes {
        let mut buffer = glommio::allocate_dma_buffer(1 << 20);
        buffer.as_bytes_mut().fill(0);
        file.write_at(buffer, offset).await.unwrap();
        offset += 1 << 20;
    }
    file.fdatasync().await.unwrap();
}

fn main() {
    // `cargo test --all-targets` runs harness-less benches too; they measure,
    // they do not test, so they run only under `cargo bench` (which passes
    // `--bench`). CI still compiles them.
    if !std::env::args().any(|argument| argument == "--bench") {
        eprintln!("benchmark: skipped outside `cargo bench`");
        return;
    }
    let samples: usize = std::env::var("TERN_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let directory = bench_dir().join(format!("run-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let executor = glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(0))
        .io_memory(8 << 20)
        .make()
        .unwrap();
    let dir = directory.clone();
    executor.run(async move {
        tern_storage::dma::probe_direct_io(&dir).await.unwrap();
        let span: u64 = 64 << 20;
        // The disk's limit: overwrite a preallocated, written file.
        let raw_path = dir.join("raw.dat");
        let raw = open_direct(&raw_path, false).await;
        zero_file(&raw, span).await;
        let mut raw_latencies = raw_loop(&raw, samples, span, false).await;
        let raw_p50 = percentile(&mut raw_latencies, 0.50);
        let raw_p99 = percentile(&mut raw_latencies, 0.99);
        println!("bench=raw_sync_4k n={samples} p50_us={raw_p50:.1} p99_us={raw_p99:.1}");
        // Same writes into fresh (fallocated, unwritten) space.
        let fresh_path = dir.join("fresh.dat");
        let fresh = open_direct(&fresh_path, false).await;
        fresh.pre_allocate(span, false).await.unwrap();
        let fresh_samples = samples.min((span as usize) / BLOCK);
        let mut fresh_latencies = raw_loop(&fresh, fresh_samples, span, false).await;
        println!(
            "bench=raw_sync_4k_fresh n={fresh_samples} p50_us={:.1} p99_us={:.1} ratio_p50_vs_preallocated={:.2}",
            percentile(&mut fresh_latencies, 0.50),
            percentile(&mut fresh_latencies, 0.99),
            percentile(&mut fresh_latencies, 0.50) / raw_p50
        );
        drop(fresh);
        let _ = std::fs::remove_file(&fresh_path);
        // O_DSYNC instead of fdatasync.
        let dsync = open_direct(&raw_path, true).await;
        let mut dsync_latencies = raw_loop(&dsync, samples, span, true).await;
        println!(
            "bench=raw_dsync_4k n={samples} p50_us={:.1} p99_us={:.1}",
            percentile(&mut dsync_latencies, 0.50),
            percentile(&mut dsync_latencies, 0.99)
        );
        drop(dsync);
        drop(raw);

        for method in [SyncMethod::Fdatasync, SyncMethod::Dsync] {
            let journal_dir = dir.join(format!("journal-{method:?}"));
            let device = DmaDevice::open_directory(&journal_dir, 8, 64 << 20, method).await.unwrap();
            let config = JournalConfig { shard: 0, batch_bytes_max: 1 << 20, sync: SyncPolicy::Always, journal_id: 1, formatted_before: false };
            let (journal, _) = Journal::open(device, config, |_| {}).await.unwrap();
            let journal = Rc::new(journal);
            glommio::spawn_local({
                let journal = journal.clone();
                async move { journal.run().await }
            })
            .detach();
            let body = vec![0x5au8; 1024];
            // Keep the journal recycling: checkpoint everything durable.
            let mut latencies = Vec::with_capacity(samples);
            for index in 1..=samples as u64 {
                let start = Instant::now();
                let sequence = journal.append(NewRecord { kind: 1, group: 1, term: 1, index, body: &body }).await.unwrap();
                journal.wait_durable(sequence).await.unwrap();
                latencies.push(start.elapsed().as_nanos() as u64);
                journal.checkpoint(1, index);
            }
            let p50 = percentile(&mut latencies, 0.50);
            let p99 = percentile(&mut latencies, 0.99);
            let name = if method == SyncMethod::Fdatasync { "journal_sync_1k" } else { "journal_dsync_1k" };
            println!(
                "bench={name} n={samples} p50_us={p50:.1} p99_us={p99:.1} raw_p50_us={raw_p50:.1} raw_p99_us={raw_p99:.1} ratio_p99={:.2}",
                p99 / raw_p99
            );
            // 256 in flight.
            let before = journal.stats();
            let window = 256u64;
            let per_writer = (samples as u64 * 10 / window).max(50);
            let started = Instant::now();
            let mut writers = Vec::new();
            for writer in 0..window {
                let journal = journal.clone();
                let body = body.clone();
                writers.push(glommio::spawn_local(async move {
                    for index in 1..=per_writer {
                        let group = 100 + writer;
                        let sequence =
                            journal.append(NewRecord { kind: 1, group, term: 1, index, body: &body }).await.unwrap();
                        journal.wait_durable(sequence).await.unwrap();
                        journal.checkpoint(group, index);
                    }
                }));
            }
            for writer in writers {
                writer.await;
            }
            let elapsed = started.elapsed().as_secs_f64();
            let records = window * per_writer;
            let stats = journal.stats();
            let name = if method == SyncMethod::Fdatasync { "journal_window256_1k" } else { "journal_window256_dsync_1k" };
            println!(
                "bench={name} records={records} records_per_s={:.0} mb_per_s={:.1} flushes={} records_per_flush={:.1}",
                records as f64 / elapsed,
                records as f64 * 1024.0 / elapsed / 1e6,
                stats.flushes - before.flushes,
                (stats.records - before.records) as f64 / (stats.flushes - before.flushes) as f64
            );
        }
    });
    let _ = std::fs::remove_dir_all(&directory);
}
