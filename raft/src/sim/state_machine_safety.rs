//! State machine safety: no two nodes apply different entries at the same
//! index, and each node applies indexes in order without gaps (a snapshot
//! install jumps to the snapshot's index, which must then agree with what
//! was applied there).

use std::collections::BTreeMap;

use crate::types::{Entry, EntryKind, Index, NodeId, Term};

#[derive(Debug, Default)]
pub struct StateMachineSafety {
    applied: BTreeMap<Index, (Term, EntryKind)>,
}

impl StateMachineSafety {
    pub fn new() -> StateMachineSafety {
        StateMachineSafety::default()
    }

    /// `node`, whose state machine is at `applied_index`, applies `entry`.
    pub fn on_apply(
        &mut self,
        node: NodeId,
        applied_index: Index,
        entry: &Entry,
    ) -> Result<(), String> {
        if entry.index != applied_index + 1 {
            return Err(format!(
                "node {node} applied entry {} right after {applied_index}",
                entry.index
            ));
        }
        match self.applied.get(&entry.index) {
            None => {
                self.applied
                    .insert(entry.index, (entry.term, entry.kind.clone()));
                Ok(())
            }
            Some((term, kind)) if *term == entry.term && *kind == entry.kind => Ok(()),
            Some((term, kind)) => Err(format!(
                "node {node} applied {}/{} {:?} where another node applied term {term} {kind:?}",
                entry.index, entry.term, entry.kind
            )),
        }
    }

    /// `node` replaced its state machine with a snapshot at `index`/`term`.
    pub fn on_install(&self, node: NodeId, index: Index, term: Term) -> Result<(), String> {
        match self.applied.get(&index) {
            Some((applied_term, _)) if *applied_term != term => Err(format!(
                "node {node} installed a snapshot at {index}/{term} where term {applied_term} was applied"
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: Index, term: Term) -> Entry {
        Entry {
            index,
            term,
            kind: EntryKind::Noop,
        }
    }

    #[test]
    fn different_entries_at_one_index_are_reported() {
        let mut checker = StateMachineSafety::new();
        assert!(checker.on_apply(1, 0, &entry(1, 1)).is_ok());
        assert!(checker.on_apply(2, 0, &entry(1, 1)).is_ok());
        assert!(checker.on_apply(3, 0, &entry(1, 2)).is_err());
        assert!(checker.on_apply(1, 1, &entry(3, 1)).is_err(), "gap");
        assert!(checker.on_install(2, 1, 2).is_err());
    }
}
