//! `tern-faults`: the cluster fault harness (RELIABILITY.md).
//!
//! - `tern-faults run …`: one run against tern-server or nats-server, the
//!   report on stderr and in `<dir>/report.json`; exit status 0 when it
//!   passed (nothing lost, unexpected, duplicated or diverged, no crash,
//!   writes accepted after every heal), 1 when not.
//! - `tern-faults delay …`: the NFQUEUE delay shim the harness starts in a
//!   node's namespace.
//! - `tern-faults table REPORT.json…`: runs side by side (RELIABILITY.md).
//!
//! Needs root (network namespaces, nft, iptables).

mod checker;
mod damage;
mod delay;
mod nemesis;
mod net;
mod random;
mod run;
mod servers;
mod table;
mod workload;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "tern-faults",
    about = "Jepsen-style cluster fault tests for tern-server and nats-server"
)]
enum Command {
    /// Run a fault schedule against a cluster and check the history.
    Run(run::RunArgs),
    /// The delay shim (started by `run` inside a node's namespace).
    Delay(delay::DelayArgs),
    /// Markdown tables of runs side by side, from their report.json files.
    Table(table::TableArgs),
}

fn main() -> std::process::ExitCode {
    match Command::parse() {
        Command::Delay(args) => match delay::run(&args) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("tern-faults delay: {error}");
                std::process::ExitCode::from(2)
            }
        },
        Command::Table(args) => match table::render(&args) {
            Ok(text) => {
                print!("{text}");
                std::process::ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("tern-faults table: {error}");
                std::process::ExitCode::from(2)
            }
        },
        Command::Run(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("tokio runtime");
            // SIGINT or SIGTERM drops the run: its nodes are killed and its
            // namespaces deleted on the way out (their `Drop`s).
            let interrupted = runtime.block_on(async {
                let mut terminate =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                        .expect("SIGTERM handler");
                tokio::select! {
                    outcome = run::run(args) => Some(outcome),
                    _ = tokio::signal::ctrl_c() => None,
                    _ = terminate.recv() => None,
                }
            });
            let Some(result) = interrupted else {
                eprintln!("tern-faults: interrupted; nodes stopped, namespaces removed");
                return std::process::ExitCode::from(130);
            };
            match result {
                Ok(outcome) => {
                    print_summary(&outcome);
                    if outcome.passed {
                        std::process::ExitCode::SUCCESS
                    } else {
                        std::process::ExitCode::from(1)
                    }
                }
                Err(error) => {
                    eprintln!("tern-faults: {error}");
                    std::process::ExitCode::from(2)
                }
            }
        }
    }
}

fn print_summary(outcome: &run::Outcome) {
    let report = &outcome.report;
    println!(
        "{}, {} nodes, R{}, schedule {:?}, seed {}: {:.1} s",
        outcome.server,
        outcome.nodes,
        outcome.replicas,
        outcome.schedule,
        outcome.seed,
        outcome.elapsed_ms as f64 / 1000.0
    );
    println!(
        "{:<44} {:>8} {:>16} {:>15}",
        "fault", "hold ms", "unavailable ms", "heal→ack ms"
    );
    for (record, availability) in outcome.steps.iter().zip(&report.availability) {
        let show =
            |value: Option<u64>| value.map_or("never".to_string(), |value| value.to_string());
        println!(
            "{:<44} {:>8} {:>16} {:>15}",
            availability.fault,
            record.step.hold.as_millis(),
            show(availability.longest_unavailable_ms),
            show(availability.heal_to_first_ack_ms)
        );
    }
    println!(
        "attempted {}, acked {}, failed {}; stored {}; delivered {} (redeliveries {})",
        report.attempted,
        report.acked,
        report.failed,
        report.stored,
        report.delivered,
        report.redeliveries
    );
    println!(
        "lost {} (prefix {}, middle {}, suffix {}); never delivered {}; unexpected {}; duplicated {}; unmarked redeliveries {}; moved {}; gaps {}",
        report.lost.len(),
        report.lost_prefix,
        report.lost_middle,
        report.lost_suffix,
        report.never_delivered.len(),
        report.unexpected.len(),
        report.duplicated.len(),
        report.unmarked_redeliveries.len(),
        report.moved.len(),
        report.gaps.len()
    );
    let list = |items: &[String]| {
        if items.is_empty() {
            "none".to_string()
        } else {
            items.join("; ")
        }
    };
    println!("divergence: {}", list(&report.divergence));
    println!("unreadable: {}", list(&report.unreadable));
    println!(
        "node failures (crashed, refused to start, unhealthy at the end): {}",
        list(&outcome.crashes)
    );
    println!(
        "worst single-node unavailability: {} ms (goal 2000); drain after the last heal: {} ms",
        report
            .worst_single_node_unavailable_ms()
            .map_or("-".to_string(), |value| value.to_string()),
        outcome.drain_ms
    );
    println!("{}", if outcome.passed { "PASS" } else { "FAIL" });
}
