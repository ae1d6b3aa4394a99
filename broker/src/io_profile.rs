//! The I/O profile: what `tern iotune` measured on the journal's and the
//! block store's devices, and the settings derived from it that
//! tern-server uses (journal batch size, block-store write buffer,
//! read-ahead and prefetch depth). JSON, written by `tern iotune` to
//! `<store_dir>/io-profile.json` by default; the server reads that file
//! at start when it exists, or the file `[jetstream] io_profile` names.
//!
//! ```json
//! {
//!   "version": 1,
//!   "measured_unix_seconds": 1796000000,
//!   "journal": { "path": "/dev/nvme0n1", "durable_writes": [...], "writes": [...], "reads": [...] },
//!   "store": { "path": "/var/lib/tern", ... },
//!   "settings": {
//!     "journal_batch_bytes_max": 1048576,
//!     "store_write_buffer_bytes": 262144,
//!     "store_read_ahead_bytes": 1048576,
//!     "store_prefetch_runs": 3
//!   }
//! }
//! ```
//!
//! Each measurement is `{ "bytes", "queue_depth", "operations",
//! "bytes_per_second", "p50_micros", "p99_micros" }`: `durable_writes` are
//! O_DIRECT + O_DSYNC writes one at a time; `writes` and `reads` are
//! O_DIRECT sequential I/O, by size at depth 1 and by depth at 128 KiB.
//! The server reads only `version` and `settings` (each clamped to the
//! ranges below), so an operator may edit them by hand.

use std::path::Path;

use serde::{Deserialize, Serialize};

pub const VERSION: u32 = 1;
/// The profile file in a store directory.
pub const FILE_NAME: &str = "io-profile.json";
/// Larger files are not profiles.
const PROFILE_BYTES_MAX: u64 = 1 << 20;

/// What the server sizes from the profile, each within its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoSettings {
    /// The largest journal batch one flush writes (at least what the
    /// largest message needs, which the server adds).
    pub journal_batch_bytes_max: u64,
    /// Bytes a stream's block store buffers before it writes.
    pub store_write_buffer_bytes: u64,
    /// Bytes the block store reads at once for a message not in memory.
    pub store_read_ahead_bytes: u64,
    /// Read-ahead runs kept in flight for a reader going in order.
    pub store_prefetch_runs: u64,
}

pub const JOURNAL_BATCH_RANGE: (u64, u64) = (256 << 10, 8 << 20);
// Per file stream (its write buffer), and per reader (its prefetched runs):
// bounded so that many streams do not add up to much memory.
pub const WRITE_BUFFER_RANGE: (u64, u64) = (64 << 10, 1 << 20);
pub const READ_AHEAD_RANGE: (u64, u64) = (64 << 10, 4 << 20);
pub const PREFETCH_RANGE: (u64, u64) = (1, 4);

impl IoSettings {
    /// Every value inside its range, byte sizes in whole 4 KiB blocks.
    pub fn clamped(self) -> IoSettings {
        let bytes = |value: u64, (low, high): (u64, u64)| value.clamp(low, high) / 4096 * 4096;
        IoSettings {
            journal_batch_bytes_max: bytes(self.journal_batch_bytes_max, JOURNAL_BATCH_RANGE),
            store_write_buffer_bytes: bytes(self.store_write_buffer_bytes, WRITE_BUFFER_RANGE),
            store_read_ahead_bytes: bytes(self.store_read_ahead_bytes, READ_AHEAD_RANGE),
            store_prefetch_runs: self
                .store_prefetch_runs
                .clamp(PREFETCH_RANGE.0, PREFETCH_RANGE.1),
        }
    }
}

/// One measured workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    pub bytes: u64,
    pub queue_depth: u32,
    pub operations: u64,
    pub bytes_per_second: f64,
    pub p50_micros: f64,
    pub p99_micros: f64,
}

/// What was measured on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct DeviceProfile {
    pub path: String,
    pub durable_writes: Vec<Measurement>,
    pub writes: Vec<Measurement>,
    pub reads: Vec<Measurement>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IoProfile {
    pub version: u32,
    pub measured_unix_seconds: u64,
    pub journal: DeviceProfile,
    pub store: DeviceProfile,
    pub settings: IoSettings,
}

fn at_depth_one(list: &[Measurement]) -> Vec<&Measurement> {
    list.iter()
        .filter(|measurement| measurement.queue_depth == 1)
        .collect()
}

/// The I/O size the depth measurements use.
pub const DEPTH_PROBE_BYTES: u64 = 128 << 10;

/// The share of the best throughput a size or depth must reach to count
/// as saturating the device.
const SATURATION: f64 = 0.9;

/// The smallest size (or depth, by `key`) whose throughput reaches 90 % of
/// the best among `measurements`.
fn saturating(measurements: &[&Measurement], key: impl Fn(&Measurement) -> u64) -> Option<u64> {
    let best = measurements
        .iter()
        .map(|measurement| measurement.bytes_per_second)
        .fold(0.0, f64::max);
    measurements
        .iter()
        .filter(|measurement| measurement.bytes_per_second >= SATURATION * best)
        .map(|measurement| key(measurement))
        .min()
}

