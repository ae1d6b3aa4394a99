//! What one seed draws before the run starts: the group's size, the nodes'
//! settings (flow-control caps, pre-vote, check-quorum) and the fault mix
//! (network weather, crash, corruption and partition rates, disk latency)
//! and the client workload. Varying these per seed covers more ground than
//! any single setting.

use std::fmt;

use crate::sim::network::NetworkFaults;
use crate::sim::random::Random;
use crate::sim::STEPS_PER_TICK;

#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Members 1..=nodes exist; 1..=initial_voters start as voters.
    pub nodes: u64,
    pub initial_voters: u64,
    pub election_ticks: u32,
    pub heartbeat_ticks: u32,
    pub max_append_entries: usize,
    pub max_append_bytes: usize,
    pub max_inflight: usize,
    /// Small chunks make every snapshot travel in many pieces.
    pub max_snapshot_chunk_bytes: usize,
    pub max_apply_entries: usize,
    pub pre_vote: bool,
    pub check_quorum: bool,
    pub network: NetworkFaults,
    pub crash_per_tick: f64,
    /// Crashes aimed at whoever leads (the moment that loses the most).
    pub leader_crash_per_tick: f64,
    /// Per tick, the chance a leader that has committed entries its own disk
    /// does not hold yet crashes right then (the window where a leader's
    /// unsynced writes are lost after others acted on its commit index).
    pub unsynced_leader_crash: f64,
    /// A crashed node restarts after this many ticks (inclusive range).
    pub restart_after_ticks: (u64, u64),
    pub corruption_on_restart: f64,
    /// Chance per tick that a node's whole store is wiped (log, hard state,
    /// snapshot): it comes back empty after a restart delay. Drawn from a
    /// stream of its own ([`Scenario::draw_wipes`]).
    pub wipe_per_tick: f64,
    pub partition_per_tick: f64,
    pub partition_ticks: (u64, u64),
    /// Fsync latency of member `id` (at `id - 1`): uniform in `[0, steps]`.
    /// Disks differ: a slow one behind a fast network is where a leader
    /// hears its followers before its own write is durable.
    pub persist_delay_steps: Vec<u64>,
    /// Chance an fsync stalls for up to four ticks more.
    pub persist_stall: f64,
    pub propose_per_tick: f64,
    /// The state machine snapshots once this many entries follow the last snapshot.
    pub compact_after_entries: u64,
    pub membership_per_tick: f64,
    pub transfer_per_tick: f64,
    pub read_per_tick: f64,
}

impl Scenario {
    pub fn draw(random: &mut Random) -> Scenario {
        let nodes = random.pick(&[3, 3, 4, 5, 5]).expect("choices");
        let initial_voters = if nodes == 3 || random.chance(0.5) {
            3
        } else {
            nodes
        };
        let membership_changes = nodes > 3;
        Scenario {
            nodes,
            initial_voters,
            election_ticks: 10,
            heartbeat_ticks: random.between(1, 3) as u32,
            max_append_entries: random.pick(&[1, 2, 4, 16, 256]).expect("choices"),
            max_append_bytes: random.pick(&[64, 512, 1 << 20]).expect("choices"),
            max_inflight: random.between(1, 8) as usize,
            max_apply_entries: random.pick(&[1, 4, 64, 4096]).expect("choices"),
            pre_vote: random.chance(0.8),
            check_quorum: random.chance(0.8),
            network: draw_network(random),
            crash_per_tick: random
                .pick(&[0.0, 0.002, 0.005, 0.01, 0.02])
                .expect("choices"),
            leader_crash_per_tick: random.pick(&[0.0, 0.005, 0.01, 0.02]).expect("choices"),
            unsynced_leader_crash: random.pick(&[0.0, 0.05, 0.2]).expect("choices"),
            restart_after_ticks: (1, random.between(5, 80)),
            corruption_on_restart: random.pick(&[0.0, 0.2, 0.5]).expect("choices"),
            wipe_per_tick: 0.0,
            partition_per_tick: random.pick(&[0.0, 0.005, 0.01, 0.03]).expect("choices"),
            partition_ticks: (5, random.between(20, 150)),
            persist_delay_steps: (0..nodes)
                .map(|_| random.pick(&PERSIST_DELAYS_STEPS).expect("choices"))
                .collect(),
            persist_stall: random.pick(&[0.0, 0.01, 0.05]).expect("choices"),
            propose_per_tick: random.pick(&[0.1, 0.3, 0.8]).expect("choices"),
            compact_after_entries: random.pick(&[5, 20, 100, 100_000]).expect("choices"),
            membership_per_tick: if membership_changes {
                random.pick(&[0.0, 0.005, 0.02]).expect("choices")
            } else {
                0.0
            },
            transfer_per_tick: random.pick(&[0.0, 0.005, 0.02]).expect("choices"),
            read_per_tick: random.pick(&[0.0, 0.02, 0.1]).expect("choices"),
            max_snapshot_chunk_bytes: random.pick(&[1, 16, 256, 1 << 20]).expect("choices"),
        }
    }

