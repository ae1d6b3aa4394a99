//! The stream task's side of its consumers: adding one (resolving its
//! start and pending count against the store), the delivery loop that
//! serves waiting pull requests, new messages raising `num_pending`, acks,
//! and the consumers' timers. A child of `stream` so it works on the task's
//! own state.

use std::borrow::Cow;

use bytes::Bytes;

use super::super::advisory;
use super::super::api::error::ApiError;
use super::super::consumer::config::{
    self as consumer_config, CreateContext, CreateKind, CreateTarget,
};
use super::super::consumer::delivery::AckMode;
use super::super::consumer::pull::{PullRequest, Reply, Status};
use super::super::consumer::rate_limit::RateLimit;
use super::super::consumer::requests::{
    self as consumer_requests, AckBody, AckSubject, ConsumersRequest,
};
use super::super::consumer::responses::{
    self as consumer_responses, ConsumerInfoState, PullStatus, SequencePair,
};
use super::super::consumer::{headers_only, write_ack_subject, Consumer, ConsumerSpec, Start};
use super::super::JetStream;
use super::config::StreamConfig;
use super::consumer_leader::{last_per_subject, Chosen, Created, Removed, Waiter};
use super::{now_unix_ns, Retention, Store, StoreError, StreamTask};

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

/// A consumer's traffic, queued for the stream task like publishes.
#[derive(Debug)]
pub enum ConsumerCommand {
    /// An ack published to `$JS.ACK.<stream>.<consumer>.…` (subject and
    /// body as received; parsed by the task).
    Ack {
        subject: Bytes,
        body: Bytes,
        reply: Option<Bytes>,
    },
    /// `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`: a pull request.
    Next {
        consumer: String,
        reply: Option<Bytes>,
        payload: Bytes,
    },
}

/// What an ack body asks for (parsed elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckRequest {
    /// `+ACK`, `+OK`, empty.
    Ack,
    /// `-NAK`, with a delay if one was given.
    Nak { delay_ns: Option<u64> },
    /// `+WPI`.
    Progress,
    /// `+TERM`, with its reason if one was given.
    Term { reason: Option<String> },
}

impl StreamTask {
    /// One command from a client; `now_ns` is read once per turn.
    pub(super) fn consumer_command(&mut self, command: ConsumerCommand, now_ns: u64) {
        match command {
            ConsumerCommand::Ack {
                subject,
                body,
                reply,
            } => {
                if subject.starts_with(b"$JS.FC.") {
                    return self.flow_control_reply(&subject);
                }
                let Some(ack) = AckSubject::decode(&subject) else {
                    return;
                };
                // nats-server subscribes per consumer: nobody answers for
                // one that does not exist.
                if !self.replica.consumers.contains(ack.consumer) {
                    return self.js.no_responders(reply);
                }
                let (request, next) = match AckBody::parse(&body) {
                    AckBody::Ack => (Some(AckRequest::Ack), None),
                    AckBody::Nak { delay_ns } => (
                        Some(AckRequest::Nak {
                            delay_ns: delay_ns.map(|delay| delay.max(0) as u64),
                        }),
                        None,
                    ),
                    AckBody::Progress => (Some(AckRequest::Progress), None),
                    AckBody::Term { reason } => (Some(AckRequest::Term { reason }), None),
                    AckBody::Next(next) => (Some(AckRequest::Ack), Some(next)),
                    AckBody::Unknown => (None, None),
                };
                match next {
                    // +NXT: the ack, then a pull request answered on the
                    // ack's reply subject (no empty double-ack reply).
                    Some(next) => {
                        if let Some(request) = request {
                            self.consumer_ack(
                                ack.consumer,
                                ack.stream_sequence,
                                ack.consumer_sequence,
                                request,
                                None,
                                now_ns,
                            );
                        }
                        if let Some(reply) = reply {
                            self.pull_request(ack.consumer, reply, next);
                        }
                    }
                    None => match request {
                        Some(request) => self.consumer_ack(
                            ack.consumer,
                            ack.stream_sequence,
                            ack.consumer_sequence,
                            request,
                            reply,
                            now_ns,
                        ),
                        None => {
                            if let Some(reply) = reply {
                                self.js.publish_reply(&reply, b"");
                            }
                        }
                    },
                }
            }
            ConsumerCommand::Next {
                consumer,
                reply,
                payload,
            } => {
                let Some(reply) = reply else {
                    return;
                };
                if !self.replica.consumers.contains(&consumer) {
                    return self.js.no_responders(Some(reply));
                }
                let parsed = consumer_requests::PullRequest::parse(&payload);
                self.pull_request(&consumer, reply, parsed);
            }
        }
    }

