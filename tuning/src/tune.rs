//! `tern tune`: the host settings a tern node wants, each tuner a checker
//! and an action over [`Host`] files (the registry is [`TUNERS`]).
//!
//! A tuner lists [`Setting`]s: a file and what it should hold, exactly, at
//! least a number, or one choice selected in a `a [b] c` list. `check`
//! reads each and says ok, would change or cannot (the file is missing,
//! the value wanted is not offered, the host has no such knob); `apply`
//! writes what differs, reads it back and says what it changed, so a
//! second `apply` changes nothing. Settings live in the running kernel
//! only: a reboot resets them (run `tern tune apply` at boot, as the
//! Ansible role does).

use tern_shard::CpuList;

use crate::host::{Host, HostError};

/// What a setting's file should hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    Exactly(String),
    /// A number at least this (a larger one is kept).
    AtLeast(u64),
    /// The choice selected (bracketed) in a list such as
    /// `always [madvise] never`; written as the bare word.
    Selected(String),
    /// A CPU list in taskset syntax holding exactly these CPUs (the
    /// kernel prints `2-3` for `2,3`).
    Cpus(Vec<usize>),
    /// `KEY=value` in a shell-style environment file (its other lines
    /// kept), e.g. `/etc/default/irqbalance`.
    Assignment {
        key: String,
        value: String,
    },
}

/// One file a tuner sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub path: String,
    pub want: Want,
}

/// Where one setting stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Ok {
        current: String,
    },
    /// `apply` writes `wanted`.
    Differs {
        current: String,
        wanted: String,
    },
    Cannot {
        reason: String,
    },
    /// The kernel keeps this one (a managed queue interrupt, whose
    /// affinity it sets itself): not a failure.
    KernelManaged {
        current: String,
    },
}

/// One line of `tern tune`: a tuner's setting (or the tuner, when it does
/// not apply to this host) and where it stands; `changed` when `apply`
/// wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub tuner: &'static str,
    /// The file, or empty when the tuner does not apply here.
    pub path: String,
    pub state: State,
    pub changed: bool,
}

/// Why a tuner does not apply to this host (e.g. no cpufreq in a VM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotApplicable(pub String);

/// The node the host is tuned for.
#[derive(Debug, Clone, Default)]
pub struct Node {
    /// The shards' CPUs (`--cores`); `None`: every online CPU runs one.
    pub shard_cores: Option<Vec<usize>>,
}

/// A tuner: its name, what it is for, and the settings it wants here.
pub struct Tuner {
    pub name: &'static str,
    pub about: &'static str,
    /// Reported only, never written (see `disk_write_cache`).
    pub check_only: bool,
    settings: fn(&Host, &Node) -> Result<Vec<Setting>, NotApplicable>,
}

impl std::fmt::Debug for Tuner {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Tuner")
            .field("name", &self.name)
            .finish()
    }
}

