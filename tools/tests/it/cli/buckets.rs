//! `tern kv …` and `tern object …` on both servers: buckets created,
//! values and objects stored, read back, listed, watched and removed.

use serde_json::json;

use super::on_both;

#[test]
fn key_value_and_object_buckets() {
    let (tern, nats) = on_both(|server| {
        let flavor = server.flavor;
        let mut seen = Vec::new();
        let created = server.tern(&["kv", "add", "cfg", "--history", "5", "--ttl", "1h"]);
        assert!(
            created
                .ok()
                .starts_with("Bucket cfg created: history 5, ttl 1h"),
            "{flavor:?}: {created:?}"
        );
        seen.push(json!(server
            .tern(&["kv", "put", "cfg", "db.url", "pg://a"])
            .ok()));
        server.tern(&["kv", "put", "cfg", "db.url", "pg://b"]).ok();
        server.tern(&["kv", "put", "cfg", "mode", "fast"]).ok();
        seen.push(json!(server
            .tern(&["kv", "get", "cfg", "db.url", "--raw"])
            .ok()));
        let text = server.tern(&["kv", "get", "cfg", "db.url"]);
        assert!(
            text.ok().starts_with("cfg > db.url revision: 2 created @ "),
            "{flavor:?}: {text:?}"
        );
        seen.push(json!(server.tern(&["kv", "ls"]).ok()));
        seen.push(json!(server.tern(&["kv", "ls", "cfg"]).ok()));
        let watched = server.tern(&["kv", "watch", "cfg", "--count", "2"]);
        let lines: Vec<String> = watched
            .ok()
            .lines()
            .map(|line| {
                line.split_once("] ")
                    .map(|(_, rest)| rest.to_string())
                    .unwrap_or_default()
            })
            .collect();
        seen.push(json!(lines));
        server.tern(&["kv", "del", "cfg", "mode"]).ok();
        seen.push(json!(server
            .tern(&["kv", "get", "cfg", "mode"])
            .one_line_error(1)));
        assert!(server
            .tern(&["kv", "del", "cfg"])
            .one_line_error(1)
            .contains("--force"));
        server.tern(&["kv", "del", "cfg", "-f"]).ok();
        seen.push(json!(server.tern(&["kv", "ls"]).ok()));

        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("report.bin");
        let content: Vec<u8> = (0..300_000u32).map(|index| (index % 251) as u8).collect();
        std::fs::write(&file, &content).expect("write the file");
        server.tern(&["object", "add", "files"]).ok();
        let put = server.tern(&["object", "put", "files", file.to_str().unwrap()]);
        assert!(
            put.ok()
                .starts_with("Stored report.bin in files: 293.0 KiB in 3 chunks, SHA-256="),
            "{flavor:?}: {put:?}"
        );
        seen.push(json!(put.stdout));
        let back = dir.path().join("back.bin");
        server
            .tern(&[
                "object",
                "get",
                "files",
                "report.bin",
                "-O",
                back.to_str().unwrap(),
            ])
            .ok();
        assert!(
            std::fs::read(&back).expect("read back") == content,
            "{flavor:?}"
        );
        let listed = server.tern(&["object", "ls", "files"]);
        assert!(
            listed.ok().contains("report.bin  293.0 KiB"),
            "{flavor:?}: {listed:?}"
        );
        seen.push(json!(server.tern(&["object", "ls"]).ok()));
        assert!(server
            .tern(&["object", "rm", "files", "report.bin"])
            .one_line_error(1)
            .contains("--force"));
        server
            .tern(&["object", "rm", "files", "report.bin", "-f"])
            .ok();
        seen.push(json!(server.tern(&["object", "ls", "files"]).ok()));
        seen.push(json!(server
            .tern(&["object", "get", "files", "report.bin", "-O", "-"])
            .one_line_error(1)));
        seen
    });
    assert_eq!(tern, nats);
}
