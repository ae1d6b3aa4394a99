//! The byte encoding of [`Message`]: what one group member sends another.
//!
//! Every integer is little-endian. A message is a tag byte, the sender's
//! term, then the fields of its kind in the order docs/raft.md lists byte by
//! byte. The encoding is canonical: [`decode`] accepts exactly what
//! [`encode`] produces (no unknown tags or flag bits, no trailing bytes,
//! entries numbered consecutively after `prev_index`, voters strictly
//! increasing), so `encode(decode(bytes)) == bytes` for every accepted input.
//! The transport frames messages (group id, from, to, length) around this.
//!
//! Decoding never trusts a count or a length before checking it against
//! [`DecodeLimits`] and against the bytes actually present, so hostile input
//! costs at most its own size in allocation.

use bytes::{BufMut, Bytes, BytesMut};

use crate::message::Message;
use crate::types::{Entry, EntryKind, Membership};

const TAG_VOTE: u8 = 1;
const TAG_VOTE_RESPONSE: u8 = 2;
const TAG_APPEND: u8 = 3;
const TAG_APPEND_RESPONSE: u8 = 4;
const TAG_INSTALL_SNAPSHOT: u8 = 5;
const TAG_INSTALL_SNAPSHOT_RESPONSE: u8 = 6;
const TAG_TIMEOUT_NOW: u8 = 7;
const TAG_SNAPSHOT_RECEIVED: u8 = 8;

const ENTRY_NOOP: u8 = 0;
const ENTRY_NORMAL: u8 = 1;
const ENTRY_ADD_VOTER: u8 = 2;
const ENTRY_REMOVE_VOTER: u8 = 3;

const FLAG_VOTE_PRE_VOTE: u8 = 1;
const FLAG_VOTE_TRANSFER: u8 = 2;
const FLAG_VOTE_RESPONSE_GRANTED: u8 = 1;
const FLAG_VOTE_RESPONSE_PRE_VOTE: u8 = 2;
const FLAG_APPEND_RESPONSE_SUCCESS: u8 = 1;
const FLAG_SNAPSHOT_RECEIVED_GAP: u8 = 1;
const FLAG_INSTALL_SNAPSHOT_LAST: u8 = 1;

/// Bytes of an entry before its payload: term, index, kind.
const ENTRY_HEADER_BYTES: usize = 8 + 8 + 1;

/// Bounds a decoder enforces before allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    pub max_entries: usize,
    pub max_entry_bytes: usize,
    pub max_voters: usize,
    /// One snapshot chunk (the follower's host stages them as they come,
    /// so a whole snapshot has no bound here).
    pub max_snapshot_chunk_bytes: usize,
}

