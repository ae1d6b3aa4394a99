//! `tern stream export|verify` on both servers: a signed, hash-chained
//! export of 200 messages verifies; 50 more (one of them deleted) append
//! incrementally; a tampered record, a tampered manifest and a wrong key
//! each fail verification, naming what does not match; the same export
//! into an object-store bucket (`obj://`) verifies and continues.

use std::path::Path;

use base64::Engine;
use serde_json::Value;

use super::{on_both, runtime, Server};

/// Publishes `subject.N` messages with body `message N` for N in `range`,
/// every tenth with a header, each waiting for its PubAck.
fn publish(server: &Server, range: std::ops::RangeInclusive<u32>) {
    runtime().block_on(async {
        let client = server.client().await;
        let context = async_nats::jetstream::new(client);
        for index in range {
            let subject = format!("audit.{}", index % 3);
            let body = bytes::Bytes::from(format!("message {index}"));
            let acknowledgement = if index % 10 == 0 {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Msg-Id", format!("id-{index}").as_str());
                headers.insert("Team", "audit");
                context
                    .publish_with_headers(subject, headers, body)
                    .await
                    .expect("publish")
            } else {
                context.publish(subject, body).await.expect("publish")
            };
            acknowledgement.await.expect("PubAck");
        }
    });
}

fn key_pair_files(dir: &Path) -> (String, String) {
    let pair = nkeys::KeyPair::new_user();
    let seed_file = dir.join("signer.seed");
    std::fs::write(&seed_file, format!("{}\n", pair.seed().unwrap())).unwrap();
    (seed_file.display().to_string(), pair.public_key())
}

/// Replaces line `line_number` (1-based) of `records` through `edit`.
fn edit_line(records: &[u8], line_number: usize, edit: impl Fn(&mut Value)) -> Vec<u8> {
    let text = String::from_utf8(records.to_vec()).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut record: Value = serde_json::from_str(&lines[line_number - 1]).unwrap();
    edit(&mut record);
    lines[line_number - 1] = serde_json::to_string(&record).unwrap();
    format!("{}\n", lines.join("\n")).into_bytes()
}

fn tamper_data(record: &mut Value) {
    record["data_base64"] =
        Value::from(base64::engine::general_purpose::STANDARD.encode("message 9999"));
}

