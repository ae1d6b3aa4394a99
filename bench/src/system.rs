//! CPU and memory around a measured window: the client's own CPU (getrusage),
//! and the server's CPU and RSS from `/proc/<pid>` when it runs here, or from
//! its monitoring endpoint (`/varz` `cpu` and `mem`, nats-server's field
//! names, which tern keeps) when only a URL is known.
//!
//! Client CPU tells a reader whether the client was the limit: at 100 % per
//! client core the numbers describe the client, not the server.
//!
//! Steal tells a reader whether the host was: on a virtual machine the
//! hypervisor may run something else on a vCPU the server is pinned to, and
//! that time shows up nowhere else (not as the server's CPU, not as idle).
//! It is read from `/proc/stat` for the CPUs the server process may run on.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Largest monitoring response read.
const HTTP_RESPONSE_BYTES_MAX: u64 = 4 << 20;
const HTTP_TIMEOUT: Duration = Duration::from_secs(3);

/// Where server figures come from.
#[derive(Clone, Debug)]
pub enum ServerSource {
    /// Nothing known: server columns stay empty.
    None,
    /// A process on this host.
    Pid(u32),
    /// `host:port` of a monitoring endpoint serving `/varz`.
    Monitor(String),
}

/// One reading; two of them make a [`SystemUsage`].
#[derive(Clone, Debug)]
pub struct SystemSample {
    pub at: Instant,
    pub client_cpu_nanos: u64,
    pub server_cpu_nanos: Option<u64>,
    pub server_cpu_percent: Option<f64>,
    pub server_rss_bytes: Option<u64>,
    pub server_peak_rss_bytes: Option<u64>,
    /// Steal ticks summed over the server's CPUs, and how many CPUs.
    pub server_steal: Option<(u64, usize)>,
}

/// CPU as a percentage of one core (200 % = two cores busy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SystemUsage {
    pub client_cpu_percent: f64,
    pub server_cpu_percent: Option<f64>,
    pub server_rss_bytes: Option<u64>,
    pub server_peak_rss_bytes: Option<u64>,
    /// Share of the server's CPUs' time the hypervisor gave to something
    /// else (100 % = all of it), when the server runs on this host.
    pub server_steal_percent: Option<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error("monitor {address}: {source}")]
    Io {
        address: String,
        source: std::io::Error,
    },
    #[error("monitor {address}{path}: {what}")]
    Response {
        address: String,
        path: String,
        what: String,
    },
}

pub fn sample(source: &ServerSource) -> SystemSample {
    let at = Instant::now();
    let client_cpu_nanos = client_cpu_nanos();
    let mut sample = SystemSample {
        at,
        client_cpu_nanos,
        server_cpu_nanos: None,
        server_cpu_percent: None,
        server_rss_bytes: None,
        server_peak_rss_bytes: None,
        server_steal: None,
    };
    match source {
        ServerSource::None => {}
        ServerSource::Pid(pid) => {
            sample.server_cpu_nanos = process_cpu_nanos(*pid);
            sample.server_rss_bytes = status_kib(*pid, "VmRSS:").map(|kib| kib * 1024);
            sample.server_peak_rss_bytes = status_kib(*pid, "VmHWM:").map(|kib| kib * 1024);
            sample.server_steal = allowed_cpus(*pid).and_then(|cpus| {
                let ticks = steal_ticks(&std::fs::read_to_string("/proc/stat").ok()?, &cpus)?;
                Some((ticks, cpus.len()))
            });
        }
        ServerSource::Monitor(address) => {
            if let Ok(varz) = varz(address) {
                sample.server_cpu_percent = varz.get("cpu").and_then(serde_json::Value::as_f64);
                sample.server_rss_bytes = varz.get("mem").and_then(serde_json::Value::as_u64);
                sample.server_peak_rss_bytes =
                    varz.get("mem_peak").and_then(serde_json::Value::as_u64);
            }
        }
    }
    sample
}

/// Usage between two samples of the same source.
pub fn usage(start: &SystemSample, end: &SystemSample) -> SystemUsage {
    let wall_nanos = end.at.saturating_duration_since(start.at).as_nanos().max(1) as f64;
    let percent = |first: u64, last: u64| last.saturating_sub(first) as f64 / wall_nanos * 100.0;
    let server_cpu_percent = match (start.server_cpu_nanos, end.server_cpu_nanos) {
        (Some(first), Some(last)) => Some(percent(first, last)),
        // /varz reports its own recent average; take the later reading.
        _ => end.server_cpu_percent,
    };
    let server_steal_percent = match (start.server_steal, end.server_steal) {
        (Some((first, cpus)), Some((last, same))) if cpus == same && cpus > 0 => ticks_per_second()
            .map(|ticks| {
                let tick_nanos = 1_000_000_000 / ticks;
                percent(first * tick_nanos, last * tick_nanos) / cpus as f64
            }),
        _ => None,
    };
    SystemUsage {
        client_cpu_percent: percent(start.client_cpu_nanos, end.client_cpu_nanos),
        server_cpu_percent,
        server_rss_bytes: end.server_rss_bytes,
        server_peak_rss_bytes: end.server_peak_rss_bytes,
        server_steal_percent,
    }
}

fn ticks_per_second() -> Option<u64> {
    // SAFETY: sysconf has no memory effects.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then_some(ticks as u64)
}

/// The CPUs a process may run on (`Cpus_allowed_list:` of
/// `/proc/<pid>/status`, e.g. `1` or `0-3,8`).
pub fn allowed_cpus(pid: u32) -> Option<Vec<usize>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))?;
    parse_cpu_list(list.trim())
}

fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    const CPUS_MAX: usize = 1 << 16;
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|part| !part.is_empty()) {
        let (first, last): (usize, usize) = match part.split_once('-') {
            Some((first, last)) => (first.parse().ok()?, last.parse().ok()?),
            None => {
                let cpu = part.parse().ok()?;
                (cpu, cpu)
            }
        };
        if first > last || last >= CPUS_MAX {
            return None;
        }
        cpus.extend(first..=last);
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// Steal ticks (the 8th number of a `cpuN` line of `/proc/stat`) summed
/// over `cpus`; `None` if one of them is missing.
fn steal_ticks(proc_stat: &str, cpus: &[usize]) -> Option<u64> {
    let mut total = 0;
    for cpu in cpus {
        let name = format!("cpu{cpu}");
        let line = proc_stat
            .lines()
            .find(|line| line.split_whitespace().next() == Some(name.as_str()))?;
        let steal: u64 = line.split_whitespace().nth(8)?.parse().ok()?;
        total += steal;
    }
    Some(total)
}

/// User plus system CPU of this process so far.
pub fn client_cpu_nanos() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return 0;
        }
        usage
    };
    let nanos =
        |time: libc::timeval| time.tv_sec as u64 * 1_000_000_000 + time.tv_usec as u64 * 1_000;
    nanos(usage.ru_utime) + nanos(usage.ru_stime)
}

/// utime + stime of a process from `/proc/<pid>/stat`.
pub fn process_cpu_nanos(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces: fields start after the last ')'.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    // After ')': state is field 3 of stat(5), utime 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 1_000_000_000 / ticks_per_second()?)
}

/// A `kB` line of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// `GET /varz` from `host:port` (an `http://` prefix is allowed).
pub fn varz(address: &str) -> Result<serde_json::Value, MonitorError> {
    let body = http_get(address, "/varz")?;
    serde_json::from_str(&body).map_err(|error| MonitorError::Response {
        address: address.to_string(),
        path: "/varz".into(),
        what: format!("not JSON: {error}"),
    })
}

/// A plain HTTP/1.0 GET with bounded time and size.
pub fn http_get(address: &str, path: &str) -> Result<String, MonitorError> {
    let address = address
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let io = |source| MonitorError::Io {
        address: address.clone(),
        source,
    };
    let socket_address = std::net::ToSocketAddrs::to_socket_addrs(&address)
        .map_err(io)?
        .next()
        .ok_or_else(|| MonitorError::Response {
            address: address.clone(),
            path: path.into(),
            what: "address does not resolve".into(),
        })?;
    let mut stream = TcpStream::connect_timeout(&socket_address, HTTP_TIMEOUT).map_err(io)?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT)).map_err(io)?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT)).map_err(io)?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.0\r\nHost: {address}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .map_err(io)?;
    let mut response = Vec::new();
    stream
        .take(HTTP_RESPONSE_BYTES_MAX)
        .read_to_end(&mut response)
        .map_err(io)?;
    let response = String::from_utf8_lossy(&response);
    let failure = |what: String| MonitorError::Response {
        address: address.clone(),
        path: path.into(),
        what,
    };
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| failure("no HTTP response".into()))?;
    if head.split_whitespace().nth(1) != Some("200") {
        return Err(failure(head.lines().next().unwrap_or_default().to_string()));
    }
    Ok(body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_readable_and_cpu_advances() {
        let pid = std::process::id();
        let first = sample(&ServerSource::Pid(pid));
        let mut spin = 0u64;
        let started = Instant::now();
        while started.elapsed() < Duration::from_millis(30) {
            spin = spin.wrapping_add(std::hint::black_box(1));
        }
        let second = sample(&ServerSource::Pid(pid));
        assert!(spin > 0);
        let usage = usage(&first, &second);
        assert!(usage.client_cpu_percent > 10.0, "{usage:?}");
        assert!(usage.server_cpu_percent.is_some());
        assert!(usage.server_rss_bytes.unwrap() > 0);
        assert!(usage.server_peak_rss_bytes.unwrap() >= usage.server_rss_bytes.unwrap());
        let steal = usage
            .server_steal_percent
            .expect("steal of this host's CPUs");
        assert!((0.0..=100.0).contains(&steal), "{steal}");
    }

    #[test]
    fn cpu_lists_and_steal_ticks_parse() {
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list("0-2,5"), Some(vec![0, 1, 2, 5]));
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        let proc_stat = "cpu  10 0 10 100 5 0 1 30 0 0\n\
cpu0 5 0 5 50 2 0 1 10 0 0\n\
cpu1 5 0 5 50 3 0 0 20 0 0\n\
intr 1 2 3\n";
        assert_eq!(steal_ticks(proc_stat, &[1]), Some(20));
        assert_eq!(steal_ticks(proc_stat, &[0, 1]), Some(30));
        assert_eq!(steal_ticks(proc_stat, &[2]), None);
        // This process may run somewhere, and /proc/stat names those CPUs.
        let cpus = allowed_cpus(std::process::id()).expect("Cpus_allowed_list");
        let real = std::fs::read_to_string("/proc/stat").unwrap();
        assert!(steal_ticks(&real, &cpus).is_some());
    }

    #[test]
    fn unreachable_monitor_is_an_error_not_a_hang() {
        // Port 1 on loopback: nothing listens there.
        assert!(varz("127.0.0.1:1").is_err());
        let sample = sample(&ServerSource::Monitor("127.0.0.1:1".into()));
        assert_eq!(sample.server_rss_bytes, None);
    }
}
