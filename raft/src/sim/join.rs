//! How a wiped node gets back into the group: the rule the leader follows
//! for a node that asks to join. The simulator's own rule, [`join_step`],
//! mirrors the broker's (`tern_broker::jetstream::meta::membership::
//! join_change`, which this crate cannot name: the broker depends on it):
//!
//! 1. a joiner that is a voter already needs nothing;
//! 2. a voter of another id under the joiner's name (its host) goes first
//!    (`RemoveVoter`): that id's store is gone, and the new store never
//!    votes in a term its predecessor voted in;
//! 3. then the joiner itself (`AddVoter`).
//!
//! A host that links this crate's simulator with the production rule
//! passes its own as [`crate::sim::SimConfig::join_rule`] (the broker's
//! `jetstream::sim` tests do), so the simulator runs the production code.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::{EntryKind, NodeId};

/// The group as the leader's applied state has it, and who asks to join.
#[derive(Debug, Clone, Copy)]
pub struct JoinView<'a> {
    pub voters: &'a [NodeId],
    /// Every id the run ever gave out, with its host's name.
    pub names: &'a BTreeMap<NodeId, String>,
    /// Ids whose store was wiped: never taken back.
    pub removed: &'a BTreeSet<NodeId>,
    pub joiner: NodeId,
    pub name: &'a str,
}

/// The next membership change the leader proposes for a joiner; `None`
/// once it is a voter.
pub type JoinRule = fn(&JoinView<'_>) -> Option<EntryKind>;

/// The simulator's rule (see the module doc).
pub fn join_step(view: &JoinView<'_>) -> Option<EntryKind> {
    assert!(
        !view.removed.contains(&view.joiner),
        "node {} asks to join under an id removed for good",
        view.joiner
    );
    if view.voters.contains(&view.joiner) {
        return None;
    }
    let predecessor = view.voters.iter().copied().find(|voter| {
        *voter != view.joiner && view.names.get(voter).map(String::as_str) == Some(view.name)
    });
    Some(match predecessor {
        Some(voter) => EntryKind::RemoveVoter(voter),
        None => EntryKind::AddVoter(view.joiner),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_old_identity_goes_first_then_the_new_one_joins() {
        let names: BTreeMap<NodeId, String> = [(1, "a"), (2, "b"), (3, "c"), (6, "c"), (7, "d")]
            .into_iter()
            .map(|(id, name)| (id, name.to_string()))
            .collect();
        let removed: BTreeSet<NodeId> = [3].into_iter().collect();
        let view = |voters: &'static [NodeId], joiner, name: &'static str| JoinView {
            voters,
            names: &names,
            removed: &removed,
            joiner,
            name,
        };
        assert_eq!(
            join_step(&view(&[1, 2, 3], 6, "c")),
            Some(EntryKind::RemoveVoter(3))
        );
        assert_eq!(
            join_step(&view(&[1, 2], 6, "c")),
            Some(EntryKind::AddVoter(6))
        );
        assert_eq!(join_step(&view(&[1, 2, 6], 6, "c")), None);
        assert_eq!(
            join_step(&view(&[1, 2, 6], 7, "d")),
            Some(EntryKind::AddVoter(7)),
            "a host that was no voter is added"
        );
    }
}
