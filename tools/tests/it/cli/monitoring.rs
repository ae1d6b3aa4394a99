//! `tern server info|ls|report jetstream`, `tern top` and `tern
//! completions` on both servers: the same tables and JSON keys from each
//! server's monitoring endpoints.

use super::{key_paths, on_both, tern};

#[test]
fn server_info_ls_report_and_top() {
    let (tern_seen, nats_seen) = on_both(|server| {
        let flavor = server.flavor;
        let monitor = server.monitor_url();
        server
            .tern(&[
                "stream",
                "add",
                "ORDERS",
                "--subjects",
                "orders.>",
                "--defaults",
            ])
            .ok();
        server
            .tern(&["pub", "orders.1", "x", "--count", "3", "-q"])
            .ok();

        let info = server
            .tern(&["server", "info", "--monitor", &monitor, "--json"])
            .json();
        assert_eq!(info["streams"], 1, "{flavor:?}: {info}");
        assert!(info["in_msgs"].as_u64().unwrap() >= 3, "{flavor:?}: {info}");
        assert_eq!(info["version"], "2.15.1", "{flavor:?}: {info}");
        let text = server.tern(&["server", "info", "--monitor", &monitor]);
        assert!(
            text.ok().contains("Subscriptions: "),
            "{flavor:?}: {text:?}"
        );

        let both = format!("{monitor},{monitor}");
        let ls = server.tern(&["server", "ls", "--monitor", &both]);
        let lines: Vec<&str> = ls.ok().lines().collect();
        assert_eq!(lines.len(), 3, "header and two rows: {ls:?}");
        assert!(lines[0].starts_with("Name"), "{ls:?}");
        let nodes = server
            .tern(&["server", "ls", "--monitor", &monitor, "-j"])
            .json();
        assert_eq!(nodes.as_array().map(Vec::len), Some(1), "{nodes}");

        let report = server
            .tern(&[
                "server",
                "report",
                "jetstream",
                "--monitor",
                &monitor,
                "--json",
            ])
            .json();
        assert_eq!(report[0]["name"], "ORDERS", "{flavor:?}: {report}");
        assert_eq!(report[0]["messages"], 3, "{flavor:?}: {report}");
        assert_eq!(report[0]["replicas"], 1, "{flavor:?}: {report}");
        let table = server.tern(&["server", "report", "jetstream", "--monitor", &monitor]);
        assert!(
            table
                .ok()
                .lines()
                .nth(1)
                .unwrap_or("")
                .starts_with("ORDERS"),
            "{table:?}"
        );

        // A client connected while `top` runs is one row of each frame.
        let runtime = super::runtime();
        let client = runtime.block_on(server.client());
        let top = server.tern(&[
            "top",
            "--monitor",
            &monitor,
            "--count",
            "2",
            "--interval",
            "50ms",
        ]);
        drop(client);
        let frames: Vec<&str> = top.ok().split("\n\nServer: ").collect();
        assert_eq!(frames.len(), 2, "two frames, a blank line between: {top:?}");
        assert!(
            !top.stdout.contains('\x1b'),
            "plain frames in a pipe: {top:?}"
        );
        for frame in &frames {
            assert!(frame.contains("JetStream: streams 1"), "{top:?}");
            let header = frame
                .lines()
                .position(|line| line.starts_with("CID"))
                .expect("a table");
            let rows = frame
                .lines()
                .skip(header + 1)
                .filter(|line| line.contains("127.0.0.1:"));
            assert!(rows.count() >= 1, "{flavor:?}: the client's row: {top:?}");
        }

        let unreachable = tern(&["server", "info", "--monitor", "http://127.0.0.1:1"]);
        unreachable.one_line_error(1);
        (key_paths(&info), key_paths(&report))
    });
    assert_eq!(tern_seen, nats_seen);
}

#[test]
fn completions() {
    let bash = tern(&["completions", "bash"]);
    assert!(bash.ok().contains("stream"), "{bash:?}");
    let fish = tern(&["completions", "fish"]);
    assert!(fish.ok().contains("consumer"), "{fish:?}");
    tern(&["completions", "tcsh"]).one_line_error(2);
}
