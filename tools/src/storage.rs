//! `tern storage check` and `tern storage repair`: arguments and output;
//! the work is `tern_broker::jetstream::store_check`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use tern_broker::jetstream::store_check::{
    self, CheckError, CheckOptions, RepairReport, RepairTarget, StoreReport,
};

#[derive(Debug, Subcommand)]
pub enum StorageCommand {
    /// Read the store as tern-server would and report damage, and what
    /// `repair` would discard for it. Changes nothing. Exit status: 0 no
    /// damage, 1 damage found, 2 usage or I/O error.
    Check(CheckArgs),
    /// Repair one stream, journal or the layout: prints the plan; with
    /// --yes carries it out. Exit status: 0 repaired (or nothing to do),
    /// 1 refused or not confirmed, 2 usage or I/O error.
    Repair(RepairArgs),
}

/// Where the store is: as tern-server's flags and config file say.
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The server's data directory (--store_dir)
    #[arg(value_name = "STORE_DIR")]
    store_dir: PathBuf,
    /// The server's TOML configuration file (journal_dir, journal_segment_size,
    /// journal_segments, sync)
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Journal directory [default: <store_dir>/jetstream/journal]
    #[arg(long = "journal_dir", alias = "journal-dir", value_name = "DIR")]
    journal_dir: Option<PathBuf>,
    /// Print JSON instead of one line per finding
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["stream", "journal", "layout"])))]
pub struct RepairArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Repair this stream's raft, consumers and block store files
    #[arg(long, value_name = "NAME")]
    stream: Option<String>,
    /// Repair this shard's journal
    #[arg(long, value_name = "SHARD")]
    journal: Option<usize>,
    /// Rebuild jetstream/layout from the journals
    #[arg(long)]
    layout: bool,
    /// Carry the plan out (without it nothing changes)
    #[arg(long)]
    yes: bool,
}

/// Exit status of an error that stopped the command.
const EXIT_ERROR: u8 = 2;

pub fn execute(command: StorageCommand) -> ExitCode {
    let outcome = match command {
        StorageCommand::Check(args) => check(args),
        StorageCommand::Repair(args) => repair(args),
    };
    outcome.unwrap_or_else(|error| {
        eprintln!("tern storage: {error}");
        ExitCode::from(EXIT_ERROR)
    })
}

fn options(store: &StoreArgs) -> Result<CheckOptions, CheckError> {
    CheckOptions::resolve(
        store.store_dir.clone(),
        store.config.clone(),
        store.journal_dir.clone(),
    )
}

fn check(args: CheckArgs) -> Result<ExitCode, CheckError> {
    let report = store_check::check(&options(&args.store)?)?;
    if args.store.json {
        line(json(&report));
    } else {
        print_check(&report);
    }
    Ok(if report.damaged() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print_check(report: &StoreReport) {
    line(format_args!(
        "tern storage check {} (journals in {})",
        report.store_dir, report.journal_dir
    ));
    for finding in &report.findings {
        line(finding);
    }
    let damage = report
        .findings
        .iter()
        .filter(|finding| finding.severity == store_check::report::Severity::Damage)
        .count();
    if damage == 0 {
        line("no damage");
    } else {
        line(format_args!(
            "{damage} damaged: the streams that depend on them stay offline until repaired; each line names the repair command and what it discards"
        ));
    }
}

fn repair(args: RepairArgs) -> Result<ExitCode, CheckError> {
    let target = match (&args.stream, args.journal) {
        (Some(name), _) => RepairTarget::Stream(name.clone()),
        (None, Some(shard)) => RepairTarget::Journal(shard),
        (None, None) => RepairTarget::Layout,
    };
    let report = store_check::repair(&options(&args.store)?, &target, args.yes)?;
    if args.store.json {
        line(json(&report));
    } else {
        print_repair(&report);
    }
    Ok(if report.applied || report.nothing_to_do() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_repair(report: &RepairReport) {
    line(format_args!("tern storage repair: {}", report.target));
    for action in &report.actions {
        line(action);
    }
    for note in &report.notes {
        line(format_args!("note: {note}"));
    }
    if let Some(reason) = &report.refused {
        line(format_args!("refused: {reason}; nothing changed"));
    } else if report.nothing_to_do() {
        line("nothing to repair");
    } else if report.applied {
        line("repaired");
    } else {
        line("nothing changed; rerun with --yes to apply");
    }
}

/// Prints one line on stdout; a closed pipe (`| head`) ends the output
/// quietly.
fn line(text: impl std::fmt::Display) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).expect("reports serialise")
}
