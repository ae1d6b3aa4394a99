//! What a stream's Raft log carries: one operation per normal entry, and the
//! journal record kinds that hold the log on disk. Formats are documented
//! byte by byte in docs/jetstream-format.md; all integers little-endian.
//!
//! Operations are deterministic: applying the same log to the same store
//! gives the same state, so a replay after a crash (or, later, a follower)
//! converges. A message entry carries its sequence and time, assigned once
//! by the leader at ingest; applying a message whose sequence the store
//! already has is a no-op, which makes replay after a checkpoint idempotent.

use bytes::Bytes;

/// Journal record kinds (the journal's `kind` byte).
/// A normal Raft entry: the body is its data (a stream operation).
pub const RECORD_ENTRY_NORMAL: u8 = 1;
/// Body: term u64, vote u64 (0 = none).
pub const RECORD_HARD_STATE: u8 = 2;
/// A leader's noop entry: empty body.
pub const RECORD_ENTRY_NOOP: u8 = 3;
/// A membership entry adding a voter: body its node id u64.
pub const RECORD_ENTRY_ADD_VOTER: u8 = 5;
/// A membership entry removing a voter: body its node id u64.
pub const RECORD_ENTRY_REMOVE_VOTER: u8 = 6;

/// Whether a journal record kind holds a Raft entry.
pub fn is_entry_record(kind: u8) -> bool {
    matches!(
        kind,
        RECORD_ENTRY_NORMAL
            | RECORD_ENTRY_NOOP
            | RECORD_ENTRY_ADD_VOTER
            | RECORD_ENTRY_REMOVE_VOTER
    )
}

/// Whether a normal entry's data is a config change (its replicas write
/// the config file before applying it).
pub fn is_config(data: &[u8]) -> bool {
    data.first() == Some(&OPERATION_CONFIG)
}

/// The group installed a snapshot from its leader (index: the snapshot's,
/// term: its term; empty body): every earlier entry record of the group is
/// void.
pub const RECORD_SNAPSHOT: u8 = 4;

/// Operation tags (first byte of a normal entry's data).
const OPERATION_MESSAGE: u8 = 1;
/// A message no consumer wanted when the leader accepted it (interest
/// retention): its sequence is used, the message is not kept. Same body.
const OPERATION_MESSAGE_UNRETAINED: u8 = 9;
const OPERATION_PURGE: u8 = 2;
const OPERATION_DELETE: u8 = 3;
const OPERATION_CONFIG: u8 = 4;
const OPERATION_CONSUMER_CREATE: u8 = 5;
const OPERATION_CONSUMER_DELETE: u8 = 6;
const OPERATION_CONSUMER_STATE: u8 = 7;
const OPERATION_EXPIRE: u8 = 8;

const PURGE_HAS_FILTER: u8 = 1;
const PURGE_HAS_SEQUENCE: u8 = 2;
const PURGE_HAS_KEEP: u8 = 4;

/// Longest subject an entry may carry (the core protocol's control line
/// bounds it far lower).
pub const SUBJECT_BYTES_MAX: usize = 64 * 1024;
/// Largest stored config an entry may carry.
pub const CONFIG_BYTES_MAX: usize = 1 << 20;
/// Most sequences one [`Operation::Expire`] carries.
pub const EXPIRE_SEQUENCES_MAX: usize = 4096;
/// Longest consumer name an entry may carry (the API allows far less).
pub const CONSUMER_NAME_BYTES_MAX: usize = 1024;
/// Largest consumer delivery state an entry may carry: a full
/// [`DeliveryState`](super::consumer::delivery::DeliveryState) encoding at its pending
/// limit (the journal's record limit bounds it far lower in practice).
pub const CONSUMER_STATE_BYTES_MAX: usize = 41
    + super::consumer::delivery::PENDING_MAX * 24
    + 4
    + super::consumer::delivery::PENDING_MAX * 16;

