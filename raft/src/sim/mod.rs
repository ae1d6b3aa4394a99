//! The deterministic, seeded simulator: N members of one group on a
//! simulated network and simulated disks, driven by one PRNG (no threads, no
//! clocks, ordered maps only), so a seed reproduces a run exactly.
//!
//! A run has two phases. The safety phase injects faults — message loss,
//! duplication, delay and reordering; symmetric, one-way and isolate-one
//! partitions; crashes that lose unsynced writes and in-flight messages;
//! entries found corrupt on restart — while clients propose, read, change
//! membership and transfer leadership, and the state machines compact. The
//! liveness phase heals everything and requires a leader, a new committed
//! proposal and every live voter applying the same prefix, without stalling
//! (`SimConfig::liveness_ticks` with nothing new durable or applied) and
//! within `SimConfig::liveness_cap_ticks`.
//!
//! A node's whole store may be wiped (log, hard state, snapshot): its host
//! comes back empty under a new id, and the leader replaces the old id with
//! the new one through membership changes (`join`), as tern's meta leader
//! does; `HostCanary::WipeKeepsIdentity` brings it back under the old id.
//!
//! Invariants are checked as the run goes, one checker per file (election
//! safety, one vote per term, log matching, leader completeness, state
//! machine safety, the client oracle, read-index safety), plus the write
//! contract at the disk.
//! A panic inside a node is caught and reported as a violation; every
//! violation carries the seed and the last events of the run.
//!
//! The persistence model follows the `Ready` contract: a ready's messages go
//! out at once, its writes become durable after a seeded delay (in order),
//! and only then are its `persisted_messages` sent and `advance` called.

pub mod client_oracle;
pub mod disk;
pub mod election_safety;
pub mod join;
pub mod leader_completeness;
pub mod log_matching;
pub mod network;
pub mod random;
pub mod read_index;
pub mod single_vote;
pub mod state_machine;
pub mod state_machine_safety;
pub mod trace;

mod scenario;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};

use crate::message::Envelope;
use bytes::Bytes;

use crate::node::{Canary, Config, Node, Ready, Role, SnapshotChunk, SnapshotRead};
use crate::types::{Entry, EntryKind, Index, Membership, NodeId, Term};

use client_oracle::{ClientOracle, Proposal};
use disk::{Disk, StoredSnapshot, Write};
use election_safety::ElectionSafety;
use join::{JoinRule, JoinView};
use leader_completeness::LeaderCompleteness;
use log_matching::LogMatching;
use network::{Fate, Network, NetworkFaults};
use random::Random;
use read_index::ReadIndexSafety;
use single_vote::SingleVote;
use state_machine::{proposal_payload, StateMachine};
use state_machine_safety::StateMachineSafety;
use trace::{MessageSummary, Trace, TraceEvent};

pub use scenario::Scenario;

/// A snapshot a follower's host is receiving.
#[derive(Debug)]
struct Staging {
    index: Index,
    session: u64,
    data: Vec<u8>,
}

/// Simulated time advances in steps; a node ticks once per this many.
pub const STEPS_PER_TICK: u64 = 8;

/// How often (in ticks) the live logs are compared pairwise.
const LOG_CHECK_TICKS: u64 = 10;

/// Clients hold back while a leader has this many entries uncommitted
/// (backpressure: otherwise a slow pipeline falls behind without bound).
const MAX_UNCOMMITTED_ENTRIES: u64 = 128;

#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Ticks of the safety phase (faults on).
    pub safety_ticks: u64,
    /// The liveness phase fails when nothing new is made durable or applied
    /// anywhere for this many ticks before the group has elected, committed
    /// and converged (a slow follower catching up is progress; a stall is
    /// not)...
    pub liveness_ticks: u64,
    /// ...or when it takes more than this many ticks in all.
    pub liveness_cap_ticks: u64,
    /// A known bug to switch on in every node (proves the checkers can fail).
    pub canary: Option<Canary>,
    /// A known bug of the host around the nodes (the simulator's part).
    pub host_canary: Option<HostCanary>,
    /// Whether a seed may draw store wipes. Off, every seed runs exactly as
    /// it did before the wipe fault existed (the seeds recorded for earlier
    /// bugs replay what they found).
    pub wipes: bool,
    /// How the leader brings a wiped host's new id into the group
    /// ([`join::join_step`] unless a host passes its production rule).
    pub join_rule: JoinRule,
    /// Events kept for the trace of a violation.
    pub trace_events: usize,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            safety_ticks: 2000,
            liveness_ticks: 1000,
            liveness_cap_ticks: 30_000,
            canary: None,
            host_canary: None,
            wipes: true,
            join_rule: join::join_step,
            trace_events: 400,
        }
    }
}

/// Known bugs of a host the simulator must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostCanary {
    /// A wiped store comes back under the id it had, with an empty hard
    /// state, as tern did before node identities: it may vote a second
    /// time in a term it voted in before the wipe.
    WipeKeepsIdentity,
    /// A wiped store comes back under a new id, but starts with a
    /// configuration it forms itself (the ids every host runs under now,
    /// its own among them) instead of waiting for the leader to add it: it
    /// campaigns, and with one other member whose log is empty too it is
    /// elected without the entries committed with its old copy. (What
    /// tern's `start_meta` did for a store without meta state until it
    /// learned, from its peers' Hellos, to join a group that exists.)
    WipeFormsConfiguration,
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub ticks: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub crashes: u64,
    pub corruptions: u64,
    /// Whole stores lost (each host comes back empty).
    pub wipes: u64,
    pub partitions: u64,
    pub elections: u64,
    pub highest_commit: Index,
    pub proposals: u64,
    pub acknowledged: u64,
    pub compactions: u64,
    pub snapshots_installed: u64,
    /// Snapshot bytes followers' hosts staged (chunks handed over in order).
    pub snapshot_bytes_staged: u64,
    pub membership_changes: u64,
    pub transfers: u64,
    pub reads: u64,
    /// Ticks the liveness phase needed.
    pub liveness_ticks: u64,
}

