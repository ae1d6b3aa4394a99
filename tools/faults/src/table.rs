//! `tern-faults table REPORT.json…`: runs side by side, as the Markdown
//! tables RELIABILITY.md shows: one row per run with the checker's
//! verdict, and per fault kind the worst and median time without an
//! acknowledged publish (single-node faults begun on a healthy cluster,
//! the availability goal's measure) and the worst time from heal to the
//! first acknowledgement.

use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct TableArgs {
    /// `report.json` files written by `tern-faults run`.
    #[arg(required = true)]
    pub reports: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("{path}: {detail}")]
    Read { path: String, detail: String },
}

struct Run {
    label: String,
    report: serde_json::Value,
}

/// Per run: the unavailability of each counted fault, and each heal's
/// time to the first acknowledgement.
type PerRun = Vec<(Vec<u64>, Vec<u64>)>;

fn count(value: &serde_json::Value) -> usize {
    value.as_array().map_or(0, Vec::len)
}

fn median(values: &mut [u64]) -> Option<u64> {
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}

pub fn render(args: &TableArgs) -> Result<String, TableError> {
    let mut runs = Vec::new();
    for path in &args.reports {
        let read = |detail: String| TableError::Read {
            path: path.display().to_string(),
            detail,
        };
        let text = std::fs::read_to_string(path).map_err(|error| read(error.to_string()))?;
        let report: serde_json::Value =
            serde_json::from_str(&text).map_err(|error| read(error.to_string()))?;
        let label = format!(
            "{}, {} nodes, R{}",
            report["server"].as_str().unwrap_or("?"),
            report["nodes"],
            report["replicas"]
        );
        runs.push(Run { label, report });
    }
    let mut out = String::new();
    out.push_str("| run | schedule, seed | faults | minutes | acked | lost | unexpected | duplicated | diverged / unreadable | node failures | verdict |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for run in &runs {
        let outcome = &run.report;
        let report = &outcome["report"];
        out.push_str(&format!(
            "| {} | {} {} | {} | {:.0} | {} | {} | {} | {} | {} / {} | {} | {} |\n",
            run.label,
            outcome["schedule"].as_str().unwrap_or("?"),
            outcome["seed"],
            count(&outcome["steps"]),
            outcome["elapsed_ms"].as_f64().unwrap_or(0.0) / 60_000.0,
            report["acked"],
            count(&report["lost"]),
            count(&report["unexpected"]),
            count(&report["duplicated"]),
            count(&report["divergence"]),
            count(&report["unreadable"]),
            count(&outcome["crashes"]),
            if outcome["passed"] == true {
                "pass"
            } else {
                "FAIL"
            },
        ));
    }
    // Per fault kind: worst and median unavailability (healthy start),
    // worst heal → first ack, for each run.
    let mut kinds: BTreeMap<String, PerRun> = BTreeMap::new();
    for (index, run) in runs.iter().enumerate() {
        let steps = run.report["steps"].as_array().cloned().unwrap_or_default();
        let availability = run.report["report"]["availability"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for (step, window) in steps.iter().zip(&availability) {
            let kind = step["step"]["fault"]["kind"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            let entry = kinds
                .entry(kind)
                .or_insert_with(|| vec![(Vec::new(), Vec::new()); runs.len()]);
            if window["single_node"] == true && window["started_healthy"] == true {
                // `None` (never acknowledged again) counts as the worst.
                entry[index].0.push(
                    window["longest_unavailable_ms"]
                        .as_u64()
                        .unwrap_or(u64::MAX),
                );
            }
            entry[index]
                .1
                .push(window["heal_to_first_ack_ms"].as_u64().unwrap_or(u64::MAX));
        }
    }
    out.push_str("\nLongest time without an acknowledged publish per fault, worst / median in ms (single-node faults begun on a healthy cluster), and the worst time from heal to the first acknowledgement:\n\n");
    out.push_str("| fault |");
    for run in &runs {
        out.push_str(&format!(" {} |", run.label));
    }
    out.push_str("\n|---|");
    for _ in &runs {
        out.push_str("---|");
    }
    out.push('\n');
    let show = |value: Option<u64>| match value {
        None => "-".to_string(),
        Some(u64::MAX) => "never".to_string(),
        Some(value) => value.to_string(),
    };
    for (kind, per_run) in &mut kinds {
        out.push_str(&format!("| {} |", kind.replace('_', " ")));
        for (unavailable, heal) in per_run.iter_mut() {
            let worst = unavailable.iter().copied().max();
            let middle = median(unavailable);
            let heal_worst = heal.iter().copied().max();
            out.push_str(&format!(
                " {} / {} (heal→ack {}, n={}) |",
                show(worst),
                show(middle),
                show(heal_worst),
                heal.len()
            ));
        }
        out.push('\n');
    }
    Ok(out)
}
