//! `tern iotune`: measures the journal's and the block store's devices and
//! writes the I/O profile tern-server reads (`tern_broker::io_profile`:
//! journal batch size, block-store write buffer, read-ahead, prefetch).
//!
//! Per device, each workload for `--seconds`: durable writes one at a
//! time (O_DIRECT + O_DSYNC, 4 KiB to 1 MiB: the journal's flushes),
//! sequential O_DIRECT writes and reads by size at depth 1 (64 KiB to
//! 4 MiB) and at 128 KiB by depth (1, 4, 16: one thread per outstanding
//! I/O, each on its own stripe). A directory is measured through a
//! temporary file of `--file-size` (removed after); a raw journal device
//! through its first region's bytes, and only before tern has formatted
//! it (a device holding a tern journal, or anything else, is refused:
//! the measurement overwrites it).
//!
//! Exit status: 0, 1 refused or failed, 2 bad usage.

use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use tern_broker::io_profile::{self, DeviceProfile, IoProfile, Measurement, DEPTH_PROBE_BYTES};
use tern_storage::journal_device::{AlignedBlocks, Contents, JournalDevice, HEADER_AREA_BYTES};

#[derive(Debug, Args)]
pub struct IotuneArgs {
    /// The server's data directory (the block store's device is measured
    /// there, and the profile written there by default)
    #[arg(long = "store_dir", visible_alias = "sd", default_value = "./data")]
    store_dir: PathBuf,
    /// The journal: a directory or a raw block device (default: as
    /// tern-server resolves it from -c and --store_dir)
    #[arg(long = "journal_dir")]
    journal_dir: Option<PathBuf>,
    /// The server's config file
    #[arg(short = 'c', long = "config")]
    config: Option<PathBuf>,
    /// Where to write the profile (default: <store_dir>/io-profile.json)
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seconds per workload
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Bytes of each device the workloads use
    #[arg(long = "file-size", value_parser = parse_size, default_value = "256MiB")]
    file_size: u64,
}

fn parse_size(text: &str) -> Result<u64, tern_broker::config::SizeError> {
    tern_broker::config::parse_size(text).map(|bytes| bytes as u64)
}

#[derive(Debug, thiserror::Error)]
enum IotuneError {
    #[error("{0}")]
    Config(#[from] tern_broker::config::ConfigError),
    #[error("{path}: {operation}: {source}")]
    Io {
        path: String,
        operation: &'static str,
        source: std::io::Error,
    },
    #[error("{0}")]
    Device(#[from] tern_storage::journal_device::JournalDeviceError),
    #[error(
        "{path} holds a tern journal: measuring would overwrite it. Run `tern iotune` before \
         the server first starts on the device, or measure another device of the same kind"
    )]
    HoldsJournal { path: String },
    #[error("--seconds must be positive and --file-size at least 16 MiB")]
    Usage,
}

/// Sizes measured at depth 1.
const DURABLE_SIZES: [u64; 5] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
const SEQUENTIAL_SIZES: [u64; 5] = [64 << 10, DEPTH_PROBE_BYTES, 256 << 10, 1 << 20, 4 << 20];
const DEPTHS: [u32; 2] = [4, 16];
/// Latency samples kept per workload (the rest are counted, not kept).
const SAMPLES_MAX: usize = 1 << 20;

pub fn execute(arguments: &IotuneArgs) -> ExitCode {
    match run(arguments) {
        Ok(()) => ExitCode::SUCCESS,
        Err(IotuneError::Usage) => {
            eprintln!("tern iotune: {}", IotuneError::Usage);
            ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("tern iotune: {error}");
            ExitCode::FAILURE
        }
    }
}

fn io_error(path: &Path, operation: &'static str) -> impl FnOnce(std::io::Error) -> IotuneError {
    let path = path.display().to_string();
    move |source| IotuneError::Io {
        path,
        operation,
        source,
    }
}

