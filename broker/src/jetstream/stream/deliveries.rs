//! A stream leader's deliveries to its consumers' clients, sans-IO: pull
//! requests queued and answered, the delivery loop (redeliveries, new
//! messages, replay pacing, rate limits, flow control, headers-only),
//! heartbeats, pull expiries, inactivity, and the advisories acks and
//! give-ups raise. Everything that leaves goes through an [`Outlet`]: the
//! stream task's publishes to its shard's router, or the simulator's
//! record of what each client got. The same code runs in both.

use std::borrow::Cow;

use bytes::Bytes;

use super::super::advisory;
use super::super::consumer::delivery::{AckMode, Delivery};
use super::super::consumer::pull::{PullRequest, Reply, Status};
use super::super::consumer::rate_limit::RateLimit;
use super::super::consumer::requests::{self as consumer_requests, AckSubject};
use super::super::consumer::responses::{self as consumer_responses, PullStatus};
use super::super::consumer::{headers_only, write_ack_subject, Consumer};
use super::consumer_leader::{Chosen, ConsumerLeader};
use super::state::ReplicatedState;
use super::{Store, StoreError};

/// Deliveries one turn makes across the stream's consumers at most, so
/// publishes and acks get their turn.
pub const DELIVERIES_PER_TURN_MAX: usize = 1024;
/// Bytes of deliveries one consumer builds before it yields so connection
/// writers run: about one socket send's worth.
pub const DELIVERY_BYTES_PER_YIELD: u64 = 64 * 1024;
/// The first yield of a turn comes right after its first delivery: the
/// client is idle until it arrives (an A/B over five pairs: 348k -> 361k
/// msgs/s against 8 KiB).
pub const DELIVERY_BYTES_FIRST_YIELD: u64 = 1;

/// Where deliveries go, and what the leader knows of who listens.
pub trait Outlet {
    /// Changes whenever any subscription comes or goes.
    fn interest_generation(&self) -> u64;
    /// Whether anyone subscribes to `subject` (a pull request's inbox, a
    /// push consumer's deliver subject, an advisory's subject).
    fn has_interest(&self, subject: &[u8]) -> bool;
    /// A message for a consumer's client on `inbox`, as a `MSG`/`HMSG`
    /// with `subject` and `reply` (a delivery's ack subject, a flow
    /// control request's reply); `body` is the header block
    /// (`header_bytes` of it) and the payload.
    fn deliver(
        &mut self,
        inbox: &[u8],
        subject: &[u8],
        reply: Option<&[u8]>,
        header_bytes: usize,
        body: &[u8],
    );
    /// A status, advisory or reply published on `subject`.
    fn publish(&mut self, subject: &[u8], header_bytes: usize, body: &[u8]);
}

/// A client's view of a leader's deliveries, for the simulator and tests:
/// every message with an ack subject (statuses, heartbeats and flow
/// control carry none) recorded as the delivery the subject names.
/// Everyone listens.
#[derive(Default)]
pub struct RecordingOutlet {
    pub deliveries: Vec<Delivery>,
    /// What was published (statuses, advisories): subject and bytes.
    pub published: Vec<(Bytes, Bytes)>,
}

impl Outlet for RecordingOutlet {
    fn interest_generation(&self) -> u64 {
        0
    }

    fn has_interest(&self, _subject: &[u8]) -> bool {
        true
    }

    fn deliver(
        &mut self,
        _inbox: &[u8],
        _subject: &[u8],
        reply: Option<&[u8]>,
        _header_bytes: usize,
        _body: &[u8],
    ) {
        let Some(ack) = reply.and_then(AckSubject::decode) else {
            return;
        };
        self.deliveries.push(Delivery {
            stream_sequence: ack.stream_sequence,
            consumer_sequence: ack.consumer_sequence,
            delivery_count: ack.delivered_count,
        });
    }

    fn publish(&mut self, subject: &[u8], _header_bytes: usize, body: &[u8]) {
        self.published.push((
            Bytes::copy_from_slice(subject),
            Bytes::copy_from_slice(body),
        ));
    }
}

/// Buffers a delivery is built in, kept between deliveries so the drain
/// path allocates nothing per message.
#[derive(Default)]
pub struct DeliveryScratch {
    message: Vec<u8>,
    ack_subject: String,
}

