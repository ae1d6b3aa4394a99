//! What only the leader of a stream's group keeps: replies owed to clients
//! until their entries apply, what is proposed and not yet applied (which
//! ingest checks must count), and the duplicate window. None of it is
//! replicated state: a new leader starts these afresh (the dedupe window
//! from the store), and applying entries never depends on them.

use std::collections::VecDeque;

use bytes::Bytes;
use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;
use tern_raft::{Entry, EntryKind, Node};
use tern_storage::block_store::StoreError;

use super::super::api::error::ApiError;
use super::super::entry::{self, Operation, PendingMessage};
use super::super::expiry::{self, MessageTtl};
use super::super::headers;
use super::config::{subject_matches, Discard, Retention};
use super::consumer_leader::ConsumerLeader;
use super::state::{Applied, ReplicatedState};
use super::{persistence, Store, EXPIRED_PER_TURN_MAX};

/// A reply owed once an entry is applied.
pub enum Owed {
    PubAck {
        reply: Bytes,
    },
    Duplicate {
        reply: Bytes,
        sequence: u64,
    },
    Purge {
        origin: usize,
        reply: Option<Bytes>,
    },
    Delete {
        origin: usize,
        reply: Option<Bytes>,
    },
    Update {
        origin: usize,
        reply: Option<Bytes>,
    },
    /// A durable consumer's create/delete answer or a reply that waited
    /// for its state snapshot.
    Consumer(persistence::ConsumerOwed),
}

/// A reply owed once the entry proposed at `(term, index)` applies. An
/// entry of another term applying at that index means leadership was lost
/// before it committed: the reply fails (nats-server's 10009) instead of
/// being released by an entry it does not belong to.
pub(super) struct OwedReply {
    pub(super) term: u64,
    pub(super) index: u64,
    pub(super) owed: Owed,
}

/// One committed entry applied: what each host (the stream task, a
/// [`super::replica::Replica`]) answers from.
pub(super) struct EntryApplied {
    /// Replies owed by proposals the entry superseded: they fail with
    /// nats-server's 10009 (leadership was lost before they committed).
    pub(super) superseded: SmallVec<[Owed; 1]>,
    /// What the entry's operation did (`None`: a no-op or membership entry).
    pub(super) applied: Option<Applied>,
    /// Replies owed by the entry itself, in the order they were owed.
    pub(super) released: SmallVec<[Owed; 1]>,
}

/// Proposed, not yet applied: what ingest checks must count.
#[derive(Default)]
pub(super) struct InFlight {
    pub(super) messages: u64,
    pub(super) bytes: u64,
    /// Per subject: (messages in flight, last sequence proposed).
    pub(super) subjects: FxHashMap<Bytes, (u64, u64)>,
}

impl InFlight {
    /// A proposed message of `bytes` on `subject` applied.
    pub(super) fn applied(&mut self, subject: &[u8], bytes: u64) {
        self.messages = self.messages.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
        if let Some(slot) = self.subjects.get_mut(subject) {
            slot.0 = slot.0.saturating_sub(1);
            if slot.0 == 0 {
                self.subjects.remove(subject);
            }
        }
    }
}

#[derive(Default)]
pub(super) struct Dedupe {
    /// id -> (sequence, time)
    pub(super) ids: FxHashMap<Bytes, (u64, u64)>,
    pub(super) order: VecDeque<(u64, Bytes)>,
}

impl Dedupe {
    pub(super) fn expire(&mut self, now_ns: u64, window_ns: u64) {
        while let Some((time, _)) = self.order.front() {
            if now_ns.saturating_sub(*time) <= window_ns {
                break;
            }
            let (_, id) = self.order.pop_front().expect("front exists");
            self.ids.remove(&id);
        }
    }

    pub(super) fn insert(&mut self, id: Bytes, sequence: u64, time_ns: u64) {
        self.ids.insert(id.clone(), (sequence, time_ns));
        self.order.push_back((time_ns, id));
    }
}

