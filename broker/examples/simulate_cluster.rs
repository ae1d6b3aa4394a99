//! Runs the deterministic cluster simulator over a range of seeds: the
//! production stream replicas and multi-Raft driver on 3 and 5 simulated
//! nodes under faults (see `tern_broker::jetstream::sim`).
//!
//! ```text
//! cargo run --release -p tern-broker --example simulate_cluster -- --seeds N [--seed-start S] [--canary ack-before-quorum|local-expiry|ack-before-state|local-interest|snapshot-without-removals|limit-evicts-newest|checkpoint-beyond-durable|entries-over-install]
//! ```
//!
//! Prints each violation (seed, invariant, detail; the trace of the first
//! few) and, last, `seeds=N violations=V elapsed_s=T`. Without `--canary`
//! it exits non-zero when there was a violation; with one (a known bug
//! switched on) the violations are the point: it exits non-zero when there
//! was none.

use std::process::ExitCode;
use std::time::Instant;

use tern_broker::jetstream::sim::{self, Outcome, SimConfig};
use tern_broker::jetstream::stream::replica::StreamCanary;

/// Violations printed with their trace; later ones get one line.
const FULL_TRACES: u64 = 2;

struct Options {
    seeds: u64,
    seed_start: u64,
    canary: Option<StreamCanary>,
}

fn parse(arguments: &[String]) -> Result<Options, String> {
    let mut options = Options {
        seeds: 100,
        seed_start: 0,
        canary: None,
    };
    let mut position = 0;
    while position < arguments.len() {
        let argument = arguments[position].as_str();
        let value = arguments
            .get(position + 1)
            .ok_or(format!("{argument} needs a value"))?;
        match argument {
            "--seeds" | "--seed-start" => {
                let number = value
                    .parse()
                    .map_err(|_| format!("{argument}: not a number: {value}"))?;
                if argument == "--seeds" {
                    options.seeds = number;
                } else {
                    options.seed_start = number;
                }
            }
            "--canary" => {
                options.canary = Some(match value.as_str() {
                    "ack-before-quorum" => StreamCanary::AckBeforeQuorum,
                    "local-expiry" => StreamCanary::LocalExpiry,
                    "ack-before-state" => StreamCanary::AckBeforeState,
                    "local-interest" => StreamCanary::LocalInterest,
                    "snapshot-without-removals" => StreamCanary::SnapshotWithoutRemovals,
                    "checkpoint-beyond-durable" => StreamCanary::CheckpointBeyondDurable,
                    "entries-over-install" => StreamCanary::EntriesOverInstall,
                    "limit-evicts-newest" => StreamCanary::LimitEvictsNewest,
                    other => return Err(format!("unknown canary: {other}")),
                })
            }
            _ => return Err(format!("unknown argument: {argument}")),
        }
        position += 2;
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
                "usage: simulate_cluster --seeds N [--seed-start S] [--canary ack-before-quorum|local-expiry|ack-before-state|local-interest|snapshot-without-removals|limit-evicts-newest|checkpoint-beyond-durable|entries-over-install]"
            );
            return ExitCode::from(2);
        }
    };
    // Panics inside the production code are caught and reported as
    // violations; the default hook would only print them a second time.
    std::panic::set_hook(Box::new(|_| {}));
    if let Some(canary) = options.canary {
        println!("canary={canary:?} (a known bug is on: violations are expected)");
    }
    let started = Instant::now();
    let mut violations = 0u64;
    let mut acknowledged = 0u64;
    let mut counts = std::collections::BTreeMap::new();
    let mut first_violation = None;
    // Seeds are independent: one worker per CPU, reported in seed order.
    let workers = std::thread::available_parallelism().map_or(1, usize::from) as u64;
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|worker| {
                let canary = options.canary;
                let (start, seeds) = (options.seed_start, options.seeds);
                scope.spawn(move || {
                    (start + worker..start + seeds)
                        .step_by(workers as usize)
                        .map(|seed| {
                            sim::run(&SimConfig {
                                canary,
                                ..SimConfig::new(seed)
                            })
                        })
                        .collect::<Vec<Outcome>>()
                })
            })
            .collect();
        let mut outcomes: Vec<Outcome> = handles
            .into_iter()
            .flat_map(|handle| handle.join().expect("a worker does not panic"))
            .collect();
        outcomes.sort_by_key(|outcome| outcome.seed);
        outcomes
    });
    for outcome in outcomes {
        let seed = outcome.seed;
        acknowledged += outcome.acknowledged;
        for (what, count) in &outcome.counts {
            *counts.entry(*what).or_insert(0u64) += count;
        }
        let Some(violation) = outcome.violations.first() else {
            continue;
        };
        violations += 1;
        first_violation.get_or_insert(seed);
        println!(
            "VIOLATION seed={seed} nodes={} invariant=\"{}\": {}",
            outcome.nodes, violation.invariant, violation.detail
        );
        if violations <= FULL_TRACES {
            for later in outcome.violations.iter().skip(1) {
                println!("  and \"{}\": {}", later.invariant, later.detail);
            }
            for event in &outcome.trace {
                println!("    {event}");
            }
        }
    }
    let counted: Vec<String> = counts
        .iter()
        .map(|(what, count)| format!("{what} {count}"))
        .collect();
    println!(
        "in total: publishes acknowledged {acknowledged}, {}",
        counted.join(", ")
    );
    if let Some(seed) = first_violation {
        println!("first_violation_seed={seed}");
    }
    println!(
        "seeds={} violations={violations} elapsed_s={:.1}",
        options.seeds,
        started.elapsed().as_secs_f64()
    );
    match options.canary {
        None if violations > 0 => ExitCode::FAILURE,
        Some(_) if violations == 0 => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    }
}
