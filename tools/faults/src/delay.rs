//! The delay shim: `tern-faults delay`, run inside a node's namespace,
//! holds every packet its NFQUEUE receives for `delay` ± `jitter` and then
//! lets it go, releasing in deadline order, so jitter reorders packets.
//! This kernel has no netem; this is the user-space stand-in.
//!
//! The queue copies metadata only (verdicts need no payload), is long, and
//! fails open when full, so the shim adds delay but never loss; the rule
//! that feeds it bypasses the queue when the shim is gone.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use crate::random::Random;

#[derive(Debug, clap::Args)]
pub struct DelayArgs {
    /// The NFQUEUE number to bind.
    #[arg(long)]
    pub queue: u16,
    /// The mean time each packet is held.
    #[arg(long)]
    pub delay_ms: u32,
    /// Each packet's hold is drawn uniformly from delay ± jitter.
    #[arg(long, default_value_t = 0)]
    pub jitter_ms: u32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum DelayError {
    #[error("NFQUEUE {queue}: {what}: {source}")]
    Queue {
        queue: u16,
        what: &'static str,
        source: std::io::Error,
    },
}

/// Packets waiting in the kernel's queue at most (beyond: accepted at once).
const QUEUE_LENGTH_MAX: u32 = 65_536;
/// How long the loop sleeps when nothing is due and nothing arrived.
const IDLE_SLEEP: Duration = Duration::from_micros(500);

/// Runs until killed. Prints `bound` on stdout once the queue is bound.
pub fn run(args: &DelayArgs) -> Result<(), DelayError> {
    let queue_number = args.queue;
    let failed = |what: &'static str| {
        move |source| DelayError::Queue {
            queue: queue_number,
            what,
            source,
        }
    };
    let mut queue = nfq::Queue::open().map_err(failed("open"))?;
    queue.bind(queue_number).map_err(failed("bind"))?;
    queue
        .set_copy_range(queue_number, 0)
        .map_err(failed("copy range"))?;
    queue
        .set_queue_max_len(queue_number, QUEUE_LENGTH_MAX)
        .map_err(failed("queue length"))?;
    queue
        .set_fail_open(queue_number, true)
        .map_err(failed("fail open"))?;
    queue.set_nonblocking(true);
    println!("bound");
    use std::io::Write;
    let _ = std::io::stdout().flush();

    let mut random = Random::new(args.seed);
    let low = u64::from(args.delay_ms.saturating_sub(args.jitter_ms));
    let high = u64::from(args.delay_ms + args.jitter_ms);
    // (deadline, arrival order) → packet; the order breaks ties FIFO.
    let mut held: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut packets: std::collections::HashMap<u64, nfq::Message> =
        std::collections::HashMap::new();
    let mut arrivals = 0u64;
    loop {
        let mut received = false;
        match queue.recv() {
            Ok(mut message) => {
                received = true;
                message.set_verdict(nfq::Verdict::Accept);
                let hold = Duration::from_millis(random.between(low, high));
                held.push(Reverse((Instant::now() + hold, arrivals)));
                packets.insert(arrivals, message);
                arrivals += 1;
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => {}
            Err(error) => return Err(failed("receive")(error)),
        }
        let now = Instant::now();
        while let Some(Reverse((deadline, arrival))) = held.peek().copied() {
            if deadline > now {
                break;
            }
            held.pop();
            let message = packets.remove(&arrival).expect("held packet");
            queue.verdict(message).map_err(failed("verdict"))?;
        }
        if !received {
            let until_due = held.peek().map_or(IDLE_SLEEP, |Reverse((deadline, _))| {
                deadline.saturating_duration_since(now)
            });
            std::thread::sleep(until_due.min(IDLE_SLEEP));
        }
    }
}