impl Stats {
    /// Adds another run's counts (highest commit: the larger).
    pub fn add(&mut self, other: &Stats) {
        self.ticks += other.ticks;
        self.delivered += other.delivered;
        self.dropped += other.dropped;
        self.duplicated += other.duplicated;
        self.crashes += other.crashes;
        self.corruptions += other.corruptions;
        self.wipes += other.wipes;
        self.partitions += other.partitions;
        self.elections += other.elections;
        self.highest_commit = self.highest_commit.max(other.highest_commit);
        self.proposals += other.proposals;
        self.acknowledged += other.acknowledged;
        self.compactions += other.compactions;
        self.snapshots_installed += other.snapshots_installed;
        self.snapshot_bytes_staged += other.snapshot_bytes_staged;
        self.membership_changes += other.membership_changes;
        self.transfers += other.transfers;
        self.reads += other.reads;
        self.liveness_ticks += other.liveness_ticks;
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "ticks={} delivered={} dropped={} duplicated={} crashes={} corruptions={} wipes={} \
             partitions={} elections={} proposals={} acknowledged={} compactions={} \
             snapshots_installed={} snapshot_bytes_staged={} membership_changes={} transfers={} reads={} liveness_ticks={}",
            self.ticks,
            self.delivered,
            self.dropped,
            self.duplicated,
            self.crashes,
            self.corruptions,
            self.wipes,
            self.partitions,
            self.elections,
            self.proposals,
            self.acknowledged,
            self.compactions,
            self.snapshots_installed,
            self.snapshot_bytes_staged,
            self.membership_changes,
            self.transfers,
            self.reads,
            self.liveness_ticks,
        )
    }
}

/// An invariant that did not hold, with what is needed to reproduce it.
#[derive(Debug, Clone)]
pub struct Violation {
    pub seed: u64,
    pub invariant: &'static str,
    pub detail: String,
    pub tick: u64,
    pub scenario: String,
    /// The last events before the violation, oldest first.
    pub trace: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            formatter,
            "seed={} invariant=\"{}\" tick={}",
            self.seed, self.invariant, self.tick
        )?;
        writeln!(formatter, "  {}", self.detail)?;
        writeln!(formatter, "  scenario: {}", self.scenario)?;
        writeln!(formatter, "  trace (last {} events):", self.trace.len())?;
        for line in &self.trace {
            writeln!(formatter, "    {line}")?;
        }
        Ok(())
    }
}

/// Runs one seed.
pub fn run(seed: u64, config: &SimConfig) -> Result<Stats, Violation> {
    Simulation::new(seed, config.clone()).run()
}

const ELECTION_SAFETY: &str = "election safety";
const SINGLE_VOTE: &str = "one vote per term";
const LOG_MATCHING: &str = "log matching";
const LEADER_COMPLETENESS: &str = "leader completeness";
const STATE_MACHINE_SAFETY: &str = "state machine safety";
const CLIENT_ORACLE: &str = "client oracle";
const READ_INDEX: &str = "read index";
const DURABILITY: &str = "durability contract";
const LIVENESS: &str = "liveness";
const NODE_PANIC: &str = "node panic";
const MESSAGE_STORM: &str = "message storm";

/// Seeds the wipe stream apart from the run's (any constant would do).
const WIPE_STREAM: u64 = 0x7769_7065_0000_0047;

/// Messages in flight at once that mean the nodes multiply traffic (a
/// healthy run of 5 nodes stays in the hundreds).
const IN_FLIGHT_MAX: usize = 200_000;

/// An invariant failed, before the trace is attached.
#[derive(Debug)]
struct Failure {
    invariant: &'static str,
    detail: String,
}

fn check<T>(result: Result<T, String>, invariant: &'static str) -> Result<T, Failure> {
    result.map_err(|detail| Failure { invariant, detail })
}

pub struct Simulation {
    seed: u64,
    config: SimConfig,
    scenario: Scenario,
    random: Random,
    /// Wipe decisions, apart from `random` (see `Scenario::draw_wipes`).
    wipe_random: Random,
    /// Simulated time, in steps.
    now: u64,
    tick: u64,
    /// Member `id` is at position `id - 1`; `None` while crashed, and for
    /// good once its store was wiped (its host runs under a new id, at the
    /// end). Every per-node vector below is indexed the same way.
    nodes: Vec<Option<Node>>,
    /// The host (a machine, named `n1`, `n2`, ...) each id ran on.
    hosts: Vec<usize>,
    /// The id each host runs under now.
    members: Vec<NodeId>,
    /// Every id's host name, as the group's leader knows them.
    names: BTreeMap<NodeId, String>,
    /// Ids whose store was wiped: never seen again.
    retired: BTreeSet<NodeId>,
    /// A wiped host not yet back in the group (at most one at a time).
    joining: Option<NodeId>,
    disks: Vec<Disk>,
    machines: Vec<StateMachine>,
    /// Each node's latest snapshot (taken or installed), which its reads
    /// are answered from while it leads.
    snapshots: Vec<Option<StoredSnapshot>>,
    /// What each node received of a snapshot so far (written at each
    /// chunk's offset, as a sparse file would be).
    staging: Vec<Option<Staging>>,
    restart_at: Vec<Option<u64>>,
    observed: Vec<(Role, Term)>,
    initial_membership: Membership,
    network: Network,
    partition_until: Option<u64>,
    /// The liveness phase: no more faults.
    healed: bool,
    next_read_context: u64,
    trace: Trace,
    stats: Stats,
    election_safety: ElectionSafety,
    single_vote: SingleVote,
    log_matching: LogMatching,
    leader_completeness: LeaderCompleteness,
    state_machine_safety: StateMachineSafety,
    client_oracle: ClientOracle,
    read_index: ReadIndexSafety,
}

