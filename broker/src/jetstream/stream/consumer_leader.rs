//! The live consumers of a stream's leader, the one owner of them,
//! held by the [`super::replica::Replica`] every host runs (the stream
//! task on a node, the simulator):
//! each consumer's live delivery state (ahead of the log: deliveries and
//! acks change it at once), its pull requests and push pacing
//! ([`Consumer`]), and for a consumer whose state is in the log the state
//! entry in flight and the replies waiting for an entry that holds them
//! ([`StateEntries`]). A replica rebuilds them from the replicated state
//! ([`ReplicatedState::logged_consumers`]) whenever it takes office, so a
//! new leader starts from what a quorum applied: an ack confirmed to a
//! client was in an applied state entry, and stays acked.
//!
//! Deliveries and acks are not log entries each: one state entry carries
//! everything that changed while the previous one was being committed (at
//! most one in flight per consumer).
//!
//! Apply keeps the consumers' pending counts ([`Self::saw`],
//! [`Self::lost`], [`Self::lose_below`]): they are the leader's, not part
//! of what every replica holds.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use super::super::api::error::ApiError;
use super::super::consumer::config::{ConsumerConfig, StoredConsumerConfigError};
use super::super::consumer::delivery::{
    DeliveryState, Next, StateDecodeError, PENDING_MAX, STATE_BYTES_PER_PENDING,
    STATE_BYTES_PER_REDELIVERED, STATE_FIXED_BYTES,
};
use super::super::consumer::{Consumer, ConsumerSpec, PushState, Start};
use super::super::entry::{Operation, CONSUMER_STATE_BYTES_MAX};
use super::consumers::AckRequest;
use super::state::{Applied, ReplicatedState};
use super::state_entries::{Signature, StateEntries};
use super::Store;

/// Double acks waiting for one consumer's next state entry at most; more
/// are refused (the client retries, as after a timeout).
pub const ACKS_WAITING_MAX: usize = 4096;

/// A logged consumer the leader cannot run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoggedConsumerError {
    #[error("consumer {name}: its logged config does not decode: {source}")]
    Config {
        name: String,
        source: StoredConsumerConfigError,
    },
    /// A config this build does not run (a feature not built yet).
    #[error("consumer {name}: its logged config is not supported: {}", .error.description)]
    Unsupported { name: String, error: ApiError },
    #[error("consumer {name}: its logged delivery state does not decode: {source}")]
    State {
        name: String,
        source: StateDecodeError,
    },
}

/// A reply that waits for the next state entry of its consumer.
pub(super) enum Waiter {
    /// A double ack: an empty reply.
    Ack { reply: Bytes },
    /// CONSUMER.INFO, rendered when the entry is proposed.
    Info { origin: usize, reply: Bytes },
}

/// A consumer's ack floor (stream sequence) before and after an ack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FloorMove {
    pub(super) from: u64,
    pub(super) to: u64,
}

impl FloorMove {
    /// The sequences the floor passed, for [`super::leader::Leader::release`].
    pub(super) fn moved(self) -> Option<std::ops::RangeInclusive<u64>> {
        (self.to > self.from).then_some(self.from..=self.to)
    }
}

/// A logged consumer's state entry to propose ([`ConsumerLeader::take_due_entry`]).
pub(super) struct DueEntry {
    /// The entry, its state and signature for [`ConsumerLeader::proposed`];
    /// `None`: the state did not move since an entry that applied, which
    /// holds what the waiting replies report already.
    pub(super) entry: Option<(Operation, Bytes, Signature)>,
    /// The replies the entry answers once it applied.
    pub(super) waiting: Vec<Waiter>,
}

/// A consumer whose delivery state outgrew one state entry (a journal
/// record): the stream cannot go on.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "consumer {name}: its delivery state snapshot of {entry_bytes} bytes \
     ({pending} pending acks) exceeds the journal record limit of {max_bytes} bytes; \
     lower its max_ack_pending"
)]
pub struct StateEntryTooLarge {
    pub name: String,
    pub entry_bytes: usize,
    pub pending: usize,
    pub max_bytes: usize,
}