/// What one round of deliveries draws on: the stream the messages come
/// from, and the round's clock and settings.
#[derive(Clone, Copy)]
pub(super) struct DeliveryRound<'a> {
    /// The stream's replicated state (its store) and its name.
    pub(super) state: &'a ReplicatedState,
    pub(super) stream: &'a str,
    /// What a paced push consumer's bucket holds.
    pub(super) burst_bytes: u64,
    /// Tags flow control requests.
    pub(super) seed: u64,
    pub(super) now_ns: u64,
}

/// What one round of deliveries did.
#[derive(Debug, Default)]
pub(super) struct Delivered {
    /// Messages that went out.
    pub(super) messages: usize,
    /// The turn's budget ([`DELIVERIES_PER_TURN_MAX`]) ran out: consumers
    /// may have more to take, and nothing else wakes the task for them (a
    /// push consumer has no next request).
    pub(super) budget_spent: bool,
    /// Sequences delivered to consumers that take no acks: an interest
    /// stream may release them.
    pub(super) unacknowledged: Vec<u64>,
}

/// What a delivery needs of a stored message besides its bytes, which
/// are read into the delivery scratch buffer: subject, headers, payload.
struct StoredParts {
    timestamp_ns: u64,
    subject_bytes: usize,
    header_bytes: usize,
}

/// xorshift64* seeded by `seed`: names consumers and tags advisories and
/// flow control requests, nothing secret.
pub(super) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed | 1;
    move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The wire status of a queue status; heartbeats carry the consumer's
/// last delivered (consumer, stream) sequences.
fn pull_status(status: &Status, delivered: (u64, u64)) -> PullStatus {
    let signed = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
    match status {
        Status::NoMessages => PullStatus::NoMessages,
        Status::RequestTimeout {
            pending_messages,
            pending_bytes,
        } => PullStatus::RequestTimeout {
            pending_messages: signed(*pending_messages),
            pending_bytes: signed(*pending_bytes),
        },
        Status::RequestsPending => PullStatus::RequestsPending,
        Status::ExceededMaxWaiting => PullStatus::ExceededMaxWaiting,
        Status::MessageSizeExceedsMaxBytes {
            pending_messages,
            pending_bytes,
        } => PullStatus::MessageSizeExceedsMaxBytes {
            pending_messages: signed(*pending_messages),
            pending_bytes: signed(*pending_bytes),
        },
        Status::BatchCompleted { pending_bytes } => PullStatus::BatchCompleted {
            pending_bytes: signed(*pending_bytes),
        },
        Status::IdleHeartbeat => PullStatus::IdleHeartbeat {
            last_consumer_sequence: delivered.0,
            last_stream_sequence: delivered.1,
        },
        Status::ConsumerDeleted => PullStatus::ConsumerDeleted,
    }
}

/// Publishes a pull status on `reply`.
pub(super) fn send_status(outlet: &mut impl Outlet, reply: &[u8], status: &PullStatus) {
    let head = status.header_block();
    outlet.publish(reply, head.len(), head.as_bytes());
}

/// Publishes `consumer`'s queue statuses.
pub(super) fn send_statuses_for(
    outlet: &mut impl Outlet,
    consumer: &Consumer,
    replies: Vec<Reply>,
) {
    let delivered = consumer.delivery.delivered();
    for Reply { reply, status } in replies {
        send_status(outlet, &reply, &pull_status(&status, delivered));
    }
}

impl ConsumerLeader {
    fn send_statuses(&self, outlet: &mut impl Outlet, name: &str, replies: Vec<Reply>) {
        let delivered = self
            .get(name)
            .map_or((0, 0), |consumer| consumer.delivery.delivered());
        for Reply { reply, status } in replies {
            send_status(outlet, &reply, &pull_status(&status, delivered));
        }
    }