#[test]
fn export_is_signed_chained_incremental_and_tamper_evident() {
    on_both(|server| {
        let flavor = server.flavor;
        let dir = tempfile::tempdir().unwrap();
        let (seed_file, public_key) = key_pair_files(dir.path());
        let export = dir.path().join("export");
        let export = export.to_str().unwrap();
        server
            .tern(&["stream", "add", "AUDIT", "--subjects", "audit.*"])
            .ok();
        publish(server, 1..=200);

        let first = server.tern(&[
            "stream", "export", "AUDIT", "--to", export, "--key", &seed_file,
        ]);
        assert!(
            first
                .ok()
                .starts_with("Exported 200 new records of AUDIT to "),
            "{flavor:?}: {first:?}"
        );
        assert!(
            first.ok().contains("sequences 1..200, 200 records"),
            "{first:?}"
        );
        let verified = server.tern(&["stream", "verify", export, "--key", &public_key]);
        assert!(
            verified
                .ok()
                .contains("holds stream AUDIT sequences 1..200, 200 records"),
            "{flavor:?}: {verified:?}"
        );
        assert_eq!(verified.ok().lines().count(), 1);
        let records_path = Path::new(export).join("records.jsonl");
        let records_first = std::fs::read(&records_path).unwrap();
        let record: Value =
            serde_json::from_slice(records_first.split(|&b| b == b'\n').nth(9).unwrap()).unwrap();
        assert_eq!(record["sequence"], 10);
        assert_eq!(record["subject"], "audit.1");
        assert_eq!(
            record["headers"],
            serde_json::json!([["Nats-Msg-Id", "id-10"], ["Team", "audit"]])
        );

        // Incremental: 50 more, one deleted (a gap, skipped).
        let manifest_path = Path::new(export).join("manifest.json");
        let manifest_first = std::fs::read(&manifest_path).unwrap();
        publish(server, 201..=250);
        server.tern(&["stream", "rmm", "AUDIT", "220", "-f"]).ok();
        let second = server.tern(&[
            "stream", "export", "AUDIT", "--to", export, "--key", &seed_file,
        ]);
        assert!(
            second
                .ok()
                .starts_with("Exported 49 new records of AUDIT to "),
            "{flavor:?}: {second:?}"
        );
        let records_second = std::fs::read(&records_path).unwrap();
        assert_eq!(
            &records_second[..records_first.len()],
            &records_first[..],
            "append-only"
        );
        let verified = server.tern(&["stream", "verify", export, "--key", &public_key]);
        assert!(
            verified.ok().contains("sequences 1..250, 249 records"),
            "{flavor:?}: {verified:?}"
        );
        // A run stopped after replacing the signature, before the
        // manifest: verify fails; the next export completes the switch.
        let manifest_second = std::fs::read(&manifest_path).unwrap();
        std::fs::write(
            Path::new(export).join("manifest.pending.json"),
            &manifest_second,
        )
        .unwrap();
        std::fs::write(&manifest_path, &manifest_first).unwrap();
        let failed = server.tern(&["stream", "verify", export, "--key", &public_key]);
        assert!(
            failed.one_line_error(1).contains("bad signature"),
            "{failed:?}"
        );
        let resumed = server.tern(&[
            "stream", "export", "AUDIT", "--to", export, "--key", &seed_file,
        ]);
        assert!(
            resumed.ok().contains("Exported 0 new records of AUDIT")
                && resumed.ok().contains("sequences 1..250, 249 records"),
            "{flavor:?}: {resumed:?}"
        );
        assert!(!Path::new(export).join("manifest.pending.json").exists());
        // Bytes past the signed end (a run stopped before signing) fail
        // verify and are removed by the next export.
        let mut torn = std::fs::read(&records_path).unwrap();
        torn.extend_from_slice(b"{\"sequence\":251");
        std::fs::write(&records_path, &torn).unwrap();
        let failed = server.tern(&["stream", "verify", export, "--key", &public_key]);
        assert!(
            failed
                .one_line_error(1)
                .contains("records.jsonl does not match the manifest: it has"),
            "{failed:?}"
        );
        // Nothing new: nothing appended, still verifies.
        let third = server.tern(&[
            "stream", "export", "AUDIT", "--to", export, "--key", &seed_file,
        ]);
        assert!(
            third.ok().starts_with("Exported 0 new records"),
            "{third:?}"
        );
        assert_eq!(std::fs::read(&records_path).unwrap(), records_second);

        // A tampered record is named.
        std::fs::write(&records_path, edit_line(&records_second, 37, tamper_data)).unwrap();
        let failed = server.tern(&["stream", "verify", export, "--key", &public_key]);
        let error = failed.one_line_error(1);
        assert!(
            error.contains("record 37 (sequence 37, line 37, byte offset "),
            "{flavor:?}: {error}"
        );
        // An incremental export refuses to continue a broken chain.
        let refused = server.tern(&[
            "stream", "export", "AUDIT", "--to", export, "--key", &seed_file,
        ]);
        assert!(
            refused.one_line_error(1).contains("record 37"),
            "{refused:?}"
        );
        std::fs::write(&records_path, &records_second).unwrap();

        // A tampered manifest breaks the signature.
        let manifest = std::fs::read_to_string(&manifest_path).unwrap();
        std::fs::write(
            &manifest_path,
            manifest.replace("\"record_count\": 249", "\"record_count\": 248"),
        )
        .unwrap();
        let failed = server.tern(&["stream", "verify", export, "--key", &public_key]);
        assert!(
            failed.one_line_error(1).contains("bad signature"),
            "{failed:?}"
        );
        std::fs::write(&manifest_path, &manifest).unwrap();

        // Another key does not verify.
        let other = nkeys::KeyPair::new_user().public_key();
        let failed = server.tern(&["stream", "verify", export, "--key", &other]);
        let error = failed.one_line_error(1);
        assert!(
            error.contains("bad signature") && error.contains(&public_key),
            "{error}"
        );
        server
            .tern(&["stream", "verify", export, "--key", &public_key])
            .ok();

        // Bad input: one line, exit 1.
        let missing = dir.path().join("nowhere");
        let failed = server.tern(&[
            "stream",
            "verify",
            missing.to_str().unwrap(),
            "--key",
            &public_key,
        ]);
        assert!(
            failed
                .one_line_error(1)
                .contains("manifest.json is missing"),
            "{failed:?}"
        );
        let failed = server.tern(&["stream", "verify", export, "--key", "UNOTAKEY"]);
        assert!(
            failed.one_line_error(1).contains("public key UNOTAKEY"),
            "{failed:?}"
        );
        let failed = server.tern(&[
            "stream",
            "export",
            "AUDIT",
            "--to",
            export,
            "--key",
            "/nonexistent.seed",
        ]);
        assert!(
            failed
                .one_line_error(1)
                .contains("cannot read the seed file"),
            "{failed:?}"
        );

        // The same into an object-store bucket.
        let bucket = server.tern(&[
            "stream",
            "export",
            "AUDIT",
            "--to",
            "obj://EXPORTS",
            "--key",
            &seed_file,
        ]);
        assert!(
            bucket
                .ok()
                .contains("to obj://EXPORTS: sequences 1..250, 249 records"),
            "{flavor:?}: {bucket:?}"
        );
        publish(server, 251..=251);
        let bucket = server.tern(&[
            "stream",
            "export",
            "AUDIT",
            "--to",
            "obj://EXPORTS",
            "--key",
            &seed_file,
        ]);
        assert!(
            bucket.ok().starts_with("Exported 1 new records"),
            "{bucket:?}"
        );
        let verified = server.tern(&["stream", "verify", "obj://EXPORTS", "--key", &public_key]);
        assert!(
            verified.ok().contains("sequences 1..251, 250 records"),
            "{flavor:?}: {verified:?}"
        );
        runtime().block_on(async {
            let context = async_nats::jetstream::new(server.client().await);
            let store = context.get_object_store("EXPORTS").await.unwrap();
            let mut records = Vec::new();
            let mut object = store.get("records.jsonl").await.unwrap();
            tokio::io::AsyncReadExt::read_to_end(&mut object, &mut records)
                .await
                .unwrap();
            let tampered = edit_line(&records, 120, tamper_data);
            store
                .put("records.jsonl", &mut tampered.as_slice())
                .await
                .unwrap();
        });
        let failed = server.tern(&["stream", "verify", "obj://EXPORTS", "--key", &public_key]);
        assert!(
            failed
                .one_line_error(1)
                .contains("record 120 (sequence 120, line 120"),
            "{failed:?}"
        );
    });
}
