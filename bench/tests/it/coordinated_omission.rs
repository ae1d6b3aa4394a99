//! Coordinated omission: a server paused for 200 ms (SIGSTOP, then SIGCONT)
//! in the middle of a 2 000 msgs/s request/reply run must show in the open
//! loop's p99.9 (every request due during the pause waited for it), and must
//! not show in a closed-loop uncorrected run's p99 (which sends nothing while
//! it waits, so the pause costs it one sample: the max).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use tern_bench::load::Counters;
use tern_bench::measure::Measurement;
use tern_bench::server::{Flavor, ServerProcess};

const RATE_PER_SECOND: u64 = 2_000;
const WARMUP_SECS: f64 = 0.5;
const DURATION_SECS: f64 = 1.5;
const PAUSE: Duration = Duration::from_millis(200);
/// Sends before the pause starts: one second into the measured window.
const SENDS_BEFORE_PAUSE: u64 = (RATE_PER_SECOND as f64 * (WARMUP_SECS + 1.0)) as u64;
/// The same point by the clock, for a loop running below its rate.
const PAUSE_AFTER_FIRST_SEND: Duration =
    Duration::from_millis(((WARMUP_SECS + 1.0) * 1000.0) as u64);

fn run_with_pause(
    runtime: &tokio::runtime::Runtime,
    server: &ServerProcess,
    pacing: &str,
) -> Measurement {
    let workload = common::workload(&format!(
        "name = \"co-{pacing}\"\nkind = \"request_reply\"\nrate_per_second = {RATE_PER_SECOND}\n\
         pacing = \"{pacing}\"\nwarmup_secs = {WARMUP_SECS}\nduration_secs = {DURATION_SECS}\n"
    ));
    let counters = Arc::new(Counters::default());
    std::thread::scope(|scope| {
        let pauser = scope.spawn(|| {
            common::wait_for("the first send", || Counters::get(&counters.sent) >= 1);
            // One second into the measured window: by the count of sends, or
            // by the clock when a loaded host slows the closed loop below
            // its rate (it sends only after each reply; CI once timed out
            // waiting for its 3 000th send).
            let first_send = std::time::Instant::now();
            common::wait_for("sends before the pause", || {
                Counters::get(&counters.sent) >= SENDS_BEFORE_PAUSE
                    || first_send.elapsed() >= PAUSE_AFTER_FIRST_SEND
            });
            server.signal(libc::SIGSTOP).expect("SIGSTOP");
            // The pause itself, not a synchronisation.
            std::thread::sleep(PAUSE);
            server.signal(libc::SIGCONT).expect("SIGCONT");
        });
        let measurement = common::measure(runtime, server, &workload, counters.clone());
        pauser.join().expect("pauser thread");
        measurement
    })
}

#[test]
fn a_paused_server_shows_in_the_corrected_tail_and_not_in_the_uncorrected_p99() {
    let runtime = common::runtime();
    let server = common::start(Flavor::Nats);
    let open = run_with_pause(&runtime, &server, "open");
    let closed = run_with_pause(&runtime, &server, "closed_uncorrected");
    let (open_latency, closed_latency) = (open.latency.percentiles(), closed.latency.percentiles());
    eprintln!("open loop: {open_latency:?}\nclosed loop: {closed_latency:?}");
    assert_eq!(open.lost, 0, "open loop lost replies");
    assert_eq!(closed.lost, 0, "closed loop lost replies");
    // About 400 of 4 000 requests were due during the pause: the top 0.1 %
    // waited for most of it.
    assert!(
        open_latency.p999_micros >= 150_000.0,
        "corrected p99.9 {} µs",
        open_latency.p999_micros
    );
    assert!(open_latency.max_micros >= 150_000.0);
    // Uncorrected: the stall is one sample.
    assert!(
        closed_latency.max_micros >= 150_000.0,
        "closed-loop max {} µs",
        closed_latency.max_micros
    );
    assert!(
        closed_latency.p99_micros < 50_000.0,
        "closed-loop p99 {} µs should not see the pause",
        closed_latency.p99_micros
    );
    // The closed loop also sent less: the pause pushed its schedule back.
    assert!(closed.sent < open.sent);
}