fn run(arguments: &IotuneArgs) -> Result<(), IotuneError> {
    if !arguments.seconds.is_finite() || arguments.seconds <= 0.0 || arguments.file_size < 16 << 20
    {
        return Err(IotuneError::Usage);
    }
    let config = tern_broker::config::Config::resolve(tern_broker::config::Flags {
        config: arguments.config.clone(),
        store_dir: Some(arguments.store_dir.clone()),
        journal_dir: arguments.journal_dir.clone(),
        jetstream: true,
        ..Default::default()
    })?;
    let jetstream = config.jetstream.expect("JetStream is enabled by the flags");
    let duration = Duration::from_secs_f64(arguments.seconds);
    let area_bytes = arguments.file_size / (4 << 20) * (4 << 20);
    let journal = measure(&jetstream.journal_dir, area_bytes, duration)?;
    let store = measure(&config.store_dir, area_bytes, duration)?;
    let settings = io_profile::derive_settings(&journal, &store);
    let profile = IoProfile {
        version: io_profile::VERSION,
        measured_unix_seconds: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs()),
        journal,
        store,
        settings,
    };
    let out = arguments
        .out
        .clone()
        .unwrap_or_else(|| config.store_dir.join(io_profile::FILE_NAME));
    let text = serde_json::to_string_pretty(&profile).expect("a profile serialises");
    let temporary = out.with_extension("json.tmp");
    std::fs::create_dir_all(out.parent().unwrap_or(Path::new(".")))
        .and_then(|()| std::fs::write(&temporary, text + "\n"))
        .and_then(|()| std::fs::rename(&temporary, &out))
        .map_err(io_error(&out, "write"))?;
    println!(
        "settings: journal batches up to {} bytes, block-store writes of {} bytes, read-ahead {} bytes, {} runs prefetched",
        settings.journal_batch_bytes_max,
        settings.store_write_buffer_bytes,
        settings.store_read_ahead_bytes,
        settings.store_prefetch_runs
    );
    println!("wrote {} (tern-server reads it at start)", out.display());
    Ok(())
}

/// Where a device's workloads run: a temporary file in a directory, or
/// the journal device's first region.
struct Area {
    path: PathBuf,
    base: u64,
    bytes: u64,
    /// Removed when done.
    temporary: bool,
    /// Held (O_EXCL) while measuring a raw device.
    _guard: Option<JournalDevice>,
}

