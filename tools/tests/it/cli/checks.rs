//! `tern server check …` on both servers: one status line, the exit status
//! Nagios reads (0 OK, 1 warning, 2 critical, 3 unknown), `--json` for
//! machines. (The stream and consumer checks crossing their thresholds are
//! in `flow.rs`.)

use serde_json::json;

use super::{on_both, tern, Flavor};

fn status_word(stdout: &str) -> String {
    assert_eq!(stdout.lines().count(), 1, "one status line: {stdout:?}");
    stdout.split(':').next().unwrap_or("").to_string()
}

#[test]
fn health_checks_and_their_exit_codes() {
    let (tern_seen, nats_seen) = on_both(|server| {
        let flavor = server.flavor;
        let mut seen = Vec::new();
        let monitor = server.monitor_url();
        for (args, code) in [
            (vec!["server", "check", "connection"], 0),
            (
                vec![
                    "server",
                    "check",
                    "connection",
                    "--rtt-warn",
                    "1ns",
                    "--rtt-crit",
                    "1h",
                ],
                1,
            ),
            (vec!["server", "check", "jetstream"], 0),
            (vec!["server", "check", "cluster", "--monitor", &monitor], 0),
            (
                vec![
                    "server",
                    "check",
                    "cluster",
                    "--monitor",
                    &monitor,
                    "--expect",
                    "3",
                ],
                2,
            ),
            (vec!["server", "check", "stream", "--name", "NOPE"], 2),
            (
                vec![
                    "server",
                    "check",
                    "stream",
                    "--name",
                    "X",
                    "--bytes-warn",
                    "lots",
                ],
                3,
            ),
        ] {
            let run = server.tern(&args);
            assert_eq!(run.code, Some(code), "{flavor:?} {args:?}: {run:?}");
            seen.push(json!([args[2], status_word(&run.stdout)]));
        }
        let cluster = server.tern(&["server", "check", "cluster", "--monitor", &monitor]);
        assert!(
            cluster.stdout.starts_with("OK: single server (no cluster)"),
            "{flavor:?}: {cluster:?}"
        );
        // tern counts failed authentications in /varz (none here);
        // nats-server does not.
        let auth = server.tern(&["server", "check", "auth", "--monitor", &monitor, "--json"]);
        let verdict: serde_json::Value = serde_json::from_str(&auth.stdout).expect("JSON");
        let expected = match flavor {
            Flavor::Tern => (Some(0), "OK"),
            Flavor::Nats => (Some(3), "UNKNOWN"),
        };
        assert_eq!(
            (auth.code, verdict["status"].as_str().unwrap_or("")),
            expected,
            "{flavor:?}: {auth:?}"
        );
        let js = server.tern(&["server", "check", "jetstream", "--json"]);
        let verdict: serde_json::Value = serde_json::from_str(&js.stdout).expect("JSON");
        assert_eq!(
            (
                verdict["check"].clone(),
                verdict["status"].clone(),
                verdict["exit_code"].clone()
            ),
            (json!("jetstream"), json!("OK"), json!(0))
        );
        seen
    });
    assert_eq!(tern_seen, nats_seen);
    let unreachable = tern(&["-s", "nats://127.0.0.1:1", "server", "check", "connection"]);
    assert_eq!(unreachable.code, Some(2), "{unreachable:?}");
    assert!(
        unreachable
            .stdout
            .starts_with("CRITICAL: cannot connect to nats://127.0.0.1:1"),
        "{unreachable:?}"
    );
}