    /// A parsed MSG.NEXT (or `+NXT`) body for pull consumer `name`,
    /// answered on `reply`: checked against its config, queued, and what
    /// must be answered at once (a bad request, `no_wait` with nothing,
    /// too many waiting) answered.
    pub(super) fn pull(
        &mut self,
        outlet: &mut impl Outlet,
        name: &str,
        reply: Bytes,
        parsed: Result<consumer_requests::PullRequest, PullStatus>,
        now_ns: u64,
    ) {
        let Some(consumer) = self.get_mut(name) else {
            return;
        };
        // nats-server answers this before it reads the body.
        if consumer.config.is_push() {
            return send_status(outlet, &reply, &PullStatus::ConsumerIsPushBased);
        }
        let checked = parsed.and_then(|request| {
            request.check(&consumer.config)?;
            Ok(request)
        });
        let request = match checked {
            Ok(request) => request,
            Err(status) => return send_status(outlet, &reply, &status),
        };
        let queued = PullRequest {
            reply,
            batch: request.batch.max(0) as u64,
            max_bytes: request.max_bytes.max(0) as u64,
            expires_at_ns: (request.expires_ns > 0)
                .then(|| now_ns.saturating_add(request.expires_ns as u64)),
            no_wait: request.no_wait,
            heartbeat_ns: request.idle_heartbeat_ns.max(0) as u64,
        };
        let mut replies = Vec::new();
        consumer.last_active_unix_ns = now_ns;
        let messages_pending = consumer.num_pending + consumer.delivery.num_ack_pending() as u64;
        let reply = queued.reply.clone();
        if let Err(Some(status)) = consumer
            .pull
            .add(queued, messages_pending, now_ns, &mut replies)
        {
            replies.push(Reply { reply, status });
        }
        let wake = consumer.pull.process(now_ns, false, &mut Vec::new());
        consumer.wake_at(wake);
        self.send_statuses(outlet, name, replies);
    }

    /// Runs every consumer's timers due at `now_ns` on `state`: ack waits,
    /// pull expiries, pull and push heartbeats. Returns the consumers past
    /// their `inactive_threshold`, for the host to delete.
    pub(super) fn run_timers(
        &mut self,
        outlet: &mut impl Outlet,
        state: &ReplicatedState,
        now_ns: u64,
    ) -> Vec<String> {
        let first_sequence = with_store!(&state.store, log => log.state()).first_sequence;
        let mut statuses = Vec::new();
        let mut heartbeats: Vec<(Bytes, String)> = Vec::new();
        let mut inactive = Vec::new();
        for consumer in self.values_mut() {
            if consumer.wake_at_ns.is_none_or(|at| at > now_ns) {
                continue;
            }
            consumer.wake_at_ns = None;
            let pending = consumer.delivery.check_pending(now_ns, first_sequence);
            let mut replies = Vec::new();
            consumer
                .pull
                .drop_uninterested(|reply| outlet.has_interest(reply));
            let pull = consumer.pull.process(now_ns, false, &mut replies);
            consumer.wake_at(pending);
            consumer.wake_at(pull);
            let active = match &consumer.spec.push {
                Some(spec) => outlet.has_interest(&spec.deliver_subject),
                None => !consumer.pull.is_empty(),
            };
            if active {
                consumer.last_active_unix_ns = now_ns;
            }
            let threshold_ns = consumer.spec.inactive_threshold_ns;
            if threshold_ns > 0
                && !active
                && now_ns.saturating_sub(consumer.last_active_unix_ns) >= threshold_ns
            {
                inactive.push(consumer.name.clone());
                continue;
            }
            let (delivered_consumer, delivered_stream) = consumer.delivery.delivered();
            if let (Some(spec), Some(push)) = (&consumer.spec.push, &mut consumer.push) {
                if spec.idle_heartbeat_ns > 0 && push.heartbeat_due_ns <= now_ns {
                    if active {
                        heartbeats.push((
                            spec.deliver_subject.clone(),
                            consumer_responses::push_idle_heartbeat(
                                delivered_consumer,
                                delivered_stream,
                                push.flow_control_reply.as_deref(),
                            ),
                        ));
                    }
                    push.heartbeat_due_ns = now_ns + spec.idle_heartbeat_ns;
                }
            }
            let housekeeping = consumer.next_housekeeping_ns(now_ns);
            consumer.wake_at(housekeeping);
            statuses.push((consumer.name.clone(), replies));
        }
        for (deliver_subject, head) in heartbeats {
            outlet.deliver(
                &deliver_subject,
                &deliver_subject,
                None,
                head.len(),
                head.as_bytes(),
            );
        }
        for (name, replies) in statuses {
            self.send_statuses(outlet, &name, replies);
        }
        inactive
    }

    /// The earliest consumer timer.
    pub(super) fn wake_at_ns(&self) -> Option<u64> {
        self.values()
            .filter_map(|consumer| consumer.wake_at_ns)
            .min()
    }

