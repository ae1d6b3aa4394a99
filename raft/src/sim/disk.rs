//! One node's disk at the persistence boundary: the durable hard state,
//! snapshot and log, and the writes (one per `Ready`) still waiting for their
//! simulated fsync. Writes complete in order after a seeded delay; a crash
//! drops every write not yet complete (a prefix may have reached the platter
//! unseen, the first of the rest possibly torn). On restart one durable entry
//! may be found corrupt by its checksum: the log is cut before it and the
//! node restarts knowing it once acknowledged more (`acknowledged_index`).
//!
//! The disk also checks the write contract: entries are contiguous, the
//! durable term never goes back, a durable vote never changes within a term.
//! It hands the votes it made durable to the one-vote-per-term checker,
//! which also sees past a wipe (a store replaced by an empty one).

use std::collections::VecDeque;

use bytes::Bytes;

use crate::message::Envelope;
use crate::node::Restore;
use crate::sim::random::Random;
use crate::types::{Entry, HardState, Index, Membership, NodeId, Snapshot, Term};

/// A snapshot as the host keeps it: Raft's identity and the state
/// machine's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSnapshot {
    pub meta: Snapshot,
    pub data: Bytes,
}

/// What one `Ready` asks to persist, and what it holds back until then.
#[derive(Debug, Clone, Default)]
pub struct Write {
    pub number: u64,
    /// Simulator step at which the fsync completes.
    pub due: u64,
    pub hard_state: Option<HardState>,
    pub snapshot: Option<StoredSnapshot>,
    pub truncate_from: Option<Index>,
    pub entries: Vec<Entry>,
    pub persisted_messages: Vec<Envelope>,
}

/// Writes that became durable: advance the node to `number`, then send.
#[derive(Debug)]
pub struct Completed {
    pub number: u64,
    pub messages: Vec<Envelope>,
}

#[derive(Debug, Default)]
pub struct Disk {
    hard_state: HardState,
    snapshot: Option<StoredSnapshot>,
    entries: Vec<Entry>,
    /// The durable log ended here before a corruption cut it; cleared once
    /// the log reaches it again. The restart's `acknowledged_index` is this
    /// or the log's end, not the highest index ever durable: entries cut by
    /// a legitimate truncation (an uncommitted suffix replaced) were never
    /// committed, and counting them would leave healthy nodes refusing to
    /// vote (two such in a group of three and no leader can ever be elected;
    /// the simulator finds that within a few dozen seeds).
    damage_mark: Index,
    /// Every entry after the snapshot was lost (a journal gone) while the
    /// hard state survived in its second copy: how far the node had
    /// acknowledged is unknown, and it was in no term above this one
    /// (`Restore::entries_lost_through_term`). Cleared once a durable entry
    /// of a later term arrives.
    lost_through_term: Term,
    pending: VecDeque<Write>,
    /// Votes made durable since the simulator last took them (term,
    /// candidate), for the one-vote-per-term checker.
    durable_votes: Vec<(Term, NodeId)>,
}

impl Disk {
    pub fn new() -> Disk {
        Disk::default()
    }

    pub fn snapshot(&self) -> Option<&StoredSnapshot> {
        self.snapshot.as_ref()
    }

    pub fn snapshot_index(&self) -> Index {
        self.snapshot
            .as_ref()
            .map_or(0, |snapshot| snapshot.meta.index)
    }

    /// Last durable log index (the snapshot's when no entries follow it).
    pub fn durable_last(&self) -> Index {
        self.entries
            .last()
            .map_or(self.snapshot_index(), |entry| entry.index)
    }

