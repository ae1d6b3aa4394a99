//! The `votes` file: a second copy of every journaled Raft group's hard
//! state (term and vote) on this shard, kept in the store directory (the
//! block store's namespace), apart from the journal (its own namespace).
//!
//! Why: a node that forgets a vote may vote twice in one term and elect
//! two leaders. The journal holds each group's hard state; if the journal
//! is lost or damaged (a segment deleted, a file cut short), this copy
//! still says which term each group was in and whom it voted for, so the
//! node can rejoin its groups from their checkpoints and catch up from its
//! peers instead of staying offline (docs/raft.md §Damage). Either copy
//! alone suffices; both damaged, the shard's streams stay offline.
//!
//! Written before the journal write that carries a new hard state (the
//! appender in `stream/groups.rs` awaits it), so no vote or append
//! acknowledgement leaves before both copies are durable; hard states
//! change only at elections, never on the publish path. Replaced whole
//! and atomically (temporary file, sync, rename, directory sync): a crash
//! leaves the old or the new file, never a torn one, so a checksum
//! mismatch is damage, not an interrupted write.
//!
//! Each group also carries its damage mark: nonzero while the group is
//! marked as having lost entries through that term (docs/raft.md
//! §Damage), so a restart before the damage clears keeps it (the mark is
//! cleared at the group's next hard-state change after it clears; a stale
//! mark clears again at once, as the restored log holds the later term).
//!
//! Layout (little-endian), docs/jetstream-format.md:
//!
//! ```text
//! magic "TERNVOTE" (8) | version u32 = 1 | groups u32
//! | groups x (group u64 | term u64 | vote u64 (0: none) | lost_through_term u64 (0: none)),
//!   by ascending group
//! | crc32c u32 of everything before it
//! ```
//! Zero-padded to the 4096-byte block.

use std::collections::BTreeMap;

use tern_raft::HardState;
use tern_storage::block_store::StoreFiles;
use tern_storage::format::checksum;

use super::persist::{self, PersistError};

pub const VOTES_FILE: &str = "votes";

/// Shard `shard`'s directory for the file: `<store>/jetstream/votes/shard-N`.
pub fn directory(jetstream_root: &std::path::Path, shard: usize) -> std::path::PathBuf {
    jetstream_root.join("votes").join(format!("shard-{shard}"))
}
const MAGIC: &[u8; 8] = b"TERNVOTE";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 16;
const GROUP_BYTES: usize = 32;
/// Groups one file may hold (a shard runs at most this many).
pub const GROUPS_MAX: usize = crate::cluster::multiraft::GROUPS_MAX;

/// What the file keeps of one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupVotes {
    pub hard_state: HardState,
    /// Nonzero: the group lost its entries through this term and has not
    /// yet held one of a later term (`Restore::entries_lost_through_term`).
    pub lost_through_term: u64,
}

/// Each group's latest hard state and damage mark.
pub type Votes = BTreeMap<u64, GroupVotes>;