    /// The interest generation push consumers with messages but no
    /// subscriber were last checked at: the host waits for interest to
    /// change from it (`None`: no consumer waits for a subscriber).
    pub(super) fn awaiting_interest_since(&self) -> Option<u64> {
        self.values()
            .filter(|consumer| consumer.num_pending > 0 || consumer.delivery.num_ack_pending() > 0)
            .filter_map(|consumer| consumer.push.as_ref())
            .filter(|push| !push.active)
            .map(|push| push.interest_generation)
            .min()
    }

    /// Drops `name`'s waiting pull requests whose inbox lost its subscriber.
    pub(super) fn drop_uninterested_requests(&mut self, outlet: &impl Outlet, name: &str) {
        if let Some(consumer) = self.get_mut(name) {
            consumer
                .pull
                .drop_uninterested(|reply| outlet.has_interest(reply));
        }
    }

    /// Serves waiting pull requests and active push consumers of the
    /// round's stream from its store at its `now_ns`, at most
    /// [`DELIVERIES_PER_TURN_MAX`] deliveries.
    pub(super) async fn deliver(
        &mut self,
        outlet: &mut impl Outlet,
        round: DeliveryRound<'_>,
        scratch: &mut DeliveryScratch,
    ) -> Result<Delivered, StoreError> {
        let generation = outlet.interest_generation();
        let mut names: Vec<String> = Vec::new();
        for (name, consumer) in self.iter_mut() {
            let ready = match (&consumer.spec.push, &mut consumer.push) {
                (Some(spec), Some(push)) => {
                    if push.interest_generation != generation {
                        push.interest_generation = generation;
                        push.active = outlet.has_interest(&spec.deliver_subject);
                    }
                    push.active && !push.stalled()
                }
                _ => !consumer.pull.is_empty(),
            };
            if ready {
                names.push(name.clone());
            }
        }
        let mut delivered = Delivered::default();
        for name in names {
            let budget = DELIVERIES_PER_TURN_MAX - delivered.messages;
            self.deliver_to(outlet, round, scratch, &name, budget, &mut delivered)
                .await?;
            if delivered.messages >= DELIVERIES_PER_TURN_MAX {
                delivered.budget_spent = true;
                break;
            }
        }
        assert!(delivered.messages <= DELIVERIES_PER_TURN_MAX);
        Ok(delivered)
    }