impl Simulation {
    pub fn new(seed: u64, config: SimConfig) -> Simulation {
        let mut random = Random::new(seed);
        let mut scenario = Scenario::draw(&mut random);
        let mut wipe_random = Random::new(random::mix(seed ^ WIPE_STREAM));
        if config.wipes {
            scenario.draw_wipes(&mut wipe_random);
        }
        let members = scenario.nodes as usize;
        let initial_membership = Membership::new((1..=scenario.initial_voters).collect());
        let mut simulation = Simulation {
            seed,
            network: Network::new(scenario.network),
            trace: Trace::new(config.trace_events),
            config,
            random,
            wipe_random,
            now: 0,
            tick: 0,
            nodes: (0..members).map(|_| None).collect(),
            hosts: (0..members).collect(),
            members: (1..=members as NodeId).collect(),
            names: (1..=members as NodeId)
                .map(|id| (id, host_name(slot(id))))
                .collect(),
            retired: BTreeSet::new(),
            joining: None,
            disks: (0..members).map(|_| Disk::new()).collect(),
            machines: vec![StateMachine::new(initial_membership.clone()); members],
            snapshots: vec![None; members],
            staging: (0..members).map(|_| None).collect(),
            restart_at: vec![None; members],
            observed: vec![(Role::Follower, 0); members],
            initial_membership,
            partition_until: None,
            healed: false,
            next_read_context: 1,
            stats: Stats::default(),
            election_safety: ElectionSafety::new(),
            single_vote: SingleVote::new(),
            log_matching: LogMatching::new(),
            leader_completeness: LeaderCompleteness::new(),
            state_machine_safety: StateMachineSafety::new(),
            client_oracle: ClientOracle::new(),
            read_index: ReadIndexSafety::new(),
            scenario,
        };
        for id in 1..=members as NodeId {
            let seed = simulation.random.next_u64();
            let restore = simulation.disks[slot(id)].restore(&simulation.initial_membership, seed);
            simulation.nodes[slot(id)] = Some(Node::new(simulation.node_config(id), restore));
        }
        simulation
    }

    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// Runs both phases; a node panic becomes a violation.
    pub fn run(mut self) -> Result<Stats, Violation> {
        match self.guarded(Simulation::run_phases) {
            Ok(()) => Ok(self.stats),
            Err(failure) => Err(Violation {
                seed: self.seed,
                invariant: failure.invariant,
                detail: failure.detail,
                tick: self.tick,
                scenario: self.scenario.to_string(),
                trace: self.trace.lines(),
            }),
        }
    }

    /// Runs `body`, turning a panic (a node's assertion) into a failure.
    fn guarded(
        &mut self,
        body: impl FnOnce(&mut Simulation) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        match panic::catch_unwind(AssertUnwindSafe(|| body(self))) {
            Ok(result) => result,
            Err(payload) => Err(Failure {
                invariant: NODE_PANIC,
                detail: panic_message(payload.as_ref()),
            }),
        }
    }

    fn run_phases(&mut self) -> Result<(), Failure> {
        self.record(TraceEvent::Phase("safety"));
        for _ in 0..self.config.safety_ticks {
            self.nemesis()?;
            self.client()?;
            self.run_tick()?;
        }
        self.heal()?;
        self.liveness()?;
        self.finish();
        Ok(())
    }

    fn finish(&mut self) {
        self.stats.elections = self.election_safety.elections() as u64;
        self.stats.highest_commit = self.leader_completeness.highest_committed();
        self.stats.proposals = self.client_oracle.proposals() as u64;
        self.stats.acknowledged = self.client_oracle.acknowledged() as u64;
        self.stats.reads = self.read_index.answered();
    }

    fn node_config(&self, id: NodeId) -> Config {
        let scenario = &self.scenario;
        Config {
            id,
            election_ticks: scenario.election_ticks,
            heartbeat_ticks: scenario.heartbeat_ticks,
            max_append_entries: scenario.max_append_entries,
            max_append_bytes: scenario.max_append_bytes,
            max_inflight: scenario.max_inflight,
            max_snapshot_chunk_bytes: scenario.max_snapshot_chunk_bytes,
            max_apply_entries: scenario.max_apply_entries,
            pre_vote: scenario.pre_vote,
            check_quorum: scenario.check_quorum,
            canary: self.config.canary,
        }
    }

    fn record(&mut self, event: TraceEvent) {
        self.trace.record(self.tick, event);
    }