/// Every tuner, in the order `tern tune` runs them.
pub const TUNERS: &[Tuner] = &[
    Tuner {
        name: "cpu_governor",
        about: "every CPU's frequency governor `performance` (no ramp-up delay on a wake-up)",
        check_only: false,
        settings: cpu_governor,
    },
    Tuner {
        name: "cpuidle",
        about: "idle states whose exit latency passes 10 µs disabled on every CPU (a shard \
                woken by a packet or a completion runs at once; the shallow ones stay)",
        check_only: false,
        settings: cpuidle,
    },
    Tuner {
        name: "halt_polling",
        about: "in a KVM guest with the haltpoll cpuidle driver: an idle vCPU polls at least \
                200 µs before it halts, without shrinking the window (a wake-up by IPI costs \
                tens of µs in a VM)",
        check_only: false,
        settings: halt_polling,
    },
    Tuner {
        name: "clocksource",
        about: "the `tsc` clocksource when offered (cheap clock reads for timestamps and timers)",
        check_only: false,
        settings: clocksource,
    },
    Tuner {
        name: "swappiness",
        about: "vm.swappiness 1 (the broker's memory stays resident)",
        check_only: false,
        settings: swappiness,
    },
    Tuner {
        name: "transparent_hugepages",
        about: "transparent huge pages `madvise` (no khugepaged compaction stalls behind the shards' backs)",
        check_only: false,
        settings: transparent_hugepages,
    },
    Tuner {
        name: "aio_events",
        about: "fs.aio-max-nr at least 1048576 (io_uring and AIO contexts of every shard)",
        check_only: false,
        settings: aio_events,
    },
    Tuner {
        name: "net",
        about: "net.core.somaxconn at least 4096, socket buffers up to 16 MiB",
        check_only: false,
        settings: net,
    },
    Tuner {
        name: "irq_affinity",
        about: "NVMe and NIC queue interrupts on the CPUs no shard runs on (the shards' \
                cores keep their time); kernel-managed queue interrupts cannot be moved",
        check_only: false,
        settings: irq_affinity,
    },
    Tuner {
        name: "irqbalance",
        about: "irqbalance told to leave the shards' cores alone \
                (IRQBALANCE_BANNED_CPULIST in /etc/default/irqbalance; restart it after a change)",
        check_only: false,
        settings: irqbalance,
    },
    Tuner {
        name: "disk_scheduler",
        about: "NVMe queues' I/O scheduler `none` (the device orders its own queues)",
        check_only: false,
        settings: disk_scheduler,
    },
    Tuner {
        name: "disk_nomerges",
        about: "NVMe queues' nomerges 2 (no merge lookups on the submission path)",
        check_only: false,
        settings: disk_nomerges,
    },
    Tuner {
        name: "disk_write_cache",
        about: "NVMe volatile write cache, reported: tern flushes it for every durable write; \
                declaring it `write through` would drop those flushes and lose acknowledged \
                data on power loss unless the drive has power-loss protection, so it is \
                never changed",
        check_only: true,
        settings: disk_write_cache,
    },
];

/// The tuners named in `only` (all when empty); an unknown name is an
/// error naming the known ones.
pub fn select(only: &[String]) -> Result<Vec<&'static Tuner>, UnknownTuner> {
    if only.is_empty() {
        return Ok(TUNERS.iter().collect());
    }
    only.iter()
        .map(|name| {
            TUNERS
                .iter()
                .find(|tuner| tuner.name == name)
                .ok_or_else(|| UnknownTuner {
                    name: name.clone(),
                    known: TUNERS.iter().map(|tuner| tuner.name).collect(),
                })
        })
        .collect()
}

#[derive(Debug, thiserror::Error)]
#[error("no tuner {name:?}; the tuners are {}", known.join(", "))]
pub struct UnknownTuner {
    pub name: String,
    pub known: Vec<&'static str>,
}

/// What `tuners` find on `host`, changing nothing.
pub fn check(host: &Host, node: &Node, tuners: &[&Tuner]) -> Vec<Finding> {
    run(host, node, tuners, false)
}

/// Writes every setting that differs (but check-only ones) and reads it
/// back.
pub fn apply(host: &Host, node: &Node, tuners: &[&Tuner]) -> Vec<Finding> {
    run(host, node, tuners, true)
}

fn run(host: &Host, node: &Node, tuners: &[&Tuner], write: bool) -> Vec<Finding> {
    let mut findings = Vec::new();
    for tuner in tuners {
        let settings = match (tuner.settings)(host, node) {
            Ok(settings) => settings,
            Err(NotApplicable(reason)) => {
                findings.push(Finding {
                    tuner: tuner.name,
                    path: String::new(),
                    state: State::Cannot { reason },
                    changed: false,
                });
                continue;
            }
        };
        for setting in settings {
            let mut state = state_of(host, &setting);
            let mut changed = false;
            if let (true, false, State::Differs { wanted, .. }) = (write, tuner.check_only, &state)
            {
                let contents = match &setting.want {
                    Want::Assignment { key, .. } => {
                        let file = host.read(&setting.path).unwrap_or_default();
                        reassigned(&file, key, wanted)
                    }
                    _ => wanted.clone(),
                };
                state = match host.write(&setting.path, &contents) {
                    Ok(()) => match state_of(host, &setting) {
                        now @ State::Ok { .. } => {
                            changed = true;
                            now
                        }
                        State::Differs { current, .. } => State::Cannot {
                            reason: format!("wrote {wanted:?}, reads back {current:?}"),
                        },
                        other => other,
                    },
                    // A managed interrupt refuses any affinity (EIO).
                    Err(HostError::Write { source, .. })
                        if setting.path.starts_with("/proc/irq/")
                            && source.raw_os_error() == Some(libc::EIO) =>
                    {
                        State::KernelManaged {
                            current: host.read(&setting.path).unwrap_or_default(),
                        }
                    }
                    Err(error) => State::Cannot {
                        reason: error.to_string(),
                    },
                };
            }
            findings.push(Finding {
                tuner: tuner.name,
                path: setting.path,
                state,
                changed,
            });
        }
    }
    findings
}

