//! Reports: one run (or two, side by side, with their ratios) written as
//! `report.md` (a markdown table, also printed), `results.json`, one HDR
//! interval log per server (`<label>.hlog`, HdrHistogram's V2 compressed
//! format: readable by HdrHistogram's own plotter and `HistogramLogReader`),
//! and the latency distribution plot as `latency.svg` and `latency.png`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use serde::Serialize;

use crate::histogram::{LatencyHistogram, Percentiles};
use crate::measure::Measurement;
use crate::plot::{self, Chart, Series};
use crate::system::SystemUsage;
use crate::workload::Workload;

/// Points per decade of the percentile spectrum in the plot.
const PLOT_STEPS_PER_DECADE: u32 = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Ok,
    Skipped,
    Failed,
}

/// One server's run of one workload.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub label: String,
    pub url: String,
    pub status: RunStatus,
    /// Why a run was skipped or failed.
    pub message: Option<String>,
    pub latency_meaning: String,
    pub latency: Percentiles,
    /// How late sends left compared with their intended times (client side).
    pub send_lag: Percentiles,
    pub sent: u64,
    pub completed: u64,
    pub lost: u64,
    pub errors: u64,
    pub measured_count: u64,
    pub measured_secs: f64,
    pub throughput_msgs_per_second: f64,
    pub usage: SystemUsage,
    #[serde(skip)]
    pub histogram: LatencyHistogram,
}

impl RunReport {
    pub fn from_measurement(
        label: &str,
        url: &str,
        workload: &Workload,
        measurement: Measurement,
    ) -> RunReport {
        RunReport {
            label: label.to_string(),
            url: url.to_string(),
            status: RunStatus::Ok,
            message: None,
            latency_meaning: workload.kind.latency_meaning().to_string(),
            latency: measurement.latency.percentiles(),
            send_lag: measurement.send_lag.percentiles(),
            sent: measurement.sent,
            completed: measurement.completed,
            lost: measurement.lost,
            errors: measurement.errors,
            measured_count: measurement.measured_count,
            measured_secs: measurement.measured_secs,
            throughput_msgs_per_second: measurement.throughput_msgs_per_second,
            usage: measurement.usage,
            histogram: measurement.latency,
        }
    }

    /// A run that produced no numbers.
    pub fn without_numbers(
        label: &str,
        url: &str,
        workload: &Workload,
        status: RunStatus,
        message: String,
    ) -> RunReport {
        assert!(status != RunStatus::Ok);
        RunReport {
            label: label.to_string(),
            url: url.to_string(),
            status,
            message: Some(message),
            latency_meaning: workload.kind.latency_meaning().to_string(),
            latency: Percentiles::default(),
            send_lag: Percentiles::default(),
            sent: 0,
            completed: 0,
            lost: 0,
            errors: 0,
            measured_count: 0,
            measured_secs: 0.0,
            throughput_msgs_per_second: 0.0,
            usage: SystemUsage::default(),
            histogram: LatencyHistogram::new(),
        }
    }
}

/// `first / second` for each column; `None` where a side has no value.
#[derive(Debug, Serialize, PartialEq)]
pub struct Ratios {
    pub label: String,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub p9999: Option<f64>,
    pub max: Option<f64>,
    pub throughput: Option<f64>,
    pub server_cpu: Option<f64>,
    pub server_rss: Option<f64>,
}

fn ratio(first: f64, second: f64) -> Option<f64> {
    (first > 0.0 && second > 0.0).then(|| first / second)
}

impl Ratios {
    pub fn of(first: &RunReport, second: &RunReport) -> Option<Ratios> {
        if first.status != RunStatus::Ok || second.status != RunStatus::Ok {
            return None;
        }
        let (a, b) = (first.latency.columns(), second.latency.columns());
        let optional = |x: Option<f64>, y: Option<f64>| ratio(x?, y?);
        Some(Ratios {
            label: format!("{} / {}", first.label, second.label),
            p50: ratio(a[0], b[0]),
            p90: ratio(a[1], b[1]),
            p99: ratio(a[2], b[2]),
            p999: ratio(a[3], b[3]),
            p9999: ratio(a[4], b[4]),
            max: ratio(a[5], b[5]),
            throughput: ratio(
                first.throughput_msgs_per_second,
                second.throughput_msgs_per_second,
            ),
            server_cpu: optional(
                first.usage.server_cpu_percent,
                second.usage.server_cpu_percent,
            ),
            server_rss: optional(
                first.usage.server_rss_bytes.map(|b| b as f64),
                second.usage.server_rss_bytes.map(|b| b as f64),
            ),
        })
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub tool: String,
    pub created_unix_secs: u64,
    pub workload: Workload,
    pub runs: Vec<RunReport>,
    pub ratios: Option<Ratios>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot encode {what}: {reason}")]
    Encode { what: String, reason: String },
}

impl Report {
    pub fn new(workload: &Workload, runs: Vec<RunReport>) -> Report {
        assert!(
            !runs.is_empty() && runs.len() <= 2,
            "one run, or two side by side"
        );
        let ratios = match &runs[..] {
            [first, second] => Ratios::of(first, second),
            _ => None,
        };
        Report {
            tool: format!("tern-bench {}", env!("CARGO_PKG_VERSION")),
            created_unix_secs: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |elapsed| elapsed.as_secs()),
            workload: workload.clone(),
            runs,
            ratios,
        }
    }

