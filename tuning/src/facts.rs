//! `tern check`: the host facts that explain a slow run, read, never
//! changed: CPU time stolen by the hypervisor, the cpuidle driver and
//! governor, the frequency governors, device interrupts landing on the
//! shards' cores, the locked-memory limit, and the block devices under
//! the store directories (scheduler, write cache, rotational, block size,
//! filesystem). Each fact is a [`Fact`]: a name, what was found and a
//! verdict (fine, worth a look, or unknown here).

use std::collections::BTreeMap;
use std::path::Path;

use crate::host::Host;

/// How a fact bears on a tern node's latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Fine,
    /// Likely to cost latency: the detail says why.
    Look,
    /// Not readable on this host.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    pub name: String,
    pub verdict: Verdict,
    pub detail: String,
}

fn fact(name: impl Into<String>, verdict: Verdict, detail: impl Into<String>) -> Fact {
    Fact {
        name: name.into(),
        verdict,
        detail: detail.into(),
    }
}

/// CPU time counters of `/proc/stat`'s `cpu` line, in ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    pub total: u64,
    pub steal: u64,
}

/// The aggregate `cpu` line of `/proc/stat`.
pub fn cpu_times(host: &Host) -> Option<CpuTimes> {
    let stat = host.read("/proc/stat").ok()?;
    let line = stat.lines().find(|line| line.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|field| field.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest time is counted in user time already.
    let steal = *fields.get(7)?;
    let total = fields.iter().take(8).sum();
    Some(CpuTimes { total, steal })
}

/// Steal between two samples (or since boot, `before` = zero): more than
/// 2 % of the CPU time is worth a look (a noisy neighbour, an
/// overcommitted host).
pub fn steal(before: CpuTimes, after: CpuTimes) -> Fact {
    let total = after.total.saturating_sub(before.total);
    let stolen = after.steal.saturating_sub(before.steal);
    if total == 0 {
        return fact("steal", Verdict::Unknown, "no CPU time elapsed");
    }
    let percent = 100.0 * stolen as f64 / total as f64;
    let verdict = if percent > 2.0 {
        Verdict::Look
    } else {
        Verdict::Fine
    };
    fact(
        "steal",
        verdict,
        format!("{percent:.1} % of CPU time taken by the hypervisor"),
    )
}

/// The cpuidle driver and governor: deep C-states cost wake-up latency;
/// `haltpoll` (in a guest) or a polling governor keep it short.
pub fn cpuidle(host: &Host) -> Fact {
    let driver = host.read("/sys/devices/system/cpu/cpuidle/current_driver");
    let governor = host
        .read("/sys/devices/system/cpu/cpuidle/current_governor")
        .or_else(|_| host.read("/sys/devices/system/cpu/cpuidle/current_governor_ro"));
    match (driver, governor) {
        (Ok(driver), governor) => {
            let governor = governor.unwrap_or_else(|_| "?".to_string());
            let verdict = if driver == "intel_idle" || driver == "acpi_idle" {
                Verdict::Look
            } else {
                Verdict::Fine
            };
            let why = if verdict == Verdict::Look {
                " (deep C-states: wake-ups cost up to hundreds of µs; limit them, e.g. `intel_idle.max_cstate=1`)"
            } else {
                ""
            };
            fact(
                "cpuidle",
                verdict,
                format!("driver {driver}, governor {governor}{why}"),
            )
        }
        (Err(_), _) => fact("cpuidle", Verdict::Unknown, "no cpuidle in sysfs"),
    }
}

/// Every CPU's frequency governor, grouped.
pub fn governors(host: &Host) -> Fact {
    let mut by_governor: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for cpu in host.entries("/sys/devices/system/cpu", "cpu") {
        if cpu.len() == 3 || !cpu[3..].chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(governor) = host.read(&format!(
            "/sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor"
        )) {
            by_governor.entry(governor).or_default().push(cpu);
        }
    }
    if by_governor.is_empty() {
        return fact(
            "governor",
            Verdict::Unknown,
            "no cpufreq (a VM, or fixed by firmware)",
        );
    }
    let verdict = if by_governor.keys().all(|governor| governor == "performance") {
        Verdict::Fine
    } else {
        Verdict::Look
    };
    let detail = by_governor
        .iter()
        .map(|(governor, cpus)| format!("{governor} on {}", cpus.len()))
        .collect::<Vec<_>>()
        .join(", ");
    fact("governor", verdict, detail)
}

/// Device interrupts (NVMe, NIC and virtio queues) counted on the shards'
/// `cores` (`/proc/interrupts`): each lands on a shard's core and steals
/// its time; pin them elsewhere (`tern tune`'s IRQ tuner, to come).
pub fn interrupts_on(host: &Host, cores: &[usize]) -> Fact {
    let Ok(table) = host.read("/proc/interrupts") else {
        return fact("interrupts", Verdict::Unknown, "no /proc/interrupts");
    };
    let mut lines = table.lines();
    let Some(header) = lines.next() else {
        return fact("interrupts", Verdict::Unknown, "an empty /proc/interrupts");
    };
    let columns: Vec<usize> = header
        .split_whitespace()
        .filter_map(|cpu| cpu.strip_prefix("CPU")?.parse().ok())
        .collect();
    let mut on_cores: BTreeMap<String, u64> = BTreeMap::new();
    for line in lines {
        let mut fields = line.split_whitespace();
        let Some(irq) = fields.next() else {
            continue;
        };
        if !irq
            .trim_end_matches(':')
            .chars()
            .all(|c| c.is_ascii_digit())
        {
            continue; // NMI, LOC, …: per-CPU by nature
        }
        let fields: Vec<&str> = fields.collect();
        let Some(name) = fields.last() else {
            continue;
        };
        let device = [
            "nvme", "virtio", "eth", "ens", "enp", "mlx", "ixgbe", "i40e", "ice", "ena",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix));
        if !device {
            continue;
        }
        for (count, cpu) in fields.iter().zip(&columns) {
            let Ok(count) = count.parse::<u64>() else {
                break;
            };
            if count > 0 && cores.contains(cpu) {
                *on_cores.entry(name.to_string()).or_default() += count;
            }
        }
    }
    if on_cores.is_empty() {
        return fact(
            "interrupts",
            Verdict::Fine,
            "no device interrupts on the shards' cores",
        );
    }
    let detail = on_cores
        .iter()
        .map(|(name, count)| format!("{name} {count}"))
        .collect::<Vec<_>>()
        .join(", ");
    fact(
        "interrupts",
        Verdict::Look,
        format!("on the shards' cores since boot: {detail}"),
    )
}

