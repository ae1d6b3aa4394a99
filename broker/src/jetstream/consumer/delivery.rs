//! A consumer's delivery and acknowledgement state, sans IO: what to deliver
//! next, what is pending acknowledgement, what is due for redelivery, and
//! where the ack floor is. It mirrors nats-server 2.15's `consumer.go`
//! (`getNextMsg`, `deliverMsg`/`trackPending`, `processAckMsg`,
//! `moveAckFloor`, `processNak`, `processTerm`, `checkPending`,
//! `hasMaxDeliveries`, `incDeliveryCount`) so that clients observe the same
//! sequences, delivery counts and floors.
//!
//! The owner (the stream task) asks [`DeliveryState::next_to_deliver`] what to deliver,
//! reads the message itself, and reports the delivery with
//! [`DeliveryState::delivered`]. Time comes in as Unix nanoseconds; the
//! state never reads a clock. Advisories the server must publish are left in
//! an outbox ([`DeliveryState::take_events`]).
//!
//! The whole state encodes canonically ([`DeliveryState::encode`]) for the
//! stream's log, so a durable consumer resumes exactly after a restart.
//! Layout (little-endian), documented in docs/jetstream-format.md:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | version = 1 |
//! | 8 | next consumer (delivery) sequence |
//! | 8 | next stream sequence |
//! | 8 | ack floor, consumer sequence |
//! | 8 | ack floor, stream sequence |
//! | 4 | pending count p |
//! | p × 24 | stream sequence, consumer sequence, delivered at (ns), ascending by stream sequence |
//! | 4 | redelivered count r |
//! | r × 16 | stream sequence, redeliveries, ascending by stream sequence |

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Every pending message is checked this long after its deadline at the
/// latest (nats-server's `ackWaitDelay`).
pub const ACK_WAIT_DELAY_NS: u64 = 1_000_000;
/// Most messages pending acknowledgement a snapshot may hold.
pub const PENDING_MAX: usize = 1 << 24;
/// Sequences stay below this (nothing overflows adding to them).
pub const SEQUENCE_MAX: u64 = 1 << 62;
/// Bytes of an encoded state besides its pending and redelivered entries.
pub const STATE_FIXED_BYTES: usize = 1 + 4 * 8 + 4 + 4;
/// Bytes a pending message can take in an encoded state: its pending entry
/// and, once redelivered, its redelivered entry.
pub const STATE_BYTES_PER_PENDING: usize = 24 + 16;
/// Bytes of one redelivered entry.
pub const STATE_BYTES_PER_REDELIVERED: usize = 16;

/// How deliveries are acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// Nothing to acknowledge: the floor follows the deliveries.
    None,
    /// An ack acknowledges everything up to it.
    All,
    /// Every message is acknowledged by itself.
    Explicit,
}

/// The parts of a consumer's config that drive delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryConfig {
    pub ack: AckMode,
    /// Redelivery after this long without an ack (0: never).
    pub ack_wait_ns: u64,
    /// Redelivery delays by delivery count (overrides `ack_wait_ns`).
    pub backoff_ns: Vec<u64>,
    /// Deliveries of one message at most; `None` is unlimited.
    pub max_deliver: Option<u64>,
    /// Messages pending acknowledgement at most; `None` is unlimited.
    pub max_ack_pending: Option<usize>,
}

impl DeliveryConfig {
    /// `ack` with no ack wait, backoff or limits (what reading an encoded
    /// state needs: the encoding holds nothing of the config).
    pub fn unlimited(ack: AckMode) -> DeliveryConfig {
        DeliveryConfig {
            ack,
            ack_wait_ns: 0,
            backoff_ns: Vec::new(),
            max_deliver: None,
            max_ack_pending: None,
        }
    }
}

/// A delivered message awaiting its ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// The consumer sequence of its first delivery (kept on redelivery).
    pub consumer_sequence: u64,
    /// When it was last delivered (or its ack deadline was last moved).
    pub timestamp_ns: u64,
}

