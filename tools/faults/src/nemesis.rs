//! The nemesis's plan: a seeded list of faults, each held for a while and
//! then healed, with quiet time between them. Pure: the same seed, node
//! count and schedule name give the same plan, so any failure repeats
//! from the seed in its report. Carrying a fault out is `run.rs`'s job.

use std::fmt;
use std::time::Duration;

use crate::random::Random;

/// What one step does to the cluster. Node numbers are 1-based, as the
/// nodes are named (`n1`, `n2`, …).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// SIGKILL, then a restart when the hold ends.
    Kill { node: usize },
    /// SIGSTOP, then SIGCONT when the hold ends.
    Pause { node: usize },
    /// The node cut off from every other node (clients still reach it).
    Isolate { node: usize },
    /// The nodes in `minority` cut off from the rest.
    Split { minority: Vec<usize> },
    /// Packets from `from` to `to` dropped; the other way still flows.
    OneWay { from: usize, to: usize },
    /// `percent` of the packets between the node and its peers dropped.
    Loss { node: usize, percent: u32 },
    /// The node's packets to its peers held `delay_ms` ± `jitter_ms`
    /// (which reorders them), by the NFQUEUE shim.
    Delay {
        node: usize,
        delay_ms: u32,
        jitter_ms: u32,
    },
    /// SIGKILL, then damage to one of the node's files while it is down,
    /// then a restart when the hold ends. `seed` picks the file and the
    /// place in it.
    Damage {
        node: usize,
        target: DamageTarget,
        action: DamageAction,
        seed: u64,
    },
    /// SIGSTOP, then SIGKILL while stopped, then a restart.
    PauseThenKill { node: usize },
    /// Isolated, killed and restarted while still isolated, then healed.
    IsolateThenKill { node: usize },
    /// The node's whole store deleted while it is down: it comes back
    /// empty, under the same name, and must catch up from its peers.
    Wipe { node: usize },
    /// `STREAM.PEER.REMOVE` of one replica (the `pick`-th of the current
    /// replicas): the stream moves that copy to a node without one. Only
    /// planned when the stream has fewer replicas than there are nodes.
    PeerRemove { pick: usize },
}

/// Which of a node's files a [`Fault::Damage`] hits (the mapping from
/// paths to kinds is per server, `damage.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DamageTarget {
    /// The write-ahead journal (tern) or the message blocks (nats-server).
    Journal,
    /// tern's block store; nats-server's message blocks.
    BlockStore,
    /// Raft snapshots.
    Snapshot,
    /// Stream and consumer metadata, Raft state, the store's identity.
    Meta,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DamageAction {
    /// One bit flipped at a random offset.
    FlipBit,
    /// Cut to a random length shorter than the file.
    Truncate,
    /// Removed.
    Delete,
}

impl fmt::Display for Fault {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Kill { node } => write!(formatter, "kill n{node}"),
            Fault::Pause { node } => write!(formatter, "pause n{node}"),
            Fault::Isolate { node } => write!(formatter, "isolate n{node}"),
            Fault::Split { minority } => {
                let names: Vec<String> = minority.iter().map(|node| format!("n{node}")).collect();
                write!(formatter, "split off {}", names.join("+"))
            }
            Fault::OneWay { from, to } => write!(formatter, "drop n{from}->n{to}"),
            Fault::Loss { node, percent } => write!(formatter, "loss {percent}% at n{node}"),
            Fault::Delay {
                node,
                delay_ms,
                jitter_ms,
            } => write!(formatter, "delay {delay_ms}±{jitter_ms} ms at n{node}"),
            Fault::Damage {
                node,
                target,
                action,
                seed,
            } => write!(
                formatter,
                "damage n{node} {target:?} {action:?} (seed {seed})"
            ),
            Fault::PauseThenKill { node } => write!(formatter, "pause then kill n{node}"),
            Fault::IsolateThenKill { node } => write!(formatter, "isolate then kill n{node}"),
            Fault::Wipe { node } => write!(formatter, "wipe n{node}"),
            Fault::PeerRemove { pick } => write!(formatter, "peer remove (replica {pick})"),
        }
    }
}

impl Fault {
    /// The nodes the fault acts on (for a one-way drop, both ends).
    #[cfg(test)]
    pub fn nodes(&self) -> Vec<usize> {
        match self {
            Fault::Split { minority } => minority.clone(),
            Fault::OneWay { from, to } => vec![*from, *to],
            Fault::Kill { node }
            | Fault::Pause { node }
            | Fault::Isolate { node }
            | Fault::Loss { node, .. }
            | Fault::Delay { node, .. }
            | Fault::Damage { node, .. }
            | Fault::PauseThenKill { node }
            | Fault::IsolateThenKill { node }
            | Fault::Wipe { node } => vec![*node],
            Fault::PeerRemove { pick } => vec![*pick + 1],
        }
    }

