//! The `tern bench` commands (the `tern` CLI embeds these argument
//! definitions): `run` one workload against one server, `compare` it
//! between two. Each writes the report files into `--out` and prints the
//! table on stdout.

use std::path::{Path, PathBuf};

use crate::compare::{self, RunSettings, Side, SideSpec};
use crate::report::{Report, ReportError, RunReport, RunStatus};
use crate::server::{self, Flavor, ServerError};
use crate::workload::{Workload, WorkloadError, DURATION_SECS_MAX, DURATION_SECS_MIN};

/// Largest tokio worker-thread count accepted.
pub const WORKER_THREADS_MAX: usize = 1024;

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Run a workload against one server.
    Run(RunArgs),
    /// Run a workload against two servers and report both with ratios (a / b).
    Compare(CompareArgs),
}

impl BenchCommand {
    /// The credentials every client of the run uses.
    pub fn set_credentials(&mut self, credentials: crate::measure::Credentials) {
        match self {
            BenchCommand::Run(args) => args.common.credentials = credentials,
            BenchCommand::Compare(args) => args.common.credentials = credentials,
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Workload file (TOML), e.g. bench/workloads/latency-1k.toml.
    #[arg(long, value_name = "FILE")]
    pub workload: PathBuf,
    /// Directory for report.md, results.json, latency.svg/.png and *.hlog.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// No progress line on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Override the workload's measured duration.
    #[arg(long, value_name = "N")]
    pub duration_secs: Option<f64>,
    /// Override the workload's warm-up.
    #[arg(long, value_name = "N")]
    pub warmup_secs: Option<f64>,
    /// Client runtime threads (default: available CPUs).
    #[arg(long, value_name = "N")]
    pub worker_threads: Option<usize>,
    /// Pin the client (all its threads) to these CPUs, e.g. 0 or 0-3.
    #[arg(long, value_name = "LIST")]
    pub client_cpus: Option<String>,
    /// CA certificate (PEM) the clients trust: connections to a server
    /// whose INFO requires TLS upgrade to it (plaintext ones stay plain).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// How the clients authenticate (set by the `tern` CLI from its
    /// connection flags).
    #[arg(skip)]
    pub credentials: crate::measure::Credentials,
}

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Server to measure, e.g. nats://127.0.0.1:4222; a comma-separated
    /// list puts connection i on server i mod n (producer on the first,
    /// subscriber on the second: across the nodes of a cluster).
    #[arg(long, value_name = "URL")]
    pub url: String,
    /// Its monitoring endpoint (host:port) for server CPU and RSS from /varz.
    #[arg(long, value_name = "HOST:PORT")]
    pub monitor: Option<String>,
    /// Its PID, when it runs on this host (server CPU and RSS from /proc).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Name of the server in the report.
    #[arg(long, default_value = "server")]
    pub label: String,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("side_a").required(true).args(["a", "a_tern", "a_nats"])))]
#[command(group(clap::ArgGroup::new("side_b").required(true).args(["b", "b_tern", "b_nats"])))]
pub struct CompareArgs {
    /// Side a: a running server's URL.
    #[arg(long, value_name = "URL")]
    pub a: Option<String>,
    /// Side a: start tern-server (path; default: next to this program or on PATH).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    pub a_tern: Option<String>,
    /// Side a: start nats-server (path; default: on PATH).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    pub a_nats: Option<String>,
    #[arg(long, value_name = "HOST:PORT")]
    pub a_monitor: Option<String>,
    #[arg(long, value_name = "NAME")]
    pub a_label: Option<String>,
    /// Side b: a running server's URL.
    #[arg(long, value_name = "URL")]
    pub b: Option<String>,
    /// Side b: start tern-server.
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    pub b_tern: Option<String>,
    /// Side b: start nats-server 2.15.1 (JetStream durable workloads get
    /// `sync_interval: always`, matching tern's `--sync always`).
    #[arg(long, value_name = "PATH", num_args = 0..=1, default_missing_value = "")]
    pub b_nats: Option<String>,
    #[arg(long, value_name = "HOST:PORT")]
    pub b_monitor: Option<String>,
    #[arg(long, value_name = "NAME")]
    pub b_label: Option<String>,
    /// Pin servers this command starts to these CPUs (tern also gets --cores).
    #[arg(long, value_name = "LIST")]
    pub server_cpus: Option<String>,
    /// Extra argument for a started tern-server (repeatable).
    #[arg(long = "tern-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub tern_args: Vec<String>,
    /// Extra argument for a started nats-server (repeatable), e.g. its TLS
    /// flags.
    #[arg(long = "nats-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub nats_args: Vec<String>,
    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error("--{flag} {value}: {reason}")]
    Argument {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("cannot start the client runtime: {0}")]
    Runtime(std::io::Error),
}

/// What a command did: the report and whether every run succeeded (a
/// skipped run is not a failure).
#[derive(Debug)]
pub struct Outcome {
    pub report: Report,
    pub files: Vec<PathBuf>,
    pub all_ok: bool,
}

pub fn execute(command: BenchCommand) -> Result<Outcome, CommandError> {
    match command {
        BenchCommand::Run(args) => run(args),
        BenchCommand::Compare(args) => compare(args),
    }
}

