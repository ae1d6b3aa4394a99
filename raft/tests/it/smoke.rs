//! A three-node group on a perfect in-process network: elects one leader,
//! replicates and commits proposals on every node in the same order.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use tern_raft::{Config, Entry, EntryKind, Envelope, Membership, Node, Restore, Role};

struct Cluster {
    nodes: BTreeMap<u64, Node>,
    network: VecDeque<Envelope>,
    applied: BTreeMap<u64, Vec<Bytes>>,
    /// Per node, the voters whose removal it applied.
    removals_applied: BTreeMap<u64, Vec<u64>>,
}

impl Cluster {
    fn new(size: u64) -> Cluster {
        let membership = Membership::new((1..=size).collect());
        let nodes = (1..=size)
            .map(|id| {
                (
                    id,
                    Node::new(
                        Config::new(id),
                        Restore {
                            membership: membership.clone(),
                            seed: id * 7919,
                            ..Restore::default()
                        },
                    ),
                )
            })
            .collect();
        Cluster {
            nodes,
            network: VecDeque::new(),
            applied: BTreeMap::new(),
            removals_applied: BTreeMap::new(),
        }
    }

    /// Persist every ready at once, deliver every message.
    fn run_until_quiet(&mut self) {
        for _ in 0..10_000 {
            let mut progressed = false;
            for (id, node) in self.nodes.iter_mut() {
                while node.has_ready() {
                    progressed = true;
                    let ready = node.ready();
                    self.network.extend(ready.messages);
                    self.network.extend(ready.persisted_messages);
                    for entry in ready.committed {
                        match entry.kind {
                            EntryKind::Normal(data) => {
                                self.applied.entry(*id).or_default().push(data)
                            }
                            EntryKind::RemoveVoter(voter) => {
                                self.removals_applied.entry(*id).or_default().push(voter)
                            }
                            EntryKind::AddVoter(_) | EntryKind::Noop => {}
                        }
                    }
                    node.advance(ready.number);
                }
            }
            while let Some(envelope) = self.network.pop_front() {
                progressed = true;
                self.nodes.get_mut(&envelope.to).unwrap().step(envelope);
            }
            if !progressed {
                return;
            }
        }
        panic!("did not settle");
    }

    fn tick_all(&mut self) {
        for node in self.nodes.values_mut() {
            node.tick();
        }
        self.run_until_quiet();
    }

    fn leader(&self) -> Option<u64> {
        let leaders: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, node)| node.role() == Role::Leader)
            .map(|(id, _)| *id)
            .collect();
        assert!(leaders.len() <= 1);
        leaders.first().copied()
    }
}

#[test]
fn elects_and_replicates() {
    let mut cluster = Cluster::new(3);
    for _ in 0..100 {
        cluster.tick_all();
        if cluster.leader().is_some() {
            break;
        }
    }
    let leader = cluster.leader().expect("a leader within 100 ticks");
    for index in 0..50u32 {
        cluster
            .nodes
            .get_mut(&leader)
            .unwrap()
            .propose(Bytes::from(index.to_le_bytes().to_vec()))
            .unwrap();
        if index % 7 == 0 {
            cluster.run_until_quiet();
        }
    }
    cluster.run_until_quiet();
    // Followers learn the final commit index from the next heartbeat.
    for _ in 0..3 {
        cluster.tick_all();
    }
    let expected: Vec<Bytes> = (0..50u32)
        .map(|index| Bytes::from(index.to_le_bytes().to_vec()))
        .collect();
    for id in 1..=3 {
        assert_eq!(cluster.applied.get(&id), Some(&expected), "node {id}");
    }
    let _: Option<Entry> = None;
}

#[test]
fn a_single_node_group_commits_alone() {
    let mut cluster = Cluster::new(1);
    for _ in 0..40 {
        cluster.tick_all();
    }
    assert_eq!(cluster.leader(), Some(1));
    cluster
        .nodes
        .get_mut(&1)
        .unwrap()
        .propose(Bytes::from_static(b"x"))
        .unwrap();
    cluster.run_until_quiet();
    assert_eq!(cluster.applied.get(&1).map(Vec::len), Some(1));
}

#[test]
fn voters_removed_down_to_one_each_apply_their_own_removal() {
    // Three voters to one: the leader removes the others one at a time;
    // each removed node is sent its removal and a commit index past it,
    // so its host learns it may delete its copy.
    let mut cluster = Cluster::new(3);
    for _ in 0..100 {
        cluster.tick_all();
        if cluster.leader().is_some() {
            break;
        }
    }
    let leader = cluster.leader().expect("a leader within 100 ticks");
    let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for removed in &others {
        cluster
            .nodes
            .get_mut(&leader)
            .unwrap()
            .propose_membership(EntryKind::RemoveVoter(*removed))
            .expect("one change at a time");
        cluster.run_until_quiet();
        for _ in 0..4 {
            cluster.tick_all();
        }
        assert_eq!(
            cluster.removals_applied.get(removed).and_then(|r| r.last()),
            Some(removed),
            "node {removed} applied its own removal"
        );
        assert!(!cluster.nodes[removed].membership().contains(*removed));
    }
    assert_eq!(cluster.nodes[&leader].membership().voters, vec![leader]);
    assert!(cluster.nodes[&leader].peer_status().is_empty());
    // The last leader commits alone.
    cluster
        .nodes
        .get_mut(&leader)
        .unwrap()
        .propose(Bytes::from_static(b"alone"))
        .unwrap();
    cluster.run_until_quiet();
    assert_eq!(
        cluster.applied[&leader].last(),
        Some(&Bytes::from_static(b"alone"))
    );
    // Removed nodes stay quiet: no campaign disturbs the leader.
    for _ in 0..100 {
        cluster.tick_all();
    }
    assert_eq!(cluster.leader(), Some(leader));
}