    pub fn markdown(&self) -> String {
        let workload = &self.workload;
        let mut out = String::new();
        let rate = workload
            .rate_per_second
            .map_or("max throughput".to_string(), |rate| {
                format!("{rate} msgs/s")
            });
        let _ = writeln!(out, "## {} ({:?})\n", workload.name, workload.kind);
        if !workload.description.is_empty() {
            let _ = writeln!(out, "{}\n", workload.description);
        }
        let meaning = self
            .runs
            .first()
            .map_or("", |run| run.latency_meaning.as_str());
        let _ = writeln!(
            out,
            "Latency: {meaning}, µs. Target: {rate}, {} B payloads, {} subject(s), {} stream(s) R{} {:?}, \
{} producer(s), {} consumer(s), {} connection(s), window {}, warm-up {} s, measured {} s, {:?} loop.\n",
            workload.payload_bytes,
            workload.subjects,
            workload.streams,
            workload.replicas,
            workload.storage,
            workload.producers,
            workload.consumers,
            workload.connections,
            workload.window,
            workload.warmup_secs,
            workload.duration_secs,
            workload.pacing,
        );
        out.push_str(
            "| server | p50 | p90 | p99 | p99.9 | p99.99 | max | msgs/s | sent | lost | errors | client CPU % | server CPU % | server RSS MiB | steal % |\n",
        );
        out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for run in &self.runs {
            if run.status != RunStatus::Ok {
                let _ = writeln!(
                    out,
                    "| {} | {:?}: {} ||||||||||||||",
                    run.label,
                    run.status,
                    run.message.as_deref().unwrap_or("").replace('|', "/")
                );
                continue;
            }
            let _ = write!(out, "| {} |", run.label);
            for value in run.latency.columns() {
                let _ = write!(out, " {} |", micros(value));
            }
            let _ = writeln!(
                out,
                " {} | {} | {} | {} | {:.0} | {} | {} | {} |",
                grouped(run.throughput_msgs_per_second),
                run.sent,
                run.lost,
                run.errors,
                run.usage.client_cpu_percent,
                run.usage
                    .server_cpu_percent
                    .map_or("–".into(), |cpu| format!("{cpu:.0}")),
                run.usage
                    .server_rss_bytes
                    .map_or("–".into(), |rss| format!("{:.1}", rss as f64 / 1048576.0)),
                run.usage
                    .server_steal_percent
                    .map_or("–".into(), |steal| format!("{steal:.0}")),
            );
        }
        if let Some(ratios) = &self.ratios {
            let show = |value: Option<f64>| value.map_or("–".into(), |v| format!("{v:.2}"));
            let _ = writeln!(
                out,
                "| **{}** | {} | {} | {} | {} | {} | {} | {} | | | | | {} | {} | |",
                ratios.label,
                show(ratios.p50),
                show(ratios.p90),
                show(ratios.p99),
                show(ratios.p999),
                show(ratios.p9999),
                show(ratios.max),
                show(ratios.throughput),
                show(ratios.server_cpu),
                show(ratios.server_rss),
            );
        }
        if self
            .runs
            .iter()
            .any(|run| run.usage.server_steal_percent.is_some())
        {
            out.push_str(
                "\nsteal %: share of the server's CPUs' time the hypervisor gave to something else \
during the window (`/proc/stat`); a run with much of it measured the host, not the server.\n",
            );
        }
        for run in self.runs.iter().filter(|run| run.status == RunStatus::Ok) {
            if run.send_lag.count > 0 {
                let _ = writeln!(
                    out,
                    "\n{}: client send lag (actual send − intended time) p50 {} µs, p99 {} µs, max {} µs.",
                    run.label,
                    micros(run.send_lag.p50_micros),
                    micros(run.send_lag.p99_micros),
                    micros(run.send_lag.max_micros)
                );
            }
        }
        out
    }

    pub fn chart(&self) -> Chart {
        Chart {
            title: format!(
                "{}: {}",
                self.workload.name,
                self.runs
                    .first()
                    .map_or("", |run| run.latency_meaning.as_str())
            ),
            series: self
                .runs
                .iter()
                .filter(|run| run.status == RunStatus::Ok)
                .map(|run| Series {
                    label: run.label.clone(),
                    points: run.histogram.spectrum(PLOT_STEPS_PER_DECADE),
                })
                .collect(),
        }
    }

