//! The replicated log as one node sees it: a compacted prefix (the snapshot)
//! and the entries after it, some not yet durable. Tracks what has been
//! handed out for persistence, what the caller reported durable, and what is
//! committed and applied.

use std::collections::VecDeque;

use crate::types::{Entry, Index, Term};

#[derive(Debug, Clone)]
pub struct RaftLog {
    snapshot_index: Index,
    snapshot_term: Term,
    /// `entries[i].index == snapshot_index + 1 + i`.
    entries: VecDeque<Entry>,
    /// Entries from here on have not been handed out for persistence.
    unhanded_from: Index,
    /// A truncation not yet handed out: delete entries from this index.
    truncated_from: Option<Index>,
    /// Highest index the caller reported durable.
    pub(crate) persisted: Index,
    pub(crate) committed: Index,
    /// Highest index handed out as committed.
    pub(crate) applied: Index,
}

impl RaftLog {
    pub fn new(snapshot_index: Index, snapshot_term: Term, entries: Vec<Entry>) -> RaftLog {
        for (offset, entry) in entries.iter().enumerate() {
            assert_eq!(
                entry.index,
                snapshot_index + 1 + offset as u64,
                "restored entries are contiguous"
            );
        }
        let last = snapshot_index + entries.len() as u64;
        RaftLog {
            snapshot_index,
            snapshot_term,
            entries: entries.into(),
            unhanded_from: last + 1,
            truncated_from: None,
            persisted: last,
            committed: snapshot_index,
            applied: snapshot_index,
        }
    }

    pub fn snapshot_index(&self) -> Index {
        self.snapshot_index
    }

    /// The highest index this node made durable (what a host may
    /// checkpoint up to).
    pub fn durable_index(&self) -> Index {
        self.persisted
    }

    pub fn last_index(&self) -> Index {
        self.snapshot_index + self.entries.len() as u64
    }

    pub fn last_term(&self) -> Term {
        self.entries
            .back()
            .map_or(self.snapshot_term, |entry| entry.term)
    }

    /// The term of `index`, if the log still knows it.
    pub fn term_at(&self, index: Index) -> Option<Term> {
        if index == self.snapshot_index {
            return Some(self.snapshot_term);
        }
        if index < self.snapshot_index || index > self.last_index() {
            return None;
        }
        Some(self.entries[(index - self.snapshot_index - 1) as usize].term)
    }

    pub fn entry(&self, index: Index) -> Option<&Entry> {
        if index <= self.snapshot_index {
            return None;
        }
        self.entries.get((index - self.snapshot_index - 1) as usize)
    }

    /// Whether a log ending at (`last_index`, `last_term`) is at least as up to date as ours.
    pub fn is_up_to_date(&self, last_index: Index, last_term: Term) -> bool {
        last_term > self.last_term()
            || (last_term == self.last_term() && last_index >= self.last_index())
    }

    /// Entries from `from`, at most `max_entries` and about `max_bytes` (always at least one).
    pub fn slice(&self, from: Index, max_entries: usize, max_bytes: usize) -> Vec<Entry> {
        assert!(from > self.snapshot_index);
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut index = from;
        while index <= self.last_index() && out.len() < max_entries {
            let entry = self.entry(index).expect("in range").clone();
            bytes += entry.size_bytes();
            if !out.is_empty() && bytes > max_bytes {
                break;
            }
            out.push(entry);
            index += 1;
        }
        out
    }

    /// Appends an entry the leader created.
    pub fn push(&mut self, entry: Entry) {
        assert_eq!(entry.index, self.last_index() + 1);
        assert!(entry.term >= self.last_term());
        self.entries.push_back(entry);
    }

    /// Deletes entries from `index` on (a follower's conflict).
    pub fn truncate(&mut self, index: Index) {
        assert!(
            index > self.snapshot_index,
            "never truncate into the snapshot"
        );
        assert!(
            index > self.committed,
            "never truncate committed entries ({index} <= {})",
            self.committed
        );
        let keep = (index - self.snapshot_index - 1) as usize;
        self.entries.truncate(keep);
        self.truncated_from = Some(self.truncated_from.map_or(index, |from| from.min(index)));
        self.unhanded_from = self.unhanded_from.min(index);
        self.persisted = self.persisted.min(index - 1);
    }

    /// Follower append: entries after (`prev_index`, `prev_term`). Returns
    /// the last index now known to match the leader, or `None` on mismatch.
    pub fn try_append(
        &mut self,
        prev_index: Index,
        prev_term: Term,
        entries: &[Entry],
    ) -> Option<Index> {
        if prev_index < self.snapshot_index {
            // Our snapshot covers part of it: skip what it covers.
            let skip = (self.snapshot_index - prev_index) as usize;
            if skip > entries.len() {
                return Some(self.snapshot_index);
            }
            let (at, term) = if skip == 0 {
                (prev_index, prev_term)
            } else {
                (entries[skip - 1].index, entries[skip - 1].term)
            };
            if at == self.snapshot_index && term != self.snapshot_term {
                return None;
            }
            return self.try_append(self.snapshot_index, self.snapshot_term, &entries[skip..]);
        }
        if self.term_at(prev_index) != Some(prev_term) {
            return None;
        }
        for entry in entries {
            match self.term_at(entry.index) {
                Some(term) if term == entry.term => continue,
                Some(_) => {
                    self.truncate(entry.index);
                    self.entries.push_back(entry.clone());
                }
                None => self.entries.push_back(entry.clone()),
            }
        }
        Some(prev_index + entries.len() as u64)
    }