impl Area {
    fn open(path: &Path, bytes: u64) -> Result<Area, IotuneError> {
        if tern_broker::jetstream::journal_location::is_device(path) {
            let device = JournalDevice::open(path)?;
            if let Contents::Tern { .. } = device.contents()? {
                return Err(IotuneError::HoldsJournal {
                    path: path.display().to_string(),
                });
            }
            let bytes = bytes.min(
                device.facts().bytes.saturating_sub(HEADER_AREA_BYTES) / (4 << 20) * (4 << 20),
            );
            return Ok(Area {
                path: path.to_path_buf(),
                base: HEADER_AREA_BYTES,
                bytes,
                temporary: false,
                _guard: Some(device),
            });
        }
        std::fs::create_dir_all(path).map_err(io_error(path, "create directory"))?;
        let file = path.join(format!(".tern-iotune-{}", std::process::id()));
        let area = Area {
            path: file.clone(),
            base: 0,
            bytes,
            temporary: true,
            _guard: None,
        };
        // Written once in full, so reads and overwrites meet allocated blocks.
        let handle = open(&file, true, false)?;
        let mut chunk = AlignedBlocks::zeroed(4 << 20);
        chunk.bytes_mut().fill(0x5a);
        let mut offset = 0;
        while offset < bytes {
            handle
                .write_all_at(chunk.bytes(), offset)
                .map_err(io_error(&file, "fill"))?;
            offset += chunk.bytes().len() as u64;
        }
        handle.sync_all().map_err(io_error(&file, "fill"))?;
        Ok(area)
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn open(path: &Path, create: bool, durable: bool) -> Result<File, IotuneError> {
    let mut flags = libc::O_DIRECT;
    if durable {
        flags |= libc::O_DSYNC;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .custom_flags(flags)
        .open(path)
        .map_err(io_error(path, "open"))
}

fn measure(path: &Path, area_bytes: u64, duration: Duration) -> Result<DeviceProfile, IotuneError> {
    println!(
        "measuring {} ({} per workload)",
        path.display(),
        humanize(duration)
    );
    let area = Area::open(path, area_bytes)?;
    let mut profile = DeviceProfile {
        path: path.display().to_string(),
        ..DeviceProfile::default()
    };
    for bytes in DURABLE_SIZES {
        let measurement = workload(&area, Kind::DurableWrite, bytes, 1, duration)?;
        report("durable write", &measurement);
        profile.durable_writes.push(measurement);
    }
    for (kind, list) in [
        (Kind::Write, &mut profile.writes),
        (Kind::Read, &mut profile.reads),
    ] {
        let name = if kind == Kind::Write { "write" } else { "read" };
        for bytes in SEQUENTIAL_SIZES {
            let measurement = workload(&area, kind, bytes, 1, duration)?;
            report(name, &measurement);
            list.push(measurement);
        }
        for depth in DEPTHS {
            let measurement = workload(&area, kind, DEPTH_PROBE_BYTES, depth, duration)?;
            report(name, &measurement);
            list.push(measurement);
        }
    }
    Ok(profile)
}

fn humanize(duration: Duration) -> String {
    format!("{:.2} s", duration.as_secs_f64())
}

fn report(name: &str, measurement: &Measurement) {
    println!(
        "  {name:<14} {:>8} bytes  depth {:>2}  {:>9.1} MB/s  p50 {:>8.1} µs  p99 {:>8.1} µs  ({} I/Os)",
        measurement.bytes,
        measurement.queue_depth,
        measurement.bytes_per_second / 1e6,
        measurement.p50_micros,
        measurement.p99_micros,
        measurement.operations
    );
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    DurableWrite,
    Write,
    Read,
}

/// Runs `depth` threads for `duration`, each doing `bytes`-sized I/O in
/// order through its own stripe of the area (wrapping around).
fn workload(
    area: &Area,
    kind: Kind,
    bytes: u64,
    depth: u32,
    duration: Duration,
) -> Result<Measurement, IotuneError> {
    let stripe_bytes = area.bytes / u64::from(depth) / bytes * bytes;
    assert!(stripe_bytes >= bytes, "the area holds one I/O per thread");
    let started = Instant::now();
    let outcomes: Vec<Result<(u64, Vec<u32>), IotuneError>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..u64::from(depth))
            .map(|thread| {
                let path = &area.path;
                let base = area.base + thread * stripe_bytes;
                scope.spawn(move || -> Result<(u64, Vec<u32>), IotuneError> {
                    let file = open(path, false, kind == Kind::DurableWrite)?;
                    let mut buffer = AlignedBlocks::zeroed(bytes as usize);
                    buffer.bytes_mut().fill(0xa5);
                    let mut samples = Vec::new();
                    let mut operations = 0u64;
                    let mut offset = 0u64;
                    while started.elapsed() < duration {
                        let at = base + offset;
                        let begun = Instant::now();
                        match kind {
                            Kind::Read => file.read_exact_at(buffer.bytes_mut(), at),
                            Kind::Write | Kind::DurableWrite => {
                                file.write_all_at(buffer.bytes(), at)
                            }
                        }
                        .map_err(io_error(path, "I/O"))?;
                        if samples.len() < SAMPLES_MAX {
                            samples
                                .push(begun.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
                        }
                        operations += 1;
                        offset = (offset + bytes) % stripe_bytes;
                    }
                    Ok((operations, samples))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("a measuring thread does not panic"))
            .collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let mut operations = 0;
    let mut samples = Vec::new();
    for outcome in outcomes {
        let (count, kept) = outcome?;
        operations += count;
        samples.extend(kept);
    }
    Ok(Measurement {
        bytes,
        queue_depth: depth,
        operations,
        bytes_per_second: (operations * bytes) as f64 / elapsed,
        p50_micros: percentile(&mut samples, 0.50),
        p99_micros: percentile(&mut samples, 0.99),
    })
}

/// The `quantile` of `samples` (sorted in place), 0 when empty.
fn percentile(samples: &mut [u32], quantile: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_unstable();
    let rank = ((samples.len() as f64 * quantile).ceil() as usize).clamp(1, samples.len());
    f64::from(samples[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut samples: Vec<u32> = (1..=100).rev().collect();
        assert_eq!(percentile(&mut samples, 0.5), 50.0);
        assert_eq!(percentile(&mut samples, 0.99), 99.0);
        assert_eq!(percentile(&mut [7], 0.99), 7.0);
        assert_eq!(percentile(&mut [], 0.5), 0.0);
    }
}