    /// Whether at most one node is affected (the availability goal's
    /// "single-node fault").
    pub fn is_single_node(&self) -> bool {
        match self {
            Fault::Split { minority } => minority.len() == 1,
            _ => true,
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Step {
    pub fault: Fault,
    /// How long the fault stays before it is healed.
    #[serde(rename = "hold_ms", serialize_with = "milliseconds")]
    pub hold: Duration,
    /// Quiet time after the heal, before the next step.
    #[serde(rename = "quiet_ms", serialize_with = "milliseconds")]
    pub quiet: Duration,
}

fn milliseconds<S: serde::Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(duration.as_millis() as u64)
}

/// The named schedules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleName {
    /// CI's short schedule: a kill, a pause, an isolation, a majority /
    /// minority split, a one-way partition, delay with reordering, one
    /// journal bit flip, one journal segment deleted and a pause followed
    /// by a kill; a few seconds each (about a minute of faults).
    Short,
    /// Every fault kind drawn at random until the duration is spent.
    Mixed,
    /// Only process faults: kills, pauses and both combined.
    Process,
    /// Only network faults: partitions, loss and delay.
    Network,
    /// Only file damage (every target and action) and wipes.
    Damage,
}

/// Hold and quiet ranges, in milliseconds.
const HOLD_MS: (u64, u64) = (2_000, 6_000);
const QUIET_MS: (u64, u64) = (2_000, 4_000);
const SHORT_HOLD_MS: (u64, u64) = (2_500, 4_000);
const SHORT_QUIET_MS: (u64, u64) = (2_000, 3_000);

/// The plan for `nodes` nodes and a stream of `replicas`: `Short` is fixed
/// in length; the others draw steps until their holds and quiet times add
/// up to `duration`. Membership changes (peer removals) only come when
/// some node holds no replica.
pub fn plan(
    name: ScheduleName,
    seed: u64,
    nodes: usize,
    replicas: usize,
    duration: Duration,
) -> Vec<Step> {
    assert!(
        nodes >= 3,
        "a fault schedule needs at least 3 nodes, got {nodes}"
    );
    let mut random = Random::new(seed).fork(0x6e656d65); // "neme"
    if name == ScheduleName::Short {
        let kinds = [
            Kind::Kill,
            Kind::Pause,
            Kind::Isolate,
            Kind::Split,
            Kind::OneWay,
            Kind::Delay,
            Kind::DamageJournalBit,
            Kind::DamageJournalDelete,
            Kind::PauseThenKill,
        ];
        return kinds
            .iter()
            .map(|kind| Step {
                fault: kind.draw(&mut random, nodes),
                hold: draw_ms(&mut random, SHORT_HOLD_MS),
                quiet: draw_ms(&mut random, SHORT_QUIET_MS),
            })
            .collect();
    }
    let mixed: Vec<Kind> = Kind::ALL
        .iter()
        .copied()
        .filter(|kind| *kind != Kind::PeerRemove || replicas < nodes)
        .collect();
    let kinds: &[Kind] = match name {
        ScheduleName::Short => unreachable!("handled above"),
        ScheduleName::Mixed => &mixed,
        ScheduleName::Process => &[Kind::Kill, Kind::Pause, Kind::PauseThenKill],
        ScheduleName::Network => &[
            Kind::Isolate,
            Kind::Split,
            Kind::OneWay,
            Kind::Loss,
            Kind::Delay,
            Kind::IsolateThenKill,
        ],
        ScheduleName::Damage => &[Kind::Damage, Kind::DamageJournalBit, Kind::Wipe],
    };
    let mut steps = Vec::new();
    let mut planned = Duration::ZERO;
    while planned < duration {
        let step = Step {
            fault: random.pick(kinds).draw(&mut random, nodes),
            hold: draw_ms(&mut random, HOLD_MS),
            quiet: draw_ms(&mut random, QUIET_MS),
        };
        planned += step.hold + step.quiet;
        steps.push(step);
    }
    steps
}

fn draw_ms(random: &mut Random, (low, high): (u64, u64)) -> Duration {
    Duration::from_millis(random.between(low, high))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Kill,
    Pause,
    Isolate,
    Split,
    OneWay,
    Loss,
    Delay,
    Damage,
    DamageJournalBit,
    /// A journal segment file deleted (the short schedule's second damage).
    DamageJournalDelete,
    PauseThenKill,
    IsolateThenKill,
    Wipe,
    PeerRemove,
}

impl Kind {
    const ALL: &'static [Kind] = &[
        Kind::Kill,
        Kind::Pause,
        Kind::Isolate,
        Kind::Split,
        Kind::OneWay,
        Kind::Loss,
        Kind::Delay,
        Kind::Damage,
        Kind::PauseThenKill,
        Kind::IsolateThenKill,
        Kind::Wipe,
        Kind::PeerRemove,
    ];