/// When a consumer was created and where it starts delivering.
#[derive(Debug, Clone, Copy)]
pub(super) struct Created {
    pub unix_ns: u64,
    pub start_sequence: u64,
}

/// A consumer that went (deleted, or inactive), for its host to close:
/// its pull requests hear 409, the replies waiting for its state entry
/// are answered, an interest stream releases what only it needed.
pub(super) struct Removed {
    pub(super) consumer: Consumer,
    pub(super) waiting: Vec<Waiter>,
}

/// What a consumer delivers next ([`ConsumerLeader::choose`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Chosen {
    /// Nothing until an ack (max_ack_pending) or a redelivery is due.
    Stalled,
    /// Caught up: no new message it selects past its position yet.
    EndOfStream,
    /// A stored message delivered before, due again.
    Redelivery(u64),
    /// A stored message it selects, never delivered.
    New(u64),
}

/// The live consumers of the leader (empty on a follower).
pub(super) struct ConsumerLeader {
    consumers: BTreeMap<String, Consumer>,
    /// The consumers whose state is in the log: their state entries.
    logged: BTreeMap<String, StateEntries<Waiter>>,
    /// The largest state entry the host's log takes (a journal record):
    /// a logged consumer's pending acks are capped so its whole state
    /// fits one ([`Self::pending_max`]).
    state_entry_bytes_max: usize,
}

impl Default for ConsumerLeader {
    fn default() -> ConsumerLeader {
        ConsumerLeader::new(CONSUMER_STATE_BYTES_MAX)
    }
}

/// A logged consumer's config and what it runs by.
pub(super) fn spec_of(
    name: &str,
    config_json: &[u8],
) -> Result<(ConsumerConfig, ConsumerSpec), LoggedConsumerError> {
    let config = ConsumerConfig::from_stored_json(config_json).map_err(|source| {
        LoggedConsumerError::Config {
            name: name.to_string(),
            source,
        }
    })?;
    let spec =
        ConsumerSpec::from_config(&config).map_err(|error| LoggedConsumerError::Unsupported {
            name: name.to_string(),
            error,
        })?;
    Ok((config, spec))
}

/// A logged consumer as the leader runs it, from its config and its last
/// applied delivery state (`pending_max`: its pending acks at most).
fn live(
    name: &str,
    created_unix_ns: u64,
    config_json: &[u8],
    delivery_state: &Bytes,
    pending_max: usize,
) -> Result<Consumer, LoggedConsumerError> {
    let (config, mut spec) = spec_of(name, config_json)?;
    spec.limit_pending(pending_max);
    let delivery =
        DeliveryState::decode(spec.delivery.clone(), delivery_state).map_err(|source| {
            LoggedConsumerError::State {
                name: name.to_string(),
                source,
            }
        })?;
    let mut consumer = Consumer::new(name.to_string(), config, spec, created_unix_ns, 1, 0);
    consumer.delivery = delivery;
    Ok(consumer)
}

/// A logged consumer as a replica that does not lead has it (`/jsz`):
/// its config and its last applied delivery state.
pub(super) fn logged_view(
    name: &str,
    logged: &super::state::LoggedConsumer,
) -> Result<(ConsumerConfig, DeliveryState), LoggedConsumerError> {
    let consumer = live(
        name,
        logged.created_unix_ns,
        &logged.config_json,
        &logged.delivery_state,
        PENDING_MAX,
    )?;
    Ok((consumer.config, consumer.delivery))
}

/// Whether a logged consumer (from a snapshot) is one a leader can run.
pub(super) fn check_logged(
    name: &str,
    config_json: &[u8],
    delivery_state: &Bytes,
) -> Result<(), LoggedConsumerError> {
    live(name, 0, config_json, delivery_state, PENDING_MAX).map(|_| ())
}

