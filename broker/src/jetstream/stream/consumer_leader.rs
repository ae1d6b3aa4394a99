//! The leader's side of a replica's durable consumers: each logged
//! consumer's live delivery state (ahead of the log: deliveries and acks
//! change it at once), the state entry in flight, and the double acks
//! waiting for an entry that holds them. Rebuilt from the replicated
//! state ([`ReplicatedState::logged_consumers`]) whenever a replica takes
//! office, so a new leader starts from what a quorum applied: an ack
//! confirmed to a client was in an applied state entry, and stays acked.
//!
//! Deliveries and acks are not log entries each: one state entry carries
//! everything that changed while the previous one was being committed (at
//! most one in flight per consumer), with the same bookkeeping as the
//! stream task's durables ([`StateEntries`], shared with `persistence.rs`).

use std::collections::BTreeMap;

use bytes::Bytes;

use super::super::consumer::config::ConsumerConfig;
use super::super::consumer::delivery::{Delivery, DeliveryState, Next, StateDecodeError};
use super::super::consumer::ConsumerSpec;
use super::config::subject_matches;
use super::state::{Applied, ReplicatedState};
use super::state_entries::{Signature, StateEntries};
use super::Store;

/// Deliveries one fetch hands out at most.
pub const FETCH_MESSAGES_MAX: usize = 256;
/// Double acks waiting for one consumer's next state entry at most; more
/// are refused (the client retries, as after a timeout).
pub const ACKS_WAITING_MAX: usize = 4096;

/// A logged consumer the leader cannot run.
#[derive(Debug, thiserror::Error)]
pub enum LoggedConsumerError {
    #[error("consumer {name}: its logged config does not decode: {reason}")]
    Config { name: String, reason: String },
    #[error("consumer {name}: its logged delivery state does not decode: {source}")]
    State {
        name: String,
        source: StateDecodeError,
    },
}

/// One logged consumer as the leader runs it.
pub(super) struct LiveConsumer {
    pub(super) delivery: DeliveryState,
    filters: Vec<String>,
    /// Its state entries; double-ack replies wait for the next.
    entries: StateEntries<Bytes>,
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

/// Whether `subject` passes `filters` (none: everything).
fn passes(filters: &[String], subject: &[u8]) -> bool {
    if filters.is_empty() {
        return true;
    }
    let subject = String::from_utf8_lossy(subject);
    filters
        .iter()
        .any(|filter| subject_matches(filter, &subject))
}

/// A state entry to propose (`None`: the state did not move since an
/// entry that applied, so the acks are confirmed already), and the acks it
/// confirms once applied.
pub(super) struct StateProposal {
    pub(super) name: String,
    pub(super) state: Option<(Bytes, Signature)>,
    pub(super) acks: Vec<Bytes>,
}

/// The live consumers of the replica in office (empty out of office).
#[derive(Default)]
pub(super) struct ConsumerLeader {
    consumers: BTreeMap<String, LiveConsumer>,
}

impl ConsumerLeader {
    /// Whether a consumer in office wants `subject` (an interest stream
    /// keeps only what one does).
    pub(super) fn wants(&self, subject: &[u8]) -> bool {
        self.consumers
            .values()
            .any(|consumer| passes(&consumer.filters, subject))
    }
}

/// A logged consumer's delivery config and filters.
fn spec_of(name: &str, config_json: &[u8]) -> Result<ConsumerSpec, LoggedConsumerError> {
    let config = ConsumerConfig::from_stored_json(config_json).map_err(|reason| {
        LoggedConsumerError::Config {
            name: name.to_string(),
            reason,
        }
    })?;
    ConsumerSpec::from_config(&config).map_err(|error| LoggedConsumerError::Config {
        name: name.to_string(),
        reason: error.description.to_string(),
    })
}

fn live(
    name: &str,
    config_json: &[u8],
    delivery_state: &Bytes,
) -> Result<LiveConsumer, LoggedConsumerError> {
    let spec = spec_of(name, config_json)?;
    let delivery = DeliveryState::decode(spec.delivery, delivery_state).map_err(|source| {
        LoggedConsumerError::State {
            name: name.to_string(),
            source,
        }
    })?;
    Ok(LiveConsumer {
        entries: StateEntries::new(&delivery),
        delivery,
        filters: spec.filters,
    })
}

/// Whether a logged consumer (from a snapshot) is one a leader can run.
pub(super) fn check_logged(
    name: &str,
    config_json: &[u8],
    delivery_state: &Bytes,
) -> Result<(), LoggedConsumerError> {
    live(name, config_json, delivery_state).map(|_| ())
}

impl ConsumerLeader {
    /// Office taken: every logged consumer runs from its applied state.
    pub(super) fn take_office(
        &mut self,
        state: &ReplicatedState,
    ) -> Result<(), LoggedConsumerError> {
        self.consumers.clear();
        for (name, logged) in &state.logged_consumers {
            let consumer = live(name, &logged.config_json, &logged.delivery_state)?;
            self.consumers.insert(name.clone(), consumer);
        }
        Ok(())
    }

