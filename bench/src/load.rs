//! Load generation: when each send is due, where its latency starts, and how
//! many may be in flight.
//!
//! Three pacings:
//! - **open loop** (the default, coordinated omission corrected): send *i* of
//!   a producer is due at `start + i / rate`; its latency counts from that
//!   intended time, so a server that stalls (or a client that falls behind)
//!   shows in the tail for every send it delayed, as in wrk2;
//! - **max throughput**: no schedule; a producer sends whenever fewer than
//!   `window` of its sends are unanswered, latency from the actual send;
//! - **closed loop, uncorrected**: one in flight, latency from the actual
//!   send and a late send pushes the schedule back. This is the classic
//!   mistake; it exists so a test can show the difference.
//!
//! Producers are OS threads (timer slack 1 ns, absolute deadlines) that hand
//! each message to async-nats through the runtime handle: tokio's timer wheel
//! has a 1 ms tick, which would add up to a millisecond to every latency
//! counted from an intended time. How late each send left compared with its
//! intended time is recorded too (`send lag`), so a reader can see whether
//! the client kept up.
//!
//! Every message starts with a 16-byte header: the origin time (nanoseconds
//! since the run's clock base, little-endian u64) and the producer index
//! (u32) plus 4 reserved bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::Semaphore;

use crate::histogram::LatencyHistogram;
use crate::workload::{Loop, Workload};

pub const HEADER_BYTES: usize = 16;

