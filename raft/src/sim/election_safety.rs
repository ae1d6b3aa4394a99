//! Election safety: at most one leader is elected in a given term.

use std::collections::BTreeMap;

use crate::types::{NodeId, Term};

#[derive(Debug, Default)]
pub struct ElectionSafety {
    leaders: BTreeMap<Term, NodeId>,
}

impl ElectionSafety {
    pub fn new() -> ElectionSafety {
        ElectionSafety::default()
    }

    /// `node` was seen leading in `term`.
    pub fn on_leader(&mut self, node: NodeId, term: Term) -> Result<(), String> {
        match self.leaders.insert(term, node) {
            Some(other) if other != node => Err(format!(
                "nodes {other} and {node} were both leader in term {term}"
            )),
            _ => Ok(()),
        }
    }

    pub fn elections(&self) -> usize {
        self.leaders.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_leaders_in_one_term_are_reported() {
        let mut checker = ElectionSafety::new();
        assert!(checker.on_leader(1, 3).is_ok());
        assert!(checker.on_leader(1, 3).is_ok());
        assert!(checker.on_leader(2, 4).is_ok());
        assert!(checker.on_leader(2, 3).is_err());
    }
}
