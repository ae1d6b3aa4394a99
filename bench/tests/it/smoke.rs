//! The bundled smoke workload (shortened to 0.5 s + 1.5 s) against tern-server and nats-server 2.15.1
//! side by side through `tern bench compare`'s code path, producing every
//! output file.

use std::path::Path;

use tern_bench::command::{self, BenchCommand, CommonArgs, CompareArgs};
use tern_bench::report::RunStatus;

#[test]
fn smoke_compare_writes_every_output_file() {
    let out = tempfile::tempdir().expect("temp dir");
    let workload = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/smoke.toml");
    let args = CompareArgs {
        a: None,
        a_tern: Some(String::new()),
        a_nats: None,
        a_monitor: None,
        a_label: None,
        b: None,
        b_tern: None,
        b_nats: Some(String::new()),
        b_monitor: None,
        b_label: None,
        server_cpus: None,
        // Tests run in parallel on shared CPUs.
        tern_args: vec!["--unpinned".to_string()],
        nats_args: Vec::new(),
        common: CommonArgs {
            workload,
            out: out.path().to_path_buf(),
            quiet: true,
            duration_secs: Some(1.5),
            warmup_secs: Some(0.5),
            worker_threads: Some(2),
            client_cpus: None,
            tls_ca: None,
            credentials: Default::default(),
        },
    };
    let outcome = command::execute(BenchCommand::Compare(args)).unwrap_or_else(|e| panic!("{e}"));
    let statuses: Vec<_> = outcome
        .report
        .runs
        .iter()
        .map(|run| (run.label.clone(), run.status, run.message.clone()))
        .collect();
    assert!(outcome.all_ok, "{statuses:?}");
    let markdown = outcome.report.markdown();
    eprintln!("{markdown}");
    for run in &outcome.report.runs {
        assert_eq!(run.status, RunStatus::Ok);
        assert_eq!(run.sent, 2_000, "{}: 1 000 msgs/s for 2 s", run.label);
        assert_eq!(run.lost, 0);
        assert!(
            run.latency.count >= 1_450,
            "{}: {:?}",
            run.label,
            run.latency
        );
        assert!(run.usage.server_rss_bytes.is_some());
    }
    assert!(outcome.report.ratios.is_some());
    let dir = out.path();
    let markdown = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(markdown.contains("| tern |") && markdown.contains("| nats-server |"));
    assert!(markdown.contains("| **tern / nats-server** |"));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["workload"]["name"], "smoke");
    assert_eq!(json["runs"].as_array().unwrap().len(), 2);
    assert!(json["runs"][0]["latency"]["p99_micros"].as_f64().unwrap() > 0.0);
    let svg = std::fs::read_to_string(dir.join("latency.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.matches("<polyline").count() == 2);
    let png = std::fs::read(dir.join("latency.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    for log in ["tern.hlog", "nats-server.hlog"] {
        let text = std::fs::read_to_string(dir.join(log)).unwrap();
        assert!(text.contains("Tag="), "{log}: {text}");
    }
}