pub fn encode(votes: &Votes) -> Vec<u8> {
    assert!(votes.len() <= GROUPS_MAX, "{} groups", votes.len());
    let mut out = Vec::with_capacity(HEADER_BYTES + votes.len() * GROUP_BYTES + 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(votes.len() as u32).to_le_bytes());
    for (group, kept) in votes {
        out.extend_from_slice(&group.to_le_bytes());
        out.extend_from_slice(&kept.hard_state.term.to_le_bytes());
        out.extend_from_slice(&kept.hard_state.vote.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&kept.lost_through_term.to_le_bytes());
    }
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Decodes and verifies a votes file (what follows the checksum is zero
/// padding).
pub fn decode(bytes: &[u8]) -> Result<Votes, PersistError> {
    let corrupt = |reason: String| persist::corrupt(VOTES_FILE, reason);
    if bytes.len() < HEADER_BYTES + 4 || &bytes[0..8] != MAGIC {
        return Err(corrupt("bad magic".into()));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(corrupt(format!("unknown version {version}")));
    }
    let groups = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")) as usize;
    let end = HEADER_BYTES + groups.saturating_mul(GROUP_BYTES);
    if groups > GROUPS_MAX || end + 4 > bytes.len() {
        return Err(corrupt(format!("{groups} groups out of range")));
    }
    let stored = u32::from_le_bytes(bytes[end..end + 4].try_into().expect("4 bytes"));
    if stored != checksum(&bytes[..end]) {
        return Err(corrupt("checksum mismatch".into()));
    }
    let field = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let mut votes = Votes::new();
    let mut previous = None;
    for at in (HEADER_BYTES..end).step_by(GROUP_BYTES) {
        let group = field(at);
        if previous.is_some_and(|previous| group <= previous) {
            return Err(corrupt(format!("group {group} out of order")));
        }
        previous = Some(group);
        let vote = field(at + 16);
        votes.insert(
            group,
            GroupVotes {
                hard_state: HardState {
                    term: field(at + 8),
                    vote: (vote != 0).then_some(vote),
                },
                lost_through_term: field(at + 24),
            },
        );
    }
    Ok(votes)
}

/// The later of two hard states: the higher term; in one term, the one
/// that voted (a vote, once cast, never changes within its term).
pub fn newer(first: Option<HardState>, second: Option<HardState>) -> Option<HardState> {
    match (first, second) {
        (Some(a), Some(b)) if b.term > a.term || (b.term == a.term && a.vote.is_none()) => Some(b),
        (Some(a), _) => Some(a),
        (None, b) => b,
    }
}

pub async fn write<S: StoreFiles>(files: &S, votes: &Votes) -> Result<(), PersistError> {
    persist::replace(files, VOTES_FILE, &encode(votes))
        .await
        .map_err(PersistError::Io)
}

/// `Ok(None)`: no votes file (a new store, or one written before it).
pub async fn read<S: StoreFiles>(files: &S) -> Result<Option<Votes>, PersistError> {
    persist::read_if_present(files, VOTES_FILE)
        .await?
        .map(|bytes| decode(&bytes))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(term: u64, vote: Option<u64>) -> HardState {
        HardState { term, vote }
    }

    fn kept(term: u64, vote: Option<u64>, lost_through_term: u64) -> GroupVotes {
        GroupVotes {
            hard_state: state(term, vote),
            lost_through_term,
        }
    }

    #[test]
    fn round_trips_and_pins_the_layout() {
        let votes = Votes::from([(1, kept(3, Some(7), 2)), (9, kept(1, None, 0))]);
        let bytes = encode(&votes);
        assert_eq!(bytes.len(), 16 + 2 * 32 + 4);
        assert_eq!(&bytes[0..8], b"TERNVOTE");
        assert_eq!(bytes[8..12], 1u32.to_le_bytes());
        assert_eq!(bytes[12..16], 2u32.to_le_bytes());
        assert_eq!(bytes[16..24], 1u64.to_le_bytes());
        assert_eq!(bytes[24..32], 3u64.to_le_bytes());
        assert_eq!(bytes[32..40], 7u64.to_le_bytes());
        assert_eq!(bytes[40..48], 2u64.to_le_bytes());
        assert_eq!(bytes[48..56], 9u64.to_le_bytes());
        assert_eq!(bytes[64..72], 0u64.to_le_bytes());
        let mut padded = bytes.clone();
        padded.resize(4096, 0);
        assert_eq!(decode(&padded).expect("valid"), votes);
        assert_eq!(decode(&encode(&Votes::new())).expect("valid"), Votes::new());
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_found() {
        let votes = Votes::from([(1, kept(3, Some(7), 0)), (2, kept(4, None, 4))]);
        let bytes = encode(&votes);
        for bit in 0..bytes.len() * 8 {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&damaged).is_err(), "bit {bit} flipped went unseen");
        }
        for length in 0..bytes.len() {
            assert!(
                decode(&bytes[..length]).is_err(),
                "cut at {length} went unseen"
            );
        }
    }

    #[test]
    fn the_newer_state_wins() {
        let voted = Some(state(5, Some(2)));
        let unvoted = Some(state(5, None));
        let older = Some(state(4, Some(1)));
        assert_eq!(newer(voted, unvoted), voted);
        assert_eq!(newer(unvoted, voted), voted);
        assert_eq!(newer(older, unvoted), unvoted);
        assert_eq!(newer(voted, older), voted);
        assert_eq!(newer(None, older), older);
        assert_eq!(newer(older, None), older);
    }
}