/// Where `setting` stands on `host`.
pub fn state_of(host: &Host, setting: &Setting) -> State {
    let current = match host.read(&setting.path) {
        Ok(current) => current,
        Err(HostError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return State::Cannot {
                reason: "no such file on this host".to_string(),
            }
        }
        Err(error) => {
            return State::Cannot {
                reason: error.to_string(),
            }
        }
    };
    match &setting.want {
        Want::Exactly(wanted) if current == *wanted => State::Ok { current },
        Want::Exactly(wanted) => State::Differs {
            current,
            wanted: wanted.clone(),
        },
        Want::AtLeast(minimum) => match current.parse::<u64>() {
            Ok(value) if value >= *minimum => State::Ok { current },
            Ok(_) => State::Differs {
                current,
                wanted: minimum.to_string(),
            },
            Err(_) => State::Cannot {
                reason: format!("{current:?} is not a number"),
            },
        },
        Want::Cpus(wanted) => match CpuList::parse(&current) {
            Ok(list) if sorted(list.cpus()) == sorted(wanted) => State::Ok { current },
            Ok(_) => State::Differs {
                current,
                wanted: wanted
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            },
            Err(error) => State::Cannot {
                reason: format!("{current:?}: {error}"),
            },
        },
        Want::Assignment { key, value } => {
            let current = assigned(&current, key).unwrap_or_default();
            if current == *value {
                State::Ok { current }
            } else {
                State::Differs {
                    current,
                    wanted: value.clone(),
                }
            }
        }
        Want::Selected(wanted) => {
            let offered: Vec<&str> = current
                .split_whitespace()
                .map(|word| word.trim_start_matches('[').trim_end_matches(']'))
                .collect();
            // A file that holds one bare word has that one selected.
            let selected =
                selected_choice(&current).or_else(|| (offered.len() == 1).then(|| offered[0]));
            if selected == Some(wanted.as_str()) {
                State::Ok {
                    current: wanted.clone(),
                }
            } else if offered.contains(&wanted.as_str()) {
                State::Differs {
                    current: selected.unwrap_or_default().to_string(),
                    wanted: wanted.clone(),
                }
            } else {
                State::Cannot {
                    reason: format!("{wanted:?} is not offered ({current})"),
                }
            }
        }
    }
}

/// The value of the last `key=` line (quotes taken off), if any.
fn assigned(file: &str, key: &str) -> Option<String> {
    file.lines()
        .filter_map(|line| line.trim().strip_prefix(key)?.strip_prefix('='))
        .next_back()
        .map(|value| value.trim().trim_matches('"').to_string())
}

/// `file` with `key="value"` in place of its `key=` lines (or appended).
fn reassigned(file: &str, key: &str, value: &str) -> String {
    let line = format!("{key}=\"{value}\"");
    let mut lines: Vec<String> = Vec::new();
    let mut placed = false;
    for existing in file.lines() {
        let assigns = existing
            .trim()
            .strip_prefix(key)
            .is_some_and(|rest| rest.starts_with('='));
        if !assigns {
            lines.push(existing.to_string());
        } else if !placed {
            lines.push(line.clone());
            placed = true;
        }
    }
    if !placed {
        lines.push(line);
    }
    lines.join("\n")
}

fn sorted(cpus: &[usize]) -> Vec<usize> {
    let mut cpus = cpus.to_vec();
    cpus.sort_unstable();
    cpus
}

/// The bracketed word of `always [madvise] never`.
fn selected_choice(list: &str) -> Option<&str> {
    list.split_whitespace()
        .find_map(|word| word.strip_prefix('[')?.strip_suffix(']'))
}

fn exactly(path: impl Into<String>, value: &str) -> Setting {
    Setting {
        path: path.into(),
        want: Want::Exactly(value.to_string()),
    }
}

fn at_least(path: &str, minimum: u64) -> Setting {
    Setting {
        path: path.to_string(),
        want: Want::AtLeast(minimum),
    }
}

fn selected(path: impl Into<String>, choice: &str) -> Setting {
    Setting {
        path: path.into(),
        want: Want::Selected(choice.to_string()),
    }
}