/// What ingest decided about one publish.
#[derive(Debug)]
pub(super) enum Ingested {
    /// Refused, with the error the PubAck carries.
    Rejected(ApiError),
    /// A message id within the duplicate window: the original's sequence.
    Duplicate { sequence: u64 },
    /// Proposed at `index`, in the node's current term.
    Proposed { index: u64 },
}

/// The leader's side of a stream: sequence assignment, the checks a
/// publish passes before it is proposed, the duplicate window, what is in
/// flight, removals proposed, and the replies owed until entries apply.
/// Nothing here is replicated; a replica that becomes leader starts it
/// afresh with [`Leader::take_office`].
#[derive(Default)]
pub(super) struct Leader {
    /// Replies owed once an entry applies, in index order.
    pub(super) owed: VecDeque<OwedReply>,
    pub(super) in_flight: InFlight,
    pub(super) dedupe: Dedupe,
    /// Highest sequence proposed (= stored once everything applied).
    pub(super) last_sequence: u64,
    pub(super) last_timestamp_ns: u64,
    pub(super) last_msg_id: Option<Bytes>,
    /// Expired messages whose removal is proposed and not yet applied.
    pub(super) expiring: FxHashSet<u64>,
    /// Interest and work-queue streams: sequences whose removal (no
    /// consumer needs them) is proposed and not yet applied.
    pub(super) releasing: FxHashSet<u64>,
}

impl Leader {
    /// Owes a reply once the entry proposed at `index` in `term` applies.
    pub(super) fn owe(&mut self, term: u64, index: u64, applied_index: u64, owed: Owed) {
        assert!(
            self.owed.back().is_none_or(|last| last.index <= index),
            "replies are owed in index order"
        );
        assert!(
            index > applied_index,
            "a reply is owed by an entry not yet applied"
        );
        self.owed.push_back(OwedReply { term, index, owed });
    }

    /// The next reply owed by a proposal that lost to the entry of `term`
    /// applying at `index` (another term at that index, or anything owed
    /// below it, which can only be left over from a lost leadership).
    fn pop_superseded(&mut self, term: u64, index: u64) -> Option<Owed> {
        let front = self.owed.front()?;
        if front.index < index || (front.index == index && front.term != term) {
            return self.owed.pop_front().map(|owed| owed.owed);
        }
        None
    }

    /// The next reply owed by the entry at `index`, which applied.
    fn pop_owed_at(&mut self, index: u64) -> Option<Owed> {
        if self.owed.front()?.index == index {
            return self.owed.pop_front().map(|owed| owed.owed);
        }
        None
    }

    /// Applies one committed entry to `state`, the one path every entry
    /// takes on every replica: the replies it supersedes, its operation
    /// (no longer in flight), the applied index, the replies it releases.
    /// A checksummed entry that does not decode is a bug or a format
    /// change: it stops the process rather than guess.
    pub(super) async fn apply(
        &mut self,
        state: &mut ReplicatedState,
        consumers: &mut ConsumerLeader,
        entry: &Entry,
    ) -> Result<EntryApplied, StoreError> {
        assert!(
            entry.index > state.applied_index,
            "stream {}: entry {} applies after {}",
            state.config.name,
            entry.index,
            state.applied_index
        );
        let mut superseded = SmallVec::new();
        while let Some(owed) = self.pop_superseded(entry.term, entry.index) {
            superseded.push(owed);
        }
        let mut applied = None;
        if let EntryKind::Normal(data) = &entry.kind {
            let operation = Operation::decode(data).unwrap_or_else(|error| {
                panic!(
                    "stream {}: entry {} does not decode: {error}",
                    state.config.name, entry.index
                )
            });
            self.applying(state, &operation);
            applied = Some(state.apply(operation, consumers).await?);
        }
        state.applied_index = entry.index;
        state.applied_term = entry.term;
        let mut released = SmallVec::new();
        while let Some(owed) = self.pop_owed_at(entry.index) {
            released.push(owed);
        }
        Ok(EntryApplied {
            superseded,
            applied,
            released,
        })
    }