impl Default for DecodeLimits {
    fn default() -> DecodeLimits {
        DecodeLimits {
            max_entries: 65_536,
            max_entry_bytes: 64 << 20,
            max_voters: 64,
            max_snapshot_chunk_bytes: 4 << 20,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside `field`.
    Truncated {
        field: &'static str,
    },
    UnknownTag(u8),
    UnknownEntryKind(u8),
    /// A flags byte has bits this version does not define.
    UnknownFlags {
        field: &'static str,
        flags: u8,
    },
    /// A count or length above its [`DecodeLimits`] bound.
    OverLimit {
        field: &'static str,
        value: u64,
        limit: u64,
    },
    /// Entry `position` of an append does not carry index `prev_index + position + 1`.
    EntryIndexGap {
        position: usize,
        expected: u64,
        found: u64,
    },
    /// Voters must be strictly increasing.
    VotersNotSorted,
    /// A snapshot chunk's end does not fit 64 bits.
    ChunkPastEnd {
        offset: u64,
        length: u64,
    },
    /// Bytes left after a complete message.
    TrailingBytes(usize),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated { field } => write!(formatter, "message truncated in {field}"),
            DecodeError::UnknownTag(tag) => write!(formatter, "unknown message tag {tag}"),
            DecodeError::UnknownEntryKind(kind) => write!(formatter, "unknown entry kind {kind}"),
            DecodeError::UnknownFlags { field, flags } => {
                write!(formatter, "unknown flag bits {flags:#04x} in {field}")
            }
            DecodeError::OverLimit {
                field,
                value,
                limit,
            } => {
                write!(formatter, "{field} {value} is over the limit {limit}")
            }
            DecodeError::EntryIndexGap {
                position,
                expected,
                found,
            } => write!(
                formatter,
                "entry {position} has index {found}, expected {expected}"
            ),
            DecodeError::VotersNotSorted => write!(formatter, "voters are not strictly increasing"),
            DecodeError::ChunkPastEnd { offset, length } => write!(
                formatter,
                "snapshot chunk of {length} bytes at {offset} ends past 2^64"
            ),
            DecodeError::TrailingBytes(count) => {
                write!(formatter, "{count} bytes after the end of the message")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Bytes [`encode`] will append for `message`.
pub fn encoded_size_bytes(message: &Message) -> usize {
    1 + 8
        + match message {
            Message::Vote { .. } => 8 + 8 + 1,
            Message::VoteResponse { .. } => 1,
            Message::Append { entries, .. } => {
                8 + 8 + 8 + 8 + 4 + entries.iter().map(entry_size_bytes).sum::<usize>()
            }
            Message::AppendResponse { .. } => 1 + 8 + 8 + 8,
            Message::InstallSnapshot {
                membership, chunk, ..
            } => 8 + 8 + 4 + 8 * membership.voters.len() + 8 + 8 + 1 + 4 + chunk.len(),
            Message::SnapshotReceived { .. } => 8 + 8 + 8 + 1,
            Message::InstallSnapshotResponse { .. } => 8,
            Message::TimeoutNow { .. } => 0,
        }
}

fn entry_size_bytes(entry: &Entry) -> usize {
    ENTRY_HEADER_BYTES
        + match &entry.kind {
            EntryKind::Noop => 0,
            EntryKind::Normal(data) => 4 + data.len(),
            EntryKind::AddVoter(_) | EntryKind::RemoveVoter(_) => 8,
        }
}

/// Appends the encoding of `message` to `out`.
///
/// Panics if a payload, the entry count or the voter count does not fit a
/// `u32`: the node's batching caps keep them far below that.
pub fn encode(message: &Message, out: &mut BytesMut) {
    let start = out.len();
    out.reserve(encoded_size_bytes(message));
    match message {
        Message::Vote {
            term,
            last_index,
            last_term,
            pre_vote,
            transfer,
        } => {
            out.put_u8(TAG_VOTE);
            out.put_u64_le(*term);
            out.put_u64_le(*last_index);
            out.put_u64_le(*last_term);
            out.put_u8(flag(*pre_vote, FLAG_VOTE_PRE_VOTE) | flag(*transfer, FLAG_VOTE_TRANSFER));
        }
        Message::VoteResponse {
            term,
            granted,
            pre_vote,
        } => {
            out.put_u8(TAG_VOTE_RESPONSE);
            out.put_u64_le(*term);
            out.put_u8(
                flag(*granted, FLAG_VOTE_RESPONSE_GRANTED)
                    | flag(*pre_vote, FLAG_VOTE_RESPONSE_PRE_VOTE),
            );
        }
        Message::Append {
            term,
            prev_index,
            prev_term,
            entries,
            commit,
            read_context,
        } => {
            out.put_u8(TAG_APPEND);
            out.put_u64_le(*term);
            out.put_u64_le(*prev_index);
            out.put_u64_le(*prev_term);
            out.put_u64_le(*commit);
            out.put_u64_le(*read_context);
            out.put_u32_le(length_u32(entries.len()));
            for entry in entries {
                encode_entry(entry, out);
            }
        }
        Message::AppendResponse {
            term,
            success,
            match_index,
            hint,
            read_context,
        } => {
            out.put_u8(TAG_APPEND_RESPONSE);
            out.put_u64_le(*term);
            out.put_u8(flag(*success, FLAG_APPEND_RESPONSE_SUCCESS));
            out.put_u64_le(*match_index);
            out.put_u64_le(*hint);
            out.put_u64_le(*read_context);
        }
        Message::InstallSnapshot {
            term,
            index,
            snapshot_term,
            membership,
            session,
            offset,
            last,
            chunk,
        } => {
            out.put_u8(TAG_INSTALL_SNAPSHOT);
            out.put_u64_le(*term);
            out.put_u64_le(*index);
            out.put_u64_le(*snapshot_term);
            out.put_u32_le(length_u32(membership.voters.len()));
            for voter in &membership.voters {
                out.put_u64_le(*voter);
            }
            out.put_u64_le(*session);
            out.put_u64_le(*offset);
            out.put_u8(flag(*last, FLAG_INSTALL_SNAPSHOT_LAST));
            out.put_u32_le(length_u32(chunk.len()));
            out.put_slice(chunk);
        }
        Message::SnapshotReceived {
            term,
            index,
            session,
            received,
            gap,
        } => {
            out.put_u8(TAG_SNAPSHOT_RECEIVED);
            out.put_u64_le(*term);
            out.put_u64_le(*index);
            out.put_u64_le(*session);
            out.put_u64_le(*received);
            out.put_u8(flag(*gap, FLAG_SNAPSHOT_RECEIVED_GAP));
        }
        Message::InstallSnapshotResponse { term, index } => {
            out.put_u8(TAG_INSTALL_SNAPSHOT_RESPONSE);
            out.put_u64_le(*term);
            out.put_u64_le(*index);
        }
        Message::TimeoutNow { term } => {
            out.put_u8(TAG_TIMEOUT_NOW);
            out.put_u64_le(*term);
        }
    }
    debug_assert_eq!(out.len() - start, encoded_size_bytes(message));
}

fn encode_entry(entry: &Entry, out: &mut BytesMut) {
    out.put_u64_le(entry.term);
    out.put_u64_le(entry.index);
    match &entry.kind {
        EntryKind::Noop => out.put_u8(ENTRY_NOOP),
        EntryKind::Normal(data) => {
            out.put_u8(ENTRY_NORMAL);
            out.put_u32_le(length_u32(data.len()));
            out.put_slice(data);
        }
        EntryKind::AddVoter(node) => {
            out.put_u8(ENTRY_ADD_VOTER);
            out.put_u64_le(*node);
        }
        EntryKind::RemoveVoter(node) => {
            out.put_u8(ENTRY_REMOVE_VOTER);
            out.put_u64_le(*node);
        }
    }
}

fn flag(set: bool, bit: u8) -> u8 {
    if set {
        bit
    } else {
        0
    }
}

fn length_u32(length: usize) -> u32 {
    u32::try_from(length).expect("raft wire: a count or length does not fit u32")
}

/// Decodes one whole message. Normal payloads and snapshot data are slices
/// of `input` (no copy).
pub fn decode(input: &Bytes, limits: &DecodeLimits) -> Result<Message, DecodeError> {
    let mut reader = Reader { input, position: 0 };
    let tag = reader.u8("tag")?;
    let term = reader.u64("term")?;
    let message = match tag {
        TAG_VOTE => {
            let last_index = reader.u64("last_index")?;
            let last_term = reader.u64("last_term")?;
            let flags = reader.flags("vote flags", FLAG_VOTE_PRE_VOTE | FLAG_VOTE_TRANSFER)?;
            Message::Vote {
                term,
                last_index,
                last_term,
                pre_vote: flags & FLAG_VOTE_PRE_VOTE != 0,
                transfer: flags & FLAG_VOTE_TRANSFER != 0,
            }
        }
        TAG_VOTE_RESPONSE => {
            let flags = reader.flags(
                "vote response flags",
                FLAG_VOTE_RESPONSE_GRANTED | FLAG_VOTE_RESPONSE_PRE_VOTE,
            )?;
            Message::VoteResponse {
                term,
                granted: flags & FLAG_VOTE_RESPONSE_GRANTED != 0,
                pre_vote: flags & FLAG_VOTE_RESPONSE_PRE_VOTE != 0,
            }
        }
        TAG_APPEND => {
            let prev_index = reader.u64("prev_index")?;
            let prev_term = reader.u64("prev_term")?;
            let commit = reader.u64("commit")?;
            let read_context = reader.u64("read_context")?;
            let count = reader.count("entry count", limits.max_entries, ENTRY_HEADER_BYTES)?;
            let mut entries = Vec::with_capacity(count);
            for position in 0..count {
                let entry = reader.entry(limits)?;
                let expected = prev_index.checked_add(position as u64 + 1).ok_or(
                    DecodeError::EntryIndexGap {
                        position,
                        expected: u64::MAX,
                        found: entry.index,
                    },
                )?;
                if entry.index != expected {
                    return Err(DecodeError::EntryIndexGap {
                        position,
                        expected,
                        found: entry.index,
                    });
                }
                entries.push(entry);
            }
            Message::Append {
                term,
                prev_index,
                prev_term,
                entries,
                commit,
                read_context,
            }
        }
        TAG_APPEND_RESPONSE => {
            let flags = reader.flags("append response flags", FLAG_APPEND_RESPONSE_SUCCESS)?;
            let match_index = reader.u64("match_index")?;
            let hint = reader.u64("hint")?;
            let read_context = reader.u64("read_context")?;
            Message::AppendResponse {
                term,
                success: flags & FLAG_APPEND_RESPONSE_SUCCESS != 0,
                match_index,
                hint,
                read_context,
            }
        }
        TAG_INSTALL_SNAPSHOT => {
            let index = reader.u64("snapshot index")?;
            let snapshot_term = reader.u64("snapshot term")?;
            let voter_count = reader.count("voter count", limits.max_voters, 8)?;
            let mut voters = Vec::with_capacity(voter_count);
            for _ in 0..voter_count {
                let voter = reader.u64("voter")?;
                if voters.last().is_some_and(|previous| *previous >= voter) {
                    return Err(DecodeError::VotersNotSorted);
                }
                voters.push(voter);
            }
            let session = reader.u64("transfer session")?;
            let offset = reader.u64("chunk offset")?;
            let flags = reader.flags("snapshot chunk flags", FLAG_INSTALL_SNAPSHOT_LAST)?;
            let chunk = reader.payload("snapshot chunk", limits.max_snapshot_chunk_bytes)?;
            let length = chunk.len() as u64;
            if offset.checked_add(length).is_none() {
                return Err(DecodeError::ChunkPastEnd { offset, length });
            }
            Message::InstallSnapshot {
                term,
                index,
                snapshot_term,
                membership: Membership { voters },
                session,
                offset,
                last: flags & FLAG_INSTALL_SNAPSHOT_LAST != 0,
                chunk,
            }
        }
        TAG_SNAPSHOT_RECEIVED => {
            let index = reader.u64("snapshot index")?;
            let session = reader.u64("transfer session")?;
            let received = reader.u64("received")?;
            let flags = reader.flags("snapshot received flags", FLAG_SNAPSHOT_RECEIVED_GAP)?;
            Message::SnapshotReceived {
                term,
                index,
                session,
                received,
                gap: flags & FLAG_SNAPSHOT_RECEIVED_GAP != 0,
            }
        }
        TAG_INSTALL_SNAPSHOT_RESPONSE => Message::InstallSnapshotResponse {
            term,
            index: reader.u64("snapshot index")?,
        },
        TAG_TIMEOUT_NOW => Message::TimeoutNow { term },
        unknown => return Err(DecodeError::UnknownTag(unknown)),
    };
    let left = input.len() - reader.position;
    if left != 0 {
        return Err(DecodeError::TrailingBytes(left));
    }
    Ok(message)
}

struct Reader<'a> {
    input: &'a Bytes,
    position: usize,
}

impl Reader<'_> {
    fn take(&mut self, length: usize, field: &'static str) -> Result<usize, DecodeError> {
        let start = self.position;
        if self.input.len() - start < length {
            return Err(DecodeError::Truncated { field });
        }
        self.position += length;
        Ok(start)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        let start = self.take(1, field)?;
        Ok(self.input[start])
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        let start = self.take(4, field)?;
        let bytes: [u8; 4] = self.input[start..start + 4].try_into().expect("four bytes");
        Ok(u32::from_le_bytes(bytes))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        let start = self.take(8, field)?;
        let bytes: [u8; 8] = self.input[start..start + 8]
            .try_into()
            .expect("eight bytes");
        Ok(u64::from_le_bytes(bytes))
    }

    fn flags(&mut self, field: &'static str, known: u8) -> Result<u8, DecodeError> {
        let flags = self.u8(field)?;
        if flags & !known != 0 {
            return Err(DecodeError::UnknownFlags { field, flags });
        }
        Ok(flags)
    }

    /// A u32 count, bounded by `limit` and by the bytes left (each item is
    /// at least `minimum_item_bytes`).
    fn count(
        &mut self,
        field: &'static str,
        limit: usize,
        minimum_item_bytes: usize,
    ) -> Result<usize, DecodeError> {
        let count = self.u32(field)? as usize;
        if count > limit {
            return Err(DecodeError::OverLimit {
                field,
                value: count as u64,
                limit: limit as u64,
            });
        }
        let left = self.input.len() - self.position;
        if count.saturating_mul(minimum_item_bytes) > left {
            return Err(DecodeError::Truncated { field });
        }
        Ok(count)
    }

    fn payload(&mut self, field: &'static str, limit: usize) -> Result<Bytes, DecodeError> {
        let length = self.u32(field)? as usize;
        if length > limit {
            return Err(DecodeError::OverLimit {
                field,
                value: length as u64,
                limit: limit as u64,
            });
        }
        let start = self.take(length, field)?;
        Ok(self.input.slice(start..start + length))
    }

    fn entry(&mut self, limits: &DecodeLimits) -> Result<Entry, DecodeError> {
        let term = self.u64("entry term")?;
        let index = self.u64("entry index")?;
        let kind = match self.u8("entry kind")? {
            ENTRY_NOOP => EntryKind::Noop,
            ENTRY_NORMAL => EntryKind::Normal(self.payload("entry data", limits.max_entry_bytes)?),
            ENTRY_ADD_VOTER => EntryKind::AddVoter(self.u64("voter")?),
            ENTRY_REMOVE_VOTER => EntryKind::RemoveVoter(self.u64("voter")?),
            unknown => return Err(DecodeError::UnknownEntryKind(unknown)),
        };
        Ok(Entry { term, index, kind })
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