/// One operation on a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// Store a message at `sequence` (greater than every sequence before it).
    Message {
        sequence: u64,
        timestamp_ns: u64,
        subject: Bytes,
        headers: Bytes,
        payload: Bytes,
        /// `false`: an interest stream's leader found no consumer that
        /// wanted it; the sequence is used and the message not kept. The
        /// leader decides, so every replica (and every replay) agrees
        /// whatever consumers it runs itself.
        retained: bool,
    },
    /// Purge as `$JS.API.STREAM.PURGE` asks: messages up to `last` (the
    /// last sequence assigned when it was proposed, so a replay removes the
    /// same ones) matching `filter` (all without one), below `sequence` if
    /// given, keeping the newest `keep` if given.
    Purge {
        last: u64,
        filter: Option<Bytes>,
        sequence: Option<u64>,
        keep: Option<u64>,
    },
    /// Remove one message; `erase` overwrites its data (nats-server's
    /// secure delete; here the record is dropped either way).
    Delete { sequence: u64, erase: bool },
    /// From here on the stream runs with this config: its stored JSON
    /// (`StreamConfig::to_stored_json`), already checked by the meta shard.
    Config { json: Bytes },
    /// A durable consumer is created, or its config updated (a consumer of
    /// that name exists when it applies): its stored JSON
    /// (`ConsumerConfig::to_stored_json`), when it was created, and the
    /// stream sequence a new consumer starts delivering at (resolved from
    /// its deliver policy by the leader when proposed, so a replay over a
    /// store that holds later messages starts it at the same place).
    ConsumerCreate {
        name: String,
        created_unix_ns: u64,
        start_sequence: u64,
        json: Bytes,
    },
    /// A durable consumer is deleted.
    ConsumerDelete { name: String },
    /// A durable consumer's whole delivery state (`DeliveryState::encode`):
    /// a full snapshot, so the last one applied wins.
    ConsumerState { name: String, state: Bytes },
    /// Messages the leader found expired by its clock (max_age, per-message
    /// TTL): removed where still stored. The decision is in the log, so
    /// every replica removes the same messages whatever its own clock says.
    /// Sequences strictly increasing, none zero, at most
    /// [`EXPIRE_SEQUENCES_MAX`].
    Expire { sequences: Vec<u64> },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("entry truncated: needed {needed} bytes at offset {offset}")]
    Truncated { offset: usize, needed: usize },
    #[error("unknown operation tag {0}")]
    UnknownOperation(u8),
    #[error("unknown raft entry kind {0}")]
    UnknownEntryKind(u8),
    #[error("unknown purge flags {0:#x}")]
    UnknownFlags(u8),
    #[error("config of {0} bytes is over the limit")]
    ConfigTooLong(usize),
    #[error("subject of {0} bytes is over the limit")]
    SubjectTooLong(usize),
    #[error("{0} trailing bytes")]
    Trailing(usize),
    #[error("sequence 0 is not a valid message sequence")]
    ZeroSequence,
    #[error("a field is not in its canonical encoding: {0}")]
    NonCanonical(&'static str),
    #[error("consumer name of {0} bytes is over the limit")]
    NameTooLong(usize),
    #[error("consumer state of {0} bytes is over the limit")]
    StateTooLong(usize),
    #[error("{0} expired sequences are over the limit")]
    TooManySequences(usize),
}

