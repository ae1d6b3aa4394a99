//! `tern tune [check|apply]`: the host settings a tern node wants
//! (tern-tuning's registry of tuners). `check` (the default) changes
//! nothing and prints one line per setting: `ok`, `would change` (with the
//! value now and the one wanted) or `cannot` (with why: no such knob on
//! this host, a read-only file, a value not offered). `apply` writes what
//! differs, reads it back and prints `changed` for what it changed; a
//! second `apply` changes nothing. `--tuners a,b` picks tuners, `--list`
//! names them all; `--cores` names the shards' CPUs (queue interrupts go
//! to the others); `--root` points at another tree laid out like `/`
//! (tests, or a chroot's view).
//!
//! Exit status: 0, or 1 when `apply` could not set something that applies
//! to this host (a write refused or not taking), 2 for bad usage.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use tern_shard::CpuList;
use tern_tuning::host::Host;
use tern_tuning::tune::{self, Finding, State};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum TuneAction {
    /// Report, change nothing
    #[default]
    Check,
    /// Set what differs
    Apply,
}

#[derive(Debug, Args)]
pub struct TuneArgs {
    /// check (default) or apply
    #[arg(value_enum, default_value_t = TuneAction::Check)]
    action: TuneAction,
    /// Only these tuners (comma-separated)
    #[arg(long, value_delimiter = ',')]
    tuners: Vec<String>,
    /// Print every tuner and what it is for, and exit
    #[arg(long)]
    list: bool,
    /// The shards' CPUs, taskset syntax, as tern-server's --cores (default:
    /// every online CPU); queue interrupts go to the others
    #[arg(long)]
    cores: Option<String>,
    /// The tree sysfs and procfs are read and written under
    #[arg(long, default_value = "/")]
    root: PathBuf,
}

pub fn execute(arguments: &TuneArgs) -> ExitCode {
    if arguments.list {
        for tuner in tune::TUNERS {
            let mode = if tuner.check_only {
                " (reported only)"
            } else {
                ""
            };
            println!("{:<22} {}{mode}", tuner.name, tuner.about);
        }
        return ExitCode::SUCCESS;
    }
    let tuners = match tune::select(&arguments.tuners) {
        Ok(tuners) => tuners,
        Err(error) => {
            eprintln!("tern tune: {error}");
            return ExitCode::from(2);
        }
    };
    let shard_cores = match arguments.cores.as_deref().map(CpuList::parse) {
        None => None,
        Some(Ok(list)) => Some(list.cpus().to_vec()),
        Some(Err(error)) => {
            eprintln!("tern tune: --cores: {error}");
            return ExitCode::from(2);
        }
    };
    let host = Host::new(&arguments.root);
    let node = tune::Node { shard_cores };
    let findings = match arguments.action {
        TuneAction::Check => tune::check(&host, &node, &tuners),
        TuneAction::Apply => tune::apply(&host, &node, &tuners),
    };
    for finding in &findings {
        println!("{}", render(finding));
    }
    let changed = findings.iter().filter(|finding| finding.changed).count();
    let failed = findings.iter().filter(|finding| failed(finding)).count();
    if arguments.action == TuneAction::Apply {
        println!("{changed} changed, {failed} could not be set");
        if failed > 0 {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// A setting that applies here (it has a file) and was not set.
fn failed(finding: &Finding) -> bool {
    !finding.path.is_empty()
        && matches!(&finding.state, State::Cannot { reason } if reason != "no such file on this host")
}

/// One line: `verdict  tuner  path: detail`.
pub fn render(finding: &Finding) -> String {
    let (verdict, detail) = match &finding.state {
        State::Ok { current } if finding.changed => ("changed", format!("= {current}")),
        State::Ok { current } => ("ok", format!("= {current}")),
        State::Differs { current, wanted } => {
            ("would change", format!("{current:?} -> {wanted:?}"))
        }
        State::Cannot { reason } => ("cannot", reason.clone()),
        State::KernelManaged { current } => (
            "kernel's",
            format!("= {current} (a managed interrupt: the kernel sets it)"),
        ),
    };
    if finding.path.is_empty() {
        format!("{verdict:<13} {:<22} {detail}", finding.tuner)
    } else {
        format!(
            "{verdict:<13} {:<22} {} {detail}",
            finding.tuner, finding.path
        )
    }
}