/// Stored messages `consumer` selects at or after `from`.
pub(super) fn count_matching(store: &Store, consumer: &Consumer, from: u64) -> u64 {
    let mut count = 0;
    let mut from = from;
    while let Some(sequence) =
        with_store!(store, log => log.next_matching(from, |subject| consumer.matches(subject)))
    {
        count += 1;
        from = sequence + 1;
    }
    count
}

/// nats-server's lastSeqSkipList: the last sequence of every subject
/// `consumer` selects, ascending.
pub(super) fn last_per_subject(store: &Store, consumer: &Consumer) -> VecDeque<u64> {
    let mut lasts: Vec<u64> = with_store!(store, log => log
        .subjects()
        .filter(|(subject, ..)| consumer.matches(subject))
        .map(|(_, _, last, _)| last)
        .collect());
    lasts.sort_unstable();
    lasts.into()
}

// ----- the consumers, by name ---------------------------------------------------

impl ConsumerLeader {
    /// No consumers; state entries of at most `state_entry_bytes_max`.
    pub(super) fn new(state_entry_bytes_max: usize) -> ConsumerLeader {
        assert!(state_entry_bytes_max > 0);
        ConsumerLeader {
            consumers: BTreeMap::new(),
            logged: BTreeMap::new(),
            state_entry_bytes_max,
        }
    }

    /// Pending acks logged consumer `name` may have: with every one of
    /// them redelivered, its delivery state still fits one state entry.
    pub(super) fn pending_max(&self, name: &str) -> usize {
        let overhead = Operation::consumer_state_bytes(name.len(), STATE_FIXED_BYTES);
        let room = self.state_entry_bytes_max.saturating_sub(overhead);
        (room / STATE_BYTES_PER_PENDING).max(1)
    }

    /// Adds a consumer starting at `created.start_sequence` on `store`:
    /// counts what lies ahead of it (a `last_per_subject` start lists the
    /// subjects' last messages), arms its timers at `now_ns`.
    pub(super) fn add(
        &mut self,
        store: &Store,
        name: String,
        config: ConsumerConfig,
        spec: ConsumerSpec,
        created: Created,
        now_ns: u64,
    ) {
        let mut consumer = Consumer::new(
            name,
            config,
            spec,
            created.unix_ns,
            created.start_sequence,
            0,
        );
        let last_sequence = with_store!(store, log => log.last_sequence());
        if consumer.spec.start == Start::LastPerSubject {
            consumer.start_list = last_per_subject(store, &consumer);
            consumer.resume_after = last_sequence;
            consumer.num_pending = consumer.start_list.len() as u64;
        } else {
            consumer.num_pending = count_matching(store, &consumer, created.start_sequence);
        }
        consumer.replay_until = last_sequence;
        consumer.arm_idle_heartbeat(now_ns);
        let wake = consumer.next_housekeeping_ns(now_ns);
        consumer.wake_at(wake);
        self.insert(consumer);
    }

    /// A consumer's config changed (an update, by the API or the log):
    /// delivery follows the new one, push pacing starts over if its push
    /// settings changed.
    pub(super) fn update(
        &mut self,
        name: &str,
        config: ConsumerConfig,
        spec: ConsumerSpec,
        now_ns: u64,
    ) {
        let consumer = self
            .consumers
            .get_mut(name)
            .expect("an update names a consumer");
        consumer.delivery.set_config(spec.delivery.clone());
        let push_changed = consumer.spec.push != spec.push;
        if push_changed {
            consumer.push = spec.push.as_ref().map(PushState::new);
        }
        consumer.spec = spec;
        consumer.config = config;
        if push_changed {
            consumer.arm_idle_heartbeat(now_ns);
        }
        let wake = consumer.next_housekeeping_ns(now_ns);
        consumer.wake_at(wake);
    }

    pub(super) fn get(&self, name: &str) -> Option<&Consumer> {
        self.consumers.get(name)
    }

