//! Leader completeness: an entry committed in some term is in the log of
//! every leader of every later term.
//!
//! Every commit index any node reports is taken at its word: the entries up
//! to it (as that node's log holds them) are recorded as committed, and a
//! different entry committed at the same index is reported too. When a node
//! becomes leader, its log must hold every entry recorded so far (all were
//! committed in earlier terms: a new leader has committed nothing yet).

use std::collections::BTreeMap;

use crate::log::RaftLog;
use crate::types::{Index, NodeId, Term};

#[derive(Debug, Default)]
pub struct LeaderCompleteness {
    /// index -> term of the entry committed there.
    committed: BTreeMap<Index, Term>,
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

    /// Returns whether `node`'s commit index moved.
    pub fn on_commit(
        &mut self,
        node: NodeId,
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
            match self.committed.insert(index, term) {
                Some(earlier) if earlier != term => {
                    return Err(format!(
                        "node {node} committed entry {index} of term {term}, but an entry of term {earlier} was committed there before"
                    ));
                }
                _ => {}
            }
        }
        Ok(true)
    }

    /// `node` just became leader of `term`.
    pub fn on_leader(&self, node: NodeId, term: Term, log: &RaftLog) -> Result<(), String> {
        for (&index, &committed_term) in self.committed.range(log.snapshot_index()..) {
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
        assert!(checker.on_commit(1, &log(&[1, 1, 2]), 3).unwrap());
        assert!(checker.on_leader(2, 3, &log(&[1, 1, 2, 3])).is_ok());
        assert!(checker.on_leader(3, 3, &log(&[1, 1])).is_err());
        assert!(checker.on_commit(3, &log(&[1, 1, 3]), 3).is_err());
    }
}