    /// Drops entries up to `index` (the caller took a snapshot there).
    pub fn compact(&mut self, index: Index, term: Term) {
        assert!(index <= self.applied, "compact only what was applied");
        if index <= self.snapshot_index {
            return;
        }
        assert_eq!(self.term_at(index), Some(term));
        let drop = (index - self.snapshot_index) as usize;
        self.entries.drain(..drop);
        self.snapshot_index = index;
        self.snapshot_term = term;
    }

    /// Replaces everything with a snapshot from the leader.
    pub fn restore(&mut self, index: Index, term: Term) {
        self.entries.clear();
        self.snapshot_index = index;
        self.snapshot_term = term;
        self.truncated_from = None;
        self.unhanded_from = index + 1;
        self.persisted = self.persisted.min(index);
        self.committed = index;
        self.applied = index;
    }

    /// Takes what must be persisted next: a truncation point and new entries.
    pub fn take_unpersisted(&mut self) -> (Option<Index>, Vec<Entry>) {
        let truncated = self.truncated_from.take();
        let from = self.unhanded_from.max(self.snapshot_index + 1);
        let entries: Vec<Entry> = (from..=self.last_index())
            .map(|index| self.entry(index).expect("in range").clone())
            .collect();
        self.unhanded_from = self.last_index() + 1;
        (truncated, entries)
    }

    pub fn has_unpersisted(&self) -> bool {
        self.truncated_from.is_some() || self.unhanded_from <= self.last_index()
    }

    /// The caller made entries up to (`index`, `term`) durable.
    pub fn persisted_to(&mut self, index: Index, term: Term) {
        if self.term_at(index) == Some(term) && index > self.persisted {
            self.persisted = index;
        }
    }

    /// Committed entries not yet handed out (only durable ones).
    pub fn take_committed(&mut self, max_entries: usize) -> Vec<Entry> {
        let upto = self.committed.min(self.persisted);
        let mut out = Vec::new();
        while self.applied < upto && out.len() < max_entries {
            self.applied += 1;
            out.push(
                self.entry(self.applied)
                    .expect("committed entries exist")
                    .clone(),
            );
        }
        out
    }

    pub fn has_committed_to_apply(&self) -> bool {
        self.applied < self.committed.min(self.persisted)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::EntryKind;

    fn entry(index: Index, term: Term) -> Entry {
        Entry {
            index,
            term,
            kind: EntryKind::Noop,
        }
    }

    #[test]
    fn follower_append_truncates_conflicts() {
        let mut log = RaftLog::new(0, 0, vec![entry(1, 1), entry(2, 1), entry(3, 2)]);
        assert_eq!(
            log.try_append(1, 1, &[entry(2, 1), entry(3, 3), entry(4, 3)]),
            Some(4)
        );
        assert_eq!(log.term_at(3), Some(3));
        assert_eq!(log.last_index(), 4);
        let (truncated, entries) = log.take_unpersisted();
        assert_eq!(truncated, Some(3));
        assert_eq!(
            entries.iter().map(|e| e.index).collect::<Vec<_>>(),
            vec![3, 4]
        );
        assert_eq!(log.try_append(4, 2, &[]), None, "mismatched prev term");
        assert_eq!(log.try_append(7, 3, &[]), None, "beyond our log");
    }

    #[test]
    fn compaction_and_snapshot_covered_appends() {
        let mut log = RaftLog::new(0, 0, (1..=5).map(|i| entry(i, 1)).collect());
        log.committed = 5;
        log.take_committed(10);
        log.compact(3, 1);
        assert_eq!(log.snapshot_index(), 3);
        assert_eq!(log.term_at(3), Some(1));
        assert_eq!(log.term_at(2), None);
        // A leader resends from index 1: the snapshot covers 1..=3.
        assert_eq!(
            log.try_append(0, 0, &(1..=6).map(|i| entry(i, 1)).collect::<Vec<_>>()),
            Some(6)
        );
        assert_eq!(log.last_index(), 6);
    }

    #[test]
    fn only_durable_committed_entries_are_applied() {
        let mut log = RaftLog::new(0, 0, vec![]);
        for index in 1..=4 {
            log.push(entry(index, 1));
        }
        log.committed = 4;
        assert!(log.take_committed(10).is_empty(), "nothing durable yet");
        log.persisted_to(2, 1);
        assert_eq!(log.take_committed(10).len(), 2);
        log.persisted_to(4, 1);
        assert_eq!(log.take_committed(10).len(), 2);
    }
}