const CPU_DIRECTORY: &str = "/sys/devices/system/cpu";

fn cpu_governor(host: &Host, _: &Node) -> Result<Vec<Setting>, NotApplicable> {
    let mut settings = Vec::new();
    for cpu in host.entries(CPU_DIRECTORY, "cpu") {
        if !cpu[3..].chars().all(|c| c.is_ascii_digit()) || cpu.len() == 3 {
            continue; // cpufreq, cpuidle, …
        }
        let governor = format!("{CPU_DIRECTORY}/{cpu}/cpufreq/scaling_governor");
        if !host.exists(&governor) {
            continue;
        }
        let available = host
            .read(&format!(
                "{CPU_DIRECTORY}/{cpu}/cpufreq/scaling_available_governors"
            ))
            .unwrap_or_default();
        if !available
            .split_whitespace()
            .any(|name| name == "performance")
        {
            return Err(NotApplicable(format!(
                "{cpu} offers no `performance` governor ({available})"
            )));
        }
        settings.push(exactly(governor, "performance"));
    }
    if settings.is_empty() {
        return Err(NotApplicable(
            "no cpufreq: the frequency is not the kernel's to set (a VM, or fixed by firmware)"
                .to_string(),
        ));
    }
    Ok(settings)
}

/// Idle states slower than this to leave are disabled.
const IDLE_EXIT_LATENCY_US_MAX: u64 = 10;

fn cpuidle(host: &Host, _: &Node) -> Result<Vec<Setting>, NotApplicable> {
    let mut settings = Vec::new();
    for cpu in host.entries(CPU_DIRECTORY, "cpu") {
        if cpu.len() == 3 || !cpu[3..].chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let directory = format!("{CPU_DIRECTORY}/{cpu}/cpuidle");
        for state in host.entries(&directory, "state") {
            let latency = host
                .read(&format!("{directory}/{state}/latency"))
                .ok()
                .and_then(|text| text.parse::<u64>().ok());
            if latency.is_some_and(|latency_us| latency_us > IDLE_EXIT_LATENCY_US_MAX) {
                settings.push(exactly(format!("{directory}/{state}/disable"), "1"));
            }
        }
    }
    if settings.is_empty() {
        return Err(NotApplicable(format!(
            "no idle state slower than {IDLE_EXIT_LATENCY_US_MAX} µs to leave (or no cpuidle driver)"
        )));
    }
    Ok(settings)
}

const HALTPOLL_PARAMETERS: &str = "/sys/module/haltpoll/parameters";
const HALT_POLL_NS_MIN: u64 = 200_000;

fn halt_polling(host: &Host, _: &Node) -> Result<Vec<Setting>, NotApplicable> {
    if !host.exists(&format!("{HALTPOLL_PARAMETERS}/guest_halt_poll_ns")) {
        return Err(NotApplicable(
            "no guest halt polling (not a KVM guest, or no haltpoll governor): on bare metal \
             the cpuidle tuner keeps the slow idle states off"
                .into(),
        ));
    }
    let driver = host
        .read("/sys/devices/system/cpu/cpuidle/current_driver")
        .unwrap_or_default();
    if driver != "haltpoll" {
        return Err(NotApplicable(format!(
            "the cpuidle driver is {driver:?}, not haltpoll: boot with cpuidle_haltpoll.force=1 \
             (and the haltpoll governor) for guest halt polling"
        )));
    }
    Ok(vec![
        at_least(
            &format!("{HALTPOLL_PARAMETERS}/guest_halt_poll_ns"),
            HALT_POLL_NS_MIN,
        ),
        exactly(
            format!("{HALTPOLL_PARAMETERS}/guest_halt_poll_allow_shrink"),
            "N",
        ),
    ])
}

const CLOCKSOURCE: &str = "/sys/devices/system/clocksource/clocksource0";

fn clocksource(host: &Host, _: &Node) -> Result<Vec<Setting>, NotApplicable> {
    let available = host
        .read(&format!("{CLOCKSOURCE}/available_clocksource"))
        .map_err(|error| NotApplicable(error.to_string()))?;
    if !available.split_whitespace().any(|name| name == "tsc") {
        return Err(NotApplicable(format!(
            "`tsc` is not offered ({available}); the kernel found it unstable"
        )));
    }
    Ok(vec![exactly(
        format!("{CLOCKSOURCE}/current_clocksource"),
        "tsc",
    )])
}

