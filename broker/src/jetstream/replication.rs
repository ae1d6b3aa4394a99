//! What this node sees of its Raft groups (the meta group and its streams'),
//! for operators: STREAM.INFO's and `/jsz`'s `cluster` blocks, `/healthz`
//! and `/metrics`. Pure: a [`GroupView`] is copied out of a
//! `tern_raft::Node` and everything else is computed from it, so the same
//! rules answer every endpoint and are tested here without a cluster.
//!
//! The rules follow nats-server's `clusterInfo` and `raft.Peers()`: the
//! replicas listed are the voters other than this node (this node too when
//! the group has no leader); a leader knows each one's progress (current:
//! heard from within the check-quorum window and nothing behind), a
//! follower only whether it hears from its leader; other followers are
//! listed as not current.

use tern_raft::{Node, NodeCounters, NodeId, PeerStatus, Role};

use super::api::responses::{ClusterBlock, ReplicaBlock};
use super::stream::groups::RAFT_TICK;

/// A follower that has not heard from its leader for this many ticks
/// (4 heartbeats, 400 ms) shows the leader as not current and is not
/// current itself (nats-server: two heartbeat intervals of its 1 s).
pub const LEADER_CONTACT_TICKS_MAX: u64 = 8;

/// A replica with more committed entries than this not applied yet is
/// behind (catching up), not current. Under load a few entries between
/// commit and apply are normal.
pub const APPLY_BACKLOG_CURRENT_MAX: u64 = 1024;

/// One group as its node on this server sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    pub this_node: NodeId,
    pub role: Role,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub commit_index: u64,
    /// Committed entries handed to the group's host.
    pub applied_index: u64,
    pub last_index: u64,
    pub voters: Vec<NodeId>,
    /// The leader's view of each other voter (empty on a follower).
    pub peers: Vec<PeerStatus>,
    /// A follower: ticks since it heard from its leader.
    pub leader_silent_ticks: Option<u64>,
}

/// A server's name and whether a route reaches it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerName {
    pub name: String,
    pub reachable: bool,
}

/// Why a group on this node is not current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotCurrent {
    /// No leader known (an election under way, or no quorum).
    NoLeader,
    /// A leader is known but has not been heard from lately.
    LeaderSilent,
    /// More committed entries than [`APPLY_BACKLOG_CURRENT_MAX`] wait to
    /// apply.
    Behind { backlog: u64 },
}

impl GroupView {
    pub fn of(node: &Node) -> GroupView {
        GroupView {
            this_node: node.id(),
            role: node.role(),
            term: node.term(),
            leader: node.leader(),
            commit_index: node.commit_index(),
            applied_index: node.applied_index(),
            last_index: node.last_index(),
            voters: node.membership().voters.clone(),
            peers: node.peer_status(),
            leader_silent_ticks: node.leader_silent_ticks(),
        }
    }

    pub fn is_leader(&self) -> bool {
        self.role == Role::Leader
    }

