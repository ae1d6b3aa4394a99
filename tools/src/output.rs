//! Writing to stdout: one line at a time, or many through one buffered,
//! locked writer (`consumer next --count 10000`). A closed pipe (`| head`)
//! ends the output quietly.

use std::io::Write;

/// Prints one line on stdout.
pub fn line(text: impl std::fmt::Display) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// Labelled values, the labels right-aligned as the `nats` CLI prints
/// its info blocks.
pub fn table(rows: &[(&str, String)]) {
    let width = rows.iter().map(|(label, _)| label.len()).max().unwrap_or(0);
    for (label, value) in rows {
        line(format_args!("  {label:>width$}: {value}"));
    }
}