/// The locked-memory limit (soft, hard), in bytes; `None` unlimited.
pub fn memlock_fact(limits: (Option<u64>, Option<u64>), needed_bytes: u64) -> Fact {
    let show = |limit: Option<u64>| {
        limit.map_or("unlimited".to_string(), |bytes| {
            format!("{} KiB", bytes >> 10)
        })
    };
    let (soft, hard) = limits;
    let verdict = if soft.is_none_or(|bytes| bytes >= needed_bytes) {
        Verdict::Fine
    } else {
        Verdict::Look
    };
    let why = if verdict == Verdict::Look {
        format!(
            " (the shards register {} KiB of io_uring buffers: raise LimitMEMLOCK or grant CAP_IPC_LOCK)",
            needed_bytes >> 10
        )
    } else {
        String::new()
    };
    fact(
        "memlock",
        verdict,
        format!("soft {}, hard {}{why}", show(soft), show(hard)),
    )
}

/// This process's RLIMIT_MEMLOCK.
pub fn memlock_limits() -> (Option<u64>, Option<u64>) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    let result = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    if result != 0 {
        return (Some(0), Some(0));
    }
    let finite = |value: libc::rlim_t| (value != libc::RLIM_INFINITY).then_some(value);
    (finite(limit.rlim_cur), finite(limit.rlim_max))
}