fn load_workload(common: &CommonArgs) -> Result<Workload, CommandError> {
    let mut workload = Workload::load(&common.workload)?;
    if let Some(secs) = common.duration_secs {
        if !(DURATION_SECS_MIN..=DURATION_SECS_MAX).contains(&secs) {
            return Err(CommandError::Argument {
                flag: "duration-secs",
                value: secs.to_string(),
                reason: format!("outside {DURATION_SECS_MIN}..={DURATION_SECS_MAX}"),
            });
        }
        workload.duration_secs = secs;
    }
    if let Some(secs) = common.warmup_secs {
        workload.warmup_secs = secs;
    }
    workload.validate()?;
    Ok(workload)
}

fn runtime(common: &CommonArgs) -> Result<tokio::runtime::Runtime, CommandError> {
    if let Some(list) = &common.client_cpus {
        let cpus = server::parse_cpu_list(list)?;
        server::pin_current_thread(&cpus).map_err(|error| CommandError::Argument {
            flag: "client-cpus",
            value: list.clone(),
            reason: error.to_string(),
        })?;
    }
    let threads = match common.worker_threads {
        Some(threads) if (1..=WORKER_THREADS_MAX).contains(&threads) => threads,
        Some(threads) => {
            return Err(CommandError::Argument {
                flag: "worker-threads",
                value: threads.to_string(),
                reason: format!("outside 1..={WORKER_THREADS_MAX}"),
            })
        }
        None => std::thread::available_parallelism().map_or(2, usize::from),
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(CommandError::Runtime)
}

fn run(args: RunArgs) -> Result<Outcome, CommandError> {
    let workload = load_workload(&args.common)?;
    let runtime = runtime(&args.common)?;
    let spec = SideSpec {
        label: args.label.clone(),
        side: Side::Url {
            url: args.url.clone(),
            monitor: args.monitor.clone(),
            pid: args.pid,
        },
    };
    let settings = RunSettings {
        quiet: args.common.quiet,
        tls_ca: args.common.tls_ca.clone(),
        credentials: args.common.credentials.clone(),
        ..RunSettings::default()
    };
    let measured = workload.clone();
    let run = block_on_worker(&runtime, async move {
        compare::run_side(&measured, &spec, &settings).await
    });
    finish(&workload, vec![run], &args.common.out)
}

fn side(
    name: &'static str,
    url: Option<String>,
    tern: Option<String>,
    nats: Option<String>,
    monitor: Option<String>,
    label: Option<String>,
) -> Result<SideSpec, CommandError> {
    let given = |path: String| (!path.is_empty()).then(|| PathBuf::from(path));
    let (default_label, side) = match (url, tern, nats) {
        (Some(url), None, None) => (
            name.to_string(),
            Side::Url {
                url,
                monitor,
                pid: None,
            },
        ),
        (None, Some(path), None) => (
            "tern".to_string(),
            Side::Start {
                flavor: Flavor::Tern,
                program: match given(path) {
                    Some(path) => path,
                    None => server::tern_server_path()?,
                },
            },
        ),
        (None, None, Some(path)) => (
            "nats-server".to_string(),
            Side::Start {
                flavor: Flavor::Nats,
                program: match given(path) {
                    Some(path) => path,
                    None => server::nats_server_path()?,
                },
            },
        ),
        _ => {
            return Err(CommandError::Argument {
                flag: name,
                value: String::new(),
                reason: "give exactly one of a URL, a tern-server or a nats-server".into(),
            })
        }
    };
    Ok(SideSpec {
        label: label.unwrap_or(default_label),
        side,
    })
}

fn compare(args: CompareArgs) -> Result<Outcome, CommandError> {
    let workload = load_workload(&args.common)?;
    let server_cpus = match &args.server_cpus {
        Some(list) => Some(server::parse_cpu_list(list)?),
        None => None,
    };
    let mut first = side(
        "a",
        args.a,
        args.a_tern,
        args.a_nats,
        args.a_monitor,
        args.a_label,
    )?;
    let mut second = side(
        "b",
        args.b,
        args.b_tern,
        args.b_nats,
        args.b_monitor,
        args.b_label,
    )?;
    compare::distinct_labels(&mut first, &mut second);
    let runtime = runtime(&args.common)?;
    let settings = RunSettings {
        quiet: args.common.quiet,
        server_cpus,
        tern_args: args.tern_args,
        nats_args: args.nats_args,
        tls_ca: args.common.tls_ca.clone(),
        credentials: args.common.credentials.clone(),
    };
    let measured = workload.clone();
    let runs = block_on_worker(&runtime, async move {
        let first = compare::run_side(&measured, &first, &settings).await;
        let second = compare::run_side(&measured, &second, &settings).await;
        vec![first, second]
    });
    finish(&workload, runs, &args.common.out)
}

/// Runs `future` as a task on the runtime's workers, not on the calling
/// thread: the measuring code then shares a thread with the client's
/// connection task, instead of every message crossing between the main
/// thread and a worker (two context switches per message on one pinned
/// CPU, which capped the pull drain at about 15 µs per message).
fn block_on_worker<F>(runtime: &tokio::runtime::Runtime, future: F) -> F::Output
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let task = runtime.spawn(future);
    match runtime.block_on(task) {
        Ok(output) => output,
        Err(error) => match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(error) => panic!("measuring task cancelled: {error}"),
        },
    }
}

fn finish(workload: &Workload, runs: Vec<RunReport>, out: &Path) -> Result<Outcome, CommandError> {
    let all_ok = runs.iter().all(|run| run.status != RunStatus::Failed);
    let report = Report::new(workload, runs);
    let files = report.write(out)?;
    Ok(Outcome {
        report,
        files,
        all_ok,
    })
}