    /// Office left: the live states go; the acks still waiting for an
    /// entry are returned, to fail.
    pub(super) fn leave_office(&mut self) -> Vec<Bytes> {
        let consumers = std::mem::take(&mut self.consumers);
        consumers
            .into_values()
            .flat_map(|consumer| consumer.entries.into_waiting())
            .collect()
    }

    pub(super) fn get(&self, name: &str) -> Option<&LiveConsumer> {
        self.consumers.get(name)
    }

    /// An entry applied while in office: creates, updates and deletes
    /// follow the log; a state entry of ours is no longer in flight.
    /// Returns the acks a delete leaves waiting (to fail).
    pub(super) fn applied(
        &mut self,
        state: &ReplicatedState,
        index: u64,
        applied: &Applied,
    ) -> Result<Vec<Bytes>, LoggedConsumerError> {
        match applied {
            Applied::ConsumerCreated { name, .. } => {
                let logged = &state.logged_consumers[name];
                match self.consumers.get_mut(name) {
                    Some(consumer) => {
                        let spec = spec_of(name, &logged.config_json)?;
                        consumer.delivery.set_config(spec.delivery);
                        consumer.filters = spec.filters;
                    }
                    None => {
                        let consumer = live(name, &logged.config_json, &logged.delivery_state)?;
                        self.consumers.insert(name.clone(), consumer);
                    }
                }
            }
            Applied::ConsumerDeleted { name } => {
                if let Some(consumer) = self.consumers.remove(name) {
                    return Ok(consumer.entries.into_waiting());
                }
            }
            Applied::ConsumerState { name, .. } => {
                if let Some(consumer) = self.consumers.get_mut(name) {
                    consumer.entries.applied(index);
                }
            }
            _ => {}
        }
        Ok(Vec::new())
    }

    /// Up to `count` (≤ [`FETCH_MESSAGES_MAX`]) deliveries of consumer
    /// `name` at `now_ns`: redeliveries due first, then new messages that
    /// pass its filters. `None`: no such consumer.
    pub(super) fn fetch(
        &mut self,
        state: &ReplicatedState,
        name: &str,
        count: usize,
        now_ns: u64,
    ) -> Option<Vec<Delivery>> {
        let consumer = self.consumers.get_mut(name)?;
        let count = count.min(FETCH_MESSAGES_MAX);
        let first = with_store!(&state.store, log => log.state()).first_sequence;
        consumer.delivery.check_pending(now_ns, first);
        let mut deliveries = Vec::new();
        while deliveries.len() < count {
            match consumer.delivery.next_to_deliver() {
                Next::Stalled => break,
                Next::Redeliver { stream_sequence } => {
                    let stored =
                        with_store!(&state.store, log => log.subject_of(stream_sequence)).is_some();
                    if stored {
                        deliveries.push(consumer.delivery.delivered_at(stream_sequence, now_ns));
                    } else {
                        consumer.delivery.message_gone(stream_sequence);
                    }
                }
                Next::FromStream { stream_sequence } => {
                    let filters = &consumer.filters;
                    let matches = |subject: &[u8]| passes(filters, subject);
                    let Some(found) = with_store!(&state.store, log => log.next_matching(stream_sequence, matches))
                    else {
                        break;
                    };
                    deliveries.push(consumer.delivery.delivered_at(found, now_ns));
                }
            }
        }
        debug_assert!(deliveries.iter().all(|delivery| {
            with_store!(&state.store, log => log.subject_of(delivery.stream_sequence))
                .is_some_and(|subject| passes(&consumer.filters, subject))
        }));
        Some(deliveries)
    }