    /// Adds a consumer: resolves where it starts and how many matching
    /// messages lie ahead of it.
    pub(super) fn add_consumer(
        &mut self,
        name: String,
        config: consumer_config::ConsumerConfig,
        spec: ConsumerSpec,
    ) {
        let start_sequence = self.resolve_start(&name, &config, &spec);
        let now_ns = now_unix_ns();
        let created = Created {
            unix_ns: now_ns,
            start_sequence,
        };
        let replica = &mut self.replica;
        replica
            .consumers
            .add(&replica.state.store, name, config, spec, created, now_ns);
    }

    /// The stream sequence a new consumer starts at, from its deliver
    /// policy (`new` counts messages still in flight: they apply first).
    pub(super) fn resolve_start(
        &self,
        name: &str,
        config: &consumer_config::ConsumerConfig,
        spec: &ConsumerSpec,
    ) -> u64 {
        let store = &self.replica.state.store;
        let state = with_store!(store, log => log.state());
        let last_sequence = with_store!(store, log => log.last_sequence());
        let probe = Consumer::new(name.to_string(), config.clone(), spec.clone(), 0, 1, 0);
        match spec.start {
            Start::All => state.first_sequence.max(1),
            Start::New => self.replica.leader.last_sequence.max(last_sequence) + 1,
            Start::Last => {
                let last_match =
                    with_store!(store, log => log.last_matching(|subject| probe.matches(subject)));
                last_match.unwrap_or(last_sequence + 1)
            }
            Start::Sequence(sequence) => sequence.max(1),
            Start::Time(unix_ns) => with_store!(store, log => log.first_at_or_after(unix_ns))
                .unwrap_or(last_sequence + 1),
            Start::LastPerSubject => last_per_subject(store, &probe)
                .front()
                .copied()
                .unwrap_or(last_sequence + 1),
        }
    }

    /// A parsed MSG.NEXT (or `+NXT`) body for `name`, answered on `reply`.
    fn pull_request(
        &mut self,
        name: &str,
        reply: Bytes,
        parsed: Result<consumer_requests::PullRequest, PullStatus>,
    ) {
        let Some(consumer) = self.replica.consumers.get(name) else {
            return;
        };
        // nats-server answers this before it reads the body.
        if consumer.config.is_push() {
            return self.send_status(&reply, &PullStatus::ConsumerIsPushBased);
        }
        let checked = parsed.and_then(|request| {
            request.check(&consumer.config)?;
            Ok(request)
        });
        let request = match checked {
            Ok(request) => request,
            Err(status) => return self.send_status(&reply, &status),
        };
        let now_ns = now_unix_ns();
        let queued = PullRequest {
            reply,
            batch: request.batch.max(0) as u64,
            max_bytes: request.max_bytes.max(0) as u64,
            expires_at_ns: (request.expires_ns > 0)
                .then(|| now_ns.saturating_add(request.expires_ns as u64)),
            no_wait: request.no_wait,
            heartbeat_ns: request.idle_heartbeat_ns.max(0) as u64,
        };
        self.consumer_pull(name, queued);
    }

    /// Queues a pull request and answers what must be answered at once.
    pub(super) fn consumer_pull(&mut self, name: &str, request: PullRequest) {
        let now_ns = now_unix_ns();
        let mut replies = Vec::new();
        let Some(consumer) = self.replica.consumers.get_mut(name) else {
            return;
        };
        consumer.last_active_unix_ns = now_ns;
        let messages_pending = consumer.num_pending + consumer.delivery.num_ack_pending() as u64;
        let reply = request.reply.clone();
        if let Err(Some(status)) =
            consumer
                .pull
                .add(request, messages_pending, now_ns, &mut replies)
        {
            replies.push(Reply { reply, status });
        }
        let wake = consumer.pull.process(now_ns, false, &mut Vec::new());
        consumer.wake_at(wake);
        self.send_statuses(name, replies);
    }

