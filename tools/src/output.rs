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

/// A table: a header row, then one row per entry, each column as wide as
/// its widest cell; numbers (cells starting with a digit) right-aligned.
pub fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in rows {
        for (at, cell) in row.iter().enumerate() {
            if at < widths.len() {
                widths[at] = widths[at].max(cell.chars().count());
            }
        }
    }
    let render = |cells: &mut dyn Iterator<Item = &str>, text: &mut String| {
        let mut line = String::new();
        for (at, cell) in cells.enumerate() {
            let width = widths.get(at).copied().unwrap_or(0);
            let numeric = cell.starts_with(|c: char| c.is_ascii_digit());
            if at > 0 {
                line.push_str("  ");
            }
            if numeric {
                line.push_str(&format!("{cell:>width$}"));
            } else {
                line.push_str(&format!("{cell:<width$}"));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    };
    let mut text = String::new();
    render(&mut header.iter().copied(), &mut text);
    for row in rows {
        render(&mut row.iter().map(String::as_str), &mut text);
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_align() {
        let text = super::columns(
            &["Name", "Messages"],
            &[
                vec!["ORDERS".into(), "10".into()],
                vec!["X".into(), "2000".into()],
            ],
        );
        assert_eq!(
            text,
            "Name    Messages\nORDERS        10\nX           2000\n"
        );
    }
}