/// The settings a profile's measurements call for: each the smallest
/// size (or depth) that gets 90 % of the device's best throughput, so
/// batches and buffers grow no larger than the device rewards. Defaults
/// (the server's own) where nothing was measured.
pub fn derive_settings(journal: &DeviceProfile, store: &DeviceProfile) -> IoSettings {
    let by_depth: Vec<&Measurement> = store
        .reads
        .iter()
        .filter(|measurement| measurement.bytes == DEPTH_PROBE_BYTES)
        .collect();
    IoSettings {
        journal_batch_bytes_max: saturating(&at_depth_one(&journal.durable_writes), |m| m.bytes)
            .unwrap_or(2 << 20),
        store_write_buffer_bytes: saturating(&at_depth_one(&store.writes), |m| m.bytes)
            .unwrap_or(256 << 10),
        store_read_ahead_bytes: saturating(&at_depth_one(&store.reads), |m| m.bytes)
            .unwrap_or(256 << 10),
        store_prefetch_runs: saturating(&by_depth, |m| u64::from(m.queue_depth))
            .map_or(2, |depth| depth.saturating_sub(1)),
    }
    .clamped()
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("I/O profile {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("I/O profile {path} is {bytes} bytes: not a profile")]
    TooLarge { path: String, bytes: u64 },
    #[error("I/O profile {path}: {reason} (run `tern iotune` again, or remove it)")]
    Invalid { path: String, reason: String },
}

/// Reads the profile at `path`: `Ok(None)` when there is no such file.
pub fn read(path: &Path) -> Result<Option<IoSettings>, ProfileError> {
    let shown = path.display().to_string();
    let bytes = match std::fs::metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ProfileError::Read {
                path: shown,
                source,
            })
        }
        Ok(meta) if meta.len() > PROFILE_BYTES_MAX => {
            return Err(ProfileError::TooLarge {
                path: shown,
                bytes: meta.len(),
            })
        }
        Ok(_) => std::fs::read(path).map_err(|source| ProfileError::Read {
            path: shown.clone(),
            source,
        })?,
    };
    parse(&bytes, &shown).map(Some)
}

/// A profile's settings from its bytes (`path` names it in errors):
/// `version` must be this tern's, `settings` complete; each setting is
/// clamped to its range.
pub fn parse(bytes: &[u8], path: &str) -> Result<IoSettings, ProfileError> {
    #[derive(Deserialize)]
    struct Settings {
        version: u32,
        settings: IoSettings,
    }
    let parsed: Settings =
        serde_json::from_slice(bytes).map_err(|error| ProfileError::Invalid {
            path: path.to_string(),
            reason: error.to_string(),
        })?;
    if parsed.version != VERSION {
        return Err(ProfileError::Invalid {
            path: path.to_string(),
            reason: format!("version {} (this tern reads {VERSION})", parsed.version),
        });
    }
    Ok(parsed.settings.clamped())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(bytes: u64, queue_depth: u32, megabytes_per_second: f64) -> Measurement {
        Measurement {
            bytes,
            queue_depth,
            operations: 100,
            bytes_per_second: megabytes_per_second * 1e6,
            p50_micros: 10.0,
            p99_micros: 20.0,
        }
    }

    #[test]
    fn settings_are_the_smallest_sizes_that_saturate() {
        let journal = DeviceProfile {
            path: "/dev/nvme0n1".into(),
            durable_writes: vec![
                measured(4 << 10, 1, 40.0),
                measured(64 << 10, 1, 400.0),
                measured(256 << 10, 1, 900.0),
                measured(1 << 20, 1, 1000.0),
            ],
            ..DeviceProfile::default()
        };
        let store = DeviceProfile {
            path: "/var/lib/tern".into(),
            writes: vec![
                measured(64 << 10, 1, 500.0),
                measured(256 << 10, 1, 1900.0),
                measured(1 << 20, 1, 2000.0),
                measured(128 << 10, 4, 2000.0),
            ],
            reads: vec![
                measured(64 << 10, 1, 300.0),
                measured(256 << 10, 1, 800.0),
                measured(1 << 20, 1, 1500.0),
                measured(4 << 20, 1, 1600.0),
                measured(128 << 10, 1, 600.0),
                measured(128 << 10, 4, 2000.0),
                measured(128 << 10, 16, 2100.0),
            ],
            ..DeviceProfile::default()
        };
        let settings = derive_settings(&journal, &store);
        assert_eq!(
            settings,
            IoSettings {
                journal_batch_bytes_max: 256 << 10,
                store_write_buffer_bytes: 256 << 10,
                store_read_ahead_bytes: 1 << 20,
                store_prefetch_runs: 3,
            }
        );
        // Nothing measured: the server's defaults.
        let empty = derive_settings(&DeviceProfile::default(), &DeviceProfile::default());
        assert_eq!(empty.journal_batch_bytes_max, 2 << 20);
        assert_eq!(empty.store_prefetch_runs, 2);
    }

    #[test]
    fn a_profile_round_trips_and_hand_edits_are_clamped() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join(FILE_NAME);
        assert!(read(&path).unwrap().is_none());
        let profile = IoProfile {
            version: VERSION,
            measured_unix_seconds: 1,
            journal: DeviceProfile::default(),
            store: DeviceProfile::default(),
            settings: IoSettings {
                journal_batch_bytes_max: 1 << 40,
                store_write_buffer_bytes: 5,
                store_read_ahead_bytes: (1 << 20) + 7,
                store_prefetch_runs: 100,
            },
        };
        std::fs::write(&path, serde_json::to_vec_pretty(&profile).unwrap()).unwrap();
        assert_eq!(
            read(&path).unwrap(),
            Some(IoSettings {
                journal_batch_bytes_max: 8 << 20,
                store_write_buffer_bytes: 64 << 10,
                store_read_ahead_bytes: 1 << 20,
                store_prefetch_runs: 4,
            })
        );
        std::fs::write(&path, b"{\"version\": 2, \"settings\": {}}").unwrap();
        assert!(matches!(read(&path), Err(ProfileError::Invalid { .. })));
    }
}