    pub(super) fn get_mut(&mut self, name: &str) -> Option<&mut Consumer> {
        self.consumers.get_mut(name)
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.consumers.contains_key(name)
    }

    pub(super) fn len(&self) -> usize {
        self.consumers.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.consumers.is_empty()
    }

    pub(super) fn names(&self) -> impl Iterator<Item = &String> {
        self.consumers.keys()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &Consumer)> {
        self.consumers.iter()
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut Consumer)> {
        self.consumers.iter_mut()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Consumer> {
        self.consumers.values()
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Consumer> {
        self.consumers.values_mut()
    }

    /// Adds a consumer kept in memory only (see [`Self::log`]).
    pub(super) fn insert(&mut self, consumer: Consumer) {
        self.consumers.insert(consumer.name.clone(), consumer);
    }

    /// From now on `name`'s state is in the log, its current state taken
    /// as the last entry (nothing if it is logged already).
    pub(super) fn log(&mut self, name: &str) {
        let consumer = &self.consumers[name];
        self.logged
            .entry(name.to_string())
            .or_insert_with(|| StateEntries::new(&consumer.delivery));
    }

    /// Removes consumer `name`, with the replies that waited for its next
    /// state entry.
    pub(super) fn remove(&mut self, name: &str) -> Option<Removed> {
        let waiting = self
            .logged
            .remove(name)
            .map_or_else(Vec::new, StateEntries::into_waiting);
        let consumer = self.consumers.remove(name)?;
        Some(Removed { consumer, waiting })
    }

    /// Whether `name`'s state is in the log.
    pub(super) fn is_logged(&self, name: &str) -> bool {
        self.logged.contains_key(name)
    }

    pub(super) fn has_logged(&self) -> bool {
        !self.logged.is_empty()
    }

    /// `name`'s live consumer and its state entries, when it is logged.
    pub(super) fn logged(&self, name: &str) -> Option<(&Consumer, &StateEntries<Waiter>)> {
        Some((self.consumers.get(name)?, self.logged.get(name)?))
    }

    pub(super) fn logged_mut(
        &mut self,
        name: &str,
    ) -> Option<(&mut Consumer, &mut StateEntries<Waiter>)> {
        Some((self.consumers.get_mut(name)?, self.logged.get_mut(name)?))
    }

    /// The logged consumers whose state moved or that have replies
    /// waiting, and no entry in flight.
    pub(super) fn due_names(&self) -> Vec<String> {
        self.logged
            .iter()
            .filter(|(name, entries)| {
                self.consumers
                    .get(*name)
                    .is_some_and(|consumer| entries.is_due(&consumer.delivery))
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Something changed `name`'s delivery state that its signature does
    /// not show (ack deadlines moved).
    pub(super) fn touch(&mut self, name: &str) {
        if let Some(entries) = self.logged.get_mut(name) {
            entries.touch();
        }
    }

    /// Whether a live consumer wants `subject` (an interest stream keeps
    /// only what one does).
    pub(super) fn wants(&self, subject: &[u8]) -> bool {
        self.consumers
            .values()
            .any(|consumer| consumer.matches(subject))
    }

    /// Whether a live consumer still needs `sequence` on `subject`
    /// (interest retention keeps it until none does).
    pub(super) fn needs(&self, subject: &[u8], sequence: u64) -> bool {
        self.consumers
            .values()
            .any(|consumer| consumer.matches(subject) && consumer.delivery.needs_ack(sequence))
    }
}

// ----- pending counts, kept by apply ---------------------------------------------

impl ConsumerLeader {
    /// A message was stored: consumers that select it have one more
    /// pending.
    pub(super) fn saw(&mut self, subject: &[u8]) {
        for consumer in self.consumers.values_mut() {
            if consumer.matches(subject) {
                consumer.num_pending += 1;
            }
        }
    }

    /// A message left the stream: consumers that had it ahead of them have
    /// one pending message less (nats-server's `decStreamPending`).
    pub(super) fn lost(&mut self, sequence: u64, subject: &[u8]) {
        for consumer in self.consumers.values_mut() {
            if consumer.matches(subject) {
                consumer.lost(sequence);
            }
        }
    }

    /// Everything in `store` below `bound` is about to leave the stream (a
    /// purge).
    pub(super) fn lose_below(&mut self, store: &Store, bound: u64) {
        let first = with_store!(store, log => log.state()).first_sequence;
        for consumer in self.consumers.values_mut() {
            let mut from = first.max(consumer.delivery.next_stream_sequence());
            if let Some(&listed) = consumer.start_list.front() {
                from = from.min(listed);
            }
            while let Some(sequence) = with_store!(store, log => log.next_matching(from, |subject| consumer.matches(subject)))
            {
                if sequence >= bound {
                    break;
                }
                consumer.lost(sequence);
                from = sequence + 1;
            }
        }
    }
}

// ----- a replica in and out of office --------------------------------------------

impl ConsumerLeader {
    /// Office taken at `now_ns`: every logged consumer runs from its
    /// applied state, its pending count taken from the store, what it
    /// has pending redelivered after its ack wait, a push consumer's idle
    /// heartbeats due from now (as from a new one).
    pub(super) fn take_office(
        &mut self,
        state: &ReplicatedState,
        now_ns: u64,
    ) -> Result<(), LoggedConsumerError> {
        self.consumers.clear();
        self.logged.clear();
        for (name, logged) in &state.logged_consumers {
            let mut consumer = live(
                name,
                logged.created_unix_ns,
                &logged.config_json,
                &logged.delivery_state,
                self.pending_max(name),
            )?;
            let from = consumer.delivery.next_stream_sequence();
            consumer.num_pending = count_matching(&state.store, &consumer, from);
            consumer.last_active_unix_ns = now_ns;
            consumer.arm_idle_heartbeat(now_ns);
            if consumer.delivery.num_ack_pending() > 0 {
                consumer.wake_at(Some(now_ns));
            }
            let wake = consumer.next_housekeeping_ns(now_ns);
            consumer.wake_at(wake);
            self.insert(consumer);
            self.log(name);
        }
        Ok(())
    }

    /// Office left: the live states go; the replies still waiting for an
    /// entry are returned, to fail.
    pub(super) fn leave_office(&mut self) -> Vec<Waiter> {
        self.consumers.clear();
        let logged = std::mem::take(&mut self.logged);
        logged
            .into_values()
            .flat_map(StateEntries::into_waiting)
            .collect()
    }

    /// An entry applied while in office (at `now_ns` by the host's
    /// clock): creates, updates and deletes follow the log; a state entry
    /// of ours is no longer in flight. Returns the consumer a delete
    /// removed.
    pub(super) fn applied(
        &mut self,
        state: &ReplicatedState,
        index: u64,
        applied: &Applied,
        now_ns: u64,
    ) -> Result<Option<Removed>, LoggedConsumerError> {
        match applied {
            Applied::ConsumerCreated {
                name,
                start_sequence,
            } => {
                let logged = &state.logged_consumers[name];
                let (config, mut spec) = spec_of(name, &logged.config_json)?;
                spec.limit_pending(self.pending_max(name));
                if self.consumers.contains_key(name) {
                    self.update(name, config, spec, now_ns);
                } else {
                    let created = Created {
                        unix_ns: logged.created_unix_ns,
                        start_sequence: *start_sequence,
                    };
                    self.add(&state.store, name.clone(), config, spec, created, now_ns);
                }
                self.log(name);
            }
            Applied::ConsumerDeleted { name } => return Ok(self.remove(name)),
            Applied::ConsumerState { name, .. } => {
                if let Some(entries) = self.logged.get_mut(name) {
                    entries.applied(index);
                }
            }
            _ => {}
        }
        Ok(None)
    }
}

// ----- delivery ---------------------------------------------------------------------

/// The next new message `consumer` selects at or after `from` in `store`:
/// its `last_per_subject` list first, then the store's next match.
fn next_new(store: &Store, consumer: &mut Consumer, from: u64) -> Option<u64> {
    while let Some(&listed) = consumer.start_list.front() {
        let live = with_store!(store, log => log.subject_of(listed))
            .is_some_and(|subject| consumer.matches(subject));
        if listed >= from && live {
            return Some(listed);
        }
        consumer.start_list.pop_front();
    }
    let from = from.max(consumer.resume_after + 1);
    let consumer = &*consumer;
    with_store!(store, log => log.next_matching(from, |subject| consumer.matches(subject)))
}

impl ConsumerLeader {
    /// What consumer `name` delivers next from `store`: a redelivery due
    /// (one whose message left the stream is given up on the way), else
    /// the next new message it selects. Nothing is marked delivered:
    /// [`DeliveryState::delivered_at`] does once it goes out. `None`: no
    /// such consumer.
    pub(super) fn choose(&mut self, store: &Store, name: &str) -> Option<Chosen> {
        let consumer = self.consumers.get_mut(name)?;
        loop {
            return Some(match consumer.delivery.next_to_deliver() {
                Next::Stalled => Chosen::Stalled,
                Next::Redeliver { stream_sequence } => {
                    if with_store!(store, log => log.subject_of(stream_sequence)).is_none() {
                        consumer.delivery.message_gone(stream_sequence);
                        continue;
                    }
                    Chosen::Redelivery(stream_sequence)
                }
                Next::FromStream { stream_sequence } => {
                    match next_new(store, consumer, stream_sequence) {
                        Some(sequence) => Chosen::New(sequence),
                        None => Chosen::EndOfStream,
                    }
                }
            });
        }
    }
}

// ----- acks ---------------------------------------------------------------------

impl ConsumerLeader {
    /// An ack of consumer `name`'s delivery of `stream_sequence` at
    /// `now_ns` (`+ACK`, `-NAK`, `+WPI`, `+TERM`): the live delivery state
    /// takes it at once; a logged consumer's next state entry carries it.
    /// Returns how the ack floor moved and a term's reason (for its
    /// advisory). `None`: no such consumer.
    pub(super) fn acknowledge(
        &mut self,
        name: &str,
        stream_sequence: u64,
        consumer_sequence: u64,
        request: AckRequest,
        now_ns: u64,
    ) -> Option<(FloorMove, Option<String>)> {
        let consumer = self.consumers.get_mut(name)?;
        let before = consumer.delivery.ack_floor().1;
        let mut term_reason = None;
        let mut deadlines_moved = false;
        match request {
            AckRequest::Ack => {
                if consumer.delivery.ack(stream_sequence, consumer_sequence) {
                    consumer.last_acked_unix_ns = now_ns;
                }
            }
            AckRequest::Nak { delay_ns } => {
                consumer
                    .delivery
                    .nak(stream_sequence, consumer_sequence, delay_ns, now_ns);
                if delay_ns.is_some() {
                    consumer.wake_at(Some(now_ns));
                }
                deadlines_moved = true;
            }
            AckRequest::Progress => {
                consumer.delivery.in_progress(stream_sequence, now_ns);
                deadlines_moved = true;
            }
            AckRequest::Term { reason } => {
                term_reason = reason;
                consumer.delivery.term(stream_sequence, consumer_sequence);
                consumer.last_acked_unix_ns = now_ns;
            }
        }
        let floor = FloorMove {
            from: before,
            to: consumer.delivery.ack_floor().1,
        };
        // An ack or term moves what the signature shows; a nak or progress
        // moves only deadlines, which the next entry must carry too.
        if deadlines_moved {
            self.touch(name);
        }
        Some((floor, term_reason))
    }
}

// ----- a replica's clients -----------------------------------------------------------

impl ConsumerLeader {
    /// A double ack of `name`'s delivery at `now_ns`: acked in the live
    /// state at once ([`Self::acknowledge`]); its reply waits for the
    /// next state entry. `Err(reply)`: no such logged consumer, too many
    /// acks wait already, or a sequence this leader's state never
    /// delivered (a delivery by an earlier leader that was not committed:
    /// confirming it would be a lie, the message comes again).
    pub(super) fn ack(
        &mut self,
        name: &str,
        stream_sequence: u64,
        consumer_sequence: u64,
        reply: Bytes,
        now_ns: u64,
    ) -> Result<FloorMove, Bytes> {
        let Some((consumer, entries)) = self.logged(name) else {
            return Err(reply);
        };
        if entries.waiting_count() >= ACKS_WAITING_MAX
            || stream_sequence >= consumer.delivery.next_stream_sequence()
        {
            return Err(reply);
        }
        let (floor, _) = self
            .acknowledge(
                name,
                stream_sequence,
                consumer_sequence,
                AckRequest::Ack,
                now_ns,
            )
            .expect("looked up above");
        let (_, entries) = self.logged_mut(name).expect("looked up above");
        entries.wait(Waiter::Ack { reply });
        Ok(floor)
    }

    /// Like [`Self::ack`] with nothing waiting for the entry (the
    /// ack-before-state canary answers at once). `None`: not taken.
    pub(super) fn ack_unconfirmed(
        &mut self,
        name: &str,
        stream_sequence: u64,
        consumer_sequence: u64,
        now_ns: u64,
    ) -> Option<FloorMove> {
        let consumer = self.consumers.get(name)?;
        if stream_sequence >= consumer.delivery.next_stream_sequence() {
            return None;
        }
        let (floor, _) = self.acknowledge(
            name,
            stream_sequence,
            consumer_sequence,
            AckRequest::Ack,
            now_ns,
        )?;
        Some(floor)
    }

    /// Logged consumer `name`'s next state entry of stream `stream`, to
    /// propose: redelivery counts of messages given up after max_deliver
    /// are forgotten, oldest first, if the state would not fit an entry
    /// otherwise (pending acks are capped so that they always do).
    /// `None`: no such logged consumer.
    pub(super) fn take_due_entry(
        &mut self,
        name: &str,
        stream: &str,
    ) -> Result<Option<DueEntry>, StateEntryTooLarge> {
        let record_bytes_max = self.state_entry_bytes_max;
        let Some((consumer, entries)) = self.logged_mut(name) else {
            return Ok(None);
        };
        let over = Operation::consumer_state_bytes(name.len(), consumer.delivery.encoded_bytes())
            .saturating_sub(record_bytes_max);
        if over > 0 {
            let given_up = consumer.delivery.given_up();
            let forget = over.div_ceil(STATE_BYTES_PER_REDELIVERED);
            let forgotten = consumer
                .delivery
                .forget_given_up(given_up.saturating_sub(forget));
            log::warn!(
                target: "tern::consumer",
                "stream {stream}: consumer {name}: forgot {forgotten} redelivery counts of \
                 messages given up after max_deliver so its state fits a journal record"
            );
        }
        let due = entries.take_due(&consumer.delivery);
        let entry = match due.state {
            None => None,
            Some((state, signature)) => {
                let operation = Operation::ConsumerState {
                    name: name.to_string(),
                    state: state.clone(),
                };
                let entry_bytes = operation.encoded_bytes();
                if entry_bytes > record_bytes_max {
                    return Err(StateEntryTooLarge {
                        name: name.to_string(),
                        entry_bytes,
                        pending: consumer.delivery.num_ack_pending(),
                        max_bytes: record_bytes_max,
                    });
                }
                Some((operation, state, signature))
            }
        };
        Ok(Some(DueEntry {
            entry,
            waiting: due.waiting,
        }))
    }

    /// `name`'s state entry was proposed at `index`.
    pub(super) fn proposed(&mut self, name: &str, state: Bytes, signature: Signature, index: u64) {
        let entries = self.logged.get_mut(name).expect("a due consumer");
        entries.proposed(state, signature, index);
    }
}