/// The instant all origin times in a run are measured from.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub base: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            base: Instant::now(),
        }
    }

    pub fn nanos(&self, instant: Instant) -> u64 {
        u64::try_from(instant.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    pub fn instant(&self, nanos: u64) -> Instant {
        self.base + Duration::from_nanos(nanos)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// A payload of `payload_bytes` with the origin header in front.
pub fn payload(origin_nanos: u64, producer: u32, payload_bytes: usize) -> Bytes {
    assert!(payload_bytes >= HEADER_BYTES);
    let mut buffer = BytesMut::with_capacity(payload_bytes);
    buffer.put_u64_le(origin_nanos);
    buffer.put_u32_le(producer);
    buffer.put_u32_le(0);
    buffer.resize(payload_bytes, b'x');
    buffer.freeze()
}

/// `(origin nanos, producer)` from a payload written by [`payload`].
pub fn parse_header(payload: &[u8]) -> Option<(u64, u32)> {
    let origin = u64::from_le_bytes(payload.get(0..8)?.try_into().ok()?);
    let producer = u32::from_le_bytes(payload.get(8..12)?.try_into().ok()?);
    Some((origin, producer))
}

/// Counters shared by all tasks of a run: the progress line and the end of
/// run drain read them.
#[derive(Debug, Default)]
pub struct Counters {
    pub sent: AtomicU64,
    /// Replies, PubAcks or (core pub/sub) receipts by the first subscriber:
    /// the events that free a window slot.
    pub completed: AtomicU64,
    /// Messages received by consumers (all of them).
    pub delivered: AtomicU64,
    pub errors: AtomicU64,
}

impl Counters {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub fn add(counter: &AtomicU64, value: u64) {
        counter.fetch_add(value, Ordering::Relaxed);
    }
}

/// The phases of a paced run, as instants.
#[derive(Clone, Copy, Debug)]
pub struct Phases {
    pub start: Instant,
    /// Samples whose origin is before this are warm-up and not recorded.
    pub measure_start: Instant,
    /// No send is due at or after this.
    pub end: Instant,
}

impl Phases {
    pub fn new(start: Instant, workload: &Workload) -> Phases {
        let measure_start = start + workload.warmup();
        Phases {
            start,
            measure_start,
            end: measure_start + workload.duration(),
        }
    }

    pub fn measured(&self, origin: Instant) -> bool {
        origin >= self.measure_start && origin < self.end
    }

    pub fn measured_secs(&self) -> f64 {
        (self.end - self.measure_start).as_secs_f64()
    }
}

/// How one producer paces itself.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pacing {
    /// Seconds between this producer's sends; `None`: max throughput.
    pub interval_secs: Option<f64>,
    /// Offset of this producer's first send, so producers interleave.
    pub offset_secs: f64,
    pub window: u32,
    pub pacing: Loop,
}

impl Pacing {
    pub fn for_producer(workload: &Workload, producer: u32) -> Pacing {
        assert!(producer < workload.producers);
        let interval_secs = workload
            .rate_per_second
            .map(|rate| f64::from(workload.producers) / rate as f64);
        let window = match workload.pacing {
            Loop::Open => workload.window,
            Loop::ClosedUncorrected => 1,
        };
        Pacing {
            interval_secs,
            offset_secs: interval_secs.unwrap_or(0.0) * f64::from(producer)
                / f64::from(workload.producers),
            window,
            pacing: workload.pacing,
        }
    }

    /// How many sends are due before `end` (the whole schedule).
    pub fn due_before(&self, start: Instant, end: Instant) -> u64 {
        match self.interval_secs {
            Some(interval) => {
                let span = end.saturating_duration_since(start).as_secs_f64() - self.offset_secs;
                if span <= 0.0 {
                    0
                } else {
                    (span / interval).ceil() as u64
                }
            }
            None => 0,
        }
    }

    /// When send `index` is due, before any closed-loop push-back.
    pub fn intended(&self, start: Instant, index: u64) -> Instant {
        match self.interval_secs {
            Some(interval) => {
                start + Duration::from_secs_f64(self.offset_secs + interval * index as f64)
            }
            None => start,
        }
    }
}

/// A producer's in-flight limit. A receipt gives a slot back; a slot whose
/// answer never comes is written off after the workload's timeout (and
/// counted as an error) so a lost message cannot stop the producer.
#[derive(Debug)]
pub struct Window {
    slots: Semaphore,
}

impl Window {
    pub fn new(size: u32) -> Arc<Window> {
        assert!(size >= 1);
        Arc::new(Window {
            slots: Semaphore::new(size as usize),
        })
    }

    pub fn release(&self) {
        self.slots.add_permits(1);
    }

    /// Waits for a slot; `false` when none came within `timeout`.
    async fn acquire(&self, timeout: Duration) -> bool {
        match tokio::time::timeout(timeout, self.slots.acquire()).await {
            Ok(Ok(permit)) => {
                permit.forget();
                true
            }
            _ => false,
        }
    }
}

/// What one producer reports at the end.
#[derive(Debug, Default)]
pub struct ProducerOutcome {
    pub sent: u64,
    pub send_errors: u64,
    pub window_timeouts: u64,
    /// Sends still due when the producer gave up, `timeout` after the end
    /// (a server that stopped answering): counted as errors, never sent.
    pub abandoned: u64,
    /// How late each measured send left compared with its intended time.
    pub send_lag: LatencyHistogram,
}

/// When one producer sends and how long it waits: the run's clock and
/// phases, the producer's own pacing, and how long a send or a window slot
/// may take before it counts as an error.
#[derive(Clone, Copy, Debug)]
pub struct ProducerSchedule {
    pub clock: Clock,
    pub phases: Phases,
    pub pacing: Pacing,
    pub timeout: Duration,
}

/// Runs one producer on the current (blocking) thread until `phases.end`.
/// `send(index, origin_nanos)` must hand the message to the client; it runs
/// inside `handle.block_on` (of a multi-threaded runtime).
pub fn run_producer<F, Fut, E>(
    handle: &tokio::runtime::Handle,
    schedule: ProducerSchedule,
    window: &Window,
    counters: &Counters,
    mut send: F,
) -> ProducerOutcome
where
    F: FnMut(u64, u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
{
    let ProducerSchedule {
        clock,
        phases,
        pacing,
        timeout,
    } = schedule;
    // A current-thread runtime drives its timers only inside its own
    // `block_on`: every bounded wait here would hang.
    assert_eq!(
        handle.runtime_flavor(),
        tokio::runtime::RuntimeFlavor::MultiThread,
        "producers need a multi-threaded runtime"
    );
    set_timer_slack_nanos(1);
    let mut outcome = ProducerOutcome::default();
    let mut pushed_back = Duration::ZERO;
    let mut index = 0u64;
    loop {
        let intended = pacing.intended(phases.start, index) + pushed_back;
        // A paced producer sends everything due before the end, late or
        // not (skipping late sends would hide them); max throughput stops
        // at the end.
        let over = match pacing.interval_secs {
            Some(_) => intended >= phases.end,
            None => Instant::now() >= phases.end,
        };
        if over {
            break;
        }
        if Instant::now() >= phases.end + timeout {
            outcome.abandoned = pacing.due_before(phases.start, phases.end) - index;
            Counters::add(&counters.errors, outcome.abandoned);
            break;
        }
        sleep_until(intended);
        if !handle.block_on(window.acquire(timeout)) {
            // The oldest answer is overdue: write it off and carry on.
            outcome.window_timeouts += 1;
            Counters::add(&counters.errors, 1);
        }
        let now = Instant::now();
        let origin = match (pacing.pacing, pacing.interval_secs) {
            (Loop::Open, Some(_)) => intended,
            (Loop::ClosedUncorrected, _) => {
                pushed_back += now.saturating_duration_since(intended);
                now
            }
            (Loop::Open, None) => now,
        };
        if phases.measured(intended) && pacing.interval_secs.is_some() {
            outcome
                .send_lag
                .record(now.saturating_duration_since(intended));
        }
        let result = handle.block_on(async {
            tokio::time::timeout(timeout, send(index, clock.nanos(origin))).await
        });
        match result {
            Ok(Ok(())) => {
                outcome.sent += 1;
                Counters::add(&counters.sent, 1);
            }
            _ => {
                outcome.send_errors += 1;
                Counters::add(&counters.errors, 1);
                window.release();
            }
        }
        index += 1;
    }
    outcome
}

/// Sleeps until `deadline` with the thread's timer slack (set to 1 ns by
/// producers), so a send leaves within tens of microseconds of its time.
pub fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        std::thread::sleep(deadline - now);
    }
}

fn set_timer_slack_nanos(nanos: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long and touches only this
    // thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, nanos as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(rate: Option<u64>, producers: u32, pacing: Loop) -> Workload {
        let mut text = format!(
            "name = \"t\"\nkind = \"core_pub_sub\"\nproducers = {producers}\npacing = \"{}\"\n",
            match pacing {
                Loop::Open => "open",
                Loop::ClosedUncorrected => "closed_uncorrected",
            }
        );
        if let Some(rate) = rate {
            text.push_str(&format!("rate_per_second = {rate}\n"));
        }
        Workload::parse(&text, "test").unwrap()
    }

    #[test]
    fn intended_times_follow_the_rate_and_interleave_producers() {
        let workload = workload(Some(1_000), 2, Loop::Open);
        let start = Instant::now();
        let first = Pacing::for_producer(&workload, 0);
        let second = Pacing::for_producer(&workload, 1);
        assert_eq!(first.intended(start, 0), start);
        assert_eq!(first.intended(start, 1) - start, Duration::from_millis(2));
        assert_eq!(second.intended(start, 0) - start, Duration::from_millis(1));
        assert_eq!(
            second.intended(start, 10) - start,
            Duration::from_millis(21)
        );
        assert_eq!(first.window, 1024);
        let end = start + Duration::from_millis(100);
        assert_eq!(first.due_before(start, end), 50);
        assert_eq!(second.due_before(start, end), 50);
    }

    #[test]
    fn a_producer_gives_up_one_timeout_after_the_end() {
        // Every send hangs past its timeout (a stopped server).
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let workload = workload(Some(1_000), 1, Loop::Open);
        let start = Instant::now();
        let phases = Phases {
            start,
            measure_start: start,
            end: start + Duration::from_millis(50),
        };
        let counters = Counters::default();
        let outcome = run_producer(
            runtime.handle(),
            ProducerSchedule {
                clock: Clock::new(),
                phases,
                pacing: Pacing::for_producer(&workload, 0),
                timeout: Duration::from_millis(40),
            },
            &Window::new(1024),
            &counters,
            |_, _| std::future::pending::<Result<(), ()>>(),
        );
        assert!(start.elapsed() < Duration::from_millis(500));
        assert_eq!(outcome.sent, 0);
        assert_eq!(outcome.send_errors + outcome.abandoned, 50);
        assert_eq!(Counters::get(&counters.errors), 50);
    }

    #[test]
    fn closed_loop_has_one_in_flight_and_max_throughput_no_schedule() {
        let closed = Pacing::for_producer(&workload(Some(100), 1, Loop::ClosedUncorrected), 0);
        assert_eq!(closed.window, 1);
        let max = Pacing::for_producer(&workload(None, 1, Loop::Open), 0);
        assert_eq!(max.interval_secs, None);
        let start = Instant::now();
        assert_eq!(max.intended(start, 99), start);
    }

    #[test]
    fn header_round_trips() {
        let bytes = payload(123_456_789, 7, 64);
        assert_eq!(bytes.len(), 64);
        assert_eq!(parse_header(&bytes), Some((123_456_789, 7)));
        assert_eq!(parse_header(&bytes[..5]), None);
    }

    #[test]
    fn open_loop_counts_from_the_intended_time() {
        // A producer that is 50 ms late for every send (a stalled client or
        // server) still reports origins on the schedule.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let workload = workload(Some(1_000), 1, Loop::Open);
        let clock = Clock::new();
        let start = Instant::now();
        let phases = Phases {
            start,
            measure_start: start,
            end: start + Duration::from_millis(20),
        };
        let window = Window::new(1024);
        let counters = Counters::default();
        let mut origins = Vec::new();
        let outcome = run_producer(
            runtime.handle(),
            ProducerSchedule {
                clock,
                phases,
                pacing: Pacing::for_producer(&workload, 0),
                timeout: Duration::from_secs(1),
            },
            &window,
            &counters,
            |index, origin| {
                origins.push((index, origin));
                std::thread::sleep(Duration::from_millis(if index == 0 { 50 } else { 0 }));
                async { Ok::<(), ()>(()) }
            },
        );
        assert_eq!(outcome.sent, 20);
        for (index, origin) in origins {
            let expected = clock.nanos(start) + index * 1_000_000;
            assert_eq!(origin, expected);
        }
        // Every send after the stall left late, and the lag shows it.
        assert!(outcome.send_lag.percentiles().p90_micros >= 25_000.0);
    }
}
