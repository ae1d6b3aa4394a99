//! `tern check`: the host facts that explain a slow run (tern-tuning's
//! `facts`), one line each, `fine`, `look` (with why) or `unknown`:
//! steal time (sampled over `--interval`), the cpuidle driver, the
//! frequency governors, device interrupts on the shards' cores
//! (`--cores`, default every CPU this process may use), the locked-memory
//! limit against what the shards register, and the block device, queue
//! settings and filesystem under `--store_dir` and `--journal_dir`.
//! Changes nothing; exits 0 (a `look` line is advice, not a failure).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tern_shard::CpuList;
use tern_tuning::facts::{self, Fact, Verdict};
use tern_tuning::host::Host;

/// What each shard registers for io_uring by default (`--io_memory`).
const IO_MEMORY_BYTES_PER_SHARD: u64 = 1 << 20;

#[derive(Debug, Args)]
pub struct HostCheckArgs {
    /// The shards' CPUs, taskset syntax (default: every CPU this process may use)
    #[arg(long)]
    cores: Option<String>,
    /// The store directory tern-server uses
    #[arg(long = "store_dir", alias = "store-dir", default_value = "./data")]
    store_dir: PathBuf,
    /// The journal directory (or raw journal device), if apart from the store
    #[arg(long = "journal_dir", alias = "journal-dir")]
    journal_dir: Option<PathBuf>,
    /// How long to sample steal time, in seconds (0: since boot)
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// The tree sysfs and procfs are read under
    #[arg(long, default_value = "/")]
    root: PathBuf,
}

pub fn execute(arguments: &HostCheckArgs) -> ExitCode {
    let cores = match &arguments.cores {
        Some(text) => match CpuList::parse(text) {
            Ok(cores) => cores,
            Err(error) => {
                eprintln!("tern check: --cores {text:?}: {error}");
                return ExitCode::from(2);
            }
        },
        None => CpuList::online(),
    };
    let host = Host::new(&arguments.root);
    let mut found: Vec<Fact> = Vec::new();
    let before = facts::cpu_times(&host);
    if arguments.interval > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(arguments.interval.min(60.0)));
    }
    match (before, facts::cpu_times(&host)) {
        (Some(before), Some(after)) if arguments.interval > 0.0 => {
            found.push(facts::steal(before, after))
        }
        (_, Some(after)) => found.push(facts::steal(Default::default(), after)),
        _ => found.push(Fact {
            name: "steal".into(),
            verdict: Verdict::Unknown,
            detail: "no /proc/stat".into(),
        }),
    }
    found.push(facts::cpuidle(&host));
    found.push(facts::governors(&host));
    found.push(facts::interrupts_on(&host, cores.cpus()));
    found.push(facts::memlock_fact(
        facts::memlock_limits(),
        IO_MEMORY_BYTES_PER_SHARD * cores.len() as u64,
    ));
    let directories = std::iter::once(&arguments.store_dir).chain(arguments.journal_dir.iter());
    for directory in directories {
        let absolute = std::path::absolute(directory).unwrap_or_else(|_| directory.clone());
        match std::fs::metadata(&absolute) {
            Ok(metadata) => {
                // A raw journal device is itself the device; a
                // directory is on the device its filesystem is.
                let device = if metadata.file_type().is_block_device() {
                    metadata.rdev()
                } else {
                    metadata.dev()
                };
                let numbers = (libc::major(device), libc::minor(device));
                found.push(facts::device_under(&host, &absolute, numbers));
            }
            Err(error) => found.push(Fact {
                name: format!("device under {}", absolute.display()),
                verdict: Verdict::Unknown,
                detail: error.to_string(),
            }),
        }
    }
    for fact in &found {
        println!("{}", render(fact));
    }
    ExitCode::SUCCESS
}

/// One line: `verdict  name  detail`.
pub fn render(fact: &Fact) -> String {
    let verdict = match fact.verdict {
        Verdict::Fine => "fine",
        Verdict::Look => "look",
        Verdict::Unknown => "unknown",
    };
    format!("{verdict:<8} {:<12} {}", fact.name, fact.detail)
}