impl Operation {
    /// Encodes into a fresh buffer.
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.encoded_bytes());
        match self {
            Operation::Message {
                sequence,
                timestamp_ns,
                subject,
                headers,
                payload,
                retained,
            } => {
                assert!(*sequence > 0 && subject.len() <= SUBJECT_BYTES_MAX);
                out.push(if *retained {
                    OPERATION_MESSAGE
                } else {
                    OPERATION_MESSAGE_UNRETAINED
                });
                out.extend_from_slice(&sequence.to_le_bytes());
                out.extend_from_slice(&timestamp_ns.to_le_bytes());
                out.extend_from_slice(&(subject.len() as u32).to_le_bytes());
                out.extend_from_slice(&(headers.len() as u32).to_le_bytes());
                out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                out.extend_from_slice(subject);
                out.extend_from_slice(headers);
                out.extend_from_slice(payload);
            }
            Operation::Purge {
                last,
                filter,
                sequence,
                keep,
            } => {
                let mut flags = 0;
                if filter.is_some() {
                    flags |= PURGE_HAS_FILTER;
                }
                if sequence.is_some() {
                    flags |= PURGE_HAS_SEQUENCE;
                }
                if keep.is_some() {
                    flags |= PURGE_HAS_KEEP;
                }
                out.push(OPERATION_PURGE);
                out.push(flags);
                out.extend_from_slice(&last.to_le_bytes());
                out.extend_from_slice(&sequence.unwrap_or(0).to_le_bytes());
                out.extend_from_slice(&keep.unwrap_or(0).to_le_bytes());
                let filter = filter.as_deref().unwrap_or(&[]);
                assert!(filter.len() <= SUBJECT_BYTES_MAX);
                out.extend_from_slice(&(filter.len() as u32).to_le_bytes());
                out.extend_from_slice(filter);
            }
            Operation::Delete { sequence, erase } => {
                out.push(OPERATION_DELETE);
                out.extend_from_slice(&sequence.to_le_bytes());
                out.push(u8::from(*erase));
            }
            Operation::Config { json } => {
                assert!(json.len() <= CONFIG_BYTES_MAX);
                out.push(OPERATION_CONFIG);
                out.extend_from_slice(&(json.len() as u32).to_le_bytes());
                out.extend_from_slice(json);
            }
            Operation::ConsumerCreate {
                name,
                created_unix_ns,
                start_sequence,
                json,
            } => {
                assert!(name.len() <= CONSUMER_NAME_BYTES_MAX && json.len() <= CONFIG_BYTES_MAX);
                assert!(*start_sequence > 0);
                out.push(OPERATION_CONSUMER_CREATE);
                out.extend_from_slice(&created_unix_ns.to_le_bytes());
                out.extend_from_slice(&start_sequence.to_le_bytes());
                out.extend_from_slice(&(name.len() as u32).to_le_bytes());
                out.extend_from_slice(&(json.len() as u32).to_le_bytes());
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(json);
            }
            Operation::ConsumerDelete { name } => {
                assert!(name.len() <= CONSUMER_NAME_BYTES_MAX);
                out.push(OPERATION_CONSUMER_DELETE);
                out.extend_from_slice(&(name.len() as u32).to_le_bytes());
                out.extend_from_slice(name.as_bytes());
            }
            Operation::ConsumerState { name, state } => {
                assert!(name.len() <= CONSUMER_NAME_BYTES_MAX);
                assert!(state.len() <= CONSUMER_STATE_BYTES_MAX);
                out.push(OPERATION_CONSUMER_STATE);
                out.extend_from_slice(&(name.len() as u32).to_le_bytes());
                out.extend_from_slice(&(state.len() as u32).to_le_bytes());
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(state);
            }
            Operation::Expire { sequences } => {
                assert!(sequences.len() <= EXPIRE_SEQUENCES_MAX);
                assert!(
                    sequences.first().is_none_or(|first| *first > 0)
                        && sequences.windows(2).all(|pair| pair[0] < pair[1]),
                    "expired sequences are increasing and not zero"
                );
                out.push(OPERATION_EXPIRE);
                out.extend_from_slice(&(sequences.len() as u32).to_le_bytes());
                for sequence in sequences {
                    out.extend_from_slice(&sequence.to_le_bytes());
                }
            }
        }
        debug_assert_eq!(out.len(), self.encoded_bytes());
        Bytes::from(out)
    }

    pub fn encoded_bytes(&self) -> usize {
        match self {
            Operation::Message {
                subject,
                headers,
                payload,
                ..
            } => 1 + 8 + 8 + 12 + subject.len() + headers.len() + payload.len(),
            Operation::Purge { filter, .. } => {
                1 + 1 + 8 + 8 + 8 + 4 + filter.as_ref().map_or(0, |filter| filter.len())
            }
            Operation::Delete { .. } => 1 + 8 + 1,
            Operation::Config { json } => 1 + 4 + json.len(),
            Operation::ConsumerCreate { name, json, .. } => {
                1 + 8 + 8 + 4 + 4 + name.len() + json.len()
            }
            Operation::ConsumerDelete { name } => 1 + 4 + name.len(),
            Operation::ConsumerState { name, state } => {
                Operation::consumer_state_bytes(name.len(), state.len())
            }
            Operation::Expire { sequences } => 1 + 4 + 8 * sequences.len(),
        }
    }

    /// Encoded bytes of a `ConsumerState` entry, from its parts' sizes.
    pub fn consumer_state_bytes(name_bytes: usize, state_bytes: usize) -> usize {
        1 + 4 + 4 + name_bytes + state_bytes
    }

    /// Decodes an operation; slices of `data` are shared, not copied.
    pub fn decode(data: &Bytes) -> Result<Operation, DecodeError> {
        let mut reader = Reader { data, offset: 0 };
        let operation = match reader.u8()? {
            tag @ (OPERATION_MESSAGE | OPERATION_MESSAGE_UNRETAINED) => {
                let sequence = reader.u64()?;
                if sequence == 0 {
                    return Err(DecodeError::ZeroSequence);
                }
                let timestamp_ns = reader.u64()?;
                let subject_bytes = reader.u32()? as usize;
                let header_bytes = reader.u32()? as usize;
                let payload_bytes = reader.u32()? as usize;
                if subject_bytes > SUBJECT_BYTES_MAX {
                    return Err(DecodeError::SubjectTooLong(subject_bytes));
                }
                Operation::Message {
                    sequence,
                    timestamp_ns,
                    subject: reader.bytes(subject_bytes)?,
                    headers: reader.bytes(header_bytes)?,
                    payload: reader.bytes(payload_bytes)?,
                    retained: tag == OPERATION_MESSAGE,
                }
            }
            OPERATION_PURGE => {
                let flags = reader.u8()?;
                if flags & !(PURGE_HAS_FILTER | PURGE_HAS_SEQUENCE | PURGE_HAS_KEEP) != 0 {
                    return Err(DecodeError::UnknownFlags(flags));
                }
                let last = reader.u64()?;
                let sequence = reader.u64()?;
                let keep = reader.u64()?;
                let filter_bytes = reader.u32()? as usize;
                if filter_bytes > SUBJECT_BYTES_MAX {
                    return Err(DecodeError::SubjectTooLong(filter_bytes));
                }
                let filter = reader.bytes(filter_bytes)?;
                if flags & PURGE_HAS_FILTER == 0 && !filter.is_empty() {
                    return Err(DecodeError::NonCanonical("filter without its flag"));
                }
                if flags & PURGE_HAS_SEQUENCE == 0 && sequence != 0 {
                    return Err(DecodeError::NonCanonical("sequence without its flag"));
                }
                if flags & PURGE_HAS_KEEP == 0 && keep != 0 {
                    return Err(DecodeError::NonCanonical("keep without its flag"));
                }
                Operation::Purge {
                    last,
                    filter: (flags & PURGE_HAS_FILTER != 0).then_some(filter),
                    sequence: (flags & PURGE_HAS_SEQUENCE != 0).then_some(sequence),
                    keep: (flags & PURGE_HAS_KEEP != 0).then_some(keep),
                }
            }
            OPERATION_DELETE => {
                let sequence = reader.u64()?;
                let erase = match reader.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(DecodeError::NonCanonical("erase is 0 or 1")),
                };
                Operation::Delete { sequence, erase }
            }
            OPERATION_CONFIG => {
                let json_bytes = reader.u32()? as usize;
                if json_bytes > CONFIG_BYTES_MAX {
                    return Err(DecodeError::ConfigTooLong(json_bytes));
                }
                Operation::Config {
                    json: reader.bytes(json_bytes)?,
                }
            }
            OPERATION_CONSUMER_CREATE => {
                let created_unix_ns = reader.u64()?;
                let start_sequence = reader.u64()?;
                if start_sequence == 0 {
                    return Err(DecodeError::ZeroSequence);
                }
                let name_bytes = reader.u32()? as usize;
                let json_bytes = reader.u32()? as usize;
                if name_bytes > CONSUMER_NAME_BYTES_MAX {
                    return Err(DecodeError::NameTooLong(name_bytes));
                }
                if json_bytes > CONFIG_BYTES_MAX {
                    return Err(DecodeError::ConfigTooLong(json_bytes));
                }
                Operation::ConsumerCreate {
                    name: reader.name(name_bytes)?,
                    created_unix_ns,
                    start_sequence,
                    json: reader.bytes(json_bytes)?,
                }
            }
            OPERATION_CONSUMER_DELETE => {
                let name_bytes = reader.u32()? as usize;
                if name_bytes > CONSUMER_NAME_BYTES_MAX {
                    return Err(DecodeError::NameTooLong(name_bytes));
                }
                Operation::ConsumerDelete {
                    name: reader.name(name_bytes)?,
                }
            }
            OPERATION_CONSUMER_STATE => {
                let name_bytes = reader.u32()? as usize;
                let state_bytes = reader.u32()? as usize;
                if name_bytes > CONSUMER_NAME_BYTES_MAX {
                    return Err(DecodeError::NameTooLong(name_bytes));
                }
                if state_bytes > CONSUMER_STATE_BYTES_MAX {
                    return Err(DecodeError::StateTooLong(state_bytes));
                }
                Operation::ConsumerState {
                    name: reader.name(name_bytes)?,
                    state: reader.bytes(state_bytes)?,
                }
            }
            OPERATION_EXPIRE => {
                let count = reader.u32()? as usize;
                if count > EXPIRE_SEQUENCES_MAX {
                    return Err(DecodeError::TooManySequences(count));
                }
                let mut sequences = Vec::with_capacity(count);
                for _ in 0..count {
                    let sequence = reader.u64()?;
                    if sequence <= sequences.last().copied().unwrap_or(0) {
                        return Err(DecodeError::NonCanonical(
                            "expired sequences are increasing and not zero",
                        ));
                    }
                    sequences.push(sequence);
                }
                Operation::Expire { sequences }
            }
            tag => return Err(DecodeError::UnknownOperation(tag)),
        };
        if reader.offset != data.len() {
            return Err(DecodeError::Trailing(data.len() - reader.offset));
        }
        Ok(operation)
    }
}