fn swappiness(_: &Host, _: &Node) -> Result<Vec<Setting>, NotApplicable> {
    Ok(vec![exactly("/proc/sys/vm/swappiness", "1")])
}

fn transparent_hugepages(_: &Host, _: &Node) -> Result<Vec<Setting>, NotApplicable> {
    Ok(vec![selected(
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "madvise",
    )])
}

fn aio_events(_: &Host, _: &Node) -> Result<Vec<Setting>, NotApplicable> {
    Ok(vec![at_least("/proc/sys/fs/aio-max-nr", 1_048_576)])
}

/// Socket buffers the kernel may grow to.
const SOCKET_BUFFER_BYTES_MAX: u64 = 16 << 20;

fn net(_: &Host, _: &Node) -> Result<Vec<Setting>, NotApplicable> {
    Ok(vec![
        at_least("/proc/sys/net/core/somaxconn", 4096),
        at_least("/proc/sys/net/core/rmem_max", SOCKET_BUFFER_BYTES_MAX),
        at_least("/proc/sys/net/core/wmem_max", SOCKET_BUFFER_BYTES_MAX),
    ])
}

/// Interrupts of these devices' queues are the ones moved off the shards.
const QUEUE_INTERRUPT_PREFIXES: &[&str] = &[
    "nvme", "eth", "ens", "enp", "eno", "mlx", "ixgbe", "i40e", "ice", "ena", "virtio",
];

/// The CPUs the system has online (`/sys/devices/system/cpu/online`).
fn online_cpus(host: &Host) -> Result<Vec<usize>, NotApplicable> {
    let text = host
        .read("/sys/devices/system/cpu/online")
        .map_err(|error| NotApplicable(error.to_string()))?;
    CpuList::parse(&text)
        .map(|list| list.cpus().to_vec())
        .map_err(|error| NotApplicable(format!("online CPUs {text:?}: {error}")))
}

/// The device queue interrupts of `/proc/interrupts` (number, name).
fn queue_interrupts(host: &Host) -> Result<Vec<(u32, String)>, NotApplicable> {
    let table = host
        .read("/proc/interrupts")
        .map_err(|error| NotApplicable(error.to_string()))?;
    Ok(table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let number = line
                .split_whitespace()
                .next()?
                .strip_suffix(':')?
                .parse()
                .ok()?;
            let name = line.split_whitespace().last()?.to_string();
            QUEUE_INTERRUPT_PREFIXES
                .iter()
                .any(|prefix| name.starts_with(prefix))
                .then_some((number, name))
        })
        .collect())
}

fn irq_affinity(host: &Host, node: &Node) -> Result<Vec<Setting>, NotApplicable> {
    let online = online_cpus(host)?;
    let shard_cores = node.shard_cores.clone().unwrap_or_else(|| online.clone());
    let spare: Vec<usize> = online
        .iter()
        .copied()
        .filter(|cpu| !shard_cores.contains(cpu))
        .collect();
    if spare.is_empty() {
        return Err(NotApplicable(format!(
            "every online CPU ({}) runs a shard: no CPU to move interrupts to (leave one out of --cores)",
            online
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(",")
        )));
    }
    let interrupts = queue_interrupts(host)?;
    if interrupts.is_empty() {
        return Err(NotApplicable("no NVMe or NIC queue interrupts".to_string()));
    }
    Ok(interrupts
        .into_iter()
        .map(|(number, _)| Setting {
            path: format!("/proc/irq/{number}/smp_affinity_list"),
            want: Want::Cpus(spare.clone()),
        })
        .collect())
}

const IRQBALANCE_DEFAULTS: &str = "/etc/default/irqbalance";

fn irqbalance(host: &Host, node: &Node) -> Result<Vec<Setting>, NotApplicable> {
    if !host.exists(IRQBALANCE_DEFAULTS) {
        return Err(NotApplicable(format!(
            "no {IRQBALANCE_DEFAULTS} (irqbalance not installed)"
        )));
    }
    let cores = match &node.shard_cores {
        Some(cores) => cores.clone(),
        None => online_cpus(host)?,
    };
    let mut cores = cores;
    cores.sort_unstable();
    Ok(vec![Setting {
        path: IRQBALANCE_DEFAULTS.to_string(),
        want: Want::Assignment {
            key: "IRQBALANCE_BANNED_CPULIST".to_string(),
            value: cores
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
        },
    }])
}

