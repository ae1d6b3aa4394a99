//! `tern stream ls|info|edit|get|rmm|purge|rm` on both servers: the same
//! lines and JSON shapes, the same effects, and the destructive ones
//! refused without `--force`.

use serde_json::json;

use super::{key_paths, on_both};

#[test]
fn stream_commands_match_between_servers() {
    let (tern, nats) = on_both(|server| {
        let flavor = server.flavor;
        let mut seen = Vec::new();
        server
            .tern(&["stream", "add", "S1", "--subjects", "s1.*", "--defaults"])
            .ok();
        server
            .tern(&[
                "stream",
                "add",
                "S2",
                "--subjects",
                "s2.a, s2.b",
                "--storage",
                "memory",
                "--retention",
                "limits",
                "--discard",
                "new",
                "--max-msgs",
                "100",
                "--dupe-window",
                "1m",
                "--max-msg-size",
                "1KB",
                "--allow-rollup",
                "--deny-delete",
            ])
            .ok();
        seen.push(server.tern(&["stream", "ls", "--json"]).json());
        seen.push(json!(server.tern(&["stream", "ls", "--names"]).ok()));
        seen.push(json!(server
            .tern(&["stream", "ls", "--subject", "s2.a", "-n"])
            .ok()));
        let ls = server.tern(&["stream", "ls"]);
        assert!(ls.ok().starts_with("Name"), "{ls:?}");
        let s2 = server.tern(&["stream", "info", "S2", "--json"]).json();
        assert_eq!(s2["config"]["subjects"], json!(["s2.a", "s2.b"]));
        for (key, value) in [
            ("storage", json!("memory")),
            ("discard", json!("new")),
            ("max_msgs", json!(100)),
            ("duplicate_window", json!(60_000_000_000u64)),
            ("max_msg_size", json!(1024)),
            ("allow_rollup_hdrs", json!(true)),
            ("deny_delete", json!(true)),
            ("allow_direct", json!(true)),
        ] {
            assert_eq!(s2["config"][key], value, "{flavor:?} {key}");
        }
        let text = server.tern(&["stream", "info", "S2"]);
        assert!(
            text.ok().contains("Maximum Messages: 100"),
            "{flavor:?}: {text:?}"
        );

        for body in ["one", "two", "three", "four"] {
            server.tern(&["pub", "s1.x", body, "-q"]).ok();
        }
        server
            .tern(&["pub", "s1.y", "five", "-H", "Nats-Msg-Id:m5", "-q"])
            .ok();
        let got = server.tern(&["stream", "get", "S1", "2", "--json"]).json();
        assert_eq!(got["data"], "dHdv", "{flavor:?}: base64 of two");
        seen.push(json!(key_paths(&got)));
        let last = server
            .tern(&["stream", "get", "S1", "--last-for", "s1.y", "--json"])
            .json();
        assert_eq!(last["seq"], 5);
        assert!(last["hdrs"].is_string(), "{flavor:?}: headers kept");
        let text = server.tern(&["stream", "get", "S1", "5"]);
        let lines: Vec<&str> = text.ok().lines().collect();
        assert!(lines[0].starts_with("Item: S1#5 received "), "{text:?}");
        assert!(lines.contains(&"  Nats-Msg-Id: m5"), "{text:?}");
        assert_eq!(lines.last(), Some(&"five"));

        let refused = server.tern(&["stream", "rmm", "S1", "1"]);
        assert!(refused.one_line_error(1).contains("--force"));
        server.tern(&["stream", "rmm", "S1", "1", "-f"]).ok();
        let gone = server.tern(&["stream", "get", "S1", "1"]);
        seen.push(json!(gone.one_line_error(1)));

        let edited = server
            .tern(&["stream", "edit", "S1", "--max-msgs", "3", "--json"])
            .json();
        assert_eq!(edited["config"]["max_msgs"], 3);
        assert_eq!(edited["config"]["subjects"], json!(["s1.*"]), "others kept");
        let state = server.tern(&["stream", "info", "S1", "--json"]).json()["state"].clone();
        assert_eq!(
            (state["messages"].clone(), state["first_seq"].clone()),
            (json!(3), json!(3))
        );
        let refused = server.tern(&["stream", "edit", "S1", "--storage", "memory"]);
        seen.push(json!(refused.one_line_error(1)));

        assert!(server
            .tern(&["stream", "purge", "S1"])
            .one_line_error(1)
            .contains("refusing without --force"));
        let purged = server
            .tern(&["stream", "purge", "S1", "-f", "--keep", "1", "--json"])
            .json();
        assert_eq!(purged, json!({"success": true, "purged": 2}));
        seen.push(json!(server.tern(&["stream", "purge", "S1", "-f"]).ok()));

        assert!(server
            .tern(&["stream", "rm", "S2"])
            .one_line_error(1)
            .contains("--force"));
        server.tern(&["stream", "rm", "S2", "-f"]).ok();
        seen.push(server.tern(&["stream", "ls", "-j"]).json());
        seen.push(json!(server
            .tern(&["stream", "info", "S2"])
            .one_line_error(1)));
        seen
    });
    assert_eq!(tern, nats);
}