/// What to deliver next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Redeliver this stream sequence (if the stream still has it; if not,
    /// report [`DeliveryState::message_gone`]).
    Redeliver { stream_sequence: u64 },
    /// Deliver the first message matching the filter at or after this.
    FromStream { stream_sequence: u64 },
    /// max_ack_pending is reached: wait for acks.
    Stalled,
}

/// What a delivery is sent with (the ack subject's numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    pub stream_sequence: u64,
    pub consumer_sequence: u64,
    /// 1 on the first delivery.
    pub delivery_count: u64,
}

/// Something the server announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>`.
    MaxDeliveries {
        stream_sequence: u64,
        deliveries: u64,
    },
    /// `$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.<stream>.<consumer>`.
    Naked {
        stream_sequence: u64,
        consumer_sequence: u64,
        deliveries: u64,
    },
    /// `$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.<stream>.<consumer>`.
    Terminated {
        stream_sequence: u64,
        consumer_sequence: u64,
        deliveries: u64,
    },
}

/// A snapshot that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateDecodeError {
    #[error("delivery state truncated")]
    Truncated,
    #[error("unknown delivery state version {0}")]
    Version(u8),
    #[error("{0} pending messages is over the limit")]
    TooManyPending(u64),
    #[error("delivery state is not canonical: {0}")]
    NonCanonical(&'static str),
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// One consumer's delivery state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryState {
    config: DeliveryConfig,
    /// nats-server's `o.dseq`: the next consumer sequence.
    next_consumer_sequence: u64,
    /// nats-server's `o.sseq`: the next stream sequence to look at.
    next_stream_sequence: u64,
    ack_floor_consumer: u64,
    ack_floor_stream: u64,
    pending: BTreeMap<u64, Pending>,
    /// nats-server's `o.rdc`: redeliveries per stream sequence.
    redelivered: BTreeMap<u64, u64>,
    redeliver_queue: VecDeque<u64>,
    queued: BTreeSet<u64>,
    events: Vec<Event>,
}

impl DeliveryState {
    /// A consumer that starts delivering at `start_stream_sequence` (≥ 1;
    /// the deliver policy chose it). The floors sit just below it.
    pub fn new(config: DeliveryConfig, start_stream_sequence: u64) -> DeliveryState {
        assert!(start_stream_sequence >= 1);
        DeliveryState {
            config,
            next_consumer_sequence: 1,
            next_stream_sequence: start_stream_sequence,
            ack_floor_consumer: 0,
            ack_floor_stream: start_stream_sequence - 1,
            pending: BTreeMap::new(),
            redelivered: BTreeMap::new(),
            redeliver_queue: VecDeque::new(),
            queued: BTreeSet::new(),
            events: Vec::new(),
        }
    }

    /// [`encode`](Self::encode) of a new state at `start_stream_sequence`
    /// (the encoding holds nothing of the config).
    pub fn initial_encoding(start_stream_sequence: u64) -> Vec<u8> {
        DeliveryState::new(
            DeliveryConfig::unlimited(AckMode::None),
            start_stream_sequence,
        )
        .encode()
    }

    pub fn config(&self) -> &DeliveryConfig {
        &self.config
    }

    /// A config update (the fields that may change: ack_wait, backoff,
    /// max_deliver, max_ack_pending).
    pub fn set_config(&mut self, config: DeliveryConfig) {
        assert_eq!(config.ack, self.config.ack, "the ack policy cannot change");
        self.config = config;
    }

    /// `delivered` of consumer info: (consumer sequence, stream sequence).
    pub fn delivered(&self) -> (u64, u64) {
        (
            self.next_consumer_sequence - 1,
            self.next_stream_sequence - 1,
        )
    }

    /// `ack_floor` of consumer info: (consumer sequence, stream sequence).
    pub fn ack_floor(&self) -> (u64, u64) {
        (self.ack_floor_consumer, self.ack_floor_stream)
    }