    pub fn is_damaged(&self) -> bool {
        self.damage_mark > 0 || self.lost_through_term > 0
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Queues a write; it completes no earlier than the one before it.
    pub fn submit(&mut self, mut write: Write) {
        if let Some(last) = self.pending.back() {
            write.due = write.due.max(last.due);
        }
        self.pending.push_back(write);
    }

    pub fn next_due(&self) -> Option<u64> {
        self.pending.front().map(|write| write.due)
    }

    /// Completes every write due by `now`.
    pub fn complete_due(&mut self, now: u64) -> Result<Option<Completed>, String> {
        let mut completed: Option<Completed> = None;
        while self.pending.front().is_some_and(|write| write.due <= now) {
            let write = self.pending.pop_front().expect("front exists");
            self.apply(&write, write.entries.len())?;
            let done = completed.get_or_insert(Completed {
                number: 0,
                messages: Vec::new(),
            });
            done.number = write.number;
            done.messages.extend(write.persisted_messages);
        }
        Ok(completed)
    }

    /// Makes `write` durable, keeping only its first `entry_count` entries
    /// (fewer than all: a torn write).
    fn apply(&mut self, write: &Write, entry_count: usize) -> Result<(), String> {
        if let Some(hard_state) = write.hard_state {
            self.apply_hard_state(hard_state)?;
        }
        if let Some(snapshot) = &write.snapshot {
            if snapshot.meta.index < self.snapshot_index() {
                return Err(format!(
                    "installing snapshot {} below the durable snapshot {}",
                    snapshot.meta.index,
                    self.snapshot_index()
                ));
            }
            self.entries.clear();
            self.snapshot = Some(snapshot.clone());
        }
        if let Some(from) = write.truncate_from {
            if from <= self.snapshot_index() {
                return Err(format!("truncating from {from} into the snapshot"));
            }
            self.entries.retain(|entry| entry.index < from);
        }
        for entry in &write.entries[..entry_count] {
            let expected = self.durable_last() + 1;
            if entry.index != expected {
                return Err(format!(
                    "write of entry {} where the durable log expects {expected}",
                    entry.index
                ));
            }
            self.entries.push(entry.clone());
        }
        if self.damage_mark > 0 && self.durable_last() >= self.damage_mark {
            self.damage_mark = 0;
        }
        let durable_last_term = self.entries.last().map_or(
            self.snapshot
                .as_ref()
                .map_or(0, |snapshot| snapshot.meta.term),
            |entry| entry.term,
        );
        if durable_last_term > self.lost_through_term {
            self.lost_through_term = 0;
        }
        Ok(())
    }

    fn apply_hard_state(&mut self, hard_state: HardState) -> Result<(), String> {
        let durable = self.hard_state;
        if hard_state.term < durable.term {
            return Err(format!(
                "durable term goes back from {} to {}",
                durable.term, hard_state.term
            ));
        }
        if hard_state.term == durable.term
            && durable.vote.is_some()
            && hard_state.vote != durable.vote
        {
            return Err(format!(
                "durable vote in term {} changes from {:?} to {:?}",
                durable.term, durable.vote, hard_state.vote
            ));
        }
        if let Some(candidate) = hard_state.vote {
            if durable.vote != hard_state.vote || durable.term != hard_state.term {
                self.durable_votes.push((hard_state.term, candidate));
            }
        }
        self.hard_state = hard_state;
        Ok(())
    }

    /// The votes made durable since the last call, oldest first.
    pub fn take_durable_votes(&mut self) -> Vec<(Term, NodeId)> {
        std::mem::take(&mut self.durable_votes)
    }

    /// Power loss: writes not yet complete are lost, except that a prefix of
    /// them may have reached the disk unseen (the next one possibly torn).
    /// Returns how many writes were lost.
    pub fn crash(&mut self, random: &mut Random) -> Result<usize, String> {
        let pending: Vec<Write> = self.pending.drain(..).collect();
        let survivors = if random.chance(0.5) {
            random.below(pending.len() as u64 + 1) as usize
        } else {
            0
        };
        for write in &pending[..survivors] {
            self.apply(write, write.entries.len())?;
        }
        if let Some(write) = pending.get(survivors) {
            if random.chance(0.3) {
                let kept = random.below(write.entries.len() as u64 + 1) as usize;
                self.apply(write, kept)?;
            }
        }
        Ok(pending.len() - survivors)
    }

    /// Finds one durable entry corrupt: the log is cut before it. Returns
    /// its index.
    pub fn corrupt(&mut self, random: &mut Random) -> Option<Index> {
        if self.entries.is_empty() {
            return None;
        }
        let last = self.durable_last();
        let position = random.below(self.entries.len() as u64) as usize;
        let index = self.entries[position].index;
        self.entries.truncate(position);
        self.damage_mark = self.damage_mark.max(last);
        Some(index)
    }

    /// Loses every durable entry after the snapshot, keeping the hard
    /// state (a journal deleted, its votes kept in their second copy).
    /// Returns how many entries went.
    pub fn lose_entries(&mut self) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        let lost = self.entries.len();
        self.entries.clear();
        self.lost_through_term = self.lost_through_term.max(self.hard_state.term);
        Some(lost)
    }

