//! One vote per term: a node id grants at most one candidate its vote in a
//! term, across every store that ever ran under that id. Votes are recorded
//! as they become durable (a vote lost with an unsynced write was never
//! sent, and the node may vote again). The disk checks the same within one
//! store; this checker also sees a store that was wiped and came back under
//! the id it had before (`HostCanary::WipeKeepsIdentity`), which may vote a
//! second time in a term it voted in and so elect two leaders.

use std::collections::BTreeMap;

use crate::types::{NodeId, Term};

#[derive(Debug, Default)]
pub struct SingleVote {
    votes: BTreeMap<(NodeId, Term), NodeId>,
}

impl SingleVote {
    pub fn new() -> SingleVote {
        SingleVote::default()
    }

    /// `voter`'s vote for `candidate` in `term` became durable.
    pub fn on_vote(&mut self, voter: NodeId, term: Term, candidate: NodeId) -> Result<(), String> {
        match self.votes.insert((voter, term), candidate) {
            Some(earlier) if earlier != candidate => Err(format!(
                "node {voter} voted for {earlier} and then for {candidate} in term {term}"
            )),
            _ => Ok(()),
        }
    }

    pub fn votes(&self) -> usize {
        self.votes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_candidate_in_one_term_is_reported() {
        let mut checker = SingleVote::new();
        assert!(checker.on_vote(1, 3, 2).is_ok());
        assert!(checker.on_vote(1, 3, 2).is_ok(), "the same vote again");
        assert!(checker.on_vote(1, 4, 3).is_ok(), "another term");
        assert!(checker.on_vote(2, 3, 3).is_ok(), "another voter");
        let error = checker.on_vote(1, 3, 3).expect_err("a double vote");
        assert!(
            error.contains("voted for 2 and then for 3 in term 3"),
            "{error}"
        );
    }
}