    /// Before `operation` applies: it is no longer in flight.
    fn applying(&mut self, state: &ReplicatedState, operation: &Operation) {
        match operation {
            Operation::Message {
                subject,
                headers: header_block,
                payload,
                ..
            } => {
                let bytes = state.message_bytes(subject.len(), header_block.len(), payload.len());
                self.in_flight.applied(subject, bytes);
            }
            Operation::Delete { sequence, .. } => {
                self.releasing.remove(sequence);
            }
            Operation::Expire { sequences } => {
                for sequence in sequences {
                    self.expiring.remove(sequence);
                }
            }
            _ => {}
        }
    }

    /// Last sequence stored or in flight on `subject` (0: none).
    fn last_on_subject(&self, state: &ReplicatedState, subject: &[u8]) -> u64 {
        if let Some(&(_, last)) = self.in_flight.subjects.get(subject) {
            return last;
        }
        with_store!(&state.store, log => log.subject_state(subject)).map_or(0, |(_, last, _)| last)
    }

    fn count_on_subject(&self, state: &ReplicatedState, subject: &[u8]) -> u64 {
        let stored = with_store!(&state.store, log => log.subject_state(subject))
            .map_or(0, |(.., count)| count);
        stored
            + self
                .in_flight
                .subjects
                .get(subject)
                .map_or(0, |&(count, _)| count)
    }

