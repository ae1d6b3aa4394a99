//! The leader's bookkeeping of one durable consumer's delivery-state
//! entries, kept per logged consumer by `ConsumerLeader`
//! (`consumer_leader.rs`): what was last proposed, the one entry in
//! flight, and the replies (double acks, infos) waiting for the next entry.
//!
//! Deliveries and acks change the leader's live state at once; they are not
//! entries each. After a turn, a consumer whose state moved and has no entry
//! in flight proposes one holding everything since the last, so under load
//! one entry covers what happened while the previous one was committing. A
//! reply waiting for it is released when that entry applies (or at once,
//! when the state did not move since an entry that applied already): what a
//! client is told is in the replicated state.

use bytes::Bytes;

use super::super::consumer::delivery::DeliveryState;

/// The numbers that move whenever a delivery state's pending set does (a
/// delivery or redelivery moves `delivered`, an ack, term or give-up drops
/// `num_ack_pending` or moves the floor): compared after each turn instead
/// of encoding every consumer's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Signature {
    delivered: (u64, u64),
    ack_floor: (u64, u64),
    ack_pending: usize,
    redelivered: usize,
}

impl Signature {
    pub(super) fn of(state: &DeliveryState) -> Signature {
        Signature {
            delivered: state.delivered(),
            ack_floor: state.ack_floor(),
            ack_pending: state.num_ack_pending(),
            redelivered: state.num_redelivered(),
        }
    }
}

/// What [`StateEntries::take_due`] found.
pub(super) struct Due<W> {
    /// The state to propose, and its signature; `None`: it did not move
    /// since the last entry (applied), which holds what `waiting` reports.
    pub(super) state: Option<(Bytes, Signature)>,
    pub(super) waiting: Vec<W>,
}

/// One durable consumer's state entries, from the leader; `W` is a reply
/// waiting for the next entry.
pub(super) struct StateEntries<W> {
    /// The state last proposed (or applied, when taken as proposed).
    proposed: Bytes,
    signature: Signature,
    /// Changed in ways the signature does not show (ack deadlines moved).
    touched: bool,
    /// The index of the entry proposed and not yet applied.
    in_flight: Option<u64>,
    /// Replies for the next entry (bounded by the caller).
    waiting: Vec<W>,
}

impl<W> StateEntries<W> {
    /// `state` taken as proposed and applied.
    pub(super) fn new(state: &DeliveryState) -> StateEntries<W> {
        StateEntries {
            proposed: Bytes::from(state.encode()),
            signature: Signature::of(state),
            touched: false,
            in_flight: None,
            waiting: Vec::new(),
        }
    }

    /// The state changed in a way its signature does not show.
    pub(super) fn touch(&mut self) {
        self.touched = true;
    }

    /// A reply for the next entry.
    pub(super) fn wait(&mut self, waiter: W) {
        self.waiting.push(waiter);
    }

    pub(super) fn waiting_count(&self) -> usize {
        self.waiting.len()
    }

    /// Whether `state` moved since the last proposal.
    pub(super) fn changed(&self, state: &DeliveryState) -> bool {
        self.touched || self.signature != Signature::of(state)
    }

    pub(super) fn in_flight(&self) -> Option<u64> {
        self.in_flight
    }

    /// Whether an entry is due: none in flight, and the state moved or a
    /// reply waits.
    pub(super) fn is_due(&self, state: &DeliveryState) -> bool {
        self.in_flight.is_none() && (!self.waiting.is_empty() || self.changed(state))
    }

    /// Takes what is due (the caller checked [`Self::is_due`]).
    pub(super) fn take_due(&mut self, state: &DeliveryState) -> Due<W> {
        assert!(
            self.in_flight.is_none(),
            "one state entry in flight at most"
        );
        self.touched = false;
        let waiting = std::mem::take(&mut self.waiting);
        let encoded = Bytes::from(state.encode());
        if encoded == self.proposed {
            return Due {
                state: None,
                waiting,
            };
        }
        Due {
            state: Some((encoded, Signature::of(state))),
            waiting,
        }
    }

    /// The state from [`Self::take_due`] was proposed at `index`.
    pub(super) fn proposed(&mut self, state: Bytes, signature: Signature, index: u64) {
        self.proposed = state;
        self.signature = signature;
        self.in_flight = Some(index);
    }

    /// A state entry of this consumer applied at `index`.
    pub(super) fn applied(&mut self, index: u64) {
        if self.in_flight == Some(index) {
            self.in_flight = None;
        }
    }

    /// The replies still waiting (the consumer or the office is gone).
    pub(super) fn into_waiting(self) -> Vec<W> {
        self.waiting
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::consumer::delivery::{AckMode, DeliveryConfig};
    use super::*;

    fn explicit() -> DeliveryConfig {
        DeliveryConfig {
            ack: AckMode::Explicit,
            ack_wait_ns: 1_000,
            backoff_ns: Vec::new(),
            max_deliver: None,
            max_ack_pending: None,
        }
    }

    /// One entry in flight; a reply waits for the entry after its ack; an
    /// unchanged state releases waiting replies without an entry.
    #[test]
    fn one_entry_in_flight_and_replies_follow_their_entry() {
        let mut delivery = DeliveryState::new(explicit(), 1);
        let mut entries: StateEntries<&str> = StateEntries::new(&delivery);
        assert!(!entries.is_due(&delivery));
        delivery.delivered_at(1, 10);
        delivery.delivered_at(2, 10);
        assert!(entries.is_due(&delivery));
        let due = entries.take_due(&delivery);
        let (state, signature) = due.state.expect("moved");
        entries.proposed(state, signature, 7);
        delivery.ack(1, 1);
        entries.wait("ack 1");
        assert!(!entries.is_due(&delivery), "one in flight");
        entries.applied(6);
        assert_eq!(entries.in_flight(), Some(7), "another index applied");
        entries.applied(7);
        let due = entries.take_due(&delivery);
        assert!(due.state.is_some(), "the ack moved the state");
        assert_eq!(due.waiting, ["ack 1"]);
        let (state, signature) = due.state.expect("moved");
        entries.proposed(state, signature, 9);
        entries.applied(9);
        entries.wait("ack 1 again");
        let due = entries.take_due(&delivery);
        assert!(
            due.state.is_none(),
            "nothing moved: the applied entry holds it"
        );
        assert_eq!(due.waiting, ["ack 1 again"]);
    }
}
