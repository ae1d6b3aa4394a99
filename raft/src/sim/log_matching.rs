//! Log matching: if two logs hold an entry with the same index and term,
//! they hold the same entry there and are identical in all entries before.
//!
//! Checked two ways: every entry any node hands out for persistence is
//! recorded by (index, term) with its content and the term of the entry
//! before it, and a second entry with the same (index, term) must agree on
//! both (by induction that is the whole property, for every log that ever
//! existed, durable or not); and the live logs are compared pairwise.

use std::collections::BTreeMap;

use crate::log::RaftLog;
use crate::types::{Entry, EntryKind, Index, NodeId, Term};

#[derive(Debug, Default)]
pub struct LogMatching {
    /// (index, term) -> (content, term of the entry before).
    seen: BTreeMap<(Index, Term), (EntryKind, Term)>,
}

impl LogMatching {
    pub fn new() -> LogMatching {
        LogMatching::default()
    }

    /// `node` handed out `entries` (contiguous, the end of `log`) for persistence.
    pub fn on_append(
        &mut self,
        node: NodeId,
        entries: &[Entry],
        log: &RaftLog,
    ) -> Result<(), String> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let mut previous_term = log.term_at(first.index - 1).ok_or_else(|| {
            format!(
                "node {node} appended entry {} with no entry before it in its log",
                first.index
            )
        })?;
        for entry in entries {
            if entry.term < previous_term {
                return Err(format!(
                    "node {node} appended entry {}/{} after an entry of term {previous_term}",
                    entry.index, entry.term
                ));
            }
            self.record(node, entry, previous_term)?;
            previous_term = entry.term;
        }
        Ok(())
    }

    fn record(&mut self, node: NodeId, entry: &Entry, previous_term: Term) -> Result<(), String> {
        let key = (entry.index, entry.term);
        match self.seen.get(&key) {
            None => {
                self.seen.insert(key, (entry.kind.clone(), previous_term));
                Ok(())
            }
            Some((kind, _)) if *kind != entry.kind => Err(format!(
                "node {node} holds entry {}/{} as {:?}, another log held {:?}",
                entry.index, entry.term, entry.kind, kind
            )),
            Some((_, term)) if *term != previous_term => Err(format!(
                "node {node} holds entry {}/{} after an entry of term {previous_term}, another log after term {term}",
                entry.index, entry.term
            )),
            Some(_) => Ok(()),
        }
    }

    /// Compares the live logs pairwise.
    pub fn check_logs(logs: &[(NodeId, &RaftLog)]) -> Result<(), String> {
        for (position, (one, one_log)) in logs.iter().enumerate() {
            for (other, other_log) in &logs[position + 1..] {
                check_pair(*one, one_log, *other, other_log)?;
            }
        }
        Ok(())
    }
}

/// Below the highest index where both logs have the same term, every entry
/// both still hold must be identical.
fn check_pair(
    one: NodeId,
    one_log: &RaftLog,
    other: NodeId,
    other_log: &RaftLog,
) -> Result<(), String> {
    let low = one_log.snapshot_index().max(other_log.snapshot_index());
    let high = one_log.last_index().min(other_log.last_index());
    let mut index = high;
    while index > low && one_log.term_at(index) != other_log.term_at(index) {
        index -= 1;
    }
    if index == low && one_log.term_at(low) != other_log.term_at(low) {
        // Only one side's snapshot covers `low`: nothing comparable.
        return Ok(());
    }
    for at in (low + 1..=index).rev() {
        let (Some(left), Some(right)) = (one_log.entry(at), other_log.entry(at)) else {
            continue;
        };
        if left != right {
            return Err(format!(
                "nodes {one} and {other} agree on entry {index}/{} but differ at {at}: {left:?} vs {right:?}",
                one_log.term_at(index).unwrap_or(0)
            ));
        }
    }
    Ok(())
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
    fn same_index_and_term_with_another_predecessor_is_reported() {
        let mut checker = LogMatching::new();
        let one = RaftLog::new(0, 0, vec![entry(1, 1), entry(2, 2)]);
        let other = RaftLog::new(0, 0, vec![entry(1, 2), entry(2, 2)]);
        assert!(checker.on_append(1, &[entry(2, 2)], &one).is_ok());
        assert!(checker.on_append(2, &[entry(2, 2)], &other).is_err());
        assert!(LogMatching::check_logs(&[(1, &one), (2, &other)]).is_err());
        let same = RaftLog::new(0, 0, vec![entry(1, 1), entry(2, 2), entry(3, 2)]);
        assert!(LogMatching::check_logs(&[(1, &one), (3, &same)]).is_ok());
    }
}