    /// `leader`, `follower` or `candidate` (a pre-candidate counts as a
    /// candidate): the metrics' `role` label.
    pub fn role_label(&self) -> &'static str {
        role_label(self.role)
    }

    /// Whether this replica is current: a leader is; a follower when it
    /// hears from its leader and has applied nearly everything committed
    /// (`host_backlog`: entries handed over that its host has not applied).
    pub fn current(&self, host_backlog: u64) -> Result<(), NotCurrent> {
        if self.is_leader() {
            return Ok(());
        }
        if self.leader.is_none() {
            return Err(NotCurrent::NoLeader);
        }
        if self
            .leader_silent_ticks
            .is_some_and(|ticks| ticks > LEADER_CONTACT_TICKS_MAX)
        {
            return Err(NotCurrent::LeaderSilent);
        }
        let backlog = self.commit_index.saturating_sub(self.applied_index) + host_backlog;
        if backlog > APPLY_BACKLOG_CURRENT_MAX {
            return Err(NotCurrent::Behind { backlog });
        }
        Ok(())
    }

    /// Entries each other voter is behind this leader's log (empty on a
    /// follower, which does not know).
    pub fn replica_lag(&self) -> Vec<(NodeId, u64)> {
        self.peers
            .iter()
            .map(|peer| (peer.id, self.last_index.saturating_sub(peer.match_index)))
            .collect()
    }

    /// The `replicas` of a `cluster` block, sorted by name.
    pub fn replicas(&self, name_of: impl Fn(NodeId) -> Option<PeerName>) -> Vec<ReplicaBlock> {
        let mut replicas = Vec::with_capacity(self.voters.len());
        for &voter in &self.voters {
            // nats-server lists this node too while the group has no leader.
            if voter == self.this_node && self.leader.is_some() {
                continue;
            }
            let (current, active_ns, lag) = self.replica_progress(voter);
            let peer = format!("{voter:x}");
            let (name, offline, lag) = match name_of(voter) {
                Some(known) => (known.name, !known.reachable, lag),
                // nats-server's text, and no lag: it would mislead.
                None => (
                    format!("Server name unknown at this time (peerID: {peer})"),
                    true,
                    0,
                ),
            };
            replicas.push(ReplicaBlock {
                name,
                current,
                active_ns,
                lag,
                offline,
                peer,
            });
        }
        replicas.sort_by(|a, b| a.name.cmp(&b.name));
        replicas
    }

    /// `(current, active_ns, lag)` of one voter as this node knows it.
    fn replica_progress(&self, voter: NodeId) -> (bool, u64, u64) {
        if voter == self.this_node {
            return (true, 0, 0);
        }
        if self.is_leader() {
            let Some(peer) = self.peers.iter().find(|peer| peer.id == voter) else {
                return (false, 0, 0);
            };
            let lag = self.last_index.saturating_sub(peer.match_index);
            let active_ns = peer.silent_ticks.map_or(0, ticks_ns);
            return (peer.recently_active && lag == 0, active_ns, lag);
        }
        if Some(voter) == self.leader {
            let silent = self.leader_silent_ticks.unwrap_or(u64::MAX);
            let active_ns = self.leader_silent_ticks.map_or(0, ticks_ns);
            return (silent <= LEADER_CONTACT_TICKS_MAX, active_ns, 0);
        }
        (false, 0, 0)
    }

    /// The `cluster` block: the cluster's name, the leader's name and the
    /// replicas.
    pub fn cluster_block(
        &self,
        cluster: String,
        name_of: impl Fn(NodeId) -> Option<PeerName>,
    ) -> ClusterBlock {
        ClusterBlock {
            name: Some(cluster),
            leader: self.leader.and_then(&name_of).map(|known| known.name),
            replicas: self.replicas(name_of),
        }
    }
}

/// The `cluster` block of a stream none of whose nodes is reachable, as
/// nats-server's meta leader lists it (`offlineClusterInfo`): no leader,
/// each node with a known name offline and not current, in placement
/// order.
pub fn offline_cluster_block(
    cluster: String,
    peers: &[NodeId],
    name_of: impl Fn(NodeId) -> Option<PeerName>,
) -> ClusterBlock {
    let replicas = peers
        .iter()
        .filter_map(|&peer| {
            let known = name_of(peer)?;
            Some(ReplicaBlock {
                name: known.name,
                current: false,
                active_ns: 0,
                lag: 0,
                offline: true,
                peer: format!("{peer:x}"),
            })
        })
        .collect();
    ClusterBlock {
        name: Some(cluster),
        leader: None,
        replicas,
    }
}

/// A replicated stream's group on this node (gathered from its owner
/// shard, names resolved there).
#[derive(Debug, Clone)]
pub struct StreamGroupReport {
    pub name: String,
    pub group: u64,
    pub view: GroupView,
    /// Its `cluster` block as this node sees it.
    pub cluster: ClusterBlock,
    /// Whether this replica is current (`/healthz`).
    pub current: Result<(), NotCurrent>,
    /// This node leads: each other replica's server name and the entries
    /// it is behind.
    pub replica_lag: Vec<(String, u64)>,
}

/// One shard's Raft groups (`/metrics`): how many in each role, and the
/// elections and leader changes they saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RaftReport {
    pub leaders: u64,
    pub followers: u64,
    pub candidates: u64,
    pub counters: NodeCounters,
}

impl RaftReport {
    pub fn count(&mut self, role: Role) {
        match role {
            Role::Leader => self.leaders += 1,
            Role::Follower => self.followers += 1,
            Role::Candidate | Role::PreCandidate => self.candidates += 1,
        }
    }
}