    /// Draws the wipe rate from `random`, a stream apart from the one
    /// [`Scenario::draw`] and the run use: a seed that draws no wipes runs
    /// exactly as it did before the wipe fault existed (so seeds recorded
    /// for earlier bugs still run what they found).
    pub fn draw_wipes(&mut self, random: &mut Random) {
        self.wipe_per_tick = random.pick(&WIPES_PER_TICK).expect("choices");
    }
}

const WIPES_PER_TICK: [f64; 4] = [0.0, 0.002, 0.005, 0.01];

const PERSIST_DELAYS_STEPS: [u64; 5] = [
    0,
    STEPS_PER_TICK / 2,
    STEPS_PER_TICK,
    3 * STEPS_PER_TICK,
    6 * STEPS_PER_TICK,
];

fn draw_network(random: &mut Random) -> NetworkFaults {
    NetworkFaults {
        loss: random.pick(&[0.0, 0.01, 0.05, 0.15, 0.3]).expect("choices"),
        duplicate: random.pick(&[0.0, 0.02, 0.1]).expect("choices"),
        min_delay_steps: 1,
        max_delay_steps: random.between(1, 3 * STEPS_PER_TICK),
        long_delay: random.pick(&[0.0, 0.01, 0.05]).expect("choices"),
        long_delay_steps: 10 * STEPS_PER_TICK,
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let network = &self.network;
        write!(
            formatter,
            "nodes={} voters={} heartbeat_ticks={} max_append_entries={} max_append_bytes={} \
             max_inflight={} max_apply_entries={} pre_vote={} check_quorum={} loss={} duplicate={} \
             delay_steps={}..={} long_delay={} crash_per_tick={} leader_crash_per_tick={} unsynced_leader_crash={} restart_after_ticks={:?} \
             corruption_on_restart={} wipe_per_tick={} partition_per_tick={} partition_ticks={:?} \
             persist_delay_steps={:?} persist_stall={} propose_per_tick={} compact_after_entries={} \
             membership_per_tick={} transfer_per_tick={} read_per_tick={} max_snapshot_chunk_bytes={}",
            self.nodes,
            self.initial_voters,
            self.heartbeat_ticks,
            self.max_append_entries,
            self.max_append_bytes,
            self.max_inflight,
            self.max_apply_entries,
            self.pre_vote,
            self.check_quorum,
            network.loss,
            network.duplicate,
            network.min_delay_steps,
            network.max_delay_steps,
            network.long_delay,
            self.crash_per_tick,
            self.leader_crash_per_tick,
            self.unsynced_leader_crash,
            self.restart_after_ticks,
            self.corruption_on_restart,
            self.wipe_per_tick,
            self.partition_per_tick,
            self.partition_ticks,
            self.persist_delay_steps,
            self.persist_stall,
            self.propose_per_tick,
            self.compact_after_entries,
            self.membership_per_tick,
            self.transfer_per_tick,
            self.read_per_tick,
            self.max_snapshot_chunk_bytes,
        )
    }
}
