//! A one-line progress report on stderr for long runs, redrawn at most four
//! times a second from the run's counters; `--quiet` turns it off, and it
//! stays off when stderr is not a terminal (CI logs, Ansible).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::load::Counters;

/// Time between redraws (at most 4 per second).
pub const REDRAW_INTERVAL: Duration = Duration::from_millis(250);

/// The progress line while alive; dropping it stops and clears the line.
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// `total_secs` is the expected length (warm-up plus measurement).
    pub fn start(label: &str, counters: Arc<Counters>, total_secs: f64, quiet: bool) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let shown = !quiet && std::io::stderr().is_terminal();
        let thread = shown.then(|| {
            let stop = stop.clone();
            let label = label.to_string();
            std::thread::spawn(move || {
                let started = Instant::now();
                let mut stderr = std::io::stderr();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(REDRAW_INTERVAL);
                    let _ = write!(
                        stderr,
                        "\r\x1b[K{label}: {:5.1}/{total_secs:.0} s  sent {}  answered {}  delivered {}  errors {}",
                        started.elapsed().as_secs_f64(),
                        Counters::get(&counters.sent),
                        Counters::get(&counters.completed),
                        Counters::get(&counters.delivered),
                        Counters::get(&counters.errors),
                    );
                    let _ = stderr.flush();
                }
                let _ = write!(stderr, "\r\x1b[K");
            })
        });
        Progress { stop, thread }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
