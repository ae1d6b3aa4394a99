//! `tern`: the operator CLI. Today it carries `tern bench …` (the latency
//! harness, crate tern-bench), `tern storage check|repair` (damaged
//! storage, `storage.rs`) and `tern nkey gen` (NKey pairs, `nkey.rs`); `tern stream …`, `tern consumer …`, `tern tune`
//! and `tern nvme` arrive with their issues.

mod nkey;
mod storage;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tern_bench::command::{self, BenchCommand};

#[derive(Debug, Parser)]
#[command(name = "tern", version, about = "tern: the operator CLI")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The open-loop latency harness: run workloads against NATS servers.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Check a stopped server's store for damage, and repair it.
    #[command(subcommand)]
    Storage(storage::StorageCommand),
    /// NKeys for authentication: `tern nkey gen user|server`.
    #[command(subcommand)]
    Nkey(nkey::NkeyCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Storage(storage) => storage::execute(storage),
        Command::Nkey(nkey) => nkey::execute(nkey),
        Command::Bench(bench) => match command::execute(bench) {
            Ok(outcome) => {
                println!("{}", outcome.report.markdown());
                for file in &outcome.files {
                    eprintln!("wrote {}", file.display());
                }
                if outcome.all_ok {
                    ExitCode::SUCCESS
                } else {
                    eprintln!("tern bench: at least one run failed (see the report)");
                    ExitCode::FAILURE
                }
            }
            Err(error) => {
                eprintln!("tern bench: {error}");
                ExitCode::from(2)
            }
        },
    }
}