/// Every NVMe namespace's block device (`/sys/block/nvme0n1`, …; the
/// `nvme0c0n1` paths of multipath controllers are hidden ones, skipped).
fn nvme_queues(host: &Host, file: &str) -> Result<Vec<String>, NotApplicable> {
    let queues: Vec<String> = host
        .entries("/sys/block", "nvme")
        .into_iter()
        .filter(|name| !name.contains('c'))
        .map(|name| format!("/sys/block/{name}/queue/{file}"))
        .collect();
    if queues.is_empty() {
        return Err(NotApplicable("no NVMe block device".to_string()));
    }
    Ok(queues)
}

fn disk_scheduler(host: &Host, _: &Node) -> Result<Vec<Setting>, NotApplicable> {
    Ok(nvme_queues(host, "scheduler")?
        .into_iter()
        .map(|path| selected(path, "none"))
        .collect())
}

fn disk_nomerges(host: &Host, _: &Node) -> Result<Vec<Setting>, NotApplicable> {
    Ok(nvme_queues(host, "nomerges")?
        .into_iter()
        .map(|path| exactly(path, "2"))
        .collect())
}

fn disk_write_cache(host: &Host, _: &Node) -> Result<Vec<Setting>, NotApplicable> {
    // Reported as it stands: whatever the cache, the setting is "ok" (the
    // line shows `write back` or `write through`).
    Ok(nvme_queues(host, "write_cache")?
        .into_iter()
        .map(|path| {
            let current = host.read(&path).unwrap_or_default();
            exactly(path, &current)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A host tree with what a 2-CPU VM with one NVMe drive shows.
    fn fake_host() -> (tempfile::TempDir, Host) {
        let files = [
            ("proc/sys/vm/swappiness", "60"),
            ("proc/sys/fs/aio-max-nr", "65536"),
            ("proc/sys/net/core/somaxconn", "8192"),
            ("proc/sys/net/core/rmem_max", "212992"),
            ("proc/sys/net/core/wmem_max", "212992"),
            (
                "sys/kernel/mm/transparent_hugepage/enabled",
                "[always] madvise never",
            ),
            (
                "sys/devices/system/clocksource/clocksource0/available_clocksource",
                "kvm-clock tsc acpi_pm",
            ),
            (
                "sys/devices/system/clocksource/clocksource0/current_clocksource",
                "kvm-clock",
            ),
            (
                "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
                "powersave",
            ),
            (
                "sys/devices/system/cpu/cpu0/cpufreq/scaling_available_governors",
                "performance powersave",
            ),
            (
                "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor",
                "performance",
            ),
            (
                "sys/devices/system/cpu/cpu1/cpufreq/scaling_available_governors",
                "performance powersave",
            ),
            (
                "sys/devices/system/cpu/cpuidle/current_driver",
                "intel_idle",
            ),
            ("sys/devices/system/cpu/cpu0/cpuidle/state0/latency", "0"),
            ("sys/devices/system/cpu/cpu0/cpuidle/state0/disable", "0"),
            ("sys/devices/system/cpu/cpu0/cpuidle/state1/latency", "2"),
            ("sys/devices/system/cpu/cpu0/cpuidle/state1/disable", "0"),
            ("sys/devices/system/cpu/cpu0/cpuidle/state2/latency", "133"),
            ("sys/devices/system/cpu/cpu0/cpuidle/state2/disable", "0"),
            ("sys/devices/system/cpu/cpuidle/current_driver", "haltpoll"),
            (
                "sys/module/haltpoll/parameters/guest_halt_poll_ns",
                "200000",
            ),
            (
                "sys/module/haltpoll/parameters/guest_halt_poll_allow_shrink",
                "Y",
            ),
            (
                "sys/block/nvme0n1/queue/scheduler",
                "[mq-deadline] kyber none",
            ),
            ("sys/block/nvme0n1/queue/nomerges", "0"),
            ("sys/block/nvme0n1/queue/write_cache", "write back"),
            ("sys/block/nvme0c0n1/queue/scheduler", "[none]"),
            ("sys/devices/system/cpu/online", "0-3"),
            (
                "proc/interrupts",
                "           CPU0       CPU1       CPU2       CPU3\n \
                 24:   0   1200   0   0  PCI-MSI 524288-edge      nvme0q1\n \
                 27:   5000   0   0   0  IO-APIC   1-edge      i8042",
            ),
            ("proc/irq/24/smp_affinity_list", "0-3"),
            (
                "etc/default/irqbalance",
                "# irqbalance options\n#IRQBALANCE_BANNED_CPULIST=\nOPTIONS=\"\"",
            ),
        ];
        crate::host::fake_tree(&files)
    }

    fn line(findings: &[Finding], path: &str) -> Finding {
        findings
            .iter()
            .find(|finding| finding.path == path)
            .unwrap_or_else(|| panic!("no finding for {path}: {findings:?}"))
            .clone()
    }

    #[test]
    fn check_changes_nothing_apply_changes_what_differs_then_nothing() {
        let (root, host) = fake_host();
        let all = select(&[]).expect("every tuner");
        let node = Node {
            shard_cores: Some(vec![0, 1]),
        };
        let checked = check(&host, &node, &all);
        assert_eq!(
            line(&checked, "/proc/sys/vm/swappiness").state,
            State::Differs {
                current: "60".into(),
                wanted: "1".into()
            }
        );
        assert_eq!(
            line(&checked, "/proc/sys/net/core/somaxconn").state,
            State::Ok {
                current: "8192".into()
            },
            "a larger value is kept"
        );
        assert_eq!(
            line(&checked, "/sys/kernel/mm/transparent_hugepage/enabled").state,
            State::Differs {
                current: "always".into(),
                wanted: "madvise".into()
            }
        );
        assert!(checked.iter().all(|finding| !finding.changed));
        assert_eq!(host.read("/proc/sys/vm/swappiness").expect("read"), "60");

        let applied = apply(&host, &node, &all);
        let changed: Vec<&str> = applied
            .iter()
            .filter(|finding| finding.changed)
            .map(|finding| finding.path.as_str())
            .collect();
        assert_eq!(
            changed,
            [
                "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
                "/sys/devices/system/cpu/cpu0/cpuidle/state2/disable",
                "/sys/module/haltpoll/parameters/guest_halt_poll_allow_shrink",
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
                "/proc/sys/vm/swappiness",
                "/sys/kernel/mm/transparent_hugepage/enabled",
                "/proc/sys/fs/aio-max-nr",
                "/proc/sys/net/core/rmem_max",
                "/proc/sys/net/core/wmem_max",
                "/proc/irq/24/smp_affinity_list",
                "/etc/default/irqbalance",
                "/sys/block/nvme0n1/queue/scheduler",
                "/sys/block/nvme0n1/queue/nomerges",
            ]
        );
        assert!(applied
            .iter()
            .all(|finding| matches!(finding.state, State::Ok { .. })));
        assert_eq!(
            host.read("/proc/sys/fs/aio-max-nr").expect("read"),
            "1048576"
        );
        assert_eq!(
            host.read("/etc/default/irqbalance").expect("read"),
            "# irqbalance options\n#IRQBALANCE_BANNED_CPULIST=\nOPTIONS=\"\"\nIRQBALANCE_BANNED_CPULIST=\"0,1\""
        );
        // The fake file holds the word written; the kernel's would show
        // the list with the new choice bracketed (both read as selected).
        let thp = root
            .path()
            .join("sys/kernel/mm/transparent_hugepage/enabled");
        std::fs::write(&thp, "always [madvise] never\n").expect("as the kernel shows it");
        // As the kernel prints the list written as `2,3`.
        std::fs::write(root.path().join("proc/irq/24/smp_affinity_list"), "2-3\n")
            .expect("as the kernel shows it");
        let again = apply(&host, &node, &all);
        assert!(again.iter().all(|finding| !finding.changed), "{again:?}");
        assert!(again
            .iter()
            .all(|finding| matches!(finding.state, State::Ok { .. })));
        // The write cache is reported, never written.
        assert_eq!(
            line(&again, "/sys/block/nvme0n1/queue/write_cache").state,
            State::Ok {
                current: "write back".into()
            }
        );
        assert!(!again
            .iter()
            .any(|finding| finding.path.contains("nvme0c0n1")));
    }

    #[test]
    fn read_only_files_missing_knobs_and_unknown_choices_are_refused() {
        let (root, host) = fake_host();
        let swappiness = root.path().join("proc/sys/vm/swappiness");
        std::fs::set_permissions(&swappiness, std::fs::Permissions::from_mode(0o444))
            .expect("chmod");
        std::fs::remove_dir_all(root.path().join("sys/devices/system/cpu/cpu0/cpufreq"))
            .expect("no cpufreq on cpu0");
        std::fs::remove_dir_all(root.path().join("sys/devices/system/cpu/cpu1/cpufreq"))
            .expect("nor on cpu1");
        std::fs::write(
            root.path().join("sys/block/nvme0n1/queue/scheduler"),
            "[mq-deadline] kyber\n",
        )
        .expect("no `none`");
        std::fs::remove_file(root.path().join("proc/sys/fs/aio-max-nr")).expect("removed");
        let all = select(&[]).expect("every tuner");
        let applied = apply(&host, &Node::default(), &all);
        match line(&applied, "/proc/sys/vm/swappiness").state {
            State::Cannot { reason } => assert!(reason.contains("read-only"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(host.read("/proc/sys/vm/swappiness").expect("read"), "60");
        let governor = applied
            .iter()
            .find(|finding| finding.tuner == "cpu_governor")
            .expect("a line");
        assert!(
            matches!(&governor.state, State::Cannot { reason } if reason.contains("no cpufreq")),
            "{governor:?}"
        );
        assert!(matches!(
            line(&applied, "/sys/block/nvme0n1/queue/scheduler").state,
            State::Cannot { .. }
        ));
        assert_eq!(
            line(&applied, "/proc/sys/fs/aio-max-nr").state,
            State::Cannot {
                reason: "no such file on this host".into()
            }
        );
    }

    #[test]
    fn interrupts_stay_put_when_every_cpu_runs_a_shard() {
        let (_root, host) = fake_host();
        let irq = select(&["irq_affinity".to_string()]).expect("known");
        let every_cpu = apply(&host, &Node::default(), &irq);
        assert_eq!(every_cpu.len(), 1);
        assert!(
            matches!(&every_cpu[0].state, State::Cannot { reason } if reason.contains("every online CPU (0,1,2,3) runs a shard")),
            "{every_cpu:?}"
        );
        assert_eq!(
            host.read("/proc/irq/24/smp_affinity_list").expect("read"),
            "0-3"
        );
    }

    #[test]
    fn selection_by_name() {
        let picked = select(&["swappiness".to_string(), "net".to_string()]).expect("known");
        assert_eq!(
            picked.iter().map(|tuner| tuner.name).collect::<Vec<_>>(),
            ["swappiness", "net"]
        );
        let unknown = select(&["turbo".to_string()]).expect_err("unknown");
        assert!(unknown.to_string().contains("cpu_governor"), "{unknown}");
    }

    #[test]
    fn assignments_replace_their_line_and_keep_the_others() {
        let file = "# options\n#KEY=\nKEY=\"1\"\nOTHER=2\nKEY=3";
        assert_eq!(assigned(file, "KEY").as_deref(), Some("3"));
        assert_eq!(
            reassigned(file, "KEY", "0,1"),
            "# options\n#KEY=\nKEY=\"0,1\"\nOTHER=2"
        );
        assert_eq!(reassigned("OTHER=2", "KEY", "0"), "OTHER=2\nKEY=\"0\"");
        assert_eq!(assigned("OTHER=2", "KEY"), None);
        assert_eq!(assigned("KEYS=1", "KEY"), None);
    }

    #[test]
    fn halt_polling_needs_the_haltpoll_driver() {
        let (root, host) = fake_host();
        let tuners = select(&["halt_polling".to_string()]).expect("a tuner");
        let node = Node::default();
        assert_eq!(
            line(
                &check(&host, &node, &tuners),
                "/sys/module/haltpoll/parameters/guest_halt_poll_ns"
            )
            .state,
            State::Ok {
                current: "200000".into()
            }
        );
        std::fs::write(
            root.path()
                .join("sys/devices/system/cpu/cpuidle/current_driver"),
            "none\n",
        )
        .expect("a driver");
        let checked = check(&host, &node, &tuners);
        assert!(
            checked.iter().all(|finding| matches!(&finding.state, State::Cannot { reason } if reason.contains("cpuidle_haltpoll.force=1"))),
            "{checked:?}"
        );
    }

    #[test]
    fn the_selected_choice_is_the_bracketed_word() {
        assert_eq!(selected_choice("always [madvise] never"), Some("madvise"));
        assert_eq!(selected_choice("[none] mq-deadline"), Some("none"));
        assert_eq!(selected_choice("none"), None);
    }
}