    /// Writes every output file into `dir` (created if missing) and returns
    /// their paths.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
        let failed = |path: &Path| {
            let path = path.display().to_string();
            move |source| ReportError::Write { path, source }
        };
        std::fs::create_dir_all(dir).map_err(failed(dir))?;
        let mut written = Vec::new();
        let mut put = |name: &str, bytes: &[u8]| -> Result<(), ReportError> {
            let path = dir.join(name);
            std::fs::write(&path, bytes).map_err(failed(&path))?;
            written.push(path);
            Ok(())
        };
        put("report.md", self.markdown().as_bytes())?;
        let json = serde_json::to_string_pretty(self).map_err(|error| ReportError::Encode {
            what: "results.json".into(),
            reason: error.to_string(),
        })?;
        put("results.json", json.as_bytes())?;
        for run in self.runs.iter().filter(|run| run.status == RunStatus::Ok) {
            let log = hdr_log(run)?;
            put(&format!("{}.hlog", file_stem(&run.label)), &log)?;
        }
        let chart = self.chart();
        put("latency.svg", plot::svg(&chart).as_bytes())?;
        let png = plot::png(&chart).map_err(|error| ReportError::Encode {
            what: "latency.png".into(),
            reason: error.to_string(),
        })?;
        put("latency.png", &png)?;
        Ok(written)
    }
}

/// One interval covering the measured window, tagged with the label.
fn hdr_log(run: &RunReport) -> Result<Vec<u8>, ReportError> {
    let encode = |reason: String| ReportError::Encode {
        what: format!("{}.hlog", run.label),
        reason,
    };
    let mut bytes = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    {
        let now = SystemTime::now();
        let mut writer = IntervalLogWriterBuilder::new()
            .add_comment(&format!(
                "tern-bench {}: {} ({}), values in nanoseconds",
                env!("CARGO_PKG_VERSION"),
                run.label,
                run.latency_meaning
            ))
            .with_start_time(now)
            .with_base_time(now)
            .with_max_value_divisor(1_000.0)
            .begin_log_with(&mut bytes, &mut serializer)
            .map_err(|error| encode(error.to_string()))?;
        let tag = file_stem(&run.label);
        writer
            .write_histogram(
                run.histogram.inner(),
                Duration::ZERO,
                Duration::from_secs_f64(run.measured_secs.max(0.0)),
                Tag::new(&tag),
            )
            .map_err(|error| encode(format!("{error:?}")))?;
    }
    Ok(bytes)
}

/// A label made safe for a file name and an HDR log tag.
fn file_stem(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn micros(value: f64) -> String {
    if value >= 1000.0 {
        grouped(value)
    } else {
        format!("{value:.1}")
    }
}

/// `1234567.8` → `1 234 568`.
fn grouped(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(' ');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    fn run(label: &str, base_micros: u64) -> RunReport {
        let workload = Workload::parse("name = \"t\"\nkind = \"core_pub_sub\"\n", "t").unwrap();
        let mut measurement = Measurement::default();
        for index in 0..1_000u64 {
            measurement
                .latency
                .record(Duration::from_micros(base_micros + index % 10));
        }
        measurement.sent = 1_000;
        measurement.measured_secs = 1.0;
        measurement.throughput_msgs_per_second = 1_000.0;
        RunReport::from_measurement(label, "nats://x", &workload, measurement)
    }

    #[test]
    fn ratios_are_first_over_second() {
        let (tern, nats) = (run("tern", 20), run("nats", 40));
        let ratios = Ratios::of(&tern, &nats).unwrap();
        assert!(
            (ratios.p50.unwrap() - 24.0 / 44.0).abs() < 0.01,
            "{ratios:?}"
        );
        assert_eq!(ratios.throughput, Some(1.0));
        assert_eq!(ratios.server_rss, None);
    }

    #[test]
    fn writes_every_file() {
        let workload = Workload::parse("name = \"t\"\nkind = \"core_pub_sub\"\n", "t").unwrap();
        let skipped = RunReport::without_numbers(
            "r3",
            "nats://y",
            &workload,
            RunStatus::Skipped,
            "not a cluster".into(),
        );
        let report = Report::new(&workload, vec![run("tern a", 20), skipped]);
        assert!(report.ratios.is_none());
        let dir = tempfile::tempdir().unwrap();
        let written = report.write(dir.path()).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "report.md",
                "results.json",
                "tern_a.hlog",
                "latency.svg",
                "latency.png"
            ]
        );
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("results.json")).unwrap())
                .unwrap();
        assert_eq!(json["runs"][1]["status"], "skipped");
        assert_eq!(json["runs"][0]["sent"], 1000);
        let markdown = report.markdown();
        assert!(markdown.contains("| tern a | 24.0 |"), "{markdown}");
        assert!(markdown.contains("Skipped: not a cluster"));
        let log = std::fs::read(dir.path().join("tern_a.hlog")).unwrap();
        let histograms: Vec<_> = IntervalLogIterator::new(&log)
            .filter_map(|entry| match entry {
                Ok(LogEntry::Interval(interval)) => {
                    Some(interval.tag().map(|t| t.as_str().to_string()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(histograms, [Some("tern_a".to_string())]);
    }

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(grouped(1_234_567.8), "1 234 568");
        assert_eq!(grouped(12.0), "12");
        assert_eq!(micros(12.34), "12.3");
    }
}
