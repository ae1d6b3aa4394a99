//! Process lifecycle of the real binary: SIGTERM and SIGINT shut down cleanly
//! (stop accepting, flush what is queued to clients, close them, exit 0);
//! `--help` explains every flag.

use crate::common;

use std::time::{Duration, Instant};

use common::{text, Flavor, Options, Server, TIMEOUT};

async fn wait_for_exit(server: &mut Server, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while server.is_running() {
        assert!(
            Instant::now() < deadline,
            "server still running after {timeout:?}:\n{}",
            server.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn shuts_down_cleanly_on(signal: libc::c_int) {
    let mut server = Server::start(Flavor::Tern, Options::default());
    let mut subscriber = server.raw_quiet().await;
    subscriber.send(b"SUB shutdown.test 1\r\nPING\r\n").await;
    subscriber.read_until(b"PONG\r\n", TIMEOUT).await;
    let mut publisher = server.raw_quiet().await;
    // Everything published before the signal and acknowledged by PONG must
    // reach the subscriber before its connection closes.
    let mut batch = Vec::new();
    for index in 0..100 {
        batch.extend_from_slice(format!("PUB shutdown.test 3\r\n{index:03}\r\n").as_bytes());
    }
    batch.extend_from_slice(b"PING\r\n");
    publisher.send(&batch).await;
    publisher.read_until(b"PONG\r\n", TIMEOUT).await;
    // SAFETY: kill with a valid pid and signal.
    assert_eq!(
        unsafe { libc::kill(server.pid() as libc::pid_t, signal) },
        0
    );
    let received = subscriber.expect_closed(TIMEOUT).await;
    let received = text(&received);
    for index in 0..100 {
        assert!(
            received.contains(&format!("\r\n{index:03}\r\n")),
            "message {index} missing: {received}"
        );
    }
    wait_for_exit(&mut server, TIMEOUT).await;
    let log = server.log_tail();
    assert!(log.contains("Server Exiting"), "{log}");
    // A clean exit (the kernel closed its listeners with it; whether the
    // port is free now is not this test's to say: another test's server may
    // have taken it).
    let status = server.exit_status().expect("exited");
    assert!(status.success(), "{status:?}\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_flushes_and_exits() {
    shuts_down_cleanly_on(libc::SIGTERM).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_flushes_and_exits() {
    shuts_down_cleanly_on(libc::SIGINT).await;
}

#[test]
fn help_explains_every_flag() {
    let output = std::process::Command::new(crate::common::tern_server())
        .arg("--help")
        .output()
        .unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--addr",
        "--port",
        "--http_port",
        "--config",
        "--server_name",
        "--store_dir",
        "--cores",
        "--unpinned",
        "--max_payload",
        "--max_pending",
        "--max_connections",
        "--max_subscriptions",
        "--max_control_line",
        "--ping_interval",
        "--ping_max",
        "--write_deadline",
        "--io_memory",
    ] {
        assert!(
            help.contains(flag),
            "--help does not mention {flag}:\n{help}"
        );
    }
    for short in ["-a,", "-p,", "-m,", "-c,", "-n,"] {
        assert!(
            help.contains(short),
            "--help does not mention {short}:\n{help}"
        );
    }
}

#[test]
fn bad_flags_fail_with_a_message() {
    let output = std::process::Command::new(crate::common::tern_server())
        .args(["--cores", "0-99999"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cores"), "{stderr}");
}