    /// The ids the hosts run under now.
    fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members.iter().copied()
    }

    fn live_ids(&self) -> Vec<NodeId> {
        self.ids()
            .filter(|id| self.nodes[slot(*id)].is_some())
            .collect()
    }

    fn leaders(&self) -> Vec<NodeId> {
        self.ids()
            .filter(|id| {
                self.nodes[slot(*id)]
                    .as_ref()
                    .is_some_and(|node| node.role() == Role::Leader)
            })
            .collect()
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.nodes[slot(id)].as_mut().expect("node is live")
    }

    // ----- time -----------------------------------------------------------------

    /// One tick: every live node ticks, then messages and fsyncs due before
    /// the next tick are processed in time order.
    fn run_tick(&mut self) -> Result<(), Failure> {
        self.tick += 1;
        self.stats.ticks += 1;
        self.record(TraceEvent::Tick);
        self.rejoin()?;
        let mut order = self.live_ids();
        self.random.shuffle(&mut order);
        for id in order {
            self.node_mut(id).tick();
            self.after(id)?;
        }
        let end = self.now + STEPS_PER_TICK;
        while let Some(due) = self.next_event().filter(|due| *due < end) {
            self.now = self.now.max(due);
            while let Some(envelope) = self.network.pop_due(self.now) {
                self.deliver(envelope)?;
            }
            if self.network.in_flight() > IN_FLIGHT_MAX {
                return Err(Failure {
                    invariant: MESSAGE_STORM,
                    detail: format!(
                        "{} messages in flight: the nodes multiply traffic",
                        self.network.in_flight()
                    ),
                });
            }
            for id in self.live_ids() {
                self.complete_writes(id)?;
            }
        }
        self.now = end;
        if self.tick % LOG_CHECK_TICKS == 0 {
            self.check_logs()?;
        }
        Ok(())
    }

    fn next_event(&self) -> Option<u64> {
        let disks = self.disks.iter().filter_map(Disk::next_due);
        disks.chain(self.network.next_due()).min()
    }

    fn check_logs(&self) -> Result<(), Failure> {
        let logs: Vec<(NodeId, &crate::log::RaftLog)> = self
            .ids()
            .filter_map(|id| Some((id, self.nodes[slot(id)].as_ref()?.log())))
            .collect();
        check(LogMatching::check_logs(&logs), LOG_MATCHING)
    }

    // ----- messages and persistence -----------------------------------------------

    fn send(&mut self, envelope: Envelope) {
        let (from, to) = (envelope.from, envelope.to);
        let summary = MessageSummary::of(&envelope.message);
        match self.network.send(self.now, envelope, &mut self.random) {
            Fate::Lost => {
                self.stats.dropped += 1;
                self.record(TraceEvent::Drop {
                    from,
                    to,
                    message: summary,
                    reason: "lost",
                });
            }
            Fate::Sent { copies } => self.stats.duplicated += u64::from(copies - 1),
        }
    }

    fn deliver(&mut self, envelope: Envelope) -> Result<(), Failure> {
        let (from, to) = (envelope.from, envelope.to);
        let message = MessageSummary::of(&envelope.message);
        let reason = if self.network.is_blocked(from, to) {
            Some("partition")
        } else if self.nodes[slot(to)].is_none() {
            Some("crashed")
        } else {
            None
        };
        if let Some(reason) = reason {
            self.stats.dropped += 1;
            self.record(TraceEvent::Drop {
                from,
                to,
                message,
                reason,
            });
            return Ok(());
        }
        self.stats.delivered += 1;
        self.record(TraceEvent::Deliver { from, to, message });
        self.node_mut(to).step(envelope);
        self.after(to)
    }

    fn complete_writes(&mut self, id: NodeId) -> Result<(), Failure> {
        let disk = &mut self.disks[slot(id)];
        let Some(completed) = check(disk.complete_due(self.now), DURABILITY)? else {
            return Ok(());
        };
        let durable_last = disk.durable_last();
        self.check_votes(id)?;
        self.record(TraceEvent::Persisted {
            node: id,
            ready: completed.number,
            durable_last,
        });
        for envelope in completed.messages {
            self.send(envelope);
        }
        self.node_mut(id).advance(completed.number);
        self.after(id)
    }

    /// Feeds the votes `id`'s disk made durable to the one-vote checker.
    fn check_votes(&mut self, id: NodeId) -> Result<(), Failure> {
        for (term, candidate) in self.disks[slot(id)].take_durable_votes() {
            check(self.single_vote.on_vote(id, term, candidate), SINGLE_VOTE)?;
        }
        Ok(())
    }

    fn persist_delay(&mut self, id: NodeId) -> u64 {
        let mut delay = self
            .random
            .between(0, self.scenario.persist_delay_steps[self.hosts[slot(id)]]);
        if !self.healed && self.random.chance(self.scenario.persist_stall) {
            delay += self.random.between(1, 4 * STEPS_PER_TICK);
        }
        delay
    }

    /// After any input to `id`: check what changed, then drain its readys.
    fn after(&mut self, id: NodeId) -> Result<(), Failure> {
        loop {
            self.observe(id)?;
            let node = self.node_mut(id);
            if !node.has_ready() {
                break;
            }
            let ready = node.ready();
            self.handle_ready(id, ready)?;
        }
        self.maybe_compact(id)
    }

    fn observe(&mut self, id: NodeId) -> Result<(), Failure> {
        let node = self.nodes[slot(id)].as_ref().expect("node is live");
        let (role, term) = (node.role(), node.term());
        if self.observed[slot(id)] != (role, term) {
            self.observed[slot(id)] = (role, term);
            if role == Role::Leader {
                check(self.election_safety.on_leader(id, term), ELECTION_SAFETY)?;
                let completeness = self.leader_completeness.on_leader(id, term, node.log());
                check(completeness, LEADER_COMPLETENESS)?;
            }
            self.record(TraceEvent::Role {
                node: id,
                role,
                term,
            });
        }
        let node = self.nodes[slot(id)].as_ref().expect("node is live");
        let commit = node.commit_index();
        let moved = self
            .leader_completeness
            .on_commit(id, node.term(), node.log(), commit);
        if check(moved, LEADER_COMPLETENESS)? {
            self.record(TraceEvent::Commit {
                node: id,
                index: commit,
            });
        }
        Ok(())
    }

    fn handle_ready(&mut self, id: NodeId, ready: Ready) -> Result<(), Failure> {
        let chunks_before_install = ready.chunks_before_install();
        let Ready {
            number,
            hard_state,
            truncate_from,
            entries,
            snapshot,
            snapshot_chunks,
            snapshot_reads,
            messages,
            persisted_messages,
            committed,
            read_states,
        } = ready;
        let log = self.nodes[slot(id)].as_ref().expect("node is live").log();
        check(self.log_matching.on_append(id, &entries, log), LOG_MATCHING)?;
        for envelope in messages {
            self.send(envelope);
        }
        let mut snapshot_chunks = snapshot_chunks.into_iter();
        for chunk in snapshot_chunks.by_ref().take(chunks_before_install) {
            self.stage(id, chunk);
        }
        for read in snapshot_reads {
            self.answer_read(id, read);
        }
        let snapshot = match snapshot {
            Some(meta) => {
                let staged = self.staging[slot(id)].take();
                let data = match staged {
                    Some(staged) if staged.index == meta.index => Bytes::from(staged.data),
                    _ => Bytes::new(),
                };
                let stored = StoredSnapshot { meta, data };
                self.install(id, &stored)?;
                Some(stored)
            }
            None => None,
        };
        // A later transfer begun in the same ready.
        for chunk in snapshot_chunks {
            self.stage(id, chunk);
        }
        for entry in &committed {
            self.apply(id, entry)?;
        }
        for read in read_states {
            self.record(TraceEvent::ReadState {
                node: id,
                context: read.context,
                index: read.index,
            });
            check(self.read_index.on_read_state(id, read), READ_INDEX)?;
        }
        let nothing_to_persist = hard_state.is_none()
            && truncate_from.is_none()
            && entries.is_empty()
            && snapshot.is_none()
            && persisted_messages.is_empty();
        if nothing_to_persist && self.disks[slot(id)].pending() == 0 {
            self.node_mut(id).advance(number);
            return Ok(());
        }
        let due = self.now + self.persist_delay(id);
        self.disks[slot(id)].submit(Write {
            number,
            due,
            hard_state,
            snapshot,
            truncate_from,
            entries,
            persisted_messages,
        });
        Ok(())
    }

    // ----- the state machine ------------------------------------------------------

    /// A follower's host writes a received chunk where it stages the
    /// snapshot (offset 0 starts over).
    fn stage(&mut self, id: NodeId, chunk: SnapshotChunk) {
        let staging = &mut self.staging[slot(id)];
        if chunk.offset == 0 {
            *staging = Some(Staging {
                index: chunk.index,
                session: chunk.session,
                data: Vec::new(),
            });
        }
        let Some(staged) = staging
            .as_mut()
            .filter(|staged| staged.index == chunk.index && staged.session == chunk.session)
        else {
            return;
        };
        let offset = chunk.offset as usize;
        staged.data.resize(staged.data.len().max(offset), 0);
        staged.data.truncate(offset);
        staged.data.extend_from_slice(&chunk.data);
        self.stats.snapshot_bytes_staged += chunk.data.len() as u64;
    }

    /// A leader's host answers a read of its snapshot's bytes.
    fn answer_read(&mut self, id: NodeId, read: SnapshotRead) {
        let Some(stored) = self.snapshots[slot(id)]
            .as_ref()
            .filter(|stored| stored.meta.index == read.index)
        else {
            // A snapshot since replaced: the node no longer wants it.
            return;
        };
        let total = stored.data.len() as u64;
        let start = read.offset.min(total) as usize;
        let end = (read.offset + read.max_bytes as u64).min(total) as usize;
        let data = stored.data.slice(start..end);
        let last = end as u64 == total;
        self.node_mut(id).snapshot_chunk(&read, data, last);
    }

    fn install(&mut self, id: NodeId, snapshot: &StoredSnapshot) -> Result<(), Failure> {
        let machine = check(StateMachine::from_snapshot(snapshot), STATE_MACHINE_SAFETY)?;
        let installed =
            self.state_machine_safety
                .on_install(id, snapshot.meta.index, snapshot.meta.term);
        check(installed, STATE_MACHINE_SAFETY)?;
        check(self.client_oracle.on_install(id, &machine), CLIENT_ORACLE)?;
        self.machines[slot(id)] = machine;
        self.snapshots[slot(id)] = Some(snapshot.clone());
        self.stats.snapshots_installed += 1;
        self.record(TraceEvent::InstallSnapshot {
            node: id,
            index: snapshot.meta.index,
        });
        Ok(())
    }

    fn apply(&mut self, id: NodeId, entry: &Entry) -> Result<(), Failure> {
        let machine = &mut self.machines[slot(id)];
        let applied = self
            .state_machine_safety
            .on_apply(id, machine.applied_index, entry);
        check(applied, STATE_MACHINE_SAFETY)?;
        let Some(proposal) = check(machine.apply(entry), CLIENT_ORACLE)? else {
            return Ok(());
        };
        let acknowledged = self.client_oracle.on_apply(id, entry.index, proposal);
        if check(acknowledged, CLIENT_ORACLE)? {
            self.record(TraceEvent::Acknowledged {
                node: id,
                id: proposal.id,
                index: entry.index,
            });
        }
        Ok(())
    }

    /// Now and then the state machine saves a snapshot and the log before
    /// it is dropped (in the node and on its disk).
    fn maybe_compact(&mut self, id: NodeId) -> Result<(), Failure> {
        let machine = &self.machines[slot(id)];
        let node = self.nodes[slot(id)].as_ref().expect("node is live");
        let behind = machine.applied_index - node.log().snapshot_index().min(machine.applied_index);
        if behind < self.scenario.compact_after_entries || !self.random.chance(0.3) {
            return Ok(());
        }
        let snapshot = self.machines[slot(id)].snapshot();
        let index = snapshot.meta.index;
        self.snapshots[slot(id)] = Some(snapshot.clone());
        self.node_mut(id).compact(snapshot.meta.clone());
        check(self.disks[slot(id)].compact(&snapshot), DURABILITY)?;
        self.stats.compactions += 1;
        self.record(TraceEvent::Compact { node: id, index });
        Ok(())
    }

    // ----- faults -----------------------------------------------------------------

    fn nemesis(&mut self) -> Result<(), Failure> {
        self.restart_due()?;
        for id in self.live_ids() {
            if self.random.chance(self.scenario.crash_per_tick) {
                self.crash(id)?;
            }
        }
        if self.random.chance(self.scenario.leader_crash_per_tick) {
            if let Some(leader) = self.random.pick(&self.leaders()) {
                self.crash(leader)?;
            }
        }
        if self.wipe_random.chance(self.scenario.wipe_per_tick) && self.may_wipe() {
            if let Some(victim) = self.wipe_random.pick(&self.live_ids()) {
                self.wipe(victim);
            }
        }
        for leader in self.leaders() {
            let commit = self.node_mut(leader).commit_index();
            let ahead_of_disk = commit > self.disks[slot(leader)].durable_last();
            if ahead_of_disk && self.random.chance(self.scenario.unsynced_leader_crash) {
                self.crash(leader)?;
            }
        }
        self.change_partitions();
        Ok(())
    }

    fn crash(&mut self, id: NodeId) -> Result<(), Failure> {
        self.nodes[slot(id)] = None;
        self.network.drop_node(id);
        let disk = &mut self.disks[slot(id)];
        let lost_writes = check(disk.crash(&mut self.random), DURABILITY)?;
        let durable_last = disk.durable_last();
        self.check_votes(id)?;
        let (low, high) = self.scenario.restart_after_ticks;
        self.restart_at[slot(id)] = Some(self.tick + self.random.between(low, high));
        self.stats.crashes += 1;
        self.record(TraceEvent::Crash {
            node: id,
            lost_writes,
            durable_last,
        });
        Ok(())
    }

    fn restart_due(&mut self) -> Result<(), Failure> {
        for id in self.ids().collect::<Vec<_>>() {
            if self.restart_at[slot(id)].is_some_and(|at| at <= self.tick) {
                self.restart(id)?;
            }
        }
        Ok(())
    }

    /// Brings `id` back from its durable state, maybe finding an entry corrupt
    /// (only while no other member is damaged).
    fn restart(&mut self, id: NodeId) -> Result<(), Failure> {
        let others_damaged = self.joining.is_some_and(|joiner| joiner != id)
            || self
                .ids()
                .any(|other| other != id && self.disks[slot(other)].is_damaged());
        let corrupt = !self.healed
            && !others_damaged
            && self.random.chance(self.scenario.corruption_on_restart);
        let disk = &mut self.disks[slot(id)];
        // Half the corruptions cut the log at a damaged entry (how far the
        // node acknowledged is known); half lose every entry after the
        // snapshot, the hard state surviving (a journal lost).
        let (corrupt_from, lost_entries) = match corrupt {
            true if self.random.chance(0.5) => (None, disk.lose_entries()),
            true => (disk.corrupt(&mut self.random), None),
            false => (None, None),
        };
        let seed = self.random.next_u64();
        let formed = self.config.host_canary == Some(HostCanary::WipeFormsConfiguration)
            && slot(id) >= self.scenario.nodes as usize;
        let restore = if formed {
            disk.restore(&Membership::new(self.members.clone()), seed)
        } else {
            disk.restore(&self.initial_membership, seed)
        };
        let acknowledged = restore.acknowledged_index;
        let durable_last = disk.durable_last();
        let machine = match disk.snapshot() {
            Some(snapshot) => check(StateMachine::from_snapshot(snapshot), STATE_MACHINE_SAFETY)?,
            None => StateMachine::new(self.initial_membership.clone()),
        };
        self.snapshots[slot(id)] = disk.snapshot().cloned();
        self.staging[slot(id)] = None;
        check(self.client_oracle.on_install(id, &machine), CLIENT_ORACLE)?;
        let node = Node::new(self.node_config(id), restore);
        self.leader_completeness.on_restart(id, node.commit_index());
        self.observed[slot(id)] = (node.role(), node.term());
        self.nodes[slot(id)] = Some(node);
        self.machines[slot(id)] = machine;
        self.restart_at[slot(id)] = None;
        self.stats.corruptions += u64::from(corrupt_from.is_some() || lost_entries.is_some());
        self.record(TraceEvent::Restart {
            node: id,
            durable_last,
            acknowledged,
            corrupt_from,
            lost_entries,
        });
        self.after(id)
    }

    /// One wipe at a time, and none while a disk is damaged: each loses
    /// data, and a group survives losing one copy at a time. (A wiped host
    /// counts as damaged until it is back in the group.)
    fn may_wipe(&self) -> bool {
        self.joining.is_none() && !self.ids().any(|id| self.disks[slot(id)].is_damaged())
    }

    /// Loses `id`'s whole store (log, hard state, snapshot, what was in
    /// flight to it). Its host comes back empty after a restart delay under
    /// a new id, which joins through the leader (`rejoin`), or, with
    /// `HostCanary::WipeKeepsIdentity`, under `id` itself.
    fn wipe(&mut self, id: NodeId) {
        let host = self.hosts[slot(id)];
        self.nodes[slot(id)] = None;
        self.network.drop_node(id);
        self.disks[slot(id)] = Disk::new();
        self.snapshots[slot(id)] = None;
        self.staging[slot(id)] = None;
        let comes_back_as = match self.config.host_canary {
            Some(HostCanary::WipeKeepsIdentity) => id,
            None | Some(HostCanary::WipeFormsConfiguration) => {
                let new = self.nodes.len() as NodeId + 1;
                self.retired.insert(id);
                self.names.insert(new, host_name(host));
                self.nodes.push(None);
                self.hosts.push(host);
                self.disks.push(Disk::new());
                self.machines
                    .push(StateMachine::new(self.initial_membership.clone()));
                self.snapshots.push(None);
                self.staging.push(None);
                self.restart_at.push(None);
                self.observed.push((Role::Follower, 0));
                self.members[host] = new;
                new
            }
        };
        let (low, high) = self.scenario.restart_after_ticks;
        self.restart_at[slot(comes_back_as)] =
            Some(self.tick + self.wipe_random.between(low, high));
        self.joining = Some(comes_back_as);
        self.stats.wipes += 1;
        self.record(TraceEvent::Wipe {
            node: id,
            comes_back_as,
        });
    }

    /// The leader's part in a wiped host's return, as tern's meta leader
    /// answers a join request: from its applied state, once it applied an
    /// entry of its own term, the next change by `SimConfig::join_rule`
    /// (one at a time: a second waits until the first commits). The host
    /// asks only once it is up.
    fn rejoin(&mut self) -> Result<(), Failure> {
        let Some(joiner) = self.joining else {
            return Ok(());
        };
        if self.nodes[slot(joiner)].is_none() {
            return Ok(());
        }
        let Some(leader) = self.current_leader() else {
            return Ok(());
        };
        let node = self.nodes[slot(leader)].as_ref().expect("node is live");
        let machine = &self.machines[slot(leader)];
        if machine.applied_term != node.term() {
            return Ok(());
        }
        let view = JoinView {
            voters: &machine.membership.voters,
            names: &self.names,
            removed: &self.retired,
            joiner,
            name: &self.names[&joiner],
        };
        let Some(change) = (self.config.join_rule)(&view) else {
            self.joining = None;
            self.record(TraceEvent::Joined { node: joiner });
            return Ok(());
        };
        if self
            .node_mut(leader)
            .propose_membership(change.clone())
            .is_ok()
        {
            self.stats.membership_changes += 1;
            self.record(TraceEvent::Membership {
                node: leader,
                change: format!("{change:?} (join)"),
            });
        }
        self.after(leader)
    }

    fn change_partitions(&mut self) {
        if let Some(until) = self.partition_until {
            if self.tick >= until {
                self.network.heal();
                self.partition_until = None;
                self.record(TraceEvent::Network("healed".to_string()));
            }
            return;
        }
        if !self.random.chance(self.scenario.partition_per_tick) {
            return;
        }
        let description = self.partition();
        let (low, high) = self.scenario.partition_ticks;
        self.partition_until = Some(self.tick + self.random.between(low, high));
        self.stats.partitions += 1;
        self.record(TraceEvent::Network(description));
    }

    /// Cuts some links (members in random order); returns what it did.
    fn partition(&mut self) -> String {
        let mut ids: Vec<NodeId> = self.ids().collect();
        self.random.shuffle(&mut ids);
        match self.random.below(4) {
            0 => self.split(&ids),
            1 => {
                let (one, rest) = ids.split_at(1);
                self.network.split(one, rest);
                format!("isolate {}", one[0])
            }
            2 => self.deafen_or_mute(ids[0], &ids[1..]),
            _ => self.cut_links(&ids),
        }
    }

    /// Symmetric: two sides that cannot reach each other.
    fn split(&mut self, ids: &[NodeId]) -> String {
        let cut = self.random.between(1, ids.len() as u64 - 1) as usize;
        let (side, rest) = ids.split_at(cut);
        self.network.split(side, rest);
        format!("split {side:?} | {rest:?}")
    }

    /// Asymmetric: `one` can only send, or only receive.
    fn deafen_or_mute(&mut self, one: NodeId, rest: &[NodeId]) -> String {
        let outbound = self.random.chance(0.5);
        for &other in rest {
            if outbound {
                self.network.block(one, other);
            } else {
                self.network.block(other, one);
            }
        }
        let direction = if outbound { "from" } else { "to" };
        format!("one-way: nothing {direction} {one}")
    }

    /// Asymmetric: a few random directed links.
    fn cut_links(&mut self, ids: &[NodeId]) -> String {
        let mut cut = Vec::new();
        for _ in 0..self.random.between(1, ids.len() as u64) {
            let from = self.random.pick(ids).expect("members");
            let to = self.random.pick(ids).expect("members");
            if from != to {
                self.network.block(from, to);
                cut.push(format!("{from}->{to}"));
            }
        }
        format!("one-way cuts {}", cut.join(" "))
    }

    // ----- clients ----------------------------------------------------------------

    fn client(&mut self) -> Result<(), Failure> {
        if self.random.chance(self.scenario.propose_per_tick) {
            self.propose_batch()?;
        }
        if self.random.chance(self.scenario.membership_per_tick) {
            self.change_membership()?;
        }
        if self.random.chance(self.scenario.transfer_per_tick) {
            self.transfer()?;
        }
        if self.random.chance(self.scenario.read_per_tick) {
            self.read()?;
        }
        Ok(())
    }

    /// Proposes to a leader (now and then to any live node, which refuses).
    fn propose_batch(&mut self) -> Result<(), Failure> {
        let target = if self.random.chance(0.9) {
            self.random.pick(&self.leaders())
        } else {
            self.random.pick(&self.live_ids())
        };
        let Some(target) = target else {
            return Ok(());
        };
        let node = self.node_mut(target);
        if node.last_index() - node.commit_index() >= MAX_UNCOMMITTED_ENTRIES {
            return Ok(());
        }
        let batch = self.random.between(1, 8);
        for _ in 0..batch {
            if !self.propose(target) {
                break;
            }
        }
        self.after(target)
    }

    /// One proposal; returns whether the node took it.
    fn propose(&mut self, target: NodeId) -> bool {
        let id = self.client_oracle.next_id();
        let padding = self.random.below(24) as usize;
        let node = self.node_mut(target);
        let term = node.term();
        let Ok(index) = node.propose(proposal_payload(id, padding)) else {
            return false;
        };
        let proposal = Proposal {
            node: target,
            term,
            index,
        };
        self.client_oracle.on_propose(id, proposal);
        self.record(TraceEvent::Propose {
            node: target,
            id,
            index,
        });
        true
    }

    /// Adds or removes one voter, keeping at least three.
    fn change_membership(&mut self) -> Result<(), Failure> {
        let Some(leader) = self.random.pick(&self.leaders()) else {
            return Ok(());
        };
        let voters = self.node_mut(leader).membership().voters.clone();
        // A wiped host's new id joins only through the leader's join rule.
        let outsiders: Vec<NodeId> = self
            .ids()
            .filter(|id| !voters.contains(id) && self.joining != Some(*id))
            .collect();
        let remove = voters.len() > 3 && (outsiders.is_empty() || self.random.chance(0.5));
        let change = if remove {
            EntryKind::RemoveVoter(self.random.pick(&voters).expect("voters"))
        } else if let Some(outsider) = self.random.pick(&outsiders) {
            EntryKind::AddVoter(outsider)
        } else {
            return Ok(());
        };
        if self
            .node_mut(leader)
            .propose_membership(change.clone())
            .is_ok()
        {
            self.stats.membership_changes += 1;
            self.record(TraceEvent::Membership {
                node: leader,
                change: format!("{change:?}"),
            });
        }
        self.after(leader)
    }

    fn transfer(&mut self) -> Result<(), Failure> {
        let Some(leader) = self.random.pick(&self.leaders()) else {
            return Ok(());
        };
        let voters = self.node_mut(leader).membership().voters.clone();
        let targets: Vec<NodeId> = voters.into_iter().filter(|id| *id != leader).collect();
        let Some(target) = self.random.pick(&targets) else {
            return Ok(());
        };
        self.node_mut(leader).transfer_leadership(target);
        self.stats.transfers += 1;
        self.record(TraceEvent::Transfer {
            from: leader,
            to: target,
        });
        self.after(leader)
    }

    fn read(&mut self) -> Result<(), Failure> {
        let Some(leader) = self.random.pick(&self.leaders()) else {
            return Ok(());
        };
        let context = self.next_read_context;
        self.next_read_context += 1;
        let committed = self.leader_completeness.highest_committed();
        if self.node_mut(leader).read_index(context).is_ok() {
            self.read_index.on_start(context, committed);
            self.record(TraceEvent::ReadStart {
                node: leader,
                context,
                committed,
            });
        }
        self.after(leader)
    }

    // ----- liveness ---------------------------------------------------------------

    /// Ends the faults: heals the network, restarts every crashed node.
    fn heal(&mut self) -> Result<(), Failure> {
        self.healed = true;
        self.record(TraceEvent::Phase("liveness"));
        self.network.heal();
        self.partition_until = None;
        let max_delay = self.scenario.network.max_delay_steps.min(STEPS_PER_TICK);
        self.network.set_faults(NetworkFaults::calm(max_delay));
        self.record(TraceEvent::Network("healed, no more faults".to_string()));
        for id in self.ids().collect::<Vec<_>>() {
            if self.nodes[slot(id)].is_none() {
                self.restart(id)?;
            }
        }
        Ok(())
    }

    /// Requires a leader, a newly committed proposal and every live voter at
    /// the same applied state, without stalling for `liveness_ticks`.
    fn liveness(&mut self) -> Result<(), Failure> {
        let start = self.tick;
        let mut markers: Vec<u64> = Vec::new();
        // One marker per leadership: a stuck leader gets no new entries
        // (which would look like progress).
        let mut marked: Option<(NodeId, Term)> = None;
        let mut progress = self.progress();
        let mut last_progress = self.tick;
        loop {
            let stalled = self.tick - last_progress >= self.config.liveness_ticks;
            if stalled || self.tick - start >= self.config.liveness_cap_ticks {
                return Err(Failure {
                    invariant: LIVENESS,
                    detail: self.liveness_report(&markers, stalled),
                });
            }
            self.run_tick()?;
            let now_progress = self.progress();
            if now_progress > progress {
                progress = now_progress;
                last_progress = self.tick;
            }
            let committed = markers
                .iter()
                .any(|id| self.client_oracle.is_acknowledged(*id));
            if committed {
                if let Some(voters) = self.converged() {
                    self.stats.liveness_ticks = self.tick - start;
                    return self.check_converged(&voters);
                }
            } else if let Some(leader) = self.current_leader() {
                let term = self.node_mut(leader).term();
                if marked != Some((leader, term)) {
                    if let Some(id) = self.propose_marker(leader) {
                        markers.push(id);
                        marked = Some((leader, term));
                    }
                    self.after(leader)?;
                }
            }
        }
    }

    /// Proposes a new marker to `leader`; returns its id if taken.
    fn propose_marker(&mut self, leader: NodeId) -> Option<u64> {
        let id = self.client_oracle.next_id();
        let node = self.node_mut(leader);
        let term = node.term();
        let index = node.propose(proposal_payload(id, 0)).ok()?;
        self.client_oracle.on_propose(
            id,
            Proposal {
                node: leader,
                term,
                index,
            },
        );
        self.record(TraceEvent::Propose {
            node: leader,
            id,
            index,
        });
        Some(id)
    }

    /// The live leader of the highest term, if any.
    fn current_leader(&self) -> Option<NodeId> {
        self.leaders()
            .into_iter()
            .max_by_key(|id| self.nodes[slot(*id)].as_ref().map_or(0, Node::term))
    }

    /// The voters, once every one of them has applied all the leader has.
    fn converged(&self) -> Option<Vec<NodeId>> {
        let leader_id = self.current_leader()?;
        let leader = self.nodes[slot(leader_id)].as_ref()?;
        let commit = leader.commit_index();
        if commit != leader.last_index() {
            return None;
        }
        let reference = &self.machines[slot(leader_id)];
        let voters = leader.membership().voters.clone();
        for voter in &voters {
            let node = self.nodes[slot(*voter)].as_ref()?;
            let machine = &self.machines[slot(*voter)];
            if node.commit_index() != commit
                || machine.applied_index != commit
                || machine != reference
            {
                return None;
            }
        }
        Some(voters)
    }

    fn check_converged(&self, voters: &[NodeId]) -> Result<(), Failure> {
        let machines: Vec<(NodeId, &StateMachine)> = voters
            .iter()
            .map(|id| (*id, &self.machines[slot(*id)]))
            .collect();
        check(self.client_oracle.check_converged(&machines), CLIENT_ORACLE)?;
        self.check_logs()
    }

    /// Progress measure: entries durable plus entries applied, summed over
    /// the nodes (only a new high counts: a log cut and regrown is no
    /// progress).
    fn progress(&self) -> u64 {
        self.ids()
            .map(|id| self.disks[slot(id)].durable_last() + self.machines[slot(id)].applied_index)
            .sum()
    }

    fn liveness_report(&self, markers: &[u64], stalled: bool) -> String {
        let acknowledged = markers
            .iter()
            .any(|id| self.client_oracle.is_acknowledged(*id));
        let why = if stalled {
            format!("no progress for {} ticks", self.config.liveness_ticks)
        } else {
            format!("{} ticks after healing", self.config.liveness_cap_ticks)
        };
        let mut report = format!(
            "no convergence: {why} (markers proposed: {}, one committed: {acknowledged}); ",
            markers.len()
        );
        for id in self.ids() {
            let machine = &self.machines[slot(id)];
            match &self.nodes[slot(id)] {
                Some(node) => report.push_str(&format!(
                    "[node {id}: {:?} term={} commit={} last={} applied={} damaged={} voters={:?}] ",
                    node.role(),
                    node.term(),
                    node.commit_index(),
                    node.last_index(),
                    machine.applied_index,
                    node.is_damaged(),
                    node.membership().voters
                )),
                None => report.push_str(&format!("[node {id}: down] ")),
            }
        }
        report
    }
}