    /// Delivers to one consumer (its waiting pull requests, or its deliver
    /// subject), at most `budget` messages.
    async fn deliver_to(
        &mut self,
        outlet: &mut impl Outlet,
        round: DeliveryRound<'_>,
        scratch: &mut DeliveryScratch,
        name: &str,
        budget: usize,
        totals: &mut Delivered,
    ) -> Result<(), StoreError> {
        let DeliveryRound {
            state,
            stream,
            burst_bytes,
            seed,
            now_ns,
        } = round;
        let mut delivered = 0;
        let mut replies = Vec::new();
        let mut end_of_stream = false;
        let mut bytes_since_yield = 0u64;
        let mut yielded = false;
        let result = loop {
            if delivered >= budget {
                break Ok(());
            }
            let Some(consumer) = self.get_mut(name) else {
                break Ok(());
            };
            if consumer.push.is_none() {
                // Someone unsubscribed somewhere: drop requests whose
                // inbox lost its subscriber before they take messages.
                let generation = outlet.interest_generation();
                if consumer.pull_interest_generation != generation {
                    consumer.pull_interest_generation = generation;
                    consumer
                        .pull
                        .drop_uninterested(|reply| outlet.has_interest(reply));
                }
            }
            let can_take = match &consumer.push {
                Some(push) => push.active && !push.stalled(),
                None => !consumer.pull.is_empty(),
            };
            if !can_take {
                break Ok(());
            }
            let (sequence, redelivery) = match self.choose(&state.store, name) {
                None | Some(Chosen::Stalled) => break Ok(()),
                Some(Chosen::EndOfStream) => {
                    end_of_stream = true;
                    break Ok(());
                }
                Some(Chosen::Redelivery(sequence)) => (sequence, true),
                Some(Chosen::New(sequence)) => (sequence, false),
            };
            let read = with_store!(&state.store, log => log.read_with(sequence, |view| {
                scratch.message.clear();
                scratch.message.extend_from_slice(view.subject);
                scratch.message.extend_from_slice(view.headers);
                scratch.message.extend_from_slice(view.payload);
                StoredParts {
                    timestamp_ns: view.timestamp_ns,
                    subject_bytes: view.subject.len(),
                    header_bytes: view.headers.len(),
                }
            })
            .await);
            let message = match read {
                Ok(message) => message,
                Err(error) => break Err(error),
            };
            let consumer = self.get_mut(name).expect("looked up above");
            let Some(message) = message else {
                if redelivery {
                    consumer.delivery.message_gone(sequence);
                } else if consumer.start_list.front() == Some(&sequence) {
                    consumer.start_list.pop_front();
                }
                continue;
            };
            // Replay original: new messages keep the gaps they were stored
            // with until the consumer has caught up with its creation.
            if !redelivery && consumer.spec.replay_original && sequence <= consumer.replay_until {
                if let Some((stored_ns, wall_ns)) = consumer.replay_clock {
                    let due_ns =
                        wall_ns.saturating_add(message.timestamp_ns.saturating_sub(stored_ns));
                    if due_ns > now_ns {
                        consumer.wake_at(Some(due_ns));
                        break Ok(());
                    }
                }
            }
            let pending_after = consumer.num_pending.saturating_sub(u64::from(!redelivery));
            let upcoming = consumer.delivery.upcoming(sequence);
            write_ack_subject(
                &mut scratch.ack_subject,
                stream,
                name,
                [
                    upcoming.delivery_count,
                    sequence,
                    upcoming.consumer_sequence,
                    message.timestamp_ns,
                    pending_after,
                ],
            );
            let (subject, stored_body) = scratch.message.split_at(message.subject_bytes);
            // Headers and payload lie back to back: the body as stored.
            let (header_bytes, body): (usize, Cow<'_, [u8]>) = if consumer.spec.headers_only {
                let (headers, payload) = stored_body.split_at(message.header_bytes);
                let block = headers_only(headers, payload.len());
                (block.len(), Cow::Owned(block))
            } else {
                (message.header_bytes, Cow::Borrowed(stored_body))
            };
            let size_bytes = (subject.len() + scratch.ack_subject.len() + body.len()) as u64;
            if let (Some(spec), Some(push)) = (&consumer.spec.push, &mut consumer.push) {
                if spec.rate_limit_bps > 0 {
                    // A new bucket at the first paced delivery and after an
                    // update changed the rate.
                    let stale = push
                        .rate_limit
                        .as_ref()
                        .is_none_or(|limit| limit.rate_limit_bps() != spec.rate_limit_bps);
                    if stale {
                        push.rate_limit =
                            Some(RateLimit::new(spec.rate_limit_bps, burst_bytes, now_ns));
                    }
                    let limit = push.rate_limit.as_mut().expect("made above");
                    if let Err(due_ns) = limit.take(size_bytes, now_ns) {
                        consumer.wake_at(Some(due_ns));
                        break Ok(());
                    }
                }
            }
            let mut flow_control = false;
            let inbox: Bytes = match (&consumer.spec.push, &mut consumer.push) {
                (Some(spec), Some(push)) => {
                    flow_control = push.delivered(size_bytes);
                    if spec.idle_heartbeat_ns > 0 {
                        push.heartbeat_due_ns = now_ns + spec.idle_heartbeat_ns;
                    }
                    spec.deliver_subject.clone()
                }
                _ => {
                    let Some(target) = consumer.pull.take(size_bytes, now_ns, &mut replies) else {
                        break Ok(());
                    };
                    consumer.last_active_unix_ns = now_ns;
                    if let Some(status) = target.then {
                        replies.push(Reply {
                            reply: target.reply.clone(),
                            status,
                        });
                    }
                    target.reply
                }
            };
            let delivery = consumer.delivery.delivered_at(sequence, now_ns);
            debug_assert_eq!(delivery, upcoming);
            if consumer.spec.delivery.ack == AckMode::None {
                totals.unacknowledged.push(sequence);
            }
            if !redelivery {
                consumer.num_pending = consumer.num_pending.saturating_sub(1);
                if consumer.start_list.front() == Some(&sequence) {
                    consumer.start_list.pop_front();
                }
                if consumer.spec.replay_original {
                    consumer.replay_clock = Some((message.timestamp_ns, now_ns));
                }
            }
            consumer.last_delivered_unix_ns = now_ns;
            if consumer.spec.delivery.ack != AckMode::None {
                consumer.wake_at(Some(now_ns + consumer.spec.delivery.ack_wait_ns.max(1)));
            }
            outlet.deliver(
                &inbox,
                subject,
                Some(scratch.ack_subject.as_bytes()),
                header_bytes,
                &body,
            );
            if flow_control {
                self.send_flow_control(outlet, stream, name, seed);
            }
            delivered += 1;
            // Let the connections write what is queued (and read the acks
            // coming back) while the rest of a batch is read: the client
            // starts on a batch before its end is built.
            // The first yield comes early: the client waits for the first
            // bytes of a batch; the rest overlaps with its work.
            bytes_since_yield += size_bytes;
            let threshold = if yielded {
                DELIVERY_BYTES_PER_YIELD
            } else {
                DELIVERY_BYTES_FIRST_YIELD
            };
            if bytes_since_yield >= threshold {
                bytes_since_yield = 0;
                yielded = true;
                futures_lite::future::yield_now().await;
            }
        };
        totals.messages += delivered;
        result?;
        if end_of_stream {
            if let Some(consumer) = self.get_mut(name) {
                if consumer.push.is_none() {
                    let wake = consumer.pull.process(now_ns, true, &mut replies);
                    consumer.wake_at(wake);
                }
            }
        }
        self.send_statuses(outlet, name, replies);
        Ok(())
    }

