//! The Raft simulator (`tern_raft::sim`) run with the meta leader's
//! production join rule ([`join_change`]) instead of the simulator's
//! mirror of it: a node whose whole store is wiped comes back under a new
//! id, and the leader removes the old id, then adds the new one, one change
//! at a time (`Node::propose_membership`), deciding each step with the code
//! the meta leader runs. The tests run seeds with wipes, clean, and with the
//! canary that keeps the old id (the checkers catch its double votes), and
//! check the two rules agree on every small case.

use tern_raft::sim::join::JoinView;
use tern_raft::EntryKind;

use crate::jetstream::meta::membership::{
    join_change, JoinRefusal, Joiner, MembershipChange, MembershipView,
};

/// [`join_change`] as a `tern_raft::sim::join::JoinRule`.
pub fn production_join_rule(view: &JoinView<'_>) -> Option<EntryKind> {
    let membership = MembershipView {
        voters: view.voters,
        names: view.names,
        removed: view.removed,
    };
    let joiner = Joiner {
        node: view.joiner,
        name: view.name.to_string(),
    };
    match join_change(&membership, &joiner) {
        Ok(MembershipChange::Remove(node)) => Some(EntryKind::RemoveVoter(node)),
        Ok(MembershipChange::Add(node)) => Some(EntryKind::AddVoter(node)),
        Err(JoinRefusal::Member) => None,
        Ok(MembershipChange::Name { node, .. }) => {
            panic!("node {node} has no name: the simulator names every id it gives out")
        }
        Err(JoinRefusal::Removed) => {
            panic!("node {} asks to join under a removed id", view.joiner)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use tern_raft::sim::join::join_step;
    use tern_raft::sim::{self, HostCanary, SimConfig};
    use tern_raft::NodeId;

    use super::*;

    fn config(host_canary: Option<HostCanary>) -> SimConfig {
        SimConfig {
            host_canary,
            join_rule: production_join_rule,
            ..SimConfig::default()
        }
    }

    #[test]
    fn wiped_nodes_rejoin_by_the_production_rule_without_violations() {
        let config = config(None);
        let mut total = sim::Stats::default();
        for seed in 0..12 {
            match sim::run(seed, &config) {
                Ok(stats) => total.add(&stats),
                Err(violation) => panic!("{violation}"),
            }
        }
        assert!(total.wipes >= 12, "{total}");
    }

    #[test]
    fn a_wiped_node_under_its_old_id_is_caught_voting_twice() {
        let config = config(Some(HostCanary::WipeKeepsIdentity));
        let found: Vec<&str> = (0..12)
            .filter_map(|seed| sim::run(seed, &config).err())
            .map(|violation| violation.invariant)
            .collect();
        assert!(found.contains(&"one vote per term"), "{found:?}");
    }

    /// Every group of up to 4 voters drawn from ids 1..=6 on hosts n1..n3
    /// (ids 4..=6 the new ids of n1..n3), every joiner among them not
    /// removed: the simulator's mirror decides as production does.
    #[test]
    fn the_simulators_join_rule_is_the_production_rule() {
        let names: BTreeMap<NodeId, String> = (1..=6)
            .map(|id| (id, format!("n{}", (id - 1) % 3 + 1)))
            .collect();
        let mut cases = 0;
        for voter_bits in 0u32..64 {
            let voters: Vec<NodeId> = (1..=6)
                .filter(|id| voter_bits & (1 << (id - 1)) != 0)
                .collect();
            if voters.len() > 4 {
                continue;
            }
            for removed_bits in 0u32..64 {
                let removed: BTreeSet<NodeId> = (1..=6)
                    .filter(|id| removed_bits & (1 << (id - 1)) != 0)
                    .collect();
                for joiner in (1..=6).filter(|id| !removed.contains(id)) {
                    let view = JoinView {
                        voters: &voters,
                        names: &names,
                        removed: &removed,
                        joiner,
                        name: &names[&joiner],
                    };
                    assert_eq!(
                        join_step(&view),
                        production_join_rule(&view),
                        "voters {voters:?}, removed {removed:?}, joiner {joiner}"
                    );
                    cases += 1;
                }
            }
        }
        assert!(cases > 1000);
    }
}