    /// An ack for `consumer` (from its ack subject's numbers and body).
    pub(super) fn consumer_ack(
        &mut self,
        name: &str,
        stream_sequence: u64,
        consumer_sequence: u64,
        request: AckRequest,
        reply: Option<Bytes>,
        now_ns: u64,
    ) {
        let acknowledging = matches!(request, AckRequest::Ack | AckRequest::Term { .. });
        let Some((floor, term_reason)) = self.replica.consumers.acknowledge(
            name,
            stream_sequence,
            consumer_sequence,
            request,
            now_ns,
        ) else {
            return;
        };
        self.publish_events(name, term_reason.as_deref());
        if acknowledging && self.replica.state.config.retention != Retention::Limits {
            self.release(stream_sequence, floor.moved());
        }
        // Double ack: an empty message once it is processed (for a
        // durable, once a snapshot holding it applied).
        if let Some(reply) = reply {
            self.answer_ack(name, reply);
        }
    }

    /// Runs every consumer's timers due at `now_ns`: ack waits, pull
    /// expiries, pull and push heartbeats, and `inactive_threshold`.
    pub(super) fn consumer_timers(&mut self, now_ns: u64) {
        let first_sequence =
            with_store!(&self.replica.state.store, log => log.state()).first_sequence;
        let shard = self.js.shard();
        let mut statuses = Vec::new();
        let mut heartbeats: Vec<(Bytes, String)> = Vec::new();
        let mut inactive = Vec::new();
        for consumer in self.replica.consumers.values_mut() {
            if consumer.wake_at_ns.is_none_or(|at| at > now_ns) {
                continue;
            }
            consumer.wake_at_ns = None;
            let pending = consumer.delivery.check_pending(now_ns, first_sequence);
            let mut replies = Vec::new();
            consumer
                .pull
                .drop_uninterested(|reply| shard.has_interest(reply));
            let pull = consumer.pull.process(now_ns, false, &mut replies);
            consumer.wake_at(pending);
            consumer.wake_at(pull);
            let active = match &consumer.spec.push {
                Some(spec) => shard.has_interest(&spec.deliver_subject),
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
            shard.publish_delivery(
                &deliver_subject,
                &deliver_subject,
                None,
                head.len(),
                head.as_bytes(),
            );
        }
        for (name, replies) in statuses {
            self.send_statuses(&name, replies);
        }
        for name in inactive {
            log::debug!(target: "tern::jetstream", "stream {}: consumer {name} inactive, deleted", self.handle.name);
            if self.is_logged(&name) {
                // A durable's deletion goes through the log like an API one.
                if let Err(error) = self.propose_consumer_delete(0, None, &name) {
                    log::warn!(target: "tern::jetstream", "stream {}: deleting inactive {name}: {}", self.handle.name, error.description);
                }
            } else {
                self.remove_consumer(&name);
            }
        }
    }

    /// Removes a consumer kept in memory only.
    pub(super) fn remove_consumer(&mut self, name: &str) -> bool {
        let Some(removed) = self.replica.consumers.remove(name) else {
            return false;
        };
        self.close_consumer(removed);
        true
    }

    /// A consumer went: its waiting pull requests hear 409 Consumer
    /// Deleted, acks processed before a durable's delete are answered, and
    /// an interest stream releases what only it needed.
    pub(super) fn close_consumer(&mut self, removed: Removed) {
        let Removed {
            mut consumer,
            waiting,
        } = removed;
        for waiter in waiting {
            match waiter {
                Waiter::Ack { reply } => self.js.publish_reply(&reply, b""),
                Waiter::Info { origin, reply } => self.answer_error(
                    origin,
                    Some(reply),
                    "consumer_info_response",
                    &ApiError::consumer_not_found(),
                ),
            }
        }
        let closed = consumer.pull.close();
        self.send_statuses_for(&consumer, closed);
        self.release_after_removal(consumer.delivery.ack_floor().1);
    }

    /// The earliest consumer timer.
    pub(super) fn consumers_wake_at_ns(&self) -> Option<u64> {
        self.replica
            .consumers
            .values()
            .filter_map(|consumer| consumer.wake_at_ns)
            .min()
    }

    /// The interest generation push consumers with messages but no
    /// subscriber were last checked at: the task waits for interest to
    /// change from it (`None`: no consumer waits for a subscriber).
    pub(super) fn awaiting_interest_since(&self) -> Option<u64> {
        self.replica
            .consumers
            .values()
            .filter(|consumer| consumer.num_pending > 0 || consumer.delivery.num_ack_pending() > 0)
            .filter_map(|consumer| consumer.push.as_ref())
            .filter(|push| !push.active)
            .map(|push| push.interest_generation)
            .min()
    }

    /// Serves waiting pull requests and active push consumers from the
    /// store, at most [`DELIVERIES_PER_TURN_MAX`] deliveries.
    pub(super) async fn deliver_to_consumers(&mut self) -> Result<(), StoreError> {
        let generation = self.js.shard().interest_generation();
        let mut names: Vec<String> = Vec::new();
        for (name, consumer) in self.replica.consumers.iter_mut() {
            let ready = match (&consumer.spec.push, &mut consumer.push) {
                (Some(spec), Some(push)) => {
                    if push.interest_generation != generation {
                        push.interest_generation = generation;
                        push.active = self.js.shard().has_interest(&spec.deliver_subject);
                    }
                    push.active && !push.stalled()
                }
                _ => !consumer.pull.is_empty(),
            };
            if ready {
                names.push(name.clone());
            }
        }
        let mut budget = DELIVERIES_PER_TURN_MAX;
        for name in names {
            budget -= self.deliver(&name, budget).await?;
            if budget == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Drops `name`'s waiting pull requests whose inbox lost its subscriber.
    fn drop_uninterested_requests(&mut self, name: &str) {
        let shard = self.js.shard();
        if let Some(consumer) = self.replica.consumers.get_mut(name) {
            consumer
                .pull
                .drop_uninterested(|reply| shard.has_interest(reply));
        }
    }

    /// Delivers to one consumer (its waiting pull requests, or its deliver
    /// subject); returns how many messages went out.
    async fn deliver(&mut self, name: &str, budget: usize) -> Result<usize, StoreError> {
        let mut delivered = 0;
        let mut released = Vec::new();
        let mut replies = Vec::new();
        let mut end_of_stream = false;
        // One clock read per turn: a turn is at most a batch's worth.
        let now_ns = now_unix_ns();
        let mut scratch = std::mem::take(&mut self.delivery_scratch);
        let mut bytes_since_yield = 0u64;
        let mut yielded = false;
        let result = loop {
            if delivered >= budget {
                break Ok(());
            }
            let Some(consumer) = self.replica.consumers.get_mut(name) else {
                break Ok(());
            };
            if consumer.push.is_none() {
                // Someone unsubscribed somewhere: drop requests whose
                // inbox lost its subscriber before they take messages.
                let shard = self.js.shard();
                let generation = shard.interest_generation();
                if consumer.pull_interest_generation != generation {
                    consumer.pull_interest_generation = generation;
                    consumer
                        .pull
                        .drop_uninterested(|reply| shard.has_interest(reply));
                }
            }
            let can_take = match &consumer.push {
                Some(push) => push.active && !push.stalled(),
                None => !consumer.pull.is_empty(),
            };
            if !can_take {
                break Ok(());
            }
            let replica = &mut self.replica;
            let (sequence, redelivery) = match replica.consumers.choose(&replica.state.store, name)
            {
                None | Some(Chosen::Stalled) => break Ok(()),
                Some(Chosen::EndOfStream) => {
                    end_of_stream = true;
                    break Ok(());
                }
                Some(Chosen::Redelivery(sequence)) => (sequence, true),
                Some(Chosen::New(sequence)) => (sequence, false),
            };
            let read = with_store!(&self.replica.state.store, log => log.read_with(sequence, |view| {
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
            let consumer = self
                .replica
                .consumers
                .get_mut(name)
                .expect("looked up above");
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
                &self.handle.name,
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
                        let burst_bytes = rate_burst_bytes(&self.replica.state.config, &self.js);
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
                released.push(sequence);
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
            self.js.shard().publish_delivery(
                &inbox,
                subject,
                Some(scratch.ack_subject.as_bytes()),
                header_bytes,
                &body,
            );
            if flow_control {
                self.send_flow_control(name);
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
        self.delivery_scratch = scratch;
        result?;
        if end_of_stream {
            if let Some(consumer) = self.replica.consumers.get_mut(name) {
                if consumer.push.is_none() {
                    let wake = consumer.pull.process(now_unix_ns(), true, &mut replies);
                    consumer.wake_at(wake);
                }
            }
        }
        self.send_statuses(name, replies);
        if self.replica.state.config.retention != Retention::Limits {
            for sequence in released {
                self.release(sequence, None);
            }
        }
        Ok(delivered)
    }

    /// Interest and work-queue retention: the removals no consumer needs
    /// any more ([`Leader::release`]).
    pub(super) fn release(
        &mut self,
        sequence: u64,
        floor_moved: Option<std::ops::RangeInclusive<u64>>,
    ) {
        let (leader, state, consumers) = (
            &mut self.replica.leader,
            &self.replica.state,
            &self.replica.consumers,
        );
        self.groups.with_node(self.group, |node| {
            leader.release(state, node, sequence, floor_moved, |subject, candidate| {
                consumers.needs(subject, candidate)
            })
        });
    }

    /// An interest stream lost a consumer: messages only it needed go.
    fn release_after_removal(&mut self, floor_stream: u64) {
        if self.replica.state.config.retention != Retention::Interest {
            return;
        }
        let last = with_store!(&self.replica.state.store, log => log.last_sequence());
        if let Some(first) = with_store!(&self.replica.state.store, log => log.next_matching(floor_stream + 1, |_| true))
        {
            self.release(first, Some(first..=last));
        }
    }

    /// Publishes `name`'s queued advisories (max deliveries, NAKs, terms),
    /// when anyone listens for them, as nats-server does.
    pub(super) fn publish_events(&mut self, name: &str, reason: Option<&str>) {
        let Some(consumer) = self.replica.consumers.get_mut(name) else {
            return;
        };
        let events = consumer.delivery.take_events();
        if events.is_empty() {
            return;
        }
        let shard = self.js.shard();
        let mut random = xorshift(now_unix_ns() ^ (self.group << 17));
        for event in events {
            let (subject, body) = advisory::consumer_event(
                &self.handle.name,
                name,
                &event,
                reason,
                now_unix_ns(),
                &mut random,
            );
            if shard.has_interest(subject.as_bytes()) {
                shard.publish_internal(subject.as_bytes(), 0, body.as_bytes());
            }
        }
    }

    /// Publishes every consumer's queued advisories.
    pub(super) fn publish_all_events(&mut self) {
        let names: Vec<String> = self
            .replica
            .consumers
            .iter()
            .filter(|(_, consumer)| consumer.delivery.has_events())
            .map(|(name, _)| name.clone())
            .collect();
        for name in names {
            self.publish_events(&name, None);
        }
    }

    /// Sends a push consumer's flow control request to its deliver subject.
    fn send_flow_control(&mut self, name: &str) {
        let Some(consumer) = self.replica.consumers.get_mut(name) else {
            return;
        };
        let (Some(spec), Some(push)) = (&consumer.spec.push, &mut consumer.push) else {
            return;
        };
        // nats-server's fcReply: a random four-character token.
        let random_bits = (xorshift(now_unix_ns() ^ (self.group << 17))() >> 32) as u32;
        let reply =
            consumer_responses::flow_control_reply(&self.handle.name, &consumer.name, random_bits);
        push.requested(reply.clone());
        let head = consumer_responses::FLOW_CONTROL_REQUEST.as_bytes();
        self.js.shard().publish_delivery(
            &spec.deliver_subject,
            &spec.deliver_subject,
            Some(reply.as_bytes()),
            head.len(),
            head,
        );
    }

    /// A reply to a flow control request (`$JS.FC.<stream>.<consumer>.<id>`).
    fn flow_control_reply(&mut self, subject: &[u8]) {
        let Ok(subject) = std::str::from_utf8(subject) else {
            return;
        };
        let Some(name) = subject.split('.').nth(3) else {
            return;
        };
        if let Some(push) = self
            .replica
            .consumers
            .get_mut(name)
            .and_then(|consumer| consumer.push.as_mut())
        {
            push.replied(subject);
        }
    }

    fn send_statuses(&self, name: &str, replies: Vec<Reply>) {
        let delivered = self
            .replica
            .consumers
            .get(name)
            .map_or((0, 0), |consumer| consumer.delivery.delivered());
        for Reply { reply, status } in replies {
            self.send_status(&reply, &pull_status(&status, delivered));
        }
    }

    fn send_status(&self, reply: &[u8], status: &PullStatus) {
        let head = status.header_block();
        self.js
            .shard()
            .publish_internal(reply, head.len(), head.as_bytes());
    }

    // ----- the consumer API ---------------------------------------------------

    /// `$JS.API.CONSUMER.…` for this stream; `tokens` follow `CONSUMER.`.
    pub(super) fn consumer_api(
        &mut self,
        origin: usize,
        reply: Option<Bytes>,
        payload: &[u8],
        tokens: &[&str],
    ) {
        let kind = match tokens.first() {
            Some(&"INFO") => "consumer_info_response",
            Some(&"DELETE") => "consumer_delete_response",
            Some(&"NAMES") => "consumer_names_response",
            Some(&"LIST") => "consumer_list_response",
            _ => "consumer_create_response",
        };
        if let ["INFO", _, name] = tokens {
            // As nats-server's info: requests nobody listens to don't count.
            self.drop_uninterested_requests(name);
        }
        let result = match tokens {
            ["CREATE", ..] | ["DURABLE", "CREATE", ..] => {
                let Some(target) = CreateTarget::from_tokens(tokens) else {
                    return; // nats-server has no subscription there
                };
                self.create_consumer(origin, &reply, &target, payload)
            }
            ["INFO", _, name] if self.is_logged(name) => {
                Ok(self.durable_info(origin, reply.clone(), name))
            }
            ["INFO", _, name] => match self.replica.consumers.get(name) {
                Some(consumer) => Ok(Some(self.consumer_info(consumer, "consumer_info_response"))),
                None => Err(ApiError::consumer_not_found()),
            },
            ["DELETE", _, name] if self.is_logged(name) => self
                .propose_consumer_delete(origin, reply.clone(), name)
                .map(|()| None),
            ["DELETE", _, name] => match self.remove_consumer(name) {
                true => Ok(Some(consumer_responses::consumer_delete_response())),
                false => Err(ApiError::consumer_not_found()),
            },
            ["NAMES", _] | ["LIST", _] => ConsumersRequest::parse(payload)
                .map(|request| Some(self.consumer_page(tokens[0] == "LIST", request.offset))),
            _ => return,
        };
        match result {
            // Owed: answered when its entry applies.
            Ok(None) => {}
            Ok(Some(body)) => {
                if let Some(reply) = reply {
                    self.js.respond(origin, reply, body);
                }
            }
            Err(error) => self.answer_error(origin, reply, kind, &error),
        }
    }

    /// A CONSUMER.NAMES or CONSUMER.LIST page.
    fn consumer_page(&self, list: bool, offset: usize) -> String {
        let names: Vec<String> = self.replica.consumers.names().cloned().collect();
        let total = names.len();
        if !list {
            let page = consumer_responses::page_of(names, offset, consumer_responses::NAMES_LIMIT);
            return consumer_responses::consumer_names_response(total, offset, &page);
        }
        let page = consumer_responses::page_of(names, offset, consumer_responses::LIST_LIMIT);
        let infos: Vec<String> = page
            .iter()
            .filter_map(|name| self.replica.consumers.get(name))
            .map(|consumer| {
                consumer_responses::consumer_info_object(
                    &self.handle.name,
                    &consumer.name,
                    &consumer.config,
                    consumer.created_unix_ns,
                    &self.consumer_state(consumer),
                    now_unix_ns(),
                )
            })
            .collect();
        consumer_responses::consumer_list_response(total, offset, &infos)
    }

    /// `Ok(None)`: a durable's create or update was proposed and is
    /// answered when it applies.
    fn create_consumer(
        &mut self,
        origin: usize,
        reply: &Option<Bytes>,
        target: &CreateTarget,
        payload: &[u8],
    ) -> Result<Option<String>, ApiError> {
        let existing: Vec<(String, consumer_config::ConsumerConfig)> = self
            .replica
            .consumers
            .iter()
            .map(|(name, consumer)| (name.clone(), consumer.config.clone()))
            .collect();
        let pairs: Vec<(&str, &consumer_config::ConsumerConfig)> = existing
            .iter()
            .map(|(name, config)| (name.as_str(), config))
            .collect();
        let mut random = xorshift(now_unix_ns() ^ (self.group << 17));
        let config = self.replica.state.config.clone();
        let outcome = consumer_config::parse_create(
            target,
            payload,
            CreateContext {
                stream: Some(&config),
                consumers: &pairs,
                random: &mut random,
            },
        )?;
        let spec = ConsumerSpec::from_config(&outcome.config)?;
        if self.persists(&outcome.config) {
            self.propose_consumer_create(
                origin,
                reply.clone(),
                outcome.name,
                &outcome.config,
                &spec,
            )?;
            return Ok(None);
        }
        match outcome.kind {
            CreateKind::Created => {
                self.add_consumer(outcome.name.clone(), outcome.config, spec);
            }
            CreateKind::Updated => {
                self.replica
                    .consumers
                    .update(&outcome.name, outcome.config, spec, now_unix_ns());
            }
        }
        let consumer = self
            .replica
            .consumers
            .get(&outcome.name)
            .expect("created above");
        Ok(Some(
            self.consumer_info(consumer, "consumer_create_response"),
        ))
    }

    fn consumer_state(&self, consumer: &Consumer) -> ConsumerInfoState {
        let (delivered_consumer, delivered_stream) = consumer.delivery.delivered();
        let (floor_consumer, floor_stream) = consumer.delivery.ack_floor();
        let state = with_store!(&self.replica.state.store, log => log.state());
        let last_sequence = with_store!(&self.replica.state.store, log => log.last_sequence());
        let active = |unix_ns: u64| (unix_ns > 0).then_some(unix_ns);
        ConsumerInfoState {
            delivered: SequencePair {
                consumer_sequence: delivered_consumer,
                stream_sequence: delivered_stream,
                last_active_unix_ns: active(consumer.last_delivered_unix_ns),
            },
            ack_floor: SequencePair {
                consumer_sequence: floor_consumer,
                stream_sequence: floor_stream,
                last_active_unix_ns: active(consumer.last_acked_unix_ns),
            },
            num_ack_pending: consumer.delivery.num_ack_pending() as u64,
            num_redelivered: consumer.delivery.num_redelivered() as u64,
            num_waiting: consumer.pull.len() as u64,
            num_pending: consumer.reported_num_pending(state.messages, last_sequence),
            push_bound: consumer
                .spec
                .push
                .as_ref()
                .is_some_and(|spec| self.js.shard().has_interest(&spec.deliver_subject)),
            ..ConsumerInfoState::default()
        }
    }

    pub(super) fn consumer_info(&self, consumer: &Consumer, kind: &str) -> String {
        consumer_responses::consumer_info_response(
            kind,
            &self.handle.name,
            &consumer.name,
            &consumer.config,
            consumer.created_unix_ns,
            &self.consumer_state(consumer),
            now_unix_ns(),
        )
    }

    fn send_statuses_for(&self, consumer: &Consumer, replies: Vec<Reply>) {
        let delivered = consumer.delivery.delivered();
        for Reply { reply, status } in replies {
            self.send_status(&reply, &pull_status(&status, delivered));
        }
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

/// xorshift64* seeded by `seed`: names consumers and tags advisories and
/// flow control requests, nothing secret.
fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed | 1;
    move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// What a delivery needs of a stored message besides its bytes, which
/// are read into the delivery scratch buffer: subject, headers, payload.
struct StoredParts {
    timestamp_ns: u64,
    subject_bytes: usize,
    header_bytes: usize,
}

/// A paced push consumer's bucket holds one message at most, as
/// nats-server's: the stream's `max_msg_size`, else the server's `max_payload`.
fn rate_burst_bytes(config: &StreamConfig, js: &JetStream) -> u64 {
    match config.max_msg_size {
        size if size > 0 => size as u64,
        _ => js.shard().config.limits.max_payload_bytes as u64,
    }
}