    /// Checks a publish against the stream's config, its expected-*
    /// headers, the duplicate window and the limits (counting what is in
    /// flight), and proposes it with the next sequence. `now_ns` is the
    /// leader's clock; a message's time never goes back. On an interest
    /// stream, `interested` says whether a consumer wants a subject (the
    /// leader's consumers, ephemeral ones too): the entry records it.
    pub(super) fn ingest(
        &mut self,
        state: &ReplicatedState,
        node: &mut Node,
        name: &str,
        message: PendingMessage,
        now_ns: u64,
        interested: impl Fn(&[u8]) -> bool,
    ) -> Ingested {
        let config = &state.config;
        let hdr = message.headers();
        let subject = message.subject();
        if config.sealed {
            return Ingested::Rejected(ApiError::sealed());
        }
        if let Some(expected) = headers::value(hdr, headers::EXPECTED_STREAM) {
            if expected != name.as_bytes() {
                return Ingested::Rejected(ApiError::expected_stream_mismatch());
            }
        }
        // nats-server tests the parsed value: an unparsable TTL is "none"
        // here and invalid later (10165).
        let ttl = expiry::message_ttl(hdr);
        if ttl.is_ok_and(MessageTtl::is_set) && !config.allow_msg_ttl {
            return Ingested::Rejected(ApiError::ttl_disabled());
        }
        let subject_sequence_subject =
            headers::value(hdr, headers::EXPECTED_LAST_SUBJECT_SEQUENCE_SUBJECT);
        match headers::number(hdr, headers::EXPECTED_LAST_SUBJECT_SEQUENCE) {
            Some(Some(expected)) => {
                let actual = match subject_sequence_subject {
                    Some(filter) => self.last_matching_subject(state, filter),
                    None => self.last_on_subject(state, subject),
                };
                if actual != expected {
                    return Ingested::Rejected(ApiError::wrong_last_sequence(actual));
                }
            }
            Some(None) => {
                return Ingested::Rejected(ApiError::wrong_last_sequence(
                    self.last_on_subject(state, subject),
                ))
            }
            None if subject_sequence_subject.is_some() => {
                return Ingested::Rejected(ApiError::missing_last_subject_sequence());
            }
            None => {}
        }
        match headers::number(hdr, headers::EXPECTED_LAST_SEQUENCE) {
            Some(Some(expected)) if expected != self.last_sequence => {
                return Ingested::Rejected(ApiError::wrong_last_sequence(self.last_sequence));
            }
            Some(None) => {
                return Ingested::Rejected(ApiError::wrong_last_sequence(self.last_sequence))
            }
            _ => {}
        }
        if headers::has(hdr, headers::STREAM_SOURCE) {
            return Ingested::Rejected(ApiError::stream_source_header_not_allowed());
        }
        let now_ns = now_ns.max(self.last_timestamp_ns);
        let msg_id = headers::value(hdr, headers::MSG_ID).filter(|id| !id.is_empty());
        if let Some(id) = msg_id {
            self.dedupe
                .expire(now_ns, config.duplicate_window_ns.max(0) as u64);
            if let Some(&(sequence, _)) = self.dedupe.ids.get(id) {
                return Ingested::Duplicate { sequence };
            }
        }
        if let Some(expected) = headers::value(hdr, headers::EXPECTED_LAST_MSG_ID) {
            let last = self.last_msg_id.as_deref().unwrap_or(b"");
            if expected != last {
                return Ingested::Rejected(ApiError::wrong_last_msg_id(&String::from_utf8_lossy(
                    last,
                )));
            }
        }
        let rollup = headers::value(hdr, headers::ROLLUP);
        if let Some(value) = rollup {
            if !config.allow_rollup_hdrs || config.deny_purge {
                return Ingested::Rejected(ApiError::rollup_failed("rollup not permitted"));
            }
            if value != b"sub" && value != b"all" {
                return Ingested::Rejected(ApiError::rollup_failed(&format!(
                    "rollup value invalid: {:?}",
                    String::from_utf8_lossy(value)
                )));
            }
        }
        let size = hdr.len() + message.payload().len();
        if config.max_msg_size >= 0 && size > config.max_msg_size as usize {
            return Ingested::Rejected(ApiError::message_too_large());
        }
        if hdr.len() > headers::HEADER_BYTES_MAX {
            return Ingested::Rejected(ApiError::header_too_large());
        }
        let bytes = state.message_bytes(subject.len(), hdr.len(), message.payload().len());
        if config.discard == Discard::New {
            if let Some(error) = self.discard_new_error(state, subject, bytes, rollup.is_some()) {
                return Ingested::Rejected(error);
            }
        }
        let ttl = match ttl {
            Ok(ttl) => ttl,
            Err(expiry::InvalidTtl) => return Ingested::Rejected(ApiError::invalid_ttl()),
        };
        // With delete markers, a TTL below the marker TTL is raised to it
        // so no marker is missed (one message per subject cannot miss one).
        let marker_ttl_seconds =
            (config.subject_delete_marker_ttl_ns.max(0) as u64) / 1_000_000_000;
        let mut bytes = bytes;
        let mut rewritten_headers = None;
        if let MessageTtl::Seconds(seconds) = ttl {
            if seconds < marker_ttl_seconds && config.max_msgs_per_subject != 1 {
                let rewritten = expiry::with_ttl_seconds(hdr, marker_ttl_seconds);
                bytes =
                    state.message_bytes(subject.len(), rewritten.len(), message.payload().len());
                rewritten_headers = Some(rewritten);
            }
        }
        // Accepted: assign the sequence and propose.
        let sequence = self.last_sequence + 1;
        let msg_id = msg_id.map(Bytes::copy_from_slice);
        let message = match rewritten_headers {
            Some(rewritten) => {
                PendingMessage::new(message.subject(), &rewritten, message.payload())
            }
            None => message,
        };
        let subject_range = message.subject_range();
        let retained =
            state.config.retention != Retention::Interest || interested(message.subject());
        let encoded = message.finish(sequence, now_ns, retained);
        // The subject shares the encoded operation's bytes.
        let subject = encoded.slice(subject_range);
        let index = match node.propose(encoded) {
            Ok(index) => index,
            // Stepped down, or handing leadership over: 10009, as for a
            // publish that reaches a replica that does not lead.
            Err(_) => return Ingested::Rejected(ApiError::cluster_not_leader()),
        };
        self.last_sequence = sequence;
        self.last_timestamp_ns = now_ns;
        if let Some(id) = &msg_id {
            self.dedupe.insert(id.clone(), sequence, now_ns);
        }
        self.last_msg_id = msg_id;
        self.in_flight.messages += 1;
        self.in_flight.bytes += bytes;
        let slot = self.in_flight.subjects.entry(subject).or_insert((0, 0));
        slot.0 += 1;
        slot.1 = sequence;
        Ingested::Proposed { index }
    }