    /// A double ack of `name`'s delivery: acked in the live state at once;
    /// its reply waits for the next state entry. `Err(reply)`: no such
    /// consumer, too many acks wait already, or a sequence this leader's
    /// state never delivered (a delivery by an earlier leader that was not
    /// committed: confirming it would be a lie, the message comes again).
    pub(super) fn ack(
        &mut self,
        name: &str,
        stream_sequence: u64,
        consumer_sequence: u64,
        reply: Bytes,
    ) -> Result<FloorMove, Bytes> {
        let Some(consumer) = self.consumers.get_mut(name) else {
            return Err(reply);
        };
        if consumer.entries.waiting_count() >= ACKS_WAITING_MAX
            || stream_sequence >= consumer.delivery.next_stream_sequence()
        {
            return Err(reply);
        }
        let before = consumer.delivery.ack_floor().1;
        consumer.delivery.ack(stream_sequence, consumer_sequence);
        consumer.entries.wait(reply);
        Ok(FloorMove {
            from: before,
            to: consumer.delivery.ack_floor().1,
        })
    }

    /// Whether a consumer in office still needs `sequence` on `subject`
    /// (interest retention keeps it until none does).
    pub(super) fn needs(&self, subject: &[u8], sequence: u64) -> bool {
        self.consumers.values().any(|consumer| {
            passes(&consumer.filters, subject) && consumer.delivery.needs_ack(sequence)
        })
    }

    /// Like [`Self::ack`] with nothing waiting for the entry (the
    /// ack-before-state canary answers at once). Returns whether it was
    /// taken.
    pub(super) fn ack_unconfirmed(
        &mut self,
        name: &str,
        stream_sequence: u64,
        consumer_sequence: u64,
    ) -> Option<FloorMove> {
        let consumer = self.consumers.get_mut(name)?;
        if stream_sequence >= consumer.delivery.next_stream_sequence() {
            return None;
        }
        let before = consumer.delivery.ack_floor().1;
        consumer.delivery.ack(stream_sequence, consumer_sequence);
        Some(FloorMove {
            from: before,
            to: consumer.delivery.ack_floor().1,
        })
    }

    /// The state entries due: every consumer with none in flight whose
    /// state moved or that has acks waiting.
    pub(super) fn due_proposals(&mut self) -> Vec<StateProposal> {
        let mut due = Vec::new();
        for (name, consumer) in &mut self.consumers {
            if !consumer.entries.is_due(&consumer.delivery) {
                continue;
            }
            let taken = consumer.entries.take_due(&consumer.delivery);
            due.push(StateProposal {
                name: name.clone(),
                state: taken.state,
                acks: taken.waiting,
            });
        }
        due
    }

    /// `name`'s state entry was proposed at `index`.
    pub(super) fn proposed(&mut self, name: &str, state: Bytes, signature: Signature, index: u64) {
        let consumer = self.consumers.get_mut(name).expect("a due consumer");
        consumer.entries.proposed(state, signature, index);
    }
}