/// The journal record kind and body of a Raft entry (the body shares the
/// entry's bytes: nothing is copied).
pub fn entry_record(entry: &tern_raft::Entry) -> (u8, Bytes) {
    match &entry.kind {
        tern_raft::EntryKind::Noop => (RECORD_ENTRY_NOOP, Bytes::new()),
        tern_raft::EntryKind::Normal(data) => (RECORD_ENTRY_NORMAL, data.clone()),
        tern_raft::EntryKind::AddVoter(node) => (
            RECORD_ENTRY_ADD_VOTER,
            Bytes::copy_from_slice(&node.to_le_bytes()),
        ),
        tern_raft::EntryKind::RemoveVoter(node) => (
            RECORD_ENTRY_REMOVE_VOTER,
            Bytes::copy_from_slice(&node.to_le_bytes()),
        ),
    }
}

/// The Raft entry kind a journal entry record holds.
pub fn entry_kind(record_kind: u8, body: &[u8]) -> Result<tern_raft::EntryKind, DecodeError> {
    match record_kind {
        RECORD_ENTRY_NOOP if body.is_empty() => Ok(tern_raft::EntryKind::Noop),
        RECORD_ENTRY_NOOP => Err(DecodeError::Trailing(body.len())),
        RECORD_ENTRY_NORMAL => Ok(tern_raft::EntryKind::Normal(Bytes::copy_from_slice(body))),
        RECORD_ENTRY_ADD_VOTER | RECORD_ENTRY_REMOVE_VOTER => {
            let node: [u8; 8] = body.try_into().map_err(|_| match body.len() {
                short if short < 8 => DecodeError::Truncated {
                    offset: short,
                    needed: 8,
                },
                long => DecodeError::Trailing(long - 8),
            })?;
            let node = u64::from_le_bytes(node);
            Ok(match record_kind {
                RECORD_ENTRY_ADD_VOTER => tern_raft::EntryKind::AddVoter(node),
                _ => tern_raft::EntryKind::RemoveVoter(node),
            })
        }
        other => Err(DecodeError::UnknownEntryKind(other)),
    }
}

