//! Raft throughput with zero latency: every ready is "persisted" and every
//! message delivered the moment it exists, so what is measured is the
//! library's own CPU cost (no network, no disk).
//!
//! ```text
//! cargo run --release -p tern-raft --example throughput [-- --entries N --groups G --group-entries M]
//! ```
//!
//! - `bench=raft_one_group`: one 3-node group; the leader is given proposals
//!   in batches of 64; committed entries per second (wall clock, all three
//!   nodes in this one thread) and leader CPU per committed entry (time
//!   spent inside the leader's `Node` calls / entries it committed).
//! - `bench=raft_1000_groups`: 1000 groups of 3, all nodes played by this
//!   thread (the multi-Raft case: one process hosting many groups). Each
//!   round gives every group's leader one batch, then ticks every node once
//!   (heartbeats). Reports committed entries per second, CPU per entry over
//!   all nodes, and leader CPU per entry.
//!
//! Time is measured with `Instant::now()` around each `Node` call (a batch
//! of proposals counts as one call, `has_ready` + `ready` as one). The
//! timer's own cost per call is measured first; `*_net` figures subtract it
//! (calls counted), the raw ones include it.

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tern_raft::{Config, Envelope, Membership, Node, Ready, Restore, Role, Snapshot};

const BATCH_ENTRIES: usize = 64;
const PAYLOAD_BYTES: usize = 64;
/// Compact the log once this many entries are applied past the snapshot.
const COMPACT_EVERY_ENTRIES: u64 = 8192;

struct Options {
    entries: u64,
    groups: usize,
    group_entries: u64,
}

fn parse() -> Options {
    let mut options = Options {
        entries: 2_000_000,
        groups: 1000,
        group_entries: 2048,
    };
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    for pair in arguments.chunks(2) {
        let value = pair.get(1).and_then(|value| value.parse().ok());
        match (pair[0].as_str(), value) {
            ("--entries", Some(value)) => options.entries = value,
            ("--groups", Some(value)) => options.groups = value as usize,
            ("--group-entries", Some(value)) => options.group_entries = value,
            _ => {
                eprintln!("usage: throughput [--entries N] [--groups G] [--group-entries M]");
                std::process::exit(2);
            }
        }
    }
    options
}

/// One group of three, played in-process with zero latency.
struct Group {
    nodes: Vec<Node>,
    leader: usize,
    queue: VecDeque<Envelope>,
    /// Entries the leader handed out as committed.
    committed: u64,
    leader_time: Duration,
    total_time: Duration,
    leader_calls: u64,
    total_calls: u64,
}

impl Group {
    fn new(seed: u64) -> Group {
        let membership = Membership::new(vec![1, 2, 3]);
        let nodes = (1..=3)
            .map(|id| {
                let restore = Restore {
                    membership: membership.clone(),
                    seed: seed * 31 + id,
                    ..Restore::default()
                };
                Node::new(Config::new(id), restore)
            })
            .collect();
        let mut group = Group {
            nodes,
            leader: 0,
            queue: VecDeque::new(),
            committed: 0,
            leader_time: Duration::ZERO,
            total_time: Duration::ZERO,
            leader_calls: 0,
            total_calls: 0,
        };
        group.elect();
        group
    }

    fn elect(&mut self) {
        for _ in 0..1000 {
            self.tick();
            if let Some(leader) = self.nodes.iter().position(|n| n.role() == Role::Leader) {
                self.leader = leader;
                self.committed = 0;
                self.leader_time = Duration::ZERO;
                self.total_time = Duration::ZERO;
                self.leader_calls = 0;
                self.total_calls = 0;
                return;
            }
        }
        panic!("no leader");
    }

    /// Runs `work` on node `index`, charging its time.
    fn timed<T>(&mut self, index: usize, work: impl FnOnce(&mut Node) -> T) -> T {
        let started = Instant::now();
        let result = work(&mut self.nodes[index]);
        let spent = started.elapsed();
        self.total_time += spent;
        self.total_calls += 1;
        if index == self.leader {
            self.leader_time += spent;
            self.leader_calls += 1;
        }
        result
    }

    fn tick(&mut self) {
        for index in 0..self.nodes.len() {
            self.timed(index, Node::tick);
        }
        self.pump();
    }

    fn propose_batch(&mut self, payload: &Bytes) {
        let leader = self.leader;
        self.timed(leader, |node| {
            for _ in 0..BATCH_ENTRIES {
                node.propose(payload.clone()).expect("leader");
            }
        });
        self.pump();
    }

    /// Persists every ready and delivers every message until quiet.
    fn pump(&mut self) {
        loop {
            for index in 0..self.nodes.len() {
                while let Some(ready) =
                    self.timed(index, |node| node.has_ready().then(|| node.ready()))
                {
                    self.handle(index, ready);
                }
            }
            if self.queue.is_empty() {
                return;
            }
            while let Some(envelope) = self.queue.pop_front() {
                let index = (envelope.to - 1) as usize;
                self.timed(index, |node| node.step(envelope));
            }
        }
    }

