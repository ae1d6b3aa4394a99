//! Read-index safety (an extra checker): a read state never returns an
//! index below the highest index committed anywhere when the read started.

use std::collections::BTreeMap;

use crate::node::ReadState;
use crate::types::{Index, NodeId};

#[derive(Debug, Default)]
pub struct ReadIndexSafety {
    /// context -> highest index committed anywhere when the read started.
    started: BTreeMap<u64, Index>,
    answered: u64,
}

impl ReadIndexSafety {
    pub fn new() -> ReadIndexSafety {
        ReadIndexSafety::default()
    }

    pub fn on_start(&mut self, context: u64, committed: Index) {
        self.started.insert(context, committed);
    }

    pub fn answered(&self) -> u64 {
        self.answered
    }

    pub fn on_read_state(&mut self, node: NodeId, read: ReadState) -> Result<(), String> {
        let Some(committed) = self.started.remove(&read.context) else {
            return Err(format!(
                "node {node} answered read #{}, which was never started or already answered",
                read.context
            ));
        };
        self.answered += 1;
        if read.index < committed {
            return Err(format!(
                "node {node} answered read #{} with index {}, but {committed} was committed before the read started",
                read.context, read.index
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_reads_are_reported() {
        let mut checker = ReadIndexSafety::new();
        checker.on_start(1, 5);
        checker.on_start(2, 5);
        assert!(checker
            .on_read_state(
                1,
                ReadState {
                    context: 1,
                    index: 5
                }
            )
            .is_ok());
        assert!(checker
            .on_read_state(
                1,
                ReadState {
                    context: 1,
                    index: 5
                }
            )
            .is_err());
        assert!(checker
            .on_read_state(
                1,
                ReadState {
                    context: 2,
                    index: 4
                }
            )
            .is_err());
    }
}