/// Offset of the sequence and timestamp in an encoded message operation.
const MESSAGE_SEQUENCE_AT: usize = 1;
const MESSAGE_TIMESTAMP_AT: usize = 9;
const MESSAGE_HEADER_BYTES: usize = 29;

/// The sequence of a message operation's encoding, `None` for any other
/// operation (read without decoding the rest: `tern storage check` maps
/// journal records to the messages they hold).
pub fn message_sequence(data: &[u8]) -> Option<u64> {
    let message = matches!(
        data.first(),
        Some(&OPERATION_MESSAGE | &OPERATION_MESSAGE_UNRETAINED)
    );
    if !message || data.len() < MESSAGE_HEADER_BYTES {
        return None;
    }
    let bytes = &data[MESSAGE_SEQUENCE_AT..MESSAGE_SEQUENCE_AT + 8];
    Some(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
}

/// A message operation encoded when it arrives, before its sequence and
/// time are known (both zero until [`PendingMessage::finish`]): the one
/// copy of a published message the publish path makes.
pub struct PendingMessage {
    data: bytes::BytesMut,
    subject_bytes: usize,
    header_bytes: usize,
}

impl PendingMessage {
    pub fn new(subject: &[u8], headers: &[u8], payload: &[u8]) -> PendingMessage {
        assert!(subject.len() <= SUBJECT_BYTES_MAX);
        let mut data = bytes::BytesMut::with_capacity(
            MESSAGE_HEADER_BYTES + subject.len() + headers.len() + payload.len(),
        );
        data.extend_from_slice(&[OPERATION_MESSAGE]);
        data.extend_from_slice(&[0; 16]);
        data.extend_from_slice(&(subject.len() as u32).to_le_bytes());
        data.extend_from_slice(&(headers.len() as u32).to_le_bytes());
        data.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        data.extend_from_slice(subject);
        data.extend_from_slice(headers);
        data.extend_from_slice(payload);
        PendingMessage {
            data,
            subject_bytes: subject.len(),
            header_bytes: headers.len(),
        }
    }

    pub fn subject(&self) -> &[u8] {
        &self.data[self.subject_range()]
    }

    /// Where the subject sits in the encoded operation.
    pub fn subject_range(&self) -> std::ops::Range<usize> {
        MESSAGE_HEADER_BYTES..MESSAGE_HEADER_BYTES + self.subject_bytes
    }

    pub fn headers(&self) -> &[u8] {
        let start = MESSAGE_HEADER_BYTES + self.subject_bytes;
        &self.data[start..start + self.header_bytes]
    }

    pub fn payload(&self) -> &[u8] {
        &self.data[MESSAGE_HEADER_BYTES + self.subject_bytes + self.header_bytes..]
    }

    /// Sets the sequence, the time and whether it is kept (see
    /// [`Operation::Message`]); the encoded operation.
    pub fn finish(mut self, sequence: u64, timestamp_ns: u64, retained: bool) -> Bytes {
        assert!(sequence > 0);
        if !retained {
            self.data[0] = OPERATION_MESSAGE_UNRETAINED;
        }
        self.data[MESSAGE_SEQUENCE_AT..MESSAGE_SEQUENCE_AT + 8]
            .copy_from_slice(&sequence.to_le_bytes());
        self.data[MESSAGE_TIMESTAMP_AT..MESSAGE_TIMESTAMP_AT + 8]
            .copy_from_slice(&timestamp_ns.to_le_bytes());
        self.data.freeze()
    }
}

/// A hard state record body: term u64, vote u64 (0 = none).
pub fn encode_hard_state(hard_state: &tern_raft::HardState) -> [u8; 16] {
    let mut out = [0; 16];
    out[0..8].copy_from_slice(&hard_state.term.to_le_bytes());
    out[8..16].copy_from_slice(&hard_state.vote.unwrap_or(0).to_le_bytes());
    out
}

pub fn decode_hard_state(body: &[u8]) -> Result<tern_raft::HardState, DecodeError> {
    if body.len() != 16 {
        return Err(DecodeError::Truncated {
            offset: body.len(),
            needed: 16,
        });
    }
    let term = u64::from_le_bytes(body[0..8].try_into().expect("8 bytes"));
    let vote = u64::from_le_bytes(body[8..16].try_into().expect("8 bytes"));
    Ok(tern_raft::HardState {
        term,
        vote: (vote != 0).then_some(vote),
    })
}

struct Reader<'a> {
    data: &'a Bytes,
    offset: usize,
}