/// The block device holding `directory` (`major:minor` from its stat) and
/// its queue settings, with the filesystem from `/proc/mounts`.
pub fn device_under(host: &Host, directory: &Path, device: (u32, u32)) -> Fact {
    let name = format!("device under {}", directory.display());
    let (major, minor) = device;
    let Ok(link) = std::fs::read_link(host.root().join(format!("sys/dev/block/{major}:{minor}")))
    else {
        return fact(
            name,
            Verdict::Unknown,
            format!(
                "{major}:{minor} is not a block device (tmpfs, overlay, a network filesystem?)"
            ),
        );
    };
    // …/block/nvme0n1/nvme0n1p1 for a partition: the queue is the disk's.
    let components: Vec<String> = link
        .components()
        .map(|component| component.as_os_str().to_string_lossy().into_owned())
        .collect();
    let Some(at) = components.iter().position(|component| component == "block") else {
        return fact(
            name,
            Verdict::Unknown,
            format!("{}: no `block` in the link", link.display()),
        );
    };
    let Some(disk) = components.get(at + 1) else {
        return fact(
            name,
            Verdict::Unknown,
            format!("{}: no disk in the link", link.display()),
        );
    };
    let partition = components.get(at + 2).filter(|part| !part.is_empty());
    let queue = |file: &str| {
        host.read(&format!("/sys/block/{disk}/queue/{file}"))
            .unwrap_or_else(|_| "?".to_string())
    };
    let scheduler = queue("scheduler");
    let scheduler = scheduler
        .split_whitespace()
        .find_map(|word| word.strip_prefix('[')?.strip_suffix(']'))
        .unwrap_or(&scheduler)
        .to_string();
    let rotational = queue("rotational") == "1";
    let write_cache = queue("write_cache");
    let block_bytes = queue("logical_block_size");
    let raw = {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(directory).is_ok_and(|meta| meta.file_type().is_block_device())
    };
    let filesystem = if raw {
        "raw device (a journal without a filesystem)".to_string()
    } else {
        mount_of(host, directory).unwrap_or_else(|| "?".to_string())
    };
    let verdict = if rotational || (scheduler != "none" && disk.starts_with("nvme")) {
        Verdict::Look
    } else {
        Verdict::Fine
    };
    let device = match partition {
        Some(partition) => format!("{partition} on {disk}"),
        None => disk.clone(),
    };
    fact(
        name,
        verdict,
        format!(
            "{device}: {filesystem}, scheduler {scheduler}, {}, write cache {write_cache}, {block_bytes}-byte blocks",
            if rotational { "rotational" } else { "solid state" }
        ),
    )
}

