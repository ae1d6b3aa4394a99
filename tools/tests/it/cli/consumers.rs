//! `tern consumer add|info|ls|next|rm` on both servers: the config flags
//! reach the server, `next --no-ack` leaves messages pending, `--deliver`
//! and `--filter` pick where delivery starts, and the answers have the
//! same shape.

use serde_json::json;

use super::{key_paths, on_both};

#[test]
fn consumer_commands_match_between_servers() {
    let (tern, nats) = on_both(|server| {
        let flavor = server.flavor;
        let mut seen = Vec::new();
        server
            .tern(&[
                "stream",
                "add",
                "JOBS",
                "--subjects",
                "jobs.>",
                "--defaults",
            ])
            .ok();
        for (subject, body) in [("jobs.a", "a1"), ("jobs.b", "b1"), ("jobs.a", "a2")] {
            server.tern(&["pub", subject, body, "-q"]).ok();
        }
        let created = server
            .tern(&[
                "consumer",
                "add",
                "JOBS",
                "W",
                "--pull",
                "--ack",
                "explicit",
                "--filter",
                "jobs.a",
                "--max-deliver",
                "5",
                "--wait",
                "10s",
                "--deliver",
                "all",
                "--defaults",
                "--json",
            ])
            .json();
        let config = &created["config"];
        assert_eq!(config["durable_name"], "W", "{flavor:?}");
        assert_eq!(config["filter_subject"], "jobs.a");
        assert_eq!(config["max_deliver"], 5);
        assert_eq!(config["ack_wait"], 10_000_000_000u64);
        assert_eq!(created["num_pending"], 2);

        let next = server.tern(&["consumer", "next", "JOBS", "W", "--no-ack"]);
        seen.push(json!(next.ok()));
        let info = server
            .tern(&["consumer", "info", "JOBS", "W", "--json"])
            .json();
        assert_eq!(info["num_ack_pending"], 1, "{flavor:?}: --no-ack left it");
        seen.push(json!(key_paths(&info)));
        let text = server.tern(&["consumer", "info", "JOBS", "W"]);
        assert!(text.ok().contains("Outstanding Acks: 1"), "{text:?}");

        let last = server
            .tern(&[
                "consumer",
                "add",
                "JOBS",
                "L",
                "--deliver",
                "last",
                "--defaults",
            ])
            .ok()
            .to_string();
        assert!(last.starts_with("Consumer JOBS > L was created"), "{last}");
        seen.push(json!(server
            .tern(&["consumer", "next", "JOBS", "L", "--count", "1"])
            .ok()));
        server
            .tern(&[
                "consumer",
                "add",
                "JOBS",
                "Q",
                "--deliver",
                "2",
                "--ack",
                "none",
            ])
            .ok();
        seen.push(json!(server
            .tern(&["consumer", "next", "JOBS", "Q", "--count", "2"])
            .ok()));

        seen.push(server.tern(&["consumer", "ls", "JOBS", "--json"]).json());
        let table = server.tern(&["consumer", "ls", "JOBS"]);
        assert!(table.ok().starts_with("Name"), "{table:?}");

        // Fewer messages than asked for: the bodies that came, then an error.
        let short = server.tern(&[
            "--timeout",
            "300ms",
            "consumer",
            "next",
            "JOBS",
            "Q",
            "--count",
            "5",
        ]);
        assert_eq!(short.stdout, "", "{flavor:?}: {short:?}");
        seen.push(json!(short.one_line_error(1)));
        seen.push(json!(server
            .tern(&["consumer", "next", "JOBS", "NOPE"])
            .one_line_error(1)));

        assert!(server
            .tern(&["consumer", "rm", "JOBS", "L"])
            .one_line_error(1)
            .contains("--force"));
        server.tern(&["consumer", "rm", "JOBS", "L", "-f"]).ok();
        seen.push(json!(server.tern(&["consumer", "ls", "JOBS", "-n"]).ok()));
        seen.push(json!(server
            .tern(&["consumer", "info", "JOBS", "L"])
            .one_line_error(1)));
        seen
    });
    assert_eq!(tern, nats);
}