impl Reader<'_> {
    fn take(&mut self, count: usize) -> Result<std::ops::Range<usize>, DecodeError> {
        let end = self
            .offset
            .checked_add(count)
            .filter(|&end| end <= self.data.len())
            .ok_or(DecodeError::Truncated {
                offset: self.offset,
                needed: count,
            })?;
        let range = self.offset..end;
        self.offset = end;
        Ok(range)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        let range = self.take(1)?;
        Ok(self.data[range.start])
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let range = self.take(4)?;
        Ok(u32::from_le_bytes(
            self.data[range].try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let range = self.take(8)?;
        Ok(u64::from_le_bytes(
            self.data[range].try_into().expect("8 bytes"),
        ))
    }

    fn bytes(&mut self, count: usize) -> Result<Bytes, DecodeError> {
        let range = self.take(count)?;
        Ok(self.data.slice(range))
    }

    /// A consumer name: UTF-8, not empty.
    fn name(&mut self, count: usize) -> Result<String, DecodeError> {
        let range = self.take(count)?;
        match std::str::from_utf8(&self.data[range]) {
            Ok(name) if !name.is_empty() => Ok(name.to_string()),
            Ok(_) => Err(DecodeError::NonCanonical("a consumer name is not empty")),
            Err(_) => Err(DecodeError::NonCanonical("a consumer name is UTF-8")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_sequence_reads_only_message_operations() {
        let message = Operation::Message {
            sequence: 42,
            timestamp_ns: 7,
            subject: Bytes::from_static(b"a"),
            headers: Bytes::new(),
            payload: Bytes::from_static(b"x"),
            retained: true,
        }
        .encode();
        assert_eq!(message_sequence(&message), Some(42));
        let mut unretained = message.to_vec();
        unretained[0] = OPERATION_MESSAGE_UNRETAINED;
        assert_eq!(message_sequence(&unretained), Some(42));
        assert_eq!(message_sequence(&message[..20]), None, "truncated");
        let delete = Operation::Delete {
            sequence: 42,
            erase: false,
        }
        .encode();
        assert_eq!(message_sequence(&delete), None);
        assert_eq!(message_sequence(&[]), None);
    }

    fn round_trip(operation: Operation) {
        let encoded = operation.encode();
        assert_eq!(encoded.len(), operation.encoded_bytes());
        assert_eq!(Operation::decode(&encoded), Ok(operation));
    }

    #[test]
    fn every_operation_round_trips() {
        round_trip(Operation::Message {
            sequence: 7,
            timestamp_ns: 1_700_000_000_123_456_789,
            subject: Bytes::from_static(b"orders.new"),
            headers: Bytes::from_static(b"NATS/1.0\r\nNats-Msg-Id: a\r\n\r\n"),
            payload: Bytes::from_static(b"hello"),
            retained: true,
        });
        round_trip(Operation::Message {
            sequence: 8,
            timestamp_ns: 1_700_000_000_123_456_790,
            subject: Bytes::from_static(b"orders.unwanted"),
            headers: Bytes::new(),
            payload: Bytes::from_static(b"nobody listens"),
            retained: false,
        });
        round_trip(Operation::Purge {
            last: 12,
            filter: Some(Bytes::from_static(b"orders.>")),
            sequence: None,
            keep: Some(3),
        });
        round_trip(Operation::Purge {
            last: 0,
            filter: None,
            sequence: Some(10),
            keep: None,
        });
        round_trip(Operation::Delete {
            sequence: 3,
            erase: true,
        });
        round_trip(Operation::Config {
            json: Bytes::from_static(br#"{"name":"S"}"#),
        });
        round_trip(Operation::Expire {
            sequences: vec![1, 5, u64::MAX],
        });
        round_trip(Operation::Expire { sequences: vec![] });
    }

    #[test]
    fn expire_layout_is_pinned_and_refuses_what_is_not_canonical() {
        let encoded = Operation::Expire {
            sequences: vec![2, 3],
        }
        .encode();
        let expected: Vec<u8> = [
            &[8u8][..],
            &2u32.to_le_bytes(),
            &2u64.to_le_bytes(),
            &3u64.to_le_bytes(),
        ]
        .concat();
        assert_eq!(&encoded[..], &expected[..]);
        let with = |count: u32, sequences: &[u64]| {
            let mut out = vec![8u8];
            out.extend_from_slice(&count.to_le_bytes());
            for sequence in sequences {
                out.extend_from_slice(&sequence.to_le_bytes());
            }
            Operation::decode(&Bytes::from(out))
        };
        assert!(matches!(
            with(2, &[3, 3]),
            Err(DecodeError::NonCanonical(_))
        ));
        assert!(matches!(
            with(2, &[4, 3]),
            Err(DecodeError::NonCanonical(_))
        ));
        assert!(matches!(with(1, &[0]), Err(DecodeError::NonCanonical(_))));
        assert!(matches!(with(2, &[1]), Err(DecodeError::Truncated { .. })));
        assert_eq!(
            with(EXPIRE_SEQUENCES_MAX as u32 + 1, &[]),
            Err(DecodeError::TooManySequences(EXPIRE_SEQUENCES_MAX + 1))
        );
    }

    #[test]
    fn consumer_operations_round_trip() {
        round_trip(Operation::ConsumerCreate {
            name: "orders-worker".into(),
            created_unix_ns: 1_700_000_000_000_000_001,
            start_sequence: 42,
            json: Bytes::from_static(br#"{"durable_name":"orders-worker"}"#),
        });
        round_trip(Operation::ConsumerDelete { name: "d".into() });
        round_trip(Operation::ConsumerState {
            name: "d".into(),
            state: Bytes::from_static(&[1, 2, 3]),
        });
        round_trip(Operation::ConsumerState {
            name: "d".into(),
            state: Bytes::new(),
        });
    }

    #[test]
    fn consumer_layouts_are_pinned() {
        let create = Operation::ConsumerCreate {
            name: "d".into(),
            created_unix_ns: 2,
            start_sequence: 3,
            json: Bytes::from_static(b"{}"),
        }
        .encode();
        let expected: Vec<u8> = [
            &[5u8][..],
            &2u64.to_le_bytes(),
            &3u64.to_le_bytes(),
            &1u32.to_le_bytes(),
            &2u32.to_le_bytes(),
            b"d",
            b"{}",
        ]
        .concat();
        assert_eq!(&create[..], &expected[..]);
        let delete = Operation::ConsumerDelete { name: "ab".into() }.encode();
        assert_eq!(&delete[..], &[6u8, 2, 0, 0, 0, b'a', b'b'][..]);
        let state = Operation::ConsumerState {
            name: "d".into(),
            state: Bytes::from_static(&[9, 8]),
        }
        .encode();
        assert_eq!(&state[..], &[7u8, 1, 0, 0, 0, 2, 0, 0, 0, b'd', 9, 8][..]);
    }

    #[test]
    fn malformed_consumer_entries_are_named_errors() {
        let state = Operation::ConsumerState {
            name: "consumer".into(),
            state: Bytes::from_static(b"state"),
        }
        .encode();
        for cut in 0..state.len() {
            assert!(
                matches!(
                    Operation::decode(&state.slice(..cut)),
                    Err(DecodeError::Truncated { .. })
                ),
                "cut at {cut}"
            );
        }
        let mut long_name = vec![7u8];
        long_name.extend_from_slice(&((CONSUMER_NAME_BYTES_MAX as u32) + 1).to_le_bytes());
        long_name.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            Operation::decode(&Bytes::from(long_name)),
            Err(DecodeError::NameTooLong(CONSUMER_NAME_BYTES_MAX + 1))
        );
        let mut long_state = vec![7u8];
        long_state.extend_from_slice(&1u32.to_le_bytes());
        long_state.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Operation::decode(&Bytes::from(long_state)),
            Err(DecodeError::StateTooLong(u32::MAX as usize))
        );
        assert_eq!(
            Operation::decode(&Bytes::from_static(&[6, 0, 0, 0, 0])),
            Err(DecodeError::NonCanonical("a consumer name is not empty"))
        );
        assert_eq!(
            Operation::decode(&Bytes::from_static(&[6, 1, 0, 0, 0, 0xff])),
            Err(DecodeError::NonCanonical("a consumer name is UTF-8"))
        );
        let mut zero_start = Operation::ConsumerCreate {
            name: "d".into(),
            created_unix_ns: 1,
            start_sequence: 1,
            json: Bytes::new(),
        }
        .encode()
        .to_vec();
        zero_start[9..17].fill(0);
        assert_eq!(
            Operation::decode(&Bytes::from(zero_start)),
            Err(DecodeError::ZeroSequence)
        );
    }

    #[test]
    fn the_config_layout_is_pinned_and_bounded() {
        let encoded = Operation::Config {
            json: Bytes::from_static(b"{}"),
        }
        .encode();
        assert_eq!(&encoded[..], &[4u8, 2, 0, 0, 0, b'{', b'}'][..]);
        let mut too_long = vec![4u8];
        too_long.extend_from_slice(&((CONFIG_BYTES_MAX as u32) + 1).to_le_bytes());
        assert_eq!(
            Operation::decode(&Bytes::from(too_long)),
            Err(DecodeError::ConfigTooLong(CONFIG_BYTES_MAX + 1))
        );
    }

    #[test]
    fn a_pending_message_encodes_as_the_operation() {
        let pending = PendingMessage::new(b"orders.1", b"NATS/1.0\r\n\r\n", b"hello");
        assert_eq!(pending.subject(), b"orders.1");
        assert_eq!(pending.headers(), b"NATS/1.0\r\n\r\n");
        assert_eq!(pending.payload(), b"hello");
        let encoded = pending.finish(42, 7, true);
        let expected = Operation::Message {
            sequence: 42,
            timestamp_ns: 7,
            subject: Bytes::from_static(b"orders.1"),
            headers: Bytes::from_static(b"NATS/1.0\r\n\r\n"),
            payload: Bytes::from_static(b"hello"),
            retained: true,
        };
        assert_eq!(encoded, expected.encode());
        assert_eq!(Operation::decode(&encoded), Ok(expected));
    }

    #[test]
    fn the_message_layout_is_pinned() {
        let encoded = Operation::Message {
            sequence: 1,
            timestamp_ns: 2,
            subject: Bytes::from_static(b"s"),
            headers: Bytes::new(),
            payload: Bytes::from_static(b"p"),
            retained: true,
        }
        .encode();
        let expected: Vec<u8> = [
            &[1u8][..],
            &1u64.to_le_bytes(),
            &2u64.to_le_bytes(),
            &1u32.to_le_bytes(),
            &0u32.to_le_bytes(),
            &1u32.to_le_bytes(),
            b"s",
            b"p",
        ]
        .concat();
        assert_eq!(&encoded[..], &expected[..]);
    }

    #[test]
    fn malformed_entries_are_named_errors() {
        let message = Operation::Message {
            sequence: 1,
            timestamp_ns: 2,
            subject: Bytes::from_static(b"subject"),
            headers: Bytes::new(),
            payload: Bytes::from_static(b"payload"),
            retained: true,
        }
        .encode();
        let mut unretained = message.to_vec();
        unretained[0] = OPERATION_MESSAGE_UNRETAINED;
        let unretained = Bytes::from(unretained);
        for encoded in [&message, &unretained] {
            for cut in 0..encoded.len() {
                assert!(
                    matches!(
                        Operation::decode(&encoded.slice(..cut)),
                        Err(DecodeError::Truncated { .. })
                    ),
                    "cut at {cut}"
                );
            }
        }
        let mut trailing = message.to_vec();
        trailing.push(0);
        assert_eq!(
            Operation::decode(&Bytes::from(trailing)),
            Err(DecodeError::Trailing(1))
        );
        assert_eq!(
            Operation::decode(&Bytes::from_static(&[10])),
            Err(DecodeError::UnknownOperation(10))
        );
        let mut zero = message.to_vec();
        zero[1..9].fill(0);
        assert_eq!(
            Operation::decode(&Bytes::from(zero)),
            Err(DecodeError::ZeroSequence)
        );
    }

    #[test]
    fn entry_records_and_hard_state_round_trip() {
        let entry = tern_raft::Entry {
            term: 3,
            index: 9,
            kind: tern_raft::EntryKind::Normal(Bytes::from_static(b"data")),
        };
        let (kind, body) = entry_record(&entry);
        assert_eq!(entry_kind(kind, &body), Ok(entry.kind));
        let (kind, body) = entry_record(&tern_raft::Entry {
            term: 1,
            index: 1,
            kind: tern_raft::EntryKind::Noop,
        });
        assert_eq!(entry_kind(kind, &body), Ok(tern_raft::EntryKind::Noop));
        assert_eq!(
            entry_kind(RECORD_ENTRY_NOOP, b"x"),
            Err(DecodeError::Trailing(1))
        );
        assert_eq!(entry_kind(7, b""), Err(DecodeError::UnknownEntryKind(7)));
        for kind in [
            tern_raft::EntryKind::AddVoter(0xfeed_f00d_dead_beef),
            tern_raft::EntryKind::RemoveVoter(7),
        ] {
            let (record, body) = entry_record(&tern_raft::Entry {
                term: 2,
                index: 3,
                kind: kind.clone(),
            });
            assert!(is_entry_record(record));
            assert_eq!(entry_kind(record, &body), Ok(kind));
            assert!(entry_kind(record, &body[..7]).is_err());
            assert!(entry_kind(record, &[0; 9]).is_err());
        }
        let hard_state = tern_raft::HardState {
            term: 4,
            vote: Some(1),
        };
        assert_eq!(
            decode_hard_state(&encode_hard_state(&hard_state)),
            Ok(hard_state)
        );
    }
}