/// The meta group as shard 0 sees it (`/jsz`'s `meta_cluster`,
/// `/healthz`).
#[derive(Debug, Clone)]
pub struct MetaStatus {
    pub cluster: String,
    pub voters: Vec<NodeId>,
    /// The group's node; `None` while it does not run (forming, or
    /// stopped).
    pub view: Option<GroupView>,
    /// Why the group stopped or cannot run.
    pub failure: Option<String>,
    /// The applied state (catalog) is at this index.
    pub applied_index: u64,
    /// See `Meta::caught_up`.
    pub caught_up: bool,
    pub leader_name: Option<String>,
    pub replicas: Vec<ReplicaBlock>,
    /// Entries in the log since its last compaction, and their bytes.
    pub pending_entries: u64,
    pub pending_bytes: u64,
}

/// nats-server's `/healthz` texts for the meta layer.
pub const META_NOT_RUNNING: &str = "JetStream meta layer is not running";
pub const META_NO_LEADER: &str = "JetStream has not established contact with a meta leader";
pub const META_NOT_CURRENT: &str = "JetStream is not current with the meta leader";

impl MetaStatus {
    /// `Err` with nats-server's text while this node cannot serve
    /// JetStream's cluster-wide requests: the group is not running, has no
    /// leader this node hears from, or this node's state is behind it.
    pub fn health(&self) -> Result<(), &'static str> {
        if self.failure.is_some() {
            return Err(META_NOT_RUNNING);
        }
        let Some(view) = &self.view else {
            return Err(META_NO_LEADER);
        };
        match view.current(0) {
            Err(NotCurrent::NoLeader) => Err(META_NO_LEADER),
            Err(_) => Err(META_NOT_CURRENT),
            Ok(()) if !self.caught_up => Err(META_NOT_CURRENT),
            Ok(()) => Ok(()),
        }
    }
}

pub fn role_label(role: Role) -> &'static str {
    match role {
        Role::Leader => "leader",
        Role::Follower => "follower",
        Role::Candidate | Role::PreCandidate => "candidate",
    }
}

