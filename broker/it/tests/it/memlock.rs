//! The RLIMIT_MEMLOCK check at start-up, on the real binary: without
//! CAP_IPC_LOCK and with a limit below what the shards need, tern-server must
//! refuse to start and say exactly what to set; with a hard limit that allows
//! it, it raises its own soft limit and starts.
//!
//! Uses `setpriv` (util-linux) to drop CAP_IPC_LOCK from the bounding set, so
//! the test works when run as root, which has the capability otherwise.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1024 * 1024;

fn tern_without_ipc_lock(soft_bytes: u64, hard_bytes: u64, args: &[&str]) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args(["--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock", "--"])
        .arg(crate::common::tern_server())
        .args(["-a", "127.0.0.1", "-p", "-1", "-m", "0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; runs in the child before exec.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: soft_bytes,
                rlim_max: hard_bytes,
            };
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command
}

#[test]
fn refuses_to_start_and_says_what_to_set() {
    let output = tern_without_ipc_lock(
        MIB,
        MIB,
        &["--cores", "0", "--unpinned", "--io_memory", "4MiB"],
    )
    .output()
    .expect("setpriv and tern-server run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    // 1 shard x (4 MiB + 512 KiB) = 4718592 bytes = 4608 KiB.
    assert!(stderr.contains("locked memory limit too low"), "{stderr}");
    assert!(stderr.contains("ulimit -l 4608"), "{stderr}");
    assert!(stderr.contains("LimitMEMLOCK=4718592"), "{stderr}");
    assert!(stderr.contains("CAP_IPC_LOCK"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

fn current_hard_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) },
        0
    );
    limit.rlim_max
}

#[test]
fn raises_the_soft_limit_when_the_hard_limit_allows() {
    // Needs 1 x (2 MiB + 512 KiB); the soft limit starts at 1 MiB, the hard
    // limit stays what this process has (raising it needs CAP_SYS_RESOURCE).
    let hard = current_hard_limit();
    assert!(
        hard >= 3 * MIB,
        "this test needs a hard RLIMIT_MEMLOCK of at least 3 MiB, have {hard}"
    );
    let mut child = tern_without_ipc_lock(
        MIB,
        hard,
        &["--cores", "0", "--unpinned", "--io_memory", "2MiB"],
    )
    .spawn()
    .expect("setpriv and tern-server run");
    let stderr = child.stderr.take().expect("stderr piped");
    // Lines arrive through a thread so the deadline holds even when the
    // server prints nothing (a blocking read would hang instead of failing).
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut ready = false;
    let mut seen = Vec::new();
    while !ready {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(remaining) {
            Ok(line) => {
                ready = line.contains("Server is ready");
                seen.push(line);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("not ready within 15 s: {seen:?}");
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(ready, "server did not start: {seen:?}");
}