    fn handle(&mut self, index: usize, ready: Ready) {
        let Ready {
            number,
            entries,
            messages,
            persisted_messages,
            committed,
            ..
        } = ready;
        // "Persist": the entries are only looked at.
        black_box(&entries);
        self.queue.extend(messages);
        self.queue.extend(persisted_messages);
        let last = committed.last().map(|entry| (entry.index, entry.term));
        if index == self.leader {
            self.committed += committed.len() as u64;
        }
        drop(committed);
        self.timed(index, |node| node.advance(number));
        if let Some((applied, term)) = last {
            self.maybe_compact(index, applied, term);
        }
    }

    fn maybe_compact(&mut self, index: usize, applied: u64, term: u64) {
        let node = &self.nodes[index];
        if applied < node.log().snapshot_index() + COMPACT_EVERY_ENTRIES {
            return;
        }
        let snapshot = Snapshot {
            index: applied,
            term,
            membership: node.membership().clone(),
        };
        self.timed(index, |node| node.compact(snapshot));
    }
}

fn timer_overhead_ns() -> f64 {
    let samples = 1_000_000u32;
    let started = Instant::now();
    let mut total = Duration::ZERO;
    for _ in 0..samples {
        let inner = Instant::now();
        total += black_box(inner.elapsed());
    }
    black_box(total);
    started.elapsed().as_nanos() as f64 / f64::from(samples)
}

/// Nanoseconds per committed entry: raw, and net of the timer's cost.
fn per_entry(time: Duration, calls: u64, entries: u64, overhead_ns: f64) -> (f64, f64) {
    let raw = time.as_nanos() as f64;
    let entries = entries as f64;
    (
        raw / entries,
        (raw - calls as f64 * overhead_ns).max(0.0) / entries,
    )
}

fn one_group(entries: u64, payload: &Bytes, overhead_ns: f64) {
    let mut group = Group::new(1);
    let started = Instant::now();
    while group.committed < entries {
        group.propose_batch(payload);
    }
    let wall = started.elapsed();
    let committed = group.committed;
    let leader = per_entry(
        group.leader_time,
        group.leader_calls,
        committed,
        overhead_ns,
    );
    let all = per_entry(group.total_time, group.total_calls, committed, overhead_ns);
    println!(
        "bench=raft_one_group nodes=3 batch_entries={BATCH_ENTRIES} payload_bytes={PAYLOAD_BYTES} \
         committed_entries={committed} elapsed_s={:.3} committed_entries_per_s={:.0} \
         leader_ns_per_entry={:.1} leader_ns_per_entry_net={:.1} \
         all_nodes_ns_per_entry={:.1} all_nodes_ns_per_entry_net={:.1}",
        wall.as_secs_f64(),
        committed as f64 / wall.as_secs_f64(),
        leader.0,
        leader.1,
        all.0,
        all.1,
    );
}

fn many_groups(count: usize, entries_per_group: u64, payload: &Bytes, overhead_ns: f64) {
    let mut groups: Vec<Group> = (0..count as u64).map(Group::new).collect();
    let started = Instant::now();
    let mut ticks = 0u64;
    while groups
        .iter()
        .any(|group| group.committed < entries_per_group)
    {
        for group in &mut groups {
            group.propose_batch(payload);
        }
        for group in &mut groups {
            group.tick();
        }
        ticks += 1;
    }
    let wall = started.elapsed();
    let committed: u64 = groups.iter().map(|group| group.committed).sum();
    let leader_time: Duration = groups.iter().map(|group| group.leader_time).sum();
    let total_time: Duration = groups.iter().map(|group| group.total_time).sum();
    let leader_calls: u64 = groups.iter().map(|group| group.leader_calls).sum();
    let total_calls: u64 = groups.iter().map(|group| group.total_calls).sum();
    let leaders_elsewhere = groups
        .iter()
        .filter(|group| group.nodes[group.leader].role() != Role::Leader)
        .count();
    assert_eq!(leaders_elsewhere, 0, "leadership moved during the run");
    let leader = per_entry(leader_time, leader_calls, committed, overhead_ns);
    let all = per_entry(total_time, total_calls, committed, overhead_ns);
    println!(
        "bench=raft_1000_groups groups={count} nodes_per_group=3 batch_entries={BATCH_ENTRIES} \
         payload_bytes={PAYLOAD_BYTES} rounds={ticks} committed_entries={committed} elapsed_s={:.3} \
         committed_entries_per_s={:.0} leader_ns_per_entry={:.1} leader_ns_per_entry_net={:.1} \
         all_nodes_ns_per_entry={:.1} all_nodes_ns_per_entry_net={:.1}",
        wall.as_secs_f64(),
        committed as f64 / wall.as_secs_f64(),
        leader.0,
        leader.1,
        all.0,
        all.1,
    );
}

fn main() {
    let options = parse();
    let payload = Bytes::from(vec![0xab; PAYLOAD_BYTES]);
    let overhead_ns = timer_overhead_ns();
    println!("timer_overhead_ns={overhead_ns:.1} (per timed call, subtracted in *_net)");
    one_group(options.entries, &payload, overhead_ns);
    many_groups(options.groups, options.group_entries, &payload, overhead_ns);
}