    pub fn num_ack_pending(&self) -> usize {
        self.pending.len()
    }

    pub fn num_redelivered(&self) -> usize {
        self.redelivered.len()
    }

    /// The next stream sequence a new delivery starts looking at.
    pub fn next_stream_sequence(&self) -> u64 {
        self.next_stream_sequence
    }

    /// Whether this consumer still needs `stream_sequence` (nats-server's
    /// `needAck`, for a message its filters select): interest and
    /// work-queue streams keep a message while any consumer needs it.
    pub fn needs_ack(&self, stream_sequence: u64) -> bool {
        if stream_sequence <= self.ack_floor_stream {
            return false;
        }
        match self.config.ack {
            AckMode::None | AckMode::All => true,
            AckMode::Explicit => {
                stream_sequence >= self.next_stream_sequence
                    || self.pending.contains_key(&stream_sequence)
            }
        }
    }

    pub fn is_pending(&self, stream_sequence: u64) -> bool {
        self.pending.contains_key(&stream_sequence)
    }

    pub fn pending(&self) -> impl Iterator<Item = (u64, Pending)> + '_ {
        self.pending
            .iter()
            .map(|(sequence, pending)| (*sequence, *pending))
    }

    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Advisories to publish, oldest first.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Forgets the redelivery counts of messages no longer pending (given
    /// up after max_deliver), oldest first, until at most `keep` remain:
    /// they only count toward `num_redelivered`. Returns how many went.
    pub fn forget_given_up(&mut self, keep: usize) -> usize {
        let given_up: Vec<u64> = self
            .redelivered
            .keys()
            .copied()
            .filter(|sequence| !self.pending.contains_key(sequence))
            .collect();
        let excess = given_up.len().saturating_sub(keep);
        for sequence in &given_up[..excess] {
            self.redelivered.remove(sequence);
        }
        excess
    }

    /// Redelivery counts kept for messages no longer pending.
    pub fn given_up(&self) -> usize {
        self.redelivered
            .keys()
            .filter(|sequence| !self.pending.contains_key(sequence))
            .count()
    }

    fn delivery_count(&self, stream_sequence: u64) -> u64 {
        self.redelivered.get(&stream_sequence).copied().unwrap_or(0) + 1
    }

    fn stalled(&self) -> bool {
        self.config.ack != AckMode::None
            && self
                .config
                .max_ack_pending
                .is_some_and(|max| self.pending.len() >= max)
    }

    /// What to deliver next (nats-server's `getNextMsg`): queued
    /// redeliveries first, skipping those past max_deliver; then, unless
    /// max_ack_pending is reached, new messages.
    pub fn next_to_deliver(&mut self) -> Next {
        while let Some(&stream_sequence) = self.redeliver_queue.front() {
            let count = self.delivery_count(stream_sequence) + 1;
            if self.config.max_deliver.is_some_and(|max| count > max) {
                self.redeliver_queue.pop_front();
                self.queued.remove(&stream_sequence);
                self.give_up(stream_sequence);
                continue;
            }
            return Next::Redeliver { stream_sequence };
        }
        if self.stalled() {
            return Next::Stalled;
        }
        Next::FromStream {
            stream_sequence: self.next_stream_sequence,
        }
    }

    /// A message that reached max_deliver leaves pending and the ack floor
    /// moves past it; its advisory is sent once (`hasMaxDeliveries`). It
    /// stays counted as redelivered, as in nats-server.
    fn give_up(&mut self, stream_sequence: u64) {
        let deliveries = self.delivery_count(stream_sequence);
        if let Some(pending) = self.pending.remove(&stream_sequence) {
            self.events.push(Event::MaxDeliveries {
                stream_sequence,
                deliveries,
            });
            self.redelivered
                .entry(stream_sequence)
                .or_insert(deliveries);
            self.move_ack_floor(pending.consumer_sequence, stream_sequence);
        }
    }

    /// The numbers [`delivered_at`](Self::delivered_at) would give a
    /// delivery of `stream_sequence` now, without recording it.
    pub fn upcoming(&self, stream_sequence: u64) -> Delivery {
        let redelivery = self.queued.contains(&stream_sequence);
        Delivery {
            stream_sequence,
            consumer_sequence: self.next_consumer_sequence,
            delivery_count: self.delivery_count(stream_sequence) + u64::from(redelivery),
        }
    }

    /// Records a delivery of `stream_sequence` at `now_ns` (after
    /// [`next_to_deliver`](Self::next_to_deliver) named it, or named a start it was found at).
    pub fn delivered_at(&mut self, stream_sequence: u64, now_ns: u64) -> Delivery {
        let redelivery = self.queued.remove(&stream_sequence);
        if redelivery {
            let position = self
                .redeliver_queue
                .iter()
                .position(|queued| *queued == stream_sequence)
                .expect("queued sequences are in the queue");
            self.redeliver_queue.remove(position);
            *self.redelivered.entry(stream_sequence).or_insert(0) += 1;
        } else {
            assert!(
                stream_sequence >= self.next_stream_sequence,
                "new deliveries move forward"
            );
            self.next_stream_sequence = stream_sequence + 1;
        }
        let consumer_sequence = self.next_consumer_sequence;
        self.next_consumer_sequence += 1;
        let delivery_count = self.delivery_count(stream_sequence);
        match self.config.ack {
            AckMode::None => {
                self.ack_floor_consumer = consumer_sequence;
                self.ack_floor_stream = stream_sequence;
            }
            AckMode::All | AckMode::Explicit => {
                self.pending
                    .entry(stream_sequence)
                    .and_modify(|pending| pending.timestamp_ns = now_ns)
                    .or_insert(Pending {
                        consumer_sequence,
                        timestamp_ns: now_ns,
                    });
            }
        }
        Delivery {
            stream_sequence,
            consumer_sequence,
            delivery_count,
        }
    }

    /// A queued redelivery whose message the stream no longer has: treated
    /// as terminated (nats-server's `processTerm` with reason
    /// "unacknowledged message was deleted").
    pub fn message_gone(&mut self, stream_sequence: u64) {
        if self.queued.remove(&stream_sequence) {
            self.redeliver_queue
                .retain(|queued| *queued != stream_sequence);
        }
        if let Some(pending) = self.pending.get(&stream_sequence).copied() {
            self.ack(stream_sequence, pending.consumer_sequence);
        }
    }

    /// An ack (`+ACK`, and the ack half of `+NXT` and `+TERM`). Returns
    /// whether it acknowledged something new.
    pub fn ack(&mut self, stream_sequence: u64, consumer_sequence: u64) -> bool {
        // At or above the next sequence to deliver: not ours to ack.
        if stream_sequence >= self.next_stream_sequence {
            return false;
        }
        match self.config.ack {
            AckMode::Explicit => {
                let removed = self.pending.remove(&stream_sequence);
                self.redelivered.remove(&stream_sequence);
                self.unqueue(stream_sequence);
                match removed {
                    Some(pending) => {
                        self.move_ack_floor(pending.consumer_sequence, stream_sequence);
                        true
                    }
                    None => false,
                }
            }
            AckMode::All => {
                if consumer_sequence <= self.ack_floor_consumer
                    || stream_sequence <= self.ack_floor_stream
                {
                    return false;
                }
                self.ack_floor_consumer = consumer_sequence;
                self.ack_floor_stream = stream_sequence;
                let below: Vec<u64> = self
                    .pending
                    .range(..=stream_sequence)
                    .map(|(sequence, _)| *sequence)
                    .collect();
                for sequence in below {
                    self.pending.remove(&sequence);
                    self.redelivered.remove(&sequence);
                    self.unqueue(sequence);
                }
                true
            }
            AckMode::None => false,
        }
    }

    fn unqueue(&mut self, stream_sequence: u64) {
        if self.queued.remove(&stream_sequence) {
            self.redeliver_queue
                .retain(|queued| *queued != stream_sequence);
        }
    }

    /// nats-server's `moveAckFloor`.
    fn move_ack_floor(&mut self, consumer_sequence: u64, stream_sequence: u64) {
        if self.pending.is_empty() {
            self.ack_floor_consumer = self.next_consumer_sequence - 1;
            self.ack_floor_stream = self.next_stream_sequence - 1;
        } else if consumer_sequence == self.ack_floor_consumer + 1 {
            self.ack_floor_consumer = consumer_sequence;
            self.ack_floor_stream = stream_sequence;
            if let Some((&next, pending)) = self
                .pending
                .range(stream_sequence + 1..self.next_stream_sequence)
                .next()
            {
                if pending.consumer_sequence > 0 {
                    self.ack_floor_consumer = pending.consumer_sequence - 1;
                    self.ack_floor_stream = next - 1;
                }
            }
        }
    }

    /// `-NAK`: redeliver now, or after `delay_ns` (`-NAK {"delay":…}`).
    pub fn nak(
        &mut self,
        stream_sequence: u64,
        consumer_sequence: u64,
        delay_ns: Option<u64>,
        now_ns: u64,
    ) {
        if consumer_sequence <= self.ack_floor_consumer
            || consumer_sequence >= self.next_consumer_sequence
        {
            return;
        }
        let Some(pending) = self.pending.get_mut(&stream_sequence) else {
            return;
        };
        let deliveries = self.redelivered.get(&stream_sequence).copied().unwrap_or(0) + 1;
        self.events.push(Event::Naked {
            stream_sequence,
            consumer_sequence,
            deliveries,
        });
        if let Some(delay_ns) = delay_ns {
            // Due `delay_ns` from now: shift the delivery time so that the
            // ack wait ends then.
            pending.timestamp_ns = now_ns
                .saturating_sub(self.config.ack_wait_ns)
                .saturating_add(delay_ns);
            self.unqueue(stream_sequence);
            return;
        }
        if self.queued.insert(stream_sequence) {
            self.redeliver_queue.push_back(stream_sequence);
        }
    }

    /// `+WPI`: the ack wait starts again from now.
    pub fn in_progress(&mut self, stream_sequence: u64, now_ns: u64) {
        if let Some(pending) = self.pending.get_mut(&stream_sequence) {
            pending.timestamp_ns = now_ns;
        }
    }

    /// `+TERM`: acknowledged, never redelivered; an advisory.
    pub fn term(&mut self, stream_sequence: u64, consumer_sequence: u64) {
        let deliveries = self.delivery_count(stream_sequence);
        self.ack(stream_sequence, consumer_sequence);
        self.events.push(Event::Terminated {
            stream_sequence,
            consumer_sequence,
            deliveries,
        });
    }

    /// The ack deadline of a pending message delivered `redeliveries` times
    /// before (nats-server indexes backoff by the redelivery count).
    fn deadline_ns(&self, stream_sequence: u64) -> u64 {
        if self.config.backoff_ns.is_empty() {
            return self.config.ack_wait_ns;
        }
        let last = self.config.backoff_ns.len() - 1;
        let index =
            (self.redelivered.get(&stream_sequence).copied().unwrap_or(0) as usize).min(last);
        self.config.backoff_ns[index]
    }

    /// nats-server's `checkPending`: queues for redelivery every pending
    /// message whose ack wait has passed at `now_ns`, drops pending entries
    /// below `stream_first_sequence` (removed from the stream), and returns
    /// when to check again (`None`: nothing pending).
    pub fn check_pending(&mut self, now_ns: u64, stream_first_sequence: u64) -> Option<u64> {
        if self.config.ack_wait_ns == 0 && self.config.backoff_ns.is_empty() {
            return None;
        }
        let mut next_in_ns = self.config.ack_wait_ns + ACK_WAIT_DELAY_NS;
        if let Some(longest) = self.config.backoff_ns.last() {
            next_in_ns = *longest;
        }
        let gone: Vec<u64> = self
            .pending
            .range(..stream_first_sequence)
            .map(|(sequence, _)| *sequence)
            .chain(
                self.pending
                    .range(..=self.ack_floor_stream)
                    .map(|(sequence, _)| *sequence),
            )
            .collect();
        for sequence in gone {
            if let Some(pending) = self.pending.remove(&sequence) {
                self.redelivered.remove(&sequence);
                self.unqueue(sequence);
                self.ack_floor_stream = self.ack_floor_stream.max(sequence);
                self.ack_floor_consumer = self.ack_floor_consumer.max(pending.consumer_sequence);
            }
        }
        let mut expired = Vec::new();
        let mut exceeded = Vec::new();
        for (&sequence, pending) in &self.pending {
            let elapsed = now_ns.saturating_sub(pending.timestamp_ns);
            let deadline = self.deadline_ns(sequence);
            if !self.config.backoff_ns.is_empty() {
                let count = self.redelivered.get(&sequence).copied().unwrap_or(0) as usize;
                let next_index = (count + 1).min(self.config.backoff_ns.len() - 1);
                next_in_ns = next_in_ns.min(self.config.backoff_ns[next_index]);
            }
            if elapsed >= deadline {
                if self.queued.contains(&sequence) {
                    continue;
                }
                let delivered = self.delivery_count(sequence);
                if self.config.max_deliver.is_some_and(|max| delivered >= max) {
                    exceeded.push(sequence);
                } else {
                    expired.push(sequence);
                }
            } else {
                next_in_ns = next_in_ns.min(deadline - elapsed);
            }
        }
        for sequence in exceeded {
            self.give_up(sequence);
        }
        if let Some(&first) = expired.first() {
            // Keep their order among later redeliveries.
            let shift = now_ns.saturating_sub(self.pending[&first].timestamp_ns);
            for sequence in expired {
                if let Some(pending) = self.pending.get_mut(&sequence) {
                    pending.timestamp_ns = pending.timestamp_ns.saturating_add(shift);
                }
                if self.queued.insert(sequence) {
                    self.redeliver_queue.push_back(sequence);
                }
            }
        }
        if self.pending.is_empty() {
            self.redeliver_queue.clear();
            self.queued.clear();
            self.ack_floor_consumer = self.next_consumer_sequence - 1;
            self.ack_floor_stream = self.next_stream_sequence - 1;
            return None;
        }
        Some(now_ns.saturating_add(next_in_ns))
    }

    /// Bytes [`encode`](Self::encode) gives.
    pub fn encoded_bytes(&self) -> usize {
        STATE_FIXED_BYTES
            + self.pending.len() * 24
            + self.redelivered.len() * STATE_BYTES_PER_REDELIVERED
    }

    /// The canonical encoding of everything that must survive a restart
    /// (see the module docs for the layout).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            STATE_FIXED_BYTES + self.pending.len() * 24 + self.redelivered.len() * 16,
        );
        out.push(1);
        for value in [
            self.next_consumer_sequence,
            self.next_stream_sequence,
            self.ack_floor_consumer,
            self.ack_floor_stream,
        ] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        out.extend_from_slice(&(self.pending.len() as u32).to_le_bytes());
        for (sequence, pending) in &self.pending {
            out.extend_from_slice(&sequence.to_le_bytes());
            out.extend_from_slice(&pending.consumer_sequence.to_le_bytes());
            out.extend_from_slice(&pending.timestamp_ns.to_le_bytes());
        }
        out.extend_from_slice(&(self.redelivered.len() as u32).to_le_bytes());
        for (sequence, count) in &self.redelivered {
            out.extend_from_slice(&sequence.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
        }
        debug_assert_eq!(out.len(), self.encoded_bytes());
        out
    }

    /// Restores a state from [`encode`](Self::encode)'s bytes. Pending
    /// messages are checked again by the next [`check_pending`]
    /// (nats-server redelivers what was pending after a restart too).
    pub fn decode(config: DeliveryConfig, bytes: &[u8]) -> Result<DeliveryState, StateDecodeError> {
        let mut reader = Reader { bytes, offset: 0 };
        let version = reader.u8()?;
        if version != 1 {
            return Err(StateDecodeError::Version(version));
        }
        let next_consumer_sequence = reader.u64()?;
        let next_stream_sequence = reader.u64()?;
        let ack_floor_consumer = reader.u64()?;
        let ack_floor_stream = reader.u64()?;
        if next_consumer_sequence == 0 || next_stream_sequence == 0 {
            return Err(StateDecodeError::NonCanonical("sequences start at 1"));
        }
        if next_consumer_sequence >= SEQUENCE_MAX || next_stream_sequence >= SEQUENCE_MAX {
            return Err(StateDecodeError::NonCanonical("sequence out of range"));
        }
        if ack_floor_consumer >= next_consumer_sequence || ack_floor_stream >= next_stream_sequence
        {
            return Err(StateDecodeError::NonCanonical("ack floor past delivered"));
        }
        let pending_count = u64::from(reader.u32()?);
        if pending_count > PENDING_MAX as u64 {
            return Err(StateDecodeError::TooManyPending(pending_count));
        }
        let mut pending = BTreeMap::new();
        let mut previous = 0;
        for _ in 0..pending_count {
            let sequence = reader.u64()?;
            let consumer_sequence = reader.u64()?;
            let timestamp_ns = reader.u64()?;
            if sequence <= previous || sequence >= next_stream_sequence {
                return Err(StateDecodeError::NonCanonical(
                    "pending sequences ascend below next",
                ));
            }
            if consumer_sequence == 0 || consumer_sequence >= next_consumer_sequence {
                return Err(StateDecodeError::NonCanonical(
                    "pending consumer sequence out of range",
                ));
            }
            previous = sequence;
            pending.insert(
                sequence,
                Pending {
                    consumer_sequence,
                    timestamp_ns,
                },
            );
        }
        let redelivered_count = u64::from(reader.u32()?);
        if redelivered_count > PENDING_MAX as u64 {
            return Err(StateDecodeError::TooManyPending(redelivered_count));
        }
        let mut redelivered = BTreeMap::new();
        let mut previous = 0;
        for _ in 0..redelivered_count {
            let sequence = reader.u64()?;
            let count = reader.u64()?;
            if sequence <= previous || count == 0 {
                return Err(StateDecodeError::NonCanonical(
                    "redelivered entries ascend, counts ≥ 1",
                ));
            }
            // Each redelivery took a consumer sequence, so a count cannot
            // reach the next one (and the increments cannot overflow).
            if count >= next_consumer_sequence {
                return Err(StateDecodeError::NonCanonical(
                    "redelivery count past delivered",
                ));
            }
            previous = sequence;
            redelivered.insert(sequence, count);
        }
        if reader.offset != bytes.len() {
            return Err(StateDecodeError::Trailing(bytes.len() - reader.offset));
        }
        Ok(DeliveryState {
            config,
            next_consumer_sequence,
            next_stream_sequence,
            ack_floor_consumer,
            ack_floor_stream,
            pending,
            redelivered,
            redeliver_queue: VecDeque::new(),
            queued: BTreeSet::new(),
            events: Vec::new(),
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl Reader<'_> {
    fn take(&mut self, count: usize) -> Result<&[u8], StateDecodeError> {
        let end = self
            .offset
            .checked_add(count)
            .ok_or(StateDecodeError::Truncated)?;
        let slice = self
            .bytes
            .get(self.offset..end)
            .ok_or(StateDecodeError::Truncated)?;
        self.offset = end;
        Ok(slice)
    }

    fn u8(&mut self) -> Result<u8, StateDecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, StateDecodeError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, StateDecodeError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

#[cfg(test)]
#[path = "delivery_tests.rs"]
mod tests;
