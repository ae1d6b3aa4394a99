//! Progress bars for long operations (`pub --count`, `consumer next
//! --count`, `object put|get`), drawn on stderr only when stderr is a
//! terminal: in a pipe, a log or a test they are hidden and cost nothing
//! visible.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The fewest messages worth a bar (a handful finishes before it draws).
pub const MESSAGES_MIN: u64 = 1000;

fn hidden_unless_terminal(bar: ProgressBar) -> ProgressBar {
    if std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::stderr());
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}

/// A bar over `total` messages; hidden below [`MESSAGES_MIN`].
pub fn messages(total: u64, what: &str) -> ProgressBar {
    if total < MESSAGES_MIN {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total).with_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} eta {eta}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    hidden_unless_terminal(bar)
}

/// A bar over `total_bytes` bytes (an object transfer).
pub fn bytes(total_bytes: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total_bytes).with_style(
        ProgressStyle::with_template(
            "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    hidden_unless_terminal(bar)
}