/// Member `id`'s position in the per-member vectors.
fn slot(id: NodeId) -> usize {
    (id - 1) as usize
}

/// The server name of host `host` (from 0).
fn host_name(host: usize) -> String {
    format!("n{}", host + 1)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_string()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    #[test]
    fn a_panic_inside_a_node_becomes_a_violation() {
        let mut simulation = Simulation::new(1, SimConfig::default());
        let failure = simulation
            .guarded(|simulation| {
                let misaddressed = Envelope {
                    from: 2,
                    to: 3,
                    message: Message::TimeoutNow { term: 1 },
                };
                simulation.node_mut(1).step(misaddressed);
                Ok(())
            })
            .expect_err("the node asserts");
        assert_eq!(failure.invariant, NODE_PANIC);
        assert!(failure.detail.contains("wrong node"), "{}", failure.detail);
    }

    /// Seeds 0..12 under the default settings with `host_canary`: the
    /// invariants that failed, and the counts of the runs that passed.
    fn invariants(
        seeds: std::ops::Range<u64>,
        host_canary: Option<HostCanary>,
    ) -> (Vec<&'static str>, Stats) {
        let config = SimConfig {
            host_canary,
            ..SimConfig::default()
        };
        let mut found = Vec::new();
        let mut total = Stats::default();
        for seed in seeds {
            match run(seed, &config) {
                Ok(stats) => total.add(&stats),
                Err(violation) => found.push(violation.invariant),
            }
        }
        (found, total)
    }

    #[test]
    fn wiped_nodes_rejoin_under_new_ids_without_violations() {
        let (found, total) = invariants(0..12, None);
        assert_eq!(found, Vec::<&str>::new());
        assert!(total.wipes >= 12, "{total}");
        // Each old id left the group; the hosts' new ids are voters.
        for seed in 0..12 {
            let mut simulation = Simulation::new(seed, SimConfig::default());
            simulation.run_phases().expect("passes");
            let leader = simulation
                .current_leader()
                .expect("a leader after liveness");
            let voters = simulation.node_mut(leader).membership().voters.clone();
            assert!(
                voters
                    .iter()
                    .all(|voter| !simulation.retired.contains(voter)),
                "seed {seed}: voters {voters:?}, wiped {:?}",
                simulation.retired
            );
            assert_eq!(simulation.joining, None, "seed {seed}");
        }
    }

    #[test]
    fn the_checkers_catch_a_wipe_that_keeps_its_identity() {
        let (found, _) = invariants(0..12, Some(HostCanary::WipeKeepsIdentity));
        assert!(found.contains(&SINGLE_VOTE), "{found:?}");
    }

    #[test]
    fn the_checkers_catch_a_wiped_store_that_forms_its_own_configuration() {
        let (found, _) = invariants(0..12, Some(HostCanary::WipeFormsConfiguration));
        assert!(found.contains(&LEADER_COMPLETENESS), "{found:?}");
    }

    #[test]
    fn the_trace_is_bounded_and_readable() {
        let config = SimConfig {
            safety_ticks: 50,
            trace_events: 30,
            ..SimConfig::default()
        };
        let mut simulation = Simulation::new(4, config);
        simulation.run_phases().expect("passes");
        let lines = simulation.trace.lines();
        assert!(!lines.is_empty() && lines.len() <= 30);
        assert!(lines.iter().all(|line| line.starts_with("t=")));
    }
}