    fn last_matching_subject(&self, state: &ReplicatedState, filter: &[u8]) -> u64 {
        let filter_text = String::from_utf8_lossy(filter);
        let in_flight = self
            .in_flight
            .subjects
            .iter()
            .filter(|(subject, _)| subject_matches(&filter_text, &String::from_utf8_lossy(subject)))
            .map(|(_, &(_, last))| last)
            .max()
            .unwrap_or(0);
        let stored = with_store!(&state.store, log => log.last_matching(|subject| {
            subject_matches(&filter_text, &String::from_utf8_lossy(subject))
        }))
        .unwrap_or(0);
        in_flight.max(stored)
    }

    /// With `discard: new`: the error if storing would pass a limit.
    fn discard_new_error(
        &self,
        state: &ReplicatedState,
        subject: &[u8],
        bytes: u64,
        rollup: bool,
    ) -> Option<ApiError> {
        let config = &state.config;
        let stored = with_store!(&state.store, log => log.state());
        let messages = stored.messages + self.in_flight.messages;
        let total_bytes = stored.bytes + self.in_flight.bytes;
        let per_subject_max = config.max_msgs_per_subject;
        let on_subject = if per_subject_max > 0 {
            self.count_on_subject(state, subject)
        } else {
            0
        };
        if per_subject_max > 0 && on_subject >= per_subject_max as u64 {
            if config.discard_new_per_subject && !rollup {
                return Some(ApiError::store_failed(
                    "maximum messages per subject exceeded",
                ));
            }
            // The new message evicts an older one of its subject instead.
            return None;
        }
        if config.max_msgs > 0 && messages >= config.max_msgs as u64 {
            return Some(ApiError::store_failed("maximum messages exceeded"));
        }
        if config.max_bytes > 0 && total_bytes + bytes > config.max_bytes as u64 {
            return Some(ApiError::store_failed("maximum bytes exceeded"));
        }
        None
    }

    /// Interest and work-queue retention: proposes the removal of
    /// `sequence`, and of the live messages in `floor_moved` (an ack
    /// floor's move, exclusive of its start), that no consumer needs any
    /// more (`needed(subject, sequence)`; nats-server's
    /// `ackMsg`/`checkInterestState`). Returns the removals proposed.
    pub(super) fn release(
        &mut self,
        state: &ReplicatedState,
        node: &mut Node,
        sequence: u64,
        floor_moved: Option<std::ops::RangeInclusive<u64>>,
        needed: impl Fn(&[u8], u64) -> bool,
    ) -> usize {
        if state.config.retention == Retention::Limits {
            return 0;
        }
        let mut candidates = vec![sequence];
        if let Some(range) = floor_moved {
            let (start, end) = range.into_inner();
            let mut from = start + 1;
            while let Some(next) =
                with_store!(&state.store, log => log.next_matching(from, |_| true))
            {
                if next > end {
                    break;
                }
                if next != sequence {
                    candidates.push(next);
                }
                from = next + 1;
            }
        }
        let mut proposed = 0;
        for candidate in candidates {
            if self.releasing.contains(&candidate) {
                continue;
            }
            let still_needed = with_store!(&state.store, log => log
                .subject_of(candidate)
                .map(|subject| needed(subject, candidate)));
            if still_needed != Some(false) {
                continue; // gone already, or still needed
            }
            let operation = Operation::Delete {
                sequence: candidate,
                erase: false,
            };
            match node.propose(operation.encode()) {
                Ok(_) => {
                    self.releasing.insert(candidate);
                    proposed += 1;
                }
                Err(error) => {
                    log::warn!(target: "tern::jetstream", "stream {}: removing {candidate} refused: {error:?}", state.config.name)
                }
            }
        }
        proposed
    }

