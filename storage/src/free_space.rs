//! Free space on the block store's filesystem, kept above a reserve.
//!
//! The journal is preallocated, so a full disk shows up where the block store
//! grows: applying an acked message would fail with ENOSPC and stop its
//! stream. Instead each shard refuses new messages for file streams while
//! the filesystem's free space, less what the shard wrote since it last
//! looked, is under the reserve (nats-server's answer to a server over its
//! storage limit: 503 10023 `insufficient resources`).
//!
//! [`FreeSpace`] is the sans-IO part: it decides when to look again (after
//! `recheck_bytes` written, or after an interval, sooner while low so freed
//! space is noticed) and whether space is low. [`filesystem_free_bytes`] is
//! the look (`statvfs`, a few microseconds).
//!
//! With several shards on one filesystem each counts only its own writes
//! between looks. Each shard looks again after `recheck_bytes`, so what no
//! shard has seen yet is at most `shards × recheck_bytes`; the broker sets
//! `recheck_bytes = reserve / (2 × shards)`, which keeps half the reserve
//! untouched for metadata (indexes, consumer state, checkpoints).

use std::path::Path;
use std::time::{Duration, Instant};

/// Looks again this often while space is fine (other processes write too).
pub const RECHECK_INTERVAL_FINE: Duration = Duration::from_secs(1);
/// Looks again this often while space is low, so freed space is noticed.
pub const RECHECK_INTERVAL_LOW: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct FreeSpace {
    reserve_bytes: u64,
    recheck_bytes: u64,
    /// Free bytes at the last look; `None` before the first.
    free_bytes: Option<u64>,
    written_since_check_bytes: u64,
    checked_at: Option<Instant>,
}

impl FreeSpace {
    pub fn new(reserve_bytes: u64, recheck_bytes: u64) -> FreeSpace {
        assert!(recheck_bytes > 0, "a recheck every 0 bytes never ends");
        FreeSpace {
            reserve_bytes,
            recheck_bytes,
            free_bytes: None,
            written_since_check_bytes: 0,
            checked_at: None,
        }
    }

    pub fn reserve_bytes(&self) -> u64 {
        self.reserve_bytes
    }

    /// Whether the filesystem should be looked at before deciding.
    pub fn needs_check(&self, now: Instant) -> bool {
        let Some(checked_at) = self.checked_at else {
            return true;
        };
        let interval = if self.is_low() {
            RECHECK_INTERVAL_LOW
        } else {
            RECHECK_INTERVAL_FINE
        };
        self.written_since_check_bytes >= self.recheck_bytes
            || now.saturating_duration_since(checked_at) >= interval
    }

    /// The result of a look at the filesystem.
    pub fn record_check(&mut self, free_bytes: u64, now: Instant) {
        self.free_bytes = Some(free_bytes);
        self.written_since_check_bytes = 0;
        self.checked_at = Some(now);
    }

    /// Bytes this shard is about to write (counted until the next look).
    pub fn note_written(&mut self, bytes: u64) {
        self.written_since_check_bytes = self.written_since_check_bytes.saturating_add(bytes);
    }

    /// Free bytes as last seen, less what was written since.
    pub fn free_bytes_estimate(&self) -> Option<u64> {
        self.free_bytes
            .map(|free| free.saturating_sub(self.written_since_check_bytes))
    }

    /// Whether new data must be refused. Unknown (never looked, or the look
    /// failed) counts as fine: a failed `statvfs` must not stop publishing.
    pub fn is_low(&self) -> bool {
        self.free_bytes_estimate()
            .is_some_and(|free| free < self.reserve_bytes)
    }
}

/// Free bytes for an unprivileged writer on the filesystem holding `path`,
/// and the filesystem's size.
pub fn filesystem_space_bytes(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `stats` is written by the call
    // before it is read (only on success).
    let result = unsafe { libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) };
    if result != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: statvfs succeeded and filled it.
    let stats = unsafe { stats.assume_init() };
    let fragment_bytes = stats.f_frsize;
    Ok((
        stats.f_bavail.saturating_mul(fragment_bytes),
        stats.f_blocks.saturating_mul(fragment_bytes),
    ))
}

/// Free bytes on the filesystem holding `path`.
pub fn filesystem_free_bytes(path: &Path) -> std::io::Result<u64> {
    filesystem_space_bytes(path).map(|(free, _)| free)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn low_once_writes_since_the_look_eat_into_the_reserve() {
        let start = Instant::now();
        let mut space = FreeSpace::new(10 * MIB, 4 * MIB);
        assert!(space.needs_check(start), "never looked");
        assert!(!space.is_low(), "unknown counts as fine");
        space.record_check(13 * MIB, start);
        assert!(!space.needs_check(start));
        space.note_written(2 * MIB);
        assert!(!space.is_low());
        space.note_written(2 * MIB);
        assert!(space.is_low(), "13 - 4 MiB is under the 10 MiB reserve");
        assert!(space.needs_check(start), "4 MiB written: look again");
        space.record_check(12 * MIB, start);
        assert!(!space.is_low(), "others freed space");
    }

    #[test]
    fn looks_again_sooner_while_low() {
        let start = Instant::now();
        let mut space = FreeSpace::new(10 * MIB, 4 * MIB);
        space.record_check(20 * MIB, start);
        assert!(!space.needs_check(start + RECHECK_INTERVAL_LOW));
        assert!(space.needs_check(start + RECHECK_INTERVAL_FINE));
        space.record_check(5 * MIB, start);
        assert!(space.is_low());
        assert!(space.needs_check(start + RECHECK_INTERVAL_LOW));
    }

    #[test]
    fn statvfs_reads_this_filesystem() {
        let (free, size) = filesystem_space_bytes(Path::new(".")).unwrap();
        assert!(size > 0 && free <= size);
        assert!(filesystem_free_bytes(Path::new("/no/such/dir")).is_err());
    }
}