    /// What the node restarts from.
    pub fn restore(&self, membership: &Membership, seed: u64) -> Restore {
        Restore {
            hard_state: self.hard_state,
            snapshot: self.snapshot.as_ref().map(|snapshot| snapshot.meta.clone()),
            entries: self.entries.clone(),
            membership: membership.clone(),
            acknowledged_index: self.damage_mark.max(self.durable_last()),
            entries_lost_through_term: self.lost_through_term,
            seed,
        }
    }

    /// The state machine saved `snapshot`: the log up to it is dropped.
    pub fn compact(&mut self, stored: &StoredSnapshot) -> Result<(), String> {
        let snapshot = &stored.meta;
        if snapshot.index <= self.snapshot_index() {
            return Ok(());
        }
        let position = (snapshot.index - self.snapshot_index() - 1) as usize;
        match self.entries.get(position) {
            Some(entry) if entry.term == snapshot.term && entry.index == snapshot.index => {
                self.entries.drain(..=position);
                self.snapshot = Some(stored.clone());
                Ok(())
            }
            _ => Err(format!(
                "compaction at {}/{} beyond or off the durable log (ends at {})",
                snapshot.index,
                snapshot.term,
                self.durable_last()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::EntryKind;

    fn entry(index: Index, term: u64) -> Entry {
        Entry {
            index,
            term,
            kind: EntryKind::Noop,
        }
    }

    fn write(number: u64, due: u64, entries: Vec<Entry>) -> Write {
        Write {
            number,
            due,
            entries,
            ..Write::default()
        }
    }

    #[test]
    fn writes_complete_in_order_and_crashes_lose_the_rest() {
        let mut disk = Disk::new();
        disk.submit(write(1, 10, vec![entry(1, 1)]));
        disk.submit(write(2, 5, vec![entry(2, 1)]));
        assert_eq!(disk.next_due(), Some(10), "no earlier than the one before");
        let done = disk.complete_due(10).unwrap().unwrap();
        assert_eq!(done.number, 2);
        assert_eq!(disk.durable_last(), 2);
        disk.submit(write(3, 20, vec![entry(3, 1)]));
        let mut random = Random::new(0);
        let lost = disk.crash(&mut random).unwrap();
        assert!(disk.durable_last() >= 2 && lost <= 1);
    }

    #[test]
    fn corruption_cuts_the_log_and_marks_damage() {
        let mut disk = Disk::new();
        disk.submit(write(1, 0, (1..=5).map(|i| entry(i, 1)).collect()));
        disk.complete_due(0).unwrap();
        let mut random = Random::new(9);
        let cut = disk.corrupt(&mut random).unwrap();
        assert_eq!(disk.durable_last(), cut - 1);
        let restore = disk.restore(&Membership::default(), 1);
        assert_eq!(restore.acknowledged_index, 5);
        disk.submit(write(2, 0, (cut..=5).map(|i| entry(i, 1)).collect()));
        disk.complete_due(0).unwrap();
        assert!(!disk.is_damaged());
    }

    #[test]
    fn durable_votes_are_reported_once_and_lost_ones_never() {
        let mut disk = Disk::new();
        let hard = |term, vote| Write {
            hard_state: Some(HardState { term, vote }),
            ..Write::default()
        };
        disk.submit(hard(2, Some(1)));
        disk.submit(hard(2, Some(1)));
        disk.submit(hard(3, None));
        disk.complete_due(0).unwrap();
        assert_eq!(disk.take_durable_votes(), vec![(2, 1)]);
        assert_eq!(disk.take_durable_votes(), vec![]);
        disk.submit(Write {
            due: 10,
            ..hard(3, Some(2))
        });
        let mut random = Random::new(0);
        disk.crash(&mut random).unwrap();
        // Reported exactly when the crash left it durable.
        let durable = disk.restore(&Membership::default(), 0).hard_state;
        let expected = if durable.vote == Some(2) {
            vec![(3, 2)]
        } else {
            vec![]
        };
        assert_eq!(disk.take_durable_votes(), expected);
    }

    #[test]
    fn gaps_and_vote_changes_are_contract_violations() {
        let mut disk = Disk::new();
        disk.submit(write(1, 0, vec![entry(2, 1)]));
        assert!(disk.complete_due(0).is_err());
        let mut disk = Disk::new();
        let vote = |vote| Write {
            hard_state: Some(HardState { term: 3, vote }),
            ..Write::default()
        };
        disk.submit(vote(Some(1)));
        disk.submit(vote(Some(2)));
        assert!(disk.complete_due(0).is_err());
    }
}
