//! Log lines in nats-server's shape, to stderr:
//! `[pid] 2026/11/30 10:46:14.357406 [INF] Listening for client connections on 0.0.0.0:4222`.
//! Test harnesses read the listening lines to learn ephemeral ports.

use std::io::Write;
use std::time::SystemTime;

use crate::timestamp::Civil;

struct Logger {
    pid: u32,
    level: log::LevelFilter,
}

impl log::Log for Logger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= self.level
            && (metadata.target().starts_with("tern") || metadata.level() <= log::Level::Warn)
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let tag = match record.level() {
            log::Level::Error => "ERR",
            log::Level::Warn => "WRN",
            log::Level::Info => "INF",
            log::Level::Debug => "DBG",
            log::Level::Trace => "TRC",
        };
        let line = format!(
            "[{}] {} [{}] {}\n",
            self.pid,
            Civil::from_system_time(SystemTime::now()).log_format(),
            tag,
            record.args()
        );
        // One write per line so lines from different shards do not interleave.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// Installs the logger once for the process.
pub fn init(level: log::LevelFilter) {
    let logger = Box::new(Logger {
        pid: std::process::id(),
        level,
    });
    if log::set_boxed_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}
