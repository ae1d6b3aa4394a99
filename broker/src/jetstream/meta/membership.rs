//! The meta group's own membership as its leader decides it, sans-IO.
//!
//! Nodes join by asking: a node that hears no meta leader announces itself
//! to every node it links to (`$JS.API.$TERN.META.JOIN`, its Raft id and
//! server name); the leader answers with one membership change at a time
//! ([`join_change`]):
//!
//! 1. a node it has no name for: the name first (a `name` entry), so the
//!    node stays named while it is down;
//! 2. a node whose name a voter of another id holds: that voter goes
//!    (`RemoveVoter`). Only one live node holds a name (the routes refuse
//!    a second), so the store behind the old id is gone (a wiped disk, a
//!    new host under the old name); the new store joins under its own id,
//!    never voting again in a term its predecessor voted in;
//! 3. then the node itself (`AddVoter`).
//!
//! A node removed for good (`$JS.API.SERVER.REMOVE`, or replaced) is never
//! taken back under that id.
//!
//! Streams placed on a node that is no longer a voter move, one replica
//! at a time, to a voter that can take them ([`stranded_replicas`]); a
//! one-replica stream does not (its only copy was there).

use std::collections::{BTreeMap, BTreeSet};

use tern_raft::NodeId;

use super::cluster::Placement;

/// A node asking to join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joiner {
    pub node: NodeId,
    pub name: String,
}

/// The group as the leader's applied state has it.
pub struct MembershipView<'a> {
    pub voters: &'a [NodeId],
    pub names: &'a BTreeMap<NodeId, String>,
    pub removed: &'a BTreeSet<NodeId>,
}

/// One step the leader proposes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MembershipChange {
    /// Record the node's server name (a `name` entry).
    Name {
        node: NodeId,
        name: String,
    },
    Add(NodeId),
    Remove(NodeId),
}

/// Why a node asking to join is not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinRefusal {
    /// It is a voter already.
    Member,
    /// Its id was removed for good.
    Removed,
}

/// The next change for `joiner` (see the module doc).
pub fn join_change(
    view: &MembershipView<'_>,
    joiner: &Joiner,
) -> Result<MembershipChange, JoinRefusal> {
    assert!(joiner.node != 0, "a node id is never 0");
    if view.removed.contains(&joiner.node) {
        return Err(JoinRefusal::Removed);
    }
    if view.voters.contains(&joiner.node) {
        return Err(JoinRefusal::Member);
    }
    if view.names.get(&joiner.node) != Some(&joiner.name) {
        return Ok(MembershipChange::Name {
            node: joiner.node,
            name: joiner.name.clone(),
        });
    }
    let predecessor = view
        .voters
        .iter()
        .copied()
        .find(|voter| *voter != joiner.node && view.names.get(voter) == Some(&joiner.name));
    match predecessor {
        Some(voter) => Ok(MembershipChange::Remove(voter)),
        None => Ok(MembershipChange::Add(joiner.node)),
    }
}

/// A replicated stream with a replica on a node that is no longer a
/// voter: `stranded` is that node.
#[derive(Debug, Clone, PartialEq)]
pub struct Stranded {
    pub name: String,
    pub placement: Placement,
    pub stranded: NodeId,
}

/// Every replicated stream holding a replica on a node outside `voters`
/// (the first such node of each), by name. One-replica streams are left
/// where they are: their only copy was on that node.
pub fn stranded_replicas<'a>(
    streams: impl IntoIterator<Item = (&'a String, &'a Placement)>,
    voters: &[NodeId],
) -> Vec<Stranded> {
    streams
        .into_iter()
        .filter(|(_, placement)| placement.peers.len() > 1)
        .filter_map(|(name, placement)| {
            let stranded = placement
                .peers
                .iter()
                .copied()
                .find(|peer| !voters.contains(peer))?;
            Some(Stranded {
                name: name.clone(),
                placement: placement.clone(),
                stranded,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(pairs: &[(NodeId, &str)]) -> BTreeMap<NodeId, String> {
        pairs
            .iter()
            .map(|(node, name)| (*node, name.to_string()))
            .collect()
    }

    fn joiner(node: NodeId, name: &str) -> Joiner {
        Joiner {
            node,
            name: name.to_string(),
        }
    }

    #[test]
    fn a_new_node_is_named_then_added() {
        let voters = [1, 2, 3];
        let mut known = names(&[(1, "n1"), (2, "n2"), (3, "n3")]);
        let removed = BTreeSet::new();
        let view = MembershipView {
            voters: &voters,
            names: &known,
            removed: &removed,
        };
        assert_eq!(
            join_change(&view, &joiner(4, "n4")),
            Ok(MembershipChange::Name {
                node: 4,
                name: "n4".into()
            })
        );
        known.insert(4, "n4".into());
        let view = MembershipView {
            voters: &voters,
            names: &known,
            removed: &removed,
        };
        assert_eq!(
            join_change(&view, &joiner(4, "n4")),
            Ok(MembershipChange::Add(4))
        );
        assert_eq!(
            join_change(&view, &joiner(2, "n2")),
            Err(JoinRefusal::Member)
        );
    }

    #[test]
    fn a_wiped_node_replaces_its_old_identity_and_never_gets_it_back() {
        let voters = [1, 2, 3];
        let known = names(&[(1, "n1"), (2, "n2"), (3, "n3"), (9, "n3")]);
        let mut removed = BTreeSet::new();
        let view = MembershipView {
            voters: &voters,
            names: &known,
            removed: &removed,
        };
        // Node 9 comes back under n3's name: n3's old id goes first.
        assert_eq!(
            join_change(&view, &joiner(9, "n3")),
            Ok(MembershipChange::Remove(3))
        );
        removed.insert(3);
        let voters = [1, 2];
        let view = MembershipView {
            voters: &voters,
            names: &known,
            removed: &removed,
        };
        assert_eq!(
            join_change(&view, &joiner(9, "n3")),
            Ok(MembershipChange::Add(9))
        );
        // The old id (its store restored from a backup, say) is refused.
        assert_eq!(
            join_change(&view, &joiner(3, "n3")),
            Err(JoinRefusal::Removed)
        );
    }

    #[test]
    fn replicated_streams_on_a_former_voter_are_stranded() {
        let placement = |peers: &[NodeId]| Placement {
            group: 1,
            peers: peers.to_vec(),
            created_unix_ns: 0,
        };
        let streams: BTreeMap<String, Placement> = [
            ("A".to_string(), placement(&[1, 2, 3])),
            ("B".to_string(), placement(&[3])),
            ("C".to_string(), placement(&[1, 3, 4])),
        ]
        .into_iter()
        .collect();
        let stranded = stranded_replicas(&streams, &[1, 2, 4]);
        assert_eq!(
            stranded
                .iter()
                .map(|s| (s.name.as_str(), s.stranded))
                .collect::<Vec<_>>(),
            vec![("A", 3), ("C", 3)],
            "B's only replica stays"
        );
        assert!(stranded_replicas(&streams, &[1, 2, 3, 4]).is_empty());
    }
}
