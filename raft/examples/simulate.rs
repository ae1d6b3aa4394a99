//! Runs the deterministic Raft simulator over a range of seeds.
//!
//! ```text
//! cargo run --release -p tern-raft --example simulate -- --seeds N [--seed-start S] [--canary [vote|commit|chunk|lost|wipe-keeps-identity|wipe-forms-configuration]]
//! ```
//!
//! Prints each violation (seed, invariant and a readable trace; the full
//! trace for the first few, one line after that) and, last,
//! `seeds=N violations=V elapsed_s=T`. Without `--canary` it exits non-zero
//! when there was a violation; with a canary (a known bug switched on) the
//! violations are the point, so it reports and exits 0.

use std::process::ExitCode;
use std::time::Instant;

use tern_raft::sim::{self, HostCanary, SimConfig};
use tern_raft::Canary;

/// Violations printed with their whole trace; later ones get one line.
const FULL_TRACES: u64 = 3;

struct Options {
    seeds: u64,
    seed_start: u64,
    canary: Option<Canary>,
    host_canary: Option<HostCanary>,
}

fn parse(arguments: &[String]) -> Result<Options, String> {
    let mut options = Options {
        seeds: 100,
        seed_start: 0,
        canary: None,
        host_canary: None,
    };
    let mut position = 0;
    while position < arguments.len() {
        let argument = arguments[position].as_str();
        let value = arguments.get(position + 1);
        match argument {
            "--seeds" | "--seed-start" => {
                let value = value.ok_or(format!("{argument} needs a number"))?;
                let number = value
                    .parse()
                    .map_err(|_| format!("{argument}: not a number: {value}"))?;
                if argument == "--seeds" {
                    options.seeds = number;
                } else {
                    options.seed_start = number;
                }
                position += 2;
            }
            "--canary" => match value.map(String::as_str) {
                Some("commit") => {
                    options.canary = Some(Canary::CommitBeforeDurable);
                    position += 2;
                }
                Some("chunk") => {
                    options.canary = Some(Canary::SnapshotChunkGap);
                    position += 2;
                }
                Some("lost") => {
                    options.canary = Some(Canary::ForgetLostEntries);
                    position += 2;
                }
                Some("wipe-keeps-identity" | "wipe") => {
                    options.host_canary = Some(HostCanary::WipeKeepsIdentity);
                    position += 2;
                }
                Some("wipe-forms-configuration") => {
                    options.host_canary = Some(HostCanary::WipeFormsConfiguration);
                    position += 2;
                }
                Some("vote") => {
                    options.canary = Some(Canary::VoteWithoutLogCheck);
                    position += 2;
                }
                _ => {
                    options.canary = Some(Canary::VoteWithoutLogCheck);
                    position += 1;
                }
            },
            _ => return Err(format!("unknown argument: {argument}")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&arguments) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            eprintln!(
                "usage: simulate --seeds N [--seed-start S] [--canary [vote|commit|chunk|lost|wipe-keeps-identity|wipe-forms-configuration]]"
            );
            return ExitCode::from(2);
        }
    };
    // Node panics are caught and reported as violations with their message;
    // the default hook would only print them a second time.
    std::panic::set_hook(Box::new(|_| {}));
    let config = SimConfig {
        canary: options.canary,
        host_canary: options.host_canary,
        ..SimConfig::default()
    };
    if let Some(canary) = options.canary {
        println!("canary={canary:?} (a known bug is on: violations are expected)");
    }
    if let Some(canary) = options.host_canary {
        println!("canary={canary:?} (a known bug of the host is on: violations are expected)");
    }
    let canary_on = options.canary.is_some() || options.host_canary.is_some();
    let started = Instant::now();
    let mut violations = 0u64;
    let mut first_violation: Option<u64> = None;
    let mut totals = sim::Stats::default();
    for seed in options.seed_start..options.seed_start + options.seeds {
        let violation = match sim::run(seed, &config) {
            Ok(stats) => {
                totals.add(&stats);
                continue;
            }
            Err(violation) => violation,
        };
        violations += 1;
        first_violation.get_or_insert(seed);
        if violations <= FULL_TRACES {
            println!("VIOLATION {violation}");
        } else {
            println!(
                "VIOLATION seed={} invariant=\"{}\" tick={}: {}",
                violation.seed, violation.invariant, violation.tick, violation.detail
            );
        }
    }
    println!("passing runs in total: {totals}");
    if let Some(seed) = first_violation {
        println!("first_violation_seed={seed}");
    }
    println!(
        "seeds={} violations={violations} elapsed_s={:.1}",
        options.seeds,
        started.elapsed().as_secs_f64()
    );
    if violations > 0 && !canary_on {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