    /// Sends a push consumer's flow control request to its deliver subject.
    fn send_flow_control(&mut self, outlet: &mut impl Outlet, stream: &str, name: &str, seed: u64) {
        let Some(consumer) = self.get_mut(name) else {
            return;
        };
        let (Some(spec), Some(push)) = (&consumer.spec.push, &mut consumer.push) else {
            return;
        };
        // nats-server's fcReply: a random four-character token.
        let random_bits = (xorshift(seed ^ push.pending_bytes)() >> 32) as u32;
        let reply = consumer_responses::flow_control_reply(stream, &consumer.name, random_bits);
        push.requested(reply.clone());
        let head = consumer_responses::FLOW_CONTROL_REQUEST.as_bytes();
        outlet.deliver(
            &spec.deliver_subject,
            &spec.deliver_subject,
            Some(reply.as_bytes()),
            head.len(),
            head,
        );
    }

    /// A reply to a flow control request (`$JS.FC.<stream>.<consumer>.<id>`).
    pub(super) fn flow_control_replied(&mut self, subject: &[u8]) {
        let Ok(subject) = std::str::from_utf8(subject) else {
            return;
        };
        let Some(name) = subject.split('.').nth(3) else {
            return;
        };
        if let Some(push) = self
            .get_mut(name)
            .and_then(|consumer| consumer.push.as_mut())
        {
            push.replied(subject);
        }
    }

    /// Publishes `name`'s queued advisories (max deliveries, naks, terms;
    /// `reason`: a term's), when anyone listens for them, as nats-server
    /// does.
    pub(super) fn publish_events(
        &mut self,
        outlet: &mut impl Outlet,
        stream: &str,
        name: &str,
        reason: Option<&str>,
        seed: u64,
        now_ns: u64,
    ) {
        let Some(consumer) = self.get_mut(name) else {
            return;
        };
        let events = consumer.delivery.take_events();
        if events.is_empty() {
            return;
        }
        let mut random = xorshift(seed);
        for event in events {
            let (subject, body) =
                advisory::consumer_event(stream, name, &event, reason, now_ns, &mut random);
            if outlet.has_interest(subject.as_bytes()) {
                outlet.publish(subject.as_bytes(), 0, body.as_bytes());
            }
        }
    }

    /// Publishes every consumer's queued advisories.
    pub(super) fn publish_all_events(
        &mut self,
        outlet: &mut impl Outlet,
        stream: &str,
        seed: u64,
        now_ns: u64,
    ) {
        let names: Vec<String> = self
            .iter()
            .filter(|(_, consumer)| consumer.delivery.has_events())
            .map(|(name, _)| name.clone())
            .collect();
        for name in names {
            self.publish_events(outlet, stream, &name, None, seed, now_ns);
        }
    }
}