    /// Leader: proposes the removal of the messages whose TTL is due by
    /// its clock, at most [`EXPIRED_PER_TURN_MAX`] per turn (the timer
    /// brings the rest).
    pub(super) fn expire_due(
        &mut self,
        state: &mut ReplicatedState,
        consumers: &ConsumerLeader,
        node: &mut Node,
        name: &str,
        now_ns: u64,
    ) {
        let Some(expiry) = &state.expiry else {
            return;
        };
        let due: Vec<u64> = expiry
            .due(now_ns)
            .filter(|sequence| !self.expiring.contains(sequence) && !expiry.is_replacing(*sequence))
            .take(EXPIRED_PER_TURN_MAX)
            .collect();
        let mut removals = Vec::new();
        for sequence in due {
            if self.expire_message(state, consumers, node, name, now_ns, sequence) {
                removals.push(sequence);
            }
        }
        self.propose_expired(node, name, removals);
    }

    /// Leader: an expired message (TTL or max_age); returns whether it is
    /// to be removed (the caller proposes the removals together). With
    /// delete markers, a subject's last message is replaced by a marker
    /// instead: a new message through the log whose `Nats-Rollup: sub`
    /// removes the old one.
    fn expire_message(
        &mut self,
        state: &mut ReplicatedState,
        consumers: &ConsumerLeader,
        node: &mut Node,
        name: &str,
        now_ns: u64,
        sequence: u64,
    ) -> bool {
        if self.expiring.contains(&sequence) {
            return false; // proposed already
        }
        let Some(subject) =
            with_store!(&state.store, log => log.subject_of(sequence).map(<[u8]>::to_vec))
        else {
            // Removed already (a note that outlived its message): the
            // entry drops the note on every replica.
            return true;
        };
        let marker_ttl_seconds =
            (state.config.subject_delete_marker_ttl_ns.max(0) as u64) / 1_000_000_000;
        let wants_marker = marker_ttl_seconds > 0
            && state
                .expiry
                .as_ref()
                .is_some_and(|expiry| !expiry.is_marker(sequence))
            && with_store!(&state.store, log => log.subject_state(&subject))
                .is_some_and(|(_, _, count)| count == 1)
            && !self.in_flight.subjects.contains_key(&subject[..]);
        if wants_marker {
            let before = self.last_sequence;
            let headers = expiry::marker_headers(marker_ttl_seconds);
            let marker = PendingMessage::new(&subject, &headers, b"");
            let _ = self.ingest(state, node, name, marker, now_ns, |subject| {
                consumers.wants(subject)
            });
            if self.last_sequence > before {
                if let Some(expiry) = &mut state.expiry {
                    expiry.start_replacing(sequence);
                }
                return false;
            }
            // Refused (a limit, deny_purge): remove without a marker.
        }
        true
    }

    /// Leader: proposes [`Operation::Expire`] entries for `removals`.
    fn propose_expired(&mut self, node: &mut Node, name: &str, mut removals: Vec<u64>) {
        removals.sort_unstable();
        removals.dedup();
        removals.retain(|sequence| !self.expiring.contains(sequence));
        for chunk in removals.chunks(entry::EXPIRE_SEQUENCES_MAX) {
            let operation = Operation::Expire {
                sequences: chunk.to_vec(),
            };
            match node.propose(operation.encode()) {
                Ok(_) => self.expiring.extend(chunk.iter().copied()),
                Err(error) => {
                    log::warn!(target: "tern::jetstream", "stream {}: expiring {} messages refused: {error:?}", name, chunk.len());
                    return;
                }
            }
        }
    }