fn ticks_ns(ticks: u64) -> u64 {
    let tick_ns = u64::try_from(RAFT_TICK.as_nanos()).unwrap_or(u64::MAX);
    ticks.saturating_mul(tick_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = 0xa;
    const B: NodeId = 0xb;
    const C: NodeId = 0xc;

    fn names(node: NodeId) -> Option<PeerName> {
        let (name, reachable) = match node {
            A => ("a", true),
            B => ("b", true),
            C => ("c", false),
            _ => return None,
        };
        Some(PeerName {
            name: name.into(),
            reachable,
        })
    }

    fn leader_view() -> GroupView {
        GroupView {
            this_node: A,
            role: Role::Leader,
            term: 4,
            leader: Some(A),
            commit_index: 10,
            applied_index: 10,
            last_index: 12,
            voters: vec![A, B, C],
            peers: vec![
                PeerStatus {
                    id: B,
                    match_index: 12,
                    recently_active: true,
                    silent_ticks: Some(1),
                },
                PeerStatus {
                    id: C,
                    match_index: 7,
                    recently_active: false,
                    silent_ticks: None,
                },
            ],
            leader_silent_ticks: None,
        }
    }

    fn follower_view() -> GroupView {
        GroupView {
            this_node: B,
            role: Role::Follower,
            leader: Some(A),
            peers: Vec::new(),
            leader_silent_ticks: Some(2),
            ..leader_view()
        }
    }

    #[test]
    fn a_leader_lists_the_others_with_their_progress() {
        let block = leader_view().cluster_block("east".into(), names);
        assert_eq!(block.name.as_deref(), Some("east"));
        assert_eq!(block.leader.as_deref(), Some("a"));
        assert_eq!(
            block.replicas,
            vec![
                ReplicaBlock {
                    name: "b".into(),
                    current: true,
                    active_ns: 50_000_000,
                    lag: 0,
                    offline: false,
                    peer: "b".into(),
                },
                ReplicaBlock {
                    name: "c".into(),
                    current: false,
                    active_ns: 0,
                    lag: 5,
                    offline: true,
                    peer: "c".into(),
                },
            ]
        );
        assert_eq!(leader_view().replica_lag(), vec![(B, 0), (C, 5)]);
        assert_eq!(leader_view().current(10_000), Ok(()), "a leader is current");
    }

    #[test]
    fn a_follower_knows_only_whether_it_hears_its_leader() {
        let view = follower_view();
        let replicas = view.replicas(names);
        assert_eq!(replicas.len(), 2, "{replicas:?}");
        assert_eq!(
            (replicas[0].name.as_str(), replicas[0].current),
            ("a", true)
        );
        assert_eq!(replicas[0].active_ns, 100_000_000);
        assert_eq!(
            (
                replicas[1].name.as_str(),
                replicas[1].current,
                replicas[1].lag
            ),
            ("c", false, 0)
        );
        assert!(view.replica_lag().is_empty());
        assert_eq!(view.current(0), Ok(()));

        let silent = GroupView {
            leader_silent_ticks: Some(LEADER_CONTACT_TICKS_MAX + 1),
            ..follower_view()
        };
        assert_eq!(silent.current(0), Err(NotCurrent::LeaderSilent));
        assert!(!silent.replicas(names)[0].current);
    }

    #[test]
    fn a_follower_without_a_leader_or_far_behind_is_not_current() {
        let leaderless = GroupView {
            role: Role::Candidate,
            leader: None,
            leader_silent_ticks: None,
            ..follower_view()
        };
        assert_eq!(leaderless.current(0), Err(NotCurrent::NoLeader));
        let block = leaderless.cluster_block("east".into(), names);
        assert_eq!(block.leader, None);
        let listed: Vec<&str> = block.replicas.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(listed, ["a", "b", "c"], "itself too, as nats-server");
        assert_eq!(leaderless.role_label(), "candidate");

        let behind = GroupView {
            commit_index: 2000,
            applied_index: 900,
            ..follower_view()
        };
        assert_eq!(behind.current(0), Err(NotCurrent::Behind { backlog: 1100 }));
        let nearly = GroupView {
            commit_index: 1000,
            applied_index: 900,
            ..follower_view()
        };
        assert_eq!(nearly.current(APPLY_BACKLOG_CURRENT_MAX - 100), Ok(()));
        assert_eq!(
            nearly.current(APPLY_BACKLOG_CURRENT_MAX - 99),
            Err(NotCurrent::Behind {
                backlog: APPLY_BACKLOG_CURRENT_MAX + 1
            })
        );
    }

    fn meta(view: Option<GroupView>, caught_up: bool) -> MetaStatus {
        MetaStatus {
            cluster: "east".into(),
            voters: vec![A, B, C],
            view,
            failure: None,
            applied_index: 10,
            caught_up,
            leader_name: None,
            replicas: Vec::new(),
            pending_entries: 0,
            pending_bytes: 0,
        }
    }

    #[test]
    fn the_meta_layer_is_healthy_once_it_hears_its_leader_and_caught_up() {
        assert_eq!(meta(Some(follower_view()), true).health(), Ok(()));
        assert_eq!(meta(Some(leader_view()), true).health(), Ok(()));
        assert_eq!(
            meta(Some(follower_view()), false).health(),
            Err(META_NOT_CURRENT)
        );
        let silent = GroupView {
            leader_silent_ticks: Some(LEADER_CONTACT_TICKS_MAX + 1),
            ..follower_view()
        };
        assert_eq!(meta(Some(silent), true).health(), Err(META_NOT_CURRENT));
        let leaderless = GroupView {
            leader: None,
            leader_silent_ticks: None,
            ..follower_view()
        };
        assert_eq!(meta(Some(leaderless), false).health(), Err(META_NO_LEADER));
        assert_eq!(meta(None, false).health(), Err(META_NO_LEADER), "forming");
        let failed = MetaStatus {
            failure: Some("stopped: disk".into()),
            ..meta(Some(leader_view()), true)
        };
        assert_eq!(failed.health(), Err(META_NOT_RUNNING));
    }

    #[test]
    fn an_unknown_server_is_named_as_nats_server_does() {
        let view = GroupView {
            voters: vec![A, B, 0xd],
            ..follower_view()
        };
        let replicas = view.replicas(names);
        let unknown = replicas
            .iter()
            .find(|replica| replica.peer == "d")
            .expect("listed");
        assert_eq!(unknown.name, "Server name unknown at this time (peerID: d)");
        assert!(unknown.offline && !unknown.current);
    }

    #[test]
    fn an_unreachable_stream_lists_its_known_nodes_offline() {
        let block = offline_cluster_block("east".into(), &[C, 0xd, A], names);
        assert_eq!(block.name.as_deref(), Some("east"));
        assert_eq!(block.leader, None);
        // nats-server's offlineClusterInfo: nodes with a known name, in
        // placement order, offline and not current.
        let listed: Vec<(&str, bool, bool, u64, &str)> = block
            .replicas
            .iter()
            .map(|replica| {
                (
                    replica.name.as_str(),
                    replica.current,
                    replica.offline,
                    replica.active_ns,
                    replica.peer.as_str(),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [("c", false, true, 0, "c"), ("a", false, true, 0, "a")]
        );
    }
}
