//! The client oracle: every proposal has an id; a proposal is acknowledged
//! when the node it was proposed to applies it. Every node applies only
//! proposals some client made, each at most once, all in one order (each id
//! at one position of one global sequence, with one hash chain); and once
//! the group has converged, every acknowledged proposal is applied on every
//! voter.

use std::collections::{BTreeMap, BTreeSet};

use crate::sim::state_machine::{AppliedProposal, StateMachine};
use crate::types::{Index, NodeId, Term};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposal {
    pub node: NodeId,
    pub term: Term,
    pub index: Index,
}

#[derive(Debug, Default)]
pub struct ClientOracle {
    next_id: u64,
    proposals: BTreeMap<u64, Proposal>,
    /// The global applied order: (id, hash chain after it) by position.
    sequence: Vec<(u64, u64)>,
    /// id -> position in `sequence`.
    positions: BTreeMap<u64, u64>,
    acknowledged: BTreeSet<u64>,
}

impl ClientOracle {
    pub fn new() -> ClientOracle {
        ClientOracle {
            next_id: 1,
            ..ClientOracle::default()
        }
    }

    pub fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub fn on_propose(&mut self, id: u64, proposal: Proposal) {
        self.proposals.insert(id, proposal);
    }

    pub fn proposals(&self) -> usize {
        self.proposals.len()
    }

    pub fn acknowledged(&self) -> usize {
        self.acknowledged.len()
    }

    pub fn is_acknowledged(&self, id: u64) -> bool {
        self.acknowledged.contains(&id)
    }

    /// `node` applied a proposal at `index`. Returns whether this
    /// acknowledged it.
    pub fn on_apply(
        &mut self,
        node: NodeId,
        index: Index,
        applied: AppliedProposal,
    ) -> Result<bool, String> {
        let AppliedProposal {
            id,
            position,
            chain,
        } = applied;
        let Some(proposal) = self.proposals.get(&id).copied() else {
            return Err(format!(
                "node {node} applied proposal #{id}, which no client made"
            ));
        };
        match self.positions.get(&id) {
            Some(&first) if first != position => {
                return Err(format!(
                    "node {node} applied proposal #{id} as its proposal number {position}, it was number {first} before (applied twice or out of order)"
                ));
            }
            _ => {}
        }
        self.check_position(node, id, position, chain)?;
        self.positions.insert(id, position);
        let acknowledged = proposal.node == node && self.acknowledged.insert(id);
        if acknowledged && proposal.index != index {
            return Err(format!(
                "proposal #{id} was given index {} by node {node} but applied at {index}",
                proposal.index
            ));
        }
        Ok(acknowledged)
    }

    fn check_position(
        &mut self,
        node: NodeId,
        id: u64,
        position: u64,
        chain: u64,
    ) -> Result<(), String> {
        let length = self.sequence.len() as u64;
        if position < length {
            let (expected_id, expected_chain) = self.sequence[position as usize];
            if expected_id != id || expected_chain != chain {
                return Err(format!(
                    "node {node} applied proposal #{id} as number {position}, where #{expected_id} was applied (different order)"
                ));
            }
            return Ok(());
        }
        if position > length {
            return Err(format!(
                "node {node} applied proposal #{id} as number {position}, but only {length} were ever applied"
            ));
        }
        self.sequence.push((id, chain));
        Ok(())
    }

    /// `node`'s state machine was replaced by a snapshot: its proposals
    /// must be a prefix of the global order.
    pub fn on_install(&self, node: NodeId, machine: &StateMachine) -> Result<(), String> {
        if machine.count == 0 {
            return Ok(());
        }
        match self.sequence.get(machine.count as usize - 1) {
            Some((_, chain)) if *chain == machine.chain => Ok(()),
            _ => Err(format!(
                "node {node} installed a snapshot holding {} proposals that are not the first {} ever applied",
                machine.count, machine.count
            )),
        }
    }

    /// After convergence: every acknowledged proposal is in every state machine.
    pub fn check_converged(&self, machines: &[(NodeId, &StateMachine)]) -> Result<(), String> {
        for (node, machine) in machines {
            self.on_install(*node, machine)?;
            for id in &self.acknowledged {
                let position = self.positions[id];
                if position >= machine.count {
                    return Err(format!(
                        "acknowledged proposal #{id} (number {position}) is missing on node {node}, which applied {} proposals",
                        machine.count
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::state_machine::chain;

    fn applied(id: u64, position: u64, previous: u64) -> AppliedProposal {
        AppliedProposal {
            id,
            position,
            chain: chain(previous, id),
        }
    }

    #[test]
    fn duplicates_reorders_and_inventions_are_reported() {
        let mut oracle = ClientOracle::new();
        let first = oracle.next_id();
        let second = oracle.next_id();
        for (id, index) in [(first, 1), (second, 2)] {
            oracle.on_propose(
                id,
                Proposal {
                    node: 1,
                    term: 1,
                    index,
                },
            );
        }
        let one = applied(first, 0, 0);
        assert!(oracle.on_apply(1, 1, one).unwrap(), "acknowledged");
        assert!(!oracle.on_apply(2, 1, one).unwrap());
        assert!(
            oracle.on_apply(1, 2, applied(first, 1, one.chain)).is_err(),
            "twice"
        );
        assert!(
            oracle.on_apply(3, 1, applied(second, 0, 0)).is_err(),
            "order"
        );
        assert!(
            oracle.on_apply(3, 1, applied(99, 0, 0)).is_err(),
            "invented"
        );
    }
}