    /// Leader: proposes the removal of messages past max_age by its clock,
    /// in sequence order, passing over those that never expire and those a
    /// marker is replacing (nats-server's walk). Returns whether more may
    /// remain than one turn proposes.
    pub(super) fn expire_aged(
        &mut self,
        state: &mut ReplicatedState,
        consumers: &ConsumerLeader,
        node: &mut Node,
        name: &str,
        now_ns: u64,
    ) -> bool {
        let max_age_ns = state.config.max_age_ns;
        assert!(max_age_ns > 0, "called only with max_age");
        let mut removals = Vec::new();
        let mut from = 0;
        while removals.len() < EXPIRED_PER_TURN_MAX {
            let Some(sequence) =
                with_store!(&state.store, log => log.next_matching(from, |_| true))
            else {
                break;
            };
            let Some(timestamp_ns) = with_store!(&state.store, log => log.timestamp_of(sequence))
            else {
                break;
            };
            if now_ns.saturating_sub(timestamp_ns) <= max_age_ns as u64 {
                break;
            }
            from = sequence + 1;
            if self.expiring.contains(&sequence) {
                continue;
            }
            match &state.expiry {
                Some(expiry) if expiry.never_expires(sequence) || expiry.is_replacing(sequence) => {
                    continue
                }
                Some(_) => {
                    if self.expire_message(state, consumers, node, name, now_ns, sequence) {
                        removals.push(sequence);
                    }
                }
                None => removals.push(sequence),
            }
        }
        let full = removals.len() >= EXPIRED_PER_TURN_MAX;
        self.propose_expired(node, name, removals);
        full
    }

    /// Takes over as leader of what `state` holds once every entry in the
    /// log applied: the last sequence, time and message id, the message
    /// ids within the duplicate window read back from the store (as
    /// nats-server does on start), nothing in flight or owed.
    pub(super) async fn take_office(
        &mut self,
        state: &ReplicatedState,
        now_ns: u64,
    ) -> Result<(), StoreError> {
        assert!(
            self.owed.is_empty(),
            "replies of an earlier term are failed before taking office"
        );
        self.in_flight = InFlight::default();
        self.dedupe = Dedupe::default();
        self.expiring.clear();
        self.releasing.clear();
        let stored = with_store!(&state.store, log => log.state());
        // A stream created with `first_seq` starts there (nats-server
        // purges a new store up to it): its last sequence is the one before.
        self.last_sequence = with_store!(&state.store, log => log.last_sequence())
            .max(state.config.first_sequence.saturating_sub(1));
        self.last_timestamp_ns = state.stored_last_unix_ns.max(stored.last_timestamp_ns);
        self.last_msg_id = None;
        if stored.messages > 0 {
            if let Some(message) =
                with_store!(&state.store, log => log.get(stored.last_sequence).await)?
            {
                self.last_msg_id =
                    headers::value(&message.headers, headers::MSG_ID).map(Bytes::copy_from_slice);
            }
        }
        let window_ns = state.config.duplicate_window_ns.max(0) as u64;
        if window_ns == 0 {
            return Ok(());
        }
        let since = now_ns.saturating_sub(window_ns);
        let Some(mut sequence) = with_store!(&state.store, log => log.first_at_or_after(since))
        else {
            return Ok(());
        };
        while sequence <= self.last_sequence {
            if let Some(message) = with_store!(&state.store, log => log.get(sequence).await)? {
                if let Some(id) = headers::value(&message.headers, headers::MSG_ID) {
                    self.dedupe
                        .insert(Bytes::copy_from_slice(id), sequence, message.timestamp_ns);
                }
            }
            sequence += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_duplicate_window_forgets_ids_older_than_it_in_order() {
        let mut dedupe = Dedupe {
            ids: FxHashMap::default(),
            order: VecDeque::new(),
        };
        dedupe.insert(Bytes::from_static(b"a"), 1, 100);
        dedupe.insert(Bytes::from_static(b"b"), 2, 200);
        dedupe.insert(Bytes::from_static(b"c"), 3, 300);
        dedupe.expire(350, 150);
        assert!(!dedupe.ids.contains_key(&b"a"[..]), "older than the window");
        assert_eq!(dedupe.ids.get(&b"b"[..]), Some(&(2, 200)), "at its edge");
        assert_eq!(dedupe.ids.get(&b"c"[..]), Some(&(3, 300)));
        dedupe.expire(u64::MAX, 0);
        assert!(dedupe.ids.is_empty() && dedupe.order.is_empty());
        // A clock behind the newest id keeps everything.
        dedupe.insert(Bytes::from_static(b"d"), 4, 500);
        dedupe.expire(10, 0);
        assert_eq!(dedupe.ids.len(), 1);
    }
}
