//! Running a workload against one server, or against two side by side.
//!
//! A side is either a URL (a server someone else runs; its figures come from
//! `--monitor` or `--pid` if given) or a server this harness starts itself:
//! `tern-server` with `--sync always`, or the reference nats-server with
//! `jetstream { sync_interval: always }` when the workload is durable, so
//! that both sides promise the same thing when they ack. Sides run one after
//! the other, never at once, and a started server is killed as soon as its
//! side is done (also on error).

use std::path::PathBuf;
use std::sync::Arc;

use crate::load::Counters;
use crate::measure::{self, MeasureError, Target};
use crate::progress::Progress;
use crate::report::{RunReport, RunStatus};
use crate::server::{Flavor, ServerProcess, ServerSpec};
use crate::system::ServerSource;
use crate::workload::Workload;

#[derive(Debug, Clone)]
pub enum Side {
    Url {
        url: String,
        /// `host:port` serving `/varz`.
        monitor: Option<String>,
        pid: Option<u32>,
    },
    Start {
        flavor: Flavor,
        program: PathBuf,
    },
}

#[derive(Debug, Clone)]
pub struct SideSpec {
    pub label: String,
    pub side: Side,
}

/// Settings shared by both sides.
#[derive(Debug, Clone, Default)]
pub struct RunSettings {
    pub quiet: bool,
    /// CPUs for servers this harness starts.
    pub server_cpus: Option<Vec<usize>>,
    /// Extra arguments for a started tern-server.
    pub tern_args: Vec<String>,
    /// Extra arguments for a started nats-server.
    pub nats_args: Vec<String>,
    /// CA the clients trust for servers that require TLS.
    pub tls_ca: Option<std::path::PathBuf>,
    pub credentials: crate::measure::Credentials,
}

/// Runs `workload` against one side; never panics on a server's behaviour:
/// what went wrong is in the report.
pub async fn run_side(workload: &Workload, spec: &SideSpec, settings: &RunSettings) -> RunReport {
    let started;
    let (url, source) = match &spec.side {
        Side::Url { url, monitor, pid } => {
            let source = match (pid, monitor) {
                (Some(pid), _) => ServerSource::Pid(*pid),
                (None, Some(monitor)) => ServerSource::Monitor(monitor.clone()),
                (None, None) => ServerSource::None,
            };
            (url.clone(), source)
        }
        Side::Start { flavor, program } => {
            let server_spec = ServerSpec {
                flavor: *flavor,
                program: program.clone(),
                jetstream: workload.kind.is_jetstream(),
                sync_always: workload.is_durable(),
                cpus: settings.server_cpus.clone(),
                extra_args: match flavor {
                    Flavor::Tern => settings.tern_args.clone(),
                    Flavor::Nats => settings.nats_args.clone(),
                },
            };
            let spawn = tokio::task::spawn_blocking(move || ServerProcess::start(&server_spec));
            let server = match spawn.await {
                Ok(Ok(server)) => server,
                Ok(Err(error)) => return failed(workload, spec, "", error.to_string()),
                Err(error) => return failed(workload, spec, "", error.to_string()),
            };
            let url = server.url();
            let source = ServerSource::Pid(server.pid());
            started = server;
            if !settings.quiet {
                eprintln!(
                    "{}: started {} (pid {}) on {url}",
                    spec.label,
                    spec_program(&spec.side),
                    started.pid()
                );
            }
            (url, source)
        }
    };
    let counters = Arc::new(Counters::default());
    let target = Target {
        url: url.clone(),
        server: source,
        counters: counters.clone(),
        tls_ca: settings.tls_ca.clone(),
        credentials: settings.credentials.clone(),
    };
    let progress = Progress::start(
        &spec.label,
        counters,
        workload.warmup_secs + workload.duration_secs,
        settings.quiet,
    );
    let result = measure::measure(workload, &target).await;
    drop(progress);
    match result {
        Ok(measurement) => RunReport::from_measurement(&spec.label, &url, workload, measurement),
        Err(MeasureError::Skipped(reason)) => {
            RunReport::without_numbers(&spec.label, &url, workload, RunStatus::Skipped, reason)
        }
        Err(error) => failed(workload, spec, &url, error.to_string()),
    }
    // A started server is dropped (killed) here, after its measurement.
}

fn spec_program(side: &Side) -> String {
    match side {
        Side::Url { url, .. } => url.clone(),
        Side::Start { program, .. } => program.display().to_string(),
    }
}

fn failed(workload: &Workload, spec: &SideSpec, url: &str, message: String) -> RunReport {
    RunReport::without_numbers(&spec.label, url, workload, RunStatus::Failed, message)
}

/// Labels for two sides, made distinct when they would collide.
pub fn distinct_labels(first: &mut SideSpec, second: &mut SideSpec) {
    if first.label == second.label {
        first.label.push_str(" (a)");
        second.label.push_str(" (b)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colliding_labels_are_told_apart() {
        let side = Side::Url {
            url: "nats://127.0.0.1:1".into(),
            monitor: None,
            pid: None,
        };
        let mut first = SideSpec {
            label: "tern".into(),
            side: side.clone(),
        };
        let mut second = SideSpec {
            label: "tern".into(),
            side,
        };
        distinct_labels(&mut first, &mut second);
        assert_eq!(
            (first.label.as_str(), second.label.as_str()),
            ("tern (a)", "tern (b)")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unreachable_server_fails_cleanly_within_the_timeout() {
        let workload = Workload::parse(
            "name = \"t\"\nkind = \"core_pub_sub\"\ntimeout_millis = 500\nduration_secs = 1\n",
            "t",
        )
        .unwrap();
        let spec = SideSpec {
            label: "nothing".into(),
            side: Side::Url {
                url: "nats://127.0.0.1:1".into(),
                monitor: None,
                pid: None,
            },
        };
        let started = std::time::Instant::now();
        let settings = RunSettings {
            quiet: true,
            ..RunSettings::default()
        };
        let report = run_side(&workload, &spec, &settings).await;
        assert_eq!(report.status, RunStatus::Failed);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
