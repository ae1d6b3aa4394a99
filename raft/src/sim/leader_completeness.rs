//! Leader completeness: an entry committed in some term is in the log of
//! every leader of every later term.
//!
//! Every commit index any node reports is taken at its word: the entries up
//! to it (as that node's log holds them) are recorded as committed, and a
//! different entry committed at the same index is reported too. A node in
//! term `t` knows of commits made in `t` or earlier (a follower learns its
//! commit index from the leader of its own term), so each entry is also
//! recorded with the lowest term a node reporting it committed was in: it
//! was committed in that term at the latest. When a node becomes leader of
//! term `t`, its log must hold every entry recorded as committed in a term
//! before `t`. Not every entry recorded so far: a candidate whose election
//! ends late (a vote granted in its term arrives after the voter moved on)
//! legitimately leads a term older than one in which entries were
//! committed already, without them (simulator seed 31983: node 10 leads
//! term 28 after entry 476 of term 29 was committed; it cannot commit, as
//! its voters have moved on).

use std::collections::BTreeMap;

use crate::log::RaftLog;
use crate::types::{Index, NodeId, Term};

#[derive(Debug, Default)]
pub struct LeaderCompleteness {
    /// index -> the term of the entry committed there, and the term it was
    /// committed in at the latest.
    committed: BTreeMap<Index, (Term, Term)>,
    /// Highest commit index seen per node (since its last restart).
    seen: BTreeMap<NodeId, Index>,
    highest: Index,
}

impl LeaderCompleteness {
    pub fn new() -> LeaderCompleteness {
        LeaderCompleteness::default()
    }

    /// The highest index anyone has reported committed.
    pub fn highest_committed(&self) -> Index {
        self.highest
    }

    /// `node` restarted: its commit index starts over.
    pub fn on_restart(&mut self, node: NodeId, commit: Index) {
        self.seen.insert(node, commit);
    }

    /// `node`, in `node_term`, reports `commit`. Returns whether its commit
    /// index moved.
    pub fn on_commit(
        &mut self,
        node: NodeId,
        node_term: Term,
        log: &RaftLog,
        commit: Index,
    ) -> Result<bool, String> {
        let seen = self.seen.entry(node).or_insert(0);
        if commit <= *seen {
            *seen = commit;
            return Ok(false);
        }
        let from = (*seen + 1).max(log.snapshot_index());
        *seen = commit;
        self.highest = self.highest.max(commit);
        for index in from..=commit {
            let Some(term) = log.term_at(index) else {
                return Err(format!(
                    "node {node} reports commit index {commit} but its log ends at {}",
                    log.last_index()
                ));
            };
            let (earlier, committed_in) = self.committed.entry(index).or_insert((term, node_term));
            if *earlier != term {
                return Err(format!(
                    "node {node} committed entry {index} of term {term}, but an entry of term {earlier} was committed there before"
                ));
            }
            *committed_in = (*committed_in).min(node_term);
        }
        Ok(true)
    }

    /// `node` just became leader of `term`.
    pub fn on_leader(&self, node: NodeId, term: Term, log: &RaftLog) -> Result<(), String> {
        let committed = self.committed.range(log.snapshot_index()..);
        for (&index, &(committed_term, committed_in)) in committed {
            if committed_in >= term {
                continue;
            }
            match log.term_at(index) {
                Some(held) if held == committed_term => {}
                held => {
                    return Err(format!(
                        "node {node} became leader of term {term} without committed entry {index}/{committed_term} (its log holds {held:?} there, ends at {})",
                        log.last_index()
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
    use crate::types::{Entry, EntryKind};

    fn log(terms: &[Term]) -> RaftLog {
        let entries = terms
            .iter()
            .enumerate()
            .map(|(offset, term)| Entry {
                index: offset as u64 + 1,
                term: *term,
                kind: EntryKind::Noop,
            })
            .collect();
        RaftLog::new(0, 0, entries)
    }

    #[test]
    fn a_leader_missing_a_committed_entry_is_reported() {
        let mut checker = LeaderCompleteness::new();
        assert!(checker.on_commit(1, 2, &log(&[1, 1, 2]), 3).unwrap());
        assert!(checker.on_leader(2, 3, &log(&[1, 1, 2, 3])).is_ok());
        assert!(checker.on_leader(3, 3, &log(&[1, 1])).is_err());
        assert!(checker.on_commit(3, 3, &log(&[1, 1, 3]), 3).is_err());
    }

    /// Seed 31983's pattern: term 29 commits entry 3 while a candidate of
    /// term 28 still waits for a vote; it leads term 28 without it.
    #[test]
    fn a_late_leader_of_an_older_term_needs_only_what_was_committed_before_it() {
        let mut checker = LeaderCompleteness::new();
        assert!(checker.on_commit(1, 29, &log(&[27, 27, 29]), 3).unwrap());
        assert!(checker.on_leader(2, 28, &log(&[27, 27, 28])).is_ok());
        assert!(
            checker.on_leader(2, 28, &log(&[27])).is_ok(),
            "nothing is known committed before term 28 yet"
        );
        // A follower of term 27 learns entry 2 committed: committed in 27.
        assert!(checker.on_commit(3, 27, &log(&[27, 27]), 2).unwrap());
        assert!(checker.on_leader(2, 28, &log(&[27])).is_err());
        assert!(checker.on_leader(2, 30, &log(&[27, 27, 28])).is_err());
    }
}