/// The filesystem type and mount point of the longest mount holding
/// `directory` (`/proc/mounts`).
fn mount_of(host: &Host, directory: &Path) -> Option<String> {
    let mounts = host.read("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _source = fields.next()?;
            let point = fields.next()?;
            let kind = fields.next()?;
            directory
                .starts_with(point)
                .then(|| (point.len(), format!("{kind} at {point}")))
        })
        .max_by_key(|(length, _)| *length)
        .map(|(_, found)| found)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::host::fake_tree as tree;

    #[test]
    fn steal_between_samples() {
        let (_root, host) = tree(&[(
            "proc/stat",
            "cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 50 0 25 400 5 0 0 20 0 0",
        )]);
        let times = cpu_times(&host).expect("the cpu line");
        assert_eq!(
            times,
            CpuTimes {
                total: 1000,
                steal: 40
            }
        );
        let since_boot = steal(CpuTimes::default(), times);
        assert_eq!(since_boot.verdict, Verdict::Look);
        assert!(since_boot.detail.starts_with("4.0 %"), "{since_boot:?}");
        let later = CpuTimes {
            total: 2000,
            steal: 45,
        };
        assert_eq!(steal(times, later).verdict, Verdict::Fine);
    }

    #[test]
    fn device_interrupts_on_shard_cores_are_counted() {
        let (_root, host) = tree(&[(
            "proc/interrupts",
            "           CPU0       CPU1       CPU2\n\
              24:          0       1200          0  PCI-MSI 524288-edge      nvme0q1\n\
              25:        300          0          0  PCI-MSI 524289-edge      nvme0q2\n\
              26:          0          0        900  PCI-MSI 327680-edge      virtio0-input.0\n\
              27:       5000          0          0  IO-APIC   1-edge      i8042\n\
             LOC:      10000      10000      10000   Local timer interrupts",
        )]);
        let on_shards = interrupts_on(&host, &[1, 2]);
        assert_eq!(on_shards.verdict, Verdict::Look);
        assert_eq!(
            on_shards.detail,
            "on the shards' cores since boot: nvme0q1 1200, virtio0-input.0 900"
        );
        assert_eq!(interrupts_on(&host, &[3]).verdict, Verdict::Fine);
    }

    #[test]
    fn cpuidle_governors_and_memlock() {
        let (_root, host) = tree(&[
            (
                "sys/devices/system/cpu/cpuidle/current_driver",
                "intel_idle",
            ),
            ("sys/devices/system/cpu/cpuidle/current_governor", "menu"),
            (
                "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
                "performance",
            ),
            (
                "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
                "powersave",
            ),
        ]);
        assert_eq!(cpuidle(&host).verdict, Verdict::Look);
        let governor = governors(&host);
        assert_eq!(governor.verdict, Verdict::Look);
        assert_eq!(governor.detail, "performance on 1, powersave on 1");
        let (_empty, bare) = tree(&[]);
        assert_eq!(cpuidle(&bare).verdict, Verdict::Unknown);
        assert_eq!(governors(&bare).verdict, Verdict::Unknown);
        assert_eq!(
            memlock_fact((Some(8 << 20), Some(8 << 20)), 2 << 20).verdict,
            Verdict::Fine
        );
        let short = memlock_fact((Some(64 << 10), Some(64 << 10)), 2 << 20);
        assert_eq!(short.verdict, Verdict::Look);
        assert!(short.detail.contains("CAP_IPC_LOCK"), "{short:?}");
        assert_eq!(
            memlock_fact((None, None), 2 << 20).detail,
            "soft unlimited, hard unlimited"
        );
    }

    #[test]
    fn the_device_under_a_directory_with_its_queue_and_filesystem() {
        let (root, host) = tree(&[
            ("sys/block/nvme0n1/queue/scheduler", "[none] mq-deadline"),
            ("sys/block/nvme0n1/queue/rotational", "0"),
            ("sys/block/nvme0n1/queue/write_cache", "write back"),
            ("sys/block/nvme0n1/queue/logical_block_size", "4096"),
            (
                "proc/mounts",
                "/dev/vda / ext4 rw 0 0\n/dev/nvme0n1p1 /var/lib/tern xfs rw 0 0",
            ),
        ]);
        std::fs::create_dir_all(root.path().join("sys/dev/block")).expect("dirs");
        std::os::unix::fs::symlink(
            "../../devices/pci0000:00/0000:00:04.0/nvme/nvme0/block/nvme0n1/nvme0n1p1",
            root.path().join("sys/dev/block/259:1"),
        )
        .expect("a link");
        let found = device_under(&host, Path::new("/var/lib/tern/data"), (259, 1));
        assert_eq!(found.verdict, Verdict::Fine, "{found:?}");
        assert_eq!(
            found.detail,
            "nvme0n1p1 on nvme0n1: xfs at /var/lib/tern, scheduler none, solid state, write cache write back, 4096-byte blocks"
        );
        let tmpfs = device_under(&host, Path::new("/tmp"), (0, 45));
        assert_eq!(tmpfs.verdict, Verdict::Unknown);
    }
}
