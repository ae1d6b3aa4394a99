//! The RLIMIT_MEMLOCK check at start-up.
//!
//! Each shard's io_uring registers its I/O buffer memory (glommio's
//! `io_memory`), which pins pages and counts against RLIMIT_MEMLOCK unless the
//! process holds CAP_IPC_LOCK. glommio silently falls back to unregistered
//! buffers when pinning fails; tern refuses instead, with a message that says
//! exactly what to set.

use std::fmt;

/// Extra locked memory per shard beyond its io memory: glommio refuses to start
/// a reactor below 512 KiB of limit, and rings need a little more.
pub const RING_OVERHEAD_BYTES_PER_SHARD: u64 = 512 * 1024;

/// linux/capability.h: CAP_IPC_LOCK.
pub const CAP_IPC_LOCK: u32 = 14;

/// What the process may lock, as read from the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemlockLimits {
    pub soft_bytes: u64,
    pub hard_bytes: u64,
    pub cap_ipc_lock: bool,
}

/// What `check` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemlockOutcome {
    /// CAP_IPC_LOCK: the limit does not apply.
    Capability,
    /// The soft limit already covered the need.
    Sufficient,
    /// The soft limit was raised (up to the hard limit) to cover the need.
    Raised { from_bytes: u64, to_bytes: u64 },
}

/// The need cannot be met; `Display` is the operator-facing message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct MemlockError {
    pub required_bytes: u64,
    pub shards: usize,
    pub io_memory_bytes: u64,
    pub limits: MemlockLimits,
}

impl fmt::Display for MemlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let required_kib = self.required_bytes.div_ceil(1024);
        write!(
            f,
            "locked memory limit too low: {shards} shard(s) need {required} bytes \
             ({shards} x ({io} bytes io memory + {overhead} bytes ring overhead)), but \
             RLIMIT_MEMLOCK is {soft} bytes (hard limit {hard} bytes) and the process lacks \
             CAP_IPC_LOCK. Set one of: `ulimit -l {kib}` (or higher, or `unlimited`) in the \
             shell that starts tern-server; `LimitMEMLOCK={bytes}` (or `infinity`) in its \
             systemd unit; `<user> - memlock {kib}` in /etc/security/limits.conf; or grant \
             CAP_IPC_LOCK (`setcap cap_ipc_lock+ep $(which tern-server)`). Alternatively \
             run fewer shards (--cores) or lower --io_memory.",
            shards = self.shards,
            required = self.required_bytes,
            io = self.io_memory_bytes,
            overhead = RING_OVERHEAD_BYTES_PER_SHARD,
            soft = render_limit(self.limits.soft_bytes),
            hard = render_limit(self.limits.hard_bytes),
            kib = required_kib,
            bytes = self.required_bytes,
        )
    }
}

fn render_limit(bytes: u64) -> String {
    if bytes == libc::RLIM_INFINITY {
        "unlimited".to_string()
    } else {
        bytes.to_string()
    }
}

/// Bytes of locked memory `shards` shards with `io_memory_bytes` each need.
pub fn required_bytes(shards: usize, io_memory_bytes: u64) -> u64 {
    (shards as u64).saturating_mul(io_memory_bytes.saturating_add(RING_OVERHEAD_BYTES_PER_SHARD))
}

/// What must happen for a need, given the limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The capability or the soft limit already covers it.
    Nothing,
    /// Raise the soft limit to this many bytes (within the hard limit).
    Raise(u64),
    /// Only the operator can fix it.
    Insufficient,
}

/// Pure decision: given the limits, what must happen.
pub fn plan(required: u64, limits: MemlockLimits) -> Plan {
    if limits.cap_ipc_lock || limits.soft_bytes >= required {
        return Plan::Nothing;
    }
    if limits.hard_bytes >= required {
        return Plan::Raise(required);
    }
    Plan::Insufficient
}

/// Reads the limits of the current process.
pub fn read_limits() -> MemlockLimits {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    assert_eq!(rc, 0, "getrlimit(RLIMIT_MEMLOCK) failed");
    MemlockLimits {
        soft_bytes: limit.rlim_cur,
        hard_bytes: limit.rlim_max,
        cap_ipc_lock: has_effective_capability(CAP_IPC_LOCK),
    }
}

/// Whether `capability` is in the effective set, from /proc/self/status `CapEff`.
pub fn has_effective_capability(capability: u32) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| mask & (1u64 << capability) != 0)
}

/// Checks the limit for `shards` shards and raises the soft limit if allowed.
pub fn check(shards: usize, io_memory_bytes: u64) -> Result<MemlockOutcome, MemlockError> {
    let required = required_bytes(shards, io_memory_bytes);
    let limits = read_limits();
    let error = || MemlockError {
        required_bytes: required,
        shards,
        io_memory_bytes,
        limits,
    };
    match plan(required, limits) {
        Plan::Nothing if limits.cap_ipc_lock => Ok(MemlockOutcome::Capability),
        Plan::Nothing => Ok(MemlockOutcome::Sufficient),
        Plan::Raise(target) => {
            let limit = libc::rlimit {
                rlim_cur: target,
                rlim_max: limits.hard_bytes,
            };
            // SAFETY: setrlimit reads one rlimit struct.
            let rc = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) };
            if rc != 0 {
                return Err(error());
            }
            Ok(MemlockOutcome::Raised {
                from_bytes: limits.soft_bytes,
                to_bytes: target,
            })
        }
        Plan::Insufficient => Err(error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn capability_bypasses_the_limit() {
        let limits = MemlockLimits {
            soft_bytes: 0,
            hard_bytes: 0,
            cap_ipc_lock: true,
        };
        assert_eq!(plan(100 * MIB, limits), Plan::Nothing);
    }

    #[test]
    fn raises_soft_up_to_hard() {
        let limits = MemlockLimits {
            soft_bytes: 8 * MIB,
            hard_bytes: 64 * MIB,
            cap_ipc_lock: false,
        };
        assert_eq!(plan(8 * MIB, limits), Plan::Nothing);
        assert_eq!(plan(20 * MIB, limits), Plan::Raise(20 * MIB));
        assert_eq!(plan(65 * MIB, limits), Plan::Insufficient);
    }

    #[test]
    fn message_names_what_to_set() {
        let error = MemlockError {
            required_bytes: required_bytes(2, 8 * MIB),
            shards: 2,
            io_memory_bytes: 8 * MIB,
            limits: MemlockLimits {
                soft_bytes: 8 * MIB,
                hard_bytes: 8 * MIB,
                cap_ipc_lock: false,
            },
        };
        let text = error.to_string();
        assert!(text.contains("ulimit -l 17408"), "{text}");
        assert!(text.contains("LimitMEMLOCK=17825792"), "{text}");
        assert!(text.contains("CAP_IPC_LOCK"), "{text}");
    }
}