    fn draw(self, random: &mut Random, nodes: usize) -> Fault {
        let node = 1 + random.index(nodes);
        match self {
            Kind::Kill => Fault::Kill { node },
            Kind::Pause => Fault::Pause { node },
            Kind::Isolate => Fault::Isolate { node },
            Kind::Split => {
                // A minority: one node of three, one or two of five.
                let largest_minority = (nodes - 1) / 2;
                let size = 1 + random.index(largest_minority);
                let minority = random
                    .subset(nodes, size)
                    .into_iter()
                    .map(|index| index + 1)
                    .collect();
                Fault::Split { minority }
            }
            Kind::OneWay => {
                let pair = random.subset(nodes, 2);
                let (from, to) = if random.below(2) == 0 {
                    (pair[0], pair[1])
                } else {
                    (pair[1], pair[0])
                };
                Fault::OneWay {
                    from: from + 1,
                    to: to + 1,
                }
            }
            Kind::Loss => Fault::Loss {
                node,
                percent: random.between(10, 40) as u32,
            },
            Kind::Delay => Fault::Delay {
                node,
                delay_ms: random.between(20, 200) as u32,
                jitter_ms: random.between(0, 20) as u32,
            },
            Kind::Damage => {
                let target = *random.pick(&[
                    DamageTarget::Journal,
                    DamageTarget::BlockStore,
                    DamageTarget::Snapshot,
                    DamageTarget::Meta,
                ]);
                let action = *random.pick(&[
                    DamageAction::FlipBit,
                    DamageAction::Truncate,
                    DamageAction::Delete,
                ]);
                Fault::Damage {
                    node,
                    target,
                    action,
                    seed: random.next_u64(),
                }
            }
            Kind::DamageJournalBit => Fault::Damage {
                node,
                target: DamageTarget::Journal,
                action: DamageAction::FlipBit,
                seed: random.next_u64(),
            },
            Kind::DamageJournalDelete => Fault::Damage {
                node,
                target: DamageTarget::Journal,
                action: DamageAction::Delete,
                seed: random.next_u64(),
            },
            Kind::PauseThenKill => Fault::PauseThenKill { node },
            Kind::IsolateThenKill => Fault::IsolateThenKill { node },
            Kind::Wipe => Fault::Wipe { node },
            Kind::PeerRemove => Fault::PeerRemove { pick: node - 1 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_plan_and_another_seed_another() {
        let duration = Duration::from_secs(600);
        let first = plan(ScheduleName::Mixed, 9, 5, 3, duration);
        assert_eq!(first, plan(ScheduleName::Mixed, 9, 5, 3, duration));
        assert!(first
            .iter()
            .any(|step| matches!(step.fault, Fault::PeerRemove { .. })));
        assert_ne!(first, plan(ScheduleName::Mixed, 10, 5, 3, duration));
        let full = plan(ScheduleName::Mixed, 9, 5, 5, duration);
        assert!(!full
            .iter()
            .any(|step| matches!(step.fault, Fault::PeerRemove { .. })));
        let total: Duration = first.iter().map(|step| step.hold + step.quiet).sum();
        assert!(total >= duration, "{total:?}");
    }

    #[test]
    fn the_short_plan_has_each_kind_ci_needs() {
        let steps = plan(ScheduleName::Short, 1, 3, 3, Duration::ZERO);
        let named: Vec<String> = steps.iter().map(|step| step.fault.to_string()).collect();
        for wanted in [
            "kill",
            "pause n",
            "isolate",
            "split",
            "drop",
            "delay",
            "Journal FlipBit",
            "Journal Delete",
        ] {
            assert!(
                named.iter().any(|name| name.contains(wanted)),
                "{wanted} missing from {named:?}"
            );
        }
        let total: Duration = steps.iter().map(|step| step.hold + step.quiet).sum();
        assert!(total < Duration::from_secs(70), "{total:?}");
    }

    #[test]
    fn faults_name_real_nodes_and_splits_stay_minorities() {
        for nodes in [3, 5] {
            for step in plan(ScheduleName::Mixed, 3, nodes, 3, Duration::from_secs(3600)) {
                match &step.fault {
                    Fault::Split { minority } => {
                        assert!(!minority.is_empty() && minority.len() * 2 < nodes);
                        assert!(minority.iter().all(|&node| (1..=nodes).contains(&node)));
                    }
                    Fault::OneWay { from, to } => {
                        assert_ne!(from, to);
                        assert!((1..=nodes).contains(from) && (1..=nodes).contains(to));
                    }
                    fault => {
                        let touched = fault.nodes();
                        assert_eq!(touched.len(), 1, "{fault}");
                        assert!((1..=nodes).contains(&touched[0]), "{fault}");
                    }
                }
            }
        }
    }
}
