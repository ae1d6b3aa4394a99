//! The simulated state machine: a hash chain over the client proposals it
//! applied (each proposal's payload starts with its id), the index and term
//! of the last entry applied, and the voters that entries configured. Its
//! snapshot encoding is what `Node::compact` ships to lagging followers.

use bytes::{Bytes, BytesMut};

use crate::sim::disk::StoredSnapshot;
use crate::sim::random::mix;
use crate::types::{Entry, EntryKind, Index, Membership, Snapshot, Term};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMachine {
    pub applied_index: Index,
    pub applied_term: Term,
    /// Client proposals applied.
    pub count: u64,
    /// Hash chain over the ids of the proposals applied, in order.
    pub chain: u64,
    pub membership: Membership,
}

/// One client proposal applied: it sits at `position` in the applied order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppliedProposal {
    pub id: u64,
    pub position: u64,
    pub chain: u64,
}

impl StateMachine {
    pub fn new(membership: Membership) -> StateMachine {
        StateMachine {
            applied_index: 0,
            applied_term: 0,
            count: 0,
            chain: 0,
            membership,
        }
    }

    /// Applies the next committed entry. A payload that is no proposal
    /// (too short to hold an id) is reported as `Err`.
    pub fn apply(&mut self, entry: &Entry) -> Result<Option<AppliedProposal>, String> {
        self.applied_index = entry.index;
        self.applied_term = entry.term;
        match &entry.kind {
            EntryKind::Normal(data) => {
                let id = proposal_id(data).ok_or_else(|| {
                    format!("entry {} carries a payload no client sent", entry.index)
                })?;
                let position = self.count;
                self.count += 1;
                self.chain = chain(self.chain, id);
                Ok(Some(AppliedProposal {
                    id,
                    position,
                    chain: self.chain,
                }))
            }
            EntryKind::AddVoter(_) | EntryKind::RemoveVoter(_) => {
                apply_membership(&mut self.membership, &entry.kind);
                Ok(None)
            }
            EntryKind::Noop => Ok(None),
        }
    }

    pub fn snapshot(&self) -> StoredSnapshot {
        let mut data = BytesMut::with_capacity(32);
        for value in [
            self.applied_index,
            self.applied_term,
            self.count,
            self.chain,
        ] {
            data.extend_from_slice(&value.to_le_bytes());
        }
        StoredSnapshot {
            meta: Snapshot {
                index: self.applied_index,
                term: self.applied_term,
                membership: self.membership.clone(),
            },
            data: data.freeze(),
        }
    }

    pub fn from_snapshot(stored: &StoredSnapshot) -> Result<StateMachine, String> {
        let (snapshot, data) = (&stored.meta, &stored.data);
        if data.len() != 32 {
            return Err(format!("snapshot data of {} bytes", data.len()));
        }
        let word =
            |at: usize| u64::from_le_bytes(data[at * 8..at * 8 + 8].try_into().expect("8 bytes"));
        let machine = StateMachine {
            applied_index: word(0),
            applied_term: word(1),
            count: word(2),
            chain: word(3),
            membership: snapshot.membership.clone(),
        };
        if machine.applied_index != snapshot.index || machine.applied_term != snapshot.term {
            return Err(format!(
                "snapshot {}/{} holds a state machine at {}/{}",
                snapshot.index, snapshot.term, machine.applied_index, machine.applied_term
            ));
        }
        Ok(machine)
    }
}

/// A proposal's payload: its id, then `padding_bytes` of filler.
pub fn proposal_payload(id: u64, padding_bytes: usize) -> Bytes {
    let mut data = BytesMut::with_capacity(8 + padding_bytes);
    data.extend_from_slice(&id.to_le_bytes());
    data.resize(8 + padding_bytes, 0xab);
    data.freeze()
}

pub fn proposal_id(data: &[u8]) -> Option<u64> {
    let head: [u8; 8] = data.get(..8)?.try_into().ok()?;
    Some(u64::from_le_bytes(head))
}

pub fn chain(previous: u64, id: u64) -> u64 {
    mix(previous ^ mix(id.wrapping_add(0x1234_5678_9abc_def1)))
}

/// Voters after one membership entry (mirrors what Raft does).
fn apply_membership(membership: &mut Membership, kind: &EntryKind) {
    let mut voters = membership.voters.clone();
    match kind {
        EntryKind::AddVoter(node) => voters.push(*node),
        EntryKind::RemoveVoter(node) => voters.retain(|voter| voter != node),
        _ => {}
    }
    *membership = Membership::new(voters);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_round_trip() {
        let mut machine = StateMachine::new(Membership::new(vec![1, 2, 3]));
        let entries = [
            Entry {
                index: 1,
                term: 1,
                kind: EntryKind::Normal(proposal_payload(7, 3)),
            },
            Entry {
                index: 2,
                term: 2,
                kind: EntryKind::AddVoter(4),
            },
        ];
        for entry in &entries {
            machine.apply(entry).unwrap();
        }
        assert_eq!(machine.membership.voters, vec![1, 2, 3, 4]);
        let restored = StateMachine::from_snapshot(&machine.snapshot()).unwrap();
        assert_eq!(restored, machine);
    }
}
